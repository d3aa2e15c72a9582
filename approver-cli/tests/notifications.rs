//! `wardenctl approvals watch --notify` on a real desktop: Xvfb, a private
//! D-Bus session bus and dunst. The test clicks Approve through dunst's own
//! context menu, and the waiting harness is allowed.
//!
//! Needs the Debian packages xvfb, dbus-daemon, dbus-bin and dunst; without
//! them the desktop test says so and passes (`.ci/run` installs them).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use warden_monitor::auth::{CredentialConfig, Role};
use warden_monitor::server::{RunningServer, ServerConfig, start};
use warden_sdk::{ActionRequest, Actor, BearerToken, Client, Outcome};
use warden_tests::wait::eventually;

const HARNESS: &str = "wdn_notify_test_harness";
const APPROVER: &str = "wdn_notify_test_approver";

fn credential(name: &str, role: Role, token: &str) -> CredentialConfig {
    CredentialConfig::for_token(name, role, token, if role == Role::Harness { &["*"] } else { &[] })
}

async fn monitor(data: &Path) -> RunningServer {
    let config = ServerConfig::new(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies"),
        data.to_owned(),
        vec![credential("harness", Role::Harness, HARNESS), credential("desk-oncall", Role::Approver, APPROVER)],
    );
    start(config, tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()).await.unwrap()
}

async fn harness(server: &RunningServer) -> Client {
    let channel =
        tonic::transport::Channel::from_shared(format!("http://{}", server.addr())).unwrap().connect().await.unwrap();
    Client::with_channel(channel, BearerToken::new(HARNESS).unwrap())
}

fn missing_programs() -> Vec<&'static str> {
    ["Xvfb", "dbus-daemon", "dbus-send", "dunst", "dunstctl"]
        .into_iter()
        .filter(|program| {
            !std::env::var_os("PATH")
                .map(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
                .unwrap_or(false)
        })
        .collect()
}

/// Xvfb, a private session bus and dunst, stopped on drop.
struct Desktop {
    children: Vec<Child>,
    display: String,
    bus: String,
    _dir: tempfile::TempDir,
}

impl Drop for Desktop {
    fn drop(&mut self) {
        for child in self.children.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Desktop {
    /// A desktop whose person picks the action labelled `pick` (the first
    /// that starts so) from a notification's menu.
    async fn start(pick: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut children = Vec::new();
        // A display number no other test run uses, nor another test of this
        // run (they run at once; one stopping its Xvfb would take the
        // other's dunst down with it).
        static DESKTOPS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let nth = DESKTOPS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let display = format!(":{}", 100 + (std::process::id() % 400) * 4 + nth % 4);
        children.push(
            Command::new("Xvfb")
                .args([&display, "-screen", "0", "1280x800x24", "-nolisten", "tcp"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let mut bus_daemon = Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--print-address=1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(bus_daemon.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let bus = line.trim().to_owned();
        children.push(bus_daemon);

        // dunst hands the actions of its notifications to "dmenu"; this one
        // picks one, as a person clicking it would (when there is none,
        // nothing).
        let label = pick;
        let pick = dir.path().join("pick");
        std::fs::write(&pick, format!("#!/bin/sh\ngrep -- '{label}' | head -n1\n")).unwrap();
        std::fs::set_permissions(&pick, std::fs::Permissions::from_mode(0o755)).unwrap();
        let config = dir.path().join("dunstrc");
        std::fs::write(&config, format!("[global]\n    dmenu = {}\n    browser = /bin/true\n", pick.display()))
            .unwrap();
        let mut desktop = Self { children, display, bus, _dir: dir };
        let dunst = desktop
            .command("dunst")
            .arg("-config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        desktop.children.push(dunst);
        eventually("dunst owns the notification service", || async {
            let output = desktop
                .command("dbus-send")
                .args([
                    "--session",
                    "--print-reply",
                    "--dest=org.freedesktop.DBus",
                    "/",
                    "org.freedesktop.DBus.NameHasOwner",
                    "string:org.freedesktop.Notifications",
                ])
                .output()
                .unwrap();
            String::from_utf8_lossy(&output.stdout).contains("boolean true").then_some(())
        })
        .await;
        desktop
    }

    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new(program);
        command.env("DISPLAY", &self.display).env("DBUS_SESSION_BUS_ADDRESS", &self.bus);
        command
    }

    fn displayed(&self) -> usize {
        let output = self.command("dunstctl").args(["count", "displayed"]).output().unwrap();
        String::from_utf8_lossy(&output.stdout).trim().parse().unwrap_or(0)
    }

    /// Waits until dunst shows `count` notifications.
    async fn displaying(&self, count: usize) {
        eventually(&format!("dunst shows {count} notification(s)"), || async {
            (self.displayed() == count).then_some(())
        })
        .await;
    }
}

/// Whether the desktop programs are here; says why not, and fails when
/// `WARDEN_REQUIRE_DESKTOP` is set.
fn have_a_desktop() -> bool {
    let missing = missing_programs();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var_os("WARDEN_REQUIRE_DESKTOP").is_none(),
        "WARDEN_REQUIRE_DESKTOP is set but {} missing",
        missing.join(", ")
    );
    println!(
        "skipping the desktop notification test: {} not installed (apt-get install xvfb dbus-daemon dbus-bin dunst)",
        missing.join(", ")
    );
    false
}

fn wardenctl(endpoint: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_wardenctl"));
    command.args(["--endpoint", endpoint]).env("WARDEN_TOKEN", APPROVER).env_remove("WARDEN_TOKEN_FILE");
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_from_a_real_desktop_notification() {
    if !have_a_desktop() {
        return;
    }
    let desktop = Desktop::start("Approve").await;
    let data = tempfile::tempdir().unwrap();
    let server = monitor(data.path()).await;
    let endpoint = format!("http://{}", server.addr());

    let mut watcher = desktop
        .command(env!("CARGO_BIN_EXE_wardenctl"))
        .args(["--endpoint", &endpoint, "approvals", "watch", "--notify"])
        .env("WARDEN_TOKEN", APPROVER)
        .env_remove("WARDEN_TOKEN_FILE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The watcher says which notification server it reached.
    let mut stderr = BufReader::new(watcher.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    assert!(first.contains("desktop notifications through dunst"), "{first}");
    let (sender, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });

    let client = harness(&server).await;
    let actor = Actor::new("alice", "claude-code", "desk-1");
    let waiting = tokio::spawn(async move {
        client.check(&actor, ActionRequest::exec(["git", "-c", "core.pager=cat", "log"]).justification("history")).await
    });

    desktop.displaying(1).await;
    let desktop = tokio::task::spawn_blocking(move || {
        // Another program on the bus forges clicks: every action key, on
        // the server's path and elsewhere, for the ids dunst hands out first.
        for key in ["approve", "approve-15m", "deny"] {
            for path in ["/org/freedesktop/Notifications", "/x"] {
                for id in 1..=3 {
                    let forged = desktop
                        .command("dbus-send")
                        .args(["--session", "--type=signal", path, "org.freedesktop.Notifications.ActionInvoked"])
                        .arg(format!("uint32:{id}"))
                        .arg(format!("string:{key}"))
                        .status()
                        .unwrap();
                    assert!(forged.success());
                }
            }
        }
        desktop
    })
    .await
    .unwrap();
    // The watcher saw each of the 18 forgeries and said it ignored it (an
    // event on its stderr, not a pause); none resolved anything.
    let mut ignored = 0;
    eventually("the watcher reports 18 forged clicks ignored", || {
        ignored += lines.try_iter().filter(|line| line.contains("ignored a click on notification")).count();
        std::future::ready((ignored >= 18).then_some(()))
    })
    .await;
    assert_eq!(ignored, 18);
    assert!(!waiting.is_finished(), "a forged click resolved the approval");
    let mut approvals = warden_proto::v1::approvals_client::ApprovalsClient::with_interceptor(
        tonic::transport::Channel::from_shared(endpoint.clone()).unwrap().connect().await.unwrap(),
        BearerToken::new(APPROVER).unwrap(),
    );
    let pending = approvals.list_pending(warden_proto::v1::ListPendingRequest::default()).await.unwrap().into_inner();
    assert_eq!(pending.approvals.len(), 1, "the approval is still pending after forged clicks");

    let desktop = tokio::task::spawn_blocking(move || {
        // Open dunst's context menu: the scripted dmenu picks Approve.
        let status = desktop.command("dunstctl").arg("context").status().unwrap();
        assert!(status.success());
        desktop
    })
    .await
    .unwrap();

    let decision = tokio::time::timeout(Duration::from_secs(30), waiting).await.unwrap().unwrap().unwrap();
    assert_eq!(decision.outcome, Outcome::Allow);
    assert_eq!(decision.resolved_by, "desk-oncall");
    assert_eq!(decision.note, "approved from the desktop");

    // Resolved: the notification goes away.
    desktop.displaying(0).await;
    let _ = watcher.kill();
    let _ = watcher.wait();
    drop(desktop);
    server.stop().await.unwrap();
}

/// A push to a protected branch needs a passkey (`@approval("passkey")` in
/// the bundled pack): its notification offers "Open approval page" and
/// Deny, no Approve. Opening the page resolves nothing, and neither does a
/// forged Approve click.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passkey_approval_on_the_desktop_opens_the_page_and_cannot_be_approved_there() {
    if !have_a_desktop() {
        return;
    }
    let desktop = Desktop::start("Open approval page").await;
    let data = tempfile::tempdir().unwrap();
    let server = monitor(data.path()).await;
    let endpoint = format!("http://{}", server.addr());
    // The "browser": writes the URL it was asked to open.
    let opened = data.path().join("opened");
    let browser = data.path().join("browser");
    std::fs::write(&browser, format!("#!/bin/sh\nprintf '%s' \"$1\" > {}\n", opened.display())).unwrap();
    std::fs::set_permissions(&browser, std::fs::Permissions::from_mode(0o755)).unwrap();

    let mut watcher = desktop
        .command(env!("CARGO_BIN_EXE_wardenctl"))
        .args(["--endpoint", &endpoint, "approvals", "watch", "--notify", "--page", "http://localhost:8443"])
        .env("WARDEN_TOKEN", APPROVER)
        .env("BROWSER", &browser)
        .env_remove("WARDEN_TOKEN_FILE")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(watcher.stderr.take().unwrap());
    let (sender, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    let pending = harness(&server)
        .await
        .authorize(
            &Actor::new("alice", "claude-code", "desk-2"),
            ActionRequest::exec(["git", "push", "origin", "main"]),
        )
        .await
        .unwrap();
    assert_eq!(pending.outcome, Outcome::Pending);
    assert!(pending.policy_ids.contains(&"commands.protected-branch-push".to_owned()), "{:?}", pending.policy_ids);
    desktop.displaying(1).await;

    let desktop = tokio::task::spawn_blocking(move || {
        // A forged Approve from another program on the bus.
        let forged = desktop
            .command("dbus-send")
            .args([
                "--session",
                "--type=signal",
                "/org/freedesktop/Notifications",
                "org.freedesktop.Notifications.ActionInvoked",
            ])
            .args(["uint32:1", "string:approve"])
            .status()
            .unwrap();
        assert!(forged.success());
        // The person picks "Open approval page" from dunst's menu.
        assert!(desktop.command("dunstctl").arg("context").status().unwrap().success());
        desktop
    })
    .await
    .unwrap();
    let url = eventually("the browser opened", || std::future::ready(std::fs::read_to_string(&opened).ok())).await;
    assert_eq!(url, format!("http://localhost:8443/#{}", pending.approval_id));
    let mut seen = Vec::new();
    eventually("the watcher says it ignored the forged click", || {
        seen.extend(lines.try_iter());
        std::future::ready(seen.iter().any(|l| l.contains("ignored a click on notification")).then_some(()))
    })
    .await;

    let mut approvals = warden_proto::v1::approvals_client::ApprovalsClient::with_interceptor(
        tonic::transport::Channel::from_shared(endpoint.clone()).unwrap().connect().await.unwrap(),
        BearerToken::new(APPROVER).unwrap(),
    );
    let listed = approvals.list_pending(warden_proto::v1::ListPendingRequest::default()).await.unwrap().into_inner();
    assert_eq!(listed.approvals.len(), 1, "still pending: neither opening the page nor a forged click approves");
    assert_eq!(listed.approvals[0].passkey_policies, ["commands.protected-branch-push"]);
    assert_eq!(desktop.displayed(), 1, "the notification stays until the approval is resolved");
    let _ = watcher.kill();
    let _ = watcher.wait();
    drop(desktop);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_notification_server_watch_says_so_and_keeps_working() {
    let data = tempfile::tempdir().unwrap();
    let server = monitor(data.path()).await;
    let endpoint = format!("http://{}", server.addr());
    let socket: PathBuf = data.path().join("no-bus");
    let mut watcher = wardenctl(&endpoint)
        .args(["approvals", "watch", "--notify"])
        .env("DBUS_SESSION_BUS_ADDRESS", format!("unix:path={}", socket.display()))
        .env_remove("DISPLAY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(watcher.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.contains("no desktop notifications") && line.contains("terminal only"), "{line}");

    let pending = harness(&server)
        .await
        .authorize(&Actor::new("alice", "claude-code", "t1"), ActionRequest::exec(["rm", "-r", "build"]))
        .await
        .unwrap();
    assert_eq!(pending.outcome, Outcome::Pending);
    let stdout = watcher.stdout.take().unwrap();
    let approval_id = pending.approval_id.clone();
    let seen = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|l| l.starts_with("PENDING") && l.contains(&approval_id))
    });
    assert!(tokio::time::timeout(Duration::from_secs(20), seen).await.unwrap().unwrap());
    let _ = watcher.kill();
    let _ = watcher.wait();
    server.stop().await.unwrap();
}
