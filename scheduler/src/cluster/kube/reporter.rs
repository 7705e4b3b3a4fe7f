//! `Reporter`: PodGroup status writes and Events, on a token bucket of their own, and the
//! one batch of them that may run in the background while the next cycle binds.
//!
//! A cycle's statuses and Events used to be written after its binds and before the next
//! cycle began, so every cycle's binds waited behind the previous cycle's reports (about a
//! fifth of a cycle at 1000 QPS: two writes per gang against one bind per pod). With
//! [`KubeCluster::report_in_background`] a batch is handed to the runtime and the next cycle
//! starts at once; the following batch waits for the one in flight, so a PodGroup's
//! statuses land in the order they were decided and at most one batch is queued.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use ::kube::api::{Api, Patch, PatchParams, PostParams};
use ::kube::core::{ApiResource, DynamicObject};
use ::kube::runtime::reflector::{ObjectRef, Store};
use futures::StreamExt;
use k8s_openapi::api::events::v1 as events;
use tokio::task::JoinHandle;

use super::recorder::{EventText, Regarding, event_body};
use super::retry::{RetryPolicy, describe, status_code, with_retry};
use super::{KubeCluster, Overlay, TokenBucket, rv_number, status_patch};
use crate::cluster::ClusterError;
use crate::framework::Event;
use crate::model::{ObjectKey, PodGroupStatus};

/// What status and Event writes need, shared with the background batch.
pub(super) struct Reporter {
    pub(super) client: ::kube::Client,
    pub(super) pod_group_resource: ApiResource,
    /// A bucket of its own, as kube-scheduler records Events through a client of its own,
    /// so reporting never takes a bind's token.
    pub(super) limiter: Arc<TokenBucket>,
    pub(super) retry: RetryPolicy,
    pub(super) instance: String,
    pub(super) workers: usize,
    pub(super) pods: Store<super::SlimPod>,
    pub(super) pod_groups: Store<DynamicObject>,
    pub(super) overlay: Arc<Mutex<Overlay>>,
    /// Makes Event names unique within one nanosecond.
    pub(super) event_seq: AtomicU32,
}

/// The batch of statuses and Events in flight; its failures once it ended.
pub(super) type InFlight = Option<JoinHandle<Vec<ClusterError>>>;

impl Reporter {
    /// Writes the statuses, then the Events, `workers` requests in flight at most; returns
    /// the failures. Owns what it writes, so that it can run as a task of its own.
    pub(super) async fn write(
        self: Arc<Self>,
        statuses: Vec<(ObjectKey, PodGroupStatus)>,
        events: Vec<Event>,
    ) -> Vec<ClusterError> {
        let workers = self.workers.max(1);
        let mut failures: Vec<ClusterError> =
            futures::stream::iter(statuses.into_iter().map(|(key, status)| {
                let me = self.clone();
                async move { me.status(&key, &status).await }
            }))
            .buffer_unordered(workers)
            .filter_map(|r| async move { r.err() })
            .collect()
            .await;
        failures.extend(
            futures::stream::iter(events.into_iter().map(|e| {
                let me = self.clone();
                async move { me.event(&e).await }
            }))
            .buffer_unordered(workers)
            .filter_map(|r| async move { r.err() })
            .collect::<Vec<_>>()
            .await,
        );
        failures
    }

    pub(super) async fn status(
        &self,
        key: &ObjectKey,
        status: &PodGroupStatus,
    ) -> Result<(), ClusterError> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &key.namespace,
            &self.pod_group_resource,
        );
        let patch = Patch::Merge(status_patch(status));
        let params = PatchParams::default();
        let written = with_retry(&self.limiter, &self.retry, || {
            api.patch(&key.name, &params, &patch)
        })
        .await;
        match written {
            Ok(obj) => {
                self.overlay
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .status
                    .insert(key.clone(), (rv_number(&obj.metadata), status.clone()));
                Ok(())
            }
            Err(e) if status_code(&e) == Some(404) => Err(ClusterError::NotFound {
                kind: "podgroup",
                key: key.to_string(),
            }),
            Err(e) => Err(ClusterError::Refused(format!(
                "writing the status of PodGroup {key}: {}",
                describe(&e)
            ))),
        }
    }

    pub(super) async fn event(&self, event: &Event) -> Result<(), ClusterError> {
        let key = &event.object;
        let group = self.pod_groups.get(
            &ObjectRef::new_with(&key.name, self.pod_group_resource.clone()).within(&key.namespace),
        );
        let (regarding, uid) = match group {
            Some(pg) => (Regarding::PodGroup(key.clone()), pg.metadata.uid.clone()),
            None => {
                let pod = self
                    .pods
                    .get(&ObjectRef::new(&key.name).within(&key.namespace));
                let uid = pod.and_then(|p| p.metadata.uid.clone());
                (Regarding::Pod(key.clone()), uid)
            }
        };
        let text = EventText {
            action: "Scheduling",
            kind: event.kind,
            reason: event.reason.clone(),
            note: event.message.clone(),
        };
        self.post_event(&regarding, uid.as_deref(), &text).await
    }

    pub(super) async fn post_event(
        &self,
        regarding: &Regarding,
        uid: Option<&str>,
        text: &EventText,
    ) -> Result<(), ClusterError> {
        let now = k8s_openapi::jiff::Timestamp::now();
        // Unique names within one nanosecond too.
        let seq = self.event_seq.fetch_add(1, Ordering::Relaxed);
        let now = now
            .checked_add(k8s_openapi::jiff::SignedDuration::from_nanos(i64::from(
                seq % 1000,
            )))
            .unwrap_or(now);
        let body = event_body(regarding, uid, text, &self.instance, now);
        let api: Api<events::Event> =
            Api::namespaced(self.client.clone(), regarding.event_namespace());
        let post = PostParams::default();
        with_retry(&self.limiter, &self.retry, || api.create(&post, &body))
            .await
            .map(|_| ())
            .map_err(|e| {
                ClusterError::Refused(format!("recording event on {regarding}: {}", describe(&e)))
            })
    }
}

impl KubeCluster {
    /// Hands statuses and Events to the runtime and returns without waiting for them, so
    /// the next cycle binds while they are written. The batch before, if still in flight,
    /// is waited for first (order per PodGroup; at most one batch queued); its failures
    /// are returned. [`KubeCluster::finish_reports`] waits for the last one.
    pub fn report_in_background(
        &mut self,
        statuses: Vec<(ObjectKey, PodGroupStatus)>,
        events: Vec<Event>,
    ) -> Vec<ClusterError> {
        let failures = self.finish_reports();
        if statuses.is_empty() && events.is_empty() {
            return failures;
        }
        let write = self.reporter.clone().write(statuses, events);
        self.reporting = Some(self.handle.spawn(write));
        failures
    }

    /// Waits for the batch in flight and logs its failures: before a single status or
    /// Event write (so a PodGroup's writes land in the order they were made), and when the
    /// caller stops.
    pub fn finish_reports_logged(&mut self) {
        for e in self.finish_reports() {
            tracing::warn!(error = %e, "status or event write failed");
        }
    }

    /// Waits for the batch of statuses and Events in flight, if any; returns its failures.
    pub fn finish_reports(&mut self) -> Vec<ClusterError> {
        let Some(batch) = self.reporting.take() else {
            return Vec::new();
        };
        match self.handle.block_on(batch) {
            Ok(failures) => failures,
            Err(e) => vec![ClusterError::Refused(format!(
                "the status and Event writes in the background stopped: {e}"
            ))],
        }
    }
}
