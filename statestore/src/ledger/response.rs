//! `LedgerResponse`: what `apply` reports for one command.

use serde::{Deserialize, Serialize};

use super::refusal::Refusal;
use super::state::TxnId;

/// A gang's fate within `PlaceGangs` or `TxnReserve`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum GangDecision {
    /// Every pod of the gang is placed.
    Accepted,
    /// No pod of the gang is placed, for this reason.
    Refused(Refusal),
}

/// One gang's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GangOutcome {
    /// Gang key.
    pub gang: String,
    /// Accepted or refused with a reason.
    pub decision: GangDecision,
}

impl GangOutcome {
    /// True when accepted.
    pub fn is_accepted(&self) -> bool {
        matches!(self.decision, GangDecision::Accepted)
    }
}

/// The result of applying one command. Refusals leave the state unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LedgerResponse {
    /// The command took effect (node, overcommit, shard and txn commands).
    Applied,
    /// Per-gang outcomes, in the order proposed (`PlaceGangs`, `TxnReserve`).
    Gangs(Vec<GangOutcome>),
    /// `MarkBound` / `Release`: how many placements changed, how many were already so.
    Pods {
        /// Placements changed.
        changed: u32,
        /// Already bound (MarkBound) or already released (Release).
        unchanged: u32,
    },
    /// `ExpireAt`: transactions aborted by their deadline.
    Expired {
        /// Aborted transaction ids.
        aborted: Vec<TxnId>,
    },
    /// The whole command was refused; nothing changed.
    Refused(Refusal),
}

impl LedgerResponse {
    /// The refusal, if the whole command was refused.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            Self::Refused(r) => Some(r),
            _ => None,
        }
    }
}
