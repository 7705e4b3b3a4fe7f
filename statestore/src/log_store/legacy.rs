//! Records of log files written before entries carried their batch as bytes
//! (`raft_types::EncodedBatch`): the batch was serialized as a structure inside the
//! record, in postcard (format byte `0x01`) or, before that, in JSON. Replay reads them
//! with these types and turns each into today's [`Record`], so a replica upgraded across
//! the change keeps its log.

use std::io::Cursor;

use serde::{Deserialize, Serialize};

use super::record::Record;
use crate::raft_types::{BatchResponse, EncodedBatch, Entry, LedgerBatch, LogId, Vote};

openraft::declare_raft_types!(
    /// The type configuration of older files: entries carried a `LedgerBatch`.
    pub LegacyConfig:
        D = LedgerBatch,
        R = BatchResponse,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<LegacyConfig>,
        SnapshotData = Cursor<Vec<u8>>,
);

/// A record as older files hold it: the variants of [`Record`], in the same order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum LegacyRecord {
    /// A log entry whose batch is a structure.
    Entry(openraft::Entry<LegacyConfig>),
    /// As [`Record::Truncate`].
    Truncate {
        /// First deleted index.
        since: u64,
    },
    /// As [`Record::Purge`].
    Purge(LogId),
    /// As [`Record::Vote`].
    Vote(Vote),
    /// As [`Record::Committed`].
    Committed(Option<LogId>),
}

impl LegacyRecord {
    /// Today's record: the same change, an entry's batch encoded as bytes.
    pub fn upgrade(self) -> Result<Record, postcard::Error> {
        Ok(match self {
            Self::Entry(e) => Record::Entry(upgrade_entry(e)?),
            Self::Truncate { since } => Record::Truncate { since },
            Self::Purge(id) => Record::Purge(id),
            Self::Vote(v) => Record::Vote(v),
            Self::Committed(c) => Record::Committed(c),
        })
    }
}

/// An older entry as today's: its batch encoded as bytes (log replay and an older
/// leader's AppendEntries both convert through this).
pub fn upgrade_entry(e: openraft::Entry<LegacyConfig>) -> Result<Entry, postcard::Error> {
    use openraft::EntryPayload;
    Ok(Entry {
        log_id: e.log_id,
        payload: match e.payload {
            EntryPayload::Blank => EntryPayload::Blank,
            EntryPayload::Normal(batch) => EntryPayload::Normal(EncodedBatch::encode(&batch)?),
            EntryPayload::Membership(m) => EntryPayload::Membership(m),
        },
    })
}
