//! A replica whose Raft log is damaged before its tail refuses to start, naming the file
//! and the offset (nothing is cut); a log whose last record was torn starts with every
//! earlier record.

use std::process::{Command, Stdio};
use std::time::Duration;

use phalanx_statestore::log_store::LOG_FILE_NAME;
use phalanx_statestore::{
    GangPlacement, LedgerBatch, LedgerCommand, PodPlacement, ReplicaConfig, ResourceVec,
    start_replica_with,
};

const PLACEMENTS: usize = 150;

fn place(i: usize) -> LedgerBatch {
    LedgerBatch::one(LedgerCommand::PlaceGangs {
        shard: 1,
        epoch: 1,
        gangs: vec![GangPlacement {
            gang: format!("ns/g{i}"),
            pods: vec![PodPlacement {
                pod: format!("ns/p{i}"),
                node: "big".into(),
                resources: ResourceVec::from_pairs([("cpu", 1)]),
            }],
        }],
    })
}

/// A one-replica ledger that committed `PLACEMENTS` placements, one entry each.
async fn write_a_log(dir: &std::path::Path) {
    let addr = "127.0.0.1:0".parse().expect("an address");
    let r = start_replica_with(1, dir, addr, &ReplicaConfig::default())
        .await
        .expect("replica starts");
    r.initialize([(1, r.node())].into_iter().collect())
        .await
        .expect("initialized");
    r.wait_for(Duration::from_secs(10), "leader", |m| m.state.is_leader())
        .await
        .expect("leader");
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
    .expect("seeded");
    for i in 0..PLACEMENTS {
        r.propose(place(i)).await.expect("placed");
    }
    r.shutdown().await.expect("shut down");
}

fn flip_a_byte_at_a_third(dir: &std::path::Path) -> (std::path::PathBuf, u64) {
    let path = dir.join(LOG_FILE_NAME);
    let mut bytes = std::fs::read(&path).expect("read the log");
    let third = bytes.len() / 3;
    bytes[third] ^= 0x04;
    std::fs::write(&path, &bytes).expect("write the log");
    (path, bytes.len() as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_with_a_flipped_byte_mid_log_refuses_to_start_and_cuts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    write_a_log(dir.path()).await;
    let (path, len) = flip_a_byte_at_a_third(dir.path());

    let addr = "127.0.0.1:0".parse().unwrap();
    let Err(err) = start_replica_with(1, dir.path(), addr, &ReplicaConfig::default()).await else {
        panic!("a replica started on a log corrupted before its tail");
    };
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains("corrupt at byte offset"), "{text}");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), len, "nothing cut");
}

#[test]
fn the_replica_binary_exits_with_an_error_naming_the_corrupt_log() {
    let dir = tempfile::tempdir().unwrap();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(write_a_log(dir.path()));
    let (path, _) = flip_a_byte_at_a_third(dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_phalanx-ledger-replica"))
        .args(["--id", "1", "--listen", "127.0.0.1:0", "--dir"])
        .arg(dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("run the replica");
    assert!(!out.status.success(), "it must not run on a corrupt log");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&path.display().to_string()), "{stderr}");
    assert!(stderr.contains("offset"), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("READY"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_last_record_was_torn_starts_with_every_placement() {
    let dir = tempfile::tempdir().unwrap();
    write_a_log(dir.path()).await;
    let path = dir.path().join(LOG_FILE_NAME);
    let len = std::fs::metadata(&path).unwrap().len();
    // A record appended by a write that never returned: its length says 400 bytes, 10
    // arrived.
    let mut torn = 400u32.to_le_bytes().to_vec();
    torn.extend_from_slice(&[0xAB; 14]);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(&torn);
    std::fs::write(&path, &bytes).unwrap();

    let addr = "127.0.0.1:0".parse().unwrap();
    let r = start_replica_with(1, dir.path(), addr, &ReplicaConfig::default())
        .await
        .expect("a torn tail is cut and the replica starts");
    r.wait_for(Duration::from_secs(10), "leader", |m| m.state.is_leader())
        .await
        .unwrap();
    r.wait_for(Duration::from_secs(10), "every entry applied", |m| {
        m.last_applied
            .is_some_and(|a| a.index >= PLACEMENTS as u64 + 2)
    })
    .await
    .unwrap();
    assert_eq!(r.read_local(|s, _| s.placements.len()), PLACEMENTS);
    assert!(std::fs::metadata(&path).unwrap().len() >= len);
    r.shutdown().await.unwrap();
}
