//! The audit log: where a tail starts, verification, and signed checkpoints.

use super::*;
use crate::model::AuditRecord;

impl Monitor {
    /// The first record to send for the newest `count`, or for all.
    pub(crate) fn audit_start(&self, count: u64, all: bool) -> Result<u64, CallError> {
        let last = self.store.durable_seq();
        Ok(if all { 1 } else { last.saturating_sub(count).saturating_add(1) })
    }

    /// Walks the audit chain; with a key, signs the verified head.
    pub(crate) async fn verify_audit(&self) -> (VerifyReport, Option<crate::checkpoint::Checkpoint>) {
        let mut report = self.store.verify().await;
        if report.base.seq > 0 {
            let mut kept = match &self.checkpoints {
                Some(c) => crate::checkpoint::read_checkpoints(&c.log),
                None => Vec::new(),
            };
            // On PostgreSQL, the one that closed the newest removal may be
            // another monitor's (signed with the same key).
            if let crate::store::Store::Postgres(pg) = &self.store {
                match pg.checkpoint_lines().await {
                    Ok(lines) => kept.extend(crate::checkpoint::parse_checkpoints(lines.iter().map(String::as_str))),
                    Err(e) => tracing::warn!(error = %e, "cannot read the checkpoints kept in PostgreSQL"),
                }
            }
            let key = self.checkpoints.as_ref().map(|c| c.key.public_hex());
            crate::checkpoint::check_base(&mut report, &kept, key.as_deref());
        }
        let checkpoint = self.checkpoints.as_ref().map(|c| c.key.sign(&report.head, unix_ns(self.now())));
        (report, checkpoint)
    }

    /// Uses `checkpoints` to sign the audit head.
    pub(crate) fn with_checkpoints(mut self, checkpoints: Checkpoints) -> Self {
        self.checkpoints = Some(checkpoints);
        self
    }

    /// The checkpoint key's public half (hex); empty without one.
    pub(crate) fn checkpoint_public_key(&self) -> String {
        self.checkpoints.as_ref().map(|c| c.key.public_hex()).unwrap_or_default()
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

/// The most records one removal from PostgreSQL takes (one transaction).
const ROWS_PER_REMOVAL: u64 = 10_000;
/// The most removals of one round on PostgreSQL.
const REMOVALS_PER_ROUND: usize = 100;
/// Monitors seen this recently must share this one's checkpoint key before
/// it removes records from PostgreSQL.
const KEY_PEERS_SEEN_NS: i64 = 3_600 * 1_000_000_000;

impl Monitor {
    /// Takes the oldest records out of the live store, as `[audit]` says:
    /// while the oldest are older than `retain_days`, or the log is larger
    /// than `retain_bytes`. Each range is first closed by a signed
    /// checkpoint of its last record (so that what remains verifies from
    /// there), recorded (`audit.segment-removed`, signed too), archived or
    /// not, and removed. Returns how many ranges were removed.
    pub(crate) async fn retain_once(&self, audit: &crate::config::AuditConfig) -> Result<usize, CallError> {
        if !audit.retains() {
            return Ok(0);
        }
        let Some(checkpoints) = &self.checkpoints else {
            return Err(CallError::Store(StoreError::BatchFailed(
                "audit retention needs the checkpoint key: nothing was removed".into(),
            )));
        };
        match &self.store {
            crate::store::Store::Embedded(_) => self.retain_segments(audit, checkpoints).await,
            crate::store::Store::Postgres(pg) => self.retain_rows(pg, audit, checkpoints).await,
        }
    }

    /// The embedded store: whole sealed segments, oldest first, only those
    /// that sled's state no longer needs for a replay.
    async fn retain_segments(
        &self,
        audit: &crate::config::AuditConfig,
        checkpoints: &Checkpoints,
    ) -> Result<usize, CallError> {
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
            let too_old = audit.retain_days.is_some_and(|days| last_time < retain_cutoff(now, days));
            let too_big = audit.retain_bytes.is_some_and(|limit| total > limit);
            if !too_old && !too_big {
                break;
            }
            let why = if too_old { "older than retain_days" } else { "over retain_bytes" };
            let whither = match &audit.archive_dir {
                Some(dir) => format!("moved to {}", dir.display()),
                None => "deleted".to_owned(),
            };
            // The checkpoint that closes it, then the record that says it
            // goes, signed by the same key (durable before anything is
            // deleted: `check_base` wants both), then the segment.
            close_with_checkpoint(checkpoints, &end, now)?;
            let removal = Removal { first, end: &end, bytes: segment.bytes, why, whither: &whither, now };
            self.store.commit(Commit::record(removal.entry(audit, checkpoints))).await?;
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

    /// PostgreSQL: the oldest rows, at most [`ROWS_PER_REMOVAL`] a range,
    /// never the newest record. The record that says a range goes and the
    /// range's `DELETE` are one transaction (`Guard::OldestRecords`): when
    /// another monitor removed it first, nothing is written. Every monitor
    /// verifies a removal with its own checkpoint key, so none removes
    /// anything while a monitor seen in the last hour has another key.
    async fn retain_rows(
        &self,
        pg: &crate::store::postgres::Postgres,
        audit: &crate::config::AuditConfig,
        checkpoints: &Checkpoints,
    ) -> Result<usize, CallError> {
        let mine = checkpoints.key.public_hex();
        let now = unix_ns(self.now());
        let others: Vec<String> = pg
            .replicas(now.saturating_sub(KEY_PEERS_SEEN_NS))
            .await?
            .into_iter()
            .filter(|r| r.replica != pg.replica() && r.checkpoint_key != mine)
            .map(|r| r.replica)
            .collect();
        if !others.is_empty() {
            return Err(CallError::Store(StoreError::BatchFailed(format!(
                "monitors {} sign with another checkpoint key than this one, and each verifies removed records \
                 by its own: give every monitor on the database the same checkpoint.key; nothing was removed",
                others.join(", ")
            ))));
        }
        let mut removed = 0;
        while removed < REMOVALS_PER_ROUND {
            let Some((oldest, newest)) = pg.audit_extent().await? else { break };
            let now = unix_ns(self.now());
            let (mut last, mut why) = (None, "");
            if let Some(days) = audit.retain_days
                && let Some(old) = pg.older_than(retain_cutoff(now, days)).await?
            {
                (last, why) = (Some(old), "older than retain_days");
            }
            if let Some(limit) = audit.retain_bytes {
                let per_record = pg.record_bytes().await?.max(1);
                let bytes = (newest - oldest + 1).saturating_mul(per_record);
                if bytes > limit {
                    let over = oldest + (bytes - limit).div_ceil(per_record) - 1;
                    if last.is_none_or(|old| over > old) {
                        (last, why) = (Some(over), "over retain_bytes");
                    }
                }
            }
            // Never the newest record (nor one not yet durable here): the
            // chain must go on from something stored.
            let upto = newest.min(self.store.durable_seq()).saturating_sub(1);
            let Some(last) = last.map(|last| last.min(upto).min(oldest + ROWS_PER_REMOVAL - 1)) else { break };
            if last < oldest {
                break;
            }
            let records = self.records_to_remove(pg, oldest, last).await?;
            let bytes: u64 = records.iter().map(|r| serde_json::to_string(r).map_or(0, |t| t.len() as u64)).sum();
            let Some(end) = records.last().map(|r| crate::store::Head { seq: r.seq, hash: r.hash.clone() }) else {
                break;
            };
            let partial = match &audit.archive_dir {
                Some(dir) => {
                    let (dir, records) = (dir.clone(), records);
                    Some(
                        tokio::task::spawn_blocking(move || crate::store::postgres::write_archive(&dir, &records))
                            .await
                            .map_err(|e| CallError::Store(StoreError::BatchFailed(e.to_string())))??,
                    )
                }
                None => None,
            };
            let whither = match &audit.archive_dir {
                Some(dir) => format!("moved to {}", dir.display()),
                None => "deleted".to_owned(),
            };
            let checkpoint = close_with_checkpoint(checkpoints, &end, now)?;
            let line = serde_json::to_string(&checkpoint)
                .map_err(|e| CallError::Store(StoreError::BatchFailed(e.to_string())))?;
            pg.save_checkpoint(end.seq, &line).await?;
            let removal = Removal { first: oldest, end: &end, bytes, why, whither: &whither, now };
            let guard = Guard::OldestRecords { first_seq: oldest, last_seq: end.seq, last_hash: end.hash.clone() };
            let commit = Commit { guard, ..Commit::record(removal.entry(audit, checkpoints)) };
            match self.store.commit(commit).await {
                Ok(Committed::New { .. }) => {}
                Ok(Committed::AuditMoved) => {
                    // Another monitor removed them first.
                    if let Some(partial) = &partial {
                        crate::store::postgres::drop_archive(partial);
                    }
                    break;
                }
                Ok(other) => return Err(unexpected(other)),
                Err(e) => {
                    if let Some(partial) = &partial {
                        crate::store::postgres::drop_archive(partial);
                    }
                    return Err(e.into());
                }
            }
            if let Some(partial) = partial {
                tokio::task::spawn_blocking(move || crate::store::postgres::finish_archive(&partial))
                    .await
                    .map_err(|e| CallError::Store(StoreError::BatchFailed(e.to_string())))??;
            }
            if let Err(e) = pg.forget_checkpoints_before(end.seq).await {
                tracing::warn!(error = %e, "cannot forget the checkpoints of removed records");
            }
            removed += 1;
            tracing::info!(first = oldest, last = end.seq, bytes, why, "audit records {whither}");
        }
        Ok(removed)
    }

    /// Records `first` to `last`, read from PostgreSQL and checked: they
    /// link to each other and are all there (a range whose chain is broken
    /// is not removed, so that `audit verify` still names the break).
    async fn records_to_remove(
        &self,
        pg: &crate::store::postgres::Postgres,
        first: u64,
        last: u64,
    ) -> Result<Vec<AuditRecord>, CallError> {
        let mut records: Vec<AuditRecord> = Vec::new();
        while records.last().map_or(first, |r| r.seq + 1) <= last {
            let at = records.last().map_or(first, |r| r.seq + 1);
            let want = usize::try_from(last - at + 1).unwrap_or(usize::MAX).min(4096);
            let page = pg.audit_from(at, want).await?;
            if page.is_empty() {
                break;
            }
            records.extend(page.into_iter().take_while(|r| r.seq <= last));
        }
        let base = match records.first() {
            Some(r) => crate::store::Head { seq: first.saturating_sub(1), hash: r.prev_hash.clone() },
            None => return Err(CallError::Store(StoreError::BatchFailed(format!("record {first} is gone")))),
        };
        let checked = crate::store::verify_chain(base, records.iter().cloned().map(Ok::<_, StoreError>));
        if let Some((seq, why)) = checked.first_bad {
            return Err(CallError::Store(StoreError::BatchFailed(format!(
                "records {first} to {last} are not removed: record {seq} does not verify ({why})"
            ))));
        }
        if checked.head.seq != last {
            return Err(CallError::Store(StoreError::BatchFailed(format!(
                "records {first} to {last} are not removed: the log ends at record {}",
                checked.head.seq
            ))));
        }
        Ok(records)
    }
}

/// The time before which records are older than `days`.
fn retain_cutoff(now: i64, days: u32) -> i64 {
    now.saturating_sub(i64::from(days).saturating_mul(86_400 * 1_000_000_000))
}

/// Signs `end`, the last record a removal takes, into the checkpoint log.
fn close_with_checkpoint(
    checkpoints: &Checkpoints,
    end: &crate::store::Head,
    now: i64,
) -> Result<crate::checkpoint::Checkpoint, CallError> {
    let checkpoint = checkpoints.key.sign(end, now);
    append_line(&checkpoints.log, &checkpoint).map_err(|e| CallError::Store(StoreError::BatchFailed(e)))?;
    Ok(checkpoint)
}

/// One removal, as its `audit.segment-removed` record says it.
struct Removal<'a> {
    first: u64,
    end: &'a crate::store::Head,
    bytes: u64,
    why: &'a str,
    whither: &'a str,
    now: i64,
}

impl Removal<'_> {
    /// The record (its `request` is what `chain::Removal` reads, signed by
    /// the checkpoint key).
    fn entry(&self, audit: &crate::config::AuditConfig, checkpoints: &Checkpoints) -> AuditEntry {
        let Self { first, end, bytes, why, whither, now } = *self;
        AuditEntry {
            time_unix_ns: now,
            kind: crate::store::REMOVED_KIND.into(),
            caller: "wardend".into(),
            request: serde_json::json!({
                "first_seq": first,
                "last_seq": end.seq,
                "last_hash": end.hash,
                "bytes": bytes,
                "archive": audit.archive_dir.as_ref().map(|d| d.display().to_string()),
                "why": why,
                "signature": checkpoints.key.sign_removal(first, end),
            })
            .to_string(),
            reasons: vec![format!(
                "records {first} to {} ({bytes} bytes, {why}) {whither}; checkpoint of record {} signed",
                end.seq, end.seq
            )],
            ..AuditEntry::default()
        }
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
