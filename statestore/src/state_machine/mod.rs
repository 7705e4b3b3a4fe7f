//! The Raft state machine: `ledger::apply` over an in-memory `LedgerState`, with the
//! latest snapshot in a file of its own (`snapshot_file.rs`).
//!
//! The state itself is not written to disk on every apply: the fsynced Raft log is the
//! durable record, and on restart openraft re-applies the committed entries after the
//! last snapshot. A snapshot is written to a new file, fsynced, renamed over the old one
//! and the directory fsynced (`docs/adr/0002-raft-log-durability.md`), and only then
//! reported to openraft, which only then may purge the log up to it. Its bytes are not
//! kept in memory: openraft asks for them only to send a follower the snapshot, and they
//! are read from the file then.

use std::io::{self, Cursor};
use std::path::Path;
use std::sync::{Arc, RwLock};

use openraft::storage::RaftStateMachine;
use openraft::{
    BasicNode, EntryPayload, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageIOError,
    StoredMembership,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

pub mod journal;
mod snapshot_file;

use crate::ledger::bounds;
use crate::ledger::{
    ApplyContext, Changes, LeaderTerm, LedgerCommand, LedgerResponse, LedgerState, Refusal,
    StateKey, apply_recording,
};
use crate::raft_types::{
    BatchResponse, EncodedBatch, Entry, LogId, MAX_COMMANDS_PER_BATCH, NodeId, StorageError,
    TypeConfig,
};
pub use journal::ChangeJournal;
pub use snapshot_file::SNAPSHOT_FILE_NAME;
use snapshot_file::SnapshotFile;

/// The state machine's in-memory state, shared with readers.
#[derive(Debug, Default)]
pub struct SmState {
    /// The ledger.
    pub ledger: LedgerState,
    /// Last applied log id.
    pub last_applied: Option<LogId>,
    /// Last applied membership.
    pub last_membership: StoredMembership<NodeId, BasicNode>,
    /// Keys changed per applied index (recent ones), for incremental reads.
    pub journal: ChangeJournal,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, BasicNode>,
    #[serde(skip)]
    data: Vec<u8>,
}

/// Read access to the applied ledger, for serving reads after `ensure_linearizable`.
#[derive(Debug, Clone)]
pub struct LedgerReader {
    shared: Arc<RwLock<SmState>>,
    shard_moves: Arc<watch::Sender<u64>>,
}

impl LedgerReader {
    /// Changes each time an applied `AssignShard` set a shard's owner and epoch, and when
    /// a snapshot is installed (it may have moved any): the scheduler's loop wakes on it
    /// rather than waiting out its period (`serve/wakeup.rs`). A refused one changes
    /// nothing.
    pub fn shard_moves(&self) -> watch::Receiver<u64> {
        self.shard_moves.subscribe()
    }

    /// Runs `f` on the applied ledger and the last applied log id.
    pub fn read<T>(&self, f: impl FnOnce(&LedgerState, Option<LogId>) -> T) -> T {
        self.read_with_journal(|state, applied, _| f(state, applied))
    }

    /// Runs `f` on the applied ledger, the last applied log id and the change journal,
    /// all as of the same moment.
    pub fn read_with_journal<T>(
        &self,
        f: impl FnOnce(&LedgerState, Option<LogId>, &ChangeJournal) -> T,
    ) -> T {
        let guard = self
            .shared
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&guard.ledger, guard.last_applied, &guard.journal)
    }
}

/// The state machine handed to openraft.
#[derive(Debug)]
pub struct LedgerStateMachine {
    shared: Arc<RwLock<SmState>>,
    store: SnapshotFile,
    shard_moves: Arc<watch::Sender<u64>>,
}

impl LedgerStateMachine {
    /// Opens the state machine in `dir`, restoring the last snapshot if there is one.
    pub fn open(dir: &Path) -> io::Result<Self> {
        let store = SnapshotFile::open(dir)?;
        let mut state = SmState::default();
        if let Some(snap) = store.load()? {
            state.ledger = serde_json::from_slice(&snap.data).map_err(io::Error::other)?;
            state.last_applied = snap.meta.last_log_id;
            state.last_membership = snap.meta.last_membership.clone();
            state.journal =
                ChangeJournal::starting_at(snap.meta.last_log_id.map_or(0, |l| l.index));
        }
        Ok(Self {
            shared: Arc::new(RwLock::new(state)),
            store,
            shard_moves: Arc::new(watch::Sender::new(0)),
        })
    }

    /// A reader sharing this state machine's state.
    pub fn reader(&self) -> LedgerReader {
        LedgerReader {
            shared: Arc::clone(&self.shared),
            shard_moves: Arc::clone(&self.shard_moves),
        }
    }

    /// Tells the readers' subscribers that shards may have moved.
    fn note_shard_moves(&self) {
        self.shard_moves.send_modify(|n| *n += 1);
    }

    fn write_guard(&self) -> Result<std::sync::RwLockWriteGuard<'_, SmState>, StorageError> {
        self.shared.write().map_err(|_| {
            StorageIOError::write_state_machine(&io::Error::other("state machine lock poisoned"))
                .into()
        })
    }
}

/// Applies one entry's batch: refused whole (one refusal, nothing applied) when its bytes
/// are over `bounds::MAX_ENTRY_BYTES` or encode no batch, else as [`apply_batch`]. Every
/// replica holds the same bytes, so each one decides the same.
pub fn apply_entry(
    ledger: &mut LedgerState,
    batch: &EncodedBatch,
    ctx: &ApplyContext,
    changes: &mut Changes,
) -> BatchResponse {
    let refuse = |refusal| BatchResponse {
        responses: vec![LedgerResponse::Refused(refusal)],
    };
    if batch.len() > bounds::MAX_ENTRY_BYTES {
        return refuse(Refusal::TooLarge {
            what: "bytes in one entry".to_string(),
            count: batch.len(),
            limit: bounds::MAX_ENTRY_BYTES,
        });
    }
    match batch.decode() {
        Ok(decoded) => apply_batch(ledger, &decoded.commands, ctx, changes),
        Err(e) => refuse(Refusal::UndecodableEntry {
            bytes: batch.len(),
            reason: e.to_string(),
        }),
    }
}

/// Applies one batch: each command in order, as the entry `ctx` describes, noting the keys
/// written in `changes`; a batch over `MAX_COMMANDS_PER_BATCH` commands is refused whole
/// (one refusal, nothing applied).
pub fn apply_batch(
    ledger: &mut LedgerState,
    commands: &[LedgerCommand],
    ctx: &ApplyContext,
    changes: &mut Changes,
) -> BatchResponse {
    if commands.len() > MAX_COMMANDS_PER_BATCH {
        return BatchResponse {
            responses: vec![LedgerResponse::Refused(Refusal::TooLarge {
                what: "commands in one batch".to_string(),
                count: commands.len(),
                limit: MAX_COMMANDS_PER_BATCH,
            })],
        };
    }
    BatchResponse {
        responses: commands
            .iter()
            .map(|c| apply_recording(ledger, c, ctx, changes))
            .collect(),
    }
}

/// What the log says about an entry: the leader that appended it (the leader id in its
/// log id) and the members as of the membership applied before it. Both are the same on
/// every replica, so `apply` stays deterministic.
fn entry_context(log_id: &LogId, membership: &StoredMembership<NodeId, BasicNode>) -> ApplyContext {
    ApplyContext::raft(
        LeaderTerm {
            replica: log_id.leader_id.node_id,
            term: log_id.leader_id.term,
        },
        membership.nodes().map(|(id, _)| *id),
    )
}

/// Builds snapshots from a shared state.
#[derive(Debug)]
pub struct LedgerSnapshotBuilder {
    shared: Arc<RwLock<SmState>>,
    store: SnapshotFile,
}

impl RaftSnapshotBuilder<TypeConfig> for LedgerSnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let snap = {
            let s = self
                .shared
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let id = s.last_applied.map_or_else(
                || "0-0".to_string(),
                |l| format!("{}-{}", l.leader_id.term, l.index),
            );
            StoredSnapshot {
                meta: SnapshotMeta {
                    last_log_id: s.last_applied,
                    last_membership: s.last_membership.clone(),
                    snapshot_id: id,
                },
                data: s.ledger.to_canonical_bytes(),
            }
        };
        let store = self.store.clone();
        let signature = snap.meta.signature();
        let snap = tokio::task::spawn_blocking(move || store.save(&snap).map(|_| snap))
            .await
            .map_err(io::Error::other)
            .and_then(|r| r)
            .map_err(|e| StorageIOError::write_snapshot(Some(signature), &e))?;
        Ok(Snapshot {
            meta: snap.meta,
            snapshot: Box::new(Cursor::new(snap.data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for LedgerStateMachine {
    type SnapshotBuilder = LedgerSnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId>, StoredMembership<NodeId, BasicNode>), StorageError> {
        let s = self
            .shared
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok((s.last_applied, s.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<BatchResponse>, StorageError>
    where
        I: IntoIterator<Item = Entry> + openraft::OptionalSend,
        I::IntoIter: openraft::OptionalSend,
    {
        let mut guard = self.write_guard()?;
        let s = &mut *guard;
        let mut out = Vec::new();
        let mut shards_moved = false;
        for entry in entries {
            s.last_applied = Some(entry.log_id);
            let response = match entry.payload {
                EntryPayload::Blank => BatchResponse::default(),
                EntryPayload::Normal(batch) => {
                    let ctx = entry_context(&entry.log_id, &s.last_membership);
                    let mut changes = Changes::recording();
                    let r = apply_entry(&mut s.ledger, &batch, &ctx, &mut changes);
                    let keys = changes.into_keys();
                    shards_moved |= keys.iter().any(|k| matches!(k, StateKey::Shard(_)));
                    s.journal.record(entry.log_id.index, keys);
                    r
                }
                EntryPayload::Membership(m) => {
                    s.last_membership = StoredMembership::new(Some(entry.log_id), m);
                    BatchResponse::default()
                }
            };
            out.push(response);
        }
        drop(guard);
        if shards_moved {
            self.note_shard_moves();
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        LedgerSnapshotBuilder {
            shared: Arc::clone(&self.shared),
            store: self.store.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let ledger: LedgerState = serde_json::from_slice(&data)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        let snap = StoredSnapshot {
            meta: meta.clone(),
            data,
        };
        let store = self.store.clone();
        let _saved = tokio::task::spawn_blocking(move || store.save(&snap))
            .await
            .map_err(io::Error::other)
            .and_then(|r| r)
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        let mut s = self.write_guard()?;
        s.ledger = ledger;
        s.last_applied = meta.last_log_id;
        s.last_membership = meta.last_membership.clone();
        // The changes that led here are not in the snapshot: readers from before it
        // read in full.
        let index = meta.last_log_id.map_or(0, |l| l.index);
        s.journal.reset(index);
        drop(s);
        self.note_shard_moves();
        // Only a leader's InstallSnapshot lands here (a local build goes through
        // `build_snapshot`): operators and phalanx-chaos's `snapshot-catchup` read this
        // line as the proof that a follower was caught up by snapshot, not by log.
        tracing::info!(
            index,
            snapshot_id = %meta.snapshot_id,
            "installed a snapshot sent by the leader"
        );
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let store = self.store.clone();
        let stored = tokio::task::spawn_blocking(move || store.load())
            .await
            .map_err(io::Error::other)
            .and_then(|r| r)
            .map_err(|e| StorageIOError::read_snapshot(None, &e))?;
        Ok(stored.map(|snap| Snapshot {
            meta: snap.meta,
            snapshot: Box::new(Cursor::new(snap.data)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, LogId};

    use super::*;

    fn snap(index: u64, ledger: &LedgerState) -> StoredSnapshot {
        snapshot_file::tests::snap(index, &ledger.to_canonical_bytes())
    }

    fn entry(term: u64, leader: u64, index: u64, payload: EntryPayload<TypeConfig>) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, leader), index),
            payload,
        }
    }

    fn assign(owner: u64, epoch: u64, proposer: LeaderTerm) -> EntryPayload<TypeConfig> {
        EntryPayload::Normal(
            EncodedBatch::encode(&crate::raft_types::LedgerBatch::one(
                LedgerCommand::AssignShard {
                    shard: 0,
                    owner,
                    epoch,
                    proposer: Some(proposer),
                },
            ))
            .unwrap(),
        )
    }

    /// The state machine judges `AssignShard` by the leader id in each entry's log id and
    /// the membership applied before it; it journals what changed, and an installed
    /// snapshot starts the journal afresh at its index.
    #[tokio::test]
    async fn entries_are_judged_by_the_leader_that_appended_them_and_journaled_until_a_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let mut sm = LedgerStateMachine::open(dir.path()).unwrap();
        let members: std::collections::BTreeMap<u64, BasicNode> =
            (1..=3).map(|id| (id, BasicNode::default())).collect();
        let membership =
            openraft::Membership::new(vec![members.keys().copied().collect()], members);
        let deposed = LeaderTerm {
            replica: 1,
            term: 4,
        };
        let current = LeaderTerm {
            replica: 2,
            term: 5,
        };
        let mut moves = sm.reader().shard_moves();
        let responses = sm
            .apply([
                entry(4, 1, 1, EntryPayload::Membership(membership)),
                entry(5, 2, 2, assign(1, 1, deposed)),
                entry(5, 2, 3, assign(2, 1, current)),
                entry(5, 2, 4, assign(9, 2, current)),
            ])
            .await
            .unwrap();
        let refusals: Vec<Option<&Refusal>> = responses
            .iter()
            .map(|r| r.responses.first().and_then(LedgerResponse::refusal))
            .collect();
        assert!(refusals[0].is_none());
        assert!(
            matches!(refusals[1], Some(Refusal::DeposedLeader { proposer, appended_by, .. })
                if *proposer == deposed && *appended_by == current),
            "{refusals:?}"
        );
        assert!(refusals[2].is_none(), "{refusals:?}");
        assert!(
            matches!(refusals[3], Some(Refusal::UnknownOwner { owner: 9, .. })),
            "{refusals:?}"
        );
        let reader = sm.reader();
        let changed = reader.read_with_journal(|_, _, j| {
            j.changed_since(0, 4)
                .map(|keys| keys.into_iter().cloned().collect::<Vec<_>>())
        });
        assert_eq!(changed, Some(vec![crate::ledger::StateKey::Shard(0)]));
        assert!(
            moves.has_changed().unwrap(),
            "an applied AssignShard wakes the loop"
        );
        moves.mark_unchanged();
        sm.apply([entry(5, 2, 5, assign(9, 3, current))])
            .await
            .unwrap();
        assert!(
            !moves.has_changed().unwrap(),
            "a refused AssignShard moved nothing"
        );

        let snapshot = snap(10, &reader.read(|s, _| s.clone()));
        sm.install_snapshot(&snapshot.meta, Box::new(Cursor::new(snapshot.data.clone())))
            .await
            .unwrap();
        let (floor, stale) =
            reader.read_with_journal(|_, _, j| (j.floor(), j.changed_since(4, 10).is_none()));
        assert_eq!(floor, 10);
        assert!(stale, "a reader from before the snapshot must resync");
        assert!(
            moves.has_changed().unwrap(),
            "a snapshot may move any shard"
        );
    }

    #[test]
    fn an_older_snapshot_never_replaces_a_newer_one_and_reopen_restores_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let mut newer = LedgerState::new();
        newer.released_total = 42;
        {
            let sm = LedgerStateMachine::open(dir.path()).unwrap();
            assert!(sm.store.save(&snap(10, &newer)).unwrap());
            assert!(!sm.store.save(&snap(5, &LedgerState::new())).unwrap());
        }
        let sm = LedgerStateMachine::open(dir.path()).unwrap();
        let (applied, released) = sm.reader().read(|s, a| (a, s.released_total));
        assert_eq!(applied.map(|l| l.index), Some(10));
        assert_eq!(released, 42);
    }
}
