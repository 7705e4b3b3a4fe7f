//! The embedded simulated cluster: an in-memory API server plus a kubelet model.
//!
//! - Binding sets `nodeName` and the pod starts Running at once (as kwok does). Like the API
//!   server, binding does not check the node's free resources: the scheduler must (I1), and
//!   the invariant checkers catch it if it does not.
//! - Run times: a pod annotated `phalanx.dev/sim-duration: 90s` succeeds 90 s after its work
//!   starts. A pod of a gang starts work only once its whole gang (`minMember`) is running —
//!   a training job with 10 of 11 workers makes no progress — so partial gangs hold their
//!   GPUs without ever finishing, exactly the waste gang scheduling prevents. A pod without a
//!   PodGroup starts when it is bound.
//! - Time is simulated: it moves only when the driver calls [`SimCluster::advance_to`].

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use crate::FastMap;
use crate::cluster::{Cluster, ClusterError, ClusterSnapshot};
use crate::framework::Event;
use crate::model::{
    Node, ObjectKey, Pod, PodGroup, PodGroupStatus, PodPhase, PriorityClass, Queue, TimeMs,
};

/// The Events of one object: how many were recorded, and the last
/// [`ObjectEvents::KEPT`] of them, oldest first.
#[derive(Debug, Default)]
pub struct ObjectEvents {
    pub recorded: usize,
    pub last: VecDeque<(TimeMs, Event)>,
}

impl ObjectEvents {
    pub const KEPT: usize = crate::framework::explain::EVENTS_SHOWN;

    fn record(&mut self, at: TimeMs, event: Event) {
        self.recorded += 1;
        if self.last.len() == Self::KEPT {
            self.last.pop_front();
        }
        self.last.push_back((at, event));
    }
}

#[derive(Debug, Default)]
pub struct SimCluster {
    now_ms: TimeMs,
    nodes: Vec<Arc<Node>>,
    /// The nodes' names: a bind checks its node without a scan of every node.
    node_names: HashSet<String>,
    pods: BTreeMap<ObjectKey, Arc<Pod>>,
    pod_groups: BTreeMap<ObjectKey, Arc<PodGroup>>,
    queues: Vec<Queue>,
    priority_classes: Vec<PriorityClass>,
    /// The work clocks of running pods whose gang became complete.
    work: WorkClocks,
    /// Pods that may be running without a work clock yet (bound or added running since
    /// the last settle, or waiting for their gang to complete): what
    /// [`Self::start_complete_gangs`] looks at instead of every pod.
    maybe_waiting: BTreeSet<ObjectKey>,
    /// Per PodGroup, the names of the pods (in its namespace) that named it when they were
    /// added, checked again when read: a pod may have been deleted or replaced since.
    members: HashMap<ObjectKey, BTreeSet<String>>,
    /// Pods bound during this run (not those that were already running at the start).
    bound_here: BTreeSet<ObjectKey>,
    evicted: BTreeSet<ObjectKey>,
    /// Evicted pods with a termination grace period, and when they will be gone.
    terminating_until: BTreeMap<ObjectKey, TimeMs>,
    /// Evicted pods gone since the last [`SimCluster::take_gone`].
    gone: Vec<ObjectKey>,
    /// Each object's Events: how many, and the last few (what `--explain` shows). Every
    /// Event of a run was kept before: a pending gang's Unschedulable message changes as
    /// the cluster does, so that grew with pending gangs × rounds (9.3 GiB at 1,000 nodes
    /// × 100,000 pods, docs/benchmarks.md).
    events: HashMap<ObjectKey, ObjectEvents>,
    bind_calls: u64,
    /// GPU-milliseconds held by pods, and the part held by pods whose work had started.
    gpu_ms_held: u128,
    gpu_ms_working: u128,
}

impl SimCluster {
    pub fn new(
        nodes: Vec<Node>,
        pods: Vec<Pod>,
        pod_groups: Vec<PodGroup>,
        queues: Vec<Queue>,
        priority_classes: Vec<PriorityClass>,
    ) -> Self {
        let mut sim = SimCluster {
            node_names: nodes.iter().map(|n| n.name.clone()).collect(),
            nodes: nodes.into_iter().map(Arc::new).collect(),
            pods: pods
                .into_iter()
                .map(|p| (p.key.clone(), Arc::new(p)))
                .collect(),
            pod_groups: pod_groups
                .into_iter()
                .map(|g| (g.key.clone(), Arc::new(g)))
                .collect(),
            queues,
            priority_classes,
            ..Default::default()
        };
        let keys: Vec<ObjectKey> = sim.pods.keys().cloned().collect();
        for key in keys {
            sim.note_added(&key);
        }
        sim.start_complete_gangs();
        sim
    }

    /// Indexes a pod just added: its gang's members, and whether it may wait for a clock.
    fn note_added(&mut self, key: &ObjectKey) {
        let Some(pod) = self.pods.get(key) else {
            return;
        };
        if let Some(group) = &pod.group {
            self.members
                .entry(ObjectKey::new(&key.namespace, group))
                .or_default()
                .insert(key.name.clone());
        }
        if pod.phase == PodPhase::Running {
            self.maybe_waiting.insert(key.clone());
        }
    }

    /// A cluster holding a loaded workload's objects.
    pub fn from_workload(w: crate::manifest::Workload) -> Self {
        Self::new(w.nodes, w.pods, w.pod_groups, w.queues, w.priority_classes)
    }

    pub fn now_ms(&self) -> TimeMs {
        self.now_ms
    }

    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter().map(|n| n.as_ref())
    }

    pub fn pods(&self) -> impl Iterator<Item = &Pod> {
        self.pods.values().map(|p| p.as_ref())
    }

    pub fn pod(&self, key: &ObjectKey) -> Option<&Pod> {
        self.pods.get(key).map(|p| p.as_ref())
    }

    pub fn pod_groups(&self) -> impl Iterator<Item = &PodGroup> {
        self.pod_groups.values().map(|g| g.as_ref())
    }

    pub fn pod_group(&self, key: &ObjectKey) -> Option<&PodGroup> {
        self.pod_groups.get(key).map(|g| g.as_ref())
    }

    pub fn queues(&self) -> &[Queue] {
        &self.queues
    }

    pub fn was_bound_here(&self, pod: &ObjectKey) -> bool {
        self.bound_here.contains(pod)
    }

    pub fn is_evicted(&self, pod: &ObjectKey) -> bool {
        self.evicted.contains(pod)
    }

    /// The Events recorded about `object`, if any.
    pub fn events_of(&self, object: &ObjectKey) -> Option<&ObjectEvents> {
        self.events.get(object)
    }

    pub fn bind_calls(&self) -> u64 {
        self.bind_calls
    }

    /// GPU-hours held by pods so far, and the part held by pods that were doing work (their
    /// gang complete). The difference is GPU time wasted on partial gangs.
    pub fn gpu_hours(&self) -> (f64, f64) {
        const MS_PER_HOUR: f64 = 3_600_000.0;
        (
            self.gpu_ms_held as f64 / MS_PER_HOUR,
            self.gpu_ms_working as f64 / MS_PER_HOUR,
        )
    }

    /// True when the pod holds a node and its work has started (its gang is complete).
    pub fn is_working(&self, pod: &ObjectKey) -> bool {
        self.work.is_started(pod)
            && self
                .pods
                .get(pod)
                .is_some_and(|p| p.phase == PodPhase::Running)
    }

    /// Adds objects to the running cluster (a workload that arrives later).
    pub fn add(&mut self, pods: Vec<Pod>, pod_groups: Vec<PodGroup>) {
        for g in pod_groups {
            self.pod_groups.insert(g.key.clone(), Arc::new(g));
        }
        for p in pods {
            let key = p.key.clone();
            if let Some(old) = self.pods.insert(key.clone(), Arc::new(p)) {
                // A new object under an old name starts no clock of the old one's.
                self.work.stop(&key, old.sim_duration_ms);
            }
            self.note_added(&key);
        }
    }

    /// Per gang, by (namespace, PodGroup name) borrowed from the pods: how many of its pods
    /// `counts`. Gangs with none are absent.
    pub fn pods_per_group(&self, counts: impl Fn(&Pod) -> bool) -> FastMap<(&str, &str), u32> {
        // Sized for every group at once: growing it was most of the cost (100,000 pods).
        let mut out: FastMap<(&str, &str), u32> =
            FastMap::with_capacity_and_hasher(self.pod_groups.len(), Default::default());
        for pod in self.pods.values() {
            if let Some(group) = &pod.group
                && counts(pod)
            {
                *out.entry((&pod.key.namespace, group)).or_insert(0) += 1;
            }
        }
        out
    }

    /// How many pods were evicted so far.
    pub fn evicted_count(&self) -> usize {
        self.evicted.len()
    }

    /// Evicted pods that are gone since the last call (their placements can be released).
    pub fn take_gone(&mut self) -> Vec<ObjectKey> {
        std::mem::take(&mut self.gone)
    }

    /// The pods evicted so far, by key.
    pub fn evicted(&self) -> impl Iterator<Item = &ObjectKey> {
        self.evicted.iter()
    }

    /// The next moment a running pod finishes or a terminating pod is gone, if any.
    pub fn next_event_ms(&self) -> Option<TimeMs> {
        let gone = self.terminating_until.values().min().copied();
        let finished = self.work.next_finish_ms();
        match (gone, finished) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Moves time forward to `t`, finishing every pod whose run time is over. Returns the
    /// pods that finished.
    pub fn advance_to(&mut self, t: TimeMs) -> Vec<ObjectKey> {
        let elapsed = u128::from(t.saturating_sub(self.now_ms));
        if elapsed > 0 {
            for pod in self.pods.values().filter(|p| p.occupies_node()) {
                let gpu_ms = u128::try_from(pod.requests.gpus()).unwrap_or(0) * elapsed;
                self.gpu_ms_held += gpu_ms;
                if self.work.is_started(&pod.key) {
                    self.gpu_ms_working += gpu_ms;
                }
            }
        }
        self.now_ms = self.now_ms.max(t);
        let now = self.now_ms;
        let gone: Vec<ObjectKey> = self
            .terminating_until
            .iter()
            .filter(|&(_, &until)| until <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in gone {
            self.terminating_until.remove(&key);
            self.pods.remove(&key);
            self.gone.push(key);
        }
        let mut finished = Vec::new();
        while let Some(key) = self.work.pop_due(now) {
            // Only running pods have a clock (eviction stops it).
            if let Some(pod) = self.pods.get_mut(&key)
                && pod.phase == PodPhase::Running
            {
                edit(pod).phase = PodPhase::Succeeded;
                finished.push(key);
            }
        }
        self.start_complete_gangs();
        finished.sort();
        finished
    }

    /// Starts the work clock of running pods whose gang is complete.
    fn start_complete_gangs(&mut self) {
        // Running pods whose work has not started: the pods bound since the last call, and
        // those of gangs still incomplete. Only they are looked at (`maybe_waiting`), and
        // only their gangs' pods counted: a scan of every pod each round was 4 % of a
        // sustained run (`phalanx-bench shards`, 100,000 pods).
        let candidates = std::mem::take(&mut self.maybe_waiting);
        let waiting: Vec<&Arc<Pod>> = candidates
            .iter()
            .filter_map(|key| self.pods.get(key))
            .filter(|p| {
                p.phase == PodPhase::Running && !p.terminating && !self.work.is_started(&p.key)
            })
            .collect();
        let mut running_in: HashMap<ObjectKey, u32> = HashMap::new();
        let mut starting: Vec<(ObjectKey, Option<TimeMs>)> = Vec::new();
        let mut still_waiting: BTreeSet<ObjectKey> = BTreeSet::new();
        for pod in waiting {
            let complete = match &pod.group {
                None => true,
                Some(group) => {
                    let key = ObjectKey::new(&pod.key.namespace, group);
                    let min = self.pod_groups.get(&key).map_or(1, |g| g.min_member);
                    let running = *running_in
                        .entry(key)
                        .or_insert_with_key(|key| self.running_members(key));
                    running >= min
                }
            };
            if complete {
                starting.push((pod.key.clone(), pod.sim_duration_ms));
            } else {
                still_waiting.insert(pod.key.clone());
            }
        }
        self.maybe_waiting = still_waiting;
        for (key, duration) in starting {
            self.work.start(key, self.now_ms, duration);
        }
    }

    /// Pods of the gang that run or have succeeded.
    fn running_members(&self, group: &ObjectKey) -> u32 {
        let Some(members) = self.members.get(group) else {
            return 0;
        };
        members
            .iter()
            .filter_map(|name| self.pods.get(&ObjectKey::new(&group.namespace, name)))
            .filter(|p| {
                p.group.as_deref() == Some(group.name.as_str())
                    && matches!(p.phase, PodPhase::Running | PodPhase::Succeeded)
            })
            .count() as u32
    }
}

/// When each working pod's work started, and the pods that have a run time by when they
/// finish, so that the next finish and the pods due are found without a scan of every pod
/// that ever ran. A pod's clock is dropped when it finishes or is evicted.
#[derive(Debug, Default)]
struct WorkClocks {
    started_ms: HashMap<ObjectKey, TimeMs>,
    finishing: BTreeSet<(TimeMs, ObjectKey)>,
}

impl WorkClocks {
    fn is_started(&self, pod: &ObjectKey) -> bool {
        self.started_ms.contains_key(pod)
    }

    fn start(&mut self, pod: ObjectKey, now_ms: TimeMs, duration: Option<TimeMs>) {
        if let Some(d) = duration {
            self.finishing
                .insert((now_ms.saturating_add(d), pod.clone()));
        }
        self.started_ms.insert(pod, now_ms);
    }

    /// Drops the pod's clock; `duration` is the run time it was started with.
    fn stop(&mut self, pod: &ObjectKey, duration: Option<TimeMs>) {
        if let Some(start) = self.started_ms.remove(pod)
            && let Some(d) = duration
        {
            self.finishing
                .remove(&(start.saturating_add(d), pod.clone()));
        }
    }

    fn next_finish_ms(&self) -> Option<TimeMs> {
        self.finishing.first().map(|&(end, _)| end)
    }

    /// The next pod whose run time is over at `now_ms`, its clock dropped.
    fn pop_due(&mut self, now_ms: TimeMs) -> Option<ObjectKey> {
        if self.next_finish_ms()? > now_ms {
            return None;
        }
        let (_, pod) = self.finishing.pop_first()?;
        self.started_ms.remove(&pod);
        Some(pod)
    }
}

/// `Arc::make_mut` for what the simulated cluster changes in a pod: its node, phase and
/// termination, which its spec's facts ([`crate::model::pod::SpecMemo`]) do not read. The
/// copy made while a snapshot still holds the pod keeps them, so the next round does not
/// work them out again for every pod bound or finished.
fn edit(pod: &mut Arc<Pod>) -> &mut Pod {
    let facts = pod.spec_memo.get();
    let edited = Arc::make_mut(pod);
    if let Some(facts) = facts {
        edited.spec_memo.keep(facts);
    }
    edited
}

impl SimCluster {
    /// What a participant picks nodes in: a [`Cluster::snapshot`] of the pods named in
    /// `also` (those of open transactions) and of the PodGroups they name, and apart, in
    /// key order, every other pod that holds a node. The pending pods outside `also`, and
    /// the PodGroups of every other gang, would only cost time there (a pick reads the
    /// nodes and the picked pods), and a sustained run has tens of thousands of both.
    pub fn snapshot_for_picking(
        &self,
        also: &BTreeSet<&ObjectKey>,
    ) -> (ClusterSnapshot, Vec<Arc<Pod>>) {
        let picked: Vec<Arc<Pod>> = (also.iter())
            .filter_map(|k| self.pods.get(*k).cloned())
            .collect();
        // Both in key order: walked side by side rather than looked up per pod.
        let mut asked = also.iter().peekable();
        let occupying = (self.pods.iter())
            .filter(|(k, p)| {
                while asked.next_if(|a| **a < *k).is_some() {}
                p.occupies_node() && asked.peek().is_none_or(|a| **a != *k)
            })
            .map(|(_, p)| Arc::clone(p))
            .collect();
        let named: crate::FastSet<(&str, &str)> = picked
            .iter()
            .filter_map(|p| Some((p.key.namespace.as_str(), p.group.as_deref()?)))
            .collect();
        let pod_groups = (self.pod_groups.iter())
            .filter(|(k, _)| named.contains(&(k.namespace.as_str(), k.name.as_str())))
            .map(|(_, g)| Arc::clone(g))
            .collect();
        let snapshot = ClusterSnapshot {
            pods: picked,
            pod_groups,
            ..self.snapshot_without_workload()
        };
        (snapshot, occupying)
    }

    /// The nodes, queues and PriorityClasses, without pods or PodGroups.
    fn snapshot_without_workload(&self) -> ClusterSnapshot {
        ClusterSnapshot {
            now_ms: self.now_ms,
            nodes: self.nodes.clone(),
            pods: Vec::new(),
            pod_groups: Vec::new(),
            queues: self.queues.clone(),
            priority_classes: self.priority_classes.clone(),
        }
    }
}

impl Cluster for SimCluster {
    fn snapshot(&self) -> ClusterSnapshot {
        ClusterSnapshot {
            pods: self.pods.values().cloned().collect(),
            pod_groups: self.pod_groups.values().cloned().collect(),
            ..self.snapshot_without_workload()
        }
    }

    fn bind(&mut self, pod: &ObjectKey, node: &str) -> Result<(), ClusterError> {
        self.bind_calls += 1;
        if !self.node_names.contains(node) {
            return Err(ClusterError::NotFound {
                kind: "node",
                key: node.to_string(),
            });
        }
        let Some(p) = self.pods.get_mut(pod).map(edit) else {
            return Err(ClusterError::NotFound {
                kind: "pod",
                key: pod.to_string(),
            });
        };
        match &p.node_name {
            Some(bound) if bound == node => return Ok(()),
            Some(bound) => {
                return Err(ClusterError::AlreadyBound {
                    pod: pod.to_string(),
                    bound_to: bound.clone(),
                    requested: node.to_string(),
                });
            }
            None => {}
        }
        p.node_name = Some(node.to_string());
        p.phase = PodPhase::Running;
        self.bound_here.insert(pod.clone());
        self.maybe_waiting.insert(pod.clone());
        Ok(())
    }

    fn update_pod_group_status(
        &mut self,
        key: &ObjectKey,
        status: &PodGroupStatus,
    ) -> Result<(), ClusterError> {
        let group = self
            .pod_groups
            .get_mut(key)
            .ok_or_else(|| ClusterError::NotFound {
                kind: "podgroup",
                key: key.to_string(),
            })?;
        match Arc::get_mut(group) {
            Some(group) => group.status = status.clone(),
            // A snapshot still holds the old version: copy all but the old status.
            None => *group = Arc::new(group.with_status(status.clone())),
        }
        Ok(())
    }

    fn record_event(&mut self, event: &Event) -> Result<(), ClusterError> {
        let kept = match self.events.get_mut(&event.object) {
            Some(kept) => kept,
            None => self.events.entry(event.object.clone()).or_default(),
        };
        kept.record(self.now_ms, event.clone());
        Ok(())
    }

    /// Deletes the pod, keeping a record that it was evicted. A pod with
    /// `terminationGracePeriodSeconds` stays that long, terminating (it holds its node but
    /// does no work); one without goes at once. Evicting a terminating pod again is a no-op.
    fn evict(&mut self, pod: &ObjectKey, _reason: &str) -> Result<(), ClusterError> {
        let Some(p) = self.pods.get_mut(pod) else {
            return Err(ClusterError::NotFound {
                kind: "pod",
                key: pod.to_string(),
            });
        };
        self.work.stop(pod, p.sim_duration_ms);
        self.evicted.insert(pod.clone());
        match p.termination_grace_ms.filter(|&g| g > 0) {
            _ if p.terminating => {}
            Some(grace) if p.node_name.is_some() => {
                edit(p).terminating = true;
                self.terminating_until
                    .insert(pod.clone(), self.now_ms.saturating_add(grace));
            }
            _ => {
                self.pods.remove(pod);
                self.gone.push(pod.clone());
            }
        }
        Ok(())
    }
}

impl SimCluster {
    /// Call after a bind round: pods of gangs that just became complete start working.
    pub fn settle(&mut self) {
        self.start_complete_gangs();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Resources;

    /// A pending gang's message changes as the cluster does, so a long run records an
    /// Event about it nearly every round: the simulator keeps the count and the last few
    /// per object, so its memory follows the objects, not the rounds.
    #[test]
    fn an_objects_events_are_counted_and_only_the_last_few_kept() {
        let mut sim = SimCluster::default();
        let gang = ObjectKey::new("ns", "g");
        for i in 0..100u64 {
            sim.now_ms = i;
            let event = Event {
                object: gang.clone(),
                kind: "Warning",
                reason: "NotEnoughResources".into(),
                message: format!("round {i}"),
            };
            sim.record_event(&event).expect("recorded");
        }
        let kept = sim.events_of(&gang).expect("events");
        assert_eq!(kept.recorded, 100);
        assert_eq!(kept.last.len(), ObjectEvents::KEPT);
        let (first_at, first) = kept.last.front().expect("kept");
        let last_kept = 100 - ObjectEvents::KEPT as u64;
        assert_eq!(
            (*first_at, first.message.clone()),
            (last_kept, format!("round {last_kept}"))
        );
        assert_eq!(kept.last.back().map(|(at, _)| *at), Some(99));
        assert!(sim.events_of(&ObjectKey::new("ns", "other")).is_none());
    }

    fn pod(name: &str, group: Option<&str>, run_ms: TimeMs) -> Pod {
        let mut p = Pod::new(ObjectKey::new("ns", name), Resources::new());
        p.group = group.map(str::to_string);
        p.sim_duration_ms = Some(run_ms);
        p
    }

    fn cluster(pods: Vec<Pod>, groups: Vec<PodGroup>) -> SimCluster {
        let node = Node::new("node-0", Resources::new());
        SimCluster::new(vec![node], pods, groups, Vec::new(), Vec::new())
    }

    /// A gang's pods start their clocks together, once the whole gang runs, and finish
    /// once, at the time their run time says.
    #[test]
    fn a_gang_starts_work_when_complete_and_each_pod_finishes_once_on_time() {
        let gang = PodGroup::new(ObjectKey::new("ns", "g"), 2);
        let pods = vec![pod("g-0", Some("g"), 5_000), pod("g-1", Some("g"), 7_000)];
        let mut sim = cluster(pods, vec![gang]);
        let (g0, g1) = (ObjectKey::new("ns", "g-0"), ObjectKey::new("ns", "g-1"));
        sim.bind(&g0, "node-0").unwrap();
        sim.settle();
        assert!(!sim.is_working(&g0) && sim.next_event_ms().is_none());
        sim.advance_to(1_000);
        sim.bind(&g1, "node-0").unwrap();
        sim.settle();
        assert!(sim.is_working(&g0) && sim.is_working(&g1));
        assert_eq!(sim.next_event_ms(), Some(6_000));
        assert!(sim.advance_to(5_999).is_empty());
        assert_eq!(sim.advance_to(6_000), std::slice::from_ref(&g0));
        assert_eq!(sim.next_event_ms(), Some(8_000));
        assert_eq!(sim.advance_to(9_000), [g1]);
        assert!(sim.next_event_ms().is_none() && sim.advance_to(20_000).is_empty());
        assert_eq!(sim.pod(&g0).map(|p| p.phase), Some(PodPhase::Succeeded));
    }

    /// An evicted pod's finish is no longer an event: the driver would otherwise wake at a
    /// time when nothing happens, and a run's cycles would shift.
    #[test]
    fn an_evicted_pods_finish_is_no_longer_the_next_event() {
        let mut sim = cluster(vec![pod("a", None, 5_000), pod("b", None, 8_000)], vec![]);
        let (a, b) = (ObjectKey::new("ns", "a"), ObjectKey::new("ns", "b"));
        sim.bind(&a, "node-0").unwrap();
        sim.bind(&b, "node-0").unwrap();
        sim.settle();
        assert_eq!(sim.next_event_ms(), Some(5_000));
        sim.evict(&a, "test").unwrap();
        assert_eq!(sim.next_event_ms(), Some(8_000));
        assert_eq!(sim.advance_to(8_000), [b]);
        assert_eq!(sim.take_gone(), [a]);
    }

    /// A pod object replaced under the same name (a workload that arrives later) does not
    /// inherit the old one's clock: it finishes its own run time after its own start.
    #[test]
    fn a_replaced_pod_does_not_inherit_the_old_ones_clock() {
        let mut sim = cluster(vec![pod("a", None, 5_000)], vec![]);
        let a = ObjectKey::new("ns", "a");
        sim.bind(&a, "node-0").unwrap();
        sim.settle();
        sim.advance_to(4_000);
        sim.add(vec![pod("a", None, 3_000)], vec![]);
        assert!(sim.next_event_ms().is_none() && sim.advance_to(5_000).is_empty());
        sim.bind(&a, "node-0").unwrap();
        sim.settle();
        assert_eq!(sim.next_event_ms(), Some(8_000));
    }

    /// Pods already running in the loaded workload start their clocks with the cluster; a
    /// running pod of an incomplete gang waits without one.
    #[test]
    fn pods_running_when_the_cluster_is_made_start_their_clocks_if_their_gang_is_whole() {
        let running = |name: &str, group: Option<&str>| {
            let mut p = pod(name, group, 5_000);
            p.node_name = Some("node-0".into());
            p.phase = PodPhase::Running;
            p
        };
        let gang = PodGroup::new(ObjectKey::new("ns", "g"), 2);
        let pods = vec![
            running("solo", None),
            running("g-0", Some("g")),
            pod("g-1", Some("g"), 5_000),
        ];
        let mut sim = cluster(pods, vec![gang]);
        let (solo, g0) = (ObjectKey::new("ns", "solo"), ObjectKey::new("ns", "g-0"));
        assert!(sim.is_working(&solo) && !sim.is_working(&g0));
        assert_eq!(sim.next_event_ms(), Some(5_000));
        sim.advance_to(2_000);
        sim.bind(&ObjectKey::new("ns", "g-1"), "node-0").unwrap();
        sim.settle();
        assert!(sim.is_working(&g0));
        assert_eq!(sim.advance_to(7_000).len(), 3);
    }

    /// A participant's pick view: the pods asked for and the PodGroups they name, and apart
    /// the other pods holding a node, each in key order.
    #[test]
    fn the_picking_snapshot_holds_the_picked_pods_and_their_groups_and_the_rest_apart() {
        let groups = ["held", "pending", "picked", "picked-bound"]
            .map(|g| PodGroup::new(ObjectKey::new("ns", g), 1))
            .to_vec();
        let pods = vec![
            pod("held-0", Some("held"), 5_000),
            pod("pending-0", Some("pending"), 5_000),
            pod("picked-0", Some("picked"), 5_000),
            pod("picked-bound-0", Some("picked-bound"), 5_000),
            pod("solo", None, 5_000),
        ];
        let mut sim = cluster(pods, groups);
        for p in ["held-0", "picked-bound-0", "solo"] {
            sim.bind(&ObjectKey::new("ns", p), "node-0").unwrap();
        }
        let (picked, bound) = (
            ObjectKey::new("ns", "picked-0"),
            ObjectKey::new("ns", "picked-bound-0"),
        );
        let (snapshot, occupying) = sim.snapshot_for_picking(&BTreeSet::from([&picked, &bound]));
        let names = |keys: Vec<&ObjectKey>| keys.iter().map(|k| k.name.clone()).collect::<Vec<_>>();
        assert_eq!(
            names(snapshot.pods.iter().map(|p| &p.key).collect()),
            ["picked-0", "picked-bound-0"]
        );
        assert_eq!(
            names(snapshot.pod_groups.iter().map(|g| &g.key).collect()),
            ["picked", "picked-bound"]
        );
        assert_eq!(
            names(occupying.iter().map(|p| &p.key).collect()),
            ["held-0", "solo"]
        );
        assert_eq!(snapshot.nodes.len(), sim.snapshot().nodes.len());
    }

    /// A pod bound, evicted or finished while a snapshot still holds it is copied; the copy
    /// keeps its spec's facts (the kubelet's changes do not touch what they read).
    #[test]
    fn a_pod_copied_to_be_bound_or_finished_keeps_its_specs_facts() {
        use crate::model::pod::SpecFacts;
        let facts = SpecFacts {
            placement_key: 7,
            preemptable: true,
        };
        let mut sim = cluster(vec![pod("a", None, 5_000)], vec![]);
        let a = ObjectKey::new("ns", "a");
        let held = sim.snapshot();
        held.pods[0].spec_memo.get_or_init(|| facts);
        sim.bind(&a, "node-0").unwrap();
        sim.settle();
        let bound = sim.pod(&a).expect("still there");
        assert_eq!(bound.node_name.as_deref(), Some("node-0"));
        assert!(
            !std::ptr::eq(bound, &*held.pods[0]),
            "copied, not changed in place"
        );
        assert_eq!(bound.spec_memo.get(), Some(facts));
        let running = sim.snapshot();
        sim.advance_to(5_000);
        let finished = sim.pod(&a).expect("kept once finished");
        assert_eq!(finished.phase, PodPhase::Succeeded);
        assert!(!std::ptr::eq(finished, &*running.pods[0]));
        assert_eq!(finished.spec_memo.get(), Some(facts));
    }

    #[test]
    fn a_bind_to_a_node_that_does_not_exist_is_refused_naming_it() {
        let mut sim = cluster(vec![pod("a", None, 5_000)], vec![]);
        let e = sim.bind(&ObjectKey::new("ns", "a"), "node-9").unwrap_err();
        assert!(e.to_string().contains("node-9"), "{e}");
    }
}
