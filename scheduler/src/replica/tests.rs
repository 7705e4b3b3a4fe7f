//! The engine driven with inputs, its outputs asserted: two replicas in one test world
//! (no threads, no sockets), the ledger's real `apply`, messages between the replicas
//! delivered in order by the world.

use std::collections::{BTreeMap, VecDeque};

use phalanx_statestore::ledger::{
    Epoch, PlacementState, ReplicaId, ShardId, TxnDecision, TxnId, check_all,
};
use phalanx_statestore::{LedgerCommand, LedgerResponse, LedgerState, PodPlacement, ResourceVec};

use super::pump::{HeldBegins, PumpDriver, PumpStopped, Work, pump};
use super::routing::{RoutesBy, cycle_slice, marks_by_owner, start_txn};
use crate::cluster::ClusterSnapshot;
use crate::coord::service::CoordMessage;
use crate::coord::{
    CoordCommand, CoordConfig, CoordEvent, Coordinator, Participant, ParticipantCommand,
    ParticipantConfig, ParticipantEvent, TxnOutcome,
};
use crate::framework::testing::Cluster;
use crate::framework::{GangPlacement, Placement, SchedulerConf};
use crate::ledger::sharded::Fence;
use crate::model::{ObjectKey, Resources};
use crate::simulate::pool_pick::PoolView;

const GPU: &str = "nvidia.com/gpu";

/// Which ledger answers the world replaces with one of the wrong kind.
#[derive(Clone, Copy, PartialEq, Eq)]
enum WrongAnswer {
    None,
    /// A `TxnReserve` answered `Applied` (a reserve is answered with its gang's outcome).
    ToReserve,
}

#[derive(Default)]
struct Machines {
    coords: BTreeMap<ShardId, Coordinator>,
    parts: BTreeMap<ShardId, Participant>,
}

/// Replica 1 owns shard 0 (nodes a1, a2), replica 2 owns shard 1 (node b1); every node has
/// 4 GPUs, and gang `default/g` has two pending pods of 2 GPUs.
struct World {
    ledger: LedgerState,
    replicas: BTreeMap<ReplicaId, Machines>,
    snapshot: ClusterSnapshot,
    wrong: WrongAnswer,
    /// Every proposal, with its proposer, in order.
    proposals: Vec<(ReplicaId, LedgerCommand)>,
    /// Every ledger batch: its proposer and how many commands it carried.
    batches: Vec<(ReplicaId, usize)>,
    /// Every message between two replicas: (from, to, kind).
    sent: Vec<(ReplicaId, ReplicaId, &'static str)>,
    local: usize,
    binds: Vec<(ReplicaId, TxnId, Vec<PodPlacement>)>,
    reports: Vec<(ReplicaId, TxnOutcome, String)>,
}

impl World {
    fn new() -> Self {
        let mut w = Self {
            ledger: LedgerState::new(),
            replicas: BTreeMap::new(),
            snapshot: Cluster::new()
                .node("a1", &[(GPU, 4)])
                .node("a2", &[(GPU, 4)])
                .node("b1", &[(GPU, 4)])
                .inqueue_group("g", "default", 2)
                .pod("g-0", Some("g"), &[(GPU, 2)])
                .pod("g-1", Some("g"), &[(GPU, 2)])
                .build(),
            wrong: WrongAnswer::None,
            proposals: Vec::new(),
            batches: Vec::new(),
            sent: Vec::new(),
            local: 0,
            binds: Vec::new(),
            reports: Vec::new(),
        };
        for (node, shard) in [("a1", 0), ("a2", 0), ("b1", 1)] {
            w.apply(LedgerCommand::UpsertNode {
                node: node.into(),
                allocatable: ResourceVec::from_pairs([(GPU, 4)]),
                shard,
            });
        }
        for (shard, owner) in [(0, 1), (1, 2)] {
            w.apply(LedgerCommand::AssignShard {
                shard,
                owner,
                epoch: 1,
                proposer: None,
            });
            let m = w.replicas.entry(owner).or_default();
            m.coords
                .insert(shard, Coordinator::new(shard, 1, CoordConfig::default()));
            m.parts.insert(
                shard,
                Participant::new(shard, 1, ParticipantConfig::default()),
            );
        }
        w
    }

    fn apply(&mut self, cmd: LedgerCommand) -> LedgerResponse {
        let r = phalanx_statestore::apply(&mut self.ledger, &cmd);
        assert!(check_all(&self.ledger).is_empty(), "after {cmd:?}");
        r
    }

    /// Gang `default/g` planned with one pod on a1 (shard 0) and one on b1 (shard 1),
    /// started at replica 1's coordinator of its home shard 0.
    fn start_cross_shard_gang(&mut self) -> VecDeque<Work> {
        self.start_gang("g", &[("g-0", "a1"), ("g-1", "b1")], 1)
    }

    /// Gang `default/{name}` of 2-GPU pods planned on those nodes, started as transaction
    /// `seq` at replica 1's coordinator of shard 0.
    fn start_gang(&mut self, name: &str, pods: &[(&str, &str)], seq: u64) -> VecDeque<Work> {
        let gang = GangPlacement {
            gang: ObjectKey::new("default", name),
            placements: pods
                .iter()
                .map(|(pod, node)| Placement {
                    pod: ObjectKey::new("default", *pod),
                    node: (*node).into(),
                    resources: crate::framework::testing::res(&[(GPU, 2)]),
                })
                .collect(),
        };
        let start = start_txn((0, 1), seq, &gang, &self.ledger, 0, 10_000).expect("known nodes");
        VecDeque::from([Work::ToCoord {
            to: 1,
            shard: 0,
            epoch: 1,
            event: CoordEvent::Start(start),
        }])
    }

    fn proposed(&self) -> Vec<(ReplicaId, &'static str)> {
        self.proposals
            .iter()
            .map(|(by, c)| {
                let kind = match c {
                    LedgerCommand::TxnBegin { .. } => "TxnBegin",
                    LedgerCommand::TxnReserve { .. } => "TxnReserve",
                    LedgerCommand::TxnDecide {
                        decision: TxnDecision::Commit,
                        ..
                    } => "TxnDecide(commit)",
                    LedgerCommand::TxnDecide { .. } => "TxnDecide(abort)",
                    _ => "other",
                };
                (*by, kind)
            })
            .collect()
    }
}

impl PumpDriver for World {
    fn step_coordinator(
        &mut self,
        to: ReplicaId,
        shard: ShardId,
        epoch: Epoch,
        event: CoordEvent,
    ) -> Option<Vec<CoordCommand>> {
        let c = self.replicas.get_mut(&to)?.coords.get_mut(&shard)?;
        (c.epoch() == epoch).then(|| c.step(event))
    }

    fn step_participant(
        &mut self,
        to: ReplicaId,
        shard: ShardId,
        epoch: Epoch,
        event: ParticipantEvent,
    ) -> Option<Vec<ParticipantCommand>> {
        let p = self.replicas.get_mut(&to)?.parts.get_mut(&shard)?;
        (p.epoch() == epoch).then(|| p.step(event))
    }

    fn runs(&self, id: ReplicaId) -> bool {
        self.replicas.contains_key(&id)
    }

    fn propose_batch(
        &mut self,
        by: ReplicaId,
        cmds: Vec<LedgerCommand>,
    ) -> Option<Vec<LedgerResponse>> {
        self.batches.push((by, cmds.len()));
        let mut out = Vec::new();
        for cmd in cmds {
            self.proposals.push((by, cmd.clone()));
            if self.wrong == WrongAnswer::ToReserve
                && matches!(cmd, LedgerCommand::TxnReserve { .. })
            {
                out.push(LedgerResponse::Applied);
                continue;
            }
            out.push(self.apply(cmd));
        }
        Some(out)
    }

    fn owner(&self, shard: ShardId) -> Option<(ReplicaId, Epoch)> {
        self.ledger.shards.get(&shard).map(|o| (o.owner, o.epoch))
    }

    fn send(&mut self, from: ReplicaId, to: ReplicaId, m: CoordMessage, work: &mut VecDeque<Work>) {
        let kind = match &m {
            CoordMessage::Prepare { .. } => "Prepare",
            CoordMessage::Reply { .. } => "Reply",
            CoordMessage::Decide { .. } => "Decide",
        };
        self.sent.push((from, to, kind));
        work.push_back(Work::delivered(to, m.into_delivery()));
    }

    fn sent_locally(&mut self) {
        self.local += 1;
    }

    fn open_view(&mut self) -> Result<PoolView, String> {
        let pools = self
            .ledger
            .nodes
            .iter()
            .map(|(n, r)| (n.clone(), r.shard))
            .collect();
        Ok(PoolView::open(
            &self.snapshot,
            &SchedulerConf::volcano_default(),
            crate::model::DEFAULT_SCHEDULER_NAME,
            &pools,
            &self.ledger,
        ))
    }

    fn bind(&mut self, by: ReplicaId, txn: &TxnId, _gang: &str, pods: &[PodPlacement]) {
        self.binds.push((by, txn.clone(), pods.to_vec()));
    }

    fn report(&mut self, by: ReplicaId, _txn: TxnId, outcome: TxnOutcome, reason: String) {
        self.reports.push((by, outcome, reason));
    }
}

fn states(w: &World) -> Vec<(String, PlacementState)> {
    w.ledger
        .placements
        .iter()
        .map(|(k, p)| (k.clone(), p.state.clone()))
        .collect()
}

#[test]
fn a_cross_shard_gang_is_begun_prepared_reserved_committed_and_bound_through_the_pump() {
    let mut w = World::new();
    let work = w.start_cross_shard_gang();
    pump(&mut w, work, 1_000).expect("finishes");
    // Shard 0's participant is on the coordinator's replica, shard 1's on replica 2.
    let proposed = w.proposed();
    assert_eq!(proposed[0], (1, "TxnBegin"));
    assert!(proposed.contains(&(1, "TxnReserve")), "{proposed:?}");
    assert!(proposed.contains(&(2, "TxnReserve")), "{proposed:?}");
    // Shard 1 is asked last, so its owner logs the commit behind its reservation; the
    // coordinator's replica proposes no decision.
    assert_eq!(proposed.last(), Some(&(2, "TxnDecide(commit)")));
    assert!(
        !proposed.contains(&(1, "TxnDecide(commit)")),
        "{proposed:?}"
    );
    assert_eq!(
        w.sent,
        vec![(1, 2, "Prepare"), (2, 1, "Reply"), (1, 2, "Decide")]
    );
    assert!(w.local >= 2, "shard 0's prepare and reply stay in process");
    assert_eq!(w.binds.len(), 1, "{:?}", w.binds);
    let (by, _, pods) = &w.binds[0];
    let mut bound: Vec<(&str, &str)> = pods
        .iter()
        .map(|p| (p.pod.as_str(), p.node.as_str()))
        .collect();
    bound.sort();
    assert_eq!(*by, 1, "the coordinator's replica binds");
    assert_eq!(bound, vec![("default/g-0", "a1"), ("default/g-1", "b1")]);
    assert!(
        matches!(w.reports.as_slice(), [(1, TxnOutcome::Committed, _)]),
        "{:?}",
        w.reports
    );
    // Committed, not yet bound in the ledger: the driver's bind marks them.
    assert!(
        states(&w)
            .iter()
            .all(|(_, s)| *s == PlacementState::Assumed),
        "{:?}",
        states(&w)
    );
}

/// Nodes of `(name, GPUs)` and, for each name `g`, an inqueue gang `default/g` of two
/// pending pods `g-0`, `g-1` of 2 GPUs.
fn two_pod_gangs(nodes: &[(&str, i64)], gangs: &[&str]) -> ClusterSnapshot {
    let mut c = Cluster::new();
    for (name, gpus) in nodes {
        c = c.node(name, &[(GPU, *gpus)]);
    }
    for g in gangs {
        c = c.inqueue_group(g, "default", 2);
        for i in 0..2 {
            c = c.pod(&format!("{g}-{i}"), Some(g), &[(GPU, 2)]);
        }
    }
    c.build()
}

#[test]
fn the_proposals_of_transactions_in_the_same_phase_go_as_one_batch_per_replica() {
    let mut w = World::new();
    w.snapshot = two_pod_gangs(&[("a1", 4), ("a2", 4), ("b1", 4)], &["g", "h"]);
    let mut work = w.start_cross_shard_gang();
    work.extend(w.start_gang("h", &[("h-0", "a2"), ("h-1", "b1")], 2));
    pump(&mut w, work, 1_000).expect("finishes");
    assert_eq!(w.binds.len(), 2, "both committed: {:?}", w.reports);
    // Two begins (replica 1), then each replica's two reserves, replica 2's with the
    // commits behind them (its shard is asked last): one ledger entry each, where each
    // of the eight commands was one before, and no entry for the decisions.
    assert_eq!(w.batches, vec![(1, 2), (1, 2), (2, 4)]);
    assert_eq!(w.proposals.len(), 8);
    assert!(
        states(&w)
            .iter()
            .all(|(_, s)| *s == PlacementState::Assumed),
        "{:?}",
        states(&w)
    );
}

#[test]
fn the_begins_of_a_round_ride_in_the_proposal_of_its_own_gangs_and_the_pump_goes_on_from_their_answers()
 {
    let mut w = World::new();
    w.snapshot = two_pod_gangs(&[("a1", 4), ("a2", 4), ("b1", 4)], &["g", "h"]);
    let mut starts = w.start_cross_shard_gang();
    starts.extend(w.start_gang("h", &[("h-0", "a2"), ("h-1", "b1")], 2));
    let mut work = VecDeque::new();
    let mut begins = HeldBegins::take(&mut w, 1, starts, &mut work);
    assert!(work.is_empty(), "a start asks only for its begin: {work:?}");
    let riders = begins.commands();
    assert_eq!(riders.len(), 2);
    assert!(
        riders
            .iter()
            .all(|c| matches!(c, LedgerCommand::TxnBegin { .. }))
    );
    // The round's own command first (marking nothing bound stands in for its gangs), then
    // the begins, in one batch.
    let mut batch = vec![LedgerCommand::MarkBound {
        shard: 0,
        epoch: 1,
        pods: Vec::new(),
    }];
    batch.extend(riders);
    let answers = w.propose_batch(1, batch).expect("answered");
    begins.answered(Some(&answers[1..]), &mut work);
    assert_eq!(work.len(), 2, "one answer per begin: {work:?}");
    pump(&mut w, work, 1_000).expect("finishes");
    assert_eq!(w.binds.len(), 2, "both committed: {:?}", w.reports);
    // The pump proposed no begin of its own: reserves, the last with the commits behind.
    assert_eq!(w.batches, vec![(1, 3), (1, 2), (2, 4)]);
}

#[test]
fn begins_whose_answer_is_unknown_are_proposed_again_on_a_tick() {
    let mut w = World::new();
    let starts = w.start_cross_shard_gang();
    let mut work = VecDeque::new();
    let mut begins = HeldBegins::take(&mut w, 1, starts, &mut work);
    assert_eq!(begins.commands().len(), 1);
    begins.answered(None, &mut work);
    assert!(work.is_empty(), "nothing is answered: {work:?}");
    let tick = Work::ToCoord {
        to: 1,
        shard: 0,
        epoch: 1,
        event: CoordEvent::Tick { now_ms: 1_000 },
    };
    pump(&mut w, VecDeque::from([tick]), 1_000).expect("finishes");
    assert_eq!(w.proposed().first(), Some(&(1, "TxnBegin")));
    assert_eq!(w.binds.len(), 1, "then it commits: {:?}", w.reports);
}

#[test]
fn a_reserve_answered_with_the_wrong_kind_of_response_is_a_refusal_and_the_gang_aborts() {
    let mut w = World::new();
    w.wrong = WrongAnswer::ToReserve;
    let work = w.start_cross_shard_gang();
    pump(&mut w, work, 1_000).expect("finishes");
    assert!(w.binds.is_empty(), "nothing bound: {:?}", w.binds);
    assert!(
        w.proposed().contains(&(1, "TxnDecide(abort)")),
        "{:?}",
        w.proposed()
    );
    match w.reports.as_slice() {
        [(1, TxnOutcome::Aborted, reason)] => {
            assert!(reason.contains("TxnReserve"), "names the command: {reason}")
        }
        other => panic!("expected one abort, got {other:?}"),
    }
    assert!(w.ledger.placements.is_empty(), "{:?}", states(&w));
}

#[test]
fn the_commands_of_a_replica_that_stopped_are_dropped() {
    let mut w = World::new();
    w.replicas.remove(&2);
    let work = w.start_cross_shard_gang();
    pump(&mut w, work, 1_000).expect("finishes");
    assert!(w.proposed().iter().all(|(by, _)| *by == 1));
    assert_eq!(w.sent, vec![(1, 2, "Prepare")], "sent, never answered");
    assert!(w.binds.is_empty() && w.reports.is_empty());
}

#[test]
fn a_pump_past_its_bound_stops_and_says_how_much_is_left() {
    let mut w = World::new();
    let work = w.start_cross_shard_gang();
    let stopped = pump(&mut w, work, 3).expect_err("three steps are too few");
    assert_eq!(stopped.steps, 3);
    assert!(stopped.left >= 1, "{stopped:?}");
    assert_eq!(
        PumpStopped { steps: 3, left: 2 }.to_string(),
        "the 2PC pump stopped after 3 steps (2 left)"
    );
}

#[test]
fn a_gang_on_a_node_of_no_known_pool_is_not_started_and_the_node_is_named() {
    let gang = GangPlacement {
        gang: ObjectKey::new("default", "g"),
        placements: vec![Placement {
            pod: ObjectKey::new("default", "g-0"),
            node: "zz".into(),
            resources: Resources::default(),
        }],
    };
    assert_eq!(
        start_txn((0, 1), 1, &gang, &RoutesBy(|_: &str| None, |_| None), 0, 10).map(|s| s.txn),
        Err("zz".to_string())
    );
}

#[test]
fn bound_pods_are_marked_by_their_shards_owner_at_its_epoch_and_ownerless_ones_left_over() {
    let pod = |n: &str| ObjectKey::new("ns", n);
    let owners: BTreeMap<ShardId, (ReplicaId, Epoch)> = BTreeMap::from([(0, (1, 4)), (2, (3, 7))]);
    let marks = marks_by_owner(
        [(2, pod("c")), (0, pod("a")), (1, pod("x")), (0, pod("b"))],
        |s| owners.get(&s).copied(),
    );
    let got: Vec<(Fence, ReplicaId, Vec<ObjectKey>)> = marks
        .by_fence
        .into_iter()
        .map(|(f, (o, p))| (f, o, p))
        .collect();
    assert_eq!(
        got,
        vec![
            (Fence { shard: 0, epoch: 4 }, 1, vec![pod("a"), pod("b")]),
            (Fence { shard: 2, epoch: 7 }, 3, vec![pod("c")]),
        ]
    );
    assert_eq!(marks.unmarked.into_iter().collect::<Vec<_>>(), vec![1]);
}

fn gang_of(name: &str, pods: usize) -> GangPlacement {
    GangPlacement {
        gang: ObjectKey::new("ns", name),
        placements: (0..pods)
            .map(|i| Placement {
                pod: ObjectKey::new("ns", format!("{name}-{i}")),
                node: "n".into(),
                resources: Resources::default(),
            })
            .collect(),
    }
}

fn names(gangs: &[GangPlacement]) -> Vec<&str> {
    gangs.iter().map(|g| g.gang.name.as_str()).collect()
}

#[test]
fn a_cycle_takes_whole_gangs_in_plan_order_up_to_its_pod_bound() {
    let plan = [
        gang_of("a", 4),
        gang_of("b", 4),
        gang_of("c", 1),
        gang_of("d", 8),
    ];
    assert_eq!(names(cycle_slice(&plan, 9)), ["a", "b", "c"]);
    assert_eq!(names(cycle_slice(&plan, 8)), ["a", "b"]);
    // A later small gang does not jump the queue past one that did not fit.
    assert_eq!(names(cycle_slice(&plan, 7)), ["a"]);
    assert_eq!(names(cycle_slice(&plan, 0)), ["a", "b", "c", "d"]);
    assert_eq!(names(cycle_slice(&plan, 1000)), ["a", "b", "c", "d"]);
}

#[test]
fn a_gang_larger_than_the_bound_is_still_taken_alone_so_it_is_never_starved() {
    let plan = [gang_of("big", 64), gang_of("small", 1)];
    assert_eq!(names(cycle_slice(&plan, 16)), ["big"]);
    assert!(cycle_slice(&[], 16).is_empty());
}

#[test]
fn a_refusal_answered_between_reserves_does_not_split_them_into_more_batches() {
    let mut w = World::new();
    // a1 and a2 have room for one 2-GPU pod each: g's and h's picks take them, so k's pick
    // in shard 0 fails and k's coordinator decides to abort between g's and h's reserves.
    w.snapshot = two_pod_gangs(&[("a1", 2), ("a2", 2), ("b1", 4)], &["g", "h", "k"]);
    let mut work = w.start_cross_shard_gang();
    work.extend(w.start_gang("h", &[("h-0", "a2"), ("h-1", "b1")], 2));
    work.extend(w.start_gang("k", &[("k-0", "a2"), ("k-1", "b1")], 3));
    pump(&mut w, work, 1_000).expect("finishes");
    assert_eq!(w.binds.len(), 2, "g and h committed: {:?}", w.reports);
    let aborted: Vec<_> = w
        .reports
        .iter()
        .filter(|(_, o, _)| *o == TxnOutcome::Aborted)
        .collect();
    assert_eq!(aborted.len(), 1, "k aborted: {:?}", w.reports);
    // Shards are prepared in ascending order, so the phases are: the begins; shard 0's
    // reserves, with k's abort; shard 1's reserves (replica 2), each with its commit
    // behind it. One batch each per replica, however the refusal interleaved with the
    // reserves in the queue.
    assert_eq!(w.batches, vec![(1, 3), (1, 3), (2, 4)]);
    assert_eq!(w.proposals.len(), 10);
}
