//! Reads that scale, through three real replicas: a ledger of 100,000 placements (its state
//! well over the 16 MiB message limit, so the one-message read cannot carry it) is read in
//! pages by `LedgerMirror`, then each later read transfers only what changed; after a
//! snapshot and a restart of every replica the journal no longer reaches back, and the
//! mirror reads in full again, ending equal to the ledger.
//!
//! Measurements are printed (`--nocapture`): bytes and time of the full and the
//! incremental reads.

use std::time::{Duration, Instant};

use phalanx_statestore::ledger::{LedgerState, ReleaseReason};
use phalanx_statestore::network::MAX_MESSAGE_BYTES;
use phalanx_statestore::{
    ClientConfig, GangPlacement, LedgerBatch, LedgerClient, LedgerCommand, LedgerMirror,
    LocalCluster, PodPlacement, ReplicaConfig, ResourceVec, start_local_cluster_with,
};

const WAIT: Duration = Duration::from_secs(60);
const NODES: usize = 1_000;
const PODS: usize = 100_000;
const PODS_PER_GANG: usize = 1_000;
/// 5 gangs of 1,000 pods is about 1 MiB of proposal (the limit is 2 MiB).
const GANGS_PER_PROPOSAL: usize = 5;

fn config() -> ReplicaConfig {
    // openraft gives an AppendEntries about one heartbeat interval; an entry of a
    // megabyte takes a while to encode and decode in a debug build on a busy machine.
    // Elections are kept out of the way too.
    ReplicaConfig {
        heartbeat_ms: 1_000,
        election_timeout_min_ms: 5_000,
        election_timeout_max_ms: 10_000,
        ..ReplicaConfig::default()
    }
}

fn node(n: usize) -> String {
    format!("rack-{:02}-node-{n:04}", n % 40)
}

fn pod(i: usize) -> String {
    format!(
        "team-{:02}/training-job-{:05}-worker-{i:06}",
        i % 50,
        i / PODS_PER_GANG
    )
}

async fn load(client: &LedgerClient) {
    let mut seed = vec![LedgerCommand::AssignShard {
        shard: 0,
        owner: 1,
        epoch: 1,
        proposer: None,
    }];
    seed.extend((0..NODES).map(|n| LedgerCommand::UpsertNode {
        node: node(n),
        allocatable: ResourceVec::from_pairs([("cpu", 1_000_000), ("memory", 1 << 40)]),
        shard: 0,
    }));
    for batch in seed.chunks(200) {
        client
            .propose(&LedgerBatch {
                commands: batch.to_vec(),
            })
            .await
            .expect("nodes commit");
    }
    let gangs: Vec<GangPlacement> = (0..PODS / PODS_PER_GANG)
        .map(|g| GangPlacement {
            gang: format!("team-{:02}/training-job-{g:05}", g % 50),
            pods: (g * PODS_PER_GANG..(g + 1) * PODS_PER_GANG)
                .map(|i| PodPlacement {
                    pod: pod(i),
                    node: node(i % NODES),
                    resources: ResourceVec::from_pairs([("cpu", 1_000), ("memory", 1 << 30)]),
                })
                .collect(),
        })
        .collect();
    for (n, chunk) in gangs.chunks(GANGS_PER_PROPOSAL).enumerate() {
        let started = Instant::now();
        let outcomes = client
            .place_gangs(0, 1, chunk.to_vec())
            .await
            .expect("gangs commit");
        assert!(outcomes.iter().all(|o| o.is_accepted()), "{outcomes:?}");
        eprintln!("proposal {n} committed in {:?}", started.elapsed());
    }
}

/// The leader's applied state once it has applied `index` (what the mirror must equal).
async fn leader_state(cluster: &LocalCluster, index: u64) -> LedgerState {
    cluster.wait_applied(index, WAIT).await.expect("applied");
    let leader = cluster.wait_for_leader(WAIT).await.expect("a leader");
    cluster
        .replica(leader)
        .expect("running")
        .read_local(|s, _| s.clone())
}

fn mark_bound(pods: impl Iterator<Item = usize>) -> LedgerCommand {
    LedgerCommand::MarkBound {
        shard: 0,
        epoch: 1,
        pods: pods.map(pod).collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_of_100000_placements_is_read_in_pages_then_only_its_changes() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start_local_cluster_with(3, dir.path(), config())
        .await
        .expect("cluster starts");
    // A debug build takes seconds to append and apply an entry of megabytes.
    let client = cluster.client_with(ClientConfig {
        rpc_timeout: WAIT,
        ..ClientConfig::default()
    });
    let started = Instant::now();
    load(&client).await;
    eprintln!("loaded {PODS} placements in {:?}", started.elapsed());

    let mut mirror = LedgerMirror::new();
    let started = Instant::now();
    let full = mirror.refresh(&client).await.expect("full read");
    let full_took = started.elapsed();
    let state = leader_state(&cluster, full.index).await;
    let state_bytes = state.to_canonical_bytes().len();
    eprintln!(
        "full read: {} bytes in {} pages, {} entries, {full_took:?} (state {state_bytes} bytes)",
        full.bytes, full.pages, full.entries
    );
    assert!(state_bytes > MAX_MESSAGE_BYTES, "{state_bytes} bytes");
    // The one-message read cannot carry it (what serve's reconcile used to do).
    let one_message = cluster.client_with(ClientConfig {
        max_attempts: 3,
        rpc_timeout: WAIT,
        ..ClientConfig::default()
    });
    let too_large = one_message
        .read()
        .await
        .expect_err("over the message limit");
    eprintln!("the one-message read: {too_large}");
    assert!(full.full && full.pages > 1, "{full:?}");
    assert_eq!(state.placements.len(), PODS);
    assert_eq!(mirror.state(), &state);

    // N changes transfer about N entries, not the state.
    const N: usize = 100;
    client
        .propose_one(mark_bound(0..N))
        .await
        .expect("marks bound");
    let started = Instant::now();
    let delta = mirror.refresh(&client).await.expect("incremental read");
    let delta_took = started.elapsed();
    eprintln!(
        "incremental read after {N} changes: {} bytes in {} pages, {} entries, {delta_took:?}",
        delta.bytes, delta.pages, delta.entries
    );
    assert!(!delta.full, "{delta:?}");
    assert_eq!((delta.pages, delta.entries), (1, N), "{delta:?}");
    assert!(delta.bytes < N * 400, "{delta:?}");
    assert!(delta.bytes * 1000 < full.bytes, "{delta:?} vs {full:?}");
    assert_eq!(mirror.state(), &leader_state(&cluster, delta.index).await);

    // Releases remove keys: deletions, usage and the released count come across too.
    client
        .propose_one(LedgerCommand::Release {
            shard: 0,
            epoch: 1,
            pods: (N..2 * N).map(pod).collect(),
            reason: ReleaseReason::Finished,
        })
        .await
        .expect("releases");
    let delta = mirror.refresh(&client).await.expect("incremental read");
    // 100 placements gone, the usage of the 100 nodes they were on, the released count.
    assert_eq!(delta.entries, 2 * N + 1, "{delta:?}");
    let now = leader_state(&cluster, delta.index).await;
    assert_eq!(now.placements.len(), PODS - N);
    assert_eq!(mirror.state(), &now);

    // A change, then a snapshot on every replica and a restart of all of them: journals
    // restart at the snapshot's index, after the mirror's, so the mirror reads in full.
    let changed = client
        .propose(&LedgerBatch::one(mark_bound(2 * N..3 * N)))
        .await
        .expect("marks bound");
    for id in cluster.running_ids() {
        let r = cluster.replica(id).expect("running");
        r.raft()
            .trigger()
            .snapshot()
            .await
            .expect("snapshot triggered");
        r.wait_for(WAIT, "snapshot at the last change", |m| {
            m.snapshot.is_some_and(|s| s.index >= changed.log_index)
        })
        .await
        .expect("snapshot built");
    }
    for id in cluster.running_ids() {
        cluster.kill(id).await.expect("killed");
    }
    for id in 1..=3 {
        cluster.restart(id).await.expect("restarted");
    }
    cluster.wait_for_leader(WAIT).await.expect("a leader again");
    let resync = mirror.refresh(&client).await.expect("read after restart");
    eprintln!(
        "after snapshot + restart: full {} ({} bytes)",
        resync.full, resync.bytes
    );
    assert!(resync.full, "{resync:?}");
    assert_eq!(mirror.state(), &leader_state(&cluster, resync.index).await);
    cluster.shutdown().await.unwrap();
}

/// Small pages while a writer moves placements between nodes: every pass mixes indexes,
/// and the mirror must still settle on one index. A torn mix would show as a usage index
/// that disagrees with the placements (`check_all`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paged_read_during_writes_settles_on_one_index() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let dir = tempfile::tempdir().unwrap();
    let cluster = start_local_cluster_with(
        3,
        dir.path(),
        ReplicaConfig {
            heartbeat_ms: 50,
            election_timeout_min_ms: 300,
            election_timeout_max_ms: 600,
            ..ReplicaConfig::default()
        },
    )
    .await
    .expect("cluster starts");
    let client = Arc::new(cluster.client());
    let mut seed = vec![LedgerCommand::AssignShard {
        shard: 0,
        owner: 1,
        epoch: 1,
        proposer: None,
    }];
    seed.extend((0..20).map(|n| LedgerCommand::UpsertNode {
        node: node(n),
        allocatable: ResourceVec::from_pairs([("cpu", 1_000_000)]),
        shard: 0,
    }));
    client
        .propose(&LedgerBatch { commands: seed })
        .await
        .expect("seed commits");
    let one = |i: usize, n: usize| GangPlacement {
        gang: pod(i),
        pods: vec![PodPlacement {
            pod: pod(i),
            node: node(n % 20),
            resources: ResourceVec::from_pairs([("cpu", 1 + i as i64)]),
        }],
    };
    client
        .place_gangs(0, 1, (0..1_000).map(|i| one(i, i)).collect())
        .await
        .expect("placed");

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (client, stop) = (client.clone(), stop.clone());
        tokio::spawn(async move {
            let mut moves = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let i = moves % 1_000;
                let release = LedgerCommand::Release {
                    shard: 0,
                    epoch: 1,
                    pods: vec![pod(i)],
                    reason: ReleaseReason::Evicted,
                };
                let place = LedgerCommand::PlaceGangs {
                    shard: 0,
                    epoch: 1,
                    gangs: vec![one(i, i + moves / 1_000 + 1)],
                };
                client
                    .propose(&LedgerBatch {
                        commands: vec![release, place],
                    })
                    .await
                    .expect("moved");
                moves += 1;
            }
            moves
        })
    };
    let mut mirror = LedgerMirror::with_page_bytes(4_096);
    let during = mirror.refresh(&client).await.expect("settles");
    stop.store(true, Ordering::Relaxed);
    let moves = writer.await.expect("writer ends");
    eprintln!("paged read during {moves} moves: {during:?}");
    assert!(during.pages > 10, "{during:?}");
    let torn = phalanx_statestore::ledger::check_all(mirror.state());
    assert!(torn.is_empty(), "{torn:?}");
    let after = mirror.refresh(&client).await.expect("catches up");
    assert_eq!(mirror.state(), &leader_state(&cluster, after.index).await);
    cluster.shutdown().await.unwrap();
}
