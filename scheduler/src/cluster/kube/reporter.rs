//! `Reporter`: PodGroup status writes and Events, on a token bucket of their own, and the
//! queue that writes them in the background.
//!
//! A cycle's statuses and Events used to be written after its binds and before the next
//! cycle began, so every cycle's binds waited behind the previous cycle's reports (about a
//! fifth of a cycle at 1000 QPS: two writes per gang against one bind per pod). Then one
//! batch ran in the background, and the next cycle waited for it before handing over its
//! own. Now [`KubeCluster::report_in_background`] puts a batch on a queue and returns at
//! once: one task writes what is queued, and what is queued while it writes waits as one
//! backlog, merged as it comes in: each PodGroup's last status only (where its first one
//! stood), and each object's last Event of each reason. So the backlog is bounded by the
//! PodGroups and reasons there are, not by how many cycles ran while writes were behind:
//! it was a queue of whole batches, which at 10,000 pending PodGroups and a throttled
//! client grew with every cycle. A bind never waits for a report: reports have their own
//! bucket and their own task, and the loop that feeds the binds never waits for them.
//!
//! A status that changes only a PodGroup's counts waits until [`COUNTS_SETTLE`] after the
//! PodGroup's last status write (see [`Recent`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ::kube::api::{Api, Patch, PatchParams, PostParams};
use ::kube::core::{ApiResource, DynamicObject};
use ::kube::runtime::reflector::{ObjectRef, Store};
use futures::StreamExt;
use k8s_openapi::api::events::v1 as events;
use metrics::counter;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::recorder::{EventText, Regarding, event_body};
use super::retry::{RetryPolicy, describe, status_code, with_retry};
use super::{KubeCluster, Overlay, TokenBucket, rv_number, status_patch};
use crate::cluster::ClusterError;
use crate::framework::Event;
use crate::model::{ObjectKey, PodGroupStatus};
use crate::observe::name as metric;

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

/// How long after a PodGroup's last status write a status that changes only its counts
/// (`running`, `succeeded`, `failed`) waits. kwok, like a kubelet, starts a gang's pods a
/// few hundred milliseconds apart, so each cycle of a 200 ms period saw a new `running`
/// and wrote it: about three status writes a gang (1,449 for 500 gangs of 10), each a
/// patch of a custom resource. Volcano writes statuses once a session (1 s by default); a
/// phase or condition that changes is written at once, as before. It saved 3 % of the
/// status writes in the 5,000-pod bench (docs/benchmarks.md): kwok there starts a gang's
/// pods over 1 to 5 s, so most gangs still get a count a second while they start.
pub(super) const COUNTS_SETTLE: Duration = Duration::from_secs(1);

/// The statuses written in the last [`COUNTS_SETTLE`], for holding a counts-only change.
/// Kept by the writing task; what is older is forgotten at each write, so it holds the
/// PodGroups written lately, not all of them.
#[derive(Debug, Default)]
struct Recent(HashMap<ObjectKey, (Instant, PodGroupStatus)>);

impl Recent {
    /// When `status` may be written: `None` for at once, or the end of its PodGroup's
    /// settle time when it changes only the counts of the status written there lately.
    fn held_until(&self, key: &ObjectKey, status: &PodGroupStatus) -> Option<Instant> {
        let (at, written) = self.0.get(key)?;
        let counts = |s: &PodGroupStatus| (s.running, s.succeeded, s.failed);
        let only_counts = counts(written) != counts(status)
            && PodGroupStatus {
                running: status.running,
                succeeded: status.succeeded,
                failed: status.failed,
                ..written.clone()
            } == *status;
        only_counts.then_some(*at + COUNTS_SETTLE)
    }

    fn wrote(&mut self, key: &ObjectKey, status: &PodGroupStatus, at: Instant) {
        self.0.insert(key.clone(), (at, status.clone()));
    }

    fn forget_settled(&mut self, now: Instant) {
        self.0.retain(|_, (at, _)| *at + COUNTS_SETTLE > now);
    }
}

/// What waits to be written, merged as it is queued.
#[derive(Debug, Default)]
struct Backlog {
    /// Each PodGroup's last status, where its first one stood (a status is the whole of
    /// it: an older one would be overwritten at once).
    statuses: Vec<(ObjectKey, PodGroupStatus)>,
    status_at: HashMap<ObjectKey, usize>,
    /// Each object's last Event of each reason, where its first one stood: a condition
    /// whose message changed every cycle while writes were behind says its latest.
    events: Vec<Event>,
    event_at: HashMap<(ObjectKey, String), usize>,
    /// Answered once everything queued before them is written.
    flushes: Vec<oneshot::Sender<()>>,
}

/// What one write takes from the backlog.
type Taken = (
    Vec<(ObjectKey, PodGroupStatus)>,
    Vec<Event>,
    Vec<oneshot::Sender<()>>,
);

impl Backlog {
    /// Queues a cycle's statuses and Events; returns how many Events replaced an earlier
    /// one of the same object and reason.
    fn add(&mut self, statuses: Vec<(ObjectKey, PodGroupStatus)>, events: Vec<Event>) -> u64 {
        for (key, status) in statuses {
            match self.status_at.get(&key) {
                Some(&i) => self.statuses[i].1 = status,
                None => {
                    self.status_at.insert(key.clone(), self.statuses.len());
                    self.statuses.push((key, status));
                }
            }
        }
        let mut replaced = 0;
        for e in events {
            let at = (e.object.clone(), e.reason.clone());
            match self.event_at.get(&at) {
                Some(&i) => {
                    self.events[i] = e;
                    replaced += 1;
                }
                None => {
                    self.event_at.insert(at, self.events.len());
                    self.events.push(e);
                }
            }
        }
        replaced
    }

    /// Everything queued, for one write; the backlog starts over.
    fn take(&mut self) -> Taken {
        let taken = std::mem::take(self);
        (taken.statuses, taken.events, taken.flushes)
    }

    /// What may be written at `now`: everything when a flush waits, else all but the
    /// statuses `recent` holds, which stay queued (a later status of theirs replaces them
    /// as before). Also returns when the first of those held may be written.
    fn take_due(&mut self, now: Instant, recent: &Recent) -> (Taken, Option<Instant>) {
        if !self.flushes.is_empty() {
            return (self.take(), None);
        }
        let (statuses, events, flushes) = self.take();
        let mut due = Vec::with_capacity(statuses.len());
        let mut next: Option<Instant> = None;
        for (key, status) in statuses {
            match recent.held_until(&key, &status).filter(|&at| at > now) {
                Some(at) => {
                    next = Some(next.map_or(at, |n| n.min(at)));
                    self.status_at.insert(key.clone(), self.statuses.len());
                    self.statuses.push((key, status));
                }
                None => due.push((key, status)),
            }
        }
        ((due, events, flushes), next)
    }
}

/// The backlog of statuses and Events and the one task that writes it.
pub(super) struct ReportQueue {
    backlog: Arc<Mutex<Backlog>>,
    /// Wakes the task; one wakeup pending is enough, since the task takes the whole
    /// backlog. The task ends when this is dropped.
    wake: mpsc::Sender<()>,
    /// Failures of the writes since they were last taken.
    failures: Arc<Mutex<Vec<ClusterError>>>,
    task: JoinHandle<()>,
}

impl ReportQueue {
    pub(super) fn start(handle: &Handle, reporter: Arc<Reporter>) -> Self {
        let (wake, woken) = mpsc::channel(1);
        let backlog = Arc::new(Mutex::new(Backlog::default()));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let task = handle.spawn(write_queued(
            reporter,
            backlog.clone(),
            woken,
            failures.clone(),
        ));
        Self {
            backlog,
            wake,
            failures,
            task,
        }
    }

    fn backlog(&self) -> std::sync::MutexGuard<'_, Backlog> {
        self.backlog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Wakes the task unless a wakeup is pending already.
    fn wake(&self) {
        let _ = self.wake.try_send(());
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

/// Writes the backlog each time it is woken, or when a held status may be written:
/// statuses first, then Events; what is queued meanwhile waits, merged, for the next write.
async fn write_queued(
    reporter: Arc<Reporter>,
    backlog: Arc<Mutex<Backlog>>,
    mut woken: mpsc::Receiver<()>,
    failures: Arc<Mutex<Vec<ClusterError>>>,
) {
    let mut recent = Recent::default();
    let mut held_until: Option<Instant> = None;
    loop {
        let woke = match held_until {
            Some(at) => tokio::time::timeout_at(at.into(), woken.recv())
                .await
                .unwrap_or(Some(())),
            None => woken.recv().await,
        };
        if woke.is_none() {
            return;
        }
        let now = Instant::now();
        recent.forget_settled(now);
        let ((statuses, events, flushes), next) = backlog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take_due(now, &recent);
        held_until = next;
        // The time of the attempt: a write that failed is queued again by the next cycle
        // with the same status, which is not held.
        for (key, status) in &statuses {
            recent.wrote(key, status, now);
        }
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
        let mut overlay = self
            .overlay
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The write ended: it shows through `status` or the cache from now on. A newer
        // status queued meanwhile stays until its own write ends.
        if overlay.queued.get(key) == Some(status) {
            overlay.queued.remove(key);
        }
        match written {
            Ok(obj) => {
                overlay
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
    /// failures of the writes since the last call. What waits is merged (see [`Backlog`]);
    /// [`KubeCluster::finish_reports`] waits for it.
    pub fn report_in_background(
        &mut self,
        statuses: Vec<(ObjectKey, PodGroupStatus)>,
        events: Vec<Event>,
    ) -> Vec<ClusterError> {
        if !statuses.is_empty() || !events.is_empty() {
            let mut overlay = self
                .overlay
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for (key, status) in &statuses {
                overlay.queued.insert(key.clone(), status.clone());
            }
            drop(overlay);
            let replaced = self.reporting.backlog().add(statuses, events);
            counter!(metric::EVENTS_REPLACED).increment(replaced);
            self.reporting.wake();
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
        self.reporting.backlog().flushes.push(done);
        self.reporting.wake();
        // The task answers every flush it takes and ends only with `self`, unless it
        // panicked: then nothing would answer.
        if !self.reporting.task.is_finished() {
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

    fn event(object: &ObjectKey, reason: &str, message: &str) -> Event {
        Event {
            object: object.clone(),
            kind: "Warning",
            reason: reason.into(),
            message: message.into(),
        }
    }

    #[test]
    fn a_backlog_writes_each_pod_groups_last_status_where_its_first_stood() {
        let (a, b) = (ObjectKey::new("ns", "a"), ObjectKey::new("ns", "b"));
        let mut backlog = Backlog::default();
        backlog.add(vec![(a.clone(), status(1)), (b.clone(), status(1))], vec![]);
        backlog.add(vec![(a.clone(), status(2))], vec![]);
        let (statuses, events, _) = backlog.take();
        assert_eq!(statuses, vec![(a, status(2)), (b, status(1))]);
        assert!(events.is_empty());
        let (statuses, events, flushes) = backlog.take();
        assert!(
            statuses.is_empty() && events.is_empty() && flushes.is_empty(),
            "taken whole"
        );
    }

    fn phase(phase: crate::model::PodGroupPhase, running: u32) -> PodGroupStatus {
        PodGroupStatus {
            phase,
            running,
            ..PodGroupStatus::default()
        }
    }

    #[test]
    fn a_status_that_changes_only_the_counts_waits_until_its_pod_groups_last_write_settled() {
        use crate::model::PodGroupPhase::{Inqueue, Running};
        let (a, b) = (ObjectKey::new("ns", "a"), ObjectKey::new("ns", "b"));
        let t0 = Instant::now();
        let mut recent = Recent::default();
        recent.wrote(&a, &phase(Running, 0), t0);
        recent.wrote(&b, &phase(Inqueue, 0), t0);
        let mut backlog = Backlog::default();
        // a: only `running` changed, so it waits; b: its phase changed, written at once.
        backlog.add(
            vec![
                (a.clone(), phase(Running, 4)),
                (b.clone(), phase(Running, 0)),
            ],
            vec![],
        );
        let later = t0 + COUNTS_SETTLE / 2;
        let ((statuses, _, _), next) = backlog.take_due(later, &recent);
        assert_eq!(statuses, vec![(b.clone(), phase(Running, 0))]);
        assert_eq!(next, Some(t0 + COUNTS_SETTLE));
        // Held, it is still merged with what comes later: the last count is written.
        backlog.add(vec![(a.clone(), phase(Running, 10))], vec![]);
        let ((statuses, _, _), next) = backlog.take_due(later, &recent);
        assert!(statuses.is_empty() && next == Some(t0 + COUNTS_SETTLE));
        let ((statuses, _, _), next) = backlog.take_due(t0 + COUNTS_SETTLE, &recent);
        assert_eq!(statuses, vec![(a.clone(), phase(Running, 10))]);
        assert_eq!(next, None);
        // The same status again (its write failed, the next cycle queued it again) and a
        // PodGroup written long ago are not held; what settled is forgotten.
        backlog.add(
            vec![
                (b.clone(), phase(Inqueue, 0)),
                (a.clone(), phase(Running, 3)),
            ],
            vec![],
        );
        recent.forget_settled(t0 + COUNTS_SETTLE);
        let ((statuses, _, _), _) = backlog.take_due(later, &recent);
        assert_eq!(statuses.len(), 2);
        assert!(recent.0.is_empty());
    }

    #[test]
    fn a_flush_takes_the_statuses_held_for_their_counts_and_a_new_phase_ends_the_hold() {
        use crate::model::PodGroupPhase::{Completed, Running};
        let a = ObjectKey::new("ns", "a");
        let t0 = Instant::now();
        let mut recent = Recent::default();
        recent.wrote(&a, &phase(Running, 2), t0);
        let mut backlog = Backlog::default();
        backlog.add(vec![(a.clone(), phase(Running, 5))], vec![]);
        let (done, _answer) = oneshot::channel();
        backlog.flushes.push(done);
        let ((statuses, _, flushes), next) = backlog.take_due(t0, &recent);
        assert_eq!((statuses.len(), flushes.len(), next), (1, 1, None));
        backlog.add(vec![(a.clone(), phase(Running, 6))], vec![]);
        backlog.add(vec![(a.clone(), phase(Completed, 0))], vec![]);
        let ((statuses, _, _), next) = backlog.take_due(t0, &recent);
        assert_eq!((statuses, next), (vec![(a, phase(Completed, 0))], None));
    }

    /// Named for the bug: the queue held every cycle's batch while a write was in flight,
    /// so at 10,000 pending PodGroups and a throttled client a replica's memory grew with
    /// every cycle.
    #[test]
    fn a_backlog_behind_a_slow_write_stays_as_large_as_its_pod_groups_and_reasons_not_its_cycles() {
        let groups: Vec<ObjectKey> = (0..100)
            .map(|i| ObjectKey::new("ns", format!("g{i}")))
            .collect();
        let mut backlog = Backlog::default();
        let mut replaced = 0;
        for cycle in 0..50 {
            let statuses = groups.iter().map(|g| (g.clone(), status(cycle))).collect();
            let message = format!("0/{cycle} nodes are available");
            let mut events: Vec<Event> = groups
                .iter()
                .map(|g| event(g, "NotEnoughResources", &message))
                .collect();
            if cycle == 7 {
                events.push(event(&groups[3], "Inqueue", "PodGroup is Inqueue"));
            }
            replaced += backlog.add(statuses, events);
        }
        let (statuses, events, _) = backlog.take();
        assert_eq!(statuses.len(), 100);
        assert!(statuses.iter().all(|(_, s)| *s == status(49)));
        // Each object's last Event of each reason, in the order they first came.
        assert_eq!(events.len(), 101);
        assert_eq!(
            events[0],
            event(&groups[0], "NotEnoughResources", "0/49 nodes are available")
        );
        assert_eq!(
            events[100],
            event(&groups[3], "Inqueue", "PodGroup is Inqueue")
        );
        assert_eq!(replaced, 49 * 100);
    }
}
