//! A pod as the scheduler sees it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::OnceLock;

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
    /// What a session derives from the fields above, kept with this pod object: every
    /// round's view is built from the same `Arc<Pod>`s, and hashing each pod's spec again
    /// every round was 6 % of a sustained run. See [`SpecMemo`] for when it is reset.
    pub spec_memo: SpecMemo,
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
            spec_memo: SpecMemo::default(),
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

/// Facts a session derives from a pod's spec alone (see [`SpecMemo`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecFacts {
    /// Hash of everything a predicate or score may look at on the pod's side.
    pub placement_key: u64,
    /// `volcano.sh/preemptable` (annotation, else label) allows eviction; unset allows.
    pub preemptable: bool,
}

/// [`SpecFacts`] computed on first use and kept. The fields they read (requests,
/// selectors, tolerations, affinity, annotations, labels) are set only when a pod is made
/// (manifest, watch event, generator); what changes later in place, through
/// `Arc::make_mut` on a pod no one else holds, is its node, phase and termination, which
/// the facts do not read. A clone starts with an empty memo, since a clone is usually made
/// to be changed; the simulated cluster, whose copies change only those fields, gives its
/// copies the facts back ([`SpecMemo::keep`]). It takes no part in equality.
#[derive(Default)]
pub struct SpecMemo(OnceLock<SpecFacts>);

impl SpecMemo {
    pub fn get_or_init(&self, compute: impl FnOnce() -> SpecFacts) -> SpecFacts {
        *self.0.get_or_init(compute)
    }

    /// The facts, if they were computed.
    pub fn get(&self) -> Option<SpecFacts> {
        self.0.get().copied()
    }

    /// Gives an empty memo the facts of the pod it was cloned from, when the caller
    /// changes nothing they read (a simulated kubelet's node, phase or termination).
    pub fn keep(&self, facts: SpecFacts) {
        // Already set: the facts are the same ones.
        let _ = self.0.set(facts);
    }
}

impl Clone for SpecMemo {
    /// Empty: the clone is usually made to be changed.
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for SpecMemo {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for SpecMemo {}

impl fmt::Debug for SpecMemo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SpecMemo")
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

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(key: u64) -> SpecFacts {
        SpecFacts {
            placement_key: key,
            preemptable: true,
        }
    }

    #[test]
    fn a_pods_spec_memo_is_computed_once_and_a_clone_starts_empty() {
        let pod = Pod::new(ObjectKey::new("ns", "p"), Resources::new());
        let mut computed = 0;
        let mut compute = |key| {
            computed += 1;
            facts(key)
        };
        assert_eq!(pod.spec_memo.get_or_init(|| compute(1)).placement_key, 1);
        assert_eq!(pod.spec_memo.get_or_init(|| compute(2)).placement_key, 1);
        // A clone is made to be changed: it computes its own facts.
        let mut changed = pod.clone();
        changed.node_selector.insert("zone".into(), "a".into());
        assert_eq!(
            changed.spec_memo.get_or_init(|| compute(3)).placement_key,
            3
        );
        assert_eq!(computed, 2);
        // The memo takes no part in equality.
        assert_eq!(pod, pod.clone());
    }
}
