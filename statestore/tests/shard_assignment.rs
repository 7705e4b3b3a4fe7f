//! `AssignShard` through real replicas: the entry's leader id (from its log id) judges the
//! proposer, so a deposed leader cannot take a shard back; a retry after a lost answer
//! never orphans the shard; the owner must be a member.
//! Waits are on conditions with bounded timeouts, never bare sleeps.

use std::time::Duration;

use phalanx_statestore::ledger::{LeaderTerm, ShardAssignment};
use phalanx_statestore::{
    LedgerClient, LedgerCommand, LedgerResponse, LocalCluster, Refusal, ReplicaConfig, ResourceVec,
    start_local_cluster_with,
};

const WAIT: Duration = Duration::from_secs(20);

fn test_config() -> ReplicaConfig {
    ReplicaConfig {
        heartbeat_ms: 50,
        election_timeout_min_ms: 300,
        election_timeout_max_ms: 600,
        ..ReplicaConfig::default()
    }
}

fn assign(owner: u64, epoch: u64, proposer: Option<LeaderTerm>) -> LedgerCommand {
    LedgerCommand::AssignShard {
        shard: 1,
        owner,
        epoch,
        proposer,
    }
}

/// Shard 1 owned by replica 1 at epoch 1, and one node in its pool.
async fn seeded() -> (tempfile::TempDir, LocalCluster, LedgerClient) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let cluster = start_local_cluster_with(3, dir.path(), test_config())
        .await
        .expect("cluster starts");
    let client = cluster.client();
    let seed = phalanx_statestore::LedgerBatch {
        commands: vec![
            assign(1, 1, None),
            LedgerCommand::UpsertNode {
                node: "gpu-0".into(),
                allocatable: ResourceVec::from_pairs([("nvidia.com/gpu", 4)]),
                shard: 1,
            },
        ],
    };
    let c = client.propose(&seed).await.expect("seed commits");
    assert!(
        c.responses.iter().all(|r| *r == LedgerResponse::Applied),
        "{c:?}"
    );
    (dir, cluster, client)
}

/// The leader and the term it leads in, as its own metrics say (what serve reads).
async fn leading(cluster: &LocalCluster) -> LeaderTerm {
    let id = cluster.wait_for_leader(WAIT).await.expect("a leader");
    let term = cluster.replica(id).expect("running").metrics().current_term;
    LeaderTerm { replica: id, term }
}

async fn shard_1(client: &LedgerClient) -> Option<ShardAssignment> {
    let state = client.read().await.expect("reads").state.expect("state");
    state.shards.get(&1).copied()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leaders_assign_shard_is_refused_by_the_replicas() {
    let (_dir, cluster, client) = seeded().await;
    let old = leading(&cluster).await;
    cluster.isolate(old.replica, true).unwrap();
    let other = cluster
        .running_ids()
        .into_iter()
        .find(|id| *id != old.replica)
        .expect("another replica");
    cluster
        .replica(other)
        .expect("running")
        .wait_for(WAIT, "a leader other than the isolated one", |m| {
            m.current_leader.is_some_and(|l| l != old.replica)
        })
        .await
        .unwrap();
    // The old leader still believes it leads in its term; its proposal reaches the new
    // leader (the old one answers Unavailable), which appends it in its own term.
    let r = client
        .propose_one(assign(old.replica, 2, Some(old)))
        .await
        .unwrap();
    assert!(
        matches!(&r, LedgerResponse::Refused(Refusal::DeposedLeader { proposer, appended_by, .. })
            if *proposer == old && appended_by.replica != old.replica && appended_by.term > old.term),
        "{r:?}"
    );
    // A replica that is not a member cannot own a shard.
    let r = client.propose_one(assign(99, 2, None)).await.unwrap();
    assert!(
        matches!(
            &r,
            LedgerResponse::Refused(Refusal::UnknownOwner { owner: 99, .. })
        ),
        "{r:?}"
    );
    assert_eq!(
        shard_1(&client).await,
        Some(ShardAssignment { owner: 1, epoch: 1 })
    );
    cluster.isolate(old.replica, false).unwrap();
    cluster.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_after_its_assign_shard_committed_leaves_the_shard_owned() {
    let (_dir, mut cluster, client) = seeded().await;
    let first = leading(&cluster).await;
    // Committed; its proposer is then killed before acting on the answer.
    let r = client
        .propose_one(assign(first.replica, 2, Some(first)))
        .await
        .unwrap();
    assert_eq!(r, LedgerResponse::Applied);
    cluster.kill(first.replica).await.unwrap();
    let second = leading(&cluster).await;
    assert_ne!(second.replica, first.replica);
    // The new leader retries the assignment it inherited: a success, the shard stays owned.
    let r = client
        .propose_one(assign(first.replica, 2, Some(second)))
        .await
        .unwrap();
    assert_eq!(r, LedgerResponse::Applied);
    let owned_by_first = ShardAssignment {
        owner: first.replica,
        epoch: 2,
    };
    assert_eq!(shard_1(&client).await, Some(owned_by_first));
    // It takes the shard over.
    let r = client
        .propose_one(assign(second.replica, 3, Some(second)))
        .await
        .unwrap();
    assert_eq!(r, LedgerResponse::Applied);
    // The first leader comes back and re-sends its old proposal: refused, the shard stays
    // with the new owner.
    cluster.restart(first.replica).await.unwrap();
    let r = client
        .propose_one(assign(first.replica, 2, Some(first)))
        .await
        .unwrap();
    assert!(r.refusal().is_some(), "{r:?}");
    assert_eq!(
        shard_1(&client).await,
        Some(ShardAssignment {
            owner: second.replica,
            epoch: 3
        })
    );
    cluster.shutdown().await.unwrap();
}
