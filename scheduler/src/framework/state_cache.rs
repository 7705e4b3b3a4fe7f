//! The cluster's state kept from round to round, patched with what changed.
//!
//! Every round used to build its [`SessionState`] from the whole snapshot: 100,000 pods
//! sorted, looked up and counted again although a round changes a few thousand of them
//! (34 % of a sustained run's planning CPU at 5,000 nodes × 100,000 pods). [`StateCache`]
//! keeps the state it built last, with the snapshot objects it was built from, and brings
//! it up to date as an informer cache would: a snapshot shares every object that did not
//! change (`Arc`), so an unchanged pod costs one pointer comparison, and a changed one
//! has its old share taken away and its new one added.
//!
//! The patch covers what a running cluster does between rounds: pods bound, started,
//! finished or marked for deletion, PodGroup statuses written, new pods and PodGroups
//! created (after the ones already known), nodes' statuses updated. Anything else (a
//! queue or PriorityClass changed, an object deleted or a node added, a pod moved to
//! another gang, a new PodGroup that pods named before it existed, a pod or group that
//! would sort before known ones) builds the state again
//! from the snapshot, as before: the patch never has to be right about a rare case, only
//! about the common ones.
//!
//! A patched state must equal the state built from the same snapshot:
//! [`diff_states`] compares them field by field (invariant "state cache",
//! docs/invariants.md), and the simulator checks it every round in tests.

use std::sync::Arc;

use crate::cluster::ClusterSnapshot;
use crate::framework::session::{
    Account, BuiltState, JobId, JobIndex, JobInfo, JobOfPod, NodeInfo, QueueInfo, SessionState,
    TaskId, TaskInfo, TaskStatus, creation_order, creation_order_of_pods, is_task,
};
use crate::model::{Node, ObjectKey, Pod, PodGroup, PriorityClass, Queue};

/// How the states a cache handed out were made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Built from the whole snapshot (the first round, or a change the patch does not cover).
    pub builds: u64,
    /// Brought up to date from the previous round's state.
    pub patches: u64,
    /// Pods whose task a patch replaced, and pods it added.
    pub pods_changed: u64,
    pub pods_added: u64,
    /// Patched states that a periodic verification found different from a built one
    /// (a defect: the built state was used instead, and kept).
    pub mismatches: u64,
}

/// The last round's state and the snapshot objects it was built from.
pub struct StateCache {
    scheduler_name: String,
    base: Option<Base>,
    stats: CacheStats,
    /// Every this many patches, the state is also built whole and compared (0: never).
    verify_every: u64,
}

struct Base {
    scheduler_name: String,
    built: BuiltState,
    nodes: Vec<Arc<Node>>,
    pods: Vec<Arc<Pod>>,
    groups: Vec<Arc<PodGroup>>,
    queues: Vec<Queue>,
    priority_classes: Vec<PriorityClass>,
    /// A job was made for pods (a shadow or missing PodGroup): jobs are then no longer
    /// the PodGroups alone in creation order, and a new PodGroup builds again.
    made_jobs: bool,
    /// PodGroups that pods name but that do not exist (pods in no job): such a PodGroup
    /// created later takes those pods into its job, so it builds again.
    named_missing: crate::FastSet<ObjectKey>,
}

/// Why a patch gave up: the state is built again.
type Rebuild = &'static str;

impl std::fmt::Debug for StateCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateCache")
            .field("scheduler_name", &self.scheduler_name)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl StateCache {
    pub fn new(scheduler_name: &str) -> Self {
        Self {
            scheduler_name: scheduler_name.to_string(),
            base: None,
            stats: CacheStats::default(),
            verify_every: 0,
        }
    }

    /// Builds the state whole every `patches`-th patch as well and compares: a difference
    /// is logged as an error and counted (`mismatches`), and the built state is used and
    /// kept. What `serve` runs with, so that a defect in the patch costs one period's
    /// decisions at most, never the replica's.
    pub fn verify_every(mut self, patches: u64) -> Self {
        self.verify_every = patches;
        self
    }

    pub fn scheduler_name(&self) -> &str {
        &self.scheduler_name
    }

    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// The state of `snapshot`, as [`SessionState::build`] makes it, for this round to
    /// change as it likes. Also returns why it had to be built whole, if it was.
    pub fn state(&mut self, snapshot: &ClusterSnapshot) -> (SessionState, Option<Rebuild>) {
        let mut why = match self.base.as_mut().map(|b| b.patch(snapshot)) {
            Some(Ok((changed, added))) => {
                self.stats.patches += 1;
                self.stats.pods_changed += changed;
                self.stats.pods_added += added;
                None
            }
            Some(Err(why)) => Some(why),
            None => Some("first round"),
        };
        if why.is_none()
            && self.verify_every > 0
            && self.stats.patches.is_multiple_of(self.verify_every)
        {
            let differences = self.check(snapshot);
            if !differences.is_empty() {
                self.stats.mismatches += 1;
                tracing::error!(
                    differences = %differences.join("; "),
                    "the state kept from the last cycle differs from the one built from the \
                     snapshot; using the built one"
                );
                why = Some("verification found a difference");
            }
        }
        if why.is_some() {
            self.stats.builds += 1;
            self.base = Some(Base::build(snapshot, &self.scheduler_name));
        }
        let base = self.base.as_ref().expect("built or patched just above");
        (base.built.state.clone(), why)
    }

    /// The state kept for the snapshot last given to [`Self::state`], unchanged by what
    /// the round did with its copy; `None` before the first.
    pub fn kept(&self) -> Option<&SessionState> {
        self.base.as_ref().map(|b| &b.built.state)
    }

    /// The cache's state against one built from `snapshot` (which it must have just been
    /// brought up to date with): the differences, empty when they are equal.
    pub fn check(&self, snapshot: &ClusterSnapshot) -> Vec<String> {
        let Some(base) = &self.base else {
            return Vec::new();
        };
        let fresh = SessionState::build(snapshot, &self.scheduler_name);
        diff_states(&base.built.state, &fresh)
    }

    #[cfg(test)]
    pub(crate) fn state_mut(&mut self) -> Option<&mut SessionState> {
        self.base.as_mut().map(|b| &mut b.built.state)
    }
}

impl Base {
    fn build(snapshot: &ClusterSnapshot, scheduler_name: &str) -> Self {
        let built = SessionState::build_indexed(snapshot, scheduler_name);
        let made_jobs = built
            .state
            .jobs
            .iter()
            .any(|j| j.shadow || j.missing_group.is_some());
        let mut named_missing = crate::FastSet::default();
        for pod in &snapshot.pods {
            note_missing_group(&mut named_missing, &built.job_index, pod);
        }
        Self {
            named_missing,
            scheduler_name: scheduler_name.to_string(),
            built,
            nodes: snapshot.nodes.clone(),
            pods: snapshot.pods.clone(),
            groups: snapshot.pod_groups.clone(),
            queues: snapshot.queues.clone(),
            priority_classes: snapshot.priority_classes.clone(),
            made_jobs,
        }
    }

    /// Brings the state up to `snapshot`; returns the pods changed and added. An error
    /// leaves the state half patched: the caller builds it again.
    fn patch(&mut self, snapshot: &ClusterSnapshot) -> Result<(u64, u64), Rebuild> {
        self.patch_nodes(snapshot)?;
        if self.queues != snapshot.queues || self.priority_classes != snapshot.priority_classes {
            return Err("a queue or PriorityClass changed");
        }
        let groups = diff_by_key(&self.groups, &snapshot.pod_groups, |g| &g.key)
            .ok_or("a PodGroup was deleted")?;
        let pods =
            diff_by_key(&self.pods, &snapshot.pods, |p| &p.key).ok_or("a pod was deleted")?;
        self.patch_groups(snapshot, &groups)?;
        let counts = self.patch_pods(snapshot, &pods)?;
        let state = &mut self.built.state;
        state.now_ms = snapshot.now_ms;
        state.nodes.settle();
        state.count_over_committed();
        keep_objects(&mut self.pods, &snapshot.pods, &pods);
        keep_objects(&mut self.groups, &snapshot.pod_groups, &groups);
        Ok(counts)
    }

    /// Replaces the nodes that changed (a status update: its allocatable, labels or
    /// taints); the same names in the same order, or the state is built again.
    fn patch_nodes(&mut self, snapshot: &ClusterSnapshot) -> Result<(), Rebuild> {
        if self.nodes.len() != snapshot.nodes.len() {
            return Err("a node was added or deleted");
        }
        let state = &mut self.built.state;
        for (was, node) in self.nodes.iter_mut().zip(&snapshot.nodes) {
            if Arc::ptr_eq(was, node) {
                continue;
            }
            if was.name != node.name {
                return Err("a node was added or deleted");
            }
            let id = state.node_index[&node.name];
            let info = &mut state.nodes[id];
            info.idle.sub(&was.allocatable);
            info.idle.add(&node.allocatable);
            info.node = Arc::clone(node);
            state.total_allocatable.sub(&was.allocatable);
            state.total_allocatable.add(&node.allocatable);
            *was = Arc::clone(node);
        }
        Ok(())
    }

    fn patch_groups(&mut self, snapshot: &ClusterSnapshot, diff: &Diff) -> Result<(), Rebuild> {
        let new = &snapshot.pod_groups;
        let state = &mut self.built.state;
        let mut group_job = realign(std::mem::take(&mut self.built.group_job), diff);
        for &(old, now) in &diff.changed {
            let (was, group) = (&self.groups[old], &new[now]);
            if was.queue != group.queue
                || was.priority_class_name != group.priority_class_name
                || was.creation_index != group.creation_index
            {
                return Err("a PodGroup's queue, priority class or creation changed");
            }
            let job = group_job[now];
            state.jobs[job].pod_group = Arc::clone(group);
            state.jobs[job].phase = group.status.phase;
        }
        let mut added = diff.added.clone();
        added.sort_by(|&a, &b| creation_order(&new[a], &new[b]));
        if let Some(&first) = added.first() {
            let last = state.jobs.last().map(|j| &j.pod_group);
            if self.made_jobs || last.is_some_and(|l| creation_order(l, &new[first]).is_gt()) {
                return Err("a new PodGroup sorts before known jobs");
            }
        }
        if added
            .iter()
            .any(|&g| self.named_missing.contains(&new[g].key))
        {
            return Err("a new PodGroup is named by pods that had none");
        }
        for g in added {
            let job = state.add_job(Arc::clone(&new[g]), false);
            self.built.job_index.insert(new[g].key.clone(), job);
            group_job[g] = job;
        }
        self.built.group_job = group_job;
        Ok(())
    }

    fn patch_pods(
        &mut self,
        snapshot: &ClusterSnapshot,
        diff: &Diff,
    ) -> Result<(u64, u64), Rebuild> {
        let new = &snapshot.pods;
        let mut pod_task = realign(std::mem::take(&mut self.built.pod_task), diff);
        for &(old, now) in &diff.changed {
            let was = Arc::clone(&self.pods[old]);
            pod_task[now] = self.replace_pod(pod_task[now], &was, &new[now])?;
        }
        let mut added = diff.added.clone();
        added.sort_by(|&a, &b| creation_order_of_pods(&new[a], &new[b]));
        for &p in &added {
            pod_task[p] = self.append_pod(&new[p])?;
        }
        self.built.pod_task = pod_task;
        Ok((diff.changed.len() as u64, added.len() as u64))
    }

    /// Replaces task `task` (of pod `was`) with pod `pod`, the same pod changed.
    fn replace_pod(
        &mut self,
        task: Option<TaskId>,
        was: &Pod,
        pod: &Arc<Pod>,
    ) -> Result<Option<TaskId>, Rebuild> {
        if !is_task(pod) && !is_task(was) {
            return Ok(None);
        }
        let Some(task) = task.filter(|_| is_task(pod)) else {
            return Err("a pod became a task or stopped being one");
        };
        if pod.group.is_none() || pod.group != was.group || pod.creation_index != was.creation_index
        {
            return Err("a pod outside a PodGroup, or moved to another, or re-created, changed");
        }
        let managed = pod.scheduler_name == self.scheduler_name;
        let state = &mut self.built.state;
        let status = TaskStatus::of_pod(pod);
        let JobOfPod::Found(job) = state.find_job(pod, managed, status, &self.built.job_index)
        else {
            return Err("a changed pod needs a job made for it");
        };
        note_missing_group(&mut self.named_missing, &self.built.job_index, pod);
        state.account_task(task, Account::Remove);
        let info = state.task_info(pod, managed, status, job);
        let (before, after) = (state.tasks[task].job, info.job);
        state.tasks[task] = info;
        if before != after {
            if let Some(j) = before {
                state.jobs[j].tasks.retain(|&t| t != task);
            }
            if let Some(j) = after {
                let tasks = &mut state.jobs[j].tasks;
                let at = tasks.partition_point(|&t| t < task);
                tasks.insert(at, task);
            }
        }
        state.account_task(task, Account::Add);
        Ok(Some(task))
    }

    /// Adds a new pod as the last task: it must sort after every known one.
    fn append_pod(&mut self, pod: &Arc<Pod>) -> Result<Option<TaskId>, Rebuild> {
        if !is_task(pod) {
            return Ok(None);
        }
        let managed = pod.scheduler_name == self.scheduler_name;
        let state = &mut self.built.state;
        if state
            .tasks
            .last()
            .is_some_and(|t| creation_order_of_pods(&t.pod, pod).is_gt())
        {
            return Err("a new pod sorts before known tasks");
        }
        let status = TaskStatus::of_pod(pod);
        let JobOfPod::Found(job) = state.find_job(pod, managed, status, &self.built.job_index)
        else {
            return Err("a new pod needs a job made for it");
        };
        note_missing_group(&mut self.named_missing, &self.built.job_index, pod);
        let task = state.tasks.len();
        let info = state.task_info(pod, managed, status, job);
        state.tasks.push(info);
        if let Some(j) = state.tasks[task].job {
            state.jobs[j].tasks.push(task);
        }
        state.account_task(task, Account::Add);
        Ok(Some(task))
    }
}

/// Remembers the PodGroup `pod` names when it has no job (it does not exist).
fn note_missing_group(missing: &mut crate::FastSet<ObjectKey>, jobs: &JobIndex, pod: &Pod) {
    if let Some(group) = &pod.group
        && jobs.get(&pod.key.namespace, group).is_none()
    {
        missing.insert(ObjectKey::new(&pod.key.namespace, group));
    }
}

/// Makes `kept` the objects of `new`: in place when nothing was added (the positions are
/// the same), so a round clones and drops only the objects that changed, not 100,000
/// reference counts spread over the heap.
fn keep_objects<T>(kept: &mut Vec<Arc<T>>, new: &[Arc<T>], diff: &Diff) {
    if diff.added.is_empty() && kept.len() == new.len() {
        for &(_, now) in &diff.changed {
            kept[now] = Arc::clone(&new[now]);
        }
    } else {
        *kept = new.to_vec();
    }
}

/// Where the objects of two snapshots went, matched by key; both in key order. Every old
/// object is in the new snapshot, in the same order: unchanged (not listed), or changed.
#[derive(Debug, Default, PartialEq, Eq)]
struct Diff {
    /// (old index, new index) of objects with the same key but a new value.
    changed: Vec<(usize, usize)>,
    /// New indices of objects the old snapshot lacks, ascending.
    added: Vec<usize>,
    /// Objects in the new snapshot.
    new_len: usize,
}

/// Per-object values of the old snapshot moved to the new one's positions (an added
/// object gets the default until it is given its own). Without additions the positions
/// are the same and the vector is kept as it is.
fn realign<T: Copy + Default>(old: Vec<T>, diff: &Diff) -> Vec<T> {
    if diff.added.is_empty() {
        return old;
    }
    let mut added = diff.added.iter().peekable();
    let mut old = old.into_iter();
    (0..diff.new_len)
        .map(|j| {
            if added.next_if(|&&a| a == j).is_some() {
                T::default()
            } else {
                old.next().expect("every old object is in the new snapshot")
            }
        })
        .collect()
}

/// Matches `new` against `old`, both sorted by key (as a watch cache lists them). `None`
/// when an object of `old` is missing from `new` (deleted), or when the order is not the
/// same: the caller then builds everything again, so a misordered input costs time only.
fn diff_by_key<T>(old: &[Arc<T>], new: &[Arc<T>], key: impl Fn(&T) -> &ObjectKey) -> Option<Diff> {
    let mut diff = Diff {
        new_len: new.len(),
        ..Diff::default()
    };
    let mut i = 0;
    for (j, item) in new.iter().enumerate() {
        match old.get(i) {
            Some(was) if Arc::ptr_eq(was, item) => {}
            Some(was) if key(was) == key(item) => diff.changed.push((i, j)),
            Some(was) if key(was) < key(item) => return None,
            _ => {
                diff.added.push(j);
                continue;
            }
        }
        i += 1;
    }
    (i == old.len()).then_some(diff)
}

/// The differences between two states of the same snapshot (one patched, one built), in
/// everything a cycle reads: empty when they are equal. Fields are compared as values and
/// only a difference is written out (at most 20), so checking 100,000 equal tasks formats
/// and copies nothing.
pub fn diff_states(patched: &SessionState, built: &SessionState) -> Vec<String> {
    let mut out = Vec::new();
    compare!(out, "now", [&patched.now_ms], [&built.now_ms], |x: &u64| *x);
    compare!(out, "task", &patched.tasks, &built.tasks, task_fields);
    compare!(out, "job", &patched.jobs, &built.jobs, job_fields);
    compare!(out, "queue", &patched.queues, &built.queues, queue_fields);
    compare!(
        out,
        "node",
        patched.nodes.iter(),
        built.nodes.iter(),
        node_fields
    );
    compare!(
        out,
        "totals (allocatable, used, over-committed)",
        [patched],
        [built],
        totals
    );
    out
}

/// Compares two lists item by item through a function of each item's fields, and their
/// lengths; writes out the items that differ while fewer than 20 are listed. A macro, so
/// that the fields may borrow from the item.
macro_rules! compare {
    ($out:ident, $what:expr, $patched:expr, $built:expr, $fields:expr) => {{
        let fields = $fields;
        let (mut a, mut b) = ($patched.into_iter(), $built.into_iter());
        for i in 0.. {
            let (x, y) = match (a.next(), b.next()) {
                (None, None) => break,
                (x, y) => (x.map(|x| fields(x)), y.map(|y| fields(y))),
            };
            if x != y && $out.len() < 20 {
                $out.push(format!("{} {i}: patched {x:?}, built {y:?}", $what));
            }
        }
    }};
}
use compare;

type TaskFields<'a> = (
    &'a ObjectKey,
    Option<usize>,
    bool,
    TaskStatus,
    Option<usize>,
    i32,
    &'a str,
    u64,
    (bool, bool),
);

fn task_fields(x: &TaskInfo) -> TaskFields<'_> {
    (
        &x.pod.key,
        x.job,
        x.managed,
        x.status,
        x.node,
        x.priority,
        x.role(),
        x.placement_key,
        (x.preemptable, x.may_preempt),
    )
}

type JobFields<'a> = (
    &'a ObjectKey,
    bool,
    Option<usize>,
    i32,
    &'a [TaskId],
    crate::model::PodGroupPhase,
    &'a crate::model::Resources,
    (u32, u32, u32),
    &'a Option<String>,
    &'a crate::model::PodGroupStatus,
);

fn job_fields(x: &JobInfo) -> JobFields<'_> {
    (
        x.key(),
        x.shadow,
        x.queue,
        x.priority,
        &x.tasks,
        x.phase,
        &x.allocated,
        (x.ready_count, x.valid_count, x.pending_best_effort),
        &x.missing_group,
        &x.pod_group.status,
    )
}

fn queue_fields(x: &QueueInfo) -> (&str, &[JobId], &crate::model::Resources) {
    (&x.queue.name, &x.jobs, &x.allocated)
}

fn totals(s: &SessionState) -> [&crate::model::Resources; 3] {
    [&s.total_allocatable, &s.total_used, &s.over_committed]
}

type NodeFields<'a> = (
    &'a str,
    &'a crate::model::Resources,
    &'a crate::model::Resources,
    i64,
    (&'a crate::model::Resources, i64),
    (&'a crate::model::Resources, i64),
);

fn node_fields(x: &NodeInfo) -> NodeFields<'_> {
    (
        x.name(),
        &x.used,
        &x.idle,
        x.pod_count,
        (&x.releasing, x.releasing_pods),
        (&x.pipelined, x.pipelined_pods),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Cluster;
    use crate::cluster::sim::SimCluster;
    use crate::framework::{SchedulerConf, run_cycle_on_state};
    use crate::model::DEFAULT_SCHEDULER_NAME;
    use crate::simulate::synthetic::{SyntheticSpec, generate};

    fn workload(seed: u64, jobs: usize) -> crate::simulate::synthetic::SyntheticWorkload {
        let mut spec = SyntheticSpec::new(16, 8, jobs, seed);
        spec.duration_ms = Some((1_000, 3_000));
        spec.queues = vec![("qa".into(), 1), ("qb".into(), 2)];
        spec.max_gang_pods = 8;
        generate(&spec)
    }

    /// The same jobs under new names, created after every object of the first workload.
    fn late_jobs(seed: u64, jobs: usize, round: u64) -> (Vec<Pod>, Vec<PodGroup>) {
        let w = workload(seed, jobs);
        let rename =
            |k: &ObjectKey| ObjectKey::new(&k.namespace, format!("late{round}-{}", k.name));
        let after = 1_000_000 * (round + 1);
        let pods = w
            .pods
            .into_iter()
            .map(|mut p| {
                p.key = rename(&p.key);
                p.group = p.group.map(|g| format!("late{round}-{g}"));
                p.creation_index += after;
                p
            })
            .collect();
        let groups = w
            .pod_groups
            .into_iter()
            .map(|mut g| {
                g.key = rename(&g.key);
                g.creation_index += after;
                g
            })
            .collect();
        (pods, groups)
    }

    /// One cycle on the cache's state, its binds performed and a second of work done.
    fn round(sim: &mut SimCluster, cache: &mut StateCache) -> Vec<String> {
        let snapshot = sim.snapshot();
        let (state, _) = cache.state(&snapshot);
        let differences = cache.check(&snapshot);
        let (plan, _) = run_cycle_on_state(state, &SchedulerConf::volcano_default());
        for gang in &plan.gangs {
            for p in &gang.placements {
                sim.bind(&p.pod, &p.node)
                    .expect("the plan binds a pending pod");
            }
        }
        for (key, status) in &plan.status_updates {
            sim.update_pod_group_status(key, status)
                .expect("the group exists");
        }
        sim.settle();
        sim.advance_to(sim.now_ms() + 1_000);
        differences
    }

    #[test]
    fn a_state_patched_round_after_round_equals_the_one_built_from_the_snapshot() {
        let mut sim = workload(7, 150).into_sim();
        let mut cache = StateCache::new(DEFAULT_SCHEDULER_NAME);
        for r in 0..12 {
            if r % 4 == 3 {
                let (pods, groups) = late_jobs(100 + r, 20, r);
                sim.add(pods, groups);
            }
            let differences = round(&mut sim, &mut cache);
            assert!(differences.is_empty(), "round {r}: {differences:#?}");
        }
        let stats = cache.stats();
        assert_eq!(stats.builds, 1, "only the first round builds: {stats:?}");
        assert_eq!(stats.patches, 11);
        assert!(
            stats.pods_changed > 100 && stats.pods_added > 20,
            "{stats:?}"
        );
        assert!(
            sim.pods()
                .any(|p| p.phase == crate::model::PodPhase::Succeeded),
            "pods finished while the state was patched"
        );
    }

    #[test]
    fn what_the_patch_does_not_cover_builds_the_state_again_and_equal() {
        let mut sim = workload(8, 60).into_sim();
        let mut cache = StateCache::new(DEFAULT_SCHEDULER_NAME);
        assert!(round(&mut sim, &mut cache).is_empty());
        // A pod deleted (evicted, gone at once in the simulator).
        let running = sim
            .pods()
            .find(|p| p.node_name.is_some())
            .map(|p| p.key.clone())
            .expect("the first round placed pods");
        sim.evict(&running, "test").expect("a bound pod is evicted");
        let (_, why) = cache.state(&sim.snapshot());
        assert_eq!(why, Some("a pod was deleted"));
        assert!(cache.check(&sim.snapshot()).is_empty());
        // A pod without a PodGroup needs a job made for it.
        let mut lone = Pod::new(
            ObjectKey::new("default", "zz-lone"),
            crate::model::Resources::new(),
        );
        lone.creation_index = u64::MAX;
        sim.add(vec![lone], Vec::new());
        let (_, why) = cache.state(&sim.snapshot());
        assert_eq!(why, Some("a new pod needs a job made for it"));
        assert!(cache.check(&sim.snapshot()).is_empty());
        // Jobs made for pods: a new PodGroup is not appended to them.
        let (pods, groups) = late_jobs(9, 3, 1);
        sim.add(pods, groups);
        let (_, why) = cache.state(&sim.snapshot());
        assert_eq!(why, Some("a new PodGroup sorts before known jobs"));
        assert!(cache.check(&sim.snapshot()).is_empty());
        assert!(round(&mut sim, &mut cache).is_empty());
        assert_eq!(cache.stats().builds, 4);
    }

    /// A pod that names a PodGroup that does not exist yet (here one another scheduler
    /// bound) is in no job; once the PodGroup is created, the built state puts it in the
    /// new job, so the patch must not append the job without it.
    #[test]
    fn a_new_pod_group_that_pods_already_named_builds_the_state_again() {
        let mut sim = workload(12, 30).into_sim();
        let mut cache = StateCache::new(DEFAULT_SCHEDULER_NAME);
        assert!(round(&mut sim, &mut cache).is_empty());
        let node = sim.nodes().next().expect("nodes").name.clone();
        let mut early = Pod::new(
            ObjectKey::new("default", "zz-early-0"),
            crate::model::Resources::new(),
        );
        early.group = Some("zz-early".into());
        early.scheduler_name = "another-scheduler".into();
        early.node_name = Some(node);
        early.phase = crate::model::PodPhase::Running;
        early.creation_index = 5_000_000;
        sim.add(vec![early], Vec::new());
        let (_, why) = cache.state(&sim.snapshot());
        assert_eq!(why, None, "a pod in no job is appended");
        assert!(cache.check(&sim.snapshot()).is_empty());
        let mut group = PodGroup::new(ObjectKey::new("default", "zz-early"), 1);
        group.creation_index = 6_000_000;
        sim.add(Vec::new(), vec![group]);
        let (_, why) = cache.state(&sim.snapshot());
        assert_eq!(why, Some("a new PodGroup is named by pods that had none"));
        assert!(cache.check(&sim.snapshot()).is_empty());
    }

    #[test]
    fn a_node_whose_status_changed_is_patched_and_a_new_node_builds_again() {
        let mut sim = workload(10, 60).into_sim();
        let mut cache = StateCache::new(DEFAULT_SCHEDULER_NAME);
        assert!(round(&mut sim, &mut cache).is_empty());
        let mut snapshot = sim.snapshot();
        // GPUs turned unhealthy under running pods, and a label set: a status update.
        let busy = snapshot
            .nodes
            .iter()
            .position(|n| sim.pods().any(|p| p.node_name.as_deref() == Some(&n.name)))
            .expect("the first round placed pods");
        let mut node = (*snapshot.nodes[busy]).clone();
        node.allocatable = crate::model::Resources::from_pairs([(crate::model::resources::GPU, 1)]);
        node.labels
            .insert("phalanx.dev/test".into(), "changed".into());
        snapshot.nodes[busy] = Arc::new(node);
        let (state, why) = cache.state(&snapshot);
        assert_eq!(why, None);
        assert!(
            cache.check(&snapshot).is_empty(),
            "{:#?}",
            cache.check(&snapshot)
        );
        assert!(
            !state.over_committed.is_zero(),
            "the pods now hold more than it has"
        );
        let mut extra = (*snapshot.nodes[0]).clone();
        extra.name = "zz-new-node".into();
        snapshot.nodes.push(Arc::new(extra));
        let (_, why) = cache.state(&snapshot);
        assert_eq!(why, Some("a node was added or deleted"));
        assert!(cache.check(&snapshot).is_empty());
    }

    /// serve's safety net: a patched state that differs from the built one is replaced by
    /// it, and counted.
    #[test]
    fn a_verified_cache_replaces_a_wrong_patched_state_with_the_built_one() {
        let mut sim = workload(11, 40).into_sim();
        let mut cache = StateCache::new(DEFAULT_SCHEDULER_NAME).verify_every(1);
        assert!(round(&mut sim, &mut cache).is_empty());
        cache.state_mut().expect("kept").jobs[0].valid_count += 5;
        let snapshot = sim.snapshot();
        let (state, why) = cache.state(&snapshot);
        assert_eq!(why, Some("verification found a difference"));
        assert_eq!(cache.stats().mismatches, 1);
        let built = SessionState::build(&snapshot, DEFAULT_SCHEDULER_NAME);
        assert!(diff_states(&state, &built).is_empty());
        assert!(cache.check(&snapshot).is_empty());
    }

    #[test]
    fn the_state_cache_checker_catches_a_planted_difference() {
        let mut sim = workload(9, 40).into_sim();
        let mut cache = StateCache::new(DEFAULT_SCHEDULER_NAME);
        assert!(round(&mut sim, &mut cache).is_empty());
        let snapshot = sim.snapshot();
        cache.state(&snapshot);
        assert!(crate::invariants::check_state_cache(&cache, &snapshot).is_empty());
        let state = cache.state_mut().expect("kept");
        state.nodes[0].pod_count += 1;
        let found = crate::invariants::check_state_cache(&cache, &snapshot);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].invariant, "state cache");
        assert!(found[0].detail.contains("node 0"), "{}", found[0].detail);
        let state = cache.state_mut().expect("kept");
        state.nodes[0].pod_count -= 1;
        state.jobs[0].ready_count += 1;
        let found = crate::invariants::check_state_cache(&cache, &snapshot);
        assert!(found[0].detail.contains("job 0"), "{}", found[0].detail);
    }

    fn arcs(keys: &[&str]) -> Vec<Arc<ObjectKey>> {
        keys.iter()
            .map(|&k| Arc::new(ObjectKey::new("ns", k)))
            .collect()
    }

    #[test]
    fn objects_are_matched_by_key_in_order_and_a_deletion_or_reorder_is_refused() {
        let old = arcs(&["a", "c", "e"]);
        fn key(k: &ObjectKey) -> &ObjectKey {
            k
        }
        let mut new = vec![Arc::clone(&old[0]), Arc::new(ObjectKey::new("ns", "b"))];
        new.push(Arc::new(ObjectKey::new("ns", "c")));
        new.push(Arc::clone(&old[2]));
        new.push(Arc::new(ObjectKey::new("ns", "f")));
        let diff = diff_by_key(&old, &new, key).expect("nothing deleted");
        assert_eq!(realign(vec![10, 11, 12], &diff), [10, 0, 11, 12, 0]);
        assert_eq!(diff.changed, [(1, 2)]);
        assert_eq!(diff.added, [1, 4]);
        let deleted = vec![Arc::clone(&old[0]), Arc::clone(&old[2])];
        assert_eq!(diff_by_key(&old, &deleted, key), None);
        let reordered = vec![
            Arc::clone(&old[1]),
            Arc::clone(&old[0]),
            Arc::clone(&old[2]),
        ];
        assert_eq!(diff_by_key(&old, &reordered, key), None);
        assert_eq!(diff_by_key(&old, &old[..2], key), None);
    }
}
