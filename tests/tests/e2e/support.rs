//! `TestMonitor`: a monitor on 127.0.0.1:0 with a temporary data folder,
//! known tokens for each role, and clients for each.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use warden_monitor::auth::{CredentialConfig, Role};
use warden_monitor::decision::DecisionConfig;
use warden_monitor::server::{RunningServer, ServerConfig, start};
use warden_monitor::service::{Clock, MonitorConfig};
use warden_proto::v1 as pb;
use warden_sdk::{BearerToken, Client};

pub const HARNESS: &str = "wdn_test_harness_all_users";
pub const ALICE_ONLY: &str = "wdn_test_harness_alice_only";
/// An approver of every group.
pub const APPROVER: &str = "wdn_test_approver";
/// An approver of `release-managers` only.
pub const RELEASE_APPROVER: &str = "wdn_test_release_approver";
/// An approver of no group: only approvals that name none.
pub const PLAIN_APPROVER: &str = "wdn_test_plain_approver";
pub const ADMIN: &str = "wdn_test_admin";
/// A harness limited to 1 request/s, 3 at once.
pub const LIMITED: &str = "wdn_test_harness_limited";

pub type Admin = pb::admin_client::AdminClient<InterceptedService<Channel, BearerToken>>;
pub type Approvals = pb::approvals_client::ApprovalsClient<InterceptedService<Channel, BearerToken>>;
pub type Authority = pb::authority_client::AuthorityClient<InterceptedService<Channel, BearerToken>>;

pub use warden_tests::wait::eventually;

/// The bundled policy folder.
pub fn bundled_policies() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies")
}

fn credential(name: &str, role: Role, token: &str, users: &[&str], groups: &[&str]) -> CredentialConfig {
    CredentialConfig {
        groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        ..CredentialConfig::for_token(name, role, token, users)
    }
}

pub struct TestMonitor {
    server: Option<RunningServer>,
    /// Changes to the monitor's settings for one test.
    tune: fn(&mut MonitorConfig),
    /// Seconds the monitor's clock runs ahead of the real one.
    clock_offset: Arc<AtomicI64>,
    /// `[audit]`.
    pub audit: warden_monitor::config::AuditConfig,
    pub endpoint: String,
    pub data: tempfile::TempDir,
    pub policies: PathBuf,
}

impl TestMonitor {
    /// A monitor with the bundled policies.
    pub async fn start() -> Self {
        Self::start_with(bundled_policies()).await
    }

    /// A monitor with the bundled policies approvable by token (see
    /// [`copy_bundled_token_approvals`]), for tests of how approving works.
    pub async fn start_token_approvals() -> (Self, tempfile::TempDir) {
        let policies = copy_bundled_token_approvals();
        (Self::start_with(policies.path().to_owned()).await, policies)
    }

    /// A monitor with the policies in `policies`.
    pub async fn start_with(policies: PathBuf) -> Self {
        let data = tempfile::tempdir().expect("temp dir");
        let mut monitor = Self {
            server: None,
            tune: |_| {},
            clock_offset: Arc::new(AtomicI64::new(0)),
            audit: Default::default(),
            endpoint: String::new(),
            data,
            policies,
        };
        monitor.launch().await;
        monitor
    }

    fn clock(&self) -> Clock {
        let offset = Arc::clone(&self.clock_offset);
        Arc::new(move || time::OffsetDateTime::now_utc() + time::Duration::seconds(offset.load(Ordering::SeqCst)))
    }

    /// Moves the monitor's clock forward (grants and their expiry), without
    /// sleeping.
    pub fn advance_clock(&self, by: Duration) {
        self.clock_offset.fetch_add(i64::try_from(by.as_secs()).unwrap(), Ordering::SeqCst);
    }

    /// A monitor with the bundled policies and this `[audit]`.
    pub async fn start_with_audit(audit: warden_monitor::config::AuditConfig) -> Self {
        let data = tempfile::tempdir().expect("temp dir");
        let mut monitor = Self {
            server: None,
            tune: |_| {},
            clock_offset: Arc::new(AtomicI64::new(0)),
            audit,
            endpoint: String::new(),
            data,
            policies: bundled_policies(),
        };
        monitor.launch().await;
        monitor
    }

    /// A monitor with the bundled policies and tuned settings.
    pub async fn start_tuned(tune: fn(&mut MonitorConfig)) -> Self {
        let data = tempfile::tempdir().expect("temp dir");
        let mut monitor = Self {
            server: None,
            tune,
            clock_offset: Arc::new(AtomicI64::new(0)),
            audit: Default::default(),
            endpoint: String::new(),
            data,
            policies: bundled_policies(),
        };
        monitor.launch().await;
        monitor
    }

    fn config(&self) -> ServerConfig {
        let mut monitor = MonitorConfig {
            policy_dir: self.policies.clone(),
            decision: DecisionConfig::default(),
            max_grant: Duration::from_secs(7 * 86_400),
            clock: self.clock(),
            ..MonitorConfig::default()
        };
        (self.tune)(&mut monitor);
        ServerConfig {
            policies: self.policies.clone(),
            data: self.data.path().to_owned(),
            credentials: vec![
                credential("test-harness", Role::Harness, HARNESS, &["*"], &[]),
                credential("alice-harness", Role::Harness, ALICE_ONLY, &["alice"], &[]),
                credential("oncall", Role::Approver, APPROVER, &[], &["*"]),
                credential("release-oncall", Role::Approver, RELEASE_APPROVER, &[], &["release-managers"]),
                credential("plain-oncall", Role::Approver, PLAIN_APPROVER, &[], &[]),
                credential("security", Role::Admin, ADMIN, &[], &[]),
                CredentialConfig {
                    rate_per_second: Some(1.0),
                    burst: Some(3),
                    ..credential("slow-harness", Role::Harness, LIMITED, &["*"], &[])
                },
            ],
            durability: Default::default(),
            checkpoint_every: std::time::Duration::from_secs(300),
            tls: None,
            socket: None,
            audit: self.audit.clone(),
            store: self.postgres(),
            monitor,
        }
    }

    /// With `WARDEN_E2E_STORE=postgres://USER@HOST:PORT` (a cluster that
    /// trusts the user), every test's monitor keeps its state in a database
    /// of its own there: the suite run against the PostgreSQL store.
    fn postgres(&self) -> Option<warden_monitor::store::postgres::PgOptions> {
        let base = std::env::var("WARDEN_E2E_STORE").ok()?;
        let name = self
            .data
            .path()
            .file_name()?
            .to_string_lossy()
            .to_lowercase()
            .replace(|c: char| !c.is_ascii_alphanumeric(), "_");
        let database = format!("e2e_{name}");
        let made = std::process::Command::new("psql")
            .args(["-X", "-q", &format!("{base}/postgres"), "-c", &format!("CREATE DATABASE {database}")])
            .output()
            .expect("psql");
        let said = String::from_utf8_lossy(&made.stderr);
        assert!(made.status.success() || said.contains("already exists"), "{said}");
        Some(warden_monitor::store::postgres::PgOptions { url: format!("{base}/{database}"), ..Default::default() })
    }

    async fn launch(&mut self) {
        // Bind first, then serve: no sleeps, no port races. A restart takes
        // the same port again, so that clients reconnect to it.
        let addr = self.endpoint.strip_prefix("http://").unwrap_or("127.0.0.1:0").to_owned();
        let listener = tokio::net::TcpListener::bind(&addr).await.expect("bind");
        let server = start(self.config(), listener).await.expect("monitor starts");
        self.endpoint = format!("http://{}", server.addr());
        self.server = Some(server);
    }

    /// Starts the monitor again after `stop_server` (same data and port).
    pub async fn launch_again(&mut self) {
        self.launch().await;
    }

    /// Stops the monitor (flushing the store) and starts it again on the
    /// same data folder and port.
    pub async fn restart(&mut self) {
        self.stop_server().await;
        self.launch().await;
    }

    /// Stops the monitor; the data folder stays until `self` is dropped.
    pub async fn stop_server(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop().await.expect("monitor stops cleanly");
        }
    }

    pub async fn channel(&self) -> Channel {
        Channel::from_shared(self.endpoint.clone()).expect("endpoint").connect().await.expect("connect")
    }

    /// The SDK client with the all-users harness token.
    pub async fn harness(&self) -> Client {
        self.sdk(HARNESS).await
    }

    pub async fn sdk(&self, token: &str) -> Client {
        Client::with_channel(self.channel().await, BearerToken::new(token).expect("token"))
            .with_timeout(Duration::from_secs(5))
    }

    /// A raw Authority client with any token.
    pub async fn authority(&self, token: &str) -> Authority {
        pb::authority_client::AuthorityClient::with_interceptor(
            self.channel().await,
            BearerToken::new(token).expect("token"),
        )
    }

    /// An Approvals client with any token.
    pub async fn approvals(&self, token: &str) -> Approvals {
        pb::approvals_client::ApprovalsClient::with_interceptor(
            self.channel().await,
            BearerToken::new(token).expect("token"),
        )
    }

    pub async fn admin(&self) -> Admin {
        self.admin_with(ADMIN).await
    }

    pub async fn admin_with(&self, token: &str) -> Admin {
        pb::admin_client::AdminClient::with_interceptor(self.channel().await, BearerToken::new(token).expect("token"))
    }

    /// The monitor's metrics (Prometheus text), from a metrics listener
    /// started for this read.
    pub async fn metrics(&self) -> String {
        warden_tests::monitor::metrics(self.server.as_ref().expect("the monitor runs")).await.expect("metrics")
    }

    pub fn store_dir(&self) -> PathBuf {
        self.data.path().join(warden_monitor::config::STORE_DIR)
    }

    /// Every audit record, oldest first.
    pub async fn audit(&self) -> Vec<pb::AuditRecord> {
        use tokio_stream::StreamExt;
        let mut admin = self.admin().await;
        let stream = admin
            .tail_audit(pb::TailAuditRequest { count: 0, all: true, follow: false, ..Default::default() })
            .await
            .expect("tail")
            .into_inner();
        stream.collect::<Result<Vec<_>, _>>().await.expect("records")
    }

    pub async fn verify(&self) -> pb::VerifyAuditResponse {
        self.admin().await.verify_audit(pb::VerifyAuditRequest {}).await.expect("verify").into_inner()
    }
}

/// A copy of the bundled policy folder, for a test that edits it.
pub fn copy_bundled() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for entry in std::fs::read_dir(bundled_policies()).expect("bundled policies") {
        let path = entry.expect("entry").path();
        if path.is_file() {
            std::fs::copy(&path, dir.path().join(path.file_name().expect("name"))).expect("copy");
        }
    }
    dir
}

/// A copy of the bundled policies without their `@approval("passkey")`
/// marks: a push to main or a package publication is then approved with a
/// release manager's token, as the tests of approval mechanics (groups,
/// windows, restarts, re-evaluation) need. The bundled pack as it ships,
/// where those need a passkey, is tested in `passkeys.rs`.
pub fn copy_bundled_token_approvals() -> tempfile::TempDir {
    let dir = copy_bundled();
    for entry in std::fs::read_dir(dir.path()).expect("copied policies") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "cedar") {
            let text = std::fs::read_to_string(&path).expect("read policy");
            let stripped: String =
                text.lines().filter(|l| l.trim() != "@approval(\"passkey\")").map(|l| format!("{l}\n")).collect();
            std::fs::write(&path, stripped).expect("write policy");
        }
    }
    dir
}

/// A policy folder written for one test.
pub struct PolicyDir {
    pub dir: tempfile::TempDir,
}

impl PolicyDir {
    pub fn new(schema: &str, policies: &[(&str, &str)], entities: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("schema.cedarschema"), schema).expect("write schema");
        for (name, text) in policies {
            std::fs::write(dir.path().join(name), text).expect("write policy");
        }
        std::fs::write(dir.path().join("entities.json"), entities).expect("write entities");
        Self { dir }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().to_owned()
    }
}

/// A request for alice's claude-code session `s1`.
pub fn request(action: &str, resource: pb::authorize_request::Resource) -> pb::AuthorizeRequest {
    pb::AuthorizeRequest {
        request_id: String::new(),
        actor: Some(pb::Actor { user: "alice".into(), agent: "claude-code".into(), session: "s1".into() }),
        action: action.into(),
        resource: Some(resource),
        justification: String::new(),
        context_json: String::new(),
    }
}

pub fn file(path: &str) -> pb::authorize_request::Resource {
    pb::authorize_request::Resource::File(pb::FileResource { path: path.into(), cwd: String::new(), pattern: false })
}

pub fn command(argv: &[&str]) -> pb::authorize_request::Resource {
    pb::authorize_request::Resource::Command(pb::CommandResource {
        argv: argv.iter().map(|a| (*a).to_owned()).collect(),
        cwd: String::new(),
    })
}

pub fn http(method: &str, url: &str) -> pb::authorize_request::Resource {
    pb::authorize_request::Resource::Http(pb::HttpResource { method: method.into(), url: url.into() })
}

/// Whether a test of the embedded store's own files must skip: the suite
/// runs against PostgreSQL (`WARDEN_E2E_STORE`), where they do not exist.
pub fn embedded_only(test: &str) -> bool {
    let on_postgres = std::env::var_os("WARDEN_E2E_STORE").is_some();
    if on_postgres {
        eprintln!("skipping {test}: it reads the embedded store's files, and the suite runs on PostgreSQL");
    }
    on_postgres
}
