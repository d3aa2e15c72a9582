//! Approvals: listing, watching, resolving (with windows), and the sweeper that expires them.

use super::*;

impl Monitor {
    /// Pending approvals, earliest deadline first.
    pub(crate) async fn list_pending(&self) -> Result<Vec<ApprovalRecord>, CallError> {
        Ok(self.store.pending().await?)
    }

    /// One approval, pending or not.
    pub(crate) async fn approval(&self, approval_id: &str) -> Result<ApprovalRecord, CallError> {
        check_approval_id(approval_id)?;
        self.store
            .approval(approval_id)
            .await?
            .ok_or_else(|| CallError::NotFound(format!("no approval `{approval_id}`")))
    }

    /// Pending approvals now, and a receiver of every change from now on.
    pub(crate) async fn watch_pending(
        &self,
    ) -> Result<(Vec<ApprovalRecord>, broadcast::Receiver<ApprovalEvent>), CallError> {
        let events = self.store.approval_events();
        Ok((self.store.pending().await?, events))
    }

    /// An approver approves or denies. Approving re-evaluates the stored
    /// request with `context.approved = true` against the policies of this
    /// moment: if it no longer passes, the approval ends DENIED and the
    /// returned record says why.
    pub(crate) async fn resolve(&self, caller: &Caller, resolution: Resolution) -> Result<ApprovalRecord, CallError> {
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
        let Some(approval) = self.store.approval(&resolution.approval_id).await? else {
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
                passkey: resolution.passkey.is_some(),
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
        if resolution.approve && resolution.passkey.is_none() {
            needs_no_passkey(&approval.approval_id, &approval.passkey_policies)?;
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
        let (snapshot, facts) = self.facts(&approval.request.actor, &approval.harness).await?;
        // Who may approve is asked of the policies of this moment too: a
        // forbid added since the request went PENDING names its own
        // approvers.
        if resolution.approve
            && let Ok(now_in_the_way) = decide(&snapshot, &approval.request, &facts, now, &self.config.decision)
            && let Some(terms) = now_in_the_way.approval
        {
            if !caller.may_resolve(&terms.approvers) {
                return Err(CallError::PermissionDenied(format!(
                    "approval `{}` now needs an approver of {} (the policies in the way have changed); credential `{}` is not one",
                    approval.approval_id,
                    terms.approvers.iter().map(|g| format!("`{g}`")).collect::<Vec<_>>().join(" and "),
                    caller.name
                )));
            }
            if resolution.passkey.is_none() {
                needs_no_passkey(&approval.approval_id, &terms.passkey)?;
            }
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
                    reasons.push(match &resolution.passkey {
                        Some(key) => format!("approved by `{}` with passkey {key}", caller.name),
                        None => format!("approved by `{}`", caller.name),
                    });
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
            reasons.push(match &resolution.passkey {
                Some(key) => format!("denied by `{}` with passkey {key}", caller.name),
                None => format!("denied by `{}`", caller.name),
            });
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
        let given = if outcome == Outcome::Allow { labels.clone() } else { vec![] };
        let resolved = finish(
            approval,
            state,
            outcome,
            policy_ids,
            reasons,
            &caller.name,
            &resolution.note,
            given,
            now,
            &snapshot,
        );
        let session = SessionChange::Touch { key: SessionKey::of(&actor, &harness), agent: actor.agent, add: labels };
        let committed = self.commit_resolution(resolved, kind, &caller.name, Some(session), window).await?;
        tracing::info!(approval_id = %committed.approval_id, state = committed.state.as_str(), by = %caller.name, "resolved");
        Ok(committed)
    }

    /// Denies an approval whose deadline passed, audited.
    pub(super) async fn expire(&self, approval: ApprovalRecord) -> Result<ApprovalRecord, CallError> {
        let now = self.now();
        let deadline = format_time(approval.expires_unix_ns);
        let mut reasons = approval.reasons.clone();
        reasons.push(format!("no approver answered before {deadline}"));
        let snapshot = self.snapshot();
        let policy_ids = approval.policy_ids.clone();
        let expired = finish(
            approval,
            ApprovalState::Expired,
            Outcome::Deny,
            policy_ids,
            reasons,
            "",
            "",
            vec![],
            now,
            &snapshot,
        );
        self.commit_resolution(expired, "approval.expired", "monitor", None, None).await
    }

    /// Records a resolution if the approval is still pending; a concurrent
    /// resolution (another approver, the sweeper) wins otherwise.
    pub(super) async fn commit_resolution(
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
            resource: approval.request.resource.uid(),
            request: RecordedRequest {
                window: grant.as_ref().map(|(grant, _)| grant.clone()),
                ..RecordedRequest::of(&approval.request)
            }
            .to_json(),
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
                let waited_ns = approval.resolved_unix_ns.unwrap_or_default().saturating_sub(approval.created_unix_ns);
                let waited = std::time::Duration::from_nanos(u64::try_from(waited_ns).unwrap_or(0));
                self.metrics.resolved(approval.state.as_str(), waited);
                Ok(*approval)
            }
            Committed::NotPending(current) => Err(not_pending(&current)),
            other => Err(unexpected(other)),
        }
    }

    /// Removes idempotency records older than the replay window (the
    /// sweeper runs it on a task of its own: emptying a slot may take a
    /// while, and approvals must still expire on time meanwhile).
    pub(crate) async fn prune_requests(&self) {
        match self.store.prune_requests(unix_ns(self.now())).await {
            Ok(0) => {}
            Ok(pruned) => tracing::info!(pruned, "idempotency records older than the replay window removed"),
            Err(e) => tracing::error!(error = %e, "cannot prune idempotency records"),
        }
    }

    /// One round of the sweeper, at the monitor's clock: grants and
    /// approvals past their deadline are removed and expired (audited).
    pub(crate) async fn sweep_once(&self) {
        let now = unix_ns(self.now());
        let expired_grants: Vec<Grant> =
            read(&self.grants).all().filter(|g| g.expires_unix_ns <= now).cloned().collect();
        for grant in expired_grants {
            if let Err(e) = self.remove_grant(&grant, "grant.expired", "monitor").await {
                tracing::error!(grant_id = %grant.grant_id, error = %e, "cannot remove an expired grant");
            }
        }
        let due = match self.store.pending_until(now).await {
            Ok(due) => due,
            Err(e) => {
                tracing::error!(error = %e, "cannot read pending approvals");
                return;
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

/// The approval with its final state and the decision the harness gets.
#[allow(clippy::too_many_arguments)]
pub(super) fn finish(
    mut approval: ApprovalRecord,
    state: ApprovalState,
    outcome: Outcome,
    policy_ids: Vec<String>,
    reasons: Vec<String>,
    resolved_by: &str,
    note: &str,
    labels: Vec<String>,
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
        labels,
    };
    approval
}

/// Refuses to approve with a token alone what a policy marked
/// `@approval("passkey")` holds; denying needs no passkey.
fn needs_no_passkey(approval_id: &str, passkey_policies: &[String]) -> Result<(), CallError> {
    if passkey_policies.is_empty() {
        return Ok(());
    }
    let policies = passkey_policies.iter().map(|id| format!("`{id}`")).collect::<Vec<_>>().join(", ");
    Err(CallError::FailedPrecondition(format!(
        "approval `{approval_id}` is held by {policies}, marked @approval(\"passkey\"): only a passkey on the approval page \
         approves it, not a token (denying needs none); nothing was resolved"
    )))
}

pub(super) fn not_pending(approval: &ApprovalRecord) -> CallError {
    let how = match approval.state {
        ApprovalState::Pending => "is still pending".to_owned(),
        ApprovalState::Approved => format!("was already approved by `{}`", approval.resolved_by),
        ApprovalState::Denied => format!("was already denied by `{}`", approval.resolved_by),
        ApprovalState::Expired => format!("expired at {}", format_time(approval.expires_unix_ns)),
    };
    CallError::FailedPrecondition(format!("approval `{}` {how}", approval.approval_id))
}
