//! JSON schemas of the Kubernetes types the Volcano objects embed (`ResourceList`,
//! `LabelSelector`), written as the Kubernetes API publishes them, so that the generated CRDs
//! validate them as Kubernetes does without the schema of all of k8s-openapi.
//!
//! A field that uses one of these (`#[schemars(schema_with = ...)]`) also carries
//! `#[serde(default)]`: schemars cannot see the `Option` through `schema_with` and would mark
//! it required; for an `Option` serde's behaviour is the same either way.

use schemars::{Schema, SchemaGenerator, json_schema};

/// The pattern Kubernetes publishes for a `Quantity` written as a string (`500m`, `4Gi`, `1e3`).
const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// A `Quantity`: an integer or a string such as `500m` (`x-kubernetes-int-or-string`).
pub fn quantity_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": true,
    })
}

/// A `ResourceList`: resource name to quantity (`{cpu: 4, nvidia.com/gpu: 2}`).
pub fn resource_list_schema(generator: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": quantity_schema(generator),
    })
}

/// A `metav1.LabelSelector`.
pub fn label_selector_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "properties": {
            "matchExpressions": {
                "description": "Label selector requirements; all of them must match.",
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "key": {"description": "The label key.", "type": "string"},
                        "operator": {"description": "In, NotIn, Exists or DoesNotExist.", "type": "string"},
                        "values": {
                            "description": "The values for In and NotIn; empty for Exists and DoesNotExist.",
                            "type": "array",
                            "items": {"type": "string"},
                            "x-kubernetes-list-type": "atomic",
                        },
                    },
                    "required": ["key", "operator"],
                },
                "x-kubernetes-list-type": "atomic",
            },
            "matchLabels": {
                "description": "Labels that must match exactly.",
                "type": "object",
                "additionalProperties": {"type": "string"},
            },
        },
        "x-kubernetes-map-type": "atomic",
    })
}
