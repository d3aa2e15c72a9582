//! What the monitor does for each call, proto-free: authorize (idempotency,
//! normalization, decision, durable audit), wait for and resolve approvals,
//! expire them, read and verify the audit log. The gRPC layer converts to and
//! from these types.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use tokio::sync::broadcast;

use crate::auth::Caller;
use crate::decision::{DecisionConfig, Evaluation, Outcome, SessionFacts, decide, decide_approved};
use crate::grants::{Grant, GrantBook, Scope, compile, parse_scope};
use crate::model::{
    ApprovalEvent, ApprovalRecord, ApprovalState, AuditEntry, DecisionRecord, Lock, RecordedRequest, SessionKey,
    SessionRecord,
};
use crate::normalize::{Actor, InvalidInput, NormalizedRequest, RequestInput, ResourceInput, limits, normalize};
use crate::policy::PolicySnapshot;
use crate::store::{
    Commit, Committed, GrantChange, Guard, LockChange, SessionChange, Store, StoreError, VerifyReport, answer,
};

mod approvals;
mod approvers;
mod audit;
mod authorize;
mod grants;
mod policies;
pub(crate) use policies::check_invariants;
mod sessions;
mod shadow;
pub(crate) use shadow::ShadowStatus;
#[cfg(test)]
mod tests;

use policies::status_of;

/// The longest an `AwaitDecision` call blocks.
pub(crate) const MAX_AWAIT: Duration = Duration::from_secs(300);

/// Why a call failed. Each maps to one gRPC status in `grpc`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    /// Bad input, naming the field.
    #[error(transparent)]
    InvalidArgument(#[from] InvalidInput),
    /// The caller may not do this.
    #[error("{0}")]
    PermissionDenied(String),
    /// What was asked about does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The request is valid but the state does not allow it (resolving twice).
    #[error("{0}")]
    FailedPrecondition(String),
    /// Too many requests: try again after the given time.
    #[error("{message}")]
    RateLimited {
        /// What was exceeded.
        message: String,
        /// When to try again.
        retry_after: Duration,
    },
    /// The store failed: nothing is allowed without a durable record.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Something the call needs cannot be kept now (the passkeys file).
    #[error("{0}")]
    Unavailable(String),
}

/// Tells long-running calls (waits, followed streams) that the monitor is
/// stopping, so that shutdown never waits on a client.
#[derive(Debug, Clone)]
pub(crate) struct Shutdown(tokio::sync::watch::Receiver<bool>);

impl Shutdown {
    /// A signal and the switch that fires it.
    pub(crate) fn new() -> (tokio::sync::watch::Sender<bool>, Self) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (tx, Self(rx))
    }

    /// Resolves once the monitor is stopping (or the switch is gone).
    pub(crate) async fn stopped(&mut self) {
        let _ = self.0.wait_for(|stopping| *stopping).await;
    }
}

/// How an approver answers.
#[derive(Debug, Clone, Default)]
pub(crate) struct Resolution {
    /// The approval.
    pub(crate) approval_id: String,
    /// Approve (true) or deny.
    pub(crate) approve: bool,
    /// A note; on a denial, the message for the agent.
    pub(crate) note: String,
    /// Approve for a window: not available before grants exist.
    pub(crate) grant_for_seconds: u64,
    /// The scope of that window.
    pub(crate) grant_scope: String,
    /// When set, the approval must be for exactly this request (the hash the
    /// approver was shown), else nothing is resolved.
    pub(crate) request_hash: String,
    /// Set only by the approval page, once it has verified a passkey
    /// assertion bound to this approval, its request and this outcome: the
    /// enrolled credential that signed. Over gRPC it is always `None`.
    pub(crate) passkey: Option<String>,
}

/// Most resources one `Preview` call may ask about.
pub(crate) const MAX_PREVIEW_RESOURCES: usize = 1024;

/// One actor and action on several resources: what `Authorize` would answer
/// for each, asked without acting.
#[derive(Debug, Clone)]
pub(crate) struct PreviewInput {
    /// Who would act.
    pub(crate) actor: Actor,
    /// The Cedar action id.
    pub(crate) action: String,
    /// The resources, as `Authorize` takes them.
    pub(crate) resources: Vec<ResourceInput>,
}

/// The answer to a `Preview`: one outcome per resource, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PreviewOutcomes {
    /// One per resource asked about.
    pub(crate) outcomes: Vec<Outcome>,
    /// The policies that decided.
    pub(crate) policy_version: String,
}

/// The clock the monitor decides by; tests move it.
pub type Clock = Arc<dyn Fn() -> OffsetDateTime + Send + Sync>;

/// The system clock.
pub fn system_clock() -> Clock {
    Arc::new(OffsetDateTime::now_utc)
}

/// Settings of the monitor beyond the policies.
#[derive(Clone)]
pub struct MonitorConfig {
    /// The policy folder, read again on reload.
    pub policy_dir: std::path::PathBuf,
    /// Decision settings.
    pub decision: DecisionConfig,
    /// The longest a grant may last.
    pub max_grant: Duration,
    /// The clock.
    pub clock: Clock,
    /// Per-session rate limit (off when `None`).
    pub session_rate: Option<crate::ratelimit::Rate>,
    /// Most approvals one session may have waiting at once.
    pub max_pending_per_session: usize,
    /// Most approvals one harness credential may have waiting at once (so
    /// that one harness, over many sessions, cannot flood the approvers).
    pub max_pending_per_harness: usize,
    /// How the policy folder's invariants are proved on each load.
    pub proofs: crate::config::ProofConfig,
    /// The shadow policy folder (`[policy] shadow_dir`), decided beside the
    /// live one without effect on the answers.
    pub shadow_dir: Option<std::path::PathBuf>,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        Self {
            policy_dir: std::path::PathBuf::from(crate::config::DEFAULT_POLICIES),
            decision: DecisionConfig::default(),
            max_grant: Duration::from_secs(7 * 86_400),
            clock: system_clock(),
            session_rate: None,
            max_pending_per_session: 20,
            max_pending_per_harness: 100,
            proofs: crate::config::ProofConfig::default(),
            shadow_dir: None,
        }
    }
}

/// A grant to create, as an admin (or an approver, for a window) asks.
#[derive(Debug, Clone, Default)]
pub(crate) struct GrantRequest {
    /// Whose sessions.
    pub(crate) user: String,
    /// Only this session.
    pub(crate) session: String,
    /// Only this agent kind.
    pub(crate) agent: String,
    /// Actions.
    pub(crate) actions: Vec<String>,
    /// `KIND:ID`.
    pub(crate) resource_scope: String,
    /// How long.
    pub(crate) ttl_seconds: u64,
    /// Why.
    pub(crate) reason: String,
    /// For a window an approver grants, the approver's groups (see
    /// [`Grant::approver_groups`]); `None` for an admin's grant.
    pub(crate) approver_groups: Option<Vec<String>>,
    /// Only the sessions of this harness credential (see [`Grant::harness`]);
    /// empty for an admin's grant.
    pub(crate) harness: String,
    /// A window approved with a passkey (see [`Grant::passkey`]).
    pub(crate) passkey: bool,
}

/// What a lock targets: exactly one of session, user, agent.
#[derive(Debug, Clone, Default)]
pub(crate) struct LockTarget {
    /// A session id.
    pub(crate) session: String,
    /// A user.
    pub(crate) user: String,
    /// An agent kind.
    pub(crate) agent: String,
}

impl LockTarget {
    fn key(&self) -> Result<String, InvalidInput> {
        let set: Vec<(&str, &String)> = [("session", &self.session), ("user", &self.user), ("agent", &self.agent)]
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .collect();
        match set.as_slice() {
            [(kind, id)] => {
                if id.len() > limits::ID_BYTES || id.chars().any(char::is_control) {
                    return Err(InvalidInput::new(*kind, "is not a valid id"));
                }
                Ok(format!("{kind}:{id}"))
            }
            [] => Err(InvalidInput::new("session", "give one of session, user or agent")),
            _ => Err(InvalidInput::new("session", "give only one of session, user or agent")),
        }
    }
}

/// Which session an admin means: a session id, and, where several harnesses
/// or users use that id, whose.
#[derive(Debug, Clone, Default)]
pub(crate) struct SessionQuery {
    /// The session id.
    pub(crate) session: String,
    /// Its user (empty: any).
    pub(crate) user: String,
    /// Its harness credential (empty: any).
    pub(crate) harness: String,
}

/// A session as an admin sees it.
#[derive(Debug, Clone, Default)]
pub(crate) struct SessionView {
    /// The record (labels, user, agent).
    pub(crate) record: SessionRecord,
    /// Why it is locked, if it is.
    pub(crate) lock: Option<String>,
}

/// The result of a lock or unlock.
#[derive(Debug, Clone, Default)]
pub(crate) struct LockOutcome {
    /// `session:ID`, `user:ID` or `agent:ID`.
    pub(crate) target: String,
    /// Locked now.
    pub(crate) locked: bool,
    /// Pending approvals denied by the lock.
    pub(crate) denied_approvals: Vec<String>,
}

/// What `PolicyStatus` reports.
#[derive(Debug, Clone, Default)]
pub(crate) struct PolicyStatusView {
    /// The version serving.
    pub(crate) version: String,
    /// When it was loaded.
    pub(crate) loaded_at_unix_ns: i64,
    /// Its files.
    pub(crate) files: Vec<String>,
    /// How many policies.
    pub(crate) policies: usize,
    /// The last failed load, with file and line; empty after a good one.
    pub(crate) error: String,
    /// When that failure happened.
    pub(crate) error_at_unix_ns: Option<i64>,
    /// What the failed load read (its content version, or the error of a
    /// folder that could not be read), so that the watcher reports one
    /// broken content once, however often the folder is touched.
    pub(crate) error_content: String,
    /// Validator warnings, and what the team should know (no forbid at all,
    /// grants that no longer fit).
    pub(crate) warnings: Vec<String>,
    /// The shadow folder, when `[policy] shadow_dir` names one.
    pub(crate) shadow: Option<ShadowStatus>,
}

/// Signed checkpoints: the key, where periodic ones are appended, how often.
pub(crate) struct Checkpoints {
    /// The signing key (kept outside the store).
    pub(crate) key: crate::checkpoint::CheckpointKey,
    /// `checkpoints.jsonl` in the data folder, outside the store.
    pub(crate) log: std::path::PathBuf,
    /// How often the head is signed (when it moved), and on shutdown.
    pub(crate) every: Duration,
}

/// The monitor's state shared by every call.
pub(crate) struct Monitor {
    /// What it counts, for `--metrics`.
    pub(crate) metrics: Arc<crate::metrics::Metrics>,
    limiter: crate::ratelimit::Limiter,
    checkpoints: Option<Checkpoints>,
    status: RwLock<PolicyStatusView>,
    snapshot: RwLock<Arc<PolicySnapshot>>,
    /// The shadow set, when `[policy] shadow_dir` names one.
    shadow: RwLock<shadow::ShadowSet>,
    store: Store,
    config: MonitorConfig,
    grants: RwLock<GrantBook>,
    locks: RwLock<HashMap<String, Lock>>,
    /// Serializes admin changes to grants and locks with their in-memory copies.
    admin: tokio::sync::Mutex<()>,
    shutdown: Shutdown,
    /// Approvers' passkeys (none until `with_passkeys`).
    passkeys: Arc<crate::passkeys::Book>,
}

/// A read of a lock that a panicking writer left poisoned is still whole.
fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Monitor {
    /// A monitor deciding with `snapshot` and recording in `store`, with the
    /// grants and locks the store holds.
    pub(crate) async fn open(
        snapshot: PolicySnapshot,
        store: Store,
        config: MonitorConfig,
        shutdown: Shutdown,
    ) -> Result<Self, StoreError> {
        let (grants, locks) = (store.grants().await?, store.locks().await?);
        Ok(Self::with_state(snapshot, store, config, shutdown, grants, locks))
    }

    /// A monitor on an embedded store, for tests that build one without
    /// awaiting.
    #[cfg(test)]
    pub(crate) fn new(
        snapshot: PolicySnapshot,
        store: crate::store::Embedded,
        config: MonitorConfig,
        shutdown: Shutdown,
    ) -> Result<Self, StoreError> {
        let (grants, locks) = (store.grants()?, store.locks()?);
        Ok(Self::with_state(snapshot, Store::Embedded(store), config, shutdown, grants, locks))
    }

    fn with_state(
        snapshot: PolicySnapshot,
        store: Store,
        config: MonitorConfig,
        shutdown: Shutdown,
        grants: Vec<Grant>,
        locks: Vec<Lock>,
    ) -> Self {
        let (grants, problems) = GrantBook::load(grants, &snapshot);
        for (grant_id, problem) in &problems {
            tracing::warn!(%grant_id, %problem, "a stored grant no longer fits the policies and does not apply");
        }
        let locks = locks.into_iter().map(|lock| (lock.target.clone(), lock)).collect();
        let status = status_of(&snapshot, unix_ns((config.clock)()), &problems);
        Self {
            metrics: Arc::new(crate::metrics::Metrics::new(store.append_seconds())),
            limiter: crate::ratelimit::Limiter::default(),
            checkpoints: None,
            status: RwLock::new(status),
            snapshot: RwLock::new(Arc::new(snapshot)),
            shadow: RwLock::default(),
            store,
            config,
            grants: RwLock::new(grants),
            locks: RwLock::new(locks),
            admin: tokio::sync::Mutex::new(()),
            shutdown,
            passkeys: Arc::new(crate::passkeys::Book::empty()),
        }
    }

    pub(crate) fn now(&self) -> OffsetDateTime {
        (self.config.clock)()
    }

    /// The policies in force and what the decision needs to know of the
    /// session beyond the request. The policies and the grants compiled
    /// against them are read together, so a request never sees half a reload.
    async fn facts(&self, actor: &Actor, harness: &str) -> Result<(Arc<PolicySnapshot>, SessionFacts), StoreError> {
        // A session is its harness's and user's (the key), so no other
        // harness or user can reach its labels by naming its id; within it,
        // it belongs to the agent that first used it.
        let record = self.store.session(&SessionKey::of(actor, harness)).await?;
        let claimed = record.as_ref().filter(|r| r.agent != actor.agent).map(|r| {
            format!("session `{}` belongs to agent `{}`, not to agent `{}`", actor.session, r.agent, actor.agent)
        });
        let (snapshot, grants) = {
            let snapshot = read(&self.snapshot);
            (Arc::clone(&snapshot), read(&self.grants).for_user(&actor.user))
        };
        let facts = SessionFacts {
            labels: record.map(|r| r.labels).unwrap_or_default(),
            harness: harness.to_owned(),
            grants,
            blocked: claimed.or_else(|| self.lock_of(&actor.session, &actor.user, &actor.agent)),
        };
        Ok((snapshot, facts))
    }

    /// Applies the harness's and the session's rate limits; the first refusal
    /// of a burst is audited, the rest are not.
    async fn rate_limit(&self, caller: &Caller, actor: &Actor) -> Result<(), CallError> {
        let now = std::time::Instant::now();
        let checks = [
            caller.rate.map(|rate| (format!("harness:{}", caller.name), rate, format!("credential `{}`", caller.name))),
            // A session's bucket is its harness's and user's: no harness
            // can spend another's (or another user's) budget by naming
            // the same session id. Ids hold no control characters, so the
            // NUL separators are unambiguous.
            self.config.session_rate.map(|rate| {
                (
                    format!("session:{}\0{}\0{}", caller.name, actor.user, actor.session),
                    rate,
                    format!("session `{}`", actor.session),
                )
            }),
        ];
        for (key, rate, who) in checks.into_iter().flatten() {
            // On a shared store the buckets are shared by every monitor.
            let taken = match &self.store {
                Store::Postgres(pg) => pg.take_token(&key, rate, unix_ns(self.now())).await?,
                Store::Embedded(_) => self.limiter.take(&key, rate, now),
            };
            if let Err(limited) = taken {
                let message = format!(
                    "rate limit of {}/s (burst {}) for {who} exceeded; retry in {} ms",
                    rate.per_second,
                    rate.burst,
                    limited.retry_after.as_millis()
                );
                if limited.first {
                    let entry = AuditEntry {
                        time_unix_ns: unix_ns(self.now()),
                        kind: "rate-limited".into(),
                        caller: caller.name.clone(),
                        actor: Some(actor.clone()),
                        reasons: vec![message.clone()],
                        policy_version: self.snapshot().version.clone(),
                        ..AuditEntry::default()
                    };
                    self.store.commit(Commit::record(entry)).await?;
                }
                self.metrics.rate_limited.inc();
                return Err(CallError::RateLimited { message, retry_after: limited.retry_after });
            }
        }
        Ok(())
    }

    /// Records that an authenticated harness sent bad input (at most a
    /// burst of ten, then one a second per harness: a harness cannot fill
    /// the log this way), and returns the error for the caller. The record
    /// holds the error, shortened and with control characters escaped: the
    /// input itself is what was wrong with it.
    async fn refuse_invalid(&self, caller: &Caller, invalid: InvalidInput) -> CallError {
        const RECORDED: crate::ratelimit::Rate = crate::ratelimit::Rate { per_second: 1.0, burst: 10 };
        let key = format!("invalid:{}", caller.name);
        if self.limiter.take(&key, RECORDED, std::time::Instant::now()).is_ok() {
            let mut message: String = invalid.to_string().escape_debug().collect();
            if message.len() > 512 {
                let cut = (0..=512).rev().find(|&i| message.is_char_boundary(i)).unwrap_or(0);
                message.truncate(cut);
                message.push('…');
            }
            let entry = AuditEntry {
                time_unix_ns: unix_ns(self.now()),
                kind: "invalid-request".into(),
                caller: caller.name.clone(),
                reasons: vec![message],
                policy_version: self.snapshot().version.clone(),
                ..AuditEntry::default()
            };
            if let Err(e) = self.store.commit(Commit::record(entry)).await {
                return e.into();
            }
        }
        invalid.into()
    }

    /// Why a new approval may not wait, when the session or the harness
    /// already has as many waiting as it may (past their deadline, they no
    /// longer count).
    async fn approvals_full(&self, caller: &Caller, actor: &Actor, now_ns: i64) -> Result<Option<String>, StoreError> {
        let waiting = self.store.pending_count(&SessionKey::of(actor, &caller.name), now_ns).await?;
        if waiting >= self.config.max_pending_per_session {
            return Ok(Some(format!(
                "session `{}` already has {waiting} approvals waiting (at most {}): denied without asking",
                actor.session, self.config.max_pending_per_session
            )));
        }
        let of_harness = self.store.pending_count_of_harness(&caller.name, now_ns).await?;
        if of_harness >= self.config.max_pending_per_harness {
            return Ok(Some(format!(
                "credential `{}` already has {of_harness} approvals waiting (at most {}): denied without asking",
                caller.name, self.config.max_pending_per_harness
            )));
        }
        Ok(None)
    }

    /// Whether every grant in `ids` is still active.
    fn grants_active(&self, ids: &[String], now: i64) -> bool {
        let book = read(&self.grants);
        ids.iter().all(|id| book.get(id).is_some_and(|g| g.expires_unix_ns > now))
    }

    /// A decision as it may be handed out now: denied if the session, its
    /// user or its agent kind has been locked since.
    fn unless_locked(&self, actor: &Actor, mut decision: DecisionRecord) -> DecisionRecord {
        if decision.outcome == Outcome::Allow
            && let Some(lock) = self.lock_of(&actor.session, &actor.user, &actor.agent)
        {
            decision.outcome = Outcome::Deny;
            decision.reasons.push(lock);
        }
        decision
    }

    /// Why the session, its user or its agent kind is locked.
    fn lock_of(&self, session: &str, user: &str, agent: &str) -> Option<String> {
        let locks = read(&self.locks);
        [("session", session), ("user", user), ("agent", agent)].into_iter().find_map(|(kind, id)| {
            locks.get(&format!("{kind}:{id}")).map(|lock| {
                let why = if lock.reason.is_empty() { String::new() } else { format!(": {}", lock.reason) };
                format!("{kind} `{id}` is locked by `{}`{why}", lock.locked_by)
            })
        })
    }

    /// Reads the grants and locks again from the store, which other
    /// monitors on the same database change too (told by
    /// `Store::state_changes`).
    pub(crate) async fn reload_shared_state(&self) -> Result<(), StoreError> {
        let _admin = self.admin.lock().await;
        let (stored_grants, stored_locks) = (self.store.grants().await?, self.store.locks().await?);
        let snapshot = self.snapshot();
        let (grants, problems) = GrantBook::load(stored_grants, &snapshot);
        for (grant_id, problem) in &problems {
            tracing::warn!(%grant_id, %problem, "a stored grant no longer fits the policies and does not apply");
        }
        *write(&self.grants) = grants;
        *write(&self.locks) = stored_locks.into_iter().map(|lock| (lock.target.clone(), lock)).collect();
        if let Store::Postgres(pg) = &self.store {
            // Off the async workers: the book's writers hold it across a
            // write to the database, whose answer a blocked worker could
            // keep from being read (a replica hung so when a passkey was
            // revoked through it as another's change arrived). Read while
            // the writers wait, so that no older list replaces a newer one.
            let (book, pg, runtime) = (Arc::clone(&self.passkeys), pg.clone(), tokio::runtime::Handle::current());
            tokio::task::spawn_blocking(move || book.replace_with(|| runtime.block_on(pg.passkeys())))
                .await
                .map_err(|e| StoreError::BatchFailed(format!("the passkey book did not answer: {e}")))??;
        }
        Ok(())
    }

    /// The metrics as Prometheus text, with the approvals pending and the
    /// bytes of the data folder read now.
    pub(crate) async fn metrics_text(&self, data: &std::path::Path) -> String {
        let stats = self.store.log_stats().ok();
        self.metrics.render(&crate::metrics::Gauges {
            pending: self.store.pending().await.map_or(0, |pending| pending.len() as u64),
            data_bytes: crate::metrics::bytes_under(data),
            durable_lag: self.store.durable_lag(),
            log_bytes: stats.as_ref().map_or(0, |s| s.segments.iter().map(|s| s.bytes).sum()),
            log_segments: stats.as_ref().map_or(0, |s| s.segments.len() as u64),
        })
    }

    pub(crate) fn shutdown(&self) -> Shutdown {
        self.shutdown.clone()
    }

    /// The policy snapshot in force. Calls keep the one they started with.
    pub(crate) fn snapshot(&self) -> Arc<PolicySnapshot> {
        Arc::clone(&read(&self.snapshot))
    }

    /// The store.
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }
}

fn unexpected(committed: Committed) -> CallError {
    CallError::Store(StoreError::BatchFailed(format!("unexpected result from the writer: {committed:?}")))
}

fn check_approval_id(approval_id: &str) -> Result<(), CallError> {
    if approval_id.trim().is_empty() {
        return Err(InvalidInput::new("approval_id", "must not be empty").into());
    }
    if approval_id.len() > limits::ID_BYTES {
        return Err(InvalidInput::new("approval_id", format!("is longer than {} bytes", limits::ID_BYTES)).into());
    }
    // No id the monitor makes holds one, and a database's text cannot hold NUL.
    if approval_id.chars().any(char::is_control) {
        return Err(InvalidInput::new("approval_id", "holds a control character").into());
    }
    Ok(())
}

fn key_reused(request_id: &str) -> CallError {
    InvalidInput::new("request_id", format!("`{request_id}` was already used by this harness for a different request"))
        .into()
}

/// Hex SHA-256 of the request as sent, to tell a replay from a reused key
/// and to bind an approval to the exact request an approver was shown: over
/// every field, each length-prefixed, the resource's kind first, so that no
/// two requests share an encoding.
pub fn request_hash(input: &RequestInput) -> String {
    let mut h = Sha256::new();
    h.update(b"warden.request.v2\0");
    let mut text = |value: &str| {
        h.update((value.len() as u64).to_be_bytes());
        h.update(value.as_bytes());
    };
    for value in [&input.request_id, &input.actor.user, &input.actor.agent, &input.actor.session, &input.action] {
        text(value);
    }
    let (kind, fields): (&str, Vec<&str>) = match &input.resource {
        // A pattern is another request than the file of the same name.
        ResourceInput::File { path, cwd, pattern } => (if *pattern { "file-pattern" } else { "file" }, vec![path, cwd]),
        ResourceInput::Command { argv, cwd } => ("command", argv.iter().chain([cwd]).map(String::as_str).collect()),
        ResourceInput::Http { method, url } => ("http", vec![method, url]),
        ResourceInput::Secret { name } => ("secret", vec![name]),
        ResourceInput::Tool { server, name, arguments_json } => ("tool", vec![server, name, arguments_json]),
    };
    text(kind);
    text(&fields.len().to_string());
    fields.into_iter().for_each(&mut text);
    text(&input.justification);
    text(&input.context_json);
    hex::encode(h.finalize())
}

/// The hash [`request_hash`] gave before version 2, over the request's JSON:
/// the idempotency records of a store written then still match their
/// requests.
pub fn legacy_request_hash(input: &RequestInput) -> String {
    let encoded = serde_json::to_vec(input).unwrap_or_default();
    hex::encode(Sha256::digest(&encoded))
}

/// Nanoseconds since the Unix epoch, saturated to i64.
pub(crate) fn unix_ns(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos()).unwrap_or(i64::MAX)
}

/// RFC 3339 for messages.
pub(crate) fn format_time(unix_ns: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_ns))
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| unix_ns.to_string())
}
