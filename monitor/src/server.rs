//! Wiring: loads the policies, opens the store, serves the gRPC services on a
//! listener, and shuts down cleanly (stop accepting, end waits and streams,
//! drain the audit writer, flush).

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::auth::{CredentialConfig, CredentialError, Credentials};
use crate::config::STORE_DIR;
use crate::grpc;
use crate::policy::{LoadError, PolicySnapshot};
use crate::service::{Monitor, MonitorConfig, Shutdown};
use crate::store::{Durability, Store, StoreError};
use crate::watch::Watched;

/// How long shutdown waits for connected clients before closing anyway.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Why the monitor could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The policy folder does not load.
    #[error("the policies in {dir} do not load:\n{error}")]
    Policies {
        /// The folder.
        dir: PathBuf,
        /// Every problem, with file and line.
        error: LoadError,
    },
    /// The credentials are wrong.
    #[error(transparent)]
    Credentials(#[from] CredentialError),
    /// PostgreSQL cannot be used.
    #[error("cannot use the store at {url}: {error}")]
    Database {
        /// The store's URL.
        url: String,
        /// Why.
        error: StoreError,
    },
    /// The store does not open.
    #[error("cannot open the store in {dir}: {error}")]
    Store {
        /// The store's folder.
        dir: PathBuf,
        /// Why.
        error: StoreError,
    },
    /// Flushing at shutdown failed.
    #[error("closing the store: {0}")]
    Close(StoreError),
    /// Reflection could not be set up.
    #[error("server reflection: {0}")]
    Reflection(String),
    /// The server task failed.
    #[error("the server failed: {0}")]
    Task(String),
    /// The transport failed.
    #[error("serving: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// What the server needs.
#[derive(Clone)]
pub struct ServerConfig {
    /// Policy folder.
    pub policies: PathBuf,
    /// Data folder; the store lives in `<data>/store`.
    pub data: PathBuf,
    /// Accepted credentials.
    pub credentials: Vec<CredentialConfig>,
    /// Decision, grant and clock settings.
    pub monitor: MonitorConfig,
    /// How durable an answer is.
    pub durability: Durability,
    /// How often the audit head is signed (and on shutdown).
    pub checkpoint_every: std::time::Duration,
    /// TLS for the listener (PEM texts); `None`: plaintext.
    pub tls: Option<TlsPem>,
    /// A Unix socket for local approvers and admins, if any.
    pub socket: Option<UnixSocket>,
    /// Retention and layout of the audit log.
    pub audit: crate::config::AuditConfig,
    /// PostgreSQL, shared with other monitors; `None`: the embedded store
    /// in the data folder.
    pub store: Option<crate::store::postgres::PgOptions>,
}

/// A Unix-socket listener whose peers are admitted by uid (SO_PEERCRED),
/// and then by token as on TCP.
#[derive(Clone, Debug)]
pub struct UnixSocket {
    /// The socket's path (a stale one is replaced).
    pub path: PathBuf,
    /// The uids that may connect at all.
    pub uids: Vec<u32>,
}

pub use crate::config::TlsPem;

impl ServerConfig {
    /// A configuration with these policies, data folder and credentials, and
    /// the defaults for everything else (plaintext, fsync, checkpoints every
    /// five minutes, no Unix socket).
    pub fn new(policies: PathBuf, data: PathBuf, credentials: Vec<CredentialConfig>) -> Self {
        Self {
            policies,
            data,
            credentials,
            monitor: MonitorConfig::default(),
            durability: Durability::default(),
            checkpoint_every: std::time::Duration::from_secs(300),
            tls: None,
            socket: None,
            audit: crate::config::AuditConfig::default(),
            store: None,
        }
    }
}

/// A monitor serving on a listener.
pub struct RunningServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ServerError>>,
    /// The metrics in Prometheus's text format, read now.
    scrape: crate::metrics::Render,
    shutdown: Shutdown,
    /// For the approval page: the monitor (while it runs), the credentials
    /// and the listener's TLS.
    monitor: std::sync::Weak<crate::service::Monitor>,
    credentials: Arc<Credentials>,
    tls: Option<TlsPem>,
}

impl RunningServer {
    /// Serves the metrics (`GET /metrics`, Prometheus text format) on a
    /// listener of their own until the server stops.
    pub fn serve_metrics(&self, listener: TcpListener) -> JoinHandle<()> {
        let mut shutdown = self.shutdown.clone();
        tokio::spawn(crate::metrics::serve(listener, Arc::clone(&self.scrape), async move { shutdown.stopped().await }))
    }

    /// Serves the approval page on `listener` until the server stops: over
    /// TLS with the listener's certificate when it has one (then `origin`,
    /// the https URL approvers open, is required), else plain on loopback,
    /// at `http://localhost:PORT` unless `origin` says otherwise. The
    /// origin the page is served at.
    pub fn serve_web(&self, listener: TcpListener, origin: Option<&str>) -> Result<String, ServerError> {
        let addr = listener.local_addr().map_err(|e| ServerError::Task(format!("web listener address: {e}")))?;
        let origin = crate::web::origin_for(addr, origin, self.tls.is_some()).map_err(ServerError::Task)?;
        let tls = match &self.tls {
            Some(pem) => Some(crate::web::tls_config(pem).map_err(ServerError::Task)?),
            None => None,
        };
        let mut listeners = vec![listener];
        // `localhost` is ::1 as well as 127.0.0.1, and a browser tries ::1
        // first: whoever held that port would be the page. So a loopback
        // page holds the port on both, or does not start.
        if addr.ip().is_loopback() {
            let other: SocketAddr = match addr {
                SocketAddr::V4(_) => (std::net::Ipv6Addr::LOCALHOST, addr.port()).into(),
                SocketAddr::V6(_) => (std::net::Ipv4Addr::LOCALHOST, addr.port()).into(),
            };
            match std::net::TcpListener::bind(other) {
                Ok(bound) => {
                    bound.set_nonblocking(true).map_err(|e| ServerError::Task(format!("{other}: {e}")))?;
                    listeners
                        .push(TcpListener::from_std(bound).map_err(|e| ServerError::Task(format!("{other}: {e}")))?);
                }
                // No such address on this machine (no IPv6): nobody can hold
                // it. (EAFNOSUPPORT, 97: IPv6 switched off in the kernel.)
                Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable || e.raw_os_error() == Some(97) => {}
                Err(e) => {
                    return Err(ServerError::Task(format!(
                        "the approval page needs {other} as well as {addr} (a browser opening localhost may go to either): {e}"
                    )));
                }
            }
        }
        let monitor = self.monitor.upgrade().ok_or_else(|| ServerError::Task("the monitor has stopped".into()))?;
        monitor.passkeys().serve_at(&origin).map_err(ServerError::Task)?;
        let router = crate::web::router(&monitor, Arc::clone(&self.credentials), &origin);
        drop(monitor);
        let mut shutdown = self.shutdown.clone();
        tokio::spawn(crate::web::serve(listeners, router, tls, async move { shutdown.stopped().await }));
        Ok(origin.origin().ascii_serialization())
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops it and waits until the store is closed.
    pub async fn stop(mut self) -> Result<(), ServerError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.join().await
    }

    /// Waits until it stops by itself (an error) or is stopped.
    pub async fn join(self) -> Result<(), ServerError> {
        match self.task.await {
            Ok(result) => result,
            Err(e) => Err(ServerError::Task(e.to_string())),
        }
    }
}

/// Loads, opens and starts serving on `listener`. Errors in the policies,
/// credentials or store are returned before anything is served.
pub async fn start(config: ServerConfig, listener: TcpListener) -> Result<RunningServer, ServerError> {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = start_with_signal(config, listener, async move {
        let _ = stopped.await;
    })
    .await?;
    Ok(RunningServer { stop: Some(stop), ..running })
}

/// Proves the invariants of the policy folder `dir` ahead of [`start`],
/// which then finds the proof done (it is remembered per folder version in
/// the process). A folder that does not load or keep its invariants is
/// left for `start` to report.
pub async fn prove_before_listening(dir: &std::path::Path, proofs: &crate::config::ProofConfig) {
    if let Ok(snapshot) = PolicySnapshot::load(dir) {
        let _ = crate::service::check_invariants(snapshot, dir, proofs).await;
    }
}

/// Like [`start`], stopping when `signal` resolves.
pub async fn start_with_signal(
    config: ServerConfig,
    listener: TcpListener,
    signal: impl Future<Output = ()> + Send + 'static,
) -> Result<RunningServer, ServerError> {
    let snapshot = PolicySnapshot::load(&config.policies)
        .map_err(|error| ServerError::Policies { dir: config.policies.clone(), error })?;
    for warning in &snapshot.warnings {
        tracing::warn!(%warning, "policy warning");
    }
    // A folder whose policies break its own invariants does not serve.
    let (snapshot, unproved) = crate::service::check_invariants(snapshot, &config.policies, &config.monitor.proofs)
        .await
        .map_err(|error| ServerError::Policies { dir: config.policies.clone(), error })?;
    let credentials = Arc::new(Credentials::new(&config.credentials)?);
    let store_dir = config.data.join(STORE_DIR);
    let opened = match &config.store {
        Some(pg) => crate::store::postgres::Postgres::open(pg)
            .await
            .map(|(store, closer)| (Store::Postgres(store), closer))
            .map_err(|error| ServerError::Database { url: pg.url.clone(), error }),
        None => {
            let opened = crate::store::Embedded::open_with(&store_dir, config.durability, config.audit.segment_bytes)
                .map(|(store, closer)| (Store::Embedded(store), closer))
                .map_err(|error| ServerError::Store { dir: store_dir.clone(), error });
            warn_if_disk_nearly_full(&store_dir, &config.audit);
            opened
        }
    };
    let (store, closer) = opened?;
    tracing::info!(
        policies = snapshot.len(),
        policy_version = %snapshot.version,
        files = snapshot.files.len(),
        "policies loaded"
    );
    let (shutdown_switch, shutdown) = Shutdown::new();
    let shutdown_signal = shutdown.clone();
    let monitor_config = MonitorConfig { policy_dir: config.policies.clone(), ..config.monitor.clone() };
    let monitor = Monitor::open(snapshot, store, monitor_config, shutdown)
        .await
        .map_err(|error| ServerError::Store { dir: store_dir.clone(), error })?;
    monitor.add_policy_warnings(unproved);
    let key_path = config.data.join(crate::config::CHECKPOINT_KEY_FILE);
    let key = crate::checkpoint::CheckpointKey::load_or_create(&key_path).map_err(ServerError::Task)?;
    let passkeys = match monitor.store() {
        Store::Postgres(pg) => {
            let imported = crate::passkeys::read_file(&config.data).map_err(ServerError::Task)?;
            let (keep, enrolled) = pg.passkey_keep(imported).await.map_err(|error| ServerError::Database {
                url: config.store.as_ref().map(|s| s.url.clone()).unwrap_or_default(),
                error,
            })?;
            crate::passkeys::Book::kept(Box::new(keep), enrolled).map_err(ServerError::Task)?
        }
        Store::Embedded(_) => crate::passkeys::Book::open(&config.data).map_err(ServerError::Task)?,
    };
    let monitor = Arc::new(monitor.with_passkeys(passkeys).with_checkpoints(crate::service::Checkpoints {
        key,
        log: config.data.join(crate::config::CHECKPOINT_LOG_FILE),
        every: config.checkpoint_every,
    }));

    let (router, health) =
        grpc::router(&monitor, &credentials, config.tls.as_ref(), None).await.map_err(ServerError::Reflection)?;
    let local = match &config.socket {
        Some(socket) => {
            let uids = Arc::new(socket.uids.iter().copied().collect());
            let (router, _) =
                grpc::router(&monitor, &credentials, None, Some(uids)).await.map_err(ServerError::Reflection)?;
            match std::fs::remove_file(&socket.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(ServerError::Task(format!("{}: {e}", socket.path.display()))),
            }
            let listener = tokio::net::UnixListener::bind(&socket.path)
                .map_err(|e| ServerError::Task(format!("cannot listen on {}: {e}", socket.path.display())))?;
            open_to_socket_uids(socket)
                .map_err(|e| ServerError::Task(format!("cannot open {} to socket_uids: {e}", socket.path.display())))?;
            let mut stopping = monitor.shutdown();
            Some(tokio::spawn(async move {
                let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
                router.serve_with_incoming_shutdown(incoming, async move { stopping.stopped().await }).await
            }))
        }
        None => None,
    };
    // Approvals past their deadline are denied even when nobody asks.
    let sweeper = tokio::spawn(sweep(Arc::clone(&monitor)));
    let signer = tokio::spawn(sign_checkpoints(Arc::clone(&monitor)));
    let retainer = tokio::spawn(retain(Arc::clone(&monitor), config.audit.clone()));
    let shared = match monitor.store() {
        Store::Postgres(pg) => Some(tokio::spawn(follow_shared(Arc::clone(&monitor), pg.clone()))),
        Store::Embedded(_) => None,
    };
    // A change in the policy folder is loaded within a second.
    let watcher = crate::watch::watch_policies(Arc::clone(&monitor), config.policies.clone(), Watched::Live)
        .map_err(|e| ServerError::Task(format!("cannot watch {}: {e}", config.policies.display())))?;
    // The shadow folder too, loaded first (a folder that does not load
    // shows in the status and decides nothing).
    let shadow_watcher = match &config.monitor.shadow_dir {
        Some(dir) => {
            monitor
                .reload_shadow("monitor (start)", true)
                .await
                .map_err(|e| ServerError::Task(format!("cannot record the shadow folder's load: {e}")))?;
            Some(
                crate::watch::watch_policies(Arc::clone(&monitor), dir.clone(), Watched::Shadow)
                    .map_err(|e| ServerError::Task(format!("cannot watch {}: {e}", dir.display())))?,
            )
        }
        None => None,
    };
    let scrape: crate::metrics::Render = {
        let (monitor, data) = (Arc::downgrade(&monitor), config.data.clone());
        Arc::new(move || {
            let (monitor, data) = (monitor.upgrade(), data.clone());
            Box::pin(async move {
                match monitor {
                    Some(monitor) => monitor.metrics_text(&data).await,
                    None => String::new(),
                }
            })
        })
    };
    let shutdown = monitor.shutdown();
    let weak_monitor = Arc::downgrade(&monitor);
    let monitor_gone = Arc::downgrade(&monitor);
    drop(monitor);

    let addr = listener.local_addr().map_err(|e| ServerError::Task(format!("listener address: {e}")))?;
    let mut stopping = shutdown_signal;
    let task = tokio::spawn(async move {
        // Without TCP_NODELAY, small answers on a busy connection wait for
        // the peer's delayed ACK (about 40 ms on Linux).
        let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let serve = router.serve_with_incoming_shutdown(incoming, async move {
            signal.await;
            tracing::info!("shutting down");
            health.stopping().await;
            // End waits and followed streams so that no client holds us up.
            let _ = shutdown_switch.send(true);
        });
        let served = tokio::select! {
            served = serve => served,
            () = async {
                stopping.stopped().await;
                tokio::time::sleep(SHUTDOWN_GRACE).await;
            } => {
                tracing::warn!("clients still connected {SHUTDOWN_GRACE:?} after shutdown began; closing anyway");
                Ok(())
            }
        };
        if let Some(local) = local {
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, local).await;
        }
        let _ = sweeper.await;
        let _ = signer.await;
        let _ = retainer.await;
        if let Some(shared) = shared {
            let _ = shared.await;
        }
        let _ = watcher.await;
        if let Some(shadow_watcher) = shadow_watcher {
            let _ = shadow_watcher.await;
        }
        // Write what was already sent, refuse the rest, flush.
        let closed = closer.close().await.map_err(ServerError::Close);
        // Then wait (within the grace) for the last holder of the store, a
        // connection's task or a pruning pass, to let go of it: when this
        // returns, the data folder's store is free for the next to open.
        let released = tokio::time::Instant::now() + SHUTDOWN_GRACE;
        while (monitor_gone.strong_count() > 0 || !store_free(&store_dir)) && tokio::time::Instant::now() < released {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        served?;
        closed?;
        tracing::info!("stopped; the store is flushed");
        Ok(())
    });
    Ok(RunningServer { addr, stop: None, task, scrape, shutdown, monitor: weak_monitor, credentials, tls: config.tls })
}

/// Whether sled's lock on the store in `dir` is free (nobody holds it open).
fn store_free(dir: &std::path::Path) -> bool {
    use fs2::FileExt;
    match std::fs::File::open(dir.join("db")) {
        Ok(file) => file.try_lock_exclusive().and_then(|()| FileExt::unlock(&file)).is_ok(),
        Err(_) => true,
    }
}

/// How often a monitor on PostgreSQL says what it serves (`warden_replicas`).
const REPORT_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// On PostgreSQL, until shutdown: reloads the grants and locks when another
/// monitor changed them (or the listener reconnected, when it may have
/// missed it), and says every `REPORT_EVERY` which policies this one serves.
async fn follow_shared(monitor: Arc<Monitor>, pg: crate::store::postgres::Postgres) {
    let mut shutdown = monitor.shutdown();
    let mut changes = pg.state_changes();
    let started = crate::service::unix_ns(monitor.now());
    let key = monitor.checkpoint_public_key();
    let mut reload_failed = false;
    let mut report = tokio::time::interval(REPORT_EVERY);
    report.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.stopped() => return,
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
                reload_failed = reload_shared(&monitor, reload_failed).await;
            }
            // A reload that failed (the database away for a moment) is tried
            // again: a grant made meanwhile is not known until then.
            () = tokio::time::sleep(RELOAD_RETRY), if reload_failed => {
                reload_failed = reload_shared(&monitor, reload_failed).await;
            }
            _ = report.tick() => {
                let status = monitor.policy_status();
                let now = crate::service::unix_ns(monitor.now());
                if let Err(e) =
                    pg.report_replica(started, now, &status.version, status.loaded_at_unix_ns, &status.error, &key).await
                {
                    tracing::warn!(error = %e, "cannot say in PostgreSQL which policies this monitor serves");
                }
            }
        }
    }
}

/// How soon a failed reload of the shared grants and locks is tried again.
const RELOAD_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Rereads the grants and locks from the database; true when it failed
/// (said once, not at every retry, while `failing`).
async fn reload_shared(monitor: &Monitor, failing: bool) -> bool {
    match monitor.reload_shared_state().await {
        Ok(()) => {
            if failing {
                tracing::info!("grants and locks reloaded from PostgreSQL");
            }
            false
        }
        Err(e) => {
            if !failing {
                tracing::error!(error = %e, "cannot reload grants and locks from PostgreSQL; trying again every second");
            }
            true
        }
    }
}

/// How often the sweeper looks for approvals and grants past their deadline.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// The sweeper, until shutdown: every `SWEEP_EVERY`, prunes old idempotency
/// records (on a task of its own) and runs [`Monitor::sweep_once`].
async fn sweep(monitor: Arc<Monitor>) {
    let mut shutdown = monitor.shutdown();
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = shutdown.stopped() => return,
        }
        let pruner = Arc::clone(&monitor);
        tokio::spawn(async move { pruner.prune_requests().await });
        monitor.sweep_once().await;
    }
}

/// How often retention looks at the audit log's oldest segments.
const RETAIN_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Retention, until shutdown: [`Monitor::retain_once`] each time a segment
/// is sealed, and every `RETAIN_EVERY` (for `retain_days`); nothing when
/// `[audit]` keeps everything.
async fn retain(monitor: Arc<Monitor>, audit: crate::config::AuditConfig) {
    if !audit.retains() {
        return;
    }
    let mut shutdown = monitor.shutdown();
    let mut failing = false;
    loop {
        match monitor.retain_once(&audit).await {
            Ok(_) => failing = false,
            // Said once until it works again, not every round.
            Err(e) if !failing => {
                tracing::error!(error = %e, "audit retention failed; the log keeps growing");
                failing = true;
            }
            Err(_) => {}
        }
        tokio::select! {
            () = tokio::time::sleep(RETAIN_EVERY) => {}
            () = monitor.store().segment_sealed() => {}
            () = shutdown.stopped() => return,
        }
    }
}

/// Connecting to a Unix socket takes write permission on its file, which
/// the umask decides (0700 under a unit's `UMask=0077`, 0755 under 022): a
/// uid in `socket_uids` other than wardend's own could not connect at all.
/// So the socket is made connectable by every uid when `socket_uids` names
/// another one: the peer uid check (SO_PEERCRED) before any token is the
/// gate, and health and reflection, the only calls it does not guard, are
/// served to every local uid on the loopback port anyway.
fn open_to_socket_uids(socket: &UnixSocket) -> std::io::Result<()> {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
    // Not through a link that someone with write access to the folder put
    // in the socket's place since it was bound.
    let file = std::fs::symlink_metadata(&socket.path)?;
    if !file.file_type().is_socket() {
        return Err(std::io::Error::other("it is no longer the socket wardend bound"));
    }
    if socket.uids.iter().any(|&uid| uid != file.uid()) {
        std::fs::set_permissions(&socket.path, std::fs::Permissions::from_mode(0o666))?;
    }
    Ok(())
}

/// Says so at start when the disk under the store has less than a tenth
/// (or less than 1 GiB) free: a full disk stops every decision (the monitor
/// fails closed), so the operator should know before.
fn warn_if_disk_nearly_full(store_dir: &std::path::Path, audit: &crate::config::AuditConfig) {
    let (Ok(free), Ok(total)) = (fs2::available_space(store_dir), fs2::total_space(store_dir)) else { return };
    if free < total / 10 || free < 1 << 30 {
        tracing::warn!(
            free_bytes = free,
            total_bytes = total,
            retention = audit.retains(),
            "the disk of the store is nearly full: when it is full every decision fails (closed); \
             set [audit] retain_days or retain_bytes, or make room"
        );
    }
}

/// The signer, until shutdown and once more then: the durable audit head,
/// signed every `checkpoint_interval` (nothing without a checkpoint key).
async fn sign_checkpoints(monitor: Arc<Monitor>) {
    let Some(every) = monitor.checkpoint_every() else { return };
    let mut shutdown = monitor.shutdown();
    let mut last = u64::MAX;
    loop {
        let stopping = tokio::select! {
            () = tokio::time::sleep(every) => false,
            () = shutdown.stopped() => true,
        };
        last = monitor.checkpoint_once(last).await;
        if stopping {
            return;
        }
    }
}
