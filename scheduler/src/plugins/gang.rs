//! `gang`: a job runs only with at least `minMember` pods (and `minTaskMember` per role).
//! - valid: enough non-failed pods exist to ever reach `minMember`;
//! - ready: enough pods are placed (or running, or done) to start;
//! - order: jobs that are not ready yet go before ready ones, so a ready job does not take
//!   nodes that another gang needs to start;
//! - starving / pipelined: fewer than `minMember` placed.

use std::cmp::Ordering;

use crate::framework::{Invalid, JobId, Plugin, SessionState, TaskId, TaskStatus, Vote};

#[derive(Debug)]
pub struct GangPlugin;

/// Placed-or-better pods (plus pending best-effort ones) reach `minMember`, and every role
/// reaches its `minTaskMember`.
pub fn is_ready(state: &SessionState, job: JobId) -> bool {
    let j = &state.jobs[job];
    if j.ready_count + j.pending_best_effort < j.min_available() {
        return false;
    }
    if j.pod_group.min_task_member.is_empty() {
        return true;
    }
    let ready = state.ready_by_role(job);
    j.pod_group
        .min_task_member
        .iter()
        .all(|(role, min)| ready.get(role.as_str()).copied().unwrap_or(0) >= *min)
}

/// Victims (of one job) may go when the job keeps `minMember` (and every `minTaskMember`)
/// without them, or when they are the whole running gang: a gang is never left below its
/// minimum, it is evicted whole or not at all.
pub fn keeps_gangs_whole(state: &SessionState, victims: &[TaskId]) -> bool {
    let Some(job) = victims.first().and_then(|&v| state.tasks[v].job) else {
        return true;
    };
    let j = &state.jobs[job];
    let holding = j
        .tasks
        .iter()
        .filter(|&&t| {
            state.tasks[t].status.is_evictable() || state.tasks[t].status == TaskStatus::Allocated
        })
        .count();
    if victims.len() >= holding {
        return true;
    }
    if (j.ready_count as usize) < victims.len() + j.min_available() as usize {
        return false;
    }
    let ready = state.ready_by_role(job);
    j.pod_group.min_task_member.iter().all(|(role, min)| {
        let leaving = victims
            .iter()
            .filter(|&&v| state.tasks[v].role == *role)
            .count() as u32;
        ready.get(role.as_str()).copied().unwrap_or(0) >= min + leaving
    })
}

impl Plugin for GangPlugin {
    fn name(&self) -> &'static str {
        "gang"
    }

    fn job_valid(&self, state: &SessionState, job: JobId) -> Option<Invalid> {
        let j = &state.jobs[job];
        if j.valid_count < j.min_available() {
            return Some(Invalid {
                reason: "NotEnoughPods".into(),
                message: format!(
                    "not enough valid pods for gang scheduling: {} exist, minMember is {}",
                    j.valid_count,
                    j.min_available()
                ),
            });
        }
        if !j.pod_group.min_task_member.is_empty() {
            let valid = state.valid_by_role(job);
            for (role, min) in &j.pod_group.min_task_member {
                let have = valid.get(role.as_str()).copied().unwrap_or(0);
                if have < *min {
                    return Some(Invalid {
                        reason: "NotEnoughPods".into(),
                        message: format!(
                            "not enough valid pods of task {role:?}: {have} exist, minTaskMember is {min}"
                        ),
                    });
                }
            }
        }
        None
    }

    fn job_ready(&self, state: &SessionState, job: JobId) -> Option<bool> {
        Some(is_ready(state, job))
    }

    fn job_pipelined(&self, state: &SessionState, job: JobId) -> Vote {
        let j = &state.jobs[job];
        if is_ready(state, job)
            || j.ready_count + j.pipelined_count + j.pending_best_effort >= j.min_available()
        {
            Vote::Permit
        } else {
            Vote::Reject
        }
    }

    fn job_starving(&self, state: &SessionState, job: JobId) -> Option<bool> {
        Some(!is_ready(state, job))
    }

    fn preemptable(
        &self,
        state: &SessionState,
        _preemptor: JobId,
        victims: &[TaskId],
    ) -> Option<bool> {
        Some(keeps_gangs_whole(state, victims))
    }

    fn reclaimable(
        &self,
        state: &SessionState,
        _reclaimer: JobId,
        victims: &[TaskId],
    ) -> Option<bool> {
        Some(keeps_gangs_whole(state, victims))
    }

    fn job_order(&self, state: &SessionState, a: JobId, b: JobId) -> Ordering {
        // false < true: not-ready jobs first.
        is_ready(state, a).cmp(&is_ready(state, b))
    }
}
