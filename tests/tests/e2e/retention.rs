//! Audit retention: whole sealed segments leave the live store (archived or
//! deleted), each closed by a signed checkpoint, and what remains still
//! verifies from there, online and offline, across a restart; without that
//! checkpoint it does not.

use warden_monitor::config::AuditConfig;
use warden_monitor::store::{AuditRecord, StoppedStore};
use warden_sdk::{ActionRequest, Actor};

use crate::support::{TestMonitor, eventually};

const SEGMENT: u64 = 64 * 1024;

/// Decisions from eight tasks at once until `done` says so.
async fn decide_until(monitor: &TestMonitor, done: impl AsyncFn(&TestMonitor) -> bool) -> usize {
    let mut decided = 0;
    while !done(monitor).await {
        let mut tasks = Vec::new();
        for worker in 0..8 {
            let client = monitor.harness().await;
            tasks.push(tokio::spawn(async move {
                let actor = Actor::new("alice", "claude-code", format!("s{worker}"));
                for n in 0..50 {
                    let path = format!("/home/alice/project/src/{worker}/{n}.rs");
                    client.authorize(&actor, ActionRequest::read_file(&path)).await.unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        decided += 400;
        assert!(decided < 40_000, "retention did not remove a segment after {decided} decisions");
    }
    decided
}

fn live_segments(monitor: &TestMonitor) -> Vec<(String, u64)> {
    let mut found: Vec<(String, u64)> = std::fs::read_dir(monitor.store_dir().join("audit"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".seg"))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().unwrap().len()))
        .collect();
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_segments_leave_closed_by_a_signed_checkpoint_and_the_rest_still_verifies() {
    if crate::support::embedded_only("old_segments_leave_closed_by_a_signed_checkpoint_and_the_rest_still_verifies") {
        return;
    }
    let archive = tempfile::tempdir().unwrap();
    let audit = AuditConfig {
        retain_bytes: Some(4 * SEGMENT),
        archive_dir: Some(archive.path().to_owned()),
        segment_bytes: SEGMENT,
        ..AuditConfig::default()
    };
    let mut monitor = TestMonitor::start_with_audit(audit).await;
    let archived = |dir: &std::path::Path| std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0);
    decide_until(&monitor, async |m: &TestMonitor| {
        archived(archive.path()) >= 2 && m.audit().await.iter().any(|r| r.kind == "audit.segment-removed")
    })
    .await;

    // The live log starts after the archived records, and stays near its bound.
    let records = monitor.audit().await;
    let first = records.first().unwrap().seq;
    assert!(first > 1, "the oldest records left the live store");
    assert_eq!(records.last().unwrap().seq - first + 1, records.len() as u64, "no gap in what is left");
    let live: u64 = live_segments(&monitor).iter().map(|(_, bytes)| bytes).sum();
    assert!(live <= 4 * SEGMENT + 2 * SEGMENT, "{live} bytes live: {:?}", live_segments(&monitor));
    let removed = records.iter().find(|r| r.kind == "audit.segment-removed").unwrap();
    assert!(removed.reasons[0].starts_with("records "), "{:?}", removed.reasons);
    assert!(removed.reasons[0].contains(&archive.path().display().to_string()), "{:?}", removed.reasons);
    // The archive holds the segments, byte for byte the sealed files.
    let mut names: Vec<String> =
        std::fs::read_dir(archive.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    names.sort();
    assert_eq!(names[0], format!("{:020}.seg", 1));

    // The chain verifies from the checkpoint that closed the last segment
    // removed, online, after a restart, and offline.
    let report = monitor.verify().await;
    assert!(report.ok, "{report:?}");
    assert_eq!(report.records, monitor.audit().await.len() as u64);
    monitor.restart().await;
    let report = monitor.verify().await;
    assert!(report.ok, "after a restart: {report:?}");
    monitor.stop_server().await;
    let offline = warden_monitor::verify::verify_offline(monitor.data.path(), None).unwrap().report;
    assert!(offline.ok(), "{offline:?}");
    assert!(offline.base.seq + 1 >= first, "it starts after a removed record: {offline:?}");

    // Someone removes the checkpoints as well as old records: the log no
    // longer proves where it starts.
    std::fs::remove_file(monitor.data.path().join(warden_monitor::config::CHECKPOINT_LOG_FILE)).unwrap();
    let offline = warden_monitor::verify::verify_offline(monitor.data.path(), None).unwrap().report;
    let (seq, why) = offline.first_bad.clone().expect("the start is no longer vouched for");
    assert_eq!(seq, 1);
    assert!(why.contains("records were removed"), "{why}");
    monitor.restart().await;
    let report = monitor.verify().await;
    assert!(!report.ok && report.error.contains("records were removed"), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_archive_old_segments_are_deleted_and_kept_ones_are_whole() {
    if crate::support::embedded_only("without_an_archive_old_segments_are_deleted_and_kept_ones_are_whole") {
        return;
    }
    let audit = AuditConfig { retain_bytes: Some(3 * SEGMENT), segment_bytes: SEGMENT, ..AuditConfig::default() };
    let monitor = TestMonitor::start_with_audit(audit).await;
    decide_until(&monitor, async |m: &TestMonitor| {
        m.audit().await.iter().filter(|r| r.kind == "audit.segment-removed").count() >= 2
    })
    .await;
    let segments = live_segments(&monitor);
    assert!(!segments.iter().any(|(name, _)| name == &format!("{:020}.seg", 1)), "{segments:?}");
    // Every live segment but the newest is sealed: cut to its frames.
    for (_, bytes) in &segments[..segments.len() - 1] {
        assert!(*bytes < SEGMENT + 4096, "{segments:?}");
    }
    eventually("the chain verifies", || async { monitor.verify().await.ok.then_some(()) }).await;
}

/// A monitor with small segments, stopped after enough decisions for
/// several of them.
async fn stopped_with_segments(count: usize) -> TestMonitor {
    let audit = AuditConfig { segment_bytes: SEGMENT, ..AuditConfig::default() };
    let mut monitor = TestMonitor::start_with_audit(audit).await;
    decide_until(&monitor, async |m: &TestMonitor| live_segments(m).len() >= count).await;
    monitor.stop_server().await;
    monitor
}

fn offline(monitor: &TestMonitor) -> Result<warden_monitor::store::VerifyReport, String> {
    warden_monitor::verify::verify_offline(monitor.data.path(), None).map(|r| r.report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_taken_from_the_middle_is_reported_missing() {
    if crate::support::embedded_only("a_segment_taken_from_the_middle_is_reported_missing") {
        return;
    }
    let monitor = stopped_with_segments(4).await;
    assert!(offline(&monitor).unwrap().ok());
    let segments = live_segments(&monitor);
    std::fs::remove_file(monitor.store_dir().join("audit").join(&segments[1].0)).unwrap();
    let report = offline(&monitor).unwrap();
    let (seq, why) = report.first_bad.expect("a missing segment is caught");
    assert!(why.contains("missing"), "{why}");
    let second: u64 = segments[1].0.trim_end_matches(".seg").parse().unwrap();
    assert_eq!(seq, second, "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_segments_deleted_by_hand_are_not_vouched_for_by_a_periodic_checkpoint() {
    if crate::support::embedded_only("old_segments_deleted_by_hand_are_not_vouched_for_by_a_periodic_checkpoint") {
        return;
    }
    let mut monitor = stopped_with_segments(3).await;
    // The shutdown checkpoint signs the head; the next start begins a
    // segment right after it.
    monitor.launch_again().await;
    monitor
        .harness()
        .await
        .authorize(&Actor::new("alice", "claude-code", "s"), ActionRequest::read_file("/home/alice/project/x"))
        .await
        .unwrap();
    monitor.stop_server().await;
    let segments = live_segments(&monitor);
    for (name, _) in &segments[..segments.len() - 1] {
        std::fs::remove_file(monitor.store_dir().join("audit").join(name)).unwrap();
    }
    let report = offline(&monitor).unwrap();
    let (_, why) = report.first_bad.expect("the start is not vouched for");
    assert!(why.contains("no retention record") && why.contains("records were removed"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removal_record_forged_without_the_key_vouches_for_nothing() {
    if crate::support::embedded_only("a_removal_record_forged_without_the_key_vouches_for_nothing") {
        return;
    }
    let mut monitor = stopped_with_segments(3).await;
    // The shutdown checkpoint signs the head; the next start begins a
    // segment right after it, so that record is vouched for by a checkpoint.
    monitor.launch_again().await;
    let actor = Actor::new("alice", "claude-code", "s");
    monitor.harness().await.authorize(&actor, ActionRequest::read_file("/home/alice/project/x")).await.unwrap();
    monitor.stop_server().await;
    let segments = live_segments(&monitor);
    let kept_from: u64 = segments.last().unwrap().0.trim_end_matches(".seg").parse().unwrap();

    // Someone with write access to the data folder deletes the oldest
    // segments and appends a retention record of their own, chained to the
    // head (a hash and a checksum need no key).
    let store = StoppedStore::open(&monitor.store_dir()).unwrap();
    let records: Vec<AuditRecord> = store.records(1).collect::<Result<_, _>>().unwrap();
    let base = records.iter().find(|r| r.seq() == kept_from - 1).unwrap().clone();
    let mut kept: Vec<AuditRecord> = records.into_iter().filter(|r| r.seq() >= kept_from).collect();
    let head = kept.last().unwrap().clone();
    let mut forged = serde_json::to_value(&head).unwrap();
    forged["seq"] = (head.seq() + 1).into();
    forged["kind"] = "audit.segment-removed".into();
    forged["caller"] = "wardend".into();
    forged["outcome"] = "".into();
    forged["request"] = serde_json::json!({
        "first_seq": 1, "last_seq": base.seq(), "last_hash": base.hash, "bytes": 1,
        "archive": null, "why": "over retain_bytes", "signature": "00".repeat(64),
    })
    .to_string()
    .into();
    forged["prev_hash"] = head.hash.clone().into();
    let mut forged: AuditRecord = serde_json::from_value(forged).unwrap();
    forged.hash = forged.compute_hash();
    kept.push(forged);
    store.rewrite(&kept).unwrap();
    drop(store);
    for (name, _) in &segments[..segments.len() - 1] {
        let path = monitor.store_dir().join("audit").join(name);
        if path.exists() {
            std::fs::remove_file(path).unwrap();
        }
    }

    // Offline and online, the start is not vouched for.
    let report = offline(&monitor).unwrap();
    let (seq, why) = report.first_bad.expect("a forged removal is refused");
    assert_eq!(seq, 1);
    assert!(why.contains("did not sign") && why.contains("records were removed"), "{why}");
    monitor.launch_again().await;
    let report = monitor.verify().await;
    assert!(!report.ok && report.error.contains("did not sign"), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_in_the_newest_segment_is_refused_not_cut_off() {
    if crate::support::embedded_only("a_flipped_byte_in_the_newest_segment_is_refused_not_cut_off") {
        return;
    }
    let monitor = stopped_with_segments(2).await;
    let newest = monitor.store_dir().join("audit").join(&live_segments(&monitor).last().unwrap().0);
    let mut bytes = std::fs::read(&newest).unwrap();
    let len = bytes.len();
    // Inside the first frame (after the 48-byte header), with more after it.
    let at = 48 + 30;
    bytes[at] ^= 0x40;
    std::fs::write(&newest, &bytes).unwrap();
    let error = offline(&monitor).unwrap_err();
    assert!(error.contains("damaged"), "{error}");
    assert_eq!(std::fs::metadata(&newest).unwrap().len() as usize, len, "nothing was cut off");

    // A segment under another name than its header's is refused too.
    bytes[at] ^= 0x40;
    std::fs::write(&newest, &bytes).unwrap();
    assert!(offline(&monitor).unwrap().ok());
    std::fs::rename(&newest, monitor.store_dir().join("audit").join(format!("{:020}.seg", 999_999))).unwrap();
    let error = offline(&monitor).unwrap_err();
    assert!(error.contains("its header says it starts at record"), "{error}");
}
