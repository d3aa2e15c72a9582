//! Lockdown: a locked session, user or agent kind is denied at once, its
//! waiting approvals are denied, and no replay or wait gets past a lock.

use tonic::Code;
use warden_proto::v1 as pb;
use warden_sdk::{ActionRequest, Actor, Error, Outcome};

use crate::support::{APPROVER, TestMonitor};

fn alice() -> Actor {
    Actor::new("alice", "claude-code", "s1")
}

#[tokio::test]
async fn lockdown_denies_at_once_and_cancels_pending_approvals() {
    let monitor = TestMonitor::start().await;
    let harness = monitor.harness().await;
    let waiting = {
        let harness = harness.clone();
        tokio::spawn(
            async move { harness.check(&alice(), ActionRequest::exec(["git", "push", "origin", "main"])).await },
        )
    };
    let approvals = monitor.approvals(APPROVER).await;
    crate::support::eventually("the push waiting for approval", || {
        let mut approvals = approvals.clone();
        async move {
            let list = approvals.list_pending(pb::ListPendingRequest::default()).await.unwrap().into_inner();
            (!list.approvals.is_empty()).then_some(())
        }
    })
    .await;
    let mut admin = monitor.admin().await;
    let locked = admin
        .lock_session(pb::LockSessionRequest {
            session: "s1".into(),
            reason: "prompt injection suspected".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(locked.target, "session:s1");
    assert_eq!(locked.denied_approvals.len(), 1);
    let Err(Error::Denied(decision)) = waiting.await.unwrap() else { panic!("a locked session's approval must deny") };
    assert!(
        decision.reasons.iter().any(|r| r.contains("session `s1` is locked by `security`")),
        "{:?}",
        decision.reasons
    );

    let read = || ActionRequest::read_file("/home/alice/project/src/main.rs");
    let denied = harness.authorize(&alice(), read()).await.unwrap();
    assert_eq!(denied.outcome, Outcome::Deny);
    assert_eq!(denied.reasons, ["session `s1` is locked by `security`: prompt injection suspected"]);
    let session = admin
        .get_session(pb::GetSessionRequest { session: "s1".into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert!(session.locked);
    // Other sessions go on.
    assert_eq!(
        harness.authorize(&Actor::new("alice", "claude-code", "s2"), read()).await.unwrap().outcome,
        Outcome::Allow
    );

    admin.unlock_session(pb::UnlockSessionRequest { session: "s1".into(), ..Default::default() }).await.unwrap();
    assert_eq!(harness.authorize(&alice(), read()).await.unwrap().outcome, Outcome::Allow);

    // A whole agent kind, then a whole user.
    admin.lock_session(pb::LockSessionRequest { agent: "claude-code".into(), ..Default::default() }).await.unwrap();
    assert_eq!(
        harness.authorize(&Actor::new("bob", "claude-code", "b9"), read()).await.unwrap().outcome,
        Outcome::Deny
    );
    assert_eq!(harness.authorize(&Actor::new("alice", "codex", "c1"), read()).await.unwrap().outcome, Outcome::Allow);
    admin.lock_session(pb::LockSessionRequest { user: "alice".into(), ..Default::default() }).await.unwrap();
    assert_eq!(harness.authorize(&Actor::new("alice", "codex", "c1"), read()).await.unwrap().outcome, Outcome::Deny);
    let status = admin.lock_session(pb::LockSessionRequest::default()).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn a_lock_stops_replays_and_waits_too() {
    let monitor = TestMonitor::start().await;
    let harness = monitor.harness().await;
    let keyed = ActionRequest::read_file("/home/alice/project/a.rs").request_id("same-id");
    assert_eq!(harness.authorize(&alice(), keyed.clone()).await.unwrap().outcome, Outcome::Allow);
    let mut admin = monitor.admin().await;
    admin.lock_session(pb::LockSessionRequest { session: "s1".into(), ..Default::default() }).await.unwrap();
    // The same request id is decided afresh: denied, and recorded.
    let replayed = harness.authorize(&alice(), keyed).await.unwrap();
    assert_eq!(replayed.outcome, Outcome::Deny);
    assert_eq!(monitor.audit().await.last().unwrap().outcome, pb::Outcome::Deny as i32);
}
