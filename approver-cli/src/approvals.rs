//! `wardenctl approvals`: list, approve, deny, and watch pending approvals in
//! the terminal and as desktop notifications.
//!
//! A notification's buttons resolve exactly the approval it shows, and only
//! if the request still has the hash shown on it: any program on the
//! desktop's session bus can fake a click (an `ActionInvoked` signal), so a
//! click is a gesture, and the authenticated `Resolve` with the approver's
//! token, bound to that approval id and request hash, is what counts.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use notify_rust::{Notification, NotificationHandle, NotificationResponse, Timeout};
use tokio_stream::StreamExt;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use warden_proto::v1 as pb;

/// An Approvals client with the approver's token.
pub type ApprovalsClient = pb::approvals_client::ApprovalsClient<InterceptedService<Channel, crate::MaybeToken>>;

/// Prints the pending approvals.
pub async fn list(mut client: ApprovalsClient, json: bool) -> anyhow::Result<()> {
    let approvals = client.list_pending(pb::ListPendingRequest {}).await?.into_inner().approvals;
    if json {
        for approval in &approvals {
            println!("{}", approval_json(approval));
        }
        return Ok(());
    }
    if approvals.is_empty() {
        println!("nothing is waiting for approval");
        return Ok(());
    }
    println!("{:<42} {:<28} {:<13} {:<9} RESOURCE", "APPROVAL", "USER/AGENT/SESSION", "ACTION", "EXPIRES IN");
    for approval in &approvals {
        let request = approval.request.clone().unwrap_or_default();
        let actor = request.actor.clone().unwrap_or_default();
        println!(
            "{:<42} {:<28} {:<13} {:<9} {}",
            approval.approval_id,
            safe(&format!("{}/{}/{}", actor.user, actor.agent, actor.session)),
            safe(&request.action),
            left(approval.expires_at.as_ref()),
            safe(&approval.resource)
        );
    }
    Ok(())
}

/// Approves or denies one approval and prints how it ended.
pub async fn resolve(mut client: ApprovalsClient, request: pb::ResolveRequest, json: bool) -> anyhow::Result<()> {
    let approval = client.resolve(request).await?.into_inner();
    if json {
        println!("{}", approval_json(&approval));
    } else {
        let decision = approval.decision.clone().unwrap_or_default();
        println!("{} {}", state_str(approval.state), approval.approval_id);
        for reason in &decision.reasons {
            println!("  reason: {}", safe(reason));
        }
        println!("  audit:  #{}", decision.audit_seq);
    }
    Ok(())
}

/// Streams pending approvals to the terminal and, with `notify`, to the
/// desktop (buttons Approve, Approve 15 min, Deny). Runs until the stream ends or the monitor cuts it off.
pub async fn watch(client: ApprovalsClient, notify: bool, json: bool) -> anyhow::Result<()> {
    let mut desktop = if notify { Desktop::connect().await } else { None };
    let mut events = client.clone().watch_pending(pb::WatchPendingRequest {}).await?.into_inner();
    if !json {
        println!("watching for approvals (Ctrl-C to stop)");
    }
    while let Some(event) = events.next().await {
        let event = event.context("the watch ended")?;
        let kind = pb::ApprovalEventKind::try_from(event.kind).unwrap_or(pb::ApprovalEventKind::Unspecified);
        let Some(approval) = event.approval else { continue };
        if json {
            println!("{}", serde_json::json!({ "event": kind_str(kind), "approval": approval_json(&approval) }));
        } else {
            print_event(kind, &approval);
        }
        if let Some(desktop) = desktop.as_mut() {
            match kind {
                pb::ApprovalEventKind::Current | pb::ApprovalEventKind::New => {
                    desktop.show(&approval, client.clone()).await;
                }
                _ => desktop.close(&approval.approval_id).await,
            }
        }
    }
    Ok(())
}

fn print_event(kind: pb::ApprovalEventKind, approval: &pb::Approval) {
    match kind {
        pb::ApprovalEventKind::Current | pb::ApprovalEventKind::New => {
            println!("\nPENDING {}", approval.approval_id);
            for line in describe(approval) {
                println!("  {line}");
            }
            println!("  approve: wardenctl approvals approve {}", approval.approval_id);
            println!("  deny:    wardenctl approvals deny {} --message TEXT", approval.approval_id);
        }
        _ => {
            let by =
                if approval.resolved_by.is_empty() { String::new() } else { format!(" by {}", approval.resolved_by) };
            println!("{}{by} {}", state_str(approval.state), approval.approval_id);
        }
    }
}

/// What an approver needs to know, one line each: who, what, why, which
/// policy, who may answer, until when, and which exact request.
fn describe(approval: &pb::Approval) -> Vec<String> {
    let request = approval.request.clone().unwrap_or_default();
    let actor = request.actor.clone().unwrap_or_default();
    let mut lines = vec![
        format!("{} {}", safe(&request.action), safe(&approval.resource)),
        format!("user {} · agent {} · session {}", safe(&actor.user), safe(&actor.agent), safe(&actor.session)),
    ];
    if !request.justification.is_empty() {
        lines.push(format!("why: {}", safe(&request.justification)));
    }
    for (id, reason) in approval.policy_ids.iter().zip(approval.reasons.iter().chain(std::iter::repeat(&String::new())))
    {
        lines.push(format!("policy {}: {}", safe(id), safe(reason)));
    }
    let approvers =
        if approval.approvers.is_empty() { "any approver".to_owned() } else { approval.approvers.join(", ") };
    lines.push(format!("approvers: {}", safe(&approvers)));
    lines.push(format!(
        "expires: {} (in {})",
        time_str(approval.expires_at.as_ref()),
        left(approval.expires_at.as_ref())
    ));
    lines.push(format!("request: {} from harness {}", short_hash(&approval.request_hash), safe(&approval.harness)));
    lines
}

/// Desktop notifications, one per pending approval.
struct Desktop {
    shown: HashMap<String, Arc<NotificationHandle>>,
}

impl Desktop {
    /// Checks that a notification server answers; says why not otherwise.
    async fn connect() -> Option<Self> {
        let probe = tokio::task::spawn_blocking(notify_rust::get_server_information).await;
        match probe {
            Ok(Ok(info)) => {
                eprintln!("desktop notifications through {} {}", info.name, info.version);
                Some(Self { shown: HashMap::new() })
            }
            Ok(Err(e)) => {
                eprintln!(
                    "wardenctl: no desktop notifications ({e}); is a notification server running on this session's D-Bus \
                     (DBUS_SESSION_BUS_ADDRESS)? Watching in the terminal only."
                );
                None
            }
            Err(e) => {
                eprintln!("wardenctl: no desktop notifications ({e}); watching in the terminal only.");
                None
            }
        }
    }

    async fn show(&mut self, approval: &pb::Approval, client: ApprovalsClient) {
        if self.shown.contains_key(&approval.approval_id) {
            return;
        }
        let request = approval.request.clone().unwrap_or_default();
        let actor = request.actor.clone().unwrap_or_default();
        let summary = format!("Warden: {} wants {}", safe(&actor.user), safe(&request.action));
        let body = describe(approval).join("\n");
        let shown = Notification::new()
            .appname("wardenctl")
            .summary(&summary)
            .body(&body)
            .action(ACTION_APPROVE, "Approve")
            .action(ACTION_APPROVE_WINDOW, "Approve 15 min")
            .action(ACTION_DENY, "Deny")
            .timeout(Timeout::Never)
            .show_async()
            .await;
        let handle = match shown {
            Ok(handle) => Arc::new(handle),
            Err(e) => {
                eprintln!("wardenctl: could not show a notification for {}: {e}", approval.approval_id);
                return;
            }
        };
        self.shown.insert(approval.approval_id.clone(), Arc::clone(&handle));
        let approval_id = approval.approval_id.clone();
        let request_hash = approval.request_hash.clone();
        tokio::spawn(async move {
            let mut clicked = None;
            handle
                .wait_for_action_async(|response| {
                    if let NotificationResponse::Action(key) = response {
                        clicked = Some(key.clone());
                    }
                })
                .await;
            let (approve, grant_for_seconds, note) = match clicked.as_deref() {
                Some(ACTION_APPROVE) => (true, 0, "approved from the desktop"),
                Some(ACTION_APPROVE_WINDOW) => (true, WINDOW.as_secs(), "approved for 15 minutes from the desktop"),
                Some(ACTION_DENY) => (false, 0, "denied from the desktop"),
                _ => return,
            };
            let request = pb::ResolveRequest {
                approval_id: approval_id.clone(),
                approve,
                note: note.into(),
                grant_for_seconds,
                grant_scope: String::new(),
                // Bound to the request shown: a different one is not resolved.
                request_hash,
            };
            match client.clone().resolve(request).await {
                Ok(resolved) => {
                    let resolved = resolved.into_inner();
                    println!("{} {} (from the desktop)", state_str(resolved.state), resolved.approval_id);
                }
                Err(status) => eprintln!("wardenctl: resolving {approval_id} failed: {}", status.message()),
            }
        });
    }

    async fn close(&mut self, approval_id: &str) {
        if let Some(handle) = self.shown.remove(approval_id) {
            handle.close_async().await;
        }
    }
}

const ACTION_APPROVE: &str = "approve";
/// Approve, and let the same action on the same resource through for
/// [`WINDOW`] in this session without asking again.
const ACTION_APPROVE_WINDOW: &str = "approve-15m";
const WINDOW: Duration = Duration::from_secs(15 * 60);
const ACTION_DENY: &str = "deny";

fn kind_str(kind: pb::ApprovalEventKind) -> &'static str {
    match kind {
        pb::ApprovalEventKind::Current => "current",
        pb::ApprovalEventKind::New => "new",
        pb::ApprovalEventKind::Resolved => "resolved",
        pb::ApprovalEventKind::Expired => "expired",
        pb::ApprovalEventKind::Unspecified => "unspecified",
    }
}

fn state_str(state: i32) -> &'static str {
    match pb::ApprovalState::try_from(state) {
        Ok(pb::ApprovalState::Pending) => "PENDING",
        Ok(pb::ApprovalState::Approved) => "APPROVED",
        Ok(pb::ApprovalState::Denied) => "DENIED",
        Ok(pb::ApprovalState::Expired) => "EXPIRED",
        _ => "UNKNOWN",
    }
}

fn approval_json(approval: &pb::Approval) -> serde_json::Value {
    let request = approval.request.clone().unwrap_or_default();
    let actor = request.actor.clone().unwrap_or_default();
    let decision = approval.decision.clone().unwrap_or_default();
    serde_json::json!({
        "approval_id": approval.approval_id,
        "state": state_str(approval.state),
        "user": actor.user,
        "agent": actor.agent,
        "session": actor.session,
        "action": request.action,
        "resource": approval.resource,
        "justification": request.justification,
        "policy_ids": approval.policy_ids,
        "reasons": approval.reasons,
        "approvers": approval.approvers,
        "harness": approval.harness,
        "request_hash": approval.request_hash,
        "created_at": time_str(approval.created_at.as_ref()),
        "expires_at": time_str(approval.expires_at.as_ref()),
        "resolved_by": approval.resolved_by,
        "note": approval.note,
        "outcome": match pb::Outcome::try_from(decision.outcome) {
            Ok(pb::Outcome::Allow) => "ALLOW",
            Ok(pb::Outcome::Deny) => "DENY",
            Ok(pb::Outcome::Pending) => "PENDING",
            _ => "",
        },
        "audit_seq": decision.audit_seq,
    })
}

fn system_time(t: Option<&prost_types::Timestamp>) -> Option<SystemTime> {
    let t = t?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::new(u64::try_from(t.seconds).ok()?, u32::try_from(t.nanos).ok()?))
}

fn time_str(t: Option<&prost_types::Timestamp>) -> String {
    system_time(t)
        .map(time::OffsetDateTime::from)
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_default()
}

fn left(t: Option<&prost_types::Timestamp>) -> String {
    match system_time(t).and_then(|at| at.duration_since(SystemTime::now()).ok()) {
        Some(left) => warden_monitor::duration::format_duration(Duration::from_secs(left.as_secs())),
        None => "expired".to_owned(),
    }
}

fn short_hash(hash: &str) -> String {
    hash.get(..12).unwrap_or(hash).to_owned()
}

/// Text from the request, made safe for a terminal and a notification: no
/// control characters (escape sequences), no characters that reorder what
/// follows them (bidi embeddings, overrides and isolates, which can make
/// `rm -rf /` read as something else), no markup. Each is shown escaped.
pub fn safe(text: &str) -> String {
    text.chars()
        .flat_map(|c| match c {
            '<' => vec!['‹'],
            '>' => vec!['›'],
            '&' => vec!['+'],
            c if c.is_control() || reorders(c) => c.escape_unicode().collect(),
            c => vec![c],
        })
        .collect()
}

/// The bidirectional formatting characters: marks, embeddings, overrides
/// and isolates.
fn reorders(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::safe;

    #[test]
    fn escape_sequences_direction_overrides_and_markup_are_shown_escaped() {
        let shown = safe("alice\u{1b}[2J\u{202e}txt.exe <b>&");
        assert_eq!(shown, "alice\\u{1b}[2J\\u{202e}txt.exe ‹b›+");
        for c in ['\u{200e}', '\u{200f}', '\u{61c}', '\u{202a}', '\u{202d}', '\u{2066}', '\u{2069}', '\n', '\u{7}'] {
            assert!(!safe(&c.to_string()).contains(c), "{c:?}");
        }
        assert_eq!(safe("git push origin main"), "git push origin main");
    }
}
