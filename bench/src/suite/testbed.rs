//! The kube part: a real API server (the testbed: kube-apiserver, etcd and kwok on
//! loopback, docs/testbed.md), with the trivial binder, kube-scheduler, kube-scheduler
//! with native gang scheduling and phalanx ×1 / ×3 side by side on it, through
//! `kube::measure` in this process. The suite brings the testbed up itself (with
//! `--native-gang`: the API server serves Workload/PodGroup, which no other row reads) and
//! always down again; it never touches one it did not start, and it never builds the Go
//! tools (`deploy/testbed/testbed build` does).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::Section;
use super::goals::{Cmp, Goal};
use super::plan::{KubeSizes, Plan, Stamp};
use super::progress::Progress;
use crate::gang_check::{self, GangCheck};
use crate::kube::{CPU_BENCH, CPU_SCHEDULER, KubeBench, KubeOutcome, Mode, Stoppable};
use crate::native_gang;

/// The testbed script of this checkout.
fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/testbed/testbed")
}

/// Where `testbed build` puts the binaries (the script's `$CACHE/bin`).
fn tools_dir() -> PathBuf {
    let cache = std::env::var_os("PHALANX_CACHE").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/phalanx"),
        PathBuf::from,
    );
    cache.join("testbed/bin")
}

/// The tools `testbed up` needs that are missing from `dir` (each built binary is named
/// `TOOL-VERSION`; a `.tmp` is a build that did not finish).
pub fn missing_tools(dir: &Path) -> Vec<&'static str> {
    let names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    ["kube-apiserver", "etcd", "kwok"]
        .into_iter()
        .filter(|t| {
            !names
                .iter()
                .any(|n| n.starts_with(&format!("{t}-v")) && !n.ends_with(".tmp"))
        })
        .collect()
}

fn testbed(args: &[&str]) -> Result<std::process::Output> {
    Command::new(script())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {} {}", script().display(), args.join(" ")))
}

fn tail(bytes: &[u8], n: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Whether a testbed this suite started is up: what an interrupt must bring down.
static OURS_IS_UP: AtomicBool = AtomicBool::new(false);
/// Held while the testbed is brought down, so that an interrupt and the normal end never
/// race: the other waits, then finds it down.
static DOWN: Mutex<()> = Mutex::new(());

/// Brings down the testbed this suite started, once, whoever asks first.
fn down_once() -> Result<()> {
    let _held = DOWN.lock().unwrap_or_else(|e| e.into_inner());
    if !OURS_IS_UP.swap(false, Ordering::SeqCst) {
        return Ok(());
    }
    let out = testbed(&["down"])?;
    if !out.status.success() {
        bail!("testbed down failed:\n{}", tail(&out.stderr, 15));
    }
    Ok(())
}

/// On SIGINT or SIGTERM: stops the replicas and kube-scheduler this bench started, brings
/// down the testbed (its processes run in sessions of their own, so a Ctrl-C on the
/// terminal does not reach them), and exits 130 without writing the output file.
fn down_on_interrupt() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::thread::spawn(|| {
            use tokio::signal::unix::{SignalKind, signal};
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                let (Ok(mut int), Ok(mut term)) = (
                    signal(SignalKind::interrupt()),
                    signal(SignalKind::terminate()),
                ) else {
                    return;
                };
                tokio::select! { _ = int.recv() => {}, _ = term.recv() => {} }
            });
            eprintln!("suite: interrupted; stopping what it started");
            crate::kube::terminate_children();
            if let Err(e) = down_once() {
                eprintln!("suite: {e:#}");
            }
            // Again: the main thread may have started one while the testbed went down.
            crate::kube::terminate_children();
            std::process::exit(130);
        });
    });
}

/// The testbed this suite brought up: down again when dropped, whatever happened.
#[derive(Debug)]
pub(super) struct Up {
    down_done: bool,
}

impl Up {
    /// `testbed up --nodes N --native-gang`, with `env` (the script's PHALANX_* settings).
    pub(super) fn start(nodes: usize, env: &[(&str, String)]) -> Result<Up> {
        down_on_interrupt();
        let out = Command::new(script())
            .args(["up", "--nodes", &nodes.to_string(), "--native-gang"])
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {} up", script().display()))?;
        if !out.status.success() {
            bail!(
                "testbed up --nodes {nodes} --native-gang failed:\n{}",
                tail(&out.stderr, 15)
            );
        }
        OURS_IS_UP.store(true, Ordering::SeqCst);
        Ok(Up { down_done: false })
    }

    pub(super) fn down(&mut self) -> Result<()> {
        self.down_done = true;
        down_once()
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if !self.down_done {
            let _ = self.down();
        }
    }
}

/// kube-scheduler at the same client budget as the others (docs/benchmarks.md: started by
/// hand, since `testbed up --kube-scheduler` keeps its default 50/100), with
/// `--feature-gates` when given, ready on /healthz; its log is `log_dir/NAME.log`.
pub(super) fn start_kube_scheduler(
    k: &KubeSizes,
    kubeconfig: &Path,
    log_dir: &Path,
    name: &str,
    feature_gates: Option<&str>,
) -> Result<Stoppable> {
    let path = testbed(&["tool-path", "kube-scheduler"])?;
    if !path.status.success() {
        bail!("not run: kube-scheduler not built (deploy/testbed/testbed build --kube-scheduler)");
    }
    let bin = String::from_utf8_lossy(&path.stdout).trim().to_string();
    let port = crate::kube::free_port()?;
    let kc = kubeconfig.display().to_string();
    let log_path = log_dir.join(format!("{name}.log"));
    let log = std::fs::File::create(&log_path)?;
    let child = Command::new(&bin)
        .args(feature_gates.map(|g| format!("--feature-gates={g}")))
        .args([
            format!("--kubeconfig={kc}"),
            format!("--authentication-kubeconfig={kc}"),
            format!("--authorization-kubeconfig={kc}"),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            "--leader-elect=false".into(),
            format!("--kube-api-qps={}", k.kube_qps),
            format!("--kube-api-burst={}", k.kube_burst),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .spawn()
        .with_context(|| format!("starting {bin}"))?;
    // Stopped with SIGTERM when dropped, killed 10 s later.
    let mut ks = Stoppable::new(child, Duration::from_secs(10));
    let url = format!("https://127.0.0.1:{port}/healthz");
    let started = Instant::now();
    loop {
        let ok = Command::new("curl")
            .args(["-skf", "--max-time", "2", &url])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Ok(ks);
        }
        // The log goes with the suite's temporary directory: its tail goes in the error.
        let log = || tail(&std::fs::read(&log_path).unwrap_or_default(), 5);
        if let Some(s) = ks.exited() {
            bail!(
                "kube-scheduler exited ({s}) before it was ready:\n{}",
                log()
            );
        }
        if started.elapsed() > Duration::from_secs(90) {
            bail!("kube-scheduler not healthy after 90 s:\n{}", log());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The bench's settings for one row.
pub(super) fn bench(
    plan: &Plan,
    k: &KubeSizes,
    kubeconfig: &Path,
    scheduler: &str,
    replicas: u32,
) -> KubeBench {
    let phalanx = scheduler == "phalanx";
    KubeBench {
        kubeconfig: kubeconfig.to_path_buf(),
        scheduler: scheduler.to_string(),
        replicas,
        pods: k.pods,
        gang: k.gang,
        gpus_per_pod: 0,
        kube_qps: k.kube_qps,
        kube_burst: k.kube_burst,
        bind_workers: k.bind_workers,
        max_pods_per_cycle: None,
        period_ms: 200,
        phalanx: plan.phalanx.clone(),
        timeout: k.timeout,
        create_concurrency: 32,
        shards: if phalanx { k.shards } else { 1 },
        queues: if phalanx { k.queues } else { 0 },
        rss_pid: None,
    }
}

/// A row of the kube table: what ran and how it went.
#[derive(Debug)]
pub struct KubeRow {
    pub name: &'static str,
    pub outcome: Result<KubeOutcome, String>,
    /// The all-or-nothing check run before the row (`gang_check`), when one was: its
    /// line, or why it failed.
    pub gang_check: Option<Result<String, String>>,
}

impl KubeRow {
    fn ok(&self) -> Option<&KubeOutcome> {
        self.outcome.as_ref().ok()
    }
}

/// Why a testbed part cannot run on this machine (a Go tool not built, no phalanx
/// binary): not a problem, the section says so. `None` when it can.
pub(super) fn cannot_run(plan: &Plan) -> Option<String> {
    let missing = missing_tools(&tools_dir());
    if !missing.is_empty() {
        Some(format!(
            "not run: testbed tools not built (deploy/testbed/testbed build; missing from {}: {})",
            tools_dir().display(),
            missing.join(", ")
        ))
    } else if !plan.phalanx.is_file() {
        Some(format!(
            "not run: the phalanx binary {} does not exist (cargo build -p phalanx-scheduler, or --phalanx PATH)",
            plan.phalanx.display()
        ))
    } else {
        None
    }
}

/// A testbed already up where the suite would start its own: a problem (the suite never
/// touches one it did not start), whose text this is.
pub(super) fn already_up() -> Option<&'static str> {
    testbed(&["status"])
        .is_ok_and(|o| o.status.success())
        .then_some("not run: a testbed is already up (deploy/testbed/testbed status); the suite starts its own and never touches one it did not start: bring it down first (or give the suite another PHALANX_TESTBED_DIR and ports, docs/testbed.md)")
}

/// Checks that a testbed part can run: `Err` with its section when it cannot (`part`
/// names it in the progress line).
pub(super) fn precheck(
    plan: &Plan,
    part: &str,
    mut body: String,
    progress: &Progress,
) -> Result<String, Section> {
    if let Some(why) = cannot_run(plan) {
        progress.done(&format!("{part}: {why}"));
        body.push_str(&why);
        return Err(Section {
            body,
            problems: Vec::new(),
        });
    }
    if let Some(why) = already_up() {
        progress.done(&format!("{part}: {why}"));
        body.push_str(why);
        return Err(Section {
            body,
            problems: vec![why.to_string()],
        });
    }
    Ok(body)
}

/// The kubeconfig of the testbed this suite brought up.
pub(super) fn kubeconfig() -> Result<PathBuf> {
    Ok(PathBuf::from(
        String::from_utf8_lossy(&testbed(&["kubeconfig-path"])?.stdout).trim(),
    ))
}

/// The part: checks that it can run, brings the testbed up, measures the rows, brings it
/// down, and renders the section.
pub fn kube(plan: &Plan, stamp: &Stamp, progress: &Progress) -> Section {
    let body = format!("### On a real API server\n\n{}\n\n", stamp.line());
    let mut body = match precheck(plan, "kube", body, progress) {
        Ok(body) => body,
        Err(section) => return section,
    };
    let mut problems = Vec::new();
    match measure_rows(plan, progress) {
        Ok(rows) => {
            problems.extend(rows.iter().filter_map(|r| match &r.gang_check {
                Some(Err(e)) => Some(format!("{}: gang-check: {e}", r.name)),
                _ => None,
            }));
            body.push_str(&render(plan, &rows));
        }
        Err(e) => {
            let _ = write!(body, "failed: {e:#}");
            problems.push(format!("{e:#}"));
        }
    }
    Section { body, problems }
}

/// Up, every row, down (also on error, by `Up`'s drop).
fn measure_rows(plan: &Plan, progress: &Progress) -> Result<Vec<KubeRow>> {
    let k = &plan.kube;
    progress.start(&format!("kube: testbed up --nodes {}", k.nodes));
    let mut up = Up::start(k.nodes, &[])?;
    progress.done(&format!("kube: testbed up with {} nodes", k.nodes));
    let kubeconfig = kubeconfig()?;
    let logs = tempfile::Builder::new()
        .prefix("phalanx-suite-")
        .tempdir()?;
    let row = |name: &'static str, b: KubeBench, gang_check: Option<Result<String, String>>| {
        progress.start(&format!("kube: {name}, {} pods", b.pods));
        let outcome = crate::kube::measure(&b).map_err(|e| format!("{e:#}"));
        progress.done(&match &outcome {
            Ok(o) => format!(
                "kube: {name}: {:.0} pods/s, p50 {:.2} s",
                o.pods_per_s,
                o.p50.as_secs_f64()
            ),
            Err(e) => format!("kube: {name}: failed: {e}"),
        });
        KubeRow {
            name,
            outcome,
            gang_check,
        }
    };
    let mut rows = Vec::new();
    for (name, scheduler, gates) in [
        ("kube-scheduler", "default-scheduler", None),
        (
            NATIVE_GANG_ROW,
            Mode::NATIVE_GANG,
            Some(native_gang::FEATURE_GATES),
        ),
    ] {
        match start_kube_scheduler(k, &kubeconfig, logs.path(), name, gates) {
            Ok(ks) => {
                // The native gang row first proves that its gangs are all or nothing.
                let check = gates.map(|_| {
                    progress.start("kube: gang-check native-gang");
                    let check = gang_check::measure(&GangCheck {
                        kubeconfig: kubeconfig.clone(),
                        scheduler: scheduler.to_string(),
                        phalanx: plan.phalanx.clone(),
                        timeout: Duration::from_secs(120),
                        settle: Duration::from_secs(5),
                    })
                    .map_err(|e| format!("{e:#}"))
                    .and_then(|o| o.verdict());
                    progress.done(&match &check {
                        Ok(line) => format!("kube: gang-check native-gang: {line}"),
                        Err(e) => format!("kube: gang-check native-gang: FAILED: {e}"),
                    });
                    check
                });
                let mut b = bench(plan, k, &kubeconfig, scheduler, 1);
                b.rss_pid = Some(ks.id());
                rows.push(row(name, b, check));
                drop(ks);
            }
            Err(e) => {
                progress.done(&format!("kube: {name}: {e:#}"));
                rows.push(KubeRow {
                    name,
                    outcome: Err(format!("{e:#}")),
                    gang_check: None,
                });
            }
        }
    }
    // phalanx ×1 between two runs of the trivial binder, its figure their mean: runs on
    // one testbed differ with what ran before them (on a fresh testbed the trivial binder
    // bound 462 pods/s first and 432 and 443 later; on an older one 465, 410 and 364 in
    // turn), so a ceiling measured once, first, misjudged every later row.
    let [before, after] = TRIVIAL_ROWS;
    rows.push(row(before, bench(plan, k, &kubeconfig, "trivial", 1), None));
    rows.push(row(
        "phalanx ×1",
        bench(plan, k, &kubeconfig, "phalanx", 1),
        None,
    ));
    rows.push(row(after, bench(plan, k, &kubeconfig, "trivial", 1), None));
    rows.push(row(
        "phalanx ×3",
        bench(plan, k, &kubeconfig, "phalanx", 3),
        None,
    ));
    up.down()?;
    Ok(rows)
}

/// The native gang row's name.
const NATIVE_GANG_ROW: &str = "kube-scheduler, native gang";

/// The trivial binder's rows, run right before and right after phalanx ×1.
const TRIVIAL_ROWS: [&str; 2] = ["trivial binder", "trivial binder, again"];

/// The trivial binder's pods/s: the mean of its rows that bound every pod.
fn trivial_rate(rows: &[KubeRow]) -> Option<f64> {
    let rates: Vec<f64> = rows
        .iter()
        .filter(|r| TRIVIAL_ROWS.contains(&r.name))
        .filter_map(KubeRow::ok)
        .filter(|o| o.bound >= o.pods)
        .map(|o| o.pods_per_s)
        .collect();
    (!rates.is_empty()).then(|| rates.iter().sum::<f64>() / rates.len() as f64)
}

/// The table, the ratios and the goals.
pub fn render(plan: &Plan, rows: &[KubeRow]) -> String {
    let k = &plan.kube;
    let mut md = format!(
        "The testbed at {} kwok nodes × 8 GPUs; {} pods of 1 cpu / 1 Gi each (gangs of {} for phalanx; no gang for the others); every scheduler's client at {}/{} QPS/burst, {} bind workers for the trivial binder and phalanx; phalanx rows with `--shards {} --queues {}` (docs/benchmarks.md, scale-out) and a period of 200 ms; `phalanx-bench kube` for each row, one after the other on the same testbed. The trivial binder runs right before and right after phalanx ×1, and \"of the trivial binder's\" is against the mean of its two runs.\n\n",
        k.nodes, k.pods, k.gang, k.kube_qps, k.kube_burst, k.bind_workers, k.shards, k.queues
    );
    md.push_str("| scheduler | pods | bound | created in | all bound after | pods/s | of the trivial binder's | p50 | p99 | RSS at the end / largest (per replica) | status |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    let find = |name: &str| rows.iter().find(|r| r.name == name).and_then(KubeRow::ok);
    let trivial = trivial_rate(rows);
    for r in rows {
        md.push_str(&kube_row(r, trivial));
    }
    let (p1, p3, ks, native) = (
        find("phalanx ×1"),
        find("phalanx ×3"),
        find("kube-scheduler"),
        find(NATIVE_GANG_ROW),
    );
    let ratio =
        |a: Option<&KubeOutcome>, b: Option<&KubeOutcome>, f: fn(&KubeOutcome) -> Option<f64>| {
            a.zip(b).and_then(|(a, b)| Some(f(a)? / f(b)?))
        };
    let rate = |o: &KubeOutcome| Some(o.pods_per_s);
    let p50 = |o: &KubeOutcome| Some(o.p50.as_secs_f64());
    let rss = |o: &KubeOutcome| o.rss.map(|r| r.end_mib);
    let _ = writeln!(
        md,
        "\nphalanx ×3 / ×1 pods/s: {}\n\nGoals (issue 16: 500 nodes, 5,000 pods in gangs, the same QPS){}:\n",
        ratio(p3, p1, rate).map_or_else(|| "no figure".to_string(), |v| format!("{v:.2}")),
        if plan.quick {
            "; at --quick sizes the verdicts are indicative only"
        } else {
            ""
        }
    );
    let goals = [
        (
            Goal::new(
                "phalanx ×1 pods/s / the trivial binder's",
                Cmp::AtLeast,
                0.8,
            ),
            p1.zip(trivial).map(|(p1, t)| p1.pods_per_s / t),
        ),
        (
            Goal::new("phalanx ×1 p50 / kube-scheduler's p50", Cmp::AtMost, 1.0),
            ratio(p1, ks, p50),
        ),
        (
            Goal::new(
                "phalanx ×1 p50 / native gang kube-scheduler's p50",
                Cmp::AtMost,
                1.0,
            ),
            ratio(p1, native, p50),
        ),
        (
            Goal::new("phalanx ×3 pods/s / phalanx ×1's", Cmp::AtLeast, 2.5),
            ratio(p3, p1, rate),
        ),
        (
            Goal::new("phalanx ×1 RSS / kube-scheduler's RSS", Cmp::AtMost, 0.5),
            ratio(p1, ks, rss),
        ),
    ];
    for (goal, figure) in goals {
        md.push_str(&goal.line(figure));
        md.push('\n');
    }
    md.push_str(&render_cpu(rows));
    md
}

/// Where each row's CPU went: the profile that says whether the scheduler or the machine
/// set the pace (a machine busy on every core cannot bind faster with more replicas).
fn render_cpu(rows: &[KubeRow]) -> String {
    const TESTBED: [&str; 3] = ["kube-apiserver", "etcd", "kwok"];
    let mut md = String::from(
        "\nWhere the CPU went, from the first create to the last bind (CPU seconds of each process, `/proc/PID/stat`; the machine's from `/proc/stat`, every process on it; \"others\" is the machine's busy time that none of the listed processes used):\n\n| scheduler | wall | scheduler (all replicas) | kube-apiserver | etcd | kwok | phalanx-bench | others | machine busy, cores | scheduler CPU-s / 1k pods |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let Some((o, c)) = r.ok().and_then(|o| Some((o, o.cpu.as_ref()?))) else {
            continue;
        };
        let listed: f64 = c.groups.iter().map(|(_, s)| s).sum();
        let secs = |s: f64| format!("{s:.1} s");
        let mut cells = vec![
            r.name.to_string(),
            secs(c.wall.as_secs_f64()),
            secs(c.of(CPU_SCHEDULER)),
        ];
        cells.extend(TESTBED.iter().map(|g| secs(c.of(g))));
        cells.push(secs(c.of(CPU_BENCH)));
        cells.push(
            c.machine_busy_s
                .map_or("-".into(), |m| secs((m - listed).max(0.0))),
        );
        cells.push(
            c.busy_cores()
                .map_or("-".into(), |b| format!("{b:.2} of {}", c.cores)),
        );
        cells.push(format!(
            "{:.2}",
            1000.0 * c.of(CPU_SCHEDULER) / (o.bound.max(1) as f64)
        ));
        let _ = writeln!(md, "| {} |", cells.join(" | "));
    }
    md
}

fn kube_row(r: &KubeRow, trivial: Option<f64>) -> String {
    let o = match &r.outcome {
        Ok(o) => o,
        Err(e) => {
            let e = e.replace('\n', " / ").replace('|', "\\|");
            let status = if e.starts_with("not run") {
                e
            } else {
                format!("failed: {e}")
            };
            return format!(
                "| {} | - | - | - | - | - | - | - | - | - | {status} |\n",
                r.name
            );
        }
    };
    let share = trivial.map_or_else(
        || "-".to_string(),
        |t| format!("{:.0} %", 100.0 * o.pods_per_s / t),
    );
    let rss = o.rss.map_or_else(
        || "-".to_string(),
        |r| format!("{:.0} / {:.0} MiB", r.end_mib, r.peak_mib),
    );
    let mut status = if o.bound < o.pods {
        format!("timed out: {} of {} bound", o.bound, o.pods)
    } else {
        "ok".to_string()
    };
    match &r.gang_check {
        Some(Ok(line)) => status += &format!("; gang-check: {line}"),
        Some(Err(e)) => status += &format!("; gang-check FAILED: {}", e.replace('|', "\\|")),
        None => {}
    }
    format!(
        "| {} | {} | {} | {:.1} s | {:.1} s | {:.0} | {share} | {:.2} s | {:.2} s | {rss} | {status} |\n",
        r.name,
        o.pods,
        o.bound,
        o.created_in.as_secs_f64(),
        o.span.as_secs_f64(),
        o.pods_per_s,
        o.p50.as_secs_f64(),
        o.p99.as_secs_f64(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(pods_per_s: f64, p50_s: f64, rss_mib: Option<f64>) -> KubeOutcome {
        KubeOutcome {
            label: String::new(),
            nodes: 50,
            pods: 500,
            gangs: None,
            kube_qps: 1000.0,
            kube_burst: 2000,
            created_in: Duration::from_secs(3),
            bound: 500,
            span: Duration::from_secs(4),
            pods_per_s,
            p50: Duration::from_secs_f64(p50_s),
            p99: Duration::from_secs_f64(p50_s * 2.0),
            max: Duration::from_secs_f64(p50_s * 3.0),
            rss: rss_mib.map(|m| crate::rss::RssReport {
                end_mib: m,
                peak_mib: m,
                samples: 10,
            }),
            cpu: None,
        }
    }

    #[test]
    fn the_table_keeps_a_failed_row_and_judges_the_goals_from_the_rows() {
        let plan = Plan::from_args(&crate::suite::plan::test_args(true, Some("x.md"))).unwrap();
        let rows = [
            KubeRow {
                name: "trivial binder",
                outcome: Ok(outcome(200.0, 0.4, None)),
                gang_check: None,
            },
            KubeRow {
                name: "trivial binder, again",
                outcome: Ok(outcome(180.0, 0.4, None)),
                gang_check: None,
            },
            KubeRow {
                name: NATIVE_GANG_ROW,
                outcome: Ok(outcome(120.0, 1.0, Some(300.0))),
                gang_check: Some(Err(
                    "not all or nothing: gang too-big has 40 of its 51 pods bound".into(),
                )),
            },
            KubeRow {
                name: "phalanx ×1",
                outcome: Ok(KubeOutcome {
                    cpu: Some(crate::cpu::CpuReport {
                        wall: Duration::from_secs(4),
                        groups: vec![
                            (CPU_SCHEDULER.into(), 1.5),
                            ("kube-apiserver".into(), 3.0),
                            ("etcd".into(), 1.0),
                            ("kwok".into(), 0.5),
                            (CPU_BENCH.into(), 1.0),
                        ],
                        machine_busy_s: Some(7.6),
                        cores: 2,
                    }),
                    ..outcome(150.0, 1.2, Some(90.0))
                }),
                gang_check: None,
            },
            KubeRow {
                name: "phalanx ×3",
                outcome: Err("replicas not ready\nwithin 60 s".into()),
                gang_check: None,
            },
        ];
        let md = render(&plan, &rows);
        // Against the mean of the two trivial rows, (200 + 180) / 2 = 190.
        assert!(md.contains("| phalanx ×1 | 500 | 500 | 3.0 s | 4.0 s | 150 | 79 % | 1.20 s | 2.40 s | 90 / 90 MiB | ok |"), "{md}");
        assert!(
            md.contains("| trivial binder, again | 500 | 500 | 3.0 s | 4.0 s | 180 | 95 % |"),
            "{md}"
        );
        assert!(md.contains("| phalanx ×3 | - | - | - | - | - | - | - | - | - | failed: replicas not ready / within 60 s |"), "{md}");
        // 150 / 190 = 0.79 < 0.8: a planted miss; the rest have no figure.
        assert!(
            md.contains("- phalanx ×1 pods/s / the trivial binder's ≥ 0.80: 0.79: **not met**"),
            "{md}"
        );
        assert!(
            md.contains("- phalanx ×3 pods/s / phalanx ×1's ≥ 2.50: no figure: not measured"),
            "{md}"
        );
        assert!(
            md.contains("- phalanx ×1 p50 / kube-scheduler's p50 ≤ 1.00: no figure: not measured"),
            "{md}"
        );
        // 1.2 s against the native gang row's 1.0 s: a planted miss.
        assert!(
            md.contains(
                "- phalanx ×1 p50 / native gang kube-scheduler's p50 ≤ 1.00: 1.20: **not met**"
            ),
            "{md}"
        );
        // The CPU table: a row only where CPU was measured; "others" is the machine's
        // busy time left over (7.6 - 7.0), the scheduler's CPU per 1,000 pods bound 3.0.
        assert!(
            md.contains("| phalanx ×1 | 4.0 s | 1.5 s | 3.0 s | 1.0 s | 0.5 s | 1.0 s | 0.6 s | 1.90 of 2 | 3.00 |"),
            "{md}"
        );
        assert!(!md.contains("| trivial binder | 4.0 s"), "{md}");
        assert!(
            md.contains("| 300 / 300 MiB | ok; gang-check FAILED: not all or nothing: gang too-big has 40 of its 51 pods bound |"),
            "{md}"
        );
    }

    #[test]
    fn the_tools_are_built_when_each_has_a_finished_binary() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            missing_tools(dir.path()),
            ["kube-apiserver", "etcd", "kwok"]
        );
        for f in ["etcd-v3.6.16", "kwok-v0.8.0", "kube-apiserver-v1.37.2.tmp"] {
            std::fs::write(dir.path().join(f), "").unwrap();
        }
        assert_eq!(missing_tools(dir.path()), ["kube-apiserver"]);
        assert_eq!(missing_tools(Path::new("/nonexistent")).len(), 3);
    }
}
