//! `phalanx simulate --nodes N --jobs J --queues a:1,b:2,c:3`: fair sharing between queues,
//! end to end, with reclaim doing the work.
//!
//! The first queue submits its share of the jobs first and fills the whole cluster (nobody
//! else wants anything yet, so it may borrow everything). Once that has settled, the other
//! queues submit theirs. The scheduler then has to take GPUs back from the first queue until
//! every queue holds its weighted share. The report gives each queue's share of the GPUs in
//! use at the end, next to its weight's share; [`FairnessReport::max_relative_error`] is
//! what the test bounds (5%).
//!
//! Jobs are gangs of 1, 2 or 4 pods with 1 GPU each (and cpu/memory in proportion), drawn
//! from the seed, round-robin over the queues; pods run until the end.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::cluster::sim::SimCluster;
use crate::framework::SchedulerConf;
use crate::ledger::LocalLedger;
use crate::model::resources::{CPU, GPU, MEMORY};
use crate::model::{GROUP_NAME_ANNOTATION, ObjectKey, Pod, PodGroup, Resources};
use crate::simulate::driver::{DriverOptions, drive_with};
use crate::simulate::sharded::ShardOptions;
use crate::simulate::synthetic::{node_for, queues_with_default};

#[derive(Clone, Debug)]
pub struct FairnessSpec {
    pub nodes: usize,
    pub gpus_per_node: i64,
    /// Jobs in all, spread round-robin over the queues.
    pub jobs: usize,
    /// (name, weight), in submission order: the first one arrives alone.
    pub queues: Vec<(String, u32)>,
    pub seed: u64,
    /// Sharded runtime (shards, replicas); `None`: one scheduler, one shard.
    pub sharding: Option<ShardOptions>,
}

/// Parses `a:1,b:2,c:3`.
/// Most queues in `--queues`, and the largest weight: their product fits a `u32` sum.
pub const MAX_QUEUES: usize = 1_000;
pub const MAX_QUEUE_WEIGHT: u32 = 1_000_000;

pub fn parse_queues(text: &str) -> Result<Vec<(String, u32)>, String> {
    let mut out: Vec<(String, u32)> = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, weight) = part
            .split_once(':')
            .ok_or_else(|| format!("{part:?}: write NAME:WEIGHT, e.g. a:1"))?;
        let name = name.trim();
        check_queue_name(name, part)?;
        if out.iter().any(|(n, _)| n == name) {
            return Err(format!("{part:?}: queue `{name}` is named twice"));
        }
        let weight: u32 = weight
            .trim()
            .parse()
            .ok()
            .filter(|w| (1..=MAX_QUEUE_WEIGHT).contains(w))
            .ok_or_else(|| {
                format!("{part:?}: the weight must be a whole number from 1 to {MAX_QUEUE_WEIGHT}")
            })?;
        if out.len() == MAX_QUEUES {
            return Err(format!("more than {MAX_QUEUES} queues"));
        }
        out.push((name.to_string(), weight));
    }
    if out.is_empty() {
        return Err("no queues given; write e.g. a:1,b:2,c:3".into());
    }
    Ok(out)
}

/// A queue name as Kubernetes allows it: 1 to 253 characters.
fn check_queue_name(name: &str, part: &str) -> Result<(), String> {
    const MAX_NAME_CHARS: usize = 253;
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
        return Err(format!(
            "{part:?}: a queue name must be 1 to {MAX_NAME_CHARS} characters"
        ));
    }
    Ok(())
}

#[derive(Clone, Debug)]
pub struct QueueOutcome {
    pub name: String,
    pub weight: u32,
    pub gpus: i64,
    pub share: f64,
    pub target: f64,
}

#[derive(Clone, Debug)]
pub struct FairnessReport {
    pub queues: Vec<QueueOutcome>,
    pub total_gpus: i64,
    pub evicted: usize,
    pub cycles: u32,
    pub simulated_ms: u64,
    pub quiescent: bool,
    pub violations: Vec<String>,
}

impl FairnessReport {
    /// The largest |share / target − 1| over the queues.
    pub fn max_relative_error(&self) -> f64 {
        self.queues
            .iter()
            .map(|q| (q.share / q.target - 1.0).abs())
            .fold(0.0, f64::max)
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "fairness: {} GPUs; the first queue filled the cluster alone, then the others arrived",
            self.total_gpus
        );
        let _ = writeln!(
            out,
            "ran {} cycles ({:.0} simulated seconds), {} pods evicted by reclaim/preempt{}",
            self.cycles,
            self.simulated_ms as f64 / 1000.0,
            self.evicted,
            if self.quiescent { ", quiescent" } else { "" }
        );
        let _ = writeln!(
            out,
            "{:<12} {:>6} {:>8} {:>8} {:>8}",
            "queue", "weight", "GPUs", "share", "target"
        );
        for q in &self.queues {
            let _ = writeln!(
                out,
                "{:<12} {:>6} {:>8} {:>7.1}% {:>7.1}%",
                q.name,
                q.weight,
                q.gpus,
                q.share * 100.0,
                q.target * 100.0
            );
        }
        let _ = writeln!(
            out,
            "largest deviation from the weighted share: {:.1}% (relative)",
            self.max_relative_error() * 100.0
        );
        for v in &self.violations {
            let _ = writeln!(out, "VIOLATION {v}");
        }
        out
    }
}

/// Runs the two phases and measures the shares.
pub fn run(spec: &FairnessSpec, conf: &SchedulerConf) -> FairnessReport {
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
    let nodes: Vec<_> = (0..spec.nodes)
        .map(|i| node_for(i, spec.gpus_per_node))
        .collect();
    let queues = queues_with_default(&spec.queues);
    let mut batches: Vec<(Vec<Pod>, Vec<PodGroup>)> = vec![Default::default(); spec.queues.len()];
    let mut index = 0u64;
    for j in 0..spec.jobs {
        let q = j % spec.queues.len();
        let size: u32 = [1, 2, 4][rng.random_range(0..3)];
        let requests = Resources::from_pairs([(CPU, 4_000), (MEMORY, 32 << 30), (GPU, 1)]);
        let name = format!("{}-job-{j:05}", spec.queues[q].0);
        let mut group = PodGroup::new(ObjectKey::new("default", &name), size);
        group.queue = spec.queues[q].0.clone();
        group.min_resources = Some(requests.scaled(i64::from(size), 1));
        group.creation_index = index;
        index += 1;
        batches[q].1.push(group);
        for p in 0..size {
            let mut pod = Pod::new(
                ObjectKey::new("default", format!("{name}-{p}")),
                requests.clone(),
            );
            pod.group = Some(name.clone());
            pod.annotations
                .insert(GROUP_NAME_ANNOTATION.into(), name.clone());
            pod.creation_index = index;
            index += 1;
            batches[q].0.push(pod);
        }
    }
    let mut batches = batches.into_iter();
    let (first_pods, first_groups) = batches.next().unwrap_or_default();
    let mut sim = SimCluster::new(nodes, first_pods, first_groups, queues, Vec::new());
    // Each phase loads a fresh ledger with what runs at its start (as `drive` does).
    let driver = DriverOptions {
        sharding: spec.sharding.clone(),
        ..DriverOptions::default()
    };
    let first = drive_with(&mut sim, conf, &driver, &mut LocalLedger::new(), |_| {});
    for (pods, groups) in batches {
        sim.add(pods, groups);
    }
    let second = drive_with(&mut sim, conf, &driver, &mut LocalLedger::new(), |_| {});
    let mut gpus_of: BTreeMap<String, i64> = BTreeMap::new();
    let group_queue: BTreeMap<ObjectKey, String> = sim
        .pod_groups()
        .map(|g| (g.key.clone(), g.queue.clone()))
        .collect();
    for pod in sim.pods().filter(|p| p.occupies_node()) {
        if let Some(q) = pod
            .group
            .as_ref()
            .and_then(|g| group_queue.get(&ObjectKey::new(&pod.key.namespace, g)))
        {
            *gpus_of.entry(q.clone()).or_default() += pod.requests.gpus();
        }
    }
    let used: i64 = gpus_of.values().sum();
    let total_weight: u32 = spec.queues.iter().map(|(_, w)| *w).sum();
    let outcomes = spec
        .queues
        .iter()
        .map(|(name, weight)| {
            let gpus = gpus_of.get(name).copied().unwrap_or(0);
            QueueOutcome {
                name: name.clone(),
                weight: *weight,
                gpus,
                share: if used > 0 {
                    gpus as f64 / used as f64
                } else {
                    0.0
                },
                target: f64::from(*weight) / f64::from(total_weight.max(1)),
            }
        })
        .collect();
    FairnessReport {
        queues: outcomes,
        total_gpus: sim.nodes().map(|n| n.allocatable.gpus()).sum(),
        evicted: sim.evicted_count(),
        cycles: first.cycles + second.cycles,
        simulated_ms: sim.now_ms(),
        quiescent: second.quiescent,
        violations: first
            .violations
            .iter()
            .chain(&second.violations)
            .map(|(c, v)| format!("cycle {c}: {v}"))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_weights_parse_and_bad_ones_are_refused() {
        assert_eq!(
            parse_queues("a:1, b:2,c:3").unwrap(),
            vec![("a".into(), 1), ("b".into(), 2), ("c".into(), 3)]
        );
        assert!(parse_queues("a").is_err());
        assert!(parse_queues("a:0").is_err());
        assert!(parse_queues("").is_err());
    }
}
