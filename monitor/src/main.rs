//! `wardend`: flags, configuration, logging, first-start tokens, signals.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;
use sd_notify::NotifyState;
use tracing_subscriber::EnvFilter;
use warden_monitor::config::{FileConfig, LogFormat, Overrides, Settings, load_or_create_credentials};
use warden_monitor::decision::DecisionConfig;
use warden_monitor::server::{ServerConfig, TlsPem, UnixSocket, start_with_signal};
use warden_monitor::service::{MonitorConfig, system_clock};

/// mimalloc instead of glibc's allocator: a decision allocates a few
/// hundred small objects (Cedar values, protobuf, audit encoding) across
/// threads, where glibc's malloc and free were a sixth of wardend's CPU time.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The Warden monitor: the authority that AI-agent harnesses ask before an
/// agent acts.
///
/// It decides from the Cedar policies in --policies, records every decision
/// in a hash-chained audit log in --data, and serves gRPC on --listen. On
/// first start it creates one token per role (harness, approver, admin) in
/// the data folder. Stop it with Ctrl-C or SIGTERM: it finishes what is in
/// flight and flushes the store. Under systemd it is a `Type=notify`
/// service: READY=1 once it serves, STOPPING=1 when it begins to stop.
#[derive(Debug, Parser)]
#[command(name = "wardend", version = warden_version::VERSION)]
struct Flags {
    /// Address and port to serve gRPC on [default: 127.0.0.1:50051]
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Policy folder: schema.cedarschema, *.cedar, entities.json [default: ./policies]
    #[arg(long, value_name = "DIR")]
    policies: Option<PathBuf>,
    /// Data folder: the embedded store, tokens and credentials [default: ./.warden]
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Keep the state and the audit log in PostgreSQL, shared by several
    /// monitors: postgres://USER@HOST:PORT/DB (a password only in the
    /// configuration's `[store] password_file`) [default: the embedded
    /// store in the data folder]
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// TOML configuration file (listen, policies, data, log_format,
    /// default_approval_timeout, [[credentials]]); flags override it
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Log format: human-readable text or JSON lines [default: text]
    #[arg(long, value_enum, value_name = "FORMAT")]
    log_format: Option<LogFormat>,
    /// Serve plaintext gRPC on an address that is not loopback. Tokens then
    /// cross the network in the clear: only behind a tunnel you trust
    #[arg(long)]
    insecure_plaintext: bool,
    /// Also listen on this Unix socket, for local approvers and admins: only
    /// the uids in `socket_uids` (configuration; default: the uid that owns
    /// the data folder) may connect, and then present their tokens
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Serve TLS with this certificate chain (PEM); needs --tls-key
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The TLS private key (PEM)
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Accept client certificates signed by this CA (PEM): mutual TLS, where
    /// a configured certificate (cert_sha256) identifies an approver or admin
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Serve Prometheus metrics (text format, GET /metrics) on this address,
    /// a listener of its own (never the gRPC port) [default: off]
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// Serve the approval page (passkeys) on this address: HTTPS with the
    /// TLS certificate (set web_origin in the config), or plain on loopback
    /// at http://localhost:PORT [default: off]
    #[arg(long, value_name = "ADDR")]
    web: Option<String>,
}

/// A line on standard output for the person who started wardend. A closed
/// standard output (`wardend | head -1`) is no reason to stop serving: what
/// is said here is also in the data folder or the logs.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// mimalloc keeps freed memory for a purge delay (1 s) before it gives it
/// back, and purges only while allocating. An idle monitor would keep what
/// its last burst freed: 20–25 MiB more resident after a run at 32
/// concurrent callers with 10,000 policies and 10,000 grants (191–193
/// against 213 MiB), for no speed that `warden-bench` could measure.
const PURGE_DELAY_ENV: &str = "MIMALLOC_PURGE_DELAY";

/// mimalloc reads its options from the environment when the process
/// starts, and setting one from code takes an unsafe call: so, unless the
/// variable is set already (by the operator, or by this step), wardend
/// runs itself again with a purge delay of 0. Same process id, same
/// arguments. If that cannot be done, it goes on as it is.
#[cfg(unix)]
fn with_prompt_purging() {
    use std::os::unix::process::CommandExt;
    if std::env::var_os(PURGE_DELAY_ENV).is_some() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else { return };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| exe.clone().into_os_string());
    let error = std::process::Command::new(&exe).arg0(arg0).args(args).env(PURGE_DELAY_ENV, "0").exec();
    eprintln!("wardend: going on without {PURGE_DELAY_ENV}=0: cannot run {} again: {error}", exe.display());
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    #[cfg(unix)]
    with_prompt_purging();
    match run(flags) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("wardend: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(flags: Flags) -> anyhow::Result<()> {
    let file = match &flags.config {
        Some(path) => FileConfig::read(path)?,
        None => FileConfig::default(),
    };
    let settings = Settings::merge(
        file,
        Overrides {
            listen: flags.listen,
            policies: flags.policies,
            data: flags.data,
            log_format: flags.log_format,
            store: flags.store,
        },
    )?;
    let read = |path: &PathBuf| std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()));
    let tls = match (
        flags.tls_cert.as_ref().or(settings.tls_cert.as_ref()),
        flags.tls_key.as_ref().or(settings.tls_key.as_ref()),
    ) {
        (Some(cert), Some(key)) => Some(TlsPem {
            cert: read(cert)?,
            key: read(key)?,
            client_ca: flags.tls_client_ca.as_ref().or(settings.tls_client_ca.as_ref()).map(read).transpose()?,
        }),
        (None, None) => None,
        _ => anyhow::bail!("TLS needs both a certificate and a key"),
    };
    if !settings.listen.ip().is_loopback() && tls.is_none() && !flags.insecure_plaintext {
        anyhow::bail!(
            "refusing to listen on {}: it is not a loopback address, and without TLS bearer tokens would cross \
             the network in the clear; give --tls-cert and --tls-key, listen on 127.0.0.1, or pass \
             --insecure-plaintext if a trusted tunnel protects the connection",
            settings.listen
        );
    }
    init_logging(settings.log_format);
    // Cedar bounds an evaluation's depth by the stack it has left: with
    // tokio's 2 MiB threads a long `||` chain that `wardenctl policy test`
    // (on an 8 MiB main thread) evaluates fine would deny here with
    // "recursion limit reached". Same stack, same answer.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(8 << 20)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let web = flags.web.or(settings.web.clone());
    runtime.block_on(serve(settings, tls, flags.socket, flags.metrics, web))
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_env("WARDEN_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).init(),
    }
}

async fn serve(
    settings: Settings,
    tls: Option<TlsPem>,
    flags_socket: Option<PathBuf>,
    metrics: Option<String>,
    web: Option<String>,
) -> anyhow::Result<()> {
    let setup = load_or_create_credentials(&settings.data, &settings.credentials)?;
    if !setup.created_tokens.is_empty() {
        say!("First start: created one token per role (mode 0600):");
        for (role, path) in &setup.created_tokens {
            say!("  {role:<9} {}", path.display());
        }
        say!(
            "Their hashes are in {}. The harness token may act for every user (users = [\"*\"]): narrow it there.",
            settings.data.join(warden_monitor::config::CREDENTIALS_FILE).display()
        );
        say!("Use a token with: wardenctl --token-file <file> …, or WARDEN_TOKEN=$(cat <file>).");
    }
    // The folder's invariants are proved before the port opens, so that no
    // client waits on a connection meanwhile; start finds the proof done.
    warden_monitor::server::prove_before_listening(&settings.policies, &settings.proofs).await;
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("cannot listen on {}", settings.listen))?;
    let config = ServerConfig {
        policies: settings.policies.clone(),
        data: settings.data.clone(),
        credentials: setup.credentials,
        durability: settings.durability,
        checkpoint_every: settings.checkpoint_interval,
        audit: settings.audit.clone(),
        store: settings.store.clone(),
        tls,
        socket: match flags_socket.or(settings.socket.clone()) {
            Some(path) => {
                let uids = if settings.socket_uids.is_empty() {
                    vec![std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&settings.data)?)]
                } else {
                    settings.socket_uids.clone()
                };
                Some(UnixSocket { path, uids })
            }
            None => None,
        },
        monitor: MonitorConfig {
            policy_dir: settings.policies.clone(),
            decision: DecisionConfig {
                default_approval_timeout: settings.default_approval_timeout,
                ..DecisionConfig::default()
            },
            max_grant: settings.max_grant_duration,
            clock: system_clock(),
            session_rate: settings.session_rate,
            max_pending_per_session: settings.max_pending_per_session,
            max_pending_per_harness: settings.max_pending_per_harness,
            proofs: settings.proofs.clone(),
            shadow_dir: settings.shadow_dir.clone(),
        },
    };
    let signal = stop_signal();
    let stopping = async move {
        signal.await;
        notify_systemd(&[NotifyState::Stopping, NotifyState::Status("stopping: finishing what is in flight")]);
    };
    let server = start_with_signal(config, listener, stopping).await?;
    let store = match &settings.store {
        Some(pg) => format!(", store {}", pg.url),
        None => String::new(),
    };
    say!(
        "wardend listening on {} (policies {}, data {}{store})",
        server.addr(),
        settings.policies.display(),
        settings.data.display()
    );
    if let Some(address) = metrics {
        let listener = tokio::net::TcpListener::bind(&address)
            .await
            .with_context(|| format!("cannot serve metrics on {address}"))?;
        say!("wardend metrics on http://{}/metrics", listener.local_addr()?);
        server.serve_metrics(listener);
    }
    if let Some(address) = web {
        let listener = tokio::net::TcpListener::bind(&address)
            .await
            .with_context(|| format!("cannot serve the approval page on {address}"))?;
        let origin = server.serve_web(listener, settings.web_origin.as_deref())?;
        say!("wardend approval page on {origin}");
    }
    // Only now, with every listener bound, the policies loaded and the store
    // open: a unit ordered after wardend (`Type=notify`) may connect at once.
    // This is the process that serves: the re-run of `with_prompt_purging`
    // happened before, in the same pid, and nothing runs this twice.
    notify_systemd(&[NotifyState::Ready, NotifyState::Status(&format!("serving on {}", server.addr()))]);
    server.join().await?;
    Ok(())
}

/// Tells the service manager how wardend is (sd_notify(3)), when it runs
/// under one: nothing when NOTIFY_SOCKET is unset. A failure is logged and
/// the monitor goes on serving; systemd then times the start out, and says so.
fn notify_systemd(states: &[NotifyState<'_>]) {
    if let Err(error) = sd_notify::notify(states) {
        tracing::warn!(%error, "cannot notify the service manager (NOTIFY_SOCKET)");
    }
}

/// Ctrl-C or SIGTERM. Both are watched from the call on, not from the first
/// poll: the server polls this in a task of its own, and a SIGTERM that came
/// before (say, right after READY=1) would kill the process unflushed.
fn stop_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let watch = |kind: SignalKind, name: &'static str| {
        let watched = signal(kind);
        async move {
            match watched {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot watch {name}");
                    std::future::pending::<()>().await;
                }
            }
        }
    };
    let (interrupt, terminate) = (watch(SignalKind::interrupt(), "SIGINT"), watch(SignalKind::terminate(), "SIGTERM"));
    async move {
        tokio::select! {
            () = interrupt => {}
            () = terminate => {}
        }
    }
}
