//! `start_replica`: one ledger replica (Raft + log store + state machine + gRPC server).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use openraft::error::{CheckIsLeaderError, ClientWriteError, InitializeError, RaftError};
use openraft::{BasicNode, RaftMetrics, SnapshotPolicy};
use phalanx_proto::ledger::ledger_service_server::LedgerServiceServer;
use phalanx_proto::raft::raft_service_server::RaftServiceServer;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

use crate::expiry::{Clock, spawn_expiry_loop, system_clock};
use crate::log_store::{FileLogStore, LogStoreStats};
use crate::network::{
    FaultInjector, FaultStats, LedgerGrpc, MAX_MESSAGE_BYTES, MAX_PROPOSAL_BYTES, NetworkFaults,
    PeerNetwork, RaftGrpc, Reachability,
};
use crate::raft_types::{
    BatchResponse, EncodedBatch, LedgerBatch, MAX_COMMANDS_PER_BATCH, NodeId, Raft,
};
use crate::state_machine::{LedgerReader, LedgerStateMachine};
use crate::tls::Transport;

/// Tunables of one replica; `validate` turns them into openraft's `Config`.
#[derive(Debug, Clone)]
pub struct ReplicaConfig {
    /// Leader heartbeat interval.
    pub heartbeat_ms: u64,
    /// Election timeout, lower bound.
    pub election_timeout_min_ms: u64,
    /// Election timeout, upper bound.
    pub election_timeout_max_ms: u64,
    /// Build a snapshot after this many entries since the last one.
    pub snapshot_every_entries: u64,
    /// Entries kept in the log behind a snapshot (so slow followers need no snapshot).
    pub keep_entries_after_snapshot: u64,
    /// Most entries in one AppendEntries.
    pub max_payload_entries: u64,
    /// TCP connect timeout to a peer.
    pub connect_timeout_ms: u64,
    /// Upper bound of one Raft RPC.
    pub rpc_timeout_ms: u64,
    /// How often the leader checks for transactions past their deadline.
    pub txn_expiry_interval_ms: u64,
}

impl Default for ReplicaConfig {
    fn default() -> Self {
        Self {
            heartbeat_ms: 40,
            election_timeout_min_ms: 100,
            election_timeout_max_ms: 200,
            snapshot_every_entries: 1000,
            keep_entries_after_snapshot: 100,
            max_payload_entries: 256,
            connect_timeout_ms: 500,
            rpc_timeout_ms: 2000,
            txn_expiry_interval_ms: 500,
        }
    }
}

impl ReplicaConfig {
    /// Checks the values and builds openraft's config.
    pub fn validate(&self) -> Result<openraft::Config, ReplicaError> {
        if self.txn_expiry_interval_ms == 0
            || self.connect_timeout_ms == 0
            || self.rpc_timeout_ms == 0
        {
            return Err(ReplicaError::Config(format!(
                "intervals and timeouts must be > 0 (from {self:?})"
            )));
        }
        let config = openraft::Config {
            cluster_name: "phalanx-ledger".to_string(),
            heartbeat_interval: self.heartbeat_ms,
            election_timeout_min: self.election_timeout_min_ms,
            election_timeout_max: self.election_timeout_max_ms,
            install_snapshot_timeout: self.rpc_timeout_ms,
            max_payload_entries: self.max_payload_entries,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_every_entries),
            max_in_snapshot_log_to_keep: self.keep_entries_after_snapshot,
            // JSON framing can quadruple bytes; stay well under MAX_MESSAGE_BYTES.
            snapshot_max_chunk_size: (MAX_MESSAGE_BYTES / 8) as u64,
            ..openraft::Config::default()
        };
        config
            .validate()
            .map_err(|e| ReplicaError::Config(format!("{e} (from {self:?})")))
    }
}

/// Failures starting or driving a replica.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// Invalid configuration (the offending values are in the message).
    #[error("invalid replica config: {0}")]
    Config(String),
    /// Disk or socket IO.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// openraft stopped or refused.
    #[error("raft: {0}")]
    Raft(String),
    /// This replica is not the leader.
    #[error("not the leader; leader is {leader_id:?} at {leader_addr:?}")]
    NotLeader {
        /// Known leader id.
        leader_id: Option<NodeId>,
        /// Known leader address.
        leader_addr: Option<String>,
    },
    /// A proposal over `MAX_PROPOSAL_BYTES` (or over `MAX_COMMANDS_PER_BATCH`).
    #[error("proposal too large: {0}")]
    TooLarge(String),
    /// A bounded wait ran out.
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(Duration, String),
}

/// A running replica. Call `shutdown` to stop it (dropping it stops the gRPC server
/// but not Raft).
pub struct ReplicaHandle {
    id: NodeId,
    addr: SocketAddr,
    dir: PathBuf,
    raft: Raft,
    reader: LedgerReader,
    log: FileLogStore,
    isolated: Arc<AtomicBool>,
    faults: FaultInjector,
    reach: Reachability,
    shutdown_tx: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<Result<(), tonic::transport::Error>>>,
    expiry: Option<JoinHandle<()>>,
}

/// Starts replica `id` with its data in `dir`, serving on `addr` (port 0 picks a free
/// port; see `ReplicaHandle::addr`). Default config.
pub async fn start_replica(
    id: NodeId,
    dir: &Path,
    addr: SocketAddr,
) -> Result<ReplicaHandle, ReplicaError> {
    start_replica_with(id, dir, addr, &ReplicaConfig::default()).await
}

/// Opens sled, retrying (bounded) while a just-stopped replica in this process still
/// holds its lock.
async fn open_state_machine(dir: &Path) -> Result<LedgerStateMachine, ReplicaError> {
    const ATTEMPTS: u32 = 100;
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let d = dir.to_path_buf();
        match tokio::task::spawn_blocking(move || LedgerStateMachine::open(&d))
            .await
            .map_err(std::io::Error::other)?
        {
            Ok(sm) => return Ok(sm),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(ReplicaError::Io(last.unwrap_or_else(|| {
        std::io::Error::other("state machine did not open")
    })))
}

/// Starts a replica with an explicit config (transaction deadlines on the system clock).
pub async fn start_replica_with(
    id: NodeId,
    dir: &Path,
    addr: SocketAddr,
    config: &ReplicaConfig,
) -> Result<ReplicaHandle, ReplicaError> {
    start_replica_with_clock(id, dir, addr, config, system_clock()).await
}

/// Starts a replica whose transaction-expiry loop reads `clock` (milliseconds, the clock
/// proposers write `deadline_ms` in), in plaintext.
pub async fn start_replica_with_clock(
    id: NodeId,
    dir: &Path,
    addr: SocketAddr,
    config: &ReplicaConfig,
    clock: Clock,
) -> Result<ReplicaHandle, ReplicaError> {
    start_replica_over(id, dir, addr, config, clock, Transport::Plaintext).await
}

/// Starts a replica whose Raft and ledger services, and whose calls to its peers, go over
/// `transport` (under mutual TLS a peer must present a certificate naming the id it
/// claims; see `tls.rs`).
pub async fn start_replica_over(
    id: NodeId,
    dir: &Path,
    addr: SocketAddr,
    config: &ReplicaConfig,
    clock: Clock,
    transport: Transport,
) -> Result<ReplicaHandle, ReplicaError> {
    let raft_config = Arc::new(config.validate()?);
    let d = dir.to_path_buf();
    let log = tokio::task::spawn_blocking(move || FileLogStore::open(&d))
        .await
        .map_err(std::io::Error::other)??;
    let sm = open_state_machine(dir).await?;
    let reader = sm.reader();
    let isolated = Arc::new(AtomicBool::new(false));
    let faults = FaultInjector::new();
    let reach = Reachability::new();
    let network = PeerNetwork::new(
        Arc::clone(&isolated),
        Duration::from_millis(config.connect_timeout_ms),
        Duration::from_millis(config.rpc_timeout_ms),
    )
    .with_faults(faults.clone())
    .with_transport(transport.clone())
    .with_reachability(reach.clone());
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let raft = Raft::new(id, raft_config, network, log.clone(), sm)
        .await
        .map_err(|e| ReplicaError::Raft(e.to_string()))?;
    let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
    let mut raft_grpc = RaftGrpc::new(raft.clone(), Arc::clone(&isolated));
    if transport.is_tls() {
        raft_grpc = raft_grpc.verifying_sender();
    }
    let raft_svc = RaftServiceServer::new(raft_grpc)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let mut ledger_grpc = LedgerGrpc::new(raft.clone(), reader.clone(), Arc::clone(&isolated));
    if transport.is_tls() {
        ledger_grpc = ledger_grpc.proposals_from_members_only();
    }
    let ledger_svc = LedgerServiceServer::new(ledger_grpc)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let router = Server::builder()
        .add_service(raft_svc)
        .add_service(ledger_svc);
    let stop = async move {
        let _ = shutdown_rx.await;
    };
    let server = tokio::spawn(async move {
        match transport {
            Transport::Plaintext => {
                let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
                router.serve_with_incoming_shutdown(incoming, stop).await
            }
            Transport::Tls(state) => {
                let incoming = crate::tls::incoming(listener, state);
                router.serve_with_incoming_shutdown(incoming, stop).await
            }
        }
    });
    let expiry = spawn_expiry_loop(
        raft.clone(),
        reader.clone(),
        Duration::from_millis(config.txn_expiry_interval_ms),
        clock,
    );
    tracing::info!(id, %local, dir = %dir.display(), "ledger replica started");
    Ok(ReplicaHandle {
        id,
        addr: local,
        dir: dir.to_path_buf(),
        raft,
        reader,
        log,
        isolated,
        faults,
        reach,
        shutdown_tx: Some(shutdown_tx),
        server: Some(server),
        expiry: Some(expiry),
    })
}

impl std::fmt::Debug for ReplicaHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaHandle")
            .field("id", &self.id)
            .field("addr", &self.addr)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// The voters and learners of the membership `raft` has applied: the replicas that may
/// propose to the ledger and send 2PC messages under mutual TLS (a learner's scheduler
/// too).
pub fn member_ids(raft: &Raft) -> Vec<NodeId> {
    raft.metrics()
        .borrow()
        .membership_config
        .membership()
        .nodes()
        .map(|(id, _)| *id)
        .collect()
}

impl ReplicaHandle {
    /// Raft node id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The address it serves on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its membership entry.
    pub fn node(&self) -> BasicNode {
        BasicNode {
            addr: self.addr.to_string(),
        }
    }

    /// The openraft handle (membership changes, metrics, triggers).
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// Latest Raft metrics.
    pub fn metrics(&self) -> RaftMetrics<NodeId, BasicNode> {
        self.raft.metrics().borrow().clone()
    }

    /// The peers whose Raft listener refused this replica's last connection attempt and
    /// have not answered since: crashed or restarting (`network/reachability.rs`).
    pub fn peers_refusing(&self) -> BTreeSet<NodeId> {
        self.reach.refusing()
    }

    /// Changes each time a peer starts refusing this replica's connections.
    pub fn newly_refusing(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reach.subscribe()
    }

    /// Changes each time the applied ledger moved a shard (`LedgerReader::shard_moves`).
    pub fn shard_moves(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reader.shard_moves()
    }

    /// Log file size and entry count.
    pub fn log_stats(&self) -> Result<LogStoreStats, ReplicaError> {
        Ok(self.log.stats()?)
    }

    /// Reads this replica's applied state (local, NOT linearizable: may lag the leader).
    pub fn read_local<T>(
        &self,
        f: impl FnOnce(&crate::ledger::LedgerState, Option<crate::raft_types::LogId>) -> T,
    ) -> T {
        self.reader.read(f)
    }

    /// Linearizable read on this replica (it must be the leader): confirms leadership with
    /// a quorum (ReadIndex), waits until applied, then runs `f`.
    pub async fn read_linearizable<T>(
        &self,
        f: impl FnOnce(&crate::ledger::LedgerState, Option<crate::raft_types::LogId>) -> T,
    ) -> Result<T, ReplicaError> {
        match self.raft.ensure_linearizable().await {
            Ok(_) => Ok(self.reader.read(f)),
            Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(fw))) => {
                Err(ReplicaError::NotLeader {
                    leader_id: fw.leader_id,
                    leader_addr: fw.leader_node.map(|n| n.addr),
                })
            }
            Err(e) => Err(ReplicaError::Raft(e.to_string())),
        }
    }

    /// Proposes a batch on this replica (it must be the leader); returns the responses
    /// and the log index once committed and applied.
    pub async fn propose(&self, batch: LedgerBatch) -> Result<(BatchResponse, u64), ReplicaError> {
        if batch.commands.len() > MAX_COMMANDS_PER_BATCH {
            return Err(ReplicaError::TooLarge(format!(
                "{} commands, limit {MAX_COMMANDS_PER_BATCH}",
                batch.commands.len()
            )));
        }
        let entry = EncodedBatch::encode(&batch)
            .map_err(|e| ReplicaError::TooLarge(format!("unserializable batch: {e}")))?;
        if entry.len() > MAX_PROPOSAL_BYTES {
            return Err(ReplicaError::TooLarge(format!(
                "{} bytes, limit {MAX_PROPOSAL_BYTES}",
                entry.len()
            )));
        }
        match self.raft.client_write(entry).await {
            Ok(r) => Ok((r.data, r.log_id.index)),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(fw))) => {
                Err(ReplicaError::NotLeader {
                    leader_id: fw.leader_id,
                    leader_addr: fw.leader_node.map(|n| n.addr),
                })
            }
            Err(e) => Err(ReplicaError::Raft(e.to_string())),
        }
    }

    /// Forms the initial cluster (of one or more replicas): call on one replica only, with
    /// every initial member. Already initialized is not an error.
    pub async fn initialize(
        &self,
        members: BTreeMap<NodeId, BasicNode>,
    ) -> Result<(), ReplicaError> {
        match self.raft.initialize(members).await {
            Ok(()) | Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(ReplicaError::Raft(e.to_string())),
        }
    }

    /// Cuts (or restores) this replica off the network: its outgoing Raft RPCs fail and
    /// its gRPC services answer `Unavailable`.
    pub fn set_isolated(&self, isolated: bool) {
        self.isolated.store(isolated, Ordering::Relaxed);
    }

    /// Test seam: delays and drops this replica's outgoing Raft RPCs as `faults` says,
    /// drawing from streams seeded with `seed` (see `network::faults`); inert faults
    /// clear them. Refused if a bound is exceeded (drop > 1000 per mille, delay > 5 s).
    pub fn set_faults(&self, faults: NetworkFaults, seed: u64) -> Result<(), ReplicaError> {
        self.faults.set(faults, seed).map_err(ReplicaError::Config)
    }

    /// The faults in force on this replica's outgoing RPCs, if any.
    pub fn faults(&self) -> Option<NetworkFaults> {
        self.faults.current()
    }

    /// What fault injection did to this replica's outgoing RPCs since it started.
    pub fn fault_stats(&self) -> FaultStats {
        self.faults.stats()
    }

    /// True while cut off by `set_isolated`.
    pub fn is_isolated(&self) -> bool {
        self.isolated.load(Ordering::Relaxed)
    }

    /// Waits (bounded) until `cond` holds on this replica's metrics.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        what: &str,
        cond: impl Fn(&RaftMetrics<NodeId, BasicNode>) -> bool + Send,
    ) -> Result<RaftMetrics<NodeId, BasicNode>, ReplicaError> {
        self.raft
            .wait(Some(timeout))
            .metrics(cond, what)
            .await
            .map_err(|_| ReplicaError::Timeout(timeout, what.to_string()))
    }

    /// Stops Raft and the server, and releases the data directory.
    pub async fn shutdown(mut self) -> Result<(), ReplicaError> {
        // Connections accepted before the stop are served by their own tasks, which
        // outlive the server task; refusing on them keeps a stopped replica looking like a
        // dead process (connection refused = `Unavailable`, surely not appended) rather
        // than a live one whose Raft answers "stopped" (an ambiguous internal error).
        self.isolated.store(true, Ordering::Relaxed);
        if let Some(tx) = self.shutdown_tx.take() {
            let _ = tx.send(());
        }
        if let Some(expiry) = self.expiry.take() {
            expiry.abort();
        }
        let stop = self.raft.shutdown().await;
        if let Some(server) = self.server.take() {
            server.abort();
            let _ = server.await;
        }
        stop.map_err(|e| ReplicaError::Raft(e.to_string()))
    }
}

impl Drop for ReplicaHandle {
    fn drop(&mut self) {
        self.isolated.store(true, Ordering::Relaxed);
        if let Some(tx) = self.shutdown_tx.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            server.abort();
        }
        if let Some(expiry) = self.expiry.take() {
            expiry.abort();
        }
    }
}
