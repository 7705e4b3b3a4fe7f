//! `Record`: one framed entry of the append-only Raft log file.
//!
//! Frame: `len: u32 LE | crc32(payload): u32 LE | payload (JSON of Record)`, with the
//! checksum CRC-32/IEEE (`crc32fast`; the same function the hand-written table computed,
//! so files written before the switch replay unchanged). How a file is replayed, and when
//! a damaged frame is a torn tail rather than corruption: `replay.rs`.

use serde::{Deserialize, Serialize};

use crate::raft_types::{Entry, LogId, Vote};

/// Largest frame accepted on replay (a bound against reading garbage as a length).
pub const MAX_FRAME_BYTES: usize = 64 * 1024 * 1024;
/// `len` and `crc32`, 4 bytes each.
pub const HEADER_BYTES: usize = 8;

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
    /// serde_json refused the record (not expected for these types).
    #[error("record does not serialize: {0}")]
    Json(#[from] serde_json::Error),
    /// The payload would not fit the frame bound replay enforces.
    #[error("record of {bytes} bytes exceeds the frame bound of {MAX_FRAME_BYTES} bytes")]
    TooLarge {
        /// Payload size.
        bytes: usize,
    },
}

/// Encodes a record as one frame.
pub fn encode(record: &Record) -> Result<Vec<u8>, EncodeError> {
    let payload = serde_json::to_vec(record)?;
    // Refused here rather than written: replay would treat an oversized frame as damage.
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|_| payload.len() <= MAX_FRAME_BYTES)
        .ok_or(EncodeError::TooLarge {
            bytes: payload.len(),
        })?;
    let mut out = Vec::with_capacity(HEADER_BYTES + payload.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frame_checksum_is_crc32_ieee_as_the_file_format_always_was() {
        // The standard check value of CRC-32/IEEE: what the former hand-written table
        // produced, so existing files keep replaying.
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
        let frame = encode(&Record::Truncate { since: 3 }).expect("encodes");
        let payload = &frame[HEADER_BYTES..];
        assert_eq!(payload, br#"{"Truncate":{"since":3}}"#);
        assert_eq!(frame[..4], (payload.len() as u32).to_le_bytes());
        assert_eq!(frame[4..8], crc32fast::hash(payload).to_le_bytes());
    }
}
