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

    // Every step is in the chain: the decision, the approval, and its use
    // by the answer to the waiting harness.
    let records = monitor.audit().await;
    let kinds: Vec<_> = records.iter().map(|r| (r.kind.as_str(), r.outcome)).collect();
    assert_eq!(
        kinds,
        [
            ("decision", pb::Outcome::Pending as i32),
            ("approval.approved", pb::Outcome::Allow as i32),
            ("approval.used", pb::Outcome::Allow as i32)
        ]
    );
    assert_eq!(records[1].caller, "release-oncall");
    assert_eq!(records[2].caller, "test-harness");
    assert_eq!(
        records[2].reasons[0],
        format!(
            "answers approval `{}` (approved in audit record #{}) to the harness waiting on it",
            approval.approval_id, records[1].seq
        )
    );
    assert_eq!(decision.audit_seq, records[2].seq);
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

/// Asks for `git push origin main` under `request_id` without waiting.
async fn ask(harness: &warden_sdk::Client, request_id: &str) -> warden_sdk::Decision {
    harness.authorize(&alice(), push_main().request_id(request_id)).await.unwrap()
}

fn spent_reason(approval_id: &str, used_seq: u64) -> String {
    format!(
        "approval `{approval_id}` was used: a person's approval lets the action run once, and it was given in audit \
         record #{used_seq}; to run it again, ask under a new request id (a person decides again)"
    )
}

/// What a person approved runs once: the waiting harness gets the ALLOW,
/// and every later ask of the same request id (a restarted harness, a
/// second worker, a model repeating a tool call id) or wait on the same
/// approval is refused, naming the approval's use, and recorded.
#[tokio::test]
async fn an_approval_is_spent_by_its_first_answer() {
    let (monitor, _policies) = TestMonitor::start_token_approvals().await;
    let harness = monitor.harness().await;
    let waiting = {
        let harness = harness.clone();
        tokio::spawn(async move { harness.check(&alice(), push_main().request_id("push-1")).await })
    };
    let approval = first_pending(&monitor).await;
    monitor.approvals(RELEASE_APPROVER).await.resolve(resolve(&approval.approval_id, true, "once")).await.unwrap();
    let allowed = waiting.await.unwrap().unwrap();
    assert_eq!(allowed.outcome, Outcome::Allow);

    // A second harness process asks again with the same request id.
    let again = ask(&harness, "push-1").await;
    assert_eq!(again.outcome, Outcome::Deny);
    assert_eq!(again.reasons, [spent_reason(&approval.approval_id, allowed.audit_seq)]);
    assert_eq!(again.policy_ids, ["commands.protected-branch-push"]);
    assert_eq!(again.approval_id, approval.approval_id);
    // And waits on the approval again.
    let awaited = harness.await_decision(&approval.approval_id, Duration::from_millis(10)).await.unwrap();
    assert_eq!(awaited.outcome, Outcome::Deny);
    assert_eq!(awaited.reasons, again.reasons);

    let records = monitor.audit().await;
    let tail: Vec<_> = records.iter().skip(2).map(|r| (r.kind.as_str(), r.outcome, r.seq)).collect();
    assert_eq!(
        tail,
        [
            ("approval.used", pb::Outcome::Allow as i32, allowed.audit_seq),
            ("replay", pb::Outcome::Deny as i32, again.audit_seq),
            ("replay", pb::Outcome::Deny as i32, awaited.audit_seq),
        ]
    );
    assert_eq!(
        records[3].reasons[0],
        format!("repeats audit record #{}: request id `push-1` asked again by `test-harness`", records[0].seq)
    );
    assert_eq!(records[3].reasons[1], spent_reason(&approval.approval_id, allowed.audit_seq));

    // Running it again is a new request: a new approval.
    let fresh = ask(&harness, "push-2").await;
    assert_eq!(fresh.outcome, Outcome::Pending);
    assert_ne!(fresh.approval_id, approval.approval_id);
    assert!(monitor.verify().await.ok);
}

/// A harness that did not wait (it crashed, or asks again later) gets the
/// approved ALLOW from its first re-ask of the request id, once; a wait on
/// the approval after that is refused.
#[tokio::test]
async fn the_first_re_ask_of_an_approved_request_gets_its_allow_once() {
    let (monitor, _policies) = TestMonitor::start_token_approvals().await;
    let harness = monitor.harness().await;
    let pending = ask(&harness, "push-1").await;
    assert_eq!(pending.outcome, Outcome::Pending);
    // Asked again while it waits: still PENDING, recorded.
    assert_eq!(ask(&harness, "push-1").await.outcome, Outcome::Pending);
    monitor.approvals(RELEASE_APPROVER).await.resolve(resolve(&pending.approval_id, true, "")).await.unwrap();

    let allowed = ask(&harness, "push-1").await;
    assert_eq!((allowed.outcome, allowed.resolved_by.as_str()), (Outcome::Allow, "release-oncall"));
    let refused = ask(&harness, "push-1").await;
    assert_eq!(refused.reasons, [spent_reason(&pending.approval_id, allowed.audit_seq)]);
    let awaited = harness.await_decision(&pending.approval_id, Duration::from_millis(10)).await.unwrap();
    assert_eq!(awaited.outcome, Outcome::Deny);
    let kinds: Vec<_> = monitor.audit().await.iter().map(|r| (r.kind.clone(), r.outcome)).collect();
    let want = [
        ("decision", pb::Outcome::Pending),
        ("replay", pb::Outcome::Pending),
        ("approval.approved", pb::Outcome::Allow),
        ("replay", pb::Outcome::Allow),
        ("replay", pb::Outcome::Deny),
        ("replay", pb::Outcome::Deny),
    ];
    assert_eq!(kinds, want.map(|(k, o)| (k.to_owned(), o as i32)));
}

/// A lock stops an approved ALLOW without using it up; that it was used
/// survives a restart.
#[tokio::test]
async fn a_lock_stops_the_use_and_a_use_survives_a_restart() {
    let (mut monitor, _policies) = TestMonitor::start_token_approvals().await;
    let harness = monitor.harness().await;
    let pending = ask(&harness, "push-1").await;
    monitor.approvals(RELEASE_APPROVER).await.resolve(resolve(&pending.approval_id, true, "")).await.unwrap();
    let mut admin = monitor.admin().await;
    let lock = pb::LockSessionRequest { session: "s1".into(), reason: "incident".into(), ..Default::default() };
    admin.lock_session(lock).await.unwrap();
    let locked = harness.await_decision(&pending.approval_id, Duration::from_millis(10)).await.unwrap();
    assert_eq!(locked.outcome, Outcome::Deny);
    assert!(locked.reasons.iter().any(|r| r.contains("is locked by") && r.ends_with("incident")), "{locked:?}");
    admin.unlock_session(pb::UnlockSessionRequest { session: "s1".into(), ..Default::default() }).await.unwrap();
    let allowed = ask(&harness, "push-1").await;
    assert_eq!(allowed.outcome, Outcome::Allow);

    monitor.restart().await;
    let harness = monitor.harness().await;
    let refused = ask(&harness, "push-1").await;
    assert_eq!(refused.reasons, [spent_reason(&pending.approval_id, allowed.audit_seq)]);
    assert!(monitor.verify().await.ok);
}

/// However many ask at once, one gets the ALLOW.
#[tokio::test]
async fn concurrent_re_asks_of_an_approved_request_get_one_allow() {
    let (monitor, _policies) = TestMonitor::start_token_approvals().await;
    let harness = monitor.harness().await;
    let pending = ask(&harness, "push-1").await;
    monitor.approvals(RELEASE_APPROVER).await.resolve(resolve(&pending.approval_id, true, "")).await.unwrap();
    let mut tasks = Vec::new();
    for n in 0..16 {
        let harness = harness.clone();
        let approval_id = pending.approval_id.clone();
        tasks.push(tokio::spawn(async move {
            if n % 2 == 0 {
                ask(&harness, "push-1").await
            } else {
                harness.await_decision(&approval_id, Duration::from_millis(10)).await.unwrap()
            }
        }));
    }
    let mut allowed = 0;
    for task in tasks {
        if task.await.unwrap().outcome == Outcome::Allow {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 1);
    let used = monitor
        .audit()
        .await
        .iter()
        .filter(|r| r.outcome == pb::Outcome::Allow as i32 && r.kind != "approval.approved")
        .count();
    assert_eq!(used, 1);
}

/// A window approval is a grant: the request it was asked for, and the
/// same action again under other request ids, are allowed while it lasts.
#[tokio::test]
async fn a_window_approval_is_a_grant_and_is_not_spent() {
    let (monitor, _policies) = TestMonitor::start_token_approvals().await;
    let harness = monitor.harness().await;
    let pending = ask(&harness, "push-1").await;
    let window = pb::ResolveRequest { grant_for_seconds: 900, ..resolve(&pending.approval_id, true, "") };
    monitor.approvals(RELEASE_APPROVER).await.resolve(window).await.unwrap();
    for id in ["push-1", "push-1", "push-2", "push-2"] {
        let decision = ask(&harness, id).await;
        assert_eq!(decision.outcome, Outcome::Allow, "{id}: {decision:?}");
    }
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
