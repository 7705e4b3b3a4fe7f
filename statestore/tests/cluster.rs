//! 3-replica in-process clusters over real gRPC on loopback: failover, isolation,
//! membership, snapshots. Invariants (I1, I2, index) are checked on every replica after
//! every step, and replicas are compared byte for byte once caught up.
//! Waits are on conditions with bounded timeouts, never bare sleeps.

use std::time::Duration;

use phalanx_statestore::ledger::{LedgerState, check_all};
use phalanx_statestore::{
    GangPlacement, LedgerClient, LedgerCommand, LedgerResponse, LocalCluster, PodPlacement,
    ReplicaConfig, ResourceVec, start_local_cluster_with,
};

const WAIT: Duration = Duration::from_secs(20);

fn test_config() -> ReplicaConfig {
    ReplicaConfig {
        heartbeat_ms: 50,
        election_timeout_min_ms: 300,
        election_timeout_max_ms: 600,
        snapshot_every_entries: 50,
        keep_entries_after_snapshot: 10,
        ..ReplicaConfig::default()
    }
}

async fn cluster(dir: &tempfile::TempDir) -> LocalCluster {
    start_local_cluster_with(3, dir.path(), test_config())
        .await
        .expect("cluster starts")
}

/// Shard 1 owned by replica 1 at epoch 1; nodes gpu-0..gpu-3 with 4 GPUs each.
async fn seed(client: &LedgerClient) {
    let mut cmds = vec![LedgerCommand::AssignShard {
        shard: 1,
        owner: 1,
        epoch: 1,
        proposer: None,
    }];
    for n in 0..4 {
        cmds.push(LedgerCommand::UpsertNode {
            node: format!("gpu-{n}"),
            allocatable: ResourceVec::from_pairs([("cpu", 32_000), ("nvidia.com/gpu", 4)]),
            shard: 1,
        });
    }
    let c = client
        .propose(&phalanx_statestore::LedgerBatch { commands: cmds })
        .await
        .expect("seed commits");
    assert!(
        c.responses.iter().all(|r| *r == LedgerResponse::Applied),
        "{c:?}"
    );
}

/// A 2-pod gang of 2 GPUs per pod on nodes `(i % 4)` and `(i + 1) % 4`.
fn gang(i: usize) -> GangPlacement {
    GangPlacement {
        gang: format!("ns/g{i}"),
        pods: (0..2)
            .map(|p| PodPlacement {
                pod: format!("ns/g{i}-{p}"),
                node: format!("gpu-{}", (i + p) % 4),
                resources: ResourceVec::from_pairs([("nvidia.com/gpu", 2)]),
            })
            .collect(),
    }
}

fn release(pods: Vec<String>) -> LedgerCommand {
    LedgerCommand::Release {
        shard: 1,
        epoch: 1,
        pods,
        reason: phalanx_statestore::ledger::ReleaseReason::Finished,
    }
}

/// I1, I2 and the usage index hold on every running replica.
fn check_invariants(cluster: &LocalCluster, step: &str) {
    for id in cluster.running_ids() {
        let r = cluster.replica(id).expect("running");
        let v = r.read_local(|s, _| check_all(s));
        assert!(v.is_empty(), "{step}: replica {id}: {v:?}");
    }
}

/// Waits until every running replica applied the leader's last index, then compares
/// their serialized states byte for byte.
async fn assert_replicas_identical(cluster: &LocalCluster, client: &LedgerClient) -> LedgerState {
    let read = client.read().await.expect("linearizable read");
    cluster
        .wait_applied(read.applied_index, WAIT)
        .await
        .expect("replicas catch up");
    let state = read.state.expect("state asked for");
    for id in cluster.running_ids() {
        let r = cluster.replica(id).expect("running");
        // The state can only move forward from `read`; with no writes in flight it is equal.
        let fp = r.read_local(|s, _| s.fingerprint());
        assert_eq!(fp, state.fingerprint(), "replica {id} differs");
        // The same over gRPC, from that replica alone (what the chaos suite compares).
        let own = client
            .read_local_fingerprint(id)
            .await
            .expect("a local read");
        assert_eq!(own.fingerprint, fp, "replica {id}'s local read");
        assert!(
            own.applied_index >= read.applied_index,
            "replica {id}: {own:?}"
        );
        assert!(own.state.is_none());
    }
    state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_accept_gangs_refuse_overbooking_and_agree_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster(&dir).await;
    let client = cluster.client();
    seed(&client).await;
    // 4 nodes x 4 GPUs = 16 GPUs; each gang takes 4: gangs 0..4 fit, gang 4 cannot.
    let outcomes = client
        .place_gangs(1, 1, (0..5).map(gang).collect())
        .await
        .unwrap();
    let accepted: Vec<bool> = outcomes.iter().map(|o| o.is_accepted()).collect();
    assert_eq!(accepted, vec![true, true, true, true, false]);
    check_invariants(&cluster, "after placing");
    let state = assert_replicas_identical(&cluster, &client).await;
    assert_eq!(state.placements.len(), 8);
    // A deposed owner (stale epoch) is fenced out.
    client
        .propose_one(LedgerCommand::AssignShard {
            shard: 1,
            owner: 2,
            epoch: 2,
            proposer: None,
        })
        .await
        .unwrap();
    let fenced = client.place_gangs(1, 1, vec![gang(9)]).await.unwrap();
    assert!(!fenced[0].is_accepted());
    check_invariants(&cluster, "after fencing");
    cluster.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_and_restarted_loses_no_committed_placement() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = cluster(&dir).await;
    let client = cluster.client();
    seed(&client).await;
    let o = client
        .place_gangs(1, 1, vec![gang(0), gang(1)])
        .await
        .unwrap();
    assert!(o.iter().all(|g| g.is_accepted()));
    check_invariants(&cluster, "before kill");

    let old = cluster.wait_for_leader(WAIT).await.unwrap();
    cluster.kill(old).await.unwrap();
    let new = cluster.wait_for_leader(WAIT).await.unwrap();
    assert_ne!(old, new);
    check_invariants(&cluster, "after kill");

    // The new leader serves writes: release gang 0, place gang 2.
    client
        .propose_one(release(vec!["ns/g0-0".into(), "ns/g0-1".into()]))
        .await
        .unwrap();
    let o = client.place_gangs(1, 1, vec![gang(2)]).await.unwrap();
    assert!(o[0].is_accepted());
    check_invariants(&cluster, "writes on new leader");

    cluster.restart(old).await.unwrap();
    let state = assert_replicas_identical(&cluster, &client).await;
    check_invariants(&cluster, "after restart");
    let mut pods: Vec<&str> = state.placements.keys().map(String::as_str).collect();
    pods.sort_unstable();
    assert_eq!(pods, vec!["ns/g1-0", "ns/g1-1", "ns/g2-0", "ns/g2-1"]);
    cluster.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolated_leader_serves_no_stale_read_and_catches_up_after_healing() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster(&dir).await;
    let client = cluster.client();
    seed(&client).await;
    let old = cluster.wait_for_leader(WAIT).await.unwrap();
    cluster.isolate(old, true).unwrap();

    // The old leader cannot confirm its leadership with a quorum: no read from it.
    let stale = tokio::time::timeout(
        WAIT,
        cluster
            .replica(old)
            .unwrap()
            .read_linearizable(|s, _| s.placements.len()),
    )
    .await
    .expect("read_linearizable returns within the bound");
    assert!(stale.is_err(), "isolated leader must not serve a read");

    // The majority elects a leader and keeps committing.
    let o = client.place_gangs(1, 1, vec![gang(0)]).await.unwrap();
    assert!(o[0].is_accepted());
    check_invariants(&cluster, "during isolation");
    let during = client.read_fingerprint().await.unwrap();

    cluster.isolate(old, false).unwrap();
    let state = assert_replicas_identical(&cluster, &client).await;
    assert!(state.placements.contains_key("ns/g0-0"));
    assert!(client.read_fingerprint().await.unwrap().applied_index >= during.applied_index);
    check_invariants(&cluster, "after healing");
    cluster.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_added_and_removed_while_the_ledger_keeps_committing() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = cluster(&dir).await;
    let client = cluster.client();
    seed(&client).await;
    let added = cluster.add_replica().await.unwrap();
    assert_eq!(added, 4);
    let leader = cluster.wait_for_leader(WAIT).await.unwrap();
    assert_eq!(cluster.voters(leader).unwrap().len(), 4);
    // Remove a follower (not the leader).
    let victim = cluster
        .running_ids()
        .into_iter()
        .find(|id| *id != leader && *id != added)
        .unwrap();
    cluster.remove_replica(victim).await.unwrap();
    let leader = cluster.wait_for_leader(WAIT).await.unwrap();
    assert_eq!(cluster.voters(leader).unwrap().len(), 3);
    // A fresh client over the current members.
    let client2 = cluster.client();
    let o = client2.place_gangs(1, 1, vec![gang(0)]).await.unwrap();
    assert!(o[0].is_accepted());
    let state = assert_replicas_identical(&cluster, &client2).await;
    assert_eq!(state.placements.len(), 2);
    check_invariants(&cluster, "after membership changes");
    cluster.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lagging_replica_catches_up_from_a_snapshot_after_the_log_was_purged() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = cluster(&dir).await;
    let client = cluster.client();
    seed(&client).await;
    let leader = cluster.wait_for_leader(WAIT).await.unwrap();
    let lagging = cluster
        .running_ids()
        .into_iter()
        .find(|id| *id != leader)
        .unwrap();
    cluster.kill(lagging).await.unwrap();
    // 150 entries: with a snapshot every 50 and 10 kept, the log the lagging replica
    // needs is purged on the others.
    for i in 0..75 {
        let o = client.place_gangs(1, 1, vec![gang(i)]).await.unwrap();
        assert!(o[0].is_accepted(), "gang {i}: {o:?}");
        client
            .propose_one(release(vec![format!("ns/g{i}-0"), format!("ns/g{i}-1")]))
            .await
            .unwrap();
    }
    let leader_replica = cluster.replica(leader).unwrap();
    let m = leader_replica
        .wait_for(WAIT, "leader purged its log", |m| {
            m.purged.is_some_and(|p| p.index > 20)
        })
        .await
        .unwrap();
    assert!(m.snapshot.is_some());
    cluster.restart(lagging).await.unwrap();
    let state = assert_replicas_identical(&cluster, &client).await;
    assert_eq!(state.released_total, 150);
    let lag = cluster.replica(lagging).unwrap().metrics();
    assert!(
        lag.snapshot.is_some(),
        "the lagging replica installed a snapshot"
    );
    check_invariants(&cluster, "after catch-up");

    // Restart from snapshot + log tail: every replica restarts and reproduces the state.
    for id in cluster.running_ids() {
        cluster.kill(id).await.unwrap();
    }
    for id in 1..=3 {
        cluster.restart(id).await.unwrap();
    }
    cluster.wait_for_leader(WAIT).await.unwrap();
    let after = assert_replicas_identical(&cluster, &client).await;
    assert_eq!(after.fingerprint(), state.fingerprint());
    cluster.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservation_of_a_transaction_past_its_deadline_is_released_by_the_leader() {
    use phalanx_statestore::ledger::TxnDecision;
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster(&dir).await;
    let client = cluster.client();
    seed(&client).await;
    // Begin + reserve in one entry, with a deadline already past on the system clock:
    // the coordinator "died" before deciding.
    let committed = client
        .propose(&phalanx_statestore::LedgerBatch {
            commands: vec![
                LedgerCommand::TxnBegin {
                    txn: "t-dead".into(),
                    shard: 1,
                    epoch: 1,
                    participants: vec![1],
                    deadline_ms: (phalanx_statestore::expiry::system_clock())(),
                },
                LedgerCommand::TxnReserve {
                    txn: "t-dead".into(),
                    shard: 1,
                    epoch: 1,
                    gang: gang(0),
                },
            ],
        })
        .await
        .unwrap();
    assert_eq!(committed.responses[0], LedgerResponse::Applied);
    let leader = cluster.wait_for_leader(WAIT).await.unwrap();
    let r = cluster.replica(leader).unwrap();
    let mut seen = committed.log_index;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (decision, placed) = r.read_local(|s, _| {
            (
                s.txns.get("t-dead").and_then(|t| t.decision),
                s.placements.len(),
            )
        });
        if decision == Some(TxnDecision::Abort) {
            assert_eq!(placed, 0, "an aborted transaction leaves no reservation");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "txn was not expired"
        );
        let m = r
            .wait_for(WAIT, "next entry applied", |m| {
                m.last_applied.is_some_and(|l| l.index > seen)
            })
            .await
            .unwrap();
        seen = m.last_applied.map_or(seen, |l| l.index);
    }
    check_invariants(&cluster, "after expiry");
    cluster.shutdown().await.unwrap();
}

/// Regression: a replica stopped in process kept serving, on connections it had accepted
/// before the stop, requests that its stopped Raft answered with an internal error; the
/// client had to call those proposals ambiguous although none was appended. A proposal
/// sent to a stopped replica must be refused like one sent to a dead process (`NoLeader`
/// once the client's attempts are spent), never `Ambiguous`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_replica_refuses_proposals_on_connections_opened_before_the_stop() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster(&dir).await;
    for round in 0..3u64 {
        let leader = c.wait_for_leader(WAIT).await.unwrap();
        let addr = c.addrs()[&leader].to_string();
        // A client that knows only the leader: every attempt goes over one channel.
        let only_leader = LedgerClient::with_config(
            [(leader, addr)],
            phalanx_statestore::ClientConfig {
                max_attempts: 3,
                ..Default::default()
            },
        );
        only_leader
            .propose_one(LedgerCommand::ExpireAt { now_ms: round })
            .await
            .expect("the live leader accepts");
        c.kill(leader).await.unwrap();
        match only_leader
            .propose_one(LedgerCommand::ExpireAt {
                now_ms: 100 + round,
            })
            .await
        {
            Err(phalanx_statestore::ClientError::NoLeader { .. }) => {}
            other => panic!("round {round}: stopped replica {leader} answered {other:?}"),
        }
        c.restart(leader).await.unwrap();
    }
    c.shutdown().await.unwrap();
}

/// A proposal over the batch limits, sent straight to the leader's gRPC service as a
/// hostile client would (the `LedgerClient` refuses to send one): refused as a whole with
/// INVALID_ARGUMENT naming the size and the limit, and nothing of it is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proposal_over_the_batch_limits_is_invalid_argument_naming_size_and_limit() {
    use phalanx_proto::ledger::ProposeRequest;
    use phalanx_proto::ledger::ledger_service_client::LedgerServiceClient;
    use phalanx_statestore::network::MAX_PROPOSAL_BYTES;
    use phalanx_statestore::network::wire::ledger_batch;
    use phalanx_statestore::{LedgerBatch, MAX_COMMANDS_PER_BATCH};

    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = start_local_cluster_with(1, dir.path(), test_config())
        .await
        .expect("cluster starts");
    let client = cluster.client();
    seed(&client).await;
    let leader = cluster.wait_for_leader(WAIT).await.expect("a leader");
    let addr = cluster.addrs()[&leader];
    let mut raw = LedgerServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connects");
    let fingerprint = || async {
        let read = client.read().await.expect("linearizable read");
        read.state.expect("state asked for").fingerprint()
    };
    let before = fingerprint().await;

    let commands = MAX_COMMANDS_PER_BATCH + 1;
    let batch = LedgerBatch {
        commands: (0..commands)
            .map(|i| release(vec![format!("ns/p{i}")]))
            .collect(),
    };
    let request = ledger_batch::to_wire(&batch).expect("encodes");
    let status = raw.propose(request).await.expect_err("refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    let expected = format!("{commands} commands in one batch, limit {MAX_COMMANDS_PER_BATCH}");
    assert_eq!(status.message(), expected);

    let oversized = ProposeRequest {
        batch: vec![0; MAX_PROPOSAL_BYTES + 1],
        ..ProposeRequest::default()
    };
    let status = raw.propose(oversized).await.expect_err("refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    let expected = format!(
        "proposal of {} bytes, limit {MAX_PROPOSAL_BYTES}",
        MAX_PROPOSAL_BYTES + 1
    );
    assert_eq!(status.message(), expected);
    assert_eq!(before, fingerprint().await, "nothing of either was applied");

    // At the limit the batch is taken (the releases name no placed pod: each is refused
    // in the reply, not the batch as a whole).
    let at_limit = LedgerBatch {
        commands: batch.commands[..MAX_COMMANDS_PER_BATCH].to_vec(),
    };
    let reply = raw
        .propose(ledger_batch::to_wire(&at_limit).expect("encodes"))
        .await;
    assert!(reply.is_ok(), "{reply:?}");
}

/// Polls `cond` every 20 ms for up to `WAIT`.
async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {WAIT:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_follower_refuses_the_leaders_connections_until_it_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = cluster(&dir).await;
    let leader = cluster.wait_for_leader(WAIT).await.unwrap();
    let mut followers = cluster.running_ids();
    followers.retain(|id| *id != leader);
    let (victim, other) = (followers[0], followers[1]);
    let refusing = |c: &LocalCluster| c.replica(leader).unwrap().peers_refusing();
    assert!(refusing(&cluster).is_empty(), "{:?}", refusing(&cluster));

    cluster.kill(victim).await.unwrap();
    eventually("the leader sees the killed follower refuse", || {
        refusing(&cluster).contains(&victim)
    })
    .await;
    assert!(
        !refusing(&cluster).contains(&other),
        "a live follower is never refusing"
    );

    cluster.restart(victim).await.unwrap();
    eventually("the restarted follower answers the leader again", || {
        refusing(&cluster).is_empty()
    })
    .await;
    cluster.shutdown().await.unwrap();
}
