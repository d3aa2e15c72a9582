//! `wardenctl sessions`: show, lock, unlock and clear the labels of sessions.

use warden_proto::v1 as pb;

use crate::approvals;
use crate::cli::*;
use crate::connection::*;
use crate::out::{StdoutError, outln};

pub(crate) async fn sessions(mut admin: Admin, command: SessionsCommand, json: bool) -> anyhow::Result<()> {
    match command {
        SessionsCommand::Show { id, user, harness } => {
            let request = pb::GetSessionRequest {
                session: id,
                user: user.unwrap_or_default(),
                harness: harness.unwrap_or_default(),
            };
            let session = admin.get_session(request).await?.into_inner();
            print_session(&session, json)?;
        }
        SessionsCommand::ClearLabels { id, user, harness, reason } => {
            let session = admin
                .clear_session_labels(pb::ClearSessionLabelsRequest {
                    session: id,
                    reason: reason.unwrap_or_default(),
                    user: user.unwrap_or_default(),
                    harness: harness.unwrap_or_default(),
                })
                .await?
                .into_inner();
            print_session(&session, json)?;
        }
        SessionsCommand::Lock { id, user, agent, reason } => {
            let response = admin
                .lock_session(pb::LockSessionRequest {
                    session: id.unwrap_or_default(),
                    user: user.unwrap_or_default(),
                    agent: agent.unwrap_or_default(),
                    reason: reason.unwrap_or_default(),
                })
                .await?
                .into_inner();
            print_lock(&response, json)?;
        }
        SessionsCommand::Unlock { id, user, agent } => {
            let response = admin
                .unlock_session(pb::UnlockSessionRequest {
                    session: id.unwrap_or_default(),
                    user: user.unwrap_or_default(),
                    agent: agent.unwrap_or_default(),
                })
                .await?
                .into_inner();
            print_lock(&response, json)?;
        }
    }
    Ok(())
}

pub(crate) fn print_session(session: &pb::Session, json: bool) -> Result<(), StdoutError> {
    if json {
        outln!(
            "{}",
            serde_json::json!({
                "session": session.session, "user": session.user, "agent": session.agent,
                "harness": session.harness, "labels": session.labels, "locked": session.locked, "locked_reason": session.locked_reason,
            })
        )?;
        return Ok(());
    }
    outln!(
        "session {}  user {}  agent {}  harness {}",
        approvals::safe(&session.session),
        approvals::safe(&session.user),
        approvals::safe(&session.agent),
        approvals::safe(&session.harness)
    )?;
    let labels = if session.labels.is_empty() { "(none)".to_owned() } else { session.labels.join(", ") };
    outln!("  labels: {labels}")?;
    if session.locked {
        outln!("  LOCKED: {}", approvals::safe(&session.locked_reason))?;
    }
    Ok(())
}

pub(crate) fn print_lock(response: &pb::LockResponse, json: bool) -> Result<(), StdoutError> {
    if json {
        outln!(
            "{}",
            serde_json::json!({ "target": response.target, "locked": response.locked, "denied_approvals": response.denied_approvals })
        )?;
        return Ok(());
    }
    outln!("{} {}", if response.locked { "locked" } else { "unlocked" }, response.target)?;
    for id in &response.denied_approvals {
        outln!("  denied pending approval {id}")?;
    }
    Ok(())
}
