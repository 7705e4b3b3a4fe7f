//! `drf` (dominant resource fairness): among jobs of a queue, the one with the smallest
//! dominant share (its largest fraction of any cluster resource) goes first.

use std::cmp::Ordering;

use crate::framework::{JobId, Plugin, SessionState, TaskId};

#[derive(Debug, Default)]
pub struct DrfPlugin {
    shares: Vec<f64>,
}

impl DrfPlugin {
    fn update(&mut self, state: &SessionState, job: JobId) {
        self.shares[job] = state.jobs[job].allocated.share_of(&state.total_allocatable);
    }
}

impl Plugin for DrfPlugin {
    fn name(&self) -> &'static str {
        "drf"
    }

    fn on_session_open(&mut self, state: &SessionState) {
        self.shares = state
            .jobs
            .iter()
            .map(|j| j.allocated.share_of(&state.total_allocatable))
            .collect();
    }

    fn on_jobs_added(&mut self, state: &SessionState) {
        for job in &state.jobs[self.shares.len()..] {
            self.shares
                .push(job.allocated.share_of(&state.total_allocatable));
        }
    }

    fn job_order(&self, _state: &SessionState, a: JobId, b: JobId) -> Ordering {
        self.shares[a].total_cmp(&self.shares[b])
    }

    fn on_allocate(&mut self, state: &SessionState, task: TaskId) {
        if let Some(job) = state.tasks[task].job {
            self.update(state, job);
        }
    }

    fn on_deallocate(&mut self, state: &SessionState, task: TaskId) {
        // Called before the session undoes the allocation: compute the share without it.
        if let Some(job) = state.tasks[task].job {
            let mut allocated = state.jobs[job].allocated.clone();
            allocated.sub(state.tasks[task].resreq());
            self.shares[job] = allocated.share_of(&state.total_allocatable);
        }
    }
}
