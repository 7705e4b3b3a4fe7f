//! `phalanx serve --job-controller`: Volcano's Job controller for clusters without Volcano's
//! controllers (leave it off where they run: two controllers would fight over the pods).
//!
//! ```text
//! watch caches (every replica): Jobs (batch.volcano.sh/v1alpha1), pods labelled
//!   volcano.sh/job-name, PodGroups
//! Raft leader only, once per period:
//!   every Job ─ expand_job (the expansion simulate uses) ─▶ bad: warning Event, skipped
//!            └─ PodGroup missing? create (owned by the Job)
//!            └─ state::step(shape, status, pods) ─▶ delete / create pods, patch status
//!   pods and PodGroups owned by a Job that is gone ─▶ deleted (no garbage collector needed)
//! ```
//!
//! Everything it decides comes from the API server's objects (the Job's status holds the
//! phase and retry count), so a new leader resumes where the old one stopped; names are
//! deterministic and creates that meet an existing object are no-ops, so a restart or two
//! leaders for a moment create nothing twice.

pub mod objects;
pub mod state;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use ::kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use ::kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use ::kube::runtime::reflector::{self, Store};
use ::kube::runtime::watcher;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::events::v1 as events;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use metrics::counter;
use serde_json::json;
use tokio::runtime::Handle;

use crate::cluster::kube::{
    EventText, Regarding, describe, event_body, spawn_stream, status_code, volcano_resource,
};
use crate::manifest::volcano::job::{JOB_NAME_KEY, VolcanoJob};
use crate::manifest::volcano::{ExpandedJob, expand_job, job_min_resources};
use crate::model::ObjectKey;
use objects::{JOB_GROUP, JOB_VERSION, controlling_job, owner_reference};
use state::{JobShape, JobState, Phase, PodPhase, PodView};

/// How long one pass over the Jobs may take before the replica's loop goes on.
const PASS_TIMEOUT: Duration = Duration::from_secs(10);

pub mod metric {
    /// Pods and PodGroups the controller created / deleted, by `kind`.
    pub const CREATED: &str = "phalanx_job_controller_created_total";
    pub const DELETED: &str = "phalanx_job_controller_deleted_total";
    /// Jobs refused (warning Event written).
    pub const BAD_JOBS: &str = "phalanx_job_controller_bad_jobs_total";
    /// API writes that failed (retried next pass).
    pub const WRITE_FAILURES: &str = "phalanx_job_controller_write_failures_total";
}

/// The `ApiResource` of Volcano's Job.
pub fn job_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(JOB_GROUP, JOB_VERSION, "Job"),
        "jobs",
    )
}

pub struct JobController {
    handle: Handle,
    client: ::kube::Client,
    jobs: Store<DynamicObject>,
    pods: Store<core::Pod>,
    pod_groups: Store<DynamicObject>,
    /// Pods of other schedulers' Jobs get this name when the Job names none.
    scheduler_name: String,
    /// `reportingInstance` of its Events.
    instance: String,
    /// Jobs (uid@resourceVersion) already warned about: one Event per version.
    warned: HashSet<String>,
    /// Job uid -> (resourceVersion, status) this replica last wrote.
    written: HashMap<String, (u64, serde_json::Value)>,
}

impl std::fmt::Debug for JobController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobController")
            .field("scheduler_name", &self.scheduler_name)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl JobController {
    /// Starts the watches on `handle` (call from outside its runtime). Every replica
    /// watches, so that a new leader acts on warm caches.
    pub fn start(
        handle: Handle,
        client: ::kube::Client,
        scheduler_name: &str,
        instance: &str,
    ) -> Self {
        let job_res = job_resource();
        let pg_res = volcano_resource("PodGroup", "podgroups");
        let w_jobs = reflector::store::Writer::<DynamicObject>::new(job_res.clone());
        let w_pgs = reflector::store::Writer::<DynamicObject>::new(pg_res.clone());
        let (pods, w_pods) = reflector::store::<core::Pod>();
        let (jobs, pod_groups) = (w_jobs.as_reader(), w_pgs.as_reader());
        let labelled = watcher::Config::default().labels(JOB_NAME_KEY);
        let _enter = handle.enter();
        spawn_stream(
            &handle,
            "Job".into(),
            watcher(
                Api::all_with(client.clone(), &job_res),
                watcher::Config::default(),
            ),
            w_jobs,
        );
        spawn_stream(
            &handle,
            "PodGroup".into(),
            watcher(
                Api::all_with(client.clone(), &pg_res),
                watcher::Config::default(),
            ),
            w_pgs,
        );
        spawn_stream(
            &handle,
            "Pod".into(),
            watcher(Api::<core::Pod>::all(client.clone()), labelled),
            w_pods,
        );
        drop(_enter);
        Self {
            handle,
            client,
            jobs,
            pods,
            pod_groups,
            scheduler_name: scheduler_name.into(),
            instance: instance.into(),
            warned: HashSet::new(),
            written: HashMap::new(),
        }
    }

    /// One pass over every Job; called by the Raft leader each period. Does nothing
    /// until every cache has synced (an empty Job cache would make every pod an orphan).
    pub fn reconcile(&mut self) {
        let handle = self.handle.clone();
        let pass = async {
            if !self.synced() {
                return;
            }
            let jobs = self.jobs.state();
            let uids: BTreeSet<String> =
                jobs.iter().filter_map(|j| j.metadata.uid.clone()).collect();
            self.written.retain(|uid, _| uids.contains(uid));
            for job in jobs {
                self.reconcile_job(&job).await;
            }
            self.delete_orphans(&uids).await;
        };
        // The timer is made inside the runtime: `timeout` needs its time driver.
        let timed = async { tokio::time::timeout(PASS_TIMEOUT, pass).await };
        if handle.block_on(timed).is_err() {
            tracing::warn!(
                "a Job controller pass took over {PASS_TIMEOUT:?}; the rest waits for the next period"
            );
        }
    }

    fn synced(&self) -> bool {
        use futures::FutureExt;
        [
            self.jobs.wait_until_ready().boxed(),
            self.pod_groups.wait_until_ready().boxed(),
        ]
        .into_iter()
        .chain([self.pods.wait_until_ready().boxed()])
        .all(|f| f.now_or_never().is_some_and(|r| r.is_ok()))
    }

    async fn reconcile_job(&mut self, obj: &DynamicObject) {
        if obj.metadata.deletion_timestamp.is_some() {
            return;
        }
        let (Some(name), Some(uid)) = (obj.metadata.name.clone(), obj.metadata.uid.clone()) else {
            return;
        };
        let namespace = obj
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let expanded = match parse_and_expand(obj, &self.scheduler_name) {
            Ok(e) => e,
            Err(why) => return self.warn_once(obj, "InvalidJob", &why).await,
        };
        let (shape, expanded, notes) = expanded;
        if !notes.is_empty() {
            self.warn_once(obj, "NotActedOn", &notes.join("; ")).await;
        }
        let owner = owner_reference(&name, &uid);
        self.ensure_pod_group(&expanded, &owner).await;
        let status = self.status_of(obj, &uid);
        let phase = status
            .as_ref()
            .and_then(|s| s.pointer("/state/phase"))
            .and_then(|p| p.as_str());
        let Some(phase) = Phase::parse(phase) else {
            return;
        };
        let retry_count = status
            .as_ref()
            .and_then(|s| s.get("retryCount"))
            .and_then(|r| r.as_i64())
            .unwrap_or(0) as i32;
        let pods = self.pods_of(&namespace, &uid);
        let decision = state::step(&shape, JobState { phase, retry_count }, &pods);
        let wanted = objects::status_value(
            decision.state,
            decision.counts,
            shape.min_available,
            decision.reason.as_deref(),
        );
        // The status first: a pass acts on pods only once the phase it acts in is stored,
        // so the next pass (or the next leader) cannot act on an older one.
        if !objects::status_is_current(status.as_ref(), &wanted) {
            match self.patch_status(&namespace, &name, &wanted).await {
                Some(rv) => {
                    self.written.insert(uid.clone(), (rv, wanted));
                }
                None => return,
            }
        }
        for pod in &decision.delete {
            self.delete_pod(&namespace, pod).await;
        }
        for pod in &decision.create {
            if let Some(object) = objects::pod_object(&expanded, pod, &owner) {
                self.create_pod(&namespace, &object).await;
            }
        }
    }

    /// The Job's status: the one this replica last wrote while the watch cache still holds
    /// an older version of the Job (a pass must not act on a phase it has already left),
    /// else the cache's.
    fn status_of(&mut self, obj: &DynamicObject, uid: &str) -> Option<serde_json::Value> {
        let cached = resource_version(&obj.metadata);
        match self.written.get(uid) {
            Some((rv, status)) if cached < Some(*rv) => Some(status.clone()),
            _ => {
                self.written.remove(uid);
                obj.data.get("status").cloned()
            }
        }
    }

    /// The Job's existing pods (those it controls), by name.
    fn pods_of(&self, namespace: &str, uid: &str) -> BTreeMap<String, PodView> {
        self.pods
            .state()
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(namespace))
            .filter(|p| controlling_job(p.metadata.owner_references.as_ref()) == Some(uid))
            .filter_map(|p| Some((p.metadata.name.clone()?, pod_view(p))))
            .collect()
    }

    async fn ensure_pod_group(&self, expanded: &ExpandedJob, owner: &OwnerReference) {
        let key = &expanded.pod_group.key;
        let exists = self.pod_groups.state().iter().any(|pg| {
            pg.metadata.name.as_deref() == Some(key.name.as_str())
                && pg.metadata.namespace.as_deref() == Some(key.namespace.as_str())
        });
        if exists {
            return;
        }
        let min_resources = self.min_resources(expanded).await;
        let body = objects::pod_group_object(expanded, &min_resources, owner);
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &key.namespace,
            &volcano_resource("PodGroup", "podgroups"),
        );
        let result = match serde_json::from_value::<DynamicObject>(body) {
            Ok(obj) => api.create(&PostParams::default(), &obj).await.map(|_| ()),
            Err(e) => {
                return tracing::warn!(podgroup = %key, error = %e, "cannot build the PodGroup");
            }
        };
        self.record_write("PodGroup", &key.to_string(), result, metric::CREATED);
    }

    /// Volcano's minResources, with the cluster's PriorityClasses (read when a PodGroup is
    /// created, which is once per Job).
    async fn min_resources(&self, expanded: &ExpandedJob) -> crate::model::Resources {
        let classes = Api::<PriorityClass>::all(self.client.clone())
            .list(&Default::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let priority_of = |name: &str| {
            classes
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(name))
                .and_then(|c| c.value)
        };
        job_min_resources(
            expanded.pod_group.min_member as i32,
            &expanded.tasks,
            priority_of,
        )
    }

    async fn create_pod(&self, namespace: &str, pod: &core::Pod) {
        let api: Api<core::Pod> = Api::namespaced(self.client.clone(), namespace);
        let name = format!("{namespace}/{}", pod.metadata.name.as_deref().unwrap_or(""));
        let result = api.create(&PostParams::default(), pod).await.map(|_| ());
        self.record_write("Pod", &name, result, metric::CREATED);
    }

    async fn delete_pod(&self, namespace: &str, name: &str) {
        let api: Api<core::Pod> = Api::namespaced(self.client.clone(), namespace);
        let result = api.delete(name, &DeleteParams::default()).await.map(|_| ());
        self.record_write(
            "Pod",
            &format!("{namespace}/{name}"),
            result,
            metric::DELETED,
        );
    }

    /// Writes the Job's status; returns the Job's new resourceVersion.
    async fn patch_status(
        &self,
        namespace: &str,
        name: &str,
        status: &serde_json::Value,
    ) -> Option<u64> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &job_resource());
        let patch = Patch::Merge(json!({ "status": status }));
        match api
            .patch_status(name, &PatchParams::default(), &patch)
            .await
        {
            Ok(job) => Some(resource_version(&job.metadata).unwrap_or(0)),
            Err(e) => {
                counter!(metric::WRITE_FAILURES).increment(1);
                tracing::warn!(job = %format!("{namespace}/{name}"), error = %describe(&e), "writing the Job's status failed; retried next pass");
                None
            }
        }
    }

    /// Logs and counts a create or delete; "already exists" / "not found" are what a
    /// repeated pass meets and count as done.
    fn record_write(
        &self,
        kind: &'static str,
        name: &str,
        result: Result<(), ::kube::Error>,
        metric: &'static str,
    ) {
        match result {
            Ok(()) => {
                counter!(metric, "kind" => kind).increment(1);
                tracing::info!(kind, object = %name, action = metric, "job controller write");
            }
            Err(e) if matches!(status_code(&e), Some(404 | 409)) => {}
            Err(e) => {
                counter!(metric::WRITE_FAILURES).increment(1);
                tracing::warn!(kind, object = %name, error = %describe(&e), "job controller write failed; retried next pass");
            }
        }
    }

    /// Deletes pods and PodGroups whose controlling Job no longer exists: what the garbage
    /// collector does where kube-controller-manager runs, and nothing where it already did.
    async fn delete_orphans(&self, uids: &BTreeSet<String>) {
        let orphan = |meta: &ObjectMeta| {
            meta.deletion_timestamp.is_none()
                && controlling_job(meta.owner_references.as_ref())
                    .is_some_and(|u| !uids.contains(u))
        };
        for pod in self.pods.state().iter().filter(|p| orphan(&p.metadata)) {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            self.delete_pod(&ns, pod.metadata.name.as_deref().unwrap_or(""))
                .await;
        }
        let pg_res = volcano_resource("PodGroup", "podgroups");
        for pg in self
            .pod_groups
            .state()
            .iter()
            .filter(|p| orphan(&p.metadata))
        {
            let ns = pg.metadata.namespace.clone().unwrap_or_default();
            let name = pg.metadata.name.clone().unwrap_or_default();
            let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &ns, &pg_res);
            let result = api
                .delete(&name, &DeleteParams::default())
                .await
                .map(|_| ());
            self.record_write("PodGroup", &format!("{ns}/{name}"), result, metric::DELETED);
        }
    }

    /// A warning Event on the Job, once per version of it.
    async fn warn_once(&mut self, obj: &DynamicObject, reason: &str, note: &str) {
        let meta = &obj.metadata;
        let seen = format!(
            "{}@{}:{reason}",
            meta.uid.as_deref().unwrap_or(""),
            meta.resource_version.as_deref().unwrap_or("")
        );
        if !self.warned.insert(seen) {
            return;
        }
        counter!(metric::BAD_JOBS).increment(1);
        let namespace = meta.namespace.clone().unwrap_or_else(|| "default".into());
        let name = meta.name.clone().unwrap_or_default();
        tracing::warn!(job = %format!("{namespace}/{name}"), reason, note, "Job not acted on as written");
        let regarding = Regarding::Job(ObjectKey::new(&namespace, &name));
        let text = EventText {
            action: "Expand",
            kind: "Warning",
            reason: reason.into(),
            note: note.into(),
        };
        let now = k8s_openapi::jiff::Timestamp::now();
        let body = event_body(&regarding, meta.uid.as_deref(), &text, &self.instance, now);
        let api: Api<events::Event> = Api::namespaced(self.client.clone(), &namespace);
        if let Err(e) = api.create(&PostParams::default(), &body).await {
            tracing::warn!(job = %name, error = %describe(&e), "recording the Job's warning Event failed");
        }
    }
}

/// The Job read with the same types `simulate` reads, and expanded by the same function;
/// an error names the Job, the field and the value.
fn parse_and_expand(
    obj: &DynamicObject,
    scheduler_name: &str,
) -> Result<(JobShape, ExpandedJob, Vec<String>), String> {
    let name = format!(
        "Job {}/{}",
        obj.metadata.namespace.as_deref().unwrap_or("default"),
        obj.metadata.name.as_deref().unwrap_or("")
    );
    let value = serde_json::to_value(obj).map_err(|e| format!("{name}: {e}"))?;
    let (job, mut warnings) = read_job(value).map_err(|e| format!("{name}: {e}"))?;
    let expanded =
        expand_job(&job, scheduler_name, &mut warnings).map_err(|e| format!("{name}: {e}"))?;
    let (shape, notes) = objects::job_shape(&job, &expanded);
    warnings.extend(notes);
    Ok((shape, expanded, warnings))
}

/// Unknown fields listed in one warning; the rest are counted.
const UNKNOWN_FIELDS_LISTED: usize = 8;

/// The Job as its types read it, and a warning for the fields they do not have. The API
/// server prunes unknown fields from the rest of a Job, but keeps a task's `template` (and
/// `volumes`, `dependsOn`, `partitionPolicy`, `networkTopology`) as written, so a typo
/// there (`imagePullPolicyy`) would otherwise be dropped without a word when the pods are
/// made; `simulate` warns about the same field in a file (`manifest::unknown_fields`).
fn read_job(value: serde_json::Value) -> Result<(VolcanoJob, Vec<String>), serde_json::Error> {
    use crate::manifest::unknown_fields::ROOT_FIELDS_READ_ELSEWHERE;
    let mut unknown = Vec::new();
    let job = serde_ignored::deserialize(value, |path| {
        let path = field_path(&path);
        if !ROOT_FIELDS_READ_ELSEWHERE.contains(&path.as_str()) {
            unknown.push(path);
        }
    })?;
    let mut warnings = Vec::new();
    if !unknown.is_empty() {
        let more = unknown.len().saturating_sub(UNKNOWN_FIELDS_LISTED);
        unknown.truncate(UNKNOWN_FIELDS_LISTED);
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        warnings.push(format!(
            "unknown field(s) {}{more}: not part of a Volcano Job or a pod template, so the \
             controller leaves them out of the pods it creates",
            unknown.join(", ")
        ));
    }
    Ok((job, warnings))
}

/// `spec.tasks[0].template`, as the loader writes paths (serde_ignored's own display adds a
/// `?` for every optional field on the way).
fn field_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", field_path(parent)),
        Path::Map { parent, key } => match field_path(parent) {
            p if p.is_empty() => key.clone(),
            p => format!("{p}.{key}"),
        },
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => field_path(parent),
    }
}

/// resourceVersion as the number etcd gives it (as the scheduler's status overlay reads it).
fn resource_version(meta: &ObjectMeta) -> Option<u64> {
    meta.resource_version.as_deref()?.parse().ok()
}

fn pod_view(pod: &core::Pod) -> PodView {
    let status = pod.status.as_ref();
    let labels = pod.metadata.labels.as_ref();
    PodView {
        task: labels
            .and_then(|l| l.get(crate::model::TASK_SPEC_ANNOTATION))
            .cloned()
            .unwrap_or_default(),
        phase: PodPhase::parse(status.and_then(|s| s.phase.as_deref())),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        evicted: status.and_then(|s| s.reason.as_deref()) == Some("Evicted"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job_with_template(container: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u1", "resourceVersion": "5"},
            "spec": {"minAvailable": 1, "tasks": [{"name": "w", "replicas": 1,
                "template": {"spec": {"containers": [container]}}}]},
            "status": {"state": {"phase": "Pending"}},
        }))
        .expect("a Job")
    }

    #[test]
    fn an_unknown_field_in_a_task_template_is_warned_about_by_its_path() {
        let obj = job_with_template(json!({"name": "c", "imagePullPolicyy": "Always"}));
        let (_, expanded, warnings) = parse_and_expand(&obj, "phalanx").expect("the Job reads");
        assert_eq!(expanded.pods.len(), 1);
        let [warning] = warnings.as_slice() else {
            panic!("{warnings:?}")
        };
        assert!(
            warning.contains("spec.tasks[0].template.spec.containers[0].imagePullPolicyy"),
            "{warning}"
        );
        // The Job's status (written by the controller) and its header are not unknown.
        let obj = job_with_template(json!({"name": "c"}));
        let (_, _, warnings) = parse_and_expand(&obj, "phalanx").expect("the Job reads");
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn a_template_of_many_unknown_fields_lists_a_few_and_counts_the_rest() {
        let mut container = serde_json::Map::new();
        container.insert("name".into(), json!("c"));
        for i in 0..1000 {
            container.insert(format!("typo{i:04}"), json!(i));
        }
        let obj = job_with_template(serde_json::Value::Object(container));
        let (_, _, warnings) = parse_and_expand(&obj, "phalanx").expect("the Job reads");
        let [warning] = warnings.as_slice() else {
            panic!("{warnings:?}")
        };
        assert!(
            warning.contains("typo0007") && !warning.contains("typo0008"),
            "{warning}"
        );
        assert!(warning.contains("and 992 more"), "{warning}");
    }
}
