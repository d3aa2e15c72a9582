//! Watches the policy folder and reloads after a burst of writes settles
//! (an editor's save, a `git checkout`), so a change serves within a second.
//!
//! Only events that can change what the folder holds count (a file created,
//! written, renamed or removed, its permissions changed); opening and
//! reading do not, so the loader's own reads never wake the watcher. What
//! does wake it reloads only when the content differs from the set serving
//! and from the last content that failed (`Monitor::reload_if_changed`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, MetadataKind, ModifyKind};
use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::service::Monitor;

/// Quiet time after the last change before reloading.
const SETTLE: Duration = Duration::from_millis(100);
/// Reload at the latest this long after the first change of a burst.
const MAX_DELAY: Duration = Duration::from_millis(500);

/// Which policy folder a watcher watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Watched {
    /// The live folder (`Monitor::reload_if_changed`).
    Live,
    /// The shadow folder (`Monitor::reload_shadow`).
    Shadow,
}

/// Starts watching `dir`; the task ends when the monitor shuts down.
pub(crate) fn watch_policies(monitor: Arc<Monitor>, dir: PathBuf, which: Watched) -> notify::Result<JoinHandle<()>> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Errors (a lost event queue among them) also mean "look again".
        match event {
            Ok(event) if !may_change_content(&event.kind) => {}
            event => {
                let _ = tx.send(event.map(|_| ()).map_err(|e| e.to_string()));
            }
        }
    })?;
    // Recursive: `invariants/` is part of the set.
    watcher.watch(&dir, RecursiveMode::Recursive)?;
    let mut shutdown = monitor.shutdown();
    Ok(tokio::spawn(async move {
        // The watcher lives as long as this task.
        let _watcher = watcher;
        loop {
            let first = tokio::select! {
                event = rx.recv() => match event {
                    Some(event) => event,
                    None => return,
                },
                () = shutdown.stopped() => return,
            };
            if let Err(e) = first {
                tracing::warn!(error = %e, "watching the policy folder");
            }
            let deadline = tokio::time::Instant::now() + MAX_DELAY;
            loop {
                let settle = (tokio::time::Instant::now() + SETTLE).min(deadline);
                match tokio::time::timeout_at(settle, rx.recv()).await {
                    Ok(Some(_)) if tokio::time::Instant::now() < deadline => continue,
                    Ok(None) => return,
                    _ => break,
                }
            }
            let reloaded = match which {
                Watched::Live => monitor.reload_if_changed("monitor (policy folder changed)").await.map(drop),
                Watched::Shadow => monitor.reload_shadow("monitor (shadow folder changed)", false).await.map(drop),
            };
            if let Err(e) = reloaded {
                tracing::error!(error = %e, "policy reload could not be recorded");
            }
        }
    }))
}

/// Whether an event can change what the folder holds. Opens, reads and
/// closes after reading cannot; neither can an access time.
fn may_change_content(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        EventKind::Modify(ModifyKind::Metadata(MetadataKind::AccessTime)) => false,
        EventKind::Any | EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_) | EventKind::Other => true,
    }
}

#[cfg(test)]
mod tests {
    use notify::event::{CreateKind, DataChange, RemoveKind, RenameMode};

    use super::*;

    #[test]
    fn reads_do_not_count_as_changes_and_writes_renames_and_removals_do() {
        let quiet = [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Read),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Access(AccessKind::Any),
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::AccessTime)),
        ];
        for kind in quiet {
            assert!(!may_change_content(&kind), "{kind:?}");
        }
        let changes = [
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::Permissions)),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Remove(RemoveKind::File),
            EventKind::Any,
        ];
        for kind in changes {
            assert!(may_change_content(&kind), "{kind:?}");
        }
    }
}
