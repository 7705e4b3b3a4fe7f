//! `ShardMap`: queues and nodes to shards, by a stable hash or explicit assignment.
//!
//! The hash is FNV-1a 64 over the UTF-8 bytes of the name (the same function the ledger
//! uses for fingerprints) followed by MurmurHash3's 64-bit finalizer `fmix64`, reduced to a
//! shard by the high bits: `shard = (hash as u128 * shards as u128) >> 64`. The finalizer
//! is needed: FNV-1a alone mixes the last bytes poorly into its high bits (names that
//! differ in a trailing digit cluster) and its low bits depend only on the low bits of
//! each byte. All three steps are fixed arithmetic, identical on every platform. Never
//! `std`'s `DefaultHasher`: it is randomly keyed per process, so two replicas would
//! disagree.

use std::collections::BTreeMap;

use phalanx_statestore::ledger::ShardId;
use phalanx_statestore::ledger::state::fnv1a64;
use thiserror::Error;

use crate::model::Node;

/// Most shards a cluster may be split into.
pub const MAX_SHARDS: u32 = 1024;
/// Most queues that may be assigned explicitly.
pub const MAX_EXPLICIT_QUEUES: usize = 65_536;
/// Longest label key Kubernetes allows: a 253-character prefix, `/`, a 63-character name.
const MAX_LABEL_KEY_LEN: usize = 253 + 1 + 63;

/// How the cluster is split into shards (a config value, validated once).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardingConfig {
    /// Number of shards, `1..=1024`.
    pub shards: u32,
    /// Node label whose value decides a node's shard (e.g. `topology.kubernetes.io/zone`),
    /// so a topology domain stays in one shard. Nodes without it go by their name.
    pub by_label: Option<String>,
    /// Queue name -> shard, overriding the hash.
    pub explicit_queues: BTreeMap<String, u32>,
}

impl Default for ShardingConfig {
    fn default() -> Self {
        Self {
            shards: 1,
            by_label: None,
            explicit_queues: BTreeMap::new(),
        }
    }
}

/// A sharding config that cannot be used; each variant names the offending value.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ShardingError {
    /// The shard count is outside `1..=1024`.
    #[error("sharding.shards: {shards} is outside 1..={MAX_SHARDS}")]
    ShardCount {
        /// The configured count.
        shards: u32,
    },
    /// The label key is not a valid Kubernetes label key.
    #[error("sharding.byLabel: {label:?} is not a label key: {why}")]
    InvalidLabel {
        /// The configured key.
        label: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// An explicit assignment names a shard that does not exist.
    #[error("sharding.explicitQueues.{queue}: shard {shard} >= shard count {shards}")]
    ExplicitShardOutOfRange {
        /// Queue name.
        queue: String,
        /// The shard it is assigned to.
        shard: u32,
        /// The shard count.
        shards: u32,
    },
    /// An explicit assignment has an empty queue name.
    #[error("sharding.explicitQueues: a queue name is empty")]
    EmptyQueueName,
    /// Too many explicit assignments.
    #[error("sharding.explicitQueues: {count} entries exceed the limit {MAX_EXPLICIT_QUEUES}")]
    TooManyExplicitQueues {
        /// How many were configured.
        count: usize,
    },
}

impl ShardingConfig {
    /// Checks every field; the error names the first offending value.
    pub fn validate(self) -> Result<ShardingConfig, ShardingError> {
        if self.shards == 0 || self.shards > MAX_SHARDS {
            return Err(ShardingError::ShardCount {
                shards: self.shards,
            });
        }
        if let Some(label) = &self.by_label
            && let Err(why) = check_label_key(label)
        {
            return Err(ShardingError::InvalidLabel {
                label: label.clone(),
                why,
            });
        }
        if self.explicit_queues.len() > MAX_EXPLICIT_QUEUES {
            return Err(ShardingError::TooManyExplicitQueues {
                count: self.explicit_queues.len(),
            });
        }
        for (queue, shard) in &self.explicit_queues {
            if queue.is_empty() {
                return Err(ShardingError::EmptyQueueName);
            }
            if *shard >= self.shards {
                return Err(ShardingError::ExplicitShardOutOfRange {
                    queue: queue.clone(),
                    shard: *shard,
                    shards: self.shards,
                });
            }
        }
        Ok(self)
    }
}

/// A Kubernetes label key: optional DNS-subdomain prefix and `/`, then a name of 1..=63
/// characters `[A-Za-z0-9._-]` that starts and ends alphanumeric.
fn check_label_key(key: &str) -> Result<(), &'static str> {
    if key.is_empty() {
        return Err("empty");
    }
    if key.len() > MAX_LABEL_KEY_LEN {
        return Err("longer than 317 characters");
    }
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        let ok = !p.is_empty()
            && p.len() <= 253
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !ok {
            return Err("prefix must be a DNS subdomain (lowercase, digits, '-', '.')");
        }
    }
    let bytes = name.as_bytes();
    let edge_ok = |b: Option<&u8>| b.is_some_and(u8::is_ascii_alphanumeric);
    if name.is_empty() || name.len() > 63 {
        return Err("name must be 1..=63 characters");
    }
    if !edge_ok(bytes.first()) || !edge_ok(bytes.last()) {
        return Err("name must start and end with a letter or digit");
    }
    if !bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err("name may hold only letters, digits, '-', '_', '.'");
    }
    Ok(())
}

/// The stable hash every replica agrees on: `fmix64(fnv1a64(utf8 bytes))`.
pub fn stable_hash(name: &str) -> u64 {
    fmix64(fnv1a64(name.as_bytes()))
}

/// MurmurHash3's 64-bit finalizer: every input bit affects every output bit.
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

/// Reduces a hash to `0..shards` by its high bits (multiply-shift).
fn reduce(hash: u64, shards: u32) -> ShardId {
    let shard = (u128::from(hash) * u128::from(shards)) >> 64;
    u32::try_from(shard).expect("(h * n) >> 64 < n for h < 2^64, and n is a u32")
}

/// Queues and nodes to shards; built from a validated [`ShardingConfig`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardMap {
    shards: u32,
    by_label: Option<String>,
    explicit_queues: BTreeMap<String, u32>,
}

impl ShardMap {
    /// Validates `config` and builds the map.
    pub fn new(config: ShardingConfig) -> Result<Self, ShardingError> {
        let c = config.validate()?;
        Ok(Self {
            shards: c.shards,
            by_label: c.by_label,
            explicit_queues: c.explicit_queues,
        })
    }

    /// Number of shards.
    pub fn shard_count(&self) -> u32 {
        self.shards
    }

    /// Every shard id, `0..shard_count`.
    pub fn shards(&self) -> impl Iterator<Item = ShardId> {
        0..self.shards
    }

    /// The label that groups nodes, if any.
    pub fn by_label(&self) -> Option<&str> {
        self.by_label.as_deref()
    }

    /// The shard whose owner schedules `queue`: its explicit assignment, else its hash.
    pub fn shard_of_queue(&self, queue: &str) -> ShardId {
        match self.explicit_queues.get(queue) {
            Some(shard) => *shard,
            None => reduce(stable_hash(queue), self.shards),
        }
    }

    /// The shard whose pool holds the node: the hash of its `by_label` value when it has
    /// that label, else the hash of its name.
    pub fn shard_of_node(&self, name: &str, labels: &BTreeMap<String, String>) -> ShardId {
        let value = self.by_label.as_ref().and_then(|key| labels.get(key));
        match value {
            Some(v) => reduce(stable_hash(v), self.shards),
            None => reduce(stable_hash(name), self.shards),
        }
    }

    /// [`ShardMap::shard_of_node`] for a model node.
    pub fn shard_of(&self, node: &Node) -> ShardId {
        self.shard_of_node(&node.name, &node.labels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(shards: u32) -> ShardMap {
        ShardMap::new(ShardingConfig {
            shards,
            ..ShardingConfig::default()
        })
        .unwrap()
    }

    fn zone_map(shards: u32) -> ShardMap {
        ShardMap::new(ShardingConfig {
            shards,
            by_label: Some("topology.kubernetes.io/zone".into()),
            explicit_queues: BTreeMap::new(),
        })
        .unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_hash_is_fnv1a_64_with_its_published_test_vectors_then_fmix64() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(fmix64(0), 0, "fmix64 fixes zero");
        assert_eq!(stable_hash("a"), fmix64(0xaf63_dc4c_8601_ec8c));
        assert_eq!(stable_hash("a"), GOLDEN_HASH_A);
    }

    const GOLDEN_HASH_A: u64 = 0x82a2_a958_a9be_ce5b;

    #[test]
    fn queue_and_node_shards_are_pinned_golden_values() {
        let m = map(16);
        let queues: Vec<ShardId> = ["default", "research", "prod-training", "team-a"]
            .iter()
            .map(|q| m.shard_of_queue(q))
            .collect();
        let nodes: Vec<ShardId> = ["gpu-0", "gpu-1", "node-0001", "node-4999"]
            .iter()
            .map(|n| m.shard_of_node(n, &BTreeMap::new()))
            .collect();
        assert_eq!(queues, GOLDEN_QUEUES_16);
        assert_eq!(nodes, GOLDEN_NODES_16);
    }

    /// Pinned values (also reproduced by an independent Python implementation when written);
    /// a change here means every replica's shard map changed.
    const GOLDEN_QUEUES_16: [ShardId; 4] = [13, 13, 8, 14];
    const GOLDEN_NODES_16: [ShardId; 4] = [13, 6, 1, 8];

    #[test]
    fn one_shard_maps_everything_to_shard_zero() {
        let m = map(1);
        assert_eq!(m.shard_of_queue("anything"), 0);
        assert_eq!(m.shard_of_node("n", &BTreeMap::new()), 0);
    }

    #[test]
    fn five_thousand_names_spread_across_shards_within_a_quarter_of_the_mean() {
        for shards in [2u32, 3, 8, 16, 32] {
            let m = map(shards);
            let mut counts = vec![0usize; shards as usize];
            for i in 0..5000 {
                counts[m.shard_of_queue(&format!("queue-{i}")) as usize] += 1;
            }
            let mean = 5000.0 / f64::from(shards);
            for (s, c) in counts.iter().enumerate() {
                let off = (*c as f64 - mean).abs() / mean;
                assert!(
                    off < 0.25,
                    "{shards} shards: shard {s} has {c}, mean {mean}"
                );
            }
            let mut node_counts = vec![0usize; shards as usize];
            for i in 0..5000 {
                let n = format!("node-{i:04}");
                node_counts[m.shard_of_node(&n, &BTreeMap::new()) as usize] += 1;
            }
            for (s, c) in node_counts.iter().enumerate() {
                let off = (*c as f64 - mean).abs() / mean;
                assert!(off < 0.25, "{shards} shards: node shard {s} has {c}");
            }
        }
    }

    #[test]
    fn nodes_with_the_same_zone_label_land_in_the_same_shard() {
        let m = zone_map(8);
        for zone in ["us-east-1a", "us-east-1b", "eu-west-3c"] {
            let shards: std::collections::BTreeSet<ShardId> = (0..200)
                .map(|i| {
                    let l = labels(&[("topology.kubernetes.io/zone", zone)]);
                    m.shard_of_node(&format!("node-{zone}-{i}"), &l)
                })
                .collect();
            assert_eq!(shards.len(), 1, "zone {zone} split across {shards:?}");
            assert_eq!(
                shards.into_iter().next(),
                Some(m.shard_of_queue(zone)),
                "a label value is hashed like a name"
            );
        }
    }

    #[test]
    fn a_node_without_the_label_goes_by_its_name() {
        let m = zone_map(8);
        let other = labels(&[("rack", "r1")]);
        assert_eq!(
            m.shard_of_node("gpu-7", &other),
            map(8).shard_of_node("gpu-7", &BTreeMap::new())
        );
    }

    #[test]
    fn the_model_node_helper_uses_its_labels() {
        let m = zone_map(8);
        let mut n = Node::new("x", crate::model::Resources::default());
        n.labels = labels(&[("topology.kubernetes.io/zone", "z1")]);
        assert_eq!(m.shard_of(&n), m.shard_of_node("other", &n.labels));
    }

    #[test]
    fn an_explicit_queue_assignment_overrides_the_hash() {
        let mut explicit = BTreeMap::new();
        explicit.insert("prod".to_string(), 5);
        let m = ShardMap::new(ShardingConfig {
            shards: 8,
            by_label: None,
            explicit_queues: explicit,
        })
        .unwrap();
        assert_eq!(m.shard_of_queue("prod"), 5);
        assert_eq!(m.shard_of_queue("dev"), map(8).shard_of_queue("dev"));
    }

    #[test]
    fn a_shard_count_outside_1_to_1024_is_refused_naming_it() {
        for shards in [0, 1025] {
            let err = ShardingConfig {
                shards,
                ..ShardingConfig::default()
            }
            .validate()
            .unwrap_err();
            assert_eq!(err, ShardingError::ShardCount { shards });
            assert!(err.to_string().contains(&shards.to_string()));
        }
        assert!(map(1024).shard_count() == 1024);
    }

    #[test]
    fn an_explicit_shard_beyond_the_count_is_refused_naming_the_queue() {
        let mut explicit = BTreeMap::new();
        explicit.insert("prod".to_string(), 4);
        let err = ShardingConfig {
            shards: 4,
            by_label: None,
            explicit_queues: explicit,
        }
        .validate()
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "sharding.explicitQueues.prod: shard 4 >= shard count 4"
        );
    }

    #[test]
    fn a_malformed_label_key_is_refused_naming_it() {
        for bad in ["", "a/b/c", "Topology.io/zone", "zone-", "-zone", "a b"] {
            let err = ShardingConfig {
                shards: 2,
                by_label: Some(bad.into()),
                explicit_queues: BTreeMap::new(),
            }
            .validate()
            .unwrap_err();
            assert!(
                matches!(&err, ShardingError::InvalidLabel { label, .. } if label == bad),
                "{bad:?}: {err}"
            );
        }
        for good in ["topology.kubernetes.io/zone", "rack", "example.com/rack_id"] {
            assert!(
                ShardingConfig {
                    shards: 2,
                    by_label: Some(good.into()),
                    explicit_queues: BTreeMap::new(),
                }
                .validate()
                .is_ok(),
                "{good}"
            );
        }
    }

    #[test]
    fn an_empty_explicit_queue_name_is_refused() {
        let mut explicit = BTreeMap::new();
        explicit.insert(String::new(), 0);
        let err = ShardingConfig {
            shards: 2,
            by_label: None,
            explicit_queues: explicit,
        }
        .validate()
        .unwrap_err();
        assert_eq!(err, ShardingError::EmptyQueueName);
    }
}
