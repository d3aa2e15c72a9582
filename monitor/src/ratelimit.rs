//! Token buckets for rate limits per harness credential and per session.
//! Pure apart from the `Mutex`: the caller passes the time in.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A rate: `per_second` on average, up to `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Rate {
    /// Requests per second, on average.
    pub per_second: f64,
    /// Requests allowed at once.
    pub burst: u32,
}

impl Rate {
    /// A rate from configuration: `per_second` must be a positive number;
    /// the burst defaults to one second's worth.
    pub fn from_config(per_second: f64, burst: Option<u32>) -> Option<Self> {
        (per_second.is_finite() && per_second > 0.0)
            .then(|| Self { per_second, burst: burst.unwrap_or_else(|| per_second.ceil().clamp(1.0, 1e6) as u32) })
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Limited {
    /// When a request would be accepted again.
    pub(crate) retry_after: Duration,
    /// Whether this is the first refusal of a burst (to be audited once).
    pub(crate) first: bool,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
    limited: bool,
    /// The rate it was last taken at (rates differ by credential).
    rate: Rate,
}

/// Buckets by key (`harness:NAME`, `session:ID`).
#[derive(Debug, Default)]
pub(crate) struct Limiter {
    buckets: Mutex<Buckets>,
}

#[derive(Debug, Default)]
struct Buckets {
    by_key: HashMap<String, Bucket>,
    /// The count at which buckets that have refilled are next dropped.
    sweep_at: usize,
}

/// Buckets kept before those that have refilled are dropped.
const KEEP: usize = 100_000;
/// Most buckets at once: with this many still draining, a new key is
/// refused (memory stays bounded, whatever the keys a caller invents).
pub(crate) const MAX_BUCKETS: usize = 1_000_000;

impl Limiter {
    /// Takes one token from `key`'s bucket, or says how long to wait.
    pub(crate) fn take(&self, key: &str, rate: Rate, now: Instant) -> Result<(), Limited> {
        let mut buckets = self.buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Buckets { by_key, sweep_at } = &mut *buckets;
        if by_key.len() > (*sweep_at).max(KEEP) {
            // A bucket that has refilled to its burst is the same as none.
            by_key.retain(|_, b| {
                let refilled = b.tokens + now.saturating_duration_since(b.last).as_secs_f64() * b.rate.per_second;
                refilled < f64::from(b.rate.burst.max(1))
            });
            // When most are still draining, the next sweep waits until the
            // map has doubled: a sweep per request would cost O(keys) each.
            *sweep_at = by_key.len().saturating_mul(2);
        }
        let burst = f64::from(rate.burst.max(1));
        if by_key.len() >= MAX_BUCKETS && !by_key.contains_key(key) {
            return Err(Limited { retry_after: Duration::from_secs(1), first: false });
        }
        let bucket = by_key.entry(key.to_owned()).or_insert(Bucket { tokens: burst, last: now, limited: false, rate });
        bucket.rate = rate;
        let elapsed = now.saturating_duration_since(bucket.last).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate.per_second).min(burst);
        bucket.last = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            bucket.limited = false;
            return Ok(());
        }
        let first = !bucket.limited;
        bucket.limited = true;
        let wait = if rate.per_second > 0.0 { (1.0 - bucket.tokens) / rate.per_second } else { 3600.0 };
        Err(Limited { retry_after: Duration::from_secs_f64(wait.clamp(0.001, 3600.0)), first })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_the_rate_holds_and_only_the_first_refusal_is_new() {
        let limiter = Limiter::default();
        let rate = Rate { per_second: 10.0, burst: 3 };
        let start = Instant::now();
        for _ in 0..3 {
            assert!(limiter.take("k", rate, start).is_ok());
        }
        let first = limiter.take("k", rate, start).unwrap_err();
        assert!(first.first && first.retry_after <= Duration::from_millis(100));
        assert!(!limiter.take("k", rate, start).unwrap_err().first);
        // 100 ms later one more token.
        assert!(limiter.take("k", rate, start + Duration::from_millis(101)).is_ok());
        // Other keys have their own bucket.
        assert!(limiter.take("other", rate, start).is_ok());
    }

    #[test]
    fn refilled_buckets_are_dropped_and_draining_ones_kept_without_a_sweep_per_call() {
        let limiter = Limiter::default();
        let rate = Rate { per_second: 1.0, burst: 2 };
        let start = Instant::now();
        for n in 0..=KEEP {
            limiter.take(&format!("k{n}"), rate, start).unwrap();
            limiter.take(&format!("k{n}"), rate, start).unwrap();
        }
        // Nothing has refilled yet: all are kept, and the next sweep waits.
        limiter.take("hot", rate, start).unwrap();
        {
            let buckets = limiter.buckets.lock().unwrap();
            assert_eq!(buckets.by_key.len(), KEEP + 2);
            assert_eq!(buckets.sweep_at, 2 * (KEEP + 1));
        }
        limiter.take("hot", rate, start).unwrap();
        assert!(limiter.take("hot", rate, start).is_err());
        // Ten seconds on, those have refilled: once the map has doubled, the
        // sweep drops them and keeps the new ones, still draining.
        let later = start + Duration::from_secs(10);
        for n in 0..KEEP + 2 {
            limiter.take(&format!("new{n}"), rate, later).unwrap();
        }
        let buckets = limiter.buckets.lock().unwrap();
        assert_eq!(buckets.by_key.len(), KEEP + 2);
        assert!(!buckets.by_key.contains_key("k0") && !buckets.by_key.contains_key("hot"));
    }
}
