//! Per-object gauges, rebuilt from the closed session every cycle: one series per PodGroup,
//! per unschedulable job, per queue. They are rendered by phalanx itself, not through the
//! `metrics` recorder, because that recorder cannot forget a series: a deleted PodGroup or
//! queue must disappear from `/metrics`, and a PodGroup that changed phase must not leave
//! its old phase's series behind (the seed's alert would keep firing on it).

use std::fmt::Write as _;
use std::sync::Arc;

use crate::framework::{CyclePlan, Session, SessionState};
use crate::model::{
    PodGroupPhase, Resources, SIM_CREATED_AT_ANNOTATION, TimeMs,
    resources::{CPU, MEMORY, PODS},
};
use crate::observe::fragmentation;
use crate::observe::name;
use crate::plugins::proportion::{QueueShare, compute_deserved};

/// The names this module renders (the recorder must never be given them too).
pub const STATE_NAMES: &[&str] = &[
    name::PODGROUP_STATUS,
    name::UNSCHEDULE_TASK_COUNT,
    name::UNSCHEDULE_JOB_COUNT,
    name::PREEMPTION_VICTIMS,
    name::QUEUE_ALLOCATED_MILLI_CPU,
    name::QUEUE_ALLOCATED_MEMORY,
    name::QUEUE_ALLOCATED_SCALAR,
    name::QUEUE_REQUEST_MILLI_CPU,
    name::QUEUE_REQUEST_MEMORY,
    name::QUEUE_REQUEST_SCALAR,
    name::QUEUE_DESERVED_MILLI_CPU,
    name::QUEUE_DESERVED_MEMORY,
    name::QUEUE_DESERVED_SCALAR,
    name::QUEUE_CAPABILITY_MILLI_CPU,
    name::QUEUE_CAPABILITY_MEMORY,
    name::QUEUE_CAPABILITY_SCALAR,
    name::QUEUE_WEIGHT,
    name::QUEUE_PENDING_JOBS,
    name::FRAGMENTED_GPU_RATIO,
    name::LARGEST_FITTING_GANG,
    name::CLUSTER_GPUS,
];

pub fn is_state_series(metric: &str) -> bool {
    STATE_NAMES.contains(&metric)
}

type Labels = Vec<(&'static str, String)>;

/// The gauges of one cycle, by family, in a stable order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StateSeries {
    families: Vec<(&'static str, Vec<(Labels, f64)>)>,
}

impl StateSeries {
    fn push(&mut self, metric: &'static str, labels: Labels, value: f64) {
        match self.families.iter_mut().find(|(n, _)| *n == metric) {
            Some((_, samples)) => samples.push((labels, value)),
            None => self.families.push((metric, vec![(labels, value)])),
        }
    }

    /// The value of one series, for tests and `status`.
    pub fn value(&self, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let (_, samples) = self.families.iter().find(|(n, _)| *n == metric)?;
        samples
            .iter()
            .find(|(l, _)| {
                l.len() == labels.len()
                    && l.iter()
                        .zip(labels)
                        .all(|((k, v), (k2, v2))| k == k2 && v == v2)
            })
            .map(|(_, v)| *v)
    }

    /// Prometheus text exposition format (version 0.0.4), families in name order.
    pub fn render(&self) -> String {
        let mut families = self.families.clone();
        families.sort_by_key(|(n, _)| *n);
        let mut out = String::new();
        for (metric, samples) in &families {
            let help = name::ALL
                .iter()
                .find(|(n, _, _)| n == metric)
                .map_or("", |(_, _, h)| *h);
            let _ = writeln!(out, "# HELP {metric} {}", escape_help(help));
            let _ = writeln!(out, "# TYPE {metric} gauge");
            for (labels, value) in samples {
                let _ = writeln!(out, "{metric}{} {}", render_labels(labels), number(*value));
            }
            out.push('\n');
        }
        out
    }
}

fn render_labels(labels: &Labels) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

fn number(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// The gauges for the session just closed and the plan it produced.
pub fn state_series(session: &Session, plan: &CyclePlan) -> StateSeries {
    let mut out = StateSeries::default();
    podgroups(session, plan, &mut out);
    queues(&session.state, &mut out);
    out.push(
        name::PREEMPTION_VICTIMS,
        vec![],
        plan.evictions.len() as f64,
    );
    let f = fragmentation::of_state(&session.state);
    out.push(name::FRAGMENTED_GPU_RATIO, vec![], f.ratio());
    out.push(
        name::LARGEST_FITTING_GANG,
        vec![],
        f.largest_gang_pods as f64,
    );
    let state = &session.state;
    out.push(
        name::CLUSTER_GPUS,
        vec![("state", "allocatable".into())],
        state.total_allocatable.gpus() as f64,
    );
    out.push(
        name::CLUSTER_GPUS,
        vec![("state", "used".into())],
        state.total_used.gpus() as f64,
    );
    out
}

/// When the job entered its current phase: Inqueue since admission, Running (or later)
/// since its `Scheduled` condition, otherwise since the PodGroup was created
/// (`metadata.creationTimestamp`; the `phalanx.dev/sim-created-at` annotation in the
/// simulator).
pub fn phase_since_ms(job: &crate::framework::session::JobInfo) -> TimeMs {
    let status = &job.pod_group.status;
    let created = created_ms(job);
    let scheduled = || {
        status
            .conditions
            .iter()
            .find(|c| c.kind == crate::framework::cycle::CONDITION_SCHEDULED)
            .map(|c| c.transition_time_ms)
    };
    match status.phase {
        PodGroupPhase::Inqueue => status.inqueue_since_ms.unwrap_or(created),
        PodGroupPhase::Running | PodGroupPhase::Completed => scheduled().unwrap_or(created),
        PodGroupPhase::Pending | PodGroupPhase::Unknown => created,
    }
}

/// When the job's PodGroup was created: `metadata.creationTimestamp` (which the Kubernetes
/// reader keeps as the creation index), or the simulator's `phalanx.dev/sim-created-at`.
pub fn created_ms(job: &crate::framework::session::JobInfo) -> TimeMs {
    if job
        .pod_group
        .annotations
        .contains_key(SIM_CREATED_AT_ANNOTATION)
    {
        job.timeout.created_ms
    } else {
        job.pod_group.creation_index
    }
}

/// `podgroup_status` (after this cycle's status updates) and the unschedulable counts.
fn podgroups(session: &Session, plan: &CyclePlan, out: &mut StateSeries) {
    let state = &session.state;
    let updated: std::collections::HashMap<_, _> =
        plan.status_updates.iter().map(|(k, s)| (k, s)).collect();
    let mut unschedulable_jobs = 0;
    for (id, job) in state.jobs.iter().enumerate() {
        if job.shadow || !session.in_scope(id) {
            continue;
        }
        let mut after = job.clone();
        if let Some(status) = updated.get(job.key()) {
            Arc::make_mut(&mut after.pod_group).status = (*status).clone();
        }
        let since = phase_since_ms(&after);
        let seconds = state.now_ms.saturating_sub(since) as f64 / 1000.0;
        let key = job.key();
        out.push(
            name::PODGROUP_STATUS,
            vec![
                ("namespace", key.namespace.clone()),
                ("name", key.name.clone()),
                ("phase", after.pod_group.status.phase.as_str().to_string()),
            ],
            seconds,
        );
        let pending = state.pending_tasks(id).count();
        if pending > 0 && (job.blocked_reason.is_some() || !job.fit_errors.is_empty()) {
            unschedulable_jobs += 1;
            out.push(
                name::UNSCHEDULE_TASK_COUNT,
                vec![("job_id", key.to_string())],
                pending as f64,
            );
        }
    }
    out.push(
        name::UNSCHEDULE_JOB_COUNT,
        vec![],
        unschedulable_jobs as f64,
    );
}

/// The queue family: allocated, request, deserved and capability (cpu in millicores,
/// memory in bytes, every other resource as a scalar), weight and pending gangs.
fn queues(state: &SessionState, out: &mut StateSeries) {
    let shares: Vec<QueueShare> = match &state.whole {
        Some(w) if w.figures.queue_shares.len() == state.queues.len() => {
            w.figures.queue_shares.clone()
        }
        _ => compute_deserved(state),
    };
    for (qid, q) in state.queues.iter().enumerate() {
        let queue = &q.queue.name;
        let share = shares.get(qid).cloned().unwrap_or_default();
        let families = [
            (
                [
                    name::QUEUE_ALLOCATED_MILLI_CPU,
                    name::QUEUE_ALLOCATED_MEMORY,
                    name::QUEUE_ALLOCATED_SCALAR,
                ],
                Some(&q.allocated),
            ),
            (
                [
                    name::QUEUE_REQUEST_MILLI_CPU,
                    name::QUEUE_REQUEST_MEMORY,
                    name::QUEUE_REQUEST_SCALAR,
                ],
                Some(&share.request),
            ),
            (
                [
                    name::QUEUE_DESERVED_MILLI_CPU,
                    name::QUEUE_DESERVED_MEMORY,
                    name::QUEUE_DESERVED_SCALAR,
                ],
                Some(&share.deserved),
            ),
            (
                [
                    name::QUEUE_CAPABILITY_MILLI_CPU,
                    name::QUEUE_CAPABILITY_MEMORY,
                    name::QUEUE_CAPABILITY_SCALAR,
                ],
                q.queue.capability.as_ref(),
            ),
        ];
        for (names, amounts) in families {
            if let Some(r) = amounts {
                resource_family(
                    out,
                    names,
                    queue,
                    r,
                    names[0] != name::QUEUE_CAPABILITY_MILLI_CPU,
                );
            }
        }
        out.push(
            name::QUEUE_WEIGHT,
            vec![("queue_name", queue.clone())],
            f64::from(q.queue.weight),
        );
        let pending = q
            .jobs
            .iter()
            .filter(|&&j| !state.jobs[j].shadow && state.pending_tasks(j).count() > 0)
            .count();
        out.push(
            name::QUEUE_PENDING_JOBS,
            vec![("queue_name", queue.clone())],
            pending as f64,
        );
    }
}

/// One queue's cpu, memory and scalar series. A capability lists only what it limits, so
/// its cpu and memory series exist only when listed; the other figures always have both.
fn resource_family(
    out: &mut StateSeries,
    [cpu, memory, scalar]: [&'static str; 3],
    queue: &str,
    r: &Resources,
    always: bool,
) {
    let q = || vec![("queue_name", queue.to_string())];
    for (metric, resource) in [(cpu, CPU), (memory, MEMORY)] {
        match r.get_listed(resource) {
            Some(v) => out.push(metric, q(), v as f64),
            None if always => out.push(metric, q(), 0.0),
            None => {}
        }
    }
    for (res, v) in r.iter() {
        let res = res.as_str();
        if res != CPU && res != MEMORY && res != PODS {
            let mut labels = q();
            labels.push(("resource", res.to_string()));
            out.push(scalar, labels, v as f64);
        }
    }
}
