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

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use metrics::{counter, histogram};
use phalanx_statestore::LedgerState;
use phalanx_statestore::ledger::{Epoch, LedgerCommand, ReplicaId, ShardId, TxnId};
use phalanx_statestore::{LedgerResponse, PodPlacement, Transport};
use tokio::runtime::Handle;

use super::ledger::ServeLedger;
use super::metric;
use crate::cluster::ClusterSnapshot;
use crate::cluster::kube::KubeCluster;
use crate::coord::service::{
    CoordClient, CoordMessage, CoordServer, Delivery, Route, SharedCoordinators, lock,
};
use crate::coord::{
    CoordCommand, CoordConfig, CoordEvent, Coordinator, LedgerResult, Participant,
    ParticipantCommand, ParticipantConfig, ParticipantEvent, StartTxn, TxnOutcome, begin_result,
    decide_result, recovered_txns, reserve_result, txn_id,
};
use crate::framework::{GangPlacement, SchedulerConf};
use crate::ledger::sharded::{Fence, mark_bound_at};
use crate::ledger::{LedgerBackend, resource_vec};
use crate::model::ObjectKey;
use crate::simulate::pool_pick::PoolView;

/// How long a transaction may stay undecided before it is aborted.
pub const TXN_TIMEOUT_MS: u64 = 10_000;
/// Most steps of one pump (a bound on work, not a limit met in practice).
const MAX_PUMP_STEPS: usize = 100_000;

/// One unit of work of the pump: an event for one of this replica's state machines.
#[derive(Debug)]
enum Work {
    Coord {
        shard: ShardId,
        event: CoordEvent,
    },
    Part {
        shard: ShardId,
        event: ParticipantEvent,
    },
}

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
    /// addresses (this one's may be among them).
    pub fn start(
        handle: Handle,
        id: ReplicaId,
        listen: SocketAddr,
        peers: BTreeMap<ReplicaId, String>,
        transport: Transport,
    ) -> std::io::Result<Self> {
        let coords: SharedCoordinators = Arc::new(Mutex::new(BTreeMap::new()));
        let server = handle.block_on(CoordServer::start_over(
            listen,
            coords.clone(),
            transport.clone(),
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
                self.pending.push_back(Work::Coord {
                    shard: *shard,
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
        if self.open.contains_key(&key) {
            return;
        }
        self.seq += 1;
        let txn = txn_id(home, epoch, self.seq, &key);
        let mut parts: BTreeMap<ShardId, Vec<PodPlacement>> = BTreeMap::new();
        for p in &gang.placements {
            let Some(shard) = state.nodes.get(&p.node).map(|n| n.shard) else {
                return;
            };
            parts.entry(shard).or_default().push(PodPlacement {
                pod: p.pod.to_string(),
                node: p.node.clone(),
                resources: resource_vec(&p.resources),
            });
        }
        let now = now_ms();
        tracing::info!(gang = %key, txn = %txn, parts = ?parts.keys().collect::<Vec<_>>(), "starting a cross-shard transaction");
        counter!(metric::TXNS_STARTED).increment(1);
        self.open.insert(key.clone(), (txn.clone(), now));
        self.pending.push_back(Work::Coord {
            shard: home,
            event: CoordEvent::Start(StartTxn {
                txn,
                gang: key,
                parts: parts.into_iter().collect(),
                now_ms: now,
                deadline_ms: now.saturating_add(TXN_TIMEOUT_MS),
            }),
        });
    }

    /// Runs every pending event, the messages received since the last pump, and a tick
    /// for each state machine, until nothing is left.
    pub fn pump(&mut self, input: &mut PumpInput<'_>) {
        let now = now_ms();
        let mut work: VecDeque<Work> = std::mem::take(&mut self.pending);
        work.extend(self.received());
        for shard in lock(&self.coords).keys() {
            work.push_back(Work::Coord {
                shard: *shard,
                event: CoordEvent::Tick { now_ms: now },
            });
        }
        for shard in self.parts.keys() {
            work.push_back(Work::Part {
                shard: *shard,
                event: ParticipantEvent::Tick { now_ms: now },
            });
        }
        let mut view: Option<PoolView> = None;
        let mut steps = 0;
        while let Some(w) = work.pop_front() {
            steps += 1;
            if steps > MAX_PUMP_STEPS {
                tracing::warn!(
                    left = work.len(),
                    "the 2PC pump stopped after {MAX_PUMP_STEPS} steps"
                );
                return;
            }
            match w {
                Work::Coord { shard, event } => {
                    let (epoch, cmds) = match lock(&self.coords).get_mut(&shard) {
                        Some(c) => (c.epoch(), c.step(event)),
                        None => continue,
                    };
                    for cmd in cmds {
                        self.coord_command(input, (shard, epoch), cmd, &mut work);
                    }
                }
                Work::Part { shard, event } => {
                    let Some(p) = self.parts.get_mut(&shard) else {
                        continue;
                    };
                    let epoch = p.epoch();
                    for cmd in p.step(event) {
                        self.part_command(input, (shard, epoch), cmd, &mut work, &mut view);
                    }
                }
            }
            if work.is_empty() {
                work.extend(self.received());
            }
        }
    }

    /// The messages the service queued, for the state machines at the routes' epochs.
    fn received(&self) -> Vec<Work> {
        let coords = lock(&self.coords);
        self.server
            .take_delivered()
            .into_iter()
            .filter_map(|d| match d {
                Delivery::Coordinator { route, event } => {
                    (coords.get(&route.shard).map(Coordinator::epoch) == Some(route.epoch))
                        .then_some(Work::Coord {
                            shard: route.shard,
                            event,
                        })
                }
                Delivery::Participant { route, event } => {
                    (self.parts.get(&route.shard).map(Participant::epoch) == Some(route.epoch))
                        .then_some(Work::Part {
                            shard: route.shard,
                            event,
                        })
                }
            })
            .collect()
    }

    /// Proposes one transaction command; `None` when the outcome is unknown (the state
    /// machine resends on a tick).
    fn propose(ledger: &mut ServeLedger, cmd: LedgerCommand) -> Option<LedgerResponse> {
        match ledger.propose_raw(vec![cmd]) {
            Ok(mut r) if !r.is_empty() => Some(r.remove(0)),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(error = %e, "a transaction command's outcome is unknown; resent later");
                None
            }
        }
    }

    fn coord_command(
        &mut self,
        input: &mut PumpInput<'_>,
        (shard, epoch): (ShardId, Epoch),
        cmd: CoordCommand,
        work: &mut VecDeque<Work>,
    ) {
        match cmd {
            CoordCommand::ProposeToLedger(c) => {
                let (txn, decision) = match &c {
                    LedgerCommand::TxnBegin { txn, .. } => (txn.clone(), None),
                    LedgerCommand::TxnDecide { txn, decision, .. } => {
                        (txn.clone(), Some(*decision))
                    }
                    _ => return,
                };
                let Some(r) = Self::propose(input.ledger, c) else {
                    return;
                };
                let result = match decision {
                    None => begin_result(&r),
                    Some(d) => decide_result(d, &r),
                };
                work.push_back(Work::Coord {
                    shard,
                    event: CoordEvent::LedgerApplied { txn, result },
                });
            }
            CoordCommand::SendPrepare { shard: to, prepare } => {
                self.send(input.state, to, work, |route| CoordMessage::Prepare {
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
                self.send(input.state, to, work, |route| CoordMessage::Decide {
                    route,
                    txn,
                    coordinator: shard,
                    coordinator_epoch: epoch,
                    decision,
                });
            }
            CoordCommand::Bind { txn, gang, pods } => self.bind(input, &txn, &gang, &pods),
            CoordCommand::Report {
                txn,
                outcome,
                reason,
            } => {
                let name = match outcome {
                    TxnOutcome::Committed => "committed",
                    TxnOutcome::Aborted => "aborted",
                    TxnOutcome::Rejected => "rejected",
                    TxnOutcome::Unfinished => "unfinished",
                };
                counter!(metric::TXNS, "outcome" => name).increment(1);
                tracing::info!(txn = %txn, outcome = name, reason = %reason, "cross-shard transaction ended");
                // Bounded: the replica loop hands them to the admin service every period.
                if self.ended.len() < 1024 {
                    self.ended.push(super::admin::TxnEnd {
                        gang: crate::coord::gang_of(&txn).unwrap_or_default().to_string(),
                        txn: txn.to_string(),
                        outcome: name,
                        reason: reason.to_string(),
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
    }

    /// Binds a committed transaction's pods (as the participants reserved them), then
    /// marks bound those of shards this replica owns; the other shards' owners mark theirs
    /// when their reconcile sees the pods bound.
    fn bind(&mut self, input: &mut PumpInput<'_>, txn: &str, gang: &str, pods: &[PodPlacement]) {
        let binds: Vec<(ObjectKey, String)> = pods
            .iter()
            .map(|p| (ObjectKey::parse(&p.pod), p.node.clone()))
            .collect();
        let mut bound: BTreeMap<Fence, Vec<ObjectKey>> = BTreeMap::new();
        // Bind before taking the coordinators' lock: the CoordinatorService's handlers take
        // it on the runtime's worker threads, and `bind_all` needs those threads to make its
        // API calls; holding the lock across it hung the replica (phalanx-chaos, seed 1).
        let outcomes = input.cluster.bind_all(&binds);
        let coords = lock(&self.coords);
        for ((pod, node), outcome) in binds.iter().zip(outcomes) {
            match outcome {
                Ok(()) => {
                    counter!(metric::PODS_BOUND).increment(1);
                    let shard = input.state.nodes.get(node).map(|n| n.shard);
                    if let Some((shard, c)) = shard.and_then(|s| coords.get(&s).map(|c| (s, c))) {
                        bound
                            .entry(Fence {
                                shard,
                                epoch: c.epoch(),
                            })
                            .or_default()
                            .push(pod.clone());
                    }
                }
                Err(e) => {
                    counter!(metric::BIND_FAILURES).increment(1);
                    tracing::warn!(txn, pod = %pod, node = %node, error = %e, "binding a committed cross-shard pod failed; its shard's owner retries");
                }
            }
        }
        drop(coords);
        tracing::info!(txn, gang, pods = pods.len(), "bound a cross-shard gang");
        for (fence, pods) in bound {
            if let Err(e) = input.ledger.propose_all(mark_bound_at(fence, &pods)) {
                tracing::warn!(shard = fence.shard, error = %e, "marking bound failed; the next reconcile marks them");
            }
        }
    }

    fn part_command(
        &mut self,
        input: &mut PumpInput<'_>,
        (shard, epoch): (ShardId, Epoch),
        cmd: ParticipantCommand,
        work: &mut VecDeque<Work>,
        view: &mut Option<PoolView>,
    ) {
        match cmd {
            ParticipantCommand::Pick { txn, wanted } => {
                let view = view.get_or_insert_with(|| {
                    let node_shard: BTreeMap<String, ShardId> = input
                        .state
                        .nodes
                        .iter()
                        .map(|(n, r)| (n.clone(), r.shard))
                        .collect();
                    PoolView::open(
                        input.snapshot,
                        input.conf,
                        input.scheduler_name,
                        &node_shard,
                        input.state,
                    )
                });
                let result = view.pick(&txn, shard, &wanted);
                work.push_back(Work::Part {
                    shard,
                    event: ParticipantEvent::Picked { txn, result },
                });
            }
            ParticipantCommand::ProposeToLedger(c) => {
                let (txn, pods) = match &c {
                    LedgerCommand::TxnReserve { txn, gang, .. } => (txn.clone(), gang.pods.clone()),
                    _ => return,
                };
                let Some(r) = Self::propose(input.ledger, c) else {
                    return;
                };
                let result = reserve_result(shard, &r);
                if let Some(view) = view.as_mut() {
                    match &result {
                        LedgerResult::Reserved { .. } => view.reserved(&txn, shard, &pods),
                        LedgerResult::RefusedReserve { .. } => view.refused(&txn, shard),
                        _ => {}
                    }
                }
                work.push_back(Work::Part {
                    shard,
                    event: ParticipantEvent::LedgerApplied { txn, result },
                });
            }
            ParticipantCommand::Reply {
                to,
                txn,
                shard: part,
                reply,
            } => {
                self.send(input.state, to, work, |route| CoordMessage::Reply {
                    route,
                    txn,
                    participant: part,
                    participant_epoch: epoch,
                    reply,
                });
            }
        }
    }

    /// Sends a message to the owner of shard `to` (as the ledger says this period): handed
    /// over directly when that is this replica, else over gRPC. A message that cannot be
    /// sent is lost; the state machines resend on a tick.
    fn send(
        &mut self,
        state: &LedgerState,
        to: ShardId,
        work: &mut VecDeque<Work>,
        message: impl FnOnce(Route) -> CoordMessage,
    ) {
        let Some(owner) = state.shards.get(&to) else {
            return;
        };
        let m = message(Route {
            shard: to,
            epoch: owner.epoch,
        });
        if owner.owner == self.id {
            match m.into_delivery() {
                Delivery::Coordinator { route, event } => work.push_back(Work::Coord {
                    shard: route.shard,
                    event,
                }),
                Delivery::Participant { route, event } => work.push_back(Work::Part {
                    shard: route.shard,
                    event,
                }),
            }
            return;
        }
        let Some(addr) = self.peers.get(&owner.owner).cloned() else {
            tracing::warn!(
                shard = to,
                owner = owner.owner,
                "no --coord-peers address for the shard's owner"
            );
            return;
        };
        let client = match self.clients.get(&owner.owner) {
            Some(c) => c.clone(),
            None => {
                let _guard = self.handle.enter();
                match CoordClient::connect_lazy_over(&addr, owner.owner, &self.transport) {
                    Ok(c) => {
                        self.clients.insert(owner.owner, c.clone());
                        c
                    }
                    Err(e) => {
                        tracing::warn!(addr = %addr, error = %e, "cannot reach a coordinator service");
                        return;
                    }
                }
            }
        };
        let mut client = client;
        match self.handle.block_on(client.send(&m)) {
            Ok(()) => counter!(metric::COORD_MESSAGES, "result" => "sent").increment(1),
            Err(e) => {
                counter!(metric::COORD_MESSAGES, "result" => "refused").increment(1);
                tracing::info!(shard = to, owner = owner.owner, error = %e, "a 2PC message was not delivered; resent on a tick");
            }
        }
    }
}
