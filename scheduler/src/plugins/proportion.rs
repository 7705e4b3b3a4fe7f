//! `proportion`: queues share the cluster by weight.
//!
//! Each queue's *deserved* share is computed by water-filling, as Volcano does: the cluster's
//! remaining resources are split among the queues still wanting more in proportion to their
//! weights; a queue's deserved amount is capped by its real capability (its `capability`, and
//! never more than the cluster minus the other queues' guarantees) and by what it requests
//! (allocated + pending), and raised to its `guarantee`. Queues whose request is met drop
//! out, and what they leave is split again, until nothing changes. A `spec.deserved` set on
//! the queue replaces the computed amount (capped the same way).
//!
//! With deserved shares known: queues are ordered by `spec.priority` (higher first), then by
//! share (allocated / deserved, the largest fraction over resources), a queue whose allocation reaches its deserved amount in every
//! resource is *overused* and gets nothing more this cycle, a task is *allocatable* only if the
//! queue stays within its deserved amount on the resources the task asks for, and a gang is
//! *enqueueable* only if its `minResources`, plus what the queue holds and has admitted, stay
//! within the queue's real capability and, on resources the queue cannot have all it asks
//! for, the queue has not yet allocated and admitted its deserved amount.

use std::cmp::Ordering;

use crate::framework::{JobId, Plugin, QueueId, SessionState, TaskId, TaskStatus, Vote};
use crate::model::{PodGroupPhase, Resources};

#[derive(Debug, Default)]
pub struct ProportionPlugin {
    queues: Vec<QueueShare>,
}

#[derive(Clone, Debug, Default)]
pub struct QueueShare {
    pub deserved: Resources,
    pub request: Resources,
    pub real_capability: Resources,
    /// `minResources` of this queue's gangs admitted but not yet placed.
    pub inqueue: Resources,
}

impl ProportionPlugin {
    pub fn shares(&self) -> &[QueueShare] {
        &self.queues
    }

    fn share(&self, state: &SessionState, queue: QueueId) -> f64 {
        let deserved = &self.queues[queue].deserved;
        let allocated = &state.queues[queue].allocated;
        let mut share: f64 = 0.0;
        for (name, used) in allocated.iter() {
            let d = deserved.get(name.as_str());
            share = share.max(if d > 0 { used as f64 / d as f64 } else { 1.0 });
        }
        share
    }
}

/// Water-fills `total` over the queues. Exposed for tests and for `explain`.
pub fn compute_deserved(state: &SessionState) -> Vec<QueueShare> {
    let total = &state.total_allocatable;
    let mut total_guarantee = Resources::new();
    for q in &state.queues {
        total_guarantee.add(&q.queue.guarantee);
    }
    let mut shares: Vec<QueueShare> = state
        .queues
        .iter()
        .map(|q| {
            let mut real_capability = total.clone();
            real_capability.sub_clamped(&total_guarantee);
            real_capability.add(&q.queue.guarantee);
            if let Some(cap) = &q.queue.capability {
                real_capability = real_capability.capped_by_limit(cap);
            }
            let mut request = q.allocated.clone();
            let mut inqueue = Resources::new();
            for &j in &q.jobs {
                let job = &state.jobs[j];
                for &t in &job.tasks {
                    if state.tasks[t].status == TaskStatus::Pending && state.tasks[t].managed {
                        request.add(state.tasks[t].resreq());
                    }
                }
                if job.phase == PodGroupPhase::Inqueue
                    && let Some(min) = job.min_resources()
                {
                    let mut missing = min.clone();
                    missing.sub_clamped(&job.allocated);
                    inqueue.add(&missing);
                }
            }
            QueueShare {
                deserved: Resources::new(),
                request,
                real_capability,
                inqueue,
            }
        })
        .collect();

    let mut remaining = total.clone();
    let mut met = vec![false; shares.len()];
    for (qid, q) in state.queues.iter().enumerate() {
        if let Some(fixed) = &q.queue.deserved {
            let s = &mut shares[qid];
            s.deserved = fixed
                .capped_by_limit(&s.real_capability)
                .max_amounts(&q.queue.guarantee);
            remaining.sub_clamped(&s.deserved);
            met[qid] = true;
        }
    }
    loop {
        let total_weight: i64 = state
            .queues
            .iter()
            .enumerate()
            .filter(|(qid, _)| !met[*qid])
            .map(|(_, q)| i64::from(q.queue.weight.max(1)))
            .sum();
        if total_weight == 0 {
            break;
        }
        let before = remaining.clone();
        let mut increased = Resources::new();
        let mut decreased = Resources::new();
        for (qid, q) in state.queues.iter().enumerate() {
            if met[qid] {
                continue;
            }
            let s = &mut shares[qid];
            let old = s.deserved.clone();
            let mut d = old.plus(&remaining.scaled(i64::from(q.queue.weight.max(1)), total_weight));
            d = d.capped_by_limit(&s.real_capability);
            d = d.min_amounts(&s.request);
            d = d.max_amounts(&q.queue.guarantee);
            if s.request.fits_in(&d) {
                met[qid] = true;
            }
            let mut up = d.clone();
            up.sub_clamped(&old);
            let mut down = old.clone();
            down.sub_clamped(&d);
            increased.add(&up);
            decreased.add(&down);
            s.deserved = d;
        }
        remaining.sub_clamped(&increased);
        remaining.add(&decreased);
        if remaining.is_zero() || remaining == before {
            break;
        }
    }
    shares
}

impl Plugin for ProportionPlugin {
    fn name(&self) -> &'static str {
        "proportion"
    }

    fn on_session_open(&mut self, state: &SessionState) {
        self.queues = compute_deserved(state);
    }

    /// Higher `spec.priority` first, then the least-served (smallest share) first.
    fn queue_order(&self, state: &SessionState, a: QueueId, b: QueueId) -> Ordering {
        let (pa, pb) = (
            state.queues[a].queue.priority,
            state.queues[b].queue.priority,
        );
        pb.cmp(&pa)
            .then_with(|| self.share(state, a).total_cmp(&self.share(state, b)))
    }

    fn overused(&self, state: &SessionState, queue: QueueId) -> Option<bool> {
        Some(
            self.queues[queue]
                .deserved
                .fits_in(&state.queues[queue].allocated),
        )
    }

    fn allocatable(&self, state: &SessionState, queue: QueueId, task: TaskId) -> Option<bool> {
        let req = state.tasks[task].resreq();
        let future = state.queues[queue].allocated.plus(req);
        Some(future.fits_in_dimensions(&self.queues[queue].deserved, req))
    }

    /// A queue gives back only what it holds beyond its deserved share, and only if it is
    /// `reclaimable`: after the eviction its share is still at least 1 (it holds at least its
    /// deserved amount of its dominant resource), and it keeps its guarantee. This is what keeps two queues from
    /// taking turns: the reclaimer never rises above its deserved share (see `allocatable`)
    /// and the victim never falls below its own.
    fn reclaimable(
        &self,
        state: &SessionState,
        reclaimer: JobId,
        victims: &[TaskId],
    ) -> Option<bool> {
        let mut freed = Resources::new();
        let mut victim_queue = None;
        for &v in victims {
            let q = state.tasks[v].job.and_then(|j| state.jobs[j].queue)?;
            if victim_queue.is_some_and(|vq| vq != q) {
                return Some(false);
            }
            victim_queue = Some(q);
            freed.add(state.tasks[v].resreq());
        }
        let q = victim_queue?;
        let reclaimer_queue = state.jobs[reclaimer].queue?;
        if q == reclaimer_queue || !state.queues[q].queue.reclaimable {
            return Some(false);
        }
        // A queue of higher priority is never reclaimed from by a lower one.
        if state.queues[q].queue.priority > state.queues[reclaimer_queue].queue.priority {
            return Some(false);
        }
        // The queue's share (its largest allocated/deserved ratio, the same share that
        // orders queues) must stay at or above 1 after the eviction, and no guaranteed
        // amount may be touched.
        let mut after = state.queues[q].allocated.clone();
        after.sub(&freed);
        let guarantee = &state.queues[q].queue.guarantee;
        if !guarantee.restricted_to(&freed).fits_in(&after) {
            return Some(false);
        }
        let deserved = &self.queues[q].deserved;
        let still_at_share = after.iter().any(|(name, have)| {
            let d = deserved.get(name.as_str());
            have > 0 && have >= d
        });
        Some(still_at_share)
    }

    fn job_enqueueable(&self, state: &SessionState, job: JobId) -> Vote {
        match self.enqueue_refusal(state, job) {
            Some(_) => Vote::Reject,
            None => Vote::Permit,
        }
    }

    fn enqueue_refusal(&self, state: &SessionState, job: JobId) -> Option<String> {
        let j = &state.jobs[job];
        let (queue, min) = (j.queue?, j.min_resources()?);
        let s = &self.queues[queue];
        let wanted = min.plus(&state.queues[queue].allocated).plus(&s.inqueue);
        let name = &state.queues[queue].queue.name;
        if !wanted.restricted_to(min).within_limit(&s.real_capability) {
            return Some(format!(
                "queue {name} cannot admit it: minResources {min} plus {} allocated and {} admitted exceed the queue's capability {}",
                state.queues[queue].allocated.restricted_to(min),
                s.inqueue.restricted_to(min),
                s.real_capability.restricted_to(min),
            ));
        }
        // Where the queue cannot have all it asks for (its deserved amount is below its
        // request), a queue whose allocated and admitted amounts already reach its deserved
        // amount admits nothing more: allocate would never give it more, and the admission
        // would hold budget that other queues need (volcano#5006).
        let held = state.queues[queue].allocated.plus(&s.inqueue);
        let at_share = min.names().any(|r| {
            let r = r.as_str();
            s.deserved.get(r) < s.request.get(r) && held.get(r) >= s.deserved.get(r)
        });
        if !at_share {
            return None;
        }
        Some(format!(
            "queue {name} is at its deserved share: {} allocated and {} admitted reach its deserved {}",
            state.queues[queue].allocated.restricted_to(min),
            s.inqueue.restricted_to(min),
            s.deserved.restricted_to(min),
        ))
    }

    fn on_job_enqueued(&mut self, state: &SessionState, job: JobId) {
        let j = &state.jobs[job];
        if let (Some(q), Some(min)) = (j.queue, j.min_resources()) {
            self.queues[q].inqueue.add(min);
        }
    }
}
