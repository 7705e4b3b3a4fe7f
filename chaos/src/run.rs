//! One chaos run: the namespace, queues and priorities; three replicas; the recorder and
//! the workload; the fault schedule; then the end-state checks against the ledger.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::core::DynamicObject;
use phalanx_scheduler::cluster::kube::volcano_resource;
use phalanx_scheduler::shard::{ShardMap, ShardingConfig};
use phalanx_statestore::LedgerClient;
use phalanx_statestore::ledger::state::PlacementState;
use serde_json::json;

use crate::check::{LedgerPlacement, Violation, check_i3, check_identical};
use crate::faults::{self, Fault, FaultKind};
use crate::fleet::{Fleet, FleetConfig};
use crate::history::{Event, Record, Writer};
use crate::hostile;
use crate::links::Links;
use crate::proxy::{self, Control, Proxy};
use crate::recorder::{self, Clock, Live};
use crate::workload::{self, GangSpec, Generator, PRIORITIES, WorkloadConfig, WorkloadStats};

/// What a run needs.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub seed: u64,
    pub schedule: Vec<Fault>,
    /// Stop injecting once this much time has passed (a soak), even if faults are left.
    pub until: Option<Duration>,
    pub fleet: FleetConfig,
    pub warmup_ms: u64,
    pub interval_ms: u64,
    pub max_in_flight: usize,
    /// Put the API-server proxy between the replicas and kube-apiserver.
    pub api_proxy: bool,
    /// Put the link proxies between the replicas (`src/links.rs`).
    pub link_proxies: bool,
    /// Pods of the `hostile-objects` fault's wide gang.
    pub hostile_wide_pods: u32,
}

/// One fault as injected.
#[derive(Debug, Clone)]
pub struct Injected {
    pub fault: Fault,
    pub victim: u64,
    pub start_ms: u64,
    pub end_ms: u64,
    /// What the API-server proxy did during the fault (empty without a proxy).
    pub note: String,
}

/// What a run produced.
#[derive(Debug)]
pub struct Outcome {
    pub history: Vec<Record>,
    pub injected: Vec<Injected>,
    /// Faults the harness could not inject (no leader, fleet not whole again): failures.
    pub harness_errors: Vec<Violation>,
    pub i3: Vec<Violation>,
    pub i3_note: String,
    /// The replicas' ledgers compared at the end (`check::check_identical`).
    pub identical: Vec<Violation>,
    pub stats: Arc<WorkloadStats>,
    pub api_version: String,
}

/// Shared by the steps of a run.
struct Ctx {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
    ns: String,
    queues: BTreeMap<u32, String>,
    clock: Clock,
    proxy: Option<Proxy>,
}

/// A create that found the object already there is fine.
fn exists_ok(what: &str) -> impl FnOnce(kube::Error) -> anyhow::Result<()> + '_ {
    move |e| match e {
        kube::Error::Api(s) if s.code == 409 => Ok(()),
        e => Err(anyhow::anyhow!("creating {what}: {e}")),
    }
}

/// The namespace, the PriorityClasses, and one Queue per shard (the first name
/// `<ns>-s<shard>-<k>` that hashes to it).
async fn prepare(
    client: &kube::Client,
    ns: &str,
    map: &ShardMap,
) -> anyhow::Result<BTreeMap<u32, String>> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let n: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
    namespaces
        .create(&PostParams::default(), &n)
        .await
        .map(|_| ())
        .or_else(exists_ok("the namespace"))?;
    let classes: Api<PriorityClass> = Api::all(client.clone());
    for (name, value) in PRIORITIES {
        let pc: PriorityClass =
            serde_json::from_value(json!({"metadata": {"name": name}, "value": value}))?;
        classes
            .create(&PostParams::default(), &pc)
            .await
            .map(|_| ())
            .or_else(exists_ok(name))?;
    }
    let api: Api<DynamicObject> =
        Api::all_with(client.clone(), &volcano_resource("Queue", "queues"));
    let mut queues = BTreeMap::new();
    for shard in map.shards() {
        let name = (0..100_000)
            .map(|k| format!("{ns}-s{shard}-{k}"))
            .find(|q| map.shard_of_queue(q) == shard)
            .ok_or_else(|| anyhow::anyhow!("no queue name hashes to shard {shard}"))?;
        let q: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": name}, "spec": {"weight": 1},
        }))?;
        api.create(&PostParams::default(), &q)
            .await
            .map(|_| ())
            .or_else(exists_ok("a Queue"))?;
        queues.insert(shard, name);
    }
    Ok(queues)
}

/// Polls `f` every 100 ms until it holds, or fails after `deadline` naming `what`.
pub fn wait_for(
    deadline: Duration,
    what: &str,
    mut f: impl FnMut() -> bool,
) -> anyhow::Result<Duration> {
    let t = Instant::now();
    while !f() {
        anyhow::ensure!(
            t.elapsed() < deadline,
            "{what}: not within {} s",
            deadline.as_secs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(t.elapsed())
}

/// The fleet is whole: every replica ready and every shard owned by exactly one.
fn whole(fleet: &Fleet) -> bool {
    fleet.all_ready() && fleet.owners().is_some() && fleet.leader().is_some()
}

/// A one-pod, one-GPU gang in the queue of each of `shards`, so that each has work
/// pending when its owner is hit.
fn probe(ctx: &Ctx, shards: &[u32], n: usize) {
    for s in shards {
        probe_gang(ctx, format!("probe-{n:04}-s{s}"), *s, 1, 1);
    }
}

/// A wide gang (6 pods of 4 GPUs, more than one shard's pool: placed by two-phase
/// reservation) in the queue of the first of `shards`, so that their owner coordinates one.
fn cross_shard_probe(ctx: &Ctx, shards: &[u32], n: usize) {
    if let Some(s) = shards.first() {
        probe_gang(ctx, format!("probe-{n:04}-wide-s{s}"), *s, 6, 4);
    }
}

/// A high-priority gang of `pods` pods of `gpus` GPUs in shard `s`'s queue. One that
/// cannot be created only leaves that shard without a probe (for `coordinator-crash`, the
/// workload's own wide gangs may still reach the failpoint).
fn probe_gang(ctx: &Ctx, name: String, s: u32, pods: u32, gpus: u32) {
    let g = GangSpec {
        name,
        queue: ctx.queues[&s].clone(),
        pods,
        gpus,
        priority: "chaos-high",
        run_ms: 1000,
    };
    let _ = ctx
        .rt
        .block_on(workload::create_gang(&ctx.client, &ctx.ns, &g));
}

/// Injects the schedule (or, for a soak, until `until`), each fault on a whole fleet.
fn inject_all(ctx: &Ctx, fleet: &mut Fleet, config: &RunConfig) -> (Vec<Injected>, Vec<Violation>) {
    let started = Instant::now();
    let (mut done, mut errors) = (Vec::new(), Vec::new());
    for (n, f) in config.schedule.iter().enumerate() {
        if config.until.is_some_and(|u| started.elapsed() >= u) {
            break;
        }
        match inject_one(ctx, fleet, f, n, config) {
            Ok(i) => done.push(i),
            Err(e) => {
                errors.push(Violation {
                    invariant: "harness",
                    t_ms: ctx.clock.now_ms(),
                    what: format!("{} #{n}: {e:#}", f.kind.name()),
                });
                // A fleet that did not come back whole makes every later fault meaningless.
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(f.gap_ms));
    }
    (done, errors)
}

fn inject_one(
    ctx: &Ctx,
    fleet: &mut Fleet,
    f: &Fault,
    n: usize,
    config: &RunConfig,
) -> anyhow::Result<Injected> {
    let seed = config.seed;
    wait_for(
        Duration::from_secs(30),
        "the fleet whole before the fault",
        || whole(fleet),
    )?;
    let owners = fleet.owners().unwrap_or_default();
    let victim = faults::pick_victim(fleet, f.kind, seed.wrapping_add(n as u64))?;
    let shards: Vec<u32> = owners
        .iter()
        .filter(|(_, o)| **o == victim || victim == faults::ALL_REPLICAS)
        .map(|(s, _)| *s)
        .collect();
    let control = ctx.proxy.as_ref().map(|p| &*p.control);
    let before = control.map(Control::counts);
    let links_before = fleet.links.as_ref().map(|l| l.counts());
    let start_ms = ctx.clock.now_ms();
    ctx.clock.emit(Event::FaultStart {
        fault: f.kind.name().to_string(),
        detail: f.detail(),
        victim,
        shards: shards.clone(),
    });
    let mut made = String::new();
    let mut told = Ok(());
    let wide = config.hostile_wide_pods;
    let what = faults::inject(fleet, control, victim, f, &mut || {
        if f.kind == FaultKind::HostileObjects {
            let q = &ctx.queues[&0];
            let created = ctx
                .rt
                .block_on(hostile::create(&ctx.client, &ctx.ns, q, n, wide));
            // The replicas keep scheduling meanwhile (probe below, I5 on every shard).
            let within = Duration::from_secs(30);
            let said = hostile::await_told(&ctx.client, &ctx.ns, &created, within);
            made = created.summary();
            match ctx.rt.block_on(said) {
                Ok(said) => made = format!("{made}; {said}"),
                Err(e) => told = Err(e),
            }
        }
        if f.kind == FaultKind::CoordinatorCrash {
            cross_shard_probe(ctx, &shards, n);
        }
        probe(ctx, &shards, n)
    })?;
    if let Err(e) = told {
        anyhow::bail!("hostile objects: the replicas did not tell what they skip: {e}");
    }
    let what = if made.is_empty() { what } else { made };
    if let Some(gone) = fleet.exited_by_themselves().first() {
        anyhow::bail!("{gone} (its log: {})", fleet.log_of(gone.0).display());
    }
    let end_ms = ctx.clock.now_ms();
    let note = match (control, before) {
        (Some(c), Some(b)) if f.kind.through_proxy() => c.counts().since(&b),
        _ => match (&fleet.links, links_before) {
            (Some(l), Some(b)) if f.kind.through_links() => l.counts().since(&b),
            _ => what,
        },
    };
    ctx.clock.emit(Event::FaultEnd {
        fault: f.kind.name().to_string(),
        victim,
    });
    wait_for(
        Duration::from_secs(30),
        "the fleet whole after the fault",
        || whole(fleet),
    )?;
    Ok(Injected {
        fault: f.clone(),
        victim,
        start_ms,
        end_ms,
        note,
    })
}

/// The proxy in front of kube-apiserver and the kubeconfig that points the replicas at
/// it (written into `dir`), from the testbed's kubeconfig and the PKI beside it.
async fn start_proxy(kubeconfig: &Path, dir: &Path) -> anyhow::Result<(Proxy, PathBuf)> {
    let text = std::fs::read_to_string(kubeconfig)
        .map_err(|e| anyhow::anyhow!("{}: {e}", kubeconfig.display()))?;
    let pki = kubeconfig
        .parent()
        .map(|d| d.join("pki"))
        .ok_or_else(|| anyhow::anyhow!("{}: no directory", kubeconfig.display()))?;
    let (server, client) = proxy::testbed_tls(&pki)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let local = listener.local_addr()?;
    let (upstream, redirected) = proxy::redirect_kubeconfig(&text, local)?;
    let up = proxy::Upstream {
        addr: upstream,
        tls: Some(client),
    };
    let p = Proxy::start(listener, up, Some(server))?;
    let path = dir.join("kubeconfig-proxy");
    std::fs::write(&path, redirected).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok((p, path))
}

/// The ledger's placements of the run's namespace.
async fn ledger_placements(
    ledger: &LedgerClient,
    ns: &str,
) -> anyhow::Result<Vec<LedgerPlacement>> {
    let read = ledger
        .read()
        .await
        .map_err(|e| anyhow::anyhow!("reading the ledger: {e}"))?;
    let state = read
        .state
        .ok_or_else(|| anyhow::anyhow!("the ledger read had no state"))?;
    let prefix = format!("{ns}/");
    Ok(state
        .placements
        .into_iter()
        .filter(|(pod, _)| pod.starts_with(&prefix))
        .map(|(pod, p)| LedgerPlacement {
            pod,
            node: p.node,
            state: match p.state {
                PlacementState::Reserved { .. } => "reserved",
                PlacementState::Assumed => "assumed",
                PlacementState::Bound => "bound",
            }
            .to_string(),
        })
        .collect())
}

/// Pod -> node, of the run's namespace, from the API server.
async fn api_pods(
    client: &kube::Client,
    ns: &str,
) -> anyhow::Result<BTreeMap<String, Option<String>>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = pods.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|p| {
            let node = p.spec.and_then(|s| s.node_name).filter(|n| !n.is_empty());
            Some((format!("{ns}/{}", p.metadata.name?), node))
        })
        .collect())
}

/// Runs `check` until it finds nothing or a check that *began* `deadline` or more after
/// the first one has run: the last violations seen (none if it held). Why the start and
/// not the end of a check: a check can take longer than the deadline (a ledger read and a
/// pod list on a loaded machine took over 20 s once), and a deadline met by its end would
/// report a snapshot taken before the replicas had any time to settle (I3 flagged pods
/// deleted 240 ms before it as leaked, seed 1, `--matrix full`).
pub fn settle<V>(
    deadline: Duration,
    elapsed: &mut dyn FnMut() -> Duration,
    check: &mut dyn FnMut() -> Vec<V>,
    pause: &mut dyn FnMut(),
) -> Vec<V> {
    loop {
        let began = elapsed();
        let v = check();
        if v.is_empty() || began >= deadline {
            return v;
        }
        pause();
    }
}

/// I3 until it holds or `deadline` passes (see [`settle`]).
fn settle_i3(ctx: &Ctx, ledger: &LedgerClient, deadline: Duration) -> Vec<Violation> {
    let t = Instant::now();
    let mut check = || {
        let now = ctx.clock.now_ms();
        let v = ctx.rt.block_on(async {
            let placed = ledger_placements(ledger, &ctx.ns).await?;
            let api = api_pods(&ctx.client, &ctx.ns).await?;
            anyhow::Ok(check_i3(&placed, &api, now))
        });
        v.unwrap_or_else(|e| {
            vec![Violation {
                invariant: "I3",
                t_ms: now,
                what: format!("not checkable: {e:#}"),
            }]
        })
    };
    settle(deadline, &mut || t.elapsed(), &mut check, &mut || {
        std::thread::sleep(Duration::from_millis(500))
    })
}

/// I3 twice: with the pods as they are, then once they are all deleted (every placement
/// released).
fn end_state(ctx: &Ctx, fleet: &Fleet) -> (Vec<Violation>, String) {
    let ledger = match fleet.ledger_client() {
        Ok(l) => l,
        Err(e) => {
            let what = format!("not checkable: the ledger client's certificates: {e}");
            let v = Violation {
                invariant: "I3",
                t_ms: ctx.clock.now_ms(),
                what,
            };
            return (vec![v], String::new());
        }
    };
    let mut v = settle_i3(ctx, &ledger, Duration::from_secs(20));
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    // 20,000 pods (two hostile-objects injections) take the API server longer than the
    // client waits for one delete-collection (`ServiceError: client error (SendRequest)`,
    // 2026-12-02), though it goes on deleting: asked again, it deletes what is left.
    let mut deleted = Err(String::new());
    for _ in 0..4 {
        deleted = ctx
            .rt
            .block_on(pods.delete_collection(&now, &ListParams::default()))
            .map(|_| ())
            .map_err(|e| e.to_string());
        if deleted.is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    if let Err(e) = deleted {
        v.push(Violation {
            invariant: "I3",
            t_ms: ctx.clock.now_ms(),
            what: format!("not checkable: deleting the pods: {e}"),
        });
    }
    v.extend(settle_i3(ctx, &ledger, Duration::from_secs(20)));
    let note = "checked from the ledger (a linearizable read through the Raft leader): \
        with the workload stopped, every placement of the run's pods belongs to a pod bound \
        on that node; once all pods are deleted, every placement is released"
        .to_string();
    (v, note)
}

/// `identical` (`check::check_identical`) at the end, with the workload stopped and every
/// pod deleted: each live replica's own ledger (a local read, from it alone), until they
/// all applied one index or `deadline` passes, which is a violation too (a replica that
/// never catches up).
fn settle_identical(ctx: &Ctx, fleet: &Fleet, deadline: Duration) -> Vec<Violation> {
    let ledger = match fleet.ledger_client() {
        Ok(l) => l,
        Err(e) => {
            let what = format!("not checkable: the ledger client's certificates: {e}");
            return vec![Violation {
                invariant: "identical",
                t_ms: ctx.clock.now_ms(),
                what,
            }];
        }
    };
    let ids: Vec<u64> = fleet
        .replicas
        .iter()
        .filter(|r| r.live())
        .map(|r| r.id)
        .collect();
    let t = Instant::now();
    let mut reads = BTreeMap::new();
    let mut failed = BTreeMap::new();
    loop {
        reads.clear();
        failed.clear();
        for id in &ids {
            match ctx.rt.block_on(ledger.read_local_fingerprint(*id)) {
                Ok(r) => {
                    reads.insert(*id, (r.applied_index, r.fingerprint));
                }
                Err(e) => {
                    failed.insert(*id, e.to_string());
                }
            }
        }
        // A replica that did not answer is asked again, not left out of the comparison.
        if let Some(v) = check_identical(&reads, ctx.clock.now_ms()).filter(|_| failed.is_empty()) {
            return v;
        }
        if t.elapsed() >= deadline {
            return vec![Violation {
                invariant: "identical",
                t_ms: ctx.clock.now_ms(),
                what: format!(
                    "the replicas never applied one index within {deadline:?} of the end (replica -> (applied index, fingerprint)): {reads:?}; reads that failed: {failed:?}"
                ),
            }];
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The writer task: every record into the history file and kept for the checkers.
async fn write_history(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Record>,
    mut out: Writer,
) -> anyhow::Result<Vec<Record>> {
    let mut all = Vec::new();
    while let Some(r) = rx.recv().await {
        out.write(&r)?;
        all.push(r);
    }
    out.flush()?;
    // Records are stamped when sent; two tasks may send out of order by a few ms.
    all.sort_by_key(|r| r.t_ms);
    Ok(all)
}

/// Runs the whole thing; `history_path` receives the history.
pub fn run(
    config: &RunConfig,
    history_path: &std::path::Path,
    crds: &std::path::Path,
) -> anyhow::Result<Outcome> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let client = rt.block_on(phalanx_scheduler::cluster::kube::make_client(Some(
        &config.fleet.kubeconfig,
    )))?;
    let api_version = rt
        .block_on(client.apiserver_version())
        .map(|v| v.git_version)
        .unwrap_or_else(|e| format!("unknown ({e})"));
    rt.block_on(crate::testbed::install_crds(&client, crds))?;
    let map = ShardMap::new(ShardingConfig {
        shards: config.fleet.shards,
        ..ShardingConfig::default()
    })?;
    let ns = config.fleet.namespace.clone();
    let queues = rt.block_on(prepare(&client, &ns, &map))?;
    let mut fleet_config = config.fleet.clone();
    let proxy = match config.api_proxy {
        true => {
            let (p, path) =
                rt.block_on(start_proxy(&fleet_config.kubeconfig, &fleet_config.dir))?;
            eprintln!(
                "chaos: API-server proxy on {} (the replicas' kubeconfig: {})",
                p.addr,
                path.display()
            );
            fleet_config.kubeconfig = path;
            Some(p)
        }
        false => None,
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let writer = rt.spawn(write_history(rx, Writer::create(history_path)?));
    let clock = Clock {
        t0: Instant::now(),
        tx,
    };
    let ctx = Ctx {
        rt,
        client,
        ns,
        queues,
        clock,
        proxy,
    };
    let live: Live = Arc::default();
    let watches = [
        ctx.rt.spawn(recorder::record_nodes(
            Api::<Node>::all(ctx.client.clone()),
            ctx.clock.clone(),
        )),
        ctx.rt.spawn(recorder::record_pods(
            Api::namespaced(ctx.client.clone(), &ctx.ns),
            ctx.clock.clone(),
            live.clone(),
        )),
        ctx.rt.spawn(recorder::record_groups(
            ctx.client.clone(),
            ctx.ns.clone(),
            map,
            ctx.clock.clone(),
        )),
    ];
    // The link proxies get their own runtime: the replicas' Raft RPCs time out in 100 ms,
    // and the harness's runtime also carries the API-server proxy and the recorder.
    let link_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("chaos-links")
        .enable_all()
        .build()?;
    let links = config
        .link_proxies
        .then(|| (link_rt.handle(), Arc::new(Links::default())));
    let mut fleet = Fleet::start(fleet_config, 3, links)?;
    let up = wait_for(
        Duration::from_secs(90),
        "3 replicas ready, every shard owned",
        || whole(&fleet),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(WorkloadStats::default());
    let gangs = Generator::new(config.seed, ctx.queues.values().cloned().collect());
    let wl = WorkloadConfig {
        ns: ctx.ns.clone(),
        interval_ms: config.interval_ms,
        max_in_flight: config.max_in_flight,
        give_up_ms: 20_000,
    };
    let work = ctx.rt.spawn(workload::run(
        ctx.client.clone(),
        wl,
        gangs,
        live,
        stop.clone(),
        stats.clone(),
    ));
    let (injected, mut harness_errors) = match up {
        Ok(_) => {
            std::thread::sleep(Duration::from_millis(config.warmup_ms));
            inject_all(&ctx, &mut fleet, config)
        }
        Err(e) => (
            Vec::new(),
            vec![Violation {
                invariant: "harness",
                t_ms: ctx.clock.now_ms(),
                what: format!("{e:#}"),
            }],
        ),
    };
    stop.store(true, Ordering::SeqCst);
    if let Err(e) = ctx.rt.block_on(work) {
        harness_errors.push(Violation {
            invariant: "harness",
            t_ms: ctx.clock.now_ms(),
            what: format!("the workload task: {e}"),
        });
    }
    let (i3, i3_note) = end_state(&ctx, &fleet);
    let identical = settle_identical(&ctx, &fleet, Duration::from_secs(30));
    // Let the watches deliver the deletions, then close the history.
    std::thread::sleep(Duration::from_secs(1));
    for w in watches {
        w.abort();
    }
    let Ctx {
        rt,
        clock,
        client,
        ns,
        proxy,
        ..
    } = ctx;
    drop(clock);
    let history = rt.block_on(writer)??;
    drop(fleet);
    drop(link_rt);
    drop(proxy);
    let namespaces: Api<Namespace> = Api::all(client);
    let _ = rt.block_on(namespaces.delete(&ns, &DeleteParams::default()));
    Ok(Outcome {
        history,
        injected,
        harness_errors,
        i3,
        i3_note,
        identical,
        stats,
        api_version,
    })
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::time::Duration;

    use super::settle;

    /// A simulated clock: each check takes `takes[i]`, each pause 500 ms; the checks
    /// find `found[i]` violations.
    fn run(takes: &[u64], found: &[usize]) -> (Vec<u8>, usize) {
        let now = Cell::new(0u64);
        let calls = Cell::new(0usize);
        let v = settle(
            Duration::from_secs(20),
            &mut || Duration::from_millis(now.get()),
            &mut || {
                let i = calls.get();
                calls.set(i + 1);
                now.set(now.get() + takes[i]);
                vec![0u8; found[i]]
            },
            &mut || now.set(now.get() + 500),
        );
        (v, calls.get())
    }

    #[test]
    fn a_check_slower_than_the_deadline_is_checked_again() {
        // The first check took 25 s and saw a leak the replicas then released.
        assert_eq!(run(&[25_000, 100], &[3, 0]), (vec![], 2));
    }

    #[test]
    fn a_violation_that_stays_is_reported_from_a_check_begun_past_the_deadline() {
        let (v, calls) = run(&[9_000; 10], &[2; 10]);
        assert_eq!(v.len(), 2);
        // Checks begin at 0, 9.5 s, 19 s, 28.5 s: the fourth is past the deadline.
        assert_eq!(calls, 4);
    }

    #[test]
    fn a_check_that_finds_nothing_ends_at_once() {
        assert_eq!(run(&[100], &[0]), (vec![], 1));
    }
}
