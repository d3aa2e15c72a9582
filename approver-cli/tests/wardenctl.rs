//! `wardenctl` as a person runs it, against a real monitor on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use warden_monitor::auth::{CredentialConfig, Role};
use warden_monitor::server::{RunningServer, ServerConfig, start};

const HARNESS: &str = "wdn_cli_test_harness";
const ADMIN: &str = "wdn_cli_test_admin";
const APPROVER: &str = "wdn_cli_test_approver";

fn policies() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies")
}

fn credential(name: &str, role: Role, token: &str, users: &[&str]) -> CredentialConfig {
    CredentialConfig::for_token(name, role, token, users)
}

async fn monitor(data: &Path) -> RunningServer {
    let config = ServerConfig::new(
        policies(),
        data.to_owned(),
        vec![
            credential("h", Role::Harness, HARNESS, &["*"]),
            credential("a", Role::Admin, ADMIN, &[]),
            CredentialConfig { groups: vec!["*".into()], ..credential("o", Role::Approver, APPROVER, &[]) },
        ],
    );
    start(config, tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()).await.unwrap()
}

/// Runs wardenctl off the async runtime's threads.
async fn wardenctl(endpoint: &str, token: &str, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_wardenctl"));
    command.args(["--endpoint", endpoint]).env("WARDEN_TOKEN", token).env_remove("WARDEN_TOKEN_FILE").args(args);
    tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

const ALICE: [&str; 7] = ["authorize", "--user", "alice", "--agent", "claude-code", "--session", "s1"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorize_prints_the_decision_and_exits_by_outcome() {
    let data = tempfile::tempdir().unwrap();
    let server = monitor(data.path()).await;
    let endpoint = format!("http://{}", server.addr());

    let allow =
        wardenctl(&endpoint, HARNESS, &[&ALICE[..], &["fs.read", "/home/alice/project/src/main.rs"]].concat()).await;
    assert_eq!(allow.status.code(), Some(0));
    let text = stdout(&allow);
    assert!(text.starts_with("ALLOW"), "{text}");
    assert!(text.contains("files.workspace-read-write") && text.contains("audit:    #1"), "{text}");

    let deny = wardenctl(&endpoint, HARNESS, &[&ALICE[..], &["fs.read", "/home/alice/project/.env"]].concat()).await;
    assert_eq!(deny.status.code(), Some(2));
    assert!(stdout(&deny).contains("credential files"));

    let pending = wardenctl(
        &endpoint,
        HARNESS,
        &[&["--json"], &ALICE[..], &["exec", "--", "git", "push", "origin", "main"]].concat(),
    )
    .await;
    assert_eq!(pending.status.code(), Some(3));
    let json: serde_json::Value = serde_json::from_str(&stdout(&pending)).unwrap();
    assert_eq!(json["outcome"], "PENDING");
    assert_eq!(json["policy_ids"][0], "commands.protected-branch-push");
    assert!(json["approval_id"].as_str().unwrap().starts_with("apr-"));

    let bad = wardenctl(&endpoint, HARNESS, &[&ALICE[..], &["fs.read", "relative/path"]].concat()).await;
    assert_eq!(bad.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("InvalidArgument") && stderr.contains("resource.file.path"), "{stderr}");

    // The audit log with an admin token; a harness token is refused.
    let tail = wardenctl(&endpoint, ADMIN, &["--json", "audit", "tail", "-n", "3"]).await;
    assert!(tail.status.success());
    let lines: Vec<serde_json::Value> = stdout(&tail).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.iter().map(|l| l["seq"].as_u64().unwrap()).collect::<Vec<_>>(), [2, 3, 4]);
    assert_eq!(lines[0]["outcome"], "DENY");
    // The refused input is on record too, as refused input.
    assert_eq!(lines[2]["kind"], "invalid-request");
    let verify = wardenctl(&endpoint, ADMIN, &["audit", "verify"]).await;
    assert!(verify.status.success());
    assert!(stdout(&verify).starts_with("ok: 4 records"), "{}", stdout(&verify));
    let refused = wardenctl(&endpoint, HARNESS, &["audit", "verify"]).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("PermissionDenied"));

    server.stop().await.unwrap();
    // Offline, on the stopped monitor's store.
    let offline = wardenctl(&endpoint, ADMIN, &["audit", "verify", "--data", data.path().to_str().unwrap()]).await;
    assert!(offline.status.success(), "{}", String::from_utf8_lossy(&offline.stderr));
    assert!(stdout(&offline).starts_with("ok: 4 records"));
}

#[tokio::test]
async fn policy_check_reports_file_and_line_and_fails() {
    let ok = wardenctl("http://127.0.0.1:1", "", &["policy", "check", policies().to_str().unwrap()]).await;
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    assert!(stdout(&ok).contains("policies ("), "{}", stdout(&ok));

    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(policies()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(
        dir.path().join("zz-extra.cedar"),
        "@id(\"files.no-credentials\")\npermit(principal, action, resource);\n",
    )
    .unwrap();
    let broken = wardenctl("http://127.0.0.1:1", "", &["policy", "check", dir.path().to_str().unwrap()]).await;
    assert_eq!(broken.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&broken.stderr);
    assert!(stderr.contains("zz-extra.cedar:1:1: duplicate @id `files.no-credentials`"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_and_sessions_from_the_command_line() {
    let data = tempfile::tempdir().unwrap();
    let server = monitor(data.path()).await;
    let endpoint = format!("http://{}", server.addr());
    let write = [&ALICE[..], &["fs.write", "/srv/shared/notes.md"]].concat();
    assert_eq!(wardenctl(&endpoint, HARNESS, &write).await.status.code(), Some(2));

    let created = wardenctl(
        &endpoint,
        ADMIN,
        &[
            "--json",
            "grants",
            "create",
            "--user",
            "alice",
            "--action",
            "fs.write",
            "--resource",
            "dir:/srv/shared",
            "--for",
            "2h",
            "--reason",
            "shared notes",
        ],
    )
    .await;
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let grant: serde_json::Value = serde_json::from_str(&stdout(&created)).unwrap();
    let grant_id = grant["grant_id"].as_str().unwrap().to_owned();
    assert_eq!(wardenctl(&endpoint, HARNESS, &write).await.status.code(), Some(0));
    let listed = wardenctl(&endpoint, ADMIN, &["grants", "list", "--user", "alice"]).await;
    assert!(stdout(&listed).contains(&grant_id) && stdout(&listed).contains("dir:/srv/shared"), "{}", stdout(&listed));
    assert!(wardenctl(&endpoint, ADMIN, &["grants", "revoke", &grant_id]).await.status.success());
    assert_eq!(wardenctl(&endpoint, HARNESS, &write).await.status.code(), Some(2));

    let locked = wardenctl(&endpoint, ADMIN, &["sessions", "lock", "s1", "--reason", "investigating"]).await;
    assert!(stdout(&locked).starts_with("locked session:s1"), "{}", stdout(&locked));
    let read = [&ALICE[..], &["fs.read", "/home/alice/project/a.rs"]].concat();
    let denied = wardenctl(&endpoint, HARNESS, &read).await;
    assert_eq!(denied.status.code(), Some(2));
    assert!(stdout(&denied).contains("investigating"));
    let shown = wardenctl(&endpoint, ADMIN, &["sessions", "show", "s1"]).await;
    assert!(stdout(&shown).contains("LOCKED"), "{}", stdout(&shown));
    assert!(wardenctl(&endpoint, ADMIN, &["sessions", "unlock", "s1"]).await.status.success());
    assert_eq!(wardenctl(&endpoint, HARNESS, &read).await.status.code(), Some(0));
    let cleared = wardenctl(&endpoint, ADMIN, &["--json", "sessions", "clear-labels", "s1"]).await;
    let session: serde_json::Value = serde_json::from_str(&stdout(&cleared)).unwrap();
    assert_eq!(session["labels"], serde_json::json!([]));
    server.stop().await.unwrap();
}

fn copy_policies() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tests")).unwrap();
    for sub in ["", "tests"] {
        for entry in std::fs::read_dir(policies().join(sub)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                std::fs::copy(&path, dir.path().join(sub).join(path.file_name().unwrap())).unwrap();
            }
        }
    }
    dir
}

#[tokio::test]
async fn policy_test_passes_on_the_bundled_pack_and_prints_the_difference_on_a_failure() {
    let ok = wardenctl("http://127.0.0.1:1", "", &["policy", "test", policies().to_str().unwrap()]).await;
    assert!(ok.status.success(), "{}{}", stdout(&ok), String::from_utf8_lossy(&ok.stderr));
    assert!(stdout(&ok).lines().last().unwrap().ends_with(" 0 failed"), "{}", stdout(&ok));

    let dir = copy_policies();
    std::fs::write(
        dir.path().join("tests/wrong.json"),
        r#"{ "suite": "wrong on purpose", "cases": [ {
            "name": "an SSH key is readable",
            "actor": { "user": "alice", "agent": "claude-code", "session": "s1" },
            "action": "fs.read", "resource": { "file": { "path": "/home/alice/.ssh/id_rsa" } },
            "expect": "ALLOW" },
          { "name": "a grant lets alice write a shared folder",
            "actor": { "user": "alice", "agent": "claude-code", "session": "s1" },
            "action": "fs.write", "resource": { "file": { "path": "/srv/shared/a" } },
            "grants": [ { "actions": ["fs.write"], "resource_scope": "dir:/srv/shared" } ],
            "expect": "ALLOW" } ] }"#,
    )
    .unwrap();
    let failed = wardenctl("http://127.0.0.1:1", "", &["policy", "test", dir.path().to_str().unwrap()]).await;
    assert_eq!(failed.status.code(), Some(1));
    let text = stdout(&failed);
    assert!(text.contains("FAIL wrong on purpose / an SSH key is readable"), "{text}");
    assert!(text.contains("expected Allow, got Deny"), "{text}");
    assert!(text.contains("files.no-credentials"), "{text}");
    assert!(text.contains("wrong on purpose: 1 passed, 1 failed"), "{text}");

    let json = wardenctl("http://127.0.0.1:1", "", &["--json", "policy", "test", dir.path().to_str().unwrap()]).await;
    let report: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
    assert_eq!(report["failed"], 1);
}

#[tokio::test]
async fn a_syntax_error_is_named_by_file_and_line() {
    let dir = copy_policies();
    std::fs::write(
        dir.path().join("typo.cedar"),
        "@id(\"typo\")\npermit (principal, action, resource)\nwhen { resource.path == \"x\" ;\n",
    )
    .unwrap();
    let checked = wardenctl("http://127.0.0.1:1", "", &["policy", "check", dir.path().to_str().unwrap()]).await;
    assert_eq!(checked.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&checked.stderr);
    assert!(stderr.contains("typo.cedar:3:"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_status_and_reload() {
    // Offline, against a candidate folder, with labels.
    let explained = wardenctl(
        "http://127.0.0.1:1",
        "",
        &[
            &ALICE[..],
            &[
                "--explain",
                "--policies",
                policies().to_str().unwrap(),
                "--label",
                "untrusted-input",
                "--label",
                "private-data",
                "http.request",
                "POST",
                "https://api.github.com/repos/acme/app/issues",
            ],
        ]
        .concat(),
    )
    .await;
    // The exit code is the outcome's, as for a decision asked for.
    assert_eq!(explained.status.code(), Some(3), "{}", String::from_utf8_lossy(&explained.stderr));
    let text = stdout(&explained);
    assert!(text.starts_with("PENDING"), "{text}");
    let trifecta = text.lines().find(|l| l.contains("trifecta.no-exfiltration")).unwrap();
    assert!(trifecta.trim_start().starts_with("yes"), "{trifecta}");
    let bundled = policies();
    let offline = |path: &'static str| {
        let args = [&ALICE[..], &["--explain", "--policies", bundled.to_str().unwrap(), "fs.read", path]].concat();
        async move { wardenctl("http://127.0.0.1:1", "", &args).await }
    };
    let allowed = offline("/home/alice/project/src/main.rs").await;
    assert_eq!(allowed.status.code(), Some(0), "{}", stdout(&allowed));
    assert!(stdout(&allowed).starts_with("ALLOW"), "{}", stdout(&allowed));
    let denied = offline("/home/alice/project/.env").await;
    assert_eq!(denied.status.code(), Some(2), "{}", stdout(&denied));
    assert!(stdout(&denied).starts_with("DENY"), "{}", stdout(&denied));

    // Online, with the admin token: status, reload, explain.
    let data = tempfile::tempdir().unwrap();
    let server = monitor(data.path()).await;
    let endpoint = format!("http://{}", server.addr());
    let status = wardenctl(&endpoint, ADMIN, &["--json", "policy", "status"]).await;
    let status: serde_json::Value = serde_json::from_str(&stdout(&status)).unwrap();
    assert!(status["policy_version"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(status["error"], "");
    let reloaded = wardenctl(&endpoint, ADMIN, &["policy", "reload"]).await;
    assert!(reloaded.status.success());
    assert!(stdout(&reloaded).starts_with("reloaded"));
    let online =
        wardenctl(&endpoint, ADMIN, &[&ALICE[..], &["--explain", "fs.read", "/home/alice/project/.env"]].concat())
            .await;
    assert!(stdout(&online).starts_with("DENY"), "{}", stdout(&online));
    assert_eq!(online.status.code(), Some(2));
    // Nothing was recorded.
    let verify = wardenctl(&endpoint, ADMIN, &["audit", "verify"]).await;
    assert!(stdout(&verify).starts_with("ok: 0 records"), "{}", stdout(&verify));
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_checkpoint_catches_a_truncated_or_rewritten_log() {
    let data = tempfile::tempdir().unwrap();
    let server = monitor(data.path()).await;
    let endpoint = format!("http://{}", server.addr());
    for n in 0..3 {
        let path = format!("/home/alice/project/{n}.rs");
        wardenctl(&endpoint, HARNESS, &[&ALICE[..], &["fs.read", &path]].concat()).await;
    }
    let checkpoint = wardenctl(&endpoint, ADMIN, &["audit", "checkpoint"]).await;
    assert!(checkpoint.status.success(), "{}", String::from_utf8_lossy(&checkpoint.stderr));
    let saved = data.path().join("saved-checkpoint.json");
    std::fs::write(&saved, stdout(&checkpoint)).unwrap();
    let parsed: serde_json::Value = serde_json::from_str(&stdout(&checkpoint)).unwrap();
    assert_eq!(parsed["seq"], 3);
    for n in 3..5 {
        let path = format!("/home/alice/project/{n}.rs");
        wardenctl(&endpoint, HARNESS, &[&ALICE[..], &["fs.read", &path]].concat()).await;
    }
    let online = wardenctl(&endpoint, ADMIN, &["audit", "verify", "--checkpoint", saved.to_str().unwrap()]).await;
    assert!(online.status.success(), "{}", stdout(&online));
    assert!(stdout(&online).contains("holds checkpoint #3"));
    server.stop().await.unwrap();
    let store = data.path().join("store");
    let offline = |extra: &[&str]| {
        let mut args = vec!["audit", "verify", "--data", data.path().to_str().unwrap()];
        args.extend_from_slice(extra);
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        async move { wardenctl("http://127.0.0.1:1", "", &args.iter().map(String::as_str).collect::<Vec<_>>()).await }
    };

    // Rewrite the head: record 3 says DENY and is hashed again, so the bare
    // chain still verifies.
    {
        let stopped = warden_monitor::store::StoppedStore::open(&store).unwrap();
        let mut records: Vec<_> = stopped.records(1).collect::<Result<_, _>>().unwrap();
        records.truncate(3);
        let record = &mut records[2];
        record.outcome = "DENY".into();
        record.hash = record.compute_hash();
        stopped.rewrite(&records).unwrap();
    }
    let bare = offline(&[]).await;
    assert!(bare.status.success(), "a rewritten head passes a bare chain check: {}", stdout(&bare));
    let caught = offline(&["--checkpoint", saved.to_str().unwrap()]).await;
    assert_eq!(caught.status.code(), Some(1));
    assert!(stdout(&caught).contains("the log was rewritten"), "{}", stdout(&caught));

    // Cut off the newest records instead.
    {
        let stopped = warden_monitor::store::StoppedStore::open(&store).unwrap();
        let records: Vec<_> = stopped.records(1).take(2).collect::<Result<_, _>>().unwrap();
        stopped.rewrite(&records).unwrap();
    }
    assert!(offline(&[]).await.status.success());
    let caught = offline(&["--checkpoint", saved.to_str().unwrap()]).await;
    assert_eq!(caught.status.code(), Some(1));
    assert!(stdout(&caught).contains("records were removed"), "{}", stdout(&caught));
}

/// A certificate authority of a test's own.
fn new_ca() -> rcgen::CertifiedIssuer<'static, rcgen::KeyPair> {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_over_mutual_tls_needs_no_token() {
    use rcgen::{CertificateParams, KeyPair};
    let ca = new_ca();
    let server_key = KeyPair::generate().unwrap();
    let server_cert =
        CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap().signed_by(&server_key, &ca).unwrap();
    let admin_key = KeyPair::generate().unwrap();
    let admin_cert = CertificateParams::new(vec!["admin".to_owned()]).unwrap().signed_by(&admin_key, &ca).unwrap();

    let data = tempfile::tempdir().unwrap();
    let files = data.path();
    std::fs::write(files.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(files.join("admin.pem"), admin_cert.pem()).unwrap();
    std::fs::write(files.join("admin.key"), admin_key.serialize_pem()).unwrap();
    let config = ServerConfig {
        policies: policies(),
        data: data.path().join("data"),
        credentials: vec![CredentialConfig {
            token_sha256: String::new(),
            cert_sha256: Some(warden_monitor::auth::sha256_hex(admin_cert.der())),
            ..credential("admin-by-cert", Role::Admin, "unused", &[])
        }],
        monitor: Default::default(),
        durability: Default::default(),
        checkpoint_every: std::time::Duration::from_secs(300),
        tls: Some(warden_monitor::server::TlsPem {
            cert: server_cert.pem(),
            key: server_key.serialize_pem(),
            client_ca: Some(ca.pem()),
        }),
        socket: None,
        audit: Default::default(),
        store: None,
    };
    let server = start(config, tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()).await.unwrap();
    let endpoint = format!("https://{}", server.addr());
    let mut command = Command::new(env!("CARGO_BIN_EXE_wardenctl"));
    command
        .args(["--endpoint", &endpoint, "--ca-cert"])
        .arg(files.join("ca.pem"))
        .arg("--client-cert")
        .arg(files.join("admin.pem"))
        .arg("--client-key")
        .arg(files.join("admin.key"))
        .args(["audit", "verify"])
        .env_remove("WARDEN_TOKEN")
        .env_remove("WARDEN_TOKEN_FILE");
    let output = tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout(&output).starts_with("ok: 0 records"), "{}", stdout(&output));
    server.stop().await.unwrap();
}

/// A command of several parts that waits: `approvals list` shows the
/// approver every part and how each was decided, not only the one in the
/// way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_list_shows_every_part_of_a_command() {
    let data = tempfile::tempdir().unwrap();
    let server = monitor(data.path()).await;
    let endpoint = format!("http://{}", server.addr());
    let script = "cargo test && git push origin main";
    let args = [&ALICE[..], &["--cwd", "/home/alice/project", "exec", "--", "bash", "-c", script]].concat();
    let pending = wardenctl(&endpoint, HARNESS, &args).await;
    assert_eq!(pending.status.code(), Some(3), "{}", stdout(&pending));
    let listed = wardenctl(&endpoint, APPROVER, &["approvals", "list"]).await;
    let text = stdout(&listed);
    assert!(listed.status.success(), "{text}");
    assert!(text.contains("part 1 of 2, `cargo test` (exec): ALLOW by commands.developer-tools"), "{text}");
    assert!(
        text.contains("part 2 of 2, `git push origin main` (exec): PENDING by commands.protected-branch-push"),
        "{text}"
    );

    // The deadline as a person reads it: local time (a zone one hour east
    // of UTC, by a POSIX TZ), with what is left; `--json` keeps RFC 3339.
    let json = wardenctl(&endpoint, APPROVER, &["--json", "approvals", "list"]).await;
    let approval: serde_json::Value = serde_json::from_str(stdout(&json).lines().next().unwrap()).unwrap();
    let id = approval["approval_id"].as_str().unwrap();
    let expires = approval["expires_at"].as_str().unwrap();
    let utc = time::OffsetDateTime::parse(expires, &time::format_description::well_known::Rfc3339).unwrap();
    let local = utc.to_offset(time::UtcOffset::from_hms(1, 0, 0).unwrap());
    let shown = {
        let mut command = Command::new(env!("CARGO_BIN_EXE_wardenctl"));
        command
            .args(["--endpoint", &endpoint, "approvals", "show", id])
            .env("WARDEN_TOKEN", APPROVER)
            .env("TZ", "WDN-1");
        tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap()
    };
    let text = stdout(&shown);
    let line = text.lines().find(|l| l.contains("expires")).unwrap_or_else(|| panic!("{text}"));
    let clock = format!("{:02}:{:02}:{:02} WDN, in ", local.hour(), local.minute(), local.second());
    assert!(line.contains(&format!("expires {clock}")), "{line} (deadline {expires})");
    assert!(line.ends_with('s'), "{line}");
    server.stop().await.unwrap();
}

/// What an approver reads is what runs: `&&`, `>` and `<` are shown as
/// written by `approvals list`, `approvals show` and `audit tail`, and a
/// credential in the command is named, not hidden.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvers_read_the_command_exactly_with_its_credentials_named() {
    let data = tempfile::tempdir().unwrap();
    let server = monitor(data.path()).await;
    let endpoint = format!("http://{}", server.addr());
    let script = "rm -rf build && echo done > log.txt < in.txt --token=s3cr3t";
    let args = [&ALICE[..], &["--cwd", "/home/alice/project", "exec", "--", "bash", "-c", script]].concat();
    let pending = wardenctl(&endpoint, HARNESS, &args).await;
    assert_eq!(pending.status.code(), Some(3), "{}", stdout(&pending));
    let listed = stdout(&wardenctl(&endpoint, APPROVER, &["approvals", "list"]).await);
    assert!(listed.contains(script), "{listed}");
    let json = wardenctl(&endpoint, APPROVER, &["--json", "approvals", "list"]).await;
    let approval: serde_json::Value = serde_json::from_str(stdout(&json).lines().next().unwrap()).unwrap();
    let id = approval["approval_id"].as_str().unwrap();
    let shown = stdout(&wardenctl(&endpoint, APPROVER, &["approvals", "show", id]).await);
    assert!(shown.contains(script), "{shown}");
    assert!(shown.contains("looks like a credential, and would leave: --token=s3cr3t"), "{shown}");
    let tail = stdout(&wardenctl(&endpoint, ADMIN, &["audit", "tail"]).await);
    assert!(tail.contains(script), "{tail}");
    server.stop().await.unwrap();
}

/// A token file others may read is refused, as ssh refuses such a key, and
/// nothing is sent; the same file at 0600 works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_file_others_can_read_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let data = tempfile::tempdir().unwrap();
    let server = monitor(data.path()).await;
    let endpoint = format!("http://{}", server.addr());
    let file = data.path().join("admin.token");
    std::fs::write(&file, format!("{ADMIN}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let run = |file: std::path::PathBuf, endpoint: String| async move {
        let mut command = Command::new(env!("CARGO_BIN_EXE_wardenctl"));
        command.args(["--endpoint", &endpoint, "--token-file"]).arg(file).args(["policy", "status"]);
        command.env_remove("WARDEN_TOKEN").env_remove("WARDEN_TOKEN_FILE");
        tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap()
    };
    let refused = run(file.clone(), endpoint.clone()).await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains("may be read or written by others (mode 0640)") && stderr.contains("chmod 600"),
        "{stderr}"
    );
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let status = run(file, endpoint).await;
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    server.stop().await.unwrap();
}

/// `approvers enroll|list|revoke`: no link without the approval page; with
/// it, a single-use link on the page's origin for an approver credential
/// only; each step audited. A passkey approval says so in `approvals show`,
/// and `approvals approve` names the policy and resolves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvers_enrolment_and_a_passkey_approval_from_the_command_line() {
    let data = tempfile::tempdir().unwrap();
    let server = monitor(data.path()).await;
    let endpoint = format!("http://{}", server.addr());
    let without_page = wardenctl(&endpoint, ADMIN, &["approvers", "enroll", "o"]).await;
    assert_eq!(without_page.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&without_page.stderr).contains("--web"), "{without_page:?}");

    let origin = server.serve_web(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(), None).unwrap();
    assert!(origin.starts_with("http://localhost:"), "{origin}");
    let link = wardenctl(&endpoint, ADMIN, &["--json", "approvers", "enroll", "o"]).await;
    assert!(link.status.success(), "{link:?}");
    let link: serde_json::Value = serde_json::from_str(stdout(&link).trim()).unwrap();
    let url = link["url"].as_str().unwrap();
    assert!(url.starts_with(&format!("{origin}/enroll#")), "{url}");
    assert!(url.len() > format!("{origin}/enroll#").len() + 40, "a long random token: {url}");
    // Only approver credentials; and only admins make links.
    let harness_name = wardenctl(&endpoint, ADMIN, &["approvers", "enroll", "h"]).await;
    assert!(String::from_utf8_lossy(&harness_name.stderr).contains("not an approver credential"), "{harness_name:?}");
    let by_approver = wardenctl(&endpoint, APPROVER, &["approvers", "enroll", "o"]).await;
    assert_eq!(by_approver.status.code(), Some(1), "{by_approver:?}");
    let listed = wardenctl(&endpoint, ADMIN, &["approvers", "list"]).await;
    assert_eq!(stdout(&listed).trim(), "no passkeys enrolled");
    let revoked = wardenctl(&endpoint, ADMIN, &["approvers", "revoke", "o"]).await;
    assert!(String::from_utf8_lossy(&revoked.stderr).contains("no passkey enrolled"), "{revoked:?}");
    let tail = wardenctl(&endpoint, ADMIN, &["--json", "audit", "tail", "-n", "20"]).await;
    assert!(stdout(&tail).contains("approver.enroll-link"), "{}", stdout(&tail));

    // A push to main waits for a passkey.
    let args = [&ALICE[..], &["exec", "--", "git", "push", "origin", "main"]].concat();
    let pending = wardenctl(&endpoint, HARNESS, &args).await;
    assert_eq!(pending.status.code(), Some(3), "{}", stdout(&pending));
    let json = wardenctl(&endpoint, APPROVER, &["--json", "approvals", "list"]).await;
    let approval: serde_json::Value = serde_json::from_str(stdout(&json).lines().next().unwrap()).unwrap();
    assert_eq!(approval["passkey_policies"], serde_json::json!(["commands.protected-branch-push"]));
    let id = approval["approval_id"].as_str().unwrap();
    let shown = wardenctl(&endpoint, APPROVER, &["approvals", "show", id]).await;
    assert!(stdout(&shown).contains("approve with a passkey on the approval page"), "{}", stdout(&shown));
    let approve = wardenctl(&endpoint, APPROVER, &["approvals", "approve", id]).await;
    assert_eq!(approve.status.code(), Some(1));
    let error = String::from_utf8_lossy(&approve.stderr);
    assert!(error.contains("commands.protected-branch-push") && error.contains("passkey"), "{error}");
    let deny = wardenctl(&endpoint, APPROVER, &["approvals", "deny", id, "--message", "use a branch"]).await;
    assert!(deny.status.success() && stdout(&deny).starts_with("DENIED"), "{deny:?}");
    server.stop().await.unwrap();
}

/// `audit export`: JSON lines in the documented schema, by seq and by time,
/// from the running monitor and (the same lines) from the stopped store,
/// and a follower that sees a new record as it is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_export_writes_json_lines_online_offline_and_following() {
    let data = tempfile::tempdir().unwrap();
    let server = monitor(data.path()).await;
    let endpoint = format!("http://{}", server.addr());
    for n in 1..=4 {
        let path = format!("/home/alice/project/{n}.rs");
        wardenctl(&endpoint, HARNESS, &[&ALICE[..], &["fs.read", &path]].concat()).await;
    }
    let lines = |output: &Output| -> Vec<serde_json::Value> {
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        stdout(output).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    let online = lines(&wardenctl(&endpoint, ADMIN, &["audit", "export", "--since", "2", "--until", "3"]).await);
    assert_eq!(online.iter().map(|r| r["seq"].as_u64().unwrap()).collect::<Vec<_>>(), [2, 3]);
    let record = &online[0];
    for key in [
        "seq",
        "time",
        "time_unix_ns",
        "kind",
        "caller",
        "actor",
        "action",
        "resource",
        "request",
        "outcome",
        "policy_ids",
        "reasons",
        "policy_version",
        "request_id",
        "approval_id",
        "prev_hash",
        "hash",
    ] {
        assert!(record.get(key).is_some(), "{key} missing from {record}");
    }
    assert_eq!(record["outcome"], "ALLOW");
    assert_eq!(record["actor"]["user"], "alice");
    assert_eq!(record["request"]["resource"]["File"]["path"], "/home/alice/project/2.rs", "{record}");
    assert_eq!(online[1]["prev_hash"], record["hash"]);
    // By time: from the third record's time on.
    let time = online[1]["time"].as_str().unwrap().to_owned();
    let by_time = lines(&wardenctl(&endpoint, ADMIN, &["audit", "export", "--since", &time]).await);
    assert_eq!(by_time.first().unwrap()["seq"], 3);
    let all = lines(&wardenctl(&endpoint, ADMIN, &["audit", "export"]).await);
    assert_eq!(all.len(), 4);

    // A follower gets a record written after it started.
    let mut follower = std::process::Command::new(env!("CARGO_BIN_EXE_wardenctl"))
        .args(["--endpoint", &endpoint, "audit", "export", "--since", "5", "--follow"])
        .env("WARDEN_TOKEN", ADMIN)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = follower.stdout.take().unwrap();
    let reader = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line).unwrap();
        line
    });
    wardenctl(&endpoint, HARNESS, &[&ALICE[..], &["fs.read", "/home/alice/project/5.rs"]].concat()).await;
    let line = tokio::time::timeout(std::time::Duration::from_secs(20), reader).await.unwrap().unwrap();
    let followed: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(followed["seq"], 5);
    assert_eq!(followed["request"]["resource"]["File"]["path"], "/home/alice/project/5.rs");
    let _ = follower.kill();
    let _ = follower.wait();
    server.stop().await.unwrap();

    // Offline, the same lines.
    let data_dir = data.path().to_str().unwrap();
    let offline = lines(&wardenctl("http://127.0.0.1:1", "", &["audit", "export", "--data", data_dir]).await);
    let online_all: Vec<serde_json::Value> = all.into_iter().chain([followed]).collect();
    assert_eq!(offline, online_all);
    let bad =
        wardenctl("http://127.0.0.1:1", "", &["audit", "export", "--data", data_dir, "--since", "yesterday"]).await;
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("neither a sequence number nor an RFC 3339 time"));
}

#[test]
fn version_names_the_release_and_the_commit() {
    warden_tests::version::assert_version(env!("CARGO_BIN_EXE_wardenctl"), "wardenctl");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_the_grpc_health_check_without_a_token() {
    let data = tempfile::tempdir().unwrap();
    let server = monitor(data.path()).await;
    let endpoint = format!("http://{}", server.addr());
    let serving = wardenctl(&endpoint, "", &["health"]).await;
    assert_eq!(serving.status.code(), Some(0), "{}", String::from_utf8_lossy(&serving.stderr));
    assert_eq!(stdout(&serving), "SERVING\n");
    let one = wardenctl(&endpoint, "", &["--json", "health", "--service", "warden.v1.Authority"]).await;
    let one: serde_json::Value = serde_json::from_str(&stdout(&one)).unwrap();
    assert_eq!(one, serde_json::json!({"service": "warden.v1.Authority", "status": "SERVING"}));
    let unknown = wardenctl(&endpoint, "", &["health", "--service", "warden.v1.Nothing"]).await;
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("NotFound"),
        "{}",
        String::from_utf8_lossy(&unknown.stderr)
    );
    server.stop().await.unwrap();
    let stopped = wardenctl(&endpoint, "", &["health"]).await;
    assert_eq!(stopped.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&stopped.stderr).contains("cannot reach the monitor"));
}

/// A shell's completion of `wardenctl WORDS…`, by the script `wardenctl
/// completions bash` printed, loaded in a real bash.
fn bash_completes(words: &[&str]) -> Vec<String> {
    let script = Command::new(env!("CARGO_BIN_EXE_wardenctl")).args(["completions", "bash"]).output().unwrap();
    assert!(script.status.success());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wardenctl.bash");
    std::fs::write(&path, &script.stdout).unwrap();
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        "source '{}'\nCOMP_WORDS=(wardenctl {})\nCOMP_CWORD={}\nCOMP_LINE=\"${{COMP_WORDS[*]}}\"\nCOMP_POINT=${{#COMP_LINE}}\n\
         _wardenctl wardenctl '{}' '{}'\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"",
        path.display(),
        quoted.join(" "),
        words.len(),
        words.last().unwrap(),
        words.get(words.len().wrapping_sub(2)).copied().unwrap_or("wardenctl"),
    );
    let output = Command::new("bash").args(["--norc", "--noprofile", "-c", &program]).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    stdout(&output).lines().map(|l| l.trim().to_owned()).filter(|l| !l.is_empty()).collect()
}

#[test]
fn bash_completes_subcommands_and_flags() {
    if Command::new("bash").arg("--version").output().is_err() {
        eprintln!("skipped: bash not found");
        return;
    }
    assert_eq!(bash_completes(&["appr"]), ["approvals", "approvers"]);
    assert_eq!(bash_completes(&["approve"]), ["approvers"]);
    let approvals = bash_completes(&["approvals", ""]);
    for expected in ["list", "show", "approve", "deny", "watch"] {
        assert!(approvals.iter().any(|c| c == expected), "{expected} not in {approvals:?}");
    }
    let export = bash_completes(&["audit", "export", "--f"]);
    assert!(export.iter().any(|c| c == "--follow"), "{export:?}");
    let shells = bash_completes(&["completions", ""]);
    for expected in ["bash", "zsh", "fish"] {
        assert!(shells.iter().any(|c| c == expected), "{expected} not in {shells:?}");
    }
}

/// zsh and fish read the scripts they are given without an error (and
/// define wardenctl's completion); skipped where the shell is missing,
/// unless `WARDEN_REQUIRE_NPM=1` (as in `.ci/run`, which installs them).
#[test]
fn zsh_and_fish_load_their_completions() {
    for (shell, check) in [
        ("zsh", "autoload -U compinit && compinit -u && source \"$1\" && whence -w _wardenctl"),
        ("fish", "source $argv[1]; and complete -c wardenctl | string match -q '*approvals*'"),
    ] {
        if Command::new(shell).arg("--version").output().is_err() {
            assert!(std::env::var_os("WARDEN_REQUIRE_NPM").is_none(), "{shell} is required (WARDEN_REQUIRE_NPM)");
            eprintln!("skipped: {shell} not found");
            continue;
        }
        let script = Command::new(env!("CARGO_BIN_EXE_wardenctl")).args(["completions", shell]).output().unwrap();
        assert!(script.status.success());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("wardenctl.{shell}"));
        std::fs::write(&path, &script.stdout).unwrap();
        let output = Command::new(shell)
            .args(if shell == "zsh" { vec!["-f", "-c", check, "zsh"] } else { vec!["--no-config", "-c", check] })
            .arg(&path)
            .env("HOME", dir.path())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{shell}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// Scripts that made the shell parser allocate without end until the
/// process died (a here-document with an empty tag on the script's last
/// line: `''`, `""`, or a carriage return or form feed, which a request
/// cannot carry but a script inside a script can, spelled `$'\r'`), or
/// take hours (expansions nested eight deep). Any harness could have sent
/// them. Decided offline (the same reading of commands as the monitor's)
/// under a 2 GB address-space limit and a minute, so that a regression
/// fails here instead of taking the machine's memory or the CI's time.
#[test]
fn scripts_that_made_the_parser_allocate_or_run_forever_are_decided() {
    if Command::new("bash").arg("--version").output().is_err() {
        eprintln!("skipped: bash not found");
        return;
    }
    let bundled = policies();
    let nested = format!("echo {}x{}", "${a[".repeat(8), "]}".repeat(8));
    let unbalanced = format!("echo {}x{}", "${a[".repeat(8), "}".repeat(8));
    let scripts = [
        "bash -c $'cat <<\\r '",
        "bash -c $'cat <<\\f '",
        "cat <<'' ",
        "cat <<\"\" ",
        "cat <<- '' ",
        "x <<'' <<'' ",
        "echo $(cat <<'' ",
        "echo \"$(cat <<'' ",
        "cat <<'' \\\n",
        "cat <<'' \\",
        &nested,
        &unbalanced,
    ];
    for script in scripts {
        let output = Command::new("bash")
            .args(["-c", "ulimit -v 2000000; exec timeout 60 \"$@\"", "bash", env!("CARGO_BIN_EXE_wardenctl")])
            .args(&ALICE[..])
            .args(["--explain", "--policies", bundled.to_str().unwrap(), "exec", "--", "bash", "-c", script])
            .output()
            .unwrap();
        let text = stdout(&output);
        assert!(
            matches!(output.status.code(), Some(0 | 2 | 3))
                && ["ALLOW", "DENY", "PENDING"].iter().any(|o| text.starts_with(o)),
            "{script:?}: {:?}\n{text}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// TLS files for a plaintext endpoint: refused, naming the flag, and nothing
/// reaches the endpoint (the token would have crossed in the clear).
#[test]
fn tls_files_for_a_plaintext_endpoint_are_refused_and_nothing_is_sent() {
    let (listener, endpoint) = warden_tests::net::Untouched::bind().unwrap();
    let data = tempfile::tempdir().unwrap();
    let pem = data.path().join("x.pem");
    std::fs::write(&pem, "never read").unwrap();
    let runs: [(&[&str], &str); 2] =
        [(&["--ca-cert"], "--ca-cert"), (&["--client-key", "x", "--client-cert"], "--client-cert")];
    for (flags, named) in runs {
        let output = Command::new(env!("CARGO_BIN_EXE_wardenctl"))
            .args(["--endpoint", &endpoint, "--token", "wdn_x"])
            .args(flags)
            .arg(&pem)
            .args(["approvals", "list"])
            .env_remove("WARDEN_CA_CERT")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{stderr}");
        assert!(stderr.contains(named) && stderr.contains("https://"), "{stderr}");
    }
    listener.assert_untouched();
}

/// A monitor whose certificate comes from a CA in the system's store (here
/// the store is `SSL_CERT_FILE`, which the system's loader reads) needs no
/// `--ca-cert`; when the system trusts other CAs only, it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_a_ca_the_system_trusts_needs_no_flag() {
    use rcgen::{CertificateParams, KeyPair};
    let (ca, other) = (new_ca(), new_ca());
    let server_key = KeyPair::generate().unwrap();
    let server_cert =
        CertificateParams::new(vec!["localhost".to_owned()]).unwrap().signed_by(&server_key, &ca).unwrap();
    let data = tempfile::tempdir().unwrap();
    let store = data.path().join("system-ca.pem");
    std::fs::write(&store, ca.pem()).unwrap();
    let other_store = data.path().join("other-ca.pem");
    std::fs::write(&other_store, other.pem()).unwrap();
    let config = ServerConfig {
        tls: Some(warden_monitor::server::TlsPem {
            cert: server_cert.pem(),
            key: server_key.serialize_pem(),
            client_ca: None,
        }),
        ..ServerConfig::new(policies(), data.path().join("data"), vec![credential("h", Role::Harness, HARNESS, &["*"])])
    };
    let server = start(config, tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()).await.unwrap();
    let endpoint = format!("https://localhost:{}", server.addr().port());
    let health = |system_store: PathBuf| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_wardenctl"));
        command
            .args(["--endpoint", &endpoint, "health"])
            .env_remove("WARDEN_CA_CERT")
            .env_remove("SSL_CERT_DIR")
            .env("SSL_CERT_FILE", system_store);
        tokio::task::spawn_blocking(move || command.output().unwrap())
    };
    let trusted = health(store).await.unwrap();
    assert_eq!(trusted.status.code(), Some(0), "{}", String::from_utf8_lossy(&trusted.stderr));
    assert_eq!(stdout(&trusted), "SERVING\n");
    let untrusted = health(other_store).await.unwrap();
    assert_eq!(untrusted.status.code(), Some(1));
    let refused = String::from_utf8_lossy(&untrusted.stderr);
    assert!(refused.contains("certificate"), "{refused}");
    server.stop().await.unwrap();
}

/// `wardenctl authorize --request-id` asked again after a person approved
/// the request: the first ask after the approval is its ALLOW, every later
/// one is refused (exit 2) naming the approval's use, and each is in the
/// audit log as a replay of the first decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_asks_of_an_approved_request_id_are_refused_and_audited() {
    let data = tempfile::tempdir().unwrap();
    let server = monitor(data.path()).await;
    let endpoint = format!("http://{}", server.addr());
    let ask = [&["--json"], &ALICE[..], &["--request-id", "clean-1", "--cwd", "/home/alice/project"]].concat();
    let ask = [&ask[..], &["exec", "--", "rm", "-r", "build"]].concat();
    let json = |output: &Output| -> serde_json::Value { serde_json::from_str(&stdout(output)).unwrap() };

    let pending = wardenctl(&endpoint, HARNESS, &ask).await;
    assert_eq!(pending.status.code(), Some(3), "{}", stdout(&pending));
    let first = json(&pending);
    let id = first["approval_id"].as_str().unwrap().to_owned();
    let approved = wardenctl(&endpoint, APPROVER, &["approvals", "approve", &id]).await;
    assert!(approved.status.success(), "{}", String::from_utf8_lossy(&approved.stderr));

    let allowed = wardenctl(&endpoint, HARNESS, &ask).await;
    assert_eq!(allowed.status.code(), Some(0), "{}", stdout(&allowed));
    let used_seq = json(&allowed)["audit_seq"].as_u64().unwrap();
    let mut refused_seqs = vec![];
    for _ in 0..2 {
        let refused = wardenctl(&endpoint, HARNESS, &ask).await;
        assert_eq!(refused.status.code(), Some(2), "{}", stdout(&refused));
        let refused = json(&refused);
        let reason = refused["reasons"][0].as_str().unwrap();
        assert!(reason.starts_with(&format!("approval `{id}` was used")), "{reason}");
        assert!(reason.contains(&format!("audit record #{used_seq}")), "{reason}");
        refused_seqs.push(refused["audit_seq"].as_u64().unwrap());
    }

    let tail = wardenctl(&endpoint, ADMIN, &["--json", "audit", "tail", "--all"]).await;
    let records: Vec<serde_json::Value> = stdout(&tail).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let replays: Vec<_> = records.iter().filter(|r| r["kind"] == "replay").collect();
    let seqs: Vec<u64> = replays.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [&[used_seq][..], &refused_seqs].concat());
    let outcomes: Vec<&str> = replays.iter().map(|r| r["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["ALLOW", "DENY", "DENY"]);
    let first_seq = first["audit_seq"].as_u64().unwrap();
    for replay in &replays {
        assert_eq!(replay["request_id"], "clean-1");
        assert_eq!(replay["caller"], "h");
        let named = format!("repeats audit record #{first_seq}: request id `clean-1` asked again by `h`");
        assert_eq!(replay["reasons"][0], named.as_str());
    }
    // The human-readable tail shows them too.
    let text = stdout(&wardenctl(&endpoint, ADMIN, &["audit", "tail"]).await);
    assert!(text.contains("replay"), "{text}");
    server.stop().await.unwrap();
}

/// A wardenctl that runs until killed, its stdout's lines coming on a channel.
struct Running {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Running {
    fn start(endpoint: &str, token: &str, args: &[&str]) -> Self {
        use std::io::BufRead as _;
        let mut child = Command::new(env!("CARGO_BIN_EXE_wardenctl"))
            .args(["--endpoint", endpoint])
            .args(args)
            .env("WARDEN_TOKEN", token)
            .env_remove("WARDEN_TOKEN_FILE")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines }
    }

    /// The JSON lines printed so far and up to `count`, waiting for them.
    async fn json_lines(&self, count: usize, seen: &mut Vec<serde_json::Value>) {
        warden_tests::wait::eventually(&format!("{count} lines from wardenctl"), || {
            seen.extend(self.lines.try_iter().map(|line| serde_json::from_str::<serde_json::Value>(&line).unwrap()));
            std::future::ready((seen.len() >= count).then_some(()))
        })
        .await;
    }

    /// Kills it; its stderr.
    fn stop(mut self) -> String {
        use std::io::Read as _;
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut stderr = String::new();
        self.child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
        stderr
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_endpoints_go_on_at_a_live_replica() {
    let data = tempfile::tempdir().unwrap();
    let server = monitor(data.path()).await;
    let live = format!("http://{}", server.addr());
    let dead = warden_tests::net::dead_endpoint().unwrap();
    let both = format!("{dead}, {live}");

    let health = wardenctl(&both, "", &["health"]).await;
    assert_eq!(health.status.code(), Some(0), "{}", String::from_utf8_lossy(&health.stderr));
    assert_eq!(stdout(&health), "SERVING\n");
    let asked =
        wardenctl(&both, HARNESS, &[&ALICE[..], &["fs.read", "/home/alice/project/src/main.rs"]].concat()).await;
    assert_eq!(asked.status.code(), Some(0), "{}", String::from_utf8_lossy(&asked.stderr));
    let listed = wardenctl(&both, APPROVER, &["--json", "approvals", "list"]).await;
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));

    // An empty entry is refused before anything is asked.
    let empty = wardenctl(&format!("{live},,{dead}"), "", &["health"]).await;
    assert_eq!(empty.status.code(), Some(1));
    let said = String::from_utf8_lossy(&empty.stderr);
    assert!(said.contains("entry 2 of 3 is empty"), "{said}");
    // Every replica down: the last one's error.
    let down = wardenctl(&format!("{dead},{}", warden_tests::net::dead_endpoint().unwrap()), "", &["health"]).await;
    assert_eq!(down.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&down.stderr).contains("cannot reach the monitor"));
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_audit_log_goes_on_at_the_next_replica_from_the_next_record() {
    let data = tempfile::tempdir().unwrap();
    let server = monitor(data.path()).await;
    let live = format!("http://{}", server.addr());
    // Two endpoints of one monitor, as two replicas sharing a store are;
    // the first crashes while the log is followed.
    let relay = warden_tests::net::Relay::start(server.addr()).await.unwrap();
    let read = |n: usize| {
        let live = live.clone();
        async move {
            let path = format!("/home/alice/project/{n}.rs");
            let asked = wardenctl(&live, HARNESS, &[&ALICE[..], &["fs.read", &path]].concat()).await;
            assert!(asked.status.success(), "{}", String::from_utf8_lossy(&asked.stderr));
        }
    };
    for n in 1..=3 {
        read(n).await;
    }
    let endpoints = format!("{},{live}", relay.endpoint());
    let follower = Running::start(&endpoints, ADMIN, &["--json", "audit", "tail", "--all", "--follow"]);
    let mut seen = Vec::new();
    follower.json_lines(3, &mut seen).await;

    relay.cut();
    for n in 4..=5 {
        read(n).await;
    }
    follower.json_lines(5, &mut seen).await;
    let stderr = follower.stop();
    let seqs: Vec<u64> = seen.iter().map(|record| record["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5], "no record lost or repeated");
    assert!(stderr.contains("going on with the next replica"), "{stderr}");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_goes_on_at_the_next_replica_without_showing_an_approval_twice() {
    let data = tempfile::tempdir().unwrap();
    let server = monitor(data.path()).await;
    let live = format!("http://{}", server.addr());
    let relay = warden_tests::net::Relay::start(server.addr()).await.unwrap();
    let ask = |session: &'static str| {
        let live = live.clone();
        async move {
            let args = ["--json", "authorize", "--user", "alice", "--agent", "claude-code", "--session", session];
            let argv = [&args[..], &["exec", "--", "git", "push", "origin", "main"]].concat();
            let asked = wardenctl(&live, HARNESS, &argv).await;
            assert_eq!(asked.status.code(), Some(3), "{}", String::from_utf8_lossy(&asked.stderr));
            let decision: serde_json::Value = serde_json::from_str(&stdout(&asked)).unwrap();
            decision["approval_id"].as_str().unwrap().to_owned()
        }
    };
    let first = ask("watch-1").await;
    let endpoints = format!("{},{live}", relay.endpoint());
    let watcher = Running::start(&endpoints, APPROVER, &["--json", "approvals", "watch"]);
    let mut seen = Vec::new();
    watcher.json_lines(1, &mut seen).await;

    relay.cut();
    // Denied while the watch moves to the next replica, or after: shown
    // ended once either way.
    assert!(wardenctl(&live, APPROVER, &["approvals", "deny", &first]).await.status.success());
    let second = ask("watch-2").await;
    watcher.json_lines(3, &mut seen).await;
    let stderr = watcher.stop();
    let events: Vec<(&str, &str)> =
        seen.iter().map(|e| (e["event"].as_str().unwrap(), e["approval"]["approval_id"].as_str().unwrap())).collect();
    assert_eq!(events.len(), 3, "{events:?} {stderr}");
    assert_eq!(events[..2], [("current", first.as_str()), ("resolved", first.as_str())], "{stderr}");
    // New, or current when the watch came back after it was asked.
    assert!(matches!(events[2], ("new" | "current", id) if id == second), "{events:?}");
    assert!(stderr.contains("going on with the next replica"), "{stderr}");
    server.stop().await.unwrap();
}
