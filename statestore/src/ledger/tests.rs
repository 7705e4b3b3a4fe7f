//! Unit tests and a property test of the pure ledger.

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;
use crate::ledger::command::MAX_OPEN_TXNS;

fn rv(pairs: &[(&str, i64)]) -> ResourceVec {
    ResourceVec::from_pairs(pairs.iter().copied())
}

fn pod(name: &str, node: &str, res: &[(&str, i64)]) -> PodPlacement {
    PodPlacement {
        pod: name.to_string(),
        node: node.to_string(),
        resources: rv(res),
    }
}

fn gang(name: &str, pods: Vec<PodPlacement>) -> GangPlacement {
    GangPlacement {
        gang: name.to_string(),
        pods,
    }
}

/// Two GPU nodes in shard 1 (owner 10, epoch 1), one cpu node in shard 2 (owner 20, epoch 1).
fn ledger() -> LedgerState {
    let mut s = LedgerState::new();
    let cmds = [
        LedgerCommand::AssignShard {
            shard: 1,
            owner: 10,
            epoch: 1,
            proposer: None,
        },
        LedgerCommand::AssignShard {
            shard: 2,
            owner: 20,
            epoch: 1,
            proposer: None,
        },
        LedgerCommand::UpsertNode {
            node: "gpu-3".into(),
            allocatable: rv(&[("cpu", 8000), ("memory", 1 << 30), ("nvidia.com/gpu", 4)]),
            shard: 1,
        },
        LedgerCommand::UpsertNode {
            node: "gpu-4".into(),
            allocatable: rv(&[("cpu", 8000), ("memory", 1 << 30), ("nvidia.com/gpu", 4)]),
            shard: 1,
        },
        LedgerCommand::UpsertNode {
            node: "cpu-1".into(),
            allocatable: rv(&[("cpu", 4000), ("memory", 1 << 30)]),
            shard: 2,
        },
    ];
    for c in &cmds {
        assert_eq!(apply(&mut s, c), LedgerResponse::Applied, "{c:?}");
    }
    s
}

fn place(shard: ShardId, epoch: Epoch, gangs: Vec<GangPlacement>) -> LedgerCommand {
    LedgerCommand::PlaceGangs {
        shard,
        epoch,
        gangs,
    }
}

fn outcomes(r: LedgerResponse) -> Vec<GangOutcome> {
    match r {
        LedgerResponse::Gangs(g) => g,
        other => panic!("expected gang outcomes, got {other:?}"),
    }
}

#[test]
fn gang_is_accepted_whole_when_every_pod_fits() {
    let mut s = ledger();
    let r = apply(
        &mut s,
        &place(
            1,
            1,
            vec![gang(
                "ns/train",
                vec![
                    pod("ns/a", "gpu-3", &[("nvidia.com/gpu", 4)]),
                    pod("ns/b", "gpu-4", &[("nvidia.com/gpu", 4)]),
                ],
            )],
        ),
    );
    assert!(outcomes(r).iter().all(GangOutcome::is_accepted));
    assert_eq!(s.placements.len(), 2);
    assert_eq!(s.usage_of("gpu-3").get("nvidia.com/gpu"), 4);
    assert!(check_all(&s).is_empty());
}

#[test]
fn gang_is_not_partially_placed_when_one_node_is_short_and_the_reason_names_it() {
    let mut s = ledger();
    apply(
        &mut s,
        &place(
            1,
            1,
            vec![gang(
                "ns/small",
                vec![pod("ns/s", "gpu-3", &[("nvidia.com/gpu", 3)])],
            )],
        ),
    );
    let before = s.clone();
    let r = apply(
        &mut s,
        &place(
            1,
            1,
            vec![gang(
                "ns/big",
                vec![
                    pod("ns/a", "gpu-4", &[("nvidia.com/gpu", 2)]),
                    pod("ns/b", "gpu-3", &[("nvidia.com/gpu", 2)]),
                ],
            )],
        ),
    );
    let o = outcomes(r);
    match &o[0].decision {
        GangDecision::Refused(reason) => {
            assert_eq!(
                reason.to_string(),
                "node gpu-3: nvidia.com/gpu 2 requested, 1 free"
            );
        }
        GangDecision::Accepted => panic!("must be refused"),
    }
    assert_eq!(s, before, "a refused gang leaves no trace");
}

#[test]
fn later_gang_in_the_same_batch_sees_the_earlier_gangs_usage() {
    let mut s = ledger();
    let r = apply(
        &mut s,
        &place(
            1,
            1,
            vec![
                gang(
                    "ns/g1",
                    vec![pod("ns/a", "gpu-3", &[("nvidia.com/gpu", 3)])],
                ),
                gang(
                    "ns/g2",
                    vec![pod("ns/b", "gpu-3", &[("nvidia.com/gpu", 2)])],
                ),
                gang(
                    "ns/g3",
                    vec![pod("ns/c", "gpu-3", &[("nvidia.com/gpu", 1)])],
                ),
            ],
        ),
    );
    let o = outcomes(r);
    assert!(o[0].is_accepted());
    assert!(!o[1].is_accepted());
    assert!(o[2].is_accepted());
    assert_eq!(s.usage_of("gpu-3").get("nvidia.com/gpu"), 4);
}

#[test]
fn a_pod_placed_twice_an_unknown_node_and_a_foreign_node_are_refused() {
    let mut s = ledger();
    apply(
        &mut s,
        &place(
            1,
            1,
            vec![gang("ns/g", vec![pod("ns/a", "gpu-3", &[("cpu", 1)])])],
        ),
    );
    let o = outcomes(apply(
        &mut s,
        &place(
            1,
            1,
            vec![
                gang("ns/g", vec![pod("ns/a", "gpu-4", &[("cpu", 1)])]),
                gang("ns/h", vec![pod("ns/x", "nope", &[("cpu", 1)])]),
                gang("ns/i", vec![pod("ns/y", "cpu-1", &[("cpu", 1)])]),
                gang(
                    "ns/j",
                    vec![
                        pod("ns/z", "gpu-4", &[("cpu", 1)]),
                        pod("ns/z", "gpu-4", &[("cpu", 1)]),
                    ],
                ),
                gang("ns/k", vec![pod("ns/w", "gpu-4", &[("cpu", -5)])]),
                gang("ns/l", vec![]),
            ],
        ),
    ));
    let reasons: Vec<String> = o
        .iter()
        .map(|g| match &g.decision {
            GangDecision::Refused(r) => r.to_string(),
            GangDecision::Accepted => "accepted".into(),
        })
        .collect();
    assert_eq!(
        reasons,
        vec![
            "pod ns/a: already placed on node gpu-3",
            "node nope: unknown node",
            "node cpu-1: belongs to shard 2, not shard 1",
            "pod ns/z: appears twice in one proposal",
            "pod ns/w: cpu has negative quantity -5",
            "gang ns/l: no pods",
        ]
    );
    assert_eq!(s.placements.len(), 1);
}

#[test]
fn a_deposed_owner_at_a_stale_epoch_cannot_write() {
    let mut s = ledger();
    assert_eq!(
        apply(
            &mut s,
            &LedgerCommand::AssignShard {
                shard: 1,
                owner: 11,
                epoch: 2,
                proposer: None,
            }
        ),
        LedgerResponse::Applied
    );
    let before = s.clone();
    let cmd = place(
        1,
        1,
        vec![gang("ns/g", vec![pod("ns/a", "gpu-3", &[("cpu", 1)])])],
    );
    let r = apply(&mut s, &cmd);
    assert_eq!(
        r.refusal().map(ToString::to_string).as_deref(),
        Some("shard 1: stale epoch 1, current is 2")
    );
    assert!(check_fencing(&before, &cmd, &r, &s).is_empty());
    assert_eq!(s, before);
    // The epoch must increase.
    let r = apply(
        &mut s,
        &LedgerCommand::AssignShard {
            shard: 1,
            owner: 10,
            epoch: 2,
            proposer: None,
        },
    );
    assert!(matches!(
        r,
        LedgerResponse::Refused(Refusal::EpochNotIncreasing { .. })
    ));
}

#[test]
fn cpu_is_overcommitted_by_the_factor_but_gpus_never_are() {
    let mut s = ledger();
    assert_eq!(
        apply(
            &mut s,
            &LedgerCommand::SetOvercommit {
                factor: OvercommitFactor {
                    numerator: 3,
                    denominator: 2
                }
            }
        ),
        LedgerResponse::Applied
    );
    let o = outcomes(apply(
        &mut s,
        &place(
            1,
            1,
            vec![
                gang("ns/c", vec![pod("ns/a", "gpu-3", &[("cpu", 12_000)])]),
                gang("ns/g", vec![pod("ns/b", "gpu-3", &[("nvidia.com/gpu", 5)])]),
            ],
        ),
    ));
    assert!(o[0].is_accepted());
    assert!(!o[1].is_accepted());
    // Lowering the factor back would overbook gpu-3's cpu: refused.
    let r = apply(
        &mut s,
        &LedgerCommand::SetOvercommit {
            factor: OvercommitFactor::NONE,
        },
    );
    assert!(matches!(
        r,
        LedgerResponse::Refused(Refusal::CapacityBelowUsage { .. })
    ));
}

#[test]
fn placement_moves_from_assumed_to_bound_to_released_and_frees_the_node() {
    let mut s = ledger();
    apply(
        &mut s,
        &place(
            1,
            1,
            vec![gang(
                "ns/g",
                vec![pod("ns/a", "gpu-3", &[("nvidia.com/gpu", 4)])],
            )],
        ),
    );
    let bind = LedgerCommand::MarkBound {
        shard: 1,
        epoch: 1,
        pods: vec!["ns/a".into()],
    };
    assert_eq!(
        apply(&mut s, &bind),
        LedgerResponse::Pods {
            changed: 1,
            unchanged: 0
        }
    );
    assert_eq!(
        apply(&mut s, &bind),
        LedgerResponse::Pods {
            changed: 0,
            unchanged: 1
        }
    );
    assert_eq!(s.placements["ns/a"].state, PlacementState::Bound);
    // Shrinking the node below its committed usage is refused; removing it too.
    let shrink = LedgerCommand::UpsertNode {
        node: "gpu-3".into(),
        allocatable: rv(&[("nvidia.com/gpu", 2)]),
        shard: 1,
    };
    assert!(apply(&mut s, &shrink).refusal().is_some());
    assert!(
        apply(
            &mut s,
            &LedgerCommand::RemoveNode {
                node: "gpu-3".into()
            }
        )
        .refusal()
        .is_some()
    );
    let rel = LedgerCommand::Release {
        shard: 1,
        epoch: 1,
        pods: vec!["ns/a".into()],
        reason: ReleaseReason::Finished,
    };
    assert_eq!(
        apply(&mut s, &rel),
        LedgerResponse::Pods {
            changed: 1,
            unchanged: 0
        }
    );
    assert_eq!(
        apply(&mut s, &rel),
        LedgerResponse::Pods {
            changed: 0,
            unchanged: 1
        }
    );
    assert!(s.usage.is_empty());
    assert_eq!(s.released_total, 1);
    assert_eq!(apply(&mut s, &shrink), LedgerResponse::Applied);
}

fn begin(txn: &str, deadline_ms: u64) -> LedgerCommand {
    LedgerCommand::TxnBegin {
        txn: txn.into(),
        shard: 1,
        epoch: 1,
        participants: vec![1, 2],
        deadline_ms,
    }
}

fn reserve(txn: &str, shard: ShardId, p: PodPlacement) -> LedgerCommand {
    LedgerCommand::TxnReserve {
        txn: txn.into(),
        shard,
        epoch: 1,
        gang: gang("ns/x", vec![p]),
    }
}

#[test]
fn cross_shard_txn_commits_only_after_every_participant_reserved() {
    let mut s = ledger();
    assert_eq!(apply(&mut s, &begin("t1", 1000)), LedgerResponse::Applied);
    let r = apply(
        &mut s,
        &reserve("t1", 1, pod("ns/a", "gpu-3", &[("cpu", 100)])),
    );
    assert!(outcomes(r)[0].is_accepted());
    let commit = LedgerCommand::TxnDecide {
        txn: "t1".into(),
        shard: 1,
        epoch: 1,
        decision: TxnDecision::Commit,
    };
    assert!(matches!(
        apply(&mut s, &commit),
        LedgerResponse::Refused(Refusal::TxnNotAllPrepared { .. })
    ));
    let r = apply(
        &mut s,
        &reserve("t1", 2, pod("ns/b", "cpu-1", &[("cpu", 100)])),
    );
    assert!(outcomes(r)[0].is_accepted());
    assert!(check_all(&s).is_empty());
    assert_eq!(apply(&mut s, &commit), LedgerResponse::Applied);
    assert_eq!(
        apply(&mut s, &commit),
        LedgerResponse::Applied,
        "idempotent"
    );
    assert_eq!(s.placements["ns/a"].state, PlacementState::Assumed);
    assert_eq!(s.placements["ns/b"].state, PlacementState::Assumed);
    assert!(check_all(&s).is_empty());
    // A participant resending a reservation whose answer it lost learns that it landed,
    // also after the commit: already reserved is answered before already decided.
    let before = s.clone();
    assert!(matches!(
        apply(
            &mut s,
            &reserve("t1", 2, pod("ns/b", "cpu-1", &[("cpu", 100)]))
        ),
        LedgerResponse::Refused(Refusal::TxnAlreadyReserved { shard: 2, .. })
    ));
    assert_eq!(s, before, "the resend changes nothing");
    // Another pick of the same shard (a new owner's) is not told it landed: the
    // coordinator binds what the participant's reply names.
    assert_eq!(
        apply(
            &mut s,
            &reserve("t1", 2, pod("ns/b", "gpu-3", &[("cpu", 100)]))
        ),
        LedgerResponse::Refused(Refusal::PodAlreadyPlaced {
            pod: "ns/b".into(),
            node: "cpu-1".into()
        })
    );
    assert_eq!(s, before);
}

#[test]
fn undecided_txn_is_aborted_at_its_deadline_and_leaves_no_reservation() {
    let mut s = ledger();
    apply(&mut s, &begin("t1", 1000));
    apply(
        &mut s,
        &reserve("t1", 1, pod("ns/a", "gpu-3", &[("nvidia.com/gpu", 4)])),
    );
    assert_eq!(s.usage_of("gpu-3").get("nvidia.com/gpu"), 4);
    assert_eq!(
        apply(&mut s, &LedgerCommand::ExpireAt { now_ms: 999 }),
        LedgerResponse::Expired { aborted: vec![] }
    );
    assert_eq!(
        apply(&mut s, &LedgerCommand::ExpireAt { now_ms: 1000 }),
        LedgerResponse::Expired {
            aborted: vec!["t1".to_string()]
        }
    );
    assert!(s.placements.is_empty());
    assert!(s.usage.is_empty());
    assert_eq!(s.txns["t1"].decision, Some(TxnDecision::Abort));
    // A late reserve is refused; the decided txn is forgotten after the retention.
    let late = apply(
        &mut s,
        &reserve("t1", 2, pod("ns/b", "cpu-1", &[("cpu", 1)])),
    );
    assert!(matches!(
        late,
        LedgerResponse::Refused(Refusal::TxnAlreadyDecided { .. })
    ));
    apply(
        &mut s,
        &LedgerCommand::ExpireAt {
            now_ms: 1000 + command::TXN_RETENTION_MS,
        },
    );
    assert!(s.txns.is_empty());
    assert!(check_all(&s).is_empty());
}

#[test]
fn only_the_coordinator_decides_and_a_reservation_cannot_be_released_directly() {
    let mut s = ledger();
    apply(&mut s, &begin("t1", 1000));
    apply(
        &mut s,
        &reserve("t1", 2, pod("ns/b", "cpu-1", &[("cpu", 1)])),
    );
    let r = apply(
        &mut s,
        &LedgerCommand::TxnDecide {
            txn: "t1".into(),
            shard: 2,
            epoch: 1,
            decision: TxnDecision::Abort,
        },
    );
    assert!(matches!(
        r,
        LedgerResponse::Refused(Refusal::TxnNotCoordinator { .. })
    ));
    let r = apply(
        &mut s,
        &LedgerCommand::Release {
            shard: 2,
            epoch: 1,
            pods: vec!["ns/b".into()],
            reason: ReleaseReason::Evicted,
        },
    );
    assert!(matches!(
        r,
        LedgerResponse::Refused(Refusal::WrongPlacementState { .. })
    ));
    let abort = LedgerCommand::TxnDecide {
        txn: "t1".into(),
        shard: 1,
        epoch: 1,
        decision: TxnDecision::Abort,
    };
    assert_eq!(apply(&mut s, &abort), LedgerResponse::Applied);
    assert!(s.placements.is_empty());
}

fn decide(txn: &str, decision: TxnDecision) -> LedgerCommand {
    LedgerCommand::TxnDecide {
        txn: txn.into(),
        shard: 1,
        epoch: 1,
        decision,
    }
}

/// `MAX_OPEN_TXNS` undecided transactions at once, however many decided ones the ledger
/// still keeps (the count is skipped while there are fewer transactions than the limit).
#[test]
fn at_most_1024_transactions_are_open_at_once_however_many_decided_ones_are_kept() {
    let mut s = ledger();
    for t in 0..MAX_OPEN_TXNS {
        let r = apply(&mut s, &begin(&format!("t{t}"), 60_000));
        assert_eq!(r.refusal(), None, "t{t}");
    }
    let one_more =
        |s: &mut LedgerState, txn: &str| apply(s, &begin(txn, 60_000)).refusal().cloned();
    assert!(matches!(
        one_more(&mut s, "extra-1"),
        Some(Refusal::TooLarge {
            count: 1025,
            limit: 1024,
            ..
        })
    ));
    for t in 0..MAX_OPEN_TXNS / 2 {
        apply(&mut s, &decide(&format!("t{t}"), TxnDecision::Abort));
    }
    assert_eq!(one_more(&mut s, "extra-1"), None, "512 open, 1024 kept");
    for t in 0..MAX_OPEN_TXNS / 2 - 1 {
        assert_eq!(one_more(&mut s, &format!("late-{t}")), None);
    }
    assert!(matches!(
        one_more(&mut s, "extra-2"),
        Some(Refusal::TooLarge { limit: 1024, .. })
    ));
    assert_eq!(s.open_txn_count(), MAX_OPEN_TXNS);
    assert!(s.txns.len() > MAX_OPEN_TXNS);
}

#[test]
fn a_decision_finds_its_reservations_in_the_txn_list_and_the_list_check_catches_a_gap() {
    let mut s = ledger();
    apply(&mut s, &begin("t1", 1000));
    apply(
        &mut s,
        &reserve("t1", 1, pod("ns/a", "gpu-3", &[("cpu", 100)])),
    );
    apply(
        &mut s,
        &reserve("t1", 2, pod("ns/b", "cpu-1", &[("cpu", 100)])),
    );
    let both: BTreeSet<String> = ["ns/a".to_string(), "ns/b".to_string()].into();
    assert_eq!(s.txns["t1"].reserved.as_ref(), Some(&both));
    assert!(check_reservation_lists(&s).is_empty());
    // Planted: a list missing a reserved pod, and a decided transaction still listing one.
    let mut gap = s.clone();
    if let Some(list) = gap.txns.get_mut("t1").and_then(|t| t.reserved.as_mut()) {
        list.remove("ns/b");
    }
    let v = check_reservation_lists(&gap);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].invariant, "index");
    assert!(
        v[0].detail.starts_with("txn t1: lists reserved pods"),
        "{}",
        v[0]
    );
    assert_eq!(
        apply(&mut s, &decide("t1", TxnDecision::Commit)),
        LedgerResponse::Applied
    );
    assert_eq!(s.placements["ns/a"].state, PlacementState::Assumed);
    assert_eq!(s.placements["ns/b"].state, PlacementState::Assumed);
    assert_eq!(
        s.txns["t1"].reserved,
        Some(BTreeSet::new()),
        "emptied by the decision"
    );
    assert!(check_all(&s).is_empty());
    let mut stale = s.clone();
    if let Some(t) = stale.txns.get_mut("t1") {
        t.reserved = Some(both);
    }
    assert_eq!(check_reservation_lists(&stale).len(), 1);
}

#[test]
fn a_txn_recorded_without_a_reservation_list_is_decided_by_scanning_the_placements() {
    let mut s = ledger();
    apply(&mut s, &begin("t1", 1000));
    apply(
        &mut s,
        &reserve("t1", 2, pod("ns/b", "cpu-1", &[("cpu", 100)])),
    );
    // As a snapshot of a version that kept no list decodes: without the field.
    let mut record = serde_json::to_value(&s.txns["t1"]).unwrap();
    record.as_object_mut().unwrap().remove("reserved");
    let old: Txn = serde_json::from_value(record).unwrap();
    assert_eq!(old.reserved, None);
    s.txns.insert("t1".into(), old);
    assert!(
        check_all(&s).is_empty(),
        "a record without a list is not judged"
    );
    assert_eq!(
        apply(&mut s, &decide("t1", TxnDecision::Abort)),
        LedgerResponse::Applied
    );
    assert!(
        s.placements.is_empty(),
        "the reservation was found and released"
    );
    assert!(s.usage.is_empty());
    assert!(check_all(&s).is_empty());
}

#[test]
fn the_same_log_gives_byte_identical_state_on_two_replicas() {
    let log: Vec<LedgerCommand> = {
        let mut v = vec![
            LedgerCommand::AssignShard {
                shard: 1,
                owner: 1,
                epoch: 1,
                proposer: None,
            },
            LedgerCommand::UpsertNode {
                node: "n1".into(),
                allocatable: rv(&[("cpu", 1000), ("nvidia.com/gpu", 2)]),
                shard: 1,
            },
        ];
        for i in 0..20 {
            v.push(place(
                1,
                1,
                vec![gang(
                    &format!("ns/g{i}"),
                    vec![pod(&format!("ns/p{i}"), "n1", &[("cpu", 100)])],
                )],
            ));
            if i % 3 == 0 {
                v.push(LedgerCommand::Release {
                    shard: 1,
                    epoch: 1,
                    pods: vec![format!("ns/p{}", i / 2)],
                    reason: ReleaseReason::Finished,
                });
            }
        }
        v
    };
    let replay = || {
        let mut s = LedgerState::new();
        let responses: Vec<LedgerResponse> = log.iter().map(|c| apply(&mut s, c)).collect();
        (s, responses)
    };
    let (a, ra) = replay();
    let (b, rb) = replay();
    assert_eq!(ra, rb);
    assert_eq!(a.to_canonical_bytes(), b.to_canonical_bytes());
    assert_eq!(a.fingerprint(), b.fingerprint());
    // A state that went through serialization (a snapshot) continues identically.
    let mut restored: LedgerState = serde_json::from_slice(&a.to_canonical_bytes()).unwrap();
    let mut a2 = a.clone();
    let extra = LedgerCommand::Release {
        shard: 1,
        epoch: 1,
        pods: vec!["ns/p19".into()],
        reason: ReleaseReason::Finished,
    };
    assert_eq!(apply(&mut restored, &extra), apply(&mut a2, &extra));
    assert_eq!(restored.fingerprint(), a2.fingerprint());
}

// ---- property test: random command sequences never break I1, I2, I4 or the index ----

const NODES: [&str; 3] = ["n0", "n1", "n2"];
const RESOURCES: [&str; 3] = ["cpu", "memory", "nvidia.com/gpu"];

fn arb_resources() -> impl Strategy<Value = ResourceVec> {
    proptest::collection::vec((0usize..3, -1i64..6), 0..3).prop_map(|v| {
        v.into_iter()
            .map(|(r, q)| (RESOURCES[r], q))
            .collect::<ResourceVec>()
    })
}

fn arb_pod() -> impl Strategy<Value = PodPlacement> {
    (0u8..12, 0usize..4, arb_resources()).prop_map(|(p, n, resources)| PodPlacement {
        pod: format!("ns/p{p}"),
        node: NODES.get(n).copied().unwrap_or("ghost").to_string(),
        resources,
    })
}

fn arb_gang() -> impl Strategy<Value = GangPlacement> {
    (0u8..4, proptest::collection::vec(arb_pod(), 0..4)).prop_map(|(g, pods)| GangPlacement {
        gang: format!("ns/g{g}"),
        pods,
    })
}

fn arb_command() -> impl Strategy<Value = LedgerCommand> {
    let pods = || proptest::collection::vec((0u8..12).prop_map(|p| format!("ns/p{p}")), 0..4);
    prop_oneof![
        (0usize..3, arb_resources(), 0u32..2).prop_map(|(n, allocatable, shard)| {
            LedgerCommand::UpsertNode {
                node: NODES[n].to_string(),
                allocatable,
                shard,
            }
        }),
        (0usize..3).prop_map(|n| LedgerCommand::RemoveNode {
            node: NODES[n].to_string()
        }),
        (1u32..4, 1u32..3).prop_map(|(numerator, denominator)| LedgerCommand::SetOvercommit {
            factor: OvercommitFactor {
                numerator,
                denominator
            }
        }),
        (0u32..2, 0u64..3, 0u64..5).prop_map(|(shard, owner, epoch)| LedgerCommand::AssignShard {
            shard,
            owner,
            epoch,
            proposer: None,
        }),
        (
            0u32..2,
            0u64..5,
            proptest::collection::vec(arb_gang(), 0..3)
        )
            .prop_map(|(shard, epoch, gangs)| LedgerCommand::PlaceGangs {
                shard,
                epoch,
                gangs
            }),
        (0u32..2, 0u64..5, pods()).prop_map(|(shard, epoch, pods)| LedgerCommand::MarkBound {
            shard,
            epoch,
            pods
        }),
        (0u32..2, 0u64..5, pods()).prop_map(|(shard, epoch, pods)| LedgerCommand::Release {
            shard,
            epoch,
            pods,
            reason: ReleaseReason::Finished
        }),
        (0u8..3, 0u32..2, 0u64..5, 0u64..100).prop_map(|(t, shard, epoch, deadline_ms)| {
            LedgerCommand::TxnBegin {
                txn: format!("t{t}"),
                shard,
                epoch,
                participants: vec![0, 1],
                deadline_ms,
            }
        }),
        (0u8..3, 0u32..2, 0u64..5, arb_gang()).prop_map(|(t, shard, epoch, gang)| {
            LedgerCommand::TxnReserve {
                txn: format!("t{t}"),
                shard,
                epoch,
                gang,
            }
        }),
        (0u8..3, 0u32..2, 0u64..5, any::<bool>()).prop_map(|(t, shard, epoch, c)| {
            LedgerCommand::TxnDecide {
                txn: format!("t{t}"),
                shard,
                epoch,
                decision: if c {
                    TxnDecision::Commit
                } else {
                    TxnDecision::Abort
                },
            }
        }),
        (0u64..200).prop_map(|now_ms| LedgerCommand::ExpireAt { now_ms }),
    ]
}

proptest! {
    #![proptest_config(crate::proptest_config(256, 0x0017_1ED6))]

    #[test]
    fn random_command_sequences_never_violate_the_invariants(
        cmds in proptest::collection::vec(arb_command(), 1..60)
    ) {
        let mut s = LedgerState::new();
        for cmd in &cmds {
            let before = s.clone();
            let r = apply(&mut s, cmd);
            let mut v = check_all(&s);
            v.extend(check_fencing(&before, cmd, &r, &s));
            if r.refusal().is_some() {
                prop_assert_eq!(&before, &s, "a refused command changed the state: {:?}", cmd);
            }
            prop_assert!(v.is_empty(), "after {:?}: {:?}", cmd, v);
        }
        // The keys each command records are every key it wrote: copying just those from
        // the state keeps a mirror equal to it (what incremental reads rely on).
        let mut mirror = LedgerState::new();
        let mut tracked = LedgerState::new();
        for cmd in &cmds {
            let mut changes = Changes::recording();
            apply_recording(&mut tracked, cmd, &ApplyContext::IN_PROCESS, &mut changes);
            for key in changes.into_keys() {
                StateEntry::of(&tracked, &key).apply_to(&mut mirror);
            }
            prop_assert_eq!(&mirror, &tracked, "after {:?}", cmd);
        }
        // Replaying the same log gives byte-identical state.
        let mut replay = LedgerState::new();
        for cmd in &cmds {
            apply(&mut replay, cmd);
        }
        prop_assert_eq!(replay.to_canonical_bytes(), s.to_canonical_bytes());
        // Every kind of entry survives a page on the wire (postcard): a full read of the
        // state in pages gives the state back.
        prop_assert_eq!(read_in_pages(&s), s);
    }
}

/// `state` read in full through the wire's pages of changes, small ones.
fn read_in_pages(state: &LedgerState) -> LedgerState {
    use crate::network::wire::ledger_changes::{ChangesQuery, page_from_wire, serve_page};
    let journal = crate::state_machine::ChangeJournal::starting_at(1);
    let mut read = LedgerState::new();
    let mut after = None;
    loop {
        let query = ChangesQuery {
            since: None,
            after,
            max_bytes: 64,
        };
        let wire = serve_page(state, 1, &journal, &query).expect("a page is served");
        let page = page_from_wire(&wire).expect("a served page decodes");
        assert_eq!(page.entries.len(), wire.entry_count as usize);
        for entry in page.entries {
            entry.apply_to(&mut read);
        }
        after = page.next;
        if after.is_none() {
            return read;
        }
    }
}

fn assign(shard: ShardId, owner: u64, epoch: Epoch, proposer: Option<LeaderTerm>) -> LedgerCommand {
    LedgerCommand::AssignShard {
        shard,
        owner,
        epoch,
        proposer,
    }
}

fn leader(replica: u64, term: u64) -> LeaderTerm {
    LeaderTerm { replica, term }
}

/// The context of an entry appended by `by` while replicas 1, 2, 3, 10 and 20 are members.
fn raft(by: LeaderTerm) -> ApplyContext {
    ApplyContext::raft(by, [1, 2, 3, 10, 20])
}

#[test]
fn a_deposed_leaders_assign_shard_is_refused() {
    let mut s = ledger();
    let before = s.clone();
    // Replica 1 led in term 4 and proposed; by the time the entry was appended replica 2
    // led in term 5 (the proposal was forwarded to it).
    let r = apply_with(
        &mut s,
        &assign(1, 1, 2, Some(leader(1, 4))),
        &raft(leader(2, 5)),
    );
    assert_eq!(
        r,
        LedgerResponse::Refused(Refusal::DeposedLeader {
            shard: 1,
            proposer: leader(1, 4),
            appended_by: leader(2, 5),
        })
    );
    assert_eq!(s, before);
    // The same replica in a later term is another leader too.
    let r = apply_with(
        &mut s,
        &assign(1, 1, 2, Some(leader(1, 4))),
        &raft(leader(1, 6)),
    );
    assert!(
        matches!(r.refusal(), Some(Refusal::DeposedLeader { .. })),
        "{r:?}"
    );
    assert_eq!(s, before);
    // The leader that appends its own proposal takes the shard.
    let r = apply_with(
        &mut s,
        &assign(1, 2, 2, Some(leader(2, 5))),
        &raft(leader(2, 5)),
    );
    assert_eq!(r, LedgerResponse::Applied);
    assert_eq!(s.shards[&1], ShardAssignment { owner: 2, epoch: 2 });
}

/// The leader is killed after its AssignShard committed and before it heard so. Whoever
/// retries (the same replica leading again, or the new leader), the shard stays owned:
/// an identical assignment is a no-op that succeeds, a bump takes it over, and even a
/// refused stale retry leaves the committed owner in place.
#[test]
fn a_retried_assign_shard_after_a_lost_answer_never_orphans_the_shard() {
    let mut s = ledger();
    let committed = apply_with(
        &mut s,
        &assign(1, 1, 2, Some(leader(1, 3))),
        &raft(leader(1, 3)),
    );
    assert_eq!(committed, LedgerResponse::Applied);
    let owned = ShardAssignment { owner: 1, epoch: 2 };
    // The same replica, restarted and leading in term 5, proposes the same assignment.
    let retry = apply_with(
        &mut s,
        &assign(1, 1, 2, Some(leader(1, 5))),
        &raft(leader(1, 5)),
    );
    assert_eq!(retry, LedgerResponse::Applied);
    assert_eq!(s.shards[&1], owned);
    // Its old entry re-sent verbatim is refused (its term is gone), and changes nothing.
    let stale = apply_with(
        &mut s,
        &assign(1, 1, 2, Some(leader(1, 3))),
        &raft(leader(2, 4)),
    );
    assert!(
        matches!(stale.refusal(), Some(Refusal::DeposedLeader { .. })),
        "{stale:?}"
    );
    assert_eq!(s.shards[&1], owned);
    // The new leader retries the move it inherited: the same assignment, success.
    let inherited = apply_with(
        &mut s,
        &assign(1, 1, 2, Some(leader(2, 4))),
        &raft(leader(2, 4)),
    );
    assert_eq!(inherited, LedgerResponse::Applied);
    assert_eq!(s.shards[&1], owned);
    // In process (no terms) the identical retry is a success too.
    assert_eq!(
        apply(&mut s, &assign(1, 1, 2, None)),
        LedgerResponse::Applied
    );
    // Another owner at the same epoch is still refused.
    assert!(matches!(
        apply(&mut s, &assign(1, 2, 2, None)).refusal(),
        Some(Refusal::EpochNotIncreasing { .. })
    ));
    assert_eq!(s.shards[&1], owned);
}

#[test]
fn epochs_that_leave_no_room_or_jump_too_far_are_refused() {
    let mut s = ledger();
    let before = s.clone();
    for epoch in [u64::MAX, 1 + command::MAX_EPOCH_STEP + 1] {
        let r = apply(&mut s, &assign(1, 10, epoch, None));
        assert_eq!(
            r,
            LedgerResponse::Refused(Refusal::EpochOutOfRange {
                shard: 1,
                proposed: epoch,
                current: 1,
                max: 1 + command::MAX_EPOCH_STEP,
            }),
        );
        assert_eq!(s, before);
    }
    let top = 1 + command::MAX_EPOCH_STEP;
    assert_eq!(
        apply(&mut s, &assign(1, 10, top, None)),
        LedgerResponse::Applied
    );
    // Near the end of the space the last epoch is u64::MAX - 1: never u64::MAX.
    s.shards.insert(
        1,
        ShardAssignment {
            owner: 10,
            epoch: u64::MAX - 2,
        },
    );
    assert_eq!(
        apply(&mut s, &assign(1, 10, u64::MAX - 1, None)),
        LedgerResponse::Applied
    );
    assert!(matches!(
        apply(&mut s, &assign(1, 10, u64::MAX, None)).refusal(),
        Some(Refusal::EpochOutOfRange { max, .. }) if *max == u64::MAX - 1
    ));
}

#[test]
fn an_owner_that_is_not_a_raft_member_is_refused() {
    let mut s = ledger();
    let before = s.clone();
    let r = apply_with(
        &mut s,
        &assign(1, 99, 2, Some(leader(1, 2))),
        &raft(leader(1, 2)),
    );
    assert_eq!(
        r,
        LedgerResponse::Refused(Refusal::UnknownOwner {
            shard: 1,
            owner: 99,
            members: vec![1, 2, 3, 10, 20],
        })
    );
    assert!(
        r.refusal()
            .is_some_and(|r| r.to_string().contains("owner 99"))
    );
    assert_eq!(s, before);
}

#[test]
fn the_ledger_clock_never_goes_back() {
    let mut s = ledger();
    apply(&mut s, &begin("t1", 1000));
    assert_eq!(
        apply(&mut s, &LedgerCommand::ExpireAt { now_ms: 1500 }),
        LedgerResponse::Expired {
            aborted: vec!["t1".to_string()]
        }
    );
    assert_eq!(s.clock_ms, 1500);
    let before = s.clone();
    assert_eq!(
        apply(&mut s, &LedgerCommand::ExpireAt { now_ms: 1499 }),
        LedgerResponse::Refused(Refusal::ClockBehind {
            proposed: 1499,
            latest: 1500
        })
    );
    assert_eq!(s, before);
    // The same time again is not going back.
    assert_eq!(
        apply(&mut s, &LedgerCommand::ExpireAt { now_ms: 1500 }),
        LedgerResponse::Expired { aborted: vec![] }
    );
}

#[test]
fn the_ledger_clock_cannot_jump_more_than_an_hour_past_its_time_or_latest_deadline() {
    let mut s = ledger();
    // Before any time is known, any time is accepted.
    assert!(
        apply(&mut s, &LedgerCommand::ExpireAt { now_ms: 10_000 })
            .refusal()
            .is_none()
    );
    let far = 10_000 + command::MAX_CLOCK_STEP_MS + 1;
    let before = s.clone();
    assert_eq!(
        apply(&mut s, &LedgerCommand::ExpireAt { now_ms: far }),
        LedgerResponse::Refused(Refusal::ClockJump {
            proposed: far,
            anchor: 10_000,
            max_step: command::MAX_CLOCK_STEP_MS,
        })
    );
    assert_eq!(s, before);
    // A transaction's deadline is a time the ledger knows: the bound counts from it.
    apply(&mut s, &begin("t1", 20_000));
    let ok = 20_000 + command::MAX_CLOCK_STEP_MS;
    assert_eq!(
        apply(&mut s, &LedgerCommand::ExpireAt { now_ms: ok }),
        LedgerResponse::Expired {
            aborted: vec!["t1".to_string()]
        }
    );
    assert_eq!(s.clock_ms, ok);
}

#[test]
fn entries_and_states_written_before_proposers_and_clocks_still_decode() {
    let cmd: LedgerCommand =
        serde_json::from_str(r#"{"AssignShard":{"shard":1,"owner":2,"epoch":3}}"#).unwrap();
    assert_eq!(cmd, assign(1, 2, 3, None));
    let mut old = serde_json::to_value(ledger()).unwrap();
    old.as_object_mut().unwrap().remove("clock_ms");
    let state: LedgerState = serde_json::from_value(old).unwrap();
    assert_eq!(state, ledger());
}
