//! [`eventually`]: the one way Warden's tests wait for an event.

use std::time::Duration;

/// How long [`eventually`] waits: generous, because tests wait for an event
/// (a reload, the sweeper, an approval listed, a notification shown), not
/// for speed.
pub const EVENTUALLY: Duration = Duration::from_secs(30);

/// Asks `probe` every 20 ms until it gives `Some`, and returns that; panics
/// naming `what` after [`EVENTUALLY`].
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what} did not happen within {EVENTUALLY:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
