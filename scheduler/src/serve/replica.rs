//! `ShardedReplica`: what one `phalanx serve` replica does each period.
//!
//! ```text
//!  (its Lease is renewed apart, by `lease::LeaseKeeper`, while this loop shows progress)
//!  binds that ended since last period (the bind pool) → MarkBound / Release, one write
//!  Raft leader? ── yes ─▶ leader duties: Leases → live replicas;
//!        │                                   ledger nodes/owners → UpsertNode/RemoveNode,
//!        │                                   assign_shards → AssignShard{…, proposer: term}
//!        ▼
//!  read the owners from the ledger → the shards it owns (shard → epoch)
//!  none ─▶ stand by
//!  else ─▶ reconcile its shards (pods with a bind in flight left alone) → plan its shards
//!          (scoped cycle; pods with a bind in flight shown bound) → evict
//!          → route each gang: one owned pool → PlaceGangs at (shard, epoch); else kept back
//!          → queue the accepted gangs' binds on the pool (not waited for) → statuses +
//!          Events queued for the background writer
//! ```
//!
//! Owners are read from the ledger every period and never remembered across periods: a
//! replica that lost a shard (the ledger names another owner, or refuses a write as
//! fenced) binds nothing more for it from that moment on: the bind pool sends a request
//! only while the shard is owned at the epoch its placement was committed at
//! (`binds.rs`).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Instant;

use metrics::{counter, gauge, histogram};
use phalanx_statestore::LedgerState;
use phalanx_statestore::ledger::{Epoch, LeaderTerm, ReplicaId, ShardId};

use super::admin::AdminShared;
use super::binds::{BindOutcome, BindPool, BindRequest, Collected};
use super::http::Health;
use super::leader::{node_commands, owners, shard_moves};
use super::lease::ReplicaLeases;
use super::ledger::{Committed, ServeLedger, commit_fenced, next_epoch, reconcile, record_binds};
use super::liveness::LeaseWatch;
use super::route::{NotLocal, kept_back_status, route};
use super::twophase::{PumpInput, TwoPhase};
use super::{ServeOptions, metric};
use crate::cluster::kube::KubeCluster;
use crate::cluster::{Cluster, ClusterSnapshot};
use crate::framework::{
    CycleScope, GangPlacement, HomePool, StateCache, run_cycle_on_state, run_cycle_scoped_on_state,
};
use crate::ledger::sharded::Fence;
use crate::ledger::{LedgerBackend, LedgerError, Verdict};
use crate::model::ObjectKey;
use crate::observe::progress::LoopProgress;
use crate::replica::pump::HeldBegins;
use crate::replica::routing::cycle_slice;
use crate::shard::ShardMap;

/// A gang the ledger accepted, with the fence it was committed at.
type Accepted<'a> = (Fence, &'a GangPlacement);

/// Counts the ledger's verdict on one gang; the gang with its fence when accepted.
fn judged(fence: Fence, gang: &GangPlacement, verdict: Verdict) -> Option<Accepted<'_>> {
    let result = match &verdict {
        Verdict::Accepted => "accepted",
        Verdict::Refused(_) => "refused",
        Verdict::InDoubt(_) => "in_doubt",
    };
    counter!(metric::LEDGER_PROPOSALS, "result" => result).increment(1);
    match verdict {
        Verdict::Accepted => Some((fence, gang)),
        Verdict::Refused(why) | Verdict::InDoubt(why) => {
            counter!(metric::LEDGER_REFUSALS, "reason" => result).increment(1);
            tracing::info!(gang = %gang.gang, reason = %why, "the ledger did not accept the gang");
            None
        }
    }
}

/// The gangs one cycle commits under `--max-pods-per-cycle N` (0: all): whole gangs in plan
/// order while the pods with a bind in flight and those taken stay within N (the first
/// gang taken however large), none while the binds in flight are N already. What is
/// committed ahead of the binds stays about N pods, so a gang planned later (a higher
/// priority, a new one) waits behind at most that many binds, not behind a whole backlog;
/// the rest are planned again next cycle.
fn ahead_of_binds(gangs: &[GangPlacement], max_pods: usize, in_flight: usize) -> &[GangPlacement] {
    if max_pods == 0 {
        return gangs;
    }
    match max_pods.saturating_sub(in_flight) {
        0 => &[],
        room => cycle_slice(gangs, room),
    }
}

/// One replica's scheduling side.
#[derive(Debug)]
pub struct ShardedReplica {
    opts: ServeOptions,
    map: ShardMap,
    /// Reads (through its mirror) and writes, re-pointed at each owned shard's fence.
    ledger: ServeLedger,
    leases: ReplicaLeases,
    health: Arc<Health>,
    /// Raft voters, as the ledger replica's metrics said this period: the only replicas
    /// that may own a shard (a learner being added does not).
    members: BTreeSet<ReplicaId>,
    /// The peers whose Raft listener refused this replica's last connection.
    refusing: BTreeSet<ReplicaId>,
    /// Shard -> epoch owned this period, as the ledger said.
    owned: BTreeMap<ShardId, Epoch>,
    /// The liveness table, while this replica leads Raft (a new one each leadership).
    watch: Option<LeaseWatch>,
    /// The replicas the liveness table counted as running when this leader last listed
    /// the Leases (`lead`); `None` when it does not lead.
    running: Option<BTreeSet<ReplicaId>>,
    /// Origin of this replica's monotonic milliseconds.
    started: Instant,
    /// The 2PC between replicas, when `--coord-listen` is given.
    twophase: Option<TwoPhase>,
    /// Marked at each step of a period: while it is, the Lease keeper renews the Lease.
    progress: Arc<LoopProgress>,
    /// Where each period's view goes for the admin service (`--admin-listen`).
    admin: Option<Arc<AdminShared>>,
    /// The binds of committed placements, running off the cycle.
    binds: BindPool,
    /// The cluster's state kept from cycle to cycle, patched with what the watch caches
    /// changed ([`crate::framework::state_cache`]).
    state_cache: StateCache,
}

/// Every this many patched cycles, serve builds the state whole as well and compares.
const STATE_CACHE_VERIFY_EVERY: u64 = 100;

impl ShardedReplica {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        opts: ServeOptions,
        map: ShardMap,
        ledger: ServeLedger,
        leases: ReplicaLeases,
        health: Arc<Health>,
        twophase: Option<TwoPhase>,
        progress: Arc<LoopProgress>,
        binds: BindPool,
    ) -> Self {
        let members = opts.peers.keys().copied().chain([opts.id]).collect();
        let state_cache =
            StateCache::new(&opts.scheduler_name).verify_every(STATE_CACHE_VERIFY_EVERY);
        Self {
            state_cache,
            opts,
            map,
            ledger,
            leases,
            health,
            members,
            refusing: BTreeSet::new(),
            owned: BTreeMap::new(),
            watch: None,
            running: None,
            started: Instant::now(),
            twophase,
            progress,
            admin: None,
            binds,
        }
    }

    /// Publish each period's snapshot, ledger state, decisions and 2PC ends to `admin`.
    pub fn set_admin(&mut self, admin: Option<Arc<AdminShared>>) {
        self.admin = admin;
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The voters of the Raft group this period: the only replicas that may own a shard.
    pub fn set_members(&mut self, voters: BTreeSet<ReplicaId>) {
        self.members = voters;
    }

    /// The peers whose Raft listener refused this replica's last connection: dead at
    /// once for the leader's duties (`liveness.rs`).
    pub fn set_refusing(&mut self, refusing: BTreeSet<ReplicaId>) {
        self.refusing = refusing;
    }

    /// The replicas whose Lease this leader heard within one lease of its last listing of
    /// the Leases; `None` when it does not lead. Judged at the listing, not now: the
    /// membership step runs after the period's cycle, and a cycle longer than the lease
    /// (5 s cycles against a 1 s lease in a loaded chaos run, 2026-12-02) made every
    /// replica look stopped then, so a replica added to `--peers` was never added.
    pub fn running(&self) -> Option<BTreeSet<ReplicaId>> {
        self.running.clone()
    }

    /// The shards owned now (shard -> epoch).
    pub fn owned(&self) -> &BTreeMap<ShardId, Epoch> {
        &self.owned
    }

    /// One period: lead if `leading` (the Raft term this replica leads in), then schedule
    /// the shards the ledger says this replica owns.
    pub fn period(&mut self, cluster: &mut KubeCluster, leading: Option<u64>) {
        self.progress.mark();
        // Before the snapshot: a pod whose bind failed shows pending in it only once its
        // placement is released.
        let ended = self.binds.collect();
        self.record_ended(ended);
        let snapshot = self.snapshot(cluster);
        match leading {
            Some(term) => {
                if self.watch.is_none() {
                    tracing::info!(
                        id = self.opts.id,
                        term,
                        "leading: waiting one lease before declaring any replica dead"
                    );
                }
                if let Err(e) = self.lead(&snapshot, term) {
                    counter!(metric::LEDGER_ERRORS).increment(1);
                    self.health.take_failed(&e);
                    tracing::warn!(error = %e, "leader duties failed; retrying next period");
                }
            }
            None => {
                self.watch = None;
                self.running = None;
                self.health.shard_taken();
            }
        }
        if let Err(e) = self.schedule(cluster, snapshot) {
            counter!(metric::LEDGER_ERRORS).increment(1);
            tracing::warn!(error = %e, "cycle failed");
        }
    }

    /// The cluster as the cycle plans on it: the watch caches, pods with a bind in flight
    /// shown bound to their nodes.
    fn snapshot(&self, cluster: &KubeCluster) -> ClusterSnapshot {
        let mut snapshot = cluster.snapshot();
        self.binds.assume(&mut snapshot);
        snapshot
    }

    /// The snapshot's state, patched from the last cycle's; counted by how it was made.
    fn cached_state(&mut self, snapshot: &ClusterSnapshot) -> crate::framework::SessionState {
        let before = self.state_cache.stats();
        let (state, _) = self.state_cache.state(snapshot);
        let after = self.state_cache.stats();
        let how = if after.mismatches > before.mismatches {
            "mismatch"
        } else if after.builds > before.builds {
            "built"
        } else {
            "patched"
        };
        counter!(metric::STATE_CACHE_CYCLES, "how" => how).increment(1);
        state
    }

    /// Stopping (SIGTERM): starts no bind more, waits up to `grace` for the binds already
    /// sent, and records what ended. What is left (queued, or still running) stays
    /// committed in the ledger: the next owner of its shard binds it (reconcile).
    pub fn stop_binds(&mut self, grace: std::time::Duration) {
        let left = self.binds.in_flight().len();
        let ended = self.binds.drain(grace);
        let unfinished = left.saturating_sub(ended.finished.len());
        let not_started = ended
            .finished
            .iter()
            .filter(|f| f.outcome == BindOutcome::NotStarted)
            .count();
        if left > 0 {
            tracing::info!(
                in_flight = left,
                not_started,
                unfinished,
                "stopping: binds not sent or not answered are left to the shards' next owners"
            );
        }
        self.record_ended(ended);
    }

    /// Records the binds that ended in one ledger write, each at its fence: the bound
    /// marked, the failed released; those not started are left to the shard's owner.
    fn record_ended(&mut self, ended: Collected) {
        if ended.finished.is_empty() {
            return;
        }
        let mut bound: BTreeMap<Fence, Vec<ObjectKey>> = BTreeMap::new();
        let mut failed: BTreeMap<Fence, Vec<ObjectKey>> = BTreeMap::new();
        let mut not_started = 0;
        for f in ended.finished {
            let BindRequest {
                fence, pod, node, ..
            } = f.request;
            match f.outcome {
                BindOutcome::Bound => bound.entry(fence).or_default().push(pod),
                BindOutcome::Failed(e) => {
                    counter!(metric::BIND_FAILURES).increment(1);
                    crate::observe::cycle::record_errors(1);
                    tracing::warn!(pod = %pod, node = %node, error = %e, "bind failed; releasing its placement");
                    failed.entry(fence).or_default().push(pod);
                }
                BindOutcome::NotStarted => not_started += 1,
            }
        }
        for (_, took) in &ended.gangs_done {
            histogram!(metric::BIND_LATENCY).record(took.as_secs_f64() * 1000.0);
        }
        let count: usize = bound.values().map(Vec::len).sum();
        counter!(metric::PODS_BOUND).increment(count as u64);
        gauge!(metric::BINDS_IN_FLIGHT).set(self.binds.in_flight().len() as f64);
        if not_started > 0 {
            tracing::info!(
                pods = not_started,
                "binds not started: the shard was lost or the replica is stopping; its owner binds them"
            );
        }
        match record_binds(&mut self.ledger, &bound, &failed) {
            Ok(refused) => {
                for (shard, r) in refused {
                    tracing::warn!(shard, refusal = %r, "recording binds was refused; the next reconcile marks or releases them");
                    self.drop_if_fenced(&LedgerError::Refused(r));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "recording binds failed; the next reconcile marks or releases them");
                self.drop_if_fenced(&e);
            }
        }
        if count > 0 {
            tracing::info!(
                pods = count,
                gangs = ended.gangs_done.len(),
                in_flight = self.binds.in_flight().len(),
                "bound"
            );
        }
    }

    /// Leader duties: liveness from the Leases, nodes into their shards, shard moves.
    fn lead(&mut self, snapshot: &ClusterSnapshot, term: u64) -> Result<(), LedgerError> {
        let now = self.now_ms();
        let lease_ms = self.opts.shard_lease_ms;
        let watch = self
            .watch
            .get_or_insert_with(|| LeaseWatch::new(lease_ms, now));
        match self.leases.list() {
            Ok(listed) => watch.observe(&listed, now),
            Err(e) => tracing::warn!(error = %e, "listing the replica leases failed"),
        }
        watch.observe_refusing(self.refusing.clone());
        self.running = Some(watch.running(now));
        let state = self.ledger.read_state()?;
        for cmd in node_commands(&state, &snapshot.nodes, &self.map) {
            // One at a time: a node whose new allocatable is below its usage is refused alone.
            if let Err(e) = self.ledger.propose_all(vec![cmd]) {
                tracing::warn!(error = %e, "registering or removing a node");
            }
        }
        let current = owners(&state, self.opts.shards);
        for shard in 0..self.opts.shards {
            let owner = current.get(&shard).map_or(0, |(o, _)| *o);
            gauge!(metric::SHARD_OWNER, "shard" => shard.to_string()).set(owner as f64);
        }
        let holders: BTreeSet<ReplicaId> = current.values().map(|(o, _)| *o).collect();
        let live = watch.live(now, &holders, &self.members);
        let proposer = LeaderTerm {
            replica: self.opts.id,
            term,
        };
        for (m, cmd) in shard_moves(&state, self.opts.shards, &live, proposer) {
            next_epoch(m.shard, m.new_epoch.saturating_sub(1))?;
            self.ledger.propose_all(vec![cmd])?;
            counter!(metric::SHARD_MOVES).increment(1);
            let refusing = watch.refusing();
            tracing::info!(shard = m.shard, from = ?m.from, to = m.to, epoch = m.new_epoch, ?live, ?refusing, "shard assigned");
        }
        self.health.shard_taken();
        Ok(())
    }

    /// The shards `state` says this replica owns; notes what changed since last period.
    fn refresh_owned(&mut self, state: &LedgerState) {
        let now: BTreeMap<ShardId, Epoch> = owners(state, self.opts.shards)
            .into_iter()
            .filter(|(_, (o, _))| *o == self.opts.id)
            .map(|(s, (_, e))| (s, e))
            .collect();
        for (shard, epoch) in &self.owned {
            if now.get(shard) != Some(epoch) {
                tracing::warn!(shard, epoch, "lost the shard: binding nothing more for it");
                gauge!(metric::OWNED_EPOCH, "shard" => shard.to_string()).set(0.0);
            }
        }
        for (shard, epoch) in &now {
            if self.owned.get(shard) != Some(epoch) {
                tracing::info!(id = self.opts.id, shard, epoch, "took shard");
            }
            gauge!(metric::OWNED_EPOCH, "shard" => shard.to_string()).set(*epoch as f64);
        }
        gauge!(metric::OWNED_SHARDS).set(now.len() as f64);
        self.owned = now;
        self.binds.set_owned(&self.owned);
    }

    /// snapshot → reconcile → cycle → evict → commit per shard → queue the binds →
    /// status/events, for the shards owned now. Returns without waiting for the binds: the
    /// next period records them.
    fn schedule(
        &mut self,
        cluster: &mut KubeCluster,
        snapshot: ClusterSnapshot,
    ) -> Result<(), LedgerError> {
        let started = Instant::now();
        let state = self.ledger.read_state()?;
        self.refresh_owned(&state);
        if let Some(tp) = self.twophase.as_mut() {
            tp.follow(&self.owned, &state);
        }
        if let Some(admin) = &self.admin {
            admin.publish_view(&snapshot, &state, &self.owned);
        }
        if self.owned.is_empty() {
            // Another replica reports these gangs now; stale series would say otherwise.
            self.set_cycle_gauges(String::new());
            return Ok(());
        }
        let owned = self.owned.clone();
        self.pump_2pc(cluster, &snapshot, &state, false);
        let reconciled = reconcile(
            &mut self.ledger,
            &|pod| cluster.pod_is_gone(pod),
            &snapshot,
            &self.opts.scheduler_name,
            &owned,
            self.binds.in_flight(),
        )
        .inspect_err(|e| self.drop_if_fenced(e))?;
        self.progress.mark();
        for w in &reconciled.warnings {
            tracing::warn!("{w}");
        }
        let requeued = self.binds.submit(reconciled.to_bind);
        if requeued > 0 {
            tracing::info!(pods = requeued, "binding placements committed earlier");
        }
        let snapshot = if requeued == 0 {
            snapshot
        } else {
            self.snapshot(cluster)
        };
        let state = self.cached_state(&snapshot);
        let (plan, session) = if self.opts.shards == 1 {
            run_cycle_on_state(state, &self.opts.conf)
        } else {
            let scope = CycleScope::new(
                self.map.clone(),
                owned.keys().copied().collect(),
                HomePool::Strict,
            );
            run_cycle_scoped_on_state(state, &self.opts.conf, Some(&scope))
        };
        self.progress.mark();
        let pending = (0..session.state.jobs.len())
            .filter(|j| session.in_scope(*j) && session.state.pending_tasks(*j).count() > 0)
            .count();
        gauge!(metric::PENDING_JOBS).set(pending as f64);
        crate::observe::record_cycle(&session, &plan);
        self.set_cycle_gauges(crate::observe::state_series(&session, &plan).render());
        for eviction in &plan.evictions {
            if let Err(e) = cluster.evict(&eviction.pod, &eviction.reason) {
                tracing::warn!(pod = %eviction.pod, error = %e, "eviction failed");
            }
        }
        let state = self.ledger.read_state()?;
        let slice = ahead_of_binds(
            &plan.gangs,
            self.opts.max_pods_per_cycle,
            self.binds.in_flight().len(),
        );
        if slice.len() < plan.gangs.len() {
            let deferred = plan.gangs.len() - slice.len();
            counter!(metric::GANGS_DEFERRED).increment(deferred as u64);
            tracing::debug!(
                deferred,
                taken = slice.len(),
                in_flight = self.binds.in_flight().len(),
                "gangs left for the next cycle (--max-pods-per-cycle)"
            );
        }
        let (accepted, kept_back) = self.commit(slice, &state, &snapshot, cluster);
        self.progress.mark();
        let queued = self.binds.submit(accepted.iter().flat_map(|(fence, g)| {
            g.placements.iter().map(|p| BindRequest {
                fence: *fence,
                gang: g.gang.clone(),
                pod: p.pod.clone(),
                node: p.node.clone(),
            })
        }));
        crate::observe::cycle::record_gang_scheduled(
            &session,
            accepted.iter().map(|(_, g)| &g.gang),
        );
        self.pump_2pc(cluster, &snapshot, &state, true);
        self.report(cluster, &snapshot, &plan, &accepted, &kept_back);
        if let (Some(admin), Some(tp)) = (&self.admin, self.twophase.as_mut()) {
            admin.publish_txn_ends(tp.take_ended());
        }
        counter!(metric::CYCLES).increment(1);
        histogram!(metric::CYCLE_SECONDS).record(started.elapsed().as_secs_f64());
        crate::observe::cycle::record_e2e(started.elapsed());
        gauge!(metric::BINDS_IN_FLIGHT).set(self.binds.in_flight().len() as f64);
        if queued > 0 {
            tracing::info!(pods = queued, gangs = accepted.len(), shards = ?owned.keys().collect::<Vec<_>>(), cycle_ms = started.elapsed().as_millis() as u64, in_flight = self.binds.in_flight().len(), "committed; binds queued");
        }
        Ok(())
    }

    fn set_cycle_gauges(&self, text: String) {
        *self
            .health
            .cycle_gauges
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = text;
    }

    /// Runs the 2PC state machines of the owned shards (when enabled) on the messages
    /// received since the last pump. `cached`: the state cache was brought up to date
    /// with `snapshot` this period, so the pick view starts from its kept state rather
    /// than building the same state again.
    fn pump_2pc(
        &mut self,
        cluster: &mut KubeCluster,
        snapshot: &ClusterSnapshot,
        state: &LedgerState,
        cached: bool,
    ) {
        let Some(tp) = self.twophase.as_mut() else {
            return;
        };
        tp.follow(&self.owned, state);
        tp.pump(&mut PumpInput {
            ledger: &mut self.ledger,
            cluster,
            snapshot,
            state,
            conf: &self.opts.conf,
            scheduler_name: &self.opts.scheduler_name,
            kept_state: self.state_cache.kept().filter(|_| cached),
        });
    }

    /// Starts the cross-shard transaction of a gang that `route` kept back, when 2PC runs
    /// and this replica owns the gang's home shard; false if it stays kept back.
    fn start_2pc(
        &mut self,
        gang: &GangPlacement,
        snapshot: &ClusterSnapshot,
        state: &LedgerState,
    ) -> bool {
        let Some(tp) = self.twophase.as_mut() else {
            return false;
        };
        let Some(queue) = snapshot
            .pod_groups
            .iter()
            .find(|g| g.key == gang.gang)
            .map(|g| &g.queue)
        else {
            return false;
        };
        let home = self.map.shard_of_queue(queue);
        let Some(epoch) = self.owned.get(&home).copied() else {
            return false;
        };
        tp.start_gang((home, epoch), gang, state);
        true
    }

    /// A fenced refusal means the shard is someone else's now: forget it at once.
    fn drop_if_fenced(&mut self, e: &LedgerError) {
        if let Some(
            phalanx_statestore::Refusal::StaleEpoch { shard, .. }
            | phalanx_statestore::Refusal::UnknownShard { shard },
        ) = e.refusal()
            && self.owned.remove(shard).is_some()
        {
            self.binds.set_owned(&self.owned);
            tracing::warn!(shard, error = %e, "deposed: another replica owns the shard now; binding nothing for it");
            gauge!(metric::OWNED_EPOCH, "shard" => shard.to_string()).set(0.0);
        }
    }

    /// Commits each gang that lies in one owned pool at that shard's epoch. Returns the
    /// accepted gangs with their fence, and the gangs kept back with why.
    fn commit<'a>(
        &mut self,
        gangs: &'a [GangPlacement],
        state: &LedgerState,
        snapshot: &ClusterSnapshot,
        cluster: &mut KubeCluster,
    ) -> (Vec<Accepted<'a>>, Vec<(ObjectKey, NotLocal)>) {
        let mut by_fence: BTreeMap<Fence, Vec<&GangPlacement>> = BTreeMap::new();
        let mut kept_back = Vec::new();
        for gang in gangs {
            match route(gang, state, &self.owned) {
                Ok(fence) => by_fence.entry(fence).or_default().push(gang),
                Err(NotLocal::SpansShards(_) | NotLocal::OtherOwner(_))
                    if self.start_2pc(gang, snapshot, state) => {}
                Err(why) => {
                    counter!(metric::GANGS_KEPT_BACK).increment(1);
                    tracing::info!(gang = %gang.gang, reason = %why, "gang kept back");
                    kept_back.push((gang.gang.clone(), why));
                }
            }
        }
        let batches: Vec<(Fence, Vec<GangPlacement>)> = by_fence
            .iter()
            .map(|(f, gangs)| (*f, gangs.iter().map(|g| (*g).clone()).collect()))
            .collect();
        let gangs: Vec<(Fence, &'a GangPlacement)> = by_fence
            .into_iter()
            .flat_map(|(f, gangs)| gangs.into_iter().map(move |g| (f, g)))
            .collect();
        let mut accepted = Vec::new();
        if gangs.is_empty() {
            return (accepted, kept_back);
        }
        match self.commit_with_begins(&batches, state, snapshot, cluster) {
            Ok(Committed {
                verdicts, fenced, ..
            }) => {
                for r in fenced {
                    self.drop_if_fenced(&LedgerError::Refused(r));
                }
                for ((fence, gang), verdict) in gangs.into_iter().zip(verdicts) {
                    if let Some(a) = judged(fence, gang, verdict) {
                        accepted.push(a);
                    }
                }
            }
            Err(e) => {
                counter!(metric::LEDGER_ERRORS).increment(1);
                counter!(metric::LEDGER_PROPOSALS, "result" => "error")
                    .increment(gangs.len() as u64);
                crate::observe::cycle::record_errors(
                    gangs.iter().map(|(_, g)| g.placements.len()).sum(),
                );
                tracing::warn!(error = %e, "commit failed");
                self.drop_if_fenced(&e);
            }
        }
        (accepted, kept_back)
    }

    /// [`commit_fenced`] with the begins of the transactions started this period riding
    /// behind the gangs (one proposal for both); their answers go to the next pump.
    fn commit_with_begins(
        &mut self,
        batches: &[(Fence, Vec<GangPlacement>)],
        state: &LedgerState,
        snapshot: &ClusterSnapshot,
        cluster: &mut KubeCluster,
    ) -> Result<Committed, LedgerError> {
        let mut begins = match self.twophase.as_mut() {
            Some(tp) => tp.take_begins(&mut PumpInput {
                ledger: &mut self.ledger,
                cluster,
                snapshot,
                state,
                conf: &self.opts.conf,
                scheduler_name: &self.opts.scheduler_name,
                kept_state: None,
            }),
            None => HeldBegins::default(),
        };
        let committed = commit_fenced(&mut self.ledger, batches, begins.commands());
        if let Some(tp) = self.twophase.as_mut() {
            let riders = committed.as_ref().ok().and_then(|c| c.riders.as_deref());
            tp.begins_answered(begins, riders);
        }
        committed
    }

    /// Statuses and Events of the accepted gangs and of the gangs kept back; those of gangs
    /// the ledger did not accept would claim what did not happen, so they wait for the next
    /// cycle (as in the simulator's driver). They are queued for the background writer
    /// (`cluster/kube/reporter.rs`): neither the next cycle nor any bind waits for them.
    fn report(
        &self,
        cluster: &mut KubeCluster,
        snapshot: &ClusterSnapshot,
        plan: &crate::framework::CyclePlan,
        accepted: &[(Fence, &GangPlacement)],
        kept_back: &[(ObjectKey, NotLocal)],
    ) {
        let accepted: HashSet<&ObjectKey> = accepted.iter().map(|(_, g)| &g.gang).collect();
        let planned: HashSet<&ObjectKey> = plan.gangs.iter().map(|g| &g.gang).collect();
        let held_back = |k: &ObjectKey| planned.contains(k) && !accepted.contains(k);
        let mut statuses: Vec<(ObjectKey, crate::model::PodGroupStatus)> = plan
            .status_updates
            .iter()
            .filter(|(key, _)| !held_back(key))
            .cloned()
            .collect();
        for (key, why) in kept_back {
            if let Some(pg) = snapshot.pod_groups.iter().find(|g| &g.key == key) {
                let status = kept_back_status(&pg.status, why, snapshot.now_ms);
                if status != pg.status {
                    statuses.push((key.clone(), status));
                }
            }
        }
        let events: Vec<crate::framework::Event> = plan
            .events
            .iter()
            .filter(|e| !held_back(&e.object))
            .cloned()
            .collect();
        if let Some(admin) = &self.admin {
            admin.publish_decisions(&events);
        }
        // Queued; what failed shows up a cycle later.
        for e in cluster.report_in_background(statuses, events) {
            tracing::warn!(error = %e, "status or event write failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Placement;
    use crate::model::Resources;

    fn gangs(sizes: &[usize]) -> Vec<GangPlacement> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, n)| GangPlacement {
                gang: ObjectKey::new("ns", format!("g{i}")),
                placements: (0..*n)
                    .map(|p| Placement {
                        pod: ObjectKey::new("ns", format!("g{i}-{p}")),
                        node: "n1".into(),
                        resources: Resources::default(),
                    })
                    .collect(),
            })
            .collect()
    }

    #[test]
    fn a_cycle_commits_ahead_of_the_binds_in_flight_at_most_the_slice() {
        let plan = gangs(&[10, 10, 10, 10]);
        // No bound: everything, whatever is in flight.
        assert_eq!(ahead_of_binds(&plan, 0, 5_000).len(), 4);
        // Nothing in flight: the slice as before.
        assert_eq!(ahead_of_binds(&plan, 25, 0).len(), 2);
        // 10 in flight leave room for 15: one gang of 10.
        assert_eq!(ahead_of_binds(&plan, 25, 10).len(), 1);
        // Room for 5: the first gang whole, however large.
        assert_eq!(ahead_of_binds(&plan, 25, 20).len(), 1);
        // The slice in flight already: nothing this cycle.
        assert!(ahead_of_binds(&plan, 25, 25).is_empty());
        assert!(ahead_of_binds(&plan, 25, 400).is_empty());
    }
}
