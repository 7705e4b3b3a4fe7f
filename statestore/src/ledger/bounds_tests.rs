//! Commands a proposer may not make (issue 17 item 2): each refused whole, with a reason
//! naming the field and the value, and the state left as it was.

use super::bounds::{MAX_ENTRY_BYTES, MAX_QUANTITY, MAX_RESOURCES};
use super::command::{MAX_CLOCK_MS, MAX_GANGS_PER_COMMAND, MAX_PODS_PER_COMMAND};
use super::*;
use crate::raft_types::MAX_COMMANDS_PER_BATCH;
use crate::raft_types::{EncodedBatch, LedgerBatch};
use crate::state_machine::apply_entry;

fn gpus(n: i64) -> ResourceVec {
    ResourceVec::from_pairs([("nvidia.com/gpu", n)])
}

/// Shard 1 (epoch 1) with node `n1` of 8 GPUs.
fn ledger() -> LedgerState {
    let mut s = LedgerState::new();
    for c in [
        LedgerCommand::AssignShard {
            shard: 1,
            owner: 1,
            epoch: 1,
            proposer: None,
        },
        LedgerCommand::UpsertNode {
            node: "n1".into(),
            allocatable: gpus(8),
            shard: 1,
        },
    ] {
        assert_eq!(apply(&mut s, &c), LedgerResponse::Applied);
    }
    s
}

fn place_one(pod: &str, gang: &str, res: ResourceVec) -> LedgerCommand {
    LedgerCommand::PlaceGangs {
        shard: 1,
        epoch: 1,
        gangs: vec![GangPlacement {
            gang: gang.to_string(),
            pods: vec![PodPlacement {
                pod: pod.to_string(),
                node: "n1".into(),
                resources: res,
            }],
        }],
    }
}

/// The refusal of a one-gang `PlaceGangs`, asserting that the state did not change.
#[track_caller]
fn gang_refusal(cmd: &LedgerCommand) -> Refusal {
    let mut s = ledger();
    let before = s.clone();
    let r = apply(&mut s, cmd);
    assert_eq!(s, before, "a refused gang changed the state");
    match r {
        LedgerResponse::Gangs(o) => match &o[0].decision {
            GangDecision::Refused(r) => r.clone(),
            GangDecision::Accepted => panic!("accepted: {cmd:?}"),
        },
        other => panic!("{other:?}"),
    }
}

/// The refusal of a command, asserting that the state did not change.
#[track_caller]
fn refusal(s: &mut LedgerState, cmd: &LedgerCommand) -> Refusal {
    let before = s.clone();
    let r = apply(s, cmd);
    assert_eq!(*s, before, "a refused command changed the state");
    r.refusal().cloned().unwrap_or_else(|| panic!("{r:?}"))
}

#[test]
fn pod_and_gang_keys_that_cannot_name_a_pod_are_refused_naming_the_key() {
    let huge = "x".repeat(1 << 20);
    let cases = [
        (format!("ns/{huge}"), "ns/g", "1048576 bytes"),
        (String::new(), "ns/g", "empty name"),
        ("ns/".to_string(), "ns/g", "empty name"),
        ("/p".to_string(), "ns/g", "empty namespace"),
        ("a/b/c".to_string(), "ns/g", "'/'"),
        ("ns/p q".to_string(), "ns/g", "' '"),
        (
            format!("{}/p", "n".repeat(64)),
            "ns/g",
            "namespace of 64 bytes",
        ),
        ("ns/p".to_string(), "", "empty name"),
    ];
    for (pod, gang, reason) in cases {
        let r = gang_refusal(&place_one(&pod, gang, gpus(1)));
        let text = r.to_string();
        assert!(matches!(r, Refusal::InvalidName { .. }), "{text}");
        assert!(text.contains(reason), "{text} lacks {reason}");
        // A hostile value is shortened in the reason (it becomes Events and explain text).
        assert!(text.len() < 400, "{} bytes", text.len());
    }
    let mut s = ledger();
    let r = refusal(
        &mut s,
        &LedgerCommand::Release {
            shard: 1,
            epoch: 1,
            pods: vec![format!("ns/{huge}")],
            reason: ReleaseReason::Finished,
        },
    );
    assert!(r.to_string().starts_with("pod \"ns/xxx"), "{r}");
}

#[test]
fn node_names_resource_names_and_quantities_out_of_bounds_are_refused() {
    let mut s = ledger();
    let upsert = |node: &str, allocatable: ResourceVec| LedgerCommand::UpsertNode {
        node: node.to_string(),
        allocatable,
        shard: 1,
    };
    let r = refusal(&mut s, &upsert("n2", gpus(i64::MAX)));
    assert_eq!(
        r,
        Refusal::QuantityOutOfRange {
            subject: "node n2".into(),
            resource: "nvidia.com/gpu".into(),
            quantity: i64::MAX,
            max: MAX_QUANTITY,
        }
    );
    assert_eq!(
        apply(&mut s, &upsert("n2", gpus(MAX_QUANTITY))),
        LedgerResponse::Applied
    );
    let r = refusal(&mut s, &upsert(&"n".repeat(254), gpus(1)));
    assert!(
        r.to_string().contains("name of 254 bytes, limit 253"),
        "{r}"
    );
    let many = ResourceVec::from_pairs(
        (0..=MAX_RESOURCES)
            .map(|i| (format!("r{i}"), 1))
            .collect::<Vec<_>>()
            .iter()
            .map(|(n, q)| (n.as_str(), *q)),
    );
    let r = refusal(&mut s, &upsert("n3", many));
    assert!(
        matches!(
            r,
            Refusal::TooLarge {
                count: 65,
                limit: 64,
                ..
            }
        ),
        "{r}"
    );
    let r = gang_refusal(&place_one(
        "ns/p",
        "ns/g",
        ResourceVec::from_pairs([("bad name", 1)]),
    ));
    assert!(
        r.to_string().contains("pod ns/p resource \"bad name\""),
        "{r}"
    );
}

#[test]
fn an_overcommit_factor_above_100_is_refused() {
    let mut s = ledger();
    let set = |numerator, denominator| LedgerCommand::SetOvercommit {
        factor: OvercommitFactor {
            numerator,
            denominator,
        },
    };
    let r = refusal(&mut s, &set(u32::MAX, 1));
    assert_eq!(
        r.to_string(),
        "overcommit 4294967295/1 is invalid (must be from 1 to 100)"
    );
    assert!(matches!(
        refusal(&mut s, &set(201, 2)),
        Refusal::InvalidOvercommit { .. }
    ));
    assert_eq!(apply(&mut s, &set(200, 2)), LedgerResponse::Applied);
}

#[test]
fn gangs_pods_and_commands_over_their_bounds_are_refused_whole() {
    let pods = |n: usize| -> Vec<PodPlacement> {
        (0..n)
            .map(|i| PodPlacement {
                pod: format!("ns/p{i}"),
                node: "n1".into(),
                resources: ResourceVec::new(),
            })
            .collect()
    };
    let wide = LedgerCommand::PlaceGangs {
        shard: 1,
        epoch: 1,
        gangs: vec![GangPlacement {
            gang: "ns/wide".into(),
            pods: pods(command::MAX_PODS_PER_GANG + 1),
        }],
    };
    assert!(matches!(
        gang_refusal(&wide),
        Refusal::TooLarge {
            count: 4097,
            limit: 4096,
            ..
        }
    ));
    let mut s = ledger();
    let many = LedgerCommand::PlaceGangs {
        shard: 1,
        epoch: 1,
        gangs: (0..=MAX_GANGS_PER_COMMAND)
            .map(|g| GangPlacement {
                gang: format!("ns/g{g}"),
                pods: vec![PodPlacement {
                    pod: format!("ns/p{g}"),
                    node: "n1".into(),
                    resources: ResourceVec::new(),
                }],
            })
            .collect(),
    };
    assert!(matches!(
        refusal(&mut s, &many),
        Refusal::TooLarge { limit: 1024, .. }
    ));
    let bound = LedgerCommand::MarkBound {
        shard: 1,
        epoch: 1,
        pods: (0..=MAX_PODS_PER_COMMAND)
            .map(|i| format!("ns/p{i}"))
            .collect(),
    };
    assert!(matches!(
        refusal(&mut s, &bound),
        Refusal::TooLarge { limit: 16_384, .. }
    ));
}

/// The commands applied as one entry, asserting one refusal for the whole batch and the
/// state unchanged.
#[track_caller]
fn batch_refusal(commands: &[LedgerCommand]) -> Refusal {
    let batch = LedgerBatch {
        commands: commands.to_vec(),
    };
    entry_refusal(&EncodedBatch::encode(&batch).expect("encodes"))
}

/// `apply_entry`, asserting one refusal for the whole entry and the state unchanged.
#[track_caller]
fn entry_refusal(entry: &EncodedBatch) -> Refusal {
    let mut s = ledger();
    let before = s.clone();
    let r = apply_entry(
        &mut s,
        entry,
        &ApplyContext::IN_PROCESS,
        &mut Changes::off(),
    );
    assert_eq!(s, before, "a refused batch changed the state");
    assert_eq!(r.responses.len(), 1, "{r:?}");
    r.responses[0].refusal().cloned().expect("refused")
}

/// An entry appended by a faulty or hostile leader whose bytes are no batch, or a batch
/// with bytes after it: refused whole, naming its size, on every replica alike.
#[test]
fn an_entry_whose_bytes_encode_no_batch_is_refused_whole_naming_its_size() {
    let garbage = EncodedBatch::from_encoded(vec![0xff; 10]);
    let mut trailing = postcard::to_stdvec(&LedgerBatch::one(LedgerCommand::RemoveNode {
        node: "node-1".into(),
    }))
    .unwrap();
    trailing.push(0);
    for entry in [garbage, EncodedBatch::from_encoded(trailing)] {
        let r = entry_refusal(&entry);
        assert!(
            matches!(r, Refusal::UndecodableEntry { bytes, .. } if bytes == entry.len()),
            "{r}"
        );
        assert!(r.to_string().contains("encodes no ledger batch"), "{r}");
    }
}

#[test]
fn a_batch_over_its_command_or_byte_bound_is_refused_whole_by_apply() {
    let node = |i: usize, resources: usize| LedgerCommand::UpsertNode {
        node: format!("node-{i}"),
        allocatable: ResourceVec::from_pairs(
            (0..resources)
                .map(|r| (format!("example.com/{r:0>300}"), 1))
                .collect::<Vec<_>>()
                .iter()
                .map(|(n, q)| (n.as_str(), *q)),
        ),
        shard: 1,
    };
    let too_many: Vec<_> = (0..=MAX_COMMANDS_PER_BATCH).map(|i| node(i, 1)).collect();
    let r = batch_refusal(&too_many);
    assert!(
        matches!(
            r,
            Refusal::TooLarge {
                count: 257,
                limit: 256,
                ..
            }
        ),
        "{r}"
    );
    // 256 nodes of 64 resources named with 300+ bytes: each command is within its own
    // bounds, the entry (about 5 MB) is not. A leader that bypassed the ledger service's
    // 2 MiB check could append it; apply still refuses it, before applying any of it.
    let heavy: Vec<_> = (0..MAX_COMMANDS_PER_BATCH)
        .map(|i| node(i, MAX_RESOURCES))
        .collect();
    let r = batch_refusal(&heavy);
    assert!(
        matches!(r, Refusal::TooLarge { limit, .. } if limit == MAX_ENTRY_BYTES),
        "{r}"
    );
    assert!(r.to_string().contains("bytes in one entry"), "{r}");
}

#[test]
fn clocks_and_deadlines_past_the_year_3085_or_an_hour_ahead_are_refused() {
    // A fresh ledger has no time to judge against, yet u64::MAX is refused.
    let mut fresh = LedgerState::new();
    let r = refusal(&mut fresh, &LedgerCommand::ExpireAt { now_ms: u64::MAX });
    assert!(
        matches!(
            r,
            Refusal::ClockJump {
                max_step: MAX_CLOCK_MS,
                ..
            }
        ),
        "{r}"
    );
    let begin = |deadline_ms| LedgerCommand::TxnBegin {
        txn: "t".into(),
        shard: 1,
        epoch: 1,
        participants: vec![1],
        deadline_ms,
    };
    let mut s = ledger();
    let r = refusal(&mut s, &begin(u64::MAX));
    assert!(
        matches!(r, Refusal::DeadlineOutOfRange { anchor: 0, .. }),
        "{r}"
    );
    // Once the ledger has a clock, a deadline more than an hour past it is refused: the
    // next ExpireAt may move as far as the latest deadline, so it would move that far.
    apply(&mut s, &LedgerCommand::ExpireAt { now_ms: 1_000 });
    let hour = command::MAX_CLOCK_STEP_MS;
    let r = refusal(&mut s, &begin(1_000 + hour + 1));
    assert!(
        matches!(r, Refusal::DeadlineOutOfRange { anchor: 1_000, .. }),
        "{r}"
    );
    assert_eq!(apply(&mut s, &begin(1_000 + hour)), LedgerResponse::Applied);
    let r = refusal(
        &mut s,
        &LedgerCommand::TxnBegin {
            txn: "t".repeat(257),
            shard: 1,
            epoch: 1,
            participants: vec![1],
            deadline_ms: 2_000,
        },
    );
    assert!(matches!(r, Refusal::InvalidName { .. }), "{r}");
}
