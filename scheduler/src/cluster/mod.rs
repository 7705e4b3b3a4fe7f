//! The seam between the scheduler and a cluster. The scheduler reads a [`ClusterSnapshot`]
//! (a watch cache's view) and performs its plan through [`Cluster`]: evictions, binds,
//! PodGroup status writes and Events. [`sim::SimCluster`] implements it in memory for
//! `phalanx simulate`, tests and benchmarks; the Kubernetes backend implements the same
//! trait over the API server.

pub mod conformance;
pub mod kube;
pub mod sim;

use std::sync::Arc;

use thiserror::Error;

use crate::framework::Event;
use crate::model::{Node, ObjectKey, Pod, PodGroup, PodGroupStatus, PriorityClass, Queue, TimeMs};

/// Everything one cycle reads, as of one moment.
#[derive(Clone, Debug, Default)]
pub struct ClusterSnapshot {
    pub now_ms: TimeMs,
    /// Shared with the cluster's cache: a snapshot costs a reference count per object.
    pub nodes: Vec<Arc<Node>>,
    pub pods: Vec<Arc<Pod>>,
    pub pod_groups: Vec<Arc<PodGroup>>,
    pub queues: Vec<Queue>,
    pub priority_classes: Vec<PriorityClass>,
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ClusterError {
    #[error("{kind} {key} not found")]
    NotFound { kind: &'static str, key: String },
    #[error("pod {pod} is already bound to node {bound_to}; refusing to bind it to {requested}")]
    AlreadyBound {
        pod: String,
        bound_to: String,
        requested: String,
    },
    #[error("the cluster refused the request: {0}")]
    Refused(String),
}

/// Operations a scheduler performs on a cluster. Binding is idempotent: binding a pod to
/// the node it is already bound to succeeds.
pub trait Cluster {
    fn snapshot(&self) -> ClusterSnapshot;
    fn bind(&mut self, pod: &ObjectKey, node: &str) -> Result<(), ClusterError>;
    fn update_pod_group_status(
        &mut self,
        key: &ObjectKey,
        status: &PodGroupStatus,
    ) -> Result<(), ClusterError>;
    fn record_event(&mut self, event: &Event) -> Result<(), ClusterError>;
    /// Evicts a pod for preempt or reclaim: in Kubernetes the Eviction API (which honours
    /// PodDisruptionBudgets and may refuse with `Refused`); the simulator deletes the pod at
    /// once and remembers it as evicted. Evicting a pod that is already gone is `NotFound`.
    fn evict(&mut self, pod: &ObjectKey, reason: &str) -> Result<(), ClusterError>;
}
