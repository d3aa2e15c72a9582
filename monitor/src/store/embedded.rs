//! The embedded store: the audit log's segment files and sled, for one
//! monitor on one machine (see the module above for how a commit becomes
//! durable).

use super::*;

/// The sled database and its writer.
#[derive(Clone)]
pub(crate) struct Embedded {
    #[expect(dead_code, reason = "not read: the handle keeps the database open as long as a store lives")]
    db: sled::Db,
    pub(super) trees: Trees,
    /// The audit log's segments.
    log_dir: PathBuf,
    /// The newest durable record.
    durable_head: Arc<Mutex<Head>>,
    /// Segments before this seq are no longer needed to rebuild sled's
    /// state (its flush is done): retention may take them.
    replay_from: Arc<AtomicU64>,
    /// Told each time a sealed segment's checkpoint is done.
    sealed: Arc<tokio::sync::Notify>,
    /// The newest record written (durable or not yet).
    pub(super) written: Arc<AtomicU64>,
    /// How long commits take until they are durable, in seconds.
    append_seconds: prometheus_client::metrics::histogram::Histogram,
    /// The replay window whose pruning was last done (see [`REQUEST_SLOTS`]).
    pruned_window: Arc<std::sync::atomic::AtomicI64>,
    /// Whether a pruning is under way.
    pruning: Arc<std::sync::atomic::AtomicBool>,
    flushed: watch::Receiver<u64>,
    /// Set once the writer or the sync thread failed: nothing more becomes
    /// durable.
    failed: Arc<OnceLock<String>>,
    writer: mpsc::Sender<Job>,
    approval_events: broadcast::Sender<ApprovalEvent>,
    /// Held by a test to keep batches from becoming durable.
    #[cfg(test)]
    pub(super) sync_pause: Arc<Mutex<()>>,
}

impl Embedded {
    /// Opens (or creates) the store in `dir` with fsync durability.
    #[cfg(test)]
    pub(crate) fn open(dir: &Path) -> Result<(Self, StoreCloser), StoreError> {
        Self::open_with(dir, Durability::Fsync, log::DEFAULT_SEGMENT_BYTES)
    }

    /// Opens (or creates) the store in `dir` and starts its writer. Must be
    /// called inside a tokio runtime. Segments of the audit log
    /// are sealed at `segment_bytes`.
    pub(crate) fn open_with(
        dir: &Path,
        durability: Durability,
        segment_bytes: u64,
    ) -> Result<(Self, StoreCloser), StoreError> {
        let Recovered { db, trees, db_file, log_dir, head, replay_from } = recover(dir, durability)?;
        let log = LogWriter::create(&log_dir, &head, durability == Durability::Fsync, None, segment_bytes)?;
        let (writer, rx) = mpsc::channel(4 * MAX_BATCH);
        // Each slot keeps its approval until it is overwritten: the
        // capacity bounds the memory held, and a watcher more than this far
        // behind is cut off (it watches again).
        let (approval_events, _) = broadcast::channel(APPROVAL_EVENTS);
        let (close, closing) = oneshot::channel();
        // What is on disk at open counts as durable.
        let (flushed_tx, flushed) = watch::channel(head.seq);
        let durable_head = Arc::new(Mutex::new(head.clone()));
        let replay_from = Arc::new(AtomicU64::new(replay_from));
        let written = Arc::new(AtomicU64::new(head.seq));
        let sealed = Arc::new(tokio::sync::Notify::new());
        let failed = Arc::new(OnceLock::new());
        let (to_sync, sync_rx) = mpsc::unbounded_channel();
        let (sync_done, sync_finished) = oneshot::channel();
        let in_flight = Arc::new(InFlight::default());
        #[cfg(test)]
        let sync_pause = Arc::new(Mutex::new(()));
        let sync = Arc::new(SyncLoop {
            fsync: durability == Durability::Fsync,
            trees: trees.clone(),
            in_flight: Arc::clone(&in_flight),
            #[cfg(test)]
            pause: Arc::clone(&sync_pause),
            flushed: flushed_tx,
            durable_head: Arc::clone(&durable_head),
            approval_events: approval_events.clone(),
            failed: Arc::clone(&failed),
        });
        let answer_now = (durability == Durability::Flush).then(|| Arc::clone(&sync));
        std::thread::Builder::new()
            .name("warden-log-sync".into())
            .spawn(move || {
                sync.run(sync_rx);
                // Its trees hold the database: let go before saying done, so
                // that a closed store is free for the next to open.
                drop(sync);
                let _ = sync_done.send(());
            })
            .map_err(|e| StoreError::Log(LogError::Io { path: log_dir.clone(), source: e }))?;
        let task = tokio::spawn(
            WriteLoop {
                db: db.clone(),
                trees: trees.clone(),
                spare: Some(prepare_spare(&log)),
                log,
                db_file,
                checkpoint: None,
                replay_from: Arc::clone(&replay_from),
                written: Arc::clone(&written),
                sealed: Arc::clone(&sealed),
                to_sync: Some(to_sync),
                answer_now,
                sync_finished,
                in_flight,
                durable: flushed.clone(),
                failed: Arc::clone(&failed),
            }
            .run(rx, closing, head),
        );
        let store = Self {
            db,
            trees,
            log_dir,
            durable_head,
            replay_from,
            sealed,
            written,
            // 50 µs to ~1.6 s.
            append_seconds: prometheus_client::metrics::histogram::Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(0.000_05, 2.0, 16),
            ),
            pruned_window: Arc::new(std::sync::atomic::AtomicI64::new(i64::MIN)),
            pruning: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            flushed,
            failed,
            writer,
            approval_events,
            #[cfg(test)]
            sync_pause,
        };
        Ok((store, StoreCloser { close, task }))
    }

    /// Appends a record with its state, if its guard holds, and returns once
    /// it is flushed.
    pub(crate) async fn commit(&self, commit: Commit) -> Result<Committed, StoreError> {
        send_job(&self.writer, &self.append_seconds, commit).await
    }

    /// Resolves once a segment is sealed and sled's flush after it done
    /// (when retention may have something to take).
    pub(crate) async fn segment_sealed(&self) {
        self.sealed.notified().await;
    }

    /// The histogram of [`Store::commit`]'s times, for the metrics.
    pub(crate) fn append_seconds(&self) -> prometheus_client::metrics::histogram::Histogram {
        self.append_seconds.clone()
    }

    /// Records written but not yet durable.
    pub(crate) fn durable_lag(&self) -> u64 {
        self.written.load(Ordering::Acquire).saturating_sub(self.durable_seq())
    }

    /// Waits until the record `seq` is flushed. Whatever is read from the
    /// trees may be committed but not yet flushed: a caller is told about it
    /// only after this.
    pub(crate) async fn wait_durable(&self, seq: u64) -> Result<(), StoreError> {
        let mut flushed = self.flushed.clone();
        let failed = Arc::clone(&self.failed);
        flushed
            .wait_for(|durable| *durable >= seq || failed.get().is_some())
            .await
            .map_err(|_| StoreError::WriterGone)?;
        match self.failed.get() {
            Some(why) if *self.flushed.borrow() < seq => Err(StoreError::BatchFailed(why.clone())),
            _ => Ok(()),
        }
    }

    /// Empties the idempotency slot that the next replay window will use
    /// (records at least a window older than any replayable one), once per
    /// window and only in the first half of a window, so that it is done
    /// before the slot is written again. The monitor's sweeper calls it on
    /// a task of its own. Returns how many records were removed.
    pub(crate) async fn prune_requests(&self, now_unix_ns: i64) -> Result<usize, StoreError> {
        use std::sync::atomic::Ordering;
        let window = now_unix_ns.div_euclid(REPLAY_WINDOW_NS);
        let early = now_unix_ns.rem_euclid(REPLAY_WINDOW_NS) < REPLAY_WINDOW_NS / 2;
        if !early || self.pruned_window.load(Ordering::Relaxed) == window || self.pruning.swap(true, Ordering::AcqRel) {
            return Ok(0);
        }
        let target = self.trees.requests.get(request_slot(now_unix_ns.saturating_add(REPLAY_WINDOW_NS))).cloned();
        let cleared = match target {
            Some(tree) => tokio::task::spawn_blocking(move || {
                let count = tree.len();
                tree.clear().map(|()| count)
            })
            .await
            .map_err(|e| StoreError::BatchFailed(format!("pruning idempotency records failed: {e}")))
            .and_then(|cleared| cleared.map_err(StoreError::from)),
            None => Ok(0),
        };
        if cleared.is_ok() {
            // Only once done: a failed clear is tried again.
            self.pruned_window.store(window, Ordering::Relaxed);
        }
        self.pruning.store(false, Ordering::Release);
        cleared
    }

    /// A stored approval.
    pub(crate) fn approval(&self, approval_id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        self.trees
            .approvals
            .get(approval_id.as_bytes())?
            .map(|value| decode(trees::APPROVALS, approval_id.as_bytes(), &value))
            .transpose()
    }

    /// Every stored grant.
    pub(crate) fn grants(&self) -> Result<Vec<Grant>, StoreError> {
        self.trees
            .grants
            .iter()
            .map(|item| {
                let (key, value) = item?;
                decode(trees::GRANTS, &key, &value)
            })
            .collect()
    }

    /// Every lock.
    pub(crate) fn locks(&self) -> Result<Vec<Lock>, StoreError> {
        self.trees
            .locks
            .iter()
            .map(|item| {
                let (key, value) = item?;
                decode(trees::LOCKS, &key, &value)
            })
            .collect()
    }

    /// What is known of a session (see `Trees::session`).
    pub(crate) fn session(&self, key: &SessionKey) -> Result<Option<SessionRecord>, StoreError> {
        self.trees.session(key)
    }

    /// Every session with the id `session`, of any harness and user (a
    /// record an older version kept under the bare id included, with an
    /// empty harness).
    pub(crate) fn sessions_named(&self, session: &str) -> Result<Vec<SessionRecord>, StoreError> {
        let mut out = Vec::new();
        if let Some(value) = self.trees.sessions.get(session.as_bytes())? {
            out.push(read::<SessionRecord>(trees::SESSIONS, session.as_bytes(), &value)?);
        }
        let mut prefix = session.as_bytes().to_vec();
        prefix.push(0);
        for item in self.trees.sessions.scan_prefix(&prefix) {
            let (key, value) = item?;
            out.push(read(trees::SESSIONS, &key, &value)?);
        }
        Ok(out)
    }

    /// How many approvals of the session `key` are still waiting at
    /// `now_unix_ns`: one past its deadline no longer counts, whether or not
    /// the sweeper has expired it yet (so the answer does not depend on the
    /// sweeper's timing). Entries written before deadlines were kept here
    /// count.
    pub(crate) fn pending_count(&self, key: &SessionKey, now_unix_ns: i64) -> Result<usize, StoreError> {
        Self::count_waiting(&self.trees.pending_sessions, &key.bytes(), now_unix_ns)
    }

    /// How many approvals the harness credential `harness` has waiting at
    /// `now_unix_ns`, like [`Store::pending_count`].
    pub(crate) fn pending_count_of_harness(&self, harness: &str, now_unix_ns: i64) -> Result<usize, StoreError> {
        Self::count_waiting(&self.trees.pending_harnesses, harness.as_bytes(), now_unix_ns)
    }

    pub(super) fn count_waiting(tree: &sled::Tree, owner: &[u8], now_unix_ns: i64) -> Result<usize, StoreError> {
        let mut prefix = owner.to_vec();
        prefix.push(0);
        let mut count = 0;
        for item in tree.scan_prefix(prefix) {
            let (_, deadline) = item?;
            let waiting = match <[u8; 8]>::try_from(deadline.as_ref()) {
                Ok(bytes) => i64::from_be_bytes(bytes) > now_unix_ns,
                Err(_) => true,
            };
            count += usize::from(waiting);
        }
        Ok(count)
    }

    /// Pending approvals whose deadline is at or before `unix_ns`.
    pub(crate) fn pending_until(&self, unix_ns: i64) -> Result<Vec<ApprovalRecord>, StoreError> {
        let mut out = Vec::new();
        for item in self.trees.pending.iter() {
            let (key, _) = item?;
            let Some((deadline, id)) = split_pending_key(&key) else { continue };
            if deadline > unix_ns {
                break;
            }
            if let Some(record) = self.approval(id)?
                && record.state == ApprovalState::Pending
            {
                out.push(record);
            }
        }
        Ok(out)
    }

    /// A cursor over the audit log from `from_seq` on (records gone to
    /// retention are skipped: the first one read says where the log starts).
    pub(crate) fn audit_cursor(&self, from_seq: u64) -> Cursor {
        Cursor::new(&self.log_dir, from_seq)
    }

    /// The next durable records of `cursor`, at most `limit` (records
    /// written but not yet synced are left for the next read).
    pub(crate) fn audit_page(&self, cursor: &mut Cursor, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        Ok(cursor.next_page(self.durable_seq(), limit)?)
    }

    /// Durable audit records from `from_seq` on, at most `limit`.
    pub(crate) fn audit_from(&self, from_seq: u64, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        self.audit_page(&mut self.audit_cursor(from_seq), limit)
    }

    /// The first durable record at or after `unix_ns` (by the records'
    /// times), or the seq after the newest when there is none.
    pub(crate) fn seq_at_time(&self, unix_ns: i64) -> Result<u64, StoreError> {
        Ok(log::seq_at_time(&self.log_dir, unix_ns, self.durable_seq())?)
    }

    /// The stored hash of record `seq`.
    pub(crate) fn hash_at(&self, seq: u64) -> Result<Option<String>, StoreError> {
        let head = self.durable_head();
        if head.seq == seq {
            return Ok(Some(head.hash));
        }
        Ok(self.audit_from(seq, 1)?.into_iter().find(|r| r.seq == seq).map(|r| r.hash))
    }

    /// The newest durable record (genesis when the log is empty).
    pub(crate) fn durable_head(&self) -> Head {
        self.durable_head.lock().map(|h| h.clone()).unwrap_or_else(|e| e.into_inner().clone())
    }

    /// The audit log's segments, oldest first, and the seq before which
    /// they are no longer needed to rebuild sled's state.
    pub(crate) fn log_stats(&self) -> Result<LogStats, StoreError> {
        offline::stats(&self.log_dir, self.replay_from.load(Ordering::Acquire))
    }

    /// Takes the sealed segment that starts at `first_seq` out of the live
    /// log: moved into `archive` when given, else deleted. Only a segment
    /// wholly before [`LogStats::replay_from`] and older than the newest.
    pub(crate) fn remove_segment(&self, first_seq: u64, archive: Option<&Path>) -> Result<(), StoreError> {
        offline::remove_segment(&self.log_dir, first_seq, self.replay_from.load(Ordering::Acquire), archive)
    }

    /// The durable watermark ([`Store::durable_seq`]), to follow the log:
    /// it changes when records become durable, which are then read from
    /// the trees ([`Store::audit_from`]).
    pub(crate) fn durable_updates(&self) -> watch::Receiver<u64> {
        let mut updates = self.flushed.clone();
        updates.mark_unchanged();
        updates
    }

    /// Approval changes from now on, after they are flushed.
    pub(crate) fn approval_events(&self) -> broadcast::Receiver<ApprovalEvent> {
        self.approval_events.subscribe()
    }

    /// The newest record that is durable: what the trees hold beyond it
    /// is written but not yet synced.
    pub(crate) fn durable_seq(&self) -> u64 {
        *self.flushed.borrow()
    }

    /// Walks the chain up to the newest durable record (a signed head must
    /// not name a record a power loss could still take back).
    pub(crate) fn verify(&self) -> VerifyReport {
        chain::verify_log(&self.log_dir, self.durable_seq())
    }
}
