//! `LedgerMirror`: a client's copy of the `LedgerState`, kept current by incremental reads.
//!
//! ```text
//!  refresh ─► since its index: ReadChanges{since} ─► one page ─► apply ─► consistent at that page's index
//!     │                      │ several pages (each at its own index ≥ the first's)
//!     │                      └──► apply, then ReadChanges{since = first page's index} again
//!     │                      │ "resync" (the replica's journal does not reach back)
//!     └─ no index yet ───────┴──► full read by key range, page by page, then changes since
//!                                 the first page's index, until one answer fits a page
//! ```
//!
//! Why that is consistent: a key a page carries holds its value as of that page's index
//! `p ≥ f` (the first page's index). Any key whose value at `p` differs from its value at
//! the final index `l` changed after `f`, so the changes read since `f` carry it, at `l`
//! when they fit one page. Each page is a linearizable read, so the result reflects every
//! write committed before `refresh` began.

use std::sync::Arc;

use crate::client::{ClientError, LedgerClient};
use crate::ledger::{LedgerState, StateEntry, StateKey};
use crate::network::wire::ledger_changes::{ChangesQuery, MAX_PAGE_BYTES};

/// Rounds of "changes since the first page" before giving up on a ledger that changes
/// faster than pages can follow.
pub const MAX_SETTLE_ROUNDS: u32 = 16;

/// What one `refresh` transferred.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefreshStats {
    /// A full read was needed (first refresh, or the journal did not reach back).
    pub full: bool,
    /// Page requests answered.
    pub pages: u32,
    /// Entries received.
    pub entries: usize,
    /// Bytes of entries received.
    pub bytes: usize,
    /// The index the mirror is consistent at now.
    pub index: u64,
}

/// The ledger's state as of `index`, kept current with `refresh`.
///
/// The state is shared by `Arc` with the readers it was handed to ([`Self::shared`]) and
/// copied only when a refresh changes it while one of them still holds it: a replica read
/// its whole ledger (every placement) by cloning it several times a period, which at
/// 20,000 pods was a third copy of the ledger in memory and most of a read's cost.
#[derive(Debug, Clone)]
pub struct LedgerMirror {
    state: Arc<LedgerState>,
    /// `None` until a refresh completes (and while one is half done).
    index: Option<u64>,
    page_bytes: usize,
}

impl Default for LedgerMirror {
    fn default() -> Self {
        Self::new()
    }
}

/// The entries of one pass over every page, and the indexes it was served at.
struct Pass {
    first_index: u64,
    last_index: u64,
    pages: u32,
    entries: Vec<StateEntry>,
}

impl LedgerMirror {
    /// An empty mirror; the first `refresh` reads the ledger in full.
    pub fn new() -> Self {
        Self::with_page_bytes(MAX_PAGE_BYTES)
    }

    /// A mirror asking for pages of at most `page_bytes` (the server caps it).
    pub fn with_page_bytes(page_bytes: usize) -> Self {
        Self {
            state: Arc::new(LedgerState::new()),
            index: None,
            page_bytes: page_bytes.max(1),
        }
    }

    /// The mirrored state (as of `index`).
    pub fn state(&self) -> &LedgerState {
        &self.state
    }

    /// The mirrored state, shared: cheap, and unchanged by later refreshes.
    pub fn shared(&self) -> Arc<LedgerState> {
        Arc::clone(&self.state)
    }

    /// The applied index the state is consistent at; `None` before the first refresh
    /// completes.
    pub fn index(&self) -> Option<u64> {
        self.index
    }

    /// Brings the mirror up to date with a linearizable read: only the changes since its
    /// index when the replica's journal still has them, else a full read.
    pub async fn refresh(&mut self, client: &LedgerClient) -> Result<RefreshStats, ClientError> {
        let mut stats = RefreshStats::default();
        let mut since = self.index.take();
        for _ in 0..MAX_SETTLE_ROUNDS {
            let full = since.is_none();
            let Some(pass) = self.pass(client, since, &mut stats).await? else {
                since = None; // the journal does not reach back: read in full
                continue;
            };
            if full {
                stats.full = true;
                self.state = Arc::new(LedgerState::new());
            }
            if !pass.entries.is_empty() {
                let state = Arc::make_mut(&mut self.state);
                for e in pass.entries {
                    e.apply_to(state);
                }
            }
            if pass.pages == 1 {
                self.index = Some(pass.last_index);
                stats.index = pass.last_index;
                return Ok(stats);
            }
            since = Some(pass.first_index);
        }
        Err(ClientError::Unsettled {
            rounds: MAX_SETTLE_ROUNDS,
        })
    }

    /// Reads every page of a full read (`since = None`) or of the changes since an index;
    /// `None` when a replica answers "resync".
    async fn pass(
        &self,
        client: &LedgerClient,
        since: Option<u64>,
        stats: &mut RefreshStats,
    ) -> Result<Option<Pass>, ClientError> {
        let mut after: Option<StateKey> = None;
        let mut pass: Option<Pass> = None;
        loop {
            let query = ChangesQuery {
                since,
                after: after.take(),
                max_bytes: self.page_bytes,
            };
            let page = client.read_changes(&query).await?;
            stats.pages = stats.pages.saturating_add(1);
            if page.resync {
                return Ok(None);
            }
            stats.entries = stats.entries.saturating_add(page.entries.len());
            stats.bytes = stats.bytes.saturating_add(page.bytes);
            let p = pass.get_or_insert(Pass {
                first_index: page.applied_index,
                last_index: page.applied_index,
                pages: 0,
                entries: Vec::new(),
            });
            p.pages = p.pages.saturating_add(1);
            p.last_index = page.applied_index;
            p.entries.extend(page.entries);
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(pass),
            }
        }
    }
}
