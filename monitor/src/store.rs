//! The durable state in sled: the hash-chained audit log, decisions by
//! idempotency key, and pending approvals.
//!
//! One writer task owns the chain head. Callers hand it a commit and wait;
//! it takes every commit waiting at that moment, appends them to the
//! write-ahead log ([`crate::wal`]) as one frame, applies the frame to the
//! sled trees in one transaction, and hands the batch to the sync thread,
//! which fdatasyncs the log (group commit) and only then answers each. So
//! nobody is told about a write that is not on disk, concurrent requests
//! share one sync instead of paying one each, and the next batch is written
//! while the previous one is being synced. sled itself is flushed only at
//! checkpoints, when a log segment is full and on shutdown; opening the
//! store applies whatever the log holds beyond that.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::codec::{self, CodecError, Decoder, Encoder, Record};
use crate::decision::Outcome;
use crate::grants::Grant;
use crate::normalize::{Actor, NormalizedRequest, RequestInput};
use crate::wal::{self, Op, Wal, WalError};

/// How long a decision is replayed for its request id. After it, or once the
/// policies changed, the same id is decided afresh: a harness cannot keep an
/// old ALLOW alive by reusing its id.
pub const REPLAY_WINDOW_NS: i64 = 10 * 60 * 1_000_000_000;

/// Idempotency records rotate through three trees, one replay window each:
/// a decision goes to the slot of its window; a lookup reads the current
/// and the previous slot (a record is replayable for one window); and once
/// a window starts, the slot after it, which holds records at least a
/// window older than anything replayable, is emptied in the background.
/// So the records take bounded room instead of growing for ever.
pub const REQUEST_SLOTS: usize = 3;

/// How far apart two requests' clock reads may be from the order in which
/// the writer sees them.
const CLOCK_SKEW_NS: i64 = 60 * 1_000_000_000;

fn request_slot(unix_ns: i64) -> usize {
    let slots = i64::try_from(REQUEST_SLOTS).unwrap_or(1);
    usize::try_from(unix_ns.div_euclid(REPLAY_WINDOW_NS).rem_euclid(slots)).unwrap_or(0)
}

/// sled's page cache, in bytes. sled's own memory is several times this
/// (its in-memory nodes are larger than their size on disk). 16 MiB and
/// 4 MiB decided equally fast in `warden-bench`, 4 MiB with 10–23 MiB less
/// resident; 8 MiB leaves room for the hot pages of larger idempotency and
/// session trees than the bench makes.
const CACHE_BYTES: u64 = 8 * 1024 * 1024;

/// Approval changes kept for watchers that are behind.
const APPROVAL_EVENTS: usize = 1024;
/// Most commits taken into one batch.
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
    /// The write-ahead log cannot be written or read back.
    #[error("store: {0}")]
    Wal(#[from] WalError),
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
    /// The whole normalized request (method, argv, cwd, justification,
    /// context…) as JSON; empty for records that are not about a request.
    #[serde(default)]
    pub request: String,
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
    /// field but `hash`; it never depends on the storage form.
    pub fn compute_hash(&self) -> String {
        let mut h = Sha256::new();
        h.update(HASH_DOMAIN);
        h.update(self.seq.to_be_bytes());
        h.update(self.time_unix_ns.to_be_bytes());
        let mut text = |value: &str| {
            h.update((value.len() as u64).to_be_bytes());
            h.update(value.as_bytes());
        };
        self.texts_before_lists().into_iter().for_each(&mut text);
        for list in [&self.policy_ids, &self.reasons] {
            text(&list.len().to_string());
            for value in list {
                text(value);
            }
        }
        self.texts_after_lists().into_iter().for_each(text);
        hex::encode(h.finalize())
    }

    /// The text fields before `policy_ids` and `reasons`, in hashing and
    /// storage order.
    fn texts_before_lists(&self) -> [&str; 9] {
        [
            &self.kind,
            &self.caller,
            &self.actor.user,
            &self.actor.agent,
            &self.actor.session,
            &self.action,
            &self.resource,
            &self.request,
            &self.outcome,
        ]
    }

    /// The text fields after the lists, but `hash`.
    fn texts_after_lists(&self) -> [&str; 4] {
        [&self.policy_version, &self.request_id, &self.approval_id, &self.prev_hash]
    }
}

impl Record for AuditRecord {
    fn write(&self, out: &mut Encoder) {
        out.u64(self.seq);
        out.i64(self.time_unix_ns);
        self.texts_before_lists().into_iter().for_each(|value| out.str(value));
        out.strs(self.policy_ids.iter());
        out.strs(self.reasons.iter());
        self.texts_after_lists().into_iter().for_each(|value| out.str(value));
        out.str(&self.hash);
    }

    fn read(input: &mut Decoder<'_>) -> Result<Self, CodecError> {
        Ok(Self {
            seq: input.u64("seq")?,
            time_unix_ns: input.i64("time_unix_ns")?,
            kind: input.str("kind")?,
            caller: input.str("caller")?,
            actor: Actor {
                user: input.str("actor.user")?,
                agent: input.str("actor.agent")?,
                session: input.str("actor.session")?,
            },
            action: input.str("action")?,
            resource: input.str("resource")?,
            request: input.str("request")?,
            outcome: input.str("outcome")?,
            policy_ids: input.strs("policy_ids")?,
            reasons: input.strs("reasons")?,
            policy_version: input.str("policy_version")?,
            request_id: input.str("request_id")?,
            approval_id: input.str("approval_id")?,
            prev_hash: input.str("prev_hash")?,
            hash: input.str("hash")?,
        })
    }
}

impl AuditRecord {
    /// The record as stored (see [`crate::codec`]).
    pub fn to_bytes(&self) -> Vec<u8> {
        codec::encode(self)
    }

    /// A record as stored, in this form or in the JSON of older versions.
    pub fn from_bytes(value: &[u8]) -> Result<Self, CodecError> {
        codec::decode(value)
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
    pub request: String,
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

/// Where an approval stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ApprovalState {
    /// Waiting for a person.
    Pending,
    /// A person approved and the request passed again: ALLOW.
    Approved,
    /// A person denied it, or approved but the request no longer passed: DENY.
    Denied,
    /// Nobody answered before the deadline: DENY.
    Expired,
}

impl ApprovalState {
    /// `PENDING`, `APPROVED`, `DENIED` or `EXPIRED`.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalState::Pending => "PENDING",
            ApprovalState::Approved => "APPROVED",
            ApprovalState::Denied => "DENIED",
            ApprovalState::Expired => "EXPIRED",
        }
    }
}

/// A request that waited (or waits) for a person, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    /// The approval's id.
    pub approval_id: String,
    /// The request as the harness sent it.
    pub input: RequestInput,
    /// The exact normalized request, which is what is re-evaluated.
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
    /// The policies that would permit it once approved.
    pub permit_ids: Vec<String>,
    /// Groups whose member may resolve it; empty: any approver.
    pub approvers: Vec<String>,
    /// The policy version that decided PENDING.
    pub policy_version: String,
    /// Created, nanoseconds since the Unix epoch.
    pub created_unix_ns: i64,
    /// Deadline, nanoseconds since the Unix epoch.
    pub expires_unix_ns: i64,
    /// The audit record of the PENDING decision.
    pub audit_seq: u64,
    /// Where it stands.
    pub state: ApprovalState,
    /// The approver credential that resolved it.
    pub resolved_by: String,
    /// The approver's note or message for the agent.
    pub note: String,
    /// When it was resolved or expired.
    pub resolved_unix_ns: Option<i64>,
    /// The decision as the harness sees it now: PENDING, then the final one.
    pub decision: DecisionRecord,
}

/// A lockdown of a session, a user or an agent kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lock {
    /// `session:ID`, `user:ID` or `agent:ID`.
    pub target: String,
    /// Why, for the denials it causes.
    pub reason: String,
    /// The admin credential that locked it.
    pub locked_by: String,
    /// When, nanoseconds since the Unix epoch.
    pub locked_unix_ns: i64,
}

/// Which session: a session id is scoped to the harness credential and the
/// user that use it, so two users (or two harnesses) naming the same id have
/// two sessions and no one can squat on or share another's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct SessionKey {
    /// The session id the harness sent.
    pub session: String,
    /// The harness credential's name.
    pub harness: String,
    /// The user.
    pub user: String,
}

impl SessionKey {
    /// The session of `actor` as asked by the harness credential `harness`.
    pub fn of(actor: &Actor, harness: &str) -> Self {
        Self { session: actor.session.clone(), harness: harness.to_owned(), user: actor.user.clone() }
    }

    /// The key in the `sessions` tree: `session NUL harness NUL user`. Ids
    /// hold no control characters (normalize refuses them), so the
    /// separators are unambiguous, and every session of one id shares the
    /// prefix `session NUL`. Credential names are never empty, so an empty
    /// harness is a record an older version kept under the bare id.
    fn bytes(&self) -> Vec<u8> {
        if self.harness.is_empty() {
            return self.session.as_bytes().to_vec();
        }
        let mut key = Vec::with_capacity(self.session.len() + self.harness.len() + self.user.len() + 2);
        key.extend_from_slice(self.session.as_bytes());
        key.push(0);
        key.extend_from_slice(self.harness.as_bytes());
        key.push(0);
        key.extend_from_slice(self.user.as_bytes());
        key
    }
}

/// What the monitor remembers of a session.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The session id.
    pub session: String,
    /// Its user, as first seen.
    pub user: String,
    /// Its agent kind, as first seen.
    pub agent: String,
    /// Labels it gained, for good (until an admin clears them).
    pub labels: std::collections::BTreeSet<String>,
    /// The harness credential whose session it is; empty in a record
    /// written before sessions were scoped by harness and user (kept under
    /// the bare session id, see [`Store::session`]).
    #[serde(default)]
    pub harness: String,
}

impl SessionRecord {
    /// Which session this record is of.
    pub fn key(&self) -> SessionKey {
        SessionKey { session: self.session.clone(), harness: self.harness.clone(), user: self.user.clone() }
    }
}

/// A grant to store or forget.
#[derive(Debug, Clone)]
pub enum GrantChange {
    /// Store (create).
    Put(Box<Grant>),
    /// Forget (revoke, expire).
    Remove(String),
}

/// A lock to store or lift.
#[derive(Debug, Clone)]
pub enum LockChange {
    /// Lock.
    Put(Lock),
    /// Unlock the target.
    Remove(String),
}

impl Record for SessionRecord {
    fn write(&self, out: &mut Encoder) {
        out.str(&self.session);
        out.str(&self.user);
        out.str(&self.agent);
        out.strs(self.labels.iter());
        out.str(&self.harness);
    }

    fn read(input: &mut Decoder<'_>) -> Result<Self, CodecError> {
        Ok(Self {
            session: input.str("session")?,
            user: input.str("user")?,
            agent: input.str("agent")?,
            labels: input.str_set("labels")?,
            // Records written before sessions were scoped end here.
            harness: if input.is_empty() { String::new() } else { input.str("harness")? },
        })
    }
}

/// A change to a session's record, merged by the writer so that concurrent
/// requests never lose a label.
#[derive(Debug, Clone)]
pub enum SessionChange {
    /// Remember the session (first sight) and add labels.
    Touch {
        /// Which session (its user is the key's).
        key: SessionKey,
        /// Its agent kind.
        agent: String,
        /// Labels gained.
        add: Vec<String>,
    },
    /// Drop every label.
    ClearLabels {
        /// Which session.
        key: SessionKey,
    },
}

impl SessionChange {
    /// The session it changes.
    fn key(&self) -> &SessionKey {
        match self {
            Self::Touch { key, .. } | Self::ClearLabels { key } => key,
        }
    }
}

/// A change to an approval, published after it is flushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalEvent {
    /// The approval as it now stands.
    pub approval: ApprovalRecord,
}

/// A decision kept under an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remembered {
    /// Hash of the request the key was first used for.
    pub request_hash: String,
    /// When it was decided, nanoseconds since the Unix epoch.
    #[serde(default)]
    pub decided_unix_ns: i64,
    /// The decision given then.
    pub decision: DecisionRecord,
}

impl Remembered {
    /// Whether this decision is still the answer for its request id.
    pub fn replayable(&self, now_unix_ns: i64, policy_version: &str) -> bool {
        now_unix_ns.saturating_sub(self.decided_unix_ns) < REPLAY_WINDOW_NS
            && self.decision.policy_version == policy_version
    }
}

impl Record for Remembered {
    fn write(&self, out: &mut Encoder) {
        let d = &self.decision;
        out.str(&self.request_hash);
        out.i64(self.decided_unix_ns);
        out.str(&d.request_id);
        out.str(d.outcome.as_str());
        out.strs(d.policy_ids.iter());
        out.strs(d.reasons.iter());
        out.str(&d.approval_id);
        out.opt_i64(d.expires_at_unix_ns);
        out.strs(d.grant_ids.iter());
        out.str(&d.policy_version);
        out.u64(d.audit_seq);
        out.str(&d.resolved_by);
        out.str(&d.note);
    }

    fn read(input: &mut Decoder<'_>) -> Result<Self, CodecError> {
        let request_hash = input.str("request_hash")?;
        let decided_unix_ns = input.i64("decided_unix_ns")?;
        let request_id = input.str("decision.request_id")?;
        let outcome = input.str("decision.outcome")?;
        let outcome = Outcome::from_name(&outcome)
            .ok_or_else(|| CodecError::new(format!("unknown outcome `{outcome}` in decision.outcome")))?;
        let decision = DecisionRecord {
            request_id,
            outcome,
            policy_ids: input.strs("decision.policy_ids")?,
            reasons: input.strs("decision.reasons")?,
            approval_id: input.str("decision.approval_id")?,
            expires_at_unix_ns: input.opt_i64("decision.expires_at_unix_ns")?,
            grant_ids: input.strs("decision.grant_ids")?,
            policy_version: input.str("decision.policy_version")?,
            audit_seq: input.u64("decision.audit_seq")?,
            resolved_by: input.str("decision.resolved_by")?,
            note: input.str("decision.note")?,
        };
        Ok(Self { request_hash, decided_unix_ns, decision })
    }
}

/// What must hold for a commit to be appended; checked by the writer, so
/// that concurrent commits cannot both pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guard {
    /// Nothing.
    None,
    /// The harness's request id is new (else the earlier decision is replayed,
    /// or the key is reported reused for a different request).
    NewRequest {
        /// The harness credential.
        harness: String,
        /// The idempotency key.
        request_id: String,
        /// Hash of the request.
        request_hash: String,
        /// Now, nanoseconds since the Unix epoch.
        now_unix_ns: i64,
        /// The policy version deciding now.
        policy_version: String,
        /// Whether an earlier decision may be replayed at all (not when the
        /// session is locked now or a grant it relied on is gone).
        replay: bool,
    },
    /// The approval is still pending (else its current state is returned).
    StillPending {
        /// The approval.
        approval_id: String,
    },
}

/// One audit record and the state that goes with it, made durable together.
#[derive(Debug)]
pub struct Commit {
    /// The audit entry.
    pub entry: AuditEntry,
    /// What must hold.
    pub guard: Guard,
    /// A decision to remember under the request id of a `NewRequest` guard;
    /// its `audit_seq` is filled in.
    pub decision: Option<DecisionRecord>,
    /// An approval to store (new or changed). When new (pending), its
    /// `audit_seq` and its decision's are filled in; otherwise its
    /// decision's `audit_seq` is.
    pub approval: Option<ApprovalRecord>,
    /// A grant to store or forget.
    pub grant: Option<GrantChange>,
    /// A lock to store or lift.
    pub lock: Option<LockChange>,
    /// A change to a session's record.
    pub session: Option<SessionChange>,
}

impl Commit {
    /// A record with nothing else.
    pub fn record(entry: AuditEntry) -> Self {
        Self { entry, guard: Guard::None, decision: None, approval: None, grant: None, lock: None, session: None }
    }
}

/// What the writer did with a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Committed {
    /// Appended and flushed, with the stored decision and approval.
    New {
        /// The audit record's seq.
        seq: u64,
        /// The decision as stored.
        decision: Option<DecisionRecord>,
        /// The approval as stored.
        approval: Option<Box<ApprovalRecord>>,
        /// The session record as stored.
        session: Option<Box<SessionRecord>>,
    },
    /// The idempotency key was already used for the same request: the
    /// decision given then, nothing appended.
    Replay(DecisionRecord),
    /// The idempotency key was already used for a different request (by
    /// its hash): what was decided then, nothing appended.
    KeyReused(Box<Remembered>),
    /// The approval is no longer pending: how it stands, nothing appended.
    NotPending(Box<ApprovalRecord>),
}

struct Job {
    commit: Commit,
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
    trees: Trees,
    /// The replay window whose pruning was last done (see [`REQUEST_SLOTS`]).
    pruned_window: Arc<std::sync::atomic::AtomicI64>,
    /// Whether a pruning is under way.
    pruning: Arc<std::sync::atomic::AtomicBool>,
    flushed: watch::Receiver<u64>,
    writer: mpsc::Sender<Job>,
    approval_events: broadcast::Sender<ApprovalEvent>,
}

#[derive(Clone)]
struct Trees {
    audit: sled::Tree,
    /// The idempotency slots, see [`REQUEST_SLOTS`].
    requests: [sled::Tree; REQUEST_SLOTS],
    approvals: sled::Tree,
    pending: sled::Tree,
    pending_sessions: sled::Tree,
    /// `harness \0 approval id` → deadline: waiting approvals by harness.
    pending_harnesses: sled::Tree,
    grants: sled::Tree,
    locks: sled::Tree,
    sessions: sled::Tree,
}

/// Tree numbers in write-ahead log operations (stored on disk: never renumber).
mod tree_no {
    pub const AUDIT: u8 = 0;
    pub const REQUESTS: u8 = 1;
    pub const APPROVALS: u8 = 2;
    pub const PENDING: u8 = 3;
    pub const PENDING_SESSIONS: u8 = 4;
    pub const GRANTS: u8 = 5;
    pub const LOCKS: u8 = 6;
    pub const SESSIONS: u8 = 7;
    pub const REQUESTS_1: u8 = 8;
    pub const REQUESTS_2: u8 = 9;
    pub const PENDING_HARNESSES: u8 = 10;
    /// The tree number of idempotency slot `slot`.
    pub fn requests(slot: usize) -> u8 {
        match slot {
            1 => REQUESTS_1,
            2 => REQUESTS_2,
            _ => REQUESTS,
        }
    }
}

impl Trees {
    fn open(db: &sled::Db) -> Result<Self, StoreError> {
        Ok(Self {
            audit: db.open_tree(trees::AUDIT)?,
            requests: [
                db.open_tree(trees::REQUESTS)?,
                db.open_tree(trees::REQUESTS_1)?,
                db.open_tree(trees::REQUESTS_2)?,
            ],
            approvals: db.open_tree(trees::APPROVALS)?,
            pending: db.open_tree(trees::PENDING)?,
            pending_sessions: db.open_tree(trees::PENDING_SESSIONS)?,
            pending_harnesses: db.open_tree(trees::PENDING_HARNESSES)?,
            grants: db.open_tree(trees::GRANTS)?,
            locks: db.open_tree(trees::LOCKS)?,
            sessions: db.open_tree(trees::SESSIONS)?,
        })
    }

    /// What is known of a session. A store written before sessions were
    /// scoped keeps a record under the bare session id; it is this
    /// session's when its user is this key's (its harness was not kept), so
    /// labels gained before an upgrade still count after it.
    fn session(&self, key: &SessionKey) -> Result<Option<SessionRecord>, StoreError> {
        if key.harness.is_empty() {
            return self.legacy_session(key);
        }
        let bytes = key.bytes();
        if let Some(value) = self.sessions.get(&bytes)? {
            return read(trees::SESSIONS, &bytes, &value).map(Some);
        }
        self.legacy_session(key)
    }

    /// The record an older version kept under the bare session id, when it
    /// is of this key's user.
    fn legacy_session(&self, key: &SessionKey) -> Result<Option<SessionRecord>, StoreError> {
        let Some(value) = self.sessions.get(key.session.as_bytes())? else { return Ok(None) };
        let record: SessionRecord = read(trees::SESSIONS, key.session.as_bytes(), &value)?;
        // Another user's record under the bare id is not this session.
        Ok((record.user == key.user).then(|| SessionRecord { harness: key.harness.clone(), ..record }))
    }

    /// The newest idempotency record of `key` that can still be replayable
    /// at `now_unix_ns`: from the current and the previous slot, and with
    /// `ahead`, also the next one (a request whose clock read came just
    /// before a window's end may be written after one whose read came just
    /// after it). A slot may still hold records older than its window (not
    /// yet pruned): the newest wins, and `replayable` checks the time.
    fn remembered(&self, key: &[u8], now_unix_ns: i64, ahead: bool) -> Result<Option<Remembered>, StoreError> {
        let current = request_slot(now_unix_ns);
        let previous = request_slot(now_unix_ns.saturating_sub(REPLAY_WINDOW_NS));
        let next = request_slot(now_unix_ns.saturating_add(CLOCK_SKEW_NS));
        let next = (ahead && next != current).then_some(next);
        let mut newest: Option<Remembered> = None;
        for slot in [Some(current), Some(previous), next].into_iter().flatten() {
            if let Some(tree) = self.requests.get(slot)
                && let Some(value) = tree.get(key)?
            {
                let found: Remembered = read(trees::requests(slot), key, &value)?;
                if newest.as_ref().is_none_or(|n| found.decided_unix_ns > n.decided_unix_ns) {
                    newest = Some(found);
                }
            }
        }
        Ok(newest)
    }

    fn by_no(&self, no: u8) -> Option<&sled::Tree> {
        Some(match no {
            tree_no::AUDIT => &self.audit,
            tree_no::REQUESTS => &self.requests[0],
            tree_no::REQUESTS_1 => &self.requests[1],
            tree_no::REQUESTS_2 => &self.requests[2],
            tree_no::APPROVALS => &self.approvals,
            tree_no::PENDING => &self.pending,
            tree_no::PENDING_SESSIONS => &self.pending_sessions,
            tree_no::PENDING_HARNESSES => &self.pending_harnesses,
            tree_no::GRANTS => &self.grants,
            tree_no::LOCKS => &self.locks,
            tree_no::SESSIONS => &self.sessions,
            _ => return None,
        })
    }

    /// Applies one batch of operations, in order.
    ///
    /// Plain inserts, not a sled transaction or batch: in sled 0.34 either
    /// writes out sled's current log buffer on every call, which cost more
    /// than the whole decision. After a killed process, atomicity comes from
    /// the write-ahead log, whose frame holds the whole batch and is applied
    /// again on open. After a power loss, sled may also hold a prefix of a
    /// batch whose frame was not yet synced (sled writes its buffers on its
    /// own): never acknowledged, its audit records first (applied first).
    fn apply(&self, ops: &[Op]) -> Result<(), StoreError> {
        for op in ops {
            let tree = self.by_no(op.tree).ok_or_else(|| StoreError::Corrupt {
                tree: "wal",
                key: op.tree.to_string(),
                message: "an operation names an unknown tree".into(),
            })?;
            match &op.value {
                Some(value) => tree.insert(op.key.as_slice(), value.as_slice())?,
                None => tree.remove(op.key.as_slice())?,
            };
        }
        Ok(())
    }
}

/// Stops the writer when the monitor shuts down.
pub struct StoreCloser {
    close: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl StoreCloser {
    /// Writes and answers every commit already sent, stops the writer (later
    /// commits fail with [`StoreError::WriterGone`]), flushes sled and
    /// empties the write-ahead log.
    pub async fn close(self) -> Result<(), StoreError> {
        let _ = self.close.send(());
        self.task.await.map_err(|e| StoreError::BatchFailed(format!("the audit writer failed: {e}")))
    }
}

/// Names of the sled trees.
pub mod trees {
    /// seq (u64 big-endian) -> [`super::AuditRecord`] (binary, [`crate::codec`]).
    pub const AUDIT: &str = "audit";
    /// harness NUL request id -> [`super::Remembered`] (binary), for the
    /// decisions of one replay window in three (see [`super::REQUEST_SLOTS`]);
    /// `requests.1` and `requests.2` hold the other two.
    pub const REQUESTS: &str = "requests";
    /// The second idempotency slot.
    pub const REQUESTS_1: &str = "requests.1";
    /// The third idempotency slot.
    pub const REQUESTS_2: &str = "requests.2";

    /// The name of idempotency slot `slot`.
    pub(crate) fn requests(slot: usize) -> &'static str {
        match slot {
            1 => REQUESTS_1,
            2 => REQUESTS_2,
            _ => REQUESTS,
        }
    }
    /// approval id -> [`super::ApprovalRecord`] JSON.
    pub const APPROVALS: &str = "approvals";
    /// deadline (i64 big-endian, ns) NUL approval id -> empty: the pending
    /// approvals in deadline order.
    pub const PENDING: &str = "pending";
    /// session id NUL approval id -> empty: the pending approvals of each session.
    pub const PENDING_SESSIONS: &str = "pending_sessions";
    pub const PENDING_HARNESSES: &str = "pending_harnesses";
    /// grant id -> [`crate::grants::Grant`] JSON.
    pub const GRANTS: &str = "grants";
    /// `session:ID` | `user:ID` | `agent:ID` -> [`super::Lock`] JSON.
    pub const LOCKS: &str = "locks";
    /// session id -> [`super::SessionRecord`] (binary).
    pub const SESSIONS: &str = "sessions";
}

/// How durable an acknowledged write is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// sled's flush, then fsync of the database file: survives power loss.
    #[default]
    Fsync,
    /// sled's flush only (`sync_file_range` on Linux): survives a killed
    /// process, not necessarily a power loss or a kernel crash.
    Flush,
}

impl Store {
    /// Opens (or creates) the store in `dir` with fsync durability.
    pub fn open(dir: &Path) -> Result<(Self, StoreCloser), StoreError> {
        Self::open_with(dir, Durability::Fsync)
    }

    /// Opens (or creates) the store in `dir` and starts its writer. Must be
    /// called inside a tokio runtime.
    pub fn open_with(dir: &Path, durability: Durability) -> Result<(Self, StoreCloser), StoreError> {
        let Recovered { db, trees, db_file, wal_dir } = recover(dir, durability)?;
        let wal = Wal::create(&wal_dir, durability == Durability::Fsync)?;
        let head = match trees.audit.last()? {
            Some((key, value)) => {
                let record = decode_record(&key, &value)?;
                Head { seq: record.seq, hash: record.hash }
            }
            None => Head::genesis(),
        };
        let (writer, rx) = mpsc::channel(4 * MAX_BATCH);
        // Each slot keeps its approval until it is overwritten: the
        // capacity bounds the memory held, and a watcher more than this far
        // behind is cut off (it watches again).
        let (approval_events, _) = broadcast::channel(APPROVAL_EVENTS);
        let (close, closing) = oneshot::channel();
        // What is on disk at open counts as durable.
        let (flushed_tx, flushed) = watch::channel(head.seq);
        let failed = Arc::new(OnceLock::new());
        let (to_sync, sync_rx) = mpsc::unbounded_channel();
        let (sync_done, sync_finished) = oneshot::channel();
        let sync = Arc::new(SyncLoop {
            fsync: durability == Durability::Fsync,
            flushed: flushed_tx,
            approval_events: approval_events.clone(),
            failed: Arc::clone(&failed),
        });
        let answer_now = (durability == Durability::Flush).then(|| Arc::clone(&sync));
        std::thread::Builder::new()
            .name("warden-wal-sync".into())
            .spawn(move || {
                sync.run(sync_rx);
                let _ = sync_done.send(());
            })
            .map_err(|e| StoreError::Wal(WalError::Io { path: wal_dir.clone(), source: e }))?;
        let task = tokio::spawn(
            WriteLoop {
                db: db.clone(),
                trees: trees.clone(),
                spare: Some(prepare_spare(&wal)),
                wal,
                db_file,
                checkpoint: None,
                to_sync: Some(to_sync),
                answer_now,
                sync_finished,
                failed,
            }
            .run(rx, closing, head),
        );
        let store = Self {
            db,
            trees,
            pruned_window: Arc::new(std::sync::atomic::AtomicI64::new(i64::MIN)),
            pruning: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            flushed,
            writer,
            approval_events,
        };
        Ok((store, StoreCloser { close, task }))
    }

    /// Appends a record with its state, if its guard holds, and returns once
    /// it is flushed.
    pub async fn commit(&self, commit: Commit) -> Result<Committed, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.writer.send(Job { commit, reply }).await.map_err(|_| StoreError::WriterGone)?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Waits until the record `seq` is flushed. Whatever is read from the
    /// trees may be committed but not yet flushed: a caller is told about it
    /// only after this.
    pub async fn wait_durable(&self, seq: u64) -> Result<(), StoreError> {
        let mut flushed = self.flushed.clone();
        flushed.wait_for(|durable| *durable >= seq).await.map(|_| ()).map_err(|_| StoreError::WriterGone)
    }

    /// Empties the idempotency slot that the next replay window will use
    /// (records at least a window older than any replayable one), once per
    /// window and only in the first half of a window, so that it is done
    /// before the slot is written again. The monitor's sweeper calls it on
    /// a task of its own. Returns how many records were removed.
    pub async fn prune_requests(&self, now_unix_ns: i64) -> Result<usize, StoreError> {
        use std::sync::atomic::Ordering;
        let window = now_unix_ns.div_euclid(REPLAY_WINDOW_NS);
        let early = now_unix_ns.rem_euclid(REPLAY_WINDOW_NS) < REPLAY_WINDOW_NS / 2;
        if !early || self.pruned_window.load(Ordering::Relaxed) == window || self.pruning.swap(true, Ordering::AcqRel) {
            return Ok(0);
        }
        let target = self.trees.requests.get(request_slot(now_unix_ns.saturating_add(REPLAY_WINDOW_NS))).cloned();
        let cleared = match target {
            Some(tree) => tokio::task::spawn_blocking(move || {
                let count = tree.len();
                tree.clear().map(|()| count)
            })
            .await
            .map_err(|e| StoreError::BatchFailed(format!("pruning idempotency records failed: {e}")))
            .and_then(|cleared| cleared.map_err(StoreError::from)),
            None => Ok(0),
        };
        if cleared.is_ok() {
            // Only once done: a failed clear is tried again.
            self.pruned_window.store(window, Ordering::Relaxed);
        }
        self.pruning.store(false, Ordering::Release);
        cleared
    }

    /// A stored approval.
    pub fn approval(&self, approval_id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        self.trees
            .approvals
            .get(approval_id.as_bytes())?
            .map(|value| decode(trees::APPROVALS, approval_id.as_bytes(), &value))
            .transpose()
    }

    /// Every stored grant.
    pub fn grants(&self) -> Result<Vec<Grant>, StoreError> {
        self.trees
            .grants
            .iter()
            .map(|item| {
                let (key, value) = item?;
                decode(trees::GRANTS, &key, &value)
            })
            .collect()
    }

    /// One grant.
    pub fn grant(&self, grant_id: &str) -> Result<Option<Grant>, StoreError> {
        self.trees.grants.get(grant_id.as_bytes())?.map(|v| decode(trees::GRANTS, grant_id.as_bytes(), &v)).transpose()
    }

    /// Every lock.
    pub fn locks(&self) -> Result<Vec<Lock>, StoreError> {
        self.trees
            .locks
            .iter()
            .map(|item| {
                let (key, value) = item?;
                decode(trees::LOCKS, &key, &value)
            })
            .collect()
    }

    /// What is known of a session (see `Trees::session`).
    pub fn session(&self, key: &SessionKey) -> Result<Option<SessionRecord>, StoreError> {
        self.trees.session(key)
    }

    /// Every session with the id `session`, of any harness and user (a
    /// record an older version kept under the bare id included, with an
    /// empty harness).
    pub fn sessions_named(&self, session: &str) -> Result<Vec<SessionRecord>, StoreError> {
        let mut out = Vec::new();
        if let Some(value) = self.trees.sessions.get(session.as_bytes())? {
            out.push(read::<SessionRecord>(trees::SESSIONS, session.as_bytes(), &value)?);
        }
        let mut prefix = session.as_bytes().to_vec();
        prefix.push(0);
        for item in self.trees.sessions.scan_prefix(&prefix) {
            let (key, value) = item?;
            out.push(read(trees::SESSIONS, &key, &value)?);
        }
        Ok(out)
    }

    /// Pending approvals, earliest deadline first.
    pub fn pending(&self) -> Result<Vec<ApprovalRecord>, StoreError> {
        self.pending_until(i64::MAX)
    }

    /// How many approvals of the session `key` are still waiting at
    /// `now_unix_ns`: one past its deadline no longer counts, whether or not
    /// the sweeper has expired it yet (so the answer does not depend on the
    /// sweeper's timing). Entries written before deadlines were kept here
    /// count.
    pub fn pending_count(&self, key: &SessionKey, now_unix_ns: i64) -> Result<usize, StoreError> {
        Self::count_waiting(&self.trees.pending_sessions, &key.bytes(), now_unix_ns)
    }

    /// How many approvals the harness credential `harness` has waiting at
    /// `now_unix_ns`, like [`Store::pending_count`].
    pub fn pending_count_of_harness(&self, harness: &str, now_unix_ns: i64) -> Result<usize, StoreError> {
        Self::count_waiting(&self.trees.pending_harnesses, harness.as_bytes(), now_unix_ns)
    }

    fn count_waiting(tree: &sled::Tree, owner: &[u8], now_unix_ns: i64) -> Result<usize, StoreError> {
        let mut prefix = owner.to_vec();
        prefix.push(0);
        let mut count = 0;
        for item in tree.scan_prefix(prefix) {
            let (_, deadline) = item?;
            let waiting = match <[u8; 8]>::try_from(deadline.as_ref()) {
                Ok(bytes) => i64::from_be_bytes(bytes) > now_unix_ns,
                Err(_) => true,
            };
            count += usize::from(waiting);
        }
        Ok(count)
    }

    /// Pending approvals whose deadline is at or before `unix_ns`.
    pub fn pending_until(&self, unix_ns: i64) -> Result<Vec<ApprovalRecord>, StoreError> {
        let mut out = Vec::new();
        for item in self.trees.pending.iter() {
            let (key, _) = item?;
            let Some((deadline, id)) = split_pending_key(&key) else { continue };
            if deadline > unix_ns {
                break;
            }
            if let Some(record) = self.approval(id)?
                && record.state == ApprovalState::Pending
            {
                out.push(record);
            }
        }
        Ok(out)
    }

    /// Durable audit records from `from_seq` on, at most `limit` (records
    /// written but not yet synced are left for the next read).
    pub fn audit_from(&self, from_seq: u64, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        let durable = self.durable_seq();
        if from_seq > durable {
            return Ok(Vec::new());
        }
        self.trees
            .audit
            .range(from_seq.to_be_bytes()..=durable.to_be_bytes())
            .take(limit)
            .map(|item| {
                let (key, value) = item?;
                decode_record(&key, &value)
            })
            .collect()
    }

    /// The stored hash of record `seq`.
    pub fn hash_at(&self, seq: u64) -> Result<Option<String>, StoreError> {
        match self.trees.audit.get(seq.to_be_bytes())? {
            Some(value) => Ok(Some(decode_record(&seq.to_be_bytes(), &value)?.hash)),
            None => Ok(None),
        }
    }

    /// The newest record's seq, 0 when the log is empty.
    pub fn last_seq(&self) -> Result<u64, StoreError> {
        Ok(match self.trees.audit.last()? {
            Some((key, _)) => seq_of_key(&key).unwrap_or(0),
            None => 0,
        })
    }

    /// The durable watermark ([`Store::durable_seq`]), to follow the log:
    /// it changes when records become durable, which are then read from
    /// the trees ([`Store::audit_from`]).
    pub fn durable_updates(&self) -> watch::Receiver<u64> {
        let mut updates = self.flushed.clone();
        updates.mark_unchanged();
        updates
    }

    /// Approval changes from now on, after they are flushed.
    pub fn approval_events(&self) -> broadcast::Receiver<ApprovalEvent> {
        self.approval_events.subscribe()
    }

    /// The newest record that is durable: what the trees hold beyond it
    /// is written but not yet synced.
    pub fn durable_seq(&self) -> u64 {
        *self.flushed.borrow()
    }

    /// Walks the chain up to the newest durable record (a signed head must
    /// not name a record a power loss could still take back).
    pub fn verify(&self) -> VerifyReport {
        let durable = self.durable_seq();
        verify_chain(
            self.trees.audit.range(..=durable.to_be_bytes()).map(|item| item.map(|(k, v)| (k.to_vec(), v.to_vec()))),
        )
    }

    /// Whether the underlying database is the same (for tests of wiring).
    pub fn db(&self) -> &sled::Db {
        &self.db
    }
}

/// What [`recover`] opened.
struct Recovered {
    db: sled::Db,
    trees: Trees,
    /// sled's log file, fsynced after each of its flushes (fsync durability).
    db_file: Option<Arc<File>>,
    wal_dir: PathBuf,
}

/// Opens sled in `dir` and applies what the write-ahead log holds beyond
/// sled's last flush; then flushes sled and empties the log.
fn recover(dir: &Path, durability: Durability) -> Result<Recovered, StoreError> {
    // The writer makes every answer durable through the write-ahead log:
    // sled's own 500 ms flusher would only write the same data twice.
    // sled keeps written pages in memory up to its cache capacity (1 GiB by
    // default): the audit log would grow the resident size without bound
    // for records that are read back rarely (tail, verify).
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
        tracing::info!(batches = batches.len(), "applying the write-ahead log");
        for ops in &batches {
            trees.apply(ops)?;
        }
    }
    flush_sled(&db, db_file.as_deref())?;
    if wal_dir.exists() {
        wal::remove_all(&wal_dir)?;
    }
    Ok(Recovered { db, trees, db_file, wal_dir })
}

/// sled's flush, then (fsync durability) fsync of its log file.
fn flush_sled(db: &sled::Db, db_file: Option<&File>) -> Result<(), StoreError> {
    db.flush()?;
    if let Some(file) = db_file {
        file.sync_data().map_err(sled::Error::Io)?;
    }
    Ok(())
}

/// Opens a stopped monitor's store for reading (`wardenctl audit verify
/// --data`), first applying whatever its write-ahead log holds, so that
/// every acknowledged record is there even after a crash.
pub fn open_stopped(dir: &Path) -> Result<sled::Db, StoreError> {
    Ok(recover(dir, Durability::Fsync)?.db)
}

/// Starts preparing the segment after `wal`'s current one.
fn prepare_spare(wal: &Wal) -> tokio::task::JoinHandle<Result<wal::Spare, WalError>> {
    let (dir, number) = (wal.dir().to_owned(), wal.next_number());
    tokio::task::spawn_blocking(move || wal::prepare_segment(&dir, number))
}

/// A batch written to the log and applied, waiting for its sync.
struct Appended {
    /// The segment it is in.
    file: Arc<File>,
    /// The chain head after it.
    seq: u64,
    answers: Vec<(Reply, Committed)>,
    writes: Vec<Write>,
}

/// The writer task: the only code that appends.
struct WriteLoop {
    db: sled::Db,
    trees: Trees,
    wal: Wal,
    db_file: Option<Arc<File>>,
    /// The checkpoint under way: sled's flush, then the old segments deleted.
    checkpoint: Option<tokio::task::JoinHandle<Result<(), String>>>,
    /// The next segment, being prepared.
    spare: Option<tokio::task::JoinHandle<Result<wal::Spare, WalError>>>,
    /// To the sync thread; dropped to stop it.
    to_sync: Option<mpsc::UnboundedSender<Appended>>,
    /// With flush durability a written batch is already as durable as it
    /// gets: the writer answers it itself, without a hop to the sync thread.
    answer_now: Option<Arc<SyncLoop>>,
    sync_finished: oneshot::Receiver<()>,
    /// Set once anything failed after a batch reached the log: what is on
    /// disk is then unknown, so nothing more is accepted.
    failed: Arc<OnceLock<String>>,
}

type Reply = oneshot::Sender<Result<Committed, StoreError>>;

impl WriteLoop {
    async fn run(mut self, mut rx: mpsc::Receiver<Job>, mut closing: oneshot::Receiver<()>, mut head: Head) {
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
            head = self.write_batch(batch, head);
            self.maybe_checkpoint().await;
        }
        // Every batch answered, then one last checkpoint empties the log.
        self.to_sync = None;
        let _ = (&mut self.sync_finished).await;
        if let Some(running) = self.checkpoint.take()
            && let Err(why) = running.await.unwrap_or_else(|e| Err(e.to_string()))
        {
            tracing::error!(error = %why, "checkpoint failed");
        }
        if self.failed.get().is_some() {
            return;
        }
        if let Some(preparing) = self.spare.take() {
            let _ = preparing.await;
        }
        let (db, db_file, dir) = (self.db.clone(), self.db_file.clone(), self.wal.dir().to_owned());
        let last = tokio::task::spawn_blocking(move || {
            flush_sled(&db, db_file.as_deref())?;
            wal::remove_all(&dir).map_err(StoreError::from)
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()));
        if let Err(e) = last {
            tracing::error!(error = %e, "final checkpoint failed; the write-ahead log is applied at the next start");
        }
    }

    /// Plans every job against the store and the batch so far, appends the
    /// batch to the log, applies it to the trees, and hands it to the sync
    /// thread, which answers. Returns the new head.
    fn write_batch(&mut self, batch: Vec<Job>, head: Head) -> Head {
        if let Some(why) = self.failed.get() {
            for Job { reply, .. } in batch {
                let _ = reply.send(Err(StoreError::BatchFailed(why.clone())));
            }
            return head;
        }
        let mut next = head.clone();
        let mut overlay = Overlay::default();
        let mut answers: Vec<(Reply, Committed)> = Vec::new();
        let mut writes: Vec<Write> = Vec::new();
        for Job { commit, reply } in batch {
            match self.plan(&overlay, commit, &mut next) {
                Ok(Planned::Append(write)) => {
                    overlay.add(&write);
                    answers.push((reply, write.committed()));
                    writes.push(*write);
                }
                Ok(Planned::Answer(committed)) => answers.push((reply, *committed)),
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            }
        }
        let ops = match ops_of(&writes) {
            Ok(ops) => ops,
            Err(e) => {
                // Nothing was written: the head stays.
                tracing::error!(error = %e, "audit batch not written; the requests in it are answered with an error");
                for (reply, _) in answers {
                    let _ = reply.send(Err(StoreError::BatchFailed(e.to_string())));
                }
                return head;
            }
        };
        let written = if ops.is_empty() {
            Ok(())
        } else {
            self.wal.append(&wal::frame(&ops)).map_err(StoreError::from).and_then(|()| self.trees.apply(&ops))
        };
        let sent = written.and_then(|()| {
            let appended = Appended { file: self.wal.file(), seq: next.seq, answers, writes };
            if let Some(answer) = &self.answer_now {
                answer.answer(vec![appended]);
                return Ok(());
            }
            match &self.to_sync {
                Some(to_sync) => to_sync.send(appended).map_err(|_| StoreError::WriterGone),
                None => Err(StoreError::WriterGone),
            }
        });
        match sent {
            Ok(()) => next,
            Err(e) => {
                // The batch may be in the log: its seqs must not be reused.
                let why = format!("the audit log could not be written ({e}); restart the monitor");
                tracing::error!(error = %e, "audit batch failed; no more writes are accepted");
                let _ = self.failed.set(why);
                head
            }
        }
    }

    /// When the log's segment is full: start a new one, and flush sled in
    /// the background; once that is done the old segments are deleted.
    async fn maybe_checkpoint(&mut self) {
        if !self.wal.full() || self.failed.get().is_some() {
            return;
        }
        if let Some(running) = &self.checkpoint {
            if !running.is_finished() {
                return;
            }
            if let Some(running) = self.checkpoint.take()
                && let Err(why) = running.await.unwrap_or_else(|e| Err(e.to_string()))
            {
                let _ = self.failed.set(format!("a checkpoint failed ({why}); restart the monitor"));
                return;
            }
        }
        // Only the newest segment may end in a torn frame.
        let old = self.wal.file();
        let synced = match self.db_file {
            Some(_) => tokio::task::spawn_blocking(move || old.sync_data()).await.map_err(|e| e.to_string()),
            None => Ok(Ok(())),
        };
        let spare = match self.spare.take() {
            Some(preparing) => {
                match preparing.await.map_err(|e| e.to_string()).and_then(|r| r.map_err(|e| e.to_string())) {
                    Ok(spare) => Some(spare),
                    Err(e) => {
                        tracing::warn!(error = %e, "the next write-ahead log segment could not be prepared; making it now");
                        None
                    }
                }
            }
            None => None,
        };
        let rotated = match synced {
            Ok(Ok(())) => self.wal.rotate(spare).map_err(|e| e.to_string()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(e),
        };
        let keep_from = match rotated {
            Ok(keep_from) => keep_from,
            Err(why) => {
                let _ = self
                    .failed
                    .set(format!("the write-ahead log could not start a new segment ({why}); restart the monitor"));
                return;
            }
        };
        self.spare = Some(prepare_spare(&self.wal));
        let (db, db_file, dir) = (self.db.clone(), self.db_file.clone(), self.wal.dir().to_owned());
        self.checkpoint = Some(tokio::task::spawn_blocking(move || {
            flush_sled(&db, db_file.as_deref()).map_err(|e| e.to_string())?;
            wal::remove_before(&dir, keep_from).map_err(|e| e.to_string())
        }));
    }

    /// Decides what one commit does, advancing `head` when it appends.
    /// The session record as of the batch being planned.
    fn stored_session(&self, overlay: &Overlay, key: &SessionKey) -> Result<Option<SessionRecord>, StoreError> {
        match overlay.sessions.get(key) {
            Some(found) => Ok(Some(found.clone())),
            None => self.trees.session(key),
        }
    }

    /// Why the actor's session, user or agent kind is locked, as of the
    /// batch being planned.
    fn locked(&self, overlay: &Overlay, actor: &Actor) -> Result<Option<String>, StoreError> {
        if overlay.locks.is_empty() && self.trees.locks.is_empty() {
            return Ok(None);
        }
        for (kind, id) in [("session", &actor.session), ("user", &actor.user), ("agent", &actor.agent)] {
            let target = format!("{kind}:{id}");
            let lock = match overlay.locks.get(&target) {
                Some(found) => found.clone(),
                None => self
                    .trees
                    .locks
                    .get(target.as_bytes())?
                    .map(|v| decode::<Lock>(trees::LOCKS, target.as_bytes(), &v))
                    .transpose()?,
            };
            if let Some(lock) = lock {
                let why = if lock.reason.is_empty() { String::new() } else { format!(": {}", lock.reason) };
                return Ok(Some(format!("{kind} `{id}` is locked by `{}`{why}", lock.locked_by)));
            }
        }
        Ok(None)
    }

    fn plan(&self, overlay: &Overlay, commit: Commit, head: &mut Head) -> Result<Planned, StoreError> {
        let request_key = match &commit.guard {
            Guard::None => None,
            Guard::NewRequest { harness, request_id, request_hash, now_unix_ns, policy_version, replay } => {
                let key = request_key(harness, request_id);
                let earlier = match overlay.requests.get(&key) {
                    Some(found) => Some(found.clone()),
                    None => self.trees.remembered(&key, *now_unix_ns, true)?,
                };
                if let Some(earlier) = earlier
                    && *replay
                    && earlier.replayable(*now_unix_ns, policy_version)
                {
                    return Ok(Planned::Answer(Box::new(if &earlier.request_hash == request_hash {
                        Committed::Replay(earlier.decision)
                    } else {
                        Committed::KeyReused(Box::new(earlier))
                    })));
                }
                Some((key, request_hash.clone(), *now_unix_ns))
            }
            Guard::StillPending { approval_id } => {
                let current = match overlay.approvals.get(approval_id) {
                    Some(found) => Some(found.clone()),
                    None => self
                        .trees
                        .approvals
                        .get(approval_id.as_bytes())?
                        .map(|v| decode::<ApprovalRecord>(trees::APPROVALS, approval_id.as_bytes(), &v))
                        .transpose()?,
                };
                match current {
                    Some(current) if current.state == ApprovalState::Pending => None,
                    Some(current) => return Ok(Planned::Answer(Box::new(Committed::NotPending(Box::new(current))))),
                    None => {
                        return Err(StoreError::Corrupt {
                            tree: trees::APPROVALS,
                            key: approval_id.clone(),
                            message: "the approval to resolve is missing".into(),
                        });
                    }
                }
            }
        };
        let session = match &commit.session {
            None => None,
            Some(change) => merge_session(self.stored_session(overlay, change.key())?, change),
        };
        let mut commit = commit;
        let mut session = session;
        // A decision made before a lock but written after it is not an
        // ALLOW: the writer, which writes locks too, has the last word.
        if let Some(decision) = commit.decision.as_mut()
            && decision.outcome == Outcome::Allow
            && commit.entry.kind == "decision"
            && let Some(actor) = &commit.entry.actor
            && let Some(why) = self.locked(overlay, actor)?
        {
            decision.outcome = Outcome::Deny;
            decision.reasons.push(why.clone());
            commit.entry.outcome = Outcome::Deny.as_str().into();
            commit.entry.reasons.push(why);
            // A denied action gives the session no label.
            if let (Some(current), Some(change @ SessionChange::Touch { .. })) = (&mut session, &commit.session) {
                current.labels = self.stored_session(overlay, change.key())?.map(|b| b.labels).unwrap_or_default();
            }
        }
        let Commit { entry, decision, approval, grant, lock, .. } = commit;
        let seq = head.seq + 1;
        let mut record = AuditRecord {
            seq,
            time_unix_ns: entry.time_unix_ns,
            kind: entry.kind,
            caller: entry.caller,
            actor: entry.actor.unwrap_or(Actor { user: String::new(), agent: String::new(), session: String::new() }),
            action: entry.action,
            resource: entry.resource,
            request: entry.request,
            outcome: entry.outcome,
            policy_ids: entry.policy_ids,
            reasons: entry.reasons,
            policy_version: entry.policy_version,
            request_id: entry.request_id,
            approval_id: entry.approval_id,
            prev_hash: head.hash.clone(),
            hash: String::new(),
        };
        record.hash = record.compute_hash();
        *head = Head { seq, hash: record.hash.clone() };
        let decision = decision.map(|mut d| {
            d.audit_seq = seq;
            d
        });
        let approval = approval.map(|mut a| {
            if a.state == ApprovalState::Pending {
                a.audit_seq = seq;
            }
            a.decision.audit_seq = seq;
            a
        });
        let remembered = match (request_key, &decision) {
            (Some((key, request_hash, decided_unix_ns)), Some(decision)) => {
                Some((key, Remembered { request_hash, decided_unix_ns, decision: decision.clone() }))
            }
            _ => None,
        };
        Ok(Planned::Append(Box::new(Write { record, decision, remembered, approval, grant, lock, session })))
    }
}

/// The sync thread: fdatasyncs the log under every batch handed to it
/// (several at once when they queue up), then answers them.
struct SyncLoop {
    fsync: bool,
    flushed: watch::Sender<u64>,
    approval_events: broadcast::Sender<ApprovalEvent>,
    failed: Arc<OnceLock<String>>,
}

impl SyncLoop {
    fn run(&self, mut rx: mpsc::UnboundedReceiver<Appended>) {
        while let Some(first) = rx.blocking_recv() {
            let mut batches = vec![first];
            while let Ok(more) = rx.try_recv() {
                batches.push(more);
            }
            let synced = match self.failed.get() {
                Some(why) if self.fsync => Err(why.clone()),
                _ => self.sync(&batches),
            };
            match synced {
                Ok(()) => self.answer(batches),
                Err(why) => {
                    tracing::error!(error = %why, "audit batch not synced; the requests in it are answered with an error");
                    for Appended { answers, .. } in batches {
                        for (reply, _) in answers {
                            let _ = reply.send(Err(StoreError::BatchFailed(why.clone())));
                        }
                    }
                }
            }
        }
    }

    /// Publishes durable batches: the flushed watermark, each answer, and
    /// the approval changes to their watchers.
    fn answer(&self, batches: Vec<Appended>) {
        if let Some(last) = batches.last() {
            // Only a new head wakes followers (a batch of replays adds none).
            self.flushed.send_if_modified(|durable| {
                let moved = *durable != last.seq;
                *durable = last.seq;
                moved
            });
        }
        for Appended { answers, writes, .. } in batches {
            for (reply, committed) in answers {
                let _ = reply.send(Ok(committed));
            }
            for write in writes {
                if let Some(approval) = write.approval {
                    let _ = self.approval_events.send(ApprovalEvent { approval });
                }
            }
        }
    }

    /// fdatasync of each segment the batches are in (fsync durability).
    fn sync(&self, batches: &[Appended]) -> Result<(), String> {
        if !self.fsync {
            return Ok(());
        }
        let mut files: Vec<&Arc<File>> = Vec::new();
        for batch in batches {
            if !files.iter().any(|f| Arc::ptr_eq(f, &batch.file)) {
                files.push(&batch.file);
            }
        }
        for file in files {
            if let Err(e) = file.sync_data() {
                let why = format!("a sync of the write-ahead log failed ({e}); restart the monitor");
                let _ = self.failed.set(why.clone());
                return Err(why);
            }
        }
        Ok(())
    }
}

/// A batch's writes as log operations, in the order they are applied.
fn ops_of(writes: &[Write]) -> Result<Vec<Op>, StoreError> {
    let mut ops = Vec::with_capacity(writes.len() * 3);
    let put = |tree, key: &[u8], value| Op { tree, key: key.to_vec(), value: Some(value) };
    let remove = |tree, key: &[u8]| Op { tree, key: key.to_vec(), value: None };
    for write in writes {
        ops.push(put(tree_no::AUDIT, &write.record.seq.to_be_bytes(), codec::encode(&write.record)));
        if let Some((key, remembered)) = &write.remembered {
            ops.push(put(tree_no::requests(request_slot(remembered.decided_unix_ns)), key, codec::encode(remembered)));
        }
        if let Some(approval) = &write.approval {
            ops.push(put(tree_no::APPROVALS, approval.approval_id.as_bytes(), encode(approval)?));
            let key = pending_key(approval.expires_unix_ns, &approval.approval_id);
            let mut by_session = SessionKey::of(&approval.request.actor, &approval.harness).bytes();
            by_session.push(0);
            by_session.extend_from_slice(approval.approval_id.as_bytes());
            // What an older version indexed under the bare session id.
            let mut legacy_by_session = approval.request.actor.session.as_bytes().to_vec();
            legacy_by_session.push(0);
            legacy_by_session.extend_from_slice(approval.approval_id.as_bytes());
            let mut by_harness = approval.harness.as_bytes().to_vec();
            by_harness.push(0);
            by_harness.extend_from_slice(approval.approval_id.as_bytes());
            if approval.state == ApprovalState::Pending {
                ops.push(put(tree_no::PENDING, &key, Vec::new()));
                ops.push(put(tree_no::PENDING_SESSIONS, &by_session, approval.expires_unix_ns.to_be_bytes().to_vec()));
                ops.push(put(tree_no::PENDING_HARNESSES, &by_harness, approval.expires_unix_ns.to_be_bytes().to_vec()));
            } else {
                ops.push(remove(tree_no::PENDING, &key));
                ops.push(remove(tree_no::PENDING_SESSIONS, &by_session));
                ops.push(remove(tree_no::PENDING_SESSIONS, &legacy_by_session));
                ops.push(remove(tree_no::PENDING_HARNESSES, &by_harness));
            }
        }
        match &write.grant {
            Some(GrantChange::Put(grant)) => {
                ops.push(put(tree_no::GRANTS, grant.grant_id.as_bytes(), encode(grant.as_ref())?))
            }
            Some(GrantChange::Remove(id)) => ops.push(remove(tree_no::GRANTS, id.as_bytes())),
            None => {}
        }
        match &write.lock {
            Some(LockChange::Put(lock)) => ops.push(put(tree_no::LOCKS, lock.target.as_bytes(), encode(lock)?)),
            Some(LockChange::Remove(target)) => ops.push(remove(tree_no::LOCKS, target.as_bytes())),
            None => {}
        }
        if let Some(session) = &write.session {
            ops.push(put(tree_no::SESSIONS, &session.key().bytes(), codec::encode(session)));
        }
    }
    Ok(ops)
}

/// What earlier jobs of the same batch wrote, for the guards of later ones.
#[derive(Default)]
struct Overlay {
    requests: HashMap<Vec<u8>, Remembered>,
    approvals: HashMap<String, ApprovalRecord>,
    sessions: HashMap<SessionKey, SessionRecord>,
    /// Locks put (`Some`) or removed (`None`) earlier in the batch.
    locks: HashMap<String, Option<Lock>>,
}

impl Overlay {
    fn add(&mut self, write: &Write) {
        match &write.lock {
            Some(LockChange::Put(lock)) => {
                self.locks.insert(lock.target.clone(), Some(lock.clone()));
            }
            Some(LockChange::Remove(target)) => {
                self.locks.insert(target.clone(), None);
            }
            None => {}
        }
        if let Some((key, remembered)) = &write.remembered {
            self.requests.insert(key.clone(), remembered.clone());
        }
        if let Some(approval) = &write.approval {
            self.approvals.insert(approval.approval_id.clone(), approval.clone());
        }
        if let Some(session) = &write.session {
            self.sessions.insert(session.key(), session.clone());
        }
    }
}

struct Write {
    record: AuditRecord,
    decision: Option<DecisionRecord>,
    remembered: Option<(Vec<u8>, Remembered)>,
    approval: Option<ApprovalRecord>,
    grant: Option<GrantChange>,
    lock: Option<LockChange>,
    /// The session record to store, when it changed.
    session: Option<SessionRecord>,
}

impl Write {
    fn committed(&self) -> Committed {
        Committed::New {
            seq: self.record.seq,
            decision: self.decision.clone(),
            approval: self.approval.clone().map(Box::new),
            session: self.session.clone().map(Box::new),
        }
    }
}

enum Planned {
    Append(Box<Write>),
    Answer(Box<Committed>),
}

/// A session record after `change`; `None` when nothing changes.
fn merge_session(current: Option<SessionRecord>, change: &SessionChange) -> Option<SessionRecord> {
    match change {
        SessionChange::Touch { key, agent, add } => match current {
            None => Some(SessionRecord {
                session: key.session.clone(),
                user: key.user.clone(),
                agent: agent.clone(),
                labels: add.iter().cloned().collect(),
                harness: key.harness.clone(),
            }),
            Some(mut record) => {
                let before = record.labels.len();
                record.labels.extend(add.iter().cloned());
                (record.labels.len() != before).then_some(record)
            }
        },
        // A session never seen has no labels to clear (and no record to make).
        SessionChange::ClearLabels { .. } => current.map(|mut record| {
            record.labels.clear();
            record
        }),
    }
}

fn pending_key(deadline_unix_ns: i64, approval_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(9 + approval_id.len());
    // Deadlines are after 1970: as big-endian they sort by time.
    key.extend_from_slice(&deadline_unix_ns.max(0).to_be_bytes());
    key.push(0);
    key.extend_from_slice(approval_id.as_bytes());
    key
}

fn split_pending_key(key: &[u8]) -> Option<(i64, &str)> {
    let deadline = <[u8; 8]>::try_from(key.get(..8)?).ok().map(i64::from_be_bytes)?;
    let id = std::str::from_utf8(key.get(9..)?).ok()?;
    Some((deadline, id))
}

fn request_key(harness: &str, request_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(harness.len() + 1 + request_id.len());
    key.extend_from_slice(harness.as_bytes());
    key.push(0);
    key.extend_from_slice(request_id.as_bytes());
    key
}

/// JSON, for the records written at the pace of people: approvals, grants
/// and locks. The records of every decision are in [`crate::codec`]'s form.
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

/// A record in the binary form of [`crate::codec`] (or older JSON).
fn read<R: Record>(tree: &'static str, key: &[u8], value: &[u8]) -> Result<R, StoreError> {
    codec::decode(value).map_err(|e| StoreError::Corrupt {
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
    AuditRecord::from_bytes(value).map_err(|e| StoreError::Corrupt {
        tree: trees::AUDIT,
        key: seq.to_string(),
        message: e.to_string(),
    })
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

    impl Store {
        /// The decision remembered for `(harness, request_id)` that can
        /// still be replayable at `now_unix_ns`, as a lookup sees it.
        fn remembered(
            &self,
            harness: &str,
            request_id: &str,
            now_unix_ns: i64,
        ) -> Result<Option<Remembered>, StoreError> {
            self.trees.remembered(&request_key(harness, request_id), now_unix_ns, false)
        }
    }

    #[test]
    fn decision_records_round_trip_through_the_binary_form() {
        let decision = DecisionRecord {
            request_id: "r-1".into(),
            outcome: Outcome::Pending,
            policy_ids: vec!["a".into(), "b".into()],
            reasons: vec!["needs \"approval\"\n".into()],
            approval_id: "apr-1".into(),
            expires_at_unix_ns: Some(-1),
            grant_ids: vec![],
            policy_version: "v".into(),
            audit_seq: 7,
            resolved_by: "carol".into(),
            note: "ü".into(),
        };
        let remembered = Remembered { request_hash: "h".into(), decided_unix_ns: 42, decision };
        assert_eq!(codec::decode::<Remembered>(&codec::encode(&remembered)).unwrap(), remembered);
        let json = serde_json::to_vec(&remembered).unwrap();
        assert_eq!(codec::decode::<Remembered>(&json).unwrap(), remembered);
        for outcome in [Outcome::Allow, Outcome::Deny] {
            let mut other = remembered.clone();
            other.decision.outcome = outcome;
            other.decision.expires_at_unix_ns = None;
            assert_eq!(codec::decode::<Remembered>(&codec::encode(&other)).unwrap(), other);
        }

        let session = SessionRecord {
            session: "s".into(),
            user: "u".into(),
            agent: "a".into(),
            labels: ["private".to_owned(), "untrusted".to_owned()].into(),
            harness: "h".into(),
        };
        assert_eq!(codec::decode::<SessionRecord>(&codec::encode(&session)).unwrap(), session);
        // A record written before sessions were scoped ends after its labels.
        let mut older = codec::encode(&SessionRecord { harness: String::new(), ..session.clone() });
        older.pop();
        assert_eq!(
            codec::decode::<SessionRecord>(&older).unwrap(),
            SessionRecord { harness: String::new(), ..session.clone() }
        );
        let record = AuditRecord {
            seq: 3,
            time_unix_ns: 9,
            kind: "decision".into(),
            caller: "h".into(),
            actor: Actor { user: "u".into(), agent: "a".into(), session: "s".into() },
            action: "fs.read".into(),
            resource: r#"File::"/x""#.into(),
            request: r#"{"k":"v"}"#.into(),
            outcome: "ALLOW".into(),
            policy_ids: vec!["p".into()],
            reasons: vec![],
            policy_version: "v".into(),
            request_id: "r".into(),
            approval_id: String::new(),
            prev_hash: "0".repeat(64),
            hash: "f".repeat(64),
        };
        assert_eq!(AuditRecord::from_bytes(&record.to_bytes()).unwrap(), record);
        // The hash of stores already written: computed by the version
        // before the binary form.
        assert_eq!(record.compute_hash(), "9f58de1ab5cc2149604d3bd3204dd03bfa64eff3d73efc8b75ce1235e44945e3");
    }

    fn entry(n: u32) -> Commit {
        Commit {
            entry: AuditEntry {
                kind: "decision".into(),
                caller: "h".into(),
                outcome: "ALLOW".into(),
                ..AuditEntry::default()
            },
            guard: Guard::NewRequest {
                harness: "h".into(),
                request_id: format!("r{n}"),
                request_hash: format!("hash{n}"),
                now_unix_ns: 0,
                policy_version: "v".into(),
                replay: true,
            },
            decision: Some(DecisionRecord {
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
            }),
            approval: None,
            grant: None,
            lock: None,
            session: None,
        }
    }

    async fn gapless_chain_that_survives_reopen(durability: Durability) {
        let dir = tempfile::tempdir().unwrap();
        {
            let (store, closer) = Store::open_with(dir.path(), durability).unwrap();
            let mut tasks = Vec::new();
            for n in 0..200 {
                let store = store.clone();
                tasks.push(tokio::spawn(async move { store.commit(entry(n)).await }));
            }
            let mut seqs = Vec::new();
            for task in tasks {
                match task.await.unwrap().unwrap() {
                    Committed::New { seq, decision: Some(d), .. } => {
                        assert_eq!(d.audit_seq, seq);
                        seqs.push(seq);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            seqs.sort_unstable();
            assert_eq!(seqs, (1..=200).collect::<Vec<_>>());
            // Same key and hash: the same decision again, nothing appended.
            let replay = store.commit(entry(7)).await.unwrap();
            assert!(matches!(replay, Committed::Replay(ref d) if d.request_id == "r7"), "{replay:?}");
            let mut reused = entry(7);
            reused.guard = Guard::NewRequest {
                harness: "h".into(),
                request_id: "r7".into(),
                request_hash: "other".into(),
                now_unix_ns: 0,
                policy_version: "v".into(),
                replay: true,
            };
            assert!(matches!(store.commit(reused).await.unwrap(), Committed::KeyReused(_)));
            drop(store);
            closer.close().await.unwrap();
        }
        let (store, closer) = Store::open_with(dir.path(), durability).unwrap();
        let report = store.verify();
        assert!(report.ok(), "{report:?}");
        assert_eq!(report.records, 200);
        let Committed::New { seq, .. } = store.commit(entry(999)).await.unwrap() else { panic!() };
        assert_eq!(seq, 201);
        drop(store);
        closer.close().await.unwrap();
        let wal = std::fs::read_dir(dir.path().join("wal")).unwrap().count();
        assert_eq!(wal, 0, "a clean close empties the write-ahead log");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_commits_form_one_gapless_chain_that_survives_reopen() {
        gapless_chain_that_survives_reopen(Durability::Fsync).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_same_with_flush_durability() {
        gapless_chain_that_survives_reopen(Durability::Flush).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn idempotency_records_outlive_their_window_then_are_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let (store, closer) = Store::open(dir.path()).unwrap();
        let at = |n: i64| 1_800_000_000_000_000_000 + n * REPLAY_WINDOW_NS / 2;
        let mut commit = entry(1);
        if let Guard::NewRequest { now_unix_ns, .. } = &mut commit.guard {
            *now_unix_ns = at(0);
        }
        store.commit(commit).await.unwrap();
        // Found in its own window and the next (where it is replayable for
        // what is left of its ten minutes).
        assert!(store.remembered("h", "r1", at(0)).unwrap().is_some());
        assert!(store.remembered("h", "r1", at(2)).unwrap().is_some());
        // Late in a window nothing is pruned (it might not finish in time).
        assert_eq!(store.prune_requests(at(5)).await.unwrap(), 0);
        assert!(store.remembered("h", "r1", at(2)).unwrap().is_some());
        // Pruning in the next window leaves it; once per window.
        assert_eq!(store.prune_requests(at(2)).await.unwrap(), 0);
        assert!(store.remembered("h", "r1", at(2)).unwrap().is_some());
        // Two windows on, its slot is the one emptied for the next window.
        assert_eq!(store.prune_requests(at(4)).await.unwrap(), 1);
        assert_eq!(store.prune_requests(at(4)).await.unwrap(), 0, "once per window");
        assert!(store.remembered("h", "r1", at(2)).unwrap().is_none());
        // Committed again under the same id in a later window: decided afresh.
        let mut again = entry(1);
        if let Guard::NewRequest { now_unix_ns, .. } = &mut again.guard {
            *now_unix_ns = at(6);
        }
        assert!(matches!(store.commit(again).await.unwrap(), Committed::New { .. }));
        assert!(store.remembered("h", "r1", at(6)).unwrap().is_some());

        // A slot not yet pruned holds an old record of an id decided again
        // since: the newest wins, wherever it is.
        let commit_at = |n: i64| {
            let mut commit = entry(3);
            if let Guard::NewRequest { now_unix_ns, .. } = &mut commit.guard {
                *now_unix_ns = at(n);
            }
            commit
        };
        store.commit(commit_at(8)).await.unwrap();
        store.commit(commit_at(12)).await.unwrap();
        let found = store.remembered("h", "r3", at(14)).unwrap().unwrap();
        assert_eq!(found.decided_unix_ns, at(12));
        drop(store);
        closer.close().await.unwrap();
    }

    /// A decision made before a lock and written after it: the writer turns
    /// the ALLOW into a DENY, in the record and in the answer.
    #[tokio::test]
    async fn an_allow_written_after_a_lock_of_its_session_is_a_deny() {
        let dir = tempfile::tempdir().unwrap();
        let (store, closer) = Store::open(dir.path()).unwrap();
        let actor = Actor { user: "alice".into(), agent: "claude-code".into(), session: "s1".into() };
        let lock = Lock {
            target: "session:s1".into(),
            reason: "injection suspected".into(),
            locked_by: "security".into(),
            locked_unix_ns: 0,
        };
        let locking = Commit {
            lock: Some(LockChange::Put(lock)),
            ..Commit::record(AuditEntry { kind: "lock".into(), ..AuditEntry::default() })
        };
        // The same batch and a later one.
        let mut late = entry(1);
        late.entry.actor = Some(actor.clone());
        let (locked, written) = tokio::join!(store.commit(locking), store.commit(late));
        locked.unwrap();
        let mut later = entry(2);
        later.entry.actor = Some(actor);
        for written in [written.unwrap(), store.commit(later).await.unwrap()] {
            let Committed::New { decision: Some(decision), seq, .. } = written else { panic!("{written:?}") };
            assert_eq!(decision.outcome, Outcome::Deny);
            assert!(
                decision.reasons.iter().any(|r| r.contains("session `s1` is locked by `security`")),
                "{decision:?}"
            );
            let record = store.audit_from(seq, 1).unwrap().into_iter().next().unwrap();
            assert_eq!(record.outcome, "DENY");
        }
        drop(store);
        closer.close().await.unwrap();
    }

    #[tokio::test]
    async fn an_altered_or_missing_record_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let (store, closer) = Store::open(dir.path()).unwrap();
        for n in 0..5 {
            store.commit(entry(n)).await.unwrap();
        }
        let records: Vec<(Vec<u8>, Vec<u8>)> = store
            .trees
            .audit
            .iter()
            .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())))
            .collect::<Result<_, _>>()
            .unwrap();
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
