//! The replica's small HTTP endpoint: `/healthz` (the process is alive), `/readyz` (the watch
//! caches have synced and the ledger has a leader), `/metrics` (Prometheus text).
//!
//! A plain HTTP/1.1 responder on tokio: one request per connection, bounded header size and
//! read time, so a slow or malicious client cannot hold the replica up.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// What `/readyz` reports; written by the scheduling loop.
#[derive(Debug, Default)]
pub struct Health {
    pub caches_synced: AtomicBool,
    pub ledger_has_leader: AtomicBool,
}

impl Health {
    pub fn ready(&self) -> bool {
        self.caches_synced.load(Ordering::Relaxed) && self.ledger_has_leader.load(Ordering::Relaxed)
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
        "/readyz" if health.ready() => ("200 OK", TEXT, "ok\n".into()),
        "/readyz" => {
            let mut why = Vec::new();
            if !health.caches_synced.load(Ordering::Relaxed) {
                why.push("watch caches not synced");
            }
            if !health.ledger_has_leader.load(Ordering::Relaxed) {
                why.push("the ledger has no leader");
            }
            (
                "503 Service Unavailable",
                TEXT,
                format!("not ready: {}\n", why.join(", ")),
            )
        }
        "/metrics" => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.render(),
        ),
        _ => ("404 Not Found", TEXT, "not found\n".into()),
    }
}

/// Binds the endpoint (before anything else starts, so a taken port fails fast).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}
