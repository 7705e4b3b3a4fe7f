//! Conversions between openraft / ledger types and the protobuf messages of
//! `phalanx-proto`: one module per wire type. Raft messages carry openraft's own types
//! serialized (tagged with `Encoding`), so openraft's types stay the contract.
//!
//! Requests and proposals (the bulk: log entries) are sent in postcard, as the Raft log
//! stores them; replies and reads stay JSON. Why: docs/adr/0003-binary-log-and-wire-codec.md
//! (openraft's error type in a reply nests without bound, which only serde_json's recursion
//! limit makes safe to decode; reads are fingerprinted over the canonical JSON bytes).
//! Every decoder reads both encodings.

pub mod append_entries;
pub mod install_snapshot;
pub mod ledger_batch;
pub mod ledger_changes;
pub mod ledger_read;
pub mod vote;

#[cfg(test)]
mod fuzz_tests;

use phalanx_proto::raft::{Encoding, RaftReply, RaftRequest};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A message that could not be decoded or encoded.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The peer used an encoding this build does not know.
    #[error("unknown payload encoding {0}")]
    UnknownEncoding(i32),
    /// The payload could not be serialized as JSON.
    #[error("payload serialization failed: {0}")]
    Json(#[from] serde_json::Error),
    /// The payload could not be serialized in postcard.
    #[error("payload serialization failed: {0}")]
    Postcard(#[from] postcard::Error),
    /// The payload is not valid for its type; `field` is the path to the value that is
    /// not (`commands[0].PlaceGangs.gangs[2].pods`), `.` when the whole payload is not.
    #[error("payload field `{field}`: {source}")]
    Field {
        /// Path of the offending value.
        field: String,
        /// What the decoder found wrong there (serde_json names line and column).
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A required oneof was empty.
    #[error("message has no {0}")]
    Missing(&'static str),
}

/// Serializes `v` as a JSON payload.
pub fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, WireError> {
    Ok(serde_json::to_vec(v)?)
}

/// Serializes `v` as a postcard payload. Only for types that do not nest without bound:
/// postcard has no recursion limit, so a decoder of such a type could be made to
/// overflow its stack.
pub fn encode_postcard<T: Serialize>(v: &T) -> Result<Vec<u8>, WireError> {
    Ok(postcard::to_stdvec(v)?)
}

/// Deserializes a payload tagged with `encoding`; an error names the field path. Never
/// panics on any bytes (serde_json bounds its recursion at 128 levels; the types sent in
/// postcard do not recurse).
pub fn decode<T: DeserializeOwned>(encoding: i32, bytes: &[u8]) -> Result<T, WireError> {
    match Encoding::try_from(encoding) {
        Ok(Encoding::Json) => decode_json(bytes),
        Ok(Encoding::Postcard) => decode_postcard(bytes),
        // Only AppendEntries is sent so, and its decoder handles it (`append_entries`).
        _ => Err(WireError::UnknownEncoding(encoding)),
    }
}

/// Deserializes a Raft reply: JSON only, whatever its tag says. A reply may carry
/// openraft's `AnyError`, whose `source` chain nests without bound; serde_json's recursion
/// limit is what keeps a hostile peer's deep chain from overflowing the stack.
pub fn decode_reply<T: DeserializeOwned>(encoding: i32, bytes: &[u8]) -> Result<T, WireError> {
    match Encoding::try_from(encoding) {
        Ok(Encoding::Json) => decode_json(bytes),
        _ => Err(WireError::UnknownEncoding(encoding)),
    }
}

fn decode_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, WireError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(field_error)?;
    de.end().map_err(|source| WireError::Field {
        field: ".".to_string(),
        source: source.into(),
    })?;
    Ok(value)
}

fn decode_postcard<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, WireError> {
    let mut de = postcard::Deserializer::from_bytes(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(field_error)?;
    let rest = de.finalize().map_err(|source| WireError::Field {
        field: ".".to_string(),
        source: source.into(),
    })?;
    if !rest.is_empty() {
        return Err(WireError::Field {
            field: ".".to_string(),
            source: format!("{} trailing bytes after the payload", rest.len()).into(),
        });
    }
    Ok(value)
}

fn field_error<E: std::error::Error + Send + Sync + 'static>(
    e: serde_path_to_error::Error<E>,
) -> WireError {
    WireError::Field {
        field: e.path().to_string(),
        source: Box::new(e.into_inner()),
    }
}

/// Frames a serialized request (postcard: requests carry log entries).
pub(crate) fn request<T: Serialize>(v: &T) -> Result<RaftRequest, WireError> {
    Ok(RaftRequest {
        encoding: Encoding::Postcard as i32,
        payload: encode_postcard(v)?,
    })
}

/// Frames a serialized reply (JSON: a reply may carry openraft's nested error).
pub(crate) fn reply<T: Serialize>(v: &T) -> Result<RaftReply, WireError> {
    Ok(RaftReply {
        encoding: Encoding::Json as i32,
        payload: encode(v)?,
    })
}

#[cfg(test)]
mod tests {
    use openraft::raft::{AppendEntriesResponse, VoteRequest};
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Vote};

    use super::*;
    use crate::ledger::{LedgerCommand, LedgerResponse, LedgerState, Refusal, ResourceVec};
    use crate::log_store::legacy::LegacyConfig;
    use crate::raft_types::{BatchResponse, EncodedBatch, LedgerBatch};

    fn append_of<C: openraft::RaftTypeConfig<NodeId = u64, Entry = Entry<C>>>(
        payload: EntryPayload<C>,
    ) -> openraft::raft::AppendEntriesRequest<C> {
        openraft::raft::AppendEntriesRequest {
            vote: Vote::new_committed(3, 1),
            prev_log_id: Some(LogId::new(CommittedLeaderId::new(3, 1), 6)),
            entries: vec![Entry {
                log_id: LogId::new(CommittedLeaderId::new(3, 1), 7),
                payload,
            }],
            leader_commit: None,
        }
    }

    /// An entry's batch goes on the wire as the bytes it was proposed in, whole and in
    /// place (copied, never walked again), tagged so an older peer refuses it by name.
    #[test]
    fn an_append_carries_each_batch_as_its_proposed_bytes() {
        let batch = LedgerBatch::one(LedgerCommand::ExpireAt { now_ms: 9 });
        let encoded = EncodedBatch::encode(&batch).unwrap();
        let proposed = postcard::to_stdvec(&batch).unwrap();
        let req = append_of(EntryPayload::Normal(encoded));
        let wire = append_entries::to_wire(&req).unwrap();
        assert_eq!(wire.encoding, Encoding::PostcardEncodedBatch as i32);
        assert!(
            wire.payload.windows(proposed.len()).any(|w| w == proposed),
            "the batch's bytes are not in the request"
        );
        let err = decode::<LedgerBatch>(wire.encoding, &wire.payload).expect_err("not generic");
        assert!(matches!(err, WireError::UnknownEncoding(3)), "{err:?}");
    }

    /// A leader not yet upgraded sends entries with batches as structures (postcard or
    /// JSON): they arrive as encoded batches that decode to the same commands.
    #[test]
    fn an_older_leaders_append_is_read_with_the_same_batches() {
        let batch = LedgerBatch::one(LedgerCommand::ExpireAt { now_ms: 9 });
        let older = append_of::<LegacyConfig>(EntryPayload::Normal(batch.clone()));
        let framings = [
            RaftRequest {
                encoding: Encoding::Postcard as i32,
                payload: postcard::to_stdvec(&older).unwrap(),
            },
            RaftRequest {
                encoding: Encoding::Json as i32,
                payload: serde_json::to_vec(&older).unwrap(),
            },
        ];
        for wire in framings {
            let back = append_entries::from_wire(&wire).expect("an older append decodes");
            let EntryPayload::Normal(encoded) = &back.entries[0].payload else {
                panic!("not a batch");
            };
            assert_eq!(encoded.decode().unwrap(), batch);
            assert_eq!(back.entries[0].log_id.index, 7);
        }
    }

    #[test]
    fn raft_messages_survive_the_wire() {
        let batch = LedgerBatch::one(LedgerCommand::ExpireAt { now_ms: 9 });
        let entry: Entry<crate::raft_types::TypeConfig> = Entry {
            log_id: LogId::new(CommittedLeaderId::new(3, 1), 7),
            payload: EntryPayload::Normal(EncodedBatch::encode(&batch).unwrap()),
        };
        let req = openraft::raft::AppendEntriesRequest {
            vote: Vote::new_committed(3, 1),
            prev_log_id: Some(LogId::new(CommittedLeaderId::new(3, 1), 6)),
            entries: vec![entry],
            leader_commit: None,
        };
        let back = append_entries::from_wire(&append_entries::to_wire(&req).unwrap()).unwrap();
        assert_eq!(back.entries.len(), 1);
        assert_eq!(back.entries[0].log_id.index, 7);
        let reply: append_entries::Reply = Ok(AppendEntriesResponse::Success);
        let wire = append_entries::reply_to_wire(&reply).unwrap();
        assert_eq!(append_entries::reply_from_wire(&wire).unwrap(), reply);

        let v = VoteRequest::new(Vote::new(4, 2), None);
        assert_eq!(vote::from_wire(&vote::to_wire(&v).unwrap()).unwrap(), v);
    }

    #[test]
    fn ledger_batches_responses_and_reads_survive_the_wire() {
        let batch = LedgerBatch::one(LedgerCommand::UpsertNode {
            node: "n".into(),
            allocatable: ResourceVec::from_pairs([("nvidia.com/gpu", 8)]),
            shard: 2,
        });
        assert_eq!(
            ledger_batch::from_wire(&ledger_batch::to_wire(&batch).unwrap()).unwrap(),
            batch
        );
        let resp = BatchResponse {
            responses: vec![LedgerResponse::Refused(Refusal::UnknownShard { shard: 4 })],
        };
        let (back, index) =
            ledger_batch::committed_from_wire(&ledger_batch::committed_to_wire(&resp, 11).unwrap())
                .unwrap();
        assert_eq!((back, index), (resp, 11));
        let state = LedgerState::new();
        let read = ledger_read::from_wire(&ledger_read::to_wire(&state, 5, true).unwrap()).unwrap();
        assert_eq!(read.state.as_ref(), Some(&state));
        assert_eq!(read.fingerprint, state.fingerprint());
        let thin =
            ledger_read::from_wire(&ledger_read::to_wire(&state, 5, false).unwrap()).unwrap();
        assert!(thin.state.is_none());
    }

    #[test]
    fn requests_and_proposals_go_in_postcard_replies_and_reads_in_json() {
        let batch = LedgerBatch::one(LedgerCommand::ExpireAt { now_ms: 9 });
        let propose = ledger_batch::to_wire(&batch).unwrap();
        assert_eq!(propose.encoding, Encoding::Postcard as i32);
        assert_eq!(propose.batch, postcard::to_stdvec(&batch).unwrap());
        let v = VoteRequest::new(Vote::new(4, 2), None);
        assert_eq!(
            vote::to_wire(&v).unwrap().encoding,
            Encoding::Postcard as i32
        );
        let reply: append_entries::Reply = Ok(AppendEntriesResponse::Success);
        let wire = append_entries::reply_to_wire(&reply).unwrap();
        assert_eq!(wire.encoding, Encoding::Json as i32);
        // A JSON proposal (an older client) is still read.
        let json = phalanx_proto::ledger::ProposeRequest {
            encoding: Encoding::Json as i32,
            batch: serde_json::to_vec(&batch).unwrap(),
        };
        assert_eq!(ledger_batch::from_wire(&json).unwrap(), batch);
    }

    #[test]
    fn an_unknown_encoding_is_refused() {
        let mut req = ledger_batch::to_wire(&LedgerBatch::default()).unwrap();
        req.encoding = 99;
        assert!(matches!(
            ledger_batch::from_wire(&req),
            Err(WireError::UnknownEncoding(99))
        ));
    }
}
