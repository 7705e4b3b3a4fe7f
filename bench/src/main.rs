//! phalanx benchmarks. Each subcommand prints a Markdown table row per configuration, so the
//! output pastes into docs/benchmarks.md as it is.
//!
//! `cycle`: one scheduling cycle (session open, enqueue, allocate, backfill, close) over a
//! generated cluster of N nodes × G GPUs with P pending pods in gangs of 1..64.

use std::time::{Duration, Instant};

use anyhow::Result;
use clap::{Parser, Subcommand};
use phalanx_scheduler::cluster::{Cluster, sim::SimCluster};
use phalanx_scheduler::framework::SchedulerConf;
use phalanx_scheduler::framework::run_cycle;
use phalanx_scheduler::simulate::synthetic::{SyntheticSpec, generate};

#[derive(Parser, Debug)]
#[command(name = "phalanx-bench", about = "phalanx benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
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
    },
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Cycle {
            nodes,
            gpus_per_node,
            pods,
            repeat,
            seed,
            actions,
        } => {
            let mut conf = SchedulerConf::volcano_default();
            conf.actions = actions;
            cycle(&conf, &nodes, gpus_per_node, pods, repeat.max(1), seed)
        }
    }
}

fn cycle(
    conf: &SchedulerConf,
    node_counts: &[usize],
    gpus_per_node: i64,
    pods: usize,
    repeat: usize,
    seed: u64,
) -> Result<()> {
    println!("actions: {}\n", conf.actions.join(", "));
    println!(
        "| nodes | GPUs | pending pods | gangs | placed | cycle (median of {repeat}) | pods/s |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for &n in node_counts {
        let mut spec = SyntheticSpec::new(n, gpus_per_node, usize::MAX, seed);
        spec.max_pods = pods;
        let workload = generate(&spec);
        let sim = SimCluster::new(
            workload.nodes,
            workload.pods,
            workload.pod_groups,
            workload.queues,
            Vec::new(),
        );
        let snapshot = sim.snapshot();
        let mut times: Vec<Duration> = Vec::with_capacity(repeat);
        let mut placed = 0;
        for _ in 0..repeat {
            let started = Instant::now();
            let (plan, _) = run_cycle(&snapshot, conf, "phalanx");
            times.push(started.elapsed());
            placed = plan.bind_count();
        }
        times.sort();
        let median = times[times.len() / 2];
        println!(
            "| {n} | {} | {} | {} | {placed} | {:.1} ms | {:.0} |",
            n as i64 * gpus_per_node,
            snapshot.pods.len(),
            snapshot.pod_groups.len(),
            median.as_secs_f64() * 1000.0,
            placed as f64 / median.as_secs_f64()
        );
    }
    Ok(())
}
