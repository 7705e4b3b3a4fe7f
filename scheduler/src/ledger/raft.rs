//! N replicas of the replicated ledger in this process: real openraft, fsynced log files,
//! sled state, tonic gRPC on 127.0.0.1, in a temporary directory removed on drop. The
//! scheduler talks to them only through the typed `LedgerClient`, as a remote scheduler
//! would, so every proposal goes through the leader and a quorum.

use phalanx_statestore::ledger::command::{MAX_GANGS_PER_COMMAND, MAX_PODS_PER_COMMAND};
use phalanx_statestore::{
    GangDecision, LedgerBatch, LedgerClient, LedgerCommand, LedgerResponse, LedgerState,
    LocalCluster, MAX_COMMANDS_PER_BATCH, start_local_cluster,
};

use super::{
    FIRST_EPOCH, LedgerError, PlacementLedger, ReleaseReason, SINGLE_SHARD, Verdict, chunks,
    load_commands, to_ledger_gang,
};
use crate::framework::GangPlacement;
use crate::model::{Node, ObjectKey, Pod};

#[derive(Debug)]
pub struct RaftLedger {
    runtime: tokio::runtime::Runtime,
    cluster: Option<LocalCluster>,
    client: LedgerClient,
    replicas: usize,
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
            .block_on(start_local_cluster(replicas, dir.path()))
            .map_err(|e| LedgerError::Start(e.to_string()))?;
        let client = cluster.client();
        Ok(Self {
            runtime,
            cluster: Some(cluster),
            client,
            replicas,
            _dir: dir,
        })
    }

    /// Proposes commands in as few Raft entries as the batch limit allows.
    fn propose_all(
        &self,
        commands: Vec<LedgerCommand>,
    ) -> Result<Vec<LedgerResponse>, LedgerError> {
        let mut responses = Vec::with_capacity(commands.len());
        for batch in chunks(&commands, MAX_COMMANDS_PER_BATCH) {
            let committed = self
                .runtime
                .block_on(self.client.propose(&LedgerBatch { commands: batch }))
                .map_err(|e| LedgerError::Unavailable(e.to_string()))?;
            for r in committed.responses {
                if let LedgerResponse::Refused(reason) = &r {
                    return Err(LedgerError::Refused(reason.to_string()));
                }
                responses.push(r);
            }
        }
        Ok(responses)
    }
}

impl Drop for RaftLedger {
    fn drop(&mut self) {
        if let Some(cluster) = self.cluster.take() {
            // Best effort: the temporary directory goes away regardless.
            let _ = self.runtime.block_on(cluster.shutdown());
        }
    }
}

fn verdicts(responses: Vec<LedgerResponse>) -> Result<Vec<Verdict>, LedgerError> {
    let mut out = Vec::new();
    for r in responses {
        match r {
            LedgerResponse::Gangs(outcomes) => {
                out.extend(outcomes.into_iter().map(|o| match o.decision {
                    GangDecision::Accepted => Verdict::Accepted,
                    GangDecision::Refused(r) => Verdict::Refused(r.to_string()),
                }))
            }
            other => return Err(LedgerError::Refused(format!("unexpected answer {other:?}"))),
        }
    }
    Ok(out)
}

impl PlacementLedger for RaftLedger {
    fn load(&mut self, nodes: &[&Node], occupying: &[&Pod]) -> Result<Vec<String>, LedgerError> {
        let (commands, gangs) = load_commands(nodes, occupying);
        self.propose_all(commands)?;
        let place: Vec<LedgerCommand> = chunks(&gangs, MAX_GANGS_PER_COMMAND)
            .into_iter()
            .map(|chunk| LedgerCommand::PlaceGangs {
                shard: SINGLE_SHARD,
                epoch: FIRST_EPOCH,
                gangs: chunk,
            })
            .collect();
        let outcomes = verdicts(self.propose_all(place)?)?;
        let mut warnings = Vec::new();
        let mut bound = Vec::new();
        for (g, v) in gangs.iter().zip(outcomes) {
            match v {
                Verdict::Accepted => bound.push(g.gang.clone()),
                Verdict::Refused(r) => {
                    warnings.push(format!("pod {} already running: {r}", g.gang))
                }
            }
        }
        let mark: Vec<LedgerCommand> = chunks(&bound, MAX_PODS_PER_COMMAND)
            .into_iter()
            .map(|pods| LedgerCommand::MarkBound {
                shard: SINGLE_SHARD,
                epoch: FIRST_EPOCH,
                pods,
            })
            .collect();
        self.propose_all(mark)?;
        Ok(warnings)
    }

    fn commit(&mut self, gangs: &[GangPlacement]) -> Result<Vec<Verdict>, LedgerError> {
        let commands = chunks(gangs, MAX_GANGS_PER_COMMAND)
            .into_iter()
            .map(|chunk| LedgerCommand::PlaceGangs {
                shard: SINGLE_SHARD,
                epoch: FIRST_EPOCH,
                gangs: chunk.iter().map(to_ledger_gang).collect(),
            })
            .collect();
        verdicts(self.propose_all(commands)?)
    }

    fn mark_bound(&mut self, pods: &[ObjectKey]) -> Result<(), LedgerError> {
        let keys: Vec<String> = pods.iter().map(ToString::to_string).collect();
        let commands = chunks(&keys, MAX_PODS_PER_COMMAND)
            .into_iter()
            .map(|pods| LedgerCommand::MarkBound {
                shard: SINGLE_SHARD,
                epoch: FIRST_EPOCH,
                pods,
            })
            .collect();
        self.propose_all(commands).map(|_| ())
    }

    fn release(&mut self, pods: &[ObjectKey], reason: ReleaseReason) -> Result<(), LedgerError> {
        let keys: Vec<String> = pods.iter().map(ToString::to_string).collect();
        let commands = chunks(&keys, MAX_PODS_PER_COMMAND)
            .into_iter()
            .map(|pods| LedgerCommand::Release {
                shard: SINGLE_SHARD,
                epoch: FIRST_EPOCH,
                pods,
                reason,
            })
            .collect();
        self.propose_all(commands).map(|_| ())
    }

    fn state(&mut self) -> Result<LedgerState, LedgerError> {
        let read = self
            .runtime
            .block_on(self.client.read())
            .map_err(|e| LedgerError::Unavailable(e.to_string()))?;
        read.state.ok_or_else(|| {
            LedgerError::Unavailable("the linearizable read returned no state".into())
        })
    }

    fn replicas(&self) -> usize {
        self.replicas
    }
}
