//! `Reporter`: PodGroup status writes and Events, on a token bucket of their own, and the
//! queue that writes them in the background.
//!
//! A cycle's statuses and Events used to be written after its binds and before the next
//! cycle began, so every cycle's binds waited behind the previous cycle's reports (about a
//! fifth of a cycle at 1000 QPS: two writes per gang against one bind per pod). Then one
//! batch ran in the background, and the next cycle waited for it before handing over its
//! own. Now [`KubeCluster::report_in_background`] puts a batch on a queue and returns at
//! once: one task writes the batches in the order they came (a PodGroup's statuses land in
//! the order they were decided), and when several wait it writes them as one, each
//! PodGroup's last status only. A bind never waits for a report: reports have their own
//! bucket and their own task, and the loop that feeds the binds never waits for them.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use ::kube::api::{Api, Patch, PatchParams, PostParams};
use ::kube::core::{ApiResource, DynamicObject};
use ::kube::runtime::reflector::{ObjectRef, Store};
use futures::StreamExt;
use k8s_openapi::api::events::v1 as events;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot};
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

/// What the reporting task is asked.
enum Report {
    Batch(Vec<(ObjectKey, PodGroupStatus)>, Vec<Event>),
    /// Answered once every batch queued before it is written.
    Flush(oneshot::Sender<()>),
}

/// The queue of statuses and Events and the one task that writes them, in order.
pub(super) struct ReportQueue {
    queue: mpsc::UnboundedSender<Report>,
    /// Failures of the batches written since they were last taken.
    failures: Arc<Mutex<Vec<ClusterError>>>,
    _task: JoinHandle<()>,
}

impl ReportQueue {
    pub(super) fn start(handle: &Handle, reporter: Arc<Reporter>) -> Self {
        let (queue, rx) = mpsc::unbounded_channel();
        let failures = Arc::new(Mutex::new(Vec::new()));
        let task = handle.spawn(write_queued(reporter, rx, failures.clone()));
        Self {
            queue,
            failures,
            _task: task,
        }
    }

    fn take_failures(&self) -> Vec<ClusterError> {
        std::mem::take(
            &mut *self
                .failures
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// Writes the queued batches in order; what waits when one ends is written as one batch,
/// each PodGroup's last status only (a status is the whole of it: an older one would be
/// overwritten at once) and every Event.
async fn write_queued(
    reporter: Arc<Reporter>,
    mut rx: mpsc::UnboundedReceiver<Report>,
    failures: Arc<Mutex<Vec<ClusterError>>>,
) {
    while let Some(first) = rx.recv().await {
        let mut statuses: Vec<(ObjectKey, PodGroupStatus)> = Vec::new();
        let mut events = Vec::new();
        let mut flushes = Vec::new();
        let mut next = Some(first);
        while let Some(report) = next.take().or_else(|| rx.try_recv().ok()) {
            match report {
                Report::Batch(s, e) => {
                    statuses.extend(s);
                    events.extend(e);
                }
                Report::Flush(done) => flushes.push(done),
            }
        }
        let statuses = last_status_each(statuses);
        if !statuses.is_empty() || !events.is_empty() {
            let failed = reporter.clone().write(statuses, events).await;
            failures
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend(failed);
        }
        for done in flushes {
            let _ = done.send(());
        }
    }
}

/// Each PodGroup's last status, where its first one stood.
fn last_status_each(
    statuses: Vec<(ObjectKey, PodGroupStatus)>,
) -> Vec<(ObjectKey, PodGroupStatus)> {
    let mut at: std::collections::HashMap<ObjectKey, usize> = std::collections::HashMap::new();
    let mut out: Vec<(ObjectKey, PodGroupStatus)> = Vec::new();
    for (key, status) in statuses {
        match at.get(&key) {
            Some(&i) => out[i].1 = status,
            None => {
                at.insert(key.clone(), out.len());
                out.push((key, status));
            }
        }
    }
    out
}

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
    /// Queues statuses and Events for the background task and returns at once, with the
    /// failures of the batches written since the last call. Batches are written in the
    /// order they were queued; [`KubeCluster::finish_reports`] waits for the queue.
    pub fn report_in_background(
        &mut self,
        statuses: Vec<(ObjectKey, PodGroupStatus)>,
        events: Vec<Event>,
    ) -> Vec<ClusterError> {
        if !statuses.is_empty() || !events.is_empty() {
            // The task ends only with the queue: a send cannot fail while `self` lives.
            let _ = self.reporting.queue.send(Report::Batch(statuses, events));
        }
        self.reporting.take_failures()
    }

    /// Waits for the queue and logs its failures: before a single status or Event write
    /// (so a PodGroup's writes land in the order they were made), and when the caller
    /// stops.
    pub fn finish_reports_logged(&mut self) {
        for e in self.finish_reports() {
            tracing::warn!(error = %e, "status or event write failed");
        }
    }

    /// Waits until every status and Event queued so far is written; returns the failures
    /// not taken yet.
    pub fn finish_reports(&mut self) -> Vec<ClusterError> {
        let (done, written) = oneshot::channel();
        if self.reporting.queue.send(Report::Flush(done)).is_ok() {
            let _ = self.handle.block_on(written);
        }
        self.reporting.take_failures()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(running: u32) -> PodGroupStatus {
        PodGroupStatus {
            running,
            ..PodGroupStatus::default()
        }
    }

    #[test]
    fn a_backlog_writes_each_pod_groups_last_status_where_its_first_stood() {
        let (a, b) = (ObjectKey::new("ns", "a"), ObjectKey::new("ns", "b"));
        let out = last_status_each(vec![
            (a.clone(), status(1)),
            (b.clone(), status(1)),
            (a.clone(), status(2)),
        ]);
        assert_eq!(out, vec![(a, status(2)), (b, status(1))]);
    }
}
