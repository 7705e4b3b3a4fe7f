//! Runs scheduling cycles against the simulated cluster: snapshot → cycle → commit the plan
//! to the ledger → bind what the ledger accepted → check invariants → advance simulated time,
//! until nothing changes (quiescent), a fixed number of cycles has run, or a time horizon is
//! reached.
//!
//! Quiescent means a whole cycle made no bind, no eviction and no PodGroup phase change and
//! no simulated pod is still due to finish. While pods are running towards their end, idle
//! cycles are skipped by jumping simulated time to the next pod completion.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::cluster::sim::SimCluster;
use crate::framework::cycle::take_pending_reason;
use crate::framework::{CyclePlan, GangPlacement, SchedulerConf, StateCache, run_cycle_on_state};
use crate::invariants::{self, Violation};
use crate::ledger::{
    LocalLedger, PlacementLedger, ReleaseReason, ScheduledFault, Verdict, check_ledger, held_by,
};
use crate::model::{ObjectKey, TimeMs};
use crate::simulate::quorum::{DEFAULT_QUORUM_WAIT_MS, QuorumWatch};
use crate::simulate::sharded::{ShardOptions, ShardReport, ShardRuntime};

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
    /// Read the ledger after every cycle and check it against the cluster (a linearizable
    /// read of the whole ledger with several replicas: off for large generated runs, which
    /// check once at the end).
    pub check_ledger_every_cycle: bool,
    /// Compare the state kept from round to round ([`crate::framework::StateCache`]) with
    /// one built from the snapshot, every cycle (invariant "state cache"; doubles the cost
    /// of opening a cycle's state: off for large generated runs and benchmarks).
    pub check_state_cache_every_cycle: bool,
    /// Faults injected into the replicated ledger at simulated times.
    pub faults: Vec<ScheduledFault>,
    /// Shards and scheduler replicas (`None`: one scheduler owning the single shard, the
    /// path every run took before sharding).
    pub sharding: Option<ShardOptions>,
    /// Simulated time follows the wall clock: a round shorter than `period_ms` sleeps the
    /// rest, a longer one (slow host, ledger election) moves the clock as far as the wall
    /// clock went. A failover then takes the time it would on a real cluster, including
    /// the ledger's election overlapping the shard lease. For benchmarks; tests keep
    /// simulated time.
    pub pace_wall_clock: bool,
    /// With a majority of the ledger's replicas down (killed or cut off), how long
    /// (simulated) the run waits for a scheduled `restart`/`heal` to bring the quorum back
    /// before it stops with an error naming what was lost.
    pub quorum_wait_ms: TimeMs,
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
            check_ledger_every_cycle: true,
            check_state_cache_every_cycle: true,
            faults: Vec::new(),
            sharding: None,
            pace_wall_clock: false,
            quorum_wait_ms: DEFAULT_QUORUM_WAIT_MS,
        }
    }
}

#[derive(Clone, Debug)]
pub struct CycleStats {
    pub cycle: u32,
    pub at_ms: TimeMs,
    /// Time to compute the plan (the pure scheduling cycle).
    pub duration: Duration,
    /// Time to commit the plan to the ledger.
    pub commit: Duration,
    pub binds: usize,
    pub evictions: usize,
    pub refused_gangs: usize,
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
    /// Gangs the ledger refused, with its reason (they stay pending and are retried).
    pub ledger_refusals: Vec<(u32, String, String)>,
    /// Gangs whose commit was of unknown outcome and turned up in the ledger later (bound
    /// then): (cycle, gang).
    pub late_commits: Vec<(u32, String)>,
    /// Ledger errors (unreachable, refused commands); nothing is bound in such a cycle.
    pub ledger_errors: Vec<String>,
    pub warnings: Vec<String>,
    /// Faults injected: (simulated time, what was done, wall time until the next plan
    /// was committed after it).
    pub faults: Vec<FaultRecord>,
    /// With shards: moves, transactions, checks.
    pub shards: Option<ShardReport>,
    /// Each time the ledger lost its quorum and the run waited for a scheduled fault to
    /// bring it back.
    pub quorum_waits: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct FaultRecord {
    pub at_ms: TimeMs,
    pub what: String,
    /// Wall-clock time from the fault to the next successful commit (failover time).
    pub recovered_after: Option<Duration>,
}

impl std::fmt::Display for FaultRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "fault at {:.1}s: {}; next plan committed ",
            self.at_ms as f64 / 1000.0,
            self.what
        )?;
        match self.recovered_after {
            Some(d) => write!(f, "{:.0} ms later", d.as_secs_f64() * 1000.0),
            None => f.write_str("never (no plan was committed after it)"),
        }
    }
}

impl RunOutcome {
    pub fn total_binds(&self) -> usize {
        self.stats.iter().map(|s| s.binds).sum()
    }
}

/// Runs with the ledger's state machine in process (one replica).
pub fn drive(
    sim: &mut SimCluster,
    conf: &SchedulerConf,
    opts: &DriverOptions,
    on_cycle: impl FnMut(&CycleStats),
) -> RunOutcome {
    drive_with(sim, conf, opts, &mut LocalLedger::new(), on_cycle)
}

pub fn drive_with(
    sim: &mut SimCluster,
    conf: &SchedulerConf,
    opts: &DriverOptions,
    ledger: &mut dyn PlacementLedger,
    mut on_cycle: impl FnMut(&CycleStats),
) -> RunOutcome {
    let mut outcome = RunOutcome::default();
    let mut sharded = match opts.sharding.clone().map(ShardRuntime::new).transpose() {
        Ok(mut rt) => {
            if let Some(rt) = rt.as_mut() {
                rt.check_state_cache = opts.check_invariants && opts.check_state_cache_every_cycle;
            }
            rt
        }
        Err(e) => {
            outcome.ledger_errors.push(e);
            return outcome;
        }
    };
    {
        let nodes: Vec<_> = sim.nodes().collect();
        let occupying: Vec<_> = sim.pods().filter(|p| p.occupies_node()).collect();
        let loaded = match sharded.as_mut() {
            Some(rt) => rt.load(sim, ledger),
            None => ledger.load(&nodes, &occupying),
        };
        match loaded {
            Ok(w) => outcome.warnings.extend(w),
            Err(e) => {
                outcome
                    .ledger_errors
                    .push(format!("loading the cluster into the ledger: {e}"));
                return outcome;
            }
        }
    }
    let mut finished: Vec<ObjectKey> = Vec::new();
    let mut faults: Vec<&ScheduledFault> = opts.faults.iter().collect();
    faults.sort_by_key(|f| f.at_ms);
    let mut faults = faults.into_iter().peekable();
    let mut awaiting_recovery: Vec<(usize, Instant)> = Vec::new();
    let mut in_doubt: Vec<(u32, GangPlacement)> = Vec::new();
    let (run_started, sim_started_ms) = (Instant::now(), sim.now_ms());
    let mut quorum = QuorumWatch::new(ledger.replicas());
    let mut state_cache = StateCache::new(&opts.scheduler_name);
    // Pods that finished while the ledger had no quorum: released once it is back.
    let mut finished_without_quorum: Vec<ObjectKey> = Vec::new();
    loop {
        if !in_doubt.is_empty() && !quorum.lost() {
            reconcile_in_doubt(sim, ledger, &mut in_doubt, outcome.cycles, &mut outcome);
        }
        while let Some(f) = faults.next_if(|f| f.at_ms <= sim.now_ms()) {
            let leader = match f.fault {
                crate::ledger::LedgerFault::KillLeader if ledger.replicas() >= 2 => {
                    ledger.leader().ok().flatten()
                }
                _ => None,
            };
            quorum.record(&f.fault, &fault_name(f), leader);
            let what = match sharded.as_mut() {
                Some(rt) => rt.inject(&f.fault, ledger, sim.now_ms()),
                None => match ledger.inject(&f.fault) {
                    Ok(done) => format!("{}: {done}", f.fault),
                    Err(e) => format!("{}: failed: {e}", f.fault),
                },
            };
            awaiting_recovery.push((outcome.faults.len(), Instant::now()));
            outcome.faults.push(FaultRecord {
                at_ms: sim.now_ms(),
                what,
                recovered_after: None,
            });
        }
        if quorum.lost() {
            let upcoming: Vec<&ScheduledFault> = faults.clone().collect();
            match quorum_wait(&quorum, &upcoming, sim.now_ms(), opts) {
                Ok(back_at) => {
                    outcome.quorum_waits.push(format!(
                        "no ledger quorum from {:.1}s to {:.1}s ({}): nothing was committed, simulated time skipped to the fault that brings it back",
                        sim.now_ms() as f64 / 1000.0,
                        back_at as f64 / 1000.0,
                        quorum.describe(),
                    ));
                    finished_without_quorum.extend(sim.advance_to(back_at));
                    continue;
                }
                Err(why) => {
                    outcome.ledger_errors.push(why);
                    break;
                }
            }
        }
        if !finished_without_quorum.is_empty() {
            let done = std::mem::take(&mut finished_without_quorum);
            match sharded.as_mut() {
                Some(rt) => rt.release(&done, ReleaseReason::Finished),
                None => {
                    if let Err(e) = ledger.release(&done, ReleaseReason::Finished) {
                        outcome.ledger_errors.push(format!(
                            "releasing pods that finished while the ledger had no quorum: {e}"
                        ));
                    }
                }
            }
        }
        if let Some(n) = opts.exact_cycles {
            if outcome.cycles >= n {
                break;
            }
        } else if outcome.cycles >= opts.max_cycles {
            break;
        }
        let round_started = Instant::now();
        if let Some(rt) = sharded.as_mut() {
            rt.begin_round(sim, ledger, &mut outcome.ledger_errors);
        }
        let snapshot = sim.snapshot();
        let started = Instant::now();
        let (plan, per_replica, pending) = match sharded.as_mut() {
            Some(rt) => {
                let round = rt.plan_round(&snapshot, conf, &opts.scheduler_name);
                (round.merged, round.per_replica, round.pending)
            }
            None => {
                let (state, _) = state_cache.state(&snapshot);
                if opts.check_invariants && opts.check_state_cache_every_cycle {
                    let found = invariants::check_state_cache(&state_cache, &snapshot);
                    let cycle = outcome.cycles + 1;
                    outcome
                        .violations
                        .extend(found.into_iter().map(|v| (cycle, v)));
                }
                let (plan, session) = run_cycle_on_state(state, conf);
                (plan, BTreeMap::new(), pending_of(session))
            }
        };
        let duration = started.elapsed();

        let phase_changes = plan
            .status_updates
            .iter()
            .filter(|(key, status)| {
                sim.pod_group(key)
                    .is_some_and(|g| g.status.phase != status.phase)
            })
            .count();
        outcome.cycles += 1;
        let cycle = outcome.cycles;
        let committed = Instant::now();
        let errors_before = outcome.ledger_errors.len();
        let performed = match sharded.as_mut() {
            Some(rt) => rt.perform(sim, ledger, &per_replica, cycle, &mut outcome),
            None => perform(sim, ledger, &plan, cycle, &mut outcome, &mut in_doubt),
        };
        let commit = committed.elapsed();
        if !performed.gangs.is_empty() && outcome.ledger_errors.len() == errors_before {
            for (i, since) in awaiting_recovery.drain(..) {
                outcome.faults[i].recovered_after = Some(since.elapsed());
            }
        }
        sim.settle();
        if opts.check_invariants {
            // I1 and I2 each read every pod: side by side, they cost a round one of them.
            let (mut found, atomicity) = std::thread::scope(|s| {
                let atomicity = opts
                    .check_gang_atomicity
                    .then(|| s.spawn(|| invariants::check_gang_atomicity(sim)));
                let booking = invariants::check_no_double_booking(sim);
                let atomicity = atomicity.map(|h| h.join().expect("the I2 check panicked"));
                (booking, atomicity)
            });
            found.extend(atomicity.into_iter().flatten());
            found.extend(invariants::check_no_lost_placement(sim, &performed));
            if opts.check_ledger_every_cycle {
                found.extend(check_against_ledger_with(
                    sim,
                    ledger,
                    &in_doubt,
                    sharded.as_mut(),
                ));
            }
            if let Some(rt) = sharded.as_mut() {
                found.extend(rt.take_violations());
            }
            outcome
                .violations
                .extend(found.into_iter().map(|v| (cycle, v)));
        }
        outcome.pending = pending;
        let stats = CycleStats {
            cycle,
            at_ms: sim.now_ms(),
            duration,
            commit,
            binds: performed.bind_count(),
            refused_gangs: not_performed(&plan, &performed),
            evictions: plan.evictions.len(),
            phase_changes,
            finished_pods: finished.len(),
        };
        on_cycle(&stats);
        let changed = !in_doubt.is_empty()
            || sharded.as_ref().is_some_and(ShardRuntime::busy)
            || stats.binds > 0
            || stats.phase_changes > 0
            || !finished.is_empty()
            || stats.refused_gangs > 0
            || stats.evictions > 0;
        outcome.stats.push(stats);

        let mut next = sim.now_ms() + opts.period_ms;
        if opts.pace_wall_clock {
            // Simulated time is the wall clock: a round that overran its period (a slow
            // host, a ledger election) moves the clock as far as the wall clock moved.
            let period = std::time::Duration::from_millis(opts.period_ms);
            if let Some(rest) = period.checked_sub(round_started.elapsed()) {
                std::thread::sleep(rest);
            }
            let wall_ms = u64::try_from(run_started.elapsed().as_millis()).unwrap_or(u64::MAX);
            next = next.max(sim_started_ms.saturating_add(wall_ms));
        }
        if opts.horizon_ms.is_some_and(|h| next > h) {
            break;
        }
        // A paced run never jumps ahead: simulated time follows the wall clock.
        finished = if opts.exact_cycles.is_some() || changed || opts.pace_wall_clock {
            sim.advance_to(next)
        } else if let Some(t) = earliest(
            earliest(sim.next_event_ms(), plan.wake_at_ms),
            // A fault due before the next event fires on time, not after the jump.
            faults.peek().map(|f| f.at_ms),
        ) {
            let t = t.max(next);
            sim.advance_to(opts.horizon_ms.map_or(t, |h| t.min(h)))
        } else {
            outcome.quiescent = true;
            break;
        };
        if let Some(rt) = sharded.as_mut() {
            if !finished.is_empty() {
                rt.release(&finished, ReleaseReason::Finished);
            }
            let gone = sim.take_gone();
            if !gone.is_empty() {
                rt.release(&gone, ReleaseReason::Evicted);
            }
            continue;
        }
        if !finished.is_empty()
            && let Err(e) = ledger.release(&finished, ReleaseReason::Finished)
        {
            outcome
                .ledger_errors
                .push(format!("cycle {cycle}: releasing finished pods: {e}"));
        }
        release_gone(sim, ledger, cycle, &mut outcome);
    }
    if let Some(rt) = sharded.as_mut() {
        // A run cut short (cycles, horizon) still records every queued mark and release.
        rt.flush_outboxes(ledger, true);
        rt.report.raft_entries = ledger.entries_proposed();
    }
    if opts.check_invariants && !opts.check_ledger_every_cycle {
        let cycle = outcome.cycles;
        let found = check_against_ledger_with(sim, ledger, &in_doubt, sharded.as_mut());
        outcome
            .violations
            .extend(found.into_iter().map(|v| (cycle, v)));
    }
    outcome.shards = sharded.map(|rt| rt.report);
    outcome
}

/// `kill:replica-2@10.0s`: a fault as the messages name it.
fn fault_name(f: &ScheduledFault) -> String {
    format!("{}@{:.1}s", f.fault, f.at_ms as f64 / 1000.0)
}

/// With the ledger's quorum lost at `now`: the time of the first upcoming fault that brings
/// it back, when that is within `opts.quorum_wait_ms`; otherwise the error that stops the
/// run, naming what was lost.
fn quorum_wait(
    quorum: &QuorumWatch,
    upcoming: &[&ScheduledFault],
    now: TimeMs,
    opts: &DriverOptions,
) -> Result<TimeMs, String> {
    let lost = format!(
        "the ledger lost its quorum at {:.1}s: {}",
        now as f64 / 1000.0,
        quorum.describe()
    );
    match quorum.restored_by(upcoming.iter().copied()) {
        Some(f) if f.at_ms.saturating_sub(now) <= opts.quorum_wait_ms => Ok(f.at_ms),
        Some(f) => Err(format!(
            "{lost}; {} would bring it back, after more than the {:.0} s a run waits: the run stops",
            fault_name(f),
            opts.quorum_wait_ms as f64 / 1000.0
        )),
        None => Err(format!(
            "{lost}; no restart or heal is scheduled to bring it back: the run stops"
        )),
    }
}

/// Gangs of `plan` that `performed` does not hold (refused by the ledger, or not bound).
/// `performed` may hold gangs that are not in `plan` (the sharded runtime's recovered and
/// retried commits), so this is not a difference of lengths.
fn not_performed(plan: &CyclePlan, performed: &CyclePlan) -> usize {
    let done: std::collections::HashSet<&ObjectKey> =
        performed.gangs.iter().map(|g| &g.gang).collect();
    plan.gangs
        .iter()
        .filter(|g| !done.contains(&g.gang))
        .count()
}

fn earliest(a: Option<TimeMs>, b: Option<TimeMs>) -> Option<TimeMs> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Jobs with pods still pending, with why (only the session's own jobs when it is scoped).
pub(crate) fn pending_of(mut session: crate::framework::Session) -> Vec<(ObjectKey, String)> {
    let mut out = Vec::new();
    for j in 0..session.state.jobs.len() {
        if !session.in_scope(j) || session.state.pending_tasks(j).next().is_none() {
            continue;
        }
        let why = take_pending_reason(&mut session, j)
            .unwrap_or_else(|| "not reached this cycle (queue turns ended first)".to_string());
        out.push((session.state.jobs[j].key().clone(), why));
    }
    out
}

/// Evictions first (their placements are released in the ledger once the pods are gone),
/// then commit, then bind: proposes the plan's gangs to the ledger, binds the pods of the
/// gangs it accepted, records them bound, then writes statuses and events. Returns the part
/// of the plan that was performed.
fn perform(
    sim: &mut SimCluster,
    ledger: &mut dyn PlacementLedger,
    plan: &CyclePlan,
    cycle: u32,
    outcome: &mut RunOutcome,
    in_doubt: &mut Vec<(u32, GangPlacement)>,
) -> CyclePlan {
    let mut performed = CyclePlan::default();
    for eviction in &plan.evictions {
        if let Err(e) = sim.evict(&eviction.pod, &eviction.reason) {
            outcome
                .bind_errors
                .push(format!("evict {}: {e}", eviction.pod));
        }
    }
    release_gone(sim, ledger, cycle, outcome);
    performed.evictions = plan.evictions.clone();
    if !plan.gangs.is_empty() {
        match ledger.commit(&plan.gangs) {
            Ok(verdicts) => {
                for (gang, verdict) in plan.gangs.iter().zip(verdicts) {
                    match verdict {
                        Verdict::Accepted => performed.gangs.push(gang.clone()),
                        Verdict::Refused(why) => {
                            outcome
                                .ledger_refusals
                                .push((cycle, gang.gang.to_string(), why))
                        }
                        Verdict::InDoubt(why) => {
                            outcome
                                .ledger_refusals
                                .push((cycle, gang.gang.to_string(), why));
                            in_doubt.push((cycle, gang.clone()));
                        }
                    }
                }
            }
            Err(e) => outcome
                .ledger_errors
                .push(format!("cycle {cycle}: committing the plan: {e}")),
        }
    }
    let mut bound = Vec::new();
    let mut failed = Vec::new();
    for gang in &performed.gangs {
        for p in &gang.placements {
            match sim.bind(&p.pod, &p.node) {
                Ok(()) => bound.push(p.pod.clone()),
                Err(e) => {
                    outcome
                        .bind_errors
                        .push(format!("bind {} to {}: {e}", p.pod, p.node));
                    failed.push(p.pod.clone());
                }
            }
        }
    }
    if !bound.is_empty()
        && let Err(e) = ledger.mark_bound(&bound)
    {
        outcome
            .ledger_errors
            .push(format!("cycle {cycle}: recording binds: {e}"));
    }
    // A bind that failed gives its placement back, so the capacity is not lost (I3).
    if !failed.is_empty()
        && let Err(e) = ledger.release(&failed, ReleaseReason::BindFailed)
    {
        outcome
            .ledger_errors
            .push(format!("cycle {cycle}: releasing failed binds: {e}"));
    }
    // A gang the ledger did not accept is not bound, so the status the cycle computed for it
    // (Running, Scheduled) would be false: it is left as it was, and the next cycle, which
    // sees the gang still pending, writes the true one.
    let not_bound: std::collections::HashSet<&ObjectKey> = plan
        .gangs
        .iter()
        .map(|g| &g.gang)
        .filter(|k| !performed.gangs.iter().any(|p| &p.gang == *k))
        .collect();
    for (key, status) in &plan.status_updates {
        if not_bound.contains(key) {
            continue;
        }
        if let Err(e) = sim.update_pod_group_status(key, status) {
            outcome.bind_errors.push(format!("status of {key}: {e}"));
        }
        performed.status_updates.push((key.clone(), status.clone()));
    }
    for event in plan
        .events
        .iter()
        .filter(|e| !not_bound.contains(&e.object))
    {
        let _ = sim.record_event(event);
    }
    performed
}

/// Releases the ledger placements of evicted pods that are gone from the cluster (at once,
/// or after their termination grace period).
fn release_gone(
    sim: &mut SimCluster,
    ledger: &mut dyn PlacementLedger,
    cycle: u32,
    outcome: &mut RunOutcome,
) {
    let gone = sim.take_gone();
    if !gone.is_empty()
        && let Err(e) = ledger.release(&gone, ReleaseReason::Evicted)
    {
        outcome
            .ledger_errors
            .push(format!("cycle {cycle}: releasing evicted pods: {e}"));
    }
}

/// Cycles a gang of unknown outcome is watched for a late commit before it is given up (the
/// replicated ledger's client gives up on a proposal within seconds; a cycle is a schedule
/// period of simulated time, and several wall-clock round trips of the ledger).
const IN_DOUBT_CYCLES: u32 = 5;

/// Gangs whose proposal had an unknown outcome: the ones the ledger now holds are bound (a
/// late commit), the ones still absent after [`IN_DOUBT_CYCLES`] are given up. A pod of such
/// a gang that the scheduler meanwhile placed elsewhere, or that is gone, has its stale
/// placement released.
fn reconcile_in_doubt(
    sim: &mut SimCluster,
    ledger: &mut dyn PlacementLedger,
    in_doubt: &mut Vec<(u32, GangPlacement)>,
    cycle: u32,
    outcome: &mut RunOutcome,
) {
    let state = match ledger.state() {
        Ok(s) => s,
        Err(e) => {
            outcome.ledger_errors.push(format!(
                "cycle {cycle}: reading the ledger for gangs in doubt: {e}"
            ));
            return;
        }
    };
    let mut bound = Vec::new();
    let mut stale = Vec::new();
    in_doubt.retain(|(since, gang)| {
        if held_by(&state, gang) {
            for p in &gang.placements {
                let pending = sim.pod(&p.pod).is_some_and(|pod| pod.node_name.is_none());
                if pending && sim.bind(&p.pod, &p.node).is_ok() {
                    bound.push(p.pod.clone());
                } else if sim.pod(&p.pod).and_then(|pod| pod.node_name.as_deref())
                    != Some(p.node.as_str())
                {
                    stale.push(p.pod.clone());
                }
            }
            outcome.late_commits.push((cycle, gang.gang.to_string()));
            return false;
        }
        cycle.saturating_sub(*since) < IN_DOUBT_CYCLES
    });
    if !bound.is_empty()
        && let Err(e) = ledger.mark_bound(&bound)
    {
        outcome
            .ledger_errors
            .push(format!("cycle {cycle}: recording late binds: {e}"));
    }
    if !stale.is_empty()
        && let Err(e) = ledger.release(&stale, ReleaseReason::BindFailed)
    {
        outcome
            .ledger_errors
            .push(format!("cycle {cycle}: releasing stale placements: {e}"));
    }
}

/// Commit-then-bind, checked against the ledger's state: every pod bound during the run holds
/// a placement on the same node in the ledger, every placement the ledger holds belongs to a
/// pod on that node (none lost: I3), and the ledger's own checks (I1 on committed usage, its
/// usage index, no orphan reservation) hold.
/// Pods of gangs in doubt (their proposal's outcome is unknown and may still commit) are not
/// judged: the reconciliation of the next cycles binds or gives them up.
pub fn check_against_ledger(
    sim: &SimCluster,
    ledger: &mut dyn PlacementLedger,
    in_doubt: &[(u32, GangPlacement)],
) -> Vec<Violation> {
    check_against_ledger_with(sim, ledger, in_doubt, None)
}

/// [`check_against_ledger`] for a sharded run too: reservations of open transactions,
/// commits whose binding waits for their shard's owner and placements whose release waits
/// for it are not judged as lost (`ShardRuntime::unsettled_pods`), and the runtime adds
/// "no leaked reservation".
fn check_against_ledger_with(
    sim: &SimCluster,
    ledger: &mut dyn PlacementLedger,
    in_doubt: &[(u32, GangPlacement)],
    sharded: Option<&mut ShardRuntime>,
) -> Vec<Violation> {
    let mut doubtful: std::collections::HashSet<String> = in_doubt
        .iter()
        .flat_map(|(_, g)| g.placements.iter().map(|p| p.pod.to_string()))
        .collect();
    let state = match ledger.state() {
        Ok(s) => s,
        Err(e) => {
            return vec![Violation {
                invariant: "ledger readable",
                detail: e.to_string(),
            }];
        }
    };
    let mut out: Vec<Violation> = match sharded {
        Some(rt) => {
            doubtful.extend(rt.unsettled_pods(&state));
            rt.check_state(&state)
        }
        None => check_ledger(&state)
            .into_iter()
            .map(|detail| Violation {
                invariant: "ledger",
                detail,
            })
            .collect(),
    };
    let mut on_node: BTreeMap<String, &str> = BTreeMap::new();
    for pod in sim.pods() {
        if pod.occupies_node()
            && let Some(node) = &pod.node_name
        {
            on_node.insert(pod.key.to_string(), node);
            if sim.was_bound_here(&pod.key)
                && state
                    .placements
                    .get(&pod.key.to_string())
                    .map(|p| p.node.as_str())
                    != Some(node)
            {
                out.push(Violation {
                    invariant: "commit-then-bind",
                    detail: format!(
                        "pod {} is bound to {node} without a ledger placement there",
                        pod.key
                    ),
                });
            }
        }
    }
    for (pod, placement) in &state.placements {
        if on_node.get(pod).copied() != Some(placement.node.as_str()) && !doubtful.contains(pod) {
            out.push(Violation {
                invariant: "I3 no lost placement",
                detail: format!(
                    "the ledger holds pod {pod} on {} but the cluster does not",
                    placement.node
                ),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{LedgerBackend, LedgerError};
    use crate::model::{GROUP_NAME_ANNOTATION, Node, Pod, PodGroup, Queue, Resources};
    use phalanx_statestore::{LedgerCommand, LedgerResponse, LedgerState};

    /// A ledger whose first placement proposal is "lost" by its client (unknown outcome, not
    /// applied yet) and commits late: it is applied just before the second read.
    struct LateCommitLedger {
        inner: LocalLedger,
        late: Option<Vec<LedgerCommand>>,
        reads: u32,
        armed: bool,
    }

    impl LedgerBackend for LateCommitLedger {
        fn propose_all(
            &mut self,
            commands: Vec<LedgerCommand>,
        ) -> Result<Vec<LedgerResponse>, LedgerError> {
            let placing = commands
                .iter()
                .any(|c| matches!(c, LedgerCommand::PlaceGangs { .. }));
            if self.armed && placing {
                self.armed = false;
                self.late = Some(commands);
                return Err(LedgerError::Ambiguous("client timed out".into()));
            }
            self.inner.propose_all(commands)
        }
        fn read_state(&mut self) -> Result<std::sync::Arc<LedgerState>, LedgerError> {
            self.reads += 1;
            if self.reads >= 2
                && let Some(late) = self.late.take()
            {
                self.inner.propose_all(late)?;
            }
            self.inner.read_state()
        }
        fn replica_count(&self) -> usize {
            3
        }
    }

    #[test]
    fn a_gang_whose_commit_lands_late_is_bound_then_and_never_placed_twice() {
        let gpu = |n| Resources::from_pairs([("nvidia.com/gpu", n)]);
        let mut group = PodGroup::new(ObjectKey::new("default", "g"), 2);
        group.status.phase = crate::model::PodGroupPhase::Inqueue;
        let pods: Vec<Pod> = (0..2)
            .map(|i| {
                let mut p = Pod::new(ObjectKey::new("default", format!("g-{i}")), gpu(1));
                p.group = Some("g".into());
                p.annotations
                    .insert(GROUP_NAME_ANNOTATION.into(), "g".into());
                p.creation_index = i + 1;
                p
            })
            .collect();
        let mut sim = SimCluster::new(
            vec![Node::new("n1", gpu(2))],
            pods,
            vec![group],
            vec![Queue::new("default")],
            Vec::new(),
        );
        let mut ledger = LateCommitLedger {
            inner: LocalLedger::new(),
            late: None,
            reads: 0,
            armed: true,
        };
        let outcome = drive_with(
            &mut sim,
            &SchedulerConf::volcano_default(),
            &DriverOptions::default(),
            &mut ledger,
            |_| {},
        );
        assert!(outcome.violations.is_empty(), "{:?}", outcome.violations);
        assert_eq!(outcome.late_commits.len(), 1, "{outcome:?}");
        assert!(sim.pods().all(|p| p.node_name.as_deref() == Some("n1")));
        let state = ledger.read_state().expect("readable");
        assert_eq!(state.placements.len(), 2);
    }

    /// A ledger that cannot be reached for placements (every `PlaceGangs` fails).
    struct UnreachableLedger {
        inner: LocalLedger,
    }

    impl LedgerBackend for UnreachableLedger {
        fn propose_all(
            &mut self,
            commands: Vec<LedgerCommand>,
        ) -> Result<Vec<LedgerResponse>, LedgerError> {
            if commands
                .iter()
                .any(|c| matches!(c, LedgerCommand::PlaceGangs { gangs, .. } if !gangs.is_empty()))
                && self.inner.read_state()?.shards.contains_key(&0)
                && !self.inner.read_state()?.nodes.is_empty()
                && commands.len() == 1
            {
                return Err(LedgerError::Unavailable("no leader".into()));
            }
            self.inner.propose_all(commands)
        }
        fn read_state(&mut self) -> Result<std::sync::Arc<LedgerState>, LedgerError> {
            self.inner.read_state()
        }
        fn replica_count(&self) -> usize {
            3
        }
    }

    #[test]
    fn a_gang_the_ledger_never_accepted_is_neither_bound_nor_reported_running() {
        let gpu = |n| Resources::from_pairs([("nvidia.com/gpu", n)]);
        let mut group = PodGroup::new(ObjectKey::new("default", "g"), 1);
        group.status.phase = crate::model::PodGroupPhase::Inqueue;
        let mut pod = Pod::new(ObjectKey::new("default", "g-0"), gpu(1));
        pod.group = Some("g".into());
        pod.creation_index = 1;
        let mut sim = SimCluster::new(
            vec![Node::new("n1", gpu(1))],
            vec![pod],
            vec![group],
            vec![Queue::new("default")],
            Vec::new(),
        );
        let mut ledger = UnreachableLedger {
            inner: LocalLedger::new(),
        };
        let opts = DriverOptions {
            exact_cycles: Some(3),
            ..DriverOptions::default()
        };
        let outcome = drive_with(
            &mut sim,
            &SchedulerConf::volcano_default(),
            &opts,
            &mut ledger,
            |_| {},
        );
        assert_eq!(
            outcome.ledger_errors.len(),
            3,
            "{:?}",
            outcome.ledger_errors
        );
        assert!(sim.pods().all(|p| p.node_name.is_none()));
        let phase = sim
            .pod_group(&ObjectKey::new("default", "g"))
            .map(|g| g.status.phase);
        assert_eq!(phase, Some(crate::model::PodGroupPhase::Inqueue));
        assert!(outcome.violations.is_empty(), "{:?}", outcome.violations);
    }
}
