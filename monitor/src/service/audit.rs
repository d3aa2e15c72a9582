//! The audit log: where a tail starts, verification, and signed checkpoints.

use super::*;

impl Monitor {
    /// The first record to send for the newest `count`, or for all.
    pub(crate) fn audit_start(&self, count: u64, all: bool) -> Result<u64, CallError> {
        let last = self.store.last_seq()?;
        Ok(if all { 1 } else { last.saturating_sub(count).saturating_add(1) })
    }

    /// Walks the audit chain; with a key, signs the verified head.
    pub(crate) fn verify_audit(&self) -> (VerifyReport, Option<crate::checkpoint::Checkpoint>) {
        let report = self.store.verify();
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
    pub(crate) fn checkpoint_once(&self, last: u64) -> u64 {
        let Some(checkpoints) = &self.checkpoints else { return last };
        // The newest durable record, not merely the newest written.
        let durable = self.store.durable_seq();
        let head = match self.store.hash_at(durable) {
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
