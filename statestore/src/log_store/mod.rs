//! The Raft log store: openraft's `RaftLogStorage` over `LogFile`, an append-only file
//! that is fsynced before each append, vote, truncate or purge is acknowledged.
//! Why not sled for the log: `docs/adr/0002-raft-log-durability.md`.

pub mod legacy;
mod log_file;
// Public for the codec measurement in phalanx-bench (`codec`).
pub mod record;
mod replay;

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader, StorageIOError};

pub use log_file::{COMPACT_MIN_BYTES, LOG_FILE_NAME, LogFile, synced_len};
use record::Record;
pub use replay::{CorruptLog, FrameDamage, ReplayError, SCAN_BUDGET_BYTES};

use crate::raft_types::{Entry, LogId, StorageError, TypeConfig, Vote};

/// The Raft log store. Cheap to clone: clones share one `LogFile`.
///
/// The `std::sync::Mutex` is never held across an `.await`: blocking file IO runs inside
/// `spawn_blocking`, and reads only copy from memory.
#[derive(Debug, Clone)]
pub struct FileLogStore {
    inner: Arc<Mutex<LogFile>>,
}

/// Counters for tests and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogStoreStats {
    /// Size of the log file.
    pub file_bytes: u64,
    /// Live entries held.
    pub entries: usize,
    /// Compactions since open.
    pub compactions: u64,
}

fn poisoned() -> io::Error {
    io::Error::other("raft log mutex poisoned by an earlier panic")
}

impl FileLogStore {
    /// Opens (or creates) the log store in `dir`.
    pub fn open(dir: &Path) -> io::Result<Self> {
        Ok(Self {
            inner: Arc::new(Mutex::new(LogFile::open(dir)?)),
        })
    }

    /// Current size and counts.
    pub fn stats(&self) -> io::Result<LogStoreStats> {
        let log = self.inner.lock().map_err(|_| poisoned())?;
        Ok(LogStoreStats {
            file_bytes: log.file_bytes(),
            entries: log.entry_count(),
            compactions: log.compactions(),
        })
    }

    /// Runs `f` on the log file on a blocking thread.
    async fn blocking<T, F>(&self, f: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut LogFile) -> io::Result<T> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let mut log = inner.lock().map_err(|_| poisoned())?;
            f(&mut log)
        })
        .await
        .map_err(|e| io::Error::other(format!("log io task failed: {e}")))?
    }

    fn read<T>(&self, f: impl FnOnce(&LogFile) -> T) -> Result<T, StorageError> {
        let log = self
            .inner
            .lock()
            .map_err(|_| StorageIOError::read_logs(&poisoned()))?;
        Ok(f(&log))
    }
}

fn bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let start = match range.start_bound() {
        Bound::Included(s) => *s,
        Bound::Excluded(s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(e) => e.saturating_add(1),
        Bound::Excluded(e) => *e,
        Bound::Unbounded => u64::MAX,
    };
    (start, end)
}

impl RaftLogReader<TypeConfig> for FileLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let (start, end) = bounds(&range);
        self.read(|log| log.range(start, end))
    }
}

impl RaftLogStorage<TypeConfig> for FileLogStore {
    type LogReader = FileLogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        self.read(|log| LogState {
            last_purged_log_id: log.last_purged(),
            last_log_id: log.last_log_id(),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let vote = *vote;
        self.blocking(move |log| log.write(vec![Record::Vote(vote)]))
            .await
            .map_err(|e| StorageIOError::write_vote(&e).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        self.read(LogFile::vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.blocking(move |log| log.write_unsynced(vec![Record::Committed(committed)]))
            .await
            .map_err(|e| StorageIOError::write(&e).into())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        self.read(LogFile::committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let records: Vec<Record> = entries.into_iter().map(Record::Entry).collect();
        let result = self.blocking(move |log| log.write(records)).await;
        match result {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                let err = StorageIOError::write_logs(&e).into();
                callback.log_io_completed(Err(e));
                Err(err)
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let since = log_id.index;
        self.blocking(move |log| {
            log.write(vec![Record::Truncate { since }])?;
            log.maybe_compact()
        })
        .await
        .map_err(|e| StorageIOError::write_logs(&e).into())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.blocking(move |log| {
            log.write(vec![Record::Purge(log_id)])?;
            log.maybe_compact()
        })
        .await
        .map_err(|e| StorageIOError::write_logs(&e).into())
    }
}
