//! Invariants of a policy folder (`invariants/*.cedar`), proved with the
//! real cvc5 solver: by `wardenctl policy check`, with a request that
//! breaks one, and by a running monitor on every load, which refuses a
//! change that breaks one and keeps deciding with the last good set.

use std::path::{Path, PathBuf};
use std::process::Command;

use warden_monitor::auth::{CredentialConfig, Role};
use warden_monitor::server::{ServerConfig, start};

use super::{solver_or_skip, wardenctl};

const HARNESS: &str = "wdn_inv_test_harness";
const ADMIN: &str = "wdn_inv_test_admin";

const ENTITIES: &str = r#"[
  {"uid": {"type": "Group", "id": "ops"}, "attrs": {}, "parents": []},
  {"uid": {"type": "User", "id": "alice"}, "attrs": {}, "parents": [{"type": "Group", "id": "ops"}]}
]"#;

/// Reading /srv/keys never happens without a person; deleting never at all.
const INVARIANTS: &str = r#"
@id("keys-need-a-person") @reason("no key under /srv/keys is read without a person")
@invariant("needs-a-person")
forbid (principal, action == Action::"fs.read", resource in Dir::"/srv/keys");

@id("no-deletes") @reason("nothing is deleted, whoever approves")
@invariant("denied")
forbid (principal, action == Action::"fs.delete", resource);
"#;

const GOOD: &str = r#"
@id("read-srv") permit (principal, action == Action::"fs.read", resource in Dir::"/srv");
@id("keys-need-approval") @reason("keys need a person")
forbid (principal, action == Action::"fs.read", resource in Dir::"/srv/keys") unless { context.approved };
@id("never-delete") @reason("no deletes") forbid (principal, action == Action::"fs.delete", resource);
"#;

/// The same, with the approval on keys dropped: reading a key is ALLOW.
const BREAKS_KEYS: &str = r#"
@id("read-srv") permit (principal, action == Action::"fs.read", resource in Dir::"/srv");
@id("never-delete") @reason("no deletes") forbid (principal, action == Action::"fs.delete", resource);
"#;

fn folder(root: &Path, policies: &str) -> PathBuf {
    let dir = root.join("policies");
    std::fs::create_dir_all(dir.join("invariants")).unwrap();
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/schema.cedarschema");
    std::fs::copy(bundled, dir.join("schema.cedarschema")).unwrap();
    std::fs::write(dir.join("entities.json"), ENTITIES).unwrap();
    std::fs::write(dir.join("invariants/promises.cedar"), INVARIANTS).unwrap();
    std::fs::write(dir.join("policies.cedar"), policies).unwrap();
    dir
}

#[test]
fn policy_check_proves_invariants_and_shows_a_request_that_breaks_one() {
    if !solver_or_skip() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let dir = folder(root.path(), GOOD);
    let good = wardenctl(&["policy", "check", dir.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&good.stdout);
    assert_eq!(good.status.code(), Some(0), "{text}");
    assert!(text.contains("invariant `keys-need-a-person` (needs-a-person): holds"), "{text}");
    assert!(text.contains("invariant `no-deletes` (denied): holds"), "{text}");

    std::fs::write(dir.join("policies.cedar"), BREAKS_KEYS).unwrap();
    let broken = wardenctl(&["--json", "policy", "check", dir.to_str().unwrap()]);
    assert_eq!(broken.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&broken.stdout).unwrap();
    let proofs = report["invariants"].as_array().unwrap();
    let keys = proofs.iter().find(|p| p["id"] == "keys-need-a-person").unwrap();
    assert_eq!(keys["proof"]["state"], "broken", "{keys:#}");
    assert_eq!(keys["proof"]["decided"]["outcome"], "ALLOW");
    let path = keys["proof"]["example"]["attributes"]["path"].as_str().unwrap();
    assert!(path.starts_with("\"/srv/keys"), "{path}");
    // The request it shows is ALLOW when run through Warden's own code.
    let run = keys["proof"]["run"].as_str().unwrap();
    let words: Vec<String> = run.split(' ').map(|w| w.trim_matches('\'').to_owned()).collect();
    assert_eq!(words[0], "wardenctl");
    let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
    assert_eq!(wardenctl(&args).status.code(), Some(0), "{run}");
    let deletes = proofs.iter().find(|p| p["id"] == "no-deletes").unwrap();
    assert_eq!(deletes["proof"]["state"], "holds", "{deletes:#}");

    // An invariant that is not a forbid, or of an unknown kind, does not load.
    std::fs::write(
        dir.join("invariants/bad.cedar"),
        r#"@id("odd") @invariant("sometimes") forbid (principal, action, resource);"#,
    )
    .unwrap();
    let bad = wardenctl(&["policy", "check", dir.to_str().unwrap()]);
    assert_eq!(bad.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("invariants/bad.cedar") && stderr.contains("@invariant(\"sometimes\")"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_breaks_an_invariant_is_refused_and_the_last_good_set_keeps_deciding() {
    if !solver_or_skip() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let dir = folder(root.path(), GOOD);
    let data = root.path().join("data");
    let config = ServerConfig::new(
        dir.clone(),
        data,
        vec![
            CredentialConfig::for_token("h", Role::Harness, HARNESS, &["*"]),
            CredentialConfig::for_token("a", Role::Admin, ADMIN, &[]),
        ],
    );
    let server = start(config, tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()).await.unwrap();
    let endpoint = format!("http://{}", server.addr());
    let ask = |token: &'static str, args: Vec<String>| {
        let endpoint = endpoint.clone();
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_wardenctl"))
                .args(["--endpoint", &endpoint])
                .env("WARDEN_TOKEN", token)
                .env_remove("WARDEN_TOKEN_FILE")
                .args(args)
                .output()
                .unwrap()
        })
    };
    let read_key = || {
        ["authorize", "--user", "alice", "--agent", "a", "--session", "s1", "fs.read", "/srv/keys/k1"]
            .map(str::to_owned)
            .to_vec()
    };
    let before = ask(HARNESS, read_key()).await.unwrap();
    assert_eq!(before.status.code(), Some(3), "PENDING: {}", String::from_utf8_lossy(&before.stdout));

    std::fs::write(dir.join("policies.cedar"), BREAKS_KEYS).unwrap();
    let reload = ask(ADMIN, vec!["policy".into(), "reload".into()]).await.unwrap();
    let text = String::from_utf8_lossy(&reload.stdout).into_owned();
    assert!(text.contains("the last good policies keep serving"), "{text}");
    let status = ask(ADMIN, vec!["policy".into(), "status".into()]).await.unwrap();
    let text = String::from_utf8_lossy(&status.stdout).into_owned();
    assert_eq!(status.status.code(), Some(1), "{text}");
    assert!(text.contains("LAST RELOAD FAILED"), "{text}");
    assert!(text.contains("invariant `keys-need-a-person` (needs-a-person): BROKEN"), "{text}");
    // Still the old set: a key read waits for a person.
    let after = ask(HARNESS, read_key()).await.unwrap();
    assert_eq!(after.status.code(), Some(3), "still PENDING: {}", String::from_utf8_lossy(&after.stdout));
    // The refusal is in the audit log.
    let tail = ask(ADMIN, vec!["audit".into(), "tail".into(), "--all".into()]).await.unwrap();
    let text = String::from_utf8_lossy(&tail.stdout).into_owned();
    assert!(text.contains("policy.reload-failed"), "{text}");
    // And counted.
    let metrics = warden_tests::monitor::metrics(&server).await.unwrap();
    assert!(metrics.contains("warden_policy_reloads_total{result=\"invariant-broken\"} 1"), "{metrics}");

    // Put right, it loads.
    std::fs::write(dir.join("policies.cedar"), GOOD).unwrap();
    let reload = ask(ADMIN, vec!["policy".into(), "reload".into()]).await.unwrap();
    assert!(String::from_utf8_lossy(&reload.stdout).contains("reloaded"));
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monitor_does_not_start_on_a_folder_that_breaks_its_invariants() {
    if !solver_or_skip() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let dir = folder(root.path(), BREAKS_KEYS);
    let config = ServerConfig::new(
        dir,
        root.path().join("data"),
        vec![CredentialConfig::for_token("a", Role::Admin, ADMIN, &[])],
    );
    let error = match start(config, tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()).await {
        Ok(_) => panic!("started on a folder that breaks an invariant"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("keys-need-a-person") && error.contains("BROKEN"), "{error}");
}

#[test]
fn the_bundled_invariants_hold_for_the_bundled_policies() {
    if !solver_or_skip() {
        return;
    }
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    let output = wardenctl(&["--json", "policy", "check", "--require-proofs", bundled.to_str().unwrap()]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(output.status.code(), Some(0), "{report:#}");
    let proofs = report["invariants"].as_array().unwrap();
    assert!(proofs.len() >= 8, "{report:#}");
    for proof in proofs {
        assert_eq!(proof["proof"]["state"], "holds", "{proof:#}");
    }
    // Without the solver the check says so, and --require-proofs fails it.
    let missing = Command::new(env!("CARGO_BIN_EXE_wardenctl"))
        .args(["policy", "check", "--require-proofs", bundled.to_str().unwrap()])
        .env("CVC5", "/nonexistent/cvc5")
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stdout).contains("invariants NOT PROVED"));
}
