//! Pages of a full or incremental read: `ChangesQuery` <-> `ChangesRequest`, and the page a
//! replica serves from its state and change journal <-> `ChangesRead`.

use std::collections::BTreeSet;

use phalanx_proto::ledger::{ChangesPage, ChangesRequest};
use phalanx_proto::raft::Encoding;

use super::{WireError, decode, encode, encode_postcard};
use crate::ledger::{LedgerState, StateEntry, StateKey, entries_after};
use crate::network::MAX_MESSAGE_BYTES;
use crate::state_machine::ChangeJournal;

/// The most entry bytes in one page: a quarter of the message limit leaves room for the
/// framing and for a last entry that overshoots.
pub const MAX_PAGE_BYTES: usize = MAX_MESSAGE_BYTES / 4;

/// What one page request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangesQuery {
    /// `None`: every entry (a full read); `Some(i)`: the entries changed after index `i`.
    pub since: Option<u64>,
    /// Continue after this key.
    pub after: Option<StateKey>,
    /// Most entry bytes in the page (capped at `MAX_PAGE_BYTES`; 0 is the cap).
    pub max_bytes: usize,
}

/// One page as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangesRead {
    /// Last applied index when the page was served.
    pub applied_index: u64,
    /// The journal does not reach back to `since`: read in full.
    pub resync: bool,
    /// Entries in key order.
    pub entries: Vec<StateEntry>,
    /// Where the next page starts (`after`), when one follows.
    pub next: Option<StateKey>,
    /// Size of the entries on the wire.
    pub bytes: usize,
}

/// Query to wire.
pub fn request_to_wire(q: &ChangesQuery) -> Result<ChangesRequest, WireError> {
    Ok(ChangesRequest {
        full: q.since.is_none(),
        since_index: q.since.unwrap_or(0),
        after_key: match &q.after {
            Some(k) => encode(k)?,
            None => Vec::new(),
        },
        key_encoding: Encoding::Json as i32,
        max_bytes: q.max_bytes as u64,
    })
}

/// Wire to query.
pub fn request_from_wire(r: &ChangesRequest) -> Result<ChangesQuery, WireError> {
    Ok(ChangesQuery {
        since: (!r.full).then_some(r.since_index),
        after: if r.after_key.is_empty() {
            None
        } else {
            Some(decode(r.key_encoding, &r.after_key)?)
        },
        max_bytes: usize::try_from(r.max_bytes).unwrap_or(usize::MAX),
    })
}

/// The page answering `q` from `state` (as of `applied`) and its `journal`.
pub fn serve_page(
    state: &LedgerState,
    applied: u64,
    journal: &ChangeJournal,
    q: &ChangesQuery,
) -> Result<ChangesPage, WireError> {
    let max = match q.max_bytes {
        0 => MAX_PAGE_BYTES,
        n => n.min(MAX_PAGE_BYTES),
    };
    let after = q.after.as_ref();
    match q.since {
        None => page(entries_after(state, after), max, applied),
        Some(since) => match journal.changed_since(since, applied) {
            None => Ok(ChangesPage {
                applied_index: applied,
                resync: true,
                encoding: Encoding::Json as i32,
                ..ChangesPage::default()
            }),
            Some(keys) => page(changed_after(keys, after, state), max, applied),
        },
    }
}

fn changed_after<'a>(
    keys: BTreeSet<&'a StateKey>,
    after: Option<&'a StateKey>,
    state: &'a LedgerState,
) -> impl Iterator<Item = StateEntry> + 'a {
    keys.into_iter()
        .filter(move |k| after.is_none_or(|a| *k > a))
        .map(move |k| StateEntry::of(state, k))
}

/// The most bytes a list's length takes in postcard (a varint of a `u32` count).
const LENGTH_PREFIX_BYTES: usize = 5;

/// Entries as one postcard list of at most `max` bytes (at least one entry, so a page
/// always makes progress), and the key to continue after when some are left. Binary: a
/// mirror's refresh decodes a round's worth of placements, and as JSON that decoding was
/// most of a read's cost.
fn page(
    entries: impl Iterator<Item = StateEntry>,
    max: usize,
    applied: u64,
) -> Result<ChangesPage, WireError> {
    let mut body = Vec::new();
    let mut count: u32 = 0;
    let mut last: Option<StateKey> = None;
    let mut more = false;
    for entry in entries {
        let encoded = encode_postcard(&entry)?;
        if count > 0 && body.len() + encoded.len() + LENGTH_PREFIX_BYTES > max {
            more = true;
            break;
        }
        body.extend_from_slice(&encoded);
        count = count.saturating_add(1);
        last = Some(entry.key());
    }
    // Postcard writes a list as its length (a varint, as it writes a `usize`) followed by
    // the elements: the entries encoded one by one above, behind their count, are the
    // encoding of the list itself.
    let mut bytes = encode_postcard(&(count as usize))?;
    bytes.extend_from_slice(&body);
    let next_key = match (more, last) {
        (true, Some(k)) => encode_postcard(&k)?,
        _ => Vec::new(),
    };
    Ok(ChangesPage {
        applied_index: applied,
        resync: false,
        encoding: Encoding::Postcard as i32,
        entries: bytes,
        entry_count: count,
        next_key,
    })
}

/// Wire to page.
pub fn page_from_wire(p: &ChangesPage) -> Result<ChangesRead, WireError> {
    let entries: Vec<StateEntry> = if p.resync || p.entries.is_empty() {
        Vec::new()
    } else {
        decode(p.encoding, &p.entries)?
    };
    let next = if p.next_key.is_empty() {
        None
    } else {
        Some(decode(p.encoding, &p.next_key)?)
    };
    Ok(ChangesRead {
        applied_index: p.applied_index,
        resync: p.resync,
        entries,
        next,
        bytes: p.entries.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{Placement, PlacementState, ResourceVec};

    fn state(pods: usize) -> LedgerState {
        let mut s = LedgerState::new();
        for i in 0..pods {
            s.placements.insert(
                format!("ns/p{i:04}"),
                Placement {
                    node: "n".into(),
                    resources: ResourceVec::from_pairs([("cpu", 1)]),
                    gang: "ns/g".into(),
                    shard: 0,
                    state: PlacementState::Bound,
                },
            );
        }
        s
    }

    fn read_all(
        s: &LedgerState,
        j: &ChangeJournal,
        since: Option<u64>,
        max: usize,
    ) -> Vec<ChangesRead> {
        let mut pages = Vec::new();
        let mut after = None;
        loop {
            let q = ChangesQuery {
                since,
                after: after.clone(),
                max_bytes: max,
            };
            let wire = serve_page(
                s,
                7,
                j,
                &request_from_wire(&request_to_wire(&q).unwrap()).unwrap(),
            )
            .unwrap();
            let p = page_from_wire(&wire).unwrap();
            after = p.next.clone();
            pages.push(p);
            if after.is_none() {
                return pages;
            }
        }
    }

    #[test]
    fn a_full_read_in_small_pages_returns_every_entry_once_in_key_order_under_the_bound() {
        let s = state(50);
        let j = ChangeJournal::starting_at(7);
        let pages = read_all(&s, &j, None, 200);
        assert!(pages.len() > 5, "{} pages", pages.len());
        assert!(pages.iter().all(|p| p.bytes <= 200 && !p.resync));
        let mut rebuilt = LedgerState::new();
        let keys: Vec<StateKey> = pages
            .iter()
            .flat_map(|p| p.entries.iter().map(StateEntry::key))
            .collect();
        let mut sorted = keys.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(keys, sorted);
        for e in pages.into_iter().flat_map(|p| p.entries) {
            e.apply_to(&mut rebuilt);
        }
        assert_eq!(rebuilt, s);
    }

    #[test]
    fn a_delta_carries_current_values_and_deletions_and_a_lost_history_asks_for_a_resync() {
        let mut s = state(3);
        let mut j = ChangeJournal::starting_at(5);
        s.placements.remove("ns/p0001");
        j.record(6, vec![StateKey::Placement("ns/p0001".into())]);
        j.record(7, vec![StateKey::Placement("ns/p0002".into())]);
        let pages = read_all(&s, &j, Some(5), 0);
        assert_eq!(pages.len(), 1);
        assert_eq!(
            pages[0].entries,
            vec![
                StateEntry::Placement("ns/p0001".into(), None),
                StateEntry::Placement("ns/p0002".into(), s.placements.get("ns/p0002").cloned()),
            ]
        );
        let stale = read_all(&s, &j, Some(4), 0);
        assert!(stale[0].resync && stale[0].entries.is_empty());
    }
}
