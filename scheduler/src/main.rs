//! The `phalanx` command.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use phalanx_scheduler::framework::HomePool;
use phalanx_scheduler::ledger::ScheduledFault;
use phalanx_scheduler::manifest::{LoadOptions, load_workload_files};
use phalanx_scheduler::model::ObjectKey;
use phalanx_scheduler::serve::RaftTimers;
use phalanx_scheduler::serve::admin::{cli as admin_cli, render as admin_render};
use phalanx_scheduler::shard::{MAX_SHARDS, ShardingConfig};
use phalanx_scheduler::simulate::fairness::{self, FairnessSpec};
use phalanx_scheduler::simulate::scenario::{ScenarioOptions, explain, render, run_workload};
use phalanx_scheduler::simulate::sharded::{ShardOptions, sharding_for};
use phalanx_scheduler::simulate::synthetic::{
    SyntheticSpec, check_generated_bounds, parse_pod_seconds,
};
use phalanx_scheduler::simulate::{demo, generated};

#[derive(Parser, Debug)]
#[command(
    name = "phalanx",
    version,
    about = "A multi-active gang scheduler for Kubernetes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the scheduler on an embedded simulated cluster: the built-in demo (no arguments),
    /// a scenario file (--scenario), or a generated workload (--nodes/--jobs).
    Simulate(Box<SimulateArgs>),
    /// Print the CustomResourceDefinitions of PodGroup and Queue (scheduling.volcano.sh/v1beta1),
    /// generated from phalanx's types, as multi-document YAML (deploy/crds/ holds them).
    Crds,
    /// Run one scheduler replica against a Kubernetes API server. Each replica hosts one
    /// ledger replica and schedules the shards the ledger's Raft leader assigns it.
    Serve(Box<ServeArgs>),
    /// Why is this PodGroup where it is? Asks a running `phalanx serve` replica's admin
    /// service (the owner of the PodGroup's shard answers); with --kubeconfig, falls back to
    /// the PodGroup's conditions and Events on the API server when no replica answers.
    Explain(Box<ExplainArgs>),
    /// Replicas (up, leader, lag), shards (owner, epoch, queues, nodes), queues and the
    /// oldest pending PodGroups of a running deployment (the Raft leader answers).
    Status(Box<StatusArgs>),
}

/// How `phalanx explain` and `phalanx status` reach a replica's admin service.
#[derive(Args, Debug)]
struct ClientArgs {
    /// A replica's --admin-listen address, as ID=HOST:PORT (the id names the certificate
    /// it must present; HOST:PORT alone with --insecure-plaintext).
    #[arg(long, value_name = "ID=HOST:PORT")]
    server: Option<String>,
    /// A client certificate the replicas' CA signed (PEM).
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// The CA that signs every replica's certificate (PEM).
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// The replicas serve --insecure-plaintext.
    #[arg(long, conflicts_with_all = ["tls_cert", "tls_key", "tls_ca"])]
    insecure_plaintext: bool,
}

#[derive(Args, Debug)]
struct ExplainArgs {
    /// The PodGroup, as NAMESPACE/NAME.
    #[arg(value_name = "NAMESPACE/PODGROUP")]
    podgroup: String,
    #[command(flatten)]
    client: ClientArgs,
    /// When no admin service answers (or without --server): read the PodGroup's
    /// conditions and Events from the API server of this kubeconfig instead.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct StatusArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// `table` or `json`.
    #[arg(short = 'o', long, default_value = "table")]
    output: String,
    /// How many pending PodGroups to list, oldest first (1 to 1000).
    #[arg(long, default_value_t = 20)]
    top: u32,
}

#[derive(Args, Debug)]
struct ServeArgs {
    /// Kubeconfig file; without it $KUBECONFIG, ~/.kube/config or the in-cluster service
    /// account is used.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// This replica's ledger id (1, 2, ...).
    #[arg(
        long,
        required_unless_present = "id_from_pod_name",
        conflicts_with = "id_from_pod_name"
    )]
    id: Option<u64>,
    /// Take the ledger id from a StatefulSet pod name `<name>-<ordinal>`: ordinal + 1
    /// (the Helm chart passes `$(POD_NAME)` from the downward API).
    #[arg(long, value_name = "POD_NAME")]
    id_from_pod_name: Option<String>,
    /// Address the ledger replica serves gRPC on.
    #[arg(long, default_value = "127.0.0.1:7001", value_name = "HOST:PORT")]
    listen: std::net::SocketAddr,
    /// Every ledger replica as id=host:port, comma-separated (DNS names allowed); this one
    /// may be left out. The lowest id forms the group.
    #[arg(long, default_value = "", value_name = "ID=HOST:PORT,...")]
    peers: String,
    /// Where the ledger replica keeps its log and state (default: ./phalanx-data/ID).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Serve /healthz, /readyz and /metrics here.
    #[arg(long, value_name = "HOST:PORT")]
    http: Option<std::net::SocketAddr>,
    /// Place pods whose spec.schedulerName is this.
    #[arg(long, default_value = "phalanx")]
    scheduler_name: String,
    /// Time between scheduling cycles, in milliseconds (1 to 3600000).
    #[arg(long, default_value_t = 1000)]
    period_ms: u64,
    /// API server writes per second (binds, status, events, evictions); 0 = no limit.
    #[arg(long, default_value_t = 50.0)]
    kube_qps: f64,
    /// API server writes allowed in a burst above --kube-qps.
    #[arg(long, default_value_t = 100)]
    kube_burst: u32,
    /// Bind requests in flight at once (1 to 1024); each still passes --kube-qps, so more
    /// workers help only when the API server's round trip, not the QPS budget, bounds the rate.
    #[arg(long, default_value_t = phalanx_scheduler::cluster::kube::DEFAULT_BIND_WORKERS)]
    bind_workers: usize,
    /// Pods committed ahead of the binds at most (0 = no bound; up to 1000000): a cycle
    /// commits whole gangs in plan order, the first one however large, while the pods whose
    /// bind is still in flight and those it takes stay within this, and plans the rest again
    /// next cycle; so a gang planned later (a higher priority, a new one) waits behind at
    /// most about this many binds, not behind a whole backlog.
    #[arg(long, default_value_t = DEFAULT_MAX_PODS_PER_CYCLE)]
    max_pods_per_cycle: usize,
    /// A volcano-scheduler.conf (actions and plugin tiers); Volcano's default without it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Seconds to wait for the watch caches to sync at start (1 to 86400).
    #[arg(long, default_value_t = 60)]
    sync_timeout_s: u64,
    /// Create the PodGroup and Queue CRDs (as `phalanx crds` prints them) where they are
    /// absent; existing ones (phalanx's or Volcano's) are left as they are.
    #[arg(long)]
    install_crds: bool,
    /// Shards (1 to 1024): queues and nodes are split into shards by a stable hash and each
    /// live replica schedules the shards the Raft leader assigns it. 1: one replica
    /// schedules the whole cluster, the others stand by.
    #[arg(long, default_value_t = 1)]
    shards: u32,
    /// Put nodes in shards by the value of this label (e.g. topology.kubernetes.io/zone);
    /// nodes without it go by their name.
    #[arg(long, value_name = "KEY")]
    shard_by_label: Option<String>,
    /// A replica whose Lease has not been renewed for this long (ms, 1 to 600000, at least
    /// twice --period-ms) loses its shards to the live replicas. Each replica renews its
    /// Lease every third of this on a timer of its own, not once a cycle, while its
    /// scheduling loop shows progress (a loop stalled for ten leases, at least 60 s, lets
    /// it lapse).
    #[arg(long, default_value_t = 3000)]
    shard_lease_ms: u64,
    /// Namespace of the replicas' Lease objects (coordination.k8s.io/v1).
    #[arg(long, default_value = "default", value_name = "NAMESPACE")]
    lease_namespace: String,
    /// Serve the 2PC CoordinatorService here, and place gangs that span shards' pools by
    /// two-phase reservation between replicas (without it they stay pending).
    #[arg(long, value_name = "IP:PORT")]
    coord_listen: Option<std::net::SocketAddr>,
    /// Every replica's CoordinatorService address, as id=IP:port, comma-separated.
    #[arg(long, default_value = "", value_name = "ID=IP:PORT,...")]
    coord_peers: String,
    /// Run a Volcano Job controller on the Raft leader: expand batch.volcano.sh/v1alpha1
    /// Jobs into their PodGroup and pods and keep their status. Leave it off when
    /// Volcano's controller runs.
    #[arg(long)]
    job_controller: bool,
    /// This replica's certificate (PEM, leaf first); its DNS SAN replica-<id>.phalanx
    /// names the replica (docs/security.md). Re-read when it changes.
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// The CA that signs every replica's certificate (PEM).
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// Serve and call the ledger and CoordinatorService ports without TLS: anyone who can
    /// reach them can propose ledger commands. Warned about every minute.
    #[arg(long, conflicts_with_all = ["tls_cert", "tls_key", "tls_ca"])]
    insecure_plaintext: bool,
    /// Serve the admin service (`phalanx explain`, `phalanx status`) here, over the same
    /// mutual TLS as the other ports.
    #[arg(long, value_name = "IP:PORT")]
    admin_listen: Option<std::net::SocketAddr>,
    /// Every replica's admin service address, as id=host:port, comma-separated: a replica
    /// forwards an explain to the shard's owner, a status to the Raft leader.
    #[arg(long, default_value = "", value_name = "ID=HOST:PORT,...")]
    admin_peers: String,
    /// The ledger replica snapshots its state and compacts its log after this many
    /// entries since the last snapshot (10 to 1000000); a follower behind the compacted
    /// part is caught up by the leader's snapshot.
    #[arg(long, default_value_t = phalanx_scheduler::serve::DEFAULT_SNAPSHOT_EVERY, value_name = "ENTRIES")]
    snapshot_every: u64,
    /// The Raft leader's heartbeat to each follower (5 to 10000 ms).
    #[arg(long, default_value_t = RaftTimers::default().heartbeat_ms, value_name = "MS")]
    raft_heartbeat_ms: u64,
    /// A follower that stops hearing the leader calls an election after
    /// --raft-election-max-ms plus a random time from this to --raft-election-max-ms
    /// (above the heartbeat). Lower: faster failover of a killed leader, more elections
    /// for a leader that only stalled (docs/configuration.md).
    #[arg(long, default_value_t = RaftTimers::default().election_min_ms, value_name = "MS")]
    raft_election_min_ms: u64,
    /// See --raft-election-min-ms (above it, at most 60000).
    #[arg(long, default_value_t = RaftTimers::default().election_max_ms, value_name = "MS")]
    raft_election_max_ms: u64,
}

/// `--tls-cert/--tls-key/--tls-ca` (all three) or `--insecure-plaintext`.
fn tls_flags(
    cert: &Option<PathBuf>,
    key: &Option<PathBuf>,
    ca: &Option<PathBuf>,
    insecure_plaintext: bool,
) -> Result<Option<phalanx_statestore::TlsFiles>, String> {
    if insecure_plaintext {
        return Ok(None);
    }
    let need = |v: &Option<PathBuf>, flag: &str| {
        v.clone().ok_or_else(|| {
            format!("{flag} is required: give --tls-cert, --tls-key and --tls-ca, or --insecure-plaintext (docs/security.md)")
        })
    };
    Ok(Some(phalanx_statestore::TlsFiles {
        cert: need(cert, "--tls-cert")?,
        key: need(key, "--tls-key")?,
        ca: need(ca, "--tls-ca")?,
    }))
}

#[derive(Args, Debug)]
struct SimulateArgs {
    /// A multi-document YAML scenario (see SCENARIOS.md).
    #[arg(long, value_name = "FILE")]
    scenario: Option<PathBuf>,
    /// Scheduler replicas: 1 checks each plan with the ledger's state machine in process;
    /// 2 to 9 start the replicated ledger (Raft on loopback) and commit every plan through it.
    #[arg(long, default_value_t = 1)]
    replicas: u32,
    /// Shards (1 to 1024): queues and nodes are split into shards by a stable hash, and the
    /// replicas each schedule the shards the ledger's leader assigns them. Gangs that do
    /// not fit their home shard's pool go through two-phase reservation.
    #[arg(long, default_value_t = 1)]
    shards: u32,
    /// Put nodes in shards by the value of this label (e.g. topology.kubernetes.io/zone),
    /// so a topology domain stays in one shard; nodes without it go by their name.
    #[arg(long, value_name = "KEY")]
    shard_by_label: Option<String>,
    /// Sharded runs: a scheduler replica not heard from for this long (simulated ms; 1 to
    /// 600000) loses its shards to the live replicas. Replicas heartbeat once per round
    /// (`--period-ms`), so keep the lease at two periods or more.
    #[arg(long, default_value_t = 3000)]
    shard_lease_ms: u64,
    /// Sharded runs: how a replica prefers a gang's home shard's pool: `among-best` (only
    /// among the best-scored nodes, so placements score as with one shard) or `strict`
    /// (the home pool whenever the gang fits there; fewest cross-shard transactions).
    #[arg(long, default_value = "among-best")]
    home_pool: String,
    /// Place pods whose spec.schedulerName is this.
    #[arg(long, default_value = "phalanx")]
    scheduler_name: String,
    /// Treat unknown actions and plugins in volcano-scheduler.conf as errors.
    #[arg(long)]
    strict_config: bool,
    /// Simulated time between cycles, in milliseconds (1 to 3600000).
    #[arg(long, default_value_t = 1000)]
    period_ms: u64,
    /// Generate a cluster of this many nodes (1 to 100000).
    #[arg(long)]
    nodes: Option<usize>,
    /// GPUs of each generated node (1 to 64).
    #[arg(long, default_value_t = 8)]
    gpus_per_node: i64,
    /// Generate this many gangs (0 to 200000).
    #[arg(long, default_value_t = 1000)]
    jobs: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Generated pods run for a random time in this range, in seconds (e.g. 60-600), so
    /// gangs finish and others take their place; without it pods run forever.
    #[arg(long, value_name = "MIN-MAX")]
    pod_seconds: Option<String>,
    /// Inject a fault at a simulated time (repeatable): kill:leader@30s, kill:replica-2@10s,
    /// restart:last@40s, isolate:replica-1@5s, heal:replica-1@20s; and for scheduler
    /// replicas: pause:replica-2@10s (+15s for a duration), resume:replica-2@25s. With
    /// --shards, kill:leader stops the leading replica whole (ledger and scheduler) and
    /// restart:last brings back the last replica stopped.
    #[arg(long = "fault", value_name = "SPEC")]
    faults: Vec<String>,
    /// Hide the progress bar of generated runs.
    #[arg(long)]
    quiet: bool,
    /// With --nodes: a fairness run over these queues and weights (`a:1,b:2,c:3`). The first
    /// queue fills the cluster alone, then the others arrive; prints each queue's GPU share.
    #[arg(long, value_name = "NAME:WEIGHT,...")]
    queues: Option<String>,
    /// With --scenario: after the run, explain why this PodGroup is where it is.
    #[arg(long, value_name = "NAMESPACE/PODGROUP")]
    explain: Option<String>,
}

/// Exit codes of SCENARIOS.md.
const EXIT_UNMET: u8 = 1;
const EXIT_BAD_INPUT: u8 = 2;

/// With `--features heap-profile`, every allocation goes through dhat, which writes the
/// profile (`PHALANX_HEAP_PROFILE`, default `dhat-heap.json`) when `main` returns.
#[cfg(feature = "heap-profile")]
#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// Otherwise mimalloc: the glibc allocator spent about a third of a sustained run's time
/// in malloc, its consolidation and free (docs/adr/0004-mimalloc.md). With
/// `--features system-allocator`, the C library's (for comparing the two side by side).
#[cfg(not(any(feature = "heap-profile", feature = "system-allocator")))]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    phalanx_scheduler::process::disable_transparent_huge_pages();
    #[cfg(feature = "heap-profile")]
    let _heap = dhat::Profiler::builder()
        // Deep enough to reach phalanx's own frames under kube-runtime's and serde's.
        .trim_backtraces(Some(48))
        .file_name(std::env::var_os("PHALANX_HEAP_PROFILE").unwrap_or("dhat-heap.json".into()))
        .build();
    let filter = tracing_subscriber::EnvFilter::try_from_env("PHALANX_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,openraft=error"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Simulate(args) => simulate(*args),
        Command::Crds => crds(),
        Command::Serve(args) => serve(*args),
        Command::Explain(args) => admin_explain(*args),
        Command::Status(args) => admin_status(*args),
    }
}

/// The transport and the replica (id, address) `--server` and the TLS flags name.
fn admin_target(
    c: &ClientArgs,
) -> Result<Option<(phalanx_statestore::Transport, u64, String)>, String> {
    let Some(server) = &c.server else {
        return Ok(None);
    };
    let files = tls_flags(&c.tls_cert, &c.tls_key, &c.tls_ca, c.insecure_plaintext)?;
    let (id, addr) = admin_cli::parse_server(server, files.is_some())?;
    let transport = match files {
        None => phalanx_statestore::Transport::Plaintext,
        Some(f) => phalanx_statestore::Transport::Tls(
            phalanx_statestore::TlsState::load(f).map_err(|e| e.to_string())?,
        ),
    };
    Ok(Some((transport, id, addr)))
}

fn client_runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the client runtime: {e}"))
}

fn admin_explain(args: ExplainArgs) -> ExitCode {
    let Some((ns, name)) = args.podgroup.split_once('/') else {
        eprintln!(
            "error: {:?}: give the PodGroup as NAMESPACE/NAME",
            args.podgroup
        );
        return ExitCode::from(EXIT_BAD_INPUT);
    };
    let key = ObjectKey::new(ns, name);
    let target = match admin_target(&args.client) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    if target.is_none() && args.kubeconfig.is_none() {
        eprintln!(
            "error: give --server ID=HOST:PORT (a replica's --admin-listen), --kubeconfig, or both"
        );
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    let rt = match client_runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some((transport, id, addr)) = &target {
        match rt.block_on(admin_cli::explain(addr, *id, transport, &key)) {
            Ok(reply) => {
                print!("{}", admin_render::explain_text(&reply));
                return ExitCode::SUCCESS;
            }
            Err(e) if args.kubeconfig.is_some() => {
                eprintln!("warning: {e}; reading what the API server holds instead");
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let Some(kubeconfig) = &args.kubeconfig else {
        return ExitCode::FAILURE;
    };
    match rt.block_on(admin_cli::explain_from_api_server(kubeconfig, &key)) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn admin_status(args: StatusArgs) -> ExitCode {
    if !matches!(args.output.as_str(), "table" | "json") {
        eprintln!("error: -o {:?}: must be table or json", args.output);
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    if !(1..=1000).contains(&args.top) {
        eprintln!("error: --top {}: must be 1 to 1000", args.top);
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    let (transport, id, addr) = match admin_target(&args.client) {
        Ok(Some(t)) => t,
        Ok(None) => {
            eprintln!("error: --server ID=HOST:PORT (a replica's --admin-listen) is required");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let reply = client_runtime()
        .and_then(|rt| rt.block_on(admin_cli::status(&addr, id, &transport, args.top)));
    match reply {
        Ok(r) if args.output == "json" => {
            println!("{:#}", admin_render::status_json(&r));
            ExitCode::SUCCESS
        }
        Ok(r) => {
            print!("{}", admin_render::status_table(&r));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    use phalanx_scheduler::serve::{ServeOptions, identity, parse_coord_peers, parse_peers, run};
    if let Err(e) = check_serve_bounds(&args) {
        eprintln!("error: {e}");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    let id = match (args.id, &args.id_from_pod_name) {
        (Some(id), _) => id,
        (None, Some(name)) => match identity::id_from_pod_name(name) {
            Ok(id) => id,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        },
        (None, None) => {
            eprintln!("error: --id or --id-from-pod-name is required");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let peers = match parse_peers(&args.peers) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let admin_peers = match parse_peers(&args.admin_peers) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: --admin-peers: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let coord_peers = match parse_coord_peers(&args.coord_peers) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let conf = match &args.config {
        None => phalanx_scheduler::manifest::default_scheduler_conf(),
        Some(path) => {
            let text = match std::fs::read_to_string(path) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("error: --config {}: {e}", path.display());
                    return ExitCode::from(EXIT_BAD_INPUT);
                }
            };
            match phalanx_scheduler::manifest::parse_scheduler_conf(&text, false) {
                Ok((conf, warnings)) => {
                    for w in warnings {
                        eprintln!("warning: --config {}: {w}", path.display());
                    }
                    conf
                }
                Err(e) => {
                    eprintln!("error: --config {}: {e}", path.display());
                    return ExitCode::from(EXIT_BAD_INPUT);
                }
            }
        }
    };
    let tls = match tls_flags(
        &args.tls_cert,
        &args.tls_key,
        &args.tls_ca,
        args.insecure_plaintext,
    ) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let raft = raft_timers(&args);
    let opts = ServeOptions {
        tls,
        kubeconfig: args.kubeconfig,
        id,
        listen: args.listen,
        peers,
        data_dir: args
            .data_dir
            .unwrap_or_else(|| PathBuf::from(format!("phalanx-data/{id}"))),
        http: args.http,
        scheduler_name: args.scheduler_name,
        period_ms: args.period_ms,
        kube_qps: args.kube_qps,
        kube_burst: args.kube_burst,
        bind_workers: args.bind_workers,
        max_pods_per_cycle: args.max_pods_per_cycle,
        conf,
        sync_timeout: std::time::Duration::from_secs(args.sync_timeout_s),
        install_crds: args.install_crds,
        shards: args.shards,
        shard_by_label: args.shard_by_label,
        shard_lease_ms: args.shard_lease_ms,
        lease_namespace: args.lease_namespace,
        coord_listen: args.coord_listen,
        coord_peers,
        job_controller: args.job_controller,
        admin_listen: args.admin_listen,
        admin_peers,
        snapshot_every: args.snapshot_every,
        raft,
    };
    if let Err(e) = check_sharding_flags(
        opts.shards,
        opts.shard_by_label.as_deref(),
        opts.shard_lease_ms,
        opts.period_ms,
    ) {
        eprintln!("error: {e}");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    match run(opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ phalanx_scheduler::serve::ServeError::Tls(_)) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--shards`, `--shard-by-label` and `--shard-lease-ms`, as serve and simulate check them.
fn check_sharding_flags(
    shards: u32,
    by_label: Option<&str>,
    lease_ms: u64,
    period_ms: u64,
) -> Result<(), String> {
    if !(1..=MAX_SHARDS).contains(&shards) {
        return Err(format!("--shards {shards}: must be 1 to {MAX_SHARDS}"));
    }
    let config = ShardingConfig {
        shards,
        by_label: by_label.map(str::to_string),
        ..ShardingConfig::default()
    };
    if let Err(e) = config.validate() {
        return Err(format!(
            "--shard-by-label {:?}: {e}",
            by_label.unwrap_or_default()
        ));
    }
    if !(1..=600_000).contains(&lease_ms) {
        return Err(format!(
            "--shard-lease-ms {lease_ms}: must be 1 to 600000 (milliseconds)"
        ));
    }
    if shards > 1 && lease_ms < period_ms.saturating_mul(2) {
        return Err(format!(
            "--shard-lease-ms {lease_ms}: must be at least twice --period-ms {period_ms} (liveness is read once a period: in the simulator replicas heartbeat once a round, and a shorter lease declares live replicas dead)"
        ));
    }
    Ok(())
}

fn crds() -> ExitCode {
    match phalanx_scheduler::manifest::volcano::crd::all_crds_yaml() {
        Ok(yaml) => {
            print!("{yaml}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Longest cycle period (`--period-ms`, simulate and serve): an hour.
const MAX_PERIOD_MS: u64 = 3_600_000;

/// The numeric flags of `simulate` within their bounds (docs/security.md, "Input bounds").
fn check_simulate_bounds(args: &SimulateArgs) -> Result<(), String> {
    if !(1..=MAX_PERIOD_MS).contains(&args.period_ms) {
        return Err(format!(
            "--period-ms {}: must be 1 to {MAX_PERIOD_MS}",
            args.period_ms
        ));
    }
    if let Some(queues) = &args.queues {
        fairness::parse_queues(queues).map_err(|e| format!("--queues: {e}"))?;
    }
    match args.nodes {
        Some(nodes) => check_generated_bounds(nodes, args.jobs, args.gpus_per_node),
        None => Ok(()),
    }
}

/// The numeric flags of `serve` within their bounds.
fn check_serve_bounds(args: &ServeArgs) -> Result<(), String> {
    if args.id == Some(0) {
        return Err("--id 0: replica ids start at 1".into());
    }
    if !(1..=MAX_PERIOD_MS).contains(&args.period_ms) {
        return Err(format!(
            "--period-ms {}: must be 1 to {MAX_PERIOD_MS}",
            args.period_ms
        ));
    }
    if !(args.kube_qps.is_finite() && args.kube_qps >= 0.0) {
        return Err(format!(
            "--kube-qps {}: must be a number >= 0 (0 = no limit)",
            args.kube_qps
        ));
    }
    if !(1..=MAX_BIND_WORKERS).contains(&args.bind_workers) {
        return Err(format!(
            "--bind-workers {}: must be 1 to {MAX_BIND_WORKERS}",
            args.bind_workers
        ));
    }
    if args.max_pods_per_cycle > MAX_PODS_PER_CYCLE {
        return Err(format!(
            "--max-pods-per-cycle {}: must be 0 (no bound) to {MAX_PODS_PER_CYCLE}",
            args.max_pods_per_cycle
        ));
    }
    if !(1..=MAX_SYNC_TIMEOUT_S).contains(&args.sync_timeout_s) {
        return Err(format!(
            "--sync-timeout-s {}: must be 1 to {MAX_SYNC_TIMEOUT_S}",
            args.sync_timeout_s
        ));
    }
    phalanx_scheduler::serve::check_snapshot_every(args.snapshot_every)?;
    phalanx_scheduler::serve::check_raft_timers(&raft_timers(args))
}

fn raft_timers(args: &ServeArgs) -> RaftTimers {
    RaftTimers {
        heartbeat_ms: args.raft_heartbeat_ms,
        election_min_ms: args.raft_election_min_ms,
        election_max_ms: args.raft_election_max_ms,
    }
}

/// Most bind requests in flight (`--bind-workers`): beyond it a replica only queues more
/// work on the API server than it can take.
const MAX_BIND_WORKERS: usize = 1024;

/// `--max-pods-per-cycle` by default: no bound. Measured on the testbed (docs/benchmarks.md,
/// "Binds off the cycle"), a bound of 1,000 pods ahead of the binds and none were within
/// the noise of each other once binds left the cycle; nothing measured argues for a bound.
const DEFAULT_MAX_PODS_PER_CYCLE: usize = 0;
/// The largest `--max-pods-per-cycle` (a cycle's whole plan is smaller in practice).
const MAX_PODS_PER_CYCLE: usize = 1_000_000;

/// Longest wait for the watch caches (`--sync-timeout-s`): a day.
const MAX_SYNC_TIMEOUT_S: u64 = 86_400;

fn simulate(args: SimulateArgs) -> ExitCode {
    if let Err(e) = check_simulate_bounds(&args) {
        eprintln!("error: {e}");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    if !(1..=9).contains(&args.replicas) {
        eprintln!("error: --replicas {}: must be 1 to 9", args.replicas);
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    if let Err(e) = check_sharding_flags(
        args.shards,
        args.shard_by_label.as_deref(),
        args.shard_lease_ms,
        args.period_ms,
    ) {
        eprintln!("error: {e}");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    if let Err(e) = args.home_pool.parse::<HomePool>() {
        eprintln!("error: {e}");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    let mut faults = Vec::new();
    for spec in &args.faults {
        match ScheduledFault::parse(spec) {
            Ok(f) => match f.check_replicas(u64::from(args.replicas)) {
                Ok(()) => faults.push(f),
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(EXIT_BAD_INPUT);
                }
            },
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        }
    }
    if !faults.is_empty() && args.replicas < 2 {
        eprintln!("error: --fault needs the replicated ledger: add --replicas 3");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    if let Some(path) = &args.scenario {
        return scenario(path, &args, faults);
    }
    let result = match args.nodes {
        Some(nodes) if args.queues.is_some() => fairness(nodes, &args),
        Some(nodes) => {
            let mut spec = SyntheticSpec::new(nodes, args.gpus_per_node, args.jobs, args.seed);
            spec.scheduler_name = args.scheduler_name.clone();
            if let Some(range) = &args.pod_seconds {
                match parse_pod_seconds(range) {
                    Ok(ms) => spec.duration_ms = Some(ms),
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::from(EXIT_BAD_INPUT);
                    }
                }
            }
            let conf = phalanx_scheduler::framework::SchedulerConf::volcano_default();
            let sharding = tuned(
                sharding_for(
                    args.shards,
                    args.shard_by_label.clone(),
                    u64::from(args.replicas),
                    &faults,
                    args.seed,
                ),
                &args,
            );
            generated::run(
                &spec,
                &conf,
                args.replicas as usize,
                args.period_ms,
                faults,
                sharding,
                !args.quiet,
            )
        }
        None => demo::run(),
    };
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_UNMET)
        }
    }
}

fn scenario(path: &PathBuf, args: &SimulateArgs, faults: Vec<ScheduledFault>) -> ExitCode {
    let load = LoadOptions {
        scheduler_name: args.scheduler_name.clone(),
        strict_config: args.strict_config,
    };
    let workload = match load_workload_files(&[path], &load) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let opts = ScenarioOptions {
        scheduler_name: args.scheduler_name.clone(),
        strict_config: args.strict_config,
        period_ms: args.period_ms,
        replicas: args.replicas as usize,
        faults,
        shards: args.shards,
        shard_by_label: args.shard_by_label.clone(),
        shard_lease_ms: args.shard_lease_ms,
        home_pool: args.home_pool.parse().unwrap_or_default(),
    };
    let mut report = run_workload(&path.display().to_string(), workload, &opts);
    // Warnings go to stderr, so stdout is the report alone.
    let warnings = std::mem::take(&mut report.warnings);
    let run_warnings = std::mem::take(&mut report.outcome.warnings);
    for w in warnings.iter().chain(&run_warnings) {
        eprintln!("warning: {w}");
    }
    print!("{}", render(&report));
    if let Some(key) = &args.explain {
        println!();
        print!("{}", explain(&report, &ObjectKey::parse(key)));
    }
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_UNMET)
    }
}

/// The sharded runtime's options with `--shard-lease-ms` and `--home-pool` (validated
/// before).
fn tuned(opts: Option<ShardOptions>, args: &SimulateArgs) -> Option<ShardOptions> {
    opts.map(|mut o| {
        o.lease_ms = args.shard_lease_ms;
        o.home_pool = args.home_pool.parse().unwrap_or_default();
        o
    })
}

fn fairness(nodes: usize, args: &SimulateArgs) -> anyhow::Result<String> {
    let queues = fairness::parse_queues(args.queues.as_deref().unwrap_or_default())
        .map_err(|e| anyhow::anyhow!("--queues: {e}"))?;
    let spec = FairnessSpec {
        nodes,
        gpus_per_node: args.gpus_per_node,
        jobs: args.jobs,
        queues,
        seed: args.seed,
        sharding: tuned(
            sharding_for(
                args.shards,
                args.shard_by_label.clone(),
                u64::from(args.replicas),
                &[],
                args.seed,
            ),
            args,
        ),
    };
    let conf = phalanx_scheduler::framework::SchedulerConf::volcano_default();
    let report = fairness::run(&spec, &conf);
    if !report.violations.is_empty() {
        anyhow::bail!("{}invariants were violated", report.render());
    }
    Ok(report.render())
}
