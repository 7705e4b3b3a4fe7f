//! One scheduling cycle's view of the cluster: nodes, jobs (gangs), tasks (pods) and queues,
//! indexed densely so that actions and plugins work on integers, not strings.
//!
//! A session is built from a [`ClusterSnapshot`], mutated only through
//! [`crate::framework::Statement`] (tentative allocations that are committed or discarded),
//! and closed into a [`CyclePlan`]: the binds to perform and the PodGroup statuses to write.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::FastMap;
use crate::cluster::ClusterSnapshot;
use crate::framework::conf::SchedulerConf;
use crate::framework::fit::FitErrors;
use crate::framework::plan::CyclePlan;
use crate::framework::plan::Event;
use crate::framework::plugin_set::PluginSet;
use crate::framework::timeout::{GangTimeout, TimeoutDefaults, format_duration};
use crate::model::{
    Node, ObjectKey, PREEMPTABLE_ANNOTATION, Pod, PodGroup, PodGroupPhase, PodPhase,
    PreemptionPolicy, Queue, QueueState, Resources, SpecFacts, TimeMs,
};

pub type NodeId = usize;
pub type TaskId = usize;
pub type JobId = usize;
pub type QueueId = usize;

/// Where a task (pod) stands in this cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskStatus {
    /// Waiting for a node.
    Pending,
    /// Given a node in this cycle; the bind has not happened yet.
    Allocated,
    /// Bound to a node (nodeName set), not running yet.
    Bound,
    Running,
    Succeeded,
    Failed,
    /// Chosen as a victim by preempt or reclaim in this cycle: still on its node until the
    /// eviction is performed, but no longer counted for its job or queue.
    Releasing,
    /// Given a node whose resources are still held by Releasing victims (Volcano's
    /// pipelined): not bound in this cycle; placed again in a later one, once they are gone.
    Pipelined,
}

impl TaskStatus {
    /// The status a snapshot's pod starts a cycle in.
    pub fn of_pod(pod: &Pod) -> Self {
        match (pod.phase, &pod.node_name) {
            (PodPhase::Succeeded, _) => Self::Succeeded,
            (PodPhase::Failed, _) => Self::Failed,
            // Going away (an earlier cycle's victim): holds its node until it is gone.
            (_, Some(_)) if pod.terminating => Self::Releasing,
            (PodPhase::Running, Some(_)) => Self::Running,
            (_, Some(_)) => Self::Bound,
            (_, None) => Self::Pending,
        }
    }

    /// Holds resources on its node.
    pub fn occupies_node(self) -> bool {
        matches!(
            self,
            Self::Allocated | Self::Bound | Self::Running | Self::Releasing
        )
    }

    /// May be chosen as a victim: bound or running before this cycle began.
    pub fn is_evictable(self) -> bool {
        matches!(self, Self::Bound | Self::Running)
    }

    /// Counts towards a gang's readiness (Volcano's "allocated" statuses plus Succeeded).
    pub fn is_ready(self) -> bool {
        matches!(
            self,
            Self::Allocated | Self::Bound | Self::Running | Self::Succeeded
        )
    }
}

#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub node: Arc<Node>,
    /// Sum of requests of every pod that occupies the node, whoever scheduled it.
    pub used: Resources,
    /// `allocatable - used`; negative entries mean the node is over-committed.
    pub idle: Resources,
    pub pod_count: i64,
    /// Requests of this cycle's victims on the node (they still hold them).
    pub releasing: Resources,
    pub releasing_pods: i64,
    /// Requests of tasks pipelined onto the node (waiting for the victims to go).
    pub pipelined: Resources,
    pub pipelined_pods: i64,
}

impl NodeInfo {
    fn new(node: Arc<Node>) -> Self {
        let idle = node.allocatable.clone();
        Self {
            node,
            used: Resources::new(),
            idle,
            pod_count: 0,
            releasing: Resources::new(),
            releasing_pods: 0,
            pipelined: Resources::new(),
            pipelined_pods: 0,
        }
    }

    /// What will be free once this cycle's victims are gone and pipelined tasks arrive:
    /// `idle + releasing - pipelined` (Volcano's FutureIdle).
    pub fn future_idle(&self) -> Resources {
        let mut out = self.idle.plus(&self.releasing);
        out.sub(&self.pipelined);
        out
    }

    /// Pods on the node once victims are gone and pipelined tasks arrive.
    pub fn future_pod_count(&self) -> i64 {
        self.pod_count - self.releasing_pods + self.pipelined_pods
    }

    pub fn name(&self) -> &str {
        &self.node.name
    }

    pub(crate) fn take(&mut self, req: &Resources) {
        self.used.add(req);
        self.idle.sub(req);
        self.pod_count += 1;
    }

    pub(crate) fn give_back(&mut self, req: &Resources) {
        self.used.sub(req);
        self.idle.add(req);
        self.pod_count -= 1;
    }
}

#[derive(Clone, Debug)]
pub struct TaskInfo {
    pub pod: Arc<Pod>,
    /// The job (gang) this task belongs to; `None` for pods phalanx does not place.
    pub job: Option<JobId>,
    /// True when this scheduler places the pod (its schedulerName is ours).
    pub managed: bool,
    pub status: TaskStatus,
    pub node: Option<NodeId>,
    /// Resolved priority (spec.priority, else its PriorityClass, else the global default).
    pub priority: i32,
    /// Tasks with equal keys get equal predicate results and node scores on equal nodes.
    pub placement_key: u64,
    /// False when the pod carries `volcano.sh/preemptable: "false"`: never a victim.
    pub preemptable: bool,
    /// False when its `preemptionPolicy` (the pod's, else its PriorityClass's) is `Never`.
    pub may_preempt: bool,
}

impl TaskInfo {
    /// The task role inside the job (`volcano.sh/task-spec`, else ""), read from the pod
    /// rather than copied: a kept state is cloned every round.
    pub fn role(&self) -> &str {
        self.pod.task_role.as_deref().unwrap_or_default()
    }

    pub fn resreq(&self) -> &Resources {
        &self.pod.requests
    }

    /// A pod that requests nothing: Volcano's BestEffort, placed by `backfill`.
    pub fn is_best_effort(&self) -> bool {
        self.pod.requests.is_zero()
    }
}

#[derive(Clone, Debug)]
pub struct JobInfo {
    /// Shared with the snapshot: opening a session copies no PodGroup.
    pub pod_group: Arc<PodGroup>,
    /// A job made up for a pod without a PodGroup (Volcano's "shadow" PodGroup); its status
    /// is never written anywhere.
    pub shadow: bool,
    pub queue: Option<QueueId>,
    pub priority: i32,
    pub tasks: Vec<TaskId>,
    /// Phase as this cycle sees it; `enqueue` moves Pending to Inqueue.
    pub phase: PodGroupPhase,
    /// Resources of tasks that occupy nodes or were allocated this cycle.
    pub allocated: Resources,
    /// Tasks in a ready status (see [`TaskStatus::is_ready`]).
    pub ready_count: u32,
    /// Tasks that are not Failed.
    pub valid_count: u32,
    /// Best-effort tasks still pending (they count towards readiness, as in Volcano).
    pub pending_best_effort: u32,
    /// Why tasks of this job found no node in this cycle.
    pub fit_errors: FitErrors,
    /// Why the job as a whole was not scheduled this cycle (invalid, not enqueued, ...).
    pub blocked_reason: Option<String>,
    /// The condition reason for `blocked_reason` (`QueueNotFound`, `QueueClosed`, ...).
    pub blocked_code: Option<&'static str>,
    /// Tasks pipelined this cycle (placed on resources that victims are releasing).
    pub pipelined_count: u32,
    /// Its schedule timeout (creation time, timeout, what to do then).
    pub timeout: GangTimeout,
    /// Sent back to Pending at the start of this cycle by the inqueue timeout; not admitted
    /// again in this cycle.
    pub admission_released: bool,
    /// For a pod whose `scheduling.k8s.io/group-name` names a PodGroup that does not exist:
    /// that name. Such a pod is never placed.
    pub missing_group: Option<String>,
}

impl JobInfo {
    pub fn key(&self) -> &ObjectKey {
        &self.pod_group.key
    }

    pub fn min_available(&self) -> u32 {
        self.pod_group.min_member
    }

    /// `minResources`, or the summed requests of the first `minMember` tasks when unset.
    pub fn min_resources(&self) -> Option<&Resources> {
        self.pod_group.min_resources.as_ref()
    }

    pub fn is_pending_phase(&self) -> bool {
        self.phase == PodGroupPhase::Pending
    }

    /// Records why the job is not scheduled, with the condition reason to show.
    pub fn block(&mut self, code: &'static str, message: String) {
        self.blocked_code = Some(code);
        self.blocked_reason = Some(message);
    }

    /// The schedule timeout has passed and the gang still has not started.
    pub fn timed_out(&self, now_ms: TimeMs) -> bool {
        self.timeout.expired(now_ms) && self.ready_count < self.min_available()
    }
}

#[derive(Clone, Debug)]
pub struct QueueInfo {
    pub queue: Queue,
    pub jobs: Vec<JobId>,
    /// Resources of this queue's tasks that occupy nodes (kept current by the session).
    pub allocated: Resources,
}

impl QueueInfo {
    pub fn is_open(&self) -> bool {
        self.queue.state == QueueState::Open
    }
}

/// The nodes of a session, indexed by [`NodeId`] (node names in order).
///
/// A replica's session shares the round's whole-cluster table read-only
/// ([`crate::framework::RoundView`]) and copies a node only when it changes it, so it reaches
/// every pool's nodes without building per-node structures for the whole cluster. A table
/// nobody else holds is changed in place (an unscoped session never copies).
#[derive(Clone)]
pub struct Nodes {
    shared: Arc<Vec<NodeInfo>>,
    /// Per node: 1 + its index in `copies` once this session changed it, else 0. Empty
    /// until the first copy.
    copy_slot: Vec<u32>,
    copies: Vec<NodeInfo>,
}

impl Nodes {
    pub fn new(nodes: Vec<NodeInfo>) -> Self {
        Self::from_shared(Arc::new(nodes))
    }

    pub fn from_shared(shared: Arc<Vec<NodeInfo>>) -> Self {
        Self {
            shared,
            copy_slot: Vec::new(),
            copies: Vec::new(),
        }
    }

    /// The table as it stands, to be shared read-only by other sessions.
    pub fn share(&self) -> Arc<Vec<NodeInfo>> {
        if self.copies.is_empty() {
            Arc::clone(&self.shared)
        } else {
            Arc::new(self.iter().cloned().collect())
        }
    }

    /// Folds the nodes this table copied back into a table of its own (a kept state
    /// patched while a round still shared its table).
    pub fn settle(&mut self) {
        if !self.copies.is_empty() {
            *self = Self::new(self.iter().cloned().collect());
        }
    }

    /// How many nodes this session copied out of a shared table (changed nodes).
    pub fn copied(&self) -> usize {
        self.copies.len()
    }

    pub fn len(&self) -> usize {
        self.shared.len()
    }

    pub fn is_empty(&self) -> bool {
        self.shared.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &NodeInfo> + '_ {
        (0..self.len()).map(move |n| &self[n])
    }
}

impl std::ops::Index<NodeId> for Nodes {
    type Output = NodeInfo;
    fn index(&self, node: NodeId) -> &NodeInfo {
        match self.copy_slot.get(node) {
            Some(&slot) if slot != 0 => &self.copies[slot as usize - 1],
            _ => &self.shared[node],
        }
    }
}

impl std::ops::IndexMut<NodeId> for Nodes {
    fn index_mut(&mut self, node: NodeId) -> &mut NodeInfo {
        // In place only while nothing was copied: once a copy exists, reads go to it even
        // if the table became this session's alone.
        if self.copy_slot.is_empty() && Arc::get_mut(&mut self.shared).is_some() {
            return &mut Arc::get_mut(&mut self.shared).expect("checked just above")[node];
        }
        if self.copy_slot.is_empty() {
            self.copy_slot = vec![0; self.shared.len()];
        }
        if self.copy_slot[node] == 0 {
            self.copies.push(self.shared[node].clone());
            self.copy_slot[node] = self.copies.len() as u32;
        }
        let slot = self.copy_slot[node] as usize - 1;
        &mut self.copies[slot]
    }
}

impl std::fmt::Debug for Nodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for &'a Nodes {
    type Item = &'a NodeInfo;
    type IntoIter = Box<dyn Iterator<Item = &'a NodeInfo> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

/// The data of one cycle. Plugins read it; only the session's own methods change it.
#[derive(Clone, Debug)]
pub struct SessionState {
    pub now_ms: TimeMs,
    pub nodes: Nodes,
    pub node_index: Arc<FastMap<String, NodeId>>,
    pub tasks: Vec<TaskInfo>,
    pub jobs: Vec<JobInfo>,
    pub queues: Vec<QueueInfo>,
    pub queue_index: HashMap<String, QueueId>,
    /// Sum of allocatable over schedulable nodes.
    pub total_allocatable: Resources,
    /// Sum of requests of every pod that occupies one of the snapshot's nodes.
    pub total_used: Resources,
    /// Per resource, what pods hold beyond their nodes' allocatable, summed over nodes (a
    /// node's allocatable can shrink under running pods, e.g. when GPUs turn unhealthy).
    /// Only the snapshot can bring this about, as no allocation goes beyond a node's idle
    /// amount, so it stays the same for the whole session. `total_allocatable - total_used
    /// + over_committed` is what is really free.
    pub over_committed: Resources,
    /// Priority of each PriorityClass by name, and the global default's value.
    pub priority_classes: HashMap<String, i32>,
    pub default_priority: i32,
    /// Classes whose `preemptionPolicy` is `Never`.
    pub never_preempt_classes: Vec<String>,
    /// Timeout defaults of the configuration.
    pub timeouts: TimeoutDefaults,
    /// For a replica's session, which holds only its own shards' jobs: the whole cluster's
    /// figures that shares are computed from (`None`: this state is the whole cluster).
    pub whole: Option<crate::framework::view::WholeCluster>,
}

/// A scheduling session: the state plus the plugins chosen by the configuration.
#[derive(Debug)]
pub struct Session {
    pub state: SessionState,
    pub plugins: PluginSet,
    pub conf: SchedulerConf,
    pub plan: CyclePlan,
    /// What is free in the cluster, computed once when a message first needs it after the
    /// actions ran (the state no longer changes then).
    pub(crate) free_summary: std::cell::OnceCell<crate::framework::explain::FreeSummary>,
    /// Per-shard planning: which jobs this replica acts for, and the pools (`None`: the
    /// whole cluster, every job).
    pub scope: Option<crate::framework::scope::ResolvedScope>,
    /// The round's shared view this session was projected from (a replica's session): it
    /// lends other shards' running gangs when `reclaim` needs victims.
    pub(crate) view: Option<Arc<crate::framework::view::RoundView>>,
    /// Admission (`enqueue`) was decided once for the whole cluster, in the round's view.
    pub admission_decided: bool,
    /// Other shards' running gangs were lent for `reclaim` ([`Self::lend_other_shards_holders`]).
    pub(crate) lent_holders: bool,
    /// Per job, the pending reason `close` wrote into its status (`Some(None)`: none);
    /// `None` for a job `close` did not judge (a shadow job, another shard's), and empty
    /// before it ran. Taken by [`crate::framework::cycle::take_pending_reason`]
    /// instead of being worked out twice.
    pub(crate) closed_reasons: Vec<Option<Option<String>>>,
    /// How long the cycle's actions and plugins took (for the metrics).
    pub timings: crate::observe::CycleTimings,
}

impl Session {
    /// The job's pending pods that request something (best-effort pods are `backfill`'s), in
    /// task order: the order in which a gang's pods are placed.
    pub fn pending_tasks_in_order(&self, job: JobId) -> Vec<TaskId> {
        let mut tasks: Vec<TaskId> = self
            .state
            .pending_tasks(job)
            .filter(|&t| !self.state.tasks[t].is_best_effort())
            .collect();
        tasks.sort_by(|&a, &b| self.plugins.task_order(&self.state, a, b));
        tasks
    }

    /// What is free per resource and on how many nodes; for messages after the actions ran.
    pub fn free_summary(&self) -> &crate::framework::explain::FreeSummary {
        self.free_summary
            .get_or_init(|| crate::framework::explain::FreeSummary::of(&self.state))
    }

    /// Builds the session for one cycle. `scheduler_name` selects the pods this scheduler
    /// places; every other pod is accounted on its node but never moved.
    pub fn open(snapshot: &ClusterSnapshot, conf: &SchedulerConf, scheduler_name: &str) -> Self {
        Self::open_state(SessionState::build(snapshot, scheduler_name), conf)
    }

    /// [`Self::open`] on a state already built from the snapshot (as
    /// [`crate::framework::StateCache`] keeps it).
    pub fn open_state(mut state: SessionState, conf: &SchedulerConf) -> Self {
        state.timeouts = TimeoutDefaults::from_conf(conf);
        for job in &mut state.jobs {
            job.timeout = GangTimeout::resolve(&job.pod_group, &state.timeouts);
        }
        let mut events = Vec::new();
        if conf.actions.iter().any(|a| a == "enqueue") {
            events = state.release_expired_admissions();
        }
        let plugins = PluginSet::from_conf(conf);
        let mut session = Session {
            state,
            plugins,
            conf: conf.clone(),
            plan: CyclePlan::default(),
            free_summary: std::cell::OnceCell::new(),
            scope: None,
            view: None,
            admission_decided: false,
            lent_holders: false,
            closed_reasons: Vec::new(),
            timings: Default::default(),
        };
        session.plan.events = events;
        session.plugins.on_session_open(&session.state);
        session
    }

    /// Whether this session acts for `job` (always, without a scope).
    pub fn in_scope(&self, job: JobId) -> bool {
        self.scope.as_ref().is_none_or(|s| s.job_owned[job])
    }

    /// The job's home shard when its home pool is a strict part of the cluster.
    pub fn home_pool(&self, job: JobId) -> Option<u32> {
        self.scope
            .as_ref()
            .filter(|s| s.split)
            .map(|s| s.job_home[job])
    }

    /// Whether the home pool is tried alone first ([`crate::framework::scope::HomePool::Strict`]).
    pub fn home_pool_strict(&self) -> bool {
        self.scope
            .as_ref()
            .is_some_and(|s| s.home_pool == crate::framework::scope::HomePool::Strict)
    }

    /// Whether `node` lies in `pool` (`None`: the whole cluster).
    pub fn node_in_pool(&self, node: NodeId, pool: Option<u32>) -> bool {
        match (pool, &self.scope) {
            (Some(p), Some(s)) => s.node_shard[node] == p,
            _ => true,
        }
    }

    /// The nodes of shard `pool`'s pool in id order, when the session is split into pools.
    pub fn pool_nodes(&self, pool: u32) -> Option<&[NodeId]> {
        self.scope
            .as_ref()
            .and_then(|s| s.pools.get(pool as usize))
            .map(Vec::as_slice)
    }

    /// Records a tentative allocation in the state and tells the plugins. Called by
    /// `Statement` only, which can undo it.
    pub(crate) fn allocate_task(&mut self, task: TaskId, node: NodeId) {
        self.state.allocate(task, node);
        self.plugins.on_allocate(&self.state, task);
    }

    pub(crate) fn deallocate_task(&mut self, task: TaskId) {
        self.plugins.on_deallocate(&self.state, task);
        self.state.deallocate(task);
    }

    /// Marks a running task as a victim; its job and queue stop counting it (plugins see it
    /// as a deallocation). Called by `Statement` only.
    pub(crate) fn evict_task(&mut self, task: TaskId) {
        self.plugins.on_deallocate(&self.state, task);
        self.state.evict(task);
    }

    pub(crate) fn unevict_task(&mut self, task: TaskId) {
        self.state.unevict(task);
        self.plugins.on_allocate(&self.state, task);
    }

    /// Places a task on resources victims are releasing. Called by `Statement` only.
    pub(crate) fn pipeline_task(&mut self, task: TaskId, node: NodeId) {
        self.state.pipeline(task, node);
        self.plugins.on_allocate(&self.state, task);
    }

    pub(crate) fn unpipeline_task(&mut self, task: TaskId) {
        self.plugins.on_deallocate(&self.state, task);
        self.state.unpipeline(task);
    }
}

/// A state built from a snapshot, with what [`crate::framework::StateCache`] needs to
/// patch it later instead of building it again.
pub(crate) struct BuiltState {
    pub state: SessionState,
    pub job_index: JobIndex,
    /// Per snapshot pod (in the snapshot's order): its task, `None` for a pod left out.
    pub pod_task: Vec<Option<TaskId>>,
    /// Per snapshot PodGroup (in the snapshot's order): its job.
    pub group_job: Vec<JobId>,
}

impl SessionState {
    pub(crate) fn build(snapshot: &ClusterSnapshot, scheduler_name: &str) -> Self {
        Self::build_indexed(snapshot, scheduler_name).state
    }

    pub(crate) fn build_indexed(snapshot: &ClusterSnapshot, scheduler_name: &str) -> BuiltState {
        let mut nodes: Vec<NodeInfo> = snapshot.nodes.iter().cloned().map(NodeInfo::new).collect();
        // Node ids follow node names so that ties broken by id are broken by name.
        nodes.sort_by(|a, b| a.node.name.cmp(&b.node.name));
        let node_index: FastMap<String, NodeId> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.node.name.clone(), i))
            .collect();
        let mut total_allocatable = Resources::new();
        for n in &nodes {
            total_allocatable.add(&n.node.allocatable);
        }

        let mut priority_classes = HashMap::new();
        let mut default_priority = 0;
        let mut never_preempt_classes = Vec::new();
        for pc in &snapshot.priority_classes {
            priority_classes.insert(pc.name.clone(), pc.value);
            if pc.global_default {
                default_priority = pc.value;
            }
            if pc.preemption_policy == PreemptionPolicy::Never {
                never_preempt_classes.push(pc.name.clone());
            }
        }

        let mut queues: Vec<QueueInfo> = snapshot
            .queues
            .iter()
            .map(|q| QueueInfo {
                queue: q.clone(),
                jobs: Vec::new(),
                allocated: Resources::new(),
            })
            .collect();
        queues.sort_by(|a, b| a.queue.name.cmp(&b.queue.name));
        let queue_index: HashMap<String, QueueId> = queues
            .iter()
            .enumerate()
            .map(|(i, q)| (q.queue.name.clone(), i))
            .collect();

        let mut state = SessionState {
            now_ms: snapshot.now_ms,
            nodes: Nodes::new(nodes),
            node_index: Arc::new(node_index),
            tasks: Vec::with_capacity(snapshot.pods.len()),
            jobs: Vec::new(),
            queues,
            queue_index,
            total_allocatable,
            total_used: Resources::new(),
            over_committed: Resources::new(),
            priority_classes,
            default_priority,
            never_preempt_classes,
            timeouts: TimeoutDefaults::default(),
            whole: None,
        };

        let mut job_index = JobIndex::default();
        let groups = &snapshot.pod_groups;
        let mut group_order: Vec<usize> = (0..groups.len()).collect();
        group_order.sort_by(|&a, &b| creation_order(&groups[a], &groups[b]));
        let mut group_job = vec![0; groups.len()];
        for g in group_order {
            let id = state.add_job(groups[g].clone(), false);
            job_index.insert(groups[g].key.clone(), id);
            group_job[g] = id;
        }

        let pods = &snapshot.pods;
        let mut pod_order: Vec<usize> = (0..pods.len()).collect();
        pod_order.sort_by(|&a, &b| creation_order_of_pods(&pods[a], &pods[b]));
        let mut pod_task = vec![None; pods.len()];
        for p in pod_order {
            pod_task[p] = state.add_task(&pods[p], scheduler_name, &mut job_index);
        }
        state.count_over_committed();
        BuiltState {
            state,
            job_index,
            pod_task,
            group_job,
        }
    }

    /// `over_committed` from the nodes' idle amounts.
    pub(crate) fn count_over_committed(&mut self) {
        let mut total = Resources::new();
        for n in &self.nodes {
            let mut beyond = Resources::new();
            beyond.sub_clamped(&n.idle);
            total.add(&beyond);
        }
        self.over_committed = total;
    }

    pub(crate) fn add_job(&mut self, pod_group: Arc<PodGroup>, shadow: bool) -> JobId {
        let id = self.jobs.len();
        let queue = self.queue_index.get(&pod_group.queue).copied();
        if let Some(q) = queue {
            self.queues[q].jobs.push(id);
        }
        let priority = self.resolve_priority(None, pod_group.priority_class_name.as_deref());
        let phase = pod_group.status.phase;
        self.jobs.push(JobInfo {
            pod_group,
            shadow,
            queue,
            priority,
            tasks: Vec::new(),
            phase,
            allocated: Resources::new(),
            ready_count: 0,
            valid_count: 0,
            pending_best_effort: 0,
            fit_errors: FitErrors::default(),
            blocked_reason: None,
            blocked_code: None,
            pipelined_count: 0,
            timeout: GangTimeout::default(),
            admission_released: false,
            missing_group: None,
        });
        id
    }

    /// The job of the pending pods that name PodGroup `group`, which does not exist: one
    /// per missing group, keyed by it, made with its first pod. Volcano never places such
    /// pods; they stay visible with the reason. One job rather than one per pod, since a
    /// hostile or broken 10,000-pod gang must not be 10,000 jobs to order every cycle
    /// (bench: `phalanx-bench cycle --skipped-pods 10000`).
    fn add_orphan_job(&mut self, pod: &Pod, group: &str, job_index: &mut JobIndex) -> JobId {
        let key = ObjectKey::new(&pod.key.namespace, group);
        let mut orphan = PodGroup::new(key.clone(), 1);
        orphan.creation_index = pod.creation_index;
        orphan.status.phase = PodGroupPhase::Inqueue;
        let id = self.add_job(Arc::new(orphan), true);
        // In no queue: the missing PodGroup names the queue, and its pods must not add to
        // the default queue's request (the proportion plugin's deserved share), nor be
        // ordered with its jobs. Volcano leaves such pods out of its snapshot.
        if let Some(q) = self.jobs[id].queue.take() {
            self.queues[q].jobs.retain(|&j| j != id);
        }
        self.jobs[id].missing_group = Some(group.to_string());
        job_index.insert(key, id);
        id
    }

    /// Adds the pod as the next task (pods are added in creation order), making the job it
    /// needs when it has none yet. Returns its task, `None` for a pod left out.
    fn add_task(
        &mut self,
        pod: &Arc<Pod>,
        scheduler_name: &str,
        job_index: &mut JobIndex,
    ) -> Option<TaskId> {
        if !is_task(pod) {
            return None;
        }
        let managed = pod.scheduler_name == scheduler_name;
        let status = TaskStatus::of_pod(pod);
        let job = match self.find_job(pod, managed, status, job_index) {
            JobOfPod::Found(job) => job,
            JobOfPod::MissingGroup(group) => Some(self.add_orphan_job(pod, group, job_index)),
            JobOfPod::Shadow => {
                // A managed pod without a PodGroup is a gang of one (Volcano's shadow
                // PodGroup), running or not: it counts in its queue and may be a victim.
                let mut shadow = PodGroup::new(pod.key.clone(), 1);
                shadow.priority_class_name = pod.priority_class_name.clone();
                shadow.creation_index = pod.creation_index;
                shadow.status.phase = PodGroupPhase::Inqueue;
                let id = self.add_job(Arc::new(shadow), true);
                job_index.insert(pod.key.clone(), id);
                Some(id)
            }
        };
        let id = self.tasks.len();
        self.tasks.push(self.task_info(pod, managed, status, job));
        if let Some(j) = self.tasks[id].job {
            self.jobs[j].tasks.push(id);
        }
        self.account_task(id, Account::Add);
        Some(id)
    }

    /// The job of a pod, as [`Self::add_task`] finds it; `MissingGroup` and `Shadow` say
    /// which job would have to be made for it.
    pub(crate) fn find_job<'p>(
        &self,
        pod: &'p Pod,
        managed: bool,
        status: TaskStatus,
        job_index: &JobIndex,
    ) -> JobOfPod<'p> {
        match &pod.group {
            Some(group) => match job_index.get(&pod.key.namespace, group) {
                // The orphans' job holds their pending pods only, as each was before.
                Some(id) if self.jobs[id].missing_group.is_some() => {
                    JobOfPod::Found((managed && status == TaskStatus::Pending).then_some(id))
                }
                Some(id) => JobOfPod::Found(Some(id)),
                None if managed && status == TaskStatus::Pending => JobOfPod::MissingGroup(group),
                None => JobOfPod::Found(None),
            },
            None if managed
                && matches!(
                    status,
                    TaskStatus::Pending
                        | TaskStatus::Bound
                        | TaskStatus::Running
                        | TaskStatus::Releasing
                ) =>
            {
                JobOfPod::Shadow
            }
            None => JobOfPod::Found(None),
        }
    }

    /// The task of `pod` in `job` (its job as found by [`Self::find_job`]), counted nowhere.
    pub(crate) fn task_info(
        &self,
        pod: &Arc<Pod>,
        managed: bool,
        status: TaskStatus,
        job: Option<JobId>,
    ) -> TaskInfo {
        let node = pod
            .node_name
            .as_ref()
            .and_then(|n| self.node_index.get(n).copied());
        let priority = self.resolve_priority(pod.priority, pod.priority_class_name.as_deref());
        let facts = pod.spec_memo.get_or_init(|| SpecFacts {
            placement_key: placement_key(pod),
            preemptable: pod_preemptable(pod),
        });
        let may_preempt = match pod.preemption_policy {
            Some(policy) => policy != PreemptionPolicy::Never,
            None => !pod
                .priority_class_name
                .as_ref()
                .is_some_and(|c| self.never_preempt_classes.contains(c)),
        };
        TaskInfo {
            pod: Arc::clone(pod),
            job: if managed || status != TaskStatus::Pending {
                job
            } else {
                None
            },
            managed,
            status,
            node,
            priority,
            placement_key: facts.placement_key,
            preemptable: facts.preemptable,
            may_preempt,
        }
    }

    /// Adds what task `id` counts for (in its job, on its node, in its queue and the
    /// totals) as the snapshot has it, or takes it away again.
    pub(crate) fn account_task(&mut self, id: TaskId, account: Account) {
        let add = account == Account::Add;
        let step = |count: &mut u32| {
            if add { *count += 1 } else { *count -= 1 }
        };
        let task = &self.tasks[id];
        let (status, node, job) = (task.status, task.node, task.job);
        let best_effort = task.is_best_effort();
        let pod = Arc::clone(&task.pod);
        let req = &pod.requests;
        if let Some(j) = job {
            let job = &mut self.jobs[j];
            if status != TaskStatus::Failed && status != TaskStatus::Releasing {
                step(&mut job.valid_count);
            }
            if status.is_ready() {
                step(&mut job.ready_count);
            }
            if status == TaskStatus::Pending && best_effort {
                step(&mut job.pending_best_effort);
            }
        }
        self.hold_on_node(node, status, req, account);
        // A releasing pod is held on its node, released in the future; not its job's or
        // queue's any more.
        if status != TaskStatus::Releasing && status.occupies_node() {
            let amount = |r: &mut Resources| if add { r.add(req) } else { r.sub(req) };
            if let Some(j) = job {
                amount(&mut self.jobs[j].allocated);
                if let Some(q) = self.jobs[j].queue {
                    amount(&mut self.queues[q].allocated);
                }
            }
        }
    }

    /// The node side of [`Self::account_task`]: what a pod of `status` holds on `node` and
    /// in the cluster's total. A pod on a node the snapshot lacks (deleted, pod not yet
    /// collected) holds nothing that this cycle could place on.
    fn hold_on_node(
        &mut self,
        node: Option<NodeId>,
        status: TaskStatus,
        req: &Resources,
        account: Account,
    ) {
        let add = account == Account::Add;
        let held = status == TaskStatus::Releasing || status.occupies_node();
        let Some(n) = node.filter(|_| held) else {
            return;
        };
        let amount = |r: &mut Resources| if add { r.add(req) } else { r.sub(req) };
        let info = &mut self.nodes[n];
        if add {
            info.take(req);
        } else {
            info.give_back(req);
        }
        if status == TaskStatus::Releasing {
            amount(&mut info.releasing);
            info.releasing_pods += if add { 1 } else { -1 };
        }
        amount(&mut self.total_used);
    }

    /// Counts `pod`, which holds a node, on that node and in the total only, as it would
    /// count as a task: for a view that picks nodes and has no use for its task or job.
    /// Call [`Self::count_over_committed`] once every such pod is counted.
    pub(crate) fn occupy_node(&mut self, pod: &Pod) {
        let node = (pod.node_name.as_ref()).and_then(|n| self.node_index.get(n).copied());
        self.hold_on_node(node, TaskStatus::of_pod(pod), &pod.requests, Account::Add);
    }

    /// Kubernetes' rule: an explicit `spec.priority`, else the class's value, else the
    /// global default class's value, else 0.
    pub fn resolve_priority(&self, explicit: Option<i32>, class: Option<&str>) -> i32 {
        explicit
            .or_else(|| class.and_then(|c| self.priority_classes.get(c).copied()))
            .unwrap_or(self.default_priority)
    }

    fn allocate(&mut self, task: TaskId, node: NodeId) {
        let t = &mut self.tasks[task];
        debug_assert_eq!(
            t.status,
            TaskStatus::Pending,
            "only pending tasks are allocated"
        );
        let best_effort = t.is_best_effort();
        t.status = TaskStatus::Allocated;
        t.node = Some(node);
        let pod = Arc::clone(&t.pod);
        let req = &pod.requests;
        let job = t.job;
        self.nodes[node].take(req);
        self.total_used.add(req);
        if let Some(j) = job {
            let job = &mut self.jobs[j];
            job.ready_count += 1;
            if best_effort {
                job.pending_best_effort -= 1;
            }
            job.allocated.add(req);
            if let Some(q) = job.queue {
                self.queues[q].allocated.add(req);
            }
        }
    }

    fn deallocate(&mut self, task: TaskId) {
        let t = &mut self.tasks[task];
        debug_assert_eq!(
            t.status,
            TaskStatus::Allocated,
            "only this cycle's allocations are undone"
        );
        let best_effort = t.is_best_effort();
        let node = t.node.take().expect("an allocated task has a node");
        t.status = TaskStatus::Pending;
        let pod = Arc::clone(&t.pod);
        let req = &pod.requests;
        let job = t.job;
        self.nodes[node].give_back(req);
        self.total_used.sub(req);
        if let Some(j) = job {
            let job = &mut self.jobs[j];
            job.ready_count -= 1;
            if best_effort {
                job.pending_best_effort += 1;
            }
            job.allocated.sub(req);
            if let Some(q) = job.queue {
                self.queues[q].allocated.sub(req);
            }
        }
    }

    /// Sends gangs admitted longer than `inqueue-timeout` ago and still not started back to
    /// Pending before any plugin counts their admission, so what admission reserved for them
    /// goes to others in this very cycle (Volcano issue #5006). Returns the Events.
    fn release_expired_admissions(&mut self) -> Vec<Event> {
        let Some(limit) = self.timeouts.inqueue_timeout_ms else {
            return Vec::new();
        };
        let now = self.now_ms;
        let mut events = Vec::new();
        for j in &mut self.jobs {
            let Some(since) = j.pod_group.status.inqueue_since_ms else {
                continue;
            };
            if j.shadow
                || j.phase != PodGroupPhase::Inqueue
                || j.ready_count > 0
                || now < since.saturating_add(limit)
            {
                continue;
            }
            let message = format!(
                "admitted {} ago (inqueue-timeout {}) and still not placed; admission released, back to Pending",
                format_duration(now - since),
                format_duration(limit)
            );
            j.phase = PodGroupPhase::Pending;
            j.admission_released = true;
            j.block("InqueueTimeout", message.clone());
            events.push(Event {
                object: j.key().clone(),
                kind: "Warning",
                reason: "InqueueTimeout".into(),
                message,
            });
        }
        events
    }

    fn evict(&mut self, task: TaskId) {
        let t = &mut self.tasks[task];
        debug_assert!(
            t.status.is_evictable(),
            "only bound or running tasks are evicted"
        );
        let node = t.node.expect("an evictable task has a node");
        t.status = TaskStatus::Releasing;
        let pod = Arc::clone(&t.pod);
        let req = &pod.requests;
        let job = t.job;
        let n = &mut self.nodes[node];
        n.releasing.add(req);
        n.releasing_pods += 1;
        if let Some(j) = job {
            let job = &mut self.jobs[j];
            job.ready_count -= 1;
            job.allocated.sub(req);
            if let Some(q) = job.queue {
                self.queues[q].allocated.sub(req);
            }
        }
    }

    fn unevict(&mut self, task: TaskId) {
        let t = &mut self.tasks[task];
        debug_assert_eq!(t.status, TaskStatus::Releasing);
        let node = t.node.expect("a releasing task has a node");
        t.status = if t.pod.phase == PodPhase::Running {
            TaskStatus::Running
        } else {
            TaskStatus::Bound
        };
        let pod = Arc::clone(&t.pod);
        let req = &pod.requests;
        let job = t.job;
        let n = &mut self.nodes[node];
        n.releasing.sub(req);
        n.releasing_pods -= 1;
        if let Some(j) = job {
            let job = &mut self.jobs[j];
            job.ready_count += 1;
            job.allocated.add(req);
            if let Some(q) = job.queue {
                self.queues[q].allocated.add(req);
            }
        }
    }

    fn pipeline(&mut self, task: TaskId, node: NodeId) {
        let t = &mut self.tasks[task];
        debug_assert_eq!(
            t.status,
            TaskStatus::Pending,
            "only pending tasks are pipelined"
        );
        t.status = TaskStatus::Pipelined;
        t.node = Some(node);
        let pod = Arc::clone(&t.pod);
        let req = &pod.requests;
        let job = t.job;
        let n = &mut self.nodes[node];
        n.pipelined.add(req);
        n.pipelined_pods += 1;
        if let Some(j) = job {
            let job = &mut self.jobs[j];
            job.pipelined_count += 1;
            job.allocated.add(req);
            if let Some(q) = job.queue {
                self.queues[q].allocated.add(req);
            }
        }
    }

    fn unpipeline(&mut self, task: TaskId) {
        let t = &mut self.tasks[task];
        debug_assert_eq!(t.status, TaskStatus::Pipelined);
        let node = t.node.take().expect("a pipelined task has a node");
        t.status = TaskStatus::Pending;
        let pod = Arc::clone(&t.pod);
        let req = &pod.requests;
        let job = t.job;
        let n = &mut self.nodes[node];
        n.pipelined.sub(req);
        n.pipelined_pods -= 1;
        if let Some(j) = job {
            let job = &mut self.jobs[j];
            job.pipelined_count -= 1;
            job.allocated.sub(req);
            if let Some(q) = job.queue {
                self.queues[q].allocated.sub(req);
            }
        }
    }

    /// Ready tasks per role, for `minTaskMember`.
    pub fn ready_by_role(&self, job: JobId) -> BTreeMap<&str, u32> {
        let mut out = BTreeMap::new();
        for &t in &self.jobs[job].tasks {
            let task = &self.tasks[t];
            if task.status.is_ready() {
                *out.entry(task.role()).or_insert(0) += 1;
            }
        }
        out
    }

    /// Per role, the tasks that count towards `minTaskMember` readiness: those in a ready
    /// status plus pending best-effort ones (Volcano's `CheckTaskReady` counts a pending pod
    /// that requests nothing as occupied: backfill places it on any node).
    pub fn occupied_by_role(&self, job: JobId) -> BTreeMap<&str, u32> {
        let mut out = BTreeMap::new();
        for &t in &self.jobs[job].tasks {
            let task = &self.tasks[t];
            let pending_best_effort =
                task.status == TaskStatus::Pending && task.managed && task.is_best_effort();
            if task.status.is_ready() || pending_best_effort {
                *out.entry(task.role()).or_insert(0) += 1;
            }
        }
        out
    }

    /// Valid (not failed) tasks per role, for `minTaskMember`.
    pub fn valid_by_role(&self, job: JobId) -> BTreeMap<&str, u32> {
        let mut out = BTreeMap::new();
        for &t in &self.jobs[job].tasks {
            let task = &self.tasks[t];
            if task.status != TaskStatus::Failed && task.status != TaskStatus::Releasing {
                *out.entry(task.role()).or_insert(0) += 1;
            }
        }
        out
    }

    /// Pending tasks of a job that this scheduler may place.
    pub fn pending_tasks(&self, job: JobId) -> impl Iterator<Item = TaskId> + '_ {
        self.jobs[job]
            .tasks
            .iter()
            .copied()
            .filter(|&t| self.tasks[t].status == TaskStatus::Pending && self.tasks[t].managed)
    }
}

/// The jobs of a session being built, by PodGroup (or shadow pod) key: namespace, then
/// name, so that each pod finds its group's job without building a key (two `String`s per
/// pod per round before).
#[derive(Clone, Default)]
pub(crate) struct JobIndex(FastMap<String, FastMap<String, JobId>>);

impl JobIndex {
    pub(crate) fn get(&self, namespace: &str, name: &str) -> Option<JobId> {
        self.0.get(namespace)?.get(name).copied()
    }

    pub(crate) fn insert(&mut self, key: ObjectKey, id: JobId) {
        self.0
            .entry(key.namespace)
            .or_default()
            .insert(key.name, id);
    }
}

/// The job a pod belongs to while a state is built ([`SessionState::find_job`]).
pub(crate) enum JobOfPod<'p> {
    /// Its job exists (`None`: it is in no job).
    Found(Option<JobId>),
    /// It names this PodGroup, which does not exist: its pods make one blocked job.
    MissingGroup(&'p str),
    /// A managed pod without a PodGroup: a gang of one is made for it.
    Shadow,
}

/// Whether [`SessionState::account_task`] adds a task's share or takes it away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Account {
    Add,
    Remove,
}

/// A finished pod outside any gang matters to nobody: it is no task.
pub(crate) fn is_task(pod: &Pod) -> bool {
    !(pod.is_terminated() && pod.group.is_none())
}

/// The order tasks are numbered in: creation, then key.
pub(crate) fn creation_order_of_pods(a: &Pod, b: &Pod) -> std::cmp::Ordering {
    (a.creation_index, &a.key).cmp(&(b.creation_index, &b.key))
}

/// The order PodGroups' jobs are numbered in: creation, then key.
pub(crate) fn creation_order(a: &PodGroup, b: &PodGroup) -> std::cmp::Ordering {
    (a.creation_index, &a.key).cmp(&(b.creation_index, &b.key))
}

/// `volcano.sh/preemptable`, read as Volcano reads it: the annotation, else the label;
/// the value as Go's `ParseBool` reads it, a value it cannot read meaning "not
/// preemptable"; absent, the pod may be a victim.
fn pod_preemptable(pod: &Pod) -> bool {
    let value = pod
        .annotations
        .get(PREEMPTABLE_ANNOTATION)
        .or_else(|| pod.labels.get(PREEMPTABLE_ANNOTATION));
    match value.map(String::as_str) {
        None => true,
        Some("1" | "t" | "T" | "true" | "TRUE" | "True") => true,
        Some(_) => false,
    }
}

/// Hash of everything a predicate or score may look at on the task side.
fn placement_key(pod: &Pod) -> u64 {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut h = DefaultHasher::new();
    pod.requests.hash(&mut h);
    pod.node_selector.hash(&mut h);
    pod.tolerations.hash(&mut h);
    pod.required_node_terms.hash(&mut h);
    pod.preferred_node_terms.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use crate::framework::SchedulerConf;
    use crate::framework::testing::Cluster;
    use crate::model::resources::{CPU, GPU};

    #[test]
    fn pods_of_a_missing_pod_group_are_one_blocked_job_never_placed_and_explained_by_pod() {
        // A 10,000-pod gang whose PodGroup serve skipped was 10,000 jobs, ordered and
        // blocked one by one every cycle (2.4x the cycle at 500 nodes,
        // `phalanx-bench cycle --nodes 500 --pods 5000 --skipped-pods 10000`).
        let mut cluster = Cluster::new()
            .node("gpu-1", &[(CPU, 32_000), (GPU, 8)])
            .group("fine", "default", 2)
            .pod("fine-0", Some("fine"), &[(GPU, 1)])
            .pod("fine-1", Some("fine"), &[(GPU, 1)])
            .running_pod("ghost-run", Some("ghost"), "gpu-1", &[(GPU, 1)]);
        for i in 0..50 {
            cluster = cluster.pod(&format!("ghost-{i}"), Some("ghost"), &[(GPU, 1)]);
        }
        let snapshot = cluster.build();
        let (plan, session) =
            crate::framework::run_cycle(&snapshot, &SchedulerConf::volcano_default(), "phalanx");
        let state = &session.state;
        let orphans: Vec<_> = state
            .jobs
            .iter()
            .filter(|j| j.missing_group.is_some())
            .collect();
        assert_eq!(orphans.len(), 1, "one job for the missing group");
        let ghost = orphans[0];
        assert_eq!(ghost.key().to_string(), "default/ghost");
        assert_eq!(ghost.tasks.len(), 50, "its pending pods only");
        assert_eq!(ghost.blocked_code, Some("PodGroupNotFound"));
        assert_eq!(
            ghost.queue, None,
            "its pods ask nothing of the default queue"
        );
        let shares = crate::plugins::proportion::compute_deserved(state);
        assert_eq!(shares[0].request.get(GPU), 2, "the fine gang's pods only");
        // The running pod of the missing group still holds its GPU and belongs to no job.
        let run = state.tasks.iter().find(|t| t.pod.key.name == "ghost-run");
        assert!(run.is_some_and(|t| t.job.is_none()));
        assert_eq!(
            state.nodes[0].idle.get(GPU),
            5,
            "8 - ghost-run - the fine gang"
        );
        let bound: Vec<String> = (plan.gangs.iter())
            .flat_map(|g| g.placements.iter().map(|p| p.pod.name.clone()))
            .collect();
        assert_eq!(bound, ["fine-0", "fine-1"]);
        let text = crate::framework::explain::explain(
            &session,
            &crate::model::ObjectKey::new("default", "ghost-7"),
            &|at| at.to_string(),
        );
        assert!(
            text.starts_with("PodGroup default/ghost:") && text.contains("does not exist"),
            "{text}"
        );
    }

    #[test]
    fn a_pod_on_a_node_missing_from_the_snapshot_holds_nothing_on_the_nodes_there() {
        let state = Cluster::new()
            .node("gpu-1", &[(CPU, 32_000), (GPU, 4)])
            .group("g", "default", 1)
            .running_pod("ghost", Some("g"), "gpu-deleted", &[(CPU, 4_000), (GPU, 4)])
            .session(&SchedulerConf::volcano_default())
            .state;
        assert!(state.total_used.is_zero());
        assert_eq!(state.nodes[0].idle.get(GPU), 4);
        // Its job and queue still count what it holds.
        assert_eq!(state.jobs[0].allocated.get(GPU), 4);
        assert_eq!(state.queues[0].allocated.get(GPU), 4);
    }

    #[test]
    fn preemptable_is_read_from_the_annotation_else_the_label_as_go_parses_booleans() {
        use super::pod_preemptable;
        use crate::model::{ObjectKey, PREEMPTABLE_ANNOTATION, Pod, Resources};
        let pod = |annotation: Option<&str>, label: Option<&str>| {
            let mut p = Pod::new(ObjectKey::new("default", "p"), Resources::new());
            if let Some(v) = annotation {
                p.annotations
                    .insert(PREEMPTABLE_ANNOTATION.into(), v.into());
            }
            if let Some(v) = label {
                p.labels.insert(PREEMPTABLE_ANNOTATION.into(), v.into());
            }
            p
        };
        assert!(pod_preemptable(&pod(None, None)));
        assert!(
            !pod_preemptable(&pod(None, Some("false"))),
            "the label counts"
        );
        assert!(
            pod_preemptable(&pod(Some("true"), Some("false"))),
            "the annotation first"
        );
        assert!(!pod_preemptable(&pod(Some("False"), None)));
        assert!(!pod_preemptable(&pod(Some("0"), None)));
        assert!(pod_preemptable(&pod(Some("T"), None)));
        assert!(
            !pod_preemptable(&pod(Some("maybe"), None)),
            "unreadable: not preemptable"
        );
    }
}
