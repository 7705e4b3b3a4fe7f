//! `Participant`: a shard owner's side of two-phase reservation, a pure state machine.
//!
//! ```text
//!  Prepare ─► local checks ──fail──► Reply(Refused)
//!                │ ok
//!                ▼
//!           Picking ─Pick(hints)─► runtime ─Picked(Err)─► Refused ─► Reply(Refused)
//!                                     │ Picked(Ok(placements))
//!                                     ▼
//!           Reserving ─propose TxnReserve(placements)─► Reserved ──► Prepared ─► Reply(Prepared{placements})
//!                │                                  └─► RefusedReserve ─► Refused ─► Reply(Refused)
//!                │ asked to commit: TxnReserve, TxnDecide(Commit) in one proposal
//!                └─► Reserved ─► Committing ─Decided(Commit)─► Prepared ─► Reply(Prepared{committed})
//!                                     └─other answer─► Prepared ─► Reply(Prepared{not committed})
//!  Decided / deadline + linger ─► forgotten
//! ```
//!
//! The participant asked last in an ascending transaction is asked to log the
//! coordinator's commit behind its reservation (`Prepare::commit_at`): it proposes both
//! in one batch and answers after both are answered. Whether the commit applied is
//! the ledger's call (every reservation in, the coordinator's epoch current); the reply
//! says which, and the coordinator proposes the decision itself when none did.
//!
//! The coordinator's nodes are hints: between its plan and this prepare, this shard's owner
//! may have filled them with its own gangs. So the participant asks the runtime to pick
//! nodes of its own pool (the hint first when it still fits) and reserves what was picked;
//! the reply names the nodes, and the coordinator binds those.
//!
//! The ledger is the judge of capacity, pool membership and the epoch (I4); the
//! participant's own checks are the ones it can make without the ledger: the deadline, an
//! empty part, its bound on transactions in flight, and that a pick covers exactly the
//! pods asked for. A repeated prepare (the coordinator resends when an answer is lost)
//! repeats the answer, re-proposes the picked placements while the first proposal's
//! result is unknown (`TxnAlreadyReserved` then means reserved), and never picks again
//! once a pick was answered: the nodes of a transaction are chosen once.

use std::collections::BTreeMap;

use phalanx_statestore::ledger::{Epoch, ShardId, TxnDecision, TxnId};
use phalanx_statestore::{GangPlacement, LedgerCommand, PodPlacement};

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
            max_in_flight: 256,
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
    /// `Pick` emitted, no answer yet.
    Picking,
    /// `TxnReserve` of these placements proposed, result unknown.
    Reserving(Vec<PodPlacement>),
    /// Reserved on these placements; the commit proposed behind the reservation is not
    /// answered yet.
    Committing(Vec<PodPlacement>),
    /// Reserved in the ledger on these placements (and whether this participant logged
    /// the commit).
    Prepared(Vec<PodPlacement>, bool),
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
            ParticipantEvent::Picked { txn, result } => self.on_picked(&txn, result, &mut out),
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
                // The pick was lost (its replica paused, say) or is still on its way; a
                // second answer is ignored, so asking again cannot pick twice.
                PartPhase::Picking => out.push(pick_command(&t.prepare)),
                PartPhase::Reserving(placements) => {
                    out.extend(self.reserve_commands(&t.prepare, placements))
                }
                PartPhase::Committing(placements) => {
                    out.extend(self.reserve_commands(&t.prepare, placements))
                }
                PartPhase::Prepared(placements, committed) => {
                    out.push(self.reply(&p, prepared(placements, *committed)))
                }
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
                out.push(pick_command(&p));
                self.txns.insert(
                    p.txn.clone(),
                    PartTxn {
                        prepare: p,
                        phase: PartPhase::Picking,
                    },
                );
            }
        }
    }

    /// The runtime picked nodes (or found none): reserve them, or refuse. Only the first
    /// answer to a pick counts.
    fn on_picked(
        &mut self,
        txn: &TxnId,
        result: Result<Vec<PodPlacement>, String>,
        out: &mut Vec<ParticipantCommand>,
    ) {
        let Some(t) = self.txns.get(txn) else {
            return;
        };
        if t.phase != PartPhase::Picking {
            return;
        }
        let result = result.and_then(|picked| self.covers_the_part(&t.prepare, picked));
        let (phase, commands) = match result {
            Ok(placements) => (
                PartPhase::Reserving(placements.clone()),
                self.reserve_commands(&t.prepare, &placements),
            ),
            Err(reason) => (
                PartPhase::Refused(reason.clone()),
                vec![self.reply(&t.prepare, PrepareReply::Refused(reason))],
            ),
        };
        out.extend(commands);
        if let Some(t) = self.txns.get_mut(txn) {
            t.phase = phase;
        }
    }

    /// A pick must place exactly the part's pods, each once: the coordinator binds what
    /// the reply names, so a pod missing here would leave the gang partly bound.
    fn covers_the_part(
        &self,
        p: &Prepare,
        picked: Vec<PodPlacement>,
    ) -> Result<Vec<PodPlacement>, String> {
        let mut wanted: Vec<&str> = p.placements.iter().map(|x| x.pod.as_str()).collect();
        let mut got: Vec<&str> = picked.iter().map(|x| x.pod.as_str()).collect();
        wanted.sort_unstable();
        got.sort_unstable();
        if wanted == got {
            Ok(picked)
        } else {
            Err(format!(
                "shard {}: the pick placed pods {got:?}, the part has {wanted:?}",
                self.shard
            ))
        }
    }

    /// The answer to the reservation, or to the commit proposed behind it. With a commit
    /// behind it, the reply waits for the commit's answer, which comes from the same
    /// proposal.
    fn on_ledger(&mut self, txn: &TxnId, result: LedgerResult, out: &mut Vec<ParticipantCommand>) {
        let Some(t) = self.txns.get(txn) else {
            return;
        };
        let commits = t.prepare.commit_at.is_some();
        let (phase, reply) = match (&t.phase, result) {
            (PartPhase::Reserving(placements), LedgerResult::Reserved { .. }) if commits => {
                (PartPhase::Committing(placements.clone()), None)
            }
            (PartPhase::Reserving(placements), LedgerResult::Reserved { .. }) => (
                PartPhase::Prepared(placements.clone(), false),
                Some(prepared(placements, false)),
            ),
            (PartPhase::Reserving(_), LedgerResult::RefusedReserve { reason, .. }) => {
                let r = reason.to_string();
                (
                    PartPhase::Refused(r.clone()),
                    Some(PrepareReply::Refused(r)),
                )
            }
            (PartPhase::Committing(placements), LedgerResult::Decided(d)) => {
                let committed = d == TxnDecision::Commit;
                (
                    PartPhase::Prepared(placements.clone(), committed),
                    Some(prepared(placements, committed)),
                )
            }
            (PartPhase::Committing(placements), LedgerResult::DecideRefused(_)) => (
                PartPhase::Prepared(placements.clone(), false),
                Some(prepared(placements, false)),
            ),
            _ => return,
        };
        out.extend(reply.map(|r| self.reply(&t.prepare, r)));
        if let Some(t) = self.txns.get_mut(txn) {
            t.phase = phase;
        }
    }

    /// `TxnReserve` of `placements`, and the coordinator's commit behind it when this
    /// participant was asked to log it.
    fn reserve_commands(
        &self,
        p: &Prepare,
        placements: &[PodPlacement],
    ) -> Vec<ParticipantCommand> {
        let reserve = LedgerCommand::TxnReserve {
            txn: p.txn.clone(),
            shard: self.shard,
            epoch: self.epoch,
            gang: GangPlacement {
                gang: p.gang.clone(),
                pods: placements.to_vec(),
            },
        };
        let commit = p.commit_at.map(|epoch| LedgerCommand::TxnDecide {
            txn: p.txn.clone(),
            shard: p.coordinator,
            epoch,
            decision: TxnDecision::Commit,
        });
        std::iter::once(reserve)
            .chain(commit)
            .map(ParticipantCommand::ProposeToLedger)
            .collect()
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

fn prepared(placements: &[PodPlacement], committed: bool) -> PrepareReply {
    PrepareReply::Prepared {
        placements: placements.to_vec(),
        committed,
    }
}

fn pick_command(p: &Prepare) -> ParticipantCommand {
    ParticipantCommand::Pick {
        txn: p.txn.clone(),
        wanted: p.placements.clone(),
    }
}
