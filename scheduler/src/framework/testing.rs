//! Test helpers: a [`ClusterSnapshot`] built from model objects in a few lines, and a
//! [`Session`] opened on it, so plugin and framework tests can state their cluster the way a
//! scenario would, without YAML.
//!
//! ```text
//! let session = Cluster::new()
//!     .node("n1", &[(CPU, 8_000), (GPU, 4)])
//!     .queue(Queue::new("q"))
//!     .group("job", "q", 2)
//!     .pod("job-0", Some("job"), &[(GPU, 1)])
//!     .session(&SchedulerConf::volcano_default());
//! ```
//!
//! Amounts are in the model's units: `cpu` in millicores, `memory` in bytes, others whole.

use std::sync::Arc;

use crate::cluster::ClusterSnapshot;
use crate::framework::conf::SchedulerConf;
use crate::framework::session::Session;
use crate::model::{
    DEFAULT_QUEUE, Node, ObjectKey, Pod, PodGroup, PodGroupPhase, PodPhase, Queue, Resources,
};

/// A resource vector from (name, amount) pairs in model units.
pub fn res(pairs: &[(&str, i64)]) -> Resources {
    Resources::from_pairs(pairs.iter().copied())
}

/// Plugin arguments from `(key, value)` pairs, as a `volcano-scheduler.conf` tier gives them.
pub fn args(pairs: &[(&str, &str)]) -> crate::framework::conf::Arguments {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Builds a [`ClusterSnapshot`]; objects get creation indexes in the order they are added.
/// The `default` queue exists unless a queue of that name is added.
#[derive(Debug, Default)]
pub struct Cluster {
    snapshot: ClusterSnapshot,
    next_index: u64,
}

impl Cluster {
    pub fn new() -> Self {
        Self::default()
    }

    fn index(&mut self) -> u64 {
        self.next_index += 1;
        self.next_index
    }

    pub fn node(self, name: &str, allocatable: &[(&str, i64)]) -> Self {
        self.node_with(Node::new(name, res(allocatable)))
    }

    pub fn node_with(mut self, node: Node) -> Self {
        self.snapshot.nodes.push(Arc::new(node));
        self
    }

    pub fn queue(mut self, mut queue: Queue) -> Self {
        queue.creation_index = self.index();
        self.snapshot.queues.push(queue);
        self
    }

    /// A PodGroup in `default/` with the given queue and `minMember`, phase Pending.
    pub fn group(self, name: &str, queue: &str, min_member: u32) -> Self {
        let mut group = PodGroup::new(ObjectKey::new("default", name), min_member);
        group.queue = queue.to_string();
        self.group_with(group)
    }

    /// A PodGroup that is already `Inqueue` (admitted), so `allocate` places it at once.
    pub fn inqueue_group(self, name: &str, queue: &str, min_member: u32) -> Self {
        let mut group = PodGroup::new(ObjectKey::new("default", name), min_member);
        group.queue = queue.to_string();
        group.status.phase = PodGroupPhase::Inqueue;
        self.group_with(group)
    }

    pub fn group_with(mut self, mut group: PodGroup) -> Self {
        group.creation_index = self.index();
        self.snapshot.pod_groups.push(Arc::new(group));
        self
    }

    /// A pending pod in `default/`, placed by phalanx, in `group` when given.
    pub fn pod(self, name: &str, group: Option<&str>, requests: &[(&str, i64)]) -> Self {
        let mut pod = Pod::new(ObjectKey::new("default", name), res(requests));
        pod.group = group.map(str::to_string);
        self.pod_with(pod)
    }

    /// A pod already running on `node`.
    pub fn running_pod(
        self,
        name: &str,
        group: Option<&str>,
        node: &str,
        requests: &[(&str, i64)],
    ) -> Self {
        let mut pod = Pod::new(ObjectKey::new("default", name), res(requests));
        pod.group = group.map(str::to_string);
        pod.node_name = Some(node.to_string());
        pod.phase = PodPhase::Running;
        self.pod_with(pod)
    }

    pub fn pod_with(mut self, mut pod: Pod) -> Self {
        pod.creation_index = self.index();
        self.snapshot.pods.push(Arc::new(pod));
        self
    }

    pub fn build(mut self) -> ClusterSnapshot {
        if !self.snapshot.queues.iter().any(|q| q.name == DEFAULT_QUEUE) {
            self.snapshot.queues.insert(0, Queue::new(DEFAULT_QUEUE));
        }
        self.snapshot
    }

    /// Opens a session on the snapshot for the default scheduler name.
    pub fn session(self, conf: &SchedulerConf) -> Session {
        Session::open(&self.build(), conf, crate::model::DEFAULT_SCHEDULER_NAME)
    }
}

/// A queue with a weight.
pub fn weighted_queue(name: &str, weight: u32) -> Queue {
    let mut q = Queue::new(name);
    q.weight = weight;
    q
}

/// A map of two shards (default hashing), for scoped-session tests.
pub fn two_shards() -> crate::shard::ShardMap {
    crate::shard::ShardMap::new(crate::shard::ShardingConfig {
        shards: 2,
        ..crate::shard::ShardingConfig::default()
    })
    .expect("two shards is a valid sharding")
}

/// The first name `prefix-N` whose shard (by `shard_of`) is `shard`: queue and node names
/// are hashed to shards, so a test finds names that land where it needs them.
pub fn name_in(
    prefix: &str,
    shard: phalanx_statestore::ledger::ShardId,
    shard_of: impl Fn(&str) -> phalanx_statestore::ledger::ShardId,
) -> String {
    (0..1000)
        .map(|i| format!("{prefix}-{i}"))
        .find(|n| shard_of(n) == shard)
        .expect("some name hashes to each shard")
}
