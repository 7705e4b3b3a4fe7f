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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::cluster::{Cluster, ClusterError, ClusterSnapshot};
use crate::framework::Event;
use crate::model::{
    Node, ObjectKey, Pod, PodGroup, PodGroupStatus, PodPhase, PriorityClass, Queue, TimeMs,
};

#[derive(Debug, Default)]
pub struct SimCluster {
    now_ms: TimeMs,
    nodes: Vec<Arc<Node>>,
    pods: BTreeMap<ObjectKey, Arc<Pod>>,
    pod_groups: BTreeMap<ObjectKey, PodGroup>,
    queues: Vec<Queue>,
    priority_classes: Vec<PriorityClass>,
    /// When each running pod's work started (its gang became complete).
    work_started_ms: HashMap<ObjectKey, TimeMs>,
    /// Pods bound during this run (not those that were already running at the start).
    bound_here: BTreeSet<ObjectKey>,
    evicted: BTreeSet<ObjectKey>,
    /// Evicted pods with a termination grace period, and when they will be gone.
    terminating_until: BTreeMap<ObjectKey, TimeMs>,
    /// Evicted pods gone since the last [`SimCluster::take_gone`].
    gone: Vec<ObjectKey>,
    events: Vec<(TimeMs, Event)>,
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
            nodes: nodes.into_iter().map(Arc::new).collect(),
            pods: pods
                .into_iter()
                .map(|p| (p.key.clone(), Arc::new(p)))
                .collect(),
            pod_groups: pod_groups.into_iter().map(|g| (g.key.clone(), g)).collect(),
            queues,
            priority_classes,
            ..Default::default()
        };
        sim.start_complete_gangs();
        sim
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
        self.pod_groups.values()
    }

    pub fn pod_group(&self, key: &ObjectKey) -> Option<&PodGroup> {
        self.pod_groups.get(key)
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

    pub fn events(&self) -> &[(TimeMs, Event)] {
        &self.events
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
        self.work_started_ms.contains_key(pod)
            && self
                .pods
                .get(pod)
                .is_some_and(|p| p.phase == PodPhase::Running)
    }

    /// Adds objects to the running cluster (a workload that arrives later).
    pub fn add(&mut self, pods: Vec<Pod>, pod_groups: Vec<PodGroup>) {
        for g in pod_groups {
            self.pod_groups.insert(g.key.clone(), g);
        }
        for p in pods {
            self.pods.insert(p.key.clone(), Arc::new(p));
        }
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
        let finished = self
            .work_started_ms
            .iter()
            .filter_map(|(key, start)| {
                let pod = self.pods.get(key)?;
                (pod.phase == PodPhase::Running)
                    .then(|| pod.sim_duration_ms.map(|d| start.saturating_add(d)))
                    .flatten()
            })
            .min();
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
                if self.work_started_ms.contains_key(&pod.key) {
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
        for (key, start) in &self.work_started_ms {
            let Some(pod) = self.pods.get_mut(key) else {
                continue;
            };
            if pod.phase == PodPhase::Running
                && pod
                    .sim_duration_ms
                    .is_some_and(|d| start.saturating_add(d) <= now)
            {
                Arc::make_mut(pod).phase = PodPhase::Succeeded;
                finished.push(key.clone());
            }
        }
        self.start_complete_gangs();
        finished.sort();
        finished
    }

    /// Starts the work clock of running pods whose gang is complete.
    fn start_complete_gangs(&mut self) {
        let mut running_per_group: HashMap<ObjectKey, u32> = HashMap::new();
        for pod in self.pods.values() {
            if let Some(group) = &pod.group
                && matches!(pod.phase, PodPhase::Running | PodPhase::Succeeded)
            {
                *running_per_group
                    .entry(ObjectKey::new(&pod.key.namespace, group))
                    .or_insert(0) += 1;
            }
        }
        for pod in self.pods.values() {
            if pod.phase != PodPhase::Running
                || pod.terminating
                || self.work_started_ms.contains_key(&pod.key)
            {
                continue;
            }
            let complete = match &pod.group {
                None => true,
                Some(group) => {
                    let key = ObjectKey::new(&pod.key.namespace, group);
                    let min = self.pod_groups.get(&key).map_or(1, |g| g.min_member);
                    running_per_group.get(&key).copied().unwrap_or(0) >= min
                }
            };
            if complete {
                self.work_started_ms.insert(pod.key.clone(), self.now_ms);
            }
        }
    }
}

impl Cluster for SimCluster {
    fn snapshot(&self) -> ClusterSnapshot {
        ClusterSnapshot {
            now_ms: self.now_ms,
            nodes: self.nodes.clone(),
            pods: self.pods.values().cloned().collect(),
            pod_groups: self.pod_groups.values().cloned().collect(),
            queues: self.queues.clone(),
            priority_classes: self.priority_classes.clone(),
        }
    }

    fn bind(&mut self, pod: &ObjectKey, node: &str) -> Result<(), ClusterError> {
        self.bind_calls += 1;
        if !self.nodes.iter().any(|n| n.name == node) {
            return Err(ClusterError::NotFound {
                kind: "node",
                key: node.to_string(),
            });
        }
        let Some(p) = self.pods.get_mut(pod).map(Arc::make_mut) else {
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
        group.status = status.clone();
        Ok(())
    }

    fn record_event(&mut self, event: &Event) -> Result<(), ClusterError> {
        self.events.push((self.now_ms, event.clone()));
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
        self.work_started_ms.remove(pod);
        self.evicted.insert(pod.clone());
        match p.termination_grace_ms.filter(|&g| g > 0) {
            _ if p.terminating => {}
            Some(grace) if p.node_name.is_some() => {
                Arc::make_mut(p).terminating = true;
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
