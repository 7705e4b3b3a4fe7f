//! The gRPC services one replica serves: `RaftService` (peers) and `LedgerService`
//! (clients).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use openraft::BasicNode;
use openraft::error::{CheckIsLeaderError, ClientWriteError, ForwardToLeader, RaftError};
use phalanx_proto::ledger::ledger_service_server::LedgerService;
use phalanx_proto::ledger::{
    ChangesReply, ChangesRequest, LeaderHint, ProposeReply, ProposeRequest, ReadReply, ReadRequest,
    changes_reply, propose_reply, read_reply,
};
use phalanx_proto::raft::raft_service_server::RaftService;
use phalanx_proto::raft::{Encoding, RaftReply, RaftRequest};
use tonic::{Request, Response, Status};

use super::MAX_PROPOSAL_BYTES;
use super::wire::{self, WireError};
use crate::raft_types::{EncodedBatch, LedgerBatch, MAX_COMMANDS_PER_BATCH, NodeId, Raft};
use crate::state_machine::LedgerReader;
use crate::tls::require_caller_among;

/// A message that does not decode: INVALID_ARGUMENT with the field it fails at.
pub(crate) fn bad_request(e: WireError) -> Status {
    Status::invalid_argument(e.to_string())
}

fn encode_failed(e: WireError) -> Status {
    Status::internal(e.to_string())
}

fn hint(f: &ForwardToLeader<NodeId, BasicNode>) -> LeaderHint {
    LeaderHint {
        leader_id: f.leader_id.unwrap_or(0),
        leader_addr: f
            .leader_node
            .as_ref()
            .map(|n| n.addr.clone())
            .unwrap_or_default(),
    }
}

/// Peer-facing Raft RPCs.
#[derive(Clone)]
pub struct RaftGrpc {
    raft: Raft,
    isolated: Arc<AtomicBool>,
    /// Under mutual TLS: refuse an RPC whose claimed sender is not named by the caller's
    /// certificate (a replica, or anyone holding a certificate of the CA, could otherwise
    /// vote or append as another replica).
    verify_sender: bool,
}

impl RaftGrpc {
    /// Serves `raft`; refuses everything while `isolated` is set.
    pub fn new(raft: Raft, isolated: Arc<AtomicBool>) -> Self {
        Self {
            raft,
            isolated,
            verify_sender: false,
        }
    }

    /// The same, checking each caller's certificate against the id it claims (TLS only).
    pub fn verifying_sender(mut self) -> Self {
        self.verify_sender = true;
        self
    }

    /// Refuses `request` unless its certificate names `claimed` (when verifying).
    fn check_sender<T>(&self, request: &Request<T>, claimed: Option<NodeId>) -> Result<(), Status> {
        if !self.verify_sender {
            return Ok(());
        }
        let allowed: Vec<NodeId> = claimed.into_iter().collect();
        let role = match claimed {
            Some(id) => format!("replica {id}, the sender this RPC claims"),
            None => "the sender of an RPC that claims none".to_string(),
        };
        require_caller_among(request, &allowed, &role)
    }

    fn check_isolated(&self) -> Result<(), Status> {
        if self.isolated.load(Ordering::Relaxed) {
            return Err(Status::unavailable("replica isolated"));
        }
        Ok(())
    }
}

impl std::fmt::Debug for RaftGrpc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftGrpc")
            .field("isolated", &self.isolated)
            .field("verify_sender", &self.verify_sender)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for LedgerGrpc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerGrpc")
            .field("isolated", &self.isolated)
            .field("members_only_propose", &self.members_only_propose)
            .finish_non_exhaustive()
    }
}

#[tonic::async_trait]
impl RaftService for RaftGrpc {
    async fn append_entries(
        &self,
        request: Request<RaftRequest>,
    ) -> Result<Response<RaftReply>, Status> {
        self.check_isolated()?;
        let req = wire::append_entries::from_wire(request.get_ref()).map_err(bad_request)?;
        self.check_sender(&request, req.vote.leader_id().voted_for())?;
        let res = self.raft.append_entries(req).await;
        let reply = wire::append_entries::reply_to_wire(&res).map_err(encode_failed)?;
        Ok(Response::new(reply))
    }

    async fn vote(&self, request: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        self.check_isolated()?;
        let req = wire::vote::from_wire(request.get_ref()).map_err(bad_request)?;
        self.check_sender(&request, req.vote.leader_id().voted_for())?;
        let res = self.raft.vote(req).await;
        let reply = wire::vote::reply_to_wire(&res).map_err(encode_failed)?;
        Ok(Response::new(reply))
    }

    async fn install_snapshot(
        &self,
        request: Request<RaftRequest>,
    ) -> Result<Response<RaftReply>, Status> {
        self.check_isolated()?;
        let req = wire::install_snapshot::from_wire(request.get_ref()).map_err(bad_request)?;
        self.check_sender(&request, req.vote.leader_id().voted_for())?;
        let res = self.raft.install_snapshot(req).await;
        let reply = wire::install_snapshot::reply_to_wire(&res).map_err(encode_failed)?;
        Ok(Response::new(reply))
    }
}

/// Client-facing ledger API.
#[derive(Clone)]
pub struct LedgerGrpc {
    raft: Raft,
    reader: LedgerReader,
    isolated: Arc<AtomicBool>,
    /// Under mutual TLS: `Propose` only from a certificate naming a current Raft member
    /// (reads stay open to any certificate of the CA, e.g. an operator's).
    members_only_propose: bool,
}

impl LedgerGrpc {
    /// Serves proposals and reads for `raft`.
    pub fn new(raft: Raft, reader: LedgerReader, isolated: Arc<AtomicBool>) -> Self {
        Self {
            raft,
            reader,
            isolated,
            members_only_propose: false,
        }
    }

    /// The same, taking proposals only from a certificate that names a member (TLS only).
    pub fn proposals_from_members_only(mut self) -> Self {
        self.members_only_propose = true;
        self
    }

    /// The leader, when a replica other than this one leads (as this replica last heard).
    fn leader_elsewhere(&self) -> Option<LeaderHint> {
        let metrics = self.raft.metrics().borrow().clone();
        let leader = metrics.current_leader.filter(|l| *l != metrics.id)?;
        let node = metrics
            .membership_config
            .membership()
            .get_node(&leader)
            .cloned();
        Some(hint(&ForwardToLeader::new(leader, node?)))
    }

    /// Refuses a proposal whose caller's certificate names no replica of the membership
    /// this replica knows (voters and learners: a learner's scheduler may propose too).
    /// A follower that refuses sends the caller to the leader instead (`propose`), so a
    /// member added moments ago is judged by the leader, which added it.
    fn check_proposer<T>(&self, request: &Request<T>) -> Result<(), Status> {
        if !self.members_only_propose {
            return Ok(());
        }
        require_caller_among(
            request,
            &crate::replica::member_ids(&self.raft),
            "a member of the ledger's Raft group (only replicas may propose)",
        )
    }
}

/// The entry to append for a proposal whose batch decoded as `batch`: its own bytes when
/// they are postcard (the log's encoding: no second encoding on the leader), else `batch`
/// encoded.
fn entry_of(request: ProposeRequest, batch: &LedgerBatch) -> Result<EncodedBatch, Status> {
    if request.encoding == Encoding::Postcard as i32 {
        return Ok(EncodedBatch::from_encoded(request.batch));
    }
    EncodedBatch::encode(batch).map_err(|e| Status::internal(format!("batch does not encode: {e}")))
}

#[tonic::async_trait]
impl LedgerService for LedgerGrpc {
    async fn propose(
        &self,
        request: Request<ProposeRequest>,
    ) -> Result<Response<ProposeReply>, Status> {
        if self.isolated.load(Ordering::Relaxed) {
            return Err(Status::unavailable("replica isolated"));
        }
        if let Err(denied) = self.check_proposer(&request) {
            // A follower may not have seen the membership entry of a replica the leader
            // just added: it sends the caller to the leader, whose view decides.
            return match self.leader_elsewhere() {
                Some(leader) => Ok(Response::new(ProposeReply {
                    outcome: Some(propose_reply::Outcome::Forward(leader)),
                })),
                None => Err(denied),
            };
        }
        let size = request.get_ref().batch.len();
        if size > MAX_PROPOSAL_BYTES {
            return Err(Status::invalid_argument(format!(
                "proposal of {size} bytes, limit {MAX_PROPOSAL_BYTES}"
            )));
        }
        let batch = wire::ledger_batch::from_wire(request.get_ref()).map_err(bad_request)?;
        if batch.commands.len() > MAX_COMMANDS_PER_BATCH {
            return Err(Status::invalid_argument(format!(
                "{} commands in one batch, limit {MAX_COMMANDS_PER_BATCH}",
                batch.commands.len()
            )));
        }
        let entry = entry_of(request.into_inner(), &batch)?;
        let outcome = match self.raft.client_write(entry).await {
            Ok(resp) => propose_reply::Outcome::Committed(
                wire::ledger_batch::committed_to_wire(&resp.data, resp.log_id.index)
                    .map_err(encode_failed)?,
            ),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                propose_reply::Outcome::Forward(hint(&f))
            }
            Err(e) => return Err(Status::internal(e.to_string())),
        };
        Ok(Response::new(ProposeReply {
            outcome: Some(outcome),
        }))
    }

    async fn read(&self, request: Request<ReadRequest>) -> Result<Response<ReadReply>, Status> {
        if self.isolated.load(Ordering::Relaxed) {
            return Err(Status::unavailable("replica isolated"));
        }
        let ReadRequest {
            include_state,
            local,
        } = *request.get_ref();
        let confirmed = if local {
            Ok(None)
        } else {
            self.raft.ensure_linearizable().await.map(Some)
        };
        let outcome = match confirmed {
            Ok(_) => {
                let snap = self.reader.read(|state, applied| {
                    wire::ledger_read::to_wire(state, applied.map_or(0, |l| l.index), include_state)
                });
                read_reply::Outcome::State(snap.map_err(encode_failed)?)
            }
            Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
                read_reply::Outcome::Forward(hint(&f))
            }
            Err(e) => return Err(Status::unavailable(e.to_string())),
        };
        Ok(Response::new(ReadReply {
            outcome: Some(outcome),
        }))
    }

    async fn read_changes(
        &self,
        request: Request<ChangesRequest>,
    ) -> Result<Response<ChangesReply>, Status> {
        if self.isolated.load(Ordering::Relaxed) {
            return Err(Status::unavailable("replica isolated"));
        }
        let query =
            wire::ledger_changes::request_from_wire(request.get_ref()).map_err(bad_request)?;
        let outcome = match self.raft.ensure_linearizable().await {
            Ok(_) => {
                let page = self.reader.read_with_journal(|state, applied, journal| {
                    let applied = applied.map_or(0, |l| l.index);
                    wire::ledger_changes::serve_page(state, applied, journal, &query)
                });
                changes_reply::Outcome::Page(page.map_err(encode_failed)?)
            }
            Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
                changes_reply::Outcome::Forward(hint(&f))
            }
            Err(e) => return Err(Status::unavailable(e.to_string())),
        };
        Ok(Response::new(ChangesReply {
            outcome: Some(outcome),
        }))
    }
}
