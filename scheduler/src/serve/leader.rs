//! The Raft leader's duties in `phalanx serve`, as pure functions of what it read this
//! period: the ledger (owners and nodes, read afresh every period, never remembered), the
//! live replicas (from their Leases, `liveness.rs`) and the node watch.
//!
//! - shards: `assign_shards` over `0..shards`, each move an `AssignShard` that names this
//!   leader and its Raft term (the ledger refuses it from a leader deposed since);
//! - nodes: `UpsertNode { shard }` by the `ShardMap` (label or hash) for every node whose
//!   capacity or shard the ledger does not hold yet, and `RemoveNode` for nodes gone from
//!   the cluster that hold no placement. One writer (the leader) for every node, so two
//!   owners never disagree about a node whose label moved it to another shard.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use phalanx_statestore::ledger::{Epoch, LeaderTerm, ReplicaId, ShardId};
use phalanx_statestore::{LedgerCommand, LedgerState};

use crate::ledger::resource_vec;
use crate::model::Node;
use crate::shard::{Move, ShardMap, assign_shards};

/// Shard -> (owner, epoch), for shards `0..shards`, as the ledger holds them.
pub fn owners(state: &LedgerState, shards: u32) -> BTreeMap<ShardId, (ReplicaId, Epoch)> {
    state
        .shards
        .range(0..shards)
        .map(|(s, a)| (*s, (a.owner, a.epoch)))
        .collect()
}

/// The moves that balance shards `0..shards` over `live`, each as the `AssignShard` that
/// `proposer` appends.
pub fn shard_moves(
    state: &LedgerState,
    shards: u32,
    live: &BTreeSet<ReplicaId>,
    proposer: LeaderTerm,
) -> Vec<(Move, LedgerCommand)> {
    let all: BTreeSet<ShardId> = (0..shards).collect();
    assign_shards(&all, &owners(state, shards), live)
        .into_iter()
        .map(|m| {
            let command = LedgerCommand::AssignShard {
                shard: m.shard,
                owner: m.to,
                epoch: m.new_epoch,
                proposer: Some(proposer),
            };
            (m, command)
        })
        .collect()
}

/// `UpsertNode` for every cluster node the ledger holds with another capacity or shard
/// (or not at all), and `RemoveNode` for every ledger node the cluster no longer has and
/// on which nothing is placed (the ledger refuses to drop a node with placements; those
/// go once their owners release them).
pub fn node_commands(
    state: &LedgerState,
    nodes: &[Arc<Node>],
    map: &ShardMap,
) -> Vec<LedgerCommand> {
    let mut out: Vec<LedgerCommand> = nodes
        .iter()
        .filter_map(|n| {
            let allocatable = resource_vec(&n.allocatable);
            let shard = map.shard_of(n);
            let known = state.nodes.get(&n.name);
            (known.map(|k| (&k.allocatable, k.shard)) != Some((&allocatable, shard))).then(|| {
                LedgerCommand::UpsertNode {
                    node: n.name.clone(),
                    allocatable,
                    shard,
                }
            })
        })
        .collect();
    let live: HashSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    let held: HashSet<&str> = state.placements.values().map(|p| p.node.as_str()).collect();
    out.extend(
        state
            .nodes
            .keys()
            .filter(|name| !live.contains(name.as_str()) && !held.contains(name.as_str()))
            .map(|name| LedgerCommand::RemoveNode { node: name.clone() }),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::{GangPlacement, Placement};
    use crate::ledger::{LedgerBackend, LocalLedger, PlacementLedger, Verdict};
    use crate::model::{ObjectKey, Resources};
    use crate::shard::ShardingConfig;

    fn node(name: &str, zone: &str) -> Arc<Node> {
        let mut n = Node::new(name, Resources::from_pairs([("nvidia.com/gpu", 8)]));
        n.labels.insert("zone".into(), zone.into());
        Arc::new(n)
    }

    fn by_zone(shards: u32) -> ShardMap {
        ShardMap::new(ShardingConfig {
            shards,
            by_label: Some("zone".into()),
            ..ShardingConfig::default()
        })
        .expect("valid")
    }

    fn apply_all(ledger: &mut LocalLedger, commands: Vec<LedgerCommand>) {
        for c in commands {
            ledger.propose_all(vec![c]).expect("applies");
        }
    }

    #[test]
    fn nodes_enter_the_ledger_in_the_shard_of_their_label_and_are_written_once() {
        let map = by_zone(4);
        let nodes = vec![
            node("a", "zone-0"),
            node("b", "zone-0"),
            node("c", "zone-1"),
        ];
        let mut ledger = LocalLedger::new();
        let first = node_commands(&ledger.read_state().expect("reads"), &nodes, &map);
        assert_eq!(first.len(), 3);
        apply_all(&mut ledger, first);
        let state = ledger.read_state().expect("reads");
        assert_eq!(state.nodes["a"].shard, state.nodes["b"].shard);
        assert_eq!(state.nodes["c"].shard, map.shard_of(&nodes[2]));
        assert!(
            node_commands(&state, &nodes, &map).is_empty(),
            "nothing changed"
        );
    }

    #[test]
    fn a_node_relabelled_into_another_zone_moves_to_that_zones_shard() {
        let map = by_zone(64);
        let mut ledger = LocalLedger::new();
        apply_all(
            &mut ledger,
            node_commands(&LedgerState::new(), &[node("a", "zone-0")], &map),
        );
        let moved = node("a", "zone-7");
        let commands = node_commands(
            &ledger.read_state().expect("reads"),
            std::slice::from_ref(&moved),
            &map,
        );
        assert_eq!(
            commands,
            vec![LedgerCommand::UpsertNode {
                node: "a".into(),
                allocatable: resource_vec(&moved.allocatable),
                shard: map.shard_of(&moved),
            }]
        );
    }

    #[test]
    fn a_deleted_node_leaves_the_ledger_only_once_nothing_is_placed_on_it() {
        let map = by_zone(1);
        let mut ledger = LocalLedger::new();
        let nodes = vec![node("n1", "z"), node("n2", "z")];
        apply_all(
            &mut ledger,
            node_commands(&LedgerState::new(), &nodes, &map),
        );
        apply_all(
            &mut ledger,
            vec![LedgerCommand::AssignShard {
                shard: 0,
                owner: 1,
                epoch: 1,
                proposer: None,
            }],
        );
        let gang = GangPlacement {
            gang: ObjectKey::new("ns", "g"),
            placements: vec![Placement {
                pod: ObjectKey::new("ns", "p"),
                node: "n1".into(),
                resources: Resources::from_pairs([("nvidia.com/gpu", 1)]),
            }],
        };
        assert_eq!(
            ledger.commit(&[gang]).expect("commits"),
            vec![Verdict::Accepted]
        );
        // Both nodes are deleted from the cluster: n2 goes, n1 stays while pod p holds it.
        let commands = node_commands(&ledger.read_state().expect("reads"), &[], &map);
        assert_eq!(
            commands,
            vec![LedgerCommand::RemoveNode { node: "n2".into() }]
        );
    }

    #[test]
    fn the_leader_spreads_six_shards_over_three_live_replicas_naming_its_term() {
        let proposer = LeaderTerm {
            replica: 2,
            term: 7,
        };
        let live: BTreeSet<ReplicaId> = [1, 2, 3].into_iter().collect();
        let moves = shard_moves(&LedgerState::new(), 6, &live, proposer);
        let mut per: BTreeMap<ReplicaId, usize> = BTreeMap::new();
        for (m, c) in &moves {
            *per.entry(m.to).or_default() += 1;
            assert!(
                matches!(c, LedgerCommand::AssignShard { proposer: Some(p), epoch: 1, .. } if *p == proposer)
            );
        }
        assert_eq!(per.values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
        // Replica 3 dies: only its two shards move, at epoch 2.
        let mut ledger = LocalLedger::new();
        apply_all(
            &mut ledger,
            moves
                .into_iter()
                .map(|(_, c)| without_proposer(c))
                .collect(),
        );
        let state = ledger.read_state().expect("reads");
        let live: BTreeSet<ReplicaId> = [1, 2].into_iter().collect();
        let again = shard_moves(&state, 6, &live, proposer);
        assert_eq!(again.len(), 2);
        assert!(
            again
                .iter()
                .all(|(m, _)| m.from == Some(3) && m.new_epoch == 2 && m.to != 3)
        );
    }

    /// The in-process ledger has no Raft log to check a proposer against.
    fn without_proposer(c: LedgerCommand) -> LedgerCommand {
        match c {
            LedgerCommand::AssignShard {
                shard,
                owner,
                epoch,
                ..
            } => LedgerCommand::AssignShard {
                shard,
                owner,
                epoch,
                proposer: None,
            },
            other => other,
        }
    }
}
