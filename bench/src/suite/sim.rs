//! The simulator parts: one cycle (in this process), the sustained run and the growth grid
//! (each point a child process, `child.rs`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use phalanx_scheduler::framework::SchedulerConf;

use super::child::{self, PointResult};
use super::goals::{Cmp, Goal};
use super::plan::{Plan, SimSizes, Stamp};
use super::progress::Progress;
use super::{Section, plot};
use crate::cycle::{self, CycleShape};
use crate::shards::ms_or_dash;

/// `phalanx-bench cycle` at the plan's sizes, in this process (nothing to isolate: it
/// reports time, not memory).
pub fn cycle(plan: &Plan, stamp: &Stamp, progress: &Progress) -> Section {
    let conf = SchedulerConf::volcano_default();
    let shape = CycleShape {
        gpus_per_node: 8,
        pods: plan.cycle_pods,
        skipped_pods: 0,
        repeat: plan.cycle_repeat,
        seed: 1,
    };
    let nodes: Vec<String> = plan.cycle_nodes.iter().map(|n| n.to_string()).collect();
    let mut body = format!(
        "### One scheduling cycle\n\n{}\n\n`phalanx-bench cycle --nodes {} --pods {} --repeat {}` (actions {}; 8 GPUs a node, gangs of 1..64 pods):\n\n{}\n",
        stamp.line(),
        nodes.join(","),
        plan.cycle_pods,
        plan.cycle_repeat,
        conf.actions.join(", "),
        cycle::header(plan.cycle_repeat)
    );
    for &n in &plan.cycle_nodes {
        progress.start(&format!("cycle: {n} nodes × {} pods", plan.cycle_pods));
        let rows = cycle::measure(&conf, n, &shape);
        for row in &rows {
            body.push_str(&row.markdown());
            body.push('\n');
        }
        let last = rows.last().map_or(0.0, |r| r.pods_per_s());
        progress.done(&format!("cycle on {n} nodes: {last:.0} pods/s"));
    }
    Section {
        body,
        problems: Vec::new(),
    }
}

fn label(nodes: usize, pods: usize, replicas: u64, shards: u32) -> String {
    format!("{nodes} nodes × {pods} pods, R={replicas}, S={shards}")
}

/// One point in a child process of this binary.
fn point(plan: &Plan, nodes: usize, pods: usize, replicas: u64, shards: u32) -> PointResult {
    let name = label(nodes, pods, replicas, shards);
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            return PointResult {
                label: name,
                outcome: child::Outcome::Failed(format!("where is this binary? {e}")),
                wall: std::time::Duration::ZERO,
            };
        }
    };
    let mut cmd = Command::new(exe);
    cmd.args(child::shards_args(
        nodes,
        pods,
        replicas,
        shards,
        point_queues(nodes),
    ));
    child::run_point(&name, cmd, plan.point_timeout)
}

/// A point of a grid and how it went.
#[derive(Debug)]
pub struct GridPoint {
    pub nodes: usize,
    pub pods: usize,
    pub replicas: u64,
    pub shards: u32,
    pub result: PointResult,
}

/// Nodes a shard's pool holds at least: with strict home pools the workload's largest
/// gang (64 pods of 8 GPUs) must fit one pool, and 1,000 nodes in 16 pools of 62 could
/// not hold it (1,049 gangs pending at the end, before group commit and after alike).
const MIN_NODES_PER_POOL: usize = 250;

/// The shards of a point: `max`, or fewer so that each pool keeps enough nodes
/// (1,000 nodes: 4; 5,000: 16).
fn pool_shards(nodes: usize, max: u32) -> u32 {
    let fit = u32::try_from(nodes / MIN_NODES_PER_POOL).unwrap_or(u32::MAX);
    max.min(fit).max(1)
}

/// Queues of `phalanx-bench shards` (its default).
const MAX_QUEUES: usize = 64;
/// GPUs of the workload's largest gang: 64 pods of a whole 8-GPU node each.
const LARGEST_GANG_GPUS: usize = 64 * 8;

/// The queues of a point: 64, or fewer so that a queue's even share of the GPUs holds the
/// largest gang (1,000 nodes: 15). `proportion` never places a gang above its queue's
/// deserved share, as Volcano's does; with 64 queues on 1,000 nodes (125 GPUs each) the
/// gangs of 16 to 64 whole nodes could never run, and the run ended with the cluster idle
/// and hundreds of gangs pending, measuring that deadlock instead of the scheduler.
fn point_queues(nodes: usize) -> usize {
    (nodes * 8 / LARGEST_GANG_GPUS).clamp(1, MAX_QUEUES)
}

/// Every point of a grid, smallest first, each announced and reported on the progress bar.
fn grid(plan: &Plan, what: &str, s: &SimSizes, progress: &Progress) -> Vec<GridPoint> {
    let mut points = Vec::new();
    for &nodes in &s.nodes {
        let shards = pool_shards(nodes, s.shards);
        for &pods in &s.pods {
            for &replicas in &s.replicas {
                progress.start(&format!("{what}: {}", label(nodes, pods, replicas, shards)));
                let result = point(plan, nodes, pods, replicas, shards);
                let summary = match result.report() {
                    Some(rep) => format!(
                        "{what}: {}: {:.0} pods/s, {:.1} s, peak {:.0} MiB",
                        result.label,
                        rep.row.pods_per_s(),
                        rep.row.wall_s,
                        mib(rep.vm_hwm_kib)
                    ),
                    None => format!("{what}: {}", result.describe()),
                };
                progress.done(&summary);
                points.push(GridPoint {
                    nodes,
                    pods,
                    replicas,
                    shards,
                    result,
                });
            }
        }
    }
    points
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Invariant violations and gangs left pending: the suite fails on them (after writing).
fn problems_of(points: &[GridPoint]) -> Vec<String> {
    points
        .iter()
        .filter_map(|p| {
            let r = &p.result;
            let row = &r.report()?.row;
            (row.violations > 0 || row.pending > 0).then(|| {
                format!(
                    "{}: {} invariant violation(s), {} gang(s) pending at the end",
                    r.label, row.violations, row.pending
                )
            })
        })
        .collect()
}

const POINT_NOTE: &str = "Each point runs in a process of its own (`phalanx-bench shards --json`): peak RSS is that process's `VmHWM` (the simulator, the planner and the R ledger replicas, which run in the same process with Raft over gRPC on loopback). Cross-shard gangs as in `phalanx-bench shards`: every 10th gang spans two pools; seed 1. Queues: 64, or fewer where a queue's even share of the GPUs would not hold the largest gang (64 pods × 8 GPUs; 15 queues at 1,000 nodes): `proportion` never places a gang above its queue's deserved share.";

/// The sustained run at R=1 and R=3, side by side, judged against the goals.
pub fn sustained(plan: &Plan, stamp: &Stamp, progress: &Progress) -> Section {
    let s = &plan.sustained;
    let points = grid(plan, "sustained", s, progress);
    let mut body = format!(
        "### Sustained run in the simulator\n\n{}\n\n{} nodes × 8 GPUs, {} pods, S={} (fewer where a pool would hold under {MIN_NODES_PER_POOL} nodes), R = {}. {POINT_NOTE}\n\n",
        stamp.line(),
        join(&s.nodes),
        join(&s.pods),
        s.shards,
        join(&s.replicas)
    );
    body.push_str("| R | S | pods bound | wall | pods/s | ledger proposals | rounds | proposals / (rounds × R) | decision p50 (cross-shard) | peak RSS | violations | gangs pending at end | status |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for p in &points {
        body.push_str(&sustained_row(p, p.shards));
    }
    let of = |replicas: u64| {
        points
            .iter()
            .filter(|p| p.replicas == replicas)
            .find_map(|p| p.result.report())
            .map(|p| &p.row)
    };
    let (r1, r3) = (of(1), of(3));
    let ratio = r1.zip(r3).map(|(a, b)| b.wall_s / a.wall_s);
    let _ = writeln!(
        body,
        "\nR=3 wall / R=1 wall: {}\n",
        ratio.map_or_else(|| "no figure".to_string(), |v| format!("{v:.2}"))
    );
    let _ = writeln!(
        body,
        "Goals (issue 16: 5,000 nodes × 8 GPUs, 100,000 pods, S=16, durable replicas, 2 cores){}:\n",
        if plan.quick {
            "; at --quick sizes the verdicts are indicative only"
        } else {
            ""
        }
    );
    let r1 = r1.map(|r| (r.wall_s, r.proposals_per_round_replica()));
    let r3 = r3.map(|r| (r.wall_s, r.pods_per_s(), r.proposals_per_round_replica()));
    for line in sustained_goals(r1, r3) {
        body.push_str(&line);
        body.push('\n');
    }
    Section {
        body,
        problems: problems_of(&points),
    }
}

/// The goal lines: pods/s at R=3, R=3's wall against R=1's, proposals per round and
/// replica at each R. `r1`: (wall, proposals per round × R); `r3`: (wall, pods/s, same).
pub fn sustained_goals(r1: Option<(f64, f64)>, r3: Option<(f64, f64, f64)>) -> Vec<String> {
    let rate = Goal::new("pods/s at R=3", Cmp::AtLeast, 20_000.0).shown(0, " pods/s");
    let ratio = Goal::new("R=3 wall / R=1 wall", Cmp::AtMost, 1.5);
    let props = |r: u64| {
        Goal::new(
            format!("ledger proposals / (rounds × R) at R={r}"),
            Cmp::AtMost,
            4.0,
        )
    };
    vec![
        rate.line(r3.map(|r| r.1)),
        ratio.line(r1.zip(r3).map(|(a, b)| b.0 / a.0)),
        props(1).line(r1.map(|r| r.1)),
        props(3).line(r3.map(|r| r.2)),
    ]
}

fn join<T: ToString>(v: &[T]) -> String {
    v.iter().map(T::to_string).collect::<Vec<_>>().join(", ")
}

fn sustained_row(p: &GridPoint, shards: u32) -> String {
    let Some(rep) = p.result.report() else {
        return format!(
            "| {} | {shards} | - | - | - | - | - | - | - | - | - | - | {} |\n",
            p.replicas,
            p.result.status()
        );
    };
    let row = &rep.row;
    format!(
        "| {} | {} | {} | {:.1} s | {:.0} | {} | {} | {:.2} | {} | {:.0} MiB | {} | {} | ok |\n",
        row.replicas,
        row.shards,
        row.binds,
        row.wall_s,
        row.pods_per_s(),
        row.proposals,
        row.rounds,
        row.proposals_per_round_replica(),
        ms_or_dash(row.p50_ms),
        mib(rep.vm_hwm_kib),
        row.violations,
        row.pending
    )
}

/// The growth grid: a table, a CSV and two log-log plots.
pub fn growth(plan: &Plan, stamp: &Stamp, progress: &Progress) -> Section {
    let s = &plan.growth;
    let points = grid(plan, "growth", s, progress);
    let mut problems = problems_of(&points);
    let mut body = format!(
        "### Cost growth in the simulator\n\n{}\n\nnodes × 8 GPUs ∈ {{{}}}, pods ∈ {{{}}}, R ∈ {{{}}}, S={} at every R, or fewer where a pool would hold under {MIN_NODES_PER_POOL} nodes (the largest gang must fit one pool; S is the table's column). {POINT_NOTE} A point that fails or times out ({} s) stays in the table with its status.\n\n",
        stamp.line(),
        join(&s.nodes),
        join(&s.pods),
        join(&s.replicas),
        s.shards,
        plan.point_timeout.as_secs()
    );
    body.push_str("| nodes | pods | R | S | pods bound | wall | pods/s | peak RSS | ledger proposals | rounds | status |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for p in &points {
        body.push_str(&growth_row(p));
    }
    match write_growth_files(plan, &points) {
        Ok(lines) => body.push_str(&lines),
        Err(e) => problems.push(format!("writing the growth CSV and plots: {e:#}")),
    }
    Section { body, problems }
}

/// A finished point's status: what [`problems_of`] fails the suite on, in its row too.
fn ended(violations: usize, pending: usize) -> String {
    match (violations, pending) {
        (0, 0) => "ok".to_string(),
        (0, p) => format!("{p} gang(s) pending at the end"),
        (v, p) => format!("{v} invariant violation(s), {p} gang(s) pending at the end"),
    }
}

fn growth_row(p: &GridPoint) -> String {
    let (nodes, pods, replicas, shards) = (p.nodes, p.pods, p.replicas, p.shards);
    match p.result.report() {
        Some(rep) => format!(
            "| {nodes} | {pods} | {replicas} | {shards} | {} | {:.1} s | {:.0} | {:.0} MiB | {} | {} | {} |\n",
            rep.row.binds,
            rep.row.wall_s,
            rep.row.pods_per_s(),
            mib(rep.vm_hwm_kib),
            rep.row.proposals,
            rep.row.rounds,
            ended(rep.row.violations, rep.row.pending)
        ),
        None => format!(
            "| {nodes} | {pods} | {replicas} | {shards} | - | - | - | - | - | - | {} |\n",
            p.result.status()
        ),
    }
}

/// The CSV of every point, the two plot series, the SVGs; returns the Markdown that
/// links them (relative to the output file).
fn write_growth_files(plan: &Plan, points: &[GridPoint]) -> anyhow::Result<String> {
    let dir = &plan.plots_dir;
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("growth.csv"), growth_csv(points))?;
    let series = |value: fn(&crate::shards::PointReport) -> f64| {
        let mut csv = String::from("series,x,y\n");
        for p in points {
            if let Some(rep) = p.result.report() {
                let (n, r) = (p.nodes, p.replicas);
                let _ = writeln!(csv, "{n} nodes R={r},{},{:.1}", p.pods, value(rep));
            }
        }
        csv
    };
    let throughput = series(|r| r.row.pods_per_s());
    let memory = series(|r| mib(r.vm_hwm_kib));
    if throughput.lines().count() < 2 {
        return Ok("\nNo point was measured: no plot.\n".into());
    }
    let plots = [
        (
            "growth-throughput",
            throughput,
            "pods/s against pods (log-log)",
            "pods/s",
        ),
        (
            "growth-memory",
            memory,
            "peak RSS against pods (log-log)",
            "peak RSS, MiB",
        ),
    ];
    let link = relative_to(dir, plan.out.parent().unwrap_or(Path::new("")));
    let mut md = format!(
        "\nData: [`growth.csv`]({}). Redraw: `python3 bench/plot_svg.py --csv {}/growth-throughput.csv --out … --logx --logy`.\n\n",
        link.join("growth.csv").display(),
        dir.display()
    );
    for (name, csv, title, ylabel) in plots {
        let (c, svg) = (
            dir.join(format!("{name}.csv")),
            dir.join(format!("{name}.svg")),
        );
        std::fs::write(&c, csv)?;
        plot::log_log(&c, &svg, title, "pods", ylabel)?;
        let _ = writeln!(
            md,
            "![{title}]({})\n",
            link.join(format!("{name}.svg")).display()
        );
    }
    Ok(md)
}

fn growth_csv(points: &[GridPoint]) -> String {
    let mut csv = String::from(
        "nodes,pods,replicas,shards,status,pods_bound,wall_s,pods_per_s,peak_rss_mib,proposals,rounds\n",
    );
    for pt in points {
        let (n, p, r, res) = (pt.nodes, pt.pods, pt.replicas, &pt.result);
        match res.report() {
            Some(rep) => {
                let row = &rep.row;
                let _ = writeln!(
                    csv,
                    "{n},{p},{r},{},ok,{},{:.2},{:.1},{:.1},{},{}",
                    row.shards,
                    row.binds,
                    row.wall_s,
                    row.pods_per_s(),
                    mib(rep.vm_hwm_kib),
                    row.proposals,
                    row.rounds
                );
            }
            None => {
                let status = match res.outcome {
                    child::Outcome::TimedOut(_) => "timed out",
                    _ => "failed",
                };
                let _ = writeln!(csv, "{n},{p},{r},,{status},,,,,,");
            }
        }
    }
    csv
}

/// `dir` as seen from `base` (both made absolute first): the plots' links in the output
/// file; an absolute path when `dir` is not under `base`.
fn relative_to(dir: &Path, base: &Path) -> PathBuf {
    let abs = |p: &Path| {
        std::path::absolute(if p.as_os_str().is_empty() {
            Path::new(".")
        } else {
            p
        })
    };
    match (abs(dir), abs(base)) {
        (Ok(d), Ok(b)) => d.strip_prefix(&b).map_or(d.clone(), Path::to_path_buf),
        _ => dir.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sustained_goals_are_judged_from_the_figures() {
        // R=1 wall 10 s with 2.0 proposals per round and replica; R=3 at 25,000 pods/s
        // but 16 s wall (1.6×) and 5.0 proposals per round and replica: two goals missed.
        let lines = sustained_goals(Some((10.0, 2.0)), Some((16.0, 25_000.0, 5.0)));
        assert_eq!(
            lines,
            [
                "- pods/s at R=3 ≥ 20000 pods/s: 25000 pods/s: met",
                "- R=3 wall / R=1 wall ≤ 1.50: 1.60: **not met**",
                "- ledger proposals / (rounds × R) at R=1 ≤ 4.00: 2.00: met",
                "- ledger proposals / (rounds × R) at R=3 ≤ 4.00: 5.00: **not met**",
            ]
        );
        let none = sustained_goals(Some((10.0, 2.0)), None);
        assert!(none[0].ends_with("no figure: not measured") && none[1].ends_with("not measured"));
    }

    #[test]
    fn a_pool_keeps_enough_nodes_for_the_largest_gang_and_the_goal_size_keeps_16_shards() {
        assert_eq!(pool_shards(1_000, 16), 4);
        assert_eq!(pool_shards(5_000, 16), 16);
        assert_eq!(pool_shards(10_000, 16), 16);
        assert_eq!(pool_shards(100, 16), 1);
    }

    #[test]
    fn a_queues_even_share_holds_the_largest_gang_and_the_goal_size_keeps_64_queues() {
        assert_eq!(point_queues(1_000), 15);
        assert!(1_000 * 8 / point_queues(1_000) >= LARGEST_GANG_GPUS);
        assert_eq!(point_queues(5_000), 64);
        assert_eq!(point_queues(10_000), 64);
        assert_eq!(point_queues(10), 1);
    }

    fn point(replicas: u64, outcome: child::Outcome) -> GridPoint {
        GridPoint {
            nodes: 1000,
            pods: 20_000,
            replicas,
            shards: 16,
            result: PointResult {
                label: label(1000, 20_000, replicas, 16),
                outcome,
                wall: std::time::Duration::from_secs(1),
            },
        }
    }

    fn measured(violations: usize, pending: usize) -> child::Outcome {
        let row = crate::shards::Row {
            replicas: 1,
            shards: 16,
            binds: 20_003,
            wall_s: 10.0,
            cross_gangs: 0,
            cross_committed: 0,
            p50_ms: None,
            p99_ms: None,
            cpu_max: 0.0,
            cpu_mean: 0.0,
            view_cpu: 0.0,
            proposals: 400,
            rounds: 100,
            messages: (0, 0, 0),
            not_committed: (0, 0, 0, 0),
            violations,
            pending,
            grpc_batches: 0,
            plan_s: 0.0,
            perform_s: 0.0,
            state_patched: 99,
            state_built: 1,
            proposals_by_content: String::new(),
            ..Default::default()
        };
        child::Outcome::Measured(Box::new(crate::shards::PointReport {
            row,
            vm_hwm_kib: 102_400,
        }))
    }

    #[test]
    fn a_failed_or_timed_out_point_stays_in_the_table_and_the_csv() {
        let points = [
            point(1, measured(0, 0)),
            point(3, child::Outcome::Failed("exit 1: ledger errors".into())),
            point(
                3,
                child::Outcome::TimedOut(std::time::Duration::from_secs(3600)),
            ),
        ];
        let rows: Vec<String> = points.iter().map(growth_row).collect();
        assert_eq!(
            rows[0],
            "| 1000 | 20000 | 1 | 16 | 20003 | 10.0 s | 2000 | 100 MiB | 400 | 100 | ok |\n"
        );
        assert_eq!(
            rows[1],
            "| 1000 | 20000 | 3 | 16 | - | - | - | - | - | - | failed: exit 1: ledger errors |\n"
        );
        assert!(
            rows[2].ends_with("| timed out after 3600 s |\n"),
            "{}",
            rows[2]
        );
        let csv = growth_csv(&points);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 4, "{csv}");
        assert_eq!(
            lines[1],
            "1000,20000,1,16,ok,20003,10.00,2000.3,100.0,400,100"
        );
        assert_eq!(lines[2], "1000,20000,3,,failed,,,,,,");
        assert_eq!(lines[3], "1000,20000,3,,timed out,,,,,,");
        assert!(problems_of(&points).is_empty());
    }

    #[test]
    fn a_violation_or_a_gang_left_pending_is_a_problem_naming_the_point() {
        let points = [point(1, measured(0, 0)), point(3, measured(2, 1))];
        assert_eq!(
            problems_of(&points),
            [
                "1000 nodes × 20000 pods, R=3, S=16: 2 invariant violation(s), 1 gang(s) pending at the end"
            ]
        );
        // The growth table says so in the point's row, not "ok".
        assert!(growth_row(&points[0]).ends_with("| ok |\n"));
        assert!(
            growth_row(&points[1])
                .ends_with("| 2 invariant violation(s), 1 gang(s) pending at the end |\n"),
            "{}",
            growth_row(&points[1])
        );
    }

    #[test]
    fn plot_links_are_relative_to_the_output_file() {
        assert_eq!(
            relative_to(Path::new("docs/bench"), Path::new("docs")),
            PathBuf::from("bench")
        );
        assert_eq!(
            relative_to(Path::new("/tmp/suite"), Path::new("/tmp/suite")),
            PathBuf::from("")
        );
        assert_eq!(
            relative_to(Path::new("/elsewhere"), Path::new("docs")),
            PathBuf::from("/elsewhere")
        );
    }
}
