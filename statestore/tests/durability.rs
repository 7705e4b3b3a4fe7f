//! Durability across a hard kill: a replica process (`phalanx-ledger-replica`, a cluster
//! of one, so only its own fsync can save an entry) is SIGKILLed while writers still have
//! proposals in flight, right after a target number of acknowledgements; restarted on the
//! same directory, it must hold every acknowledged placement (I3, no lost placement).
//!
//! Also: the disk-use bound of the log store under many writes with snapshots + purging.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use phalanx_statestore::ledger::check_all;
use phalanx_statestore::{
    ClientConfig, GangPlacement, LedgerBatch, LedgerClient, LedgerCommand, PodPlacement,
    ReplicaConfig, ResourceVec, start_replica_with,
};
use tokio::sync::Mutex;

/// Spawns the replica binary and waits (bounded by the child's own startup) for its
/// `READY <addr>` line.
/// A replica process that is SIGKILLed when dropped, so a failing test leaks none.
struct Replica(Child);

impl Replica {
    /// SIGKILL (std's `Child::kill` on Unix) and reap.
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn_replica(dir: &std::path::Path, listen: &str) -> (Replica, String) {
    spawn_replica_args(dir, &["--id", "1", "--listen", listen, "--bootstrap"])
}

fn spawn_replica_args(dir: &std::path::Path, args: &[&str]) -> (Replica, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_phalanx-ledger-replica"))
        .args(args)
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn replica");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read READY line");
    let addr = line
        .trim()
        .strip_prefix("READY ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    (Replica(child), addr)
}

fn pod_gang(writer: usize, i: usize) -> GangPlacement {
    GangPlacement {
        gang: format!("ns/w{writer}-g{i}"),
        pods: vec![PodPlacement {
            pod: format!("ns/w{writer}-p{i}"),
            node: "big".to_string(),
            resources: ResourceVec::from_pairs([("cpu", 1)]),
        }],
    }
}

const WRITERS: usize = 4;
/// Acknowledged placements before the kill.
const ACKS_BEFORE_KILL: usize = 200;

async fn seed(client: &LedgerClient) {
    client
        .propose(&LedgerBatch {
            commands: vec![
                LedgerCommand::AssignShard {
                    shard: 1,
                    owner: 1,
                    epoch: 1,
                    proposer: None,
                },
                LedgerCommand::UpsertNode {
                    node: "big".into(),
                    allocatable: ResourceVec::from_pairs([("cpu", 1_000_000)]),
                    shard: 1,
                },
            ],
        })
        .await
        .expect("seed");
}

/// Runs `WRITERS` writers until `ACKS_BEFORE_KILL` placements are acknowledged, calls
/// `kill` at once (writers still in flight), and returns every acknowledged pod.
async fn write_then_kill(client: &Arc<LedgerClient>, kill: impl FnOnce()) -> BTreeSet<String> {
    let acked = Arc::new(Mutex::new(BTreeSet::<String>::new()));
    let count = Arc::new(AtomicUsize::new(0));
    let reached = Arc::new(tokio::sync::Notify::new());
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (client, acked, count, reached) = (
            Arc::clone(client),
            Arc::clone(&acked),
            Arc::clone(&count),
            Arc::clone(&reached),
        );
        writers.push(tokio::spawn(async move {
            // Bounded: stops at the first failure (the kill) or after 10x the target.
            for i in 0..ACKS_BEFORE_KILL * 10 {
                let Ok(o) = client.place_gangs(1, 1, vec![pod_gang(w, i)]).await else {
                    return;
                };
                assert!(o[0].is_accepted(), "{o:?}");
                acked.lock().await.insert(format!("ns/w{w}-p{i}"));
                if count.fetch_add(1, Ordering::SeqCst) + 1 == ACKS_BEFORE_KILL {
                    reached.notify_one();
                }
            }
        }));
    }
    tokio::time::timeout(Duration::from_secs(60), reached.notified())
        .await
        .expect("target acknowledgements reached");
    kill();
    let acked_at_kill: BTreeSet<String> = acked.lock().await.clone();
    for w in writers {
        w.abort();
    }
    assert!(acked_at_kill.len() >= ACKS_BEFORE_KILL);
    acked_at_kill
}

fn assert_all_present(acked: &BTreeSet<String>, state: &phalanx_statestore::LedgerState) {
    let missing: Vec<&String> = acked
        .iter()
        .filter(|p| !state.placements.contains_key(*p))
        .collect();
    assert!(
        missing.is_empty(),
        "lost acknowledged placements: {missing:?}"
    );
    assert!(check_all(state).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_replica_restarts_with_every_acknowledged_placement() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = spawn_replica(dir.path(), "127.0.0.1:0");
    let client = Arc::new(LedgerClient::with_config(
        [(1, addr.clone())],
        ClientConfig {
            max_attempts: 60,
            ..ClientConfig::default()
        },
    ));
    seed(&client).await;
    let acked_at_kill = write_then_kill(&client, || {
        child.kill();
    })
    .await;

    let (mut child, addr2) = spawn_replica(dir.path(), &addr);
    assert_eq!(addr, addr2);
    let read = client.read().await.expect("read after restart");
    assert_all_present(&acked_at_kill, &read.state.expect("state"));
    child.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replica_processes_all_sigkilled_restart_with_every_acknowledged_placement() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    // Replicas 2 and 3 first (to learn their ports), then 1 bootstraps all three.
    let (c2, a2) = spawn_replica_args(dirs[1].path(), &["--id", "2", "--listen", "127.0.0.1:0"]);
    let (c3, a3) = spawn_replica_args(dirs[2].path(), &["--id", "3", "--listen", "127.0.0.1:0"]);
    let peers = format!("2={a2},3={a3}");
    let (c1, a1) = spawn_replica_args(
        dirs[0].path(),
        &[
            "--id",
            "1",
            "--listen",
            "127.0.0.1:0",
            "--bootstrap",
            "--peers",
            &peers,
        ],
    );
    let addrs = [a1.clone(), a2.clone(), a3.clone()];
    let client = Arc::new(LedgerClient::with_config(
        [(1, a1), (2, a2), (3, a3)],
        ClientConfig {
            max_attempts: 80,
            ..ClientConfig::default()
        },
    ));
    seed(&client).await;
    let mut children = vec![c1, c2, c3];
    let acked = write_then_kill(&client, || {
        for c in &mut children {
            let _ = c.0.kill(); // SIGKILL all three before reaping any
        }
        for c in &mut children {
            c.kill();
        }
    })
    .await;
    let mut restarted = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let id = (i + 1).to_string();
        let (c, a) = spawn_replica_args(dir.path(), &["--id", &id, "--listen", &addrs[i]]);
        assert_eq!(a, addrs[i]);
        restarted.push(c);
    }
    let read = client
        .read()
        .await
        .expect("read after full-cluster restart");
    assert_all_present(&acked, &read.state.expect("state"));
    for c in &mut restarted {
        c.kill();
    }
}

/// Entries written in the disk-use test: each is a batch placing and releasing one pod.
/// Enough for the log file to pass `COMPACT_MIN_BYTES` (256 KiB) more than once, so that
/// compaction must run: in postcard (ADR 0003) such an entry is ~85 bytes, and the 1,500
/// entries sized for JSON records (127 KB in all) never reached it.
const DISK_TEST_ENTRIES: usize = 8000;
/// Upper bound on the Raft log file after those writes with purging.
const LOG_FILE_BOUND_BYTES: u64 = 512 * 1024;
/// Upper bound on the whole replica directory (log + sled).
const DIR_BOUND_BYTES: u64 = 16 * 1024 * 1024;

fn dir_bytes(path: &std::path::Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(path).expect("read dir").flatten() {
        let m = e.metadata().expect("metadata");
        total += if m.is_dir() {
            dir_bytes(&e.path())
        } else {
            m.len()
        };
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_disk_use_stays_bounded_when_entries_are_snapshotted_and_purged() {
    let dir = tempfile::tempdir().unwrap();
    let config = ReplicaConfig {
        snapshot_every_entries: 200,
        keep_entries_after_snapshot: 50,
        ..ReplicaConfig::default()
    };
    let addr = "127.0.0.1:0".parse().unwrap();
    let r = start_replica_with(1, dir.path(), addr, &config)
        .await
        .unwrap();
    r.initialize([(1, r.node())].into_iter().collect())
        .await
        .unwrap();
    r.wait_for(Duration::from_secs(10), "leader", |m| m.state.is_leader())
        .await
        .unwrap();
    r.propose(LedgerBatch {
        commands: vec![
            LedgerCommand::AssignShard {
                shard: 1,
                owner: 1,
                epoch: 1,
                proposer: None,
            },
            LedgerCommand::UpsertNode {
                node: "big".into(),
                allocatable: ResourceVec::from_pairs([("cpu", 1_000_000)]),
                shard: 1,
            },
        ],
    })
    .await
    .unwrap();
    for i in 0..DISK_TEST_ENTRIES {
        let g = pod_gang(0, i);
        let pod = g.pods[0].pod.clone();
        r.propose(LedgerBatch {
            commands: vec![
                LedgerCommand::PlaceGangs {
                    shard: 1,
                    epoch: 1,
                    gangs: vec![g],
                },
                LedgerCommand::Release {
                    shard: 1,
                    epoch: 1,
                    pods: vec![pod],
                    reason: phalanx_statestore::ledger::ReleaseReason::Finished,
                },
            ],
        })
        .await
        .unwrap();
    }
    let m = r
        .wait_for(Duration::from_secs(20), "log purged", |m| {
            m.purged
                .is_some_and(|p| p.index + 400 >= DISK_TEST_ENTRIES as u64)
        })
        .await
        .unwrap();
    let stats = r.log_stats().unwrap();
    let total = dir_bytes(dir.path());
    eprintln!(
        "disk use after {DISK_TEST_ENTRIES} entries: log file {} B ({} entries, {} compactions), dir {total} B, purged {:?}",
        stats.file_bytes, stats.entries, stats.compactions, m.purged
    );
    assert!(stats.entries <= 200 + 50 + 10, "{stats:?}");
    assert!(stats.compactions > 0, "{stats:?}");
    assert!(stats.file_bytes <= LOG_FILE_BOUND_BYTES, "{stats:?}");
    assert!(total <= DIR_BOUND_BYTES, "replica dir holds {total} bytes");
    assert_eq!(
        r.read_local(|s, _| s.released_total),
        DISK_TEST_ENTRIES as u64
    );
    r.shutdown().await.unwrap();
}
