//! What the tests of this binary share: running `warden-hook`, monitors
//! with the bundled policies over a workspace of the test's own or with a
//! policy text of the test's own, and the monitor's audit log.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use warden_monitor::auth::{CredentialConfig, Role};
use warden_monitor::server::{RunningServer, ServerConfig, start};
use warden_proto::v1 as pb;

pub const HARNESS: &str = "wdn_hook_protocol_harness";
pub const ADMIN: &str = "wdn_hook_protocol_admin";

/// Runs `warden-hook <agent> --max-wait <max_wait>` with `event` on stdin
/// and more environment: stdout, stderr (both trimmed), the exit code.
pub fn hook_with(
    endpoint: &str,
    agent: &str,
    max_wait: u64,
    event: &Value,
    env: &[(&str, &Path)],
) -> (String, String, i32) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_warden-hook"))
        .args([agent, "--max-wait", &max_wait.to_string()])
        .env("WARDEN_ENDPOINT", endpoint)
        .env("WARDEN_TOKEN", HARNESS)
        .env("WARDEN_USER", "alice")
        .env_remove("WARDEN_CA_CERT")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(event.to_string().as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    (
        String::from_utf8_lossy(&output.stdout).trim().to_owned(),
        String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        output.status.code().unwrap_or(-1),
    )
}

/// The credentials every monitor here accepts: the hook's harness token
/// (for alice) and an admin token to read the audit log.
pub fn credentials() -> Vec<CredentialConfig> {
    vec![
        CredentialConfig::for_token("hooks", Role::Harness, HARNESS, &["alice"]),
        CredentialConfig::for_token("admin", Role::Admin, ADMIN, &[]),
    ]
}

/// A temporary folder whose name is not hidden (`tempfile`'s own start with
/// `.tmp`, which the bundled rules about hidden files would see in every
/// path below it).
pub fn visible_tempdir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("warden-hook-test-").tempdir().unwrap()
}

/// A monitor with the bundled policies, alice's workspace a temporary
/// folder of its own.
pub struct Bundled {
    pub root: tempfile::TempDir,
    pub monitor: RunningServer,
    pub endpoint: String,
}

impl Bundled {
    pub async fn start() -> Self {
        let root = visible_tempdir();
        let workspace = root.path().join("project");
        std::fs::create_dir_all(&workspace).unwrap();
        let policies = root.path().join("policies");
        copy_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies"), &policies);
        let entities_path = policies.join("entities.json");
        let mut entities: Value = serde_json::from_str(&std::fs::read_to_string(&entities_path).unwrap()).unwrap();
        for entity in entities.as_array_mut().unwrap() {
            if entity["uid"]["id"] == "alice" {
                entity["attrs"]["workspace"]["__entity"]["id"] = json!(workspace.to_str().unwrap());
            }
        }
        std::fs::write(&entities_path, entities.to_string()).unwrap();
        let config = ServerConfig::new(policies, root.path().join("data"), credentials());
        let monitor = start(config, tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()).await.unwrap();
        let endpoint = format!("http://{}", monitor.addr());
        Self { root, monitor, endpoint }
    }

    pub fn workspace(&self) -> PathBuf {
        self.root.path().join("project")
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// One decision of the audit log.
#[derive(Debug, Clone)]
pub struct Decided {
    pub session: String,
    pub resource: String,
    pub outcome: pb::Outcome,
    pub policy_ids: Vec<String>,
}

/// Every decision record of the monitor at `endpoint`, in order.
pub async fn decisions(endpoint: &str) -> Vec<Decided> {
    let records = warden_tests::monitor::audit(endpoint, ADMIN).await.unwrap();
    records
        .into_iter()
        .filter(|record| record.kind == "decision")
        .map(|record| Decided {
            session: record.actor.map(|a| a.session).unwrap_or_default(),
            resource: record.resource,
            outcome: pb::Outcome::try_from(record.outcome).unwrap(),
            policy_ids: record.policy_ids,
        })
        .collect()
}

/// The decisions of one session.
pub async fn decisions_of(endpoint: &str, session: &str) -> Vec<Decided> {
    decisions(endpoint).await.into_iter().filter(|d| d.session == session).collect()
}

/// A Claude Code `PreToolUse` event in `cwd`.
pub fn claude(session: &str, cwd: &Path, tool: &str, input: Value) -> Value {
    json!({"session_id": session, "transcript_path": "/tmp/t.jsonl", "cwd": cwd, "hook_event_name": "PreToolUse",
        "permission_mode": "default", "tool_name": tool, "tool_input": input, "tool_use_id": "toolu_1"})
}

/// A Gemini CLI `BeforeTool` event in `cwd`.
pub fn gemini(session: &str, cwd: &Path, tool: &str, input: Value) -> Value {
    json!({"session_id": session, "transcript_path": "/tmp/t.json", "cwd": cwd, "hook_event_name": "BeforeTool",
        "timestamp": "2026-12-01T10:00:00Z", "tool_name": tool, "tool_input": input})
}

/// What the hook answered, whatever the protocol: allowed, and the reason.
pub fn verdict(agent: &str, (stdout, stderr, code): &(String, String, i32)) -> (bool, String) {
    match agent {
        "claude-code" => {
            let answer: Value = serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"));
            let output = &answer["hookSpecificOutput"];
            (
                output["permissionDecision"] == "allow",
                output["permissionDecisionReason"].as_str().unwrap_or_default().to_owned(),
            )
        }
        "gemini" => {
            let answer: Value = serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"));
            (answer["decision"] == "allow", answer["reason"].as_str().unwrap_or_default().to_owned())
        }
        "cursor" => {
            let answer: Value = serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"));
            (answer["permission"] == "allow", answer["agent_message"].as_str().unwrap_or_default().to_owned())
        }
        _ => (*code == 0, stderr.clone()),
    }
}

/// Runs the hook for `agent` on `event` off the async workers: allowed, and
/// the reason.
pub async fn ask(endpoint: &str, agent: &'static str, max_wait: u64, event: Value) -> (bool, String) {
    let endpoint = endpoint.to_owned();
    let answer = tokio::task::spawn_blocking(move || hook_with(&endpoint, agent, max_wait, &event, &[])).await.unwrap();
    verdict(agent, &answer)
}
