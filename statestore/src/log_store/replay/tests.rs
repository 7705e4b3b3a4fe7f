use openraft::{CommittedLeaderId, EntryPayload};
use proptest::prelude::*;
use proptest::sample::Index;

use super::*;
use crate::ledger::LedgerCommand;
use crate::log_store::legacy::LegacyRecord;
use crate::log_store::record::encode;
use crate::raft_types::{EncodedBatch, Entry, LedgerBatch, LogId, Vote};

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn remove_node_entry(index: u64, node: String) -> Record {
    older_remove_node_entry(index, node)
        .upgrade()
        .expect("test records encode")
}

/// The same entry as files written before entries held encoded batches.
fn older_remove_node_entry(index: u64, node: String) -> LegacyRecord {
    LegacyRecord::Entry(openraft::Entry {
        log_id: log_id(1, index),
        payload: EntryPayload::Normal(LedgerBatch::one(LedgerCommand::RemoveNode { node })),
    })
}

fn frames(records: &[Record]) -> Vec<Vec<u8>> {
    records
        .iter()
        .map(|r| encode(r).expect("test records encode"))
        .collect()
}

fn ten_frames() -> Vec<Vec<u8>> {
    let records: Vec<Record> = (1..=10)
        .map(|i| remove_node_entry(i, format!("node-{i}")))
        .collect();
    frames(&records)
}

#[test]
fn a_flipped_byte_before_the_last_frame_is_corruption_at_that_frames_offset() {
    let frames = ten_frames();
    let third = frames[0].len() + frames[1].len();
    let mut bytes = frames.concat();
    bytes[third + HEADER_BYTES + 5] ^= 0x01;
    let err = replay(&bytes).expect_err("a damaged middle frame is refused");
    match err {
        ReplayError::Corrupt {
            offset,
            damage: FrameDamage::Checksum { .. },
            next,
        } => {
            assert_eq!(offset, third);
            assert_eq!(next, third + frames[2].len());
        }
        other => panic!("expected a checksum corruption, got {other:?}"),
    }
}

#[test]
fn a_corrupted_length_that_runs_past_the_end_is_corruption_when_frames_follow() {
    let frames = ten_frames();
    let mut bytes = frames.concat();
    // The second frame's length now claims far more bytes than the file holds.
    bytes[frames[0].len() + 2] = 0x3F;
    let err = replay(&bytes).expect_err("refused");
    assert_eq!(err.offset(), frames[0].len());
    assert!(matches!(err, ReplayError::Corrupt { .. }), "{err:?}");
}

#[test]
fn a_final_frame_with_a_bad_checksum_and_nothing_after_is_a_torn_tail() {
    let frames = ten_frames();
    let mut bytes = frames.concat();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xFF;
    let replayed = replay(&bytes).expect("a torn tail is cut, not refused");
    assert_eq!(replayed.records.len(), 9);
    let cut = bytes.len() - frames[9].len();
    assert_eq!(replayed.valid_len, cut);
    assert!(matches!(
        replayed.torn,
        Some(TornTail {
            offset,
            damage: FrameDamage::Checksum { .. }
        }) if offset == cut
    ));
}

#[test]
fn a_zero_filled_tail_is_torn_and_a_zero_length_frame_is_damage() {
    let frames = ten_frames();
    let whole = frames.concat();
    let mut bytes = whole.clone();
    bytes.extend_from_slice(&[0u8; 4096]);
    let replayed = replay(&bytes).expect("zeros the file system never wrote are torn");
    assert_eq!(replayed.valid_len, whole.len());
    assert_eq!(
        replayed.torn.map(|t| t.damage),
        Some(FrameDamage::BadLength { len: 0 })
    );
}

#[test]
fn a_frame_with_a_valid_checksum_that_is_not_a_record_is_refused() {
    let payload = b"{\"NoSuchRecord\":1}";
    let mut bytes = ten_frames().concat();
    let offset = bytes.len();
    bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    bytes.extend_from_slice(payload);
    let err = replay(&bytes).expect_err("refused");
    assert!(matches!(err, ReplayError::NotARecord { .. }), "{err:?}");
    assert_eq!(err.offset(), offset);
}

#[test]
fn garbage_full_of_plausible_headers_is_refused_within_the_scan_budget() {
    // Every offset reads as a 16 MiB length: each candidate costs a 16 MiB checksum, so
    // the scan must give up (Unprovable) instead of running for hours.
    let mut bytes = vec![0u8, 0, 0, 1, 0, 0, 0, 0]; // damaged: length 16 MiB, checksum 0
    bytes.extend(std::iter::repeat_n([0u8, 0, 0, 1], (40 << 20) / 4).flatten());
    let start = std::time::Instant::now();
    let err = replay(&bytes).expect_err("cannot prove a torn tail");
    assert!(
        matches!(err, ReplayError::Unprovable { offset: 0, .. }),
        "{err:?}"
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(60));
}

fn any_record() -> impl Strategy<Value = Record> {
    prop_oneof![
        (1u64..1_000_000, "[a-z0-9.-]{0,300}").prop_map(|(i, n)| remove_node_entry(i, n)),
        (0u64..100, 0u64..1_000).prop_map(|(t, i)| Record::Entry(Entry {
            log_id: log_id(t, i),
            payload: EntryPayload::Blank,
        })),
        any::<u64>().prop_map(|since| Record::Truncate { since }),
        (0u64..100, any::<u64>()).prop_map(|(t, i)| Record::Purge(log_id(t, i))),
        (any::<u64>(), any::<u64>()).prop_map(|(t, n)| Record::Vote(Vote::new(t, n))),
        proptest::option::of((0u64..100, any::<u64>()))
            .prop_map(|c| Record::Committed(c.map(|(t, i)| log_id(t, i)))),
    ]
}

/// Offsets where each frame starts, and the end of the last.
fn boundaries(frames: &[Vec<u8>]) -> Vec<usize> {
    let mut at = vec![0usize];
    for f in frames {
        at.push(at.last().copied().unwrap_or_default() + f.len());
    }
    at
}

/// Every record replayed is exactly the frame written at that place.
fn assert_prefix(replayed: &Replayed, frames: &[Vec<u8>]) {
    for (i, (record, size)) in replayed.records.iter().enumerate() {
        assert_eq!(&encode(record).expect("re-encodes"), &frames[i]);
        assert_eq!(*size as usize, frames[i].len());
    }
}

fn fixed_seed() -> ProptestConfig {
    crate::proptest_config(256, 0x0017_10C5)
}

proptest! {
    #![proptest_config(fixed_seed())]

    #[test]
    fn a_truncated_log_replays_exactly_the_whole_frames_before_the_cut(
        records in proptest::collection::vec(any_record(), 1..12),
        cut in any::<Index>(),
    ) {
        let frames = frames(&records);
        let bytes = frames.concat();
        let len = cut.index(bytes.len());
        let at = boundaries(&frames);
        let whole = at.iter().filter(|b| **b <= len).count() - 1;
        let replayed = replay(&bytes[..len]).expect("a truncated log is a torn tail");
        prop_assert_eq!(replayed.records.len(), whole);
        assert_prefix(&replayed, &frames);
        prop_assert_eq!(replayed.valid_len, at[whole]);
        prop_assert_eq!(replayed.torn.is_some(), len != at[whole]);
    }

    #[test]
    fn a_flipped_byte_is_refused_at_its_frame_or_cut_only_when_in_the_last_frame(
        records in proptest::collection::vec(any_record(), 1..12),
        which in any::<Index>(),
        xor in 1u8..=255,
    ) {
        let frames = frames(&records);
        let mut bytes = frames.concat();
        let i = which.index(bytes.len());
        bytes[i] ^= xor;
        let at = boundaries(&frames);
        let frame = at.iter().filter(|b| **b <= i).count() - 1;
        match replay(&bytes) {
            Ok(replayed) => {
                prop_assert_eq!(frame, frames.len() - 1, "only the last frame may be cut");
                prop_assert_eq!(replayed.records.len(), frame);
                assert_prefix(&replayed, &frames);
                prop_assert_eq!(replayed.torn.map(|t| t.offset), Some(at[frame]));
            }
            Err(err) => {
                prop_assert!(frame < frames.len() - 1, "the last frame is cut, not refused: {err}");
                prop_assert!(matches!(err, ReplayError::Corrupt { .. }), "{err}");
                prop_assert_eq!(err.offset(), at[frame]);
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_replay_only_frames_that_are_there(
        bytes in proptest::collection::vec(any::<u8>(), 0..2048),
    ) {
        if let Ok(replayed) = replay(&bytes) {
            let mut pos = 0usize;
            for (record, size) in &replayed.records {
                let frame = encode(record).expect("re-encodes");
                prop_assert_eq!(&bytes[pos..pos + frame.len()], &frame[..]);
                pos += *size as usize;
            }
            prop_assert_eq!(pos, replayed.valid_len);
        }
    }
}

/// A batch as a scheduler proposes it: 256 commands, each committing four 8-pod gangs.
fn big_batch_entry(index: u64) -> Record {
    use crate::ledger::{GangPlacement, PodPlacement, ResourceVec};
    let gang = |c: usize, g: usize| GangPlacement {
        gang: format!("team-{c}/job-{g}"),
        pods: (0..8)
            .map(|p| PodPlacement {
                pod: format!("team-{c}/job-{g}-worker-{p}"),
                node: format!("node-{}", (c * 31 + g * 7 + p) % 5000),
                resources: ResourceVec::from_pairs([
                    ("cpu", 8000),
                    ("memory", 64 << 30),
                    ("nvidia.com/gpu", 1),
                ]),
            })
            .collect(),
    };
    let commands = (0..256)
        .map(|c| LedgerCommand::PlaceGangs {
            shard: (c % 16) as u32,
            epoch: 3,
            gangs: (0..4).map(|g| gang(c, g)).collect(),
        })
        .collect();
    Record::Entry(Entry {
        log_id: log_id(1, index),
        payload: EntryPayload::Normal(
            EncodedBatch::encode(&LedgerBatch { commands }).expect("encodes"),
        ),
    })
}

#[test]
fn a_torn_large_binary_frame_is_proven_torn_within_the_scan_budget() {
    // Binary payloads hold many offsets that read as plausible lengths; a torn write of
    // the largest batch must still be cut, not refused as unprovable.
    let mut bytes = ten_frames().concat();
    let valid = bytes.len();
    let big = frames(&[big_batch_entry(11)]).remove(0);
    assert!(big.len() > 200_000, "{}", big.len());
    for cut in [HEADER_BYTES + 1, big.len() / 3, big.len() - 1] {
        let mut torn = bytes.clone();
        torn.extend_from_slice(&big[..cut]);
        let replayed = replay(&torn).expect("a torn tail is cut, not refused");
        assert_eq!(replayed.valid_len, valid);
        assert_eq!(replayed.records.len(), 10);
    }
    bytes.extend_from_slice(&big);
    assert_eq!(replay(&bytes).expect("whole").records.len(), 11);
}

#[test]
fn a_file_of_json_frames_then_older_postcard_then_current_frames_replays_every_record() {
    // An older file (JSON, then postcard with batches as structures) reopened by this
    // build, which appends entries holding encoded batches.
    use crate::log_store::record::{encode_legacy_json, encode_legacy_postcard};
    let mut bytes = Vec::new();
    for i in 1..=3 {
        let older = older_remove_node_entry(i, format!("old-{i}"));
        bytes.extend(encode_legacy_json(&older).unwrap());
    }
    for i in 4..=5 {
        let older = older_remove_node_entry(i, format!("old-{i}"));
        bytes.extend(encode_legacy_postcard(&older).unwrap());
    }
    for i in 6..=10 {
        bytes.extend(encode(&remove_node_entry(i, format!("new-{i}"))).unwrap());
    }
    let replayed = replay(&bytes).expect("mixed formats replay");
    let names: Vec<String> = replayed
        .records
        .iter()
        .map(|(r, _)| match r {
            Record::Entry(Entry {
                payload: EntryPayload::Normal(b),
                ..
            }) => match &b.decode().expect("a batch").commands[0] {
                LedgerCommand::RemoveNode { node } => node.clone(),
                other => panic!("unexpected {other:?}"),
            },
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    let expected: Vec<String> = (1..=5)
        .map(|i| format!("old-{i}"))
        .chain((6..=10).map(|i| format!("new-{i}")))
        .collect();
    assert_eq!(names, expected);
    assert_eq!(replayed.valid_len, bytes.len());
}
