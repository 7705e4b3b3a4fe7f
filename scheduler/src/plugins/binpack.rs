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
