//! `LoopProgress`: when a replica's scheduling loop last showed it was moving.
//!
//! The Lease keeper (`serve/lease.rs`) renews the replica's Lease on its own timer, so a
//! cycle longer than the lease (a 5,000-pod gang bound at 50 writes/s takes 100 s) does
//! not cost the replica its shards. That timer must not keep a wedged loop's shards
//! forever, so the loop marks progress here (each period, each phase, each bind) and the
//! keeper stops renewing when the marks stop.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The last progress mark, as milliseconds since the tracker was made (monotonic clock).
#[derive(Debug)]
pub struct LoopProgress {
    origin: Instant,
    last_ms: AtomicU64,
}

impl Default for LoopProgress {
    fn default() -> Self {
        Self::new()
    }
}

impl LoopProgress {
    /// A tracker marked now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The loop is moving now.
    pub fn mark(&self) {
        self.last_ms.fetch_max(self.now_ms(), Ordering::Relaxed);
    }

    /// How long ago the last mark was.
    pub fn age(&self) -> Duration {
        let last = self.last_ms.load(Ordering::Relaxed);
        Duration::from_millis(self.now_ms().saturating_sub(last))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_resets_the_age_and_an_old_mark_never_overwrites_a_newer_one() {
        let p = LoopProgress::new();
        p.last_ms.store(0, Ordering::Relaxed);
        // A mark racing with a later one keeps the later (fetch_max).
        p.last_ms.fetch_max(5, Ordering::Relaxed);
        p.last_ms.fetch_max(3, Ordering::Relaxed);
        assert_eq!(p.last_ms.load(Ordering::Relaxed), 5);
        p.mark();
        assert!(p.age() < Duration::from_secs(5), "{:?}", p.age());
    }
}
