//! Grants: creating, revoking and listing time-bounded permissions.

use super::*;

impl Monitor {
    pub(super) fn check_ttl(&self, field: &str, seconds: u64) -> Result<(), InvalidInput> {
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
    pub(super) fn compile_grant(
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
            passkey: request.passkey,
        };
        let policy = compile(&grant, snapshot)?;
        Ok((grant, policy))
    }

    /// Creates a grant: its permit applies from the very next request.
    pub(crate) async fn create_grant(&self, created_by: &str, request: GrantRequest) -> Result<Grant, CallError> {
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
    pub(crate) async fn revoke_grant(&self, caller: &str, grant_id: &str) -> Result<Grant, CallError> {
        let grant = read(&self.grants).get(grant_id).cloned();
        let Some(grant) = grant else {
            return Err(CallError::NotFound(format!("grant `{grant_id}` does not exist (or has expired)")));
        };
        self.remove_grant(&grant, "grant.revoked", caller).await?;
        Ok(grant)
    }

    pub(super) async fn remove_grant(&self, grant: &Grant, kind: &str, caller: &str) -> Result<(), CallError> {
        let _admin = self.admin.lock().await;
        if read(&self.grants).get(&grant.grant_id).is_none() {
            return Ok(());
        }
        let snapshot = self.snapshot();
        let entry = grant_entry(grant, kind, caller, vec![], &snapshot);
        // Removed once: on a shared store another monitor's sweeper (or an
        // admin there) may have removed it first; then nothing is recorded.
        let guard = Guard::GrantExists { grant_id: grant.grant_id.clone() };
        let commit =
            Commit { guard, grant: Some(GrantChange::Remove(grant.grant_id.clone())), ..Commit::record(entry) };
        match self.store.commit(commit).await? {
            Committed::New { .. } | Committed::GrantGone => {}
            other => return Err(unexpected(other)),
        }
        write(&self.grants).remove(&grant.grant_id);
        Ok(())
    }

    /// Active grants, optionally of one user or session, soonest expiry first.
    pub(crate) fn list_grants(&self, user: &str, session: &str) -> Vec<(Grant, String)> {
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
}

/// The audit entry of a grant change.
pub(super) fn grant_entry(
    grant: &Grant,
    kind: &str,
    caller: &str,
    reasons: Vec<String>,
    snapshot: &PolicySnapshot,
) -> AuditEntry {
    AuditEntry {
        time_unix_ns: grant.created_unix_ns.max(0),
        kind: kind.into(),
        caller: caller.into(),
        actor: Some(Actor { user: grant.user.clone(), agent: grant.agent.clone(), session: grant.session.clone() }),
        action: grant.actions.join(","),
        resource: grant.resource_scope.clone(),
        // The grant whole: a replay of the log knows the grants of every
        // moment it covers.
        request: serde_json::to_string(&crate::model::RecordedGrant {
            grant_id: grant.grant_id.clone(),
            expires_unix_ns: grant.expires_unix_ns,
            grant: Some(grant.clone()),
        })
        .unwrap_or_default(),
        policy_ids: vec![grant.grant_id.clone()],
        reasons,
        policy_version: snapshot.version.clone(),
        ..AuditEntry::default()
    }
}
