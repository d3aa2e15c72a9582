//! The commit protocol: what a caller hands the writer (`Commit`, with its `Guard`), what it is told (`Committed`), and what a batch writes (`Write`, `Overlay`).

use super::*;

/// A grant to store or forget.
#[derive(Debug, Clone)]
pub(crate) enum GrantChange {
    /// Store (create).
    Put(Box<Grant>),
    /// Forget (revoke, expire).
    Remove(String),
}

/// A lock to store or lift.
#[derive(Debug, Clone)]
pub(crate) enum LockChange {
    /// Lock.
    Put(Lock),
    /// Unlock the target.
    Remove(String),
}

/// A change to a session's record, merged by the writer so that concurrent
/// requests never lose a label.
#[derive(Debug, Clone)]
pub(crate) enum SessionChange {
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
    pub(super) fn key(&self) -> &SessionKey {
        match self {
            Self::Touch { key, .. } | Self::ClearLabels { key } => key,
        }
    }
}

/// What must hold for a commit to be appended; checked by the writer, so
/// that concurrent commits cannot both pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Guard {
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
    /// An answer given again from what is stored: a re-ask of a request id
    /// (`replay`), or an approval's final decision to the harness waiting
    /// on it (`approval.used`). With an approval, the writer answers from
    /// the approval as it stands and fills in the record's outcome, policies
    /// and reasons: an approved one's ALLOW is given once (this record uses
    /// it), and every later answer is a refusal that names that use.
    Answer {
        /// The approval the answer comes from; empty: the commit's decision
        /// is the answer as it is.
        approval_id: String,
    },
    /// The approval is still pending (else its current state is returned).
    StillPending {
        /// The approval.
        approval_id: String,
    },
    /// The grant is still stored (else nothing is appended: another
    /// monitor, or an admin, removed it first).
    GrantExists {
        /// The grant.
        grant_id: String,
    },
    /// Records `first_seq` to `last_seq` are the oldest stored and the last
    /// has `last_hash`; the commit removes them with its record (retention
    /// on PostgreSQL: the record that says they go and their removal are
    /// one transaction). Else nothing is appended: another monitor removed
    /// them first.
    OldestRecords {
        /// The oldest record stored.
        first_seq: u64,
        /// The last record to remove.
        last_seq: u64,
        /// Its hash.
        last_hash: String,
    },
}

/// One audit record and the state that goes with it, made durable together.
#[derive(Debug)]
pub(crate) struct Commit {
    /// The audit entry.
    pub(crate) entry: AuditEntry,
    /// What must hold.
    pub(crate) guard: Guard,
    /// A decision to remember under the request id of a `NewRequest` guard;
    /// its `audit_seq` is filled in.
    pub(crate) decision: Option<DecisionRecord>,
    /// An approval to store (new or changed). When new (pending), its
    /// `audit_seq` and its decision's are filled in; otherwise its
    /// decision's `audit_seq` is.
    pub(crate) approval: Option<ApprovalRecord>,
    /// A grant to store or forget.
    pub(crate) grant: Option<GrantChange>,
    /// A lock to store or lift.
    pub(crate) lock: Option<LockChange>,
    /// A change to a session's record.
    pub(crate) session: Option<SessionChange>,
    /// The session's labels the decision was made with: when the stored
    /// ones differ by the time the writer plans it, nothing is written and
    /// the caller decides again ([`Committed::SessionMoved`]).
    pub(crate) seen_labels: Option<std::collections::BTreeSet<String>>,
    /// For a new approval: how many may wait at once; one more is a DENY.
    pub(crate) caps: Option<Caps>,
}

/// The most approvals that may wait at once, per session and per harness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caps {
    /// Per session.
    pub(crate) per_session: usize,
    /// Per harness credential, over all its sessions.
    pub(crate) per_harness: usize,
}

impl Commit {
    /// About how many bytes it adds to a frame (its request text counts
    /// three times: the record's, and an approval's request as sent and
    /// normalized).
    pub(super) fn approx_bytes(&self) -> usize {
        let texts: usize = self.entry.reasons.iter().map(String::len).sum::<usize>() + self.entry.resource.len();
        let approval = if self.approval.is_some() { 2 * self.entry.request.len() } else { 0 };
        512 + texts + self.entry.request.len() + approval
    }

    /// A record with nothing else.
    pub(crate) fn record(entry: AuditEntry) -> Self {
        Self {
            entry,
            guard: Guard::None,
            decision: None,
            approval: None,
            grant: None,
            lock: None,
            session: None,
            seen_labels: None,
            caps: None,
        }
    }
}

/// What the writer did with a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Committed {
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
    /// The session's labels changed since the decision read them: nothing
    /// appended; decide again.
    SessionMoved,
    /// The grant is no longer stored: nothing appended.
    GrantGone,
    /// A grant the decision relied on is no longer stored (another monitor
    /// revoked it): nothing appended; reload the grants and decide again.
    GrantsMoved,
    /// The oldest records are no longer those named (another monitor
    /// removed them): nothing appended.
    AuditMoved,
}

pub(super) struct Job {
    pub(super) commit: Commit,
    pub(super) reply: oneshot::Sender<Result<Committed, StoreError>>,
}

/// Sends `commit` to a writer and waits for its answer, timing it.
pub(super) async fn send_job(
    writer: &mpsc::Sender<Job>,
    timing: &prometheus_client::metrics::histogram::Histogram,
    commit: Commit,
) -> Result<Committed, StoreError> {
    let started = std::time::Instant::now();
    let (reply, answer) = oneshot::channel();
    writer.send(Job { commit, reply }).await.map_err(|_| StoreError::WriterGone)?;
    let committed = answer.await.map_err(|_| StoreError::WriterGone)?;
    timing.observe(started.elapsed().as_secs_f64());
    committed
}

/// `first` and every job waiting behind it, up to [`MAX_BATCH`] jobs and
/// about [`MAX_BATCH_BYTES`]: a frame (or a transaction) must stay far below
/// what a reader believes, whatever the requests' sizes.
pub(super) fn fill_batch(first: Job, rx: &mut mpsc::Receiver<Job>) -> Vec<Job> {
    let mut bytes = first.commit.approx_bytes();
    let mut batch = vec![first];
    while batch.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
        match rx.try_recv() {
            Ok(job) => {
                bytes += job.commit.approx_bytes();
                batch.push(job);
            }
            Err(_) => break,
        }
    }
    batch
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
    /// Before the first record: seq 0, a hash of zeros.
    pub fn genesis() -> Self {
        Self { seq: 0, hash: "0".repeat(64) }
    }
}

/// What earlier jobs of the same batch wrote, for the guards of later ones.
#[derive(Default)]
pub(super) struct Overlay {
    pub(super) requests: HashMap<Vec<u8>, Remembered>,
    pub(super) approvals: HashMap<String, ApprovalRecord>,
    pub(super) sessions: HashMap<SessionKey, SessionRecord>,
    /// Locks put (`Some`) or removed (`None`) earlier in the batch.
    pub(super) locks: HashMap<String, Option<Lock>>,
    /// Grants put (true) or removed (false) earlier in the batch.
    pub(super) grants: HashMap<String, bool>,
}

impl Overlay {
    pub(super) fn add(&mut self, write: &Write) {
        match &write.lock {
            Some(LockChange::Put(lock)) => {
                self.locks.insert(lock.target.clone(), Some(lock.clone()));
            }
            Some(LockChange::Remove(target)) => {
                self.locks.insert(target.clone(), None);
            }
            None => {}
        }
        match &write.grant {
            Some(GrantChange::Put(grant)) => {
                self.grants.insert(grant.grant_id.clone(), true);
            }
            Some(GrantChange::Remove(id)) => {
                self.grants.insert(id.clone(), false);
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

/// The state of batches written to the log but not yet synced, oldest
/// first. A batch's state changes reach the trees only once its frame is
/// durable (the sync thread applies them, then answers): sled writes its
/// buffers to disk on its own, and after a power loss it must never hold
/// the state of a record the log lost, whose seq would then be given again.
/// Until then the writer plans later batches against this.
#[derive(Default)]
pub(super) struct InFlight(Mutex<std::collections::VecDeque<Overlay>>);

impl InFlight {
    fn batches(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<Overlay>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A batch written to the log (the writer, before handing it on).
    pub(super) fn push(&self, overlay: Overlay) {
        self.batches().push_back(overlay);
    }

    /// The oldest batch is in the trees now (the sync thread, after
    /// applying it): from here on the trees answer for it.
    pub(super) fn applied(&self) {
        self.batches().pop_front();
    }

    /// The newest in-flight value `pick` finds, if any batch has one.
    fn newest<T>(&self, pick: impl Fn(&Overlay) -> Option<T>) -> Option<T> {
        self.batches().iter().rev().find_map(pick)
    }

    pub(super) fn request(&self, key: &[u8]) -> Option<Remembered> {
        self.newest(|o| o.requests.get(key).cloned())
    }

    pub(super) fn approval(&self, id: &str) -> Option<ApprovalRecord> {
        self.newest(|o| o.approvals.get(id).cloned())
    }

    pub(super) fn session(&self, key: &SessionKey) -> Option<SessionRecord> {
        self.newest(|o| o.sessions.get(key).cloned())
    }

    /// A lock put (`Some(Some)`) or removed (`Some(None)`) in flight.
    pub(super) fn lock(&self, target: &str) -> Option<Option<Lock>> {
        self.newest(|o| o.locks.get(target).cloned())
    }

    /// A grant put (`Some(true)`) or removed (`Some(false)`) in flight.
    pub(super) fn grant(&self, grant_id: &str) -> Option<bool> {
        self.newest(|o| o.grants.get(grant_id).copied())
    }

    /// Every approval written in flight.
    pub(super) fn approvals(&self) -> Vec<ApprovalRecord> {
        self.batches().iter().flat_map(|o| o.approvals.values().cloned()).collect()
    }

    pub(super) fn has_locks(&self) -> bool {
        self.batches().iter().any(|o| !o.locks.is_empty())
    }
}

pub(super) struct Write {
    pub(super) record: AuditRecord,
    pub(super) decision: Option<DecisionRecord>,
    pub(super) remembered: Option<(Vec<u8>, Remembered)>,
    pub(super) approval: Option<ApprovalRecord>,
    pub(super) grant: Option<GrantChange>,
    pub(super) lock: Option<LockChange>,
    /// The session record to store, when it changed.
    pub(super) session: Option<SessionRecord>,
    /// The oldest records to remove with this one (`first`, `last`):
    /// retention on PostgreSQL.
    pub(super) removes: Option<(u64, u64)>,
}

impl Write {
    pub(super) fn committed(&self) -> Committed {
        Committed::New {
            seq: self.record.seq,
            decision: self.decision.clone(),
            approval: self.approval.clone().map(Box::new),
            session: self.session.clone().map(Box::new),
        }
    }
}

pub(super) enum Planned {
    Append(Box<Write>),
    Answer(Box<Committed>),
}

/// A session record after `change`; `None` when nothing changes.
pub(super) fn merge_session(current: Option<SessionRecord>, change: &SessionChange) -> Option<SessionRecord> {
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
