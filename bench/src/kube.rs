//! `phalanx-bench kube`: create→bound throughput and latency on the testbed (a real
//! kube-apiserver with kwok nodes), for `phalanx serve` (1 or more replicas, started here) or
//! for a scheduler already running (the upstream kube-scheduler of `testbed up
//! --kube-scheduler`, which places pods whose schedulerName is `default-scheduler`), for
//! kube-scheduler's native gang scheduling (`--scheduler native-gang`,
//! [`crate::native_gang`]: the same gangs as Workload/PodGroup objects), or for the trivial
//! binder (`--scheduler trivial`, [`crate::trivial`]: round-robin binds with no checks, the
//! ceiling a client at that QPS can reach).
//!
//! A pod's latency runs from the moment its create request was sent to the moment the
//! bench's own watch first shows it with a `nodeName`. Throughput is pods / (last bind −
//! first create sent).

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::core::DynamicObject;
use kube::runtime::watcher;
use phalanx_scheduler::cluster::kube::{TokenBucket, make_client, volcano_resource};
use phalanx_scheduler::manifest::volcano::crd::{pod_group_crd, queue_crd};
use phalanx_scheduler::shard::{ShardMap, ShardingConfig};
use serde_json::json;

use crate::cpu::{self, CpuMeter};
use crate::native_gang;
use crate::rss::{self, RssSampler};
use crate::trivial;

/// What `--scheduler` names: who binds the pods, and how their gangs are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// `phalanx serve`, started here; gangs are Volcano PodGroups.
    Phalanx,
    /// The bench's own round-robin binder ([`crate::trivial`]); no gangs.
    Trivial,
    /// kube-scheduler with the GenericWorkload gate, already running; gangs are
    /// `scheduling.k8s.io/v1beta1` PodGroups of one Workload ([`crate::native_gang`]).
    NativeGang,
    /// A scheduler already running, by the schedulerName it places; no gangs.
    Running(String),
}

/// How a gang is written for the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GangApi {
    /// A `scheduling.volcano.sh/v1beta1` PodGroup (`minMember`); each pod names it in the
    /// `scheduling.k8s.io/group-name` annotation.
    Volcano,
    /// A `scheduling.k8s.io/v1beta1` PodGroup (`schedulingPolicy.gang.minCount`); each pod
    /// names it in `spec.schedulingGroup.podGroupName`. Made from `template` of the
    /// namespace's Workload ([`native_gang::WORKLOAD`]).
    Native { template: &'static str },
}

impl Mode {
    pub const NATIVE_GANG: &str = "native-gang";

    pub fn parse(scheduler: &str) -> Mode {
        match scheduler {
            "phalanx" => Mode::Phalanx,
            "trivial" => Mode::Trivial,
            Self::NATIVE_GANG => Mode::NativeGang,
            other => Mode::Running(other.to_string()),
        }
    }

    /// The pods' schedulerName.
    pub fn scheduler_name(&self) -> &str {
        match self {
            Mode::Phalanx => "phalanx",
            Mode::Trivial => trivial::TRIVIAL_SCHEDULER,
            Mode::NativeGang => "default-scheduler",
            Mode::Running(name) => name,
        }
    }

    pub fn gangs(&self) -> Option<GangApi> {
        match self {
            Mode::Phalanx => Some(GangApi::Volcano),
            Mode::NativeGang => Some(GangApi::Native {
                template: native_gang::TEMPLATE,
            }),
            Mode::Trivial | Mode::Running(_) => None,
        }
    }
}

/// A bench pod: 1 cpu and 1 Gi (and `gpus` GPUs), requests equal to limits, in gang
/// `gang` when it has one, written as `api` expects. JSON, not k8s-openapi's `Pod`, which
/// has no `schedulingGroup` yet.
pub fn pod_json(
    name: &str,
    scheduler_name: &str,
    gang: Option<(GangApi, &str)>,
    gpus: i64,
) -> serde_json::Value {
    let mut requests = json!({"cpu": "1", "memory": "1Gi"});
    if gpus > 0 {
        requests["nvidia.com/gpu"] = json!(gpus.to_string());
    }
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"schedulerName": scheduler_name,
            "containers": [{"name": "main", "image": "bench:fake",
                "resources": {"requests": requests.clone(), "limits": requests}}]},
    });
    match gang {
        Some((GangApi::Volcano, group)) => {
            pod["metadata"]["annotations"] = json!({"scheduling.k8s.io/group-name": group});
        }
        Some((GangApi::Native { .. }, group)) => {
            pod["spec"]["schedulingGroup"] = json!({"podGroupName": group});
        }
        None => {}
    }
    pod
}

/// The API of the PodGroups of `api`.
pub fn pod_group_api(client: &kube::Client, ns: &str, api: GangApi) -> Api<DynamicObject> {
    let resource = match api {
        GangApi::Volcano => volcano_resource("PodGroup", "podgroups"),
        GangApi::Native { .. } => native_gang::pod_group_resource(),
    };
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// One gang of `min` pods, in `queue` when given (Volcano only; the native API has none).
pub fn pod_group_json(
    api: GangApi,
    ns: &str,
    name: &str,
    min: usize,
    queue: Option<&str>,
) -> serde_json::Value {
    match api {
        GangApi::Volcano => {
            let mut spec = json!({"minMember": min});
            if let Some(q) = queue {
                spec["queue"] = json!(q);
            }
            json!({
                "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                "metadata": {"name": name, "namespace": ns},
                "spec": spec,
            })
        }
        GangApi::Native { template } => native_gang::pod_group(ns, name, template, min),
    }
}

/// Pods as dynamic objects, so that fields k8s-openapi lacks are sent as written.
pub fn pods_dynamic(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        ns,
        &kube::core::ApiResource::erase::<Pod>(&()),
    )
}

#[derive(Clone, Debug)]
pub struct KubeBench {
    pub kubeconfig: PathBuf,
    /// `phalanx` (started here) or the schedulerName of a scheduler already running.
    pub scheduler: String,
    pub replicas: u32,
    pub pods: usize,
    pub gang: usize,
    pub gpus_per_pod: i64,
    pub kube_qps: f64,
    pub kube_burst: u32,
    /// `serve --bind-workers`.
    pub bind_workers: usize,
    /// `serve --max-pods-per-cycle` (`None`: serve's default).
    pub max_pods_per_cycle: Option<usize>,
    pub period_ms: u64,
    pub phalanx: PathBuf,
    pub timeout: Duration,
    pub create_concurrency: usize,
    /// `serve --shards`; above 1 every replica schedules the shards it owns and the
    /// replicas run the 2PC coordinator service between them.
    pub shards: u32,
    /// Queues the gangs are spread over, round-robin. A queue is scheduled by the owner of
    /// its shard, so scale-out needs at least one queue per shard.
    pub queues: usize,
    /// A scheduler already running whose memory to sample (kube-scheduler's pid); the
    /// replicas started here are sampled without it.
    pub rss_pid: Option<u32>,
}

/// The processes this bench started that are running now (replicas, and the suite's
/// kube-scheduler): an interrupted suite stops them on its way out, since it exits
/// without running their `Drop`.
static RUNNING: Mutex<Vec<u32>> = Mutex::new(Vec::new());

pub fn register_child(pid: u32) {
    RUNNING.lock().unwrap_or_else(|e| e.into_inner()).push(pid);
}

pub fn unregister_child(pid: u32) {
    RUNNING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|p| *p != pid);
}

/// SIGTERM to every process still registered (without waiting: the caller is exiting).
pub fn terminate_children() {
    let pids = std::mem::take(&mut *RUNNING.lock().unwrap_or_else(|e| e.into_inner()));
    for pid in pids {
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
    }
}

/// How long a replica may take to stop on SIGTERM before it is killed: one built with
/// `--features heap-profile` writes its profile then, which takes a while.
const STOP_GRACE: Duration = Duration::from_secs(120);

/// A scheduler process this bench started (a phalanx replica, the suite's
/// kube-scheduler): registered while it runs, so that an interrupted suite stops it, and
/// stopped when dropped with SIGTERM, as Kubernetes stops a pod (so that it exits through
/// its `main`), then killed after `grace`.
#[derive(Debug)]
pub struct Stoppable {
    child: Child,
    grace: Duration,
}

impl Stoppable {
    pub fn new(child: Child, grace: Duration) -> Stoppable {
        register_child(child.id());
        Stoppable { child, grace }
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status, once it has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for Stoppable {
    fn drop(&mut self) {
        unregister_child(self.child.id());
        let term = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        if term.is_ok_and(|s| s.success()) {
            let deadline = Instant::now() + self.grace;
            while Instant::now() < deadline {
                if self.exited().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn ready(addr: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text.starts_with("HTTP/1.1 200")
}

fn peers_flag(ids: &[u64], ports: &[u16]) -> String {
    ids.iter()
        .zip(ports)
        .map(|(id, p)| format!("{id}=127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The flags that make the replicas multi-active: the shard count, their Leases in the
/// bench's namespace and, with more than one replica, the coordinator service each serves.
fn shard_flags(b: &KubeBench, ns: &str, ids: &[u64], coord: &[u16], id: u64) -> Vec<String> {
    if b.shards <= 1 {
        return Vec::new();
    }
    let mut flags = vec![
        "--shards".to_string(),
        b.shards.to_string(),
        "--lease-namespace".to_string(),
        ns.to_string(),
    ];
    if ids.len() > 1 {
        let at = ids.iter().position(|i| *i == id).expect("id is one of ids");
        flags.extend([
            "--coord-listen".to_string(),
            format!("127.0.0.1:{}", coord[at]),
            "--coord-peers".to_string(),
            peers_flag(ids, coord),
        ]);
    }
    flags
}

pub(crate) fn start_phalanx(b: &KubeBench, dir: &Path, ns: &str) -> Result<Vec<Stoppable>> {
    let ids: Vec<u64> = (1..=u64::from(b.replicas.max(1))).collect();
    let mut raft = Vec::new();
    let mut coord = Vec::new();
    for _ in &ids {
        raft.push(free_port()?);
        coord.push(free_port()?);
    }
    let peers = peers_flag(&ids, &raft);
    let mut out = Vec::new();
    let mut https = Vec::new();
    for (id, port) in ids.iter().zip(&raft) {
        let http: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let log = std::fs::File::create(dir.join(format!("serve-{id}.log")))?;
        let child = Command::new(&b.phalanx)
            .args(["serve", "--id", &id.to_string()])
            .args(["--listen", &format!("127.0.0.1:{port}"), "--peers", &peers])
            .arg("--data-dir")
            .arg(dir.join(format!("data-{id}")))
            .args(["--http", &http.to_string()])
            .arg("--kubeconfig")
            .arg(&b.kubeconfig)
            .args(["--period-ms", &b.period_ms.to_string()])
            .args(["--kube-qps", &b.kube_qps.to_string()])
            .args(["--kube-burst", &b.kube_burst.to_string()])
            .args(["--bind-workers", &b.bind_workers.to_string()])
            .args(
                b.max_pods_per_cycle
                    .map(|n| ["--max-pods-per-cycle".to_string(), n.to_string()])
                    .into_iter()
                    .flatten(),
            )
            .args(shard_flags(b, ns, &ids, &coord, *id))
            // All replicas on 127.0.0.1 of one machine, measured for scheduling
            // throughput; TLS on the ledger is covered by the testbed e2e.
            .arg("--insecure-plaintext")
            .env(
                "PHALANX_LOG",
                std::env::var("PHALANX_LOG").unwrap_or_else(|_| "warn,openraft=error".into()),
            )
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("starting {}", b.phalanx.display()))?;
        out.push(Stoppable::new(child, STOP_GRACE));
        https.push(http);
    }
    let start = Instant::now();
    while !https.iter().all(|a| ready(*a)) {
        if start.elapsed() > Duration::from_secs(60) {
            bail!(
                "the phalanx replicas were not ready within 60 s (logs in {})",
                dir.display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(out)
}

/// Creates a namespace of its own for one run, `PREFIX-<ms since the epoch>`, and returns its
/// name: runs on the same testbed never see each other's objects.
pub(crate) async fn create_run_namespace(client: &kube::Client, prefix: &str) -> Result<String> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis();
    let ns = format!("{prefix}-{stamp}");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
        )
        .await
        .with_context(|| format!("creating namespace {ns}"))?;
    Ok(ns)
}

pub(crate) async fn install_crds(client: &kube::Client) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in [pod_group_crd()?, queue_crd()?] {
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        let name = crd.metadata.name.clone().unwrap_or_default();
        let start = Instant::now();
        loop {
            let got = api.get(&name).await?;
            let established = got
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            if start.elapsed() > Duration::from_secs(30) {
                bail!("CRD {name} not Established after 30 s");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

/// `count` queue names (`bench-q…`), picked so that every shard homes the same number of
/// them (a queue is scheduled by its shard's owner; names hash to shards unevenly).
fn balanced_queue_names(count: usize, shards: u32) -> Result<Vec<String>> {
    let map = ShardMap::new(ShardingConfig {
        shards: shards.max(1),
        ..ShardingConfig::default()
    })?;
    let per_shard = count.div_ceil(shards.max(1) as usize);
    let mut homed = vec![0usize; shards.max(1) as usize];
    let mut names = Vec::with_capacity(count);
    // Bounded: each shard is hit by about 1/shards of the candidates.
    for i in 0..count.saturating_mul(64).max(64) {
        if names.len() == count {
            break;
        }
        let name = format!("bench-q{i}");
        let shard = map.shard_of_queue(&name) as usize;
        if homed[shard] < per_shard {
            homed[shard] += 1;
            names.push(name);
        }
    }
    if names.len() < count {
        bail!("could not pick {count} queue names balanced over {shards} shards");
    }
    Ok(names)
}

async fn create_queues(client: &kube::Client, names: &[String]) -> Result<()> {
    let api: Api<DynamicObject> =
        Api::all_with(client.clone(), &volcano_resource("Queue", "queues"));
    for name in names {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": name},
            "spec": {"weight": 1, "reclaimable": true},
        }))?;
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The processes whose CPU a run reports: the scheduler under test (every phalanx replica,
/// or the `--rss-pid` process) as `scheduler`, each testbed process by its name, and this
/// bench (it creates the pods, watches them and, for the trivial binder, binds them).
fn cpu_groups(replicas: &[Stoppable], other_scheduler: Option<u32>) -> Vec<(String, u32)> {
    let scheduler: Vec<u32> = replicas
        .iter()
        .map(Stoppable::id)
        .chain(other_scheduler)
        .collect();
    let mut groups: Vec<(String, u32)> = scheduler
        .iter()
        .map(|&pid| (CPU_SCHEDULER.to_string(), pid))
        .collect();
    groups.extend(
        cpu::testbed_processes()
            .into_iter()
            .filter(|(_, pid)| !scheduler.contains(pid)),
    );
    groups.push((CPU_BENCH.to_string(), std::process::id()));
    groups
}

/// The CPU groups of the scheduler under test and of this bench.
pub const CPU_SCHEDULER: &str = "scheduler";
pub const CPU_BENCH: &str = "phalanx-bench";

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// One `kube` run: the table's row and the scheduler's memory.
#[derive(Debug, Clone)]
pub struct KubeOutcome {
    pub label: String,
    pub nodes: usize,
    pub pods: usize,
    /// PodGroups created (phalanx only).
    pub gangs: Option<usize>,
    pub kube_qps: f64,
    pub kube_burst: u32,
    pub created_in: Duration,
    pub bound: usize,
    /// First create sent → last pod seen bound.
    pub span: Duration,
    pub pods_per_s: f64,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
    pub rss: Option<rss::RssReport>,
    /// CPU time of the run's processes from the first create to the last bind.
    pub cpu: Option<cpu::CpuReport>,
}

impl KubeOutcome {
    pub const HEADER: &str = "| scheduler | pods | gangs | kube qps/burst | created in | bound | all bound after | pods/s | p50 | p99 | max |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|";

    pub fn markdown(&self) -> String {
        format!(
            "| {} | {} | {} | {}/{} | {:.1} s | {} | {:.1} s | {:.0} | {:.2} s | {:.2} s | {:.2} s |",
            self.label,
            self.pods,
            self.gangs
                .map_or_else(|| "-".to_string(), |g| g.to_string()),
            self.kube_qps,
            self.kube_burst,
            self.created_in.as_secs_f64(),
            self.bound,
            self.span.as_secs_f64(),
            self.pods_per_s,
            self.p50.as_secs_f64(),
            self.p99.as_secs_f64(),
            self.max.as_secs_f64(),
        )
    }
}

/// The subcommand: one run, its table, and an error when not every pod was bound.
pub fn run(b: &KubeBench) -> Result<()> {
    let o = measure(b)?;
    println!("{}", KubeOutcome::HEADER);
    println!("{}", o.markdown());
    if let Some(r) = o.rss {
        println!(
            "\n| scheduler | nodes | pods | RSS when all were bound, MiB (per replica) | largest RSS during the run, MiB | samples |"
        );
        println!("|---|---:|---:|---:|---:|---:|");
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {} |",
            o.label, o.nodes, o.bound, r.end_mib, r.peak_mib, r.samples
        );
    }
    if let Some(c) = &o.cpu {
        println!(
            "\nCPU from the first create to the last bind: {}",
            c.summary()
        );
    }
    if o.bound < b.pods {
        bail!(
            "only {} of {} pods were bound within {} s",
            o.bound,
            b.pods,
            b.timeout.as_secs()
        );
    }
    Ok(())
}

/// Pods a cleanup request deletes at most: each pod is labelled with its chunk
/// ([`CHUNK_LABEL`]) and each chunk goes in one request (one request for all 100,000 pods
/// of a 5,000-node run lost its connection, and one request a pod went at 53 pods/s).
const DELETE_CHUNK: usize = 5_000;
const CHUNK_LABEL: &str = "phalanx-bench/chunk";

/// Creates the workload on the testbed, waits for the binds (or `b.timeout`), samples the
/// scheduler's memory, and deletes what it created: a run the suite can call in-process.
pub fn measure(b: &KubeBench) -> Result<KubeOutcome> {
    let mut outcomes = measure_waves(b, &[b.pods], AfterRun::CleanUp)?;
    outcomes.pop().context("a run of one wave measured nothing")
}

/// What a run leaves on the testbed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterRun {
    /// Deletes its pods, gangs and queues, so that the next run starts empty.
    CleanUp,
    /// Leaves them (the scheduler is stopped all the same): for a testbed that goes down
    /// next. Deleting 100,000 pods took 15 minutes here (5,000 in 45 s a request), longer
    /// than binding them.
    Leave,
}

/// [`measure`] with the workload created in waves: the cluster grows to `sizes[0]` pods,
/// then to `sizes[1]`, and so on, each wave created once the one before it was bound (or
/// timed out, `b.timeout` after its first create). A wave's outcome is read when its pods
/// are bound: its RSS then is the scheduler's at that many pods, and its largest RSS the
/// largest during that wave. One run of 20,000 then 100,000 pods measures both sizes
/// with 100,000 binds and one clean-up instead of 120,000 and two (the suite's memory
/// part). `sizes` increase, and each but the last is a whole number of gangs.
pub fn measure_waves(b: &KubeBench, sizes: &[usize], after: AfterRun) -> Result<Vec<KubeOutcome>> {
    check_waves(sizes, b.gang).map_err(|e| anyhow!("pod counts {sizes:?}: {e}"))?;
    let run = Run::start(b)?;
    let mut outcomes = Vec::with_capacity(sizes.len());
    let mut from = 0;
    for &to in sizes {
        let o = run.wave(from, to, *sizes.last().unwrap_or(&to))?;
        // Said before the clean-up, which takes minutes at 100,000 pods: a run stopped
        // then keeps its figures (one at 5,000 nodes × 100,000 pods lost them that way).
        eprintln!("measured: {}", summary(&o));
        outcomes.push(o);
        from = to;
    }
    run.finish(from, after)?;
    Ok(outcomes)
}

/// Pod counts a run can grow through in waves: at least one, increasing, each but the last
/// a whole number of gangs. The problem, for the caller to prefix with what it read.
pub fn check_waves(sizes: &[usize], gang: usize) -> std::result::Result<(), String> {
    if sizes.is_empty() {
        return Err("no pod count to measure".into());
    }
    let mut before = 0;
    for (i, &n) in sizes.iter().enumerate() {
        if n <= before {
            return Err(format!(
                "{n} does not exceed the count before it ({before})"
            ));
        }
        if i + 1 < sizes.len() && !n.is_multiple_of(gang.max(1)) {
            return Err(format!("{n} is not a whole number of gangs of {gang}"));
        }
        before = n;
    }
    Ok(())
}

fn summary(o: &KubeOutcome) -> String {
    format!(
        "{} of {} pods bound, {:.0} pods/s, p50 {:.2} s, RSS {}; CPU: {}",
        o.bound,
        o.pods,
        o.pods_per_s,
        o.p50.as_secs_f64(),
        o.rss.map_or_else(
            || "not sampled".to_string(),
            |r| format!(
                "{:.0} MiB at the end, {:.0} MiB largest",
                r.end_mib, r.peak_mib
            )
        ),
        o.cpu
            .as_ref()
            .map_or_else(|| "not measured".to_string(), cpu::CpuReport::summary)
    )
}

/// What a run set up on the testbed, and the samplers watching it.
struct Run<'a> {
    b: &'a KubeBench,
    rt: tokio::runtime::Runtime,
    client: kube::Client,
    ns: String,
    mode: Mode,
    label: String,
    queues: Vec<String>,
    /// The trivial binder's task and counts (`--scheduler trivial`).
    binder: Option<(tokio::task::JoinHandle<()>, Arc<trivial::BinderCounts>)>,
    replicas: Vec<Stoppable>,
    node_count: usize,
    rss: rss::Background,
    /// When the bench's own watch first saw each pod bound.
    bound_at: Arc<Mutex<HashMap<String, Instant>>>,
    watch: tokio::task::JoinHandle<()>,
    /// The replicas' logs and data, removed at the end unless kept.
    _dir: Option<tempfile::TempDir>,
}

impl<'a> Run<'a> {
    fn start(b: &'a KubeBench) -> Result<Run<'a>> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let client = rt.block_on(make_client(Some(&b.kubeconfig))).map_err(|e| {
            anyhow!("{e}; is the testbed up? (deploy/testbed/testbed up --nodes 500)")
        })?;
        let mode = Mode::parse(&b.scheduler);
        rt.block_on(install_crds(&client))?;
        if mode == Mode::NativeGang {
            rt.block_on(native_gang::check_served(&client))?;
        }
        let ns = rt.block_on(create_run_namespace(&client, "bench"))?;
        let temp = tempfile::Builder::new()
            .prefix("phalanx-bench-")
            .tempdir()?;
        // PHALANX_BENCH_KEEP_LOGS=1 keeps the replicas' logs and data after the run.
        let (dir, temp) = if std::env::var_os("PHALANX_BENCH_KEEP_LOGS").is_some() {
            let kept = temp.keep();
            eprintln!("replica logs in {}", kept.display());
            (kept, None)
        } else {
            (temp.path().to_path_buf(), Some(temp))
        };
        let binder = if mode == Mode::Trivial {
            let nodes = rt.block_on(trivial::node_names(&client))?;
            let counts: Arc<trivial::BinderCounts> = Arc::default();
            let limiter = Arc::new(TokenBucket::new(b.kube_qps, b.kube_burst));
            let task = rt.spawn(trivial::run(
                client.clone(),
                ns.clone(),
                nodes,
                limiter,
                b.bind_workers,
                counts.clone(),
            ));
            Some((task, counts))
        } else {
            None
        };
        let replicas = if mode == Mode::Phalanx {
            start_phalanx(b, &dir, &ns)?
        } else {
            Vec::new()
        };
        let node_count = rt.block_on(trivial::node_names(&client))?.len();
        let rss = rss::Background::start(RssSampler::new(
            replicas
                .iter()
                .map(Stoppable::id)
                .chain(b.rss_pid.filter(|_| mode != Mode::Phalanx)),
        ));
        let bound_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let watch = rt.spawn(record_binds(
            Api::namespaced(client.clone(), &ns),
            bound_at.clone(),
        ));
        let queues = if mode == Mode::Phalanx && b.queues > 0 {
            balanced_queue_names(b.queues, b.shards)?
        } else {
            Vec::new()
        };
        rt.block_on(create_queues(&client, &queues))?;
        if let Some(GangApi::Native { template }) = mode.gangs() {
            let workload: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &native_gang::workload_resource());
            let obj: DynamicObject =
                serde_json::from_value(native_gang::workload(&ns, &[(template, b.gang)]))?;
            rt.block_on(workload.create(&PostParams::default(), &obj))
                .with_context(|| format!("creating Workload {ns}/{}", native_gang::WORKLOAD))?;
        }
        let label = run_label(b, &mode, queues.len());
        Ok(Run {
            b,
            rt,
            client,
            ns,
            mode,
            label,
            queues,
            binder,
            replicas,
            node_count,
            rss,
            bound_at,
            watch,
            _dir: temp,
        })
    }

    /// Pods `from..to` (of `total` in the run, which sizes the last gang): their gangs,
    /// the pods, the wait for their binds, and what it took.
    fn wave(&self, from: usize, to: usize, total: usize) -> Result<KubeOutcome> {
        let b = self.b;
        let gang = b.gang.max(1);
        let gang_api = self.mode.gangs();
        if let Some(api) = gang_api {
            self.create_gangs(api, from / gang..to.div_ceil(gang), total)?;
        }
        let cpu = CpuMeter::start(cpu_groups(
            &self.replicas,
            b.rss_pid.filter(|_| self.mode != Mode::Phalanx),
        ));
        let first = Instant::now();
        let sent = self.create_pods(from..to)?;
        let created_in = first.elapsed();
        let deadline = first + b.timeout;
        while self
            .bound_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
            < to
            && Instant::now() <= deadline
        {
            std::thread::sleep(Duration::from_millis(100));
        }
        let rss = self.rss.take_report();
        let cpu = cpu.finish();
        let bound = self
            .bound_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut latencies: Vec<Duration> = sent
            .iter()
            .filter_map(|(name, at)| bound.get(name).map(|b| b.saturating_duration_since(*at)))
            .collect();
        latencies.sort();
        let last = sent
            .iter()
            .filter_map(|(name, _)| bound.get(name))
            .max()
            .copied()
            .unwrap_or(first);
        let span = last.saturating_duration_since(first);
        Ok(KubeOutcome {
            label: self.label.clone(),
            nodes: self.node_count,
            pods: to,
            gangs: gang_api.map(|_| to.div_ceil(gang)),
            kube_qps: b.kube_qps,
            kube_burst: b.kube_burst,
            created_in,
            bound: bound.len(),
            span,
            pods_per_s: latencies.len() as f64 / span.as_secs_f64().max(1e-9),
            p50: percentile(&latencies, 0.5),
            p99: percentile(&latencies, 0.99),
            max: latencies.last().copied().unwrap_or_default(),
            rss,
            cpu: Some(cpu),
        })
    }

    /// The PodGroups `gangs` (of `total` pods in the run): gang `g` holds pods
    /// `g × gang ..`, the last one what is left.
    fn create_gangs(
        &self,
        api: GangApi,
        gangs: std::ops::Range<usize>,
        total: usize,
    ) -> Result<()> {
        let b = self.b;
        let gang = b.gang.max(1);
        let pg_api = pod_group_api(&self.client, &self.ns, api);
        let queues = &self.queues;
        let ns = &self.ns;
        self.rt.block_on(async {
            futures::stream::iter(gangs)
                .map(|g| {
                    let pg_api = pg_api.clone();
                    let min = gang.min(total - g * gang);
                    let queue = (!queues.is_empty()).then(|| queues[g % queues.len()].as_str());
                    let obj = pod_group_json(api, ns, &format!("g{g}"), min, queue);
                    async move {
                        let obj: DynamicObject = serde_json::from_value(obj)?;
                        let name = obj.metadata.name.clone().unwrap_or_default();
                        pg_api
                            .create(&PostParams::default(), &obj)
                            .await
                            .with_context(|| format!("creating PodGroup {name}"))?;
                        anyhow::Ok(())
                    }
                })
                .buffer_unordered(b.create_concurrency.max(1))
                .try_collect::<Vec<_>>()
                .await
        })?;
        Ok(())
    }

    /// Creates pods `range`, each labelled with its clean-up chunk; returns each pod's
    /// name and when its create was sent.
    fn create_pods(&self, range: std::ops::Range<usize>) -> Result<Vec<(String, Instant)>> {
        let b = self.b;
        let gang_api = self.mode.gangs();
        let scheduler_name = self.mode.scheduler_name();
        let pods_create = pods_dynamic(&self.client, &self.ns);
        self.rt.block_on(async {
            futures::stream::iter(range)
                .map(|i| {
                    let api = pods_create.clone();
                    let group = format!("g{}", i / b.gang.max(1));
                    let name = format!("{group}-p{i}");
                    let mut pod = pod_json(
                        &name,
                        scheduler_name,
                        gang_api.map(|a| (a, group.as_str())),
                        b.gpus_per_pod,
                    );
                    pod["metadata"]["labels"] =
                        json!({ CHUNK_LABEL: (i / DELETE_CHUNK).to_string() });
                    async move {
                        let pod: DynamicObject = serde_json::from_value(pod)?;
                        let at = Instant::now();
                        api.create(&PostParams::default(), &pod)
                            .await
                            .with_context(|| format!("creating pod {name}"))?;
                        anyhow::Ok((name, at))
                    }
                })
                .buffer_unordered(b.create_concurrency.max(1))
                .try_collect()
                .await
        })
    }

    /// Stops the scheduler, then (`AfterRun::CleanUp`) deletes the run's `pods` pods, its
    /// gangs and queues, so that the next run starts empty.
    fn finish(self, pods: usize, after: AfterRun) -> Result<()> {
        self.watch.abort();
        drop(self.rss.finish());
        drop(self.replicas);
        if let Some((task, counts)) = &self.binder {
            task.abort();
            let failed = counts.failed.load(std::sync::atomic::Ordering::Relaxed);
            if failed > 0 {
                eprintln!("the trivial binder's API server refused {failed} binds");
            }
        }
        if after == AfterRun::Leave {
            return Ok(());
        }
        let (rt, client, ns) = (&self.rt, &self.client, &self.ns);
        eprintln!("cleaning up {ns}");
        let pods_api: Api<Pod> = Api::namespaced(client.clone(), ns);
        // kwok removes a deleted pod at once when its grace period is 0.
        let force = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        for chunk in 0..pods.div_ceil(DELETE_CHUNK) {
            let of_chunk = ListParams::default().labels(&format!("{CHUNK_LABEL}={chunk}"));
            if let Err(e) = rt.block_on(pods_api.delete_collection(&force, &of_chunk)) {
                eprintln!(
                    "deleting the pods of {ns} in requests of {DELETE_CHUNK} failed ({e}); deleting them one by one"
                );
                rt.block_on(delete_one_by_one(
                    &pods_api,
                    &force,
                    self.b.create_concurrency,
                ))
                .with_context(|| format!("deleting the pods of {ns}"))?;
                break;
            }
        }
        let gang_api = self.mode.gangs();
        if let Some(api) = gang_api {
            rt.block_on(
                pod_group_api(client, ns, api)
                    .delete_collection(&DeleteParams::default(), &ListParams::default()),
            )?;
        }
        if let Some(GangApi::Native { .. }) = gang_api {
            let workload: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), ns, &native_gang::workload_resource());
            rt.block_on(workload.delete(native_gang::WORKLOAD, &DeleteParams::default()))?;
        }
        let queue_api: Api<DynamicObject> =
            Api::all_with(client.clone(), &volcano_resource("Queue", "queues"));
        for name in &self.queues {
            rt.block_on(queue_api.delete(name, &DeleteParams::default()))?;
        }
        let start = Instant::now();
        while !rt
            .block_on(pods_api.list(&ListParams::default().limit(1)))?
            .items
            .is_empty()
        {
            if start.elapsed() > Duration::from_secs(300) {
                eprintln!("warning: pods of {ns} still present after 300 s");
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Ok(())
    }
}

/// Records when each pod of `api` is first seen with a node.
async fn record_binds(api: Api<Pod>, bound_at: Arc<Mutex<HashMap<String, Instant>>>) {
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()));
    while let Ok(Some(event)) = events.try_next().await {
        let pod = match event {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => p,
            _ => continue,
        };
        let bound = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some_and(|n| !n.is_empty());
        if bound && let Some(name) = pod.metadata.name {
            let now = Instant::now();
            let mut map = bound_at.lock().unwrap_or_else(|e| e.into_inner());
            map.entry(name).or_insert(now);
        }
    }
}

/// The row's name: the scheduler and how it was run.
fn run_label(b: &KubeBench, mode: &Mode, queues: usize) -> String {
    match mode {
        Mode::Phalanx => {
            let mut label = format!("phalanx serve ×{}", b.replicas.max(1));
            if b.shards > 1 {
                label += &format!(", {} shards", b.shards);
            }
            label += &format!(", {} bind workers", b.bind_workers);
            if let Some(n) = b.max_pods_per_cycle {
                label += &format!(", max {n} pods/cycle");
            }
            if queues > 0 {
                label += &format!(", {queues} queues");
            }
            label
        }
        Mode::Trivial => format!(
            "trivial binder (round-robin, no checks), {} bind workers",
            b.bind_workers
        ),
        Mode::NativeGang => {
            "kube-scheduler, native gang (Workload/PodGroup scheduling.k8s.io/v1beta1)".to_string()
        }
        Mode::Running(_) => format!("{} (no gang)", b.scheduler),
    }
}

/// Deletes every pod of `api`'s namespace, `in_flight` requests at once, listing in pages
/// of 1,000; a pod already gone is not an error.
async fn delete_one_by_one(api: &Api<Pod>, params: &DeleteParams, in_flight: usize) -> Result<()> {
    let mut continue_token: Option<String> = None;
    loop {
        let mut lp = ListParams::default().limit(1_000);
        if let Some(t) = &continue_token {
            lp = lp.continue_token(t);
        }
        let page = api.list_metadata(&lp).await?;
        futures::stream::iter(page.items.into_iter().filter_map(|p| p.metadata.name))
            .map(|name| async move {
                match api.delete(&name, params).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                    Err(e) => Err(anyhow::Error::from(e).context(format!("deleting pod {name}"))),
                }
            })
            .buffer_unordered(in_flight.max(1))
            .try_collect::<Vec<()>>()
            .await?;
        continue_token = page.metadata.continue_.filter(|t| !t.is_empty());
        if continue_token.is_none() {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waves_grow_by_whole_gangs_and_a_bad_list_names_the_count() {
        assert!(check_waves(&[20_000, 100_000], 10).is_ok());
        // The last wave may end in a smaller gang; the others may not.
        assert!(check_waves(&[200, 505], 10).is_ok());
        let e = check_waves(&[205, 500], 10).unwrap_err();
        assert!(
            e.contains("205 is not a whole number of gangs of 10"),
            "{e}"
        );
        let e = check_waves(&[500, 500], 10).unwrap_err();
        assert!(
            e.contains("500 does not exceed the count before it (500)"),
            "{e}"
        );
        assert!(check_waves(&[], 10).is_err());
    }

    #[test]
    fn queue_names_are_spread_evenly_over_the_shards() {
        let map = ShardMap::new(ShardingConfig {
            shards: 6,
            ..ShardingConfig::default()
        })
        .expect("valid");
        let names = balanced_queue_names(12, 6).expect("picks");
        assert_eq!(names.len(), 12);
        let mut per_shard = [0usize; 6];
        for n in &names {
            per_shard[map.shard_of_queue(n) as usize] += 1;
        }
        assert_eq!(per_shard, [2; 6], "{names:?}");
    }
}
