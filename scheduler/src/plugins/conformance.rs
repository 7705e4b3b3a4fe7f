//! `conformance`: pods that keep the cluster itself running are never chosen as victims by
//! preempt or reclaim: anything in `kube-system`, and pods of the system-critical priority
//! classes.

use crate::framework::{Plugin, SessionState, TaskId};

#[derive(Debug)]
pub struct ConformancePlugin;

const CRITICAL_CLASSES: &[&str] = &["system-cluster-critical", "system-node-critical"];

impl Plugin for ConformancePlugin {
    fn name(&self) -> &'static str {
        "conformance"
    }

    fn victim_allowed(&self, state: &SessionState, task: TaskId) -> Option<bool> {
        let pod = &state.tasks[task].pod;
        let critical = pod.key.namespace == "kube-system"
            || pod
                .priority_class_name
                .as_deref()
                .is_some_and(|c| CRITICAL_CLASSES.contains(&c));
        Some(!critical)
    }
}
