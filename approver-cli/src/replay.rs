//! `wardenctl policy replay` (the recorded decisions a candidate folder
//! would change) and `wardenctl policy shadow` (the decisions the shadow
//! set answered otherwise): both read the audit log, of a running monitor
//! (`TailAudit`, admin token) or of a stopped one's data folder, through
//! `warden_monitor::replay`, and print one report.

use std::path::Path;
use std::process::ExitCode;

use tokio_stream::StreamExt;
use warden_monitor::policy::PolicySnapshot;
use warden_monitor::replay::{ChangeReport, Recorded, Replayer, ShadowScan};
use warden_proto::v1 as pb;

use crate::approvals::safe;
use crate::audit::{Bound, parse_bound};
use crate::cli::LogWindow;
use crate::connection::{Connection, Reopen};
use crate::out::{StdoutError, outln};

/// The window of records asked about.
struct Window {
    since: Bound,
    until: Option<Bound>,
}

impl Window {
    fn parse(since: &str, until: Option<&str>) -> anyhow::Result<Self> {
        Ok(Self { since: parse_bound(since, "--since")?, until: until.map(|u| parse_bound(u, "--until")).transpose()? })
    }
}

/// Feeds every record from `from_seq` up to the window's end to `feed`, with
/// whether it is in the window.
async fn read_log(
    connection: &Connection,
    data: Option<&Path>,
    window: &Window,
    from_start: bool,
    mut feed: impl FnMut(Recorded, bool),
) -> anyhow::Result<()> {
    let start = |first_of_window: u64| if from_start { 1 } else { first_of_window };
    match data {
        Some(data) => {
            let store = warden_monitor::verify::open_stopped(data).map_err(|e| anyhow::anyhow!(e))?;
            let from = start(match window.since {
                Bound::Seq(seq) => seq,
                Bound::UnixNs(t) => store.seq_at_time(t)?,
            });
            for record in store.records(from) {
                let record = Recorded::from(record?);
                if window.until.is_some_and(|u| u.passed(record.seq, record.time_unix_ns)) {
                    break;
                }
                let inside = !window.since.before(record.seq, record.time_unix_ns);
                feed(record, inside);
            }
        }
        None => {
            let mut admin = connection.admin().await?;
            let mut reopen = Reopen::new(connection);
            let mut request = match (from_start, window.since) {
                (false, Bound::UnixNs(t)) => pb::TailAuditRequest { since_unix_ns: t, ..Default::default() },
                (false, Bound::Seq(seq)) => pb::TailAuditRequest { from_seq: seq.max(1), ..Default::default() },
                (true, _) => pb::TailAuditRequest { from_seq: 1, ..Default::default() },
            };
            'replicas: loop {
                let mut stream = admin.tail_audit(request).await?.into_inner();
                let status = loop {
                    match stream.next().await {
                        None => break 'replicas,
                        Some(Ok(record)) => {
                            let record = from_proto(record);
                            if window.until.is_some_and(|u| u.passed(record.seq, record.time_unix_ns)) {
                                break 'replicas;
                            }
                            // On the next replica, from the record after this one.
                            request = pb::TailAuditRequest { from_seq: record.seq + 1, ..Default::default() };
                            reopen.received();
                            let inside = !window.since.before(record.seq, record.time_unix_ns);
                            feed(record, inside);
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
    Ok(())
}

fn from_proto(record: pb::AuditRecord) -> Recorded {
    let outcome = crate::format::proto_outcome_str(record.outcome);
    Recorded {
        seq: record.seq,
        time_unix_ns: crate::format::timestamp_unix_ns(record.time.as_ref()),
        kind: record.kind,
        caller: record.caller,
        user: record.actor.map(|a| a.user).unwrap_or_default(),
        request: record.request,
        outcome: outcome.to_owned(),
        policy_ids: record.policy_ids,
        policy_version: record.policy_version,
        request_id: record.request_id,
    }
}

/// `wardenctl policy replay --policies DIR`: exit 0 when no recorded
/// decision would change, 3 when some would, 4 when none would of those
/// decided again but some could not be decided as they were made.
pub(crate) async fn policy_replay(
    connection: &Connection,
    policies: &Path,
    log: &LogWindow,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let window = Window::parse(&log.since, log.until.as_deref())?;
    let snapshot = PolicySnapshot::load(policies).map_err(|e| anyhow::anyhow!("{}:\n{e}", policies.display()))?;
    let mut replayer = Replayer::new(&policies.display().to_string(), std::sync::Arc::new(snapshot));
    // From the first record kept: the grants of the window's moments were
    // made before it.
    read_log(connection, log.data.as_deref(), &window, true, |record, inside| replayer.feed(record, inside)).await?;
    let report = replayer.finish();
    print(&report, json, Kind::Replay)?;
    Ok(if report.changed > 0 {
        ExitCode::from(3)
    } else if report.incomplete {
        ExitCode::from(4)
    } else {
        ExitCode::SUCCESS
    })
}

/// `wardenctl policy shadow`: exit 0 when the shadow set answered every
/// decision read as the live one did, 3 otherwise.
pub(crate) async fn policy_shadow(connection: &Connection, log: &LogWindow, json: bool) -> anyhow::Result<ExitCode> {
    let window = Window::parse(&log.since, log.until.as_deref())?;
    let mut scan = ShadowScan::new();
    read_log(connection, log.data.as_deref(), &window, false, |record, inside| {
        if inside {
            scan.feed(record);
        }
    })
    .await?;
    let report = scan.finish();
    print(&report, json, Kind::Shadow)?;
    Ok(if report.changed == 0 { ExitCode::SUCCESS } else { ExitCode::from(3) })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Replay,
    Shadow,
}

fn print(report: &ChangeReport, json: bool, kind: Kind) -> Result<(), StdoutError> {
    if json {
        return outln!("{}", serde_json::to_string(report).unwrap_or_default());
    }
    let range = if report.decisions == 0 {
        "no decisions".to_owned()
    } else {
        format!("{} decisions (records {} to {})", report.decisions, report.first_seq, report.last_seq)
    };
    let rate = report.decisions.saturating_mul(1000).checked_div(report.millis).unwrap_or(report.decisions);
    match kind {
        Kind::Replay => outln!(
            "policy replay under {} ({}): {range}, {} would change; {} ms, {rate} decisions/s",
            report.policies,
            report.version,
            report.changed,
            report.millis
        )?,
        Kind::Shadow => outln!(
            "policy shadow: {range}, {} answered otherwise by the shadow set{}",
            report.changed,
            if report.version.is_empty() { String::new() } else { format!(" ({})", report.version) }
        )?,
    }
    if report.decided_by.len() > 1 {
        let versions: Vec<String> = report.decided_by.iter().map(|(v, n)| format!("{v} ({n})")).collect();
        outln!("  decided then by {}", versions.join(", "))?;
    }
    let (then, now) = match kind {
        Kind::Replay => ("was", "now"),
        Kind::Shadow => ("live", "shadow"),
    };
    for group in &report.groups {
        let by = if group.by.is_empty() { "no policy".to_owned() } else { group.by.join(", ") };
        let was = if group.was.is_empty() { "no policy".to_owned() } else { group.was.join(", ") };
        outln!(
            "{} -> {}  {} decision{}  {now} by {}  ({then} by {})",
            group.from,
            group.to,
            group.count,
            if group.count == 1 { "" } else { "s" },
            safe(&by),
            safe(&was)
        )?;
        for example in &group.examples {
            let time = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(example.time_unix_ns))
                .ok()
                .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
                .unwrap_or_default();
            // Every field of a record may come from a harness: shown with
            // its hidden characters escaped, as `audit tail` shows them.
            outln!(
                "  #{} {time} {} {} {}  (request {})",
                example.seq,
                safe(&example.actor),
                safe(&example.action),
                safe(&example.resource),
                safe(&example.request_id)
            )?;
            for reason in &example.reasons {
                outln!("    {}", safe(reason))?;
            }
        }
    }
    for note in &report.notes {
        outln!("note: {note}")?;
    }
    Ok(())
}
