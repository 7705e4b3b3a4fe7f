//! `allocate`: places admitted gangs, all or nothing.
//!
//! Queues take turns in queue order (proportion: the least-served first); from the chosen
//! queue the first job in job order (priority, then not-yet-ready gangs, then drf share) gets
//! its pending tasks placed one by one, in task order, each on the best node, inside one
//! [`Statement`]. As soon as the gang is ready (`minMember` placed) the statement is
//! committed and the job goes back in line for its remaining (elastic) tasks; if the gang
//! cannot become ready, everything it tentatively took is given back.

use crate::actions::job_block;
use std::collections::{BTreeSet, HashMap, HashSet};

use crate::actions::turns::QueueTurns;
use crate::framework::node_picker::NodePicker;
use crate::framework::{JobId, QueueId, Session, Statement, TaskId};
use crate::model::{PodGroupPhase, ResourceName, Resources};

pub fn run(session: &mut Session) {
    let enqueue_configured = session.conf.actions.iter().any(|a| a == "enqueue");
    let mut turns = QueueTurns::new(session);
    for job in 0..session.state.jobs.len() {
        if session.state.pending_tasks(job).next().is_none() || !session.in_scope(job) {
            continue;
        }
        if session.state.jobs[job].is_pending_phase() {
            if enqueue_configured {
                if session.state.jobs[job].blocked_reason.is_none() {
                    session.state.jobs[job].blocked_reason =
                        Some("waiting to be admitted (enqueue)".to_string());
                }
                continue;
            }
            // Without `enqueue`, allocate admits the job itself, as Volcano's does.
            session.state.jobs[job].phase = PodGroupPhase::Inqueue;
        }
        if let Some((code, reason)) = job_block(session, job) {
            session.state.jobs[job].block(code, reason);
            continue;
        }
        let queue = session.state.jobs[job]
            .queue
            .expect("job_blocker rejects jobs without a queue");
        turns.add(session, queue, job);
    }

    let mut placer = Placer::default();
    while let Some(queue) = turns.next_queue(session) {
        if session.plugins.overused(&session.state, queue) {
            for job in turns.drain(queue) {
                session.state.jobs[job].fit_errors.add_job_reason(format!(
                    "queue {} has used its deserved share",
                    session.state.queues[queue].queue.name
                ));
            }
            continue;
        }
        let Some(job) = turns.next_job(session, queue) else {
            continue;
        };
        let more_to_place = placer.allocate_job(session, queue, job);
        turns.end_turn(session, queue, more_to_place.then_some(job));
    }
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
        let tasks: Vec<TaskId> = session.pending_tasks_in_order(job);
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

        // With shards: the home pool first; a gang that does not fit there is planned over
        // the whole cluster (a cross-shard transaction).
        let pool_full = |placer: &Self, home: u32| {
            single_key.is_some_and(|key| {
                let key = crate::framework::node_picker::pool_key(key, Some(home));
                placer.fits_at_most.get(&key).is_some_and(|&m| missing > m)
            })
        };
        if let Some(home) = session
            .home_pool(job)
            .filter(|_| session.home_pool_strict())
            && !pool_full(self, home)
        {
            if let Some(requeue) = self.place(session, queue, job, &tasks, single_key, Some(home)) {
                return requeue;
            }
            session.state.jobs[job].fit_errors.clear();
        }
        self.place(session, queue, job, &tasks, single_key, None)
            .unwrap_or(false)
    }

    /// One attempt to make the gang ready on the nodes of `pool` (`None`: every node):
    /// `Some(requeue)` when it became ready (committed), `None` when everything it took
    /// was given back.
    fn place(
        &mut self,
        session: &mut Session,
        queue: QueueId,
        job: JobId,
        tasks: &[TaskId],
        single_key: Option<u64>,
        pool: Option<u32>,
    ) -> Option<bool> {
        let mut statement = Statement::new();
        let mut requeue = false;
        let mut ran_out_of_nodes = false;
        // Placement keys and roles of tasks that found no node: nodes only fill up during
        // the loop, so later tasks with a failed key would fail too and are skipped.
        let mut failed_keys: HashSet<u64> = HashSet::new();
        let mut failed_roles: BTreeSet<String> = BTreeSet::new();
        for (i, &task) in tasks.iter().enumerate() {
            if !session.plugins.allocatable(&session.state, queue, task) {
                let name = session.state.queues[queue].queue.name.clone();
                session.state.jobs[job].fit_errors.add_job_reason(format!(
                    "queue {name} would exceed its deserved share with {}",
                    session.state.tasks[task].pod.requests
                ));
                // As Volcano: skip the task; a smaller one may still fit the share.
                continue;
            }
            let key = session.state.tasks[task].placement_key;
            if failed_keys.contains(&key) {
                continue;
            }
            let picked = match pool {
                Some(_) => self.picker.pick_in(session, task, pool),
                None => self
                    .picker
                    .pick_preferring(session, task, session.home_pool(job)),
            };
            let Some(node) = picked else {
                if !ran_out_of_nodes && pool.is_none() {
                    let errors = self.picker.explain_no_fit(session, task);
                    let j = &mut session.state.jobs[job];
                    j.fit_errors.by_reason = errors.by_reason;
                    j.fit_errors.nodes_tried = errors.nodes_tried;
                }
                ran_out_of_nodes = true;
                failed_keys.insert(key);
                failed_roles.insert(session.state.tasks[task].role().to_string());
                if may_continue_after_no_fit(session, job, &failed_roles) {
                    continue;
                }
                break;
            };
            statement.allocate(session, task, node);
            self.picker.node_changed(node);
            if session.plugins.job_ready(&session.state, job) && i + 1 < tasks.len() {
                requeue = true;
                break;
            }
        }
        // The home-pool pass counts only if no task ran out of nodes there: a gang that is
        // ready already (elastic members) must not end its turn on a pool that is full.
        if session.plugins.job_ready(&session.state, job) && !(pool.is_some() && ran_out_of_nodes) {
            statement.commit(session);
            return Some(requeue);
        }
        if ran_out_of_nodes && let Some(key) = single_key {
            let placed = statement.len() as u32;
            let key = crate::framework::node_picker::pool_key(key, pool);
            let most = self.fits_at_most.entry(key).or_insert(placed);
            *most = (*most).min(placed);
        }
        let touched: Vec<_> = statement.nodes().collect();
        statement.discard(session);
        for node in touched {
            self.picker.node_changed(node);
        }
        None
    }
}

/// Volcano's `NeedContinueAllocating`: after a task found no node, may the job's other
/// tasks still be tried? Not when the gang needs every one of its tasks; when `minMember`
/// is below the roles' summed `minTaskMember`, only if the pending tasks of roles that have
/// not failed can still bring the job to `minMember`; otherwise unless a failed role still
/// lacks its own `minTaskMember`.
fn may_continue_after_no_fit(
    session: &Session,
    job: JobId,
    failed_roles: &BTreeSet<String>,
) -> bool {
    let state = &session.state;
    let j = &state.jobs[job];
    if j.min_available() as usize == j.tasks.len() {
        return false;
    }
    let min_by_role = &j.pod_group.min_task_member;
    if j.min_available() < min_by_role.values().sum::<u32>() {
        let left = state
            .pending_tasks(job)
            .filter(|&t| !failed_roles.contains(state.tasks[t].role()))
            .count() as u32;
        return j.ready_count + left >= j.min_available();
    }
    let ready = state.ready_by_role(job);
    failed_roles.iter().all(|role| {
        let min = min_by_role.get(role).copied().unwrap_or(0);
        ready.get(role.as_str()).copied().unwrap_or(0) >= min
    })
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
/// resource than the whole cluster has free. Any `missing` of the pending tasks may make
/// up the gang, so the need is, per resource, the sum of the `missing` smallest requests.
fn cannot_fit_anywhere(session: &Session, job: JobId, tasks: &[TaskId]) -> Option<String> {
    let state = &session.state;
    let missing = missing_members(session, job) as usize;
    if missing == 0 {
        return None;
    }
    let mut need = Resources::new();
    let names: BTreeSet<&ResourceName> = tasks
        .iter()
        .flat_map(|&t| state.tasks[t].resreq().names())
        .collect();
    for name in names {
        let mut amounts: Vec<i64> = tasks
            .iter()
            .map(|&t| state.tasks[t].resreq().get(name.as_str()))
            .collect();
        amounts.sort_unstable();
        let sum = amounts
            .iter()
            .take(missing)
            .fold(0i64, |acc, v| acc.saturating_add(*v));
        need.set(name, sum);
    }
    // Nodes holding more than their allocatable must not cancel out free room elsewhere.
    let free = state
        .total_allocatable
        .minus(&state.total_used)
        .plus(&state.over_committed);
    let (resource, want, have) = need.first_shortage(&free)?;
    Some(format!(
        "{missing} more pods needed to start, requesting {} {resource} in all; {} free in the cluster",
        crate::model::resources::format_amount(resource.as_str(), want),
        crate::model::resources::format_amount(resource.as_str(), have.max(0)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::SchedulerConf;
    use crate::framework::testing::Cluster;
    use crate::model::resources::{CPU, GPU};
    use crate::model::{ObjectKey, Pod, PodPhase};

    #[test]
    fn an_over_committed_node_does_not_hide_free_gpus_on_other_nodes() {
        // gpu-1's allocatable shrank to 2 GPUs under another scheduler's pod holding 4;
        // gpu-2 has 4 free, enough for the gang of 3.
        let mut foreign = Pod::new(
            ObjectKey::new("default", "old-training"),
            crate::framework::testing::res(&[(CPU, 4_000), (GPU, 4)]),
        );
        foreign.scheduler_name = "default-scheduler".into();
        foreign.node_name = Some("gpu-1".into());
        foreign.phase = PodPhase::Running;
        let mut cluster = Cluster::new()
            .node("gpu-1", &[(CPU, 32_000), (GPU, 2)])
            .node("gpu-2", &[(CPU, 32_000), (GPU, 4)])
            .pod_with(foreign)
            .inqueue_group("gang", "default", 3);
        for i in 0..3 {
            cluster = cluster.pod(
                &format!("gang-{i}"),
                Some("gang"),
                &[(CPU, 1_000), (GPU, 1)],
            );
        }
        let mut session = cluster.session(&SchedulerConf::volcano_default());
        assert_eq!(session.state.over_committed.get(GPU), 2);
        run(&mut session);
        assert_eq!(session.plan.gangs.len(), 1, "{:?}", session.state.jobs);
        let nodes: Vec<&str> = session.plan.gangs[0]
            .placements
            .iter()
            .map(|p| p.node.as_str())
            .collect();
        assert_eq!(nodes, vec!["gpu-2"; 3]);
    }

    /// One 16-CPU node; an admitted group `g` of `min_member` whose pods are, in order, a
    /// 32-CPU pod (fits nowhere), a 1-CPU pod pinned to a missing label, and 2-CPU pods.
    fn mixed(min_member: u32, small: usize) -> Session {
        let mut pinned = Pod::new(
            ObjectKey::new("default", "g-pinned"),
            crate::framework::testing::res(&[(CPU, 1_000)]),
        );
        pinned.group = Some("g".into());
        pinned
            .node_selector
            .insert("accelerator".into(), "tpu".into());
        let mut c = Cluster::new()
            .node("n1", &[(CPU, 16_000)])
            .inqueue_group("g", "default", min_member)
            .pod("g-huge", Some("g"), &[(CPU, 32_000)])
            .pod_with(pinned);
        for i in 0..small {
            c = c.pod(&format!("g-{i}"), Some("g"), &[(CPU, 2_000)]);
        }
        c.session(&SchedulerConf::volcano_default())
    }

    fn placed(session: &Session) -> Vec<String> {
        let mut out: Vec<String> = session
            .plan
            .gangs
            .iter()
            .flat_map(|g| g.placements.iter().map(|p| p.pod.name.clone()))
            .collect();
        out.sort();
        out
    }

    #[test]
    fn pods_that_fit_nowhere_do_not_stop_the_rest_of_an_elastic_gang() {
        let mut session = mixed(2, 3);
        run(&mut session);
        assert_eq!(placed(&session), vec!["g-0", "g-1", "g-2"]);
    }

    #[test]
    fn a_gang_that_needs_every_pod_places_nothing_when_one_fits_nowhere() {
        let mut session = mixed(5, 3);
        run(&mut session);
        assert!(placed(&session).is_empty());
        assert_eq!(session.state.jobs[0].ready_count, 0);
    }

    #[test]
    fn the_quick_refusal_counts_the_smallest_pods_a_gang_could_start_with() {
        let session = mixed(2, 1);
        let tasks: Vec<TaskId> = session.state.pending_tasks(0).collect();
        // The 32-CPU pod comes first in task order, but 1 + 2 CPUs can start the gang.
        assert_eq!(cannot_fit_anywhere(&session, 0, &tasks), None);
        let session = mixed(3, 1);
        let tasks: Vec<TaskId> = session.state.pending_tasks(0).collect();
        assert!(cannot_fit_anywhere(&session, 0, &tasks).is_some());
    }

    #[test]
    fn without_enqueue_allocate_admits_a_pending_gang_even_if_it_cannot_place_it() {
        let mut c = Cluster::new()
            .node("n1", &[(CPU, 8_000), (GPU, 2)])
            .group("big", "default", 3);
        for i in 0..3 {
            c = c.pod(&format!("big-{i}"), Some("big"), &[(CPU, 1_000), (GPU, 1)]);
        }
        let conf = SchedulerConf::from_names(&["allocate"], &[&["gang"], &["predicates"]]);
        let mut session = c.session(&conf);
        run(&mut session);
        assert!(session.plan.gangs.is_empty());
        assert_eq!(session.state.jobs[0].phase, PodGroupPhase::Inqueue);
    }
}
