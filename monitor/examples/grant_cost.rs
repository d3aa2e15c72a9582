//! Prints the decision cost with 0, 1,000 and 10,000 active grants spread
//! over 1,000 users: grants are indexed by user and resource scope, so a
//! request evaluates only those of its own user's grants that can match it.
//!
//! `cargo run --release -p warden-monitor --example grant_cost [-- ITERATIONS]`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::Path;
use std::time::{Duration, Instant};

type Baseline = (Duration, Duration);

use warden_monitor::decision::{DecisionConfig, Outcome, SessionFacts, decide};
use warden_monitor::grants::{Grant, GrantBook};
use warden_monitor::normalize::{Actor, RequestInput, ResourceInput, normalize};
use warden_monitor::policy::PolicySnapshot;

const USERS: usize = 1000;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[(((sorted.len() - 1) as f64) * p).round() as usize]
}

fn main() {
    let iterations: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(20_000);
    // The bundled policies with 1,000 users.
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&bundled).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() && path.file_name().unwrap() != "entities.json" {
            std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    let mut entities =
        vec![serde_json::json!({ "uid": { "type": "Group", "id": "developers" }, "attrs": {}, "parents": [] })];
    for u in 0..USERS {
        entities.push(serde_json::json!({
            "uid": { "type": "User", "id": format!("user{u}") },
            "attrs": { "workspace": { "__entity": { "type": "Dir", "id": format!("/home/user{u}/project") } } },
            "parents": [{ "type": "Group", "id": "developers" }]
        }));
    }
    std::fs::write(dir.path().join("entities.json"), serde_json::Value::Array(entities).to_string()).unwrap();
    let snapshot = PolicySnapshot::load(dir.path()).unwrap();
    let config = DecisionConfig::default();
    let now = time::OffsetDateTime::now_utc();
    let far = i64::try_from((now + time::Duration::days(1)).unix_timestamp_nanos()).unwrap();

    println!("bundled policies ({} policies), {USERS} users, {iterations} decisions per row", snapshot.len());
    let mut baseline: Option<Baseline> = None;
    for total in [0usize, 1_000, 10_000] {
        let grants: Vec<Grant> = (0..total)
            .map(|n| Grant {
                grant_id: format!("grt-{n}"),
                user: format!("user{}", n % USERS),
                session: String::new(),
                agent: String::new(),
                actions: vec!["fs.write".into()],
                resource_scope: format!("dir:/srv/shared/{n}"),
                expires_unix_ns: far,
                reason: String::new(),
                created_by: "bench".into(),
                created_unix_ns: 0,
                approver_groups: None,
                harness: String::new(),
                passkey: false,
            })
            .collect();
        let built = Instant::now();
        let (book, problems) = GrantBook::load(grants, &snapshot);
        assert!(problems.is_empty());
        let load = built.elapsed();
        let mut samples = Vec::with_capacity(iterations);
        let mut workspace = Vec::with_capacity(iterations / 2);
        let mut allowed = 0;
        for i in 0..iterations {
            let user = i % USERS;
            // Half the requests are covered by one of the user's grants (when
            // there are any), half only by the policies.
            let path = if i % 2 == 0 {
                format!("/srv/shared/{}/file.txt", user + USERS * ((i / USERS) % (total / USERS).max(1)))
            } else {
                format!("/home/user{user}/project/src/lib.rs")
            };
            let input = RequestInput {
                request_id: String::new(),
                actor: Actor { user: format!("user{user}"), agent: "claude-code".into(), session: format!("s{user}") },
                action: "fs.write".into(),
                resource: ResourceInput::File { path, cwd: String::new(), pattern: false },
                justification: String::new(),
                context_json: String::new(),
            };
            let start = Instant::now();
            let request = normalize(&input).unwrap();
            let facts = SessionFacts {
                harness: "bench".into(),
                grants: book.for_user(&request.actor.user),
                ..SessionFacts::default()
            };
            let evaluation = decide(&snapshot, &request, &facts, now, &config).unwrap();
            samples.push(start.elapsed());
            if i % 2 == 1 {
                workspace.push(start.elapsed());
            }
            if evaluation.outcome == Outcome::Allow {
                allowed += 1;
            }
        }
        samples.sort_unstable();
        workspace.sort_unstable();
        let p50 = percentile(&samples, 0.5);
        let same = percentile(&workspace, 0.5);
        let (base_all, base_same) = *baseline.get_or_insert((p50, same));
        println!(
            "{total:>6} grants (loaded in {load:>8.1?}): all p50={p50:>7.1?} p99={:>7.1?} max={:>7.1?} ({:.2}x) | the same workspace writes p50={same:>7.1?} p99={:>7.1?} ({:.2}x) | allowed {allowed}/{iterations}",
            percentile(&samples, 0.99),
            samples[samples.len() - 1],
            p50.as_secs_f64() / base_all.as_secs_f64(),
            percentile(&workspace, 0.99),
            same.as_secs_f64() / base_same.as_secs_f64(),
        );
    }
}
