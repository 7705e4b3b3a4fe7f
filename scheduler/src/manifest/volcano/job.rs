//! `batch.volcano.sh/v1alpha1 Job`, expanded the way Volcano creates its objects.
//!
//! Volcano's admission webhook first defaults the Job (a task without a name is
//! `default<i>`; a task without `minAvailable` gets its replica count; the Job's
//! `minAvailable`, when 0 or absent, becomes the sum of the tasks' `minAvailable`; an empty
//! queue is `default`). Its job controller then creates a PodGroup and the pods:
//! - PodGroup named after the Job (current Volcano appends the Job's UID; a scenario has no
//!   UIDs, and the plain name is what users look for), `minMember` = the Job's
//!   `minAvailable`, `minTaskMember` = every task's `minAvailable`, queue and
//!   priorityClassName copied, the Job's annotations copied;
//! - `minResources` = the requests of the first `minAvailable` pods, tasks ordered by the
//!   value of their template's PriorityClass (highest first, file order among equals):
//!   when the Job's `minAvailable` is below the sum of the tasks' minimums, the first pods
//!   in that order; otherwise each task's minimum, topped up from the remaining replicas.
//!   Volcano also sums quota keys (`pods`, `count/pods`, `requests.*`, `limits.*`) into
//!   this list; phalanx keeps resources only;
//! - pods `<job>-<task>-<index>` from the task template, with `schedulerName` and
//!   `priorityClassName` taken from the Job when the template has none, annotations
//!   `scheduling.k8s.io/group-name`, `volcano.sh/task-spec`, `volcano.sh/job-name`,
//!   `volcano.sh/task-index`, `volcano.sh/queue-name` and the matching labels.
//!
//! A Job without `schedulerName` gets the loader's scheduler name (Volcano's webhook would
//! put its own name there).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use super::NetworkTopologySpec;
use super::job_policies::validate_policies;
use crate::manifest::checks::MAX_PODS_PER_GANG;
use crate::manifest::convert::{pod_from_k8s, required_name};
use crate::manifest::error::FieldError;
use crate::model::{
    DEFAULT_QUEUE, GROUP_NAME_ANNOTATION, ObjectKey, Pod, PodGroup, Resources, TASK_SPEC_ANNOTATION,
};

/// Volcano's annotation / label keys on job pods.
pub const JOB_NAME_KEY: &str = "volcano.sh/job-name";
pub const TASK_INDEX_KEY: &str = "volcano.sh/task-index";
pub const QUEUE_NAME_KEY: &str = "volcano.sh/queue-name";
pub const JOB_NAMESPACE_KEY: &str = "volcano.sh/job-namespace";

#[derive(Clone, Debug, Default, Deserialize)]
pub struct VolcanoJob {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: Option<JobSpec>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSpec {
    pub scheduler_name: Option<String>,
    pub min_available: Option<i32>,
    pub volumes: Option<Vec<VolumeSpec>>,
    pub tasks: Option<Vec<TaskSpec>>,
    pub policies: Option<Vec<LifecyclePolicy>>,
    pub plugins: Option<BTreeMap<String, Option<Vec<String>>>>,
    pub running_estimate: Option<String>,
    pub queue: Option<String>,
    pub max_retry: Option<i32>,
    pub ttl_seconds_after_finished: Option<i32>,
    pub priority_class_name: Option<String>,
    pub min_success: Option<i32>,
    pub network_topology: Option<NetworkTopologySpec>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSpec {
    pub mount_path: Option<String>,
    pub volume_claim_name: Option<String>,
    pub volume_claim: Option<k8s::PersistentVolumeClaimSpec>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LifecyclePolicy {
    pub action: Option<String>,
    pub event: Option<String>,
    pub events: Option<Vec<String>>,
    pub exit_code: Option<i32>,
    pub timeout: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskSpec {
    pub name: Option<String>,
    pub replicas: Option<i32>,
    pub min_available: Option<i32>,
    pub template: Option<k8s::PodTemplateSpec>,
    pub policies: Option<Vec<LifecyclePolicy>>,
    pub topology_policy: Option<String>,
    pub max_retry: Option<i32>,
    pub depends_on: Option<DependsOn>,
    pub partition_policy: Option<PartitionPolicySpec>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct DependsOn {
    pub name: Option<Vec<String>>,
    pub iteration: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionPolicySpec {
    pub total_partitions: Option<i32>,
    pub partition_size: Option<i32>,
    pub network_topology: Option<NetworkTopologySpec>,
    pub min_partitions: Option<i32>,
}

/// What a Job becomes. `pod_group.min_resources` is filled by [`job_min_resources`] once
/// every PriorityClass of the workload is known.
#[derive(Clone, Debug)]
pub struct ExpandedJob {
    pub pod_group: PodGroup,
    pub pods: Vec<Pod>,
    /// The same pods as the API objects the Job controller creates (`pods[i]` is
    /// `objects[i]` converted), so that `simulate` and `serve --job-controller` share one
    /// expansion.
    pub objects: Vec<k8s::Pod>,
    pub tasks: Vec<TaskForMinResources>,
}

/// One task as the minResources rule needs it.
#[derive(Clone, Debug)]
pub struct TaskForMinResources {
    /// The template's own `priorityClassName` (not the Job's), as Volcano looks it up.
    pub priority_class_name: Option<String>,
    pub replicas: i32,
    pub min_available: i32,
    /// One pod's effective request.
    pub requests: Resources,
}

/// A task after the webhook's defaulting.
struct DefaultedTask<'a> {
    name: String,
    replicas: i32,
    min_available: i32,
    spec: &'a TaskSpec,
}

/// Expands a Job into its PodGroup and pods (see the module documentation).
pub fn expand_job(
    job: &VolcanoJob,
    default_scheduler_name: &str,
    warnings: &mut Vec<String>,
) -> Result<ExpandedJob, FieldError> {
    let name = required_name(job.metadata.name.as_ref())?;
    let namespace = job
        .metadata
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into());
    let spec = job.spec.clone().unwrap_or_default();
    let tasks = defaulted_tasks(&spec)?;
    let min_available = job_min_available(&spec, &tasks)?;
    validate_counts_and_policies(&spec)?;
    let queue = spec
        .queue
        .clone()
        .filter(|q| !q.is_empty())
        .unwrap_or_else(|| DEFAULT_QUEUE.to_string());
    let scheduler_name = spec
        .scheduler_name
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| default_scheduler_name.to_string());
    let job_pc = spec.priority_class_name.clone().filter(|p| !p.is_empty());
    let mut pods = Vec::new();
    let mut objects = Vec::new();
    let mut for_min = Vec::new();
    for (t, task) in tasks.iter().enumerate() {
        let ctx = PodContext {
            job: &name,
            namespace: &namespace,
            queue: &queue,
            scheduler_name: &scheduler_name,
            job_pc: job_pc.as_deref(),
        };
        let first_object = task_pod_object(&ctx, task);
        let first = pod_from_k8s(&first_object, default_scheduler_name)
            .map_err(|e| e.under(&format!("spec.tasks[{t}].template.")))?;
        for_min.push(TaskForMinResources {
            priority_class_name: task
                .spec
                .template
                .as_ref()
                .and_then(|tpl| tpl.spec.as_ref())
                .and_then(|s| s.priority_class_name.clone())
                .filter(|p| !p.is_empty()),
            replicas: task.replicas,
            min_available: task.min_available,
            requests: first.requests.clone(),
        });
        for index in 0..task.replicas {
            pods.push(replica(&first, &name, &task.name, index));
            objects.push(replica_object(&first_object, &name, &task.name, index));
        }
        if task.spec.depends_on.is_some() {
            warnings.push(format!(
                "spec.tasks[{t}].dependsOn is read but phalanx creates every task's pods at once"
            ));
        }
    }
    if spec.network_topology.is_some() {
        warnings.push(
            "spec.networkTopology is read but phalanx does not schedule by network topology".into(),
        );
    }
    let mut pod_group = PodGroup::new(ObjectKey::new(namespace, name), min_available as u32);
    pod_group.min_task_member = tasks
        .iter()
        .map(|t| (t.name.clone(), t.min_available as u32))
        .collect();
    pod_group.queue = queue;
    pod_group.priority_class_name = job_pc;
    pod_group.annotations = job.metadata.annotations.clone().unwrap_or_default();
    Ok(ExpandedJob {
        pod_group,
        pods,
        objects,
        tasks: for_min,
    })
}

fn defaulted_tasks(spec: &JobSpec) -> Result<Vec<DefaultedTask<'_>>, FieldError> {
    let raw = spec.tasks.as_deref().unwrap_or_default();
    if raw.is_empty() {
        return Err(FieldError::new(
            "spec.tasks",
            "a Job needs at least one task",
        ));
    }
    let mut names = BTreeSet::new();
    let mut out = Vec::new();
    let mut total: i64 = 0;
    for (i, task) in raw.iter().enumerate() {
        let path = format!("spec.tasks[{i}]");
        let name = task
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| format!("default{i}"));
        if !names.insert(name.clone()) {
            return Err(FieldError::new(
                format!("{path}.name"),
                format!("task name {name:?} is used twice"),
            ));
        }
        let replicas = task.replicas.unwrap_or(0);
        if replicas < 0 {
            return Err(FieldError::new(
                format!("{path}.replicas"),
                format!("{replicas} is negative"),
            ));
        }
        total += i64::from(replicas);
        // Before any pod is made: 100,000 replicas cost 900 MB to expand only to be
        // refused as a gang the ledger never commits.
        if total > MAX_PODS_PER_GANG as i64 {
            return Err(FieldError::new(
                format!("{path}.replicas"),
                format!(
                    "{replicas} makes the Job {total} pods, more than one gang may hold: the \
                     ledger accepts at most {MAX_PODS_PER_GANG} pods per gang"
                ),
            ));
        }
        let partition_min = task.partition_policy.as_ref().and_then(|p| {
            let (min, size) = (p.min_partitions.unwrap_or(0), p.partition_size.unwrap_or(0));
            (min > 0 && size > 0).then(|| min.saturating_mul(size))
        });
        let min_available = task.min_available.or(partition_min).unwrap_or(replicas);
        if !(0..=replicas).contains(&min_available) {
            return Err(FieldError::new(
                format!("{path}.minAvailable"),
                format!("{min_available} is not in 0..={replicas} (the task's replicas)"),
            ));
        }
        out.push(DefaultedTask {
            name,
            replicas,
            min_available,
            spec: task,
        });
    }
    Ok(out)
}

fn job_min_available(spec: &JobSpec, tasks: &[DefaultedTask<'_>]) -> Result<i32, FieldError> {
    let total: i32 = tasks.iter().map(|t| t.replicas).sum();
    let min = match spec.min_available {
        Some(m) if m < 0 => {
            return Err(FieldError::new(
                "spec.minAvailable",
                format!("{m} is negative"),
            ));
        }
        Some(m) if m > 0 => m,
        _ => tasks.iter().map(|t| t.min_available).sum(),
    };
    if min > total {
        return Err(FieldError::new(
            "spec.minAvailable",
            format!("{min} is more than the Job's {total} pods"),
        ));
    }
    // 0 (every task's minAvailable 0) is accepted, as Volcano does: its PodGroup has no
    // gang constraint and the pods are placed one by one.
    Ok(min)
}

/// What Volcano's CRD and admission webhook refuse besides the counts of pods: negative
/// retry and TTL counts, and lifecycle policies that clash (see [`validate_policies`]).
fn validate_counts_and_policies(spec: &JobSpec) -> Result<(), FieldError> {
    let not_negative = |value: Option<i32>, path: &str| match value {
        Some(v) if v < 0 => Err(FieldError::new(path, format!("{v} is negative"))),
        _ => Ok(()),
    };
    not_negative(spec.max_retry, "spec.maxRetry")?;
    not_negative(
        spec.ttl_seconds_after_finished,
        "spec.ttlSecondsAfterFinished",
    )?;
    if let Some(m) = spec.min_success
        && m < 1
    {
        return Err(FieldError::new(
            "spec.minSuccess",
            format!("{m} is below 1 (leave it out to require every pod to succeed)"),
        ));
    }
    validate_policies(
        spec.policies.as_deref().unwrap_or_default(),
        "spec.policies",
    )?;
    for (i, task) in spec.tasks.iter().flatten().enumerate() {
        not_negative(task.max_retry, &format!("spec.tasks[{i}].maxRetry"))?;
        validate_policies(
            task.policies.as_deref().unwrap_or_default(),
            &format!("spec.tasks[{i}].policies"),
        )?;
    }
    Ok(())
}

struct PodContext<'a> {
    job: &'a str,
    namespace: &'a str,
    queue: &'a str,
    scheduler_name: &'a str,
    job_pc: Option<&'a str>,
}

/// The task's pod with index 0 as an API object; a template without `spec` gives a pod
/// without one, which the conversion refuses naming `spec`.
fn task_pod_object(ctx: &PodContext<'_>, task: &DefaultedTask<'_>) -> k8s::Pod {
    let template = task.spec.template.clone().unwrap_or_default();
    let spec = template.spec.map(|mut spec| {
        if spec.scheduler_name.as_deref().unwrap_or("").is_empty() {
            spec.scheduler_name = Some(ctx.scheduler_name.to_string());
        }
        if spec.priority_class_name.as_deref().unwrap_or("").is_empty() {
            spec.priority_class_name = ctx.job_pc.map(str::to_string);
        }
        spec
    });
    let mut metadata = template.metadata.unwrap_or_default();
    metadata.name = Some(format!("{}-{}-0", ctx.job, task.name));
    metadata.namespace = Some(ctx.namespace.to_string());
    let annotations = metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(GROUP_NAME_ANNOTATION.into(), ctx.job.into());
    annotations.insert(TASK_SPEC_ANNOTATION.into(), task.name.clone());
    annotations.insert(JOB_NAME_KEY.into(), ctx.job.into());
    annotations.insert(QUEUE_NAME_KEY.into(), ctx.queue.into());
    annotations.insert(TASK_INDEX_KEY.into(), "0".into());
    let labels = metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(TASK_SPEC_ANNOTATION.into(), task.name.clone());
    labels.insert(JOB_NAME_KEY.into(), ctx.job.into());
    labels.insert(JOB_NAMESPACE_KEY.into(), ctx.namespace.into());
    labels.insert(QUEUE_NAME_KEY.into(), ctx.queue.into());
    labels.insert(TASK_INDEX_KEY.into(), "0".into());
    k8s::Pod {
        metadata,
        spec,
        status: None,
    }
}

/// Replica `index` of a task: the first pod renamed and re-indexed.
fn replica(first: &Pod, job: &str, task: &str, index: i32) -> Pod {
    let mut pod = first.clone();
    pod.key.name = format!("{job}-{task}-{index}");
    pod.annotations
        .insert(TASK_INDEX_KEY.into(), index.to_string());
    pod.labels.insert(TASK_INDEX_KEY.into(), index.to_string());
    pod
}

/// [`replica`] of the API object.
fn replica_object(first: &k8s::Pod, job: &str, task: &str, index: i32) -> k8s::Pod {
    let mut pod = first.clone();
    let meta = &mut pod.metadata;
    meta.name = Some(format!("{job}-{task}-{index}"));
    for map in [&mut meta.annotations, &mut meta.labels] {
        map.get_or_insert_with(BTreeMap::new)
            .insert(TASK_INDEX_KEY.into(), index.to_string());
    }
    pod
}

/// Volcano's `calcPGMinResources` (see the module documentation); `priority_of` resolves a
/// PriorityClass name to its value (unknown classes count as 0, as Volcano ignores them).
pub fn job_min_resources(
    job_min_available: i32,
    tasks: &[TaskForMinResources],
    priority_of: impl Fn(&str) -> Option<i32>,
) -> Resources {
    let mut order: Vec<&TaskForMinResources> = tasks.iter().collect();
    order.sort_by_key(|t| {
        Reverse(
            t.priority_class_name
                .as_deref()
                .and_then(&priority_of)
                .unwrap_or(0),
        )
    });
    let mut out = Resources::new();
    let add = |out: &mut Resources, task: &TaskForMinResources, count: i32| {
        out.add(&task.requests.scaled(i64::from(count), 1))
    };
    let total_min: i64 = tasks.iter().map(|t| i64::from(t.min_available)).sum();
    if i64::from(job_min_available) < total_min {
        let mut count = job_min_available;
        for task in order {
            if count <= task.replicas {
                add(&mut out, task, count);
                break;
            }
            add(&mut out, task, task.replicas);
            count -= task.replicas;
        }
        return out;
    }
    let mut placed = 0;
    for task in &order {
        let take = task.min_available.min(job_min_available - placed);
        add(&mut out, task, take);
        placed += take;
        if placed >= job_min_available {
            return out;
        }
    }
    let mut left = job_min_available - placed;
    for task in order {
        let spare = task.replicas - task.min_available;
        if spare == 0 {
            continue;
        }
        let take = spare.min(left);
        add(&mut out, task, take);
        left -= take;
        if left <= 0 {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(pc: Option<&str>, replicas: i32, min: i32, gpus: i64) -> TaskForMinResources {
        TaskForMinResources {
            priority_class_name: pc.map(str::to_string),
            replicas,
            min_available: min,
            requests: Resources::from_pairs([("nvidia.com/gpu", gpus)]),
        }
    }

    #[test]
    fn min_resources_take_the_first_pods_of_the_highest_priority_tasks() {
        // Job minAvailable 3 < sum of task minimums (2 + 4): first 3 pods, "high" task first.
        let tasks = [task(None, 4, 4, 1), task(Some("high"), 2, 2, 10)];
        let prio = |n: &str| (n == "high").then_some(100);
        assert_eq!(job_min_resources(3, &tasks, prio).gpus(), 10 + 10 + 1);
    }

    #[test]
    fn min_resources_top_up_from_spare_replicas() {
        // minimums 1 + 1 = 2 < minAvailable 4: both minimums, then spare replicas in order.
        let tasks = [task(None, 3, 1, 1), task(None, 3, 1, 100)];
        assert_eq!(job_min_resources(4, &tasks, |_| None).gpus(), 1 + 100 + 2);
    }
}
