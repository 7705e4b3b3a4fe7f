//! `Reachability`: which peers refused this replica's last attempt to connect to their
//! Raft listener.
//!
//! A refused TCP connection (an RST to the SYN) means that no process listens at the
//! peer's address: the replica crashed, was killed, or is restarting. That is a far
//! faster and surer sign of death than a Lease left to expire, and the Raft leader sends
//! to every peer every heartbeat (40 ms), so it learns of a crash within a heartbeat or
//! two. Anything else (a timeout, a reset, an error answered by the peer) says nothing
//! about the process: a partitioned or stopped peer times out, and only its Lease tells.
//!
//! The scheduler's leader counts a refusing peer as dead at once (`serve/liveness.rs`).
//! Being wrong costs only shard moves, never safety: every write of a deposed owner
//! carries a stale epoch and is refused by the ledger (fencing, I4).
//!
//! What it cannot see: a peer behind a TCP proxy (a service mesh sidecar, the chaos
//! harness's link proxies) is accepted by the proxy, which then closes the connection;
//! a dead machine sends no RST. Both fall back to the Lease.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::raft_types::NodeId;

/// Shared between every peer client of one replica and whoever asks.
#[derive(Debug, Clone)]
pub struct Reachability {
    refused: Arc<Mutex<BTreeMap<NodeId, bool>>>,
    /// Counts the times a peer started refusing (answering -> refused), so that the
    /// scheduler's loop wakes at once rather than at its next period (`serve/wakeup.rs`).
    /// The heartbeats that find it refusing again change nothing.
    newly_refusing: Arc<watch::Sender<u64>>,
}

impl Default for Reachability {
    fn default() -> Self {
        Self {
            refused: Arc::default(),
            newly_refusing: Arc::new(watch::Sender::new(0)),
        }
    }
}

impl Reachability {
    pub fn new() -> Self {
        Self::default()
    }

    fn set(&self, peer: NodeId, refused: bool) {
        // A poisoned lock only means a panic elsewhere mid-insert; the map stays usable.
        let mut map = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        let was = map.insert(peer, refused).unwrap_or(false);
        drop(map);
        if refused && !was {
            self.newly_refusing.send_modify(|n| *n += 1);
        }
    }

    /// Changes each time a peer starts refusing.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.newly_refusing.subscribe()
    }

    /// The peer answered a call: a process listens and serves. An error status is not
    /// taken as an answer, since tonic makes some of them on this side (a local timeout is
    /// `Cancelled`); the peer stays refusing until its next reply.
    pub fn note_answered(&self, peer: NodeId) {
        self.set(peer, false);
    }

    /// The connection to the peer's listener was refused.
    pub fn note_refused(&self, peer: NodeId) {
        self.set(peer, true);
    }

    /// The peers whose last connection attempt was refused and which have not answered
    /// since.
    pub fn refusing(&self) -> BTreeSet<NodeId> {
        let map = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        map.iter().filter(|(_, r)| **r).map(|(p, _)| *p).collect()
    }
}

/// Whether `err`, or an error in its source chain, is a refused TCP connection.
pub fn is_connection_refused(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(e) = next {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        next = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_peer_is_refusing_until_it_answers_again() {
        let r = Reachability::new();
        r.note_answered(1);
        r.note_refused(2);
        r.note_refused(3);
        assert_eq!(r.refusing(), BTreeSet::from([2, 3]));
        r.note_answered(2);
        assert_eq!(r.refusing(), BTreeSet::from([3]));
        r.note_refused(1);
        assert_eq!(r.refusing(), BTreeSet::from([1, 3]));
    }

    #[test]
    fn only_a_peer_that_starts_refusing_wakes_a_subscriber() {
        let r = Reachability::new();
        let mut rx = r.subscribe();
        r.note_answered(1);
        assert!(!rx.has_changed().unwrap(), "an answer wakes nobody");
        r.note_refused(1);
        assert!(rx.has_changed().unwrap());
        rx.mark_unchanged();
        r.note_refused(1);
        assert!(!rx.has_changed().unwrap(), "refused again is no news");
        r.note_answered(1);
        r.note_refused(1);
        assert!(
            rx.has_changed().unwrap(),
            "refusing again after answering is"
        );
    }

    #[derive(Debug, thiserror::Error)]
    #[error("wrapped")]
    struct Wrapped(#[source] std::io::Error);

    #[test]
    fn only_a_refusal_in_the_source_chain_counts() {
        use std::io::{Error, ErrorKind};
        let refused = Wrapped(Error::from(ErrorKind::ConnectionRefused));
        assert!(is_connection_refused(&refused));
        for other in [
            ErrorKind::ConnectionReset,
            ErrorKind::TimedOut,
            ErrorKind::BrokenPipe,
        ] {
            assert!(
                !is_connection_refused(&Wrapped(Error::from(other))),
                "{other:?}"
            );
        }
    }
}
