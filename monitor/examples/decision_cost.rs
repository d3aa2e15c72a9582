//! Prints what one decision costs: the pure decision (normalize + Cedar,
//! twice for PENDING) in-process, and a whole `Authorize` over gRPC on
//! loopback with its durable audit record, one at a time and 32 at a time.
//!
//! `cargo run --release -p warden-monitor --example decision_cost [-- ITERATIONS [fsync|flush]]`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::Path;
use std::time::{Duration, Instant};

use warden_monitor::auth::{CredentialConfig, Role};
use warden_monitor::decision::{DecisionConfig, SessionFacts, decide};
use warden_monitor::normalize::{Actor, RequestInput, ResourceInput, normalize};
use warden_monitor::policy::PolicySnapshot;
use warden_monitor::server::{ServerConfig, start};
use warden_sdk::{ActionRequest, BearerToken, Client};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort_unstable();
    println!(
        "{name:<44} n={:<6} p50={:>9.1?} p90={:>9.1?} p99={:>9.1?} max={:>9.1?}",
        samples.len(),
        percentile(&samples, 0.5),
        percentile(&samples, 0.9),
        percentile(&samples, 0.99),
        samples[samples.len() - 1]
    );
}

fn input(path: &str, argv: Option<&[&str]>) -> RequestInput {
    RequestInput {
        request_id: String::new(),
        actor: Actor { user: "alice".into(), agent: "claude-code".into(), session: "s1".into() },
        action: if argv.is_some() { "exec".into() } else { "fs.read".into() },
        resource: match argv {
            Some(argv) => {
                ResourceInput::Command { argv: argv.iter().map(|a| (*a).to_owned()).collect(), cwd: String::new() }
            }
            None => ResourceInput::File { path: path.into(), cwd: String::new(), pattern: false },
        },
        justification: String::new(),
        context_json: String::new(),
    }
}

#[tokio::main]
async fn main() {
    let iterations: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(5000);
    // `flush` to measure without fsync after each group commit.
    let durability = match std::env::args().nth(2).as_deref() {
        Some("flush") => warden_monitor::store::Durability::Flush,
        _ => warden_monitor::store::Durability::Fsync,
    };
    let policies = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    let snapshot = PolicySnapshot::load(&policies).unwrap();
    println!(
        "bundled policies: {} policies, {} iterations per row, durability {durability:?}",
        snapshot.len(),
        iterations
    );
    let facts = SessionFacts { harness: "bench".into(), ..SessionFacts::default() };
    let config = DecisionConfig::default();

    for (name, request) in [
        ("pure decide: ALLOW fs.read (1 evaluation)", input("/home/alice/project/src/main.rs", None)),
        ("pure decide: DENY fs.read (2 evaluations)", input("/etc/passwd", None)),
        ("pure decide: PENDING git push (2 evaluations)", input("", Some(&["git", "push", "origin", "main"]))),
    ] {
        let normalized = normalize(&request).unwrap();
        let mut samples = Vec::with_capacity(iterations);
        for _ in 0..iterations {
            let start = Instant::now();
            let normalized = normalize(&request).unwrap();
            let evaluation = decide(&snapshot, &normalized, &facts, time::OffsetDateTime::now_utc(), &config).unwrap();
            std::hint::black_box(evaluation);
            samples.push(start.elapsed());
        }
        std::hint::black_box(normalized);
        report(name, samples);
    }

    // The whole path over gRPC, with a durable audit record per decision.
    let data = tempfile::tempdir().unwrap();
    let token = "wdn_bench_token";
    let server = start(
        ServerConfig {
            durability,
            ..ServerConfig::new(
                policies,
                data.path().to_owned(),
                vec![CredentialConfig::for_token("bench", Role::Harness, token, &["*"])],
            )
        },
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
    )
    .await
    .unwrap();
    let channel =
        tonic::transport::Channel::from_shared(format!("http://{}", server.addr())).unwrap().connect().await.unwrap();
    let client = Client::with_channel(channel, BearerToken::new(token).unwrap());
    let actor = warden_sdk::Actor::new("alice", "claude-code", "s1");
    for _ in 0..200 {
        client.authorize(&actor, ActionRequest::read_file("/home/alice/project/warmup.rs")).await.unwrap();
    }
    let mut samples = Vec::with_capacity(iterations);
    let wall = Instant::now();
    for n in 0..iterations {
        let start = Instant::now();
        client.authorize(&actor, ActionRequest::read_file(format!("/home/alice/project/f{n}.rs"))).await.unwrap();
        samples.push(start.elapsed());
    }
    let rate = iterations as f64 / wall.elapsed().as_secs_f64();
    report("gRPC Authorize, 1 at a time (audited)", samples);
    println!("{:<44} {rate:.0} decisions/s", "");

    let concurrency = 32;
    let per_task = iterations / concurrency;
    let wall = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..concurrency {
        let client = client.clone();
        let actor = actor.clone();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::with_capacity(per_task);
            for n in 0..per_task {
                let start = Instant::now();
                client
                    .authorize(&actor, ActionRequest::read_file(format!("/home/alice/project/t{t}/f{n}.rs")))
                    .await
                    .unwrap();
                samples.push(start.elapsed());
            }
            samples
        }));
    }
    let mut samples = Vec::new();
    for task in tasks {
        samples.extend(task.await.unwrap());
    }
    let rate = samples.len() as f64 / wall.elapsed().as_secs_f64();
    report("gRPC Authorize, 32 at a time (audited)", samples);
    println!("{:<44} {rate:.0} decisions/s", "");
    server.stop().await.unwrap();
}
