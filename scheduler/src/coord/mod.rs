//! Two-phase reservation for gangs that span shards (ARCHITECTURE.md "Two-phase
//! reservation"), as pure state machines: [`Coordinator::step`] and [`Participant::step`]
//! map an event to commands; the runtime proposes to the ledger, sends messages, binds,
//! and feeds the results back as events. See `docs/shards.md` for the message flow.
//!
//! ```text
//!  coordinator (home shard owner)          ledger (Raft)                participant (shard owner)
//!  Start ─► TxnBegin ───────────────────►  txn open
//!           ◄── Begun
//!           SendPrepare(hints) ──────────────────────────────────────►  Pick ─► runtime: nodes of its pool
//!                                                                        ◄── Picked(placements)
//!                                                                        TxnReserve ─► ledger
//!                                                                        ◄── Reserved
//!           ◄──────────────────────────────────────────────────────────  Reply(Prepared{placements})
//!  all prepared: TxnDecide(commit) ──────► reserved -> assumed
//!           ◄── Decided(commit) ─► Bind(the reserved placements), SendDecision, Report
//!  refusal / deadline: TxnDecide(abort) ─► reservations released
//! ```

pub mod coordinator;
pub mod messages;
pub mod participant;
pub mod recovery;
pub mod service;
pub mod txn_id;

#[cfg(test)]
mod tests;

pub use coordinator::{CoordConfig, CoordConfigError, Coordinator, Phase, PrepareOrder};
pub use messages::{
    CoordCommand, CoordEvent, LedgerResult, ParticipantCommand, ParticipantEvent, Prepare,
    PrepareReply, RecoveredTxn, StartTxn, TxnOutcome, begin_result, decide_result, reserve_result,
};
pub use participant::{Participant, ParticipantConfig};
pub use recovery::recovered_txns;
pub use txn_id::{gang_of, txn_id};
