//! What a new owner of a coordinator shard reads from the ledger to finish its
//! predecessor's transactions.

use phalanx_statestore::ledger::{PlacementState, ShardId, TxnDecision};
use phalanx_statestore::{LedgerState, PodPlacement};

use super::messages::RecoveredTxn;
use super::txn_id::gang_of;

/// The transactions coordinated by `shard` in `state`, with, for each commit, the
/// gang's placements still `assumed` (committed, not yet bound).
pub fn recovered_txns(state: &LedgerState, shard: ShardId) -> Vec<RecoveredTxn> {
    state
        .txns
        .iter()
        .filter(|(_, t)| t.coordinator == shard)
        .map(|(id, t)| {
            let gang = gang_of(id).map(str::to_string);
            let unbound = match (&gang, t.decision) {
                (Some(g), Some(TxnDecision::Commit)) => state
                    .pods_of_gang(g)
                    .filter(|(_, p)| p.state == PlacementState::Assumed)
                    .map(|(pod, p)| PodPlacement {
                        pod: pod.to_string(),
                        node: p.node.clone(),
                        resources: p.resources.clone(),
                    })
                    .collect(),
                _ => Vec::new(),
            };
            RecoveredTxn {
                txn: id.clone(),
                gang,
                participants: t.participants.iter().copied().collect(),
                deadline_ms: t.deadline_ms,
                decision: t.decision,
                unbound,
            }
        })
        .collect()
}
