//! Opening a store: sled, then an earlier version's write-ahead log and
//! sled-kept audit records carried over, then the state changes of the
//! audit log's newest segments applied on top.

use super::*;

/// The audit log's folder in the store folder.
pub(super) const LOG_DIR: &str = "audit";
/// Where an earlier version's audit records are written before the folder
/// takes [`LOG_DIR`]'s name.
const MIGRATING_DIR: &str = "audit.migrating";

/// What [`recover`] opened.
pub(super) struct Recovered {
    pub(super) db: sled::Db,
    pub(super) trees: Trees,
    /// sled's log file, fsynced after each of its flushes (fsync durability).
    pub(super) db_file: Option<Arc<File>>,
    pub(super) log_dir: PathBuf,
    /// The newest record.
    pub(super) head: Head,
    /// Segments before this seq need no replay.
    pub(super) replay_from: u64,
}

/// Opens sled in `dir`, carries over what an earlier version left (its
/// write-ahead log, its audit tree), and applies the state changes of the
/// audit log's segments from sled's last checkpoint on; then flushes sled.
pub(super) fn recover(dir: &Path, durability: Durability) -> Result<Recovered, StoreError> {
    // The writer makes every answer durable through the audit log: sled's
    // own 500 ms flusher would only write the same data twice. sled keeps
    // written pages in memory up to its cache capacity (1 GiB by default).
    let db = sled::Config::new()
        .path(dir)
        .mode(sled::Mode::HighThroughput)
        .flush_every_ms(None)
        .cache_capacity(CACHE_BYTES)
        .open()?;
    // sled 0.34 flushes with sync_file_range; fsync of its log file (the
    // inode, whichever descriptor) makes the flushed data power-safe.
    let db_file = match durability {
        Durability::Fsync => {
            let file = File::open(dir.join("db")).map_err(sled::Error::Io)?;
            // The folder too, so that files sled created are found after a crash.
            if let Ok(folder) = File::open(dir) {
                let _ = folder.sync_all();
            }
            Some(Arc::new(file))
        }
        Durability::Flush => None,
    };
    let trees = Trees::open(&db)?;
    let wal_dir = dir.join("wal");
    let batches = wal::recover(&wal_dir)?;
    if !batches.is_empty() {
        tracing::info!(batches = batches.len(), "applying an earlier version's write-ahead log");
        for ops in &batches {
            trees.apply(ops)?;
        }
    }
    flush_sled(&db, db_file.as_deref())?;
    if wal_dir.exists() {
        wal::remove_all(&wal_dir)?;
    }
    let log_dir = dir.join(LOG_DIR);
    migrate(dir, &db, &trees, db_file.as_deref())?;
    let replay_from = trees.replay_from()?;
    let scanned = log::recover(&log_dir, replay_from)?;
    if !scanned.ops.is_empty() {
        tracing::info!(changes = scanned.ops.len(), "applying the audit log's newest segments");
        trees.apply(&scanned.ops)?;
    }
    // Never past the log's end (a log cut short by hand): what is written
    // next must be replayed after a crash.
    let replay_from = replay_from.min(scanned.head.seq + 1);
    trees.set_replay_from(replay_from)?;
    flush_sled(&db, db_file.as_deref())?;
    Ok(Recovered { db, trees, db_file, log_dir, head: scanned.head, replay_from })
}

/// Moves the audit records an earlier version kept in sled's `audit` tree
/// into the audit log: written whole under another name, synced, renamed
/// into place, and only then removed from sled, so that a crash at any
/// point leaves either the tree or the log (or both, the same records,
/// resolved at the next open).
fn migrate(dir: &Path, db: &sled::Db, trees: &Trees, db_file: Option<&File>) -> Result<(), StoreError> {
    let Some((last_key, _)) = trees.audit.last()? else { return Ok(()) };
    let last_seq = seq_of_key(&last_key).unwrap_or(0);
    let log_dir = dir.join(LOG_DIR);
    if !log::segments(&log_dir)?.is_empty() {
        let head = log::recover(&log_dir, u64::MAX)?.head;
        if head.seq < last_seq {
            return Err(StoreError::Corrupt {
                tree: trees::AUDIT,
                key: last_seq.to_string(),
                message: format!(
                    "the store holds audit records in sled up to {last_seq} and an audit log only up to {}",
                    head.seq
                ),
            });
        }
    } else {
        let count = trees.audit.len();
        tracing::info!(records = count, "moving the audit records out of sled into the audit log");
        let staging = dir.join(MIGRATING_DIR);
        if staging.exists() {
            std::fs::remove_dir_all(&staging).map_err(log::io_error(&staging))?;
        }
        offline::write_log(
            &staging,
            trees.audit.iter().map(|item| {
                let (key, value) = item?;
                decode_record(&key, &value)
            }),
        )?;
        log::sync_dir(&staging)?;
        std::fs::rename(&staging, &log_dir).map_err(log::io_error(&log_dir))?;
        log::sync_dir(dir)?;
    }
    // Nothing before the log's end needs replaying: sled holds that state.
    trees.set_replay_from(last_seq + 1)?;
    trees.audit.clear()?;
    flush_sled(db, db_file)?;
    Ok(())
}

/// sled's flush, then (fsync durability) fsync of its log file.
pub(super) fn flush_sled(db: &sled::Db, db_file: Option<&File>) -> Result<(), StoreError> {
    db.flush()?;
    if let Some(file) = db_file {
        file.sync_data().map_err(sled::Error::Io)?;
    }
    Ok(())
}
