//! `wardenctl audit`: tail and verify the audit log, online or on a stopped monitor's store.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use tokio_stream::StreamExt;
use warden_proto::v1 as pb;

use crate::approvals;
use crate::connection::*;

pub(crate) async fn audit_verify(
    connection: &Connection,
    data: Option<PathBuf>,
    checkpoint: Option<PathBuf>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    use warden_monitor::store::{Head, VerifyReport};
    let saved = match &checkpoint {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let line = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
            let checkpoint: warden_monitor::checkpoint::Checkpoint =
                serde_json::from_str(line).with_context(|| format!("{} holds no checkpoint", path.display()))?;
            Some(checkpoint)
        }
        None => None,
    };
    // The report, the monitor's public key, and the hash stored at the checkpoint's record.
    let (report, public_key, hash_at) = match data {
        Some(data) => {
            let offline = warden_monitor::verify::verify_offline(&data, saved.as_ref().map(|c| c.seq))
                .map_err(|e| anyhow::anyhow!(e))?;
            (offline.report, offline.public_key, offline.hash_at)
        }
        None => {
            let mut admin = connection.admin().await?;
            let r = admin.verify_audit(pb::VerifyAuditRequest {}).await?.into_inner();
            let hash_at = match &saved {
                Some(c) if c.seq > 0 => {
                    let mut stream =
                        admin.tail_audit(pb::TailAuditRequest { all: true, ..Default::default() }).await?.into_inner();
                    let mut found = None;
                    while let Some(record) = stream.next().await {
                        let record = record?;
                        if record.seq == c.seq {
                            found = Some(record.hash);
                            break;
                        }
                    }
                    found
                }
                _ => None,
            };
            let first_bad = (!r.ok).then(|| (r.first_bad_seq, r.error.clone()));
            let report =
                VerifyReport { records: r.records, head: Head { seq: r.head_seq, hash: r.head_hash }, first_bad };
            (report, r.checkpoint.map(|c| c.public_key), hash_at)
        }
    };
    let mut ok = report.ok();
    let mut problems: Vec<String> =
        report.first_bad.iter().map(|(seq, e)| format!("BROKEN at record #{seq}: {e}")).collect();
    if let Some(saved) = &saved {
        if public_key.as_deref().is_some_and(|k| k != saved.public_key) {
            problems.push("the checkpoint was signed by another key than this monitor's".into());
        }
        if let Err(e) = warden_monitor::checkpoint::check_log(saved, &report, hash_at) {
            problems.push(format!("CHECKPOINT FAILS: {e}"));
        }
        ok &= problems.is_empty();
    }
    if json {
        println!(
            "{}",
            serde_json::json!({ "ok": ok, "records": report.records, "head_seq": report.head.seq,
                "head_hash": report.head.hash, "problems": problems })
        );
    } else if ok {
        let against = saved.map(|c| format!(", and holds checkpoint #{}", c.seq)).unwrap_or_default();
        println!("ok: {} records, head #{} {}{against}", report.records, report.head.seq, report.head.hash);
    } else {
        for problem in &problems {
            println!("{problem}");
        }
        println!("  the chain verifies up to #{} {}", report.head.seq, report.head.hash);
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

pub(crate) async fn audit_tail(
    connection: &Connection,
    count: u32,
    all: bool,
    follow: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut admin = connection.admin().await?;
    let mut stream = admin.tail_audit(pb::TailAuditRequest { count, all, follow }).await?.into_inner();
    while let Some(record) = stream.next().await {
        let record = record?;
        if json {
            println!("{}", audit_json(&record));
        } else {
            println!("{}", audit_line(&record));
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn audit_line(record: &pb::AuditRecord) -> String {
    let actor = record.actor.as_ref().map(|a| format!("{}/{}/{}", a.user, a.agent, a.session)).unwrap_or_default();
    let mut line = format!(
        "#{:<6} {} {:<8} {:<7} {} {} {} by {}",
        record.seq,
        crate::format::timestamp_str(record.time.as_ref()),
        record.kind,
        crate::format::proto_outcome_str(record.outcome),
        actor,
        record.action,
        record.resource,
        record.caller
    );
    if !record.policy_ids.is_empty() {
        line.push_str(&format!(" [{}]", record.policy_ids.join(", ")));
    }
    // Everything in a record may come from a harness: no escape sequence or
    // direction override reaches the terminal.
    approvals::safe(&line)
}

pub(crate) fn audit_json(record: &pb::AuditRecord) -> serde_json::Value {
    serde_json::json!({
        "seq": record.seq,
        "time": crate::format::timestamp_str(record.time.as_ref()),
        "kind": record.kind,
        "caller": record.caller,
        "actor": record.actor.as_ref().map(|a| serde_json::json!({"user": a.user, "agent": a.agent, "session": a.session})),
        "action": record.action,
        "resource": record.resource,
        "outcome": crate::format::proto_outcome_str(record.outcome),
        "policy_ids": record.policy_ids,
        "reasons": record.reasons,
        "policy_version": record.policy_version,
        "request_id": record.request_id,
        "approval_id": record.approval_id,
        "prev_hash": record.prev_hash,
        "hash": record.hash,
    })
}
