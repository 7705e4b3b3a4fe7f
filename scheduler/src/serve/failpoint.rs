//! Crash failpoints of the two-phase coordinator, for the chaos suite only.
//!
//! `phalanx-chaos`'s `coordinator-crash` fault kills a replica while it coordinates a
//! cross-shard gang, at a chosen step: after the participants reserved (before the
//! decision is logged), after the decision is logged (before any bind), or at the bind
//! (the engine handed the committed gang over). When the last participant logs the
//! commit behind its reservation (`coord::Prepare::commit_at`), the first two are where
//! the coordinator asks it (every other participant reserved) and where the coordinator
//! learns from its reply that the commit is logged. A SIGKILL from outside cannot aim at such
//! a step; the replica must stop there itself.
//!
//! Off unless the process starts with `PHALANX_CHAOS_FAILPOINTS=1`: only then does
//! `POST /debug/crash-at/<point>` on `--http` arm a point (404 otherwise, so a production
//! replica cannot be crashed through its metrics port). The armed point exits the process
//! at once with [`CRASH_EXIT_CODE`]: no destructor, no handover, no flush beyond what is
//! already durable, as a crash would, and the exit code tells the harness it stopped
//! there and not for another reason. Each arming crashes once.

use std::sync::Mutex;
use std::sync::OnceLock;

/// The exit code of a process stopped by a failpoint.
pub const CRASH_EXIT_CODE: i32 = 86;

/// A step of the coordinator of a cross-shard gang where the replica may be stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashPoint {
    /// Every participant reserved, the commit decision not proposed yet; or, the last
    /// participant logging it, every other one reserved and the last being asked.
    AfterReservations,
    /// The commit decision logged in the ledger (by the coordinator, or by the last
    /// participant, whose reply just arrived); nothing bound.
    AfterDecision,
    /// The committed gang handed to the bind step; nothing bound.
    BeforeBind,
}

impl CrashPoint {
    pub const ALL: [CrashPoint; 3] = [
        CrashPoint::AfterReservations,
        CrashPoint::AfterDecision,
        CrashPoint::BeforeBind,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::AfterReservations => "after-reservations",
            Self::AfterDecision => "after-decision",
            Self::BeforeBind => "before-bind",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// Whether failpoints may be armed, and which one is.
#[derive(Debug, Default)]
pub struct Failpoints {
    enabled: bool,
    armed: Mutex<Option<CrashPoint>>,
}

impl Failpoints {
    pub fn new(enabled: bool) -> Self {
        Self {
            enabled,
            armed: Mutex::new(None),
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Arms `point` (replacing any armed one); refused when failpoints are off.
    pub fn arm(&self, point: CrashPoint) -> Result<(), &'static str> {
        if !self.enabled {
            return Err("failpoints are off (start with PHALANX_CHAOS_FAILPOINTS=1)");
        }
        *self.armed.lock().unwrap_or_else(|p| p.into_inner()) = Some(point);
        Ok(())
    }

    /// Whether `point` is armed; disarms it if so (each arming fires once).
    pub fn take(&self, point: CrashPoint) -> bool {
        let mut armed = self.armed.lock().unwrap_or_else(|p| p.into_inner());
        let fires = *armed == Some(point);
        if fires {
            *armed = None;
        }
        fires
    }
}

/// The process's failpoints, enabled by `PHALANX_CHAOS_FAILPOINTS=1` at first use.
pub fn global() -> &'static Failpoints {
    static GLOBAL: OnceLock<Failpoints> = OnceLock::new();
    GLOBAL.get_or_init(|| {
        Failpoints::new(std::env::var("PHALANX_CHAOS_FAILPOINTS").as_deref() == Ok("1"))
    })
}

/// Stops the process here if `point` is armed (see the module doc).
pub fn hit(point: CrashPoint, txn: &impl std::fmt::Display) {
    if global().take(point) {
        tracing::error!(point = point.name(), %txn, "failpoint: crashing the replica here (chaos)");
        std::process::exit(CRASH_EXIT_CODE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_arms_only_when_enabled_and_fires_once() {
        let off = Failpoints::new(false);
        assert!(off.arm(CrashPoint::AfterDecision).is_err());
        assert!(!off.take(CrashPoint::AfterDecision));

        let on = Failpoints::new(true);
        on.arm(CrashPoint::AfterDecision).unwrap();
        assert!(
            !on.take(CrashPoint::AfterReservations),
            "another point does not fire"
        );
        assert!(on.take(CrashPoint::AfterDecision));
        assert!(!on.take(CrashPoint::AfterDecision), "fires once per arming");
    }

    #[test]
    fn every_point_parses_from_its_name_and_nothing_else_does() {
        for p in CrashPoint::ALL {
            assert_eq!(CrashPoint::parse(p.name()), Some(p));
        }
        assert_eq!(CrashPoint::parse("after-everything"), None);
        assert_eq!(CrashPoint::parse(""), None);
    }
}
