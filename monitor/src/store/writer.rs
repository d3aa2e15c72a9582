//! The writer task: the only code that appends (plans each batch against the store, encodes it as one log frame, applies it to the trees).

use super::*;

/// Starts preparing the segment after `wal`'s current one.
pub(super) fn prepare_spare(wal: &Wal) -> tokio::task::JoinHandle<Result<wal::Spare, WalError>> {
    let (dir, number) = (wal.dir().to_owned(), wal.next_number());
    tokio::task::spawn_blocking(move || wal::prepare_segment(&dir, number))
}

/// A batch written to the log and applied, waiting for its sync.
pub(super) struct Appended {
    /// The segment it is in.
    pub(super) file: Arc<File>,
    /// The chain head after it.
    pub(super) seq: u64,
    pub(super) answers: Vec<(Reply, Committed)>,
    pub(super) writes: Vec<Write>,
}

/// The writer task: the only code that appends.
pub(super) struct WriteLoop {
    pub(super) db: sled::Db,
    pub(super) trees: Trees,
    pub(super) wal: Wal,
    pub(super) db_file: Option<Arc<File>>,
    /// The checkpoint under way: sled's flush, then the old segments deleted.
    pub(super) checkpoint: Option<tokio::task::JoinHandle<Result<(), String>>>,
    /// The next segment, being prepared.
    pub(super) spare: Option<tokio::task::JoinHandle<Result<wal::Spare, WalError>>>,
    /// To the sync thread; dropped to stop it.
    pub(super) to_sync: Option<mpsc::UnboundedSender<Appended>>,
    /// With flush durability a written batch is already as durable as it
    /// gets: the writer answers it itself, without a hop to the sync thread.
    pub(super) answer_now: Option<Arc<SyncLoop>>,
    pub(super) sync_finished: oneshot::Receiver<()>,
    /// Set once anything failed after a batch reached the log: what is on
    /// disk is then unknown, so nothing more is accepted.
    pub(super) failed: Arc<OnceLock<String>>,
}

pub(super) type Reply = oneshot::Sender<Result<Committed, StoreError>>;

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
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            head = self.write_batch(batch, head);
            self.maybe_checkpoint().await;
        }
        // Every batch answered, then one last checkpoint empties the log.
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
        let (db, db_file, dir) = (self.db.clone(), self.db_file.clone(), self.wal.dir().to_owned());
        let last = tokio::task::spawn_blocking(move || {
            flush_sled(&db, db_file.as_deref())?;
            wal::remove_all(&dir).map_err(StoreError::from)
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()));
        if let Err(e) = last {
            tracing::error!(error = %e, "final checkpoint failed; the write-ahead log is applied at the next start");
        }
    }

    /// Plans every job against the store and the batch so far, appends the
    /// batch to the log, applies it to the trees, and hands it to the sync
    /// thread, which answers. Returns the new head.
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
            match self.plan(&overlay, commit, &mut next) {
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
        let written = if ops.is_empty() {
            Ok(())
        } else {
            self.wal.append(&wal::frame(&ops)).map_err(StoreError::from).and_then(|()| self.trees.apply(&ops))
        };
        let sent = written.and_then(|()| {
            let appended = Appended { file: self.wal.file(), seq: next.seq, answers, writes };
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
            Ok(()) => next,
            Err(e) => {
                // The batch may be in the log: its seqs must not be reused.
                let why = format!("the audit log could not be written ({e}); restart the monitor");
                tracing::error!(error = %e, "audit batch failed; no more writes are accepted");
                let _ = self.failed.set(why);
                head
            }
        }
    }

    /// When the log's segment is full: start a new one, and flush sled in
    /// the background; once that is done the old segments are deleted.
    pub(super) async fn maybe_checkpoint(&mut self) {
        if !self.wal.full() || self.failed.get().is_some() {
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
        // Only the newest segment may end in a torn frame.
        let old = self.wal.file();
        let synced = match self.db_file {
            Some(_) => tokio::task::spawn_blocking(move || old.sync_data()).await.map_err(|e| e.to_string()),
            None => Ok(Ok(())),
        };
        let spare = match self.spare.take() {
            Some(preparing) => {
                match preparing.await.map_err(|e| e.to_string()).and_then(|r| r.map_err(|e| e.to_string())) {
                    Ok(spare) => Some(spare),
                    Err(e) => {
                        tracing::warn!(error = %e, "the next write-ahead log segment could not be prepared; making it now");
                        None
                    }
                }
            }
            None => None,
        };
        let rotated = match synced {
            Ok(Ok(())) => self.wal.rotate(spare).map_err(|e| e.to_string()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(e),
        };
        let keep_from = match rotated {
            Ok(keep_from) => keep_from,
            Err(why) => {
                let _ = self
                    .failed
                    .set(format!("the write-ahead log could not start a new segment ({why}); restart the monitor"));
                return;
            }
        };
        self.spare = Some(prepare_spare(&self.wal));
        let (db, db_file, dir) = (self.db.clone(), self.db_file.clone(), self.wal.dir().to_owned());
        self.checkpoint = Some(tokio::task::spawn_blocking(move || {
            flush_sled(&db, db_file.as_deref()).map_err(|e| e.to_string())?;
            wal::remove_before(&dir, keep_from).map_err(|e| e.to_string())
        }));
    }

    /// Decides what one commit does, advancing `head` when it appends.
    /// The session record as of the batch being planned.
    pub(super) fn stored_session(
        &self,
        overlay: &Overlay,
        key: &SessionKey,
    ) -> Result<Option<SessionRecord>, StoreError> {
        match overlay.sessions.get(key) {
            Some(found) => Ok(Some(found.clone())),
            None => self.trees.session(key),
        }
    }

    /// Why the actor's session, user or agent kind is locked, as of the
    /// batch being planned.
    pub(super) fn locked(&self, overlay: &Overlay, actor: &Actor) -> Result<Option<String>, StoreError> {
        if overlay.locks.is_empty() && self.trees.locks.is_empty() {
            return Ok(None);
        }
        for (kind, id) in [("session", &actor.session), ("user", &actor.user), ("agent", &actor.agent)] {
            let target = format!("{kind}:{id}");
            let lock = match overlay.locks.get(&target) {
                Some(found) => found.clone(),
                None => self
                    .trees
                    .locks
                    .get(target.as_bytes())?
                    .map(|v| decode::<Lock>(trees::LOCKS, target.as_bytes(), &v))
                    .transpose()?,
            };
            if let Some(lock) = lock {
                let why = if lock.reason.is_empty() { String::new() } else { format!(": {}", lock.reason) };
                return Ok(Some(format!("{kind} `{id}` is locked by `{}`{why}", lock.locked_by)));
            }
        }
        Ok(None)
    }

    pub(super) fn plan(&self, overlay: &Overlay, commit: Commit, head: &mut Head) -> Result<Planned, StoreError> {
        let request_key = match &commit.guard {
            Guard::None => None,
            Guard::NewRequest { harness, request_id, request_hash, now_unix_ns, policy_version, replay } => {
                let key = request_key(harness, request_id);
                let earlier = match overlay.requests.get(&key) {
                    Some(found) => Some(found.clone()),
                    None => self.trees.remembered(&key, *now_unix_ns, true)?,
                };
                if let Some(earlier) = earlier
                    && *replay
                    && earlier.replayable(*now_unix_ns, policy_version)
                {
                    return Ok(Planned::Answer(Box::new(if &earlier.request_hash == request_hash {
                        Committed::Replay(earlier.decision)
                    } else {
                        Committed::KeyReused(Box::new(earlier))
                    })));
                }
                Some((key, request_hash.clone(), *now_unix_ns))
            }
            Guard::StillPending { approval_id } => {
                let current = match overlay.approvals.get(approval_id) {
                    Some(found) => Some(found.clone()),
                    None => self
                        .trees
                        .approvals
                        .get(approval_id.as_bytes())?
                        .map(|v| decode::<ApprovalRecord>(trees::APPROVALS, approval_id.as_bytes(), &v))
                        .transpose()?,
                };
                match current {
                    Some(current) if current.state == ApprovalState::Pending => None,
                    Some(current) => return Ok(Planned::Answer(Box::new(Committed::NotPending(Box::new(current))))),
                    None => {
                        return Err(StoreError::Corrupt {
                            tree: trees::APPROVALS,
                            key: approval_id.clone(),
                            message: "the approval to resolve is missing".into(),
                        });
                    }
                }
            }
        };
        let session = match &commit.session {
            None => None,
            Some(change) => merge_session(self.stored_session(overlay, change.key())?, change),
        };
        let mut commit = commit;
        let mut session = session;
        // A decision made before a lock but written after it is not an
        // ALLOW: the writer, which writes locks too, has the last word.
        if let Some(decision) = commit.decision.as_mut()
            && decision.outcome == Outcome::Allow
            && commit.entry.kind == "decision"
            && let Some(actor) = &commit.entry.actor
            && let Some(why) = self.locked(overlay, actor)?
        {
            decision.outcome = Outcome::Deny;
            decision.reasons.push(why.clone());
            commit.entry.outcome = Outcome::Deny.as_str().into();
            commit.entry.reasons.push(why);
            // A denied action gives the session no label.
            if let (Some(current), Some(change @ SessionChange::Touch { .. })) = (&mut session, &commit.session) {
                current.labels = self.stored_session(overlay, change.key())?.map(|b| b.labels).unwrap_or_default();
            }
        }
        let Commit { entry, decision, approval, grant, lock, .. } = commit;
        let seq = head.seq + 1;
        let mut record = AuditRecord {
            seq,
            time_unix_ns: entry.time_unix_ns,
            kind: entry.kind,
            caller: entry.caller,
            actor: entry.actor.unwrap_or(Actor { user: String::new(), agent: String::new(), session: String::new() }),
            action: entry.action,
            resource: entry.resource,
            request: entry.request,
            outcome: entry.outcome,
            policy_ids: entry.policy_ids,
            reasons: entry.reasons,
            policy_version: entry.policy_version,
            request_id: entry.request_id,
            approval_id: entry.approval_id,
            prev_hash: head.hash.clone(),
            hash: String::new(),
        };
        record.hash = record.compute_hash();
        *head = Head { seq, hash: record.hash.clone() };
        let decision = decision.map(|mut d| {
            d.audit_seq = seq;
            d
        });
        let approval = approval.map(|mut a| {
            if a.state == ApprovalState::Pending {
                a.audit_seq = seq;
            }
            a.decision.audit_seq = seq;
            a
        });
        let remembered = match (request_key, &decision) {
            (Some((key, request_hash, decided_unix_ns)), Some(decision)) => {
                Some((key, Remembered { request_hash, decided_unix_ns, decision: decision.clone() }))
            }
            _ => None,
        };
        Ok(Planned::Append(Box::new(Write { record, decision, remembered, approval, grant, lock, session })))
    }
}

/// A batch's writes as log operations, in the order they are applied.
pub(super) fn ops_of(writes: &[Write]) -> Result<Vec<Op>, StoreError> {
    let mut ops = Vec::with_capacity(writes.len() * 3);
    let put = |tree, key: &[u8], value| Op { tree, key: key.to_vec(), value: Some(value) };
    let remove = |tree, key: &[u8]| Op { tree, key: key.to_vec(), value: None };
    for write in writes {
        ops.push(put(tree_no::AUDIT, &write.record.seq.to_be_bytes(), codec::encode(&write.record)));
        if let Some((key, remembered)) = &write.remembered {
            ops.push(put(tree_no::requests(request_slot(remembered.decided_unix_ns)), key, codec::encode(remembered)));
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
