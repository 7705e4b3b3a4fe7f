//! `priority`: higher-priority jobs and tasks go first. Job priority comes from the
//! PodGroup's `priorityClassName`, task priority from the pod (`spec.priority`, else its
//! class, else the global default class).

use std::cmp::Ordering;

use crate::framework::{JobId, Plugin, SessionState, TaskId};

#[derive(Debug)]
pub struct PriorityPlugin;

impl Plugin for PriorityPlugin {
    fn name(&self) -> &'static str {
        "priority"
    }

    fn job_order(&self, state: &SessionState, a: JobId, b: JobId) -> Ordering {
        state.jobs[b].priority.cmp(&state.jobs[a].priority)
    }

    /// Only jobs of strictly lower priority are preempted: two jobs of equal priority can
    /// never take turns evicting each other.
    fn preemptable(
        &self,
        state: &SessionState,
        preemptor: JobId,
        victims: &[TaskId],
    ) -> Option<bool> {
        let p = state.jobs[preemptor].priority;
        Some(victims.iter().all(|&v| {
            state.tasks[v]
                .job
                .is_some_and(|j| j != preemptor && state.jobs[j].priority < p)
        }))
    }

    /// As Volcano's: a job is starving while some of its pods are not placed. Without
    /// `gang` this is what lets `preempt` serve a job at all; with `gang` in the same tier
    /// both must agree, so gang's "below `minMember`" decides.
    fn job_starving(&self, state: &SessionState, job: JobId) -> Option<bool> {
        Some(state.pending_tasks(job).next().is_some())
    }

    fn task_order(&self, state: &SessionState, a: TaskId, b: TaskId) -> Ordering {
        state.tasks[b].priority.cmp(&state.tasks[a].priority)
    }
}
