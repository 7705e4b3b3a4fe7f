//! The replica engine: what every driver of scheduler replicas shares (`phalanx serve`, one
//! replica per process; `phalanx simulate --replicas R`, R replicas in one thread).
//!
//! - [`pump`]: the two-phase reservation's work loop. It steps the coordinators and
//!   participants, turns their commands into ledger proposals, messages to shard owners,
//!   node picks and binds, and turns the answers back into events. What differs per
//!   driver (where the state machines live, how a proposal reaches the ledger, how a
//!   message reaches another replica, how pods are bound) sits behind [`pump::PumpDriver`].
//! - [`routing`]: pure functions: the slice of a plan one cycle commits, a cross-shard
//!   gang's parts and its `StartTxn`, and commit-then-bind's second half (which owner
//!   marks which bound pods, at which fence).
//! - [`group_commit`]: the writes a replica need not wait for (marks, releases), queued
//!   for its next proposal, so that a round costs one ledger entry where it cost many.

pub mod group_commit;
pub mod pump;
pub mod routing;

#[cfg(test)]
mod tests;
