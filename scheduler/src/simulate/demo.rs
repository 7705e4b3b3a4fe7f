//! `phalanx simulate` with no arguments: the source article's story on 8 GPU nodes.
//!
//! Three training jobs compete for 16 GPUs (8 nodes × 2): the article's TensorFlow job
//! (1 parameter server + 10 workers, 11 GPUs, 60 min of work, loaded from the seed manifest
//! unchanged), a PyTorch job (10 GPUs, 40 min) and a small evaluation job (4 GPUs, 20 min).
//! Together they want 25 GPUs, so they cannot all run at once.
//!
//! The same workload runs twice on the same scheduler code:
//! 1. gang scheduling off (no `gang` plugin, no `enqueue` admission): pods are placed one at
//!    a time, fairly shared between jobs — what a pod-by-pod scheduler does. The jobs split
//!    the GPUs, and the two big ones each hold 8 GPUs waiting for the rest: a deadlock that
//!    lasts until someone intervenes.
//! 2. gang scheduling on (the default configuration): each job gets all its GPUs or none, so
//!    the jobs run one after another and every held GPU does work.

use std::fmt::Write as _;

use crate::cluster::sim::SimCluster;
use crate::framework::SchedulerConf;
use crate::manifest::{LoadOptions, load_workload};
use crate::model::{ObjectKey, TimeMs};
use crate::simulate::driver::{DriverOptions, drive};

/// The seed's TensorFlow Job, exactly as the article wrote it (cleaned up).
const SEED_TF_JOB: &str = include_str!("../../tests/fixtures/seed/job-tf-mnist.yaml");

/// Eight 2-GPU nodes and the two competing jobs.
const DEMO_CLUSTER: &str = include_str!("demo_cluster.yaml");

const HORIZON_MS: TimeMs = 3 * 3_600_000;
const MINUTE_MS: TimeMs = 60_000;

/// The article's scheduler name: the seed Job asks for `schedulerName: volcano`, and the demo
/// answers to it, as phalanx does when it replaces Volcano.
const SCHEDULER_NAME: &str = "volcano";

/// What one run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct DemoRow {
    pub label: &'static str,
    pub gpus_allocated_at_start: i64,
    pub gpus_total: i64,
    pub effective_utilisation: f64,
    pub gpu_hours_held: f64,
    pub gpu_hours_wasted: f64,
    pub jobs_finished: usize,
    pub partial_gangs: Vec<String>,
}

fn workload_text() -> String {
    format!("{SEED_TF_JOB}\n---\n{DEMO_CLUSTER}")
}

fn job_minutes(job: &str) -> Option<TimeMs> {
    match job {
        "tf-mnist-job" => Some(60),
        "pytorch-resnet" => Some(40),
        "small-eval" => Some(20),
        _ => None,
    }
}

/// Runs the workload under `conf` for three simulated hours.
pub fn run_once(label: &'static str, conf: &SchedulerConf, gang: bool) -> anyhow::Result<DemoRow> {
    let opts = LoadOptions {
        scheduler_name: SCHEDULER_NAME.to_string(),
        strict_config: false,
    };
    let mut workload = load_workload(&workload_text(), &opts)?;
    for pod in &mut workload.pods {
        if let Some(minutes) = pod.group.as_deref().and_then(job_minutes) {
            pod.sim_duration_ms = Some(minutes * MINUTE_MS);
        }
    }
    let gpus_total: i64 = workload.nodes.iter().map(|n| n.allocatable.gpus()).sum();
    let groups: Vec<(ObjectKey, u32)> = workload
        .pod_groups
        .iter()
        .map(|g| (g.key.clone(), g.min_member))
        .collect();
    let mut sim = SimCluster::from_workload(workload);
    let driver = DriverOptions {
        scheduler_name: SCHEDULER_NAME.to_string(),
        horizon_ms: Some(HORIZON_MS),
        check_gang_atomicity: gang,
        ..DriverOptions::default()
    };
    let outcome = drive(&mut sim, conf, &driver, |_| {});
    if let Some((cycle, v)) = outcome.violations.first() {
        anyhow::bail!("invariant violated in the demo at cycle {cycle}: {v}");
    }
    sim.advance_to(HORIZON_MS);
    let (held, working) = sim.gpu_hours();

    let mut partial = Vec::new();
    let mut finished = 0;
    for (key, min) in &groups {
        let pods: Vec<_> = sim
            .pods()
            .filter(|p| p.group.as_deref() == Some(key.name.as_str()))
            .collect();
        let placed = pods.iter().filter(|p| p.node_name.is_some()).count();
        let done = pods.iter().filter(|p| p.is_terminated()).count();
        if done >= *min as usize {
            finished += 1;
        } else if placed > 0 && placed < *min as usize {
            let gpus: i64 = pods
                .iter()
                .filter(|p| p.occupies_node())
                .map(|p| p.requests.gpus())
                .sum();
            partial.push(format!(
                "{} holds {gpus} GPUs with {placed} of {min} pods",
                key.name
            ));
        }
    }
    Ok(DemoRow {
        label,
        gpus_allocated_at_start: first_cycle_gpus(conf, gang)?,
        gpus_total,
        effective_utilisation: if held > 0.0 { working / held } else { 0.0 },
        gpu_hours_held: held,
        gpu_hours_wasted: held - working,
        jobs_finished: finished,
        partial_gangs: partial,
    })
}

/// GPUs placed by the first cycle alone (what the article's table calls "allocated").
fn first_cycle_gpus(conf: &SchedulerConf, gang: bool) -> anyhow::Result<i64> {
    let opts = LoadOptions {
        scheduler_name: SCHEDULER_NAME.to_string(),
        strict_config: false,
    };
    let workload = load_workload(&workload_text(), &opts)?;
    let mut sim = SimCluster::from_workload(workload);
    let driver = DriverOptions {
        scheduler_name: SCHEDULER_NAME.to_string(),
        exact_cycles: Some(1),
        check_gang_atomicity: gang,
        ..DriverOptions::default()
    };
    drive(&mut sim, conf, &driver, |_| {});
    Ok(sim
        .pods()
        .filter(|p| p.occupies_node())
        .map(|p| p.requests.gpus())
        .sum())
}

/// The two configurations the demo compares.
pub fn configurations() -> [(&'static str, SchedulerConf, bool); 2] {
    let without_gang = SchedulerConf::from_names(
        &["allocate", "backfill"],
        &[
            &["priority", "conformance"],
            &["drf", "predicates", "proportion", "nodeorder"],
        ],
    );
    [
        ("pod by pod (gang off)", without_gang, false),
        (
            "phalanx gang (default)",
            SchedulerConf::volcano_default(),
            true,
        ),
    ]
}

pub fn run() -> anyhow::Result<String> {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "phalanx demo: 3 training jobs want 25 GPUs on 8 nodes × 2 GPUs (16 GPUs), 3 simulated hours\n  \
         tf-mnist-job   1 ps + 10 workers, 11 GPUs, 60 min (the article's Job, seed manifest unchanged)\n  \
         pytorch-resnet 1 master + 9 workers, 10 GPUs, 40 min\n  \
         small-eval     4 workers, 4 GPUs, 20 min\n"
    );
    let mut rows = Vec::new();
    for (label, conf, gang) in configurations() {
        rows.push(run_once(label, &conf, gang)?);
    }
    let _ = writeln!(
        out,
        "| scheduling             | GPUs allocated | effective utilisation | GPU-hours wasted | jobs finished |"
    );
    let _ = writeln!(
        out,
        "|------------------------|----------------|-----------------------|------------------|---------------|"
    );
    for r in &rows {
        let _ = writeln!(
            out,
            "| {:<22} | {:>5} of {:<5} | {:>20.0}% | {:>8.1} of {:<4.1} | {:>8} of 3 |",
            r.label,
            r.gpus_allocated_at_start,
            r.gpus_total,
            r.effective_utilisation * 100.0,
            r.gpu_hours_wasted,
            r.gpu_hours_held,
            r.jobs_finished
        );
    }
    for r in &rows {
        if !r.partial_gangs.is_empty() {
            let _ = writeln!(
                out,
                "\n{}: deadlock at the end — {}; none of them can start, and none will give its GPUs back.",
                r.label,
                r.partial_gangs.join("; ")
            );
        }
    }
    let _ = writeln!(
        out,
        "\nWith gang scheduling each job holds all of its GPUs or none: no partial allocation, no deadlock.\n\
         Try a scenario: phalanx simulate --scenario FILE   (see README.md)"
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_gang_the_big_jobs_deadlock_and_waste_most_gpu_time() {
        let [(label, conf, gang), _] = configurations();
        let row = run_once(label, &conf, gang).expect("demo runs");
        assert_eq!(row.gpus_allocated_at_start, 16);
        assert_eq!(row.partial_gangs.len(), 2, "{:?}", row.partial_gangs);
        assert!(row.effective_utilisation < 0.1, "{row:?}");
        assert_eq!(row.jobs_finished, 1);
    }

    #[test]
    fn with_gang_every_held_gpu_works_and_all_jobs_finish() {
        let [_, (label, conf, gang)] = configurations();
        let row = run_once(label, &conf, gang).expect("demo runs");
        assert!(row.partial_gangs.is_empty(), "{:?}", row.partial_gangs);
        assert!((row.effective_utilisation - 1.0).abs() < 1e-9, "{row:?}");
        assert_eq!(row.gpu_hours_wasted, 0.0);
        assert_eq!(row.jobs_finished, 3);
    }
}
