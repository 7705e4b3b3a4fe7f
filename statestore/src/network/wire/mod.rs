//! Conversions between openraft / ledger types and the protobuf messages of
//! `phalanx-proto`: one module per wire type. Raft messages carry openraft's own types
//! serialized (JSON, tagged with `Encoding`), so openraft's types stay the contract.

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
    /// The payload could not be serialized.
    #[error("payload serialization failed: {0}")]
    Json(#[from] serde_json::Error),
    /// The payload is not valid for its type; `field` is the path to the value that is
    /// not (`commands[0].PlaceGangs.gangs[2].pods`), `.` when the whole payload is not.
    #[error("payload field `{field}`: {source}")]
    Field {
        /// Path of the offending value.
        field: String,
        /// What serde found wrong there (it names line and column of the payload).
        source: serde_json::Error,
    },
    /// A required oneof was empty.
    #[error("message has no {0}")]
    Missing(&'static str),
}

/// Serializes `v` as a JSON payload.
pub fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, WireError> {
    Ok(serde_json::to_vec(v)?)
}

/// Deserializes a payload tagged with `encoding`; an error names the field path. Never
/// panics on any bytes (serde_json bounds its recursion at 128 levels).
pub fn decode<T: DeserializeOwned>(encoding: i32, bytes: &[u8]) -> Result<T, WireError> {
    if encoding != Encoding::Json as i32 {
        return Err(WireError::UnknownEncoding(encoding));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| WireError::Field {
        field: e.path().to_string(),
        source: e.into_inner(),
    })?;
    de.end().map_err(|source| WireError::Field {
        field: ".".to_string(),
        source,
    })?;
    Ok(value)
}

/// Frames a serialized request.
pub(crate) fn request<T: Serialize>(v: &T) -> Result<RaftRequest, WireError> {
    Ok(RaftRequest {
        encoding: Encoding::Json as i32,
        payload: encode(v)?,
    })
}

/// Frames a serialized reply.
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
    use crate::raft_types::{BatchResponse, LedgerBatch};

    #[test]
    fn raft_messages_survive_the_wire() {
        let entry: Entry<crate::raft_types::TypeConfig> = Entry {
            log_id: LogId::new(CommittedLeaderId::new(3, 1), 7),
            payload: EntryPayload::Normal(LedgerBatch::one(LedgerCommand::ExpireAt { now_ms: 9 })),
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
    fn an_unknown_encoding_is_refused() {
        let mut req = ledger_batch::to_wire(&LedgerBatch::default()).unwrap();
        req.encoding = 99;
        assert!(matches!(
            ledger_batch::from_wire(&req),
            Err(WireError::UnknownEncoding(99))
        ));
    }
}
