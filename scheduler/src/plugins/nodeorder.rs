//! `nodeorder`: Kubernetes' scoring functions with Volcano's weight arguments
//! (`leastrequested.weight` 1, `mostrequested.weight` 0, `balancedresource.weight` 1,
//! `nodeaffinity.weight` 1, `tainttoleration.weight` 1). Each function scores 0..=100 on the
//! node as it would be with the task placed; the plugin's score is the weighted sum.
//!
//! Kubernetes normalises node-affinity and taint-toleration scores across all nodes; here each
//! node is scored on its own (matched preferred weight / total preferred weight, and
//! 100 / (1 + untolerated PreferNoSchedule taints)) so a score never depends on other nodes.
//! The order of nodes with the same affinity matches is the same either way.

use crate::framework::conf::{Arguments, argument};
use crate::framework::{NodeId, Plugin, SessionState, TaskId};
use crate::model::TaintEffect;
use crate::model::resources::{CPU, MEMORY};

const MAX_SCORE: f64 = 100.0;

#[derive(Debug)]
pub struct NodeOrderPlugin {
    least_requested: f64,
    most_requested: f64,
    balanced_resource: f64,
    node_affinity: f64,
    taint_toleration: f64,
}

impl NodeOrderPlugin {
    pub fn new(args: &Arguments) -> Self {
        Self {
            least_requested: argument(args, "leastrequested.weight", 1.0),
            most_requested: argument(args, "mostrequested.weight", 0.0),
            balanced_resource: argument(args, "balancedresource.weight", 1.0),
            node_affinity: argument(args, "nodeaffinity.weight", 1.0),
            taint_toleration: argument(args, "tainttoleration.weight", 1.0),
        }
    }
}

/// Fraction of `resource` in use on the node with the task added, capped at 1; `None` when
/// the node has none of it.
fn fraction_after(state: &SessionState, task: TaskId, node: NodeId, resource: &str) -> Option<f64> {
    let n = &state.nodes[node];
    let capacity = n.node.allocatable.get(resource);
    if capacity <= 0 {
        return None;
    }
    let used = n.used.get(resource) + state.tasks[task].pod.requests.get(resource);
    Some((used as f64 / capacity as f64).min(1.0))
}

impl Plugin for NodeOrderPlugin {
    fn name(&self) -> &'static str {
        "nodeorder"
    }

    fn node_score(&self, state: &SessionState, task: TaskId, node: NodeId) -> f64 {
        let cpu = fraction_after(state, task, node, CPU).unwrap_or(1.0);
        let memory = fraction_after(state, task, node, MEMORY).unwrap_or(1.0);
        let mut score = 0.0;
        if self.least_requested != 0.0 {
            score += self.least_requested * ((1.0 - cpu) + (1.0 - memory)) / 2.0 * MAX_SCORE;
        }
        if self.most_requested != 0.0 {
            score += self.most_requested * (cpu + memory) / 2.0 * MAX_SCORE;
        }
        if self.balanced_resource != 0.0 {
            // Standard deviation of two fractions is half their difference.
            let std = (cpu - memory).abs() / 2.0;
            score += self.balanced_resource * (1.0 - std) * MAX_SCORE;
        }
        let pod = &state.tasks[task].pod;
        let n = &state.nodes[node].node;
        if self.node_affinity != 0.0 && !pod.preferred_node_terms.is_empty() {
            let total: i32 = pod.preferred_node_terms.iter().map(|(w, _)| *w).sum();
            let matched: i32 = pod
                .preferred_node_terms
                .iter()
                .filter(|(_, term)| term.matches(n))
                .map(|(w, _)| *w)
                .sum();
            if total > 0 {
                score += self.node_affinity * f64::from(matched) / f64::from(total) * MAX_SCORE;
            }
        }
        if self.taint_toleration != 0.0 {
            let intolerable = n
                .taints
                .iter()
                .filter(|t| t.effect == TaintEffect::PreferNoSchedule)
                .filter(|t| !pod.tolerations.iter().any(|tol| tol.tolerates(t)))
                .count();
            score += self.taint_toleration * MAX_SCORE / (1.0 + intolerable as f64);
        }
        score
    }
}
