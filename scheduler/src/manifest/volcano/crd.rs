//! The CustomResourceDefinitions of Volcano's PodGroup and Queue (`scheduling.volcano.sh/
//! v1beta1`), generated from the same serde types that read scenario files, so that what
//! phalanx reads and what the API server accepts cannot drift apart.
//!
//! Names, scope, short names, subresources and printer columns are Volcano's, so the objects
//! are interchangeable: a cluster with Volcano's CRDs accepts the objects a cluster with ours
//! does, and the other way round. As in Volcano, only the Queue has a `status` subresource:
//! Volcano writes a PodGroup's status with a plain update of the whole object, which a
//! `status` subresource would silently drop. `phalanx crds` prints them;
//! `deploy/crds/` holds them, checked by `scheduler/tests/crds.rs`.
//!
//! The schema of `spec` and `status` comes from `schemars`; [`structural`] turns it into a
//! Kubernetes structural schema (an `Option` is an optional property, not a `null` type).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, CustomResourceDefinitionNames,
    CustomResourceDefinitionSpec, CustomResourceDefinitionVersion, CustomResourceSubresourceStatus,
    CustomResourceSubresources, CustomResourceValidation, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

use super::pod_group::{PodGroupSpec, VolcanoPodGroupStatus};
use super::queue::{QueueSpec, VolcanoQueueStatus};

/// Volcano's API group of PodGroup and Queue.
pub const GROUP: &str = "scheduling.volcano.sh";
/// The version served (and stored).
pub const VERSION: &str = "v1beta1";

/// What `phalanx crds` could not produce.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error("the schema generated for {kind} is not a JSONSchemaProps: {source}")]
    Schema {
        kind: &'static str,
        source: serde_json::Error,
    },
    #[error("cannot write the {kind} CRD as YAML: {source}")]
    Yaml {
        kind: String,
        source: serde_saphyr::SerializeError,
    },
}

/// The PodGroup CRD: namespaced, short names `pg` and `podgroup-v1beta1`, Volcano's columns,
/// no `status` subresource (as Volcano's).
pub fn pod_group_crd() -> Result<CustomResourceDefinition, CrdError> {
    let columns = [
        column(".status.phase", "STATUS", "string"),
        column(".spec.minMember", "minMember", "integer"),
        column(".status.running", "RUNNINGS", "integer"),
        column(".metadata.creationTimestamp", "AGE", "date"),
        CustomResourceColumnDefinition {
            priority: Some(1),
            ..column(".spec.queue", "QUEUE", "string")
        },
    ];
    crd(
        Names {
            kind: "PodGroup",
            plural: "podgroups",
            singular: "podgroup",
            short_names: &["pg", "podgroup-v1beta1"],
            namespaced: true,
            status_subresource: false,
        },
        "A gang of pods that are placed together or not at all.",
        object_schema::<PodGroupSpec, VolcanoPodGroupStatus>(),
        &columns,
    )
}

/// The Queue CRD: cluster-scoped, short names `q` and `queue-v1beta1`, a `status` subresource.
pub fn queue_crd() -> Result<CustomResourceDefinition, CrdError> {
    crd(
        Names {
            kind: "Queue",
            plural: "queues",
            singular: "queue",
            short_names: &["q", "queue-v1beta1"],
            namespaced: false,
            status_subresource: true,
        },
        "A share of the cluster (weight, capability, guarantee) that PodGroups are admitted through.",
        object_schema::<QueueSpec, VolcanoQueueStatus>(),
        &[CustomResourceColumnDefinition {
            description: Some("The parent queue of this queue.".into()),
            ..column(".spec.parent", "PARENT", "string")
        }],
    )
}

/// The API group and version of Volcano's Job.
pub const JOB_GROUP: &str = "batch.volcano.sh";
pub const JOB_VERSION: &str = "v1alpha1";

/// The Job CRD (`batch.volcano.sh/v1alpha1`): namespaced, short names `vcjob` and `vj`, a
/// `status` subresource (the Job controller writes status; users write spec). Its schema
/// is written here rather than generated: pod templates and volumes are Kubernetes types
/// the API server validates when the pods are created, so they are kept as given
/// (`x-kubernetes-preserve-unknown-fields`), and everything else has its type.
pub fn job_crd() -> Result<CustomResourceDefinition, CrdError> {
    let mut crd = crd(
        Names {
            kind: "Job",
            plural: "jobs",
            singular: "job",
            short_names: &["vcjob", "vj"],
            namespaced: true,
            status_subresource: true,
        },
        "A batch job of tasks, each a set of identical pods, scheduled as one gang.",
        job_schema(),
        &[
            column(".status.state.phase", "STATUS", "string"),
            column(".status.minAvailable", "minAvailable", "integer"),
            column(".status.running", "RUNNINGS", "integer"),
            column(".metadata.creationTimestamp", "AGE", "date"),
        ],
    )?;
    crd.metadata.name = Some(format!("jobs.{JOB_GROUP}"));
    crd.spec.group = JOB_GROUP.into();
    crd.spec.versions[0].name = JOB_VERSION.into();
    Ok(crd)
}

fn job_schema() -> Value {
    let int = || json!({"type": "integer", "format": "int32"});
    let string = || json!({"type": "string"});
    let kept = || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    let policies = json!({"type": "array", "items": {"type": "object", "properties": {
        "action": string(), "event": string(),
        "events": {"type": "array", "items": string()},
        "exitCode": int(), "timeout": string(),
    }}});
    let task = json!({"type": "object", "properties": {
        "name": string(), "replicas": int(), "minAvailable": int(), "maxRetry": int(),
        "template": kept(), "policies": policies, "topologyPolicy": string(),
        "dependsOn": kept(), "partitionPolicy": kept(),
    }});
    let spec = json!({"type": "object", "properties": {
        "schedulerName": string(), "minAvailable": int(), "minSuccess": int(),
        "queue": string(), "maxRetry": int(), "ttlSecondsAfterFinished": int(),
        "priorityClassName": string(), "runningEstimate": string(),
        "volumes": {"type": "array", "items": kept()},
        "tasks": {"type": "array", "items": task},
        "policies": policies,
        "plugins": {"type": "object", "additionalProperties": {"type": "array", "items": string()}},
        "networkTopology": kept(),
    }});
    let status = json!({"type": "object", "properties": {
        "state": {"type": "object", "properties": {
            "phase": string(), "reason": string(), "message": string(),
            "lastTransitionTime": {"type": "string", "format": "date-time"},
        }},
        "minAvailable": int(), "pending": int(), "running": int(), "succeeded": int(),
        "failed": int(), "terminating": int(), "unknown": int(), "retryCount": int(),
        "version": int(), "runningDuration": string(),
        "taskStatusCount": kept(), "controlledResources": kept(),
        "conditions": {"type": "array", "items": kept()},
    }});
    json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string", "description": "The versioned schema of this object."},
            "kind": {"type": "string", "description": "The REST resource this object represents."},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    })
}

/// One CRD as a YAML document, with a header that says where it comes from.
pub fn crd_yaml(crd: &CustomResourceDefinition) -> Result<String, CrdError> {
    let kind = crd.spec.names.kind.clone();
    let body = serde_saphyr::to_string(crd).map_err(|source| CrdError::Yaml { kind, source })?;
    Ok(format!(
        "# Generated by `phalanx crds` from scheduler/src/manifest/volcano/; do not edit.\n\
         # Regenerate: see deploy/crds/README.md.\n{body}"
    ))
}

/// Both CRDs as one multi-document YAML stream (what `phalanx crds` prints).
pub fn all_crds_yaml() -> Result<String, CrdError> {
    Ok(format!(
        "{}---\n{}",
        crd_yaml(&pod_group_crd()?)?,
        crd_yaml(&queue_crd()?)?
    ))
}

struct Names {
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    short_names: &'static [&'static str],
    namespaced: bool,
    status_subresource: bool,
}

fn column(json_path: &str, name: &str, type_: &str) -> CustomResourceColumnDefinition {
    CustomResourceColumnDefinition {
        json_path: json_path.into(),
        name: name.into(),
        type_: type_.into(),
        ..Default::default()
    }
}

fn crd(
    names: Names,
    description: &str,
    mut schema: Value,
    columns: &[CustomResourceColumnDefinition],
) -> Result<CustomResourceDefinition, CrdError> {
    schema["description"] = Value::from(description);
    let schema: JSONSchemaProps =
        serde_json::from_value(schema).map_err(|source| CrdError::Schema {
            kind: names.kind,
            source,
        })?;
    Ok(CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(format!("{}.{GROUP}", names.plural)),
            ..Default::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: GROUP.into(),
            names: CustomResourceDefinitionNames {
                kind: names.kind.into(),
                list_kind: Some(format!("{}List", names.kind)),
                plural: names.plural.into(),
                singular: Some(names.singular.into()),
                short_names: Some(names.short_names.iter().map(|s| (*s).into()).collect()),
                ..Default::default()
            },
            scope: if names.namespaced {
                "Namespaced"
            } else {
                "Cluster"
            }
            .into(),
            versions: vec![CustomResourceDefinitionVersion {
                name: VERSION.into(),
                served: true,
                storage: true,
                schema: Some(CustomResourceValidation {
                    open_api_v3_schema: Some(schema),
                }),
                subresources: Some(CustomResourceSubresources {
                    status: names
                        .status_subresource
                        .then(|| CustomResourceSubresourceStatus(json!({}))),
                    ..Default::default()
                }),
                additional_printer_columns: Some(columns.to_vec()),
                ..Default::default()
            }],
            ..Default::default()
        },
        status: None,
    })
}

/// The root schema: `apiVersion`, `kind`, `metadata` (validated by the API server itself),
/// and `spec` and `status` from the Rust types.
fn object_schema<Spec: JsonSchema, Status: JsonSchema>() -> Value {
    json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string", "description": "The versioned schema of this object."},
            "kind": {"type": "string", "description": "The REST resource this object represents."},
            "metadata": {"type": "object"},
            "spec": schema_of::<Spec>(),
            "status": schema_of::<Status>(),
        },
    })
}

/// `T`'s schema, inlined (no `$ref`) and made structural.
fn schema_of<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let mut value = generator.into_root_schema_for::<T>().to_value();
    structural(&mut value);
    value
}

/// Rewrites a schemars schema into a Kubernetes structural one, in place: drops `title`,
/// `$schema`, `$defs` and `default: null`; `type: [T, "null"]` becomes `type: T`, and `anyOf: [S, {type: null}]`
/// becomes `S` (with the outer description), since an absent field is how Kubernetes spells
/// "none".
pub fn structural(value: &mut Value) {
    let Value::Object(map) = value else { return };
    for key in ["title", "$schema", "$defs", "definitions"] {
        map.remove(key);
    }
    // `#[serde(default)]` on an `Option` makes schemars write `default: null`.
    if map.get("default") == Some(&Value::Null) {
        map.remove("default");
    }
    if let Some(Value::Array(types)) = map.get("type") {
        let non_null: Vec<_> = types.iter().filter(|t| *t != "null").cloned().collect();
        if non_null.len() == 1 {
            map.insert("type".into(), non_null[0].clone());
        }
    }
    let nullable_any_of = match map.get("anyOf") {
        Some(Value::Array(options)) if options.iter().any(is_null_schema) => {
            let rest: Vec<_> = options.iter().filter(|o| !is_null_schema(o)).collect();
            (rest.len() == 1).then(|| rest[0].clone())
        }
        _ => None,
    };
    if let Some(Value::Object(inner)) = nullable_any_of {
        map.remove("anyOf");
        for (k, v) in inner {
            map.entry(k).or_insert(v);
        }
    }
    for (key, child) in map.iter_mut() {
        match (key.as_str(), child) {
            // Property names are data, not keywords: only their schemas are rewritten.
            ("properties", Value::Object(props)) => props.values_mut().for_each(structural),
            (_, child @ Value::Object(_)) => structural(child),
            (_, Value::Array(items)) => items.iter_mut().for_each(structural),
            _ => {}
        }
    }
}

fn is_null_schema(schema: &Value) -> bool {
    schema.get("type") == Some(&Value::from("null"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema_json(crd: &CustomResourceDefinition) -> Value {
        serde_json::to_value(&crd.spec.versions[0].schema).expect("serializable")
    }

    #[test]
    fn quantities_are_int_or_string_as_in_kubernetes() {
        let pg = schema_json(&pod_group_crd().expect("PodGroup CRD"));
        let q = schema_json(&queue_crd().expect("Queue CRD"));
        let root = "/openAPIV3Schema/properties";
        for (schema, path) in [
            (&pg, format!("{root}/spec/properties/minResources")),
            (&q, format!("{root}/spec/properties/capability")),
            (&q, format!("{root}/spec/properties/deserved")),
            (
                &q,
                format!("{root}/spec/properties/guarantee/properties/resource"),
            ),
            (&q, format!("{root}/status/properties/allocated")),
        ] {
            let quantity = schema
                .pointer(&format!("{path}/additionalProperties"))
                .unwrap_or_else(|| panic!("{path} has no additionalProperties"));
            assert_eq!(quantity["x-kubernetes-int-or-string"], true, "{path}");
        }
    }

    #[test]
    fn generated_schema_has_no_keyword_kubernetes_does_not_know() {
        // JSONSchemaProps ignores unknown keys when it reads; a key lost on the way in shows
        // up as a difference between what schemars generated and what the CRD carries.
        for (crd, generated) in [
            (
                pod_group_crd().expect("PodGroup CRD"),
                object_schema::<PodGroupSpec, VolcanoPodGroupStatus>(),
            ),
            (
                queue_crd().expect("Queue CRD"),
                object_schema::<QueueSpec, VolcanoQueueStatus>(),
            ),
        ] {
            let mut carried = schema_json(&crd)["openAPIV3Schema"].clone();
            carried
                .as_object_mut()
                .expect("an object")
                .remove("description");
            assert_eq!(carried, generated, "{}", crd.spec.names.kind);
        }
    }

    #[test]
    fn no_field_is_null_typed_or_required_except_in_label_selectors() {
        let yaml = all_crds_yaml().expect("CRDs");
        assert!(!yaml.contains("null"), "{yaml}");
        assert_eq!(yaml.matches("required:").count(), 1, "{yaml}");
    }
}
