//! Invariant checkers, one per invariant (names from ARCHITECTURE.md). Each returns the
//! violations it finds; an empty vector means the invariant holds.

use std::collections::{BTreeMap, BTreeSet};

use super::command::LedgerCommand;
use super::resource_vec::ResourceVec;
use super::response::LedgerResponse;
use super::state::{LedgerState, PlacementState, TxnDecision};

/// One broken invariant, with enough detail to debug it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Invariant name (`I1`, `I2`, `I4`, `index`).
    pub invariant: &'static str,
    /// What is wrong.
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.invariant, self.detail)
    }
}

/// Committed usage per node recomputed from the placements (not from the index).
pub fn recompute_usage(state: &LedgerState) -> BTreeMap<String, ResourceVec> {
    let mut usage: BTreeMap<String, ResourceVec> = BTreeMap::new();
    for p in state.placements.values() {
        let e = usage.entry(p.node.clone()).or_default();
        *e = e.saturating_add(&p.resources);
    }
    usage.retain(|_, v| !v.is_zero());
    usage
}

/// I1 no double-booking: per node and resource, reserved + assumed + bound <= allocatable
/// (cpu/memory scaled by the overcommit factor), recomputed from the placements.
pub fn check_no_double_booking(state: &LedgerState) -> Vec<Violation> {
    let mut out = Vec::new();
    for (node, used) in recompute_usage(state) {
        let Some(record) = state.nodes.get(&node) else {
            out.push(Violation {
                invariant: "I1",
                detail: format!("node {node}: placements on a node the ledger does not know"),
            });
            continue;
        };
        for (resource, committed) in used.iter() {
            let limit = state
                .overcommit
                .limit(resource, record.allocatable.get(resource));
            if committed > limit {
                out.push(Violation {
                    invariant: "I1",
                    detail: format!(
                        "node {node}: {resource} {committed} committed > limit {limit}"
                    ),
                });
            }
        }
    }
    out
}

/// The usage index equals the usage recomputed from placements.
pub fn check_usage_index(state: &LedgerState) -> Vec<Violation> {
    let recomputed = recompute_usage(state);
    if recomputed == state.usage {
        return Vec::new();
    }
    vec![Violation {
        invariant: "index",
        detail: format!(
            "usage index {:?} differs from placements {:?}",
            state.usage, recomputed
        ),
    }]
}

/// I2 (ledger part): a reservation belongs to an undecided transaction; a decided
/// transaction (commit or abort) leaves no reservation behind.
pub fn check_no_orphan_reservation(state: &LedgerState) -> Vec<Violation> {
    let mut out = Vec::new();
    for (pod, p) in &state.placements {
        if let PlacementState::Reserved { txn } = &p.state {
            match state.txns.get(txn).map(|t| t.decision) {
                None => out.push(Violation {
                    invariant: "I2",
                    detail: format!("pod {pod}: reserved by unknown txn {txn}"),
                }),
                Some(Some(d)) => out.push(Violation {
                    invariant: "I2",
                    detail: format!("pod {pod}: still reserved by txn {txn} decided {d:?}"),
                }),
                Some(None) => {}
            }
        }
    }
    for (txn, t) in &state.txns {
        if t.decision == Some(TxnDecision::Commit) && !t.prepared.is_superset(&t.participants) {
            out.push(Violation {
                invariant: "I2",
                detail: format!("txn {txn}: committed without every participant"),
            });
        }
    }
    out
}

/// Each transaction's list of reserved pods (`Txn::reserved`) names exactly the pods
/// reserved for it: those of an undecided transaction, none once it is decided. A record
/// without a list (written by an older version) is not judged.
pub fn check_reservation_lists(state: &LedgerState) -> Vec<Violation> {
    let mut held: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (pod, p) in &state.placements {
        if let PlacementState::Reserved { txn } = &p.state {
            held.entry(txn.as_str()).or_default().insert(pod.as_str());
        }
    }
    let mut out = Vec::new();
    for (txn, t) in &state.txns {
        let Some(list) = &t.reserved else { continue };
        let listed: BTreeSet<&str> = list.iter().map(String::as_str).collect();
        let actual = held.remove(txn.as_str()).unwrap_or_default();
        if listed != actual {
            out.push(Violation {
                invariant: "index",
                detail: format!(
                    "txn {txn}: lists reserved pods {listed:?}, the placements reserve {actual:?}"
                ),
            });
        }
    }
    out
}

/// I4 fencing, checked on one step: a fenced command whose epoch is not the shard's
/// current epoch in `before` must be refused and leave the state unchanged.
pub fn check_fencing(
    before: &LedgerState,
    cmd: &LedgerCommand,
    response: &LedgerResponse,
    after: &LedgerState,
) -> Vec<Violation> {
    let Some((shard, epoch)) = cmd.fence() else {
        return Vec::new();
    };
    let current = before.shards.get(&shard).map(|a| a.epoch);
    if current == Some(epoch) {
        return Vec::new();
    }
    let mut out = Vec::new();
    if response.refusal().is_none() {
        out.push(Violation {
            invariant: "I4",
            detail: format!("shard {shard}: write at epoch {epoch} accepted, current {current:?}"),
        });
    }
    if before != after {
        out.push(Violation {
            invariant: "I4",
            detail: format!("shard {shard}: write at epoch {epoch} changed the state"),
        });
    }
    out
}

/// Every state invariant (I1, I2, index).
pub fn check_all(state: &LedgerState) -> Vec<Violation> {
    let mut out = check_no_double_booking(state);
    out.extend(check_usage_index(state));
    out.extend(check_no_orphan_reservation(state));
    out.extend(check_reservation_lists(state));
    out
}
