//! The audit log: every audit record, in segment files under `audit/`, and
//! with each record the state changes that go with it. It is also sled's
//! write-ahead log: the writer appends a batch here, applies its state to
//! the trees in memory, and answers once the frame is synced; sled is
//! flushed only when a segment is sealed, and opening the store applies
//! again the state of the segments written since (see [`recover`]).
//!
//! A segment is named by the first sequence number it holds
//! (`00000000000000000001.seg`) and starts with a header: [`MAGIC`], that
//! sequence number (u64 big-endian) and the hash of the record before it
//! (32 bytes, zeros for the first), so that a segment read alone, or the
//! oldest one left after retention, links to what came before. Then frames:
//! `len: u32 LE`, `crc32(payload): u32 LE`, payload; a zero length ends the
//! frames (segments are zero-filled before use, see [`prepare_segment`]).
//! A frame is one group commit: its records and their state changes are
//! durable, or lost, together.
//!
//! Payload: `first_seq` (varint), the record count (varint), the records,
//! the operation count (varint), the operations. Records are compact: the
//! sequence number and the previous hash are implied by the order, the time
//! is the difference from the previous record's, the hash is 32 raw bytes,
//! ids of the form `prefix-<uuid>` keep the uuid as 16 bytes, and strings
//! that repeat (kinds, callers, actors, actions, resources, requests,
//! policy ids, reasons, policy versions) are written once per segment and
//! then named by their number in the segment's table ([`Table`]). Every
//! segment starts a new table, so each reads on its own. An operation is a
//! tree number, a kind (0 remove, 1 put, 2 an idempotency record written
//! with the segment's table) and its key and value.
//!
//! Sealed segments (every one but the newest) are truncated to their
//! frames, synced, and never written again; retention deletes (or
//! archives) whole sealed segments only.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::keys::{request_key, request_slot, tree_no};
use super::{AuditRecord, Head, Remembered, codec};
use crate::decision::Outcome;
use crate::model::DecisionRecord;
use crate::normalize::Actor;

/// A segment is sealed once it holds this many bytes (a last frame may run
/// past it and grow the file), unless configured otherwise
/// (`[audit] segment_bytes`). The unit tests' are small, so that they seal
/// and replay segments.
pub const DEFAULT_SEGMENT_BYTES: u64 = if cfg!(test) { 64 * 1024 } else { 16 * 1024 * 1024 };
/// The smallest segment size accepted.
pub const MIN_SEGMENT_BYTES: u64 = 64 * 1024;
/// The first bytes of every segment.
pub(crate) const MAGIC: &[u8; 8] = b"WDNAUDT1";
/// Magic, first seq, previous hash.
pub(crate) const HEADER_LEN: u64 = 8 + 8 + 32;
const FRAME_HEADER: usize = 8;
/// Largest frame accepted when reading: a length beyond it is a torn or
/// corrupt header, not a real batch.
const MAX_FRAME: u32 = 1 << 30;
/// How much a reader asks of the file at once.
const READ_CHUNK: usize = 1024 * 1024;

/// Strings longer than this are written out each time, never tabled.
const MAX_TABLED_LEN: usize = 2048;
/// A segment's table holds at most this many strings…
const MAX_TABLED: usize = 1 << 16;
/// …and this many bytes of them.
const MAX_TABLED_BYTES: usize = 4 * 1024 * 1024;

/// One write to one sled tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Op {
    /// Index into the store's tree list.
    pub(crate) tree: u8,
    pub(crate) key: Vec<u8>,
    /// `None` removes the key.
    pub(crate) value: Option<Vec<u8>>,
}

/// A state change as the writer hands it to the log.
#[derive(Debug, Clone)]
pub(crate) enum LogOp {
    /// A plain put or remove.
    Plain(Op),
    /// An idempotency record under `harness NUL request id`, in the slot
    /// of its time; written with the segment's table.
    Remember {
        /// The harness credential.
        harness: String,
        /// The record (its decision's request id is the key's).
        remembered: Box<Remembered>,
    },
}

impl LogOp {
    /// The sled operation it stands for.
    pub(crate) fn to_op(&self) -> Op {
        match self {
            LogOp::Plain(op) => op.clone(),
            LogOp::Remember { harness, remembered } => Op {
                tree: tree_no::requests(request_slot(remembered.decided_unix_ns)),
                key: request_key(harness, &remembered.decision.request_id),
                value: Some(codec::encode(remembered.as_ref())),
            },
        }
    }
}

/// Why the log cannot be written or read back.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// Reading, writing or syncing a segment failed.
    #[error("audit log {}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
    /// A frame that should be whole does not read back.
    #[error("audit log {}: frame at byte {offset} is damaged ({why})", path.display())]
    Corrupt {
        /// The segment.
        path: PathBuf,
        /// Where the frame starts.
        offset: u64,
        /// What is wrong with it.
        why: String,
    },
}

pub(crate) fn io_error(path: &Path) -> impl FnOnce(io::Error) -> LogError + '_ {
    move |source| LogError::Io { path: path.to_owned(), source }
}

/// A segment file: the first seq it holds, and its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SegmentFile {
    pub(crate) first_seq: u64,
    pub(crate) path: PathBuf,
}

/// The segment files in `dir`, oldest first (none when it does not exist).
pub(crate) fn segments(dir: &Path) -> Result<Vec<SegmentFile>, LogError> {
    let mut out = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io_error(dir)(e)),
    };
    for entry in entries {
        let path = entry.map_err(io_error(dir))?.path();
        let first_seq = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".seg"))
            .filter(|n| n.len() == 20 && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(first_seq) = first_seq {
            out.push(SegmentFile { first_seq, path });
        }
    }
    out.sort_by_key(|s| s.first_seq);
    Ok(out)
}

pub(crate) fn segment_path(dir: &Path, first_seq: u64) -> PathBuf {
    dir.join(format!("{first_seq:020}.seg"))
}

fn spare_path(dir: &Path) -> PathBuf {
    dir.join("next.spare")
}

pub(crate) fn sync_dir(dir: &Path) -> Result<(), LogError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_error(dir))
}

/// Writes a zero-filled, synced file of `size` bytes at `path`
/// (replacing one that a crash left half made). An fdatasync of bytes
/// written over allocated blocks of a file whose size does not change
/// commits no file system metadata, which makes it cheaper than one after
/// an append.
fn zero_filled(path: &Path, size: u64) -> Result<File, LogError> {
    let file =
        OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path).map_err(io_error(path))?;
    let zeros = vec![0u8; (size as usize).clamp(1, 1024 * 1024)];
    let mut written = 0u64;
    while written < size {
        (&file).write_all(&zeros).map_err(io_error(path))?;
        written += zeros.len() as u64;
    }
    file.sync_all().map_err(io_error(path))?;
    Ok(file)
}

/// A zero-filled file made ahead of its use, see [`prepare_segment`].
pub(crate) struct Spare {
    file: File,
}

/// Prepares the next segment's file (zero-filled and synced, under a name
/// [`segments`] ignores), so that starting it costs only a rename.
pub(crate) fn prepare_segment(dir: &Path, size: u64) -> Result<Spare, LogError> {
    Ok(Spare { file: zero_filled(&spare_path(dir), size)? })
}

// ---------------------------------------------------------------------------
// The compact form

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A segment's string table. The writer and every reader build the same
/// one as they go: a string not yet in it is written out and, when it fits
/// ([`Table::admits`]), takes the next number.
#[derive(Default)]
struct Table {
    /// The writer's side.
    numbers: HashMap<Box<str>, u32>,
    /// The reader's side.
    strings: Vec<Arc<str>>,
    count: usize,
    bytes: usize,
}

impl Table {
    fn admits(&self, value: &str) -> bool {
        value.len() <= MAX_TABLED_LEN && self.count < MAX_TABLED && self.bytes + value.len() <= MAX_TABLED_BYTES
    }

    fn admit(&mut self, value: &str) {
        self.count += 1;
        self.bytes += value.len();
    }
}

/// Where a segment's encoding stands: its table, the next record's seq, the
/// last record's time and hash.
pub(crate) struct SegmentState {
    table: Table,
    next_seq: u64,
    last_time: i64,
    prev_hash: [u8; 32],
}

impl SegmentState {
    fn new(first_seq: u64, prev_hash: [u8; 32]) -> Self {
        Self { table: Table::default(), next_seq: first_seq, last_time: 0, prev_hash }
    }

    /// A string that may repeat: `0` and the string, or its number + 1.
    fn put_str(&mut self, out: &mut Vec<u8>, value: &str) {
        if let Some(&number) = self.table.numbers.get(value) {
            put_varint(out, u64::from(number) + 1);
            return;
        }
        out.push(0);
        put_bytes(out, value.as_bytes());
        if self.table.admits(value) {
            let number = u32::try_from(self.table.count).unwrap_or(u32::MAX);
            self.table.admit(value);
            self.table.numbers.insert(value.into(), number);
        }
    }

    fn put_strs(&mut self, out: &mut Vec<u8>, values: &[String]) {
        put_varint(out, values.len() as u64);
        for value in values {
            self.put_str(out, value);
        }
    }

    /// An id: `prefix-<uuid>` as the prefix (tabled) and 16 bytes, 64 hex
    /// digits as 32 bytes, anything else as it is.
    fn put_id(&mut self, out: &mut Vec<u8>, value: &str) {
        if let Some((prefix, tail)) =
            value.len().checked_sub(36).and_then(|at| Some((value.get(..at)?, value.get(at..)?)))
            && let Ok(uuid) = uuid::Uuid::try_parse(tail)
            && uuid.hyphenated().to_string() == tail
        {
            out.push(1);
            self.put_str(out, prefix);
            out.extend_from_slice(uuid.as_bytes());
            return;
        }
        if let Some(raw) = hex32(value) {
            out.push(2);
            out.extend_from_slice(&raw);
            return;
        }
        out.push(0);
        put_bytes(out, value.as_bytes());
    }

    fn put_record(&mut self, out: &mut Vec<u8>, record: &AuditRecord) {
        put_varint(out, zigzag(record.time_unix_ns.wrapping_sub(self.last_time)));
        self.last_time = record.time_unix_ns;
        for value in record.texts_before_lists() {
            self.put_str(out, value);
        }
        self.put_strs(out, &record.policy_ids);
        self.put_strs(out, &record.reasons);
        self.put_str(out, &record.policy_version);
        self.put_id(out, &record.request_id);
        self.put_id(out, &record.approval_id);
        let hash = hex32(&record.hash).unwrap_or([0; 32]);
        out.extend_from_slice(&hash);
        self.next_seq = record.seq + 1;
        self.prev_hash = hash;
    }

    fn put_remembered(&mut self, out: &mut Vec<u8>, harness: &str, remembered: &Remembered) {
        let d = &remembered.decision;
        self.put_str(out, harness);
        self.put_id(out, &d.request_id);
        self.put_id(out, &remembered.request_hash);
        put_varint(out, zigzag(remembered.decided_unix_ns.wrapping_sub(self.last_time)));
        self.put_str(out, d.outcome.as_str());
        self.put_strs(out, &d.policy_ids);
        self.put_strs(out, &d.reasons);
        self.put_id(out, &d.approval_id);
        match d.expires_at_unix_ns {
            None => out.push(0),
            Some(at) => {
                out.push(1);
                put_varint(out, zigzag(at.wrapping_sub(remembered.decided_unix_ns)));
            }
        }
        self.put_strs(out, &d.grant_ids);
        self.put_str(out, &d.policy_version);
        put_varint(out, d.audit_seq);
        self.put_str(out, &d.resolved_by);
        self.put_str(out, &d.note);
    }

    /// One frame of `records` (consecutive, after this segment's last) and
    /// `ops`.
    pub(crate) fn frame(&mut self, records: &[&AuditRecord], ops: &[LogOp]) -> Vec<u8> {
        let mut out = Vec::with_capacity(FRAME_HEADER + 64 + 160 * records.len());
        out.extend_from_slice(&[0; FRAME_HEADER]);
        put_varint(&mut out, self.next_seq);
        put_varint(&mut out, records.len() as u64);
        for record in records {
            self.put_record(&mut out, record);
        }
        put_varint(&mut out, ops.len() as u64);
        for op in ops {
            match op {
                LogOp::Plain(Op { tree, key, value }) => {
                    out.push(*tree);
                    match value {
                        Some(value) => {
                            out.push(1);
                            put_bytes(&mut out, key);
                            put_bytes(&mut out, value);
                        }
                        None => {
                            out.push(0);
                            put_bytes(&mut out, key);
                        }
                    }
                }
                LogOp::Remember { harness, remembered } => {
                    out.push(tree_no::requests(request_slot(remembered.decided_unix_ns)));
                    out.push(2);
                    self.put_remembered(&mut out, harness, remembered);
                }
            }
        }
        let len = u32::try_from(out.len() - FRAME_HEADER).unwrap_or(u32::MAX);
        let crc = crc32fast::hash(out.get(FRAME_HEADER..).unwrap_or_default());
        out.splice(..FRAME_HEADER, len.to_le_bytes().into_iter().chain(crc.to_le_bytes()));
        out
    }
}

fn hex32(value: &str) -> Option<[u8; 32]> {
    if value.len() != 64 || value.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let mut out = [0u8; 32];
    hex::decode_to_slice(value, &mut out).ok()?;
    Some(out)
}

/// Reads one frame's payload with the segment's state.
struct Reader<'a, 'b> {
    input: &'a [u8],
    state: &'b mut SegmentState,
}

type Read<T> = Result<T, String>;

impl Reader<'_, '_> {
    fn take(&mut self, n: usize) -> Read<&[u8]> {
        if self.input.len() < n {
            return Err("the frame ends inside a field".into());
        }
        let (taken, rest) = self.input.split_at(n);
        self.input = rest;
        Ok(taken)
    }

    fn byte(&mut self) -> Read<u8> {
        Ok(*self.take(1)?.first().ok_or("the frame ends inside a field")?)
    }

    fn varint(&mut self) -> Read<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            if shift == 63 && byte > 1 {
                return Err("a number is too long".into());
            }
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a number is too long".into())
    }

    fn count(&mut self) -> Read<usize> {
        let count = self.varint()?;
        // Every item takes at least a byte: more than is left is damage.
        if count > self.input.len() as u64 {
            return Err("a count is larger than the frame".into());
        }
        usize::try_from(count).map_err(|_| "a count is too large".into())
    }

    fn bytes(&mut self) -> Read<&[u8]> {
        let len = self.count()?;
        self.take(len)
    }

    fn text(&mut self) -> Read<String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| "a string is not UTF-8".into())
    }

    fn raw32(&mut self) -> Read<[u8; 32]> {
        <[u8; 32]>::try_from(self.take(32)?).map_err(|_| "the frame ends inside a hash".into())
    }

    fn str(&mut self) -> Read<String> {
        match self.varint()? {
            0 => {
                let value = self.text()?;
                let table = &mut self.state.table;
                if table.admits(&value) {
                    table.admit(&value);
                    table.strings.push(Arc::from(value.as_str()));
                }
                Ok(value)
            }
            number => {
                let at = usize::try_from(number - 1).map_err(|_| "a string number is too large".to_owned())?;
                self.state
                    .table
                    .strings
                    .get(at)
                    .map(|s| s.to_string())
                    .ok_or_else(|| format!("string number {number} is not in the segment's table"))
            }
        }
    }

    fn strs(&mut self) -> Read<Vec<String>> {
        let count = self.count()?;
        (0..count).map(|_| self.str()).collect()
    }

    fn id(&mut self) -> Read<String> {
        match self.byte()? {
            0 => self.text(),
            1 => {
                let prefix = self.str()?;
                let uuid = uuid::Uuid::from_slice(self.take(16)?).map_err(|e| e.to_string())?;
                Ok(format!("{prefix}{}", uuid.hyphenated()))
            }
            2 => Ok(hex::encode(self.raw32()?)),
            other => Err(format!("unknown id form {other}")),
        }
    }

    fn delta(&mut self, from: i64) -> Read<i64> {
        Ok(from.wrapping_add(unzigzag(self.varint()?)))
    }

    fn record(&mut self) -> Read<AuditRecord> {
        let time_unix_ns = self.delta(self.state.last_time)?;
        self.state.last_time = time_unix_ns;
        let mut texts = Vec::with_capacity(9);
        for _ in 0..9 {
            texts.push(self.str()?);
        }
        let policy_ids = self.strs()?;
        let reasons = self.strs()?;
        let policy_version = self.str()?;
        let request_id = self.id()?;
        let approval_id = self.id()?;
        let hash = self.raw32()?;
        let mut texts = texts.into_iter();
        let mut next = || texts.next().unwrap_or_default();
        let record = AuditRecord {
            seq: self.state.next_seq,
            time_unix_ns,
            kind: next(),
            caller: next(),
            actor: Actor { user: next(), agent: next(), session: next() },
            action: next(),
            resource: next(),
            request: next(),
            outcome: next(),
            policy_ids,
            reasons,
            policy_version,
            request_id,
            approval_id,
            prev_hash: hex::encode(self.state.prev_hash),
            hash: hex::encode(hash),
        };
        self.state.next_seq += 1;
        self.state.prev_hash = hash;
        Ok(record)
    }

    fn remembered(&mut self) -> Read<(String, Remembered)> {
        let harness = self.str()?;
        let request_id = self.id()?;
        let request_hash = self.id()?;
        let decided_unix_ns = self.delta(self.state.last_time)?;
        let outcome = self.str()?;
        let outcome = Outcome::from_name(&outcome).ok_or_else(|| format!("unknown outcome `{outcome}`"))?;
        let policy_ids = self.strs()?;
        let reasons = self.strs()?;
        let approval_id = self.id()?;
        let expires_at_unix_ns = match self.byte()? {
            0 => None,
            1 => Some(self.delta(decided_unix_ns)?),
            other => return Err(format!("bad option tag {other}")),
        };
        let decision = DecisionRecord {
            request_id,
            outcome,
            policy_ids,
            reasons,
            approval_id,
            expires_at_unix_ns,
            grant_ids: self.strs()?,
            policy_version: self.str()?,
            audit_seq: self.varint()?,
            resolved_by: self.str()?,
            note: self.str()?,
            labels: vec![],
        };
        Ok((harness, Remembered { request_hash, decided_unix_ns, decision }))
    }

    fn frame(&mut self) -> Read<Frame> {
        let first_seq = self.varint()?;
        if first_seq != self.state.next_seq {
            return Err(format!("the frame starts at record {first_seq}, not at {}", self.state.next_seq));
        }
        let count = self.count()?;
        let records = (0..count).map(|_| self.record()).collect::<Read<Vec<_>>>()?;
        let count = self.count()?;
        let mut ops = Vec::with_capacity(count.min(1024));
        for _ in 0..count {
            let tree = self.byte()?;
            let op = match self.byte()? {
                0 => LogOp::Plain(Op { tree, key: self.bytes()?.to_vec(), value: None }),
                1 => {
                    let key = self.bytes()?.to_vec();
                    LogOp::Plain(Op { tree, key, value: Some(self.bytes()?.to_vec()) })
                }
                2 => {
                    let (harness, remembered) = self.remembered()?;
                    LogOp::Remember { harness, remembered: Box::new(remembered) }
                }
                other => return Err(format!("unknown operation kind {other}")),
            };
            ops.push(op);
        }
        if !self.input.is_empty() {
            return Err(format!("{} bytes after the frame's operations", self.input.len()));
        }
        Ok(Frame { records, ops })
    }
}

/// One frame read back.
pub(crate) struct Frame {
    pub(crate) records: Vec<AuditRecord>,
    pub(crate) ops: Vec<LogOp>,
}

// ---------------------------------------------------------------------------
// Reading a segment

/// How a segment's frames end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum End {
    /// A zero length or the end of the file: nothing more was written (yet).
    Clean,
    /// Bytes that are not a whole, valid frame, at this offset.
    Damaged(u64, String),
}

/// Reads one segment's frames in order, from the file as it is now (the
/// newest segment may grow while it is read).
pub(crate) struct SegmentReader {
    path: PathBuf,
    file: File,
    /// The file's size when opened (it grows only in the newest segment,
    /// where frames are written over zeros, not appended).
    file_len: u64,
    /// Where the next frame starts.
    pos: u64,
    buf: Vec<u8>,
    /// The file offset of `buf[0]`.
    buf_at: u64,
    state: SegmentState,
    first_seq: u64,
    prev_hash: [u8; 32],
    /// Set once a frame did not read.
    broken: Option<End>,
}

impl SegmentReader {
    /// Opens a segment whose name says it starts at `first_seq`: a header
    /// that says otherwise is damage (a file renamed or made by hand).
    pub(crate) fn open_at(path: &Path, first_seq: u64) -> Result<Self, LogError> {
        let reader = Self::open(path)?;
        if reader.first_seq != first_seq {
            return Err(LogError::Corrupt {
                path: path.to_owned(),
                offset: 0,
                why: format!("its header says it starts at record {}, its name {first_seq}", reader.first_seq),
            });
        }
        Ok(reader)
    }

    pub(crate) fn open(path: &Path) -> Result<Self, LogError> {
        let file = File::open(path).map_err(io_error(path))?;
        let mut header = [0u8; HEADER_LEN as usize];
        let corrupt = |why: &str| LogError::Corrupt { path: path.to_owned(), offset: 0, why: why.to_owned() };
        file.read_exact_at(&mut header, 0).map_err(|_| corrupt("the segment is shorter than its header"))?;
        let (magic, rest) = header.split_at(8);
        if magic != MAGIC {
            return Err(corrupt("not an audit log segment (bad magic)"));
        }
        let (seq, hash) = rest.split_at(8);
        let first_seq = u64::from_be_bytes(seq.try_into().map_err(|_| corrupt("bad header"))?);
        let prev_hash: [u8; 32] = hash.try_into().map_err(|_| corrupt("bad header"))?;
        let file_len = file.metadata().map_err(io_error(path))?.len();
        Ok(Self {
            path: path.to_owned(),
            file,
            file_len,
            pos: HEADER_LEN,
            buf: Vec::new(),
            buf_at: HEADER_LEN,
            state: SegmentState::new(first_seq, prev_hash),
            first_seq,
            prev_hash,
            broken: None,
        })
    }

    /// The first seq the segment holds (by its header).
    pub(crate) fn first_seq(&self) -> u64 {
        self.first_seq
    }

    /// The head before the segment's first record.
    pub(crate) fn base(&self) -> Head {
        Head { seq: self.first_seq.saturating_sub(1), hash: hex::encode(self.prev_hash) }
    }

    /// The seq the next record read will have.
    pub(crate) fn next_seq(&self) -> u64 {
        self.state.next_seq
    }

    /// The byte length of the frames read so far.
    pub(crate) fn good_len(&self) -> u64 {
        self.pos
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Up to `len` bytes at `pos` (fewer at the end of the file), from
    /// the buffer or, when it does not hold them or `fresh` asks for what
    /// may have been written since, from the file.
    fn fill(&mut self, pos: u64, len: usize, fresh: bool) -> Result<&[u8], LogError> {
        let cached = pos
            .checked_sub(self.buf_at)
            .and_then(|start| usize::try_from(start).ok())
            .filter(|start| !fresh && start + len <= self.buf.len());
        let start = match cached {
            Some(start) => start,
            None => {
                let want = len.max(READ_CHUNK);
                self.buf.resize(want, 0);
                let mut got = 0;
                while got < want {
                    match self.file.read_at(self.buf.get_mut(got..).unwrap_or_default(), pos + got as u64) {
                        Ok(0) => break,
                        Ok(n) => got += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(io_error(&self.path)(e)),
                    }
                }
                self.buf.truncate(got);
                self.buf_at = pos;
                0
            }
        };
        let end = (start + len).min(self.buf.len());
        Ok(self.buf.get(start..end).unwrap_or_default())
    }

    /// The next frame, or how the frames end. After a clean end a later
    /// call reads the file again (the newest segment grows); bytes once
    /// written never change, so only what looked unwritten is read again.
    pub(crate) fn next_frame(&mut self) -> Result<Result<Frame, End>, LogError> {
        if let Some(end) = &self.broken {
            return Ok(Err(end.clone()));
        }
        let pos = self.pos;
        for fresh in [false, true] {
            if fresh {
                self.file_len = self.file.metadata().map_err(io_error(&self.path))?.len();
            }
            let header = self.fill(pos, FRAME_HEADER, fresh)?;
            let end = if let Some((len, crc)) = header
                .split_first_chunk::<4>()
                .and_then(|(len, rest)| Some((u32::from_le_bytes(*len), u32::from_le_bytes(*rest.first_chunk::<4>()?))))
            {
                if len == 0 {
                    End::Clean
                } else if len > MAX_FRAME || pos + FRAME_HEADER as u64 + u64::from(len) > self.file_len.max(pos) {
                    End::Damaged(pos, format!("frame length {len} runs past the end of the file"))
                } else {
                    let whole = FRAME_HEADER + len as usize;
                    let frame = self.fill(pos, whole, fresh)?;
                    if frame.len() < whole {
                        End::Damaged(pos, "the file ends inside a frame".into())
                    } else if crc32fast::hash(frame.get(FRAME_HEADER..).unwrap_or_default()) != crc {
                        End::Damaged(pos, "checksum mismatch".into())
                    } else {
                        let payload = frame.get(FRAME_HEADER..).unwrap_or_default().to_vec();
                        // A frame whose checksum holds but which does not
                        // read is damage: this segment is read no further.
                        return Ok(match (Reader { input: &payload, state: &mut self.state }).frame() {
                            Ok(frame) => {
                                self.pos = pos + whole as u64;
                                Ok(frame)
                            }
                            Err(why) => {
                                let end = End::Damaged(pos, why);
                                self.broken = Some(end.clone());
                                Err(end)
                            }
                        });
                    }
                }
            } else if header.iter().all(|&b| b == 0) {
                End::Clean
            } else {
                End::Damaged(pos, "the file ends inside a frame header".into())
            };
            if fresh {
                return Ok(Err(end));
            }
        }
        Ok(Err(End::Clean))
    }
}

// ---------------------------------------------------------------------------
// Writing

/// The segment being appended to, and how its encoding stands.
pub(crate) struct LogWriter {
    dir: PathBuf,
    first_seq: u64,
    file: Arc<File>,
    len: u64,
    state: SegmentState,
    /// fsync new segments' folder entries (fsync durability).
    sync: bool,
    /// When a segment is full.
    segment_bytes: u64,
}

/// A segment just closed: to truncate to `len` and sync (in the
/// background), after which it is never written again.
pub(crate) struct Sealed {
    pub(crate) file: Arc<File>,
    pub(crate) len: u64,
}

impl Sealed {
    /// Cuts the zero-filled rest and syncs.
    pub(crate) fn seal(&self) -> io::Result<()> {
        self.file.set_len(self.len)?;
        self.file.sync_all()
    }
}

impl LogWriter {
    /// Starts a segment after `head` in `dir` (created if missing), from
    /// `spare` when there is one.
    pub(crate) fn create(
        dir: &Path,
        head: &Head,
        sync: bool,
        spare: Option<Spare>,
        segment_bytes: u64,
    ) -> Result<Self, LogError> {
        fs::create_dir_all(dir).map_err(io_error(dir))?;
        let first_seq = head.seq + 1;
        let path = segment_path(dir, first_seq);
        let file = match spare {
            Some(spare) => {
                fs::rename(spare_path(dir), &path).map_err(io_error(&path))?;
                spare.file
            }
            None => zero_filled(&path, segment_bytes)?,
        };
        let prev_hash = hex32(&head.hash).unwrap_or([0; 32]);
        let mut header = Vec::with_capacity(HEADER_LEN as usize);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&first_seq.to_be_bytes());
        header.extend_from_slice(&prev_hash);
        file.write_all_at(&header, 0).map_err(io_error(&path))?;
        if sync {
            file.sync_data().map_err(io_error(&path))?;
            sync_dir(dir)?;
        }
        Ok(Self {
            dir: dir.to_owned(),
            first_seq,
            file: Arc::new(file),
            len: HEADER_LEN,
            state: SegmentState::new(first_seq, prev_hash),
            sync,
            segment_bytes,
        })
    }

    /// Encodes one frame with this segment's table (see
    /// [`SegmentState::frame`]); [`LogWriter::append`] must write it next.
    pub(crate) fn frame(&mut self, records: &[&AuditRecord], ops: &[LogOp]) -> Vec<u8> {
        self.state.frame(records, ops)
    }

    /// Writes one encoded frame. It is durable once [`LogWriter::file`] is
    /// synced, and survives a killed process as soon as this returns.
    pub(crate) fn append(&mut self, frame: &[u8]) -> Result<(), LogError> {
        self.file
            .write_all_at(frame, self.len)
            .map_err(|source| LogError::Io { path: segment_path(&self.dir, self.first_seq), source })?;
        self.len += frame.len() as u64;
        Ok(())
    }

    /// The current segment, to fdatasync.
    pub(crate) fn file(&self) -> Arc<File> {
        Arc::clone(&self.file)
    }

    /// Whether the current segment is full.
    pub(crate) fn full(&self) -> bool {
        self.len >= self.segment_bytes
    }

    /// The first seq of the current segment.
    pub(crate) fn first_seq(&self) -> u64 {
        self.first_seq
    }

    /// The seq the next record written will have.
    pub(crate) fn next_seq(&self) -> u64 {
        self.state.next_seq
    }

    /// The bytes written to the current segment.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Closes the current segment and starts the next after `head`.
    pub(crate) fn rotate(&mut self, head: &Head, spare: Option<Spare>) -> Result<Sealed, LogError> {
        let next = Self::create(&self.dir, head, self.sync, spare, self.segment_bytes)?;
        let old = std::mem::replace(self, next);
        Ok(Sealed { file: old.file, len: old.len })
    }

    /// The folder of the segments.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// When a segment is full.
    pub(crate) fn segment_bytes(&self) -> u64 {
        self.segment_bytes
    }
}

// ---------------------------------------------------------------------------
// Opening

/// What [`recover`] found.
pub(crate) struct Scanned {
    /// The newest record's head (genesis for an empty log).
    pub(crate) head: Head,
    /// The state changes of every frame in the segments from `replay_from`
    /// on, oldest first.
    pub(crate) ops: Vec<Op>,
}

/// Reads the log in `dir` for opening the store: cuts a torn last frame off
/// the newest segment (a batch never acknowledged), drops a newest segment
/// that holds no record (the writer makes it again), and collects the state
/// changes of the segments whose first seq is at least `replay_from`
/// (sled's state holds all before). Damage anywhere but at the end of the
/// newest segment is an error.
pub(crate) fn recover(dir: &Path, replay_from: u64) -> Result<Scanned, LogError> {
    let spare = spare_path(dir);
    if spare.exists() {
        fs::remove_file(&spare).map_err(io_error(&spare))?;
    }
    let mut found = segments(dir)?;
    // A crash between starting a segment's file and writing its header
    // leaves zeros where the header goes.
    if let Some(last) = found.last() {
        let mut header = [0u8; HEADER_LEN as usize];
        let read = File::open(&last.path).and_then(|f| f.read_at(&mut header, 0)).map_err(io_error(&last.path))?;
        if header.get(..read).unwrap_or_default().iter().all(|&b| b == 0) {
            fs::remove_file(&last.path).map_err(io_error(&last.path))?;
            found.pop();
        }
    }
    let mut ops = Vec::new();
    let mut head = Head::genesis();
    let newest = found.len().saturating_sub(1);
    for (at, segment) in found.iter().enumerate() {
        let replay = segment.first_seq >= replay_from;
        // Only the segments to replay, and the newest (its last record is
        // the head), are read.
        if !replay && at != newest {
            continue;
        }
        let mut reader = SegmentReader::open_at(&segment.path, segment.first_seq)?;
        let mut last = reader.base();
        let end = loop {
            match reader.next_frame()? {
                Ok(frame) => {
                    if replay {
                        ops.extend(frame.ops.iter().map(LogOp::to_op));
                    }
                    if let Some(record) = frame.records.last() {
                        last = Head { seq: record.seq, hash: record.hash.clone() };
                    }
                }
                Err(end) => break end,
            }
        };
        if let End::Damaged(offset, why) = &end {
            // A torn write is the last thing in the newest segment: only
            // zeros follow it. Damage with anything after it is not a
            // crash's doing and is never cut off.
            if at != newest || !only_zeros_after(&segment.path, *offset)? {
                return Err(LogError::Corrupt { path: segment.path.clone(), offset: *offset, why: why.clone() });
            }
            tracing::warn!(file = %segment.path.display(), offset, why, "dropping an unacknowledged write at the end of the audit log");
        }
        if at == newest {
            if reader.next_seq() == reader.first_seq() {
                // Started but never written: the writer makes it again.
                fs::remove_file(&segment.path).map_err(io_error(&segment.path))?;
            } else {
                // It is not written again (the writer starts the next):
                // cut to its frames, like any sealed segment.
                let file = OpenOptions::new().write(true).open(&segment.path).map_err(io_error(&segment.path))?;
                if file.metadata().map_err(io_error(&segment.path))?.len() != reader.good_len() {
                    file.set_len(reader.good_len()).and_then(|()| file.sync_all()).map_err(io_error(&segment.path))?;
                }
            }
        }
        head = last;
    }
    Ok(Scanned { head, ops })
}

/// Whether every byte of the segment at `path` after the damaged frame at
/// `offset` is zero (past the frame's header when its length is not
/// believable, else past its claimed end).
fn only_zeros_after(path: &Path, offset: u64) -> Result<bool, LogError> {
    let file = File::open(path).map_err(io_error(path))?;
    let mut header = [0u8; FRAME_HEADER];
    let read = file.read_at(&mut header, offset).map_err(io_error(path))?;
    let claimed = u64::from(header.first_chunk::<4>().map_or(0, |len| u32::from_le_bytes(*len)));
    let len = file.metadata().map_err(io_error(path))?.len();
    let from = if read == FRAME_HEADER && offset + FRAME_HEADER as u64 + claimed <= len {
        offset + FRAME_HEADER as u64 + claimed
    } else {
        (offset + read as u64).min(len)
    };
    let mut at = from;
    let mut chunk = vec![0u8; READ_CHUNK];
    while at < len {
        let n = file.read_at(&mut chunk, at).map_err(io_error(path))?;
        if n == 0 {
            break;
        }
        if chunk.get(..n).unwrap_or_default().iter().any(|&b| b != 0) {
            return Ok(false);
        }
        at += n as u64;
    }
    Ok(true)
}

/// The first record at or after `unix_ns` by the records' times (which
/// follow the order of the log up to the skew between concurrent
/// requests), up to `upto`; the seq after the newest when there is none.
pub(crate) fn seq_at_time(dir: &Path, unix_ns: i64, upto: u64) -> Result<u64, LogError> {
    let found = segments(dir)?;
    // The newest segment whose first record is not after the time.
    let mut start = found.first().map_or(1, |s| s.first_seq);
    for segment in &found {
        let mut reader = SegmentReader::open(&segment.path)?;
        match reader.next_frame()? {
            Ok(frame) => match frame.records.first() {
                Some(first) if first.time_unix_ns <= unix_ns => start = segment.first_seq,
                Some(_) => break,
                None => {}
            },
            Err(_) => break,
        }
    }
    let mut cursor = Cursor::new(dir, start);
    let mut last = start.saturating_sub(1);
    loop {
        let page = cursor.next_page(upto, 4096)?;
        if page.is_empty() {
            return Ok(last + 1);
        }
        for record in page {
            if record.time_unix_ns >= unix_ns {
                return Ok(record.seq);
            }
            last = record.seq;
        }
    }
}

/// Every record in `dir`.
#[cfg(test)]
pub(crate) fn read_all(dir: &Path) -> Result<Vec<AuditRecord>, LogError> {
    let mut cursor = Cursor::new(dir, 1);
    let mut out = Vec::new();
    loop {
        let page = cursor.next_page(u64::MAX, 10_000)?;
        if page.is_empty() {
            return Ok(out);
        }
        out.extend(page);
    }
}

/// Reads records in order from a seq on, across segments, as the log
/// grows. Records before the oldest segment left (retention) are skipped:
/// the first record read names where the log starts.
pub(crate) struct Cursor {
    dir: PathBuf,
    reader: Option<SegmentReader>,
    next_seq: u64,
    pending: std::collections::VecDeque<AuditRecord>,
    /// Damage found after records that were returned first.
    deferred: Option<LogError>,
}

impl Cursor {
    pub(crate) fn new(dir: &Path, from_seq: u64) -> Self {
        Self {
            dir: dir.to_owned(),
            reader: None,
            next_seq: from_seq.max(1),
            pending: Default::default(),
            deferred: None,
        }
    }

    /// The head before the first record this cursor reads (its first
    /// segment's header); `None` when there is no segment.
    pub(crate) fn base_or_open(&mut self) -> Result<Option<Head>, LogError> {
        if self.reader.is_none() && !self.open()? {
            return Ok(None);
        }
        Ok(self.reader.as_ref().map(SegmentReader::base))
    }

    /// Opens the segment that holds `next_seq` (or the first after it).
    fn open(&mut self) -> Result<bool, LogError> {
        let found = segments(&self.dir)?;
        let pick = found.iter().rev().find(|s| s.first_seq <= self.next_seq).or_else(|| found.first());
        let Some(segment) = pick else { return Ok(false) };
        let reader = SegmentReader::open_at(&segment.path, segment.first_seq)?;
        if reader.first_seq() > self.next_seq {
            self.next_seq = reader.first_seq();
        }
        self.reader = Some(reader);
        Ok(true)
    }

    /// Up to `limit` records with seq at most `upto`; empty when there are
    /// none yet. Records read before damage are returned first, the damage
    /// at the next call.
    pub(crate) fn next_page(&mut self, upto: u64, limit: usize) -> Result<Vec<AuditRecord>, LogError> {
        if let Some(error) = self.deferred.take() {
            return Err(error);
        }
        let mut out = Vec::new();
        match self.fill_page(upto, limit, &mut out) {
            Err(error) if !out.is_empty() => {
                self.deferred = Some(error);
                Ok(out)
            }
            Err(error) => Err(error),
            Ok(()) => Ok(out),
        }
    }

    fn fill_page(&mut self, upto: u64, limit: usize, out: &mut Vec<AuditRecord>) -> Result<(), LogError> {
        while out.len() < limit {
            if let Some(record) = self.pending.front() {
                if record.seq > upto {
                    break;
                }
                if let Some(record) = self.pending.pop_front()
                    && record.seq >= self.next_seq
                {
                    self.next_seq = record.seq + 1;
                    out.push(record);
                }
                continue;
            }
            if self.next_seq > upto {
                break;
            }
            if self.reader.is_none() && !self.open()? {
                break;
            }
            let Some(reader) = self.reader.as_mut() else { break };
            match reader.next_frame()? {
                Ok(frame) => self.pending.extend(frame.records),
                Err(end) => {
                    // The segment ends here for now: the next one, if the
                    // writer has started it, goes on.
                    let expected = reader.next_seq();
                    let next = segment_path(&self.dir, expected);
                    if next != reader.path() && next.exists() {
                        self.reader = Some(SegmentReader::open_at(&next, expected)?);
                        continue;
                    }
                    // A later segment without this one: records are missing.
                    if matches!(end, End::Clean)
                        && let Some(later) = segments(&self.dir)?.into_iter().find(|s| s.first_seq > expected)
                    {
                        return Err(LogError::Corrupt {
                            path: later.path,
                            offset: 0,
                            why: format!(
                                "records {expected} to {} are missing: no segment starts at {expected}",
                                later.first_seq - 1
                            ),
                        });
                    }
                    if let End::Damaged(offset, why) = end
                        && self.next_seq <= upto
                    {
                        return Err(LogError::Corrupt { path: reader.path().to_owned(), offset, why });
                    }
                    break;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64, prev: &str, request: &str) -> AuditRecord {
        let mut record = AuditRecord {
            seq,
            time_unix_ns: 1_700_000_000_000_000_000 + seq as i64 * 1000,
            kind: "decision".into(),
            caller: "harness".into(),
            actor: Actor { user: "alice".into(), agent: "claude-code".into(), session: "s".into() },
            action: "fs.read".into(),
            resource: r#"File::"/x""#.into(),
            request: request.into(),
            outcome: "ALLOW".into(),
            policy_ids: vec!["p".into()],
            reasons: vec!["because".into()],
            policy_version: "sha256:0123".into(),
            request_id: format!("wdn-{}", uuid::Uuid::new_v4()),
            approval_id: if seq.is_multiple_of(2) { String::new() } else { "apr-x".into() },
            prev_hash: prev.into(),
            hash: String::new(),
        };
        record.hash = record.compute_hash();
        record
    }

    fn chain(n: u64) -> Vec<AuditRecord> {
        let mut out: Vec<AuditRecord> = Vec::new();
        for seq in 1..=n {
            let prev = out.last().map_or("0".repeat(64), |r| r.hash.clone());
            out.push(record(seq, &prev, &format!("{{\"n\":{}}}", seq % 3)));
        }
        out
    }

    #[test]
    fn records_and_state_read_back_across_segments_and_are_compact() {
        let dir = tempfile::tempdir().unwrap();
        let records = chain(6);
        let mut writer = LogWriter::create(dir.path(), &Head::genesis(), true, None, DEFAULT_SEGMENT_BYTES).unwrap();
        let remembered = Remembered {
            request_hash: "ab".repeat(32),
            decided_unix_ns: records[0].time_unix_ns,
            decision: DecisionRecord {
                request_id: "sdk-py-7e0ad6b8-4b3c-4a46-9d61-1b9c1f1e2a3d".into(),
                outcome: Outcome::Pending,
                policy_ids: vec!["p".into()],
                reasons: vec!["because".into()],
                approval_id: "apr-1".into(),
                expires_at_unix_ns: Some(records[0].time_unix_ns + 5),
                grant_ids: vec![],
                policy_version: "sha256:0123".into(),
                audit_seq: 1,
                resolved_by: String::new(),
                note: String::new(),
                labels: vec![],
            },
        };
        let ops = vec![
            LogOp::Remember { harness: "harness".into(), remembered: Box::new(remembered.clone()) },
            LogOp::Plain(Op { tree: tree_no::LOCKS, key: b"k".to_vec(), value: None }),
        ];
        let first = writer.frame(&[&records[0]], &ops);
        writer.append(&first).unwrap();
        let second = writer.frame(&[&records[1], &records[2]], &[]);
        // Each: its hash (32), its request id (18), its new request text
        // and approval id, and a byte or two for every string seen before.
        assert!(second.len() < 2 * 90 + 16, "{} bytes", second.len());
        writer.append(&second).unwrap();
        writer.rotate(&Head { seq: 3, hash: records[2].hash.clone() }, None).unwrap();
        let third = writer.frame(&[&records[3], &records[4], &records[5]], &[]);
        writer.append(&third).unwrap();

        assert_eq!(read_all(dir.path()).unwrap(), records);
        let scanned = recover(dir.path(), 0).unwrap();
        assert_eq!(scanned.head, Head { seq: 6, hash: records[5].hash.clone() });
        assert_eq!(scanned.ops, ops.iter().map(LogOp::to_op).collect::<Vec<_>>());
        assert_eq!(
            codec::decode::<Remembered>(scanned.ops[0].value.as_deref().unwrap()).unwrap(),
            remembered,
            "the idempotency record reads back whole"
        );
        // Only what is from `replay_from` on is replayed.
        assert!(recover(dir.path(), 4).unwrap().ops.is_empty());
        // A cursor starts anywhere, and at the first segment's start when
        // asked for less.
        let mut cursor = Cursor::new(dir.path(), 3);
        assert_eq!(cursor.next_page(5, 100).unwrap(), records[2..5]);
        assert_eq!(cursor.next_page(u64::MAX, 100).unwrap(), records[5..]);
        assert!(cursor.next_page(u64::MAX, 100).unwrap().is_empty());
    }

    #[test]
    fn a_torn_last_frame_is_cut_off_and_damage_before_it_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let records = chain(3);
        let mut writer = LogWriter::create(dir.path(), &Head::genesis(), false, None, DEFAULT_SEGMENT_BYTES).unwrap();
        let frame = writer.frame(&[&records[0]], &[]);
        writer.append(&frame).unwrap();
        let torn = writer.frame(&[&records[1]], &[]);
        writer.append(&torn[..torn.len() - 3]).unwrap();
        let path = segment_path(dir.path(), 1);
        let scanned = recover(dir.path(), 0).unwrap();
        assert_eq!(scanned.head.seq, 1);
        assert_eq!(fs::metadata(&path).unwrap().len(), HEADER_LEN + frame.len() as u64, "the torn tail is cut off");
        assert_eq!(read_all(dir.path()).unwrap(), records[..1]);

        // A flipped byte in a sealed segment is an error.
        let dir = tempfile::tempdir().unwrap();
        let mut writer = LogWriter::create(dir.path(), &Head::genesis(), false, None, DEFAULT_SEGMENT_BYTES).unwrap();
        let frame = writer.frame(&[&records[0]], &[]);
        writer.append(&frame).unwrap();
        writer.rotate(&Head { seq: 1, hash: records[0].hash.clone() }, None).unwrap().seal().unwrap();
        let frame = writer.frame(&[&records[1]], &[]);
        writer.append(&frame).unwrap();
        let mut bytes = fs::read(segment_path(dir.path(), 1)).unwrap();
        *bytes.last_mut().unwrap() ^= 1;
        fs::write(segment_path(dir.path(), 1), bytes).unwrap();
        match recover(dir.path(), 0) {
            Err(LogError::Corrupt { why, .. }) => assert_eq!(why, "checksum mismatch"),
            Err(other) => panic!("expected a damaged frame, got {other}"),
            Ok(_) => panic!("expected a damaged frame"),
        }
    }

    #[test]
    fn the_table_fills_up_and_then_strings_are_written_out() {
        let dir = tempfile::tempdir().unwrap();
        let mut records: Vec<AuditRecord> = Vec::new();
        for seq in 1..=2500u64 {
            let prev = records.last().map_or("0".repeat(64), |r| r.hash.clone());
            // Requests that fill the table's bytes after about 2,000.
            records.push(record(seq, &prev, &format!("{seq:0>2000}")));
        }
        let mut writer = LogWriter::create(dir.path(), &Head::genesis(), false, None, DEFAULT_SEGMENT_BYTES).unwrap();
        for chunk in records.chunks(7) {
            let refs: Vec<&AuditRecord> = chunk.iter().collect();
            let frame = writer.frame(&refs, &[]);
            writer.append(&frame).unwrap();
        }
        assert_eq!(read_all(dir.path()).unwrap(), records);
    }
}
