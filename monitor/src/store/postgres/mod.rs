//! The PostgreSQL store: the state and the audit log of several monitors
//! (replicas) on one database.
//!
//! One chain for all of them: every batch a monitor appends takes the
//! one-row `warden_audit_head` with `SELECT … FOR UPDATE`, so seqs are given
//! in order and without gaps across monitors, and in the same transaction
//! reads the rows its guards need (a request id, an approval, a session's
//! labels, the locks), plans the batch exactly as the embedded store does
//! (`store::plan`), writes its records and state, moves the head, and
//! commits; only then is anyone answered. A replica's records are not a
//! chain of their own: a verifier walks one chain, whichever replica wrote
//! each record (its name is in the row).
//!
//! What changes reaches the other monitors by `NOTIFY` (`listen.rs`): new
//! records (followers of the log), approvals (waiters and watchers), grants
//! and locks (kept in memory by each monitor for its decisions). A waiter
//! also reads the store now and then: a notification sent while a
//! monitor's listening connection was down is lost.
//!
//! Three connections per monitor: the writer's (a transaction per batch),
//! the readers' (queries from many calls at once, pipelined on one
//! connection) and the listener's. Each is made again when it breaks; until
//! then, calls that need it fail with `UNAVAILABLE`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio_postgres::Client;

use super::*;

mod listen;
mod passkeys;
mod retention;
pub(crate) mod schema;

pub(crate) use self::retention::{drop_archive, finish_archive, write_archive};
mod writer;

/// How to reach the database.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PgOptions {
    /// `postgres://USER@HOST:PORT/DB?sslmode=…` (never with a password).
    pub url: String,
    /// A file whose first line is the password.
    pub password_file: Option<PathBuf>,
    /// The CA that signed the server's certificate (PEM) [default: the
    /// system's CAs].
    pub ca_file: Option<PathBuf>,
}

/// What this monitor calls itself in the audit rows it appends and in
/// `warden_replicas`.
pub(crate) fn replica_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "wardend".into());
    format!("{host}:{}", std::process::id())
}

/// A failed statement or connection, for the caller (which fails closed).
pub(super) fn pg_error(e: tokio_postgres::Error) -> StoreError {
    if let Some(db) = e.as_db_error() {
        return StoreError::Postgres(format!("{}: {}", db.code().code(), db.message()));
    }
    // The causes too: "error performing TLS handshake" alone says not which
    // certificate was refused.
    let mut message = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(inner) = cause {
        message.push_str(&format!(": {inner}"));
        cause = inner.source();
    }
    if message.contains("invalid peer certificate") {
        message.push_str(
            " (the database's certificate is not trusted for this host: name the CA that signed it in `[store] \
             ca_file`, or, for a database on loopback only, add `sslmode=disable` to the URL)",
        );
    }
    StoreError::Postgres(message)
}

/// A stored value that does not decode.
pub(super) fn corrupt(table: &'static str, key: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt { tree: table, key: key.to_owned(), message: e.to_string() }
}

pub(super) fn json<T: Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::BatchFailed(format!("encoding a record: {e}")))
}

pub(super) fn from_json<T: for<'de> Deserialize<'de>>(
    table: &'static str,
    key: &str,
    text: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| corrupt(table, key, e))
}

/// The connection settings and TLS, parsed once; connects on demand.
#[derive(Clone)]
struct Connector {
    config: tokio_postgres::Config,
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
}

impl Connector {
    fn new(options: &PgOptions) -> Result<Self, StoreError> {
        let mut config: tokio_postgres::Config =
            options.url.parse().map_err(|e| StoreError::Postgres(format!("the store URL: {e}")))?;
        if config.get_password().is_some() {
            return Err(StoreError::Postgres(
                "the store URL holds a password: put it in a file named by `[store] password_file` instead (a \
                 URL is seen in process lists and logs)"
                    .into(),
            ));
        }
        if let Some(path) = &options.password_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| StoreError::Postgres(format!("the password file {}: {e}", path.display())))?;
            config.password(text.lines().next().unwrap_or_default());
        }
        if config.get_application_name().is_none() {
            config.application_name("wardend");
        }
        config.connect_timeout(std::time::Duration::from_secs(5));
        // A monitor cut off mid-batch must not hold the chain's head row
        // (and so every monitor) for longer than this; waits for a lock end
        // too, and a dead peer is noticed by keepalives.
        config.options("-c lock_timeout=5s -c idle_in_transaction_session_timeout=15s");
        config.keepalives(true);
        config.keepalives_idle(std::time::Duration::from_secs(10));
        let tls = match config.get_ssl_mode() {
            tokio_postgres::config::SslMode::Disable => None,
            _ => Some(tls_connector(options.ca_file.as_deref())?),
        };
        Ok(Self { config, tls })
    }

    /// A new connection, its I/O driven by a task of its own.
    async fn connect(&self) -> Result<Client, StoreError> {
        match &self.tls {
            None => {
                let (client, connection) = self.config.connect(tokio_postgres::NoTls).await.map_err(pg_error)?;
                tokio::spawn(async move {
                    if let Err(e) = connection.await {
                        tracing::warn!(error = %e, "PostgreSQL connection ended");
                    }
                });
                Ok(client)
            }
            Some(tls) => {
                let (client, connection) = self.config.connect(tls.clone()).await.map_err(pg_error)?;
                tokio::spawn(async move {
                    if let Err(e) = connection.await {
                        tracing::warn!(error = %e, "PostgreSQL connection ended");
                    }
                });
                Ok(client)
            }
        }
    }

    /// A new connection whose messages (notifications) the caller reads.
    async fn connect_listening(&self) -> Result<(Client, listen::Messages), StoreError> {
        match &self.tls {
            None => {
                let (client, connection) = self.config.connect(tokio_postgres::NoTls).await.map_err(pg_error)?;
                Ok((client, listen::Messages::new(connection)))
            }
            Some(tls) => {
                let (client, connection) = self.config.connect(tls.clone()).await.map_err(pg_error)?;
                Ok((client, listen::Messages::new(connection)))
            }
        }
    }
}

fn tls_connector(ca_file: Option<&std::path::Path>) -> Result<tokio_postgres_rustls::MakeRustlsConnect, StoreError> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| StoreError::Postgres(format!("the store's CA file {}: {e}", path.display())))?;
            for cert in certs {
                roots.add(cert).map_err(|e| StoreError::Postgres(format!("the store's CA file: {e}")))?;
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Postgres(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// The readers' connection, made again when it broke.
struct Readers {
    connector: Connector,
    client: tokio::sync::Mutex<Option<Arc<Client>>>,
}

impl Readers {
    async fn client(&self) -> Result<Arc<Client>, StoreError> {
        let mut held = self.client.lock().await;
        if let Some(client) = held.as_ref()
            && !client.is_closed()
        {
            return Ok(Arc::clone(client));
        }
        *held = None;
        let client = Arc::new(self.connector.connect().await?);
        *held = Some(Arc::clone(&client));
        Ok(client)
    }
}

/// The PostgreSQL store of one monitor.
#[derive(Clone)]
pub(crate) struct Postgres {
    /// To make a connection of its own (a passkey change's transaction).
    connector: Connector,
    readers: Arc<Readers>,
    writer: mpsc::Sender<Job>,
    /// The newest record committed, by any monitor, that this one knows of.
    durable: Arc<watch::Sender<u64>>,
    approval_events: broadcast::Sender<ApprovalEvent>,
    /// Moves when grants or locks changed (on any monitor) or may have.
    state_changes: Arc<watch::Sender<u64>>,
    append_seconds: prometheus_client::metrics::histogram::Histogram,
    pruned_window: Arc<AtomicI64>,
    /// This monitor's name in the rows it writes.
    replica: Arc<str>,
}

impl Postgres {
    /// Connects, migrates the schema, and starts the writer and the
    /// listener. Must be called inside a tokio runtime.
    pub(crate) async fn open(options: &PgOptions) -> Result<(Self, StoreCloser), StoreError> {
        let connector = Connector::new(options)?;
        let mut first = connector.connect().await?;
        schema::migrate(&mut first).await?;
        let head: i64 =
            first.query_one("SELECT seq FROM warden_audit_head WHERE id = 1", &[]).await.map_err(pg_error)?.get(0);
        let replica: Arc<str> = replica_name().into();
        let (durable, _) = watch::channel(u64::try_from(head).unwrap_or(0));
        let durable = Arc::new(durable);
        let (approval_events, _) = broadcast::channel(APPROVAL_EVENTS);
        let (state_changes, _) = watch::channel(0);
        let state_changes = Arc::new(state_changes);
        let readers =
            Arc::new(Readers { connector: connector.clone(), client: tokio::sync::Mutex::new(Some(Arc::new(first))) });
        let (writer, jobs) = mpsc::channel(4 * MAX_BATCH);
        let (close, closing) = oneshot::channel();
        let store = Self {
            connector: connector.clone(),
            readers,
            writer,
            durable: Arc::clone(&durable),
            approval_events: approval_events.clone(),
            state_changes: Arc::clone(&state_changes),
            // 50 µs to ~1.6 s.
            append_seconds: prometheus_client::metrics::histogram::Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(0.000_05, 2.0, 16),
            ),
            pruned_window: Arc::new(AtomicI64::new(i64::MIN)),
            replica: Arc::clone(&replica),
        };
        let (stop_listening, listener_stop) = oneshot::channel::<()>();
        let listener =
            tokio::spawn(listen::Listener { connector: connector.clone(), store: store.clone() }.run(listener_stop));
        let task = tokio::spawn(async move {
            writer::WriteLoop::new(connector, replica, durable).run(jobs, closing).await;
            let _ = stop_listening.send(());
            let _ = listener.await;
        });
        Ok((store, StoreCloser { close, task }))
    }

    /// Appends a record with its state, if its guard holds, and returns once
    /// PostgreSQL committed it.
    pub(crate) async fn commit(&self, commit: Commit) -> Result<Committed, StoreError> {
        send_job(&self.writer, &self.append_seconds, commit).await
    }

    pub(crate) fn append_seconds(&self) -> prometheus_client::metrics::histogram::Histogram {
        self.append_seconds.clone()
    }

    /// This monitor's name in the rows it writes.
    pub(crate) fn replica(&self) -> &str {
        &self.replica
    }

    /// Forgets idempotency records older than two replay windows, once a
    /// window (each monitor does; the second finds nothing).
    pub(crate) async fn prune_requests(&self, now_unix_ns: i64) -> Result<usize, StoreError> {
        let window = now_unix_ns.div_euclid(REPLAY_WINDOW_NS);
        if self.pruned_window.swap(window, Ordering::AcqRel) == window {
            return Ok(0);
        }
        let before = now_unix_ns.saturating_sub(2 * REPLAY_WINDOW_NS + CLOCK_SKEW_NS);
        let client = self.readers.client().await?;
        let removed = client
            .execute("DELETE FROM warden_requests WHERE decided_unix_ns < $1", &[&before])
            .await
            .map_err(pg_error);
        // Buckets that have refilled are the same as none.
        if let Err(e) = client.execute("DELETE FROM warden_rate WHERE full_unix_ns < $1", &[&now_unix_ns]).await {
            tracing::warn!(error = %pg_error(e), "cannot remove refilled rate buckets");
        }
        if removed.is_err() {
            self.pruned_window.store(i64::MIN, Ordering::Release);
        }
        Ok(usize::try_from(removed?).unwrap_or(usize::MAX))
    }

    /// Takes one token from the shared bucket `key` at `now_unix_ns`, or
    /// says how long to wait (and whether this is the first refusal of a
    /// burst). The bucket's row is locked for the statement: monitors
    /// taking from one bucket at once take in turn.
    pub(crate) async fn take_token(
        &self,
        key: &str,
        rate: crate::ratelimit::Rate,
        now_unix_ns: i64,
    ) -> Result<Result<(), crate::ratelimit::Limited>, StoreError> {
        const TAKE: &str = "WITH prev AS (SELECT tokens, at_unix_ns, refusing FROM warden_rate WHERE key = $1 FOR             UPDATE), now_state AS (SELECT coalesce((SELECT least($3, tokens + greatest(0, $4 - at_unix_ns)::float8             * $2 / 1e9) FROM prev), $3) AS avail, coalesce((SELECT refusing FROM prev), false) AS was_refusing),             next AS (SELECT avail, was_refusing, CASE WHEN avail >= 1 THEN avail - 1 ELSE avail END AS left_over             FROM now_state), put AS (INSERT INTO warden_rate (key, tokens, at_unix_ns, refusing, full_unix_ns)             SELECT $1, left_over, $4, avail < 1, $4 + least(9e18, ($3 - left_over) / $2 * 1e9)::bigint FROM next             ON CONFLICT (key) DO UPDATE SET tokens = EXCLUDED.tokens, at_unix_ns = EXCLUDED.at_unix_ns, refusing             = EXCLUDED.refusing, full_unix_ns = EXCLUDED.full_unix_ns RETURNING 1) SELECT avail, was_refusing             FROM next, put";
        let burst = f64::from(rate.burst.max(1));
        let per_second = if rate.per_second > 0.0 { rate.per_second } else { 1e-9 };
        // The limiter's keys separate their parts with NUL, which a text
        // column cannot hold: the row's key is their hash.
        let key = hex::encode(sha2::Sha256::digest(key.as_bytes()));
        // A full bucket first when there is none, so that the statement
        // below always locks a row: concurrent first takes then go in turn.
        const MAKE: &str = "INSERT INTO warden_rate (key, tokens, at_unix_ns, refusing, full_unix_ns) VALUES ($1, $2, \
            $3, false, $3) ON CONFLICT (key) DO NOTHING";
        let client = self.readers.client().await?;
        let make: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&key, &burst, &now_unix_ns];
        let take: [&(dyn tokio_postgres::types::ToSql + Sync); 4] = [&key, &per_second, &burst, &now_unix_ns];
        let (made, row) = tokio::join!(client.execute(MAKE, &make), client.query_one(TAKE, &take));
        made.map_err(pg_error)?;
        let row = row.map_err(pg_error)?;
        let (available, was_refusing): (f64, bool) = (row.get(0), row.get(1));
        if available >= 1.0 {
            return Ok(Ok(()));
        }
        let wait = ((1.0 - available) / per_second).clamp(0.001, 3600.0);
        Ok(Err(crate::ratelimit::Limited {
            retry_after: std::time::Duration::from_secs_f64(wait),
            first: !was_refusing,
        }))
    }

    pub(crate) async fn approval(&self, approval_id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        let client = self.readers.client().await?;
        let row = client
            .query_opt("SELECT record FROM warden_approvals WHERE approval_id = $1", &[&approval_id])
            .await
            .map_err(pg_error)?;
        row.map(|row| from_json(trees::APPROVALS, approval_id, row.get(0))).transpose()
    }

    pub(crate) async fn grants(&self) -> Result<Vec<Grant>, StoreError> {
        let client = self.readers.client().await?;
        let rows = client.query("SELECT grant_id, record FROM warden_grants", &[]).await.map_err(pg_error)?;
        rows.iter().map(|row| from_json(trees::GRANTS, row.get(0), row.get(1))).collect()
    }

    pub(crate) async fn locks(&self) -> Result<Vec<Lock>, StoreError> {
        let client = self.readers.client().await?;
        let rows = client.query("SELECT target, record FROM warden_locks", &[]).await.map_err(pg_error)?;
        rows.iter().map(|row| from_json(trees::LOCKS, row.get(0), row.get(1))).collect()
    }

    pub(crate) async fn session(&self, key: &SessionKey) -> Result<Option<SessionRecord>, StoreError> {
        let client = self.readers.client().await?;
        let row = client
            .query_opt(
                "SELECT record FROM warden_sessions WHERE session = $1 AND harness = $2 AND user_id = $3",
                &[&key.session, &key.harness, &key.user],
            )
            .await
            .map_err(pg_error)?;
        row.map(|row| from_json(trees::SESSIONS, &key.session, row.get(0))).transpose()
    }

    pub(crate) async fn sessions_named(&self, session: &str) -> Result<Vec<SessionRecord>, StoreError> {
        let client = self.readers.client().await?;
        let rows = client
            .query("SELECT record FROM warden_sessions WHERE session = $1", &[&session])
            .await
            .map_err(pg_error)?;
        rows.iter().map(|row| from_json(trees::SESSIONS, session, row.get(0))).collect()
    }

    /// Approvals waiting at `now_unix_ns` of a session, or of a harness.
    pub(crate) async fn pending_count(
        &self,
        session: Option<&SessionKey>,
        harness: Option<&str>,
        now_unix_ns: i64,
    ) -> Result<usize, StoreError> {
        let client = self.readers.client().await?;
        let row = match (session, harness) {
            (Some(key), _) => client
                .query_one(
                    "SELECT count(*) FROM warden_approvals WHERE pending AND harness = $1 AND user_id = $2 AND \
                     session = $3 AND expires_unix_ns > $4",
                    &[&key.harness, &key.user, &key.session, &now_unix_ns],
                )
                .await
                .map_err(pg_error)?,
            (None, harness) => client
                .query_one(
                    "SELECT count(*) FROM warden_approvals WHERE pending AND harness = $1 AND expires_unix_ns > $2",
                    &[&harness.unwrap_or_default(), &now_unix_ns],
                )
                .await
                .map_err(pg_error)?,
        };
        Ok(usize::try_from(row.get::<_, i64>(0)).unwrap_or(usize::MAX))
    }

    pub(crate) async fn pending_until(&self, unix_ns: i64) -> Result<Vec<ApprovalRecord>, StoreError> {
        let client = self.readers.client().await?;
        let rows = client
            .query(
                "SELECT approval_id, record FROM warden_approvals WHERE pending AND expires_unix_ns <= $1 ORDER BY \
                 expires_unix_ns, approval_id",
                &[&unix_ns],
            )
            .await
            .map_err(pg_error)?;
        rows.iter().map(|row| from_json(trees::APPROVALS, row.get(0), row.get(1))).collect()
    }

    /// Records from `from_seq` on, at most `limit`, in order.
    pub(crate) async fn audit_from(&self, from_seq: u64, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        let client = self.readers.client().await?;
        let from = i64::try_from(from_seq).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = client
            .query("SELECT seq, record FROM warden_audit WHERE seq >= $1 ORDER BY seq LIMIT $2", &[&from, &limit])
            .await
            .map_err(pg_error)?;
        rows.iter()
            .map(|row| {
                let seq: i64 = row.get(0);
                let record: AuditRecord = from_json("warden_audit", &seq.to_string(), row.get(1))?;
                // The row's key and the record's own seq must agree: a row
                // moved to another seq is tampering.
                if i64::try_from(record.seq).ok() != Some(seq) {
                    return Err(corrupt("warden_audit", &seq.to_string(), format!("holds record #{}", record.seq)));
                }
                Ok(record)
            })
            .collect()
    }

    pub(crate) async fn seq_at_time(&self, unix_ns: i64) -> Result<u64, StoreError> {
        let client = self.readers.client().await?;
        let row = client
            .query_one(
                "SELECT coalesce((SELECT min(seq) FROM warden_audit WHERE time_unix_ns >= $1), (SELECT seq + 1 FROM \
                 warden_audit_head WHERE id = 1))",
                &[&unix_ns],
            )
            .await
            .map_err(pg_error)?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    /// The newest committed record, as the database has it.
    pub(crate) async fn head_seq(&self) -> Result<u64, StoreError> {
        let client = self.readers.client().await?;
        let row = client.query_one("SELECT seq FROM warden_audit_head WHERE id = 1", &[]).await.map_err(pg_error)?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    pub(crate) async fn hash_at(&self, seq: u64) -> Result<Option<String>, StoreError> {
        Ok(self.audit_from(seq, 1).await?.into_iter().find(|r| r.seq == seq).map(|r| r.hash))
    }

    pub(crate) fn durable_updates(&self) -> watch::Receiver<u64> {
        let mut updates = self.durable.subscribe();
        updates.mark_unchanged();
        updates
    }

    pub(crate) fn approval_events(&self) -> broadcast::Receiver<ApprovalEvent> {
        self.approval_events.subscribe()
    }

    /// Moves when grants or locks may have changed on any monitor.
    pub(crate) fn state_changes(&self) -> watch::Receiver<u64> {
        let mut changes = self.state_changes.subscribe();
        changes.mark_unchanged();
        changes
    }

    pub(crate) fn durable_seq(&self) -> u64 {
        *self.durable.borrow()
    }

    /// Walks the whole chain in the database, a page at a time, from its
    /// oldest record up to the newest this monitor knows to be committed.
    /// A chain whose oldest records retention removed starts after the
    /// last one removed (`base`, which the caller checks against the
    /// removal record and a signed checkpoint: `checkpoint::check_base`).
    pub(crate) async fn verify(&self) -> VerifyReport {
        const PAGE: usize = 4096;
        let upto = self.durable_seq();
        let mut report = VerifyReport {
            records: 0,
            head: Head::genesis(),
            first_bad: None,
            base: Head::genesis(),
            removed_through: Default::default(),
        };
        let oldest = match self.audit_extent().await {
            Ok(extent) => extent.map(|(oldest, _)| oldest),
            Err(e) => {
                report.first_bad = Some((1, e.to_string()));
                return report;
            }
        };
        if let Some(oldest) = oldest.filter(|&oldest| oldest > 1 && oldest <= upto) {
            match self.audit_from(oldest, 1).await {
                Ok(first) => {
                    if let Some(first) = first.first() {
                        report.base = Head { seq: oldest - 1, hash: first.prev_hash.clone() };
                        report.head = report.base.clone();
                    }
                }
                Err(e) => {
                    report.first_bad = Some((oldest, e.to_string()));
                    return report;
                }
            }
        }
        while report.head.seq < upto {
            let at = report.head.seq + 1;
            let page = match self.audit_from(at, PAGE).await {
                Ok(page) => page,
                Err(e) => {
                    report.first_bad = Some((at, e.to_string()));
                    return report;
                }
            };
            let page: Vec<AuditRecord> = page.into_iter().take_while(|r| r.seq <= upto).collect();
            if page.is_empty() {
                let missing = format!("the log ends at #{} before the head #{upto}", report.head.seq);
                report.first_bad = Some((at, missing));
                return report;
            }
            let checked = verify_chain(report.head.clone(), page.into_iter().map(Ok::<_, StoreError>));
            report.records += checked.records;
            report.removed_through.extend(checked.removed_through);
            report.head = checked.head;
            if checked.first_bad.is_some() {
                report.first_bad = checked.first_bad;
                return report;
            }
        }
        report
    }

    /// Records what this monitor serves, for `policy status` on every
    /// replica.
    pub(crate) async fn report_replica(
        &self,
        started_unix_ns: i64,
        now_unix_ns: i64,
        version: &str,
        loaded_unix_ns: i64,
        error: &str,
        checkpoint_key: &str,
    ) -> Result<(), StoreError> {
        let client = self.readers.client().await?;
        client
            .execute(
                "INSERT INTO warden_replicas (replica, started_unix_ns, seen_unix_ns, policy_version, \
                 policy_loaded_unix_ns, policy_error, checkpoint_key) VALUES ($1, $2, $3, $4, $5, $6, $7) ON \
                 CONFLICT (replica) DO UPDATE SET seen_unix_ns = EXCLUDED.seen_unix_ns, policy_version = \
                 EXCLUDED.policy_version, policy_loaded_unix_ns = EXCLUDED.policy_loaded_unix_ns, policy_error = \
                 EXCLUDED.policy_error, checkpoint_key = EXCLUDED.checkpoint_key",
                &[&&*self.replica, &started_unix_ns, &now_unix_ns, &version, &loaded_unix_ns, &error, &checkpoint_key],
            )
            .await
            .map_err(pg_error)?;
        Ok(())
    }

    /// Every monitor seen since `since_unix_ns`, by name.
    pub(crate) async fn replicas(&self, since_unix_ns: i64) -> Result<Vec<ReplicaRecord>, StoreError> {
        let client = self.readers.client().await?;
        let rows = client
            .query(
                "SELECT replica, started_unix_ns, seen_unix_ns, policy_version, policy_loaded_unix_ns, policy_error, \
                 checkpoint_key FROM warden_replicas WHERE seen_unix_ns >= $1 ORDER BY replica",
                &[&since_unix_ns],
            )
            .await
            .map_err(pg_error)?;
        Ok(rows
            .iter()
            .map(|row| ReplicaRecord {
                replica: row.get(0),
                started_unix_ns: row.get(1),
                seen_unix_ns: row.get(2),
                policy_version: row.get(3),
                policy_loaded_unix_ns: row.get(4),
                policy_error: row.get(5),
                checkpoint_key: row.get(6),
            })
            .collect())
    }
}

/// A monitor on the database, as `warden_replicas` has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReplicaRecord {
    /// `HOST:PID`.
    pub(crate) replica: String,
    /// When it started.
    pub(crate) started_unix_ns: i64,
    /// When it last said it is there.
    pub(crate) seen_unix_ns: i64,
    /// The policy version it serves.
    pub(crate) policy_version: String,
    /// When it loaded it.
    pub(crate) policy_loaded_unix_ns: i64,
    /// Its last failed reload, if any.
    pub(crate) policy_error: String,
    /// The public key (hex) its checkpoints and removals are signed with.
    pub(crate) checkpoint_key: String,
}
