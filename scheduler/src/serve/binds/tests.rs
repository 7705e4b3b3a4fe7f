//! The bind pool with a scripted binder: each bind tells the test it started and ends when
//! the test answers it. Time is paused, so `settle` returns only once every task that can
//! run has run: no test waits on luck.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};

use super::*;
use crate::cluster::ClusterError;
use crate::framework::testing::Cluster as TestCluster;
use crate::framework::{GangPlacement, Placement, SchedulerConf, run_cycle};
use crate::ledger::{
    FIRST_EPOCH, LedgerBackend, LocalLedger, PlacementLedger, SINGLE_SHARD, Verdict,
};
use crate::model::{DEFAULT_SCHEDULER_NAME, Node, ObjectKey, Resources};
use crate::serve::ledger::reconcile;

const GPU: &str = "nvidia.com/gpu";

type Started = (ObjectKey, oneshot::Sender<BindOutcome>);

/// Tells the test each bind it starts, then waits for the test's answer.
struct Scripted {
    started: mpsc::UnboundedSender<Started>,
}

impl Binds for Scripted {
    fn bind(
        self: Arc<Self>,
        pod: ObjectKey,
        _node: String,
        _gate: Gate,
    ) -> BoxFuture<'static, BindOutcome> {
        let (answer, answered) = oneshot::channel();
        let _ = self.started.send((pod, answer));
        Box::pin(async move { answered.await.unwrap_or(BindOutcome::NotStarted) })
    }
}

/// A pool of `workers` over a scripted binder; shards 0 and 1 owned at epoch 1.
fn pool(workers: usize) -> (BindPool, mpsc::UnboundedReceiver<Started>) {
    let (started, starts) = mpsc::unbounded_channel();
    let pool = BindPool::start(Handle::current(), Arc::new(Scripted { started }), workers);
    pool.set_owned(&BTreeMap::from([(0, 1), (1, 1)]));
    (pool, starts)
}

fn req(pod: &str, gang: &str, shard: ShardId, epoch: Epoch) -> BindRequest {
    BindRequest {
        fence: Fence { shard, epoch },
        gang: ObjectKey::new("ns", gang),
        pod: ObjectKey::new("ns", pod),
        node: "n1".into(),
    }
}

/// Returns once every task that can run has run (time is paused: the clock moves only
/// when nothing else can).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

/// The binds started since the last call, in the order they started.
fn started(starts: &mut mpsc::UnboundedReceiver<Started>) -> Vec<Started> {
    std::iter::from_fn(|| starts.try_recv().ok()).collect()
}

fn names<'a>(pods: impl IntoIterator<Item = &'a ObjectKey>) -> Vec<String> {
    pods.into_iter().map(|k| k.name.clone()).collect()
}

fn outcomes(c: &Collected) -> BTreeMap<String, BindOutcome> {
    c.finished
        .iter()
        .map(|f| (f.request.pod.name.clone(), f.outcome.clone()))
        .collect()
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn binds_start_in_the_order_queued_and_no_more_than_the_workers_run_at_once() {
    let (mut pool, mut starts) = pool(2);
    let queued = ["a", "b", "c", "d", "e"].map(|p| req(p, "g", 0, 1));
    assert_eq!(pool.submit(queued), 5);
    let mut running: Vec<Started> = Vec::new();
    let mut order = Vec::new();
    settle().await;
    for step in 0.. {
        let now = started(&mut starts);
        order.extend(now.iter().map(|(p, _)| p.name.clone()));
        running.extend(now);
        assert!(running.len() <= 2, "step {step}: {} running", running.len());
        if running.is_empty() {
            break;
        }
        // The last started ends first: the next in the queue starts, not an older one.
        let (_, answer) = running.pop().expect("one running");
        let _ = answer.send(BindOutcome::Bound);
        settle().await;
    }
    assert_eq!(order, ["a", "b", "c", "d", "e"]);
    let ended = pool.collect();
    assert_eq!(ended.finished.len(), 5);
    assert!(pool.in_flight().is_empty());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn collect_takes_the_binds_that_ended_without_waiting_and_frees_their_pods() {
    let (mut pool, mut starts) = pool(4);
    pool.submit([
        req("a", "g", 0, 1),
        req("b", "g", 0, 1),
        req("c", "h", 1, 1),
    ]);
    settle().await;
    let mut running = started(&mut starts);
    assert_eq!(names(running.iter().map(|(p, _)| p)), ["a", "b", "c"]);
    assert!(pool.collect().finished.is_empty(), "nothing ended yet");
    assert_eq!(pool.in_flight().len(), 3);
    let (_, c) = running.pop().expect("c");
    let (_, b) = running.pop().expect("b");
    let (_, a) = running.pop().expect("a");
    let _ = a.send(BindOutcome::Bound);
    let gone = ClusterError::NotFound {
        kind: "pod",
        key: "ns/b".into(),
    };
    let _ = b.send(BindOutcome::Failed(gone.clone()));
    settle().await;
    let ended = pool.collect();
    assert_eq!(
        outcomes(&ended),
        BTreeMap::from([
            ("a".into(), BindOutcome::Bound),
            ("b".into(), BindOutcome::Failed(gone)),
        ])
    );
    assert_eq!(names(ended.gangs_done.iter().map(|(g, _)| g)), ["g"]);
    assert_eq!(names(pool.in_flight().keys()), ["c"]);
    // A pod in flight is not queued twice; once collected it may be queued again.
    assert_eq!(pool.submit([req("c", "h", 1, 1)]), 0);
    let _ = c.send(BindOutcome::Bound);
    settle().await;
    let ended = pool.collect();
    assert_eq!(names(ended.gangs_done.iter().map(|(g, _)| g)), ["h"]);
    assert!(pool.in_flight().is_empty());
    assert_eq!(pool.submit([req("c", "h", 1, 1)]), 1);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_lost_shards_binds_not_started_are_dropped_and_never_sent() {
    let (mut pool, mut starts) = pool(1);
    pool.submit([
        req("a", "g", 0, 1),
        req("b", "g", 0, 1),
        req("c", "h", 1, 1),
        req("d", "g", 0, 1),
    ]);
    settle().await;
    let mut sent = started(&mut starts);
    assert_eq!(names(sent.iter().map(|(p, _)| p)), ["a"]);
    // Shard 0 is taken by another replica (its epoch moves on): a bind already sent ends as
    // it ends; the others of shard 0 are never sent.
    pool.set_owned(&BTreeMap::from([(0, 2), (1, 1)]));
    let (_, a) = sent.pop().expect("a");
    let _ = a.send(BindOutcome::Bound);
    settle().await;
    let mut sent = started(&mut starts);
    assert_eq!(names(sent.iter().map(|(p, _)| p)), ["c"]);
    let (_, c) = sent.pop().expect("c");
    let _ = c.send(BindOutcome::Bound);
    settle().await;
    assert!(started(&mut starts).is_empty(), "b and d were sent");
    let ended = pool.collect();
    assert_eq!(
        outcomes(&ended),
        BTreeMap::from([
            ("a".into(), BindOutcome::Bound),
            ("b".into(), BindOutcome::NotStarted),
            ("c".into(), BindOutcome::Bound),
            ("d".into(), BindOutcome::NotStarted),
        ])
    );
    assert!(pool.in_flight().is_empty());
    // Queued at the old epoch after the loss: not sent either.
    pool.submit([req("e", "k", 0, 1)]);
    settle().await;
    assert!(started(&mut starts).is_empty());
    assert_eq!(
        outcomes(&pool.collect()),
        BTreeMap::from([("e".into(), BindOutcome::NotStarted)])
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn draining_sends_nothing_more_and_waits_a_bounded_time_for_the_binds_sent() {
    let (mut pool, mut starts) = pool(1);
    pool.submit([req("a", "g", 0, 1), req("b", "g", 0, 1)]);
    settle().await;
    let (_, a) = started(&mut starts).pop().expect("a started");
    let (ended, ()) = tokio::join!(pool.drain_async(Duration::from_secs(5)), async {
        let _ = a.send(BindOutcome::Bound);
    });
    assert_eq!(
        outcomes(&ended),
        BTreeMap::from([
            ("a".into(), BindOutcome::Bound),
            ("b".into(), BindOutcome::NotStarted),
        ])
    );
    assert!(started(&mut starts).is_empty(), "b was sent while draining");
    assert!(pool.in_flight().is_empty());
    assert_eq!(
        pool.submit([req("c", "h", 0, 1)]),
        0,
        "a drained pool takes nothing"
    );

    // A bind that never answers: the drain gives up after the grace, leaving it in flight
    // (its placement stays committed for the shard's next owner).
    let (mut pool, mut starts) = self::pool(1);
    pool.submit([req("x", "g", 0, 1)]);
    settle().await;
    let _held = started(&mut starts);
    let begun = tokio::time::Instant::now();
    let ended = pool.drain_async(Duration::from_secs(5)).await;
    assert_eq!(begun.elapsed(), Duration::from_secs(5));
    assert!(ended.finished.is_empty());
    assert_eq!(names(pool.in_flight().keys()), ["x"]);
}

/// The gang `g` of two one-GPU pods, committed on `n1` at the single shard's first epoch.
fn committed_gang(ledger: &mut LocalLedger) {
    let node = Node::new("n1", Resources::from_pairs([(GPU, 3)]));
    ledger.load(&[&node], &[]).expect("node registered");
    let gang = GangPlacement {
        gang: ObjectKey::new("default", "g"),
        placements: ["g-0", "g-1"]
            .map(|p| Placement {
                pod: ObjectKey::new("default", p),
                node: "n1".into(),
                resources: Resources::from_pairs([(GPU, 1)]),
            })
            .to_vec(),
    };
    assert_eq!(
        ledger.commit(&[gang]).expect("committed"),
        vec![Verdict::Accepted]
    );
}

/// A bind in flight (queued or running, not yet recorded) is the one bind of its pod:
/// the next cycle, which plans while it runs, sees the pod bound to its node (so it does
/// not place it again, nor give its share of the node to another gang), and reconcile
/// neither binds it again nor marks or releases its placement.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_pod_with_a_bind_in_flight_is_not_planned_again_nor_bound_again_by_reconcile() {
    let mut ledger = LocalLedger::new();
    committed_gang(&mut ledger);
    let owned = BTreeMap::from([(SINGLE_SHARD, FIRST_EPOCH)]);
    // The watch cache still shows g's pods pending; h (2 GPUs) fits n1 only if g's two
    // GPUs are counted as free.
    let cluster = || {
        TestCluster::new()
            .node("n1", &[(GPU, 3)])
            .inqueue_group("g", "default", 2)
            .pod("g-0", Some("g"), &[(GPU, 1)])
            .pod("g-1", Some("g"), &[(GPU, 1)])
            .inqueue_group("h", "default", 1)
            .pod("h-0", Some("h"), &[(GPU, 2)])
            .build()
    };
    let fence = Fence {
        shard: SINGLE_SHARD,
        epoch: FIRST_EPOCH,
    };
    let (mut pool, mut starts) = pool(1);
    pool.set_owned(&owned);
    let binds = ["g-0", "g-1"].map(|p| BindRequest {
        fence,
        gang: ObjectKey::new("default", "g"),
        pod: ObjectKey::new("default", p),
        node: "n1".into(),
    });
    assert_eq!(pool.submit(binds.clone()), 2);
    settle().await;
    let _running = started(&mut starts);
    let conf = SchedulerConf::volcano_default();
    let placed = |snapshot: &ClusterSnapshot| -> Vec<String> {
        let (plan, _) = run_cycle(snapshot, &conf, DEFAULT_SCHEDULER_NAME);
        let mut pods: Vec<String> = plan
            .gangs
            .iter()
            .flat_map(|g| g.placements.iter().map(|p| p.pod.name.clone()))
            .collect();
        pods.sort();
        pods
    };
    let never_gone = |_: &ObjectKey| false;

    // Without the pool's view (what serve did before the pool): both would go wrong.
    let bare = cluster();
    assert_eq!(placed(&bare), ["g-0", "g-1"], "the control plans g again");
    let mut control = LocalLedger::new();
    committed_gang(&mut control);
    let again = reconcile(
        &mut control,
        &never_gone,
        &bare,
        DEFAULT_SCHEDULER_NAME,
        &owned,
        &HashMap::new(),
    )
    .expect("reconciles");
    assert_eq!(names(again.to_bind.iter().map(|b| &b.pod)), ["g-0", "g-1"]);

    // With it: g is bound in the snapshot, h does not fit beside it.
    let mut snapshot = cluster();
    pool.assume(&mut snapshot);
    assert!(
        placed(&snapshot).is_empty(),
        "planned while binds are in flight: {:?}",
        placed(&snapshot)
    );
    let before = ledger.read_state().expect("state").placements.clone();
    let reconciled = reconcile(
        &mut ledger,
        &never_gone,
        &snapshot,
        DEFAULT_SCHEDULER_NAME,
        &owned,
        pool.in_flight(),
    )
    .expect("reconciles");
    assert!(reconciled.to_bind.is_empty(), "{:?}", reconciled.to_bind);
    assert_eq!((reconciled.released, reconciled.accounted), (0, 0));
    assert_eq!(
        ledger.read_state().expect("state").placements,
        before,
        "reconcile wrote a placement with a bind in flight"
    );
    // And the pool itself refuses a second bind of a pod in flight.
    assert_eq!(pool.submit(binds), 0);
}
