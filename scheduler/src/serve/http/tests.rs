use std::sync::atomic::AtomicUsize;
use std::time::Instant;

use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::io::DuplexStream;

use super::*;
use crate::ledger::LedgerError;

fn handle() -> PrometheusHandle {
    PrometheusBuilder::new().build_recorder().handle()
}

/// EMFILE, as `accept` returns it when the process is out of file descriptors.
fn out_of_fds() -> std::io::Error {
    std::io::Error::from_raw_os_error(24)
}

#[tokio::test]
async fn failed_accepts_back_off_instead_of_spinning() {
    let calls = Arc::new(AtomicUsize::new(0));
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<Instant>();
    let mut done_tx = Some(done_tx);
    let counted = Arc::clone(&calls);
    let accept = move || {
        // The sixth call comes after five failures: 10 + 20 + 40 + 80 + 100 ms of waiting.
        if counted.fetch_add(1, Ordering::SeqCst) == 5
            && let Some(tx) = done_tx.take()
        {
            let _ = tx.send(Instant::now());
        }
        async { Err::<DuplexStream, _>(out_of_fds()) }
    };
    let start = Instant::now();
    let server = tokio::spawn(accept_loop(
        accept,
        Arc::new(Health::default()),
        handle(),
        HttpLimits::default(),
    ));
    let sixth = tokio::time::timeout(Duration::from_secs(10), done_rx)
        .await
        .expect("six accepts within 10 s")
        .expect("the loop reports the sixth accept");
    server.abort();
    let waited = sixth - start;
    assert!(
        waited >= Duration::from_millis(250),
        "five failed accepts in a row took only {waited:?}: the loop spins"
    );
}

async fn get(addr: SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.expect("reply");
    reply
}

#[tokio::test]
async fn idle_connections_beyond_the_limit_wait_and_healthz_is_answered_once_they_time_out() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let limits = HttpLimits {
        max_connections: 2,
        read_timeout: Duration::from_millis(300),
        ..HttpLimits::default()
    };
    let start = Instant::now();
    let server = tokio::spawn(serve_with(
        listener,
        Arc::new(Health::default()),
        handle(),
        limits,
    ));
    // Two clients connect and send nothing: they hold both slots until the read timeout.
    let mut idle = Vec::new();
    for _ in 0..2 {
        idle.push(tokio::net::TcpStream::connect(addr).await.expect("connect"));
    }
    let reply = tokio::time::timeout(Duration::from_secs(10), get(addr, "/healthz"))
        .await
        .expect("/healthz is answered once a slot frees");
    let waited = start.elapsed();
    assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
    assert!(
        waited >= limits.read_timeout,
        "answered after {waited:?}: the third connection was served beyond the limit of 2"
    );
    for mut stream in idle {
        let mut rest = Vec::new();
        let read = stream.read_to_end(&mut rest).await.expect("closed cleanly");
        assert_eq!(read, 0, "an idle connection is closed without a reply");
    }
    server.abort();
}

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

#[test]
fn the_crash_failpoint_route_is_404_while_off_and_arms_only_a_known_point_by_post() {
    use crate::serve::failpoint::{CrashPoint, Failpoints};
    let off = Failpoints::new(false);
    let arm = "/debug/crash-at/after-decision";
    assert_eq!(
        failpoint_request(&off, "POST", arm).unwrap().0,
        "404 Not Found"
    );
    assert_eq!(failpoint_request(&off, "GET", "/metrics"), None);
    assert!(!off.take(CrashPoint::AfterDecision));

    let on = Failpoints::new(true);
    assert_eq!(
        failpoint_request(&on, "GET", arm).unwrap().0,
        "405 Method Not Allowed"
    );
    let (code, body) = failpoint_request(&on, "POST", "/debug/crash-at/nowhere").unwrap();
    assert_eq!(code, "400 Bad Request");
    assert!(
        body.contains("\"nowhere\"") && body.contains("before-bind"),
        "{body}"
    );
    assert!(
        !on.take(CrashPoint::AfterDecision),
        "nothing armed by a refused request"
    );
    assert_eq!(failpoint_request(&on, "POST", arm).unwrap().0, "200 OK");
    assert!(on.take(CrashPoint::AfterDecision));
}
