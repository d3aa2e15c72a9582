//! The audit log as files: a stopped monitor's store (what `wardenctl audit
//! verify --data` and `audit export --data` read), the segments' sizes and
//! ends (what retention looks at), and taking a sealed segment away.

use super::*;

/// A stopped monitor's store, opened for reading: whatever its audit log
/// holds beyond sled's last flush applied first, so that every
/// acknowledged record is there even after a crash.
pub struct StoppedStore {
    log_dir: PathBuf,
    head: Head,
}

impl StoppedStore {
    /// Opens the store folder `dir` (the monitor must not be running: sled
    /// allows one process).
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let recovered = recover(dir, Durability::Fsync)?;
        Ok(Self { log_dir: recovered.log_dir, head: recovered.head })
    }

    /// The newest record.
    pub fn head(&self) -> &Head {
        &self.head
    }

    /// Walks the chain (see [`verify_chain`]).
    pub fn verify(&self) -> VerifyReport {
        chain::verify_log(&self.log_dir, self.head.seq)
    }

    /// Records from `from_seq` on, in order.
    pub fn records(&self, from_seq: u64) -> impl Iterator<Item = Result<AuditRecord, StoreError>> + use<> {
        chain::Records::new(Cursor::new(&self.log_dir, from_seq), u64::MAX).map(|r| r.map_err(StoreError::from))
    }

    /// The stored hash of record `seq`.
    pub fn hash_at(&self, seq: u64) -> Result<Option<String>, StoreError> {
        let mut cursor = Cursor::new(&self.log_dir, seq);
        Ok(cursor.next_page(seq, 1)?.into_iter().find(|r| r.seq == seq).map(|r| r.hash))
    }

    /// The first record at or after `unix_ns`.
    pub fn seq_at_time(&self, unix_ns: i64) -> Result<u64, StoreError> {
        Ok(log::seq_at_time(&self.log_dir, unix_ns, u64::MAX)?)
    }

    /// Writes the log again as `records` (in seq order; a gap in the
    /// numbering starts a new segment), replacing what is there: what
    /// someone with write access to the disk can do, for tests that check
    /// that verification catches it.
    #[doc(hidden)]
    pub fn rewrite(&self, records: &[AuditRecord]) -> Result<(), StoreError> {
        let staging = self.log_dir.with_extension("rewrite");
        if staging.exists() {
            std::fs::remove_dir_all(&staging).map_err(log::io_error(&staging))?;
        }
        write_log(&staging, records.iter().cloned().map(Ok))?;
        std::fs::remove_dir_all(&self.log_dir).map_err(log::io_error(&self.log_dir))?;
        if staging.exists() {
            std::fs::rename(&staging, &self.log_dir).map_err(log::io_error(&self.log_dir))?;
        } else {
            std::fs::create_dir_all(&self.log_dir).map_err(log::io_error(&self.log_dir))?;
        }
        Ok(())
    }
}

/// The audit log's segments, as retention and metrics see them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogStats {
    /// Oldest first; the last one is being written.
    pub segments: Vec<SegmentStat>,
    /// Segments wholly before this seq are no longer needed to rebuild
    /// sled's state.
    pub replay_from: u64,
}

/// One segment file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentStat {
    /// The first seq it holds.
    pub first_seq: u64,
    /// Its size in bytes.
    pub bytes: u64,
    /// The file.
    pub path: PathBuf,
}

/// Writes `records` (in seq order) as a new log in `dir`: frames of up to
/// a thousand records, a new segment when one is full or the numbering has
/// a gap (where verification reports it), every segment sealed. For
/// migration from an earlier version's sled tree, and for
/// [`StoppedStore::rewrite`].
pub(super) fn write_log(
    dir: &Path,
    records: impl Iterator<Item = Result<AuditRecord, StoreError>>,
) -> Result<(), StoreError> {
    let mut writer: Option<LogWriter> = None;
    let mut batch: Vec<AuditRecord> = Vec::new();
    let write = |writer: &mut Option<LogWriter>, batch: &mut Vec<AuditRecord>| -> Result<(), StoreError> {
        let Some(first) = batch.first() else { return Ok(()) };
        let base = Head { seq: first.seq.saturating_sub(1), hash: first.prev_hash.clone() };
        let log = match writer.as_mut() {
            Some(log) if !log.full() && log.next_seq() == first.seq => log,
            Some(log) => {
                log.rotate(&base, None)?.seal().map_err(log::io_error(dir))?;
                log
            }
            None => writer.insert(LogWriter::create(dir, &base, false, None, log::DEFAULT_SEGMENT_BYTES)?),
        };
        let refs: Vec<&AuditRecord> = batch.iter().collect();
        let frame = log.frame(&refs, &[]);
        log.append(&frame)?;
        batch.clear();
        Ok(())
    };
    for record in records {
        let record = record?;
        if batch.last().is_some_and(|last| last.seq + 1 != record.seq) || batch.len() == 1000 {
            write(&mut writer, &mut batch)?;
        }
        batch.push(record);
    }
    write(&mut writer, &mut batch)?;
    if let Some(log) = writer {
        log::Sealed { file: log.file(), len: log.len() }.seal().map_err(log::io_error(dir))?;
    }
    Ok(())
}

pub(super) fn stats(log_dir: &Path, replay_from: u64) -> Result<LogStats, StoreError> {
    let segments = log::segments(log_dir)?
        .into_iter()
        .map(|s| {
            let bytes = std::fs::metadata(&s.path).map(|m| m.len()).unwrap_or(0);
            SegmentStat { first_seq: s.first_seq, bytes, path: s.path }
        })
        .collect();
    Ok(LogStats { segments, replay_from })
}

/// The last record of the sealed segment at `path` (its head and time),
/// once its own chain is checked: every record links to the one before,
/// from the header's hash, and matches its hash. Retention signs this head
/// before the segment goes, so it must not sign over tampering.
pub(crate) fn segment_end(path: &Path, first_seq: u64) -> Result<Option<(Head, i64)>, StoreError> {
    let mut reader = log::SegmentReader::open_at(path, first_seq)?;
    let base = reader.base();
    // A frame at a time: a sealed segment holds a few hundred thousand
    // records, which would take hundreds of megabytes at once.
    let mut failure: Option<LogError> = None;
    let mut last_time = None;
    let frames = std::iter::from_fn(|| match reader.next_frame() {
        Ok(Ok(frame)) => Some(frame.records),
        Ok(Err(log::End::Clean)) => None,
        Ok(Err(log::End::Damaged(offset, why))) => {
            failure = Some(LogError::Corrupt { path: path.to_owned(), offset, why });
            None
        }
        Err(e) => {
            failure = Some(e);
            None
        }
    });
    let records = frames.flatten().inspect(|r| last_time = Some(r.time_unix_ns)).map(Ok::<_, String>);
    let report = verify_chain(base, records);
    if let Some(e) = failure {
        return Err(e.into());
    }
    if let Some((seq, why)) = report.first_bad {
        return Err(StoreError::Corrupt { tree: "audit log", key: seq.to_string(), message: why });
    }
    Ok(last_time.filter(|_| report.records > 0).map(|time| (report.head, time)))
}

pub(super) fn remove_segment(
    log_dir: &Path,
    first_seq: u64,
    replay_from: u64,
    archive: Option<&Path>,
) -> Result<(), StoreError> {
    let found = log::segments(log_dir)?;
    let at = found.iter().position(|s| s.first_seq == first_seq);
    let (Some(at), Some(next)) = (at, at.and_then(|at| found.get(at + 1))) else {
        return Err(StoreError::Corrupt {
            tree: "audit log",
            key: first_seq.to_string(),
            message: "no sealed segment starts there".into(),
        });
    };
    if next.first_seq > replay_from {
        return Err(StoreError::Corrupt {
            tree: "audit log",
            key: first_seq.to_string(),
            message: "the segment is still needed to rebuild the store's state".into(),
        });
    }
    let Some(path) = found.get(at).map(|s| &s.path) else { return Ok(()) };
    if let Some(archive) = archive {
        std::fs::create_dir_all(archive).map_err(log::io_error(archive))?;
        let same = std::fs::canonicalize(archive).ok() == std::fs::canonicalize(log_dir).ok();
        if same {
            return Err(StoreError::Corrupt {
                tree: "audit log",
                key: archive.display().to_string(),
                message: "archive_dir is the live log's folder".into(),
            });
        }
        let to = archive.join(path.file_name().unwrap_or_default());
        // Copied and synced before the live one goes: a crash leaves both,
        // never neither.
        std::fs::copy(path, &to).map_err(log::io_error(&to))?;
        File::open(&to).and_then(|f| f.sync_all()).map_err(log::io_error(&to))?;
        log::sync_dir(archive)?;
    }
    std::fs::remove_file(path).map_err(log::io_error(path))?;
    log::sync_dir(log_dir)?;
    Ok(())
}
