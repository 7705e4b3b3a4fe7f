//! `Record`: one framed entry of the append-only Raft log file.
//!
//! Frame: `len: u32 LE | crc32(payload): u32 LE | payload (JSON of Record)`. On open, the
//! file is replayed frame by frame; the first short or corrupt frame marks a torn tail
//! (a write that was never acknowledged) and the file is cut there.

use serde::{Deserialize, Serialize};

use super::crc32::crc32;
use crate::raft_types::{Entry, LogId, Vote};

/// Largest frame accepted on replay (a bound against reading garbage as a length).
pub const MAX_FRAME_BYTES: usize = 64 * 1024 * 1024;
const HEADER_BYTES: usize = 8;

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

/// Encodes a record as one frame.
pub fn encode(record: &Record) -> Result<Vec<u8>, serde_json::Error> {
    let payload = serde_json::to_vec(record)?;
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(HEADER_BYTES + payload.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// Decodes frames from `bytes`; returns the records and the length of the valid prefix.
pub fn decode_all(bytes: &[u8]) -> (Vec<Record>, usize) {
    let mut records = Vec::new();
    let mut pos = 0usize;
    while let Some(header) = bytes.get(pos..pos + HEADER_BYTES) {
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        if len > MAX_FRAME_BYTES {
            break;
        }
        let start = pos + HEADER_BYTES;
        let Some(payload) = bytes.get(start..start + len) else {
            break;
        };
        if crc32(payload) != crc {
            break;
        }
        let Ok(record) = serde_json::from_slice::<Record>(payload) else {
            break;
        };
        records.push(record);
        pos = start + len;
    }
    (records, pos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_or_corrupt_tail_is_cut_at_the_last_whole_frame() {
        let a = encode(&Record::Truncate { since: 3 }).unwrap();
        let b = encode(&Record::Committed(None)).unwrap();
        let mut bytes = [a.clone(), b.clone()].concat();
        let (records, valid) = decode_all(&bytes);
        assert_eq!(records.len(), 2);
        assert_eq!(valid, bytes.len());
        bytes.truncate(bytes.len() - 1);
        let (records, valid) = decode_all(&bytes);
        assert_eq!(records.len(), 1);
        assert_eq!(valid, a.len());
        let mut flipped = [a.clone(), b].concat();
        let last = flipped.len() - 1;
        flipped[last] ^= 0xFF;
        assert_eq!(decode_all(&flipped).1, a.len());
    }
}
