//! The replica's small HTTP endpoint: `/healthz` (the process is alive), `/readyz` (the
//! replica can do its job: its watch caches have synced, the ledger has a leader, and, when
//! it leads, it could take its shard), `/metrics` (Prometheus text), and, only when the
//! process started with `PHALANX_CHAOS_FAILPOINTS=1`, `POST /debug/crash-at/<point>`
//! (`failpoint.rs`).
//!
//! A plain HTTP/1.1 responder on tokio: one request per connection, bounded header size,
//! read and write time, and number of connections at once ([`HttpLimits`]), so slow,
//! idle or malicious clients cannot hold the replica up or exhaust its file descriptors.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Consecutive periods in which the leader duties (nodes, shard assignment) failed before `/readyz` says so: one or
/// two failures are an election or a lost answer, retried next period.
pub const MAX_TAKE_FAILURES: u32 = 3;

/// What `/readyz` reports, and the part of `/metrics` the recorder does not hold; written
/// by the scheduling loop.
#[derive(Debug, Default)]
pub struct Health {
    /// The last cycle's per-object gauges ([`crate::observe::StateSeries::render`]),
    /// replaced whole each cycle so deleted objects' series disappear.
    pub cycle_gauges: std::sync::Mutex<String>,
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

/// How much the endpoint lets clients hold.
#[derive(Clone, Copy, Debug)]
pub struct HttpLimits {
    /// Connections served at once; the next is accepted only when one ends, so idle
    /// clients cannot use up the process's file descriptors.
    pub max_connections: usize,
    /// Time a client has to send its request (an idle connection is closed then).
    pub read_timeout: Duration,
    /// Time a client has to take the reply.
    pub write_timeout: Duration,
    /// First wait after a failed accept (EMFILE, ENFILE, ...), doubled per failure in a row.
    pub accept_backoff_min: Duration,
    /// Longest wait after a failed accept.
    pub accept_backoff_max: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_connections: 64,
            read_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(5),
            accept_backoff_min: Duration::from_millis(10),
            accept_backoff_max: Duration::from_millis(100),
        }
    }
}

/// Serves until the runtime stops, with the default limits.
pub async fn serve(listener: TcpListener, health: Arc<Health>, metrics: PrometheusHandle) {
    serve_with(listener, health, metrics, HttpLimits::default()).await;
}

/// Serves until the runtime stops.
pub async fn serve_with(
    listener: TcpListener,
    health: Arc<Health>,
    metrics: PrometheusHandle,
    limits: HttpLimits,
) {
    let accept = || async { listener.accept().await.map(|(stream, _)| stream) };
    accept_loop(accept, health, metrics, limits).await;
}

/// Accepts from `accept` (a seam for tests) while a connection slot is free; after a
/// failed accept it waits (10 ms doubling to 100 ms by default) instead of retrying at
/// once, which spun a core when the process was out of file descriptors.
async fn accept_loop<S, F, Fut>(
    mut accept: F,
    health: Arc<Health>,
    metrics: PrometheusHandle,
    limits: HttpLimits,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: FnMut() -> Fut,
    Fut: Future<Output = std::io::Result<S>>,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut backoff = limits.accept_backoff_min;
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return; // never closed
        };
        let stream = match accept().await {
            Ok(stream) => {
                backoff = limits.accept_backoff_min;
                stream
            }
            Err(e) => {
                tracing::warn!(error = %e, wait_ms = backoff.as_millis() as u64, "http endpoint: accept failed; waiting");
                tokio::time::sleep(backoff).await;
                backoff = backoff.saturating_mul(2).min(limits.accept_backoff_max);
                continue;
            }
        };
        let health = health.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            answer(stream, &health, &metrics, &limits).await;
            drop(slot);
        });
    }
}

/// Reads one request head (bounded in size and time) and writes the reply (bounded in
/// time).
async fn answer<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    health: &Health,
    metrics: &PrometheusHandle,
    limits: &HttpLimits,
) {
    let mut buf = vec![0u8; MAX_REQUEST_BYTES];
    let mut len = 0;
    let read = tokio::time::timeout(limits.read_timeout, async {
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
    let mut words = head.split_whitespace();
    let method = words.next().unwrap_or("GET");
    let path = words.next().unwrap_or("/");
    let failpoints = super::failpoint::global();
    let (code, content_type, body) = match failpoint_request(failpoints, method, path) {
        Some((code, body)) => (code, "text/plain; charset=utf-8", body),
        None => respond(path, health, metrics),
    };
    let reply = format!(
        "HTTP/1.1 {code}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(limits.write_timeout, async {
        stream.write_all(reply.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
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
        "/metrics" => {
            let mut body = metrics.render();
            body.push_str(
                &health
                    .cycle_gauges
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            ("200 OK", "text/plain; version=0.0.4; charset=utf-8", body)
        }
        _ => ("404 Not Found", TEXT, "not found\n".into()),
    }
}

/// `POST /debug/crash-at/<point>` (chaos only, `failpoint.rs`): `None` for any other
/// request, and 404 while failpoints are off, as for a path that does not exist.
fn failpoint_request(
    failpoints: &super::failpoint::Failpoints,
    method: &str,
    path: &str,
) -> Option<(&'static str, String)> {
    let name = path.strip_prefix("/debug/crash-at/")?;
    if !failpoints.enabled() {
        return Some(("404 Not Found", "not found\n".into()));
    }
    if method != "POST" {
        return Some(("405 Method Not Allowed", "POST only\n".into()));
    }
    let Some(point) = super::failpoint::CrashPoint::parse(name) else {
        let known: Vec<&str> = super::failpoint::CrashPoint::ALL
            .iter()
            .map(|p| p.name())
            .collect();
        return Some((
            "400 Bad Request",
            format!("unknown failpoint {name:?}; known: {}\n", known.join(", ")),
        ));
    };
    match failpoints.arm(point) {
        Ok(()) => {
            tracing::warn!(
                point = name,
                "failpoint armed (chaos): the next cross-shard gang this replica coordinates crashes it there"
            );
            Some(("200 OK", format!("armed {name}\n")))
        }
        Err(e) => Some(("409 Conflict", format!("{e}\n"))),
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
mod tests;
