//! `LedgerCommand`: the closed set of writes the ledger accepts.

use serde::{Deserialize, Serialize};

use super::context::LeaderTerm;
use super::overcommit::OvercommitFactor;
use super::resource_vec::ResourceVec;
use super::state::{Epoch, ReplicaId, ShardId, TxnDecision, TxnId};

/// Most gangs in one `PlaceGangs`.
pub const MAX_GANGS_PER_COMMAND: usize = 1024;
/// Most pods in one gang.
pub const MAX_PODS_PER_GANG: usize = 4096;
/// Most pods named by one `MarkBound` or `Release`.
pub const MAX_PODS_PER_COMMAND: usize = 16_384;
/// Most participants in one transaction.
pub const MAX_TXN_PARTICIPANTS: usize = 64;
/// Most undecided transactions at once.
pub const MAX_OPEN_TXNS: usize = 1024;
/// Decided transactions are forgotten this long after their deadline (by `ExpireAt`).
pub const TXN_RETENTION_MS: u64 = 10 * 60 * 1000;
/// The most one `AssignShard` may raise a shard's epoch: a single command cannot use up
/// the epoch space (an exhausted shard could never be reassigned).
pub const MAX_EPOCH_STEP: u64 = 1 << 32;
/// The most one `ExpireAt` may move the ledger's clock past the later of its previous
/// time and the latest transaction deadline it holds. One hour is far more than any
/// transaction timeout; a clock further ahead (a wrong clock, milliseconds written as
/// microseconds) would abort every open transaction and then refuse every correct clock
/// as "behind".
pub const MAX_CLOCK_STEP_MS: u64 = 60 * 60 * 1000;

/// The latest time `ExpireAt` or a transaction deadline may name: 2^45 ms, the year 3085
/// as Unix time. Even a fresh ledger (no clock, no deadline to judge against) refuses
/// `u64::MAX`, which would abort every transaction ever opened after it.
pub const MAX_CLOCK_MS: u64 = 1 << 45;

/// One pod's proposed placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodPlacement {
    /// Pod key, `namespace/name`.
    pub pod: String,
    /// Chosen node.
    pub node: String,
    /// Requested quantities (exact units).
    pub resources: ResourceVec,
}

/// A gang's proposed placements: accepted all together or not at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GangPlacement {
    /// Gang key, `namespace/podgroup`.
    pub gang: String,
    /// Its pods.
    pub pods: Vec<PodPlacement>,
}

/// Why a placement is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReleaseReason {
    /// The pod finished.
    Finished,
    /// The pod was evicted or preempted.
    Evicted,
    /// Binding it in Kubernetes failed for good.
    BindFailed,
    /// The pod was deleted.
    Deleted,
}

/// A write to the ledger. Fenced commands carry `(shard, epoch)` and are refused unless the
/// epoch is the shard's current one (invariant I4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LedgerCommand {
    /// Adds or updates a node (from the API server watch). Refused if it would leave the
    /// committed usage above the new capacity.
    UpsertNode {
        /// Node name.
        node: String,
        /// Allocatable quantities.
        allocatable: ResourceVec,
        /// The shard whose pool holds it.
        shard: ShardId,
    },
    /// Removes a node; refused while placements remain on it.
    RemoveNode {
        /// Node name.
        node: String,
    },
    /// Sets the cpu/memory overcommit factor; refused if it would overbook a node.
    SetOvercommit {
        /// The new factor (>= 1).
        factor: OvercommitFactor,
    },
    /// Gives a shard to an owner; the epoch must increase (at most by `MAX_EPOCH_STEP`,
    /// never to `u64::MAX`), and the owner must be a Raft member. Proposing the current
    /// assignment again (same owner, same epoch) is a no-op that succeeds, so a retry
    /// after an unknown outcome cannot leave the shard without an owner.
    AssignShard {
        /// Shard.
        shard: ShardId,
        /// New owner.
        owner: ReplicaId,
        /// New epoch, greater than the current one.
        epoch: Epoch,
        /// The Raft leader proposing it and its term. Through Raft the entry is refused
        /// unless that leader appended it in that term, so a deposed leader cannot take a
        /// shard back. `None` is not checked: the in-process ledger, bootstrapping and
        /// the simulator's runtime (one leader role by construction) propose so.
        #[serde(default)]
        proposer: Option<LeaderTerm>,
    },
    /// Places gangs from one shard's pool, each all or nothing (fenced).
    PlaceGangs {
        /// Proposing shard.
        shard: ShardId,
        /// Proposer's epoch.
        epoch: Epoch,
        /// Gangs, decided in order.
        gangs: Vec<GangPlacement>,
    },
    /// Assumed -> bound (fenced; already bound is a no-op).
    MarkBound {
        /// Proposing shard.
        shard: ShardId,
        /// Proposer's epoch.
        epoch: Epoch,
        /// Pod keys.
        pods: Vec<String>,
    },
    /// Releases assumed or bound placements (fenced; unknown pods are a no-op).
    Release {
        /// Proposing shard.
        shard: ShardId,
        /// Proposer's epoch.
        epoch: Epoch,
        /// Pod keys.
        pods: Vec<String>,
        /// Why.
        reason: ReleaseReason,
    },
    /// Opens a two-phase transaction (fenced by the coordinator's shard).
    TxnBegin {
        /// New transaction id.
        txn: TxnId,
        /// Coordinator shard.
        shard: ShardId,
        /// Coordinator's epoch.
        epoch: Epoch,
        /// Participant shards.
        participants: Vec<ShardId>,
        /// Abort deadline (ms, the proposer's clock).
        deadline_ms: u64,
    },
    /// A participant reserves its part of the gang (fenced by the participant's shard).
    TxnReserve {
        /// Transaction.
        txn: TxnId,
        /// Participant shard.
        shard: ShardId,
        /// Participant's epoch.
        epoch: Epoch,
        /// Its pods (from its own pool).
        gang: GangPlacement,
    },
    /// The coordinator decides (fenced by the coordinator's shard).
    TxnDecide {
        /// Transaction.
        txn: TxnId,
        /// Coordinator shard.
        shard: ShardId,
        /// Coordinator's epoch.
        epoch: Epoch,
        /// Commit or abort.
        decision: TxnDecision,
    },
    /// Aborts every undecided transaction whose deadline is `<= now_ms`, and forgets
    /// decided ones older than `TXN_RETENTION_MS` past their deadline. The ledger keeps
    /// the latest `now_ms` (`LedgerState::clock_ms`): an earlier one is refused, and so is
    /// one more than `MAX_CLOCK_STEP_MS` past the later of that and the latest deadline.
    ExpireAt {
        /// The proposer's clock, carried in the command so apply stays deterministic.
        now_ms: u64,
    },
}

impl LedgerCommand {
    /// The `(shard, epoch)` fence this command carries, if it is a fenced command.
    pub fn fence(&self) -> Option<(ShardId, Epoch)> {
        match self {
            Self::PlaceGangs { shard, epoch, .. }
            | Self::MarkBound { shard, epoch, .. }
            | Self::Release { shard, epoch, .. }
            | Self::TxnBegin { shard, epoch, .. }
            | Self::TxnReserve { shard, epoch, .. }
            | Self::TxnDecide { shard, epoch, .. } => Some((*shard, *epoch)),
            Self::UpsertNode { .. }
            | Self::RemoveNode { .. }
            | Self::SetOvercommit { .. }
            | Self::AssignShard { .. }
            | Self::ExpireAt { .. } => None,
        }
    }
}
