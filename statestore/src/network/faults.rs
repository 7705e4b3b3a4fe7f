//! Seeded fault injection on a replica's outgoing Raft RPCs: a **test seam**, inert by
//! default (like `ReplicaHandle::set_isolated`).
//!
//! While faults are set, every outgoing `AppendEntries` / `Vote` / `InstallSnapshot` of
//! the replica first waits a delay drawn uniformly from `delay_ms` (inside the RPC's
//! deadline: a delay past it is a timeout, as on a slow link). Then each of its two
//! messages is lost with probability `drop_per_mille / 1000`, independently: the request
//! (never sent), or else the reply (the peer handled the request and its state moved, the
//! sender does not know). So an exchange fails with probability `1 - (1 - p)^2`, and at
//! 1000 per mille no request of this replica arrives (its peers' requests to it, and its
//! replies to them, still do: a one-way partition). A loss is reported as a `Network`
//! error, as a lost message would be once its sender gives up (at once, without waiting
//! out the deadline).
//!
//! Determinism: each link `from -> to` draws from its own SplitMix64 stream seeded with
//! `mix(replica_seed ^ to)`, where `replica_seed` is given to [`FaultInjector::set`]
//! (`LocalCluster` derives it as `mix(cluster_seed ^ from)`). The draws on one link are a
//! fixed sequence for a given seed; which RPC gets which draw still depends on the
//! timing of openraft's tasks, so a run is reproducible in its fault rates, not to the
//! message.
//!
//! Cost when unset: one relaxed atomic load per RPC.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::raft_types::NodeId;

/// Longest injected delay, so a test cannot stall a replica for long.
pub const MAX_FAULT_DELAY_MS: u64 = 5_000;

/// Faults applied to every outgoing Raft RPC of one replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NetworkFaults {
    /// Messages (requests, and replies to those that arrive) lost per thousand, 0..=1000.
    pub drop_per_mille: u16,
    /// Delay before sending, uniform in `lo..=hi` milliseconds, `hi <= MAX_FAULT_DELAY_MS`.
    pub delay_ms: (u64, u64),
}

impl NetworkFaults {
    /// Checks the bounds.
    pub fn validate(&self) -> Result<(), String> {
        if self.drop_per_mille > 1000 {
            return Err(format!(
                "drop_per_mille = {}, must be <= 1000",
                self.drop_per_mille
            ));
        }
        let (lo, hi) = self.delay_ms;
        if lo > hi || hi > MAX_FAULT_DELAY_MS {
            return Err(format!(
                "delay_ms = ({lo}, {hi}), must be lo <= hi <= {MAX_FAULT_DELAY_MS}"
            ));
        }
        Ok(())
    }

    /// True when these faults change nothing.
    pub fn is_inert(&self) -> bool {
        self.drop_per_mille == 0 && self.delay_ms == (0, 0)
    }
}

/// What to do with one RPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FaultPlan {
    /// Wait this long before sending.
    pub delay: Duration,
    /// Lose the request (never sent).
    pub drop_request: bool,
    /// Lose the reply (the request was handled).
    pub drop_reply: bool,
}

/// SplitMix64 finalizer (also the seed mixer).
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// SplitMix64: a tiny deterministic PRNG (not for anything but tests).
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0; the modulo bias is irrelevant at these sizes).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug)]
struct Armed {
    faults: NetworkFaults,
    seed: u64,
    links: BTreeMap<NodeId, SplitMix64>,
}

/// Counts of what the injector did since the replica started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FaultStats {
    /// RPCs that went through the injector while faults were set.
    pub rpcs: u64,
    /// Requests lost before sending.
    pub dropped_requests: u64,
    /// Replies lost after the peer handled the request.
    pub dropped_replies: u64,
}

/// One replica's fault settings, shared by all its peer clients.
#[derive(Debug, Clone, Default)]
pub struct FaultInjector {
    armed: Arc<AtomicBool>,
    state: Arc<Mutex<Option<Armed>>>,
    stats: Arc<Mutex<FaultStats>>,
}

impl FaultInjector {
    /// An inert injector.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets faults with the random streams seeded from `seed` (restarts the streams), or
    /// clears them when `faults` is inert.
    pub fn set(&self, faults: NetworkFaults, seed: u64) -> Result<(), String> {
        faults.validate()?;
        let mut s = self.lock();
        if faults.is_inert() {
            *s = None;
            self.armed.store(false, Ordering::Release);
        } else {
            *s = Some(Armed {
                faults,
                seed,
                links: BTreeMap::new(),
            });
            self.armed.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Removes every fault.
    pub fn clear(&self) {
        *self.lock() = None;
        self.armed.store(false, Ordering::Release);
    }

    /// The faults in force, if any.
    pub fn current(&self) -> Option<NetworkFaults> {
        self.lock().as_ref().map(|a| a.faults)
    }

    /// What the injector did so far.
    pub fn stats(&self) -> FaultStats {
        *self
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Armed>> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Draws the plan for the next RPC to `target` (`None` when no fault is set).
    pub fn plan(&self, target: NodeId) -> Option<FaultPlan> {
        if !self.armed.load(Ordering::Relaxed) {
            return None;
        }
        let mut s = self.lock();
        let armed = s.as_mut()?;
        let faults = armed.faults;
        let seed = armed.seed;
        let rng = armed
            .links
            .entry(target)
            .or_insert_with(|| SplitMix64(mix(seed ^ target)));
        let (lo, hi) = faults.delay_ms;
        let delay = Duration::from_millis(lo + rng.below(hi - lo + 1));
        let p = u64::from(faults.drop_per_mille);
        // Request and reply are two messages, each lost independently.
        let drop_request = rng.below(1000) < p;
        let drop_reply = !drop_request && rng.below(1000) < p;
        drop(s);
        let mut stats = self
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        stats.rpcs += 1;
        stats.dropped_requests += u64::from(drop_request);
        stats.dropped_replies += u64::from(drop_reply);
        Some(FaultPlan {
            delay,
            drop_request,
            drop_reply,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inert_injector_plans_nothing_and_bounds_are_enforced() {
        let f = FaultInjector::new();
        assert_eq!(f.plan(2), None);
        assert!(
            f.set(
                NetworkFaults {
                    drop_per_mille: 1001,
                    delay_ms: (0, 0)
                },
                1
            )
            .is_err()
        );
        assert!(
            f.set(
                NetworkFaults {
                    drop_per_mille: 0,
                    delay_ms: (0, MAX_FAULT_DELAY_MS + 1)
                },
                1
            )
            .is_err()
        );
        assert!(
            f.set(
                NetworkFaults {
                    drop_per_mille: 0,
                    delay_ms: (10, 5)
                },
                1
            )
            .is_err()
        );
        f.set(NetworkFaults::default(), 1).unwrap();
        assert_eq!(f.plan(2), None);
    }

    #[test]
    fn the_same_seed_gives_the_same_draws_per_link_within_bounds() {
        let faults = NetworkFaults {
            drop_per_mille: 250,
            delay_ms: (5, 50),
        };
        let draws = |seed| {
            let f = FaultInjector::new();
            f.set(faults, seed).unwrap();
            (0..2000).map(|_| f.plan(3).unwrap()).collect::<Vec<_>>()
        };
        let a = draws(7);
        assert_eq!(a, draws(7));
        assert_ne!(a, draws(8));
        assert!(
            a.iter()
                .all(|p| (5..=50).contains(&(p.delay.as_millis() as u64)))
        );
        // Requests: 25%; replies: 25% of the 75% delivered.
        let requests = a.iter().filter(|p| p.drop_request).count();
        let replies = a.iter().filter(|p| p.drop_reply).count();
        assert!(
            (400..600).contains(&requests),
            "{requests} of 2000 requests lost"
        );
        assert!(
            (275..475).contains(&replies),
            "{replies} of 2000 replies lost"
        );
        assert!(a.iter().all(|p| !(p.drop_request && p.drop_reply)));
        // At 1000 per mille no request is sent.
        let f = FaultInjector::new();
        f.set(
            NetworkFaults {
                drop_per_mille: 1000,
                delay_ms: (0, 0),
            },
            1,
        )
        .unwrap();
        assert!((0..100).all(|_| f.plan(2).is_some_and(|p| p.drop_request && !p.drop_reply)));
        f.clear();
        assert_eq!(f.plan(2), None);
    }
}
