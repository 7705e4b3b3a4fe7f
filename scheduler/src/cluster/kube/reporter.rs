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
//! A new phase is written at once; a status that keeps the phase waits [`STATUS_SETTLE`]
//! (see [`Urgency`]).

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
use crate::framework::cycle::CONDITION_UNSCHEDULABLE;
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
    pub(super) pods: Store<super::CachedPod>,
    pub(super) pod_groups: Store<DynamicObject>,
    pub(super) overlay: Arc<Mutex<Overlay>>,
    /// Makes Event names unique within one nanosecond.
    pub(super) event_seq: AtomicU32,
}

/// How long a status that keeps its PodGroup's phase waits after it was first queued
/// (a new phase is written at once). Volcano writes a PodGroup's status once a session
/// (1 s by default); phalanx plans every 200 ms, so without this a state that lasts one
/// cycle was written, and its Event posted, where Volcano would never see it: a gang seen
/// while its pods were still being created got `Unschedulable`/`NotEnoughPods` and a
/// Warning one cycle before it was placed (127 of 500 gangs in the 5,000-pod bench), and
/// kwok, like a kubelet, starting a gang's pods over a few seconds made a count write a
/// second. What changes meanwhile replaces the queued status, so the last one is written.
const STATUS_SETTLE: Duration = Duration::from_secs(1);

/// How long a status that changes only the counts waits while fewer of the gang's pods
/// are counted (`running`, `succeeded`, `failed`) than its minMember: the gang is still
/// starting, and the count that completes it ends the wait (it waits [`STATUS_SETTLE`]).
const STARTING_SETTLE: Duration = Duration::from_secs(5);

/// How soon a queued status is written, judged against the status its PodGroup has, or
/// will have once the writes queued before it end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Urgency {
    /// A new phase (or a PodGroup not read yet): at once.
    Now,
    /// The same phase, a new condition or new counts: [`STATUS_SETTLE`].
    Settle,
    /// Only the counts, of a gang that is still starting: [`STARTING_SETTLE`].
    Starting,
}

impl Urgency {
    /// `status` against the one its PodGroup has, or will have once the writes queued
    /// before it end, and its minMember (`None`: a PodGroup not read yet).
    fn of(status: &PodGroupStatus, before: Option<(&PodGroupStatus, u32)>) -> Self {
        let Some((before, min_member)) = before else {
            return Self::Now;
        };
        if status.phase != before.phase {
            return Self::Now;
        }
        let counted = status.running + status.succeeded + status.failed;
        let only_counts = *status
            == PodGroupStatus {
                running: status.running,
                succeeded: status.succeeded,
                failed: status.failed,
                ..before.clone()
            };
        if only_counts && counted < min_member {
            Self::Starting
        } else {
            Self::Settle
        }
    }

    fn due(self, since: Instant) -> Option<Instant> {
        match self {
            Self::Now => None,
            Self::Settle => Some(since + STATUS_SETTLE),
            Self::Starting => Some(since + STARTING_SETTLE),
        }
    }
}

/// A status waiting to be written.
#[derive(Debug)]
struct Queued {
    key: ObjectKey,
    status: PodGroupStatus,
    /// When its PodGroup's first status still unwritten was queued.
    since: Instant,
    /// When it may be written; `None` for at once.
    due: Option<Instant>,
}

/// The reason of a status's `Unschedulable` condition, if that is its last.
fn unschedulable_reason(status: &PodGroupStatus) -> Option<&str> {
    status
        .conditions
        .last()
        .filter(|c| c.kind == CONDITION_UNSCHEDULABLE)
        .map(|c| c.reason.as_str())
}

/// What waits to be written, merged as it is queued.
#[derive(Debug, Default)]
struct Backlog {
    /// Each PodGroup's last status, where its first one stood (a status is the whole of
    /// it: an older one would be overwritten at once).
    statuses: Vec<Queued>,
    status_at: HashMap<ObjectKey, usize>,
    /// Each object's last Event of each reason, where its first one stood: a condition
    /// whose message changed every cycle while writes were behind says its latest. `None`
    /// where one was dropped (see [`Backlog::add`]).
    events: Vec<Option<Event>>,
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
    /// Queues a cycle's statuses, with how soon each may be written, and Events at `now`;
    /// returns how many Events replaced or dropped an earlier one. A status that replaces
    /// one still queued keeps its time in the queue, so changes that keep coming are
    /// written once a [`STATUS_SETTLE`], not never. An `Unschedulable` condition replaced
    /// before it was written takes its Warning with it: it told of a state the PodGroup
    /// left within a second (a gang whose last pods were being created).
    fn add(
        &mut self,
        statuses: Vec<(ObjectKey, PodGroupStatus, Urgency)>,
        events: Vec<Event>,
        now: Instant,
    ) -> u64 {
        let mut replaced = 0;
        for (key, status, urgency) in statuses {
            let Some(&i) = self.status_at.get(&key) else {
                self.status_at.insert(key.clone(), self.statuses.len());
                let due = urgency.due(now);
                let since = now;
                self.statuses.push(Queued {
                    key,
                    status,
                    since,
                    due,
                });
                continue;
            };
            let queued = &mut self.statuses[i];
            let left = unschedulable_reason(&queued.status)
                .filter(|&r| unschedulable_reason(&status) != Some(r))
                .map(str::to_string);
            queued.due = urgency.due(queued.since);
            queued.status = status;
            if let Some(reason) = left {
                replaced += self.drop_event(&key, reason);
            }
        }
        for e in events {
            let at = (e.object.clone(), e.reason.clone());
            match self.event_at.get(&at) {
                Some(&i) => {
                    self.events[i] = Some(e);
                    replaced += 1;
                }
                None => {
                    self.event_at.insert(at, self.events.len());
                    self.events.push(Some(e));
                }
            }
        }
        replaced
    }

    fn drop_event(&mut self, object: &ObjectKey, reason: String) -> u64 {
        match self.event_at.remove(&(object.clone(), reason)) {
            Some(i) => u64::from(self.events[i].take().is_some()),
            None => 0,
        }
    }

    /// Everything queued, for one write; the backlog starts over.
    fn take(&mut self) -> Taken {
        let taken = std::mem::take(self);
        (
            taken
                .statuses
                .into_iter()
                .map(|q| (q.key, q.status))
                .collect(),
            taken.events.into_iter().flatten().collect(),
            taken.flushes,
        )
    }

    /// What may be written at `now`: everything when a flush waits, else all but the
    /// statuses not due yet and their PodGroups' Events, which stay queued. Also returns
    /// when the first of those held is due.
    fn take_due(&mut self, now: Instant) -> (Taken, Option<Instant>) {
        if !self.flushes.is_empty() {
            return (self.take(), None);
        }
        let Self {
            statuses, events, ..
        } = std::mem::take(self);
        let mut due = Vec::with_capacity(statuses.len());
        let mut next: Option<Instant> = None;
        for q in statuses {
            match q.due.filter(|&at| at > now) {
                Some(at) => {
                    next = Some(next.map_or(at, |n| n.min(at)));
                    self.status_at.insert(q.key.clone(), self.statuses.len());
                    self.statuses.push(q);
                }
                None => due.push((q.key, q.status)),
            }
        }
        let mut events_due = Vec::with_capacity(events.len());
        for e in events.into_iter().flatten() {
            if self.status_at.contains_key(&e.object) {
                let at = (e.object.clone(), e.reason.clone());
                self.event_at.insert(at, self.events.len());
                self.events.push(Some(e));
            } else {
                events_due.push(e);
            }
        }
        ((due, events_due, Vec::new()), next)
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
        let ((statuses, events, flushes), next) = backlog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take_due(Instant::now());
        held_until = next;
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
            let statuses = self.queue_statuses(statuses);
            let replaced = self
                .reporting
                .backlog()
                .add(statuses, events, Instant::now());
            counter!(metric::EVENTS_REPLACED).increment(replaced);
            self.reporting.wake();
        }
        self.reporting.take_failures()
    }

    /// Shows each status as queued (see [`Overlay::queued`]) and judges how soon it is
    /// written, against the status last handed to the writer for its PodGroup, else the
    /// PodGroup as last read (the cache's version, or a status written here that the cache
    /// does not show yet).
    fn queue_statuses(
        &self,
        statuses: Vec<(ObjectKey, PodGroupStatus)>,
    ) -> Vec<(ObjectKey, PodGroupStatus, Urgency)> {
        let (converted, mut overlay) = self.converted_and_overlay();
        statuses
            .into_iter()
            .map(|(key, status)| {
                let read = converted.pod_groups.get(&key);
                let before = read.map(|(_, g)| {
                    let queued = overlay.queued.get(&key);
                    (queued.unwrap_or(&g.status), g.min_member)
                });
                let urgency = Urgency::of(&status, before);
                overlay.queued.insert(key.clone(), status.clone());
                (key, status, urgency)
            })
            .collect()
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
    use crate::model::PodGroupCondition;
    use crate::model::PodGroupPhase::{Completed, Inqueue, Running};

    fn status(running: u32) -> PodGroupStatus {
        PodGroupStatus {
            running,
            ..PodGroupStatus::default()
        }
    }

    fn phase(phase: crate::model::PodGroupPhase, running: u32) -> PodGroupStatus {
        PodGroupStatus {
            phase,
            running,
            ..PodGroupStatus::default()
        }
    }

    fn unschedulable(reason: &str) -> PodGroupStatus {
        let mut s = phase(Inqueue, 0);
        s.conditions.push(PodGroupCondition {
            kind: CONDITION_UNSCHEDULABLE.into(),
            status: true,
            reason: reason.into(),
            message: "3/10 tasks in gang unschedulable".into(),
            transition_time_ms: 1,
        });
        s
    }

    fn event(object: &ObjectKey, reason: &str, message: &str) -> Event {
        Event {
            object: object.clone(),
            kind: "Warning",
            reason: reason.into(),
            message: message.into(),
        }
    }

    fn now(
        statuses: Vec<(ObjectKey, PodGroupStatus)>,
    ) -> Vec<(ObjectKey, PodGroupStatus, Urgency)> {
        statuses
            .into_iter()
            .map(|(k, s)| (k, s, Urgency::Now))
            .collect()
    }

    #[test]
    fn a_backlog_writes_each_pod_groups_last_status_where_its_first_stood() {
        let (a, b) = (ObjectKey::new("ns", "a"), ObjectKey::new("ns", "b"));
        let t0 = Instant::now();
        let mut backlog = Backlog::default();
        backlog.add(
            now(vec![(a.clone(), status(1)), (b.clone(), status(1))]),
            vec![],
            t0,
        );
        backlog.add(now(vec![(a.clone(), status(2))]), vec![], t0);
        let (statuses, events, _) = backlog.take();
        assert_eq!(statuses, vec![(a, status(2)), (b, status(1))]);
        assert!(events.is_empty());
        let (statuses, events, flushes) = backlog.take();
        assert!(
            statuses.is_empty() && events.is_empty() && flushes.is_empty(),
            "taken whole"
        );
    }

    #[test]
    fn a_new_phase_is_written_at_once_and_what_keeps_the_phase_waits_for_the_pod_group_to_settle() {
        let before = phase(Running, 0);
        let of = |s: &PodGroupStatus| Urgency::of(s, Some((&before, 10)));
        assert_eq!(of(&phase(Completed, 0)), Urgency::Now);
        assert_eq!(
            Urgency::of(&phase(Running, 0), None),
            Urgency::Now,
            "not read yet"
        );
        assert_eq!(
            of(&phase(Running, 4)),
            Urgency::Starting,
            "4 of minMember 10"
        );
        assert_eq!(
            of(&phase(Running, 10)),
            Urgency::Settle,
            "the gang has started"
        );
        let mut condition = unschedulable("NotEnoughResources");
        condition.phase = Running;
        assert_eq!(of(&condition), Urgency::Settle);
        condition.running = 4;
        assert_eq!(of(&condition), Urgency::Settle, "counts and a condition");
    }

    #[test]
    fn a_status_that_keeps_its_phase_is_written_a_second_after_it_was_first_queued_with_its_last_counts()
     {
        let (a, b) = (ObjectKey::new("ns", "a"), ObjectKey::new("ns", "b"));
        let t0 = Instant::now();
        let mut backlog = Backlog::default();
        backlog.add(
            vec![
                (a.clone(), phase(Running, 4), Urgency::Starting),
                (b.clone(), phase(Running, 10), Urgency::Settle),
            ],
            vec![event(&b, "Scheduled", "12 of minMember 10 pods placed")],
            t0,
        );
        let ((statuses, events, _), next) = backlog.take_due(t0);
        assert!(
            statuses.is_empty() && events.is_empty(),
            "b's Event waits with b"
        );
        assert_eq!(next, Some(t0 + STATUS_SETTLE));
        // Later statuses replace the queued ones and keep their time in the queue: a's
        // last count completes its gang, so it waits a second from its first, not five.
        let later = t0 + STATUS_SETTLE / 2;
        backlog.add(
            vec![(a.clone(), phase(Running, 10), Urgency::Settle)],
            vec![],
            later,
        );
        let ((statuses, events, _), next) = backlog.take_due(t0 + STATUS_SETTLE);
        assert_eq!(
            statuses,
            vec![(a.clone(), phase(Running, 10)), (b, phase(Running, 10))]
        );
        assert_eq!((events.len(), next), (1, None));
        // A gang still starting waits up to STARTING_SETTLE for its last count; a new phase
        // ends the wait.
        backlog.add(
            vec![(a.clone(), phase(Running, 3), Urgency::Starting)],
            vec![],
            later,
        );
        let ((statuses, _, _), next) = backlog.take_due(later + STATUS_SETTLE);
        assert!(statuses.is_empty() && next == Some(later + STARTING_SETTLE));
        let ((statuses, _, _), _) = backlog.take_due(later + STARTING_SETTLE);
        assert_eq!(statuses, vec![(a.clone(), phase(Running, 3))]);
        backlog.add(
            vec![(a.clone(), phase(Running, 5), Urgency::Starting)],
            vec![],
            later,
        );
        backlog.add(
            vec![(a.clone(), phase(Completed, 0), Urgency::Now)],
            vec![],
            later,
        );
        let ((statuses, _, _), next) = backlog.take_due(later);
        assert_eq!((statuses, next), (vec![(a, phase(Completed, 0))], None));
    }

    /// Named for what it saved: a gang seen while its last pods were being created got
    /// `Unschedulable`/`NotEnoughPods` and a Warning one 200 ms cycle before it was placed
    /// (127 of 500 gangs in the 5,000-pod bench).
    #[test]
    fn an_unschedulable_condition_replaced_before_it_was_written_takes_its_warning_with_it() {
        let (a, b) = (ObjectKey::new("ns", "a"), ObjectKey::new("ns", "b"));
        let t0 = Instant::now();
        let mut backlog = Backlog::default();
        let warning = |o: &ObjectKey| event(o, "NotEnoughPods", "3/10 tasks in gang unschedulable");
        backlog.add(
            vec![
                (a.clone(), unschedulable("NotEnoughPods"), Urgency::Settle),
                (b.clone(), unschedulable("NotEnoughPods"), Urgency::Settle),
            ],
            vec![warning(&a), warning(&b)],
            t0,
        );
        // a is placed in the next cycle; b still misses its pods a second later.
        let placed = event(
            &a,
            "Scheduled",
            "10 of minMember 10 pods placed; PodGroup is Running",
        );
        let dropped = backlog.add(
            vec![(a.clone(), phase(Running, 0), Urgency::Now)],
            vec![placed.clone()],
            t0 + STATUS_SETTLE / 5,
        );
        assert_eq!(dropped, 1);
        let ((statuses, events, _), _) = backlog.take_due(t0 + STATUS_SETTLE / 5);
        assert_eq!(statuses, vec![(a.clone(), phase(Running, 0))]);
        assert_eq!(events, vec![placed]);
        let ((statuses, events, _), next) = backlog.take_due(t0 + STATUS_SETTLE);
        assert_eq!(statuses, vec![(b.clone(), unschedulable("NotEnoughPods"))]);
        assert_eq!((events, next), (vec![warning(&b)], None));
        // A condition whose message changes keeps its Event, with the last message.
        backlog.add(
            vec![(a.clone(), unschedulable("NotEnoughPods"), Urgency::Settle)],
            vec![warning(&a)],
            t0,
        );
        let mut newer = unschedulable("NotEnoughPods");
        newer.conditions[0].message = "5/10 tasks in gang unschedulable".into();
        let replaced = backlog.add(
            vec![(a.clone(), newer.clone(), Urgency::Settle)],
            vec![event(
                &a,
                "NotEnoughPods",
                "5/10 tasks in gang unschedulable",
            )],
            t0,
        );
        assert_eq!(replaced, 1);
        let ((statuses, events, _), _) = backlog.take_due(t0 + STATUS_SETTLE);
        assert_eq!(statuses, vec![(a.clone(), newer)]);
        assert_eq!(
            events,
            vec![event(
                &a,
                "NotEnoughPods",
                "5/10 tasks in gang unschedulable"
            )]
        );
    }

    #[test]
    fn a_flush_takes_the_statuses_and_events_that_wait_to_settle() {
        let a = ObjectKey::new("ns", "a");
        let t0 = Instant::now();
        let mut backlog = Backlog::default();
        backlog.add(
            vec![(a.clone(), phase(Running, 5), Urgency::Starting)],
            vec![event(&a, "Scheduled", "12 of minMember 10 pods placed")],
            t0,
        );
        let (done, _answer) = oneshot::channel();
        backlog.flushes.push(done);
        let ((statuses, events, flushes), next) = backlog.take_due(t0);
        assert_eq!(
            (statuses.len(), events.len(), flushes.len(), next),
            (1, 1, 1, None)
        );
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
            replaced += backlog.add(now(statuses), events, Instant::now());
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
