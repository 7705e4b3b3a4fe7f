//! `scheduling.volcano.sh/v1beta1 Queue`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

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

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueSpec {
    pub weight: Option<i32>,
    pub capability: Option<ResourceList>,
    pub reclaimable: Option<bool>,
    pub extend_clusters: Option<Vec<Cluster>>,
    pub guarantee: Option<Guarantee>,
    pub affinity: Option<QueueAffinity>,
    #[serde(rename = "type")]
    pub queue_type: Option<String>,
    pub parent: Option<String>,
    pub deserved: Option<ResourceList>,
    pub priority: Option<i32>,
    pub dequeue_strategy: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct Cluster {
    pub name: Option<String>,
    pub weight: Option<i32>,
    pub capacity: Option<ResourceList>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct Guarantee {
    pub resource: Option<ResourceList>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueAffinity {
    pub node_group_affinity: Option<NodeGroupAffinity>,
    pub node_group_anti_affinity: Option<NodeGroupAffinity>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeGroupAffinity {
    pub required_during_scheduling_ignored_during_execution: Option<Vec<String>>,
    pub preferred_during_scheduling_ignored_during_execution: Option<Vec<String>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct VolcanoQueueStatus {
    pub state: Option<String>,
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
    if spec
        .parent
        .as_deref()
        .is_some_and(|p| !p.is_empty() && p != "root")
    {
        warnings.push("spec.parent is read but phalanx has no hierarchical queues; the queue is a top-level one".into());
    }
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
