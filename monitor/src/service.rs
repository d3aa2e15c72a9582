//! What the monitor does for each call, proto-free: authorize (idempotency,
//! normalization, decision, durable audit), wait for and resolve approvals,
//! expire them, read and verify the audit log. The gRPC layer converts to and
//! from these types.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use tokio::sync::broadcast;

use crate::auth::Caller;
use crate::decision::{DecisionConfig, Outcome, SessionFacts, decide, decide_approved};
use crate::normalize::{InvalidInput, RequestInput, limits, normalize};
use crate::policy::PolicySnapshot;
use crate::store::{
    ApprovalEvent, ApprovalRecord, ApprovalState, AuditEntry, Commit, Committed, DecisionRecord, Guard, Store,
    StoreError, VerifyReport,
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

/// The monitor's state shared by every call.
pub struct Monitor {
    snapshot: RwLock<Arc<PolicySnapshot>>,
    store: Store,
    decision: DecisionConfig,
    shutdown: Shutdown,
}

impl Monitor {
    /// A monitor deciding with `snapshot` and recording in `store`.
    pub fn new(snapshot: PolicySnapshot, store: Store, decision: DecisionConfig, shutdown: Shutdown) -> Self {
        Self { snapshot: RwLock::new(Arc::new(snapshot)), store, decision, shutdown }
    }

    /// The shutdown signal.
    pub fn shutdown(&self) -> Shutdown {
        self.shutdown.clone()
    }

    /// The policy snapshot in force. Calls keep the one they started with.
    pub fn snapshot(&self) -> Arc<PolicySnapshot> {
        match self.snapshot.read() {
            Ok(guard) => Arc::clone(&guard),
            // A writer panicked mid-swap; the Arc itself is always whole.
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
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
        let request_hash = request_hash(&input);
        let now = OffsetDateTime::now_utc();
        let snapshot = self.snapshot();
        if !input.request_id.is_empty()
            && let Some(earlier) = self.store.remembered(&caller.name, &input.request_id)?
            && earlier.replayable(unix_ns(now), &snapshot.version)
        {
            if earlier.request_hash != request_hash {
                return Err(key_reused(&input.request_id));
            }
            return self.current(earlier.decision).await;
        }
        let request = normalize(&input)?;
        let facts = SessionFacts { labels: Default::default(), harness: caller.name.clone() };
        let evaluation = decide(&snapshot, &request, &facts, now, &self.decision)?;

        let request_id = if input.request_id.is_empty() {
            format!("wdn-{}", uuid::Uuid::new_v4())
        } else {
            input.request_id.clone()
        };
        let now_ns = unix_ns(now);
        let approval_id = match evaluation.outcome {
            Outcome::Pending => format!("apr-{}", uuid::Uuid::new_v4()),
            _ => String::new(),
        };
        let expires = evaluation
            .approval
            .as_ref()
            .map(|terms| now_ns.saturating_add(i64::try_from(terms.timeout.as_nanos()).unwrap_or(i64::MAX)));
        let decision = DecisionRecord {
            request_id: request_id.clone(),
            outcome: evaluation.outcome,
            policy_ids: evaluation.policy_ids.clone(),
            reasons: evaluation.reasons.clone(),
            approval_id: approval_id.clone(),
            expires_at_unix_ns: expires,
            grant_ids: vec![],
            policy_version: snapshot.version.clone(),
            audit_seq: 0,
            resolved_by: String::new(),
            note: String::new(),
        };
        let approval = evaluation.approval.as_ref().map(|terms| ApprovalRecord {
            approval_id: approval_id.clone(),
            input: input.clone(),
            request: request.clone(),
            request_hash: request_hash.clone(),
            request_id: request_id.clone(),
            harness: caller.name.clone(),
            policy_ids: evaluation.policy_ids.clone(),
            reasons: evaluation.reasons.clone(),
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
            request: serde_json::to_string(&request).unwrap_or_default(),
            outcome: evaluation.outcome.as_str().into(),
            policy_ids: evaluation.policy_ids,
            reasons: evaluation.reasons,
            policy_version: snapshot.version.clone(),
            request_id: request_id.clone(),
            approval_id,
        };
        let guard = if input.request_id.is_empty() {
            Guard::None
        } else {
            Guard::NewRequest {
                harness: caller.name.clone(),
                request_id: input.request_id.clone(),
                request_hash,
                now_unix_ns: now_ns,
                policy_version: snapshot.version.clone(),
            }
        };
        match self.store.commit(Commit { entry, guard, decision: Some(decision), approval }).await? {
            Committed::New { decision: Some(decision), .. } => {
                tracing::info!(
                    outcome = decision.outcome.as_str(),
                    action = %request.action,
                    resource = %request.resource.display_uid(),
                    user = %request.actor.user,
                    audit_seq = decision.audit_seq,
                    "decided"
                );
                Ok(decision)
            }
            Committed::Replay(decision) => self.current(decision).await,
            Committed::KeyReused => Err(key_reused(&request_id)),
            other => Err(unexpected(other)),
        }
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
            return Ok(approval.decision);
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
                            return Ok(approval.decision);
                        }
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        // Missed events: look at the store instead.
                        if let Some(now) = self.store.approval(approval_id)?
                            && now.state != ApprovalState::Pending
                        {
                            self.store.wait_durable(now.decision.audit_seq).await?;
                            return Ok(now.decision);
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
            }
        }
        let approval = self.store.approval(approval_id)?.unwrap_or(approval);
        self.store.wait_durable(approval.decision.audit_seq).await?;
        Ok(approval.decision)
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
        if resolution.grant_for_seconds > 0 {
            return Err(InvalidInput::new(
                "grant_for_seconds",
                "approving for a time window needs grants, which this monitor does not have yet: use 0",
            )
            .into());
        }
        if !resolution.grant_scope.is_empty() {
            return Err(InvalidInput::new("grant_scope", "is only used with grant_for_seconds").into());
        }
        let Some(approval) = self.store.approval(&resolution.approval_id)? else {
            return Err(CallError::NotFound(format!("approval `{}` does not exist", resolution.approval_id)));
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
        let now = OffsetDateTime::now_utc();
        if unix_ns(now) >= approval.expires_unix_ns {
            let expired = self.expire(approval).await?;
            return Err(not_pending(&expired));
        }
        let snapshot = self.snapshot();
        let (state, outcome, policy_ids, reasons, kind) = if resolution.approve {
            let facts = SessionFacts { labels: Default::default(), harness: approval.harness.clone() };
            // A request the policies of this moment cannot even read (its
            // action or context no longer fits the schema) is not approvable.
            let evaluation = decide_approved(&snapshot, &approval.request, &facts, now).unwrap_or_else(|invalid| {
                crate::decision::Evaluation {
                    outcome: Outcome::Deny,
                    policy_ids: vec![],
                    reasons: vec![format!("the request no longer fits the policy schema: {invalid}")],
                    approval: None,
                }
            });
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
        let resolved =
            finish(approval, state, outcome, policy_ids, reasons, &caller.name, &resolution.note, now, &snapshot);
        let committed = self.commit_resolution(resolved, kind, &caller.name).await?;
        tracing::info!(approval_id = %committed.approval_id, state = committed.state.as_str(), by = %caller.name, "resolved");
        Ok(committed)
    }

    /// Denies an approval whose deadline passed, audited.
    async fn expire(&self, approval: ApprovalRecord) -> Result<ApprovalRecord, CallError> {
        let now = OffsetDateTime::now_utc();
        let deadline = format_time(approval.expires_unix_ns);
        let mut reasons = approval.reasons.clone();
        reasons.push(format!("no approver answered before {deadline}"));
        let snapshot = self.snapshot();
        let policy_ids = approval.policy_ids.clone();
        let expired =
            finish(approval, ApprovalState::Expired, Outcome::Deny, policy_ids, reasons, "", "", now, &snapshot);
        self.commit_resolution(expired, "approval.expired", "monitor").await
    }

    /// Records a resolution if the approval is still pending; a concurrent
    /// resolution (another approver, the sweeper) wins otherwise.
    async fn commit_resolution(
        &self,
        approval: ApprovalRecord,
        kind: &str,
        caller: &str,
    ) -> Result<ApprovalRecord, CallError> {
        let decision = &approval.decision;
        let entry = AuditEntry {
            time_unix_ns: approval.resolved_unix_ns.unwrap_or_default(),
            kind: kind.into(),
            caller: caller.into(),
            actor: Some(approval.request.actor.clone()),
            action: approval.request.action.clone(),
            resource: approval.request.resource.display_uid(),
            request: serde_json::to_string(&approval.request).unwrap_or_default(),
            outcome: decision.outcome.as_str().into(),
            policy_ids: decision.policy_ids.clone(),
            reasons: decision.reasons.clone(),
            policy_version: decision.policy_version.clone(),
            request_id: approval.request_id.clone(),
            approval_id: approval.approval_id.clone(),
        };
        let guard = Guard::StillPending { approval_id: approval.approval_id.clone() };
        match self.store.commit(Commit { entry, guard, decision: None, approval: Some(approval) }).await? {
            Committed::New { approval: Some(approval), .. } => Ok(*approval),
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
            let due = match self.store.pending_until(unix_ns(OffsetDateTime::now_utc())) {
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

    /// The first record to send for the newest `count`, or for all.
    pub fn audit_start(&self, count: u64, all: bool) -> Result<u64, CallError> {
        let last = self.store.last_seq()?;
        Ok(if all { 1 } else { last.saturating_sub(count).saturating_add(1) })
    }

    /// Walks the audit chain.
    pub fn verify_audit(&self) -> VerifyReport {
        self.store.verify()
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
/// and to bind an approval to the exact request an approver was shown.
pub fn request_hash(input: &RequestInput) -> String {
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
