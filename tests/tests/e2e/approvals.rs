//! Human approval end to end: a request waits, an approver answers, the
//! harness's fail-closed `check()` gets the final decision.

use std::time::Duration;

use tokio_stream::StreamExt;
use tonic::Code;
use warden_proto::v1 as pb;
use warden_sdk::{ActionRequest, Actor, Error, Outcome};

use crate::support::{APPROVER, HARNESS, PLAIN_APPROVER, PolicyDir, RELEASE_APPROVER, TestMonitor};

fn alice() -> Actor {
    Actor::new("alice", "claude-code", "s1")
}

fn push_main() -> ActionRequest {
    ActionRequest::exec(["git", "push", "origin", "main"]).justification("release 1.4")
}

fn resolve(approval_id: &str, approve: bool, note: &str) -> pb::ResolveRequest {
    pb::ResolveRequest { approval_id: approval_id.into(), approve, note: note.into(), ..Default::default() }
}

/// Waits until the monitor lists a pending approval, and returns it.
async fn first_pending(monitor: &TestMonitor) -> pb::Approval {
    let approvals = monitor.approvals(APPROVER).await;
    crate::support::eventually("a pending approval", || {
        let mut approvals = approvals.clone();
        async move {
            let list = approvals.list_pending(pb::ListPendingRequest::default()).await.unwrap().into_inner();
            list.approvals.into_iter().next()
        }
    })
    .await
}

#[tokio::test]
async fn an_approved_request_is_allowed_for_the_waiting_harness() {
    let (monitor, _policies) = TestMonitor::start_token_approvals().await;
    let harness = monitor.harness().await;
    let waiting = tokio::spawn(async move { harness.check(&alice(), push_main()).await });

    let approval = first_pending(&monitor).await;
    assert_eq!(approval.state, pb::ApprovalState::Pending as i32);
    assert_eq!(approval.policy_ids, ["commands.protected-branch-push"]);
    assert_eq!(approval.approvers, ["release-managers"]);
    assert_eq!(approval.permit_ids, ["commands.developer-tools"]);
    assert_eq!(approval.resource, r#"Command::"git push origin main""#);
    let request = approval.request.as_ref().unwrap();
    assert_eq!(request.justification, "release 1.4");
    assert_eq!(approval.harness, "test-harness");
    assert_eq!(approval.request_hash.len(), 64);

    let mut approvals = monitor.approvals(RELEASE_APPROVER).await;
    let resolved = approvals
        .resolve(pb::ResolveRequest {
            request_hash: approval.request_hash.clone(),
            ..resolve(&approval.approval_id, true, "ship it")
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resolved.state, pb::ApprovalState::Approved as i32);
    assert_eq!(resolved.resolved_by, "release-oncall");

    let decision = waiting.await.unwrap().expect("the harness is allowed once approved");
    assert_eq!(decision.outcome, Outcome::Allow);
    assert_eq!(decision.resolved_by, "release-oncall");
    assert_eq!(decision.note, "ship it");
    assert_eq!(decision.approval_id, approval.approval_id);
    assert_eq!(decision.policy_ids, ["commands.developer-tools"]);

    // Both steps are in the chain.
    let records = monitor.audit().await;
    let kinds: Vec<_> = records.iter().map(|r| (r.kind.as_str(), r.outcome)).collect();
    assert_eq!(kinds, [("decision", pb::Outcome::Pending as i32), ("approval.approved", pb::Outcome::Allow as i32)]);
    assert_eq!(records[1].caller, "release-oncall");
    assert_eq!(decision.audit_seq, records[1].seq);
    assert!(monitor.verify().await.ok);

    // Resolving twice is refused and says how it ended.
    let status = approvals.resolve(resolve(&approval.approval_id, false, "")).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert!(status.message().contains("already approved by `release-oncall`"), "{}", status.message());
}

#[tokio::test]
async fn a_denial_reaches_the_agent_with_its_message() {
    let monitor = TestMonitor::start().await;
    let harness = monitor.harness().await;
    let waiting = tokio::spawn(async move { harness.check(&alice(), push_main()).await });
    let approval = first_pending(&monitor).await;
    let mut approvals = monitor.approvals(APPROVER).await;
    let resolved =
        approvals.resolve(resolve(&approval.approval_id, false, "not on a Friday")).await.unwrap().into_inner();
    assert_eq!(resolved.state, pb::ApprovalState::Denied as i32);
    let Err(Error::Denied(decision)) = waiting.await.unwrap() else { panic!("a denied request must not pass") };
    assert_eq!(decision.note, "not on a Friday");
    assert_eq!(decision.resolved_by, "oncall");
    assert!(decision.reasons.iter().any(|r| r == "denied by `oncall`"), "{:?}", decision.reasons);
}

#[tokio::test]
async fn silence_denies_at_the_deadline() {
    let schema = std::fs::read_to_string(crate::support::bundled_policies().join("schema.cedarschema")).unwrap();
    let entities = std::fs::read_to_string(crate::support::bundled_policies().join("entities.json")).unwrap();
    let policies = PolicyDir::new(
        &schema,
        &[(
            "p.cedar",
            r#"
            @id("read") permit (principal, action == Action::"fs.read", resource);
            @id("quick") @reason("needs a quick yes") @timeout("10m")
            forbid (principal, action == Action::"fs.read", resource) unless { context.approved };
            "#,
        )],
        &entities,
    );
    let monitor = TestMonitor::start_with(policies.path()).await;
    let harness = monitor.harness().await;
    let waiting = tokio::spawn(async move { harness.check(&alice(), ActionRequest::read_file("/tmp/x")).await });
    // Waiting, until the monitor's clock passes the deadline; then the
    // sweeper denies it and the waiting harness hears so.
    first_pending(&monitor).await;
    assert!(!waiting.is_finished());
    monitor.advance_clock(Duration::from_secs(10 * 60 + 1));
    let result = waiting.await.unwrap();
    let Err(Error::Denied(decision)) = result else { panic!("expiry must deny: {result:?}") };
    assert!(decision.reasons.iter().any(|r| r.starts_with("no approver answered before")), "{:?}", decision.reasons);
    assert_eq!(decision.resolved_by, "");

    // Expired is final: an approver can no longer resolve it. It expired at
    // its deadline, not before, by the monitor's own record.
    let records = monitor.audit().await;
    let expired = records.last().unwrap();
    assert_eq!(expired.kind, "approval.expired");
    let asked = records.iter().find(|r| r.kind == "decision" && r.outcome == pb::Outcome::Pending as i32).unwrap();
    let at = |r: &pb::AuditRecord| r.time.as_ref().map_or(0, |t| t.seconds * 1_000_000_000 + i64::from(t.nanos));
    assert!(at(expired) - at(asked) >= 600_000_000_000, "expired before its 10 min deadline");
    let mut approvals = monitor.approvals(APPROVER).await;
    let status = approvals.resolve(resolve(&decision.approval_id, true, "")).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert!(status.message().contains("expired at"), "{}", status.message());
    assert!(approvals.list_pending(pb::ListPendingRequest::default()).await.unwrap().into_inner().approvals.is_empty());
}

#[tokio::test]
async fn only_approvers_may_resolve_and_only_for_their_groups() {
    let (monitor, _policies) = TestMonitor::start_token_approvals().await;
    let pending = monitor.harness().await.authorize(&alice(), push_main()).await.unwrap();
    assert_eq!(pending.outcome, Outcome::Pending);

    // A harness token (or an admin's) is refused on the Approvals service.
    for token in [HARNESS, crate::support::ADMIN] {
        let mut approvals = monitor.approvals(token).await;
        let status = approvals.resolve(resolve(&pending.approval_id, true, "")).await.unwrap_err();
        assert_eq!(status.code(), Code::PermissionDenied, "{token}");
        let status = approvals.list_pending(pb::ListPendingRequest::default()).await.unwrap_err();
        assert_eq!(status.code(), Code::PermissionDenied);
    }
    // An approver outside @approvers("release-managers").
    let mut plain = monitor.approvals(PLAIN_APPROVER).await;
    let status = plain.resolve(resolve(&pending.approval_id, true, "")).await.unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied);
    assert!(status.message().contains("`release-managers`"), "{}", status.message());

    // The approval is bound to the request the approver was shown.
    let mut release = monitor.approvals(RELEASE_APPROVER).await;
    let status = release
        .resolve(pb::ResolveRequest { request_hash: "0".repeat(64), ..resolve(&pending.approval_id, true, "") })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    // A window longer than the monitor allows, or of an unknown scope.
    let status = release
        .resolve(pb::ResolveRequest { grant_for_seconds: 30 * 86_400, ..resolve(&pending.approval_id, true, "") })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().starts_with("grant_for_seconds:"), "{}", status.message());
    let status = release
        .resolve(pb::ResolveRequest {
            grant_for_seconds: 60,
            grant_scope: "sideways".into(),
            ..resolve(&pending.approval_id, true, "")
        })
        .await
        .unwrap_err();
    assert!(status.message().starts_with("grant_scope:"), "{}", status.message());
    let status = release.resolve(resolve("apr-missing", true, "")).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);

    // Nothing above changed the approval; the right approver still can.
    let approved = release.resolve(resolve(&pending.approval_id, true, "")).await.unwrap().into_inner();
    assert_eq!(approved.state, pb::ApprovalState::Approved as i32);
    // A request the plain approver may answer: recursive delete names no group.
    let pending =
        monitor.harness().await.authorize(&alice(), ActionRequest::exec(["rm", "-r", "build"])).await.unwrap();
    let denied = plain.resolve(resolve(&pending.approval_id, false, "use cargo clean")).await.unwrap().into_inner();
    assert_eq!(denied.state, pb::ApprovalState::Denied as i32);
}

#[tokio::test]
async fn a_waiting_harness_gets_its_answer_across_a_monitor_restart() {
    let (mut monitor, _policies) = TestMonitor::start_token_approvals().await;
    let harness = monitor.harness().await;
    let waiting = tokio::spawn(async move { harness.check(&alice(), push_main()).await });
    let approval = first_pending(&monitor).await;

    monitor.restart().await;

    // Still pending after the restart, and the harness is still waiting.
    let listed =
        monitor.approvals(APPROVER).await.list_pending(pb::ListPendingRequest::default()).await.unwrap().into_inner();
    assert_eq!(listed.approvals.len(), 1);
    assert_eq!(listed.approvals[0].approval_id, approval.approval_id);
    assert!(!waiting.is_finished());

    monitor.approvals(APPROVER).await.resolve(resolve(&approval.approval_id, true, "")).await.unwrap();
    let decision = tokio::time::timeout(Duration::from_secs(30), waiting).await.unwrap().unwrap().unwrap();
    assert_eq!(decision.outcome, Outcome::Allow);
    assert!(monitor.verify().await.ok);
}

#[tokio::test]
async fn approving_re_evaluates_against_the_policies_of_that_moment() {
    let dir = crate::support::copy_bundled_token_approvals();
    let mut monitor = TestMonitor::start_with(dir.path().to_owned()).await;
    let pending = monitor.harness().await.authorize(&alice(), push_main()).await.unwrap();
    assert_eq!(pending.outcome, Outcome::Pending);

    // The security team freezes pushes while the request waits.
    std::fs::write(
        dir.path().join("freeze.cedar"),
        "@id(\"freeze\") @reason(\"release freeze\")\nforbid (principal, action == Action::\"exec\", resource in Program::\"git\") when { resource.args.contains(\"push\") };\n",
    )
    .unwrap();
    monitor.restart().await;

    let resolved =
        monitor.approvals(APPROVER).await.resolve(resolve(&pending.approval_id, true, "")).await.unwrap().into_inner();
    assert_eq!(resolved.state, pb::ApprovalState::Denied as i32);
    let decision = resolved.decision.unwrap();
    assert_eq!(decision.outcome, pb::Outcome::Deny as i32);
    assert_eq!(decision.policy_ids, ["freeze"]);
    assert!(decision.reasons[0].contains("no longer passes"), "{:?}", decision.reasons);
    // The harness sees the same.
    let final_decision =
        monitor.harness().await.await_decision(&pending.approval_id, Duration::from_millis(10)).await.unwrap();
    assert_eq!(final_decision.outcome, Outcome::Deny);
}

async fn next_event(events: &mut tonic::Streaming<pb::ApprovalEvent>) -> pb::ApprovalEvent {
    tokio::time::timeout(Duration::from_secs(10), events.next()).await.unwrap().unwrap().unwrap()
}

#[tokio::test]
async fn watchers_see_current_then_new_then_resolved() {
    let monitor = TestMonitor::start().await;
    let harness = monitor.harness().await;
    let first = harness.authorize(&alice(), push_main()).await.unwrap();
    let mut approvals = monitor.approvals(APPROVER).await;
    let mut events = approvals.watch_pending(pb::WatchPendingRequest {}).await.unwrap().into_inner();
    let current = next_event(&mut events).await;
    assert_eq!(current.kind, pb::ApprovalEventKind::Current as i32);
    assert_eq!(current.approval.unwrap().approval_id, first.approval_id);

    let second = harness.authorize(&alice(), ActionRequest::exec(["cargo", "publish"])).await.unwrap();
    let new = next_event(&mut events).await;
    assert_eq!(new.kind, pb::ApprovalEventKind::New as i32);
    assert_eq!(new.approval.unwrap().approval_id, second.approval_id);

    approvals.resolve(resolve(&second.approval_id, false, "")).await.unwrap();
    let resolved = next_event(&mut events).await;
    assert_eq!(resolved.kind, pb::ApprovalEventKind::Resolved as i32);
    let approval = resolved.approval.unwrap();
    assert_eq!((approval.approval_id, approval.state), (second.approval_id, pb::ApprovalState::Denied as i32));

    // The idempotent replay of the request now answers with the final decision.
    let again = harness.await_decision(&first.approval_id, Duration::from_millis(50)).await.unwrap();
    assert_eq!(again.outcome, Outcome::Pending);
}

#[tokio::test]
async fn a_watcher_that_does_not_read_is_cut_off_with_a_clear_status() {
    // 1,600 approvals from one harness: past its default cap.
    let monitor = TestMonitor::start_tuned(|c| c.max_pending_per_harness = 10_000).await;
    // A client with small HTTP/2 windows, so that what it does not read
    // backs up into the monitor rather than into the client's buffers.
    let channel = tonic::transport::Endpoint::from_shared(monitor.endpoint.clone())
        .unwrap()
        .initial_stream_window_size(16 * 1024)
        .initial_connection_window_size(16 * 1024)
        .connect()
        .await
        .unwrap();
    let mut approvals = pb::approvals_client::ApprovalsClient::with_interceptor(
        channel,
        warden_sdk::BearerToken::new(APPROVER).unwrap(),
    );
    // Opened, then never read while events pile up.
    let mut events = approvals.watch_pending(pb::WatchPendingRequest {}).await.unwrap().into_inner();
    let harness = monitor.harness().await;
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let harness = harness.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..200 {
                let request = ActionRequest::exec(["rm", "-r", &format!("w{worker}/dir{n}")]);
                // One session each: a session may only have a few approvals waiting.
                let actor = Actor::new("alice", "claude-code", format!("w{worker}-{n}"));
                let decision = harness.authorize(&actor, request).await.unwrap();
                assert_eq!(decision.outcome, Outcome::Pending);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    // The monitor kept deciding; the watcher finds out it was cut off.
    let mut received = 0;
    let status = loop {
        match tokio::time::timeout(Duration::from_secs(10), events.next()).await.unwrap() {
            Some(Ok(_)) => received += 1,
            Some(Err(status)) => break status,
            None => panic!("the stream ended without saying why after {received} events"),
        }
    };
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("watch again"), "{}", status.message());
    assert!(received < 1600, "{received}");
}
