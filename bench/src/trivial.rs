//! The trivial binder: the ceiling `phalanx-bench kube` compares every scheduler with.
//!
//! It watches the bench's pods whose schedulerName is [`TRIVIAL_SCHEDULER`] and binds each
//! one, as soon as the watch shows it pending, to the next node in name order (round
//! robin): no filter, no score, no gang, no ledger. Its requests go through the same kind
//! of token bucket as phalanx's (`--kube-qps/--kube-burst`) with `--bind-workers` in
//! flight, so at a given client budget it binds as fast as the API server lets one client
//! bind; a scheduler's pods/s divided by the trivial binder's is the fraction of that
//! ceiling it reaches.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube::runtime::watcher;
use phalanx_scheduler::cluster::kube::TokenBucket;
use tokio::sync::mpsc;

/// The schedulerName of the pods the trivial binder binds.
pub const TRIVIAL_SCHEDULER: &str = "phalanx-bench-trivial-binder";

/// What the binder did, for the bench's table.
#[derive(Debug, Default)]
pub struct BinderCounts {
    pub bound: AtomicUsize,
    /// Bind requests the API server refused (their count is printed at the end).
    pub failed: AtomicUsize,
}

/// The nodes a pod can be sent to, in name order: every node not marked unschedulable.
pub async fn node_names(client: &kube::Client) -> Result<Vec<String>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut names: Vec<String> = nodes
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|n| {
            !n.spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false)
        })
        .filter_map(|n| n.metadata.name)
        .collect();
    names.sort();
    if names.is_empty() {
        bail!("the trivial binder found no schedulable node");
    }
    Ok(names)
}

/// Binds every pending pod of `ns` whose schedulerName is [`TRIVIAL_SCHEDULER`] until the
/// task is aborted: the watch feeds a queue, and `workers` requests drain it, each after a
/// token of `limiter`.
pub async fn run(
    client: kube::Client,
    ns: String,
    nodes: Vec<String>,
    limiter: Arc<TokenBucket>,
    workers: usize,
    counts: Arc<BinderCounts>,
) {
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    // Aborted with this task: dropping the handle alone would leave the watch running.
    let feeder = AbortOnDrop(tokio::spawn(feed(pods.clone(), tx)));
    let next = AtomicUsize::new(0);
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
        .map(|name| {
            let node = nodes[next.fetch_add(1, Ordering::Relaxed) % nodes.len()].clone();
            let (pods, limiter, counts) = (pods.clone(), limiter.clone(), counts.clone());
            async move {
                limiter.acquire().await;
                match bind(&pods, &name, &node).await {
                    Ok(()) => counts.bound.fetch_add(1, Ordering::Relaxed),
                    Err(_) => counts.failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        })
        .buffer_unordered(workers.max(1))
        .for_each(|()| async {})
        .await;
    drop(feeder);
}

/// A task aborted when its handle is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sends each pending pod of the binder's to `tx` once.
async fn feed(pods: Api<Pod>, tx: mpsc::UnboundedSender<String>) {
    let mut sent: HashSet<String> = HashSet::new();
    let mut events = std::pin::pin!(watcher(pods, watcher::Config::default()));
    while let Ok(Some(event)) = events.try_next().await {
        let (watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = event else {
            continue;
        };
        let Some(spec) = p.spec.as_ref() else {
            continue;
        };
        let pending = spec.node_name.as_deref().is_none_or(str::is_empty);
        let ours = spec.scheduler_name.as_deref() == Some(TRIVIAL_SCHEDULER);
        if let (true, true, Some(name)) = (pending, ours, p.metadata.name)
            && sent.insert(name.clone())
            && tx.send(name).is_err()
        {
            return;
        }
    }
}

async fn bind(pods: &Api<Pod>, name: &str, node: &str) -> Result<(), kube::Error> {
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..ObjectReference::default()
        },
    };
    pods.create_subresource::<_, serde_json::Value>(
        "binding",
        name,
        &PostParams::default(),
        &binding,
    )
    .await
    .map(|_| ())
}
