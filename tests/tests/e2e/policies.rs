//! Policy sets other than the bundled one: a different schema, context
//! fields from the harness, and a policy whose evaluation errors.

use tonic::Code;
use warden_proto::v1 as pb;

use crate::support::{HARNESS, PolicyDir, TestMonitor, http, request};

const SCHEMA: &str = r#"
entity User;
entity Agent;
entity Session in [User, Agent] { user: String };
entity Domain in [Domain];
entity Url in [Domain] { port: Long, method: String };
type Ctx = { now: datetime, approved: Bool, justification: String, ticket?: String };
action "http.request" appliesTo { principal: Session, resource: Url, context: Ctx };
"#;

const ENTITIES: &str = r#"[{ "uid": { "type": "User", "id": "alice" }, "attrs": {}, "parents": [] }]"#;

#[tokio::test]
async fn an_erroring_forbid_denies_instead_of_being_skipped() {
    let policies = PolicyDir::new(
        SCHEMA,
        &[(
            "p.cedar",
            r#"
            @id("everything") @reason("open by default")
            permit (principal, action, resource);

            @id("overflowing") @reason("port arithmetic")
            forbid (principal, action, resource)
            when { resource.port * 4611686018427387904 > 0 };
            "#,
        )],
        ENTITIES,
    );
    let monitor = TestMonitor::start_with(policies.path()).await;
    let mut client = monitor.authority(HARNESS).await;
    let decision =
        client.authorize(request("http.request", http("GET", "https://example.com/"))).await.unwrap().into_inner();
    assert_eq!(decision.outcome, pb::Outcome::Deny as i32, "{decision:?}");
    assert_eq!(decision.policy_ids, ["overflowing"]);
    assert!(decision.reasons[0].contains("`overflowing` could not be evaluated"), "{:?}", decision.reasons);
}

#[tokio::test]
async fn schema_declared_context_from_the_harness_reaches_the_policies() {
    let policies = PolicyDir::new(
        SCHEMA,
        &[(
            "p.cedar",
            r#"
            @id("after-2020") @reason("the clock is passed in")
            permit (principal, action, resource) when { context.now > datetime("2020-01-01") };

            @id("ticket-required") @reason("changes need an OPS ticket")
            forbid (principal, action, resource)
            unless { context has ticket && context.ticket like "OPS-*" };
            "#,
        )],
        ENTITIES,
    );
    let monitor = TestMonitor::start_with(policies.path()).await;
    let mut client = monitor.authority(HARNESS).await;
    let ask = |context: &str| pb::AuthorizeRequest {
        context_json: context.to_owned(),
        ..request("http.request", http("POST", "https://api.example.com/deploy"))
    };
    let allowed = client.authorize(ask(r#"{"ticket": "OPS-17"}"#)).await.unwrap().into_inner();
    assert_eq!(allowed.outcome, pb::Outcome::Allow as i32, "{allowed:?}");
    assert_eq!(allowed.policy_ids, ["after-2020"]);

    let denied = client.authorize(ask("")).await.unwrap().into_inner();
    assert_eq!(denied.outcome, pb::Outcome::Deny as i32);
    assert_eq!(denied.policy_ids, ["ticket-required"]);

    let status = client.authorize(ask(r#"{"ticket": 17}"#)).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().starts_with("context_json:"), "{}", status.message());
}

#[tokio::test]
async fn invalid_policies_refuse_to_start_with_file_and_line() {
    let policies = PolicyDir::new(
        SCHEMA,
        &[
            ("good.cedar", "@id(\"a\") permit(principal, action, resource);"),
            ("bad.cedar", "@id(\"b\")\npermit(principal, action, resource) when { resource.nope };"),
        ],
        ENTITIES,
    );
    let data = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = warden_monitor::server::ServerConfig::new(policies.path(), data.path().to_owned(), vec![]);
    let Err(error) = warden_monitor::server::start(config, listener).await else {
        panic!("started with a broken policy")
    };
    let text = error.to_string();
    assert!(text.contains("bad.cedar:2:"), "{text}");
}
