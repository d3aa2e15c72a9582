//! `wardenctl audit`: tail and verify the audit log, online or on a stopped monitor's store.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use tokio_stream::StreamExt;
use warden_proto::v1 as pb;

use crate::approvals;
use crate::connection::*;
use crate::out::{StdoutError, outln};

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
            let report = VerifyReport {
                records: r.records,
                head: Head { seq: r.head_seq, hash: r.head_hash },
                first_bad,
                base: Head::genesis(),
                removed_through: Default::default(),
            };
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
        outln!(
            "{}",
            serde_json::json!({ "ok": ok, "records": report.records, "head_seq": report.head.seq,
                "head_hash": report.head.hash, "problems": problems })
        )?;
    } else if ok {
        let against = saved.map(|c| format!(", and holds checkpoint #{}", c.seq)).unwrap_or_default();
        outln!("ok: {} records, head #{} {}{against}", report.records, report.head.seq, report.head.hash)?;
    } else {
        for problem in &problems {
            outln!("{problem}")?;
        }
        outln!("  the chain verifies up to #{} {}", report.head.seq, report.head.hash)?;
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
    let mut reopen = Reopen::new(connection);
    let mut request = pb::TailAuditRequest { count, all, follow, ..Default::default() };
    loop {
        let mut stream = admin.tail_audit(request).await?.into_inner();
        let mut last = None;
        let status = loop {
            match stream.next().await {
                None => return Ok(ExitCode::SUCCESS),
                Some(Ok(record)) => {
                    if json {
                        outln!("{}", audit_json(&record))?;
                    } else {
                        outln!("{}", audit_line(&record))?;
                    }
                    last = Some(record.seq);
                    reopen.received();
                }
                Some(Err(status)) => break status,
            }
        };
        if !reopen.after(&status) {
            return Err(status.into());
        }
        // On the next replica, from the record after the last one received.
        if let Some(seq) = last {
            request = pb::TailAuditRequest { from_seq: seq + 1, follow, ..Default::default() };
        }
    }
}

/// Where an export starts or ends: a record's seq, or a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bound {
    Seq(u64),
    UnixNs(i64),
}

pub(crate) fn parse_bound(text: &str, flag: &str) -> anyhow::Result<Bound> {
    if let Ok(seq) = text.parse::<u64>() {
        return Ok(Bound::Seq(seq));
    }
    let time = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).map_err(|_| {
        anyhow::anyhow!("{flag} `{text}` is neither a sequence number nor an RFC 3339 time (2026-12-01T09:00:00Z)")
    })?;
    Ok(Bound::UnixNs(i64::try_from(time.unix_timestamp_nanos()).unwrap_or(i64::MAX)))
}

impl Bound {
    /// Whether `seq` at `unix_ns` is past this bound (as an end).
    pub(crate) fn passed(self, seq: u64, unix_ns: i64) -> bool {
        match self {
            Bound::Seq(last) => seq > last,
            Bound::UnixNs(last) => unix_ns > last,
        }
    }

    /// Whether `seq` at `unix_ns` comes before this bound (as a start).
    pub(crate) fn before(self, seq: u64, unix_ns: i64) -> bool {
        match self {
            Bound::Seq(first) => seq < first,
            Bound::UnixNs(first) => unix_ns < first,
        }
    }
}

/// `wardenctl audit export`: JSON lines, online (TailAudit from the start)
/// or offline (the stopped store's log), the same schema either way.
pub(crate) async fn audit_export(
    connection: &Connection,
    since: &str,
    until: Option<&str>,
    follow: bool,
    data: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    use std::io::Write as _;
    let since = parse_bound(since, "--since")?;
    let until = until.map(|u| parse_bound(u, "--until")).transpose()?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    // A follower's lines are written as they come.
    let mut write = |value: serde_json::Value, now: bool| -> Result<(), StdoutError> {
        writeln!(out, "{value}")?;
        if now {
            out.flush()?;
        }
        Ok(())
    };
    match data {
        Some(data) => {
            let store = warden_monitor::verify::open_stopped(&data).map_err(|e| anyhow::anyhow!(e))?;
            let from = match since {
                Bound::Seq(seq) => seq,
                Bound::UnixNs(t) => store.seq_at_time(t)?,
            };
            for record in store.records(from) {
                let record = export_json(serde_json::to_value(record?)?);
                if until.is_some_and(|u| u.passed(seq_of(&record), time_of(&record))) {
                    break;
                }
                write(record, false)?;
            }
        }
        None => {
            let mut admin = connection.admin().await?;
            let mut reopen = Reopen::new(connection);
            let mut request = match since {
                Bound::Seq(seq) => pb::TailAuditRequest { from_seq: seq.max(1), follow, ..Default::default() },
                Bound::UnixNs(t) => pb::TailAuditRequest { since_unix_ns: t, follow, ..Default::default() },
            };
            'replicas: loop {
                let mut stream = admin.tail_audit(request).await?.into_inner();
                let status = loop {
                    match stream.next().await {
                        None => break 'replicas,
                        Some(Ok(record)) => {
                            let next = record.seq + 1;
                            let record = export_json(proto_value(&record));
                            if until.is_some_and(|u| u.passed(seq_of(&record), time_of(&record))) {
                                break 'replicas;
                            }
                            write(record, follow)?;
                            // On the next replica, from the record after this one.
                            request = pb::TailAuditRequest { from_seq: next, follow, ..Default::default() };
                            reopen.received();
                        }
                        Some(Err(status)) => break status,
                    }
                };
                if !reopen.after(&status) {
                    return Err(status.into());
                }
            }
        }
    }
    // What is still buffered: a failure here is as much a failure as one
    // above (the BufWriter's drop would swallow it).
    out.flush().map_err(StdoutError::from)?;
    Ok(ExitCode::SUCCESS)
}

fn seq_of(record: &serde_json::Value) -> u64 {
    record["seq"].as_u64().unwrap_or(0)
}

fn time_of(record: &serde_json::Value) -> i64 {
    record["time_unix_ns"].as_i64().unwrap_or(0)
}

/// A record from the monitor in the stored record's shape.
fn proto_value(record: &pb::AuditRecord) -> serde_json::Value {
    let time_unix_ns = crate::format::timestamp_unix_ns(record.time.as_ref());
    let outcome = crate::format::proto_outcome_str(record.outcome);
    let actor = record.actor.as_ref();
    serde_json::json!({
        "seq": record.seq,
        "time_unix_ns": time_unix_ns,
        "kind": record.kind,
        "caller": record.caller,
        "actor": {
            "user": actor.map(|a| a.user.as_str()).unwrap_or_default(),
            "agent": actor.map(|a| a.agent.as_str()).unwrap_or_default(),
            "session": actor.map(|a| a.session.as_str()).unwrap_or_default(),
        },
        "action": record.action,
        "resource": record.resource,
        "request": record.request,
        "outcome": outcome,
        "policy_ids": record.policy_ids,
        "reasons": record.reasons,
        "policy_version": record.policy_version,
        "request_id": record.request_id,
        "approval_id": record.approval_id,
        "prev_hash": record.prev_hash,
        "hash": record.hash,
    })
}

/// The export schema (README "Audit export"): the stored record's fields,
/// with `time` (RFC 3339, UTC, nanoseconds) beside `time_unix_ns`, `actor`
/// null when the record is not about a request, and `request` as the JSON
/// object it holds (null when empty). Every field the hash covers is there,
/// so a SIEM can recompute the chain.
fn export_json(mut record: serde_json::Value) -> serde_json::Value {
    let Some(object) = record.as_object_mut() else { return record };
    let unix_ns = object.get("time_unix_ns").and_then(serde_json::Value::as_i64).unwrap_or(0);
    let time = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_ns))
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_default();
    object.insert("time".into(), time.into());
    let no_actor = object.get("actor").and_then(|a| a.get("user")).and_then(serde_json::Value::as_str) == Some("");
    if no_actor {
        object.insert("actor".into(), serde_json::Value::Null);
    }
    let request = match object.get("request").and_then(serde_json::Value::as_str) {
        Some("") | None => serde_json::Value::Null,
        Some(text) => serde_json::from_str(text).unwrap_or_else(|_| text.into()),
    };
    object.insert("request".into(), request);
    record
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

/// A record as `--json` prints it: the export schema (README "Audit export").
pub(crate) fn audit_json(record: &pb::AuditRecord) -> serde_json::Value {
    export_json(proto_value(record))
}
