//! The 2PC network of `phalanx simulate --replicas R`: each logical scheduler replica
//! serves `CoordinatorService` on its own 127.0.0.1 port, and the single-threaded runtime
//! sends cross-replica messages as real gRPC requests (one message, or a batch to one
//! receiver with `Deliver`), blocking until the receiver's server has queued them, then
//! takes what was queued. One request is in flight at a time, so the order in which the
//! state machines see events is the order of sends, whatever the threads do.
//!
//! A replica that is killed has its server stopped: its port closes, and a message to it is
//! refused at connect (senders keep its last address, as a real peer would). A paused or
//! cut-off one answers UNAVAILABLE; a restarted one serves on a new port. Should the OS
//! give a closed port to another replica's server, a message meant for the old one is
//! still refused: it names a shard at an epoch that the new listener does not own.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};

use phalanx_statestore::ledger::ReplicaId;

use super::{ClientError, CoordClient, CoordMessage, CoordServer, Delivery, SharedCoordinators};

/// Counts of the messages sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoopbackStats {
    /// Requests acknowledged (queued by their receiver).
    pub delivered: u64,
    /// Requests refused or not answered (receiver down, paused, cut off, not the owner).
    pub refused: u64,
    /// Sends: one per [`LoopbackNet::send`], one per batch of [`LoopbackNet::send_all`]
    /// (a batch over `MAX_DELIVER_BYTES` goes in several gRPC requests).
    pub requests: u64,
}

/// One server per replica and one channel per receiver, on a runtime of their own that
/// runs only while a call here waits.
#[derive(Debug)]
pub struct LoopbackNet {
    servers: BTreeMap<ReplicaId, CoordServer>,
    /// Where each replica was last heard to listen (kept after it stops).
    addresses: BTreeMap<ReplicaId, SocketAddr>,
    /// Channels by receiver, with the address they go to (a restarted receiver has a new
    /// one). Reused for every message.
    clients: BTreeMap<ReplicaId, (SocketAddr, CoordClient)>,
    stats: LoopbackStats,
    /// Dropped last (declared last): the servers' and channels' tasks run on it.
    runtime: tokio::runtime::Runtime,
}

impl LoopbackNet {
    /// A network with no replica yet.
    pub fn new() -> std::io::Result<Self> {
        // A current-thread runtime: the caller's `block_on` drives the request, the
        // connections and the receiving server, so a message costs no hand-over between
        // threads (on a busy machine each hand-over waits for a time slice). Between
        // sends nothing runs, which is right: the runtime is the only sender.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Self {
            servers: BTreeMap::new(),
            addresses: BTreeMap::new(),
            clients: BTreeMap::new(),
            stats: LoopbackStats::default(),
            runtime,
        })
    }

    /// Starts replica `id`'s server (stopping the one it had: a restart gets a new port).
    pub fn serve(
        &mut self,
        id: ReplicaId,
        coordinators: SharedCoordinators,
    ) -> std::io::Result<()> {
        self.stop(id);
        let any_port = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let server = self
            .runtime
            .block_on(CoordServer::start(any_port, coordinators))?;
        self.addresses.insert(id, server.addr());
        self.servers.insert(id, server);
        Ok(())
    }

    /// Stops replica `id`'s server (a killed replica); what it queued and was not taken
    /// is lost.
    pub fn stop(&mut self, id: ReplicaId) {
        self.clients.remove(&id);
        if let Some(server) = self.servers.remove(&id) {
            self.runtime.block_on(server.stop());
        }
    }

    /// `Some(why)`: replica `id` answers UNAVAILABLE; `None`: it serves again.
    pub fn set_refusing(&mut self, id: ReplicaId, why: Option<String>) {
        if let Some(s) = self.servers.get(&id) {
            s.set_refusing(why);
        }
    }

    /// Whether replica `id` has a server running.
    pub fn is_serving(&self, id: ReplicaId) -> bool {
        self.servers.contains_key(&id)
    }

    /// Where replica `id` listens.
    pub fn addr(&self, id: ReplicaId) -> Option<SocketAddr> {
        self.servers.get(&id).map(CoordServer::addr)
    }

    /// Sends `m` to replica `to` and waits for its Ack.
    pub fn send(&mut self, to: ReplicaId, m: &CoordMessage) -> Result<(), ClientError> {
        let result = match self.client(to) {
            Ok(mut c) => self.runtime.block_on(c.send(m)),
            Err(e) => Err(e),
        };
        self.count(std::slice::from_ref(&result));
        result
    }

    /// Sends `ms` to replica `to` as one request (`Deliver`), in order, and waits for the
    /// outcome of each.
    pub fn send_all(&mut self, to: ReplicaId, ms: &[CoordMessage]) -> Vec<Result<(), ClientError>> {
        let results = match self.client(to) {
            Ok(mut c) => self.runtime.block_on(c.send_all(ms)),
            Err(e) => ms.iter().map(|_| Err(e.clone())).collect(),
        };
        self.count(&results);
        results
    }

    fn count(&mut self, results: &[Result<(), ClientError>]) {
        self.stats.requests += 1;
        for r in results {
            match r {
                Ok(()) => self.stats.delivered += 1,
                Err(_) => self.stats.refused += 1,
            }
        }
    }

    /// Everything the servers queued, replica by replica in id order, each in arrival order.
    pub fn take_delivered(&mut self) -> Vec<(ReplicaId, Delivery)> {
        self.servers
            .iter()
            .flat_map(|(id, s)| s.take_delivered().into_iter().map(|d| (*id, d)))
            .collect()
    }

    /// Counts so far.
    pub fn stats(&self) -> LoopbackStats {
        self.stats
    }

    fn client(&mut self, to: ReplicaId) -> Result<CoordClient, ClientError> {
        let Some(addr) = self.addresses.get(&to).copied() else {
            return Err(ClientError::Rpc(tonic::Status::unavailable(format!(
                "replica {to} has never served"
            ))));
        };
        if let Some((a, c)) = self.clients.get(&to)
            && *a == addr
        {
            return Ok(c.clone());
        }
        // A channel's background task is spawned on the current runtime.
        let _guard = self.runtime.enter();
        let c = CoordClient::connect_lazy(addr)?;
        self.clients.insert(to, (addr, c.clone()));
        Ok(c)
    }
}

impl Drop for LoopbackNet {
    fn drop(&mut self) {
        let ids: Vec<ReplicaId> = self.servers.keys().copied().collect();
        for id in ids {
            self.stop(id);
        }
    }
}
