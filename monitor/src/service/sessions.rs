//! Sessions: lockdown of sessions, users and agent kinds; what is known of a session and its labels.

use super::approvals::finish;
use super::*;

impl Monitor {
    /// Locks a session, a user or an agent kind: every later request is
    /// denied, and so is every approval now pending for it.
    pub(crate) async fn lock(
        &self,
        caller: &Caller,
        target: LockTarget,
        reason: &str,
    ) -> Result<LockOutcome, CallError> {
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
        for approval in self.store.pending().await? {
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
                vec![],
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
    pub(crate) async fn unlock(&self, caller: &Caller, target: LockTarget) -> Result<LockOutcome, CallError> {
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
    pub(crate) async fn session(&self, query: &SessionQuery) -> Result<SessionView, CallError> {
        let session = &query.session;
        if session.trim().is_empty() {
            return Err(InvalidInput::new("session", "must not be empty").into());
        }
        let mut found: Vec<SessionRecord> = self
            .store
            .sessions_named(session)
            .await?
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
    pub(crate) async fn clear_labels(
        &self,
        caller: &Caller,
        query: &SessionQuery,
        reason: &str,
    ) -> Result<SessionView, CallError> {
        let before = self.session(query).await?;
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
        self.session(&SessionQuery { session: key.session, user: key.user, harness: key.harness }).await
    }
}
