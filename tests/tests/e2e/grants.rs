//! Grants (by admins, and windows by approvers), end to end, with the
//! monitor's clock moved forward instead of sleeping.

use std::time::Duration;

use tonic::Code;
use warden_proto::v1 as pb;
use warden_sdk::{ActionRequest, Actor, Decision, Outcome};

use crate::support::{APPROVER, HARNESS, TestMonitor};

fn alice() -> Actor {
    Actor::new("alice", "claude-code", "s1")
}

fn grant(user: &str, actions: &[&str], scope: &str, ttl_seconds: u64) -> pb::CreateGrantRequest {
    pb::CreateGrantRequest {
        user: user.into(),
        actions: actions.iter().map(|a| (*a).to_owned()).collect(),
        resource_scope: scope.into(),
        ttl_seconds,
        reason: "test".into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_grant_permits_what_policies_alone_deny_until_it_expires() {
    let monitor = TestMonitor::start().await;
    let harness = monitor.harness().await;
    let write = || ActionRequest::write_file("/srv/shared/report.md");
    assert_eq!(harness.authorize(&alice(), write()).await.unwrap().outcome, Outcome::Deny);

    let mut admin = monitor.admin().await;
    let created =
        admin.create_grant(grant("alice", &["fs.write"], "dir:/srv/shared/", 3600)).await.unwrap().into_inner();
    assert!(created.grant_id.starts_with("grt-"));
    assert_eq!(created.resource_scope, "dir:/srv/shared");
    assert_eq!(created.created_by, "security");

    let allowed = harness.authorize(&alice(), write()).await.unwrap();
    assert_eq!(allowed.outcome, Outcome::Allow, "{:?}", allowed.reasons);
    assert_eq!(allowed.grant_ids, std::slice::from_ref(&created.grant_id));
    // Bob is not alice.
    let bob = Actor::new("bob", "codex", "b1");
    assert_eq!(harness.authorize(&bob, write()).await.unwrap().outcome, Outcome::Deny);

    let listed = admin.list_grants(pb::ListGrantsRequest { user: "alice".into(), ..Default::default() }).await.unwrap();
    let listed = listed.into_inner().grants;
    assert_eq!(listed.len(), 1);
    assert!(listed[0].policy.contains(r#"@grant("grt-"#), "{}", listed[0].policy);

    // An hour later the grant no longer matches, at once, and is swept.
    monitor.advance_clock(Duration::from_secs(3601));
    assert_eq!(harness.authorize(&alice(), write()).await.unwrap().outcome, Outcome::Deny);
    crate::support::eventually("the expired grant's sweep", || {
        let (mut admin, monitor) = (admin.clone(), &monitor);
        async move {
            let left = admin.list_grants(pb::ListGrantsRequest::default()).await.unwrap().into_inner().grants;
            (left.is_empty() && monitor.audit().await.iter().any(|r| r.kind == "grant.expired")).then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn a_grant_lifts_soft_forbids_but_never_a_hard_one() {
    let monitor = TestMonitor::start().await;
    let harness = monitor.harness().await;
    let mut admin = monitor.admin().await;
    admin.create_grant(grant("alice", &["exec"], "program:git", 600)).await.unwrap();
    let push = harness.authorize(&alice(), ActionRequest::exec(["git", "push", "origin", "main"])).await.unwrap();
    assert_eq!(push.outcome, Outcome::Allow, "a grant counts as approval: {:?}", push.reasons);

    admin.create_grant(grant("alice", &["fs.read"], "dir:/home/alice/project", 600)).await.unwrap();
    let env = harness.authorize(&alice(), ActionRequest::read_file("/home/alice/project/.env")).await.unwrap();
    assert_eq!(env.outcome, Outcome::Deny);
    assert_eq!(env.policy_ids, ["files.no-credentials"]);

    // A secret with a grant: allowed, and the session now holds private data.
    let secret = ActionRequest::use_secret("DEPLOY_KEY");
    assert_eq!(harness.authorize(&alice(), secret.clone()).await.unwrap().outcome, Outcome::Pending);
    admin.create_grant(grant("alice", &["secret.use"], "secret:DEPLOY_KEY", 600)).await.unwrap();
    let used = harness.authorize(&alice(), ActionRequest::use_secret("DEPLOY_KEY")).await.unwrap();
    assert_eq!(used.outcome, Outcome::Allow);
    let session = admin
        .get_session(pb::GetSessionRequest { session: "s1".into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(session.labels, ["private-data"]);
}

#[tokio::test]
async fn revoking_takes_effect_on_the_next_request() {
    let monitor = TestMonitor::start().await;
    let harness = monitor.harness().await;
    let mut admin = monitor.admin().await;
    let created =
        admin.create_grant(grant("alice", &["fs.write"], "file:/srv/shared/x", 600)).await.unwrap().into_inner();
    let write = || ActionRequest::write_file("/srv/shared/x");
    assert_eq!(harness.authorize(&alice(), write()).await.unwrap().outcome, Outcome::Allow);
    admin.revoke_grant(pb::RevokeGrantRequest { grant_id: created.grant_id.clone() }).await.unwrap();
    assert_eq!(harness.authorize(&alice(), write()).await.unwrap().outcome, Outcome::Deny);
    let status = admin.revoke_grant(pb::RevokeGrantRequest { grant_id: created.grant_id }).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    let kinds: Vec<String> = monitor.audit().await.into_iter().map(|r| r.kind).collect();
    assert!(kinds.contains(&"grant.created".to_owned()) && kinds.contains(&"grant.revoked".to_owned()), "{kinds:?}");
}

#[tokio::test]
async fn bad_grants_are_refused_naming_the_field() {
    let monitor = TestMonitor::start().await;
    let mut admin = monitor.admin().await;
    let cases = [
        ("user", grant("", &["fs.read"], "dir:/x", 60)),
        ("actions", grant("alice", &[], "dir:/x", 60)),
        ("actions", grant("alice", &["fs.chmod"], "dir:/x", 60)),
        ("actions", grant("alice", &["exec"], "dir:/x", 60)),
        ("resource_scope", grant("alice", &["fs.read"], "folder:/x", 60)),
        ("resource_scope", grant("alice", &["fs.read"], "dir:relative", 60)),
        ("ttl_seconds", grant("alice", &["fs.read"], "dir:/x", 0)),
        ("ttl_seconds", grant("alice", &["fs.read"], "dir:/x", 365 * 86_400)),
    ];
    for (field, request) in cases {
        let status = admin.create_grant(request).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
        assert!(status.message().starts_with(&format!("{field}:")), "{field}: {}", status.message());
    }
}

#[tokio::test]
async fn approving_for_a_window_lets_the_same_action_through_until_it_ends() {
    let (monitor, _policies) = TestMonitor::start_token_approvals().await;
    let harness = monitor.harness().await;
    let push = || ActionRequest::exec(["git", "push", "origin", "main"]);
    let pending = harness.authorize(&alice(), push()).await.unwrap();
    assert_eq!(pending.outcome, Outcome::Pending);
    let mut approvals = monitor.approvals(APPROVER).await;
    approvals
        .resolve(pb::ResolveRequest {
            approval_id: pending.approval_id,
            approve: true,
            grant_for_seconds: 900,
            ..Default::default()
        })
        .await
        .unwrap();
    let again = harness.authorize(&alice(), push()).await.unwrap();
    assert_eq!(again.outcome, Outcome::Allow, "{:?}", again.reasons);
    assert_eq!(again.grant_ids.len(), 1);
    // Only this session.
    let other = Actor::new("alice", "claude-code", "s2");
    assert_eq!(harness.authorize(&other, push()).await.unwrap().outcome, Outcome::Pending);

    monitor.advance_clock(Duration::from_secs(16 * 60));
    assert_eq!(harness.authorize(&alice(), push()).await.unwrap().outcome, Outcome::Pending);
}

#[tokio::test]
async fn grants_survive_a_restart() {
    let mut monitor = TestMonitor::start().await;
    let mut admin = monitor.admin().await;
    admin.create_grant(grant("alice", &["fs.write"], "dir:/srv/shared", 3600)).await.unwrap();
    monitor.restart().await;
    let harness = monitor.harness().await;
    let write = harness.authorize(&alice(), ActionRequest::write_file("/srv/shared/a")).await.unwrap();
    assert_eq!(write.outcome, Outcome::Allow);
    assert_eq!(
        monitor.admin().await.list_grants(pb::ListGrantsRequest::default()).await.unwrap().into_inner().grants.len(),
        1
    );
}

#[tokio::test]
async fn harness_and_approver_tokens_cannot_use_admin() {
    let monitor = TestMonitor::start().await;
    for token in [HARNESS, APPROVER] {
        let mut admin = monitor.admin_with(token).await;
        let status = admin.create_grant(grant("alice", &["fs.write"], "dir:/", 60)).await.unwrap_err();
        assert_eq!(status.code(), Code::PermissionDenied, "{token}");
        let status = admin
            .lock_session(pb::LockSessionRequest { session: "s1".into(), ..Default::default() })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::PermissionDenied, "{token}");
        let status =
            admin.get_session(pb::GetSessionRequest { session: "s1".into(), ..Default::default() }).await.unwrap_err();
        assert_eq!(status.code(), Code::PermissionDenied, "{token}");
        let status = admin
            .clear_session_labels(pb::ClearSessionLabelsRequest { session: "s1".into(), ..Default::default() })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::PermissionDenied, "{token}");
    }
}

#[tokio::test]
async fn a_revoked_grant_stops_replays_of_what_it_allowed() {
    let monitor = TestMonitor::start().await;
    let harness = monitor.harness().await;
    let mut admin = monitor.admin().await;
    let created =
        admin.create_grant(grant("alice", &["fs.write"], "dir:/srv/shared", 3600)).await.unwrap().into_inner();
    let keyed = ActionRequest::write_file("/srv/shared/report.md").request_id("write-1");
    let allowed = harness.authorize(&alice(), keyed.clone()).await.unwrap();
    assert_eq!((allowed.outcome, allowed.grant_ids.clone()), (Outcome::Allow, vec![created.grant_id.clone()]));
    // While the grant stands, the same id is the same answer, in a replay record.
    let replayed = harness.authorize(&alice(), keyed.clone()).await.unwrap();
    assert_eq!(Decision { audit_seq: allowed.audit_seq, ..replayed.clone() }, allowed);
    let last = monitor.audit().await.last().cloned().unwrap();
    assert_eq!((last.kind.as_str(), last.seq), ("replay", replayed.audit_seq));

    admin.revoke_grant(pb::RevokeGrantRequest { grant_id: created.grant_id }).await.unwrap();
    let again = harness.authorize(&alice(), keyed.clone()).await.unwrap();
    assert_eq!(again.outcome, Outcome::Deny, "decided afresh: {:?}", again.reasons);
    let last = monitor.audit().await.last().cloned().unwrap();
    assert_eq!((last.seq, last.outcome), (again.audit_seq, pb::Outcome::Deny as i32));
    // And that denial is what the id now replays.
    let replayed = harness.authorize(&alice(), keyed).await.unwrap();
    assert_eq!(Decision { audit_seq: again.audit_seq, ..replayed }, again);
}

#[tokio::test]
async fn a_window_over_a_parent_needs_an_approver_of_every_group() {
    let (monitor, _policies) = TestMonitor::start_token_approvals().await;
    let harness = monitor.harness().await;
    let pending = harness.authorize(&alice(), ActionRequest::exec(["git", "push", "origin", "main"])).await.unwrap();
    let mut release = monitor.approvals(crate::support::RELEASE_APPROVER).await;
    let status = release
        .resolve(pb::ResolveRequest {
            approval_id: pending.approval_id.clone(),
            approve: true,
            grant_for_seconds: 900,
            grant_scope: "parent".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    // The exact request for a window is fine for the release manager.
    let approved = release
        .resolve(pb::ResolveRequest {
            approval_id: pending.approval_id,
            approve: true,
            grant_for_seconds: 900,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(approved.state, pb::ApprovalState::Approved as i32);
    assert!(approved.decision.unwrap().reasons.iter().any(|r| r.contains("as grant `grt-")));
}
