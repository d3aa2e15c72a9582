//! `wardenctl grants`: create, list and revoke grants.

use warden_proto::v1 as pb;

use crate::approvals;
use crate::cli::*;
use crate::connection::*;
use crate::format::*;
use crate::out::{StdoutError, outln};

pub(crate) async fn grants(mut admin: Admin, command: GrantsCommand, json: bool) -> anyhow::Result<()> {
    match command {
        GrantsCommand::Create { user, session, agent, harness, actions, resource, for_, reason } => {
            let ttl = warden_monitor::duration::parse_duration(&for_)?;
            let grant = admin
                .create_grant(pb::CreateGrantRequest {
                    user,
                    session: session.unwrap_or_default(),
                    agent: agent.unwrap_or_default(),
                    actions,
                    resource_scope: resource,
                    ttl_seconds: ttl.as_secs(),
                    reason,
                    harness: harness.unwrap_or_default(),
                })
                .await?
                .into_inner();
            print_grants(&[grant], json)?;
        }
        GrantsCommand::List { user, session } => {
            let grants = admin
                .list_grants(pb::ListGrantsRequest {
                    user: user.unwrap_or_default(),
                    session: session.unwrap_or_default(),
                })
                .await?
                .into_inner()
                .grants;
            if grants.is_empty() && !json {
                outln!("no active grants")?;
            }
            print_grants(&grants, json)?;
        }
        GrantsCommand::Revoke { id } => {
            let revoked = admin.revoke_grant(pb::RevokeGrantRequest { grant_id: id }).await?.into_inner();
            if json {
                print_grants(revoked.grant.as_slice(), true)?;
            } else {
                outln!("revoked {}", revoked.grant.map(|g| g.grant_id).unwrap_or_default())?;
            }
        }
    }
    Ok(())
}

pub(crate) fn print_grants(grants: &[pb::Grant], json: bool) -> Result<(), StdoutError> {
    for grant in grants {
        let expires = timestamp_str(grant.expires_at.as_ref());
        if json {
            outln!(
                "{}",
                serde_json::json!({
                    "grant_id": grant.grant_id, "user": grant.user, "session": grant.session, "agent": grant.agent,
                    "actions": grant.actions, "resource_scope": grant.resource_scope, "expires_at": expires,
                    "reason": grant.reason, "created_by": grant.created_by, "policy": grant.policy,
                    "harness": grant.harness,
                })
            )?;
        } else {
            let mut who = grant.user.clone();
            if !grant.session.is_empty() {
                who.push_str(&format!(" session {}", grant.session));
            }
            if !grant.agent.is_empty() {
                who.push_str(&format!(" agent {}", grant.agent));
            }
            if !grant.harness.is_empty() {
                who.push_str(&format!(" harness {}", grant.harness));
            }
            outln!(
                "{}  {who}  {} on {}  until {expires}  by {}: {}",
                grant.grant_id,
                grant.actions.join(","),
                grant.resource_scope,
                grant.created_by,
                approvals::safe(&grant.reason)
            )?;
        }
    }
    Ok(())
}
