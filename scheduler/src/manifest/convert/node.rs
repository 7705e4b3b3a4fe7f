//! `v1 Node` into [`Node`].

use k8s_openapi::api::core::v1 as k8s;

use super::selector::taint_effect;
use super::{FieldError, limits_from_k8s, required_name, resources_from_k8s};
use crate::model::resources::PODS;
use crate::model::{Node, ResourceName, Taint};

/// Converts a node: labels, taints, `spec.unschedulable`, and `status.allocatable` (or
/// `status.capacity` when allocatable is absent) with its `pods` entry split out into
/// `max_pods` (110 when not listed).
pub fn node_from_k8s(node: &k8s::Node) -> Result<Node, FieldError> {
    let name = required_name(node.metadata.name.as_ref())?;
    let status = node.status.as_ref();
    let (list, path) = match (
        status.and_then(|s| s.allocatable.as_ref()),
        status.and_then(|s| s.capacity.as_ref()),
    ) {
        (Some(list), _) => (Some(list), "status.allocatable"),
        (None, Some(list)) => (Some(list), "status.capacity"),
        (None, None) => (None, "status.allocatable"),
    };
    let mut allocatable = match list {
        Some(list) => resources_from_k8s(list, path)?,
        None => Default::default(),
    };
    let mut max_pods = Node::DEFAULT_MAX_PODS;
    if let Some(list) = list {
        let pods_only: super::ResourceList = list
            .iter()
            .filter(|(k, _)| *k == PODS)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !pods_only.is_empty() {
            max_pods = limits_from_k8s(&pods_only, path)?.get(PODS);
        }
        allocatable.set(&ResourceName::new(PODS), 0);
    }
    let spec = node.spec.as_ref();
    let mut taints = Vec::new();
    for (i, t) in spec
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        let path = format!("spec.taints[{i}]");
        if t.key.is_empty() {
            return Err(FieldError::missing(format!("{path}.key")));
        }
        let effect = taint_effect(&t.effect, &format!("{path}.effect"))?;
        taints.push(Taint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect,
        });
    }
    Ok(Node {
        name,
        labels: node.metadata.labels.clone().unwrap_or_default(),
        taints,
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        allocatable,
        max_pods,
    })
}
