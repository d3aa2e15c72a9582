//! Session labels and the lethal trifecta: labels follow the session, survive
//! a restart, and an admin can clear them.

use warden_proto::v1 as pb;
use warden_sdk::{ActionRequest, Actor, Outcome};

use crate::support::TestMonitor;

#[tokio::test]
async fn the_lethal_trifecta_ends_pending_for_the_exfiltration_attempt() {
    let mut monitor = TestMonitor::start().await;
    let harness = monitor.harness().await;
    let agent = Actor::new("alice", "claude-code", "trifecta");
    let mut admin = monitor.admin().await;
    let labels = |admin: &mut crate::support::Admin| {
        let mut admin = admin.clone();
        async move {
            admin
                .get_session(pb::GetSessionRequest { session: "trifecta".into(), ..Default::default() })
                .await
                .unwrap()
                .into_inner()
                .labels
        }
    };

    // 1. The agent reads a web page (untrusted input).
    let read_web =
        harness.authorize(&agent, ActionRequest::http("GET", "https://blog.example.com/howto")).await.unwrap();
    assert_eq!(read_web.outcome, Outcome::Allow);
    assert_eq!(labels(&mut admin).await, ["untrusted-input"]);
    // The answer says what it gave the session; the same request id asked
    // again gives nothing more, and says so.
    assert_eq!(read_web.labels, ["untrusted-input"]);
    let again = harness
        .authorize(
            &agent,
            ActionRequest::http("GET", "https://blog.example.com/howto").request_id(read_web.request_id.clone()),
        )
        .await
        .unwrap();
    assert_eq!((again.outcome, again.labels.len()), (Outcome::Allow, 0));
    // With one label, posting an issue is still fine.
    let post = || ActionRequest::http("POST", "https://api.github.com/repos/acme/app/issues");
    assert_eq!(harness.authorize(&agent, post()).await.unwrap().outcome, Outcome::Allow);

    // 2. It reads a private file (private data).
    let private =
        harness.authorize(&agent, ActionRequest::read_file("/home/alice/private/salaries.csv")).await.unwrap();
    assert_eq!(private.outcome, Outcome::Allow);
    assert_eq!(labels(&mut admin).await, ["private-data", "untrusted-input"]);

    // 3. It tries to send data out: a person must look first.
    assert_eq!(private.labels, ["private-data"]);
    let exfiltrate = harness.authorize(&agent, post()).await.unwrap();
    assert_eq!(exfiltrate.outcome, Outcome::Pending);
    assert!(exfiltrate.labels.is_empty(), "{exfiltrate:?}");
    assert_eq!(exfiltrate.policy_ids, ["trifecta.no-exfiltration"]);
    assert!(exfiltrate.reasons[0].contains("could leak"), "{:?}", exfiltrate.reasons);
    let chat = harness.authorize(&agent, ActionRequest::call_tool("slack", "post_message", r#"{"text":"..."}"#)).await;
    assert_eq!(chat.unwrap().outcome, Outcome::Pending);
    // Another session of the same user is not tainted.
    let fresh = Actor::new("alice", "claude-code", "fresh");
    assert_eq!(harness.authorize(&fresh, post()).await.unwrap().outcome, Outcome::Allow);

    // Labels survive a restart.
    monitor.restart().await;
    let harness = monitor.harness().await;
    let mut admin = monitor.admin().await;
    assert_eq!(labels(&mut admin).await, ["private-data", "untrusted-input"]);
    assert_eq!(harness.authorize(&agent, post()).await.unwrap().outcome, Outcome::Pending);

    // An admin clears them (audited), and the session may post again.
    let cleared = admin
        .clear_session_labels(pb::ClearSessionLabelsRequest {
            session: "trifecta".into(),
            reason: "reviewed".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(cleared.labels.is_empty());
    assert_eq!(harness.authorize(&agent, post()).await.unwrap().outcome, Outcome::Allow);
    assert!(monitor.audit().await.iter().any(|r| r.kind == "session.labels-cleared"));
    assert!(monitor.verify().await.ok);
}
