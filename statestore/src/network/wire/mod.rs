//! Conversions between openraft / ledger types and the protobuf messages of
//! `phalanx-proto`: one module per wire type. Raft messages carry openraft's own types
//! serialized (JSON, tagged with `Encoding`), so openraft's types stay the contract.

pub mod append_entries;
pub mod install_snapshot;
pub mod ledger_batch;
pub mod ledger_read;
pub mod vote;

use phalanx_proto::raft::{Encoding, RaftReply, RaftRequest};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A message that could not be decoded or encoded.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The peer used an encoding this build does not know.
    #[error("unknown payload encoding {0}")]
    UnknownEncoding(i32),
    /// The payload is not valid for its type.
    #[error("payload (de)serialization failed: {0}")]
    Json(#[from] serde_json::Error),
    /// A required oneof was empty.
    #[error("message has no {0}")]
    Missing(&'static str),
}

/// Serializes `v` as a JSON payload.
pub fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, WireError> {
    Ok(serde_json::to_vec(v)?)
}

/// Deserializes a payload tagged with `encoding`.
pub fn decode<T: DeserializeOwned>(encoding: i32, bytes: &[u8]) -> Result<T, WireError> {
    if encoding != Encoding::Json as i32 {
        return Err(WireError::UnknownEncoding(encoding));
    }
    Ok(serde_json::from_slice(bytes)?)
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
