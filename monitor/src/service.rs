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
use crate::normalize::{Actor, InvalidInput, NormalizedRequest, RequestInput, ResourceInput, limits, normalize};
use crate::policy::PolicySnapshot;
use crate::store::{
    ApprovalEvent, ApprovalRecord, ApprovalState, AuditEntry, Commit, Committed, DecisionRecord, GrantChange, Guard,
    Lock, LockChange, SessionChange, SessionKey, SessionRecord, Store, StoreError, VerifyReport,
};

/// The longest an `AwaitDecision` call blocks.
pub const MAX_AWAIT: Duration = Duration::from_secs(300);
/// How often the sweeper looks for approvals past their deadline.
const SWEEP_EVERY: Duration = Duration::from_millis(100);

/// Why a call failed. Each maps to one gRPC status in `grpc`.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
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
}

/// Tells long-running calls (waits, followed streams) that the monitor is
/// stopping, so that shutdown never waits on a client.
#[derive(Debug, Clone)]
pub struct Shutdown(tokio::sync::watch::Receiver<bool>);

impl Shutdown {
    /// A signal and the switch that fires it.
    pub fn new() -> (tokio::sync::watch::Sender<bool>, Self) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (tx, Self(rx))
    }

    /// Resolves once the monitor is stopping (or the switch is gone).
    pub async fn stopped(&mut self) {
        let _ = self.0.wait_for(|stopping| *stopping).await;
    }
}

/// How an approver answers.
#[derive(Debug, Clone, Default)]
pub struct Resolution {
    /// The approval.
    pub approval_id: String,
    /// Approve (true) or deny.
    pub approve: bool,
    /// A note; on a denial, the message for the agent.
    pub note: String,
    /// Approve for a window: not available before grants exist.
    pub grant_for_seconds: u64,
    /// The scope of that window.
    pub grant_scope: String,
    /// When set, the approval must be for exactly this request (the hash the
    /// approver was shown), else nothing is resolved.
    pub request_hash: String,
}

/// Most resources one `Preview` call may ask about.
pub const MAX_PREVIEW_RESOURCES: usize = 1024;

/// One actor and action on several resources: what `Authorize` would answer
/// for each, asked without acting.
#[derive(Debug, Clone)]
pub struct PreviewInput {
    /// Who would act.
    pub actor: Actor,
    /// The Cedar action id.
    pub action: String,
    /// The resources, as `Authorize` takes them.
    pub resources: Vec<ResourceInput>,
}

/// The answer to a `Preview`: one outcome per resource, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviewOutcomes {
    /// One per resource asked about.
    pub outcomes: Vec<Outcome>,
    /// The policies that decided.
    pub policy_version: String,
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
        }
    }
}

/// A grant to create, as an admin (or an approver, for a window) asks.
#[derive(Debug, Clone, Default)]
pub struct GrantRequest {
    /// Whose sessions.
    pub user: String,
    /// Only this session.
    pub session: String,
    /// Only this agent kind.
    pub agent: String,
    /// Actions.
    pub actions: Vec<String>,
    /// `KIND:ID`.
    pub resource_scope: String,
    /// How long.
    pub ttl_seconds: u64,
    /// Why.
    pub reason: String,
    /// For a window an approver grants, the approver's groups (see
    /// [`Grant::approver_groups`]); `None` for an admin's grant.
    pub approver_groups: Option<Vec<String>>,
    /// Only the sessions of this harness credential (see [`Grant::harness`]);
    /// empty for an admin's grant.
    pub harness: String,
}

/// What a lock targets: exactly one of session, user, agent.
#[derive(Debug, Clone, Default)]
pub struct LockTarget {
    /// A session id.
    pub session: String,
    /// A user.
    pub user: String,
    /// An agent kind.
    pub agent: String,
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
pub struct SessionQuery {
    /// The session id.
    pub session: String,
    /// Its user (empty: any).
    pub user: String,
    /// Its harness credential (empty: any).
    pub harness: String,
}

/// A session as an admin sees it.
#[derive(Debug, Clone, Default)]
pub struct SessionView {
    /// The record (labels, user, agent).
    pub record: SessionRecord,
    /// Why it is locked, if it is.
    pub lock: Option<String>,
}

/// The result of a lock or unlock.
#[derive(Debug, Clone, Default)]
pub struct LockOutcome {
    /// `session:ID`, `user:ID` or `agent:ID`.
    pub target: String,
    /// Locked now.
    pub locked: bool,
    /// Pending approvals denied by the lock.
    pub denied_approvals: Vec<String>,
}

/// What `PolicyStatus` reports.
#[derive(Debug, Clone, Default)]
pub struct PolicyStatusView {
    /// The version serving.
    pub version: String,
    /// When it was loaded.
    pub loaded_at_unix_ns: i64,
    /// Its files.
    pub files: Vec<String>,
    /// How many policies.
    pub policies: usize,
    /// The last failed load, with file and line; empty after a good one.
    pub error: String,
    /// When that failure happened.
    pub error_at_unix_ns: Option<i64>,
    /// Validator warnings, and what the team should know (no forbid at all,
    /// grants that no longer fit).
    pub warnings: Vec<String>,
}

/// Signed checkpoints: the key, where periodic ones are appended, how often.
pub struct Checkpoints {
    /// The signing key (kept outside the store).
    pub key: crate::checkpoint::CheckpointKey,
    /// `checkpoints.jsonl` in the data folder, outside the store.
    pub log: std::path::PathBuf,
    /// How often the head is signed (when it moved), and on shutdown.
    pub every: Duration,
}

/// The monitor's state shared by every call.
pub struct Monitor {
    limiter: crate::ratelimit::Limiter,
    checkpoints: Option<Checkpoints>,
    status: RwLock<PolicyStatusView>,
    snapshot: RwLock<Arc<PolicySnapshot>>,
    store: Store,
    config: MonitorConfig,
    grants: RwLock<GrantBook>,
    locks: RwLock<HashMap<String, Lock>>,
    /// Serializes admin changes to grants and locks with their in-memory copies.
    admin: tokio::sync::Mutex<()>,
    shutdown: Shutdown,
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
    pub fn new(
        snapshot: PolicySnapshot,
        store: Store,
        config: MonitorConfig,
        shutdown: Shutdown,
    ) -> Result<Self, StoreError> {
        let (grants, problems) = GrantBook::load(store.grants()?, &snapshot);
        for (grant_id, problem) in &problems {
            tracing::warn!(%grant_id, %problem, "a stored grant no longer fits the policies and does not apply");
        }
        let locks = store.locks()?.into_iter().map(|lock| (lock.target.clone(), lock)).collect();
        let status = status_of(&snapshot, unix_ns((config.clock)()), &problems);
        Ok(Self {
            limiter: crate::ratelimit::Limiter::default(),
            checkpoints: None,
            status: RwLock::new(status),
            snapshot: RwLock::new(Arc::new(snapshot)),
            store,
            config,
            grants: RwLock::new(grants),
            locks: RwLock::new(locks),
            admin: tokio::sync::Mutex::new(()),
            shutdown,
        })
    }

    fn now(&self) -> OffsetDateTime {
        (self.config.clock)()
    }

    /// The policies in force and what the decision needs to know of the
    /// session beyond the request. The policies and the grants compiled
    /// against them are read together, so a request never sees half a reload.
    fn facts(&self, actor: &Actor, harness: &str) -> Result<(Arc<PolicySnapshot>, SessionFacts), StoreError> {
        // A session is its harness's and user's (the key), so no other
        // harness or user can reach its labels by naming its id; within it,
        // it belongs to the agent that first used it.
        let record = self.store.session(&SessionKey::of(actor, harness))?;
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
            if let Err(limited) = self.limiter.take(&key, rate, now) {
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
    fn approvals_full(&self, caller: &Caller, actor: &Actor, now_ns: i64) -> Result<Option<String>, StoreError> {
        let waiting = self.store.pending_count(&SessionKey::of(actor, &caller.name), now_ns)?;
        if waiting >= self.config.max_pending_per_session {
            return Ok(Some(format!(
                "session `{}` already has {waiting} approvals waiting (at most {}): denied without asking",
                actor.session, self.config.max_pending_per_session
            )));
        }
        let of_harness = self.store.pending_count_of_harness(&caller.name, now_ns)?;
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

    /// The shutdown signal.
    pub fn shutdown(&self) -> Shutdown {
        self.shutdown.clone()
    }

    /// The policy snapshot in force. Calls keep the one they started with.
    pub fn snapshot(&self) -> Arc<PolicySnapshot> {
        Arc::clone(&read(&self.snapshot))
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Decides one request for a harness and records it durably before
    /// answering. The same `request_id` from the same harness gets the same
    /// decision back (or, when it waited for approval, how that ended)
    /// without a second record.
    pub async fn authorize(&self, caller: &Caller, input: RequestInput) -> Result<DecisionRecord, CallError> {
        if !caller.may_act_for(&input.actor.user) {
            return Err(CallError::PermissionDenied(format!(
                "credential `{}` may not act for user `{}`",
                caller.name, input.actor.user
            )));
        }
        // Bad input is refused before it costs anyone a token or a bucket.
        let request = match normalize(&input) {
            Ok(request) => request,
            Err(invalid) => return Err(self.refuse_invalid(caller, invalid).await),
        };
        self.rate_limit(caller, &request.actor).await?;
        let request_hash = request_hash(&input);
        let now = self.now();
        let (snapshot, facts) = self.facts(&request.actor, &caller.name)?;
        let mut evaluation = decide(&snapshot, &request, &facts, now, &self.config.decision)?;
        // What the policies say now, before the cap on waiting approvals
        // (which a replay of a waiting request would itself count towards).
        let fresh = evaluation.outcome;
        if evaluation.outcome == Outcome::Pending
            && let Some(full) = self.approvals_full(caller, &request.actor, unix_ns(now))?
        {
            evaluation = Evaluation::deny(evaluation.policy_ids, vec![full]);
        }
        let decided = Decided {
            caller,
            input: &input,
            request: &request,
            request_hash,
            snapshot: &snapshot,
            evaluation: &evaluation,
            now_ns: unix_ns(now),
            request_id: if input.request_id.is_empty() {
                format!("wdn-{}", uuid::Uuid::new_v4())
            } else {
                input.request_id.clone()
            },
            approval_id: match evaluation.outcome {
                Outcome::Pending => format!("apr-{}", uuid::Uuid::new_v4()),
                _ => String::new(),
            },
        };
        // The writer looks the idempotency key up (the service does not read
        // it first: a replay is rare, a lookup on every request is not) and
        // answers a replay instead of appending. No replay once the session
        // is locked, or once a grant the earlier decision relied on is gone:
        // then this decision is recorded under the key instead.
        let actor = &input.actor;
        let mut replay = self.lock_of(&actor.session, &actor.user, &actor.agent).is_none();
        loop {
            let earlier = match self.store.commit(decided.commit(replay)).await? {
                Committed::New { decision: Some(decision), .. } => {
                    // Every decision is in the audit log; this line only at
                    // debug level (WARDEN_LOG=debug): at thousands a second,
                    // a line each on stderr cost more than the decision.
                    tracing::debug!(
                        outcome = decision.outcome.as_str(),
                        action = %request.action,
                        resource = %request.resource.display_uid(),
                        user = %request.actor.user,
                        audit_seq = decision.audit_seq,
                        "decided"
                    );
                    return Ok(decision);
                }
                Committed::Replay(earlier) => earlier,
                Committed::KeyReused(earlier) if earlier.request_hash == legacy_request_hash(&input) => {
                    earlier.decision
                }
                Committed::KeyReused(_) => return Err(key_reused(&decided.request_id)),
                other => return Err(unexpected(other)),
            };
            // The remembered decision stands while a fresh one says the
            // same: a change of what it depended on beyond the policy
            // version (the session's labels, a grant gone or new, the
            // user's rights) is decided afresh and recorded under the key.
            if earlier.outcome == fresh && self.grants_active(&earlier.grant_ids, decided.now_ns) {
                // A lock that came while the commit waited for its batch
                // still stops an ALLOW.
                return Ok(self.unless_locked(actor, self.current(earlier).await?));
            }
            replay = false;
        }
    }

    /// What [`Monitor::authorize`] would answer now for the actor and action
    /// on each resource, with a fresh request id: the same checks (the
    /// credential's users, rate limits, validation, the session's owner,
    /// lockdown, grants, labels, the cap on waiting approvals) and the same
    /// decision, but no side effect: no label is added, no approval waits,
    /// no idempotency record is kept. One audit record (`preview`) lists
    /// every resource and its outcome, and is durable before the answer.
    pub async fn preview(&self, caller: &Caller, input: PreviewInput) -> Result<PreviewOutcomes, CallError> {
        if !caller.may_act_for(&input.actor.user) {
            return Err(CallError::PermissionDenied(format!(
                "credential `{}` may not act for user `{}`",
                caller.name, input.actor.user
            )));
        }
        if input.resources.len() > MAX_PREVIEW_RESOURCES {
            return Err(InvalidInput::new(
                "resources",
                format!("has {} entries (at most {MAX_PREVIEW_RESOURCES})", input.resources.len()),
            )
            .into());
        }
        let requests = input
            .resources
            .into_iter()
            .enumerate()
            .map(|(i, resource)| {
                let one = RequestInput {
                    request_id: String::new(),
                    actor: input.actor.clone(),
                    action: input.action.clone(),
                    resource,
                    justification: String::new(),
                    context_json: String::new(),
                };
                normalize(&one).map_err(|e| match e.field.strip_prefix("resource") {
                    Some(rest) => InvalidInput { field: format!("resources[{i}]{rest}"), message: e.message },
                    None => e,
                })
            })
            .collect::<Result<Vec<_>, _>>();
        let (requests, actor) = match requests.and_then(|r| Ok((r, crate::normalize::normalize_actor(&input.actor)?))) {
            Ok(valid) => valid,
            Err(invalid) => return Err(self.refuse_invalid(caller, invalid).await),
        };
        self.rate_limit(caller, &actor).await?;
        let now = self.now();
        let (snapshot, facts) = self.facts(&input.actor, &caller.name)?;
        let mut waiting: Option<Option<String>> = None;
        let mut results = Vec::with_capacity(requests.len());
        for request in &requests {
            let mut evaluation = decide(&snapshot, request, &facts, now, &self.config.decision)?;
            if evaluation.outcome == Outcome::Pending {
                let full = match &waiting {
                    Some(full) => full.clone(),
                    None => waiting.insert(self.approvals_full(caller, &input.actor, unix_ns(now))?).clone(),
                };
                if let Some(full) = full {
                    evaluation = Evaluation::deny(evaluation.policy_ids, vec![full]);
                }
            }
            results.push((request, evaluation));
        }
        // Authorize answers ALLOW only if no lock came while its record was
        // written; the same holds here.
        let locked = self.lock_of(&input.actor.session, &input.actor.user, &input.actor.agent).is_some();
        let outcomes: Vec<Outcome> = results
            .iter()
            .map(|(_, e)| if locked && e.outcome == Outcome::Allow { Outcome::Deny } else { e.outcome })
            .collect();
        let listed: Vec<serde_json::Value> = results
            .iter()
            .zip(&outcomes)
            .map(|((request, evaluation), outcome)| {
                serde_json::json!({
                    "resource": request.resource.display_uid(),
                    "outcome": outcome.as_str(),
                    "policy_ids": evaluation.policy_ids,
                })
            })
            .collect();
        let entry = AuditEntry {
            time_unix_ns: unix_ns(now),
            kind: "preview".into(),
            caller: caller.name.clone(),
            actor: Some(input.actor.clone()),
            action: input.action.clone(),
            resource: format!("{} resources", requests.len()),
            request: serde_json::to_string(&listed).unwrap_or_default(),
            policy_version: snapshot.version.clone(),
            ..AuditEntry::default()
        };
        self.store.commit(Commit::record(entry)).await?;
        Ok(PreviewOutcomes { outcomes, policy_version: snapshot.version.clone() })
    }

    /// A remembered decision as it stands now (a PENDING one whose approval
    /// was resolved is answered with the final decision), once durable.
    async fn current(&self, decision: DecisionRecord) -> Result<DecisionRecord, CallError> {
        let decision = match self.store.approval(&decision.approval_id)? {
            Some(approval) if decision.outcome == Outcome::Pending => approval.decision,
            _ => decision,
        };
        self.store.wait_durable(decision.audit_seq).await?;
        Ok(decision)
    }

    /// Waits up to `timeout` for an approval to be resolved and returns its
    /// decision: final as soon as it is resolved or expires (pushed, not
    /// polled), still PENDING when the timeout passes.
    pub async fn await_decision(
        &self,
        caller: &Caller,
        approval_id: &str,
        timeout: Duration,
    ) -> Result<DecisionRecord, CallError> {
        check_approval_id(approval_id)?;
        // Subscribe before reading, so that a resolution cannot fall between.
        let mut events = self.store.approval_events();
        let approval = self.approval_for_harness(caller, approval_id)?;
        if approval.state != ApprovalState::Pending {
            self.store.wait_durable(approval.decision.audit_seq).await?;
            return Ok(self.unless_locked(&approval.request.actor, approval.decision));
        }
        let deadline = tokio::time::Instant::now() + timeout.min(MAX_AWAIT);
        let mut shutdown = self.shutdown();
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => break,
                () = shutdown.stopped() => break,
                event = events.recv() => match event {
                    Ok(ApprovalEvent { approval }) if approval.approval_id == approval_id => {
                        if approval.state != ApprovalState::Pending {
                            return Ok(self.unless_locked(&approval.request.actor, approval.decision));
                        }
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        // Missed events: look at the store instead.
                        if let Some(now) = self.store.approval(approval_id)?
                            && now.state != ApprovalState::Pending
                        {
                            self.store.wait_durable(now.decision.audit_seq).await?;
                            return Ok(self.unless_locked(&now.request.actor, now.decision));
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
            }
        }
        let approval = self.store.approval(approval_id)?.unwrap_or(approval);
        self.store.wait_durable(approval.decision.audit_seq).await?;
        Ok(self.unless_locked(&approval.request.actor, approval.decision))
    }

    fn approval_for_harness(&self, caller: &Caller, approval_id: &str) -> Result<ApprovalRecord, CallError> {
        let Some(approval) = self.store.approval(approval_id)? else {
            return Err(CallError::NotFound(format!("approval `{approval_id}` does not exist")));
        };
        // Only the harness that asked waits for the answer.
        if approval.harness != caller.name || !caller.may_act_for(&approval.request.actor.user) {
            return Err(CallError::PermissionDenied(format!(
                "approval `{approval_id}` belongs to another harness than `{}`",
                caller.name
            )));
        }
        Ok(approval)
    }

    /// Pending approvals, earliest deadline first.
    pub fn list_pending(&self) -> Result<Vec<ApprovalRecord>, CallError> {
        Ok(self.store.pending()?)
    }

    /// One approval, pending or not.
    pub fn approval(&self, approval_id: &str) -> Result<ApprovalRecord, CallError> {
        check_approval_id(approval_id)?;
        self.store.approval(approval_id)?.ok_or_else(|| CallError::NotFound(format!("no approval `{approval_id}`")))
    }

    /// Pending approvals now, and a receiver of every change from now on.
    pub fn watch_pending(&self) -> Result<(Vec<ApprovalRecord>, broadcast::Receiver<ApprovalEvent>), CallError> {
        let events = self.store.approval_events();
        Ok((self.store.pending()?, events))
    }

    /// An approver approves or denies. Approving re-evaluates the stored
    /// request with `context.approved = true` against the policies of this
    /// moment: if it no longer passes, the approval ends DENIED and the
    /// returned record says why.
    pub async fn resolve(&self, caller: &Caller, resolution: Resolution) -> Result<ApprovalRecord, CallError> {
        check_approval_id(&resolution.approval_id)?;
        if resolution.note.len() > limits::JUSTIFICATION_BYTES {
            return Err(
                InvalidInput::new("note", format!("is longer than {} bytes", limits::JUSTIFICATION_BYTES)).into()
            );
        }
        let parent = match resolution.grant_scope.as_str() {
            "" | "exact" => false,
            "parent" => true,
            other => {
                return Err(InvalidInput::new("grant_scope", format!("`{other}` is not `exact` or `parent`")).into());
            }
        };
        if resolution.grant_for_seconds == 0 && !resolution.grant_scope.is_empty() {
            return Err(InvalidInput::new("grant_scope", "is only used with grant_for_seconds").into());
        }
        if resolution.grant_for_seconds > 0 && !resolution.approve {
            return Err(InvalidInput::new("grant_for_seconds", "a window comes only with an approval").into());
        }
        self.check_ttl("grant_for_seconds", resolution.grant_for_seconds)?;
        let Some(approval) = self.store.approval(&resolution.approval_id)? else {
            return Err(CallError::NotFound(format!("approval `{}` does not exist", resolution.approval_id)));
        };
        // The window's grant, checked before anything is resolved. A parent
        // scope lifts more than this request's policies in the way, so only
        // an approver of every group may grant it.
        if parent && caller.groups != crate::auth::UserScope::All {
            return Err(CallError::PermissionDenied(format!(
                "approving for a parent scope needs an approver of every group; credential `{}` is not one",
                caller.name
            )));
        }
        let window = if resolution.grant_for_seconds > 0 {
            let snapshot = self.snapshot();
            if parent && crate::decision::is_composite(&snapshot, &approval.request) {
                return Err(InvalidInput::new(
                    "grant_scope",
                    "a command of several parts has no parent to approve a window over: use `exact`",
                )
                .into());
            }
            let identified = crate::decision::identified(&snapshot, &approval.request);
            let scope = Scope::of_resource(&identified.resource, parent)?;
            Some(GrantRequest {
                user: approval.request.actor.user.clone(),
                session: approval.request.actor.session.clone(),
                agent: approval.request.actor.agent.clone(),
                actions: vec![approval.request.action.clone()],
                resource_scope: scope.canonical(),
                ttl_seconds: resolution.grant_for_seconds,
                reason: format!(
                    "approved for a window by `{}` ({}): {}",
                    caller.name, approval.approval_id, resolution.note
                ),
                approver_groups: Some(match &caller.groups {
                    crate::auth::UserScope::All => vec!["*".to_owned()],
                    crate::auth::UserScope::Only(groups) => {
                        let mut groups: Vec<String> = groups.iter().cloned().collect();
                        groups.sort();
                        groups
                    }
                }),
                harness: approval.harness.clone(),
            })
        } else {
            None
        };
        if !resolution.request_hash.is_empty() && resolution.request_hash != approval.request_hash {
            return Err(CallError::FailedPrecondition(format!(
                "approval `{}` is not for the request you were shown (request hash `{}`); nothing was resolved",
                approval.approval_id, resolution.request_hash
            )));
        }
        if approval.state != ApprovalState::Pending {
            return Err(not_pending(&approval));
        }
        if !caller.may_resolve(&approval.approvers) {
            return Err(CallError::PermissionDenied(format!(
                "approval `{}` needs an approver of {}; credential `{}` is not one",
                approval.approval_id,
                approval.approvers.iter().map(|g| format!("`{g}`")).collect::<Vec<_>>().join(" and "),
                caller.name
            )));
        }
        let now = self.now();
        if unix_ns(now) >= approval.expires_unix_ns {
            let expired = self.expire(approval).await?;
            return Err(not_pending(&expired));
        }
        // Serialized with locks and grant changes: a lock either comes
        // before this (and denies it) or after (and finds it resolved).
        let _admin = self.admin.lock().await;
        let (snapshot, facts) = self.facts(&approval.request.actor, &approval.harness)?;
        // Who may approve is asked of the policies of this moment too: a
        // forbid added since the request went PENDING names its own
        // approvers.
        if resolution.approve
            && let Ok(now_in_the_way) = decide(&snapshot, &approval.request, &facts, now, &self.config.decision)
            && let Some(terms) = now_in_the_way.approval
            && !caller.may_resolve(&terms.approvers)
        {
            return Err(CallError::PermissionDenied(format!(
                "approval `{}` now needs an approver of {} (the policies in the way have changed); credential `{}` is not one",
                approval.approval_id,
                terms.approvers.iter().map(|g| format!("`{g}`")).collect::<Vec<_>>().join(" and "),
                caller.name
            )));
        }
        let window = match &window {
            Some(window) => Some(self.compile_grant(window, &caller.name, now, &snapshot)?),
            None => None,
        };
        let mut labels = vec![];
        let (state, outcome, policy_ids, reasons, kind) = if resolution.approve {
            // A request the policies of this moment cannot even read (its
            // action or context no longer fits the schema) is not approvable.
            let evaluation = decide_approved(&snapshot, &approval.request, &facts, now).unwrap_or_else(|invalid| {
                Evaluation::deny(vec![], vec![format!("the request no longer fits the policy schema: {invalid}")])
            });
            labels = evaluation.labels.clone();
            match evaluation.outcome {
                Outcome::Allow => {
                    let mut reasons = evaluation.reasons;
                    reasons.push(format!("approved by `{}`", caller.name));
                    (ApprovalState::Approved, Outcome::Allow, evaluation.policy_ids, reasons, "approval.approved")
                }
                _ => {
                    let mut reasons = vec![format!(
                        "approved by `{}`, but the request no longer passes the policies of this moment",
                        caller.name
                    )];
                    reasons.extend(evaluation.reasons);
                    (ApprovalState::Denied, Outcome::Deny, evaluation.policy_ids, reasons, "approval.denied")
                }
            }
        } else {
            let mut reasons = approval.reasons.clone();
            reasons.push(format!("denied by `{}`", caller.name));
            (ApprovalState::Denied, Outcome::Deny, approval.policy_ids.clone(), reasons, "approval.denied")
        };
        let actor = approval.request.actor.clone();
        let harness = approval.harness.clone();
        let window = window.filter(|_| state == ApprovalState::Approved);
        let mut reasons = reasons;
        if let Some((grant, _)) = &window {
            reasons.push(format!(
                "approved for {} as grant `{}` on `{}`",
                crate::duration::format_duration(Duration::from_secs(resolution.grant_for_seconds)),
                grant.grant_id,
                grant.resource_scope
            ));
        }
        let resolved =
            finish(approval, state, outcome, policy_ids, reasons, &caller.name, &resolution.note, now, &snapshot);
        let session = SessionChange::Touch { key: SessionKey::of(&actor, &harness), agent: actor.agent, add: labels };
        let committed = self.commit_resolution(resolved, kind, &caller.name, Some(session), window).await?;
        tracing::info!(approval_id = %committed.approval_id, state = committed.state.as_str(), by = %caller.name, "resolved");
        Ok(committed)
    }

    /// Denies an approval whose deadline passed, audited.
    async fn expire(&self, approval: ApprovalRecord) -> Result<ApprovalRecord, CallError> {
        let now = self.now();
        let deadline = format_time(approval.expires_unix_ns);
        let mut reasons = approval.reasons.clone();
        reasons.push(format!("no approver answered before {deadline}"));
        let snapshot = self.snapshot();
        let policy_ids = approval.policy_ids.clone();
        let expired =
            finish(approval, ApprovalState::Expired, Outcome::Deny, policy_ids, reasons, "", "", now, &snapshot);
        self.commit_resolution(expired, "approval.expired", "monitor", None, None).await
    }

    /// Records a resolution if the approval is still pending; a concurrent
    /// resolution (another approver, the sweeper) wins otherwise.
    async fn commit_resolution(
        &self,
        approval: ApprovalRecord,
        kind: &str,
        caller: &str,
        session: Option<SessionChange>,
        grant: Option<(Grant, crate::grants::CompiledGrant)>,
    ) -> Result<ApprovalRecord, CallError> {
        let decision = &approval.decision;
        let entry = AuditEntry {
            time_unix_ns: approval.resolved_unix_ns.unwrap_or_default(),
            kind: kind.into(),
            caller: caller.into(),
            actor: Some(approval.request.actor.clone()),
            action: approval.request.action.clone(),
            resource: approval.request.resource.display_uid(),
            request: serde_json::to_string(&approval.request.for_display()).unwrap_or_default(),
            outcome: decision.outcome.as_str().into(),
            policy_ids: decision.policy_ids.clone(),
            reasons: decision.reasons.clone(),
            policy_version: decision.policy_version.clone(),
            request_id: approval.request_id.clone(),
            approval_id: approval.approval_id.clone(),
        };
        let guard = Guard::StillPending { approval_id: approval.approval_id.clone() };
        let change = grant.as_ref().map(|(grant, _)| GrantChange::Put(Box::new(grant.clone())));
        let commit = Commit { guard, approval: Some(approval), session, grant: change, ..Commit::record(entry) };
        match self.store.commit(commit).await? {
            Committed::New { approval: Some(approval), .. } => {
                if let Some((grant, policy)) = grant {
                    write(&self.grants).insert(grant, policy);
                }
                Ok(*approval)
            }
            Committed::NotPending(current) => Err(not_pending(&current)),
            other => Err(unexpected(other)),
        }
    }

    /// Expires every pending approval past its deadline, until shutdown.
    pub async fn run_sweeper(self: Arc<Self>) {
        let mut shutdown = self.shutdown();
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = shutdown.stopped() => return,
            }
            let now = unix_ns(self.now());
            // On a task of its own: emptying a slot may take a while, and
            // approvals must still expire on time meanwhile.
            let store = self.store.clone();
            tokio::spawn(async move {
                match store.prune_requests(now).await {
                    Ok(0) => {}
                    Ok(pruned) => tracing::info!(pruned, "idempotency records older than the replay window removed"),
                    Err(e) => tracing::error!(error = %e, "cannot prune idempotency records"),
                }
            });
            let expired_grants: Vec<Grant> =
                read(&self.grants).all().filter(|g| g.expires_unix_ns <= now).cloned().collect();
            for grant in expired_grants {
                if let Err(e) = self.remove_grant(&grant, "grant.expired", "monitor").await {
                    tracing::error!(grant_id = %grant.grant_id, error = %e, "cannot remove an expired grant");
                }
            }
            let due = match self.store.pending_until(now) {
                Ok(due) => due,
                Err(e) => {
                    tracing::error!(error = %e, "cannot read pending approvals");
                    continue;
                }
            };
            for approval in due {
                let id = approval.approval_id.clone();
                match self.expire(approval).await {
                    Ok(_) => tracing::info!(approval_id = %id, "expired: no approver answered in time"),
                    // Resolved meanwhile: nothing to do.
                    Err(CallError::FailedPrecondition(_)) => {}
                    Err(e) => tracing::error!(approval_id = %id, error = %e, "cannot expire"),
                }
            }
        }
    }

    fn check_ttl(&self, field: &str, seconds: u64) -> Result<(), InvalidInput> {
        if seconds > self.config.max_grant.as_secs() {
            return Err(InvalidInput::new(
                field,
                format!(
                    "{} is longer than the longest grant this monitor allows ({})",
                    crate::duration::format_duration(Duration::from_secs(seconds)),
                    crate::duration::format_duration(self.config.max_grant)
                ),
            ));
        }
        Ok(())
    }

    /// Checks a grant request and compiles its policy.
    fn compile_grant(
        &self,
        request: &GrantRequest,
        created_by: &str,
        now: OffsetDateTime,
        snapshot: &PolicySnapshot,
    ) -> Result<(Grant, crate::grants::CompiledGrant), CallError> {
        if request.user.trim().is_empty() {
            return Err(InvalidInput::new("user", "is required").into());
        }
        for (field, value) in [
            ("user", &request.user),
            ("session", &request.session),
            ("agent", &request.agent),
            ("harness", &request.harness),
        ] {
            if value.len() > limits::ID_BYTES || value.chars().any(char::is_control) {
                return Err(InvalidInput::new(field, "is not a valid id").into());
            }
        }
        if request.actions.is_empty() {
            return Err(InvalidInput::new("actions", "name at least one action").into());
        }
        for action in &request.actions {
            if !snapshot.actions.contains_key(action) {
                return Err(
                    InvalidInput::new("actions", format!("`{action}` is not an action of the policy schema")).into()
                );
            }
        }
        if request.ttl_seconds == 0 {
            return Err(InvalidInput::new("ttl_seconds", "must be more than zero").into());
        }
        self.check_ttl("ttl_seconds", request.ttl_seconds)?;
        if request.reason.len() > limits::JUSTIFICATION_BYTES
            || request.reason.chars().any(|c| c.is_control() && c != '\n')
        {
            return Err(InvalidInput::new("reason", "is too long or has control characters").into());
        }
        let scope = parse_scope(&request.resource_scope)?;
        let now_ns = unix_ns(now);
        let ttl_ns = i64::try_from(request.ttl_seconds).unwrap_or(i64::MAX).saturating_mul(1_000_000_000);
        let grant = Grant {
            grant_id: format!("grt-{}", uuid::Uuid::new_v4()),
            user: request.user.clone(),
            session: request.session.clone(),
            agent: request.agent.clone(),
            actions: request.actions.clone(),
            resource_scope: scope.canonical(),
            expires_unix_ns: now_ns.saturating_add(ttl_ns),
            reason: request.reason.clone(),
            created_by: created_by.to_owned(),
            created_unix_ns: now_ns,
            approver_groups: request.approver_groups.clone(),
            harness: request.harness.clone(),
        };
        let policy = compile(&grant, snapshot)?;
        Ok((grant, policy))
    }

    /// Creates a grant: its permit applies from the very next request.
    pub async fn create_grant(&self, created_by: &str, request: GrantRequest) -> Result<Grant, CallError> {
        let _admin = self.admin.lock().await;
        let snapshot = self.snapshot();
        let (grant, policy) = self.compile_grant(&request, created_by, self.now(), &snapshot)?;
        let entry = grant_entry(&grant, "grant.created", created_by, vec![grant.reason.clone()], &snapshot);
        self.store
            .commit(Commit { grant: Some(GrantChange::Put(Box::new(grant.clone()))), ..Commit::record(entry) })
            .await?;
        write(&self.grants).insert(grant.clone(), policy);
        tracing::info!(grant_id = %grant.grant_id, user = %grant.user, scope = %grant.resource_scope, "grant created");
        Ok(grant)
    }

    /// Revokes a grant: the very next request no longer sees it.
    pub async fn revoke_grant(&self, caller: &str, grant_id: &str) -> Result<Grant, CallError> {
        let grant = read(&self.grants).get(grant_id).cloned();
        let Some(grant) = grant else {
            return Err(CallError::NotFound(format!("grant `{grant_id}` does not exist (or has expired)")));
        };
        self.remove_grant(&grant, "grant.revoked", caller).await?;
        Ok(grant)
    }

    async fn remove_grant(&self, grant: &Grant, kind: &str, caller: &str) -> Result<(), CallError> {
        let _admin = self.admin.lock().await;
        if read(&self.grants).get(&grant.grant_id).is_none() {
            return Ok(());
        }
        let snapshot = self.snapshot();
        let entry = grant_entry(grant, kind, caller, vec![], &snapshot);
        self.store
            .commit(Commit { grant: Some(GrantChange::Remove(grant.grant_id.clone())), ..Commit::record(entry) })
            .await?;
        write(&self.grants).remove(&grant.grant_id);
        Ok(())
    }

    /// Active grants, optionally of one user or session, soonest expiry first.
    pub fn list_grants(&self, user: &str, session: &str) -> Vec<(Grant, String)> {
        let now = unix_ns(self.now());
        let book = read(&self.grants);
        let mut grants: Vec<(Grant, String)> = book
            .all()
            .filter(|g| g.expires_unix_ns > now)
            .filter(|g| user.is_empty() || g.user == user)
            .filter(|g| session.is_empty() || g.session == session)
            .map(|g| {
                let text = parse_scope(&g.resource_scope)
                    .map(|scope| crate::grants::grant_policy(g, &scope))
                    .unwrap_or_default();
                (g.clone(), text)
            })
            .collect();
        grants.sort_by(|a, b| a.0.expires_unix_ns.cmp(&b.0.expires_unix_ns).then(a.0.grant_id.cmp(&b.0.grant_id)));
        grants
    }

    /// Locks a session, a user or an agent kind: every later request is
    /// denied, and so is every approval now pending for it.
    pub async fn lock(&self, caller: &Caller, target: LockTarget, reason: &str) -> Result<LockOutcome, CallError> {
        let key = target.key()?;
        if reason.len() > limits::JUSTIFICATION_BYTES || reason.chars().any(char::is_control) {
            return Err(InvalidInput::new("reason", "is too long or has control characters").into());
        }
        let lock = Lock {
            target: key.clone(),
            reason: reason.to_owned(),
            locked_by: caller.name.clone(),
            locked_unix_ns: unix_ns(self.now()),
        };
        // Held through the pending scan, so that no approval is resolved
        // between the lock and the denial of what it had pending.
        let _admin = self.admin.lock().await;
        let entry = AuditEntry {
            time_unix_ns: lock.locked_unix_ns,
            kind: "lock".into(),
            caller: caller.name.clone(),
            resource: key.clone(),
            reasons: vec![reason.to_owned()],
            policy_version: self.snapshot().version.clone(),
            ..AuditEntry::default()
        };
        // In force first (fail closed), lifted again only if it cannot be recorded.
        let before = write(&self.locks).insert(key.clone(), lock.clone());
        if let Err(e) = self.store.commit(Commit { lock: Some(LockChange::Put(lock)), ..Commit::record(entry) }).await {
            let mut locks = write(&self.locks);
            match before {
                Some(before) => locks.insert(key.clone(), before),
                None => locks.remove(&key),
            };
            return Err(e.into());
        }
        let mut denied = Vec::new();
        for approval in self.store.pending()? {
            let actor = &approval.request.actor;
            let Some(why) = self.lock_of(&actor.session, &actor.user, &actor.agent) else { continue };
            let id = approval.approval_id.clone();
            let mut reasons = approval.reasons.clone();
            reasons.push(why);
            let snapshot = self.snapshot();
            let policy_ids = approval.policy_ids.clone();
            let ended = finish(
                approval,
                ApprovalState::Denied,
                Outcome::Deny,
                policy_ids,
                reasons,
                &caller.name,
                "",
                self.now(),
                &snapshot,
            );
            match self.commit_resolution(ended, "approval.denied", &caller.name, None, None).await {
                Ok(_) => denied.push(id),
                Err(CallError::FailedPrecondition(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(LockOutcome { target: key, locked: true, denied_approvals: denied })
    }

    /// Lifts a lock.
    pub async fn unlock(&self, caller: &Caller, target: LockTarget) -> Result<LockOutcome, CallError> {
        let key = target.key()?;
        let _admin = self.admin.lock().await;
        if !read(&self.locks).contains_key(&key) {
            return Err(CallError::FailedPrecondition(format!("`{key}` is not locked")));
        }
        let entry = AuditEntry {
            time_unix_ns: unix_ns(self.now()),
            kind: "unlock".into(),
            caller: caller.name.clone(),
            resource: key.clone(),
            policy_version: self.snapshot().version.clone(),
            ..AuditEntry::default()
        };
        self.store.commit(Commit { lock: Some(LockChange::Remove(key.clone())), ..Commit::record(entry) }).await?;
        write(&self.locks).remove(&key);
        Ok(LockOutcome { target: key, locked: false, denied_approvals: vec![] })
    }

    /// What is known of a session: its labels and whether it is locked.
    /// A session id names one session per harness and user; `user` and
    /// `harness` (either may be empty) pick among them, and a choice that
    /// leaves more than one is refused, naming what to add.
    pub fn session(&self, query: &SessionQuery) -> Result<SessionView, CallError> {
        let session = &query.session;
        if session.trim().is_empty() {
            return Err(InvalidInput::new("session", "must not be empty").into());
        }
        let mut found: Vec<SessionRecord> = self
            .store
            .sessions_named(session)?
            .into_iter()
            .filter(|r| query.user.is_empty() || r.user == query.user)
            .filter(|r| query.harness.is_empty() || r.harness == query.harness)
            .collect();
        if found.len() > 1 {
            let owners: Vec<String> =
                found.iter().map(|r| format!("harness `{}` and user `{}`", r.harness, r.user)).collect();
            let field = if query.user.is_empty() { "user" } else { "harness" };
            return Err(InvalidInput::new(
                field,
                format!(
                    "session id `{session}` names {} sessions ({}): name the `user` and `harness`",
                    found.len(),
                    owners.join("; ")
                ),
            )
            .into());
        }
        match found.pop() {
            Some(record) => {
                let lock = self.lock_of(session, &record.user, &record.agent);
                Ok(SessionView { record, lock })
            }
            None => match self.lock_of(session, &query.user, "") {
                Some(lock) => Ok(SessionView {
                    record: SessionRecord {
                        session: session.clone(),
                        user: query.user.clone(),
                        harness: query.harness.clone(),
                        ..SessionRecord::default()
                    },
                    lock: Some(lock),
                }),
                None => Err(CallError::NotFound(format!("session `{session}` has never asked"))),
            },
        }
    }

    /// Drops a session's labels (audited).
    pub async fn clear_labels(
        &self,
        caller: &Caller,
        query: &SessionQuery,
        reason: &str,
    ) -> Result<SessionView, CallError> {
        let before = self.session(query)?;
        // A lock alone shows a session that has never asked: nothing to clear.
        if before.record.agent.is_empty() {
            return Err(CallError::NotFound(format!("session `{}` has never asked", query.session)));
        }
        let entry = AuditEntry {
            time_unix_ns: unix_ns(self.now()),
            kind: "session.labels-cleared".into(),
            caller: caller.name.clone(),
            actor: Some(Actor {
                user: before.record.user.clone(),
                agent: before.record.agent.clone(),
                session: before.record.session.clone(),
            }),
            reasons: vec![
                format!("labels were: {}", before.record.labels.iter().cloned().collect::<Vec<_>>().join(", ")),
                format!("of the session of harness `{}`", before.record.harness),
                reason.to_owned(),
            ],
            policy_version: self.snapshot().version.clone(),
            ..AuditEntry::default()
        };
        let key = before.record.key();
        self.store
            .commit(Commit { session: Some(SessionChange::ClearLabels { key: key.clone() }), ..Commit::record(entry) })
            .await?;
        self.session(&SessionQuery { session: key.session, user: key.user, harness: key.harness })
    }

    /// What-if: the decision and every policy's part in it, for the
    /// policies, grants, labels and locks of this moment. Nothing is recorded.
    pub fn explain(&self, input: &RequestInput) -> Result<(Evaluation, Vec<crate::decision::PolicyTrace>), CallError> {
        let request = normalize(input)?;
        let (snapshot, facts) = self.facts(&request.actor, "explain")?;
        Ok(crate::decision::explain(&snapshot, &request, &facts, self.now(), &self.config.decision)?)
    }

    /// How the policies stand.
    pub fn policy_status(&self) -> PolicyStatusView {
        read(&self.status).clone()
    }

    /// Loads the policy folder again. A good load is swapped in whole (with
    /// the grants compiled against it); a bad one leaves the last good set
    /// serving and is reported in the status, the log and the audit log.
    /// Returns whether the new set loaded, and the status.
    pub async fn reload(&self, caller: &str) -> Result<(bool, PolicyStatusView), CallError> {
        let _admin = self.admin.lock().await;
        let dir = self.config.policy_dir.clone();
        let loaded = tokio::task::spawn_blocking(move || PolicySnapshot::load(&dir))
            .await
            .map_err(|e| CallError::Store(StoreError::BatchFailed(format!("the policy loader failed: {e}"))))?;
        let now = unix_ns(self.now());
        let previous = self.snapshot();
        match loaded {
            Ok(snapshot) => {
                let grants: Vec<Grant> = read(&self.grants).all().cloned().collect();
                let (book, problems) = GrantBook::load(grants, &snapshot);
                let status = status_of(&snapshot, now, &problems);
                let changed = snapshot.version != previous.version;
                if changed {
                    let entry = AuditEntry {
                        time_unix_ns: now,
                        kind: "policy.reload".into(),
                        caller: caller.to_owned(),
                        resource: self.config.policy_dir.display().to_string(),
                        reasons: std::iter::once(format!("{} -> {}", previous.version, snapshot.version))
                            .chain(status.warnings.iter().cloned())
                            .collect(),
                        policy_version: snapshot.version.clone(),
                        ..AuditEntry::default()
                    };
                    // Recorded first: a reload nobody can see did not happen.
                    self.store.commit(Commit::record(entry)).await?;
                    let mut serving = write(&self.snapshot);
                    *write(&self.grants) = book;
                    *serving = Arc::new(snapshot);
                }
                *write(&self.status) = status.clone();
                if changed {
                    tracing::info!(policy_version = %status.version, policies = status.policies, "policies reloaded");
                }
                Ok((true, status))
            }
            Err(error) => {
                let message = error.to_string();
                let entry = AuditEntry {
                    time_unix_ns: now,
                    kind: "policy.reload-failed".into(),
                    caller: caller.to_owned(),
                    resource: self.config.policy_dir.display().to_string(),
                    reasons: error.diagnostics.iter().map(ToString::to_string).collect(),
                    policy_version: previous.version.clone(),
                    ..AuditEntry::default()
                };
                self.store.commit(Commit::record(entry)).await?;
                let status = {
                    let mut status = write(&self.status);
                    status.error = message.clone();
                    status.error_at_unix_ns = Some(now);
                    status.clone()
                };
                tracing::warn!(error = %message, policy_version = %previous.version, "policy reload failed; the last good policies keep serving");
                Ok((false, status))
            }
        }
    }

    /// The first record to send for the newest `count`, or for all.
    pub fn audit_start(&self, count: u64, all: bool) -> Result<u64, CallError> {
        let last = self.store.last_seq()?;
        Ok(if all { 1 } else { last.saturating_sub(count).saturating_add(1) })
    }

    /// Walks the audit chain; with a key, signs the verified head.
    pub fn verify_audit(&self) -> (VerifyReport, Option<crate::checkpoint::Checkpoint>) {
        let report = self.store.verify();
        let checkpoint = self.checkpoints.as_ref().map(|c| c.key.sign(&report.head, unix_ns(self.now())));
        (report, checkpoint)
    }

    /// Uses `checkpoints` to sign the audit head.
    pub fn with_checkpoints(mut self, checkpoints: Checkpoints) -> Self {
        self.checkpoints = Some(checkpoints);
        self
    }

    /// Signs the head every so often (when it moved) and on shutdown,
    /// appending each checkpoint to the checkpoint log.
    pub async fn run_checkpoints(self: Arc<Self>) {
        let Some(checkpoints) = &self.checkpoints else { return };
        let mut shutdown = self.shutdown();
        let mut last = u64::MAX;
        loop {
            let stopping = tokio::select! {
                () = tokio::time::sleep(checkpoints.every) => false,
                () = shutdown.stopped() => true,
            };
            // The newest durable record, not merely the newest written.
            let durable = self.store.durable_seq();
            let head = match self.store.hash_at(durable).map(|hash| (durable, hash)) {
                Ok((seq, Some(hash))) => crate::store::Head { seq, hash },
                Ok(_) => {
                    if stopping {
                        return;
                    }
                    continue;
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot read the audit head to sign it");
                    if stopping {
                        return;
                    }
                    continue;
                }
            };
            if head.seq != last {
                let checkpoint = checkpoints.key.sign(&head, unix_ns(self.now()));
                if let Err(e) = append_line(&checkpoints.log, &checkpoint) {
                    tracing::error!(error = %e, "cannot write the checkpoint");
                } else {
                    last = head.seq;
                    tracing::info!(seq = head.seq, "audit head signed");
                }
            }
            if stopping {
                return;
            }
        }
    }
}

/// Appends one JSON line and syncs it.
fn append_line(path: &std::path::Path, value: &impl serde::Serialize) -> Result<(), String> {
    use std::io::Write;
    let line = serde_json::to_string(value).map_err(|e| e.to_string())?;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    file.write_all(format!("{line}\n").as_bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
    file.sync_data().map_err(|e| format!("{}: {e}", path.display()))
}

/// The status of a freshly loaded snapshot, with what the team should know.
fn status_of(snapshot: &PolicySnapshot, now: i64, grant_problems: &[(String, InvalidInput)]) -> PolicyStatusView {
    let summary = snapshot.summary();
    let mut warnings: Vec<String> = snapshot.warnings.iter().map(ToString::to_string).collect();
    if summary.policies == 0 {
        warnings.push("the policy set has no policies: every request is denied".into());
    } else if summary.forbids == 0 {
        warnings
            .push("the policy set has no forbid: nothing is forbidden outright and nothing waits for approval".into());
    }
    for (grant_id, problem) in grant_problems {
        warnings.push(format!("grant `{grant_id}` no longer fits the policies and does not apply: {problem}"));
    }
    PolicyStatusView {
        version: snapshot.version.clone(),
        loaded_at_unix_ns: now,
        files: snapshot.files.clone(),
        policies: summary.policies,
        error: String::new(),
        error_at_unix_ns: None,
        warnings,
    }
}

/// The audit entry of a grant change.
fn grant_entry(grant: &Grant, kind: &str, caller: &str, reasons: Vec<String>, snapshot: &PolicySnapshot) -> AuditEntry {
    AuditEntry {
        time_unix_ns: grant.created_unix_ns.max(0),
        kind: kind.into(),
        caller: caller.into(),
        actor: Some(Actor { user: grant.user.clone(), agent: grant.agent.clone(), session: grant.session.clone() }),
        action: grant.actions.join(","),
        resource: grant.resource_scope.clone(),
        request: serde_json::json!({ "grant_id": grant.grant_id, "expires_unix_ns": grant.expires_unix_ns })
            .to_string(),
        policy_ids: vec![grant.grant_id.clone()],
        reasons,
        policy_version: snapshot.version.clone(),
        ..AuditEntry::default()
    }
}

/// The approval with its final state and the decision the harness gets.
#[allow(clippy::too_many_arguments)]
fn finish(
    mut approval: ApprovalRecord,
    state: ApprovalState,
    outcome: Outcome,
    policy_ids: Vec<String>,
    reasons: Vec<String>,
    resolved_by: &str,
    note: &str,
    now: OffsetDateTime,
    snapshot: &PolicySnapshot,
) -> ApprovalRecord {
    approval.state = state;
    approval.resolved_by = resolved_by.to_owned();
    approval.note = note.to_owned();
    approval.resolved_unix_ns = Some(unix_ns(now));
    approval.decision = DecisionRecord {
        request_id: approval.request_id.clone(),
        outcome,
        policy_ids,
        reasons,
        approval_id: approval.approval_id.clone(),
        expires_at_unix_ns: Some(approval.expires_unix_ns),
        grant_ids: vec![],
        policy_version: snapshot.version.clone(),
        audit_seq: 0,
        resolved_by: resolved_by.to_owned(),
        note: note.to_owned(),
    };
    approval
}

fn not_pending(approval: &ApprovalRecord) -> CallError {
    let how = match approval.state {
        ApprovalState::Pending => "is still pending".to_owned(),
        ApprovalState::Approved => format!("was already approved by `{}`", approval.resolved_by),
        ApprovalState::Denied => format!("was already denied by `{}`", approval.resolved_by),
        ApprovalState::Expired => format!("expired at {}", format_time(approval.expires_unix_ns)),
    };
    CallError::FailedPrecondition(format!("approval `{}` {how}", approval.approval_id))
}

/// A decision made for an `Authorize` call, and what goes with it into the
/// store.
struct Decided<'a> {
    caller: &'a Caller,
    input: &'a RequestInput,
    request: &'a NormalizedRequest,
    request_hash: String,
    snapshot: &'a PolicySnapshot,
    evaluation: &'a Evaluation,
    now_ns: i64,
    request_id: String,
    approval_id: String,
}

impl Decided<'_> {
    /// The audit record, the decision to remember under the request id, the
    /// approval to wait for and the session's new labels, as one commit;
    /// `replay`: whether an earlier decision under the same request id may
    /// be answered instead.
    fn commit(&self, replay: bool) -> Commit {
        let Decided { caller, input, request, snapshot, evaluation, now_ns, .. } = *self;
        let expires = evaluation
            .approval
            .as_ref()
            .map(|terms| now_ns.saturating_add(i64::try_from(terms.timeout.as_nanos()).unwrap_or(i64::MAX)));
        let decision = DecisionRecord {
            request_id: self.request_id.clone(),
            outcome: evaluation.outcome,
            policy_ids: evaluation.policy_ids.clone(),
            reasons: evaluation.reasons.clone(),
            approval_id: self.approval_id.clone(),
            expires_at_unix_ns: expires,
            grant_ids: evaluation.grant_ids.clone(),
            policy_version: snapshot.version.clone(),
            audit_seq: 0,
            resolved_by: String::new(),
            note: String::new(),
        };
        let labels = if evaluation.outcome == Outcome::Allow { evaluation.labels.clone() } else { vec![] };
        let session = SessionChange::Touch {
            key: SessionKey::of(&request.actor, &self.caller.name),
            agent: request.actor.agent.clone(),
            add: labels,
        };
        let approval = evaluation.approval.as_ref().map(|terms| ApprovalRecord {
            approval_id: self.approval_id.clone(),
            input: input.clone(),
            request: request.clone(),
            request_hash: self.request_hash.clone(),
            request_id: self.request_id.clone(),
            harness: caller.name.clone(),
            policy_ids: evaluation.policy_ids.clone(),
            // What the approver approves: the whole command, every part.
            reasons: evaluation.reasons.iter().chain(&evaluation.parts).cloned().collect(),
            permit_ids: terms.permit_ids.clone(),
            approvers: terms.approvers.clone(),
            policy_version: snapshot.version.clone(),
            created_unix_ns: now_ns,
            expires_unix_ns: expires.unwrap_or(now_ns),
            audit_seq: 0,
            state: ApprovalState::Pending,
            resolved_by: String::new(),
            note: String::new(),
            resolved_unix_ns: None,
            decision: decision.clone(),
        });
        let entry = AuditEntry {
            time_unix_ns: now_ns,
            kind: "decision".into(),
            caller: caller.name.clone(),
            actor: Some(request.actor.clone()),
            action: request.action.clone(),
            resource: request.resource.display_uid(),
            request: serde_json::to_string(&request.for_display()).unwrap_or_default(),
            outcome: evaluation.outcome.as_str().into(),
            policy_ids: evaluation.policy_ids.iter().chain(evaluation.grant_ids.iter()).cloned().collect(),
            // Every part of a command and how it was decided.
            reasons: evaluation.reasons.iter().chain(&evaluation.parts).cloned().collect(),
            policy_version: snapshot.version.clone(),
            request_id: self.request_id.clone(),
            approval_id: self.approval_id.clone(),
        };
        let guard = if input.request_id.is_empty() {
            Guard::None
        } else {
            Guard::NewRequest {
                harness: caller.name.clone(),
                request_id: input.request_id.clone(),
                request_hash: self.request_hash.clone(),
                now_unix_ns: now_ns,
                policy_version: snapshot.version.clone(),
                replay,
            }
        };
        Commit { guard, decision: Some(decision), approval, session: Some(session), ..Commit::record(entry) }
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
        ResourceInput::File { path, cwd } => ("file", vec![path, cwd]),
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
pub fn unix_ns(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos()).unwrap_or(i64::MAX)
}

/// RFC 3339 for messages.
fn format_time(unix_ns: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_ns))
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| unix_ns.to_string())
}
