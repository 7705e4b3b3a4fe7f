//! `phalanx simulate --nodes N --gpus-per-node G --jobs J --seed S`: a generated cluster and
//! workload, run until quiescent, reporting placed/pending counts, throughput and cycle-time
//! percentiles.

use std::fmt::Write as _;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::framework::SchedulerConf;
use crate::ledger::{ScheduledFault, start_ledger};
use crate::simulate::driver::{DriverOptions, drive_with};
use crate::simulate::sharded::ShardOptions;
use crate::simulate::synthetic::{SyntheticSpec, generate};

pub fn run(
    spec: &SyntheticSpec,
    conf: &SchedulerConf,
    replicas: usize,
    period_ms: u64,
    faults: Vec<ScheduledFault>,
    sharding: Option<ShardOptions>,
    show_progress: bool,
) -> anyhow::Result<String> {
    let workload = generate(spec);
    let (nodes, pods, groups) = (
        workload.nodes.len(),
        workload.pods.len(),
        workload.pod_groups.len(),
    );
    let gpus: i64 = workload.nodes.iter().map(|n| n.allocatable.gpus()).sum();
    let wanted: i64 = workload.pods.iter().map(|p| p.requests.gpus()).sum();
    let mut sim = workload.into_sim();
    let driver = DriverOptions {
        scheduler_name: spec.scheduler_name.clone(),
        // One full ledger read per cycle would dominate a large run; check it at the end.
        check_ledger_every_cycle: nodes <= 100,
        check_state_cache_every_cycle: nodes <= 100,
        period_ms,
        faults,
        sharding,
        ..DriverOptions::default()
    };
    let mut ledger = start_ledger(replicas)?;
    let bar = if show_progress {
        let bar = ProgressBar::new(pods as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} cycle {msg} [{bar:40}] {pos}/{len} pods placed",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut placed_so_far = 0u64;
    let outcome = drive_with(&mut sim, conf, &driver, ledger.as_mut(), |s| {
        placed_so_far += s.binds as u64;
        bar.set_position(placed_so_far);
        bar.set_message(s.cycle.to_string());
    });
    bar.finish_and_clear();

    let mut times: Vec<Duration> = outcome.stats.iter().map(|s| s.duration).collect();
    times.sort();
    let pct = |p: f64| -> f64 {
        if times.is_empty() {
            return 0.0;
        }
        let i = ((times.len() as f64 - 1.0) * p).round() as usize;
        times[i].as_secs_f64() * 1000.0
    };
    let placing = || outcome.stats.iter().filter(|s| s.binds > 0);
    let busy: Duration = placing().map(|s| s.duration).sum();
    let commit: Duration = placing().map(|s| s.commit).sum();
    let placed = outcome.total_binds();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "generated: {nodes} nodes ({gpus} GPUs), {groups} gangs of 1..64 pods, {pods} pods wanting {wanted} GPUs (seed {})",
        spec.seed
    );
    let _ = writeln!(
        out,
        "placed {placed} pods, {} still pending after {} cycles ({:.0} simulated seconds){}",
        sim.pods().filter(|p| p.node_name.is_none()).count(),
        outcome.cycles,
        sim.now_ms() as f64 / 1000.0,
        if outcome.quiescent { ", quiescent" } else { "" }
    );
    let end_to_end = busy + commit;
    let _ = writeln!(
        out,
        "throughput: {:.0} pods/s end to end with {replicas} replica(s): {:.1} ms scheduling + {:.1} ms committing to the ledger and binding, over the cycles that placed pods",
        if end_to_end.is_zero() {
            0.0
        } else {
            placed as f64 / end_to_end.as_secs_f64()
        },
        busy.as_secs_f64() * 1000.0,
        commit.as_secs_f64() * 1000.0
    );
    let _ = writeln!(
        out,
        "cycle time: p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        pct(0.5),
        pct(0.9),
        pct(0.99),
        pct(1.0)
    );
    for f in &outcome.faults {
        let _ = writeln!(out, "{f}");
    }
    for w in &outcome.quorum_waits {
        let _ = writeln!(out, "{w}");
    }
    if let Some(shards) = &outcome.shards {
        out.push_str(&shards.render());
    }
    if !outcome.ledger_errors.is_empty() {
        anyhow::bail!("{out}ledger errors: {}", outcome.ledger_errors.join("; "));
    }
    if outcome.violations.is_empty() {
        let _ = writeln!(
            out,
            "invariants I1-I3, commit-then-bind and the ledger's checks held"
        );
    } else {
        for (cycle, v) in outcome.violations.iter().take(10) {
            let _ = writeln!(out, "VIOLATION at cycle {cycle}: {v}");
        }
        anyhow::bail!("{out}invariants were violated");
    }
    Ok(out)
}
