//! Releases the sharded runtime could not record yet, retried every round.
//!
//! A release is a fenced write: only the shard's owner at its current epoch may record it
//! (I4). When a pod finishes, or is evicted, while its shard's owner is down, paused or cut
//! off, nobody may release its placement until the leader moves the shard, up to a lease
//! later; the ledger then holds a placement whose pod the cluster no longer runs. That is
//! not a lost placement, as a commit waiting for its owner to bind it is not one: the
//! release is queued here and the invariant checks leave it alone while it waits for an
//! owner or for an answer from the ledger. A release the ledger *refused* is judged (its
//! placement would be lost).

use std::collections::HashSet;

use crate::ledger::ReleaseReason;
use crate::model::ObjectKey;

/// Why a release is still queued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReleaseWait {
    /// The pod's shard has no running owner: no replica may write for it yet.
    Owner,
    /// The ledger gave no answer (unreachable, or the outcome is unknown); a release is
    /// idempotent, so it is simply proposed again.
    Ledger(String),
    /// The ledger refused it, for this reason.
    Refused(String),
}

/// One queued release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuedRelease {
    pub pod: ObjectKey,
    pub reason: ReleaseReason,
    pub wait: ReleaseWait,
}

/// The queued releases, oldest first.
#[derive(Clone, Debug, Default)]
pub struct ReleaseQueue {
    queued: Vec<QueuedRelease>,
}

impl ReleaseQueue {
    pub fn push(&mut self, pod: ObjectKey, reason: ReleaseReason, wait: ReleaseWait) {
        self.queued.push(QueuedRelease { pod, reason, wait });
    }

    /// Every queued release, emptying the queue (they are tried again and re-queued if
    /// they still cannot be recorded).
    pub fn take(&mut self) -> Vec<QueuedRelease> {
        std::mem::take(&mut self.queued)
    }

    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    pub fn len(&self) -> usize {
        self.queued.len()
    }

    /// Pods whose release waits for an owner or for the ledger's answer: their placements
    /// are not judged as lost. Refused releases are not among them.
    pub fn waiting_pods(&self) -> HashSet<String> {
        self.queued
            .iter()
            .filter(|q| !matches!(q.wait, ReleaseWait::Refused(_)))
            .map(|q| q.pod.to_string())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_waiting_for_an_owner_or_the_ledger_is_not_judged_but_a_refused_one_is() {
        let mut q = ReleaseQueue::default();
        let pod = |n: &str| ObjectKey::new("default", n);
        q.push(pod("a"), ReleaseReason::Finished, ReleaseWait::Owner);
        q.push(
            pod("b"),
            ReleaseReason::Evicted,
            ReleaseWait::Ledger("no leader".into()),
        );
        q.push(
            pod("c"),
            ReleaseReason::Finished,
            ReleaseWait::Refused("stale epoch".into()),
        );
        let waiting = q.waiting_pods();
        assert!(waiting.contains("default/a") && waiting.contains("default/b"));
        assert!(!waiting.contains("default/c"));
        assert_eq!(q.take().len(), 3);
        assert!(q.is_empty());
    }
}
