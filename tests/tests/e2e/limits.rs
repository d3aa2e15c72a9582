//! Limits: rate limits per harness and per session, a cap on waiting
//! approvals, nesting and size of what a harness sends.

use tonic::Code;
use warden_proto::v1 as pb;
use warden_sdk::{ActionRequest, Actor, Outcome};

use crate::support::{HARNESS, LIMITED, TestMonitor, file, request};

#[tokio::test]
async fn a_harness_over_its_rate_is_refused_with_a_retry_hint_and_audited_once_per_burst() {
    let monitor = TestMonitor::start().await;
    let mut limited = monitor.authority(LIMITED).await;
    let mut refused = Vec::new();
    for n in 0..8 {
        let mut r = request("fs.read", file(&format!("/home/alice/project/{n}.rs")));
        r.actor.as_mut().unwrap().session = "rl".into();
        match limited.authorize(r).await {
            Ok(_) => {}
            Err(status) => refused.push(status),
        }
    }
    assert!(refused.len() >= 4, "a burst of 3 at 1/s lets through at most 4 of 8: {}", refused.len());
    let status = &refused[0];
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(status.message().contains("credential `slow-harness`"), "{}", status.message());
    let retry: u64 = status.metadata().get("retry-after-ms").unwrap().to_str().unwrap().parse().unwrap();
    assert!(retry > 0 && retry <= 1000, "{retry}");
    let limited_records = monitor.audit().await.into_iter().filter(|r| r.kind == "rate-limited").count();
    assert_eq!(limited_records, 1, "one record per burst, not per refusal");
    // Other harnesses are not slowed down.
    let decision = monitor
        .harness()
        .await
        .authorize(&Actor::new("alice", "claude-code", "other"), ActionRequest::read_file("/home/alice/project/x.rs"))
        .await
        .unwrap();
    assert_eq!(decision.outcome, Outcome::Allow);
}

#[tokio::test]
async fn sessions_have_their_own_rate_and_a_cap_on_waiting_approvals() {
    let monitor = TestMonitor::start_tuned(|config| {
        config.session_rate = Some(warden_monitor::ratelimit::Rate { per_second: 1.0, burst: 5 });
        config.max_pending_per_session = 2;
    })
    .await;
    let harness = monitor.harness().await;
    let busy = Actor::new("alice", "claude-code", "busy");
    let mut outcomes = Vec::new();
    for n in 0..3 {
        let decision = harness.authorize(&busy, ActionRequest::exec(["rm", "-r", &format!("dir{n}")])).await.unwrap();
        outcomes.push(decision.outcome);
        if n == 2 {
            assert!(decision.reasons[0].contains("already has 2 approvals waiting"), "{:?}", decision.reasons);
        }
    }
    assert_eq!(outcomes, [Outcome::Pending, Outcome::Pending, Outcome::Deny]);
    // Two more requests use up the burst of five; the sixth is refused.
    for _ in 0..2 {
        harness.authorize(&busy, ActionRequest::read_file("/home/alice/project/a.rs")).await.unwrap();
    }
    let refused = harness.authorize(&busy, ActionRequest::read_file("/home/alice/project/a.rs")).await;
    let Err(warden_sdk::Error::Status(status)) = refused else { panic!("not rate limited: {refused:?}") };
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(status.message().contains("session `busy`"));
    // Another session goes on.
    let other = harness
        .authorize(&Actor::new("alice", "claude-code", "calm"), ActionRequest::read_file("/home/alice/project/a.rs"))
        .await;
    assert_eq!(other.unwrap().outcome, Outcome::Allow);
}

#[tokio::test]
async fn deep_or_huge_input_is_refused() {
    let monitor = TestMonitor::start().await;
    let mut client = monitor.authority(HARNESS).await;
    let deep = format!("{{\"a\":{}1{}}}", "[".repeat(20), "]".repeat(20));
    let status = client
        .authorize(pb::AuthorizeRequest { context_json: deep, ..request("fs.read", file("/x")) })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().starts_with("context_json: nests deeper"), "{}", status.message());

    let huge = "x".repeat(2 * 1024 * 1024);
    let status = client
        .authorize(pb::AuthorizeRequest { justification: huge, ..request("fs.read", file("/x")) })
        .await
        .unwrap_err();
    // tonic's own answer to a message over the limit.
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    assert!(status.message().contains("too large"), "{}", status.message());
}
