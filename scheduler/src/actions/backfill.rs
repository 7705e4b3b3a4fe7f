//! `backfill`: places pods that request nothing (best-effort) on any node that passes the
//! predicates, best-scored first. They count towards their gang's readiness from the start,
//! so they are committed with their gang's readiness rule like any other task.
//!
//! Order, as Volcano's backfill picks them: queues in queue order, each queue's jobs in job
//! order (priority first), each job's tasks in task order. With fewer pod slots than
//! best-effort pods, the higher-priority jobs get them.

use crate::actions::job_blocker;
use crate::framework::node_picker::NodePicker;
use crate::framework::{JobId, Session, Statement, TaskId};

pub fn run(session: &mut Session) {
    let enqueue_configured = session.conf.actions.iter().any(|a| a == "enqueue");
    let mut picker = NodePicker::new();
    let jobs: Vec<JobId> = (0..session.state.jobs.len())
        .filter(|&job| {
            let j = &session.state.jobs[job];
            j.pending_best_effort > 0
                && session.in_scope(job)
                && !(enqueue_configured && j.is_pending_phase())
                && job_blocker(session, job).is_none()
        })
        .collect();
    for job in in_volcano_order(session, jobs) {
        let mut tasks: Vec<TaskId> = session
            .state
            .pending_tasks(job)
            .filter(|&t| session.state.tasks[t].is_best_effort())
            .collect();
        tasks.sort_by(|&a, &b| session.plugins.task_order(&session.state, a, b));
        let mut statement = Statement::new();
        for task in tasks {
            let node = picker.pick_preferring(session, task, session.home_pool(job));
            if let Some(node) = node {
                statement.allocate(session, task, node);
                picker.node_changed(node);
            }
        }
        if session.plugins.job_ready(&session.state, job) {
            statement.commit(session);
        } else {
            let touched: Vec<_> = statement.nodes().collect();
            statement.discard(session);
            for node in touched {
                picker.node_changed(node);
            }
        }
    }
}

/// `jobs` grouped by queue, queues in queue order, each queue's jobs in job order. Jobs
/// without a queue were already refused by `job_blocker`.
fn in_volcano_order(session: &Session, mut jobs: Vec<JobId>) -> Vec<JobId> {
    let (state, plugins) = (&session.state, &session.plugins);
    let queue_of = |job: JobId| state.jobs[job].queue.unwrap_or(usize::MAX);
    jobs.sort_by(|&a, &b| {
        let (qa, qb) = (queue_of(a), queue_of(b));
        let by_queue = if qa == qb || qa == usize::MAX || qb == usize::MAX {
            qa.cmp(&qb)
        } else {
            plugins.queue_order(state, qa, qb)
        };
        by_queue.then_with(|| plugins.job_order(state, a, b))
    });
    jobs
}
