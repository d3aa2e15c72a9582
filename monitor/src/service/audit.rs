//! The audit log: where a tail starts, verification, and signed checkpoints.

use super::*;

impl Monitor {
    /// The first record to send for the newest `count`, or for all.
    pub fn audit_start(&self, count: u64, all: bool) -> Result<u64, CallError> {
        let last = self.store.last_seq()?;
        Ok(if all { 1 } else { last.saturating_sub(count).saturating_add(1) })
    }

    /// Walks the audit chain; with a key, signs the verified head.
    pub fn verify_audit(&self) -> (VerifyReport, Option<crate::checkpoint::Checkpoint>) {
        let report = self.store.verify();
        let checkpoint = self.checkpoints.as_ref().map(|c| c.key.sign(&report.head, unix_ns(self.now())));
        (report, checkpoint)
    }

    /// Uses `checkpoints` to sign the audit head.
    pub fn with_checkpoints(mut self, checkpoints: Checkpoints) -> Self {
        self.checkpoints = Some(checkpoints);
        self
    }

    /// Signs the head every so often (when it moved) and on shutdown,
    /// appending each checkpoint to the checkpoint log.
    pub async fn run_checkpoints(self: Arc<Self>) {
        let Some(checkpoints) = &self.checkpoints else { return };
        let mut shutdown = self.shutdown();
        let mut last = u64::MAX;
        loop {
            let stopping = tokio::select! {
                () = tokio::time::sleep(checkpoints.every) => false,
                () = shutdown.stopped() => true,
            };
            // The newest durable record, not merely the newest written.
            let durable = self.store.durable_seq();
            let head = match self.store.hash_at(durable).map(|hash| (durable, hash)) {
                Ok((seq, Some(hash))) => crate::store::Head { seq, hash },
                Ok(_) => {
                    if stopping {
                        return;
                    }
                    continue;
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot read the audit head to sign it");
                    if stopping {
                        return;
                    }
                    continue;
                }
            };
            if head.seq != last {
                let checkpoint = checkpoints.key.sign(&head, unix_ns(self.now()));
                if let Err(e) = append_line(&checkpoints.log, &checkpoint) {
                    tracing::error!(error = %e, "cannot write the checkpoint");
                } else {
                    last = head.seq;
                    tracing::info!(seq = head.seq, "audit head signed");
                }
            }
            if stopping {
                return;
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
