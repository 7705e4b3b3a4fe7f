//! `phalanx-ledger-replica`: runs one ledger replica as its own process.
//!
//! Used by the durability test (which SIGKILLs it) and for manual runs:
//!
//! ```text
//! phalanx-ledger-replica --id 1 --dir /tmp/r1 --listen 127.0.0.1:0 --bootstrap
//! ```
//!
//! Prints `READY <addr>` on stdout once it serves.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use openraft::BasicNode;
use phalanx_statestore::{ReplicaConfig, start_replica_with};

#[derive(Debug, Parser)]
#[command(about = "Run one phalanx ledger replica")]
struct Args {
    /// Raft node id (> 0).
    #[arg(long)]
    id: u64,
    /// Data directory.
    #[arg(long)]
    dir: PathBuf,
    /// Address to serve on (port 0 picks one; printed on the READY line).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Initial members `id=host:port,...`; with `--bootstrap` and no peers the replica
    /// forms a cluster of one.
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,
    /// Initialize the cluster from this replica (idempotent).
    #[arg(long)]
    bootstrap: bool,
    /// Build a snapshot every this many entries.
    #[arg(long, default_value_t = 1000)]
    snapshot_every: u64,
}

fn parse_peers(peers: &[String]) -> anyhow::Result<BTreeMap<u64, BasicNode>> {
    let mut out = BTreeMap::new();
    for p in peers {
        let (id, addr) = p
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("peer {p:?} is not id=host:port"))?;
        out.insert(
            id.parse()?,
            BasicNode {
                addr: addr.to_string(),
            },
        );
    }
    Ok(out)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let config = ReplicaConfig {
        snapshot_every_entries: args.snapshot_every,
        ..ReplicaConfig::default()
    };
    let replica = start_replica_with(args.id, &args.dir, args.listen, &config).await?;
    if args.bootstrap {
        let mut members = parse_peers(&args.peers)?;
        members.entry(args.id).or_insert_with(|| replica.node());
        replica.initialize(members).await?;
    }
    println!("READY {}", replica.addr());
    // Runs until killed (the durability test SIGKILLs it) or interrupted.
    std::future::pending::<()>().await;
    Ok(())
}
