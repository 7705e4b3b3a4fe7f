//! The proxy's faults on loopback, in front of a plaintext stand-in for kube-apiserver:
//! paused time for latency, a seeded error sequence compared request by request, and a
//! watch cut while another streaming response carries on.

use std::sync::atomic::AtomicU64;

use http_body_util::{BodyExt, Empty};
use hyper::body::Frame;
use tokio::sync::mpsc;

use super::*;

/// The stand-in: `/w` and `/slow` answer one frame then whatever the test sends on
/// `slow` (for `/slow`) or nothing more (for `/w`); anything else `ok N`.
struct Upstreamish {
    addr: SocketAddr,
    seen: Arc<AtomicU64>,
    slow: mpsc::UnboundedSender<Bytes>,
    _task: tokio::task::JoinHandle<()>,
}

async fn stand_in() -> Upstreamish {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(AtomicU64::new(0));
    let (slow, slow_rx) = mpsc::unbounded_channel::<Bytes>();
    let slow_rx = Arc::new(tokio::sync::Mutex::new(Some(slow_rx)));
    let s = seen.clone();
    let task = tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.expect("accept");
            let (s, slow_rx) = (s.clone(), slow_rx.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let (s, slow_rx) = (s.clone(), slow_rx.clone());
                    async move { Ok::<_, Infallible>(answer(req, &s, &slow_rx).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    Upstreamish {
        addr,
        seen,
        slow,
        _task: task,
    }
}

async fn answer(
    req: Request<Incoming>,
    seen: &AtomicU64,
    slow: &tokio::sync::Mutex<Option<mpsc::UnboundedReceiver<Bytes>>>,
) -> Response<Body> {
    let n = seen.fetch_add(1, Ordering::SeqCst) + 1;
    let first = futures::stream::once(async { Ok(Frame::data(Bytes::from("first"))) });
    let body = match req.uri().path() {
        "/w" => StreamBody::new(first.chain(futures::stream::pending())).boxed_unsync(),
        "/slow" => {
            let mut rx = slow.lock().await.take().expect("one /slow request");
            let rest = futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
                .map(|b| Ok::<_, BoxError>(Frame::data(b)));
            StreamBody::new(first.chain(rest)).boxed_unsync()
        }
        _ => Full::new(Bytes::from(format!("ok {n}")))
            .map_err(|e| match e {})
            .boxed_unsync(),
    };
    Response::new(body)
}

async fn proxy_to(up: &Upstreamish) -> Proxy {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let upstream = Upstream {
        addr: up.addr,
        tls: None,
    };
    Proxy::start(listener, upstream, None).expect("proxy")
}

async fn client(addr: SocketAddr) -> SendRequest<Empty<Bytes>> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    sender
}

async fn get(c: &mut SendRequest<Empty<Bytes>>, path: &str) -> Response<Incoming> {
    c.ready().await.expect("ready");
    let req = Request::get(path)
        .header("host", "127.0.0.1")
        .body(Empty::new())
        .expect("request");
    c.send_request(req).await.expect("response")
}

async fn text(r: Response<Incoming>) -> String {
    let b = r.into_body().collect().await.expect("body").to_bytes();
    String::from_utf8_lossy(&b).into_owned()
}

#[tokio::test(start_paused = true)]
async fn api_latency_holds_every_request_back_by_its_delay_and_heal_removes_it() {
    let up = stand_in().await;
    let proxy = proxy_to(&up).await;
    let mut c = client(proxy.addr).await;
    let t = tokio::time::Instant::now();
    assert_eq!(text(get(&mut c, "/a").await).await, "ok 1");
    assert_eq!(
        t.elapsed(),
        Duration::ZERO,
        "no fault, no delay (paused clock)"
    );
    proxy.control.set_latency(Duration::from_millis(700));
    let t = tokio::time::Instant::now();
    assert_eq!(text(get(&mut c, "/b").await).await, "ok 2");
    assert!(
        t.elapsed() >= Duration::from_millis(700),
        "{:?}",
        t.elapsed()
    );
    proxy.control.heal();
    let t = tokio::time::Instant::now();
    assert_eq!(text(get(&mut c, "/c").await).await, "ok 3");
    assert_eq!(t.elapsed(), Duration::ZERO);
    let n = proxy.control.counts();
    assert_eq!((n.forwarded, n.delayed), (3, 1), "{n:?}");
}

#[tokio::test]
async fn api_errors_answer_the_seeded_share_with_429_or_500_and_the_rest_reach_upstream() {
    let up = stand_in().await;
    let proxy = proxy_to(&up).await;
    let mut c = client(proxy.addr).await;
    proxy.control.set_errors(0.4, 7);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let expected: Vec<Option<u16>> = (0..64).map(|_| draw_error(&mut rng, 0.4)).collect();
    let mut got = Vec::new();
    for i in 0..64 {
        let r = get(&mut c, &format!("/p{i}")).await;
        let code = r.status().as_u16();
        let retry = r.headers().get("retry-after").cloned();
        let body = text(r).await;
        match code {
            200 => got.push(None),
            429 => {
                assert_eq!(retry.as_ref().map(|v| v.as_bytes()), Some(&b"1"[..]));
                assert!(body.contains("\"reason\":\"TooManyRequests\""), "{body}");
                got.push(Some(429));
            }
            500 => {
                assert!(retry.is_none());
                assert!(body.contains("\"reason\":\"InternalError\""), "{body}");
                got.push(Some(500));
            }
            other => panic!("request {i}: status {other}: {body}"),
        }
    }
    assert_eq!(
        got, expected,
        "the answers follow the seed, request by request"
    );
    let refused = expected.iter().filter(|e| e.is_some()).count() as u64;
    assert!(expected.contains(&Some(429)) && expected.contains(&Some(500)));
    assert!(
        (10..=40).contains(&refused),
        "{refused} of 64 at a share of 0.4"
    );
    assert_eq!(
        up.seen.load(Ordering::SeqCst),
        64 - refused,
        "refused never reach upstream"
    );
    let n = proxy.control.counts();
    assert_eq!(n.answered_429 + n.answered_500, refused);
    proxy.control.heal();
    assert_eq!(get(&mut c, "/after").await.status(), 200);
}

#[test]
fn draw_error_at_the_extremes_never_and_always() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    assert!((0..100).all(|_| draw_error(&mut rng, 0.0).is_none()));
    assert!((0..100).all(|_| draw_error(&mut rng, 1.0).is_some()));
}

#[tokio::test]
async fn watch_cut_ends_open_watch_streams_in_an_error_and_leaves_other_streams_alone() {
    let up = stand_in().await;
    let proxy = proxy_to(&up).await;
    let (mut w, mut s) = (client(proxy.addr).await, client(proxy.addr).await);
    let mut watch = get(&mut w, "/w?labelSelector=a&watch=true")
        .await
        .into_body();
    let mut slow = get(&mut s, "/slow?watch=false").await.into_body();
    let first = |f: Option<Result<Frame<Bytes>, hyper::Error>>| {
        f.expect("a frame")
            .expect("no error")
            .into_data()
            .expect("data")
    };
    assert_eq!(first(watch.frame().await), "first");
    assert_eq!(first(slow.frame().await), "first");
    assert_eq!(
        proxy.control.open_watches(),
        1,
        "only the watch=true response counts"
    );
    assert_eq!(proxy.control.cut_watches(), 1);
    let cut = watch.frame().await;
    assert!(
        matches!(cut, Some(Err(_))),
        "the watch body ends in an error: {cut:?}"
    );
    assert_eq!(proxy.control.open_watches(), 0);
    assert_eq!(proxy.control.counts().watches_cut, 1);
    up.slow.send(Bytes::from("second")).expect("send");
    assert_eq!(
        first(slow.frame().await),
        "second",
        "a non-watch stream goes on"
    );
    // The proxy serves new watches after a cut.
    let mut w2 = client(proxy.addr).await;
    let mut again = get(&mut w2, "/w?watch=1").await.into_body();
    assert_eq!(first(again.frame().await), "first");
}

#[test]
fn is_watch_reads_the_watch_parameter_only() {
    assert!(is_watch(Some("watch=true")));
    assert!(is_watch(Some("labelSelector=x&watch=1&resourceVersion=3")));
    assert!(!is_watch(Some("watch=false")));
    assert!(!is_watch(Some("allowWatchBookmarks=true")));
    assert!(!is_watch(None));
}

#[test]
fn the_kubeconfig_is_redirected_to_the_proxy_and_names_the_upstream() {
    let text = "apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster:\n    server: https://127.0.0.1:21443\n    certificate-authority-data: QUJD\ncurrent-context: t\n";
    let proxy: SocketAddr = "127.0.0.1:5555".parse().expect("addr");
    let (up, out) = redirect_kubeconfig(text, proxy).expect("redirect");
    assert_eq!(up, "127.0.0.1:21443".parse::<SocketAddr>().expect("addr"));
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        v["clusters"][0]["cluster"]["server"],
        "https://127.0.0.1:5555"
    );
    assert_eq!(
        v["clusters"][0]["cluster"]["certificate-authority-data"],
        "QUJD"
    );
    assert_eq!(v["current-context"], "t");
    let bad = text.replace("https://127.0.0.1:21443", "http://somewhere");
    let e = redirect_kubeconfig(&bad, proxy).expect_err("not https://IP:PORT");
    assert!(e.to_string().contains("cluster.server"), "{e}");
}
