//! A token bucket in front of the API server writes: `qps` tokens a second, at most `burst`
//! saved up. Every request the backend sends (binds, status writes, events, evictions,
//! re-reads) takes one token; watches do not.

use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    /// (tokens, when they were counted). Never held across an `.await`.
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    /// `qps <= 0` means no limit.
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Takes one token, returning how long to wait before using it (zero when one was
    /// available). Tokens may go negative: waiters queue behind each other fairly.
    pub fn reserve(&self) -> Duration {
        self.reserve_at(Instant::now())
    }

    /// [`TokenBucket::reserve`] as of `now` (the seam the tests use).
    fn reserve_at(&self, now: Instant) -> Duration {
        if self.qps <= 0.0 {
            return Duration::ZERO;
        }
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (tokens, last) = *state;
        let now = now.max(last);
        let refilled = (tokens + now.duration_since(last).as_secs_f64() * self.qps).min(self.burst);
        let left = refilled - 1.0;
        *state = (left, now);
        if left >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-left / self.qps)
        }
    }

    /// Waits for a token.
    pub async fn acquire(&self) {
        let wait = self.reserve();
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_free_and_the_next_request_waits_one_period() {
        let bucket = TokenBucket::new(10.0, 3);
        for _ in 0..3 {
            assert_eq!(bucket.reserve(), Duration::ZERO);
        }
        let wait = bucket.reserve();
        assert!(
            wait > Duration::from_millis(80) && wait <= Duration::from_millis(100),
            "{wait:?}"
        );
    }

    #[test]
    fn no_limit_never_waits() {
        let bucket = TokenBucket::new(0.0, 1);
        for _ in 0..100 {
            assert_eq!(bucket.reserve(), Duration::ZERO);
        }
    }
}
