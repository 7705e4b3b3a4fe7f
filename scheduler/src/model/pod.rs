//! A pod as the scheduler sees it.

use std::collections::BTreeMap;

use super::resources::Resources;
use super::selector::{NodeSelectorTerm, Toleration};
use super::{ObjectKey, TimeMs};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pod {
    pub key: ObjectKey,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub scheduler_name: String,
    pub priority_class_name: Option<String>,
    /// `spec.priority` as written; the resolved value is computed with the PriorityClasses.
    pub priority: Option<i32>,
    pub preemption_policy: Option<PreemptionPolicy>,
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
    /// Required node affinity terms (ORed); empty means no requirement.
    pub required_node_terms: Vec<NodeSelectorTerm>,
    /// Preferred node affinity terms with their weights (1..=100).
    pub preferred_node_terms: Vec<(i32, NodeSelectorTerm)>,
    /// max(sum of containers, each init container), per resource.
    pub requests: Resources,
    pub node_name: Option<String>,
    pub phase: PodPhase,
    /// The PodGroup this pod belongs to (annotation `scheduling.k8s.io/group-name`).
    pub group: Option<String>,
    /// The task (role) inside its job: `volcano.sh/task-spec`, else derived from the name.
    pub task_role: Option<String>,
    /// Order of creation (document order in a scenario; creationTimestamp in Kubernetes).
    pub creation_index: u64,
    /// How long the pod runs once started, in the simulator (`phalanx.dev/sim-duration`).
    pub sim_duration_ms: Option<TimeMs>,
    /// `metadata.deletionTimestamp` is set: the pod is going away (evicted, deleted) but
    /// holds its node's resources until it is gone.
    pub terminating: bool,
    /// `spec.terminationGracePeriodSeconds`: how long a deleted pod takes to go away. The
    /// simulator deletes at once when it is unset.
    pub termination_grace_ms: Option<TimeMs>,
}

impl Pod {
    pub fn new(key: ObjectKey, requests: Resources) -> Self {
        Self {
            key,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            scheduler_name: super::DEFAULT_SCHEDULER_NAME.to_string(),
            priority_class_name: None,
            priority: None,
            preemption_policy: None,
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            required_node_terms: Vec::new(),
            preferred_node_terms: Vec::new(),
            requests,
            node_name: None,
            phase: PodPhase::Pending,
            group: None,
            task_role: None,
            creation_index: 0,
            sim_duration_ms: None,
            terminating: false,
            termination_grace_ms: None,
        }
    }

    /// True once the pod has ended and holds no resources.
    pub fn is_terminated(&self) -> bool {
        matches!(self.phase, PodPhase::Succeeded | PodPhase::Failed)
    }

    /// Holds resources on a node: assigned and not terminated.
    pub fn occupies_node(&self) -> bool {
        self.node_name.is_some() && !self.is_terminated()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PodPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl PodPhase {
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "Pending" => Self::Pending,
            "Running" => Self::Running,
            "Succeeded" => Self::Succeeded,
            "Failed" => Self::Failed,
            "Unknown" => Self::Unknown,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PreemptionPolicy {
    PreemptLowerPriority,
    Never,
}

impl PreemptionPolicy {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "PreemptLowerPriority" => Some(Self::PreemptLowerPriority),
            "Never" => Some(Self::Never),
            _ => None,
        }
    }
}
