//! Pure functions every driver shares around a plan's commit: the slice of the plan one
//! cycle takes, a cross-shard gang's transaction (its parts per pool, its id, its
//! deadline), and commit-then-bind's second half, which owner marks which bound pods at
//! which fence.

use std::collections::{BTreeMap, BTreeSet};

use phalanx_statestore::ledger::{Epoch, ReplicaId, ShardId};
use phalanx_statestore::{LedgerState, PodPlacement};

use crate::coord::{StartTxn, txn_id};
use crate::framework::GangPlacement;
use crate::ledger::resource_vec;
use crate::ledger::sharded::Fence;
use crate::model::ObjectKey;

/// Where a coordinator looks up the shards of a transaction: each node's pool, and each
/// pool's owner (which prepares go together, [`StartTxn::owners`]).
pub trait TxnRoutes {
    /// The pool (shard) of a node, if known.
    fn pool_of(&self, node: &str) -> Option<ShardId>;
    /// The replica owning a shard now, if known.
    fn owner_of(&self, shard: ShardId) -> Option<ReplicaId>;
}

/// Routes given as two lookups: a node's pool, then a pool's owner.
pub struct RoutesBy<P, O>(pub P, pub O);

impl<P, O> std::fmt::Debug for RoutesBy<P, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RoutesBy(..)")
    }
}

impl<P, O> TxnRoutes for RoutesBy<P, O>
where
    P: Fn(&str) -> Option<ShardId>,
    O: Fn(ShardId) -> Option<ReplicaId>,
{
    fn pool_of(&self, node: &str) -> Option<ShardId> {
        (self.0)(node)
    }
    fn owner_of(&self, shard: ShardId) -> Option<ReplicaId> {
        (self.1)(shard)
    }
}

/// The ledger knows both: each node's pool and each shard's owner.
impl TxnRoutes for LedgerState {
    fn pool_of(&self, node: &str) -> Option<ShardId> {
        self.nodes.get(node).map(|n| n.shard)
    }
    fn owner_of(&self, shard: ShardId) -> Option<ReplicaId> {
        self.shards.get(&shard).map(|a| a.owner)
    }
}

/// The transaction a coordinator of `home` (owned at `epoch`) starts for `gang`: one part
/// per pool of the planned nodes (the participants pick the final nodes), its id minted
/// from the coordinator's `seq`, undecided after `timeout_ms`. `Err` names the first
/// planned node whose pool `routes` does not know.
pub fn start_txn(
    (home, epoch): (ShardId, Epoch),
    seq: u64,
    gang: &GangPlacement,
    routes: &impl TxnRoutes,
    now_ms: u64,
    timeout_ms: u64,
) -> Result<StartTxn, String> {
    let key = gang.gang.to_string();
    let mut parts: BTreeMap<ShardId, Vec<PodPlacement>> = BTreeMap::new();
    for p in &gang.placements {
        let shard = routes.pool_of(&p.node).ok_or_else(|| p.node.clone())?;
        parts.entry(shard).or_default().push(PodPlacement {
            pod: p.pod.to_string(),
            node: p.node.clone(),
            resources: resource_vec(&p.resources),
        });
    }
    let owners = parts
        .keys()
        .filter_map(|s| Some((*s, routes.owner_of(*s)?)))
        .collect();
    Ok(StartTxn {
        txn: txn_id(home, epoch, seq, &key),
        gang: key,
        parts: parts.into_iter().collect(),
        owners,
        now_ms,
        deadline_ms: now_ms.saturating_add(timeout_ms),
    })
}

/// Bound pods grouped for `MarkBound`: by the fence of their shard's owner (with who that
/// owner is), and the shards whose pods nobody can mark now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Marks<O> {
    /// Fence -> (its owner, the pods to mark there), in shard order.
    pub by_fence: BTreeMap<Fence, (O, Vec<ObjectKey>)>,
    /// Shards with no owner able to mark (lost, or its owner is down): their next owner's
    /// reconcile finds the pods bound and marks them.
    pub unmarked: BTreeSet<ShardId>,
}

/// Commit-then-bind: the pods just bound, each with its node's shard, grouped by the owner
/// that marks them bound and the epoch it marks them at (`owner_of`; `None` when nobody can
/// mark that shard's pods now).
pub fn marks_by_owner<O: Copy>(
    bound: impl IntoIterator<Item = (ShardId, ObjectKey)>,
    owner_of: impl Fn(ShardId) -> Option<(O, Epoch)>,
) -> Marks<O> {
    let mut marks = Marks {
        by_fence: BTreeMap::new(),
        unmarked: BTreeSet::new(),
    };
    for (shard, pod) in bound {
        match owner_of(shard) {
            Some((owner, epoch)) => marks
                .by_fence
                .entry(Fence { shard, epoch })
                .or_insert_with(|| (owner, Vec::new()))
                .1
                .push(pod),
            None => {
                marks.unmarked.insert(shard);
            }
        }
    }
    marks
}

/// The gangs of a plan one cycle commits and binds: the plan's order (queue fairness, then
/// priority) up to `max_pods` pods, at least the first gang however large; 0 means no
/// bound. The rest wait for the next cycle, planned again from what is left then, so that
/// one cycle's binds (a few thousand pods take seconds at the client's QPS) do not hold
/// back the gangs created meanwhile.
pub fn cycle_slice(gangs: &[GangPlacement], max_pods: usize) -> &[GangPlacement] {
    if max_pods == 0 {
        return gangs;
    }
    let mut pods = 0usize;
    let taken = gangs
        .iter()
        .take_while(|g| {
            pods = pods.saturating_add(g.placements.len());
            pods <= max_pods
        })
        .count();
    &gangs[..taken.max(1).min(gangs.len())]
}
