//! `binpack`: prefer the node that the task fills most, to keep whole nodes free for large
//! gangs. Arguments as Volcano's: `binpack.weight` (1), `binpack.cpu` (1), `binpack.memory`
//! (1), `binpack.resources` (a comma list of extended resources) and
//! `binpack.resources.<name>` (their weights, 1 by default).
//!
//! score = Σ_r weight_r · (used_r + request_r) / allocatable_r  /  Σ_r weight_r · 100 · binpack.weight
//! over the resources the task requests; a node the task would overfill scores 0.

use crate::framework::conf::{Arguments, argument};
use crate::framework::{NodeId, Plugin, SessionState, TaskId};
use crate::model::resources::{CPU, MEMORY};

#[derive(Debug)]
pub struct BinpackPlugin {
    weight: f64,
    /// (resource, weight), weights > 0 only.
    resources: Vec<(String, f64)>,
}

impl BinpackPlugin {
    pub fn new(args: &Arguments) -> Self {
        let mut resources = vec![
            (CPU.to_string(), argument(args, "binpack.cpu", 1.0)),
            (MEMORY.to_string(), argument(args, "binpack.memory", 1.0)),
        ];
        if let Some(list) = args.get("binpack.resources") {
            for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                let w = argument(args, &format!("binpack.resources.{name}"), 1.0);
                resources.push((name.to_string(), w));
            }
        }
        resources.retain(|(_, w)| *w > 0.0);
        Self {
            weight: argument(args, "binpack.weight", 1.0),
            resources,
        }
    }
}

impl Plugin for BinpackPlugin {
    fn name(&self) -> &'static str {
        "binpack"
    }

    fn node_score(&self, state: &SessionState, task: TaskId, node: NodeId) -> f64 {
        if self.weight == 0.0 {
            return 0.0;
        }
        let req = &state.tasks[task].pod.requests;
        let n = &state.nodes[node];
        let mut score = 0.0;
        let mut weights = 0.0;
        for (name, w) in &self.resources {
            let request = req.get(name);
            if request == 0 {
                continue;
            }
            let allocatable = n.node.allocatable.get(name);
            let used_after = n.used.get(name).saturating_add(request);
            if allocatable <= 0 || used_after > allocatable {
                return 0.0;
            }
            score += w * used_after as f64 / allocatable as f64;
            weights += w;
        }
        if weights == 0.0 {
            return 0.0;
        }
        score / weights * 100.0 * self.weight
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::SchedulerConf;
    use crate::framework::testing::{Cluster, args};
    use crate::model::resources::GPU;

    const GI: i64 = 1 << 30;

    /// Node `n1` (8 CPUs, 16Gi, 8 GPUs) running 4 CPUs and 6 GPUs; pending task `t` asks
    /// for `request`.
    fn state(request: &[(&str, i64)]) -> SessionState {
        Cluster::new()
            .node("n1", &[(CPU, 8_000), (MEMORY, 16 * GI), (GPU, 8)])
            .running_pod("busy", None, "n1", &[(CPU, 4_000), (GPU, 6)])
            .pod("t", None, request)
            .session(&SchedulerConf::from_names(&["allocate"], &[&["binpack"]]))
            .state
    }

    fn task(state: &SessionState) -> TaskId {
        state
            .tasks
            .iter()
            .position(|t| t.pod.key.name == "t")
            .expect("task t exists")
    }

    #[test]
    fn score_averages_the_filled_fraction_of_each_requested_resource() {
        // cpu (4+1)/8 = 0.625, gpu (6+1)/8 = 0.875; memory is not requested and not counted.
        let s = state(&[(CPU, 1_000), (GPU, 1)]);
        let plugin = BinpackPlugin::new(&args(&[("binpack.resources", "nvidia.com/gpu")]));
        let score = plugin.node_score(&s, task(&s), 0);
        assert!((score - 75.0).abs() < 1e-9, "{score}");
    }

    #[test]
    fn resource_and_plugin_weights_scale_the_score() {
        // (1 × 0.625 + 2 × 0.875) / 3 × 100 × 10
        let s = state(&[(CPU, 1_000), (GPU, 1)]);
        let plugin = BinpackPlugin::new(&args(&[
            ("binpack.weight", "10"),
            ("binpack.resources", "nvidia.com/gpu"),
            ("binpack.resources.nvidia.com/gpu", "2"),
        ]));
        let score = plugin.node_score(&s, task(&s), 0);
        assert!((score - 2375.0 / 3.0).abs() < 1e-9, "{score}");
    }

    #[test]
    fn an_extended_resource_not_listed_in_binpack_resources_is_not_scored() {
        // Only cpu counts: 5/8.
        let s = state(&[(CPU, 1_000), (GPU, 1)]);
        let plugin = BinpackPlugin::new(&Arguments::new());
        let score = plugin.node_score(&s, task(&s), 0);
        assert!((score - 62.5).abs() < 1e-9, "{score}");
    }

    #[test]
    fn a_node_the_task_would_overfill_scores_zero() {
        let s = state(&[(CPU, 1_000), (GPU, 3)]);
        let plugin = BinpackPlugin::new(&args(&[("binpack.resources", "nvidia.com/gpu")]));
        assert_eq!(plugin.node_score(&s, task(&s), 0), 0.0);
    }

    #[test]
    fn weight_zero_turns_the_plugin_off() {
        let s = state(&[(CPU, 1_000), (GPU, 1)]);
        let plugin = BinpackPlugin::new(&args(&[("binpack.weight", "0")]));
        assert_eq!(plugin.node_score(&s, task(&s), 0), 0.0);
    }
}
