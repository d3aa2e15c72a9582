//! Prints the decision cost as the policy set grows (10 to 10,000 generated
//! policies over many users, groups, directories, programs and domains),
//! with the index and, up to 1,000 policies, without it (every policy
//! evaluated, as Cedar alone does).
//!
//! `cargo run --release -p warden-monitor --example policy_scale [-- ITERATIONS]`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::Path;
use std::time::{Duration, Instant};

use warden_monitor::decision::{DecisionConfig, SessionFacts, decide};
use warden_monitor::normalize::{Actor, RequestInput, ResourceInput, normalize};
use warden_monitor::policy::PolicySnapshot;

const USERS: usize = 200;

fn generated(count: usize) -> String {
    (0..count)
        .map(|n| {
            let user = n % USERS;
            match n % 5 {
                0 => format!("@id(\"g{n}\") @reason(\"r\")\npermit (principal in User::\"user{user}\", action in [Action::\"fs.read\", Action::\"fs.write\"], resource in Dir::\"/data/{n}\");\n"),
                1 => format!("@id(\"g{n}\") @reason(\"r\")\nforbid (principal, action == Action::\"exec\", resource in Program::\"tool{n}\") when {{ resource.args.contains(\"--force\") }} unless {{ context.approved }};\n"),
                2 => format!("@id(\"g{n}\") @reason(\"r\")\npermit (principal in Group::\"team{}\", action == Action::\"http.request\", resource in Domain::\"host{n}.example\") when {{ resource.method == \"GET\" }};\n", n % 20),
                3 => format!("@id(\"g{n}\") @reason(\"r\")\nforbid (principal, action == Action::\"fs.write\", resource in Dir::\"/data/{n}\") when {{ principal.labels.contains(\"l{n}\") }};\n"),
                _ => format!("@id(\"g{n}\") @reason(\"r\")\npermit (principal == Session::\"s{n}\", action == Action::\"fs.read\", resource in Dir::\"/tmp/{n}\");\n"),
            }
        })
        .collect()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[(((sorted.len() - 1) as f64) * p).round() as usize]
}

fn measure(snapshot: &PolicySnapshot, config: &DecisionConfig, iterations: usize) -> (Duration, Duration) {
    let now = time::OffsetDateTime::now_utc();
    let mut samples = Vec::with_capacity(iterations);
    for i in 0..iterations {
        let user = i % USERS;
        let input = RequestInput {
            request_id: String::new(),
            actor: Actor { user: format!("user{user}"), agent: "claude-code".into(), session: format!("s{i}") },
            action: if i % 2 == 0 { "fs.read".into() } else { "fs.write".into() },
            resource: ResourceInput::File {
                path: format!("/data/{}/file.txt", i % 50),
                cwd: String::new(),
                pattern: false,
            },
            justification: String::new(),
            context_json: String::new(),
        };
        let start = Instant::now();
        let request = normalize(&input).unwrap();
        let facts = SessionFacts { harness: "bench".into(), ..SessionFacts::default() };
        std::hint::black_box(decide(snapshot, &request, &facts, now, config).unwrap());
        samples.push(start.elapsed());
    }
    samples.sort_unstable();
    (percentile(&samples, 0.5), percentile(&samples, 0.99))
}

fn main() {
    let iterations: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(5000);
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    let mut entities = Vec::new();
    for t in 0..20 {
        entities.push(
            serde_json::json!({ "uid": { "type": "Group", "id": format!("team{t}") }, "attrs": {}, "parents": [] }),
        );
    }
    for u in 0..USERS {
        entities.push(serde_json::json!({ "uid": { "type": "User", "id": format!("user{u}") }, "attrs": {},
            "parents": [{ "type": "Group", "id": format!("team{}", u % 20) }] }));
    }
    println!("pure decision (normalize + Cedar), {iterations} requests per row, fs.read/fs.write of /data/N/file.txt");
    let mut base = None;
    for count in [10usize, 100, 1_000, 10_000] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(bundled.join("schema.cedarschema"), dir.path().join("schema.cedarschema")).unwrap();
        std::fs::write(dir.path().join("entities.json"), serde_json::Value::Array(entities.clone()).to_string())
            .unwrap();
        std::fs::write(dir.path().join("generated.cedar"), generated(count)).unwrap();
        let snapshot = PolicySnapshot::load(dir.path()).unwrap();
        let (p50, p99) = measure(&snapshot, &DecisionConfig::default(), iterations);
        let base_p50 = *base.get_or_insert(p50);
        let whole = if count <= 1_000 {
            let (w50, w99) = measure(
                &snapshot,
                &DecisionConfig { use_index: false, ..DecisionConfig::default() },
                iterations.min(2000),
            );
            format!(
                "| every policy: p50={w50:>8.1?} p99={w99:>8.1?} ({:.1}x the index)",
                w50.as_secs_f64() / p50.as_secs_f64()
            )
        } else {
            String::new()
        };
        println!(
            "{count:>6} policies: index p50={p50:>8.1?} p99={p99:>8.1?} ({:.2}x 10 policies) {whole}",
            p50.as_secs_f64() / base_p50.as_secs_f64()
        );
    }
}
