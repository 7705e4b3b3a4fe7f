//! Faults injected into the replicated ledger during a simulated run, at simulated times:
//! `kill:leader@30s`, `kill:replica-2@10s`, `restart:last@40s`, `restart:replica-2@40s`,
//! `isolate:replica-1@5s`, `heal:replica-1@20s`.

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
                "--fault {text:?}: {why} (expected e.g. kill:leader@30s, kill:replica-2@10s, restart:last@40s, isolate:replica-1@5s, heal:replica-1@20s)"
            )
        };
        let (what, when) = text.split_once('@').ok_or_else(|| bad("no @TIME"))?;
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
            _ => return Err(bad("unknown action; use kill, restart, isolate or heal")),
        };
        Ok(Self {
            at_ms: parse_time_ms(when)
                .ok_or_else(|| bad("the time must be like 1500ms, 30s or 2m"))?,
            fault,
        })
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
        for bad in [
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
