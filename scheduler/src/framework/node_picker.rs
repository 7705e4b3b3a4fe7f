//! Choosing the best node for a task, fast.
//!
//! Volcano predicates and scores every node for every task: O(nodes) per pod. Most pods of a
//! cycle come in a few shapes, so the picker keeps, per *placement key* (requests, node
//! selector, tolerations, node affinity: everything a predicate or score reads on the task
//! side), the feasible nodes ordered by score. Allocating or releasing a task changes one
//! node; the picker logs the change and re-scores that node for a key the next time the key
//! is picked. The node chosen is the one Volcano's rule picks (highest total score), with ties
//! broken by node name instead of at random, so runs are reproducible.
//!
//! The contract this relies on: a plugin's predicate and score depend only on the node's
//! state and on the task's placement key. Every plugin in `plugins/` keeps it.

use std::collections::{BTreeSet, HashMap};

use crate::framework::fit::{FitErrors, Unfit};
use crate::framework::session::{NodeId, Session, SessionState, TaskId};

/// The most placement keys kept ranked at once; the least recently used is dropped beyond.
const MAX_CACHED_KEYS: usize = 64;

/// Capacity that no policy may override (invariant I1): free resources and pod slots.
pub fn capacity_fit(state: &SessionState, task: TaskId, node: NodeId) -> Result<(), Unfit> {
    let n = &state.nodes[node];
    if n.pod_count >= n.node.max_pods {
        return Err(Unfit::TooManyPods);
    }
    match state.tasks[task].pod.requests.shortage(&n.idle) {
        None => Ok(()),
        Some((resource, _, _)) => Err(Unfit::Insufficient {
            resource: resource.clone(),
        }),
    }
}

/// [`node_fits`] without the reason: what ranking nodes asks, thousands of times a cycle,
/// and most nodes of a busy cluster do not fit.
pub fn fits(session: &Session, task: TaskId, node: NodeId) -> bool {
    let state = &session.state;
    let n = &state.nodes[node];
    n.pod_count < n.node.max_pods
        && state.tasks[task].pod.requests.shortage(&n.idle).is_none()
        && session.plugins.predicate(state, task, node).is_ok()
}

/// Capacity, then every enabled plugin's predicate.
pub fn node_fits(session: &Session, task: TaskId, node: NodeId) -> Result<(), Unfit> {
    capacity_fit(&session.state, task, node)?;
    session.plugins.predicate(&session.state, task, node)
}

/// A score with a total order in which higher scores sort first.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Score(f64);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.0.total_cmp(&self.0)
    }
}

#[derive(Debug)]
struct RankedNodes {
    /// A task with this key; predicates and scores are evaluated for it.
    representative: TaskId,
    /// (score, node): the first element is the best node.
    ranked: BTreeSet<(Score, NodeId)>,
    score_of: HashMap<NodeId, Score>,
    /// How much of the change log is already reflected.
    seen_changes: usize,
    last_used: u64,
    /// Only nodes of this shard's pool are ranked (`None`: every node).
    pool: Option<u32>,
}

impl RankedNodes {
    fn rescore(&mut self, session: &Session, node: NodeId) {
        if let Some(old) = self.score_of.remove(&node) {
            self.ranked.remove(&(old, node));
        }
        if session.node_in_pool(node, self.pool) && fits(session, self.representative, node) {
            let score = Score(session.plugins.node_score(
                &session.state,
                self.representative,
                node,
            ));
            self.ranked.insert((score, node));
            self.score_of.insert(node, score);
        }
    }
}

/// Ranked nodes per placement key, kept current through [`NodePicker::node_changed`]. One
/// picker serves one action; every change to a node's usage must be reported to it.
#[derive(Debug, Default)]
pub struct NodePicker {
    by_key: HashMap<u64, RankedNodes>,
    changes: Vec<NodeId>,
    /// Per node, the pick number at which it was last re-scored (to skip repeats in the log).
    stamp: Vec<u64>,
    picks: u64,
    /// Reasons for "no node fits" per key, with the change-log length they were computed at.
    explained: HashMap<u64, (usize, FitErrors)>,
}

impl NodePicker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `node`'s usage changed (a task was allocated to or released from it).
    pub fn node_changed(&mut self, node: NodeId) {
        self.changes.push(node);
    }

    /// How many changes were reported so far; a cheap version number of the nodes' state.
    pub fn version(&self) -> usize {
        self.changes.len()
    }

    /// The best feasible node for `task`, or `None` when no node fits.
    pub fn pick(&mut self, session: &Session, task: TaskId) -> Option<NodeId> {
        self.pick_in(session, task, None)
    }

    /// The best feasible node for `task`, taken from shard `pool`'s pool when a node there
    /// scores as high as the best node of the cluster (`None`: [`Self::pick`]). The choice
    /// is then always one the unsharded planner could have made (equal score); only ties
    /// are broken towards the home pool.
    pub fn pick_preferring(
        &mut self,
        session: &Session,
        task: TaskId,
        pool: Option<u32>,
    ) -> Option<NodeId> {
        let best = self.pick(session, task)?;
        let Some(p) = pool else {
            return Some(best);
        };
        if session.node_in_pool(best, Some(p)) {
            return Some(best);
        }
        let key = session.state.tasks[task].placement_key;
        let top = self
            .by_key
            .get(&key)
            .and_then(|r| r.score_of.get(&best).copied());
        let Some(home) = self.pick_in(session, task, Some(p)) else {
            return Some(best);
        };
        let home_score = self
            .by_key
            .get(&pool_key(key, Some(p)))
            .and_then(|r| r.score_of.get(&home).copied());
        if top.is_some() && top == home_score {
            Some(home)
        } else {
            Some(best)
        }
    }

    /// The best feasible node for `task` in shard `pool`'s pool (`None`: any node).
    pub fn pick_in(
        &mut self,
        session: &Session,
        task: TaskId,
        pool: Option<u32>,
    ) -> Option<NodeId> {
        self.picks += 1;
        let key = pool_key(session.state.tasks[task].placement_key, pool);
        if self.stamp.len() != session.state.nodes.len() {
            self.stamp = vec![0; session.state.nodes.len()];
        }
        if !self.by_key.contains_key(&key) {
            if self.by_key.len() >= MAX_CACHED_KEYS {
                self.evict_least_recently_used();
            }
            let ranked = rank_all(session, task, self.changes.len(), pool);
            self.by_key.insert(key, ranked);
        }
        let ranked = self.by_key.get_mut(&key).expect("inserted above");
        ranked.last_used = self.picks;
        for i in ranked.seen_changes..self.changes.len() {
            let node = self.changes[i];
            if self.stamp[node] != self.picks {
                self.stamp[node] = self.picks;
                ranked.rescore(session, node);
            }
        }
        ranked.seen_changes = self.changes.len();
        ranked.ranked.first().map(|&(_, node)| node)
    }

    /// Why `task` fits on no node, one reason per node, counted. Cached per placement key
    /// until a node changes.
    pub fn explain_no_fit(&mut self, session: &Session, task: TaskId) -> FitErrors {
        let key = session.state.tasks[task].placement_key;
        if let Some((version, errors)) = self.explained.get(&key)
            && *version == self.changes.len()
        {
            return errors.clone();
        }
        let errors = explain_no_fit(session, task);
        self.explained
            .insert(key, (self.changes.len(), errors.clone()));
        errors
    }

    fn evict_least_recently_used(&mut self) {
        if let Some((&key, _)) = self.by_key.iter().min_by_key(|(_, r)| r.last_used) {
            self.by_key.remove(&key);
        }
    }
}

/// The cache key of a placement key restricted to a pool (the key itself for every node).
pub fn pool_key(key: u64, pool: Option<u32>) -> u64 {
    match pool {
        None => key,
        Some(p) => (key ^ (u64::from(p) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)).rotate_left(17),
    }
}

fn rank_all(
    session: &Session,
    task: TaskId,
    seen_changes: usize,
    pool: Option<u32>,
) -> RankedNodes {
    let mut ranked = RankedNodes {
        representative: task,
        ranked: BTreeSet::new(),
        score_of: HashMap::new(),
        seen_changes,
        last_used: 0,
        pool,
    };
    let mut rank = |node: NodeId| {
        if fits(session, task, node) {
            let score = Score(session.plugins.node_score(&session.state, task, node));
            ranked.ranked.insert((score, node));
            ranked.score_of.insert(node, score);
        }
    };
    // A home pool is ranked from its own node list, not by filtering the whole cluster.
    match pool.and_then(|p| session.pool_nodes(p)) {
        Some(nodes) => nodes.iter().copied().for_each(&mut rank),
        None => (0..session.state.nodes.len())
            .filter(|&node| session.node_in_pool(node, pool))
            .for_each(rank),
    }
    ranked
}

/// Why `task` fits on no node: one reason per node, counted.
pub fn explain_no_fit(session: &Session, task: TaskId) -> FitErrors {
    let mut errors = FitErrors::default();
    for node in 0..session.state.nodes.len() {
        errors.nodes_tried += 1;
        if let Err(reason) = node_fits(session, task, node) {
            *errors.by_reason.entry(reason).or_insert(0) += 1;
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::SchedulerConf;
    use crate::framework::testing::{Cluster, res};
    use crate::model::Node;
    use crate::model::resources::{CPU, GPU};

    /// `fits` is `node_fits` without the reason, on every kind of refusal and on a fit.
    #[test]
    fn the_quick_fit_test_agrees_with_the_one_that_says_why() {
        let mut full = Node::new("full", res(&[(CPU, 64_000), (GPU, 8)]));
        full.max_pods = 1;
        let mut cordoned = Node::new("cordoned", res(&[(CPU, 64_000), (GPU, 8)]));
        cordoned.unschedulable = true;
        let session = Cluster::new()
            .node("fits", &[(CPU, 64_000), (GPU, 8)])
            .node("small", &[(CPU, 64_000), (GPU, 2)])
            .node_with(full)
            .node_with(cordoned)
            .running_pod("runs", None, "full", &[(CPU, 1_000)])
            .pod("wants", None, &[(CPU, 1_000), (GPU, 4)])
            .session(&SchedulerConf::volcano_default());
        let task = (session.state.tasks.iter())
            .position(|t| t.pod.key.name == "wants")
            .expect("the pending pod is a task");
        let verdicts: Vec<(String, bool, Result<(), Unfit>)> = (0..session.state.nodes.len())
            .map(|n| {
                let name = session.state.nodes[n].name().to_string();
                (name, fits(&session, task, n), node_fits(&session, task, n))
            })
            .collect();
        for (name, quick, full) in &verdicts {
            assert_eq!(*quick, full.is_ok(), "{name}: {full:?}");
        }
        let refusals: Vec<String> = (verdicts.iter())
            .filter_map(|(n, _, r)| r.as_ref().err().map(|e| format!("{n}: {e}")))
            .collect();
        assert_eq!(refusals.len(), 3, "{refusals:?}");
    }
}
