//! Mutual TLS between replicas and clients, with certificates made in the test by the
//! openssl CLI (the testbed needs it already): a group forms and commits over TLS; a
//! peer claiming another replica's id, a client without a certificate, and one signed by
//! another CA are refused; a certificate of the CA that names no member (an operator's)
//! reads but cannot propose; a certificate rotated on disk is used by later connections.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use openraft::{BasicNode, Vote};
use phalanx_proto::raft::raft_service_client::RaftServiceClient;
use phalanx_statestore::expiry::system_clock;
use phalanx_statestore::network::wire;
use phalanx_statestore::{
    ClientConfig, LedgerClient, LedgerCommand, ReplicaConfig, ReplicaHandle, ResourceVec, TlsFiles,
    TlsState, Transport, start_replica_over,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl CLI runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA `<name>.crt/.key` in `dir`.
fn make_ca(dir: &Path, name: &str) {
    let (crt, key) = (format!("{name}.crt"), format!("{name}.key"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &crt,
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign",
        ],
    );
}

/// A leaf `<name>.crt/.key` signed by CA `ca`, naming the replicas `ids`.
fn make_leaf(dir: &Path, ca: &str, name: &str, ids: &[u64]) -> TlsFiles {
    let names: Vec<String> = ids
        .iter()
        .map(|id| phalanx_statestore::tls::replica_name(*id))
        .collect();
    make_leaf_for(dir, ca, name, &names)
}

/// A leaf `<name>.crt/.key` signed by CA `ca` whose DNS SANs are `dns_names`.
fn make_leaf_for(dir: &Path, ca: &str, name: &str, dns_names: &[String]) -> TlsFiles {
    let sans: Vec<String> = dns_names.iter().map(|n| format!("DNS:{n}")).collect();
    let ext = format!(
        "subjectAltName={}\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n",
        sans.join(",")
    );
    std::fs::write(dir.join(format!("{name}.ext")), ext).expect("write ext");
    let (crt, key, csr) = (
        format!("{name}.crt"),
        format!("{name}.key"),
        format!("{name}.csr"),
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            &format!("/CN={name}"),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
    TlsFiles {
        cert: dir.join(crt),
        key: dir.join(key),
        ca: dir.join(format!("{ca}.crt")),
    }
}

fn tls(files: &TlsFiles) -> Transport {
    Transport::Tls(TlsState::load(files.clone()).expect("TLS files load"))
}

async fn start(id: u64, dir: &Path, transport: Transport) -> ReplicaHandle {
    let data = dir.join(format!("data-{id}"));
    std::fs::create_dir_all(&data).expect("data dir");
    let addr = "127.0.0.1:0".parse().expect("addr");
    start_replica_over(
        id,
        &data,
        addr,
        &ReplicaConfig::default(),
        system_clock(),
        transport,
    )
    .await
    .expect("replica starts")
}

/// A one-replica group (replica 1), led by itself.
async fn single(dir: &Path, files: &TlsFiles) -> ReplicaHandle {
    single_over(dir, tls(files)).await
}

async fn single_over(dir: &Path, transport: Transport) -> ReplicaHandle {
    let r = start(1, dir, transport).await;
    r.initialize(BTreeMap::from([(1, r.node())]))
        .await
        .expect("initialize");
    r.wait_for(Duration::from_secs(10), "leader", |m| {
        m.current_leader == Some(1)
    })
    .await
    .expect("leads");
    r
}

fn client(id: u64, addr: &str, transport: Transport) -> LedgerClient {
    let config = ClientConfig {
        max_attempts: 3,
        rpc_timeout: Duration::from_secs(2),
        ..ClientConfig::default()
    };
    LedgerClient::with_config([(id, addr.to_string())], config).with_transport(transport)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_form_a_group_and_commit_over_mutual_tls() {
    let dir = tempfile::tempdir().expect("tempdir");
    make_ca(dir.path(), "ca");
    let mut replicas = Vec::new();
    for id in 1..=3 {
        let files = make_leaf(dir.path(), "ca", &format!("r{id}"), &[id]);
        replicas.push(start(id, dir.path(), tls(&files)).await);
    }
    let members: BTreeMap<u64, BasicNode> = replicas.iter().map(|r| (r.id(), r.node())).collect();
    replicas[0].initialize(members.clone()).await.expect("init");
    let admin = make_leaf(dir.path(), "ca", "admin", &[1, 2, 3]);
    let client = LedgerClient::new(members.iter().map(|(id, n)| (*id, n.addr.clone())))
        .with_transport(tls(&admin));
    let node = LedgerCommand::UpsertNode {
        node: "gpu-0".to_string(),
        allocatable: ResourceVec::from_pairs([("cpu", 32_000), ("nvidia.com/gpu", 4)]),
        shard: 0,
    };
    client.propose_one(node).await.expect("committed over TLS");
    for r in &replicas {
        r.wait_for(Duration::from_secs(10), "applied", |m| {
            m.last_applied.is_some_and(|l| l.index >= 2)
        })
        .await
        .expect("every replica applies the entry");
    }
}

/// A Vote RPC claiming `claimed`, sent with `files`' certificate to replica 1.
async fn vote_as(
    addr: &str,
    files: &TlsFiles,
    claimed: u64,
) -> Result<phalanx_proto::raft::RaftReply, tonic::Status> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(2));
    let channel = tls(files).channel(endpoint, addr, 1);
    let mut raft = RaftServiceClient::new(channel);
    let req = openraft::raft::VoteRequest::new(Vote::new(1_000, claimed), None);
    let wire = wire::vote::to_wire(&req).expect("encode");
    raft.vote(wire).await.map(tonic::Response::into_inner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_whose_certificate_names_another_replica_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    make_ca(dir.path(), "ca");
    let r1 = single(dir.path(), &make_leaf(dir.path(), "ca", "r1", &[1])).await;
    let addr = r1.addr().to_string();
    let r3 = make_leaf(dir.path(), "ca", "r3", &[3]);
    let forged = vote_as(&addr, &r3, 2)
        .await
        .expect_err("claims 2 with a cert for 3");
    assert_eq!(forged.code(), tonic::Code::PermissionDenied, "{forged}");
    assert!(forged.message().contains("replica-2.phalanx"), "{forged}");
    let term = r1.metrics().current_term;
    assert!(
        term < 1_000,
        "the forged vote never reached Raft (term {term})"
    );
    // The same certificate claiming its own id passes the check (Raft then decides).
    let reply = vote_as(&addr, &r3, 3)
        .await
        .expect("a vote as itself is heard");
    let answer = wire::vote::reply_from_wire(&reply).expect("decodes");
    assert!(answer.is_ok(), "Raft answered the vote: {answer:?}");
}

fn upsert(node: &str) -> LedgerCommand {
    LedgerCommand::UpsertNode {
        node: node.to_string(),
        allocatable: ResourceVec::from_pairs([("cpu", 1_000)]),
        shard: 0,
    }
}

/// The names of the nodes in replica 1's ledger, read with `files`' certificate.
async fn nodes_read_with(addr: &str, files: &TlsFiles) -> Vec<String> {
    let read = client(1, addr, tls(files)).read().await.expect("reads");
    let state = read.state.expect("the state was asked for");
    state.nodes.keys().cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_certificate_reads_the_ledger_but_cannot_propose() {
    let dir = tempfile::tempdir().expect("tempdir");
    make_ca(dir.path(), "ca");
    let r1 = single(dir.path(), &make_leaf(dir.path(), "ca", "r1", &[1])).await;
    let addr = r1.addr().to_string();
    let operator = make_leaf_for(dir.path(), "ca", "op", &["alice.operators.phalanx".into()]);
    // The refusal names the SAN found and the members' SANs, and nothing is applied.
    let refused = client(1, &addr, tls(&operator))
        .propose_one(upsert("by-operator"))
        .await
        .expect_err("an operator may not propose");
    let why = refused.to_string();
    assert!(
        matches!(refused, phalanx_statestore::ClientError::Rejected(_)),
        "refused before Raft, so not ambiguous: {refused:?}"
    );
    assert!(why.contains("alice.operators.phalanx"), "{why}");
    assert!(why.contains("replica-1.phalanx"), "{why}");
    // The same CA signed a replica's certificate, and the caller may read.
    assert!(nodes_read_with(&addr, &operator).await.is_empty());
    // A member's certificate (replica 1's, as its scheduler holds) proposes.
    let member = make_leaf(dir.path(), "ca", "sched-1", &[1]);
    client(1, &addr, tls(&member))
        .propose_one(upsert("by-member"))
        .await
        .expect("a member proposes");
    assert_eq!(nodes_read_with(&addr, &operator).await, ["by-member"]);
}

/// A Propose to replica 1 at `addr` with `files`' certificate, through the raw gRPC
/// client, so the status code itself is seen.
async fn propose_raw(addr: &str, files: &TlsFiles) -> Result<(), tonic::Status> {
    use phalanx_proto::ledger::ledger_service_client::LedgerServiceClient;
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(2));
    let mut ledger = LedgerServiceClient::new(tls(files).channel(endpoint, addr, 1));
    let batch = phalanx_statestore::LedgerBatch::one(upsert("raw"));
    let request = wire::ledger_batch::to_wire(&batch).expect("encode");
    ledger.propose(request).await.map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_certificate_proposes_only_while_its_replica_is_a_member() {
    let dir = tempfile::tempdir().expect("tempdir");
    make_ca(dir.path(), "ca");
    let r1 = single(dir.path(), &make_leaf(dir.path(), "ca", "r1", &[1])).await;
    let addr = r1.addr().to_string();
    let r2_files = make_leaf(dir.path(), "ca", "r2", &[2]);
    let denied = propose_raw(&addr, &r2_files)
        .await
        .expect_err("replica 2 is not a member yet");
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied}");
    assert!(denied.message().contains("replica-2.phalanx"), "{denied}");
    let r2 = start(2, dir.path(), tls(&r2_files)).await;
    r1.raft()
        .add_learner(2, r2.node(), true)
        .await
        .expect("replica 2 joins as a learner");
    propose_raw(&addr, &r2_files)
        .await
        .expect("a learner's certificate proposes");
}

/// Opens a TLS session to `addr` with `config` and reads what the server sends first: a
/// server that accepted the session sends its HTTP/2 SETTINGS; one that refused the
/// client sends an alert (an error here) or closes.
async fn first_bytes(addr: &str, config: rustls::ClientConfig) -> std::io::Result<usize> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from("replica-1.phalanx").expect("name");
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await?;
    tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await?;
    let mut buf = [0u8; 64];
    tokio::time::timeout(Duration::from_secs(5), tls.read(&mut buf))
        .await
        .map_err(std::io::Error::other)?
}

fn roots(ca: &Path) -> rustls::RootCertStore {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).expect("ca") {
        roots.add(c.expect("pem")).expect("add");
    }
    roots
}

fn client_config(ca: &Path, auth: Option<&TlsFiles>) -> rustls::ClientConfig {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots(ca));
    let mut config = match auth {
        None => builder.with_no_client_auth(),
        Some(f) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(&f.cert)
                    .expect("cert")
                    .collect::<Result<_, _>>()
                    .expect("pem"),
                PrivateKeyDer::from_pem_file(&f.key).expect("key"),
            )
            .expect("client auth"),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_a_certificate_or_with_one_of_another_ca_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    make_ca(dir.path(), "ca");
    make_ca(dir.path(), "other");
    let r1 = single(dir.path(), &make_leaf(dir.path(), "ca", "r1", &[1])).await;
    let addr = r1.addr().to_string();
    let ca = dir.path().join("ca.crt");
    // The control: a client with a certificate of the CA gets the server's SETTINGS.
    let good = make_leaf(dir.path(), "ca", "good", &[7]);
    let n = first_bytes(&addr, client_config(&ca, Some(&good))).await;
    assert!(n.as_ref().is_ok_and(|n| *n > 0), "{n:?}");
    let none = first_bytes(&addr, client_config(&ca, None)).await;
    assert!(
        !none.as_ref().is_ok_and(|n| *n > 0),
        "no certificate: {none:?}"
    );
    let foreign = make_leaf(dir.path(), "other", "foreign", &[1]);
    let n = first_bytes(&addr, client_config(&ca, Some(&foreign))).await;
    assert!(!n.as_ref().is_ok_and(|n| *n > 0), "another CA: {n:?}");
    // Through the ledger client: plaintext to a TLS replica gets nothing.
    let plain = client(1, &addr, Transport::Plaintext);
    plain
        .read()
        .await
        .expect_err("a plaintext client is refused");
    client(1, &addr, tls(&good))
        .read()
        .await
        .expect("a client of the CA reads");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_rotated_on_disk_is_used_by_later_connections() {
    let dir = tempfile::tempdir().expect("tempdir");
    make_ca(dir.path(), "ca");
    let served = make_leaf(dir.path(), "ca", "r1", &[1]);
    let state = TlsState::load(served.clone()).expect("load");
    let r1 = single_over(dir.path(), Transport::Tls(state.clone())).await;
    let addr = r1.addr().to_string();
    let me = tls(&make_leaf(dir.path(), "ca", "me", &[9]));
    client(1, &addr, me.clone())
        .read()
        .await
        .expect("serves as 1");
    assert!(
        !state.reload_if_changed().expect("unchanged"),
        "no change yet"
    );
    // Rotate: the served files now hold a certificate naming replica 5.
    let next = make_leaf(dir.path(), "ca", "next", &[5]);
    std::fs::copy(&next.cert, &served.cert).expect("copy cert");
    std::fs::copy(&next.key, &served.key).expect("copy key");
    assert!(
        state.reload_if_changed().expect("reloads"),
        "the change is seen"
    );
    client(5, &addr, me.clone())
        .read()
        .await
        .expect("serves as 5 now");
    client(1, &addr, me.clone())
        .read()
        .await
        .expect_err("the old certificate is no longer served");
    // A half-written rotation is refused and the last good set stays in force.
    std::fs::write(&served.key, b"garbage").expect("write");
    let e = state.reload_if_changed().expect_err("a bad key");
    assert!(e.to_string().starts_with("--tls-key "), "{e}");
    client(5, &addr, me)
        .read()
        .await
        .expect("still serves as 5");
}

#[test]
fn unreadable_or_wrong_tls_files_are_named_with_their_flag_and_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    make_ca(dir.path(), "ca");
    let good = make_leaf(dir.path(), "ca", "r1", &[1]);
    let missing = PathBuf::from("/nonexistent/tls.key");
    let e = TlsState::load(TlsFiles {
        key: missing.clone(),
        ..good.clone()
    })
    .expect_err("missing key");
    assert!(
        e.to_string()
            .starts_with("--tls-key /nonexistent/tls.key: cannot read"),
        "{e}"
    );
    let e = TlsState::load(TlsFiles {
        ca: good.key.clone(),
        ..good.clone()
    })
    .expect_err("a key as CA");
    assert!(e.to_string().starts_with("--tls-ca "), "{e}");
    let other = make_leaf(dir.path(), "ca", "r2", &[2]);
    let e = TlsState::load(TlsFiles {
        key: other.key,
        ..good
    })
    .expect_err("a key of another certificate");
    assert!(e.to_string().contains("does not fit"), "{e}");
}
