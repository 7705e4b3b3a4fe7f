//! The ledger's state machine applied in process, for a single replica.

use phalanx_statestore::{LedgerCommand, LedgerResponse, LedgerState, apply};

use super::{LedgerBackend, LedgerError};

#[derive(Debug, Default)]
pub struct LocalLedger {
    state: LedgerState,
}

impl LocalLedger {
    pub fn new() -> Self {
        Self::default()
    }
}

impl LedgerBackend for LocalLedger {
    fn propose_all(
        &mut self,
        commands: Vec<LedgerCommand>,
    ) -> Result<Vec<LedgerResponse>, LedgerError> {
        let mut responses = Vec::with_capacity(commands.len());
        for cmd in &commands {
            match apply(&mut self.state, cmd) {
                LedgerResponse::Refused(r) => return Err(LedgerError::Refused(r)),
                other => responses.push(other),
            }
        }
        Ok(responses)
    }

    fn propose_raw(
        &mut self,
        commands: Vec<LedgerCommand>,
    ) -> Result<Vec<LedgerResponse>, LedgerError> {
        Ok(commands.iter().map(|c| apply(&mut self.state, c)).collect())
    }

    fn read_state(&mut self) -> Result<LedgerState, LedgerError> {
        Ok(self.state.clone())
    }

    fn replica_count(&self) -> usize {
        1
    }
}
