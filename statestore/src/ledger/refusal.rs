//! `Refusal`: why the ledger did not accept a command or a gang. A value with a reason,
//! not an error: it becomes PodGroup conditions, Events and `explain` output.

use serde::{Deserialize, Serialize};

use super::context::LeaderTerm;
use super::state::{Epoch, ReplicaId, ShardId, TxnId};

/// Why a command (or one gang of it) was refused. `Display` is the human reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Refusal {
    /// Fencing (I4): the proposer's epoch is not the shard's current epoch.
    #[error("shard {shard}: stale epoch {proposed}, current is {current}")]
    StaleEpoch {
        /// Shard.
        shard: ShardId,
        /// Epoch in the command.
        proposed: Epoch,
        /// Epoch in the ledger.
        current: Epoch,
    },
    /// The shard has never been assigned.
    #[error("shard {shard}: unknown shard")]
    UnknownShard {
        /// Shard.
        shard: ShardId,
    },
    /// `AssignShard` must increase the epoch.
    #[error("shard {shard}: epoch {proposed} does not increase current {current}")]
    EpochNotIncreasing {
        /// Shard.
        shard: ShardId,
        /// Epoch in the command.
        proposed: Epoch,
        /// Epoch in the ledger.
        current: Epoch,
    },
    /// `AssignShard` to an epoch that leaves no room (`u64::MAX`) or jumps further than
    /// `MAX_EPOCH_STEP`.
    #[error("shard {shard}: epoch {proposed} is out of range (current {current}, at most {max})")]
    EpochOutOfRange {
        /// Shard.
        shard: ShardId,
        /// Epoch in the command.
        proposed: Epoch,
        /// Epoch in the ledger.
        current: Epoch,
        /// The largest epoch the command could have named.
        max: Epoch,
    },
    /// `AssignShard` proposed by a leader that did not append it: the proposer was
    /// deposed before its entry reached the log, and another leader appended it.
    #[error("shard {shard}: proposed by {proposer}, but appended by {appended_by} (deposed)")]
    DeposedLeader {
        /// Shard.
        shard: ShardId,
        /// The leader the command names.
        proposer: LeaderTerm,
        /// The leader that appended the entry.
        appended_by: LeaderTerm,
    },
    /// `AssignShard` to a replica that is not a Raft member.
    #[error("shard {shard}: owner {owner} is not a member of the ledger (members {members:?})")]
    UnknownOwner {
        /// Shard.
        shard: ShardId,
        /// The named owner.
        owner: ReplicaId,
        /// The members.
        members: Vec<ReplicaId>,
    },
    /// `ExpireAt` earlier than a time the ledger has already seen.
    #[error("clock: {proposed} ms is behind the ledger's {latest} ms")]
    ClockBehind {
        /// Time in the command.
        proposed: u64,
        /// The latest `ExpireAt` time applied.
        latest: u64,
    },
    /// `ExpireAt` too far ahead of every time the ledger knows.
    #[error(
        "clock: {proposed} ms is more than {max_step} ms past {anchor} ms (the ledger's clock or latest deadline)"
    )]
    ClockJump {
        /// Time in the command.
        proposed: u64,
        /// The later of the ledger's clock and its latest transaction deadline.
        anchor: u64,
        /// `MAX_CLOCK_STEP_MS`.
        max_step: u64,
    },
    /// The ledger's answer is of a kind the command never gets (e.g. `Pods` for a
    /// `TxnBegin`). `apply` never produces this: a client that meets such an answer
    /// turns it into this refusal, so that it is never read as success.
    #[error("the ledger answered {command} with {response}, which is no answer to it")]
    UnexpectedResponse {
        /// The command's kind.
        command: String,
        /// What came back.
        response: String,
    },
    /// The node is not in the ledger.
    #[error("node {node}: unknown node")]
    UnknownNode {
        /// Node.
        node: String,
    },
    /// The node belongs to another shard's pool.
    #[error("node {node}: belongs to shard {node_shard}, not shard {shard}")]
    NodeNotInShard {
        /// Node.
        node: String,
        /// Its pool's shard.
        node_shard: ShardId,
        /// The proposing shard.
        shard: ShardId,
    },
    /// Would push committed usage above allocatable (I1).
    #[error("node {node}: {resource} {requested} requested, {free} free")]
    Insufficient {
        /// Node.
        node: String,
        /// Resource name.
        resource: String,
        /// What the gang asks for on this node.
        requested: i64,
        /// What remains under the (overcommitted) limit.
        free: i64,
    },
    /// The pod already has a live placement.
    #[error("pod {pod}: already placed on node {node}")]
    PodAlreadyPlaced {
        /// Pod.
        pod: String,
        /// Where.
        node: String,
    },
    /// The pod appears twice in one command.
    #[error("pod {pod}: appears twice in one proposal")]
    DuplicatePod {
        /// Pod.
        pod: String,
    },
    /// The pod has no live placement.
    #[error("pod {pod}: no placement")]
    UnknownPod {
        /// Pod.
        pod: String,
    },
    /// The pod was placed by another shard.
    #[error("pod {pod}: placed by shard {pod_shard}, not shard {shard}")]
    PodInOtherShard {
        /// Pod.
        pod: String,
        /// Its placing shard.
        pod_shard: ShardId,
        /// The proposing shard.
        shard: ShardId,
    },
    /// The placement is not in a state this command accepts.
    #[error("pod {pod}: is {state}, expected {expected}")]
    WrongPlacementState {
        /// Pod.
        pod: String,
        /// Its state.
        state: String,
        /// What the command needs.
        expected: String,
    },
    /// A negative quantity.
    #[error("{subject}: {resource} has negative quantity {quantity}")]
    NegativeQuantity {
        /// Pod or node.
        subject: String,
        /// Resource.
        resource: String,
        /// The quantity.
        quantity: i64,
    },
    /// `TxnBegin` with a deadline further ahead than `MAX_CLOCK_STEP_MS` past every time
    /// the ledger knows: it would let a later `ExpireAt` move the clock that far.
    #[error(
        "txn {txn}: deadline {deadline_ms} ms is more than {max_step} ms past {anchor} ms (the ledger's clock or latest deadline)"
    )]
    DeadlineOutOfRange {
        /// Txn.
        txn: TxnId,
        /// Deadline in the command.
        deadline_ms: u64,
        /// The later of the ledger's clock and its latest transaction deadline.
        anchor: u64,
        /// `MAX_CLOCK_STEP_MS`.
        max_step: u64,
    },
    /// A key or name that cannot name its object (`bounds.rs`).
    #[error("{what} {value}: {reason}")]
    InvalidName {
        /// What the name names (pod, gang, node, txn, a resource of a pod).
        what: String,
        /// The name, shortened to 64 characters and its length.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A quantity above `MAX_QUANTITY` (`bounds.rs`).
    #[error("{subject}: {resource} {quantity} is above the limit {max}")]
    QuantityOutOfRange {
        /// Pod or node.
        subject: String,
        /// Resource.
        resource: String,
        /// The quantity.
        quantity: i64,
        /// The limit.
        max: i64,
    },
    /// A gang without pods.
    #[error("gang {gang}: no pods")]
    EmptyGang {
        /// Gang.
        gang: String,
    },
    /// A limit on sizes was exceeded.
    #[error("{what}: {count} exceeds the limit {limit}")]
    TooLarge {
        /// What was counted.
        what: String,
        /// How many.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// A Raft entry whose bytes encode no batch (appended by a faulty or hostile leader:
    /// the ledger service only proposes batches it decoded).
    #[error("an entry of {bytes} bytes encodes no ledger batch: {reason}")]
    UndecodableEntry {
        /// The entry's length.
        bytes: usize,
        /// What the decoder found.
        reason: String,
    },
    /// Arithmetic would overflow.
    #[error("node {node}: {resource} quantity overflows")]
    Overflow {
        /// Node.
        node: String,
        /// Resource.
        resource: String,
    },
    /// A capacity or overcommit change would leave usage above the limit.
    #[error("node {node}: {resource} {committed} committed, new limit {limit}")]
    CapacityBelowUsage {
        /// Node.
        node: String,
        /// Resource.
        resource: String,
        /// Committed usage.
        committed: i64,
        /// The new limit.
        limit: i64,
    },
    /// The node still holds placements.
    #[error("node {node}: {count} placements remain")]
    NodeHasPlacements {
        /// Node.
        node: String,
        /// How many.
        count: usize,
    },
    /// The overcommit factor is malformed, below 1 or above `MAX_OVERCOMMIT_RATIO`.
    #[error("overcommit {numerator}/{denominator} is invalid (must be from 1 to 100)")]
    InvalidOvercommit {
        /// Numerator.
        numerator: u32,
        /// Denominator.
        denominator: u32,
    },
    /// No such transaction.
    #[error("txn {txn}: unknown transaction")]
    UnknownTxn {
        /// Txn.
        txn: TxnId,
    },
    /// The id is taken.
    #[error("txn {txn}: already exists")]
    TxnExists {
        /// Txn.
        txn: TxnId,
    },
    /// Already decided otherwise, or decided before this reserve.
    #[error("txn {txn}: already decided")]
    TxnAlreadyDecided {
        /// Txn.
        txn: TxnId,
    },
    /// The shard is not a participant.
    #[error("txn {txn}: shard {shard} is not a participant")]
    TxnNotParticipant {
        /// Txn.
        txn: TxnId,
        /// Shard.
        shard: ShardId,
    },
    /// The shard already reserved for this transaction.
    #[error("txn {txn}: shard {shard} already reserved")]
    TxnAlreadyReserved {
        /// Txn.
        txn: TxnId,
        /// Shard.
        shard: ShardId,
    },
    /// Only the coordinator decides.
    #[error("txn {txn}: shard {shard} is not the coordinator {coordinator}")]
    TxnNotCoordinator {
        /// Txn.
        txn: TxnId,
        /// The proposing shard.
        shard: ShardId,
        /// The coordinator.
        coordinator: ShardId,
    },
    /// Commit needs every participant's reservation.
    #[error("txn {txn}: shards {missing:?} have not reserved")]
    TxnNotAllPrepared {
        /// Txn.
        txn: TxnId,
        /// Participants without a reservation.
        missing: Vec<ShardId>,
    },
    /// A transaction needs at least one participant, each a known shard.
    #[error("txn {txn}: participants are invalid: {detail}")]
    InvalidParticipants {
        /// Txn.
        txn: TxnId,
        /// What is wrong.
        detail: String,
    },
}
