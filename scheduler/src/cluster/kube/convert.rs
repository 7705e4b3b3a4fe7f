//! Watched API objects into the model, and the model's PodGroup status back into JSON.
//!
//! The typed conversions are the manifest module's (`manifest::convert`,
//! `manifest::volcano`), so a PodGroup reads the same from a scenario file and from the API
//! server. What only a live object has is added here: the creation time (the model's
//! `creation_index`, in milliseconds since the Unix epoch), the status conditions and the
//! annotation that carries `inqueue_since_ms` (the CRD's status schema has no field for it).

use ::kube::core::DynamicObject;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::manifest::FieldError;
use crate::manifest::checks::{BoundedTotals, check_gang_size};
use crate::manifest::volcano::{
    VolcanoPodGroup, VolcanoQueue, pod_group_from_volcano, queue_from_volcano,
};
use crate::model::{Node, PodGroup, PodGroupCondition, PodGroupStatus, Queue, TimeMs};

/// The annotation that keeps when a PodGroup became Inqueue (milliseconds since the epoch).
pub const INQUEUE_SINCE_ANNOTATION: &str = "phalanx.dev/inqueue-since-ms";

/// Milliseconds since the Unix epoch of an object's creation (0 when unknown).
pub fn creation_ms(meta: &ObjectMeta) -> u64 {
    meta.creation_timestamp
        .as_ref()
        .map_or(0, |t| u64::try_from(t.0.as_millisecond()).unwrap_or(0))
}

/// RFC 3339 text of a time in milliseconds since the epoch (kept to the millisecond, so a
/// written condition reads back equal).
pub fn rfc3339_ms(ms: TimeMs) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .map_or_else(|| "1970-01-01T00:00:00Z".to_string(), |t| t.to_string())
}

fn parse_rfc3339_ms(text: &str) -> Option<TimeMs> {
    let t: Timestamp = text.parse().ok()?;
    u64::try_from(t.as_millisecond()).ok()
}

/// A PodGroup object; `warnings` gets what is read but not acted on. A gang the ledger
/// could never commit (`minMember` over its pods-per-gang bound) is an error.
pub fn pod_group_from_dynamic(
    obj: &DynamicObject,
    warnings: &mut Vec<String>,
) -> Result<PodGroup, FieldError> {
    let typed: VolcanoPodGroup = typed_from_dynamic(obj)?;
    let mut out = pod_group_from_volcano(&typed, warnings)?;
    // The loader's bound, for objects from the API server too: a larger gang could never
    // be committed, and would be planned and refused again every cycle.
    check_gang_size("spec.minMember", out.min_member)?;
    out.creation_index = creation_ms(&obj.metadata);
    out.status.conditions = conditions(obj.data.get("status"));
    out.status.inqueue_since_ms = out
        .annotations
        .get(INQUEUE_SINCE_ANNOTATION)
        .and_then(|v| v.parse().ok())
        .filter(|_| out.status.phase == crate::model::PodGroupPhase::Inqueue);
    Ok(out)
}

/// A Queue object.
pub fn queue_from_dynamic(
    obj: &DynamicObject,
    warnings: &mut Vec<String>,
) -> Result<Queue, FieldError> {
    let typed: VolcanoQueue = typed_from_dynamic(obj)?;
    let mut out = queue_from_volcano(&typed, warnings)?;
    out.creation_index = creation_ms(&obj.metadata);
    Ok(out)
}

/// The dynamic object read as one of the Volcano serde types; a wrongly typed field is an
/// error naming its path.
fn typed_from_dynamic<T: serde::de::DeserializeOwned>(
    obj: &DynamicObject,
) -> Result<T, FieldError> {
    let mut value = obj.data.clone();
    if let Value::Object(map) = &mut value {
        let meta = serde_json::to_value(&obj.metadata)
            .map_err(|e| FieldError::new("metadata", e.to_string()))?;
        map.insert("metadata".into(), meta);
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        FieldError::new(path, e.into_inner().to_string())
    })
}

/// `status.conditions`, as far as they can be read (a malformed entry is skipped).
fn conditions(status: Option<&Value>) -> Vec<PodGroupCondition> {
    let Some(list) = status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|c| {
            let text = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            let kind = text("type");
            (!kind.is_empty()).then(|| PodGroupCondition {
                kind,
                status: text("status") == "True",
                reason: text("reason"),
                message: text("message"),
                transition_time_ms: c
                    .get("lastTransitionTime")
                    .and_then(Value::as_str)
                    .and_then(parse_rfc3339_ms)
                    .unwrap_or(0),
            })
        })
        .collect()
}

/// The JSON merge patch that writes `status` (and the Inqueue-since annotation) on a
/// PodGroup. The PodGroup CRD, like Volcano's, has no status subresource: the status is
/// written on the object itself.
pub fn status_patch(status: &PodGroupStatus) -> Value {
    let conditions: Vec<Value> = status
        .conditions
        .iter()
        .map(|c| {
            json!({
                "type": c.kind,
                "status": if c.status { "True" } else { "False" },
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": rfc3339_ms(c.transition_time_ms),
            })
        })
        .collect();
    let since = status
        .inqueue_since_ms
        .map(|ms| Value::String(ms.to_string()));
    json!({
        "metadata": {"annotations": {INQUEUE_SINCE_ANNOTATION: since}},
        "status": {
            "phase": status.phase.as_str(),
            "running": status.running,
            "succeeded": status.succeeded,
            "failed": status.failed,
            "conditions": conditions,
        }
    })
}

/// The nodes whose resources the scheduler can total, in the order given (name order, so
/// the same nodes are kept every cycle), and for each node left out its name and the error
/// naming the field and the value. A counted resource (GPUs) is shared out in millionths of
/// a unit, so its total over the cluster must stay under about 9.2e12: past it every
/// queue's deserved share saturates and no gang is placed, with a message that blames the
/// queue (issue 17). The ledger takes up to 2^53 of a resource on one node, so one node can
/// pass it alone. The loader refuses such a file whole; here the node past the total is left
/// out and told, and the others are scheduled.
pub fn nodes_within_cluster_totals(
    nodes: Vec<std::sync::Arc<Node>>,
) -> (Vec<std::sync::Arc<Node>>, Vec<(String, FieldError)>) {
    let mut totals = BoundedTotals::default();
    let (mut kept, mut refused) = (Vec::with_capacity(nodes.len()), Vec::new());
    for node in nodes {
        match totals.try_add(&node.allocatable) {
            Ok(()) => kept.push(node),
            Err((name, limit)) => {
                let value = node.allocatable.get(name.as_str());
                let error = FieldError::new(
                    format!("status.allocatable.{name}"),
                    format!(
                        "{value} would take the cluster's total {name} past {limit}; a \
                         counted resource is shared out in millionths of a unit, and a \
                         larger total would saturate every queue's deserved share"
                    ),
                );
                refused.push((node.name.clone(), error));
            }
        }
    }
    (kept, refused)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PodGroupPhase;

    fn dynamic(value: Value) -> DynamicObject {
        serde_json::from_value(value).expect("a dynamic object")
    }

    #[test]
    fn a_node_that_takes_the_clusters_gpu_total_past_the_shares_bound_is_left_out_naming_it() {
        use crate::manifest::checks::MAX_WHOLE_COUNT_TOTAL;
        let node = |name: &str, gpus: i64| {
            let mut n = Node::new(name, crate::model::Resources::default());
            n.allocatable
                .set(&crate::model::ResourceName::new("nvidia.com/gpu"), gpus);
            std::sync::Arc::new(n)
        };
        let half = MAX_WHOLE_COUNT_TOTAL / 2 - 8;
        let nodes = vec![
            node("a", half),
            node("b", half),
            node("c", half),
            node("d", 8),
        ];
        let (kept, refused) = nodes_within_cluster_totals(nodes);
        let names: Vec<&str> = kept.iter().map(|n| n.name.as_str()).collect();
        // c is left out, whole; d, after it, still fits (the total is b's, not c's).
        assert_eq!(names, ["a", "b", "d"]);
        assert_eq!(refused.len(), 1);
        let (name, error) = &refused[0];
        assert_eq!(name, "c");
        let text = error.to_string();
        for part in [
            "status.allocatable.nvidia.com/gpu",
            &half.to_string(),
            "deserved share",
        ] {
            assert!(text.contains(part), "{text}");
        }
        // Under the bound nothing is left out.
        let (kept, refused) = nodes_within_cluster_totals(vec![node("a", half), node("b", 8)]);
        assert_eq!((kept.len(), refused.len()), (2, 0));
    }

    #[test]
    fn a_written_status_reads_back_equal() {
        let status = PodGroupStatus {
            phase: PodGroupPhase::Inqueue,
            running: 0,
            succeeded: 0,
            failed: 0,
            conditions: vec![PodGroupCondition {
                kind: "Unschedulable".into(),
                status: true,
                reason: "NotEnoughResources".into(),
                message: "needs 11 GPUs, 3 free".into(),
                transition_time_ms: 1_764_476_095_123,
            }],
            inqueue_since_ms: Some(1_764_476_095_000),
        };
        let patch = status_patch(&status);
        let obj = dynamic(json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns",
                "annotations": patch["metadata"]["annotations"].clone()},
            "spec": {"minMember": 2},
            "status": patch["status"].clone(),
        }));
        let pg = pod_group_from_dynamic(&obj, &mut Vec::new()).expect("converts");
        assert_eq!(pg.status, status);
        assert_eq!(pg.min_member, 2);
    }

    #[test]
    fn a_wrongly_typed_field_is_an_error_naming_its_path() {
        let obj = dynamic(json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns"},
            "spec": {"minMember": "eleven"},
        }));
        let e = pod_group_from_dynamic(&obj, &mut Vec::new()).expect_err("refused");
        assert!(e.to_string().contains("spec.minMember"), "{e}");
    }

    /// Read before this check, a PodGroup of 4,097 to 100,000 pods was planned and then
    /// refused by the ledger every cycle, with no word to its owner.
    #[test]
    fn a_pod_group_larger_than_the_ledgers_gang_bound_is_refused_naming_field_and_value() {
        let group = |min: u32| {
            dynamic(json!({
                "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                "metadata": {"name": "wide", "namespace": "ns"},
                "spec": {"minMember": min},
            }))
        };
        let limit = crate::manifest::checks::MAX_PODS_PER_GANG as u32;
        let read = pod_group_from_dynamic(&group(limit), &mut Vec::new()).expect("at the bound");
        assert_eq!(read.min_member, limit);
        let e = pod_group_from_dynamic(&group(limit + 1), &mut Vec::new()).expect_err("refused");
        let text = e.to_string();
        assert!(text.starts_with("spec.minMember: 4097 pods"), "{text}");
        assert!(text.contains("4096"), "{text}");
    }
}
