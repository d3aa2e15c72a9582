//! `warden-hook install claude-code` as a new user runs it: the entry it
//! writes is run the way Claude Code runs a hook command (`sh -c`), with no
//! Warden variable in the environment, against a real monitor; what that
//! monitor recorded shows the decision was its own.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};
use warden_monitor::auth::{CredentialConfig, Role};
use warden_monitor::server::{ServerConfig, start};
use warden_proto::v1 as pb;

const HARNESS: &str = "wdn_install_test_harness";
const ADMIN: &str = "wdn_install_test_admin";

/// `warden-hook install claude-code ARGS` in `cwd`, with only `env` of
/// Warden's variables set.
fn install(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_warden-hook"))
        .args(["install", "claude-code"])
        .args(args)
        .current_dir(cwd)
        .env_remove("WARDEN_ENDPOINT")
        .env_remove("WARDEN_TOKEN")
        .env_remove("WARDEN_TOKEN_FILE")
        .env_remove("WARDEN_CA_CERT")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// The `PreToolUse` entries of a settings file.
fn entries(settings: &Path) -> Vec<Value> {
    let settings: Value = serde_json::from_str(&std::fs::read_to_string(settings).unwrap()).unwrap();
    settings["hooks"]["PreToolUse"].as_array().unwrap().clone()
}

/// Runs `command` as Claude Code does, through the shell, with `event` on
/// stdin and no Warden variable in the environment but the user; returns
/// the hook's answer.
fn run_hook(command: &str, event: &Value) -> Value {
    let mut child = Command::new("sh")
        .args(["-c", command])
        .env_remove("WARDEN_ENDPOINT")
        .env_remove("WARDEN_TOKEN")
        .env_remove("WARDEN_TOKEN_FILE")
        .env_remove("WARDEN_CA_CERT")
        .env("WARDEN_USER", "alice")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(event.to_string().as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{command}: {stdout} {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{command}: {e}: {stdout}"))
}

fn event(session: &str, tool: &str, input: Value) -> Value {
    json!({"session_id": session, "transcript_path": "/tmp/t.jsonl", "cwd": "/home/alice/project",
        "hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": input, "tool_use_id": "toolu_1"})
}

/// Every record of the monitor's audit log.
async fn audit(endpoint: &str) -> Vec<pb::AuditRecord> {
    let channel = tonic::transport::Channel::from_shared(endpoint.to_owned()).unwrap().connect().await.unwrap();
    let token: tonic::metadata::MetadataValue<_> = format!("Bearer {ADMIN}").parse().unwrap();
    let mut admin = pb::admin_client::AdminClient::with_interceptor(channel, move |mut r: tonic::Request<()>| {
        r.metadata_mut().insert("authorization", token.clone());
        Ok(r)
    });
    let mut stream =
        admin.tail_audit(pb::TailAuditRequest { all: true, ..Default::default() }).await.unwrap().into_inner();
    let mut records = Vec::new();
    while let Some(record) = stream.message().await.unwrap() {
        records.push(record);
    }
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_installed_entry_reaches_the_monitor_with_its_token_file() {
    let root = tempfile::tempdir().unwrap();
    let policies = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
    let config = ServerConfig::new(
        policies,
        root.path().join("data"),
        vec![
            CredentialConfig::for_token("installed-hook", Role::Harness, HARNESS, &["alice"]),
            CredentialConfig::for_token("admin", Role::Admin, ADMIN, &[]),
        ],
    );
    let monitor = start(config, tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()).await.unwrap();
    let endpoint = format!("http://{}", monitor.addr());

    // The token in a folder whose name the shell would split and unquote.
    let tokens = root.path().join("my tokens");
    std::fs::create_dir(&tokens).unwrap();
    std::fs::write(tokens.join("alice's harness.token"), format!("{HARNESS}\n")).unwrap();
    std::fs::set_permissions(tokens.join("alice's harness.token"), std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .unwrap();
    let project = root.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let settings = project.join(".claude/settings.json");

    // Flags, with the token file relative to where install runs.
    let output = tokio::task::spawn_blocking({
        let (root, endpoint) = (root.path().to_owned(), endpoint.clone());
        move || {
            install(
                &root,
                &["--dir", "project", "--endpoint", &endpoint, "--token-file", "my tokens/alice's harness.token"],
                &[],
            )
        }
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    let installed = entries(&settings);
    assert_eq!(installed.len(), 1, "{installed:?}");
    let command = installed[0]["hooks"][0]["command"].as_str().unwrap().to_owned();
    let token_file = tokens.join("alice's harness.token");
    assert!(command.contains(&format!("WARDEN_ENDPOINT={endpoint}")), "{command}");
    assert!(command.contains("WARDEN_TOKEN_FILE='"), "{command}");
    assert!(!command.contains(HARNESS), "{command}");

    // Run as Claude Code runs it: the monitor decides, with the bundled
    // policies, both ways.
    let (allowed, denied) = tokio::task::spawn_blocking({
        let command = command.clone();
        move || {
            let read = event("installed-1", "Read", json!({"file_path": "/home/alice/project/src/main.rs"}));
            let secret = event("installed-1", "Read", json!({"file_path": "/home/alice/project/.env"}));
            (run_hook(&command, &read), run_hook(&command, &secret))
        }
    })
    .await
    .unwrap();
    let decision = |answer: &Value| {
        let output = &answer["hookSpecificOutput"];
        (output["permissionDecision"].as_str().unwrap().to_owned(), output["permissionDecisionReason"].to_string())
    };
    let (outcome, reason) = decision(&allowed);
    assert_eq!(outcome, "allow", "{reason}");
    assert!(reason.contains("files.workspace-read-write"), "{reason}");
    let (outcome, reason) = decision(&denied);
    assert_eq!(outcome, "deny", "{reason}");
    assert!(reason.contains("files.no-credentials"), "{reason}");
    // Both are in this monitor's audit log, asked with the installed token.
    let records = audit(&endpoint).await;
    let asked: Vec<_> = records
        .iter()
        .filter(|r| r.kind == "decision" && r.actor.as_ref().is_some_and(|a| a.session == "installed-1"))
        .map(|r| (r.caller.as_str(), r.resource.as_str(), r.outcome))
        .collect();
    assert_eq!(
        asked,
        [
            ("installed-hook", r#"File::"/home/alice/project/src/main.rs""#, pb::Outcome::Allow as i32),
            ("installed-hook", r#"File::"/home/alice/project/.env""#, pb::Outcome::Deny as i32),
        ],
        "{records:#?}"
    );

    // Installed again, from the environment this time (as README says):
    // the entry is replaced, never added twice, and other hooks stay.
    let mut document: Value = serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    document["hooks"]["PreToolUse"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"matcher": "Bash", "hooks": [{"type": "command", "command": "audit.sh"}]}));
    std::fs::write(&settings, document.to_string()).unwrap();
    let token_file_text = token_file.to_str().unwrap().to_owned();
    let output = install(
        root.path(),
        &["--dir", "project", "--max-wait", "60"],
        &[("WARDEN_ENDPOINT", &endpoint), ("WARDEN_TOKEN_FILE", &token_file_text)],
    );
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let installed = entries(&settings);
    assert_eq!(installed.len(), 2, "{installed:?}");
    assert_eq!(installed[0]["hooks"][0]["command"], "audit.sh");
    let command = installed[1]["hooks"][0]["command"].as_str().unwrap().to_owned();
    assert!(command.ends_with("claude-code --max-wait 60"), "{command}");
    assert_eq!(installed[1]["hooks"][0]["timeout"], 90);
    let allowed = tokio::task::spawn_blocking(move || {
        run_hook(&command, &event("installed-2", "Read", json!({"file_path": "/home/alice/project/README.md"})))
    })
    .await
    .unwrap();
    assert_eq!(decision(&allowed).0, "allow", "{allowed}");
    let records = audit(&endpoint).await;
    assert!(
        records
            .iter()
            .any(|r| r.caller == "installed-hook" && r.actor.as_ref().is_some_and(|a| a.session == "installed-2")),
        "{records:#?}"
    );
    monitor.stop().await.unwrap();
}

#[test]
fn a_token_s_value_is_never_written_and_a_missing_token_file_is_said() {
    let root = tempfile::tempdir().unwrap();
    let settings = root.path().join(".claude/settings.json");

    // WARDEN_TOKEN alone: refused, saying why, and nothing is written.
    let output = install(root.path(), &["--dir", "."], &[("WARDEN_TOKEN", "wdn_value_never_written")]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("never written into an agent's settings file") && stderr.contains("--token-file"),
        "{stderr}"
    );
    assert!(!stderr.contains("wdn_value_never_written"), "{stderr}");
    assert!(!settings.exists());

    // No token file at all: installed, with a warning of where the hook
    // will look.
    let output = install(root.path(), &["--dir", "."], &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: no token file") && stderr.contains("environment Claude Code runs in"),
        "{stderr}"
    );
    let command = entries(&settings)[0]["hooks"][0]["command"].as_str().unwrap().to_owned();
    assert!(command.starts_with(&format!("WARDEN_ENDPOINT={} ", warden_sdk::DEFAULT_ENDPOINT)), "{command}");
    assert!(!command.contains("WARDEN_TOKEN"), "{command}");

    // A token file that cannot be used now: installed, with a warning
    // saying why; the hook reads it as every client does.
    let output = install(root.path(), &["--dir", ".", "--token-file", "missing.token"], &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("cannot be used now") && stderr.contains("missing.token"), "{stderr}");
    std::fs::write(root.path().join("open.token"), "wdn_open_token\n").unwrap();
    std::fs::set_permissions(root.path().join("open.token"), std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .unwrap();
    let output = install(root.path(), &["--dir", ".", "--token-file", "open.token"], &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("cannot be used now") && stderr.contains("chmod 600"), "{stderr}");
    assert!(!stderr.contains("wdn_open_token"), "{stderr}");
    assert_eq!(entries(&settings).len(), 1);
}

/// `install --print` into a pipe nobody reads any more (`| head -0`): the
/// pipe's read end is closed before warden-hook starts, so its first write
/// fails, whatever the size; it ends quietly with 141, as wardenctl does.
#[test]
fn print_into_a_closed_pipe_ends_quietly() {
    let root = tempfile::tempdir().unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let output = Command::new(env!("CARGO_BIN_EXE_warden-hook"))
        .args(["install", "claude-code", "--print", "--dir", ".", "--token-file", "t"])
        .current_dir(root.path())
        .env_remove("WARDEN_TOKEN")
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(141), "{stderr}");
    assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "{stderr}");
}
