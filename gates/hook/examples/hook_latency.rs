//! What `warden-hook` costs a tool call: the hook process alone (start,
//! connect, decide, answer) N times against a warm monitor, and the time a
//! real Claude Code run takes per tool call with the hook and without it.
//!
//! ```sh
//! scripts/test-deps   # Claude Code, under target/npm
//! cargo build --release -p warden-hook --examples --bins
//! ./target/release/examples/hook_latency 200
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use warden_monitor::auth::{CredentialConfig, Role};
use warden_monitor::server::{ServerConfig, start};
use warden_tests::claude_code::{ClaudeRun, claude_binary};
use warden_tests::model_server::{ScriptedModel, Step};

const TOKEN: &str = "wdn_bench_hook";

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[(((sorted.len() - 1) as f64) * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let calls: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(200);
    let hook = std::env::current_exe().unwrap().parent().unwrap().parent().unwrap().join("warden-hook");
    assert!(hook.is_file(), "build the hook first: cargo build --release -p warden-hook --bins");
    let policies = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
    let data = tempfile::tempdir().unwrap();
    let config = ServerConfig::new(
        policies,
        data.path().to_owned(),
        vec![CredentialConfig::for_token("bench", Role::Harness, TOKEN, &["*"])],
    );
    let monitor = start(config, tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()).await.unwrap();
    let endpoint = format!("http://{}", monitor.addr());

    // The hook alone: one process per tool call, as Claude Code runs it.
    let event = json!({"session_id": "bench", "cwd": "/home/alice/project", "hook_event_name": "PreToolUse",
        "tool_name": "Read", "tool_input": {"file_path": "/home/alice/project/src/main.rs"}})
    .to_string();
    let mut took = Vec::with_capacity(calls);
    for i in 0..calls + 10 {
        let (hook, endpoint, event) = (hook.clone(), endpoint.clone(), event.clone());
        let (elapsed, answer) = tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let mut child = Command::new(&hook)
                .arg("claude-code")
                .env("WARDEN_ENDPOINT", &endpoint)
                .env("WARDEN_TOKEN", TOKEN)
                .env("WARDEN_USER", "alice")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(event.as_bytes()).unwrap();
            let output = child.wait_with_output().unwrap();
            (started.elapsed(), String::from_utf8_lossy(&output.stdout).into_owned())
        })
        .await
        .unwrap();
        assert!(answer.contains("\"allow\""), "{answer}");
        if i >= 10 {
            took.push(elapsed);
        }
    }
    took.sort_unstable();
    println!("warden-hook claude-code, {calls} runs after 10 to warm up (fsync durability, a Read allowed):");
    println!("| | p50 | p99 |\n| --- | --- | --- |");
    println!("| the hook process, start to answer | {:?} | {:?} |", percentile(&took, 0.5), percentile(&took, 0.99));

    // Claude Code itself: the same 10 reads with the hook and without it.
    let Some(claude) = claude_binary() else {
        println!("(no Claude Code under target/npm: run scripts/test-deps for the per-tool-call figure)");
        return;
    };
    // A file alice may read (it need not exist: the hook decides either way).
    let work = tempfile::tempdir().unwrap();
    let reads = 10;
    let mut per_run = Vec::new();
    for with_hook in [false, true, false, true, false, true] {
        let mut steps: Vec<Step> = (0..reads)
            .map(|_| Step::tool_use("Read", json!({"file_path": "/home/alice/project/src/main.rs"})))
            .collect();
        steps.push(Step::text("done"));
        let model = ScriptedModel::start(steps).await.unwrap();
        let mut run = ClaudeRun::new(&claude, "read")
            .current_dir(work.path())
            .allowed_tools(["Read"])
            .env("WARDEN_ENDPOINT", &endpoint)
            .env("WARDEN_TOKEN", TOKEN)
            .env("WARDEN_USER", "alice");
        if with_hook {
            run = run.settings(json!({"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [
                {"type": "command", "command": format!("{} claude-code", hook.display()), "timeout": 60, "onFailure": "block"}
            ]}]}}));
        }
        let started = Instant::now();
        let output = run.run(&model).await.unwrap();
        let elapsed = started.elapsed();
        let calls = u32::try_from(model.tool_results().len()).unwrap();
        assert!(calls > 0, "{}", output.stderr);
        per_run.push((with_hook, elapsed, calls));
    }
    // Per tool call: a run's time over the tool calls it made.
    let median = |hooked: bool| {
        let mut runs: Vec<Duration> =
            per_run.iter().filter(|(h, _, _)| *h == hooked).map(|(_, d, calls)| *d / *calls).collect();
        runs.sort_unstable();
        runs[runs.len() / 2]
    };
    let (without, with) = (median(false), median(true));
    println!(
        "| Claude Code, per tool call of a {reads}-read run: without the hook / with it (median of 3 runs each) | {without:?} / {with:?} | added: {:?} |",
        with.saturating_sub(without)
    );
    monitor.stop().await.unwrap();
}
