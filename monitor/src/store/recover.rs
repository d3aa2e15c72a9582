//! Opening a store: sled, then every frame still in the write-ahead log applied on top.

use super::*;

/// What [`recover`] opened.
pub(super) struct Recovered {
    pub(super) db: sled::Db,
    pub(super) trees: Trees,
    /// sled's log file, fsynced after each of its flushes (fsync durability).
    pub(super) db_file: Option<Arc<File>>,
    pub(super) wal_dir: PathBuf,
}

/// Opens sled in `dir` and applies what the write-ahead log holds beyond
/// sled's last flush; then flushes sled and empties the log.
pub(super) fn recover(dir: &Path, durability: Durability) -> Result<Recovered, StoreError> {
    // The writer makes every answer durable through the write-ahead log:
    // sled's own 500 ms flusher would only write the same data twice.
    // sled keeps written pages in memory up to its cache capacity (1 GiB by
    // default): the audit log would grow the resident size without bound
    // for records that are read back rarely (tail, verify).
    let db = sled::Config::new()
        .path(dir)
        .mode(sled::Mode::HighThroughput)
        .flush_every_ms(None)
        .cache_capacity(CACHE_BYTES)
        .open()?;
    // sled 0.34 flushes with sync_file_range; fsync of its log file (the
    // inode, whichever descriptor) makes the flushed data power-safe.
    let db_file = match durability {
        Durability::Fsync => {
            let file = File::open(dir.join("db")).map_err(sled::Error::Io)?;
            // The folder too, so that files sled created are found after a crash.
            if let Ok(folder) = File::open(dir) {
                let _ = folder.sync_all();
            }
            Some(Arc::new(file))
        }
        Durability::Flush => None,
    };
    let trees = Trees::open(&db)?;
    let wal_dir = dir.join("wal");
    let batches = wal::recover(&wal_dir)?;
    if !batches.is_empty() {
        tracing::info!(batches = batches.len(), "applying the write-ahead log");
        for ops in &batches {
            trees.apply(ops)?;
        }
    }
    flush_sled(&db, db_file.as_deref())?;
    if wal_dir.exists() {
        wal::remove_all(&wal_dir)?;
    }
    Ok(Recovered { db, trees, db_file, wal_dir })
}

/// sled's flush, then (fsync durability) fsync of its log file.
pub(super) fn flush_sled(db: &sled::Db, db_file: Option<&File>) -> Result<(), StoreError> {
    db.flush()?;
    if let Some(file) = db_file {
        file.sync_data().map_err(sled::Error::Io)?;
    }
    Ok(())
}

/// Opens a stopped monitor's store for reading (`wardenctl audit verify
/// --data`), first applying whatever its write-ahead log holds, so that
/// every acknowledged record is there even after a crash.
pub fn open_stopped(dir: &Path) -> Result<sled::Db, StoreError> {
    Ok(recover(dir, Durability::Fsync)?.db)
}
