//! The CoordinatorService under mutual TLS: a certificate of the CA is not enough to send
//! 2PC messages; it must name a member of the ledger's Raft group, as this replica sees
//! the group at that moment (docs/security.md). Certificates come from
//! deploy/tls/make-certs.sh (it needs the openssl CLI, as the testbed does).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use phalanx_proto::coord as pb;
use phalanx_scheduler::coord::service::{
    ClientError, CoordClient, CoordServer, Members, Route, WireMessage,
};
use tonic::Code;

use crate::testbed;

/// Every request a sender can make: the three one-way messages (empty, so a caller let
/// through is refused by the decoder instead) and a query.
async fn every_request_from(client: &mut CoordClient) -> Vec<(&'static str, Code, String)> {
    let messages = [
        (
            "Prepare",
            WireMessage::Prepare(pb::PrepareRequest::default()),
        ),
        (
            "PrepareReply",
            WireMessage::Reply(pb::PrepareReplyRequest::default()),
        ),
        ("Decide", WireMessage::Decide(pb::DecideRequest::default())),
    ];
    let mut out = Vec::new();
    for (name, m) in messages {
        out.push((name, code_of(client.send_wire(m).await)));
    }
    let query = client.query(Route { shard: 2, epoch: 3 }, "t-1").await;
    out.push(("Query", code_of(query.map(|_| ()))));
    out.into_iter().map(|(n, (c, m))| (n, c, m)).collect()
}

fn code_of(r: Result<(), ClientError>) -> (Code, String) {
    match r {
        Err(ClientError::Rpc(s)) => (s.code(), s.message().to_string()),
        other => panic!("every request here is refused with a status; got {other:?}"),
    }
}

#[test]
fn only_a_certificate_naming_a_raft_member_may_send_2pc_messages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let members = Arc::new(Mutex::new(vec![1, 2]));
    let seen = members.clone();
    let senders = Members(Arc::new(move || seen.lock().expect("members").clone()));
    let server = rt
        .block_on(CoordServer::start_over(
            "127.0.0.1:0".parse().expect("address"),
            Arc::new(Mutex::new(BTreeMap::new())),
            testbed::tls_transport(dir.path(), 1),
            Some(senders),
        ))
        .expect("serves");
    let addr = server.addr().to_string();
    let client_as = |id: u64| {
        let transport = testbed::tls_transport(dir.path(), id);
        rt.block_on(async { CoordClient::connect_lazy_over(&addr, 1, &transport) })
            .expect("client")
    };
    // Replica 9's certificate is signed by the same CA, but 9 is no member.
    let mut outsider = client_as(9);
    for (rpc, code, message) in rt.block_on(every_request_from(&mut outsider)) {
        assert_eq!(code, Code::PermissionDenied, "{rpc}: {message}");
        assert!(message.contains("replica-9.phalanx"), "{rpc}: {message}");
        assert!(message.contains("replica-2.phalanx"), "{rpc}: {message}");
    }
    // A member passes the check and meets the next one: the decoder, or the shard route.
    let mut member = client_as(2);
    for (rpc, code, message) in rt.block_on(every_request_from(&mut member)) {
        let want = if rpc == "Query" {
            Code::FailedPrecondition
        } else {
            Code::InvalidArgument
        };
        assert_eq!(code, want, "{rpc}: {message}");
    }
    // The members are asked at each request: once 9 joins the group, it may send.
    members.lock().expect("members").push(9);
    for (rpc, code, message) in rt.block_on(every_request_from(&mut outsider)) {
        assert_ne!(code, Code::PermissionDenied, "{rpc}: {message}");
    }
    rt.block_on(server.stop());
}
