//! The official Python MCP client through the gateway.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::*;

fn text(line: &serde_json::Value) -> &str {
    line["text"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn over_stdio_a_client_sees_allowed_tools_and_policy_reasons_and_the_server_sees_only_what_was_allowed() {
    let Some(((node, script), python)) = parts() else { return };
    let monitor = Monitor::start(EVERYTHING_POLICIES).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("upstream.log");
    let args = gateway_args(&node, &script, &log);
    let plan = json!({
        "transport": "stdio", "command": gateway(), "args": args,
        "env": gateway_env(&monitor.endpoint, "alice"), "timeout": 30,
        "steps": [
            {"op": "list_tools"},
            {"op": "call_tool", "name": "echo", "arguments": {"message": "hello through warden"}},
            {"op": "call_tool", "name": "echo", "arguments": {"message": "my secret"}},
            {"op": "call_tool", "name": "get-env", "arguments": {}},
            {"op": "call_tool", "name": "trigger-long-running-operation", "arguments": {"duration": 1, "steps": 2}, "progress": true},
            {"op": "read_resource", "uri": "demo://resource/static/document/architecture.md"},
            {"op": "list_prompts"},
            {"op": "get_prompt", "name": "args-prompt", "arguments": {"city": "Paris"}},
            // Prompts and resources are decided too, on the URI as the
            // server reads it, however the client spells it.
            {"op": "get_prompt", "name": "resource-prompt", "arguments": {"resourceType": "Text", "resourceId": "1"}},
            {"op": "read_resource", "uri": "demo://resource/dynamic/text/1"},
            {"op": "read_resource", "uri": "DEMO://resource/./dynamic/text/1"},
            {"op": "read_resource", "uri": " demo://resource/dynamic/text/1"},
        ]
    });
    let lines = run_plan(&python, &plan).await;

    // tools/list: the forbidden tool is hidden; the approvable one is shown.
    let tools: Vec<&str> =
        step(&lines, "list_tools", 0)["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert!(tools.contains(&"echo") && tools.contains(&"get-sum"), "{tools:?}");
    assert!(!tools.contains(&"get-env"), "a tool the actor may never call is not shown: {tools:?}");

    let allowed = step(&lines, "call_tool", 0);
    assert_eq!(allowed["is_error"], false, "{allowed}");
    assert_eq!(text(allowed), "Echo: hello through warden");

    // Denials are tool results the model can read, naming policy and reason.
    let denied = step(&lines, "call_tool", 1);
    assert_eq!(denied["is_error"], true, "{denied}");
    assert!(text(denied).contains("everything.no-secret-echo"), "{denied}");
    assert!(text(denied).contains("echoing anything that mentions a secret is forbidden"), "{denied}");
    let hidden = step(&lines, "call_tool", 2);
    assert_eq!(hidden["is_error"], true, "calling a hidden tool by name is still denied: {hidden}");
    assert!(text(hidden).contains("everything.no-env"), "{hidden}");

    // Progress of the upstream reaches the client under the client's token.
    let long = step(&lines, "call_tool", 3);
    assert_eq!(long["is_error"], false, "{long}");
    assert!(!long["progress"].as_array().unwrap().is_empty(), "{long}");

    // resources/read is decided as mcp.read, then passed through; prompts pass through.
    assert!(text(step(&lines, "read_resource", 0)).contains("Architecture"), "{lines:#?}");
    let prompts = step(&lines, "list_prompts", 0)["prompts"].as_array().unwrap();
    assert!(prompts.iter().any(|p| p == "args-prompt"), "{prompts:?}");
    assert!(!prompts.iter().any(|p| p == "resource-prompt"), "a forbidden prompt is not shown: {prompts:?}");
    assert!(step(&lines, "get_prompt", 0).to_string().contains("Paris"));
    let embedded = step(&lines, "get_prompt", 1);
    assert!(
        embedded["error"]["message"].as_str().unwrap_or_default().contains("everything.no-resource-prompt"),
        "{embedded}"
    );
    for (i, spelled) in [(1, "plain"), (2, "upper-case scheme and a dot segment"), (3, "a leading space")] {
        let read = step(&lines, "read_resource", i);
        assert!(read["error"].is_object(), "{spelled}: {read}");
        assert!(!read.to_string().contains("Resource 1"), "{spelled}: {read}");
    }
    assert!(
        step(&lines, "read_resource", 2)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("everything.no-dynamic-resources")
    );

    // What reached the server: the allowed call with exactly its arguments,
    // never the denied ones.
    let received = std::fs::read_to_string(&log).unwrap();
    assert!(received.contains(r#""message":"hello through warden""#), "{received}");
    assert!(!received.contains("my secret"), "a denied call reached the server: {received}");
    assert!(!received.contains("get-env\",\"arguments"), "a denied call reached the server");

    // Every decision is in the audit log, the preview of the list included.
    let audit = monitor.audit().await;
    assert!(audit.iter().any(|r| r.kind == "preview" && r.action == "tool.call"));
    let denied =
        |action: &str| audit.iter().filter(|r| r.kind == "decision" && r.outcome == 2 && r.action == action).count();
    assert_eq!(denied("tool.call"), 2, "{audit:#?}");
    assert_eq!(denied("mcp.prompt"), 1, "{audit:#?}");
    // The plain and the odd spelling, decided as the same URI; the one with
    // a space is refused before Warden is asked.
    let reads: Vec<&str> =
        audit.iter().filter(|r| r.action == "mcp.read" && r.outcome == 2).map(|r| r.resource.as_str()).collect();
    assert_eq!(reads, ["Tool::\"everything/demo://resource/dynamic/text/1\""; 2], "{audit:#?}");
    assert!(audit.iter().any(|r| r.action == "mcp.read" && r.outcome == 1));
}

#[tokio::test]
async fn a_call_that_needs_approval_waits_with_progress_then_runs_or_reports_the_refusal() {
    let Some(((node, script), python)) = parts() else { return };
    let monitor = Monitor::start(EVERYTHING_POLICIES).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("upstream.log");
    let args = gateway_args(&node, &script, &log);
    let plan = json!({
        "transport": "stdio", "command": gateway(), "args": args,
        "env": gateway_env(&monitor.endpoint, "alice"), "timeout": 60,
        "steps": [
            {"op": "call_tool", "name": "get-sum", "arguments": {"a": 20, "b": 22}, "progress": true},
            {"op": "call_tool", "name": "get-sum", "arguments": {"a": 1, "b": 1}},
        ]
    });
    let run = ClientRun::start(&python, &plan);
    let approved = monitor.resolve_when_pending("get-sum", true, "").await;
    assert_eq!(approved.state, warden_proto::v1::ApprovalState::Approved as i32);
    let denied = monitor.resolve_when_pending("get-sum", false, "not today").await;
    assert_eq!(denied.state, warden_proto::v1::ApprovalState::Denied as i32);
    let lines = run.rest().await;

    let first = step(&lines, "call_tool", 0);
    assert_eq!(first["is_error"], false, "{first}");
    assert!(text(first).contains("42"), "{first}");
    let waiting = first["progress"].as_array().unwrap();
    assert!(
        waiting.iter().any(|p| p["message"].as_str().unwrap_or_default().contains("waiting for a person to approve")),
        "{first}"
    );
    let second = step(&lines, "call_tool", 1);
    assert_eq!(second["is_error"], true, "{second}");
    assert!(text(second).contains("not today"), "the approver's note reaches the agent: {second}");
    assert!(text(second).contains("everything.sum-needs-approval"), "{second}");

    let received = std::fs::read_to_string(&log).unwrap();
    assert!(received.contains(r#""a":20"#), "the approved call ran: {received}");
    assert!(!received.contains(r#""a":1,"#), "the refused call never reached the server: {received}");
}

#[tokio::test]
async fn while_warden_is_unreachable_nothing_is_listed_or_called() {
    let Some(((node, script), python)) = parts() else { return };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("upstream.log");
    let args = gateway_args(&node, &script, &log);
    // Nothing listens on the port just freed.
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let plan = json!({
        "transport": "stdio", "command": gateway(), "args": args,
        "env": gateway_env(&nowhere, "alice"), "timeout": 60,
        "steps": [
            {"op": "list_tools"},
            {"op": "call_tool", "name": "echo", "arguments": {"message": "unguarded"}},
        ]
    });
    let lines = run_plan(&python, &plan).await;
    let listed = step(&lines, "list_tools", 0);
    assert!(listed["error"]["message"].as_str().unwrap_or_default().contains("did not answer"), "{listed}");
    let called = step(&lines, "call_tool", 0);
    assert_eq!(called["is_error"], true, "{called}");
    assert!(text(called).contains(&format!("Warden at {nowhere} could not decide")), "{called}");
    let received = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!received.contains("unguarded"), "{received}");

    // A monitor that stops while a client is connected: the next call is refused.
    let mut monitor = Monitor::start(EVERYTHING_POLICIES).await;
    let args = gateway_args(&node, &script, &log);
    let plan = json!({
        "transport": "stdio", "command": gateway(), "args": args,
        "env": gateway_env(&monitor.endpoint, "alice"), "timeout": 60,
        "steps": [
            {"op": "call_tool", "name": "echo", "arguments": {"message": "while up"}},
            {"op": "wait_stdin_line"},
            {"op": "call_tool", "name": "echo", "arguments": {"message": "after the monitor stopped"}},
        ]
    });
    let mut run = ClientRun::start(&python, &plan);
    assert_eq!(text(&run.next().await), "Echo: while up");
    monitor.stop().await;
    run.go_on().await;
    let lines = run.rest().await;
    let refused = step(&lines, "call_tool", 0);
    assert_eq!(refused["is_error"], true, "{refused}");
    assert!(text(refused).contains("could not decide"), "{refused}");
    let received = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(received.contains("while up") && !received.contains("after the monitor stopped"), "{received}");
}

#[tokio::test]
async fn an_upstream_that_dies_gives_an_error_not_a_hang() {
    let Some(((node, script), python)) = parts() else { return };
    let monitor = Monitor::start(EVERYTHING_POLICIES).await;
    // The server lives for three seconds.
    let upstream = format!("timeout 3 '{node}' '{script}' stdio");
    let plan = json!({
        "transport": "stdio", "command": gateway(), "args": ["--name", "everything", "--", "sh", "-c", upstream],
        "env": gateway_env(&monitor.endpoint, "alice"), "timeout": 60,
        "steps": [
            {"op": "list_tools"},
            {"op": "sleep", "seconds": 4},
            {"op": "call_tool", "name": "echo", "arguments": {"message": "anyone there"}},
            {"op": "list_tools"},
        ]
    });
    let started = Instant::now();
    let lines = run_plan(&python, &plan).await;
    assert!(step(&lines, "list_tools", 0)["tools"].as_array().is_some_and(|t| !t.is_empty()));
    let called = step(&lines, "call_tool", 0);
    assert!(called["error"]["message"].as_str().unwrap_or_default().contains("everything"), "{called}");
    let listed = step(&lines, "list_tools", 1);
    assert!(listed["error"].is_object(), "{listed}");
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
}

#[tokio::test]
async fn over_streamable_http_clients_by_token_reach_stdio_and_http_upstreams_in_sessions_and_stateless() {
    let Some(((node, script), python)) = parts() else { return };
    let monitor = Monitor::start(EVERYTHING_POLICIES).await;
    // The reference server over streamable HTTP as the second upstream.
    let upstream_port = free_port();
    let mut remote = tokio::process::Command::new(&node)
        .args([script.as_str(), "streamableHttp"])
        .env("PORT", upstream_port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait_for_port(upstream_port).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("upstream.log");
    let token = "wdn_mcp_client_alice";
    let token_sha256 = sha256_hex(token);
    let config = dir.path().join("gateway.toml");
    let command = logged_everything(&node, &script, &log);
    std::fs::write(
        &config,
        format!(
            r#"session_header = "x-agent-session"
[[servers]]
name = "everything"
command = "{}"
args = {}
[[servers]]
name = "remote"
url = "http://127.0.0.1:{upstream_port}/mcp"
[[clients]]
token_sha256 = "{token_sha256}"
user = "alice"
agent = "cursor"
"#,
            command[0],
            serde_json::to_string(&command[1..]).unwrap(),
        ),
    )
    .unwrap();
    let gateway = HttpGateway::start(&config, &monitor.endpoint).await;
    let auth = json!({"Authorization": format!("Bearer {token}"), "x-agent-session": "agent-run-7"});
    let steps = json!([
        {"op": "list_tools"},
        {"op": "call_tool", "name": "remote__echo", "arguments": {"message": "over http"}},
        {"op": "call_tool", "name": "everything__echo", "arguments": {"message": "a secret"}},
        {"op": "call_tool", "name": "remote__trigger-long-running-operation", "arguments": {"duration": 1, "steps": 2}, "progress": true},
    ]);
    // The client's default (2026-07-28, stateless) and a session of 2025-06-18.
    for version in [None, Some("2025-06-18")] {
        let mut plan = json!({"transport": "http", "url": gateway.url, "headers": auth, "timeout": 60, "steps": steps});
        if let Some(version) = version {
            plan["protocol_version"] = json!(version);
        }
        let lines = run_plan(&python, &plan).await;
        let tools: Vec<&str> =
            step(&lines, "list_tools", 0)["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
        for shown in ["everything__echo", "remote__echo", "remote__get-sum"] {
            assert!(tools.contains(&shown), "{version:?}: {tools:?}");
        }
        assert!(!tools.iter().any(|t| t.ends_with("__get-env")), "{version:?}: {tools:?}");
        let echoed = step(&lines, "call_tool", 0);
        assert_eq!(text(echoed), "Echo: over http", "{version:?}: {echoed}");
        let denied = step(&lines, "call_tool", 1);
        assert_eq!(denied["is_error"], true, "{version:?}: {denied}");
        assert!(text(denied).contains("everything.no-secret-echo"), "{version:?}: {denied}");
        let long = step(&lines, "call_tool", 2);
        assert_eq!(long["is_error"], false, "{version:?}: {long}");
        let done = lines.last().unwrap();
        let expected = version.unwrap_or("2026-07-28");
        assert_eq!(done["protocol_version"], expected, "{done}");
    }
    let received = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!received.contains("a secret"), "{received}");

    // The HTTP upstream dies: its calls fail in bounded time; the stdio one still works.
    remote.kill().await.unwrap();
    let plan = json!({"transport": "http", "url": gateway.url, "headers": auth, "timeout": 60, "protocol_version": "2025-06-18",
                      "steps": [{"op": "call_tool", "name": "remote__echo", "arguments": {"message": "anyone"}},
                                {"op": "call_tool", "name": "everything__echo", "arguments": {"message": "still here"}}]});
    let started = Instant::now();
    let lines = run_plan(&python, &plan).await;
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
    let gone = step(&lines, "call_tool", 0);
    assert!(gone["error"].is_object() || gone["is_error"] == true, "{gone}");
    assert_eq!(text(step(&lines, "call_tool", 1)), "Echo: still here", "{lines:#?}");

    // Decisions are made for the token's user and agent, in the session the
    // header names, within the client's own: its token's hash comes first.
    let own = format!("{}/agent-run-7", &token_sha256[..8]);
    let audit = monitor.audit().await;
    let decisions: Vec<_> = audit.iter().filter(|r| r.kind == "decision").collect();
    assert!(!decisions.is_empty());
    for record in decisions {
        let actor = record.actor.as_ref().unwrap();
        assert_eq!(
            (actor.user.as_str(), actor.agent.as_str(), actor.session.as_str()),
            ("alice", "cursor", own.as_str())
        );
    }

    // Without a token of this gateway: refused before anything is decided.
    let before = monitor.audit().await.len();
    for headers in [json!({}), json!({"Authorization": "Bearer not-a-client"})] {
        let plan = json!({"transport": "http", "url": gateway.url, "headers": headers, "timeout": 20,
                          "steps": [{"op": "call_tool", "name": "remote__echo", "arguments": {"message": "x"}}]});
        let lines = run_plan(&python, &plan).await;
        let refused = lines.iter().any(|l| l["op"] == "fatal" || l["error"].is_object());
        assert!(refused, "{headers}: {lines:#?}");
    }
    assert_eq!(monitor.audit().await.len(), before);
}

/// One HTTP/1.1 request on its own connection; the status line, headers
/// (lower-cased names) and body as text.
async fn raw_http(
    url: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let authority = url.trim_start_matches("http://").split('/').next().unwrap().to_owned();
    let mut stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let mut request = format!(
        "{method} /mcp HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

#[tokio::test]
async fn over_http_a_session_belongs_to_its_client_and_a_fixed_session_cannot_be_renamed() {
    let Some(((node, script), python)) = parts() else { return };
    let monitor = Monitor::start(EVERYTHING_POLICIES).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            r#"session_header = "x-agent-session"
[[servers]]
name = "everything"
command = "{node}"
args = ["{script}", "stdio"]
[[clients]]
token_sha256 = "{}"
user = "alice"
[[clients]]
token_sha256 = "{}"
user = "bob"
agent = "codex"
session = "pinned-b"
"#,
            sha256_hex("wdn_client_a"),
            sha256_hex("wdn_client_b"),
        ),
    )
    .unwrap();
    let gateway = HttpGateway::start(&config, &monitor.endpoint).await;
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let (status, headers, _) =
        raw_http(&gateway.url, "POST", &[("Authorization", "Bearer wdn_client_a")], initialize).await;
    assert_eq!(status, 200);
    let session = headers.iter().find(|(n, _)| n == "mcp-session-id").map(|(_, v)| v.clone()).expect("a session id");
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#;
    let as_b = [
        ("Authorization", "Bearer wdn_client_b"),
        ("Mcp-Session-Id", session.as_str()),
        ("Mcp-Protocol-Version", "2025-06-18"),
    ];
    for method in ["POST", "GET", "DELETE"] {
        let (status, _, body) = raw_http(&gateway.url, method, &as_b, if method == "POST" { list } else { "" }).await;
        assert_eq!(status, 404, "{method} on another client's session: {body}");
    }
    let as_a = [
        ("Authorization", "Bearer wdn_client_a"),
        ("Mcp-Session-Id", session.as_str()),
        ("Mcp-Protocol-Version", "2025-06-18"),
    ];
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    raw_http(&gateway.url, "POST", &as_a, initialized).await;
    let (status, _, body) = raw_http(&gateway.url, "POST", &as_a, list).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"echo\""), "{body}");
    let (status, _, _) = raw_http(&gateway.url, "POST", &[], list).await;
    assert_eq!(status, 401);

    // Client b's session is fixed: its session header does not rename it.
    let plan = json!({"transport": "http", "url": gateway.url, "timeout": 30,
                      "headers": {"Authorization": "Bearer wdn_client_b", "x-agent-session": "chosen-by-b"},
                      "steps": [{"op": "call_tool", "name": "echo", "arguments": {"message": "from b"}}]});
    let lines = run_plan(&python, &plan).await;
    assert_eq!(text(step(&lines, "call_tool", 0)), "Echo: from b", "{lines:#?}");
    let audit = monitor.audit().await;
    let b = audit.iter().filter_map(|r| r.actor.as_ref()).filter(|a| a.user == "bob").collect::<Vec<_>>();
    assert!(!b.is_empty() && b.iter().all(|a| a.session == "pinned-b" && a.agent == "codex"), "{b:?}");
}

#[tokio::test]
async fn the_http_face_refuses_to_start_without_client_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let output = tokio::process::Command::new(gateway())
        .args(["--listen", "127.0.0.1:0", "--name", "x", "--", "true"])
        .env("WARDEN_TOKEN", HARNESS)
        .env("WARDEN_USER", "alice")
        .current_dir(dir.path())
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("[[clients]]"), "{output:?}");
    let output = tokio::process::Command::new(gateway())
        .args(["--listen", "0.0.0.0:0", "--name", "x", "--", "true"])
        .env("WARDEN_TOKEN", HARNESS)
        .env("WARDEN_USER", "alice")
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("loopback"), "{output:?}");
}

#[tokio::test]
async fn a_server_never_sees_the_gateway_s_warden_token() {
    let Some(((node, script), python)) = parts() else { return };
    // Here the environment tool is allowed: what it shows is what the agent would see.
    let monitor = Monitor::start(
        "@id(\"all\")\n@reason(\"all\")\npermit (principal, action == Action::\"tool.call\", resource in McpServer::\"everything\");\n",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("harness.token");
    std::fs::write(&token_file, HARNESS).unwrap();
    std::fs::set_permissions(&token_file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let mut env = gateway_env(&monitor.endpoint, "alice");
    env["WARDEN_TOKEN_FILE"] = json!(token_file);
    let plan = json!({
        "transport": "stdio", "command": gateway(), "args": ["--name", "everything", "--", node, script, "stdio"],
        "env": env, "timeout": 30,
        "steps": [{"op": "call_tool", "name": "get-env", "arguments": {}}]
    });
    let lines = run_plan(&python, &plan).await;
    let shown = step(&lines, "call_tool", 0);
    assert_eq!(shown["is_error"], false, "{shown}");
    let shown = text(shown);
    assert!(shown.contains("PATH"), "{shown}");
    for leaked in ["WARDEN_TOKEN", HARNESS, "WARDEN_ENDPOINT", "harness.token"] {
        assert!(!shown.contains(leaked), "the server saw `{leaked}`: {shown}");
    }
}

#[tokio::test]
async fn when_the_client_leaves_its_servers_are_stopped_even_one_that_outlives_its_input() {
    let Some(((node, script), python)) = parts() else { return };
    let monitor = Monitor::start(EVERYTHING_POLICIES).await;
    // Names this test's server among the processes (the server ignores
    // arguments after the transport).
    let marker = tempfile::tempdir().unwrap();
    let marker = marker.path().to_str().unwrap().to_owned();
    let plan = json!({
        "transport": "stdio", "command": gateway(),
        "args": ["--name", "everything", "--", node, script, "stdio", marker],
        "env": gateway_env(&monitor.endpoint, "alice"), "timeout": 30,
        // A timer running: the server no longer exits when its input closes.
        "steps": [
            {"op": "listen", "resource_subscriptions": ["demo://resource/static/document/architecture.md"]},
            {"op": "call_tool", "name": "toggle-subscriber-updates", "arguments": {}},
        ]
    });
    let lines = run_plan(&python, &plan).await;
    assert!(step(&lines, "call_tool", 0)["text"].as_str().unwrap().contains("Started"), "{lines:#?}");
    let running = || {
        let ps = std::process::Command::new("ps").args(["-ww", "-eo", "pid=,args="]).output().unwrap();
        let listed = String::from_utf8_lossy(&ps.stdout).into_owned();
        listed
            .lines()
            .find(|l| l.contains(&marker) && l.contains("node"))
            .and_then(|l| l.split_whitespace().next().map(str::to_owned))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while running().is_some() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if let Some(pid) = running() {
        // Not left behind by a failing test (it would hold the test's output open).
        let _ = std::process::Command::new("kill").arg(&pid).status();
        panic!("the server (pid {pid}) outlived its client");
    }
}
