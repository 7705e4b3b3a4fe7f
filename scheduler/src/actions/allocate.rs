//! `allocate`: places admitted gangs, all or nothing.
//!
//! Queues take turns in queue order (proportion: the least-served first); from the chosen
//! queue the first job in job order (priority, then not-yet-ready gangs, then drf share) gets
//! its pending tasks placed one by one, in task order, each on the best node, inside one
//! [`Statement`]. As soon as the gang is ready (`minMember` placed) the statement is
//! committed and the job goes back in line for its remaining (elastic) tasks; if the gang
//! cannot become ready, everything it tentatively took is given back.

use crate::actions::job_block;
use std::collections::HashMap;

use crate::framework::node_picker::NodePicker;
use crate::framework::ordered_queue::OrderedQueue;
use crate::framework::{JobId, QueueId, Session, Statement, TaskId};
use crate::model::Resources;

pub fn run(session: &mut Session) {
    let enqueue_configured = session.conf.actions.iter().any(|a| a == "enqueue");
    let mut per_queue: Vec<OrderedQueue<JobId>> = (0..session.state.queues.len())
        .map(|_| OrderedQueue::new())
        .collect();
    for job in 0..session.state.jobs.len() {
        if session.state.pending_tasks(job).next().is_none() {
            continue;
        }
        if enqueue_configured && session.state.jobs[job].is_pending_phase() {
            if session.state.jobs[job].blocked_reason.is_none() {
                session.state.jobs[job].blocked_reason =
                    Some("waiting to be admitted (enqueue)".to_string());
            }
            continue;
        }
        if let Some((code, reason)) = job_block(session, job) {
            session.state.jobs[job].block(code, reason);
            continue;
        }
        let queue = session.state.jobs[job]
            .queue
            .expect("job_blocker rejects jobs without a queue");
        let (state, plugins) = (&session.state, &session.plugins);
        per_queue[queue].push(job, |a, b| plugins.job_order(state, a, b));
    }

    let mut placer = Placer::default();
    let mut queues: OrderedQueue<QueueId> = OrderedQueue::new();
    for (q, jobs) in per_queue.iter().enumerate() {
        if !jobs.is_empty() {
            let (state, plugins) = (&session.state, &session.plugins);
            queues.push(q, |a, b| plugins.queue_order(state, a, b));
        }
    }
    loop {
        let popped = {
            let (state, plugins) = (&session.state, &session.plugins);
            queues.pop(|a, b| plugins.queue_order(state, a, b))
        };
        let Some(queue) = popped else { break };
        if session.plugins.overused(&session.state, queue) {
            for job in drain(&mut per_queue[queue]) {
                session.state.jobs[job].fit_errors.add_job_reason(format!(
                    "queue {} has used its deserved share",
                    session.state.queues[queue].queue.name
                ));
            }
            continue;
        }
        let job = {
            let (state, plugins) = (&session.state, &session.plugins);
            per_queue[queue].pop(|a, b| plugins.job_order(state, a, b))
        };
        let Some(job) = job else { continue };
        let more_to_place = placer.allocate_job(session, queue, job);
        if more_to_place {
            let (state, plugins) = (&session.state, &session.plugins);
            per_queue[queue].push(job, |a, b| plugins.job_order(state, a, b));
        }
        if !per_queue[queue].is_empty() {
            let (state, plugins) = (&session.state, &session.plugins);
            queues.push(queue, |a, b| plugins.queue_order(state, a, b));
        }
    }
}

fn drain(queue: &mut OrderedQueue<JobId>) -> Vec<JobId> {
    let mut out = Vec::with_capacity(queue.len());
    while let Some(j) = queue.pop(|a, b| a.cmp(&b)) {
        out.push(j);
    }
    out
}

/// Node choice shared by all jobs of one `allocate` run.
#[derive(Debug, Default)]
struct Placer {
    picker: NodePicker,
    /// For a placement key: a gang needing more than this many tasks of that key alone was
    /// already found not to fit. Within one `allocate` run nodes only fill up (a discarded
    /// statement restores an earlier state), so the bound stays true for the whole run.
    fits_at_most: HashMap<u64, u32>,
}

impl Placer {
    /// Tries to place the job's pending tasks. Returns true when the job became ready with
    /// tasks still pending, so it should go back in line.
    fn allocate_job(&mut self, session: &mut Session, queue: QueueId, job: JobId) -> bool {
        let mut tasks: Vec<TaskId> = session
            .state
            .pending_tasks(job)
            .filter(|&t| !session.state.tasks[t].is_best_effort())
            .collect();
        {
            let (state, plugins) = (&session.state, &session.plugins);
            tasks.sort_by(|&a, &b| plugins.task_order(state, a, b));
        }
        if tasks.is_empty() {
            return false;
        }
        // Only the latest attempt's reasons describe the job now.
        session.state.jobs[job].fit_errors.clear();
        // The fast refusals below reason about the members a gang still needs; they apply
        // only while the plugins say the job is not ready (with gang scheduling off, every
        // job is "ready" and each pod is placed on its own).
        let gang_incomplete = !session.plugins.job_ready(&session.state, job);
        if gang_incomplete && let Some(reason) = cannot_fit_anywhere(session, job, &tasks) {
            session.state.jobs[job].fit_errors.add_job_reason(reason);
            return false;
        }
        let single_key = single_placement_key(session, &tasks).filter(|_| gang_incomplete);
        let missing = missing_members(session, job);
        if let Some(key) = single_key
            && self
                .fits_at_most
                .get(&key)
                .is_some_and(|&most| missing > most)
        {
            let errors = self.picker.explain_no_fit(session, tasks[0]);
            let j = &mut session.state.jobs[job];
            j.fit_errors.by_reason = errors.by_reason;
            j.fit_errors.nodes_tried = errors.nodes_tried;
            return false;
        }

        let mut statement = Statement::new();
        let mut requeue = false;
        let mut ran_out_of_nodes = false;
        for (i, &task) in tasks.iter().enumerate() {
            if !session.plugins.allocatable(&session.state, queue, task) {
                let name = session.state.queues[queue].queue.name.clone();
                session.state.jobs[job].fit_errors.add_job_reason(format!(
                    "queue {name} would exceed its deserved share with {}",
                    session.state.tasks[task].pod.requests
                ));
                break;
            }
            let Some(node) = self.picker.pick(session, task) else {
                let errors = self.picker.explain_no_fit(session, task);
                let j = &mut session.state.jobs[job];
                j.fit_errors.by_reason = errors.by_reason;
                j.fit_errors.nodes_tried = errors.nodes_tried;
                ran_out_of_nodes = true;
                break;
            };
            statement.allocate(session, task, node);
            self.picker.node_changed(node);
            if session.plugins.job_ready(&session.state, job) && i + 1 < tasks.len() {
                requeue = true;
                break;
            }
        }
        if session.plugins.job_ready(&session.state, job) {
            statement.commit(session);
            return requeue;
        }
        if ran_out_of_nodes && let Some(key) = single_key {
            let placed = statement.len() as u32;
            let most = self.fits_at_most.entry(key).or_insert(placed);
            *most = (*most).min(placed);
        }
        let touched: Vec<_> = statement.nodes().collect();
        statement.discard(session);
        for node in touched {
            self.picker.node_changed(node);
        }
        false
    }
}

/// The placement key all `tasks` share, if they share one.
fn single_placement_key(session: &Session, tasks: &[TaskId]) -> Option<u64> {
    let key = session.state.tasks[tasks[0]].placement_key;
    tasks
        .iter()
        .all(|&t| session.state.tasks[t].placement_key == key)
        .then_some(key)
}

/// Members the gang still needs before it is ready.
fn missing_members(session: &Session, job: JobId) -> u32 {
    let j = &session.state.jobs[job];
    j.min_available()
        .saturating_sub(j.ready_count + j.pending_best_effort)
}

/// A quick refusal before any node is scored: the gang's missing members need more of some
/// resource than the whole cluster has free.
fn cannot_fit_anywhere(session: &Session, job: JobId, tasks: &[TaskId]) -> Option<String> {
    let state = &session.state;
    let missing = missing_members(session, job) as usize;
    if missing == 0 {
        return None;
    }
    let mut need = Resources::new();
    for &t in tasks.iter().take(missing) {
        need.add(state.tasks[t].resreq());
    }
    let free = state.total_allocatable.minus(&state.total_used);
    let (resource, want, have) = need.first_shortage(&free)?;
    Some(format!(
        "{missing} more pods needed to start, requesting {} {resource} in all; {} free in the cluster",
        crate::model::resources::format_amount(resource.as_str(), want),
        crate::model::resources::format_amount(resource.as_str(), have.max(0)),
    ))
}
