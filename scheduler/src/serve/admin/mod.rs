//! The admin service (`proto/proto/admin.proto`) every `phalanx serve` replica serves on
//! `--admin-listen`: `Explain` (why is this PodGroup where it is, in the numbers of
//! `phalanx simulate --explain`) and `Status` (replicas, shards, queues, the oldest
//! pending PodGroups), for `phalanx explain` and `phalanx status`.
//!
//! ```text
//!  replica loop (replica.rs) ── each period ──▶ Published {snapshot, ledger state, owned,
//!                                               Raft view, recent decisions, 2PC ends}
//!  AdminService ── Explain(ns, name) ── home shard's owner (the ledger) is me?
//!        │            yes ─▶ a dry cycle on the published snapshot (spawn_blocking)
//!        │                   → framework::explain::explain + its decisions + its 2PC
//!        │            no  ─▶ forward once to the owner's --admin-peers address
//!        └─────── Status ─── Raft leader? yes ─▶ answer; no ─▶ forward once to the leader
//! ```
//!
//! The service only reads what the loop published: a request never touches the
//! scheduler's own state, and a slow or malformed one cannot stall a cycle.

pub mod cli;
pub mod compute;
pub mod render;
pub mod validate;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use phalanx_proto::admin::admin_service_client::AdminServiceClient;
use phalanx_proto::admin::admin_service_server::{AdminService, AdminServiceServer};
use phalanx_proto::admin::{ExplainReply, ExplainRequest, StatusReply, StatusRequest};
use phalanx_statestore::LedgerState;
use phalanx_statestore::Transport;
use phalanx_statestore::ledger::{Epoch, ReplicaId, ShardId};
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Response, Status};

use crate::cluster::ClusterSnapshot;
use crate::framework::{Event, SchedulerConf};
use crate::shard::ShardMap;

/// Decisions (Events) kept for `Explain`, newest last, across all gangs.
const MAX_DECISIONS: usize = 4096;
/// Ended cross-shard transactions kept for `Explain`.
const MAX_TXN_ENDS: usize = 512;
/// Longest a forwarded call or a CLI call may take (a dry cycle on a large cluster).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The ledger replica's Raft figures, as the loop saw them this period.
#[derive(Clone, Debug, Default)]
pub struct RaftView {
    pub leader: Option<ReplicaId>,
    pub term: u64,
    pub voters: BTreeSet<ReplicaId>,
    pub learners: BTreeSet<ReplicaId>,
    pub last_log_index: u64,
    /// Per follower, the last log index it matched (known to the leader only).
    pub matched: BTreeMap<ReplicaId, u64>,
}

/// A cross-shard transaction that ended, as this replica's coordinator reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnEnd {
    pub gang: String,
    pub txn: String,
    pub outcome: &'static str,
    pub reason: String,
    /// Wall-clock ms since the epoch.
    pub at_ms: u64,
}

/// What the scheduling loop last published.
#[derive(Clone, Debug, Default)]
pub struct Published {
    pub snapshot: Option<Arc<ClusterSnapshot>>,
    pub state: Option<Arc<LedgerState>>,
    pub owned: BTreeMap<ShardId, Epoch>,
    pub raft: RaftView,
    /// Replicas whose Lease the leader heard within one lease; `None` when not leading.
    pub running: Option<BTreeSet<ReplicaId>>,
    /// (wall ms, Event) as written to the API server, oldest first.
    pub decisions: VecDeque<(u64, Event)>,
    pub txn_ends: VecDeque<TxnEnd>,
}

/// The service's fixed configuration and the loop's latest publication.
#[derive(Debug)]
pub struct AdminShared {
    pub id: ReplicaId,
    pub map: ShardMap,
    pub conf: SchedulerConf,
    pub scheduler_name: String,
    /// Every replica's admin address (`--admin-peers`).
    pub peers: BTreeMap<ReplicaId, String>,
    pub transport: Transport,
    published: Mutex<Published>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl AdminShared {
    pub fn new(
        id: ReplicaId,
        map: ShardMap,
        conf: SchedulerConf,
        scheduler_name: String,
        peers: BTreeMap<ReplicaId, String>,
        transport: Transport,
    ) -> Arc<Self> {
        Arc::new(Self {
            id,
            map,
            conf,
            scheduler_name,
            peers,
            transport,
            published: Mutex::new(Published::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Published> {
        self.published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A copy of the latest publication (its big parts are shared, not copied).
    pub fn published(&self) -> Published {
        self.lock().clone()
    }

    /// The period's cluster snapshot, ledger state and owned shards.
    pub fn publish_view(
        &self,
        snapshot: &ClusterSnapshot,
        state: &LedgerState,
        owned: &BTreeMap<ShardId, Epoch>,
    ) {
        let (snapshot, state) = (Arc::new(snapshot.clone()), Arc::new(state.clone()));
        let mut p = self.lock();
        p.snapshot = Some(snapshot);
        p.state = Some(state);
        p.owned = owned.clone();
    }

    /// Events the loop wrote this period (its decisions), stamped now.
    pub fn publish_decisions(&self, events: &[Event]) {
        let at = now_ms();
        let mut p = self.lock();
        p.decisions.extend(events.iter().map(|e| (at, e.clone())));
        let over = p.decisions.len().saturating_sub(MAX_DECISIONS);
        p.decisions.drain(..over);
    }

    pub fn publish_txn_ends(&self, ends: impl IntoIterator<Item = TxnEnd>) {
        let mut p = self.lock();
        p.txn_ends.extend(ends);
        let over = p.txn_ends.len().saturating_sub(MAX_TXN_ENDS);
        p.txn_ends.drain(..over);
    }

    pub fn publish_raft(&self, raft: RaftView, running: Option<BTreeSet<ReplicaId>>) {
        let mut p = self.lock();
        p.raft = raft;
        p.running = running;
    }

    /// A client of replica `to`'s admin service, from `--admin-peers`.
    fn peer(&self, to: ReplicaId) -> Result<AdminServiceClient<Channel>, Status> {
        let addr = self.peers.get(&to).ok_or_else(|| {
            Status::unavailable(format!(
                "replica {to} answers this, but replica {} has no --admin-peers address for it",
                self.id
            ))
        })?;
        connect(addr, to, &self.transport).map_err(Status::unavailable)
    }
}

/// A lazily connecting client of the admin service at `addr`; under mutual TLS the server
/// must present the certificate of replica `server_id`.
pub fn connect(
    addr: &str,
    server_id: ReplicaId,
    transport: &Transport,
) -> Result<AdminServiceClient<Channel>, String> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| format!("admin address {addr:?}: {e}"))?
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(CALL_TIMEOUT);
    Ok(AdminServiceClient::new(
        transport.channel(endpoint, addr, server_id),
    ))
}

/// The gRPC side: validates, forwards or computes (on a blocking thread).
#[derive(Debug, Clone)]
struct AdminGrpc {
    shared: Arc<AdminShared>,
}

fn blocking_failed(e: tokio::task::JoinError) -> Status {
    Status::internal(format!("the admin computation failed: {e}"))
}

#[tonic::async_trait]
impl AdminService for AdminGrpc {
    async fn explain(
        &self,
        request: Request<ExplainRequest>,
    ) -> Result<Response<ExplainReply>, Status> {
        let req = request.into_inner();
        let key = validate::explain_request(&req)?;
        let shared = Arc::clone(&self.shared);
        let published = shared.published();
        let owner = compute::owner_of(&shared, &published, &key)?;
        if owner.owner != shared.id {
            if req.forwarded {
                return Err(compute::not_owner(&shared, &key, &owner));
            }
            let mut client = shared.peer(owner.owner)?;
            let mut reply = client
                .explain(ExplainRequest {
                    forwarded: true,
                    ..req
                })
                .await?
                .into_inner();
            reply.forwarded_by = shared.id;
            return Ok(Response::new(reply));
        }
        let reply = tokio::task::spawn_blocking(move || {
            compute::explain(&shared, &published, &key, &owner)
        })
        .await
        .map_err(blocking_failed)?;
        Ok(Response::new(reply))
    }

    async fn status(
        &self,
        request: Request<StatusRequest>,
    ) -> Result<Response<StatusReply>, Status> {
        let req = request.into_inner();
        let top = validate::status_request(&req)?;
        let shared = Arc::clone(&self.shared);
        let published = shared.published();
        match published.raft.leader {
            Some(leader) if leader != shared.id && !req.forwarded => {
                let mut client = shared.peer(leader)?;
                let mut reply = client
                    .status(StatusRequest {
                        forwarded: true,
                        ..req
                    })
                    .await?
                    .into_inner();
                reply.forwarded_by = shared.id;
                Ok(Response::new(reply))
            }
            _ => {
                let reply =
                    tokio::task::spawn_blocking(move || compute::status(&shared, &published, top))
                        .await
                        .map_err(blocking_failed)??;
                Ok(Response::new(reply))
            }
        }
    }
}

/// Requests and replies are small; a status of a large cluster lists at most 1000
/// pending PodGroups and every queue.
const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Binds `addr` and serves the admin service over `transport` until the runtime stops;
/// returns the address bound (port 0 picks one).
pub async fn serve(
    addr: SocketAddr,
    shared: Arc<AdminShared>,
    transport: Transport,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let service = AdminServiceServer::new(AdminGrpc { shared })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let router = Server::builder().add_service(service);
    tokio::spawn(async move {
        let result = match transport {
            Transport::Plaintext => {
                let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
                router.serve_with_incoming(incoming).await
            }
            Transport::Tls(state) => {
                let incoming = phalanx_statestore::tls::incoming(listener, state);
                router.serve_with_incoming(incoming).await
            }
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "the admin service stopped");
        }
    });
    Ok(bound)
}
