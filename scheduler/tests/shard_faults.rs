//! Faults of shard owners through the wired runtime (`simulate::sharded` inside the
//! driver): a coordinator killed before or after its decision, a participant killed on its
//! prepare, two cross-shard gangs competing for the same GPUs, an owner paused past its
//! lease. The driver checks I1–I3, commit-then-bind, the ledger's checks and "no leaked
//! reservation" after every cycle, and I4 on every fenced write; each test then checks the
//! ledger at the end. Simulated time, fixed seeds: every run is the same.

use std::collections::BTreeSet;

use phalanx_scheduler::cluster::sim::SimCluster;
use phalanx_scheduler::framework::{CyclePlan, GangPlacement, Placement, SchedulerConf};
use phalanx_scheduler::invariants::{
    check_gang_atomicity, check_no_double_booking, check_no_leaked_reservation,
    check_no_lost_placement,
};
use phalanx_scheduler::ledger::{LocalLedger, PlacementLedger, RaftLedger, ScheduledFault};
use phalanx_scheduler::model::{
    GROUP_NAME_ANNOTATION, Node, ObjectKey, Pod, PodGroup, PodGroupPhase, Queue, Resources,
};
use phalanx_scheduler::shard::{ShardMap, ShardingConfig};
use phalanx_scheduler::simulate::driver::{DriverOptions, RunOutcome, drive_with};
use phalanx_scheduler::simulate::sharded::{ShardOptions, ShardRuntime, TxnFault};
use phalanx_statestore::ledger::{PlacementState, check_all};

fn gpus(n: i64) -> Resources {
    Resources::from_pairs([("nvidia.com/gpu", n)])
}

fn map(shards: u32) -> ShardMap {
    ShardMap::new(ShardingConfig {
        shards,
        ..ShardingConfig::default()
    })
    .expect("valid")
}

/// One node of `gpus_each` GPUs in each shard (names found by scanning `node-N`).
fn one_node_per_shard(shards: u32, gpus_each: i64) -> Vec<Node> {
    let m = map(shards);
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for i in 0.. {
        let node = Node::new(format!("node-{i}"), gpus(gpus_each));
        if seen.insert(m.shard_of(&node)) {
            out.push(node);
        }
        if seen.len() == shards as usize {
            break;
        }
    }
    out
}

/// A gang `name` of `size` one-GPU pods in `queue`, Inqueue, running `duration_ms`.
fn gang(
    name: &str,
    queue: &str,
    size: u32,
    duration_ms: Option<u64>,
    index: &mut u64,
) -> (PodGroup, Vec<Pod>) {
    let mut group = PodGroup::new(ObjectKey::new("default", name), size);
    group.queue = queue.to_string();
    group.status.phase = PodGroupPhase::Inqueue;
    *index += 1;
    group.creation_index = *index;
    let pods = (0..size)
        .map(|i| {
            let mut p = Pod::new(ObjectKey::new("default", format!("{name}-{i}")), gpus(1));
            p.group = Some(name.to_string());
            p.annotations
                .insert(GROUP_NAME_ANNOTATION.into(), name.to_string());
            p.sim_duration_ms = duration_ms;
            *index += 1;
            p.creation_index = *index;
            p
        })
        .collect();
    (group, pods)
}

fn cluster(nodes: Vec<Node>, gangs: Vec<(PodGroup, Vec<Pod>)>, queues: &[&str]) -> SimCluster {
    let (groups, pods): (Vec<_>, Vec<_>) = gangs.into_iter().unzip();
    SimCluster::new(
        nodes,
        pods.into_iter().flatten().collect(),
        groups,
        queues.iter().map(|q| Queue::new(*q)).collect(),
        Vec::new(),
    )
}

fn options(shards: u32, replicas: u64, fault: Option<TxnFault>) -> ShardOptions {
    ShardOptions {
        txn_fault: fault,
        ..ShardOptions::new(
            ShardingConfig {
                shards,
                ..ShardingConfig::default()
            },
            replicas,
        )
    }
}

fn run(
    sim: &mut SimCluster,
    ledger: &mut dyn PlacementLedger,
    sharding: ShardOptions,
    faults: &[&str],
) -> RunOutcome {
    let opts = DriverOptions {
        faults: faults
            .iter()
            .map(|f| ScheduledFault::parse(f).expect("valid fault"))
            .collect(),
        sharding: Some(sharding),
        max_cycles: 200,
        ..DriverOptions::default()
    };
    drive_with(
        sim,
        &SchedulerConf::volcano_default(),
        &opts,
        ledger,
        |_| {},
    )
}

/// No violation during the run, the run settled, and the ledger ends clean: its checks
/// hold, no reservation and no open transaction is left, every placement is bound.
fn assert_clean(outcome: &RunOutcome, ledger: &mut dyn PlacementLedger) {
    let report = outcome.shards.as_ref().expect("a sharded run");
    let text = report.render();
    assert!(
        outcome.violations.is_empty(),
        "{:?}\n{text}",
        outcome.violations
    );
    assert!(outcome.quiescent, "did not settle\n{text}");
    assert_eq!(report.checks_failed, 0, "{text}");
    assert!(report.checks > 0, "{text}");
    let state = ledger.state().expect("readable");
    assert!(check_all(&state).is_empty(), "{:?}", check_all(&state));
    assert!(check_no_leaked_reservation(&state).is_empty());
    assert_eq!(state.open_txn_count(), 0, "{text}");
    assert!(
        state
            .placements
            .values()
            .all(|p| p.state == PlacementState::Bound),
        "{:?}",
        state.placements
    );
}

fn all_bound(sim: &SimCluster) -> bool {
    sim.pods().all(|p| p.node_name.is_some())
}

/// The shard moves away from `replica` after it died, at an epoch above 1.
fn moved_away_from(outcome: &RunOutcome, replica: u64) -> bool {
    let report = outcome.shards.as_ref().expect("a sharded run");
    report
        .moves
        .iter()
        .any(|m| m.from == Some(replica) && m.to != replica && m.epoch > 1)
}

/// The owner of the default queue's shard at the start (assignment is deterministic).
fn home_owner(shards: u32, replicas: u64) -> u64 {
    let mut rt = ShardRuntime::new(options(shards, replicas, None)).expect("valid");
    let mut sim = cluster(one_node_per_shard(shards, 1), Vec::new(), &["default"]);
    rt.load(&sim, &mut LocalLedger::new()).expect("loads");
    let home = rt.map().shard_of_queue("default");
    let _ = &mut sim;
    rt.owners()[&home].0
}

#[test]
fn a_coordinator_killed_after_every_reservation_is_aborted_by_the_next_owner_then_placed() {
    // Real Raft with three replicas: the coordinator's whole replica (scheduler and ledger
    // member) goes down.
    let mut index = 0;
    let mut sim = cluster(
        one_node_per_shard(3, 1),
        vec![gang("wide", "default", 3, None, &mut index)],
        &["default"],
    );
    let mut ledger = RaftLedger::start(3).expect("raft starts");
    let coordinator = home_owner(3, 3);
    let outcome = run(
        &mut sim,
        &mut ledger,
        options(3, 3, Some(TxnFault::CoordinatorAfterReservations)),
        &[],
    );
    let report = outcome.shards.clone().expect("sharded");
    let text = report.render();
    assert!(all_bound(&sim), "{text}");
    assert!(moved_away_from(&outcome, coordinator), "{text}");
    assert!(
        report.txns_aborted + report.txns_expired >= 1,
        "the first transaction must end aborted:\n{text}\n{:?}",
        report.txn_log
    );
    assert!(report.txns_committed >= 1, "{text}");
    assert_clean(&outcome, &mut ledger);
}

#[test]
fn a_coordinator_killed_after_the_commit_is_logged_has_its_gang_bound_by_others() {
    let mut index = 0;
    let mut sim = cluster(
        one_node_per_shard(3, 1),
        vec![gang("wide", "default", 3, None, &mut index)],
        &["default"],
    );
    let mut ledger = LocalLedger::new();
    let coordinator = home_owner(3, 3);
    let outcome = run(
        &mut sim,
        &mut ledger,
        options(3, 3, Some(TxnFault::CoordinatorAfterCommit)),
        &[],
    );
    let report = outcome.shards.clone().expect("sharded");
    let text = report.render();
    assert!(all_bound(&sim), "{text}");
    assert!(moved_away_from(&outcome, coordinator), "{text}");
    assert_eq!(
        report.txns_started, 1,
        "committed once, never retried:\n{text}"
    );
    assert_eq!(report.txns_aborted, 0, "{text}");
    assert_clean(&outcome, &mut ledger);
}

/// Regression: the binds the new owner made while recovering a committed transaction at
/// the start of a round went to an output that was thrown away: the cycle statistics
/// counted 0 of the gang's 3 pods and the lost-placement check never saw them.
#[test]
fn pods_bound_by_a_recovery_at_the_start_of_a_round_are_counted_and_checked() {
    let mut index = 0;
    let mut sim = cluster(
        one_node_per_shard(3, 1),
        vec![gang("wide", "default", 3, None, &mut index)],
        &["default"],
    );
    let mut ledger = LocalLedger::new();
    let outcome = run(
        &mut sim,
        &mut ledger,
        options(3, 3, Some(TxnFault::CoordinatorAfterCommit)),
        &[],
    );
    let text = outcome.shards.as_ref().expect("sharded").render();
    assert!(all_bound(&sim), "{text}");
    assert_eq!(outcome.total_binds(), 3, "every bind counted:\n{text}");
    assert_clean(&outcome, &mut ledger);
}

#[test]
fn a_participant_killed_on_its_prepare_delays_the_gang_but_nothing_leaks() {
    let mut index = 0;
    let mut sim = cluster(
        one_node_per_shard(3, 1),
        vec![gang("wide", "default", 3, None, &mut index)],
        &["default"],
    );
    let mut ledger = LocalLedger::new();
    let outcome = run(
        &mut sim,
        &mut ledger,
        options(3, 3, Some(TxnFault::ParticipantOnPrepare)),
        &[],
    );
    let report = outcome.shards.clone().expect("sharded");
    let text = report.render();
    assert!(all_bound(&sim), "{text}\n{:?}", report.txn_log);
    assert!(
        report.replica_events.iter().any(|e| e.contains("prepare")),
        "{text}"
    );
    // The coordinator's resends reach the dead participant's closed port until its shard
    // moves: refused at connect, and lost.
    assert!(report.coord_messages_refused > 0, "{text}");
    assert!(report.moves.iter().any(|m| m.from.is_some()), "{text}");
    assert_clean(&outcome, &mut ledger);
}

/// Two queues whose home shards are owned by different replicas.
fn two_queues_on_two_replicas(rt: &ShardRuntime) -> (String, String) {
    let owner = |q: &str| rt.owners()[&rt.map().shard_of_queue(q)].0;
    let names: Vec<String> = (0..200).map(|i| format!("q{i}")).collect();
    let a = names[0].clone();
    let b = names
        .iter()
        .find(|q| owner(q) != owner(&a))
        .expect("some queue lands on another replica")
        .clone();
    (a, b)
}

/// One round of a runtime with two replicas whose plans (made concurrently on the same
/// snapshot) hold every gang of `gangs`, each wanting a one-GPU pod on each of `nodes`;
/// each replica commits the gangs of its shards. What was performed, and the round's
/// errors.
fn one_round_of_both(
    rt: &mut ShardRuntime,
    sim: &mut SimCluster,
    ledger: &mut LocalLedger,
    nodes: &[Node],
    gangs: &[&str],
) -> (CyclePlan, Vec<String>) {
    let wants = |g: &str| GangPlacement {
        gang: ObjectKey::new("default", g),
        placements: nodes
            .iter()
            .enumerate()
            .map(|(i, n)| Placement {
                pod: ObjectKey::new("default", format!("{g}-{i}")),
                node: n.name.clone(),
                resources: gpus(1),
            })
            .collect(),
    };
    let plan = CyclePlan {
        gangs: gangs.iter().map(|g| wants(g)).collect(),
        ..CyclePlan::default()
    };
    let mut errors = Vec::new();
    rt.begin_round(sim, ledger, &mut errors);
    let mut outcome = RunOutcome::default();
    let plans: std::collections::BTreeMap<u64, CyclePlan> =
        [(1, plan.clone()), (2, plan)].into_iter().collect();
    let performed = rt.perform(sim, ledger, &plans, 1, &mut outcome);
    (performed, errors)
}

#[test]
fn two_cross_shard_gangs_wanting_the_same_gpus_end_with_exactly_one_placed_and_no_leak() {
    // Plans made concurrently by two replicas on the same snapshot: each gang wants the one
    // GPU of node A and the one GPU of node B, in different shards.
    let nodes = one_node_per_shard(2, 1);
    let mut rt = ShardRuntime::new(options(2, 2, None)).expect("valid");
    let probe = cluster(nodes.clone(), Vec::new(), &["default"]);
    rt.load(&probe, &mut LocalLedger::new()).expect("loads");
    let (qa, qb) = two_queues_on_two_replicas(&rt);
    let mut index = 0;
    let mut sim = cluster(
        nodes.clone(),
        vec![
            gang("ga", &qa, 2, None, &mut index),
            gang("gb", &qb, 2, None, &mut index),
        ],
        &[&qa, &qb],
    );
    let mut rt = ShardRuntime::new(options(2, 2, None)).expect("valid");
    let mut ledger = LocalLedger::new();
    rt.load(&sim, &mut ledger).expect("loads");
    let (performed, errors) =
        one_round_of_both(&mut rt, &mut sim, &mut ledger, &nodes, &["ga", "gb"]);
    let text = rt.report.render();
    assert_eq!(performed.gangs.len(), 1, "{text}\n{:?}", rt.report.txn_log);
    assert_eq!(rt.report.txns_started, 2, "{text}");
    assert_eq!(rt.report.txns_committed, 1, "{text}");
    assert_eq!(rt.report.txns_aborted, 1, "{text}");
    // Each transaction has a participant on the other replica: its prepare and the answer
    // went over gRPC, none was refused.
    assert!(rt.report.coord_messages_grpc >= 4, "{text}");
    assert_eq!(rt.report.coord_messages_refused, 0, "{text}");
    let winner = &performed.gangs[0].gang.name;
    for pod in sim.pods() {
        assert_eq!(
            pod.node_name.is_some(),
            pod.group.as_deref() == Some(winner.as_str()),
            "{}",
            pod.key
        );
    }
    let state = ledger.state().expect("readable");
    assert!(check_all(&state).is_empty());
    assert!(check_no_leaked_reservation(&state).is_empty());
    assert_eq!(state.open_txn_count(), 0, "no deadlock: both decided");
    assert_eq!(rt.report.checks_failed, 0);
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
fn the_messages_of_a_round_to_one_replica_go_in_one_grpc_request_per_phase() {
    // Four gangs of one queue, each with a pod on the coordinator's node and one on a
    // node of the other replica's shard: their prepares, replies and decisions between the
    // two replicas travel as one request each way per phase, not one per message.
    let nodes = one_node_per_shard(2, 4);
    let probe = cluster(nodes.clone(), Vec::new(), &["default"]);
    let mut rt = ShardRuntime::new(options(2, 2, None)).expect("valid");
    rt.load(&probe, &mut LocalLedger::new()).expect("loads");
    let (qa, _) = two_queues_on_two_replicas(&rt);
    let names = ["g1", "g2", "g3", "g4"];
    let mut index = 0;
    let gangs = names
        .iter()
        .map(|g| gang(g, &qa, 2, None, &mut index))
        .collect();
    let mut sim = cluster(nodes.clone(), gangs, &[&qa]);
    let mut rt = ShardRuntime::new(options(2, 2, None)).expect("valid");
    let mut ledger = LocalLedger::new();
    rt.load(&sim, &mut ledger).expect("loads");
    let (performed, errors) = one_round_of_both(&mut rt, &mut sim, &mut ledger, &nodes, &names);
    let text = rt.report.render();
    assert_eq!(performed.gangs.len(), 4, "{text}\n{:?}", rt.report.txn_log);
    assert_eq!(rt.report.txns_committed, 4, "{text}");
    assert_eq!(rt.report.coord_messages_refused, 0, "{text}");
    // At least a prepare, a reply and a decision per gang crossed between the replicas.
    assert!(rt.report.coord_messages_grpc >= 12, "{text}");
    assert!(
        rt.report.coord_batches_grpc * 4 <= rt.report.coord_messages_grpc,
        "each request carried the four gangs' messages of one phase: {text}"
    );
    assert!(all_bound(&sim), "{text}");
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
fn an_owner_paused_past_its_lease_loses_its_shard_and_its_late_writes_are_refused() {
    // One-GPU gangs that run 2 s each, one at a time on the home shard's only node: work
    // goes on through the pause, so the resumed owner has something to write.
    let shards = 2;
    let nodes: Vec<Node> = {
        let m = map(shards);
        let home = m.shard_of_queue("default");
        let node = (0..)
            .map(|i| Node::new(format!("node-{i}"), gpus(1)))
            .find(|n| m.shard_of(n) == home)
            .expect("a node in the home shard");
        vec![node]
    };
    let mut index = 0;
    let gangs: Vec<_> = (0..15)
        .map(|i| gang(&format!("g{i:02}"), "default", 1, Some(2_000), &mut index))
        .collect();
    let mut sim = cluster(nodes, gangs, &["default"]);
    let owner = home_owner(shards, 2);
    let mut ledger = LocalLedger::new();
    let pause = format!("pause:replica-{owner}@1500ms+10s");
    let outcome = run(&mut sim, &mut ledger, options(shards, 2, None), &[&pause]);
    let report = outcome.shards.clone().expect("sharded");
    let text = report.render();
    assert!(moved_away_from(&outcome, owner), "{text}");
    assert!(
        !report.stale_writes_refused.is_empty(),
        "the resumed owner's late write must be refused:\n{text}"
    );
    assert!(
        report
            .stale_writes_refused
            .iter()
            .all(|w| w.starts_with(&format!("replica {owner}:"))),
        "{text}"
    );
    // Everything still ran, one gang at a time, and finished.
    assert!(
        sim.pods().all(|p| p.node_name.is_some()),
        "{text}\n{:?}",
        outcome.pending
    );
    assert_clean(&outcome, &mut ledger);
}

/// Bug found wiring 2PC to the replicated ledger: the replicas' own expiry loop reads the
/// wall clock, on which every simulated deadline is long past, so it aborted and forgot
/// transactions mid-flight whenever it ticked (every 500 ms) and the coordinator's
/// decision then met "unknown transaction". In simulate the runtime's leader role expires
/// on simulated time; the wall-clock loop must leave open transactions alone. (The wait is
/// on the wall clock because the loop under test runs on it: two of its old intervals.)
#[test]
fn the_replicated_ledger_of_a_simulated_run_does_not_expire_transactions_on_the_wall_clock() {
    use phalanx_statestore::LedgerCommand;
    let mut ledger = RaftLedger::start(3).expect("raft starts");
    let node = Node::new("n1", gpus(1));
    let sim = cluster(vec![node], Vec::new(), &["default"]);
    let mut rt = ShardRuntime::new(options(1, 3, None)).expect("valid");
    rt.load(&sim, &mut ledger).expect("loads");
    let (owner, epoch) = rt.owners()[&0];
    let _ = owner;
    let begin = LedgerCommand::TxnBegin {
        txn: "0:1:1:default/g".into(),
        shard: 0,
        epoch,
        participants: vec![0],
        deadline_ms: 5_000,
    };
    let r = ledger.propose_raw(vec![begin]).expect("proposed");
    assert!(r[0].refusal().is_none(), "{r:?}");
    std::thread::sleep(std::time::Duration::from_millis(1_200));
    let state = ledger.state().expect("readable");
    assert_eq!(state.open_txn_count(), 1, "{:?}", state.txns);
}

/// `kill:leader` is the death of the leading process: its ledger replica and the scheduler
/// replica beside it. Before, only the ledger replica died and the scheduler replica kept
/// its shards, so a leader kill never moved a shard and the failover benchmark's leader
/// figure measured something no real failure does.
#[test]
fn a_leader_kill_stops_the_scheduler_replica_of_the_leader_too_and_its_shards_move() {
    let shards = 3;
    let mut index = 0;
    // Short one-GPU gangs in every queue keep every pool binding through the kill.
    let queues = ["q-a", "q-b", "q-c", "q-d"];
    let gangs: Vec<_> = (0..24)
        .map(|i| {
            gang(
                &format!("g{i:02}"),
                queues[i % queues.len()],
                1,
                Some(1_000),
                &mut index,
            )
        })
        .collect();
    let mut sim = cluster(one_node_per_shard(shards, 2), gangs, &queues);
    let mut ledger = RaftLedger::start(3).expect("raft starts");
    // Down for 5 s, past the 3 s lease: its shards must move.
    let outcome = run(
        &mut sim,
        &mut ledger,
        options(shards, 3, None),
        &["kill:leader@1500ms", "restart:last@6500ms"],
    );
    let report = outcome.shards.clone().expect("sharded");
    let text = report.render();
    let record = report
        .failovers
        .iter()
        .find(|f| f.fault.starts_with("kill:leader"))
        .expect("the leader kill is recorded");
    let killed: u64 = record
        .fault
        .strip_prefix("kill:leader (kill:replica-")
        .and_then(|rest| rest.strip_suffix(')'))
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("resolved to a replica: {:?}\n{text}", record.fault));
    assert!(
        report
            .replica_events
            .iter()
            .any(|e| e.contains(&format!("replica {killed} killed"))),
        "{text}"
    );
    assert!(
        report
            .replica_events
            .iter()
            .any(|e| e.contains(&format!("replica {killed} restarted"))),
        "restart:last brings back the replica the leader kill stopped:\n{text}"
    );
    if !record.shards.is_empty() {
        assert!(moved_away_from(&outcome, killed), "{text}");
        assert!(record.recovered_sim_ms.is_some(), "{text}");
    }
    assert!(all_bound(&sim), "{text}\n{:?}", outcome.pending);
    assert_clean(&outcome, &mut ledger);
}

/// `count` nodes of `gpus_each` GPUs in each listed shard (names found by scanning `node-N`).
fn nodes_in(shards: u32, wanted: &[(u32, usize)], gpus_each: i64) -> Vec<Node> {
    let m = map(shards);
    let mut left: std::collections::BTreeMap<u32, usize> = wanted.iter().copied().collect();
    let mut out = Vec::new();
    for i in 0.. {
        if left.values().all(|n| *n == 0) {
            break;
        }
        let node = Node::new(format!("node-{i}"), gpus(gpus_each));
        if let Some(n) = left.get_mut(&m.shard_of(&node))
            && *n > 0
        {
            *n -= 1;
            out.push(node);
        }
    }
    out
}

/// A cross-shard gang `ga` (home queue `qa`, two one-GPU pods: one for its home pool's only
/// node, one hinted at `y[0]` of the other pool) and a local gang `gb` of the other pool's
/// owner (queue `qb`, one pod planned on that same `y[0]`), planned by both replicas from one
/// snapshot and performed in one round.
fn same_round_conflict(other_pool_nodes: usize) -> SameRound {
    let mut rt = ShardRuntime::new(options(2, 2, None)).expect("valid");
    let probe = cluster(one_node_per_shard(2, 1), Vec::new(), &["default"]);
    rt.load(&probe, &mut LocalLedger::new()).expect("loads");
    let (qa, qb) = two_queues_on_two_replicas(&rt);
    let (home_a, home_b) = (rt.map().shard_of_queue(&qa), rt.map().shard_of_queue(&qb));
    let nodes = nodes_in(2, &[(home_a, 1), (home_b, other_pool_nodes)], 1);
    let x = nodes
        .iter()
        .find(|n| map(2).shard_of(n) == home_a)
        .expect("one")
        .name
        .clone();
    let y: Vec<String> = nodes
        .iter()
        .filter(|n| map(2).shard_of(n) == home_b)
        .map(|n| n.name.clone())
        .collect();
    let mut index = 0;
    let mut sim = cluster(
        nodes,
        vec![
            gang("ga", &qa, 2, None, &mut index),
            gang("gb", &qb, 1, None, &mut index),
        ],
        &[&qa, &qb],
    );
    let mut rt = ShardRuntime::new(options(2, 2, None)).expect("valid");
    let mut ledger = LocalLedger::new();
    rt.load(&sim, &mut ledger).expect("loads");
    let placement = |pod: &str, node: &str| Placement {
        pod: ObjectKey::new("default", pod),
        node: node.to_string(),
        resources: gpus(1),
    };
    let plan = CyclePlan {
        gangs: vec![
            GangPlacement {
                gang: ObjectKey::new("default", "ga"),
                placements: vec![placement("ga-0", &x), placement("ga-1", &y[0])],
            },
            GangPlacement {
                gang: ObjectKey::new("default", "gb"),
                placements: vec![placement("gb-0", &y[0])],
            },
        ],
        ..CyclePlan::default()
    };
    let mut errors = Vec::new();
    rt.begin_round(&mut sim, &mut ledger, &mut errors);
    let mut outcome = RunOutcome::default();
    // Each replica's plan holds both gangs; each commits those of its home shards, the
    // local ones first: `gb` fills `y[0]` before `ga`'s prepare reaches its pool's owner.
    let plans: std::collections::BTreeMap<u64, CyclePlan> =
        [(1, plan.clone()), (2, plan)].into_iter().collect();
    let performed = rt.perform(&mut sim, &mut ledger, &plans, 1, &mut outcome);
    errors.extend(outcome.ledger_errors);
    SameRound {
        x,
        y,
        sim,
        rt,
        ledger,
        performed,
        errors,
    }
}

/// What [`same_round_conflict`] left.
struct SameRound {
    /// The home pool's node.
    x: String,
    /// The other pool's nodes (`y[0]` is the hint).
    y: Vec<String>,
    sim: SimCluster,
    rt: ShardRuntime,
    ledger: LocalLedger,
    performed: CyclePlan,
    errors: Vec<String>,
}

/// I1–I3 on the cluster, I4 on every fenced write, the ledger's own checks, no leaked
/// reservation, no open transaction.
fn assert_round_clean(
    sim: &SimCluster,
    rt: &mut ShardRuntime,
    ledger: &mut LocalLedger,
    performed: &CyclePlan,
    errors: &[String],
) {
    let text = format!("{}\n{:?}", rt.report.render(), rt.report.txn_log);
    let mut found = check_no_double_booking(sim);
    found.extend(check_gang_atomicity(sim));
    found.extend(check_no_lost_placement(sim, performed));
    found.extend(rt.take_violations());
    assert!(found.is_empty(), "{found:?}\n{text}");
    assert_eq!(rt.report.checks_failed, 0, "{text}");
    assert!(rt.report.checks > 0, "{text}");
    let state = ledger.state().expect("readable");
    assert!(check_all(&state).is_empty(), "{:?}", check_all(&state));
    assert!(check_no_leaked_reservation(&state).is_empty(), "{text}");
    assert_eq!(state.open_txn_count(), 0, "{text}");
    assert!(errors.is_empty(), "{errors:?}");
}

fn node_of(sim: &SimCluster, pod: &str) -> Option<String> {
    sim.pod(&ObjectKey::new("default", pod))
        .and_then(|p| p.node_name.clone())
}

#[test]
fn a_pool_owner_filling_the_hinted_node_in_the_same_round_leaves_the_gang_to_commit_on_another_node_of_its_pool()
 {
    let SameRound {
        x,
        y,
        sim,
        mut rt,
        mut ledger,
        performed,
        errors,
    } = same_round_conflict(2);
    let text = format!("{}\n{:?}", rt.report.render(), rt.report.txn_log);
    assert_eq!(node_of(&sim, "gb-0").as_ref(), Some(&y[0]), "{text}");
    assert_eq!(node_of(&sim, "ga-0").as_ref(), Some(&x), "{text}");
    assert_eq!(node_of(&sim, "ga-1").as_ref(), Some(&y[1]), "{text}");
    assert_eq!(
        (
            rt.report.txns_started,
            rt.report.txns_committed,
            rt.report.txns_aborted
        ),
        (1, 1, 0),
        "{text}"
    );
    // The performed plan names the nodes bound, not the plan's hint.
    let ga = performed
        .gangs
        .iter()
        .find(|g| g.gang.name == "ga")
        .expect("ga performed");
    let ga_nodes: Vec<&str> = ga.placements.iter().map(|p| p.node.as_str()).collect();
    assert_eq!(ga_nodes, vec![x.as_str(), y[1].as_str()], "{text}");
    // Group commit: `ga`'s marks wait in its shards' owners' outboxes for their next
    // proposal (the next round's at the latest); `gb`'s rode in replica 2's reserve.
    let state_of = |ledger: &mut LocalLedger, pod: &str| {
        let state = ledger.state().expect("readable");
        state.placements[&format!("default/{pod}")].state.clone()
    };
    assert_eq!(state_of(&mut ledger, "gb-0"), PlacementState::Bound);
    assert_eq!(state_of(&mut ledger, "ga-0"), PlacementState::Assumed);
    rt.flush_outboxes(&mut ledger, true);
    let state = ledger.state().expect("readable");
    assert!(
        state
            .placements
            .values()
            .all(|p| p.state == PlacementState::Bound),
        "{:?}",
        state.placements
    );
    assert_round_clean(&sim, &mut rt, &mut ledger, &performed, &errors);
}

#[test]
fn a_pool_that_cannot_host_the_part_refuses_naming_the_pod_and_the_gang_aborts_leaving_nothing() {
    let SameRound {
        y,
        sim,
        mut rt,
        mut ledger,
        performed,
        errors,
        ..
    } = same_round_conflict(1);
    let text = format!("{}\n{:?}", rt.report.render(), rt.report.txn_log);
    assert_eq!(node_of(&sim, "gb-0").as_ref(), Some(&y[0]), "{text}");
    assert_eq!(node_of(&sim, "ga-0"), None, "{text}");
    assert_eq!(node_of(&sim, "ga-1"), None, "{text}");
    assert_eq!(
        (rt.report.txns_committed, rt.report.txns_aborted),
        (0, 1),
        "{text}"
    );
    let reason = rt
        .report
        .txn_log
        .iter()
        .find(|l| l.contains("Aborted"))
        .expect("an abort");
    assert!(
        reason.contains("pod default/ga-1: no node of shard")
            && reason.contains("1 insufficient nvidia.com/gpu")
            && reason.contains("it requests 1 nvidia.com/gpu, the most free on one node is 0"),
        "{reason}"
    );
    let state = ledger.state().expect("readable");
    assert_eq!(state.pods_of_gang("default/ga").count(), 0, "{text}");
    assert_round_clean(&sim, &mut rt, &mut ledger, &performed, &errors);
}

#[test]
fn cross_shard_gangs_of_one_round_hinted_at_the_same_node_each_get_their_own_node_and_commit() {
    // The round's transactions move through the pump together: both participants pick
    // before either reservation lands. Each pick holds its node, so the second does not
    // take the first one's node and then lose the reservation to it.
    let mut rt = ShardRuntime::new(options(2, 1, None)).expect("valid");
    let probe = cluster(one_node_per_shard(2, 1), Vec::new(), &["default"]);
    rt.load(&probe, &mut LocalLedger::new()).expect("loads");
    let home = rt.map().shard_of_queue("default");
    let other = 1 - home;
    let nodes = nodes_in(2, &[(home, 2), (other, 2)], 1);
    let in_pool = |s: u32| -> Vec<String> {
        nodes
            .iter()
            .filter(|n| map(2).shard_of(n) == s)
            .map(|n| n.name.clone())
            .collect()
    };
    let (x, y) = (in_pool(home), in_pool(other));
    let mut index = 0;
    let mut sim = cluster(
        nodes.clone(),
        vec![
            gang("g1", "default", 2, None, &mut index),
            gang("g2", "default", 2, None, &mut index),
        ],
        &["default"],
    );
    let mut rt = ShardRuntime::new(options(2, 1, None)).expect("valid");
    let mut ledger = LocalLedger::new();
    rt.load(&sim, &mut ledger).expect("loads");
    let wants = |g: &str, home_node: &str| GangPlacement {
        gang: ObjectKey::new("default", g),
        placements: [home_node, y[0].as_str()]
            .iter()
            .enumerate()
            .map(|(i, n)| Placement {
                pod: ObjectKey::new("default", format!("{g}-{i}")),
                node: n.to_string(),
                resources: gpus(1),
            })
            .collect(),
    };
    let plan = CyclePlan {
        gangs: vec![wants("g1", &x[0]), wants("g2", &x[1])],
        ..CyclePlan::default()
    };
    let mut errors = Vec::new();
    rt.begin_round(&mut sim, &mut ledger, &mut errors);
    let mut outcome = RunOutcome::default();
    let plans = [(1, plan)].into_iter().collect();
    let performed = rt.perform(&mut sim, &mut ledger, &plans, 1, &mut outcome);
    errors.extend(outcome.ledger_errors);
    let text = format!("{}\n{:?}", rt.report.render(), rt.report.txn_log);
    assert_eq!(
        (rt.report.txns_started, rt.report.txns_committed),
        (2, 2),
        "{text}"
    );
    let on_y: BTreeSet<Option<String>> =
        ["g1-1", "g2-1"].iter().map(|p| node_of(&sim, p)).collect();
    let expected: BTreeSet<Option<String>> = y.iter().cloned().map(Some).collect();
    assert_eq!(on_y, expected, "{text}");
    assert_round_clean(&sim, &mut rt, &mut ledger, &performed, &errors);
}
