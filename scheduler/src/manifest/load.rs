//! The loader: documents in, a checked [`Workload`] out.
//!
//! Each document is read for its `apiVersion`/`kind` first, then as the type they name;
//! objects are converted as they come (so `creation_index` is document order) and checked
//! across the whole input at the end (references, duplicates, sums that must fit in
//! `i64`, a Job's minResources, which needs every PriorityClass).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::scheduling::v1 as scheduling;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::checks;
use super::conf_position::conf_error_in_file;
use super::convert::{
    UNHONOURED_CONSTRAINT, node_from_k8s, pod_from_k8s, priority_class_from_k8s,
    unhonoured_constraints,
};
use super::document::{Document, Header, split_documents, text};
use super::error::{DocLocation, FieldError, ManifestError, Problem};
use super::expectation::ExpectationDoc;
use super::quantity_text::SkippedField;
use super::scheduler_conf::parse_scheduler_conf;
use super::unknown_fields::{unknown_field_error, unknown_fields};
use super::volcano::job::TaskForMinResources;
use super::volcano::{
    VolcanoJob, VolcanoPodGroup, VolcanoQueue, expand_job, job_min_resources,
    pod_group_from_volcano, queue_from_volcano,
};
use super::workload::Workload;
use crate::model::{
    DEFAULT_QUEUE, DEFAULT_SCHEDULER_NAME, GROUP_NAME_ANNOTATION, Pod, PodGroup, Queue,
};

/// The ConfigMap key Volcano reads its configuration from.
pub const SCHEDULER_CONF_KEY: &str = "volcano-scheduler.conf";

/// How to load.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// The scheduler name phalanx answers to; pods without `schedulerName` get it.
    pub scheduler_name: String,
    /// Refuse a scheduler configuration that names actions or plugins phalanx lacks, and
    /// manifests with fields phalanx's types do not have (otherwise each is a warning).
    pub strict_config: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            scheduler_name: DEFAULT_SCHEDULER_NAME.to_string(),
            strict_config: false,
        }
    }
}

/// Loads one multi-document YAML text.
pub fn load_workload(text: &str, opts: &LoadOptions) -> Result<Workload, ManifestError> {
    let mut loader = Loader::new(opts);
    loader.add_text(text, None)?;
    loader.finish()
}

/// Largest scenario file read: a bound on memory (the parsed objects take a small multiple
/// of the text) checked before the file is read whole, and while reading (a FIFO or
/// `/dev/zero` has no size to check).
pub const MAX_SCENARIO_BYTES: u64 = 16 * 1024 * 1024;

/// Most cycles an Expectation may ask for (`spec.cycles`); the same bound stops a run
/// until quiescent.
pub const MAX_SCENARIO_CYCLES: u32 = 100_000;

/// Most pods one input may hold, its Pods and the pods its Jobs create together. The file
/// bound does not bound these: a Job of 4,096 replicas is 300 bytes of text, and 60 such
/// Jobs (18 KB) made 245,760 pods and 719 MB of resident memory in one `simulate` run.
/// 100,000 is the largest workload the benchmarks run from a file's scale (docs/security.md).
pub const MAX_SCENARIO_PODS: usize = 100_000;

/// Loads several files as one input, in order; document indices continue across files.
pub fn load_workload_files<P: AsRef<Path>>(
    paths: &[P],
    opts: &LoadOptions,
) -> Result<Workload, ManifestError> {
    let mut loader = Loader::new(opts);
    for path in paths {
        let name = path.as_ref().display().to_string();
        let text = read_bounded(path.as_ref()).map_err(|problem| {
            let at = DocLocation {
                file: Some(name.clone()),
                ..DocLocation::default()
            };
            ManifestError::new(at, None, problem)
        })?;
        loader.add_text(&text, Some(&name))?;
    }
    loader.finish()
}

/// The file's text, refused past `MAX_SCENARIO_BYTES` or when it is not UTF-8.
fn read_bounded(path: &Path) -> Result<String, Problem> {
    let too_large = |size: u64| {
        Problem::Read(format!(
            "it is {size} bytes or more; a scenario may be at most {MAX_SCENARIO_BYTES} bytes"
        ))
    };
    let file = std::fs::File::open(path).map_err(|e| Problem::Read(e.to_string()))?;
    let size = file
        .metadata()
        .map_err(|e| Problem::Read(e.to_string()))?
        .len();
    if size > MAX_SCENARIO_BYTES {
        return Err(too_large(size));
    }
    let mut bytes = Vec::new();
    file.take(MAX_SCENARIO_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Problem::Read(e.to_string()))?;
    if bytes.len() as u64 > MAX_SCENARIO_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|e| {
        Problem::Read(format!(
            "it is not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// Where an object came from, for duplicate and cross-object errors.
#[derive(Clone, Debug)]
pub(crate) struct Origin {
    pub at: DocLocation,
    pub object: String,
}

/// A Job whose PodGroup still needs its minResources.
struct PendingJob {
    pod_group: usize,
    min_available: i32,
    tasks: Vec<TaskForMinResources>,
}

pub(crate) struct Loader<'o> {
    opts: &'o LoadOptions,
    next_doc: usize,
    next_creation: u64,
    pub(crate) out: Workload,
    /// (kind, key) → where it was declared.
    pub(crate) origins: BTreeMap<(&'static str, String), Origin>,
    jobs: Vec<PendingJob>,
}

impl<'o> Loader<'o> {
    fn new(opts: &'o LoadOptions) -> Self {
        let out = Workload {
            nodes: Vec::new(),
            pods: Vec::new(),
            pod_groups: Vec::new(),
            queues: Vec::new(),
            priority_classes: Vec::new(),
            scheduler_conf: None,
            expectation: None,
            warnings: Vec::new(),
            ignored: Vec::new(),
            scheduler_name: opts.scheduler_name.clone(),
        };
        Self {
            opts,
            next_doc: 0,
            next_creation: 1,
            out,
            origins: BTreeMap::new(),
            jobs: Vec::new(),
        }
    }

    fn add_text(&mut self, text: &str, file: Option<&str>) -> Result<(), ManifestError> {
        for chunk in split_documents(text) {
            let mut doc = Document {
                chunk,
                at: DocLocation {
                    file: file.map(str::to_string),
                    index: None,
                    line: Some(chunk.content_line()),
                },
            };
            let header: Result<Option<Header>, Problem> = doc.read();
            if let Ok(None) = header {
                continue;
            }
            doc.at.index = Some(self.next_doc);
            self.next_doc += 1;
            let header = header
                .map_err(|p| ManifestError::new(doc.at.clone(), None, p))?
                .unwrap_or_default();
            self.add_document(&doc, &header)?;
        }
        Ok(())
    }

    fn add_document(&mut self, doc: &Document<'_>, header: &Header) -> Result<(), ManifestError> {
        let fail = |problem| ManifestError::new(doc.at.clone(), None, problem);
        let api_version = text(&header.api_version).ok_or_else(|| {
            fail(Problem::MissingKind {
                missing: "apiVersion",
            })
        })?;
        let kind =
            text(&header.kind).ok_or_else(|| fail(Problem::MissingKind { missing: "kind" }))?;
        let ctx = DocContext {
            doc,
            object: describe(kind, header, namespaced(api_version, kind)),
            strict: self.opts.strict_config,
            unknown: RefCell::new(Vec::new()),
        };
        if let Err(mut err) = self.add_object(&ctx, api_version, kind) {
            // A typo is often the cause (`replica: 2` leaves a task without pods).
            note_unknown_fields(&mut err, &ctx.unknown.take());
            return Err(err);
        }
        for field in ctx.unknown.take() {
            let warning = unknown_field_error(&field, false).to_string();
            self.warn(&ctx, &warning);
        }
        Ok(())
    }

    fn add_object(
        &mut self,
        ctx: &DocContext<'_, '_>,
        api_version: &str,
        kind: &str,
    ) -> Result<(), ManifestError> {
        let doc = ctx.doc;
        match (api_version, kind) {
            ("v1", "Node") => self.add_node(ctx),
            ("v1", "Pod") => self.add_pod(ctx),
            ("v1", "ConfigMap") => self.add_config_map(ctx),
            ("scheduling.k8s.io/v1", "PriorityClass") => self.add_priority_class(ctx),
            ("scheduling.volcano.sh/v1beta1", "PodGroup") => self.add_pod_group(ctx),
            ("scheduling.volcano.sh/v1beta1", "Queue") => self.add_queue(ctx),
            ("batch.volcano.sh/v1alpha1", "Job") => self.add_job(ctx),
            ("phalanx.dev/v1alpha1", "Expectation") => self.add_expectation(ctx),
            _ => Err(ManifestError::new(
                doc.at.clone(),
                None,
                Problem::UnknownKind {
                    api_version: api_version.to_string(),
                    kind: kind.to_string(),
                },
            )),
        }
    }

    fn creation(&mut self) -> u64 {
        let index = self.next_creation;
        self.next_creation += 1;
        index
    }

    /// Records where `kind`/`key` came from; a second declaration is an error.
    fn claim(
        &mut self,
        ctx: &DocContext<'_, '_>,
        kind: &'static str,
        key: String,
        object: String,
    ) -> Result<(), ManifestError> {
        if let Some(first) = self.origins.get(&(kind, key.clone())) {
            // Singletons (the Expectation, the scheduler configuration) are claimed
            // without a name.
            let what = if key.is_empty() {
                format!("{kind} is declared twice (a scenario holds only one);")
            } else {
                format!("{kind} {key} is declared twice;")
            };
            let problem = Problem::Invalid(format!("{what} the first is in {}", first.at));
            return Err(ManifestError::new(
                ctx.doc.at.clone(),
                Some(object),
                problem,
            ));
        }
        self.origins.insert(
            (kind, key),
            Origin {
                at: ctx.doc.at.clone(),
                object,
            },
        );
        Ok(())
    }

    fn add_node(&mut self, ctx: &DocContext<'_, '_>) -> Result<(), ManifestError> {
        let raw: core::Node = ctx.read()?;
        let node = node_from_k8s(&raw).map_err(|e| ctx.field(e))?;
        checks::check_name("metadata.name", &node.name)
            .and_then(|()| checks::check_labels("metadata.labels", &node.labels))
            .map_err(|e| ctx.field(e))?;
        self.claim(
            ctx,
            "Node",
            node.name.clone(),
            format!("Node {}", node.name),
        )?;
        if node.allocatable.is_zero() {
            self.warn(ctx, "the node lists no status.allocatable or status.capacity resources; nothing fits on it");
        }
        self.out.nodes.push(node);
        Ok(())
    }

    fn add_pod(&mut self, ctx: &DocContext<'_, '_>) -> Result<(), ManifestError> {
        let raw: core::Pod = ctx.read()?;
        let mut pod = pod_from_k8s(&raw, &self.opts.scheduler_name).map_err(|e| ctx.field(e))?;
        check_pod_fields(&pod, "")
            .and_then(|()| check_group_annotation(&raw.metadata))
            .and_then(|()| self.check_room_for_pods(1, "metadata.name"))
            .map_err(|e| ctx.field(e))?;
        pod.creation_index = self.creation();
        self.claim(ctx, "Pod", pod.key.to_string(), format!("Pod {}", pod.key))?;
        for field in raw.spec.iter().flat_map(unhonoured_constraints) {
            self.warn(ctx, &format!("{field} {UNHONOURED_CONSTRAINT}"));
        }
        self.out.pods.push(pod);
        Ok(())
    }

    /// `more` pods fit under [`MAX_SCENARIO_PODS`] with those loaded so far.
    fn check_room_for_pods(&self, more: usize, field: &str) -> Result<(), FieldError> {
        let total = self.out.pods.len() + more;
        if total <= MAX_SCENARIO_PODS {
            return Ok(());
        }
        Err(FieldError::new(
            field,
            format!(
                "its {more} pod(s) would make {total} pods in the input, more than the \
                 {MAX_SCENARIO_PODS} one input may hold (a bound on the memory a run takes)"
            ),
        ))
    }

    fn add_priority_class(&mut self, ctx: &DocContext<'_, '_>) -> Result<(), ManifestError> {
        let raw: scheduling::PriorityClass = ctx.read()?;
        let pc = priority_class_from_k8s(&raw).map_err(|e| ctx.field(e))?;
        checks::check_name("metadata.name", &pc.name).map_err(|e| ctx.field(e))?;
        self.claim(
            ctx,
            "PriorityClass",
            pc.name.clone(),
            format!("PriorityClass {}", pc.name),
        )?;
        if pc.global_default
            && let Some(other) = self.out.priority_classes.iter().find(|p| p.global_default)
        {
            let problem = Problem::Invalid(format!(
                "globalDefault is already set by PriorityClass {}; only one class may set it",
                other.name
            ));
            return Err(ctx.error(problem));
        }
        self.out.priority_classes.push(pc);
        Ok(())
    }

    fn add_pod_group(&mut self, ctx: &DocContext<'_, '_>) -> Result<(), ManifestError> {
        let raw: VolcanoPodGroup = ctx.read()?;
        let mut warnings = Vec::new();
        let mut pg = pod_group_from_volcano(&raw, &mut warnings).map_err(|e| ctx.field(e))?;
        checks::check_name("metadata.name", &pg.key.name)
            .and_then(|()| checks::check_namespace("metadata.namespace", &pg.key.namespace))
            .and_then(|()| checks::check_gang_size("spec.minMember", pg.min_member))
            .map_err(|e| ctx.field(e))?;
        pg.creation_index = self.creation();
        self.claim(
            ctx,
            "PodGroup",
            pg.key.to_string(),
            format!("PodGroup {}", pg.key),
        )?;
        warnings.extend(checks::timeout_annotation_warnings(&pg.annotations));
        warnings.iter().for_each(|w| self.warn(ctx, w));
        self.out.pod_groups.push(pg);
        Ok(())
    }

    fn add_queue(&mut self, ctx: &DocContext<'_, '_>) -> Result<(), ManifestError> {
        let raw: VolcanoQueue = ctx.read()?;
        let mut warnings = Vec::new();
        let mut queue = queue_from_volcano(&raw, &mut warnings).map_err(|e| ctx.field(e))?;
        checks::check_name("metadata.name", &queue.name).map_err(|e| ctx.field(e))?;
        queue.creation_index = self.creation();
        self.claim(
            ctx,
            "Queue",
            queue.name.clone(),
            format!("Queue {}", queue.name),
        )?;
        warnings.iter().for_each(|w| self.warn(ctx, w));
        self.out.queues.push(queue);
        Ok(())
    }

    fn add_job(&mut self, ctx: &DocContext<'_, '_>) -> Result<(), ManifestError> {
        let raw: VolcanoJob = ctx.read()?;
        let mut warnings = Vec::new();
        let expanded =
            expand_job(&raw, &self.opts.scheduler_name, &mut warnings).map_err(|e| ctx.field(e))?;
        check_job_sizes_and_names(&expanded.pod_group, &expanded.pods)
            .and_then(|()| self.check_room_for_pods(expanded.pods.len(), "spec.tasks"))
            .map_err(|e| ctx.field(e))?;
        let job_key = expanded.pod_group.key.to_string();
        self.claim(ctx, "Job", job_key.clone(), format!("Job {job_key}"))?;
        let mut pg = expanded.pod_group;
        pg.creation_index = self.creation();
        self.claim(
            ctx,
            "PodGroup",
            job_key.clone(),
            format!("PodGroup {job_key} (from Job {job_key})"),
        )?;
        self.jobs.push(PendingJob {
            pod_group: self.out.pod_groups.len(),
            min_available: pg.min_member as i32,
            tasks: expanded.tasks,
        });
        self.out.pod_groups.push(pg);
        for mut pod in expanded.pods {
            pod.creation_index = self.creation();
            self.claim(
                ctx,
                "Pod",
                pod.key.to_string(),
                format!("Pod {} (from Job {job_key})", pod.key),
            )?;
            self.out.pods.push(pod);
        }
        warnings.extend(job_unhonoured_constraints(&raw));
        warnings.iter().for_each(|w| self.warn(ctx, w));
        Ok(())
    }

    fn add_config_map(&mut self, ctx: &DocContext<'_, '_>) -> Result<(), ManifestError> {
        let raw: core::ConfigMap = ctx.read()?;
        let Some(text) = raw.data.as_ref().and_then(|d| d.get(SCHEDULER_CONF_KEY)) else {
            self.out.ignored.push(format!(
                "{}, {}: no `{SCHEDULER_CONF_KEY}` key; ignored",
                ctx.doc.at, ctx.object
            ));
            return Ok(());
        };
        self.claim(
            ctx,
            "scheduler configuration",
            String::new(),
            ctx.object.clone(),
        )?;
        let (conf, warnings) = parse_scheduler_conf(text, self.opts.strict_config)
            .map_err(|e| ctx.error(Problem::Conf(conf_error_in_file(e, ctx.doc.chunk))))?;
        for w in &warnings {
            self.warn(ctx, &format!("{SCHEDULER_CONF_KEY}: {w}"));
        }
        self.out.scheduler_conf = Some(conf);
        Ok(())
    }

    fn add_expectation(&mut self, ctx: &DocContext<'_, '_>) -> Result<(), ManifestError> {
        let raw: ExpectationDoc = ctx.read()?;
        let expectation = raw.to_expectation().map_err(|e| ctx.field(e))?;
        if expectation.cycles > MAX_SCENARIO_CYCLES {
            return Err(ctx.field(FieldError::new(
                "spec.cycles",
                format!(
                    "{} is more cycles than a scenario may run (at most {MAX_SCENARIO_CYCLES}, \
                     the bound on a run until quiescent)",
                    expectation.cycles
                ),
            )));
        }
        self.claim(ctx, "Expectation", String::new(), ctx.object.clone())?;
        self.out.expectation = Some(expectation);
        Ok(())
    }

    pub(crate) fn warn(&mut self, ctx: &DocContext<'_, '_>, message: &str) {
        self.out
            .warnings
            .push(format!("{}, {}: {message}", ctx.doc.at, ctx.object));
    }

    fn finish(mut self) -> Result<Workload, ManifestError> {
        if !self.out.queues.iter().any(|q| q.name == DEFAULT_QUEUE) {
            self.out.queues.insert(0, Queue::new(DEFAULT_QUEUE));
        }
        super::checks::check_sums_fit(&self)?;
        super::checks::check_queue_hierarchy(&self)?;
        super::checks::check_pods_per_gang(&self)?;
        self.fill_job_min_resources();
        super::checks::warn_about_references(&mut self.out, &self.origins);
        Ok(self.out)
    }

    fn fill_job_min_resources(&mut self) {
        let classes = &self.out.priority_classes;
        let priority_of = |name: &str| classes.iter().find(|c| c.name == name).map(|c| c.value);
        for job in &self.jobs {
            let min = job_min_resources(job.min_available, &job.tasks, priority_of);
            self.out.pod_groups[job.pod_group].min_resources = Some(min);
        }
    }
}

/// One warning per task template carrying a constraint phalanx does not evaluate.
fn job_unhonoured_constraints(job: &VolcanoJob) -> Vec<String> {
    let tasks = job.spec.iter().flat_map(|s| s.tasks.iter().flatten());
    tasks
        .enumerate()
        .flat_map(|(i, task)| {
            let spec = task.template.as_ref().and_then(|t| t.spec.as_ref());
            spec.map(unhonoured_constraints)
                .unwrap_or_default()
                .into_iter()
                .map(move |field| {
                    format!("spec.tasks[{i}].template.{field} {UNHONOURED_CONSTRAINT}")
                })
        })
        .collect()
}

/// Adds the document's unknown fields to an error about it.
fn note_unknown_fields(err: &mut ManifestError, unknown: &[SkippedField]) {
    if unknown.is_empty() {
        return;
    }
    let notes: Vec<String> = unknown
        .iter()
        .map(|f| unknown_field_error(f, false).to_string())
        .collect();
    let note = format!(
        " (the document also has unknown fields: {})",
        notes.join("; ")
    );
    match err.problem.as_mut() {
        Problem::Field(field) => field.problem.push_str(&note),
        Problem::Invalid(message) => message.push_str(&note),
        _ => {}
    }
}

/// A pod's name, namespace and labels within Kubernetes' bounds; `prefix` says which
/// generated pod it is, for a Job's.
fn check_pod_fields(pod: &Pod, prefix: &str) -> Result<(), FieldError> {
    checks::check_name("metadata.name", &pod.key.name)
        .and_then(|()| checks::check_namespace("metadata.namespace", &pod.key.namespace))
        .and_then(|()| checks::check_labels("metadata.labels", &pod.labels))
        .map_err(|e| e.under(prefix))
}

/// `scheduling.k8s.io/group-name: ""` names no PodGroup: refused rather than read as a
/// pod without a gang (which would be bound alone).
fn check_group_annotation(meta: &ObjectMeta) -> Result<(), FieldError> {
    let group = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(GROUP_NAME_ANNOTATION));
    if group.is_some_and(|g| g.trim().is_empty()) {
        return Err(FieldError::new(
            format!("metadata.annotations[{GROUP_NAME_ANNOTATION}]"),
            "is empty; name the pod's PodGroup or remove the annotation",
        ));
    }
    Ok(())
}

/// A Job's gang (its `minAvailable`; `expand_job` bounds its pod count) fits the ledger,
/// and the names it generates fit Kubernetes.
fn check_job_sizes_and_names(pg: &PodGroup, pods: &[Pod]) -> Result<(), FieldError> {
    checks::check_name("metadata.name", &pg.key.name)?;
    checks::check_namespace("metadata.namespace", &pg.key.namespace)?;
    checks::check_gang_size("spec.minAvailable", pg.min_member)?;
    for pod in pods {
        check_pod_fields(
            pod,
            &format!("spec.tasks (generated pod {}): ", pod.key.name),
        )?;
    }
    Ok(())
}

/// One document being loaded, with the name of its object for messages.
pub(crate) struct DocContext<'d, 't> {
    doc: &'d Document<'t>,
    object: String,
    /// Unknown fields are errors, not warnings.
    strict: bool,
    /// The unknown fields of the typed read, warned about once the object loaded.
    unknown: RefCell<Vec<SkippedField>>,
}

impl<'t> DocContext<'_, 't> {
    /// The document as `T`; its unknown fields are kept for warnings, or refused in strict
    /// mode.
    fn read<T: serde::Deserialize<'t>>(&self) -> Result<T, ManifestError> {
        let (value, skipped) = self.doc.read_noting_unknown().map_err(|p| self.error(p))?;
        let unknown = unknown_fields(skipped);
        if self.strict
            && let Some(first) = unknown.first()
        {
            return Err(self.field(unknown_field_error(first, true)));
        }
        self.unknown.replace(unknown);
        Ok(value)
    }

    fn field(&self, e: FieldError) -> ManifestError {
        self.error(Problem::Field(e))
    }

    fn error(&self, problem: Problem) -> ManifestError {
        ManifestError::new(self.doc.at.clone(), Some(self.object.clone()), problem)
    }
}

fn namespaced(api_version: &str, kind: &str) -> bool {
    !matches!(
        (api_version, kind),
        ("v1", "Node")
            | ("scheduling.k8s.io/v1", "PriorityClass")
            | ("scheduling.volcano.sh/v1beta1", "Queue")
    )
}

/// `Kind namespace/name`, `Kind name`, or `Kind (unnamed)`.
fn describe(kind: &str, header: &Header, namespaced: bool) -> String {
    let meta = header.metadata.as_ref();
    let name = meta.and_then(|m| text(&m.name));
    let namespace = meta.and_then(|m| text(&m.namespace)).unwrap_or("default");
    match name {
        Some(name) if namespaced => format!("{kind} {namespace}/{name}"),
        Some(name) => format!("{kind} {name}"),
        None => format!("{kind} (unnamed)"),
    }
}
