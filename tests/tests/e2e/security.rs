//! Fixes of what an outside review found (issue "Security fixes"): each
//! test is an attack that worked before its fix.

use warden_proto::v1 as pb;
use warden_sdk::{ActionRequest, Actor, Outcome};

use crate::support::{PLAIN_APPROVER, TestMonitor, copy_bundled};

fn alice() -> Actor {
    Actor::new("alice", "claude-code", "s1")
}

/// A forbid, added during a test, that only release managers may lift.
const LOG_NEEDS_RELEASE: &str = "@id(\"log-needs-release\")\n@reason(\"reading history needs a release manager\")\n@approvers(\"release-managers\")\nforbid (principal, action == Action::\"exec\", resource in Program::\"git\") when { resource.args.contains(\"log\") } unless { context.approved };\n";

/// Asks until the policy `id` is among the deciding ones (a reload takes
/// effect within a second), and returns that decision.
async fn until_serving(
    harness: &warden_sdk::Client,
    actor: &Actor,
    request: impl Fn() -> ActionRequest,
    id: &str,
) -> warden_sdk::Decision {
    crate::support::eventually(&format!("policy `{id}` applying"), || async {
        Some(harness.authorize(actor, request()).await.unwrap()).filter(|d| d.policy_ids.iter().any(|p| p == id))
    })
    .await
}

async fn approve_for_window(monitor: &TestMonitor, token: &str, approval_id: String) -> pb::Approval {
    let mut approvals = monitor.approvals(token).await;
    let resolve = pb::ResolveRequest { approval_id, approve: true, grant_for_seconds: 900, ..Default::default() };
    approvals.resolve(resolve).await.expect("approved").into_inner()
}

/// Two argvs that joined with spaces read the same are two commands: a
/// window approved for one, by an approver of no group, does not let the
/// other (which needs a release manager) through.
#[tokio::test]
async fn a_window_for_one_argv_does_not_cover_another_that_joins_the_same() {
    let monitor = TestMonitor::start().await;
    let harness = monitor.harness().await;
    let spaced = || ActionRequest::exec(["git", "-c", "color.ui=auto", "push origin main"]);
    let split = || ActionRequest::exec(["git", "-c", "color.ui=auto", "push", "origin", "main"]);
    let pending = harness.authorize(&alice(), spaced()).await.unwrap();
    assert_eq!(pending.outcome, Outcome::Pending);
    // `push origin main` as one word is no git subcommand: opaque too.
    assert_eq!(pending.policy_ids, ["commands.git-inline-config", "commands.opaque"]);
    let approved = approve_for_window(&monitor, PLAIN_APPROVER, pending.approval_id).await;
    assert_eq!(approved.state, pb::ApprovalState::Approved as i32);
    assert_eq!(harness.authorize(&alice(), spaced()).await.unwrap().outcome, Outcome::Allow);

    let other = harness.authorize(&alice(), split()).await.unwrap();
    assert_eq!(other.outcome, Outcome::Pending, "{:?}", other.reasons);
    assert!(other.policy_ids.contains(&"commands.protected-branch-push".to_owned()), "{:?}", other.policy_ids);
    // The two are told apart in the audit log too.
    let audit = monitor.audit().await;
    let resources: std::collections::BTreeSet<_> =
        audit.iter().filter(|r| r.kind == "decision").map(|r| r.resource.clone()).collect();
    assert!(resources.contains(r#"Command::"git -c color.ui=auto 'push origin main'""#), "{resources:?}");
    assert!(resources.contains(r#"Command::"git -c color.ui=auto push origin main""#), "{resources:?}");
}

/// A window an approver granted lifts only the forbids that approver may
/// lift: a forbid added later for another group still asks its group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_lifts_only_forbids_of_the_approver_s_groups() {
    let dir = copy_bundled();
    let monitor = TestMonitor::start_with(dir.path().to_owned()).await;
    let harness = monitor.harness().await;
    let log = || ActionRequest::exec(["git", "-c", "core.pager=cat", "log"]);
    let pending = harness.authorize(&alice(), log()).await.unwrap();
    assert_eq!(pending.policy_ids, ["commands.git-inline-config"]);
    approve_for_window(&monitor, PLAIN_APPROVER, pending.approval_id).await;
    assert_eq!(harness.authorize(&alice(), log()).await.unwrap().outcome, Outcome::Allow);

    // The security team now wants release managers to look at history reads.
    std::fs::write(dir.path().join("log.cedar"), LOG_NEEDS_RELEASE).unwrap();
    let decision = until_serving(&harness, &alice(), log, "log-needs-release").await;
    // The window no longer counts: every forbid in the way asks again.
    assert_eq!(decision.outcome, Outcome::Pending, "{decision:?}");
    assert!(decision.grant_ids.is_empty(), "{decision:?}");
    // An admin's grant is approval for every forbid a person may lift.
    let mut admin = monitor.admin().await;
    admin
        .create_grant(pb::CreateGrantRequest {
            user: "alice".into(),
            actions: vec!["exec".into()],
            resource_scope: "program:git".into(),
            ttl_seconds: 600,
            reason: "release week".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(harness.authorize(&alice(), log()).await.unwrap().outcome, Outcome::Allow);
}

/// The same request id replayed after the session gained the trifecta's
/// labels is decided afresh (and recorded), not answered with the ALLOW of
/// before.
#[tokio::test]
async fn a_replay_after_the_session_changed_is_decided_afresh() {
    let monitor = TestMonitor::start().await;
    let harness = monitor.harness().await;
    let actor = Actor::new("alice", "claude-code", "replayed");
    let gist = || ActionRequest::http("POST", "https://api.github.com/gists").request_id("x");
    let first = harness.authorize(&actor, gist()).await.unwrap();
    assert_eq!(first.outcome, Outcome::Allow);
    // Replayed while nothing changed: the same decision, in a replay record.
    let again = harness.authorize(&actor, gist()).await.unwrap();
    assert_eq!((again.outcome, again.audit_seq), (Outcome::Allow, first.audit_seq + 1));

    harness.authorize(&actor, ActionRequest::http("GET", "https://example.com/")).await.unwrap();
    harness.authorize(&actor, ActionRequest::read_file("/home/alice/private/taxes.txt")).await.unwrap();
    let replayed = harness.authorize(&actor, gist()).await.unwrap();
    assert_eq!(replayed.outcome, Outcome::Pending, "{replayed:?}");
    assert_eq!(replayed.policy_ids, ["trifecta.no-exfiltration"]);
    assert!(replayed.audit_seq > first.audit_seq, "the fresh decision is recorded");
    // And the fresh decision is what the key now answers.
    let once_more = harness.authorize(&actor, gist()).await.unwrap();
    assert_eq!((once_more.outcome, once_more.approval_id), (Outcome::Pending, replayed.approval_id));
    let last = monitor.audit().await.last().cloned().unwrap();
    assert!(last.reasons[0].starts_with(&format!("repeats audit record #{}:", replayed.audit_seq)), "{last:?}");
}

/// Bad input is refused before it costs a token: a harness that floods
/// invalid requests still gets its valid one through.
#[tokio::test]
async fn invalid_requests_spend_no_rate_budget() {
    let monitor = TestMonitor::start().await;
    let limited = monitor.sdk(crate::support::LIMITED).await;
    let huge = Actor::new("alice", "claude-code", "s".repeat(120_000));
    for _ in 0..5 {
        let error = limited.authorize(&huge, ActionRequest::read_file("/home/alice/project/a")).await.unwrap_err();
        let warden_sdk::Error::Status(status) = error else { panic!("{error:?}") };
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().starts_with("actor.session"), "{status:?}");
    }
    let fine = limited.authorize(&alice(), ActionRequest::read_file("/home/alice/project/a")).await.unwrap();
    assert_eq!(fine.outcome, Outcome::Allow);
}

/// A session's rate budget is its harness's and user's: another harness
/// naming the same session id does not drain it.
#[tokio::test]
async fn one_harness_cannot_spend_another_s_session_budget() {
    let monitor = TestMonitor::start_tuned(|c| {
        c.session_rate = warden_monitor::ratelimit::Rate::from_config(0.5, Some(2));
    })
    .await;
    let noisy = monitor.harness().await;
    let owner = monitor.sdk(crate::support::ALICE_ONLY).await;
    let read = || ActionRequest::read_file("/home/alice/project/a");
    let mut refused = false;
    for _ in 0..4 {
        refused |= noisy.authorize(&alice(), read()).await.is_err();
    }
    assert!(refused, "the noisy harness is over its session budget");
    let decision = owner.authorize(&alice(), read()).await.unwrap();
    assert_eq!(decision.outcome, Outcome::Allow);
}

/// 51 waiting approvals with 60 KB argvs, over as many sessions, do not
/// break `approvals list`: pages stay under gRPC's message limit and
/// together list every one.
#[tokio::test]
async fn many_huge_pending_approvals_are_listed_in_pages() {
    let monitor = TestMonitor::start().await;
    let harness = monitor.harness().await;
    let big = "x".repeat(60_000);
    let mut ids = std::collections::BTreeSet::new();
    for n in 0..51 {
        let actor = Actor::new("alice", "claude-code", format!("flood-{n}"));
        let push = ActionRequest::exec(["git", "push", "origin", "main", big.as_str()]);
        let decision = harness.authorize(&actor, push).await.unwrap();
        assert_eq!(decision.outcome, Outcome::Pending, "{decision:?}");
        ids.insert(decision.approval_id);
    }
    let mut approvals = monitor.approvals(crate::support::APPROVER).await;
    let mut listed = std::collections::BTreeSet::new();
    let mut page_token = String::new();
    let mut pages = 0;
    loop {
        let page = approvals
            .list_pending(pb::ListPendingRequest { page_size: 0, page_token: page_token.clone() })
            .await
            .expect("every page fits in a gRPC message")
            .into_inner();
        pages += 1;
        listed.extend(page.approvals.into_iter().map(|a| a.approval_id));
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    assert_eq!(listed, ids);
    assert!(pages > 1, "{pages}");
    // One in full.
    let first = ids.iter().next().unwrap().clone();
    let full =
        approvals.get_approval(pb::GetApprovalRequest { approval_id: first.clone() }).await.unwrap().into_inner();
    assert!(full.resource.contains(&big));
    // Bad paging is bad input.
    for (page_size, page_token, field) in [(501, String::new(), "page_size"), (0, "nonsense".to_owned(), "page_token")]
    {
        let status = approvals.list_pending(pb::ListPendingRequest { page_size, page_token }).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().starts_with(field), "{status:?}");
    }
}

/// One harness cannot keep more than its share of approvals waiting, however
/// many sessions it spreads them over.
#[tokio::test]
async fn a_harness_has_a_cap_on_waiting_approvals_across_its_sessions() {
    let monitor = TestMonitor::start_tuned(|c| c.max_pending_per_harness = 3).await;
    let harness = monitor.harness().await;
    for n in 0..3 {
        let actor = Actor::new("alice", "claude-code", format!("spread-{n}"));
        let decision = harness.authorize(&actor, ActionRequest::exec(["git", "push", "origin", "main"])).await.unwrap();
        assert_eq!(decision.outcome, Outcome::Pending);
    }
    let actor = Actor::new("alice", "claude-code", "spread-3");
    let decision = harness.authorize(&actor, ActionRequest::exec(["git", "push", "origin", "main"])).await.unwrap();
    assert_eq!(decision.outcome, Outcome::Deny, "{decision:?}");
    assert!(
        decision.reasons.iter().any(|r| r.contains("credential `test-harness` already has 3 approvals waiting")),
        "{decision:?}"
    );
    // Another harness is not held back by this one.
    let other = monitor.sdk(crate::support::ALICE_ONLY).await;
    let decision = other.authorize(&actor, ActionRequest::exec(["git", "push", "origin", "main"])).await.unwrap();
    assert_eq!(decision.outcome, Outcome::Pending);
}

/// Who may approve is asked of the policies at the moment of approval: a
/// forbid added for release managers after the request went PENDING keeps
/// an approver of no group from approving it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approving_checks_the_approvers_of_the_policies_in_force() {
    let dir = copy_bundled();
    let monitor = TestMonitor::start_with(dir.path().to_owned()).await;
    let harness = monitor.harness().await;
    let log = || ActionRequest::exec(["git", "-c", "core.pager=cat", "log"]);
    let pending = harness.authorize(&alice(), log()).await.unwrap();
    assert_eq!(pending.policy_ids, ["commands.git-inline-config"]);
    std::fs::write(dir.path().join("log.cedar"), LOG_NEEDS_RELEASE).unwrap();
    until_serving(&harness, &Actor::new("alice", "claude-code", "probe"), log, "log-needs-release").await;
    let resolve =
        |approve| pb::ResolveRequest { approval_id: pending.approval_id.clone(), approve, ..Default::default() };
    let status = monitor.approvals(PLAIN_APPROVER).await.resolve(resolve(true)).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains("release-managers"), "{status:?}");
    let approved = monitor.approvals(crate::support::RELEASE_APPROVER).await.resolve(resolve(true)).await.unwrap();
    assert_eq!(approved.into_inner().state, pb::ApprovalState::Approved as i32);
}

/// What waits for a person is shown to them exactly: a credential in a
/// command line, a URL or a tool's arguments is named beside the request,
/// never replaced, so that the approver sees what would leave. The audit
/// record keeps the request as it was, for admins; the harness is told
/// nothing of it. The approval is bound to the real request.
#[tokio::test]
async fn approvers_see_every_value_a_waiting_request_carries_with_credentials_marked() {
    let monitor = TestMonitor::start().await;
    let harness = monitor.harness().await;
    let argv = ["git", "push", "https://alice:ghp_s3cr3t@github.com/org/repo.git", "main", "--token", "tok_abc"];
    let request = ActionRequest::exec(argv).justification("push with password=hunter2");
    let pending = harness.authorize(&alice(), request.clone()).await.unwrap();
    assert_eq!(pending.outcome, Outcome::Pending, "{pending:?}");
    let told = format!("{pending:?}");
    for secret in ["ghp_s3cr3t", "tok_abc", "hunter2"] {
        assert!(!told.contains(secret), "the harness is told `{secret}`: {told}");
    }

    let mut approvals = monitor.approvals(crate::support::APPROVER).await;
    let listed = approvals.list_pending(pb::ListPendingRequest::default()).await.unwrap().into_inner();
    let approval = &listed.approvals[0];
    let shown = approval.request.as_ref().and_then(|r| r.resource.clone()).unwrap();
    let pb::authorize_request::Resource::Command(command) = shown else { panic!("{shown:?}") };
    assert_eq!(command.argv, argv, "approvers see the command exactly");
    assert_eq!(approval.request.as_ref().unwrap().justification, "push with password=hunter2");
    assert!(!format!("{approval:?}").contains("REDACTED"), "{approval:?}");
    assert_eq!(approval.credentials, ["alice:ghp_s3cr3t@", "--token tok_abc", "password=hunter2"], "{approval:?}");

    let audit = format!("{:?}", monitor.audit().await);
    for secret in ["ghp_s3cr3t", "tok_abc", "hunter2"] {
        assert!(audit.contains(secret), "the audit record lost `{secret}`: {audit}");
    }
    // The approval is bound to the real request.
    let mut sent = request.into_proto_request();
    sent.actor = Some(pb::Actor { user: "alice".into(), agent: "claude-code".into(), session: "s1".into() });
    let input = warden_monitor::grpc::request_input(sent).unwrap();
    assert_eq!(approval.request_hash, warden_monitor::service::request_hash(&input));
}

/// After the trifecta labels, a message that carries a credential out waits
/// for a person, who reads the credential itself, marked.
#[tokio::test]
async fn an_exfiltrating_tool_call_shows_its_payload_to_the_approver() {
    let monitor = TestMonitor::start().await;
    let harness = monitor.harness().await;
    let actor = Actor::new("alice", "claude-code", "trifecta");
    for request in [
        ActionRequest::http("GET", "https://example.com/untrusted"),
        ActionRequest::read_file("/home/alice/private/notes.md"),
    ] {
        assert_eq!(harness.authorize(&actor, request).await.unwrap().outcome, Outcome::Allow);
    }
    let payload = r#"{"channel":"general","text":"fyi api_key=cHJpdmF0ZSBub3Rlczog"}"#;
    let post = ActionRequest::call_tool("slack", "post_message", payload);
    let decision = harness.authorize(&actor, post).await.unwrap();
    assert_eq!(decision.outcome, Outcome::Pending, "{decision:?}");
    let mut approvals = monitor.approvals(crate::support::APPROVER).await;
    let listed = approvals.list_pending(pb::ListPendingRequest::default()).await.unwrap().into_inner();
    let approval = listed.approvals.iter().find(|a| a.approval_id == decision.approval_id).unwrap();
    let Some(pb::authorize_request::Resource::Tool(tool)) = approval.request.as_ref().unwrap().resource.clone() else {
        panic!("{approval:?}")
    };
    assert_eq!(tool.arguments_json, payload);
    assert_eq!(approval.credentials, ["api_key=cHJpdmF0ZSBub3Rlczog"]);
}

/// Bad input from an authenticated harness leaves a record (escaped,
/// shortened), and a flood of it leaves only a few.
#[tokio::test]
async fn invalid_requests_are_audited_escaped_and_bounded() {
    let monitor = TestMonitor::start().await;
    let harness = monitor.harness().await;
    let before = monitor.audit().await.len();
    for n in 0..30 {
        let actor = Actor::new("alice", "claude-code", format!("s\u{1b}[2J{n}"));
        let error = harness.authorize(&actor, ActionRequest::read_file("/home/alice/project/a")).await.unwrap_err();
        let warden_sdk::Error::Status(status) = error else { panic!("{error:?}") };
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
    }
    let records: Vec<_> =
        monitor.audit().await.into_iter().skip(before).filter(|r| r.kind == "invalid-request").collect();
    assert!(!records.is_empty() && records.len() <= 12, "{}", records.len());
    let first = &records[0];
    assert_eq!(first.caller, "test-harness");
    assert!(first.reasons[0].contains("actor.session"), "{:?}", first.reasons);
    assert!(!first.reasons[0].contains('\u{1b}'), "{:?}", first.reasons);
    assert!(monitor.verify().await.ok);
}

/// A session id is scoped to the harness and the user that use it: bob's
/// harness taking alice's session id first denies alice nothing, and
/// neither labels (the lethal trifecta) nor a window an approver granted
/// carry from one harness's session to another's of the same id.
#[tokio::test]
async fn a_session_id_is_scoped_to_its_harness_and_user() {
    let (monitor, _policies) = TestMonitor::start_token_approvals().await;
    let everyone = monitor.harness().await;
    let alice_only = monitor.sdk(crate::support::ALICE_ONLY).await;
    let bob = Actor::new("bob", "claude-code", "s1");

    // Squatting: bob's session `s1` first, then alice's own `s1` works.
    let bobs = everyone.authorize(&bob, ActionRequest::read_file("/home/bob/work/notes.md")).await.unwrap();
    assert_eq!(bobs.outcome, Outcome::Allow);
    let alices = everyone.authorize(&alice(), ActionRequest::read_file("/home/alice/project/a.rs")).await.unwrap();
    assert_eq!(alices.outcome, Outcome::Allow, "{:?}", alices.reasons);

    // Labels: alice's `s1` on one harness holds the trifecta; her `s1` on
    // the other harness, and bob's `s1`, hold nothing.
    let web = everyone.authorize(&alice(), ActionRequest::http("GET", "https://blog.example.com/howto")).await;
    assert_eq!(web.unwrap().outcome, Outcome::Allow);
    let private = everyone.authorize(&alice(), ActionRequest::read_file("/home/alice/private/salaries.csv")).await;
    assert_eq!(private.unwrap().outcome, Outcome::Allow);
    let post = || ActionRequest::http("POST", "https://api.github.com/repos/acme/app/issues");
    assert_eq!(everyone.authorize(&alice(), post()).await.unwrap().outcome, Outcome::Pending);
    assert_eq!(alice_only.authorize(&alice(), post()).await.unwrap().outcome, Outcome::Allow);
    assert_eq!(everyone.authorize(&bob, post()).await.unwrap().outcome, Outcome::Allow);

    // An admin sees one session per harness and user, and must say which.
    let mut admin = monitor.admin().await;
    let ambiguous =
        admin.get_session(pb::GetSessionRequest { session: "s1".into(), ..Default::default() }).await.unwrap_err();
    assert_eq!(ambiguous.code(), tonic::Code::InvalidArgument);
    assert!(ambiguous.message().contains("names 3 sessions"), "{}", ambiguous.message());
    let tainted = admin
        .get_session(pb::GetSessionRequest {
            session: "s1".into(),
            user: "alice".into(),
            harness: "test-harness".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(tainted.labels, ["private-data", "untrusted-input"]);
    assert_eq!(tainted.harness, "test-harness");
    let clean = admin
        .get_session(pb::GetSessionRequest {
            session: "s1".into(),
            user: "alice".into(),
            harness: "alice-harness".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(clean.labels.is_empty(), "{:?}", clean.labels);

    // A window approved for one harness's session is not the other's.
    let push = || ActionRequest::exec(["git", "push", "origin", "main"]);
    let pending = everyone.authorize(&alice(), push()).await.unwrap();
    assert_eq!(pending.outcome, Outcome::Pending);
    let approved = approve_for_window(&monitor, crate::support::APPROVER, pending.approval_id).await;
    assert_eq!(approved.state, pb::ApprovalState::Approved as i32);
    assert_eq!(everyone.authorize(&alice(), push()).await.unwrap().outcome, Outcome::Allow);
    let elsewhere = alice_only.authorize(&alice(), push()).await.unwrap();
    assert_eq!(elsewhere.outcome, Outcome::Pending, "{:?}", elsewhere.reasons);
    assert!(elsewhere.grant_ids.is_empty());
    let grants = admin.list_grants(pb::ListGrantsRequest::default()).await.unwrap().into_inner().grants;
    assert_eq!(grants.iter().map(|g| g.harness.as_str()).collect::<Vec<_>>(), ["test-harness"]);
}
