//! `wardenctl approvals`: list, approve, deny, and watch pending approvals in
//! the terminal and as desktop notifications.
//!
//! A notification's buttons resolve exactly the approval it shows, and only
//! if the request still has the hash shown on it. Any program on the
//! desktop's session bus can emit an `ActionInvoked` signal, so a click is
//! taken only from the notification server itself: the signal's sender (set
//! by the bus daemon, not the emitter) must be the current owner of
//! `org.freedesktop.Notifications`, its path `/org/freedesktop/Notifications`,
//! and its id one this watcher showed and has not seen closed. A program
//! that drives the notification server itself (dunstctl, synthetic input)
//! still clicks: a notification is for a desktop where no agent runs.
//! Approving for a window is not offered on a notification; it needs
//! `approvals approve ID --for DURATION`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use crate::connection::Reopen;
use crate::out::{StdoutError, outln};
use tokio_stream::StreamExt;
use tonic::service::interceptor::InterceptedService;
use warden_proto::v1 as pb;

/// An Approvals client with the approver's token.
pub type ApprovalsClient =
    pb::approvals_client::ApprovalsClient<InterceptedService<warden_sdk::Replicas, crate::connection::MaybeToken>>;

/// Prints the pending approvals.
pub async fn list(mut client: ApprovalsClient, json: bool) -> anyhow::Result<()> {
    let mut approvals = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client.list_pending(pb::ListPendingRequest { page_size: 0, page_token }).await?.into_inner();
        approvals.extend(page.approvals);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    if json {
        for approval in &approvals {
            outln!("{}", approval_json(approval))?;
        }
        return Ok(());
    }
    if approvals.is_empty() {
        outln!("nothing is waiting for approval")?;
        return Ok(());
    }
    outln!("{:<42} {:<28} {:<13} {:<9} RESOURCE", "APPROVAL", "USER/AGENT/SESSION", "ACTION", "EXPIRES IN")?;
    for approval in &approvals {
        let request = approval.request.clone().unwrap_or_default();
        let actor = request.actor.clone().unwrap_or_default();
        outln!(
            "{:<42} {:<28} {:<13} {:<9} {}",
            approval.approval_id,
            shorten(&safe(&format!("{}/{}/{}", actor.user, actor.agent, actor.session)), 64),
            shorten(&safe(&request.action), 32),
            left(approval.expires_at.as_ref()),
            shorten(&safe(&approval.resource), 160)
        )?;
        // A command of several parts: what each part is and how it was
        // decided, since approving covers them all.
        for part in part_lines(approval) {
            outln!("    {}", shorten(&safe(part), 160))?;
        }
    }
    Ok(())
}

/// The lines of an approval that say how each part of a command was
/// decided (`part 1 of 2, `cargo test` (exec): ALLOW by …`).
fn part_lines(approval: &pb::Approval) -> impl Iterator<Item = &String> {
    approval.reasons.iter().filter(|reason| {
        reason.starts_with("part ")
            && ["): ALLOW", "): PENDING", "): DENY"].iter().any(|outcome| reason.contains(outcome))
    })
}

/// Prints one approval in full.
pub async fn show(mut client: ApprovalsClient, id: &str, json: bool) -> anyhow::Result<()> {
    let approval = client.get_approval(pb::GetApprovalRequest { approval_id: id.to_owned() }).await?.into_inner();
    if json {
        outln!("{}", approval_json(&approval))?;
        return Ok(());
    }
    outln!("{} {}", approval.approval_id, state_str(approval.state))?;
    for line in describe(&approval) {
        outln!("  {line}")?;
    }
    Ok(())
}

/// `text` cut to `max` characters, with `…` where it was cut: a harness's
/// huge field must not push everything else off an approver's screen.
fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", text.get(..cut).unwrap_or(text)),
        None => text.to_owned(),
    }
}

/// Approves or denies one approval and prints how it ended.
pub async fn resolve(mut client: ApprovalsClient, request: pb::ResolveRequest, json: bool) -> anyhow::Result<()> {
    let approval = client.resolve(request).await?.into_inner();
    if json {
        outln!("{}", approval_json(&approval))?;
    } else {
        let decision = approval.decision.clone().unwrap_or_default();
        outln!("{} {}", state_str(approval.state), approval.approval_id)?;
        for reason in &decision.reasons {
            outln!("  reason: {}", safe(reason))?;
        }
        outln!("  audit:  #{}", decision.audit_seq)?;
    }
    Ok(())
}

/// Streams pending approvals to the terminal and, with `notify`, to the
/// desktop (buttons Approve, Approve 15 min, Deny). Runs until the stream ends or the monitor cuts it off.
///
/// With several replicas, a watch whose replica goes down goes on with the
/// next (`Reopen`): the approvals it lists as current that were shown
/// already are not shown again, and those shown that ended in between are
/// asked about (`GetApproval`) and shown as ended.
pub async fn watch(
    client: ApprovalsClient,
    notify: bool,
    page: Option<String>,
    json: bool,
    mut reopen: Reopen,
) -> anyhow::Result<()> {
    let mut desktop = if notify { Desktop::connect(client.clone(), page).await } else { None };
    let mut events = client.clone().watch_pending(pb::WatchPendingRequest {}).await?.into_inner();
    if !json {
        outln!("watching for approvals (Ctrl-C to stop)")?;
    }
    // Shown as pending and not seen ending; seen ending after a reopening.
    let mut open: HashSet<String> = HashSet::new();
    let mut ended: HashSet<String> = HashSet::new();
    let mut missed: Vec<pb::ApprovalEvent> = Vec::new();
    loop {
        let event = match missed.pop() {
            Some(event) => event,
            None => match events.next().await {
                None => break,
                Some(Ok(event)) => event,
                Some(Err(status)) if reopen.after(&status) => {
                    events = client.clone().watch_pending(pb::WatchPendingRequest {}).await?.into_inner();
                    // Subscribed again: what ended before is in the store.
                    for approval_id in &open {
                        let asked = pb::GetApprovalRequest { approval_id: approval_id.clone() };
                        let Ok(approval) = client.clone().get_approval(asked).await else { continue };
                        let approval = approval.into_inner();
                        let kind = match pb::ApprovalState::try_from(approval.state) {
                            Ok(pb::ApprovalState::Expired) => pb::ApprovalEventKind::Expired,
                            Ok(pb::ApprovalState::Approved | pb::ApprovalState::Denied) => {
                                pb::ApprovalEventKind::Resolved
                            }
                            _ => continue,
                        };
                        ended.insert(approval.approval_id.clone());
                        missed.push(pb::ApprovalEvent { kind: kind as i32, approval: Some(approval) });
                    }
                    continue;
                }
                Some(Err(status)) => return Err(anyhow::Error::new(status).context("the watch ended")),
            },
        };
        let kind = pb::ApprovalEventKind::try_from(event.kind).unwrap_or(pb::ApprovalEventKind::Unspecified);
        let Some(approval) = event.approval else { continue };
        let id = approval.approval_id.clone();
        let new = match kind {
            pb::ApprovalEventKind::Current | pb::ApprovalEventKind::New => open.insert(id),
            // Shown ended already, from the store after a reopening.
            _ if ended.contains(&id) && !open.contains(&id) => false,
            _ => {
                open.remove(&id);
                true
            }
        };
        if !new {
            continue;
        }
        reopen.received();
        if json {
            outln!("{}", serde_json::json!({ "event": kind_str(kind), "approval": approval_json(&approval) }))?;
        } else {
            print_event(kind, &approval)?;
        }
        if let Some(desktop) = desktop.as_mut() {
            match kind {
                pb::ApprovalEventKind::Current | pb::ApprovalEventKind::New => {
                    desktop.show(&approval).await;
                }
                _ => desktop.close(&approval.approval_id).await,
            }
        }
    }
    Ok(())
}

fn print_event(kind: pb::ApprovalEventKind, approval: &pb::Approval) -> Result<(), StdoutError> {
    match kind {
        pb::ApprovalEventKind::Current | pb::ApprovalEventKind::New => {
            outln!("\nPENDING {}", approval.approval_id)?;
            for line in describe(approval) {
                outln!("  {line}")?;
            }
            if approval.passkey_policies.is_empty() {
                outln!("  approve: wardenctl approvals approve {}", approval.approval_id)?;
            } else {
                outln!("  approve: on the approval page, with a passkey (a token cannot)")?;
            }
            outln!("  deny:    wardenctl approvals deny {} --message TEXT", approval.approval_id)?;
        }
        _ => {
            let by =
                if approval.resolved_by.is_empty() { String::new() } else { format!(" by {}", approval.resolved_by) };
            outln!("{}{by} {}", state_str(approval.state), approval.approval_id)?;
        }
    }
    Ok(())
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
    // Shown, not hidden: what would leave if this is approved.
    for written in &approval.credentials {
        lines.push(format!("looks like a credential, and would leave: {}", safe(written)));
    }
    // One policy and its reason, as a single command has them; a command of
    // several parts has a reason per part in the way and a line per part
    // (all of which the approval covers), so every reason is its own line.
    if let ([id], [reason]) = (approval.policy_ids.as_slice(), approval.reasons.as_slice()) {
        lines.push(format!("policy {}: {}", safe(id), safe(reason)));
    } else {
        if !approval.policy_ids.is_empty() {
            let ids: Vec<String> = approval.policy_ids.iter().map(|id| safe(id)).collect();
            lines.push(format!("policies: {}", ids.join(", ")));
        }
        lines.extend(approval.reasons.iter().map(|reason| format!("- {}", safe(reason))));
    }
    let approvers =
        if approval.approvers.is_empty() { "any approver".to_owned() } else { approval.approvers.join(", ") };
    lines.push(format!("approvers: {}", safe(&approvers)));
    if !approval.passkey_policies.is_empty() {
        let ids: Vec<String> = approval.passkey_policies.iter().map(|id| safe(id)).collect();
        lines.push(format!("approve with a passkey on the approval page ({})", ids.join(", ")));
    }
    lines.push(format!("expires {}", crate::format::deadline_str(approval.expires_at.as_ref(), SystemTime::now())));
    lines.push(format!("request: {} from harness {}", short_hash(&approval.request_hash), safe(&approval.harness)));
    lines
}

/// Desktop notifications, one per pending approval, over the session bus.
struct Desktop {
    bus: zbus::Connection,
    /// The approval page, for approvals that need a passkey.
    page: Option<String>,
    /// The server reads markup in bodies (`body-markup`): text is escaped.
    markup: bool,
    /// The notifications shown and not closed: id → what a click resolves.
    shown: Arc<Mutex<HashMap<u32, Shown>>>,
}

/// What a notification shows, so what its click may resolve.
#[derive(Debug, Clone)]
struct Shown {
    approval_id: String,
    request_hash: String,
    /// A click was taken: later ones (a double click, a replayed signal)
    /// are not.
    clicked: bool,
    /// Approving needs a passkey on the approval page: there is no Approve.
    passkey: bool,
}

const SERVER: &str = "org.freedesktop.Notifications";
const PATH: &str = "/org/freedesktop/Notifications";
const ACTION_APPROVE: &str = "approve";
const ACTION_DENY: &str = "deny";
const ACTION_OPEN: &str = "open-page";

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Desktop {
    /// Connects to the session bus and checks that a notification server
    /// answers; says why not otherwise. Starts listening for clicks.
    async fn connect(client: ApprovalsClient, page: Option<String>) -> Option<Self> {
        let connected = async {
            let bus = zbus::Connection::session().await?;
            let info = bus.call_method(Some(SERVER), PATH, Some(SERVER), "GetServerInformation", &()).await?;
            let (name, _vendor, version, _spec): (String, String, String, String) = info.body().deserialize()?;
            let capabilities = bus.call_method(Some(SERVER), PATH, Some(SERVER), "GetCapabilities", &()).await?;
            let capabilities: Vec<String> = capabilities.body().deserialize()?;
            let markup = capabilities.iter().any(|c| c == "body-markup");
            Ok::<_, zbus::Error>((bus, name, version, markup))
        };
        let (bus, name, version, markup) = match connected.await {
            Ok(found) => found,
            Err(e) => {
                eprintln!(
                    "wardenctl: no desktop notifications ({e}); is a notification server running on this session's D-Bus \
                     (DBUS_SESSION_BUS_ADDRESS)? Watching in the terminal only."
                );
                return None;
            }
        };
        let rule = format!("type='signal',interface='{SERVER}'");
        let signals = match zbus::MessageStream::for_match_rule(rule.as_str(), &bus, None).await {
            Ok(signals) => signals,
            Err(e) => {
                eprintln!(
                    "wardenctl: no desktop notifications (cannot listen for clicks: {e}); watching in the terminal only."
                );
                return None;
            }
        };
        eprintln!("desktop notifications through {} {}", safe(&name), safe(&version));
        let shown = Arc::default();
        tokio::spawn(listen(bus.clone(), signals, Arc::clone(&shown), client, page.clone()));
        Some(Self { bus, page, shown, markup })
    }

    async fn show(&mut self, approval: &pb::Approval) {
        if lock(&self.shown).values().any(|s| s.approval_id == approval.approval_id) {
            return;
        }
        let request = approval.request.clone().unwrap_or_default();
        let actor = request.actor.clone().unwrap_or_default();
        let summary = format!("Warden: {} wants {}", safe(&actor.user), safe(&request.action));
        let body: Vec<String> = describe(approval).iter().map(|line| shorten(line, 300)).collect();
        let body = body.join("\n");
        let body = if self.markup { markup_escaped(&body) } else { body };
        let passkey = !approval.passkey_policies.is_empty();
        let actions: &[&str] = match (passkey, &self.page) {
            (false, _) => &[ACTION_APPROVE, "Approve", ACTION_DENY, "Deny"],
            (true, Some(_)) => &[ACTION_OPEN, "Open approval page", ACTION_DENY, "Deny"],
            (true, None) => &[ACTION_DENY, "Deny"],
        };
        let hints: HashMap<&str, zbus::Variant<'_>> = HashMap::new();
        // Shown until resolved: expire timeout 0 is "never".
        let notify = ("wardenctl", 0u32, "", summary.as_str(), body.as_str(), actions, hints, 0i32);
        let id = match self.bus.call_method(Some(SERVER), PATH, Some(SERVER), "Notify", &notify).await {
            Ok(reply) => match reply.body().deserialize::<u32>() {
                Ok(id) => id,
                Err(e) => {
                    eprintln!("wardenctl: the notification server answered oddly for {}: {e}", approval.approval_id);
                    return;
                }
            },
            Err(e) => {
                eprintln!("wardenctl: could not show a notification for {}: {e}", approval.approval_id);
                return;
            }
        };
        let shown = Shown {
            approval_id: approval.approval_id.clone(),
            request_hash: approval.request_hash.clone(),
            clicked: false,
            passkey,
        };
        lock(&self.shown).insert(id, shown);
    }

    async fn close(&mut self, approval_id: &str) {
        let ids: Vec<u32> = {
            let mut shown = lock(&self.shown);
            let ids: Vec<u32> = shown.iter().filter(|(_, s)| s.approval_id == approval_id).map(|(id, _)| *id).collect();
            for id in &ids {
                shown.remove(id);
            }
            ids
        };
        for id in ids {
            let _ = self.bus.call_method(Some(SERVER), PATH, Some(SERVER), "CloseNotification", &(id,)).await;
        }
    }
}

/// Takes clicks from the notification server only: the sender must own
/// `org.freedesktop.Notifications` at that moment, the path be the
/// server's, and the id one shown and not closed. Everything else is a
/// forgery (any program on the bus can emit the signal) and is ignored,
/// with a line saying so.
async fn listen(
    bus: zbus::Connection,
    mut signals: zbus::MessageStream,
    shown: Arc<Mutex<HashMap<u32, Shown>>>,
    client: ApprovalsClient,
    page: Option<String>,
) {
    while let Some(Ok(message)) = signals.next().await {
        let header = message.header();
        let member = header.member().map(|m| m.as_str().to_owned()).unwrap_or_default();
        let sender = header.sender().map(|s| s.as_str().to_owned()).unwrap_or_default();
        let from_server = header.path().is_some_and(|p| p.as_str() == PATH) && {
            let owner = bus
                .call_method(
                    Some("org.freedesktop.DBus"),
                    "/org/freedesktop/DBus",
                    Some("org.freedesktop.DBus"),
                    "GetNameOwner",
                    &(SERVER,),
                )
                .await
                .and_then(|reply| reply.body().deserialize::<String>());
            owner.is_ok_and(|owner| !sender.is_empty() && owner == sender)
        };
        match member.as_str() {
            "ActionInvoked" => {
                let Ok((id, key)) = message.body().deserialize::<(u32, String)>() else { continue };
                if !from_server {
                    eprintln!(
                        "wardenctl: ignored a click on notification {id} from `{}`, which is not the notification server",
                        safe(&sender)
                    );
                    continue;
                }
                // Opening the page resolves nothing: the approver approves
                // (or denies) there, with the passkey.
                if key == ACTION_OPEN {
                    let target = lock(&shown).get(&id).cloned();
                    if let (Some(target), Some(page)) = (target.filter(|t| t.passkey), &page) {
                        open_page(page, &target.approval_id);
                    }
                    continue;
                }
                // One click per notification; it stays shown until its
                // approval is resolved (and closed by `close`).
                let target = {
                    let mut shown = lock(&shown);
                    match shown.get_mut(&id) {
                        Some(target) if !target.clicked => {
                            target.clicked = true;
                            target.clone()
                        }
                        _ => continue,
                    }
                };
                let (approve, note) = match key.as_str() {
                    // A passkey approval has no Approve button: a click
                    // that says so is not the server's own, whatever sent it.
                    ACTION_APPROVE if target.passkey => {
                        eprintln!(
                            "wardenctl: ignored an Approve click on {}: it needs a passkey on the approval page",
                            target.approval_id
                        );
                        continue;
                    }
                    ACTION_APPROVE => (true, "approved from the desktop"),
                    ACTION_DENY => (false, "denied from the desktop"),
                    _ => continue,
                };
                let request = pb::ResolveRequest {
                    approval_id: target.approval_id.clone(),
                    approve,
                    note: note.into(),
                    grant_for_seconds: 0,
                    grant_scope: String::new(),
                    // Bound to the request shown: a different one is not resolved.
                    request_hash: target.request_hash,
                };
                match client.clone().resolve(request).await {
                    Ok(resolved) => {
                        let resolved = resolved.into_inner();
                        // A closed stdout is not this listener's to act on:
                        // resolving from the desktop goes on, and the watch
                        // loop ends the command at its next line.
                        let _ = outln!("{} {} (from the desktop)", state_str(resolved.state), resolved.approval_id);
                    }
                    Err(status) => {
                        eprintln!("wardenctl: resolving {} failed: {}", target.approval_id, status.message())
                    }
                }
            }
            "NotificationClosed" if from_server => {
                if let Ok((id, _reason)) = message.body().deserialize::<(u32, u32)>() {
                    lock(&shown).remove(&id);
                }
            }
            _ => {}
        }
    }
}

/// Opens the approval page at `approval_id` in the approver's browser:
/// `$BROWSER`, else `xdg-open`.
fn open_page(page: &str, approval_id: &str) {
    let url = format!("{}/#{approval_id}", page.trim_end_matches('/'));
    let browser = std::env::var("BROWSER").ok().filter(|b| !b.trim().is_empty()).unwrap_or_else(|| "xdg-open".into());
    match std::process::Command::new(&browser).arg(&url).spawn() {
        Ok(mut child) => {
            eprintln!("wardenctl: opened {} for {approval_id}", safe(&url));
            std::thread::spawn(move || child.wait());
        }
        Err(e) => eprintln!("wardenctl: cannot open {} with {}: {e}; open it yourself", safe(&url), safe(&browser)),
    }
}

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
        "passkey_policies": approval.passkey_policies,
        "credentials": approval.credentials,
        "harness": approval.harness,
        "request_hash": approval.request_hash,
        "created_at": crate::format::timestamp_str(approval.created_at.as_ref()),
        "expires_at": crate::format::timestamp_str(approval.expires_at.as_ref()),
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

fn left(t: Option<&prost_types::Timestamp>) -> String {
    match system_time(t).and_then(|at| at.duration_since(SystemTime::now()).ok()) {
        Some(left) => warden_monitor::duration::format_duration(Duration::from_secs(left.as_secs())),
        None => "expired".to_owned(),
    }
}

fn short_hash(hash: &str) -> String {
    hash.get(..12).unwrap_or(hash).to_owned()
}

/// Text from the request, made safe for a terminal: no control characters
/// (escape sequences), no characters that reorder what follows them (bidi
/// embeddings, overrides and isolates, which can make `rm -rf /` read as
/// something else). Each is shown escaped; everything else, `&`, `<` and
/// `>` among it, is shown exactly, since an approver must read what runs.
pub fn safe(text: &str) -> String {
    text.chars()
        .flat_map(|c| match c {
            c if c.is_control() || reorders(c) => c.escape_unicode().collect(),
            c => vec![c],
        })
        .collect()
}

/// Text for a notification body whose server reads markup (`body-markup`):
/// `&`, `<` and `>` as XML entities, so that the server shows them, not
/// reads them.
fn markup_escaped(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The bidirectional formatting characters: marks, embeddings, overrides
/// and isolates.
fn reorders(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::{markup_escaped, safe};

    #[test]
    fn escape_sequences_and_direction_overrides_are_shown_escaped_and_commands_exactly() {
        let shown = safe("alice\u{1b}[2J\u{202e}txt.exe <b>&");
        assert_eq!(shown, "alice\\u{1b}[2J\\u{202e}txt.exe <b>&");
        let command = "rm -rf build && echo done > log.txt < in 2>&1";
        assert_eq!(safe(command), command);
        assert_eq!(
            markup_escaped(&safe(command)),
            "rm -rf build &amp;&amp; echo done &gt; log.txt &lt; in 2&gt;&amp;1"
        );
        for c in ['\u{200e}', '\u{200f}', '\u{61c}', '\u{202a}', '\u{202d}', '\u{2066}', '\u{2069}', '\n', '\u{7}'] {
            assert!(!safe(&c.to_string()).contains(c), "{c:?}");
        }
        assert_eq!(safe("git push origin main"), "git push origin main");
    }
}
