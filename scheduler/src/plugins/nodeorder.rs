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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::SchedulerConf;
    use crate::framework::testing::{Cluster, args};
    use crate::model::{Node, NodeSelectorOperator, NodeSelectorRequirement, NodeSelectorTerm};
    use crate::model::{ObjectKey, Pod, Taint};

    const GI: i64 = 1 << 30;

    /// Only the named function counts (every weight 0 but `name`'s, which is 1).
    fn only(name: &str) -> NodeOrderPlugin {
        let mut a = args(&[
            ("leastrequested.weight", "0"),
            ("mostrequested.weight", "0"),
            ("balancedresource.weight", "0"),
            ("nodeaffinity.weight", "0"),
            ("tainttoleration.weight", "0"),
        ]);
        a.insert(format!("{name}.weight"), "1".to_string());
        NodeOrderPlugin::new(&a)
    }

    /// Node `n1` (4 CPUs, 8Gi) running 1 CPU and 2Gi, with `node` adjustments; task `t`.
    fn state(node: impl FnOnce(&mut Node), task: Pod) -> SessionState {
        let mut n = Node::new(
            "n1",
            crate::framework::testing::res(&[(CPU, 4_000), (MEMORY, 8 * GI)]),
        );
        node(&mut n);
        Cluster::new()
            .node_with(n)
            .running_pod("busy", None, "n1", &[(CPU, 1_000), (MEMORY, 2 * GI)])
            .pod_with(task)
            .session(&SchedulerConf::from_names(&["allocate"], &[&["nodeorder"]]))
            .state
    }

    fn pod(cpu_milli: i64, memory: i64) -> Pod {
        Pod::new(
            ObjectKey::new("default", "t"),
            crate::framework::testing::res(&[(CPU, cpu_milli), (MEMORY, memory)]),
        )
    }

    fn score(plugin: &NodeOrderPlugin, state: &SessionState) -> f64 {
        let t = state
            .tasks
            .iter()
            .position(|t| t.pod.key.name == "t")
            .expect("task t exists");
        plugin.node_score(state, t, 0)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn leastrequested_scores_the_free_fraction_after_placing_the_task() {
        // cpu (1+1)/4 = 0.5 used, memory (2+2)/8 = 0.5 used: (0.5 + 0.5) / 2 × 100.
        let s = state(|_| {}, pod(1_000, 2 * GI));
        assert!(close(score(&only("leastrequested"), &s), 50.0));
        // cpu (1+1)/4 = 0.5, memory (2+0)/8 = 0.25: free (0.5 + 0.75) / 2 × 100.
        let s = state(|_| {}, pod(1_000, 0));
        assert!(close(score(&only("leastrequested"), &s), 62.5));
    }

    #[test]
    fn mostrequested_scores_the_used_fraction_after_placing_the_task() {
        let s = state(|_| {}, pod(1_000, 0));
        assert!(close(score(&only("mostrequested"), &s), 37.5));
    }

    #[test]
    fn balancedresource_loses_half_the_gap_between_cpu_and_memory_fractions() {
        // cpu 0.75, memory 0.25: standard deviation 0.25 → (1 - 0.25) × 100.
        let s = state(|_| {}, pod(2_000, 0));
        assert!(close(score(&only("balancedresource"), &s), 75.0));
        let s = state(|_| {}, pod(1_000, 2 * GI));
        assert!(close(score(&only("balancedresource"), &s), 100.0));
    }

    #[test]
    fn default_weights_add_leastrequested_balanced_and_taint_scores() {
        // 50 (least) + 100 (balanced) + 100 (no taints); no preferred affinity: 0.
        let s = state(|_| {}, pod(1_000, 2 * GI));
        let plugin = NodeOrderPlugin::new(&Arguments::new());
        assert!(close(score(&plugin, &s), 250.0));
    }

    #[test]
    fn each_untolerated_prefer_no_schedule_taint_lowers_the_taint_score() {
        let taint = |key: &str| Taint {
            key: key.into(),
            value: String::new(),
            effect: TaintEffect::PreferNoSchedule,
        };
        let s = state(|n| n.taints = vec![taint("a")], pod(1_000, 0));
        assert!(close(score(&only("tainttoleration"), &s), 50.0));
        let s = state(|n| n.taints = vec![taint("a"), taint("b")], pod(1_000, 0));
        assert!(close(score(&only("tainttoleration"), &s), 100.0 / 3.0));
    }

    #[test]
    fn preferred_affinity_scores_the_matched_share_of_the_weights() {
        let term = |value: &str| NodeSelectorTerm {
            match_expressions: vec![NodeSelectorRequirement {
                key: "zone".into(),
                operator: NodeSelectorOperator::In,
                values: vec![value.into()],
            }],
            match_fields: vec![],
        };
        let mut p = pod(1_000, 0);
        p.preferred_node_terms = vec![(30, term("a")), (70, term("b"))];
        let s = state(
            |n| {
                n.labels.insert("zone".into(), "a".into());
            },
            p,
        );
        assert!(close(score(&only("nodeaffinity"), &s), 30.0));
    }
}
