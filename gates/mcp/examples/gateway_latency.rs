//! What the gateway adds to a `tools/call`: the reference server's `echo`
//! called N times directly over stdio, then through `warden-mcp` (the
//! release binary next to this example) with a real monitor deciding and
//! durably auditing every call; prints p50 and p99 of each and the added
//! time.
//!
//! ```sh
//! scripts/test-deps   # the reference server, under target/npm
//! cargo build --release -p warden-mcp --examples --bins
//! ./target/release/examples/gateway_latency 2000
//! ```

use std::time::{Duration, Instant};

use anyhow::Context as _;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::{ConfigureCommandExt as _, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt as _};
use warden_monitor::auth::{CredentialConfig, Role};
use warden_monitor::server::{ServerConfig, start};
use warden_monitor::service::MonitorConfig;

const TOKEN: &str = "wdn_bench_mcp_harness";

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}

async fn measure(client: &RunningService<RoleClient, ()>, calls: usize) -> anyhow::Result<Vec<Duration>> {
    let arguments = serde_json::json!({"message": "latency"}).as_object().cloned().unwrap_or_default();
    // Warm up: first calls pay for connections and caches.
    for _ in 0..50 {
        client.call_tool(CallToolRequestParams::new("echo").with_arguments(arguments.clone())).await?;
    }
    let mut took = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        let result = client.call_tool(CallToolRequestParams::new("echo").with_arguments(arguments.clone())).await?;
        took.push(started.elapsed());
        anyhow::ensure!(result.is_error != Some(true), "echo failed: {result:?}");
    }
    took.sort();
    Ok(took)
}

fn show(name: &str, took: &[Duration]) {
    println!(
        "| {name} | {:.0} µs | {:.0} µs |",
        percentile(took, 0.5).as_secs_f64() * 1e6,
        percentile(took, 0.99).as_secs_f64() * 1e6
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let calls: usize = std::env::args().nth(1).map(|n| n.parse()).transpose()?.unwrap_or(1000);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = root.join("target/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    anyhow::ensure!(script.is_file(), "{} is missing: run scripts/test-deps", script.display());
    let gateway = std::env::current_exe()?
        .parent()
        .and_then(|examples| examples.parent())
        .map(|dir| dir.join("warden-mcp"))
        .filter(|path| path.is_file())
        .context("build the gateway first: cargo build --release -p warden-mcp --bins")?;

    // A monitor with the bundled schema and users, and one permit for the server.
    let policies = tempfile::tempdir()?;
    for file in ["schema.cedarschema", "entities.json"] {
        std::fs::copy(root.join("policies").join(file), policies.path().join(file))?;
    }
    std::fs::write(
        policies.path().join("bench.cedar"),
        "@id(\"bench\")\n@reason(\"bench\")\npermit (principal, action == Action::\"tool.call\", resource in McpServer::\"everything\");\n",
    )?;
    let data = tempfile::tempdir()?;
    let config = ServerConfig {
        policies: policies.path().to_owned(),
        data: data.path().to_owned(),
        credentials: vec![CredentialConfig::for_token("bench", Role::Harness, TOKEN, &["*"])],
        durability: Default::default(),
        checkpoint_every: Duration::from_secs(300),
        tls: None,
        socket: None,
        audit: Default::default(),
        store: None,
        monitor: MonitorConfig { policy_dir: policies.path().to_owned(), ..MonitorConfig::default() },
    };
    let monitor = start(config, tokio::net::TcpListener::bind("127.0.0.1:0").await?).await?;
    let endpoint = format!("http://{}", monitor.addr());

    let direct = ()
        .serve(TokioChildProcess::new(tokio::process::Command::new("node").configure(|c| {
            c.arg(&script).arg("stdio");
        }))?)
        .await?;
    let direct_took = measure(&direct, calls).await?;
    direct.cancel().await?;

    // The decision alone, as the gateway asks it (a fresh channel, the same request).
    let warden = warden_sdk::Client::connect_lazy(endpoint.clone(), TOKEN).await?;
    let actor = warden_sdk::Actor::new("alice", "mcp-client", "bench");
    let mut authorize_took = Vec::with_capacity(calls);
    for i in 0..calls + 50 {
        let request = warden_sdk::ActionRequest::call_tool("everything", "echo", r#"{"message":"latency"}"#);
        let started = Instant::now();
        let decision = warden.authorize(&actor, request).await?;
        if i >= 50 {
            authorize_took.push(started.elapsed());
        }
        anyhow::ensure!(decision.outcome == warden_sdk::Outcome::Allow, "{decision:?}");
    }
    authorize_took.sort();

    let through = ()
        .serve(TokioChildProcess::new(tokio::process::Command::new(&gateway).configure(|c| {
            c.args(["--name", "everything", "--", "node"])
                .arg(&script)
                .arg("stdio")
                .env("WARDEN_ENDPOINT", &endpoint)
                .env("WARDEN_TOKEN", TOKEN)
                .env("WARDEN_USER", "alice");
        }))?)
        .await?;
    let through_took = measure(&through, calls).await?;
    through.cancel().await?;
    monitor.stop().await?;

    println!("{calls} calls of `echo` after 50 to warm up, one at a time (fsync durability: each decision audited)");
    println!("| path | p50 | p99 |\n| --- | --- | --- |");
    show("directly over stdio", &direct_took);
    show("through warden-mcp", &through_took);
    show("Authorize alone (SDK, same monitor)", &authorize_took);
    let added = |p| percentile(&through_took, p).saturating_sub(percentile(&direct_took, p));
    println!(
        "| added by the gateway | {:.0} µs | {:.0} µs |",
        added(0.5).as_secs_f64() * 1e6,
        added(0.99).as_secs_f64() * 1e6
    );
    Ok(())
}
