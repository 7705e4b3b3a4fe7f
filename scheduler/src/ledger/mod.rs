//! Commit, then bind: the scheduler's side of the allocation ledger.
//!
//! A cycle's plan is proposed to the ledger before anything is bound. The ledger's state
//! machine (`phalanx-statestore`) re-checks every gang against every placement committed so
//! far — free capacity per node and resource, no pod placed twice, the proposer's shard epoch
//! — and accepts each gang whole or refuses it whole. Only accepted gangs are bound; a
//! refused gang stays pending and is tried again next cycle.
//!
//! Two implementations of [`PlacementLedger`]:
//! - [`LocalLedger`]: the ledger's state machine applied in process (one replica needs no
//!   consensus, but gets the same verification);
//! - [`RaftLedger`]: N replicas of the real replicated ledger (openraft, fsynced log, sled
//!   state, tonic on loopback) started in this process, proposed to through the typed client.

mod local;
mod raft;

pub use local::LocalLedger;
pub use raft::RaftLedger;

use phalanx_statestore::ledger::checks::Violation as LedgerViolation;
use phalanx_statestore::{
    GangPlacement as LedgerGang, LedgerCommand, LedgerState, PodPlacement, ResourceVec,
};
use thiserror::Error;

use crate::framework::GangPlacement;
use crate::model::{Node, ObjectKey, Pod, Resources};

pub use phalanx_statestore::ledger::ReleaseReason;

/// The only shard until sharding is built; owned by replica 1 at epoch 1.
pub const SINGLE_SHARD: u32 = 0;
pub const FIRST_EPOCH: u64 = 1;
pub const FIRST_OWNER: u64 = 1;

#[derive(Debug, Error)]
pub enum LedgerError {
    #[error("the ledger refused the command: {0}")]
    Refused(String),
    #[error("the ledger could not be reached: {0}")]
    Unavailable(String),
    #[error("starting the ledger replicas failed: {0}")]
    Start(String),
}

/// The ledger's verdict on one proposed gang.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    Refused(String),
}

/// The operations commit-then-bind needs.
pub trait PlacementLedger {
    /// Registers the cluster's nodes and the pods that already hold nodes (placed by anyone),
    /// so the ledger's capacity view starts equal to the cluster's.
    fn load(&mut self, nodes: &[&Node], occupying: &[&Pod]) -> Result<Vec<String>, LedgerError>;
    /// Proposes gangs; one verdict per gang, in order.
    fn commit(&mut self, gangs: &[GangPlacement]) -> Result<Vec<Verdict>, LedgerError>;
    /// Records that these pods are bound in the cluster.
    fn mark_bound(&mut self, pods: &[ObjectKey]) -> Result<(), LedgerError>;
    /// Releases placements (pod finished, evicted, or its bind failed).
    fn release(&mut self, pods: &[ObjectKey], reason: ReleaseReason) -> Result<(), LedgerError>;
    /// The ledger's state (linearizable for the replicated ledger), for invariant checks.
    fn state(&mut self) -> Result<LedgerState, LedgerError>;
    /// How many replicas hold the ledger.
    fn replicas(&self) -> usize;
}

pub(crate) fn resource_vec(r: &Resources) -> ResourceVec {
    ResourceVec::from_pairs(r.iter().map(|(n, v)| (n.as_str(), v)))
}

pub(crate) fn to_ledger_gang(g: &GangPlacement) -> LedgerGang {
    LedgerGang {
        gang: g.gang.to_string(),
        pods: g
            .placements
            .iter()
            .map(|p| PodPlacement {
                pod: p.pod.to_string(),
                node: p.node.clone(),
                resources: resource_vec(&p.resources),
            })
            .collect(),
    }
}

/// The commands that bring an empty ledger to the cluster's state: nodes, the single shard's
/// owner, then every pod already holding a node as a one-pod gang, marked bound.
pub(crate) fn load_commands(
    nodes: &[&Node],
    occupying: &[&Pod],
) -> (Vec<LedgerCommand>, Vec<LedgerGang>) {
    let mut commands: Vec<LedgerCommand> = nodes
        .iter()
        .map(|n| LedgerCommand::UpsertNode {
            node: n.name.clone(),
            allocatable: resource_vec(&n.allocatable),
            shard: SINGLE_SHARD,
        })
        .collect();
    commands.push(LedgerCommand::AssignShard {
        shard: SINGLE_SHARD,
        owner: FIRST_OWNER,
        epoch: FIRST_EPOCH,
    });
    let gangs = occupying
        .iter()
        .filter_map(|p| {
            let node = p.node_name.as_ref()?;
            Some(LedgerGang {
                gang: p.key.to_string(),
                pods: vec![PodPlacement {
                    pod: p.key.to_string(),
                    node: node.clone(),
                    resources: resource_vec(&p.requests),
                }],
            })
        })
        .collect();
    (commands, gangs)
}

/// The ledger's own invariant checks (I1 on committed usage, the usage index, no orphan
/// reservation), rendered.
pub fn check_ledger(state: &LedgerState) -> Vec<String> {
    phalanx_statestore::ledger::checks::check_all(state)
        .into_iter()
        .map(|v: LedgerViolation| v.to_string())
        .collect()
}

/// The ledger for `replicas` scheduler replicas: the state machine in process for one, the
/// replicated ledger on loopback for more.
pub fn start_ledger(replicas: usize) -> Result<Box<dyn PlacementLedger>, LedgerError> {
    match replicas {
        0 => Err(LedgerError::Start("at least one replica is needed".into())),
        1 => Ok(Box::new(LocalLedger::new())),
        n => Ok(Box::new(RaftLedger::start(n)?)),
    }
}

/// Splits `items` into chunks of at most `size`.
pub(crate) fn chunks<T: Clone>(items: &[T], size: usize) -> Vec<Vec<T>> {
    items.chunks(size.max(1)).map(<[T]>::to_vec).collect()
}
