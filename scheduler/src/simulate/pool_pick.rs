//! A participant owner's pick of nodes in its own pool (ARCHITECTURE.md "Two-phase
//! reservation", step 2): the runtime's answer to [`crate::coord::ParticipantCommand::Pick`].
//!
//! The coordinator planned the gang from the round's snapshot; by the time its prepare
//! arrives, the pool's owner may have filled those very nodes with its own gangs. The owner
//! therefore picks from its current view: the cluster as it is now (this round's binds
//! included) plus what the ledger holds that the cluster does not show yet (reservations of
//! open transactions, commits not yet bound), kept current while the round's messages are
//! pumped. For each pod the hinted node is taken when it still fits, otherwise the best
//! node of the pool where the pod fits, judged by the framework's own fit (capacity and
//! every enabled predicate: selectors, affinity, taints, cordons) and ranked by the
//! configured node scores (binpack: most allocated first), ties by node name. The gang's
//! pods are placed one after the other on the view, so they pack as the planner would.
//!
//! A pick holds its nodes in the view at once: the transactions of a round move through
//! the pump together, so every participant picks before the first reservation reaches the
//! ledger, and picks that did not see each other would choose the same free capacity. The
//! hold is given back when the ledger refuses the reservation or the transaction aborts.

use std::collections::BTreeMap;
use std::collections::hash_map::Entry;
use std::hash::BuildHasher;
use std::sync::Arc;

use phalanx_statestore::ledger::{PlacementState, ShardId, TxnId};
use phalanx_statestore::{LedgerState, PodPlacement, ResourceVec};

use crate::cluster::ClusterSnapshot;
use crate::framework::node_picker::{fits, node_fits};
use crate::framework::session::TaskInfo;
use crate::framework::{FitErrors, NodeId, SchedulerConf, Session, SessionState, TaskId, Unfit};
use crate::model::{Pod, Resources};

/// What a transaction holds in one participant's pool.
type HoldKey = (TxnId, ShardId);

/// Holds that are never given back during one view's life (commits not yet bound).
fn committed() -> HoldKey {
    (String::new(), ShardId::MAX)
}

/// One owner's view of the cluster for picking, valid for one pump of messages.
#[derive(Debug)]
pub struct PoolView {
    session: Session,
    /// Pod key (`namespace/name`) -> its task in `session`.
    task_of: TaskIndex,
    /// Shard -> its pool's nodes, in node-name order (node ids follow names).
    pools: BTreeMap<ShardId, Vec<NodeId>>,
    /// Usage this view counts beyond the cluster, by transaction and participant shard:
    /// picks and reservations, to give back on a refusal or an abort.
    held: BTreeMap<HoldKey, Vec<(NodeId, Resources)>>,
}

/// A view's tasks by their pod's key, found from the ledger's `namespace/name` strings.
/// Keyed by a hash of the key's two parts, so that opening a view (every task of the
/// cluster, pending ones included) allocates no string per task; a lookup checks the
/// task's key, and a task whose hash another task holds waits in `spilled` (rare).
#[derive(Debug, Default)]
struct TaskIndex {
    by_hash: crate::FastMap<u64, TaskId>,
    spilled: Vec<TaskId>,
}

impl TaskIndex {
    fn new(tasks: &[TaskInfo]) -> Self {
        let mut index = Self::default();
        index.by_hash.reserve(tasks.len());
        for (t, info) in tasks.iter().enumerate() {
            let key = &info.pod.key;
            match index.by_hash.entry(key_hash(&key.namespace, &key.name)) {
                Entry::Vacant(slot) => {
                    slot.insert(t);
                }
                Entry::Occupied(_) => index.spilled.push(t),
            }
        }
        index
    }

    /// The task of pod `key` (`namespace/name`) among `tasks` (those it was made from).
    fn get(&self, tasks: &[TaskInfo], key: &str) -> Option<TaskId> {
        let (namespace, name) = key.split_once('/')?;
        let is = |t: &TaskId| {
            let k = &tasks[*t].pod.key;
            k.namespace == namespace && k.name == name
        };
        self.by_hash
            .get(&key_hash(namespace, name))
            .filter(|t| is(t))
            .or_else(|| self.spilled.iter().find(|t| is(t)))
            .copied()
    }
}

fn key_hash(namespace: &str, name: &str) -> u64 {
    foldhash::fast::FixedState::default().hash_one((namespace, name))
}

impl PoolView {
    /// The view of `snapshot` under `conf`, plus every placement of `ledger` that the
    /// snapshot does not show on its node yet.
    pub fn open(
        snapshot: &ClusterSnapshot,
        conf: &SchedulerConf,
        scheduler_name: &str,
        node_shard: &BTreeMap<String, ShardId>,
        ledger: &LedgerState,
    ) -> Self {
        let state = SessionState::build(snapshot, scheduler_name);
        Self::open_on(state, conf, node_shard, ledger)
    }

    /// [`Self::open`] for picking the pods of `snapshot` (those of open transactions),
    /// with `occupying`, the other pods that hold nodes, in key order: these count on
    /// their nodes as in a state built from every pod, without a task and a job each. A
    /// pick reads the nodes and the picked pods only; in a sustained run the tasks and jobs
    /// of some 40,000 running pods were most of opening a view, once a round.
    pub fn open_among(
        snapshot: &ClusterSnapshot,
        occupying: &[Arc<Pod>],
        conf: &SchedulerConf,
        scheduler_name: &str,
        node_shard: &BTreeMap<String, ShardId>,
        ledger: &LedgerState,
    ) -> Self {
        let mut state = SessionState::build(snapshot, scheduler_name);
        for pod in occupying {
            state.occupy_node(pod);
        }
        state.count_over_committed();
        let on_node = |pod: &str, node: &str| {
            let Some((namespace, name)) = pod.split_once('/') else {
                return false;
            };
            occupying
                .binary_search_by(|p| (&*p.key.namespace, &*p.key.name).cmp(&(namespace, name)))
                .is_ok_and(|i| occupying[i].node_name.as_deref() == Some(node))
        };
        Self::open_with(state, conf, node_shard, ledger, on_node)
    }

    /// [`Self::open`] on the state of the snapshot, already made (as the replica's
    /// [`crate::framework::StateCache`] keeps it), so that a pump does not build it again.
    pub fn open_on(
        state: SessionState,
        conf: &SchedulerConf,
        node_shard: &BTreeMap<String, ShardId>,
        ledger: &LedgerState,
    ) -> Self {
        Self::open_with(state, conf, node_shard, ledger, |_, _| false)
    }

    /// The view of `state`, plus every placement of `ledger` that it does not show on its
    /// node yet, neither as a task nor as a pod that `held_outside(pod, node)` says the
    /// state counted without one.
    fn open_with(
        state: SessionState,
        conf: &SchedulerConf,
        node_shard: &BTreeMap<String, ShardId>,
        ledger: &LedgerState,
        held_outside: impl Fn(&str, &str) -> bool,
    ) -> Self {
        let session = Session::open_state(state, conf);
        let task_of = TaskIndex::new(&session.state.tasks);
        let mut pools: BTreeMap<ShardId, Vec<NodeId>> = BTreeMap::new();
        for (id, n) in session.state.nodes.iter().enumerate() {
            if let Some(s) = node_shard.get(n.name()) {
                pools.entry(*s).or_default().push(id);
            }
        }
        let mut view = Self {
            session,
            task_of,
            pools,
            held: BTreeMap::new(),
        };
        for (pod, p) in &ledger.placements {
            // A bound pod the state does not show is gone: its owner's next batch
            // carries its release ahead of any reservation (group commit).
            if p.state == PlacementState::Bound {
                continue;
            }
            let Some(&node) = view.session.state.node_index.get(&p.node) else {
                continue;
            };
            let shown = view
                .task_of
                .get(&view.session.state.tasks, pod)
                .is_some_and(|t| {
                    let task = &view.session.state.tasks[t];
                    task.node == Some(node) && task.status.occupies_node()
                });
            if shown || held_outside(pod, &p.node) {
                continue;
            }
            let key = match &p.state {
                PlacementState::Reserved { txn } => (txn.clone(), p.shard),
                _ => committed(),
            };
            view.take(key, node, resources(&p.resources));
        }
        view
    }

    /// One placement per wanted pod on nodes of `pool`: the hinted node when it still fits,
    /// otherwise the best node of the pool that fits. The nodes picked stay held for `txn`
    /// (see [`Self::refused`], [`Self::aborted`]). `Err` names the first pod no node of the
    /// pool can host, and why, with numbers; it holds nothing.
    pub fn pick(
        &mut self,
        txn: &str,
        pool: ShardId,
        wanted: &[PodPlacement],
    ) -> Result<Vec<PodPlacement>, String> {
        // A pick asked again (its first answer was lost) replaces the first one's hold.
        self.refused(txn, pool);
        let mut taken: Vec<(NodeId, Resources)> = Vec::new();
        let picked = self.pick_each(pool, wanted, &mut taken);
        if picked.is_ok() {
            self.held.insert((txn.to_string(), pool), taken);
        } else {
            for (node, req) in taken {
                self.session.state.nodes[node].give_back(&req);
            }
        }
        picked
    }

    fn pick_each(
        &mut self,
        pool: ShardId,
        wanted: &[PodPlacement],
        taken: &mut Vec<(NodeId, Resources)>,
    ) -> Result<Vec<PodPlacement>, String> {
        let mut out = Vec::with_capacity(wanted.len());
        for w in wanted {
            let Some(task) = self.task_of.get(&self.session.state.tasks, &w.pod) else {
                return Err(format!("pod {}: not in the cluster", w.pod));
            };
            let node = self.node_for(pool, task, &w.node)?;
            let req = self.session.state.tasks[task].pod.requests.clone();
            self.session.state.nodes[node].take(&req);
            taken.push((node, req));
            out.push(PodPlacement {
                pod: w.pod.clone(),
                node: self.session.state.nodes[node].name().to_string(),
                resources: w.resources.clone(),
            });
        }
        Ok(out)
    }

    fn node_for(&self, pool: ShardId, task: TaskId, hint: &str) -> Result<NodeId, String> {
        let nodes = self.pools.get(&pool).map_or(&[][..], Vec::as_slice);
        let hinted = self
            .session
            .state
            .node_index
            .get(hint)
            .copied()
            .filter(|n| nodes.contains(n));
        if let Some(n) = hinted
            && fits(&self.session, task, n)
        {
            return Ok(n);
        }
        let mut best: Option<(f64, NodeId)> = None;
        for &n in nodes {
            if !fits(&self.session, task, n) {
                continue;
            }
            let score = self
                .session
                .plugins
                .node_score(&self.session.state, task, n);
            // Nodes come in name order: a later node must score strictly higher.
            if best.is_none_or(|(s, _)| score > s) {
                best = Some((score, n));
            }
        }
        best.map(|(_, n)| n)
            .ok_or_else(|| self.no_fit(pool, task, nodes))
    }

    /// "pod ns/p: no node of shard 2's pool fits it: 0/3 nodes are available: 3
    /// insufficient nvidia.com/gpu; it requests 8 nvidia.com/gpu, the most free on one
    /// node is 4".
    fn no_fit(&self, pool: ShardId, task: TaskId, nodes: &[NodeId]) -> String {
        let state = &self.session.state;
        let pod = &state.tasks[task].pod;
        if nodes.is_empty() {
            return format!("pod {}: shard {pool}'s pool has no node", pod.key);
        }
        let mut errors = FitErrors::default();
        for &n in nodes {
            errors.nodes_tried += 1;
            if let Err(reason) = node_fits(&self.session, task, n) {
                *errors.by_reason.entry(reason).or_insert(0) += 1;
            }
        }
        let mut text = format!(
            "pod {}: no node of shard {pool}'s pool fits it: {errors}",
            pod.key
        );
        for reason in errors.by_reason.keys() {
            if let Unfit::Insufficient { resource } = reason {
                let most_free = nodes
                    .iter()
                    .map(|&n| state.nodes[n].idle.get(resource.as_str()))
                    .max()
                    .unwrap_or(0);
                text.push_str(&format!(
                    "; it requests {} {resource}, the most free on one node is {most_free}",
                    pod.requests.get(resource.as_str())
                ));
            }
        }
        text
    }

    /// The ledger holds `txn`'s reservation of `placements` in `pool`'s part: the view
    /// counts exactly these for it (a pick made in an earlier view, or a second pick whose
    /// answer the participant ignored, may have held other nodes).
    pub fn reserved(&mut self, txn: &str, pool: ShardId, placements: &[PodPlacement]) {
        self.refused(txn, pool);
        for p in placements {
            if let Some(&node) = self.session.state.node_index.get(&p.node) {
                self.take((txn.to_string(), pool), node, resources(&p.resources));
            }
        }
    }

    /// The ledger refused `txn`'s reservation in `pool`: its pick no longer holds nodes.
    pub fn refused(&mut self, txn: &str, pool: ShardId) {
        let key = (txn.to_string(), pool);
        for (node, req) in self.held.remove(&key).unwrap_or_default() {
            self.session.state.nodes[node].give_back(&req);
        }
    }

    /// `txn` was aborted: none of its picks or reservations occupies a node any more.
    pub fn aborted(&mut self, txn: &str) {
        let pools: Vec<ShardId> = self
            .held
            .keys()
            .filter(|(t, _)| t == txn)
            .map(|(_, s)| *s)
            .collect();
        for pool in pools {
            self.refused(txn, pool);
        }
    }

    fn take(&mut self, key: HoldKey, node: NodeId, req: Resources) {
        self.session.state.nodes[node].take(&req);
        self.held.entry(key).or_default().push((node, req));
    }
}

fn resources(v: &ResourceVec) -> Resources {
    Resources::from_pairs(v.iter())
}

#[cfg(test)]
mod tests {
    use phalanx_statestore::ledger::Placement;

    use super::*;
    use crate::framework::testing::{Cluster, res};
    use crate::model::{Node, ObjectKey, Pod};

    const GPU: &str = "nvidia.com/gpu";

    /// Pool 0: nodes a1, a2, a3 of 4 GPUs; pool 1: node b1 of 8 GPUs. Gang `g` has two
    /// pending pods of `gpus` GPUs each.
    fn cluster(gpus: i64) -> Cluster {
        Cluster::new()
            .node("a1", &[(GPU, 4)])
            .node("a2", &[(GPU, 4)])
            .node("a3", &[(GPU, 4)])
            .node("b1", &[(GPU, 8)])
            .inqueue_group("g", "default", 2)
            .pod("g-0", Some("g"), &[(GPU, gpus)])
            .pod("g-1", Some("g"), &[(GPU, gpus)])
    }

    fn pools() -> BTreeMap<String, ShardId> {
        [("a1", 0), ("a2", 0), ("a3", 0), ("b1", 1)]
            .into_iter()
            .map(|(n, s)| (n.to_string(), s))
            .collect()
    }

    #[test]
    fn the_task_index_finds_every_pod_by_its_key_string_and_spilled_ones_too() {
        let state = SessionState::build(&cluster(2).build(), crate::model::DEFAULT_SCHEDULER_NAME);
        let mut index = TaskIndex::new(&state.tasks);
        for (t, info) in state.tasks.iter().enumerate() {
            assert_eq!(index.get(&state.tasks, &info.pod.key.to_string()), Some(t));
        }
        assert_eq!(index.get(&state.tasks, "default/g-9"), None);
        assert_eq!(index.get(&state.tasks, "no-slash"), None);
        // A task whose hash another task holds is found among the spilled ones.
        let key = state.tasks[1].pod.key.clone();
        index.by_hash.remove(&key_hash(&key.namespace, &key.name));
        index.spilled.push(1);
        assert_eq!(index.get(&state.tasks, &key.to_string()), Some(1));
    }

    /// The view every test picks in, opened as the simulator opens it (the pending pods
    /// as tasks, the pods holding nodes counted on their nodes only), after checking that
    /// it counts every node as the view of the whole snapshot does.
    fn view(cluster: Cluster, ledger: &LedgerState) -> PoolView {
        let whole = cluster.build();
        let (conf, name) = (
            SchedulerConf::volcano_default(),
            crate::model::DEFAULT_SCHEDULER_NAME,
        );
        let (mut occupying, pending): (Vec<Arc<Pod>>, Vec<Arc<Pod>>) =
            whole.pods.iter().cloned().partition(|p| p.occupies_node());
        occupying.sort_by(|a, b| a.key.cmp(&b.key));
        let picking = ClusterSnapshot {
            pods: pending,
            ..whole.clone()
        };
        let among = PoolView::open_among(&picking, &occupying, &conf, name, &pools(), ledger);
        let full = PoolView::open(&whole, &conf, name, &pools(), ledger);
        let counted = |v: &PoolView| {
            let s = &v.session.state;
            let nodes: Vec<String> = (s.nodes.iter())
                .map(|n| {
                    format!(
                        "{} {:?} {:?} {} {:?} {}",
                        n.name(),
                        n.idle,
                        n.used,
                        n.pod_count,
                        n.releasing,
                        n.releasing_pods
                    )
                })
                .collect();
            (
                nodes,
                format!("{:?} {:?} {:?}", s.total_used, s.over_committed, v.held),
            )
        };
        assert_eq!(counted(&among), counted(&full));
        among
    }

    fn want(pod: &str, node: &str, gpus: i64) -> PodPlacement {
        PodPlacement {
            pod: format!("default/{pod}"),
            node: node.to_string(),
            resources: ResourceVec::from_pairs([(GPU, gpus)]),
        }
    }

    fn nodes(picked: &[PodPlacement]) -> Vec<&str> {
        picked.iter().map(|p| p.node.as_str()).collect()
    }

    fn reserved(txn: &str, pod: &str, node: &str, gpus: i64) -> (String, Placement) {
        (
            format!("default/{pod}"),
            Placement {
                node: node.into(),
                resources: ResourceVec::from_pairs([(GPU, gpus)]),
                gang: "default/other".into(),
                shard: 0,
                state: PlacementState::Reserved { txn: txn.into() },
            },
        )
    }

    #[test]
    fn the_hinted_node_is_kept_when_it_still_fits() {
        let mut v = view(cluster(2), &LedgerState::new());
        let picked = v.pick("t", 0, &[want("g-0", "a3", 2), want("g-1", "a3", 2)]);
        assert_eq!(picked.as_deref().map(nodes), Ok(vec!["a3", "a3"]));
    }

    #[test]
    fn a_hint_taken_by_a_running_pod_moves_to_another_node_of_the_pool_not_another_pool() {
        let c = cluster(2).running_pod("busy", None, "a1", &[(GPU, 4)]);
        let mut v = view(c, &LedgerState::new());
        // b1 (pool 1) has the most room, but the pick stays in pool 0: a2 is next by name.
        let picked = v.pick("t", 0, &[want("g-0", "a1", 2)]).expect("fits");
        assert_eq!(nodes(&picked), vec!["a2"]);
        assert_eq!(picked[0].resources, ResourceVec::from_pairs([(GPU, 2)]));
    }

    #[test]
    fn the_pods_of_one_gang_see_each_others_picks() {
        // Each pod takes a whole node: the second cannot share the hint with the first.
        let mut v = view(cluster(4), &LedgerState::new());
        let picked = v.pick("t", 0, &[want("g-0", "a2", 4), want("g-1", "a2", 4)]);
        assert_eq!(picked.as_deref().map(nodes), Ok(vec!["a2", "a1"]));
        // Asked again (the first answer lost), the pick replaces its own hold.
        let again = v.pick("t", 0, &[want("g-0", "a2", 4), want("g-1", "a2", 4)]);
        assert_eq!(again.as_deref().map(nodes), Ok(vec!["a2", "a1"]));
    }

    #[test]
    fn a_pick_holds_its_nodes_against_later_picks_until_the_ledger_refuses_it() {
        // Every pick of a round comes before the first reservation lands in the ledger.
        let mut v = view(cluster(4), &LedgerState::new());
        let first = v.pick("t1", 0, &[want("g-0", "a2", 4)]);
        assert_eq!(first.as_deref().map(nodes), Ok(vec!["a2"]));
        let second = v.pick("t2", 0, &[want("g-1", "a2", 4)]);
        assert_eq!(second.as_deref().map(nodes), Ok(vec!["a1"]));
        v.refused("t1", 0);
        let third = v.pick("t3", 0, &[want("g-1", "a2", 4)]);
        assert_eq!(third.as_deref().map(nodes), Ok(vec!["a2"]));
    }

    #[test]
    fn a_failed_pick_holds_nothing() {
        let mut v = view(cluster(4), &LedgerState::new());
        // a1..a3 take one pod each; the fourth pod finds no room and the pick fails whole.
        let wanted = vec![want("g-0", "a1", 4); 4];
        assert!(v.pick("t1", 0, &wanted).is_err());
        let after = v.pick("t2", 0, &[want("g-0", "a1", 4)]);
        assert_eq!(after.as_deref().map(nodes), Ok(vec!["a1"]));
    }

    #[test]
    fn an_abort_gives_back_the_picks_of_every_pool_of_the_transaction() {
        let mut v = view(cluster(4), &LedgerState::new());
        v.pick("t1", 0, &[want("g-0", "a1", 4)]).expect("fits");
        v.pick("t1", 1, &[want("g-1", "b1", 4)]).expect("fits");
        v.aborted("t1");
        let a = v.pick("t2", 0, &[want("g-0", "a1", 4)]);
        let b = v.pick("t2", 1, &[want("g-1", "b1", 4), want("g-0", "b1", 4)]);
        assert_eq!(a.as_deref().map(nodes), Ok(vec!["a1"]));
        assert_eq!(b.as_deref().map(nodes), Ok(vec!["b1", "b1"]));
    }

    #[test]
    fn a_pod_no_node_of_the_pool_can_host_is_refused_naming_the_pod_resource_and_numbers() {
        let mut v = view(cluster(5), &LedgerState::new());
        let err = v.pick("t", 0, &[want("g-0", "a1", 5)]).unwrap_err();
        assert_eq!(
            err,
            "pod default/g-0: no node of shard 0's pool fits it: 0/3 nodes are available: \
             3 insufficient nvidia.com/gpu; it requests 5 nvidia.com/gpu, the most free on \
             one node is 4"
        );
        // The second pod finds the room the first took: it is the one named.
        let c = cluster(4)
            .running_pod("busy-2", None, "a2", &[(GPU, 1)])
            .running_pod("busy-3", None, "a3", &[(GPU, 1)]);
        let mut v = view(c, &LedgerState::new());
        let err = v
            .pick("t", 0, &[want("g-0", "a1", 4), want("g-1", "a1", 4)])
            .unwrap_err();
        assert!(
            err.starts_with("pod default/g-1: ")
                && err.ends_with("it requests 4 nvidia.com/gpu, the most free on one node is 3"),
            "{err}"
        );
    }

    #[test]
    fn the_pods_predicates_are_checked_on_the_other_nodes_too() {
        let mut labelled = Node::new("a3", Resources::from_pairs([(GPU, 4)]));
        labelled.labels.insert("side".into(), "a".into());
        let mut pod = Pod::new(
            ObjectKey::new("default", "g-0"),
            Resources::from_pairs([(GPU, 2)]),
        );
        pod.group = Some("g".into());
        pod.node_selector.insert("side".into(), "a".into());
        let c = Cluster::new()
            .node("a1", &[(GPU, 4)])
            .node("a2", &[(GPU, 4)])
            .node_with(labelled)
            .inqueue_group("g", "default", 1)
            .pod_with(pod)
            .running_pod("busy", None, "a3", &[(GPU, 4)]);
        let mut v = view(c, &LedgerState::new());
        let err = v.pick("t", 0, &[want("g-0", "a3", 2)]).unwrap_err();
        assert!(
            err.contains("2 node(s) didn't match the pod's node selector")
                && err.contains("1 insufficient nvidia.com/gpu")
                && err.contains("it requests 2 nvidia.com/gpu, the most free on one node is 4"),
            "{err}"
        );
    }

    #[test]
    fn reservations_in_the_ledger_count_until_their_transaction_aborts() {
        let mut ledger = LedgerState::new();
        ledger
            .placements
            .extend([reserved("t-other", "x", "a1", 4)]);
        let mut v = view(cluster(2), &ledger);
        let picked = v.pick("t", 0, &[want("g-0", "a1", 2)]).expect("fits");
        assert_eq!(nodes(&picked), vec!["a2"]);
        v.aborted("t-other");
        let picked = v.pick("t", 0, &[want("g-0", "a1", 2)]).expect("fits");
        assert_eq!(nodes(&picked), vec!["a1"]);
    }

    #[test]
    fn a_reservation_replaces_the_pick_of_its_transaction_in_the_view() {
        let mut v = view(cluster(4), &LedgerState::new());
        v.pick("t1", 0, &[want("g-0", "a1", 4)]).expect("fits");
        // What the ledger holds wins (here another node than this view's pick).
        v.reserved("t1", 0, &[want("g-0", "a3", 4)]);
        let freed = v.pick("t2", 0, &[want("g-1", "a1", 4)]);
        assert_eq!(freed.as_deref().map(nodes), Ok(vec!["a1"]));
        let held = v.pick("t3", 0, &[want("g-0", "a3", 4)]);
        assert_eq!(held.as_deref().map(nodes), Ok(vec!["a2"]));
    }

    #[test]
    fn a_placement_the_cluster_already_shows_is_not_counted_twice() {
        // Committed and bound in the cluster, MarkBound not yet recorded: still `assumed`.
        let c = cluster(2).running_pod("done", None, "a1", &[(GPU, 2)]);
        let mut ledger = LedgerState::new();
        let (_, mut p) = reserved("t", "done", "a1", 2);
        p.state = PlacementState::Assumed;
        ledger.placements.insert("default/done".into(), p);
        let mut v = view(c, &ledger);
        let picked = v.pick("t", 0, &[want("g-0", "a1", 2)]).expect("fits");
        assert_eq!(nodes(&picked), vec!["a1"]);
    }

    /// An earlier round's victim holds its node until it is gone, in the view opened
    /// without its task as in the one built with it (`view` compares them).
    #[test]
    fn a_pod_going_away_still_holds_its_node() {
        let mut going = Pod::new(ObjectKey::new("default", "victim"), res(&[(GPU, 4)]));
        going.node_name = Some("a1".into());
        going.phase = crate::model::PodPhase::Running;
        going.terminating = true;
        let mut v = view(cluster(2).pod_with(going), &LedgerState::new());
        let picked = v.pick("t", 0, &[want("g-0", "a1", 2)]).expect("fits");
        assert_eq!(nodes(&picked), vec!["a2"]);
    }
}
