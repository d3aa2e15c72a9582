//! `wardenctl policy diff OLD NEW` on small policy pairs whose answer is
//! known, with the real cvc5 solver; every change it shows is run again
//! with the `wardenctl authorize --explain --policies` lines it printed,
//! against each folder, and must be decided as it says.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::{solver_or_skip, wardenctl};

const ENTITIES: &str = r#"[
  {"uid": {"type": "Group", "id": "ops"}, "attrs": {}, "parents": []},
  {"uid": {"type": "User", "id": "alice"}, "attrs": {}, "parents": [{"type": "Group", "id": "ops"}]},
  {"uid": {"type": "User", "id": "bob"}, "attrs": {}, "parents": []}
]"#;

/// A policy folder with the bundled schema, two users (alice in ops, bob
/// in no group) and `policies` as its one policy file.
fn folder(root: &Path, name: &str, policies: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/schema.cedarschema");
    std::fs::copy(bundled, dir.join("schema.cedarschema")).unwrap();
    std::fs::write(dir.join("entities.json"), ENTITIES).unwrap();
    std::fs::write(dir.join("policies.cedar"), policies).unwrap();
    dir
}

/// `policy diff --json OLD NEW`: the exit code and the report.
fn diff(old: &Path, new: &Path) -> (i32, Value) {
    let output = wardenctl(&["--json", "policy", "diff", old.to_str().unwrap(), new.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&output.stdout);
    let report = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{e}: {text}\n{}", String::from_utf8_lossy(&output.stderr)));
    (output.status.code().unwrap(), report)
}

/// The verdict of each action's environment.
fn verdicts(report: &Value) -> Vec<(String, String)> {
    report["envs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["action"].as_str().unwrap().to_owned(), e["verdict"].as_str().unwrap().to_owned()))
        .collect()
}

fn findings<'a>(report: &'a Value, action: &str) -> &'a Vec<Value> {
    let env = report["envs"].as_array().unwrap().iter().find(|e| e["action"] == action).unwrap();
    env["findings"].as_array().unwrap()
}

/// Words of a line `quote_argv` wrote (POSIX single quotes).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let (mut quoted, mut any) = (false, false);
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any {
                    out.push(std::mem::take(&mut word));
                }
                any = false;
            }
            '\\' if !quoted => {}
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(word);
    }
    out
}

/// Runs a printed `wardenctl authorize --explain` line: its outcome by exit code.
fn run(line: &str) -> &'static str {
    let words = words(line);
    assert_eq!(words[0], "wardenctl", "{line}");
    let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
    let output = wardenctl(&args);
    match output.status.code() {
        Some(0) => "ALLOW",
        Some(2) => "DENY",
        Some(3) => "PENDING",
        other => panic!("{line}: exit {other:?}: {}", String::from_utf8_lossy(&output.stderr)),
    }
}

/// Every finding reproduced: its two lines decide as it says.
fn check_reproduced(finding: &Value) {
    if finding["under"] == "grant" {
        return;
    }
    assert_eq!(finding["reproduced"]["state"], "yes", "{finding:#}");
    assert_eq!(run(finding["run_old"].as_str().unwrap()), finding["old"]["outcome"], "{finding:#}");
    assert_eq!(run(finding["run_new"].as_str().unwrap()), finding["new"]["outcome"], "{finding:#}");
}

const SRV_AND_OPT: &str = r#"
@id("read-srv") permit (principal, action == Action::"fs.read", resource in Dir::"/srv");
@id("read-opt") permit (principal, action == Action::"fs.read", resource in Dir::"/opt");
"#;

#[test]
fn an_equivalent_refactor_is_proved_equivalent() {
    if !solver_or_skip() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let old = folder(root.path(), "old", SRV_AND_OPT);
    let new = folder(
        root.path(),
        "new",
        r#"@id("read-srv-or-opt") @reason("one policy now")
        permit (principal, action in [Action::"fs.read"], resource)
        when { resource in Dir::"/opt" || resource in Dir::"/srv" };"#,
    );
    let (code, report) = diff(&old, &new);
    assert_eq!(code, 0, "{report:#}");
    for (action, verdict) in verdicts(&report) {
        assert_eq!(verdict, "equivalent", "{action}: {report:#}");
    }
    // The text form says it too.
    let text = wardenctl(&["policy", "diff", old.to_str().unwrap(), new.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("NEW decides every request as OLD does (proved)"));
}

#[test]
fn a_permit_that_opens_one_path_for_one_group_is_shown_with_a_member_of_it() {
    if !solver_or_skip() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let old = folder(root.path(), "old", SRV_AND_OPT);
    let opened = format!(
        r#"{SRV_AND_OPT}
        @id("ops-read-etc") permit (principal in Group::"ops", action == Action::"fs.read", resource in Dir::"/etc");"#
    );
    let new = folder(root.path(), "new", &opened);
    let (code, report) = diff(&old, &new);
    assert_eq!(code, 3, "{report:#}");
    for (action, verdict) in verdicts(&report) {
        let expected = if action == "fs.read" { "newly-permits" } else { "equivalent" };
        assert_eq!(verdict, expected, "{action}: {report:#}");
    }
    let found = findings(&report, "fs.read");
    assert_eq!(found.len(), 1, "{report:#}");
    let finding = &found[0];
    assert_eq!((finding["old"]["outcome"].as_str(), finding["new"]["outcome"].as_str()), (Some("DENY"), Some("ALLOW")));
    assert_eq!(finding["new"]["policies"], serde_json::json!(["ops-read-etc"]));
    // The only member of ops; bob could not show it.
    assert_eq!(finding["example"]["user"], "alice", "{finding:#}");
    check_reproduced(finding);
    // The other way round it is the same change, newly forbidden.
    let (code, back) = diff(&new, &old);
    assert_eq!(code, 3);
    let found = findings(&back, "fs.read");
    assert_eq!(found.len(), 1, "{back:#}");
    assert_eq!(found[0]["old"]["outcome"], "ALLOW");
    assert_eq!(found[0]["new"]["outcome"], "DENY");
    check_reproduced(&found[0]);
}

/// `SRV_AND_OPT` with /srv/keys closed by a forbid.
fn srv_keys_closed() -> String {
    format!(
        r#"{SRV_AND_OPT}
        @id("no-srv-keys") @reason("keys stay") forbid (principal, action, resource in Dir::"/srv/keys");"#
    )
}

#[test]
fn a_forbid_that_closes_one_path_newly_forbids_only_there() {
    if !solver_or_skip() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let old = folder(root.path(), "old", SRV_AND_OPT);
    let closed = srv_keys_closed();
    let new = folder(root.path(), "new", &closed);
    let (code, report) = diff(&old, &new);
    assert_eq!(code, 3, "{report:#}");
    let found = findings(&report, "fs.read");
    let verdict = verdicts(&report).into_iter().find(|(a, _)| a == "fs.read").unwrap().1;
    assert_eq!(verdict, "newly-forbids", "{report:#}");
    let plain: Vec<&Value> = found.iter().filter(|f| f["under"] == "no-grant").collect();
    assert_eq!(plain.len(), 1, "{report:#}");
    assert_eq!(plain[0]["old"]["outcome"], "ALLOW");
    assert_eq!(plain[0]["new"]["outcome"], "DENY");
    assert_eq!(plain[0]["new"]["policies"], serde_json::json!(["no-srv-keys"]));
    let path = plain[0]["example"]["attributes"]["path"].as_str().unwrap();
    assert!(path.starts_with("\"/srv/keys"), "{path}");
    check_reproduced(plain[0]);
    // A forbid also stops what a grant let through, for every action on
    // those files: fs.write had no permit, and a grant allowed it.
    for action in ["fs.write", "fs.delete"] {
        let found = findings(&report, action);
        assert!(
            found
                .iter()
                .all(|f| f["under"] == "grant" && f["old"]["outcome"] == "ALLOW" && f["new"]["outcome"] == "DENY"),
            "{action}: {report:#}"
        );
        assert!(!found.is_empty(), "{action}: {report:#}");
    }
}

#[test]
fn a_change_that_only_moves_pending_to_allow_is_shown_as_that() {
    if !solver_or_skip() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let base = r#"@id("write-srv") permit (principal, action == Action::"fs.write", resource in Dir::"/srv");"#;
    let pending = format!(
        r#"{base}
        @id("deploy-needs-a-person") @reason("deploys need a person")
        forbid (principal, action == Action::"fs.write", resource in Dir::"/srv/deploy") unless {{ context.approved }};"#
    );
    let old = folder(root.path(), "old", &pending);
    let new = folder(root.path(), "new", base);
    let (code, report) = diff(&old, &new);
    assert_eq!(code, 3, "{report:#}");
    for (action, verdict) in verdicts(&report) {
        let expected = if action == "fs.write" { "newly-permits" } else { "equivalent" };
        assert_eq!(verdict, expected, "{action}: {report:#}");
    }
    let found = findings(&report, "fs.write");
    assert_eq!(found.len(), 1, "only PENDING -> ALLOW, nothing under a grant: {report:#}");
    assert_eq!(found[0]["old"]["outcome"], "PENDING");
    assert_eq!(found[0]["new"]["outcome"], "ALLOW");
    assert_eq!(found[0]["old"]["policies"], serde_json::json!(["deploy-needs-a-person"]));
    check_reproduced(&found[0]);
}

#[test]
fn the_bundled_policies_are_equivalent_to_themselves_and_a_missing_solver_is_an_error() {
    if !solver_or_skip() {
        return;
    }
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    let (code, report) = diff(&bundled, &bundled);
    assert_eq!(code, 0, "{report:#}");
    let output = Command::new(env!("CARGO_BIN_EXE_wardenctl"))
        .args(["policy", "diff", bundled.to_str().unwrap(), bundled.to_str().unwrap()])
        .env("CVC5", "/nonexistent/cvc5")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("CVC5 names `/nonexistent/cvc5`"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_may_be_the_set_a_running_monitor_serves() {
    use warden_monitor::auth::{CredentialConfig, Role};
    const ADMIN: &str = "wdn_diff_test_admin";
    if !solver_or_skip() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let old = folder(root.path(), "old", SRV_AND_OPT);
    let closed = srv_keys_closed();
    let new = folder(root.path(), "new", &closed);
    let config = warden_monitor::server::ServerConfig::new(
        old.clone(),
        root.path().join("data"),
        vec![CredentialConfig::for_token("a", Role::Admin, ADMIN, &[])],
    );
    let server = warden_monitor::server::start(config, tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap())
        .await
        .unwrap();
    let endpoint = format!("http://{}", server.addr());
    let run = |args: Vec<String>| {
        let endpoint = endpoint.clone();
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_wardenctl"))
                .args(["--endpoint", &endpoint])
                .env("WARDEN_TOKEN", ADMIN)
                .env_remove("WARDEN_TOKEN_FILE")
                .args(args)
                .output()
                .unwrap()
        })
    };
    let args = |more: &[&str]| -> Vec<String> {
        ["--json", "policy", "diff", "--running"].iter().chain(more).map(|s| (*s).to_owned()).collect()
    };
    let output = run(args(&[new.to_str().unwrap()])).await.unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    let report: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{e}: {text}\n{}", String::from_utf8_lossy(&output.stderr)));
    assert_eq!(output.status.code(), Some(3), "{report:#}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("OLD: the running monitor's set"), "{stderr}");
    // The same answer as with the folder it serves, and the same version.
    let (_, from_folder) = diff(&old, &new);
    assert_eq!(report["old_version"], from_folder["old_version"]);
    assert_eq!(verdicts(&report), verdicts(&from_folder));
    let plain: Vec<&Value> = findings(&report, "fs.read").iter().filter(|f| f["under"] == "no-grant").collect();
    assert_eq!(plain.len(), 1, "{report:#}");
    check_reproduced(plain[0]);
    // Two folders with --running is a mistake said as one.
    let both = run(args(&[old.to_str().unwrap(), new.to_str().unwrap()])).await.unwrap();
    assert_eq!(both.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&both.stderr).contains("with --running, give only NEW"));
    server.stop().await.unwrap();
}
