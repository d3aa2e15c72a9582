//! Times `Client::check` for an allowed read, one call at a time, and prints
//! the median and 99th percentile: the Rust side of
//! `sdk/python/benchmarks/check_latency.py`, which starts the monitor and
//! runs this next to the Python clients.
//!
//! `WARDEN_ENDPOINT=… WARDEN_TOKEN_FILE=… ./target/release/examples/check_latency 2000`

use std::process::ExitCode;
use std::time::Instant;

use warden_sdk::{ActionRequest, Actor, Client};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let calls: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(2000);
    let client = match Client::from_env().await {
        Ok(client) => client,
        Err(e) => {
            eprintln!("check_latency: {e}");
            return ExitCode::FAILURE;
        }
    };
    let actor = Actor::new("alice", "bench", "rust-latency");
    let mut micros = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        if let Err(e) = client.check(&actor, ActionRequest::read_file("/home/alice/project/README.md")).await {
            eprintln!("check_latency: {e}");
            return ExitCode::FAILURE;
        }
        micros.push(started.elapsed().as_secs_f64() * 1e6);
    }
    micros.sort_by(f64::total_cmp);
    let at = |q: f64| micros.get(((micros.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(f64::NAN);
    println!("p50_us={:.0} p99_us={:.0}", at(0.5), at(0.99));
    ExitCode::SUCCESS
}
