//! `PeerNetwork`: openraft's `RaftNetworkFactory` / `RaftNetwork` over tonic gRPC.
//!
//! Each call has a hard deadline (openraft's `RPCOption::hard_ttl`, capped by
//! `rpc_timeout`). Retries are openraft's: a failed call is reported as `Unreachable`
//! (connection refused, peer isolated), `Timeout` or `Network`, and openraft's replication
//! backs off (`backoff()`) and tries again; nothing here loops.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use openraft::BasicNode;
use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError,
    Unreachable,
};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use phalanx_proto::raft::raft_service_client::RaftServiceClient;
use phalanx_proto::raft::{RaftReply, RaftRequest};
use tonic::transport::{Channel, Endpoint};

use super::faults::FaultInjector;
use super::reachability::{Reachability, is_connection_refused};
use super::wire::{self, WireError};
use crate::raft_types::{NodeId, TypeConfig};
use crate::tls::Transport;

/// Error type of one RPC.
type RpcErr<E = openraft::error::Infallible> = RPCError<NodeId, BasicNode, RaftError<NodeId, E>>;

/// Connection settings shared by every peer client of one replica.
#[derive(Debug, Clone)]
pub struct PeerNetwork {
    /// When set, this replica's outgoing RPCs fail as `Unreachable` (test isolation).
    isolated: Arc<AtomicBool>,
    /// Seeded delays and drops of outgoing RPCs (test seam; inert unless set).
    faults: FaultInjector,
    connect_timeout: Duration,
    rpc_timeout: Duration,
    /// Plaintext or mutual TLS (a peer must prove to be the replica it is called as).
    transport: Transport,
    /// Which peers refused the last connection (read by the scheduler's leader).
    reach: Reachability,
}

impl PeerNetwork {
    /// A factory whose clients honour `isolated`.
    pub fn new(
        isolated: Arc<AtomicBool>,
        connect_timeout: Duration,
        rpc_timeout: Duration,
    ) -> Self {
        Self {
            isolated,
            faults: FaultInjector::new(),
            connect_timeout,
            rpc_timeout,
            transport: Transport::Plaintext,
            reach: Reachability::new(),
        }
    }

    /// The same, noting each peer's refusals and answers in `reach`.
    pub fn with_reachability(mut self, reach: Reachability) -> Self {
        self.reach = reach;
        self
    }

    /// The same, over `transport`.
    pub fn with_transport(mut self, transport: Transport) -> Self {
        self.transport = transport;
        self
    }

    /// The same, with outgoing RPCs subject to `faults` (a test seam, see `faults.rs`).
    pub fn with_faults(mut self, faults: FaultInjector) -> Self {
        self.faults = faults;
        self
    }
}

/// A client to one peer; connects lazily and reconnects by itself.
#[derive(Debug)]
pub struct PeerClient {
    target: NodeId,
    addr: String,
    net: PeerNetwork,
    client: Option<RaftServiceClient<Channel>>,
}

impl RaftNetworkFactory<TypeConfig> for PeerNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        PeerClient {
            target,
            addr: node.addr.clone(),
            net: self.clone(),
            client: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Failure(String);

fn unreachable<E: std::error::Error>(msg: String) -> RPCError<NodeId, BasicNode, E> {
    RPCError::Unreachable(Unreachable::new(&Failure(msg)))
}

fn network<E: std::error::Error>(msg: String) -> RPCError<NodeId, BasicNode, E> {
    RPCError::Network(NetworkError::new(&Failure(msg)))
}

fn wire_err<E: std::error::Error>(e: WireError) -> RPCError<NodeId, BasicNode, E> {
    network(format!("wire: {e}"))
}

impl PeerClient {
    fn client<E: std::error::Error>(
        &mut self,
    ) -> Result<RaftServiceClient<Channel>, RPCError<NodeId, BasicNode, E>> {
        if self.net.isolated.load(Ordering::Relaxed) {
            return Err(unreachable(format!(
                "replica isolated; not calling {}",
                self.target
            )));
        }
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let endpoint = Endpoint::from_shared(format!("http://{}", self.addr))
            .map_err(|e| unreachable(format!("bad address {}: {e}", self.addr)))?
            .connect_timeout(self.net.connect_timeout)
            .tcp_nodelay(true);
        let channel = self
            .net
            .transport
            .channel(endpoint, &self.addr, self.target);
        let c = RaftServiceClient::new(channel)
            .max_decoding_message_size(super::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(super::MAX_MESSAGE_BYTES);
        self.client = Some(c.clone());
        Ok(c)
    }

    fn deadline(&self, option: &RPCOption) -> Duration {
        option.hard_ttl().min(self.net.rpc_timeout)
    }

    /// Sends one framed request with a deadline; maps transport failures.
    async fn call<E, F, Fut>(
        &mut self,
        option: &RPCOption,
        req: RaftRequest,
        send: F,
    ) -> Result<RaftReply, RPCError<NodeId, BasicNode, E>>
    where
        E: std::error::Error,
        F: FnOnce(RaftServiceClient<Channel>, tonic::Request<RaftRequest>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<RaftReply>, tonic::Status>>,
    {
        let client = self.client()?;
        let deadline = self.deadline(option);
        let plan = self.net.faults.plan(self.target);
        let mut request = tonic::Request::new(req);
        request.set_timeout(deadline);
        let target = self.target;
        let exchange = async move {
            if let Some(plan) = plan {
                tokio::time::sleep(plan.delay).await;
                if plan.drop_request {
                    return Err(None);
                }
            }
            let result = send(client, request).await.map_err(Some);
            if plan.is_some_and(|p| p.drop_reply) && result.is_ok() {
                return Err(None);
            }
            result
        };
        match tokio::time::timeout(deadline, exchange).await {
            Ok(Err(None)) => Err(network(format!(
                "message to {target} dropped (fault injection)"
            ))),
            Err(_) => Err(network(format!(
                "rpc to {} timed out after {deadline:?}",
                self.target
            ))),
            Ok(Ok(resp)) => {
                self.net.reach.note_answered(target);
                Ok(resp.into_inner())
            }
            Ok(Err(Some(status))) => match status.code() {
                tonic::Code::Unavailable if is_connection_refused(&status) => {
                    self.net.reach.note_refused(target);
                    Err(unreachable(format!(
                        "peer {target} refused the connection: {}",
                        status.message()
                    )))
                }
                tonic::Code::Unavailable => Err(unreachable(format!(
                    "peer {} unavailable: {}",
                    self.target,
                    status.message()
                ))),
                _ => Err(network(format!("peer {}: {status}", self.target))),
            },
        }
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RpcErr> {
        let req = wire::append_entries::to_wire(&rpc).map_err(wire_err)?;
        // More entry bytes than one AppendEntries can replicate within its heartbeat
        // interval: ask openraft to send fewer entries (it splits and retries). A single
        // entry is always sent: proposals are capped at MAX_PROPOSAL_BYTES.
        if req.payload.len() > super::MAX_PROPOSAL_BYTES && rpc.entries.len() > 1 {
            let hint = (rpc.entries.len() / 2).max(1) as u64;
            return Err(RPCError::PayloadTooLarge(
                PayloadTooLarge::new_entries_hint(hint),
            ));
        }
        let reply = self
            .call(
                &option,
                req,
                |mut c, r| async move { c.append_entries(r).await },
            )
            .await?;
        let target = self.target;
        wire::append_entries::reply_from_wire(&reply)
            .map_err(wire_err)?
            .map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RpcErr<InstallSnapshotError>> {
        let req = wire::install_snapshot::to_wire(&rpc).map_err(wire_err)?;
        let reply = self
            .call(&option, req, |mut c, r| async move {
                c.install_snapshot(r).await
            })
            .await?;
        let target = self.target;
        wire::install_snapshot::reply_from_wire(&reply)
            .map_err(wire_err)?
            .map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RpcErr> {
        let req = wire::vote::to_wire(&rpc).map_err(wire_err)?;
        let reply = self
            .call(&option, req, |mut c, r| async move { c.vote(r).await })
            .await?;
        let target = self.target;
        wire::vote::reply_from_wire(&reply)
            .map_err(wire_err)?
            .map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)))
    }

    fn backoff(&self) -> Backoff {
        // After an Unreachable, wait this long before the next attempt (openraft loops).
        Backoff::new(std::iter::repeat(Duration::from_millis(200)))
    }
}
