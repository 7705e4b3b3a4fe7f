//! `apply`: the ledger's state machine, a pure deterministic function.
//!
//! Every command is validated completely before anything is written, so a refused command
//! (or a refused gang) leaves no trace. Nothing here reads a clock, a random source or the
//! disk: time arrives inside `ExpireAt`.

use std::collections::{BTreeMap, BTreeSet};

use super::bounds::{
    MAX_QUANTITY, check_node_name, check_object_key, check_overcommit, check_resources,
    check_txn_id,
};
use super::changes::{Changes, StateKey};
use super::command::{
    GangPlacement, LedgerCommand, MAX_CLOCK_MS, MAX_CLOCK_STEP_MS, MAX_EPOCH_STEP,
    MAX_GANGS_PER_COMMAND, MAX_OPEN_TXNS, MAX_PODS_PER_COMMAND, MAX_PODS_PER_GANG,
    MAX_TXN_PARTICIPANTS, TXN_RETENTION_MS,
};
use super::context::{ApplyContext, LeaderTerm};
use super::overcommit::OvercommitFactor;
use super::refusal::Refusal;
use super::resource_vec::ResourceVec;
use super::response::{GangDecision, GangOutcome, LedgerResponse};
use super::state::{
    Epoch, LedgerState, NodeRecord, Placement, PlacementState, ShardAssignment, ShardId, Txn,
    TxnDecision, TxnId,
};

/// Applies one command in process (no log: see `ApplyContext::IN_PROCESS`).
pub fn apply(state: &mut LedgerState, cmd: &LedgerCommand) -> LedgerResponse {
    apply_with(state, cmd, &ApplyContext::IN_PROCESS)
}

/// Applies one command to the ledger, as the log entry `ctx` describes, and reports what
/// happened.
pub fn apply_with(
    state: &mut LedgerState,
    cmd: &LedgerCommand,
    ctx: &ApplyContext,
) -> LedgerResponse {
    apply_recording(state, cmd, ctx, &mut Changes::off())
}

/// `apply_with`, noting in `c` every key of the state it writes (nothing for a refusal).
pub fn apply_recording(
    state: &mut LedgerState,
    cmd: &LedgerCommand,
    ctx: &ApplyContext,
    c: &mut Changes,
) -> LedgerResponse {
    let result = match cmd {
        LedgerCommand::UpsertNode {
            node,
            allocatable,
            shard,
        } => upsert_node(state, node, allocatable, *shard, c),
        LedgerCommand::RemoveNode { node } => remove_node(state, node, c),
        LedgerCommand::SetOvercommit { factor } => set_overcommit(state, *factor, c),
        LedgerCommand::AssignShard {
            shard,
            owner,
            epoch,
            proposer,
        } => assign_shard(state, (*shard, *owner, *epoch), *proposer, ctx, c),
        LedgerCommand::PlaceGangs {
            shard,
            epoch,
            gangs,
        } => place_gangs(state, *shard, *epoch, gangs, c),
        LedgerCommand::MarkBound { shard, epoch, pods } => {
            mark_bound(state, *shard, *epoch, pods, c)
        }
        LedgerCommand::Release {
            shard, epoch, pods, ..
        } => release(state, *shard, *epoch, pods, c),
        LedgerCommand::TxnBegin {
            txn,
            shard,
            epoch,
            participants,
            deadline_ms,
        } => txn_begin(state, txn, (*shard, *epoch), participants, *deadline_ms, c),
        LedgerCommand::TxnReserve {
            txn,
            shard,
            epoch,
            gang,
        } => txn_reserve(state, txn, *shard, *epoch, gang, c),
        LedgerCommand::TxnDecide {
            txn,
            shard,
            epoch,
            decision,
        } => txn_decide(state, txn, *shard, *epoch, *decision, c),
        LedgerCommand::ExpireAt { now_ms } => expire_at(state, *now_ms, c),
    };
    result.unwrap_or_else(LedgerResponse::Refused)
}

/// Fencing (I4): the shard must exist and `epoch` must be its current epoch.
fn fence(state: &LedgerState, shard: ShardId, epoch: Epoch) -> Result<(), Refusal> {
    let assignment = state
        .shards
        .get(&shard)
        .ok_or(Refusal::UnknownShard { shard })?;
    if assignment.epoch != epoch {
        return Err(Refusal::StaleEpoch {
            shard,
            proposed: epoch,
            current: assignment.epoch,
        });
    }
    Ok(())
}

/// Checks that `usage` fits under `allocatable` scaled by `factor`, resource by resource.
fn usage_fits(
    node: &str,
    usage: &ResourceVec,
    allocatable: &ResourceVec,
    factor: OvercommitFactor,
) -> Result<(), Refusal> {
    for (resource, committed) in usage.iter() {
        let limit = factor.limit(resource, allocatable.get(resource));
        if committed > limit {
            return Err(Refusal::CapacityBelowUsage {
                node: node.to_string(),
                resource: resource.to_string(),
                committed,
                limit,
            });
        }
    }
    Ok(())
}

fn upsert_node(
    state: &mut LedgerState,
    node: &str,
    allocatable: &ResourceVec,
    shard: ShardId,
    c: &mut Changes,
) -> Result<LedgerResponse, Refusal> {
    check_node_name(node)?;
    check_resources(format_args!("node {node}"), allocatable, MAX_QUANTITY)?;
    usage_fits(node, &state.usage_of(node), allocatable, state.overcommit)?;
    c.touch(|| StateKey::Node(node.to_string()));
    state.nodes.insert(
        node.to_string(),
        NodeRecord {
            allocatable: allocatable.clone(),
            shard,
        },
    );
    Ok(LedgerResponse::Applied)
}

fn remove_node(
    state: &mut LedgerState,
    node: &str,
    c: &mut Changes,
) -> Result<LedgerResponse, Refusal> {
    if !state.nodes.contains_key(node) {
        return Err(Refusal::UnknownNode {
            node: node.to_string(),
        });
    }
    let count = state.placements.values().filter(|p| p.node == node).count();
    if count > 0 {
        return Err(Refusal::NodeHasPlacements {
            node: node.to_string(),
            count,
        });
    }
    state.nodes.remove(node);
    c.touch(|| StateKey::Node(node.to_string()));
    Ok(LedgerResponse::Applied)
}

fn set_overcommit(
    state: &mut LedgerState,
    factor: OvercommitFactor,
    c: &mut Changes,
) -> Result<LedgerResponse, Refusal> {
    check_overcommit(factor)?;
    for (node, usage) in &state.usage {
        let allocatable = state
            .nodes
            .get(node)
            .map(|n| n.allocatable.clone())
            .unwrap_or_default();
        usage_fits(node, usage, &allocatable, factor)?;
    }
    state.overcommit = factor;
    c.touch(|| StateKey::Scalars);
    Ok(LedgerResponse::Applied)
}

fn assign_shard(
    state: &mut LedgerState,
    (shard, owner, epoch): (ShardId, u64, Epoch),
    proposer: Option<LeaderTerm>,
    ctx: &ApplyContext,
    c: &mut Changes,
) -> Result<LedgerResponse, Refusal> {
    let current = state.shards.get(&shard).copied();
    let current_epoch = current.map_or(0, |a| a.epoch);
    let max = current_epoch
        .saturating_add(MAX_EPOCH_STEP)
        .min(Epoch::MAX - 1);
    if epoch > max {
        return Err(Refusal::EpochOutOfRange {
            shard,
            proposed: epoch,
            current: current_epoch,
            max,
        });
    }
    if let Some(members) = &ctx.members
        && !members.contains(&owner)
    {
        return Err(Refusal::UnknownOwner {
            shard,
            owner,
            members: members.iter().copied().collect(),
        });
    }
    if let (Some(proposer), Some(appended_by)) = (proposer, ctx.appended_by)
        && proposer != appended_by
    {
        return Err(Refusal::DeposedLeader {
            shard,
            proposer,
            appended_by,
        });
    }
    if current == Some(ShardAssignment { owner, epoch }) {
        // A retry of the assignment in force (its first proposal committed, its answer was
        // lost): refusing it would leave the proposer believing the shard unowned.
        return Ok(LedgerResponse::Applied);
    }
    if epoch <= current_epoch {
        return Err(Refusal::EpochNotIncreasing {
            shard,
            proposed: epoch,
            current: current_epoch,
        });
    }
    state.shards.insert(shard, ShardAssignment { owner, epoch });
    c.touch(|| StateKey::Shard(shard));
    Ok(LedgerResponse::Applied)
}

/// Validates one gang against the current state; returns what it adds per node.
/// Does not write anything.
fn check_gang(
    state: &LedgerState,
    shard: ShardId,
    gang: &GangPlacement,
) -> Result<BTreeMap<String, ResourceVec>, Refusal> {
    if gang.pods.is_empty() {
        return Err(Refusal::EmptyGang {
            gang: gang.gang.clone(),
        });
    }
    if gang.pods.len() > MAX_PODS_PER_GANG {
        return Err(Refusal::TooLarge {
            what: format!("gang {} pods", gang.gang),
            count: gang.pods.len(),
            limit: MAX_PODS_PER_GANG,
        });
    }
    check_object_key("gang", &gang.gang)?;
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut adds: BTreeMap<String, ResourceVec> = BTreeMap::new();
    for pod in &gang.pods {
        check_object_key("pod", &pod.pod)?;
        if !seen.insert(pod.pod.as_str()) {
            return Err(Refusal::DuplicatePod {
                pod: pod.pod.clone(),
            });
        }
        if let Some(existing) = state.placements.get(&pod.pod) {
            return Err(Refusal::PodAlreadyPlaced {
                pod: pod.pod.clone(),
                node: existing.node.clone(),
            });
        }
        check_resources(
            format_args!("pod {}", pod.pod),
            &pod.resources,
            MAX_QUANTITY,
        )?;
        let record = state
            .nodes
            .get(&pod.node)
            .ok_or_else(|| Refusal::UnknownNode {
                node: pod.node.clone(),
            })?;
        if record.shard != shard {
            return Err(Refusal::NodeNotInShard {
                node: pod.node.clone(),
                node_shard: record.shard,
                shard,
            });
        }
        let entry = adds.entry(pod.node.clone()).or_default();
        *entry = entry
            .checked_add(&pod.resources)
            .ok_or_else(|| Refusal::Overflow {
                node: pod.node.clone(),
                resource: "sum of requests".to_string(),
            })?;
    }
    for (node, add) in &adds {
        let allocatable = state
            .nodes
            .get(node)
            .map(|n| &n.allocatable)
            .expect("every node in adds was found in state.nodes above");
        let used = state.usage_of(node);
        for (resource, requested) in add.iter() {
            let limit = state.overcommit.limit(resource, allocatable.get(resource));
            let free = limit.saturating_sub(used.get(resource)).max(0);
            if requested > free {
                return Err(Refusal::Insufficient {
                    node: node.clone(),
                    resource: resource.to_string(),
                    requested,
                    free,
                });
            }
        }
    }
    Ok(adds)
}

/// Writes a validated gang: its placements and the usage index.
fn commit_gang(
    state: &mut LedgerState,
    shard: ShardId,
    gang: &GangPlacement,
    adds: BTreeMap<String, ResourceVec>,
    placement_state: &PlacementState,
    c: &mut Changes,
) {
    for pod in &gang.pods {
        c.touch(|| StateKey::Placement(pod.pod.clone()));
        state.placements.insert(
            pod.pod.clone(),
            Placement {
                node: pod.node.clone(),
                resources: pod.resources.clone(),
                gang: gang.gang.clone(),
                shard,
                state: placement_state.clone(),
            },
        );
    }
    for (node, add) in adds {
        // check_gang proved used + add <= limit <= i64::MAX, so this cannot saturate.
        let total = state.usage_of(&node).saturating_add(&add);
        set_usage(state, &node, total, c);
    }
}

fn set_usage(state: &mut LedgerState, node: &str, usage: ResourceVec, c: &mut Changes) {
    c.touch(|| StateKey::Usage(node.to_string()));
    if usage.is_zero() {
        state.usage.remove(node);
    } else {
        state.usage.insert(node.to_string(), usage);
    }
}

/// Removes a placement and gives its resources back.
fn drop_placement(state: &mut LedgerState, pod: &str, c: &mut Changes) {
    if let Some(p) = state.placements.remove(pod) {
        c.touch(|| StateKey::Placement(pod.to_string()));
        let remaining = state.usage_of(&p.node).saturating_sub(&p.resources);
        set_usage(state, &p.node, remaining, c);
        state.released_total = state.released_total.saturating_add(1);
        c.touch(|| StateKey::Scalars);
    }
}

fn place_gangs(
    state: &mut LedgerState,
    shard: ShardId,
    epoch: Epoch,
    gangs: &[GangPlacement],
    c: &mut Changes,
) -> Result<LedgerResponse, Refusal> {
    fence(state, shard, epoch)?;
    if gangs.len() > MAX_GANGS_PER_COMMAND {
        return Err(Refusal::TooLarge {
            what: "gangs in one proposal".to_string(),
            count: gangs.len(),
            limit: MAX_GANGS_PER_COMMAND,
        });
    }
    let mut outcomes = Vec::with_capacity(gangs.len());
    for gang in gangs {
        let decision = match check_gang(state, shard, gang) {
            Ok(adds) => {
                commit_gang(state, shard, gang, adds, &PlacementState::Assumed, c);
                GangDecision::Accepted
            }
            Err(r) => GangDecision::Refused(r),
        };
        outcomes.push(GangOutcome {
            gang: gang.gang.clone(),
            decision,
        });
    }
    Ok(LedgerResponse::Gangs(outcomes))
}

fn check_pod_list(pods: &[String]) -> Result<(), Refusal> {
    if pods.len() > MAX_PODS_PER_COMMAND {
        return Err(Refusal::TooLarge {
            what: "pods in one command".to_string(),
            count: pods.len(),
            limit: MAX_PODS_PER_COMMAND,
        });
    }
    let mut seen = BTreeSet::new();
    for pod in pods {
        check_object_key("pod", pod)?;
        if !seen.insert(pod.as_str()) {
            return Err(Refusal::DuplicatePod { pod: pod.clone() });
        }
    }
    Ok(())
}

fn mark_bound(
    state: &mut LedgerState,
    shard: ShardId,
    epoch: Epoch,
    pods: &[String],
    c: &mut Changes,
) -> Result<LedgerResponse, Refusal> {
    fence(state, shard, epoch)?;
    check_pod_list(pods)?;
    let mut to_bind = Vec::new();
    let mut unchanged = 0u32;
    for pod in pods {
        let p = state
            .placements
            .get(pod)
            .ok_or_else(|| Refusal::UnknownPod { pod: pod.clone() })?;
        if p.shard != shard {
            return Err(Refusal::PodInOtherShard {
                pod: pod.clone(),
                pod_shard: p.shard,
                shard,
            });
        }
        match p.state {
            PlacementState::Assumed => to_bind.push(pod),
            PlacementState::Bound => unchanged = unchanged.saturating_add(1),
            PlacementState::Reserved { .. } => {
                return Err(Refusal::WrongPlacementState {
                    pod: pod.clone(),
                    state: p.state.name().to_string(),
                    expected: "assumed or bound".to_string(),
                });
            }
        }
    }
    let changed = u32::try_from(to_bind.len()).unwrap_or(u32::MAX);
    for pod in to_bind {
        if let Some(p) = state.placements.get_mut(pod) {
            p.state = PlacementState::Bound;
            c.touch(|| StateKey::Placement(pod.clone()));
        }
    }
    Ok(LedgerResponse::Pods { changed, unchanged })
}

fn release(
    state: &mut LedgerState,
    shard: ShardId,
    epoch: Epoch,
    pods: &[String],
    c: &mut Changes,
) -> Result<LedgerResponse, Refusal> {
    fence(state, shard, epoch)?;
    check_pod_list(pods)?;
    let mut to_drop = Vec::new();
    let mut unchanged = 0u32;
    for pod in pods {
        let Some(p) = state.placements.get(pod) else {
            unchanged = unchanged.saturating_add(1);
            continue;
        };
        if p.shard != shard {
            return Err(Refusal::PodInOtherShard {
                pod: pod.clone(),
                pod_shard: p.shard,
                shard,
            });
        }
        if let PlacementState::Reserved { .. } = p.state {
            return Err(Refusal::WrongPlacementState {
                pod: pod.clone(),
                state: p.state.name().to_string(),
                expected: "assumed or bound (a reservation ends by its transaction)".to_string(),
            });
        }
        to_drop.push(pod);
    }
    let changed = u32::try_from(to_drop.len()).unwrap_or(u32::MAX);
    for pod in to_drop {
        drop_placement(state, pod, c);
    }
    Ok(LedgerResponse::Pods { changed, unchanged })
}

fn txn_begin(
    state: &mut LedgerState,
    txn: &TxnId,
    (shard, epoch): (ShardId, Epoch),
    participants: &[ShardId],
    deadline_ms: u64,
    c: &mut Changes,
) -> Result<LedgerResponse, Refusal> {
    fence(state, shard, epoch)?;
    check_txn_id(txn)?;
    check_deadline(state, txn, deadline_ms)?;
    if state.txns.contains_key(txn) {
        return Err(Refusal::TxnExists { txn: txn.clone() });
    }
    // Decided transactions are kept until `TXN_RETENTION_MS` after their deadline (an
    // expiry removes them), so a busy ledger holds thousands: the open ones are counted
    // only when there could be too many.
    let open = if state.txns.len() < MAX_OPEN_TXNS {
        0
    } else {
        state.open_txn_count()
    };
    if open >= MAX_OPEN_TXNS {
        return Err(Refusal::TooLarge {
            what: "open transactions".to_string(),
            count: open.saturating_add(1),
            limit: MAX_OPEN_TXNS,
        });
    }
    let set: BTreeSet<ShardId> = participants.iter().copied().collect();
    let invalid = |detail: String| Refusal::InvalidParticipants {
        txn: txn.clone(),
        detail,
    };
    if set.is_empty() {
        return Err(invalid("none given".to_string()));
    }
    if set.len() != participants.len() {
        return Err(invalid("a shard is named twice".to_string()));
    }
    if set.len() > MAX_TXN_PARTICIPANTS {
        return Err(invalid(format!(
            "{} participants, limit {MAX_TXN_PARTICIPANTS}",
            set.len()
        )));
    }
    if let Some(unknown) = set.iter().find(|s| !state.shards.contains_key(s)) {
        return Err(invalid(format!("shard {unknown} is unknown")));
    }
    state.txns.insert(
        txn.clone(),
        Txn {
            coordinator: shard,
            participants: set,
            prepared: BTreeSet::new(),
            deadline_ms,
            decision: None,
            reserved: Some(BTreeSet::new()),
        },
    );
    c.touch(|| StateKey::Txn(txn.clone()));
    Ok(LedgerResponse::Applied)
}

fn txn_reserve(
    state: &mut LedgerState,
    txn: &TxnId,
    shard: ShardId,
    epoch: Epoch,
    gang: &GangPlacement,
    c: &mut Changes,
) -> Result<LedgerResponse, Refusal> {
    fence(state, shard, epoch)?;
    let t = state
        .txns
        .get(txn)
        .ok_or_else(|| Refusal::UnknownTxn { txn: txn.clone() })?;
    if t.prepared.contains(&shard) {
        return Err(already_reserved(
            state,
            txn,
            shard,
            gang,
            t.decision.is_some(),
        ));
    }
    if t.decision.is_some() {
        return Err(Refusal::TxnAlreadyDecided { txn: txn.clone() });
    }
    if !t.participants.contains(&shard) {
        return Err(Refusal::TxnNotParticipant {
            txn: txn.clone(),
            shard,
        });
    }
    let decision = match check_gang(state, shard, gang) {
        Ok(adds) => {
            let reserved = PlacementState::Reserved { txn: txn.clone() };
            commit_gang(state, shard, gang, adds, &reserved, c);
            if let Some(t) = state.txns.get_mut(txn) {
                t.prepared.insert(shard);
                if let Some(list) = t.reserved.as_mut() {
                    list.extend(gang.pods.iter().map(|p| p.pod.clone()));
                }
                c.touch(|| StateKey::Txn(txn.clone()));
            }
            GangDecision::Accepted
        }
        Err(r) => GangDecision::Refused(r),
    };
    Ok(LedgerResponse::Gangs(vec![GangOutcome {
        gang: gang.gang.clone(),
        decision,
    }]))
}

/// The answer to a reservation of a shard that already reserved. The same placements
/// again (a resend whose answer was lost) are told they landed, also once the decision
/// followed them (the coordinator's commit, or one logged behind the last reservation).
/// Other nodes (another pick: a new owner's, or a restarted one's) are refused naming a
/// pod and where the ledger holds it, since the coordinator binds what the participant's
/// reply names; after an abort nothing is held, so that is `TxnAlreadyDecided`.
fn already_reserved(
    state: &LedgerState,
    txn: &TxnId,
    shard: ShardId,
    gang: &GangPlacement,
    decided: bool,
) -> Refusal {
    let elsewhere = gang
        .pods
        .iter()
        .find_map(|p| match state.placements.get(&p.pod) {
            Some(held) if held.shard == shard && held.node == p.node => None,
            held => Some((p.pod.clone(), held.map(|h| h.node.clone()))),
        });
    match elsewhere {
        None => Refusal::TxnAlreadyReserved {
            txn: txn.clone(),
            shard,
        },
        Some((pod, Some(node))) => Refusal::PodAlreadyPlaced { pod, node },
        Some(_) if decided => Refusal::TxnAlreadyDecided { txn: txn.clone() },
        Some((pod, None)) => Refusal::UnknownPod { pod },
    }
}

fn txn_decide(
    state: &mut LedgerState,
    txn: &TxnId,
    shard: ShardId,
    epoch: Epoch,
    decision: TxnDecision,
    c: &mut Changes,
) -> Result<LedgerResponse, Refusal> {
    fence(state, shard, epoch)?;
    let t = state
        .txns
        .get(txn)
        .ok_or_else(|| Refusal::UnknownTxn { txn: txn.clone() })?;
    if t.coordinator != shard {
        return Err(Refusal::TxnNotCoordinator {
            txn: txn.clone(),
            shard,
            coordinator: t.coordinator,
        });
    }
    match t.decision {
        Some(d) if d == decision => return Ok(LedgerResponse::Applied),
        Some(_) => return Err(Refusal::TxnAlreadyDecided { txn: txn.clone() }),
        None => {}
    }
    if decision == TxnDecision::Commit {
        let missing: Vec<ShardId> = t.participants.difference(&t.prepared).copied().collect();
        if !missing.is_empty() {
            return Err(Refusal::TxnNotAllPrepared {
                txn: txn.clone(),
                missing,
            });
        }
    }
    finish_txn(state, txn, decision, c);
    Ok(LedgerResponse::Applied)
}

/// Records the decision and turns reservations into assumed placements (commit) or
/// releases them (abort).
fn finish_txn(state: &mut LedgerState, txn: &TxnId, decision: TxnDecision, c: &mut Changes) {
    let listed = state
        .txns
        .get_mut(txn)
        .and_then(|t| t.reserved.as_mut())
        .map(std::mem::take);
    let reserved_here =
        |p: &Placement| matches!(&p.state, PlacementState::Reserved { txn: t } if t == txn);
    let held: Vec<String> = match listed {
        Some(list) => list
            .into_iter()
            .filter(|pod| state.placements.get(pod).is_some_and(reserved_here))
            .collect(),
        // A record from before the lists were kept.
        None => state
            .placements
            .iter()
            .filter(|(_, p)| reserved_here(p))
            .map(|(k, _)| k.clone())
            .collect(),
    };
    for pod in held {
        match decision {
            TxnDecision::Commit => {
                if let Some(p) = state.placements.get_mut(&pod) {
                    p.state = PlacementState::Assumed;
                    c.touch(|| StateKey::Placement(pod.clone()));
                }
            }
            TxnDecision::Abort => drop_placement(state, &pod, c),
        }
    }
    if let Some(t) = state.txns.get_mut(txn) {
        t.decision = Some(decision);
        c.touch(|| StateKey::Txn(txn.clone()));
    }
}

/// The ledger's clock moves forward only, and by a bounded step: see `MAX_CLOCK_STEP_MS`.
/// An earlier time is refused rather than ignored so that a proposer whose clock lags
/// learns it (nothing would change either way: every deadline up to the ledger's clock has
/// already expired). Until the ledger has seen any time (no clock, no deadline) every
/// time is accepted: there is nothing to judge it against.
fn check_clock(state: &LedgerState, now_ms: u64) -> Result<(), Refusal> {
    if now_ms < state.clock_ms {
        return Err(Refusal::ClockBehind {
            proposed: now_ms,
            latest: state.clock_ms,
        });
    }
    if now_ms > MAX_CLOCK_MS {
        return Err(Refusal::ClockJump {
            proposed: now_ms,
            anchor: 0,
            max_step: MAX_CLOCK_MS,
        });
    }
    if within_a_step_of_the_clock(state, now_ms) {
        return Ok(());
    }
    let anchor = clock_anchor(state);
    if anchor > 0 && now_ms > anchor.saturating_add(MAX_CLOCK_STEP_MS) {
        return Err(Refusal::ClockJump {
            proposed: now_ms,
            anchor,
            max_step: MAX_CLOCK_STEP_MS,
        });
    }
    Ok(())
}

/// A time at most one step past the ledger's clock is within a step of the anchor too (the
/// anchor is never earlier than the clock), so it is judged without looking for the latest
/// deadline among every transaction kept: the usual case, and one `TxnBegin` each.
fn within_a_step_of_the_clock(state: &LedgerState, t: u64) -> bool {
    t <= state.clock_ms.saturating_add(MAX_CLOCK_STEP_MS)
}

/// The later of the ledger's clock and its latest transaction deadline: the time a new
/// clock or deadline is judged against.
fn clock_anchor(state: &LedgerState) -> u64 {
    let latest_deadline = state
        .txns
        .values()
        .map(|t| t.deadline_ms)
        .max()
        .unwrap_or(0);
    state.clock_ms.max(latest_deadline)
}

/// A deadline is bounded as `ExpireAt` is: `check_clock` anchors on the latest deadline,
/// so a deadline of `u64::MAX` would otherwise let the clock jump there next.
fn check_deadline(state: &LedgerState, txn: &TxnId, deadline_ms: u64) -> Result<(), Refusal> {
    if deadline_ms > MAX_CLOCK_MS {
        return Err(Refusal::DeadlineOutOfRange {
            txn: txn.clone(),
            deadline_ms,
            anchor: 0,
            max_step: MAX_CLOCK_MS,
        });
    }
    if within_a_step_of_the_clock(state, deadline_ms) {
        return Ok(());
    }
    let anchor = clock_anchor(state);
    if anchor > 0 && deadline_ms > anchor.saturating_add(MAX_CLOCK_STEP_MS) {
        return Err(Refusal::DeadlineOutOfRange {
            txn: txn.clone(),
            deadline_ms,
            anchor,
            max_step: MAX_CLOCK_STEP_MS,
        });
    }
    Ok(())
}

fn expire_at(
    state: &mut LedgerState,
    now_ms: u64,
    c: &mut Changes,
) -> Result<LedgerResponse, Refusal> {
    check_clock(state, now_ms)?;
    if state.clock_ms != now_ms {
        state.clock_ms = now_ms;
        c.touch(|| StateKey::Scalars);
    }
    let expired: Vec<TxnId> = state
        .txns
        .iter()
        .filter(|(_, t)| t.decision.is_none() && t.deadline_ms <= now_ms)
        .map(|(k, _)| k.clone())
        .collect();
    for txn in &expired {
        finish_txn(state, txn, TxnDecision::Abort, c);
    }
    state.txns.retain(|id, t| {
        let keep = t.decision.is_none() || t.deadline_ms.saturating_add(TXN_RETENTION_MS) > now_ms;
        if !keep {
            c.touch(|| StateKey::Txn(id.clone()));
        }
        keep
    });
    Ok(LedgerResponse::Expired { aborted: expired })
}
