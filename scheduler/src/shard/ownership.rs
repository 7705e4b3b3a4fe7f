//! `assign`: the pure shard-to-replica assignment the Raft leader runs when replicas join,
//! leave or die.
//!
//! Properties (tested, incl. a proptest): every shard ends owned by a live replica; owners
//! differ by at most one shard; a shard moves only if its owner is dead (or it had none) or
//! its owner holds more than its balanced share; the fewest moves any balanced result
//! needs; every move bumps the epoch by one; deterministic (ties by id); running `assign`
//! on its own result yields no moves.
//!
//! How: with `n` shards and `r` live replicas each replica's target is `n / r`, and the
//! `n % r` replicas holding the most (ties: lower id) get one more. A replica keeps its
//! lowest-numbered shards up to its target; orphaned and surplus shards, in id order, go to
//! the replicas under target, in id order.

use std::collections::{BTreeMap, BTreeSet};

use phalanx_statestore::LedgerCommand;
use phalanx_statestore::ledger::{Epoch, ReplicaId, ShardId};

/// One reassignment, to be proposed as `AssignShard { shard, owner: to, epoch: new_epoch }`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    /// The shard.
    pub shard: ShardId,
    /// Its previous owner (`None` if it had none).
    pub from: Option<ReplicaId>,
    /// Its new owner, a live replica.
    pub to: ReplicaId,
    /// The previous epoch + 1 (1 for a shard never assigned).
    pub new_epoch: Epoch,
}

impl Move {
    /// The ledger command that performs this move.
    pub fn to_command(&self) -> LedgerCommand {
        LedgerCommand::AssignShard {
            shard: self.shard,
            owner: self.to,
            epoch: self.new_epoch,
            proposer: None,
        }
    }
}

/// Reassigns the shards in `current` (shard -> (owner, epoch)) over the `live` replicas.
/// No live replica: no moves.
pub fn assign(
    current: &BTreeMap<ShardId, (ReplicaId, Epoch)>,
    live: &BTreeSet<ReplicaId>,
) -> Vec<Move> {
    let shards: BTreeSet<ShardId> = current.keys().copied().collect();
    assign_shards(&shards, current, live)
}

/// Like [`assign`] for an explicit set of shards, some of which may never have been
/// assigned (absent from `current`: owner `None`, epoch 0). Shards in `current` but not in
/// `shards` are left alone.
pub fn assign_shards(
    shards: &BTreeSet<ShardId>,
    current: &BTreeMap<ShardId, (ReplicaId, Epoch)>,
    live: &BTreeSet<ReplicaId>,
) -> Vec<Move> {
    if live.is_empty() || shards.is_empty() {
        return Vec::new();
    }
    let mut held: BTreeMap<ReplicaId, Vec<ShardId>> = live.iter().map(|r| (*r, vec![])).collect();
    let mut free: Vec<ShardId> = Vec::new();
    for shard in shards {
        match current.get(shard).and_then(|(o, _)| held.get_mut(o)) {
            Some(list) => list.push(*shard),
            None => free.push(*shard),
        }
    }
    let targets = targets(shards.len(), &held);
    for (replica, list) in &mut held {
        let target = targets[replica];
        if list.len() > target {
            free.extend(list.drain(target..));
        }
    }
    free.sort_unstable();
    let mut moves = Vec::with_capacity(free.len());
    let mut free = free.into_iter();
    for (replica, list) in &held {
        for _ in list.len()..targets[replica] {
            let shard = free
                .next()
                .expect("the targets sum to the shard count, so every deficit has a shard");
            let (from, epoch) = match current.get(&shard) {
                Some((o, e)) => (Some(*o), *e),
                None => (None, 0),
            };
            moves.push(Move {
                shard,
                from,
                to: *replica,
                new_epoch: epoch.saturating_add(1),
            });
        }
    }
    moves.sort_unstable_by_key(|m| m.shard);
    moves
}

/// Each live replica's balanced share: `n / r`, plus one for the `n % r` replicas that
/// hold the most now (ties: lower id), which keeps the moves fewest.
fn targets(n: usize, held: &BTreeMap<ReplicaId, Vec<ShardId>>) -> BTreeMap<ReplicaId, usize> {
    let r = held.len();
    let (base, extra) = (n / r, n % r);
    let mut order: Vec<(ReplicaId, usize)> = held.iter().map(|(k, v)| (*k, v.len())).collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    order
        .iter()
        .enumerate()
        .map(|(i, (replica, _))| (*replica, base + usize::from(i < extra)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn apply_moves(
        current: &BTreeMap<ShardId, (ReplicaId, Epoch)>,
        moves: &[Move],
    ) -> BTreeMap<ShardId, (ReplicaId, Epoch)> {
        let mut next = current.clone();
        for m in moves {
            next.insert(m.shard, (m.to, m.new_epoch));
        }
        next
    }

    fn counts(
        state: &BTreeMap<ShardId, (ReplicaId, Epoch)>,
        live: &BTreeSet<ReplicaId>,
    ) -> BTreeMap<ReplicaId, usize> {
        let mut c: BTreeMap<ReplicaId, usize> = live.iter().map(|r| (*r, 0)).collect();
        for (owner, _) in state.values() {
            *c.entry(*owner).or_default() += 1;
        }
        c
    }

    fn set(ids: &[ReplicaId]) -> BTreeSet<ReplicaId> {
        ids.iter().copied().collect()
    }

    #[test]
    fn the_first_assignment_spreads_unowned_shards_round_the_replicas_in_id_order() {
        let shards: BTreeSet<ShardId> = (0..5).collect();
        let moves = assign_shards(&shards, &BTreeMap::new(), &set(&[3, 1, 2]));
        let got: Vec<(ShardId, ReplicaId, Epoch)> =
            moves.iter().map(|m| (m.shard, m.to, m.new_epoch)).collect();
        assert_eq!(
            got,
            vec![(0, 1, 1), (1, 1, 1), (2, 2, 1), (3, 2, 1), (4, 3, 1)]
        );
        assert!(moves.iter().all(|m| m.from.is_none()));
    }

    #[test]
    fn a_dead_replicas_shards_go_to_the_live_ones_with_a_higher_epoch() {
        let current: BTreeMap<_, _> = [(0, (1, 4)), (1, (2, 7)), (2, (3, 2)), (3, (3, 9))]
            .into_iter()
            .collect();
        let moves = assign(&current, &set(&[1, 2]));
        assert_eq!(
            moves,
            vec![
                Move {
                    shard: 2,
                    from: Some(3),
                    to: 1,
                    new_epoch: 3
                },
                Move {
                    shard: 3,
                    from: Some(3),
                    to: 2,
                    new_epoch: 10
                },
            ]
        );
    }

    #[test]
    fn a_joining_replica_takes_only_the_surplus() {
        let current: BTreeMap<_, _> = (0..6)
            .map(|s| (s, (if s < 3 { 1 } else { 2 }, 1)))
            .collect();
        let moves = assign(&current, &set(&[1, 2, 3]));
        assert_eq!(moves.len(), 2);
        assert!(moves.iter().all(|m| m.to == 3 && m.new_epoch == 2));
        assert_eq!(moves.iter().filter(|m| m.from == Some(1)).count(), 1);
    }

    #[test]
    fn no_live_replica_means_no_moves() {
        let current: BTreeMap<_, _> = [(0, (1, 1))].into_iter().collect();
        assert!(assign(&current, &BTreeSet::new()).is_empty());
    }

    #[test]
    fn the_converter_proposes_assign_shard_with_the_new_epoch() {
        let m = Move {
            shard: 4,
            from: Some(1),
            to: 2,
            new_epoch: 8,
        };
        assert_eq!(
            m.to_command(),
            LedgerCommand::AssignShard {
                shard: 4,
                owner: 2,
                epoch: 8,
                proposer: None,
            }
        );
    }

    /// The fewest moves any balanced assignment needs: every orphan moves, and each live
    /// replica sheds what it holds above its best possible target.
    fn lower_bound(
        current: &BTreeMap<ShardId, (ReplicaId, Epoch)>,
        live: &BTreeSet<ReplicaId>,
    ) -> usize {
        let n = current.len();
        let r = live.len();
        let orphans = current.values().filter(|(o, _)| !live.contains(o)).count();
        let mut held: Vec<usize> = counts(current, live)
            .into_iter()
            .filter(|(k, _)| live.contains(k))
            .map(|(_, v)| v)
            .collect();
        held.sort_unstable_by(|a, b| b.cmp(a));
        let surplus: usize = held
            .iter()
            .enumerate()
            .map(|(i, h)| h.saturating_sub(n / r + usize::from(i < n % r)))
            .sum();
        orphans + surplus
    }

    proptest! {
        #[test]
        fn assignment_is_balanced_minimal_monotone_and_idempotent(
            owners in proptest::collection::vec((0u64..8, 0u64..50), 1..64),
            live_mask in 1u8..=255,
        ) {
            let current: BTreeMap<ShardId, (ReplicaId, Epoch)> = owners
                .iter()
                .enumerate()
                .map(|(s, (o, e))| (s as ShardId, (*o, *e)))
                .collect();
            let live: BTreeSet<ReplicaId> = (0..8u64).filter(|r| live_mask & (1 << r) != 0).collect();
            let moves = assign(&current, &live);
            let next = apply_moves(&current, &moves);
            // Every shard owned by a live replica.
            prop_assert!(next.values().all(|(o, _)| live.contains(o)));
            // Balanced.
            let c = counts(&next, &live);
            let (min, max) = (c.values().min().copied().unwrap_or(0), c.values().max().copied().unwrap_or(0));
            prop_assert!(max - min <= 1, "counts {c:?}");
            // Minimal.
            prop_assert_eq!(moves.len(), lower_bound(&current, &live));
            // Each shard moves at most once, to a new live owner or from a dead/surplus one.
            let moved: BTreeSet<ShardId> = moves.iter().map(|m| m.shard).collect();
            prop_assert_eq!(moved.len(), moves.len());
            // Monotone epochs.
            for m in &moves {
                let (from, epoch) = current[&m.shard];
                prop_assert_eq!(m.from, Some(from));
                prop_assert_eq!(m.new_epoch, epoch + 1);
            }
            // Idempotent and deterministic.
            prop_assert!(assign(&next, &live).is_empty());
            prop_assert_eq!(assign(&current, &live), moves);
        }
    }
}
