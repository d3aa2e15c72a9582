//! What the monitor does for each call, proto-free: authorize (idempotency,
//! normalization, decision, durable audit), wait for an approval, read and
//! verify the audit log. The gRPC layer converts to and from these types.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::auth::Caller;
use crate::decision::{DecisionConfig, Outcome, SessionFacts, decide};
use crate::normalize::{InvalidInput, RequestInput, limits, normalize};
use crate::policy::PolicySnapshot;
use crate::store::{
    AuditEntry, AuditRecord, Committed, DecisionCommit, DecisionRecord, PendingApproval, Store, StoreError,
    VerifyReport,
};

/// The longest an `AwaitDecision` call blocks.
pub const MAX_AWAIT: Duration = Duration::from_secs(300);

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
    /// decision back without a second record.
    pub async fn authorize(&self, caller: &Caller, input: RequestInput) -> Result<DecisionRecord, CallError> {
        if !caller.may_act_for(&input.actor.user) {
            return Err(CallError::PermissionDenied(format!(
                "credential `{}` may not act for user `{}`",
                caller.name, input.actor.user
            )));
        }
        let request_hash = request_hash(&input);
        if !input.request_id.is_empty()
            && let Some(earlier) = self.store.remembered(&caller.name, &input.request_id)?
        {
            if earlier.request_hash != request_hash {
                return Err(key_reused(&input.request_id));
            }
            return Ok(earlier.decision);
        }
        let request = normalize(&input)?;
        let now = OffsetDateTime::now_utc();
        let snapshot = self.snapshot();
        let facts = SessionFacts { labels: Default::default(), harness: caller.name.clone() };
        let evaluation = decide(&snapshot, &request, &facts, now, &self.decision)?;

        let request_id = if input.request_id.is_empty() {
            format!("wdn-{}", uuid::Uuid::new_v4())
        } else {
            input.request_id.clone()
        };
        let now_ns = unix_ns(now);
        let approval = evaluation.approval.as_ref().map(|terms| {
            let expires = now_ns.saturating_add(i64::try_from(terms.timeout.as_nanos()).unwrap_or(i64::MAX));
            PendingApproval {
                approval_id: format!("apr-{}", uuid::Uuid::new_v4()),
                request: request.clone(),
                request_hash: request_hash.clone(),
                request_id: request_id.clone(),
                harness: caller.name.clone(),
                policy_ids: evaluation.policy_ids.clone(),
                reasons: evaluation.reasons.clone(),
                approvers: terms.approvers.clone(),
                policy_version: snapshot.version.clone(),
                created_unix_ns: now_ns,
                expires_unix_ns: expires,
                audit_seq: 0,
            }
        });
        let approval_id = approval.as_ref().map(|a| a.approval_id.clone()).unwrap_or_default();
        let decision = DecisionRecord {
            request_id: request_id.clone(),
            outcome: evaluation.outcome,
            policy_ids: evaluation.policy_ids.clone(),
            reasons: evaluation.reasons.clone(),
            approval_id: approval_id.clone(),
            expires_at_unix_ns: approval.as_ref().map(|a| a.expires_unix_ns),
            grant_ids: vec![],
            policy_version: snapshot.version.clone(),
            audit_seq: 0,
            resolved_by: String::new(),
            note: String::new(),
        };
        let entry = AuditEntry {
            time_unix_ns: now_ns,
            kind: "decision".into(),
            caller: caller.name.clone(),
            actor: Some(request.actor.clone()),
            action: request.action.clone(),
            resource: request.resource.display_uid(),
            outcome: evaluation.outcome.as_str().into(),
            policy_ids: evaluation.policy_ids,
            reasons: evaluation.reasons,
            policy_version: snapshot.version.clone(),
            request_id: request_id.clone(),
            approval_id,
        };
        let idempotency =
            (!input.request_id.is_empty()).then(|| (caller.name.clone(), input.request_id.clone(), request_hash));
        let committed = self.store.commit_decision(DecisionCommit { entry, decision, idempotency, approval }).await?;
        match committed {
            Committed::New(decision) => {
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
            Committed::Replay(decision) => Ok(decision),
            Committed::KeyReused => Err(key_reused(&request_id)),
        }
    }

    /// Waits up to `timeout` for a pending approval to be resolved and
    /// returns its decision (still PENDING when nothing happened).
    pub async fn await_decision(
        &self,
        caller: &Caller,
        approval_id: &str,
        timeout: Duration,
    ) -> Result<DecisionRecord, CallError> {
        if approval_id.trim().is_empty() {
            return Err(InvalidInput::new("approval_id", "must not be empty").into());
        }
        if approval_id.len() > limits::ID_BYTES {
            return Err(InvalidInput::new("approval_id", format!("is longer than {} bytes", limits::ID_BYTES)).into());
        }
        let approval = self.approval_for(caller, approval_id)?;
        let deadline = tokio::time::Instant::now() + timeout.min(MAX_AWAIT);
        // Approvals are resolved through the Approvals service, which does
        // not exist yet: until then an approval stays pending, and the
        // waiter is answered when its timeout passes.
        let mut shutdown = self.shutdown();
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => {}
            () = shutdown.stopped() => {}
        }
        let approval = self.store.approval(approval_id)?.unwrap_or(approval);
        Ok(pending_decision(&approval))
    }

    fn approval_for(&self, caller: &Caller, approval_id: &str) -> Result<PendingApproval, CallError> {
        let Some(approval) = self.store.approval(approval_id)? else {
            return Err(CallError::NotFound(format!("approval `{approval_id}` does not exist")));
        };
        if !caller.may_act_for(&approval.request.actor.user) {
            return Err(CallError::PermissionDenied(format!(
                "credential `{}` may not act for user `{}`",
                caller.name, approval.request.actor.user
            )));
        }
        Ok(approval)
    }

    /// The newest `count` audit records, or all of them.
    pub fn audit_tail(&self, count: usize, all: bool) -> Result<Vec<AuditRecord>, CallError> {
        let last = self.store.last_seq()?;
        let from = if all { 1 } else { last.saturating_sub(count as u64).saturating_add(1) };
        let limit = usize::try_from(last.saturating_sub(from).saturating_add(1)).unwrap_or(usize::MAX);
        Ok(self.store.audit_from(from, limit)?)
    }

    /// Walks the audit chain.
    pub fn verify_audit(&self) -> VerifyReport {
        self.store.verify()
    }
}

fn key_reused(request_id: &str) -> CallError {
    InvalidInput::new("request_id", format!("`{request_id}` was already used by this harness for a different request"))
        .into()
}

/// The decision of an approval that is still waiting.
fn pending_decision(approval: &PendingApproval) -> DecisionRecord {
    DecisionRecord {
        request_id: approval.request_id.clone(),
        outcome: Outcome::Pending,
        policy_ids: approval.policy_ids.clone(),
        reasons: approval.reasons.clone(),
        approval_id: approval.approval_id.clone(),
        expires_at_unix_ns: Some(approval.expires_unix_ns),
        grant_ids: vec![],
        policy_version: approval.policy_version.clone(),
        audit_seq: approval.audit_seq,
        resolved_by: String::new(),
        note: String::new(),
    }
}

/// Hex SHA-256 of the request as sent, to tell a replay from a reused key.
fn request_hash(input: &RequestInput) -> String {
    let encoded = serde_json::to_vec(input).unwrap_or_default();
    hex::encode(Sha256::digest(&encoded))
}

/// Nanoseconds since the Unix epoch, saturated to i64.
pub fn unix_ns(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos()).unwrap_or(i64::MAX)
}
