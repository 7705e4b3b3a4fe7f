//! The round's shared view of the whole cluster, and a replica's session projected from it.
//!
//! With shards, every replica used to open a session over the whole cluster (every node,
//! job and pod) and to decide every gang's admission, so each replica's planning cost stayed
//! that of the whole cluster whatever the replica count. The work every replica would
//! repeat on the same data is done once per round into a [`RoundView`] (read-only, shared
//! by `Arc`):
//! - the whole cluster's jobs, pods and per-node usage (the state a
//!   [`crate::framework::StateCache`] keeps from round to round, patched with what changed);
//! - admission (`enqueue`): one cluster-wide budget (overcommit, queue capability), so it is
//!   decided once for every gang and no budget is spent twice;
//! - per queue: whole-cluster usage, pending requests and `proportion`'s shares, so shares
//!   do not depend on how the cluster is split.
//!
//! A replica's session ([`RoundView::open_session`]) then holds only its own shards' jobs
//! and their pods, in the whole cluster's order, so every decision is the one a whole-
//! cluster session would make for them. Nodes are the view's table, shared read-only; the
//! session copies a node only when it places on it or evicts from it
//! ([`crate::framework::session::Nodes`]), so a gang that does not fit in its home pool
//! still finds room in any other pool. Other shards' running gangs are lent to the session
//! only when `reclaim` looks for victims ([`Session::lend_other_shards_holders`]): a
//! queue's deserved share is a whole-cluster quantity, and the queue above it may be
//! homed in any shard.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use phalanx_statestore::ledger::ShardId;

use crate::cluster::ClusterSnapshot;
use crate::framework::conf::SchedulerConf;
use crate::framework::plan::{CyclePlan, Event};
use crate::framework::plugin_set::PluginSet;
use crate::framework::scope::{CycleScope, ResolvedScope};
use crate::framework::session::{JobId, NodeId, Nodes, Session, SessionState, TaskId};
use crate::model::Resources;
use crate::plugins::proportion::QueueShare;
use crate::shard::ShardMap;

/// Whole-cluster figures per queue, computed once per round.
#[derive(Debug, Default)]
pub struct ClusterFigures {
    /// `proportion`'s shares at session open (empty when the plugin is not configured).
    pub queue_shares: Vec<QueueShare>,
    /// Requests of the queue's pending pods that this scheduler places.
    pub pending_request: Vec<Resources>,
    /// Whether the queue has any job at all (a queue without jobs takes no share).
    pub queue_has_jobs: Vec<bool>,
}

/// What a replica's session knows of the queues whose jobs it does not hold.
#[derive(Clone, Debug)]
pub struct WholeCluster {
    pub figures: Arc<ClusterFigures>,
    /// Per queue: every job of the queue is in this session (its shard is owned).
    pub local_queue: Vec<bool>,
}

impl WholeCluster {
    /// The shared figures of `queue` when this session does not hold its jobs.
    pub fn foreign(&self, queue: usize) -> Option<&ClusterFigures> {
        (!self.local_queue[queue]).then_some(&*self.figures)
    }
}

/// The whole cluster after admission, shared read-only by the replicas of one round.
#[derive(Debug)]
pub struct RoundView {
    state: SessionState,
    /// Events of admission (inqueue timeouts), with the job each is about.
    events: Vec<(JobId, Event)>,
    map: ShardMap,
    job_home: Vec<ShardId>,
    /// Per shard: its jobs, in id order.
    jobs_by_shard: Vec<Vec<JobId>>,
    node_shard: Arc<Vec<ShardId>>,
    pools: Arc<Vec<Vec<NodeId>>>,
    figures: Arc<ClusterFigures>,
    /// Jobs holding pods that may be evicted (bound or running), in id order: reclaim's
    /// candidate victims.
    holders: Vec<JobId>,
}

impl RoundView {
    /// Opens the whole cluster's session once and decides admission for every gang.
    pub fn build(
        snapshot: &ClusterSnapshot,
        conf: &SchedulerConf,
        scheduler_name: &str,
        map: &ShardMap,
    ) -> Self {
        Self::from_state(SessionState::build(snapshot, scheduler_name), conf, map)
    }

    /// [`Self::build`] from the snapshot's state as a [`crate::framework::StateCache`]
    /// keeps it.
    pub fn from_state(state: SessionState, conf: &SchedulerConf, map: &ShardMap) -> Self {
        let mut session = Session::open_state(state, conf);
        let state = &session.state;
        // `proportion` worked them out on this very state when the session opened.
        let queue_shares = session
            .plugins
            .queue_shares()
            .map(<[_]>::to_vec)
            .unwrap_or_default();
        let mut pending_request = vec![Resources::new(); state.queues.len()];
        for (q, queue) in state.queues.iter().enumerate() {
            for &j in &queue.jobs {
                for t in state.pending_tasks(j) {
                    pending_request[q].add(state.tasks[t].resreq());
                }
            }
        }
        let figures = ClusterFigures {
            queue_shares,
            pending_request,
            queue_has_jobs: state.queues.iter().map(|q| !q.jobs.is_empty()).collect(),
        };
        if conf.actions.iter().any(|a| a == "enqueue") {
            crate::actions::enqueue::run(&mut session);
        }
        let state = session.state;
        let job_of: HashMap<&crate::model::ObjectKey, JobId> = if session.plan.events.is_empty() {
            HashMap::new()
        } else {
            state
                .jobs
                .iter()
                .enumerate()
                .map(|(j, job)| (job.key(), j))
                .collect()
        };
        let events: Vec<(JobId, Event)> = session
            .plan
            .events
            .into_iter()
            .filter_map(|e| job_of.get(&e.object).map(|&j| (j, e)))
            .collect();
        let job_home: Vec<ShardId> = state
            .jobs
            .iter()
            .map(|j| map.shard_of_queue(&j.pod_group.queue))
            .collect();
        let mut jobs_by_shard = vec![Vec::new(); map.shard_count() as usize];
        for (j, &home) in job_home.iter().enumerate() {
            jobs_by_shard[home as usize].push(j);
        }
        let node_shard: Vec<ShardId> = state.nodes.iter().map(|n| map.shard_of(&n.node)).collect();
        let mut pools = vec![Vec::new(); map.shard_count() as usize];
        for (n, &s) in node_shard.iter().enumerate() {
            pools[s as usize].push(n);
        }
        let holders = (0..state.jobs.len())
            .filter(|&j| {
                state.jobs[j]
                    .tasks
                    .iter()
                    .any(|&t| state.tasks[t].status.is_evictable())
            })
            .collect();
        Self {
            state,
            events,
            map: map.clone(),
            job_home,
            jobs_by_shard,
            node_shard: Arc::new(node_shard),
            pools: Arc::new(pools),
            figures: Arc::new(figures),
            holders,
        }
    }

    /// The whole cluster's state after admission.
    pub fn state(&self) -> &SessionState {
        &self.state
    }

    /// A replica's session: the jobs of the shards in `scope` with their pods (admission
    /// already decided), every queue with its whole-cluster usage, and the shared nodes.
    pub fn open_session(self: &Arc<Self>, conf: &SchedulerConf, scope: &CycleScope) -> Session {
        let v = &self.state;
        let mut own_jobs: Vec<JobId> = scope
            .owned
            .iter()
            .filter_map(|&s| self.jobs_by_shard.get(s as usize))
            .flatten()
            .copied()
            .collect();
        own_jobs.sort_unstable();
        let mut own_tasks: Vec<TaskId> = own_jobs
            .iter()
            .flat_map(|&j| v.jobs[j].tasks.iter().copied())
            .collect();
        // The whole cluster's relative order, so that ties are broken as there.
        own_tasks.sort_unstable();
        let job_id = |global: JobId| own_jobs.binary_search(&global).ok();
        let task_id = |global: TaskId| {
            own_tasks
                .binary_search(&global)
                .expect("a job's task is projected with it")
        };
        let tasks = own_tasks
            .iter()
            .map(|&t| {
                let mut task = v.tasks[t].clone();
                task.job = task.job.and_then(job_id);
                task
            })
            .collect();
        let jobs = own_jobs
            .iter()
            .map(|&j| {
                let mut job = v.jobs[j].clone();
                job.tasks = job.tasks.iter().map(|&t| task_id(t)).collect();
                job
            })
            .collect();
        let queues = v
            .queues
            .iter()
            .map(|q| {
                let mut queue = q.clone();
                queue.jobs = q.jobs.iter().filter_map(|&j| job_id(j)).collect();
                queue
            })
            .collect::<Vec<_>>();
        let local_queue = v
            .queues
            .iter()
            .map(|q| {
                scope
                    .owned
                    .contains(&self.map.shard_of_queue(&q.queue.name))
            })
            .collect();
        let state = SessionState {
            now_ms: v.now_ms,
            nodes: Nodes::from_shared(v.nodes.share()),
            node_index: Arc::clone(&v.node_index),
            tasks,
            jobs,
            queues,
            queue_index: v.queue_index.clone(),
            total_allocatable: v.total_allocatable.clone(),
            total_used: v.total_used.clone(),
            over_committed: v.over_committed.clone(),
            priority_classes: v.priority_classes.clone(),
            default_priority: v.default_priority,
            never_preempt_classes: v.never_preempt_classes.clone(),
            timeouts: v.timeouts,
            whole: Some(WholeCluster {
                figures: Arc::clone(&self.figures),
                local_queue,
            }),
        };
        let events = self
            .events
            .iter()
            .filter(|(j, _)| job_id(*j).is_some())
            .map(|(_, e)| e.clone())
            .collect();
        let mut session = Session {
            state,
            plugins: PluginSet::from_conf(conf),
            conf: conf.clone(),
            plan: CyclePlan {
                events,
                ..CyclePlan::default()
            },
            free_summary: std::cell::OnceCell::new(),
            scope: Some(ResolvedScope {
                job_home: own_jobs.iter().map(|&j| self.job_home[j]).collect(),
                job_owned: vec![true; own_jobs.len()],
                owned: scope.owned.clone(),
                node_shard: Arc::clone(&self.node_shard),
                pools: Arc::clone(&self.pools),
                split: self.map.shard_count() > 1,
                home_pool: scope.home_pool,
            }),
            view: Some(Arc::clone(self)),
            admission_decided: true,
            lent_holders: false,
            closed_reasons: Vec::new(),
            timings: Default::default(),
        };
        session.plugins.on_session_open(&session.state);
        session
    }
}

impl RoundView {
    /// The session of a replica that owns every shard: the view's whole-cluster state
    /// itself, with admission decided; nothing is projected or lent (there is no other
    /// shard). Plugins open on it as in an unsharded session.
    pub fn into_session(self, conf: &SchedulerConf, scope: &CycleScope) -> Session {
        debug_assert!(
            (0..self.map.shard_count()).all(|s| scope.owned.contains(&s)),
            "only the owner of every shard plans on the whole state"
        );
        let jobs = self.state.jobs.len();
        let mut session = Session {
            state: self.state,
            plugins: PluginSet::from_conf(conf),
            conf: conf.clone(),
            plan: CyclePlan {
                events: self.events.into_iter().map(|(_, e)| e).collect(),
                ..CyclePlan::default()
            },
            free_summary: std::cell::OnceCell::new(),
            scope: Some(ResolvedScope {
                job_home: self.job_home,
                job_owned: vec![true; jobs],
                owned: scope.owned.clone(),
                node_shard: self.node_shard,
                pools: self.pools,
                split: self.map.shard_count() > 1,
                home_pool: scope.home_pool,
            }),
            view: None,
            admission_decided: true,
            lent_holders: false,
            closed_reasons: Vec::new(),
            timings: Default::default(),
        };
        session.plugins.on_session_open(&session.state);
        session
    }
}

impl Session {
    /// Lends the session the other shards' gangs that hold evictable pods, as jobs it does
    /// not act for, so `reclaim` may choose them as victims. Their usage is already counted
    /// on the nodes and in their queues. Gangs of queues the plugins rule out as ever giving
    /// back in this session (`proportion`: under their deserved share) are left out. Does
    /// nothing for a session of the whole cluster or when they were lent already. Returns
    /// how many jobs were added.
    pub(crate) fn lend_other_shards_holders(&mut self) -> usize {
        let Some(view) = self.view.clone() else {
            return 0;
        };
        if std::mem::replace(&mut self.lent_holders, true) {
            return 0;
        }
        let scope = self
            .scope
            .as_mut()
            .expect("a projected session has a scope");
        let owned: &BTreeSet<ShardId> = &scope.owned;
        let v = &view.state;
        let before = self.state.jobs.len();
        let may_give_back: Vec<bool> = (0..self.state.queues.len())
            .map(|q| self.plugins.queue_may_give_back(&self.state, q))
            .collect();
        for &j in &view.holders {
            if owned.contains(&view.job_home[j])
                || v.jobs[j].queue.is_none_or(|q| !may_give_back[q])
            {
                continue;
            }
            let id = self.state.jobs.len();
            let mut job = v.jobs[j].clone();
            job.tasks = v.jobs[j]
                .tasks
                .iter()
                .map(|&t| {
                    let mut task = v.tasks[t].clone();
                    task.job = Some(id);
                    self.state.tasks.push(task);
                    self.state.tasks.len() - 1
                })
                .collect();
            self.state.jobs.push(job);
            scope.job_home.push(view.job_home[j]);
            scope.job_owned.push(false);
        }
        let added = self.state.jobs.len() - before;
        if added > 0 {
            self.plugins.on_jobs_added(&self.state);
        }
        added
    }
}

/// Counts a session's materialised objects: what a test or a report may check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionSize {
    pub jobs: usize,
    pub tasks: usize,
    /// Nodes the session copied because it changed them.
    pub nodes_copied: usize,
}

impl Session {
    pub fn size(&self) -> SessionSize {
        SessionSize {
            jobs: self.state.jobs.len(),
            tasks: self.state.tasks.len(),
            nodes_copied: self.state.nodes.copied(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::scope::HomePool;
    use crate::framework::testing::{Cluster, name_in, two_shards, weighted_queue};
    use crate::framework::{SchedulerConf, run_cycle, run_cycle_in_view};
    use crate::model::DEFAULT_SCHEDULER_NAME;
    use crate::model::resources::{CPU, GPU};

    struct Names {
        /// Queues homed in shard 0 and 1.
        q0: String,
        q1: String,
        /// Nodes in shard 0's and 1's pools.
        n0: String,
        n1: String,
    }

    fn names(map: &ShardMap) -> Names {
        let labels = std::collections::BTreeMap::new();
        Names {
            q0: name_in("qa", 0, |q| map.shard_of_queue(q)),
            q1: name_in("qb", 1, |q| map.shard_of_queue(q)),
            n0: name_in("n", 0, |n| map.shard_of_node(n, &labels)),
            n1: name_in("n", 1, |n| map.shard_of_node(n, &labels)),
        }
    }

    fn view_of(snapshot: &ClusterSnapshot, map: &ShardMap) -> Arc<RoundView> {
        Arc::new(RoundView::build(
            snapshot,
            &SchedulerConf::volcano_default(),
            DEFAULT_SCHEDULER_NAME,
            map,
        ))
    }

    fn scope(map: &ShardMap, owned: ShardId) -> CycleScope {
        CycleScope::new(map.clone(), [owned].into(), HomePool::Strict)
    }

    #[test]
    fn a_replica_session_holds_only_its_own_shards_jobs_and_copies_only_the_nodes_it_uses() {
        let map = two_shards();
        let n = names(&map);
        let snapshot = Cluster::new()
            .node(&n.n0, &[(CPU, 8_000), (GPU, 8)])
            .node(&n.n1, &[(CPU, 8_000), (GPU, 8)])
            .queue(weighted_queue(&n.q0, 1))
            .queue(weighted_queue(&n.q1, 1))
            .inqueue_group("mine", &n.q0, 2)
            .pod("mine-0", Some("mine"), &[(CPU, 1_000), (GPU, 1)])
            .pod("mine-1", Some("mine"), &[(CPU, 1_000), (GPU, 1)])
            .inqueue_group("theirs", &n.q1, 1)
            .pod("theirs-0", Some("theirs"), &[(CPU, 1_000), (GPU, 1)])
            .running_pod(
                "theirs-old",
                Some("theirs"),
                &n.n0,
                &[(CPU, 1_000), (GPU, 2)],
            )
            .build();
        let view = view_of(&snapshot, &map);
        let conf = SchedulerConf::volcano_default();
        let session = view.open_session(&conf, &scope(&map, 0));
        let jobs: Vec<&str> = session
            .state
            .jobs
            .iter()
            .map(|j| j.key().name.as_str())
            .collect();
        assert_eq!(jobs, ["mine"]);
        assert_eq!(session.size().tasks, 2);
        assert_eq!(session.size().nodes_copied, 0);
        // The other shard's running pod holds its GPUs on the home node all the same.
        let home = session.state.node_index[&n.n0];
        assert_eq!(session.state.nodes[home].idle.get(GPU), 6);
        // Its queue keeps its whole-cluster usage (shares are computed from it).
        let theirs = session.state.queue_index[&n.q1];
        assert_eq!(session.state.queues[theirs].allocated.get(GPU), 2);

        let (plan, session) = run_cycle_in_view(&view, &conf, &scope(&map, 0));
        assert_eq!(plan.bind_count(), 2);
        assert!(plan.gangs[0].placements.iter().all(|p| p.node == n.n0));
        assert_eq!(session.size().nodes_copied, 1, "only the node it placed on");
        // The view is shared, never changed by a replica.
        assert_eq!(view.state().nodes[home].idle.get(GPU), 6);
    }

    #[test]
    fn a_gang_that_does_not_fit_in_its_home_pool_is_placed_on_another_pools_nodes() {
        let map = two_shards();
        let n = names(&map);
        let mut cluster = Cluster::new()
            .node(&n.n0, &[(CPU, 8_000), (GPU, 2)])
            .node(&n.n1, &[(CPU, 8_000), (GPU, 8)])
            .queue(weighted_queue(&n.q0, 1))
            .inqueue_group("g", &n.q0, 4);
        for i in 0..4 {
            cluster = cluster.pod(&format!("g-{i}"), Some("g"), &[(CPU, 1_000), (GPU, 1)]);
        }
        let view = view_of(&cluster.build(), &map);
        let (plan, session) =
            run_cycle_in_view(&view, &SchedulerConf::volcano_default(), &scope(&map, 0));
        assert_eq!(plan.bind_count(), 4);
        let nodes: BTreeSet<&str> = plan.gangs[0]
            .placements
            .iter()
            .map(|p| p.node.as_str())
            .collect();
        assert!(nodes.contains(n.n1.as_str()), "{nodes:?}");
        assert!(session.size().nodes_copied <= 2);
    }

    /// Queue a (shard 0) holds the whole cluster; queue b (shard 1) has a gang waiting. The
    /// shares each replica sees are the whole cluster's, and the replica owning b's shard
    /// reclaims from a's gangs although it does not hold them.
    fn contended() -> (ShardMap, Names, ClusterSnapshot) {
        let map = two_shards();
        let n = names(&map);
        let mut cluster = Cluster::new()
            .node(&n.n0, &[(CPU, 16_000), (GPU, 4)])
            .node(&n.n1, &[(CPU, 16_000), (GPU, 4)])
            .queue(weighted_queue(&n.q0, 1))
            .queue(weighted_queue(&n.q1, 1));
        for (i, node) in [&n.n0, &n.n0, &n.n1, &n.n1].into_iter().enumerate() {
            let gang = format!("a{i}");
            cluster = cluster.inqueue_group(&gang, &n.q0, 1).running_pod(
                &format!("{gang}-0"),
                Some(&gang),
                node,
                &[(CPU, 1_000), (GPU, 2)],
            );
        }
        cluster = cluster.inqueue_group("b", &n.q1, 2);
        for i in 0..2 {
            cluster = cluster.pod(&format!("b-{i}"), Some("b"), &[(CPU, 1_000), (GPU, 2)]);
        }
        (map, n, cluster.build())
    }

    #[test]
    fn shares_in_a_replica_session_equal_the_whole_clusters() {
        let (map, _, snapshot) = contended();
        let conf = SchedulerConf::volcano_default();
        let whole = Session::open(&snapshot, &conf, DEFAULT_SCHEDULER_NAME);
        let expected = crate::plugins::proportion::compute_deserved(&whole.state);
        let view = view_of(&snapshot, &map);
        // The view's own figures are the shares `proportion` opened the whole state with.
        let figures = &view.figures;
        assert_eq!(figures.queue_shares.len(), expected.len());
        for (got, want) in figures.queue_shares.iter().zip(&expected) {
            assert_eq!(
                (
                    &got.deserved,
                    &got.request,
                    &got.inqueue,
                    &got.inqueue_within_share
                ),
                (
                    &want.deserved,
                    &want.request,
                    &want.inqueue,
                    &want.inqueue_within_share
                )
            );
        }
        for owned in [0, 1] {
            let session = view.open_session(&conf, &scope(&map, owned));
            let shares = crate::plugins::proportion::compute_deserved(&session.state);
            assert_eq!(shares.len(), expected.len());
            for (got, want) in shares.iter().zip(&expected) {
                assert_eq!(got.deserved, want.deserved, "replica of shard {owned}");
                assert_eq!(got.request, want.request, "replica of shard {owned}");
            }
            for (q, queue) in session.state.queues.iter().enumerate() {
                assert_eq!(queue.allocated, whole.state.queues[q].allocated);
            }
        }
    }

    #[test]
    fn a_replica_reclaims_from_another_shards_gangs_as_the_whole_cluster_would() {
        let (map, n, snapshot) = contended();
        let conf = SchedulerConf::volcano_default();
        let (unsharded, _) = run_cycle(&snapshot, &conf, DEFAULT_SCHEDULER_NAME);
        let victims = |plan: &CyclePlan| -> Vec<String> {
            let mut v: Vec<String> = plan.evictions.iter().map(|e| e.pod.to_string()).collect();
            v.sort();
            v
        };
        assert!(
            !unsharded.evictions.is_empty(),
            "the scenario must need reclaim"
        );
        let view = view_of(&snapshot, &map);
        let (plan, session) = run_cycle_in_view(&view, &conf, &scope(&map, 1));
        assert_eq!(victims(&plan), victims(&unsharded));
        assert!(plan.evictions.iter().all(|e| e.for_gang.name == "b"));
        // a's gangs were lent as victims, never acted for.
        assert!(session.state.jobs.len() > 1);
        assert!(plan.status_updates.iter().all(|(k, _)| k.name == "b"));
        // The replica of a's shard has no gang to make room for: nothing is lent to it.
        let (_, other) = run_cycle_in_view(&view, &conf, &scope(&map, 0));
        assert!(
            other.state.jobs.iter().all(|j| j.pod_group.queue == n.q0),
            "{:?}",
            other.state.jobs.iter().map(|j| j.key()).collect::<Vec<_>>()
        );
    }

    /// Queue a (shard 0) runs one gang but wants far more than it holds: under its deserved
    /// share, so `proportion` would never let reclaim take from it, and the replica of
    /// shard 1 is not lent its gangs although it has a gang to make room for.
    #[test]
    fn gangs_of_a_queue_under_its_share_are_not_lent_as_victims() {
        let map = two_shards();
        let n = names(&map);
        let mut cluster = Cluster::new()
            .node(&n.n0, &[(CPU, 16_000), (GPU, 4)])
            .node(&n.n1, &[(CPU, 16_000), (GPU, 4)])
            .queue(weighted_queue(&n.q0, 1))
            .queue(weighted_queue(&n.q1, 1))
            .inqueue_group("a-running", &n.q0, 1)
            .running_pod(
                "a-running-0",
                Some("a-running"),
                &n.n0,
                &[(CPU, 1_000), (GPU, 2)],
            )
            .inqueue_group("a-big", &n.q0, 1)
            .pod("a-big-0", Some("a-big"), &[(CPU, 1_000), (GPU, 16)])
            .inqueue_group("b", &n.q1, 2);
        for i in 0..2 {
            cluster = cluster.pod(&format!("b-{i}"), Some("b"), &[(CPU, 1_000), (GPU, 8)]);
        }
        let view = view_of(&cluster.build(), &map);
        let conf = SchedulerConf::volcano_default();
        let (plan, session) = run_cycle_in_view(&view, &conf, &scope(&map, 1));
        assert!(plan.evictions.is_empty());
        assert!(
            session.lent_holders,
            "b starves, so reclaim looked for victims"
        );
        let jobs: Vec<&str> = session
            .state
            .jobs
            .iter()
            .map(|j| j.key().name.as_str())
            .collect();
        assert_eq!(jobs, ["b"]);
    }

    #[test]
    fn the_owner_of_every_shard_plans_as_a_projection_of_every_shard_would() {
        let (map, _, snapshot) = contended();
        let conf = SchedulerConf::volcano_default();
        let all = CycleScope::new(map.clone(), [0, 1].into(), HomePool::Strict);
        let view = view_of(&snapshot, &map);
        let (projected, _) = run_cycle_in_view(&view, &conf, &all);
        let view = RoundView::build(&snapshot, &conf, DEFAULT_SCHEDULER_NAME, &map);
        let (whole, session) = crate::framework::run_cycle_owning_all(view, &conf, &all);
        assert_eq!(format!("{whole:?}"), format!("{projected:?}"));
        assert!(!whole.evictions.is_empty());
        assert!(session.view.is_none());
    }
}
