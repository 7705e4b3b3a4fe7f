//! k8s-openapi objects into the model. These functions are the single conversion the
//! scenario loader and (later) the real-cluster backend both use, so they take the
//! k8s-openapi types and report problems as a [`FieldError`] with the field path.

mod node;
mod pod;
mod priority_class;
mod selector;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

pub use node::node_from_k8s;
pub use pod::{
    UNHONOURED_CONSTRAINT, parse_sim_duration_ms, pod_from_k8s, pod_requests_from_k8s,
    unhonoured_constraints,
};
pub use priority_class::priority_class_from_k8s;
pub use selector::{node_selector_term_from_k8s, toleration_from_k8s};

use super::error::FieldError;
use crate::model::resources::unit_of;
use crate::model::{ResourceName, Resources, parse_quantity};

/// A Kubernetes `ResourceList`.
pub type ResourceList = BTreeMap<String, Quantity>;

/// Parses a resource list found at `path`; zero amounts are dropped (requests, capacity).
pub fn resources_from_k8s(list: &ResourceList, path: &str) -> Result<Resources, FieldError> {
    Resources::parse_list(list.iter().map(|(k, v)| (k.as_str(), v.0.as_str())))
        .map_err(|(name, e)| FieldError::new(format!("{path}.{name}"), e.to_string()))
}

/// Parses a resource list that is a limit: a listed zero stays listed (`gpu: 0` means none,
/// not unlimited).
pub fn limits_from_k8s(list: &ResourceList, path: &str) -> Result<Resources, FieldError> {
    let mut out = Resources::new();
    for (name, text) in list {
        let amount = parse_quantity(&text.0, unit_of(name))
            .map_err(|e| FieldError::new(format!("{path}.{name}"), e.to_string()))?;
        out.set_listed(&ResourceName::new(name), amount);
    }
    Ok(out)
}

/// The name of a metadata object, which Kubernetes requires.
pub(crate) fn required_name(name: Option<&String>) -> Result<String, FieldError> {
    match name.map(|n| n.trim()) {
        Some(n) if !n.is_empty() => Ok(n.to_string()),
        _ => Err(FieldError::missing("metadata.name")),
    }
}
