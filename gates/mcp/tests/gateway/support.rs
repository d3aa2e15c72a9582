//! A real monitor on 127.0.0.1:0 with a policy folder of the test's own,
//! the reference MCP server from npm, and the Python `mcp` client driven by
//! `tests/mcp_client.py` (one JSON line per step).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use warden_monitor::auth::{CredentialConfig, Role};
use warden_monitor::server::RunningServer;
use warden_proto::v1 as pb;
use warden_sdk::BearerToken;

pub const HARNESS: &str = "wdn_test_mcp_harness";
pub const APPROVER: &str = "wdn_test_mcp_approver";
pub const ADMIN: &str = "wdn_test_mcp_admin";

/// The policies the gateway tests decide by: the reference server's tools
/// are allowed, except its environment (never), sums (a person approves)
/// and echoes that mention a secret (never).
pub const EVERYTHING_POLICIES: &str = r#"
@id("everything.tools")
@reason("agents may use the reference servers' tools, resources and prompts")
permit (principal, action in [Action::"tool.call", Action::"mcp.read", Action::"mcp.prompt"], resource)
when { resource in McpServer::"everything" || resource in McpServer::"remote" };

@id("everything.no-env")
@reason("the server's environment holds secrets: agents never see it")
forbid (principal, action == Action::"tool.call", resource)
when { resource.name == "get-env" };

@id("everything.sum-needs-approval")
@reason("adding numbers needs a person's approval")
@timeout("2m")
forbid (principal, action == Action::"tool.call", resource)
when { resource.name == "get-sum" }
unless { context.approved };

@id("everything.no-resource-prompt")
@reason("prompts that embed resources are not for agents")
forbid (principal, action == Action::"mcp.prompt", resource)
when { resource.name == "resource-prompt" };

@id("everything.no-dynamic-resources")
@reason("the dynamic resources are private")
forbid (principal, action == Action::"mcp.read", resource)
when { resource.name like "demo://resource/dynamic/*" };

@id("everything.no-secret-echo")
@reason("echoing anything that mentions a secret is forbidden")
forbid (principal, action == Action::"tool.call", resource)
when { resource.name == "echo" && resource.arguments like "*secret*" };
"#;

/// A monitor with the bundled schema and entities and `policies` as its
/// only policy file.
pub struct Monitor {
    server: Option<RunningServer>,
    pub endpoint: String,
    pub policies: tempfile::TempDir,
    _data: tempfile::TempDir,
}

impl Monitor {
    pub async fn start(policies: &str) -> Self {
        let credentials = vec![
            CredentialConfig::for_token("mcp-gateway", Role::Harness, HARNESS, &["*"]),
            CredentialConfig {
                groups: vec!["*".into()],
                ..CredentialConfig::for_token("oncall", Role::Approver, APPROVER, &[])
            },
            CredentialConfig::for_token("security", Role::Admin, ADMIN, &[]),
        ];
        let own = warden_tests::monitor::start_with_policies(policies, credentials).await.expect("monitor starts");
        Self { server: Some(own.server), endpoint: own.endpoint, policies: own.policies, _data: own.data }
    }

    pub async fn approvals(
        &self,
    ) -> pb::approvals_client::ApprovalsClient<
        tonic::service::interceptor::InterceptedService<tonic::transport::Channel, BearerToken>,
    > {
        let channel = tonic::transport::Channel::from_shared(self.endpoint.clone()).unwrap().connect().await.unwrap();
        pb::approvals_client::ApprovalsClient::with_interceptor(channel, BearerToken::new(APPROVER).unwrap())
    }

    /// Every audit record, oldest first.
    pub async fn audit(&self) -> Vec<pb::AuditRecord> {
        use tokio_stream::StreamExt as _;
        let channel = tonic::transport::Channel::from_shared(self.endpoint.clone()).unwrap().connect().await.unwrap();
        let mut admin = pb::admin_client::AdminClient::with_interceptor(channel, BearerToken::new(ADMIN).unwrap());
        let request = pb::TailAuditRequest { count: 0, all: true, follow: false, ..Default::default() };
        let stream = admin.tail_audit(request).await.expect("tail").into_inner();
        stream.collect::<Result<Vec<_>, _>>().await.expect("records")
    }

    /// Waits for the one pending approval of `tool` and answers it.
    pub async fn resolve_when_pending(&self, tool: &str, approve: bool, note: &str) -> pb::Approval {
        let mut approvals = self.approvals().await;
        for _ in 0..300 {
            let listed = approvals.list_pending(pb::ListPendingRequest::default()).await.unwrap().into_inner();
            let waiting = listed.approvals.into_iter().find(|a| {
                a.request
                    .as_ref()
                    .and_then(|r| r.resource.as_ref())
                    .is_some_and(|r| matches!(r, pb::authorize_request::Resource::Tool(t) if t.name == tool))
            });
            if let Some(waiting) = waiting {
                let resolve = pb::ResolveRequest {
                    approval_id: waiting.approval_id,
                    approve,
                    note: note.into(),
                    ..Default::default()
                };
                return approvals.resolve(resolve).await.expect("resolve").into_inner();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no approval for `{tool}` appeared");
    }

    pub async fn stop(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop().await.expect("monitor stops");
        }
    }
}

/// The gateway binary under test.
pub fn gateway() -> &'static str {
    env!("CARGO_BIN_EXE_warden-mcp")
}

/// `node` and the reference server's script, or a printed skip.
pub fn everything() -> Option<(String, String)> {
    let config = warden_tests::claude_code::found_or_skip(
        "node and @modelcontextprotocol/server-everything (npm, under target/npm)",
        warden_tests::claude_code::server_everything(),
    )
    .expect("npm packages required");
    let config = config?;
    let node = config["command"].as_str()?.to_owned();
    let script = config["args"][0].as_str()?.to_owned();
    Some((node, script))
}

/// A Python with the `mcp` package: `WARDEN_PYTHON`, else the virtualenv
/// `.ci/run` makes in `target/py`; or a printed skip.
pub fn python() -> Option<PathBuf> {
    let candidate = std::env::var_os("WARDEN_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| warden_tests::claude_code::target_dir().join("py/bin/python"));
    let works = std::process::Command::new(&candidate)
        .args(["-c", "import mcp"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    warden_tests::claude_code::found_or_skip(
        "python with the `mcp` package (pip, in target/py)",
        works.then_some(candidate),
    )
    .expect("python mcp required")
}

/// Both the reference server and the Python client, or a printed skip.
pub fn parts() -> Option<((String, String), PathBuf)> {
    Some((everything()?, python()?))
}

/// A shell command that starts the reference server over stdio and copies
/// every line it receives into `log` first: what reaches the server.
pub fn logged_everything(node: &str, script: &str, log: &Path) -> Vec<String> {
    vec!["sh".into(), "-c".into(), format!("tee -a '{}' | '{node}' '{script}' stdio", log.display())]
}

/// `warden-mcp --name everything -- <the logged reference server>`'s arguments.
pub fn gateway_args(node: &str, script: &str, log: &Path) -> Vec<String> {
    let mut args = vec!["--name".to_owned(), "everything".to_owned(), "--".to_owned()];
    args.extend(logged_everything(node, script, log));
    args
}

/// The environment the gateway needs to reach the monitor as `user`.
pub fn gateway_env(monitor_endpoint: &str, user: &str) -> Value {
    json!({
        "WARDEN_ENDPOINT": monitor_endpoint,
        "WARDEN_TOKEN": HARNESS,
        "WARDEN_USER": user,
        "PATH": std::env::var("PATH").unwrap_or_default(),
    })
}

/// A running `mcp_client.py`: its output lines, and its stdin for
/// `wait_stdin_line` steps.
pub struct ClientRun {
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl ClientRun {
    pub fn start(python: &Path, plan: &Value) -> Self {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py");
        let mut child = tokio::process::Command::new(python)
            .arg(script)
            .arg(plan.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("python starts");
        let stdout = child.stdout.take().expect("stdout");
        Self { child, lines: BufReader::new(stdout).lines() }
    }

    /// The next step's output line.
    pub async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(60), self.lines.next_line())
            .await
            .expect("the client answers within 60 s")
            .expect("read")
            .expect("a line before the end");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Lets a `wait_stdin_line` step go on.
    pub async fn go_on(&mut self) {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        stdin.write_all(b"go\n").await.expect("write");
        stdin.flush().await.expect("flush");
    }

    /// Every remaining line, until the client exits.
    pub async fn rest(mut self) -> Vec<Value> {
        let mut out = Vec::new();
        while let Ok(Some(line)) =
            tokio::time::timeout(Duration::from_secs(90), self.lines.next_line()).await.expect("in time")
        {
            out.push(serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")));
        }
        let _ = self.child.wait().await;
        out
    }
}

/// Runs a whole plan and returns its lines.
pub async fn run_plan(python: &Path, plan: &Value) -> Vec<Value> {
    ClientRun::start(python, plan).rest().await
}

/// The one line of `op` at `index` among that op's lines.
pub fn step<'a>(lines: &'a [Value], op: &str, index: usize) -> &'a Value {
    lines.iter().filter(|l| l["op"] == op).nth(index).unwrap_or_else(|| panic!("no {op} #{index} in {lines:#?}"))
}

/// A free port on loopback (for servers that take a port, not a listener).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits until something accepts connections on `port`.
pub async fn wait_for_port(port: u16) {
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("nothing listens on port {port}");
}

/// A `warden-mcp --config … --listen …` process, stopped on drop.
pub struct HttpGateway {
    child: tokio::process::Child,
    pub url: String,
}

impl HttpGateway {
    pub async fn start(config: &std::path::Path, endpoint: &str) -> Self {
        let port = free_port();
        let child = tokio::process::Command::new(gateway())
            .args(["--config", config.to_str().unwrap(), "--listen", &format!("127.0.0.1:{port}")])
            .env("WARDEN_ENDPOINT", endpoint)
            .env("WARDEN_TOKEN", HARNESS)
            .env("WARDEN_USER", "nobody")
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        wait_for_port(port).await;
        Self { child, url: format!("http://127.0.0.1:{port}/mcp") }
    }
}

impl Drop for HttpGateway {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// Hex SHA-256 of `text` (a client token as `[[clients]]` names it).
pub fn sha256_hex(text: &str) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

/// The gateway over stdio driven by hand, one JSON-RPC line at a time: what
/// goes over the wire, as a client of any protocol version sends it.
pub struct RawStdio {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    next_id: u64,
    /// The notifications seen so far, in order.
    pub notifications: Vec<Value>,
}

impl RawStdio {
    /// `warden-mcp ARGS` with exactly `env` (nothing inherited).
    pub fn start(args: &[String], env: &[(&str, &str)]) -> Self {
        let mut child = tokio::process::Command::new(gateway())
            .args(args)
            .env_clear()
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("the gateway starts");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        Self { child, stdin, lines: BufReader::new(stdout).lines(), next_id: 0, notifications: Vec::new() }
    }

    /// The `_meta` a 2026-07-28 request carries (no session: every request
    /// says who is asking and in which version).
    pub fn meta_2026() -> Value {
        json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {},
        })
    }

    pub async fn send(&mut self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await.expect("write");
        self.stdin.flush().await.expect("flush");
    }

    /// Sends a request and returns its answer (`result` or `error`), keeping
    /// the notifications that come before it.
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        loop {
            let line = tokio::time::timeout(Duration::from_secs(60), self.lines.next_line())
                .await
                .expect("an answer within 60 s")
                .expect("read")
                .unwrap_or_else(|| panic!("the gateway closed stdout before answering {method}"));
            let message: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            if message["id"] == id {
                return message;
            }
            if message.get("method").is_some() && message.get("id").is_none() {
                self.notifications.push(message);
            }
        }
    }

    /// Closes stdin and waits for the gateway to exit.
    pub async fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin);
        tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await.expect("exits").expect("status")
    }
}
