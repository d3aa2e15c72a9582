//! Policy hot reload: a change serves within a second, a broken change never
//! takes the monitor down or opens a hole, and a fix recovers.

use warden_proto::v1 as pb;
use warden_sdk::{ActionRequest, Actor, Outcome};

use crate::support::{TestMonitor, copy_bundled, eventually};

const FREEZE: &str = "@id(\"freeze-reads\") @reason(\"reads are frozen\")\nforbid (principal, action == Action::\"fs.read\", resource in Dir::\"/home/alice/project/frozen\");\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_serves_within_a_second_a_break_keeps_the_last_good_set_and_a_fix_recovers() {
    let dir = copy_bundled();
    let monitor = TestMonitor::start_with(dir.path().to_owned()).await;
    let harness = monitor.harness().await;
    let alice = Actor::new("alice", "claude-code", "reload");
    let read = || ActionRequest::read_file("/home/alice/project/frozen/a.rs");
    let mut admin = monitor.admin().await;
    let before = admin.policy_status(pb::PolicyStatusRequest {}).await.unwrap().into_inner();
    assert!(before.error.is_empty());

    // Requests keep flowing while the folder changes; none may fail.
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let background = {
        let harness = harness.clone();
        let alice = alice.clone();
        tokio::spawn(async move {
            let mut count = 0u32;
            while !*stopped.borrow_and_update() {
                let decision =
                    harness.authorize(&alice, ActionRequest::read_file("/home/alice/project/src/x.rs")).await;
                assert_eq!(decision.expect("no request fails during a reload").outcome, Outcome::Allow);
                count += 1;
            }
            count
        })
    };

    assert_eq!(harness.authorize(&alice, read()).await.unwrap().outcome, Outcome::Allow);
    std::fs::write(dir.path().join("freeze.cedar"), FREEZE).unwrap();
    let frozen = eventually("the edit serving", || async {
        Some(harness.authorize(&alice, read()).await.unwrap()).filter(|d| d.outcome == Outcome::Deny)
    })
    .await;
    assert_eq!(frozen.policy_ids, ["freeze-reads"]);
    let status = admin.policy_status(pb::PolicyStatusRequest {}).await.unwrap().into_inner();
    assert_ne!(status.policy_version, before.policy_version);
    assert!(status.files.contains(&"freeze.cedar".to_owned()));

    // A broken file: the last good set keeps serving, the error names file and line.
    std::fs::write(
        dir.path().join("broken.cedar"),
        "@id(\"oops\")\npermit (principal, action, resource) when { resource.nope };\n",
    )
    .unwrap();
    let failed = eventually("the failed reload reported", || {
        let mut admin = admin.clone();
        async move {
            Some(admin.policy_status(pb::PolicyStatusRequest {}).await.unwrap().into_inner())
                .filter(|s| !s.error.is_empty())
        }
    })
    .await;
    assert_eq!(failed.policy_version, status.policy_version, "the last good set keeps its version");
    let error = failed.error;
    assert!(error.contains("broken.cedar:2:"), "{error}");
    assert_eq!(
        harness.authorize(&alice, read()).await.unwrap().outcome,
        Outcome::Deny,
        "the last good set still serves"
    );

    // Fixed: the new set serves and the error is gone.
    std::fs::remove_file(dir.path().join("broken.cedar")).unwrap();
    std::fs::remove_file(dir.path().join("freeze.cedar")).unwrap();
    let recovered = eventually("the recovery", || {
        let (mut admin, harness, alice) = (admin.clone(), &harness, &alice);
        async move {
            let status = admin.policy_status(pb::PolicyStatusRequest {}).await.unwrap().into_inner();
            let allowed = harness.authorize(alice, read()).await.unwrap().outcome == Outcome::Allow;
            (status.error.is_empty() && allowed).then_some(status)
        }
    })
    .await;
    assert_eq!(recovered.policy_version, before.policy_version);

    stop.send(true).unwrap();
    let served = background.await.unwrap();
    assert!(served > 10, "only {served} background requests");
    let kinds: Vec<String> = monitor.audit().await.into_iter().map(|r| r.kind).collect();
    assert!(kinds.contains(&"policy.reload".to_owned()) && kinds.contains(&"policy.reload-failed".to_owned()));
    assert!(monitor.verify().await.ok);
}

#[tokio::test]
async fn reload_on_demand_reports_the_result_and_warns_about_sets_without_forbids() {
    let dir = copy_bundled();
    let monitor = TestMonitor::start_with(dir.path().to_owned()).await;
    let mut admin = monitor.admin().await;
    let unchanged = admin.reload_policies(pb::ReloadPoliciesRequest {}).await.unwrap().into_inner();
    assert!(unchanged.loaded);
    assert!(unchanged.status.unwrap().warnings.is_empty());

    // Every forbid gone: still a valid set, but the status says so.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "cedar") {
            std::fs::remove_file(path).unwrap();
        }
    }
    std::fs::write(dir.path().join("open.cedar"), "@id(\"open\") permit (principal, action, resource);\n").unwrap();
    let open = admin.reload_policies(pb::ReloadPoliciesRequest {}).await.unwrap().into_inner();
    assert!(open.loaded);
    let status = open.status.unwrap();
    assert_eq!(status.policies, 1);
    assert!(status.warnings.iter().any(|w| w.contains("no forbid")), "{:?}", status.warnings);

    std::fs::write(dir.path().join("open.cedar"), "not cedar at all").unwrap();
    let failed = admin.reload_policies(pb::ReloadPoliciesRequest {}).await.unwrap().into_inner();
    assert!(!failed.loaded);
    assert!(failed.status.unwrap().error.contains("open.cedar:1:"));
    // A harness token cannot reload.
    let mut harness_admin = monitor.admin_with(crate::support::HARNESS).await;
    let status = harness_admin.reload_policies(pb::ReloadPoliciesRequest {}).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::PermissionDenied);
}
