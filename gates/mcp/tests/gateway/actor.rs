//! Who the gateway acts for when nothing names the user: the OS user, as
//! `warden-hook` finds it; and when no user can be found at all, a client
//! told so in an MCP error naming WARDEN_USER, not a closed connection.

use serde_json::json;

use crate::support::*;

fn os_user() -> String {
    let id = std::process::Command::new("id").arg("-un").output().unwrap();
    String::from_utf8(id.stdout).unwrap().trim().to_owned()
}

/// The environment of a gateway that no variable tells who the user is
/// (no WARDEN_USER, USER or LOGNAME), with `path` as its PATH.
fn env_without_a_user(endpoint: &str, path: &str) -> serde_json::Value {
    json!({"WARDEN_ENDPOINT": endpoint, "WARDEN_TOKEN": HARNESS, "PATH": path})
}

#[tokio::test]
async fn without_warden_user_or_user_the_gateway_acts_for_the_os_user() {
    let Some(((node, script), python)) = parts() else { return };
    let monitor = Monitor::start(EVERYTHING_POLICIES).await;
    let dir = tempfile::tempdir().unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    // As an MCP client that passes only what it is told to (the Python SDK
    // adds USER and LOGNAME of its own unless told not to).
    let plan = json!({
        "transport": "stdio", "command": gateway(), "args": gateway_args(&node, &script, &dir.path().join("log")),
        "env": env_without_a_user(&monitor.endpoint, &path), "env_exact": true, "timeout": 30,
        "steps": [{"op": "call_tool", "name": "echo", "arguments": {"message": "whoever I am"}}]
    });
    let lines = run_plan(&python, &plan).await;
    // The call is decided for the OS user, whom the bundled entities do not
    // know: Warden says so, and the agent reads it.
    let user = os_user();
    let called = step(&lines, "call_tool", 0);
    assert!(called["text"].as_str().unwrap().contains(&format!("unknown user `{user}`")), "{called}");
    let audit = monitor.audit().await;
    let decided: Vec<&str> = audit
        .iter()
        .filter(|r| r.kind == "decision" && r.action == "tool.call")
        .filter_map(|r| r.actor.as_ref())
        .map(|a| a.user.as_str())
        .collect();
    assert_eq!(decided, [user.as_str()], "{audit:#?}");
}

#[tokio::test]
async fn when_no_user_can_be_found_every_request_is_answered_with_an_error_naming_warden_user() {
    // `id` cannot be found: nothing names the user.
    let empty = tempfile::tempdir().unwrap();
    let path = empty.path().to_str().unwrap();
    let args = ["--name".to_owned(), "everything".to_owned(), "--".to_owned(), "true".to_owned()];
    let env = [("WARDEN_ENDPOINT", "http://127.0.0.1:9"), ("WARDEN_TOKEN", HARNESS), ("PATH", path)];

    // A client of 2026-07-28 (discovery, then requests without a session)
    // and one with `initialize`.
    let mut raw = RawStdio::start(&args, &env);
    let meta = RawStdio::meta_2026();
    for method in ["server/discover", "tools/list"] {
        let answer = raw.request(method, json!({"_meta": meta})).await;
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("WARDEN_USER"), "{method}: {answer}");
    }
    let status = raw.finish().await;
    assert!(!status.success(), "a gateway that cannot serve exits with failure");
    let mut raw = RawStdio::start(&args, &env);
    let initialize =
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}});
    let answer = raw.request("initialize", initialize).await;
    assert!(answer["error"]["message"].as_str().unwrap_or_default().contains("WARDEN_USER"), "{answer}");
    assert!(!raw.finish().await.success());

    // What the Python client's user reads, instead of "Connection closed".
    let Some(python) = python() else { return };
    let plan = json!({
        "transport": "stdio", "command": gateway(), "args": args,
        "env": env_without_a_user("http://127.0.0.1:9", path), "env_exact": true, "timeout": 30,
        "steps": [{"op": "list_tools"}]
    });
    let lines = run_plan(&python, &plan).await;
    let fatal = lines.iter().find(|l| l["op"] == "fatal").unwrap_or_else(|| panic!("{lines:#?}"));
    let message = fatal["error"].as_str().unwrap_or_default();
    assert!(message.contains("WARDEN_USER"), "{fatal}");
    assert!(!message.contains("Connection closed"), "{fatal}");
}
