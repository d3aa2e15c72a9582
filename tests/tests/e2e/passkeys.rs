//! `@approval("passkey")`: what such a policy holds is approved only with a
//! passkey on the approval page. Over gRPC a token can deny it, never
//! approve it, and a window approved with a token does not lift it.

use tonic::Code;
use warden_proto::v1 as pb;
use warden_sdk::{ActionRequest, Actor, Outcome};

use crate::support::{APPROVER, PLAIN_APPROVER, PolicyDir, TestMonitor, bundled_policies, copy_bundled};

fn alice() -> Actor {
    Actor::new("alice", "claude-code", "s1")
}

/// A policy set of the test's own: reads are allowed, deploys wait for a
/// person, and a deploy to production waits for a person with a passkey.
fn deploy_policies() -> PolicyDir {
    let schema = std::fs::read_to_string(bundled_policies().join("schema.cedarschema")).unwrap();
    let entities = std::fs::read_to_string(bundled_policies().join("entities.json")).unwrap();
    PolicyDir::new(
        &schema,
        &[(
            "deploy.cedar",
            r#"
            @id("deploy.allowed") permit (principal, action == Action::"exec", resource in Program::"deploy");
            @id("deploy.ask") @reason("deploys need a yes")
            forbid (principal, action == Action::"exec", resource in Program::"deploy")
            unless { context.approved };
            @id("deploy.production") @reason("production needs a person at a passkey") @approval("passkey")
            forbid (principal, action == Action::"exec", resource in Program::"deploy")
            when { resource.args.contains("production") } unless { context.approved };
            "#,
        )],
        &entities,
    )
}

/// An admin's grant to alice of `action` on `scope` for ten minutes.
async fn admin_grant(monitor: &TestMonitor, action: &str, scope: &str) {
    let grant = pb::CreateGrantRequest {
        user: "alice".into(),
        actions: vec![action.into()],
        resource_scope: scope.into(),
        ttl_seconds: 600,
        reason: "an admin's grant is the security team's word".into(),
        ..Default::default()
    };
    monitor.admin().await.create_grant(grant).await.unwrap();
}

fn approve(approval_id: &str) -> pb::ResolveRequest {
    pb::ResolveRequest { approval_id: approval_id.into(), approve: true, ..Default::default() }
}

/// A token-only approval of a passkey approval is refused, naming the
/// policy, and leaves it pending; a denial with a token goes through and
/// the harness hears it.
#[tokio::test]
async fn a_token_denies_a_passkey_approval_but_cannot_approve_it() {
    let policies = deploy_policies();
    let monitor = TestMonitor::start_with(policies.path()).await;
    let harness = monitor.harness().await;
    let production = harness.authorize(&alice(), ActionRequest::exec(["deploy", "production"])).await.unwrap();
    assert_eq!(production.outcome, Outcome::Pending, "{production:?}");
    assert_eq!(production.policy_ids, ["deploy.ask", "deploy.production"]);
    let staging = harness.authorize(&alice(), ActionRequest::exec(["deploy", "staging"])).await.unwrap();
    assert_eq!(staging.policy_ids, ["deploy.ask"]);

    let mut approvals = monitor.approvals(APPROVER).await;
    let listed = approvals.list_pending(pb::ListPendingRequest::default()).await.unwrap().into_inner().approvals;
    let shown = |id: &str| listed.iter().find(|a| a.approval_id == id).unwrap().passkey_policies.clone();
    assert_eq!(shown(&production.approval_id), ["deploy.production"]);
    assert!(shown(&staging.approval_id).is_empty());

    for token in [APPROVER, PLAIN_APPROVER] {
        let mut approvals = monitor.approvals(token).await;
        let status = approvals.resolve(approve(&production.approval_id)).await.unwrap_err();
        assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
        assert!(status.message().contains("`deploy.production`"), "{}", status.message());
        assert!(status.message().contains("passkey"), "{}", status.message());
        // Nor for a window.
        let window = pb::ResolveRequest { grant_for_seconds: 600, ..approve(&production.approval_id) };
        assert_eq!(approvals.resolve(window).await.unwrap_err().code(), Code::FailedPrecondition);
    }
    let still = approvals
        .get_approval(pb::GetApprovalRequest { approval_id: production.approval_id.clone() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(still.state, pb::ApprovalState::Pending as i32);
    assert!(monitor.audit().await.iter().all(|r| r.kind != "approval.approved"), "nothing was approved");

    // The approval without a passkey policy is approved with a token as before.
    let approved = approvals.resolve(approve(&staging.approval_id)).await.unwrap().into_inner();
    assert_eq!(approved.state, pb::ApprovalState::Approved as i32);

    let deny = pb::ResolveRequest {
        approval_id: production.approval_id.clone(),
        approve: false,
        note: "not today".into(),
        ..Default::default()
    };
    let denied = approvals.resolve(deny).await.unwrap().into_inner();
    assert_eq!(denied.state, pb::ApprovalState::Denied as i32);
    let authority = monitor.authority(crate::support::HARNESS).await;
    let waited = authority
        .clone()
        .await_decision(pb::AwaitDecisionRequest { approval_id: production.approval_id.clone(), timeout_ms: 1000 })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(waited.outcome, pb::Outcome::Deny as i32);
    assert_eq!(waited.note, "not today");
}

/// A policy marked `@approval("passkey")` added while a window approved
/// with a token is open: the window no longer counts, and the request
/// waits for a passkey. An admin's grant still counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_approved_with_a_token_does_not_lift_a_passkey_policy() {
    let dir = copy_bundled();
    let monitor = TestMonitor::start_with(dir.path().to_owned()).await;
    let harness = monitor.harness().await;
    let log = || ActionRequest::exec(["git", "-c", "core.pager=cat", "log"]);
    let pending = harness.authorize(&alice(), log()).await.unwrap();
    assert_eq!(pending.policy_ids, ["commands.git-inline-config"]);
    let mut approvals = monitor.approvals(APPROVER).await;
    let window = pb::ResolveRequest { grant_for_seconds: 900, ..approve(&pending.approval_id) };
    approvals.resolve(window).await.unwrap();
    assert_eq!(harness.authorize(&alice(), log()).await.unwrap().outcome, Outcome::Allow);

    std::fs::write(
        dir.path().join("history.cedar"),
        "@id(\"history.passkey\")\n@reason(\"history reads need a passkey\")\n@approval(\"passkey\")\nforbid (principal, action == Action::\"exec\", resource in Program::\"git\") when { resource.args.contains(\"log\") } unless { context.approved };\n",
    )
    .unwrap();
    let decision = crate::support::eventually("the passkey policy applying", || async {
        Some(harness.authorize(&alice(), log()).await.unwrap())
            .filter(|d| d.policy_ids.iter().any(|p| p == "history.passkey"))
    })
    .await;
    assert_eq!(decision.outcome, Outcome::Pending, "{decision:?}");
    assert!(decision.grant_ids.is_empty(), "the token's window must not count: {decision:?}");
    let status = approvals.resolve(approve(&decision.approval_id)).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");

    admin_grant(&monitor, "exec", "program:git").await;
    assert_eq!(harness.authorize(&alice(), log()).await.unwrap().outcome, Outcome::Allow);
}

/// A passkey policy added after a request went PENDING without one: an
/// approval with a token is asked of the policies of this moment, and refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passkey_policy_added_while_pending_holds_the_approval() {
    let dir = copy_bundled();
    let monitor = TestMonitor::start_with(dir.path().to_owned()).await;
    let harness = monitor.harness().await;
    let log = || ActionRequest::exec(["git", "-c", "core.pager=cat", "log"]);
    let pending = harness.authorize(&alice(), log()).await.unwrap();
    assert_eq!(pending.policy_ids, ["commands.git-inline-config"]);
    std::fs::write(
        dir.path().join("history.cedar"),
        "@id(\"history.passkey\")\n@approval(\"passkey\")\nforbid (principal, action == Action::\"exec\", resource in Program::\"git\") when { resource.args.contains(\"log\") } unless { context.approved };\n",
    )
    .unwrap();
    let other = Actor::new("alice", "claude-code", "s2");
    crate::support::eventually("the passkey policy applying", || async {
        harness.authorize(&other, log()).await.ok().filter(|d| d.policy_ids.iter().any(|p| p == "history.passkey"))
    })
    .await;
    let mut approvals = monitor.approvals(APPROVER).await;
    let status = approvals.resolve(approve(&pending.approval_id)).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(status.message().contains("`history.passkey`"), "{}", status.message());
}

/// `@approval` takes one value, and only on a forbid.
#[tokio::test]
async fn policy_check_refuses_an_unknown_approval_kind() {
    let schema = std::fs::read_to_string(bundled_policies().join("schema.cedarschema")).unwrap();
    let entities = std::fs::read_to_string(bundled_policies().join("entities.json")).unwrap();
    for (text, expected) in [
        (
            "@id(\"x\") @approval(\"sms\") forbid (principal, action, resource) unless { context.approved };",
            "@approval(\"sms\") is not known",
        ),
        ("@id(\"y\") @approval(\"passkey\") permit (principal, action, resource);", "not on a permit"),
    ] {
        let policies = PolicyDir::new(&schema, &[("p.cedar", text)], &entities);
        let Err(error) = warden_monitor::policy::PolicySnapshot::load(&policies.path()) else {
            panic!("must not load")
        };
        assert!(error.to_string().contains(expected), "{error}");
        assert!(error.to_string().contains("p.cedar"), "{error}");
    }
    // A misspelt annotation loads, and says that it changes nothing.
    let misspelt =
        "@id(\"z\") @approvals(\"passkey\") forbid (principal, action, resource) unless { context.approved };";
    let policies = PolicyDir::new(&schema, &[("p.cedar", misspelt)], &entities);
    let snapshot = warden_monitor::policy::PolicySnapshot::load(&policies.path()).unwrap();
    let warnings: Vec<String> = snapshot.warnings.iter().map(ToString::to_string).collect();
    assert!(
        warnings.iter().any(|w| w.starts_with("p.cedar:1:1: unknown annotation @approvals on `z`")),
        "{warnings:?}"
    );
}

/// The bundled pack, as it ships, asks for a passkey where the stakes are
/// highest: a push to a protected branch, publishing a package, a secret
/// outside a grant. A token approves none of them; an admin's grant still
/// lets a secret through.
#[tokio::test]
async fn the_bundled_pack_asks_for_a_passkey_to_push_publish_and_use_secrets() {
    let monitor = TestMonitor::start().await;
    let harness = monitor.harness().await;
    let mut approvals = monitor.approvals(APPROVER).await;
    for (request, policy) in [
        (ActionRequest::exec(["git", "push", "origin", "main"]), "commands.protected-branch-push"),
        (ActionRequest::exec(["npm", "publish"]), "commands.package-publish"),
        (ActionRequest::use_secret("deploy-key"), "secrets.default-deny"),
    ] {
        let pending = harness.authorize(&alice(), request).await.unwrap();
        assert_eq!(pending.outcome, Outcome::Pending, "{policy}: {pending:?}");
        let approval = approvals
            .get_approval(pb::GetApprovalRequest { approval_id: pending.approval_id.clone() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(approval.passkey_policies, [policy]);
        let status = approvals.resolve(approve(&pending.approval_id)).await.unwrap_err();
        assert_eq!(status.code(), Code::FailedPrecondition, "{policy}");
        assert!(status.message().contains(policy), "{}", status.message());
    }
    admin_grant(&monitor, "secret.use", "secret:deploy-key").await;
    let granted = harness.authorize(&alice(), ActionRequest::use_secret("deploy-key")).await.unwrap();
    assert_eq!(granted.outcome, Outcome::Allow, "{granted:?}");
}
