//! N replicas of the replicated ledger in this process: real openraft, fsynced log files,
//! snapshot files, tonic gRPC on 127.0.0.1, in a temporary directory removed on drop. The
//! scheduler talks to them only through the typed `LedgerClient`, as a remote scheduler
//! would, so every proposal goes through the leader and a quorum.

use std::sync::Arc;

use phalanx_statestore::ledger::ReplicaId;
use phalanx_statestore::{
    ClientError, LedgerBatch, LedgerClient, LedgerCommand, LedgerMirror, LedgerResponse,
    LedgerState, LocalCluster, MAX_COMMANDS_PER_BATCH, ReplicaConfig, start_local_cluster_with,
};

/// Transaction deadlines in a simulated run are in simulated time, and the sharded
/// runtime's leader role proposes `ExpireAt` on that clock. The replicas' own expiry loop
/// reads the wall clock, on which every simulated deadline is long past: it would abort
/// (and forget) transactions mid-flight whenever it ticks. It ticks once a day here.
const WALL_CLOCK_EXPIRY_INTERVAL_MS: u64 = 24 * 60 * 60 * 1000;

fn simulated_time_config() -> ReplicaConfig {
    ReplicaConfig {
        txn_expiry_interval_ms: WALL_CLOCK_EXPIRY_INTERVAL_MS,
        ..ReplicaConfig::default()
    }
}

use super::proposal_split::{gang_names, merge, split_for_ledger};
use super::{LedgerBackend, LedgerError, LedgerFault};

#[derive(Debug)]
pub struct RaftLedger {
    runtime: tokio::runtime::Runtime,
    cluster: Option<LocalCluster>,
    client: LedgerClient,
    /// The ledger as last read: each read fetches only what changed since.
    mirror: LedgerMirror,
    replicas: usize,
    /// Replicas stopped by faults, most recent last.
    stopped: Vec<u64>,
    /// Raft entries proposed (a list of commands goes in as few as the limits allow).
    entries: u64,
    // Dropped last: the replicas' data lives here.
    _dir: tempfile::TempDir,
}

impl RaftLedger {
    /// Starts `replicas` replicas, forms one Raft group and waits for a leader.
    pub fn start(replicas: usize) -> Result<Self, LedgerError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| LedgerError::Start(e.to_string()))?;
        let dir = tempfile::Builder::new()
            .prefix("phalanx-ledger-")
            .tempdir()
            .map_err(|e| LedgerError::Start(e.to_string()))?;
        let cluster = runtime
            .block_on(start_local_cluster_with(
                replicas,
                dir.path(),
                simulated_time_config(),
            ))
            .map_err(|e| LedgerError::Start(e.to_string()))?;
        let client = cluster.client();
        Ok(Self {
            runtime,
            cluster: Some(cluster),
            client,
            mirror: LedgerMirror::new(),
            replicas,
            stopped: Vec::new(),
            entries: 0,
            _dir: dir,
        })
    }

    /// Proposes commands in as few Raft entries as the batch limit allows.
    fn propose_all(
        &mut self,
        commands: Vec<LedgerCommand>,
    ) -> Result<Vec<LedgerResponse>, LedgerError> {
        let handle = self.runtime.handle();
        propose_through(handle, &self.client, commands, true, &mut self.entries)
    }
}

/// Proposes `commands` through `client`, in as few Raft entries as the batch limit allows,
/// from a thread outside `handle`'s runtime, counting them in `entries`. With
/// `stop_at_refusal` a refused command is an error and the batches after it are not
/// proposed; without, every response is returned, refusals included (the sharded runtime
/// reads the typed refusal).
pub(crate) fn propose_through(
    handle: &tokio::runtime::Handle,
    client: &LedgerClient,
    commands: Vec<LedgerCommand>,
    stop_at_refusal: bool,
    entries: &mut u64,
) -> Result<Vec<LedgerResponse>, LedgerError> {
    let (answered, proposed) = handle.block_on(propose_split(client, commands, stop_at_refusal));
    *entries += proposed;
    answered
}

/// [`propose_through`] as a future: the answers and the Raft entries proposed.
async fn propose_split(
    client: &LedgerClient,
    commands: Vec<LedgerCommand>,
    stop_at_refusal: bool,
) -> (Result<Vec<LedgerResponse>, LedgerError>, u64) {
    let count = commands.len();
    let mut entries = 0;
    let batches = match split_for_ledger(commands, MAX_COMMANDS_PER_BATCH) {
        Ok(b) => b,
        Err(e) => return (Err(e), entries),
    };
    // Within the entry's command and byte limits (a large plan is cut, never refused
    // whole); one response per command comes back.
    let mut answered = Vec::with_capacity(count);
    for batch in batches {
        let (indices, commands): (Vec<(usize, Vec<String>)>, Vec<LedgerCommand>) = batch
            .into_iter()
            .map(|p| ((p.index, gang_names(&p.command)), p.command))
            .unzip();
        entries += 1;
        let committed = match client.propose(&LedgerBatch { commands }).await {
            Ok(c) => c,
            Err(ClientError::Ambiguous(why)) => {
                return (Err(LedgerError::Ambiguous(why)), entries);
            }
            Err(other) => return (Err(LedgerError::Unavailable(other.to_string())), entries),
        };
        for ((index, gangs), r) in indices.into_iter().zip(committed.responses) {
            if let (true, LedgerResponse::Refused(reason)) = (stop_at_refusal, &r) {
                return (Err(LedgerError::Refused(reason.clone())), entries);
            }
            answered.push((index, gangs, r));
        }
    }
    (Ok(merge(count, answered)), entries)
}

/// A linearizable read of the whole ledger state through `client`: `mirror` fetches what
/// changed since its last read (in full the first time, page by page, so the state may be
/// any size), and the state is returned as of one applied index.
pub(crate) fn read_through(
    handle: &tokio::runtime::Handle,
    client: &LedgerClient,
    mirror: &mut LedgerMirror,
) -> Result<Arc<LedgerState>, LedgerError> {
    handle
        .block_on(mirror.refresh(client))
        .map_err(|e| LedgerError::Unavailable(e.to_string()))?;
    Ok(mirror.shared())
}

impl Drop for RaftLedger {
    fn drop(&mut self) {
        if let Some(cluster) = self.cluster.take() {
            // Best effort: the temporary directory goes away regardless.
            let _ = self.runtime.block_on(cluster.shutdown());
        }
    }
}

impl LedgerBackend for RaftLedger {
    fn propose_all(
        &mut self,
        commands: Vec<LedgerCommand>,
    ) -> Result<Vec<LedgerResponse>, LedgerError> {
        RaftLedger::propose_all(self, commands)
    }

    fn propose_raw(
        &mut self,
        commands: Vec<LedgerCommand>,
    ) -> Result<Vec<LedgerResponse>, LedgerError> {
        let handle = self.runtime.handle();
        propose_through(handle, &self.client, commands, false, &mut self.entries)
    }

    /// Every list at once, as replicas in processes of their own would propose them: the
    /// leader takes them in whatever order they arrive, and may append them together.
    fn propose_raw_each(
        &mut self,
        lists: Vec<Vec<LedgerCommand>>,
    ) -> Vec<Result<Vec<LedgerResponse>, LedgerError>> {
        let client = &self.client;
        let all = futures::future::join_all(
            lists
                .into_iter()
                .map(|commands| propose_split(client, commands, false)),
        );
        let answers = self.runtime.block_on(all);
        answers
            .into_iter()
            .map(|(answered, proposed)| {
                self.entries += proposed;
                answered
            })
            .collect()
    }

    fn raft_entries(&self) -> Option<u64> {
        Some(self.entries)
    }

    fn read_state(&mut self) -> Result<Arc<LedgerState>, LedgerError> {
        read_through(self.runtime.handle(), &self.client, &mut self.mirror)
    }

    fn replica_count(&self) -> usize {
        self.replicas
    }

    fn leader_id(&mut self) -> Result<Option<ReplicaId>, LedgerError> {
        let cluster = self
            .cluster
            .as_ref()
            .ok_or_else(|| LedgerError::Unavailable("the ledger is shut down".into()))?;
        self.runtime
            .block_on(cluster.wait_for_leader(std::time::Duration::from_secs(10)))
            .map(Some)
            .map_err(|e| LedgerError::Unavailable(format!("no ledger leader: {e}")))
    }

    fn inject_fault(&mut self, fault: &LedgerFault) -> Result<String, LedgerError> {
        let cluster = self
            .cluster
            .as_mut()
            .ok_or_else(|| LedgerError::Unavailable("the ledger is shut down".into()))?;
        let failed =
            |e: phalanx_statestore::ReplicaError| LedgerError::Unavailable(format!("{fault}: {e}"));
        match fault {
            LedgerFault::KillLeader | LedgerFault::Kill(_) => {
                let id = match fault {
                    LedgerFault::Kill(id) => *id,
                    _ => self
                        .runtime
                        .block_on(cluster.wait_for_leader(std::time::Duration::from_secs(10)))
                        .map_err(failed)?,
                };
                self.runtime.block_on(cluster.kill(id)).map_err(failed)?;
                self.stopped.push(id);
                Ok(format!("stopped replica {id}"))
            }
            LedgerFault::Restart(which) => {
                let id = match which {
                    Some(id) => *id,
                    None => *self.stopped.last().ok_or_else(|| {
                        LedgerError::Unsupported("restart:last: no replica was stopped".into())
                    })?,
                };
                self.runtime.block_on(cluster.restart(id)).map_err(failed)?;
                self.stopped.retain(|s| *s != id);
                Ok(format!("restarted replica {id}"))
            }
            LedgerFault::Isolate(id) => {
                cluster.isolate(*id, true).map_err(failed)?;
                Ok(format!("isolated replica {id}"))
            }
            LedgerFault::Heal(id) => {
                cluster.isolate(*id, false).map_err(failed)?;
                Ok(format!("reconnected replica {id}"))
            }
            LedgerFault::Pause { id, .. } | LedgerFault::Resume(id) => Ok(format!(
                "scheduler replica {id} only; its ledger replica keeps running"
            )),
        }
    }
}
