//! The ledger's pure state machine: types, `apply`, and invariant checkers.
//!
//! ```text
//!  LedgerCommand ──► apply(&mut LedgerState, &cmd) ──► LedgerResponse
//!                         │ (pure, deterministic, validates everything)
//!                         ▼
//!                   check_* (I1, I2, I4, index) ──► Vec<Violation>
//! ```

pub mod apply;
pub mod bounds;
pub mod changes;
pub mod checks;
pub mod command;
pub mod context;
pub mod overcommit;
pub mod refusal;
pub mod resource_vec;
pub mod response;
pub mod state;
pub mod state_entry;

#[cfg(test)]
mod bounds_tests;
#[cfg(test)]
mod tests;

pub use apply::{apply, apply_recording, apply_with};
pub use changes::{Changes, StateKey};
pub use checks::{
    Violation, check_all, check_fencing, check_no_double_booking, check_no_orphan_reservation,
    check_reservation_lists, check_usage_index,
};
pub use command::{GangPlacement, LedgerCommand, PodPlacement, ReleaseReason};
pub use context::{ApplyContext, LeaderTerm};
pub use overcommit::OvercommitFactor;
pub use refusal::Refusal;
pub use resource_vec::ResourceVec;
pub use response::{GangDecision, GangOutcome, LedgerResponse};
pub use state::{
    Epoch, LedgerState, NodeRecord, Placement, PlacementState, ReplicaId, ShardAssignment, ShardId,
    Txn, TxnDecision, TxnId,
};
pub use state_entry::{Scalars, StateEntry, entries_after};
