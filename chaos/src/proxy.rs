//! The API-server proxy the harness puts in front of kube-apiserver: every `phalanx serve`
//! replica is given its address (a kubeconfig that points at it), the harness's own
//! recorder and workload are not. It terminates TLS with the testbed's apiserver
//! certificate (so the replicas' kubeconfig keeps the testbed's CA) and connects upstream
//! as the testbed's admin client; in between it speaks HTTP/1.1, which is what it needs to
//! answer a request itself (429, 500), to hold it back (latency), and to cut a watch
//! stream (a response whose request had `watch=true`) in the middle of its body.
//!
//! One downstream connection gets one upstream connection, reopened when it closes, so
//! the proxy keeps the clients' connection reuse as it is. Faults are switched on and off
//! through [`Control`] while it runs.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, BodyStream, Full, StreamBody};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = UnsyncBoxBody<Bytes, BoxError>;

/// The share of requests answered with an error, and the generator that picks them.
#[derive(Debug)]
struct Errors {
    share: f64,
    rng: ChaCha8Rng,
}

/// The faults switched on now.
#[derive(Debug, Default)]
struct Active {
    latency: Duration,
    errors: Option<Errors>,
}

/// What the proxy did since it started.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Requests passed to kube-apiserver (with or without a delay).
    pub forwarded: u64,
    /// Requests held back by `api-latency` before being passed on.
    pub delayed: u64,
    pub answered_429: u64,
    pub answered_500: u64,
    /// Watch responses cut in the middle of their body.
    pub watches_cut: u64,
    /// Requests kube-apiserver could not be reached for (answered 502).
    pub upstream_errors: u64,
}

impl Counts {
    /// What happened between `before` and `self`, in words for the report.
    pub fn since(&self, before: &Counts) -> String {
        format!(
            "proxy: {} forwarded ({} delayed), {} answered 429, {} answered 500, {} watches cut, {} upstream errors",
            self.forwarded - before.forwarded,
            self.delayed - before.delayed,
            self.answered_429 - before.answered_429,
            self.answered_500 - before.answered_500,
            self.watches_cut - before.watches_cut,
            self.upstream_errors - before.upstream_errors,
        )
    }
}

/// Switches the proxy's faults; shared by the harness and every connection.
#[derive(Debug)]
pub struct Control {
    active: Mutex<Active>,
    counts: Mutex<Counts>,
    /// Bumped by `cut_watches`: every open watch body sees the change and ends in an error.
    cut: tokio::sync::watch::Sender<u64>,
    open_watches: AtomicU64,
}

/// What to do with one request: hold it back, and/or answer it with an error status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub delay: Duration,
    pub error: Option<u16>,
}

/// Whether one request is answered with an error: with probability `share`, then 429 or
/// 500 with even odds. Two draws per request whatever the outcome, so the sequence of
/// answers is a function of the seed and the request's ordinal alone.
pub fn draw_error(rng: &mut ChaCha8Rng, share: f64) -> Option<u16> {
    let hit = rng.random_bool(share.clamp(0.0, 1.0));
    let code = if rng.random_bool(0.5) { 429 } else { 500 };
    hit.then_some(code)
}

impl Default for Control {
    fn default() -> Self {
        Self {
            active: Mutex::default(),
            counts: Mutex::default(),
            cut: tokio::sync::watch::Sender::new(0),
            open_watches: AtomicU64::new(0),
        }
    }
}

impl Control {
    fn active(&self) -> std::sync::MutexGuard<'_, Active> {
        self.active
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn count(&self, f: impl FnOnce(&mut Counts)) {
        f(&mut self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner));
    }

    pub fn counts(&self) -> Counts {
        *self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `api-latency`: every request from now on waits `d` before it is passed on.
    pub fn set_latency(&self, d: Duration) {
        self.active().latency = d;
    }

    /// `api-errors`: from now on a `share` of requests (drawn from `seed`, in the order
    /// they arrive) is answered 429 with `Retry-After: 1` or 500, never reaching
    /// kube-apiserver.
    pub fn set_errors(&self, share: f64, seed: u64) {
        self.active().errors = Some(Errors {
            share,
            rng: ChaCha8Rng::seed_from_u64(seed),
        });
    }

    /// Every fault off.
    pub fn heal(&self) {
        *self.active() = Active::default();
    }

    /// `watch-cut`: every watch stream open now ends in an error (its connection is
    /// closed mid-body). Returns how many were open.
    pub fn cut_watches(&self) -> u64 {
        let open = self.open_watches.load(Ordering::SeqCst);
        self.cut.send_modify(|g| *g += 1);
        open
    }

    /// Watch responses whose body is being streamed now.
    #[cfg(test)]
    pub fn open_watches(&self) -> u64 {
        self.open_watches.load(Ordering::SeqCst)
    }

    /// The plan for the next request to arrive.
    pub fn plan(&self) -> Plan {
        let mut a = self.active();
        let latency = a.latency;
        let error = a
            .errors
            .as_mut()
            .and_then(|e| draw_error(&mut e.rng, e.share));
        Plan {
            delay: latency,
            error,
        }
    }
}

/// Where kube-apiserver is, and how to speak TLS to it (None: plaintext, for tests).
#[derive(Debug, Clone)]
pub struct Upstream {
    pub addr: SocketAddr,
    pub tls: Option<Arc<ClientConfig>>,
}

async fn handshake<S>(io: S) -> Result<SendRequest<Incoming>, BoxError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    // The connection ends when the sender is dropped or the server closes it.
    tokio::spawn(conn);
    Ok(sender)
}

impl Upstream {
    async fn connect(&self) -> Result<SendRequest<Incoming>, BoxError> {
        let tcp = TcpStream::connect(self.addr).await?;
        tcp.set_nodelay(true)?;
        match &self.tls {
            None => handshake(tcp).await,
            Some(cfg) => {
                let name = ServerName::IpAddress(self.addr.ip().into());
                let tls = tokio_rustls::TlsConnector::from(cfg.clone())
                    .connect(name, tcp)
                    .await?;
                handshake(tls).await
            }
        }
    }
}

/// A Kubernetes `Status` answer, as kube-apiserver gives it.
fn status(code: u16, reason: &str, message: &str) -> Response<Body> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    })
    .to_string();
    let mut r = Response::builder()
        .status(code)
        .header("content-type", "application/json");
    if code == 429 {
        r = r.header("retry-after", "1");
    }
    r.body(
        Full::new(Bytes::from(body))
            .map_err(|e| match e {})
            .boxed_unsync(),
    )
    .unwrap_or_else(|_| Response::new(Body::default()))
}

fn refusal(code: u16) -> Response<Body> {
    match code {
        429 => status(
            429,
            "TooManyRequests",
            "phalanx-chaos api-errors: too many requests, please try again later",
        ),
        _ => status(
            500,
            "InternalError",
            "phalanx-chaos api-errors: an error on the server prevented the request from succeeding",
        ),
    }
}

/// A watch request: `watch=true` (or `1`) in its query.
pub fn is_watch(query: Option<&str>) -> bool {
    query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"))
}

/// Counts a watch body as open while it lives.
#[derive(Debug)]
struct OpenWatch(Arc<Control>);

impl OpenWatch {
    fn new(c: Arc<Control>) -> Self {
        c.open_watches.fetch_add(1, Ordering::SeqCst);
        Self(c)
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.0.open_watches.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The upstream watch body, passed on frame by frame until `cut` changes: then it ends
/// in an error, which makes hyper close the client's connection mid-stream.
fn cuttable(body: Incoming, cut: tokio::sync::watch::Receiver<u64>, c: Arc<Control>) -> Body {
    let state = Some((BodyStream::new(body), cut, OpenWatch::new(c)));
    let frames = futures::stream::unfold(state, |st| async move {
        let (mut frames, mut cut, open) = st?;
        tokio::select! {
            biased;
            _ = cut.changed() => {
                open.0.count(|n| n.watches_cut += 1);
                let e: BoxError = "watch stream cut by phalanx-chaos".into();
                Some((Err(e), None))
            }
            f = frames.next() => match f? {
                Ok(frame) => Some((Ok(frame), Some((frames, cut, open)))),
                Err(e) => Some((Err(e.into()), None)),
            },
        }
    });
    StreamBody::new(frames).boxed_unsync()
}

/// The connection's upstream sender, opened (again) when there is none or it closed.
type Conn = Arc<tokio::sync::Mutex<Option<SendRequest<Incoming>>>>;

async fn forward(
    req: Request<Incoming>,
    up: &Upstream,
    conn: &Conn,
) -> Result<Response<Incoming>, BoxError> {
    let mut slot = conn.lock().await;
    let mut sender = match slot.take() {
        Some(s) if !s.is_closed() => s,
        _ => up.connect().await?,
    };
    if sender.ready().await.is_err() {
        sender = up.connect().await?;
        sender.ready().await?;
    }
    let answer = sender.send_request(req);
    *slot = Some(sender);
    drop(slot);
    Ok(answer.await?)
}

async fn handle(
    req: Request<Incoming>,
    up: Upstream,
    control: Arc<Control>,
    conn: Conn,
) -> Result<Response<Body>, Infallible> {
    let plan = control.plan();
    if !plan.delay.is_zero() {
        control.count(|n| n.delayed += 1);
        tokio::time::sleep(plan.delay).await;
    }
    if let Some(code) = plan.error {
        control.count(|n| match code {
            429 => n.answered_429 += 1,
            _ => n.answered_500 += 1,
        });
        return Ok(refusal(code));
    }
    let watch = is_watch(req.uri().query());
    // Subscribed before forwarding: a cut while the request is on its way still counts.
    let cut = control.cut.subscribe();
    match forward(req, &up, &conn).await {
        Ok(resp) => {
            control.count(|n| n.forwarded += 1);
            let (parts, body) = resp.into_parts();
            let body = if watch {
                cuttable(body, cut, control)
            } else {
                body.map_err(BoxError::from).boxed_unsync()
            };
            Ok(Response::from_parts(parts, body))
        }
        Err(e) => {
            control.count(|n| n.upstream_errors += 1);
            *conn.lock().await = None;
            let msg = format!("phalanx-chaos proxy: kube-apiserver at {}: {e}", up.addr);
            Ok(status(502, "ServiceUnavailable", &msg))
        }
    }
}

async fn serve<S>(io: S, up: Upstream, control: Arc<Control>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let conn: Conn = Arc::default();
    let svc = hyper::service::service_fn(move |req| {
        handle(req, up.clone(), control.clone(), conn.clone())
    });
    // An error here is the client going away or a cut watch: that connection only.
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(io), svc)
        .await;
}

/// A running proxy; dropping it closes its listener and every connection through it.
#[derive(Debug)]
pub struct Proxy {
    pub addr: SocketAddr,
    pub control: Arc<Control>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Serves `listener` (TLS with `tls`, plaintext without), passing requests to `up`.
    /// Must be called within a Tokio runtime.
    pub fn start(
        listener: TcpListener,
        up: Upstream,
        tls: Option<Arc<ServerConfig>>,
    ) -> anyhow::Result<Self> {
        let addr = listener.local_addr()?;
        let control = Arc::new(Control::default());
        let c = control.clone();
        let task = tokio::spawn(async move {
            // Held by the accept loop: aborting it aborts every connection.
            let mut conns = tokio::task::JoinSet::new();
            let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((tcp, _)) = accepted else { continue };
                        let _ = tcp.set_nodelay(true);
                        let (up, c, acceptor) = (up.clone(), c.clone(), acceptor.clone());
                        conns.spawn(async move {
                            match acceptor {
                                None => serve(tcp, up, c).await,
                                Some(a) => {
                                    if let Ok(tls) = a.accept(tcp).await {
                                        serve(tls, up, c).await;
                                    }
                                }
                            }
                        });
                    }
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        });
        Ok(Self {
            addr,
            control,
            task,
        })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn pem_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("{}: not PEM: {e}", path.display()))?;
    anyhow::ensure!(
        !certs.is_empty(),
        "{}: no CERTIFICATE in it",
        path.display()
    );
    Ok(certs)
}

fn pem_key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| anyhow::anyhow!("{}: no private key: {e}", path.display()))
}

/// The proxy's two TLS configurations from the testbed's PKI directory: it serves with
/// the apiserver certificate (SANs 127.0.0.1 and localhost, signed by the testbed CA the
/// replicas trust) and connects to kube-apiserver as the admin client. The replicas'
/// own client certificate is not asked for: upstream, every request is the admin's, as
/// it was without the proxy (the testbed kubeconfig is the admin's).
pub fn testbed_tls(pki: &Path) -> anyhow::Result<(Arc<ServerConfig>, Arc<ClientConfig>)> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            pem_certs(&pki.join("apiserver.crt"))?,
            pem_key(&pki.join("apiserver.key"))?,
        )?;
    // HTTP/1.1 only: what the proxy parses (clients that offer h2 fall back).
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut roots = RootCertStore::empty();
    for ca in pem_certs(&pki.join("ca.crt"))? {
        roots.add(ca)?;
    }
    let mut client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_client_auth_cert(
            pem_certs(&pki.join("admin.crt"))?,
            pem_key(&pki.join("admin.key"))?,
        )?;
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((Arc::new(server), Arc::new(client)))
}

/// The testbed kubeconfig's API server address (its first cluster's `server`, an
/// `https://IP:PORT` URL) and the same kubeconfig pointing at `proxy` instead, as JSON
/// (which every kubeconfig reader takes as YAML).
pub fn redirect_kubeconfig(text: &str, proxy: SocketAddr) -> anyhow::Result<(SocketAddr, String)> {
    let mut cfg: serde_json::Value =
        serde_saphyr::from_str(text).map_err(|e| anyhow::anyhow!("the kubeconfig: {e}"))?;
    let clusters = cfg
        .get_mut("clusters")
        .and_then(|c| c.as_array_mut())
        .filter(|c| !c.is_empty())
        .ok_or_else(|| anyhow::anyhow!("the kubeconfig: no clusters"))?;
    let mut upstream = None;
    for c in clusters.iter_mut() {
        let server = c
            .pointer_mut("/cluster/server")
            .ok_or_else(|| anyhow::anyhow!("the kubeconfig: a cluster without cluster.server"))?;
        let url = server.as_str().unwrap_or_default().to_string();
        let addr: SocketAddr = url
            .strip_prefix("https://")
            .map(|a| a.trim_end_matches('/'))
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| {
                anyhow::anyhow!("the kubeconfig: cluster.server {url:?} is not https://IP:PORT")
            })?;
        upstream.get_or_insert(addr);
        *server = serde_json::Value::String(format!("https://{proxy}"));
    }
    let upstream = upstream.ok_or_else(|| anyhow::anyhow!("the kubeconfig: no clusters"))?;
    Ok((upstream, serde_json::to_string_pretty(&cfg)?))
}

#[cfg(test)]
mod tests;
