//! `phalanx serve`: one scheduler replica against a real cluster; several replicas
//! schedule at once, each the shards the ledger's leader assigns it.
//!
//! ```text
//!  ┌──────────── phalanx serve --id N --shards S ──────────────────────────┐
//!  │ ledger replica N (openraft, log + snapshot files, gRPC) ◀─Raft─▶ peers │
//!  │ LedgerClient (all peers)                                               │
//!  │ KubeCluster (watch caches; binds, status, events, evictions)           │
//!  │ HTTP --http: /healthz /readyz /metrics (+ chaos failpoints, off)       │
//!  │ loop every --period-ms (replica.rs):                                   │
//!  │   (sooner on a new leader, a refusing peer, a shard moved: wakeup.rs)  │
//!  │   renew Lease <scheduler-name>-replica-N                               │
//!  │   Raft leader? ── yes ──▶ Leases → live; nodes → UpsertNode{shard};    │
//!  │       │                   assign_shards → AssignShard{…, term}         │
//!  │   owners from the ledger → owned shards (shard → epoch); none: stand by│
//!  │   snapshot → reconcile owned shards → scoped cycle → evict             │
//!  │   → PlaceGangs at (pool's shard, epoch) → bind → mark bound            │
//!  │   → PodGroup status + Events                                           │
//!  │   leader and --job-controller: Volcano Jobs → PodGroup, pods, status   │
//!  └───────────────────────────────────────────────────────────────────────┘
//! ```
//!
//! Taking a shard bumps its epoch, so the previous owner's writes are refused from then on
//! (fencing, I4); an owner whose write is refused for a stale epoch drops the shard at once
//! and binds nothing more for it. Reconciliation every cycle binds the placements a
//! previous owner of a shard committed but did not bind, releases those of pods that are
//! gone, and accounts pods that other schedulers bound.

pub mod admin;
pub mod binds;
pub mod failpoint;
pub mod http;
pub mod identity;
pub mod jobs;
pub mod leader;
pub mod lease;
pub mod ledger;
pub mod liveness;
pub mod membership;
pub mod replica;
pub mod route;
pub mod twophase;
pub mod wakeup;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use metrics::{counter, gauge};
use phalanx_statestore::expiry::system_clock;
use phalanx_statestore::{
    LedgerClient, ReplicaConfig, TlsFiles, TlsState, Transport, start_replica_over,
};
use thiserror::Error;

use crate::cluster::kube::{KubeCluster, KubeOptions, install_crds, install_job_crd, make_client};
use crate::framework::SchedulerConf;
use crate::ledger::SINGLE_SHARD;
use crate::observe::progress::LoopProgress;
use crate::shard::{ShardMap, ShardingConfig};
use lease::{LeaseKeeper, ReplicaLeases};
use ledger::ServeLedger;
use replica::ShardedReplica;

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
    /// Bind (and status/Event) requests in flight at once ([`KubeOptions::bind_workers`]).
    pub bind_workers: usize,
    /// Pods one cycle commits and binds at most, whole gangs in plan order (0: no bound;
    /// [`crate::replica::routing::cycle_slice`]).
    pub max_pods_per_cycle: usize,
    pub conf: SchedulerConf,
    /// How long to wait for the watch caches to sync at start.
    pub sync_timeout: Duration,
    /// Create the PodGroup and Queue CRDs where absent before watching.
    pub install_crds: bool,
    /// Shards (1 = one owner schedules the whole cluster).
    pub shards: u32,
    /// Nodes go to shards by this label's value (else by name).
    pub shard_by_label: Option<String>,
    /// A replica whose Lease has not changed for this long loses its shards.
    pub shard_lease_ms: u64,
    /// Namespace of the replicas' Lease objects.
    pub lease_namespace: String,
    /// Serve the CoordinatorService here and run 2PC for gangs spanning pools (off: such
    /// gangs stay pending).
    pub coord_listen: Option<SocketAddr>,
    /// Every replica's CoordinatorService address.
    pub coord_peers: BTreeMap<u64, String>,
    /// Run the Volcano Job controller (`jobs`) while this replica is the Raft leader.
    pub job_controller: bool,
    /// `--tls-cert/--tls-key/--tls-ca`: mutual TLS on the ledger and the
    /// CoordinatorService; `None` only with `--insecure-plaintext`.
    pub tls: Option<TlsFiles>,
    /// Serve the admin service (`admin.rs`: explain, status) here.
    pub admin_listen: Option<SocketAddr>,
    /// Every replica's admin address, for forwarding to a shard's owner or the leader.
    pub admin_peers: BTreeMap<u64, String>,
    /// The ledger replica builds a snapshot (and compacts its log) after this many
    /// entries since the last one (`check_snapshot_every` bounds it).
    pub snapshot_every: u64,
    /// The ledger's Raft timers (`check_raft_timers` bounds them).
    pub raft: RaftTimers,
}

/// The ledger's Raft timers: `--raft-heartbeat-ms`, `--raft-election-min-ms` and
/// `--raft-election-max-ms`.
///
/// They set the failover of a killed Raft leader: openraft 0.9 lets a follower call an
/// election only once it has not heard the leader for `election_max` (the leader's
/// lease) plus a random `election_min..election_max`, checked every 1.5 heartbeats, and a
/// voter refuses a vote while its own lease is on. With 40 / 100-200 ms an election takes
/// 300-460 ms; with 20 / 50-100 ms, 150-230 ms. The shorter, the more a stalled leader (a
/// CPU-starved process, a GC pause of a neighbour, a slow disk) is deposed for nothing:
/// safe (the ledger fences every write by term and epoch), but each spurious election
/// costs an election's pause in proposals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaftTimers {
    pub heartbeat_ms: u64,
    pub election_min_ms: u64,
    pub election_max_ms: u64,
}

impl Default for RaftTimers {
    fn default() -> Self {
        let d = ReplicaConfig::default();
        Self {
            heartbeat_ms: d.heartbeat_ms,
            election_min_ms: d.election_timeout_min_ms,
            election_max_ms: d.election_timeout_max_ms,
        }
    }
}

/// Bounds of `--raft-heartbeat-ms`: below 5 ms the leader spends itself on heartbeats;
/// above 10 s a dead leader stalls the ledger for a minute.
pub const RAFT_HEARTBEAT_BOUNDS: std::ops::RangeInclusive<u64> = 5..=10_000;

/// The Raft timers, or why not, naming the flag and the value: the heartbeat within its
/// bounds, and heartbeat < election min < election max <= 60 s.
pub fn check_raft_timers(t: &RaftTimers) -> Result<(), String> {
    if !RAFT_HEARTBEAT_BOUNDS.contains(&t.heartbeat_ms) {
        return Err(format!(
            "--raft-heartbeat-ms {}: must be {} to {}",
            t.heartbeat_ms,
            RAFT_HEARTBEAT_BOUNDS.start(),
            RAFT_HEARTBEAT_BOUNDS.end()
        ));
    }
    if t.election_min_ms <= t.heartbeat_ms {
        return Err(format!(
            "--raft-election-min-ms {}: must be above --raft-heartbeat-ms {} (a follower would call elections between two heartbeats)",
            t.election_min_ms, t.heartbeat_ms
        ));
    }
    if t.election_max_ms <= t.election_min_ms || t.election_max_ms > 60_000 {
        return Err(format!(
            "--raft-election-max-ms {}: must be above --raft-election-min-ms {} and at most 60000",
            t.election_max_ms, t.election_min_ms
        ));
    }
    Ok(())
}

/// The ledger's default snapshot threshold, `--snapshot-every`'s default.
pub const DEFAULT_SNAPSHOT_EVERY: u64 = 1000;

/// `--snapshot-every` bounds. Below 10 a replica writes and fsyncs the whole ledger
/// state for nearly every entry; above a million the log between snapshots reaches
/// gigabytes and a restart replays all of it.
pub const SNAPSHOT_EVERY_BOUNDS: std::ops::RangeInclusive<u64> = 10..=1_000_000;

/// `--snapshot-every N` within `SNAPSHOT_EVERY_BOUNDS`, or why not, naming the flag.
pub fn check_snapshot_every(n: u64) -> Result<(), String> {
    if SNAPSHOT_EVERY_BOUNDS.contains(&n) {
        return Ok(());
    }
    Err(format!(
        "--snapshot-every {n}: must be {} to {} (ledger entries between snapshots)",
        SNAPSHOT_EVERY_BOUNDS.start(),
        SNAPSHOT_EVERY_BOUNDS.end()
    ))
}

/// What `ShardingConfig` says about `--shards` and `--shard-by-label`.
impl ServeOptions {
    pub fn sharding(&self) -> ShardingConfig {
        ShardingConfig {
            shards: self.shards,
            by_label: self.shard_by_label.clone(),
            ..ShardingConfig::default()
        }
    }
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
    #[error("--shards / --shard-by-label: {0}")]
    Sharding(#[from] crate::shard::ShardingError),
    #[error(transparent)]
    Tls(#[from] phalanx_statestore::TlsError),
}

/// How often the TLS files are re-read (a Secret update reaches a pod in about a minute).
const TLS_RELOAD_EVERY: Duration = Duration::from_secs(10);
/// How often `--insecure-plaintext` says so again.
const PLAINTEXT_WARNING_EVERY: Duration = Duration::from_secs(60);

/// The transport `opts.tls` asks for, its files loaded and checked once (an error names
/// the flag and the path); under TLS a task re-reads them, under plaintext one warns every
/// minute that nobody is authenticated.
fn transport(
    runtime: &tokio::runtime::Runtime,
    opts: &ServeOptions,
) -> Result<Transport, ServeError> {
    let Some(files) = &opts.tls else {
        let listeners = [
            ("--listen", Some(opts.listen)),
            ("--coord-listen", opts.coord_listen),
            ("--admin-listen", opts.admin_listen),
        ];
        for warning in plaintext_exposure_warnings(&listeners) {
            tracing::warn!("{warning}");
        }
        runtime.spawn(async {
            let mut tick = tokio::time::interval(PLAINTEXT_WARNING_EVERY);
            loop {
                tick.tick().await;
                tracing::warn!("--insecure-plaintext: the ledger and CoordinatorService ports accept anyone who can reach them; see docs/security.md");
            }
        });
        return Ok(Transport::Plaintext);
    };
    let state = TlsState::load(files.clone())?;
    let _guard = runtime.enter();
    state.spawn_reloader(TLS_RELOAD_EVERY);
    Ok(Transport::Tls(state))
}

/// Under `--insecure-plaintext`, one warning per gRPC listen flag bound beyond loopback
/// (`0.0.0.0`, a pod IP): there every host and pod that can route to the port can speak
/// to it unauthenticated, where a loopback bind keeps it to this host.
fn plaintext_exposure_warnings(listeners: &[(&str, Option<SocketAddr>)]) -> Vec<String> {
    listeners
        .iter()
        .filter_map(|(flag, addr)| addr.map(|a| (flag, a)))
        .filter(|(_, addr)| !addr.ip().is_loopback())
        .map(|(flag, addr)| {
            let what = match *flag {
                "--listen" => "propose ledger commands and Raft messages",
                "--coord-listen" => "prepare, commit and abort cross-shard reservations",
                _ => "read every gang's explanation and the cluster's status",
            };
            format!(
                "{flag} {addr} is not a loopback address and --insecure-plaintext is on: \
                 anyone who can reach it can {what} without a certificate; give \
                 --tls-cert/--tls-key/--tls-ca, or bind to 127.0.0.1 (docs/security.md)"
            )
        })
        .collect()
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

/// Parses `--coord-peers`: `1=10.0.0.5:7101,2=phalanx-1.phalanx-peers:7101` (addresses or
/// names, as `--peers`; a name is resolved at each connection).
pub fn parse_coord_peers(text: &str) -> Result<BTreeMap<u64, String>, ServeError> {
    parse_peers(text).map_err(|e| match e {
        ServeError::Peers(why) => ServeError::Peers(format!("--coord-peers: {why}")),
        other => other,
    })
}

/// Metric names (Prometheus), in one place: [`crate::observe::name`].
pub use crate::observe::name as metric;

/// Runs one replica until SIGTERM or SIGINT (then stops its ledger replica and returns
/// `Ok`), or fails to start.
/// The voters and learners of the ledger group as `raft` has applied them: who may send
/// this replica 2PC messages under mutual TLS (the same rule as proposing to the ledger).
fn raft_members(raft: phalanx_statestore::raft_types::Raft) -> crate::coord::service::Members {
    crate::coord::service::Members(Arc::new(move || {
        phalanx_statestore::replica::member_ids(&raft)
    }))
}

/// How long a stopping replica waits for the binds it already sent before it records them
/// and stops its ledger replica: a bind is a round trip or a few retries (under a second),
/// and Kubernetes' default grace before SIGKILL is 30 s.
const STOP_BIND_GRACE: Duration = Duration::from_secs(5);

/// Object warnings per period the leader writes as Events at most, so a flood of hostile
/// objects delays the loop by a bounded number of (rate-limited) writes.
const OBJECT_WARNINGS_PER_PERIOD: usize = 20;

/// Warning Events about the objects the snapshot skipped or read with a caveat: written by
/// the ledger leader alone, so each object version gets one Event, not one per replica.
/// The other replicas forget theirs once a leader is known (it read the same objects);
/// while none is, they keep them (bounded), so none is lost to an election.
fn tell_object_warnings(cluster: &KubeCluster, leader: Option<u64>, id: u64) {
    match leader {
        Some(l) if l == id => {
            let (tried, failed) = cluster.write_object_warnings(OBJECT_WARNINGS_PER_PERIOD);
            for e in &failed {
                tracing::warn!(error = %e, "writing an object warning Event failed");
            }
            let failed = failed.len();
            counter!(metric::OBJECT_WARNINGS, "result" => "written")
                .increment((tried - failed) as u64);
            counter!(metric::OBJECT_WARNINGS, "result" => "failed").increment(failed as u64);
        }
        Some(_) => cluster.discard_object_warnings(),
        None => {}
    }
}

pub fn run(opts: ServeOptions) -> Result<(), ServeError> {
    let start = |e: &dyn std::fmt::Display| ServeError::Start(e.to_string());
    let map = ShardMap::new(opts.sharding())?;
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
    let recorder = crate::observe::recorder().map_err(|e| start(&e))?;
    let prometheus = recorder.handle();
    metrics::set_global_recorder(recorder).map_err(|e| start(&e))?;
    crate::observe::describe();
    let transport = transport(&runtime, &opts)?;
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
        .block_on(start_replica_over(
            opts.id,
            &opts.data_dir,
            opts.listen,
            &ReplicaConfig {
                snapshot_every_entries: opts.snapshot_every,
                // A tenth of the interval stays in the log behind each snapshot (100 at
                // the default, the ledger's own default), so a follower a little behind
                // is caught up by entries and one further behind by the snapshot.
                keep_entries_after_snapshot: opts.snapshot_every / 10,
                heartbeat_ms: opts.raft.heartbeat_ms,
                election_timeout_min_ms: opts.raft.election_min_ms,
                election_timeout_max_ms: opts.raft.election_max_ms,
                ..ReplicaConfig::default()
            },
            system_clock(),
            transport.clone(),
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
    let client = Arc::new(LedgerClient::new(peers.clone()).with_transport(transport.clone()));
    tracing::info!(id = opts.id, listen = %opts.listen, ?peers, "ledger replica started");

    let kube_client = runtime.block_on(make_client(opts.kubeconfig.as_deref()))?;
    if opts.install_crds {
        runtime.block_on(install_crds(&kube_client, opts.sync_timeout))?;
        if opts.job_controller {
            runtime.block_on(install_job_crd(&kube_client, opts.sync_timeout))?;
        }
    }
    let mut job_controller = opts.job_controller.then(|| {
        jobs::JobController::start(
            handle.clone(),
            kube_client.clone(),
            &opts.scheduler_name,
            &format!("phalanx-{}", opts.id),
        )
    });
    let leases = ReplicaLeases::new(
        handle.clone(),
        kube_client.clone(),
        &opts.lease_namespace,
        &opts.scheduler_name,
        opts.shard_lease_ms,
    );
    let progress = Arc::new(LoopProgress::new());
    let mut cluster = KubeCluster::connect(
        handle.clone(),
        kube_client,
        KubeOptions {
            qps: opts.kube_qps,
            burst: opts.kube_burst,
            bind_workers: opts.bind_workers,
            sync_timeout: opts.sync_timeout,
            instance: format!("phalanx-{}", opts.id),
            bound_by: Some(opts.id.to_string()),
            scheduler_name: Some(opts.scheduler_name.clone()),
            progress: Some(progress.clone()),
            ..KubeOptions::default()
        },
    )?;
    health.caches_synced.store(true, Ordering::Relaxed);
    tracing::info!("watch caches synced");
    println!("READY id={} ledger={}", opts.id, replica.addr());

    // SIGTERM (Kubernetes stopping the pod) or SIGINT: finish the cycle in progress, start
    // no bind more, wait a bounded time for the binds already sent and record them, then
    // stop the ledger replica so its peers elect a successor at once rather than after
    // waiting out its silence. A placement committed and not bound is bound by the shard's
    // next owner.
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

    let twophase = match opts.coord_listen {
        None => None,
        Some(addr) => {
            let tp = twophase::TwoPhase::start(
                handle.clone(),
                opts.id,
                addr,
                opts.coord_peers.clone(),
                transport.clone(),
                raft_members(replica.raft().clone()),
            )
            .map_err(|e| ServeError::Start(format!("--coord-listen {addr}: {e}")))?;
            tracing::info!(addr = %tp.addr(), "serving the CoordinatorService");
            Some(tp)
        }
    };
    // The voters the leader brings the group to (`membership.rs`): --peers and this one.
    let mut desired = opts.peers.clone();
    desired
        .entry(opts.id)
        .or_insert_with(|| opts.listen.to_string());
    let admin = start_admin(&runtime, &opts, &map, &transport)?;
    let ledger = ServeLedger::new(handle, client, SINGLE_SHARD, 0);
    // Renewed from now on, on its own timer, while the loop below shows progress.
    let _keeper = LeaseKeeper::start(
        leases.clone(),
        opts.id,
        opts.shard_lease_ms,
        progress.clone(),
    );
    let binds = binds::BindPool::start(
        runtime.handle().clone(),
        cluster.binder(),
        opts.bind_workers,
    );
    let mut me = ShardedReplica::new(
        opts.clone(),
        map,
        ledger,
        leases,
        health.clone(),
        twophase,
        progress,
        binds,
    );
    me.set_admin(admin.clone());
    let period = Duration::from_millis(opts.period_ms.max(10));
    let mut last_leader = None;
    let mut wakeups = wakeup::Wakeups::new(
        opts.id,
        replica.raft().metrics(),
        replica.newly_refusing(),
        replica.shard_moves(),
    );
    while !stopping.load(Ordering::Relaxed) {
        let started = Instant::now();
        let metrics = replica.metrics();
        health
            .ledger_has_leader
            .store(metrics.current_leader.is_some(), Ordering::Relaxed);
        let leader = metrics.current_leader == Some(opts.id);
        gauge!(metric::IS_LEADER).set(if leader { 1.0 } else { 0.0 });
        record_raft(&metrics, &mut last_leader);
        let membership = metrics.membership_config.membership();
        let voters: BTreeSet<u64> = membership.voter_ids().collect();
        gauge!(metric::RAFT_VOTERS).set(voters.len() as f64);
        gauge!(metric::RAFT_LEARNERS).set(membership.learner_ids().count() as f64);
        // A removed replica's last refusal stays in the table; only members count.
        let mut refusing = replica.peers_refusing();
        refusing.retain(|r| voters.contains(r));
        me.set_members(voters);
        gauge!(metric::RAFT_PEERS_REFUSING).set(refusing.len() as f64);
        me.set_refusing(refusing);
        me.period(&mut cluster, leader.then_some(metrics.current_term));
        tell_object_warnings(&cluster, metrics.current_leader, opts.id);
        if let Some(admin) = &admin {
            admin.publish_raft(raft_view(&metrics), me.running());
        }
        // Only the leader acts on Jobs: one replica at a time, and a new leader picks up
        // from the Jobs' status on the API server.
        if let (true, Some(jc)) = (leader, job_controller.as_mut()) {
            jc.reconcile();
        }
        if let (true, Some(running)) = (leader, me.running()) {
            follow_peers(&runtime, &replica, &desired, running);
        }
        let woke = runtime.block_on(wakeups.wait(period.saturating_sub(started.elapsed())));
        counter!(metric::LOOP_WAKEUPS, "reason" => woke.label()).increment(1);
        std::thread::sleep(wakeup::MIN_GAP.saturating_sub(started.elapsed()));
    }
    // The binds already sent are waited for (a bounded time) and recorded; those not sent
    // stay committed for the shards' next owners to bind.
    me.stop_binds(STOP_BIND_GRACE);
    // The last cycles' statuses and Events, still being written in the background.
    cluster.finish_reports_logged();
    tracing::info!(id = opts.id, "stopping: shutting the ledger replica down");
    runtime
        .block_on(replica.shutdown())
        .map_err(|e| ServeError::Stop(format!("ledger replica {}: {e}", opts.id)))
}

/// Serves the admin service on `--admin-listen`, over the replicas' transport.
fn start_admin(
    runtime: &tokio::runtime::Runtime,
    opts: &ServeOptions,
    map: &ShardMap,
    transport: &Transport,
) -> Result<Option<Arc<admin::AdminShared>>, ServeError> {
    let Some(addr) = opts.admin_listen else {
        return Ok(None);
    };
    let shared = admin::AdminShared::new(
        opts.id,
        map.clone(),
        opts.conf.clone(),
        opts.scheduler_name.clone(),
        opts.admin_peers.clone(),
        transport.clone(),
    );
    let bound = runtime
        .block_on(admin::serve(addr, shared.clone(), transport.clone()))
        .map_err(|e| ServeError::Start(format!("--admin-listen {addr}: {e}")))?;
    tracing::info!(addr = %bound, "serving the admin service");
    Ok(Some(shared))
}

/// What the admin service says about Raft: leader, term, members and, on the leader,
/// what each follower matched.
fn raft_view(metrics: &openraft::RaftMetrics<u64, openraft::BasicNode>) -> admin::RaftView {
    let membership = metrics.membership_config.membership();
    admin::RaftView {
        leader: metrics.current_leader,
        term: metrics.current_term,
        voters: membership.voter_ids().collect(),
        learners: membership.learner_ids().collect(),
        last_log_index: metrics.last_log_index.unwrap_or(0),
        matched: metrics
            .replication
            .iter()
            .flatten()
            .map(|(id, m)| (*id, m.map_or(0, |l| l.index)))
            .collect(),
    }
}

/// The ledger replica's Raft figures, and a leader change when the leader it sees differs
/// from the one it saw last period (no leader counts as a change, so elections show).
fn record_raft(
    metrics: &openraft::RaftMetrics<u64, openraft::BasicNode>,
    last_leader: &mut Option<Option<u64>>,
) {
    gauge!(metric::RAFT_TERM).set(metrics.current_term as f64);
    let stored = metrics.last_log_index.unwrap_or(0);
    let applied = metrics.last_applied.map_or(0, |l| l.index);
    gauge!(metric::RAFT_LOG_INDEX).set(stored as f64);
    gauge!(metric::RAFT_APPLY_INDEX).set(applied as f64);
    gauge!(metric::RAFT_APPLY_LAG).set(stored.saturating_sub(applied) as f64);
    if last_leader.is_some_and(|l| l != metrics.current_leader) {
        counter!(metric::RAFT_LEADER_CHANGES).increment(1);
    }
    *last_leader = Some(metrics.current_leader);
}

/// One step of bringing the Raft voters to `desired` (`membership::next_step`), taken by
/// the leader at the end of its period. A failed step is logged and tried again next
/// period; openraft refuses a change while another is in flight.
fn follow_peers(
    runtime: &tokio::runtime::Runtime,
    replica: &phalanx_statestore::ReplicaHandle,
    desired: &BTreeMap<u64, String>,
    running: BTreeSet<u64>,
) {
    use membership::{MembershipStep, MembershipView, next_step};
    let metrics = replica.metrics();
    let stored = &metrics.membership_config;
    let applied = metrics.last_applied.map(|l| l.index);
    let view = MembershipView {
        leader: metrics.id,
        desired: desired.clone(),
        voters: stored.membership().voter_ids().collect(),
        learners: stored.membership().learner_ids().collect(),
        running,
        matched: metrics
            .replication
            .iter()
            .flatten()
            .filter_map(|(id, m)| Some((*id, (*m)?.index)))
            .collect(),
        last_log_index: metrics.last_log_index.unwrap_or(0),
        changing: stored.membership().get_joint_config().len() > 1
            || stored.log_id().map(|l| l.index) > applied,
    };
    let Some(step) = next_step(&view) else {
        return;
    };
    tracing::info!(?step, voters = ?view.voters, learners = ?view.learners, "changing the ledger group's membership");
    let raft = replica.raft();
    let result = match &step {
        MembershipStep::AddLearner { id, addr } => runtime
            .block_on(raft.add_learner(*id, openraft::BasicNode { addr: addr.clone() }, false))
            .map(|_| ()),
        MembershipStep::SetVoters(voters) => runtime
            .block_on(raft.change_membership(voters.clone(), false))
            .map(|_| ()),
        MembershipStep::RemoveLearners(ids) => runtime
            .block_on(
                raft.change_membership(openraft::ChangeMembers::RemoveNodes(ids.clone()), false),
            )
            .map(|_| ()),
    };
    let name = match step {
        MembershipStep::AddLearner { .. } => "add_learner",
        MembershipStep::SetVoters(_) => "set_voters",
        MembershipStep::RemoveLearners(_) => "remove_learners",
    };
    match result {
        Ok(()) => counter!(metric::MEMBERSHIP_CHANGES, "step" => name).increment(1),
        Err(e) => {
            tracing::warn!(step = name, error = %e, "membership change failed; retried next period")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plaintext_listeners_beyond_loopback_are_warned_about_by_flag_and_address() {
        let addr = |text: &str| Some(text.parse().expect("an address"));
        let warnings = plaintext_exposure_warnings(&[
            ("--listen", addr("0.0.0.0:7001")),
            ("--coord-listen", addr("127.0.0.1:7101")),
            ("--admin-listen", addr("[::]:7201")),
        ]);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].starts_with("--listen 0.0.0.0:7001 is not a loopback"));
        assert!(warnings[0].contains("ledger commands"));
        assert!(warnings[1].starts_with("--admin-listen [::]:7201"));
        let quiet = plaintext_exposure_warnings(&[
            ("--listen", addr("127.0.0.1:7001")),
            ("--coord-listen", None),
            ("--admin-listen", addr("[::1]:7201")),
        ]);
        assert!(quiet.is_empty(), "{quiet:?}");
    }

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

    #[test]
    fn a_snapshot_threshold_outside_its_bounds_is_refused_naming_flag_and_value() {
        for ok in [10, DEFAULT_SNAPSHOT_EVERY, 1_000_000] {
            assert_eq!(check_snapshot_every(ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            (0, "--snapshot-every 0: must be 10 to 1000000"),
            (9, "--snapshot-every 9:"),
            (1_000_001, "--snapshot-every 1000001:"),
            (u64::MAX, "--snapshot-every 18446744073709551615:"),
        ] {
            let e = check_snapshot_every(bad).expect_err("out of bounds");
            assert!(e.starts_with(says), "{bad}: {e}");
        }
    }

    #[test]
    fn raft_timers_out_of_order_or_bounds_are_refused_naming_flag_and_value() {
        let t = |heartbeat_ms, election_min_ms, election_max_ms| RaftTimers {
            heartbeat_ms,
            election_min_ms,
            election_max_ms,
        };
        for ok in [
            RaftTimers::default(),
            t(20, 50, 100),
            t(5, 6, 7),
            t(10_000, 20_000, 60_000),
        ] {
            assert_eq!(check_raft_timers(&ok), Ok(()), "{ok:?}");
            ReplicaConfig {
                heartbeat_ms: ok.heartbeat_ms,
                election_timeout_min_ms: ok.election_min_ms,
                election_timeout_max_ms: ok.election_max_ms,
                ..ReplicaConfig::default()
            }
            .validate()
            .expect("what the flags accept, openraft accepts");
        }
        for (bad, says) in [
            (t(4, 100, 200), "--raft-heartbeat-ms 4: must be 5 to 10000"),
            (t(10_001, 20_000, 30_000), "--raft-heartbeat-ms 10001:"),
            (
                t(40, 40, 200),
                "--raft-election-min-ms 40: must be above --raft-heartbeat-ms 40",
            ),
            (
                t(40, 100, 100),
                "--raft-election-max-ms 100: must be above --raft-election-min-ms 100",
            ),
            (t(40, 100, 60_001), "--raft-election-max-ms 60001:"),
            (
                t(40, 100, u64::MAX),
                "--raft-election-max-ms 18446744073709551615:",
            ),
        ] {
            let e = check_raft_timers(&bad).expect_err("refused");
            assert!(e.starts_with(says), "{bad:?}: {e}");
        }
    }
}
