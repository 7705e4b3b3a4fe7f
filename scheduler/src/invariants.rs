//! The invariants of ARCHITECTURE.md, one named checker each, over a simulated cluster.
//! The driver runs them after every cycle; tests, chaos runs and benchmarks use the same
//! functions.
//!
//! | name | what | checker |
//! |---|---|---|
//! | I1 | no double-booking: per node and resource, the requests of the pods on it ≤ allocatable | [`check_no_double_booking`] |
//! | I2 | gang atomicity: a PodGroup never has between 1 and minMember−1 pods placed after a bind round | [`check_gang_atomicity`] |
//! | I3 | no lost placement: every placement the cycle committed ended bound | [`check_no_lost_placement`] |
//! | I4 | fencing: no write from a stale owner is accepted | [`check_fencing`] (statestore's `check_fencing` on every fenced write of the sharded runtime) |
//! | — | no leaked reservation: no pod stays reserved by a decided (or forgotten) transaction | [`check_no_leaked_reservation`] |
//! | — | state cache: the state kept from round to round equals the one built from the snapshot | [`check_state_cache`] |

use std::collections::BTreeMap;
use std::fmt;

use phalanx_statestore::ledger::{
    Epoch, PlacementState, ReplicaId, ShardAssignment, ShardId, check_fencing as ledger_fencing,
};
use phalanx_statestore::{LedgerCommand, LedgerResponse, LedgerState};

use crate::cluster::ClusterSnapshot;
use crate::cluster::sim::SimCluster;
use crate::framework::{CyclePlan, StateCache};
use crate::model::Resources;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.invariant, self.detail)
    }
}

/// The state a [`StateCache`] kept and patched equals the state built from `snapshot`
/// (the one it was just brought up to date with), field by field.
pub fn check_state_cache(cache: &StateCache, snapshot: &ClusterSnapshot) -> Vec<Violation> {
    let differences = cache.check(snapshot);
    if differences.is_empty() {
        return Vec::new();
    }
    vec![Violation {
        invariant: "state cache",
        detail: differences.join("; "),
    }]
}

/// I1. Only nodes that hold a pod placed during this run are judged: a workload that starts
/// over-committed by other schedulers' pods is the input's fault, not ours.
pub fn check_no_double_booking(sim: &SimCluster) -> Vec<Violation> {
    /// What the pods bound to one node ask for, and whether this scheduler bound one.
    #[derive(Default)]
    struct NodeUse {
        used: Resources,
        pods: u32,
        ours: bool,
    }
    let mut by_node: crate::FastMap<&str, NodeUse> = crate::FastMap::default();
    for pod in sim.pods() {
        if let Some(node) = pod.node_name.as_deref()
            && pod.occupies_node()
        {
            let u = by_node.entry(node).or_default();
            u.used.add(&pod.requests);
            u.pods += 1;
            // A node with one pod of ours is checked; its other pods need not be looked up.
            u.ours = u.ours || sim.was_bound_here(&pod.key);
        }
    }
    let mut out = Vec::new();
    for node in sim.nodes() {
        let Some(u) = by_node.get(node.name.as_str()).filter(|u| u.ours) else {
            continue;
        };
        if let Some((resource, want, have)) = u.used.first_shortage(&node.allocatable) {
            out.push(Violation {
                invariant: "I1 no double-booking",
                detail: format!(
                    "node {}: pods request {} {resource}, allocatable is {}",
                    node.name,
                    crate::model::resources::format_amount(resource.as_str(), want),
                    crate::model::resources::format_amount(resource.as_str(), have)
                ),
            });
        }
        let count = i64::from(u.pods);
        if count > node.max_pods {
            out.push(Violation {
                invariant: "I1 no double-booking",
                detail: format!(
                    "node {}: {count} pods, at most {} allowed",
                    node.name, node.max_pods
                ),
            });
        }
    }
    out
}

/// I2. Counts pods that hold or held a node (bound, running or finished).
pub fn check_gang_atomicity(sim: &SimCluster) -> Vec<Violation> {
    let placed = sim.pods_per_group(|p| p.node_name.is_some());
    let mut out = Vec::new();
    for group in sim.pod_groups() {
        let key = (group.key.namespace.as_str(), group.key.name.as_str());
        let n = placed.get(&key).copied().unwrap_or(0);
        if n > 0 && n < group.min_member {
            out.push(Violation {
                invariant: "I2 gang atomicity",
                detail: format!(
                    "PodGroup {}: {n} of minMember {} pods placed",
                    group.key, group.min_member
                ),
            });
        }
    }
    out
}

/// I3. Every placement of the plan is bound to the node the plan chose.
pub fn check_no_lost_placement(sim: &SimCluster, plan: &CyclePlan) -> Vec<Violation> {
    let mut out = Vec::new();
    for gang in &plan.gangs {
        for p in &gang.placements {
            let bound = sim.pod(&p.pod).and_then(|pod| pod.node_name.as_deref());
            if bound != Some(p.node.as_str()) && !sim.is_evicted(&p.pod) {
                out.push(Violation {
                    invariant: "I3 no lost placement",
                    detail: format!(
                        "pod {} was placed on {} but is bound to {}",
                        p.pod,
                        p.node,
                        bound.unwrap_or("nothing")
                    ),
                });
            }
        }
    }
    out
}

/// I4. A fenced write (`PlaceGangs`, `MarkBound`, `Release`, `Txn*`) whose epoch is not
/// its shard's current epoch must have been refused. `owners` is the ledger's shard map
/// when the write was applied (the sharded runtime mirrors it exactly: every `AssignShard`
/// goes through it). Statestore's `check_fencing` judges; the state itself is not copied.
pub fn check_fencing(
    owners: &BTreeMap<ShardId, (ReplicaId, Epoch)>,
    cmd: &LedgerCommand,
    response: &LedgerResponse,
) -> Vec<Violation> {
    let mut before = LedgerState::new();
    before.shards = owners
        .iter()
        .map(|(s, (owner, epoch))| {
            (
                *s,
                ShardAssignment {
                    owner: *owner,
                    epoch: *epoch,
                },
            )
        })
        .collect();
    ledger_fencing(&before, cmd, response, &before)
        .into_iter()
        .map(|v| Violation {
            invariant: "I4 fencing",
            detail: v.to_string(),
        })
        .collect()
}

/// No leaked reservation: every `reserved` placement belongs to a transaction the ledger
/// still holds undecided (a decided or forgotten one must have released or promoted it).
pub fn check_no_leaked_reservation(state: &LedgerState) -> Vec<Violation> {
    state
        .placements
        .iter()
        .filter_map(|(pod, p)| match &p.state {
            PlacementState::Reserved { txn } => {
                let open = state.txns.get(txn).is_some_and(|t| t.decision.is_none());
                (!open).then(|| Violation {
                    invariant: "no leaked reservation",
                    detail: format!(
                        "pod {pod} is still reserved by transaction {txn}, which is decided or gone"
                    ),
                })
            }
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Cluster;
    use crate::model::{Node, ObjectKey, Pod, PodGroup};

    /// A planted partial gang (one of two pods bound) is caught, named; the whole gang,
    /// and a gang with nothing placed, are not violations.
    #[test]
    fn i2_catches_a_planted_partial_gang_and_passes_a_whole_one() {
        let node = Node::new("node-0", Resources::new());
        let pods = ["t-0", "t-1"].map(|name| {
            let mut p = Pod::new(ObjectKey::new("ns", name), Resources::new());
            p.group = Some("train".to_string());
            p
        });
        let gangs = vec![
            PodGroup::new(ObjectKey::new("ns", "train"), 2),
            PodGroup::new(ObjectKey::new("ns", "idle"), 3),
        ];
        let mut sim = SimCluster::new(vec![node], pods.into(), gangs, Vec::new(), Vec::new());
        assert!(check_gang_atomicity(&sim).is_empty());
        sim.bind(&ObjectKey::new("ns", "t-0"), "node-0").unwrap();
        let found = check_gang_atomicity(&sim);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].invariant, "I2 gang atomicity");
        assert!(
            found[0].detail.contains("ns/train: 1 of minMember 2"),
            "{found:?}"
        );
        sim.bind(&ObjectKey::new("ns", "t-1"), "node-0").unwrap();
        assert!(check_gang_atomicity(&sim).is_empty());
    }
}
