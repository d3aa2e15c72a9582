//! Crash test: `wardend` as a real process under a load of decisions,
//! grants and approvals, killed with SIGKILL at a random moment, restarted
//! on the same data folder. Everything a client was told must still be
//! there, the chain must verify, and the sequence must go on without a gap.
//!
//! Two rounds by default; `WARDEN_SLOW_TESTS=1` runs ten (as `.ci/run` does).

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_stream::StreamExt;
use warden_proto::v1 as pb;
use warden_sdk::{ActionRequest, Actor, BearerToken, Client, Outcome};

fn policies() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies")
}

fn start(data: &Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_wardend"))
        .args(["--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .arg("--policies")
        .arg(policies())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    for line in stdout.lines() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("wardend listening on ") {
            let addr = rest.split_whitespace().next().unwrap().to_owned();
            return (child, format!("http://{addr}"));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("wardend did not start");
}

fn token(data: &Path, role: &str) -> String {
    std::fs::read_to_string(data.join(format!("{role}.token"))).unwrap().trim().to_owned()
}

async fn channel(endpoint: &str) -> tonic::transport::Channel {
    tonic::transport::Channel::from_shared(endpoint.to_owned()).unwrap().connect().await.unwrap()
}

/// What clients were told, across every round.
#[derive(Default, Clone)]
struct Acknowledged {
    /// request id -> (outcome, audit seq).
    decisions: HashMap<String, (Outcome, u64)>,
    grants: HashSet<String>,
    /// approval id -> resolved state.
    resolved: HashMap<String, i32>,
}

/// A pseudo-random number from the clock and a counter (no rand crate).
fn jitter(n: u64) -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    (u64::from(nanos) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15)) % 1000
}

async fn load(endpoint: String, data: PathBuf, round: u64, seen: Arc<Mutex<Acknowledged>>) {
    let harness = Client::with_channel(channel(&endpoint).await, BearerToken::new(&token(&data, "harness")).unwrap())
        .with_timeout(Duration::from_secs(2));
    let mut workers = Vec::new();
    for w in 0..4u64 {
        let harness = harness.clone();
        let seen = Arc::clone(&seen);
        workers.push(tokio::spawn(async move {
            for n in 0u64.. {
                let actor = Actor::new("alice", "claude-code", format!("r{round}w{w}"));
                let request = match n % 3 {
                    0 => ActionRequest::read_file(format!("/home/alice/project/r{round}/{w}/{n}.rs")),
                    1 => ActionRequest::read_file(format!("/home/alice/.ssh/key{n}")),
                    _ => ActionRequest::exec(["rm", "-r", &format!("build-{round}-{w}-{n}")]),
                };
                let id = format!("crash-{round}-{w}-{n}");
                match harness.authorize(&actor, request.request_id(id.clone())).await {
                    Ok(decision) => {
                        seen.lock().unwrap().decisions.insert(id, (decision.outcome, decision.audit_seq));
                    }
                    Err(_) => return,
                }
            }
        }));
    }
    let admin_channel = channel(&endpoint).await;
    let seen_admin = Arc::clone(&seen);
    let data_admin = data.clone();
    workers.push(tokio::spawn(async move {
        let mut admin = pb::admin_client::AdminClient::with_interceptor(
            admin_channel.clone(),
            BearerToken::new(&token(&data_admin, "admin")).unwrap(),
        );
        let mut approvals = pb::approvals_client::ApprovalsClient::with_interceptor(
            admin_channel,
            BearerToken::new(&token(&data_admin, "approver")).unwrap(),
        );
        for n in 0u64.. {
            let grant = pb::CreateGrantRequest {
                user: "bob".into(),
                actions: vec!["fs.write".into()],
                resource_scope: format!("dir:/srv/crash/{round}/{n}"),
                ttl_seconds: 3600,
                reason: "crash test".into(),
                ..Default::default()
            };
            match admin.create_grant(grant).await {
                Ok(g) => {
                    seen_admin.lock().unwrap().grants.insert(g.into_inner().grant_id);
                }
                Err(_) => return,
            }
            let Ok(pending) = approvals.list_pending(pb::ListPendingRequest::default()).await else { return };
            if let Some(approval) = pending.into_inner().approvals.into_iter().next() {
                let approve = n % 2 == 0;
                let request =
                    pb::ResolveRequest { approval_id: approval.approval_id.clone(), approve, ..Default::default() };
                match approvals.resolve(request).await {
                    Ok(resolved) => {
                        seen_admin.lock().unwrap().resolved.insert(approval.approval_id, resolved.into_inner().state);
                    }
                    Err(status) if status.code() == tonic::Code::FailedPrecondition => {}
                    Err(_) => return,
                }
            }
        }
    }));
    for worker in workers {
        let _ = worker.await;
    }
}

async fn check(endpoint: &str, data: &Path, seen: &Acknowledged) -> (usize, usize) {
    let admin_channel = channel(endpoint).await;
    let mut admin = pb::admin_client::AdminClient::with_interceptor(
        admin_channel.clone(),
        BearerToken::new(&token(data, "admin")).unwrap(),
    );
    let verified = admin.verify_audit(pb::VerifyAuditRequest {}).await.unwrap().into_inner();
    assert!(verified.ok, "the chain does not verify after a SIGKILL: {verified:?}");
    assert_eq!(verified.records, verified.head_seq, "the sequence has a gap");
    let records: Vec<pb::AuditRecord> = admin
        .tail_audit(pb::TailAuditRequest { all: true, ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .collect::<Result<_, _>>()
        .await
        .unwrap();
    let by_request: HashMap<&str, &pb::AuditRecord> =
        records.iter().filter(|r| r.kind == "decision").map(|r| (r.request_id.as_str(), r)).collect();
    let mut missing = 0;
    for (id, (outcome, seq)) in &seen.decisions {
        let want = match outcome {
            Outcome::Allow => pb::Outcome::Allow,
            Outcome::Deny => pb::Outcome::Deny,
            Outcome::Pending => pb::Outcome::Pending,
        } as i32;
        match by_request.get(id.as_str()) {
            Some(record) if record.outcome == want && record.seq == *seq => {}
            _ => missing += 1,
        }
    }
    let grants: HashSet<String> = admin
        .list_grants(pb::ListGrantsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .grants
        .into_iter()
        .map(|g| g.grant_id)
        .collect();
    missing += seen.grants.iter().filter(|g| !grants.contains(*g)).count();
    let resolutions: HashMap<&str, &str> = records
        .iter()
        .filter(|r| ["approval.approved", "approval.denied", "approval.expired"].contains(&r.kind.as_str()))
        .map(|r| (r.approval_id.as_str(), r.kind.as_str()))
        .collect();
    for (approval_id, state) in &seen.resolved {
        let want = if *state == pb::ApprovalState::Approved as i32 { "approval.approved" } else { "approval.denied" };
        if resolutions.get(approval_id.as_str()) != Some(&want) {
            missing += 1;
        }
    }
    (records.len(), missing)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_acknowledged_is_lost_to_sigkill() {
    let rounds: u64 = if std::env::var_os("WARDEN_SLOW_TESTS").is_some() { 10 } else { 2 };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let seen = Arc::new(Mutex::new(Acknowledged::default()));
    let mut total_missing = 0;
    let mut records = 0;
    for round in 0..rounds {
        let (mut child, endpoint) = tokio::task::spawn_blocking({
            let data = data.clone();
            move || start(&data)
        })
        .await
        .unwrap();
        if round > 0 {
            // After the previous kill: everything told before is still there.
            let told = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let (count, missing) = check(&endpoint, &data, &told).await;
            records = count;
            total_missing += missing;
        }
        let before = seen.lock().unwrap_or_else(|e| e.into_inner()).decisions.len();
        let driver = tokio::spawn(load(endpoint.clone(), data.clone(), round, Arc::clone(&seen)));
        // Killed under load: once this round has had decisions acknowledged
        // (however slow the machine), at a moment that varies by round.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while seen.lock().unwrap_or_else(|e| e.into_inner()).decisions.len() < before + 20 {
            assert!(tokio::time::Instant::now() < deadline, "round {round}: no decisions acknowledged within 30 s");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(jitter(round))).await;
        let pid = child.id().to_string();
        let killed = Command::new("kill").args(["-KILL", &pid]).status().unwrap();
        assert!(killed.success());
        tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
        let _ = tokio::time::timeout(Duration::from_secs(10), driver).await;
    }
    // Read offline first, as `wardenctl audit verify --data` does: what the
    // audit log holds beyond sled's last flush is applied, so every
    // acknowledged decision is there and the chain verifies.
    {
        let told = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let report = warden_monitor::verify::verify_offline(&data, None).unwrap().report;
        assert!(report.ok(), "the chain does not verify offline after a SIGKILL: {:?}", report.first_bad);
        let newest_told = told.decisions.values().map(|(_, seq)| *seq).max().unwrap_or(0);
        assert!(
            report.records >= newest_told,
            "offline: {} records, but seq {newest_told} was acknowledged",
            report.records
        );
    }
    let (mut child, endpoint) = tokio::task::spawn_blocking({
        let data = data.clone();
        move || start(&data)
    })
    .await
    .unwrap();
    let seen = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let (count, missing) = check(&endpoint, &data, &seen).await;
    records = records.max(count);
    total_missing += missing;
    let _ = child.kill();
    let _ = child.wait();
    println!(
        "crash test: {rounds} SIGKILL rounds, {} acknowledged decisions, {} grants, {} resolutions, {records} audit records, missing: {total_missing}",
        seen.decisions.len(),
        seen.grants.len(),
        seen.resolved.len()
    );
    assert!(seen.decisions.len() > rounds as usize * 10, "too little load to mean anything");
    assert_eq!(total_missing, 0);
}
