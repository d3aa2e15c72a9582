//! Replicas: a client given several endpoints finds a live one, and a call
//! that fails because its replica is down goes to the next with the same
//! request, but only a call that may be made twice.

use tonic::Code;
use tonic::transport::Endpoint;
use warden_proto::v1 as pb;
use warden_sdk::{ActionRequest, Actor, BearerToken, Client, Error, Outcome, Replicas};
use warden_tests::net::{Relay, Swallow, Untouched, dead_endpoint};

use crate::support::{ADMIN, ALICE_ONLY, APPROVER, HARNESS, TestMonitor, eventually};

fn alice() -> Actor {
    Actor::new("alice", "claude-code", "replicas")
}

/// Allowed by the bundled policies.
fn read(request_id: &str) -> ActionRequest {
    ActionRequest::read_file("/home/alice/project/src/main.rs").request_id(request_id)
}

/// The request ids of a monitor's decision records, oldest first.
async fn decided(monitor: &TestMonitor) -> Vec<String> {
    monitor.audit().await.into_iter().filter(|r| r.kind == "decision").map(|r| r.request_id).collect()
}

fn list(endpoints: &[&str]) -> String {
    endpoints.join(",")
}

#[tokio::test]
async fn a_replica_that_is_down_is_passed_over() {
    let live = TestMonitor::start().await;
    let dead = dead_endpoint().unwrap();
    let endpoints = list(&[&dead, &live.endpoint]);

    // Connecting now (the hook) and at the first call (the gates that start
    // while the monitor is down) both find the live one.
    let client = Client::connect(endpoints.clone(), HARNESS).await.unwrap();
    assert_eq!(client.authorize(&alice(), read("now-1")).await.unwrap().outcome, Outcome::Allow);
    let lazy = Client::connect_lazy(endpoints, HARNESS).await.unwrap();
    assert_eq!(lazy.authorize(&alice(), read("lazy-1")).await.unwrap().outcome, Outcome::Allow);
    // The next call starts at the replica that answered.
    assert_eq!(lazy.authorize(&alice(), read("lazy-2")).await.unwrap().outcome, Outcome::Allow);
    assert_eq!(decided(&live).await, ["now-1", "lazy-1", "lazy-2"]);

    // Every replica down: the last one's error, as with one endpoint.
    let both_dead = list(&[&dead, &dead_endpoint().unwrap()]);
    assert!(matches!(Client::connect(both_dead.clone(), HARNESS).await, Err(Error::Transport(_))));
    let lazy = Client::connect_lazy(both_dead, HARNESS).await.unwrap();
    let refused = lazy.with_timeout(std::time::Duration::from_millis(300)).authorize(&alice(), read("x")).await;
    assert!(matches!(&refused, Err(Error::Status(s)) if s.code() == Code::Unavailable), "{refused:?}");
}

#[tokio::test]
async fn calls_go_on_at_the_next_replica_when_one_stops() {
    let mut first = TestMonitor::start().await;
    let second = TestMonitor::start().await;
    let client = Client::connect(list(&[&first.endpoint, &second.endpoint]), HARNESS).await.unwrap();
    assert_eq!(client.authorize(&alice(), read("before")).await.unwrap().outcome, Outcome::Allow);
    assert_eq!(decided(&first).await, ["before"]);

    first.stop_server().await;
    assert_eq!(client.authorize(&alice(), read("after-1")).await.unwrap().outcome, Outcome::Allow);
    assert_eq!(client.authorize(&alice(), read("after-2")).await.unwrap().outcome, Outcome::Allow);
    assert_eq!(decided(&second).await, ["after-1", "after-2"]);
}

#[tokio::test]
async fn a_call_cut_off_with_its_replica_is_sent_again_with_the_same_request_id() {
    let swallow = Swallow::start().await.unwrap();
    let live = TestMonitor::start().await;
    let client = Client::connect_lazy(list(&[swallow.endpoint(), &live.endpoint]), HARNESS).await.unwrap();

    // No request id given: the SDK makes one before the first attempt.
    let decision = client.authorize(&alice(), read("")).await.unwrap();
    assert_eq!(decision.outcome, Outcome::Allow);
    assert_eq!(swallow.swallowed(), 1, "the first replica had the call");
    assert!(decision.request_id.starts_with("sdk-"), "{}", decision.request_id);
    assert_eq!(decided(&live).await, [decision.request_id]);
}

#[tokio::test]
async fn a_change_that_may_have_been_made_is_not_sent_again() {
    let swallow = Swallow::start().await.unwrap();
    let live = TestMonitor::start().await;
    let endpoints = [swallow.endpoint(), live.endpoint.as_str()]
        .map(|e| (e.to_owned(), Endpoint::from_shared(e.to_owned()).unwrap()));
    let replicas = Replicas::lazy(endpoints).unwrap();
    let mut admin = pb::admin_client::AdminClient::with_interceptor(replicas.clone(), BearerToken::new(ADMIN).unwrap());

    let grant = pb::CreateGrantRequest {
        user: "alice".into(),
        actions: vec!["fs.read".into()],
        resource_scope: "dir:/srv/shared".into(),
        ttl_seconds: 600,
        reason: "test".into(),
        ..Default::default()
    };
    let cut = admin.create_grant(grant).await.unwrap_err();
    assert_ne!(cut.code(), Code::Ok);
    assert_eq!(swallow.swallowed(), 1);
    // A read is sent again: the list comes from the live replica, without
    // the grant the first may have made.
    let grants = admin.list_grants(pb::ListGrantsRequest::default()).await.unwrap().into_inner();
    assert_eq!(swallow.swallowed(), 2);
    assert!(grants.grants.is_empty(), "{grants:?}");
    assert_eq!(replicas.current(), live.endpoint);
}

#[tokio::test]
async fn an_empty_entry_is_a_configuration_error() {
    let (untouched, endpoint) = Untouched::bind().unwrap();
    for endpoints in [format!("{endpoint},,{endpoint}"), format!("{endpoint}, "), format!(",{endpoint}")] {
        for lazy in [false, true] {
            let made = if lazy {
                Client::connect_lazy(endpoints.clone(), HARNESS).await
            } else {
                Client::connect(endpoints.clone(), HARNESS).await
            };
            let Err(Error::Config(message)) = made else { panic!("`{endpoints}` was accepted") };
            assert!(message.contains("is empty") && message.contains(&endpoints), "{message}");
        }
    }
    untouched.assert_untouched();
}

#[tokio::test]
async fn a_deliberate_refusal_is_not_sent_to_another_replica() {
    let first = TestMonitor::start().await;
    let second = TestMonitor::start().await;
    let dead = dead_endpoint().unwrap();
    let client = Client::connect_lazy(list(&[&dead, &first.endpoint, &second.endpoint]), ALICE_ONLY).await.unwrap();

    // This harness may act for alice only.
    let bob = Actor::new("bob", "claude-code", "replicas");
    let refused = client.authorize(&bob, read("bob-1")).await.unwrap_err();
    assert!(matches!(&refused, Error::Status(s) if s.code() == Code::PermissionDenied), "{refused:?}");

    let asked = |metrics: &str| {
        metrics.lines().any(|line| line.contains("\"/warden.v1.Authority/Authorize\"") && line.contains("code=\"7\""))
    };
    assert!(asked(&first.metrics().await), "the first live replica refused it");
    assert!(!second.metrics().await.contains("/warden.v1.Authority/Authorize"), "the second replica was asked");
}

#[tokio::test]
async fn a_wait_for_an_approval_goes_on_at_the_next_replica() {
    // Two endpoints of one monitor, as two replicas sharing a store are:
    // the first through a relay that crashes while the harness waits.
    let (monitor, _policies) = TestMonitor::start_token_approvals().await;
    let relay = Relay::start(monitor.endpoint.trim_start_matches("http://").parse().unwrap()).await.unwrap();
    let client = Client::connect(list(&[relay.endpoint(), &monitor.endpoint]), HARNESS).await.unwrap();
    let push = ActionRequest::exec(["git", "push", "origin", "main"]).request_id("push-1");
    let waiting = tokio::spawn(async move { client.check(&alice(), push).await });

    let approvals = monitor.approvals(APPROVER).await;
    let approval = eventually("a pending approval", || {
        let mut approvals = approvals.clone();
        async move {
            let list = approvals.list_pending(pb::ListPendingRequest::default()).await.unwrap().into_inner();
            list.approvals.into_iter().next()
        }
    })
    .await;
    relay.cut();
    let resolve = pb::ResolveRequest { approval_id: approval.approval_id.clone(), approve: true, ..Default::default() };
    approvals.clone().resolve(resolve).await.unwrap();

    let decision = waiting.await.unwrap().expect("allowed once approved, through the other replica");
    assert_eq!((decision.outcome, decision.approval_id.as_str()), (Outcome::Allow, approval.approval_id.as_str()));
    assert_eq!(decision.request_id, "push-1");
}
