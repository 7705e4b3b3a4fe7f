//! One scheduling cycle as a pure function: snapshot in, plan out.
//!
//! open session → run the configured actions → close: every gang's new PodGroup status
//! (phase, counts, `Scheduled` / `Unschedulable` condition with the reason in numbers) and
//! an Event for each change.
//!
//! At debug level each cycle is a `cycle` span, each action an `action` span inside it, and
//! each gang's decision a `gang` span (`gang=NS/NAME outcome=PHASE reason=...`) with one
//! `decision` event, so `PHALANX_LOG=phalanx_scheduler::framework::cycle=debug` puts a
//! gang's decisions one grep away (docs/operations.md, "Decisions in the log"). They are
//! here, not in serve or simulate, so that both emit the same lines.

use std::borrow::Cow;
use std::fmt;

use crate::actions;
use crate::cluster::ClusterSnapshot;
use crate::framework::SchedulerConf;
use crate::framework::explain::gang_numbers;
use crate::framework::plan::{CyclePlan, Event};
use crate::framework::session::{JobId, Session, TaskStatus};
use crate::framework::timeout::{TimeoutAction, format_duration};
use crate::framework::view::RoundView;
use crate::model::{ObjectKey, PodGroupCondition, PodGroupPhase, PodGroupStatus, TimeMs};

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

/// [`run_cycle`] on the snapshot's state as a [`crate::framework::StateCache`] keeps it.
pub fn run_cycle_on_state(
    state: crate::framework::SessionState,
    conf: &SchedulerConf,
) -> (CyclePlan, Session) {
    run_session(Session::open_state(state, conf))
}

/// [`run_cycle_scoped`] on the snapshot's state as a [`crate::framework::StateCache`]
/// keeps it.
pub fn run_cycle_scoped_on_state(
    state: crate::framework::SessionState,
    conf: &SchedulerConf,
    scope: Option<&crate::framework::CycleScope>,
) -> (CyclePlan, Session) {
    match scope {
        None => run_cycle_on_state(state, conf),
        Some(scope) => {
            let view = std::sync::Arc::new(RoundView::from_state(state, conf, &scope.map));
            run_cycle_in_view(&view, conf, scope)
        }
    }
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
    let cycle = tracing::debug_span!(
        "cycle",
        now_ms = session.state.now_ms,
        jobs = session.state.jobs.len()
    )
    .entered();
    session.timings.plugins_open = std::mem::take(&mut session.plugins.open_times);
    for action in session.conf.actions.clone() {
        let span = tracing::debug_span!("action", action = %action).entered();
        let started = std::time::Instant::now();
        actions::run(&action, &mut session);
        let took = started.elapsed();
        tracing::debug!(took_us = took.as_micros() as u64, "action done");
        drop(span);
        session.timings.actions.push((action, took));
    }
    close(&mut session);
    tracing::debug!(
        binds = session.plan.bind_count(),
        status_updates = session.plan.status_updates.len(),
        "cycle done"
    );
    drop(cycle);
    (std::mem::take(&mut session.plan), session)
}

/// The gang's decision of this cycle as a debug span and event: its phase after the
/// cycle and, when not placed, the Unschedulable condition's reason and message (the
/// numbers `phalanx explain` starts from). Placed gangs that nothing changed are left
/// out: every cycle would repeat them.
fn trace_decision(session: &Session, job: JobId, status: &PodGroupStatus) {
    let j = &session.state.jobs[job];
    let changed = *status != j.pod_group.status;
    let settled = matches!(
        status.phase,
        PodGroupPhase::Running | PodGroupPhase::Completed
    ) && session.state.pending_tasks(job).next().is_none();
    if settled && !changed {
        return;
    }
    let reason = match status.conditions.last() {
        Some(c) if c.kind == CONDITION_UNSCHEDULABLE => format!("{}: {}", c.reason, c.message),
        Some(c) => c.message.clone(),
        None => String::new(),
    };
    let _span = tracing::debug_span!(
        "gang",
        gang = %j.key(),
        outcome = status.phase.as_str(),
        reason = reason.as_str()
    )
    .entered();
    tracing::debug!(changed, "decision");
}

fn close(session: &mut Session) {
    let now = session.state.now_ms;
    session.closed_reasons = vec![None; session.state.jobs.len()];
    for job in 0..session.state.jobs.len() {
        if session.state.jobs[job].shadow || !session.in_scope(job) {
            continue;
        }
        let (changed, reason) = job_status(session, job);
        session.closed_reasons[job] = Some(reason);
        let j = &session.state.jobs[job];
        let status = changed.as_ref().unwrap_or(&j.pod_group.status);
        if tracing::enabled!(tracing::Level::DEBUG) {
            trace_decision(session, job, status);
        }
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
        let Some(status) = changed else {
            continue;
        };
        let key = session.state.jobs[job].key().clone();
        let old = &session.state.jobs[job].pod_group.status;
        session
            .plan
            .events
            .extend(status_events(&key, old, &status));
        session.plan.status_updates.push((key, status));
    }
}

/// How long an Unschedulable condition may go unrewritten while its reason stays the same
/// (see [`unschedulable_recent`]).
pub const UNSCHEDULABLE_REFRESH_MS: TimeMs = 60_000;

/// Whether the Unschedulable condition `last` was written less than
/// [`UNSCHEDULABLE_REFRESH_MS`] ago: one of the same reason is then not written again,
/// whatever its message. A pending gang's message carries numbers that change whenever
/// anything in the cluster does (free capacity, its queue's share), and which of several
/// refusals it tells first changes with them; writing each was a status write and a
/// Warning Event per pending gang per cycle (370,983 statuses and 352,040 Events for
/// 100,000 pods in `phalanx-bench shards`). A new reason is written at once; the phase and
/// the pod counts are status fields of their own, written when they change.
fn unschedulable_recent(last: &PodGroupCondition, now_ms: TimeMs) -> bool {
    last.kind == CONDITION_UNSCHEDULABLE
        && now_ms
            < last
                .transition_time_ms
                .saturating_add(UNSCHEDULABLE_REFRESH_MS)
}

/// The Events of a status change: one for a new phase and one for a new condition, or
/// one for both when a gang is placed and changes phase in the same cycle (most gangs),
/// the phase then in the condition's Event's message. Two Events per placed gang were a
/// third of a replica's writes to the API server besides its binds (1,000 of ~3,080 for
/// 500 gangs of 10).
fn status_events(key: &ObjectKey, old: &PodGroupStatus, status: &PodGroupStatus) -> Vec<Event> {
    let phase = (status.phase != old.phase).then(|| status.phase.as_str());
    let condition = status.conditions.last().filter(|c| {
        Some((&c.kind, &c.message)) != old.conditions.last().map(|c| (&c.kind, &c.message))
    });
    let event = |kind, reason: &str, message: String| Event {
        object: key.clone(),
        kind,
        reason: reason.to_string(),
        message,
    };
    match (phase, condition) {
        (Some(phase), Some(c)) if c.kind != CONDITION_UNSCHEDULABLE => {
            vec![event(
                "Normal",
                &c.kind,
                format!("{}; PodGroup is {phase}", c.message),
            )]
        }
        (phase, condition) => phase
            .map(|phase| event("Normal", phase, format!("PodGroup is {phase}")))
            .into_iter()
            .chain(condition.map(|c| {
                if c.kind == CONDITION_UNSCHEDULABLE {
                    // Unschedulable events carry the condition's reason (NotEnoughResources,
                    // Timeout, QueueNotFound, ...), as Volcano's do.
                    event("Warning", &c.reason, c.message.clone())
                } else {
                    event("Normal", &c.kind, c.message.clone())
                }
            }))
            .collect(),
    }
}

/// [`pending_reason`] of a closed session: the one its status was given, when `close`
/// judged the job (the state no longer changes after it), moved out of the session. Ask
/// once per job: a simulated round asks it of every pending gang, and a copy of each
/// reason was a measurable part of the round.
pub fn take_pending_reason(session: &mut Session, job: JobId) -> Option<String> {
    match session.closed_reasons.get_mut(job) {
        Some(Some(reason)) => reason.take(),
        _ => pending_reason(session, job),
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
/// admitted, else Pending. `None` when that is the status the PodGroup has: most gangs'
/// statuses do not change in a cycle, and copying each one's conditions to find that out
/// was a measurable part of a sustained run's cycle. Also returns the job's pending reason.
fn job_status(session: &Session, job: JobId) -> (Option<PodGroupStatus>, Option<String>) {
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

    // The message borrows the pending reason, which is also returned: most pending gangs'
    // conditions are not written again (`unschedulable_recent`), so it is not copied.
    let condition: Option<(&str, &str, Cow<str>)> = if unschedulable && timed_out {
        let t = &j.timeout;
        Some((
            CONDITION_UNSCHEDULABLE,
            "Timeout",
            // When it timed out, not the time now: a message that changed every cycle was
            // a status write and an Event every cycle for every timed-out gang.
            Cow::Owned(format!(
                "not scheduled within its schedule-timeout {} (created at {}, timed out at {}); {}{}",
                format_duration(t.timeout_ms.unwrap_or(0)),
                format_duration(t.created_ms),
                format_duration(t.deadline_ms().unwrap_or(state.now_ms)),
                if stopped {
                    "timeout-action stop: no longer scheduled"
                } else {
                    "timeout-action retry: still trying"
                },
                reason
                    .as_ref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            )),
        ))
    } else if unschedulable {
        Some((
            CONDITION_UNSCHEDULABLE,
            j.blocked_code.unwrap_or("NotEnoughResources"),
            Cow::Borrowed(reason.as_deref().unwrap_or_default()),
        ))
    } else if ready && j.ready_count > 0 {
        // Every running and finished gang, every cycle: compared without being written out.
        let message = GangReady {
            placed: j.ready_count,
            min_member: j.min_available(),
        };
        let said = old.conditions.last().is_some_and(|c| {
            c.kind == CONDITION_SCHEDULED
                && c.reason == "GangReady"
                && writes_exactly(&c.message, format_args!("{message}"))
        });
        (!said).then(|| {
            (
                CONDITION_SCHEDULED,
                "GangReady",
                Cow::Owned(message.to_string()),
            )
        })
    } else {
        None
    };
    let condition = condition.filter(|(kind, reason, message)| {
        !old.conditions.last().is_some_and(|c| {
            c.kind == *kind
                && c.reason == *reason
                && (c.message == *message || unschedulable_recent(c, state.now_ms))
        })
    });
    let inqueue_since_ms = match phase {
        PodGroupPhase::Inqueue => old
            .inqueue_since_ms
            .filter(|_| old.phase == PodGroupPhase::Inqueue)
            .or(Some(state.now_ms)),
        _ => None,
    };
    if condition.is_none()
        && (phase, running, succeeded, failed, inqueue_since_ms)
            == (
                old.phase,
                old.running,
                old.succeeded,
                old.failed,
                old.inqueue_since_ms,
            )
    {
        return (None, reason);
    }
    let mut conditions = old.conditions.clone();
    if let Some((kind, reason, message)) = condition {
        conditions.retain(|c| c.kind != CONDITION_SCHEDULED && c.kind != CONDITION_UNSCHEDULABLE);
        conditions.push(PodGroupCondition {
            kind: kind.to_string(),
            status: true,
            reason: reason.to_string(),
            message: message.into_owned(),
            transition_time_ms: state.now_ms,
        });
    }
    let status = PodGroupStatus {
        phase,
        running,
        succeeded,
        failed,
        conditions,
        inqueue_since_ms,
    };
    (Some(status), reason)
}

/// The message of a gang's `Scheduled` condition.
struct GangReady {
    placed: u32,
    min_member: u32,
}

impl fmt::Display for GangReady {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of minMember {} pods placed",
            self.placed, self.min_member
        )
    }
}

/// Whether `args` writes exactly `text`, found without writing it anywhere.
fn writes_exactly(text: &str, args: fmt::Arguments<'_>) -> bool {
    /// What is left of `text` to match.
    struct Rest<'a>(&'a str);
    impl fmt::Write for Rest<'_> {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            self.0 = self.0.strip_prefix(s).ok_or(fmt::Error)?;
            Ok(())
        }
    }
    let mut rest = Rest(text);
    fmt::write(&mut rest, args).is_ok() && rest.0.is_empty()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id};
    use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

    use crate::cluster::ClusterSnapshot;
    use crate::framework::testing::Cluster;
    use crate::framework::{CyclePlan, SchedulerConf};
    use crate::model::resources::{CPU, GPU};

    /// A span as captured: its name and its fields' values as text.
    type Captured = (String, BTreeMap<String, String>);

    /// Records every new span, whatever its level.
    struct Capture(Arc<Mutex<Vec<Captured>>>);

    struct Fields(BTreeMap<String, String>);

    impl Visit for Fields {
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.insert(field.name().to_string(), value.to_string());
        }
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0
                .insert(field.name().to_string(), format!("{value:?}"));
        }
    }

    impl<S: tracing::Subscriber> Layer<S> for Capture {
        fn on_new_span(&self, attrs: &Attributes<'_>, _: &Id, _: Context<'_, S>) {
            let mut fields = Fields(BTreeMap::new());
            attrs.record(&mut fields);
            let name = attrs.metadata().name().to_string();
            self.0.lock().expect("not poisoned").push((name, fields.0));
        }
    }

    fn spans_of_one_cycle(snapshot: &ClusterSnapshot) -> (Vec<Captured>, CyclePlan) {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry().with(Capture(spans.clone()));
        let conf = SchedulerConf::volcano_default();
        let (plan, _) = tracing::subscriber::with_default(subscriber, || {
            super::run_cycle(snapshot, &conf, crate::model::DEFAULT_SCHEDULER_NAME)
        });
        let captured = spans.lock().expect("not poisoned").clone();
        (captured, plan)
    }

    #[test]
    fn a_refused_gangs_span_carries_its_reason_and_a_placed_gangs_its_phase() {
        let cluster = Cluster::new()
            .node("n1", &[(CPU, 8_000), (GPU, 8)])
            .inqueue_group("fits", "default", 2)
            .pod("fits-0", Some("fits"), &[(CPU, 1_000), (GPU, 4)])
            .pod("fits-1", Some("fits"), &[(CPU, 1_000), (GPU, 4)])
            .inqueue_group("too-big", "default", 2)
            .pod("too-big-0", Some("too-big"), &[(CPU, 1_000), (GPU, 16)])
            .pod("too-big-1", Some("too-big"), &[(CPU, 1_000), (GPU, 16)]);
        let (spans, _) = spans_of_one_cycle(&cluster.build());
        let named = |n: &'static str| spans.iter().filter(move |(name, _)| name == n);
        assert_eq!(named("cycle").count(), 1, "{spans:?}");
        let actions: Vec<&str> = named("action").map(|(_, f)| f["action"].as_str()).collect();
        let conf = SchedulerConf::volcano_default();
        assert_eq!(
            actions,
            conf.actions.iter().map(String::as_str).collect::<Vec<_>>()
        );
        let gang = |key: &str| {
            named("gang")
                .find(|(_, f)| f["gang"] == key)
                .map(|(_, f)| f.clone())
                .unwrap_or_else(|| panic!("no gang span for {key}: {spans:?}"))
        };
        let refused = gang("default/too-big");
        assert_ne!(refused["outcome"], "Running", "{refused:?}");
        let reason = &refused["reason"];
        assert!(reason.starts_with("NotEnoughResources: "), "{reason}");
        assert!(reason.contains("0/2 pods placed (minMember 2)"), "{reason}");
        assert!(
            reason.contains(GPU),
            "the reason names the short resource: {reason}"
        );
        let placed = gang("default/fits");
        assert_eq!(placed["outcome"], "Running", "{placed:?}");
        assert!(
            placed["reason"].contains("2 of minMember 2 pods placed"),
            "{placed:?}"
        );
    }

    #[test]
    fn a_settled_gang_is_traced_when_it_changes_and_not_in_the_cycles_after() {
        let mut snapshot = Cluster::new()
            .node("n1", &[(CPU, 8_000), (GPU, 8)])
            .inqueue_group("done", "default", 1)
            .running_pod("done-0", Some("done"), "n1", &[(CPU, 1_000), (GPU, 4)])
            .inqueue_group("too-big", "default", 1)
            .pod("too-big-0", Some("too-big"), &[(CPU, 1_000), (GPU, 16)])
            .build();
        let gangs = |spans: &[Captured]| -> Vec<String> {
            spans
                .iter()
                .filter(|(n, _)| n == "gang")
                .map(|(_, f)| f["gang"].clone())
                .collect()
        };
        let (first, plan) = spans_of_one_cycle(&snapshot);
        assert_eq!(
            gangs(&first),
            ["default/done", "default/too-big"],
            "{first:?}"
        );
        // The API server takes the new statuses; the next cycle changes nothing for the
        // Running gang, whose pod is bound: only the refused one is traced again.
        for (key, status) in plan.status_updates {
            let pg = snapshot.pod_groups.iter_mut().find(|g| g.key == key);
            Arc::make_mut(pg.expect("a status for a known PodGroup")).status = status;
        }
        let (second, _) = spans_of_one_cycle(&snapshot);
        assert_eq!(gangs(&second), ["default/too-big"], "{second:?}");
    }
}

#[cfg(test)]
mod closed_reason_tests {
    use super::*;
    use crate::framework::SchedulerConf;
    use crate::framework::testing::Cluster;
    use crate::model::resources::{CPU, GPU};

    /// The simulator's pending list reads the reasons `close` wrote instead of working
    /// them out again: they must be the same, for judged jobs and for shadow ones.
    #[test]
    fn the_reason_kept_by_close_is_the_reason_worked_out_again() {
        let mut cluster = Cluster::new()
            .node("n1", &[(CPU, 8_000), (GPU, 4)])
            .group("fits", "default", 2)
            .group("too-big", "default", 3)
            .group("nowhere", "missing-queue", 1)
            .pod("nowhere-0", Some("nowhere"), &[(GPU, 1)])
            .pod("lone", None, &[(GPU, 16)]);
        for i in 0..2 {
            cluster = cluster.pod(&format!("fits-{i}"), Some("fits"), &[(GPU, 1)]);
        }
        for i in 0..3 {
            cluster = cluster.pod(&format!("too-big-{i}"), Some("too-big"), &[(GPU, 2)]);
        }
        let (_, mut session) = crate::framework::run_cycle(
            &cluster.build(),
            &SchedulerConf::volcano_default(),
            "phalanx",
        );
        let mut with_reason = 0;
        for job in 0..session.state.jobs.len() {
            let again = pending_reason(&session, job);
            with_reason += usize::from(again.is_some());
            assert_eq!(take_pending_reason(&mut session, job), again, "job {job}");
        }
        assert!(
            with_reason >= 2,
            "the scenario must leave gangs pending with reasons"
        );
        assert!(
            session.state.jobs.iter().any(|j| j.shadow),
            "a shadow job is asked too"
        );
    }

    /// A pending gang's Unschedulable condition of the same reason with a new message is
    /// not written until the written one is a minute old; a new reason is written at once.
    #[test]
    fn an_unschedulable_condition_of_the_same_reason_waits_a_minute_to_be_written_again() {
        let conf = SchedulerConf::volcano_default();
        // Three pods of 2 GPUs on one node of 4 or 5: never fits.
        let cluster = |status: Option<PodGroupStatus>, gpus: i64, now_ms: TimeMs| {
            let mut group = crate::model::PodGroup::new(ObjectKey::new("default", "big"), 3);
            group.queue = "default".into();
            if let Some(status) = status {
                group.status = status;
            }
            let mut c = Cluster::new()
                .node("n1", &[(CPU, 8_000), (GPU, gpus)])
                .group_with(group);
            for i in 0..3 {
                c = c.pod(&format!("big-{i}"), Some("big"), &[(GPU, 2)]);
            }
            let mut snapshot = c.build();
            snapshot.now_ms = now_ms;
            snapshot
        };
        let written = |snapshot: &ClusterSnapshot| {
            let (plan, _) = crate::framework::run_cycle(snapshot, &conf, "phalanx");
            plan.status_updates
                .into_iter()
                .find_map(|(k, s)| (k == ObjectKey::new("default", "big")).then_some(s))
        };
        let first = written(&cluster(None, 4, 0)).expect("a first status");
        let said = |s: &PodGroupStatus| s.conditions.last().map(|c| c.message.clone());
        assert_eq!(
            first.conditions.last().map(|c| c.kind.as_str()),
            Some(CONDITION_UNSCHEDULABLE)
        );
        // A GPU more on the node: a new message, the same reason.
        let half_minute = written(&cluster(Some(first.clone()), 5, 30_000));
        assert_eq!(half_minute, None, "the same reason, 30 s after");
        let minute = written(&cluster(Some(first.clone()), 5, 60_000)).expect("a minute after");
        assert_ne!(said(&minute), said(&first), "{:?}", said(&minute));
        assert_eq!(
            minute.conditions.last().map(|c| c.transition_time_ms),
            Some(60_000)
        );
        // The same message written again is not a change at any age.
        assert_eq!(written(&cluster(Some(first.clone()), 4, 600_000)), None);
        // A new reason is written at once.
        let mut other = first.clone();
        other.conditions.last_mut().expect("a condition").reason = "QueueClosed".into();
        let now = written(&cluster(Some(other), 4, 1)).expect("a new reason, at once");
        assert_eq!(
            now.conditions.last().map(|c| c.reason.as_str()),
            Some("NotEnoughResources")
        );
    }

    fn with(phase: crate::model::PodGroupPhase, kind: &str, reason: &str) -> PodGroupStatus {
        PodGroupStatus {
            phase,
            conditions: vec![crate::model::PodGroupCondition {
                kind: kind.into(),
                status: true,
                reason: reason.into(),
                message: format!("{reason} message"),
                transition_time_ms: 0,
            }],
            ..PodGroupStatus::default()
        }
    }

    /// The Events of `old` -> `new`, as (kind, reason, message).
    fn events_of(
        old: &PodGroupStatus,
        new: &PodGroupStatus,
    ) -> Vec<(&'static str, String, String)> {
        status_events(&ObjectKey::new("ns", "g"), old, new)
            .into_iter()
            .map(|e| (e.kind, e.reason, e.message))
            .collect()
    }

    fn seen(kind: &'static str, reason: &str, message: &str) -> (&'static str, String, String) {
        (kind, reason.to_string(), message.to_string())
    }

    #[test]
    fn a_gang_placed_as_it_changes_phase_gets_one_event_and_an_unschedulable_one_keeps_its_warning()
    {
        use crate::model::PodGroupPhase::{Inqueue, Running};
        let pending = PodGroupStatus::default();
        let placed = with(Running, "Scheduled", "GangReady");
        assert_eq!(
            events_of(&pending, &placed),
            [seen(
                "Normal",
                "Scheduled",
                "GangReady message; PodGroup is Running"
            )]
        );
        let unschedulable = with(Inqueue, "Unschedulable", "NotEnoughResources");
        assert_eq!(
            events_of(&pending, &unschedulable),
            [
                seen("Normal", "Inqueue", "PodGroup is Inqueue"),
                seen(
                    "Warning",
                    "NotEnoughResources",
                    "NotEnoughResources message"
                )
            ]
        );
        // A phase alone, or a condition alone, is an Event of its own as before.
        let inqueue = PodGroupStatus {
            phase: Inqueue,
            ..PodGroupStatus::default()
        };
        assert_eq!(
            events_of(&pending, &inqueue),
            [seen("Normal", "Inqueue", "PodGroup is Inqueue")]
        );
        let mut more = placed.clone();
        more.conditions[0].message = "12 of minMember 10 pods placed".into();
        assert_eq!(
            events_of(&placed, &more),
            [seen(
                "Normal",
                "Scheduled",
                "12 of minMember 10 pods placed"
            )]
        );
        assert!(events_of(&more, &more).is_empty());
    }
}

#[cfg(test)]
mod message_tests {
    use super::*;

    /// A condition's message is compared with what a status would say without writing it
    /// out: equal only when every piece matches and nothing is left over on either side.
    #[test]
    fn a_message_is_compared_without_being_written_out() {
        let m = GangReady {
            placed: 12,
            min_member: 8,
        };
        let said = "12 of minMember 8 pods placed";
        assert_eq!(m.to_string(), said);
        assert!(writes_exactly(said, format_args!("{m}")));
        assert!(!writes_exactly(
            "12 of minMember 8 pods",
            format_args!("{m}")
        ));
        assert!(!writes_exactly(
            "12 of minMember 8 pods placed.",
            format_args!("{m}")
        ));
        assert!(!writes_exactly(
            "13 of minMember 8 pods placed",
            format_args!("{m}")
        ));
        assert!(!writes_exactly("", format_args!("{m}")));
        assert!(writes_exactly("", format_args!("")));
    }
}
