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
/// reaches its `minTaskMember`, counting its pending best-effort pods too (a best-effort
/// master of a GPU gang is placed by `backfill` after `allocate` placed the workers). As in
/// Volcano, roles are not checked when `minMember` is below the roles' summed minimums: any
/// `minMember` pods may then start the job.
pub fn is_ready(state: &SessionState, job: JobId) -> bool {
    let j = &state.jobs[job];
    if j.ready_count + j.pending_best_effort < j.min_available() {
        return false;
    }
    if !roles_checked(state, job) {
        return true;
    }
    let ready = state.occupied_by_role(job);
    j.pod_group
        .min_task_member
        .iter()
        .all(|(role, min)| ready.get(role.as_str()).copied().unwrap_or(0) >= *min)
}

/// Whether `minTaskMember` binds the job: it has some, and `minMember` is not below their
/// sum (Volcano's `CheckTaskReady`; below it, any `minMember` pods may start the job, so
/// neither readiness nor eviction looks at roles).
fn roles_checked(state: &SessionState, job: JobId) -> bool {
    let j = &state.jobs[job];
    let min_by_role = &j.pod_group.min_task_member;
    let roles_sum: u64 = min_by_role.values().map(|&m| u64::from(m)).sum();
    !min_by_role.is_empty() && u64::from(j.min_available()) >= roles_sum
}

/// Victims (of one job) may go when the job keeps `minMember` (and every `minTaskMember`,
/// where roles bind it) without them, or when they are the whole running gang: a gang is never left below its
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
    if !roles_checked(state, job) {
        return true;
    }
    let ready = state.ready_by_role(job);
    j.pod_group.min_task_member.iter().all(|(role, min)| {
        let leaving = victims
            .iter()
            .filter(|&&v| state.tasks[v].role() == role)
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

    /// Not-ready jobs first (false < true); among them, a gang that already holds pods
    /// but is below its minimum first: it holds them for nothing until it is whole, and a
    /// fresh job ordered before it (drf puts the smallest share first) can take its room
    /// for good (volcano#5805).
    fn job_order(&self, state: &SessionState, a: JobId, b: JobId) -> Ordering {
        let stranded = |j: JobId| !is_ready(state, j) && state.jobs[j].ready_count > 0;
        is_ready(state, a)
            .cmp(&is_ready(state, b))
            .then_with(|| stranded(b).cmp(&stranded(a)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::SchedulerConf;
    use crate::framework::testing::{Cluster, res};
    use crate::model::resources::{CPU, GPU};
    use crate::model::{ObjectKey, Pod, PodGroup};

    fn role_pod(name: &str, role: &str, requests: &[(&str, i64)]) -> Pod {
        let mut pod = Pod::new(ObjectKey::new("default", name), res(requests));
        pod.group = Some("ms".into());
        pod.task_role = Some(role.into());
        pod
    }

    /// A best-effort master and two one-GPU workers, minMember 3, minTaskMember
    /// {master: 1, worker: 2} (the shape of Volcano's MindSpore GPU example).
    fn master_and_workers() -> crate::framework::Session {
        let mut group = PodGroup::new(ObjectKey::new("default", "ms"), 3);
        group.min_task_member.insert("master".into(), 1);
        group.min_task_member.insert("worker".into(), 2);
        Cluster::new()
            .node("gpu-1", &[(CPU, 16_000), (GPU, 2)])
            .group_with(group)
            .pod_with(role_pod("ms-master-0", "master", &[]))
            .pod_with(role_pod("ms-worker-0", "worker", &[(GPU, 1)]))
            .pod_with(role_pod("ms-worker-1", "worker", &[(GPU, 1)]))
            .session(&SchedulerConf::volcano_default())
    }

    #[test]
    fn a_pending_best_effort_pod_counts_towards_its_roles_min_task_member() {
        let mut session = master_and_workers();
        assert!(!is_ready(&session.state, 0), "no worker placed yet");
        let workers: Vec<TaskId> = session
            .state
            .pending_tasks(0)
            .filter(|&t| !session.state.tasks[t].is_best_effort())
            .collect();
        let mut statement = crate::framework::Statement::new();
        for task in workers {
            statement.allocate(&mut session, task, 0);
        }
        assert!(
            is_ready(&session.state, 0),
            "both workers placed and the master pending best-effort: the gang is ready"
        );
    }

    #[test]
    fn roles_are_not_checked_when_min_member_is_below_their_summed_minimums() {
        // Volcano's CheckTaskReady: minMember 1 < 1 + 2, so any one pod may start the job.
        let mut group = PodGroup::new(ObjectKey::new("default", "ms"), 1);
        group.min_task_member.insert("master".into(), 1);
        group.min_task_member.insert("worker".into(), 2);
        let mut session = Cluster::new()
            .node("gpu-1", &[(CPU, 16_000), (GPU, 2)])
            .group_with(group)
            .pod_with(role_pod("ms-worker-0", "worker", &[(GPU, 1)]))
            .session(&SchedulerConf::volcano_default());
        let mut statement = crate::framework::Statement::new();
        statement.allocate(&mut session, 0, 0);
        assert!(is_ready(&session.state, 0));
    }
}
