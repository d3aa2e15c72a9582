//! Several `wardend` processes on one PostgreSQL database (a cluster of the
//! test's own, `PgCluster`): what an organization that runs replicas relies
//! on. Each test skips with a printed reason when PostgreSQL or the built
//! `wardend` is missing, unless `WARDEN_REQUIRE_POSTGRES` (set by `.ci/run`)
//! says it must run.

// Test code: a failed step fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use warden_proto::v1 as pb;
use warden_sdk::{ActionRequest, Actor, Client, Outcome};
use warden_tests::postgres::PgCluster;
use warden_tests::replicas::{ADMIN, APPROVER, APPROVER_2, HARNESS, Replica, wardend};
use warden_tests::wait::eventually;

mod failures;
mod retention;

/// A database and the built `wardend`, or `None` (having said why) when the
/// test may skip.
fn setup(test: &str) -> Option<(PgCluster, PathBuf)> {
    let Some(wardend) = wardend() else {
        assert!(
            std::env::var_os("WARDEN_REQUIRE_POSTGRES").is_none(),
            "WARDEN_REQUIRE_POSTGRES is set but wardend is not built (cargo build -p warden-monitor)"
        );
        eprintln!("skipping {test}: wardend is not built (cargo build -p warden-monitor)");
        return None;
    };
    let cluster = PgCluster::start_or_skip(test).unwrap()?;
    Some((cluster, wardend))
}

fn bundled() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies")
}

/// Starts `n` replicas on the cluster with the bundled policies.
fn replicas(wardend: &Path, cluster: &PgCluster, n: usize) -> Vec<Replica> {
    (0..n).map(|_| Replica::start(wardend, &bundled(), &cluster.url()).unwrap()).collect()
}

#[derive(Clone)]
struct Bearer(tonic::metadata::MetadataValue<tonic::metadata::Ascii>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        request.metadata_mut().insert("authorization", self.0.clone());
        Ok(request)
    }
}

type Authed = InterceptedService<Channel, Bearer>;

async fn channel(endpoint: &str) -> (Channel, ()) {
    (Channel::from_shared(endpoint.to_owned()).unwrap().connect().await.unwrap(), ())
}

fn bearer(token: &str) -> Bearer {
    Bearer(format!("Bearer {token}").parse().unwrap())
}

async fn admin(endpoint: &str) -> pb::admin_client::AdminClient<Authed> {
    pb::admin_client::AdminClient::with_interceptor(channel(endpoint).await.0, bearer(ADMIN))
}

async fn approvals(endpoint: &str, token: &str) -> pb::approvals_client::ApprovalsClient<Authed> {
    pb::approvals_client::ApprovalsClient::with_interceptor(channel(endpoint).await.0, bearer(token))
}

async fn harness(endpoint: &str) -> Client {
    Client::connect(endpoint.to_owned(), HARNESS).await.unwrap()
}

/// Every record of the shared log, read through `endpoint`.
async fn audit(endpoint: &str) -> Vec<pb::AuditRecord> {
    warden_tests::monitor::audit(endpoint, ADMIN).await.unwrap()
}

async fn verify(endpoint: &str) -> pb::VerifyAuditResponse {
    admin(endpoint).await.verify_audit(pb::VerifyAuditRequest {}).await.unwrap().into_inner()
}

/// The exfiltration after the untrusted page and the private file.
fn post_issue() -> ActionRequest {
    ActionRequest::http("POST", "https://api.github.com/repos/acme/app/issues")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_trifecta_and_request_ids_hold_across_monitors_on_one_chain() {
    let Some((cluster, wardend)) = setup("the_trifecta_and_request_ids_hold_across_monitors_on_one_chain") else {
        return;
    };
    let monitors = replicas(&wardend, &cluster, 2);
    let (a, b) = (harness(&monitors[0].endpoint).await, harness(&monitors[1].endpoint).await);
    let agent = Actor::new("alice", "claude-code", "across");

    // The untrusted page through A, the private file through B: the third
    // step, through A, waits for a person.
    let web = a.authorize(&agent, ActionRequest::http("GET", "https://blog.example.com/howto")).await.unwrap();
    assert_eq!((web.outcome, web.labels.as_slice()), (Outcome::Allow, ["untrusted-input".to_owned()].as_slice()));
    assert_eq!(b.authorize(&agent, post_issue()).await.unwrap().outcome, Outcome::Allow, "one label is not enough");
    let private = b.authorize(&agent, ActionRequest::read_file("/home/alice/private/salaries.csv")).await.unwrap();
    assert_eq!(private.outcome, Outcome::Allow);
    let exfiltrate = a.authorize(&agent, post_issue()).await.unwrap();
    assert_eq!(exfiltrate.outcome, Outcome::Pending, "{exfiltrate:?}");
    assert_eq!(exfiltrate.policy_ids, ["trifecta.no-exfiltration"]);
    let session = admin(&monitors[1].endpoint)
        .await
        .get_session(pb::GetSessionRequest { session: "across".into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(session.labels, ["private-data", "untrusted-input"]);

    // One request id asked of A, then of B: one decision, one replay.
    let read = || ActionRequest::read_file("/home/alice/project/README.md").request_id("same-id-1");
    let first = a.authorize(&agent, read()).await.unwrap();
    let again = b.authorize(&agent, read()).await.unwrap();
    assert_eq!((again.outcome, again.audit_seq > first.audit_seq), (first.outcome, true));
    // And asked of both at once, many times: still one decision each.
    let mut racing = Vec::new();
    for n in 0..20 {
        for client in [a.clone(), b.clone()] {
            let agent = agent.clone();
            racing.push(tokio::spawn(async move {
                let request =
                    ActionRequest::read_file(format!("/home/alice/project/f{n}.rs")).request_id(format!("race-{n}"));
                client.authorize(&agent, request).await.unwrap()
            }));
        }
    }
    for answer in racing {
        answer.await.unwrap();
    }

    let records = audit(&monitors[0].endpoint).await;
    let decided = |id: &str| records.iter().filter(|r| r.request_id == id && r.kind == "decision").count();
    assert_eq!(decided("same-id-1"), 1);
    for n in 0..20 {
        assert_eq!(decided(&format!("race-{n}")), 1, "race-{n} was decided twice");
        let replays = records.iter().filter(|r| r.request_id == format!("race-{n}") && r.kind == "replay").count();
        assert_eq!(replays, 1, "race-{n}");
    }
    // One chain: seqs 1..N without a gap, whichever monitor wrote them,
    // and both verify it to the same head.
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (1..=records.len() as u64).collect::<Vec<_>>());
    let (va, vb) = (verify(&monitors[0].endpoint).await, verify(&monitors[1].endpoint).await);
    assert!(va.ok && vb.ok, "{va:?} {vb:?}");
    assert_eq!((va.head_seq, &va.head_hash), (vb.head_seq, &vb.head_hash));
    assert_eq!(va.head_seq, records.len() as u64);
    let writers = cluster.psql("SELECT count(DISTINCT replica) FROM warden_audit").unwrap();
    assert_eq!(writers.trim(), "2", "both monitors appended to the one chain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_sessions_concurrent_decisions_on_two_monitors_never_lose_a_label() {
    let Some((cluster, wardend)) = setup("one_sessions_concurrent_decisions_on_two_monitors_never_lose_a_label") else {
        return;
    };
    let monitors = replicas(&wardend, &cluster, 2);
    let (a, b) = (harness(&monitors[0].endpoint).await, harness(&monitors[1].endpoint).await);
    // Many rounds: the web page on A and the private file on B at the same
    // moment, then the post. Whichever was first, the second was decided
    // with the first's label, and the post waits for a person.
    for round in 0..15 {
        let agent = Actor::new("alice", "claude-code", format!("race-{round}"));
        let (web, private) = tokio::join!(
            a.authorize(&agent, ActionRequest::http("GET", "https://blog.example.com/howto")),
            b.authorize(&agent, ActionRequest::read_file("/home/alice/private/salaries.csv")),
        );
        assert_eq!((web.unwrap().outcome, private.unwrap().outcome), (Outcome::Allow, Outcome::Allow));
        let post = if round % 2 == 0 { &a } else { &b };
        assert_eq!(post.authorize(&agent, post_issue()).await.unwrap().outcome, Outcome::Pending, "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lock_made_through_one_monitor_denies_at_once_on_another() {
    let Some((cluster, wardend)) = setup("a_lock_made_through_one_monitor_denies_at_once_on_another") else { return };
    let monitors = replicas(&wardend, &cluster, 2);
    let a = harness(&monitors[0].endpoint).await;
    let agent = Actor::new("alice", "claude-code", "to-lock");
    let read = || ActionRequest::read_file("/home/alice/project/README.md");
    assert_eq!(a.authorize(&agent, read()).await.unwrap().outcome, Outcome::Allow);
    admin(&monitors[1].endpoint)
        .await
        .lock_session(pb::LockSessionRequest {
            session: "to-lock".into(),
            reason: "incident 42".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    // The very next decision on A, with no wait: the writer reads the lock
    // in its transaction, whatever A's copy says yet.
    let denied = a.authorize(&agent, read()).await.unwrap();
    assert_eq!(denied.outcome, Outcome::Deny);
    assert!(denied.reasons.iter().any(|r| r.contains("locked by `security`: incident 42")), "{denied:?}");
    // Unlocked through A, allowed through B once B has heard (a lock
    // holds at once everywhere; an unlock as soon as each monitor is told).
    admin(&monitors[0].endpoint)
        .await
        .unlock_session(pb::UnlockSessionRequest { session: "to-lock".into(), ..Default::default() })
        .await
        .unwrap();
    let b = harness(&monitors[1].endpoint).await;
    eventually("B allows the unlocked session", || async {
        (b.authorize(&agent, read()).await.ok()?.outcome == Outcome::Allow).then_some(())
    })
    .await;
}

/// The third step of the trifecta in a session of its own: PENDING.
async fn exfiltration(client: &Client, session: &str) -> warden_sdk::Decision {
    let agent = Actor::new("alice", "claude-code", session);
    client.authorize(&agent, ActionRequest::http("GET", "https://blog.example.com/howto")).await.unwrap();
    client.authorize(&agent, ActionRequest::read_file("/home/alice/private/salaries.csv")).await.unwrap();
    let asked = client.authorize(&agent, post_issue()).await.unwrap();
    assert_eq!(asked.outcome, Outcome::Pending, "{asked:?}");
    asked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_approval_asked_on_one_is_pushed_on_another_resolved_on_a_third_and_answered_at_once() {
    let Some((cluster, wardend)) = setup("an_approval_asked_on_one_is_pushed_on_another_resolved_on_a_third") else {
        return;
    };
    let monitors = replicas(&wardend, &cluster, 3);
    let (on_a, on_b, on_c) = (&monitors[0].endpoint, &monitors[1].endpoint, &monitors[2].endpoint);
    let mut watch =
        approvals(on_b, APPROVER).await.watch_pending(pb::WatchPendingRequest {}).await.unwrap().into_inner();
    let a = harness(on_a).await;
    let asked = exfiltration(&a, "needs-a-person").await;
    // B pushes it to its watcher.
    let pushed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let event = watch.message().await.unwrap().unwrap();
            if event.approval.as_ref().is_some_and(|a| a.approval_id == asked.approval_id) {
                return event;
            }
        }
    })
    .await
    .expect("B pushes the approval asked on A");
    let request = pushed.approval.unwrap().request.unwrap();
    assert_eq!(request.request_id, asked.request_id);
    // The harness waits on A; C approves; A answers at once.
    let waiting = {
        let (a, id) = (a.clone(), asked.approval_id.clone());
        tokio::spawn(async move { a.await_decision(&id, Duration::from_secs(60)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    let approved = approvals(on_c, APPROVER)
        .await
        .resolve(pb::ResolveRequest { approval_id: asked.approval_id.clone(), approve: true, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(approved.state, pb::ApprovalState::Approved as i32);
    let answer = waiting.await.unwrap().unwrap();
    let took = started.elapsed();
    assert_eq!(answer.outcome, Outcome::Allow);
    assert!(took < Duration::from_secs(2), "the answer reached A {took:?} after the approval on C");
    // Its ALLOW was given once: asked again through B, it is refused.
    let again = harness(on_b).await.await_decision(&asked.approval_id, Duration::from_secs(1)).await.unwrap();
    assert_eq!(again.outcome, Outcome::Deny, "{again:?}");

    // Two approvers on two monitors at once: one resolves, the other is
    // told it is no longer pending.
    let second = exfiltration(&a, "needs-a-person-too").await;
    let (mut one, mut two) = (approvals(on_b, APPROVER).await, approvals(on_c, APPROVER_2).await);
    let resolve =
        |approve| pb::ResolveRequest { approval_id: second.approval_id.clone(), approve, ..Default::default() };
    let (r1, r2) = tokio::join!(one.resolve(resolve(true)), two.resolve(resolve(false)));
    let outcomes = [r1.map(|r| r.into_inner().state), r2.map(|r| r.into_inner().state)];
    let won = outcomes.iter().filter(|r| r.is_ok()).count();
    assert_eq!(won, 1, "exactly one approver resolves it: {outcomes:?}");
    let lost = outcomes.iter().find_map(|r| r.as_ref().err()).unwrap();
    assert_eq!(lost.code(), tonic::Code::FailedPrecondition, "{lost:?}");
    let records = audit(on_a).await;
    let resolutions = records
        .iter()
        .filter(|r| r.approval_id == second.approval_id && r.kind.starts_with("approval.") && r.kind != "approval.used")
        .count();
    assert_eq!(resolutions, 1, "one resolution in the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_approval_expires_once_with_three_sweepers() {
    let Some((cluster, wardend)) = setup("an_approval_expires_once_with_three_sweepers") else { return };
    let policies = tempfile::tempdir().unwrap();
    for file in ["schema.cedarschema", "entities.json"] {
        std::fs::copy(bundled().join(file), policies.path().join(file)).unwrap();
    }
    std::fs::write(
        policies.path().join("wait.cedar"),
        "@id(\"ask\") @timeout(\"1s\") @reason(\"ask first\")\nforbid (principal, action == Action::\"fs.write\", resource) unless { context.approved };\n\
         @id(\"all\")\npermit (principal, action, resource);\n",
    )
    .unwrap();
    let monitors: Vec<Replica> =
        (0..3).map(|_| Replica::start(&wardend, policies.path(), &cluster.url()).unwrap()).collect();
    let a = harness(&monitors[0].endpoint).await;
    let agent = Actor::new("alice", "claude-code", "expiring");
    let asked = a.authorize(&agent, ActionRequest::write_file("/home/alice/project/x")).await.unwrap();
    assert_eq!(asked.outcome, Outcome::Pending, "{asked:?}");
    let final_answer = a.await_decision(&asked.approval_id, Duration::from_secs(20)).await.unwrap();
    assert_eq!(final_answer.outcome, Outcome::Deny);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let expired = audit(&monitors[2].endpoint)
        .await
        .iter()
        .filter(|r| r.approval_id == asked.approval_id && r.kind == "approval.expired")
        .count();
    assert_eq!(expired, 1, "three sweepers expire it once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_row_changed_in_the_database_is_found_and_named() {
    let Some((cluster, wardend)) = setup("a_row_changed_in_the_database_is_found_and_named") else { return };
    let monitors = replicas(&wardend, &cluster, 2);
    let a = harness(&monitors[0].endpoint).await;
    let agent = Actor::new("alice", "claude-code", "tamper");
    for n in 0..5 {
        a.authorize(&agent, ActionRequest::read_file(format!("/home/alice/project/{n}.rs"))).await.unwrap();
    }
    assert!(verify(&monitors[1].endpoint).await.ok);
    // Someone with the database's password turns a record's outcome.
    cluster
        .psql("UPDATE warden_audit SET record = replace(record, '\"outcome\":\"ALLOW\"', '\"outcome\":\"DENY\"') WHERE seq = 3")
        .unwrap();
    let report = verify(&monitors[1].endpoint).await;
    assert!(!report.ok);
    assert_eq!(report.first_bad_seq, 3, "{report:?}");
    // A removed row is found too.
    cluster.psql("DELETE FROM warden_audit WHERE seq = 3").unwrap();
    let report = verify(&monitors[0].endpoint).await;
    assert_eq!((report.ok, report.first_bad_seq), (false, 3), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_monitor_serving_other_policies_shows_in_every_monitors_policy_status() {
    let Some((cluster, wardend)) = setup("a_monitor_serving_other_policies_shows_in_every_monitors_policy_status")
    else {
        return;
    };
    let changed = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(bundled()).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), changed.path().join(entry.file_name())).unwrap();
        }
    }
    std::fs::write(
        changed.path().join("extra.cedar"),
        "@id(\"extra.no-secrets\") @reason(\"no secrets today\")\nforbid (principal, action == Action::\"secret.use\", resource);\n",
    )
    .unwrap();
    let a = Replica::start(&wardend, &bundled(), &cluster.url()).unwrap();
    let b = Replica::start(&wardend, changed.path(), &cluster.url()).unwrap();
    let status = eventually("both monitors are listed", || async {
        let status = admin(&a.endpoint).await.policy_status(pb::PolicyStatusRequest {}).await.ok()?.into_inner();
        (status.replicas.len() == 2).then_some(status)
    })
    .await;
    let this = status.replicas.iter().find(|r| r.answering).unwrap();
    assert_eq!(this.policy_version, status.policy_version);
    let other = status.replicas.iter().find(|r| !r.answering).unwrap();
    assert_ne!(other.policy_version, status.policy_version, "B serves another version");
    let of_b = admin(&b.endpoint).await.policy_status(pb::PolicyStatusRequest {}).await.unwrap().into_inner();
    assert_eq!(other.policy_version, of_b.policy_version);
    assert_eq!(other.replica, of_b.replicas.iter().find(|r| r.answering).unwrap().replica);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_harness_rate_limit_holds_across_monitors_not_once_per_monitor() {
    let Some((cluster, wardend)) = setup("a_harness_rate_limit_holds_across_monitors_not_once_per_monitor") else {
        return;
    };
    let mut credentials = warden_tests::replicas::credentials();
    credentials[0].rate_per_second = Some(0.5);
    credentials[0].burst = Some(5);
    let config = warden_tests::replicas::config_with(&cluster.url(), credentials);
    let monitors: Vec<Replica> =
        (0..2).map(|_| Replica::start_with(&wardend, &bundled(), &config, &[]).unwrap()).collect();
    let (a, b) = (harness(&monitors[0].endpoint).await, harness(&monitors[1].endpoint).await);
    let agent = Actor::new("alice", "claude-code", "busy");
    let (mut allowed, mut limited) = (0, 0);
    for n in 0..16 {
        let client = if n % 2 == 0 { &a } else { &b };
        match client.authorize(&agent, ActionRequest::read_file("/home/alice/project/README.md")).await {
            Ok(_) => allowed += 1,
            Err(warden_sdk::Error::Status(status)) if status.code() == tonic::Code::ResourceExhausted => {
                assert!(status.message().contains("credential `harness`"), "{status:?}");
                limited += 1;
            }
            Err(other) => panic!("{other:?}"),
        }
    }
    // A burst of 5 for the harness, whichever monitor it asks (at 0.5/s,
    // at most one more token refills while the test runs); per monitor it
    // would be 10.
    assert!((5..=6).contains(&allowed), "{allowed} allowed, {limited} limited");
    // The first refusal of the burst is on record, once for both monitors.
    let refusals = audit(&monitors[1].endpoint).await.iter().filter(|r| r.kind == "rate-limited").count();
    assert_eq!(refusals, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_grant_made_on_one_monitor_applies_on_another_and_expires_once() {
    let Some((cluster, wardend)) = setup("a_grant_made_on_one_monitor_applies_on_another_and_expires_once") else {
        return;
    };
    let monitors = replicas(&wardend, &cluster, 2);
    let b = harness(&monitors[1].endpoint).await;
    let agent = Actor::new("alice", "claude-code", "granted");
    let write = || ActionRequest::write_file("/srv/shared/x");
    assert_eq!(b.authorize(&agent, write()).await.unwrap().outcome, Outcome::Deny);
    let grant = admin(&monitors[0].endpoint)
        .await
        .create_grant(pb::CreateGrantRequest {
            user: "alice".into(),
            actions: vec!["fs.write".into()],
            resource_scope: "file:/srv/shared/x".into(),
            ttl_seconds: 2,
            reason: "a shared file, for two seconds".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    // B hears of it and decides with it.
    let allowed = eventually("B decides with the grant made on A", || async {
        let decision = b.authorize(&agent, write()).await.ok()?;
        (decision.outcome == Outcome::Allow).then_some(decision)
    })
    .await;
    assert_eq!(allowed.grant_ids, std::slice::from_ref(&grant.grant_id));
    // Both sweepers see it expire; it is removed once.
    eventually("the grant expires", || async {
        (b.authorize(&agent, write()).await.ok()?.outcome == Outcome::Deny).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let expired = audit(&monitors[0].endpoint)
        .await
        .iter()
        .filter(|r| {
            r.kind == "grant.expired" && r.reasons.iter().chain(&r.policy_ids).any(|t| t.contains(&grant.grant_id))
        })
        .count();
    assert_eq!(expired, 1, "two sweepers expire it once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_of_the_log_on_one_monitor_gets_the_records_another_appends() {
    let Some((cluster, wardend)) = setup("a_follower_of_the_log_on_one_monitor_gets_the_records_another_appends")
    else {
        return;
    };
    let monitors = replicas(&wardend, &cluster, 2);
    let a = harness(&monitors[0].endpoint).await;
    let agent = Actor::new("alice", "claude-code", "followed");
    a.authorize(&agent, ActionRequest::read_file("/home/alice/project/0.rs")).await.unwrap();
    let mut follow = admin(&monitors[1].endpoint)
        .await
        .tail_audit(pb::TailAuditRequest { all: true, follow: true, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(follow.message().await.unwrap().unwrap().seq, 1);
    let mut told = Vec::new();
    for n in 1..=5 {
        let path = format!("/home/alice/project/{n}.rs");
        told.push(a.authorize(&agent, ActionRequest::read_file(path)).await.unwrap().audit_seq);
    }
    let mut followed = Vec::new();
    while followed.len() < told.len() {
        let record = tokio::time::timeout(Duration::from_secs(10), follow.message())
            .await
            .expect("B sends the records A appends")
            .unwrap()
            .unwrap();
        followed.push(record.seq);
    }
    assert_eq!(followed, told);
    // `wardenctl audit verify` on B signs the head it verified (B's own key).
    let report = verify(&monitors[1].endpoint).await;
    assert!(report.ok);
    let checkpoint = report.checkpoint.expect("a signed checkpoint");
    assert_eq!((checkpoint.seq, checkpoint.hash), (report.head_seq, report.head_hash));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cap_on_a_harness_s_waiting_approvals_counts_every_monitor_s() {
    let Some((cluster, wardend)) = setup("the_cap_on_a_harness_s_waiting_approvals_counts_every_monitor_s") else {
        return;
    };
    let config = format!("max_pending_per_harness = 2\n{}", warden_tests::replicas::config(&cluster.url()));
    let monitors: Vec<Replica> =
        (0..2).map(|_| Replica::start_with(&wardend, &bundled(), &config, &[]).unwrap()).collect();
    let (a, b) = (harness(&monitors[0].endpoint).await, harness(&monitors[1].endpoint).await);
    // Six sessions ready to send out, then all six at once through both
    // monitors: two wait, four are denied without asking anyone.
    let ready: Vec<Actor> = (0..6).map(|n| Actor::new("alice", "claude-code", format!("cap-{n}"))).collect();
    for agent in &ready {
        a.authorize(agent, ActionRequest::http("GET", "https://blog.example.com/howto")).await.unwrap();
        b.authorize(agent, ActionRequest::read_file("/home/alice/private/salaries.csv")).await.unwrap();
    }
    let asked = ready.iter().enumerate().map(|(n, agent)| {
        let client = if n % 2 == 0 { a.clone() } else { b.clone() };
        let agent = agent.clone();
        tokio::spawn(async move { client.authorize(&agent, post_issue()).await.unwrap() })
    });
    let mut outcomes = Vec::new();
    for answer in asked.collect::<Vec<_>>() {
        outcomes.push(answer.await.unwrap());
    }
    let waiting = outcomes.iter().filter(|d| d.outcome == Outcome::Pending).count();
    assert_eq!(waiting, 2, "{outcomes:?}");
    for denied in outcomes.iter().filter(|d| d.outcome != Outcome::Pending) {
        assert_eq!(denied.outcome, Outcome::Deny);
        assert!(denied.reasons.iter().any(|r| r.contains("approvals waiting (at most 2)")), "{denied:?}");
    }
    // One more later, through either: denied too.
    for (client, session) in [(&a, "cap-6"), (&b, "cap-7")] {
        let agent = Actor::new("alice", "claude-code", session);
        client.authorize(&agent, ActionRequest::http("GET", "https://blog.example.com/howto")).await.unwrap();
        client.authorize(&agent, ActionRequest::read_file("/home/alice/private/salaries.csv")).await.unwrap();
        let third = client.authorize(&agent, post_issue()).await.unwrap();
        assert_eq!(third.outcome, Outcome::Deny, "{third:?}");
        assert!(third.reasons.iter().any(|r| r.contains("already has 2 approvals waiting")), "{third:?}");
    }
    assert_eq!(cluster.psql("SELECT count(*) FROM warden_approvals WHERE pending").unwrap().trim(), "2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_approvers_passkey_is_kept_in_the_database_for_every_monitor() {
    let Some((cluster, wardend)) = setup("an_approvers_passkey_is_kept_in_the_database_for_every_monitor") else {
        return;
    };
    // A monitor that had a passkey enrolled (its data folder's
    // passkeys.json, made by the approval page's own tests) moves to the
    // database: the passkey comes along.
    let enrolled = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/passkeys.json")).unwrap();
    let config = warden_tests::replicas::config(&cluster.url());
    let a = Replica::start_seeded(&wardend, &bundled(), &config, &[], &[("passkeys.json", &enrolled)]).unwrap();
    let b = Replica::start(&wardend, &bundled(), &cluster.url()).unwrap();
    let listed = |endpoint: String| async move {
        admin(&endpoint).await.list_approvers(pb::ListApproversRequest::default()).await.unwrap().into_inner().passkeys
    };
    let on_b = listed(b.endpoint.clone()).await;
    assert_eq!(on_b.iter().map(|p| (p.name.as_str(), p.confirmed)).collect::<Vec<_>>(), [("oncall", true)]);
    // Revoked through B, gone on A as soon as A is told.
    let revoked = admin(&b.endpoint)
        .await
        .revoke_approver(pb::RevokeApproverRequest { name: "oncall".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(revoked.revoked, 1);
    eventually("A no longer lists the revoked passkey", || async {
        listed(a.endpoint.clone()).await.is_empty().then_some(())
    })
    .await;
    assert_eq!(cluster.psql("SELECT document FROM warden_passkeys").unwrap().trim(), "[]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_grant_revoked_through_one_monitor_allows_nothing_more_on_another() {
    let Some((cluster, wardend)) = setup("a_grant_revoked_through_one_monitor_allows_nothing_more_on_another") else {
        return;
    };
    let monitors = replicas(&wardend, &cluster, 2);
    let b = harness(&monitors[1].endpoint).await;
    let agent = Actor::new("alice", "claude-code", "revoked");
    let write = || ActionRequest::write_file("/srv/shared/y");
    let mut on_a = admin(&monitors[0].endpoint).await;
    let grant = on_a
        .create_grant(pb::CreateGrantRequest {
            user: "alice".into(),
            actions: vec!["fs.write".into()],
            resource_scope: "file:/srv/shared/y".into(),
            ttl_seconds: 600,
            reason: "for a while".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    eventually("B decides with the grant", || async {
        (b.authorize(&agent, write()).await.ok()?.outcome == Outcome::Allow).then_some(())
    })
    .await;
    // Revoked through A: B's very next decision is made without it, whether
    // or not B has heard (the writer checks the grant in its transaction).
    on_a.revoke_grant(pb::RevokeGrantRequest { grant_id: grant.grant_id.clone() }).await.unwrap();
    let after = b.authorize(&agent, write()).await.unwrap();
    assert_eq!(after.outcome, Outcome::Deny, "{after:?}");
    // A notification anyone on the database can send does not move what
    // the monitors believe the head is.
    cluster.psql("NOTIFY warden, 'audit 1000000'").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let report = verify(&monitors[1].endpoint).await;
    assert!(report.ok, "{report:?}");
}
