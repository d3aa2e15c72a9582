//! Prints how soon a waiting harness hears of an approval: the time from
//! `Resolve` returning to the approver until the harness's `AwaitDecision`
//! returns, over loopback gRPC with durable audit, for N approvals.
//!
//! `cargo run --release -p warden-monitor --example approval_latency [-- N]`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::Path;
use std::time::{Duration, Instant};

use warden_monitor::auth::{CredentialConfig, Role};
use warden_monitor::server::{ServerConfig, start};
use warden_proto::v1 as pb;
use warden_sdk::{ActionRequest, Actor, BearerToken, Client, Outcome};

fn credential(name: &str, role: Role, token: &str) -> CredentialConfig {
    CredentialConfig::for_token(name, role, token, if role == Role::Harness { &["*"] } else { &[] })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[(((sorted.len() - 1) as f64) * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(1000);
    let data = tempfile::tempdir().unwrap();
    let server = start(
        ServerConfig::new(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies"),
            data.path().to_owned(),
            vec![credential("bench-harness", Role::Harness, "h"), credential("bench-approver", Role::Approver, "a")],
        ),
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
    )
    .await
    .unwrap();
    let endpoint = format!("http://{}", server.addr());
    let channel = tonic::transport::Channel::from_shared(endpoint).unwrap().connect().await.unwrap();
    let harness = Client::with_channel(channel.clone(), BearerToken::new("h").unwrap());
    let mut approver = pb::approvals_client::ApprovalsClient::with_interceptor(channel, BearerToken::new("a").unwrap());
    let actor = Actor::new("alice", "claude-code", "bench");

    let mut samples = Vec::with_capacity(rounds);
    let mut from_sent = Vec::with_capacity(rounds);
    let mut round_trip = Vec::with_capacity(rounds);
    let mut early = 0;
    for n in 0..rounds {
        let pending = harness.authorize(&actor, ActionRequest::exec(["rm", "-r", &format!("build{n}")])).await.unwrap();
        assert_eq!(pending.outcome, Outcome::Pending);
        let waiter = harness.clone();
        let approval_id = pending.approval_id.clone();
        let waiting = tokio::spawn(async move {
            let decision = waiter.await_decision(&approval_id, Duration::from_secs(30)).await.unwrap();
            (decision, Instant::now())
        });
        // Let the wait reach the monitor before answering.
        tokio::time::sleep(Duration::from_millis(3)).await;
        let request = pb::ResolveRequest { approval_id: pending.approval_id, approve: true, ..Default::default() };
        let sent = Instant::now();
        approver.resolve(request).await.unwrap();
        let resolved = Instant::now();
        round_trip.push(resolved - sent);
        let (decision, heard) = waiting.await.unwrap();
        assert_eq!(decision.outcome, Outcome::Allow);
        from_sent.push(heard - sent);
        samples.push(heard.checked_duration_since(resolved).unwrap_or_else(|| {
            early += 1;
            Duration::ZERO
        }));
    }
    let show = |name: &str, mut samples: Vec<Duration>| {
        samples.sort_unstable();
        println!(
            "{name:<52} p50={:>9.2?} p90={:>9.2?} p99={:>9.2?} max={:>9.2?}",
            percentile(&samples, 0.5),
            percentile(&samples, 0.9),
            percentile(&samples, 0.99),
            samples[samples.len() - 1]
        );
    };
    println!("{rounds} approvals, one at a time, loopback gRPC, every step durably audited");
    show("Resolve returned -> AwaitDecision returned", samples);
    println!("  ({early} waiters heard before the approver's own answer arrived; counted as 0)");
    show("Resolve sent -> AwaitDecision returned", from_sent);
    show("Resolve sent -> Resolve returned (approver's round trip)", round_trip);
    server.stop().await.unwrap();
}
