//! The real Claude Code (npm) with the gateway as its MCP server, driven by
//! a scripted model on loopback: what the model is shown, what it is told,
//! and what reaches the upstream server.

use std::time::Duration;

use serde_json::json;
use warden_tests::claude_code::{ClaudeRun, claude_or_skip, mcp_config, stdio_mcp_server};
use warden_tests::model_server::{ScriptedModel, Step};

use crate::support::*;

#[tokio::test]
async fn claude_code_through_the_gateway_is_shown_allowed_tools_and_told_why_a_call_was_refused() {
    let Some((node, script)) = everything() else { return };
    let Some(claude) = claude_or_skip().unwrap() else { return };
    let monitor = Monitor::start(EVERYTHING_POLICIES).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("upstream.log");
    let args = gateway_args(&node, &script, &log);
    let env = [("WARDEN_ENDPOINT", monitor.endpoint.as_str()), ("WARDEN_TOKEN", HARNESS), ("WARDEN_USER", "alice")];
    let server = stdio_mcp_server(gateway(), &args, &env);

    let model = ScriptedModel::start(vec![
        Step::tool_use("mcp__everything__echo", json!({"message": "hello from claude"})),
        Step::tool_use("mcp__everything__echo", json!({"message": "the secret word"})),
        Step::tool_use("mcp__everything__get-sum", json!({"a": 2, "b": 40})),
        Step::text("done"),
    ])
    .await
    .unwrap();
    let run = ClaudeRun::new(claude, "use the everything tools")
        .allowed_tools(["mcp__everything"])
        .mcp_config(mcp_config([("everything", server)]))
        .timeout(Duration::from_secs(120))
        .run(&model);
    // The sum waits for a person; the on-call approver approves it.
    let (output, approval) = tokio::join!(run, monitor.resolve_when_pending("get-sum", true, "fine"));
    let output = output.unwrap();
    assert!(!output.is_error(), "{}\n{}", output.stdout, output.stderr);
    assert_eq!(approval.state, warden_proto::v1::ApprovalState::Approved as i32);

    // tools/list went through Preview: the never-allowed tool is not offered.
    let offered = model.tool_names();
    assert!(offered.iter().any(|t| t == "mcp__everything__echo"), "{offered:?}");
    assert!(offered.iter().any(|t| t == "mcp__everything__get-sum"), "approvable tools are shown: {offered:?}");
    assert!(!offered.iter().any(|t| t == "mcp__everything__get-env"), "{offered:?}");

    let results = model.tool_results();
    assert_eq!(results.len(), 3, "{results:#?}");
    assert!(!results[0].is_error && results[0].content.contains("Echo: hello from claude"), "{results:#?}");
    assert!(results[1].is_error, "{results:#?}");
    assert!(results[1].content.contains("everything.no-secret-echo"), "the model reads the policy: {results:#?}");
    assert!(results[1].content.contains("echoing anything that mentions a secret is forbidden"), "{results:#?}");
    assert!(!results[2].is_error && results[2].content.contains("42"), "{results:#?}");

    let received = std::fs::read_to_string(&log).unwrap();
    assert!(received.contains("hello from claude"), "{received}");
    assert!(!received.contains("secret word"), "the denied call reached the server: {received}");
}
