//! `phalanx serve`: one scheduler replica against a real cluster.
//!
//! ```text
//!  ┌──────────── phalanx serve --id N ─────────────────────────────────────┐
//!  │ ledger replica N (openraft, sled, gRPC on --listen) ◀──Raft──▶ peers   │
//!  │ LedgerClient (all peers)                                               │
//!  │ KubeCluster (watch caches; binds, status, events, evictions)           │
//!  │ HTTP --http: /healthz /readyz /metrics                                 │
//!  │ loop every --period-ms:                                                │
//!  │   Raft leader? ── no ──▶ stand by (caches stay warm; owns nothing)     │
//!  │       │ yes                                                           │
//!  │   own shard 0? ── no ──▶ AssignShard{0, owner N, epoch+1}; reconcile   │
//!  │       │ yes                                                           │
//!  │   snapshot → reconcile ledger with the cluster → run_cycle → evict     │
//!  │   → commit plan at (0, epoch) → bind accepted gangs → mark bound       │
//!  │   → PodGroup status + Events                                           │
//!  └───────────────────────────────────────────────────────────────────────┘
//! ```
//!
//! The Raft leader is the scheduling owner: taking shard 0 bumps its epoch, so the previous
//! owner's writes are refused from then on (fencing, I4); an owner whose commit is refused
//! for a stale epoch stops at once and binds nothing. Reconciliation on every cycle binds the
//! placements a previous owner committed but did not bind, releases those of pods that are
//! gone, and accounts pods that other schedulers bound.

pub mod http;
pub mod identity;
pub mod ledger;

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use metrics::{counter, gauge, histogram};
use phalanx_statestore::ledger::LeaderTerm;
use phalanx_statestore::{LedgerClient, LedgerCommand, ReplicaConfig, start_replica_with};
use thiserror::Error;

use crate::cluster::kube::{KubeCluster, KubeOptions, install_crds, make_client};
use crate::cluster::{Cluster, ClusterSnapshot};
use crate::framework::{SchedulerConf, run_cycle};
use crate::ledger::{LedgerError, PlacementLedger, ReleaseReason, SINGLE_SHARD, Verdict};
use crate::model::ObjectKey;
use ledger::{ServeLedger, next_epoch, reconcile};

/// Everything `phalanx serve` is told.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub kubeconfig: Option<PathBuf>,
    pub id: u64,
    /// Where this replica's ledger serves gRPC.
    pub listen: SocketAddr,
    /// Every replica (this one included) as id -> host:port.
    pub peers: BTreeMap<u64, String>,
    pub data_dir: PathBuf,
    pub http: Option<SocketAddr>,
    pub scheduler_name: String,
    pub period_ms: u64,
    pub kube_qps: f64,
    pub kube_burst: u32,
    pub conf: SchedulerConf,
    /// How long to wait for the watch caches to sync at start.
    pub sync_timeout: Duration,
    /// Create the PodGroup and Queue CRDs where absent before watching.
    pub install_crds: bool,
}

#[derive(Debug, Error)]
pub enum ServeError {
    #[error("--peers: {0}")]
    Peers(String),
    #[error("starting: {0}")]
    Start(String),
    #[error("stopping: {0}")]
    Stop(String),
    #[error(transparent)]
    Kube(#[from] crate::cluster::kube::KubeError),
}

/// Parses `1=127.0.0.1:7001,2=host:7002`.
pub fn parse_peers(text: &str) -> Result<BTreeMap<u64, String>, ServeError> {
    let mut out = BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part.split_once('=').ok_or_else(|| {
            ServeError::Peers(format!(
                "{part:?} is not id=host:port (e.g. 1=127.0.0.1:7001)"
            ))
        })?;
        let id: u64 = id.trim().parse().map_err(|_| {
            ServeError::Peers(format!(
                "{part:?}: the id {id:?} is not a positive whole number"
            ))
        })?;
        if id == 0 {
            return Err(ServeError::Peers(format!("{part:?}: ids start at 1")));
        }
        if !addr.contains(':') {
            return Err(ServeError::Peers(format!(
                "{part:?}: the address {addr:?} has no port"
            )));
        }
        if out.insert(id, addr.trim().to_string()).is_some() {
            return Err(ServeError::Peers(format!("id {id} is given twice")));
        }
    }
    Ok(out)
}

/// Metric names (Prometheus), in one place.
pub mod metric {
    pub const CYCLES: &str = "phalanx_cycles_total";
    pub const CYCLE_SECONDS: &str = "phalanx_cycle_duration_seconds";
    pub const PODS_BOUND: &str = "phalanx_pods_bound_total";
    pub const BIND_FAILURES: &str = "phalanx_bind_failures_total";
    pub const LEDGER_REFUSALS: &str = "phalanx_ledger_refusals_total";
    pub const LEDGER_ERRORS: &str = "phalanx_ledger_errors_total";
    pub const IS_LEADER: &str = "phalanx_is_leader";
    pub const OWNED_EPOCH: &str = "phalanx_shard_epoch";
    pub const PENDING_JOBS: &str = "phalanx_pending_jobs";
}

/// Runs one replica until SIGTERM or SIGINT (then stops its ledger replica and returns
/// `Ok`), or fails to start.
pub fn run(opts: ServeOptions) -> Result<(), ServeError> {
    let start = |e: &dyn std::fmt::Display| ServeError::Start(e.to_string());
    let mut peers = opts.peers.clone();
    peers
        .entry(opts.id)
        .or_insert_with(|| opts.listen.to_string());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .map_err(|e| start(&e))?;
    let handle = runtime.handle().clone();
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| start(&e))?;
    let health = Arc::new(http::Health::default());
    if let Some(addr) = opts.http {
        let listener = runtime
            .block_on(http::bind(addr))
            .map_err(|e| ServeError::Start(format!("--http {addr}: {e}")))?;
        runtime.spawn(http::serve(listener, health.clone(), prometheus.clone()));
    }

    std::fs::create_dir_all(&opts.data_dir)
        .map_err(|e| ServeError::Start(format!("--data-dir {}: {e}", opts.data_dir.display())))?;
    let replica = runtime
        .block_on(start_replica_with(
            opts.id,
            &opts.data_dir,
            opts.listen,
            &ReplicaConfig::default(),
        ))
        .map_err(|e| ServeError::Start(format!("ledger replica {}: {e}", opts.id)))?;
    // The lowest id forms the group with every peer (idempotent on restart).
    if peers.keys().next() == Some(&opts.id) {
        let members = peers
            .iter()
            .map(|(id, addr)| (*id, openraft::BasicNode { addr: addr.clone() }))
            .collect();
        runtime
            .block_on(replica.initialize(members))
            .map_err(|e| ServeError::Start(format!("forming the ledger group: {e}")))?;
    }
    let client = Arc::new(LedgerClient::new(peers.clone()));
    tracing::info!(id = opts.id, listen = %opts.listen, ?peers, "ledger replica started");

    let kube_client = runtime.block_on(make_client(opts.kubeconfig.as_deref()))?;
    if opts.install_crds {
        runtime.block_on(install_crds(&kube_client, opts.sync_timeout))?;
    }
    let mut cluster = KubeCluster::connect(
        handle.clone(),
        kube_client,
        KubeOptions {
            qps: opts.kube_qps,
            burst: opts.kube_burst,
            sync_timeout: opts.sync_timeout,
            instance: format!("phalanx-{}", opts.id),
            ..KubeOptions::default()
        },
    )?;
    health.caches_synced.store(true, Ordering::Relaxed);
    tracing::info!("watch caches synced");
    println!("READY id={} ledger={}", opts.id, replica.addr());

    // SIGTERM (Kubernetes stopping the pod) or SIGINT: finish the cycle in progress, then
    // stop the ledger replica so its peers elect a successor at once rather than after
    // waiting out its silence; a cycle is never cut between commit and bind.
    let stopping = Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let stopping = stopping.clone();
        let mut term = runtime
            .block_on(async {
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            })
            .map_err(|e| start(&e))?;
        runtime.spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            stopping.store(true, Ordering::Relaxed);
        });
    }

    let mut owner = Owner::new(opts.clone(), handle, client, health.clone());
    let period = Duration::from_millis(opts.period_ms.max(10));
    while !stopping.load(Ordering::Relaxed) {
        let started = Instant::now();
        let metrics = replica.metrics();
        health
            .ledger_has_leader
            .store(metrics.current_leader.is_some(), Ordering::Relaxed);
        let leader = metrics.current_leader == Some(opts.id);
        gauge!(metric::IS_LEADER).set(if leader { 1.0 } else { 0.0 });
        if leader {
            owner.step(&mut cluster, metrics.current_term);
        } else {
            if owner.ledger.is_some() {
                tracing::warn!(id = opts.id, "no longer the ledger leader; standing by");
                owner.ledger = None;
            }
            // A replica that stands by has nothing to take: its readiness is its caches
            // and the ledger's leader.
            health.shard_taken();
        }
        gauge!(metric::OWNED_EPOCH).set(owner.ledger.as_ref().map_or(0.0, |l| l.epoch as f64));
        std::thread::sleep(period.saturating_sub(started.elapsed()));
    }
    tracing::info!(id = opts.id, "stopping: shutting the ledger replica down");
    runtime
        .block_on(replica.shutdown())
        .map_err(|e| ServeError::Stop(format!("ledger replica {}: {e}", opts.id)))
}

/// The scheduling side of a replica: owns shard 0 while it is the ledger's leader.
struct Owner {
    opts: ServeOptions,
    handle: tokio::runtime::Handle,
    client: Arc<LedgerClient>,
    /// Set while this replica owns shard 0 (at the epoch inside).
    ledger: Option<ServeLedger>,
    /// What `/readyz` reports about taking the shard.
    health: Arc<http::Health>,
}

impl Owner {
    fn new(
        opts: ServeOptions,
        handle: tokio::runtime::Handle,
        client: Arc<LedgerClient>,
        health: Arc<http::Health>,
    ) -> Self {
        Self {
            opts,
            handle,
            client,
            ledger: None,
            health,
        }
    }

    /// Takes shard 0 if not owned (as the leader of Raft term `term`), then runs one
    /// cycle.
    fn step(&mut self, cluster: &mut KubeCluster, term: u64) {
        if self.ledger.is_none() {
            match self.take_shard(term) {
                Ok(l) => {
                    tracing::info!(id = self.opts.id, epoch = l.epoch, "took shard 0");
                    self.health.shard_taken();
                    self.ledger = Some(l);
                }
                Err(e) => {
                    counter!(metric::LEDGER_ERRORS).increment(1);
                    self.health.take_failed(&e);
                    tracing::warn!(error = %e, "taking shard 0 failed; retrying next period");
                    return;
                }
            }
        }
        if let Err(e) = self.cycle(cluster) {
            counter!(metric::LEDGER_ERRORS).increment(1);
            if e.is_fenced() {
                tracing::warn!(error = %e, "deposed: another replica owns shard 0 now; binding nothing");
                self.ledger = None;
            } else {
                tracing::warn!(error = %e, "cycle failed");
            }
        }
    }

    /// Proposes `AssignShard{0, self, epoch + 1}` naming this replica as the leader of
    /// `term`: the ledger refuses it unless this replica appended it in that term, so a
    /// leader deposed since it read its metrics cannot take the shard back.
    fn take_shard(&mut self, term: u64) -> Result<ServeLedger, LedgerError> {
        let mut probe = ServeLedger::new(self.handle.clone(), self.client.clone(), SINGLE_SHARD, 0);
        let state = crate::ledger::LedgerBackend::read_state(&mut probe)?;
        let current = state.shards.get(&SINGLE_SHARD).map_or(0, |a| a.epoch);
        let epoch = next_epoch(SINGLE_SHARD, current)?;
        crate::ledger::LedgerBackend::propose_all(
            &mut probe,
            vec![LedgerCommand::AssignShard {
                shard: SINGLE_SHARD,
                owner: self.opts.id,
                epoch,
                proposer: Some(LeaderTerm {
                    replica: self.opts.id,
                    term,
                }),
            }],
        )?;
        probe.epoch = epoch;
        Ok(probe)
    }

    /// snapshot → reconcile → cycle → evict → commit → bind → mark bound → status/events.
    fn cycle(&mut self, cluster: &mut KubeCluster) -> Result<(), LedgerError> {
        let Some(ledger) = self.ledger.as_mut() else {
            return Ok(());
        };
        let started = Instant::now();
        let snapshot = cluster.snapshot();
        let reconciled = reconcile(ledger, cluster, &snapshot, &self.opts.scheduler_name)?;
        let reconciled_in = started.elapsed();
        for w in &reconciled.warnings {
            tracing::warn!("{w}");
        }
        if !reconciled.bound.is_empty() {
            counter!(metric::PODS_BOUND).increment(reconciled.bound.len() as u64);
            tracing::info!(
                pods = reconciled.bound.len(),
                "bound placements committed earlier"
            );
        }
        if reconciled.nodes_removed > 0 {
            tracing::info!(
                nodes = reconciled.nodes_removed,
                "nodes deleted from the cluster dropped from the ledger"
            );
        }
        let snapshot: ClusterSnapshot = if reconciled.bound.is_empty() {
            snapshot
        } else {
            cluster.snapshot()
        };
        let plan_started = Instant::now();
        let (plan, session) = run_cycle(&snapshot, &self.opts.conf, &self.opts.scheduler_name);
        let planned = plan_started.elapsed();
        let pending = session
            .state
            .jobs
            .iter()
            .enumerate()
            .filter(|(j, _)| session.state.pending_tasks(*j).count() > 0)
            .count();
        gauge!(metric::PENDING_JOBS).set(pending as f64);

        for eviction in &plan.evictions {
            if let Err(e) = cluster.evict(&eviction.pod, &eviction.reason) {
                tracing::warn!(pod = %eviction.pod, error = %e, "eviction failed");
            }
        }
        let mut accepted = Vec::new();
        let commit_started = Instant::now();
        if !plan.gangs.is_empty() {
            let verdicts = PlacementLedger::commit(ledger, &plan.gangs)?;
            for (gang, verdict) in plan.gangs.iter().zip(verdicts) {
                match verdict {
                    Verdict::Accepted => accepted.push(gang),
                    Verdict::Refused(why) | Verdict::InDoubt(why) => {
                        counter!(metric::LEDGER_REFUSALS).increment(1);
                        tracing::info!(gang = %gang.gang, reason = %why, "the ledger did not accept the gang");
                    }
                }
            }
        }
        let committed_in = commit_started.elapsed();
        let bind_started = Instant::now();
        let binds: Vec<(ObjectKey, String)> = accepted
            .iter()
            .flat_map(|g| g.placements.iter().map(|p| (p.pod.clone(), p.node.clone())))
            .collect();
        let mut bound = Vec::new();
        let mut failed = Vec::new();
        for ((pod, node), outcome) in binds.iter().zip(cluster.bind_all(&binds)) {
            match outcome {
                Ok(()) => bound.push(pod.clone()),
                Err(e) => {
                    counter!(metric::BIND_FAILURES).increment(1);
                    tracing::warn!(pod = %pod, node = %node, error = %e, "bind failed; releasing its placement");
                    failed.push(pod.clone());
                }
            }
        }
        let bound_in = bind_started.elapsed();
        counter!(metric::PODS_BOUND).increment(bound.len() as u64);
        if !bound.is_empty() {
            PlacementLedger::mark_bound(ledger, &bound)?;
        }
        if !failed.is_empty() {
            PlacementLedger::release(ledger, &failed, ReleaseReason::BindFailed)?;
        }
        // Status and events of gangs the ledger did not accept would claim what did not
        // happen: they wait for the next cycle, as in the simulator's driver.
        let not_accepted: HashSet<&ObjectKey> = plan
            .gangs
            .iter()
            .map(|g| &g.gang)
            .filter(|k| !accepted.iter().any(|a| &a.gang == *k))
            .collect();
        let statuses: Vec<(ObjectKey, crate::model::PodGroupStatus)> = plan
            .status_updates
            .iter()
            .filter(|(key, _)| !not_accepted.contains(key))
            .cloned()
            .collect();
        let events: Vec<crate::framework::Event> = plan
            .events
            .iter()
            .filter(|e| !not_accepted.contains(&e.object))
            .cloned()
            .collect();
        for e in cluster.report_all(&statuses, &events) {
            tracing::warn!(error = %e, "status or event write failed");
        }
        counter!(metric::CYCLES).increment(1);
        histogram!(metric::CYCLE_SECONDS).record(started.elapsed().as_secs_f64());
        if !bound.is_empty() {
            tracing::info!(
                pods = bound.len(),
                gangs = accepted.len(),
                plan_ms = planned.as_millis() as u64,
                reconcile_ms = reconciled_in.as_millis() as u64,
                commit_ms = committed_in.as_millis() as u64,
                bind_ms = bound_in.as_millis() as u64,
                cycle_ms = started.elapsed().as_millis() as u64,
                "bound"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_parse_and_bad_ones_are_named() {
        let p = parse_peers("1=127.0.0.1:7001, 2=phalanx-1.phalanx:7001").expect("parses");
        assert_eq!(
            p.get(&2).map(String::as_str),
            Some("phalanx-1.phalanx:7001")
        );
        for (bad, says) in [
            ("1:127.0.0.1:7001", "is not id=host:port"),
            ("x=127.0.0.1:7001", "\"x\""),
            ("0=127.0.0.1:1", "ids start at 1"),
            ("1=host", "has no port"),
            ("1=a:1,1=b:2", "given twice"),
        ] {
            let e = parse_peers(bad).expect_err(bad).to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
