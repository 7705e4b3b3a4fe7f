//! `phalanx-bench cycle`: one scheduling cycle (session open, enqueue, allocate, backfill,
//! close) over a generated cluster of N nodes × G GPUs with P pending pods in gangs of
//! 1..64. `measure` is shared by the subcommand and by `suite`, so the suite's table is
//! the subcommand's own.

use std::time::{Duration, Instant};

use anyhow::Result;
use phalanx_scheduler::cluster::{Cluster, ClusterSnapshot};
use phalanx_scheduler::framework::{SchedulerConf, run_cycle};
use phalanx_scheduler::simulate::synthetic::{SyntheticSpec, generate};

/// What `phalanx-bench cycle` times, besides the node counts.
#[derive(Debug, Clone)]
pub struct CycleShape {
    pub gpus_per_node: i64,
    pub pods: usize,
    pub skipped_pods: usize,
    pub repeat: usize,
    pub seed: u64,
}

/// One configuration's median cycle.
#[derive(Debug, Clone)]
pub struct CycleRow {
    pub nodes: usize,
    pub gpus: i64,
    pub pending_pods: usize,
    pub skipped: usize,
    pub gangs: usize,
    pub placed: usize,
    pub median: Duration,
}

impl CycleRow {
    pub fn pods_per_s(&self) -> f64 {
        self.placed as f64 / self.median.as_secs_f64()
    }

    pub fn markdown(&self) -> String {
        format!(
            "| {} | {} | {} | {} | {} | {} | {:.1} ms | {:.0} |",
            self.nodes,
            self.gpus,
            self.pending_pods,
            self.skipped,
            self.gangs,
            self.placed,
            self.median.as_secs_f64() * 1000.0,
            self.pods_per_s()
        )
    }
}

/// The table's header and alignment lines.
pub fn header(repeat: usize) -> String {
    format!(
        "| nodes | GPUs | pending pods | of them skipped | gangs | placed | cycle (median of {repeat}) | pods/s |\n|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
}

/// Times the cycle on `nodes` nodes: one row, or two with `skipped_pods` (the same
/// snapshot plus the pods of a PodGroup nobody can read, side by side).
pub fn measure(conf: &SchedulerConf, nodes: usize, shape: &CycleShape) -> Vec<CycleRow> {
    let mut spec = SyntheticSpec::new(nodes, shape.gpus_per_node, usize::MAX, shape.seed);
    spec.max_pods = shape.pods;
    let snapshot = generate(&spec).into_sim().snapshot();
    let mut variants = vec![(0, snapshot.clone())];
    if shape.skipped_pods > 0 {
        variants.push((
            shape.skipped_pods,
            with_pods_of_a_skipped_group(snapshot, shape.skipped_pods),
        ));
    }
    let repeat = shape.repeat.max(1);
    let mut rows = Vec::new();
    for (skipped, snapshot) in &variants {
        let mut times: Vec<Duration> = Vec::with_capacity(repeat);
        let mut placed = 0;
        for _ in 0..repeat {
            let started = Instant::now();
            let (plan, _) = run_cycle(snapshot, conf, "phalanx");
            times.push(started.elapsed());
            placed = plan.bind_count();
        }
        times.sort();
        rows.push(CycleRow {
            nodes,
            gpus: nodes as i64 * shape.gpus_per_node,
            pending_pods: snapshot.pods.len(),
            skipped: *skipped,
            gangs: snapshot.pod_groups.len(),
            placed,
            median: times[times.len() / 2],
        });
    }
    rows
}

/// The subcommand: the table for every node count, printed as it is measured.
pub fn run(conf: &SchedulerConf, node_counts: &[usize], shape: &CycleShape) -> Result<()> {
    println!("actions: {}\n", conf.actions.join(", "));
    println!("{}", header(shape.repeat.max(1)));
    for &n in node_counts {
        for row in measure(conf, n, shape) {
            println!("{}", row.markdown());
        }
    }
    Ok(())
}

/// `snapshot` with `count` more pending one-GPU pods naming PodGroup `skipped`, which is
/// not in it: what serve's snapshot holds for a PodGroup its converter refused (a
/// `minMember` over the gang bound, say) while its pods wait.
fn with_pods_of_a_skipped_group(mut snapshot: ClusterSnapshot, count: usize) -> ClusterSnapshot {
    use phalanx_scheduler::model::{ObjectKey, Pod, Resources};
    let requests = Resources::from_pairs([("cpu", 1000), ("nvidia.com/gpu", 1)]);
    for i in 0..count {
        let mut pod = Pod::new(
            ObjectKey::new("hostile", format!("skipped-{i}")),
            requests.clone(),
        );
        pod.group = Some("skipped".into());
        pod.scheduler_name = "phalanx".into();
        snapshot.pods.push(std::sync::Arc::new(pod));
    }
    snapshot
}
