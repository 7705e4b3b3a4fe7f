//! `backfill`: places pods that request nothing (best-effort) on any node that passes the
//! predicates, best-scored first. They count towards their gang's readiness from the start,
//! so they are committed with their gang's readiness rule like any other task.

use crate::actions::job_blocker;
use crate::framework::node_picker::NodePicker;
use crate::framework::{Session, Statement, TaskId};

pub fn run(session: &mut Session) {
    let enqueue_configured = session.conf.actions.iter().any(|a| a == "enqueue");
    let mut picker = NodePicker::new();
    for job in 0..session.state.jobs.len() {
        if session.state.jobs[job].pending_best_effort == 0 || !session.in_scope(job) {
            continue;
        }
        if enqueue_configured && session.state.jobs[job].is_pending_phase() {
            continue;
        }
        if job_blocker(session, job).is_some() {
            continue;
        }
        let tasks: Vec<TaskId> = session
            .state
            .pending_tasks(job)
            .filter(|&t| session.state.tasks[t].is_best_effort())
            .collect();
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
