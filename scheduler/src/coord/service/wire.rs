//! Conversions between the 2PC messages and `phalanx.coord.v1` (proto/proto/coord.proto).
//!
//! Decoding never trusts the peer: every field is checked and a malformed one is an error
//! naming the field and the value, never a panic.

use std::collections::HashMap;

use phalanx_proto::coord as pb;
use phalanx_statestore::ledger::{Epoch, ShardId, TxnDecision, TxnId};
use phalanx_statestore::{PodPlacement, ResourceVec};
use thiserror::Error;

use crate::coord::{CoordEvent, ParticipantEvent, Phase, Prepare, PrepareReply};

/// A field of a received message that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{field}: {problem}")]
pub struct WireError {
    /// The field, as a path (`placements[2].resources[cpu]`).
    pub field: String,
    /// What is wrong with its value.
    pub problem: String,
}

pub(crate) fn malformed(field: impl Into<String>, problem: impl Into<String>) -> WireError {
    WireError {
        field: field.into(),
        problem: problem.into(),
    }
}

/// Where a message goes: a shard, at the epoch the sender believes its owner holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Route {
    /// The addressed shard.
    pub shard: ShardId,
    /// The epoch at which the receiver is expected to own it.
    pub epoch: Epoch,
}

/// A message between shard owners, as the runtime sends it and the receiver decodes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoordMessage {
    /// Coordinator to participant: reserve your part.
    Prepare {
        /// The participant shard.
        route: Route,
        /// The epoch at which the sender owns the coordinator shard (`prepare.coordinator`).
        coordinator_epoch: Epoch,
        /// The prepare.
        prepare: Prepare,
    },
    /// Participant to coordinator: its answer.
    Reply {
        /// The coordinator shard.
        route: Route,
        /// Transaction.
        txn: TxnId,
        /// The answering participant shard.
        participant: ShardId,
        /// The epoch at which the sender owns it.
        participant_epoch: Epoch,
        /// The answer.
        reply: PrepareReply,
    },
    /// Coordinator to participant: the logged decision.
    Decide {
        /// The participant shard.
        route: Route,
        /// Transaction.
        txn: TxnId,
        /// The coordinator shard.
        coordinator: ShardId,
        /// The epoch at which the sender owns it.
        coordinator_epoch: Epoch,
        /// The decision.
        decision: TxnDecision,
    },
}

/// A received message as the addressed state machine takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// For the coordinator of `route.shard`.
    Coordinator {
        /// Shard and epoch addressed.
        route: Route,
        /// The event.
        event: CoordEvent,
    },
    /// For the participant of `route.shard`.
    Participant {
        /// Shard and epoch addressed.
        route: Route,
        /// The event.
        event: ParticipantEvent,
    },
}

impl CoordMessage {
    /// Where it goes.
    pub fn route(&self) -> Route {
        match self {
            Self::Prepare { route, .. }
            | Self::Reply { route, .. }
            | Self::Decide { route, .. } => *route,
        }
    }

    /// The event it is for its receiver.
    pub fn into_delivery(self) -> Delivery {
        match self {
            Self::Prepare { route, prepare, .. } => Delivery::Participant {
                route,
                event: ParticipantEvent::Prepare(prepare),
            },
            Self::Reply {
                route,
                txn,
                participant,
                reply,
                ..
            } => Delivery::Coordinator {
                route,
                event: CoordEvent::ParticipantReply {
                    txn,
                    shard: participant,
                    reply,
                },
            },
            Self::Decide {
                route,
                txn,
                decision,
                ..
            } => Delivery::Participant {
                route,
                event: ParticipantEvent::Decided { txn, decision },
            },
        }
    }
}

impl Delivery {
    /// Shard and epoch addressed.
    pub fn route(&self) -> Route {
        match self {
            Self::Coordinator { route, .. } | Self::Participant { route, .. } => *route,
        }
    }
}

// ---- encoding (our own values: infallible) ----

fn route_to_wire(r: Route) -> Option<pb::Route> {
    Some(pb::Route {
        to_shard: r.shard,
        to_epoch: r.epoch,
    })
}

/// A placement on the wire.
pub fn placement_to_wire(p: &PodPlacement) -> pb::PodPlacement {
    pb::PodPlacement {
        pod: p.pod.clone(),
        node: p.node.clone(),
        resources: p
            .resources
            .iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    }
}

/// A decision on the wire.
pub fn decision_to_wire(d: TxnDecision) -> pb::Decision {
    match d {
        TxnDecision::Commit => pb::Decision::Commit,
        TxnDecision::Abort => pb::Decision::Abort,
    }
}

/// `Prepare`'s request.
pub fn prepare_to_wire(route: Route, coordinator_epoch: Epoch, p: &Prepare) -> pb::PrepareRequest {
    pb::PrepareRequest {
        route: route_to_wire(route),
        txn: p.txn.clone(),
        coordinator_shard: p.coordinator,
        coordinator_epoch,
        gang: p.gang.clone(),
        placements: p.placements.iter().map(placement_to_wire).collect(),
        deadline_ms: p.deadline_ms,
        commit_behind_reserve: p.commit_at.is_some(),
    }
}

/// `PrepareReply`'s request.
pub fn reply_to_wire(
    route: Route,
    txn: &str,
    participant: ShardId,
    participant_epoch: Epoch,
    reply: &PrepareReply,
) -> pb::PrepareReplyRequest {
    let answer = match reply {
        // The nodes the participant picked in its own pool and reserved: the coordinator
        // binds these, not its hints.
        PrepareReply::Prepared {
            placements,
            committed,
        } => pb::prepare_reply_request::Answer::Prepared(pb::Prepared {
            placements: placements.iter().map(placement_to_wire).collect(),
            commit_logged: *committed,
        }),
        PrepareReply::Refused(reason) => pb::prepare_reply_request::Answer::Refused(pb::Refused {
            reason: reason.clone(),
        }),
    };
    pb::PrepareReplyRequest {
        route: route_to_wire(route),
        txn: txn.to_string(),
        participant_shard: participant,
        participant_epoch,
        answer: Some(answer),
    }
}

/// `Decide`'s request.
pub fn decide_to_wire(
    route: Route,
    txn: &str,
    coordinator: ShardId,
    coordinator_epoch: Epoch,
    decision: TxnDecision,
) -> pb::DecideRequest {
    pb::DecideRequest {
        route: route_to_wire(route),
        txn: txn.to_string(),
        coordinator_shard: coordinator,
        coordinator_epoch,
        decision: decision_to_wire(decision).into(),
    }
}

/// `Query`'s answer: `None` is "not in flight here".
pub fn phase_to_wire(phase: Option<Phase>) -> pb::QueryReply {
    let (phase, decision) = match phase {
        None => (pb::TxnPhase::NotInFlight, pb::Decision::Unspecified),
        Some(Phase::Beginning) => (pb::TxnPhase::Beginning, pb::Decision::Unspecified),
        Some(Phase::Preparing) => (pb::TxnPhase::Preparing, pb::Decision::Unspecified),
        Some(Phase::Deciding(d)) => (pb::TxnPhase::Deciding, decision_to_wire(d)),
        // The commit is logged, the bind waits for placements: to the one asking, a
        // commit under way. The wire keeps the phases every version knows.
        Some(Phase::Committed) => (
            pb::TxnPhase::Deciding,
            decision_to_wire(TxnDecision::Commit),
        ),
    };
    pb::QueryReply {
        phase: phase.into(),
        decision: decision.into(),
    }
}

// ---- decoding (a peer's values: checked) ----

/// The route of a request; epochs start at 1, so 0 is a sender's bug.
pub fn route_from_wire(r: Option<&pb::Route>) -> Result<Route, WireError> {
    let r = r.ok_or_else(|| malformed("route", "missing"))?;
    Ok(Route {
        shard: r.to_shard,
        epoch: epoch_from_wire("route.to_epoch", r.to_epoch)?,
    })
}

fn epoch_from_wire(field: &str, epoch: Epoch) -> Result<Epoch, WireError> {
    if epoch == 0 {
        return Err(malformed(field, "0 (epochs start at 1)"));
    }
    Ok(epoch)
}

fn non_empty(field: &str, value: &str) -> Result<String, WireError> {
    if value.is_empty() {
        return Err(malformed(field, "empty"));
    }
    Ok(value.to_string())
}

/// A placement from the wire; `field` names it in errors (`placements[3]`).
pub fn placement_from_wire(field: &str, p: &pb::PodPlacement) -> Result<PodPlacement, WireError> {
    let pod = non_empty(&format!("{field}.pod"), &p.pod)?;
    if !pod.contains('/') {
        return Err(malformed(
            format!("{field}.pod"),
            format!("{pod:?} is not namespace/name"),
        ));
    }
    let node = non_empty(&format!("{field}.node"), &p.node)?;
    Ok(PodPlacement {
        pod,
        node,
        resources: resources_from_wire(field, &p.resources)?,
    })
}

fn resources_from_wire(
    field: &str,
    resources: &HashMap<String, i64>,
) -> Result<ResourceVec, WireError> {
    let mut v = ResourceVec::new();
    for (name, q) in resources {
        if name.is_empty() {
            return Err(malformed(
                format!("{field}.resources"),
                "a resource with an empty name",
            ));
        }
        if *q < 0 {
            return Err(malformed(
                format!("{field}.resources[{name}]"),
                format!("{q} (quantities are never negative)"),
            ));
        }
        v.set(name, *q);
    }
    Ok(v)
}

fn placements_from_wire(
    field: &str,
    ps: &[pb::PodPlacement],
) -> Result<Vec<PodPlacement>, WireError> {
    ps.iter()
        .enumerate()
        .map(|(i, p)| placement_from_wire(&format!("{field}[{i}]"), p))
        .collect()
}

/// A decision from the wire.
pub fn decision_from_wire(field: &str, raw: i32) -> Result<TxnDecision, WireError> {
    match pb::Decision::try_from(raw) {
        Ok(pb::Decision::Commit) => Ok(TxnDecision::Commit),
        Ok(pb::Decision::Abort) => Ok(TxnDecision::Abort),
        Ok(pb::Decision::Unspecified) => Err(malformed(field, "DECISION_UNSPECIFIED")),
        Err(_) => Err(malformed(field, format!("{raw} is no Decision"))),
    }
}

/// A prepare from the wire.
pub fn prepare_from_wire(r: &pb::PrepareRequest) -> Result<CoordMessage, WireError> {
    let coordinator_epoch = epoch_from_wire("coordinator_epoch", r.coordinator_epoch)?;
    Ok(CoordMessage::Prepare {
        route: route_from_wire(r.route.as_ref())?,
        coordinator_epoch,
        prepare: Prepare {
            txn: non_empty("txn", &r.txn)?,
            coordinator: r.coordinator_shard,
            gang: non_empty("gang", &r.gang)?,
            placements: placements_from_wire("placements", &r.placements)?,
            deadline_ms: r.deadline_ms,
            commit_at: r.commit_behind_reserve.then_some(coordinator_epoch),
        },
    })
}

/// A participant's answer from the wire.
pub fn reply_from_wire(r: &pb::PrepareReplyRequest) -> Result<CoordMessage, WireError> {
    let reply = match &r.answer {
        None => return Err(malformed("answer", "missing (prepared or refused)")),
        Some(pb::prepare_reply_request::Answer::Prepared(p)) => {
            // A participant that prepared reserved its part: at least one pod, on the
            // nodes it picked (the coordinator checks they are the pods it asked for).
            if p.placements.is_empty() {
                return Err(malformed(
                    "prepared.placements",
                    "empty (a prepared participant names the nodes it reserved)",
                ));
            }
            PrepareReply::Prepared {
                placements: placements_from_wire("prepared.placements", &p.placements)?,
                committed: p.commit_logged,
            }
        }
        Some(pb::prepare_reply_request::Answer::Refused(f)) => {
            PrepareReply::Refused(non_empty("refused.reason", &f.reason)?)
        }
    };
    Ok(CoordMessage::Reply {
        route: route_from_wire(r.route.as_ref())?,
        txn: non_empty("txn", &r.txn)?,
        participant: r.participant_shard,
        participant_epoch: epoch_from_wire("participant_epoch", r.participant_epoch)?,
        reply,
    })
}

/// A decision message from the wire.
pub fn decide_from_wire(r: &pb::DecideRequest) -> Result<CoordMessage, WireError> {
    Ok(CoordMessage::Decide {
        route: route_from_wire(r.route.as_ref())?,
        txn: non_empty("txn", &r.txn)?,
        coordinator: r.coordinator_shard,
        coordinator_epoch: epoch_from_wire("coordinator_epoch", r.coordinator_epoch)?,
        decision: decision_from_wire("decision", r.decision)?,
    })
}

/// `Query`'s answer from the wire: `None` is "not in flight there".
pub fn phase_from_wire(r: &pb::QueryReply) -> Result<Option<Phase>, WireError> {
    let phase = pb::TxnPhase::try_from(r.phase)
        .map_err(|_| malformed("phase", format!("{} is no TxnPhase", r.phase)))?;
    let undecided = |p: Phase| {
        if r.decision == i32::from(pb::Decision::Unspecified) {
            Ok(Some(p))
        } else {
            Err(malformed(
                "decision",
                format!("{} set with phase {}", r.decision, phase.as_str_name()),
            ))
        }
    };
    match phase {
        pb::TxnPhase::Unspecified => Err(malformed("phase", "TXN_PHASE_UNSPECIFIED")),
        pb::TxnPhase::NotInFlight => {
            if r.decision == i32::from(pb::Decision::Unspecified) {
                Ok(None)
            } else {
                Err(malformed(
                    "decision",
                    format!("{} set with phase TXN_PHASE_NOT_IN_FLIGHT", r.decision),
                ))
            }
        }
        pb::TxnPhase::Beginning => undecided(Phase::Beginning),
        pb::TxnPhase::Preparing => undecided(Phase::Preparing),
        pb::TxnPhase::Deciding => Ok(Some(Phase::Deciding(decision_from_wire(
            "decision", r.decision,
        )?))),
    }
}

/// A message on the wire, one variant per one-way RPC.
#[derive(Clone, Debug, PartialEq)]
pub enum WireMessage {
    /// `Prepare`.
    Prepare(pb::PrepareRequest),
    /// `PrepareReply`.
    Reply(pb::PrepareReplyRequest),
    /// `Decide`.
    Decide(pb::DecideRequest),
}

impl CoordMessage {
    /// Its request.
    pub fn to_wire(&self) -> WireMessage {
        match self {
            Self::Prepare {
                route,
                coordinator_epoch,
                prepare,
            } => WireMessage::Prepare(prepare_to_wire(*route, *coordinator_epoch, prepare)),
            Self::Reply {
                route,
                txn,
                participant,
                participant_epoch,
                reply,
            } => WireMessage::Reply(reply_to_wire(
                *route,
                txn,
                *participant,
                *participant_epoch,
                reply,
            )),
            Self::Decide {
                route,
                txn,
                coordinator,
                coordinator_epoch,
                decision,
            } => WireMessage::Decide(decide_to_wire(
                *route,
                txn,
                *coordinator,
                *coordinator_epoch,
                *decision,
            )),
        }
    }

    /// Decodes a request.
    pub fn from_wire(m: &WireMessage) -> Result<Self, WireError> {
        match m {
            WireMessage::Prepare(r) => prepare_from_wire(r),
            WireMessage::Reply(r) => reply_from_wire(r),
            WireMessage::Decide(r) => decide_from_wire(r),
        }
    }
}

impl WireMessage {
    /// As one message of a `Deliver` batch.
    pub fn into_envelope(self) -> pb::Envelope {
        use pb::envelope::Message;
        let message = match self {
            Self::Prepare(r) => Message::Prepare(r),
            Self::Reply(r) => Message::Reply(r),
            Self::Decide(r) => Message::Decide(r),
        };
        pb::Envelope {
            message: Some(message),
        }
    }
}

/// Decodes message `index` of a `Deliver` batch; an error names it
/// (`messages[3].prepare.placements[0].node`).
pub fn envelope_from_wire(index: usize, e: &pb::Envelope) -> Result<CoordMessage, WireError> {
    use pb::envelope::Message;
    let (kind, decoded) = match &e.message {
        None => {
            return Err(malformed(
                format!("messages[{index}]"),
                "empty (no message set)",
            ));
        }
        Some(Message::Prepare(r)) => ("prepare", prepare_from_wire(r)),
        Some(Message::Reply(r)) => ("reply", reply_from_wire(r)),
        Some(Message::Decide(r)) => ("decide", decide_from_wire(r)),
    };
    decoded.map_err(|e| malformed(format!("messages[{index}].{kind}.{}", e.field), e.problem))
}
