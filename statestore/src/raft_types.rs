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

/// One response per command of a `LedgerBatch`, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchResponse {
    /// Responses, same length as the batch's commands.
    pub responses: Vec<LedgerResponse>,
}

openraft::declare_raft_types!(
    /// openraft configuration: entries carry a `LedgerBatch`, nodes are `BasicNode { addr }`.
    pub TypeConfig:
        D = LedgerBatch,
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
