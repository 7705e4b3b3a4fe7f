#![allow(dead_code)] // each test binary that includes this module uses a different part of it

//! What the end-to-end tests on the testbed share: the kubeconfig, polling, `phalanx
//! serve` processes and their /metrics, the CRDs, and the summary at the end.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, PostParams};

pub const DEADLINE: Duration = Duration::from_secs(90);

pub type Check = Result<String, String>;

pub fn kubeconfig() -> PathBuf {
    std::env::var_os("PHALANX_E2E_KUBECONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let dir = std::env::var_os("PHALANX_TESTBED_DIR")
                .map_or_else(|| PathBuf::from("/tmp/phalanx-testbed"), PathBuf::from);
            dir.join("kubeconfig")
        })
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate lives in the workspace")
        .to_path_buf()
}

/// Polls `f` every 250 ms until it returns Some, or fails after `deadline` with `what`.
pub fn poll<T>(
    deadline: Duration,
    what: &str,
    mut f: impl FnMut() -> Result<Option<T>, String>,
) -> Result<T, String> {
    let start = Instant::now();
    let mut last = String::new();
    loop {
        match f() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = e,
        }
        if start.elapsed() > deadline {
            let last = if last.is_empty() {
                String::new()
            } else {
                format!(" (last error: {last})")
            };
            return Err(format!("{what}: not after {}s{last}", deadline.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A loopback port for a process started later (below the ephemeral range: see
/// `phalanx_scheduler::ports`).
pub fn free_port() -> u16 {
    phalanx_scheduler::ports::free_loopback_port().expect("a free loopback port")
}

/// GET over plain HTTP; (status code, body).
pub fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| e.to_string())?;
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad response {text:?}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|x| x.1)
        .unwrap_or("")
        .to_string();
    Ok((code, body))
}

/// The `phalanx` binary the tests run: `PHALANX_E2E_BIN` when set (a copy taken right after
/// the build, when several checkouts share one target directory and may overwrite it),
/// else the one cargo built for this test.
pub fn phalanx_bin() -> PathBuf {
    std::env::var_os("PHALANX_E2E_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_phalanx")),
        PathBuf::from,
    )
}

/// One `phalanx serve` process.
pub struct Replica {
    pub id: u64,
    pub http: SocketAddr,
    pub child: Option<Child>,
    pub log: PathBuf,
}

impl Replica {
    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, as Kubernetes stops a pod, and waits for the exit: true if it exited 0.
    pub fn terminate(&mut self) -> bool {
        let Some(mut c) = self.child.take() else {
            return false;
        };
        let sent = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if !sent {
            let _ = c.kill();
        }
        c.wait().is_ok_and(|s| s.success())
    }

    /// Sends `signal` (`STOP`, `CONT`, …) with kill(1): a paused process keeps its pid,
    /// sockets and Lease, as a stalled node or a long GC pause would.
    pub fn signal(&self, signal: &str) -> Result<(), String> {
        let c = self.child.as_ref().ok_or("the replica is not running")?;
        let ok = Command::new("kill")
            .args([&format!("-{signal}"), &c.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(())
            .ok_or_else(|| format!("kill -{signal} replica {} failed", self.id))
    }

    pub fn alive(&self) -> bool {
        self.child.is_some()
    }

    pub fn ready(&self) -> bool {
        matches!(http_get(self.http, "/readyz"), Ok((200, _)))
    }

    fn metrics(&self) -> Result<String, String> {
        http_get(self.http, "/metrics").map(|(_, body)| body)
    }

    pub fn is_leader(&self) -> bool {
        self.metrics()
            .map(|body| body.lines().any(|l| l.trim() == "phalanx_is_leader 1"))
            .unwrap_or(false)
    }

    /// The value on the metric line `name value` (`name` may carry its labels, as
    /// `x{a="b"}`); 0 when absent.
    pub fn counter(&self, name: &str) -> Result<f64, String> {
        Ok(self
            .metrics()?
            .lines()
            .filter_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
            .next()
            .unwrap_or(0.0))
    }

    /// Shard -> epoch of the shards this replica says it owns (`phalanx_shard_epoch` > 0).
    pub fn owned_epochs(&self) -> Result<BTreeMap<u32, u64>, String> {
        Ok(self
            .metrics()?
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix("phalanx_shard_epoch{shard=\"")?;
                let (shard, value) = rest.split_once("\"} ")?;
                let epoch = value.trim().parse::<f64>().ok()? as u64;
                Some((shard.parse().ok()?, epoch)).filter(|(_, e)| *e > 0)
            })
            .collect())
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Three `phalanx serve` replicas (ids 1-3, period 500 ms) with `extra` flags; also
/// returns their ledger addresses (id -> host:port).
pub fn start_replicas(dir: &Path, extra: &[String]) -> (Vec<Replica>, BTreeMap<u64, String>) {
    start_replicas_with(dir, extra, &|_| Vec::new())
}

/// [`start_replicas`], each replica also given `own(id)` (flags that differ per replica).
pub fn start_replicas_with(
    dir: &Path,
    extra: &[String],
    own: &dyn Fn(u64) -> Vec<String>,
) -> (Vec<Replica>, BTreeMap<u64, String>) {
    let raft: BTreeMap<u64, String> = [1u64, 2, 3]
        .iter()
        .map(|id| (*id, format!("127.0.0.1:{}", free_port())))
        .collect();
    let replicas = raft
        .keys()
        .map(|id| {
            let mut flags = extra.to_vec();
            flags.extend(own(*id));
            start_replica(dir, *id, &raft, &flags)
        })
        .collect();
    (replicas, raft)
}

/// `--peers` for the Raft addresses `raft` (id -> host:port).
pub fn peers_flag(raft: &BTreeMap<u64, String>) -> String {
    raft.iter()
        .map(|(id, a)| format!("{id}={a}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `--tls-cert/--tls-key/--tls-ca` for replica `id`: a CA made once in `dir/tls` and a
/// certificate naming the replica (DNS SAN `replica-<id>.phalanx`, docs/security.md),
/// made the first time it is asked for (a restarted replica keeps it), by
/// deploy/tls/make-certs.sh, the one place the project's certificates are made.
pub fn tls_flags(dir: &Path, id: u64) -> Vec<String> {
    let tls = dir.join("tls");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/tls/make-certs.sh");
    let out = Command::new(script)
        .arg(&tls)
        .arg(id.to_string())
        .env("PHALANX_CERT_DAYS", "2")
        .output()
        .expect("deploy/tls/make-certs.sh runs (it needs bash and the openssl CLI)");
    assert!(
        out.status.success(),
        "deploy/tls/make-certs.sh {} {id}: {}",
        tls.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let name = format!("replica-{id}");
    let path = |f: String| tls.join(f).to_string_lossy().into_owned();
    vec![
        "--tls-cert".into(),
        path(format!("{name}.crt")),
        "--tls-key".into(),
        path(format!("{name}.key")),
        "--tls-ca".into(),
        path("ca.crt".into()),
    ]
}

/// The mutual TLS of replica `id`, with the certificate [`tls_flags`] made for it.
pub fn tls_transport(dir: &Path, id: u64) -> phalanx_statestore::Transport {
    tls_flags(dir, id);
    let tls = dir.join("tls");
    let name = format!("replica-{id}");
    let state = phalanx_statestore::TlsState::load(phalanx_statestore::TlsFiles {
        cert: tls.join(format!("{name}.crt")),
        key: tls.join(format!("{name}.key")),
        ca: tls.join("ca.crt"),
    })
    .expect("the testbed's certificates load");
    phalanx_statestore::Transport::Tls(state)
}

/// A ledger client of the replicas at `raft` that speaks their mutual TLS, with the
/// certificate [`tls_flags`] made for replica `as_id` (a member's, so it may propose as
/// well as read).
pub fn ledger_client(
    dir: &Path,
    raft: &BTreeMap<u64, String>,
    as_id: u64,
) -> phalanx_statestore::LedgerClient {
    phalanx_statestore::LedgerClient::new(raft.clone()).with_transport(tls_transport(dir, as_id))
}

/// One `phalanx serve` replica `id` listening at `raft[id]` with `--peers` = all of `raft`,
/// its data in `dir/data-<id>` (kept across restarts), its output appended to
/// `dir/serve-<id>.log`, a new http port, period 500 ms, mutual TLS ([`tls_flags`]) and
/// `flags`.
pub fn start_replica(
    dir: &Path,
    id: u64,
    raft: &BTreeMap<u64, String>,
    flags: &[String],
) -> Replica {
    let http: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let log = dir.join(format!("serve-{id}.log"));
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .expect("log file");
    let err = out.try_clone().expect("log file");
    let child = Command::new(phalanx_bin())
        .args(["serve", "--id", &id.to_string(), "--listen", &raft[&id]])
        .args(["--peers", &peers_flag(raft)])
        .arg("--data-dir")
        .arg(dir.join(format!("data-{id}")))
        .args(["--http", &http.to_string()])
        .arg("--kubeconfig")
        .arg(kubeconfig())
        .args(["--period-ms", "500"])
        .args(tls_flags(dir, id))
        .args(flags)
        .env("PHALANX_LOG", "info,openraft=error")
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .expect("phalanx serve starts");
    Replica {
        id,
        http,
        child: Some(child),
        log,
    }
}

/// Creates the PodGroup, Queue and (for `serve --job-controller`) Job CRDs from
/// deploy/crds/ (already there: fine) and waits until they are Established.
/// What every e2e test opens first: a runtime, a client of the testbed's API server (which
/// must answer), the CRDs, and a fresh namespace `<prefix>-<unix seconds>`. Panics, naming
/// what is missing, when there is no testbed.
pub fn open(prefix: &str) -> (tokio::runtime::Runtime, kube::Client, String) {
    let kc = kubeconfig();
    assert!(
        kc.exists(),
        "e2e: no testbed: {} does not exist. Start one with `deploy/testbed/testbed up --nodes 16 --zones 4` \
         (it needs Go to build kube-apiserver, etcd and kwok: `deploy/testbed/testbed build`)",
        kc.display()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let client = rt
        .block_on(phalanx_scheduler::cluster::kube::make_client(Some(&kc)))
        .unwrap_or_else(|e| panic!("e2e: cannot use the testbed's kubeconfig: {e}"));
    rt.block_on(client.apiserver_version()).unwrap_or_else(|e| {
        panic!(
            "e2e: the testbed's API server does not answer ({e}); is it up? `deploy/testbed/testbed status`"
        )
    });
    install_crds(&rt, &client).unwrap_or_else(|e| panic!("e2e: {e}"));
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let ns = format!("{prefix}-{stamp}");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let object = serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))
        .expect("a namespace object");
    rt.block_on(namespaces.create(&PostParams::default(), &object))
        .unwrap_or_else(|e| panic!("e2e: creating namespace {ns}: {e}"));
    (rt, client, ns)
}

pub fn install_crds(rt: &tokio::runtime::Runtime, client: &kube::Client) -> Result<(), String> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (f, group) in [
        ("podgroups", "scheduling.volcano.sh"),
        ("queues", "scheduling.volcano.sh"),
        ("jobs", "batch.volcano.sh"),
    ] {
        let path = repo_root().join(format!("deploy/crds/{f}.yaml"));
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let crd: CustomResourceDefinition =
            serde_saphyr::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        match rt.block_on(api.create(&PostParams::default(), &crd)) {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(format!("installing {}: {e}", path.display())),
        }
        let name = format!("{f}.{group}");
        poll(
            Duration::from_secs(30),
            &format!("CRD {name} Established"),
            || {
                let crd = rt.block_on(api.get(&name)).map_err(|e| e.to_string())?;
                let established = crd
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                Ok(established.then_some(()))
            },
        )?;
    }
    Ok(())
}

/// Stops the replicas, prints one line per check and the summary, keeps the logs in
/// `$TMPDIR/<logs>`, deletes the namespace's pods, and fails if any check failed.
pub fn finish(
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
    ns: &str,
    replicas: &mut [Replica],
    results: &[(&str, Check)],
    logs: &str,
) {
    for r in replicas.iter_mut() {
        r.kill();
    }
    let mut failed = 0;
    for (name, r) in results {
        match r {
            Ok(detail) => println!("e2e: ok   {name}: {detail}"),
            Err(why) => {
                failed += 1;
                println!("e2e: FAIL {name}: {why}");
            }
        }
    }
    let keep = std::env::temp_dir().join(logs);
    let _ = std::fs::remove_dir_all(&keep);
    let _ = std::fs::create_dir_all(&keep);
    for r in replicas.iter() {
        let _ = std::fs::copy(&r.log, keep.join(format!("serve-{}.log", r.id)));
    }
    println!("e2e: replica logs kept in {}", keep.display());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let _ = rt.block_on(pods.delete_collection(
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
        &ListParams::default(),
    ));
    println!("e2e: {} passed, {failed} failed", results.len() - failed);
    assert!(!results.is_empty(), "no check ran");
    assert_eq!(failed, 0, "e2e checks failed (see the lines above)");
}

/// promtool, when `deploy/testbed/testbed build --promtool` has built it. Without it: None,
/// after saying on stderr that the promtool part of `what` is skipped, unless
/// `PHALANX_REQUIRE_PROMTOOL=1` (CI sets it once promtool is built), which panics instead.
pub fn promtool(what: &str) -> Option<PathBuf> {
    let out = Command::new(repo_root().join("deploy/testbed/testbed"))
        .args(["tool-path", "promtool"])
        .output()
        .expect("the testbed script runs");
    if out.status.success() {
        return Some(PathBuf::from(
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
        ));
    }
    let required = std::env::var_os("PHALANX_REQUIRE_PROMTOOL").is_some_and(|v| v == "1");
    assert!(
        !required,
        "PHALANX_REQUIRE_PROMTOOL=1 but promtool is not built (deploy/testbed/testbed build --promtool)"
    );
    eprintln!(
        "promtool is not built (deploy/testbed/testbed build --promtool); skipping the promtool part of {what}"
    );
    None
}

/// `promtool check metrics <lint flags>` on `text`: (it passed, what it said).
pub fn promtool_check(promtool: &Path, text: &str, lint: &str) -> (bool, String) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .args(lint.split(' '))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("promtool ends");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// The GPU resource the testbed's kwok nodes offer.
pub const GPU: &str = "nvidia.com/gpu";

/// The node a pod is bound to.
pub fn node_of(p: &Pod) -> Option<String> {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty())
}

/// GPUs a pod's containers request.
pub fn gpus_of(p: &Pod) -> i64 {
    p.spec
        .iter()
        .flat_map(|s| &s.containers)
        .filter_map(|c| {
            c.resources
                .as_ref()?
                .requests
                .as_ref()?
                .get(GPU)?
                .0
                .parse::<i64>()
                .ok()
        })
        .sum()
}

/// GPUs held per node by those of `pods` that are bound and not finished.
pub fn gpu_use_of(pods: &[Pod]) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for p in pods {
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            continue;
        }
        if let Some(node) = node_of(p) {
            *out.entry(node).or_insert(0) += gpus_of(p);
        }
    }
    out
}

/// I1 as the API server shows it: an error naming every node over `per_node` GPUs.
pub fn check_no_overcommit(used: &BTreeMap<String, i64>, per_node: i64) -> Result<(), String> {
    let over: Vec<String> = used
        .iter()
        .filter(|(_, used)| **used > per_node)
        .map(|(n, used)| format!("{n}: {used} GPUs of {per_node}"))
        .collect();
    if over.is_empty() {
        Ok(())
    } else {
        Err(format!("nodes over their GPUs: {}", over.join(", ")))
    }
}

/// Creates (or finds, from an earlier run) a Queue named `<prefix>-s<shard>-<k>` whose home
/// shard under `map` is `shard`, and returns its name. Queues are cluster-scoped, so the
/// prefix is the test's namespace.
pub fn queue_homed_on(
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
    map: &phalanx_scheduler::shard::ShardMap,
    prefix: &str,
    shard: u32,
) -> Result<String, String> {
    use phalanx_scheduler::cluster::kube::volcano_resource;
    let name = (0..10_000)
        .map(|k| format!("{prefix}-s{shard}-{k}"))
        .find(|q| map.shard_of_queue(q) == shard)
        .ok_or_else(|| format!("no queue name hashes to shard {shard}"))?;
    let api: Api<kube::core::DynamicObject> =
        Api::all_with(client.clone(), &volcano_resource("Queue", "queues"));
    let obj: kube::core::DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
        "metadata": {"name": name}, "spec": {"weight": 1},
    }))
    .map_err(|e| e.to_string())?;
    match rt.block_on(api.create(&PostParams::default(), &obj)) {
        Ok(_) => Ok(name),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(name),
        Err(e) => Err(format!("creating Queue {name}: {e}")),
    }
}
