//! phalanx benchmarks. Each subcommand prints a Markdown table row per configuration, so the
//! output pastes into docs/benchmarks.md as it is.
//!
//! `cycle`: one scheduling cycle (session open, enqueue, allocate, backfill, close) over a
//! generated cluster of N nodes × G GPUs with P pending pods in gangs of 1..64 (`cycle.rs`).
//!
//! `codec`: the Raft log record and proposal sizes and codec times, JSON beside postcard.
//!
//! `kube`: create→bound on the testbed for phalanx serve, kube-scheduler or the trivial
//! binder, and the scheduler's resident memory through the run (`rss.rs`).
//!
//! `shards`: the sharded runtime's throughput over replicas × shards; with `--json`, one
//! point as one JSON line with the process's peak memory (`shards.rs`).
//!
//! `suite`: all of the above this machine can run, written into docs/benchmarks.md
//! (`suite.rs`).

mod codec;
mod cpu;
mod cycle;
mod gang_check;
mod heap;
mod kube;
mod native_gang;
mod rss;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand};
use phalanx_scheduler::framework::SchedulerConf;
use phalanx_scheduler::simulate::synthetic::{SyntheticSpec, generate};

mod shards;
mod suite;
mod trivial;

/// The allocator `phalanx` runs with, so the in-process simulator measures what it does
/// (docs/adr/0004-mimalloc.md).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(name = "phalanx-bench", about = "phalanx benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Bytes per Raft log record and encode/decode ns per command of a batch of gang
    /// commits, in the JSON of older logs and in postcard, side by side.
    Codec {
        /// `PlaceGangs` commands in the batch.
        #[arg(long, default_value_t = 64)]
        commands: usize,
        #[arg(long, default_value_t = 1)]
        gangs_per_command: usize,
        #[arg(long, default_value_t = 8)]
        pods_per_gang: usize,
        /// Passes per codec; the median is reported.
        #[arg(long, default_value_t = 201)]
        repeat: usize,
    },
    /// Kill the ledger's leader again and again during a simulated run (3 replicas on
    /// loopback) and report the time from each kill to the next committed plan.
    Failover {
        /// Leader kills (each followed by a restart of the killed replica 3 s later).
        #[arg(long, default_value_t = 10)]
        kills: u32,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// On the testbed (deploy/testbed/testbed up --nodes 500): create pods in gangs and
    /// measure create→bound throughput and latency for `phalanx serve` (started here, 1 or
    /// more replicas) or for a scheduler already running (`--scheduler default-scheduler`
    /// with `testbed up --kube-scheduler`).
    Kube {
        #[arg(long, default_value = "/tmp/phalanx-testbed/kubeconfig")]
        kubeconfig: PathBuf,
        /// `phalanx` (started here), `trivial` (the bench's own round-robin binder, at
        /// `--kube-qps/--kube-burst` with `--bind-workers` in flight), `native-gang`
        /// (kube-scheduler already running with --feature-gates=GenericWorkload=true, on
        /// `testbed up --native-gang`: the gangs as Workload/PodGroup objects of
        /// scheduling.k8s.io/v1beta1), or the schedulerName of a scheduler already running.
        #[arg(long, default_value = "phalanx")]
        scheduler: String,
        #[arg(long, default_value_t = 1)]
        replicas: u32,
        #[arg(long, default_value_t = 5000)]
        pods: usize,
        /// Pods per gang (PodGroup minMember, or minCount for native-gang); ignored for
        /// other schedulers.
        #[arg(long, default_value_t = 10)]
        gang: usize,
        /// GPUs per pod (every pod asks 1 cpu and 1 Gi besides).
        #[arg(long, default_value_t = 0)]
        gpus_per_pod: i64,
        /// phalanx's API client limit (kube-scheduler's default is 50/100 too).
        #[arg(long, default_value_t = 50.0)]
        kube_qps: f64,
        #[arg(long, default_value_t = 100)]
        kube_burst: u32,
        /// `serve --bind-workers`: bind requests in flight at once per replica.
        #[arg(long, default_value_t = 16)]
        bind_workers: usize,
        /// `serve --max-pods-per-cycle` (serve's default when not given).
        #[arg(long)]
        max_pods_per_cycle: Option<usize>,
        #[arg(long, default_value_t = 200)]
        period_ms: u64,
        /// The phalanx binary.
        #[arg(long, default_value = "target/release/phalanx")]
        phalanx: PathBuf,
        #[arg(long, default_value_t = 600)]
        timeout_s: u64,
        /// Pod creations in flight at once.
        #[arg(long, default_value_t = 32)]
        create_concurrency: usize,
        /// `serve --shards`: above 1, every replica schedules the shards it owns.
        #[arg(long, default_value_t = 1)]
        shards: u32,
        /// Queues the gangs are spread over (0: the default queue); balanced over the shards.
        #[arg(long, default_value_t = 0)]
        queues: usize,
        /// The pid of the scheduler already running (`--scheduler default-scheduler`):
        /// its resident memory is sampled through the run and printed beside the table,
        /// as the replicas' are for `--scheduler phalanx`.
        #[arg(long)]
        rss_pid: Option<u32>,
    },
    /// On the testbed: is a gang placed all or nothing? A gang of nodes + 1 pods of a
    /// whole node's GPUs each (never fits whole), then a gang of 10 one-GPU pods; passes
    /// when the second is bound whole and the first stays wholly pending. Fails for a
    /// scheduler without gangs (`--scheduler default-scheduler`).
    GangCheck {
        #[arg(long, default_value = "/tmp/phalanx-testbed/kubeconfig")]
        kubeconfig: PathBuf,
        /// `native-gang`, `phalanx` (one replica, started here), or the schedulerName of
        /// a scheduler already running.
        #[arg(long, default_value = "native-gang")]
        scheduler: String,
        #[arg(long, default_value = "target/release/phalanx")]
        phalanx: PathBuf,
        /// Seconds the gang that fits may take to be bound.
        #[arg(long, default_value_t = 120)]
        timeout_s: u64,
        /// Seconds to keep watching the gang that cannot fit once the other is bound.
        #[arg(long, default_value_t = 5)]
        settle_s: u64,
    },
    /// Throughput of the sharded runtime over a grid of replicas × shards (real Raft for
    /// two replicas or more).
    Shards {
        #[arg(long, default_value_t = 5_000)]
        nodes: usize,
        #[arg(long, default_value_t = 8)]
        gpus_per_node: i64,
        #[arg(long, default_value_t = 100_000)]
        pods: usize,
        #[arg(long, default_value_t = 64)]
        queues: usize,
        /// Replica counts (1 to 9), comma separated.
        #[arg(long, value_delimiter = ',', default_value = "1,2,3,5")]
        replicas: Vec<u64>,
        /// Shard counts (1 to 1024), comma separated.
        #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
        shards: Vec<u32>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Also write `series,x,y` (series "R replicas", x shards, y pods/s) here.
        #[arg(long)]
        csv: Option<String>,
        /// One point (one --replicas, one --shards) as one JSON line with this process's
        /// peak RSS: how `suite` measures each point in a process of its own.
        #[arg(long, hide = true)]
        json: bool,
    },
    /// Kill the Raft leader and each scheduler replica in turn during a sharded run; time
    /// from each kill to the next bind on a node of a shard it left without an owner.
    ShardFailover {
        #[arg(long, default_value_t = 3)]
        replicas: u64,
        #[arg(long, default_value_t = 6)]
        shards: u32,
        /// A replica not heard from for this long loses its shards (simulated ms).
        #[arg(long, default_value_t = 300)]
        shard_lease_ms: u64,
        /// Simulated ms between rounds (each running replica heartbeats once a round).
        #[arg(long, default_value_t = 100)]
        period_ms: u64,
        #[arg(long, default_value_t = 500)]
        nodes: usize,
        #[arg(long, default_value_t = 20_000)]
        pods: usize,
        /// How many times to kill the leader and every replica.
        #[arg(long, default_value_t = 3)]
        rounds: u32,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Largest gang in the workload: small gangs keep a backlog every pool can place
        /// from at any moment, so a gap in binds is the failover, not a big gang waiting.
        #[arg(long, default_value_t = 4)]
        max_gang: u32,
        /// Do not pace rounds to the wall clock (faster; the wall figures then mix the
        /// simulator's speed into the failover time).
        #[arg(long)]
        unpaced: bool,
    },
    /// Time one scheduling cycle with many pending gangs.
    Cycle {
        /// Node counts to measure, comma separated.
        #[arg(long, value_delimiter = ',', default_value = "500,2000,5000")]
        nodes: Vec<usize>,
        #[arg(long, default_value_t = 8)]
        gpus_per_node: i64,
        /// Pending pods (gangs are added until this many pods exist).
        #[arg(long, default_value_t = 20_000)]
        pods: usize,
        /// Repetitions per configuration; the median is reported.
        #[arg(long, default_value_t = 5)]
        repeat: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Actions to run (the default configuration's tiers of plugins either way).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "enqueue,allocate,preempt,reclaim,backfill"
        )]
        actions: Vec<String>,
        /// Also time the cycle with this many more pending pods whose PodGroup does not
        /// exist (as serve sees the pods of a PodGroup it skipped), side by side.
        #[arg(long, default_value_t = 0)]
        skipped_pods: usize,
    },
    /// Every benchmark this machine can run, one after the other, written into the
    /// generated sections of docs/benchmarks.md (and docs/bench/ for the plots).
    Suite(suite::SuiteArgs),
    /// Where a heap profile's memory was at its peak: the file a replica built with
    /// `--features heap-profile` writes when it stops (`PHALANX_HEAP_PROFILE`).
    HeapTop {
        file: PathBuf,
        /// The workspace whose source files are phalanx's own frames.
        #[arg(long, default_value = ".")]
        workspace: PathBuf,
        /// Rows of each table.
        #[arg(long, default_value_t = 20)]
        top: usize,
        /// Frames shown of each of the heaviest backtraces.
        #[arg(long, default_value_t = 8)]
        frames: usize,
    },
}

fn main() -> Result<()> {
    phalanx_scheduler::process::disable_transparent_huge_pages();
    match Cli::parse().command {
        Command::Suite(args) => match suite::Plan::from_args(&args) {
            Ok(plan) => suite::run(&plan, &std::env::args().collect::<Vec<_>>()),
            Err(why) => {
                eprintln!("error: {why}");
                std::process::exit(2);
            }
        },
        Command::Codec {
            commands,
            gangs_per_command,
            pods_per_gang,
            repeat,
        } => codec::run(&codec::CodecBench {
            commands,
            gangs_per_command,
            pods_per_gang,
            repeat,
        }),
        Command::ShardFailover {
            replicas,
            shards,
            shard_lease_ms,
            period_ms,
            nodes,
            pods,
            rounds,
            seed,
            max_gang,
            unpaced,
        } => {
            let bad = if !(2..=9).contains(&replicas) {
                Some(format!("--replicas {replicas}: expected 2 to 9"))
            } else if !(1..=1024).contains(&shards) {
                Some(format!("--shards {shards}: expected 1 to 1024"))
            } else if shard_lease_ms == 0 {
                Some("--shard-lease-ms 0: must be at least 1".to_string())
            } else if period_ms == 0 {
                Some("--period-ms 0: must be at least 1".to_string())
            } else if !(1..=64).contains(&max_gang) {
                Some(format!("--max-gang {max_gang}: expected 1 to 64"))
            } else if shard_lease_ms < 2 * period_ms {
                Some(format!(
                    "--shard-lease-ms {shard_lease_ms}: must be at least twice --period-ms {period_ms}"
                ))
            } else {
                None
            };
            if let Some(why) = bad {
                eprintln!("error: {why}");
                std::process::exit(2);
            }
            shards::failover(&shards::FailoverBench {
                replicas,
                shards,
                lease_ms: shard_lease_ms,
                period_ms,
                nodes,
                pods,
                rounds: rounds.max(1),
                seed,
                max_gang,
                paced: !unpaced,
            })
        }
        Command::Shards {
            nodes,
            gpus_per_node,
            pods,
            queues,
            replicas,
            shards,
            seed,
            csv,
            json,
        } => {
            for &r in &replicas {
                if !(1..=9).contains(&r) {
                    eprintln!("error: --replicas {r}: expected 1 to 9");
                    std::process::exit(2);
                }
            }
            for &s in &shards {
                if !(1..=1024).contains(&s) {
                    eprintln!("error: --shards {s}: expected 1 to 1024");
                    std::process::exit(2);
                }
            }
            if nodes == 0 || pods == 0 || queues == 0 || gpus_per_node <= 0 {
                eprintln!(
                    "error: --nodes {nodes} / --pods {pods} / --queues {queues} / --gpus-per-node {gpus_per_node}: each must be at least 1"
                );
                std::process::exit(2);
            }
            let bench = shards::ShardBench {
                nodes,
                gpus_per_node,
                pods,
                queues,
                replicas,
                shards,
                seed,
                csv,
            };
            if json {
                shards::point(&bench)
            } else {
                shards::run(&bench)
            }
        }
        Command::Failover { kills, seed } => failover(kills.max(1), seed),
        Command::HeapTop {
            file,
            workspace,
            top,
            frames,
        } => heap::report(&file, &workspace, top, frames),
        Command::Kube {
            kubeconfig,
            scheduler,
            replicas,
            pods,
            gang,
            gpus_per_pod,
            kube_qps,
            kube_burst,
            bind_workers,
            max_pods_per_cycle,
            period_ms,
            phalanx,
            timeout_s,
            create_concurrency,
            shards,
            queues,
            rss_pid,
        } => kube::run(&kube::KubeBench {
            kubeconfig,
            scheduler,
            replicas,
            pods,
            gang,
            gpus_per_pod,
            kube_qps,
            kube_burst,
            bind_workers,
            max_pods_per_cycle,
            period_ms,
            phalanx,
            timeout: Duration::from_secs(timeout_s),
            create_concurrency,
            shards,
            queues,
            rss_pid,
        }),
        Command::GangCheck {
            kubeconfig,
            scheduler,
            phalanx,
            timeout_s,
            settle_s,
        } => gang_check::run(&gang_check::GangCheck {
            kubeconfig,
            scheduler,
            phalanx,
            timeout: Duration::from_secs(timeout_s),
            settle: Duration::from_secs(settle_s),
        }),
        Command::Cycle {
            nodes,
            gpus_per_node,
            pods,
            repeat,
            seed,
            actions,
            skipped_pods,
        } => {
            let mut conf = SchedulerConf::volcano_default();
            conf.actions = actions;
            let shape = cycle::CycleShape {
                gpus_per_node,
                pods,
                skipped_pods,
                repeat: repeat.max(1),
                seed,
            };
            cycle::run(&conf, &nodes, &shape)
        }
    }
}

fn failover(kills: u32, seed: u64) -> Result<()> {
    use phalanx_scheduler::ledger::{LedgerFault, RaftLedger, ScheduledFault};
    use phalanx_scheduler::simulate::driver::{DriverOptions, drive_with};

    let mut spec = SyntheticSpec::new(32, 8, 4_000, seed);
    spec.duration_ms = Some((1_000, 3_000));
    let w = generate(&spec);
    let mut sim = w.into_sim();
    let mut ledger = RaftLedger::start(3)?;
    let mut faults = Vec::new();
    for k in 0..u64::from(kills) {
        let at = 2_000 + k * 6_000;
        faults.push(ScheduledFault {
            at_ms: at,
            fault: LedgerFault::KillLeader,
        });
        faults.push(ScheduledFault {
            at_ms: at + 3_000,
            fault: LedgerFault::Restart(None),
        });
    }
    let opts = DriverOptions {
        faults,
        check_ledger_every_cycle: false,
        check_state_cache_every_cycle: false,
        horizon_ms: Some(2_000 + u64::from(kills) * 6_000 + 3_000),
        ..DriverOptions::default()
    };
    let outcome = drive_with(
        &mut sim,
        &SchedulerConf::volcano_default(),
        &opts,
        &mut ledger,
        |_| {},
    );
    let mut after_kill: Vec<f64> = outcome
        .faults
        .iter()
        .filter(|f| f.what.starts_with("kill:leader"))
        .filter_map(|f| f.recovered_after.map(|d| d.as_secs_f64() * 1000.0))
        .collect();
    after_kill.sort_by(f64::total_cmp);
    let pct = |p: f64| after_kill[((after_kill.len() as f64 - 1.0) * p).round() as usize];
    if after_kill.is_empty() {
        anyhow::bail!("no plan was committed after any kill: {:?}", outcome.faults);
    }
    println!(
        "| leader kills | recovered | kill → next committed plan p50 | p99 | max | binds | violations |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {kills} | {} | {:.0} ms | {:.0} ms | {:.0} ms | {} | {} |",
        after_kill.len(),
        pct(0.5),
        pct(0.99),
        pct(1.0),
        outcome.total_binds(),
        outcome.violations.len()
    );
    Ok(())
}
