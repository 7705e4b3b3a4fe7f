//! `predicates`: Kubernetes' node filters. A node is refused when it is cordoned
//! (`spec.unschedulable`, unless the pod tolerates `node.kubernetes.io/unschedulable`),
//! misses a `nodeSelector` label, matches none of the required node-affinity terms, or has a
//! NoSchedule/NoExecute taint the pod does not tolerate. Free resources and pod slots are
//! not a predicate: the framework checks them always (`node_picker::capacity_fit`), and
//! preempt/reclaim check them against what the node will have once victims are gone.

use crate::framework::{NodeId, Plugin, SessionState, TaskId, Unfit};
use crate::model::selector::{first_untolerated_taint, node_selector_matches};
use crate::model::{Taint, TaintEffect};

#[derive(Debug)]
pub struct PredicatesPlugin;

const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

impl Plugin for PredicatesPlugin {
    fn name(&self) -> &'static str {
        "predicates"
    }

    fn predicate(&self, state: &SessionState, task: TaskId, node: NodeId) -> Result<(), Unfit> {
        let pod = &state.tasks[task].pod;
        let n = &state.nodes[node].node;
        if n.unschedulable {
            let cordon = Taint {
                key: UNSCHEDULABLE_TAINT.into(),
                value: String::new(),
                effect: TaintEffect::NoSchedule,
            };
            if !pod.tolerations.iter().any(|t| t.tolerates(&cordon)) {
                return Err(Unfit::Unschedulable);
            }
        }
        if !node_selector_matches(&pod.node_selector, n) {
            return Err(Unfit::NodeSelectorMismatch);
        }
        if !pod.required_node_terms.is_empty()
            && !pod.required_node_terms.iter().any(|term| term.matches(n))
        {
            return Err(Unfit::NodeAffinityMismatch);
        }
        if let Some(taint) = first_untolerated_taint(&n.taints, &pod.tolerations) {
            return Err(Unfit::UntoleratedTaint {
                key: taint.key.clone(),
                effect: taint.effect.as_str(),
            });
        }
        Ok(())
    }
}
