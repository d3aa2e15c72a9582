//! The durable state in sled: the hash-chained audit log, decisions by
//! idempotency key, and pending approvals.
//!
//! One writer task owns the chain head. Callers hand it a commit and wait;
//! it takes every commit waiting at that moment, appends them in one sled
//! transaction, flushes once (group commit) and only then answers each. So
//! nobody is told about a write that is not on disk, and concurrent requests
//! share one flush instead of paying one each.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sled::Transactional;
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::decision::Outcome;
use crate::normalize::{Actor, NormalizedRequest};

/// Most commits taken into one flush.
const MAX_BATCH: usize = 1024;
/// Domain separation for record hashes.
const HASH_DOMAIN: &[u8] = b"warden.audit.v1\0";

/// A store failure. Callers fail closed on it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// sled failed.
    #[error("store: {0}")]
    Sled(#[from] sled::Error),
    /// A stored value does not decode.
    #[error("store: corrupt value in `{tree}` at `{key}`: {message}")]
    Corrupt {
        /// The sled tree.
        tree: &'static str,
        /// The key, printable.
        key: String,
        /// What failed.
        message: String,
    },
    /// A batch could not be written; every request in it failed.
    #[error("store: the audit batch was not written: {0}")]
    BatchFailed(String),
    /// The writer task is gone (the monitor is shutting down).
    #[error("store: the audit writer has stopped")]
    WriterGone,
}

/// One entry of the audit log, as stored and hashed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Position in the log, from 1, without gaps.
    pub seq: u64,
    /// When it happened, nanoseconds since the Unix epoch.
    pub time_unix_ns: i64,
    /// What happened: `decision`, and more kinds as the monitor grows.
    pub kind: String,
    /// The authenticated credential that caused it.
    pub caller: String,
    /// Who acted (empty for records that are not about a request).
    pub actor: Actor,
    /// The Cedar action.
    pub action: String,
    /// The normalized resource, `Type::"id"`.
    pub resource: String,
    /// `ALLOW`, `DENY`, `PENDING`, or empty.
    pub outcome: String,
    /// Determining policy ids.
    pub policy_ids: Vec<String>,
    /// Reasons given.
    pub reasons: Vec<String>,
    /// The policy version that decided.
    pub policy_version: String,
    /// The harness's request id.
    pub request_id: String,
    /// The approval, for PENDING and its resolution.
    pub approval_id: String,
    /// Hex SHA-256 of the previous record; all zeros for the first.
    pub prev_hash: String,
    /// Hex SHA-256 of this record's canonical encoding.
    pub hash: String,
}

impl AuditRecord {
    /// SHA-256 over a length-prefixed, domain-separated encoding of every
    /// field but `hash`. JSON is for storage only; the hash never depends on
    /// how JSON happens to be written.
    pub fn compute_hash(&self) -> String {
        let mut h = Sha256::new();
        h.update(HASH_DOMAIN);
        h.update(self.seq.to_be_bytes());
        h.update(self.time_unix_ns.to_be_bytes());
        let mut text = |value: &str| {
            h.update((value.len() as u64).to_be_bytes());
            h.update(value.as_bytes());
        };
        for value in [
            &self.kind,
            &self.caller,
            &self.actor.user,
            &self.actor.agent,
            &self.actor.session,
            &self.action,
            &self.resource,
            &self.outcome,
        ] {
            text(value);
        }
        for list in [&self.policy_ids, &self.reasons] {
            text(&list.len().to_string());
            for value in list {
                text(value);
            }
        }
        for value in [&self.policy_version, &self.request_id, &self.approval_id, &self.prev_hash] {
            text(value);
        }
        hex::encode(h.finalize())
    }
}

/// What a caller wants recorded; the writer adds seq and hashes.
#[derive(Debug, Clone, Default)]
pub struct AuditEntry {
    /// See [`AuditRecord`].
    pub time_unix_ns: i64,
    /// See [`AuditRecord`].
    pub kind: String,
    /// See [`AuditRecord`].
    pub caller: String,
    /// See [`AuditRecord`].
    pub actor: Option<Actor>,
    /// See [`AuditRecord`].
    pub action: String,
    /// See [`AuditRecord`].
    pub resource: String,
    /// See [`AuditRecord`].
    pub outcome: String,
    /// See [`AuditRecord`].
    pub policy_ids: Vec<String>,
    /// See [`AuditRecord`].
    pub reasons: Vec<String>,
    /// See [`AuditRecord`].
    pub policy_version: String,
    /// See [`AuditRecord`].
    pub request_id: String,
    /// See [`AuditRecord`].
    pub approval_id: String,
}

/// A decision as given to a harness, and as kept for idempotent replays.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// The harness's request id (or the one the monitor assigned).
    pub request_id: String,
    /// ALLOW, DENY or PENDING.
    pub outcome: Outcome,
    /// Determining policy ids.
    pub policy_ids: Vec<String>,
    /// Reasons.
    pub reasons: Vec<String>,
    /// The approval, when PENDING.
    pub approval_id: String,
    /// When the approval expires, nanoseconds since the Unix epoch.
    pub expires_at_unix_ns: Option<i64>,
    /// Grants that contributed.
    pub grant_ids: Vec<String>,
    /// The policy version that decided.
    pub policy_version: String,
    /// The audit record of this decision.
    pub audit_seq: u64,
    /// Who resolved the approval.
    pub resolved_by: String,
    /// The approver's note.
    pub note: String,
}

/// A request that waits for a person, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingApproval {
    /// The approval's id.
    pub approval_id: String,
    /// The exact normalized request.
    pub request: NormalizedRequest,
    /// Hex SHA-256 of the request as the harness sent it.
    pub request_hash: String,
    /// The harness's request id.
    pub request_id: String,
    /// The harness credential that asked.
    pub harness: String,
    /// The policies in the way.
    pub policy_ids: Vec<String>,
    /// Their reasons.
    pub reasons: Vec<String>,
    /// Groups that may approve; empty: any approver.
    pub approvers: Vec<String>,
    /// The policy version that decided.
    pub policy_version: String,
    /// Created, nanoseconds since the Unix epoch.
    pub created_unix_ns: i64,
    /// Deadline, nanoseconds since the Unix epoch.
    pub expires_unix_ns: i64,
    /// The audit record of the PENDING decision.
    pub audit_seq: u64,
}

/// A decision kept under an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remembered {
    /// Hash of the request the key was first used for.
    pub request_hash: String,
    /// The decision given then.
    pub decision: DecisionRecord,
}

/// One decision to make durable.
#[derive(Debug)]
pub struct DecisionCommit {
    /// The audit entry.
    pub entry: AuditEntry,
    /// The decision; its `audit_seq` is filled in.
    pub decision: DecisionRecord,
    /// `(harness, request id, request hash)` when the request is idempotent.
    pub idempotency: Option<(String, String, String)>,
    /// The approval to store, for PENDING; its `audit_seq` is filled in.
    pub approval: Option<PendingApproval>,
}

/// What the writer did with a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Committed {
    /// Appended and flushed.
    New(DecisionRecord),
    /// The idempotency key was already used for the same request: the
    /// decision given then, nothing appended.
    Replay(DecisionRecord),
    /// The idempotency key was already used for a different request.
    KeyReused,
}

struct Job {
    commit: DecisionCommit,
    reply: oneshot::Sender<Result<Committed, StoreError>>,
}

/// The head of the chain: last seq and its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// Last sequence number, 0 when empty.
    pub seq: u64,
    /// Hex hash of the last record, zeros when empty.
    pub hash: String,
}

impl Head {
    fn genesis() -> Self {
        Self { seq: 0, hash: "0".repeat(64) }
    }
}

/// The sled database and its writer.
#[derive(Clone)]
pub struct Store {
    db: sled::Db,
    audit: sled::Tree,
    requests: sled::Tree,
    approvals: sled::Tree,
    writer: mpsc::Sender<Job>,
    appended: broadcast::Sender<AuditRecord>,
}

/// Stops the writer when the monitor shuts down.
pub struct StoreCloser {
    close: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
    db: sled::Db,
}

impl StoreCloser {
    /// Writes and answers every commit already sent, stops the writer (later
    /// commits fail with [`StoreError::WriterGone`]), and flushes.
    pub async fn close(self) -> Result<(), StoreError> {
        let _ = self.close.send(());
        let _ = self.task.await;
        self.db.flush_async().await?;
        Ok(())
    }
}

/// Names of the sled trees.
pub mod trees {
    /// seq (u64 big-endian) -> [`super::AuditRecord`] JSON.
    pub const AUDIT: &str = "audit";
    /// harness NUL request id -> [`super::Remembered`] JSON.
    pub const REQUESTS: &str = "requests";
    /// approval id -> [`super::PendingApproval`] JSON.
    pub const APPROVALS: &str = "approvals";
}

impl Store {
    /// Opens (or creates) the store in `dir` and starts its writer. Must be
    /// called inside a tokio runtime.
    pub fn open(dir: &Path) -> Result<(Self, StoreCloser), StoreError> {
        let db = sled::Config::new().path(dir).open()?;
        let audit = db.open_tree(trees::AUDIT)?;
        let requests = db.open_tree(trees::REQUESTS)?;
        let approvals = db.open_tree(trees::APPROVALS)?;
        let head = match audit.last()? {
            Some((key, value)) => {
                let record = decode_record(&key, &value)?;
                Head { seq: record.seq, hash: record.hash }
            }
            None => Head::genesis(),
        };
        let (writer, rx) = mpsc::channel(4 * MAX_BATCH);
        let (appended, _) = broadcast::channel(4096);
        let store = Self { db: db.clone(), audit, requests, approvals, writer, appended };
        let (close, closing) = oneshot::channel();
        let task = tokio::spawn(store.clone().write_loop(rx, closing, head));
        Ok((store, StoreCloser { close, task, db }))
    }

    /// Appends a decision (unless its idempotency key was used before) and
    /// returns once it is flushed.
    pub async fn commit_decision(&self, commit: DecisionCommit) -> Result<Committed, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.writer.send(Job { commit, reply }).await.map_err(|_| StoreError::WriterGone)?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }

    /// The decision remembered for `(harness, request_id)`.
    pub fn remembered(&self, harness: &str, request_id: &str) -> Result<Option<Remembered>, StoreError> {
        let key = request_key(harness, request_id);
        self.requests.get(&key)?.map(|value| decode(trees::REQUESTS, &key, &value)).transpose()
    }

    /// A stored approval.
    pub fn approval(&self, approval_id: &str) -> Result<Option<PendingApproval>, StoreError> {
        self.approvals
            .get(approval_id.as_bytes())?
            .map(|value| decode(trees::APPROVALS, approval_id.as_bytes(), &value))
            .transpose()
    }

    /// Audit records from `from_seq` on, at most `limit`.
    pub fn audit_from(&self, from_seq: u64, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        self.audit
            .range(from_seq.to_be_bytes()..)
            .take(limit)
            .map(|item| {
                let (key, value) = item?;
                decode_record(&key, &value)
            })
            .collect()
    }

    /// The newest record's seq, 0 when the log is empty.
    pub fn last_seq(&self) -> Result<u64, StoreError> {
        Ok(match self.audit.last()? {
            Some((key, _)) => seq_of_key(&key).unwrap_or(0),
            None => 0,
        })
    }

    /// Records appended from now on, after they are flushed.
    pub fn subscribe(&self) -> broadcast::Receiver<AuditRecord> {
        self.appended.subscribe()
    }

    /// Walks the whole chain.
    pub fn verify(&self) -> VerifyReport {
        verify_chain(self.audit.iter().map(|item| item.map(|(k, v)| (k.to_vec(), v.to_vec()))))
    }

    async fn write_loop(self, mut rx: mpsc::Receiver<Job>, mut closing: oneshot::Receiver<()>, mut head: Head) {
        // Our own sender must not keep the channel open.
        let Store { db, audit, requests, approvals, writer, appended } = self;
        drop(writer);
        let mut closed = false;
        loop {
            let first = tokio::select! {
                biased;
                _ = &mut closing, if !closed => {
                    // No new commits; those already sent are still written,
                    // then `recv` returns None.
                    rx.close();
                    closed = true;
                    continue;
                }
                job = rx.recv() => match job {
                    Some(job) => job,
                    None => break,
                },
            };
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            let durable_head = head.clone();
            let mut answers: Vec<(oneshot::Sender<Result<Committed, StoreError>>, Committed)> = Vec::new();
            let mut writes: Vec<Write> = Vec::new();
            let mut keys_in_batch: HashMap<Vec<u8>, Remembered> = HashMap::new();
            for Job { commit, reply } in batch {
                match plan(&requests, &keys_in_batch, &commit, &mut head) {
                    Ok(Planned::Append(write)) => {
                        if let Some(key) = &write.request_key {
                            keys_in_batch.insert(key.clone(), write.remembered.clone());
                        }
                        answers.push((reply, Committed::New(write.remembered.decision.clone())));
                        writes.push(*write);
                    }
                    Ok(Planned::Answer(committed)) => answers.push((reply, *committed)),
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            let result = apply(&db, &audit, &requests, &approvals, &writes).await;
            match result {
                Ok(()) => {
                    for (reply, committed) in answers {
                        let _ = reply.send(Ok(committed));
                    }
                    for write in writes {
                        let _ = appended.send(write.record);
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "audit batch failed; the requests in it are answered with an error");
                    head = durable_head;
                    for (reply, _) in answers {
                        let _ = reply.send(Err(StoreError::BatchFailed(e.to_string())));
                    }
                }
            }
        }
        if let Err(e) = db.flush_async().await {
            tracing::error!(error = %e, "final flush failed");
        }
    }
}

struct Write {
    record: AuditRecord,
    remembered: Remembered,
    request_key: Option<Vec<u8>>,
    approval: Option<PendingApproval>,
}

enum Planned {
    Append(Box<Write>),
    Answer(Box<Committed>),
}

/// Decides what one commit does, advancing `head` when it appends.
fn plan(
    requests: &sled::Tree,
    keys_in_batch: &HashMap<Vec<u8>, Remembered>,
    commit: &DecisionCommit,
    head: &mut Head,
) -> Result<Planned, StoreError> {
    let request_key = match &commit.idempotency {
        Some((harness, request_id, request_hash)) => {
            let key = request_key(harness, request_id);
            let earlier = match keys_in_batch.get(&key) {
                Some(found) => Some(found.clone()),
                None => requests.get(&key)?.map(|v| decode::<Remembered>(trees::REQUESTS, &key, &v)).transpose()?,
            };
            if let Some(earlier) = earlier {
                return Ok(Planned::Answer(Box::new(if &earlier.request_hash == request_hash {
                    Committed::Replay(earlier.decision)
                } else {
                    Committed::KeyReused
                })));
            }
            Some(key)
        }
        None => None,
    };
    let entry = &commit.entry;
    let seq = head.seq + 1;
    let mut record = AuditRecord {
        seq,
        time_unix_ns: entry.time_unix_ns,
        kind: entry.kind.clone(),
        caller: entry.caller.clone(),
        actor: entry.actor.clone().unwrap_or(Actor {
            user: String::new(),
            agent: String::new(),
            session: String::new(),
        }),
        action: entry.action.clone(),
        resource: entry.resource.clone(),
        outcome: entry.outcome.clone(),
        policy_ids: entry.policy_ids.clone(),
        reasons: entry.reasons.clone(),
        policy_version: entry.policy_version.clone(),
        request_id: entry.request_id.clone(),
        approval_id: entry.approval_id.clone(),
        prev_hash: head.hash.clone(),
        hash: String::new(),
    };
    record.hash = record.compute_hash();
    *head = Head { seq, hash: record.hash.clone() };
    let mut decision = commit.decision.clone();
    decision.audit_seq = seq;
    let approval = commit.approval.clone().map(|mut a| {
        a.audit_seq = seq;
        a
    });
    let request_hash = commit.idempotency.as_ref().map(|(_, _, h)| h.clone()).unwrap_or_default();
    Ok(Planned::Append(Box::new(Write {
        record,
        remembered: Remembered { request_hash, decision },
        request_key,
        approval,
    })))
}

/// Writes a batch in one transaction and flushes it.
async fn apply(
    db: &sled::Db,
    audit: &sled::Tree,
    requests: &sled::Tree,
    approvals: &sled::Tree,
    writes: &[Write],
) -> Result<(), StoreError> {
    if writes.is_empty() {
        return Ok(());
    }
    let mut encoded = Vec::with_capacity(writes.len());
    for write in writes {
        let record = encode(&write.record)?;
        let remembered = write.request_key.as_ref().map(|_| encode(&write.remembered)).transpose()?;
        let approval = write.approval.as_ref().map(encode).transpose()?;
        encoded.push((record, remembered, approval));
    }
    (audit, requests, approvals)
        .transaction(|(audit, requests, approvals)| {
            for (write, (record, remembered, approval)) in writes.iter().zip(&encoded) {
                audit.insert(&write.record.seq.to_be_bytes(), record.as_slice())?;
                if let (Some(key), Some(value)) = (&write.request_key, remembered) {
                    requests.insert(key.as_slice(), value.as_slice())?;
                }
                if let (Some(approval), Some(value)) = (&write.approval, approval) {
                    approvals.insert(approval.approval_id.as_bytes(), value.as_slice())?;
                }
            }
            Ok(())
        })
        .map_err(|e: sled::transaction::TransactionError<()>| match e {
            sled::transaction::TransactionError::Storage(e) => StoreError::Sled(e),
            sled::transaction::TransactionError::Abort(()) => StoreError::WriterGone,
        })?;
    db.flush_async().await?;
    Ok(())
}

fn request_key(harness: &str, request_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(harness.len() + 1 + request_id.len());
    key.extend_from_slice(harness.as_bytes());
    key.push(0);
    key.extend_from_slice(request_id.as_bytes());
    key
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(value).map_err(|e| StoreError::Corrupt {
        tree: "encode",
        key: String::new(),
        message: e.to_string(),
    })
}

fn decode<T: for<'de> Deserialize<'de>>(tree: &'static str, key: &[u8], value: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(value).map_err(|e| StoreError::Corrupt {
        tree,
        key: String::from_utf8_lossy(key).into_owned(),
        message: e.to_string(),
    })
}

fn seq_of_key(key: &[u8]) -> Option<u64> {
    <[u8; 8]>::try_from(key).ok().map(u64::from_be_bytes)
}

fn decode_record(key: &[u8], value: &[u8]) -> Result<AuditRecord, StoreError> {
    let seq = seq_of_key(key).ok_or_else(|| StoreError::Corrupt {
        tree: trees::AUDIT,
        key: hex::encode(key),
        message: "key is not a sequence number".into(),
    })?;
    let record: AuditRecord = serde_json::from_slice(value).map_err(|e| StoreError::Corrupt {
        tree: trees::AUDIT,
        key: seq.to_string(),
        message: e.to_string(),
    })?;
    Ok(record)
}

/// The result of walking the audit chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Records checked (up to and including the first bad one).
    pub records: u64,
    /// The last good head.
    pub head: Head,
    /// The first record that does not verify, and why.
    pub first_bad: Option<(u64, String)>,
}

impl VerifyReport {
    /// Whether the whole chain verified.
    pub fn ok(&self) -> bool {
        self.first_bad.is_none()
    }
}

/// Checks that records are numbered 1, 2, … without gaps, that each links to
/// the previous one's hash, and that each hash matches its content. Pure, so
/// that `wardenctl audit verify --data` can run it on a stopped monitor's store.
pub fn verify_chain<E: std::fmt::Display>(
    records: impl Iterator<Item = Result<(Vec<u8>, Vec<u8>), E>>,
) -> VerifyReport {
    let mut head = Head::genesis();
    let mut count = 0;
    for item in records {
        count += 1;
        let expected_seq = head.seq + 1;
        let bad = |message: String| VerifyReport {
            records: count,
            head: head.clone(),
            first_bad: Some((expected_seq, message)),
        };
        let (key, value) = match item {
            Ok(pair) => pair,
            Err(e) => return bad(format!("cannot read the record: {e}")),
        };
        let record = match decode_record(&key, &value) {
            Ok(record) => record,
            Err(e) => return bad(e.to_string()),
        };
        let key_seq = seq_of_key(&key).unwrap_or(0);
        if key_seq != expected_seq {
            return bad(format!("record {key_seq} follows {}: a record is missing", head.seq));
        }
        if record.seq != key_seq {
            return bad(format!("record stored at {key_seq} says it is {}", record.seq));
        }
        if record.prev_hash != head.hash {
            return bad("does not link to the previous record's hash".into());
        }
        if record.compute_hash() != record.hash {
            return bad("content does not match its hash: the record was altered".into());
        }
        head = Head { seq: record.seq, hash: record.hash };
    }
    VerifyReport { records: count, head, first_bad: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: u32) -> DecisionCommit {
        DecisionCommit {
            entry: AuditEntry {
                kind: "decision".into(),
                caller: "h".into(),
                outcome: "ALLOW".into(),
                ..AuditEntry::default()
            },
            decision: DecisionRecord {
                request_id: format!("r{n}"),
                outcome: Outcome::Allow,
                policy_ids: vec![],
                reasons: vec![],
                approval_id: String::new(),
                expires_at_unix_ns: None,
                grant_ids: vec![],
                policy_version: "v".into(),
                audit_seq: 0,
                resolved_by: String::new(),
                note: String::new(),
            },
            idempotency: Some(("h".into(), format!("r{n}"), format!("hash{n}"))),
            approval: None,
        }
    }

    #[tokio::test]
    async fn concurrent_commits_form_one_gapless_chain_that_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (store, closer) = Store::open(dir.path()).unwrap();
            let mut tasks = Vec::new();
            for n in 0..200 {
                let store = store.clone();
                tasks.push(tokio::spawn(async move { store.commit_decision(entry(n)).await }));
            }
            let mut seqs = Vec::new();
            for task in tasks {
                match task.await.unwrap().unwrap() {
                    Committed::New(d) => seqs.push(d.audit_seq),
                    other => panic!("unexpected {other:?}"),
                }
            }
            seqs.sort_unstable();
            assert_eq!(seqs, (1..=200).collect::<Vec<_>>());
            // Same key and hash: the same decision again, nothing appended.
            let replay = store.commit_decision(entry(7)).await.unwrap();
            assert!(matches!(replay, Committed::Replay(ref d) if d.request_id == "r7"), "{replay:?}");
            let mut reused = entry(7);
            reused.idempotency = Some(("h".into(), "r7".into(), "other".into()));
            assert_eq!(store.commit_decision(reused).await.unwrap(), Committed::KeyReused);
            drop(store);
            closer.close().await.unwrap();
        }
        let (store, closer) = Store::open(dir.path()).unwrap();
        let report = store.verify();
        assert!(report.ok(), "{report:?}");
        assert_eq!(report.records, 200);
        let Committed::New(next) = store.commit_decision(entry(999)).await.unwrap() else { panic!() };
        assert_eq!(next.audit_seq, 201);
        drop(store);
        closer.close().await.unwrap();
    }

    #[tokio::test]
    async fn an_altered_or_missing_record_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let (store, closer) = Store::open(dir.path()).unwrap();
        for n in 0..5 {
            store.commit_decision(entry(n)).await.unwrap();
        }
        let records: Vec<(Vec<u8>, Vec<u8>)> =
            store.audit.iter().map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec()))).collect::<Result<_, _>>().unwrap();
        drop(store);
        closer.close().await.unwrap();

        let mut altered = records.clone();
        let text = String::from_utf8(altered[2].1.clone()).unwrap().replace("ALLOW", "DENY");
        altered[2].1 = text.into_bytes();
        let report = verify_chain(altered.into_iter().map(Ok::<_, String>));
        assert_eq!(report.first_bad.map(|(seq, _)| seq), Some(3));

        let mut gapped = records;
        gapped.remove(1);
        let report = verify_chain(gapped.into_iter().map(Ok::<_, String>));
        assert_eq!(report.first_bad.map(|(seq, _)| seq), Some(2));
    }
}
