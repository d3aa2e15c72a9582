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
pub struct Limited {
    /// When a request would be accepted again.
    pub retry_after: Duration,
    /// Whether this is the first refusal of a burst (to be audited once).
    pub first: bool,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
    limited: bool,
}

/// Buckets by key (`harness:NAME`, `session:ID`).
#[derive(Debug, Default)]
pub struct Limiter {
    buckets: Mutex<HashMap<String, Bucket>>,
}

/// Buckets kept before idle full ones are dropped.
const KEEP: usize = 100_000;

impl Limiter {
    /// Takes one token from `key`'s bucket, or says how long to wait.
    pub fn take(&self, key: &str, rate: Rate, now: Instant) -> Result<(), Limited> {
        let mut buckets = self.buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() > KEEP {
            buckets.retain(|_, b| b.tokens < f64::from(rate.burst) || b.limited);
        }
        let burst = f64::from(rate.burst.max(1));
        let bucket = buckets.entry(key.to_owned()).or_insert(Bucket { tokens: burst, last: now, limited: false });
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
}
