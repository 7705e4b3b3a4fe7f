//! `LedgerState` as of a linearizable read <-> `LedgerSnapshot`.

use phalanx_proto::ledger::LedgerSnapshot;
use phalanx_proto::raft::Encoding;

use super::{WireError, decode};
use crate::ledger::LedgerState;

/// What a linearizable read returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerRead {
    /// Last applied log index when the read was served.
    pub applied_index: u64,
    /// `LedgerState::fingerprint` of the state.
    pub fingerprint: u64,
    /// The state, when asked for.
    pub state: Option<LedgerState>,
}

/// Read to wire.
pub fn to_wire(
    state: &LedgerState,
    applied_index: u64,
    include_state: bool,
) -> Result<LedgerSnapshot, WireError> {
    let bytes = state.to_canonical_bytes();
    Ok(LedgerSnapshot {
        applied_index,
        fingerprint: crate::ledger::state::fnv1a64(&bytes),
        encoding: Encoding::Json as i32,
        state: if include_state { bytes } else { Vec::new() },
    })
}

/// Wire to read.
pub fn from_wire(s: &LedgerSnapshot) -> Result<LedgerRead, WireError> {
    let state = if s.state.is_empty() {
        None
    } else {
        Some(decode(s.encoding, &s.state)?)
    };
    Ok(LedgerRead {
        applied_index: s.applied_index,
        fingerprint: s.fingerprint,
        state,
    })
}
