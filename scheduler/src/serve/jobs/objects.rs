//! From a Volcano Job to what the controller reads and writes: the state machine's
//! [`JobShape`], the PodGroup and pod objects (the expansion `simulate` uses, with
//! ownerReferences), and the `status` merge patch.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::{Value, json};

use super::state::{Counts, DEFAULT_MAX_RETRY, JobShape, JobState, Policy, PolicyAction};
use crate::manifest::volcano::job::{LifecyclePolicy, VolcanoJob};
use crate::manifest::volcano::{ExpandedJob, crd::GROUP as SCHEDULING_GROUP};
use crate::model::quantity::QuantityUnit;
use crate::model::{Resources, TASK_SPEC_ANNOTATION};

pub use crate::manifest::volcano::crd::{JOB_GROUP, JOB_VERSION};

/// The Job as the controlling owner of what it creates (`blockOwnerDeletion` so that a
/// foreground deletion of the Job waits for them).
pub fn owner_reference(name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: format!("{JOB_GROUP}/{JOB_VERSION}"),
        kind: "Job".into(),
        name: name.into(),
        uid: uid.into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// True when `refs` name a Volcano Job as controller; returns its uid.
pub fn controlling_job(refs: Option<&Vec<OwnerReference>>) -> Option<&str> {
    refs.into_iter().flatten().find_map(|r| {
        (r.controller == Some(true)
            && r.kind == "Job"
            && r.api_version.starts_with(&format!("{JOB_GROUP}/")))
        .then_some(r.uid.as_str())
    })
}

/// The state machine's view of the Job, plus notes on policies it does not act on.
pub fn job_shape(job: &VolcanoJob, expanded: &ExpandedJob) -> (JobShape, Vec<String>) {
    let spec = job.spec.clone().unwrap_or_default();
    let mut notes = Vec::new();
    let pods = expanded
        .objects
        .iter()
        .map(|p| {
            let task = p
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(TASK_SPEC_ANNOTATION));
            let name = p.metadata.name.clone().unwrap_or_default();
            (name, task.cloned().unwrap_or_default())
        })
        .collect();
    let mut task_min_available = BTreeMap::new();
    let mut task_policies = BTreeMap::new();
    for (i, task) in spec.tasks.iter().flatten().enumerate() {
        let name = task
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| format!("default{i}"));
        if let Some(min) = task.min_available {
            task_min_available.insert(name.clone(), min);
        }
        let path = format!("spec.tasks[{i}].policies");
        let list = policies(
            task.policies.as_deref().unwrap_or_default(),
            &path,
            &mut notes,
        );
        task_policies.insert(name, list);
    }
    let shape = JobShape {
        pods,
        min_available: expanded.pod_group.min_member as i32,
        min_success: spec.min_success,
        max_retry: spec
            .max_retry
            .filter(|m| *m > 0)
            .unwrap_or(DEFAULT_MAX_RETRY),
        task_min_available,
        policies: policies(
            spec.policies.as_deref().unwrap_or_default(),
            "spec.policies",
            &mut notes,
        ),
        task_policies,
    };
    (shape, notes)
}

/// The policies the controller acts on; the others get a note naming them (the
/// expansion has already refused invalid ones).
fn policies(list: &[LifecyclePolicy], path: &str, notes: &mut Vec<String>) -> Vec<Policy> {
    let mut out = Vec::new();
    for (i, p) in list.iter().enumerate() {
        let action = match p.action.as_deref() {
            Some("RestartJob") => PolicyAction::RestartJob,
            Some("AbortJob") => PolicyAction::AbortJob,
            other => {
                notes.push(format!(
                    "{path}[{i}].action {:?} is not acted on by phalanx's Job controller (it acts on RestartJob and AbortJob)",
                    other.unwrap_or("")
                ));
                continue;
            }
        };
        let events: Vec<String> = p
            .events
            .iter()
            .flatten()
            .chain(p.event.iter())
            .cloned()
            .collect();
        let acted: Vec<String> = events
            .into_iter()
            .filter(|e| {
                let ok = matches!(e.as_str(), "PodFailed" | "PodEvicted" | "*");
                if !ok {
                    notes.push(format!(
                        "{path}[{i}].event {e:?} is not acted on by phalanx's Job controller (it acts on PodFailed and PodEvicted)"
                    ));
                }
                ok
            })
            .collect();
        if p.exit_code.is_some() {
            notes.push(format!(
                "{path}[{i}].exitCode is not acted on by phalanx's Job controller"
            ));
        }
        if !acted.is_empty() {
            out.push(Policy {
                events: acted,
                action,
            });
        }
    }
    out
}

/// The PodGroup Volcano's controller would create for the Job, owned by it.
pub fn pod_group_object(
    expanded: &ExpandedJob,
    min_resources: &Resources,
    owner: &OwnerReference,
) -> Value {
    let pg = &expanded.pod_group;
    let mut spec = json!({
        "minMember": pg.min_member,
        "minTaskMember": pg.min_task_member,
        "queue": pg.queue,
        "minResources": quantities(min_resources),
    });
    if let Some(pc) = &pg.priority_class_name {
        spec["priorityClassName"] = json!(pc);
    }
    json!({
        "apiVersion": format!("{SCHEDULING_GROUP}/v1beta1"),
        "kind": "PodGroup",
        "metadata": {
            "name": pg.key.name,
            "namespace": pg.key.namespace,
            "annotations": pg.annotations,
            "ownerReferences": [owner],
        },
        "spec": spec,
    })
}

/// A resource list as Kubernetes writes quantities (`2000m`, bytes, counts).
fn quantities(resources: &Resources) -> BTreeMap<String, String> {
    resources
        .iter()
        .map(|(name, amount)| {
            let text = match name.unit() {
                QuantityUnit::Milli => format!("{amount}m"),
                _ => amount.to_string(),
            };
            (name.to_string(), text)
        })
        .collect()
}

/// Pod `name` of the expansion, owned by the Job.
pub fn pod_object(expanded: &ExpandedJob, name: &str, owner: &OwnerReference) -> Option<core::Pod> {
    let mut pod = expanded
        .objects
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(name))?
        .clone();
    pod.metadata.owner_references = Some(vec![owner.clone()]);
    Some(pod)
}

/// The Job's `status` as the state machine left it, for comparison with what is written.
pub fn status_value(
    state: JobState,
    counts: Counts,
    min_available: i32,
    reason: Option<&str>,
) -> Value {
    let mut phase = json!({ "phase": state.phase.as_str() });
    if let Some(r) = reason {
        phase["message"] = json!(r);
    }
    json!({
        "state": phase,
        "minAvailable": min_available,
        "pending": counts.pending,
        "running": counts.running,
        "succeeded": counts.succeeded,
        "failed": counts.failed,
        "terminating": counts.terminating,
        "unknown": counts.unknown,
        "retryCount": state.retry_count,
    })
}

/// Whether `written` already says everything `wanted` does (a message is kept until the
/// phase changes again).
pub fn status_is_current(written: Option<&Value>, wanted: &Value) -> bool {
    let Some(written) = written else { return false };
    let Some(fields) = wanted.as_object() else {
        return false;
    };
    fields.iter().all(|(k, v)| match k.as_str() {
        "state" => written.pointer("/state/phase") == v.get("phase"),
        _ => written.get(k) == Some(v),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::volcano::expand_job;

    fn seed() -> (VolcanoJob, ExpandedJob) {
        let text = include_str!("../../../tests/fixtures/seed/job-tf-mnist.yaml");
        let job: VolcanoJob = serde_saphyr::from_str(text).expect("the seed Job");
        let expanded = expand_job(&job, "phalanx", &mut Vec::new()).expect("expands");
        (job, expanded)
    }

    #[test]
    fn the_seed_job_becomes_eleven_owned_pods_and_a_gang_of_eleven() {
        let (job, expanded) = seed();
        let (shape, notes) = job_shape(&job, &expanded);
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!((shape.pods.len(), shape.min_available), (11, 11));
        assert_eq!(shape.pods[0], ("tf-mnist-job-ps-0".into(), "ps".into()));
        assert_eq!(shape.policies.len(), 2);
        // The objects the controller creates are the pods simulate places, in order.
        let names: Vec<_> = expanded.pods.iter().map(|p| p.key.name.clone()).collect();
        let objects: Vec<_> = expanded
            .objects
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        assert_eq!(names, objects);
        let owner = owner_reference("tf-mnist-job", "uid-1");
        let pod = pod_object(&expanded, "tf-mnist-job-worker-9", &owner).expect("a pod");
        assert_eq!(
            controlling_job(pod.metadata.owner_references.as_ref()),
            Some("uid-1")
        );
        let labels = pod.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels.get("volcano.sh/task-index").map(String::as_str),
            Some("9")
        );
        let mut gpus = Resources::new();
        gpus.add(&Resources::from_pairs([
            ("nvidia.com/gpu", 11),
            ("cpu", 42_000),
        ]));
        let pg = pod_group_object(&expanded, &gpus, &owner);
        assert_eq!(pg["spec"]["minMember"], json!(11));
        assert_eq!(
            pg["spec"]["minResources"],
            json!({"cpu": "42000m", "nvidia.com/gpu": "11"})
        );
        assert_eq!(
            pg["metadata"]["ownerReferences"][0]["blockOwnerDeletion"],
            json!(true)
        );
    }

    #[test]
    fn unsupported_policies_are_named_and_not_acted_on() {
        let (mut job, expanded) = seed();
        let spec = job.spec.as_mut().expect("spec");
        spec.policies = Some(vec![LifecyclePolicy {
            action: Some("RestartTask".into()),
            event: Some("PodFailed".into()),
            ..LifecyclePolicy::default()
        }]);
        let (shape, notes) = job_shape(&job, &expanded);
        assert!(shape.policies.is_empty());
        assert!(
            notes[0].contains("spec.policies[0].action \"RestartTask\""),
            "{notes:?}"
        );
    }

    #[test]
    fn a_status_is_current_only_when_every_written_field_matches() {
        let state = JobState {
            phase: super::super::state::Phase::Running,
            retry_count: 1,
        };
        let wanted = status_value(
            state,
            Counts {
                running: 11,
                ..Counts::default()
            },
            11,
            Some("x"),
        );
        assert!(status_is_current(Some(&wanted), &wanted));
        let mut older = wanted.clone();
        older["running"] = json!(10);
        assert!(!status_is_current(Some(&older), &wanted));
        assert!(!status_is_current(None, &wanted));
    }
}
