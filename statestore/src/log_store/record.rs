//! `Record`: one framed entry of the append-only Raft log file.
//!
//! Frame: `len: u32 LE | crc32(payload): u32 LE | payload`, with the checksum
//! CRC-32/IEEE (`crc32fast`; the same function the hand-written table computed). The
//! payload's first byte names its format (docs/adr/0003-binary-log-and-wire-codec.md):
//! `FORMAT_POSTCARD_ENCODED_BATCH` then the record in postcard, an entry's batch as the
//! bytes it was proposed in, which is what is written. Older files hold
//! `FORMAT_POSTCARD_STRUCTURED` records (the batch serialized as a structure) or JSON
//! records (the whole payload an object, `{`); both are still read, through
//! `legacy.rs`. How a file is replayed, and when a damaged frame is a torn tail rather than
//! corruption: `replay.rs`.

use serde::{Deserialize, Serialize};

use super::legacy::LegacyRecord;
use crate::raft_types::{Entry, LogId, Vote};

/// Largest frame accepted on replay (a bound against reading garbage as a length).
pub const MAX_FRAME_BYTES: usize = 64 * 1024 * 1024;
/// `len` and `crc32`, 4 bytes each.
pub const HEADER_BYTES: usize = 8;
/// First payload byte of a record written in postcard whose entry holds its batch as
/// bytes (every record written today).
pub const FORMAT_POSTCARD_ENCODED_BATCH: u8 = 0x02;
/// First payload byte of a record written in postcard with the batch as a structure
/// (older files).
pub const FORMAT_POSTCARD_STRUCTURED: u8 = 0x01;
/// First payload byte of a record written in JSON (older files): the object's `{`.
pub const FORMAT_LEGACY_JSON: u8 = b'{';

/// One durable change to the log store.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Record {
    /// A log entry (appended, possibly replacing a truncated one at the same index).
    Entry(Entry),
    /// Every entry with index >= `since` is deleted.
    Truncate {
        /// First deleted index.
        since: u64,
    },
    /// Every entry up to and including this log id is purged.
    Purge(LogId),
    /// The current vote.
    Vote(Vote),
    /// The last committed log id.
    Committed(Option<LogId>),
}

/// Errors encoding a record.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// postcard refused the record (not expected for these types).
    #[error("record does not serialize: {0}")]
    Postcard(#[from] postcard::Error),
    /// serde_json refused a legacy record (tests and measurements only).
    #[error("record does not serialize as JSON: {0}")]
    Legacy(String),
    /// The payload would not fit the frame bound replay enforces.
    #[error("record of {bytes} bytes exceeds the frame bound of {MAX_FRAME_BYTES} bytes")]
    TooLarge {
        /// Payload size.
        bytes: usize,
    },
}

/// Why a checksummed payload is not a record.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// A postcard record that does not decode, or has bytes after its end.
    #[error("postcard record: {0}")]
    Postcard(#[from] postcard::Error),
    /// A JSON record (an older file) that does not decode.
    #[error("JSON record: {0}")]
    Json(#[from] serde_json::Error),
    /// A postcard record followed by bytes it does not account for.
    #[error("postcard record followed by {0} unread bytes")]
    TrailingBytes(usize),
    /// The format byte is none this build knows (a newer build wrote it, or a bug).
    #[error(
        "unknown record format byte {0:#04x} (known: {FORMAT_POSTCARD_ENCODED_BATCH:#04x} \
         postcard, {FORMAT_POSTCARD_STRUCTURED:#04x} older postcard, \
         {FORMAT_LEGACY_JSON:#04x} JSON)"
    )]
    UnknownFormat(u8),
}

/// Encodes a record as one frame, in postcard.
pub fn encode(record: &Record) -> Result<Vec<u8>, EncodeError> {
    encode_postcard(FORMAT_POSTCARD_ENCODED_BATCH, record)
}

/// Encodes an older record as one frame in the postcard format of older files: only to
/// test and measure that they are still read (`decode`), never written by the log store.
pub fn encode_legacy_postcard(record: &LegacyRecord) -> Result<Vec<u8>, EncodeError> {
    encode_postcard(FORMAT_POSTCARD_STRUCTURED, record)
}

fn encode_postcard<T: Serialize>(format: u8, record: &T) -> Result<Vec<u8>, EncodeError> {
    // Header space first, so the payload is written in place and never copied.
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(&[0; HEADER_BYTES]);
    out.push(format);
    seal(postcard::to_extend(record, out)?)
}

/// Encodes an older record as one frame in the JSON format of older files: only to test
/// and measure that they are still read (`decode`), never written by the log store.
pub fn encode_legacy_json(record: &LegacyRecord) -> Result<Vec<u8>, EncodeError> {
    let mut out = vec![0; HEADER_BYTES];
    serde_json::to_writer(&mut out, record).map_err(|e| EncodeError::Legacy(e.to_string()))?;
    seal(out)
}

/// Decodes the payload of a well-formed frame, in whichever format its first byte names.
pub fn decode(payload: &[u8]) -> Result<Record, DecodeError> {
    match payload.split_first() {
        Some((&FORMAT_POSTCARD_ENCODED_BATCH, body)) => decode_postcard(body),
        _ => Ok(decode_older(payload)?.upgrade()?),
    }
}

/// Decodes the payload of a frame in one of the formats of older files, as those files
/// hold it (a batch as a structure).
pub fn decode_older(payload: &[u8]) -> Result<LegacyRecord, DecodeError> {
    match payload.split_first() {
        Some((&FORMAT_POSTCARD_STRUCTURED, body)) => decode_postcard(body),
        Some((&FORMAT_LEGACY_JSON, _)) => Ok(serde_json::from_slice(payload)?),
        Some((&other, _)) => Err(DecodeError::UnknownFormat(other)),
        // Replay never passes an empty payload (length 0 is damage); refused all the same.
        None => Err(DecodeError::UnknownFormat(0)),
    }
}

fn decode_postcard<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, DecodeError> {
    let (record, rest) = postcard::take_from_bytes::<T>(body)?;
    if !rest.is_empty() {
        return Err(DecodeError::TrailingBytes(rest.len()));
    }
    Ok(record)
}

/// Fills in the header of `frame` (`HEADER_BYTES` reserved, then the payload).
fn seal(mut frame: Vec<u8>) -> Result<Vec<u8>, EncodeError> {
    let bytes = frame.len() - HEADER_BYTES;
    // Refused here rather than written: replay would treat an oversized frame as damage.
    let len = u32::try_from(bytes)
        .ok()
        .filter(|_| bytes <= MAX_FRAME_BYTES)
        .ok_or(EncodeError::TooLarge { bytes })?;
    let crc = crc32fast::hash(&frame[HEADER_BYTES..]);
    frame[..4].copy_from_slice(&len.to_le_bytes());
    frame[4..HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
    Ok(frame)
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload, Membership};

    use super::*;
    use crate::ledger::{
        GangPlacement, LeaderTerm, LedgerCommand, OvercommitFactor, PodPlacement, ReleaseReason,
        ResourceVec, TxnDecision,
    };
    use crate::log_store::legacy::LegacyRecord;
    use crate::raft_types::LedgerBatch;

    #[test]
    fn the_frame_checksum_is_crc32_ieee_as_the_file_format_always_was() {
        // The standard check value of CRC-32/IEEE: what the former hand-written table
        // produced, so existing files keep replaying.
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
        let frame = encode(&Record::Truncate { since: 3 }).expect("encodes");
        let payload = &frame[HEADER_BYTES..];
        // Format byte, variant index 1 (`Truncate`), varint 3.
        assert_eq!(payload, [FORMAT_POSTCARD_ENCODED_BATCH, 0x01, 0x03]);
        assert_eq!(frame[..4], (payload.len() as u32).to_le_bytes());
        assert_eq!(frame[4..8], crc32fast::hash(payload).to_le_bytes());
    }

    #[test]
    fn a_json_frame_of_an_older_file_is_still_read() {
        // Byte for byte what the log store wrote before the switch.
        let frame = encode_legacy_json(&LegacyRecord::Truncate { since: 3 }).expect("encodes");
        let payload = &frame[HEADER_BYTES..];
        assert_eq!(payload, br#"{"Truncate":{"since":3}}"#);
        assert_eq!(frame[4..8], crc32fast::hash(payload).to_le_bytes());
        assert!(matches!(decode(payload), Ok(Record::Truncate { since: 3 })));
    }

    #[test]
    fn an_unknown_format_byte_or_trailing_bytes_are_refused() {
        let err = decode(&[0x7f, 0x01, 0x03]).expect_err("unknown format");
        assert!(matches!(err, DecodeError::UnknownFormat(0x7f)), "{err:?}");
        assert!(err.to_string().contains("0x7f"), "{err}");
        for format in [FORMAT_POSTCARD_ENCODED_BATCH, FORMAT_POSTCARD_STRUCTURED] {
            let err = decode(&[format, 0x01, 0x03, 0x00]).expect_err("trailing");
            assert!(matches!(err, DecodeError::TrailingBytes(1)), "{err:?}");
            let err = decode(&[format, 0x09]).expect_err("no such variant");
            assert!(matches!(err, DecodeError::Postcard(_)), "{err:?}");
        }
    }

    fn gang(name: &str) -> GangPlacement {
        GangPlacement {
            gang: name.into(),
            pods: vec![PodPlacement {
                pod: format!("{name}-0"),
                node: "node-1".into(),
                resources: ResourceVec::from_pairs([("cpu", 4000), ("nvidia.com/gpu", 8)]),
            }],
        }
    }

    /// One command of every variant, with every optional field both set and not. The
    /// match has no wildcard, so a new variant does not compile until it is listed here.
    fn one_of_each_command() -> Vec<LedgerCommand> {
        let all = vec![
            LedgerCommand::UpsertNode {
                node: "node-1".into(),
                allocatable: ResourceVec::from_pairs([("cpu", 64_000), ("memory", -1)]),
                shard: 3,
            },
            LedgerCommand::RemoveNode { node: "".into() },
            LedgerCommand::SetOvercommit {
                factor: OvercommitFactor {
                    numerator: 3,
                    denominator: 2,
                },
            },
            LedgerCommand::AssignShard {
                shard: 1,
                owner: 2,
                epoch: u64::MAX - 1,
                proposer: Some(LeaderTerm {
                    replica: 2,
                    term: 9,
                }),
            },
            LedgerCommand::AssignShard {
                shard: 1,
                owner: 2,
                epoch: 3,
                proposer: None,
            },
            LedgerCommand::PlaceGangs {
                shard: 0,
                epoch: 1,
                gangs: vec![gang("ns/a"), gang("ns/\u{e9}\n")],
            },
            LedgerCommand::MarkBound {
                shard: 0,
                epoch: 1,
                pods: vec!["ns/a-0".into()],
            },
            LedgerCommand::Release {
                shard: 0,
                epoch: 1,
                pods: vec![],
                reason: ReleaseReason::BindFailed,
            },
            LedgerCommand::TxnBegin {
                txn: "t1".into(),
                shard: 0,
                epoch: 1,
                participants: vec![0, 1, u32::MAX],
                deadline_ms: 1 << 45,
            },
            LedgerCommand::TxnReserve {
                txn: "t1".into(),
                shard: 1,
                epoch: 2,
                gang: gang("ns/b"),
            },
            LedgerCommand::TxnDecide {
                txn: "t1".into(),
                shard: 0,
                epoch: 1,
                decision: TxnDecision::Abort,
            },
            LedgerCommand::ExpireAt { now_ms: 0 },
        ];
        for c in &all {
            match c {
                LedgerCommand::UpsertNode { .. }
                | LedgerCommand::RemoveNode { .. }
                | LedgerCommand::SetOvercommit { .. }
                | LedgerCommand::AssignShard { .. }
                | LedgerCommand::PlaceGangs { .. }
                | LedgerCommand::MarkBound { .. }
                | LedgerCommand::Release { .. }
                | LedgerCommand::TxnBegin { .. }
                | LedgerCommand::TxnReserve { .. }
                | LedgerCommand::TxnDecide { .. }
                | LedgerCommand::ExpireAt { .. } => {}
            }
        }
        all
    }

    fn log_id(index: u64) -> crate::raft_types::LogId {
        crate::raft_types::LogId::new(CommittedLeaderId::new(4, 2), index)
    }

    /// Every record variant, and entries of every payload kind and command variant, as
    /// older files wrote them (batches as structures); `upgrade` gives today's records.
    fn one_of_each_record() -> Vec<LegacyRecord> {
        let membership = Membership::new(
            vec![[1, 2, 3].into_iter().collect()],
            [(1, openraft::BasicNode::new("10.0.0.1:7000"))]
                .into_iter()
                .collect::<std::collections::BTreeMap<_, _>>(),
        );
        let mut all = vec![
            LegacyRecord::Entry(openraft::Entry {
                log_id: log_id(1),
                payload: EntryPayload::Blank,
            }),
            LegacyRecord::Entry(openraft::Entry {
                log_id: log_id(2),
                payload: EntryPayload::Membership(membership),
            }),
            LegacyRecord::Entry(openraft::Entry {
                log_id: log_id(3),
                payload: EntryPayload::Normal(LedgerBatch {
                    commands: one_of_each_command(),
                }),
            }),
            LegacyRecord::Truncate { since: 7 },
            LegacyRecord::Purge(log_id(5)),
            LegacyRecord::Vote(Vote::new_committed(4, 2)),
            LegacyRecord::Committed(None),
            LegacyRecord::Committed(Some(log_id(6))),
        ];
        all.extend(one_of_each_command().into_iter().enumerate().map(|(i, c)| {
            LegacyRecord::Entry(openraft::Entry {
                log_id: log_id(10 + i as u64),
                payload: EntryPayload::Normal(LedgerBatch::one(c)),
            })
        }));
        all
    }

    /// Records compared through their JSON (openraft's entry has no `PartialEq`).
    fn as_json(r: &Record) -> String {
        serde_json::to_string(r).expect("records serialize")
    }

    #[test]
    fn every_record_and_command_variant_round_trips_and_older_formats_read_as_the_same() {
        for older in one_of_each_record() {
            let record = older.clone().upgrade().expect("upgrades");
            let frames = [
                encode(&record),
                encode_legacy_postcard(&older),
                encode_legacy_json(&older),
            ];
            for frame in frames {
                let frame = frame.expect("encodes");
                let back = decode(&frame[HEADER_BYTES..]).expect("decodes");
                assert_eq!(as_json(&back), as_json(&record));
            }
        }
    }

    /// An entry of an older file comes back with its batch as bytes that decode to the
    /// very commands the file held.
    #[test]
    fn an_older_entry_reads_back_with_the_batch_it_held() {
        let batch = LedgerBatch {
            commands: one_of_each_command(),
        };
        let older = LegacyRecord::Entry(openraft::Entry {
            log_id: log_id(3),
            payload: EntryPayload::Normal(batch.clone()),
        });
        for frame in [encode_legacy_postcard(&older), encode_legacy_json(&older)] {
            let frame = frame.expect("encodes");
            let Ok(Record::Entry(Entry {
                payload: EntryPayload::Normal(encoded),
                ..
            })) = decode(&frame[HEADER_BYTES..])
            else {
                panic!("not an entry with a batch");
            };
            assert_eq!(encoded.decode().expect("decodes"), batch);
        }
    }

    #[test]
    fn a_cut_postcard_payload_is_refused_not_misread() {
        let record = one_of_each_record()[2].clone().upgrade().expect("upgrades");
        let frame = encode(&record).expect("encodes");
        let payload = &frame[HEADER_BYTES..];
        for cut in 1..payload.len() {
            assert!(decode(&payload[..cut]).is_err(), "cut at {cut} decoded");
        }
    }
}
