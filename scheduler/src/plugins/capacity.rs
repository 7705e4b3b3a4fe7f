//! `capacity`: queues share the cluster by the amounts they are *entitled to*, as Volcano
//! 1.15's capacity plugin does, instead of by weight (`proportion`). The two are different
//! policies and a configuration may name only one of them (the loader refuses both).
//!
//! Per queue, from its spec:
//! - `deserved`: what the queue is entitled to; never below its `guarantee`, and (without a
//!   hierarchy) never above its real capability. A queue without one is *best effort*.
//! - real capability: the most it may ever hold. Without a hierarchy: the cluster less every
//!   queue's guarantee, plus its own guarantee, capped by `spec.capability` (a `cpu` or
//!   `memory` capability of 0 or less is no cap, as in Volcano). With a hierarchy: the
//!   parent's real capability less the guarantees of the parent's children, plus its own
//!   guarantee, capped by its own capability; `root` is unlimited unless it declares one.
//!
//! Decisions:
//! - queue order: higher `spec.priority` first, then the smaller *share* (allocated /
//!   deserved, the largest ratio over the deserved resources; 1 for a best-effort queue),
//!   ties to the queue that has a deserved amount. With a hierarchy, leaves come before
//!   inner queues and two leaves compare the shares of their ancestors just below the
//!   lowest ancestor they have in common;
//! - allocatable: the queue is Open (and a leaf, with a hierarchy) and it and every
//!   ancestor stay within their real capability on the resources the task asks for: a queue
//!   may borrow beyond `deserved` while others leave room idle, but not room that a queue
//!   below its own deserved amount is waiting for (Volcano lends it, and reclaim then
//!   takes it back every cycle: volcano#4947);
//! - enqueueable: a gang's `minResources`, plus what the queue holds and has admitted, less
//!   its elastic part (what running jobs hold beyond their `minResources`), fits the real
//!   capability of the queue and every ancestor;
//! - preemptive (may a queue reclaim at all): it is Open, the gang keeps it within its own
//!   real capability, and on some resource the gang asks for it stays within `deserved`;
//! - reclaimable (may these pods be taken from their queue): taking each one keeps the
//!   queue at or above its guarantee, and the queue holds more than it deserves of some
//!   resource that pod uses (or the pod uses nothing the queue is entitled to); so reclaim
//!   takes a queue down to its deserved amount and no further.
//!
//! An invalid hierarchy (a parent that names no queue, a cycle) or a job in a queue that has
//! children makes the plugin refuse everything, with the reason, as Volcano's does.

use std::cmp::Ordering;

use crate::framework::{JobId, Plugin, QueueId, SessionState, TaskId, Vote};
use crate::model::queue_tree::QueueTree;
use crate::model::resources::{CPU, MEMORY};
use crate::model::{PodGroupPhase, Queue, Resources};

/// An amount no queue reaches: a real capability that is not capped.
const UNLIMITED: i64 = i64::MAX / 4;

#[derive(Debug, Default)]
pub struct CapacityPlugin {
    hierarchy: bool,
    attrs: Vec<QueueAttr>,
    /// Why nothing may be scheduled this session.
    broken: Option<String>,
    /// Per queue at session open: what it holds plus what its pending pods ask for.
    request: Vec<Resources>,
}

/// What the plugin knows of one queue for the session.
#[derive(Clone, Debug, Default)]
pub struct QueueAttr {
    pub deserved: Resources,
    pub guarantee: Resources,
    pub real_capability: Resources,
    /// `minResources` of admitted gangs not yet placed.
    pub inqueue: Resources,
    /// What running jobs hold beyond their `minResources`.
    pub elastic: Resources,
    /// Queues whose allocation counts as this one's: itself and its descendants.
    members: Vec<QueueId>,
    /// Itself, then its ancestors, nearest first (without a hierarchy: itself only).
    chain: Vec<QueueId>,
    /// From the top of the hierarchy down to itself.
    path: Vec<QueueId>,
    leaf: bool,
}

impl CapacityPlugin {
    pub fn new(hierarchy: bool) -> Self {
        Self {
            hierarchy,
            ..Default::default()
        }
    }

    pub fn attrs(&self) -> &[QueueAttr] {
        &self.attrs
    }

    /// What the queue and (with a hierarchy) its descendants hold.
    fn allocated(&self, state: &SessionState, queue: QueueId) -> Resources {
        match self.attrs[queue].members.as_slice() {
            [only] => state.queues[*only].allocated.clone(),
            members => {
                let mut sum = Resources::new();
                for &m in members {
                    sum.add(&state.queues[m].allocated);
                }
                sum
            }
        }
    }

    fn share(&self, state: &SessionState, queue: QueueId) -> f64 {
        let deserved = &self.attrs[queue].deserved;
        if !entitled(deserved) {
            return 1.0;
        }
        let allocated = self.allocated(state, queue);
        deserved
            .iter()
            .filter(|(_, d)| *d > 0)
            .map(|(name, d)| allocated.get(name.as_str()) as f64 / d as f64)
            .fold(0.0, f64::max)
    }

    fn compare_shares(&self, state: &SessionState, a: QueueId, b: QueueId) -> Ordering {
        self.share(state, a)
            .total_cmp(&self.share(state, b))
            .then_with(|| {
                let has = |q: QueueId| entitled(&self.attrs[q].deserved);
                has(b).cmp(&has(a))
            })
    }

    /// Every queue on the chain stays within its real capability with `extra` added, on
    /// the resources `extra` asks for.
    fn chain_fits(&self, state: &SessionState, queue: QueueId, extra: &Resources) -> bool {
        self.attrs[queue].chain.iter().all(|&q| {
            let future = self.allocated(state, q).plus(extra);
            future.fits_in_dimensions(&self.attrs[q].real_capability, extra)
        })
    }

    /// Would `req` take `queue` beyond its deserved amount of a resource that another queue,
    /// still below its own deserved amount of it, is waiting for? Volcano lends such room
    /// anyway, and a queue that reclaim just took down (its share now 0, so it is served
    /// first) takes the freed room straight back: reclaimed, re-placed, reclaimed again
    /// (volcano#4947, #4949). Borrowing is for room nobody entitled to it wants.
    fn borrows_awaited(&self, state: &SessionState, queue: QueueId, req: &Resources) -> bool {
        let future = self.allocated(state, queue).plus(req);
        let deserved = &self.attrs[queue].deserved;
        req.iter().any(|(name, v)| {
            let n = name.as_str();
            v > 0
                && future.get(n) > deserved.get(n)
                && (0..self.attrs.len()).any(|other| {
                    let held = state.queues[other].allocated.get(n);
                    other != queue
                        && held < self.attrs[other].deserved.get(n)
                        && held < self.request[other].get(n)
                })
        })
    }

    /// Why `queue` may take nothing: the plugin is broken, the queue is not Open, or (with
    /// a hierarchy) it has children.
    fn closed_reason(&self, state: &SessionState, queue: QueueId) -> Option<String> {
        if let Some(reason) = &self.broken {
            return Some(reason.clone());
        }
        let q = &state.queues[queue];
        if !q.is_open() {
            return Some(format!("queue {} is {:?}", q.queue.name, q.queue.state));
        }
        if self.hierarchy && !self.attrs[queue].leaf {
            return Some(format!(
                "queue {} has child queues; only leaf queues take jobs",
                q.queue.name
            ));
        }
        None
    }
}

/// A deserved amount of something: not a best-effort queue.
fn entitled(deserved: &Resources) -> bool {
    deserved.iter().any(|(_, v)| v > 0)
}

/// A cap from `spec.capability`: its entries, except a `cpu` or `memory` of 0 or less,
/// which Volcano reads as no cap.
fn cap_of(queue: &Queue) -> Option<Resources> {
    let cap = queue.capability.as_ref()?;
    let mut out = Resources::new();
    for (name, v) in cap.iter() {
        let n = name.as_str();
        if (n == CPU || n == MEMORY) && v <= 0 {
            continue;
        }
        out.set_listed(name, v);
    }
    Some(out)
}

/// `base` capped by the queue's capability where it lists a resource.
fn capped(base: Resources, queue: &Queue) -> Resources {
    let Some(cap) = cap_of(queue) else {
        return base;
    };
    let mut out = base.capped_by_limit(&cap);
    // A listed cap of 0 is a limit of 0; `capped_by_limit` keeps base's absent entries
    // absent, which already reads as 0.
    for (name, v) in cap.iter() {
        if v == 0 {
            out.set(name, 0);
        }
    }
    out
}

/// Every resource of the cluster, and cpu and memory, at [`UNLIMITED`].
fn unlimited(total: &Resources) -> Resources {
    let mut out = Resources::from_pairs([(CPU, UNLIMITED), (MEMORY, UNLIMITED)]);
    for (name, _) in total.iter() {
        out.set(name, UNLIMITED);
    }
    out
}

/// Per queue: what it holds plus what its pending pods ask for. A replica's session lacks
/// the jobs of other shards' queues: their pending requests come from the round's
/// whole-cluster figures.
fn requests(state: &SessionState) -> Vec<Resources> {
    (0..state.queues.len())
        .map(|q| {
            let mut r = state.queues[q].allocated.clone();
            if let Some(figures) = state.whole.as_ref().and_then(|w| w.foreign(q)) {
                r.add(&figures.pending_request[q]);
                return r;
            }
            for &j in &state.queues[q].jobs {
                for t in state.pending_tasks(j) {
                    r.add(state.tasks[t].resreq());
                }
            }
            r
        })
        .collect()
}

/// Per queue: its own inqueue and elastic amounts, from its jobs.
fn job_figures(state: &SessionState, queue: QueueId) -> (Resources, Resources) {
    let mut inqueue = Resources::new();
    let mut elastic = Resources::new();
    for &j in &state.queues[queue].jobs {
        let job = &state.jobs[j];
        let empty = Resources::new();
        let min = job.min_resources().unwrap_or(&empty);
        let admitted = matches!(job.phase, PodGroupPhase::Inqueue)
            || (job.phase == PodGroupPhase::Running && job.ready_count >= job.min_available());
        if admitted && job.min_resources().is_some() {
            let mut missing = min.clone();
            missing.sub_clamped(&job.allocated);
            inqueue.add(&missing);
        }
        let mut beyond = job.allocated.clone();
        beyond.sub_clamped(min);
        elastic.add(&beyond);
    }
    (inqueue, elastic)
}

fn flat_attrs(state: &SessionState) -> Vec<QueueAttr> {
    let mut total_guarantee = Resources::new();
    for q in &state.queues {
        total_guarantee.add(&q.queue.guarantee);
    }
    let mut shared = state.total_allocatable.clone();
    shared.sub_clamped(&total_guarantee);
    (0..state.queues.len())
        .map(|qid| {
            let q = &state.queues[qid].queue;
            let real = capped(shared.plus(&q.guarantee), q);
            let deserved = q
                .deserved
                .clone()
                .unwrap_or_default()
                .min_amounts(&real)
                .max_amounts(&q.guarantee);
            let (inqueue, elastic) = job_figures(state, qid);
            QueueAttr {
                deserved,
                guarantee: q.guarantee.clone(),
                real_capability: real,
                inqueue,
                elastic,
                members: vec![qid],
                chain: vec![qid],
                path: vec![qid],
                leaf: true,
            }
        })
        .collect()
}

fn hierarchical_attrs(state: &SessionState, tree: &QueueTree) -> Vec<QueueAttr> {
    let n = state.queues.len();
    let mut attrs: Vec<QueueAttr> = (0..n)
        .map(|qid| {
            let q = &state.queues[qid].queue;
            let (inqueue, elastic) = job_figures(state, qid);
            let mut chain = vec![qid];
            chain.extend(tree.ancestors(qid));
            let mut path = chain.clone();
            path.reverse();
            QueueAttr {
                deserved: q
                    .deserved
                    .clone()
                    .unwrap_or_default()
                    .max_amounts(&q.guarantee),
                guarantee: q.guarantee.clone(),
                inqueue,
                elastic,
                chain,
                path,
                leaf: tree.is_leaf(qid),
                ..Default::default()
            }
        })
        .collect();
    // Members and the inqueue / elastic figures of inner queues add up from below.
    for qid in 0..n {
        for &a in attrs[qid].chain.clone().iter() {
            attrs[a].members.push(qid);
            if a != qid {
                let (inq, el) = (attrs[qid].inqueue.clone(), attrs[qid].elastic.clone());
                attrs[a].inqueue.add(&inq);
                attrs[a].elastic.add(&el);
            }
        }
    }
    // Real capabilities from the top down.
    let top_real = match tree.root {
        Some(r) => capped(unlimited(&state.total_allocatable), &state.queues[r].queue),
        None => unlimited(&state.total_allocatable),
    };
    if let Some(r) = tree.root {
        attrs[r].real_capability = top_real.clone();
        let (mut g, mut d) = (Resources::new(), Resources::new());
        for &c in &tree.children[r] {
            g.add(&attrs[c].guarantee);
            d.add(&attrs[c].deserved);
        }
        attrs[r].guarantee = g;
        attrs[r].deserved = d;
    }
    let mut level = vec![(top_real, tree.top.clone())];
    while let Some((parent_real, kids)) = level.pop() {
        let mut siblings_guarantee = Resources::new();
        for &k in &kids {
            siblings_guarantee.add(&attrs[k].guarantee);
        }
        let mut shared = parent_real;
        shared.sub_clamped(&siblings_guarantee);
        for &k in &kids {
            let real = capped(shared.plus(&attrs[k].guarantee), &state.queues[k].queue);
            attrs[k].real_capability = real.clone();
            level.push((real, tree.children[k].clone()));
        }
    }
    attrs
}

impl Plugin for CapacityPlugin {
    fn name(&self) -> &'static str {
        "capacity"
    }

    fn on_session_open(&mut self, state: &SessionState) {
        self.broken = None;
        self.request = requests(state);
        if !self.hierarchy {
            self.attrs = flat_attrs(state);
            return;
        }
        let queues: Vec<Queue> = state.queues.iter().map(|q| q.queue.clone()).collect();
        match QueueTree::build(&queues) {
            Ok(tree) => {
                self.attrs = hierarchical_attrs(state, &tree);
                let inner_with_jobs = state
                    .queues
                    .iter()
                    .enumerate()
                    .find(|(q, info)| !tree.is_leaf(*q) && !info.jobs.is_empty());
                if let Some((_, info)) = inner_with_jobs {
                    self.broken = Some(format!(
                        "capacity: queue {} has child queues and jobs; jobs belong in leaf queues",
                        info.queue.name
                    ));
                }
            }
            Err(e) => {
                self.attrs = flat_attrs(state);
                self.broken = Some(format!("capacity: invalid queue hierarchy: {e}"));
            }
        }
    }

    fn queue_order(&self, state: &SessionState, a: QueueId, b: QueueId) -> Ordering {
        let (pa, pb) = (
            state.queues[a].queue.priority,
            state.queues[b].queue.priority,
        );
        let by_priority = pb.cmp(&pa);
        if by_priority != Ordering::Equal || !self.hierarchy {
            return by_priority.then_with(|| self.compare_shares(state, a, b));
        }
        let (la, lb) = (self.attrs[a].leaf, self.attrs[b].leaf);
        if la != lb {
            return lb.cmp(&la);
        }
        let (path_a, path_b) = (&self.attrs[a].path, &self.attrs[b].path);
        let split = path_a
            .iter()
            .zip(path_b)
            .position(|(x, y)| x != y)
            .unwrap_or(path_a.len().min(path_b.len()).saturating_sub(1));
        let at = |p: &[QueueId]| p[split.min(p.len() - 1)];
        self.compare_shares(state, at(path_a), at(path_b))
    }

    fn allocatable(&self, state: &SessionState, queue: QueueId, task: TaskId) -> Option<bool> {
        if self.closed_reason(state, queue).is_some() {
            return Some(false);
        }
        let req = state.tasks[task].resreq();
        Some(self.chain_fits(state, queue, req) && !self.borrows_awaited(state, queue, req))
    }

    fn job_enqueueable(&self, state: &SessionState, job: JobId) -> Vote {
        match self.enqueue_refusal(state, job) {
            Some(_) => Vote::Reject,
            None => Vote::Permit,
        }
    }

    fn enqueue_refusal(&self, state: &SessionState, job: JobId) -> Option<String> {
        let queue = state.jobs[job].queue?;
        if let Some(reason) = self.closed_reason(state, queue) {
            return Some(reason);
        }
        let min = state.jobs[job].min_resources()?;
        for &q in &self.attrs[queue].chain {
            let a = &self.attrs[q];
            let allocated = self.allocated(state, q);
            let mut wanted = min.plus(&allocated).plus(&a.inqueue);
            wanted.sub_clamped(&a.elastic);
            if !wanted.fits_in_dimensions(&a.real_capability, min) {
                return Some(format!(
                    "queue {} cannot admit it: minResources {min} plus {} allocated and {} admitted (less {} elastic) exceed its real capability {}",
                    state.queues[q].queue.name,
                    allocated.restricted_to(min),
                    a.inqueue.restricted_to(min),
                    a.elastic.restricted_to(min),
                    a.real_capability.restricted_to(min),
                ));
            }
        }
        None
    }

    fn on_job_enqueued(&mut self, state: &SessionState, job: JobId) {
        let j = &state.jobs[job];
        if let (Some(q), Some(min)) = (j.queue, j.min_resources()) {
            for a in self.attrs[q].chain.clone() {
                self.attrs[a].inqueue.add(min);
            }
        }
    }

    fn preemptive(&self, state: &SessionState, queue: QueueId, need: &Resources) -> Option<bool> {
        if self.closed_reason(state, queue).is_some() {
            return Some(false);
        }
        // Only the queue's own capability, as in Volcano: evicting within the same parent
        // also lowers the parent's allocation, and allocate checks the ancestors anyway.
        let future = self.allocated(state, queue).plus(need);
        if !future.fits_in_dimensions(&self.attrs[queue].real_capability, need) {
            return Some(false);
        }
        let deserved = &self.attrs[queue].deserved;
        Some(need.iter().any(|(name, v)| {
            let n = name.as_str();
            let (f, d) = (future.get(n), deserved.get(n));
            v > 0 && !(f == 0 && d == 0) && f <= d
        }))
    }

    fn reclaimable(
        &self,
        state: &SessionState,
        reclaimer: JobId,
        victims: &[TaskId],
    ) -> Option<bool> {
        if self.broken.is_some() {
            return Some(false);
        }
        let mut victim_queue = None;
        for &v in victims {
            let q = state.tasks[v].job.and_then(|j| state.jobs[j].queue)?;
            if victim_queue.is_some_and(|vq| vq != q) {
                return Some(false);
            }
            victim_queue = Some(q);
        }
        let q = victim_queue?;
        if Some(q) == state.jobs[reclaimer].queue || !state.queues[q].queue.reclaimable {
            return Some(false);
        }
        let a = &self.attrs[q];
        let mut allocated = self.allocated(state, q);
        for &v in victims {
            let req = state.tasks[v].resreq();
            let after = allocated.minus(req);
            if !a.guarantee.fits_in(&after) {
                return Some(false);
            }
            let relevant = |name: &str| req.get(name) > 0 && a.deserved.get(name) > 0;
            let immediate = !req.names().any(|n| relevant(n.as_str()));
            let over = req.names().any(|n| {
                let n = n.as_str();
                relevant(n) && allocated.get(n) > a.deserved.get(n)
            });
            if !immediate && !over {
                return Some(false);
            }
            allocated = after;
        }
        Some(true)
    }

    fn queue_may_give_back(&self, state: &SessionState, queue: QueueId) -> Option<bool> {
        let allocated = self.allocated(state, queue);
        let deserved = &self.attrs[queue].deserved;
        let over = allocated
            .iter()
            .any(|(name, v)| v > 0 && v > deserved.get(name.as_str()));
        Some(state.queues[queue].queue.reclaimable && over)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::SchedulerConf;
    use crate::framework::testing::{Cluster, res};
    use crate::model::resources::GPU;

    fn conf() -> SchedulerConf {
        SchedulerConf::from_names(
            &["enqueue", "allocate", "reclaim"],
            &[&["priority", "gang"], &["predicates", "capacity"]],
        )
    }

    fn queue(name: &str, deserved: &[(&str, i64)], parent: Option<&str>) -> Queue {
        let mut q = Queue::new(name);
        if !deserved.is_empty() {
            q.deserved = Some(res(deserved));
        }
        q.parent = parent.map(str::to_string);
        q
    }

    #[test]
    fn real_capability_is_the_cluster_less_the_others_guarantees() {
        let mut a = queue("a", &[(CPU, 2_000)], None);
        a.guarantee = res(&[(CPU, 1_000)]);
        let mut b = queue("b", &[], None);
        b.guarantee = res(&[(CPU, 3_000)]);
        // As the loader reads `capability: {cpu: 0, nvidia.com/gpu: 0}`: zeros listed.
        let mut cap = Resources::new();
        cap.set_listed(&crate::model::ResourceName::new(CPU), 0);
        cap.set_listed(&crate::model::ResourceName::new(GPU), 0);
        b.capability = Some(cap);
        let state = Cluster::new()
            .node("n1", &[(CPU, 10_000), (GPU, 2)])
            .queue(a)
            .queue(b)
            .session(&conf())
            .state;
        let attrs = flat_attrs(&state);
        let (a, b) = (state.queue_index["a"], state.queue_index["b"]);
        assert_eq!(attrs[a].real_capability.get(CPU), 7_000);
        // cpu 0 is no cap; gpu 0 is a cap of 0.
        assert_eq!(attrs[b].real_capability.get(CPU), 9_000);
        assert_eq!(attrs[b].real_capability.get(GPU), 0);
        assert_eq!(attrs[a].deserved.get(CPU), 2_000);
    }

    #[test]
    fn a_child_lives_within_its_parent_and_an_undeclared_root_is_unlimited() {
        let mut parent = queue("p", &[(CPU, 4_000)], None);
        parent.capability = Some(res(&[(CPU, 4_000)]));
        let mut child = queue("c", &[(CPU, 1_000)], Some("p"));
        child.capability = Some(res(&[(CPU, 8_000)]));
        let state = Cluster::new()
            .node("n1", &[(CPU, 100_000)])
            .queue(parent)
            .queue(child)
            .session(&conf())
            .state;
        let queues: Vec<Queue> = state.queues.iter().map(|q| q.queue.clone()).collect();
        let tree = QueueTree::build(&queues).expect("valid");
        let attrs = hierarchical_attrs(&state, &tree);
        let (p, c) = (state.queue_index["p"], state.queue_index["c"]);
        assert_eq!(attrs[p].real_capability.get(CPU), 4_000);
        assert_eq!(attrs[c].real_capability.get(CPU), 4_000);
        assert_eq!(attrs[c].chain, vec![c, p]);
        let default = state.queue_index["default"];
        assert_eq!(attrs[default].real_capability.get(CPU), UNLIMITED);
    }

    #[test]
    fn an_invalid_hierarchy_refuses_every_allocation() {
        let state = Cluster::new()
            .node("n1", &[(CPU, 8_000)])
            .queue(queue("a", &[], Some("missing")))
            .group("g", "a", 1)
            .pod("g-0", Some("g"), &[(CPU, 1_000)])
            .session(&conf())
            .state;
        let mut plugin = CapacityPlugin::new(true);
        plugin.on_session_open(&state);
        let a = state.queue_index["a"];
        assert_eq!(plugin.allocatable(&state, a, 0), Some(false));
        let reason = plugin.enqueue_refusal(&state, 0).unwrap_or_default();
        assert!(
            reason.contains("spec.parent") && reason.contains("missing"),
            "{reason}"
        );
        // Without the hierarchy the same queue is an ordinary one.
        let mut flat = CapacityPlugin::new(false);
        flat.on_session_open(&state);
        assert_eq!(flat.allocatable(&state, a, 0), Some(true));
    }

    #[test]
    fn a_queue_gives_back_only_down_to_its_deserved_amount() {
        // a deserves 1 CPU and runs two 1-CPU pods of one job: one pod may go, not both.
        let state = Cluster::new()
            .node("n1", &[(CPU, 2_000)])
            .queue(queue("a", &[(CPU, 1_000)], None))
            .queue(queue("b", &[(CPU, 1_000)], None))
            .group("a1", "a", 1)
            .group("b1", "b", 1)
            .running_pod("a1-0", Some("a1"), "n1", &[(CPU, 1_000)])
            .running_pod("a1-1", Some("a1"), "n1", &[(CPU, 1_000)])
            .pod("b1-0", Some("b1"), &[(CPU, 1_000)])
            .session(&conf())
            .state;
        let mut plugin = CapacityPlugin::new(false);
        plugin.on_session_open(&state);
        let task = |name: &str| {
            state
                .tasks
                .iter()
                .position(|t| t.pod.key.name == name)
                .expect("task")
        };
        let b1 = state.tasks[task("b1-0")].job.expect("job");
        assert_eq!(plugin.reclaimable(&state, b1, &[task("a1-0")]), Some(true));
        assert_eq!(
            plugin.reclaimable(&state, b1, &[task("a1-0"), task("a1-1")]),
            Some(false)
        );
        let b = state.queue_index["b"];
        let a = state.queue_index["a"];
        assert_eq!(
            plugin.preemptive(&state, b, &res(&[(CPU, 1_000)])),
            Some(true)
        );
        // a is at twice its deserved amount: it may not reclaim more.
        assert_eq!(
            plugin.preemptive(&state, a, &res(&[(CPU, 1_000)])),
            Some(false)
        );
    }
}
