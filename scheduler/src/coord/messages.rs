//! The coordinator's and the participant's events and commands (closed sets), and the
//! mapping from the ledger's responses to events.

use std::collections::BTreeMap;

use phalanx_statestore::ledger::{Epoch, ReplicaId, ShardId, TxnDecision, TxnId};
use phalanx_statestore::{GangDecision, LedgerCommand, LedgerResponse, PodPlacement, Refusal};

/// A request to place a gang across shards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartTxn {
    /// Transaction id (see [`super::txn_id`]; it carries the gang so recovery can bind).
    pub txn: TxnId,
    /// Gang key, `namespace/podgroup`.
    pub gang: String,
    /// Each participant shard and the placements proposed for its pool.
    pub parts: Vec<(ShardId, Vec<PodPlacement>)>,
    /// Who owned each participant shard when the transaction started (a shard absent:
    /// not known). Asking in ascending order, the coordinator asks a run of consecutive
    /// participants with one owner at once: that owner reserves them in one proposal, in
    /// shard order, so the global order that lets one of two competing gangs through is
    /// kept, and a gang needs a wave per owner rather than per shard.
    pub owners: BTreeMap<ShardId, ReplicaId>,
    /// The coordinator's clock when the request arrives.
    pub now_ms: u64,
    /// Undecided after this, the transaction is aborted.
    pub deadline_ms: u64,
}

/// The ledger's answer to a transaction command, as the state machines see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LedgerResult {
    /// `TxnBegin` applied.
    Begun,
    /// `TxnBegin` refused.
    BeginRefused(Refusal),
    /// A participant's `TxnReserve` accepted.
    Reserved {
        /// The participant shard.
        shard: ShardId,
    },
    /// A participant's `TxnReserve` refused.
    RefusedReserve {
        /// The participant shard.
        shard: ShardId,
        /// Why.
        reason: Refusal,
    },
    /// The transaction's decision is logged (by this command or before it).
    Decided(TxnDecision),
    /// `TxnDecide` refused for another reason (stale epoch, ...).
    DecideRefused(Refusal),
}

/// A participant's answer to a prepare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrepareReply {
    /// Its part is reserved in the ledger on these nodes (its owner's pick: the
    /// coordinator's hints where they still fitted, other nodes of its pool otherwise).
    /// The coordinator binds these, not its plan's nodes.
    Prepared {
        /// One placement per pod of the part, as reserved.
        placements: Vec<PodPlacement>,
        /// The participant was asked to log the commit behind its reservation
        /// ([`Prepare::commit_at`]) and the ledger applied it: the transaction is
        /// committed, and the coordinator proposes no decision of its own. `false` says
        /// only that this participant did not log it.
        committed: bool,
    },
    /// It will not reserve, and why.
    Refused(String),
}

/// What the coordinator reacts to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoordEvent {
    /// Place a gang across shards.
    Start(StartTxn),
    /// The ledger applied (or refused) a transaction command.
    LedgerApplied {
        /// The transaction.
        txn: TxnId,
        /// What happened.
        result: LedgerResult,
    },
    /// A participant answered a prepare.
    ParticipantReply {
        /// The transaction.
        txn: TxnId,
        /// The participant shard.
        shard: ShardId,
        /// Its answer.
        reply: PrepareReply,
    },
    /// Time passed.
    Tick {
        /// The coordinator's clock.
        now_ms: u64,
    },
    /// This replica became the coordinator shard's owner: finish what the ledger shows.
    Recover {
        /// The shard's transactions found in the ledger (see [`super::recovered_txns`]).
        txns: Vec<RecoveredTxn>,
        /// The coordinator's clock.
        now_ms: u64,
    },
}

/// A transaction of this coordinator's shard as the ledger holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveredTxn {
    /// The transaction.
    pub txn: TxnId,
    /// Its gang, parsed from the id (`None` for an id not made by [`super::txn_id`]).
    pub gang: Option<String>,
    /// Participant shards.
    pub participants: Vec<ShardId>,
    /// Its deadline.
    pub deadline_ms: u64,
    /// Its decision, if logged.
    pub decision: Option<TxnDecision>,
    /// For a commit: its placements not yet bound (to bind).
    pub unbound: Vec<PodPlacement>,
}

/// How a transaction ended, as reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnOutcome {
    /// Decided commit; its pods are being bound.
    Committed,
    /// Decided abort; no reservation remains.
    Aborted,
    /// Never began in the ledger (invalid, too many in flight, `TxnBegin` refused).
    Rejected,
    /// This coordinator lost the shard (stale epoch) or gave up waiting for the ledger;
    /// the shard's next owner (or a `Recover`) finishes it from the ledger.
    Unfinished,
}

/// What the coordinator asks the runtime to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoordCommand {
    /// Propose this command (`TxnBegin` or `TxnDecide`) and feed back the result as
    /// `CoordEvent::LedgerApplied` (see [`begin_result`] and [`decide_result`]).
    ProposeToLedger(LedgerCommand),
    /// Ask a participant shard's owner to reserve its part.
    SendPrepare {
        /// Participant shard.
        shard: ShardId,
        /// The prepare.
        prepare: Prepare,
    },
    /// Tell a participant the transaction is decided (it may forget it).
    SendDecision {
        /// Participant shard.
        shard: ShardId,
        /// Transaction.
        txn: TxnId,
        /// The logged decision.
        decision: TxnDecision,
    },
    /// Bind these pods in Kubernetes (their placements are committed); afterwards each
    /// pod's shard owner records `MarkBound`.
    Bind {
        /// Transaction.
        txn: TxnId,
        /// Gang.
        gang: String,
        /// Pods and nodes.
        pods: Vec<PodPlacement>,
    },
    /// The transaction ended (or was refused); for PodGroup conditions, Events, metrics.
    Report {
        /// Transaction.
        txn: TxnId,
        /// How it ended.
        outcome: TxnOutcome,
        /// Why, in words.
        reason: String,
    },
}

/// A prepare request, coordinator to participant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepare {
    /// Transaction.
    pub txn: TxnId,
    /// The coordinator's shard (where replies go).
    pub coordinator: ShardId,
    /// Gang key.
    pub gang: String,
    /// The participant's part: its pods with the nodes the coordinator's plan proposed.
    /// The nodes are hints: the participant's owner picks the nodes of its pool that
    /// reflect its own writes of the round (the hint first, when it still fits).
    pub placements: Vec<PodPlacement>,
    /// The transaction's deadline.
    pub deadline_ms: u64,
    /// Set on the participant asked last (ascending order: the last shard of the last run
    /// of shards with one owner, once every participant before the run is prepared): the
    /// coordinator's epoch, at which this participant proposes the coordinator's `TxnDecide(Commit)`
    /// right behind its own `TxnReserve`, in the same proposal. The ledger alone judges
    /// it: it commits only if every participant's reservation is in the log by then and
    /// the coordinator still owns its shard at that epoch, and a decision once logged is
    /// final, so a refused or racing commit changes nothing and the coordinator decides
    /// as before. A gang then costs no proposal for its decision.
    pub commit_at: Option<Epoch>,
}

/// What a participant reacts to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParticipantEvent {
    /// Reserve your part.
    Prepare(Prepare),
    /// The runtime's answer to [`ParticipantCommand::Pick`].
    Picked {
        /// Transaction.
        txn: TxnId,
        /// One placement per wanted pod, on nodes of this participant's pool; or why no
        /// node of the pool can host one of them (naming the pod, the resource, numbers).
        result: Result<Vec<PodPlacement>, String>,
    },
    /// The ledger applied (or refused) this participant's `TxnReserve`
    /// (see [`reserve_result`]) or the commit it logged behind it ([`decide_result`]).
    LedgerApplied {
        /// Transaction.
        txn: TxnId,
        /// `Reserved` or `RefusedReserve`; `Decided` or `DecideRefused`.
        result: LedgerResult,
    },
    /// The coordinator's decision.
    Decided {
        /// Transaction.
        txn: TxnId,
        /// The decision.
        decision: TxnDecision,
    },
    /// Time passed.
    Tick {
        /// The participant's clock.
        now_ms: u64,
    },
}

/// What a participant asks the runtime to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParticipantCommand {
    /// Choose nodes of this participant's pool for these pods, from the owner's current
    /// view (cluster plus the ledger's usage, this round's writes included): for each pod
    /// its hinted node when it still fits, otherwise another node of the pool where it
    /// fits. Answer with `ParticipantEvent::Picked`.
    Pick {
        /// Transaction.
        txn: TxnId,
        /// The pods, each with the coordinator's hinted node.
        wanted: Vec<PodPlacement>,
    },
    /// Propose `TxnReserve` (and, behind it, the coordinator's `TxnDecide(Commit)` when
    /// asked to: [`Prepare::commit_at`]) and feed back each result as
    /// `ParticipantEvent::LedgerApplied`.
    ProposeToLedger(LedgerCommand),
    /// Answer the coordinator.
    Reply {
        /// The coordinator shard.
        to: ShardId,
        /// Transaction.
        txn: TxnId,
        /// The participant shard (this one).
        shard: ShardId,
        /// The answer.
        reply: PrepareReply,
    },
}

/// The refusal that stands for an answer of the wrong kind to `command`: never success.
fn unexpected(command: &str, response: &LedgerResponse) -> Refusal {
    Refusal::UnexpectedResponse {
        command: command.to_string(),
        response: format!("{response:?}"),
    }
}

/// Maps the ledger's response to `TxnBegin`. `TxnExists` means an earlier (resent)
/// proposal of the same id landed: ids are unique per coordinator shard and epoch. Any
/// answer but `Applied` or a refusal is a refusal naming what came back.
pub fn begin_result(response: &LedgerResponse) -> LedgerResult {
    match response {
        LedgerResponse::Applied | LedgerResponse::Refused(Refusal::TxnExists { .. }) => {
            LedgerResult::Begun
        }
        LedgerResponse::Refused(r) => LedgerResult::BeginRefused(r.clone()),
        LedgerResponse::Gangs(_) | LedgerResponse::Pods { .. } | LedgerResponse::Expired { .. } => {
            LedgerResult::BeginRefused(unexpected("TxnBegin", response))
        }
    }
}

/// Maps the ledger's response to a participant's `TxnReserve`. `TxnAlreadyReserved` for
/// this shard means an earlier (resent) proposal landed. Only one gang outcome (the
/// participant's part) or a refusal answers a reserve; anything else is a refusal naming
/// what came back.
pub fn reserve_result(shard: ShardId, response: &LedgerResponse) -> LedgerResult {
    let refused = |reason: Refusal| LedgerResult::RefusedReserve { shard, reason };
    match response {
        LedgerResponse::Refused(Refusal::TxnAlreadyReserved { .. }) => {
            LedgerResult::Reserved { shard }
        }
        LedgerResponse::Refused(r) => refused(r.clone()),
        LedgerResponse::Gangs(outcomes) => match outcomes.as_slice() {
            [one] => match &one.decision {
                GangDecision::Accepted => LedgerResult::Reserved { shard },
                GangDecision::Refused(r) => refused(r.clone()),
            },
            [] | [_, _, ..] => refused(unexpected("TxnReserve", response)),
        },
        LedgerResponse::Applied | LedgerResponse::Pods { .. } | LedgerResponse::Expired { .. } => {
            refused(unexpected("TxnReserve", response))
        }
    }
}

/// Maps the ledger's response to `TxnDecide { decision }`. Only the coordinator shard
/// decides and a decision is final, so `TxnAlreadyDecided` means the other decision is
/// logged (the ledger's deadline expiry aborted it first); an abort of a transaction the
/// ledger does not know (its begin never landed, or it was forgotten) is an abort. Any
/// answer but `Applied` or a refusal is a refusal naming what came back.
pub fn decide_result(decision: TxnDecision, response: &LedgerResponse) -> LedgerResult {
    let other = match decision {
        TxnDecision::Commit => TxnDecision::Abort,
        TxnDecision::Abort => TxnDecision::Commit,
    };
    match response {
        LedgerResponse::Applied => LedgerResult::Decided(decision),
        LedgerResponse::Refused(Refusal::TxnAlreadyDecided { .. }) => LedgerResult::Decided(other),
        LedgerResponse::Refused(Refusal::UnknownTxn { .. }) if decision == TxnDecision::Abort => {
            LedgerResult::Decided(TxnDecision::Abort)
        }
        LedgerResponse::Refused(r) => LedgerResult::DecideRefused(r.clone()),
        LedgerResponse::Gangs(_) | LedgerResponse::Pods { .. } | LedgerResponse::Expired { .. } => {
            LedgerResult::DecideRefused(unexpected("TxnDecide", response))
        }
    }
}

#[cfg(test)]
mod tests {
    use phalanx_statestore::GangOutcome;

    use super::*;

    fn wrong_kinds() -> Vec<LedgerResponse> {
        vec![
            LedgerResponse::Pods {
                changed: 1,
                unchanged: 0,
            },
            LedgerResponse::Expired {
                aborted: vec!["t".into()],
            },
            LedgerResponse::Gangs(vec![]),
        ]
    }

    fn names_what_came_back(r: &Refusal, command: &str) -> bool {
        matches!(r, Refusal::UnexpectedResponse { command: c, response }
            if c == command && !response.is_empty())
    }

    #[test]
    fn an_unexpected_ledger_response_is_never_read_as_success() {
        for response in wrong_kinds() {
            match begin_result(&response) {
                LedgerResult::BeginRefused(r) => {
                    assert!(names_what_came_back(&r, "TxnBegin"), "{r}");
                    assert!(r.to_string().contains("TxnBegin"), "{r}");
                }
                other => panic!("{response:?} to a TxnBegin read as {other:?}"),
            }
            for decision in [TxnDecision::Commit, TxnDecision::Abort] {
                match decide_result(decision, &response) {
                    LedgerResult::DecideRefused(r) => {
                        assert!(names_what_came_back(&r, "TxnDecide"), "{r}")
                    }
                    other => panic!("{response:?} to a TxnDecide read as {other:?}"),
                }
            }
        }
        let accepted = GangOutcome {
            gang: "ns/g".into(),
            decision: GangDecision::Accepted,
        };
        let two_outcomes = LedgerResponse::Gangs(vec![accepted.clone(), accepted]);
        for response in [
            LedgerResponse::Applied,
            LedgerResponse::Pods {
                changed: 1,
                unchanged: 0,
            },
            LedgerResponse::Expired { aborted: vec![] },
            LedgerResponse::Gangs(vec![]),
            two_outcomes,
        ] {
            match reserve_result(3, &response) {
                LedgerResult::RefusedReserve { shard: 3, reason } => {
                    assert!(names_what_came_back(&reason, "TxnReserve"), "{reason}")
                }
                other => panic!("{response:?} to a TxnReserve read as {other:?}"),
            }
        }
    }

    #[test]
    fn the_expected_answers_keep_their_meaning() {
        assert_eq!(begin_result(&LedgerResponse::Applied), LedgerResult::Begun);
        assert_eq!(
            decide_result(TxnDecision::Commit, &LedgerResponse::Applied),
            LedgerResult::Decided(TxnDecision::Commit)
        );
        let one = LedgerResponse::Gangs(vec![GangOutcome {
            gang: "ns/g".into(),
            decision: GangDecision::Accepted,
        }]);
        assert_eq!(reserve_result(2, &one), LedgerResult::Reserved { shard: 2 });
    }
}
