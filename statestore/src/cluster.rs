//! `start_local_cluster`: N replicas in this process on 127.0.0.1 ephemeral ports, for
//! tests, the simulator (`phalanx simulate --replicas 3`) and benchmarks.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use openraft::BasicNode;

use crate::client::{ClientConfig, LedgerClient};
use crate::network::NetworkFaults;
use crate::network::faults::mix;
use crate::raft_types::NodeId;
use crate::replica::{ReplicaConfig, ReplicaError, ReplicaHandle, start_replica_with};

/// Most replicas one local cluster may run.
pub const MAX_LOCAL_REPLICAS: usize = 9;

/// Replicas running in this process. Replica ids are 1..=n; replica `i` keeps its data
/// in `base_dir/replica-i` and its address across restarts.
#[derive(Debug)]
pub struct LocalCluster {
    base_dir: PathBuf,
    config: ReplicaConfig,
    running: BTreeMap<NodeId, ReplicaHandle>,
    addrs: BTreeMap<NodeId, SocketAddr>,
    /// Seed of the fault-injection streams (`set_faults`).
    fault_seed: u64,
    /// Faults per replica, kept across `kill`/`restart`.
    faults: BTreeMap<NodeId, NetworkFaults>,
}

/// Starts `n` replicas with the default config, initializes them as one cluster of `n`
/// voters and waits (bounded) for a leader.
pub async fn start_local_cluster(n: usize, base_dir: &Path) -> Result<LocalCluster, ReplicaError> {
    start_local_cluster_with(n, base_dir, ReplicaConfig::default()).await
}

/// Same, with an explicit replica config.
pub async fn start_local_cluster_with(
    n: usize,
    base_dir: &Path,
    config: ReplicaConfig,
) -> Result<LocalCluster, ReplicaError> {
    if n == 0 || n > MAX_LOCAL_REPLICAS {
        return Err(ReplicaError::Config(format!(
            "replicas = {n}, must be 1..={MAX_LOCAL_REPLICAS}"
        )));
    }
    let mut cluster = LocalCluster {
        base_dir: base_dir.to_path_buf(),
        config,
        running: BTreeMap::new(),
        addrs: BTreeMap::new(),
        fault_seed: 0,
        faults: BTreeMap::new(),
    };
    for id in 1..=n as NodeId {
        cluster.start(id, loopback_any_port()).await?;
    }
    let members: BTreeMap<NodeId, BasicNode> = cluster
        .running
        .values()
        .map(|r| (r.id(), r.node()))
        .collect();
    cluster.replica_or_err(1)?.initialize(members).await?;
    cluster.wait_for_leader(Duration::from_secs(10)).await?;
    Ok(cluster)
}

fn loopback_any_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

impl LocalCluster {
    async fn start(&mut self, id: NodeId, addr: SocketAddr) -> Result<(), ReplicaError> {
        let dir = self.dir_of(id);
        let handle = start_replica_with(id, &dir, addr, &self.config).await?;
        if let Some(f) = self.faults.get(&id) {
            handle.set_faults(*f, self.replica_fault_seed(id))?;
        }
        self.addrs.insert(id, handle.addr());
        self.running.insert(id, handle);
        Ok(())
    }

    /// Data directory of replica `id`.
    pub fn dir_of(&self, id: NodeId) -> PathBuf {
        self.base_dir.join(format!("replica-{id}"))
    }

    /// A running replica.
    pub fn replica(&self, id: NodeId) -> Option<&ReplicaHandle> {
        self.running.get(&id)
    }

    fn replica_or_err(&self, id: NodeId) -> Result<&ReplicaHandle, ReplicaError> {
        self.running
            .get(&id)
            .ok_or_else(|| ReplicaError::Config(format!("replica {id} is not running")))
    }

    /// Ids of running replicas.
    pub fn running_ids(&self) -> Vec<NodeId> {
        self.running.keys().copied().collect()
    }

    /// Addresses of every replica ever started (running or not).
    pub fn addrs(&self) -> &BTreeMap<NodeId, SocketAddr> {
        &self.addrs
    }

    /// A client over every known replica.
    pub fn client(&self) -> LedgerClient {
        self.client_with(ClientConfig::default())
    }

    /// A client with explicit limits.
    pub fn client_with(&self, config: ClientConfig) -> LedgerClient {
        LedgerClient::with_config(
            self.addrs.iter().map(|(id, a)| (*id, a.to_string())),
            config,
        )
    }

    /// Waits (bounded) until some running, non-isolated replica is leader, as seen by
    /// that replica and acknowledged by its own metrics; returns its id.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<NodeId, ReplicaError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            for r in self.running.values().filter(|r| !r.is_isolated()) {
                let m = r.metrics();
                if m.current_leader == Some(r.id()) && m.state.is_leader() {
                    return Ok(r.id());
                }
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(ReplicaError::Timeout(timeout, "a leader".to_string()));
            }
            // Wake on any replica's metrics change, or after a short tick.
            let wait = (deadline - now).min(Duration::from_millis(50));
            let mut receivers: Vec<_> = self.running.values().map(|r| r.raft().metrics()).collect();
            let changes = receivers.iter_mut().map(|rx| Box::pin(rx.changed()));
            let _ = tokio::time::timeout(wait, futures_select_any(changes)).await;
        }
    }

    /// The current leader among running, non-isolated replicas, if one claims it (an
    /// isolated old leader may still believe it leads; it is skipped).
    pub fn leader(&self) -> Option<NodeId> {
        self.running
            .values()
            .filter(|r| !r.is_isolated())
            .find(|r| r.metrics().state.is_leader())
            .map(ReplicaHandle::id)
    }

    /// Waits (bounded) until every running replica has applied at least `index`.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> Result<(), ReplicaError> {
        for r in self.running.values() {
            r.wait_for(
                timeout,
                &format!("replica {} applied {index}", r.id()),
                |m| m.last_applied.is_some_and(|l| l.index >= index),
            )
            .await?;
        }
        Ok(())
    }

    /// Stops replica `id` (its data and address are kept for `restart`).
    pub async fn kill(&mut self, id: NodeId) -> Result<(), ReplicaError> {
        let r = self
            .running
            .remove(&id)
            .ok_or_else(|| ReplicaError::Config(format!("replica {id} is not running")))?;
        r.shutdown().await
    }

    /// Starts a stopped replica again on its old address and data.
    pub async fn restart(&mut self, id: NodeId) -> Result<(), ReplicaError> {
        let addr = *self
            .addrs
            .get(&id)
            .ok_or_else(|| ReplicaError::Config(format!("replica {id} never ran")))?;
        self.start(id, addr).await
    }

    /// Cuts replica `id` off the network, or reconnects it.
    pub fn isolate(&self, id: NodeId, isolated: bool) -> Result<(), ReplicaError> {
        self.replica_or_err(id)?.set_isolated(isolated);
        Ok(())
    }

    /// Test seam: seeds the fault-injection streams of every replica from `seed`
    /// (replica `i` draws from `mix(seed ^ i)`, its link to `j` from
    /// `mix(mix(seed ^ i) ^ j)`; see `network::faults`). Applies to faults set after it.
    /// Default 0.
    pub fn set_fault_seed(&mut self, seed: u64) {
        self.fault_seed = seed;
    }

    fn replica_fault_seed(&self, id: NodeId) -> u64 {
        mix(self.fault_seed ^ id)
    }

    /// Test seam: delays and drops the outgoing Raft RPCs of replica `id` (running or
    /// not; kept across `kill`/`restart`, the streams restart with the replica). Inert
    /// faults clear them.
    pub fn set_faults(&mut self, id: NodeId, faults: NetworkFaults) -> Result<(), ReplicaError> {
        if !self.addrs.contains_key(&id) {
            return Err(ReplicaError::Config(format!("replica {id} never ran")));
        }
        faults.validate().map_err(ReplicaError::Config)?;
        if let Some(r) = self.running.get(&id) {
            r.set_faults(faults, self.replica_fault_seed(id))?;
        }
        if faults.is_inert() {
            self.faults.remove(&id);
        } else {
            self.faults.insert(id, faults);
        }
        Ok(())
    }

    /// Sets the same faults on every replica's outgoing RPCs (every link, both ways).
    pub fn set_faults_all(&mut self, faults: NetworkFaults) -> Result<(), ReplicaError> {
        let ids: Vec<NodeId> = self.addrs.keys().copied().collect();
        for id in ids {
            self.set_faults(id, faults)?;
        }
        Ok(())
    }

    /// Removes every injected fault.
    pub fn clear_faults(&mut self) {
        for r in self.running.values() {
            r.set_faults(NetworkFaults::default(), 0)
                .expect("inert faults are valid");
        }
        self.faults.clear();
    }

    /// Starts a new replica, adds it as a learner (waiting until it caught up), then
    /// makes it a voter. Returns its id.
    pub async fn add_replica(&mut self) -> Result<NodeId, ReplicaError> {
        if self.running.len() >= MAX_LOCAL_REPLICAS {
            return Err(ReplicaError::Config(format!(
                "already {MAX_LOCAL_REPLICAS} replicas"
            )));
        }
        let id = self.addrs.keys().next_back().copied().unwrap_or(0) + 1;
        self.start(id, loopback_any_port()).await?;
        let node = self.replica_or_err(id)?.node();
        let leader = self.wait_for_leader(Duration::from_secs(10)).await?;
        let raft = self.replica_or_err(leader)?.raft().clone();
        raft.add_learner(id, node, true)
            .await
            .map_err(|e| ReplicaError::Raft(e.to_string()))?;
        let voters = self
            .voters(leader)?
            .into_iter()
            .chain([id])
            .collect::<BTreeSet<_>>();
        raft.change_membership(voters, false)
            .await
            .map_err(|e| ReplicaError::Raft(e.to_string()))?;
        Ok(id)
    }

    /// Removes replica `id` from the membership, then stops it.
    pub async fn remove_replica(&mut self, id: NodeId) -> Result<(), ReplicaError> {
        let leader = self.wait_for_leader(Duration::from_secs(10)).await?;
        let raft = self.replica_or_err(leader)?.raft().clone();
        let voters: BTreeSet<NodeId> = self
            .voters(leader)?
            .into_iter()
            .filter(|v| *v != id)
            .collect();
        raft.change_membership(voters, false)
            .await
            .map_err(|e| ReplicaError::Raft(e.to_string()))?;
        if self.running.contains_key(&id) {
            self.kill(id).await?;
        }
        self.addrs.remove(&id);
        Ok(())
    }

    /// Voter ids in the membership the leader `leader` has applied.
    pub fn voters(&self, leader: NodeId) -> Result<Vec<NodeId>, ReplicaError> {
        let m = self.replica_or_err(leader)?.metrics();
        Ok(m.membership_config.membership().voter_ids().collect())
    }

    /// Stops every replica.
    pub async fn shutdown(mut self) -> Result<(), ReplicaError> {
        let ids: Vec<NodeId> = self.running.keys().copied().collect();
        for id in ids {
            self.kill(id).await?;
        }
        Ok(())
    }
}

/// Resolves when any of the futures resolves (a tiny `select_all` without a dependency).
async fn futures_select_any<F>(futs: impl Iterator<Item = std::pin::Pin<Box<F>>>)
where
    F: std::future::Future,
{
    let mut futs: Vec<_> = futs.collect();
    if futs.is_empty() {
        return;
    }
    std::future::poll_fn(|cx| {
        for f in futs.iter_mut() {
            if f.as_mut().poll(cx).is_ready() {
                return std::task::Poll::Ready(());
            }
        }
        std::task::Poll::Pending
    })
    .await;
}
