//! `BindPool`: a serve replica's binds, off its cycle.
//!
//! ```text
//!  cycle N: commit ──submit──▶ queue ──(a worker free, the shard still ours)──▶ bind task
//!                                 │                                              │
//!                                 └─ shard lost / stopping: not started ─────────┤
//!  cycle N+1: collect ◀──────────────────── finished (bound, failed, not started)┘
//!             → MarkBound / Release in one ledger write, at each bind's fence
//! ```
//!
//! - A committed gang's binds are queued at once and start in the order they were queued,
//!   `--bind-workers` at a time; each request still takes a token of the cluster's bucket
//!   (`--kube-qps`/`--kube-burst`). [`BindPool::submit`] returns at once: the next cycle
//!   plans while they run.
//! - A pod with a bind queued or running is *in flight* until its end is collected:
//!   [`BindPool::assume`] shows it bound to its node in the cycle's snapshot, so the next
//!   cycle neither plans it again nor counts its node's capacity as free, and reconcile
//!   leaves it alone ([`BindPool::in_flight`]); [`BindPool::submit`] refuses a second bind
//!   of a pod in flight.
//! - Fencing (I4): every bind carries the fence its placement was committed at, and a
//!   request is sent only while the replica owns that shard at that epoch
//!   ([`BindPool::set_owned`], asked before each request, retries included). A lost
//!   shard's binds not started end as [`BindOutcome::NotStarted`]; their placements stay
//!   committed for the next owner's reconcile to bind.
//! - [`BindPool::collect`] takes the binds that ended, without waiting; the replica
//!   records them in the ledger in one write. [`BindPool::drain`] (on SIGTERM) starts
//!   nothing more and waits a bounded time for the binds already sent.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use phalanx_statestore::ledger::{Epoch, ShardId};
use tokio::runtime::Handle;
use tokio::sync::{Semaphore, mpsc, watch};

use crate::cluster::ClusterError;
use crate::cluster::ClusterSnapshot;
use crate::cluster::kube::KubeBinder;
use crate::ledger::sharded::Fence;
use crate::model::ObjectKey;

/// One pod to bind: where, for which gang, and the fence its placement was committed at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindRequest {
    pub fence: Fence,
    pub gang: ObjectKey,
    pub pod: ObjectKey,
    pub node: String,
}

/// How a bind ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindOutcome {
    /// The pod is bound to the node (now, or it already was).
    Bound,
    /// The API server refused for good (gone, bound elsewhere, ...): release the placement.
    Failed(ClusterError),
    /// Not sent (or not sent again): the shard was lost, or the replica is stopping. The
    /// placement stays committed; whoever owns the shard binds it.
    NotStarted,
}

/// A bind that ended, with when.
#[derive(Clone, Debug)]
pub struct Finished {
    pub request: BindRequest,
    pub outcome: BindOutcome,
    pub ended: Instant,
}

/// Sends one pod's Binding; `gate` is asked before each request (false: send nothing
/// more, answer [`BindOutcome::NotStarted`]).
pub trait Binds: Send + Sync + 'static {
    fn bind(
        self: Arc<Self>,
        pod: ObjectKey,
        node: String,
        gate: Gate,
    ) -> BoxFuture<'static, BindOutcome>;
}

impl Binds for KubeBinder {
    fn bind(
        self: Arc<Self>,
        pod: ObjectKey,
        node: String,
        gate: Gate,
    ) -> BoxFuture<'static, BindOutcome> {
        Box::pin(async move {
            match self.bind_gated(&pod, &node, &|| gate.open()).await {
                Some(Ok(())) => BindOutcome::Bound,
                Some(Err(e)) => BindOutcome::Failed(e),
                None => BindOutcome::NotStarted,
            }
        })
    }
}

/// The shards this replica owns, as its loop last read them; shared with every bind.
#[derive(Debug, Default)]
struct Owned(Mutex<BTreeMap<ShardId, Epoch>>);

impl Owned {
    fn holds(&self, fence: Fence) -> bool {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&fence.shard)
            == Some(&fence.epoch)
    }
}

/// Whether a bind may still send its request: its shard owned at its fence's epoch.
#[derive(Clone, Debug)]
pub struct Gate {
    owned: Arc<Owned>,
    fence: Fence,
}

impl Gate {
    pub fn open(&self) -> bool {
        self.owned.holds(self.fence)
    }
}

/// A gang's binds not all collected yet: when they were queued, how many remain.
struct GangBinds {
    queued: Instant,
    left: usize,
}

/// The bind pool of one replica (see the module's documentation).
pub struct BindPool {
    handle: Handle,
    /// To the dispatcher; `None` once draining.
    queue: Option<mpsc::UnboundedSender<BindRequest>>,
    done: mpsc::UnboundedReceiver<Finished>,
    /// Pod -> (fence, node), queued or running, until collected.
    in_flight: HashMap<ObjectKey, (Fence, String)>,
    gangs: HashMap<ObjectKey, GangBinds>,
    owned: Arc<Owned>,
    /// True once draining: the dispatcher starts nothing more.
    stopping: watch::Sender<bool>,
}

impl std::fmt::Debug for BindPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BindPool")
            .field("in_flight", &self.in_flight.len())
            .finish_non_exhaustive()
    }
}

impl BindPool {
    /// Starts the dispatcher on `handle`: `workers` binds running at most (at least 1).
    pub fn start(handle: Handle, binder: Arc<dyn Binds>, workers: usize) -> Self {
        let (queue, queued) = mpsc::unbounded_channel();
        let (finished, done) = mpsc::unbounded_channel();
        let owned = Arc::new(Owned::default());
        let (stopping, stop) = watch::channel(false);
        handle.spawn(dispatch(
            binder,
            queued,
            finished,
            Arc::new(Semaphore::new(workers.max(1))),
            owned.clone(),
            stop,
        ));
        Self {
            handle,
            queue: Some(queue),
            done,
            in_flight: HashMap::new(),
            gangs: HashMap::new(),
            owned,
            stopping,
        }
    }

    /// The shards owned now (shard -> epoch): a bind whose fence is not among them sends
    /// nothing from now on.
    pub fn set_owned(&self, owned: &BTreeMap<ShardId, Epoch>) {
        *self
            .owned
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = owned.clone();
    }

    /// Queues the binds, in order; returns how many were queued. A pod already in flight is
    /// not queued again (its bind in flight answers for it).
    pub fn submit(&mut self, requests: impl IntoIterator<Item = BindRequest>) -> usize {
        let Some(queue) = &self.queue else {
            return 0;
        };
        let now = Instant::now();
        let mut queued = 0;
        for request in requests {
            if self.in_flight.contains_key(&request.pod) {
                continue;
            }
            self.in_flight
                .insert(request.pod.clone(), (request.fence, request.node.clone()));
            self.gangs
                .entry(request.gang.clone())
                .or_insert(GangBinds {
                    queued: now,
                    left: 0,
                })
                .left += 1;
            // The dispatcher ends only with the queue: a send cannot fail while `self` lives.
            let _ = queue.send(request);
            queued += 1;
        }
        queued
    }

    /// Pods whose bind is queued or running, or ended and not collected.
    pub fn in_flight(&self) -> &HashMap<ObjectKey, (Fence, String)> {
        &self.in_flight
    }

    /// Shows each pod in flight bound to its node in `snapshot`: the cycle planning on it
    /// neither places it again nor counts its share of the node as free.
    pub fn assume(&self, snapshot: &mut ClusterSnapshot) {
        if self.in_flight.is_empty() {
            return;
        }
        for pod in &mut snapshot.pods {
            if pod.node_name.is_some() {
                continue;
            }
            if let Some((_, node)) = self.in_flight.get(&pod.key) {
                Arc::make_mut(pod).node_name = Some(node.clone());
            }
        }
    }

    /// The binds that ended since the last call, in the order they ended; without waiting.
    pub fn collect(&mut self) -> Collected {
        let mut out = Collected::default();
        while let Ok(f) = self.done.try_recv() {
            self.note_collected(&f, &mut out);
            out.finished.push(f);
        }
        out
    }

    fn note_collected(&mut self, f: &Finished, out: &mut Collected) {
        self.in_flight.remove(&f.request.pod);
        if let Some(g) = self.gangs.get_mut(&f.request.gang) {
            g.left -= 1;
            if g.left == 0 {
                let took = f.ended.saturating_duration_since(g.queued);
                out.gangs_done.push((f.request.gang.clone(), took));
                self.gangs.remove(&f.request.gang);
            }
        }
    }

    /// Stopping: starts no bind more (those queued end as not started) and waits up to
    /// `grace` for the binds already sent; returns what ended. Binds still running then are
    /// left to the next owner of their shards (their placements stay committed). Blocks:
    /// call from outside the runtime.
    pub fn drain(&mut self, grace: Duration) -> Collected {
        let handle = self.handle.clone();
        handle.block_on(self.drain_async(grace))
    }

    /// [`BindPool::drain`], awaited.
    pub async fn drain_async(&mut self, grace: Duration) -> Collected {
        self.queue = None;
        let _ = self.stopping.send(true);
        let mut out = self.collect();
        let deadline = tokio::time::Instant::now() + grace;
        while !self.in_flight.is_empty() {
            match tokio::time::timeout_at(deadline, self.done.recv()).await {
                Ok(Some(f)) => {
                    self.note_collected(&f, &mut out);
                    out.finished.push(f);
                }
                Ok(None) | Err(_) => break,
            }
        }
        out
    }
}

/// What [`BindPool::collect`] or [`BindPool::drain`] took.
#[derive(Debug, Default)]
pub struct Collected {
    pub finished: Vec<Finished>,
    /// Gangs whose last bind ended, with the time from their queueing to that end.
    pub gangs_done: Vec<(ObjectKey, Duration)>,
}

/// Takes the queue in order: a free worker, then the gate, then a task that binds.
async fn dispatch(
    binder: Arc<dyn Binds>,
    mut queued: mpsc::UnboundedReceiver<BindRequest>,
    finished: mpsc::UnboundedSender<Finished>,
    workers: Arc<Semaphore>,
    owned: Arc<Owned>,
    mut stop: watch::Receiver<bool>,
) {
    let not_started = |request: BindRequest| Finished {
        request,
        outcome: BindOutcome::NotStarted,
        ended: Instant::now(),
    };
    while let Some(request) = queued.recv().await {
        if *stop.borrow() {
            let _ = finished.send(not_started(request));
            continue;
        }
        let permit = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => None,
            p = workers.clone().acquire_owned() => p.ok(),
        };
        let gate = Gate {
            owned: owned.clone(),
            fence: request.fence,
        };
        let Some(permit) = permit.filter(|_| gate.open()) else {
            let _ = finished.send(not_started(request));
            continue;
        };
        let binder = binder.clone();
        let finished = finished.clone();
        tokio::spawn(async move {
            let outcome = binder
                .bind(request.pod.clone(), request.node.clone(), gate)
                .await;
            drop(permit);
            let _ = finished.send(Finished {
                request,
                outcome,
                ended: Instant::now(),
            });
        });
    }
}

#[cfg(test)]
mod tests;
