//! `StateKey` and `Changes`: which parts of the `LedgerState` a command wrote, so that
//! readers can fetch only what changed since an index (see `state_machine::journal`).

use serde::{Deserialize, Serialize};

use super::state::{ShardId, TxnId};

/// One independently readable part of the ledger. The order (kind, then key) is the
/// order of a full read.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum StateKey {
    /// The single values: overcommit, `released_total`, `clock_ms`.
    Scalars,
    /// `nodes[name]`.
    Node(String),
    /// `placements[pod]`.
    Placement(String),
    /// `usage[node]`.
    Usage(String),
    /// `shards[shard]`.
    Shard(ShardId),
    /// `txns[txn]`.
    Txn(TxnId),
}

/// The keys one command wrote, when recording (a replica's state machine records; the
/// in-process ledger does not, and pays nothing).
#[derive(Debug, Default)]
pub struct Changes {
    recording: bool,
    keys: Vec<StateKey>,
}

impl Changes {
    /// Records nothing.
    pub fn off() -> Self {
        Self::default()
    }

    /// Records every key written.
    pub fn recording() -> Self {
        Self {
            recording: true,
            keys: Vec::new(),
        }
    }

    /// Notes that `key()` was written (built only when recording).
    pub fn touch(&mut self, key: impl FnOnce() -> StateKey) {
        if self.recording {
            self.keys.push(key());
        }
    }

    /// The keys written, in the order written (repeats possible).
    pub fn into_keys(self) -> Vec<StateKey> {
        self.keys
    }
}
