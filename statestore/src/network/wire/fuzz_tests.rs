//! Property tests of the wire decoders and of ledger command decoding (issue 17 item 4):
//! any bytes from a peer or a client decode or are refused naming a field, never panic,
//! and whatever decodes is applied without a panic, a refused command changing nothing.
//! Case counts are small by default; `PROPTEST_CASES` runs longer (docs/security.md).

use phalanx_proto::ledger::ProposeRequest;
use phalanx_proto::ledger::{ChangesPage, ChangesRequest, CommittedBatch, LedgerSnapshot};
use phalanx_proto::raft::{Encoding, RaftReply, RaftRequest};
use proptest::prelude::*;

use super::*;
use crate::ledger::{
    ApplyContext, Changes, GangPlacement, LedgerCommand, LedgerState, OvercommitFactor,
    PodPlacement, ReleaseReason, ResourceVec, TxnDecision, apply,
};
use crate::raft_types::LedgerBatch;
use crate::state_machine::apply_batch;

const JSON: i32 = Encoding::Json as i32;
const POSTCARD: i32 = Encoding::Postcard as i32;

/// Names a proposer controls: ordinary ones, hostile ones (empty, slashes, control
/// characters, unicode) and, rarely, long ones.
fn wild_name() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "(ns/)?[a-z]{1,3}",
        3 => "\\PC{0,12}",
        1 => "[a-z/ \t\u{0}]{0,8}",
        1 => (250usize..400).prop_map(|n| "x".repeat(n)),
    ]
}

fn wild_resources() -> impl Strategy<Value = ResourceVec> {
    proptest::collection::vec((wild_name(), any::<i64>()), 0..4)
        .prop_map(|v| ResourceVec::from_pairs(v.iter().map(|(n, q)| (n.as_str(), *q))))
}

fn wild_gang() -> impl Strategy<Value = GangPlacement> {
    let pod = (wild_name(), wild_name(), wild_resources()).prop_map(|(pod, node, resources)| {
        PodPlacement {
            pod,
            node,
            resources,
        }
    });
    (wild_name(), proptest::collection::vec(pod, 0..4))
        .prop_map(|(gang, pods)| GangPlacement { gang, pods })
}

/// Any command, with any numbers and any names (not only ones a scheduler would write).
fn wild_command() -> impl Strategy<Value = LedgerCommand> {
    let pods = || proptest::collection::vec(wild_name(), 0..4);
    prop_oneof![
        (wild_name(), wild_resources(), any::<u32>()).prop_map(|(node, allocatable, shard)| {
            LedgerCommand::UpsertNode {
                node,
                allocatable,
                shard,
            }
        }),
        wild_name().prop_map(|node| LedgerCommand::RemoveNode { node }),
        (any::<u32>(), any::<u32>()).prop_map(|(numerator, denominator)| {
            LedgerCommand::SetOvercommit {
                factor: OvercommitFactor {
                    numerator,
                    denominator,
                },
            }
        }),
        (0u32..3, any::<u64>(), any::<u64>()).prop_map(|(shard, owner, epoch)| {
            LedgerCommand::AssignShard {
                shard,
                owner,
                epoch,
                proposer: None,
            }
        }),
        (
            0u32..3,
            0u64..3,
            proptest::collection::vec(wild_gang(), 0..3)
        )
            .prop_map(|(shard, epoch, gangs)| LedgerCommand::PlaceGangs {
                shard,
                epoch,
                gangs
            }),
        (0u32..3, 0u64..3, pods()).prop_map(|(shard, epoch, pods)| LedgerCommand::MarkBound {
            shard,
            epoch,
            pods
        }),
        (0u32..3, 0u64..3, pods()).prop_map(|(shard, epoch, pods)| LedgerCommand::Release {
            shard,
            epoch,
            pods,
            reason: ReleaseReason::Evicted,
        }),
        (
            wild_name(),
            0u32..3,
            0u64..3,
            proptest::collection::vec(any::<u32>(), 0..3),
            any::<u64>()
        )
            .prop_map(|(txn, shard, epoch, participants, deadline_ms)| {
                LedgerCommand::TxnBegin {
                    txn,
                    shard,
                    epoch,
                    participants,
                    deadline_ms,
                }
            }),
        (wild_name(), 0u32..3, 0u64..3, wild_gang()).prop_map(|(txn, shard, epoch, gang)| {
            LedgerCommand::TxnReserve {
                txn,
                shard,
                epoch,
                gang,
            }
        }),
        (wild_name(), 0u32..3, 0u64..3, any::<bool>()).prop_map(|(txn, shard, epoch, c)| {
            let decision = if c {
                TxnDecision::Commit
            } else {
                TxnDecision::Abort
            };
            LedgerCommand::TxnDecide {
                txn,
                shard,
                epoch,
                decision,
            }
        }),
        any::<u64>().prop_map(|now_ms| LedgerCommand::ExpireAt { now_ms }),
    ]
}

/// A ledger with shards 1 and 2 at epoch 1 and a node in each.
fn seeded() -> LedgerState {
    let mut s = LedgerState::new();
    for (shard, node) in [(1, "n1"), (2, "n2")] {
        apply(
            &mut s,
            &LedgerCommand::AssignShard {
                shard,
                owner: 1,
                epoch: 1,
                proposer: None,
            },
        );
        apply(
            &mut s,
            &LedgerCommand::UpsertNode {
                node: node.into(),
                allocatable: ResourceVec::from_pairs([("nvidia.com/gpu", 8), ("cpu", 64_000)]),
                shard,
            },
        );
    }
    s
}

/// Applies each command; a refused one must leave the state as it was.
fn apply_all(commands: &[LedgerCommand]) -> Result<(), TestCaseError> {
    let mut s = seeded();
    for cmd in commands {
        let before = s.clone();
        let r = apply(&mut s, cmd);
        if r.refusal().is_some() {
            prop_assert_eq!(&before, &s, "refused but changed: {:?}", cmd);
        }
    }
    Ok(())
}

/// Every decoder of the wire, fed `bytes` in each encoding; each must return, not panic.
fn decode_everything(bytes: &[u8]) {
    for encoding in [JSON, POSTCARD] {
        decode_everything_as(encoding, bytes);
    }
}

fn decode_everything_as(encoding: i32, bytes: &[u8]) {
    let raft = RaftRequest {
        encoding,
        payload: bytes.to_vec(),
    };
    let reply = RaftReply {
        encoding,
        payload: bytes.to_vec(),
    };
    let _ = append_entries::from_wire(&raft);
    let _ = append_entries::reply_from_wire(&reply);
    let _ = vote::from_wire(&raft);
    let _ = vote::reply_from_wire(&reply);
    let _ = install_snapshot::from_wire(&raft);
    let _ = install_snapshot::reply_from_wire(&reply);
    let _ = ledger_batch::from_wire(&ProposeRequest {
        encoding,
        batch: bytes.to_vec(),
    });
    let committed = CommittedBatch {
        encoding,
        responses: bytes.to_vec(),
        log_index: 1,
    };
    let _ = ledger_batch::committed_from_wire(&committed);
    let snapshot = LedgerSnapshot {
        encoding,
        state: bytes.to_vec(),
        ..Default::default()
    };
    let _ = ledger_read::from_wire(&snapshot);
    let request = ChangesRequest {
        after_key: bytes.to_vec(),
        key_encoding: encoding,
        ..Default::default()
    };
    let _ = ledger_changes::request_from_wire(&request);
    let page = ChangesPage {
        encoding,
        entries: bytes.to_vec(),
        next_key: bytes.to_vec(),
        ..Default::default()
    };
    let _ = ledger_changes::page_from_wire(&page);
}

proptest! {
    #![proptest_config(crate::proptest_config(64, 0x0017_F022))]

    #[test]
    fn any_batch_survives_the_wire_and_applies_without_a_panic(
        commands in proptest::collection::vec(wild_command(), 0..8)
    ) {
        let batch = LedgerBatch { commands };
        let back = ledger_batch::from_wire(&ledger_batch::to_wire(&batch).unwrap());
        prop_assert_eq!(back.as_ref().ok(), Some(&batch));
        apply_all(&batch.commands)?;
        let mut s = seeded();
        let r = apply_batch(&mut s, &batch.commands, &ApplyContext::IN_PROCESS, &mut Changes::off());
        prop_assert_eq!(r.responses.len(), batch.commands.len());
    }

    #[test]
    fn a_damaged_batch_is_decoded_or_refused_naming_a_field(
        commands in proptest::collection::vec(wild_command(), 1..4),
        at in any::<prop::sample::Index>(),
        edit in 0u8..3,
        byte in any::<u8>(),
    ) {
        let mut bytes = encode(&LedgerBatch { commands }).unwrap();
        let i = at.index(bytes.len());
        match edit {
            0 => bytes[i] = byte,
            1 => bytes.insert(i, byte),
            _ => { bytes.remove(i); }
        }
        let req = ProposeRequest { encoding: JSON, batch: bytes };
        match ledger_batch::from_wire(&req) {
            Ok(batch) => apply_all(&batch.commands)?,
            Err(WireError::Field { field, .. }) => prop_assert!(!field.is_empty()),
            Err(e) => prop_assert!(false, "not a field error: {e}"),
        }
    }

    #[test]
    fn a_damaged_postcard_batch_is_decoded_or_refused_naming_a_field(
        commands in proptest::collection::vec(wild_command(), 1..4),
        at in any::<prop::sample::Index>(),
        edit in 0u8..3,
        byte in any::<u8>(),
    ) {
        let mut bytes = encode_postcard(&LedgerBatch { commands }).unwrap();
        let i = at.index(bytes.len());
        match edit {
            0 => bytes[i] = byte,
            1 => bytes.insert(i, byte),
            _ => { bytes.remove(i); }
        }
        let req = ProposeRequest { encoding: POSTCARD, batch: bytes };
        match ledger_batch::from_wire(&req) {
            Ok(batch) => apply_all(&batch.commands)?,
            Err(WireError::Field { field, .. }) => prop_assert!(!field.is_empty()),
            Err(e) => prop_assert!(false, "not a field error: {e}"),
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_a_wire_decoder(
        bytes in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..256),
            "\\PC{0,200}".prop_map(String::into_bytes),
            "[\\[\\]{}\":,0-9a-zA-Z_]{0,200}".prop_map(String::into_bytes),
        ]
    ) {
        decode_everything(&bytes);
    }
}

#[test]
fn a_malformed_proposal_is_invalid_argument_naming_the_field() {
    let text = r#"{"commands":[{"PlaceGangs":{"shard":1,"epoch":1,"gangs":[{"gang":"ns/g","pods":[{"pod":"ns/p","node":"n1","resources":{"nvidia.com/gpu":"eight"}}]}]}}]}"#;
    let req = ProposeRequest {
        encoding: JSON,
        batch: text.as_bytes().to_vec(),
    };
    let err = ledger_batch::from_wire(&req).expect_err("a string quantity");
    let status = crate::network::server::bad_request(err);
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    let message = status.message();
    assert!(
        message.contains("commands[0].PlaceGangs.gangs[0].pods[0].resources.nvidia.com/gpu"),
        "{message}"
    );
    // Nesting beyond serde_json's recursion limit is an error, not a stack overflow.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let req = ProposeRequest {
        encoding: JSON,
        batch: deep.into_bytes(),
    };
    assert!(ledger_batch::from_wire(&req).is_err());
    // Trailing bytes after a valid batch are refused, not ignored.
    let req = ProposeRequest {
        encoding: JSON,
        batch: br#"{"commands":[]} x"#.to_vec(),
    };
    let err = ledger_batch::from_wire(&req).expect_err("trailing bytes");
    assert!(err.to_string().contains("trailing"), "{err}");
}

#[test]
fn a_postcard_reply_is_refused_so_a_deep_error_chain_cannot_overflow_the_stack() {
    // `AnyError { typ: None, msg: "", source: Some(..), .. }` nested a million times is
    // about 3 MB of postcard; only the JSON decoder bounds the depth.
    let reply = RaftReply {
        encoding: POSTCARD,
        payload: [0u8, 0, 1].repeat(1_000_000),
    };
    assert!(matches!(
        append_entries::reply_from_wire(&reply),
        Err(WireError::UnknownEncoding(POSTCARD))
    ));
    assert!(vote::reply_from_wire(&reply).is_err());
    assert!(install_snapshot::reply_from_wire(&reply).is_err());
}

#[test]
fn a_malformed_postcard_proposal_names_the_field_and_trailing_bytes_are_refused() {
    let batch = LedgerBatch::one(LedgerCommand::Release {
        shard: 1,
        epoch: 1,
        pods: vec!["ns/p".into()],
        reason: ReleaseReason::Finished,
    });
    let mut bytes = encode_postcard(&batch).unwrap();
    // The last byte is the reason's variant index: 9 names no variant.
    *bytes.last_mut().unwrap() = 9;
    let req = ProposeRequest {
        encoding: POSTCARD,
        batch: bytes.clone(),
    };
    let err = ledger_batch::from_wire(&req).expect_err("no such reason");
    // postcard carries no names, so the path is positional: the batch's field 0
    // (`commands`), command 0, variant 6 (`Release`), its field 3 (`reason`).
    assert!(err.to_string().contains("`[0][0].6[3]`"), "{err}");
    *bytes.last_mut().unwrap() = 0;
    bytes.push(0);
    let req = ProposeRequest {
        encoding: POSTCARD,
        batch: bytes,
    };
    let err = ledger_batch::from_wire(&req).expect_err("trailing bytes");
    assert!(err.to_string().contains("trailing"), "{err}");
}
