//! The write-ahead log in front of sled: what makes an acknowledged write
//! durable.
//!
//! sled 0.34 can only make its state durable with a flush of its whole log
//! (and a transaction over every tree for atomicity), which costs far more
//! per batch than appending the batch's bytes to a file. So the store's
//! writer appends each batch here as one checksummed frame, applies it to
//! sled's trees in memory, and answers once the frame is on disk (fdatasync,
//! or only written for `Durability::Flush`). sled flushes on its own
//! schedule: when a segment of this log is full, the writer starts a new one,
//! and once sled's flush covers everything in the old segments they are
//! deleted (a checkpoint).
//!
//! On open, the frames of every remaining segment are applied again, in
//! order, on top of whatever sled recovered. Every operation is a blind put
//! or remove, so replaying a frame that sled already holds changes nothing,
//! and the last write of each key wins as it did before the crash. A frame
//! cut short or failing its checksum at the end of the newest segment is a
//! batch that was never acknowledged, and is dropped; anywhere else it is
//! corruption and opening fails.
//!
//! Segments are zero-filled and synced before they are used (the next one
//! is prepared in the background): an fdatasync of bytes written over
//! allocated blocks of a file whose size does not change commits no file
//! system metadata, which makes it cheaper and faster than one after an
//! append. A zero length ends a segment's frames.
//!
//! Frame: `len: u32 LE`, `crc32(payload): u32 LE`, payload. Payload: a
//! sequence of operations, each `tree: u8`, `key_len: u32 LE`, key,
//! `kind: u8` (1 put, 0 remove), and for a put `value_len: u32 LE`, value.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A segment's size: it is closed once it holds this many bytes (a last
/// frame may run past it and grow the file).
pub(crate) const SEGMENT_BYTES: u64 = 16 * 1024 * 1024;
/// Largest frame accepted when reading: a length beyond it is a torn or
/// corrupt header, not a real batch.
const MAX_FRAME: u32 = 1 << 30;
const HEADER: usize = 8;

/// One write to one sled tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Op {
    /// Index into the store's tree list.
    pub(crate) tree: u8,
    pub(crate) key: Vec<u8>,
    /// `None` removes the key.
    pub(crate) value: Option<Vec<u8>>,
}

/// Why the log cannot be read back.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// Reading, writing or syncing a segment failed.
    #[error("write-ahead log {}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
    /// A frame before the newest segment's end does not read back.
    #[error("write-ahead log {}: frame at byte {offset} is damaged ({why}) and is not the last write", path.display())]
    Corrupt {
        /// The segment.
        path: PathBuf,
        /// Where the frame starts.
        offset: u64,
        /// What is wrong with it.
        why: String,
    },
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> WalError + '_ {
    move |source| WalError::Io { path: path.to_owned(), source }
}

/// Encodes one batch as a frame.
pub(crate) fn frame(ops: &[Op]) -> Vec<u8> {
    let size: usize = ops.iter().map(|op| 10 + op.key.len() + op.value.as_ref().map_or(0, |v| 4 + v.len())).sum();
    let mut out = Vec::with_capacity(HEADER + size);
    out.extend_from_slice(&[0; HEADER]);
    for op in ops {
        out.push(op.tree);
        put_bytes(&mut out, &op.key);
        match &op.value {
            Some(value) => {
                out.push(1);
                put_bytes(&mut out, value);
            }
            None => out.push(0),
        }
    }
    let len = u32::try_from(out.len() - HEADER).unwrap_or(u32::MAX);
    let crc = crc32fast::hash(out.get(HEADER..).unwrap_or_default());
    out.splice(..HEADER, len.to_le_bytes().into_iter().chain(crc.to_le_bytes()));
    out
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Decodes a frame's payload.
fn ops_of(payload: &[u8]) -> Result<Vec<Op>, String> {
    let mut ops = Vec::new();
    let mut rest = payload;
    while let Some((&tree, after)) = rest.split_first() {
        let (key, after) = take_bytes(after)?;
        let (&kind, after) = after.split_first().ok_or("an operation ends before its kind")?;
        let (value, after) = match kind {
            1 => {
                let (value, after) = take_bytes(after)?;
                (Some(value.to_vec()), after)
            }
            0 => (None, after),
            other => return Err(format!("unknown operation kind {other}")),
        };
        ops.push(Op { tree, key: key.to_vec(), value });
        rest = after;
    }
    Ok(ops)
}

fn take_bytes(input: &[u8]) -> Result<(&[u8], &[u8]), String> {
    let (len, rest) = input.split_first_chunk::<4>().ok_or("an operation ends inside a length")?;
    let len = u32::from_le_bytes(*len) as usize;
    if rest.len() < len {
        return Err("an operation ends inside its bytes".into());
    }
    Ok(rest.split_at(len))
}

/// The frames of one segment, and where the readable part ends.
struct Segment {
    frames: Vec<Vec<Op>>,
    /// Byte length of the complete frames.
    good_len: u64,
    /// Why reading stopped before the end of the file.
    damaged: Option<(u64, String)>,
}

fn read_segment(path: &Path) -> Result<Segment, WalError> {
    let mut bytes = Vec::new();
    File::open(path).and_then(|mut f| f.read_to_end(&mut bytes)).map_err(io_error(path))?;
    let mut frames = Vec::new();
    let mut at = 0usize;
    let damaged = loop {
        let Some(rest) = bytes.get(at..) else { break None };
        if rest.is_empty() {
            break None;
        }
        let Some((header, body)) = rest.split_first_chunk::<HEADER>() else {
            break Some((at as u64, "the file ends inside a frame header".to_owned()));
        };
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        if len == 0 {
            // The zero-filled rest of the segment; nothing is written
            // after it.
            break None;
        }
        if len > MAX_FRAME {
            break Some((at as u64, format!("frame length {len} is not plausible")));
        }
        let Some(payload) = body.get(..len as usize) else {
            break Some((at as u64, "the file ends inside a frame".to_owned()));
        };
        if crc32fast::hash(payload) != crc {
            break Some((at as u64, "checksum mismatch".to_owned()));
        }
        match ops_of(payload) {
            Ok(ops) => frames.push(ops),
            Err(why) => break Some((at as u64, why)),
        }
        at += HEADER + len as usize;
    };
    Ok(Segment { frames, good_len: at as u64, damaged })
}

/// Segment files in `dir`, oldest first, with their numbers.
fn segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>, WalError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_error(dir))? {
        let path = entry.map_err(io_error(dir))?.path();
        let number = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(number) = number {
            out.push((number, path));
        }
    }
    out.sort();
    Ok(out)
}

fn segment_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:020}.log"))
}

fn spare_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:020}.next"))
}

/// Writes a zero-filled, synced segment file at `path` (replacing one that
/// a crash left half made).
fn zero_filled(path: &Path) -> Result<File, WalError> {
    let file =
        OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path).map_err(io_error(path))?;
    let zeros = vec![0u8; 1024 * 1024];
    let mut written = 0u64;
    while written < SEGMENT_BYTES {
        (&file).write_all(&zeros).map_err(io_error(path))?;
        written += zeros.len() as u64;
    }
    file.sync_all().map_err(io_error(path))?;
    Ok(file)
}

/// Prepares segment `number` ahead of its use (zero-filled and synced,
/// under a name that [`recover`] ignores), so that starting it costs only
/// a rename.
pub(crate) fn prepare_segment(dir: &Path, number: u64) -> Result<Spare, WalError> {
    Ok(Spare { number, file: zero_filled(&spare_path(dir, number))? })
}

/// A prepared segment, see [`prepare_segment`].
pub(crate) struct Spare {
    number: u64,
    file: File,
}

fn sync_dir(dir: &Path) -> Result<(), WalError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_error(dir))
}

/// Every batch still in the log under `dir`, oldest first. A damaged frame
/// at the end of the newest segment (a write that was never acknowledged)
/// is cut off the file; anywhere else it is an error.
pub(crate) fn recover(dir: &Path) -> Result<Vec<Vec<Op>>, WalError> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    for entry in fs::read_dir(dir).map_err(io_error(dir))? {
        let path = entry.map_err(io_error(dir))?.path();
        if path.extension().is_some_and(|e| e == "next") {
            fs::remove_file(&path).map_err(io_error(&path))?;
        }
    }
    let found = segments(dir)?;
    let mut batches = Vec::new();
    let last = found.len().saturating_sub(1);
    for (at, (_, path)) in found.iter().enumerate() {
        let segment = read_segment(path)?;
        if let Some((offset, why)) = segment.damaged {
            if at != last {
                return Err(WalError::Corrupt { path: path.clone(), offset, why });
            }
            tracing::warn!(file = %path.display(), offset, why, "dropping an unacknowledged write at the end of the write-ahead log");
            let file = OpenOptions::new().write(true).open(path).map_err(io_error(path))?;
            file.set_len(segment.good_len).and_then(|()| file.sync_all()).map_err(io_error(path))?;
        }
        batches.extend(segment.frames);
    }
    Ok(batches)
}

/// Deletes every segment under `dir`, oldest first, and a prepared one. A
/// crash halfway leaves the newest segments, whose replay on top of the
/// state that made them redundant changes nothing; leaving an older one
/// alone would set keys back to older values.
pub(crate) fn remove_all(dir: &Path) -> Result<(), WalError> {
    remove_before(dir, u64::MAX)?;
    for entry in fs::read_dir(dir).map_err(io_error(dir))? {
        let path = entry.map_err(io_error(dir))?.path();
        if path.extension().is_some_and(|e| e == "next") {
            fs::remove_file(&path).map_err(io_error(&path))?;
        }
    }
    Ok(())
}

/// Deletes every segment under `dir` numbered below `keep_from`, oldest
/// first (see [`remove_all`]).
pub(crate) fn remove_before(dir: &Path, keep_from: u64) -> Result<(), WalError> {
    for (number, path) in segments(dir)? {
        if number < keep_from {
            fs::remove_file(&path).map_err(io_error(&path))?;
        }
    }
    Ok(())
}

/// The segment being appended to.
pub(crate) struct Wal {
    dir: PathBuf,
    number: u64,
    file: Arc<File>,
    len: u64,
    /// fsync new segments' folder entries (fsync durability).
    sync: bool,
}

impl Wal {
    /// Starts a new segment after any that exist in `dir` (created if
    /// missing).
    pub(crate) fn create(dir: &Path, sync: bool) -> Result<Self, WalError> {
        fs::create_dir_all(dir).map_err(io_error(dir))?;
        let number = segments(dir)?.last().map_or(1, |(n, _)| n + 1);
        let path = segment_path(dir, number);
        let file = zero_filled(&path)?;
        if sync {
            sync_dir(dir)?;
        }
        Ok(Self { dir: dir.to_owned(), number, file: Arc::new(file), len: 0, sync })
    }

    /// Writes one encoded frame (see [`frame`]). It is durable once
    /// [`Wal::file`] is synced, and survives a killed process as soon as
    /// this returns.
    pub(crate) fn append(&mut self, frame: &[u8]) -> Result<(), WalError> {
        self.file.write_all_at(frame, self.len).map_err(|source| WalError::Io { path: self.path(), source })?;
        self.len += frame.len() as u64;
        Ok(())
    }

    /// The current segment, to fdatasync.
    pub(crate) fn file(&self) -> Arc<File> {
        Arc::clone(&self.file)
    }

    /// Whether the current segment is full.
    pub(crate) fn full(&self) -> bool {
        self.len >= SEGMENT_BYTES
    }

    /// The number of the segment after the current one, to prepare.
    pub(crate) fn next_number(&self) -> u64 {
        self.number + 1
    }

    /// Starts the next segment, from `spare` when it was prepared for it.
    /// Returns its number: every segment below it may be deleted once
    /// sled's flush covers what was applied so far. With fsync durability
    /// the caller syncs the current segment first, so that only the newest
    /// segment can end in a torn frame.
    pub(crate) fn rotate(&mut self, spare: Option<Spare>) -> Result<u64, WalError> {
        let number = self.number + 1;
        let path = segment_path(&self.dir, number);
        let file = match spare {
            Some(spare) if spare.number == number => {
                let from = spare_path(&self.dir, number);
                fs::rename(&from, &path).map_err(io_error(&from))?;
                spare.file
            }
            _ => zero_filled(&path)?,
        };
        if self.sync {
            sync_dir(&self.dir)?;
        }
        self.number = number;
        self.file = Arc::new(file);
        self.len = 0;
        Ok(number)
    }

    /// The folder of the segments.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self) -> PathBuf {
        segment_path(&self.dir, self.number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(tree: u8, key: &str, value: Option<&str>) -> Op {
        Op { tree, key: key.as_bytes().to_vec(), value: value.map(|v| v.as_bytes().to_vec()) }
    }

    #[test]
    fn frames_read_back_across_segments_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let wal_dir = dir.path().join("wal");
        let mut wal = Wal::create(&wal_dir, true).unwrap();
        let first = vec![op(0, "a", Some("1")), op(3, "b", None)];
        let second = vec![op(1, "", Some(""))];
        let third = vec![op(7, "c", Some("3"))];
        wal.append(&frame(&first)).unwrap();
        wal.append(&frame(&second)).unwrap();
        assert_eq!(wal.rotate(None).unwrap(), 2);
        wal.append(&frame(&third)).unwrap();
        assert_eq!(recover(&wal_dir).unwrap(), vec![first, second, third.clone()]);

        remove_before(&wal_dir, 2).unwrap();
        assert_eq!(recover(&wal_dir).unwrap(), vec![third]);
        // A new log starts after the segments left.
        drop(wal);
        let wal = Wal::create(&wal_dir, false).unwrap();
        assert_eq!(wal.number, 3);
    }

    #[test]
    fn a_torn_last_frame_is_cut_off_and_writing_goes_on_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = Wal::create(dir.path(), false).unwrap();
        let kept = vec![op(0, "kept", Some("yes"))];
        wal.append(&frame(&kept)).unwrap();
        let torn = frame(&[op(0, "torn", Some("no"))]);
        wal.append(torn.get(..torn.len() - 3).unwrap()).unwrap();
        let path = segment_path(dir.path(), 1);
        assert_eq!(recover(dir.path()).unwrap(), vec![kept.clone()]);
        assert_eq!(fs::metadata(&path).unwrap().len(), frame(&kept).len() as u64, "the torn tail is cut off");
        assert_eq!(recover(dir.path()).unwrap(), vec![kept]);

        // Garbage after a whole frame, then zeros, the same.
        let mut wal = Wal::create(dir.path(), false).unwrap();
        wal.append(&frame(&[op(2, "k", None)])).unwrap();
        wal.append(&[7, 7, 7]).unwrap();
        let batches = recover(dir.path()).unwrap();
        assert_eq!(batches.last(), Some(&vec![op(2, "k", None)]));
    }

    #[test]
    fn a_damaged_frame_before_the_newest_segment_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = Wal::create(dir.path(), false).unwrap();
        let mut bad = frame(&[op(0, "k", Some("v"))]);
        if let Some(byte) = bad.last_mut() {
            *byte ^= 1;
        }
        wal.append(&bad).unwrap();
        wal.rotate(Some(prepare_segment(dir.path(), 2).unwrap())).unwrap();
        wal.append(&frame(&[op(0, "later", Some("v"))])).unwrap();
        match recover(dir.path()) {
            Err(WalError::Corrupt { offset: 0, why, .. }) => assert_eq!(why, "checksum mismatch"),
            other => panic!("expected a corrupt frame, got {other:?}"),
        }
    }
}
