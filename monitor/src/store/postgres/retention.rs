//! What retention on PostgreSQL reads and keeps besides the records: where
//! the log starts and ends, how large its rows are, and the signed
//! checkpoints that close each removal (kept in the database for every
//! monitor's verifier, as JSON lines this module does not read: the
//! signature, checked by `checkpoint.rs` with the verifier's own key, is
//! what makes one count).
//!
//! The removal itself is a commit (`Guard::OldestRecords`): the record that
//! says which records go and their `DELETE` are one transaction, planned
//! under the chain's head like every other, so two monitors retaining at
//! once remove a range once.

use super::*;

impl Postgres {
    /// The oldest and the newest record stored; `None` when there is none.
    pub(crate) async fn audit_extent(&self) -> Result<Option<(u64, u64)>, StoreError> {
        let client = self.readers.client().await?;
        let row = client.query_one("SELECT min(seq), max(seq) FROM warden_audit", &[]).await.map_err(pg_error)?;
        let seq = |i| row.get::<_, Option<i64>>(i).and_then(|seq| u64::try_from(seq).ok());
        Ok(seq(0).zip(seq(1)))
    }

    /// About how many bytes a record's row takes (`pg_column_size`, the
    /// mean of the newest thousand): the log's size is this times its
    /// records, without reading them all.
    pub(crate) async fn record_bytes(&self) -> Result<u64, StoreError> {
        let client = self.readers.client().await?;
        let row = client
            .query_one(
                "SELECT coalesce(avg(pg_column_size(a.*)), 0)::float8 FROM (SELECT * FROM warden_audit ORDER BY seq \
                 DESC LIMIT 1000) AS a",
                &[],
            )
            .await
            .map_err(pg_error)?;
        // A mean of sizes: finite and far below u64::MAX.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Ok(row.get::<_, f64>(0).ceil().max(0.0) as u64)
    }

    /// The newest record that, with every one before it, is older than
    /// `unix_ns`; `None` when the oldest is not.
    pub(crate) async fn older_than(&self, unix_ns: i64) -> Result<Option<u64>, StoreError> {
        let client = self.readers.client().await?;
        let row = client
            .query_one(
                "SELECT coalesce((SELECT min(seq) FROM warden_audit WHERE time_unix_ns >= $1) - 1, (SELECT max(seq) \
                 FROM warden_audit)), (SELECT min(seq) FROM warden_audit)",
                &[&unix_ns],
            )
            .await
            .map_err(pg_error)?;
        let (last, oldest) = (row.get::<_, Option<i64>>(0), row.get::<_, Option<i64>>(1));
        Ok(match (last, oldest) {
            (Some(last), Some(oldest)) if last >= oldest => u64::try_from(last).ok(),
            _ => None,
        })
    }

    /// Keeps a signed checkpoint (one JSON line) of record `seq`.
    pub(crate) async fn save_checkpoint(&self, seq: u64, line: &str) -> Result<(), StoreError> {
        let client = self.readers.client().await?;
        let seq = i64::try_from(seq).unwrap_or(i64::MAX);
        client
            .execute("INSERT INTO warden_checkpoints (seq, line) VALUES ($1, $2)", &[&seq, &line])
            .await
            .map_err(pg_error)?;
        Ok(())
    }

    /// The checkpoints kept in the database, as saved.
    pub(crate) async fn checkpoint_lines(&self) -> Result<Vec<String>, StoreError> {
        let client = self.readers.client().await?;
        let rows = client.query("SELECT line FROM warden_checkpoints ORDER BY seq", &[]).await.map_err(pg_error)?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    /// Forgets the checkpoints of records before `seq` (removed records:
    /// only the one that closes the newest removal vouches for anything).
    pub(crate) async fn forget_checkpoints_before(&self, seq: u64) -> Result<(), StoreError> {
        let client = self.readers.client().await?;
        let seq = i64::try_from(seq).unwrap_or(i64::MAX);
        client.execute("DELETE FROM warden_checkpoints WHERE seq < $1", &[&seq]).await.map_err(pg_error)?;
        Ok(())
    }
}

/// Writes `records` (the range about to be removed) to `dir` as JSON lines,
/// the form the database holds, in `audit-FIRST-LAST.jsonl.partial`, synced.
/// [`finish_archive`] names it once the removal is committed; one that did
/// not happen is deleted by [`drop_archive`] (or, after a crash, left as
/// `.partial`, never under a name that says the records are gone).
pub(crate) fn write_archive(dir: &Path, records: &[AuditRecord]) -> Result<PathBuf, StoreError> {
    use std::io::Write as _;
    let (Some(first), Some(last)) = (records.first(), records.last()) else {
        return Err(StoreError::BatchFailed("no records to archive".into()));
    };
    std::fs::create_dir_all(dir).map_err(log::io_error(dir))?;
    let path = dir.join(format!("audit-{:020}-{:020}.jsonl.partial", first.seq, last.seq));
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path).map_err(log::io_error(&path))?);
    for record in records {
        let line = json(record)?;
        file.write_all(line.as_bytes()).and_then(|()| file.write_all(b"\n")).map_err(log::io_error(&path))?;
    }
    let file = file.into_inner().map_err(|e| log::io_error(&path)(e.into_error()))?;
    file.sync_all().map_err(log::io_error(&path))?;
    Ok(path)
}

/// Gives a written archive its final name (without `.partial`), durably.
pub(crate) fn finish_archive(partial: &Path) -> Result<PathBuf, StoreError> {
    let done = partial.with_extension("");
    std::fs::rename(partial, &done).map_err(log::io_error(partial))?;
    if let Some(dir) = done.parent() {
        log::sync_dir(dir)?;
    }
    Ok(done)
}

/// Deletes an archive whose removal did not happen.
pub(crate) fn drop_archive(partial: &Path) {
    if let Err(e) = std::fs::remove_file(partial) {
        tracing::warn!(path = %partial.display(), error = %e, "cannot delete an archive of records not removed");
    }
}
