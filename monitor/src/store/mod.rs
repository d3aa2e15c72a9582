//! The durable state: the hash-chained audit log in segment files of its
//! own (`log`), and in sled what is mutable and small: decisions by
//! idempotency key, approvals, grants, locks, sessions.
//!
//! One writer task owns the chain head. Callers hand it a commit and wait;
//! it takes every commit waiting at that moment, appends their records and
//! state changes to the audit log as one frame, and hands the batch to the
//! sync thread, which fdatasyncs the segment (group commit), only then
//! applies the state changes to the sled trees, and answers each. So
//! nobody is told about a write that is not on disk, sled never holds
//! state whose record a power loss could take, concurrent requests share
//! one sync instead of paying one each, and the next batch is written
//! (planned against the ones in flight) while the previous one is synced. sled itself is flushed only when
//! a segment is sealed and on shutdown; opening the store applies again the
//! state changes of the segments written since.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use self::codec::{CodecError, Decoder, Encoder, Record};
use self::log::{Cursor, LogError, LogOp, LogWriter, Op};
use self::wal::WalError;
use crate::decision::Outcome;
use crate::grants::Grant;
use crate::normalize::Actor;

pub(crate) mod answer;
mod chain;
pub mod codec;
mod commit;
mod embedded;
mod keys;
pub mod log;
mod offline;
mod plan;
pub mod postgres;
mod records;
mod recover;
mod sync;
#[cfg(test)]
mod tests;
pub(crate) mod wal;
mod writer;

pub(crate) use self::chain::REMOVED_KIND;
pub use self::chain::{Removal, VerifyReport, verify_chain};
pub use self::commit::Head;
pub(crate) use self::commit::{Caps, Commit, Committed, GrantChange, Guard, LockChange, SessionChange};
pub(crate) use self::embedded::Embedded;
pub use self::keys::trees;
pub(crate) use self::offline::segment_end as offline_segment_end;
pub use self::offline::{LogStats, SegmentStat, StoppedStore};
pub use self::records::Remembered;
use self::{commit::*, keys::*, plan::*, recover::*, sync::*, writer::*};
pub use crate::model::*;

/// How long a decision is replayed for its request id. After it, or once the
/// policies changed, the same id is decided afresh: a harness cannot keep an
/// old ALLOW alive by reusing its id.
pub(crate) const REPLAY_WINDOW_NS: i64 = 10 * 60 * 1_000_000_000;

/// Idempotency records rotate through three trees, one replay window each:
/// a decision goes to the slot of its window; a lookup reads the current
/// and the previous slot (a record is replayable for one window); and once
/// a window starts, the slot after it, which holds records at least a
/// window older than anything replayable, is emptied in the background.
/// So the records take bounded room instead of growing for ever.
pub(crate) const REQUEST_SLOTS: usize = 3;

/// How far apart two requests' clock reads may be from the order in which
/// the writer sees them.
const CLOCK_SKEW_NS: i64 = 60 * 1_000_000_000;

/// sled's page cache, in bytes. sled's own memory is several times this
/// (its in-memory nodes are larger than their size on disk). 16 MiB and
/// 4 MiB decided equally fast in `warden-bench`, 4 MiB with 10–23 MiB less
/// resident; 8 MiB leaves room for the hot pages of larger idempotency and
/// session trees than the bench makes.
const CACHE_BYTES: u64 = 8 * 1024 * 1024;

/// Approval changes kept for watchers that are behind.
const APPROVAL_EVENTS: usize = 1024;

/// Most commits taken into one batch.
const MAX_BATCH: usize = 1024;

/// A batch stops taking commits once they come to about this many bytes.
const MAX_BATCH_BYTES: usize = 32 * 1024 * 1024;

/// A store failure. Callers fail closed on it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// sled failed.
    #[error("store: {0}")]
    Sled(#[from] sled::Error),
    /// A stored value does not decode.
    #[error("store: corrupt value in `{tree}` at `{key}`: {message}")]
    Corrupt {
        /// The sled tree.
        tree: &'static str,
        /// The key, printable.
        key: String,
        /// What failed.
        message: String,
    },
    /// A batch could not be written; every request in it failed.
    #[error("store: the audit batch was not written: {0}")]
    BatchFailed(String),
    /// The writer task is gone (the monitor is shutting down).
    #[error("store: the audit writer has stopped")]
    WriterGone,
    /// An earlier version's write-ahead log cannot be read back.
    #[error("store: {0}")]
    Wal(#[from] WalError),
    /// The audit log cannot be written or read back.
    #[error("store: {0}")]
    Log(#[from] LogError),
    /// PostgreSQL cannot be reached or refused a statement.
    #[error("store: PostgreSQL: {0}")]
    Postgres(String),
    /// What the backend cannot do (retention's segments on PostgreSQL).
    #[error("store: {0}")]
    Unsupported(String),
}

/// Where the monitor keeps its state and its audit log.
#[derive(Clone)]
pub(crate) enum Store {
    /// The audit log's segments and sled in the data folder: one monitor.
    Embedded(Embedded),
    /// PostgreSQL: the state and the audit log of several monitors.
    Postgres(postgres::Postgres),
}

/// Where a reader of the audit log is.
pub(crate) enum AuditCursor {
    /// In the embedded log's segments.
    Embedded(Box<Cursor>),
    /// The next seq to read from PostgreSQL.
    Postgres(u64),
}

impl Store {
    /// Appends a record with its state, if its guard holds, and returns once
    /// it is durable.
    pub(crate) async fn commit(&self, commit: Commit) -> Result<Committed, StoreError> {
        match self {
            Self::Embedded(s) => s.commit(commit).await,
            Self::Postgres(s) => s.commit(commit).await,
        }
    }

    /// Resolves once retention may have something to take (a segment of
    /// the embedded log is sealed); never on PostgreSQL.
    pub(crate) async fn segment_sealed(&self) {
        match self {
            Self::Embedded(s) => s.segment_sealed().await,
            Self::Postgres(_) => std::future::pending().await,
        }
    }

    /// The histogram of [`Store::commit`]'s times, for the metrics.
    pub(crate) fn append_seconds(&self) -> prometheus_client::metrics::histogram::Histogram {
        match self {
            Self::Embedded(s) => s.append_seconds(),
            Self::Postgres(s) => s.append_seconds(),
        }
    }

    /// Records written but not yet durable.
    pub(crate) fn durable_lag(&self) -> u64 {
        match self {
            Self::Embedded(s) => s.durable_lag(),
            // A commit returns once PostgreSQL has it.
            Self::Postgres(_) => 0,
        }
    }

    /// Waits until the record `seq` is durable.
    pub(crate) async fn wait_durable(&self, seq: u64) -> Result<(), StoreError> {
        match self {
            Self::Embedded(s) => s.wait_durable(seq).await,
            Self::Postgres(_) => Ok(()),
        }
    }

    /// Forgets idempotency records older than any replayable one; returns
    /// how many.
    pub(crate) async fn prune_requests(&self, now_unix_ns: i64) -> Result<usize, StoreError> {
        match self {
            Self::Embedded(s) => s.prune_requests(now_unix_ns).await,
            Self::Postgres(s) => s.prune_requests(now_unix_ns).await,
        }
    }

    /// A stored approval.
    pub(crate) async fn approval(&self, approval_id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        match self {
            Self::Embedded(s) => s.approval(approval_id),
            Self::Postgres(s) => s.approval(approval_id).await,
        }
    }

    /// Every stored grant.
    pub(crate) async fn grants(&self) -> Result<Vec<Grant>, StoreError> {
        match self {
            Self::Embedded(s) => s.grants(),
            Self::Postgres(s) => s.grants().await,
        }
    }

    /// Every lock.
    pub(crate) async fn locks(&self) -> Result<Vec<Lock>, StoreError> {
        match self {
            Self::Embedded(s) => s.locks(),
            Self::Postgres(s) => s.locks().await,
        }
    }

    /// What is known of a session.
    pub(crate) async fn session(&self, key: &SessionKey) -> Result<Option<SessionRecord>, StoreError> {
        match self {
            Self::Embedded(s) => s.session(key),
            Self::Postgres(s) => s.session(key).await,
        }
    }

    /// Every session with the id `session`, of any harness and user.
    pub(crate) async fn sessions_named(&self, session: &str) -> Result<Vec<SessionRecord>, StoreError> {
        match self {
            Self::Embedded(s) => s.sessions_named(session),
            Self::Postgres(s) => s.sessions_named(session).await,
        }
    }

    /// Pending approvals, earliest deadline first.
    pub(crate) async fn pending(&self) -> Result<Vec<ApprovalRecord>, StoreError> {
        self.pending_until(i64::MAX).await
    }

    /// How many approvals of the session `key` are still waiting at
    /// `now_unix_ns` (one past its deadline no longer counts).
    pub(crate) async fn pending_count(&self, key: &SessionKey, now_unix_ns: i64) -> Result<usize, StoreError> {
        match self {
            Self::Embedded(s) => s.pending_count(key, now_unix_ns),
            Self::Postgres(s) => s.pending_count(Some(key), None, now_unix_ns).await,
        }
    }

    /// How many approvals the harness credential `harness` has waiting.
    pub(crate) async fn pending_count_of_harness(&self, harness: &str, now_unix_ns: i64) -> Result<usize, StoreError> {
        match self {
            Self::Embedded(s) => s.pending_count_of_harness(harness, now_unix_ns),
            Self::Postgres(s) => s.pending_count(None, Some(harness), now_unix_ns).await,
        }
    }

    /// Pending approvals whose deadline is at or before `unix_ns`.
    pub(crate) async fn pending_until(&self, unix_ns: i64) -> Result<Vec<ApprovalRecord>, StoreError> {
        match self {
            Self::Embedded(s) => s.pending_until(unix_ns),
            Self::Postgres(s) => s.pending_until(unix_ns).await,
        }
    }

    /// A reader of the audit log from `from_seq` on.
    pub(crate) fn audit_cursor(&self, from_seq: u64) -> AuditCursor {
        match self {
            Self::Embedded(s) => AuditCursor::Embedded(Box::new(s.audit_cursor(from_seq))),
            Self::Postgres(_) => AuditCursor::Postgres(from_seq.max(1)),
        }
    }

    /// The next durable records of `cursor`, at most `limit`.
    pub(crate) async fn audit_page(
        &self,
        cursor: &mut AuditCursor,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        match (self, cursor) {
            (Self::Embedded(s), AuditCursor::Embedded(cursor)) => {
                // File reads, off the async threads.
                let (store, mut reading) = (s.clone(), std::mem::replace(cursor, Box::new(s.audit_cursor(u64::MAX))));
                let (reading, page) = tokio::task::spawn_blocking(move || {
                    let page = store.audit_page(&mut reading, limit);
                    (reading, page)
                })
                .await
                .map_err(|e| StoreError::BatchFailed(format!("reading the audit log: {e}")))?;
                *cursor = reading;
                page
            }
            (Self::Postgres(s), AuditCursor::Postgres(next)) => {
                let page = s.audit_from(*next, limit).await?;
                if let Some(last) = page.last() {
                    *next = last.seq + 1;
                }
                Ok(page)
            }
            _ => Err(StoreError::Unsupported("an audit cursor of another store".into())),
        }
    }

    /// Durable audit records from `from_seq` on, at most `limit`.
    #[cfg(test)]
    pub(crate) async fn audit_from(&self, from_seq: u64, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        self.audit_page(&mut self.audit_cursor(from_seq), limit).await
    }

    /// The first durable record at or after `unix_ns`, or the seq after the
    /// newest when there is none.
    pub(crate) async fn seq_at_time(&self, unix_ns: i64) -> Result<u64, StoreError> {
        match self {
            Self::Embedded(s) => {
                let s = s.clone();
                tokio::task::spawn_blocking(move || s.seq_at_time(unix_ns))
                    .await
                    .map_err(|e| StoreError::BatchFailed(format!("reading the audit log: {e}")))?
            }
            Self::Postgres(s) => s.seq_at_time(unix_ns).await,
        }
    }

    /// The stored hash of record `seq`.
    pub(crate) async fn hash_at(&self, seq: u64) -> Result<Option<String>, StoreError> {
        match self {
            Self::Embedded(s) => s.hash_at(seq),
            Self::Postgres(s) => s.hash_at(seq).await,
        }
    }

    /// The audit log's segments (the embedded store's only).
    pub(crate) fn log_stats(&self) -> Result<LogStats, StoreError> {
        match self {
            Self::Embedded(s) => s.log_stats(),
            Self::Postgres(_) => Err(StoreError::Unsupported("the audit log on PostgreSQL has no segments".into())),
        }
    }

    /// Takes a sealed segment out of the embedded log.
    pub(crate) fn remove_segment(&self, first_seq: u64, archive: Option<&Path>) -> Result<(), StoreError> {
        match self {
            Self::Embedded(s) => s.remove_segment(first_seq, archive),
            Self::Postgres(_) => Err(StoreError::Unsupported("the audit log on PostgreSQL has no segments".into())),
        }
    }

    /// The durable watermark, to follow the log: it changes when records
    /// become durable (on PostgreSQL, committed by any monitor).
    pub(crate) fn durable_updates(&self) -> watch::Receiver<u64> {
        match self {
            Self::Embedded(s) => s.durable_updates(),
            Self::Postgres(s) => s.durable_updates(),
        }
    }

    /// Approval changes from now on, once durable (on PostgreSQL, made by
    /// any monitor).
    pub(crate) fn approval_events(&self) -> broadcast::Receiver<ApprovalEvent> {
        match self {
            Self::Embedded(s) => s.approval_events(),
            Self::Postgres(s) => s.approval_events(),
        }
    }

    /// The newest record that is durable.
    pub(crate) fn durable_seq(&self) -> u64 {
        match self {
            Self::Embedded(s) => s.durable_seq(),
            Self::Postgres(s) => s.durable_seq(),
        }
    }

    /// Walks the chain up to the newest durable record.
    pub(crate) async fn verify(&self) -> VerifyReport {
        match self {
            Self::Embedded(s) => {
                let s = s.clone();
                tokio::task::spawn_blocking(move || s.verify()).await.unwrap_or_else(|e| VerifyReport {
                    records: 0,
                    head: Head::genesis(),
                    first_bad: Some((0, format!("the verification failed: {e}"))),
                    base: Head::genesis(),
                    removed_through: Default::default(),
                })
            }
            Self::Postgres(s) => s.verify().await,
        }
    }

    /// Whether the approval events may miss changes and a waiter should
    /// also look at the store now and then (PostgreSQL's notifications are
    /// lost while its listening connection is down).
    pub(crate) fn events_may_miss(&self) -> bool {
        matches!(self, Self::Postgres(_))
    }
}

/// Stops the writer when the monitor shuts down.
pub(crate) struct StoreCloser {
    close: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl StoreCloser {
    /// Writes and answers every commit already sent, stops the writer (later
    /// commits fail with [`StoreError::WriterGone`]), flushes sled and
    /// empties the write-ahead log.
    pub(crate) async fn close(self) -> Result<(), StoreError> {
        let _ = self.close.send(());
        self.task.await.map_err(|e| StoreError::BatchFailed(format!("the audit writer failed: {e}")))
    }
}

/// How durable an acknowledged write is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// sled's flush, then fsync of the database file: survives power loss.
    #[default]
    Fsync,
    /// sled's flush only (`sync_file_range` on Linux): survives a killed
    /// process, not necessarily a power loss or a kernel crash.
    Flush,
}
