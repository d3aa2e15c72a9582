//! The write-ahead log of earlier versions (`store/wal/`), read once when
//! such a store is first opened: its frames are applied to sled, then the
//! folder is removed. The audit log (`log.rs`) took over its job.
//!
//! Frame: `len: u32 LE`, `crc32(payload): u32 LE`, payload. Payload: a
//! sequence of operations, each `tree: u8`, `key_len: u32 LE`, key,
//! `kind: u8` (1 put, 0 remove), and for a put `value_len: u32 LE`, value.
//! A damaged frame at the end of the newest segment was never acknowledged
//! and is dropped; anywhere else opening fails.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

pub(crate) use super::log::Op;

/// Largest frame accepted when reading: a length beyond it is a torn or
/// corrupt header, not a real batch.
const MAX_FRAME: u32 = 1 << 30;
const HEADER: usize = 8;

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
    fs::remove_dir(dir).map_err(io_error(dir))
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Encodes one batch as the frame an earlier version wrote.
    pub(crate) fn frame(ops: &[Op]) -> Vec<u8> {
        let mut payload = Vec::new();
        for op in ops {
            payload.push(op.tree);
            put(&mut payload, &op.key);
            match &op.value {
                Some(value) => {
                    payload.push(1);
                    put(&mut payload, value);
                }
                None => payload.push(0),
            }
        }
        let mut out = (payload.len() as u32).to_le_bytes().to_vec();
        out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        out.extend_from_slice(&payload);
        out
    }

    fn put(out: &mut Vec<u8>, bytes: &[u8]) {
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    }

    fn op(tree: u8, key: &str, value: Option<&str>) -> Op {
        Op { tree, key: key.as_bytes().to_vec(), value: value.map(|v| v.as_bytes().to_vec()) }
    }

    #[test]
    fn an_earlier_version_s_frames_read_back_in_order_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let first = vec![op(0, "a", Some("1")), op(3, "b", None)];
        let second = vec![op(7, "c", Some("3"))];
        let mut one = frame(&first);
        one.extend(vec![0; 64]);
        fs::write(dir.path().join(format!("{:020}.log", 1)), one).unwrap();
        let mut two = frame(&second);
        let torn = frame(&[op(0, "torn", Some("no"))]);
        two.extend_from_slice(&torn[..torn.len() - 3]);
        fs::write(dir.path().join(format!("{:020}.log", 2)), &two).unwrap();
        assert_eq!(recover(dir.path()).unwrap(), vec![first.clone(), second.clone()]);
        let cut = fs::metadata(dir.path().join(format!("{:020}.log", 2))).unwrap().len();
        assert_eq!(cut, frame(&second).len() as u64, "the torn tail is cut off");
        remove_all(dir.path()).unwrap();
        assert!(recover(dir.path()).unwrap().is_empty());

        // Damage before the newest segment is an error.
        fs::create_dir(dir.path()).unwrap();
        let mut bad = frame(&first);
        *bad.last_mut().unwrap() ^= 1;
        fs::write(dir.path().join(format!("{:020}.log", 1)), bad).unwrap();
        fs::write(dir.path().join(format!("{:020}.log", 2)), frame(&second)).unwrap();
        match recover(dir.path()) {
            Err(WalError::Corrupt { offset: 0, why, .. }) => assert_eq!(why, "checksum mismatch"),
            other => panic!("expected a corrupt frame, got {other:?}"),
        }
    }
}
