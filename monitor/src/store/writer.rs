//! The writer task: the only code that appends (plans each batch against the store and the batches in flight, encodes it as one log frame, hands it to the sync thread).

use super::*;

/// Starts preparing the file of the next segment of `log`.
pub(super) fn prepare_spare(log: &LogWriter) -> tokio::task::JoinHandle<Result<log::Spare, LogError>> {
    let (dir, size) = (log.dir().to_owned(), log.segment_bytes());
    tokio::task::spawn_blocking(move || log::prepare_segment(&dir, size))
}

/// A batch written to the log, waiting for its sync; its state changes are
/// applied to the trees after it.
pub(super) struct Appended {
    /// The segment it is in.
    pub(super) file: Arc<File>,
    /// The chain head after it.
    pub(super) seq: u64,
    /// Its hash.
    pub(super) hash: String,
    pub(super) answers: Vec<(Reply, Committed)>,
    pub(super) writes: Vec<Write>,
    /// Its state changes, for the trees once it is durable.
    pub(super) ops: Vec<Op>,
}

/// The writer task: the only code that appends.
pub(super) struct WriteLoop {
    pub(super) db: sled::Db,
    pub(super) trees: Trees,
    pub(super) log: LogWriter,
    pub(super) db_file: Option<Arc<File>>,
    /// The checkpoint under way: the sealed segment cut to size and synced,
    /// then sled's flush, after which `replay_from` moves.
    pub(super) checkpoint: Option<tokio::task::JoinHandle<Result<(), String>>>,
    /// Shared with the store: segments before it need no replay.
    pub(super) replay_from: Arc<AtomicU64>,
    /// Shared with the store: the newest record written.
    pub(super) written: Arc<AtomicU64>,
    /// Told when a checkpoint is done.
    pub(super) sealed: Arc<tokio::sync::Notify>,
    /// The next segment's file, being prepared.
    pub(super) spare: Option<tokio::task::JoinHandle<Result<log::Spare, LogError>>>,
    /// To the sync thread; dropped to stop it.
    pub(super) to_sync: Option<mpsc::UnboundedSender<Appended>>,
    /// With flush durability a written batch is already as durable as it
    /// gets: the writer answers it itself, without a hop to the sync thread.
    pub(super) answer_now: Option<Arc<SyncLoop>>,
    pub(super) sync_finished: oneshot::Receiver<()>,
    /// Batches written and not yet in the trees (shared with the sync thread).
    pub(super) in_flight: Arc<InFlight>,
    /// The durable watermark: every batch up to it is in the trees.
    pub(super) durable: watch::Receiver<u64>,
    /// Set once anything failed after a batch reached the log: what is on
    /// disk is then unknown, so nothing more is accepted.
    pub(super) failed: Arc<OnceLock<String>>,
}

pub(super) type Reply = oneshot::Sender<Result<Committed, StoreError>>;

/// The embedded store as planning sees it: the batches in flight (written,
/// not yet synced) before the trees. The sync thread applies a batch and
/// only then drops it from `InFlight`, so a value is in one of them
/// whenever each is read.
struct EmbeddedView<'a> {
    trees: &'a Trees,
    in_flight: &'a InFlight,
}

impl View for EmbeddedView<'_> {
    fn request(&self, key: &[u8], now_unix_ns: i64) -> Result<Option<Remembered>, StoreError> {
        match self.in_flight.request(key) {
            Some(found) => Ok(Some(found)),
            None => self.trees.remembered(key, now_unix_ns, true),
        }
    }

    fn approval(&self, approval_id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        match self.in_flight.approval(approval_id) {
            Some(found) => Ok(Some(found)),
            None => self
                .trees
                .approvals
                .get(approval_id.as_bytes())?
                .map(|v| decode::<ApprovalRecord>(trees::APPROVALS, approval_id.as_bytes(), &v))
                .transpose(),
        }
    }

    fn session(&self, key: &SessionKey) -> Result<Option<SessionRecord>, StoreError> {
        match self.in_flight.session(key) {
            Some(found) => Ok(Some(found)),
            None => self.trees.session(key),
        }
    }

    fn lock(&self, target: &str) -> Result<Option<Lock>, StoreError> {
        match self.in_flight.lock(target) {
            Some(found) => Ok(found),
            None => self
                .trees
                .locks
                .get(target.as_bytes())?
                .map(|v| decode::<Lock>(trees::LOCKS, target.as_bytes(), &v))
                .transpose(),
        }
    }

    fn may_have_locks(&self) -> bool {
        self.in_flight.has_locks() || !self.trees.locks.is_empty()
    }

    fn waiting(&self, key: &SessionKey, harness: &str, now_unix_ns: i64) -> Result<(usize, usize), StoreError> {
        let mut of_session = Embedded::count_waiting(&self.trees.pending_sessions, &key.bytes(), now_unix_ns)?;
        let mut of_harness = Embedded::count_waiting(&self.trees.pending_harnesses, harness.as_bytes(), now_unix_ns)?;
        // New ones in flight, not in the trees yet.
        for approval in self.in_flight.approvals() {
            if approval.state == ApprovalState::Pending
                && approval.expires_unix_ns > now_unix_ns
                && approval.harness == harness
                && !self.trees.approvals.contains_key(approval.approval_id.as_bytes())?
            {
                of_harness += 1;
                of_session += usize::from(SessionKey::of(&approval.request.actor, &approval.harness) == *key);
            }
        }
        Ok((of_session, of_harness))
    }

    fn grant_exists(&self, grant_id: &str) -> Result<bool, StoreError> {
        match self.in_flight.grant(grant_id) {
            Some(put) => Ok(put),
            None => Ok(self.trees.grants.contains_key(grant_id.as_bytes())?),
        }
    }

    fn oldest_records(&self, _first_seq: u64, _last_seq: u64) -> Result<Option<String>, StoreError> {
        // Retention takes whole segments here (`offline.rs`), never rows.
        Err(StoreError::Unsupported("the embedded audit log removes segments, not records".into()))
    }
}

impl WriteLoop {
    pub(super) async fn run(mut self, mut rx: mpsc::Receiver<Job>, mut closing: oneshot::Receiver<()>, mut head: Head) {
        let mut closed = false;
        loop {
            let first = tokio::select! {
                biased;
                _ = &mut closing, if !closed => {
                    // No new commits; those already sent are still written,
                    // then `recv` returns None.
                    rx.close();
                    closed = true;
                    continue;
                }
                job = rx.recv() => match job {
                    Some(job) => job,
                    None => break,
                },
            };
            head = self.write_batch(fill_batch(first, &mut rx), head);
            self.maybe_checkpoint(&head).await;
        }
        // Every batch answered, then one last checkpoint: sled holds all
        // state, so the next start replays nothing.
        self.to_sync = None;
        let _ = (&mut self.sync_finished).await;
        if let Some(running) = self.checkpoint.take()
            && let Err(why) = running.await.unwrap_or_else(|e| Err(e.to_string()))
        {
            tracing::error!(error = %why, "checkpoint failed");
        }
        if self.failed.get().is_some() {
            return;
        }
        if let Some(preparing) = self.spare.take() {
            let _ = preparing.await;
        }
        let (db, db_file, trees, next) = (self.db.clone(), self.db_file.clone(), self.trees.clone(), head.seq + 1);
        let last = tokio::task::spawn_blocking(move || {
            trees.set_replay_from(next)?;
            flush_sled(&db, db_file.as_deref())
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()));
        if let Err(e) = last {
            tracing::error!(error = %e, "final checkpoint failed; the audit log is replayed at the next start");
        }
    }

    /// Plans every job against the store, the batches in flight and the
    /// batch so far, appends the batch to the log and hands it to the sync
    /// thread, which applies it to the trees once it is durable and then
    /// answers. Returns the new head.
    pub(super) fn write_batch(&mut self, batch: Vec<Job>, head: Head) -> Head {
        if let Some(why) = self.failed.get() {
            for Job { reply, .. } in batch {
                let _ = reply.send(Err(StoreError::BatchFailed(why.clone())));
            }
            return head;
        }
        let mut next = head.clone();
        let mut overlay = Overlay::default();
        let mut answers: Vec<(Reply, Committed)> = Vec::new();
        let mut writes: Vec<Write> = Vec::new();
        for Job { commit, reply } in batch {
            match plan(&EmbeddedView { trees: &self.trees, in_flight: &self.in_flight }, &overlay, commit, &mut next) {
                Ok(Planned::Append(write)) => {
                    overlay.add(&write);
                    answers.push((reply, write.committed()));
                    writes.push(*write);
                }
                Ok(Planned::Answer(committed)) => answers.push((reply, *committed)),
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            }
        }
        let ops = match ops_of(&writes) {
            Ok(ops) => ops,
            Err(e) => {
                // Nothing was written: the head stays.
                tracing::error!(error = %e, "audit batch not written; the requests in it are answered with an error");
                for (reply, _) in answers {
                    let _ = reply.send(Err(StoreError::BatchFailed(e.to_string())));
                }
                return head;
            }
        };
        let written = if writes.is_empty() {
            Ok(())
        } else {
            let records: Vec<&AuditRecord> = writes.iter().map(|w| &w.record).collect();
            let frame = self.log.frame(&records, &ops);
            self.log.append(&frame).map_err(StoreError::from)
        };
        let sent = written.and_then(|()| {
            // In flight until the sync thread has applied it: one entry per
            // batch handed on, in order.
            self.in_flight.push(overlay);
            let ops = ops.iter().map(LogOp::to_op).collect();
            let appended =
                Appended { file: self.log.file(), seq: next.seq, hash: next.hash.clone(), answers, writes, ops };
            if let Some(answer) = &self.answer_now {
                answer.answer(vec![appended]);
                return Ok(());
            }
            match &self.to_sync {
                Some(to_sync) => to_sync.send(appended).map_err(|_| StoreError::WriterGone),
                None => Err(StoreError::WriterGone),
            }
        });
        match sent {
            Ok(()) => {
                self.written.store(next.seq, Ordering::Release);
                next
            }
            Err(e) => {
                // The batch may be in the log: its seqs must not be reused.
                let why = format!("the audit log could not be written ({e}); restart the monitor");
                tracing::error!(error = %e, "audit batch failed; no more writes are accepted");
                let _ = self.failed.set(why);
                head
            }
        }
    }

    /// When the log's segment is full: seal it and start a new one, and
    /// flush sled in the background; once that is done, the sealed
    /// segments are no longer needed to rebuild sled's state.
    pub(super) async fn maybe_checkpoint(&mut self, head: &Head) {
        if !self.log.full() || self.failed.get().is_some() {
            return;
        }
        if let Some(running) = &self.checkpoint {
            if !running.is_finished() {
                return;
            }
            if let Some(running) = self.checkpoint.take()
                && let Err(why) = running.await.unwrap_or_else(|e| Err(e.to_string()))
            {
                let _ = self.failed.set(format!("a checkpoint failed ({why}); restart the monitor"));
                return;
            }
        }
        // Only the newest segment may end in a torn frame: the old one is
        // synced before anything is written to the next.
        let old = self.log.file();
        let synced = match self.db_file {
            Some(_) => tokio::task::spawn_blocking(move || old.sync_data()).await.map_err(|e| e.to_string()),
            None => Ok(Ok(())),
        };
        let spare = match self.spare.take() {
            Some(preparing) => {
                match preparing.await.map_err(|e| e.to_string()).and_then(|r| r.map_err(|e| e.to_string())) {
                    Ok(spare) => Some(spare),
                    Err(e) => {
                        tracing::warn!(error = %e, "the next audit log segment could not be prepared; making it now");
                        None
                    }
                }
            }
            None => None,
        };
        let rotated = match synced {
            Ok(Ok(())) => self.log.rotate(head, spare).map_err(|e| e.to_string()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(e),
        };
        let sealed = match rotated {
            Ok(sealed) => sealed,
            Err(why) => {
                let _ = self
                    .failed
                    .set(format!("the audit log could not start a new segment ({why}); restart the monitor"));
                return;
            }
        };
        // Every change of the sealed segments in the trees (the sync thread
        // applies a batch once it is durable; nothing is written meanwhile):
        // once the flush below is done, sled holds them.
        let failed = Arc::clone(&self.failed);
        let applied = self.durable.wait_for(|durable| *durable >= head.seq || failed.get().is_some()).await;
        if applied.is_err() || self.failed.get().is_some() {
            let _ = self.failed.set("the audit log's sync stopped before a checkpoint; restart the monitor".into());
            return;
        }
        let next = self.log.first_seq();
        if let Err(e) = self.trees.set_replay_from(next) {
            let _ = self.failed.set(format!("the store could not record a checkpoint ({e}); restart the monitor"));
            return;
        }
        self.spare = Some(prepare_spare(&self.log));
        let (db, db_file, replay_from) = (self.db.clone(), self.db_file.clone(), Arc::clone(&self.replay_from));
        let told = Arc::clone(&self.sealed);
        self.checkpoint = Some(tokio::task::spawn_blocking(move || {
            sealed.seal().map_err(|e| format!("sealing a segment: {e}"))?;
            flush_sled(&db, db_file.as_deref()).map_err(|e| e.to_string())?;
            replay_from.store(next, Ordering::Release);
            told.notify_one();
            Ok(())
        }));
    }
}

/// A batch's state changes as log operations, in the order they are
/// applied (its records go into the log's frame beside them).
pub(super) fn ops_of(writes: &[Write]) -> Result<Vec<LogOp>, StoreError> {
    let mut ops = Vec::with_capacity(writes.len());
    let put = |tree, key: &[u8], value| LogOp::Plain(Op { tree, key: key.to_vec(), value: Some(value) });
    let remove = |tree, key: &[u8]| LogOp::Plain(Op { tree, key: key.to_vec(), value: None });
    for write in writes {
        if let Some((key, remembered)) = &write.remembered {
            // Written compactly when the key is `harness NUL request id`.
            let harness = key.split(|&b| b == 0).next().and_then(|h| std::str::from_utf8(h).ok());
            match harness {
                Some(harness) if request_key(harness, &remembered.decision.request_id) == *key => {
                    ops.push(LogOp::Remember { harness: harness.to_owned(), remembered: Box::new(remembered.clone()) })
                }
                _ => ops.push(put(
                    tree_no::requests(request_slot(remembered.decided_unix_ns)),
                    key,
                    codec::encode(remembered),
                )),
            }
        }
        if let Some(approval) = &write.approval {
            ops.push(put(tree_no::APPROVALS, approval.approval_id.as_bytes(), encode(approval)?));
            let key = pending_key(approval.expires_unix_ns, &approval.approval_id);
            let mut by_session = SessionKey::of(&approval.request.actor, &approval.harness).bytes();
            by_session.push(0);
            by_session.extend_from_slice(approval.approval_id.as_bytes());
            // What an older version indexed under the bare session id.
            let mut legacy_by_session = approval.request.actor.session.as_bytes().to_vec();
            legacy_by_session.push(0);
            legacy_by_session.extend_from_slice(approval.approval_id.as_bytes());
            let mut by_harness = approval.harness.as_bytes().to_vec();
            by_harness.push(0);
            by_harness.extend_from_slice(approval.approval_id.as_bytes());
            if approval.state == ApprovalState::Pending {
                ops.push(put(tree_no::PENDING, &key, Vec::new()));
                ops.push(put(tree_no::PENDING_SESSIONS, &by_session, approval.expires_unix_ns.to_be_bytes().to_vec()));
                ops.push(put(tree_no::PENDING_HARNESSES, &by_harness, approval.expires_unix_ns.to_be_bytes().to_vec()));
            } else {
                ops.push(remove(tree_no::PENDING, &key));
                ops.push(remove(tree_no::PENDING_SESSIONS, &by_session));
                ops.push(remove(tree_no::PENDING_SESSIONS, &legacy_by_session));
                ops.push(remove(tree_no::PENDING_HARNESSES, &by_harness));
            }
        }
        match &write.grant {
            Some(GrantChange::Put(grant)) => {
                ops.push(put(tree_no::GRANTS, grant.grant_id.as_bytes(), encode(grant.as_ref())?))
            }
            Some(GrantChange::Remove(id)) => ops.push(remove(tree_no::GRANTS, id.as_bytes())),
            None => {}
        }
        match &write.lock {
            Some(LockChange::Put(lock)) => ops.push(put(tree_no::LOCKS, lock.target.as_bytes(), encode(lock)?)),
            Some(LockChange::Remove(target)) => ops.push(remove(tree_no::LOCKS, target.as_bytes())),
            None => {}
        }
        if let Some(session) = &write.session {
            ops.push(put(tree_no::SESSIONS, &session.key().bytes(), codec::encode(session)));
        }
    }
    Ok(ops)
}
