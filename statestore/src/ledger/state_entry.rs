//! `StateEntry`: one part of the `LedgerState` with its current value (or its absence), as
//! incremental reads carry it. A mirror that applies, in order, every entry a reader
//! returns ends equal to the ledger (see `crate::mirror`).

use std::collections::BTreeMap;
use std::ops::Bound;

use serde::{Deserialize, Serialize};

use super::changes::StateKey;
use super::overcommit::OvercommitFactor;
use super::resource_vec::ResourceVec;
use super::state::{LedgerState, NodeRecord, Placement, ShardAssignment, ShardId, Txn, TxnId};

/// The single values of the ledger, read and written together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scalars {
    /// `LedgerState::overcommit`.
    pub overcommit: OvercommitFactor,
    /// `LedgerState::released_total`.
    pub released_total: u64,
    /// `LedgerState::clock_ms`.
    pub clock_ms: u64,
}

/// One key and its value now; `None` is "no longer there".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StateEntry {
    /// The single values (always present).
    Scalars(Scalars),
    /// A node.
    Node(String, Option<NodeRecord>),
    /// A placement.
    Placement(String, Option<Placement>),
    /// A node's committed usage.
    Usage(String, Option<ResourceVec>),
    /// A shard's assignment.
    Shard(ShardId, Option<ShardAssignment>),
    /// A transaction.
    Txn(TxnId, Option<Txn>),
}

impl StateEntry {
    /// The entry's key.
    pub fn key(&self) -> StateKey {
        match self {
            Self::Scalars(_) => StateKey::Scalars,
            Self::Node(k, _) => StateKey::Node(k.clone()),
            Self::Placement(k, _) => StateKey::Placement(k.clone()),
            Self::Usage(k, _) => StateKey::Usage(k.clone()),
            Self::Shard(k, _) => StateKey::Shard(*k),
            Self::Txn(k, _) => StateKey::Txn(k.clone()),
        }
    }

    /// `key` as `state` holds it now.
    pub fn of(state: &LedgerState, key: &StateKey) -> Self {
        match key {
            StateKey::Scalars => Self::Scalars(scalars(state)),
            StateKey::Node(k) => Self::Node(k.clone(), state.nodes.get(k).cloned()),
            StateKey::Placement(k) => Self::Placement(k.clone(), state.placements.get(k).cloned()),
            StateKey::Usage(k) => Self::Usage(k.clone(), state.usage.get(k).cloned()),
            StateKey::Shard(k) => Self::Shard(*k, state.shards.get(k).copied()),
            StateKey::Txn(k) => Self::Txn(k.clone(), state.txns.get(k).cloned()),
        }
    }

    /// Writes the entry into `state` (inserting, replacing or removing its key).
    pub fn apply_to(self, state: &mut LedgerState) {
        match self {
            Self::Scalars(s) => {
                state.overcommit = s.overcommit;
                state.released_total = s.released_total;
                state.clock_ms = s.clock_ms;
            }
            Self::Node(k, v) => put(&mut state.nodes, k, v),
            Self::Placement(k, v) => put(&mut state.placements, k, v),
            Self::Usage(k, v) => put(&mut state.usage, k, v),
            Self::Shard(k, v) => put(&mut state.shards, k, v),
            Self::Txn(k, v) => put(&mut state.txns, k, v),
        }
    }
}

fn scalars(state: &LedgerState) -> Scalars {
    Scalars {
        overcommit: state.overcommit,
        released_total: state.released_total,
        clock_ms: state.clock_ms,
    }
}

fn put<K: Ord, V>(map: &mut BTreeMap<K, V>, key: K, value: Option<V>) {
    match value {
        Some(v) => {
            map.insert(key, v);
        }
        None => {
            map.remove(&key);
        }
    }
}

/// Every entry of `state` after `after` (from the start when `None`), in key order: what
/// a full read returns, page by page.
pub fn entries_after<'a>(
    state: &'a LedgerState,
    after: Option<&'a StateKey>,
) -> Box<dyn Iterator<Item = StateEntry> + 'a> {
    let scalars = after.is_none().then(|| StateEntry::Scalars(scalars(state)));
    let nodes = range_after(&state.nodes, after, 1, |k| match k {
        StateKey::Node(n) => Some(n),
        _ => None,
    })
    .map(|(k, v)| StateEntry::Node(k.clone(), Some(v.clone())));
    let placements = range_after(&state.placements, after, 2, |k| match k {
        StateKey::Placement(p) => Some(p),
        _ => None,
    })
    .map(|(k, v)| StateEntry::Placement(k.clone(), Some(v.clone())));
    let usage = range_after(&state.usage, after, 3, |k| match k {
        StateKey::Usage(n) => Some(n),
        _ => None,
    })
    .map(|(k, v)| StateEntry::Usage(k.clone(), Some(v.clone())));
    let shards = range_after(&state.shards, after, 4, |k| match k {
        StateKey::Shard(s) => Some(s),
        _ => None,
    })
    .map(|(k, v)| StateEntry::Shard(*k, Some(*v)));
    let txns = range_after(&state.txns, after, 5, |k| match k {
        StateKey::Txn(t) => Some(t),
        _ => None,
    })
    .map(|(k, v)| StateEntry::Txn(k.clone(), Some(v.clone())));
    Box::new(
        scalars
            .into_iter()
            .chain(nodes)
            .chain(placements)
            .chain(usage)
            .chain(shards)
            .chain(txns),
    )
}

/// The position of a key's kind in the order of `StateKey`.
fn rank(key: &StateKey) -> u8 {
    match key {
        StateKey::Scalars => 0,
        StateKey::Node(_) => 1,
        StateKey::Placement(_) => 2,
        StateKey::Usage(_) => 3,
        StateKey::Shard(_) => 4,
        StateKey::Txn(_) => 5,
    }
}

/// The part of `map` (whose keys are of kind `kind`) that comes after `after`.
fn range_after<'a, K: Ord, V>(
    map: &'a BTreeMap<K, V>,
    after: Option<&'a StateKey>,
    kind: u8,
    inner: impl Fn(&'a StateKey) -> Option<&'a K>,
) -> Box<dyn Iterator<Item = (&'a K, &'a V)> + 'a> {
    match after {
        None => Box::new(map.iter()),
        Some(a) if rank(a) < kind => Box::new(map.iter()),
        Some(a) if rank(a) > kind => Box::new(std::iter::empty()),
        Some(a) => match inner(a) {
            Some(k) => Box::new(map.range((Bound::Excluded(k), Bound::Unbounded))),
            None => Box::new(std::iter::empty()),
        },
    }
}
