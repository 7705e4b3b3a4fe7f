//! The memory part (issue 16 item 5): the resident memory of one phalanx replica beside
//! kube-scheduler's, in the same harness, at several cluster sizes. For each node count
//! and scheduler the suite brings up a testbed of its own (`--native-gang` like the kube
//! part's, nodes of `MemorySizes::node_pods` pods so that the largest pod count fits), and
//! runs `kube::measure_waves` on it: phalanx ×1 (the replica it starts is sampled), then on
//! the next testbed kube-scheduler (started here at the same client budget, sampled by
//! pid). Each run
//! grows the cluster through the pod counts in waves (20,000 pods, then 80,000 more), and
//! a pod count's RSS is read when every pod of its wave is bound: `VmRSS` sampled every
//! 100 ms (`rss.rs`), the figure then and the largest during the wave.

use std::fmt::Write as _;
use std::time::Instant;

use anyhow::Result;

use super::Section;
use super::goals::{Cmp, Goal};
use super::plan::{self, KubeSizes, Plan, Stamp};
use super::progress::Progress;
use super::testbed::{Up, bench, kubeconfig, precheck, start_kube_scheduler};
use crate::kube::{AfterRun, KubeOutcome};

/// One cluster size: both schedulers' runs on it.
#[derive(Debug)]
pub struct MemoryPoint {
    pub nodes: usize,
    pub pods: usize,
    pub phalanx: Result<KubeOutcome, String>,
    pub kube_scheduler: Result<KubeOutcome, String>,
}

/// The RSS figures of a run: (at the end, largest), MiB.
fn rss(o: &Result<KubeOutcome, String>) -> Option<(f64, f64)> {
    let r = o.as_ref().ok()?.rss?;
    Some((r.end_mib, r.peak_mib))
}

impl MemoryPoint {
    /// phalanx's RSS at the end over kube-scheduler's.
    fn ratio(&self) -> Option<f64> {
        Some(rss(&self.phalanx)?.0 / rss(&self.kube_scheduler)?.0)
    }
}

/// The part: a testbed per node count, both schedulers per pod count, the table.
pub fn memory(plan: &Plan, stamp: &Stamp, progress: &Progress) -> Section {
    let body = format!(
        "### Memory: one replica beside kube-scheduler\n\n{}\n\n",
        stamp.line()
    );
    let mut body = match precheck(plan, "memory", body, progress) {
        Ok(body) => body,
        Err(section) => return section,
    };
    let m = &plan.memory;
    let mut problems = Vec::new();
    if let Some(why) = m.misfit() {
        let why = format!("not run: {why}");
        progress.done(&format!("memory: {why}"));
        body.push_str(&why);
        problems.push(why);
        return Section { body, problems };
    }
    let mut points = Vec::new();
    for &nodes in &m.nodes {
        if let Err(e) = measure_nodes(plan, nodes, progress, &mut points) {
            problems.push(format!("{nodes} nodes: {e:#}"));
        }
    }
    for p in &points {
        for (who, o) in [
            ("phalanx ×1", &p.phalanx),
            ("kube-scheduler", &p.kube_scheduler),
        ] {
            match o {
                Err(e) => problems.push(format!("{} nodes × {} pods, {who}: {e}", p.nodes, p.pods)),
                Ok(o) if o.bound < o.pods => problems.push(format!(
                    "{} nodes × {} pods, {who}: {} of {} bound within the limit",
                    p.nodes, p.pods, o.bound, o.pods
                )),
                Ok(_) => {}
            }
        }
    }
    body.push_str(&render(plan, &points));
    Section { body, problems }
}

/// A testbed of `nodes` for each scheduler, on which one run grows the cluster through
/// the pod counts; each testbed goes down after its run (also on error, by `Up`'s drop),
/// which empties the cluster in seconds where deleting 100,000 pods took 15 minutes.
/// Points measured before an error are kept.
fn measure_nodes(
    plan: &Plan,
    nodes: usize,
    progress: &Progress,
    points: &mut Vec<MemoryPoint>,
) -> Result<()> {
    let m = &plan.memory;
    let logs = tempfile::Builder::new()
        .prefix("phalanx-suite-memory-")
        .tempdir()?;
    let phalanx = on_fresh_testbed(plan, nodes, "phalanx ×1", progress, |k, kubeconfig| {
        run_waves(
            plan,
            progress,
            "phalanx ×1",
            nodes,
            bench(plan, k, kubeconfig, "phalanx", 1),
        )
    })?;
    // A testbed that does not come up for kube-scheduler fails its points only: phalanx's
    // are kept beside the error.
    let kube_scheduler =
        on_fresh_testbed(plan, nodes, "kube-scheduler", progress, |k, kubeconfig| {
            match start_kube_scheduler(k, kubeconfig, logs.path(), "kube-scheduler", None) {
                Ok(ks) => {
                    let mut b = bench(plan, k, kubeconfig, "default-scheduler", 1);
                    b.rss_pid = Some(ks.id());
                    run_waves(plan, progress, "kube-scheduler", nodes, b)
                }
                Err(e) => {
                    progress.done(&format!("memory: kube-scheduler: {e:#}"));
                    vec![Err(format!("{e:#}")); m.pods.len()]
                }
            }
        })
        .unwrap_or_else(|e| vec![Err(format!("testbed: {e:#}")); m.pods.len()]);
    for ((&pods, phalanx), kube_scheduler) in m.pods.iter().zip(phalanx).zip(kube_scheduler) {
        points.push(MemoryPoint {
            nodes,
            pods,
            phalanx,
            kube_scheduler,
        });
    }
    Ok(())
}

/// `run` on a testbed of `nodes` brought up for it and down after it.
fn on_fresh_testbed<T>(
    plan: &Plan,
    nodes: usize,
    who: &str,
    progress: &Progress,
    run: impl FnOnce(&KubeSizes, &std::path::Path) -> T,
) -> Result<T> {
    let m = &plan.memory;
    progress.start(&format!("memory: testbed up --nodes {nodes} for {who}"));
    let started = Instant::now();
    let mut up = Up::start(nodes, &m.testbed_env())?;
    progress.done(&format!(
        "memory: testbed up with {nodes} nodes in {}",
        plan::duration(started.elapsed())
    ));
    let most = m.pods.iter().copied().max().unwrap_or(0);
    let k = KubeSizes::at(nodes, most, m.timeout);
    let out = run(&k, &kubeconfig()?);
    up.down()?;
    Ok(out)
}

/// One scheduler's run through every pod count: one result per pod count (a failed run
/// fails each of them).
fn run_waves(
    plan: &Plan,
    progress: &Progress,
    who: &str,
    nodes: usize,
    b: crate::kube::KubeBench,
) -> Vec<Result<KubeOutcome, String>> {
    let m = &plan.memory;
    let sizes = m
        .pods
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(" then ");
    progress.start(&format!("memory: {who}, {nodes} nodes × {sizes} pods"));
    let waves =
        crate::kube::measure_waves(&b, &m.pods, AfterRun::Leave).map_err(|e| format!("{e:#}"));
    let said = match &waves {
        Ok(waves) => waves
            .iter()
            .map(|o| {
                o.rss.map_or_else(
                    || format!("{} pods: no RSS sample", o.pods),
                    |r| format!("{} pods: {:.0} MiB", o.pods, r.end_mib),
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
        Err(e) => format!("failed: {e}"),
    };
    progress.done(&format!("memory: {who}, {nodes} nodes: {said}"));
    (0..m.pods.len())
        .map(|i| match &waves {
            Ok(w) => w.get(i).cloned().ok_or_else(|| "not measured".to_string()),
            Err(e) => Err(e.clone()),
        })
        .collect()
}

fn cell(o: &Result<KubeOutcome, String>) -> String {
    match (o, rss(o)) {
        (Ok(o), Some((end, peak))) => format!("{end:.0} / {peak:.0} MiB ({} bound)", o.bound),
        (Ok(o), None) => format!("no sample ({} bound)", o.bound),
        (Err(e), _) => format!("failed: {}", e.replace('\n', " / ").replace('|', "\\|")),
    }
}

/// The table and the goals.
pub fn render(plan: &Plan, points: &[MemoryPoint]) -> String {
    let m = &plan.memory;
    let k = KubeSizes::at(0, 0, m.timeout);
    let mut md = format!(
        "A testbed per node count and scheduler (kwok nodes of 8 GPUs, {} cpu, {} pods each): phalanx ×1 (`--shards {} --queues {}`, {} bind workers) on one, then kube-scheduler v1.37.2 (no gang) on the next, both at {}/{} QPS/burst, pods of 1 cpu / 1 Gi in gangs of {} for phalanx. Each scheduler's run grows the cluster through the pod counts in waves, each created once the one before is bound. RSS is `VmRSS` sampled every 100 ms: when every pod of the wave was bound / the largest during the wave.\n\n",
        m.node_cpu,
        m.node_pods,
        k.shards,
        k.queues,
        k.bind_workers,
        k.kube_qps,
        k.kube_burst,
        k.gang
    );
    md.push_str("| nodes | pods | phalanx ×1 RSS | kube-scheduler RSS | phalanx / kube-scheduler (at the end) |\n|---:|---:|---:|---:|---:|\n");
    for p in points {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            p.nodes,
            p.pods,
            cell(&p.phalanx),
            cell(&p.kube_scheduler),
            p.ratio()
                .map_or_else(|| "-".to_string(), |r| format!("{r:.2}"))
        );
    }
    let _ = writeln!(
        md,
        "\nGoals (issue 16){}:\n",
        if plan.quick {
            "; at --quick sizes the verdicts are indicative only"
        } else {
            ""
        }
    );
    for p in points {
        let goal = Goal::new(
            format!(
                "phalanx ×1 RSS / kube-scheduler's at {} nodes × {} pods",
                p.nodes, p.pods
            ),
            Cmp::AtMost,
            0.5,
        );
        md.push_str(&goal.line(p.ratio()));
        md.push('\n');
    }
    let largest = points.iter().max_by_key(|p| (p.nodes, p.pods));
    if let Some(p) = largest {
        let goal = Goal::new(
            format!("phalanx ×1 RSS at {} nodes × {} pods", p.nodes, p.pods),
            Cmp::AtMost,
            1024.0,
        )
        .shown(0, " MiB");
        md.push_str(&goal.line(rss(&p.phalanx).map(|r| r.0)));
        md.push('\n');
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn outcome(rss_mib: f64) -> KubeOutcome {
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
            pods_per_s: 100.0,
            p50: Duration::from_secs(1),
            p99: Duration::from_secs(2),
            max: Duration::from_secs(3),
            rss: Some(crate::rss::RssReport {
                end_mib: rss_mib,
                peak_mib: rss_mib + 10.0,
                samples: 10,
            }),
            cpu: None,
        }
    }

    #[test]
    fn the_table_judges_each_size_and_the_largest_against_a_gib() {
        let plan = Plan::from_args(&crate::suite::plan::test_args(true, Some("x.md"))).unwrap();
        let points = [
            MemoryPoint {
                nodes: 500,
                pods: 20_000,
                phalanx: Ok(outcome(150.0)),
                kube_scheduler: Ok(outcome(400.0)),
            },
            MemoryPoint {
                nodes: 5_000,
                pods: 100_000,
                // A planted miss: above 1 GiB, and above half of kube-scheduler's.
                phalanx: Ok(outcome(1_100.0)),
                kube_scheduler: Err("kube-scheduler exited\nearly".into()),
            },
        ];
        let md = render(&plan, &points);
        assert!(
            md.contains(
                "| 500 | 20000 | 150 / 160 MiB (500 bound) | 400 / 410 MiB (500 bound) | 0.38 |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| 5000 | 100000 | 1100 / 1110 MiB (500 bound) | failed: kube-scheduler exited / early | - |"),
            "{md}"
        );
        assert!(
            md.contains(
                "- phalanx ×1 RSS / kube-scheduler's at 500 nodes × 20000 pods ≤ 0.50: 0.38: met"
            ),
            "{md}"
        );
        assert!(
            md.contains("- phalanx ×1 RSS / kube-scheduler's at 5000 nodes × 100000 pods ≤ 0.50: no figure: not measured"),
            "{md}"
        );
        assert!(
            md.contains(
                "- phalanx ×1 RSS at 5000 nodes × 100000 pods ≤ 1024 MiB: 1100 MiB: **not met**"
            ),
            "{md}"
        );
    }
}
