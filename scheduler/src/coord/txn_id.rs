//! Transaction ids: `"{coordinator shard}:{epoch}:{sequence}:{gang}"`.
//!
//! Unique per coordinator shard and epoch (a new owner has a new epoch, so it never reuses
//! an id), and carrying the gang: after a commit the ledger's placements are `assumed` and
//! name the gang, not the transaction, so a recovering coordinator finds the pods to bind
//! through the gang in the id. Kubernetes names cannot hold `:`, so parsing is unambiguous.

use phalanx_statestore::ledger::{Epoch, ShardId, TxnId};

/// The id of a coordinator shard's `sequence`-th transaction at `epoch`, for `gang`.
pub fn txn_id(shard: ShardId, epoch: Epoch, sequence: u64, gang: &str) -> TxnId {
    format!("{shard}:{epoch}:{sequence}:{gang}")
}

/// The gang an id made by [`txn_id`] names.
pub fn gang_of(txn: &str) -> Option<&str> {
    let mut parts = txn.splitn(4, ':');
    let shard = parts.next()?;
    let epoch = parts.next()?;
    let seq = parts.next()?;
    let gang = parts.next()?;
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (numeric(shard) && numeric(epoch) && numeric(seq) && !gang.is_empty()).then_some(gang)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_carries_its_gang_and_parses_back() {
        let id = txn_id(3, 7, 42, "team-a/train");
        assert_eq!(id, "3:7:42:team-a/train");
        assert_eq!(gang_of(&id), Some("team-a/train"));
    }

    #[test]
    fn a_foreign_id_names_no_gang() {
        assert_eq!(gang_of("shard-3/17"), None);
        assert_eq!(gang_of("1:x:2:g"), None);
        assert_eq!(gang_of("1:2:3:"), None);
    }
}
