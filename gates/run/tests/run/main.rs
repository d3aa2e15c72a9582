//! warden-run end to end: a real monitor on loopback, the real bubblewrap,
//! and programs nobody here wrote (sh, cat, env, curl, sleep) in the box. A
//! test skips with a printed reason when bubblewrap (or curl) is missing,
//! unless `WARDEN_REQUIRE_SANDBOX=1` (as in `.ci/run`).

// A test binary: a failed unwrap is a failed test, which is the point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warden_monitor::auth::{CredentialConfig, Role};
use warden_proto::v1 as pb;

mod agents;
mod claude;
mod confinement;
mod network;
mod terminal;

const HARNESS: &str = "wdn_run_test_harness";

const ADMIN: &str = "wdn_run_test_admin";

/// Every http.request is allowed, but a POST to /upload.
const POLICIES: &str = r#"
@id("web.any") @reason("the web may be read")
permit (principal, action == Action::"http.request", resource);

@id("web.no-upload") @reason("nothing is uploaded")
forbid (principal, action == Action::"http.request", resource) when { resource.path == "/upload" };
"#;

/// Whether the box can be made here; if not, the test skips (and fails
/// when WARDEN_REQUIRE_SANDBOX, set by CI, says it must be).
fn sandbox_or_skip() -> bool {
    let probe = Command::new("bwrap")
        .args(["--unshare-user", "--unshare-net", "--ro-bind", "/", "/", "--", "true"])
        .stderr(Stdio::piped())
        .output();
    let why = match probe {
        Ok(out) if out.status.success() => return true,
        Ok(out) => format!("bubblewrap cannot make namespaces here: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => format!("bubblewrap is not installed ({e})"),
    };
    assert!(std::env::var_os("WARDEN_REQUIRE_SANDBOX").is_none(), "WARDEN_REQUIRE_SANDBOX is set but {why}");
    println!("skipped: {why}");
    false
}

fn found_or_skip(program: &str) -> bool {
    let found = Command::new(program).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    if !found {
        assert!(
            std::env::var_os("WARDEN_REQUIRE_SANDBOX").is_none(),
            "WARDEN_REQUIRE_SANDBOX is set but {program} is missing"
        );
        println!("skipped: {program} is not installed");
    }
    found
}

/// `warden-hook`, built next to warden-run (as `cargo test --workspace`
/// builds it); if it is not, the test skips (and fails when
/// WARDEN_REQUIRE_SANDBOX says it must run).
fn hook_or_skip() -> Option<PathBuf> {
    let hook = Path::new(env!("CARGO_BIN_EXE_warden-run")).with_file_name("warden-hook");
    if hook.exists() {
        return Some(hook);
    }
    assert!(std::env::var_os("WARDEN_REQUIRE_SANDBOX").is_none(), "{} is not built", hook.display());
    println!("skipped: {} is not built (cargo build -p warden-hook)", hook.display());
    None
}

/// A user's machine: a home with credentials, a workspace with a `.env`, a
/// monitor data folder with a token file; outside `/tmp` (which the box
/// replaces), so that what hides them is the box's masks.
struct Machine {
    root: tempfile::TempDir,
}

impl Machine {
    fn new() -> Self {
        let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let machine = Self { root };
        std::fs::create_dir_all(machine.home().join(".ssh")).unwrap();
        std::fs::write(machine.home().join(".ssh/id_rsa"), "PRIVATE KEY").unwrap();
        std::fs::create_dir_all(machine.workspace().join("app")).unwrap();
        std::fs::write(machine.workspace().join(".env"), "API_KEY=real").unwrap();
        std::fs::write(machine.workspace().join("app/.env.local"), "DB_PASSWORD=real").unwrap();
        std::fs::write(machine.workspace().join("notes.txt"), "my notes").unwrap();
        // A monitor's data folder in the workspace, as README's five minutes make it.
        std::fs::create_dir_all(machine.workspace().join(".warden")).unwrap();
        std::fs::write(machine.workspace().join(".warden/admin.token"), "wdn_admin_secret").unwrap();
        std::fs::create_dir_all(machine.data()).unwrap();
        std::fs::write(machine.token_file(), HARNESS).unwrap();
        std::fs::set_permissions(machine.token_file(), std::fs::Permissions::from_mode(0o600)).unwrap();
        machine
    }

    fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    fn workspace(&self) -> PathBuf {
        self.root.path().join("work")
    }

    fn data(&self) -> PathBuf {
        self.root.path().join("warden-data")
    }

    fn token_file(&self) -> PathBuf {
        self.data().join("harness.token")
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.workspace().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// `warden-run` as a user runs it from the workspace.
    fn warden_run(&self, endpoint: &str, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_warden-run"));
        command
            .args(args)
            .current_dir(self.workspace())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home())
            .env("USER", "alice")
            .env("WARDEN_ENDPOINT", endpoint)
            .env("WARDEN_TOKEN_FILE", self.token_file());
        command
    }
}

/// A monitor deciding by `policies` (with the bundled schema and
/// entities), with the run's harness credential and an admin's.
async fn monitor_with(policies: &str) -> warden_tests::monitor::OwnPolicies {
    warden_tests::monitor::start_with_policies(
        policies,
        vec![
            CredentialConfig::for_token("run-harness", Role::Harness, HARNESS, &["*"]),
            CredentialConfig::for_token("admin", Role::Admin, ADMIN, &[]),
        ],
    )
    .await
    .unwrap()
}

async fn monitor() -> warden_tests::monitor::OwnPolicies {
    monitor_with(POLICIES).await
}

async fn output(mut command: Command) -> Output {
    tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap()
}

/// A server on the host's loopback that answers 200 to every request and
/// remembers the paths it was asked for.
async fn upstream() -> (std::net::SocketAddr, Arc<Mutex<Vec<String>>>) {
    let (address, seen, _) = upstream_heads().await;
    (address, seen)
}

/// [`upstream`], also remembering each request's head (its headers).
async fn upstream_heads() -> (std::net::SocketAddr, Arc<Mutex<Vec<String>>>, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let heads = Arc::new(Mutex::new(Vec::new()));
    let heard = Arc::clone(&seen);
    let headed = Arc::clone(&heads);
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else { return };
            let heard = Arc::clone(&heard);
            let headed = Arc::clone(&headed);
            tokio::spawn(async move {
                let mut request = vec![0u8; 8192];
                let n = stream.read(&mut request).await.unwrap_or(0);
                let text = String::from_utf8_lossy(&request[..n]).into_owned();
                let path = text.split_whitespace().nth(1).unwrap_or_default().to_owned();
                heard.lock().unwrap().push(path);
                headed.lock().unwrap().push(text.split("\r\n\r\n").next().unwrap_or_default().to_owned());
                let body = "hello from upstream";
                let answer =
                    format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    (address, seen, heads)
}

/// Every decision record of the monitor: (session, resource, outcome).
async fn decisions(endpoint: &str) -> Vec<(String, String, i32)> {
    let records = warden_tests::monitor::audit(endpoint, ADMIN).await.unwrap();
    records
        .into_iter()
        .filter(|record| record.kind == "decision")
        .map(|record| (record.actor.map(|a| a.session).unwrap_or_default(), record.resource, record.outcome))
        .collect()
}
