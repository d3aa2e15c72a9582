//! Who may call what: tokens, roles and the users a harness may act for,
//! tested from outside with raw gRPC clients.

use tonic::Code;
use warden_proto::v1 as pb;

use crate::support::{ADMIN, ALICE_ONLY, APPROVER, HARNESS, TestMonitor, file, request};

fn read_request(user: &str) -> pb::AuthorizeRequest {
    let mut r = request("fs.read", file("/home/alice/project/x"));
    if let Some(actor) = r.actor.as_mut() {
        actor.user = user.into();
    }
    r
}

#[tokio::test]
async fn a_missing_or_unknown_token_is_unauthenticated() {
    let monitor = TestMonitor::start().await;
    let mut bare = pb::authority_client::AuthorityClient::new(monitor.channel().await);
    let status = bare.authorize(read_request("alice")).await.unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");

    let mut wrong = monitor.authority("wdn_not_a_token").await;
    let status = wrong.authorize(read_request("alice")).await.unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");

    // Authentication comes before content: garbage input still gets UNAUTHENTICATED.
    let status = wrong.authorize(pb::AuthorizeRequest::default()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
    assert!(monitor.audit().await.is_empty(), "nothing was decided");
}

#[tokio::test]
async fn another_roles_token_is_refused_on_each_service() {
    let monitor = TestMonitor::start().await;
    for token in [APPROVER, ADMIN] {
        let mut authority = monitor.authority(token).await;
        let status = authority.authorize(read_request("alice")).await.unwrap_err();
        assert_eq!(status.code(), Code::PermissionDenied, "{token}: {status:?}");
    }
    // A harness token cannot read or verify the audit log.
    for token in [HARNESS, APPROVER] {
        let mut admin = monitor.admin_with(token).await;
        let status = admin.verify_audit(pb::VerifyAuditRequest {}).await.unwrap_err();
        assert_eq!(status.code(), Code::PermissionDenied, "{token}");
        let status = admin.tail_audit(pb::TailAuditRequest::default()).await.unwrap_err();
        assert_eq!(status.code(), Code::PermissionDenied, "{token}");
    }
}

#[tokio::test]
async fn a_harness_cannot_act_for_a_user_its_token_does_not_list() {
    let monitor = TestMonitor::start().await;
    let mut alice_only = monitor.authority(ALICE_ONLY).await;
    let decision = alice_only.authorize(read_request("alice")).await.unwrap().into_inner();
    assert_eq!(decision.outcome, pb::Outcome::Allow as i32);

    let status = alice_only.authorize(read_request("bob")).await.unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied);
    assert!(status.message().contains("`bob`"), "{}", status.message());

    // Nor wait on another user's approval.
    let mut all = monitor.authority(HARNESS).await;
    let mut push = request("exec", crate::support::command(&["git", "push", "origin", "main"]));
    if let Some(actor) = push.actor.as_mut() {
        actor.user = "bob".into();
        actor.session = "b1".into();
    }
    let pending = all.authorize(push).await.unwrap().into_inner();
    assert_eq!(pending.outcome, pb::Outcome::Pending as i32);
    let status = alice_only
        .await_decision(pb::AwaitDecisionRequest { approval_id: pending.approval_id, timeout_ms: 10 })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied);
}
