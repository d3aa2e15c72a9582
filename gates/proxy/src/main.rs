//! `warden-proxy`: flags, the monitor client, the CA, and the listener.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use warden_proxy::approvals::ApprovalWait;
use warden_proxy::ca::Authority;
use warden_proxy::clients::{Clients, DEFAULT_MAX_CONNECTIONS};
use warden_proxy::proxy::{self, Listener, Settings};
use warden_proxy::secrets::Secrets;
use warden_sdk::Actor;

/// Warden's egress proxy: an HTTP(S) forward proxy for one sandbox. Every
/// request is asked of Warden (`http.request`, method and full URL) before a
/// byte goes upstream; HTTPS is terminated with the proxy's CA (`ca
/// --print`); a header value `warden-secret:NAME` is replaced by the secret
/// only once `secret.use` is allowed for the request's host. The monitor:
/// WARDEN_ENDPOINT (default http://127.0.0.1:50051; several replicas
/// separated by commas) and WARDEN_TOKEN or WARDEN_TOKEN_FILE (a harness
/// token).
#[derive(Parser)]
#[command(name = "warden-proxy", version = warden_version::VERSION)]
struct Flags {
    #[command(subcommand)]
    command: Option<Command>,
    /// Where the sandbox reaches the proxy: HOST:PORT, or unix:/path for a
    /// Unix socket (which must not exist yet).
    #[arg(long, default_value = "127.0.0.1:3128")]
    listen: String,
    /// Sandboxes with proxy credentials of their own (`Proxy-Authorization`),
    /// each mapped to its user, agent and session: a TOML file of
    /// [[clients]] (token_sha256, user, agent, session, max_connections).
    /// Instead of --user and --session.
    #[arg(long, conflicts_with_all = ["user", "session"])]
    clients: Option<PathBuf>,
    /// The user the sandbox's agent acts for (one sandbox, no credential).
    #[arg(long, env = "WARDEN_USER")]
    user: Option<String>,
    /// The kind of agent in the sandbox.
    #[arg(long, env = "WARDEN_AGENT", default_value = "sandbox")]
    agent: String,
    /// The sandbox's session.
    #[arg(long, env = "WARDEN_SESSION")]
    session: Option<String>,
    /// A TOML file of `NAME = "value"` lines, mode 0600 or stricter.
    #[arg(long)]
    secrets: Option<PathBuf>,
    /// An extra CA to trust upstream (PEM), besides the system's.
    #[arg(long)]
    upstream_ca: Option<PathBuf>,
    /// The proxy's own folder: its CA.
    #[arg(long, default_value = "./.warden-proxy")]
    data: PathBuf,
    /// Connections served at once.
    #[arg(long, default_value_t = 256)]
    max_connections: usize,
    /// Seconds an upstream may take to start answering.
    #[arg(long, default_value_t = 60)]
    upstream_timeout: u64,
    /// Seconds a client may take to send a request's head, finish a TLS
    /// handshake, or leave a kept-alive connection idle.
    #[arg(long, default_value_t = 30)]
    idle_timeout: u64,
    /// How long a request that needs a person's approval (of the request,
    /// or of a secret it uses) is held before the proxy answers: `0s`, the
    /// default, answers at once; `90s`, `5m`, `1h30m` (a bare number is
    /// seconds) hold it up to that long; `deadline` holds it until the
    /// approval's own deadline. Approved meanwhile, it is sent; still
    /// waiting, it gets 403 with "outcome":"PENDING", the approval's id
    /// (also in the Warden-Approval header) and deadline, and Retry-After.
    /// The same request sent again by the same sandbox before the deadline
    /// awaits that approval (no new one), and goes through once approved:
    /// an approval lets one request through.
    #[arg(long, default_value = "0s", value_name = "DURATION|deadline")]
    approval_wait: ApprovalWait,
}

#[derive(Subcommand)]
enum Command {
    /// The CA certificate the sandbox must trust.
    Ca {
        /// Print it (PEM) on stdout.
        #[arg(long)]
        print: bool,
        /// The proxy's folder.
        #[arg(long, default_value = "./.warden-proxy")]
        data: PathBuf,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WARDEN_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let flags = Flags::parse();
    match run(flags) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("warden-proxy: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(flags: Flags) -> anyhow::Result<()> {
    if let Some(Command::Ca { print, data }) = &flags.command {
        let ca = Authority::load_or_create(data)?;
        let text = if *print {
            ca.cert_pem().to_owned()
        } else {
            format!("{}\n", data.join(warden_proxy::ca::CERT_FILE).display())
        };
        return match std::io::stdout().lock().write_all(text.as_bytes()) {
            // The reader left (`warden-proxy ca --print | head -1`): quietly,
            // as a shell's own commands do (128 + SIGPIPE).
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(141),
            written => written.context("cannot write to standard output"),
        };
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let clients = match (&flags.clients, flags.user.clone(), flags.session.clone()) {
        (Some(path), _, _) => Clients::load(path).map_err(anyhow::Error::msg)?,
        (None, Some(user), Some(session)) => {
            Clients::fixed(Actor::new(user, flags.agent.clone(), session), DEFAULT_MAX_CONNECTIONS)
        }
        _ => bail!("who the sandbox acts for: --user and --session (or WARDEN_USER and WARDEN_SESSION), or --clients"),
    };
    let mut settings = Settings::new(clients);
    if let Some(path) = &flags.secrets {
        settings.secrets = Secrets::load(path)?;
    }
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        let _ = settings.upstream_roots.add(cert);
    }
    if let Some(path) = &flags.upstream_ca {
        let pem = std::fs::read(path).with_context(|| format!("--upstream-ca {}", path.display()))?;
        for cert in rustls_pki_types::pem::PemObject::pem_slice_iter(&pem) {
            let cert: rustls_pki_types::CertificateDer<'static> =
                cert.with_context(|| format!("--upstream-ca {}: not PEM certificates", path.display()))?;
            settings.upstream_roots.add(cert).with_context(|| format!("--upstream-ca {}", path.display()))?;
        }
    }
    settings.max_connections = flags.max_connections;
    settings.upstream_timeout = std::time::Duration::from_secs(flags.upstream_timeout.max(1));
    settings.header_timeout = std::time::Duration::from_secs(flags.idle_timeout.max(1));
    settings.approval_wait = flags.approval_wait;
    let ca = Authority::load_or_create(&flags.data)?;

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let endpoint = std::env::var("WARDEN_ENDPOINT").unwrap_or_else(|_| warden_sdk::DEFAULT_ENDPOINT.to_owned());
        let token = match (std::env::var("WARDEN_TOKEN"), std::env::var("WARDEN_TOKEN_FILE")) {
            (Ok(token), _) => token,
            (Err(_), Ok(path)) => warden_sdk::read_token_file(&path).context("WARDEN_TOKEN_FILE")?,
            _ => bail!("no harness token: set WARDEN_TOKEN or WARDEN_TOKEN_FILE"),
        };
        // Lazy: the proxy starts while the monitor is down, and refuses
        // every request (503) until it is up.
        let warden = warden_sdk::Client::connect_lazy(endpoint, &token).await?;
        let listener =
            Listener::bind(&flags.listen).await.with_context(|| format!("cannot listen on {}", flags.listen))?;
        // Said for whoever started it; a closed standard output is no reason
        // to stop serving.
        let _ = writeln!(
            std::io::stdout(),
            "warden-proxy listening on {} (CA {}, {} secrets)",
            listener.address(),
            flags.data.join(warden_proxy::ca::CERT_FILE).display(),
            settings.secrets.len()
        );
        tokio::select! {
            () = proxy::serve(listener, warden, ca, settings) => Ok(()),
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    })
}
