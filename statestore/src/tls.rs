//! Mutual TLS for every gRPC surface (Raft, the ledger service, the coordinator service):
//! rustls with the ring provider, one CA that signs every replica's certificate.
//!
//! Identity: the certificate of replica `N` carries the DNS SAN [`replica_name`]`(N)`
//! (`replica-N.phalanx`). A server refuses a client without a certificate signed by the
//! CA (the handshake fails); the Raft service also refuses an RPC whose claimed sender
//! (the vote's leader id) is not named by the caller's certificate ([`cert_names_replica`]);
//! a client verifies that the server it dialled for replica `N` presents a certificate
//! naming `N`. Files are re-read by [`TlsState::reload_if_changed`] (a poll; see
//! [`TlsState::spawn_reloader`]) and every new connection uses the newest good set.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};

/// The DNS SAN that names replica `id` in its certificate.
pub fn replica_name(id: u64) -> String {
    format!("replica-{id}.phalanx")
}

/// The three files of `--tls-cert`, `--tls-key`, `--tls-ca` (PEM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// This replica's certificate chain (leaf first).
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// The CA that signs every replica's certificate.
    pub ca: PathBuf,
}

/// A TLS file that could not be used; the message names the flag and the path.
#[derive(Debug, thiserror::Error)]
#[error("{flag} {}: {why}", path.display())]
pub struct TlsError {
    /// The flag that named the file.
    pub flag: &'static str,
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub why: String,
}

fn err(flag: &'static str, path: &Path, why: impl std::fmt::Display) -> TlsError {
    TlsError {
        flag,
        path: path.to_path_buf(),
        why: why.to_string(),
    }
}

/// The bytes of the three files, compared on each poll to notice a rotation.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Contents {
    cert: Vec<u8>,
    key: Vec<u8>,
    ca: Vec<u8>,
}

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| err(flag, path, format!("cannot read: {e}")))
}

impl TlsFiles {
    fn read(&self) -> Result<Contents, TlsError> {
        Ok(Contents {
            cert: read("--tls-cert", &self.cert)?,
            key: read("--tls-key", &self.key)?,
            ca: read("--tls-ca", &self.ca)?,
        })
    }
}

/// Both rustls configurations built from one set of files.
#[derive(Debug)]
struct Built {
    contents: Contents,
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn build(files: &TlsFiles, contents: Contents) -> Result<Built, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&contents.cert)
        .collect::<Result<_, _>>()
        .map_err(|e| err("--tls-cert", &files.cert, format!("not PEM: {e}")))?;
    if chain.is_empty() {
        return Err(err("--tls-cert", &files.cert, "no CERTIFICATE in the file"));
    }
    let key = || {
        PrivateKeyDer::from_pem_slice(&contents.key)
            .map_err(|e| err("--tls-key", &files.key, format!("no private key: {e}")))
    };
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(&contents.ca) {
        let ca = ca.map_err(|e| err("--tls-ca", &files.ca, format!("not PEM: {e}")))?;
        roots
            .add(ca)
            .map_err(|e| err("--tls-ca", &files.ca, format!("not a CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(err("--tls-ca", &files.ca, "no CERTIFICATE in the file"));
    }
    let roots = Arc::new(roots);
    let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
        .build()
        .map_err(|e| err("--tls-ca", &files.ca, e))?;
    let mut server = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| err("--tls-cert", &files.cert, e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain.clone(), key()?)
        .map_err(|e| {
            err(
                "--tls-key",
                &files.key,
                format!("does not fit the certificate: {e}"),
            )
        })?;
    server.alpn_protocols = vec![b"h2".to_vec()];
    let mut client = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| err("--tls-cert", &files.cert, e))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key()?)
        .map_err(|e| {
            err(
                "--tls-key",
                &files.key,
                format!("does not fit the certificate: {e}"),
            )
        })?;
    client.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Built {
        contents,
        server: Arc::new(server),
        client: Arc::new(client),
    })
}

/// The loaded files and the configurations every new connection uses.
#[derive(Debug)]
pub struct TlsState {
    files: TlsFiles,
    built: RwLock<Arc<Built>>,
}

impl TlsState {
    /// Reads and checks the three files (an error names the flag and the path).
    pub fn load(files: TlsFiles) -> Result<Arc<Self>, TlsError> {
        let built = build(&files, files.read()?)?;
        Ok(Arc::new(Self {
            files,
            built: RwLock::new(Arc::new(built)),
        }))
    }

    fn current(&self) -> Arc<Built> {
        self.built
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Re-reads the files; when their bytes changed and they still make a valid set,
    /// later connections use them (`Ok(true)`). A bad new set is an error and the old one
    /// stays in force: a half-written rotation never takes the replica off the network.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let contents = self.files.read()?;
        if contents == self.current().contents {
            return Ok(false);
        }
        let built = build(&self.files, contents)?;
        *self
            .built
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(built);
        Ok(true)
    }

    /// Polls the files every `every` until the state is dropped.
    pub fn spawn_reloader(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(state) = weak.upgrade() else { return };
                match state.reload_if_changed() {
                    Ok(true) => {
                        tracing::info!(files = ?state.files, "TLS files changed; new connections use them")
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "TLS files changed but cannot be used; keeping the previous ones")
                    }
                }
            }
        })
    }
}

/// How a replica's gRPC surfaces talk: mutual TLS, or plaintext (`--insecure-plaintext`,
/// `phalanx simulate`, in-process tests).
#[derive(Debug, Clone, Default)]
pub enum Transport {
    /// No encryption, nobody authenticated.
    #[default]
    Plaintext,
    /// Mutual TLS with these files.
    Tls(Arc<TlsState>),
}

impl Transport {
    /// True for mutual TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, Self::Tls(_))
    }

    /// A lazily connecting channel to `addr` (`host:port`) for a server that must prove
    /// to be replica `server_id` (under TLS).
    pub fn channel(&self, endpoint: Endpoint, addr: &str, server_id: u64) -> Channel {
        let Self::Tls(state) = self else {
            return endpoint.connect_lazy();
        };
        let state = Arc::clone(state);
        let addr = addr.to_string();
        endpoint.connect_with_connector_lazy(tower::service_fn(move |_uri| {
            let (state, addr) = (Arc::clone(&state), addr.clone());
            async move { connect(&state, &addr, server_id).await }
        }))
    }
}

async fn connect(
    state: &TlsState,
    addr: &str,
    server_id: u64,
) -> std::io::Result<hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<TcpStream>>> {
    let name = ServerName::try_from(replica_name(server_id))
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let tls = TlsConnector::from(state.current().client.clone())
        .connect(name, tcp)
        .await?;
    Ok(hyper_util::rt::TokioIo::new(tls))
}

/// Longest a client may take to finish its handshake; a stalled one only holds its task.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS connections accepted on `listener`, for tonic's `serve_with_incoming`. Each
/// handshake runs in its own task, so a client that stalls never blocks the accept loop; a
/// failed handshake (no certificate, one from another CA) is logged and dropped.
pub fn incoming(
    listener: TcpListener,
    state: Arc<TlsState>,
) -> tokio_stream::wrappers::ReceiverStream<
    std::io::Result<tokio_rustls::server::TlsStream<TcpStream>>,
> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            // Stop (and close the port) as soon as the server drops the stream.
            let accepted = tokio::select! {
                a = listener.accept() => a,
                () = tx.closed() => return,
            };
            let (tcp, peer) = match accepted {
                Ok(c) => c,
                Err(e) => {
                    // EMFILE and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = TlsAcceptor::from(state.current().server.clone());
            let tx = tx.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => {
                        let _ = tx.send(Ok(tls)).await;
                    }
                    Ok(Err(e)) => tracing::warn!(%peer, error = %e, "TLS handshake refused"),
                    Err(_) => tracing::warn!(%peer, "TLS handshake timed out"),
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// Whether the caller's certificate (tonic's `peer_certs`, leaf first) names replica `id`.
/// Under TLS the chain was verified in the handshake; this checks only the name.
pub fn cert_names_replica(certs: Option<&[CertificateDer<'static>]>, id: u64) -> bool {
    let Some(leaf) = certs.and_then(<[_]>::first) else {
        return false;
    };
    let Ok(name) = ServerName::try_from(replica_name(id)) else {
        return false;
    };
    ParsedCertificate::try_from(leaf)
        .is_ok_and(|cert| rustls::client::verify_server_name(&cert, &name).is_ok())
}

/// The DNS SANs of the caller's certificate (leaf first), to name them when the caller is
/// refused; empty without a certificate. Only for messages: [`cert_names_replica`] decides.
pub fn cert_dns_names(certs: Option<&[CertificateDer<'static>]>) -> Vec<String> {
    let Some(leaf) = certs.and_then(<[_]>::first) else {
        return Vec::new();
    };
    webpki::EndEntityCert::try_from(leaf).map_or_else(
        |_| Vec::new(),
        |cert| cert.valid_dns_names().map(str::to_string).collect(),
    )
}

/// Refuses `request` (PERMISSION_DENIED) unless the caller's certificate names one of the
/// replicas `allowed` (`role` says who they are), naming the SANs found and those expected.
/// Every gRPC service of a replica checks callers through this (Raft, the ledger, the
/// 2PC coordinator): a certificate of the CA proves only that the
/// CA issued it, and an operator's or a tool's is signed by the same CA as a replica's.
pub fn require_caller_among<T>(
    request: &Request<T>,
    allowed: &[u64],
    role: &str,
) -> Result<(), Status> {
    // `Request::peer_certs` is compiled only with tonic's own TLS features; `incoming`
    // serves `tokio_rustls` streams, whose connect info carries the same chain.
    let certs = request
        .extensions()
        .get::<TlsConnectInfo<TcpConnectInfo>>()
        .and_then(TlsConnectInfo::peer_certs);
    let certs = certs.as_deref().map(Vec::as_slice);
    if allowed.iter().any(|id| cert_names_replica(certs, *id)) {
        return Ok(());
    }
    let expected: Vec<String> = allowed.iter().map(|id| replica_name(*id)).collect();
    Err(Status::permission_denied(format!(
        "the caller's certificate names the DNS SANs {:?}, not {role} (expected one of {expected:?})",
        cert_dns_names(certs)
    )))
}
