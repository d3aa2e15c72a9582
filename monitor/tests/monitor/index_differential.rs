//! The policy index decides exactly as the whole policy set: thousands of
//! generated requests against a generated policy set with every kind of
//! scope, and generated grants of every kind of resource scope, decided with
//! and without the index (which also picks the grants that can match), must
//! agree in outcome, policies, reasons, grants and approval terms.

use std::collections::BTreeSet;
use std::path::Path;

use warden_monitor::decision::{DecisionConfig, SessionFacts, decide};
use warden_monitor::grants::{Grant, GrantBook};
use warden_monitor::normalize::{Actor, RequestInput, ResourceInput, normalize};
use warden_monitor::policy::PolicySnapshot;

const USERS: usize = 12;
const GROUPS: usize = 4;
const DIRS: usize = 10;
const TOOLS: usize = 6;
const HOSTS: usize = 6;
/// Requests compared (the whole set is slow in a debug build).
const REQUESTS: usize = 2500;

/// A small deterministic generator (no seed to chase when a case fails).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

fn policy(n: usize, rng: &mut Lcg) -> String {
    let principal = match rng.next(6) {
        0 => "principal".to_owned(),
        1 => format!("principal in User::\"u{}\"", rng.next(USERS)),
        2 => format!("principal in Group::\"g{}\"", rng.next(GROUPS)),
        3 => format!("principal == Session::\"s{}\"", rng.next(USERS * 2)),
        4 => "principal is Session".to_owned(),
        _ => format!("principal is Session in Agent::\"a{}\"", rng.next(2)),
    };
    let (action, resource) = match rng.next(8) {
        0 => ("action == Action::\"fs.read\"".to_owned(), format!("resource in Dir::\"/data/d{}\"", rng.next(DIRS))),
        1 => (
            "action in [Action::\"fs.read\", Action::\"fs.write\"]".to_owned(),
            format!("resource == File::\"/data/d{}/f{}.txt\"", rng.next(DIRS), rng.next(3)),
        ),
        2 => ("action".to_owned(), format!("resource is File in Dir::\"/data/d{}\"", rng.next(DIRS))),
        3 => ("action == Action::\"exec\"".to_owned(), format!("resource in Program::\"tool{}\"", rng.next(TOOLS))),
        4 => (
            "action == Action::\"http.request\"".to_owned(),
            format!("resource in Domain::\"h{}.example\"", rng.next(HOSTS)),
        ),
        5 => ("action".to_owned(), "resource".to_owned()),
        6 => ("action == Action::\"fs.write\"".to_owned(), "resource is File".to_owned()),
        _ => ("action in [Action::\"exec\", Action::\"fs.delete\"]".to_owned(), "resource".to_owned()),
    };
    let condition = match rng.next(5) {
        0 => String::new(),
        1 => format!(" when {{ principal.labels.contains(\"l{}\") }}", rng.next(3)),
        2 => " when { context.justification like \"*urgent*\" }".to_owned(),
        3 => format!(" when {{ principal.user == \"u{}\" }}", rng.next(USERS)),
        _ => " when { resource is File && resource.extension == \"txt\" }".to_owned(),
    };
    // Forbids always have a condition and a narrow scope, or every request
    // would be denied by some forbid of the 400.
    let narrow = resource != "resource" && !condition.is_empty();
    let (effect, unless) = match rng.next(4) {
        2 if narrow => ("forbid", " unless { context.approved }"),
        3 if narrow => ("forbid", ""),
        _ => ("permit", ""),
    };
    format!(
        "@id(\"p{n}\") @reason(\"reason {n}\") @approvers(\"g{}\")\n{effect} ({principal}, {action}, {resource}){condition}{unless};\n",
        rng.next(GROUPS)
    )
}

fn request(rng: &mut Lcg) -> (RequestInput, BTreeSet<String>) {
    let user = rng.next(USERS);
    let actor = Actor {
        user: format!("u{user}"),
        agent: format!("a{}", rng.next(2)),
        session: format!("s{}", rng.next(USERS * 2)),
    };
    let (action, resource) = match rng.next(5) {
        0 | 1 => (
            ["fs.read", "fs.write", "fs.delete"][rng.next(3)],
            ResourceInput::File {
                path: format!(
                    "/data/d{}/{}f{}.{}",
                    rng.next(DIRS),
                    if rng.next(2) == 0 { "" } else { "sub/" },
                    rng.next(3),
                    ["txt", "md"][rng.next(2)]
                ),
                cwd: String::new(),
                pattern: false,
            },
        ),
        2 => (
            "exec",
            ResourceInput::Command { argv: vec![format!("tool{}", rng.next(TOOLS)), "x".into()], cwd: String::new() },
        ),
        3 => (
            "http.request",
            ResourceInput::Http { method: "GET".into(), url: format!("https://api.h{}.example/x", rng.next(HOSTS)) },
        ),
        _ => ("fs.read", ResourceInput::File { path: "/elsewhere/f.txt".into(), cwd: String::new(), pattern: false }),
    };
    let labels = (0..3).filter(|_| rng.next(2) == 0).map(|l| format!("l{l}")).collect();
    let input = RequestInput {
        request_id: String::new(),
        actor,
        action: action.into(),
        resource,
        justification: if rng.next(3) == 0 { "urgent fix".into() } else { String::new() },
        context_json: String::new(),
    };
    (input, labels)
}

/// A few grants per user over every kind of scope, some for one session,
/// some expired.
fn grants(rng: &mut Lcg, now_unix_ns: i64) -> Vec<Grant> {
    let mut out = Vec::new();
    for user in 0..USERS {
        for k in 0..6 {
            let scope = match rng.next(7) {
                0 => format!("dir:/data/d{}", rng.next(DIRS)),
                1 => format!("dir:/data/d{}/sub", rng.next(DIRS)),
                2 => format!("file:/data/d{}/f{}.txt", rng.next(DIRS), rng.next(3)),
                3 => format!("program:tool{}", rng.next(TOOLS)),
                4 => format!("domain:h{}.example", rng.next(HOSTS)),
                5 => format!("url:https://api.h{}.example/x", rng.next(HOSTS)),
                _ => "dir:/".to_owned(),
            };
            let actions = match scope.split(':').next() {
                Some("program") => vec!["exec".to_owned()],
                Some("domain" | "url") => vec!["http.request".to_owned()],
                _ => vec![["fs.read", "fs.write", "fs.delete"][rng.next(3)].to_owned()],
            };
            let hour = 3_600_000_000_000;
            out.push(Grant {
                grant_id: format!("grt-u{user}-{k}"),
                user: format!("u{user}"),
                session: if rng.next(3) == 0 { format!("s{}", rng.next(USERS * 2)) } else { String::new() },
                agent: if rng.next(4) == 0 { format!("a{}", rng.next(2)) } else { String::new() },
                actions,
                resource_scope: scope,
                expires_unix_ns: if rng.next(5) == 0 { now_unix_ns - hour } else { now_unix_ns + hour },
                reason: String::new(),
                created_by: "diff".into(),
                created_unix_ns: now_unix_ns,
                approver_groups: None,
                // Requests come from the harness `diff`: a grant of another
                // harness must never decide one.
                harness: ["", "", "diff", "other"][rng.next(4)].to_owned(),
                passkey: false,
            });
        }
    }
    out
}

#[test]
fn the_index_decides_exactly_as_the_whole_set() {
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(bundled.join("schema.cedarschema"), dir.path().join("schema.cedarschema")).unwrap();
    let mut entities = Vec::new();
    for g in 0..GROUPS {
        entities
            .push(serde_json::json!({ "uid": { "type": "Group", "id": format!("g{g}") }, "attrs": {}, "parents": [] }));
    }
    for u in 0..USERS {
        entities.push(serde_json::json!({
            "uid": { "type": "User", "id": format!("u{u}") }, "attrs": {},
            "parents": [{ "type": "Group", "id": format!("g{}", u % GROUPS) }]
        }));
    }
    std::fs::write(dir.path().join("entities.json"), serde_json::Value::Array(entities).to_string()).unwrap();
    let mut rng = Lcg(7);
    let text: String = (0..400).map(|n| policy(n, &mut rng)).collect();
    std::fs::write(dir.path().join("generated.cedar"), text).unwrap();
    let snapshot = PolicySnapshot::load(dir.path()).unwrap_or_else(|e| panic!("{e}"));

    let indexed = DecisionConfig::default();
    let whole = DecisionConfig { use_index: false, ..DecisionConfig::default() };
    let now = time::OffsetDateTime::now_utc();
    let now_unix_ns = i64::try_from(now.unix_timestamp_nanos()).unwrap();
    let (book, problems) = GrantBook::load(grants(&mut rng, now_unix_ns), &snapshot);
    assert!(problems.is_empty(), "{problems:?}");
    let mut outcomes = std::collections::BTreeMap::new();
    let mut granted = 0;
    for case in 0..REQUESTS {
        let (input, labels) = request(&mut rng);
        let request = normalize(&input).unwrap();
        let grants = if case % 2 == 0 { book.for_user(&input.actor.user) } else { None };
        let facts = SessionFacts { labels, harness: "diff".into(), grants, ..SessionFacts::default() };
        let a = decide(&snapshot, &request, &facts, now, &indexed);
        let b = decide(&snapshot, &request, &facts, now, &whole);
        assert_eq!(a, b, "case {case}: {input:?}");
        if let Ok(evaluation) = a {
            *outcomes.entry(evaluation.outcome.as_str()).or_insert(0) += 1;
            granted += usize::from(!evaluation.grant_ids.is_empty());
        }
    }
    // The corpus exercises every outcome, and grants that match.
    assert_eq!(outcomes.len(), 3, "{outcomes:?}");
    assert!(granted > REQUESTS / 50, "only {granted} decisions matched a grant");
    println!(
        "{REQUESTS} requests, 400 policies, {} grants; index and whole set agree: {outcomes:?}, {granted} by a grant",
        book.len()
    );
}
