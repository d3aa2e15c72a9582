//! The audit log: every decision recorded before it is answered, a hash
//! chain that verifies, detects tampering and survives restarts.

use tokio_stream::StreamExt;
use warden_proto::v1 as pb;
use warden_sdk::{ActionRequest, Actor, Decision, Outcome};

use warden_monitor::codec::{self, Record};
use warden_monitor::normalize::{Actor as InputActor, RequestInput, ResourceInput};
use warden_monitor::service::legacy_request_hash;
use warden_monitor::store::{AuditRecord, Remembered, SessionRecord, StoppedStore, trees};

use crate::support::TestMonitor;

fn alice() -> Actor {
    Actor::new("alice", "claude-code", "s1")
}

async fn decide_three(monitor: &TestMonitor) {
    let client = monitor.harness().await;
    for request in [
        ActionRequest::read_file("/home/alice/project/a.rs"),
        ActionRequest::read_file("/home/alice/.ssh/id_rsa"),
        ActionRequest::exec(["rm", "-rf", "/home/alice/project/target"]),
    ] {
        client.authorize(&alice(), request).await.unwrap();
    }
}

#[tokio::test]
async fn records_hold_what_was_decided_and_link_into_a_chain() {
    let monitor = TestMonitor::start().await;
    decide_three(&monitor).await;
    let records = monitor.audit().await;
    assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2, 3]);
    let outcomes: Vec<i32> = records.iter().map(|r| r.outcome).collect();
    assert_eq!(outcomes, [pb::Outcome::Allow as i32, pb::Outcome::Deny as i32, pb::Outcome::Pending as i32]);
    let denied = &records[1];
    assert_eq!(denied.caller, "test-harness");
    assert_eq!(denied.actor.as_ref().map(|a| a.user.as_str()), Some("alice"));
    assert_eq!(denied.action, "fs.read");
    assert_eq!(denied.resource, r#"File::"/home/alice/.ssh/id_rsa""#);
    assert_eq!(denied.policy_ids, ["files.no-credentials"]);
    assert!(!denied.reasons.is_empty());
    assert_eq!(records[0].prev_hash, "0".repeat(64));
    assert_eq!(records[1].prev_hash, records[0].hash);
    assert_eq!(records[2].prev_hash, records[1].hash);
    assert!(!records[2].approval_id.is_empty());

    let report = monitor.verify().await;
    assert!(report.ok, "{report:?}");
    assert_eq!((report.records, report.head_seq), (3, 3));
    assert_eq!(report.head_hash, records[2].hash);

    // The newest N.
    let mut admin = monitor.admin().await;
    let newest: Vec<_> = admin
        .tail_audit(pb::TailAuditRequest { count: 2, all: false, follow: false, ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .collect::<Result<Vec<_>, _>>()
        .await
        .unwrap();
    assert_eq!(newest.iter().map(|r| r.seq).collect::<Vec<_>>(), [2, 3]);
}

#[tokio::test]
async fn a_followed_tail_sees_new_records() {
    let monitor = TestMonitor::start().await;
    decide_three(&monitor).await;
    let mut admin = monitor.admin().await;
    let mut stream = admin
        .tail_audit(pb::TailAuditRequest { count: 1, all: false, follow: true, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stream.next().await.unwrap().unwrap().seq, 3);
    monitor.harness().await.authorize(&alice(), ActionRequest::read_file("/home/alice/project/b.rs")).await.unwrap();
    let next = tokio::time::timeout(std::time::Duration::from_secs(5), stream.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(next.seq, 4);
    assert_eq!(next.resource, r#"File::"/home/alice/project/b.rs""#);
}

#[tokio::test]
async fn records_and_chain_survive_a_restart_and_the_sequence_continues() {
    let mut monitor = TestMonitor::start().await;
    decide_three(&monitor).await;
    let before = monitor.audit().await;
    let client = monitor.harness().await;
    let keyed = ActionRequest::read_file("/home/alice/project/keyed.rs").request_id("keyed-1");
    let first = client.authorize(&alice(), keyed.clone()).await.unwrap();
    assert_eq!(first.audit_seq, 4);

    monitor.restart().await;

    let after = monitor.audit().await;
    assert_eq!(&after[..3], &before[..]);
    let client = monitor.harness().await;
    // The idempotency key is remembered across the restart (and the
    // replay is a record of its own).
    let replayed = client.authorize(&alice(), keyed).await.unwrap();
    assert_eq!(Decision { audit_seq: first.audit_seq, ..replayed.clone() }, first);
    assert_eq!(replayed.audit_seq, 5);
    let next = client.authorize(&alice(), ActionRequest::read_file("/home/alice/project/c.rs")).await.unwrap();
    assert_eq!(next.outcome, Outcome::Allow);
    assert_eq!(next.audit_seq, 6);
    let report = monitor.verify().await;
    assert!(report.ok && report.records == 6, "{report:?}");
}

/// A store written by an older version, whose decision records were JSON,
/// carries over: the chain verifies and continues, idempotency keys replay,
/// sessions (kept then under the bare session id) keep their owner and
/// their labels.
#[tokio::test]
async fn a_store_with_the_json_records_of_older_versions_carries_over() {
    if crate::support::embedded_only("a_store_with_the_json_records_of_older_versions_carries_over") {
        return;
    }
    let mut monitor = TestMonitor::start().await;
    decide_three(&monitor).await;
    let keyed = ActionRequest::read_file("/home/alice/project/keyed.rs").request_id("keyed-1");
    let first = monitor.harness().await.authorize(&alice(), keyed.clone()).await.unwrap();
    let web = ActionRequest::http("GET", "https://blog.example.com/howto");
    assert_eq!(monitor.harness().await.authorize(&alice(), web).await.unwrap().outcome, Outcome::Allow);
    let before = monitor.audit().await;
    monitor.stop_server().await;
    // Older versions kept the audit records in sled.
    let records: Vec<AuditRecord> =
        StoppedStore::open(&monitor.store_dir()).unwrap().records(1).collect::<Result<_, _>>().unwrap();
    assert_eq!(records.len(), 5);
    std::fs::remove_dir_all(monitor.store_dir().join("audit")).unwrap();
    {
        let db = sled::open(monitor.store_dir()).unwrap();
        let audit = db.open_tree(trees::AUDIT).unwrap();
        for record in &records {
            audit.insert(record.seq().to_be_bytes(), serde_json::to_vec(record).unwrap()).unwrap();
        }
        let remembered: usize = [trees::REQUESTS, trees::REQUESTS_1, trees::REQUESTS_2]
            .into_iter()
            .map(|tree| rewrite_as_json::<Remembered>(&db, tree))
            .sum();
        assert_eq!(remembered, 5, "the SDK keys every request");
        // Older versions hashed the request's JSON.
        let input = RequestInput {
            request_id: "keyed-1".into(),
            actor: InputActor { user: "alice".into(), agent: "claude-code".into(), session: "s1".into() },
            action: "fs.read".into(),
            resource: ResourceInput::File {
                path: "/home/alice/project/keyed.rs".into(),
                cwd: String::new(),
                pattern: false,
            },
            justification: String::new(),
            context_json: String::new(),
        };
        let (slot, key) = [trees::REQUESTS, trees::REQUESTS_1, trees::REQUESTS_2]
            .into_iter()
            .map(|name| db.open_tree(name).unwrap())
            .find_map(|tree| {
                let key = tree.iter().keys().map(Result::unwrap).find(|key| key.ends_with(b"\0keyed-1"))?;
                Some((tree, key))
            })
            .unwrap();
        let mut record: Remembered = codec::decode(&slot.get(&key).unwrap().unwrap()).unwrap();
        assert_ne!(record.request_hash, legacy_request_hash(&input));
        record.request_hash = legacy_request_hash(&input);
        slot.insert(key, serde_json::to_vec(&record).unwrap()).unwrap();
        // Older versions kept a session under its bare id, without a harness.
        let sessions = db.open_tree(trees::SESSIONS).unwrap();
        let stored: Vec<_> = sessions.iter().map(Result::unwrap).collect();
        assert_eq!(stored.len(), 1);
        for (key, value) in stored {
            let record: SessionRecord = codec::decode(&value).unwrap();
            assert_eq!(record.labels.iter().collect::<Vec<_>>(), ["untrusted-input"]);
            let mut json = serde_json::to_value(&record).unwrap();
            json.as_object_mut().unwrap().remove("harness");
            sessions.remove(key).unwrap();
            sessions.insert(record.session.as_bytes(), serde_json::to_vec(&json).unwrap()).unwrap();
        }
        db.flush().unwrap();
    }
    monitor.restart().await;

    assert_eq!(monitor.audit().await, before);
    let client = monitor.harness().await;
    let replayed = client.authorize(&alice(), keyed).await.unwrap();
    assert_eq!(Decision { audit_seq: first.audit_seq, ..replayed }, first, "replayed from a JSON record");
    // The old record is still alice's claude-code session: another agent
    // kind of hers is denied on it; bob's `s1` is a session of his own.
    let codex = client.authorize(&Actor::new("alice", "codex", "s1"), ActionRequest::read_file("/home/alice/a")).await;
    let codex = codex.unwrap();
    assert_eq!(codex.outcome, Outcome::Deny);
    assert!(codex.reasons.iter().any(|r| r.contains("belongs to agent `claude-code`")), "{codex:?}");
    let bob = Actor::new("bob", "claude-code", "s1");
    let bobs = client.authorize(&bob, ActionRequest::read_file("/home/bob/work/notes.md")).await.unwrap();
    assert_eq!(bobs.outcome, Outcome::Allow, "{bobs:?}");
    // Its label from before the upgrade still counts: with private data
    // added, sending data out waits for a person.
    let private = client.authorize(&alice(), ActionRequest::read_file("/home/alice/private/salaries.csv")).await;
    assert_eq!(private.unwrap().outcome, Outcome::Allow);
    let post = || ActionRequest::http("POST", "https://api.github.com/repos/acme/app/issues");
    let exfiltrate = client.authorize(&alice(), post()).await.unwrap();
    assert_eq!(exfiltrate.outcome, Outcome::Pending, "{exfiltrate:?}");
    assert_eq!(exfiltrate.policy_ids, ["trifecta.no-exfiltration"]);
    assert_eq!(client.authorize(&bob, post()).await.unwrap().outcome, Outcome::Allow);
    let report = monitor.verify().await;
    // 10 decisions and the replay's record.
    assert!(report.ok && report.records == 11, "{report:?}");
}

/// Rewrites one stored record while the monitor is stopped.
fn tamper(monitor: &TestMonitor, seq: u64, edit: impl Fn(&mut AuditRecord)) {
    rewrite(monitor, |records| {
        if let Some(record) = records.iter_mut().find(|r| r.seq() == seq) {
            edit(record);
        }
    });
}

/// Writes the audit log of the stopped monitor again, changed by `edit`.
fn rewrite(monitor: &TestMonitor, edit: impl FnOnce(&mut Vec<AuditRecord>)) {
    let store = StoppedStore::open(&monitor.store_dir()).unwrap();
    let mut records: Vec<AuditRecord> = store.records(1).collect::<Result<_, _>>().unwrap();
    edit(&mut records);
    store.rewrite(&records).unwrap();
}

/// Rewrites every value of `tree` as JSON, the form older versions wrote;
/// returns how many.
fn rewrite_as_json<R: Record + serde::Serialize>(db: &sled::Db, tree: &str) -> usize {
    let tree = db.open_tree(tree).unwrap();
    let mut rewritten = 0;
    for item in tree.iter() {
        let (key, value) = item.unwrap();
        let record: R = codec::decode(&value).unwrap();
        tree.insert(key, serde_json::to_vec(&record).unwrap()).unwrap();
        rewritten += 1;
    }
    rewritten
}

#[tokio::test]
async fn a_rewritten_record_is_detected_and_named() {
    if crate::support::embedded_only("a_rewritten_record_is_detected_and_named") {
        return;
    }
    let mut monitor = TestMonitor::start().await;
    decide_three(&monitor).await;
    monitor.stop_server().await;
    // Someone with access to the disk turns the DENY into an ALLOW.
    tamper(&monitor, 2, |record| record.outcome = "ALLOW".into());
    monitor.restart().await;
    let report = monitor.verify().await;
    assert!(!report.ok);
    assert_eq!(report.first_bad_seq, 2);
    assert!(report.error.contains("altered"), "{}", report.error);
    assert_eq!(report.head_seq, 1, "the last good record");
}

#[tokio::test]
async fn a_flipped_byte_in_a_hash_or_a_removed_record_is_detected() {
    if crate::support::embedded_only("a_flipped_byte_in_a_hash_or_a_removed_record_is_detected") {
        return;
    }
    let mut monitor = TestMonitor::start().await;
    decide_three(&monitor).await;
    monitor.stop_server().await;
    tamper(&monitor, 1, |record| {
        record.hash = match record.hash.strip_prefix('0') {
            Some(rest) => format!("1{rest}"),
            None => format!("0{}", &record.hash[1..]),
        };
    });
    monitor.restart().await;
    let report = monitor.verify().await;
    assert!(!report.ok);
    assert_eq!(report.first_bad_seq, 1);

    monitor.stop_server().await;
    rewrite(&monitor, |records| {
        records.remove(0);
    });
    monitor.restart().await;
    let report = monitor.verify().await;
    assert!(!report.ok);
    assert_eq!(report.first_bad_seq, 1, "{report:?}");
}
