//! Sessions: within its harness and user, a session belongs to the agent
//! kind that first used it (across harnesses and users, see
//! `security::a_session_id_is_scoped_to_its_harness_and_user`).

use warden_sdk::{ActionRequest, Actor, Outcome};

use crate::support::TestMonitor;

/// Within its harness and user, a session belongs to the agent kind that
/// first used it (across harnesses and users, see
/// `security::a_session_id_is_scoped_to_its_harness_and_user`).
#[tokio::test]
async fn a_session_belongs_to_its_first_agent() {
    let monitor = TestMonitor::start().await;
    let harness = monitor.harness().await;
    let read = || ActionRequest::read_file("/home/bob/work/notes.md");
    let bob = Actor::new("bob", "codex", "shared-id");
    assert_eq!(harness.authorize(&bob, read()).await.unwrap().outcome, Outcome::Allow);
    let intruder = Actor::new("bob", "claude-code", "shared-id");
    let denied = harness.authorize(&intruder, read()).await.unwrap();
    assert_eq!(denied.outcome, Outcome::Deny);
    assert!(
        denied.reasons[0].contains("session `shared-id` belongs to agent `codex`, not to agent `claude-code`"),
        "{:?}",
        denied.reasons
    );
}
