//! Replaying the log file frame by frame, and telling a torn tail from corruption.
//!
//! The rule (also in `docs/invariants.md`, "Raft log replay"):
//!
//! - A frame is *well-formed* when its 8-byte header is present, its length is in
//!   `1..=MAX_FRAME_BYTES`, its payload lies inside the file and the payload's CRC-32
//!   equals the stored one.
//! - The first frame that is not well-formed is *damaged*. It is a **torn tail** (the
//!   last write, never acknowledged because its `fdatasync` did not return) only if no
//!   well-formed frame starts at any later offset: then the file is cut at the damaged
//!   frame. The damage may be a header cut short by the end of the file, a length that
//!   runs past the end, an out-of-range length or a bad checksum of the final frame.
//! - A damaged frame followed by any well-formed frame is **corruption**: those later
//!   frames were written after it, so it had been written whole, and its record may be
//!   acknowledged. Replay refuses, naming the offset; nothing is cut.
//! - A well-formed frame whose payload is not a `Record` is refused too (its checksum
//!   says the bytes are as written, so it is a format or software fault, not a crash).
//! - Proving that nothing well-formed follows costs one checksum per plausible header;
//!   when that work exceeds `SCAN_BUDGET_BYTES` replay refuses rather than guess.
//!
//! A corrupted final frame cannot be told from a torn one; that single record is cut.

use super::record::{DecodeError, HEADER_BYTES, MAX_FRAME_BYTES, Record, decode};

/// Most payload bytes checksummed while proving that no well-formed frame follows a
/// damaged one. Only offsets whose 4 bytes read as a length that fits in the rest of the
/// file are candidates; in postcard payloads (small varints, short strings) many are, so
/// a scan checksums up to about the square of the bytes after the damage. A torn tail is
/// one unfinished write, far below the bound; the bound is against adversarial or random
/// garbage, where replay refuses rather than guess.
pub const SCAN_BUDGET_BYTES: u64 = 1 << 30;

/// What is wrong with the first frame that is not well-formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameDamage {
    /// Fewer than 8 bytes remain.
    #[error("only {available} of the {HEADER_BYTES} header bytes are present")]
    ShortHeader {
        /// Bytes left in the file.
        available: usize,
    },
    /// The stored length is 0 or over `MAX_FRAME_BYTES`.
    #[error("length {len} is outside 1..={MAX_FRAME_BYTES}")]
    BadLength {
        /// The stored length.
        len: u32,
    },
    /// The payload would end past the end of the file.
    #[error("length {len} runs {missing} bytes past the end of the file")]
    PastEnd {
        /// The stored length.
        len: u32,
        /// Bytes missing.
        missing: usize,
    },
    /// The payload's CRC-32 differs from the stored one.
    #[error("checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum {
        /// Stored checksum.
        stored: u32,
        /// Checksum of the bytes read.
        computed: u32,
    },
}

/// Why a log file cannot be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// A damaged frame with a well-formed frame after it.
    #[error(
        "corrupt frame at offset {offset}: {damage}; a well-formed frame follows at offset \
         {next}, so this is not a torn tail"
    )]
    Corrupt {
        /// Start of the damaged frame.
        offset: usize,
        /// What is wrong with it.
        damage: FrameDamage,
        /// Start of the first well-formed frame after it.
        next: usize,
    },
    /// The scan for later frames ran out of budget.
    #[error(
        "damaged frame at offset {offset}: {damage}; proving that no well-formed frame \
         follows took more than {SCAN_BUDGET_BYTES} bytes of checksums, so a torn tail \
         cannot be told from corruption"
    )]
    Unprovable {
        /// Start of the damaged frame.
        offset: usize,
        /// What is wrong with it.
        damage: FrameDamage,
    },
    /// A frame with a valid checksum whose payload is not a record.
    #[error("frame at offset {offset} has a valid checksum but is not a log record: {source}")]
    NotARecord {
        /// Start of the frame.
        offset: usize,
        /// The decoder's complaint.
        source: DecodeError,
    },
}

/// A log file replay refused: the error `LogFile::open` returns (as `InvalidData`).
#[derive(Debug, thiserror::Error)]
#[error(
    "raft log {path} is corrupt at byte offset {offset}: {source}; refusing to start \
     (docs/operations.md, \"A corrupt Raft log\")",
    path = path.display(),
    offset = source.offset()
)]
pub struct CorruptLog {
    /// The log file.
    pub path: std::path::PathBuf,
    /// Where and why replay stopped.
    pub source: ReplayError,
}

impl ReplayError {
    /// Offset of the frame replay stopped at.
    pub fn offset(&self) -> usize {
        match self {
            Self::Corrupt { offset, .. }
            | Self::Unprovable { offset, .. }
            | Self::NotARecord { offset, .. } => *offset,
        }
    }
}

/// A torn tail replay found (and the caller cuts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornTail {
    /// Where the file is cut.
    pub offset: usize,
    /// What was wrong with the frame there.
    pub damage: FrameDamage,
}

/// The records of a replayable file.
#[derive(Debug)]
pub struct Replayed {
    /// Each record with the size of its frame, in file order.
    pub records: Vec<(Record, u64)>,
    /// Length of the well-formed prefix (the whole file unless `torn` is set).
    pub valid_len: usize,
    /// The torn tail after `valid_len`, if any.
    pub torn: Option<TornTail>,
}

/// Replays `bytes`: every record, or a torn tail to cut, or an error naming the offset.
pub fn replay(bytes: &[u8]) -> Result<Replayed, ReplayError> {
    let mut records = Vec::new();
    let mut pos = 0usize;
    while pos < bytes.len() {
        let payload = match well_formed_frame(bytes, pos) {
            Ok(payload) => payload,
            Err(damage) => {
                let torn = torn_tail_or_error(bytes, pos, damage)?;
                return Ok(Replayed {
                    records,
                    valid_len: pos,
                    torn: Some(torn),
                });
            }
        };
        let record = decode(payload).map_err(|source| ReplayError::NotARecord {
            offset: pos,
            source,
        })?;
        let frame_len = HEADER_BYTES + payload.len();
        records.push((record, frame_len as u64));
        pos += frame_len;
    }
    Ok(Replayed {
        records,
        valid_len: pos,
        torn: None,
    })
}

/// The payload of the well-formed frame at `pos`, or what is wrong with it.
fn well_formed_frame(bytes: &[u8], pos: usize) -> Result<&[u8], FrameDamage> {
    let rest = bytes.get(pos..).unwrap_or_default();
    let Some(header) = rest.get(..HEADER_BYTES) else {
        return Err(FrameDamage::ShortHeader {
            available: rest.len(),
        });
    };
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let stored = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    let len_bytes = len as usize;
    if len_bytes == 0 || len_bytes > MAX_FRAME_BYTES {
        return Err(FrameDamage::BadLength { len });
    }
    let body = &rest[HEADER_BYTES..];
    let Some(payload) = body.get(..len_bytes) else {
        return Err(FrameDamage::PastEnd {
            len,
            missing: len_bytes - body.len(),
        });
    };
    let computed = crc32fast::hash(payload);
    if computed != stored {
        return Err(FrameDamage::Checksum { stored, computed });
    }
    Ok(payload)
}

/// Decides whether the damaged frame at `pos` is a torn tail (nothing well-formed after
/// it) or corruption.
fn torn_tail_or_error(
    bytes: &[u8],
    pos: usize,
    damage: FrameDamage,
) -> Result<TornTail, ReplayError> {
    let mut budget = SCAN_BUDGET_BYTES;
    for candidate in pos.saturating_add(1)..bytes.len() {
        if let Some(len) = plausible_length(bytes, candidate) {
            let Some(left) = budget.checked_sub(len as u64) else {
                return Err(ReplayError::Unprovable {
                    offset: pos,
                    damage,
                });
            };
            budget = left;
            if well_formed_frame(bytes, candidate).is_ok() {
                return Err(ReplayError::Corrupt {
                    offset: pos,
                    damage,
                    next: candidate,
                });
            }
        }
    }
    Ok(TornTail {
        offset: pos,
        damage,
    })
}

/// The length stored at `pos` if a frame of that length would fit in the file (the only
/// candidates worth a checksum).
fn plausible_length(bytes: &[u8], pos: usize) -> Option<usize> {
    let header = bytes.get(pos..pos.checked_add(HEADER_BYTES)?)?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let fits = len > 0 && len <= MAX_FRAME_BYTES && len <= bytes.len() - pos - HEADER_BYTES;
    fits.then_some(len)
}

#[cfg(test)]
mod tests;
