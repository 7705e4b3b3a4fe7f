//! Conversions (round trips, malformed fields named) and the service on loopback.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use phalanx_proto::coord as pb;
use phalanx_proto::coord::coordinator_service_client::CoordinatorServiceClient;
use phalanx_proto::coord::coordinator_service_server::{
    CoordinatorService, CoordinatorServiceServer,
};
use phalanx_statestore::ledger::TxnDecision;
use phalanx_statestore::{PodPlacement, ResourceVec};

use super::loopback::{LoopbackNet, LoopbackStats};
use super::wire::{self, CoordMessage, Delivery, Route, WireMessage};
use super::{ClientError, CoordClient, CoordServer, SharedCoordinators, lock};
use crate::coord::{
    CoordConfig, CoordEvent, Coordinator, ParticipantEvent, Phase, Prepare, PrepareReply, StartTxn,
};

const TXN: &str = "0:1:7:ns/g";

fn pod(name: &str, node: &str, gpus: i64) -> PodPlacement {
    PodPlacement {
        pod: name.into(),
        node: node.into(),
        resources: ResourceVec::from_pairs([("nvidia.com/gpu", gpus), ("cpu", 500)]),
    }
}

fn prepare_msg(route: Route) -> CoordMessage {
    CoordMessage::Prepare {
        route,
        coordinator_epoch: 4,
        prepare: Prepare {
            txn: TXN.into(),
            coordinator: 0,
            gang: "ns/g".into(),
            placements: vec![pod("ns/p0", "n5", 2), pod("ns/p1", "n6", 1)],
            deadline_ms: 5_000,
            // Asked to log the commit: on the wire a flag, the epoch being the
            // coordinator's.
            commit_at: Some(4),
        },
    }
}

fn every_message() -> Vec<CoordMessage> {
    let route = Route { shard: 2, epoch: 3 };
    vec![
        prepare_msg(route),
        CoordMessage::Reply {
            route: Route { shard: 0, epoch: 4 },
            txn: TXN.into(),
            participant: 2,
            participant_epoch: 3,
            reply: PrepareReply::Prepared {
                placements: vec![pod("ns/p0", "n9", 1)],
                committed: true,
            },
        },
        CoordMessage::Reply {
            route: Route { shard: 0, epoch: 4 },
            txn: TXN.into(),
            participant: 2,
            participant_epoch: 3,
            reply: PrepareReply::Refused("no free GPU on n5".into()),
        },
        CoordMessage::Decide {
            route,
            txn: TXN.into(),
            coordinator: 0,
            coordinator_epoch: 4,
            decision: TxnDecision::Commit,
        },
        CoordMessage::Decide {
            route,
            txn: TXN.into(),
            coordinator: 0,
            coordinator_epoch: 4,
            decision: TxnDecision::Abort,
        },
    ]
}

#[test]
fn every_message_survives_the_wire_unchanged() {
    for m in every_message() {
        assert_eq!(
            CoordMessage::from_wire(&m.to_wire()),
            Ok(m.clone()),
            "{m:?}"
        );
    }
}

#[test]
fn every_phase_answer_survives_the_wire_unchanged() {
    for p in [
        None,
        Some(Phase::Beginning),
        Some(Phase::Preparing),
        Some(Phase::Deciding(TxnDecision::Commit)),
        Some(Phase::Deciding(TxnDecision::Abort)),
    ] {
        assert_eq!(wire::phase_from_wire(&wire::phase_to_wire(p)), Ok(p));
    }
}

#[test]
fn a_delivered_message_is_the_event_of_the_state_machine_it_addresses() {
    let [prepare, prepared, _, commit, _] = every_message().try_into().expect("five messages");
    let CoordMessage::Prepare { prepare: p, .. } = prepare.clone() else {
        unreachable!("the first message is a prepare")
    };
    assert_eq!(
        prepare.into_delivery(),
        Delivery::Participant {
            route: Route { shard: 2, epoch: 3 },
            event: ParticipantEvent::Prepare(p),
        }
    );
    assert_eq!(
        prepared.into_delivery(),
        Delivery::Coordinator {
            route: Route { shard: 0, epoch: 4 },
            event: CoordEvent::ParticipantReply {
                txn: TXN.into(),
                shard: 2,
                reply: PrepareReply::Prepared {
                    placements: vec![pod("ns/p0", "n9", 1)],
                    committed: true,
                },
            },
        }
    );
    assert_eq!(
        commit.into_delivery(),
        Delivery::Participant {
            route: Route { shard: 2, epoch: 3 },
            event: ParticipantEvent::Decided {
                txn: TXN.into(),
                decision: TxnDecision::Commit,
            },
        }
    );
}

fn prepare_wire() -> pb::PrepareRequest {
    let WireMessage::Prepare(r) = prepare_msg(Route { shard: 2, epoch: 3 }).to_wire() else {
        unreachable!("a prepare encodes as a PrepareRequest")
    };
    r
}

/// The error of decoding `r`, as "field: problem".
fn prepare_error(r: &pb::PrepareRequest) -> String {
    match wire::prepare_from_wire(r) {
        Ok(m) => panic!("accepted a malformed prepare: {m:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_malformed_prepare_is_refused_naming_the_field_and_its_value() {
    let mut r = prepare_wire();
    r.route = None;
    assert_eq!(prepare_error(&r), "route: missing");

    let mut r = prepare_wire();
    r.route = Some(pb::Route {
        to_shard: 2,
        to_epoch: 0,
    });
    assert_eq!(prepare_error(&r), "route.to_epoch: 0 (epochs start at 1)");

    let mut r = prepare_wire();
    r.coordinator_epoch = 0;
    assert_eq!(
        prepare_error(&r),
        "coordinator_epoch: 0 (epochs start at 1)"
    );

    let mut r = prepare_wire();
    r.txn.clear();
    assert_eq!(prepare_error(&r), "txn: empty");

    let mut r = prepare_wire();
    r.gang.clear();
    assert_eq!(prepare_error(&r), "gang: empty");

    let mut r = prepare_wire();
    r.placements[1]
        .resources
        .insert("nvidia.com/gpu".into(), -1);
    assert_eq!(
        prepare_error(&r),
        "placements[1].resources[nvidia.com/gpu]: -1 (quantities are never negative)"
    );

    let mut r = prepare_wire();
    r.placements[0].resources.insert(String::new(), 1);
    assert_eq!(
        prepare_error(&r),
        "placements[0].resources: a resource with an empty name"
    );

    let mut r = prepare_wire();
    r.placements[1].pod = "p1".into();
    assert_eq!(
        prepare_error(&r),
        "placements[1].pod: \"p1\" is not namespace/name"
    );

    let mut r = prepare_wire();
    r.placements[0].node.clear();
    assert_eq!(prepare_error(&r), "placements[0].node: empty");
}

#[test]
fn zero_quantities_on_the_wire_decode_to_the_same_placement_as_absent_ones() {
    let mut r = prepare_wire();
    r.placements[0].resources.insert("memory".into(), 0);
    assert_eq!(
        wire::prepare_from_wire(&r),
        Ok(prepare_msg(Route { shard: 2, epoch: 3 }))
    );
}

fn reply_wire(answer: Option<pb::prepare_reply_request::Answer>) -> pb::PrepareReplyRequest {
    pb::PrepareReplyRequest {
        route: Some(pb::Route {
            to_shard: 0,
            to_epoch: 4,
        }),
        txn: TXN.into(),
        participant_shard: 2,
        participant_epoch: 3,
        answer,
    }
}

#[test]
fn a_malformed_reply_is_refused_naming_the_field() {
    use pb::prepare_reply_request::Answer;
    let err =
        |r: &pb::PrepareReplyRequest| wire::reply_from_wire(r).expect_err("malformed").to_string();
    assert_eq!(
        err(&reply_wire(None)),
        "answer: missing (prepared or refused)"
    );
    assert_eq!(
        err(&reply_wire(Some(Answer::Refused(pb::Refused {
            reason: String::new()
        })))),
        "refused.reason: empty"
    );
    let chosen = wire::placement_to_wire(&pod("ns/p0", "n9", 1));
    let mut r = reply_wire(Some(Answer::Prepared(pb::Prepared {
        placements: vec![chosen.clone()],
        commit_logged: false,
    })));
    r.participant_epoch = 0;
    assert_eq!(err(&r), "participant_epoch: 0 (epochs start at 1)");
    // A prepared answer names the nodes reserved: none is malformed...
    assert_eq!(
        err(&reply_wire(Some(Answer::Prepared(pb::Prepared::default())))),
        "prepared.placements: empty (a prepared participant names the nodes it reserved)"
    );
    // ...and so is a malformed chosen placement, named by its index and field...
    let bad = pb::PodPlacement {
        pod: "ns/p0".into(),
        node: String::new(),
        resources: Default::default(),
    };
    assert_eq!(
        err(&reply_wire(Some(Answer::Prepared(pb::Prepared {
            placements: vec![chosen.clone(), bad],
            commit_logged: false,
        })))),
        "prepared.placements[1].node: empty"
    );
    // ...while well-formed chosen nodes come through as they were sent.
    let ok = wire::reply_from_wire(&reply_wire(Some(Answer::Prepared(pb::Prepared {
        placements: vec![chosen],
        commit_logged: false,
    }))))
    .expect("well formed");
    assert!(
        matches!(&ok, CoordMessage::Reply { reply: PrepareReply::Prepared { placements, committed: false }, .. }
            if placements == &vec![pod("ns/p0", "n9", 1)]),
        "{ok:?}"
    );
}

#[test]
fn a_decision_that_is_neither_commit_nor_abort_is_refused() {
    let WireMessage::Decide(mut r) = every_message()[3].to_wire() else {
        unreachable!("a decide encodes as a DecideRequest")
    };
    r.decision = 0;
    assert_eq!(
        wire::decide_from_wire(&r)
            .expect_err("unspecified")
            .to_string(),
        "decision: DECISION_UNSPECIFIED"
    );
    r.decision = 7;
    assert_eq!(
        wire::decide_from_wire(&r).expect_err("unknown").to_string(),
        "decision: 7 is no Decision"
    );
}

#[test]
fn a_query_answer_that_contradicts_itself_is_refused() {
    let answer = |phase: pb::TxnPhase, decision: pb::Decision| pb::QueryReply {
        phase: phase.into(),
        decision: decision.into(),
    };
    let err = |r: pb::QueryReply| {
        wire::phase_from_wire(&r)
            .expect_err("malformed")
            .to_string()
    };
    assert_eq!(
        err(answer(pb::TxnPhase::Unspecified, pb::Decision::Unspecified)),
        "phase: TXN_PHASE_UNSPECIFIED"
    );
    assert_eq!(
        err(answer(pb::TxnPhase::Deciding, pb::Decision::Unspecified)),
        "decision: DECISION_UNSPECIFIED"
    );
    assert_eq!(
        err(answer(pb::TxnPhase::Preparing, pb::Decision::Commit)),
        "decision: 1 set with phase TXN_PHASE_PREPARING"
    );
    assert_eq!(
        err(pb::QueryReply {
            phase: 9,
            decision: 0
        }),
        "phase: 9 is no TxnPhase"
    );
}

// ---- on loopback ----

/// A replica owning shard 2 at epoch 3 whose coordinator has begun `TXN`.
fn replica_owning_shard_2_at_epoch_3() -> SharedCoordinators {
    let mut c = Coordinator::new(2, 3, CoordConfig::default());
    let cmds = c.step(CoordEvent::Start(StartTxn {
        txn: TXN.into(),
        gang: "ns/g".into(),
        parts: vec![
            (2, vec![pod("ns/p0", "n1", 1)]),
            (5, vec![pod("ns/p1", "n9", 1)]),
        ],
        owners: BTreeMap::new(),
        now_ms: 0,
        deadline_ms: 5_000,
    }));
    assert!(!cmds.is_empty(), "the start is taken");
    Arc::new(Mutex::new(BTreeMap::from([(2, c)])))
}

#[test]
fn a_prepare_over_loopback_is_acknowledged_once_queued_for_the_participant() {
    let mut net = LoopbackNet::new().expect("runtime");
    net.serve(1, replica_owning_shard_2_at_epoch_3())
        .expect("serves");
    let m = prepare_msg(Route { shard: 2, epoch: 3 });
    net.send(1, &m).expect("acknowledged");
    assert_eq!(net.take_delivered(), vec![(1, m.into_delivery())]);
    assert_eq!(net.take_delivered(), vec![], "taken once");
    assert_eq!(
        net.stats(),
        LoopbackStats {
            delivered: 1,
            refused: 0,
            requests: 1,
        }
    );
}

#[test]
fn a_message_for_a_stale_epoch_or_a_shard_not_owned_is_refused_naming_shard_and_epochs() {
    let mut net = LoopbackNet::new().expect("runtime");
    net.serve(1, replica_owning_shard_2_at_epoch_3())
        .expect("serves");
    let stale = net
        .send(1, &prepare_msg(Route { shard: 2, epoch: 2 }))
        .expect_err("stale epoch");
    assert_eq!(stale.code(), Some(tonic::Code::FailedPrecondition));
    assert!(
        stale
            .to_string()
            .contains("shard 2 at epoch 2: this replica owns it at epoch 3"),
        "{stale}"
    );
    let other = net
        .send(1, &prepare_msg(Route { shard: 4, epoch: 3 }))
        .expect_err("not owned");
    assert_eq!(other.code(), Some(tonic::Code::FailedPrecondition));
    assert!(
        other
            .to_string()
            .contains("shard 4 at epoch 3: this replica does not own shard 4"),
        "{other}"
    );
    assert_eq!(net.take_delivered(), vec![], "nothing acted on");
    assert_eq!(net.stats().refused, 2);
}

#[test]
fn a_killed_replica_refuses_at_connect_and_a_restarted_one_serves_on_a_new_port() {
    let mut net = LoopbackNet::new().expect("runtime");
    let coords = replica_owning_shard_2_at_epoch_3();
    net.serve(1, Arc::clone(&coords)).expect("serves");
    let m = prepare_msg(Route { shard: 2, epoch: 3 });
    net.send(1, &m).expect("acknowledged");
    let before = net.addr(1).expect("listening");
    net.stop(1);
    assert!(!net.is_serving(1));
    let e = net.send(1, &m).expect_err("port closed");
    assert_eq!(e.code(), Some(tonic::Code::Unavailable), "{e}");
    net.serve(1, coords).expect("serves again");
    net.send(1, &m).expect("acknowledged after the restart");
    assert_ne!(net.addr(1), Some(before), "a new port");
    // The message queued before the kill was lost with the replica.
    assert_eq!(net.take_delivered(), vec![(1, m.into_delivery())]);
}

#[test]
fn a_refusing_replica_answers_unavailable_with_why_until_it_serves_again() {
    let mut net = LoopbackNet::new().expect("runtime");
    net.serve(1, replica_owning_shard_2_at_epoch_3())
        .expect("serves");
    net.set_refusing(1, Some("replica 1 is paused".into()));
    let m = prepare_msg(Route { shard: 2, epoch: 3 });
    let e = net.send(1, &m).expect_err("paused");
    assert_eq!(e.code(), Some(tonic::Code::Unavailable));
    assert!(e.to_string().contains("replica 1 is paused"), "{e}");
    net.set_refusing(1, None);
    net.send(1, &m).expect("serving again");
    assert_eq!(net.take_delivered().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn query_answers_from_the_coordinator_and_a_malformed_request_is_invalid_argument() {
    let coords = replica_owning_shard_2_at_epoch_3();
    let any = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let server = CoordServer::start(any, Arc::clone(&coords))
        .await
        .expect("serves");
    let mut client = CoordClient::connect_lazy(server.addr()).expect("address");
    let route = Route { shard: 2, epoch: 3 };
    assert_eq!(
        client.query(route, TXN).await.expect("answered"),
        Some(Phase::Beginning)
    );
    assert_eq!(
        client
            .query(route, "0:3:9:ns/other")
            .await
            .expect("answered"),
        None
    );
    // The answer follows the coordinator: it moves on once the ledger applied the begin.
    let moved_on = lock(&coords).get_mut(&2).map(|c| {
        c.step(CoordEvent::LedgerApplied {
            txn: TXN.into(),
            result: crate::coord::LedgerResult::Begun,
        })
    });
    assert!(moved_on.is_some_and(|cmds| !cmds.is_empty()));
    assert_eq!(
        client.query(route, TXN).await.expect("answered"),
        Some(Phase::Preparing)
    );
    let stale = client
        .query(Route { shard: 2, epoch: 9 }, TXN)
        .await
        .expect_err("stale");
    assert_eq!(stale.code(), Some(tonic::Code::FailedPrecondition));

    let mut bad = prepare_wire();
    bad.placements[0].pod.clear();
    let e = client
        .send_wire(WireMessage::Prepare(bad))
        .await
        .expect_err("malformed");
    assert!(
        matches!(&e, ClientError::Rpc(s) if s.code() == tonic::Code::InvalidArgument
            && s.message() == "placements[0].pod: empty"),
        "{e}"
    );
    assert!(server.take_delivered().is_empty(), "nothing acted on");
    server.stop().await;
}

fn decide_msg(route: Route, decision: TxnDecision) -> CoordMessage {
    CoordMessage::Decide {
        route,
        txn: TXN.into(),
        coordinator: 0,
        coordinator_epoch: 4,
        decision,
    }
}

#[test]
fn a_batch_queues_its_messages_in_order_and_refuses_a_stale_one_alone() {
    let mut net = LoopbackNet::new().expect("runtime");
    net.serve(1, replica_owning_shard_2_at_epoch_3())
        .expect("serves");
    let here = Route { shard: 2, epoch: 3 };
    let first = prepare_msg(here);
    let stale = decide_msg(Route { shard: 2, epoch: 2 }, TxnDecision::Abort);
    let last = decide_msg(here, TxnDecision::Commit);
    let results = net.send_all(1, &[first.clone(), stale, last.clone()]);
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    let refused = results[1].as_ref().expect_err("stale epoch");
    assert_eq!(refused.code(), Some(tonic::Code::FailedPrecondition));
    assert!(
        refused
            .to_string()
            .contains("shard 2 at epoch 2: this replica owns it at epoch 3"),
        "{refused}"
    );
    assert_eq!(
        net.take_delivered(),
        vec![(1, first.into_delivery()), (1, last.into_delivery())],
        "the others queued, in the order sent"
    );
    assert_eq!(
        net.stats(),
        LoopbackStats {
            delivered: 2,
            refused: 1,
            requests: 1,
        },
        "one request for the three"
    );
}

#[test]
fn a_batch_larger_than_one_request_may_carry_goes_in_several_in_order() {
    let mut net = LoopbackNet::new().expect("runtime");
    net.serve(1, replica_owning_shard_2_at_epoch_3())
        .expect("serves");
    // 64-pod parts with long names, about 5.7 KiB each: 800 of them exceed what a receiver
    // decodes in one request.
    let big = |i: usize| {
        let mut m = prepare_msg(Route { shard: 2, epoch: 3 });
        if let CoordMessage::Prepare { prepare, .. } = &mut m {
            prepare.gang = format!("ns/gang-{i}");
            prepare.placements = (0..64)
                .map(|p| {
                    pod(
                        &format!("ns/{i}-a-rather-long-pod-name-{p}"),
                        "node-with-a-long-name",
                        1,
                    )
                })
                .collect();
        }
        m
    };
    let ms: Vec<CoordMessage> = (0..800).map(big).collect();
    let wire_bytes: usize = ms
        .iter()
        .map(|m| prost::Message::encoded_len(&m.to_wire().into_envelope()))
        .sum();
    assert!(
        wire_bytes > super::MAX_MESSAGE_BYTES,
        "{wire_bytes} bytes: the test must exceed a request"
    );
    let results = net.send_all(1, &ms);
    assert!(
        results.iter().all(Result::is_ok),
        "{:?}",
        results.iter().find(|r| r.is_err())
    );
    let delivered: Vec<Delivery> = net.take_delivered().into_iter().map(|(_, d)| d).collect();
    let sent: Vec<Delivery> = ms.into_iter().map(CoordMessage::into_delivery).collect();
    // In one request the receiver would have refused them all (over its decoding limit).
    assert!(
        delivered == sent,
        "every message queued once, in the order sent"
    );
}

#[test]
fn a_batch_to_a_paused_replica_is_refused_whole_with_why() {
    let mut net = LoopbackNet::new().expect("runtime");
    net.serve(1, replica_owning_shard_2_at_epoch_3())
        .expect("serves");
    net.set_refusing(1, Some("replica 1 is paused".into()));
    let here = Route { shard: 2, epoch: 3 };
    let results = net.send_all(
        1,
        &[prepare_msg(here), decide_msg(here, TxnDecision::Commit)],
    );
    assert_eq!(results.len(), 2);
    for r in &results {
        let e = r.as_ref().expect_err("paused");
        assert_eq!(e.code(), Some(tonic::Code::Unavailable));
        assert!(e.to_string().contains("replica 1 is paused"), "{e}");
    }
    assert!(net.take_delivered().is_empty());
}

#[test]
fn a_malformed_message_of_a_batch_is_named_by_its_index_kind_and_field() {
    let mut bad = prepare_wire();
    bad.placements[0].pod.clear();
    let e = wire::envelope_from_wire(3, &WireMessage::Prepare(bad).into_envelope())
        .expect_err("malformed");
    assert_eq!(
        e.to_string(),
        "messages[3].prepare.placements[0].pod: empty"
    );
    let empty = wire::envelope_from_wire(1, &pb::Envelope { message: None }).expect_err("empty");
    assert_eq!(empty.to_string(), "messages[1]: empty (no message set)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_malformed_message_never_blocks_the_others_of_its_batch() {
    let any = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let server = CoordServer::start(any, replica_owning_shard_2_at_epoch_3())
        .await
        .expect("serves");
    let mut raw = CoordinatorServiceClient::connect(format!("http://{}", server.addr()))
        .await
        .expect("connects");
    let good = prepare_msg(Route { shard: 2, epoch: 3 });
    let request = pb::DeliverRequest {
        messages: vec![
            pb::Envelope { message: None },
            good.to_wire().into_envelope(),
        ],
    };
    let reply = raw.deliver(request).await.expect("answered").into_inner();
    let codes: Vec<i32> = reply.outcomes.iter().map(|o| o.code).collect();
    assert_eq!(
        codes,
        vec![tonic::Code::InvalidArgument as i32, tonic::Code::Ok as i32]
    );
    assert_eq!(
        reply.outcomes[0].message,
        "messages[0]: empty (no message set)"
    );
    assert_eq!(server.take_delivered(), vec![good.into_delivery()]);
    server.stop().await;
}

/// A receiver of the version before `Deliver`: every other RPC as the real service.
struct WithoutDeliver(super::CoordGrpc);

#[tonic::async_trait]
impl CoordinatorService for WithoutDeliver {
    async fn prepare(
        &self,
        r: tonic::Request<pb::PrepareRequest>,
    ) -> Result<tonic::Response<pb::Ack>, tonic::Status> {
        self.0.prepare(r).await
    }
    async fn prepare_reply(
        &self,
        r: tonic::Request<pb::PrepareReplyRequest>,
    ) -> Result<tonic::Response<pb::Ack>, tonic::Status> {
        self.0.prepare_reply(r).await
    }
    async fn decide(
        &self,
        r: tonic::Request<pb::DecideRequest>,
    ) -> Result<tonic::Response<pb::Ack>, tonic::Status> {
        self.0.decide(r).await
    }
    async fn deliver(
        &self,
        _: tonic::Request<pb::DeliverRequest>,
    ) -> Result<tonic::Response<pb::DeliverReply>, tonic::Status> {
        Err(tonic::Status::unimplemented("Deliver"))
    }
    async fn query(
        &self,
        r: tonic::Request<pb::QueryRequest>,
    ) -> Result<tonic::Response<pb::QueryReply>, tonic::Status> {
        self.0.query(r).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_receiver_without_deliver_is_sent_the_batch_one_message_at_a_time() {
    let (grpc, inbox) = super::CoordGrpc::for_test(replica_owning_shard_2_at_epoch_3());
    let listener = tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .expect("binds");
    let addr = listener.local_addr().expect("address");
    let serving = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(CoordinatorServiceServer::new(WithoutDeliver(grpc)))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let mut client = CoordClient::connect_lazy(addr).expect("address");
    let here = Route { shard: 2, epoch: 3 };
    let ms = [
        prepare_msg(here),
        decide_msg(Route { shard: 4, epoch: 3 }, TxnDecision::Commit),
        decide_msg(here, TxnDecision::Commit),
    ];
    let results = client.send_all(&ms).await;
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    assert_eq!(
        results[1].as_ref().err().and_then(ClientError::code),
        Some(tonic::Code::FailedPrecondition),
        "each message judged as the single RPC judges it"
    );
    let queued: Vec<Delivery> = inbox.take();
    assert_eq!(
        queued,
        vec![ms[0].clone().into_delivery(), ms[2].clone().into_delivery()]
    );
    serving.abort();
}
