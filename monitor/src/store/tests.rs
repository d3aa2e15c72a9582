//! Unit tests of the store.

use super::*;

/// These tests drive the embedded store directly.
type Store = Embedded;

impl Store {
    /// The decision remembered for `(harness, request_id)` that can
    /// still be replayable at `now_unix_ns`, as a lookup sees it.
    fn remembered(&self, harness: &str, request_id: &str, now_unix_ns: i64) -> Result<Option<Remembered>, StoreError> {
        self.trees.remembered(&request_key(harness, request_id), now_unix_ns, false)
    }
}

#[test]
fn decision_records_round_trip_through_the_binary_form() {
    let decision = DecisionRecord {
        request_id: "r-1".into(),
        outcome: Outcome::Pending,
        policy_ids: vec!["a".into(), "b".into()],
        reasons: vec!["needs \"approval\"\n".into()],
        approval_id: "apr-1".into(),
        expires_at_unix_ns: Some(-1),
        grant_ids: vec![],
        policy_version: "v".into(),
        audit_seq: 7,
        resolved_by: "carol".into(),
        note: "ü".into(),
        labels: vec![],
    };
    let remembered = Remembered { request_hash: "h".into(), decided_unix_ns: 42, decision };
    assert_eq!(codec::decode::<Remembered>(&codec::encode(&remembered)).unwrap(), remembered);
    let json = serde_json::to_vec(&remembered).unwrap();
    assert_eq!(codec::decode::<Remembered>(&json).unwrap(), remembered);
    for outcome in [Outcome::Allow, Outcome::Deny] {
        let mut other = remembered.clone();
        other.decision.outcome = outcome;
        other.decision.expires_at_unix_ns = None;
        assert_eq!(codec::decode::<Remembered>(&codec::encode(&other)).unwrap(), other);
    }

    let session = SessionRecord {
        session: "s".into(),
        user: "u".into(),
        agent: "a".into(),
        labels: ["private".to_owned(), "untrusted".to_owned()].into(),
        harness: "h".into(),
    };
    assert_eq!(codec::decode::<SessionRecord>(&codec::encode(&session)).unwrap(), session);
    // A record written before sessions were scoped ends after its labels.
    let mut older = codec::encode(&SessionRecord { harness: String::new(), ..session.clone() });
    older.pop();
    assert_eq!(
        codec::decode::<SessionRecord>(&older).unwrap(),
        SessionRecord { harness: String::new(), ..session.clone() }
    );
    let record = AuditRecord {
        seq: 3,
        time_unix_ns: 9,
        kind: "decision".into(),
        caller: "h".into(),
        actor: Actor { user: "u".into(), agent: "a".into(), session: "s".into() },
        action: "fs.read".into(),
        resource: r#"File::"/x""#.into(),
        request: r#"{"k":"v"}"#.into(),
        outcome: "ALLOW".into(),
        policy_ids: vec!["p".into()],
        reasons: vec![],
        policy_version: "v".into(),
        request_id: "r".into(),
        approval_id: String::new(),
        prev_hash: "0".repeat(64),
        hash: "f".repeat(64),
    };
    assert_eq!(AuditRecord::from_bytes(&record.to_bytes()).unwrap(), record);
    // The hash of stores already written: computed by the version
    // before the binary form.
    assert_eq!(record.compute_hash(), "9f58de1ab5cc2149604d3bd3204dd03bfa64eff3d73efc8b75ce1235e44945e3");
}

fn entry(n: u32) -> Commit {
    Commit {
        entry: AuditEntry {
            kind: "decision".into(),
            caller: "h".into(),
            outcome: "ALLOW".into(),
            ..AuditEntry::default()
        },
        guard: Guard::NewRequest {
            harness: "h".into(),
            request_id: format!("r{n}"),
            request_hash: format!("hash{n}"),
            now_unix_ns: 0,
            policy_version: "v".into(),
            replay: true,
        },
        decision: Some(DecisionRecord {
            request_id: format!("r{n}"),
            outcome: Outcome::Allow,
            policy_ids: vec![],
            reasons: vec![],
            approval_id: String::new(),
            expires_at_unix_ns: None,
            grant_ids: vec![],
            policy_version: "v".into(),
            audit_seq: 0,
            resolved_by: String::new(),
            note: String::new(),
            labels: vec![],
        }),
        approval: None,
        grant: None,
        lock: None,
        session: None,
        seen_labels: None,
        caps: None,
    }
}

/// A PENDING decision of `actor` with its new approval, as `authorize`
/// commits it.
fn pending_of(n: u32, actor: Actor) -> Commit {
    let mut commit = entry(n);
    let input = crate::normalize::RequestInput {
        request_id: format!("r{n}"),
        actor: actor.clone(),
        action: "exec".into(),
        resource: crate::normalize::ResourceInput::Command { argv: vec!["git".into(), "push".into()], cwd: "/".into() },
        justification: String::new(),
        context_json: String::new(),
    };
    let request = crate::normalize::normalize(&input).unwrap();
    let decision = commit.decision.as_mut().unwrap();
    decision.outcome = Outcome::Pending;
    decision.approval_id = format!("apr-{n}");
    decision.expires_at_unix_ns = Some(i64::MAX);
    commit.entry.outcome = "PENDING".into();
    commit.entry.approval_id = format!("apr-{n}");
    commit.entry.actor = Some(actor);
    commit.approval = Some(ApprovalRecord {
        approval_id: format!("apr-{n}"),
        input,
        request,
        request_hash: format!("hash{n}"),
        request_id: format!("r{n}"),
        harness: "h".into(),
        policy_ids: vec!["p".into()],
        reasons: vec!["needs a person".into()],
        permit_ids: vec![],
        approvers: vec![],
        passkey_policies: vec![],
        policy_version: "v".into(),
        created_unix_ns: 0,
        expires_unix_ns: i64::MAX,
        audit_seq: 0,
        state: ApprovalState::Pending,
        resolved_by: String::new(),
        note: String::new(),
        resolved_unix_ns: None,
        decision: commit.decision.clone().unwrap(),
        used_seq: 0,
    });
    commit
}

/// Opens the store again once the previous one is closed: sled releases its
/// file lock when its last I/O thread lets go, which may be a moment after
/// the close returned.
async fn reopen(dir: &Path, durability: Durability) -> (Store, StoreCloser) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match Store::open_with(dir, durability, log::DEFAULT_SEGMENT_BYTES) {
            Ok(opened) => return opened,
            Err(e) if std::time::Instant::now() < deadline && e.to_string().contains("could not acquire lock") => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
}

async fn gapless_chain_that_survives_reopen(durability: Durability) {
    let dir = tempfile::tempdir().unwrap();
    {
        let (store, closer) = Store::open_with(dir.path(), durability, log::DEFAULT_SEGMENT_BYTES).unwrap();
        let mut tasks = Vec::new();
        for n in 0..200 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move { store.commit(entry(n)).await }));
        }
        let mut seqs = Vec::new();
        for task in tasks {
            match task.await.unwrap().unwrap() {
                Committed::New { seq, decision: Some(d), .. } => {
                    assert_eq!(d.audit_seq, seq);
                    seqs.push(seq);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        seqs.sort_unstable();
        assert_eq!(seqs, (1..=200).collect::<Vec<_>>());
        // Same key and hash: the same decision again, nothing appended.
        let replay = store.commit(entry(7)).await.unwrap();
        assert!(matches!(replay, Committed::Replay(ref d) if d.request_id == "r7"), "{replay:?}");
        let mut reused = entry(7);
        reused.guard = Guard::NewRequest {
            harness: "h".into(),
            request_id: "r7".into(),
            request_hash: "other".into(),
            now_unix_ns: 0,
            policy_version: "v".into(),
            replay: true,
        };
        assert!(matches!(store.commit(reused).await.unwrap(), Committed::KeyReused(_)));
        drop(store);
        closer.close().await.unwrap();
    }
    let (store, closer) = reopen(dir.path(), durability).await;
    let report = store.verify();
    assert!(report.ok(), "{report:?}");
    assert_eq!(report.records, 200);
    let Committed::New { seq, .. } = store.commit(entry(999)).await.unwrap() else { panic!() };
    assert_eq!(seq, 201);
    drop(store);
    closer.close().await.unwrap();
    let segments = log::segments(&dir.path().join("audit")).unwrap();
    assert!(segments.len() > 1, "the unit tests' segments are small: {segments:?}");
    assert_eq!(log::read_all(&dir.path().join("audit")).unwrap().len(), 201);
    let (store, _closer) = reopen(dir.path(), durability).await;
    assert_eq!(store.trees.replay_from().unwrap(), 202, "after a clean close nothing is replayed");
    assert!(store.remembered("h", "r7", 0).unwrap().is_some(), "idempotency records survive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commits_form_one_gapless_chain_that_survives_reopen() {
    gapless_chain_that_survives_reopen(Durability::Fsync).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_with_flush_durability() {
    gapless_chain_that_survives_reopen(Durability::Flush).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_records_outlive_their_window_then_are_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let (store, closer) = Store::open(dir.path()).unwrap();
    let at = |n: i64| 1_800_000_000_000_000_000 + n * REPLAY_WINDOW_NS / 2;
    let mut commit = entry(1);
    if let Guard::NewRequest { now_unix_ns, .. } = &mut commit.guard {
        *now_unix_ns = at(0);
    }
    store.commit(commit).await.unwrap();
    // Found in its own window and the next (where it is replayable for
    // what is left of its ten minutes).
    assert!(store.remembered("h", "r1", at(0)).unwrap().is_some());
    assert!(store.remembered("h", "r1", at(2)).unwrap().is_some());
    // Late in a window nothing is pruned (it might not finish in time).
    assert_eq!(store.prune_requests(at(5)).await.unwrap(), 0);
    assert!(store.remembered("h", "r1", at(2)).unwrap().is_some());
    // Pruning in the next window leaves it; once per window.
    assert_eq!(store.prune_requests(at(2)).await.unwrap(), 0);
    assert!(store.remembered("h", "r1", at(2)).unwrap().is_some());
    // Two windows on, its slot is the one emptied for the next window.
    assert_eq!(store.prune_requests(at(4)).await.unwrap(), 1);
    assert_eq!(store.prune_requests(at(4)).await.unwrap(), 0, "once per window");
    assert!(store.remembered("h", "r1", at(2)).unwrap().is_none());
    // Committed again under the same id in a later window: decided afresh.
    let mut again = entry(1);
    if let Guard::NewRequest { now_unix_ns, .. } = &mut again.guard {
        *now_unix_ns = at(6);
    }
    assert!(matches!(store.commit(again).await.unwrap(), Committed::New { .. }));
    assert!(store.remembered("h", "r1", at(6)).unwrap().is_some());

    // A slot not yet pruned holds an old record of an id decided again
    // since: the newest wins, wherever it is.
    let commit_at = |n: i64| {
        let mut commit = entry(3);
        if let Guard::NewRequest { now_unix_ns, .. } = &mut commit.guard {
            *now_unix_ns = at(n);
        }
        commit
    };
    store.commit(commit_at(8)).await.unwrap();
    store.commit(commit_at(12)).await.unwrap();
    let found = store.remembered("h", "r3", at(14)).unwrap().unwrap();
    assert_eq!(found.decided_unix_ns, at(12));
    drop(store);
    closer.close().await.unwrap();
}

/// A decision made before a lock and written after it: the writer turns
/// the ALLOW into a DENY, in the record and in the answer.
#[tokio::test]
async fn an_allow_written_after_a_lock_of_its_session_is_a_deny() {
    let dir = tempfile::tempdir().unwrap();
    let (store, closer) = Store::open(dir.path()).unwrap();
    let actor = Actor { user: "alice".into(), agent: "claude-code".into(), session: "s1".into() };
    let lock = Lock {
        target: "session:s1".into(),
        reason: "injection suspected".into(),
        locked_by: "security".into(),
        locked_unix_ns: 0,
    };
    let locking = Commit {
        lock: Some(LockChange::Put(lock)),
        ..Commit::record(AuditEntry { kind: "lock".into(), ..AuditEntry::default() })
    };
    // The same batch and a later one.
    let mut late = entry(1);
    late.entry.actor = Some(actor.clone());
    let (locked, written) = tokio::join!(store.commit(locking), store.commit(late));
    locked.unwrap();
    let mut later = entry(2);
    later.entry.actor = Some(actor);
    for written in [written.unwrap(), store.commit(later).await.unwrap()] {
        let Committed::New { decision: Some(decision), seq, .. } = written else { panic!("{written:?}") };
        assert_eq!(decision.outcome, Outcome::Deny);
        assert!(decision.reasons.iter().any(|r| r.contains("session `s1` is locked by `security`")), "{decision:?}");
        let record = store.audit_from(seq, 1).unwrap().into_iter().next().unwrap();
        assert_eq!(record.outcome, "DENY");
    }
    drop(store);
    closer.close().await.unwrap();
}

#[tokio::test]
async fn an_altered_or_missing_record_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let (store, closer) = Store::open(dir.path()).unwrap();
    for n in 0..5 {
        store.commit(entry(n)).await.unwrap();
    }
    let records = store.audit_from(1, 10).unwrap();
    assert_eq!(records.len(), 5);
    drop(store);
    closer.close().await.unwrap();

    let mut altered = records.clone();
    altered[2].outcome = "DENY".into();
    let report = verify_chain(Head::genesis(), altered.into_iter().map(Ok::<_, String>));
    assert_eq!(report.first_bad.map(|(seq, _)| seq), Some(3));

    let mut gapped = records;
    gapped.remove(1);
    let report = verify_chain(Head::genesis(), gapped.into_iter().map(Ok::<_, String>));
    assert_eq!(report.first_bad.map(|(seq, _)| seq), Some(2));
}

/// A batch's state reaches sled only once its frame is durable: sled
/// writes its buffers on its own, and after a power loss it must not hold
/// what the log lost. Meanwhile later batches are planned against it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// The guard holds the sync thread (a thread of its own) while the test awaits.
#[allow(clippy::await_holding_lock)]
async fn state_reaches_sled_only_once_durable_and_later_batches_see_it_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let (store, closer) = Store::open(dir.path()).unwrap();
    let store = Arc::new(store);
    let actor = Actor { user: "alice".into(), agent: "claude-code".into(), session: "s1".into() };
    let paused = store.sync_pause.lock().unwrap();
    let in_log = |seq: u64| {
        let store = Arc::clone(&store);
        async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while store.written.load(Ordering::Acquire) < seq {
                assert!(std::time::Instant::now() < deadline, "record {seq} never reached the log");
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        }
    };

    // A decision remembered under its request id, and a lock: in the log,
    // not yet synced.
    let first = tokio::spawn({
        let store = Arc::clone(&store);
        async move { store.commit(entry(1)).await }
    });
    in_log(1).await;
    let lock = Lock { target: "session:s1".into(), reason: "stop".into(), locked_by: "sec".into(), locked_unix_ns: 0 };
    let locking = tokio::spawn({
        let store = Arc::clone(&store);
        let commit = Commit {
            lock: Some(LockChange::Put(lock)),
            ..Commit::record(AuditEntry { kind: "lock".into(), ..AuditEntry::default() })
        };
        async move { store.commit(commit).await }
    });
    in_log(2).await;
    assert_eq!(store.remembered("h", "r1", 0).unwrap(), None, "sled holds a decision that is not durable");
    assert!(store.trees.locks.is_empty(), "sled holds a lock that is not durable");

    // Later batches, planned while those are in flight, see them: the same
    // request is a replay, and an ALLOW of the locked session a DENY.
    let replay = tokio::spawn({
        let store = Arc::clone(&store);
        async move { store.commit(entry(1)).await }
    });
    let mut late = entry(2);
    late.entry.actor = Some(actor.clone());
    let late = tokio::spawn({
        let store = Arc::clone(&store);
        async move { store.commit(late).await }
    });
    in_log(3).await;
    // Nor is an approval asked for before the lock and written after it
    // one to wait for (the lock's sweep of pending approvals may be over).
    let waiting = tokio::spawn({
        let store = Arc::clone(&store);
        let commit = pending_of(3, actor);
        async move { store.commit(commit).await }
    });
    in_log(4).await;
    assert!(!first.is_finished() && !replay.is_finished(), "answered before durable");
    drop(paused);

    let Committed::New { seq: 1, .. } = first.await.unwrap().unwrap() else { panic!("the first decision") };
    locking.await.unwrap().unwrap();
    let Committed::Replay(replayed) = replay.await.unwrap().unwrap() else { panic!("not a replay") };
    assert_eq!(replayed.audit_seq, 1);
    let Committed::New { decision: Some(decision), seq: 3, .. } = late.await.unwrap().unwrap() else {
        panic!("the late decision")
    };
    assert_eq!(decision.outcome, Outcome::Deny);
    let Committed::New { decision: Some(decision), approval: None, seq: 4, .. } = waiting.await.unwrap().unwrap()
    else {
        panic!("the approval asked for")
    };
    assert_eq!((decision.outcome, decision.approval_id.as_str()), (Outcome::Deny, ""));
    assert!(decision.reasons.iter().any(|r| r.contains("session `s1` is locked")), "{decision:?}");
    assert!(store.pending_until(i64::MAX).unwrap().is_empty(), "an approval waits for a locked session");
    let record = store.audit_from(4, 1).unwrap().into_iter().next().unwrap();
    assert_eq!((record.outcome.as_str(), record.approval_id.as_str()), ("DENY", ""));
    // Durable now, so in sled.
    assert_eq!(store.remembered("h", "r1", 0).unwrap().unwrap().decision.audit_seq, 1);
    assert!(store.trees.locks.get(b"session:s1").unwrap().is_some());
    drop(Arc::into_inner(store).unwrap());
    closer.close().await.unwrap();
}

#[tokio::test]
async fn a_decision_made_with_labels_the_session_no_longer_has_is_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let (store, closer) = Store::open(dir.path()).unwrap();
    let key = SessionKey { session: "s".into(), harness: "h".into(), user: "alice".into() };
    let labelled = |n: u32, add: &[&str], seen: &[&str]| Commit {
        session: Some(SessionChange::Touch {
            key: key.clone(),
            agent: "claude-code".into(),
            add: add.iter().map(|l| (*l).to_owned()).collect(),
        }),
        seen_labels: Some(seen.iter().map(|l| (*l).to_owned()).collect()),
        ..entry(n)
    };
    // Two decisions made at once with no labels; the first adds one, so
    // the second was made with labels the session no longer has.
    let (first, second) =
        tokio::join!(store.commit(labelled(1, &["untrusted-input"], &[])), store.commit(labelled(2, &[], &[])));
    assert!(matches!(first.unwrap(), Committed::New { seq: 1, .. }));
    assert_eq!(second.unwrap(), Committed::SessionMoved, "nothing written for a stale decision");
    assert_eq!(store.durable_head().seq, 1);
    // Decided again with what the session has now, it is written.
    assert!(matches!(
        store.commit(labelled(2, &[], &["untrusted-input"])).await.unwrap(),
        Committed::New { seq: 2, .. }
    ));
    closer.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_asked_at_once_wait_only_up_to_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let (store, closer) = Store::open(dir.path()).unwrap();
    let actor = Actor { user: "alice".into(), agent: "claude-code".into(), session: "s".into() };
    let capped = |n| Commit { caps: Some(Caps { per_session: 2, per_harness: 100 }), ..pending_of(n, actor.clone()) };
    // Five at once: in one batch, or in batches in flight one after the
    // other; either way two wait and three are denied.
    let answers = futures_util::future::join_all((1..=5).map(|n| store.commit(capped(n)))).await;
    let outcomes: Vec<Outcome> = answers
        .into_iter()
        .map(|a| match a.unwrap() {
            Committed::New { decision: Some(d), .. } => d.outcome,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(outcomes.iter().filter(|o| **o == Outcome::Pending).count(), 2, "{outcomes:?}");
    assert_eq!(outcomes.iter().filter(|o| **o == Outcome::Deny).count(), 3, "{outcomes:?}");
    assert_eq!(store.pending_until(i64::MAX).unwrap().len(), 2);
    // Later, one at a time: still the cap.
    let later = store.commit(capped(6)).await.unwrap();
    assert!(matches!(later, Committed::New { decision: Some(ref d), .. } if d.outcome == Outcome::Deny), "{later:?}");
    closer.close().await.unwrap();
}
