//! The Kubernetes backend of the [`Cluster`] seam: watch caches of the API server's objects,
//! and the writes a scheduler makes.
//!
//! ```text
//!            watch (kube-runtime watcher + reflector, restarted with backoff)
//! API server ────────────────────────────────────────────▶ stores: Node, CachedPod (every pod,
//!     ▲                                                    converted as read), PodGroup,
//!     │ token buckets (qps/burst) + bounded retries        Queue, PriorityClass
//!     │   pods/binding, PodGroup merge patch,                       ▼ snapshot(): convert the rest
//!     └── events.k8s.io/v1 Event, Eviction  ◀──────────── scheduler (Cluster trait)
//! ```
//!
//! - Every pod is watched: pods of other schedulers hold resources and are accounted; only
//!   pods whose `schedulerName` is ours are placed (the framework decides that).
//! - [`KubeCluster::connect`] returns only after every store has synced (its first list is
//!   complete), so a cycle never sees a partial cluster (the failure of Volcano issue #5174).
//! - PodGroup and Queue are read as `DynamicObject`s of `scheduling.volcano.sh/v1beta1` and
//!   converted with the manifest module's Volcano types; a malformed object is skipped and
//!   never blocks the others. It is told once per version of it (`recorder.rs`): a log line
//!   here, and a Warning Event the caller writes ([`KubeCluster::write_object_warnings`]).
//! - Statuses and Events go through `reporter.rs` on a token bucket of their own;
//!   [`KubeCluster::report_in_background`] queues a batch for one background task and
//!   returns at once (batches written in order, a backlog's statuses coalesced per
//!   PodGroup), so they never hold up a cycle or a bind; [`KubeCluster::report_all`]
//!   waits for the queue, then writes.
//! - PodGroup status: the CRD, like Volcano's, has no status subresource, so the status is
//!   written with a JSON merge patch of the object itself (no resourceVersion: no conflict).
//! - Bind is idempotent: a pod already bound to the requested node is Ok; to another node is
//!   `AlreadyBound`. A 409 from the binding is resolved by re-reading the pod.
//! - The caches lag the writes by a watch round trip. Binds and status writes made here are
//!   overlaid on the snapshot until the cache shows them, so the next cycle neither places a
//!   bound pod again nor re-announces a status it just wrote.
//! - The [`Cluster`] trait is synchronous: calls block on a tokio runtime (the caller's
//!   [`tokio::runtime::Handle`], or one the cluster owns), and must not be made from inside
//!   that runtime's async context.

mod binder;
mod convert;
mod limiter;
mod recorder;
mod reporter;
mod retry;
mod slim;

pub use binder::KubeBinder;
pub use convert::{INQUEUE_SINCE_ANNOTATION, creation_ms, pod_group_from_dynamic, status_patch};
pub use limiter::TokenBucket;
use recorder::ObjectWarnings;
pub use recorder::{
    CLUSTER_SCOPED_EVENTS_NAMESPACE, EventText, ObjectWarning, REASON_FIELD_IGNORED,
    REASON_INVALID, REASON_INVALID_POD_GROUP, Regarding, event_body,
};
pub use retry::{RetryPolicy, describe, is_transient, status_code, with_retry};
use slim::CachedPod;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::kube::api::{Api, EvictParams, PostParams};
use ::kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use ::kube::runtime::reflector::{self, ObjectRef, Store};
use ::kube::runtime::{WatchStreamExt, watcher};
use futures::StreamExt;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::scheduling::v1::PriorityClass as K8sPriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use thiserror::Error;
use tokio::runtime::{Handle, Runtime};
use tokio::task::JoinHandle;

use crate::cluster::{Cluster, ClusterError, ClusterSnapshot};
use crate::framework::Event;
use crate::manifest::FieldError;
use crate::manifest::convert::{node_from_k8s, priority_class_from_k8s};
use crate::model::{
    DEFAULT_QUEUE, Node, ObjectKey, Pod, PodGroup, PodGroupStatus, PriorityClass, Queue, TimeMs,
};
use crate::observe::progress::LoopProgress;

/// The Volcano API group and version of PodGroup and Queue.
pub const VOLCANO_GROUP: &str = "scheduling.volcano.sh";
pub const VOLCANO_VERSION: &str = "v1beta1";
/// Bind requests in flight at once by default (`serve --bind-workers`): as many as
/// kube-scheduler's default `parallelism`, and enough that a bind's round trip (~5-20 ms)
/// does not bound the rate below the default 50 QPS (docs/configuration.md, "serve").
pub const DEFAULT_BIND_WORKERS: usize = 16;
/// `reportingController` of the Events phalanx writes.
pub const REPORTING_CONTROLLER: &str = "phalanx.dev/scheduler";
/// The annotation that names the replica that bound a pod (`KubeOptions::bound_by`).
pub const BOUND_BY_ANNOTATION: &str = "phalanx.dev/bound-by";

/// What the backend needs besides the connection.
#[derive(Clone, Debug)]
pub struct KubeOptions {
    /// Requests per second to the API server (0 = no limit), per bucket: one for binds,
    /// evictions and their re-reads, one for PodGroup status writes and Events.
    pub qps: f64,
    /// Writes that may go at once before `qps` applies.
    pub burst: u32,
    /// How long [`KubeCluster::connect`] waits for every watch cache to sync.
    pub sync_timeout: Duration,
    pub retry: RetryPolicy,
    /// `reportingInstance` of Events (e.g. `phalanx-1`).
    pub instance: String,
    /// Set on every bound pod as the annotation [`BOUND_BY_ANNOTATION`] (the replica id),
    /// in the same Binding request: the API server copies a Binding's annotations onto
    /// the pod.
    pub bound_by: Option<String>,
    /// Bind requests in flight at once (each still through the `qps` bucket); the same
    /// bound for PodGroup status writes and for Events.
    pub bind_workers: usize,
    /// Pods of this scheduler get a Warning Event when their PodGroup is skipped (at most
    /// [`POD_WARNINGS_PER_SKIPPED_GROUP`] per group); `None`: no pod does.
    pub scheduler_name: Option<String>,
    /// Marked as each bind ends, so that a long bind phase (thousands of pods at the
    /// write budget) counts as progress for the Lease keeper (`serve/lease.rs`).
    pub progress: Option<Arc<LoopProgress>>,
}

impl Default for KubeOptions {
    fn default() -> Self {
        Self {
            qps: 50.0,
            burst: 100,
            sync_timeout: Duration::from_secs(60),
            retry: RetryPolicy::default(),
            instance: "phalanx".into(),
            bound_by: None,
            bind_workers: DEFAULT_BIND_WORKERS,
            scheduler_name: None,
            progress: None,
        }
    }
}

#[derive(Debug, Error)]
pub enum KubeError {
    #[error("reading kubeconfig {path}: {reason}")]
    Kubeconfig { path: String, reason: String },
    #[error(
        "no Kubernetes configuration: no --kubeconfig, $KUBECONFIG, ~/.kube/config or in-cluster service account: {0}"
    )]
    NoConfig(String),
    #[error("building the Kubernetes client: {0}")]
    Client(String),
    #[error("starting the tokio runtime: {0}")]
    Runtime(String),
    #[error(
        "the watch caches did not sync within {timeout_s} s (not synced: {not_synced}); is the API server reachable, and are the PodGroup and Queue CRDs (deploy/crds/) installed?"
    )]
    SyncTimeout { timeout_s: u64, not_synced: String },
}

/// The watch caches.
#[derive(Clone)]
struct Stores {
    nodes: Store<core::Node>,
    /// Every pod, converted into the model as the watch reads it (`slim.rs`). A relist
    /// converts every pod again, and the next cycle's state cache then rebuilds once.
    pods: Store<CachedPod>,
    pod_groups: Store<DynamicObject>,
    queues: Store<DynamicObject>,
    priority_classes: Store<K8sPriorityClass>,
}

/// Converted objects by (key, resourceVersion): a snapshot converts only what changed.
#[derive(Default)]
struct Converted {
    nodes: HashMap<String, (String, Arc<Node>)>,
    /// The copies [`overlay_bind`] made of pods bound here that the cache shows unbound,
    /// by key, with the resourceVersion they were made of (the cache converts each pod
    /// itself: [`CachedPod`]).
    bound_copies: HashMap<String, (String, Arc<Pod>)>,
    /// PodGroups by key, with the resourceVersion they were converted at: a PodGroup is
    /// parsed once per version, not every cycle.
    pod_groups: HashMap<ObjectKey, (String, Arc<PodGroup>)>,
    /// Objects left out or read with a caveat: told once per version.
    warnings: ObjectWarnings,
    /// The pods told about their skipped PodGroup, per group (bounded per group).
    skipped_told: SkippedGroupsTold,
}

/// Writes not yet seen in the caches.
#[derive(Default)]
struct Overlay {
    /// Pod key -> node it was bound to here.
    bound: HashMap<ObjectKey, String>,
    /// PodGroup key -> (resourceVersion the write returned, status written).
    status: HashMap<ObjectKey, (u64, PodGroupStatus)>,
    /// PodGroup key -> the last status handed to the background writer whose write has
    /// not ended. Shown over any cached version: without it, the cycles planned while a
    /// write waited found the same change again and queued it with its Events again (at
    /// 5,000 pods in gangs of 10, 2,562 status writes and 3,241 Events for 500 gangs; the
    /// API server, not the scheduler, set the pace on 2 cores). Dropped when its write
    /// ends: after a failure the cache's status shows again, and the next cycle retries.
    queued: HashMap<ObjectKey, PodGroupStatus>,
}

pub struct KubeCluster {
    /// Set when the cluster owns its runtime (dropped last).
    runtime: Option<Runtime>,
    handle: Handle,
    client: ::kube::Client,
    stores: Stores,
    /// Binds, evictions and the re-reads they need.
    limiter: Arc<TokenBucket>,
    /// Binding requests (on `limiter`), shared with the tasks that bind in the background.
    binder: Arc<KubeBinder>,
    /// PodGroup status writes and Events (a token bucket of their own).
    reporter: Arc<reporter::Reporter>,
    /// Statuses and Events written in the background, in order, by one task.
    reporting: reporter::ReportQueue,
    options: KubeOptions,
    synced: Arc<AtomicBool>,
    watches: Vec<JoinHandle<()>>,
    converted: Mutex<Converted>,
    overlay: Arc<Mutex<Overlay>>,
}

impl std::fmt::Debug for KubeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeCluster")
            .field("options", &self.options)
            .field("synced", &self.synced.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// The `ApiResource` of a Volcano kind.
pub fn volcano_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(VOLCANO_GROUP, VOLCANO_VERSION, kind),
        plural,
    )
}

/// A client from `kubeconfig`, or inferred ($KUBECONFIG, ~/.kube/config, in-cluster).
pub async fn make_client(kubeconfig: Option<&Path>) -> Result<::kube::Client, KubeError> {
    let config = match kubeconfig {
        Some(path) => {
            let fail = |reason: String| KubeError::Kubeconfig {
                path: path.display().to_string(),
                reason,
            };
            let kc =
                ::kube::config::Kubeconfig::read_from(path).map_err(|e| fail(e.to_string()))?;
            ::kube::Config::from_custom_kubeconfig(
                kc,
                &::kube::config::KubeConfigOptions::default(),
            )
            .await
            .map_err(|e| fail(e.to_string()))?
        }
        None => ::kube::Config::infer()
            .await
            .map_err(|e| KubeError::NoConfig(e.to_string()))?,
    };
    ::kube::Client::try_from(config).map_err(|e| KubeError::Client(e.to_string()))
}

/// Creates the PodGroup and Queue CRDs (`phalanx crds`) where they are absent (an existing
/// one, ours or Volcano's, is left as it is) and waits until they are Established.
pub async fn install_crds(client: &::kube::Client, timeout: Duration) -> Result<(), KubeError> {
    use crate::manifest::volcano::crd::{pod_group_crd, queue_crd};
    install(client, timeout, [pod_group_crd(), queue_crd()]).await
}

/// Creates Volcano's Job CRD (`deploy/crds/jobs.yaml`) where absent, as [`install_crds`].
pub async fn install_job_crd(client: &::kube::Client, timeout: Duration) -> Result<(), KubeError> {
    install(client, timeout, [crate::manifest::volcano::crd::job_crd()]).await
}

async fn install<const N: usize>(
    client: &::kube::Client,
    timeout: Duration,
    crds: [Result<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition, crate::manifest::volcano::crd::CrdError>; N],
) -> Result<(), KubeError> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let fail = |e: String| KubeError::Client(format!("installing the CRDs: {e}"));
    for crd in crds {
        let crd = crd.map_err(|e| fail(e.to_string()))?;
        let name = crd.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => tracing::info!(crd = %name, "created"),
            Err(e) if status_code(&e) == Some(409) => {}
            Err(e) => return Err(fail(format!("{name}: {}", describe(&e)))),
        }
        let established = async {
            loop {
                let got = api.get(&name).await.map_err(|e| fail(describe(&e)))?;
                if got
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                {
                    return Ok::<(), KubeError>(());
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        };
        tokio::time::timeout(timeout, established)
            .await
            .map_err(|_| {
                fail(format!(
                    "{name} not Established within {} s",
                    timeout.as_secs()
                ))
            })??;
    }
    Ok(())
}

fn spawn_watch<K>(
    handle: &Handle,
    api: Api<K>,
    writer: reflector::store::Writer<K>,
) -> JoinHandle<()>
where
    K: ::kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default + Send + Sync,
{
    let kind = K::kind(&K::DynamicType::default()).to_string();
    spawn_stream(
        handle,
        kind,
        watcher(api, watcher::Config::default()),
        writer,
    )
}

/// Runs `stream` into `writer` on `handle`, restarting it with backoff (shared with the Job
/// controller's watches).
pub(crate) fn spawn_stream<K, S>(
    handle: &Handle,
    kind: String,
    stream: S,
    writer: reflector::store::Writer<K>,
) -> JoinHandle<()>
where
    K: ::kube::Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    handle.spawn(async move {
        // The default backoff restarts a failed watch (410 Gone, a dropped connection, an
        // absent CRD) with exponential delays; the store keeps serving its last state.
        let stream = stream.modify(strip_managed_fields::<K>);
        let mut events = std::pin::pin!(stream.default_backoff().reflect(writer));
        while let Some(event) = events.next().await {
            if let Err(e) = event {
                tracing::warn!(kind = %kind, error = %e, "watch failed; restarting with backoff");
            }
        }
    })
}

/// What a watch cache keeps of an object: all but `metadata.managedFields`, which phalanx
/// never reads and which is a large part of every Node and Pod (an entry per field manager
/// naming every field it set; a kwok node's heartbeats rewrite it). kube-scheduler drops
/// it from its informers too.
fn strip_managed_fields<K: ::kube::Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

impl KubeCluster {
    /// Starts the watches on `handle`'s runtime and waits until every cache has synced.
    /// Call from outside that runtime (it blocks).
    pub fn connect(
        handle: Handle,
        client: ::kube::Client,
        options: KubeOptions,
    ) -> Result<Self, KubeError> {
        let pod_group_resource = volcano_resource("PodGroup", "podgroups");
        let queue_resource = volcano_resource("Queue", "queues");
        let (nodes, w_nodes) = reflector::store::<core::Node>();
        let (pods, w_pods) = reflector::store::<CachedPod>();
        let (priority_classes, w_pcs) = reflector::store::<K8sPriorityClass>();
        let w_pgs = reflector::store::Writer::<DynamicObject>::new(pod_group_resource.clone());
        let pod_groups = w_pgs.as_reader();
        let w_queues = reflector::store::Writer::<DynamicObject>::new(queue_resource.clone());
        let queues = w_queues.as_reader();
        let watches = vec![
            spawn_watch(&handle, Api::<core::Node>::all(client.clone()), w_nodes),
            spawn_watch(&handle, Api::<CachedPod>::all(client.clone()), w_pods),
            spawn_watch(&handle, Api::<K8sPriorityClass>::all(client.clone()), w_pcs),
            spawn_stream(
                &handle,
                "PodGroup".into(),
                watcher(
                    Api::<DynamicObject>::all_with(client.clone(), &pod_group_resource),
                    watcher::Config::default(),
                ),
                w_pgs,
            ),
            spawn_stream(
                &handle,
                "Queue".into(),
                watcher(
                    Api::<DynamicObject>::all_with(client.clone(), &queue_resource),
                    watcher::Config::default(),
                ),
                w_queues,
            ),
        ];
        let stores = Stores {
            nodes,
            pods,
            pod_groups,
            queues,
            priority_classes,
        };
        let overlay = Arc::new(Mutex::new(Overlay::default()));
        let reporter = Arc::new(reporter::Reporter {
            client: client.clone(),
            pod_group_resource,
            limiter: Arc::new(TokenBucket::new(options.qps, options.burst)),
            retry: options.retry.clone(),
            instance: options.instance.clone(),
            workers: options.bind_workers,
            pods: stores.pods.clone(),
            pod_groups: stores.pod_groups.clone(),
            overlay: overlay.clone(),
            event_seq: std::sync::atomic::AtomicU32::new(0),
        });
        let limiter = Arc::new(TokenBucket::new(options.qps, options.burst));
        let binder = Arc::new(KubeBinder {
            client: client.clone(),
            limiter: limiter.clone(),
            retry: options.retry.clone(),
            bound_by: options.bound_by.clone(),
            pods: stores.pods.clone(),
            nodes: stores.nodes.clone(),
            overlay: overlay.clone(),
        });
        let reporting = reporter::ReportQueue::start(&handle, reporter.clone());
        let cluster = Self {
            runtime: None,
            handle,
            client,
            stores,
            limiter,
            binder,
            reporter,
            reporting,
            options,
            synced: Arc::new(AtomicBool::new(false)),
            watches,
            converted: Mutex::new(Converted::default()),
            overlay,
        };
        cluster.wait_synced()?;
        Ok(cluster)
    }

    /// Connects with a runtime of its own (for tools and tests that have none).
    pub fn start(kubeconfig: Option<&Path>, options: KubeOptions) -> Result<Self, KubeError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| KubeError::Runtime(e.to_string()))?;
        let client = runtime.block_on(make_client(kubeconfig))?;
        let mut cluster = Self::connect(runtime.handle().clone(), client, options)?;
        cluster.runtime = Some(runtime);
        Ok(cluster)
    }

    fn wait_synced(&self) -> Result<(), KubeError> {
        let s = self.stores.clone();
        let timeout = self.options.sync_timeout;
        let outcome = self.handle.block_on(async move {
            let waits = async {
                let _ = s.nodes.wait_until_ready().await;
                let _ = s.pods.wait_until_ready().await;
                let _ = s.priority_classes.wait_until_ready().await;
                let _ = s.pod_groups.wait_until_ready().await;
                let _ = s.queues.wait_until_ready().await;
            };
            tokio::time::timeout(timeout, waits).await
        });
        if outcome.is_err() {
            let s = &self.stores;
            let not_synced: Vec<&str> = [
                ("Node", is_ready(&s.nodes)),
                ("Pod", is_ready(&s.pods)),
                ("PriorityClass", is_ready(&s.priority_classes)),
                ("PodGroup", is_ready(&s.pod_groups)),
                ("Queue", is_ready(&s.queues)),
            ]
            .into_iter()
            .filter(|(_, ready)| !ready)
            .map(|(kind, _)| kind)
            .collect();
            return Err(KubeError::SyncTimeout {
                timeout_s: timeout.as_secs(),
                not_synced: not_synced.join(", "),
            });
        }
        self.synced.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Whether the API server says the pod does not exist (404). Any other answer, an error
    /// included, is "not known to be gone".
    pub fn pod_is_gone(&self, pod: &ObjectKey) -> bool {
        let api = self.pods_api(&pod.namespace);
        matches!(
            self.block_on(with_retry(&self.limiter, &self.options.retry, || {
                api.get_opt(&pod.name)
            })),
            Ok(None)
        )
    }

    /// Binds many pods, [`KubeOptions::bind_workers`] requests in flight at most (each one through
    /// the QPS token bucket); one result per pod, in order.
    pub fn bind_all(&mut self, binds: &[(ObjectKey, String)]) -> Vec<Result<(), ClusterError>> {
        let binder = &*self.binder;
        let workers = self.options.bind_workers.max(1);
        let progress = self.options.progress.as_deref();
        let mut outcomes: Vec<(usize, Result<(), ClusterError>)> = self.block_on(
            futures::stream::iter(
                binds
                    .iter()
                    .enumerate()
                    .map(|(i, (pod, node))| async move { (i, binder.bind(pod, node).await) }),
            )
            .buffer_unordered(workers)
            .inspect(|_| progress.iter().for_each(|p| p.mark()))
            .collect(),
        );
        outcomes.sort_by_key(|(i, _)| *i);
        outcomes.into_iter().map(|(_, outcome)| outcome).collect()
    }

    /// The Binding requests of this cluster, for binds that run as tasks of their own
    /// (serve's bind pool): the same bucket, retries and snapshot overlay as
    /// [`KubeCluster::bind_all`].
    pub fn binder(&self) -> Arc<KubeBinder> {
        self.binder.clone()
    }

    /// True once every cache has synced (before the first cycle, and from then on).
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Relaxed)
    }

    pub fn client(&self) -> &::kube::Client {
        &self.client
    }

    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Tells (once per version of the object) that the snapshot leaves it out: `error`
    /// names the field and the value, `consequence` what the object's owner sees.
    fn tell_skipped(
        converted: &mut Converted,
        (regarding, meta): (Regarding, &ObjectMeta),
        error: &FieldError,
        consequence: &str,
    ) {
        let message = format!("{regarding} is skipped: {error}; {consequence}");
        let warning = ObjectWarning {
            regarding,
            uid: meta.uid.clone(),
            reason: REASON_INVALID,
            message,
        };
        converted.warnings.tell(warning, version_of(meta));
    }

    /// Leaves out (and tells) each node that would take the cluster's total of a counted
    /// resource past what the scheduler computes with (`nodes_within_cluster_totals`).
    fn leave_out_nodes_past_the_totals(
        &self,
        nodes: &mut Vec<Arc<Node>>,
        converted: &mut Converted,
    ) {
        let (kept, refused) = convert::nodes_within_cluster_totals(std::mem::take(nodes));
        *nodes = kept;
        for (name, error) in refused {
            let key = ObjectRef::<core::Node>::new(&name);
            let meta = self.stores.nodes.get(&key).map(|n| n.metadata.clone());
            Self::tell_skipped(
                converted,
                (Regarding::Node(name), &meta.unwrap_or_default()),
                &error,
                "no pod is placed on this node until it is fixed",
            );
        }
    }

    /// Tells (once per version) what a converter read but did not act on as written.
    fn tell_caveats(
        converted: &mut Converted,
        (regarding, meta): (&Regarding, &ObjectMeta),
        caveats: Vec<String>,
    ) {
        for caveat in caveats {
            let warning = ObjectWarning {
                regarding: regarding.clone(),
                uid: meta.uid.clone(),
                reason: REASON_FIELD_IGNORED,
                message: format!("{regarding}: {caveat}"),
            };
            converted.warnings.tell(warning, version_of(meta));
        }
    }

    /// The PodGroups that read, with the statuses written here that the cache lags on, and
    /// those skipped.
    fn read_pod_groups(
        objects: &[Arc<DynamicObject>],
        converted: &mut Converted,
        overlay: &mut Overlay,
    ) -> (Vec<Arc<PodGroup>>, SkippedGroups) {
        let mut groups = BTreeMap::new();
        let mut skipped = SkippedGroups::new();
        for obj in objects {
            let key = ObjectKey::new(
                obj.metadata.namespace.as_deref().unwrap_or("default"),
                obj.metadata.name.as_deref().unwrap_or(""),
            );
            let rv = obj.metadata.resource_version.as_deref().unwrap_or_default();
            let group = match converted.pod_groups.get(&key) {
                Some((seen, group)) if seen == rv => group.clone(),
                _ => match Self::convert_pod_group(converted, obj, &key) {
                    Ok(group) => {
                        let group = Arc::new(group);
                        let entry = (rv.to_string(), group.clone());
                        converted.pod_groups.insert(key.clone(), entry);
                        group
                    }
                    Err(e) => {
                        skipped.insert(key, (e, version_of(&obj.metadata).to_string()));
                        continue;
                    }
                },
            };
            if let Some(status) = overlay.queued.get(&key) {
                // Not kept as a conversion: the write may fail, and then this version
                // must show the cache's status again.
                let shown = if group.status == *status {
                    group
                } else {
                    Arc::new(group.with_status(status.clone()))
                };
                groups.insert(key, shown);
                continue;
            }
            let shown = Self::overlay_status(overlay, &obj.metadata, group.clone());
            if !Arc::ptr_eq(&shown, &group) {
                // Kept as this version's conversion, so the copy is made once, not every
                // cycle the cache lags (the overlay outlives this version: see below).
                let entry = (rv.to_string(), shown.clone());
                converted.pod_groups.insert(key.clone(), entry);
            }
            groups.insert(key, shown);
        }
        converted.pod_groups.retain(|k, _| groups.contains_key(k));
        overlay.queued.retain(|k, _| groups.contains_key(k));
        (groups.into_values().collect(), skipped)
    }

    /// One PodGroup converted, its caveats told; a PodGroup that cannot be read is told
    /// as skipped and its error returned.
    fn convert_pod_group(
        converted: &mut Converted,
        obj: &DynamicObject,
        key: &ObjectKey,
    ) -> Result<PodGroup, String> {
        let mut caveats = Vec::new();
        let regarding = || Regarding::PodGroup(key.clone());
        match pod_group_from_dynamic(obj, &mut caveats) {
            Ok(group) => {
                if !caveats.is_empty() {
                    Self::tell_caveats(converted, (&regarding(), &obj.metadata), caveats);
                }
                Ok(group)
            }
            Err(e) => {
                Self::tell_skipped(
                    converted,
                    (regarding(), &obj.metadata),
                    &e,
                    "its pods are not placed until it is fixed",
                );
                Err(e.to_string())
            }
        }
    }

    /// The status written here while the cache still shows an older version of the
    /// PodGroup; the overlay entry goes once the cache has caught up, which is a newer
    /// version, so a copy kept for the older one is never shown after that.
    fn overlay_status(
        overlay: &mut Overlay,
        meta: &ObjectMeta,
        group: Arc<PodGroup>,
    ) -> Arc<PodGroup> {
        let Some((written_rv, status)) = overlay.status.get(&group.key) else {
            return group;
        };
        if rv_number(meta) < *written_rv {
            if group.status == *status {
                return group;
            }
            return Arc::new(group.with_status(status.clone()));
        }
        overlay.status.remove(&group.key);
        group
    }

    /// The Queues that read, sorted by name, with the implicit `default` queue.
    fn read_queues(&self, converted: &mut Converted) -> Vec<Queue> {
        let mut queues = Vec::new();
        for obj in self.stores.queues.state() {
            let mut caveats = Vec::new();
            let regarding = || Regarding::Queue(obj.metadata.name.clone().unwrap_or_default());
            match convert::queue_from_dynamic(&obj, &mut caveats) {
                Ok(q) => {
                    if !caveats.is_empty() {
                        Self::tell_caveats(converted, (&regarding(), &obj.metadata), caveats);
                    }
                    queues.push(q);
                }
                Err(e) => Self::tell_skipped(
                    converted,
                    (regarding(), &obj.metadata),
                    &e,
                    "no PodGroup of this queue is admitted until it is fixed",
                ),
            }
        }
        queues.sort_by(|a, b| a.name.cmp(&b.name));
        // Volcano creates the `default` queue; without Volcano it is implicit, as in scenarios.
        if !queues.iter().any(|q| q.name == DEFAULT_QUEUE) {
            queues.insert(0, Queue::new(DEFAULT_QUEUE));
        }
        queues
    }

    fn read_priority_classes(&self, converted: &mut Converted) -> Vec<PriorityClass> {
        let mut classes = Vec::new();
        for pc in self.stores.priority_classes.state() {
            match priority_class_from_k8s(&pc) {
                Ok(p) => classes.push(p),
                Err(e) => Self::tell_skipped(
                    converted,
                    (
                        Regarding::PriorityClass(pc.metadata.name.clone().unwrap_or_default()),
                        &pc.metadata,
                    ),
                    &e,
                    "pods that name it are read as if it did not exist",
                ),
            }
        }
        classes
    }

    fn pod_key(meta: &ObjectMeta) -> String {
        format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or("default"),
            meta.name.as_deref().unwrap_or("")
        )
    }

    fn now_ms() -> TimeMs {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    fn pods_api(&self, namespace: &str) -> Api<core::Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Blocks on the runtime: the trait is synchronous.
    fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.handle.block_on(f)
    }

    /// Writes up to `max` of the object warnings not yet written (oldest first) as Warning
    /// Events, [`KubeOptions::bind_workers`] in flight at most, through the reporting
    /// bucket; returns how many it tried and the failures. Warnings dropped unwritten under
    /// a flood are logged.
    pub fn write_object_warnings(&self, max: usize) -> (usize, Vec<ClusterError>) {
        let (warnings, dropped) = self
            .converted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .warnings
            .take(max);
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "object warnings dropped unwritten (a flood of malformed objects); each was logged"
            );
        }
        let workers = self.options.bind_workers.max(1);
        let warnings = &warnings;
        let failed = self.block_on(async move {
            futures::stream::iter(warnings.iter().map(|w| async move {
                self.reporter
                    .post_event(&w.regarding, w.uid.as_deref(), &w.text())
                    .await
            }))
            .buffer_unordered(workers)
            .filter_map(|r| async move { r.err() })
            .collect()
            .await
        });
        (warnings.len(), failed)
    }

    /// Forgets the object warnings not yet written: another replica writes them.
    pub fn discard_object_warnings(&self) {
        self.converted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .warnings
            .discard();
    }

    /// Writes PodGroup statuses, then Events, [`KubeOptions::bind_workers`] requests in
    /// flight at most, after any batch still in flight from
    /// [`KubeCluster::report_in_background`]; returns the failures of both.
    pub fn report_all(
        &mut self,
        statuses: &[(ObjectKey, PodGroupStatus)],
        events: &[Event],
    ) -> Vec<ClusterError> {
        let mut failures = self.finish_reports();
        let write = self
            .reporter
            .clone()
            .write(statuses.to_vec(), events.to_vec());
        failures.extend(self.block_on(write));
        failures
    }
}

fn is_ready<K>(store: &Store<K>) -> bool
where
    K: ::kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    // A store that has not synced blocks `wait_until_ready`; polling it once tells.
    futures::FutureExt::now_or_never(store.wait_until_ready()).is_some()
}

impl Drop for KubeCluster {
    fn drop(&mut self) {
        for w in &self.watches {
            w.abort();
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// An object's resourceVersion as text ("" when unset).
/// PodGroups the snapshot skipped: key -> (why, resourceVersion).
type SkippedGroups = BTreeMap<ObjectKey, (String, String)>;
/// Per skipped PodGroup: the version the pods were told about, and which pods were.
type SkippedGroupsTold = HashMap<ObjectKey, (String, BTreeSet<ObjectKey>)>;

/// How many pods of one skipped PodGroup get a Warning Event of their own.
pub const POD_WARNINGS_PER_SKIPPED_GROUP: usize = 16;

/// The pod as bound when a bind made here is not in the cache yet (`cached_node` is what
/// the cache shows). The bound copy is kept for the version it was made of, so such a pod
/// is copied once, not once a cycle: at the peak of a 20,000-pod run 13,000 binds were not
/// in the cache yet, 12 MiB copied every cycle (docs/benchmarks.md). The overlay's entry
/// goes once the cache shows a node.
fn overlay_bind(
    overlay: &mut Overlay,
    converted: &mut Converted,
    (key, rv): (&str, &str),
    cached_node: Option<&str>,
    pod: Arc<Pod>,
) -> Arc<Pod> {
    if cached_node.is_some() {
        overlay.bound.remove(&pod.key);
        return pod;
    }
    match (overlay.bound.get(&pod.key), &pod.node_name) {
        (Some(node), None) => {
            let mut bound = (*pod).clone();
            bound.node_name = Some(node.clone());
            let bound = Arc::new(bound);
            converted
                .bound_copies
                .insert(key.to_string(), (rv.to_string(), bound.clone()));
            bound
        }
        _ => pod,
    }
}

/// Whether `pod` names a PodGroup the snapshot skipped (the common case, none skipped,
/// costs nothing).
fn in_skipped_group(pod: &Pod, skipped: &SkippedGroups) -> bool {
    !skipped.is_empty()
        && pod
            .group
            .as_deref()
            .is_some_and(|g| skipped.contains_key(&ObjectKey::new(&pod.key.namespace, g)))
}

/// The warning (and the version it is told once for) a pending pod of `scheduler_name`
/// gets when its PodGroup is skipped: for the first [`POD_WARNINGS_PER_SKIPPED_GROUP`]
/// pods of each group (`told` keeps which, per group version, across snapshots: pods
/// created later with smaller names must not add to them), since the group's own
/// Event says why and a 10,000-pod group must not crowd the other warnings out of the
/// bounded queue. The version is the pod's and the group's, so a group broken again
/// after a fix is told again.
fn skipped_group_pod_warning(
    (pod, meta): (&Pod, &ObjectMeta),
    scheduler_name: Option<&str>,
    skipped: &SkippedGroups,
    told: &mut SkippedGroupsTold,
) -> Option<(ObjectWarning, String)> {
    if pod.node_name.is_some() || scheduler_name != Some(pod.scheduler_name.as_str()) {
        return None;
    }
    let key = ObjectKey::new(&pod.key.namespace, pod.group.as_deref()?);
    let (error, group_version) = skipped.get(&key)?;
    let (version, pods) = told.entry(key.clone()).or_default();
    if version != group_version {
        // A new version of the group (broken again after a fix): told afresh.
        *version = group_version.clone();
        pods.clear();
    }
    if !pods.contains(&pod.key) {
        if pods.len() >= POD_WARNINGS_PER_SKIPPED_GROUP {
            return None;
        }
        pods.insert(pod.key.clone());
    }
    let warning = ObjectWarning {
        regarding: Regarding::Pod(pod.key.clone()),
        uid: meta.uid.clone(),
        reason: REASON_INVALID_POD_GROUP,
        message: format!(
            "Pod {} is not placed: its PodGroup {key} is skipped ({error}); it is placed once the PodGroup is fixed",
            pod.key
        ),
    };
    Some((warning, format!("{}/{group_version}", version_of(meta))))
}

fn version_of(meta: &ObjectMeta) -> &str {
    meta.resource_version.as_deref().unwrap_or_default()
}

fn rv_number(meta: &ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

impl KubeCluster {
    /// The conversions and the overlay, locked in the one order every caller takes them.
    fn converted_and_overlay(
        &self,
    ) -> (
        std::sync::MutexGuard<'_, Converted>,
        std::sync::MutexGuard<'_, Overlay>,
    ) {
        let converted = self
            .converted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let overlay = self
            .overlay
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (converted, overlay)
    }
}

impl Cluster for KubeCluster {
    fn snapshot(&self) -> ClusterSnapshot {
        let (mut converted, mut overlay) = self.converted_and_overlay();
        let mut out = ClusterSnapshot {
            now_ms: Self::now_ms(),
            ..ClusterSnapshot::default()
        };

        let mut live = HashSet::new();
        for n in self.stores.nodes.state() {
            let name = n.metadata.name.clone().unwrap_or_default();
            let rv = n.metadata.resource_version.clone().unwrap_or_default();
            live.insert(name.clone());
            if let Some((seen, node)) = converted.nodes.get(&name)
                && *seen == rv
            {
                out.nodes.push(node.clone());
                continue;
            }
            match node_from_k8s(&n) {
                Ok(node) => {
                    let node = Arc::new(node);
                    converted.nodes.insert(name, (rv, node.clone()));
                    out.nodes.push(node);
                }
                Err(e) => Self::tell_skipped(
                    &mut converted,
                    (Regarding::Node(name), &n.metadata),
                    &e,
                    "no pod is placed on this node until it is fixed",
                ),
            }
        }
        converted.nodes.retain(|k, _| live.contains(k));
        out.nodes.sort_by(|a, b| a.name.cmp(&b.name));
        self.leave_out_nodes_past_the_totals(&mut out.nodes, &mut converted);

        // Before the pods: a pending pod of a skipped PodGroup is told so.
        let objects = self.stores.pod_groups.state();
        let (pod_groups, skipped) = Self::read_pod_groups(&objects, &mut converted, &mut overlay);
        out.pod_groups = pod_groups;
        let mut of_skipped = BTreeMap::new();
        let mut live = HashSet::new();
        for p in self.stores.pods.state() {
            let key = Self::pod_key(&p.metadata);
            let rv = p.metadata.resource_version.clone().unwrap_or_default();
            live.insert(key.clone());
            if converted
                .bound_copies
                .get(&key)
                .is_some_and(|(seen, _)| *seen != rv)
            {
                converted.bound_copies.remove(&key);
            }
            let pod = match (converted.bound_copies.get(&key), &p.converted) {
                // The copy `overlay_bind` made of this version.
                (Some((seen, pod)), _) if *seen == rv => pod.clone(),
                (_, Ok(pod)) => pod.clone(),
                (_, Err(e)) => {
                    let regarding = Regarding::Pod(ObjectKey::new(
                        p.metadata.namespace.as_deref().unwrap_or("default"),
                        p.metadata.name.as_deref().unwrap_or(""),
                    ));
                    Self::tell_skipped(
                        &mut converted,
                        (regarding, &p.metadata),
                        e,
                        "if phalanx schedules it, it stays pending until it is fixed; \
                         if another scheduler does, its resources are not accounted",
                    );
                    continue;
                }
            };
            let pod = overlay_bind(
                &mut overlay,
                &mut converted,
                (&key, &rv),
                p.node_name(),
                pod,
            );
            if pod.node_name.is_none() && in_skipped_group(&pod, &skipped) {
                // Told below in name order: the caches' order changes as pods come and go,
                // and the bound per group must pick the same pods every cycle.
                let meta = ObjectMeta {
                    uid: p.metadata.uid.clone(),
                    resource_version: p.metadata.resource_version.clone(),
                    ..ObjectMeta::default()
                };
                of_skipped.insert(pod.key.clone(), (pod.clone(), meta));
            }
            out.pods.push(pod);
        }
        converted.bound_copies.retain(|k, _| live.contains(k));
        overlay.bound.retain(|k, _| live.contains(&k.to_string()));
        out.pods.sort_by(|a, b| a.key.cmp(&b.key));
        converted
            .skipped_told
            .retain(|group, _| skipped.contains_key(group));
        for (pod, meta) in of_skipped.values() {
            let scheduler = self.options.scheduler_name.as_deref();
            let told = &mut converted.skipped_told;
            if let Some((warning, version)) =
                skipped_group_pod_warning((pod, meta), scheduler, &skipped, told)
            {
                converted.warnings.tell(warning, &version);
            }
        }

        out.queues = self.read_queues(&mut converted);
        out.priority_classes = self.read_priority_classes(&mut converted);
        out
    }

    fn bind(&mut self, pod: &ObjectKey, node: &str) -> Result<(), ClusterError> {
        self.block_on(self.binder.bind(pod, node))
    }

    fn update_pod_group_status(
        &mut self,
        key: &ObjectKey,
        status: &PodGroupStatus,
    ) -> Result<(), ClusterError> {
        self.finish_reports_logged();
        self.block_on(self.reporter.status(key, status))
    }

    fn record_event(&mut self, event: &Event) -> Result<(), ClusterError> {
        self.finish_reports_logged();
        self.block_on(self.reporter.event(event))
    }

    fn evict(&mut self, pod: &ObjectKey, reason: &str) -> Result<(), ClusterError> {
        let api = self.pods_api(&pod.namespace);
        let params = EvictParams::default();
        let evicted = self.block_on(with_retry(&self.limiter, &self.options.retry, || {
            api.evict(&pod.name, &params)
        }));
        match evicted {
            Ok(_) => {
                tracing::info!(pod = %pod, reason, "evicted");
                Ok(())
            }
            Err(e) if status_code(&e) == Some(404) => Err(ClusterError::NotFound {
                kind: "pod",
                key: pod.to_string(),
            }),
            Err(e) => Err(ClusterError::Refused(format!(
                "evicting pod {pod}: {}",
                describe(&e)
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bind made here shows in every snapshot until the cache shows it, and the bound
    /// copy is made once, not once a cycle.
    #[test]
    fn a_bind_the_cache_does_not_show_yet_is_copied_once_and_dropped_when_it_shows() {
        let key = ObjectKey::new("team-a", "w-0");
        let unbound = Arc::new(Pod::new(key.clone(), crate::model::Resources::new()));
        let (mut overlay, mut converted) = (Overlay::default(), Converted::default());
        let version = ("team-a/w-0", "7");
        assert!(Arc::ptr_eq(
            &overlay_bind(&mut overlay, &mut converted, version, None, unbound.clone()),
            &unbound
        ));
        overlay.bound.insert(key.clone(), "node-1".into());
        let first = overlay_bind(&mut overlay, &mut converted, version, None, unbound.clone());
        assert_eq!(first.node_name.as_deref(), Some("node-1"));
        // The next cycle finds the bound copy, made of version 7.
        let (seen, kept) = converted.bound_copies[&key.to_string()].clone();
        assert!(seen == "7" && Arc::ptr_eq(&kept, &first));
        let again = overlay_bind(&mut overlay, &mut converted, version, None, kept);
        assert!(Arc::ptr_eq(&again, &first) && overlay.bound.contains_key(&key));
        // The watch brings version 8 with the node: the overlay lets go.
        let mut seen_bound = (*unbound).clone();
        seen_bound.node_name = Some("node-1".into());
        let seen_bound = Arc::new(seen_bound);
        let last = ("team-a/w-0", "8");
        let out = overlay_bind(
            &mut overlay,
            &mut converted,
            last,
            Some("node-1"),
            seen_bound.clone(),
        );
        assert!(Arc::ptr_eq(&out, &seen_bound) && overlay.bound.is_empty());
    }

    /// The caches keep no managedFields (the memory they cost at 20,000 pods is in
    /// docs/benchmarks.md, "Memory"), and everything else of the object.
    #[test]
    fn the_watch_caches_keep_objects_without_their_managed_fields() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
        let rt = Runtime::new().unwrap();
        let mut node = core::Node::default();
        node.metadata.name = Some("gpu-node-0".into());
        node.metadata.labels = Some([("zone".to_string(), "a".to_string())].into());
        node.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kwok".into()),
            ..ManagedFieldsEntry::default()
        }]);
        let (store, writer) = reflector::store::<core::Node>();
        let events = vec![
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(node.clone())),
            Ok(watcher::Event::InitDone),
        ];
        let task = spawn_stream(
            rt.handle(),
            "Node".into(),
            futures::stream::iter(events),
            writer,
        );
        rt.block_on(task).unwrap();
        let cached = store.get(&ObjectRef::from_obj(&node)).expect("cached");
        assert_eq!(cached.metadata.managed_fields, None);
        node.metadata.managed_fields = None;
        assert_eq!(*cached, node, "nothing else is dropped");
    }

    fn pending(name: &str, group: &str, scheduler: &str) -> (Pod, ObjectMeta) {
        let mut pod = Pod::new(
            ObjectKey::new("ns", name),
            crate::model::Resources::default(),
        );
        pod.group = Some(group.to_string());
        pod.scheduler_name = scheduler.to_string();
        let meta = ObjectMeta {
            uid: Some(format!("uid-{name}")),
            resource_version: Some("7".into()),
            ..ObjectMeta::default()
        };
        (pod, meta)
    }

    /// A PodGroup is parsed once per resourceVersion and shared by every snapshot until it
    /// changes; a status written here shows until the cache has caught up with it; a
    /// PodGroup that cannot be read is skipped alone.
    #[test]
    fn a_pod_group_is_converted_once_per_version_and_a_status_written_here_shows_until_seen() {
        let group = |name: &str, rv: &str, min: i64| {
            let value = serde_json::json!({
                "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
                "spec": {"minMember": min},
            });
            Arc::new(serde_json::from_value::<DynamicObject>(value).expect("an object"))
        };
        let (mut converted, mut overlay) = (Converted::default(), Overlay::default());
        let mut read = |objects: &[Arc<DynamicObject>], overlay: &mut Overlay| {
            KubeCluster::read_pod_groups(objects, &mut converted, overlay)
        };
        let v5 = [
            group("a", "5", 2),
            group("broken", "6", -3),
            group("b", "5", 1),
        ];
        let (first, skipped) = read(&v5, &mut overlay);
        let keys: Vec<String> = first.iter().map(|g| g.key.to_string()).collect();
        assert_eq!(keys, ["ns/a", "ns/b"]);
        let why = &skipped[&ObjectKey::new("ns", "broken")];
        assert!(why.0.contains("spec.minMember") && why.1 == "6", "{why:?}");
        // The same versions again: the same converted objects, shared.
        let (second, _) = read(&v5, &mut overlay);
        assert!(first.iter().zip(&second).all(|(a, b)| Arc::ptr_eq(a, b)));
        // A status written here (the write returned version 9) shows over version 5 ...
        let written = PodGroupStatus {
            phase: crate::model::PodGroupPhase::Inqueue,
            ..PodGroupStatus::default()
        };
        overlay
            .status
            .insert(ObjectKey::new("ns", "a"), (9, written.clone()));
        let (shown, _) = read(&v5, &mut overlay);
        assert_eq!(shown[0].status, written);
        assert!(Arc::ptr_eq(&shown[1], &first[1]));
        // ... copied once, not every cycle the cache lags.
        let (again, _) = read(&v5, &mut overlay);
        assert!(Arc::ptr_eq(&again[0], &shown[0]) && again[0].status == written);
        // ... and goes once the cache shows version 9: a new version is converted anew.
        let v9 = [group("a", "9", 2), group("b", "5", 1)];
        let (seen, skipped) = read(&v9, &mut overlay);
        assert!(overlay.status.is_empty() && skipped.is_empty());
        assert!(!Arc::ptr_eq(&seen[0], &first[0]) && Arc::ptr_eq(&seen[1], &first[1]));
        // A deleted PodGroup leaves the conversion cache.
        let (_, _) = read(&v9[1..], &mut overlay);
        assert_eq!(converted.pod_groups.len(), 1);
    }

    /// A status queued for the background writer shows over whatever version the cache
    /// holds while its write has not ended, so the next cycle does not find the same
    /// change again (and queue it and its Events twice); it is never kept as a version's
    /// conversion, so once the entry goes (a failed write) the cache's status shows again.
    #[test]
    fn a_status_queued_for_writing_shows_until_its_write_ends_and_a_failed_one_is_found_again() {
        let group = |rv: &str| {
            let value = serde_json::json!({
                "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                "metadata": {"name": "a", "namespace": "ns", "resourceVersion": rv},
                "spec": {"minMember": 2},
            });
            Arc::new(serde_json::from_value::<DynamicObject>(value).expect("an object"))
        };
        let (mut converted, mut overlay) = (Converted::default(), Overlay::default());
        let key = ObjectKey::new("ns", "a");
        let (cached, _) = KubeCluster::read_pod_groups(&[group("5")], &mut converted, &mut overlay);
        let queued = PodGroupStatus {
            phase: crate::model::PodGroupPhase::Running,
            running: 2,
            ..PodGroupStatus::default()
        };
        overlay.queued.insert(key.clone(), queued.clone());
        for rv in ["5", "6"] {
            let (shown, _) =
                KubeCluster::read_pod_groups(&[group(rv)], &mut converted, &mut overlay);
            assert_eq!(shown[0].status, queued, "version {rv}");
        }
        // Not kept: the failed write's entry goes, and the cached status is back.
        overlay.queued.remove(&key);
        let (back, _) = KubeCluster::read_pod_groups(&[group("6")], &mut converted, &mut overlay);
        assert_eq!(back[0].status, cached[0].status);
        assert_ne!(back[0].status, queued);
        // An entry for a PodGroup that is gone is dropped with it.
        overlay.queued.insert(key.clone(), queued);
        let (none, _) = KubeCluster::read_pod_groups(&[], &mut converted, &mut overlay);
        assert!(none.is_empty() && overlay.queued.is_empty());
    }

    #[test]
    fn pending_pods_of_a_skipped_pod_group_are_told_up_to_the_bound_per_group() {
        let skipped = SkippedGroups::from([(
            ObjectKey::new("ns", "broken"),
            (
                "spec.minMember: -3 is not in 0..=100000".to_string(),
                "41".to_string(),
            ),
        )]);
        let mut told = SkippedGroupsTold::new();
        let mut warned = Vec::new();
        for i in 0..POD_WARNINGS_PER_SKIPPED_GROUP + 4 {
            let (pod, meta) = pending(&format!("broken-{i}"), "broken", "phalanx");
            let w = skipped_group_pod_warning((&pod, &meta), Some("phalanx"), &skipped, &mut told);
            warned.extend(w);
        }
        assert_eq!(warned.len(), POD_WARNINGS_PER_SKIPPED_GROUP);
        let (first, version) = &warned[0];
        assert_eq!(first.reason, REASON_INVALID_POD_GROUP);
        assert_eq!(first.uid.as_deref(), Some("uid-broken-0"));
        assert!(
            first
                .message
                .contains("PodGroup ns/broken is skipped (spec.minMember: -3"),
            "{}",
            first.message
        );
        // Told again if the group is broken again after a fix (a new group version).
        assert_eq!(version, "7/41");
        // A pod created later whose name sorts first is not told: the bound holds across
        // snapshots, not only within one; the pods told before are told again (the
        // queue's once-per-version memory drops the repeat).
        let (early, meta) = pending("broken-", "broken", "phalanx");
        assert!(
            skipped_group_pod_warning((&early, &meta), Some("phalanx"), &skipped, &mut told)
                .is_none()
        );
        let (again, meta) = pending("broken-0", "broken", "phalanx");
        assert!(
            skipped_group_pod_warning((&again, &meta), Some("phalanx"), &skipped, &mut told)
                .is_some()
        );
        // A new version of the group starts afresh.
        let fixed_then_broken = SkippedGroups::from([(
            ObjectKey::new("ns", "broken"),
            ("spec.minMember: -4".to_string(), "42".to_string()),
        )]);
        let w = skipped_group_pod_warning(
            (&early, &meta),
            Some("phalanx"),
            &fixed_then_broken,
            &mut told,
        );
        assert!(w.is_some_and(|(_, v)| v == "7/42"));
    }

    #[test]
    fn bound_pods_other_schedulers_pods_and_pods_of_readable_groups_are_not_told() {
        let skipped = SkippedGroups::from([(
            ObjectKey::new("ns", "broken"),
            ("why".to_string(), "1".to_string()),
        )]);
        let mut told = SkippedGroupsTold::new();
        let (mut bound, meta) = pending("a", "broken", "phalanx");
        bound.node_name = Some("n1".into());
        let (theirs, meta_b) = pending("b", "broken", "volcano");
        let (fine, meta_c) = pending("c", "fine", "phalanx");
        for (pod, meta) in [(&bound, &meta), (&theirs, &meta_b), (&fine, &meta_c)] {
            assert!(
                skipped_group_pod_warning((pod, meta), Some("phalanx"), &skipped, &mut told)
                    .is_none()
            );
        }
        // No scheduler name given (not serve): nobody is told.
        let (ours, meta_d) = pending("d", "broken", "phalanx");
        assert!(skipped_group_pod_warning((&ours, &meta_d), None, &skipped, &mut told).is_none());
    }
}
