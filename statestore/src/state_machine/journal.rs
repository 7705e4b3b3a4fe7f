//! `ChangeJournal`: which keys of the ledger changed at which applied index, for the last
//! `max_keys` changes, so a reader that holds the state as of index `i` can fetch only
//! what changed after `i`.
//!
//! The journal lives in memory beside the state, on every replica (any may lead). It is
//! not in snapshots: a replica that opens from a snapshot or installs one starts an empty
//! journal at the snapshot's index (`floor`), and a reader asking from before it is told
//! to read in full. Log entries re-applied after a restart are journaled again.

use std::collections::{BTreeSet, VecDeque};

use crate::ledger::StateKey;

/// Most key changes kept (about 100 bytes each).
pub const JOURNAL_MAX_KEYS: usize = 200_000;

/// The keys changed by each applied index after `floor`.
#[derive(Debug)]
pub struct ChangeJournal {
    /// `(applied index, key)` in index order.
    changes: VecDeque<(u64, StateKey)>,
    /// Every change after this index is in `changes`.
    floor: u64,
    max_keys: usize,
}

impl Default for ChangeJournal {
    fn default() -> Self {
        Self::starting_at(0)
    }
}

impl ChangeJournal {
    /// An empty journal of a state as of `index`.
    pub fn starting_at(index: u64) -> Self {
        Self::with_capacity(index, JOURNAL_MAX_KEYS)
    }

    /// An empty journal keeping at most `max_keys` changes.
    pub fn with_capacity(index: u64, max_keys: usize) -> Self {
        Self {
            changes: VecDeque::new(),
            floor: index,
            max_keys: max_keys.max(1),
        }
    }

    /// Forgets everything: the state is now as of `index` (a snapshot was installed).
    pub fn reset(&mut self, index: u64) {
        self.changes.clear();
        self.floor = index;
    }

    /// The oldest index a reader may ask for changes after.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// Records that the entry at `index` wrote `keys`; drops the oldest indexes whole
    /// while more than `max_keys` changes are kept.
    pub fn record(&mut self, index: u64, keys: Vec<StateKey>) {
        let unique: BTreeSet<StateKey> = keys.into_iter().collect();
        self.changes.extend(unique.into_iter().map(|k| (index, k)));
        while self.changes.len() > self.max_keys {
            let Some((oldest, _)) = self.changes.pop_front() else {
                break;
            };
            while self.changes.front().is_some_and(|(i, _)| *i == oldest) {
                self.changes.pop_front();
            }
            self.floor = oldest;
        }
    }

    /// The keys changed after `since` up to now, or `None` when the journal does not
    /// reach back to `since` (or `since` is ahead of `applied`): read in full then.
    pub fn changed_since(&self, since: u64, applied: u64) -> Option<BTreeSet<&StateKey>> {
        if since < self.floor || since > applied {
            return None;
        }
        let start = self.changes.partition_point(|(i, _)| *i <= since);
        Some(self.changes.range(start..).map(|(_, k)| k).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> StateKey {
        StateKey::Placement(name.to_string())
    }

    #[test]
    fn changes_after_an_index_are_the_keys_written_after_it_once_each() {
        let mut j = ChangeJournal::starting_at(10);
        j.record(11, vec![pod("a"), StateKey::Usage("n".into()), pod("a")]);
        j.record(12, vec![pod("b")]);
        j.record(13, vec![pod("a")]);
        let keys = |since| {
            j.changed_since(since, 13)
                .map(|s| s.into_iter().cloned().collect::<Vec<_>>())
        };
        assert_eq!(keys(12), Some(vec![pod("a")]));
        assert_eq!(keys(11), Some(vec![pod("a"), pod("b")]));
        assert_eq!(
            keys(10),
            Some(vec![pod("a"), pod("b"), StateKey::Usage("n".into())])
        );
        assert_eq!(keys(13), Some(vec![]));
        // Before the floor, or ahead of what is applied: read in full.
        assert_eq!(keys(9), None);
        assert_eq!(keys(14), None);
    }

    #[test]
    fn a_full_journal_drops_whole_indexes_and_raises_its_floor() {
        let mut j = ChangeJournal::with_capacity(0, 3);
        j.record(1, vec![pod("a"), pod("b")]);
        j.record(2, vec![pod("c")]);
        assert_eq!(j.floor(), 0);
        j.record(3, vec![pod("d")]);
        // Index 1 went whole (not half of it): changes after 1 are still complete.
        assert_eq!(j.floor(), 1);
        assert!(j.changed_since(0, 3).is_none());
        assert_eq!(j.changed_since(1, 3).map(|s| s.len()), Some(2));
    }

    #[test]
    fn an_installed_snapshot_empties_the_journal_and_readers_from_before_it_resync() {
        let mut j = ChangeJournal::starting_at(0);
        j.record(1, vec![pod("a")]);
        j.reset(50);
        assert!(j.changed_since(1, 50).is_none());
        assert_eq!(j.changed_since(50, 50).map(|s| s.len()), Some(0));
    }
}
