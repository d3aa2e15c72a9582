//! The `wardend` binary as a person runs it: first start creates tokens,
//! SIGTERM stops it cleanly, a restart reuses the tokens and the store, and
//! broken policies stop it from starting.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use warden_sdk::{ActionRequest, Actor, BearerToken, Client, Outcome};

fn policies() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies")
}

struct Wardend {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Wardend {
    fn start(data: &Path, policies: &Path) -> Self {
        Self::start_with(data, policies, &[])
    }

    fn start_with(data: &Path, policies: &Path, extra: &[&str]) -> Self {
        Self::start_with_env(data, policies, extra, &[])
    }

    fn start_with_env(data: &Path, policies: &Path, extra: &[&str], env: &[(&str, &Path)]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_wardend"))
            .env_remove("MIMALLOC_PURGE_DELAY")
            .envs(env.iter().copied())
            .args(extra)
            .args(["--listen", "127.0.0.1:0", "--data"])
            .arg(data)
            .arg("--policies")
            .arg(policies)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines, seen: Vec::new() }
    }

    /// Reads stdout until the listening line; returns the endpoint.
    fn endpoint(&mut self) -> String {
        loop {
            let line = self.lines.recv_timeout(Duration::from_secs(60)).expect("wardend printed its address");
            self.seen.push(line.clone());
            if let Some(rest) = line.strip_prefix("wardend listening on ") {
                let addr = rest.split_whitespace().next().unwrap();
                return format!("http://{addr}");
            }
        }
    }

    fn terminate(mut self) -> std::process::ExitStatus {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap();
        assert!(status.success());
        self.child.wait().unwrap()
    }
}

async fn decide(endpoint: &str, token: &str) -> warden_sdk::Decision {
    let channel = tonic::transport::Channel::from_shared(endpoint.to_owned()).unwrap().connect().await.unwrap();
    let client = Client::with_channel(channel, BearerToken::new(token).unwrap());
    client
        .authorize(
            &Actor::new("alice", "claude-code", "s1"),
            ActionRequest::read_file("/home/alice/project/src/main.rs"),
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_start_creates_tokens_and_sigterm_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut wardend = Wardend::start(&data, &policies());
    let endpoint = wardend.endpoint();
    assert!(wardend.seen.iter().any(|l| l.starts_with("First start")), "{:?}", wardend.seen);
    for role in ["harness", "approver", "admin"] {
        let path = data.join(format!("{role}.token"));
        assert!(wardend.seen.iter().any(|l| l.contains(&path.display().to_string())), "{role} token path not printed");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }
    let credentials = std::fs::read_to_string(data.join("credentials.toml")).unwrap();
    let token = std::fs::read_to_string(data.join("harness.token")).unwrap();
    assert!(!credentials.contains(token.trim()), "only hashes are stored");
    assert!(credentials.contains(r#"users = ["*"]"#), "{credentials}");

    // It runs itself again, in the same process, to give freed memory back
    // at once (see main.rs).
    let environ = std::fs::read(format!("/proc/{}/environ", wardend.child.id())).unwrap();
    assert!(environ.split(|&b| b == 0).any(|v| v == b"MIMALLOC_PURGE_DELAY=0"));
    let first = decide(&endpoint, token.trim()).await;
    assert_eq!((first.outcome, first.audit_seq), (Outcome::Allow, 1));
    assert!(wardend.terminate().success(), "SIGTERM is a clean stop");

    // The same tokens and the same store after a restart.
    let mut wardend = Wardend::start(&data, &policies());
    let endpoint = wardend.endpoint();
    assert!(!wardend.seen.iter().any(|l| l.starts_with("First start")));
    let second = decide(&endpoint, token.trim()).await;
    assert_eq!(second.audit_seq, 2);
    assert!(wardend.terminate().success());
}

#[test]
fn broken_policies_stop_the_start_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("policies");
    std::fs::create_dir(&broken).unwrap();
    for entry in std::fs::read_dir(policies()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, broken.join(path.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(
        broken.join("zz.cedar"),
        "@id(\"typo\")\npermit(principal, action, resource) when { resource.pth == \"x\" };\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_wardend"))
        .args(["--listen", "127.0.0.1:0", "--data"])
        .arg(dir.path().join("data"))
        .arg("--policies")
        .arg(&broken)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("zz.cedar:2:"), "{stderr}");
}

#[test]
fn json_logs_are_one_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_wardend"))
        .args(["--listen", "127.0.0.1:0", "--log-format", "json", "--data"])
        .arg(dir.path().join("data"))
        .arg("--policies")
        .arg(policies())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    // Every line is one JSON object; a warning (a nearly full disk on the
    // machine that runs this) may come before the line looked for.
    let mut loaded = None;
    for text in BufReader::new(stderr).lines().take(20) {
        let text = text.unwrap();
        let line: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert!(line["level"].is_string() && line["message"].is_string(), "{text}");
        if line["message"] == "policies loaded" {
            loaded = Some(line);
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let line = loaded.expect("no \"policies loaded\" line among the first 20");
    assert_eq!(line["level"], "INFO");
    assert!(line["policy_version"].as_str().unwrap().starts_with("sha256:"));
}

#[test]
fn version_names_the_release_and_the_commit() {
    let output = Command::new(env!("CARGO_BIN_EXE_wardend")).arg("--version").output().unwrap();
    assert!(output.status.success());
    assert_eq!(String::from_utf8_lossy(&output.stdout), format!("wardend {}\n", warden_version::VERSION));
}

#[test]
fn help_documents_every_flag() {
    let output = Command::new(env!("CARGO_BIN_EXE_wardend")).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in ["--listen", "--policies", "--data", "--config", "--log-format", "--metrics"] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}

#[test]
fn plaintext_beyond_loopback_is_refused_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_wardend"))
        .args(["--listen", "0.0.0.0:0", "--data"])
        .arg(dir.path().join("data"))
        .arg("--policies")
        .arg(policies())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not a loopback address") && stderr.contains("--insecure-plaintext"), "{stderr}");
}

/// `curl -s -w '\n%{http_code}' URL`: the body and the status.
fn curl(url: &str) -> (String, u16) {
    let output = Command::new("curl").args(["-s", "--max-time", "20", "-w", "\n%{http_code}", url]).output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (body.to_owned(), status.trim().parse().unwrap_or(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_scraped_on_their_own_listener() {
    if Command::new("curl").arg("--version").stdout(Stdio::null()).status().is_err() {
        assert!(std::env::var_os("WARDEN_REQUIRE_NPM").is_none(), "WARDEN_REQUIRE_NPM is set but curl is missing");
        println!("skipped: curl is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut wardend = Wardend::start_with(dir.path(), &policies(), &["--metrics", "127.0.0.1:0"]);
    let endpoint = wardend.endpoint();
    let metrics = loop {
        let line = wardend.lines.recv_timeout(Duration::from_secs(60)).expect("wardend printed its metrics address");
        if let Some(rest) = line.strip_prefix("wardend metrics on ") {
            break rest.trim().to_owned();
        }
    };
    let token = std::fs::read_to_string(dir.path().join("harness.token")).unwrap();
    let channel = tonic::transport::Channel::from_shared(endpoint.clone()).unwrap().connect().await.unwrap();
    let client = Client::with_channel(channel, BearerToken::new(&token).unwrap());
    let alice = Actor::new("alice", "claude-code", "metrics-1");
    let allowed = client.authorize(&alice, ActionRequest::read_file("/home/alice/project/README.md")).await.unwrap();
    let denied = client.authorize(&alice, ActionRequest::read_file("/etc/shadow")).await.unwrap();
    let pending = client.authorize(&alice, ActionRequest::exec(["git", "push", "origin", "main"])).await.unwrap();
    assert_eq!((allowed.outcome, denied.outcome, pending.outcome), (Outcome::Allow, Outcome::Deny, Outcome::Pending));
    let stranger = Client::with_channel(
        tonic::transport::Channel::from_shared(endpoint.clone()).unwrap().connect().await.unwrap(),
        BearerToken::new("wdn_not_a_token").unwrap(),
    );
    assert!(stranger.authorize(&alice, ActionRequest::read_file("/x")).await.is_err());

    let (text, status) = tokio::task::spawn_blocking({
        let metrics = metrics.clone();
        move || curl(&metrics)
    })
    .await
    .unwrap();
    assert_eq!(status, 200, "{text}");
    for line in [
        "warden_decisions_total{outcome=\"ALLOW\",action=\"fs.read\"} 1",
        "warden_decisions_total{outcome=\"DENY\",action=\"fs.read\"} 1",
        "warden_decisions_total{outcome=\"PENDING\",action=\"exec\"} 1",
        "warden_decision_seconds_count 3",
        "warden_approvals_pending 1",
        // Three answered, one refused for its token (UNAUTHENTICATED, 16).
        "warden_grpc_requests_total{method=\"/warden.v1.Authority/Authorize\",code=\"0\"} 3",
        "warden_grpc_requests_total{method=\"/warden.v1.Authority/Authorize\",code=\"16\"} 1",
        // Three decisions and the approval each had a record appended.
        "warden_audit_append_seconds_count 3",
        "warden_audit_durable_lag_records 0",
        "warden_audit_log_segments 1",
    ] {
        assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
    }
    let bytes: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("warden_data_bytes "))
        .and_then(|v| v.parse().ok())
        .expect("warden_data_bytes");
    assert!(bytes > 0);
    let log_bytes: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("warden_audit_log_bytes "))
        .and_then(|v| v.parse().ok())
        .expect("warden_audit_log_bytes");
    assert!(log_bytes > 48, "the live segment's size: {log_bytes}");
    // Only /metrics, and never on the gRPC port.
    let other = metrics.replace("/metrics", "/other");
    let grpc = format!("{endpoint}/metrics");
    let ((_, other_status), (grpc_text, _)) =
        tokio::task::spawn_blocking(move || (curl(&other), curl(&grpc))).await.unwrap();
    assert_eq!(other_status, 404);
    assert!(!grpc_text.contains("warden_decisions_total"));
    assert!(wardend.terminate().success());
}

/// One datagram from the notify socket, as text.
fn notification(socket: &std::os::unix::net::UnixDatagram) -> String {
    let mut buffer = [0u8; 4096];
    let n = socket.recv(&mut buffer).expect("a notification within 60 s");
    String::from_utf8_lossy(&buffer[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn systemd_hears_ready_when_it_serves_and_stopping_when_it_stops() {
    let dir = tempfile::tempdir().unwrap();
    let notify_path = dir.path().join("notify");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let data = dir.path().join("data");
    let mut wardend = Wardend::start_with_env(&data, &policies(), &[], &[("NOTIFY_SOCKET", &notify_path)]);

    // The first datagram is READY=1, and it is true when it comes: the
    // address it names takes connections and decides (the policies are
    // loaded, the store is open), before anything else is waited for.
    let ready = tokio::task::spawn_blocking({
        let notify = notify.try_clone().unwrap();
        move || notification(&notify)
    })
    .await
    .unwrap();
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    let addr = ready.lines().find_map(|l| l.strip_prefix("STATUS=serving on ")).expect("a STATUS line").to_owned();
    std::net::TcpStream::connect(&addr).unwrap();
    let token = std::fs::read_to_string(data.join("harness.token")).unwrap();
    assert_eq!(decide(&format!("http://{addr}"), token.trim()).await.outcome, Outcome::Allow);
    assert_eq!(wardend.endpoint(), format!("http://{addr}"), "the address it printed");
    // Sent once: by the process that serves, not by the one before the
    // re-run for MIMALLOC_PURGE_DELAY (the same pid).
    let environ = std::fs::read(format!("/proc/{}/environ", wardend.child.id())).unwrap();
    assert!(environ.split(|&b| b == 0).any(|v| v == b"MIMALLOC_PURGE_DELAY=0"));

    let status = Command::new("kill").args(["-TERM", &wardend.child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let stopping = notification(&notify);
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "after READY, the next is STOPPING: {stopping:?}");
    assert!(!stopping.contains("READY=1"), "{stopping:?}");
    assert!(wardend.child.wait().unwrap().success(), "SIGTERM is a clean stop");
    notify.set_nonblocking(true).unwrap();
    let mut rest = [0u8; 4096];
    let after = notify.recv(&mut rest);
    assert!(
        after.is_err(),
        "nothing after STOPPING: {:?}",
        after.map(|n| String::from_utf8_lossy(&rest[..n]).into_owned())
    );
}

#[test]
fn the_socket_opens_to_other_uids_only_when_socket_uids_names_them() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let own = std::fs::metadata(dir.path()).unwrap().uid();
    for (uids, mode) in [(vec![], None), (vec![own, own + 4242], Some(0o666))] {
        let case = tempfile::tempdir_in(dir.path()).unwrap();
        let config = case.path().join("wardend.toml");
        let socket = case.path().join("wardend.sock");
        std::fs::write(&config, format!("socket_uids = {uids:?}\n")).unwrap();
        let config_arg = config.display().to_string();
        let socket_arg = socket.display().to_string();
        let mut wardend = Wardend::start_with(
            &case.path().join("data"),
            &policies(),
            &["--config", &config_arg, "--socket", &socket_arg],
        );
        wardend.endpoint();
        let found = std::fs::metadata(&socket).unwrap().mode() & 0o777;
        match mode {
            Some(mode) => assert_eq!(found, mode, "{uids:?}"),
            // Left to the umask: not writable, so not connectable, by others.
            None => assert_eq!(found & 0o002, 0, "{uids:?}: {found:o}"),
        }
        assert!(wardend.terminate().success());
    }
}

/// `wardend | head -1`: a closed standard output is no reason to stop
/// serving (nor to panic).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_standard_output_does_not_stop_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let address = format!("127.0.0.1:{port}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_wardend"))
        .args(["--listen", &address, "--data"])
        .arg(&data)
        .arg("--policies")
        .arg(policies())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The read end is closed before the first line is written.
    drop(child.stdout.take());
    let token = data.join("harness.token");
    let endpoint = format!("http://{address}");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let decision = loop {
        assert!(child.try_wait().unwrap().is_none(), "wardend exited with its standard output closed");
        if let Ok(token) = std::fs::read_to_string(&token)
            && tokio::net::TcpStream::connect(&address).await.is_ok()
        {
            break decide(&endpoint, token.trim()).await;
        }
        assert!(std::time::Instant::now() < deadline, "wardend did not serve");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(decision.outcome, Outcome::Allow);
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
