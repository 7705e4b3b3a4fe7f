//! A generated GPU cluster and training workload, reproducible from one seed.
//!
//! Nodes: `gpus_per_node` GPUs, 96 cores and 768 GiB each (a typical 8-GPU server), spread
//! over zones and racks. Jobs: gangs whose sizes follow a power law from 1 to 64 pods
//! (P(size) ∝ size^-0.8 over 1, 2, 4, ..., 64: many small jobs, a few huge ones); each pod
//! asks for 1, 2, 4 or `gpus_per_node` GPUs with cpu and memory in proportion, as real
//! training pods do. Jobs go to the given queues round-robin.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::model::resources::{CPU, GPU, MEMORY};
use crate::model::{
    GROUP_NAME_ANNOTATION, Node, ObjectKey, Pod, PodGroup, Queue, Resources, TASK_SPEC_ANNOTATION,
    TimeMs,
};

/// Most nodes a generated cluster may have (`--nodes`).
pub const MAX_GENERATED_NODES: usize = 100_000;
/// Most gangs a generated workload may have (`--jobs`): about 4.8 pods each on average,
/// so about a million pods, a few GiB of memory at most.
pub const MAX_GENERATED_JOBS: usize = 200_000;
/// Most GPUs per generated node (`--gpus-per-node`).
pub const MAX_GPUS_PER_NODE: i64 = 64;
/// Longest generated pod run time (`--pod-seconds`), a year.
pub const MAX_POD_SECONDS: u64 = 365 * 24 * 3600;

/// `--nodes`, `--jobs` and `--gpus-per-node` within their bounds, or the flag, the value
/// and the bound that refuses it.
pub fn check_generated_bounds(nodes: usize, jobs: usize, gpus_per_node: i64) -> Result<(), String> {
    if !(1..=MAX_GENERATED_NODES).contains(&nodes) {
        return Err(format!(
            "--nodes {nodes}: must be 1 to {MAX_GENERATED_NODES}"
        ));
    }
    if jobs > MAX_GENERATED_JOBS {
        return Err(format!("--jobs {jobs}: must be 0 to {MAX_GENERATED_JOBS}"));
    }
    if !(1..=MAX_GPUS_PER_NODE).contains(&gpus_per_node) {
        return Err(format!(
            "--gpus-per-node {gpus_per_node}: must be 1 to {MAX_GPUS_PER_NODE}"
        ));
    }
    Ok(())
}

/// `--pod-seconds MIN-MAX` as milliseconds, MIN <= MAX <= a year.
pub fn parse_pod_seconds(range: &str) -> Result<(TimeMs, TimeMs), String> {
    range
        .split_once('-')
        .and_then(|(a, b)| Some((a.trim().parse::<u64>().ok()?, b.trim().parse::<u64>().ok()?)))
        .filter(|(a, b)| a <= b && *b <= MAX_POD_SECONDS)
        .map(|(a, b)| (a * 1000, b * 1000))
        .ok_or_else(|| {
            format!(
                "--pod-seconds {range:?}: expected MIN-MAX in seconds, MIN <= MAX <= \
                 {MAX_POD_SECONDS}, e.g. 60-600"
            )
        })
}

#[derive(Clone, Debug)]
pub struct SyntheticSpec {
    pub nodes: usize,
    pub gpus_per_node: i64,
    pub jobs: usize,
    pub seed: u64,
    /// (name, weight); empty means the `default` queue alone.
    pub queues: Vec<(String, u32)>,
    /// Stop adding jobs once this many pods exist (0 = no limit).
    pub max_pods: usize,
    /// Run time of each pod in the simulator, drawn from this range (None = run forever).
    pub duration_ms: Option<(TimeMs, TimeMs)>,
    pub scheduler_name: String,
    /// Largest gang drawn (the power law is cut there): 64 keeps the full mix; a small
    /// value gives a backlog every pool can place from at any moment (failover runs).
    pub max_gang_pods: u32,
}

impl SyntheticSpec {
    pub fn new(nodes: usize, gpus_per_node: i64, jobs: usize, seed: u64) -> Self {
        Self {
            nodes,
            gpus_per_node,
            jobs,
            seed,
            queues: Vec::new(),
            max_pods: 0,
            duration_ms: None,
            scheduler_name: crate::model::DEFAULT_SCHEDULER_NAME.to_string(),
            max_gang_pods: GANG_SIZES[GANG_SIZES.len() - 1],
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct SyntheticWorkload {
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    pub pod_groups: Vec<PodGroup>,
    pub queues: Vec<Queue>,
}

const GANG_SIZES: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];
const CORES_PER_NODE: i64 = 96;
const GIB: i64 = 1 << 30;

pub fn node_for(index: usize, gpus: i64) -> Node {
    let alloc = Resources::from_pairs([
        (CPU, CORES_PER_NODE * 1000),
        (MEMORY, 768 * GIB),
        (GPU, gpus),
    ]);
    let mut node = Node::new(format!("node-{index:05}"), alloc);
    node.labels.insert(
        "topology.kubernetes.io/zone".into(),
        format!("zone-{}", index % 4),
    );
    node.labels
        .insert("phalanx.dev/rack".into(), format!("rack-{}", index / 32));
    node
}

impl SyntheticWorkload {
    /// A simulated cluster holding this workload.
    pub fn into_sim(self) -> crate::cluster::sim::SimCluster {
        crate::cluster::sim::SimCluster::new(
            self.nodes,
            self.pods,
            self.pod_groups,
            self.queues,
            Vec::new(),
        )
    }
}

/// Queues of the given (name, weight), plus the `default` queue unless one is named so.
pub fn queues_with_default(weights: &[(String, u32)]) -> Vec<Queue> {
    let mut queues: Vec<Queue> = weights
        .iter()
        .map(|(name, weight)| {
            let mut q = Queue::new(name.clone());
            q.weight = (*weight).max(1);
            q
        })
        .collect();
    if !queues.iter().any(|q| q.name == crate::model::DEFAULT_QUEUE) {
        queues.push(Queue::new(crate::model::DEFAULT_QUEUE));
    }
    queues
}

pub fn generate(spec: &SyntheticSpec) -> SyntheticWorkload {
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
    let nodes: Vec<Node> = (0..spec.nodes)
        .map(|i| node_for(i, spec.gpus_per_node))
        .collect();
    let queues = queues_with_default(&spec.queues);
    let queue_names: Vec<String> = if spec.queues.is_empty() {
        vec![crate::model::DEFAULT_QUEUE.to_string()]
    } else {
        spec.queues.iter().map(|(n, _)| n.clone()).collect()
    };
    let sizes: Vec<u32> = GANG_SIZES
        .iter()
        .copied()
        .filter(|s| *s <= spec.max_gang_pods.max(1))
        .collect();
    let weights: Vec<f64> = sizes.iter().map(|&s| f64::from(s).powf(-0.8)).collect();
    let total_weight: f64 = weights.iter().sum();

    let mut out = SyntheticWorkload {
        nodes,
        queues,
        ..Default::default()
    };
    let mut index: u64 = 0;
    for j in 0..spec.jobs {
        if spec.max_pods > 0 && out.pods.len() >= spec.max_pods {
            break;
        }
        let mut draw = rng.random_range(0.0..total_weight);
        let mut size = sizes[sizes.len() - 1];
        for (s, w) in sizes.iter().zip(&weights) {
            if draw < *w {
                size = *s;
                break;
            }
            draw -= w;
        }
        let gpu_choices = [1, 2, 4, spec.gpus_per_node.max(1)];
        let gpus =
            gpu_choices[rng.random_range(0..gpu_choices.len())].min(spec.gpus_per_node.max(1));
        let share = gpus as f64 / spec.gpus_per_node.max(1) as f64;
        let cpu = ((CORES_PER_NODE as f64 * share * 0.9) as i64).max(1) * 1000;
        let memory = ((768.0 * share * 0.9) as i64).max(1) * GIB;
        let requests = Resources::from_pairs([(CPU, cpu), (MEMORY, memory), (GPU, gpus)]);
        let duration = spec
            .duration_ms
            .map(|(lo, hi)| rng.random_range(lo..=hi.max(lo)));

        let name = format!("job-{j:05}");
        let mut group = PodGroup::new(ObjectKey::new("default", &name), size);
        group.queue = queue_names[j % queue_names.len()].clone();
        group.min_resources = Some(requests.scaled(i64::from(size), 1));
        group.creation_index = index;
        index += 1;
        out.pod_groups.push(group);
        for p in 0..size {
            let mut pod = Pod::new(
                ObjectKey::new("default", format!("{name}-worker-{p}")),
                requests.clone(),
            );
            pod.scheduler_name = spec.scheduler_name.clone();
            pod.group = Some(name.clone());
            pod.task_role = Some("worker".into());
            pod.annotations
                .insert(GROUP_NAME_ANNOTATION.into(), name.clone());
            pod.annotations
                .insert(TASK_SPEC_ANNOTATION.into(), "worker".into());
            pod.creation_index = index;
            pod.sim_duration_ms = duration;
            index += 1;
            out.pods.push(pod);
        }
    }
    out
}
