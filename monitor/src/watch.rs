//! Watches the policy folder and reloads after a burst of writes settles
//! (an editor's save, a `git checkout`), so a change serves within a second.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::service::Monitor;

/// Quiet time after the last change before reloading.
const SETTLE: Duration = Duration::from_millis(100);
/// Reload at the latest this long after the first change of a burst.
const MAX_DELAY: Duration = Duration::from_millis(500);

/// Starts watching `dir`; the task ends when the monitor shuts down.
pub(crate) fn watch_policies(monitor: Arc<Monitor>, dir: PathBuf) -> notify::Result<JoinHandle<()>> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Errors also mean "look again".
        let _ = tx.send(event.map(|_| ()).map_err(|e| e.to_string()));
    })?;
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
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
            if let Err(e) = monitor.reload("monitor (policy folder changed)").await {
                tracing::error!(error = %e, "policy reload could not be recorded");
            }
        }
    }))
}
