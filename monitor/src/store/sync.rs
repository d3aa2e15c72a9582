//! The sync thread: one fdatasync of the audit log for every batch queued, then their state into the trees, the answers and the durable watermark.

use super::*;

/// The sync thread: fdatasyncs the log under every batch handed to it
/// (several at once when they queue up), then applies their state changes
/// to the trees and answers them.
pub(super) struct SyncLoop {
    pub(super) fsync: bool,
    pub(super) trees: Trees,
    /// The batches handed on and not yet applied, shared with the writer.
    pub(super) in_flight: Arc<InFlight>,
    pub(super) flushed: watch::Sender<u64>,
    pub(super) durable_head: Arc<Mutex<Head>>,
    pub(super) approval_events: broadcast::Sender<ApprovalEvent>,
    pub(super) failed: Arc<OnceLock<String>>,
    /// Held by a test to keep batches from becoming durable.
    #[cfg(test)]
    pub(super) pause: Arc<Mutex<()>>,
}

impl SyncLoop {
    pub(super) fn run(&self, mut rx: mpsc::UnboundedReceiver<Appended>) {
        while let Some(first) = rx.blocking_recv() {
            let mut batches = vec![first];
            while let Ok(more) = rx.try_recv() {
                batches.push(more);
            }
            #[cfg(test)]
            drop(self.pause.lock());
            let synced = match self.failed.get() {
                Some(why) if self.fsync => Err(why.clone()),
                _ => self.sync(&batches),
            };
            match synced {
                Ok(()) => self.answer(batches),
                Err(why) => self.refuse(batches, &why),
            }
        }
    }

    /// Answers batches that did not become durable (or could not be
    /// applied) with an error, and wakes whoever waits on the watermark:
    /// nothing more is accepted.
    fn refuse(&self, batches: Vec<Appended>, why: &str) {
        tracing::error!(error = %why, "audit batch not synced; the requests in it are answered with an error");
        for Appended { answers, .. } in batches {
            for (reply, _) in answers {
                let _ = reply.send(Err(StoreError::BatchFailed(why.to_owned())));
            }
        }
        self.flushed.send_modify(|_| {});
    }

    /// Publishes durable batches: their state into the trees, the flushed
    /// watermark, each answer, and the approval changes to their watchers.
    pub(super) fn answer(&self, batches: Vec<Appended>) {
        // Only what is durable reaches sled (see `InFlight`).
        for batch in &batches {
            if let Err(e) = self.trees.apply(&batch.ops) {
                let why = format!("the store's state could not be updated ({e}); restart the monitor");
                let _ = self.failed.set(why.clone());
                self.refuse(batches, &why);
                return;
            }
            self.in_flight.applied();
        }
        if let Some(last) = batches.last() {
            if let Ok(mut head) = self.durable_head.lock()
                && head.seq != last.seq
            {
                *head = Head { seq: last.seq, hash: last.hash.clone() };
            }
            // Only a new head wakes followers (a batch of replays adds none).
            self.flushed.send_if_modified(|durable| {
                let moved = *durable != last.seq;
                *durable = last.seq;
                moved
            });
        }
        for Appended { answers, writes, .. } in batches {
            for (reply, committed) in answers {
                let _ = reply.send(Ok(committed));
            }
            for write in writes {
                // A use changes nothing an approver or a waiting harness
                // watches for: it was resolved already.
                if let Some(approval) = write.approval
                    && approval.used_seq != write.record.seq
                {
                    let _ = self.approval_events.send(ApprovalEvent { approval });
                }
            }
        }
    }

    /// fdatasync of each segment the batches are in (fsync durability).
    pub(super) fn sync(&self, batches: &[Appended]) -> Result<(), String> {
        if !self.fsync {
            return Ok(());
        }
        let mut files: Vec<&Arc<File>> = Vec::new();
        for batch in batches {
            if !files.iter().any(|f| Arc::ptr_eq(f, &batch.file)) {
                files.push(&batch.file);
            }
        }
        for file in files {
            if let Err(e) = file.sync_data() {
                let why = format!("a sync of the audit log failed ({e}); restart the monitor");
                let _ = self.failed.set(why.clone());
                return Err(why);
            }
        }
        Ok(())
    }
}
