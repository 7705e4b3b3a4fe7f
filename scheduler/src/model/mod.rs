//! The scheduler's own view of Kubernetes and Volcano objects: exact, validated, and free of
//! wire-format detail. Both backends (`cluster::sim`, and later `cluster::kube`) and the
//! manifest loader produce these; the framework, plugins and actions read only these.

pub mod node;
pub mod pod;
pub mod pod_group;
pub mod priority_class;
pub mod quantity;
pub mod queue;
pub mod queue_tree;
pub mod resources;
pub mod selector;

pub use node::{Node, Taint, TaintEffect};
pub use pod::{Pod, PodPhase, PreemptionPolicy, SpecFacts, SpecMemo};
pub use pod_group::{PodGroup, PodGroupCondition, PodGroupPhase, PodGroupStatus};
pub use priority_class::PriorityClass;
pub use quantity::{QuantityError, QuantityUnit, parse_quantity};
pub use queue::{Queue, QueueState};
pub use resources::{ResourceName, Resources};
pub use selector::{
    NodeSelectorOperator, NodeSelectorRequirement, NodeSelectorTerm, Toleration, TolerationOperator,
};

use std::fmt;

/// `namespace/name` of a namespaced object.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// Parses `namespace/name`; a bare `name` is in `default`.
    pub fn parse(text: &str) -> Self {
        match text.split_once('/') {
            Some((ns, name)) => Self::new(ns, name),
            None => Self::new("default", text),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// Simulated or wall-clock time in milliseconds since the start of a run.
pub type TimeMs = u64;

/// The annotation that ties a pod to its PodGroup (same as Volcano's).
pub const GROUP_NAME_ANNOTATION: &str = "scheduling.k8s.io/group-name";
/// Volcano's annotation naming the task (role) a pod belongs to inside its job.
pub const TASK_SPEC_ANNOTATION: &str = "volcano.sh/task-spec";
/// phalanx's annotation for how long a pod runs in the simulator (`90s`, `10m`).
pub const SIM_DURATION_ANNOTATION: &str = "phalanx.dev/sim-duration";
/// Volcano's pod annotation: `"false"` protects the pod from preempt and reclaim.
pub const PREEMPTABLE_ANNOTATION: &str = "volcano.sh/preemptable";
/// PodGroup annotation: how long a gang may wait to be placed (`10m`) before it is marked
/// `Unschedulable` with reason `Timeout` (docs/configuration.md).
pub const SCHEDULE_TIMEOUT_ANNOTATION: &str = "phalanx.dev/schedule-timeout";
/// PodGroup annotation: what happens once the schedule timeout has passed: `retry` (the
/// default: keep trying) or `stop` (stop trying and release its admission).
pub const TIMEOUT_ACTION_ANNOTATION: &str = "phalanx.dev/timeout-action";
/// PodGroup annotation for the simulator: when the PodGroup was created, as a duration since
/// the start of the run (`30s`). Without it a PodGroup is created at time 0. In Kubernetes
/// `metadata.creationTimestamp` plays this part.
pub const SIM_CREATED_AT_ANNOTATION: &str = "phalanx.dev/sim-created-at";
/// The default scheduler name phalanx places pods for.
pub const DEFAULT_SCHEDULER_NAME: &str = "phalanx";
/// The queue that exists unless a workload declares one of the same name.
pub const DEFAULT_QUEUE: &str = "default";
