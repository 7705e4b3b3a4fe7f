//! The openraft type configuration of the ledger, and what one log entry carries.

use std::io::Cursor;

use serde::{Deserialize, Serialize};

use crate::ledger::{LedgerCommand, LedgerResponse};

/// Most commands in one Raft entry (one proposal).
pub const MAX_COMMANDS_PER_BATCH: usize = 256;

/// A batch of ledger commands proposed as one Raft entry; applied in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerBatch {
    /// The commands, at most `MAX_COMMANDS_PER_BATCH` (more are refused as a whole).
    pub commands: Vec<LedgerCommand>,
}

impl LedgerBatch {
    /// A batch of one command.
    pub fn one(cmd: LedgerCommand) -> Self {
        Self {
            commands: vec![cmd],
        }
    }
}

/// What one Raft entry carries: a [`LedgerBatch`] encoded once, in postcard, by the replica
/// that proposed it, and decoded once per replica, when the entry is applied.
///
/// Why bytes and not the batch itself: openraft 0.9 gives each AppendEntries one heartbeat
/// interval (40 ms) to be encoded, sent, decoded and appended by the follower, and resends
/// the same entries after every timeout. Encoding and decoding a structured 750 KB batch took
/// 18-78 ms and 31-100 ms in a debug build on the 2-core CI host (measured per RPC), so a
/// large plan missed the deadline, was resent each heartbeat and never committed. As
/// bytes, an entry is copied, not walked, on the leader, on the wire and into each log, and
/// the deadline no longer depends on how fast this build runs serde.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct EncodedBatch(bytes::Bytes);

impl EncodedBatch {
    /// `batch` in postcard.
    pub fn encode(batch: &LedgerBatch) -> Result<Self, postcard::Error> {
        Ok(Self(postcard::to_stdvec(batch)?.into()))
    }

    /// The batch these bytes encode; an error when they encode none, or more than one.
    pub fn decode(&self) -> Result<LedgerBatch, postcard::Error> {
        let (batch, rest) = postcard::take_from_bytes(&self.0)?;
        if rest.is_empty() {
            Ok(batch)
        } else {
            Err(postcard::Error::DeserializeBadEncoding)
        }
    }

    /// Bytes already encoded (a proposal as the ledger service received it), not checked:
    /// apply decodes them, and refuses the entry when they encode no batch.
    pub fn from_encoded(bytes: impl Into<bytes::Bytes>) -> Self {
        Self(bytes.into())
    }

    /// The encoded length.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when no bytes are held (never a valid batch).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A length, not the bytes: entries are logged, and a batch may be megabytes.
impl std::fmt::Debug for EncodedBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EncodedBatch({} bytes)", self.0.len())
    }
}

impl Serialize for EncodedBatch {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for EncodedBatch {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_bytes(BytesVisitor).map(Self)
    }
}

/// Reads bytes as postcard gives them, or as a sequence of numbers (JSON).
struct BytesVisitor;

impl<'de> serde::de::Visitor<'de> for BytesVisitor {
    type Value = bytes::Bytes;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the bytes of an encoded ledger batch")
    }

    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
        Ok(bytes::Bytes::copy_from_slice(v))
    }

    fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
        while let Some(b) = seq.next_element::<u8>()? {
            v.push(b);
        }
        Ok(v.into())
    }
}

/// One response per command of a `LedgerBatch`, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchResponse {
    /// Responses, same length as the batch's commands.
    pub responses: Vec<LedgerResponse>,
}

openraft::declare_raft_types!(
    /// openraft configuration: entries carry an `EncodedBatch`, nodes are `BasicNode { addr }`.
    pub TypeConfig:
        D = EncodedBatch,
        R = BatchResponse,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
);

/// Raft node id of a replica.
pub type NodeId = u64;
/// A log entry.
pub type Entry = openraft::Entry<TypeConfig>;
/// The running Raft instance.
pub type Raft = openraft::Raft<TypeConfig>;
/// Storage errors as openraft wants them.
pub type StorageError = openraft::StorageError<NodeId>;
/// A log id.
pub type LogId = openraft::LogId<NodeId>;
/// A vote.
pub type Vote = openraft::Vote<NodeId>;
