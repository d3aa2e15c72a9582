//! Machines and the database going down: nothing acknowledged is lost, the
//! other monitors keep answering, and everyone fails closed while the
//! database is away.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::*;

/// Decisions a load generator was told: request id -> (outcome, seq).
type Told = Arc<Mutex<HashMap<String, (Outcome, u64)>>>;

/// Asks `client` for decisions until `stop`, each with a request id of its
/// own, and writes down every answer it gets.
async fn load(client: Client, name: &'static str, told: Told, stop: tokio::sync::watch::Receiver<bool>) -> usize {
    let agent = Actor::new("alice", "claude-code", format!("load-{name}"));
    let mut errors = 0;
    for n in 0.. {
        if *stop.borrow() {
            break;
        }
        let id = format!("{name}-{n}");
        let request = if n % 3 == 0 {
            ActionRequest::http("GET", "https://blog.example.com/howto").request_id(id.clone())
        } else {
            ActionRequest::read_file(format!("/home/alice/project/{n}.rs")).request_id(id.clone())
        };
        match client.authorize(&agent, request).await {
            Ok(decision) => {
                told.lock().unwrap().insert(id, (decision.outcome, decision.audit_seq));
            }
            Err(_) => {
                errors += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    errors
}

fn outcome_proto(outcome: Outcome) -> i32 {
    match outcome {
        Outcome::Allow => pb::Outcome::Allow as i32,
        Outcome::Deny => pb::Outcome::Deny as i32,
        Outcome::Pending => pb::Outcome::Pending as i32,
    }
}

/// Every told decision is in the log, at its seq, with its outcome.
fn all_recorded(told: &Told, records: &[pb::AuditRecord]) {
    let by_seq: HashMap<u64, &pb::AuditRecord> = records.iter().map(|r| (r.seq, r)).collect();
    let told = told.lock().unwrap();
    assert!(!told.is_empty());
    for (id, (outcome, seq)) in told.iter() {
        let record = by_seq.get(seq).unwrap_or_else(|| panic!("{id}: record #{seq} is missing"));
        assert_eq!((&record.request_id, record.outcome), (id, outcome_proto(*outcome)), "record #{seq}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_monitor_killed_under_load_loses_nothing_it_acknowledged_and_the_other_goes_on() {
    let Some((cluster, wardend)) = setup("a_monitor_killed_under_load_loses_nothing_it_acknowledged") else { return };
    let mut monitors = replicas(&wardend, &cluster, 2);
    let told: Told = Arc::default();
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let on_a = tokio::spawn(load(harness(&monitors[0].endpoint).await, "a", Arc::clone(&told), stopping.clone()));
    let on_b = tokio::spawn(load(harness(&monitors[1].endpoint).await, "b", Arc::clone(&told), stopping.clone()));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    monitors[0].kill();
    let b_before = told.lock().unwrap().keys().filter(|k| k.starts_with("b-")).count();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.send(true).unwrap();
    let (a_errors, b_errors) = (on_a.await.unwrap(), on_b.await.unwrap());
    let b_after = told.lock().unwrap().keys().filter(|k| k.starts_with("b-")).count();
    assert!(a_errors > 0, "the killed monitor stopped answering");
    assert_eq!(b_errors, 0, "the other monitor answered every request");
    assert!(b_after > b_before + 10, "B went on after A was killed: {b_before} then {b_after}");
    let records = audit(&monitors[1].endpoint).await;
    all_recorded(&told, &records);
    let report = verify(&monitors[1].endpoint).await;
    assert!(report.ok, "{report:?}");
    assert_eq!(report.head_seq, records.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_database_down_every_monitor_fails_closed_and_recovers_by_itself() {
    let Some((mut cluster, wardend)) = setup("the_database_down_every_monitor_fails_closed_and_recovers_by_itself")
    else {
        return;
    };
    let monitors = replicas(&wardend, &cluster, 2);
    let clients = [harness(&monitors[0].endpoint).await, harness(&monitors[1].endpoint).await];
    let agent = Actor::new("alice", "claude-code", "outage");
    let read = |id: &str| ActionRequest::read_file("/home/alice/project/README.md").request_id(id);
    let told: Told = Arc::default();
    for (n, client) in clients.iter().enumerate() {
        let decision = client.authorize(&agent, read(&format!("before-{n}"))).await.unwrap();
        told.lock().unwrap().insert(format!("before-{n}"), (decision.outcome, decision.audit_seq));
    }
    cluster.crash().unwrap();
    for (n, client) in clients.iter().enumerate() {
        let refused = client.authorize(&agent, read(&format!("during-{n}"))).await.unwrap_err();
        match &refused {
            warden_sdk::Error::Status(status) => assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}"),
            other => panic!("monitor {n}: {other:?}"),
        }
    }
    cluster.restart().unwrap();
    for (n, client) in clients.iter().enumerate() {
        let decision = eventually("the monitor answers again", || async {
            client.authorize(&agent, read(&format!("after-{n}"))).await.ok()
        })
        .await;
        assert_eq!(decision.outcome, Outcome::Allow);
        told.lock().unwrap().insert(format!("after-{n}"), (decision.outcome, decision.audit_seq));
    }
    let records = audit(&monitors[0].endpoint).await;
    all_recorded(&told, &records);
    assert!(records.iter().all(|r| !r.request_id.starts_with("during-")), "nothing refused is recorded");
    assert!(verify(&monitors[1].endpoint).await.ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_database_is_reached_over_tls_with_a_password_from_a_file_and_nothing_less() {
    let test = "the_database_is_reached_over_tls_with_a_password_from_a_file_and_nothing_less";
    let Some(wardend) = warden_tests::replicas::wardend() else {
        assert!(std::env::var_os("WARDEN_REQUIRE_POSTGRES").is_none(), "wardend is not built");
        eprintln!("skipping {test}: wardend is not built");
        return;
    };
    let Some((cluster, secured)) = PgCluster::start_secured_or_skip(test).unwrap() else { return };
    let credentials = warden_tests::replicas::config_with("unused", warden_tests::replicas::credentials());
    let credentials = credentials.split("[store]").next().unwrap().to_owned();
    let config = |store: &str| format!("{credentials}[store]\n{store}\n");
    let quoted = |path: &Path| serde_json::Value::from(path.display().to_string()).to_string();
    let good = config(&format!(
        "url = \"{}\"\npassword_file = {}\nca_file = {}",
        secured.url,
        quoted(&secured.password_file),
        quoted(&secured.ca_file)
    ));
    let monitor = Replica::start_with(&wardend, &bundled(), &good, &[]).unwrap();
    let client = harness(&monitor.endpoint).await;
    let agent = Actor::new("alice", "claude-code", "tls");
    let decision = client.authorize(&agent, ActionRequest::read_file("/home/alice/project/README.md")).await.unwrap();
    assert_eq!(decision.outcome, Outcome::Allow);
    // Every connection of the monitor is TLS.
    let connections = cluster
        .psql("SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.usename = 'warden'")
        .unwrap();
    assert!(!connections.trim().is_empty() && connections.lines().all(|l| l == "t"), "{connections:?}");

    // Without the CA, the server's certificate is not trusted: no start.
    let untrusted = config(&format!("url = \"{}\"\npassword_file = {}", secured.url, quoted(&secured.password_file)));
    let refused = Replica::start_with(&wardend, &bundled(), &untrusted, &[]).err().expect("no start without the CA");
    assert!(refused.to_string().to_lowercase().contains("certificate"), "{refused}");
    // A password in the URL is refused before anything is sent.
    let in_url = secured.url.replace("warden@", "warden:secret@");
    let refused = Replica::start_with(&wardend, &bundled(), &config(&format!("url = \"{in_url}\"")), &[])
        .err()
        .expect("no start with a password in the URL");
    assert!(refused.to_string().contains("password_file"), "{refused}");
    // A wrong password: no start, and the monitor says why.
    let wrong = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(wrong.path(), "not-the-password\n").unwrap();
    let bad = config(&format!(
        "url = \"{}\"\npassword_file = {}\nca_file = {}",
        secured.url,
        quoted(wrong.path()),
        quoted(&secured.ca_file)
    ));
    let refused = Replica::start_with(&wardend, &bundled(), &bad, &[]).err().expect("no start with a wrong password");
    assert!(refused.to_string().contains("password authentication failed"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_harness_waiting_on_an_approval_gets_its_answer_when_its_monitor_is_killed() {
    let Some((cluster, wardend)) = setup("a_harness_waiting_on_an_approval_gets_its_answer_when_its_monitor_is_killed")
    else {
        return;
    };
    let mut monitors = replicas(&wardend, &cluster, 2);
    // The harness knows both; A is first, so it talks to A.
    let endpoints = format!("{},{}", monitors[0].endpoint, monitors[1].endpoint);
    let client = Client::connect(endpoints, HARNESS).await.unwrap();
    let agent = Actor::new("alice", "claude-code", "failover");
    client.authorize(&agent, ActionRequest::http("GET", "https://blog.example.com/howto")).await.unwrap();
    client.authorize(&agent, ActionRequest::read_file("/home/alice/private/salaries.csv")).await.unwrap();
    let checking = {
        let (client, agent) = (client.clone(), agent.clone());
        tokio::spawn(async move { client.check(&agent, post_issue()).await })
    };
    // It waits on A for a person.
    let waiting = eventually("the exfiltration waits for a person", || async {
        let listed = approvals(&monitors[1].endpoint, APPROVER)
            .await
            .list_pending(pb::ListPendingRequest::default())
            .await
            .ok()?;
        listed.into_inner().approvals.into_iter().next()
    })
    .await;
    let asked_on_a = audit(&monitors[1].endpoint)
        .await
        .into_iter()
        .any(|r| r.approval_id == waiting.approval_id && r.kind == "decision");
    assert!(asked_on_a);
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A goes down with the harness's wait on it; the approver answers on B.
    let killed_at = std::time::Instant::now();
    monitors[0].kill();
    approvals(&monitors[1].endpoint, APPROVER)
        .await
        .resolve(pb::ResolveRequest { approval_id: waiting.approval_id.clone(), approve: true, ..Default::default() })
        .await
        .unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(30), checking)
        .await
        .expect("the harness is answered")
        .unwrap()
        .expect("the approved request is allowed");
    eprintln!("answered {:?} after A was killed", killed_at.elapsed());
    assert_eq!((answer.outcome, &answer.approval_id), (Outcome::Allow, &waiting.approval_id));
    // The ALLOW was given once, through B.
    let used = audit(&monitors[1].endpoint)
        .await
        .into_iter()
        .filter(|r| r.approval_id == waiting.approval_id && r.kind == "approval.used")
        .count();
    assert_eq!(used, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_holding_the_chain_s_head_stalls_a_decision_only_until_the_lock_timeout() {
    let Some((cluster, wardend)) =
        setup("a_session_holding_the_chain_s_head_stalls_a_decision_only_until_the_lock_timeout")
    else {
        return;
    };
    let monitors = replicas(&wardend, &cluster, 1);
    // Someone on the database holds the head row for 20 s.
    let mut holder = std::process::Command::new("psql")
        .args(["-X", "-q", &cluster.url(), "-c"])
        .arg("BEGIN; SELECT seq FROM warden_audit_head WHERE id = 1 FOR UPDATE; SELECT pg_sleep(20); COMMIT;")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut authority = pb::authority_client::AuthorityClient::with_interceptor(
        channel(&monitors[0].endpoint).await.0,
        bearer(HARNESS),
    );
    let request =
        ActionRequest::read_file("/home/alice/project/README.md").request_id("stalled-1").into_proto_request();
    let asked = std::time::Instant::now();
    let mut call = tonic::Request::new(pb::AuthorizeRequest {
        actor: Some(pb::Actor { user: "alice".into(), agent: "claude-code".into(), session: "stalled".into() }),
        ..request
    });
    call.set_timeout(Duration::from_secs(30));
    let refused = authority.authorize(call).await.unwrap_err();
    let took = asked.elapsed();
    let _ = holder.kill();
    let _ = holder.wait();
    // Refused (closed), and well before the holder lets go.
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(took < Duration::from_secs(12), "the decision waited {took:?} for the lock");
}
