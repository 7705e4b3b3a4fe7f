//! `LedgerState`: everything the ledger knows, in deterministic (ordered) maps.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::overcommit::OvercommitFactor;
use super::resource_vec::ResourceVec;

/// Identifies a shard (a set of queues plus a pool of nodes).
pub type ShardId = u32;
/// Identifies a scheduler replica (equal to its Raft node id).
pub type ReplicaId = u64;
/// A shard ownership epoch; it increases on every reassignment.
pub type Epoch = u64;
/// Identifies a two-phase transaction, chosen by its coordinator (e.g. `"shard-3/17"`).
pub type TxnId = String;

/// Capacity of one node as phalanx sees it, and the shard whose pool it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Allocatable quantities (before overcommit).
    pub allocatable: ResourceVec,
    /// The shard whose pool holds this node.
    pub shard: ShardId,
}

/// Who owns a shard, and since which epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardAssignment {
    /// The replica that schedules this shard.
    pub owner: ReplicaId,
    /// Ownership epoch; writes for this shard must carry exactly this epoch.
    pub epoch: Epoch,
}

/// Where a placement is in its life. `Released` placements are removed from the ledger
/// (the map holds live placements only) and counted in `LedgerState::released_total`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PlacementState {
    /// Held by an undecided two-phase transaction.
    Reserved {
        /// The transaction holding it.
        txn: TxnId,
    },
    /// Committed, not yet bound in Kubernetes.
    Assumed,
    /// Bound in Kubernetes.
    Bound,
}

impl PlacementState {
    /// Short name for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Reserved { .. } => "reserved",
            Self::Assumed => "assumed",
            Self::Bound => "bound",
        }
    }
}

/// One pod's committed placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Node the pod is placed on.
    pub node: String,
    /// What it occupies there.
    pub resources: ResourceVec,
    /// Its gang, `namespace/podgroup`.
    pub gang: String,
    /// The shard that placed it (and may bind or release it).
    pub shard: ShardId,
    /// Reserved, assumed or bound.
    pub state: PlacementState,
}

/// The outcome of a two-phase transaction, once decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnDecision {
    /// Reservations became assumed placements.
    Commit,
    /// Reservations were released.
    Abort,
}

/// A two-phase transaction for a gang spanning shards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Txn {
    /// The shard whose owner coordinates (and alone may decide).
    pub coordinator: ShardId,
    /// Shards that must each reserve before a commit.
    pub participants: BTreeSet<ShardId>,
    /// Participants that have reserved.
    pub prepared: BTreeSet<ShardId>,
    /// Undecided transactions past this time are aborted by `ExpireAt`.
    pub deadline_ms: u64,
    /// `None` while undecided.
    pub decision: Option<TxnDecision>,
    /// The pods its participants reserved, while undecided (emptied by the decision), so
    /// that the decision finds them without scanning every placement; kept in step with
    /// the placements (checked by `check_reservation_lists`). `None` in a record written
    /// by a version that kept no list (an older snapshot): its decision scans instead.
    #[serde(default)]
    pub reserved: Option<BTreeSet<String>>,
}

/// The whole ledger. Every map is ordered, so serializing it is deterministic.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerState {
    /// Node name -> capacity and pool.
    pub nodes: BTreeMap<String, NodeRecord>,
    /// Applies to cpu and memory only.
    pub overcommit: OvercommitFactor,
    /// Pod key (`namespace/name`) -> live placement.
    pub placements: BTreeMap<String, Placement>,
    /// Node -> committed usage (reserved + assumed + bound); a derived index kept in step
    /// with `placements` (checked by `check_usage_index`). Nodes with zero usage are absent.
    pub usage: BTreeMap<String, ResourceVec>,
    /// Shard -> owner and epoch.
    pub shards: BTreeMap<ShardId, ShardAssignment>,
    /// Open transactions, and decided ones until their retention passes.
    pub txns: BTreeMap<TxnId, Txn>,
    /// How many placements were released since the ledger began.
    pub released_total: u64,
    /// The latest `ExpireAt` time applied (ms; 0 before the first). Time never goes
    /// back: an earlier `ExpireAt` is refused.
    #[serde(default)]
    pub clock_ms: u64,
}

impl LedgerState {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// Committed usage of `node` (zero when none).
    pub fn usage_of(&self, node: &str) -> ResourceVec {
        self.usage.get(node).cloned().unwrap_or_default()
    }

    /// The canonical serialized form: equal states give equal bytes.
    pub fn to_canonical_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("LedgerState has only string/integer map keys")
    }

    /// A 64-bit FNV-1a hash of `to_canonical_bytes`, for comparing replicas cheaply.
    pub fn fingerprint(&self) -> u64 {
        fnv1a64(&self.to_canonical_bytes())
    }

    /// Number of undecided transactions.
    pub fn open_txn_count(&self) -> usize {
        self.txns.values().filter(|t| t.decision.is_none()).count()
    }

    /// Pods placed in gang `gang`.
    pub fn pods_of_gang<'a>(
        &'a self,
        gang: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a Placement)> {
        self.placements
            .iter()
            .filter(move |(_, p)| p.gang == gang)
            .map(|(k, p)| (k.as_str(), p))
    }
}

/// FNV-1a, 64 bit: tiny, stable across platforms and releases.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
