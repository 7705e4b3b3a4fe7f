//! The transaction-expiry loop: while this replica leads, it proposes
//! `ExpireAt { now_ms }` whenever an undecided transaction is past its deadline, so a
//! reservation whose coordinator died is released (ARCHITECTURE.md "Two-phase
//! reservation", step 4). The clock is a seam (`Clock`), so tests control time.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::task::JoinHandle;

use crate::ledger::LedgerCommand;
use crate::raft_types::{EncodedBatch, LedgerBatch, Raft};
use crate::state_machine::LedgerReader;

/// Milliseconds on the clock transactions' `deadline_ms` are written in.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Wall-clock milliseconds since the UNIX epoch.
pub fn system_clock() -> Clock {
    Arc::new(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    })
}

/// Spawns the loop; it ends when Raft shuts down. One proposal per tick at most.
pub fn spawn_expiry_loop(
    raft: Raft,
    reader: LedgerReader,
    interval: Duration,
    clock: Clock,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let metrics = raft.metrics();
        loop {
            tick.tick().await;
            if metrics.has_changed().is_err() {
                return; // Raft stopped.
            }
            if !metrics.borrow().state.is_leader() {
                continue;
            }
            let now_ms = clock();
            let due = reader.read(|s, _| {
                s.txns
                    .values()
                    .any(|t| t.decision.is_none() && t.deadline_ms <= now_ms)
            });
            if !due {
                continue;
            }
            let cmd = LedgerCommand::ExpireAt { now_ms };
            let entry = match EncodedBatch::encode(&LedgerBatch::one(cmd)) {
                Ok(entry) => entry,
                Err(e) => {
                    tracing::error!(error = %e, "an ExpireAt command does not encode");
                    continue;
                }
            };
            match raft.client_write(entry).await {
                Ok(r) => {
                    // A refusal here is this replica's clock behind the ledger's or far
                    // ahead of it (see `MAX_CLOCK_STEP_MS`): worth an operator's look.
                    if let Some(refusal) = r.data.responses.iter().find_map(|r| r.refusal()) {
                        tracing::warn!(reason = %refusal, "the ledger refused this replica's clock");
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "expiry proposal not committed; will retry next tick");
                }
            }
        }
    })
}
