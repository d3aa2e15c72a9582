//! Unit tests that drive a `Monitor` directly: a temporary store, the
//! bundled policies, a clock the test moves, and the sweeper run by hand.

use std::sync::atomic::{AtomicI64, Ordering};

use super::*;
use crate::auth::{Role, UserScope};
use crate::normalize::Actor as InputActor;
use crate::store::Durability;

struct Fixture {
    monitor: Arc<Monitor>,
    offset_ns: Arc<AtomicI64>,
    _closer: crate::store::StoreCloser,
    _dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let policies = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
        let snapshot = PolicySnapshot::load(&policies).unwrap();
        let (store, closer) = crate::store::Embedded::open_with(
            &dir.path().join("store"),
            Durability::Flush,
            crate::store::log::DEFAULT_SEGMENT_BYTES,
        )
        .unwrap();
        let offset_ns = Arc::new(AtomicI64::new(0));
        let clock: Clock = {
            let offset_ns = Arc::clone(&offset_ns);
            Arc::new(move || OffsetDateTime::now_utc() + time::Duration::nanoseconds(offset_ns.load(Ordering::SeqCst)))
        };
        let config = MonitorConfig { policy_dir: policies, clock, ..MonitorConfig::default() };
        let (_stop, shutdown) = Shutdown::new();
        let monitor = Arc::new(Monitor::new(snapshot, store, config, shutdown).unwrap());
        Self { monitor, offset_ns, _closer: closer, _dir: dir }
    }

    fn advance(&self, by: Duration) {
        self.offset_ns.fetch_add(i64::try_from(by.as_nanos()).unwrap(), Ordering::SeqCst);
    }
}

fn harness() -> Caller {
    Caller { name: "unit".into(), role: Role::Harness, users: UserScope::All, groups: UserScope::All, rate: None }
}

fn exec(argv: &[&str]) -> RequestInput {
    RequestInput {
        request_id: String::new(),
        actor: InputActor { user: "alice".into(), agent: "claude-code".into(), session: "s1".into() },
        action: "exec".into(),
        resource: ResourceInput::Command {
            argv: argv.iter().map(|a| (*a).to_owned()).collect(),
            cwd: "/home/alice/project".into(),
        },
        justification: String::new(),
        context_json: String::new(),
    }
}

#[tokio::test]
async fn a_decision_is_answered_with_its_durable_record() {
    let fixture = Fixture::new();
    let decision = fixture.monitor.authorize(&harness(), exec(&["git", "status"])).await.unwrap();
    assert_eq!(decision.outcome, Outcome::Allow);
    assert_eq!(decision.policy_ids, ["commands.developer-tools"]);
    let records = fixture.monitor.store().audit_from(1, 10).await.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!((records[0].seq, records[0].outcome.as_str()), (decision.audit_seq, "ALLOW"));
}

#[tokio::test]
async fn an_unanswered_approval_expires_when_the_clock_passes_its_deadline() {
    let fixture = Fixture::new();
    let pending = fixture.monitor.authorize(&harness(), exec(&["git", "push", "origin", "main"])).await.unwrap();
    assert_eq!(pending.outcome, Outcome::Pending);
    // Before the deadline the sweeper leaves it waiting.
    fixture.monitor.sweep_once().await;
    assert_eq!(fixture.monitor.approval(&pending.approval_id).await.unwrap().state, ApprovalState::Pending);
    // The policy waits 15 minutes for a release manager.
    fixture.advance(Duration::from_secs(15 * 60 + 1));
    fixture.monitor.sweep_once().await;
    let expired = fixture.monitor.approval(&pending.approval_id).await.unwrap();
    assert_eq!(expired.state, ApprovalState::Expired);
    let records = fixture.monitor.store().audit_from(1, 10).await.unwrap();
    assert_eq!(records.last().map(|r| r.kind.as_str()), Some("approval.expired"));
}

#[tokio::test]
async fn every_part_of_a_command_is_on_record() {
    let fixture = Fixture::new();
    let script = exec(&["bash", "-c", "cat README.md | grep TODO > todo.txt"]);
    let decision = fixture.monitor.authorize(&harness(), script).await.unwrap();
    assert_eq!(decision.outcome, Outcome::Allow, "{decision:?}");
    let record = fixture.monitor.store().audit_from(1, 10).await.unwrap().pop().unwrap();
    let parts: Vec<&String> = record.reasons.iter().filter(|r| r.starts_with("part ")).collect();
    assert_eq!(parts.len(), 4, "{:?}", record.reasons);
    assert!(parts.iter().any(|p| p.contains("`/home/alice/project/todo.txt` (fs.write): ALLOW")), "{parts:?}");
}
