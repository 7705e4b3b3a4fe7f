//! The ledger's state machine applied in process, for a single replica.

use std::sync::Arc;

use phalanx_statestore::{LedgerCommand, LedgerResponse, LedgerState, apply};

use super::{LedgerBackend, LedgerError};

/// The state is shared with readers by `Arc` and copied only when a proposal changes it
/// while a reader still holds it (as `LedgerMirror` does for the replicated ledger).
#[derive(Debug, Default)]
pub struct LocalLedger {
    state: Arc<LedgerState>,
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
        let state = Arc::make_mut(&mut self.state);
        for cmd in &commands {
            match apply(state, cmd) {
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
        let state = Arc::make_mut(&mut self.state);
        Ok(commands.iter().map(|c| apply(state, c)).collect())
    }

    fn read_state(&mut self) -> Result<Arc<LedgerState>, LedgerError> {
        Ok(Arc::clone(&self.state))
    }

    fn replica_count(&self) -> usize {
        1
    }
}
