//! Bad input is INVALID_ARGUMENT with a message that names the field.

use tonic::Code;
use warden_proto::v1 as pb;

use crate::support::{HARNESS, TestMonitor, command, file, http, request};

type R = pb::authorize_request::Resource;

#[tokio::test]
async fn each_bad_input_names_its_field() {
    let monitor = TestMonitor::start().await;
    let mut client = monitor.authority(HARNESS).await;
    let with_actor = |user: &str, agent: &str, session: &str| {
        let mut r = request("fs.read", file("/home/alice/project/x"));
        r.actor = Some(pb::Actor { user: user.into(), agent: agent.into(), session: session.into() });
        r
    };
    let long = "x".repeat(5000);
    let cases: Vec<(&str, pb::AuthorizeRequest)> = vec![
        ("actor", pb::AuthorizeRequest { actor: None, ..request("fs.read", file("/x")) }),
        ("actor.user", with_actor("", "claude-code", "s1")),
        ("actor.agent", with_actor("alice", "", "s1")),
        ("actor.session", with_actor("alice", "claude-code", " ")),
        ("actor.session", with_actor("alice", "claude-code", &long)),
        ("actor.user", with_actor("ali\nce", "claude-code", "s1")),
        ("action", request("", file("/x"))),
        ("action", request("fs.chmod", file("/x"))),
        ("resource", pb::AuthorizeRequest { resource: None, ..request("fs.read", file("/x")) }),
        ("resource", request("exec", file("/x"))),
        ("resource.file.path", request("fs.read", file("relative/path"))),
        ("resource.file.path", request("fs.read", file(""))),
        ("resource.file.path", request("fs.read", file(&format!("/{long}")))),
        (
            "resource.file.cwd",
            request(
                "fs.read",
                R::File(pb::FileResource { path: "x".into(), cwd: "also/relative".into(), pattern: false }),
            ),
        ),
        ("resource.command.argv", request("exec", command(&[]))),
        ("resource.command.argv", request("exec", command(&["/usr/bin/"]))),
        ("resource.http.url", request("http.request", http("GET", "not a url"))),
        ("resource.http.url", request("http.request", http("GET", "ftp://example.com/"))),
        ("resource.http.method", request("http.request", http("", "https://crates.io/"))),
        ("resource.secret.name", request("secret.use", R::Secret(pb::SecretResource { name: String::new() }))),
        (
            "resource.tool.server",
            request(
                "tool.call",
                R::Tool(pb::ToolResource { server: "a/b".into(), name: "t".into(), arguments_json: String::new() }),
            ),
        ),
        (
            "resource.tool.arguments_json",
            request(
                "tool.call",
                R::Tool(pb::ToolResource { server: "docs".into(), name: "t".into(), arguments_json: "{".into() }),
            ),
        ),
        ("context_json", pb::AuthorizeRequest { context_json: "[1]".into(), ..request("fs.read", file("/x")) }),
        (
            "context_json",
            pb::AuthorizeRequest { context_json: r#"{"approved": true}"#.into(), ..request("fs.read", file("/x")) },
        ),
        (
            "context_json",
            pb::AuthorizeRequest { context_json: r#"{"undeclared": 1}"#.into(), ..request("fs.read", file("/x")) },
        ),
        ("justification", pb::AuthorizeRequest { justification: long.repeat(2), ..request("fs.read", file("/x")) }),
        ("request_id", pb::AuthorizeRequest { request_id: long.clone(), ..request("fs.read", file("/x")) }),
    ];
    for (field, case) in cases {
        let status = client.authorize(case).await.expect_err(field);
        assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
        assert!(
            status.message().starts_with(&format!("{field}:")),
            "expected the message to name `{field}`: {}",
            status.message()
        );
    }
    let status = client
        .await_decision(pb::AwaitDecisionRequest { approval_id: String::new(), timeout_ms: 1 })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().starts_with("approval_id:"));
    // A NUL (which a PostgreSQL store could not even look up) is bad input too.
    let status = client
        .await_decision(pb::AwaitDecisionRequest { approval_id: "apr-\0x".into(), timeout_ms: 1 })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().starts_with("approval_id:"));
    let status = client
        .await_decision(pb::AwaitDecisionRequest { approval_id: "apr-nope".into(), timeout_ms: 1 })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    // Bad input is not a decision: it is recorded as refused input only.
    let records = monitor.audit().await;
    assert!(!records.is_empty());
    assert!(records.iter().all(|r| r.kind == "invalid-request"), "{records:?}");
}
