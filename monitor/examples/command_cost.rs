//! What understanding commands costs: the pure decision (normalize, parts,
//! Cedar for each part) of a single command against pipelines of 5 parts
//! under the bundled policies, the same end to end (`Authorize` over gRPC
//! to a monitor on loopback, each decision durably audited), reading
//! scripts (`command::parts` alone) per KB of script, and the slowest
//! scripts the parser is still given.
//!
//! `cargo run --release -p warden-monitor --example command_cost [-- ITERATIONS]`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::Path;
use std::time::{Duration, Instant};

use warden_monitor::command::parts;
use warden_monitor::decision::{DecisionConfig, SessionFacts, decide};
use warden_monitor::normalize::{Actor, RequestInput, ResourceInput, normalize};
use warden_monitor::policy::PolicySnapshot;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[(((sorted.len() - 1) as f64) * p).round() as usize]
}

fn decide_cost(snapshot: &PolicySnapshot, argv: &[&str], iterations: usize) -> (Duration, Duration, usize) {
    let now = time::OffsetDateTime::now_utc();
    let config = DecisionConfig::default();
    let facts = SessionFacts { harness: "bench".into(), ..SessionFacts::default() };
    let input = RequestInput {
        request_id: String::new(),
        actor: Actor { user: "alice".into(), agent: "claude-code".into(), session: "s1".into() },
        action: "exec".into(),
        resource: ResourceInput::Command {
            argv: argv.iter().map(|a| (*a).to_owned()).collect(),
            cwd: "/home/alice/project".into(),
        },
        justification: String::new(),
        context_json: String::new(),
    };
    let request = normalize(&input).unwrap();
    let outcome = decide(snapshot, &request, &facts, now, &config).unwrap();
    let count = outcome.parts.len().max(1);
    for _ in 0..200 {
        std::hint::black_box(decide(snapshot, &request, &facts, now, &config).unwrap());
    }
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        let request = normalize(&input).unwrap();
        std::hint::black_box(decide(snapshot, &request, &facts, now, &config).unwrap());
        samples.push(start.elapsed());
    }
    samples.sort_unstable();
    (percentile(&samples, 0.5), percentile(&samples, 0.99), count)
}

fn main() {
    let iterations: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(5000);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    let snapshot = PolicySnapshot::load(&dir).unwrap();

    println!("pure decision under the bundled policies, {iterations} runs each (normalize + parts + Cedar per part)");
    println!("| command | parts | p50 | p99 | p50 / single |");
    println!("| --- | --- | --- | --- | --- |");
    let single: &[&str] = &["git", "status"];
    let (base, base99, _) = decide_cost(&snapshot, single, iterations);
    println!("| `git status` | 1 | {base:?} | {base99:?} | 1.00 |");
    let cases: [(&str, &[&str]); 3] = [
        (
            "bash -c 'git log --oneline | grep fix | head -20 | cat | wc -l'",
            &["bash", "-c", "git log --oneline | grep fix | head -20 | cat | wc -l"],
        ),
        (
            "bash -c 'cd src && cat main.rs | grep fn | wc -l'",
            &["bash", "-c", "cd src && cat main.rs | grep fn | wc -l"],
        ),
        ("sudo timeout 5 cat a b c (wrappers, files)", &["sudo", "timeout", "5", "cat", "a", "b"]),
    ];
    for (name, argv) in cases {
        let (p50, p99, count) = decide_cost(&snapshot, argv, iterations);
        println!("| `{name}` | {count} | {p50:?} | {p99:?} | {:.2} |", p50.as_secs_f64() / base.as_secs_f64());
    }

    println!();
    end_to_end(iterations.min(2000));

    println!();
    println!("reading scripts (command::parts alone), per KB of script");
    println!("| script | bytes | parts | p50 | µs per KB |");
    println!("| --- | --- | --- | --- | --- |");
    let programs = &snapshot.programs;
    let unit = "cd src && cargo build --release 2>&1 | tail -20; grep -rn TODO . | wc -l\n";
    for repeat in [1usize, 14, 56] {
        let script = unit.repeat(repeat);
        let argv = vec!["bash".to_owned(), "-c".to_owned(), script.clone()];
        let mut big = programs.clone();
        big.max_parts = usize::MAX;
        let count = parts(&argv, "/home/alice/project", "alice", &big).unwrap().len();
        let runs = (iterations / repeat).max(20);
        let mut samples = Vec::with_capacity(runs);
        for _ in 0..runs {
            let start = Instant::now();
            std::hint::black_box(parts(&argv, "/home/alice/project", "alice", &big).unwrap());
            samples.push(start.elapsed());
        }
        samples.sort_unstable();
        let p50 = percentile(&samples, 0.5);
        let per_kb = p50.as_secs_f64() * 1e6 / (script.len() as f64 / 1024.0);
        println!("| {repeat} × `{}` | {} | {count} | {p50:?} | {per_kb:.0} |", unit.trim(), script.len());
    }

    println!();
    worst_cases(programs);
}

/// The slowest scripts still handed to the parser: expansions nested as
/// deep as allowed (`command::MAX_EXPANSION_NESTING`, 4), whose word
/// grammar backtracks, and one level more, which is opaque (not parsed).
fn worst_cases(programs: &warden_monitor::programs::Programs) {
    println!("reading the slowest scripts the parser still gets (command::parts alone), 5 runs each");
    println!("| script | nesting | parsed | slowest |");
    println!("| --- | --- | --- | --- |");
    for depth in [3usize, 4, 5] {
        for (shape, open, close) in [("${a[…]}", "${a[", "]}"), ("${a[…}", "${a[", "}"), ("${a:-…}", "${a:-", "}")]
        {
            let script = format!("echo {}x{}", open.repeat(depth), close.repeat(depth));
            let argv = vec!["bash".to_owned(), "-c".to_owned(), script];
            let found = parts(&argv, "/home/alice/project", "alice", programs).unwrap();
            let parsed = !found.iter().any(|p| p.opaque);
            let slowest = (0..5)
                .map(|_| {
                    let start = Instant::now();
                    std::hint::black_box(parts(&argv, "/home/alice/project", "alice", programs).unwrap());
                    start.elapsed()
                })
                .max()
                .unwrap_or_default();
            println!("| `{shape}` | {depth} | {parsed} | {slowest:?} |");
        }
    }
}

/// `Authorize` p50 through the SDK against a monitor with the bundled
/// policies (fsync durability), one request at a time.
fn end_to_end(calls: usize) {
    use warden_monitor::auth::{CredentialConfig, Role};
    use warden_monitor::server::{ServerConfig, start};
    use warden_monitor::service::MonitorConfig;
    const TOKEN: &str = "wdn_bench_command_cost";
    let runtime = tokio::runtime::Builder::new_multi_thread().thread_stack_size(8 << 20).enable_all().build().unwrap();
    runtime.block_on(async {
        let policies = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
        let data = tempfile::tempdir().unwrap();
        let config = ServerConfig {
            policies: policies.clone(),
            data: data.path().to_owned(),
            credentials: vec![CredentialConfig::for_token("bench", Role::Harness, TOKEN, &["*"])],
            durability: Default::default(),
            checkpoint_every: Duration::from_secs(300),
            tls: None,
            socket: None,
            audit: Default::default(),
            store: None,
            monitor: MonitorConfig { policy_dir: policies, ..MonitorConfig::default() },
        };
        let monitor = start(config, tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()).await.unwrap();
        let client = warden_sdk::Client::connect_lazy(format!("http://{}", monitor.addr()), TOKEN).await.unwrap();
        let actor = warden_sdk::Actor::new("alice", "claude-code", "bench");
        let mut rows = Vec::new();
        for (name, argv) in [
            ("`git status`", vec!["git", "status"]),
            (
                "`bash -c 'git log --oneline | grep fix | head -20 | cat | wc -l'`",
                vec!["bash", "-c", "git log --oneline | grep fix | head -20 | cat | wc -l"],
            ),
        ] {
            let mut took = Vec::with_capacity(calls);
            for i in 0..calls + 50 {
                let request = warden_sdk::ActionRequest::exec(argv.iter().copied()).cwd("/home/alice/project");
                let started = Instant::now();
                let decision = client.authorize(&actor, request).await.unwrap();
                if i >= 50 {
                    took.push(started.elapsed());
                }
                assert_eq!(decision.outcome, warden_sdk::Outcome::Allow, "{decision:?}");
            }
            took.sort_unstable();
            rows.push((name, percentile(&took, 0.5), percentile(&took, 0.99)));
        }
        monitor.stop().await.unwrap();
        println!("end to end: Authorize over gRPC on loopback, durably audited (fsync), {calls} calls each");
        println!("| command | p50 | p99 | p50 / single |");
        println!("| --- | --- | --- | --- |");
        let base = rows.first().map(|r| r.1).unwrap_or_default();
        for (name, p50, p99) in rows {
            println!("| {name} | {p50:?} | {p99:?} | {:.2} |", p50.as_secs_f64() / base.as_secs_f64());
        }
    });
}
