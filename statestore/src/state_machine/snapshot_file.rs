//! The state machine's latest snapshot on disk: one file, replaced whole.
//!
//! ```text
//!  sm-snapshot:  "PHXSNAP1" | meta_len u32 LE | data_len u64 LE | crc32(meta ‖ data) u32 LE | meta (JSON) | data
//! ```
//!
//! A save writes `sm-snapshot.tmp`, `fsync`s it, renames it over `sm-snapshot` and
//! `fsync`s the directory, so a crash leaves either the old file or the new one whole
//! (docs/adr/0002-raft-log-durability.md). Only then is the snapshot reported to openraft,
//! which only then may purge the log up to it. A file that is there but damaged was
//! damaged after its save completed: the replica refuses to start with the file named,
//! since the log before it may already be purged.
//!
//! The directory is held with an exclusive lock (`sm.lock`) for as long as the store is
//! open: two processes on one replica directory would write one Raft log.
//!
//! Until 2026-12-04 snapshots were kept in sled 0.34.7 (`sm-sled/`). sled allocated about
//! 27 MiB at open whatever it held and cached the snapshot a second time; it is opened now
//! only to move such a snapshot into the file, once, after which `sm-sled/` is removed.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::StoredSnapshot;

/// The snapshot file in the replica directory.
pub const SNAPSHOT_FILE_NAME: &str = "sm-snapshot";
/// Where a save writes before it renames.
const TMP_FILE_NAME: &str = "sm-snapshot.tmp";
/// The lock held while the store is open.
const LOCK_FILE_NAME: &str = "sm.lock";
/// Sub-directory of a replica directory that held snapshots in sled, before this file.
pub const LEGACY_SLED_DIR_NAME: &str = "sm-sled";
const MAGIC: &[u8; 8] = b"PHXSNAP1";
const HEADER_LEN: usize = 8 + 4 + 8 + 4;

/// Attempts at taking the directory lock while a previous instance still holds it, and the
/// pause between them: a replica restarted in place (the simulator's quorum runs, the
/// chaos harness) may open before the last clone of the old store is dropped.
const LOCK_ATTEMPTS: u32 = 100;
const LOCK_PAUSE: Duration = Duration::from_millis(20);

/// The snapshot file of one replica directory. Cheap to clone: clones share the lock.
#[derive(Debug, Clone)]
pub(super) struct SnapshotFile {
    dir: PathBuf,
    /// Held (exclusively locked) while any clone lives.
    _lock: Arc<File>,
    /// The last log index of the stored snapshot; held across a save so "newer wins" is
    /// decided atomically (never across an await: saves run on a blocking thread).
    stored: Arc<Mutex<Option<u64>>>,
}

impl SnapshotFile {
    /// Opens (and locks) the store of `dir`, moving a snapshot left in sled into the file.
    pub(super) fn open(dir: &Path) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        let lock = lock_dir(dir, LOCK_ATTEMPTS, || std::thread::sleep(LOCK_PAUSE))?;
        match fs::remove_file(dir.join(TMP_FILE_NAME)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let store = Self {
            dir: dir.to_path_buf(),
            _lock: Arc::new(lock),
            stored: Arc::new(Mutex::new(None)),
        };
        store.migrate_from_sled()?;
        let stored = store
            .load()?
            .and_then(|s| s.meta.last_log_id)
            .map(|l| l.index);
        *store.stored_guard()? = stored;
        Ok(store)
    }

    fn path(&self) -> PathBuf {
        self.dir.join(SNAPSHOT_FILE_NAME)
    }

    fn stored_guard(&self) -> io::Result<std::sync::MutexGuard<'_, Option<u64>>> {
        self.stored
            .lock()
            .map_err(|_| io::Error::other("snapshot save lock poisoned"))
    }

    /// The stored snapshot, if any.
    pub(super) fn load(&self) -> io::Result<Option<StoredSnapshot>> {
        let path = self.path();
        let mut bytes = Vec::new();
        match File::open(&path) {
            Ok(mut f) => f.read_to_end(&mut bytes)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        decode(bytes)
            .map(Some)
            .map_err(|why| io::Error::other(format!("{}: {why}", path.display())))
    }

    /// Writes `snap` in place of the stored one unless the stored one is newer; returns
    /// whether it was written. Durable when it returns.
    pub(super) fn save(&self, snap: &StoredSnapshot) -> io::Result<bool> {
        let mut stored = self.stored_guard()?;
        let index = snap.meta.last_log_id.map(|l| l.index);
        if *stored > index {
            return Ok(false);
        }
        let meta = serde_json::to_vec(snap).map_err(io::Error::other)?;
        let tmp = self.dir.join(TMP_FILE_NAME);
        let file = File::create(&tmp)?;
        let mut out = BufWriter::new(file);
        out.write_all(&header(&meta, &snap.data))?;
        out.write_all(&meta)?;
        out.write_all(&snap.data)?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        fs::rename(&tmp, self.path())?;
        File::open(&self.dir)?.sync_all()?;
        *stored = index;
        Ok(true)
    }

    /// Moves a snapshot written by an older phalanx into sled into the file, then removes
    /// sled's directory. A crash in between leaves the sled directory, and the move is done
    /// again (the file's snapshot is never older).
    fn migrate_from_sled(&self) -> io::Result<()> {
        let legacy = self.dir.join(LEGACY_SLED_DIR_NAME);
        if !legacy.exists() {
            return Ok(());
        }
        if let Some(snap) = legacy_sled::load(&legacy)? {
            let newer_here = self
                .load()?
                .is_some_and(|s| s.meta.last_log_id >= snap.meta.last_log_id);
            if !newer_here {
                self.save(&snap)?;
            }
        }
        fs::remove_dir_all(&legacy)?;
        File::open(&self.dir)?.sync_all()?;
        tracing::info!(dir = %self.dir.display(), "moved the snapshot out of sled into {SNAPSHOT_FILE_NAME}");
        Ok(())
    }
}

/// Takes the directory's exclusive lock, trying `attempts` times and calling `on_busy`
/// between two tries while another instance holds it.
fn lock_dir(dir: &Path, attempts: u32, mut on_busy: impl FnMut()) -> io::Result<File> {
    let path = dir.join(LOCK_FILE_NAME);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    for attempt in 1..=attempts {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(fs::TryLockError::WouldBlock) if attempt < attempts => on_busy(),
            Err(fs::TryLockError::WouldBlock) => break,
            Err(fs::TryLockError::Error(e)) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::WouldBlock,
        format!(
            "{}: locked by another process or replica using this directory (tried {attempts} times)",
            path.display()
        ),
    ))
}

fn header(meta: &[u8], data: &[u8]) -> [u8; HEADER_LEN] {
    let mut crc = crc32fast::Hasher::new();
    crc.update(meta);
    crc.update(data);
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&(meta.len() as u32).to_le_bytes());
    h[12..20].copy_from_slice(&(data.len() as u64).to_le_bytes());
    h[20..24].copy_from_slice(&crc.finalize().to_le_bytes());
    h
}

/// Reads a file's bytes back into the snapshot, or says what is wrong with them.
fn decode(mut bytes: Vec<u8>) -> Result<StoredSnapshot, String> {
    if bytes.len() < HEADER_LEN || &bytes[..8] != MAGIC {
        return Err(format!(
            "not a snapshot file: {} bytes, expected the {HEADER_LEN}-byte header starting with {:?}",
            bytes.len(),
            String::from_utf8_lossy(MAGIC)
        ));
    }
    let meta_len = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
    let data_len = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(bytes[20..24].try_into().expect("4 bytes"));
    let body = (bytes.len() - HEADER_LEN) as u64;
    if meta_len as u64 + data_len != body {
        return Err(format!(
            "the header says {meta_len} bytes of meta and {data_len} of data, the file holds {body}"
        ));
    }
    let found = crc32fast::hash(&bytes[HEADER_LEN..]);
    if found != crc {
        return Err(format!(
            "checksum {found:#010x} where the header says {crc:#010x}: the snapshot was damaged after it was saved"
        ));
    }
    let data = bytes.split_off(HEADER_LEN + meta_len);
    let mut snap: StoredSnapshot =
        serde_json::from_slice(&bytes[HEADER_LEN..]).map_err(|e| format!("meta: {e}"))?;
    snap.data = data;
    Ok(snap)
}

/// Reading the sled database older versions kept their snapshot in.
mod legacy_sled {
    use super::*;

    const META_KEY: &[u8] = b"snapshot/meta";
    const DATA_KEY: &[u8] = b"snapshot/data";

    pub(super) fn load(dir: &Path) -> io::Result<Option<StoredSnapshot>> {
        let db = open(dir).map_err(|e| io::Error::other(format!("{}: {e}", dir.display())))?;
        let read = |key| db.get(key).map_err(io::Error::other);
        let (Some(meta), Some(data)) = (read(META_KEY)?, read(DATA_KEY)?) else {
            return Ok(None);
        };
        let mut snap: StoredSnapshot = serde_json::from_slice(&meta)
            .map_err(|e| io::Error::other(format!("{}: meta: {e}", dir.display())))?;
        snap.data = data.to_vec();
        Ok(Some(snap))
    }

    /// Opens sled, waiting (bounded, as for our own lock) while a previous instance's
    /// lock is still held: sled 0.34 releases it only when its background flusher thread
    /// exits, a moment after the `Db` is dropped.
    fn open(dir: &Path) -> sled::Result<sled::Db> {
        let mut attempt = 0;
        loop {
            match sled::Config::new().path(dir).open() {
                Err(sled::Error::Io(e))
                    if attempt + 1 < LOCK_ATTEMPTS
                        && e.to_string().contains("could not acquire lock") =>
                {
                    attempt += 1;
                    std::thread::sleep(LOCK_PAUSE);
                }
                opened => return opened,
            }
        }
    }

    /// Writes a snapshot as older versions did (for the test of the move).
    #[cfg(test)]
    pub(super) fn save(dir: &Path, snap: &StoredSnapshot) -> io::Result<()> {
        let db = open(dir).map_err(io::Error::other)?;
        let mut batch = sled::Batch::default();
        batch.insert(
            META_KEY,
            serde_json::to_vec(snap).map_err(io::Error::other)?,
        );
        batch.insert(DATA_KEY, snap.data.as_slice());
        db.apply_batch(batch).map_err(io::Error::other)?;
        db.flush().map_err(io::Error::other)?;
        Ok(())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use openraft::{CommittedLeaderId, LogId, SnapshotMeta, StoredMembership};

    use super::*;

    /// A snapshot at `index` of term 1 holding `data` (shared with the state machine's tests).
    pub(in crate::state_machine) fn snap(index: u64, data: &[u8]) -> StoredSnapshot {
        StoredSnapshot {
            meta: SnapshotMeta {
                last_log_id: Some(LogId::new(CommittedLeaderId::new(1, 1), index)),
                last_membership: StoredMembership::default(),
                snapshot_id: format!("1-{index}"),
            },
            data: data.to_vec(),
        }
    }

    fn index_of(s: &StoredSnapshot) -> Option<u64> {
        s.meta.last_log_id.map(|l| l.index)
    }

    #[test]
    fn a_saved_snapshot_reads_back_whole_and_an_older_one_never_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = SnapshotFile::open(dir.path()).unwrap();
        assert!(store.load().unwrap().is_none());
        assert!(store.save(&snap(10, b"ten")).unwrap());
        assert!(!store.save(&snap(5, b"five")).unwrap());
        assert!(store.save(&snap(10, b"ten again")).unwrap());
        drop(store);
        let store = SnapshotFile::open(dir.path()).unwrap();
        let back = store.load().unwrap().unwrap();
        assert_eq!(
            (index_of(&back), back.data.as_slice()),
            (Some(10), &b"ten again"[..])
        );
        assert!(
            !store.save(&snap(9, b"nine")).unwrap(),
            "the stored index survives a reopen"
        );
    }

    /// A crash between writing the new file and the rename leaves a `.tmp`: the stored
    /// snapshot is the old one, and the leftover is cleared at open.
    #[test]
    fn a_save_cut_before_its_rename_leaves_the_previous_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        SnapshotFile::open(dir.path())
            .unwrap()
            .save(&snap(3, b"three"))
            .unwrap();
        fs::write(dir.path().join(TMP_FILE_NAME), b"PHXSNAP1 torn").unwrap();
        let store = SnapshotFile::open(dir.path()).unwrap();
        assert_eq!(index_of(&store.load().unwrap().unwrap()), Some(3));
        assert!(!dir.path().join(TMP_FILE_NAME).exists());
    }

    /// The log before a snapshot may be purged, so a damaged snapshot is not skipped: the
    /// replica refuses to start, naming the file and what is wrong.
    #[test]
    fn a_damaged_snapshot_file_is_refused_with_its_path_and_the_fault() {
        let dir = tempfile::tempdir().unwrap();
        SnapshotFile::open(dir.path())
            .unwrap()
            .save(&snap(7, b"seven"))
            .unwrap();
        let path = dir.path().join(SNAPSHOT_FILE_NAME);
        let good = fs::read(&path).unwrap();
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 0x40;
        let cases: [(&[u8], &str); 3] = [
            (&flipped, "checksum"),
            (&good[..good.len() - 1], "the header says"),
            (&good[..5], "not a snapshot file"),
        ];
        for (bytes, fault) in cases {
            fs::write(&path, bytes).unwrap();
            let err = SnapshotFile::open(dir.path()).unwrap_err().to_string();
            assert!(
                err.contains(SNAPSHOT_FILE_NAME) && err.contains(fault),
                "{err}"
            );
        }
    }

    /// Two processes on one replica directory would write one Raft log.
    #[test]
    fn a_second_store_on_a_held_directory_is_refused_and_waits_for_its_release() {
        let dir = tempfile::tempdir().unwrap();
        let first = SnapshotFile::open(dir.path()).unwrap();
        let err = lock_dir(dir.path(), 2, || {}).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        assert!(err.to_string().contains(LOCK_FILE_NAME), "{err}");
        // A replica restarted in place waits for the old instance's last clone to go.
        let mut first = Some(first);
        let second = lock_dir(dir.path(), u32::MAX, || drop(first.take()));
        assert!(second.is_ok(), "{:?}", second.err());
    }

    /// A replica directory written before the file kept its snapshot in sled: it is moved
    /// into the file once, and sled's directory removed.
    #[test]
    fn a_snapshot_left_in_sled_is_moved_into_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let legacy = dir.path().join(LEGACY_SLED_DIR_NAME);
        legacy_sled::save(&legacy, &snap(12, b"from sled")).unwrap();
        let store = SnapshotFile::open(dir.path()).unwrap();
        let moved = store.load().unwrap().unwrap();
        assert_eq!(
            (index_of(&moved), moved.data.as_slice()),
            (Some(12), &b"from sled"[..])
        );
        assert!(!legacy.exists());
        assert!(!store.save(&snap(11, b"older")).unwrap());
    }
}
