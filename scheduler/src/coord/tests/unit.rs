//! One test per transition of the coordinator and the participant, asserting commands.

use phalanx_statestore::ledger::TxnDecision;
use phalanx_statestore::{LedgerCommand, LedgerResponse, PodPlacement, Refusal, ResourceVec};

use crate::coord::*;

fn pod(name: &str, node: &str) -> PodPlacement {
    PodPlacement {
        pod: name.into(),
        node: node.into(),
        resources: ResourceVec::from_pairs([("nvidia.com/gpu", 1)]),
    }
}

const TXN: &str = "0:1:1:ns/g";

fn start(txn: &str, shards: &[u32], now_ms: u64, deadline_ms: u64) -> CoordEvent {
    start_owned(txn, shards, &[], now_ms, deadline_ms)
}

/// A start whose shards `owners` names (shard, owner) have a known owner.
fn start_owned(
    txn: &str,
    shards: &[u32],
    owners: &[(u32, u64)],
    now_ms: u64,
    deadline_ms: u64,
) -> CoordEvent {
    CoordEvent::Start(StartTxn {
        txn: txn.into(),
        gang: "ns/g".into(),
        parts: shards
            .iter()
            .map(|s| (*s, vec![pod(&format!("ns/p{s}"), &format!("n{s}"))]))
            .collect(),
        owners: owners.iter().copied().collect(),
        now_ms,
        deadline_ms,
    })
}

fn coord(order: PrepareOrder) -> Coordinator {
    Coordinator::new(
        0,
        1,
        CoordConfig {
            prepare_order: order,
            ..CoordConfig::default()
        },
    )
}

fn ledger(txn: &str, result: LedgerResult) -> CoordEvent {
    CoordEvent::LedgerApplied {
        txn: txn.into(),
        result,
    }
}

/// Shard `shard` reserved its pod (`ns/p{shard}`) on `node`.
fn prepared_on(shard: u32, node: &str) -> PrepareReply {
    PrepareReply::Prepared {
        placements: vec![pod(&format!("ns/p{shard}"), node)],
        committed: false,
    }
}

/// Shard `shard` reserved its pod on the hinted node `n{shard}`.
fn prepared(shard: u32) -> PrepareReply {
    prepared_on(shard, &format!("n{shard}"))
}

fn reply(shard: u32, reply: PrepareReply) -> CoordEvent {
    CoordEvent::ParticipantReply {
        txn: TXN.into(),
        shard,
        reply,
    }
}

fn prepared_to(cmds: &[CoordCommand]) -> Vec<u32> {
    cmds.iter()
        .filter_map(|c| match c {
            CoordCommand::SendPrepare { shard, .. } => Some(*shard),
            _ => None,
        })
        .collect()
}

fn decided(cmds: &[CoordCommand]) -> Option<TxnDecision> {
    cmds.iter().find_map(|c| match c {
        CoordCommand::ProposeToLedger(LedgerCommand::TxnDecide { decision, .. }) => Some(*decision),
        _ => None,
    })
}

fn outcome(cmds: &[CoordCommand]) -> Option<(TxnOutcome, String)> {
    cmds.iter().find_map(|c| match c {
        CoordCommand::Report {
            outcome, reason, ..
        } => Some((*outcome, reason.clone())),
        _ => None,
    })
}

/// A coordinator with TXN begun over shards 1 and 2 (parallel: both asked).
fn preparing(order: PrepareOrder) -> Coordinator {
    let mut c = coord(order);
    c.step(start(TXN, &[1, 2], 0, 1000));
    c.step(ledger(TXN, LedgerResult::Begun));
    c
}

#[test]
fn a_start_proposes_txn_begin_with_the_participants_and_deadline_at_the_coordinators_epoch() {
    let mut c = coord(PrepareOrder::Parallel);
    let cmds = c.step(start(TXN, &[2, 1], 10, 500));
    assert_eq!(
        cmds,
        vec![CoordCommand::ProposeToLedger(LedgerCommand::TxnBegin {
            txn: TXN.into(),
            shard: 0,
            epoch: 1,
            participants: vec![1, 2],
            deadline_ms: 500,
        })]
    );
    assert_eq!(c.phase(TXN), Some(Phase::Beginning));
}

#[test]
fn begun_sends_a_prepare_to_every_participant_when_parallel() {
    let mut c = coord(PrepareOrder::Parallel);
    c.step(start(TXN, &[1, 2], 0, 1000));
    let cmds = c.step(ledger(TXN, LedgerResult::Begun));
    assert_eq!(prepared_to(&cmds), vec![1, 2]);
    let CoordCommand::SendPrepare { prepare, .. } = &cmds[0] else {
        panic!("{cmds:?}")
    };
    assert_eq!(prepare.coordinator, 0);
    assert_eq!(prepare.placements, vec![pod("ns/p1", "n1")]);
    assert_eq!(prepare.deadline_ms, 1000);
}

#[test]
fn begun_asks_only_the_lowest_shard_when_ascending_and_the_next_after_it_prepares() {
    let mut c = coord(PrepareOrder::Ascending);
    c.step(start(TXN, &[2, 1], 0, 1000));
    assert_eq!(
        prepared_to(&c.step(ledger(TXN, LedgerResult::Begun))),
        vec![1]
    );
    assert_eq!(prepared_to(&c.step(reply(1, prepared(1)))), vec![2]);
}

#[test]
fn ascending_asks_a_run_of_consecutive_shards_with_one_owner_at_once() {
    let mut c = coord(PrepareOrder::Ascending);
    // Shards 1 and 2 are replica 7's, 3 is replica 8's, 4 is 7's again, 5's owner unknown.
    let owners = [(1, 7), (2, 7), (3, 8), (4, 7)];
    c.step(start_owned(TXN, &[5, 4, 3, 2, 1], &owners, 0, 1000));
    let first = c.step(ledger(TXN, LedgerResult::Begun));
    assert_eq!(prepared_to(&first), vec![1, 2]);
    // Half a run prepared asks nobody new.
    assert_eq!(
        prepared_to(&c.step(reply(1, prepared(1)))),
        Vec::<u32>::new()
    );
    assert_eq!(prepared_to(&c.step(reply(2, prepared(2)))), vec![3]);
    // Replica 7 again, but not consecutive with its first run: the global order stays.
    assert_eq!(prepared_to(&c.step(reply(3, prepared(3)))), vec![4]);
    assert_eq!(prepared_to(&c.step(reply(4, prepared(4)))), vec![5]);
    assert_eq!(
        decided(&c.step(reply(5, prepared(5)))),
        Some(TxnDecision::Commit)
    );
}

/// Shard `shard` reserved its pod on its hint and logged the commit behind it.
fn committed_by(shard: u32) -> PrepareReply {
    PrepareReply::Prepared {
        placements: vec![pod(&format!("ns/p{shard}"), &format!("n{shard}"))],
        committed: true,
    }
}

/// The shards prepares go to, each with the epoch it is asked to log the commit at.
fn commit_asks(cmds: &[CoordCommand]) -> Vec<(u32, Option<u64>)> {
    cmds.iter()
        .filter_map(|c| match c {
            CoordCommand::SendPrepare { shard, prepare } => Some((*shard, prepare.commit_at)),
            _ => None,
        })
        .collect()
}

fn bound(cmds: &[CoordCommand]) -> Option<Vec<PodPlacement>> {
    cmds.iter().find_map(|c| match c {
        CoordCommand::Bind { pods, .. } => Some(pods.clone()),
        _ => None,
    })
}

#[test]
fn ascending_asks_the_last_shard_of_the_last_run_and_only_it_to_log_the_commit() {
    let mut c = coord(PrepareOrder::Ascending);
    // Shard 1 is replica 7's, shards 2 and 3 replica 8's: the last run is 2, 3.
    c.step(start_owned(
        TXN,
        &[1, 2, 3],
        &[(1, 7), (2, 8), (3, 8)],
        0,
        1000,
    ));
    let first = c.step(ledger(TXN, LedgerResult::Begun));
    assert_eq!(commit_asks(&first), vec![(1, None)]);
    let last = c.step(reply(1, prepared(1)));
    assert_eq!(commit_asks(&last), vec![(2, None), (3, Some(1))]);
    // A resend asks the same.
    let resent = c.step(CoordEvent::Tick { now_ms: 500 });
    assert_eq!(commit_asks(&resent), vec![(2, None), (3, Some(1))]);
}

#[test]
fn parallel_prepares_or_the_option_off_ask_no_participant_to_log_the_commit() {
    let mut c = coord(PrepareOrder::Parallel);
    c.step(start(TXN, &[1, 2], 0, 1000));
    let cmds = c.step(ledger(TXN, LedgerResult::Begun));
    assert_eq!(commit_asks(&cmds), vec![(1, None), (2, None)]);
    let mut off = Coordinator::new(
        0,
        1,
        CoordConfig {
            last_participant_commits: false,
            ..CoordConfig::default()
        },
    );
    off.step(start(TXN, &[1], 0, 1000));
    let cmds = off.step(ledger(TXN, LedgerResult::Begun));
    assert_eq!(commit_asks(&cmds), vec![(1, None)]);
}

#[test]
fn a_commit_logged_by_the_last_participant_binds_with_no_decision_proposed() {
    let mut c = coord(PrepareOrder::Ascending);
    c.step(start(TXN, &[1, 2], 0, 1000));
    c.step(ledger(TXN, LedgerResult::Begun));
    c.step(reply(1, prepared(1)));
    let cmds = c.step(reply(2, committed_by(2)));
    assert_eq!(decided(&cmds), None, "{cmds:?}");
    assert_eq!(
        bound(&cmds),
        Some(vec![pod("ns/p1", "n1"), pod("ns/p2", "n2")])
    );
    let (o, why) = outcome(&cmds).expect("reported");
    assert_eq!(o, TxnOutcome::Committed);
    assert!(why.contains("shard 2 logged the commit"), "{why}");
    let told: Vec<u32> = cmds
        .iter()
        .filter_map(|c| match c {
            CoordCommand::SendDecision {
                shard, decision, ..
            } => {
                assert_eq!(*decision, TxnDecision::Commit);
                Some(*shard)
            }
            _ => None,
        })
        .collect();
    assert_eq!(told, vec![1, 2]);
    assert_eq!(c.in_flight(), 0);
}

#[test]
fn a_logged_commit_ahead_of_another_reply_of_its_run_waits_for_it_then_binds() {
    let mut c = coord(PrepareOrder::Ascending);
    c.step(start_owned(TXN, &[1, 2], &[(1, 7), (2, 7)], 0, 1000));
    c.step(ledger(TXN, LedgerResult::Begun));
    let early = c.step(reply(2, committed_by(2)));
    assert_eq!((decided(&early), bound(&early)), (None, None));
    assert_eq!(c.phase(TXN), Some(Phase::Committed));
    // Its deadline passing aborts nothing: the ledger holds the commit.
    let late = c.step(CoordEvent::Tick { now_ms: 1500 });
    assert_eq!(decided(&late), None);
    assert_eq!(
        commit_asks(&late),
        vec![(1, None)],
        "the missing reply is asked for"
    );
    let cmds = c.step(reply(1, prepared(1)));
    assert_eq!(
        bound(&cmds),
        Some(vec![pod("ns/p1", "n1"), pod("ns/p2", "n2")])
    );
    assert_eq!(outcome(&cmds).map(|o| o.0), Some(TxnOutcome::Committed));
}

#[test]
fn a_commit_logged_while_the_coordinator_aborted_at_its_deadline_binds_once_every_placement_is_known()
 {
    let mut c = coord(PrepareOrder::Ascending);
    c.step(start(TXN, &[1, 2], 0, 1000));
    c.step(ledger(TXN, LedgerResult::Begun));
    c.step(reply(1, prepared(1)));
    // Shard 2's answer is late: the deadline proposes an abort, which the ledger refuses
    // as decided (shard 2 logged the commit first), that is, committed.
    let cmds = c.step(CoordEvent::Tick { now_ms: 1000 });
    assert_eq!(decided(&cmds), Some(TxnDecision::Abort));
    let refused = decide_result(
        TxnDecision::Abort,
        &LedgerResponse::Refused(Refusal::TxnAlreadyDecided { txn: TXN.into() }),
    );
    let cmds = c.step(ledger(TXN, refused));
    assert_eq!(bound(&cmds), None, "shard 2's nodes are not known yet");
    assert_eq!(c.phase(TXN), Some(Phase::Committed));
    let cmds = c.step(reply(2, committed_by(2)));
    assert_eq!(
        bound(&cmds),
        Some(vec![pod("ns/p1", "n1"), pod("ns/p2", "n2")])
    );
    assert_eq!(outcome(&cmds).map(|o| o.0), Some(TxnOutcome::Committed));
}

#[test]
fn a_logged_commit_whose_missing_reply_never_comes_is_given_up_as_unfinished() {
    let mut c = Coordinator::new(
        0,
        1,
        CoordConfig {
            max_decide_attempts: 2,
            ..CoordConfig::default()
        },
    );
    c.step(start_owned(TXN, &[1, 2], &[(1, 7), (2, 7)], 0, 100_000));
    c.step(ledger(TXN, LedgerResult::Begun));
    c.step(reply(2, committed_by(2)));
    for now in [200, 400] {
        let cmds = c.step(CoordEvent::Tick { now_ms: now });
        assert_eq!(prepared_to(&cmds), vec![1]);
    }
    let cmds = c.step(CoordEvent::Tick { now_ms: 600 });
    let (o, why) = outcome(&cmds).expect("reported");
    assert_eq!(o, TxnOutcome::Unfinished);
    assert!(why.contains("shards [1]"), "{why}");
    assert_eq!(bound(&cmds), None);
    assert_eq!(c.in_flight(), 0);
}

#[test]
fn every_participant_prepared_proposes_commit() {
    let mut c = preparing(PrepareOrder::Parallel);
    assert_eq!(decided(&c.step(reply(1, prepared(1)))), None);
    let cmds = c.step(reply(2, prepared(2)));
    assert_eq!(decided(&cmds), Some(TxnDecision::Commit));
    assert_eq!(c.phase(TXN), Some(Phase::Deciding(TxnDecision::Commit)));
}

#[test]
fn a_reservation_seen_in_the_ledger_waits_for_the_reply_that_names_its_nodes() {
    let mut c = preparing(PrepareOrder::Parallel);
    assert!(
        c.step(ledger(TXN, LedgerResult::Reserved { shard: 1 }))
            .is_empty()
    );
    assert!(
        c.step(ledger(TXN, LedgerResult::Reserved { shard: 2 }))
            .is_empty()
    );
    assert_eq!(c.phase(TXN), Some(Phase::Preparing));
}

#[test]
fn a_commit_binds_the_nodes_the_participants_reserved_not_the_plans_hints() {
    let mut c = preparing(PrepareOrder::Parallel);
    c.step(reply(1, prepared_on(1, "n7")));
    c.step(reply(2, prepared(2)));
    let cmds = c.step(ledger(TXN, LedgerResult::Decided(TxnDecision::Commit)));
    assert!(
        cmds.contains(&CoordCommand::Bind {
            txn: TXN.into(),
            gang: "ns/g".into(),
            pods: vec![pod("ns/p1", "n7"), pod("ns/p2", "n2")],
        }),
        "{cmds:?}"
    );
}

#[test]
fn a_resent_prepares_answer_does_not_replace_the_nodes_of_the_first() {
    let mut c = preparing(PrepareOrder::Parallel);
    c.step(reply(1, prepared_on(1, "n7")));
    assert!(c.step(reply(1, prepared_on(1, "n8"))).is_empty());
    c.step(reply(2, prepared(2)));
    let cmds = c.step(ledger(TXN, LedgerResult::Decided(TxnDecision::Commit)));
    let pods = cmds.iter().find_map(|c| match c {
        CoordCommand::Bind { pods, .. } => Some(pods.clone()),
        _ => None,
    });
    assert_eq!(pods, Some(vec![pod("ns/p1", "n7"), pod("ns/p2", "n2")]));
}

#[test]
fn a_prepared_reply_naming_other_pods_than_the_part_aborts_naming_them() {
    let mut c = preparing(PrepareOrder::Parallel);
    let wrong = PrepareReply::Prepared {
        placements: vec![pod("ns/p1", "n1"), pod("ns/extra", "n1")],
        committed: false,
    };
    let cmds = c.step(reply(1, wrong));
    assert_eq!(decided(&cmds), Some(TxnDecision::Abort));
    let done = c.step(ledger(TXN, LedgerResult::Decided(TxnDecision::Abort)));
    assert_eq!(
        outcome(&done),
        Some((
            TxnOutcome::Aborted,
            r#"shard 1 refused: its reply names pods ["ns/extra", "ns/p1"], its part has ["ns/p1"]"#
                .into()
        ))
    );
}

#[test]
fn a_refusal_proposes_abort_naming_the_shard_and_reason() {
    let mut c = preparing(PrepareOrder::Parallel);
    let cmds = c.step(reply(2, PrepareReply::Refused("gpu short".into())));
    assert_eq!(decided(&cmds), Some(TxnDecision::Abort));
    let done = c.step(ledger(TXN, LedgerResult::Decided(TxnDecision::Abort)));
    assert_eq!(
        outcome(&done),
        Some((TxnOutcome::Aborted, "shard 2 refused: gpu short".into()))
    );
}

#[test]
fn a_refusal_from_a_shard_that_already_prepared_is_ignored_as_stale() {
    let mut c = preparing(PrepareOrder::Parallel);
    c.step(reply(1, prepared(1)));
    assert!(
        c.step(reply(1, PrepareReply::Refused("busy".into())))
            .is_empty()
    );
    assert_eq!(c.phase(TXN), Some(Phase::Preparing));
}

#[test]
fn a_reply_from_a_shard_that_is_not_a_participant_is_ignored() {
    let mut c = preparing(PrepareOrder::Parallel);
    assert!(
        c.step(reply(3, PrepareReply::Refused("who?".into())))
            .is_empty()
    );
    assert!(c.step(ledger("unknown", LedgerResult::Begun)).is_empty());
}

#[test]
fn a_commit_decision_binds_every_pod_and_tells_every_participant() {
    let mut c = preparing(PrepareOrder::Parallel);
    c.step(reply(1, prepared(1)));
    c.step(reply(2, prepared(2)));
    let cmds = c.step(ledger(TXN, LedgerResult::Decided(TxnDecision::Commit)));
    assert!(cmds.contains(&CoordCommand::Bind {
        txn: TXN.into(),
        gang: "ns/g".into(),
        pods: vec![pod("ns/p1", "n1"), pod("ns/p2", "n2")],
    }));
    let told: Vec<u32> = cmds
        .iter()
        .filter_map(|c| match c {
            CoordCommand::SendDecision { shard, .. } => Some(*shard),
            _ => None,
        })
        .collect();
    assert_eq!(told, vec![1, 2]);
    assert_eq!(outcome(&cmds).map(|o| o.0), Some(TxnOutcome::Committed));
    assert_eq!(c.in_flight(), 0);
}

#[test]
fn an_abort_decision_binds_nothing() {
    let mut c = preparing(PrepareOrder::Parallel);
    c.step(reply(1, PrepareReply::Refused("no".into())));
    let cmds = c.step(ledger(TXN, LedgerResult::Decided(TxnDecision::Abort)));
    assert!(!cmds.iter().any(|c| matches!(c, CoordCommand::Bind { .. })));
}

#[test]
fn the_deadline_passing_while_preparing_proposes_abort() {
    let mut c = preparing(PrepareOrder::Parallel);
    c.step(reply(1, prepared(1)));
    let cmds = c.step(CoordEvent::Tick { now_ms: 1000 });
    assert_eq!(decided(&cmds), Some(TxnDecision::Abort));
}

#[test]
fn the_deadline_passing_while_beginning_proposes_abort() {
    let mut c = coord(PrepareOrder::Parallel);
    c.step(start(TXN, &[1], 0, 100));
    assert_eq!(
        decided(&c.step(CoordEvent::Tick { now_ms: 100 })),
        Some(TxnDecision::Abort)
    );
}

#[test]
fn a_decision_once_proposed_is_not_changed_by_the_deadline_or_a_late_refusal() {
    let mut c = preparing(PrepareOrder::Parallel);
    c.step(reply(1, prepared(1)));
    c.step(reply(2, prepared(2)));
    let tick = c.step(CoordEvent::Tick { now_ms: 1000 });
    assert_ne!(decided(&tick), Some(TxnDecision::Abort));
    let late = c.step(reply(2, PrepareReply::Refused("late".into())));
    assert!(late.is_empty());
    assert_eq!(c.phase(TXN), Some(Phase::Deciding(TxnDecision::Commit)));
}

#[test]
fn a_commit_refused_as_already_decided_reports_the_ledgers_abort() {
    let mut c = preparing(PrepareOrder::Parallel);
    c.step(reply(1, prepared(1)));
    c.step(reply(2, prepared(2)));
    let response = LedgerResponse::Refused(Refusal::TxnAlreadyDecided { txn: TXN.into() });
    let result = decide_result(TxnDecision::Commit, &response);
    assert_eq!(result, LedgerResult::Decided(TxnDecision::Abort));
    let cmds = c.step(ledger(TXN, result));
    assert_eq!(outcome(&cmds).map(|o| o.0), Some(TxnOutcome::Aborted));
}

#[test]
fn a_stale_epoch_on_the_decision_reports_unfinished_for_the_next_owner() {
    let mut c = preparing(PrepareOrder::Parallel);
    c.step(reply(1, PrepareReply::Refused("x".into())));
    let r = Refusal::StaleEpoch {
        shard: 0,
        proposed: 1,
        current: 2,
    };
    let cmds = c.step(ledger(TXN, LedgerResult::DecideRefused(r)));
    assert_eq!(outcome(&cmds).map(|o| o.0), Some(TxnOutcome::Unfinished));
    assert_eq!(c.in_flight(), 0);
}

#[test]
fn a_refused_begin_reports_rejected_and_frees_the_slot() {
    let mut c = coord(PrepareOrder::Parallel);
    c.step(start(TXN, &[1], 0, 100));
    let r = Refusal::StaleEpoch {
        shard: 0,
        proposed: 1,
        current: 2,
    };
    let cmds = c.step(ledger(TXN, begin_result(&LedgerResponse::Refused(r))));
    assert_eq!(outcome(&cmds).map(|o| o.0), Some(TxnOutcome::Rejected));
    assert_eq!(c.in_flight(), 0);
}

#[test]
fn an_unanswered_begin_is_resent_and_txn_exists_counts_as_begun() {
    let mut c = coord(PrepareOrder::Parallel);
    c.step(start(TXN, &[1], 0, 10_000));
    let cmds = c.step(CoordEvent::Tick { now_ms: 200 });
    assert!(matches!(
        cmds.as_slice(),
        [CoordCommand::ProposeToLedger(
            LedgerCommand::TxnBegin { .. }
        )]
    ));
    let exists = LedgerResponse::Refused(Refusal::TxnExists { txn: TXN.into() });
    assert_eq!(begin_result(&exists), LedgerResult::Begun);
}

#[test]
fn an_unanswered_prepare_is_resent_only_to_shards_not_yet_prepared() {
    let mut c = preparing(PrepareOrder::Parallel);
    c.step(reply(1, prepared(1)));
    assert!(c.step(CoordEvent::Tick { now_ms: 100 }).is_empty());
    assert_eq!(
        prepared_to(&c.step(CoordEvent::Tick { now_ms: 200 })),
        vec![2]
    );
}

#[test]
fn an_unanswered_decision_is_reproposed_then_given_up_as_unfinished() {
    let mut c = Coordinator::new(
        0,
        1,
        CoordConfig {
            max_decide_attempts: 2,
            prepare_order: PrepareOrder::Parallel,
            ..CoordConfig::default()
        },
    );
    c.step(start(TXN, &[1], 0, 100_000));
    c.step(ledger(TXN, LedgerResult::Begun));
    c.step(reply(1, prepared(1)));
    assert_eq!(
        decided(&c.step(CoordEvent::Tick { now_ms: 200 })),
        Some(TxnDecision::Commit)
    );
    let cmds = c.step(CoordEvent::Tick { now_ms: 400 });
    assert_eq!(outcome(&cmds).map(|o| o.0), Some(TxnOutcome::Unfinished));
}

#[test]
fn a_prepared_reply_before_the_begin_answer_proves_the_begin_landed() {
    let mut c = coord(PrepareOrder::Parallel);
    c.step(start(TXN, &[1], 0, 1000));
    let cmds = c.step(reply(1, prepared(1)));
    assert_eq!(decided(&cmds), Some(TxnDecision::Commit));
}

#[test]
fn starts_beyond_the_in_flight_bound_are_queued_then_begun_when_a_slot_frees() {
    let mut c = Coordinator::new(
        0,
        1,
        CoordConfig {
            max_in_flight: 1,
            max_queued: 1,
            ..CoordConfig::default()
        },
    );
    c.step(start(TXN, &[1], 0, 1000));
    assert!(c.step(start("0:1:2:ns/g", &[1], 0, 1000)).is_empty());
    assert_eq!((c.in_flight(), c.queued()), (1, 1));
    let full = c.step(start("0:1:3:ns/g", &[1], 0, 1000));
    let (o, reason) = outcome(&full).expect("a report");
    assert_eq!(o, TxnOutcome::Rejected);
    assert!(
        reason.contains("1 transactions in flight and 1 queued"),
        "{reason}"
    );
    c.step(ledger(
        TXN,
        LedgerResult::BeginRefused(Refusal::UnknownShard { shard: 0 }),
    ));
    assert_eq!((c.in_flight(), c.queued()), (1, 0));
    assert_eq!(c.phase("0:1:2:ns/g"), Some(Phase::Beginning));
}

#[test]
fn a_queued_start_whose_deadline_passes_is_rejected() {
    let mut c = Coordinator::new(
        0,
        1,
        CoordConfig {
            max_in_flight: 1,
            ..CoordConfig::default()
        },
    );
    c.step(start(TXN, &[1], 0, 10_000));
    c.step(start("0:1:2:ns/g", &[1], 0, 50));
    let cmds = c.step(CoordEvent::Tick { now_ms: 50 });
    assert_eq!(
        outcome(&cmds),
        Some((TxnOutcome::Rejected, "deadline passed while queued".into()))
    );
    assert_eq!(c.queued(), 0);
}

#[test]
fn an_invalid_start_is_rejected_with_a_reason_and_writes_nothing() {
    let mut c = coord(PrepareOrder::Parallel);
    for (event, needle) in [
        (start(TXN, &[], 0, 100), "no participant"),
        (start(TXN, &[1, 1], 0, 100), "named twice"),
        (start(TXN, &[1], 100, 100), "not after now"),
    ] {
        let cmds = c.step(event);
        let (o, reason) = outcome(&cmds).expect("a report");
        assert_eq!(o, TxnOutcome::Rejected);
        assert!(reason.contains(needle), "{reason}");
        assert_eq!(cmds.len(), 1);
    }
}

#[test]
fn recovery_binds_a_logged_commit_and_leaves_a_logged_abort_alone() {
    let mut c = Coordinator::new(0, 2, CoordConfig::default());
    let commit = RecoveredTxn {
        txn: TXN.into(),
        gang: Some("ns/g".into()),
        participants: vec![1, 2],
        deadline_ms: 100,
        decision: Some(TxnDecision::Commit),
        unbound: vec![pod("ns/p1", "n1")],
    };
    let abort = RecoveredTxn {
        txn: "0:1:2:ns/h".into(),
        decision: Some(TxnDecision::Abort),
        unbound: vec![],
        ..commit.clone()
    };
    let cmds = c.step(CoordEvent::Recover {
        txns: vec![commit, abort],
        now_ms: 0,
    });
    assert_eq!(cmds.len(), 2, "{cmds:?}");
    assert!(matches!(&cmds[0], CoordCommand::Bind { pods, .. } if pods.len() == 1));
    assert_eq!(outcome(&cmds).map(|o| o.0), Some(TxnOutcome::Committed));
}

#[test]
fn recovery_aborts_an_undecided_transaction_at_the_new_epoch() {
    let mut c = Coordinator::new(0, 2, CoordConfig::default());
    let t = RecoveredTxn {
        txn: TXN.into(),
        gang: Some("ns/g".into()),
        participants: vec![1],
        deadline_ms: 100,
        decision: None,
        unbound: vec![],
    };
    let cmds = c.step(CoordEvent::Recover {
        txns: vec![t],
        now_ms: 0,
    });
    assert_eq!(
        cmds,
        vec![CoordCommand::ProposeToLedger(LedgerCommand::TxnDecide {
            txn: TXN.into(),
            shard: 0,
            epoch: 2,
            decision: TxnDecision::Abort,
        })]
    );
}

#[test]
fn a_zero_limit_in_the_config_is_refused_naming_the_field() {
    let err = CoordConfig {
        max_in_flight: 0,
        ..CoordConfig::default()
    }
    .validate()
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "coordinator.maxInFlight: must be at least 1, got 0"
    );
    assert!(CoordConfig::default().validate().is_ok());
    let err = ParticipantConfig {
        max_in_flight: 0,
        linger_ms: 0,
    }
    .validate()
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "participant.maxInFlight: must be at least 1, got 0"
    );
    assert!(ParticipantConfig::default().validate().is_ok());
}

// ---- participant ----

fn prepare(txn: &str, deadline_ms: u64) -> Prepare {
    Prepare {
        txn: txn.into(),
        coordinator: 0,
        gang: "ns/g".into(),
        placements: vec![pod("ns/p1", "n1")],
        deadline_ms,
        commit_at: None,
    }
}

fn part_reply(cmds: &[ParticipantCommand]) -> Option<PrepareReply> {
    cmds.iter().find_map(|c| match c {
        ParticipantCommand::Reply { reply, .. } => Some(reply.clone()),
        _ => None,
    })
}

fn picked(txn: &str, result: Result<Vec<PodPlacement>, String>) -> ParticipantEvent {
    ParticipantEvent::Picked {
        txn: txn.into(),
        result,
    }
}

fn accepted() -> LedgerResult {
    let accepted = LedgerResponse::Gangs(vec![phalanx_statestore::GangOutcome {
        gang: "ns/g".into(),
        decision: phalanx_statestore::GangDecision::Accepted,
    }]);
    reserve_result(1, &accepted)
}

fn reserve_of(cmds: &[ParticipantCommand]) -> Option<Vec<PodPlacement>> {
    cmds.iter().find_map(|c| match c {
        ParticipantCommand::ProposeToLedger(LedgerCommand::TxnReserve { gang, .. }) => {
            Some(gang.pods.clone())
        }
        _ => None,
    })
}

fn picks(cmds: &[ParticipantCommand]) -> usize {
    cmds.iter()
        .filter(|c| matches!(c, ParticipantCommand::Pick { .. }))
        .count()
}

#[test]
fn a_prepare_asks_the_runtime_to_pick_nodes_with_the_coordinators_as_hints() {
    let mut p = Participant::new(1, 3, ParticipantConfig::default());
    let cmds = p.step(ParticipantEvent::Prepare(prepare(TXN, 100)));
    assert_eq!(
        cmds,
        vec![ParticipantCommand::Pick {
            txn: TXN.into(),
            wanted: vec![pod("ns/p1", "n1")],
        }]
    );
}

#[test]
fn a_pick_proposes_txn_reserve_of_the_picked_nodes_at_the_participants_epoch() {
    let mut p = Participant::new(1, 3, ParticipantConfig::default());
    p.step(ParticipantEvent::Prepare(prepare(TXN, 100)));
    let cmds = p.step(picked(TXN, Ok(vec![pod("ns/p1", "n4")])));
    let ParticipantCommand::ProposeToLedger(LedgerCommand::TxnReserve {
        txn,
        shard,
        epoch,
        gang,
    }) = &cmds[0]
    else {
        panic!("{cmds:?}")
    };
    assert_eq!((txn.as_str(), *shard, *epoch), (TXN, 1, 3));
    assert_eq!(gang.gang, "ns/g");
    assert_eq!(gang.pods, vec![pod("ns/p1", "n4")]);
    assert_eq!(part_reply(&cmds), None, "it answers only after the ledger");
}

#[test]
fn a_pick_that_keeps_the_hint_reserves_the_hinted_node() {
    let mut p = Participant::new(1, 3, ParticipantConfig::default());
    p.step(ParticipantEvent::Prepare(prepare(TXN, 100)));
    let cmds = p.step(picked(TXN, Ok(vec![pod("ns/p1", "n1")])));
    assert_eq!(reserve_of(&cmds), Some(vec![pod("ns/p1", "n1")]));
}

#[test]
fn no_node_of_the_pool_replies_refused_with_the_picks_reason_and_reserves_nothing() {
    let mut p = Participant::new(1, 3, ParticipantConfig::default());
    p.step(ParticipantEvent::Prepare(prepare(TXN, 100)));
    let why = "shard 1: pod ns/p1: no node of shard 1's pool fits it".to_string();
    let cmds = p.step(picked(TXN, Err(why.clone())));
    assert_eq!(
        cmds,
        vec![ParticipantCommand::Reply {
            to: 0,
            txn: TXN.into(),
            shard: 1,
            reply: PrepareReply::Refused(why.clone()),
        }]
    );
    let again = p.step(ParticipantEvent::Prepare(prepare(TXN, 100)));
    assert_eq!(part_reply(&again), Some(PrepareReply::Refused(why)));
    assert_eq!(picks(&again), 0);
}

#[test]
fn a_pick_that_misses_a_pod_of_the_part_is_refused_naming_the_pods() {
    let mut p = Participant::new(1, 3, ParticipantConfig::default());
    p.step(ParticipantEvent::Prepare(prepare(TXN, 100)));
    let cmds = p.step(picked(TXN, Ok(vec![pod("ns/other", "n1")])));
    assert_eq!(
        part_reply(&cmds),
        Some(PrepareReply::Refused(
            r#"shard 1: the pick placed pods ["ns/other"], the part has ["ns/p1"]"#.into()
        ))
    );
    assert_eq!(reserve_of(&cmds), None);
}

#[test]
fn a_reservation_accepted_by_the_ledger_replies_prepared_naming_the_picked_nodes() {
    let mut p = Participant::new(1, 3, ParticipantConfig::default());
    p.step(ParticipantEvent::Prepare(prepare(TXN, 100)));
    p.step(picked(TXN, Ok(vec![pod("ns/p1", "n4")])));
    let cmds = p.step(ParticipantEvent::LedgerApplied {
        txn: TXN.into(),
        result: accepted(),
    });
    assert_eq!(
        cmds,
        vec![ParticipantCommand::Reply {
            to: 0,
            txn: TXN.into(),
            shard: 1,
            reply: PrepareReply::Prepared {
                placements: vec![pod("ns/p1", "n4")],
                committed: false,
            }
        }]
    );
}

#[test]
fn a_reservation_refused_by_the_ledger_replies_refused_with_its_reason() {
    let mut p = Participant::new(1, 3, ParticipantConfig::default());
    p.step(ParticipantEvent::Prepare(prepare(TXN, 100)));
    p.step(picked(TXN, Ok(vec![pod("ns/p1", "n1")])));
    let r = Refusal::StaleEpoch {
        shard: 1,
        proposed: 3,
        current: 4,
    };
    let result = reserve_result(1, &LedgerResponse::Refused(r));
    let cmds = p.step(ParticipantEvent::LedgerApplied {
        txn: TXN.into(),
        result,
    });
    assert_eq!(
        part_reply(&cmds),
        Some(PrepareReply::Refused(
            "shard 1: stale epoch 3, current is 4".into()
        ))
    );
}

fn decide_answer(response: LedgerResponse) -> ParticipantEvent {
    ParticipantEvent::LedgerApplied {
        txn: TXN.into(),
        result: decide_result(TxnDecision::Commit, &response),
    }
}

/// A participant asked to log the commit (coordinator 0 at epoch 5), its pick made.
fn asked_to_commit() -> (Participant, Vec<ParticipantCommand>) {
    let mut p = Participant::new(1, 3, ParticipantConfig::default());
    let mut asked = prepare(TXN, 100);
    asked.commit_at = Some(5);
    p.step(ParticipantEvent::Prepare(asked));
    let cmds = p.step(picked(TXN, Ok(vec![pod("ns/p1", "n4")])));
    (p, cmds)
}

#[test]
fn asked_to_commit_a_participant_proposes_the_commit_right_behind_its_reservation() {
    let (_, cmds) = asked_to_commit();
    let proposed: Vec<&LedgerCommand> = cmds
        .iter()
        .filter_map(|c| match c {
            ParticipantCommand::ProposeToLedger(cmd) => Some(cmd),
            _ => None,
        })
        .collect();
    assert_eq!(proposed.len(), 2, "{cmds:?}");
    assert!(matches!(
        proposed[0],
        LedgerCommand::TxnReserve {
            shard: 1,
            epoch: 3,
            ..
        }
    ));
    assert_eq!(
        proposed[1],
        &LedgerCommand::TxnDecide {
            txn: TXN.into(),
            shard: 0,
            epoch: 5,
            decision: TxnDecision::Commit,
        },
        "the coordinator's shard and epoch, not the participant's"
    );
}

#[test]
fn asked_to_commit_a_participant_replies_after_the_commits_answer_saying_whether_it_applied() {
    let applied = decide_answer(LedgerResponse::Applied);
    let not_all = decide_answer(LedgerResponse::Refused(Refusal::TxnNotAllPrepared {
        txn: TXN.into(),
        missing: vec![2],
    }));
    for (answer, committed) in [(applied, true), (not_all, false)] {
        let (mut p, _) = asked_to_commit();
        let reserved = p.step(ParticipantEvent::LedgerApplied {
            txn: TXN.into(),
            result: accepted(),
        });
        assert_eq!(
            part_reply(&reserved),
            None,
            "it waits for the commit's answer"
        );
        let cmds = p.step(answer);
        let want = PrepareReply::Prepared {
            placements: vec![pod("ns/p1", "n4")],
            committed,
        };
        assert_eq!(part_reply(&cmds), Some(want.clone()));
        // A resent prepare repeats the answer.
        let mut again = prepare(TXN, 100);
        again.commit_at = Some(5);
        let cmds = p.step(ParticipantEvent::Prepare(again));
        assert_eq!(part_reply(&cmds), Some(want));
    }
}

#[test]
fn asked_to_commit_a_refused_reservation_replies_refused_whatever_the_commit_answers() {
    let (mut p, _) = asked_to_commit();
    let r = Refusal::StaleEpoch {
        shard: 1,
        proposed: 3,
        current: 4,
    };
    let cmds = p.step(ParticipantEvent::LedgerApplied {
        txn: TXN.into(),
        result: reserve_result(1, &LedgerResponse::Refused(r)),
    });
    assert_eq!(
        part_reply(&cmds),
        Some(PrepareReply::Refused(
            "shard 1: stale epoch 3, current is 4".into()
        ))
    );
    let cmds = p.step(decide_answer(LedgerResponse::Applied));
    assert!(cmds.is_empty(), "{cmds:?}");
}

#[test]
fn a_ledger_result_before_any_pick_is_ignored() {
    let mut p = Participant::new(1, 3, ParticipantConfig::default());
    p.step(ParticipantEvent::Prepare(prepare(TXN, 100)));
    let cmds = p.step(ParticipantEvent::LedgerApplied {
        txn: TXN.into(),
        result: accepted(),
    });
    assert!(cmds.is_empty(), "{cmds:?}");
}

#[test]
fn a_repeated_prepare_while_picking_asks_again_and_only_the_first_answer_counts() {
    let mut p = Participant::new(1, 3, ParticipantConfig::default());
    p.step(ParticipantEvent::Prepare(prepare(TXN, 100)));
    let again = p.step(ParticipantEvent::Prepare(prepare(TXN, 100)));
    assert_eq!(picks(&again), 1, "the first pick may have been lost");
    let first = p.step(picked(TXN, Ok(vec![pod("ns/p1", "n4")])));
    assert_eq!(reserve_of(&first), Some(vec![pod("ns/p1", "n4")]));
    let second = p.step(picked(TXN, Ok(vec![pod("ns/p1", "n5")])));
    assert!(second.is_empty(), "{second:?}");
}

#[test]
fn a_repeated_prepare_after_the_pick_does_not_pick_again_it_reproposes_or_repeats() {
    let mut p = Participant::new(1, 3, ParticipantConfig::default());
    p.step(ParticipantEvent::Prepare(prepare(TXN, 100)));
    p.step(picked(TXN, Ok(vec![pod("ns/p1", "n4")])));
    let again = p.step(ParticipantEvent::Prepare(prepare(TXN, 100)));
    assert_eq!(picks(&again), 0);
    assert_eq!(reserve_of(&again), Some(vec![pod("ns/p1", "n4")]));
    let dup = LedgerResponse::Refused(Refusal::TxnAlreadyReserved {
        txn: TXN.into(),
        shard: 1,
    });
    let result = reserve_result(1, &dup);
    p.step(ParticipantEvent::LedgerApplied {
        txn: TXN.into(),
        result,
    });
    let third = p.step(ParticipantEvent::Prepare(prepare(TXN, 100)));
    assert_eq!(picks(&third), 0);
    assert_eq!(
        part_reply(&third),
        Some(PrepareReply::Prepared {
            placements: vec![pod("ns/p1", "n4")],
            committed: false,
        })
    );
}

#[test]
fn a_prepare_past_its_deadline_or_beyond_the_bound_is_refused_without_a_proposal() {
    let mut p = Participant::new(
        1,
        3,
        ParticipantConfig {
            max_in_flight: 1,
            linger_ms: 0,
        },
    );
    p.step(ParticipantEvent::Tick { now_ms: 50 });
    let late = p.step(ParticipantEvent::Prepare(prepare(TXN, 50)));
    assert!(matches!(part_reply(&late), Some(PrepareReply::Refused(r)) if r.contains("deadline")));
    p.step(ParticipantEvent::Prepare(prepare("a", 100)));
    let busy = p.step(ParticipantEvent::Prepare(prepare("b", 100)));
    assert_eq!(busy.len(), 1);
    assert!(matches!(part_reply(&busy), Some(PrepareReply::Refused(r)) if r.contains("in flight")));
}

#[test]
fn a_decision_or_the_deadline_plus_linger_forgets_the_transaction() {
    let mut p = Participant::new(
        1,
        3,
        ParticipantConfig {
            max_in_flight: 4,
            linger_ms: 10,
        },
    );
    p.step(ParticipantEvent::Prepare(prepare("a", 100)));
    p.step(ParticipantEvent::Prepare(prepare("b", 100)));
    p.step(ParticipantEvent::Decided {
        txn: "a".into(),
        decision: TxnDecision::Abort,
    });
    assert_eq!(p.in_flight(), 1);
    p.step(ParticipantEvent::Tick { now_ms: 109 });
    assert_eq!(p.in_flight(), 1);
    p.step(ParticipantEvent::Tick { now_ms: 110 });
    assert_eq!(p.in_flight(), 0);
}
