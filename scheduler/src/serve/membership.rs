//! The Raft leader brings the ledger group's voters to the replicas `--peers` names: scale
//! the StatefulSet (or the processes) and the group follows, one step per period.
//!
//! `--peers` says who should be a member; a replica's Lease says who is running. The
//! leader only adds a replica that runs (its Lease is heard), first as a learner and, once
//! it has caught up, as a voter; it only removes a voter that `--peers` no longer names
//! *and* that no longer runs (its Lease went stale). During a rolling upgrade, replicas
//! with the old and the new `--peers` lead in turn: the Lease rule keeps a leader with the
//! old list from removing a new replica that runs, and one with the new list from removing
//! an old one before it has stopped. openraft changes voters by joint consensus, so each
//! step is safe whatever the order.

use std::collections::{BTreeMap, BTreeSet};

use phalanx_statestore::ledger::ReplicaId;

/// A learner whose matched log index is at most this far behind the leader's last one is
/// caught up: promoting it costs no more than this many entries of catch-up as a voter.
pub const CAUGHT_UP_ENTRIES: u64 = 64;

/// What the leader knows this period, from its Raft metrics and the Leases.
#[derive(Debug, Clone, Default)]
pub struct MembershipView {
    /// The leader itself (never removed by itself: the next leader does it).
    pub leader: ReplicaId,
    /// `--peers`: id -> Raft address.
    pub desired: BTreeMap<ReplicaId, String>,
    /// The voters of the membership the leader applied.
    pub voters: BTreeSet<ReplicaId>,
    /// The learners of that membership.
    pub learners: BTreeSet<ReplicaId>,
    /// Replicas whose Lease was heard within one lease.
    pub running: BTreeSet<ReplicaId>,
    /// Matched log index per replicated replica (voters and learners).
    pub matched: BTreeMap<ReplicaId, u64>,
    /// The leader's last log index.
    pub last_log_index: u64,
    /// Whether a membership change is still in flight (the applied membership is joint,
    /// or the last one is not yet committed): no new step until it settles.
    pub changing: bool,
}

/// One step toward the desired voters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MembershipStep {
    /// Add a running, desired replica as a learner (it catches up from the log or a
    /// snapshot).
    AddLearner { id: ReplicaId, addr: String },
    /// Replace the voters (joint consensus): learners that caught up join, and voters that
    /// are neither desired nor running leave.
    SetVoters(BTreeSet<ReplicaId>),
    /// Drop learners that are neither desired nor running (a replica added while it ran,
    /// then scaled away before it caught up).
    RemoveLearners(BTreeSet<ReplicaId>),
}

/// The next step, or `None` when the voters are as desired (or nothing can be done yet).
pub fn next_step(v: &MembershipView) -> Option<MembershipStep> {
    if v.changing || v.desired.is_empty() {
        return None;
    }
    let joining: Vec<ReplicaId> = v
        .desired
        .keys()
        .filter(|id| !v.voters.contains(id) && v.running.contains(id))
        .copied()
        .collect();
    if let Some(id) = joining.iter().find(|id| !v.learners.contains(id)) {
        return Some(MembershipStep::AddLearner {
            id: *id,
            addr: v.desired[id].clone(),
        });
    }
    let caught_up = |id: &ReplicaId| {
        v.matched
            .get(id)
            .is_some_and(|m| v.last_log_index.saturating_sub(*m) <= CAUGHT_UP_ENTRIES)
    };
    let promoted: BTreeSet<ReplicaId> = joining.into_iter().filter(caught_up).collect();
    let leaving: BTreeSet<ReplicaId> = v
        .voters
        .iter()
        .filter(|id| **id != v.leader && !v.desired.contains_key(id) && !v.running.contains(id))
        .copied()
        .collect();
    if promoted.is_empty() && leaving.is_empty() {
        let gone: BTreeSet<ReplicaId> = v
            .learners
            .iter()
            .filter(|id| !v.desired.contains_key(id) && !v.running.contains(id))
            .copied()
            .collect();
        return (!gone.is_empty()).then_some(MembershipStep::RemoveLearners(gone));
    }
    let voters: BTreeSet<ReplicaId> = v
        .voters
        .iter()
        .filter(|id| !leaving.contains(id))
        .chain(&promoted)
        .copied()
        .collect();
    Some(MembershipStep::SetVoters(voters))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[ReplicaId]) -> BTreeSet<ReplicaId> {
        v.iter().copied().collect()
    }

    fn peers(v: &[ReplicaId]) -> BTreeMap<ReplicaId, String> {
        v.iter().map(|id| (*id, format!("r{id}:7001"))).collect()
    }

    fn three_voters() -> MembershipView {
        MembershipView {
            leader: 1,
            desired: peers(&[1, 2, 3]),
            voters: ids(&[1, 2, 3]),
            running: ids(&[1, 2, 3]),
            matched: [(2, 100), (3, 100)].into_iter().collect(),
            last_log_index: 100,
            ..MembershipView::default()
        }
    }

    #[test]
    fn voters_as_desired_need_no_step() {
        assert_eq!(next_step(&three_voters()), None);
    }

    #[test]
    fn scaling_up_adds_each_running_replica_as_a_learner_then_promotes_those_caught_up() {
        let mut v = three_voters();
        v.desired = peers(&[1, 2, 3, 4, 5]);
        // Replica 5 is not running yet: only 4 is added.
        v.running = ids(&[1, 2, 3, 4]);
        assert_eq!(
            next_step(&v),
            Some(MembershipStep::AddLearner {
                id: 4,
                addr: "r4:7001".into()
            })
        );
        v.learners = ids(&[4]);
        v.matched.insert(4, 10);
        assert_eq!(next_step(&v), None, "4 is 90 entries behind");
        v.matched.insert(4, 100 - CAUGHT_UP_ENTRIES);
        assert_eq!(
            next_step(&v),
            Some(MembershipStep::SetVoters(ids(&[1, 2, 3, 4])))
        );
        v.running.insert(5);
        assert!(matches!(
            next_step(&v),
            Some(MembershipStep::AddLearner { id: 5, .. })
        ));
    }

    #[test]
    fn scaling_down_removes_a_voter_only_once_it_stopped_running() {
        let mut v = three_voters();
        v.voters = ids(&[1, 2, 3, 4, 5]);
        v.running = ids(&[1, 2, 3, 4, 5]);
        v.desired = peers(&[1, 2, 3]);
        assert_eq!(next_step(&v), None, "4 and 5 still run");
        v.running = ids(&[1, 2, 3, 5]);
        assert_eq!(
            next_step(&v),
            Some(MembershipStep::SetVoters(ids(&[1, 2, 3, 5])))
        );
    }

    #[test]
    fn a_learner_scaled_away_before_it_caught_up_is_dropped_once_it_stopped() {
        let mut v = three_voters();
        v.learners = ids(&[4]);
        v.running = ids(&[1, 2, 3, 4]);
        assert_eq!(next_step(&v), None, "4 still runs");
        v.running.remove(&4);
        assert_eq!(
            next_step(&v),
            Some(MembershipStep::RemoveLearners(ids(&[4])))
        );
    }

    #[test]
    fn a_leader_with_the_old_peers_never_removes_a_new_replica_that_runs() {
        // Rolling upgrade 3 -> 5: replica 1 still has the old --peers, 4 and 5 run.
        let mut v = three_voters();
        v.voters = ids(&[1, 2, 3, 4, 5]);
        v.running = ids(&[1, 2, 3, 4, 5]);
        assert_eq!(next_step(&v), None);
    }

    #[test]
    fn the_leader_never_removes_itself_and_no_step_while_a_change_is_in_flight() {
        let mut v = three_voters();
        v.desired = peers(&[2, 3]);
        v.running = ids(&[2, 3]);
        assert_eq!(next_step(&v), None, "the leader 1 is left to its successor");
        let mut v = three_voters();
        v.desired = peers(&[1, 2, 3, 4]);
        v.running.insert(4);
        v.changing = true;
        assert_eq!(next_step(&v), None);
    }
}
