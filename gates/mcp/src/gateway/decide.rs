//! Asking Warden: `Authorize` for one call, read or prompt (waiting through
//! PENDING), `Preview` for a list, and what the agent is told when Warden
//! stands in the way.

use std::time::{Duration, SystemTime};

use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ContentBlock, ErrorData, ProgressNotificationParam};
use rmcp::service::RequestContext;
use warden_sdk::proto as pb;
use warden_sdk::{ActionRequest, Actor, Decision, Outcome};

use super::{Connection, acceptable_name, lock};

/// How often a waiting call tells the client it is still waiting.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// Most resources one `Preview` call takes (the monitor's bound).
const PREVIEW_CHUNK: usize = 1024;
/// How long after an approval's deadline the monitor's final answer is awaited.
const EXPIRY_GRACE: Duration = Duration::from_secs(2);

pub(super) fn text_result(text: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// What the agent is told when Warden stands in the way: the policies and
/// their reasons (and the approver's note), so that the model can read why.
fn denial_text(what: &str, decision: &Decision) -> String {
    let mut text = format!("Warden denied {what}");
    if !decision.policy_ids.is_empty() {
        text.push_str(&format!(" (policy {})", decision.policy_ids.join(", ")));
    }
    if decision.reasons.is_empty() {
        text.push_str(": no reason given");
    } else {
        text.push_str(&format!(": {}", decision.reasons.join("; ")));
    }
    if !decision.note.is_empty() {
        text.push_str(&format!(" (approver's note: {})", decision.note));
    }
    text
}

impl Connection {
    /// `Preview` of `action` on each (server, name), in chunks the monitor
    /// takes. A name the monitor would refuse as input (empty, too long,
    /// control characters) is DENY here, so one odd name of one server
    /// hides that entry, not every server's list.
    pub(super) async fn preview(
        &self,
        action: &str,
        names: &[(&str, &str)],
    ) -> Result<(Vec<Outcome>, String), warden_sdk::Error> {
        let actor = self.current_actor()?;
        let mut outcomes = vec![Outcome::Deny; names.len()];
        let asked: Vec<usize> =
            (0..names.len()).filter(|&i| names.get(i).is_some_and(|(_, n)| acceptable_name(n))).collect();
        let mut version = String::new();
        for chunk in asked.chunks(PREVIEW_CHUNK) {
            let resources = chunk.iter().filter_map(|&i| names.get(i)).map(|(server, name)| {
                pb::resource::Kind::Tool(pb::ToolResource {
                    server: (*server).to_owned(),
                    name: (*name).to_owned(),
                    arguments_json: String::new(),
                })
            });
            let preview = self.shared.warden.preview(&actor, action, resources).await?;
            for (&i, outcome) in chunk.iter().zip(preview.outcomes) {
                if let Some(slot) = outcomes.get_mut(i) {
                    *slot = outcome;
                }
            }
            version = preview.policy_version;
        }
        Ok((outcomes, version))
    }

    /// The actor fixed at the connection's first request.
    fn current_actor(&self) -> Result<Actor, warden_sdk::Error> {
        lock(&self.state.actor)
            .as_ref()
            .map(|(actor, _)| actor.clone())
            .ok_or_else(|| warden_sdk::Error::Config("no actor yet".into()))
    }

    /// Asks Warden about `action` on `Tool::"<server>/<name>"`; the error
    /// to answer with when it is not allowed.
    pub(super) async fn refusal(
        &self,
        action: &str,
        server: &str,
        name: &str,
        arguments_json: String,
        what: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<ErrorData>, ErrorData> {
        let asked = ActionRequest::new(
            action,
            pb::authorize_request::Resource::Tool(pb::ToolResource {
                server: server.to_owned(),
                name: name.to_owned(),
                arguments_json,
            }),
        );
        Ok(self.decide(asked, what, context).await?.map(|refused| {
            let text = refused.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone());
            ErrorData::invalid_request(text.unwrap_or_else(|| what.to_owned()), None)
        }))
    }

    /// Asks Warden about a call and waits through PENDING (telling the
    /// client, when it asked for progress); `Ok(None)` when the call may go
    /// ahead, `Ok(Some(result))` with what the agent is told when not.
    pub(super) async fn decide(
        &self,
        request: ActionRequest,
        what: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<CallToolResult>, ErrorData> {
        let actor = self.actor(context, false)?;
        let unreachable = |e: warden_sdk::Error| {
            Some(text_result(format!(
                "Warden at {} could not decide, so {what} was not made: {e}",
                self.shared.endpoint
            )))
        };
        let mut decision = match self.shared.warden.authorize(&actor, request).await {
            Ok(decision) => decision,
            Err(e) => return Ok(unreachable(e)),
        };
        self.saw_version(&decision.policy_version);
        let token = context.meta.get_progress_token();
        let started = tokio::time::Instant::now();
        let mut ticks = 0u32;
        while decision.outcome == Outcome::Pending {
            if decision.approval_id.is_empty() {
                return Ok(Some(text_result(format!(
                    "Warden answered PENDING without an approval, so {what} was not made"
                ))));
            }
            let until_deadline = decision
                .expires_at
                .and_then(|at| at.checked_add(EXPIRY_GRACE)?.duration_since(SystemTime::now()).ok())
                .unwrap_or_default();
            let left = until_deadline.min(self.shared.config.max_wait.saturating_sub(started.elapsed()));
            if left.is_zero() {
                return Ok(Some(text_result(format!(
                    "{what} waited for a person's approval ({}) and none came in time: not made",
                    decision.approval_id
                ))));
            }
            if let Some(token) = &token {
                ticks += 1;
                let message = format!(
                    "waiting for a person to approve ({}): {}",
                    decision.approval_id,
                    decision.reasons.join("; ")
                );
                let progress = ProgressNotificationParam::new(token.clone(), f64::from(ticks)).with_message(message);
                let _ = context.peer.notify_progress(progress).await;
            }
            let wait = left.min(PROGRESS_EVERY);
            let next = tokio::select! {
                next = self.shared.warden.await_decision(&decision.approval_id, wait) => next,
                () = context.ct.cancelled() => {
                    return Err(ErrorData::internal_error(format!("{what} was cancelled while it waited for approval"), None));
                }
            };
            match next {
                Ok(next) if next.approval_id == decision.approval_id => decision = next,
                Ok(other) => {
                    return Ok(Some(text_result(format!(
                        "Warden answered about approval {} while {what} waited for {}: not made",
                        other.approval_id, decision.approval_id
                    ))));
                }
                Err(e) if e.is_transient() => {
                    // The monitor may be restarting; the approval survives it.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Ok(unreachable(e)),
            }
        }
        match decision.outcome {
            Outcome::Allow => Ok(None),
            _ => Ok(Some(text_result(denial_text(what, &decision)))),
        }
    }
}
