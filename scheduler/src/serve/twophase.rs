//! `TwoPhase`: the two-phase reservation between `phalanx serve` processes, for gangs whose
//! nodes lie in more than one pool (or in a pool another replica owns).
//!
//! ```text
//!  this replica                                   another replica (owner of shard s)
//!  coordinator of home shard h ─ SendPrepare(s) ─► CoordinatorService (its --coord-listen)
//!    (CoordClient to s's owner's --coord-peers address)   └─ queued; drained by its pump:
//!                                                        participant of s: Pick (its PoolView)
//!                                                        → TxnReserve at (s, its epoch)
//!  ◄──────────────── Reply(Prepared{placements}) ───────  → Reply to h's owner
//!  all prepared: TxnDecide(Commit) → Bind (bound-by this replica) → MarkBound for owned pods
//! ```
//!
//! Each replica builds a coordinator and a participant for every shard it owns at the
//! epoch the ledger says, and drops them when it loses the shard; a new coordinator starts
//! with `Recover` from the ledger's transactions of its shard (commit logged: bind; open:
//! abort). Messages to the owner of a shard go to the address of that owner in
//! `--coord-peers`; those to itself are handed over directly. The pump runs twice a period
//! (before planning, for the messages that arrived since, and after the commits).
//! Deadlines are on the wall clock, as the ledger's own expiry (`ExpireAt`) is.
//!
//! The pump's loop is the engine's ([`crate::replica::pump`], shared with the simulator);
//! this module is its driver for one replica: `ServeDriver` steps this replica's machines,
//! proposes through its ledger client, sends to the other replicas over gRPC and binds
//! through the API server.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use metrics::{counter, histogram};
use phalanx_statestore::LedgerState;
use phalanx_statestore::ledger::{Epoch, LedgerCommand, ReplicaId, ShardId, TxnDecision, TxnId};
use phalanx_statestore::{LedgerResponse, PodPlacement, Transport};
use tokio::runtime::Handle;

use super::failpoint::{self, CrashPoint};
use super::ledger::ServeLedger;
use super::metric;
use crate::cluster::ClusterSnapshot;
use crate::cluster::kube::KubeCluster;
use crate::coord::service::{
    CoordClient, CoordMessage, CoordServer, Members, SharedCoordinators, lock,
};
use crate::coord::{
    CoordCommand, CoordConfig, CoordEvent, Coordinator, Participant, ParticipantCommand,
    ParticipantConfig, ParticipantEvent, PrepareReply, TxnOutcome, recovered_txns,
};
use crate::framework::{GangPlacement, SchedulerConf};
use crate::ledger::LedgerBackend;
use crate::ledger::sharded::mark_bound_at;
use crate::model::ObjectKey;
use crate::replica::pump::{self, HeldBegins, HeldMessages, PumpDriver, Work};
use crate::replica::routing::{marks_by_owner, start_txn};
use crate::simulate::pool_pick::PoolView;

/// How long a transaction may stay undecided before it is aborted.
pub const TXN_TIMEOUT_MS: u64 = 10_000;
/// Most steps of one pump (a bound on work, not a limit met in practice).
const MAX_PUMP_STEPS: usize = 100_000;

/// What one pump needs from the replica this period.
#[derive(Debug)]
pub struct PumpInput<'a> {
    pub ledger: &'a mut ServeLedger,
    pub cluster: &'a mut KubeCluster,
    pub snapshot: &'a ClusterSnapshot,
    /// The ledger as read at the start of the period (owners, nodes, transactions).
    pub state: &'a LedgerState,
    pub conf: &'a SchedulerConf,
    pub scheduler_name: &'a str,
    /// The state the replica's state cache keeps for `snapshot`, when it has one: the
    /// participants' pick view starts from it instead of building the same state again,
    /// and holds what the ledger has beyond it.
    pub kept_state: Option<&'a crate::framework::SessionState>,
}

/// This replica's coordinators and participants, its CoordinatorService, and its clients
/// to the other replicas' services.
pub struct TwoPhase {
    handle: Handle,
    id: ReplicaId,
    coords: SharedCoordinators,
    parts: BTreeMap<ShardId, Participant>,
    server: CoordServer,
    peers: BTreeMap<ReplicaId, String>,
    /// How this replica's service and its calls to the others talk (mutual TLS or not).
    transport: Transport,
    clients: BTreeMap<ReplicaId, CoordClient>,
    seq: u64,
    /// Gang -> its transaction while it is open (a gang is not started twice), with when
    /// it started (ms since the epoch) for the decision latency.
    open: BTreeMap<String, (TxnId, u64)>,
    /// Events for the next pump (recoveries, starts).
    pending: VecDeque<Work>,
    /// Transactions ended since the admin service last took them (`take_ended`).
    ended: Vec<super::admin::TxnEnd>,
    /// Gangs whose transaction committed lately (see [`RecentlyCommitted`]).
    committed: RecentlyCommitted,
}

/// Gangs whose transaction committed in the last [`TXN_TIMEOUT_MS`], with when. A cycle's
/// plan comes from a snapshot taken before its pump ran, so a gang committed and bound by
/// that pump was still pending in it, and a new transaction was started for it at once,
/// to be aborted (seen on the testbed: txn 3 for the `wide` gang 36 ms after txn 2 bound
/// it). A committed gang never needs another transaction: its placements are in the
/// ledger, and a pod whose bind failed is bound by its shard's owner (reconcile). The
/// window only bounds what is kept; the next snapshots show the gang bound.
#[derive(Debug, Default)]
struct RecentlyCommitted(BTreeMap<String, u64>);

impl RecentlyCommitted {
    fn insert(&mut self, gang: String, now_ms: u64) {
        self.0
            .retain(|_, at| now_ms.saturating_sub(*at) < TXN_TIMEOUT_MS);
        self.0.insert(gang, now_ms);
    }

    fn contains(&self, gang: &str, now_ms: u64) -> bool {
        self.0
            .get(gang)
            .is_some_and(|at| now_ms.saturating_sub(*at) < TXN_TIMEOUT_MS)
    }
}

impl std::fmt::Debug for TwoPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TwoPhase")
            .field("id", &self.id)
            .field("listen", &self.server.addr())
            .field("peers", &self.peers)
            .field("open", &self.open.len())
            .finish_non_exhaustive()
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl TwoPhase {
    /// Serves the CoordinatorService on `listen`; `peers` are the other replicas' service
    /// addresses (this one's may be among them). Under mutual TLS only `senders` (the Raft
    /// members) may send it messages.
    pub fn start(
        handle: Handle,
        id: ReplicaId,
        listen: SocketAddr,
        peers: BTreeMap<ReplicaId, String>,
        transport: Transport,
        senders: Members,
    ) -> std::io::Result<Self> {
        let coords: SharedCoordinators = Arc::new(Mutex::new(BTreeMap::new()));
        let server = handle.block_on(CoordServer::start_over(
            listen,
            coords.clone(),
            transport.clone(),
            Some(senders),
        ))?;
        Ok(Self {
            handle,
            id,
            coords,
            parts: BTreeMap::new(),
            server,
            peers,
            transport,
            clients: BTreeMap::new(),
            seq: 0,
            open: BTreeMap::new(),
            pending: VecDeque::new(),
            ended: Vec::new(),
            committed: RecentlyCommitted::default(),
        })
    }

    /// Where this replica's service listens.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// Follows the shards owned this period: a coordinator and a participant for each
    /// (shard, epoch), a new coordinator recovering its shard's transactions from `state`;
    /// those of shards no longer owned (or owned at another epoch) are dropped.
    pub fn follow(&mut self, owned: &BTreeMap<ShardId, Epoch>, state: &LedgerState) {
        let now = now_ms();
        let mut coords = lock(&self.coords);
        coords.retain(|s, c| owned.get(s) == Some(&c.epoch()));
        self.parts.retain(|s, p| owned.get(s) == Some(&p.epoch()));
        for (shard, epoch) in owned {
            if !coords.contains_key(shard) {
                coords.insert(
                    *shard,
                    Coordinator::new(*shard, *epoch, CoordConfig::default()),
                );
                let txns = recovered_txns(state, *shard);
                if !txns.is_empty() {
                    tracing::info!(
                        shard,
                        epoch,
                        txns = txns.len(),
                        "recovering the shard's transactions"
                    );
                }
                self.pending.push_back(Work::ToCoord {
                    to: self.id,
                    shard: *shard,
                    epoch: *epoch,
                    event: CoordEvent::Recover { txns, now_ms: now },
                });
            }
            self.parts
                .entry(*shard)
                .or_insert_with(|| Participant::new(*shard, *epoch, ParticipantConfig::default()));
        }
    }

    /// The transactions ended since the last call (for `phalanx explain`).
    pub fn take_ended(&mut self) -> Vec<super::admin::TxnEnd> {
        std::mem::take(&mut self.ended)
    }

    /// Whether `gang` has a transaction open.
    pub fn is_open(&self, gang: &ObjectKey) -> bool {
        self.open.contains_key(&gang.to_string())
    }

    /// Starts the transaction of `gang` at its home shard (`home`, owned at `epoch`): one
    /// part per pool of the planned nodes (the participants pick the final nodes).
    pub fn start_gang(
        &mut self,
        (home, epoch): (ShardId, Epoch),
        gang: &GangPlacement,
        state: &LedgerState,
    ) {
        let key = gang.gang.to_string();
        let now = now_ms();
        if self.open.contains_key(&key) || self.committed.contains(&key, now) {
            return;
        }
        self.seq += 1;
        let Ok(start) = start_txn((home, epoch), self.seq, gang, state, now, TXN_TIMEOUT_MS) else {
            return;
        };
        tracing::info!(gang = %key, txn = %start.txn, parts = ?start.parts.iter().map(|(s, _)| s).collect::<Vec<_>>(), "starting a cross-shard transaction");
        counter!(metric::TXNS_STARTED).increment(1);
        self.open.insert(key, (start.txn.clone(), now));
        self.pending.push_back(Work::ToCoord {
            to: self.id,
            shard: home,
            epoch,
            event: CoordEvent::Start(start),
        });
    }

    /// The begins of the transactions started this period ([`HeldBegins`]), for the
    /// period's commit to carry in its proposal. Only starts whose coordinator is built
    /// are taken (a shard just taken gets its coordinator at the next pump's `follow`);
    /// everything else stays pending for the pump.
    pub fn take_begins(&mut self, input: &mut PumpInput<'_>) -> HeldBegins {
        let built: BTreeMap<ShardId, Epoch> = lock(&self.coords)
            .iter()
            .map(|(s, c)| (*s, c.epoch()))
            .collect();
        let (starts, rest): (VecDeque<Work>, VecDeque<Work>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|w| match w {
                Work::ToCoord {
                    shard,
                    epoch,
                    event: CoordEvent::Start(_),
                    ..
                } => built.get(shard) == Some(epoch),
                _ => false,
            });
        self.pending = rest;
        let (id, mut work) = (self.id, VecDeque::new());
        let mut driver = ServeDriver {
            tp: self,
            input,
            messages: HeldMessages::default(),
        };
        let begins = HeldBegins::take(&mut driver, id, starts, &mut work);
        // A start sends nothing: its prepares follow the begin's answer.
        driver.flush(&mut work);
        self.pending.extend(work);
        begins
    }

    /// Queues for the next pump the answers to begins the period's commit carried
    /// (`None`: unknown; the coordinators propose them again on a tick).
    pub fn begins_answered(&mut self, begins: HeldBegins, answers: Option<&[LedgerResponse]>) {
        begins.answered(answers, &mut self.pending);
    }

    /// Runs every pending event, the messages received since the last pump, and a tick
    /// for each state machine, until nothing is left (the loop is [`pump::pump`]).
    pub fn pump(&mut self, input: &mut PumpInput<'_>) {
        let now = now_ms();
        let mut work: VecDeque<Work> = std::mem::take(&mut self.pending);
        work.extend(self.received());
        for (shard, c) in lock(&self.coords).iter() {
            work.push_back(Work::ToCoord {
                to: self.id,
                shard: *shard,
                epoch: c.epoch(),
                event: CoordEvent::Tick { now_ms: now },
            });
        }
        for (shard, p) in &self.parts {
            work.push_back(Work::ToPart {
                to: self.id,
                shard: *shard,
                epoch: p.epoch(),
                event: ParticipantEvent::Tick { now_ms: now },
            });
        }
        let mut driver = ServeDriver {
            tp: self,
            input,
            messages: HeldMessages::default(),
        };
        if let Err(e) = pump::pump(&mut driver, work, MAX_PUMP_STEPS) {
            tracing::warn!("{e}");
        }
    }

    /// The messages the service queued, for this replica's state machines.
    fn received(&self) -> Vec<Work> {
        self.server
            .take_delivered()
            .into_iter()
            .map(|d| Work::delivered(self.id, d))
            .collect()
    }

    /// Sends `ms` to replica `to` over gRPC, as one request. A message that cannot be sent
    /// is lost; the state machines resend on a tick.
    fn send_all(&mut self, to: ReplicaId, ms: &[CoordMessage]) {
        let Some(mut client) = self.client(to, ms) else {
            return;
        };
        let results = self.handle.block_on(client.send_all(ms));
        for (m, result) in ms.iter().zip(results) {
            match result {
                Ok(()) => counter!(metric::COORD_MESSAGES, "result" => "sent").increment(1),
                Err(e) => {
                    counter!(metric::COORD_MESSAGES, "result" => "refused").increment(1);
                    tracing::info!(shard = m.route().shard, owner = to, error = %e, "a 2PC message was not delivered; resent on a tick");
                }
            }
        }
    }

    /// The channel to replica `to` (made on first use); `None`, with a warning naming the
    /// shard of `ms`' first message, when `to` has no address or cannot be reached.
    fn client(&mut self, to: ReplicaId, ms: &[CoordMessage]) -> Option<CoordClient> {
        let shard = ms.first().map(|m| m.route().shard);
        let Some(addr) = self.peers.get(&to).cloned() else {
            tracing::warn!(
                ?shard,
                owner = to,
                "no --coord-peers address for the shard's owner"
            );
            return None;
        };
        if let Some(c) = self.clients.get(&to) {
            return Some(c.clone());
        }
        let _guard = self.handle.enter();
        match CoordClient::connect_lazy_over(&addr, to, &self.transport) {
            Ok(c) => {
                self.clients.insert(to, c.clone());
                Some(c)
            }
            Err(e) => {
                tracing::warn!(addr = %addr, error = %e, "cannot reach a coordinator service");
                None
            }
        }
    }

    /// Records a transaction's end: metrics, the log, the list for `phalanx explain`, and
    /// the decision latency of those this replica started.
    fn ended(&mut self, txn: TxnId, outcome: TxnOutcome, reason: String) {
        let name = match outcome {
            TxnOutcome::Committed => "committed",
            TxnOutcome::Aborted => "aborted",
            TxnOutcome::Rejected => "rejected",
            TxnOutcome::Unfinished => "unfinished",
        };
        counter!(metric::TXNS, "outcome" => name).increment(1);
        tracing::info!(txn = %txn, outcome = name, reason = %reason, "cross-shard transaction ended");
        if outcome == TxnOutcome::Committed
            && let Some(gang) = crate::coord::gang_of(&txn)
        {
            self.committed.insert(gang.to_string(), now_ms());
        }
        // Bounded: the replica loop hands them to the admin service every period.
        if self.ended.len() < 1024 {
            self.ended.push(super::admin::TxnEnd {
                gang: crate::coord::gang_of(&txn).unwrap_or_default().to_string(),
                txn: txn.to_string(),
                outcome: name,
                reason,
                at_ms: now_ms(),
            });
        }
        // Only the replica that started it knows when; a recovered one is not timed.
        if let Some((_, started)) = self.open.values().find(|(t, _)| *t == txn) {
            histogram!(metric::TXN_DECISION_LATENCY)
                .record(now_ms().saturating_sub(*started) as f64);
        }
        self.open.retain(|_, (t, _)| *t != txn);
    }
}

/// The pump's driver for one `phalanx serve` replica: its own machines, the ledger through
/// its client, the other replicas over gRPC, binds through the API server.
struct ServeDriver<'t, 'i, 'a> {
    tp: &'t mut TwoPhase,
    input: &'i mut PumpInput<'a>,
    /// Messages for other replicas until the pump's work runs dry.
    messages: HeldMessages,
}

impl PumpDriver for ServeDriver<'_, '_, '_> {
    fn step_coordinator(
        &mut self,
        to: ReplicaId,
        shard: ShardId,
        epoch: Epoch,
        event: CoordEvent,
    ) -> Option<Vec<CoordCommand>> {
        if let CoordEvent::ParticipantReply {
            txn,
            reply: PrepareReply::Prepared {
                committed: true, ..
            },
            ..
        } = &event
        {
            // The last participant logged the commit behind its reservation: this is
            // where the coordinator learns the decision is in the ledger.
            failpoint::hit(CrashPoint::AfterDecision, txn);
        }
        let mut coords = lock(&self.tp.coords);
        let c = coords.get_mut(&shard).filter(|c| c.epoch() == epoch)?;
        (to == self.tp.id).then(|| c.step(event))
    }

    fn step_participant(
        &mut self,
        to: ReplicaId,
        shard: ShardId,
        epoch: Epoch,
        event: ParticipantEvent,
    ) -> Option<Vec<ParticipantCommand>> {
        let p = self
            .tp
            .parts
            .get_mut(&shard)
            .filter(|p| p.epoch() == epoch)?;
        (to == self.tp.id).then(|| p.step(event))
    }

    fn runs(&self, id: ReplicaId) -> bool {
        id == self.tp.id
    }

    /// One ledger batch for the transactions that reached a phase together; the crash
    /// failpoints fire around a batch that carries the commit of a transaction this
    /// replica coordinates (its own decision, or the one its participant logs behind the
    /// last reservation), as around one.
    fn propose_batch(
        &mut self,
        _by: ReplicaId,
        cmds: Vec<LedgerCommand>,
    ) -> Option<Vec<LedgerResponse>> {
        let commits: Vec<TxnId> = {
            let coords = lock(&self.tp.coords);
            cmds.iter()
                .filter_map(|c| match c {
                    LedgerCommand::TxnDecide {
                        txn,
                        shard,
                        decision: TxnDecision::Commit,
                        ..
                    } if coords.contains_key(shard) => Some(txn.clone()),
                    _ => None,
                })
                .collect()
        };
        for txn in &commits {
            failpoint::hit(CrashPoint::AfterReservations, txn);
        }
        let count = cmds.len();
        match self.input.ledger.propose_raw(cmds) {
            Ok(r) if r.len() == count => {
                for txn in &commits {
                    failpoint::hit(CrashPoint::AfterDecision, txn);
                }
                Some(r)
            }
            Ok(r) => {
                tracing::warn!(
                    commands = count,
                    answers = r.len(),
                    "the ledger answered a transaction batch with another count; resent later"
                );
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "a transaction batch's outcome is unknown; resent later");
                None
            }
        }
    }

    fn owner(&self, shard: ShardId) -> Option<(ReplicaId, Epoch)> {
        self.input
            .state
            .shards
            .get(&shard)
            .map(|o| (o.owner, o.epoch))
    }

    /// The coordinator asking its last participant for the reservation and the commit
    /// behind it is where every other participant is reserved and the commit is not yet
    /// logged: the "after-reservations" failpoint when the coordinator does not propose
    /// the commit itself (a resend of that prepare, the first answer lost, may find the
    /// commit logged already; recovery finishes either).
    fn admit_coord_command(&mut self, _from: ReplicaId, cmd: &CoordCommand) -> bool {
        if let CoordCommand::SendPrepare { prepare, .. } = cmd
            && prepare.commit_at.is_some()
        {
            failpoint::hit(CrashPoint::AfterReservations, &prepare.txn);
        }
        true
    }

    fn send(&mut self, _from: ReplicaId, to: ReplicaId, m: CoordMessage, _: &mut VecDeque<Work>) {
        self.messages.hold(to, m);
    }

    /// One `Deliver` request per peer; what peers send arrives through the service and is
    /// taken by `received`.
    fn flush(&mut self, _work: &mut VecDeque<Work>) -> bool {
        let batches = self.messages.take_by_receiver();
        for (to, ms) in &batches {
            self.tp.send_all(*to, ms);
        }
        !batches.is_empty()
    }

    fn open_view(&mut self) -> Result<PoolView, String> {
        let state = self.input.state;
        let node_shard: BTreeMap<String, ShardId> = state
            .nodes
            .iter()
            .map(|(n, r)| (n.clone(), r.shard))
            .collect();
        if let Some(kept) = self.input.kept_state {
            return Ok(PoolView::open_on(
                kept.clone(),
                self.input.conf,
                &node_shard,
                state,
            ));
        }
        Ok(PoolView::open(
            self.input.snapshot,
            self.input.conf,
            self.input.scheduler_name,
            &node_shard,
            state,
        ))
    }

    /// Binds a committed transaction's pods, then marks bound those of shards this replica
    /// owns; the other shards' owners mark theirs when their reconcile sees the pods bound.
    fn bind(&mut self, _by: ReplicaId, txn: &TxnId, gang: &str, pods: &[PodPlacement]) {
        failpoint::hit(CrashPoint::BeforeBind, txn);
        let binds: Vec<(ObjectKey, String)> = pods
            .iter()
            .map(|p| (ObjectKey::parse(&p.pod), p.node.clone()))
            .collect();
        // Bind before taking the coordinators' lock: the CoordinatorService's handlers take
        // it on the runtime's worker threads, and `bind_all` needs those threads to make its
        // API calls; holding the lock across it hung the replica (phalanx-chaos, seed 1).
        let outcomes = self.input.cluster.bind_all(&binds);
        let mut bound = Vec::new();
        for ((pod, node), outcome) in binds.iter().zip(outcomes) {
            match outcome {
                Ok(()) => {
                    counter!(metric::PODS_BOUND).increment(1);
                    if let Some(n) = self.input.state.nodes.get(node) {
                        bound.push((n.shard, pod.clone()));
                    }
                }
                Err(e) => {
                    counter!(metric::BIND_FAILURES).increment(1);
                    tracing::warn!(txn = %txn, pod = %pod, node = %node, error = %e, "binding a committed cross-shard pod failed; its shard's owner retries");
                }
            }
        }
        tracing::info!(txn = %txn, gang, pods = pods.len(), bound = bound.len(), "bound a cross-shard gang (its pods not bound here are retried by their shards' owners)");
        let marks = {
            let coords = lock(&self.tp.coords);
            marks_by_owner(bound, |s| coords.get(&s).map(|c| ((), c.epoch())))
        };
        for (fence, ((), pods)) in marks.by_fence {
            if let Err(e) = self.input.ledger.propose_all(mark_bound_at(fence, &pods)) {
                tracing::warn!(shard = fence.shard, error = %e, "marking bound failed; the next reconcile marks them");
            }
        }
    }

    fn report(&mut self, _by: ReplicaId, txn: TxnId, outcome: TxnOutcome, reason: String) {
        self.tp.ended(txn, outcome, reason);
    }

    fn received(&mut self) -> Vec<Work> {
        self.tp.received()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gang_committed_lately_is_not_started_again_until_the_window_has_passed() {
        let mut committed = RecentlyCommitted::default();
        committed.insert("ns/wide".into(), 1_000);
        // The same cycle's plan, made before the pump bound it, asks again: refused.
        assert!(committed.contains("ns/wide", 1_036));
        assert!(!committed.contains("ns/other", 1_036));
        // Kept no longer than the window, and dropped when another commit comes after it.
        assert!(!committed.contains("ns/wide", 1_000 + TXN_TIMEOUT_MS));
        committed.insert("ns/later".into(), 1_000 + TXN_TIMEOUT_MS);
        assert_eq!(committed.0.len(), 1);
    }
}
