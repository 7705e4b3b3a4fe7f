//! The ledger's state machine applied in process, for a single replica.

use phalanx_statestore::ledger::command::{MAX_GANGS_PER_COMMAND, MAX_PODS_PER_COMMAND};
use phalanx_statestore::{GangDecision, LedgerCommand, LedgerResponse, LedgerState, apply};

use super::{
    FIRST_EPOCH, LedgerError, PlacementLedger, ReleaseReason, SINGLE_SHARD, Verdict, chunks,
    load_commands, to_ledger_gang,
};
use crate::framework::GangPlacement;
use crate::model::{Node, ObjectKey, Pod};

#[derive(Debug, Default)]
pub struct LocalLedger {
    state: LedgerState,
}

impl LocalLedger {
    pub fn new() -> Self {
        Self::default()
    }

    fn apply(&mut self, cmd: &LedgerCommand) -> Result<LedgerResponse, LedgerError> {
        match apply(&mut self.state, cmd) {
            LedgerResponse::Refused(r) => Err(LedgerError::Refused(r.to_string())),
            other => Ok(other),
        }
    }
}

impl PlacementLedger for LocalLedger {
    fn load(&mut self, nodes: &[&Node], occupying: &[&Pod]) -> Result<Vec<String>, LedgerError> {
        let (commands, gangs) = load_commands(nodes, occupying);
        for cmd in &commands {
            self.apply(cmd)?;
        }
        let mut warnings = Vec::new();
        let mut bound = Vec::new();
        for chunk in chunks(&gangs, MAX_GANGS_PER_COMMAND) {
            let cmd = LedgerCommand::PlaceGangs {
                shard: SINGLE_SHARD,
                epoch: FIRST_EPOCH,
                gangs: chunk,
            };
            if let LedgerResponse::Gangs(outcomes) = self.apply(&cmd)? {
                for o in outcomes {
                    match o.decision {
                        GangDecision::Accepted => bound.push(o.gang),
                        GangDecision::Refused(r) => {
                            warnings.push(format!("pod {} already running: {r}", o.gang))
                        }
                    }
                }
            }
        }
        for chunk in chunks(&bound, MAX_PODS_PER_COMMAND) {
            self.apply(&LedgerCommand::MarkBound {
                shard: SINGLE_SHARD,
                epoch: FIRST_EPOCH,
                pods: chunk,
            })?;
        }
        Ok(warnings)
    }

    fn commit(&mut self, gangs: &[GangPlacement]) -> Result<Vec<Verdict>, LedgerError> {
        let mut verdicts = Vec::with_capacity(gangs.len());
        for chunk in chunks(gangs, MAX_GANGS_PER_COMMAND) {
            let cmd = LedgerCommand::PlaceGangs {
                shard: SINGLE_SHARD,
                epoch: FIRST_EPOCH,
                gangs: chunk.iter().map(to_ledger_gang).collect(),
            };
            match self.apply(&cmd)? {
                LedgerResponse::Gangs(outcomes) => {
                    verdicts.extend(outcomes.into_iter().map(|o| match o.decision {
                        GangDecision::Accepted => Verdict::Accepted,
                        GangDecision::Refused(r) => Verdict::Refused(r.to_string()),
                    }))
                }
                other => return Err(LedgerError::Refused(format!("unexpected answer {other:?}"))),
            }
        }
        Ok(verdicts)
    }

    fn mark_bound(&mut self, pods: &[ObjectKey]) -> Result<(), LedgerError> {
        let keys: Vec<String> = pods.iter().map(ToString::to_string).collect();
        for chunk in chunks(&keys, MAX_PODS_PER_COMMAND) {
            self.apply(&LedgerCommand::MarkBound {
                shard: SINGLE_SHARD,
                epoch: FIRST_EPOCH,
                pods: chunk,
            })?;
        }
        Ok(())
    }

    fn release(&mut self, pods: &[ObjectKey], reason: ReleaseReason) -> Result<(), LedgerError> {
        let keys: Vec<String> = pods.iter().map(ToString::to_string).collect();
        for chunk in chunks(&keys, MAX_PODS_PER_COMMAND) {
            self.apply(&LedgerCommand::Release {
                shard: SINGLE_SHARD,
                epoch: FIRST_EPOCH,
                pods: chunk,
                reason,
            })?;
        }
        Ok(())
    }

    fn state(&mut self) -> Result<LedgerState, LedgerError> {
        Ok(self.state.clone())
    }

    fn replicas(&self) -> usize {
        1
    }
}
