//! The `warden-hook` binary for each agent, fed the documented sample events
//! of its protocol, against a real monitor with the bundled policies: what
//! the agent reads on stdout, stderr and the exit code. `searches`: search
//! tools as reads of every file they can match; `links`: file tools decided
//! where their symbolic links lead.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod links;
mod searches;
mod support;
mod urls;

use serde_json::{Value, json};
use support::{HARNESS, hook_with};
use warden_monitor::auth::{CredentialConfig, Role};
use warden_monitor::server::{ServerConfig, start};

/// Runs `warden-hook <agent>` with `event` on stdin.
fn hook(endpoint: &str, agent: &str, event: &Value) -> (String, String, i32) {
    hook_with(endpoint, agent, 5, event, &[])
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_agent_gets_warden_s_answer_in_its_own_protocol() {
    let data = tempfile::tempdir().unwrap();
    let policies = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
    let config = ServerConfig::new(
        policies,
        data.path().to_owned(),
        vec![CredentialConfig::for_token("hooks", Role::Harness, HARNESS, &["alice"])],
    );
    let monitor = start(config, tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()).await.unwrap();
    let endpoint = format!("http://{}", monitor.addr());
    let run = |agent: &'static str, event: Value| {
        let endpoint = endpoint.clone();
        tokio::task::spawn_blocking(move || hook(&endpoint, agent, &event))
    };

    // Codex (PreToolUse, Claude Code's shape with `turn_id`): a block is exit
    // 2 with the reason on stderr; an allowed call exits 0 and says nothing.
    let codex = |command: &str| {
        json!({"session_id": "codex-1", "turn_id": "turn-1", "cwd": "/home/alice/project", "hook_event_name": "PreToolUse",
            "model": "gpt-5", "tool_name": "Bash", "tool_input": {"command": command}, "tool_use_id": "call_1"})
    };
    let (stdout, stderr, code) = run("codex", codex("cat ~/.ssh/id_rsa")).await.unwrap();
    assert_eq!((code, stdout.as_str()), (2, ""), "{stderr}");
    assert!(stderr.contains("no-credentials") && stderr.contains("credential files"), "{stderr}");
    let (stdout, stderr, code) = run("codex", codex("ls -la")).await.unwrap();
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (0, "", ""));

    // Gemini CLI (BeforeTool): `{"decision", "reason"}` on stdout, exit 0.
    let gemini = |tool: &str, input: Value| {
        json!({"session_id": "gemini-1", "transcript_path": "/tmp/t.json", "cwd": "/home/alice/project",
            "hook_event_name": "BeforeTool", "timestamp": "2026-12-01T10:00:00Z", "tool_name": tool, "tool_input": input})
    };
    let (stdout, _, code) =
        run("gemini", gemini("write_file", json!({"file_path": ".env", "content": "X=1"}))).await.unwrap();
    let answer: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!((code, answer["decision"].as_str()), (0, Some("deny")), "{stdout}");
    assert!(answer["reason"].as_str().unwrap().contains("files.no-credentials"), "{stdout}");
    let (stdout, _, _) = run("gemini", gemini("read_file", json!({"file_path": "src/main.rs"}))).await.unwrap();
    assert_eq!(serde_json::from_str::<Value>(&stdout).unwrap()["decision"], "allow", "{stdout}");

    // Cursor: `{"permission", "user_message", "agent_message"}`.
    let cursor = |event: &str, extra: Value| {
        let mut value = json!({"conversation_id": "cursor-1", "generation_id": "gen-1", "hook_event_name": event,
            "workspace_roots": ["/home/alice/project"]});
        value.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        value
    };
    let (stdout, _, code) = run(
        "cursor",
        cursor("beforeShellExecution", json!({"command": "rm -rf target", "cwd": "/home/alice/project"})),
    )
    .await
    .unwrap();
    let answer: Value = serde_json::from_str(&stdout).unwrap();
    // The recursive delete waits for a person who does not answer within
    // --max-wait: the hook denies, saying so.
    assert_eq!((code, answer["permission"].as_str()), (0, Some("deny")), "{stdout}");
    assert!(answer["agent_message"].as_str().unwrap().contains("waited 5 s"), "{stdout}");
    let (stdout, _, _) =
        run("cursor", cursor("beforeReadFile", json!({"file_path": "/home/alice/project/README.md", "content": "x"})))
            .await
            .unwrap();
    assert_eq!(serde_json::from_str::<Value>(&stdout).unwrap()["permission"], "allow", "{stdout}");
    monitor.stop().await.unwrap();
}

#[test]
fn version_names_the_release_and_the_commit() {
    warden_tests::version::assert_version(env!("CARGO_BIN_EXE_warden-hook"), "warden-hook");
}

/// A CA named (`WARDEN_CA_CERT`) for a plaintext `http://` endpoint: whoever
/// set it meant TLS. The hook denies, naming it, and nothing reaches the
/// endpoint, where the token would have crossed in the clear.
#[test]
fn a_ca_named_for_a_plaintext_endpoint_denies_and_sends_nothing() {
    let (listener, endpoint) = warden_tests::net::Untouched::bind().unwrap();
    let data = tempfile::tempdir().unwrap();
    let ca = data.path().join("ca.pem");
    std::fs::write(&ca, "never read").unwrap();
    let event = json!({"session_id": "plain-1", "cwd": "/home/alice/project", "hook_event_name": "PreToolUse",
        "tool_name": "Read", "tool_input": {"file_path": "/home/alice/project/src/main.rs"}});
    let (stdout, stderr, code) = hook_with(&endpoint, "claude-code", 5, &event, &[("WARDEN_CA_CERT", ca.as_path())]);
    let answer: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!((code, answer["hookSpecificOutput"]["permissionDecision"].as_str()), (0, Some("deny")), "{stderr}");
    let reason = answer["hookSpecificOutput"]["permissionDecisionReason"].as_str().unwrap();
    assert!(reason.contains("WARDEN_CA_CERT") && reason.contains("https://"), "{reason}");
    listener.assert_untouched();
}

/// Over TLS: an `https://` WARDEN_ENDPOINT is trusted by the system's CA
/// store (here `SSL_CERT_FILE`, which the system's loader reads), with no
/// flag; a monitor whose CA the system does not trust gets no request, and
/// the hook denies (closed). `WARDEN_CA_CERT` names the one CA to trust,
/// whatever the system trusts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_endpoint_is_trusted_by_the_system_s_cas() {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let issuer = || {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
    };
    let (ca, other) = (issuer(), issuer());
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_owned()]).unwrap().signed_by(&key, &ca).unwrap();
    let data = tempfile::tempdir().unwrap();
    let (trusted, untrusted) = (data.path().join("ca.pem"), data.path().join("other.pem"));
    std::fs::write(&trusted, ca.pem()).unwrap();
    std::fs::write(&untrusted, other.pem()).unwrap();
    let policies = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
    let config = ServerConfig {
        tls: Some(warden_monitor::server::TlsPem { cert: cert.pem(), key: key.serialize_pem(), client_ca: None }),
        ..ServerConfig::new(
            policies,
            data.path().join("data"),
            vec![CredentialConfig::for_token("hooks", Role::Harness, HARNESS, &["alice"])],
        )
    };
    let monitor = start(config, tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()).await.unwrap();
    let endpoint = format!("https://localhost:{}", monitor.addr().port());
    let event = json!({"session_id": "tls-1", "cwd": "/home/alice/project", "hook_event_name": "PreToolUse",
        "tool_name": "Read", "tool_input": {"file_path": "/home/alice/project/src/main.rs"}});
    let ask = |store: &std::path::Path, named: Option<&std::path::Path>| {
        let (endpoint, event) = (endpoint.clone(), event.clone());
        let (store, named) = (store.to_owned(), named.map(std::path::Path::to_owned));
        tokio::task::spawn_blocking(move || {
            let empty = std::path::Path::new("/nonexistent");
            let mut env = vec![("SSL_CERT_FILE", store.as_path()), ("SSL_CERT_DIR", empty)];
            env.extend(named.as_deref().map(|ca| ("WARDEN_CA_CERT", ca)));
            let (stdout, _, _) = hook_with(&endpoint, "claude-code", 5, &event, &env);
            let answer = serde_json::from_str::<Value>(&stdout).unwrap();
            answer["hookSpecificOutput"]["permissionDecision"].as_str().unwrap().to_owned()
        })
    };
    assert_eq!(ask(&trusted, None).await.unwrap(), "allow");
    assert_eq!(ask(&untrusted, None).await.unwrap(), "deny");
    assert_eq!(ask(&untrusted, Some(&trusted)).await.unwrap(), "allow");
    assert_eq!(ask(&trusted, Some(&untrusted)).await.unwrap(), "deny", "the named CA is the only one trusted");
    monitor.stop().await.unwrap();
}

/// `WARDEN_ENDPOINT` lists replicas: a hook asks the first that is up; a
/// list with an empty entry is refused (a deny naming it), asking nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hook_asks_the_replica_that_is_up() {
    let data = tempfile::tempdir().unwrap();
    let policies = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
    let config = ServerConfig::new(policies, data.path().to_owned(), support::credentials());
    let monitor = start(config, tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()).await.unwrap();
    let live = format!("http://{}", monitor.addr());
    let dead = warden_tests::net::dead_endpoint().unwrap();
    let event = json!({"session_id": "replicas-1", "cwd": "/home/alice/project", "hook_event_name": "PreToolUse",
        "tool_name": "Read", "tool_input": {"file_path": "/home/alice/project/src/main.rs"}});
    let decision = |endpoint: String, event: Value| {
        tokio::task::spawn_blocking(move || {
            let (stdout, stderr, code) = hook(&endpoint, "claude-code", &event);
            assert_eq!(code, 0, "{stderr}");
            let answer: Value = serde_json::from_str(&stdout).unwrap();
            let output = &answer["hookSpecificOutput"];
            (output["permissionDecision"].as_str().unwrap().to_owned(), output["permissionDecisionReason"].to_string())
        })
    };
    let (allowed, why) = decision(format!("{dead},{live}"), event.clone()).await.unwrap();
    assert_eq!(allowed, "allow", "{why}");
    let (listener, untouched) = warden_tests::net::Untouched::bind().unwrap();
    let (denied, why) = decision(format!("{untouched},,{live}"), event).await.unwrap();
    assert_eq!(denied, "deny");
    assert!(why.contains("entry 2 of 3 is empty"), "{why}");
    listener.assert_untouched();
    monitor.stop().await.unwrap();
}
