//! `coordinator-crash`: a shard owner stops itself at a step of the two-phase
//! reservation of a cross-shard gang it coordinates, then is restarted from its data dir.
//!
//! A SIGKILL from outside lands wherever the process happens to be; this fault aims at
//! the three steps where a coordinator's death leaves the most to recover: after every
//! participant reserved (undecided: the reservations must be aborted, by the new owner's
//! recovery or the ledger's expiry), after the commit decision is logged (nothing bound:
//! whoever owns the shard next must bind the gang whole), and at the bind step. serve's
//! failpoints (`scheduler/src/serve/failpoint.rs`) are on for every replica of a run that
//! schedules this kind; the fault arms one on the victim over `--http`, and the cases
//! around it make a cross-shard gang in the queue of a shard the victim owns (a
//! `--max-in-flight` workload makes them anyway, one gang in eight). The victim must
//! exit with serve's crash exit code within [`CRASH_WITHIN`]; a victim that coordinated
//! no cross-shard gang by then is SIGKILLed instead, and the report says so. Either way it
//! stays down `down_ms` (past the shard lease: its shards move) and restarts.

use std::time::{Duration, Instant};

use phalanx_scheduler::serve::failpoint::{CRASH_EXIT_CODE, CrashPoint};

use crate::faults::Fault;
use crate::fleet::Fleet;

/// How long the victim has to reach the armed step.
pub const CRASH_WITHIN: Duration = Duration::from_secs(30);

/// The step drawn as the fault's `param`.
pub fn point(param: u64) -> CrashPoint {
    CrashPoint::ALL[(param % CrashPoint::ALL.len() as u64) as usize]
}

/// Arms the victim, lets the caller make the gang (`after_hit`), waits for the crash,
/// keeps the victim down and restarts it; what happened, in words.
pub fn inject(
    fleet: &mut Fleet,
    victim: u64,
    f: &Fault,
    after_hit: &mut dyn FnMut(),
) -> anyhow::Result<String> {
    let point = point(f.param);
    fleet.replica(victim)?.arm_crash(point.name())?;
    let armed = Instant::now();
    after_hit();
    let exited = fleet.replica(victim)?.wait_exit(CRASH_WITHIN)?;
    let down_from = Instant::now();
    let what = match exited {
        Some(Some(code)) if code == CRASH_EXIT_CODE => format!(
            "crashed at {} {} ms after arming",
            point.name(),
            armed.elapsed().as_millis()
        ),
        Some(code) => anyhow::bail!(
            "replica {victim}, armed to crash at {}, exited otherwise (exit code {code:?}; its log: {})",
            point.name(),
            fleet.log_of(victim).display()
        ),
        None => {
            fleet.replica(victim)?.sigkill();
            format!(
                "failpoint {} not reached within {} s (it coordinated no cross-shard gang); SIGKILLed instead",
                point.name(),
                CRASH_WITHIN.as_secs()
            )
        }
    };
    let down = Duration::from_millis(f.down_ms);
    std::thread::sleep(down.saturating_sub(down_from.elapsed()));
    fleet.spawn(victim)?;
    Ok(what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_drawn_param_names_a_step_and_the_three_draws_cover_them_all() {
        let drawn: Vec<&str> = (0..3).map(|p| point(p).name()).collect();
        assert_eq!(
            drawn,
            ["after-reservations", "after-decision", "before-bind"]
        );
        assert_eq!(point(7), point(1));
    }
}
