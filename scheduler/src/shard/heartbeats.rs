//! `Heartbeats`: when each replica was last heard from, and so which are live. Time is
//! passed in (simulated or real milliseconds), never read here.

use std::collections::{BTreeMap, BTreeSet};

use phalanx_statestore::ledger::ReplicaId;

/// Most replicas tracked at once; heartbeats from further unknown replicas are ignored.
pub const MAX_TRACKED_REPLICAS: usize = 1024;

/// Last-seen time per replica; a replica is live while `now_ms - last_seen < dead_after_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heartbeats {
    dead_after_ms: u64,
    last_seen_ms: BTreeMap<ReplicaId, u64>,
}

impl Heartbeats {
    /// A tracker that declares a replica dead after `dead_after_ms` of silence.
    pub fn new(dead_after_ms: u64) -> Self {
        Self {
            dead_after_ms,
            last_seen_ms: BTreeMap::new(),
        }
    }

    /// Records a heartbeat at `now_ms`. A late (reordered) heartbeat never moves the
    /// last-seen time back. Returns false if it was ignored (tracker full).
    pub fn record(&mut self, replica: ReplicaId, now_ms: u64) -> bool {
        if !self.last_seen_ms.contains_key(&replica)
            && self.last_seen_ms.len() >= MAX_TRACKED_REPLICAS
        {
            return false;
        }
        let seen = self.last_seen_ms.entry(replica).or_insert(now_ms);
        *seen = (*seen).max(now_ms);
        true
    }

    /// Stops tracking a replica (it left the cluster).
    pub fn forget(&mut self, replica: ReplicaId) {
        self.last_seen_ms.remove(&replica);
    }

    /// True if `replica` was heard from less than `dead_after_ms` before `now_ms`.
    pub fn is_live(&self, replica: ReplicaId, now_ms: u64) -> bool {
        self.last_seen_ms
            .get(&replica)
            .is_some_and(|seen| now_ms.saturating_sub(*seen) < self.dead_after_ms)
    }

    /// The live replicas at `now_ms`.
    pub fn live(&self, now_ms: u64) -> BTreeSet<ReplicaId> {
        self.last_seen_ms
            .keys()
            .copied()
            .filter(|r| self.is_live(*r, now_ms))
            .collect()
    }

    /// When `replica` was last heard from.
    pub fn last_seen_ms(&self, replica: ReplicaId) -> Option<u64> {
        self.last_seen_ms.get(&replica).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_is_live_until_dead_after_ms_of_silence() {
        let mut h = Heartbeats::new(1000);
        h.record(1, 0);
        h.record(2, 500);
        assert_eq!(h.live(999), [1, 2].into_iter().collect());
        assert_eq!(h.live(1000), [2].into_iter().collect());
        assert!(h.live(1500).is_empty());
        h.record(1, 1600);
        assert_eq!(h.live(1700), [1].into_iter().collect());
    }

    #[test]
    fn a_late_heartbeat_does_not_move_last_seen_back() {
        let mut h = Heartbeats::new(100);
        h.record(1, 500);
        h.record(1, 300);
        assert_eq!(h.last_seen_ms(1), Some(500));
    }

    #[test]
    fn an_unknown_or_forgotten_replica_is_not_live() {
        let mut h = Heartbeats::new(100);
        assert!(!h.is_live(9, 0));
        h.record(9, 0);
        h.forget(9);
        assert!(!h.is_live(9, 1));
    }

    #[test]
    fn the_tracker_is_bounded() {
        let mut h = Heartbeats::new(100);
        for r in 0..MAX_TRACKED_REPLICAS as u64 {
            assert!(h.record(r, 0));
        }
        assert!(!h.record(u64::MAX, 0));
        assert!(h.record(0, 5), "a known replica is still recorded");
    }
}
