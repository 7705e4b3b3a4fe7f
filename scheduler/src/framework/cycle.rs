//! One scheduling cycle as a pure function: snapshot in, plan out.
//!
//! open session → run the configured actions → close: every gang's new PodGroup status
//! (phase, counts, `Scheduled` / `Unschedulable` condition with the reason in numbers) and
//! an Event for each change.

use crate::actions;
use crate::cluster::ClusterSnapshot;
use crate::framework::SchedulerConf;
use crate::framework::explain::gang_numbers;
use crate::framework::plan::{CyclePlan, Event};
use crate::framework::session::{JobId, Session, TaskStatus};
use crate::framework::timeout::{TimeoutAction, format_duration};
use crate::framework::view::RoundView;
use crate::model::{PodGroupCondition, PodGroupPhase, PodGroupStatus};

pub const CONDITION_SCHEDULED: &str = "Scheduled";
pub const CONDITION_UNSCHEDULABLE: &str = "Unschedulable";

/// Runs one cycle and returns what to do, with the closed session for reporting.
pub fn run_cycle(
    snapshot: &ClusterSnapshot,
    conf: &SchedulerConf,
    scheduler_name: &str,
) -> (CyclePlan, Session) {
    run_cycle_scoped(snapshot, conf, scheduler_name, None)
}

/// [`run_cycle`] for one replica of a sharded scheduler: only the jobs of the shards in
/// `scope` are admitted, placed or make room; node choice prefers each gang's home pool
/// (see [`crate::framework::scope`]). `None` is the whole cluster, as [`run_cycle`].
pub fn run_cycle_scoped(
    snapshot: &ClusterSnapshot,
    conf: &SchedulerConf,
    scheduler_name: &str,
    scope: Option<&crate::framework::CycleScope>,
) -> (CyclePlan, Session) {
    match scope {
        None => run_session(Session::open(snapshot, conf, scheduler_name)),
        Some(scope) => {
            let view =
                std::sync::Arc::new(RoundView::build(snapshot, conf, scheduler_name, &scope.map));
            run_cycle_in_view(&view, conf, scope)
        }
    }
}

/// One replica's cycle over the round's shared view: only the jobs of the shards in
/// `scope` are materialised, placed or make room (see [`crate::framework::view`]).
pub fn run_cycle_in_view(
    view: &std::sync::Arc<RoundView>,
    conf: &SchedulerConf,
    scope: &crate::framework::CycleScope,
) -> (CyclePlan, Session) {
    run_session(view.open_session(conf, scope))
}

/// The cycle of a replica that owns every shard: it plans on the view's whole-cluster
/// state itself (moved, not projected), with admission already decided.
pub fn run_cycle_owning_all(
    view: RoundView,
    conf: &SchedulerConf,
    scope: &crate::framework::CycleScope,
) -> (CyclePlan, Session) {
    run_session(view.into_session(conf, scope))
}

fn run_session(mut session: Session) -> (CyclePlan, Session) {
    session.timings.plugins_open = std::mem::take(&mut session.plugins.open_times);
    for action in session.conf.actions.clone() {
        let started = std::time::Instant::now();
        actions::run(&action, &mut session);
        session.timings.actions.push((action, started.elapsed()));
    }
    close(&mut session);
    (std::mem::take(&mut session.plan), session)
}

fn close(session: &mut Session) {
    let now = session.state.now_ms;
    for job in 0..session.state.jobs.len() {
        if session.state.jobs[job].shadow || !session.in_scope(job) {
            continue;
        }
        let status = job_status(session, job);
        let j = &session.state.jobs[job];
        if status.phase != PodGroupPhase::Running && status.phase != PodGroupPhase::Completed {
            if let Some(deadline) = j.timeout.deadline_ms().filter(|&d| d > now) {
                session.plan.wake_at(deadline);
            }
            if let (Some(since), Some(limit)) = (
                status.inqueue_since_ms,
                session.state.timeouts.inqueue_timeout_ms,
            ) && since.saturating_add(limit) > now
            {
                session.plan.wake_at(since.saturating_add(limit));
            }
        }
        let old = &session.state.jobs[job].pod_group.status;
        if status != *old {
            let key = session.state.jobs[job].key().clone();
            if status.phase != old.phase {
                session.plan.events.push(Event {
                    object: key.clone(),
                    kind: "Normal",
                    reason: status.phase.as_str().to_string(),
                    message: format!("PodGroup is {}", status.phase.as_str()),
                });
            }
            let new_condition = status.conditions.last();
            if new_condition.map(|c| (&c.kind, &c.message))
                != old.conditions.last().map(|c| (&c.kind, &c.message))
                && let Some(c) = new_condition
            {
                let unschedulable = c.kind == CONDITION_UNSCHEDULABLE;
                session.plan.events.push(Event {
                    object: key.clone(),
                    kind: if unschedulable { "Warning" } else { "Normal" },
                    // Unschedulable events carry the condition's reason (NotEnoughResources,
                    // Timeout, QueueNotFound, ...), as Volcano's do.
                    reason: if unschedulable {
                        c.reason.clone()
                    } else {
                        c.kind.clone()
                    },
                    message: c.message.clone(),
                });
            }
            session.plan.status_updates.push((key, status));
        }
    }
}

/// Why the job is not (fully) scheduled, in words with numbers; `None` when nothing is
/// pending.
pub fn pending_reason(session: &Session, job: JobId) -> Option<String> {
    let state = &session.state;
    let j = &state.jobs[job];
    let pending = state.pending_tasks(job).count();
    if pending == 0 {
        return None;
    }
    let mut parts = Vec::new();
    if let Some(blocked) = &j.blocked_reason {
        parts.push(blocked.clone());
    }
    if !j.fit_errors.is_empty() {
        parts.push(j.fit_errors.to_string());
    }
    if parts.is_empty() {
        return None;
    }
    if j.blocked_code.is_none()
        && let Some(numbers) = gang_numbers(state, job, session.free_summary())
    {
        parts.insert(0, numbers);
    }
    let ready = j.ready_count;
    Some(format!(
        "{}/{} pods placed (minMember {}), {pending} pending: {}",
        ready,
        j.tasks.len(),
        j.min_available(),
        parts.join("; ")
    ))
}

/// Volcano's rule: Running once `minMember` pods are placed (Completed when all of them
/// succeeded); Unknown when pods run but the gang cannot be completed; otherwise Inqueue if
/// admitted, else Pending.
fn job_status(session: &Session, job: JobId) -> PodGroupStatus {
    let state = &session.state;
    let j = &state.jobs[job];
    let old = &j.pod_group.status;
    let mut running = 0;
    let mut succeeded = 0;
    let mut failed = 0;
    for &t in &j.tasks {
        match state.tasks[t].status {
            TaskStatus::Running => running += 1,
            TaskStatus::Succeeded => succeeded += 1,
            TaskStatus::Failed => failed += 1,
            _ => {}
        }
    }
    let ready = session.plugins.job_ready(state, job);
    let reason = pending_reason(session, job);
    let timed_out = j.timed_out(state.now_ms);
    let stopped = timed_out && j.timeout.action == TimeoutAction::Stop;
    let pipelined = !ready && j.pipelined_count > 0 && session.plugins.job_pipelined(state, job);
    let unschedulable = !ready && !pipelined && (reason.is_some() || timed_out);
    let phase = if stopped && running == 0 {
        PodGroupPhase::Pending
    } else if running > 0 && unschedulable && j.ready_count < j.min_available() {
        PodGroupPhase::Unknown
    } else if j.ready_count >= j.min_available() && !(j.ready_count == 0 && j.is_pending_phase()) {
        // A group of minMember 0 is Running once admitted, not while it waits for admission.
        if succeeded > 0 && succeeded == j.ready_count {
            PodGroupPhase::Completed
        } else {
            PodGroupPhase::Running
        }
    } else if j.phase == PodGroupPhase::Inqueue {
        PodGroupPhase::Inqueue
    } else {
        PodGroupPhase::Pending
    };

    let condition = if unschedulable && timed_out {
        let t = &j.timeout;
        Some((
            CONDITION_UNSCHEDULABLE,
            "Timeout",
            format!(
                "not scheduled within its schedule-timeout {} (created at {}, now {}); {}{}",
                format_duration(t.timeout_ms.unwrap_or(0)),
                format_duration(t.created_ms),
                format_duration(state.now_ms),
                if stopped {
                    "timeout-action stop: no longer scheduled"
                } else {
                    "timeout-action retry: still trying"
                },
                reason.map(|r| format!(": {r}")).unwrap_or_default()
            ),
        ))
    } else if unschedulable {
        Some((
            CONDITION_UNSCHEDULABLE,
            j.blocked_code.unwrap_or("NotEnoughResources"),
            reason.unwrap_or_default(),
        ))
    } else if ready && j.ready_count > 0 {
        Some((
            CONDITION_SCHEDULED,
            "GangReady",
            format!(
                "{} of minMember {} pods placed",
                j.ready_count,
                j.min_available()
            ),
        ))
    } else {
        None
    };
    let mut conditions = old.conditions.clone();
    if let Some((kind, reason, message)) = condition {
        let same = conditions
            .last()
            .is_some_and(|c| c.kind == kind && c.reason == reason && c.message == message);
        if !same {
            conditions
                .retain(|c| c.kind != CONDITION_SCHEDULED && c.kind != CONDITION_UNSCHEDULABLE);
            conditions.push(PodGroupCondition {
                kind: kind.to_string(),
                status: true,
                reason: reason.to_string(),
                message,
                transition_time_ms: state.now_ms,
            });
        }
    }
    let inqueue_since_ms = match phase {
        PodGroupPhase::Inqueue => old
            .inqueue_since_ms
            .filter(|_| old.phase == PodGroupPhase::Inqueue)
            .or(Some(state.now_ms)),
        _ => None,
    };
    PodGroupStatus {
        phase,
        running,
        succeeded,
        failed,
        conditions,
        inqueue_since_ms,
    }
}
