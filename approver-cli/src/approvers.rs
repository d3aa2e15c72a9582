//! `wardenctl approvers`: enrolment links, the list and revocation of approvers' passkeys.

use warden_proto::v1 as pb;

use crate::approvals::safe;
use crate::cli::ApproversCommand;
use crate::connection::Admin;
use crate::format::timestamp_str;
use crate::out::outln;

pub(crate) async fn approvers(mut admin: Admin, command: ApproversCommand, json: bool) -> anyhow::Result<()> {
    match command {
        ApproversCommand::Enroll { name } => {
            let link = admin.enroll_approver(pb::EnrollApproverRequest { name: name.clone() }).await?.into_inner();
            let expires = timestamp_str(link.expires_at.as_ref());
            if json {
                outln!("{}", serde_json::json!({ "name": name, "url": link.url, "expires_at": expires }))?;
            } else {
                outln!("Enrolment link for approver {} (single use, until {expires}):", safe(&name))?;
                outln!("  {}", link.url)?;
                outln!("Open it on the device that holds the passkey; it asks for user verification.")?;
            }
        }
        ApproversCommand::List => {
            let passkeys = admin.list_approvers(pb::ListApproversRequest {}).await?.into_inner().passkeys;
            if passkeys.is_empty() && !json {
                outln!("no passkeys enrolled")?;
            }
            for p in passkeys {
                let enrolled = timestamp_str(p.enrolled_at.as_ref());
                let used = p.last_used_at.as_ref().map(|t| timestamp_str(Some(t)));
                if json {
                    outln!(
                        "{}",
                        serde_json::json!({
                            "name": p.name, "groups": p.groups, "key_id": p.key_id, "confirmed": p.confirmed,
                            "enrolled_at": enrolled, "enrolled_by": p.enrolled_by, "last_used_at": used,
                        })
                    )?;
                } else {
                    let groups = if p.groups.is_empty() { "no group".to_owned() } else { p.groups.join(", ") };
                    outln!(
                        "{}  groups: {}  passkey {}{}  enrolled {enrolled} by {}  last used {}",
                        safe(&p.name),
                        safe(&groups),
                        safe(&p.key_id),
                        if p.confirmed { "" } else { " (not confirmed: wardenctl approvers confirm NAME KEY)" },
                        safe(&p.enrolled_by),
                        used.as_deref().unwrap_or("never")
                    )?;
                }
            }
        }
        ApproversCommand::Confirm { name, key_id } => {
            let p = admin.confirm_approver(pb::ConfirmApproverRequest { name, key_id }).await?.into_inner();
            if json {
                outln!("{}", serde_json::json!({ "name": p.name, "key_id": p.key_id, "confirmed": p.confirmed }))?;
            } else {
                outln!(
                    "confirmed passkey {} of {}: it signs in and approves from now on",
                    safe(&p.key_id),
                    safe(&p.name)
                )?;
            }
        }
        ApproversCommand::Revoke { name } => {
            let revoked = admin.revoke_approver(pb::RevokeApproverRequest { name: name.clone() }).await?.into_inner();
            if json {
                outln!("{}", serde_json::json!({ "name": name, "revoked": revoked.revoked }))?;
            } else {
                outln!("revoked {} passkey(s) of {}", revoked.revoked, safe(&name))?;
            }
        }
    }
    Ok(())
}
