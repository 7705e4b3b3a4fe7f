//! The 2PC work loop, written once for every driver.
//!
//! ```text
//!  Work::ToCoord / ToPart ──► driver steps that replica's machine at (shard, epoch)
//!        ▲                         │ commands
//!        │                         ▼
//!        │   Work::FromCoord / FromPart (queued behind what is already there)
//!        │     ProposeToLedger ─► driver.propose_batch ─► begin/decide/reserve ──┐
//!        │     Pick            ─► the pump's PoolView (opened once per pump)     │
//!        │     Send*/Reply     ─► the shard's owner: this replica (in process)   │
//!        │                         or driver.send (another replica)              │
//!        │     Bind / Report   ─► driver                                         │
//!        └───────────────────────── events ◄─────────────────────────────────────┘
//! ```
//!
//! A machine's commands are queued behind the work already there rather than performed
//! at once, so that in one thread the replicas' transactions interleave in a fixed order
//! (the simulator's outcome does not depend on the transport). When the queue runs dry
//! the driver is asked for the messages that arrived meanwhile (`received`).

use std::collections::VecDeque;

use phalanx_statestore::ledger::{Epoch, ReplicaId, ShardId, TxnDecision, TxnId};
use phalanx_statestore::{LedgerCommand, LedgerResponse, PodPlacement};

use crate::coord::service::{CoordMessage, Delivery, Route};
use crate::coord::{
    CoordCommand, CoordEvent, LedgerResult, ParticipantCommand, ParticipantEvent, TxnOutcome,
    begin_result, decide_result, reserve_result,
};
use crate::simulate::pool_pick::PoolView;

/// One step of the pump: an event for a replica's state machine, or a command one of them
/// emitted, to perform.
#[derive(Debug)]
pub enum Work {
    /// An event for replica `to`'s coordinator of `shard`, if it holds it at `epoch`.
    ToCoord {
        to: ReplicaId,
        shard: ShardId,
        epoch: Epoch,
        event: CoordEvent,
    },
    /// An event for replica `to`'s participant of `shard`, if it holds it at `epoch`.
    ToPart {
        to: ReplicaId,
        shard: ShardId,
        epoch: Epoch,
        event: ParticipantEvent,
    },
    /// A command of replica `from`'s coordinator of `shard` at `epoch`.
    FromCoord {
        from: ReplicaId,
        shard: ShardId,
        epoch: Epoch,
        cmd: CoordCommand,
    },
    /// A command of replica `from`'s participant of `shard` at `epoch`.
    FromPart {
        from: ReplicaId,
        shard: ShardId,
        epoch: Epoch,
        cmd: ParticipantCommand,
    },
}

impl Work {
    /// The step for a message that replica `to` received (its route names shard and epoch).
    pub fn delivered(to: ReplicaId, d: Delivery) -> Self {
        match d {
            Delivery::Coordinator { route, event } => Self::ToCoord {
                to,
                shard: route.shard,
                epoch: route.epoch,
                event,
            },
            Delivery::Participant { route, event } => Self::ToPart {
                to,
                shard: route.shard,
                epoch: route.epoch,
                event,
            },
        }
    }
}

/// What the pump needs from its driver: the parts that differ between one replica per
/// process (`phalanx serve`) and many replicas in one thread (`phalanx simulate`).
pub trait PumpDriver {
    /// Steps replica `to`'s coordinator of `shard`; `None` (the event is dropped) when that
    /// replica does not run or holds no coordinator of `shard` at `epoch`.
    fn step_coordinator(
        &mut self,
        to: ReplicaId,
        shard: ShardId,
        epoch: Epoch,
        event: CoordEvent,
    ) -> Option<Vec<CoordCommand>>;

    /// Steps replica `to`'s participant of `shard`, as [`Self::step_coordinator`].
    fn step_participant(
        &mut self,
        to: ReplicaId,
        shard: ShardId,
        epoch: Epoch,
        event: ParticipantEvent,
    ) -> Option<Vec<ParticipantCommand>>;

    /// Whether replica `id` runs: the commands of one that stopped are dropped.
    fn runs(&self, id: ReplicaId) -> bool;

    /// Proposes transaction commands of replica `by` as one ledger batch (group commit);
    /// one answer per command, in order. `None` when the outcome is unknown (the state
    /// machines resend on a tick); an answer of another length is taken as `None`.
    fn propose_batch(
        &mut self,
        by: ReplicaId,
        cmds: Vec<LedgerCommand>,
    ) -> Option<Vec<LedgerResponse>>;

    /// One batch per replica ([`Self::propose_batch`] each), from the replicas that had
    /// proposals waiting when the pump's work ran dry; one answer per batch, in order. A
    /// driver that runs several replicas may send them together, as replicas in
    /// processes of their own do: each replica writes only its own shards, so an answer
    /// depends on their order in the ledger only where they meet, which is the ledger-wide
    /// limit of open transactions (a begin near it) and a coordinator's decision racing a
    /// participant's reservation of the same transaction (the 2PC machines settle either
    /// order, as they do between processes).
    fn propose_batches(
        &mut self,
        batches: Vec<(ReplicaId, Vec<LedgerCommand>)>,
    ) -> Vec<Option<Vec<LedgerResponse>>> {
        batches
            .into_iter()
            .map(|(by, cmds)| self.propose_batch(by, cmds))
            .collect()
    }

    /// The owner of `shard` and its epoch, as the driver knows them now.
    fn owner(&self, shard: ShardId) -> Option<(ReplicaId, Epoch)>;

    /// Sends `m` from replica `from` to another replica `to`, at once or (a driver that
    /// batches) at the next [`Self::flush`]. A message that cannot be sent is lost (the
    /// machines resend on a tick); what arrived meanwhile may be queued onto `work`.
    fn send(&mut self, from: ReplicaId, to: ReplicaId, m: CoordMessage, work: &mut VecDeque<Work>);

    /// Sends what [`Self::send`] held back, one request per receiver, and queues onto
    /// `work` what arrived meanwhile; false when nothing was held back. Called whenever the
    /// pump's work runs dry, before its proposals go.
    fn flush(&mut self, _work: &mut VecDeque<Work>) -> bool {
        false
    }

    /// A message between two machines of the same replica, handed over in process.
    fn sent_locally(&mut self) {}

    /// Opens the participants' view for picking nodes (once per pump, at the first pick).
    fn open_view(&mut self) -> Result<PoolView, String>;

    /// Binds a committed transaction's pods (as the participants reserved them), then has
    /// their shards' owners mark them bound.
    fn bind(&mut self, by: ReplicaId, txn: &TxnId, gang: &str, pods: &[PodPlacement]);

    /// A transaction ended (or was refused) at replica `by`'s coordinator.
    fn report(&mut self, by: ReplicaId, txn: TxnId, outcome: TxnOutcome, reason: String);

    /// The messages received since the last call (asked when the work runs dry).
    fn received(&mut self) -> Vec<Work> {
        Vec::new()
    }

    /// Whether replica `from` may perform `cmd` (false: it is dropped). The simulator's
    /// transaction faults kill a replica here.
    fn admit_coord_command(&mut self, _from: ReplicaId, _cmd: &CoordCommand) -> bool {
        true
    }

    /// Whether `event` may reach replica `to`'s participant (false: it is dropped).
    fn admit_part_event(&mut self, _to: ReplicaId, _event: &ParticipantEvent) -> bool {
        true
    }
}

/// Messages for other replicas held back until the pump's work runs dry, so that each
/// receiver gets them in one request rather than one round trip each.
#[derive(Debug, Default)]
pub struct HeldMessages {
    held: Vec<(ReplicaId, CoordMessage)>,
}

impl HeldMessages {
    /// Holds `m` for replica `to`.
    pub fn hold(&mut self, to: ReplicaId, m: CoordMessage) {
        self.held.push((to, m));
    }

    /// What was held, one batch per receiver in the order each was first sent to, each
    /// batch in the order sent; nothing is held afterwards.
    pub fn take_by_receiver(&mut self) -> Vec<(ReplicaId, Vec<CoordMessage>)> {
        let mut batches: Vec<(ReplicaId, Vec<CoordMessage>)> = Vec::new();
        for (to, m) in self.held.drain(..) {
            match batches.iter_mut().find(|(r, _)| *r == to) {
                Some((_, ms)) => ms.push(m),
                None => batches.push((to, vec![m])),
            }
        }
        batches
    }
}

/// The pump gave up with work left: more steps than its bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the 2PC pump stopped after {steps} steps ({left} left)")]
pub struct PumpStopped {
    pub steps: usize,
    pub left: usize,
}

/// Runs `work`, what it leads to and what arrives meanwhile, until nothing is left or
/// `max_steps` steps were taken.
///
/// Group commit: a machine's proposal waits while any other work of this pump is left to
/// do; when none is, the messages held back for other replicas go first, one request per
/// receiver ([`PumpDriver::flush`]), so that what they lead to joins the same batch; then
/// the proposals waiting go as one ledger batch per replica ([`answer`]) and their answers
/// are queued. So the begins, reserves and decisions of the transactions
/// in flight go together, one batch per replica and phase, however their other steps
/// interleave (a refusal answered at once, a gang with more participants). The driver is
/// asked for what arrived meanwhile (`received`) only when nothing is waiting, so a
/// proposal never waits on messages from other replicas. Steps run in queue order, so the
/// outcome is the same for the same work. Deferring a proposal is safe for picking: a
/// pick holds its nodes in the pump's view until its reservation is answered.
pub fn pump(
    driver: &mut impl PumpDriver,
    mut work: VecDeque<Work>,
    max_steps: usize,
) -> Result<(), PumpStopped> {
    let mut view: Option<PoolView> = None;
    let mut asked: Vec<Asked> = Vec::new();
    let mut steps = 0usize;
    loop {
        if work.is_empty() {
            if driver.flush(&mut work) {
                continue;
            }
            if !asked.is_empty() {
                answer(driver, std::mem::take(&mut asked), &mut work, &mut view);
                continue;
            }
            work.extend(driver.received());
        }
        let Some(w) = work.pop_front() else {
            return Ok(());
        };
        steps += 1;
        if steps > max_steps {
            return Err(PumpStopped {
                steps: max_steps,
                left: work.len() + 1,
            });
        }
        step(driver, w, &mut work, &mut view, &mut asked);
    }
}

/// The `TxnBegin`s of a round's new transactions, taken out of the pump so that they ride
/// in the proposal of the round's own commands (its `PlaceGangs`): a round then costs one
/// proposal for both, where the begins took a batch of their own.
#[derive(Debug, Default)]
pub struct HeldBegins {
    asked: Vec<Asked>,
}

impl HeldBegins {
    /// Steps the coordinators' `Start`s in `starts` at once, as the pump would, and holds
    /// the `TxnBegin`s that replica `by`'s coordinators ask for. Whatever else they ask
    /// (a rejection's report) and any other work goes onto `work` for the pump.
    pub fn take(
        driver: &mut impl PumpDriver,
        by: ReplicaId,
        starts: impl IntoIterator<Item = Work>,
        work: &mut VecDeque<Work>,
    ) -> Self {
        let mut asked = Vec::new();
        for w in starts {
            let Work::ToCoord {
                to,
                shard,
                epoch,
                event,
            } = w
            else {
                work.push_back(w);
                continue;
            };
            for cmd in driver
                .step_coordinator(to, shard, epoch, event)
                .into_iter()
                .flatten()
            {
                let begin = matches!(
                    cmd,
                    CoordCommand::ProposeToLedger(LedgerCommand::TxnBegin { .. })
                );
                if begin && to == by {
                    // Admitted once, here, as the pump admits a command it performs.
                    if !driver.runs(to) || !driver.admit_coord_command(to, &cmd) {
                        continue;
                    }
                    let CoordCommand::ProposeToLedger(c) = cmd else {
                        unreachable!("matched above");
                    };
                    asked.extend(Asked::of_coordinator((to, shard, epoch), c));
                } else {
                    work.push_back(Work::FromCoord {
                        from: to,
                        shard,
                        epoch,
                        cmd,
                    });
                }
            }
        }
        Self { asked }
    }

    /// The commands to append to the round's own proposal.
    pub fn commands(&mut self) -> Vec<LedgerCommand> {
        self.asked.iter_mut().filter_map(|a| a.cmd.take()).collect()
    }

    /// Queues each begin's answer onto `work` (the answers that followed the round's own
    /// commands, in order). `None`, or too few answers, answers none: the coordinators
    /// propose their begins again on a tick.
    pub fn answered(self, answers: Option<&[LedgerResponse]>, work: &mut VecDeque<Work>) {
        let Some(answers) = answers.filter(|a| a.len() == self.asked.len()) else {
            return;
        };
        for (a, r) in self.asked.into_iter().zip(answers) {
            work.push_back(a.answered(r, &mut None));
        }
    }
}

/// A machine's proposal waiting for its batch: what its answer is for, and the command.
#[derive(Debug)]
struct Asked {
    machine: Machine,
    txn: TxnId,
    what: AskedFor,
    /// Taken when its batch is proposed.
    cmd: Option<LedgerCommand>,
}

#[derive(Debug)]
enum AskedFor {
    /// A coordinator's `TxnBegin`.
    Begin,
    /// A coordinator's `TxnDecide`.
    Decide(TxnDecision),
    /// A participant's `TxnReserve` of these pods.
    Reserve(Vec<PodPlacement>),
    /// The coordinator's `TxnDecide(Commit)`, logged by its last participant behind its
    /// reservation.
    CommitBehindReserve,
}

impl Asked {
    /// A coordinator's proposal: `TxnBegin` or `TxnDecide`; `None` (dropped) for a
    /// command a coordinator never asks for.
    fn of_coordinator(machine: Machine, cmd: LedgerCommand) -> Option<Self> {
        let (txn, what) = match &cmd {
            LedgerCommand::TxnBegin { txn, .. } => (txn.clone(), AskedFor::Begin),
            LedgerCommand::TxnDecide { txn, decision, .. } => {
                (txn.clone(), AskedFor::Decide(*decision))
            }
            other => {
                tracing::warn!(command = ?other, "a coordinator asked for a command it never proposes; dropped");
                return None;
            }
        };
        Some(Self {
            machine,
            txn,
            what,
            cmd: Some(cmd),
        })
    }

    /// A participant's proposal: `TxnReserve`, or the commit it logs behind it; `None`
    /// (dropped) for any other.
    fn of_participant(machine: Machine, cmd: LedgerCommand) -> Option<Self> {
        let (txn, what) = match &cmd {
            LedgerCommand::TxnReserve { txn, gang, .. } => {
                (txn.clone(), AskedFor::Reserve(gang.pods.clone()))
            }
            LedgerCommand::TxnDecide {
                txn,
                decision: TxnDecision::Commit,
                ..
            } => (txn.clone(), AskedFor::CommitBehindReserve),
            other => {
                tracing::warn!(command = ?other, "a participant asked for a command it never proposes; dropped");
                return None;
            }
        };
        Some(Self {
            machine,
            txn,
            what,
            cmd: Some(cmd),
        })
    }

    /// The event the answer `r` makes for the machine that asked (keeping the pick view
    /// current: a reservation takes its nodes' capacity, a refusal or an abort frees it).
    fn answered(self, r: &LedgerResponse, view: &mut Option<PoolView>) -> Work {
        let (to, shard, epoch) = self.machine;
        let txn = self.txn;
        // Whose answer it is: a participant's (its reservation, or the commit behind it)
        // or a coordinator's.
        let (result, to_participant) = match self.what {
            AskedFor::Begin => (begin_result(r), false),
            AskedFor::Decide(d) => (decide_result(d, r), false),
            AskedFor::CommitBehindReserve => (decide_result(TxnDecision::Commit, r), true),
            AskedFor::Reserve(pods) => {
                let result = reserve_result(shard, r);
                if let Some(view) = view.as_mut() {
                    match &result {
                        LedgerResult::Reserved { .. } => view.reserved(&txn, shard, &pods),
                        LedgerResult::RefusedReserve { .. } => view.refused(&txn, shard),
                        _ => {}
                    }
                }
                (result, true)
            }
        };
        if let (Some(view), LedgerResult::Decided(TxnDecision::Abort)) = (view, &result) {
            view.aborted(&txn);
        }
        if to_participant {
            let event = ParticipantEvent::LedgerApplied { txn, result };
            return Work::ToPart {
                to,
                shard,
                epoch,
                event,
            };
        }
        let event = CoordEvent::LedgerApplied { txn, result };
        Work::ToCoord {
            to,
            shard,
            epoch,
            event,
        }
    }
}

/// Proposes the waiting proposals, one batch per replica (in the order each replica first
/// asked), then queues each machine's answer in the order they asked. A batch whose
/// outcome is unknown answers none of its machines: they resend on a tick.
fn answer(
    driver: &mut impl PumpDriver,
    mut asked: Vec<Asked>,
    work: &mut VecDeque<Work>,
    view: &mut Option<PoolView>,
) {
    let mut batches: Vec<(ReplicaId, Vec<usize>)> = Vec::new();
    for (i, a) in asked.iter().enumerate() {
        let by = a.machine.0;
        match batches.iter_mut().find(|(r, _)| *r == by) {
            Some((_, members)) => members.push(i),
            None => batches.push((by, vec![i])),
        }
    }
    let mut answers: Vec<Option<LedgerResponse>> = vec![None; asked.len()];
    let lists = batches
        .iter()
        .map(|(by, members)| {
            let cmds = members
                .iter()
                .filter_map(|i| asked[*i].cmd.take())
                .collect();
            (*by, cmds)
        })
        .collect();
    let answered = driver.propose_batches(lists);
    for ((_, members), rs) in batches.into_iter().zip(answered) {
        let Some(rs) = rs.filter(|rs| rs.len() == members.len()) else {
            continue;
        };
        for (i, r) in members.into_iter().zip(rs) {
            answers[i] = Some(r);
        }
    }
    for (a, r) in asked.into_iter().zip(answers) {
        if let Some(r) = r {
            work.push_back(a.answered(&r, view));
        }
    }
}

fn step(
    driver: &mut impl PumpDriver,
    w: Work,
    work: &mut VecDeque<Work>,
    view: &mut Option<PoolView>,
    asked: &mut Vec<Asked>,
) {
    match w {
        Work::ToCoord {
            to,
            shard,
            epoch,
            event,
        } => {
            let cmds = driver.step_coordinator(to, shard, epoch, event);
            work.extend(cmds.into_iter().flatten().map(|cmd| Work::FromCoord {
                from: to,
                shard,
                epoch,
                cmd,
            }));
        }
        Work::ToPart {
            to,
            shard,
            epoch,
            event,
        } => {
            if !driver.admit_part_event(to, &event) {
                return;
            }
            let cmds = driver.step_participant(to, shard, epoch, event);
            work.extend(cmds.into_iter().flatten().map(|cmd| Work::FromPart {
                from: to,
                shard,
                epoch,
                cmd,
            }));
        }
        Work::FromCoord {
            from,
            shard,
            epoch,
            cmd,
        } => {
            if driver.runs(from) && driver.admit_coord_command(from, &cmd) {
                coord_command(driver, (from, shard, epoch), cmd, work, asked);
            }
        }
        Work::FromPart {
            from,
            shard,
            epoch,
            cmd,
        } => {
            if driver.runs(from) {
                part_command(driver, (from, shard, epoch), cmd, work, view, asked);
            }
        }
    }
}

/// Who a machine is: its replica, its shard and the epoch it was built at.
type Machine = (ReplicaId, ShardId, Epoch);

fn coord_command(
    driver: &mut impl PumpDriver,
    (from, shard, epoch): Machine,
    cmd: CoordCommand,
    work: &mut VecDeque<Work>,
    asked: &mut Vec<Asked>,
) {
    match cmd {
        CoordCommand::ProposeToLedger(c) => {
            asked.extend(Asked::of_coordinator((from, shard, epoch), c));
        }
        CoordCommand::SendPrepare { shard: to, prepare } => {
            send_to_owner(driver, from, to, work, |route| CoordMessage::Prepare {
                route,
                coordinator_epoch: epoch,
                prepare,
            });
        }
        CoordCommand::SendDecision {
            shard: to,
            txn,
            decision,
        } => {
            send_to_owner(driver, from, to, work, |route| CoordMessage::Decide {
                route,
                txn,
                coordinator: shard,
                coordinator_epoch: epoch,
                decision,
            });
        }
        CoordCommand::Bind { txn, gang, pods } => driver.bind(from, &txn, &gang, &pods),
        CoordCommand::Report {
            txn,
            outcome,
            reason,
        } => driver.report(from, txn, outcome, reason),
    }
}

fn part_command(
    driver: &mut impl PumpDriver,
    (from, shard, epoch): Machine,
    cmd: ParticipantCommand,
    work: &mut VecDeque<Work>,
    view: &mut Option<PoolView>,
    asked: &mut Vec<Asked>,
) {
    match cmd {
        ParticipantCommand::Pick { txn, wanted } => {
            let result = pick(driver, view, &txn, shard, &wanted);
            work.push_back(Work::ToPart {
                to: from,
                shard,
                epoch,
                event: ParticipantEvent::Picked { txn, result },
            });
        }
        ParticipantCommand::ProposeToLedger(c) => {
            asked.extend(Asked::of_participant((from, shard, epoch), c));
        }
        ParticipantCommand::Reply {
            to,
            txn,
            shard: part,
            reply,
        } => {
            send_to_owner(driver, from, to, work, |route| CoordMessage::Reply {
                route,
                txn,
                participant: part,
                participant_epoch: epoch,
                reply,
            });
        }
    }
}

/// A participant of `pool` picks nodes for `txn`'s `wanted` pods (see [`PoolView::pick`]),
/// opening the pump's view first; a view that cannot be opened answers the pick with why.
fn pick(
    driver: &mut impl PumpDriver,
    view: &mut Option<PoolView>,
    txn: &str,
    pool: ShardId,
    wanted: &[PodPlacement],
) -> Result<Vec<PodPlacement>, String> {
    if view.is_none() {
        *view = Some(
            driver
                .open_view()
                .map_err(|e| format!("shard {pool}: {e}"))?,
        );
    }
    let view = view.as_mut().expect("opened above");
    view.pick(txn, pool, wanted)
}

/// Addresses a message to the owner of shard `to` at the owner's epoch: handed over in
/// process when that is `from` itself, else sent by the driver. A shard with no owner
/// known loses the message (the machines resend on a tick).
fn send_to_owner(
    driver: &mut impl PumpDriver,
    from: ReplicaId,
    to: ShardId,
    work: &mut VecDeque<Work>,
    message: impl FnOnce(Route) -> CoordMessage,
) {
    let Some((owner, epoch)) = driver.owner(to) else {
        return;
    };
    let m = message(Route { shard: to, epoch });
    if owner == from {
        driver.sent_locally();
        work.push_back(Work::delivered(owner, m.into_delivery()));
    } else {
        driver.send(from, owner, m, work);
    }
}
