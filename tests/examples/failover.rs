//! How long a harness goes unanswered when the replica it talks to is
//! killed: two `wardend` replicas on one PostgreSQL cluster (of the
//! program's own), a harness with both endpoints (`WARDEN_ENDPOINT`'s
//! list) asking without pause, SIGKILL to the one it talks to, and the time
//! from the kill to the next answer (from the other). Several rounds; prints
//! each and the median.
//!
//!     cargo run --release -p warden-tests --example failover [ROUNDS]
//!
//! Uses `target/release/wardend` when built, else `target/debug/wardend`.

use std::path::Path;
use std::time::{Duration, Instant};

use warden_sdk::{ActionRequest, Actor, Client};
use warden_tests::postgres::PgCluster;
use warden_tests::replicas::{HARNESS, Replica};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let rounds: usize = std::env::args().nth(1).map(|r| r.parse()).transpose()?.unwrap_or(5);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let wardend = ["release", "debug"]
        .iter()
        .map(|profile| root.join("target").join(profile).join("wardend"))
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow::anyhow!("build wardend first: cargo build --release -p warden-monitor"))?;
    let Some(cluster) = PgCluster::start_or_skip("failover")? else { return Ok(()) };
    let policies = root.join("policies");
    println!("wardend: {}", wardend.display());
    let mut gaps = Vec::new();
    for round in 1..=rounds {
        let mut a = Replica::start(&wardend, &policies, &cluster.url())?;
        let b = Replica::start(&wardend, &policies, &cluster.url())?;
        let client = Client::connect(format!("{},{}", a.endpoint, b.endpoint), HARNESS).await?;
        let agent = Actor::new("alice", "claude-code", format!("failover-{round}"));
        let ask = |n: usize| ActionRequest::read_file(format!("/home/alice/project/{n}.rs"));
        // Warm: the client talks to A.
        for n in 0..200 {
            client.authorize(&agent, ask(n)).await?;
        }
        let asking = {
            let (client, agent) = (client.clone(), agent.clone());
            tokio::spawn(async move {
                // Every answer's time, until 300 after the kill.
                let mut answered = Vec::new();
                for n in 200..100_000 {
                    if client.authorize(&agent, ask(n)).await.is_ok() {
                        answered.push(Instant::now());
                    }
                    if answered.len() > 1_000 {
                        break;
                    }
                }
                answered
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        // From the moment A is gone (killed and reaped): an answer after it
        // is the other replica's.
        a.kill();
        let killed = Instant::now();
        let answered = asking.await?;
        let next = answered.iter().find(|at| **at > killed).copied();
        let Some(next) = next else { anyhow::bail!("no answer after the kill") };
        let gap = next.duration_since(killed);
        println!("round {round}: answered by the other replica {:.1} ms after the kill", gap.as_secs_f64() * 1e3);
        gaps.push(gap);
        drop(b);
    }
    gaps.sort();
    let median = gaps.get(gaps.len() / 2).copied().unwrap_or_default();
    println!("FAILOVER median={:.1}ms rounds={rounds}", median.as_secs_f64() * 1e3);
    Ok(())
}
