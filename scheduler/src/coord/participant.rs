//! `Participant`: a shard owner's side of two-phase reservation, a pure state machine.
//!
//! ```text
//!  Prepare ─► local checks ──fail──► Reply(Refused)
//!                │ ok
//!                ▼
//!           Reserving ─propose TxnReserve─► Reserved ──► Prepared ─► Reply(Prepared)
//!                                       └─► RefusedReserve ─► Refused ─► Reply(Refused)
//!  Decided / deadline + linger ─► forgotten
//! ```
//!
//! The ledger is the judge of capacity, pool membership and the epoch (I4); the
//! participant's own checks are the ones it can make without the ledger: the deadline, an
//! empty part, and its bound on transactions in flight. A repeated prepare (the
//! coordinator resends when an answer is lost) repeats the answer, or re-proposes while
//! the first proposal's result is unknown (`TxnAlreadyReserved` then means reserved).

use std::collections::BTreeMap;

use phalanx_statestore::ledger::{Epoch, ShardId, TxnId};
use phalanx_statestore::{GangPlacement, LedgerCommand};

use super::coordinator::CoordConfigError;
use super::messages::{LedgerResult, ParticipantCommand, ParticipantEvent, Prepare, PrepareReply};

/// Limits of a participant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParticipantConfig {
    /// Transactions this shard takes part in at once; more are refused with a reason.
    pub max_in_flight: usize,
    /// A transaction is forgotten this long after its deadline if no decision arrived.
    pub linger_ms: u64,
}

impl Default for ParticipantConfig {
    fn default() -> Self {
        Self {
            max_in_flight: 64,
            linger_ms: 1_000,
        }
    }
}

impl ParticipantConfig {
    /// Checks every field; the error names the offending one.
    pub fn validate(self) -> Result<Self, CoordConfigError> {
        if self.max_in_flight == 0 {
            return Err(CoordConfigError::Zero {
                field: "participant.maxInFlight",
            });
        }
        Ok(self)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum PartPhase {
    Reserving,
    Prepared,
    Refused(String),
}

#[derive(Clone, Debug)]
struct PartTxn {
    prepare: Prepare,
    phase: PartPhase,
}

/// The participant of one shard at one epoch.
#[derive(Clone, Debug)]
pub struct Participant {
    shard: ShardId,
    epoch: Epoch,
    config: ParticipantConfig,
    now_ms: u64,
    txns: BTreeMap<TxnId, PartTxn>,
}

impl Participant {
    /// A participant for `shard`, owned at `epoch`.
    pub fn new(shard: ShardId, epoch: Epoch, config: ParticipantConfig) -> Self {
        Self {
            shard,
            epoch,
            config,
            now_ms: 0,
            txns: BTreeMap::new(),
        }
    }

    /// Its shard.
    pub fn shard(&self) -> ShardId {
        self.shard
    }

    /// Its epoch.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// Transactions it is tracking.
    pub fn in_flight(&self) -> usize {
        self.txns.len()
    }

    /// Reacts to one event.
    pub fn step(&mut self, event: ParticipantEvent) -> Vec<ParticipantCommand> {
        let mut out = Vec::new();
        match event {
            ParticipantEvent::Prepare(p) => self.on_prepare(p, &mut out),
            ParticipantEvent::LedgerApplied { txn, result } => {
                self.on_ledger(&txn, result, &mut out)
            }
            ParticipantEvent::Decided { txn, .. } => {
                self.txns.remove(&txn);
            }
            ParticipantEvent::Tick { now_ms } => {
                self.now_ms = self.now_ms.max(now_ms);
                let (now, linger) = (self.now_ms, self.config.linger_ms);
                self.txns
                    .retain(|_, t| t.prepare.deadline_ms.saturating_add(linger) > now);
            }
        }
        out
    }

    fn on_prepare(&mut self, p: Prepare, out: &mut Vec<ParticipantCommand>) {
        if let Some(t) = self.txns.get(&p.txn) {
            match &t.phase {
                PartPhase::Reserving => out.push(self.reserve_command(&t.prepare)),
                PartPhase::Prepared => out.push(self.reply(&p, PrepareReply::Prepared)),
                PartPhase::Refused(r) => out.push(self.reply(&p, PrepareReply::Refused(r.clone()))),
            }
            return;
        }
        let refusal = if p.deadline_ms <= self.now_ms {
            Some(format!(
                "shard {}: deadline {} ms passed (now {} ms)",
                self.shard, p.deadline_ms, self.now_ms
            ))
        } else if p.placements.is_empty() {
            Some(format!("shard {}: no pods to reserve", self.shard))
        } else if self.txns.len() >= self.config.max_in_flight {
            Some(format!(
                "shard {}: {} transactions in flight (limit {})",
                self.shard,
                self.txns.len(),
                self.config.max_in_flight
            ))
        } else {
            None
        };
        match refusal {
            Some(r) => out.push(self.reply(&p, PrepareReply::Refused(r))),
            None => {
                out.push(self.reserve_command(&p));
                self.txns.insert(
                    p.txn.clone(),
                    PartTxn {
                        prepare: p,
                        phase: PartPhase::Reserving,
                    },
                );
            }
        }
    }

    fn on_ledger(&mut self, txn: &TxnId, result: LedgerResult, out: &mut Vec<ParticipantCommand>) {
        let Some(t) = self.txns.get(txn) else {
            return;
        };
        if t.phase != PartPhase::Reserving {
            return;
        }
        let (phase, reply) = match result {
            LedgerResult::Reserved { .. } => (PartPhase::Prepared, PrepareReply::Prepared),
            LedgerResult::RefusedReserve { reason, .. } => {
                let r = reason.to_string();
                (PartPhase::Refused(r.clone()), PrepareReply::Refused(r))
            }
            _ => return,
        };
        out.push(self.reply(&t.prepare, reply));
        if let Some(t) = self.txns.get_mut(txn) {
            t.phase = phase;
        }
    }

    fn reserve_command(&self, p: &Prepare) -> ParticipantCommand {
        ParticipantCommand::ProposeToLedger(LedgerCommand::TxnReserve {
            txn: p.txn.clone(),
            shard: self.shard,
            epoch: self.epoch,
            gang: GangPlacement {
                gang: p.gang.clone(),
                pods: p.placements.clone(),
            },
        })
    }

    fn reply(&self, p: &Prepare, reply: PrepareReply) -> ParticipantCommand {
        ParticipantCommand::Reply {
            to: p.coordinator,
            txn: p.txn.clone(),
            shard: self.shard,
            reply,
        }
    }
}
