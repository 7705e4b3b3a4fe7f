//! `LogFile`: the synchronous core of the Raft log store, an append-only file of framed
//! records that is fsynced (`sync_data`) before any write is acknowledged.
//!
//! Everything live is also kept in memory (entries since the last purge, vote, committed),
//! so reads never touch the disk. The file is rewritten (compacted) when dead records
//! (purged or truncated entries, old votes) make it more than twice its live size.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use super::record::{EncodeError, Record, encode};
use super::replay::{CorruptLog, ReplayError, replay};
use crate::raft_types::{Entry, LogId, Vote};

/// File name of the log inside the replica directory.
pub const LOG_FILE_NAME: &str = "raft-log";
const TMP_FILE_NAME: &str = "raft-log.compacting";
/// Below this size the file is never compacted.
pub const COMPACT_MIN_BYTES: u64 = 256 * 1024;

/// The log file and its in-memory image.
#[derive(Debug)]
pub struct LogFile {
    dir: PathBuf,
    file: File,
    /// Live entries by index, each with the size of its frame.
    entries: BTreeMap<u64, (Entry, u64)>,
    vote: Option<Vote>,
    committed: Option<LogId>,
    last_purged: Option<LogId>,
    file_bytes: u64,
    compactions: u64,
}

fn io_err(e: EncodeError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl LogFile {
    /// Opens (or creates) the log in `dir`, replays it, and cuts a torn tail. A damaged
    /// frame before the tail is an `InvalidData` error wrapping `CorruptLog` (file and
    /// offset named); nothing is cut then. The rule: `replay.rs`.
    pub fn open(dir: &Path) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        let path = dir.join(LOG_FILE_NAME);
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let replayed = replay(&bytes).map_err(|source| {
            let corrupt = CorruptLog {
                path: path.clone(),
                source,
            };
            io::Error::new(io::ErrorKind::InvalidData, corrupt)
        })?;
        if let Some(torn) = replayed.torn {
            tracing::warn!(
                path = %path.display(),
                offset = torn.offset,
                cut_bytes = bytes.len() - torn.offset,
                damage = %torn.damage,
                "cutting the torn tail of the raft log (a last write never acknowledged)"
            );
            file.set_len(replayed.valid_len as u64)?;
            file.sync_all()?;
        }
        sync_dir(dir)?;
        let mut log = Self {
            dir: dir.to_path_buf(),
            file,
            entries: BTreeMap::new(),
            vote: None,
            committed: None,
            last_purged: None,
            file_bytes: replayed.valid_len as u64,
            compactions: 0,
        };
        for (record, frame_bytes) in replayed.records {
            log.apply(record, frame_bytes);
        }
        Ok(log)
    }

    fn apply(&mut self, record: Record, frame_bytes: u64) {
        match record {
            Record::Entry(e) => {
                self.entries.insert(e.log_id.index, (e, frame_bytes));
            }
            Record::Truncate { since } => {
                self.entries.split_off(&since);
            }
            Record::Purge(id) => {
                self.entries = self.entries.split_off(&(id.index.saturating_add(1)));
                self.last_purged = Some(id);
            }
            Record::Vote(v) => self.vote = Some(v),
            Record::Committed(c) => self.committed = c,
        }
    }

    /// Writes `records`, fsyncs, then applies them in memory. Only after this returns `Ok`
    /// may the caller acknowledge them.
    pub fn write(&mut self, records: Vec<Record>) -> io::Result<()> {
        self.write_inner(records, true)
    }

    /// Writes `records` without an fsync: for information whose loss is safe (the
    /// committed log id; after a crash an older one is only a smaller known prefix, and
    /// the next fsynced write persists it anyway).
    pub fn write_unsynced(&mut self, records: Vec<Record>) -> io::Result<()> {
        self.write_inner(records, false)
    }

    fn write_inner(&mut self, records: Vec<Record>, sync: bool) -> io::Result<()> {
        let mut buf = Vec::new();
        let mut sizes = Vec::with_capacity(records.len());
        for r in &records {
            let frame = encode(r).map_err(io_err)?;
            sizes.push(frame.len() as u64);
            buf.extend_from_slice(&frame);
        }
        self.file.write_all(&buf)?;
        if sync {
            self.file.sync_data()?;
        }
        self.file_bytes = self.file_bytes.saturating_add(buf.len() as u64);
        for (r, size) in records.into_iter().zip(sizes) {
            self.apply(r, size);
        }
        Ok(())
    }

    /// Rewrites the file with live records only, if dead records dominate it.
    pub fn maybe_compact(&mut self) -> io::Result<()> {
        let live = self.live_bytes();
        if self.file_bytes < COMPACT_MIN_BYTES || self.file_bytes <= live.saturating_mul(2) {
            return Ok(());
        }
        self.compact()
    }

    fn live_bytes(&self) -> u64 {
        let entries: u64 = self.entries.values().map(|(_, s)| *s).sum();
        entries.saturating_add(1024)
    }

    /// Writes the live image to a temporary file, fsyncs it, renames it over the log and
    /// fsyncs the directory: a crash at any point leaves either the old or the new file.
    pub fn compact(&mut self) -> io::Result<()> {
        let tmp = self.dir.join(TMP_FILE_NAME);
        let mut records = Vec::new();
        if let Some(v) = self.vote {
            records.push(Record::Vote(v));
        }
        records.push(Record::Committed(self.committed));
        if let Some(p) = self.last_purged {
            records.push(Record::Purge(p));
        }
        let mut buf = Vec::new();
        for r in records {
            buf.extend_from_slice(&encode(&r).map_err(io_err)?);
        }
        for (e, _) in self.entries.values() {
            buf.extend_from_slice(&encode(&Record::Entry(e.clone())).map_err(io_err)?);
        }
        {
            let mut f = File::create(&tmp)?;
            f.write_all(&buf)?;
            f.sync_all()?;
        }
        let path = self.dir.join(LOG_FILE_NAME);
        fs::rename(&tmp, &path)?;
        sync_dir(&self.dir)?;
        self.file = OpenOptions::new().read(true).append(true).open(&path)?;
        self.file_bytes = buf.len() as u64;
        self.compactions = self.compactions.saturating_add(1);
        Ok(())
    }

    /// Entries with index in `[start, end)`.
    pub fn range(&self, start: u64, end: u64) -> Vec<Entry> {
        if start >= end {
            return Vec::new();
        }
        self.entries
            .range(start..end)
            .map(|(_, (e, _))| e.clone())
            .collect()
    }

    /// The last log id (last entry, or the last purged one).
    pub fn last_log_id(&self) -> Option<LogId> {
        self.entries
            .values()
            .next_back()
            .map(|(e, _)| e.log_id)
            .or(self.last_purged)
    }

    /// The last purged log id.
    pub fn last_purged(&self) -> Option<LogId> {
        self.last_purged
    }

    /// The saved vote.
    pub fn vote(&self) -> Option<Vote> {
        self.vote
    }

    /// The saved committed log id.
    pub fn committed(&self) -> Option<LogId> {
        self.committed
    }

    /// Size of the log file in bytes.
    pub fn file_bytes(&self) -> u64 {
        self.file_bytes
    }

    /// Number of live entries held.
    pub fn entry_count(&self) -> usize {
        self.entries.len()
    }

    /// How many times the file was compacted since open.
    pub fn compactions(&self) -> u64 {
        self.compactions
    }
}

/// fsync a directory so a create or rename in it is durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// How much of a log file's `bytes` a machine crash (the page cache lost, not just the
/// process) cannot take: up to the end of the last record that is not `Committed`. Every
/// other write is fsynced before it returns; what may follow is `Committed` records, which
/// `write_unsynced` writes without an fsync, and a torn tail. (After a compaction a
/// trailing `Committed` was fsynced after all; losing it is as safe as losing an unsynced
/// one: an older committed id is a smaller known prefix.) The chaos harness emulates a
/// power loss by cutting the file of a killed replica here.
pub fn synced_len(bytes: &[u8]) -> Result<usize, ReplayError> {
    let replayed = replay(bytes)?;
    let (mut pos, mut synced) = (0u64, 0u64);
    for (record, size) in &replayed.records {
        pos += size;
        if !matches!(record, Record::Committed(_)) {
            synced = pos;
        }
    }
    Ok(synced as usize)
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;

    fn entry(term: u64, index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Blank,
        }
    }

    #[test]
    fn reopening_replays_entries_vote_truncate_purge_and_compaction() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut log = LogFile::open(dir.path()).unwrap();
            log.write((1..=10).map(|i| Record::Entry(entry(1, i))).collect())
                .unwrap();
            log.write(vec![Record::Vote(Vote::new(2, 1))]).unwrap();
            log.write(vec![Record::Truncate { since: 8 }]).unwrap();
            log.write(vec![Record::Entry(entry(2, 8))]).unwrap();
            log.write(vec![Record::Purge(entry(1, 3).log_id)]).unwrap();
            log.write(vec![Record::Committed(Some(entry(2, 8).log_id))])
                .unwrap();
        }
        let check = |log: &LogFile| {
            assert_eq!(log.range(0, 100).len(), 5, "entries 4..=8");
            assert_eq!(log.last_log_id(), Some(entry(2, 8).log_id));
            assert_eq!(log.last_purged(), Some(entry(1, 3).log_id));
            assert_eq!(log.vote(), Some(Vote::new(2, 1)));
            assert_eq!(log.committed(), Some(entry(2, 8).log_id));
        };
        let mut log = LogFile::open(dir.path()).unwrap();
        check(&log);
        log.compact().unwrap();
        check(&log);
        drop(log);
        let log = LogFile::open(dir.path()).unwrap();
        check(&log);
        assert!(!dir.path().join(TMP_FILE_NAME).exists());
    }

    /// Writes 300 entries, one append each, and returns the file's path and length.
    fn write_300_entries(dir: &Path) -> (PathBuf, u64) {
        let mut log = LogFile::open(dir).unwrap();
        for i in 1..=300 {
            log.write(vec![Record::Entry(entry(1, i))]).unwrap();
        }
        log.write(vec![Record::Vote(Vote::new(3, 1))]).unwrap();
        let path = dir.join(LOG_FILE_NAME);
        let len = std::fs::metadata(&path).unwrap().len();
        (path, len)
    }

    #[test]
    fn a_flipped_byte_in_the_middle_of_the_log_stops_open_naming_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        let (path, len) = write_300_entries(dir.path());
        let mut bytes = std::fs::read(&path).unwrap();
        let middle = bytes.len() / 3;
        bytes[middle] ^= 0x20;
        std::fs::write(&path, &bytes).unwrap();

        let err = LogFile::open(dir.path()).expect_err("corruption before the tail is refused");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        let corrupt = err
            .get_ref()
            .and_then(|e| e.downcast_ref::<CorruptLog>())
            .expect("the error is a CorruptLog");
        assert_eq!(corrupt.path, path);
        let offset = corrupt.source.offset();
        assert!(
            offset <= middle && middle - offset < 200,
            "{offset} vs {middle}"
        );
        let text = err.to_string();
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains(&format!("offset {offset}")), "{text}");
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            len,
            "nothing is cut from a corrupt log"
        );
    }

    #[test]
    fn a_record_cut_short_at_the_end_is_dropped_and_everything_before_is_intact() {
        let dir = tempfile::tempdir().unwrap();
        let (path, len) = write_300_entries(dir.path());
        // The vote frame (the last) loses its last 5 bytes, as if the write was torn.
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(len - 5).unwrap();
        drop(f);
        let log = LogFile::open(dir.path()).unwrap();
        assert_eq!(log.entry_count(), 300);
        assert_eq!(log.last_log_id(), Some(entry(1, 300).log_id));
        assert_eq!(log.vote(), None, "the torn vote is not replayed");
        let vote_frame = encode(&Record::Vote(Vote::new(3, 1))).unwrap().len() as u64;
        assert_eq!(std::fs::metadata(&path).unwrap().len(), len - vote_frame);
        assert_eq!(log.file_bytes(), len - vote_frame);
    }

    #[test]
    fn the_synced_length_ends_before_trailing_unsynced_committed_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOG_FILE_NAME);
        let len = || std::fs::metadata(&path).unwrap().len() as usize;
        let bytes = || std::fs::read(&path).unwrap();
        let mut log = LogFile::open(dir.path()).unwrap();
        log.write(vec![Record::Entry(entry(1, 1)), Record::Entry(entry(1, 2))])
            .unwrap();
        log.write_unsynced(vec![Record::Committed(Some(entry(1, 1).log_id))])
            .unwrap();
        // A synced write after an unsynced one makes both durable.
        log.write(vec![Record::Entry(entry(1, 3))]).unwrap();
        let synced = len();
        assert_eq!(synced_len(&bytes()).unwrap(), synced);
        log.write_unsynced(vec![Record::Committed(Some(entry(1, 2).log_id))])
            .unwrap();
        log.write_unsynced(vec![Record::Committed(Some(entry(1, 3).log_id))])
            .unwrap();
        assert!(len() > synced);
        assert_eq!(synced_len(&bytes()).unwrap(), synced);
        drop(log);
        // Cut there (a power loss), plus half a frame of what was lost: it reopens with
        // every entry and the committed id of the synced prefix.
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len((synced + 7) as u64).unwrap();
        let log = LogFile::open(dir.path()).unwrap();
        assert_eq!(log.last_log_id(), Some(entry(1, 3).log_id));
        assert_eq!(log.committed(), Some(entry(1, 1).log_id));
        assert_eq!(len(), synced, "the torn half frame is cut on reopen");
    }

    #[test]
    fn a_torn_last_write_is_dropped_on_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut log = LogFile::open(dir.path()).unwrap();
            log.write(vec![Record::Entry(entry(1, 1)), Record::Entry(entry(1, 2))])
                .unwrap();
        }
        let path = dir.path().join(LOG_FILE_NAME);
        let len = std::fs::metadata(&path).unwrap().len();
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(len - 3).unwrap();
        let log = LogFile::open(dir.path()).unwrap();
        assert_eq!(log.last_log_id(), Some(entry(1, 1).log_id));
        assert!(std::fs::metadata(&path).unwrap().len() < len - 3);
    }
}
