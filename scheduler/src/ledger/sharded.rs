//! The ledger adapter with explicit shards and epochs (issue 5): the same commands as the
//! single-shard adapter in `mod.rs`, whose constants (`SINGLE_SHARD`, `FIRST_EPOCH`,
//! `FIRST_OWNER`) remain the one-shard default. Every write carries the proposer's
//! [`Fence`]; the ledger refuses a stale one (I4), and the caller gets the typed refusal.

use std::collections::BTreeMap;

use phalanx_statestore::ledger::{Epoch, ReplicaId, ShardId};
use phalanx_statestore::{
    GangDecision, GangPlacement as LedgerGang, LedgerCommand, LedgerResponse, PodPlacement,
};

use super::{
    FIRST_EPOCH, LedgerError, PlacementLedger, ReleaseReason, SINGLE_SHARD, Verdict,
    chunks_of_gangs, pod_commands, resource_vec, to_ledger_gang,
};
use crate::framework::GangPlacement;
use crate::model::{Node, ObjectKey, Pod};

/// The shard a write is for and the epoch its proposer owns it at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Fence {
    pub shard: ShardId,
    pub epoch: Epoch,
}

impl Fence {
    /// The single shard of an unsharded run.
    pub const SINGLE: Fence = Fence {
        shard: SINGLE_SHARD,
        epoch: FIRST_EPOCH,
    };
}

/// `PlaceGangs` for `gangs`, all from `fence.shard`'s pool.
pub fn place_at(fence: Fence, gangs: &[GangPlacement]) -> Vec<LedgerCommand> {
    let gangs: Vec<LedgerGang> = gangs.iter().map(to_ledger_gang).collect();
    chunks_of_gangs(&gangs)
        .into_iter()
        .map(|gangs| LedgerCommand::PlaceGangs {
            shard: fence.shard,
            epoch: fence.epoch,
            gangs,
        })
        .collect()
}

/// `MarkBound` for pods placed by `fence.shard`.
pub fn mark_bound_at(fence: Fence, pods: &[ObjectKey]) -> Vec<LedgerCommand> {
    let keys: Vec<String> = pods.iter().map(ToString::to_string).collect();
    pod_commands(&keys, |pods| LedgerCommand::MarkBound {
        shard: fence.shard,
        epoch: fence.epoch,
        pods,
    })
}

/// `Release` for pods placed by `fence.shard`.
pub fn release_at(fence: Fence, pods: &[ObjectKey], reason: ReleaseReason) -> Vec<LedgerCommand> {
    let keys: Vec<String> = pods.iter().map(ToString::to_string).collect();
    pod_commands(&keys, |pods| LedgerCommand::Release {
        shard: fence.shard,
        epoch: fence.epoch,
        pods,
        reason,
    })
}

/// One verdict per gang from the responses to [`place_at`]'s commands (`sizes[i]` gangs in
/// command `i`); a command refused as a whole (stale epoch) refuses each of its gangs.
pub fn gang_verdicts(responses: &[LedgerResponse], sizes: &[usize]) -> Vec<Verdict> {
    let mut out = Vec::new();
    for (r, size) in responses.iter().zip(sizes) {
        match r {
            LedgerResponse::Gangs(outcomes) => {
                out.extend(outcomes.iter().map(|o| match &o.decision {
                    GangDecision::Accepted => Verdict::Accepted,
                    GangDecision::Refused(r) => Verdict::Refused(r.to_string()),
                }))
            }
            LedgerResponse::Refused(r) => {
                out.extend((0..*size).map(|_| Verdict::Refused(r.to_string())))
            }
            other @ (LedgerResponse::Applied
            | LedgerResponse::Pods { .. }
            | LedgerResponse::Expired { .. }) => {
                let why = format!("the ledger answered PlaceGangs with {other:?}");
                out.extend((0..*size).map(|_| Verdict::Refused(why.clone())))
            }
        }
    }
    out
}

/// How many gangs each of [`place_at`]'s commands carries.
pub fn command_sizes(commands: &[LedgerCommand]) -> Vec<usize> {
    commands
        .iter()
        .map(|c| match c {
            LedgerCommand::PlaceGangs { gangs, .. } => gangs.len(),
            _ => 0,
        })
        .collect()
}

/// Brings an empty ledger to the cluster's state with shards: every node in its shard's
/// pool, every shard assigned, every pod already holding a node as a one-pod gang of its
/// node's shard, marked bound. Returns warnings for running pods the ledger refused.
pub fn load_sharded(
    ledger: &mut dyn PlacementLedger,
    nodes: &[(&Node, ShardId)],
    owners: &BTreeMap<ShardId, (ReplicaId, Epoch)>,
    occupying: &[&Pod],
) -> Result<Vec<String>, LedgerError> {
    let mut commands: Vec<LedgerCommand> = nodes
        .iter()
        .map(|(n, shard)| LedgerCommand::UpsertNode {
            node: n.name.clone(),
            allocatable: resource_vec(&n.allocatable),
            shard: *shard,
        })
        .collect();
    commands.extend(
        owners
            .iter()
            .map(|(shard, (owner, epoch))| LedgerCommand::AssignShard {
                shard: *shard,
                owner: *owner,
                epoch: *epoch,
                proposer: None,
            }),
    );
    refusals(ledger.propose_raw(commands)?)?;
    let shard_of: BTreeMap<&str, ShardId> =
        nodes.iter().map(|(n, s)| (n.name.as_str(), *s)).collect();
    let mut by_shard: BTreeMap<ShardId, Vec<LedgerGang>> = BTreeMap::new();
    for p in occupying {
        let Some(node) = &p.node_name else { continue };
        let Some(shard) = shard_of.get(node.as_str()) else {
            continue;
        };
        by_shard.entry(*shard).or_default().push(LedgerGang {
            gang: p.key.to_string(),
            pods: vec![PodPlacement {
                pod: p.key.to_string(),
                node: node.clone(),
                resources: resource_vec(&p.requests),
            }],
        });
    }
    let mut warnings = Vec::new();
    for (shard, gangs) in by_shard {
        let epoch = owners.get(&shard).map_or(FIRST_EPOCH, |(_, e)| *e);
        let fence = Fence { shard, epoch };
        let commands: Vec<LedgerCommand> = chunks_of_gangs(&gangs)
            .into_iter()
            .map(|gangs| LedgerCommand::PlaceGangs {
                shard,
                epoch,
                gangs,
            })
            .collect();
        let sizes = command_sizes(&commands);
        let verdicts = gang_verdicts(&ledger.propose_raw(commands)?, &sizes);
        let mut bound = Vec::new();
        for (g, v) in gangs.iter().zip(verdicts) {
            match v {
                Verdict::Accepted => bound.push(ObjectKey::parse(&g.gang)),
                Verdict::Refused(r) | Verdict::InDoubt(r) => {
                    warnings.push(format!("pod {} already running: {r}", g.gang))
                }
            }
        }
        refusals(ledger.propose_raw(mark_bound_at(fence, &bound))?)?;
    }
    Ok(warnings)
}

/// The first refusal among `responses`, as an error.
pub fn refusals(responses: Vec<LedgerResponse>) -> Result<Vec<LedgerResponse>, LedgerError> {
    if let Some(r) = responses.iter().find_map(LedgerResponse::refusal) {
        return Err(LedgerError::Refused(r.clone()));
    }
    Ok(responses)
}
