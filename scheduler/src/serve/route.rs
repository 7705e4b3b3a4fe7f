//! Where a planned gang can be committed by this replica: `PlaceGangs` at (shard, epoch)
//! when every node it was given lies in the pool of one shard this replica owns; anything
//! else needs the two-phase reservation between replicas (`serve/twophase.rs`, with
//! `--coord-listen`, started by the owner of the gang's home shard); without it such a
//! gang stays pending with a condition that says why.

use std::collections::{BTreeMap, BTreeSet};

use phalanx_statestore::LedgerState;
use phalanx_statestore::ledger::{Epoch, ShardId};

use crate::framework::GangPlacement;
use crate::framework::cycle::CONDITION_UNSCHEDULABLE;
use crate::ledger::sharded::Fence;
use crate::model::{PodGroupCondition, PodGroupStatus, TimeMs};

/// The `reason` of the `Unschedulable` condition of a gang that [`route`] keeps back.
pub const REASON_SPANS_SHARDS: &str = "SpansShards";

/// Why a gang cannot be committed by this replica now.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotLocal {
    #[error(
        "spans shards {}; cross-shard placement needs two-phase reservation between replicas, which this replica runs only with --coord-listen",
        list(.0)
    )]
    SpansShards(BTreeSet<ShardId>),
    #[error(
        "its nodes lie in shard {0}'s pool, which another replica owns; placing it there needs two-phase reservation between replicas, which this replica runs only with --coord-listen"
    )]
    OtherOwner(ShardId),
    #[error("node {0} is not in the ledger yet (the leader registers it)")]
    UnknownNode(String),
}

fn list(shards: &BTreeSet<ShardId>) -> String {
    shards
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The fence to commit `gang` at, from the ledger's record of its nodes' pools and the
/// shards this replica owns (shard -> epoch).
pub fn route(
    gang: &GangPlacement,
    state: &LedgerState,
    owned: &BTreeMap<ShardId, Epoch>,
) -> Result<Fence, NotLocal> {
    let mut pools = BTreeSet::new();
    for p in &gang.placements {
        let record = state
            .nodes
            .get(&p.node)
            .ok_or_else(|| NotLocal::UnknownNode(p.node.clone()))?;
        pools.insert(record.shard);
    }
    let mut shards = pools.iter();
    match (shards.next(), shards.next()) {
        (Some(shard), None) => owned
            .get(shard)
            .map(|epoch| Fence {
                shard: *shard,
                epoch: *epoch,
            })
            .ok_or(NotLocal::OtherOwner(*shard)),
        _ => Err(NotLocal::SpansShards(pools)),
    }
}

/// The status of a gang kept back by [`route`]: its current status with an
/// `Unschedulable` condition saying why (its time kept while the message stays the same,
/// so a gang kept back period after period is not rewritten each time).
pub fn kept_back_status(
    current: &PodGroupStatus,
    why: &NotLocal,
    now_ms: TimeMs,
) -> PodGroupStatus {
    let message = why.to_string();
    let mut status = current.clone();
    let since = status
        .conditions
        .iter()
        .find(|c| c.kind == CONDITION_UNSCHEDULABLE && c.status && c.message == message)
        .map_or(now_ms, |c| c.transition_time_ms);
    status
        .conditions
        .retain(|c| c.kind != CONDITION_UNSCHEDULABLE);
    status.conditions.push(PodGroupCondition {
        kind: CONDITION_UNSCHEDULABLE.to_string(),
        status: true,
        reason: REASON_SPANS_SHARDS.to_string(),
        message,
        transition_time_ms: since,
    });
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Placement;
    use crate::model::{ObjectKey, Resources};
    use phalanx_statestore::ResourceVec;
    use phalanx_statestore::ledger::NodeRecord;

    fn state() -> LedgerState {
        let mut s = LedgerState::new();
        for (node, shard) in [("a", 0), ("b", 0), ("c", 1)] {
            s.nodes.insert(
                node.into(),
                NodeRecord {
                    allocatable: ResourceVec::default(),
                    shard,
                },
            );
        }
        s
    }

    fn gang(nodes: &[&str]) -> GangPlacement {
        GangPlacement {
            gang: ObjectKey::new("ns", "g"),
            placements: nodes
                .iter()
                .enumerate()
                .map(|(i, n)| Placement {
                    pod: ObjectKey::new("ns", format!("p{i}")),
                    node: n.to_string(),
                    resources: Resources::default(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_gang_in_one_owned_pool_is_committed_at_that_shards_epoch() {
        let owned = BTreeMap::from([(0, 5), (2, 1)]);
        assert_eq!(
            route(&gang(&["a", "b"]), &state(), &owned),
            Ok(Fence { shard: 0, epoch: 5 })
        );
    }

    #[test]
    fn a_gang_over_two_pools_is_kept_back_naming_the_shards() {
        let owned = BTreeMap::from([(0, 5), (1, 3)]);
        let e = route(&gang(&["a", "c"]), &state(), &owned).expect_err("spans");
        assert_eq!(e, NotLocal::SpansShards([0, 1].into_iter().collect()));
        assert!(
            e.to_string()
                .starts_with("spans shards 0, 1; cross-shard placement needs"),
            "{e}"
        );
    }

    #[test]
    fn a_gang_in_another_replicas_pool_is_kept_back() {
        let owned = BTreeMap::from([(0, 5)]);
        assert_eq!(
            route(&gang(&["c"]), &state(), &owned),
            Err(NotLocal::OtherOwner(1))
        );
    }

    #[test]
    fn a_node_the_ledger_does_not_know_keeps_the_gang_back() {
        let owned = BTreeMap::from([(0, 5)]);
        assert_eq!(
            route(&gang(&["a", "zz"]), &state(), &owned),
            Err(NotLocal::UnknownNode("zz".into()))
        );
    }

    #[test]
    fn a_kept_back_gang_says_why_and_keeps_the_time_while_the_reason_stays() {
        let why = NotLocal::SpansShards([1, 3].into_iter().collect());
        let first = kept_back_status(&PodGroupStatus::default(), &why, 100);
        let c = &first.conditions[0];
        assert_eq!(
            (c.kind.as_str(), c.reason.as_str()),
            (CONDITION_UNSCHEDULABLE, REASON_SPANS_SHARDS)
        );
        assert!(c.message.contains("spans shards 1, 3"), "{}", c.message);
        let again = kept_back_status(&first, &why, 900);
        assert_eq!(again, first, "unchanged: nothing to write");
        let moved = kept_back_status(&first, &NotLocal::OtherOwner(2), 900);
        assert_eq!(moved.conditions.len(), 1);
        assert_eq!(moved.conditions[0].transition_time_ms, 900);
    }
}
