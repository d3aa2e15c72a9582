//! Decisions over real gRPC with the bundled policies.

use std::time::Duration;

use warden_proto::v1 as pb;
use warden_sdk::{ActionRequest, Actor, Decision, Error, Outcome};

use crate::support::TestMonitor;

fn alice() -> Actor {
    Actor::new("alice", "claude-code", "s1")
}

#[tokio::test]
async fn reading_inside_the_workspace_is_allowed_with_the_permitting_policy() {
    let monitor = TestMonitor::start().await;
    let client = monitor.harness().await;
    let decision =
        client.authorize(&alice(), ActionRequest::read_file("src/main.rs").cwd("/home/alice/project")).await.unwrap();
    assert_eq!(decision.outcome, Outcome::Allow);
    assert_eq!(decision.policy_ids, ["files.workspace-read-write"]);
    assert!(decision.reasons[0].contains("workspace"), "{:?}", decision.reasons);
    assert_eq!(decision.audit_seq, 1);
    assert!(decision.policy_version.starts_with("sha256:"));
    // check() agrees.
    let allowed = client.check(&alice(), ActionRequest::read_file("/home/alice/project/README.md")).await.unwrap();
    assert_eq!(allowed.audit_seq, 2);
}

#[tokio::test]
async fn outside_the_workspace_nothing_permits_and_the_reason_says_so() {
    let monitor = TestMonitor::start().await;
    let client = monitor.harness().await;
    let decision = client.authorize(&alice(), ActionRequest::read_file("/etc/shadow")).await.unwrap();
    assert_eq!(decision.outcome, Outcome::Deny);
    assert!(decision.policy_ids.is_empty(), "{:?}", decision.policy_ids);
    assert_eq!(decision.reasons, [r#"no policy permits `fs.read` on File::"/etc/shadow""#]);
    // Another user's workspace is not alice's.
    let decision = client.authorize(&alice(), ActionRequest::read_file("/home/bob/work/x.rs")).await.unwrap();
    assert_eq!(decision.outcome, Outcome::Deny);
}

#[tokio::test]
async fn a_hard_forbid_beats_a_permit_and_names_itself() {
    let monitor = TestMonitor::start().await;
    let client = monitor.harness().await;
    // Inside the workspace (permitted) but a credential file (forbidden).
    for path in [
        "/home/alice/project/.env",
        "/home/alice/project/deploy/.ssh/id_ed25519",
        "/home/alice/project/a/../.env.local",
    ] {
        let decision = client.authorize(&alice(), ActionRequest::read_file(path)).await.unwrap();
        assert_eq!(decision.outcome, Outcome::Deny, "{path}");
        assert_eq!(decision.policy_ids, ["files.no-credentials"], "{path}");
        assert!(decision.reasons[0].contains("credential files"), "{:?}", decision.reasons);
    }
    let denied = client.check(&alice(), ActionRequest::read_file("/home/alice/project/.env")).await;
    assert!(matches!(denied, Err(Error::Denied(ref d)) if d.policy_ids == ["files.no-credentials"]), "{denied:?}");
    // A hard forbid stays a DENY even though a person could approve other things.
    let decision = client.authorize(&alice(), ActionRequest::http("GET", "http://github.com/x")).await.unwrap();
    assert_eq!(decision.outcome, Outcome::Deny);
    assert_eq!(decision.policy_ids, ["http.tls-only"]);
}

#[tokio::test]
async fn a_risky_action_is_pending_with_an_approval_and_deadline() {
    let monitor = TestMonitor::start().await;
    let client = monitor.harness().await;
    let decision = client
        .authorize(&alice(), ActionRequest::exec(["git", "push", "origin", "main"]).justification("release 1.2"))
        .await
        .unwrap();
    assert_eq!(decision.outcome, Outcome::Pending);
    assert_eq!(decision.policy_ids, ["commands.protected-branch-push"]);
    assert!(decision.approval_id.starts_with("apr-"));
    let expires = decision.expires_at.expect("a deadline");
    let left = expires.duration_since(std::time::SystemTime::now()).unwrap();
    // @timeout("15m") on the policy.
    assert!(left > Duration::from_secs(14 * 60) && left <= Duration::from_secs(15 * 60), "{left:?}");

    // Nobody answers within the wait: still PENDING, same approval.
    let waited = client.await_decision(&decision.approval_id, Duration::from_millis(200)).await.unwrap();
    assert_eq!(waited.outcome, Outcome::Pending);
    assert_eq!(waited.approval_id, decision.approval_id);
    assert_eq!(waited.audit_seq, decision.audit_seq);

    // A push to a feature branch is simply allowed.
    let decision =
        client.authorize(&alice(), ActionRequest::exec(["/usr/bin/git", "push", "origin", "feature/x"])).await.unwrap();
    assert_eq!(decision.outcome, Outcome::Allow, "{:?}", decision.reasons);
}

#[tokio::test]
async fn rights_come_from_the_users_groups() {
    let monitor = TestMonitor::start().await;
    let client = monitor.harness().await;
    let carol = Actor::new("carol", "codex", "c1");
    let decision = client.authorize(&carol, ActionRequest::exec(["cargo", "build"])).await.unwrap();
    assert_eq!(decision.outcome, Outcome::Deny);
    // A grep of its input (a recursive one reads hidden files too, and waits
    // for a person).
    let decision = client.authorize(&carol, ActionRequest::exec(["grep", "-n", "x"])).await.unwrap();
    assert_eq!(decision.outcome, Outcome::Allow);
    assert_eq!(decision.policy_ids, ["commands.contractor-read-only-tools"]);
}

#[tokio::test]
async fn an_unknown_user_is_denied_with_a_clear_reason() {
    let monitor = TestMonitor::start().await;
    let client = monitor.harness().await;
    let mallory = Actor::new("mallory", "claude-code", "m1");
    let decision = client.authorize(&mallory, ActionRequest::read_file("/home/mallory/x")).await.unwrap();
    assert_eq!(decision.outcome, Outcome::Deny);
    assert_eq!(decision.reasons, ["unknown user `mallory`: not in the policy entities"]);
    assert!(decision.audit_seq > 0, "the denial is audited");
}

/// A re-ask of a request id gets the same decision, and is an answer of
/// its own in the audit log: a `replay` record that names the record it
/// repeats and the caller, durable before the answer.
#[tokio::test]
async fn the_same_request_id_returns_the_same_decision_and_a_replay_record() {
    let monitor = TestMonitor::start().await;
    let client = monitor.harness().await;
    let request = ActionRequest::exec(["git", "push", "--force"]).request_id("req-42");
    let first = client.authorize(&alice(), request.clone()).await.unwrap();
    let again = client.authorize(&alice(), request.clone()).await.unwrap();
    assert_eq!(first.outcome, Outcome::Pending);
    assert_eq!(Decision { audit_seq: first.audit_seq, ..again.clone() }, first, "the same decision");
    let records = monitor.audit().await;
    assert_eq!(records.len(), 2);
    let replay = &records[1];
    assert_eq!((replay.kind.as_str(), replay.seq, replay.caller.as_str()), ("replay", again.audit_seq, "test-harness"));
    assert_eq!(replay.outcome, pb::Outcome::Pending as i32);
    assert_eq!((replay.request_id.as_str(), replay.approval_id.as_str()), ("req-42", first.approval_id.as_str()));
    assert_eq!(
        replay.reasons[0],
        format!("repeats audit record #{}: request id `req-42` asked again by `test-harness`", first.audit_seq)
    );
    assert_eq!(replay.resource, records[0].resource);
    assert!(monitor.verify().await.ok);

    // A policy ALLOW asked again is still an ALLOW, and recorded as a replay.
    let read = ActionRequest::read_file("/home/alice/project/src/lib.rs").request_id("req-43");
    let allowed = client.authorize(&alice(), read.clone()).await.unwrap();
    let allowed_again = client.authorize(&alice(), read).await.unwrap();
    assert_eq!(allowed.outcome, Outcome::Allow);
    assert_eq!(Decision { audit_seq: allowed.audit_seq, ..allowed_again.clone() }, allowed);
    let records = monitor.audit().await;
    let last = records.last().unwrap();
    assert_eq!(
        (last.kind.as_str(), last.seq, last.outcome),
        ("replay", allowed_again.audit_seq, pb::Outcome::Allow as i32)
    );
    assert!(last.reasons[0].starts_with(&format!("repeats audit record #{}", allowed.audit_seq)), "{last:?}");
    assert_eq!(last.policy_ids, allowed.policy_ids);

    // The same key for a different request is refused, naming the field.
    let other = ActionRequest::read_file("/home/alice/project/x").request_id("req-42");
    let Err(Error::Status(status)) = client.authorize(&alice(), other).await else { panic!("reused key accepted") };
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().starts_with("request_id:"), "{}", status.message());

    // Keys belong to the harness: another harness may use the same one.
    let alice_harness = monitor.sdk(crate::support::ALICE_ONLY).await;
    let theirs = alice_harness.authorize(&alice(), request).await.unwrap();
    assert_ne!(theirs.audit_seq, first.audit_seq);
}

#[tokio::test]
async fn concurrent_requests_are_all_audited_in_one_gapless_chain() {
    let monitor = TestMonitor::start().await;
    let client = monitor.harness().await;
    let mut tasks = Vec::new();
    for n in 0..100 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let path = format!("/home/alice/project/file{n}.rs");
            client.authorize(&Actor::new("alice", "claude-code", format!("s{n}")), ActionRequest::read_file(path)).await
        }));
    }
    let mut seqs = Vec::new();
    for task in tasks {
        seqs.push(task.await.unwrap().unwrap().audit_seq);
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=100).collect::<Vec<_>>());
    let report = monitor.verify().await;
    assert!(report.ok, "{report:?}");
    assert_eq!(report.records, 100);
}

#[tokio::test]
async fn an_unreachable_monitor_is_never_an_allow() {
    let mut monitor = TestMonitor::start().await;
    let client = monitor.harness().await.with_timeout(Duration::from_millis(500));
    monitor.stop_server().await;
    let result = client.check(&alice(), ActionRequest::read_file("/home/alice/project/src/main.rs")).await;
    assert!(matches!(result, Err(Error::Status(_) | Error::Transport(_))), "{result:?}");
}
