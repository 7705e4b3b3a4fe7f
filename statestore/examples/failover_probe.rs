//! Failover breakdown of the replicated ledger alone: kill the leader of N replicas on
//! loopback, then time (a) until the kill returned, (b) until a new leader is elected, and
//! (c) until a client proposal commits again. Repeats with the killed replica restarted.
//!
//! ```text
//! cargo run --release -p phalanx-statestore --example failover_probe -- --kills 10
//! cargo run --release -p phalanx-statestore --example failover_probe -- \
//!     --kills 10 --heartbeat-ms 50 --election-min-ms 150 --election-max-ms 300
//! ```
//!
//! Used to choose `ReplicaConfig`/`ClientConfig` defaults (docs/benchmarks-ledger.md).

use std::time::{Duration, Instant};

use clap::Parser;
use phalanx_statestore::{LedgerCommand, ReplicaConfig, start_local_cluster_with};

#[derive(Debug, Parser)]
struct Args {
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    #[arg(long, default_value_t = 10)]
    kills: usize,
    #[arg(long)]
    heartbeat_ms: Option<u64>,
    #[arg(long)]
    election_min_ms: Option<u64>,
    #[arg(long)]
    election_max_ms: Option<u64>,
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut config = ReplicaConfig::default();
    if let Some(h) = args.heartbeat_ms {
        config.heartbeat_ms = h;
    }
    if let Some(m) = args.election_min_ms {
        config.election_timeout_min_ms = m;
    }
    if let Some(m) = args.election_max_ms {
        config.election_timeout_max_ms = m;
    }
    let dir = tempfile::tempdir()?;
    let mut cluster = start_local_cluster_with(args.replicas, dir.path(), config.clone()).await?;
    let client = cluster.client();
    let tick = |n: u64| LedgerCommand::ExpireAt { now_ms: n };
    client.propose_one(tick(1)).await?;
    let (mut killed, mut elected, mut committed) = (Vec::new(), Vec::new(), Vec::new());
    for k in 0..args.kills as u64 {
        let leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
        let t0 = Instant::now();
        cluster.kill(leader).await?;
        killed.push(t0.elapsed().as_secs_f64() * 1e3);
        // The client and the election race, as they do in the scheduler.
        // An ambiguous answer (the old leader's connection closing) is retried: the
        // probe times the first commit, the scheduler would read the ledger instead.
        let proposal = async {
            let mut ambiguous = 0;
            loop {
                match client.propose_one(tick(k + 2)).await {
                    Ok(_) => break,
                    Err(e) if ambiguous < 3 => {
                        ambiguous += 1;
                        eprintln!("kill {k}: {e} after {:?}", t0.elapsed());
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            anyhow::Ok(t0.elapsed().as_secs_f64() * 1e3)
        };
        let election = async {
            cluster.wait_for_leader(Duration::from_secs(10)).await?;
            anyhow::Ok(t0.elapsed().as_secs_f64() * 1e3)
        };
        let (c, e) = tokio::join!(proposal, election);
        committed.push(c?);
        elected.push(e?);
        cluster.restart(leader).await?;
        // Let the restarted replica catch up before the next kill.
        tokio::time::sleep(Duration::from_millis(500)).await;
        client.propose_one(tick(k + 1000)).await?;
    }
    println!("config: {config:?}");
    println!("| phase | p50 | p90 | max |\n|---|---:|---:|---:|");
    for (name, v) in [
        ("kill returned", &mut killed),
        ("new leader", &mut elected),
        ("next commit", &mut committed),
    ] {
        let max = pct(v, 1.0);
        println!(
            "| {name} | {:.0} ms | {:.0} ms | {max:.0} ms |",
            pct(v, 0.5),
            pct(v, 0.9)
        );
    }
    cluster.shutdown().await?;
    Ok(())
}
