//! Asking the monitor (through the SDK) every question of a tool call, and
//! the strictest answer: any DENY denies, naming the policy; then every
//! PENDING one is waited for, within the hook's limit; only when all are
//! allowed does the tool run.

use std::time::Duration;

use tokio::time::{Instant, timeout_at};
use warden_sdk::{Actor, Client, Decision, Error, Outcome};

use crate::plan::Ask;
use crate::{Verdict, explain};

/// Where the monitor is and how long a call may wait for approvals.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The monitor's endpoint, for the reasons.
    pub endpoint: String,
    /// The longest the whole call waits (its questions and approvals).
    pub max_wait: Duration,
}

/// The verdict on `asks` (the questions of the tool `tool`). All are asked
/// before any approval is waited for, so that the hook never waits on a
/// person for a call that another answer denies (an approval asked for
/// before the denial is left to expire, nobody waiting on it); an approval
/// is then waited for by asking again under the same request id, which the
/// monitor answers with the same approval. Each approval is its own: a
/// call with two waiting questions needs both approved.
pub async fn decide(client: &Client, actor: &Actor, tool: &str, asks: &[Ask], limits: &Limits) -> Verdict {
    let deadline = Instant::now() + limits.max_wait;
    let waited = |pending: Option<&Decision>| {
        let secs = limits.max_wait.as_secs();
        let mut reason = format!("Warden: `{tool}` waited {secs} s for an approval, the hook's limit: denied");
        if let Some(decision) = pending {
            reason.push_str(&format!("; {}", explain("it waits", &decision.policy_ids, &decision.reasons)));
        }
        Verdict::Deny(reason)
    };
    let mut allowed = Vec::new();
    let mut pending = Vec::new();
    for ask in asks {
        let decision = match timeout_at(deadline, client.authorize(actor, ask.request.clone())).await {
            Err(_) => return waited(pending.first().map(|(_, d)| d)),
            Ok(Err(e)) => return unreachable_deny(&limits.endpoint, &e),
            Ok(Ok(decision)) => decision,
        };
        match decision.outcome {
            Outcome::Allow => allowed.push(decision),
            Outcome::Deny => return denied(tool, ask, &decision),
            Outcome::Pending => pending.push((ask, decision)),
        }
    }
    for (ask, decision) in pending {
        match timeout_at(deadline, client.check(actor, ask.request.clone())).await {
            Err(_) => return waited(Some(&decision)),
            Ok(Ok(decision)) => allowed.push(decision),
            Ok(Err(Error::Denied(decision))) => return denied(tool, ask, &decision),
            Ok(Err(Error::NotApproved(decision))) => {
                return Verdict::Deny(format!(
                    "Warden: no approver answered in time for `{tool}`{} (approval {}): denied",
                    about(ask),
                    decision.approval_id
                ));
            }
            Ok(Err(e)) => return unreachable_deny(&limits.endpoint, &e),
        }
    }
    let mut policy_ids: Vec<String> = Vec::new();
    let mut reasons: Vec<String> = Vec::new();
    for decision in allowed {
        for id in decision.policy_ids {
            if !policy_ids.contains(&id) {
                policy_ids.push(id);
            }
        }
        for reason in decision.reasons {
            if !reasons.contains(&reason) {
                reasons.push(reason);
            }
        }
    }
    Verdict::Allow(explain(&format!("Warden allowed `{tool}`"), &policy_ids, &reasons))
}

fn about(ask: &Ask) -> String {
    ask.about.as_ref().map(|about| format!(" ({about})")).unwrap_or_default()
}

fn denied(tool: &str, ask: &Ask, decision: &Decision) -> Verdict {
    let mut reasons = decision.reasons.clone();
    if !decision.note.is_empty() {
        reasons.push(format!("the approver said: {}", decision.note));
    }
    Verdict::Deny(explain(&format!("Warden denied `{tool}`{}", about(ask)), &decision.policy_ids, &reasons))
}

/// The monitor gave no decision: unreachable, or an error status.
pub fn unreachable_deny(endpoint: &str, error: &Error) -> Verdict {
    match error {
        Error::Transport(_) | Error::Status(_) if error.is_transient() || matches!(error, Error::Transport(_)) => {
            Verdict::Deny(format!("Warden is unreachable at {endpoint}: denied ({error})"))
        }
        other => Verdict::Deny(format!("Warden at {endpoint} gave no decision ({other}): denied")),
    }
}
