//! `warden-mcp`: the MCP gateway's command line.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser;
use warden_mcp::config::{Config, Defaults};
use warden_mcp::gateway::Shared;

/// An MCP gateway that asks Warden before every tool call.
///
/// One stdio server, for an MCP client's configuration:
///   warden-mcp --name everything -- npx -y @modelcontextprotocol/server-everything
/// Several, over stdio or streamable HTTP:
///   warden-mcp --config gateway.toml [--listen 127.0.0.1:8931]
///
/// The actor: WARDEN_USER (default: the OS user), WARDEN_AGENT (default
/// mcp-client), WARDEN_SESSION (default: one per client connection).
#[derive(Debug, Parser)]
#[command(name = "warden-mcp", version = warden_version::VERSION, verbatim_doc_comment)]
struct Flags {
    /// Warden's address (default http://127.0.0.1:50051; several replicas
    /// separated by commas).
    #[arg(long, env = "WARDEN_ENDPOINT")]
    endpoint: Option<String>,
    /// A file holding the harness token (or WARDEN_TOKEN holds it; there is
    /// no flag for the token itself: flags are visible to every local user).
    #[arg(long, env = "WARDEN_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// The gateway's configuration (TOML): servers, actor, HTTP clients.
    #[arg(long, conflicts_with = "name")]
    config: Option<PathBuf>,
    /// Serve streamable HTTP on this address (loopback only) instead of stdio.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// The name of the one server given after `--`.
    #[arg(long, requires = "command")]
    name: Option<String>,
    /// The server's command and arguments.
    #[arg(last = true)]
    command: Vec<String>,
}

fn main() -> ExitCode {
    init_tracing();
    let flags = Flags::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("warden-mcp: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let listen = flags.listen;
        let shared = match setup(flags).await {
            Ok(shared) => shared,
            Err(e) => {
                eprintln!("warden-mcp: {e:#}");
                // An MCP client shows its server's answers, not its stderr:
                // over stdio, every request it makes is answered with why
                // (unless a person started this in a terminal).
                if listen.is_none()
                    && !std::io::stdin().is_terminal()
                    && let Err(e) = warden_mcp::serve_refusal_stdio(format!("{e:#}")).await
                {
                    eprintln!("warden-mcp: {e:#}");
                }
                return ExitCode::FAILURE;
            }
        };
        match serve(listen, shared).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("warden-mcp: {e:#}");
                ExitCode::FAILURE
            }
        }
    })
}

fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WARDEN_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        // stdout is the MCP channel.
        .with_writer(std::io::stderr)
        .init();
}

/// The configuration, the actor's defaults and the monitor's client: what
/// the gateway needs before it can serve.
async fn setup(flags: Flags) -> anyhow::Result<Arc<Shared>> {
    // reqwest (for streamable-HTTP upstreams) is built without a default
    // crypto provider; ring is the one the rest of the workspace uses.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let defaults = Defaults::from_env();
    let config = match (&flags.config, &flags.name) {
        (Some(path), _) => Config::load(path, defaults)?,
        (None, Some(name)) => Config::single(name, &flags.command, defaults)?,
        (None, None) => anyhow::bail!("give `--name NAME -- COMMAND …` or `--config FILE` (see --help)"),
    };
    let endpoint =
        flags.endpoint.or_else(|| config.endpoint.clone()).unwrap_or_else(|| warden_sdk::DEFAULT_ENDPOINT.to_owned());
    let token = match (std::env::var("WARDEN_TOKEN").ok(), flags.token_file.or_else(|| config.token_file.clone())) {
        (Some(token), _) => token,
        (None, Some(path)) => warden_sdk::read_token_file(&path)?,
        (None, None) => anyhow::bail!("no harness token: set WARDEN_TOKEN or WARDEN_TOKEN_FILE (or --token-file)"),
    };
    let warden = warden_sdk::Client::connect_lazy(endpoint.clone(), &token).await?;
    Ok(Arc::new(Shared::new(config, warden, endpoint)))
}

async fn serve(listen: Option<std::net::SocketAddr>, shared: Arc<Shared>) -> anyhow::Result<()> {
    match listen {
        None => warden_mcp::serve_stdio(shared).await,
        Some(addr) => {
            if !addr.ip().is_loopback() {
                anyhow::bail!("--listen {addr}: the gateway serves plain HTTP, so on loopback addresses only");
            }
            if shared.config.clients.is_empty() {
                anyhow::bail!(
                    "--listen needs `[[clients]]` in the configuration: over HTTP every request must carry a client's token (any local user can reach a loopback port)"
                );
            }
            let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("listen on {addr}"))?;
            eprintln!("warden-mcp: serving MCP on http://{}{}", listener.local_addr()?, warden_mcp::http::PATH);
            let stop = tokio_util::sync::CancellationToken::new();
            let serving = tokio::spawn(warden_mcp::http::serve(shared, listener, stop.clone()));
            tokio::signal::ctrl_c().await?;
            stop.cancel();
            let _ = serving.await;
            Ok(())
        }
    }
}
