//! Policies: what-if explanations, status, and reloading the folder.

use super::*;

impl Monitor {
    /// What-if: the decision and every policy's part in it, for the
    /// policies, grants, labels and locks of this moment. Nothing is recorded.
    pub(crate) fn explain(
        &self,
        input: &RequestInput,
    ) -> Result<(Evaluation, Vec<crate::decision::PolicyTrace>), CallError> {
        let request = normalize(input)?;
        let (snapshot, facts) = self.facts(&request.actor, "explain")?;
        Ok(crate::decision::explain(&snapshot, &request, &facts, self.now(), &self.config.decision)?)
    }

    /// How the policies stand.
    pub(crate) fn policy_status(&self) -> PolicyStatusView {
        read(&self.status).clone()
    }

    /// Loads the policy folder again. A good load is swapped in whole (with
    /// the grants compiled against it); a bad one leaves the last good set
    /// serving and is reported in the status, the log and the audit log.
    /// Returns whether the new set loaded, and the status.
    pub(crate) async fn reload(&self, caller: &str) -> Result<(bool, PolicyStatusView), CallError> {
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
                self.metrics.reloaded(if changed { "loaded" } else { "unchanged" });
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
                self.metrics.reloaded("failed");
                Ok((false, status))
            }
        }
    }
}

/// The status of a freshly loaded snapshot, with what the team should know.
pub(super) fn status_of(
    snapshot: &PolicySnapshot,
    now: i64,
    grant_problems: &[(String, InvalidInput)],
) -> PolicyStatusView {
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
