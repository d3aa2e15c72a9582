//! Prints what a policy change costs: loading 1,000 generated policies, the
//! time from a file write to the new decision being served, and the decision
//! latency while reloads happen.
//!
//! `cargo run --release -p warden-monitor --example reload_cost [-- ROUNDS]`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use warden_monitor::auth::{CredentialConfig, Role};
use warden_monitor::policy::PolicySnapshot;
use warden_monitor::server::{ServerConfig, start};
use warden_sdk::{ActionRequest, Actor, BearerToken, Client, Outcome};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[(((sorted.len() - 1) as f64) * p).round() as usize]
}

/// 1,000 policies over many users, groups, directories, programs and domains.
fn generated(count: usize) -> String {
    let mut out = String::new();
    for n in 0..count {
        let text = match n % 4 {
            0 => format!(
                "@id(\"gen-{n}\") @reason(\"generated\")\npermit (principal in User::\"alice\", action == Action::\"fs.read\", resource in Dir::\"/data/{n}\");\n"
            ),
            1 => format!(
                "@id(\"gen-{n}\") @reason(\"generated\")\nforbid (principal, action == Action::\"exec\", resource in Program::\"tool{n}\") unless {{ context.approved }};\n"
            ),
            2 => format!(
                "@id(\"gen-{n}\") @reason(\"generated\")\npermit (principal in Group::\"developers\", action == Action::\"http.request\", resource in Domain::\"host{n}.example\") when {{ resource.method == \"GET\" }};\n"
            ),
            _ => format!(
                "@id(\"gen-{n}\") @reason(\"generated\")\nforbid (principal, action == Action::\"fs.write\", resource) when {{ resource.path like \"/data/{n}/*\" && principal.labels.contains(\"l{n}\") }};\n"
            ),
        };
        out.push_str(&text);
    }
    out
}

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(20);
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&bundled).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(dir.path().join("generated.cedar"), generated(1000)).unwrap();

    let mut loads = Vec::new();
    let mut count = 0;
    for _ in 0..5 {
        let start = Instant::now();
        count = PolicySnapshot::load(dir.path()).unwrap().len();
        loads.push(start.elapsed());
    }
    loads.sort_unstable();
    println!("load + strict validation of {count} policies: median {:.1?} (of 5)", loads[2]);

    let data = tempfile::tempdir().unwrap();
    let server = start(
        ServerConfig::new(
            dir.path().to_owned(),
            data.path().to_owned(),
            vec![CredentialConfig::for_token("bench", Role::Harness, "h", &["*"])],
        ),
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
    )
    .await
    .unwrap();
    let channel =
        tonic::transport::Channel::from_shared(format!("http://{}", server.addr())).unwrap().connect().await.unwrap();
    let client = Client::with_channel(channel, BearerToken::new("h").unwrap());
    let alice = Actor::new("alice", "claude-code", "bench");

    // Background load: decisions that do not change, timed all along.
    let running = Arc::new(AtomicBool::new(true));
    let mut workers = Vec::new();
    for w in 0..4 {
        let client = client.clone();
        let running = Arc::clone(&running);
        let actor = Actor::new("alice", "claude-code", format!("bg{w}"));
        workers.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            while running.load(Ordering::Relaxed) {
                let start = Instant::now();
                let decision =
                    client.authorize(&actor, ActionRequest::read_file("/home/alice/project/a.rs")).await.unwrap();
                assert_eq!(decision.outcome, Outcome::Allow);
                samples.push((Instant::now(), start.elapsed()));
            }
            samples
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    let probe = || ActionRequest::read_file("/home/alice/project/frozen/x.rs");
    let mut served = Vec::new();
    let mut windows = Vec::new();
    for round in 0..rounds {
        let freeze = round % 2 == 0;
        let file = dir.path().join("freeze.cedar");
        let start = Instant::now();
        if freeze {
            std::fs::write(&file, "@id(\"freeze\") @reason(\"frozen\")\nforbid (principal, action == Action::\"fs.read\", resource in Dir::\"/home/alice/project/frozen\");\n").unwrap();
        } else {
            std::fs::remove_file(&file).unwrap();
        }
        let want = if freeze { Outcome::Deny } else { Outcome::Allow };
        loop {
            if client.authorize(&alice, probe()).await.unwrap().outcome == want {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(5), "the change did not serve");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        served.push(start.elapsed());
        windows.push((start, Instant::now()));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    running.store(false, Ordering::Relaxed);
    let mut during = Vec::new();
    let mut outside = Vec::new();
    for worker in workers {
        for (at, latency) in worker.await.unwrap() {
            if windows.iter().any(|(from, to)| at >= *from && at <= *to) {
                during.push(latency);
            } else {
                outside.push(latency);
            }
        }
    }
    served.sort_unstable();
    during.sort_unstable();
    outside.sort_unstable();
    println!(
        "file write -> new decision served, {rounds} changes: p50={:.1?} p99={:.1?} max={:.1?} (100 ms settle included)",
        percentile(&served, 0.5),
        percentile(&served, 0.99),
        served[served.len() - 1]
    );
    println!(
        "Authorize at concurrency 4 during reloads: n={} p50={:.2?} p99={:.2?} | otherwise: n={} p50={:.2?} p99={:.2?}",
        during.len(),
        percentile(&during, 0.5),
        percentile(&during, 0.99),
        outside.len(),
        percentile(&outside, 0.5),
        percentile(&outside, 0.99)
    );
    server.stop().await.unwrap();
}
