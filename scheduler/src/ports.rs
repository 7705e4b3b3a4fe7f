//! Loopback ports for the harnesses that start `phalanx serve` processes (the e2e testbed
//! and `phalanx-chaos`): a port is picked here and the process binds it later.
//!
//! Asking the kernel for a free port (binding port 0) returns one from its ephemeral range
//! (32768-60999 on Linux by default), which any outgoing connection may take in the moment
//! between the pick and the replica's own bind: CI failed so on 2026-12-02, a replica's
//! Raft port in use ("Address already in use") while the testbed was busy with
//! connections. Ports below that range are only ever taken by a listener that asks for
//! them, so they are picked from 12000-19999, each checked free by binding it.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

const LOW: u32 = 12_000;
const SPAN: u32 = 8_000;

/// A loopback port free now and outside the kernel's ephemeral range; successive calls in
/// one process never return the same port, and two processes start far apart.
pub fn free_loopback_port() -> std::io::Result<u16> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(2_654_435_761) % SPAN;
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = u16::try_from(LOW + (start + n) % SPAN).unwrap_or(u16::MAX);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrNotAvailable,
        format!("no free loopback port in {LOW}..{}", LOW + SPAN),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_below_the_ephemeral_range_free_and_never_repeated() {
        let a = free_loopback_port().expect("a port");
        let b = free_loopback_port().expect("a port");
        assert_ne!(a, b);
        for p in [a, b] {
            assert!((12_000..20_000).contains(&p), "{p}");
            TcpListener::bind(("127.0.0.1", p)).expect("still free");
        }
    }
}
