//! `Preview`: what `Authorize` would answer now, for many resources at once,
//! with no side effect. The differential test drives random requests, grants,
//! locks, labels and waiting approvals, and checks every preview against the
//! decision `Authorize` then gives on the same state.

use std::time::Duration;

use tonic::Code;
use warden_proto::v1 as pb;
use warden_sdk::{ActionRequest, Actor, Outcome};

use crate::support::{ADMIN, ALICE_ONLY, APPROVER, HARNESS, TestMonitor};

type Kind = pb::resource::Kind;

fn file(path: &str) -> Kind {
    Kind::File(pb::FileResource { path: path.into(), cwd: String::new(), pattern: false })
}

fn command(argv: &[&str]) -> Kind {
    Kind::Command(pb::CommandResource { argv: argv.iter().map(|a| (*a).to_owned()).collect(), cwd: String::new() })
}

fn http(method: &str, url: &str) -> Kind {
    Kind::Http(pb::HttpResource { method: method.into(), url: url.into() })
}

fn secret(name: &str) -> Kind {
    Kind::Secret(pb::SecretResource { name: name.into() })
}

fn tool(server: &str, name: &str) -> Kind {
    Kind::Tool(pb::ToolResource { server: server.into(), name: name.into(), arguments_json: String::new() })
}

/// The same resource as `Authorize` takes it.
fn as_request(action: &str, kind: &Kind) -> ActionRequest {
    use pb::authorize_request::Resource as R;
    let resource = match kind.clone() {
        Kind::File(f) => R::File(f),
        Kind::Command(c) => R::Command(c),
        Kind::Http(h) => R::Http(h),
        Kind::Secret(s) => R::Secret(s),
        Kind::Tool(t) => R::Tool(t),
    };
    ActionRequest::new(action, resource)
}

/// Requests over every policy file of the bundled set: allowed, denied,
/// approvable, label-giving (web reads, private reads, secrets) and the
/// trifecta rule those labels arm.
fn pool() -> Vec<(&'static str, Kind)> {
    vec![
        ("fs.read", file("/home/alice/project/src/main.rs")),
        ("fs.read", file("/home/alice/project/.env")),
        ("fs.read", file("/home/alice/private/diary.txt")),
        ("fs.read", file("/home/bob/work/notes.md")),
        ("fs.read", file("/home/bob/private/keys.txt")),
        ("fs.read", file("/srv/contract/carol/spec.md")),
        ("fs.read", file("/srv/shared/report.md")),
        ("fs.write", file("/home/alice/project/out.txt")),
        ("fs.write", file("/srv/shared/report.md")),
        ("fs.delete", file("/home/alice/project/old.txt")),
        ("fs.delete", file("/home/bob/work/old.txt")),
        ("exec", command(&["git", "status"])),
        ("exec", command(&["git", "push", "origin", "main"])),
        ("exec", command(&["git", "push", "origin", "feature"])),
        ("exec", command(&["git", "-c", "core.pager=less", "log"])),
        ("exec", command(&["rm", "-rf", "target"])),
        ("exec", command(&["cat", "/home/alice/.ssh/id_rsa"])),
        ("exec", command(&["cargo", "publish"])),
        ("exec", command(&["ls", "-la"])),
        ("exec", command(&["curl", "https://example.com"])),
        ("http.request", http("GET", "https://crates.io/api/v1/crates/serde")),
        ("http.request", http("GET", "https://example.com/page")),
        ("http.request", http("POST", "https://api.github.com/gists")),
        ("http.request", http("POST", "https://example.com/upload")),
        ("http.request", http("GET", "http://example.com/plain")),
        ("secret.use", secret("GITHUB_TOKEN")),
        ("secret.use", secret("AWS_KEY")),
        ("tool.call", tool("docs", "search")),
        ("tool.call", tool("slack", "post_message")),
        ("tool.call", tool("gmail", "send")),
        ("tool.call", tool("jira", "create_issue")),
    ]
}

const GRANT_SCOPES: &[(&str, &str)] = &[
    ("fs.write", "dir:/srv/shared"),
    ("fs.delete", "dir:/home/alice/project"),
    ("secret.use", "secret:GITHUB_TOKEN"),
    ("tool.call", "mcp:jira"),
    ("tool.call", "mcp:gmail"),
    ("http.request", "domain:example.com"),
    ("exec", "program:git"),
];

/// A small deterministic generator, so that a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

async fn preview_one(harness: &warden_sdk::Client, actor: &Actor, action: &str, kind: &Kind) -> Outcome {
    let preview = harness.preview(actor, action, [kind.clone()]).await.expect("preview");
    preview.outcomes[0]
}

#[tokio::test]
async fn preview_agrees_with_authorize_on_random_requests_and_state() {
    // Three waiting approvals per session at most, so that the cap is met.
    let monitor = TestMonitor::start_tuned(|c| c.max_pending_per_session = 3).await;
    let harness = monitor.harness().await;
    let mut admin = monitor.admin().await;
    let pool = pool();
    let actors: Vec<Actor> = [("alice", "claude-code"), ("bob", "codex"), ("carol", "claude-code"), ("dave", "codex")]
        .iter()
        .flat_map(|(user, agent)| (1..=2).map(move |s| Actor::new(*user, *agent, format!("{user}-s{s}"))))
        .collect();
    let seed = std::env::var("WARDEN_PREVIEW_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_cafe_u64);
    let mut rng = Rng(seed);
    let mut previews = 0usize;
    let mut seen = std::collections::HashMap::<Outcome, usize>::new();
    for step in 0..600 {
        let actor = &actors[rng.below(actors.len())];
        match rng.below(20) {
            0 => {
                let (action, scope) = GRANT_SCOPES[rng.below(GRANT_SCOPES.len())];
                let session = if rng.below(2) == 0 { actor.session.clone() } else { String::new() };
                admin
                    .create_grant(pb::CreateGrantRequest {
                        user: actor.user.clone(),
                        session,
                        actions: vec![action.into()],
                        resource_scope: scope.into(),
                        ttl_seconds: 600,
                        reason: "differential".into(),
                        ..Default::default()
                    })
                    .await
                    .expect("grant");
            }
            1 => {
                let target = pb::LockSessionRequest { session: actor.session.clone(), ..Default::default() };
                // Already locked: an error, and the state is as wanted.
                let _ = admin.lock_session(target).await;
            }
            2 => {
                let target = pb::UnlockSessionRequest { session: actor.session.clone(), ..Default::default() };
                let _ = admin.unlock_session(target).await;
            }
            3 => monitor.advance_clock(Duration::from_secs(400)),
            4 | 5 => {
                // A batch of one action's resources against single previews
                // on the same (unchanged) state.
                let (action, _) = &pool[rng.below(pool.len())];
                let batch: Vec<Kind> = pool.iter().filter(|(a, _)| a == action).map(|(_, k)| k.clone()).collect();
                let together = harness.preview(actor, *action, batch.clone()).await.expect("batch preview");
                previews += 1;
                assert_eq!(together.outcomes.len(), batch.len());
                for (kind, outcome) in batch.iter().zip(&together.outcomes) {
                    let alone = preview_one(&harness, actor, action, kind).await;
                    previews += 1;
                    assert_eq!(alone, *outcome, "step {step}: batch and single previews differ for {kind:?}");
                }
            }
            _ => {
                let (action, kind) = &pool[rng.below(pool.len())];
                let previewed = preview_one(&harness, actor, action, kind).await;
                previews += 1;
                let decided = harness.authorize(actor, as_request(action, kind)).await.expect("authorize");
                assert_eq!(
                    previewed, decided.outcome,
                    "step {step} (seed {seed}): {actor:?} {action} {kind:?}: preview said {previewed:?}, \
                     Authorize said {:?} ({:?})",
                    decided.outcome, decided.reasons
                );
                *seen.entry(decided.outcome).or_default() += 1;
            }
        }
    }
    // The run covered every outcome.
    for outcome in [Outcome::Allow, Outcome::Deny, Outcome::Pending] {
        assert!(seen.get(&outcome).copied().unwrap_or(0) >= 5, "too few {outcome:?} in {seen:?}");
    }
    // One audit record per preview call, naming each resource and outcome.
    let records = monitor.audit().await;
    let preview_records: Vec<_> = records.iter().filter(|r| r.kind == "preview").collect();
    assert_eq!(preview_records.len(), previews);
}

#[tokio::test]
async fn preview_leaves_no_label_approval_or_idempotency_record() {
    let monitor = TestMonitor::start().await;
    let harness = monitor.harness().await;
    let actor = Actor::new("alice", "claude-code", "quiet");
    let before = monitor.audit().await.len();

    // A web read (untrusted-input), a private read (private-data) and a push
    // that would wait for a person.
    let web = harness.preview(&actor, "http.request", [http("GET", "https://example.com/")]).await.unwrap();
    let private = harness.preview(&actor, "fs.read", [file("/home/alice/private/diary.txt")]).await.unwrap();
    let push = harness.preview(&actor, "exec", [command(&["git", "push", "origin", "main"])]).await.unwrap();
    assert_eq!(web.outcomes, [Outcome::Allow]);
    assert_eq!(private.outcomes, [Outcome::Allow]);
    assert_eq!(push.outcomes, [Outcome::Pending]);
    assert!(!web.policy_version.is_empty());

    // Had those been authorized, the session would hold both labels and a
    // POST would wait for a person; after previews it holds none.
    let mut admin = monitor.admin().await;
    let session = admin.get_session(pb::GetSessionRequest { session: "quiet".into(), ..Default::default() }).await;
    if let Ok(session) = session {
        assert!(session.into_inner().labels.is_empty());
    }
    let gist = || [http("POST", "https://api.github.com/gists")];
    let post = harness.preview(&actor, "http.request", gist()).await.unwrap();
    assert_eq!(post.outcomes, [Outcome::Allow], "no label, so the trifecta rule is not armed");
    let mut approvals = monitor.approvals(APPROVER).await;
    let pending = approvals.list_pending(pb::ListPendingRequest::default()).await.unwrap().into_inner();
    assert!(pending.approvals.is_empty(), "a preview never waits for a person");

    // One record per call, of kind `preview`, naming the resource and outcome.
    let records = monitor.audit().await;
    assert_eq!(records.len() - before, 4);
    let last = records.last().unwrap();
    assert_eq!(last.kind, "preview");
    assert_eq!(last.actor.as_ref().unwrap().session, "quiet");
    assert!(monitor.verify().await.ok);

    // Now authorize for real: the labels come, and the POST waits.
    let allow = |a, k: &Kind| harness.authorize(&actor, as_request(a, k));
    assert_eq!(allow("http.request", &http("GET", "https://example.com/")).await.unwrap().outcome, Outcome::Allow);
    assert_eq!(allow("fs.read", &file("/home/alice/private/diary.txt")).await.unwrap().outcome, Outcome::Allow);
    let post = harness.preview(&actor, "http.request", gist()).await.unwrap();
    assert_eq!(post.outcomes, [Outcome::Pending]);
}

#[tokio::test]
async fn preview_checks_input_credentials_and_its_bound() {
    let monitor = TestMonitor::start().await;
    let actor = Some(pb::Actor { user: "alice".into(), agent: "claude-code".into(), session: "s1".into() });
    let request = |resources: Vec<Kind>| pb::PreviewRequest {
        actor: actor.clone(),
        action: "fs.read".into(),
        resources: resources.into_iter().map(|k| pb::Resource { kind: Some(k) }).collect(),
    };
    let mut authority = monitor.authority(HARNESS).await;

    let status = authority.preview(request(vec![file("/a"), file("relative/path")])).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().starts_with("resources[1].file.path"), "{}", status.message());

    let mut missing = request(vec![file("/a")]);
    missing.resources.push(pb::Resource { kind: None });
    let status = authority.preview(missing).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().starts_with("resources[1]"), "{}", status.message());

    let status = authority.preview(request(vec![file("/a"); 1025])).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("at most 1024"), "{}", status.message());

    let mut unknown_action = request(vec![file("/a")]);
    unknown_action.action = "fs.teleport".into();
    assert_eq!(authority.preview(unknown_action).await.unwrap_err().code(), Code::InvalidArgument);

    // An empty list is a valid question with an empty answer.
    let empty = authority.preview(request(vec![])).await.unwrap().into_inner();
    assert!(empty.outcomes.is_empty());

    // A harness only for alice may not preview for bob; other roles may not preview at all.
    let mut for_bob = request(vec![file("/a")]);
    for_bob.actor = Some(pb::Actor { user: "bob".into(), agent: "codex".into(), session: "b".into() });
    let status = monitor.authority(ALICE_ONLY).await.preview(for_bob).await.unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied);
    for token in [APPROVER, ADMIN] {
        let status = monitor.authority(token).await.preview(request(vec![file("/a")])).await.unwrap_err();
        assert_eq!(status.code(), Code::PermissionDenied);
    }
}
