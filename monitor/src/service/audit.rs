//! The audit log: where a tail starts, verification, and signed checkpoints.

use super::*;

impl Monitor {
    /// The first record to send for the newest `count`, or for all.
    pub(crate) fn audit_start(&self, count: u64, all: bool) -> Result<u64, CallError> {
        let last = self.store.durable_seq();
        Ok(if all { 1 } else { last.saturating_sub(count).saturating_add(1) })
    }

    /// Walks the audit chain; with a key, signs the verified head.
    pub(crate) async fn verify_audit(&self) -> (VerifyReport, Option<crate::checkpoint::Checkpoint>) {
        let mut report = self.store.verify().await;
        match &self.checkpoints {
            Some(c) => crate::checkpoint::check_base(&mut report, &c.log, Some(&c.key.public_hex())),
            None => crate::checkpoint::check_base(&mut report, std::path::Path::new(""), None),
        }
        let checkpoint = self.checkpoints.as_ref().map(|c| c.key.sign(&report.head, unix_ns(self.now())));
        (report, checkpoint)
    }

    /// Uses `checkpoints` to sign the audit head.
    pub(crate) fn with_checkpoints(mut self, checkpoints: Checkpoints) -> Self {
        self.checkpoints = Some(checkpoints);
        self
    }

    /// How often the audit head is signed; `None` without a checkpoint key.
    pub(crate) fn checkpoint_every(&self) -> Option<Duration> {
        self.checkpoints.as_ref().map(|c| c.every)
    }

    /// Signs the newest durable record into the checkpoint log, unless it
    /// is `last` (signed already); returns the sequence number signed now.
    pub(crate) async fn checkpoint_once(&self, last: u64) -> u64 {
        let Some(checkpoints) = &self.checkpoints else { return last };
        // The newest durable record, not merely the newest written.
        let durable = self.store.durable_seq();
        let head = match self.store.hash_at(durable).await {
            Ok(Some(hash)) => crate::store::Head { seq: durable, hash },
            Ok(None) => return last,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the audit head to sign it");
                return last;
            }
        };
        if head.seq == last {
            return last;
        }
        let checkpoint = checkpoints.key.sign(&head, unix_ns(self.now()));
        match append_line(&checkpoints.log, &checkpoint) {
            Ok(()) => {
                tracing::info!(seq = head.seq, "audit head signed");
                head.seq
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot write the checkpoint");
                last
            }
        }
    }
}

impl Monitor {
    /// Takes the oldest sealed segments of the audit log out of the live
    /// store, as `[audit]` says: while the newest record of the oldest is
    /// older than `retain_days`, or the log is larger than `retain_bytes`.
    /// Each is first closed by a signed checkpoint of its last record (so
    /// that what remains verifies from there), then archived or deleted,
    /// then recorded (`audit.segment-removed`). Only segments that sled's
    /// state no longer needs for a replay are taken. Returns how many.
    pub(crate) async fn retain_once(&self, audit: &crate::config::AuditConfig) -> Result<usize, CallError> {
        if !audit.retains() {
            return Ok(0);
        }
        let Some(checkpoints) = &self.checkpoints else {
            return Err(CallError::Store(StoreError::BatchFailed(
                "audit retention needs the checkpoint key: nothing was removed".into(),
            )));
        };
        let stats = self.store.log_stats()?;
        let mut total: u64 = stats.segments.iter().map(|s| s.bytes).sum();
        let mut removed = 0;
        for pair in stats.segments.windows(2) {
            let [segment, next] = pair else { break };
            if next.first_seq > stats.replay_from {
                break;
            }
            // Over the byte bound, or possibly old enough: only then is the
            // segment read (its end's time, its chain checked).
            if audit.retain_days.is_none() && audit.retain_bytes.is_none_or(|limit| total <= limit) {
                break;
            }
            let (path, first) = (segment.path.clone(), segment.first_seq);
            let end = tokio::task::spawn_blocking(move || crate::store::offline_segment_end(&path, first))
                .await
                .map_err(|e| CallError::Store(StoreError::BatchFailed(e.to_string())))??;
            let Some((end, last_time)) = end else { break };
            let now = unix_ns(self.now());
            let too_old = audit.retain_days.is_some_and(|days| {
                last_time < now.saturating_sub(i64::from(days).saturating_mul(86_400 * 1_000_000_000))
            });
            let too_big = audit.retain_bytes.is_some_and(|limit| total > limit);
            if !too_old && !too_big {
                break;
            }
            let whither = match &audit.archive_dir {
                Some(dir) => format!("moved to {}", dir.display()),
                None => "deleted".to_owned(),
            };
            let why = if too_old { "older than retain_days" } else { "over retain_bytes" };
            // The checkpoint that closes it, then the record that says it
            // goes, signed by the same key (durable before anything is
            // deleted: `check_base` wants both), then the segment.
            let checkpoint = checkpoints.key.sign(&end, now);
            append_line(&checkpoints.log, &checkpoint).map_err(|e| CallError::Store(StoreError::BatchFailed(e)))?;
            let entry = AuditEntry {
                time_unix_ns: now,
                kind: crate::store::REMOVED_KIND.into(),
                caller: "wardend".into(),
                request: serde_json::json!({
                    "first_seq": first,
                    "last_seq": end.seq,
                    "last_hash": end.hash,
                    "bytes": segment.bytes,
                    "archive": audit.archive_dir.as_ref().map(|d| d.display().to_string()),
                    "why": why,
                    "signature": checkpoints.key.sign_removal(first, &end),
                })
                .to_string(),
                reasons: vec![format!(
                    "records {first} to {} ({} bytes, {why}) {whither}; checkpoint of record {} signed",
                    end.seq, segment.bytes, end.seq
                )],
                ..AuditEntry::default()
            };
            self.store.commit(Commit::record(entry)).await?;
            let (store, archive) = (self.store.clone(), audit.archive_dir.clone());
            tokio::task::spawn_blocking(move || store.remove_segment(first, archive.as_deref()))
                .await
                .map_err(|e| CallError::Store(StoreError::BatchFailed(e.to_string())))??;
            total = total.saturating_sub(segment.bytes);
            removed += 1;
            tracing::info!(first, last = end.seq, bytes = segment.bytes, why, "audit segment {whither}");
        }
        Ok(removed)
    }
}

/// Appends one JSON line and syncs it.
pub(super) fn append_line(path: &std::path::Path, value: &impl serde::Serialize) -> Result<(), String> {
    use std::io::Write;
    let line = serde_json::to_string(value).map_err(|e| e.to_string())?;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    file.write_all(format!("{line}\n").as_bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
    file.sync_data().map_err(|e| format!("{}: {e}", path.display()))
}
