//! Every protocol version the gateway accepts, served in that version's
//! terms: the Python client's default (2026-07-28: `server/discover`, no
//! handshake, `resultType` and cache hints on every result, change
//! notifications on `subscriptions/listen`, log messages only for a
//! request that asks) and each version reached with `initialize`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

/// Every kind of request a client makes of the gateway, each of which must
/// come back in the negotiated version's shape (the Python client validates
/// each result against that version's schema, and a step whose result does
/// not validate prints an error).
fn every_method() -> Value {
    json!([
        {"op": "list_tools"},
        {"op": "call_tool", "name": "echo", "arguments": {"message": "in the client's own version"}},
        {"op": "call_tool", "name": "echo", "arguments": {"message": "a secret"}},
        {"op": "list_resources"},
        {"op": "list_resource_templates"},
        {"op": "read_resource", "uri": "demo://resource/static/document/architecture.md"},
        {"op": "list_prompts"},
        {"op": "get_prompt", "name": "args-prompt", "arguments": {"city": "Paris"}},
        {"op": "complete", "prompt": "completable-prompt", "argument": {"name": "department", "value": "Eng"}},
        {"op": "complete", "prompt": "completable-prompt", "argument": {"name": "name", "value": "A"},
         "context": {"department": "Engineering"}},
        // Completing a template Warden forbids reading is refused like the read.
        {"op": "complete", "template": "demo://resource/dynamic/text/{resourceId}",
         "argument": {"name": "resourceId", "value": "1"}},
    ])
}

fn checked_every_method(lines: &[Value], version: &str) {
    let no_error = |op: &str, i: usize| {
        let line = step(lines, op, i);
        assert!(line.get("error").is_none(), "{version}: {op} #{i} failed: {line}");
        line
    };
    let tools = no_error("list_tools", 0)["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t == "echo") && !tools.iter().any(|t| t == "get-env"), "{version}: {tools:?}");
    let echoed = no_error("call_tool", 0);
    assert_eq!(echoed["text"], "Echo: in the client's own version", "{version}: {echoed}");
    let denied = no_error("call_tool", 1);
    assert_eq!(denied["is_error"], true, "{version}: {denied}");
    assert!(denied["text"].as_str().unwrap().contains("everything.no-secret-echo"), "{version}: {denied}");
    let resources = no_error("list_resources", 0)["resources"].as_array().unwrap();
    assert!(resources.iter().any(|r| r == "demo://resource/static/document/architecture.md"), "{version}");
    let templates = no_error("list_resource_templates", 0)["templates"].as_array().unwrap();
    assert!(templates.iter().any(|t| t == "demo://resource/dynamic/text/{resourceId}"), "{version}: {templates:?}");
    assert!(no_error("read_resource", 0)["text"].as_str().unwrap().contains("Architecture"), "{version}");
    let prompts = no_error("list_prompts", 0)["prompts"].as_array().unwrap();
    assert!(prompts.iter().any(|p| p == "completable-prompt"), "{version}: {prompts:?}");
    assert!(no_error("get_prompt", 0).to_string().contains("Paris"), "{version}");
    assert_eq!(no_error("complete", 0)["values"], json!(["Engineering"]), "{version}");
    assert_eq!(no_error("complete", 1)["values"], json!(["Alice"]), "{version}");
    let refused = step(lines, "complete", 2);
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("everything.no-dynamic-resources"), "{version}: {refused}");
    let done = lines.last().unwrap();
    assert_eq!(done["op"], "done", "{version}: {lines:#?}");
    assert_eq!(done["protocol_version"], version, "{version}: {done}");
}

#[tokio::test]
async fn the_python_client_s_default_2026_07_28_and_every_handshake_version_are_served_in_their_own_terms() {
    let Some(((node, script), python)) = parts() else { return };
    let monitor = Monitor::start(EVERYTHING_POLICIES).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("upstream.log");
    // No protocol_version: the client's default, which probes
    // `server/discover` at 2026-07-28 and takes it when the server does.
    let mut versions = vec![None];
    versions.extend(["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"].map(Some));
    for version in versions {
        let mut plan = json!({
            "transport": "stdio", "command": gateway(), "args": gateway_args(&node, &script, &log),
            "env": gateway_env(&monitor.endpoint, "alice"), "timeout": 30, "steps": every_method(),
        });
        if let Some(version) = version {
            plan["protocol_version"] = json!(version);
        }
        let lines = run_plan(&python, &plan).await;
        checked_every_method(&lines, version.unwrap_or("2026-07-28"));
    }
    let received = std::fs::read_to_string(&log).unwrap();
    assert!(!received.contains("a secret"), "a denied call reached the server: {received}");
    assert!(!received.contains("\"resourceId\""), "a refused completion reached the server: {received}");
}

#[tokio::test]
async fn over_streamable_http_the_default_2026_07_28_client_is_served_every_method_statelessly() {
    let Some(((node, script), python)) = parts() else { return };
    let monitor = Monitor::start(EVERYTHING_POLICIES).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[[servers]]\nname = \"everything\"\ncommand = \"{node}\"\nargs = [\"{script}\", \"stdio\"]\n[[clients]]\ntoken_sha256 = \"{}\"\nuser = \"alice\"\n",
            sha256_hex("wdn_protocol_client")
        ),
    )
    .unwrap();
    let gateway = HttpGateway::start(&config, &monitor.endpoint).await;
    let plan = json!({"transport": "http", "url": gateway.url, "timeout": 60,
                      "headers": {"Authorization": "Bearer wdn_protocol_client"}, "steps": every_method()});
    let lines = run_plan(&python, &plan).await;
    checked_every_method(&lines, "2026-07-28");
}

/// The raw answers, for what the Python client would accept anyway: what is
/// on the wire is each version's shape exactly.
#[tokio::test]
async fn on_the_wire_each_answer_has_the_fields_of_the_client_s_version_and_no_others() {
    let Some((node, script)) = everything() else { return };
    let monitor = Monitor::start(EVERYTHING_POLICIES).await;
    let dir = tempfile::tempdir().unwrap();
    let args = gateway_args(&node, &script, &dir.path().join("upstream.log"));
    let path = std::env::var("PATH").unwrap_or_default();
    let env = [
        ("WARDEN_ENDPOINT", monitor.endpoint.as_str()),
        ("WARDEN_TOKEN", HARNESS),
        ("WARDEN_USER", "alice"),
        ("PATH", path.as_str()),
    ];
    let read = json!({"uri": "demo://resource/static/document/architecture.md"});
    let complete = json!({"ref": {"type": "ref/prompt", "name": "completable-prompt"},
                          "argument": {"name": "department", "value": "Sa"}});
    let cacheable = ["tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read"];
    let methods = [
        ("tools/list", json!({})),
        ("tools/call", json!({"name": "echo", "arguments": {"message": "wire"}})),
        ("prompts/list", json!({})),
        ("prompts/get", json!({"name": "args-prompt", "arguments": {"city": "Oslo"}})),
        ("resources/list", json!({})),
        ("resources/templates/list", json!({})),
        ("resources/read", read),
        ("completion/complete", complete),
    ];

    // 2026-07-28: no handshake; `server/discover`, then every request
    // with its own `_meta`.
    let mut raw = RawStdio::start(&args, &env);
    let meta = RawStdio::meta_2026();
    let discovered = raw.request("server/discover", json!({"_meta": meta})).await;
    let result = &discovered["result"];
    assert_eq!(result["resultType"], "complete", "{discovered}");
    let versions = result["supportedVersions"].as_array().unwrap();
    for version in ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"] {
        assert!(versions.iter().any(|v| v == version), "{version}: {discovered}");
    }
    // The upstream's capabilities, known before any other request.
    for capability in ["tools", "resources", "prompts", "completions"] {
        assert!(result["capabilities"].get(capability).is_some(), "{capability}: {discovered}");
    }
    for (method, params) in &methods {
        let mut params = params.clone();
        params["_meta"] = meta.clone();
        let answer = raw.request(method, params).await;
        let result = &answer["result"];
        assert_eq!(result["resultType"], "complete", "2026-07-28 {method}: {answer}");
        if cacheable.contains(method) {
            assert_eq!(result["cacheScope"], "private", "2026-07-28 {method}: {answer}");
            assert_eq!(result["ttlMs"], 0, "2026-07-28 {method}: {answer}");
        }
    }
    // What 2026-07-28 removed is not answered as if it were there.
    for (method, params) in [
        ("ping", json!({})),
        ("logging/setLevel", json!({"level": "debug"})),
        ("resources/subscribe", json!({"uri": "demo://resource/static/document/architecture.md"})),
    ] {
        let mut params = params;
        params["_meta"] = meta.clone();
        let answer = raw.request(method, params).await;
        assert_eq!(answer["error"]["code"], -32601, "2026-07-28 {method}: {answer}");
    }
    raw.finish().await;

    // Each version with `initialize`: the same methods, in that version's
    // shape (no `resultType`, no cache hints), and what it has answered.
    for version in ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"] {
        let mut raw = RawStdio::start(&args, &env);
        let initialized = raw
            .request(
                "initialize",
                json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}),
            )
            .await;
        assert_eq!(initialized["result"]["protocolVersion"], version, "{initialized}");
        raw.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        for (method, params) in &methods {
            let answer = raw.request(method, params.clone()).await;
            assert!(answer["result"].is_object(), "{version} {method}: {answer}");
            for field in ["resultType", "cacheScope", "ttlMs"] {
                assert!(answer["result"].get(field).is_none(), "{version} {method}: {field} in {answer}");
            }
        }
        for (method, params) in [
            ("ping", json!({})),
            ("logging/setLevel", json!({"level": "debug"})),
            ("resources/subscribe", json!({"uri": "demo://resource/static/document/architecture.md"})),
            ("resources/unsubscribe", json!({"uri": "demo://resource/static/document/architecture.md"})),
        ] {
            let answer = raw.request(method, params).await;
            assert_eq!(answer["result"], json!({}), "{version} {method}: {answer}");
        }
        raw.finish().await;
    }
}

#[tokio::test]
async fn a_policy_change_reaches_an_older_client_directly_and_a_2026_07_28_client_only_on_its_listen_stream() {
    let Some(((node, script), python)) = parts() else { return };
    let monitor = Monitor::start(EVERYTHING_POLICIES).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "list_refresh_seconds = 1\n[[servers]]\nname = \"everything\"\ncommand = \"{node}\"\nargs = [\"{script}\", \"stdio\"]\n[[clients]]\ntoken_sha256 = \"{}\"\nuser = \"alice\"\n",
            sha256_hex("wdn_protocol_client")
        ),
    )
    .unwrap();
    let http = HttpGateway::start(&config, &monitor.endpoint).await;
    let stdio = json!({"transport": "stdio", "command": gateway(), "args": ["--config", config],
                       "env": gateway_env(&monitor.endpoint, "alice")});
    let over_http =
        json!({"transport": "http", "url": http.url, "headers": {"Authorization": "Bearer wdn_protocol_client"}});
    // (how the client connects, its version (None: its default,
    // 2026-07-28), whether it listens, whether it is told)
    let cases = [
        (&stdio, Some("2025-11-25"), false, true),
        (&stdio, None, true, true),
        (&stdio, None, false, false),
        // Over HTTP each request of 2026-07-28 is a connection of its own:
        // the listen stream's is told of a change from what the client's
        // list request was shown.
        (&over_http, None, true, true),
    ];
    for (connection, version, listens, told) in cases {
        let case = format!("{} {version:?}, listening {listens}", connection["transport"]);
        let awaited =
            if listens { "listen:notifications/tools/list_changed" } else { "notifications/tools/list_changed" };
        let mut steps = vec![json!({"op": "list_tools"})];
        if listens {
            steps.push(json!({"op": "listen", "tools_list_changed": true, "prompts_list_changed": true,
                              "resources_list_changed": true}));
        }
        steps.extend([
            json!({"op": "wait_stdin_line"}),
            json!({"op": "wait_notification", "method": awaited, "timeout": if told { 20 } else { 5 }}),
            json!({"op": "list_tools"}),
        ]);
        let mut plan = connection.clone();
        plan["timeout"] = json!(60);
        plan["steps"] = json!(steps);
        if let Some(version) = version {
            plan["protocol_version"] = json!(version);
        }
        let mut run = ClientRun::start(&python, &plan);
        let before = run.next().await;
        assert!(before["tools"].as_array().unwrap().iter().any(|t| t == "echo"), "{case}: {before}");
        if listens {
            // What the stream carries: the gateway's own list, and the
            // upstream's lists the gateway passes on.
            let listening = run.next().await;
            let honored = &listening["honored"];
            for kind in ["toolsListChanged", "promptsListChanged", "resourcesListChanged"] {
                assert_eq!(honored[kind], true, "{case}: {kind}: {listening}");
            }
        }
        // The security team forbids echo outright.
        let policies = monitor.policies.path().join("test.cedar");
        let forbid = "\n@id(\"no-echo\")\n@reason(\"no echo today\")\nforbid (principal, action, resource) when { resource is Tool && resource.name == \"echo\" };\n";
        std::fs::write(&policies, format!("{EVERYTHING_POLICIES}{forbid}")).unwrap();
        run.go_on().await;
        let _ = run.next().await; // wait_stdin_line
        let notified = run.next().await;
        let after = run.next().await;
        assert_eq!(notified["received"], told, "{case}: {notified}");
        assert!(!after["tools"].as_array().unwrap().iter().any(|t| t == "echo"), "{case}: {after}");
        let done = run.rest().await;
        let counts = &done.last().unwrap()["counts"];
        if version.is_none() {
            // At 2026-07-28 a change is told on a listen stream only, never
            // as a notification of its own.
            assert_eq!(
                counts["notifications/tools/list_changed"],
                counts.get("listen:notifications/tools/list_changed").cloned().unwrap_or(Value::Null),
                "{case}: {counts}"
            );
        }
        std::fs::write(&policies, EVERYTHING_POLICIES).unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
}

#[tokio::test]
async fn log_messages_reach_a_2026_07_28_client_only_for_a_request_that_asks_for_them() {
    let Some(((node, script), python)) = parts() else { return };
    let monitor = Monitor::start(EVERYTHING_POLICIES).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("upstream.log");
    // The reference server, once told, logs at random levels every 5 s;
    // the long call is in flight over one of those.
    let steps = json!([
        {"op": "call_tool", "name": "toggle-simulated-logging", "arguments": {}},
        {"op": "call_tool", "name": "trigger-long-running-operation", "arguments": {"duration": 6, "steps": 2}},
        // Off again: a server with a timer running outlives its input.
        {"op": "call_tool", "name": "toggle-simulated-logging", "arguments": {}},
    ]);
    // (the version, None for the client's default 2026-07-28; the level its
    // requests ask for; whether log messages arrive)
    for (version, level, arrive) in [(Some("2025-11-25"), None, true), (None, Some("debug"), true), (None, None, false)]
    {
        let mut plan = json!({
            "transport": "stdio", "command": gateway(), "args": gateway_args(&node, &script, &log),
            "env": gateway_env(&monitor.endpoint, "alice"), "timeout": 30, "steps": steps,
        });
        if let Some(version) = version {
            plan["protocol_version"] = json!(version);
        }
        if let Some(level) = level {
            plan["log_level"] = json!(level);
        }
        let lines = run_plan(&python, &plan).await;
        let long = step(&lines, "call_tool", 1);
        assert!(long["text"].as_str().unwrap_or_default().contains("completed"), "{version:?}: {long}");
        let done = lines.last().unwrap();
        let messages = done["counts"]["notifications/message"].as_u64().unwrap_or(0);
        assert_eq!(messages > 0, arrive, "{version:?}, level {level:?}: {done}");
    }
}

#[tokio::test]
async fn at_2026_07_28_a_listen_stream_carries_the_updates_of_the_resources_it_names() {
    let Some(((node, script), python)) = parts() else { return };
    let monitor = Monitor::start(EVERYTHING_POLICIES).await;
    let dir = tempfile::tempdir().unwrap();
    let uri = "demo://resource/static/document/architecture.md";
    // The gateway subscribes upstream (with `resources/subscribe`, which
    // the server speaks) for the stream's lifetime; the server, once told,
    // sends an update for each subscription at once and every 5 s.
    let plan = json!({
        "transport": "stdio", "command": gateway(), "args": gateway_args(&node, &script, &dir.path().join("log")),
        "env": gateway_env(&monitor.endpoint, "alice"), "timeout": 30,
        "steps": [
            {"op": "listen", "resource_subscriptions": [uri]},
            {"op": "call_tool", "name": "toggle-subscriber-updates", "arguments": {}},
            {"op": "wait_notification", "method": "listen:notifications/resources/updated", "timeout": 15},
            // Off again: a server with a timer running outlives its input.
            {"op": "call_tool", "name": "toggle-subscriber-updates", "arguments": {}},
        ]
    });
    let lines = run_plan(&python, &plan).await;
    assert_eq!(step(&lines, "listen", 0)["honored"]["resourceSubscriptions"], json!([uri]), "{lines:#?}");
    assert_eq!(step(&lines, "wait_notification", 0)["received"], true, "{lines:#?}");
    let received = std::fs::read_to_string(dir.path().join("log")).unwrap();
    assert!(received.contains("resources/subscribe"), "{received}");
}
