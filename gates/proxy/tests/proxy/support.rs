//! A real monitor on loopback with the test's policies, and warden-proxy
//! run as its binary in front of it.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use warden_monitor::auth::{CredentialConfig, Role};
use warden_monitor::server::RunningServer;
use warden_proto::v1 as pb;
use warden_sdk::BearerToken;
use warden_tests::wait::eventually;

pub const HARNESS: &str = "wdn_test_proxy_harness";
pub const APPROVER: &str = "wdn_test_proxy_approver";
pub const ADMIN: &str = "wdn_test_proxy_admin";
/// The secret's value: it must reach the bound host and nowhere else.
pub const SECRET: &str = "s3cr3t-d0-not-leak-4f1c";
/// The value of `deploy-key`, a secret used only once a person approves.
pub const DEPLOY_SECRET: &str = "d3pl0y-k3y-9a7e";

/// The proxy tests' policies: the upstream on loopback is reachable (and
/// nothing else: a destination at another kind of address is not);
/// `127.0.0.1/private…` is not; a POST needs a person's approval (but a
/// git fetch's `git-upload-pack` does not); a GET carries at most 16 KiB in
/// its headers; the secret `api-key` may go to `localhost` only;
/// `deploy-key` needs a person's approval.
pub const POLICIES: &str = r#"
@id("http.loopback") @reason("the test upstream on loopback may be reached")
permit (principal, action == Action::"http.request", resource)
when { context has address_kinds && context.address_kinds == ["loopback"] };

@id("http.private") @reason("the private pages are not for agents")
forbid (principal, action == Action::"http.request", resource)
when { resource.host == "127.0.0.1" && resource.path like "/private*" };

@id("http.post-needs-approval") @reason("sending data out needs a person's approval") @timeout("2m")
forbid (principal, action == Action::"http.request", resource)
when { resource.method == "POST" && !(resource.path like "*/git-upload-pack") } unless { context.approved };

@id("http.get-header-bytes") @reason("a GET carries at most 16 KiB out in its headers")
forbid (principal, action == Action::"http.request", resource)
when { resource.method == "GET" && context has header_bytes && context.header_bytes > 16384 };

@id("secrets.api-key") @reason("api-key may be used")
permit (principal, action == Action::"secret.use", resource == Secret::"api-key");

@id("secrets.api-key-host") @reason("api-key goes to localhost only")
forbid (principal, action == Action::"secret.use", resource == Secret::"api-key")
unless { context has destination && context.destination == "localhost" };

@id("secrets.deploy-key") @reason("deploy-key may be used")
permit (principal, action == Action::"secret.use", resource == Secret::"deploy-key");

@id("secrets.deploy-key-needs-approval") @reason("deploy-key is used only when a person approves") @timeout("2m")
forbid (principal, action == Action::"secret.use", resource == Secret::"deploy-key") unless { context.approved };
"#;

pub struct Monitor {
    server: Option<RunningServer>,
    pub endpoint: String,
    _policies: tempfile::TempDir,
    pub data: tempfile::TempDir,
}

/// The proxy (a harness), an approver and an admin.
fn credentials() -> Vec<CredentialConfig> {
    vec![
        CredentialConfig::for_token("egress-proxy", Role::Harness, HARNESS, &["*"]),
        CredentialConfig {
            groups: vec!["*".into()],
            ..CredentialConfig::for_token("oncall", Role::Approver, APPROVER, &[])
        },
        CredentialConfig::for_token("security", Role::Admin, ADMIN, &[]),
    ]
}

/// The bundled policy folder.
pub fn bundled() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies")
}

impl Monitor {
    pub async fn start() -> Self {
        let own = warden_tests::monitor::start_with_policies(POLICIES, credentials()).await.unwrap();
        Self { server: Some(own.server), endpoint: own.endpoint, _policies: own.policies, data: own.data }
    }

    /// A monitor deciding by the policy folder `fill` writes (into an empty
    /// folder).
    pub async fn start_in(fill: impl FnOnce(&Path)) -> Self {
        use warden_monitor::server::{ServerConfig, start};
        let policies = tempfile::tempdir().unwrap();
        fill(policies.path());
        let data = tempfile::tempdir().unwrap();
        let config = ServerConfig {
            policies: policies.path().to_owned(),
            data: data.path().to_owned(),
            credentials: credentials(),
            durability: Default::default(),
            checkpoint_every: std::time::Duration::from_secs(300),
            tls: None,
            socket: None,
            audit: Default::default(),
            store: None,
            monitor: warden_monitor::service::MonitorConfig {
                policy_dir: policies.path().to_owned(),
                ..Default::default()
            },
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = start(config, listener).await.unwrap();
        let endpoint = format!("http://{}", server.addr());
        Self { server: Some(server), endpoint, _policies: policies, data }
    }

    pub async fn stop(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop().await.unwrap();
        }
    }

    async fn channel(&self) -> tonic::transport::Channel {
        tonic::transport::Channel::from_shared(self.endpoint.clone()).unwrap().connect().await.unwrap()
    }

    async fn approvals(
        &self,
    ) -> pb::approvals_client::ApprovalsClient<
        tonic::service::interceptor::InterceptedService<tonic::transport::Channel, BearerToken>,
    > {
        pb::approvals_client::ApprovalsClient::with_interceptor(
            self.channel().await,
            BearerToken::new(APPROVER).unwrap(),
        )
    }

    /// Answers approval `approval_id` as the approver, with `note`.
    pub async fn resolve(&self, approval_id: &str, approve: bool, note: &str) -> pb::Approval {
        let resolve =
            pb::ResolveRequest { approval_id: approval_id.into(), approve, note: note.into(), ..Default::default() };
        self.approvals().await.resolve(resolve).await.unwrap().into_inner()
    }

    /// The approvals waiting for a person now.
    pub async fn pending(&self) -> Vec<pb::Approval> {
        self.approvals().await.list_pending(pb::ListPendingRequest::default()).await.unwrap().into_inner().approvals
    }

    /// Waits for a pending approval of an HTTP request to `path` and
    /// answers it.
    pub async fn resolve_when_pending(&self, path: &str, approve: bool) -> pb::Approval {
        let mut approvals = self.approvals().await;
        let waiting = eventually(&format!("an approval for {path}"), || {
            let mut approvals = approvals.clone();
            async move {
                let listed = approvals.list_pending(pb::ListPendingRequest::default()).await.ok()?.into_inner();
                listed.approvals.into_iter().find(|a| {
                    matches!(a.request.as_ref().and_then(|r| r.resource.as_ref()),
                        Some(pb::authorize_request::Resource::Http(h)) if h.url.ends_with(path))
                })
            }
        })
        .await;
        let resolve =
            pb::ResolveRequest { approval_id: waiting.approval_id, approve, note: "ok".into(), ..Default::default() };
        approvals.resolve(resolve).await.unwrap().into_inner()
    }

    /// Every audit record, oldest first.
    pub async fn audit(&self) -> Vec<pb::AuditRecord> {
        use tokio_stream::StreamExt as _;
        let mut admin =
            pb::admin_client::AdminClient::with_interceptor(self.channel().await, BearerToken::new(ADMIN).unwrap());
        let request = pb::TailAuditRequest { count: 0, all: true, follow: false, ..Default::default() };
        let stream = admin.tail_audit(request).await.unwrap().into_inner();
        stream.collect::<Result<Vec<_>, _>>().await.unwrap()
    }
}

/// warden-proxy, running.
pub struct Proxy {
    child: Child,
    pub addr: String,
    _data: tempfile::TempDir,
    /// The CA the clients trust.
    pub ca: PathBuf,
    stderr: PathBuf,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proxy {
    /// One sandbox: alice's agent `sandbox`, session `sandbox-1`.
    pub fn start(monitor: &Monitor, upstream_ca: &str) -> Self {
        Self::start_with(monitor, upstream_ca, "127.0.0.1:0", |_| {
            ["--user", "alice", "--agent", "sandbox", "--session", "sandbox-1"].map(String::from).to_vec()
        })
    }

    /// One sandbox as [`Proxy::start`], with `flags` besides.
    pub fn start_flags(monitor: &Monitor, upstream_ca: &str, flags: &[&str]) -> Self {
        Self::start_with(monitor, upstream_ca, "127.0.0.1:0", |_| {
            let mut args: Vec<String> =
                ["--user", "alice", "--agent", "sandbox", "--session", "sandbox-1"].map(String::from).to_vec();
            args.extend(flags.iter().map(|flag| flag.to_string()));
            args
        })
    }

    /// With the actor flags `who` gives (from the proxy's data folder).
    pub fn start_with(
        monitor: &Monitor,
        upstream_ca: &str,
        listen: &str,
        who: impl FnOnce(&Path) -> Vec<String>,
    ) -> Self {
        let data = tempfile::tempdir().unwrap();
        let upstream = data.path().join("upstream-ca.pem");
        std::fs::write(&upstream, upstream_ca).unwrap();
        let secrets = data.path().join("secrets.toml");
        std::fs::write(
            &secrets,
            format!("api-key = \"{SECRET}\"\ndeploy-key = \"{DEPLOY_SECRET}\"\nother = \"unused\"\n"),
        )
        .unwrap();
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let stderr = data.path().join("proxy.log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_warden-proxy"))
            .args(["--listen", listen])
            .args(who(data.path()))
            .arg("--data")
            .arg(data.path().join("proxy"))
            .arg("--upstream-ca")
            .arg(&upstream)
            .arg("--secrets")
            .arg(&secrets)
            .env("WARDEN_ENDPOINT", &monitor.endpoint)
            .env("WARDEN_TOKEN", HARNESS)
            .env("WARDEN_LOG", "debug")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr = line
            .strip_prefix("warden-proxy listening on ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("warden-proxy did not start: {line}"))
            .to_owned();
        let ca = data.path().join("proxy").join("ca.pem");
        Self { child, addr, _data: data, ca, stderr }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the proxy logged (at debug level).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The peak resident memory of the proxy process, in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }
}

/// Whether `program` runs here; if not, the test skips (and fails when
/// WARDEN_REQUIRE_NPM, set by CI, says the machine must have it).
pub fn found_or_skip(program: &str) -> bool {
    let found = Command::new(program).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    if !found {
        assert!(std::env::var_os("WARDEN_REQUIRE_NPM").is_none(), "WARDEN_REQUIRE_NPM is set but {program} is missing");
        println!("skipped: {program} is not installed");
    }
    found
}

/// Every file under `dir`, read whole, concatenated: to look for a value.
pub fn all_bytes(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(all_bytes(&path));
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.extend(bytes);
        }
    }
    out
}

pub fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// What curl got: the status, the body, and the response's head (with
/// curl's own errors after it).
pub struct Got {
    pub status: u16,
    pub body: String,
    pub headers: String,
}

impl Got {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// A response header's value (the last one of that name).
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.lines().rev().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }
}

/// curl through `proxy`, trusting its CA.
pub async fn curl(proxy: &Proxy, url: &str, extra: &[&str]) -> Got {
    let dir = tempfile::tempdir().unwrap();
    let headers = dir.path().join("headers");
    let output = tokio::process::Command::new("curl")
        .args(["-sS", "--max-time", "60", "--proxy", &proxy.url(), "--cacert"])
        .arg(&proxy.ca)
        .arg("-D")
        .arg(&headers)
        .args(["-w", "\n%{http_code}"])
        .args(extra)
        .arg(url)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, status) = stdout.rsplit_once('\n').unwrap_or(("", stdout.as_str()));
    Got {
        status: status.trim().parse().unwrap_or(0),
        body: body.to_owned(),
        headers: std::fs::read_to_string(&headers).unwrap_or_default() + &String::from_utf8_lossy(&output.stderr),
    }
}

/// Sends `request` as it is to the proxy on a fresh connection and reads
/// the answer to its end (send `Connection: close`): for what curl cannot
/// express.
pub async fn raw(proxy: &Proxy, request: &str) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(&proxy.addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(60), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// The normalized request (JSON) of each audit record of `action`, oldest
/// first.
pub async fn asked(monitor: &Monitor, action: &str) -> Vec<serde_json::Value> {
    monitor
        .audit()
        .await
        .into_iter()
        .filter(|r| r.action == action)
        .map(|r| serde_json::from_str(&r.request).unwrap_or_else(|e| panic!("{e}: {}", r.request)))
        .collect()
}
