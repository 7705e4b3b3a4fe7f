//! Runs scheduling cycles against the simulated cluster: snapshot → cycle → perform the plan
//! → check invariants → advance simulated time, until nothing changes (quiescent), a fixed
//! number of cycles has run, or a time horizon is reached.
//!
//! Quiescent means a whole cycle made no bind, no eviction and no PodGroup phase change and
//! no simulated pod is still due to finish. While pods are running towards their end, idle
//! cycles are skipped by jumping simulated time to the next pod completion.

use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::cluster::sim::SimCluster;
use crate::framework::cycle::pending_reason;
use crate::framework::{CyclePlan, SchedulerConf, run_cycle};
use crate::invariants::{self, Violation};
use crate::model::{ObjectKey, TimeMs};

#[derive(Clone, Debug)]
pub struct DriverOptions {
    pub scheduler_name: String,
    /// Simulated time between cycles (the schedule period).
    pub period_ms: TimeMs,
    /// Run exactly this many cycles instead of until quiescent.
    pub exact_cycles: Option<u32>,
    /// A bound on cycles when running until quiescent.
    pub max_cycles: u32,
    /// Stop once simulated time reaches this.
    pub horizon_ms: Option<TimeMs>,
    pub check_invariants: bool,
    /// I2 is off when gang scheduling is deliberately disabled (the demo's "without gang").
    pub check_gang_atomicity: bool,
}

impl Default for DriverOptions {
    fn default() -> Self {
        Self {
            scheduler_name: crate::model::DEFAULT_SCHEDULER_NAME.to_string(),
            period_ms: 1_000,
            exact_cycles: None,
            max_cycles: 100_000,
            horizon_ms: None,
            check_invariants: true,
            check_gang_atomicity: true,
        }
    }
}

#[derive(Clone, Debug)]
pub struct CycleStats {
    pub cycle: u32,
    pub at_ms: TimeMs,
    pub duration: Duration,
    pub binds: usize,
    pub evictions: usize,
    pub phase_changes: usize,
    pub finished_pods: usize,
}

#[derive(Debug, Default)]
pub struct RunOutcome {
    pub cycles: u32,
    pub stats: Vec<CycleStats>,
    pub violations: Vec<(u32, Violation)>,
    /// Jobs (PodGroups, or single pods) with pods still pending after the last cycle, and why.
    pub pending: Vec<(ObjectKey, String)>,
    pub quiescent: bool,
    pub bind_errors: Vec<String>,
}

impl RunOutcome {
    pub fn total_binds(&self) -> usize {
        self.stats.iter().map(|s| s.binds).sum()
    }
}

pub fn drive(
    sim: &mut SimCluster,
    conf: &SchedulerConf,
    opts: &DriverOptions,
    mut on_cycle: impl FnMut(&CycleStats),
) -> RunOutcome {
    let mut outcome = RunOutcome::default();
    let mut finished_pods = 0;
    loop {
        if let Some(n) = opts.exact_cycles {
            if outcome.cycles >= n {
                break;
            }
        } else if outcome.cycles >= opts.max_cycles {
            break;
        }
        let snapshot = sim.snapshot();
        let started = Instant::now();
        let (plan, session) = run_cycle(&snapshot, conf, &opts.scheduler_name);
        let duration = started.elapsed();

        let phase_changes = plan
            .status_updates
            .iter()
            .filter(|(key, status)| {
                sim.pod_group(key)
                    .is_some_and(|g| g.status.phase != status.phase)
            })
            .count();
        perform(sim, &plan, &mut outcome.bind_errors);
        sim.settle();
        outcome.cycles += 1;
        let cycle = outcome.cycles;
        if opts.check_invariants {
            let mut found = invariants::check_no_double_booking(sim);
            if opts.check_gang_atomicity {
                found.extend(invariants::check_gang_atomicity(sim));
            }
            found.extend(invariants::check_no_lost_placement(sim, &plan));
            outcome
                .violations
                .extend(found.into_iter().map(|v| (cycle, v)));
        }
        outcome.pending = session
            .state
            .jobs
            .iter()
            .enumerate()
            .filter_map(|(j, job)| {
                let pending = session.state.pending_tasks(j).count();
                (pending > 0).then(|| {
                    let why = pending_reason(&session, j).unwrap_or_else(|| {
                        "not reached this cycle (queue turns ended first)".to_string()
                    });
                    (job.key().clone(), why)
                })
            })
            .collect();
        let stats = CycleStats {
            cycle,
            at_ms: sim.now_ms(),
            duration,
            binds: plan.bind_count(),
            evictions: plan.evictions.len(),
            phase_changes,
            finished_pods,
        };
        on_cycle(&stats);
        let changed =
            stats.binds > 0 || stats.evictions > 0 || stats.phase_changes > 0 || finished_pods > 0;
        outcome.stats.push(stats);

        let next = sim.now_ms() + opts.period_ms;
        if opts.horizon_ms.is_some_and(|h| next > h) {
            break;
        }
        if opts.exact_cycles.is_some() || changed {
            finished_pods = sim.advance_to(next);
        } else if let Some(t) = earliest(sim.next_event_ms(), plan.wake_at_ms) {
            let t = t.max(next);
            let t = opts.horizon_ms.map_or(t, |h| t.min(h));
            finished_pods = sim.advance_to(t);
        } else {
            outcome.quiescent = true;
            break;
        }
    }
    outcome
}

fn earliest(a: Option<TimeMs>, b: Option<TimeMs>) -> Option<TimeMs> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Performs a plan: evictions first, then binds gang by gang, then status writes and events.
fn perform(sim: &mut SimCluster, plan: &CyclePlan, errors: &mut Vec<String>) {
    for eviction in &plan.evictions {
        if let Err(e) = sim.evict(&eviction.pod, &eviction.reason) {
            errors.push(format!("evict {}: {e}", eviction.pod));
        }
    }
    for gang in &plan.gangs {
        for p in &gang.placements {
            if let Err(e) = sim.bind(&p.pod, &p.node) {
                errors.push(format!("bind {} to {}: {e}", p.pod, p.node));
            }
        }
    }
    for (key, status) in &plan.status_updates {
        if let Err(e) = sim.update_pod_group_status(key, status) {
            errors.push(format!("status of {key}: {e}"));
        }
    }
    for event in &plan.events {
        let _ = sim.record_event(event);
    }
}
