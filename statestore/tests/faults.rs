//! 3 replicas over real gRPC with seeded message drops and delays on every link, writers
//! racing for the same GPUs, and the leader killed (with proposals in flight) and
//! restarted. After every round: I1, the usage index and no orphan reservation on every
//! running replica's applied state. At the end: no acknowledged placement lost, no
//! acknowledged release undone, and byte-identical replicas once the faults are cleared.
//! And a one-way partition: a leader whose every outgoing message is lost is replaced.
//! Waits are on conditions with bounded timeouts, never bare sleeps.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use phalanx_statestore::ledger::{ReleaseReason, check_all};
use phalanx_statestore::network::FaultStats;
use phalanx_statestore::network::faults::mix;
use phalanx_statestore::{
    ClientConfig, ClientError, GangDecision, GangPlacement, LedgerBatch, LedgerClient,
    LedgerCommand, LedgerResponse, LocalCluster, NetworkFaults, PodPlacement, Refusal,
    ReplicaConfig, ResourceVec, start_local_cluster_with,
};

/// The test seed: the fault streams (`LocalCluster::set_fault_seed`) and the writers'
/// choice of nodes both derive from it. `PHALANX_FAULT_SEED=<u64>` overrides it (to
/// explore other schedules; a failure message names the seed).
const SEED: u64 = 0x005E_ED0F_FA17;
const WRITERS: u64 = 3;
const ROUNDS: u64 = 20;
/// The leader is killed during this round (writers in flight) and restarted two rounds
/// later.
const KILL_ROUND: u64 = 8;
const RESTART_ROUND: u64 = KILL_ROUND + 2;
/// A follower is isolated during this round (writers in flight) and healed after it.
const ISOLATE_ROUND: u64 = 14;
const NODES: u64 = 6;
const WAIT: Duration = Duration::from_secs(20);

/// 20% of messages lost (requests, and replies to those delivered: 36% of exchanges
/// fail), 5-50 ms before every request; on every replica, so on every link both ways.
const FAULTS: NetworkFaults = NetworkFaults {
    drop_per_mille: 200,
    delay_ms: (5, 50),
};

fn test_config() -> ReplicaConfig {
    ReplicaConfig {
        // openraft gives an AppendEntries one heartbeat interval; leave room for the
        // injected delay (<= 50 ms) plus an fsync.
        heartbeat_ms: 100,
        election_timeout_min_ms: 600,
        election_timeout_max_ms: 1200,
        snapshot_every_entries: 40,
        keep_entries_after_snapshot: 10,
        ..ReplicaConfig::default()
    }
}

fn client_config() -> ClientConfig {
    ClientConfig {
        rpc_timeout: Duration::from_secs(3),
        ..ClientConfig::default()
    }
}

fn seed() -> u64 {
    std::env::var("PHALANX_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEED)
}

/// Shard 1 at epoch 1; nodes gpu-0..gpu-5 with 6 GPUs each (36 in all; every round the
/// writers ask for 24 on seeded nodes while last round's gangs are being released, so
/// some gangs are refused for capacity).
async fn seed_ledger(client: &LedgerClient) {
    let mut commands = vec![LedgerCommand::AssignShard {
        shard: 1,
        owner: 1,
        epoch: 1,
        proposer: None,
    }];
    for n in 0..NODES {
        commands.push(LedgerCommand::UpsertNode {
            node: format!("gpu-{n}"),
            allocatable: ResourceVec::from_pairs([("nvidia.com/gpu", 6)]),
            shard: 1,
        });
    }
    let c = client
        .propose(&LedgerBatch { commands })
        .await
        .expect("seed commits");
    assert!(c.responses.iter().all(|r| *r == LedgerResponse::Applied));
}

/// Gang `k` of writer `w` in round `r`: 2 pods x 2 GPUs on seeded nodes.
fn gang(seed: u64, w: u64, r: u64, k: u64) -> GangPlacement {
    let name = format!("ns/w{w}-r{r}-g{k}");
    let draw = mix(seed ^ (w << 40) ^ (r << 20) ^ k);
    GangPlacement {
        gang: name.clone(),
        pods: (0..2)
            .map(|p| PodPlacement {
                pod: format!("{name}-{p}"),
                node: format!("gpu-{}", (draw >> (8 * p)) % NODES),
                resources: ResourceVec::from_pairs([("nvidia.com/gpu", 2)]),
            })
            .collect(),
    }
}

fn pods_of(g: &GangPlacement) -> Vec<String> {
    g.pods.iter().map(|p| p.pod.clone()).collect()
}

/// What a writer knows about its gangs.
#[derive(Debug, Default)]
struct WriterLog {
    /// Accepted (acknowledged, or found by a linearizable read after an ambiguity).
    accepted: BTreeSet<String>,
    /// Refused in an acknowledged reply.
    refused: BTreeSet<String>,
    /// Refused for capacity in an acknowledged reply.
    refused_capacity: usize,
    /// Ambiguous proposal, not placed at the read that resolved it (may still commit).
    unresolved: BTreeSet<String>,
    /// Release acknowledged.
    released: BTreeSet<String>,
    /// Release ambiguous (may or may not have happened).
    release_unknown: BTreeSet<String>,
    /// Accepted last round, released at the start of the next.
    to_release: Vec<GangPlacement>,
    ambiguous: usize,
    gangs: BTreeMap<String, GangPlacement>,
}

fn ambiguous(e: &ClientError) -> bool {
    // NoLeader after only "unavailable" / "not leader" answers means not appended, but
    // resolving it by a read as well costs nothing.
    matches!(e, ClientError::Ambiguous(_) | ClientError::NoLeader { .. })
}

/// One round of one writer: release what it placed last round, then place 2 gangs.
async fn writer_round(
    client: Arc<LedgerClient>,
    seed: u64,
    w: u64,
    r: u64,
    mut log: WriterLog,
) -> WriterLog {
    if !log.to_release.is_empty() {
        let batch = std::mem::take(&mut log.to_release);
        let pods = batch.iter().flat_map(pods_of).collect();
        let names = batch.iter().map(|g| g.gang.clone());
        match client
            .propose_one(LedgerCommand::Release {
                shard: 1,
                epoch: 1,
                pods,
                reason: ReleaseReason::Finished,
            })
            .await
        {
            Ok(LedgerResponse::Pods { .. }) => log.released.extend(names),
            Ok(other) => panic!("writer {w} round {r}: release answered {other:?}"),
            Err(e) if ambiguous(&e) => {
                log.ambiguous += 1;
                log.release_unknown.extend(names);
            }
            Err(e) => panic!("writer {w} round {r}: release failed: {e}"),
        }
    }
    let gangs: Vec<GangPlacement> = (0..2).map(|k| gang(seed, w, r, k)).collect();
    for g in &gangs {
        log.gangs.insert(g.gang.clone(), g.clone());
    }
    match client.place_gangs(1, 1, gangs.clone()).await {
        Ok(outcomes) => {
            assert_eq!(outcomes.len(), gangs.len());
            for (g, o) in gangs.into_iter().zip(outcomes) {
                assert_eq!(g.gang, o.gang);
                match o.decision {
                    GangDecision::Accepted => {
                        log.accepted.insert(g.gang.clone());
                        log.to_release.push(g);
                    }
                    GangDecision::Refused(reason) => {
                        assert!(
                            !matches!(reason, Refusal::PodAlreadyPlaced { .. }),
                            "writer {w} round {r}: a fresh gang refused as already placed: {reason}"
                        );
                        if matches!(reason, Refusal::Insufficient { .. }) {
                            log.refused_capacity += 1;
                        }
                        log.refused.insert(g.gang);
                    }
                }
            }
        }
        Err(e) if ambiguous(&e) => {
            // As the scheduler does: a linearizable read tells whether it committed.
            log.ambiguous += 1;
            let read = client
                .read()
                .await
                .expect("linearizable read after ambiguity");
            let state = read.state.expect("state asked for");
            for g in gangs {
                let placed: Vec<bool> = g
                    .pods
                    .iter()
                    .map(|p| state.placements.contains_key(&p.pod))
                    .collect();
                assert!(
                    placed.iter().all(|b| *b) || placed.iter().all(|b| !*b),
                    "gang {} partially placed: {placed:?}",
                    g.gang
                );
                if placed[0] {
                    log.accepted.insert(g.gang.clone());
                    log.to_release.push(g);
                } else {
                    log.unresolved.insert(g.gang);
                }
            }
        }
        Err(e) => panic!("writer {w} round {r}: place failed: {e}"),
    }
    log
}

/// I1, the usage index and no orphan reservation on every running replica's applied
/// state (whatever prefix of the log it has applied).
fn check_invariants(cluster: &LocalCluster, step: &str) {
    for id in cluster.running_ids() {
        let r = cluster.replica(id).expect("running");
        let v = r.read_local(|s, _| check_all(s));
        assert!(v.is_empty(), "{step}: replica {id}: {v:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_under_seeded_drops_and_delays_with_the_leader_killed_never_double_book_or_lose_a_placement()
 {
    let started = Instant::now();
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start_local_cluster_with(3, dir.path(), test_config())
        .await
        .expect("cluster starts");
    seed_ledger(&cluster.client_with(client_config())).await;

    cluster.set_fault_seed(seed);
    cluster.set_faults_all(FAULTS).unwrap();
    for id in cluster.running_ids() {
        assert_eq!(cluster.replica(id).unwrap().faults(), Some(FAULTS));
    }

    let clients: Vec<Arc<LedgerClient>> = (0..WRITERS)
        .map(|_| Arc::new(cluster.client_with(client_config())))
        .collect();
    let mut logs: Vec<WriterLog> = (0..WRITERS).map(|_| WriterLog::default()).collect();
    let mut killed = None;
    let mut stats_of_killed = FaultStats::default();
    for r in 0..ROUNDS {
        if r == RESTART_ROUND {
            let id = killed.take().expect("a replica was killed");
            cluster.restart(id).await.expect("restart");
            assert_eq!(
                cluster.replica(id).unwrap().faults(),
                Some(FAULTS),
                "faults survive a restart"
            );
        }
        let tasks: Vec<_> = logs
            .drain(..)
            .zip(&clients)
            .enumerate()
            .map(|(w, (log, c))| tokio::spawn(writer_round(Arc::clone(c), seed, w as u64, r, log)))
            .collect();
        if r == KILL_ROUND {
            // Kill the leader with this round's proposals in flight.
            let leader = cluster.wait_for_leader(WAIT).await.expect("a leader");
            stats_of_killed = cluster.replica(leader).unwrap().fault_stats();
            cluster.kill(leader).await.expect("kill");
            killed = Some(leader);
        }
        let isolated = if r == ISOLATE_ROUND {
            let leader = cluster.wait_for_leader(WAIT).await.expect("a leader");
            let follower = cluster
                .running_ids()
                .into_iter()
                .find(|id| *id != leader)
                .expect("a follower");
            cluster.isolate(follower, true).unwrap();
            Some(follower)
        } else {
            None
        };
        for t in tasks {
            logs.push(
                tokio::time::timeout(Duration::from_secs(60), t)
                    .await
                    .expect("writer round is bounded")
                    .expect("writer task"),
            );
        }
        check_invariants(&cluster, &format!("seed {seed} round {r}"));
        if let Some(id) = isolated {
            cluster.isolate(id, false).unwrap();
        }
    }
    assert!(killed.is_none());

    let mut stats = stats_of_killed;
    for id in cluster.running_ids() {
        let s = cluster.replica(id).unwrap().fault_stats();
        stats.rpcs += s.rpcs;
        stats.dropped_requests += s.dropped_requests;
        stats.dropped_replies += s.dropped_replies;
    }
    assert!(
        stats.dropped_requests > 0 && stats.dropped_replies > 0,
        "faults were injected: {stats:?}"
    );

    // Heal: clear the faults, then every replica must converge to the same bytes.
    cluster.clear_faults();
    let client = cluster.client_with(client_config());
    let read = client.read().await.expect("linearizable read");
    cluster
        .wait_applied(read.applied_index, WAIT)
        .await
        .expect("replicas catch up");
    check_invariants(&cluster, "healed");
    let state = read.state.expect("state asked for");
    let bytes = state.to_canonical_bytes();
    for id in cluster.running_ids() {
        let mine = cluster
            .replica(id)
            .unwrap()
            .read_local(|s, _| s.to_canonical_bytes());
        assert!(
            mine == bytes,
            "replica {id} differs from the leader's state"
        );
    }

    // No acknowledged placement lost, no acknowledged release or refusal undone, nothing
    // placed that no writer proposed.
    let mut all_gangs = BTreeMap::new();
    let (mut accepted, mut refused_capacity, mut ambiguities, mut unresolved) = (0, 0, 0, 0);
    let mut committed_after_read = 0;
    for log in &logs {
        accepted += log.accepted.len();
        refused_capacity += log.refused_capacity;
        ambiguities += log.ambiguous;
        unresolved += log.unresolved.len();
        for (name, g) in &log.gangs {
            let present: Vec<bool> = pods_of(g)
                .iter()
                .map(|p| state.placements.contains_key(p))
                .collect();
            assert!(
                present.iter().all(|b| *b) || present.iter().all(|b| !*b),
                "gang {name} partially placed: {present:?}"
            );
            let present = present[0];
            if log.unresolved.contains(name) && present {
                // Not placed at the read that resolved the ambiguity, committed later by a
                // new leader: the scheduler must not treat "absent at the read" as "never".
                committed_after_read += 1;
            }
            if log.released.contains(name) || log.refused.contains(name) {
                assert!(!present, "gang {name} released or refused, yet placed");
            } else if log.accepted.contains(name) && !log.release_unknown.contains(name) {
                assert!(present, "acknowledged gang {name} lost");
            }
            for p in pods_of(g) {
                all_gangs.insert(p, name.clone());
            }
        }
    }
    for pod in state.placements.keys() {
        assert!(all_gangs.contains_key(pod), "{pod} placed, never proposed");
    }
    assert!(accepted > 0, "no gang was ever accepted");
    assert!(refused_capacity > 0, "no gang was refused for capacity");
    let term = cluster
        .replica(cluster.wait_for_leader(WAIT).await.expect("a leader"))
        .unwrap()
        .metrics()
        .current_term;
    eprintln!(
        "faults test: {ROUNDS} rounds x {WRITERS} writers, {accepted} gangs accepted, \
         {refused_capacity} refused for capacity, {ambiguities} ambiguous calls \
         ({unresolved} gangs not placed at the resolving read, {committed_after_read} of \
         them placed in the end), final applied index {}, term {term}, \
         {stats:?}, seed {seed}, {:?}",
        read.applied_index,
        started.elapsed()
    );
    cluster.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_outgoing_messages_are_all_lost_is_replaced_and_still_follows_one_way() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start_local_cluster_with(3, dir.path(), test_config())
        .await
        .expect("cluster starts");
    let client = cluster.client_with(client_config());
    seed_ledger(&client).await;
    let old = cluster.wait_for_leader(WAIT).await.expect("a leader");

    // Every message the leader sends is lost; what it is sent still arrives, and its
    // answers to those requests (gRPC replies) still go back: a one-way partition.
    cluster
        .set_faults(
            old,
            NetworkFaults {
                drop_per_mille: 1000,
                delay_ms: (0, 0),
            },
        )
        .unwrap();
    let r = cluster.replica(old).unwrap();
    r.wait_for(WAIT, "the old leader steps down", |m| !m.state.is_leader())
        .await
        .expect("a higher term reaches the old leader through the followers' requests");
    let new = cluster.wait_for_leader(WAIT).await.expect("a new leader");
    assert_ne!(new, old);

    // The new leader commits and replicates to the old one (its AppendEntries arrive,
    // the old leader's replies travel back on the same call).
    let outcomes = client
        .place_gangs(1, 1, vec![gang(SEED, 0, 0, 0)])
        .await
        .expect("writes go on without the old leader's messages");
    assert!(outcomes[0].is_accepted(), "{outcomes:?}");
    let read = client.read().await.expect("linearizable read");
    cluster
        .wait_applied(read.applied_index, WAIT)
        .await
        .expect("every replica applies, the faulty one included");
    check_invariants(&cluster, "one-way partition");
    let stats = cluster.replica(old).unwrap().fault_stats();
    assert!(stats.rpcs > 0 && stats.rpcs == stats.dropped_requests + stats.dropped_replies);

    cluster.clear_faults();
    assert_eq!(cluster.replica(old).unwrap().faults(), None);
    let state = read.state.expect("state asked for");
    for id in cluster.running_ids() {
        let bytes = cluster
            .replica(id)
            .unwrap()
            .read_local(|s, _| s.to_canonical_bytes());
        assert!(bytes == state.to_canonical_bytes(), "replica {id} differs");
    }
    cluster.shutdown().await.unwrap();
}
