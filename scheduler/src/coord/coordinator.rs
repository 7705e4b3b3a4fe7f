//! `Coordinator`: the two-phase reservation coordinator of one shard, a pure state machine
//! `step(event) -> commands`. The runtime performs the commands and feeds back results.
//!
//! ```text
//!  Start ─► [queued] ─slot─► Beginning ─Begun─► Preparing ─all Prepared─► Deciding(commit) ─Decided─► Bind, Report
//!                               │                  │  │ any Refused / deadline           │
//!                               │ BeginRefused     │  └──────────────► Deciding(abort) ──Decided─► SendDecision, Report
//!                               ▼                  │                        ▲
//!                           Report(Rejected)       │                        └── deadline (from Beginning too)
//!                                                  │ Prepared { committed: true } from the last participant
//!                                                  ▼
//!                                              Committed ─every part's placements known─► Bind, Report
//! ```
//!
//! A decision once proposed is never changed by this coordinator (the ledger makes it
//! final; `TxnAlreadyDecided` tells it the ledger's expiry aborted first).
//!
//! In ascending order the last participant asked logs the commit itself, behind its own
//! reservation in the same proposal ([`Prepare::commit_at`]): the ledger applies it only
//! if every reservation is in by then, so it is the commit the coordinator would have
//! proposed one proposal later, and a refused one leaves the coordinator to decide as
//! before. A commit so logged while this coordinator proposed an abort at its deadline
//! comes back as `TxnAlreadyDecided`, and the bind waits for the placements it lacks.
//!
//! The plan's nodes are hints sent with each prepare; every participant's owner picks the
//! nodes of its pool and its `Prepared` reply names them. A commit binds those.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use phalanx_statestore::ledger::command::MAX_TXN_PARTICIPANTS;
use phalanx_statestore::ledger::{Epoch, ReplicaId, ShardId, TxnDecision, TxnId};
use phalanx_statestore::{LedgerCommand, PodPlacement, Refusal};
use thiserror::Error;

use super::messages::{
    CoordCommand, CoordEvent, LedgerResult, Prepare, PrepareReply, RecoveredTxn, StartTxn,
    TxnOutcome,
};

/// In which order participants are asked to prepare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrepareOrder {
    /// Lowest shard first, the next participants asked once the last are prepared.
    /// Reservations never wait, so with a global order no two gangs can each hold what the
    /// other needs: among competing gangs one gets through. A run of consecutive
    /// participants with one owner ([`StartTxn::owners`]) is asked at once, since that
    /// owner reserves them in shard order in one proposal; a shard whose owner is not
    /// known is asked alone. Latency: a prepare per owner run, one after the other.
    Ascending,
    /// All at once: latency of the slowest participant, but two gangs competing for the
    /// same capacity can both be refused.
    Parallel,
}

/// Limits and timings of a coordinator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoordConfig {
    /// Transactions in flight at once for this shard (begun, not yet decided).
    pub max_in_flight: usize,
    /// Starts waiting for a slot; beyond this a start is rejected with a reason.
    pub max_queued: usize,
    /// Unanswered proposals and prepares are resent after this long.
    pub resend_after_ms: u64,
    /// Proposals of a decision before giving up (`Unfinished`; recovery finishes it).
    pub max_decide_attempts: u32,
    /// Prepare order.
    pub prepare_order: PrepareOrder,
    /// In ascending order, the last participant asked logs the commit behind its own
    /// reservation ([`Prepare::commit_at`]), so a committed gang costs no proposal for
    /// its decision. Off, the coordinator always proposes the decision itself.
    pub last_participant_commits: bool,
}

impl Default for CoordConfig {
    fn default() -> Self {
        Self {
            max_in_flight: 64,
            max_queued: 256,
            resend_after_ms: 200,
            max_decide_attempts: 20,
            prepare_order: PrepareOrder::Ascending,
            last_participant_commits: true,
        }
    }
}

/// A coordinator config that cannot be used, naming the offending value.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CoordConfigError {
    /// A limit that must be at least 1 is 0.
    #[error("{field}: must be at least 1, got 0")]
    Zero {
        /// The field.
        field: &'static str,
    },
}

impl CoordConfig {
    /// Checks every field.
    pub fn validate(self) -> Result<Self, CoordConfigError> {
        let zero = |field| Err(CoordConfigError::Zero { field });
        if self.max_in_flight == 0 {
            return zero("coordinator.maxInFlight");
        }
        if self.resend_after_ms == 0 {
            return zero("coordinator.resendAfterMs");
        }
        if self.max_decide_attempts == 0 {
            return zero("coordinator.maxDecideAttempts");
        }
        Ok(self)
    }
}

/// Where one transaction is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// `TxnBegin` proposed.
    Beginning,
    /// Prepares sent, collecting answers.
    Preparing,
    /// `TxnDecide` proposed.
    Deciding(TxnDecision),
    /// The commit is in the ledger, logged by the last participant behind its
    /// reservation or found there, and some participant's placements (which the bind
    /// needs) are not known yet: their prepares are resent until they answer.
    Committed,
}

#[derive(Clone, Debug)]
struct Active {
    gang: String,
    /// Each participant's pods with the plan's nodes (the hints of its prepare).
    parts: BTreeMap<ShardId, Vec<PodPlacement>>,
    /// Each participant's owner when the transaction started, where known.
    owners: BTreeMap<ShardId, ReplicaId>,
    /// Each prepared participant's placements as it reserved them (what a commit binds).
    reserved: BTreeMap<ShardId, Vec<PodPlacement>>,
    deadline_ms: u64,
    phase: Phase,
    asked: BTreeSet<ShardId>,
    prepared: BTreeSet<ShardId>,
    /// The participant asked to log the commit behind its reservation: the last shard
    /// of the last run.
    committer: Option<ShardId>,
    last_sent_ms: u64,
    decide_attempts: u32,
    reason: String,
}

impl Active {
    /// The participants whose reservation (and so where it is) is not known yet: a reply
    /// fills `prepared` and `reserved` together.
    fn unprepared(&self) -> Vec<ShardId> {
        self.parts
            .keys()
            .filter(|s| !self.prepared.contains(s))
            .copied()
            .collect()
    }
}

/// The coordinator of one shard at one epoch.
#[derive(Clone, Debug)]
pub struct Coordinator {
    shard: ShardId,
    epoch: Epoch,
    config: CoordConfig,
    now_ms: u64,
    active: BTreeMap<TxnId, Active>,
    queue: VecDeque<StartTxn>,
}

impl Coordinator {
    /// A coordinator for `shard`, owned at `epoch`.
    pub fn new(shard: ShardId, epoch: Epoch, config: CoordConfig) -> Self {
        Self {
            shard,
            epoch,
            config,
            now_ms: 0,
            active: BTreeMap::new(),
            queue: VecDeque::new(),
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

    /// Transactions in flight.
    pub fn in_flight(&self) -> usize {
        self.active.len()
    }

    /// Starts waiting for a slot.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// The phase of an in-flight transaction.
    pub fn phase(&self, txn: &str) -> Option<Phase> {
        self.active.get(txn).map(|a| a.phase)
    }

    /// Reacts to one event.
    pub fn step(&mut self, event: CoordEvent) -> Vec<CoordCommand> {
        let mut out = Vec::new();
        match event {
            CoordEvent::Start(start) => self.on_start(start, &mut out),
            CoordEvent::LedgerApplied { txn, result } => self.on_ledger(&txn, result, &mut out),
            CoordEvent::ParticipantReply { txn, shard, reply } => {
                self.on_reply(&txn, shard, reply, &mut out)
            }
            CoordEvent::Tick { now_ms } => self.on_tick(now_ms, &mut out),
            CoordEvent::Recover { txns, now_ms } => {
                self.now_ms = self.now_ms.max(now_ms);
                for t in txns {
                    self.on_recovered(t, &mut out);
                }
            }
        }
        self.fill_slots(&mut out);
        out
    }

    fn on_start(&mut self, start: StartTxn, out: &mut Vec<CoordCommand>) {
        self.now_ms = self.now_ms.max(start.now_ms);
        if let Err(reason) = self.check_start(&start) {
            out.push(report(&start.txn, TxnOutcome::Rejected, reason));
            return;
        }
        if self.active.len() < self.config.max_in_flight && self.queue.is_empty() {
            self.begin(start, out);
        } else if self.queue.len() < self.config.max_queued {
            self.queue.push_back(start);
        } else {
            let reason = format!(
                "shard {}: {} transactions in flight and {} queued (limits {} and {})",
                self.shard,
                self.active.len(),
                self.queue.len(),
                self.config.max_in_flight,
                self.config.max_queued
            );
            out.push(report(&start.txn, TxnOutcome::Rejected, reason));
        }
    }

    fn check_start(&self, s: &StartTxn) -> Result<(), String> {
        if self.active.contains_key(&s.txn) || self.queue.iter().any(|q| q.txn == s.txn) {
            return Err(format!("txn {}: already in flight", s.txn));
        }
        if s.parts.is_empty() {
            return Err("no participant shard".into());
        }
        if s.parts.len() > MAX_TXN_PARTICIPANTS {
            return Err(format!(
                "{} participant shards exceed the limit {MAX_TXN_PARTICIPANTS}",
                s.parts.len()
            ));
        }
        let shards: BTreeSet<ShardId> = s.parts.iter().map(|(sh, _)| *sh).collect();
        if shards.len() != s.parts.len() {
            return Err("a participant shard is named twice".into());
        }
        if let Some((sh, _)) = s.parts.iter().find(|(_, p)| p.is_empty()) {
            return Err(format!("shard {sh}: no pods"));
        }
        if s.deadline_ms <= self.now_ms {
            return Err(format!(
                "deadline {} ms is not after now {} ms",
                s.deadline_ms, self.now_ms
            ));
        }
        Ok(())
    }

    fn begin(&mut self, s: StartTxn, out: &mut Vec<CoordCommand>) {
        let parts: BTreeMap<ShardId, Vec<PodPlacement>> = s.parts.into_iter().collect();
        out.push(CoordCommand::ProposeToLedger(LedgerCommand::TxnBegin {
            txn: s.txn.clone(),
            shard: self.shard,
            epoch: self.epoch,
            participants: parts.keys().copied().collect(),
            deadline_ms: s.deadline_ms,
        }));
        self.active.insert(
            s.txn,
            Active {
                gang: s.gang,
                parts,
                owners: s.owners,
                reserved: BTreeMap::new(),
                deadline_ms: s.deadline_ms,
                phase: Phase::Beginning,
                asked: BTreeSet::new(),
                prepared: BTreeSet::new(),
                committer: None,
                last_sent_ms: self.now_ms,
                decide_attempts: 0,
                reason: String::new(),
            },
        );
    }

    fn fill_slots(&mut self, out: &mut Vec<CoordCommand>) {
        while self.active.len() < self.config.max_in_flight {
            let Some(next) = self.queue.pop_front() else {
                return;
            };
            if next.deadline_ms <= self.now_ms {
                let reason = "deadline passed while queued".to_string();
                out.push(report(&next.txn, TxnOutcome::Rejected, reason));
            } else {
                self.begin(next, out);
            }
        }
    }

    fn on_ledger(&mut self, txn: &TxnId, result: LedgerResult, out: &mut Vec<CoordCommand>) {
        let Some(a) = self.active.get(txn) else {
            return;
        };
        match result {
            LedgerResult::Begun => {
                if a.phase == Phase::Beginning {
                    self.on_begun(txn, out);
                }
            }
            LedgerResult::BeginRefused(r) => {
                if a.phase == Phase::Beginning {
                    self.active.remove(txn);
                    out.push(report(
                        txn,
                        TxnOutcome::Rejected,
                        format!("begin refused: {r}"),
                    ));
                }
            }
            // The ledger's word alone does not say which nodes the participant picked; its
            // `Prepared` reply does, and follows.
            LedgerResult::Reserved { .. } => {}
            LedgerResult::RefusedReserve { shard, reason } => {
                self.on_reply(txn, shard, PrepareReply::Refused(reason.to_string()), out)
            }
            LedgerResult::Decided(d) => self.finish(txn, d, out),
            LedgerResult::DecideRefused(r) => self.on_decide_refused(txn, r, out),
        }
    }

    fn on_begun(&mut self, txn: &TxnId, out: &mut Vec<CoordCommand>) {
        if let Some(a) = self.active.get_mut(txn) {
            a.phase = Phase::Preparing;
        }
        self.send_prepares(txn, out);
    }

    /// Asks the next participants: all (parallel), or the lowest not yet asked with the
    /// consecutive ones of the same owner (ascending). In ascending order the last run's
    /// last shard is asked to log the commit behind its reservation: every participant
    /// before the run is prepared by then, and its owner reserves the run in one
    /// proposal, in shard order.
    fn send_prepares(&mut self, txn: &TxnId, out: &mut Vec<CoordCommand>) {
        let (shard, epoch, now) = (self.shard, self.epoch, self.now_ms);
        let order = self.config.prepare_order;
        let delegate = self.config.last_participant_commits;
        let Some(a) = self.active.get_mut(txn) else {
            return;
        };
        let pending: Vec<ShardId> = a
            .parts
            .keys()
            .copied()
            .filter(|s| !a.asked.contains(s))
            .collect();
        let pending_count = pending.len();
        let to_ask = match order {
            PrepareOrder::Parallel => pending,
            PrepareOrder::Ascending if a.asked.len() == a.prepared.len() => {
                one_owner_run(&pending, &a.owners)
            }
            PrepareOrder::Ascending => Vec::new(),
        };
        let last_run = !to_ask.is_empty() && to_ask.len() == pending_count;
        if order == PrepareOrder::Ascending && delegate && last_run {
            a.committer = to_ask.last().copied();
        }
        for s in to_ask {
            a.asked.insert(s);
            out.push(prepare_command(txn, (shard, epoch), a, s));
        }
        a.last_sent_ms = now;
    }

    fn on_reply(
        &mut self,
        txn: &TxnId,
        shard: ShardId,
        reply: PrepareReply,
        out: &mut Vec<CoordCommand>,
    ) {
        let Some(a) = self.active.get(txn) else {
            return;
        };
        if !a.parts.contains_key(&shard) {
            return;
        }
        let reply = match reply {
            PrepareReply::Prepared {
                placements,
                committed,
            } => match same_pods(&a.parts[&shard], &placements) {
                Ok(()) => PrepareReply::Prepared {
                    placements,
                    committed,
                },
                Err(why) => PrepareReply::Refused(why),
            },
            refused => refused,
        };
        match (a.phase, reply) {
            (Phase::Beginning, reply @ PrepareReply::Prepared { .. }) => {
                // A reservation exists, so the begin landed; its answer was lost.
                self.on_begun(txn, out);
                self.on_reply(txn, shard, reply, out);
            }
            (_, PrepareReply::Prepared { .. }) if a.prepared.contains(&shard) => {
                // A resent prepare's answer: the first one named the reserved nodes.
            }
            (
                _,
                PrepareReply::Prepared {
                    placements,
                    committed,
                },
            ) => self.on_prepared(txn, shard, placements, committed, out),
            (Phase::Preparing, PrepareReply::Refused(_)) if a.prepared.contains(&shard) => {
                // Its reservation is in the ledger: a refusal now answers a stale resend.
            }
            (Phase::Preparing, PrepareReply::Refused(reason)) => {
                let reason = format!("shard {shard} refused: {reason}");
                self.decide(txn, TxnDecision::Abort, &reason, out);
            }
            _ => {}
        }
    }

    /// A participant's part is reserved on `placements` (and, if it says so, the commit
    /// is logged behind it).
    fn on_prepared(
        &mut self,
        txn: &TxnId,
        shard: ShardId,
        placements: Vec<PodPlacement>,
        committed: bool,
        out: &mut Vec<CoordCommand>,
    ) {
        let now = self.now_ms;
        let Some(a) = self.active.get_mut(txn) else {
            return;
        };
        a.asked.insert(shard);
        a.prepared.insert(shard);
        a.reserved.insert(shard, placements);
        if committed && a.phase == Phase::Preparing {
            a.phase = Phase::Committed;
            a.last_sent_ms = now;
            a.decide_attempts = 0;
            a.reason = format!("every participant prepared; shard {shard} logged the commit");
        }
        let all = a.prepared.len() == a.parts.len();
        match a.phase {
            Phase::Committed if all => self.finish(txn, TxnDecision::Commit, out),
            Phase::Preparing if all => {
                self.decide(txn, TxnDecision::Commit, "every participant prepared", out)
            }
            Phase::Preparing => self.send_prepares(txn, out),
            // Committed: the other replies follow (or are asked for again on a tick).
            // Deciding: the decision's answer finishes it.
            Phase::Beginning | Phase::Committed | Phase::Deciding(_) => {}
        }
    }

    fn decide(
        &mut self,
        txn: &TxnId,
        decision: TxnDecision,
        reason: &str,
        out: &mut Vec<CoordCommand>,
    ) {
        let now = self.now_ms;
        let Some(a) = self.active.get_mut(txn) else {
            return;
        };
        a.phase = Phase::Deciding(decision);
        a.decide_attempts = 1;
        a.last_sent_ms = now;
        a.reason = reason.to_string();
        out.push(self.decide_command(txn, decision));
    }

    fn decide_command(&self, txn: &TxnId, decision: TxnDecision) -> CoordCommand {
        CoordCommand::ProposeToLedger(LedgerCommand::TxnDecide {
            txn: txn.clone(),
            shard: self.shard,
            epoch: self.epoch,
            decision,
        })
    }

    fn on_decide_refused(&mut self, txn: &TxnId, r: Refusal, out: &mut Vec<CoordCommand>) {
        let Some(a) = self.active.get(txn) else {
            return;
        };
        match (a.phase, r) {
            (Phase::Deciding(TxnDecision::Commit), Refusal::TxnNotAllPrepared { missing, .. }) => {
                let reason = format!("the ledger lacks reservations of shards {missing:?}");
                self.decide(txn, TxnDecision::Abort, &reason, out);
            }
            (_, r) => {
                self.active.remove(txn);
                let reason = format!("decision refused: {r}; the shard's owner finishes it");
                out.push(report(txn, TxnOutcome::Unfinished, reason));
            }
        }
    }

    /// The decision is logged: commit binds, both tell the participants. A commit whose
    /// placements are not all known yet (a participant logged it while this coordinator,
    /// at its deadline, proposed an abort) waits for the missing replies first.
    fn finish(&mut self, txn: &TxnId, decision: TxnDecision, out: &mut Vec<CoordCommand>) {
        let now = self.now_ms;
        let Some(a) = self.active.get_mut(txn) else {
            return;
        };
        if decision == TxnDecision::Commit && a.reserved.len() < a.parts.len() {
            if a.phase != Phase::Committed {
                a.phase = Phase::Committed;
                a.last_sent_ms = now;
                a.decide_attempts = 0;
                a.reason = "a participant logged the commit first".to_string();
            }
            return;
        }
        let Some(a) = self.active.remove(txn) else {
            return;
        };
        for shard in a.parts.keys() {
            out.push(CoordCommand::SendDecision {
                shard: *shard,
                txn: txn.clone(),
                decision,
            });
        }
        match decision {
            TxnDecision::Commit => {
                // The ledger holds the participants' picks, so do their replies; a commit
                // is only proposed once every participant replied.
                let reason = match a.phase {
                    Phase::Deciding(TxnDecision::Abort) => {
                        "the last participant logged the commit before the deadline's abort"
                            .to_string()
                    }
                    _ => a.reason,
                };
                let pods: Vec<PodPlacement> = a.reserved.into_values().flatten().collect();
                if !pods.is_empty() {
                    out.push(CoordCommand::Bind {
                        txn: txn.clone(),
                        gang: a.gang,
                        pods,
                    });
                }
                out.push(report(txn, TxnOutcome::Committed, reason));
            }
            TxnDecision::Abort => {
                let reason = match a.phase {
                    Phase::Deciding(TxnDecision::Commit) => {
                        "the ledger aborted it first (deadline)".to_string()
                    }
                    _ => a.reason,
                };
                out.push(report(txn, TxnOutcome::Aborted, reason));
            }
        }
    }

    fn on_tick(&mut self, now_ms: u64, out: &mut Vec<CoordCommand>) {
        self.now_ms = self.now_ms.max(now_ms);
        let ids: Vec<TxnId> = self.active.keys().cloned().collect();
        for txn in ids {
            self.tick_txn(&txn, out);
        }
        self.expire_queued(out);
    }

    /// Deadline and resends of one in-flight transaction.
    fn tick_txn(&mut self, txn: &TxnId, out: &mut Vec<CoordCommand>) {
        let now = self.now_ms;
        let Some(a) = self.active.get(txn) else {
            return;
        };
        let due = now.saturating_sub(a.last_sent_ms) >= self.config.resend_after_ms;
        match a.phase {
            Phase::Beginning | Phase::Preparing if now >= a.deadline_ms => {
                let missing = a.unprepared();
                let reason = format!("deadline passed; shards {missing:?} not prepared");
                self.decide(txn, TxnDecision::Abort, &reason, out);
            }
            Phase::Beginning if due => {
                out.push(CoordCommand::ProposeToLedger(LedgerCommand::TxnBegin {
                    txn: txn.clone(),
                    shard: self.shard,
                    epoch: self.epoch,
                    participants: a.parts.keys().copied().collect(),
                    deadline_ms: a.deadline_ms,
                }));
                self.touch(txn);
            }
            Phase::Preparing if due => {
                for s in a.asked.difference(&a.prepared) {
                    out.push(prepare_command(txn, (self.shard, self.epoch), a, *s));
                }
                self.touch(txn);
            }
            Phase::Committed if due => self.ask_for_missing_placements(txn, out),
            Phase::Deciding(d) if due && a.decide_attempts >= self.config.max_decide_attempts => {
                let reason = format!(
                    "decision {d:?} unanswered after {} proposals; recovery finishes it",
                    a.decide_attempts
                );
                self.active.remove(txn);
                out.push(report(txn, TxnOutcome::Unfinished, reason));
            }
            Phase::Deciding(d) if due => {
                out.push(self.decide_command(txn, d));
                if let Some(a) = self.active.get_mut(txn) {
                    a.decide_attempts += 1;
                    a.last_sent_ms = now;
                }
            }
            _ => {}
        }
    }

    /// A logged commit waits for the placements of parts that did not answer: their
    /// prepares are resent, and after `max_decide_attempts` it is given up (`Unfinished`);
    /// the shards' owners bind the ledger's assumed placements (reconcile).
    fn ask_for_missing_placements(&mut self, txn: &TxnId, out: &mut Vec<CoordCommand>) {
        let (now, max) = (self.now_ms, self.config.max_decide_attempts);
        let Some(a) = self.active.get(txn) else {
            return;
        };
        let missing = a.unprepared();
        if a.decide_attempts >= max {
            let reason = format!(
                "commit logged, but shards {missing:?} never said where they reserved; their owners bind it"
            );
            self.active.remove(txn);
            out.push(report(txn, TxnOutcome::Unfinished, reason));
            return;
        }
        for s in missing {
            out.push(prepare_command(txn, (self.shard, self.epoch), a, s));
        }
        if let Some(a) = self.active.get_mut(txn) {
            a.decide_attempts += 1;
            a.last_sent_ms = now;
        }
    }

    /// Queued starts whose deadline passed are rejected without touching the ledger.
    fn expire_queued(&mut self, out: &mut Vec<CoordCommand>) {
        let now = self.now_ms;
        let (expired, kept): (Vec<StartTxn>, Vec<StartTxn>) =
            self.queue.drain(..).partition(|s| s.deadline_ms <= now);
        self.queue = kept.into();
        for s in expired {
            let reason = "deadline passed while queued".to_string();
            out.push(report(&s.txn, TxnOutcome::Rejected, reason));
        }
    }

    fn touch(&mut self, txn: &TxnId) {
        let now = self.now_ms;
        if let Some(a) = self.active.get_mut(txn) {
            a.last_sent_ms = now;
        }
    }

    /// A new owner finishes what the ledger shows: a logged commit is bound, a logged
    /// abort needs nothing, an undecided transaction is aborted.
    fn on_recovered(&mut self, t: RecoveredTxn, out: &mut Vec<CoordCommand>) {
        if self.active.contains_key(&t.txn) {
            return;
        }
        match t.decision {
            Some(TxnDecision::Commit) => match t.gang {
                Some(gang) if !t.unbound.is_empty() => {
                    out.push(CoordCommand::Bind {
                        txn: t.txn.clone(),
                        gang,
                        pods: t.unbound,
                    });
                    let reason = "recovered: commit logged, binding".to_string();
                    out.push(report(&t.txn, TxnOutcome::Committed, reason));
                }
                Some(_) => {}
                None if t.unbound.is_empty() => {}
                None => {
                    let reason = "recovered: commit logged but the id names no gang".to_string();
                    out.push(report(&t.txn, TxnOutcome::Unfinished, reason));
                }
            },
            Some(TxnDecision::Abort) => {}
            None => {
                let parts = t.participants.iter().map(|s| (*s, Vec::new())).collect();
                self.active.insert(
                    t.txn.clone(),
                    Active {
                        gang: t.gang.unwrap_or_default(),
                        parts,
                        owners: BTreeMap::new(),
                        reserved: BTreeMap::new(),
                        deadline_ms: t.deadline_ms,
                        phase: Phase::Beginning,
                        asked: BTreeSet::new(),
                        prepared: BTreeSet::new(),
                        committer: None,
                        last_sent_ms: self.now_ms,
                        decide_attempts: 0,
                        reason: String::new(),
                    },
                );
                let reason = "recovered undecided: the previous owner's state is lost";
                self.decide(&t.txn, TxnDecision::Abort, reason, out);
            }
        }
    }
}

/// The first of `pending` (ascending) and those right after it with the same known owner.
fn one_owner_run(pending: &[ShardId], owners: &BTreeMap<ShardId, ReplicaId>) -> Vec<ShardId> {
    let Some(first) = pending.first() else {
        return Vec::new();
    };
    let Some(owner) = owners.get(first) else {
        return vec![*first];
    };
    pending
        .iter()
        .take_while(|s| owners.get(s) == Some(owner))
        .copied()
        .collect()
}

fn prepare_command(
    txn: &TxnId,
    (coordinator, epoch): (ShardId, Epoch),
    a: &Active,
    shard: ShardId,
) -> CoordCommand {
    CoordCommand::SendPrepare {
        shard,
        prepare: Prepare {
            txn: txn.clone(),
            coordinator,
            gang: a.gang.clone(),
            placements: a.parts.get(&shard).cloned().unwrap_or_default(),
            deadline_ms: a.deadline_ms,
            commit_at: (a.committer == Some(shard)).then_some(epoch),
        },
    }
}

/// A participant's reply must place exactly the pods of its part: the commit binds what the
/// replies name, so a pod missing from one would leave the gang partly bound.
fn same_pods(part: &[PodPlacement], reserved: &[PodPlacement]) -> Result<(), String> {
    let mut planned: Vec<&str> = part.iter().map(|p| p.pod.as_str()).collect();
    let mut named: Vec<&str> = reserved.iter().map(|p| p.pod.as_str()).collect();
    planned.sort_unstable();
    named.sort_unstable();
    if planned == named {
        Ok(())
    } else {
        Err(format!(
            "its reply names pods {named:?}, its part has {planned:?}"
        ))
    }
}

fn report(txn: &TxnId, outcome: TxnOutcome, reason: String) -> CoordCommand {
    CoordCommand::Report {
        txn: txn.clone(),
        outcome,
        reason,
    }
}
