//! The sharded runtime of `phalanx simulate --replicas R --shards S` (issue 5): logical
//! scheduler replicas `1..=R` (the ledger replicas' ids) each schedule the shards they own.
//!
//! ```text
//!  round (one schedule period of simulated time)
//!   ├─ faults due: kill / pause / resume / isolate / heal / restart a replica
//!   ├─ leader role: heartbeats of the replicas that run ─► assign() ─► AssignShard (epoch+1)
//!   │               ExpireAt{now} (undecided transactions past their deadline abort)
//!   ├─ each running replica learns its shards from the ledger; a new owner builds a
//!   │  Coordinator + Participant at the new epoch and sends Recover{recovered_txns}
//!   ├─ retry: each owner binds its shards' assumed-but-unbound placements (MarkBound)
//!   ├─ plan: one cycle on the whole cluster's snapshot (fairness from all queues' usage)
//!   ├─ turns, in a fixed seeded order: evictions of the replica's queues, then its gangs:
//!   │     nodes all in the home shard's pool ─► PlaceGangs at (home shard, owner's epoch)
//!   │     otherwise                          ─► 2PC: Start on the home shard's Coordinator,
//!   │                                           prepares to the pools' owners' Participants
//!   └─ bind what the ledger accepted / the coordinator committed; statuses and events of
//!      the shards whose owner took its turn
//! ```
//!
//! Determinism: every replica sees the same snapshot at the start of a round and the cycle
//! is a pure function of it, so each replica's part of the plan is the part of the one plan
//! the cycle yields; the plan is computed once per round here, and the turns are
//! interleaved in one thread in an order fixed by the seed. Real replicas run their cycles
//! concurrently on their own snapshots and the ledger serialises their writes; a gang
//! planned on capacity another replica took first is refused whole and retried. This is
//! why the outcome does not depend on `--replicas` or `--shards`.
//!
//! The 2PC work loop is the engine's ([`crate::replica::pump`], the one `phalanx serve`
//! runs); this runtime is its driver for every replica at once (`SimDriver`), with the
//! transaction faults as its `admit_*` hooks.
//!
//! Messages between replicas (prepare, reply, decision) travel over gRPC: each replica serves
//! `CoordinatorService` on its own 127.0.0.1 port (`coord::service::loopback`), and the pump
//! sends one message at a time, waits for the receiver's Ack (it has queued the message),
//! then takes what was queued into its work queue, where an in-process hand-over would have
//! put it: the order of events does not depend on the transport. A message between the
//! coordinator and a participant of the same replica stays in process. A message to a
//! replica that is down (server stopped), paused or cut off (UNAVAILABLE), or that does not
//! own the shard at the sender's epoch (FAILED_PRECONDITION) is lost: the coordinator
//! resends on its tick, and the ledger's deadline aborts what nobody finishes.
//!
//! A participant's owner picks the nodes of its part in its own pool ([`PoolView`]): the
//! coordinator's nodes are hints, since the owner's own gangs of the same round may have
//! taken them; the coordinator binds the nodes the participant reserved.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::sync::Arc;

use phalanx_statestore::ledger::{
    Epoch, PlacementState, ReplicaId, ShardId, TxnDecision, TxnId, check_all,
};
use phalanx_statestore::{LedgerCommand, LedgerResponse, LedgerState, PodPlacement, Refusal};

use crate::cluster::Cluster;
use crate::cluster::sim::SimCluster;
use crate::coord::service::loopback::LoopbackNet;
use crate::coord::service::{self, CoordMessage, SharedCoordinators};
use crate::coord::{
    CoordCommand, CoordConfig, CoordEvent, Coordinator, Participant, ParticipantCommand,
    ParticipantConfig, ParticipantEvent, TxnOutcome, recovered_txns,
};
use crate::framework::{CyclePlan, GangPlacement};
use crate::invariants::{self, Violation};
use crate::ledger::sharded::{Fence, command_sizes, gang_verdicts, load_sharded, place_at};
use crate::ledger::{LedgerError, LedgerFault, PlacementLedger, ReleaseReason, Verdict};
use crate::model::{DEFAULT_QUEUE, ObjectKey, TimeMs};
use crate::replica::group_commit::{self, Deferred, Outbox};
use crate::replica::pump::{self, HeldBegins, HeldMessages, PumpDriver, Work};
use crate::replica::routing::{RoutesBy, marks_by_owner, start_txn};
use crate::shard::{Heartbeats, ShardMap, ShardingConfig, assign, assign_shards};
use crate::simulate::driver::RunOutcome;
use crate::simulate::pool_pick::PoolView;
use crate::simulate::release_queue::{ReleaseQueue, ReleaseWait};

/// Most messages and proposals one pump may handle (a bound on a round's work).
const MAX_PUMP_STEPS: usize = 1_000_000;

/// Options of the sharded runtime (a validated config).
#[derive(Clone, Debug)]
pub struct ShardOptions {
    pub sharding: ShardingConfig,
    /// Scheduler replicas, ids `1..=replicas`.
    pub replicas: u64,
    /// A replica not heard from for this long is dead; the leader moves its shards.
    pub lease_ms: TimeMs,
    /// Undecided cross-shard transactions abort this long after they start.
    pub txn_timeout_ms: TimeMs,
    /// Fixes the order of the replicas' turns.
    pub seed: u64,
    /// A kill at a precise point of a cross-shard transaction (fault tests).
    pub txn_fault: Option<TxnFault>,
    /// How each replica's planner prefers a gang's home pool.
    pub home_pool: crate::framework::scope::HomePool,
}

impl ShardOptions {
    pub fn new(sharding: ShardingConfig, replicas: u64) -> Self {
        Self {
            sharding,
            replicas,
            lease_ms: 3_000,
            txn_timeout_ms: 5_000,
            seed: 1,
            txn_fault: None,
            home_pool: crate::framework::scope::HomePool::default(),
        }
    }
}

/// Where in a cross-shard transaction a replica is killed (once, the first time it happens).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnFault {
    /// The coordinator's replica, once every participant reserved, before the decision;
    /// or, the last participant logging the commit, once every other one reserved, as it
    /// asks the last (the prepare is not sent).
    CoordinatorAfterReservations,
    /// The coordinator's replica, once the commit is logged, before binding.
    CoordinatorAfterCommit,
    /// A participant's replica (not the coordinator's), when its prepare arrives.
    ParticipantOnPrepare,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Health {
    Up,
    Killed,
    Paused { until_ms: Option<TimeMs> },
    Isolated,
}

#[derive(Debug)]
struct Replica {
    health: Health,
    /// Shards and epochs as this replica last learned them from the ledger.
    owned: BTreeMap<ShardId, Epoch>,
    /// Shared with its `CoordinatorService` server, which checks routes against them and
    /// answers `Query` from them.
    coords: SharedCoordinators,
    parts: BTreeMap<ShardId, Participant>,
    /// After a pause or a partition: it acts on `owned` before it reads the ledger again.
    stale_view: bool,
}

impl Replica {
    fn new() -> Self {
        Self {
            health: Health::Up,
            owned: BTreeMap::new(),
            coords: SharedCoordinators::default(),
            parts: BTreeMap::new(),
            stale_view: false,
        }
    }
}

/// One ownership change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardMove {
    pub at_ms: TimeMs,
    pub shard: ShardId,
    pub from: Option<ReplicaId>,
    pub to: ReplicaId,
    pub epoch: Epoch,
}

/// What the sharded runtime did, for the end-of-run report.
#[derive(Clone, Debug, Default)]
pub struct ShardReport {
    pub shards: u32,
    pub replicas: u64,
    /// Initial assignments (from `None`) and every later move.
    pub moves: Vec<ShardMove>,
    /// Gangs committed with `PlaceGangs` from their home shard's pool.
    pub local_gangs: usize,
    pub txns_started: usize,
    pub txns_committed: usize,
    pub txns_aborted: usize,
    pub txns_rejected: usize,
    pub txns_unfinished: usize,
    /// Undecided transactions the ledger aborted at their deadline (`ExpireAt`).
    pub txns_expired: usize,
    /// 2PC messages between replicas acknowledged over gRPC, refused or lost on the way
    /// (receiver down, paused, cut off, or not the owner at the sender's epoch), and handed
    /// over within one replica (its coordinator and participant).
    pub coord_messages_grpc: u64,
    pub coord_messages_refused: u64,
    pub coord_messages_local: u64,
    /// Batches that carried the messages between replicas: one per receiver each time a
    /// pump's work ran dry (one `Deliver` request each, unless over `MAX_DELIVER_BYTES`).
    pub coord_batches_grpc: u64,
    /// `(txn, outcome, reason)` of every transaction report.
    pub txn_log: Vec<String>,
    /// Writes the ledger refused because their epoch was stale (a deposed owner's).
    pub stale_writes_refused: Vec<String>,
    /// Faults applied to scheduler replicas.
    pub replica_events: Vec<String>,
    /// Invariant checks performed by the runtime (I4 per fenced write, leak per round).
    pub checks: u64,
    pub checks_failed: u64,
    /// Per replica: thread CPU time of its planning (ns; `None` where the OS gives no
    /// per-thread CPU clock) and rounds it planned.
    pub plan_cpu_ns: BTreeMap<ReplicaId, u64>,
    pub plan_rounds: BTreeMap<ReplicaId, u64>,
    /// Thread CPU time of building the rounds' shared views (whole-cluster state,
    /// admission, per-queue shares: once per round, not per replica) and rounds built.
    pub view_cpu_ns: u64,
    pub view_rounds: u64,
    /// How the views' states were made: patched from the last round's, or built whole.
    pub state_cache: crate::framework::state_cache::CacheStats,
    /// Wall-clock milliseconds from a cross-shard transaction's start (its `TxnBegin`
    /// proposal is the coordinator's first command) to its decision being reported.
    pub txn_decision_ms: Vec<f64>,
    /// Proposals the runtime sent to the ledger (each one ordered write, a Raft entry
    /// batch with replicas) and the commands in them.
    pub ledger_proposals: u64,
    pub ledger_commands: u64,
    /// Wall time the runtime spent waiting on the ledger: its proposals (each a Raft
    /// round trip with replicas) and its state reads (linearizable with replicas), and how
    /// many reads it made. The part of a round's performing that is not this runtime's own
    /// work.
    pub ledger_propose_ns: u64,
    pub ledger_read_ns: u64,
    pub ledger_reads: u64,
    /// Pool views the pumps opened (one per pump whose participants pick nodes).
    pub views_opened: u64,
    /// PodGroup statuses written and Events recorded (in `phalanx serve`, API writes).
    pub statuses_written: u64,
    pub events_recorded: u64,
    /// Proposals by what they carried ([`proposal_content`], e.g. "PlaceGangs+TxnBegin"):
    /// where a round's proposals go.
    pub proposals_by_content: BTreeMap<String, u64>,
    /// Raft entries the ledger took for the whole run, the load included (a proposal over
    /// an entry's limits takes more than one); `None` with the in-process ledger.
    pub raft_entries: Option<u64>,
    /// Rounds begun (each running replica plans, commits and binds once a round).
    pub rounds: u64,
    /// Every `kill:` fault: the shards it left without an owner (`kill:leader` is the
    /// leading replica's shards; all of them with a one-replica ledger, where no replica
    /// dies) and how long until the next pod was bound on a node of one of them.
    pub failovers: Vec<FailoverRecord>,
}

impl ShardReport {
    /// The ledger's state, the wait counted in `ledger_read_ns`.
    fn read_ledger(
        &mut self,
        ledger: &mut dyn PlacementLedger,
    ) -> Result<Arc<LedgerState>, LedgerError> {
        let waited = std::time::Instant::now();
        let state = ledger.state();
        self.ledger_reads += 1;
        self.ledger_read_ns += nanos_since(waited);
        state
    }
}

/// A list's answer from the ledger: one response per command.
type Answer = Result<Vec<LedgerResponse>, LedgerError>;

/// The answers of lists of which some were answered without a proposal (`decided[i]`) and
/// the rest proposed, their answers in `proposed` in the same order: one per list, in the
/// lists' order.
fn in_list_order(decided: Vec<Option<Answer>>, proposed: Vec<Answer>) -> Vec<Answer> {
    let mut proposed = proposed.into_iter();
    decided
        .into_iter()
        .map(|d| {
            d.or_else(|| proposed.next()).unwrap_or_else(|| {
                Err(LedgerError::Unexpected(
                    "fewer answers than proposals".into(),
                ))
            })
        })
        .collect()
}

fn nanos_since(t: std::time::Instant) -> u64 {
    u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Kill → next successful bind on a lost shard's pool.
#[derive(Clone, Debug)]
pub struct FailoverRecord {
    pub fault: String,
    pub at_ms: TimeMs,
    pub shards: BTreeSet<ShardId>,
    pub started: std::time::Instant,
    /// Simulated ms from the kill to the bind.
    pub recovered_sim_ms: Option<TimeMs>,
    /// Wall-clock ms from the kill to the bind.
    pub recovered_wall_ms: Option<f64>,
    /// Wall-clock ms from the kill until the leader role moved the last of the lost
    /// shards to a live replica (the detection part of the failover).
    pub moved_wall_ms: Option<f64>,
}

/// What one proposal carried: the kinds of its commands in the order of the ledger's
/// closed set, marks and releases counted as one kind ("PlaceGangs+TxnBegin").
pub fn proposal_content(commands: &[LedgerCommand]) -> String {
    const KINDS: [&str; 7] = [
        "PlaceGangs",
        "TxnBegin",
        "TxnReserve",
        "TxnDecide",
        "MarkBound/Release",
        "ExpireAt",
        "nodes/shards",
    ];
    let mut seen = [false; KINDS.len()];
    for c in commands {
        let i = match c {
            LedgerCommand::PlaceGangs { .. } => 0,
            LedgerCommand::TxnBegin { .. } => 1,
            LedgerCommand::TxnReserve { .. } => 2,
            LedgerCommand::TxnDecide { .. } => 3,
            LedgerCommand::MarkBound { .. } | LedgerCommand::Release { .. } => 4,
            LedgerCommand::ExpireAt { .. } => 5,
            LedgerCommand::UpsertNode { .. }
            | LedgerCommand::RemoveNode { .. }
            | LedgerCommand::SetOvercommit { .. }
            | LedgerCommand::AssignShard { .. } => 6,
        };
        seen[i] = true;
    }
    let named: Vec<&str> = KINDS
        .iter()
        .zip(seen)
        .filter(|(_, s)| *s)
        .map(|(k, _)| *k)
        .collect();
    named.join("+")
}

impl ShardReport {
    /// `proposals_by_content`, most first: "PlaceGangs 120, TxnReserve 300, ...".
    pub fn proposals_by_content(&self) -> String {
        let mut by: Vec<(&String, &u64)> = self.proposals_by_content.iter().collect();
        by.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let parts: Vec<String> = by.iter().map(|(k, n)| format!("{k} {n}")).collect();
        parts.join(", ")
    }

    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "shards: {} over {} replica(s); {} gang(s) placed from their home pool, {} cross-shard transaction(s): {} committed, {} aborted, {} rejected, {} unfinished, {} expired by the ledger",
            self.shards,
            self.replicas,
            self.local_gangs,
            self.txns_started,
            self.txns_committed,
            self.txns_aborted,
            self.txns_rejected,
            self.txns_unfinished,
            self.txns_expired
        );
        let _ = writeln!(
            out,
            "2PC messages: {} sent over gRPC, {} refused or lost, {} within a replica; {} batches carried them",
            self.coord_messages_grpc,
            self.coord_messages_refused,
            self.coord_messages_local,
            self.coord_batches_grpc
        );
        let entries = self.raft_entries.map_or_else(String::new, |n| {
            format!("; {n} Raft entries in all, the load's included")
        });
        let _ = writeln!(
            out,
            "ledger: {} proposals ({} commands) over {} rounds{entries}; by content: {}",
            self.ledger_proposals,
            self.ledger_commands,
            self.rounds,
            self.proposals_by_content()
        );
        for e in &self.replica_events {
            let _ = writeln!(out, "replica fault: {e}");
        }
        for m in self.moves.iter().filter(|m| m.from.is_some()) {
            let _ = writeln!(
                out,
                "shard move at {:.1}s: shard {} from replica {} to replica {} at epoch {}",
                m.at_ms as f64 / 1000.0,
                m.shard,
                m.from.map_or_else(|| "-".to_string(), |f| f.to_string()),
                m.to,
                m.epoch
            );
        }
        for s in &self.stale_writes_refused {
            let _ = writeln!(out, "stale write refused (I4): {s}");
        }
        let _ = writeln!(
            out,
            "invariant checks by the shard runtime: {} performed, {} failed",
            self.checks, self.checks_failed
        );
        out
    }
}

/// A round's plans, one per running replica.
#[derive(Debug, Default)]
pub struct RoundPlans {
    pub per_replica: BTreeMap<ReplicaId, CyclePlan>,
    /// Every replica's plan in one (for statistics).
    pub merged: CyclePlan,
    /// Every replica's pending jobs with the reason, sorted.
    pub pending: Vec<(ObjectKey, String)>,
}

/// The replicas, their shards and their 2PC machines.
#[derive(Debug)]
pub struct ShardRuntime {
    map: ShardMap,
    opts: ShardOptions,
    replicas: BTreeMap<ReplicaId, Replica>,
    heartbeats: Heartbeats,
    /// The ledger's shard map (every `AssignShard` goes through this runtime).
    owners: BTreeMap<ShardId, (ReplicaId, Epoch)>,
    node_shard: BTreeMap<String, ShardId>,
    seq: u64,
    /// Transactions begun and not known to be finished: txn -> gang.
    open: BTreeMap<TxnId, String>,
    /// The deadline of each transaction begun (pruned to `open` by the leader role).
    deadlines: BTreeMap<TxnId, TimeMs>,
    /// Gangs of transactions started this run (for the performed plan).
    started: BTreeMap<TxnId, GangPlacement>,
    /// Something may be committed but unbound, or held: read the ledger next round.
    dirty: bool,
    /// Gangs not to plan again this round (open transaction or placement not yet bound).
    held: HashSet<String>,
    /// Releases not recorded yet (their shard's owner is down, or the ledger did not
    /// answer), retried every round.
    pending_release: ReleaseQueue,
    /// Each replica's marks and releases, waiting for its next proposal (group commit).
    outbox: Outbox,
    /// Rounds begun: a write waits in the outbox until the end of the next round at most.
    round: u64,
    /// Gangs bound since the last [`ShardRuntime::perform`] returned, as bound (pods and
    /// nodes): a round's turns, and what the start of the round bound (recovery of a
    /// committed transaction, the retry of unbound commits).
    bound: Vec<GangPlacement>,
    /// The shard of each pod phalanx placed or found running (= its node's shard).
    pod_shard: BTreeMap<String, ShardId>,
    fired: bool,
    violations: Vec<Violation>,
    /// `Recover` events of newly gained shards, delivered at the next pump.
    recovery: VecDeque<Work>,
    /// When each open transaction was started (wall clock, for the decision latency).
    txn_started_at: BTreeMap<TxnId, std::time::Instant>,
    /// Replicas killed and not restarted, oldest first (`restart:last` takes the last).
    killed: Vec<ReplicaId>,
    /// Each replica's `CoordinatorService` on loopback, and the channels between them.
    net: LoopbackNet,
    /// The configuration and scheduler name the replicas plan with (set by `plan_round`;
    /// Volcano's defaults before): participants judge fit with the same plugins.
    scheduler: (crate::framework::SchedulerConf, String),
    /// The cluster's state kept from round to round for the shared view (see
    /// [`crate::framework::state_cache`]); made at the first round, for its scheduler name.
    state_cache: Option<crate::framework::StateCache>,
    /// Compare the kept state with one built from the snapshot every round (tests).
    pub check_state_cache: bool,
    pub report: ShardReport,
}

impl ShardRuntime {
    pub fn new(opts: ShardOptions) -> Result<Self, String> {
        let sharding = opts
            .sharding
            .clone()
            .validate()
            .map_err(|e| e.to_string())?;
        if opts.replicas == 0 {
            return Err("--replicas 0: at least one replica is needed".into());
        }
        let map = ShardMap::new(sharding).map_err(|e| e.to_string())?;
        let replicas: BTreeMap<ReplicaId, Replica> =
            (1..=opts.replicas).map(|r| (r, Replica::new())).collect();
        let mut net =
            LoopbackNet::new().map_err(|e| format!("starting the replicas' gRPC runtime: {e}"))?;
        for (id, r) in &replicas {
            net.serve(*id, r.coords.clone()).map_err(|e| {
                format!("replica {id}: serving CoordinatorService on 127.0.0.1: {e}")
            })?;
        }
        Ok(Self {
            report: ShardReport {
                shards: map.shard_count(),
                replicas: opts.replicas,
                ..ShardReport::default()
            },
            map,
            heartbeats: Heartbeats::new(opts.lease_ms),
            opts,
            replicas,
            owners: BTreeMap::new(),
            node_shard: BTreeMap::new(),
            seq: 0,
            open: BTreeMap::new(),
            deadlines: BTreeMap::new(),
            started: BTreeMap::new(),
            dirty: false,
            held: HashSet::new(),
            pending_release: ReleaseQueue::default(),
            outbox: Outbox::default(),
            round: 0,
            bound: Vec::new(),
            pod_shard: BTreeMap::new(),
            fired: false,
            violations: Vec::new(),
            recovery: VecDeque::new(),
            txn_started_at: BTreeMap::new(),
            killed: Vec::new(),
            net,
            scheduler: (
                crate::framework::SchedulerConf::volcano_default(),
                crate::model::DEFAULT_SCHEDULER_NAME.to_string(),
            ),
            state_cache: None,
            check_state_cache: false,
        })
    }

    /// The shard map (queue -> shard, node -> shard).
    pub fn map(&self) -> &ShardMap {
        &self.map
    }

    /// Current owners and epochs.
    pub fn owners(&self) -> &BTreeMap<ShardId, (ReplicaId, Epoch)> {
        &self.owners
    }

    /// Violations found by the runtime since the last call.
    pub fn take_violations(&mut self) -> Vec<Violation> {
        std::mem::take(&mut self.violations)
    }

    /// Whether something is still to finish: an open transaction, an unbound commit, a
    /// shard whose owner is down while another replica could take it.
    pub fn busy(&self) -> bool {
        let someone_up = self.replicas.values().any(|r| r.health == Health::Up);
        let orphan = self
            .owners
            .values()
            .any(|(o, _)| self.replicas.get(o).is_none_or(|r| r.health != Health::Up));
        !self.open.is_empty()
            || !self.pending_release.is_empty()
            || !self.outbox.is_empty()
            || self.dirty
            || (someone_up && orphan)
    }

    /// Registers nodes (each in its shard's pool), assigns every shard to the replicas,
    /// and records the pods already running.
    pub fn load(
        &mut self,
        sim: &SimCluster,
        ledger: &mut dyn PlacementLedger,
    ) -> Result<Vec<String>, LedgerError> {
        let nodes: Vec<_> = sim.nodes().map(|n| (n, self.map.shard_of(n))).collect();
        self.node_shard = nodes.iter().map(|(n, s)| (n.name.clone(), *s)).collect();
        let live: BTreeSet<ReplicaId> = self.replicas.keys().copied().collect();
        let shards: BTreeSet<ShardId> = self.map.shards().collect();
        for m in assign_shards(&shards, &BTreeMap::new(), &live) {
            self.owners.insert(m.shard, (m.to, m.new_epoch));
            self.report.moves.push(ShardMove {
                at_ms: sim.now_ms(),
                shard: m.shard,
                from: None,
                to: m.to,
                epoch: m.new_epoch,
            });
        }
        for r in live {
            self.heartbeats.record(r, sim.now_ms());
        }
        let occupying: Vec<_> = sim.pods().filter(|p| p.occupies_node()).collect();
        for p in &occupying {
            if let Some(s) = p.node_name.as_ref().and_then(|n| self.node_shard.get(n)) {
                self.pod_shard.insert(p.key.to_string(), *s);
            }
        }
        let warnings = load_sharded(ledger, &nodes, &self.owners, &occupying)?;
        let ids: Vec<ReplicaId> = self.replicas.keys().copied().collect();
        for id in ids {
            self.learn(id, None, sim.now_ms());
        }
        Ok(warnings)
    }

    /// Applies a fault to a scheduler replica (and to its ledger replica where the fault
    /// is one of the ledger's). Returns what was done.
    pub fn inject(
        &mut self,
        fault: &LedgerFault,
        ledger: &mut dyn PlacementLedger,
        now_ms: TimeMs,
    ) -> String {
        // `kill:leader` is the death of the process that leads: its ledger replica and the
        // scheduler replica beside it, so it is resolved to that replica here (and a
        // `restart:last` brings back the last replica killed, both parts).
        let named = fault.to_string();
        let resolved = match fault {
            LedgerFault::KillLeader if ledger.replicas() >= 2 => match ledger.leader() {
                Ok(Some(id)) => Some(LedgerFault::Kill(id)),
                _ => None,
            },
            LedgerFault::Restart(None) => {
                self.killed.last().map(|id| LedgerFault::Restart(Some(*id)))
            }
            _ => None,
        };
        let fault = resolved.as_ref().unwrap_or(fault);
        match fault {
            LedgerFault::Kill(id) => self.killed.push(*id),
            LedgerFault::Restart(Some(id)) => self.killed.retain(|k| k != id),
            _ => {}
        }
        let ledger_part = if fault.is_scheduler_only() || ledger.replicas() < 2 {
            String::new()
        } else {
            match ledger.inject(fault) {
                Ok(done) => format!("; ledger: {done}"),
                Err(e) => format!("; ledger: failed: {e}"),
            }
        };
        let lost: Option<BTreeSet<ShardId>> = match fault {
            LedgerFault::KillLeader => Some(self.owners.keys().copied().collect()),
            LedgerFault::Kill(id) => Some(
                self.owners
                    .iter()
                    .filter(|(_, (o, _))| o == id)
                    .map(|(s, _)| *s)
                    .collect(),
            ),
            _ => None,
        };
        if let Some(shards) = lost.filter(|s| !s.is_empty()) {
            self.report.failovers.push(FailoverRecord {
                fault: if named == fault.to_string() {
                    named.clone()
                } else {
                    format!("{named} ({fault})")
                },
                at_ms: now_ms,
                shards,
                started: std::time::Instant::now(),
                recovered_sim_ms: None,
                recovered_wall_ms: None,
                moved_wall_ms: None,
            });
        }
        let Some(id) = fault.replica() else {
            return format!("{fault}{ledger_part}");
        };
        let Some(r) = self.replicas.get_mut(&id) else {
            return format!("{fault}: no replica {id}");
        };
        let what = match fault {
            LedgerFault::Kill(_) => {
                r.health = Health::Killed;
                service::lock(&r.coords).clear();
                r.parts.clear();
                self.drop_outbox(id);
                "killed"
            }
            LedgerFault::Restart(_) => {
                *r = Replica::new();
                // A new process: a new server (on a new port) over its new coordinators.
                let coords = r.coords.clone();
                if let Err(e) = self.net.serve(id, coords) {
                    self.report.replica_events.push(format!(
                        "replica {id}: serving CoordinatorService after the restart: {e}"
                    ));
                }
                "restarted with an empty view"
            }
            LedgerFault::Isolate(_) => {
                r.health = Health::Isolated;
                self.drop_outbox(id);
                "cut off"
            }
            LedgerFault::Pause { for_ms, .. } => {
                if r.health == Health::Up {
                    r.health = Health::Paused {
                        until_ms: for_ms.map(|ms| now_ms.saturating_add(ms)),
                    };
                }
                self.drop_outbox(id);
                "paused"
            }
            LedgerFault::Heal(_) | LedgerFault::Resume(_) => {
                if matches!(r.health, Health::Paused { .. } | Health::Isolated) {
                    r.health = Health::Up;
                    r.stale_view = true;
                }
                "running again (with the view it had)"
            }
            LedgerFault::KillLeader => "",
        };
        self.server_follows_health(id);
        let line = format!(
            "{:.1}s replica {id} {what}{ledger_part}",
            now_ms as f64 / 1000.0
        );
        let line = if named == fault.to_string() {
            line
        } else {
            format!("{named}: {line}")
        };
        self.report.replica_events.push(line.clone());
        self.dirty = true;
        line
    }

    /// The start of a round: resumes, heartbeats, the leader's moves and expiry, each
    /// replica learning its shards, ticks, and the retry of unbound commits.
    pub fn begin_round(
        &mut self,
        sim: &mut SimCluster,
        ledger: &mut dyn PlacementLedger,
        errors: &mut Vec<String>,
    ) {
        let now = sim.now_ms();
        self.round += 1;
        self.report.rounds = self.round;
        let mut resumed = Vec::new();
        for (id, r) in &mut self.replicas {
            if let Health::Paused {
                until_ms: Some(until),
            } = r.health
                && until <= now
            {
                r.health = Health::Up;
                r.stale_view = true;
                resumed.push(*id);
            }
        }
        for id in resumed {
            self.server_follows_health(id);
        }
        let up: Vec<ReplicaId> = self.up();
        for id in &up {
            self.heartbeats.record(*id, now);
        }
        if up.is_empty() {
            return;
        }
        self.lead(ledger, now, errors);
        let mut state: Option<Arc<LedgerState>> = None;
        for id in &up {
            if self.replicas[id].stale_view {
                continue;
            }
            self.learn(*id, Some((&mut state, &mut *ledger)), now);
        }
        let mut mail = std::mem::take(&mut self.recovery);
        for id in &up {
            let r = self.replicas.get_mut(id).expect("listed as up");
            for (shard, c) in service::lock(&r.coords).iter_mut() {
                let epoch = c.epoch();
                mail.extend(
                    c.step(CoordEvent::Tick { now_ms: now })
                        .into_iter()
                        .map(|cmd| Work::FromCoord {
                            from: *id,
                            shard: *shard,
                            epoch,
                            cmd,
                        }),
                );
            }
            for (shard, p) in &mut r.parts {
                let epoch = p.epoch();
                mail.extend(
                    p.step(ParticipantEvent::Tick { now_ms: now })
                        .into_iter()
                        .map(|cmd| Work::FromPart {
                            from: *id,
                            shard: *shard,
                            epoch,
                            cmd,
                        }),
                );
            }
        }
        self.pump(sim, ledger, mail, errors);
        self.retry_releases();
        if self.dirty || !self.open.is_empty() {
            self.retry_unbound(sim, ledger, errors);
            let recovery = std::mem::take(&mut self.recovery);
            if !recovery.is_empty() {
                self.pump(sim, ledger, recovery, errors);
            }
        } else {
            self.held.clear();
        }
    }

    fn up(&self) -> Vec<ReplicaId> {
        self.replicas
            .iter()
            .filter(|(_, r)| r.health == Health::Up)
            .map(|(id, _)| *id)
            .collect()
    }

    /// The Raft leader's duties: move the shards of replicas not heard from within the
    /// lease (and rebalance), and abort undecided transactions past their deadline.
    fn lead(&mut self, ledger: &mut dyn PlacementLedger, now: TimeMs, errors: &mut Vec<String>) {
        let live = self.heartbeats.live(now);
        for m in assign(&self.owners, &live) {
            self.report.ledger_proposals += 1;
            self.report.ledger_commands += 1;
            match ledger.propose_raw(vec![m.to_command()]) {
                Ok(r) if r.iter().all(|r| r.refusal().is_none()) => {
                    self.owners.insert(m.shard, (m.to, m.new_epoch));
                    for f in &mut self.report.failovers {
                        if f.moved_wall_ms.is_none()
                            && f.shards.contains(&m.shard)
                            && f.shards.iter().all(|s| {
                                self.owners.get(s).is_some_and(|(o, _)| {
                                    self.replicas.get(o).is_some_and(|r| r.health == Health::Up)
                                })
                            })
                        {
                            f.moved_wall_ms = Some(f.started.elapsed().as_secs_f64() * 1000.0);
                        }
                    }
                    self.report.moves.push(ShardMove {
                        at_ms: now,
                        shard: m.shard,
                        from: m.from,
                        to: m.to,
                        epoch: m.new_epoch,
                    });
                    self.dirty = true;
                }
                Ok(r) => errors.push(format!("moving shard {}: {r:?}", m.shard)),
                Err(e) => errors.push(format!("moving shard {}: {e}", m.shard)),
            }
        }
        // As the ledger's own expiry loop (statestore expiry.rs): only once a transaction
        // not known to be decided is past its deadline.
        self.deadlines.retain(|t, _| self.open.contains_key(t));
        if !self.deadlines.values().any(|d| *d <= now) {
            return;
        }
        self.report.ledger_proposals += 1;
        self.report.ledger_commands += 1;
        match ledger.propose_raw(vec![LedgerCommand::ExpireAt { now_ms: now }]) {
            Ok(responses) => {
                for r in responses {
                    if let LedgerResponse::Expired { aborted } = r {
                        self.report.txns_expired += aborted.len();
                        for t in aborted {
                            self.open.remove(&t);
                        }
                    }
                }
            }
            Err(e) => errors.push(format!("expiring transactions: {e}")),
        }
    }

    /// Replica `id` reads its shards from the ledger: a shard gained (or regained at a new
    /// epoch) gets a fresh Coordinator and Participant, and the Coordinator recovers the
    /// shard's transactions; a shard lost drops its machines.
    fn learn(
        &mut self,
        id: ReplicaId,
        recover: Option<(&mut Option<Arc<LedgerState>>, &mut dyn PlacementLedger)>,
        now: TimeMs,
    ) {
        let mine: BTreeMap<ShardId, Epoch> = self
            .owners
            .iter()
            .filter(|(_, (o, _))| *o == id)
            .map(|(s, (_, e))| (*s, *e))
            .collect();
        // Writes queued for shards it lost go to their new owner instead.
        let lost: BTreeSet<ShardId> = self.replicas[&id]
            .owned
            .iter()
            .filter(|(s, e)| mine.get(s) != Some(e))
            .map(|(s, _)| *s)
            .collect();
        if !lost.is_empty() {
            let writes = self.outbox.take_shards(id, &lost);
            self.hand_back(writes);
        }
        let r = self.replicas.get_mut(&id).expect("a known replica");
        r.stale_view = false;
        if r.owned == mine {
            return;
        }
        let mut coords = service::lock(&r.coords);
        coords.retain(|s, c| mine.get(s) == Some(&c.epoch()));
        r.parts.retain(|s, p| mine.get(s) == Some(&p.epoch()));
        let gained: Vec<(ShardId, Epoch)> = mine
            .iter()
            .filter(|(s, e)| r.owned.get(s) != Some(e))
            .map(|(s, e)| (*s, *e))
            .collect();
        r.owned = mine;
        for (shard, epoch) in &gained {
            coords.insert(
                *shard,
                Coordinator::new(*shard, *epoch, CoordConfig::default()),
            );
            r.parts.insert(
                *shard,
                Participant::new(*shard, *epoch, ParticipantConfig::default()),
            );
        }
        drop(coords);
        let Some((state, ledger)) = recover else {
            return;
        };
        if gained.is_empty() {
            return;
        }
        if state.is_none() {
            match self.report.read_ledger(ledger) {
                Ok(s) => *state = Some(s),
                Err(_) => {
                    self.dirty = true;
                    return;
                }
            }
        }
        let Some(state) = state.as_ref() else { return };
        for (shard, epoch) in gained {
            let txns = recovered_txns(state, shard);
            if txns.is_empty() {
                continue;
            }
            for t in &txns {
                if t.decision.is_some() {
                    self.open.remove(&t.txn);
                }
            }
            self.recovery.push_back(Work::ToCoord {
                to: id,
                shard,
                epoch,
                event: CoordEvent::Recover { txns, now_ms: now },
            });
        }
    }
}

impl ShardRuntime {
    /// Proposes each replica's fenced commands, the lists together (each a replica's own,
    /// on disjoint shards) as replicas in processes of their own would: one round trip for
    /// all of them rather than one each. Every response is checked for I4 against the
    /// shard map, and a stale-epoch refusal is recorded (the proposer then learns the new
    /// epoch). An empty list proposes nothing (with Raft it would still take a round trip
    /// and an entry). One result per list, in order.
    fn propose_each(
        &mut self,
        ledger: &mut dyn PlacementLedger,
        lists: Vec<(ReplicaId, Vec<LedgerCommand>)>,
    ) -> Vec<Answer> {
        let mut decided: Vec<Option<Answer>> = Vec::with_capacity(lists.len());
        let mut going: Vec<(ReplicaId, Vec<LedgerCommand>)> = Vec::new();
        for (by, commands) in lists {
            if commands.is_empty() {
                decided.push(Some(Ok(Vec::new())));
                continue;
            }
            match self.admit_proposal(by, &commands) {
                Ok(()) => {
                    decided.push(None);
                    going.push((by, commands));
                }
                Err(e) => decided.push(Some(Err(e))),
            }
        }
        let waited = std::time::Instant::now();
        let answers = ledger.propose_raw_each(going.iter().map(|(_, c)| c.clone()).collect());
        self.report.ledger_propose_ns += nanos_since(waited);
        for ((by, commands), answer) in going.iter().zip(&answers) {
            if let Ok(responses) = answer {
                self.check_responses(*by, commands, responses);
            }
        }
        in_list_order(decided, answers)
    }

    /// Whether `by` may propose now (a replica cut off from the ledger may not), counting
    /// the proposal.
    fn admit_proposal(
        &mut self,
        by: ReplicaId,
        commands: &[LedgerCommand],
    ) -> Result<(), LedgerError> {
        if self
            .replicas
            .get(&by)
            .is_some_and(|r| r.health == Health::Isolated)
        {
            return Err(LedgerError::Unavailable(format!(
                "replica {by} is cut off from the ledger"
            )));
        }
        self.report.ledger_proposals += 1;
        self.report.ledger_commands += commands.len() as u64;
        *self
            .report
            .proposals_by_content
            .entry(proposal_content(commands))
            .or_default() += 1;
        Ok(())
    }

    /// I4 for each fenced command's response, and what a stale epoch teaches `by`.
    fn check_responses(
        &mut self,
        by: ReplicaId,
        commands: &[LedgerCommand],
        responses: &[LedgerResponse],
    ) {
        for (cmd, response) in commands.iter().zip(responses) {
            if cmd.fence().is_none() {
                continue;
            }
            self.report.checks += 1;
            let found = invariants::check_fencing(&self.owners, cmd, response);
            self.report.checks_failed += found.len() as u64;
            self.violations.extend(found);
            if let Some(Refusal::StaleEpoch { .. }) = response.refusal() {
                self.report.stale_writes_refused.push(format!(
                    "replica {by}: {} refused: {}",
                    command_name(cmd),
                    response
                        .refusal()
                        .map(ToString::to_string)
                        .unwrap_or_default()
                ));
                self.learn(by, None, 0);
            }
        }
    }

    /// Delivers messages and performs the machines' commands until nothing is left (the
    /// loop is [`pump::pump`]; this runtime is its driver for every replica at once).
    fn pump(
        &mut self,
        sim: &mut SimCluster,
        ledger: &mut dyn PlacementLedger,
        work: VecDeque<Work>,
        errors: &mut Vec<String>,
    ) {
        let mut driver = SimDriver::new(self, sim, ledger);
        if let Err(e) = pump::pump(&mut driver, work, MAX_PUMP_STEPS) {
            errors.push(e.to_string());
        }
    }

    /// Steps replica `by`'s new transactions' starts and holds the `TxnBegin`s they ask
    /// for ([`HeldBegins`]); anything else they lead to goes onto `work` for the pump.
    fn take_begins(
        &mut self,
        sim: &mut SimCluster,
        ledger: &mut dyn PlacementLedger,
        by: ReplicaId,
        starts: Vec<Work>,
        work: &mut VecDeque<Work>,
    ) -> HeldBegins {
        let mut driver = SimDriver::new(self, sim, ledger);
        let begins = HeldBegins::take(&mut driver, by, starts, work);
        // A start sends nothing: its prepares follow the begin's answer.
        driver.flush(work);
        begins
    }

    /// Ends `txn` in the report and in this runtime's bookkeeping of open transactions.
    fn txn_ended(&mut self, txn: TxnId, outcome: TxnOutcome, reason: &str) {
        match outcome {
            TxnOutcome::Committed => self.report.txns_committed += 1,
            TxnOutcome::Aborted => self.report.txns_aborted += 1,
            TxnOutcome::Rejected => self.report.txns_rejected += 1,
            TxnOutcome::Unfinished => self.report.txns_unfinished += 1,
        }
        self.report
            .txn_log
            .push(format!("{txn}: {outcome:?}: {reason}"));
        if outcome != TxnOutcome::Unfinished {
            self.open.remove(&txn);
        }
        if let Some(t) = self.txn_started_at.remove(&txn)
            && matches!(outcome, TxnOutcome::Committed | TxnOutcome::Aborted)
        {
            self.report
                .txn_decision_ms
                .push(t.elapsed().as_secs_f64() * 1000.0);
        }
        if outcome != TxnOutcome::Committed {
            self.started.remove(&txn);
        }
        self.dirty = true;
    }

    /// The transaction fault due at `cmd` of replica `from`'s coordinator, if any: it fires
    /// once, killing that replica (the command is then not performed).
    fn coordinator_fault(
        &mut self,
        ledger: &mut dyn PlacementLedger,
        from: ReplicaId,
        cmd: &CoordCommand,
        now: TimeMs,
    ) -> bool {
        let why = match (self.opts.txn_fault, cmd) {
            (
                Some(TxnFault::CoordinatorAfterReservations),
                CoordCommand::ProposeToLedger(LedgerCommand::TxnDecide {
                    decision: TxnDecision::Commit,
                    ..
                }),
            ) => "killed after every reservation, before the decision (txn fault)",
            (
                Some(TxnFault::CoordinatorAfterReservations),
                CoordCommand::SendPrepare { prepare, .. },
            ) if prepare.commit_at.is_some() => {
                "killed after every reservation but the last, before asking it for the commit (txn fault)"
            }
            (Some(TxnFault::CoordinatorAfterCommit), CoordCommand::Bind { .. }) => {
                "killed after the commit was logged, before binding (txn fault)"
            }
            _ => return false,
        };
        if self.fired {
            return false;
        }
        self.fired = true;
        self.kill(ledger, from, why, now);
        true
    }
}

/// The pump's driver for every simulated replica at once: their machines in this runtime,
/// the shared ledger, the loopback gRPC network between them, the simulated cluster.
struct SimDriver<'r, 's, 'l> {
    rt: &'r mut ShardRuntime,
    sim: &'s mut SimCluster,
    ledger: &'l mut dyn PlacementLedger,
    now: TimeMs,
    /// Messages for other replicas until the pump's work runs dry.
    messages: HeldMessages,
}

impl<'r, 's, 'l> SimDriver<'r, 's, 'l> {
    /// The driver of every replica of `rt`, at the simulated cluster's time.
    fn new(
        rt: &'r mut ShardRuntime,
        sim: &'s mut SimCluster,
        ledger: &'l mut dyn PlacementLedger,
    ) -> Self {
        let now = sim.now_ms();
        Self {
            rt,
            sim,
            ledger,
            now,
            messages: HeldMessages::default(),
        }
    }

    fn running(&self, id: ReplicaId) -> Option<&Replica> {
        self.rt.replicas.get(&id).filter(|r| r.health == Health::Up)
    }
}

impl PumpDriver for SimDriver<'_, '_, '_> {
    fn step_coordinator(
        &mut self,
        to: ReplicaId,
        shard: ShardId,
        epoch: Epoch,
        event: CoordEvent,
    ) -> Option<Vec<CoordCommand>> {
        let r = self.running(to)?;
        let mut coords = service::lock(&r.coords);
        let c = coords.get_mut(&shard).filter(|c| c.epoch() == epoch)?;
        Some(c.step(event))
    }

    fn step_participant(
        &mut self,
        to: ReplicaId,
        shard: ShardId,
        epoch: Epoch,
        event: ParticipantEvent,
    ) -> Option<Vec<ParticipantCommand>> {
        let r = self.rt.replicas.get_mut(&to)?;
        if r.health != Health::Up {
            return None;
        }
        let p = r.parts.get_mut(&shard).filter(|p| p.epoch() == epoch)?;
        Some(p.step(event))
    }

    fn runs(&self, id: ReplicaId) -> bool {
        self.running(id).is_some()
    }

    fn propose_batch(
        &mut self,
        by: ReplicaId,
        cmds: Vec<LedgerCommand>,
    ) -> Option<Vec<LedgerResponse>> {
        self.rt.propose_grouped(self.ledger, by, cmds).ok()
    }

    /// The replicas' batches of one wave together, as replicas in processes of their own
    /// propose: they write disjoint shards (where their order can still matter:
    /// [`PumpDriver::propose_batches`]).
    fn propose_batches(
        &mut self,
        batches: Vec<(ReplicaId, Vec<LedgerCommand>)>,
    ) -> Vec<Option<Vec<LedgerResponse>>> {
        self.rt
            .propose_grouped_each(self.ledger, batches)
            .into_iter()
            .map(Result::ok)
            .collect()
    }

    fn owner(&self, shard: ShardId) -> Option<(ReplicaId, Epoch)> {
        self.rt.owners.get(&shard).copied()
    }

    /// Held until the pump's work runs dry ([`Self::flush`]).
    fn send(
        &mut self,
        _from: ReplicaId,
        to: ReplicaId,
        m: CoordMessage,
        _work: &mut VecDeque<Work>,
    ) {
        self.messages.hold(to, m);
    }

    /// Over gRPC, one request per receiver in a fixed order, blocking until each receiver
    /// has queued its batch, then from the receivers' queues (in replica order) to the
    /// back of `work`: the order of events does not depend on the threads.
    fn flush(&mut self, work: &mut VecDeque<Work>) -> bool {
        let batches = self.messages.take_by_receiver();
        for (to, ms) in &batches {
            for result in self.rt.net.send_all(*to, ms) {
                match result {
                    Ok(()) => self.rt.report.coord_messages_grpc += 1,
                    Err(_) => self.rt.report.coord_messages_refused += 1,
                }
            }
            self.rt.report.coord_batches_grpc += 1;
        }
        work.extend(
            self.rt
                .net
                .take_delivered()
                .into_iter()
                .map(|(id, d)| Work::delivered(id, d)),
        );
        !batches.is_empty()
    }

    fn sent_locally(&mut self) {
        self.rt.report.coord_messages_local += 1;
    }

    fn open_view(&mut self) -> Result<PoolView, String> {
        let (conf, name) = &self.rt.scheduler;
        self.rt.report.views_opened += 1;
        let state = self
            .rt
            .report
            .read_ledger(self.ledger)
            .map_err(|e| format!("reading the ledger to pick nodes: {e}"))?;
        // The cluster as it is now, not the state the round's view was made from: the
        // round's evictions free nodes that state still shows taken (a preemptor in
        // another pool would wait a round). Pending pods neither occupy a node nor are
        // picked for, except those of this run's open transactions: leaving the others
        // out cuts the cost of opening the view (once per pump that picks) by about 40 %.
        let picked_for: BTreeSet<&ObjectKey> = self
            .rt
            .started
            .values()
            .flat_map(|g| g.placements.iter().map(|p| &p.pod))
            .collect();
        let (snapshot, occupying) = self.sim.snapshot_for_picking(&picked_for);
        Ok(PoolView::open_among(
            &snapshot,
            &occupying,
            conf,
            name,
            &self.rt.node_shard,
            &state,
        ))
    }

    /// The participants picked the nodes (the plan's were hints): the pods are bound and
    /// recorded where the replies placed them.
    fn bind(&mut self, _by: ReplicaId, txn: &TxnId, _gang: &str, pods: &[PodPlacement]) {
        let pods: Vec<(ObjectKey, String)> = pods
            .iter()
            .map(|p| (ObjectKey::parse(&p.pod), p.node.clone()))
            .collect();
        let gang = match self.rt.started.remove(txn) {
            Some(g) => g.gang,
            None => ObjectKey::parse(crate::coord::gang_of(txn).unwrap_or(txn)),
        };
        self.rt.bind_pods(self.sim, &gang, &pods);
    }

    fn report(&mut self, _by: ReplicaId, txn: TxnId, outcome: TxnOutcome, reason: String) {
        self.rt.txn_ended(txn, outcome, &reason);
    }

    fn admit_coord_command(&mut self, from: ReplicaId, cmd: &CoordCommand) -> bool {
        !self.rt.coordinator_fault(self.ledger, from, cmd, self.now)
    }

    fn admit_part_event(&mut self, to: ReplicaId, event: &ParticipantEvent) -> bool {
        let ParticipantEvent::Prepare(p) = event else {
            return true;
        };
        if self.rt.opts.txn_fault != Some(TxnFault::ParticipantOnPrepare)
            || self.rt.fired
            || self.rt.owners.get(&p.coordinator).map(|(o, _)| *o) == Some(to)
        {
            return true;
        }
        self.rt.fired = true;
        self.rt
            .kill(self.ledger, to, "killed on a prepare (txn fault)", self.now);
        false
    }
}

impl ShardRuntime {
    /// Replica `id`'s server does what its health says: serve when up, answer UNAVAILABLE
    /// when paused or cut off, stop when killed.
    fn server_follows_health(&mut self, id: ReplicaId) {
        let Some(r) = self.replicas.get(&id) else {
            return;
        };
        let refusing = match r.health {
            Health::Up => None,
            Health::Paused { .. } => Some(format!("replica {id} is paused")),
            Health::Isolated => Some(format!("replica {id} is cut off")),
            Health::Killed => {
                self.net.stop(id);
                return;
            }
        };
        if !self.net.is_serving(id)
            && let Err(e) = self.net.serve(id, r.coords.clone())
        {
            self.report
                .replica_events
                .push(format!("replica {id}: serving CoordinatorService: {e}"));
        }
        self.net.set_refusing(id, refusing);
    }

    fn kill(&mut self, ledger: &mut dyn PlacementLedger, id: ReplicaId, why: &str, now: TimeMs) {
        let line = self.inject(&LedgerFault::Kill(id), ledger, now);
        self.report.replica_events.push(format!("{line} ({why})"));
    }

    /// Binds `gang`'s pods (idempotent: a pod already on its node is done), records the
    /// pods this call bound in [`Self::bound`] (every bind is counted and checked), then
    /// each pod's shard owner records `MarkBound` at its epoch; an owner that is down
    /// leaves it to the retry. A pod that cannot be bound has its placement released.
    fn bind_pods(&mut self, sim: &mut SimCluster, gang: &ObjectKey, pods: &[(ObjectKey, String)]) {
        let mut bound = Vec::new();
        let mut failed = Vec::new();
        let mut fresh = Vec::new();
        for (pod, node) in pods {
            let shard = self.node_shard.get(node).copied().unwrap_or_default();
            self.pod_shard.insert(pod.to_string(), shard);
            let ok = match sim.pod(pod).map(|p| p.node_name.clone()) {
                Some(None) => {
                    let bound = sim.bind(pod, node).is_ok();
                    if bound {
                        fresh.push(crate::framework::Placement {
                            pod: pod.clone(),
                            node: node.clone(),
                            resources: sim.pod(pod).map(|p| p.requests.clone()).unwrap_or_default(),
                        });
                    }
                    bound
                }
                Some(Some(n)) => &n == node,
                None => false,
            };
            if ok {
                self.failover_recovered(shard, sim.now_ms());
                bound.push((shard, pod.clone()));
            } else {
                failed.push(pod.clone());
            }
        }
        if !fresh.is_empty() {
            self.bound.push(GangPlacement {
                gang: gang.clone(),
                placements: fresh,
            });
        }
        self.mark_bound_by_owners(bound);
        if !failed.is_empty() {
            self.release(&failed, ReleaseReason::BindFailed);
        }
    }

    /// A bind on a node of `shard`: the failovers that lost it are over.
    fn failover_recovered(&mut self, shard: ShardId, now: TimeMs) {
        for f in &mut self.report.failovers {
            if f.recovered_sim_ms.is_none() && f.shards.contains(&shard) {
                f.recovered_sim_ms = Some(now.saturating_sub(f.at_ms));
                f.recovered_wall_ms = Some(f.started.elapsed().as_secs_f64() * 1000.0);
            }
        }
    }

    /// Each bound pod's shard's running owner records it bound at its epoch, in its next
    /// proposal (group commit); a shard whose owner is down, or a refusal, leaves it to the
    /// retry of unbound commits.
    fn mark_bound_by_owners(&mut self, bound: Vec<(ShardId, ObjectKey)>) {
        let marks = marks_by_owner(bound, |shard| {
            let (owner, epoch) = self.owners.get(&shard).copied()?;
            let up = self
                .replicas
                .get(&owner)
                .is_some_and(|r| r.health == Health::Up);
            up.then_some((owner, epoch))
        });
        if !marks.unmarked.is_empty() {
            self.dirty = true;
        }
        for (fence, (owner, pods)) in marks.by_fence {
            self.outbox
                .push(owner, self.round, Deferred::MarkBound { fence, pods });
        }
    }

    /// Releases placements of pods that finished, were evicted or failed to bind: each by
    /// its shard's current owner; an owner that is down leaves it for a later round.
    pub fn release(&mut self, pods: &[ObjectKey], reason: ReleaseReason) {
        let mut by_shard: BTreeMap<ShardId, Vec<ObjectKey>> = BTreeMap::new();
        for pod in pods {
            match self.pod_shard.get(&pod.to_string()) {
                Some(s) => by_shard.entry(*s).or_default().push(pod.clone()),
                None => continue, // never placed by phalanx: nothing to release
            }
        }
        for (shard, pods) in by_shard {
            match self.release_by_owner(shard, &pods, reason) {
                None => {
                    for p in &pods {
                        self.pod_shard.remove(&p.to_string());
                    }
                }
                Some(wait) => {
                    for p in pods {
                        self.pending_release.push(p, reason, wait.clone());
                    }
                }
            }
        }
    }

    /// `shard`'s running owner releases `pods` at its epoch, in its next proposal (group
    /// commit; [`Self::settle`] re-queues what the ledger then refuses or does not answer);
    /// `None` when queued, else why it must wait.
    fn release_by_owner(
        &mut self,
        shard: ShardId,
        pods: &[ObjectKey],
        reason: ReleaseReason,
    ) -> Option<ReleaseWait> {
        let running =
            |rt: &Self, o: &ReplicaId| rt.replicas.get(o).is_some_and(|r| r.health == Health::Up);
        let (owner, epoch) = match self.owners.get(&shard).copied() {
            Some((o, e)) if running(self, &o) => (o, e),
            _ => return Some(ReleaseWait::Owner),
        };
        let write = Deferred::Release {
            fence: Fence { shard, epoch },
            pods: pods.to_vec(),
            reason,
        };
        self.outbox.push(owner, self.round, write);
        None
    }

    /// Proposes `commands` of replica `by` as one ledger batch with the marks and releases
    /// queued for it in front (group commit); settles each queued write with its answer,
    /// and returns the answers to `commands`.
    fn propose_grouped(
        &mut self,
        ledger: &mut dyn PlacementLedger,
        by: ReplicaId,
        commands: Vec<LedgerCommand>,
    ) -> Answer {
        self.propose_grouped_each(ledger, vec![(by, commands)])
            .pop()
            .expect("one answer per list")
    }

    /// [`Self::propose_grouped`] for several replicas, their proposals sent together
    /// ([`Self::propose_each`]). One result per list, in order.
    fn propose_grouped_each(
        &mut self,
        ledger: &mut dyn PlacementLedger,
        lists: Vec<(ReplicaId, Vec<LedgerCommand>)>,
    ) -> Vec<Answer> {
        let mut grouped = Vec::with_capacity(lists.len());
        let mut batches = Vec::with_capacity(lists.len());
        for (by, commands) in lists {
            let queued = self.outbox.take(by);
            let (batch, counts) = group_commit::batch(&queued, commands);
            grouped.push((queued, counts));
            batches.push((by, batch));
        }
        let answers = self.propose_each(ledger, batches);
        grouped
            .into_iter()
            .zip(answers)
            .map(|((queued, counts), answer)| self.settle_group(queued, &counts, answer))
            .collect()
    }

    /// Settles the queued writes that rode in a batch and returns the answers to the
    /// batch's own commands.
    fn settle_group(&mut self, queued: Vec<Deferred>, counts: &[usize], answer: Answer) -> Answer {
        let answered = answer.and_then(|r| {
            group_commit::split_answers(r, counts).ok_or_else(|| {
                LedgerError::Unexpected("fewer answers than commands in a batch".into())
            })
        });
        match answered {
            Ok((theirs, rest)) => {
                for (write, answer) in queued.into_iter().zip(theirs) {
                    self.settle(write, Ok(&answer));
                }
                Ok(rest)
            }
            Err(e) => {
                for write in queued {
                    self.settle(write, Err(&e));
                }
                Err(e)
            }
        }
    }

    /// What follows a queued write's answer: a mark refused or unanswered is left to the
    /// retry of unbound commits; a release is queued again, for the shard's owner when the
    /// writer had lost the shard meanwhile, else judged (refused) or retried (unanswered).
    fn settle(&mut self, write: Deferred, answer: Result<&[LedgerResponse], &LedgerError>) {
        let refusal = answer.map(|r| r.iter().find_map(LedgerResponse::refusal).cloned());
        let Deferred::Release {
            fence,
            pods,
            reason,
        } = write
        else {
            if !matches!(refusal, Ok(None)) {
                self.dirty = true;
            }
            return;
        };
        let wait = match refusal {
            Ok(None) => return,
            Ok(Some(Refusal::StaleEpoch { .. } | Refusal::UnknownShard { .. })) => {
                ReleaseWait::Owner
            }
            Ok(Some(r)) => ReleaseWait::Refused(format!("shard {}: {r}", fence.shard)),
            Err(e) => ReleaseWait::Ledger(e.to_string()),
        };
        for pod in pods {
            self.pod_shard.insert(pod.to_string(), fence.shard);
            self.pending_release.push(pod, reason, wait.clone());
        }
    }

    /// The writes of replica `id`, which stopped, are gone with its memory (the next owner
    /// sees the pods bound or gone, as a real one does in its watch).
    fn drop_outbox(&mut self, id: ReplicaId) {
        let writes = self.outbox.take(id);
        self.hand_back(writes);
    }

    /// Queued writes no longer the replica's to propose: marks are left to the retry of
    /// unbound commits, releases wait in the release queue for their shard's owner.
    fn hand_back(&mut self, writes: Vec<Deferred>) {
        for write in writes {
            match write {
                Deferred::MarkBound { .. } => self.dirty = true,
                Deferred::Release {
                    fence,
                    pods,
                    reason,
                } => {
                    for pod in pods {
                        self.pod_shard.insert(pod.to_string(), fence.shard);
                        self.pending_release.push(pod, reason, ReleaseWait::Owner);
                    }
                }
            }
        }
    }

    /// Proposes, alone, the queued writes of every replica that holds one made before
    /// this round (a replica that proposed nothing since), or every write with `all`.
    pub fn flush_outboxes(&mut self, ledger: &mut dyn PlacementLedger, all: bool) {
        let waiting = if all {
            self.replicas.keys().copied().collect()
        } else {
            self.outbox.waiting_since_before(self.round)
        };
        for id in waiting {
            let _ = self.propose_grouped(ledger, id, Vec::new());
        }
    }

    fn retry_releases(&mut self) {
        let pending = self.pending_release.take();
        let mut by_reason: BTreeMap<String, (ReleaseReason, Vec<ObjectKey>)> = BTreeMap::new();
        for crate::simulate::release_queue::QueuedRelease { pod, reason, .. } in pending {
            by_reason
                .entry(format!("{reason:?}"))
                .or_insert_with(|| (reason, Vec::new()))
                .1
                .push(pod);
        }
        for (_, (reason, pods)) in by_reason {
            self.release(&pods, reason);
        }
    }

    /// Commit, then bind, after a fault: every assumed placement whose gang's shard owners
    /// all run is bound now (or released if its pod is gone); gangs with an open
    /// transaction or an unbound placement are not planned again this round.
    fn retry_unbound(
        &mut self,
        sim: &mut SimCluster,
        ledger: &mut dyn PlacementLedger,
        errors: &mut Vec<String>,
    ) {
        let state = match self.report.read_ledger(ledger) {
            Ok(s) => s,
            Err(e) => {
                errors.push(format!("reading the ledger to retry unbound commits: {e}"));
                return;
            }
        };
        // Transactions the ledger decided or forgot are no longer open; an undecided one
        // that its shard's running coordinator does not hold (it gave up: Unfinished) is
        // handed back to it with Recover, which aborts it.
        self.open
            .retain(|t, _| state.txns.get(t).is_some_and(|x| x.decision.is_none()));
        let mut orphans: BTreeMap<ShardId, Vec<TxnId>> = BTreeMap::new();
        for txn in self.open.keys() {
            let Some(shard) = state.txns.get(txn).map(|t| t.coordinator) else {
                continue;
            };
            let Some((owner, _)) = self.owners.get(&shard) else {
                continue;
            };
            let held = self.replicas.get(owner).is_some_and(|r| {
                r.health == Health::Up
                    && service::lock(&r.coords)
                        .get(&shard)
                        .is_some_and(|c| c.phase(txn).is_some())
            });
            if !held {
                orphans.entry(shard).or_default().push(txn.clone());
            }
        }
        for (shard, txns) in orphans {
            let Some((owner, epoch)) = self.owners.get(&shard).copied() else {
                continue;
            };
            let recovered: Vec<_> = recovered_txns(&state, shard)
                .into_iter()
                .filter(|t| txns.contains(&t.txn))
                .collect();
            self.recovery.push_back(Work::ToCoord {
                to: owner,
                shard,
                epoch,
                event: CoordEvent::Recover {
                    txns: recovered,
                    now_ms: sim.now_ms(),
                },
            });
        }
        let mut assumed: BTreeMap<String, Vec<(ObjectKey, String, ShardId)>> = BTreeMap::new();
        let mut held: HashSet<String> = self.open.values().cloned().collect();
        // Bound, with the mark waiting in the outbox for the owner's next proposal.
        let marking = self.outbox.marking_pods();
        for (pod, p) in &state.placements {
            match p.state {
                PlacementState::Assumed if marking.contains(pod) => {}
                PlacementState::Assumed => {
                    held.insert(p.gang.clone());
                    assumed.entry(p.gang.clone()).or_default().push((
                        ObjectKey::parse(pod),
                        p.node.clone(),
                        p.shard,
                    ));
                }
                PlacementState::Reserved { .. } => {
                    held.insert(p.gang.clone());
                }
                PlacementState::Bound => {}
            }
        }
        let mut left = false;
        for (gang, pods) in assumed {
            let owners_up = pods.iter().all(|(_, _, s)| {
                self.owners.get(s).is_some_and(|(o, _)| {
                    self.replicas.get(o).is_some_and(|r| r.health == Health::Up)
                })
            });
            if !owners_up {
                left = true;
                continue;
            }
            let pods: Vec<(ObjectKey, String)> = pods.into_iter().map(|(p, n, _)| (p, n)).collect();
            self.bind_pods(sim, &ObjectKey::parse(&gang), &pods);
            held.remove(&gang);
        }
        self.held = held;
        self.dirty = left || !self.open.is_empty();
    }

    fn home(&self, sim: &SimCluster, gang: &ObjectKey) -> ShardId {
        let queue = sim
            .pod_group(gang)
            .map_or(DEFAULT_QUEUE, |g| g.queue.as_str());
        self.map.shard_of_queue(queue)
    }

    /// The snapshot's state from the kept one, checked against a built one when asked.
    fn cached_state(
        &mut self,
        snapshot: &crate::cluster::ClusterSnapshot,
        scheduler_name: &str,
    ) -> crate::framework::SessionState {
        let cache = match &mut self.state_cache {
            Some(c) if c.scheduler_name() == scheduler_name => c,
            slot => slot.insert(crate::framework::StateCache::new(scheduler_name)),
        };
        let (state, _) = cache.state(snapshot);
        if self.check_state_cache {
            self.report.checks += 1;
            let found = invariants::check_state_cache(cache, snapshot);
            self.report.checks_failed += found.len() as u64;
            self.violations.extend(found);
        }
        self.report.state_cache = cache.stats();
        state
    }

    /// Each running replica plans the shards it owns (as it last learned them) on its own
    /// OS thread, all from the same round snapshot: the plans are pure functions of
    /// (snapshot, scope), so the result does not depend on thread timing. What every
    /// replica would compute alike (the whole cluster's state, admission, per-queue usage
    /// and shares) is computed once first, into the round's shared view
    /// ([`crate::framework::view`]); its CPU is counted apart (`view_cpu_ns`). Also returns
    /// the plans merged (for the driver's statistics) and the pending reasons of every
    /// replica's own jobs.
    pub fn plan_round(
        &mut self,
        snapshot: &crate::cluster::ClusterSnapshot,
        conf: &crate::framework::SchedulerConf,
        scheduler_name: &str,
    ) -> RoundPlans {
        self.scheduler = (conf.clone(), scheduler_name.to_string());
        let scopes: Vec<(ReplicaId, crate::framework::CycleScope)> = self
            .replicas
            .iter()
            .filter(|(_, r)| r.health == Health::Up && !r.owned.is_empty())
            .map(|(id, r)| {
                (
                    *id,
                    crate::framework::CycleScope::new(
                        self.map.clone(),
                        r.owned.keys().copied().collect(),
                        self.opts.home_pool,
                    ),
                )
            })
            .collect();
        type Planned = (CyclePlan, Vec<(ObjectKey, String)>, Option<u64>);
        if scopes.is_empty() {
            return RoundPlans::default();
        }
        let before = super::thread_cpu::thread_cpu_ns();
        let state = self.cached_state(snapshot, scheduler_name);
        let view = crate::framework::RoundView::from_state(state, conf, &self.map);
        let view_cpu = before
            .zip(super::thread_cpu::thread_cpu_ns())
            .map(|(b, a)| a.saturating_sub(b));
        self.report.view_cpu_ns += view_cpu.unwrap_or(0);
        self.report.view_rounds += 1;
        fn timed(cycle: impl FnOnce() -> (CyclePlan, crate::framework::Session)) -> Planned {
            let before = super::thread_cpu::thread_cpu_ns();
            let (plan, session) = cycle();
            let pending = super::driver::pending_of(session);
            let cpu = before
                .zip(super::thread_cpu::thread_cpu_ns())
                .map(|(b, a)| a.saturating_sub(b));
            (plan, pending, cpu)
        }
        // A replica owning every shard (one replica, or one shard) plans on the view's
        // whole-cluster state itself: nothing to share, nothing to project.
        let sole_owner =
            scopes.len() == 1 && scopes[0].1.owned.len() == self.map.shard_count() as usize;
        let (mut whole, shared) = if sole_owner {
            (Some(view), None)
        } else {
            (None, Some(std::sync::Arc::new(view)))
        };
        let results: Vec<(ReplicaId, Planned)> = std::thread::scope(|s| {
            let handles: Vec<_> = scopes
                .iter()
                .map(|(id, scope)| {
                    let handle = match (whole.take(), &shared) {
                        (Some(view), _) => s.spawn(move || {
                            timed(|| crate::framework::run_cycle_owning_all(view, conf, scope))
                        }),
                        (None, Some(view)) => s.spawn(move || {
                            timed(|| crate::framework::run_cycle_in_view(view, conf, scope))
                        }),
                        (None, None) => unreachable!("the view is either whole or shared"),
                    };
                    (*id, handle)
                })
                .collect();
            handles
                .into_iter()
                .map(|(id, h)| (id, h.join().expect("a planning thread panicked")))
                .collect()
        });
        let mut out = RoundPlans::default();
        for (id, (plan, pending, cpu)) in results {
            *self.report.plan_cpu_ns.entry(id).or_default() += cpu.unwrap_or(0);
            *self.report.plan_rounds.entry(id).or_default() += 1;
            out.merged.evictions.extend(plan.evictions.iter().cloned());
            out.merged.gangs.extend(plan.gangs.iter().cloned());
            out.merged
                .status_updates
                .extend(plan.status_updates.iter().cloned());
            if let Some(t) = plan.wake_at_ms {
                out.merged.wake_at(t);
            }
            out.pending.extend(pending);
            out.per_replica.insert(id, plan);
        }
        out.pending.sort();
        out
    }

    /// The replicas in turn order: ids rotated by the seed.
    fn turn_order(&self) -> Vec<ReplicaId> {
        let ids: Vec<ReplicaId> = self.replicas.keys().copied().collect();
        let n = ids.len().max(1);
        let start = (self.opts.seed % n as u64) as usize;
        ids.iter()
            .cycle()
            .skip(start)
            .take(ids.len())
            .copied()
            .collect()
    }

    /// One round's writes: each running replica, in turn, performs its queues' evictions,
    /// then commits its home shards' gangs (`PlaceGangs` or 2PC) and binds what was
    /// accepted; statuses and events are written for the shards whose owner took its turn.
    pub fn perform(
        &mut self,
        sim: &mut SimCluster,
        ledger: &mut dyn PlacementLedger,
        plans: &BTreeMap<ReplicaId, CyclePlan>,
        cycle: u32,
        outcome: &mut RunOutcome,
    ) -> CyclePlan {
        let now = sim.now_ms();
        let empty = CyclePlan::default();
        let plan_of = |id: &ReplicaId| plans.get(id).unwrap_or(&empty);
        let mut evicted: HashSet<ObjectKey> = HashSet::new();
        let mut performed = CyclePlan::default();
        let order = self.turn_order();
        let running = |rt: &Self, id: &ReplicaId| rt.replicas[id].health == Health::Up;
        for id in &order {
            if !running(self, id) {
                continue;
            }
            let owned = self.replicas[id].owned.clone();
            for ev in &plan_of(id).evictions {
                // Replicas plan from one snapshot and may name the same victim.
                if !evicted.insert(ev.pod.clone()) {
                    continue;
                }
                if owned.contains_key(&self.home(sim, &ev.for_gang)) {
                    if let Err(e) = sim.evict(&ev.pod, &ev.reason) {
                        outcome.bind_errors.push(format!("evict {}: {e}", ev.pod));
                    }
                    performed.evictions.push(ev.clone());
                }
            }
        }
        let gone = sim.take_gone();
        if !gone.is_empty() {
            self.release(&gone, ReleaseReason::Evicted);
        }
        let mut done_shards: BTreeSet<ShardId> = BTreeSet::new();
        let mut work = VecDeque::new();
        let mut turns = Vec::new();
        for id in &order {
            if !running(self, id) {
                continue;
            }
            let owned = self.replicas[id].owned.clone();
            let mut local: BTreeMap<ShardId, Vec<GangPlacement>> = BTreeMap::new();
            let mut cross: Vec<(ShardId, GangPlacement)> = Vec::new();
            for gang in &plan_of(id).gangs {
                let h = self.home(sim, &gang.gang);
                if !owned.contains_key(&h) || self.held.contains(&gang.gang.to_string()) {
                    continue;
                }
                let all_home = gang
                    .placements
                    .iter()
                    .all(|p| self.node_shard.get(&p.node) == Some(&h));
                if all_home {
                    local.entry(h).or_default().push(gang.clone());
                } else {
                    cross.push((h, gang.clone()));
                }
            }
            let mut starts = Vec::new();
            for (h, gang) in cross {
                let Some(epoch) = owned.get(&h).copied() else {
                    continue;
                };
                self.seq += 1;
                let routes = RoutesBy(
                    |n: &str| Some(self.node_shard.get(n).copied().unwrap_or(h)),
                    |s| self.owners.get(&s).map(|(owner, _)| *owner),
                );
                let timeout = self.opts.txn_timeout_ms;
                let Ok(start) = start_txn((h, epoch), self.seq, &gang, &routes, now, timeout)
                else {
                    continue; // every node has a pool here
                };
                let txn = start.txn.clone();
                self.report.txns_started += 1;
                self.txn_started_at
                    .insert(txn.clone(), std::time::Instant::now());
                self.open.insert(txn.clone(), start.gang.clone());
                self.deadlines.insert(txn.clone(), start.deadline_ms);
                self.started.insert(txn, gang.clone());
                starts.push(Work::ToCoord {
                    to: *id,
                    shard: h,
                    epoch,
                    event: CoordEvent::Start(start),
                });
            }
            // The begins of the new transactions ride in the proposal of the local gangs.
            let mut own_work = VecDeque::new();
            let mut begins = self.take_begins(sim, ledger, *id, starts, &mut own_work);
            let commit = LocalCommit::new(&owned, local, begins.commands());
            turns.push((*id, commit, begins, own_work));
        }
        // The replicas' proposals go together, as from processes of their own; what they
        // lead to is queued replica by replica, in turn order.
        let lists = turns
            .iter_mut()
            .map(|(id, commit, _, _)| (*id, std::mem::take(&mut commit.cmds)))
            .collect();
        let answers = self.propose_local_each(ledger, lists);
        for ((id, commit, begins, mut own_work), answer) in turns.into_iter().zip(answers) {
            let begun = self.after_local(sim, id, commit, answer, (cycle, outcome));
            begins.answered(begun.as_deref(), &mut own_work);
            work.append(&mut own_work);
        }
        // The replicas' cross-shard transactions run at the same time: their messages are
        // interleaved in one pump, first come first served.
        self.pump(sim, ledger, work, &mut outcome.ledger_errors);
        // A replica that proposed nothing since its writes of the last round sends them now.
        self.flush_outboxes(ledger, false);
        // Every gang bound since the last round's turns: this round's turns and what the
        // start of the round bound (recovered commits, the retry of unbound commits).
        performed.gangs.extend(std::mem::take(&mut self.bound));
        for id in &order {
            if self.replicas[id].health == Health::Up {
                // After its writes, a replica that acted on a stale view has caught up.
                self.learn(*id, None, now);
                done_shards.extend(
                    self.owners
                        .iter()
                        .filter(|(_, (o, _))| o == id)
                        .map(|(s, _)| *s),
                );
            }
        }
        // Statuses and events: each replica writes those of its own plan, for the shards it
        // owns after its turn.
        for id in &order {
            let plan = plan_of(id);
            let mine: BTreeSet<ShardId> = self
                .owners
                .iter()
                .filter(|(s, (o, _))| o == id && done_shards.contains(s))
                .map(|(s, _)| *s)
                .collect();
            let bound: HashSet<&ObjectKey> = performed.gangs.iter().map(|p| &p.gang).collect();
            let not_bound: HashSet<&ObjectKey> = plan
                .gangs
                .iter()
                .map(|g| &g.gang)
                .filter(|k| !bound.contains(k))
                .collect();
            for (key, status) in &plan.status_updates {
                if not_bound.contains(key) || !mine.contains(&self.home(sim, key)) {
                    continue;
                }
                if let Err(e) = sim.update_pod_group_status(key, status) {
                    outcome.bind_errors.push(format!("status of {key}: {e}"));
                }
                self.report.statuses_written += 1;
                performed.status_updates.push((key.clone(), status.clone()));
            }
            for event in &plan.events {
                if not_bound.contains(&event.object)
                    || !mine.contains(&self.home(sim, &event.object))
                {
                    continue;
                }
                let _ = sim.record_event(event);
                self.report.events_recorded += 1;
            }
        }
        performed
    }

    /// The replicas' round proposals ([`LocalCommit`]) together: those with nothing to
    /// write propose nothing (their queued marks and releases wait for their next
    /// proposal) and are answered with no answers.
    fn propose_local_each(
        &mut self,
        ledger: &mut dyn PlacementLedger,
        lists: Vec<(ReplicaId, Vec<LedgerCommand>)>,
    ) -> Vec<Answer> {
        let decided = lists
            .iter()
            .map(|(_, cmds)| cmds.is_empty().then(|| Ok(Vec::new())))
            .collect();
        let going = lists
            .into_iter()
            .filter(|(_, cmds)| !cmds.is_empty())
            .collect();
        let answers = self.propose_grouped_each(ledger, going);
        in_list_order(decided, answers)
    }

    /// Replica `id`'s round proposal answered: binds the gangs the ledger accepted, records
    /// the refusals, and returns the answers to the begins that rode behind them (`None`:
    /// unknown, and the coordinators propose them again on a tick).
    fn after_local(
        &mut self,
        sim: &mut SimCluster,
        id: ReplicaId,
        commit: LocalCommit,
        answer: Answer,
        (cycle, outcome): (u32, &mut RunOutcome),
    ) -> Option<Vec<LedgerResponse>> {
        let LocalCommit {
            gangs,
            sizes,
            placed,
            ..
        } = commit;
        let mut responses = match answer {
            Ok(responses) if responses.len() >= placed => responses,
            Ok(_) => {
                let e = format!("cycle {cycle}: replica {id}: fewer answers than commands");
                outcome.ledger_errors.push(e);
                return None;
            }
            Err(LedgerError::Ambiguous(why)) => {
                // If it landed, the retry of assumed placements binds it.
                self.dirty = true;
                outcome.ledger_refusals.extend(gangs.iter().map(|g| {
                    (
                        cycle,
                        g.gang.to_string(),
                        format!("outcome unknown ({why})"),
                    )
                }));
                return None;
            }
            Err(e) => {
                let e = format!("cycle {cycle}: replica {id} committing its shards' gangs: {e}");
                outcome.ledger_errors.push(e);
                return None;
            }
        };
        let begun = responses.split_off(placed);
        for (gang, v) in gangs.iter().zip(gang_verdicts(&responses, &sizes)) {
            match v {
                Verdict::Accepted => {
                    self.report.local_gangs += 1;
                    let pods: Vec<(ObjectKey, String)> = gang
                        .placements
                        .iter()
                        .map(|p| (p.pod.clone(), p.node.clone()))
                        .collect();
                    self.bind_pods(sim, &gang.gang, &pods);
                }
                Verdict::Refused(why) | Verdict::InDoubt(why) => {
                    outcome
                        .ledger_refusals
                        .push((cycle, gang.gang.to_string(), why))
                }
            }
        }
        Some(begun)
    }

    /// Pods the ledger may hold without the cluster running them on that node, for now:
    /// reservations of open transactions, commits not yet bound (their owner is down, or
    /// they are bound in the next round's retry), and pods gone from the cluster whose
    /// release waits for their shard's owner or for the ledger's answer (see
    /// [`crate::simulate::release_queue`]). A release the ledger refused is not among them.
    pub fn unsettled_pods(&self, state: &LedgerState) -> HashSet<String> {
        let mut pods: HashSet<String> = state
            .placements
            .iter()
            .filter(|(_, p)| p.state != PlacementState::Bound)
            .map(|(k, _)| k.clone())
            .collect();
        pods.extend(self.pending_release.waiting_pods());
        pods.extend(self.outbox.releasing_pods());
        pods
    }

    /// The ledger's own checks and "no leaked reservation", counted in the report.
    pub fn check_state(&mut self, state: &LedgerState) -> Vec<Violation> {
        let mut found: Vec<Violation> = check_all(state)
            .into_iter()
            .map(|v| Violation {
                invariant: "ledger",
                detail: v.to_string(),
            })
            .collect();
        found.extend(invariants::check_no_leaked_reservation(state));
        self.report.checks += 2;
        self.report.checks_failed += found.len() as u64;
        found
    }
}

/// A replica's round proposal: its home shards' gangs that lie in one pool, every shard's
/// `PlaceGangs` in one proposal (behind its queued marks and releases: group commit, the
/// ledger judging each gang alone), with the begins of its new transactions behind them.
struct LocalCommit {
    /// Taken when proposed.
    cmds: Vec<LedgerCommand>,
    gangs: Vec<GangPlacement>,
    /// Gangs per `PlaceGangs` command, and how many commands are `PlaceGangs`.
    sizes: Vec<usize>,
    placed: usize,
}

impl LocalCommit {
    fn new(
        owned: &BTreeMap<ShardId, Epoch>,
        local: BTreeMap<ShardId, Vec<GangPlacement>>,
        begins: Vec<LedgerCommand>,
    ) -> Self {
        let (mut cmds, mut gangs) = (Vec::new(), Vec::new());
        for (shard, g) in local {
            cmds.extend(place_at(
                Fence {
                    shard,
                    epoch: owned[&shard],
                },
                &g,
            ));
            gangs.extend(g);
        }
        let sizes = command_sizes(&cmds);
        let placed = cmds.len();
        cmds.extend(begins);
        Self {
            cmds,
            gangs,
            sizes,
            placed,
        }
    }
}

fn command_name(cmd: &LedgerCommand) -> String {
    match cmd {
        LedgerCommand::PlaceGangs {
            shard,
            epoch,
            gangs,
        } => {
            format!(
                "PlaceGangs of {} gang(s) for shard {shard} at epoch {epoch}",
                gangs.len()
            )
        }
        LedgerCommand::MarkBound { shard, epoch, .. } => {
            format!("MarkBound for shard {shard} at epoch {epoch}")
        }
        LedgerCommand::Release { shard, epoch, .. } => {
            format!("Release for shard {shard} at epoch {epoch}")
        }
        LedgerCommand::TxnBegin {
            txn, shard, epoch, ..
        } => {
            format!("TxnBegin {txn} for shard {shard} at epoch {epoch}")
        }
        LedgerCommand::TxnReserve {
            txn, shard, epoch, ..
        } => {
            format!("TxnReserve {txn} for shard {shard} at epoch {epoch}")
        }
        LedgerCommand::TxnDecide {
            txn, shard, epoch, ..
        } => {
            format!("TxnDecide {txn} for shard {shard} at epoch {epoch}")
        }
        other => format!("{other:?}"),
    }
}

/// The sharded runtime's options for a run, or `None` for the unsharded path (one shard
/// and no fault that needs scheduler replicas): the outputs of such runs stay as they were.
pub fn sharding_for(
    shards: u32,
    by_label: Option<String>,
    replicas: u64,
    faults: &[crate::ledger::ScheduledFault],
    seed: u64,
) -> Option<ShardOptions> {
    let needs_replicas = faults.iter().any(|f| f.fault.is_scheduler_only());
    (shards > 1 || by_label.is_some() || needs_replicas).then(|| ShardOptions {
        seed,
        ..ShardOptions::new(
            ShardingConfig {
                shards,
                by_label,
                ..ShardingConfig::default()
            },
            replicas,
        )
    })
}
