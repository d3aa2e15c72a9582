//! Authorize, Preview and AwaitDecision: deciding, remembering under the request id, and waiting.

use super::*;

/// How often one request is decided again because its session's labels
/// changed meanwhile, before it fails (as unavailable: try again).
const MAX_DECISION_TRIES: usize = 16;

/// How often a harness waiting on an approval reads it from a store whose
/// events may be missed (PostgreSQL's, while a listener reconnects).
const LOOK_EVERY: Duration = Duration::from_secs(2);

impl Monitor {
    /// Decides one request for a harness and records it durably before
    /// answering. The same `request_id` from the same harness gets the same
    /// decision back (or, when it waited for approval, how that ended; an
    /// approved one's ALLOW only once), with a `replay` record.
    pub(crate) async fn authorize(&self, caller: &Caller, input: RequestInput) -> Result<DecisionRecord, CallError> {
        let started = std::time::Instant::now();
        let action = input.action.clone();
        let decided = self.authorize_counted(caller, input).await;
        if let Ok(decision) = &decided {
            // Only a decided action is a label: bad input never makes one.
            self.metrics.decided(decision.outcome.as_str(), &action, started.elapsed());
        }
        decided
    }

    async fn authorize_counted(&self, caller: &Caller, input: RequestInput) -> Result<DecisionRecord, CallError> {
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
        let request_id = if input.request_id.is_empty() {
            format!("wdn-{}", uuid::Uuid::new_v4())
        } else {
            input.request_id.clone()
        };
        // Decided again while another decision of the same session changed
        // its labels first (the writer compares); each try follows a
        // committed change, and labels only grow, so this ends.
        for attempt in 0..MAX_DECISION_TRIES {
            let now = self.now();
            let (snapshot, facts) = self.facts(&request.actor, &caller.name).await?;
            let mut evaluation = decide(&snapshot, &request, &facts, now, &self.config.decision)?;
            // What the policies say now, before the cap on waiting approvals
            // (which a replay of a waiting request would itself count towards).
            let fresh = evaluation.outcome;
            let shadow = self.shadow_decide(&request, &facts, now, &evaluation, attempt == 0);
            let mut capped = None;
            if evaluation.outcome == Outcome::Pending
                && let Some(full) = self.approvals_full(caller, &request.actor, unix_ns(now)).await?
            {
                capped = Some(full.clone());
                evaluation = Evaluation::deny(evaluation.policy_ids, vec![full]);
            }
            let decided = Decided {
                caller,
                input: &input,
                request: &request,
                request_hash: request_hash.clone(),
                snapshot: &snapshot,
                evaluation: &evaluation,
                now_ns: unix_ns(now),
                request_id: request_id.clone(),
                approval_id: match evaluation.outcome {
                    Outcome::Pending => format!("apr-{}", uuid::Uuid::new_v4()),
                    _ => String::new(),
                },
                seen_labels: &facts.labels,
                blocked: facts.blocked.as_deref(),
                capped,
                shadow,
                caps: crate::store::Caps {
                    per_session: self.config.max_pending_per_session,
                    per_harness: self.config.max_pending_per_harness,
                },
            };
            // The writer looks the idempotency key up (the service does not
            // read it first: a replay is rare, a lookup on every request is
            // not) and hands back the earlier decision instead of appending.
            // No replay once the session is locked, or once a grant the
            // earlier decision relied on is gone: then this decision is
            // recorded under the key instead.
            let actor = &input.actor;
            let mut replay = self.lock_of(&actor.session, &actor.user, &actor.agent).is_none();
            loop {
                let earlier = match self.store.commit(decided.commit(replay)).await? {
                    Committed::New { decision: Some(decision), .. } => {
                        // Every decision is in the audit log; this line only
                        // at debug level (WARDEN_LOG=debug): at thousands a
                        // second, a line each on stderr cost more than the
                        // decision.
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
                    Committed::SessionMoved => break,
                    // A grant it used was revoked through another monitor:
                    // read the grants again, then decide again.
                    Committed::GrantsMoved => {
                        self.reload_shared_state().await?;
                        break;
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
                    return self.answer_again(&decided, earlier).await;
                }
                replay = false;
            }
        }
        Err(CallError::Unavailable(format!(
            "session `{}` changed {MAX_DECISION_TRIES} times while this request was decided; try again",
            request.actor.session
        )))
    }

    /// What [`Monitor::authorize`] would answer now for the actor and action
    /// on each resource, with a fresh request id: the same checks (the
    /// credential's users, rate limits, validation, the session's owner,
    /// lockdown, grants, labels, the cap on waiting approvals) and the same
    /// decision, but no side effect: no label is added, no approval waits,
    /// no idempotency record is kept. One audit record (`preview`) lists
    /// every resource and its outcome, and is durable before the answer.
    pub(crate) async fn preview(&self, caller: &Caller, input: PreviewInput) -> Result<PreviewOutcomes, CallError> {
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
        let (snapshot, facts) = self.facts(&input.actor, &caller.name).await?;
        let mut waiting: Option<Option<String>> = None;
        let mut results = Vec::with_capacity(requests.len());
        for request in &requests {
            let mut evaluation = decide(&snapshot, request, &facts, now, &self.config.decision)?;
            if evaluation.outcome == Outcome::Pending {
                let full = match &waiting {
                    Some(full) => full.clone(),
                    None => waiting.insert(self.approvals_full(caller, &input.actor, unix_ns(now)).await?).clone(),
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

    /// Answers a re-ask of a request id with the decision remembered under
    /// it, as it stands now (a PENDING one as its approval stands: an
    /// approved one's ALLOW is given once, then refused), in a `replay`
    /// record that names the record it repeats, durable before the answer.
    async fn answer_again(&self, decided: &Decided<'_>, earlier: DecisionRecord) -> Result<DecisionRecord, CallError> {
        // A replay gives the session nothing (the first answer did), and
        // says so, whatever the store kept of the first.
        let earlier = DecisionRecord { labels: vec![], ..earlier };
        let request = decided.request;
        let entry = AuditEntry {
            time_unix_ns: decided.now_ns,
            kind: answer::REPLAY.into(),
            caller: decided.caller.name.clone(),
            actor: Some(request.actor.clone()),
            action: request.action.clone(),
            resource: request.resource.uid(),
            request: serde_json::to_string(request).unwrap_or_default(),
            outcome: earlier.outcome.as_str().into(),
            policy_ids: earlier.policy_ids.iter().chain(&earlier.grant_ids).cloned().collect(),
            reasons: vec![format!(
                "repeats audit record #{}: request id `{}` asked again by `{}`",
                earlier.audit_seq, earlier.request_id, decided.caller.name
            )],
            policy_version: earlier.policy_version.clone(),
            request_id: earlier.request_id.clone(),
            approval_id: earlier.approval_id.clone(),
        };
        let mut entry = entry;
        let approval_id = if earlier.outcome == Outcome::Pending { earlier.approval_id.clone() } else { String::new() };
        if approval_id.is_empty() {
            entry.reasons.extend(earlier.reasons.iter().cloned());
        }
        let commit = Commit { guard: Guard::Answer { approval_id }, decision: Some(earlier), ..Commit::record(entry) };
        match self.store.commit(commit).await? {
            Committed::New { decision: Some(decision), .. } => Ok(decision),
            other => Err(unexpected(other)),
        }
    }

    /// The final decision of a resolved approval, for the harness waiting on
    /// it: an approved one's ALLOW is given once, in an `approval.used`
    /// record (durable before the answer), and refused after that; a denied
    /// or expired one is its resolution.
    async fn settled(&self, approval: ApprovalRecord) -> Result<DecisionRecord, CallError> {
        if approval.state != ApprovalState::Approved {
            self.store.wait_durable(approval.decision.audit_seq).await?;
            return Ok(self.unless_locked(&approval.request.actor, approval.decision));
        }
        let request = &approval.request;
        let entry = AuditEntry {
            time_unix_ns: unix_ns(self.now()),
            kind: answer::USED.into(),
            caller: approval.harness.clone(),
            actor: Some(request.actor.clone()),
            action: request.action.clone(),
            resource: request.resource.uid(),
            request: serde_json::to_string(request).unwrap_or_default(),
            reasons: vec![format!(
                "answers approval `{}` (approved in audit record #{}) to the harness waiting on it",
                approval.approval_id, approval.decision.audit_seq
            )],
            policy_version: approval.decision.policy_version.clone(),
            request_id: approval.request_id.clone(),
            approval_id: approval.approval_id.clone(),
            ..AuditEntry::default()
        };
        let guard = Guard::Answer { approval_id: approval.approval_id.clone() };
        match self.store.commit(Commit { guard, ..Commit::record(entry) }).await? {
            Committed::New { decision: Some(decision), .. } => Ok(decision),
            other => Err(unexpected(other)),
        }
    }

    /// Waits up to `timeout` for an approval to be resolved and returns its
    /// decision: final as soon as it is resolved or expires (pushed, not
    /// polled), still PENDING when the timeout passes.
    pub(crate) async fn await_decision(
        &self,
        caller: &Caller,
        approval_id: &str,
        timeout: Duration,
    ) -> Result<DecisionRecord, CallError> {
        check_approval_id(approval_id)?;
        // Subscribe before reading, so that a resolution cannot fall between.
        let mut events = self.store.approval_events();
        let approval = self.approval_for_harness(caller, approval_id).await?;
        if approval.state != ApprovalState::Pending {
            return self.settled(approval).await;
        }
        let deadline = tokio::time::Instant::now() + timeout.min(MAX_AWAIT);
        let mut shutdown = self.shutdown();
        // Where events may be missed (another monitor's change told while
        // this one's listener was down), the store is read now and then.
        let mut look = tokio::time::interval(LOOK_EVERY);
        look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        look.tick().await;
        let may_miss = self.store.events_may_miss();
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => break,
                () = shutdown.stopped() => break,
                _ = look.tick(), if may_miss => {
                    if let Some(now) = self.store.approval(approval_id).await?
                        && now.state != ApprovalState::Pending
                    {
                        return self.settled(now).await;
                    }
                }
                event = events.recv() => match event {
                    Ok(ApprovalEvent { approval }) if approval.approval_id == approval_id => {
                        if approval.state != ApprovalState::Pending {
                            return self.settled(approval).await;
                        }
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        // Missed events: look at the store instead.
                        if let Some(now) = self.store.approval(approval_id).await?
                            && now.state != ApprovalState::Pending
                        {
                            return self.settled(now).await;
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
            }
        }
        let approval = self.store.approval(approval_id).await?.unwrap_or(approval);
        if approval.state != ApprovalState::Pending {
            return self.settled(approval).await;
        }
        self.store.wait_durable(approval.decision.audit_seq).await?;
        Ok(self.unless_locked(&approval.request.actor, approval.decision))
    }

    pub(super) async fn approval_for_harness(
        &self,
        caller: &Caller,
        approval_id: &str,
    ) -> Result<ApprovalRecord, CallError> {
        let Some(approval) = self.store.approval(approval_id).await? else {
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
}

/// A decision made for an `Authorize` call, and what goes with it into the
/// store.
pub(super) struct Decided<'a> {
    caller: &'a Caller,
    input: &'a RequestInput,
    request: &'a NormalizedRequest,
    request_hash: String,
    snapshot: &'a PolicySnapshot,
    evaluation: &'a Evaluation,
    now_ns: i64,
    request_id: String,
    approval_id: String,
    /// The session's labels the decision was made with.
    seen_labels: &'a std::collections::BTreeSet<String>,
    /// Why the session could not act at all, when it could not.
    blocked: Option<&'a str>,
    /// Why a PENDING became a DENY (the cap on waiting approvals).
    capped: Option<String>,
    /// The shadow set's answer, when it differs from the live one's.
    shadow: Option<crate::model::ShadowOutcome>,
    /// How many approvals may wait at once.
    caps: crate::store::Caps,
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
            labels: if evaluation.outcome == Outcome::Allow { evaluation.labels.clone() } else { vec![] },
        };
        let labels = decision.labels.clone();
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
            reasons: evaluation.recorded_reasons(),
            permit_ids: terms.permit_ids.clone(),
            approvers: terms.approvers.clone(),
            passkey_policies: terms.passkey.clone(),
            policy_version: snapshot.version.clone(),
            created_unix_ns: now_ns,
            expires_unix_ns: expires.unwrap_or(now_ns),
            audit_seq: 0,
            state: ApprovalState::Pending,
            resolved_by: String::new(),
            note: String::new(),
            resolved_unix_ns: None,
            decision: decision.clone(),
            used_seq: 0,
        });
        let entry = AuditEntry {
            time_unix_ns: now_ns,
            kind: "decision".into(),
            caller: caller.name.clone(),
            actor: Some(request.actor.clone()),
            action: request.action.clone(),
            // The record keeps the request as it was: admins read it whole.
            resource: request.resource.uid(),
            request: RecordedRequest {
                session_labels: self.seen_labels.clone(),
                blocked: self.blocked.map(str::to_owned),
                capped: self.capped.clone(),
                shadow: self.shadow.clone(),
                ..RecordedRequest::of(request)
            }
            .to_json(),
            outcome: evaluation.outcome.as_str().into(),
            policy_ids: evaluation.policy_ids.iter().chain(evaluation.grant_ids.iter()).cloned().collect(),
            // Every part of a command and how it was decided.
            reasons: evaluation.recorded_reasons(),
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
        Commit {
            guard,
            decision: Some(decision),
            approval,
            session: Some(session),
            seen_labels: Some(self.seen_labels.clone()),
            caps: Some(self.caps),
            ..Commit::record(entry)
        }
    }
}
