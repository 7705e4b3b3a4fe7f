//! The kube-scheduler baseline (`--baseline kube-scheduler`): on the same testbed, two
//! upstream kube-scheduler processes with leader election (the Lease
//! kube-system/kube-scheduler, Kubernetes' default timings unless told otherwise), plain
//! pods with `schedulerName: default-scheduler` created continuously, the leading
//! kube-scheduler SIGKILLed and restarted, and the time from each kill to the next bind.
//!
//! The next bind counts only once the Lease has a holder other than the killed one: a
//! bind the killed process sent just before its death can still show up after it, and no
//! other process can bind before it holds the Lease.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::fleet::free_port;

/// The baseline's record beside the report (the report's side-by-side section reads it).
pub const JSON: &str = "baseline-kube-scheduler.json";

/// Kubernetes' leader-election defaults (component-base): what users compare against.
pub const DEFAULT_LEASE: LeaseFlags = LeaseFlags {
    lease_s: 15,
    renew_deadline_s: 10,
    retry_period_s: 2,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseFlags {
    pub lease_s: u64,
    pub renew_deadline_s: u64,
    pub retry_period_s: u64,
}

#[derive(Debug, Clone)]
pub struct BaselineConfig {
    pub binary: PathBuf,
    pub kubeconfig: PathBuf,
    pub dir: PathBuf,
    pub namespace: String,
    pub injections: usize,
    /// Time between pod creations.
    pub interval_ms: u64,
    pub lease: LeaseFlags,
}

/// One SIGKILL of the leading kube-scheduler, times from the kill (ms).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Which of the two processes (1 or 2) was killed.
    pub victim: u32,
    /// The Lease first showed another holder.
    pub handover_ms: Option<u64>,
    /// The first pod bound after that.
    pub next_bind_ms: Option<u64>,
}

/// What a baseline run measured, kept as JSON beside the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Baseline {
    pub command: String,
    pub kube_scheduler: String,
    pub lease: LeaseFlags,
    pub interval_ms: u64,
    pub pods_created: u64,
    pub samples: Vec<Sample>,
}

/// A kube-scheduler process, restarted on a fresh log each time.
#[derive(Debug)]
struct Sched {
    idx: u32,
    port: u16,
    starts: u32,
    child: Option<Child>,
}

impl Sched {
    fn log(&self, dir: &Path) -> PathBuf {
        dir.join(format!("kube-scheduler-{}.{}.log", self.idx, self.starts))
    }

    fn spawn(&mut self, c: &BaselineConfig) -> anyhow::Result<()> {
        self.starts += 1;
        let log = std::fs::File::create(self.log(&c.dir))?;
        let kc = c.kubeconfig.display().to_string();
        let l = c.lease;
        let child = Command::new(&c.binary)
            .arg(format!("--kubeconfig={kc}"))
            .arg(format!("--authentication-kubeconfig={kc}"))
            .arg(format!("--authorization-kubeconfig={kc}"))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={}", self.port))
            .arg("--leader-elect=true")
            .arg("--leader-elect-resource-namespace=kube-system")
            .arg("--leader-elect-resource-name=kube-scheduler")
            .arg(format!("--leader-elect-lease-duration={}s", l.lease_s))
            .arg(format!(
                "--leader-elect-renew-deadline={}s",
                l.renew_deadline_s
            ))
            .arg(format!("--leader-elect-retry-period={}s", l.retry_period_s))
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| anyhow::anyhow!("starting {}: {e}", c.binary.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Running, and its current log says it acquired the Lease.
    fn leads(&self, dir: &Path) -> bool {
        self.child.is_some()
            && std::fs::read_to_string(self.log(dir)).is_ok_and(|t| {
                t.to_ascii_lowercase()
                    .contains("successfully acquired lease")
            })
    }

    fn sigkill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Sched {
    fn drop(&mut self) {
        self.sigkill();
    }
}

/// What the watches saw: each pod's first bind, and the Lease's holder over time (ms
/// since the run began).
#[derive(Debug, Default)]
struct Seen {
    binds: Vec<u64>,
    bound: std::collections::BTreeSet<String>,
    holders: Vec<(u64, String)>,
}

type Shared = Arc<Mutex<Seen>>;

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, Seen> {
    s.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn watch_pods(api: Api<Pod>, seen: Shared, t0: Instant) {
    let mut s = std::pin::pin!(watcher(api, watcher::Config::default()).applied_objects());
    while let Some(ev) = s.next().await {
        let Ok(p) = ev else { continue };
        let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
        let name = p.metadata.name.unwrap_or_default();
        let mut g = lock(&seen);
        if bound && g.bound.insert(name) {
            g.binds.push(ms_since(t0));
        }
    }
}

async fn watch_lease(api: Api<Lease>, seen: Shared, t0: Instant) {
    let cfg = watcher::Config::default().fields("metadata.name=kube-scheduler");
    let mut s = std::pin::pin!(watcher(api, cfg).applied_objects());
    while let Some(ev) = s.next().await {
        let Ok(l) = ev else { continue };
        let holder = l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
        let mut g = lock(&seen);
        if g.holders.last().is_none_or(|(_, h)| *h != holder) {
            g.holders.push((ms_since(t0), holder));
        }
    }
}

fn ms_since(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Creates a one-second pod every `interval_ms` and deletes the finished ones.
async fn make_pods(client: kube::Client, ns: String, interval_ms: u64, made: Arc<Mutex<u64>>) {
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let mut tick = tokio::time::interval(Duration::from_millis(interval_ms));
    let mut n = 0u64;
    loop {
        tick.tick().await;
        n += 1;
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("bl-{n:06}"), "namespace": ns,
                "annotations": {"phalanx.dev/sim-duration": "1s"}},
            "spec": {"schedulerName": "default-scheduler",
                "containers": [{"name": "main", "image": "phalanx-chaos:fake",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]},
        });
        let Ok(pod) = serde_json::from_value::<Pod>(pod) else {
            continue;
        };
        if pods.create(&PostParams::default(), &pod).await.is_ok() {
            *made
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = n;
        }
        if n.is_multiple_of(20) {
            let done = ListParams::default().fields("status.phase=Succeeded");
            let _ = pods
                .delete_collection(&DeleteParams::default(), &done)
                .await;
        }
    }
}

/// From the watches' record, one sample: the kill at `kill_ms` of the process whose
/// Lease holder was `holder` then.
fn sample_of(seen: &Seen, victim: u32, kill_ms: u64, holder: &str) -> Sample {
    let handover = seen
        .holders
        .iter()
        .find(|(t, h)| *t >= kill_ms && h != holder && !h.is_empty())
        .map(|(t, _)| *t);
    let next_bind = handover.and_then(|h| seen.binds.iter().find(|t| **t >= h.max(kill_ms)));
    Sample {
        victim,
        handover_ms: handover.map(|t| t - kill_ms),
        next_bind_ms: next_bind.map(|t| t - kill_ms),
    }
}

fn wait(deadline: Duration, what: &str, mut f: impl FnMut() -> bool) -> anyhow::Result<()> {
    crate::run::wait_for(deadline, what, &mut f).map(|_| ())
}

/// Kills the leader `injections` times, each on a settled pair with binds flowing.
fn inject(
    c: &BaselineConfig,
    scheds: &mut [Sched; 2],
    seen: &Shared,
    t0: Instant,
) -> anyhow::Result<Vec<Sample>> {
    let mut samples = Vec::new();
    let limit = Duration::from_secs(c.lease.lease_s * 4 + 30);
    for i in 0..c.injections {
        wait(limit, "a leading kube-scheduler", || {
            scheds.iter().filter(|s| s.leads(&c.dir)).count() == 1
        })?;
        let binding = || {
            lock(seen)
                .binds
                .last()
                .is_some_and(|t| ms_since(t0) - t < 1000)
        };
        wait(limit, "pods being bound", binding)?;
        // Settled: the standby has been up and synced for a while.
        std::thread::sleep(Duration::from_secs(5));
        let victim = scheds
            .iter()
            .position(|s| s.leads(&c.dir))
            .ok_or_else(|| anyhow::anyhow!("the leader went away before kill #{i}"))?;
        let holder = lock(seen)
            .holders
            .last()
            .map(|(_, h)| h.clone())
            .unwrap_or_default();
        let kill_ms = ms_since(t0);
        scheds[victim].sigkill();
        std::thread::sleep(Duration::from_secs(1));
        scheds[victim].spawn(c)?;
        let idx = scheds[victim].idx;
        wait(limit, "the next bind after the kill", || {
            sample_of(&lock(seen), idx, kill_ms, &holder)
                .next_bind_ms
                .is_some()
        })?;
        let s = sample_of(&lock(seen), idx, kill_ms, &holder);
        eprintln!(
            "chaos baseline: kill #{} of kube-scheduler {idx}: Lease handed over after {:?} ms, next bind after {:?} ms",
            i + 1,
            s.handover_ms,
            s.next_bind_ms
        );
        samples.push(s);
    }
    Ok(samples)
}

/// The whole baseline run.
pub fn run(c: &BaselineConfig, command: String) -> anyhow::Result<Baseline> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let client = rt.block_on(phalanx_scheduler::cluster::kube::make_client(Some(
        &c.kubeconfig,
    )))?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": c.namespace}}))?;
    rt.block_on(namespaces.create(&PostParams::default(), &ns))?;
    let t0 = Instant::now();
    let seen: Shared = Arc::default();
    let made = Arc::new(Mutex::new(0u64));
    let tasks = [
        rt.spawn(watch_pods(
            Api::namespaced(client.clone(), &c.namespace),
            seen.clone(),
            t0,
        )),
        rt.spawn(watch_lease(
            Api::namespaced(client.clone(), "kube-system"),
            seen.clone(),
            t0,
        )),
        rt.spawn(make_pods(
            client.clone(),
            c.namespace.clone(),
            c.interval_ms,
            made.clone(),
        )),
    ];
    let mut scheds = [1, 2].map(|idx| Sched {
        idx,
        port: 0,
        starts: 0,
        child: None,
    });
    let mut started = Ok(());
    for s in scheds.iter_mut() {
        started = started.and_then(|_| {
            s.port = free_port()?;
            s.spawn(c)
        });
    }
    let samples = started.and_then(|_| inject(c, &mut scheds, &seen, t0));
    drop(scheds);
    for t in tasks {
        t.abort();
    }
    let _ = rt.block_on(namespaces.delete(&c.namespace, &DeleteParams::default()));
    let version = Command::new(&c.binary)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| format!("unknown ({e})"));
    let pods_created = *made
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Ok(Baseline {
        command,
        kube_scheduler: version,
        lease: c.lease,
        interval_ms: c.interval_ms,
        pods_created,
        samples: samples?,
    })
}

/// The samples' times, in ms, of those that have one.
pub fn times(b: &Baseline, f: impl Fn(&Sample) -> Option<u64>) -> Vec<u64> {
    b.samples.iter().filter_map(f).collect()
}

/// The baseline's own page: the command, the flags, every kill, and the percentiles.
pub fn markdown(b: &Baseline) -> String {
    use std::fmt::Write as _;
    let p =
        |v: &[u64], q| crate::report::percentile(v, q).map_or("-".into(), |x| format!("{x} ms"));
    let bind = times(b, |s| s.next_bind_ms);
    let hand = times(b, |s| s.handover_ms);
    let mut s = String::new();
    let _ = writeln!(s, "# kube-scheduler baseline: leader SIGKILL\n");
    let _ = writeln!(
        s,
        "Generated by a real run; do not edit by hand. To make it again:\n"
    );
    let _ = writeln!(s, "```sh\n{}\n```\n", b.command);
    let l = b.lease;
    let _ = writeln!(
        s,
        "Two `{}` processes on the chaos testbed (etcd + kube-apiserver + kwok, 16 nodes), \
         `--leader-elect=true` on the Lease kube-system/kube-scheduler with \
         `--leader-elect-lease-duration={}s --leader-elect-renew-deadline={}s \
         --leader-elect-retry-period={}s` (Kubernetes' defaults: 15 s, 10 s, 2 s). A plain pod \
         (`schedulerName: default-scheduler`, 10m CPU, runs 1 s) every {} ms, {} in all. The \
         leading process (the one whose log says it acquired the Lease) is SIGKILLed and \
         restarted 1 s later; the next bind is the first pod bound after the Lease showed \
         another holder (a bind the killed process sent just before it died does not count).\n",
        b.kube_scheduler,
        l.lease_s,
        l.renew_deadline_s,
        l.retry_period_s,
        b.interval_ms,
        b.pods_created
    );
    let _ = writeln!(
        s,
        "| measure | kills | p50 | p99 | max |\n|---|---:|---:|---:|---:|"
    );
    for (name, v) in [
        ("kill to Lease handover", &hand),
        ("kill to next bind", &bind),
    ] {
        let max = v.iter().max().map_or("-".into(), |x| format!("{x} ms"));
        let _ = writeln!(
            s,
            "| {name} | {} | {} | {} | {max} |",
            v.len(),
            p(v, 0.5),
            p(v, 0.99)
        );
    }
    let _ = writeln!(
        s,
        "\n| # | killed | Lease handover | next bind |\n|---:|---:|---:|---:|"
    );
    let ms = |v: Option<u64>| v.map_or("-".into(), |x| format!("{x} ms"));
    for (i, x) in b.samples.iter().enumerate() {
        let _ = writeln!(
            s,
            "| {} | kube-scheduler {} | {} | {} |",
            i + 1,
            x.victim,
            ms(x.handover_ms),
            ms(x.next_bind_ms)
        );
    }
    s
}

/// Reads the JSON a baseline run left beside the report, if any.
pub fn load(path: &Path) -> anyhow::Result<Option<Baseline>> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(
            serde_json::from_str(&t).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow::anyhow!("{}: {e}", path.display())),
    }
}

/// The holders the Lease had, for the tests of `sample_of`.
#[cfg(test)]
fn seen_of(binds: &[u64], holders: &[(u64, &str)]) -> Seen {
    Seen {
        binds: binds.to_vec(),
        bound: Default::default(),
        holders: holders.iter().map(|(t, h)| (*t, h.to_string())).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bind_before_the_lease_changed_hands_is_the_killed_leaders_and_does_not_count() {
        // Killed at 1000 while "a" held the Lease; a bind of a's lands at 1004; "b" takes
        // the Lease at 16500 and binds at 16800.
        let seen = seen_of(&[900, 1004, 16800, 16900], &[(0, "a"), (16500, "b")]);
        let s = sample_of(&seen, 1, 1000, "a");
        assert_eq!(s.handover_ms, Some(15500));
        assert_eq!(s.next_bind_ms, Some(15800));
    }

    #[test]
    fn no_handover_yet_means_no_sample_time() {
        let seen = seen_of(&[900, 1004, 2000], &[(0, "a")]);
        let s = sample_of(&seen, 2, 1000, "a");
        assert_eq!((s.handover_ms, s.next_bind_ms), (None, None));
        // An empty holder (a released Lease) is not a new leader either.
        let seen = seen_of(&[3000], &[(0, "a"), (2000, "")]);
        assert_eq!(sample_of(&seen, 2, 1000, "a").handover_ms, None);
    }

    #[test]
    fn the_default_lease_flags_are_kubernetes_defaults() {
        assert_eq!(
            (
                DEFAULT_LEASE.lease_s,
                DEFAULT_LEASE.renew_deadline_s,
                DEFAULT_LEASE.retry_period_s
            ),
            (15, 10, 2)
        );
    }
}
