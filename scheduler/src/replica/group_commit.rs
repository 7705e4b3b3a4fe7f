//! Group commit: the writes a replica makes without waiting for their answer ride in its
//! next proposal instead of one proposal each.
//!
//! Commit-then-bind needs the ledger's answer before a bind, so a gang's `PlaceGangs` and a
//! transaction's `TxnBegin`/`TxnReserve`/`TxnDecide` are proposed when they are made. Two
//! writes need no answer before the replica goes on: `MarkBound` after a bind (the
//! placement already holds its node; only the ledger's view of it changes from assumed to
//! bound) and `Release` of a pod that finished, was evicted or failed to bind (capacity
//! comes back to the ledger a little later; nothing is placed on it meanwhile except by a
//! batch that carries the release first). Those are queued here per replica, in the order
//! they were made, and put in front of that replica's next proposal: a round that places
//! gangs then costs one Raft entry for the releases of the pods that finished since the
//! last one, the marks of the last binds and the new gangs, where it cost one entry each.
//!
//! The ledger applies a batch's commands one after another and answers each one: a refused
//! gang is refused alone (`PlaceGangs` answers per gang), and the queued writes are
//! answered as if proposed on their own. A queued write is never lost silently: the driver
//! settles each one with its answer, or with the error when the batch got none.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use phalanx_statestore::ledger::{ReplicaId, ShardId};
use phalanx_statestore::{LedgerCommand, LedgerResponse};

use crate::ledger::ReleaseReason;
use crate::ledger::sharded::{Fence, mark_bound_at, release_at};
use crate::model::ObjectKey;

/// A write queued for the replica's next proposal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Deferred {
    /// These pods of `fence.shard` are bound in the cluster.
    MarkBound { fence: Fence, pods: Vec<ObjectKey> },
    /// These placements of `fence.shard` are to be released.
    Release {
        fence: Fence,
        pods: Vec<ObjectKey>,
        reason: ReleaseReason,
    },
}

impl Deferred {
    /// The ledger commands of this write (more than one for a long pod list).
    pub fn commands(&self) -> Vec<LedgerCommand> {
        match self {
            Self::MarkBound { fence, pods } => mark_bound_at(*fence, pods),
            Self::Release {
                fence,
                pods,
                reason,
            } => release_at(*fence, pods, *reason),
        }
    }

    pub fn shard(&self) -> ShardId {
        match self {
            Self::MarkBound { fence, .. } | Self::Release { fence, .. } => fence.shard,
        }
    }
}

/// One queued write and the round it was made in.
#[derive(Clone, Debug)]
struct Queued {
    round: u64,
    write: Deferred,
}

/// Every replica's queued writes, oldest first.
#[derive(Clone, Debug, Default)]
pub struct Outbox {
    queued: BTreeMap<ReplicaId, Vec<Queued>>,
}

impl Outbox {
    /// Queues `write` for replica `by`'s next proposal (made in `round`). A write of the
    /// same kind, shard, epoch (and reason) as the last one queued joins it: one command
    /// for the marks of a round's gangs, not one each. Only the last one, so that no write
    /// moves ahead of another (a pod's mark stays ahead of its release).
    pub fn push(&mut self, by: ReplicaId, round: u64, write: Deferred) {
        let queue = self.queued.entry(by).or_default();
        if let Some(last) = queue.last_mut()
            && let Some(pods) = joinable(&mut last.write, &write)
        {
            let (Deferred::MarkBound { pods: more, .. } | Deferred::Release { pods: more, .. }) =
                write;
            // It keeps its round: the oldest write in it waits one round at most.
            pods.extend(more);
            return;
        }
        queue.push(Queued { round, write });
    }

    /// Replica `by`'s queued writes, oldest first, taken out of the outbox: for its next
    /// proposal, or because the replica stopped (whatever it held in memory is gone).
    pub fn take(&mut self, by: ReplicaId) -> Vec<Deferred> {
        self.queued
            .remove(&by)
            .unwrap_or_default()
            .into_iter()
            .map(|q| q.write)
            .collect()
    }

    /// Replica `by`'s queued writes for `shards`, taken out (the others keep their order):
    /// the replica no longer owns those shards, and their new owner writes them.
    pub fn take_shards(&mut self, by: ReplicaId, shards: &BTreeSet<ShardId>) -> Vec<Deferred> {
        let Some(queue) = self.queued.get_mut(&by) else {
            return Vec::new();
        };
        let (taken, kept): (Vec<Queued>, Vec<Queued>) = std::mem::take(queue)
            .into_iter()
            .partition(|q| shards.contains(&q.write.shard()));
        *queue = kept;
        taken.into_iter().map(|q| q.write).collect()
    }

    /// The replicas whose queue holds a write made before `round`: a round's writes wait
    /// for a proposal of the next round at most (`take` them and propose them alone).
    pub fn waiting_since_before(&self, round: u64) -> Vec<ReplicaId> {
        self.queued
            .iter()
            .filter(|(_, q)| q.iter().any(|q| q.round < round))
            .map(|(by, _)| *by)
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.queued.values().all(Vec::is_empty)
    }

    /// Pods whose release is queued: the ledger still holds them, on purpose, until the
    /// next proposal (the invariant checks do not judge them lost meanwhile).
    pub fn releasing_pods(&self) -> HashSet<String> {
        self.pods(|w| matches!(w, Deferred::Release { .. }))
    }

    /// Pods whose `MarkBound` is queued (a retry need not mark them again).
    pub fn marking_pods(&self) -> HashSet<String> {
        self.pods(|w| matches!(w, Deferred::MarkBound { .. }))
    }

    fn pods(&self, kind: impl Fn(&Deferred) -> bool) -> HashSet<String> {
        self.queued
            .values()
            .flatten()
            .filter(|q| kind(&q.write))
            .flat_map(|q| match &q.write {
                Deferred::MarkBound { pods, .. } | Deferred::Release { pods, .. } => pods.iter(),
            })
            .map(ToString::to_string)
            .collect()
    }
}

/// The pod list of `last` when `next` can join it (same kind, fence and reason).
fn joinable<'a>(last: &'a mut Deferred, next: &Deferred) -> Option<&'a mut Vec<ObjectKey>> {
    match (last, next) {
        (Deferred::MarkBound { fence, pods }, Deferred::MarkBound { fence: f, .. })
            if fence == f =>
        {
            Some(pods)
        }
        (
            Deferred::Release {
                fence,
                pods,
                reason,
            },
            Deferred::Release {
                fence: f,
                reason: r,
                ..
            },
        ) if fence == f && reason == r => Some(pods),
        _ => None,
    }
}

/// One batch: the queued writes' commands first, in the order they were made, then
/// `commands`. Also returns how many commands each write took, for [`split_answers`].
pub fn batch(
    queued: &[Deferred],
    commands: Vec<LedgerCommand>,
) -> (Vec<LedgerCommand>, Vec<usize>) {
    let mut out = Vec::new();
    let mut counts = Vec::with_capacity(queued.len());
    for write in queued {
        let cmds = write.commands();
        counts.push(cmds.len());
        out.extend(cmds);
    }
    out.extend(commands);
    (out, counts)
}

/// The answers to a [`batch`]: each queued write's own (by `counts`), then the answers to
/// the commands proposed with them. `None` when there are fewer answers than commands (an
/// answer that does not fit the batch: every write is then settled as unanswered).
pub fn split_answers(
    mut responses: Vec<LedgerResponse>,
    counts: &[usize],
) -> Option<(Vec<Vec<LedgerResponse>>, Vec<LedgerResponse>)> {
    let queued: usize = counts.iter().sum();
    if responses.len() < queued {
        return None;
    }
    let rest = responses.split_off(queued);
    let mut answers = Vec::with_capacity(counts.len());
    let mut it = responses.into_iter();
    for n in counts {
        answers.push(it.by_ref().take(*n).collect());
    }
    Some((answers, rest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use phalanx_statestore::Refusal;

    fn pod(n: &str) -> ObjectKey {
        ObjectKey::new("default", n)
    }

    const F0: Fence = Fence { shard: 0, epoch: 1 };
    const F1: Fence = Fence { shard: 1, epoch: 2 };

    #[test]
    fn queued_writes_go_first_in_the_order_they_were_made_and_get_their_own_answers() {
        let queued = vec![
            Deferred::Release {
                fence: F1,
                pods: vec![pod("done")],
                reason: ReleaseReason::Finished,
            },
            Deferred::MarkBound {
                fence: F0,
                pods: vec![pod("a"), pod("b")],
            },
        ];
        let place = LedgerCommand::ExpireAt { now_ms: 7 };
        let (cmds, counts) = batch(&queued, vec![place.clone()]);
        assert_eq!(counts, vec![1, 1]);
        assert!(
            matches!(&cmds[0], LedgerCommand::Release { shard: 1, epoch: 2, pods, .. } if pods == &["default/done"])
        );
        assert!(
            matches!(&cmds[1], LedgerCommand::MarkBound { shard: 0, pods, .. } if pods.len() == 2)
        );
        assert_eq!(cmds[2], place);
        let refused = LedgerResponse::Refused(Refusal::UnknownPod {
            pod: "default/done".into(),
        });
        let answers = vec![
            refused.clone(),
            LedgerResponse::Applied,
            LedgerResponse::Applied,
        ];
        let (mine, rest) = split_answers(answers, &counts).expect("enough answers");
        assert_eq!(mine, vec![vec![refused], vec![LedgerResponse::Applied]]);
        assert_eq!(rest, vec![LedgerResponse::Applied]);
    }

    #[test]
    fn a_write_like_the_last_one_joins_it_and_no_write_moves_ahead_of_another() {
        let mut o = Outbox::default();
        let mark = |p: &str| Deferred::MarkBound {
            fence: F0,
            pods: vec![pod(p)],
        };
        let release = |p: &str| Deferred::Release {
            fence: F0,
            pods: vec![pod(p)],
            reason: ReleaseReason::Finished,
        };
        o.push(1, 1, mark("a"));
        o.push(1, 1, mark("b"));
        o.push(
            1,
            1,
            Deferred::MarkBound {
                fence: F1,
                pods: vec![pod("c")],
            },
        );
        o.push(1, 2, release("a"));
        o.push(1, 2, release("d"));
        o.push(1, 2, mark("e"));
        let queued = o.take(1);
        assert_eq!(
            queued,
            vec![
                Deferred::MarkBound {
                    fence: F0,
                    pods: vec![pod("a"), pod("b")]
                },
                Deferred::MarkBound {
                    fence: F1,
                    pods: vec![pod("c")]
                },
                Deferred::Release {
                    fence: F0,
                    pods: vec![pod("a"), pod("d")],
                    reason: ReleaseReason::Finished
                },
                mark("e"),
            ]
        );
    }

    #[test]
    fn too_few_answers_for_the_queued_writes_is_no_answer_at_all() {
        let queued = vec![Deferred::MarkBound {
            fence: F0,
            pods: vec![pod("a")],
        }];
        let (_, counts) = batch(&queued, Vec::new());
        assert_eq!(split_answers(Vec::new(), &counts), None);
    }

    #[test]
    fn a_write_waits_for_one_round_at_most_and_a_stopped_replica_hands_its_writes_back() {
        let mut o = Outbox::default();
        o.push(
            1,
            5,
            Deferred::MarkBound {
                fence: F0,
                pods: vec![pod("a")],
            },
        );
        o.push(
            2,
            6,
            Deferred::Release {
                fence: F1,
                pods: vec![pod("b")],
                reason: ReleaseReason::Evicted,
            },
        );
        assert_eq!(o.waiting_since_before(6), vec![1]);
        assert_eq!(o.waiting_since_before(7), vec![1, 2]);
        assert_eq!(o.marking_pods(), HashSet::from(["default/a".to_string()]));
        assert_eq!(o.releasing_pods(), HashSet::from(["default/b".to_string()]));
        o.push(
            2,
            6,
            Deferred::MarkBound {
                fence: F0,
                pods: vec![pod("c")],
            },
        );
        let lost = o.take_shards(2, &BTreeSet::from([0]));
        assert_eq!(
            lost,
            vec![Deferred::MarkBound {
                fence: F0,
                pods: vec![pod("c")]
            }]
        );
        assert_eq!(o.take(2).len(), 1);
        assert!(o.take(2).is_empty());
        assert!(!o.is_empty());
        o.take(1);
        assert!(o.is_empty());
    }
}
