//! Which ledger replicas the run's faults have taken down, and whether the replicated
//! ledger still has a quorum.
//!
//! With a majority of its replicas killed or cut off the ledger cannot commit or serve a
//! linearizable read: every proposal spends its client's whole retry budget and fails, the
//! cluster never settles, and a run used to go on like that forever without a word. The
//! simulator injected those faults, so it knows when the quorum is gone: the driver then
//! waits, jumping simulated time, for a scheduled `restart`/`heal` that brings it back
//! (within a bound), or stops at once with an error naming the replicas that were lost.

use std::collections::BTreeMap;

use crate::ledger::{LedgerFault, ScheduledFault};
use crate::model::TimeMs;

/// How long (simulated) a run waits for its ledger's quorum to come back.
pub const DEFAULT_QUORUM_WAIT_MS: TimeMs = 5 * 60 * 1000;

/// The ledger replicas down, each with the fault that took it down.
#[derive(Clone, Debug)]
pub struct QuorumWatch {
    replicas: usize,
    down: BTreeMap<u64, String>,
    /// Replicas killed and not restarted, in order (`restart:last` takes the last).
    killed: Vec<u64>,
}

impl QuorumWatch {
    /// A ledger of `replicas` replicas, all up.
    pub fn new(replicas: usize) -> Self {
        Self {
            replicas,
            down: BTreeMap::new(),
            killed: Vec::new(),
        }
    }

    /// Records `fault` (named `named` in messages). `leader` is the replica that led the
    /// ledger just before a `kill:leader`.
    pub fn record(&mut self, fault: &LedgerFault, named: &str, leader: Option<u64>) {
        match fault {
            LedgerFault::Kill(id) => self.take_down(*id, named, true),
            LedgerFault::KillLeader => {
                if let Some(id) = leader {
                    self.take_down(id, named, true);
                }
            }
            LedgerFault::Isolate(id) => self.take_down(*id, named, false),
            LedgerFault::Restart(which) => {
                if let Some(id) = which.or_else(|| self.killed.last().copied()) {
                    self.killed.retain(|k| *k != id);
                    self.down.remove(&id);
                }
            }
            LedgerFault::Heal(id) => {
                if !self.killed.contains(id) {
                    self.down.remove(id);
                }
            }
            LedgerFault::Pause { .. } | LedgerFault::Resume(_) => {}
        }
    }

    fn take_down(&mut self, id: u64, named: &str, killed: bool) {
        if id == 0 || id > self.replicas as u64 {
            return;
        }
        self.down.entry(id).or_insert_with(|| named.to_string());
        if killed && !self.killed.contains(&id) {
            self.killed.push(id);
        }
    }

    /// Replicas needed for a quorum.
    pub fn needed(&self) -> usize {
        self.replicas / 2 + 1
    }

    /// Whether a replicated ledger (2 replicas or more) has lost its quorum.
    pub fn lost(&self) -> bool {
        self.replicas >= 2 && self.replicas - self.down.len().min(self.replicas) < self.needed()
    }

    /// What was lost, for the error: `replicas 2, 3 of 3 are down (kill:replica-2@10.0s,
    /// kill:replica-3@20.0s); a quorum needs 2`.
    pub fn describe(&self) -> String {
        let ids: Vec<String> = self.down.keys().map(ToString::to_string).collect();
        let why: Vec<&str> = self.down.values().map(String::as_str).collect();
        format!(
            "ledger replicas {} of {} are down ({}); a quorum needs {}",
            ids.join(", "),
            self.replicas,
            why.join(", "),
            self.needed()
        )
    }

    /// The first of `upcoming` (sorted by time) after which the quorum is back, if any.
    pub fn restored_by<'a>(
        &self,
        upcoming: impl IntoIterator<Item = &'a ScheduledFault>,
    ) -> Option<&'a ScheduledFault> {
        let mut after = self.clone();
        for f in upcoming {
            // A later kill:leader cannot be resolved ahead of time; it cannot restore.
            after.record(&f.fault, &f.fault.to_string(), None);
            if !after.lost() {
                return Some(f);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> ScheduledFault {
        ScheduledFault::parse(text).expect("a valid fault")
    }

    #[test]
    fn two_of_three_replicas_down_is_a_lost_quorum_and_a_restart_brings_it_back() {
        let mut w = QuorumWatch::new(3);
        w.record(&LedgerFault::Kill(2), "kill:replica-2@10s", None);
        assert!(!w.lost(), "one of three down keeps a quorum");
        w.record(&LedgerFault::KillLeader, "kill:leader@20s", Some(3));
        assert!(w.lost());
        let text = w.describe();
        assert!(
            text.contains("replicas 2, 3 of 3") && text.contains("kill:leader@20s"),
            "{text}"
        );
        let upcoming = [at("pause:replica-1@30s"), at("restart:last@40s")];
        let back = w.restored_by(upcoming.iter()).expect("restored");
        assert_eq!(back.at_ms, 40_000);
        w.record(&LedgerFault::Restart(None), "restart:last@40s", None);
        assert!(!w.lost());
    }

    #[test]
    fn an_isolated_replica_counts_as_down_until_healed_and_one_replica_never_loses_it() {
        let mut w = QuorumWatch::new(2);
        w.record(&LedgerFault::Isolate(1), "isolate:replica-1@5s", None);
        assert!(w.lost(), "one of two cut off: no majority");
        assert!(w.restored_by([at("kill:replica-2@9s")].iter()).is_none());
        w.record(&LedgerFault::Heal(1), "heal:replica-1@9s", None);
        assert!(!w.lost());
        let mut single = QuorumWatch::new(1);
        single.record(&LedgerFault::Kill(1), "kill:replica-1@1s", None);
        assert!(
            !single.lost(),
            "the in-process ledger has no quorum to lose"
        );
    }
}
