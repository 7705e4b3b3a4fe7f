//! phalanx-statestore: the replicated allocation ledger.
//!
//! See `README.md` beside this crate for the diagram, the commands and the invariants.

pub mod ledger;

pub use ledger::{
    GangDecision, GangOutcome, GangPlacement, LedgerCommand, LedgerResponse, LedgerState,
    OvercommitFactor, PodPlacement, Refusal, ResourceVec, apply,
};
