//! "Why is this PodGroup where it is?" in numbers: for the Unschedulable condition's message,
//! for `phalanx simulate --explain NAMESPACE/PODGROUP` and for `phalanx explain` against a
//! running `phalanx serve` (its admin service, `serve/admin`): both run one dry cycle on
//! the cluster as they see it and call [`explain`] and [`render_events`].
//!
//! Example: `11 pods need nvidia.com/gpu 11; 8 free on 8 nodes; 3 nodes have 0 free;
//! queue research-team: capability 16, allocated 12`.

use std::fmt::Write as _;

use crate::framework::node_picker::explain_no_fit;
use crate::framework::session::{JobId, Session, SessionState, TaskStatus};
use crate::framework::timeout::format_duration;
use crate::model::resources::format_amount;
use crate::model::{ObjectKey, Resources};

/// What is free in the cluster, per resource: the total of positive idle amounts and on how
/// many nodes some is free. Computed once per cycle close (it is O(nodes)), then shared by
/// every gang's message.
#[derive(Clone, Debug, Default)]
pub struct FreeSummary {
    free: Resources,
    nodes_with_free: Vec<(String, usize)>,
    nodes: usize,
}

impl FreeSummary {
    pub fn of(state: &SessionState) -> Self {
        let mut free = Resources::new();
        let mut with_free: std::collections::BTreeMap<&str, usize> =
            std::collections::BTreeMap::new();
        for n in &state.nodes {
            for (name, v) in n.idle.iter() {
                if v > 0 {
                    free.set(name, free.get(name.as_str()).saturating_add(v));
                    *with_free.entry(name.as_str()).or_default() += 1;
                }
            }
        }
        Self {
            nodes_with_free: with_free
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            free,
            nodes: state.nodes.len(),
        }
    }

    fn nodes_with_free(&self, resource: &str) -> usize {
        self.nodes_with_free
            .iter()
            .find(|(r, _)| r == resource)
            .map_or(0, |(_, n)| *n)
    }
}

/// The gang's missing members, what they need of the scarcest resource, what is free and
/// where, and the queue's limits on that resource. `None` when nothing is missing.
pub fn gang_numbers(state: &SessionState, job: JobId, cluster: &FreeSummary) -> Option<String> {
    let j = &state.jobs[job];
    let placed = j.ready_count + j.pipelined_count + j.pending_best_effort;
    let missing = j.min_available().saturating_sub(placed) as usize;
    if missing == 0 {
        return None;
    }
    let mut need = Resources::new();
    for t in state.pending_tasks(job).take(missing) {
        need.add(state.tasks[t].resreq());
    }
    if need.is_zero() {
        return None;
    }
    let free = &cluster.free;
    // The resource to talk about: the first one short, else GPUs, else the first requested.
    let resource = need
        .first_shortage(free)
        .map(|(r, _, _)| r.as_str().to_string())
        .or_else(|| (need.gpus() > 0).then(|| crate::model::resources::GPU.to_string()))
        .or_else(|| need.names().next().map(|r| r.as_str().to_string()))?;
    let amount = |v: i64| format_amount(&resource, v);
    let with_free = cluster.nodes_with_free(&resource);
    let without = cluster.nodes - with_free;
    let mut out = format!(
        "{missing} pods need {resource} {}; {} free on {with_free} nodes; {without} nodes have 0 free",
        amount(need.get(&resource)),
        amount(free.get(&resource)),
    );
    if let Some(q) = j.queue {
        let queue = &state.queues[q];
        let _ = write!(out, "; queue {}: ", queue.queue.name);
        if let Some(cap) = &queue.queue.capability
            && cap.names().any(|n| n.as_str() == resource)
        {
            let _ = write!(out, "capability {}, ", amount(cap.get(&resource)));
        }
        let _ = write!(out, "allocated {}", amount(queue.allocated.get(&resource)));
    }
    Some(out)
}

/// Where a gang with pods pending stands among its queue's gangs with pods pending, in the
/// job order of the configured plugins (the order allocate tries them in); `None` when it
/// has none pending or no queue.
fn queue_place(session: &Session, job: JobId) -> Option<String> {
    let state = &session.state;
    let q = state.jobs[job].queue?;
    let waiting = |j: JobId| {
        let info = &state.jobs[j];
        info.queue == Some(q) && !info.shadow && state.pending_tasks(j).next().is_some()
    };
    if !waiting(job) {
        return None;
    }
    let mut order: Vec<JobId> = (0..state.jobs.len()).filter(|&j| waiting(j)).collect();
    order.sort_by(|&a, &b| session.plugins.job_order(state, a, b).then(a.cmp(&b)));
    let place = order.iter().position(|&j| j == job)? + 1;
    Some(format!(
        "place in queue {}: {place} of {} gangs with pods pending (the plugins' job order)",
        state.queues[q].queue.name,
        order.len()
    ))
}

/// The full explanation of one PodGroup after a cycle, for `--explain`.
///
/// `time` writes an instant (a condition's transition, a gang's creation) the way the
/// caller's clock reads: the simulator's are ms since its start, serve's are wall-clock ms.
pub fn explain(session: &Session, key: &ObjectKey, time: &dyn Fn(u64) -> String) -> String {
    let state = &session.state;
    // A pod of a missing PodGroup is explained through the one job of its group's orphans.
    let orphan_of = || {
        let task = state.tasks.iter().find(|t| t.pod.key == *key)?;
        task.job.filter(|&j| state.jobs[j].missing_group.is_some())
    };
    let found = state.jobs.iter().position(|j| j.key() == key);
    let Some(job) = found.or_else(orphan_of) else {
        return format!("PodGroup {key}: no such PodGroup (or pod) in the cluster\n");
    };
    let j = &state.jobs[job];
    let mut out = String::new();
    let count = |s: TaskStatus| {
        j.tasks
            .iter()
            .filter(|&&t| state.tasks[t].status == s)
            .count()
    };
    let _ = writeln!(
        out,
        "PodGroup {}: phase {}, priority {}, queue {}",
        j.key(),
        j.pod_group.status.phase.as_str(),
        j.priority,
        j.pod_group.queue
    );
    let _ = writeln!(
        out,
        "  members: minMember {}, {} pods: {} running, {} bound, {} pending, {} succeeded, {} failed",
        j.min_available(),
        j.tasks.len(),
        count(TaskStatus::Running),
        count(TaskStatus::Bound),
        count(TaskStatus::Pending),
        count(TaskStatus::Succeeded),
        count(TaskStatus::Failed),
    );
    match j.queue {
        None if j.missing_group.is_some() => {
            // Its queue is the missing PodGroup's, which nobody can read.
            let _ = writeln!(out, "  queue: unknown (its PodGroup does not exist)");
        }
        None => {
            let _ = writeln!(
                out,
                "  queue {:?} does not exist: nothing is scheduled for this PodGroup until it does",
                j.pod_group.queue
            );
        }
        Some(q) => {
            let queue = &state.queues[q];
            let shares = crate::plugins::proportion::compute_deserved(state);
            let s = &shares[q];
            let _ = writeln!(
                out,
                "  queue {}: state {:?}, weight {}, reclaimable {}",
                queue.queue.name, queue.queue.state, queue.queue.weight, queue.queue.reclaimable
            );
            let _ = writeln!(out, "    allocated  {}", queue.allocated);
            let _ = writeln!(out, "    deserved   {}", s.deserved);
            let _ = writeln!(
                out,
                "    capability {}",
                queue
                    .queue
                    .capability
                    .as_ref()
                    .map_or_else(|| "unlimited".to_string(), |c| c.to_string())
            );
            if !queue.queue.guarantee.is_zero() {
                let _ = writeln!(out, "    guarantee  {}", queue.queue.guarantee);
            }
            let share = queue.allocated.share_of(&s.deserved);
            let _ = writeln!(
                out,
                "    share {:.2} of deserved (the proportion plugin's order)",
                share
            );
        }
    }
    if let Some(place) = queue_place(session, job) {
        let _ = writeln!(out, "  {place}");
    }
    let t = &j.timeout;
    if let Some(timeout) = t.timeout_ms {
        let _ = writeln!(
            out,
            "  schedule timeout {} from creation at {}, action {}: {}",
            format_duration(timeout),
            time(t.created_ms),
            t.action.as_str(),
            if j.timed_out(state.now_ms) {
                "timed out"
            } else {
                "not reached"
            }
        );
    }
    if let Some(numbers) = gang_numbers(state, job, &FreeSummary::of(state)) {
        let _ = writeln!(out, "  numbers: {numbers}");
    }
    if let Some(reason) = &j.blocked_reason {
        let _ = writeln!(
            out,
            "  blocked ({}): {reason}",
            j.blocked_code.unwrap_or("Blocked")
        );
    }
    for reason in &j.fit_errors.job_reasons {
        let _ = writeln!(out, "  {reason}");
    }
    if let Some(task) = state.pending_tasks(job).next() {
        let errors = explain_no_fit(session, task);
        let fitting = errors.nodes_tried as usize
            - errors
                .by_reason
                .values()
                .map(|&n| n as usize)
                .sum::<usize>();
        let _ = writeln!(
            out,
            "  first pending pod {} ({}): fits on {fitting} of {} nodes now",
            state.tasks[task].pod.key,
            state.tasks[task].resreq(),
            errors.nodes_tried
        );
        for (reason, n) in &errors.by_reason {
            let _ = writeln!(out, "    {n} nodes: {reason}");
        }
    }
    for c in &j.pod_group.status.conditions {
        let _ = writeln!(
            out,
            "  condition {} ({}) since {}: {}",
            c.kind,
            c.reason,
            time(c.transition_time_ms),
            c.message
        );
    }
    out
}

/// How many of an object's Events an explanation shows, the latest.
pub const EVENTS_SHOWN: usize = 10;

/// The last ten of `events` (time in ms, the Event), oldest first, under the heading the
/// explanation uses, each time as `time` writes it (the simulator: seconds of simulated
/// time; a live replica: how long ago); nothing when there are none.
pub fn render_events(
    out: &mut String,
    (events, recorded): (&[(u64, &crate::framework::Event)], usize),
    time: &dyn Fn(u64) -> String,
) {
    if events.is_empty() {
        return;
    }
    let shown = events.len().min(EVENTS_SHOWN);
    let _ = writeln!(out, "  events (last {shown} of {recorded}):");
    for (at, e) in events.iter().rev().take(EVENTS_SHOWN).rev() {
        let _ = writeln!(
            out,
            "    {:>9} {:<7} {:<20} {}",
            time(*at),
            e.kind,
            e.reason,
            e.message
        );
    }
}
