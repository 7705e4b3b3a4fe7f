//! `LeaseWatch`: which replicas are live, as the Raft leader sees their Lease objects.
//!
//! Every replica renews its own Lease once a period; each renewal changes the object's
//! `resourceVersion`. The leader never compares the `renewTime` another machine wrote with
//! its own clock: it notes, on its own monotonic clock, when it last saw each replica's
//! version change, and a replica whose version has not changed for a lease is dead.
//!
//! A leader starts with an empty table (it cannot know what the previous leader saw), so
//! for one lease after it began to lead it declares nobody dead: every replica that owns a
//! shard, or whose Lease it sees, counts as live until it has had one whole lease to renew.
//!
//! Faster than any Lease: a replica whose Raft listener refused the leader's last
//! connection (no process listens there: it crashed or is restarting) is dead at once,
//! grace or not (`phalanx_statestore::network::reachability`). Being wrong costs shard
//! moves, never safety (the deposed owner's writes carry a stale epoch).

use std::collections::{BTreeMap, BTreeSet};

use phalanx_statestore::ledger::ReplicaId;

use crate::shard::Heartbeats;

/// The leader's liveness table, fed with the Lease versions it lists each period.
#[derive(Clone, Debug)]
pub struct LeaseWatch {
    lease_ms: u64,
    /// When this replica began to lead (its own clock, ms).
    since_ms: u64,
    /// The last `resourceVersion` seen per replica.
    versions: BTreeMap<ReplicaId, String>,
    heard: Heartbeats,
    /// The replicas whose Raft listener refused the leader's last connection.
    refusing: BTreeSet<ReplicaId>,
}

impl LeaseWatch {
    /// A new leader's table at `now_ms`: nothing heard yet.
    pub fn new(lease_ms: u64, now_ms: u64) -> Self {
        Self {
            lease_ms,
            since_ms: now_ms,
            versions: BTreeMap::new(),
            heard: Heartbeats::new(lease_ms),
            refusing: BTreeSet::new(),
        }
    }

    /// Notes the replicas whose Raft listener refuses connections now.
    pub fn observe_refusing(&mut self, refusing: BTreeSet<ReplicaId>) {
        self.refusing = refusing;
    }

    /// The replicas noted as refusing connections.
    pub fn refusing(&self) -> &BTreeSet<ReplicaId> {
        &self.refusing
    }

    /// Notes the Lease versions listed at `now_ms`: a replica is heard from when its
    /// version is new to this table or differs from the last one seen.
    pub fn observe(&mut self, listed: &BTreeMap<ReplicaId, String>, now_ms: u64) {
        for (replica, version) in listed {
            if self.versions.get(replica) != Some(version) {
                self.versions.insert(*replica, version.clone());
                self.heard.record(*replica, now_ms);
            }
        }
    }

    /// Whether the first lease of this leadership is still running (nobody is declared
    /// dead before it ends).
    pub fn in_grace(&self, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.since_ms) < self.lease_ms
    }

    /// Every replica whose Lease was heard from within one lease of `now_ms`, members of
    /// the Raft group or not (a replica being added runs before it is a member).
    pub fn running(&self, now_ms: u64) -> BTreeSet<ReplicaId> {
        self.heard.live(now_ms)
    }

    /// The live replicas at `now_ms`, among `members` (only Raft members may own shards).
    /// During the grace lease the current `owners` count as live too; a replica that
    /// refuses connections never does.
    pub fn live(
        &self,
        now_ms: u64,
        owners: &BTreeSet<ReplicaId>,
        members: &BTreeSet<ReplicaId>,
    ) -> BTreeSet<ReplicaId> {
        let mut live = self.heard.live(now_ms);
        if self.in_grace(now_ms) {
            live.extend(owners.iter().copied());
        }
        live.retain(|r| members.contains(r) && !self.refusing.contains(r));
        live
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(pairs: &[(ReplicaId, &str)]) -> BTreeMap<ReplicaId, String> {
        pairs.iter().map(|(r, v)| (*r, v.to_string())).collect()
    }

    fn set(ids: &[ReplicaId]) -> BTreeSet<ReplicaId> {
        ids.iter().copied().collect()
    }

    #[test]
    fn a_new_leader_waits_one_lease_before_declaring_an_owner_dead() {
        let members = set(&[1, 2, 3]);
        let mut w = LeaseWatch::new(3000, 10_000);
        // Replica 2 owns shards but its Lease is never listed (it died with the old leader).
        w.observe(&listed(&[(1, "a"), (3, "b")]), 10_000);
        assert_eq!(w.live(12_999, &set(&[2]), &members), set(&[1, 2, 3]));
        assert_eq!(w.live(13_000, &set(&[2]), &members), set(&[]));
    }

    #[test]
    fn a_replica_whose_lease_version_stops_changing_is_dead_after_one_lease() {
        let members = set(&[1, 2]);
        let mut w = LeaseWatch::new(1000, 0);
        for t in (0..=5000).step_by(500) {
            // Replica 1 renews every period; replica 2 wrote once and stopped.
            w.observe(&listed(&[(1, &format!("v{t}")), (2, "x")]), t);
        }
        assert_eq!(w.live(5000, &set(&[1, 2]), &members), set(&[1]));
    }

    #[test]
    fn a_renewal_seen_again_unchanged_does_not_count_as_heard() {
        let mut w = LeaseWatch::new(1000, 0);
        w.observe(&listed(&[(1, "v1")]), 0);
        w.observe(&listed(&[(1, "v1")]), 900);
        assert_eq!(w.live(1000, &set(&[]), &set(&[1])), set(&[]));
        w.observe(&listed(&[(1, "v2")]), 1100);
        assert_eq!(w.live(1500, &set(&[]), &set(&[1])), set(&[1]));
    }

    #[test]
    fn a_replica_refusing_connections_is_dead_at_once_even_in_grace_until_it_answers() {
        let members = set(&[1, 2, 3]);
        let mut w = LeaseWatch::new(1000, 0);
        w.observe(&listed(&[(1, "a"), (2, "b"), (3, "c")]), 0);
        w.observe_refusing(set(&[2]));
        assert!(w.in_grace(100));
        assert_eq!(w.live(100, &set(&[2, 3]), &members), set(&[1, 3]));
        // Its Lease renewed meanwhile changes nothing while it refuses.
        w.observe(&listed(&[(1, "a"), (2, "b2"), (3, "c")]), 200);
        assert_eq!(w.live(300, &set(&[2]), &members), set(&[1, 3]));
        // Restarted, it answers again and counts as live on its Lease.
        w.observe_refusing(set(&[]));
        assert_eq!(w.live(400, &set(&[2]), &members), set(&[1, 2, 3]));
    }

    #[test]
    fn only_raft_members_count_as_live() {
        let mut w = LeaseWatch::new(1000, 0);
        w.observe(&listed(&[(1, "a"), (9, "stale")]), 0);
        assert_eq!(w.live(10, &set(&[7]), &set(&[1, 2])), set(&[1]));
    }
}
