//! `wardenctl policy`: check, test and format a policy folder; the monitor's policy status.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use warden_proto::v1 as pb;

use crate::format::*;
use crate::out::{StdoutError, outln};

pub(crate) fn print_status(status: &pb::PolicyStatusResponse, json: bool) -> Result<(), StdoutError> {
    if json {
        outln!(
            "{}",
            serde_json::json!({ "policy_version": status.policy_version, "loaded_at": timestamp_str(status.loaded_at.as_ref()),
                "files": status.files, "policies": status.policies, "error": status.error,
                "error_at": timestamp_str(status.error_at.as_ref()), "warnings": status.warnings,
                "replicas": status.replicas.iter().map(|r| serde_json::json!({ "replica": r.replica,
                    "policy_version": r.policy_version, "loaded_at": timestamp_str(r.loaded_at.as_ref()),
                    "seen_at": timestamp_str(r.seen_at.as_ref()), "started_at": timestamp_str(r.started_at.as_ref()),
                    "error": r.error, "answering": r.answering })).collect::<Vec<_>>(),
                "shadow": status.shadow.as_ref().map(|s| serde_json::json!({ "dir": s.dir,
                    "policy_version": s.policy_version, "loaded_at": timestamp_str(s.loaded_at.as_ref()),
                    "policies": s.policies, "error": s.error })) })
        )?;
        return Ok(());
    }
    outln!(
        "policy version {}  ({} policies, loaded {})",
        status.policy_version,
        status.policies,
        timestamp_str(status.loaded_at.as_ref())
    )?;
    outln!("  files: {}", status.files.join(", "))?;
    for warning in &status.warnings {
        outln!("  warning: {warning}")?;
    }
    if !status.error.is_empty() {
        outln!("  LAST RELOAD FAILED ({}), the version above keeps serving:", timestamp_str(status.error_at.as_ref()))?;
        for line in status.error.lines() {
            outln!("    {line}")?;
        }
    }
    if let Some(shadow) = &status.shadow {
        if shadow.policy_version.is_empty() {
            outln!("  shadow {}: NOT LOADED, nothing decides in shadow", shadow.dir)?;
        } else {
            outln!(
                "  shadow {}: version {}  ({} policies, loaded {})",
                shadow.dir,
                shadow.policy_version,
                shadow.policies,
                timestamp_str(shadow.loaded_at.as_ref())
            )?;
        }
        if !shadow.error.is_empty() {
            outln!("    LAST SHADOW LOAD FAILED:")?;
            for line in shadow.error.lines() {
                outln!("      {line}")?;
            }
        }
    }
    if !status.replicas.is_empty() {
        let versions: std::collections::BTreeSet<&str> =
            status.replicas.iter().map(|r| r.policy_version.as_str()).collect();
        if versions.len() > 1 {
            outln!("  MONITORS SERVE DIFFERENT POLICIES ({} versions):", versions.len())?;
        } else {
            outln!("  monitors on the shared store:")?;
        }
        for r in &status.replicas {
            let this = if r.answering { "  (this one)" } else { "" };
            outln!(
                "    {}  version {}  loaded {}  seen {}{this}",
                r.replica,
                r.policy_version,
                timestamp_str(r.loaded_at.as_ref()),
                timestamp_str(r.seen_at.as_ref())
            )?;
            if !r.error.is_empty() {
                outln!("      last reload failed: {}", r.error.lines().next().unwrap_or_default())?;
            }
        }
    }
    Ok(())
}

pub(crate) fn policy_test(dir: &std::path::Path, json: bool) -> anyhow::Result<ExitCode> {
    use warden_monitor::policytest::{load_suites, run_suite};
    let snapshot = match warden_monitor::policy::PolicySnapshot::load(dir) {
        Ok(snapshot) => snapshot,
        Err(error) => {
            for diagnostic in &error.diagnostics {
                eprintln!("error: {}", diagnostic.render());
            }
            anyhow::bail!("{} does not load, so its tests cannot run", dir.display());
        }
    };
    let suites = load_suites(&dir.join("tests"))?;
    let config = warden_monitor::decision::DecisionConfig::default();
    let (mut passed, mut failed) = (0, 0);
    let mut report = Vec::new();
    for (path, suite) in &suites {
        let results = run_suite(&snapshot, suite, &config);
        let suite_failed = results.iter().filter(|r| !r.passed()).count();
        passed += results.len() - suite_failed;
        failed += suite_failed;
        if json {
            let cases: Vec<serde_json::Value> = results
                .iter()
                .map(|r| serde_json::json!({ "name": r.name, "passed": r.passed(), "failures": r.failures, "actual": r.actual }))
                .collect();
            report
                .push(serde_json::json!({ "suite": suite.suite, "file": path.display().to_string(), "cases": cases }));
            continue;
        }
        for result in results.iter().filter(|r| !r.passed()) {
            outln!("FAIL {} / {}", suite.suite, result.name)?;
            for failure in &result.failures {
                outln!("     {failure}")?;
            }
            outln!("     got: {}", result.actual)?;
        }
        outln!("{}: {} passed, {suite_failed} failed", suite.suite, results.len() - suite_failed)?;
    }
    if json {
        outln!("{}", serde_json::json!({ "passed": passed, "failed": failed, "suites": report }))?;
    } else {
        outln!("{passed} passed, {failed} failed")?;
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

pub(crate) fn policy_fmt(dir: &std::path::Path, check: bool) -> anyhow::Result<ExitCode> {
    let config = cedar_policy_formatter::Config { line_width: 100, indent_width: 2 };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "cedar"))
        .collect();
    paths.sort();
    let mut unformatted = 0;
    for path in paths {
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let pretty = cedar_policy_formatter::policies_str_to_pretty(&text, &config)
            .map_err(|e| anyhow::anyhow!("{}: {e:?}", path.display()))?;
        if pretty != text {
            unformatted += 1;
            if check {
                outln!("not formatted: {}", path.display())?;
            } else {
                std::fs::write(&path, pretty).with_context(|| format!("writing {}", path.display()))?;
                outln!("formatted {}", path.display())?;
            }
        }
    }
    Ok(if check && unformatted > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

pub(crate) async fn policy_check(dir: &std::path::Path, required: bool, json: bool) -> anyhow::Result<ExitCode> {
    use warden_monitor::analysis::{Proof, Solver, prove_invariants};
    use warden_monitor::policy::PolicySnapshot;
    match PolicySnapshot::load(dir) {
        Ok(snapshot) => {
            let summary = snapshot.summary();
            // The invariants, proved as the monitor proves them on a load.
            let (proofs, unproved) = if snapshot.invariants.is_empty() {
                (vec![], None)
            } else {
                match Solver::new(std::time::Duration::from_secs(10)) {
                    Ok(mut solver) => {
                        (prove_invariants(&snapshot, &dir.display().to_string(), &mut solver).await, None)
                    }
                    Err(why) => (vec![], Some(why)),
                }
            };
            let proved = proofs.iter().all(|p| p.holds()) && (unproved.is_none() || !required);
            if json {
                let warnings: Vec<String> = snapshot.warnings.iter().map(ToString::to_string).collect();
                outln!(
                    "{}",
                    serde_json::json!({
                        "ok": true,
                        "policy_version": snapshot.version,
                        "files": snapshot.files,
                        "policies": summary.policies,
                        "permits": summary.permits,
                        "forbids": summary.forbids,
                        "by_action": summary.by_action,
                        "missing_reason": summary.missing_reason,
                        "warnings": warnings,
                        "invariants": proofs,
                        "invariants_not_proved": unproved,
                    })
                )?;
            } else {
                for warning in &snapshot.warnings {
                    outln!("warning: {}", warning.render())?;
                }
                outln!(
                    "{}: {} policies ({} permit, {} forbid) in {} files, version {}",
                    dir.display(),
                    summary.policies,
                    summary.permits,
                    summary.forbids,
                    snapshot.files.len(),
                    snapshot.version
                )?;
                for (action, count) in &summary.by_action {
                    outln!("  {action}: {count}")?;
                }
                if !summary.missing_reason.is_empty() {
                    outln!("  without @reason: {}", summary.missing_reason.join(", "))?;
                }
                if let Some(why) = &unproved {
                    outln!("{} invariants NOT PROVED: {why}", snapshot.invariants.len())?;
                }
                for proof in &proofs {
                    outln!("{} ({} ms)", proof.summary(), proof.millis)?;
                    if let Proof::Broken { run: Some(run), .. } = &proof.proof {
                        outln!("  {run}")?;
                    }
                }
                if !proofs.is_empty() && proved {
                    let millis: u128 = proofs.iter().map(|p| p.millis).sum();
                    outln!("{} invariants proved in {millis} ms", proofs.len())?;
                }
            }
            Ok(if proved { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        Err(error) => {
            if json {
                let errors: Vec<String> = error.diagnostics.iter().map(ToString::to_string).collect();
                outln!("{}", serde_json::json!({ "ok": false, "errors": errors }))?;
            } else {
                for diagnostic in &error.diagnostics {
                    eprintln!("error: {}", diagnostic.render());
                }
                eprintln!(
                    "{}: {} error(s); the monitor would not load this folder",
                    dir.display(),
                    error.diagnostics.len()
                );
            }
            Ok(ExitCode::FAILURE)
        }
    }
}
