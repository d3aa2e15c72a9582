//! What `warden-run` costs a Claude Code run, per tool call: the real
//! Claude Code (`target/npm`) driven by a scripted model server through
//! N Bash tool calls (`true`), with `warden-hook` as its hook against a
//! monitor of this process, (a) as it is and (b) under `warden-run`
//! (the box, the model reached through the run's proxy, the hook through
//! the run's door). Prints the median of each over R runs, and the
//! difference per tool call.
//!
//! `cargo build --release -p warden-run -p warden-hook && \
//!  cargo run --release -p warden-run --example claude_cost -- [N] [R]`

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use warden_monitor::auth::{CredentialConfig, Role};
use warden_tests::model_server::{ScriptedModel, Step};

const HARNESS: &str = "wdn_claude_cost_harness";

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

fn script(calls: usize) -> Vec<Step> {
    let mut steps: Vec<Step> = (0..calls)
        .map(|i| Step::tool_use("Bash", serde_json::json!({"command": "true", "description": format!("step {i}")})))
        .collect();
    steps.push(Step::text("done"));
    steps
}

fn binaries() -> anyhow::Result<(PathBuf, PathBuf, PathBuf)> {
    let exe = std::env::current_exe()?;
    // target/release/examples/claude_cost → target/release
    let dir = exe.parent().and_then(Path::parent).ok_or_else(|| anyhow::anyhow!("no target folder"))?;
    let (run, hook) = (dir.join("warden-run"), dir.join("warden-hook"));
    for binary in [&run, &hook] {
        anyhow::ensure!(
            binary.exists(),
            "{} is not built: cargo build --release -p warden-run -p warden-hook",
            binary.display()
        );
    }
    let claude = warden_tests::claude_code::claude_binary()
        .ok_or_else(|| anyhow::anyhow!("Claude Code is not installed: scripts/test-deps"))?;
    Ok((run, hook, claude))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let calls: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(20);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(5);
    let (run, hook, claude) = binaries()?;
    let monitor = warden_tests::monitor::start_with_policies(
        r#"@id("all") permit (principal, action, resource);"#,
        vec![CredentialConfig::for_token("harness", Role::Harness, HARNESS, &["*"])],
    )
    .await?;
    let scratch = warden_tests::claude_code::target_dir().join("tmp");
    std::fs::create_dir_all(&scratch)?;
    let root = tempfile::tempdir_in(scratch)?;
    let (home, work) = (root.path().join("home"), root.path().join("work"));
    std::fs::create_dir_all(&home)?;
    std::fs::create_dir_all(&work)?;
    let settings = serde_json::json!({"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [
        {"type": "command", "command": format!("{} claude-code", hook.display()), "timeout": 60, "onFailure": "block"}
    ]}]}})
    .to_string();
    let claude_args = |settings: Option<&str>| {
        let mut args: Vec<String> =
            vec!["-p".into(), "--output-format".into(), "json".into(), "--allowedTools".into(), "Bash".into()];
        if let Some(settings) = settings {
            args.extend(["--settings".into(), settings.to_owned()]);
        }
        args.extend(["--".into(), "go".into()]);
        args
    };
    let (mut bare, mut boxed) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        for under_run in [false, true] {
            let model = ScriptedModel::start_on(std::net::Ipv4Addr::new(127, 0, 0, 2), script(calls)).await?;
            let mut command = if under_run {
                let mut command = Command::new(&run);
                command
                    .args(["--user", "alice", "--env", "ENABLE_TOOL_SEARCH=false", "--"])
                    .arg(&claude)
                    .args(claude_args(None));
                command
            } else {
                let mut command = Command::new(&claude);
                command
                    .args(claude_args(Some(&settings)))
                    .env("CLAUDE_CONFIG_DIR", root.path().join("claude-config"))
                    .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
                    .env("ENABLE_TOOL_SEARCH", "false")
                    .env("WARDEN_USER", "alice");
                command
            };
            command
                .current_dir(&work)
                .env("HOME", &home)
                .env("WARDEN_ENDPOINT", &monitor.endpoint)
                .env("WARDEN_TOKEN", HARNESS)
                .env("ANTHROPIC_API_KEY", "sk-ant-cost")
                .env("ANTHROPIC_BASE_URL", model.base_url());
            let started = Instant::now();
            let out = tokio::task::spawn_blocking(move || command.output()).await??;
            let took = started.elapsed();
            let stdout = String::from_utf8_lossy(&out.stdout);
            anyhow::ensure!(
                out.status.success() && stdout.contains("\"result\":\"done\""),
                "a run failed: {stdout} {}",
                String::from_utf8_lossy(&out.stderr)
            );
            if under_run { &mut boxed } else { &mut bare }.push(took);
        }
    }
    let (bare, boxed) = (median(bare), median(boxed));
    println!("Claude Code, {calls} Bash tool calls, median of {rounds} runs each:");
    println!("  hook only:         {:>8.0} ms", bare.as_secs_f64() * 1000.0);
    println!("  under warden-run:  {:>8.0} ms", boxed.as_secs_f64() * 1000.0);
    let per_call = (boxed.as_secs_f64() - bare.as_secs_f64()) / calls.max(1) as f64 * 1000.0;
    println!("  difference per tool call (start-up included): {per_call:.1} ms");
    monitor.server.stop().await?;
    Ok(())
}
