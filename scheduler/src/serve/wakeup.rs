//! `Wakeups`: what ends the serve loop's wait before its period is up.
//!
//! A failover otherwise waits for the loop's period up to three times in a row: the new
//! Raft leader's period to take up its duties, the leader's period to see that a replica
//! refuses its connections and move that replica's shards, then the new owner's period
//! to see the shards it was given. With the chaos fleet's 250 ms period that is up to
//! 750 ms of waiting in a failover that should take half a second. So the loop also
//! wakes when:
//!
//! - the Raft leader or the voters change (the ledger replica's metrics);
//! - a peer starts refusing connections, while this replica leads (only the leader acts
//!   on it, `liveness.rs`);
//! - the applied ledger moved a shard (`LedgerReader::shard_moves`): the new owner
//!   starts its cycle, and the old one stops binding, at once.
//!
//! All three are rare next to the period (a failover, a rebalance, a membership step), so
//! waking costs a few extra periods in a failover and nothing in steady state; the loop
//! still keeps a floor between two periods (`MIN_GAP`).

use std::time::Duration;

use openraft::{BasicNode, RaftMetrics};
use tokio::sync::watch;

use phalanx_statestore::ledger::ReplicaId;

type Metrics = RaftMetrics<u64, BasicNode>;

/// The least time between the starts of two periods, however many wakeups arrive.
pub const MIN_GAP: Duration = Duration::from_millis(10);

/// Why a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The period was up.
    Period,
    /// The Raft leader or the voters changed.
    Raft,
    /// A peer started refusing this leader's connections.
    Refusal,
    /// The applied ledger moved a shard.
    ShardMoved,
}

impl Wake {
    /// The `reason` label of `phalanx_loop_wakeups_total`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Period => "period",
            Self::Raft => "raft",
            Self::Refusal => "refusal",
            Self::ShardMoved => "shard_moved",
        }
    }
}

/// The sources one replica's loop waits on. A source whose sender is gone (the ledger
/// replica shut down) is dropped, so it can never wake the loop in a busy loop.
#[derive(Debug)]
pub struct Wakeups {
    me: ReplicaId,
    raft: Option<watch::Receiver<Metrics>>,
    refusals: Option<watch::Receiver<u64>>,
    shards: Option<watch::Receiver<u64>>,
    /// The leader and voters last seen: other metrics (log indexes) change all the time.
    seen: (Option<u64>, Vec<u64>),
}

fn raft_key(m: &Metrics) -> (Option<u64>, Vec<u64>) {
    let voters = m.membership_config.membership().voter_ids().collect();
    (m.current_leader, voters)
}

/// Waits for the next change of `rx`, or forever once its sender is gone (which drops it).
async fn changed<T>(rx: &mut Option<watch::Receiver<T>>) {
    match rx {
        Some(r) => {
            if r.changed().await.is_err() {
                *rx = None;
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}

impl Wakeups {
    pub fn new(
        me: ReplicaId,
        mut raft: watch::Receiver<Metrics>,
        mut refusals: watch::Receiver<u64>,
        mut shards: watch::Receiver<u64>,
    ) -> Self {
        let seen = raft_key(&raft.borrow_and_update());
        refusals.mark_unchanged();
        shards.mark_unchanged();
        Self {
            me,
            raft: Some(raft),
            refusals: Some(refusals),
            shards: Some(shards),
            seen,
        }
    }

    fn leads(&self) -> bool {
        self.seen.0 == Some(self.me)
    }

    /// Waits up to `timeout` for a reason to run the next period early.
    pub async fn wait(&mut self, timeout: Duration) -> Wake {
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                () = &mut deadline => return Wake::Period,
                () = changed(&mut self.raft) => {
                    let key = self.raft.as_mut().map(|r| raft_key(&r.borrow_and_update()));
                    if let Some(key) = key.filter(|k| *k != self.seen) {
                        self.seen = key;
                        return Wake::Raft;
                    }
                }
                () = changed(&mut self.refusals) => {
                    if self.leads() {
                        return Wake::Refusal;
                    }
                }
                () = changed(&mut self.shards) => return Wake::ShardMoved,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use openraft::{Membership, StoredMembership};

    use super::*;

    struct Sources {
        raft: watch::Sender<Metrics>,
        refusals: watch::Sender<u64>,
        shards: watch::Sender<u64>,
    }

    fn wakeups(me: ReplicaId) -> (Sources, Wakeups) {
        let (raft, raft_rx) = watch::channel(Metrics::new_initial(me));
        let (refusals, refusals_rx) = watch::channel(0);
        let (shards, shards_rx) = watch::channel(0);
        let w = Wakeups::new(me, raft_rx, refusals_rx, shards_rx);
        (
            Sources {
                raft,
                refusals,
                shards,
            },
            w,
        )
    }

    const PERIOD: Duration = Duration::from_millis(250);

    #[tokio::test(start_paused = true)]
    async fn only_a_new_leader_or_new_voters_wake_the_loop_not_log_progress() {
        let (src, mut w) = wakeups(1);
        src.raft.send_modify(|m| m.last_log_index = Some(7));
        assert_eq!(w.wait(PERIOD).await, Wake::Period);
        src.raft.send_modify(|m| m.current_leader = Some(2));
        assert_eq!(w.wait(PERIOD).await, Wake::Raft);
        let members = Membership::new(vec![[1, 2, 3].into()], ());
        src.raft.send_modify(|m| {
            m.membership_config = StoredMembership::new(None, members).into();
        });
        assert_eq!(w.wait(PERIOD).await, Wake::Raft);
        src.raft.send_modify(|m| m.last_applied = None);
        assert_eq!(w.wait(PERIOD).await, Wake::Period);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_wakes_the_leader_only_and_a_shard_move_wakes_everyone() {
        let (src, mut w) = wakeups(1);
        src.refusals.send_modify(|n| *n += 1);
        assert_eq!(w.wait(PERIOD).await, Wake::Period, "a follower sleeps on");
        src.raft.send_modify(|m| m.current_leader = Some(1));
        assert_eq!(w.wait(PERIOD).await, Wake::Raft);
        src.refusals.send_modify(|n| *n += 1);
        assert_eq!(w.wait(PERIOD).await, Wake::Refusal);
        src.shards.send_modify(|n| *n += 1);
        assert_eq!(w.wait(PERIOD).await, Wake::ShardMoved);
    }

    #[tokio::test(start_paused = true)]
    async fn a_source_whose_sender_is_gone_never_wakes_the_loop_again() {
        let (src, mut w) = wakeups(1);
        drop(src);
        let started = tokio::time::Instant::now();
        for _ in 0..3 {
            assert_eq!(w.wait(PERIOD).await, Wake::Period);
        }
        assert_eq!(started.elapsed(), PERIOD * 3);
    }
}
