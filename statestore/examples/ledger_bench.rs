//! Ledger benchmark: N replicas in one process on loopback (gRPC, fsync on), measuring
//! commit latency (sequential single-gang proposals) and batched throughput (concurrent
//! writers, many gangs per entry).
//!
//! ```text
//! cargo run --release -p phalanx-statestore --example ledger_bench -- \
//!     --replicas 3 --latency-entries 300 --writers 4 --entries-per-writer 150 \
//!     --gangs-per-entry 32 --pods-per-gang 4
//! ```
//!
//! Data goes to a temporary directory on the disk that holds `--dir` (default: the
//! system temp dir); check it is not tmpfs, or fsync costs nothing.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use phalanx_statestore::ledger::ReleaseReason;
use phalanx_statestore::{
    GangPlacement, LedgerBatch, LedgerClient, LedgerCommand, PodPlacement, ReplicaConfig,
    ResourceVec, start_local_cluster_with,
};

#[derive(Debug, Parser)]
struct Args {
    /// Replicas in the cluster.
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// Sequential one-gang proposals for the latency phase.
    #[arg(long, default_value_t = 300)]
    latency_entries: usize,
    /// Concurrent writers in the throughput phase.
    #[arg(long, default_value_t = 4)]
    writers: usize,
    /// Entries each writer proposes.
    #[arg(long, default_value_t = 150)]
    entries_per_writer: usize,
    /// Gangs per entry in the throughput phase.
    #[arg(long, default_value_t = 32)]
    gangs_per_entry: usize,
    /// Pods per gang.
    #[arg(long, default_value_t = 4)]
    pods_per_gang: usize,
    /// Parent of the data directory.
    #[arg(long)]
    dir: Option<PathBuf>,
}

const NODES: usize = 64;

fn gangs(tag: &str, first: usize, count: usize, pods: usize) -> (Vec<GangPlacement>, Vec<String>) {
    let mut names = Vec::new();
    let gangs = (first..first + count)
        .map(|g| GangPlacement {
            gang: format!("bench/{tag}-g{g}"),
            pods: (0..pods)
                .map(|p| {
                    let pod = format!("bench/{tag}-g{g}-p{p}");
                    names.push(pod.clone());
                    PodPlacement {
                        pod,
                        node: format!("node-{}", (g * pods + p) % NODES),
                        resources: ResourceVec::from_pairs([("cpu", 100), ("memory", 1 << 20)]),
                    }
                })
                .collect(),
        })
        .collect();
    (gangs, names)
}

fn percentile(sorted_us: &[u64], p: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let idx = ((sorted_us.len() as f64 - 1.0) * p).round() as usize;
    sorted_us[idx.min(sorted_us.len() - 1)] as f64 / 1000.0
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(&parent)?;
    let config = ReplicaConfig {
        snapshot_every_entries: 5000,
        ..ReplicaConfig::default()
    };
    let cluster = start_local_cluster_with(args.replicas, dir.path(), config).await?;
    let client = Arc::new(cluster.client());

    let mut seed = vec![LedgerCommand::AssignShard {
        shard: 1,
        owner: 1,
        epoch: 1,
        proposer: None,
    }];
    for n in 0..NODES {
        seed.push(LedgerCommand::UpsertNode {
            node: format!("node-{n}"),
            allocatable: ResourceVec::from_pairs([("cpu", 1 << 40), ("memory", 1 << 60)]),
            shard: 1,
        });
    }
    client.propose(&LedgerBatch { commands: seed }).await?;

    // Phase 1: commit latency, one single-pod gang per entry, one at a time.
    let mut lat = Vec::with_capacity(args.latency_entries);
    let start = Instant::now();
    for i in 0..args.latency_entries {
        let (g, _) = gangs("lat", i, 1, 1);
        let t = Instant::now();
        let o = client.place_gangs(1, 1, g).await?;
        lat.push(t.elapsed().as_micros() as u64);
        anyhow::ensure!(o[0].is_accepted(), "refused: {o:?}");
    }
    let seq_elapsed = start.elapsed();
    lat.sort_unstable();

    // Phase 2: throughput, concurrent writers, batched gangs; each entry also releases
    // the writer's previous batch so the ledger stays the same size.
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..args.writers {
        let client: Arc<LedgerClient> = Arc::clone(&client);
        let (n, gpe, ppg) = (
            args.entries_per_writer,
            args.gangs_per_entry,
            args.pods_per_gang,
        );
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(n);
            let mut previous: Vec<String> = Vec::new();
            for e in 0..n {
                let (g, names) = gangs(&format!("w{w}"), e * gpe, gpe, ppg);
                let mut commands = vec![LedgerCommand::PlaceGangs {
                    shard: 1,
                    epoch: 1,
                    gangs: g,
                }];
                if !previous.is_empty() {
                    commands.push(LedgerCommand::Release {
                        shard: 1,
                        epoch: 1,
                        pods: std::mem::take(&mut previous),
                        reason: ReleaseReason::Finished,
                    });
                }
                let t = Instant::now();
                client.propose(&LedgerBatch { commands }).await?;
                lat.push(t.elapsed().as_micros() as u64);
                previous = names;
            }
            anyhow::Ok(lat)
        }));
    }
    let mut tlat = Vec::new();
    for t in tasks {
        tlat.extend(t.await??);
    }
    let thr_elapsed = start.elapsed();
    tlat.sort_unstable();
    let entries = args.writers * args.entries_per_writer;
    let placements = entries * args.gangs_per_entry * args.pods_per_gang;

    let read = client.read_fingerprint().await?;
    println!("| phase | entries | elapsed s | entries/s | placements/s | p50 ms | p99 ms |");
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| latency (1 writer, 1 gang x 1 pod per entry) | {} | {:.2} | {:.0} | {:.0} | {:.2} | {:.2} |",
        args.latency_entries,
        seq_elapsed.as_secs_f64(),
        args.latency_entries as f64 / seq_elapsed.as_secs_f64(),
        args.latency_entries as f64 / seq_elapsed.as_secs_f64(),
        percentile(&lat, 0.50),
        percentile(&lat, 0.99),
    );
    println!(
        "| throughput ({} writers, {} gangs x {} pods per entry) | {} | {:.2} | {:.0} | {:.0} | {:.2} | {:.2} |",
        args.writers,
        args.gangs_per_entry,
        args.pods_per_gang,
        entries,
        thr_elapsed.as_secs_f64(),
        entries as f64 / thr_elapsed.as_secs_f64(),
        placements as f64 / thr_elapsed.as_secs_f64(),
        percentile(&tlat, 0.50),
        percentile(&tlat, 0.99),
    );
    println!(
        "replicas {}, final applied index {}, fingerprint {:016x}",
        args.replicas, read.applied_index, read.fingerprint
    );
    cluster.shutdown().await?;
    Ok(())
}
