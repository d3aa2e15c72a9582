//! Policies: what-if explanations, status, and reloading the folder.

use super::*;
use crate::policy::{LoadError, PolicyFiles};

impl Monitor {
    /// What-if: the decision and every policy's part in it, for the
    /// policies, grants, labels and locks of this moment. Nothing is recorded.
    pub(crate) async fn explain(
        &self,
        input: &RequestInput,
    ) -> Result<(Evaluation, Vec<crate::decision::PolicyTrace>), CallError> {
        let request = normalize(input)?;
        let (snapshot, facts) = self.facts(&request.actor, "explain").await?;
        Ok(crate::decision::explain(&snapshot, &request, &facts, self.now(), &self.config.decision)?)
    }

    /// The monitors on a shared store seen in the last minute (none on the
    /// embedded store), and which of them is this one.
    pub(crate) async fn replicas(&self) -> Result<Vec<(crate::store::postgres::ReplicaRecord, bool)>, CallError> {
        let crate::store::Store::Postgres(pg) = &self.store else { return Ok(vec![]) };
        let since = unix_ns(self.now()).saturating_sub(60_000_000_000);
        Ok(pg
            .replicas(since)
            .await?
            .into_iter()
            .map(|r| {
                let this = r.replica == pg.replica();
                (r, this)
            })
            .collect())
    }

    /// Adds warnings to the serving set's status (invariants the start
    /// could not prove).
    pub(crate) fn add_policy_warnings(&self, warnings: Vec<String>) {
        write(&self.status).warnings.extend(warnings);
    }

    /// How the policies stand.
    pub(crate) fn policy_status(&self) -> PolicyStatusView {
        PolicyStatusView { shadow: self.shadow_status(), ..read(&self.status).clone() }
    }

    /// Loads the policy folder again (an admin's `ReloadPolicies`). A good
    /// load is swapped in whole (with the grants compiled against it); a bad
    /// one leaves the last good set serving and is reported in the status,
    /// the log and the audit log, every time an admin asks. The shadow
    /// folder, when there is one, is loaded again too. Returns whether the
    /// new set loaded, and the status.
    pub(crate) async fn reload(&self, caller: &str) -> Result<(bool, PolicyStatusView), CallError> {
        let loaded = {
            let _admin = self.admin.lock().await;
            let folder = self.read_policy_folder().await?;
            self.apply_policy_folder(folder, caller).await?.0
        };
        self.reload_shadow(caller, true).await?;
        Ok((loaded, self.policy_status()))
    }

    /// The watcher's reload: the folder is read, and loaded only when what
    /// it holds differs from the set serving and from the content whose load
    /// last failed. So a read of the folder (the loader's own among them)
    /// never reloads, and a broken file left in place is reported once.
    /// Returns whether a load was tried, and if so whether it succeeded.
    pub(crate) async fn reload_if_changed(&self, caller: &str) -> Result<Option<bool>, CallError> {
        let _admin = self.admin.lock().await;
        let folder = self.read_policy_folder().await?;
        let content = content_key(&folder);
        if content == self.snapshot().version {
            // A broken edit undone: the folder holds the set serving again.
            let mut status = write(&self.status);
            if !status.error.is_empty() {
                status.error.clear();
                status.error_at_unix_ns = None;
                status.error_content.clear();
                tracing::info!(policy_version = %status.version, "the policy folder holds the serving set again");
            }
            return Ok(None);
        }
        if content == read(&self.status).error_content {
            return Ok(None);
        }
        let (loaded, _) = self.apply_policy_folder(folder, caller).await?;
        Ok(Some(loaded))
    }

    /// The policy folder's files as they are now, read off the async threads.
    async fn read_policy_folder(&self) -> Result<Result<PolicyFiles, LoadError>, CallError> {
        let dir = self.config.policy_dir.clone();
        tokio::task::spawn_blocking(move || PolicyFiles::read(&dir))
            .await
            .map_err(|e| CallError::Store(StoreError::BatchFailed(format!("the policy loader failed: {e}"))))
    }

    /// Loads what `read_policy_folder` read and reports the result.
    async fn apply_policy_folder(
        &self,
        folder: Result<PolicyFiles, LoadError>,
        caller: &str,
    ) -> Result<(bool, PolicyStatusView), CallError> {
        let content = content_key(&folder);
        let loaded = match folder {
            Ok(files) => tokio::task::spawn_blocking(move || PolicySnapshot::from_files(&files))
                .await
                .map_err(|e| CallError::Store(StoreError::BatchFailed(format!("the policy loader failed: {e}"))))?,
            Err(error) => Err(error),
        };
        // A set that breaks an invariant of its folder is refused like one
        // that does not parse: the last good set keeps serving.
        let mut unproved = vec![];
        let mut broke_invariant = false;
        let loaded = match loaded {
            Ok(snapshot) => match check_invariants(snapshot, &self.config.policy_dir, &self.config.proofs).await {
                Ok((snapshot, warnings)) => {
                    unproved = warnings;
                    Ok(snapshot)
                }
                Err(error) => {
                    broke_invariant = true;
                    Err(error)
                }
            },
            Err(error) => Err(error),
        };
        let now = unix_ns(self.now());
        let previous = self.snapshot();
        match loaded {
            Ok(snapshot) => {
                let grants: Vec<Grant> = read(&self.grants).all().cloned().collect();
                let (book, problems) = GrantBook::load(grants, &snapshot);
                let mut status = status_of(&snapshot, now, &problems);
                status.warnings.extend(unproved);
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
                } else {
                    // The same set: it was loaded when it was first loaded.
                    status.loaded_at_unix_ns = read(&self.status).loaded_at_unix_ns;
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
                    status.error_content = content;
                    status.clone()
                };
                tracing::warn!(error = %message, policy_version = %previous.version, "policy reload failed; the last good policies keep serving");
                self.metrics.reloaded(if broke_invariant { "invariant-broken" } else { "failed" });
                Ok((false, status))
            }
        }
    }
}

/// Proves `snapshot`'s invariants (`analysis::prove_invariants`) before it
/// may serve: `Err` names each one broken or not proved; `Ok` carries a
/// warning when there are invariants and no solver to prove them, unless
/// proofs are required, which makes that an `Err` too.
///
/// A set proved once is not proved again in this process (the version is a
/// hash of every file the proof reads): monitors started in one process,
/// as tests start them, wait for one proof.
///
/// The proof runs on a thread of its own with a large stack (the symbolic
/// compiler recurses over the policies' expressions) and its own runtime;
/// the snapshot goes there and comes back.
pub(crate) async fn check_invariants(
    snapshot: PolicySnapshot,
    dir: &std::path::Path,
    proofs: &crate::config::ProofConfig,
) -> Result<(PolicySnapshot, Vec<String>), LoadError> {
    type Proved = Arc<tokio::sync::OnceCell<Vec<String>>>;
    static PROVED: std::sync::Mutex<Option<HashMap<(String, bool), Proved>>> = std::sync::Mutex::new(None);
    if snapshot.invariants.is_empty() {
        return Ok((snapshot, vec![]));
    }
    let cell = {
        let mut proved = PROVED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (snapshot.version.clone(), proofs.required);
        Arc::clone(proved.get_or_insert_with(HashMap::new).entry(key).or_default())
    };
    let mut snapshot = Some(snapshot);
    let warnings = cell
        .get_or_try_init(|| async {
            let moved = snapshot.take().ok_or_else(|| LoadError::one(proof_failed("no snapshot")))?;
            let (back, result) = prove_on_a_thread(moved, dir.to_owned(), proofs.clone()).await?;
            snapshot = Some(back);
            result
        })
        .await?
        .clone();
    let snapshot = snapshot.ok_or_else(|| LoadError::one(proof_failed("the snapshot was not given back")))?;
    Ok((snapshot, warnings))
}

fn proof_failed(why: &str) -> crate::policy::SourceDiagnostic {
    crate::policy::SourceDiagnostic::whole_file(crate::policy::INVARIANTS_DIR, format!("the proof failed: {why}"))
}

/// The stack of the proving thread.
const PROOF_STACK: usize = 256 << 20;

type Proved = (PolicySnapshot, Result<Vec<String>, LoadError>);

async fn prove_on_a_thread(
    snapshot: PolicySnapshot,
    dir: std::path::PathBuf,
    proofs: crate::config::ProofConfig,
) -> Result<Proved, LoadError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("warden-proofs".into())
        .stack_size(PROOF_STACK)
        .spawn(move || {
            let result = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime.block_on(prove_folder(&snapshot, &dir, &proofs)),
                Err(e) => Err(LoadError::one(proof_failed(&e.to_string()))),
            };
            let _ = tx.send((snapshot, result));
        })
        .map_err(|e| LoadError::one(proof_failed(&e.to_string())))?;
    rx.await.map_err(|_| LoadError::one(proof_failed("the proving thread ended without an answer")))
}

async fn prove_folder(
    snapshot: &PolicySnapshot,
    dir: &std::path::Path,
    proofs: &crate::config::ProofConfig,
) -> Result<Vec<String>, LoadError> {
    use crate::analysis::{Solver, prove_invariants};
    use crate::policy::{INVARIANTS_DIR, SourceDiagnostic};
    let mut solver = match Solver::new(proofs.timeout) {
        Ok(solver) => solver,
        Err(why) if proofs.required => {
            return Err(LoadError::one(SourceDiagnostic::whole_file(
                INVARIANTS_DIR,
                format!("the invariants cannot be proved and [policy] require_proofs is set: {why}"),
            )));
        }
        Err(why) => {
            let warning = format!("{} invariants NOT PROVED: {why}", snapshot.invariants.len());
            tracing::warn!(%warning, "policy invariants");
            return Ok(vec![warning]);
        }
    };
    let started = std::time::Instant::now();
    let proved = prove_invariants(snapshot, &dir.display().to_string(), &mut solver).await;
    let failed: Vec<SourceDiagnostic> =
        proved.iter().filter(|p| !p.holds()).map(|p| SourceDiagnostic::whole_file(&p.file, p.summary())).collect();
    if !failed.is_empty() {
        return Err(LoadError { diagnostics: failed });
    }
    tracing::info!(
        invariants = proved.len(),
        millis = started.elapsed().as_millis() as u64,
        policy_version = %snapshot.version,
        "policy invariants proved"
    );
    Ok(vec![])
}

/// What a read of the policy folder holds, to compare with the set serving
/// (its version) and with the last failed load: the files' version, or the
/// error that kept them from being read.
pub(super) fn content_key(folder: &Result<PolicyFiles, LoadError>) -> String {
    match folder {
        Ok(files) => files.version(),
        Err(error) => format!("unreadable: {error}"),
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
        error_content: String::new(),
        warnings,
        shadow: None,
    }
}
