//! The shadow policy set (`[policy] shadow_dir`): a second folder loaded
//! beside the live one and decided on every `Authorize` with the same
//! facts, without any effect on the answer. Each pair of outcomes is
//! counted (`warden_shadow_decisions_total{live, shadow}`); when they
//! differ, the shadow's outcome, policies and reasons go into the decision's
//! audit record (`model::ShadowOutcome`), which `wardenctl policy shadow`
//! reads. The folder is watched and reloaded like the live one; a folder
//! that does not load keeps the last good shadow set and shows in the
//! status. Switching it live is an ordinary change of the live folder.

use super::*;
use crate::model::ShadowOutcome;
use crate::policy::PolicyFiles;
use crate::replay::REFUSED;

/// The shadow set and how its folder stands.
#[derive(Default)]
pub(crate) struct ShadowSet {
    /// The set deciding beside the live one (none: no shadow folder, or
    /// none of its loads succeeded yet).
    pub(crate) snapshot: Option<Arc<PolicySnapshot>>,
    /// What `PolicyStatus` shows of it.
    pub(crate) status: ShadowStatus,
}

/// The shadow folder, as `PolicyStatus` reports it.
#[derive(Debug, Clone, Default)]
pub(crate) struct ShadowStatus {
    /// The folder.
    pub(crate) dir: String,
    /// The version deciding in shadow (empty until a load succeeds).
    pub(crate) version: String,
    /// How many policies it has.
    pub(crate) policies: usize,
    /// When it was loaded.
    pub(crate) loaded_at_unix_ns: i64,
    /// The last failed load; empty after a good one.
    pub(crate) error: String,
    /// What that failed load read, so that it is reported once.
    error_content: String,
}

impl Monitor {
    /// What the shadow set answers for a request the live set decided as
    /// `live` (before the cap on waiting approvals, which is not policy):
    /// counted when `count` (once per request, not per try of a request
    /// decided again), returned only when the outcome differs.
    pub(super) fn shadow_decide(
        &self,
        request: &NormalizedRequest,
        facts: &SessionFacts,
        now: OffsetDateTime,
        live: &Evaluation,
        count: bool,
    ) -> Option<ShadowOutcome> {
        let shadow = read(&self.shadow).snapshot.clone()?;
        let (outcome, policy_ids, reasons) = match decide(&shadow, request, facts, now, &self.config.decision) {
            Ok(evaluation) => {
                let reasons = evaluation.recorded_reasons();
                let mut ids = evaluation.policy_ids;
                ids.extend(evaluation.grant_ids);
                (evaluation.outcome.as_str(), ids, reasons)
            }
            Err(invalid) => (REFUSED, vec![], vec![format!("refused as bad input: {invalid}")]),
        };
        if count {
            self.metrics.shadowed(live.outcome.as_str(), outcome);
        }
        (outcome != live.outcome.as_str()).then(|| ShadowOutcome {
            live: live.outcome.as_str().to_owned(),
            outcome: outcome.to_owned(),
            policy_ids,
            reasons,
            policy_version: shadow.version.clone(),
        })
    }

    /// The shadow folder's status, when there is one.
    pub(crate) fn shadow_status(&self) -> Option<ShadowStatus> {
        self.config.shadow_dir.as_ref().map(|_| read(&self.shadow).status.clone())
    }

    /// Loads the shadow folder when what it holds differs from the shadow
    /// set deciding and from the content that last failed (`force`: in any
    /// case, as an admin's reload). A load, good or bad, is audited
    /// (`policy.shadow-reload`, `policy.shadow-reload-failed`). Returns
    /// whether a load was tried and, if so, whether it succeeded.
    pub(crate) async fn reload_shadow(&self, caller: &str, force: bool) -> Result<Option<bool>, CallError> {
        let Some(dir) = self.config.shadow_dir.clone() else { return Ok(None) };
        let _admin = self.admin.lock().await;
        let read_dir = dir.clone();
        let (content, loaded) = tokio::task::spawn_blocking(move || {
            let folder = PolicyFiles::read(&read_dir);
            (super::policies::content_key(&folder), folder.and_then(|files| PolicySnapshot::from_files(&files)))
        })
        .await
        .map_err(|e| CallError::Store(StoreError::BatchFailed(format!("the shadow policy loader failed: {e}"))))?;
        {
            let shadow = read(&self.shadow);
            let same = shadow.snapshot.as_ref().is_some_and(|s| s.version == content);
            if !force && (same || content == shadow.status.error_content) {
                return Ok(None);
            }
        }
        let now = unix_ns(self.now());
        let (kind, reasons, version) = match &loaded {
            Ok(snapshot) => {
                let previous = read(&self.shadow).status.version.clone();
                ("policy.shadow-reload", vec![format!("{previous} -> {}", snapshot.version)], snapshot.version.clone())
            }
            Err(error) => (
                "policy.shadow-reload-failed",
                error.diagnostics.iter().map(ToString::to_string).collect(),
                read(&self.shadow).status.version.clone(),
            ),
        };
        let entry = AuditEntry {
            time_unix_ns: now,
            kind: kind.into(),
            caller: caller.to_owned(),
            resource: dir.display().to_string(),
            reasons,
            policy_version: version,
            ..AuditEntry::default()
        };
        self.store.commit(Commit::record(entry)).await?;
        let mut shadow = write(&self.shadow);
        shadow.status.dir = dir.display().to_string();
        match loaded {
            Ok(snapshot) => {
                tracing::info!(policy_version = %snapshot.version, dir = %dir.display(), "shadow policies loaded");
                shadow.status.version = snapshot.version.clone();
                shadow.status.policies = snapshot.len();
                shadow.status.loaded_at_unix_ns = now;
                shadow.status.error.clear();
                shadow.status.error_content.clear();
                shadow.snapshot = Some(Arc::new(snapshot));
                Ok(Some(true))
            }
            Err(error) => {
                tracing::warn!(error = %error, dir = %dir.display(), "shadow policies did not load; the last good shadow set keeps deciding");
                shadow.status.error = error.to_string();
                shadow.status.error_content = content;
                Ok(Some(false))
            }
        }
    }
}
