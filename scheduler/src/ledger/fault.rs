//! Faults injected into the replicated ledger during a simulated run, at simulated times:
//! `kill:leader@30s`, `kill:replica-2@10s`, `restart:last@40s`, `restart:replica-2@40s`,
//! `isolate:replica-1@5s`, `heal:replica-1@20s`; for the scheduler replica only (sharded
//! runs): `pause:replica-2@10s` (until resumed), `pause:replica-2@10s+15s` (for 15 s) and
//! `resume:replica-2@25s`.

use std::fmt;

use crate::model::TimeMs;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LedgerFault {
    /// Stop whichever replica leads at that moment (its data is kept).
    KillLeader,
    Kill(u64),
    /// Start a stopped replica again; `None` = the one stopped most recently.
    Restart(Option<u64>),
    /// Cut a replica off the network.
    Isolate(u64),
    Heal(u64),
    /// Stall a scheduler replica (no heartbeats, no scheduling; its Raft replica keeps
    /// running, like a process stuck in its scheduling loop), for `for_ms` or until resumed.
    Pause {
        id: u64,
        for_ms: Option<TimeMs>,
    },
    Resume(u64),
}

impl LedgerFault {
    /// The replica this fault names, if it names one.
    pub fn replica(&self) -> Option<u64> {
        match self {
            Self::KillLeader | Self::Restart(None) => None,
            Self::Kill(id)
            | Self::Restart(Some(id))
            | Self::Isolate(id)
            | Self::Heal(id)
            | Self::Pause { id, .. }
            | Self::Resume(id) => Some(*id),
        }
    }

    /// Faults of the scheduler replica alone (handled by the sharded runtime, not Raft).
    pub fn is_scheduler_only(&self) -> bool {
        matches!(self, Self::Pause { .. } | Self::Resume(_))
    }
}

impl fmt::Display for LedgerFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::KillLeader => f.write_str("kill:leader"),
            Self::Kill(id) => write!(f, "kill:replica-{id}"),
            Self::Restart(None) => f.write_str("restart:last"),
            Self::Restart(Some(id)) => write!(f, "restart:replica-{id}"),
            Self::Isolate(id) => write!(f, "isolate:replica-{id}"),
            Self::Heal(id) => write!(f, "heal:replica-{id}"),
            Self::Pause { id, for_ms: None } => write!(f, "pause:replica-{id}"),
            Self::Pause {
                id,
                for_ms: Some(ms),
            } => write!(f, "pause:replica-{id} for {ms} ms"),
            Self::Resume(id) => write!(f, "resume:replica-{id}"),
        }
    }
}

/// A fault and the simulated time it happens at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduledFault {
    pub at_ms: TimeMs,
    pub fault: LedgerFault,
}

impl ScheduledFault {
    /// Parses `ACTION:TARGET@TIME`, e.g. `kill:leader@30s` (time in `ms`, `s` or `m`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = |why: &str| {
            format!(
                "--fault {text:?}: {why} (expected e.g. kill:leader@30s, kill:replica-2@10s, restart:last@40s, isolate:replica-1@5s, heal:replica-1@20s, pause:replica-2@10s+15s, resume:replica-2@25s)"
            )
        };
        let (what, when) = text.split_once('@').ok_or_else(|| bad("no @TIME"))?;
        let action = what.split_once(':').map_or(what, |(a, _)| a);
        let (when, for_ms) = match when.split_once('+') {
            Some((at, length)) => (
                at,
                Some(
                    parse_time_ms(length)
                        .filter(|ms| *ms > 0)
                        .ok_or_else(|| bad("the duration after + must be like 500ms or 15s"))?,
                ),
            ),
            None => (when, None),
        };
        if for_ms.is_some() && action != "pause" {
            return Err(bad("only pause takes a duration (+15s)"));
        }
        let (action, target) = what
            .split_once(':')
            .ok_or_else(|| bad("no ACTION:TARGET"))?;
        let replica = || -> Result<u64, String> {
            target
                .strip_prefix("replica-")
                .and_then(|n| n.parse::<u64>().ok())
                .filter(|n| (1..=9).contains(n))
                .ok_or_else(|| bad("the target must be replica-1 .. replica-9"))
        };
        let fault = match (action, target) {
            ("kill", "leader") => LedgerFault::KillLeader,
            ("kill", _) => LedgerFault::Kill(replica()?),
            ("restart", "last") => LedgerFault::Restart(None),
            ("restart", _) => LedgerFault::Restart(Some(replica()?)),
            ("isolate", _) => LedgerFault::Isolate(replica()?),
            ("heal", _) => LedgerFault::Heal(replica()?),
            ("pause", _) => LedgerFault::Pause {
                id: replica()?,
                for_ms,
            },
            ("resume", _) => LedgerFault::Resume(replica()?),
            _ => {
                return Err(bad(
                    "unknown action; use kill, restart, isolate, heal, pause or resume",
                ));
            }
        };
        Ok(Self {
            at_ms: parse_time_ms(when)
                .ok_or_else(|| bad("the time must be like 1500ms, 30s or 2m"))?,
            fault,
        })
    }
}

impl ScheduledFault {
    /// Checks that the replica it names exists among `replicas`; the error names the flag,
    /// the value and the replica count.
    pub fn check_replicas(&self, replicas: u64) -> Result<(), String> {
        match self.fault.replica() {
            Some(id) if id > replicas => Err(format!(
                "--fault {}@{}ms: replica-{id} does not exist with --replicas {replicas} (replicas are replica-1 .. replica-{replicas})",
                self.fault, self.at_ms
            )),
            _ => Ok(()),
        }
    }
}

fn parse_time_ms(text: &str) -> Option<TimeMs> {
    let (number, unit) = if let Some(n) = text.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1_000)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60_000)
    } else {
        return None;
    };
    number.parse::<u64>().ok()?.checked_mul(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_specs_parse_and_bad_ones_say_what_is_expected() {
        assert_eq!(
            ScheduledFault::parse("kill:leader@30s"),
            Ok(ScheduledFault {
                at_ms: 30_000,
                fault: LedgerFault::KillLeader
            })
        );
        assert_eq!(
            ScheduledFault::parse("restart:replica-2@1500ms").map(|f| f.fault),
            Ok(LedgerFault::Restart(Some(2)))
        );
        assert_eq!(
            ScheduledFault::parse("isolate:replica-1@2m").map(|f| f.at_ms),
            Ok(120_000)
        );
        assert_eq!(
            ScheduledFault::parse("pause:replica-2@10s+15s").map(|f| f.fault),
            Ok(LedgerFault::Pause {
                id: 2,
                for_ms: Some(15_000)
            })
        );
        assert_eq!(
            ScheduledFault::parse("resume:replica-3@20s").map(|f| (f.at_ms, f.fault)),
            Ok((20_000, LedgerFault::Resume(3)))
        );
        let nine = ScheduledFault::parse("pause:replica-9@1s").expect("parses");
        let err = nine.check_replicas(3).unwrap_err();
        assert!(
            err.contains("replica-9") && err.contains("--replicas 3"),
            "{err}"
        );
        for bad in [
            "kill:replica-2@3s+5s",
            "pause:replica-2@3s+soon",
            "kill:leader",
            "kill@3s",
            "explode:leader@3s",
            "kill:replica-0@3s",
            "kill:leader@soon",
        ] {
            let err = ScheduledFault::parse(bad).unwrap_err();
            assert!(err.contains(bad) && err.contains("expected e.g."), "{err}");
        }
    }
}
