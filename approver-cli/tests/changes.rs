//! What a policy change would do to real decisions: `wardenctl policy
//! replay` decides a monitor's recorded decisions again under a candidate
//! folder (online and from the stopped store), and `[policy] shadow_dir`
//! decides every request under a second folder beside the live one, which
//! `wardenctl policy shadow` and the metrics report.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use warden_monitor::auth::{CredentialConfig, Role};
use warden_monitor::server::{RunningServer, ServerConfig, start};

const HARNESS: &str = "wdn_changes_test_harness";
const ADMIN: &str = "wdn_changes_test_admin";
const APPROVER: &str = "wdn_changes_test_approver";

const ENTITIES: &str = r#"[
  {"uid": {"type": "Group", "id": "ops"}, "attrs": {}, "parents": []},
  {"uid": {"type": "User", "id": "alice"}, "attrs": {}, "parents": [{"type": "Group", "id": "ops"}]},
  {"uid": {"type": "User", "id": "bob"}, "attrs": {}, "parents": [{"type": "Group", "id": "ops"}]}
]"#;

/// Reading and writing under /srv; the web labels a session, which may
/// then write nothing; logs wait for a person.
const OLD: &str = r#"
@id("read-srv") permit (principal, action == Action::"fs.read", resource in Dir::"/srv");
@id("write-srv") permit (principal, action == Action::"fs.write", resource in Dir::"/srv");
@id("web") @label("untrusted") permit (principal, action == Action::"http.request", resource);
@id("tainted-writes-nothing") @reason("a session that read the web writes nothing")
forbid (principal, action == Action::"fs.write", resource) when { principal.labels.contains("untrusted") };
@id("logs-need-a-person") @reason("logs need a person")
forbid (principal, action == Action::"fs.read", resource in Dir::"/srv/logs") unless { context.approved };
"#;

/// The hand-made change: /srv/b closes.
const CLOSE_B: &str = r#"
@id("close-b") @reason("b is closed") forbid (principal, action == Action::"fs.read", resource in Dir::"/srv/b");
"#;

fn folder(root: &Path, name: &str, policies: &[&str]) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/schema.cedarschema");
    std::fs::copy(bundled, dir.join("schema.cedarschema")).unwrap();
    std::fs::write(dir.join("entities.json"), ENTITIES).unwrap();
    std::fs::write(dir.join("policies.cedar"), policies.concat()).unwrap();
    dir
}

async fn monitor(policies: &Path, data: &Path, shadow: Option<&Path>) -> RunningServer {
    let mut config = ServerConfig::new(
        policies.to_owned(),
        data.to_owned(),
        vec![
            CredentialConfig::for_token("h", Role::Harness, HARNESS, &["*"]),
            CredentialConfig::for_token("a", Role::Admin, ADMIN, &[]),
            CredentialConfig {
                groups: vec!["*".into()],
                ..CredentialConfig::for_token("o", Role::Approver, APPROVER, &[])
            },
        ],
    );
    config.monitor.shadow_dir = shadow.map(Path::to_owned);
    // One approval waiting per session at most: a second is denied.
    config.monitor.max_pending_per_session = 1;
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

/// One decision through `wardenctl authorize --json`.
async fn ask(endpoint: &str, user: &str, session: &str, action: &[&str]) -> serde_json::Value {
    let args =
        [&["--json", "authorize", "--user", user, "--agent", "claude-code", "--session", session][..], action].concat();
    let output = wardenctl(endpoint, HARNESS, &args).await;
    serde_json::from_str(&stdout(&output))
        .unwrap_or_else(|e| panic!("{e}: {} {}", stdout(&output), String::from_utf8_lossy(&output.stderr)))
}

fn outcome(decision: &serde_json::Value) -> &str {
    decision["outcome"].as_str().unwrap()
}

/// Decisions whose outcome depends on facts beyond the request (labels, an
/// admin's grant, an approver's window, the cap on waiting approvals, a
/// lock), and three reads of
/// /srv/b that the change closes. Returns the audit seqs of those three.
async fn record_decisions(endpoint: &str) -> Vec<u64> {
    for n in 1..=4 {
        assert_eq!(outcome(&ask(endpoint, "alice", "s1", &["fs.read", &format!("/srv/a/{n}")]).await), "ALLOW");
    }
    let mut closed = vec![];
    for n in 1..=3 {
        let decision = ask(endpoint, "alice", "s1", &["fs.read", &format!("/srv/b/{n}")]).await;
        assert_eq!(outcome(&decision), "ALLOW");
        closed.push(decision["audit_seq"].as_u64().unwrap());
    }
    // The web labels s2, which may then write nothing.
    assert_eq!(outcome(&ask(endpoint, "alice", "s2", &["http.request", "GET", "https://example.com/"]).await), "ALLOW");
    assert_eq!(outcome(&ask(endpoint, "alice", "s2", &["fs.write", "/srv/a/out"]).await), "DENY");
    assert_eq!(outcome(&ask(endpoint, "alice", "s1", &["fs.write", "/srv/a/out"]).await), "ALLOW");
    // An admin's grant lets bob read logs.
    let granted = wardenctl(
        endpoint,
        ADMIN,
        &[
            "grants",
            "create",
            "--user",
            "bob",
            "--action",
            "fs.read",
            "--resource",
            "dir:/srv/logs",
            "--for",
            "1h",
            "--reason",
            "on call",
        ],
    )
    .await;
    assert!(granted.status.success(), "{}", String::from_utf8_lossy(&granted.stderr));
    assert_eq!(outcome(&ask(endpoint, "bob", "s4", &["fs.read", "/srv/logs/app.log"]).await), "ALLOW");
    // An approver's window lets alice read them after one approval.
    let pending = ask(endpoint, "alice", "s1", &["fs.read", "/srv/logs/a.log"]).await;
    assert_eq!(outcome(&pending), "PENDING");
    let id = pending["approval_id"].as_str().unwrap();
    let approved =
        wardenctl(endpoint, APPROVER, &["approvals", "approve", id, "--for", "1h", "--scope", "parent"]).await;
    assert!(approved.status.success(), "{}", String::from_utf8_lossy(&approved.stderr));
    assert_eq!(outcome(&ask(endpoint, "alice", "s1", &["fs.read", "/srv/logs/b.log"]).await), "ALLOW");
    // A session with an approval waiting gets no second: denied.
    assert_eq!(outcome(&ask(endpoint, "alice", "s5", &["fs.read", "/srv/logs/c.log"]).await), "PENDING");
    let capped = ask(endpoint, "alice", "s5", &["fs.read", "/srv/logs/d.log"]).await;
    assert_eq!(outcome(&capped), "DENY", "{capped}");
    // A locked session acts no more.
    assert!(
        wardenctl(endpoint, ADMIN, &["sessions", "lock", "s3", "--reason", "investigating"]).await.status.success()
    );
    assert_eq!(outcome(&ask(endpoint, "alice", "s3", &["fs.read", "/srv/a/1"]).await), "DENY");
    closed
}

fn report(output: &Output) -> serde_json::Value {
    serde_json::from_str(&stdout(output))
        .unwrap_or_else(|e| panic!("{e}: {} {}", stdout(output), String::from_utf8_lossy(&output.stderr)))
}

fn seqs(group: &serde_json::Value) -> Vec<u64> {
    group["examples"].as_array().unwrap().iter().map(|e| e["seq"].as_u64().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_finds_exactly_the_decisions_a_change_flips_online_and_from_the_stopped_store() {
    let root = tempfile::tempdir().unwrap();
    let old = folder(root.path(), "old", &[OLD]);
    let new = folder(root.path(), "new", &[OLD, CLOSE_B]);
    let same = folder(root.path(), "same", &[OLD]);
    let data = root.path().join("data");
    let server = monitor(&old, &data, None).await;
    let endpoint = format!("http://{}", server.addr());
    let closed = record_decisions(&endpoint).await;

    let online =
        wardenctl(&endpoint, ADMIN, &["--json", "policy", "replay", "--policies", new.to_str().unwrap()]).await;
    assert_eq!(online.status.code(), Some(3), "{}", String::from_utf8_lossy(&online.stderr));
    let found = report(&online);
    // Every decision was read; only the three reads of /srv/b change, and
    // nothing that depended on a label, a grant, a window, the cap or a
    // lock.
    assert_eq!(found["decisions"], 16, "{found:#}");
    assert_eq!(found["changed"], 3, "{found:#}");
    let groups = found["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{found:#}");
    let group = &groups[0];
    assert_eq!((group["from"].as_str(), group["to"].as_str()), (Some("ALLOW"), Some("DENY")));
    assert_eq!(group["by"], serde_json::json!(["close-b"]));
    assert_eq!(group["was"], serde_json::json!(["read-srv"]));
    assert_eq!(group["count"], 3);
    assert_eq!(seqs(group), closed);
    assert_eq!(group["examples"][0]["reasons"], serde_json::json!(["b is closed"]));
    assert_eq!(found["notes"], serde_json::json!([]), "{found:#}");

    // The text names the change, the policies and each decision.
    let text = wardenctl(&endpoint, ADMIN, &["policy", "replay", "--policies", new.to_str().unwrap()]).await;
    let text = stdout(&text);
    assert!(text.contains("3 would change"), "{text}");
    assert!(text.contains("ALLOW -> DENY  3 decisions  now by close-b  (was by read-srv)"), "{text}");
    assert!(text.contains(&format!("#{} ", closed[0])) && text.contains("fs.read File::\"/srv/b/1\""), "{text}");

    // The same folder changes nothing; a window before the reads of /srv/b
    // holds none of them.
    let unchanged =
        wardenctl(&endpoint, ADMIN, &["--json", "policy", "replay", "--policies", same.to_str().unwrap()]).await;
    assert_eq!(unchanged.status.code(), Some(0), "{}", stdout(&unchanged));
    assert_eq!(report(&unchanged)["changed"], 0);
    let before = (closed[0] - 1).to_string();
    let window = wardenctl(
        &endpoint,
        ADMIN,
        &["--json", "policy", "replay", "--policies", new.to_str().unwrap(), "--until", &before],
    )
    .await;
    assert_eq!(window.status.code(), Some(0), "{}", stdout(&window));
    assert_eq!(report(&window)["decisions"], 4);
    let last = closed[2].to_string();
    let window = wardenctl(
        &endpoint,
        ADMIN,
        &["--json", "policy", "replay", "--policies", new.to_str().unwrap(), "--since", &last, "--until", &last],
    )
    .await;
    assert_eq!(report(&window)["changed"], 1);
    server.stop().await.unwrap();

    // The stopped store gives the same answer.
    let offline = wardenctl(
        "http://127.0.0.1:1",
        "",
        &["--json", "policy", "replay", "--policies", new.to_str().unwrap(), "--data", data.to_str().unwrap()],
    )
    .await;
    assert_eq!(offline.status.code(), Some(3), "{}", String::from_utf8_lossy(&offline.stderr));
    let mut offline = report(&offline);
    let mut found = found;
    offline["millis"] = 0.into();
    found["millis"] = 0.into();
    assert_eq!(offline, found);

    // A folder that does not load is an error naming it.
    std::fs::write(new.join("policies.cedar"), "permit (").unwrap();
    let broken = wardenctl(
        "http://127.0.0.1:1",
        "",
        &["policy", "replay", "--policies", new.to_str().unwrap(), "--data", data.to_str().unwrap()],
    )
    .await;
    assert_eq!(broken.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&broken.stderr).contains("policies.cedar"),
        "{}",
        String::from_utf8_lossy(&broken.stderr)
    );
}

async fn metrics(server: &RunningServer) -> String {
    warden_tests::monitor::metrics(server).await.unwrap()
}

fn counter(metrics: &str, name: &str) -> u64 {
    metrics.lines().find(|l| l.starts_with(name)).and_then(|l| l.rsplit(' ').next()).map_or(0, |n| n.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_decisions_are_recorded_and_counted_while_answers_stay_the_live_sets() {
    let root = tempfile::tempdir().unwrap();
    let live = folder(root.path(), "live", &[OLD]);
    let shadow = folder(root.path(), "shadow", &[OLD, CLOSE_B]);
    let data = root.path().join("data");
    let server = monitor(&live, &data, Some(&shadow)).await;
    let endpoint = format!("http://{}", server.addr());
    // The live set answers: /srv/b is read.
    let closed = record_decisions(&endpoint).await;

    let status = wardenctl(&endpoint, ADMIN, &["--json", "policy", "status"]).await;
    let status = report(&status);
    assert_eq!(status["shadow"]["dir"], shadow.display().to_string());
    assert!(!status["shadow"]["policy_version"].as_str().unwrap().is_empty(), "{status:#}");

    let shown = wardenctl(&endpoint, ADMIN, &["--json", "policy", "shadow"]).await;
    assert_eq!(shown.status.code(), Some(3), "{}", String::from_utf8_lossy(&shown.stderr));
    let shown = report(&shown);
    assert_eq!(shown["changed"], 3, "{shown:#}");
    let group = &shown["groups"][0];
    assert_eq!((group["from"].as_str(), group["to"].as_str()), (Some("ALLOW"), Some("DENY")));
    assert_eq!(group["by"], serde_json::json!(["close-b"]));
    assert_eq!(seqs(group), closed);

    // The record holds the shadow's answer beside the live one.
    let exported = wardenctl(
        &endpoint,
        ADMIN,
        &["audit", "export", "--since", &closed[0].to_string(), "--until", &closed[0].to_string()],
    )
    .await;
    let record: serde_json::Value = serde_json::from_str(stdout(&exported).trim()).unwrap();
    assert_eq!(record["outcome"], "ALLOW");
    assert_eq!(record["request"]["shadow"]["outcome"], "DENY", "{record:#}");
    assert_eq!(record["request"]["shadow"]["policy_ids"], serde_json::json!(["close-b"]));

    // Counted by (live, shadow): the three reads differ, the rest agree.
    let text = metrics(&server).await;
    assert_eq!(counter(&text, r#"warden_shadow_decisions_total{live="ALLOW",shadow="DENY"}"#), 3, "{text}");
    assert_eq!(counter(&text, r#"warden_shadow_decisions_total{live="ALLOW",shadow="ALLOW"}"#), 8, "{text}");
    // The capped request is counted as the policies decided it, PENDING.
    assert_eq!(counter(&text, r#"warden_shadow_decisions_total{live="PENDING",shadow="PENDING"}"#), 3, "{text}");

    // A shadow folder that breaks keeps the last good shadow set and says so;
    // fixed, the new one decides (the watcher loads it).
    let version = status["shadow"]["policy_version"].as_str().unwrap().to_owned();
    std::fs::write(shadow.join("policies.cedar"), "permit (").unwrap();
    let reload = wardenctl(&endpoint, ADMIN, &["--json", "policy", "reload"]).await;
    assert!(reload.status.success(), "{}", String::from_utf8_lossy(&reload.stderr));
    let status = report(&wardenctl(&endpoint, ADMIN, &["--json", "policy", "status"]).await);
    assert_eq!(status["shadow"]["policy_version"], version.as_str());
    assert!(status["shadow"]["error"].as_str().unwrap().contains("policies.cedar"), "{status:#}");
    let text = stdout(&wardenctl(&endpoint, ADMIN, &["policy", "status"]).await);
    assert!(text.contains("LAST SHADOW LOAD FAILED"), "{text}");
    assert_eq!(outcome(&ask(&endpoint, "alice", "s1", &["fs.read", "/srv/b/9"]).await), "ALLOW");
    std::fs::write(shadow.join("policies.cedar"), OLD).unwrap();
    warden_tests::wait::eventually("the fixed shadow folder loads", || {
        let (endpoint, version) = (endpoint.clone(), version.clone());
        async move {
            let status = report(&wardenctl(&endpoint, ADMIN, &["--json", "policy", "status"]).await);
            (status["shadow"]["error"] == "" && status["shadow"]["policy_version"] != version.as_str()).then_some(())
        }
    })
    .await;
    // The shadow now agrees with the live set on /srv/b.
    let before = counter(&metrics(&server).await, r#"warden_shadow_decisions_total{live="ALLOW",shadow="DENY"}"#);
    assert_eq!(outcome(&ask(&endpoint, "alice", "s1", &["fs.read", "/srv/b/10"]).await), "ALLOW");
    let after = counter(&metrics(&server).await, r#"warden_shadow_decisions_total{live="ALLOW",shadow="DENY"}"#);
    assert_eq!(after, before);
    server.stop().await.unwrap();

    // From the stopped store, the same differences.
    let offline =
        wardenctl("http://127.0.0.1:1", "", &["--json", "policy", "shadow", "--data", data.to_str().unwrap()]).await;
    let offline = report(&offline);
    assert_eq!(offline["changed"], 4, "{offline:#}");
}
