//! `KubeBinder`: one pod's Binding request, owned apart from the [`KubeCluster`] so that a
//! bind can run as a task of its own. The cluster's synchronous binds (`bind`, `bind_all`)
//! and serve's bind pool (`serve/binds.rs`, binds that run while the next cycle plans) go
//! through the same code.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use ::kube::api::{Api, PostParams};
use ::kube::runtime::reflector::{ObjectRef, Store};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::retry::{RetryPolicy, describe, status_code, with_retry, with_retry_gated};
use super::{BOUND_BY_ANNOTATION, CachedPod, Overlay, TokenBucket};
use crate::cluster::ClusterError;
use crate::model::ObjectKey;

/// What a Binding request needs; shared by the cluster and the tasks that bind.
pub struct KubeBinder {
    pub(super) client: ::kube::Client,
    /// The bucket of binds and evictions (the cluster's).
    pub(super) limiter: Arc<TokenBucket>,
    pub(super) retry: RetryPolicy,
    pub(super) bound_by: Option<String>,
    pub(super) pods: Store<CachedPod>,
    pub(super) nodes: Store<core::Node>,
    /// Binds made here that the cache does not show yet (the cluster's).
    pub(super) overlay: Arc<Mutex<Overlay>>,
}

impl std::fmt::Debug for KubeBinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeBinder")
            .field("bound_by", &self.bound_by)
            .finish_non_exhaustive()
    }
}

/// Re-reads of a pod after a 409 before a bind gives up.
const CONFLICT_REREADS: u32 = 3;

/// A bind of `pod` to `node` when the pod is bound to `bound_to` already: done when it is
/// the same node, `AlreadyBound` naming both nodes otherwise.
fn bound_answer(pod: &ObjectKey, bound_to: String, node: &str) -> Result<(), ClusterError> {
    if bound_to == node {
        Ok(())
    } else {
        Err(ClusterError::AlreadyBound {
            pod: pod.to_string(),
            bound_to,
            requested: node.to_string(),
        })
    }
}

impl KubeBinder {
    /// The answer to a bind that the cache gives without a request: already bound here
    /// (done), bound elsewhere (`AlreadyBound`), or the node unknown (`NotFound`).
    pub(super) fn answer_from_cache(
        &self,
        pod: &ObjectKey,
        node: &str,
    ) -> Option<Result<(), ClusterError>> {
        let cached = self
            .pods
            .get(&ObjectRef::new(&pod.name).within(&pod.namespace));
        let bound_to = cached
            .as_ref()
            .and_then(|p| p.node_name())
            .map(str::to_string);
        if let Some(b) = bound_to {
            return Some(bound_answer(pod, b, node));
        }
        if self.nodes.get(&ObjectRef::new(node)).is_none() {
            return Some(Err(ClusterError::NotFound {
                kind: "node",
                key: node.to_string(),
            }));
        }
        None
    }

    /// Overlays a bind made here on the snapshots until the cache shows it.
    pub(super) fn note_bound(&self, pod: &ObjectKey, node: &str) {
        self.overlay
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .bound
            .insert(pod.clone(), node.to_string());
    }

    /// Binds `pod` to `node` (the cache first, then the pods/binding subresource through
    /// the bucket, retried), noting a success on the snapshots.
    pub async fn bind(&self, pod: &ObjectKey, node: &str) -> Result<(), ClusterError> {
        match self.bind_gated(pod, node, &|| true).await {
            Some(answer) => answer,
            None => unreachable!("an open gate never stops a bind"),
        }
    }

    /// [`KubeBinder::bind`], asking `gate` before each Binding request is sent (after its
    /// token, after a backoff, before a retry after a conflict): `None` when it said no,
    /// and nothing more was sent. The bind pool's gate is "this replica still owns the
    /// pod's shard at the epoch the placement was committed at".
    pub async fn bind_gated(
        &self,
        pod: &ObjectKey,
        node: &str,
        gate: &(dyn Fn() -> bool + Sync),
    ) -> Option<Result<(), ClusterError>> {
        if let Some(answer) = self.answer_from_cache(pod, node) {
            return Some(answer);
        }
        let answer = self.post(pod, node, gate).await;
        if let Some(Ok(())) = answer {
            self.note_bound(pod, node);
        }
        answer
    }

    async fn post(
        &self,
        pod: &ObjectKey,
        node: &str,
        gate: &(dyn Fn() -> bool + Sync),
    ) -> Option<Result<(), ClusterError>> {
        let api: Api<core::Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let binding = core::Binding {
            metadata: ObjectMeta {
                name: Some(pod.name.clone()),
                namespace: Some(pod.namespace.clone()),
                annotations: self
                    .bound_by
                    .as_ref()
                    .map(|id| BTreeMap::from([(BOUND_BY_ANNOTATION.to_string(), id.clone())])),
                ..ObjectMeta::default()
            },
            target: core::ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node.to_string()),
                ..core::ObjectReference::default()
            },
        };
        let post = PostParams::default();
        for _ in 0..CONFLICT_REREADS {
            let posted = with_retry_gated(&self.limiter, &self.retry, gate, || {
                api.create_subresource::<_, serde_json::Value>(
                    "binding", &pod.name, &post, &binding,
                )
            })
            .await?;
            match posted {
                Ok(_) => return Some(Ok(())),
                Err(e) if status_code(&e) == Some(404) => {
                    return Some(Err(ClusterError::NotFound {
                        kind: "pod",
                        key: pod.to_string(),
                    }));
                }
                // Already bound (by us before a failover, or by someone else): the pod says where.
                Err(e) if status_code(&e) == Some(409) => {
                    let current =
                        with_retry(&self.limiter, &self.retry, || api.get_opt(&pod.name)).await;
                    let current = match current {
                        Ok(c) => c,
                        Err(e) => {
                            return Some(Err(ClusterError::Refused(format!(
                                "re-reading pod {pod}: {}",
                                describe(&e)
                            ))));
                        }
                    };
                    let Some(current) = current else {
                        return Some(Err(ClusterError::NotFound {
                            kind: "pod",
                            key: pod.to_string(),
                        }));
                    };
                    match current
                        .spec
                        .and_then(|s| s.node_name)
                        .filter(|n| !n.is_empty())
                    {
                        Some(bound) => return Some(bound_answer(pod, bound, node)),
                        None => continue,
                    }
                }
                Err(e) => {
                    return Some(Err(ClusterError::Refused(format!(
                        "binding pod {pod} to node {node}: {}",
                        describe(&e)
                    ))));
                }
            }
        }
        Some(Err(ClusterError::Refused(format!(
            "binding pod {pod} to node {node}: still conflicting after {CONFLICT_REREADS} re-reads"
        ))))
    }
}
