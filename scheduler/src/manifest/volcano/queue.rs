//! `scheduling.volcano.sh/v1beta1 Queue`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::Deserialize;

use super::schema::resource_list_schema;
use crate::manifest::convert::{ResourceList, limits_from_k8s, required_name, resources_from_k8s};
use crate::manifest::error::FieldError;
use crate::model::{Queue, QueueState, Resources};

#[derive(Clone, Debug, Default, Deserialize)]
pub struct VolcanoQueue {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: Option<QueueSpec>,
    pub status: Option<VolcanoQueueStatus>,
}

// Also the `spec` schema of the Queue CRD (`phalanx crds`): its doc comments are the
// descriptions `kubectl explain` shows.
/// The queue's share of the cluster: weight, capability, deserved share and guarantee.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueSpec {
    /// The queue's share of the cluster relative to the other queues; 1 when absent or 0.
    pub weight: Option<i32>,
    /// The most the queue's PodGroups may use together.
    #[schemars(schema_with = "resource_list_schema")]
    #[serde(default)]
    pub capability: Option<ResourceList>,
    /// Whether other queues may reclaim what this queue uses beyond its deserved share.
    pub reclaimable: Option<bool>,
    /// Clusters the queue's jobs may be dispatched to (read, not acted on).
    pub extend_clusters: Option<Vec<Cluster>>,
    /// Resources reserved for the queue.
    pub guarantee: Option<Guarantee>,
    /// Node groups the queue's pods are placed on or kept off (read, not acted on).
    pub affinity: Option<QueueAffinity>,
    /// The queue's type.
    #[serde(rename = "type")]
    pub queue_type: Option<String>,
    /// The parent queue in a hierarchy (`root` when absent); read by the `capacity` plugin with `enableHierarchy`.
    pub parent: Option<String>,
    /// The resources the queue is entitled to; what it uses beyond them can be reclaimed.
    #[schemars(schema_with = "resource_list_schema")]
    #[serde(default)]
    pub deserved: Option<ResourceList>,
    /// Queues of higher priority are served first and reclaimed from last.
    pub priority: Option<i32>,
    /// How PodGroups leave the queue (read, not acted on).
    pub dequeue_strategy: Option<String>,
}

/// One entry of `spec.extendClusters`.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
pub struct Cluster {
    /// The cluster's name.
    pub name: Option<String>,
    /// The cluster's weight.
    pub weight: Option<i32>,
    /// The cluster's capacity.
    #[schemars(schema_with = "resource_list_schema")]
    #[serde(default)]
    pub capacity: Option<ResourceList>,
}

/// `spec.guarantee`.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
pub struct Guarantee {
    /// The resources reserved for the queue.
    #[schemars(schema_with = "resource_list_schema")]
    #[serde(default)]
    pub resource: Option<ResourceList>,
}

/// `spec.affinity`.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueAffinity {
    /// Node groups the queue's pods should be placed on.
    pub node_group_affinity: Option<NodeGroupAffinity>,
    /// Node groups the queue's pods should be kept off.
    pub node_group_anti_affinity: Option<NodeGroupAffinity>,
}

/// Node-group names, required or preferred.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeGroupAffinity {
    /// Node groups that must match.
    pub required_during_scheduling_ignored_during_execution: Option<Vec<String>>,
    /// Node groups that should match.
    pub preferred_during_scheduling_ignored_during_execution: Option<Vec<String>>,
}

// Also the `status` schema of the Queue CRD.
/// The queue's state and the count of its PodGroups in each phase.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
pub struct VolcanoQueueStatus {
    /// Open, Closed or Closing; Open when absent.
    pub state: Option<String>,
    /// PodGroups of the queue in phase Unknown.
    pub unknown: Option<i32>,
    /// PodGroups of the queue in phase Pending.
    pub pending: Option<i32>,
    /// PodGroups of the queue in phase Running.
    pub running: Option<i32>,
    /// PodGroups of the queue in phase Inqueue.
    pub inqueue: Option<i32>,
    /// PodGroups of the queue in phase Completed.
    pub completed: Option<i32>,
    /// Nodes and resources held for the queue (read, not acted on).
    pub reservation: Option<Reservation>,
    /// The resources the queue's pods hold.
    #[schemars(schema_with = "resource_list_schema")]
    #[serde(default)]
    pub allocated: Option<ResourceList>,
}

/// `status.reservation`.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
pub struct Reservation {
    /// Nodes held for the queue.
    pub nodes: Option<Vec<String>>,
    /// The idle resources of those nodes.
    #[schemars(schema_with = "resource_list_schema")]
    #[serde(default)]
    pub resource: Option<ResourceList>,
}

const STATES: &[&str] = &["Open", "Closed", "Closing"];

/// Converts a Queue; `warnings` gets what is read but not acted on.
///
/// Weight: absent or 0 means 1. Volcano's admission webhook patches a zero weight to 1 (the
/// Go field cannot tell 0 from absent), so an explicit `weight: 0` is clamped to 1 here too,
/// with a warning; a negative weight is an error. As Volcano's webhook does, a queue whose
/// guarantee exceeds its deserved share or its capability (or deserved exceeds capability)
/// is refused.
pub fn queue_from_volcano(
    q: &VolcanoQueue,
    warnings: &mut Vec<String>,
) -> Result<Queue, FieldError> {
    let mut out = Queue::new(required_name(q.metadata.name.as_ref())?);
    let spec = q.spec.clone().unwrap_or_default();
    out.weight = match spec.weight {
        None => 1,
        Some(0) => {
            warnings.push("spec.weight 0 is read as 1, as Volcano's admission webhook does".into());
            1
        }
        Some(w) if w < 0 => {
            return Err(FieldError::new(
                "spec.weight",
                format!("{w} is negative; weights start at 1"),
            ));
        }
        Some(w) => w as u32,
    };
    out.capability = spec
        .capability
        .as_ref()
        .map(|l| limits_from_k8s(l, "spec.capability"))
        .transpose()?;
    out.deserved = spec
        .deserved
        .as_ref()
        .map(|l| limits_from_k8s(l, "spec.deserved"))
        .transpose()?;
    if let Some(list) = spec.guarantee.as_ref().and_then(|g| g.resource.as_ref()) {
        out.guarantee = resources_from_k8s(list, "spec.guarantee.resource")?;
    }
    out.reclaimable = spec.reclaimable.unwrap_or(true);
    out.priority = spec.priority.unwrap_or(0);
    out.state = match q.status.as_ref().and_then(|s| s.state.as_deref()) {
        None | Some("") => QueueState::Open,
        Some(text) => QueueState::parse(text)
            .ok_or_else(|| FieldError::not_one_of("status.state", text, "queue state", STATES))?,
    };
    check_bounds(&out)?;
    out.parent = spec
        .parent
        .filter(|p| !p.is_empty() && p != crate::model::queue::ROOT_QUEUE);
    if spec.affinity.is_some() || spec.extend_clusters.is_some() {
        warnings.push(
            "spec.affinity / spec.extendClusters are read but phalanx does not act on them".into(),
        );
    }
    Ok(out)
}

/// guarantee ≤ deserved ≤ capability, on each resource the larger one lists.
fn check_bounds(q: &Queue) -> Result<(), FieldError> {
    let exceeds = |small: &Resources, large: &Resources| {
        large
            .iter()
            .find(|(name, cap)| small.get(name.as_str()) > *cap)
            .map(|(n, _)| n.to_string())
    };
    if let Some(cap) = &q.capability {
        if let Some(name) = exceeds(&q.guarantee, cap) {
            return Err(FieldError::new(
                format!("spec.guarantee.resource.{name}"),
                format!("the guarantee is more than the capability ({name})"),
            ));
        }
        if let Some(name) = q.deserved.as_ref().and_then(|d| exceeds(d, cap)) {
            return Err(FieldError::new(
                format!("spec.deserved.{name}"),
                format!("the deserved share is more than the capability ({name})"),
            ));
        }
    }
    if let Some(deserved) = &q.deserved
        && let Some(name) = exceeds(&q.guarantee, deserved)
    {
        return Err(FieldError::new(
            format!("spec.guarantee.resource.{name}"),
            format!("the guarantee is more than the deserved share ({name})"),
        ));
    }
    Ok(())
}
