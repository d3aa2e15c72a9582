//! `wardenctl policy diff OLD NEW`: what a change of the policy folder
//! newly permits or forbids, proved (`warden_monitor::analysis`), printed
//! for people or as one JSON object.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use warden_monitor::analysis::{DiffReport, Finding, Folder, Reproduced, Solver, Under, Verdict, diff};
use warden_monitor::policy::PolicySnapshot;

use crate::out::{StdoutError, outln};

/// The running monitor's policy set written into a folder of its own (0700,
/// under the temporary folder, kept so that the `wardenctl authorize
/// --explain --policies` lines of the report work): OLD for `--running`.
pub(crate) async fn running_set(connection: &crate::connection::Connection) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt as _;
    let files =
        connection.admin().await?.get_policy_files(warden_proto::v1::GetPolicyFilesRequest {}).await?.into_inner();
    let name = format!("wardenctl-running-{}-{}", files.policy_version.replace(':', "-"), std::process::id());
    let dir = std::env::temp_dir().join(name);
    std::fs::DirBuilder::new().mode(0o700).create(&dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    let texts: Vec<(String, String)> = files.files.into_iter().map(|f| (f.name, f.text)).collect();
    warden_monitor::policy::write_files(&dir, &texts).map_err(|e| anyhow::anyhow!("the running monitor's set: {e}"))?;
    let written = PolicySnapshot::load(&dir).map_err(|e| anyhow::anyhow!("{}:\n{e}", dir.display()))?;
    anyhow::ensure!(
        written.version == files.policy_version,
        "the running monitor's set, written to {}, reads as version {} instead of {}",
        dir.display(),
        written.version,
        files.policy_version
    );
    eprintln!("OLD: the running monitor's set {}, written to {}", files.policy_version, dir.display());
    Ok(dir)
}

pub(crate) async fn policy_diff(old: &Path, new: &Path, timeout: &str, json: bool) -> anyhow::Result<ExitCode> {
    let limit = warden_monitor::duration::parse_duration(timeout)?;
    let load = |dir: &Path| PolicySnapshot::load(dir).map_err(|e| anyhow::anyhow!("{}:\n{e}", dir.display()));
    let (old_set, new_set) = (load(old)?, load(new)?);
    let mut solver = Solver::new(limit).map_err(|e| anyhow::anyhow!("{e}"))?;
    let report = diff(
        &Folder { name: old.display().to_string(), snapshot: &old_set },
        &Folder { name: new.display().to_string(), snapshot: &new_set },
        &mut solver,
    )
    .await;
    if json {
        outln!("{}", serde_json::to_string(&report)?)?;
    } else {
        print(&report)?;
    }
    Ok(if report.equivalent() {
        ExitCode::SUCCESS
    } else if report.differs() {
        ExitCode::from(3)
    } else {
        ExitCode::from(4)
    })
}

fn print(report: &DiffReport) -> Result<(), StdoutError> {
    let envs = report.envs.len();
    outln!(
        "policy diff {} ({}) -> {} ({}): {envs} kinds of request, {} ms",
        report.old,
        report.old_version,
        report.new,
        report.new_version,
        report.millis
    )?;
    if !report.entity_changes.is_empty() {
        outln!("entities.json changed (the proofs below take NEW's users and groups):")?;
        for line in &report.entity_changes {
            outln!("  {line}")?;
        }
    }
    for env in &report.envs {
        let verdict = match env.verdict {
            Verdict::Equivalent => "equivalent (proved)".to_owned(),
            other => other.as_str().to_uppercase(),
        };
        outln!("{} on {} by {}: {verdict}", env.action, env.resource, env.principal)?;
        for finding in &env.findings {
            print_finding(finding)?;
        }
        for why in &env.unknown {
            outln!("  unknown: {why}")?;
        }
    }
    let (permits, forbids, unknown) = report.envs.iter().fold((0, 0, 0), |(p, f, u), e| match e.verdict {
        Verdict::NewlyPermits => (p + 1, f, u),
        Verdict::NewlyForbids => (p, f + 1, u),
        Verdict::Both => (p + 1, f + 1, u),
        Verdict::Unknown => (p, f, u + 1),
        _ => (p, f, u),
    });
    outln!(
        "{}",
        if report.equivalent() {
            "NEW decides every request as OLD does (proved)".to_owned()
        } else {
            format!("{permits} kinds of request newly permitted, {forbids} newly forbidden, {unknown} unknown")
        }
    )?;
    Ok(())
}

fn print_finding(finding: &Finding) -> Result<(), StdoutError> {
    let under = match finding.under {
        Under::NoGrant => "",
        Under::Grant => " under a grant",
    };
    let policies = |p: &[String]| if p.is_empty() { "no policy".to_owned() } else { p.join(", ") };
    outln!(
        "  {} -> {}{under}: OLD by {}, NEW by {}",
        finding.old.outcome.as_str(),
        finding.new.outcome.as_str(),
        policies(&finding.old.policies),
        policies(&finding.new.policies)
    )?;
    let e = &finding.example;
    let labels = if e.labels.is_empty() { String::new() } else { format!(", labels {}", e.labels.join(", ")) };
    outln!("    user {}, agent {}, session {}{labels}: {} {}", e.user, e.agent, e.session, e.action, e.resource)?;
    for (name, value) in &e.attributes {
        outln!("      {name} = {value}")?;
    }
    for (name, value) in &e.context {
        outln!("      context.{name} = {value}")?;
    }
    for line in &e.entities {
        outln!("      {line}")?;
    }
    match &finding.reproduced {
        Reproduced::Yes => outln!("    reproduced by Warden's decide with both folders:")?,
        Reproduced::No { old, new } => {
            outln!("    NOT reproduced: Warden's decide says {old} -> {new} for the request below")?
        }
        Reproduced::NotTried { why } => outln!("    not run through Warden's decide: {why}")?,
    }
    for line in [&finding.run_old, &finding.run_new].into_iter().flatten() {
        outln!("      {line}")?;
    }
    Ok(())
}
