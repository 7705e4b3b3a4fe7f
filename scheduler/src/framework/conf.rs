//! The scheduler configuration: Volcano's `volcano-scheduler.conf` (actions + plugin tiers),
//! as a validated value. Parsing lives in `manifest::scheduler_conf`; this is the result.

use std::collections::BTreeMap;

/// Actions phalanx implements, in the order they are usually listed.
pub const KNOWN_ACTIONS: &[&str] = &["enqueue", "allocate", "preempt", "reclaim", "backfill"];

/// Plugins phalanx implements.
pub const KNOWN_PLUGINS: &[&str] = &[
    "priority",
    "gang",
    "conformance",
    "drf",
    "predicates",
    "proportion",
    "capacity",
    "nodeorder",
    "binpack",
    "overcommit",
];

/// The default configuration, used when a workload carries no scheduler ConfigMap. It is
/// Volcano's default plugin tiers (priority/gang/conformance in the first tier and
/// overcommit/drf/predicates/proportion/nodeorder in the second) with preempt and reclaim
/// switched ON, in the order Volcano documents (`enqueue, allocate, preempt, reclaim,
/// backfill`); docs/configuration.md says why.
pub const DEFAULT_CONF: &str = r#"
actions: "enqueue, allocate, preempt, reclaim, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
"#;

/// A validated scheduler configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerConf {
    /// Action names in run order, each one of [`KNOWN_ACTIONS`].
    pub actions: Vec<String>,
    pub tiers: Vec<Tier>,
    /// Per-action arguments (`configurations: - name: allocate, arguments: {...}`).
    pub action_arguments: BTreeMap<String, Arguments>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tier {
    pub plugins: Vec<PluginOption>,
}

/// One plugin entry of a tier. Each `enable*` flag of Volcano's is `None` when the config
/// does not mention it, which means enabled (Volcano's rule).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PluginOption {
    pub name: String,
    pub hooks: HookFlags,
    pub arguments: Arguments,
}

/// Volcano's per-plugin switches, with Volcano's YAML spellings in the comments (they are
/// inconsistent upstream: `enablePreemptable` but `enabledOverused`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HookFlags {
    pub job_order: Option<bool>,       // enableJobOrder
    pub namespace_order: Option<bool>, // enableNamespaceOrder
    pub hierarchy: Option<bool>,       // enableHierarchy
    pub job_ready: Option<bool>,       // enableJobReady
    pub job_pipelined: Option<bool>,   // enableJobPipelined
    pub task_order: Option<bool>,      // enableTaskOrder
    pub preemptable: Option<bool>,     // enablePreemptable
    pub reclaimable: Option<bool>,     // enableReclaimable
    pub preemptive: Option<bool>,      // enablePreemptive
    pub queue_order: Option<bool>,     // enableQueueOrder
    pub cluster_order: Option<bool>,   // EnabledClusterOrder
    pub predicate: Option<bool>,       // enablePredicate
    pub best_node: Option<bool>,       // enableBestNode
    pub node_order: Option<bool>,      // enableNodeOrder
    pub target_job: Option<bool>,      // enableTargetJob
    pub reserved_nodes: Option<bool>,  // enableReservedNodes
    pub job_enqueued: Option<bool>,    // enableJobEnqueued
    pub victim: Option<bool>,          // enabledVictim
    pub job_starving: Option<bool>,    // enableJobStarving
    pub overused: Option<bool>,        // enabledOverused
    pub allocatable: Option<bool>,     // enabledAllocatable
}

/// Plugin or action arguments: Volcano passes them as strings (`binpack.weight: 10`).
pub type Arguments = BTreeMap<String, String>;

/// Reads a typed argument; a value that does not parse is reported by the validator, so
/// here it falls back to the default.
pub fn argument<T: std::str::FromStr>(args: &Arguments, key: &str, default: T) -> T {
    args.get(key)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

impl SchedulerConf {
    /// A configuration from action names and tiers of plugin names, every hook enabled and
    /// no arguments. For tests, benchmarks and built-in demos.
    pub fn from_names(actions: &[&str], tiers: &[&[&str]]) -> Self {
        SchedulerConf {
            actions: actions.iter().map(|a| a.to_string()).collect(),
            tiers: tiers
                .iter()
                .map(|names| Tier {
                    plugins: names
                        .iter()
                        .map(|n| PluginOption {
                            name: n.to_string(),
                            ..Default::default()
                        })
                        .collect(),
                })
                .collect(),
            action_arguments: BTreeMap::new(),
        }
    }

    /// [`DEFAULT_CONF`] as a value (a test checks that the two agree).
    pub fn volcano_default() -> Self {
        Self::from_names(
            &["enqueue", "allocate", "preempt", "reclaim", "backfill"],
            &[
                &["priority", "gang", "conformance"],
                &["overcommit", "drf", "predicates", "proportion", "nodeorder"],
            ],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_text_and_the_default_value_agree() {
        let parsed = crate::manifest::scheduler_conf::default_scheduler_conf();
        assert_eq!(parsed, SchedulerConf::volcano_default());
    }
}
