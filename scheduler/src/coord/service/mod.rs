//! `phalanx.coord.v1.CoordinatorService` (proto/proto/coord.proto): the 2PC messages
//! between shard owners over gRPC.
//!
//! ```text
//!  sender (runtime)                     receiver replica
//!  CoordClient::send(CoordMessage) ──►  CoordServer: decode (INVALID_ARGUMENT naming the field)
//!    or send_all (Deliver: a batch,     (in a batch, each message is judged alone and
//!    one outcome per message)            answered with its own outcome)
//!                                       ├─ TLS: certificate names no member?  PERMISSION_DENIED
//!                                       ├─ refusing (paused, cut off)?  UNAVAILABLE
//!                                       ├─ owns route.shard at route.epoch?  else FAILED_PRECONDITION
//!                                       └─ queue the Delivery (a CoordEvent / ParticipantEvent)
//!          ◄── Ack ───────────────────  (the runtime drains the queue into its state machines)
//!  CoordClient::query(route, txn) ───►  the coordinator of route.shard: phase(txn)
//!          ◄── QueryReply ────────────
//! ```
//!
//! The replies of 2PC are asynchronous (a participant answers after its ledger write), so
//! every message is a one-way RPC whose response only says "queued". A replica's view of
//! what it owns is its coordinators: it builds a shard's coordinator and participant
//! together when it learns it owns the shard at an epoch and drops both when it loses it.
//! [`loopback`] runs one server per logical replica of `phalanx simulate`.

pub mod loopback;
pub mod wire;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use phalanx_proto::coord as pb;
use phalanx_proto::coord::coordinator_service_client::CoordinatorServiceClient;
use phalanx_proto::coord::coordinator_service_server::{
    CoordinatorService, CoordinatorServiceServer,
};
use phalanx_statestore::Transport;
use phalanx_statestore::ledger::ShardId;
use phalanx_statestore::tls::require_caller_among;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Response, Status};

use super::{Coordinator, Phase};
pub use wire::{CoordMessage, Delivery, Route, WireError, WireMessage};

/// A replica's coordinators by shard, shared with its server (which answers `Query` and
/// checks routes from them).
pub type SharedCoordinators = Arc<Mutex<BTreeMap<ShardId, Coordinator>>>;

/// Locks a replica's coordinators. A panic while they were held leaves them as the last
/// completed step left them (each step is applied as a whole), so poisoning is ignored.
pub fn lock(coordinators: &SharedCoordinators) -> MutexGuard<'_, BTreeMap<ShardId, Coordinator>> {
    coordinators.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Requests larger than this are refused (a prepare of a 64-pod gang part is a few KiB).
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// The replica ids that may send 2PC messages, asked at each request: in `serve`, the
/// members of the ledger's Raft group as this replica has applied them.
#[derive(Clone)]
pub struct Members(pub Arc<dyn Fn() -> Vec<u64> + Send + Sync>);

impl std::fmt::Debug for Members {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Members").field(&(self.0)()).finish()
    }
}

/// What the server shares with the runtime that owns it.
#[derive(Debug)]
struct Inbox {
    coordinators: SharedCoordinators,
    queue: Mutex<VecDeque<Delivery>>,
    /// `Some(why)`: every request is answered UNAVAILABLE (a paused or cut-off replica).
    refusing: Mutex<Option<String>>,
    /// Under mutual TLS: only a caller whose certificate names one of these may send.
    senders: Option<Members>,
}

impl Inbox {
    /// Refuses (PERMISSION_DENIED) a caller whose certificate names no member: any holder
    /// of a certificate of the CA (an operator's, a tool's) could otherwise commit or abort
    /// other replicas' transactions.
    fn check_caller<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let Some(members) = &self.senders else {
            return Ok(());
        };
        require_caller_among(
            request,
            &(members.0)(),
            "a member of the ledger's Raft group (only replicas send 2PC messages)",
        )
    }

    fn check_serving(&self) -> Result<(), Status> {
        match &*self.refusing.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(why) => Err(Status::unavailable(why.clone())),
            None => Ok(()),
        }
    }

    /// Whether this replica owns `route.shard` at `route.epoch`; calls `then` on the
    /// shard's coordinator if so.
    fn at_route<T>(&self, route: Route, then: impl FnOnce(&Coordinator) -> T) -> Result<T, Status> {
        let coords = lock(&self.coordinators);
        match coords.get(&route.shard) {
            Some(c) if c.epoch() == route.epoch => Ok(then(c)),
            Some(c) => Err(Status::failed_precondition(format!(
                "shard {} at epoch {}: this replica owns it at epoch {}",
                route.shard,
                route.epoch,
                c.epoch()
            ))),
            None => Err(Status::failed_precondition(format!(
                "shard {} at epoch {}: this replica does not own shard {}",
                route.shard, route.epoch, route.shard
            ))),
        }
    }

    fn accept(&self, m: Result<CoordMessage, WireError>) -> Result<Response<pb::Ack>, Status> {
        self.check_serving()?;
        self.queue_one(m)?;
        Ok(Response::new(pb::Ack {}))
    }

    /// The messages queued since the last call, in arrival order.
    fn take(&self) -> Vec<Delivery> {
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
            .collect()
    }

    /// Queues one decoded message if this replica owns its route; the refusal otherwise.
    fn queue_one(&self, m: Result<CoordMessage, WireError>) -> Result<(), Status> {
        let m = m.map_err(|e| Status::invalid_argument(e.to_string()))?;
        self.at_route(m.route(), |_| ())?;
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(m.into_delivery());
        Ok(())
    }
}

/// A message's outcome in a `DeliverReply`.
fn outcome_to_wire(r: Result<(), Status>) -> pb::Outcome {
    match r {
        Ok(()) => pb::Outcome {
            code: tonic::Code::Ok as i32,
            message: String::new(),
        },
        Err(s) => pb::Outcome {
            code: s.code() as i32,
            message: s.message().to_string(),
        },
    }
}

/// The outcome of one message of a batch, as the single-message RPC would have answered.
fn outcome_from_wire(o: &pb::Outcome) -> Result<(), ClientError> {
    match tonic::Code::from_i32(o.code) {
        tonic::Code::Ok => Ok(()),
        code => Err(ClientError::Rpc(Status::new(code, o.message.clone()))),
    }
}

#[derive(Debug, Clone)]
struct CoordGrpc {
    inbox: Arc<Inbox>,
}

#[cfg(test)]
impl CoordGrpc {
    /// The service without a server (tests wrap it), and its inbox.
    fn for_test(coordinators: SharedCoordinators) -> (Self, Arc<Inbox>) {
        let inbox = Arc::new(Inbox {
            coordinators,
            queue: Mutex::new(VecDeque::new()),
            refusing: Mutex::new(None),
            senders: None,
        });
        let grpc = Self {
            inbox: Arc::clone(&inbox),
        };
        (grpc, inbox)
    }
}

#[tonic::async_trait]
impl CoordinatorService for CoordGrpc {
    async fn prepare(
        &self,
        request: Request<pb::PrepareRequest>,
    ) -> Result<Response<pb::Ack>, Status> {
        self.inbox.check_caller(&request)?;
        self.inbox
            .accept(wire::prepare_from_wire(request.get_ref()))
    }

    async fn prepare_reply(
        &self,
        request: Request<pb::PrepareReplyRequest>,
    ) -> Result<Response<pb::Ack>, Status> {
        self.inbox.check_caller(&request)?;
        self.inbox.accept(wire::reply_from_wire(request.get_ref()))
    }

    async fn decide(
        &self,
        request: Request<pb::DecideRequest>,
    ) -> Result<Response<pb::Ack>, Status> {
        self.inbox.check_caller(&request)?;
        self.inbox.accept(wire::decide_from_wire(request.get_ref()))
    }

    async fn deliver(
        &self,
        request: Request<pb::DeliverRequest>,
    ) -> Result<Response<pb::DeliverReply>, Status> {
        self.inbox.check_caller(&request)?;
        self.inbox.check_serving()?;
        let outcomes = request
            .get_ref()
            .messages
            .iter()
            .enumerate()
            .map(|(i, e)| outcome_to_wire(self.inbox.queue_one(wire::envelope_from_wire(i, e))))
            .collect();
        Ok(Response::new(pb::DeliverReply { outcomes }))
    }

    async fn query(
        &self,
        request: Request<pb::QueryRequest>,
    ) -> Result<Response<pb::QueryReply>, Status> {
        self.inbox.check_caller(&request)?;
        self.inbox.check_serving()?;
        let r = request.get_ref();
        let route = wire::route_from_wire(r.route.as_ref())
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        if r.txn.is_empty() {
            return Err(Status::invalid_argument("txn: empty"));
        }
        let phase = self.inbox.at_route(route, |c| c.phase(&r.txn))?;
        Ok(Response::new(wire::phase_to_wire(phase)))
    }
}

/// One replica's `CoordinatorService` on a loopback port, until [`CoordServer::stop`].
#[derive(Debug)]
pub struct CoordServer {
    addr: SocketAddr,
    inbox: Arc<Inbox>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), tonic::transport::Error>>>,
}

/// How long [`CoordServer::stop`] waits for open connections to finish before it drops
/// them.
const STOP_GRACE: Duration = Duration::from_secs(2);

impl CoordServer {
    /// Serves on `addr` (port 0: any free port) for the replica whose coordinators these
    /// are. Must be called within a tokio runtime.
    pub async fn start(
        addr: SocketAddr,
        coordinators: SharedCoordinators,
    ) -> std::io::Result<Self> {
        Self::start_over(addr, coordinators, Transport::Plaintext, None).await
    }

    /// [`start`](Self::start) over `transport`: under mutual TLS a caller without a
    /// certificate of the CA is refused in the handshake, and with `senders`, one whose
    /// certificate names none of them is refused each request (PERMISSION_DENIED).
    pub async fn start_over(
        addr: SocketAddr,
        coordinators: SharedCoordinators,
        transport: Transport,
        senders: Option<Members>,
    ) -> std::io::Result<Self> {
        // Plaintext callers have no certificate: a sender check would refuse them all.
        let senders = senders.filter(|_| transport.is_tls());
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let inbox = Arc::new(Inbox {
            coordinators,
            queue: Mutex::new(VecDeque::new()),
            refusing: Mutex::new(None),
            senders,
        });
        let service = CoordinatorServiceServer::new(CoordGrpc {
            inbox: Arc::clone(&inbox),
        })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let (tx, rx) = oneshot::channel::<()>();
        let router = Server::builder().add_service(service);
        let stop = async move {
            let _ = rx.await;
        };
        let task = tokio::spawn(async move {
            match transport {
                Transport::Plaintext => {
                    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
                    router.serve_with_incoming_shutdown(incoming, stop).await
                }
                Transport::Tls(state) => {
                    let incoming = phalanx_statestore::tls::incoming(listener, state);
                    router.serve_with_incoming_shutdown(incoming, stop).await
                }
            }
        });
        Ok(Self {
            addr,
            inbox,
            shutdown: Some(tx),
            task: Some(task),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The messages queued since the last call, in arrival order.
    pub fn take_delivered(&self) -> Vec<Delivery> {
        self.inbox.take()
    }

    /// `Some(why)`: answer every request UNAVAILABLE with `why`; `None`: serve again.
    pub fn set_refusing(&self, why: Option<String>) {
        *self
            .inbox
            .refusing
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = why;
    }

    /// Stops serving and closes the port; messages queued and not taken are lost.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(STOP_GRACE, &mut task).await.is_err()
        {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for CoordServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Why a request did not get through.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ClientError {
    /// The receiver refused it (or could not be reached): its status.
    #[error("{}: {}", .0.code(), .0.message())]
    Rpc(Status),
    /// The receiver answered something this replica cannot use.
    #[error("malformed answer: {0}")]
    Malformed(#[from] WireError),
    /// The address is not one a channel can be made to.
    #[error("bad address {addr}: {why}")]
    BadAddress {
        /// The address (`IP:port` or `host:port`).
        addr: String,
        /// Why.
        why: String,
    },
}

impl ClientError {
    /// The gRPC code of a refusal (`None` for a malformed answer or a bad address).
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            Self::Rpc(s) => Some(s.code()),
            _ => None,
        }
    }
}

/// A `Deliver` request carries at most this many bytes of messages (a message larger than
/// this goes alone), well under what a receiver decodes ([`MAX_MESSAGE_BYTES`]): a pump
/// that holds thousands of prepares for one replica sends them in several requests rather
/// than one the receiver would refuse whole, again at every resend.
pub const MAX_DELIVER_BYTES: usize = MAX_MESSAGE_BYTES / 4;

/// How many of `envelopes`, from the first, fit in one `Deliver` request (at least one).
fn batch_len(envelopes: &[pb::Envelope]) -> usize {
    use prost::Message as _;
    let mut bytes = 0usize;
    let mut n = 0;
    for e in envelopes {
        // Each repeated element costs its tag and length prefix too.
        bytes = bytes.saturating_add(e.encoded_len() + 8);
        if n > 0 && bytes > MAX_DELIVER_BYTES {
            break;
        }
        n += 1;
    }
    n.max(1)
}

/// A client of one replica's `CoordinatorService`; cloning shares the channel.
#[derive(Debug, Clone)]
pub struct CoordClient {
    inner: CoordinatorServiceClient<Channel>,
}

/// Connecting to a loopback port that is closed fails at once; the limits only bound a
/// receiver that stopped answering.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

impl CoordClient {
    /// A client that connects on its first request (and reconnects after a failure).
    /// Must be called within a tokio runtime.
    pub fn connect_lazy(addr: SocketAddr) -> Result<Self, ClientError> {
        Self::connect_lazy_to(&addr.to_string())
    }

    /// [`connect_lazy`](Self::connect_lazy) to `host:port`; a name is resolved at each
    /// connection, so a peer that comes back at a new address (a rescheduled pod) is found.
    pub fn connect_lazy_to(target: &str) -> Result<Self, ClientError> {
        Self::connect_lazy_over(target, 0, &Transport::Plaintext)
    }

    /// [`connect_lazy_to`](Self::connect_lazy_to) over `transport`; under mutual TLS the
    /// receiver must present a certificate naming replica `server_id`.
    pub fn connect_lazy_over(
        target: &str,
        server_id: u64,
        transport: &Transport,
    ) -> Result<Self, ClientError> {
        let endpoint = Endpoint::from_shared(format!("http://{target}"))
            .map_err(|e| ClientError::BadAddress {
                addr: target.to_string(),
                why: e.to_string(),
            })?
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .tcp_nodelay(true);
        Ok(Self {
            inner: CoordinatorServiceClient::new(transport.channel(endpoint, target, server_id))
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        })
    }

    /// Sends one message; `Ok` once the receiver has queued it.
    pub async fn send(&mut self, m: &CoordMessage) -> Result<(), ClientError> {
        self.send_wire(m.to_wire()).await
    }

    /// Sends `ms` as `Deliver` requests, as few as fit under [`MAX_DELIVER_BYTES`] each;
    /// one result per message, in order. A refusal of a whole request refuses each of its
    /// messages. A receiver that does not know `Deliver` (an older version, during a
    /// rolling upgrade) is sent them one by one.
    pub async fn send_all(&mut self, ms: &[CoordMessage]) -> Vec<Result<(), ClientError>> {
        let mut rest: Vec<pb::Envelope> = ms.iter().map(|m| m.to_wire().into_envelope()).collect();
        let mut results = Vec::with_capacity(ms.len());
        let mut start = 0;
        while !rest.is_empty() {
            // The request takes its envelopes rather than a copy of them.
            let tail = rest.split_off(batch_len(&rest));
            let end = start + rest.len();
            let request = pb::DeliverRequest { messages: rest };
            results.extend(self.deliver(request, &ms[start..end]).await);
            (rest, start) = (tail, end);
        }
        results
    }

    /// One `Deliver` request carrying `ms` (as `request`).
    async fn deliver(
        &mut self,
        request: pb::DeliverRequest,
        ms: &[CoordMessage],
    ) -> Vec<Result<(), ClientError>> {
        match self.inner.deliver(request).await {
            Ok(reply) if reply.get_ref().outcomes.len() == ms.len() => reply
                .get_ref()
                .outcomes
                .iter()
                .map(outcome_from_wire)
                .collect(),
            Ok(reply) => {
                let why = format!(
                    "{} outcomes for {} messages",
                    reply.get_ref().outcomes.len(),
                    ms.len()
                );
                ms.iter()
                    .map(|_| {
                        Err(ClientError::Malformed(wire::malformed(
                            "outcomes",
                            why.clone(),
                        )))
                    })
                    .collect()
            }
            Err(s) if s.code() == tonic::Code::Unimplemented => {
                let mut results = Vec::with_capacity(ms.len());
                for m in ms {
                    results.push(self.send(m).await);
                }
                results
            }
            Err(s) => ms
                .iter()
                .map(|_| Err(ClientError::Rpc(s.clone())))
                .collect(),
        }
    }

    /// Sends a request as it is (tests send malformed ones).
    pub async fn send_wire(&mut self, m: WireMessage) -> Result<(), ClientError> {
        let r = match m {
            WireMessage::Prepare(r) => self.inner.prepare(r).await,
            WireMessage::Reply(r) => self.inner.prepare_reply(r).await,
            WireMessage::Decide(r) => self.inner.decide(r).await,
        };
        r.map(|_| ()).map_err(ClientError::Rpc)
    }

    /// Asks the owner of `route.shard` (its coordinator) where `txn` is: `None` when it
    /// is not in flight there (never started there, or finished: read the ledger).
    pub async fn query(&mut self, route: Route, txn: &str) -> Result<Option<Phase>, ClientError> {
        let reply = self
            .inner
            .query(pb::QueryRequest {
                route: Some(pb::Route {
                    to_shard: route.shard,
                    to_epoch: route.epoch,
                }),
                txn: txn.to_string(),
            })
            .await
            .map_err(ClientError::Rpc)?;
        Ok(wire::phase_from_wire(reply.get_ref())?)
    }
}
