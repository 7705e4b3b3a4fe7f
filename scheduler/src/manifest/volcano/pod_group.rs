//! `scheduling.volcano.sh/v1beta1 PodGroup`.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};

use super::schema::{label_selector_schema, resource_list_schema};
use super::{MAX_MIN_MEMBER, NetworkTopologySpec};
use crate::manifest::convert::{ResourceList, resources_from_k8s};
use crate::manifest::error::FieldError;
use crate::model::{DEFAULT_QUEUE, ObjectKey, PodGroup, PodGroupPhase, PodGroupStatus};

#[derive(Clone, Debug, Default, Deserialize)]
pub struct VolcanoPodGroup {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: Option<PodGroupSpec>,
    pub status: Option<VolcanoPodGroupStatus>,
}

// Also the `spec` schema of the PodGroup CRD (`phalanx crds`): its doc comments are the
// descriptions `kubectl explain` shows.
/// What the gang needs: how many pods, which queue, which priority, which resources.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    /// The fewest pods that must be placed together (the gang); 1 when absent.
    #[serde(default, deserialize_with = "int32_not_text")]
    pub min_member: Option<i32>,
    /// The fewest pods per task (by task name) that must be placed together.
    pub min_task_member: Option<BTreeMap<String, i32>>,
    /// The queue the PodGroup is admitted through; `default` when absent.
    #[schemars(extend("default" = "default"))]
    pub queue: Option<String>,
    /// The PriorityClass of the PodGroup (and of its pods).
    pub priority_class_name: Option<String>,
    /// The resources the whole gang needs before any of it is placed.
    pub min_resources: Option<MinResources>,
    /// Network topology constraints (read, not acted on by phalanx).
    pub network_topology: Option<NetworkTopologySpec>,
    /// Sub-groups of the gang with their own topology constraints (read, not acted on).
    pub sub_group_policy: Option<Vec<SubGroupPolicySpec>>,
    /// Whether the gang's pods may be preempted (read, not acted on).
    pub preemptable: Option<bool>,
}

/// One entry of `spec.subGroupPolicy`.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubGroupPolicySpec {
    /// The sub-group's name.
    pub name: Option<String>,
    /// The sub-group's network topology constraint.
    pub network_topology: Option<NetworkTopologySpec>,
    /// Pods per sub-group.
    pub sub_group_size: Option<i32>,
    /// The fewest sub-groups that must be placed.
    pub min_sub_groups: Option<i32>,
    /// Selects the pods of this policy.
    #[schemars(schema_with = "label_selector_schema")]
    #[serde(default)]
    pub label_selector: Option<LabelSelector>,
    /// Label keys whose values split the selected pods into sub-groups.
    pub match_label_keys: Option<Vec<String>>,
}

// Also the `status` schema of the PodGroup CRD.
/// Where the gang is: its phase, conditions and pod counts.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
pub struct VolcanoPodGroupStatus {
    /// Pending, Inqueue, Running, Completed or Unknown.
    pub phase: Option<String>,
    /// The latest observations of the PodGroup's state (e.g. why it is not scheduled).
    pub conditions: Option<Vec<PodGroupCondition>>,
    /// Pods in phase Running.
    pub running: Option<i32>,
    /// Pods in phase Succeeded.
    pub succeeded: Option<i32>,
    /// Pods in phase Failed.
    pub failed: Option<i32>,
}

/// One entry of `status.conditions` (read, not acted on).
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupCondition {
    /// The condition's type, e.g. Scheduled or Unschedulable.
    #[serde(rename = "type")]
    pub condition_type: Option<String>,
    /// True, False or Unknown.
    pub status: Option<String>,
    /// The scheduling cycle that last changed the condition.
    #[serde(rename = "transitionID")]
    pub transition_id: Option<String>,
    /// When the condition last changed (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub last_transition_time: Option<String>,
    /// A machine-readable reason for the last change.
    pub reason: Option<String>,
    /// A human-readable message about the last change.
    pub message: Option<String>,
}

/// `spec.minResources`: Volcano's is a plain ResourceList (`{nvidia.com/gpu: 11}`); the
/// nested `{requests: {...}}` spelling (seen in the wild, and in the seed fixture) is read
/// too, and remembered so the loader can warn about it.
#[derive(Clone, Debug, Default)]
pub struct MinResources {
    pub list: ResourceList,
    pub nested_requests: bool,
}

impl<'de> Deserialize<'de> for MinResources {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MinResources;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a resource list such as {cpu: 4, nvidia.com/gpu: 2}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MinResources, A::Error> {
                let mut out = MinResources::default();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "requests" {
                        let nested: Option<ResourceList> = map.next_value()?;
                        out.list.extend(nested.unwrap_or_default());
                        out.nested_requests = true;
                    } else {
                        let value = map.next_value()?;
                        out.list.insert(key, value);
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

/// Volcano's schema: a plain ResourceList. The nested `{requests: {...}}` spelling that the
/// loader also reads is not in it, so the API server refuses it, as it does with Volcano's CRD.
impl JsonSchema for MinResources {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "MinResources".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        resource_list_schema(generator)
    }
}

const PHASES: &[&str] = &["Pending", "Inqueue", "Running", "Completed", "Unknown"];

/// Converts a PodGroup; `warnings` gets what is read but not acted on.
pub fn pod_group_from_volcano(
    pg: &VolcanoPodGroup,
    warnings: &mut Vec<String>,
) -> Result<PodGroup, FieldError> {
    let name = crate::manifest::convert::required_name(pg.metadata.name.as_ref())?;
    let namespace = pg
        .metadata
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into());
    let spec = pg.spec.clone().unwrap_or_default();
    // Volcano's CRD says `minimum: 0`: a group of minMember 0 has no gang constraint, its
    // pods are placed one by one.
    let min_member = spec.min_member.unwrap_or(1);
    if !(0..=MAX_MIN_MEMBER).contains(&min_member) {
        return Err(FieldError::new(
            "spec.minMember",
            format!(
                "{min_member} is not in 0..={MAX_MIN_MEMBER} (0: no gang constraint, pods placed one by one)"
            ),
        ));
    }
    let mut out = PodGroup::new(ObjectKey::new(namespace, name), min_member as u32);
    for (task, count) in spec.min_task_member.unwrap_or_default() {
        let count = u32::try_from(count).map_err(|_| {
            FieldError::new(
                format!("spec.minTaskMember.{task}"),
                format!("{count} is negative"),
            )
        })?;
        out.min_task_member.insert(task, count);
    }
    if let Some(min) = &spec.min_resources {
        let path = if min.nested_requests {
            "spec.minResources.requests"
        } else {
            "spec.minResources"
        };
        out.min_resources = Some(resources_from_k8s(&min.list, path)?);
        if min.nested_requests {
            warnings.push(
                "spec.minResources is written as {requests: {...}}; Volcano expects a plain resource list \
                 (e.g. minResources: {nvidia.com/gpu: 11}) and the API server would reject this spelling; phalanx reads \
                 the nested list"
                    .to_string(),
            );
        }
    }
    out.queue = spec
        .queue
        .filter(|q| !q.is_empty())
        .unwrap_or_else(|| DEFAULT_QUEUE.to_string());
    out.priority_class_name = spec.priority_class_name.filter(|p| !p.is_empty());
    out.annotations = pg.metadata.annotations.clone().unwrap_or_default();
    if spec.network_topology.is_some() || spec.sub_group_policy.is_some() {
        warnings.push("spec.networkTopology / spec.subGroupPolicy are read but phalanx does not schedule by network topology".into());
    }
    out.status = status(pg.status.as_ref())?;
    Ok(out)
}

fn status(status: Option<&VolcanoPodGroupStatus>) -> Result<PodGroupStatus, FieldError> {
    let Some(status) = status else {
        return Ok(PodGroupStatus::default());
    };
    let phase = match status.phase.as_deref() {
        None | Some("") => PodGroupPhase::Pending,
        Some(text) => PodGroupPhase::parse(text).ok_or_else(|| {
            FieldError::not_one_of("status.phase", text, "PodGroup phase", PHASES)
        })?,
    };
    let count = |v: Option<i32>, field: &str| {
        u32::try_from(v.unwrap_or(0))
            .map_err(|_| FieldError::new(format!("status.{field}"), "must not be negative"))
    };
    Ok(PodGroupStatus {
        phase,
        running: count(status.running, "running")?,
        succeeded: count(status.succeeded, "succeeded")?,
        failed: count(status.failed, "failed")?,
        ..PodGroupStatus::default()
    })
}

/// An int32 written as a number. The YAML reader turns a quoted `"1"` into 1 for an
/// integer field; Kubernetes refuses a string there, so phalanx does too, rather than
/// load the gang from text the API server would never have accepted.
fn int32_not_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i32>, D::Error> {
    struct Int32;
    impl Visitor<'_> for Int32 {
        type Value = Option<i32>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an int32 written as a number, not text")
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
            i32::try_from(v)
                .map(Some)
                .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
            i32::try_from(v)
                .map(Some)
                .map_err(|_| E::invalid_value(serde::de::Unexpected::Unsigned(v), &self))
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    d.deserialize_any(Int32)
}
