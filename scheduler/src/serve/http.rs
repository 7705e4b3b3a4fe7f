//! The replica's small HTTP endpoint: `/healthz` (the process is alive), `/readyz` (the
//! replica can do its job: its watch caches have synced, the ledger has a leader, and, when
//! it leads, it could take its shard), `/metrics` (Prometheus text).
//!
//! A plain HTTP/1.1 responder on tokio: one request per connection, bounded header size and
//! read time, so a slow or malicious client cannot hold the replica up.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Consecutive periods in which the leader duties (nodes, shard assignment) failed before `/readyz` says so: one or
/// two failures are an election or a lost answer, retried next period.
pub const MAX_TAKE_FAILURES: u32 = 3;

/// What `/readyz` reports; written by the scheduling loop.
#[derive(Debug, Default)]
pub struct Health {
    pub caches_synced: AtomicBool,
    pub ledger_has_leader: AtomicBool,
    /// Consecutive periods in which this replica led but its leader duties failed (0 once
    /// its duties succeed, or while it does not lead).
    pub take_failures: AtomicU32,
    /// The shard's epoch cannot increase any more: no replica can take it again.
    pub epoch_exhausted: AtomicBool,
}

impl Health {
    /// Why the replica cannot do its job now; empty when it can.
    pub fn not_ready(&self) -> Vec<String> {
        let mut why = Vec::new();
        if !self.caches_synced.load(Ordering::Relaxed) {
            why.push("watch caches not synced".to_string());
        }
        if !self.ledger_has_leader.load(Ordering::Relaxed) {
            why.push("the ledger has no leader".to_string());
        }
        if self.epoch_exhausted.load(Ordering::Relaxed) {
            why.push("the shard's epoch is exhausted: it cannot be taken again".to_string());
        }
        let failures = self.take_failures.load(Ordering::Relaxed);
        if failures >= MAX_TAKE_FAILURES {
            why.push(format!(
                "the leader's shard assignment failed {failures} periods in a row"
            ));
        }
        why
    }

    pub fn ready(&self) -> bool {
        self.not_ready().is_empty()
    }

    /// The leader duties succeeded (or there are none: the replica does not lead).
    pub fn shard_taken(&self) {
        self.take_failures.store(0, Ordering::Relaxed);
        self.epoch_exhausted.store(false, Ordering::Relaxed);
    }

    /// Taking the shard failed with `e`.
    pub fn take_failed(&self, e: &crate::ledger::LedgerError) {
        if matches!(e, crate::ledger::LedgerError::EpochExhausted { .. }) {
            self.epoch_exhausted.store(true, Ordering::Relaxed);
        }
        let _ = self
            .take_failures
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_add(1))
            });
    }
}

const MAX_REQUEST_BYTES: usize = 8 * 1024;
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves until the runtime stops.
pub async fn serve(listener: TcpListener, health: Arc<Health>, metrics: PrometheusHandle) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let health = health.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; MAX_REQUEST_BYTES];
            let mut len = 0;
            let read = tokio::time::timeout(READ_TIMEOUT, async {
                while len < buf.len() {
                    let n = stream.read(&mut buf[len..]).await?;
                    if n == 0 {
                        break;
                    }
                    len += n;
                    if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                Ok::<_, std::io::Error>(())
            })
            .await;
            if !matches!(read, Ok(Ok(()))) {
                return;
            }
            let head = String::from_utf8_lossy(&buf[..len]);
            let path = head.split_whitespace().nth(1).unwrap_or("/");
            let (code, content_type, body) = respond(path, &health, &metrics);
            let reply = format!(
                "HTTP/1.1 {code}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(reply.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

fn respond(
    path: &str,
    health: &Health,
    metrics: &PrometheusHandle,
) -> (&'static str, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    match path.split('?').next().unwrap_or("") {
        "/healthz" => ("200 OK", TEXT, "ok\n".into()),
        "/readyz" => {
            let (code, body) = readyz(health);
            (code, TEXT, body)
        }
        "/metrics" => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.render(),
        ),
        _ => ("404 Not Found", TEXT, "not found\n".into()),
    }
}

/// `/readyz`: 200 when ready, else 503 with every reason.
fn readyz(health: &Health) -> (&'static str, String) {
    let why = health.not_ready();
    if why.is_empty() {
        ("200 OK", "ok\n".into())
    } else {
        (
            "503 Service Unavailable",
            format!("not ready: {}\n", why.join(", ")),
        )
    }
}

/// Binds the endpoint (before anything else starts, so a taken port fails fast).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::LedgerError;

    fn healthy() -> Health {
        let h = Health::default();
        h.caches_synced.store(true, Ordering::Relaxed);
        h.ledger_has_leader.store(true, Ordering::Relaxed);
        h
    }

    #[test]
    fn readyz_is_503_with_the_reason_whenever_the_replica_cannot_do_its_job() {
        assert_eq!(readyz(&healthy()), ("200 OK", "ok\n".to_string()));

        let (code, body) = readyz(&Health::default());
        assert_eq!(code, "503 Service Unavailable");
        assert!(body.contains("watch caches not synced"), "{body}");
        assert!(body.contains("the ledger has no leader"), "{body}");

        let h = healthy();
        h.take_failed(&LedgerError::EpochExhausted {
            shard: 0,
            current: u64::MAX - 1,
        });
        let (code, body) = readyz(&h);
        assert_eq!(code, "503 Service Unavailable");
        assert!(body.contains("epoch is exhausted"), "{body}");

        let h = healthy();
        for n in 1..=MAX_TAKE_FAILURES {
            assert_eq!(readyz(&h).0, "200 OK", "after {} failures", n - 1);
            h.take_failed(&LedgerError::Unavailable("no leader".into()));
        }
        let (code, body) = readyz(&h);
        assert_eq!(code, "503 Service Unavailable");
        assert!(
            body.contains(&format!("failed {MAX_TAKE_FAILURES} periods in a row")),
            "{body}"
        );
        // Taking the shard (or standing by) makes it ready again.
        h.shard_taken();
        assert_eq!(readyz(&h).0, "200 OK");
    }
}
