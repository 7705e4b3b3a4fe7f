//! `ApplyContext`: what the replicated log knows about an entry that the command itself
//! cannot be trusted to say (who appended it, in which term, who the members are).
//!
//! `apply` stays a pure function of `(state, command, context)`: every replica sees the
//! same context for the same entry (the entry's log id and the membership applied before
//! it), so every replica decides the same.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::state::ReplicaId;

/// A Raft leader: the replica and the term in which it leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LeaderTerm {
    /// The leading replica (its Raft node id).
    pub replica: ReplicaId,
    /// The Raft term it leads in.
    pub term: u64,
}

impl std::fmt::Display for LeaderTerm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "replica {} in term {}", self.replica, self.term)
    }
}

/// The facts of the log about the entry being applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyContext {
    /// The leader that appended the entry (`log_id.leader_id`); `None` in process.
    pub appended_by: Option<LeaderTerm>,
    /// The Raft members (voters and learners) as of this entry; `None` in process.
    pub members: Option<BTreeSet<ReplicaId>>,
}

impl ApplyContext {
    /// The in-process ledger (`LocalLedger`, unit tests): there is no log, no leader and
    /// no membership, so the checks that need them are skipped. Only a process that is
    /// the ledger's single writer may apply commands so.
    pub const IN_PROCESS: ApplyContext = ApplyContext {
        appended_by: None,
        members: None,
    };

    /// An entry appended by `leader` while `members` were the members.
    pub fn raft(leader: LeaderTerm, members: impl IntoIterator<Item = ReplicaId>) -> Self {
        Self {
            appended_by: Some(leader),
            members: Some(members.into_iter().collect()),
        }
    }
}
