//! What one scheduler replica plans in a cycle when the cluster is split into shards.
//!
//! A replica's session is projected from the round's shared view
//! ([`crate::framework::view`]): it holds the jobs of queues homed in shards it owns (it
//! allocates, backfills, preempts and reclaims for them; admission was decided once for
//! the whole cluster in the view), while shares (proportion, drf) still come from
//! whole-cluster usage and demand. The scope says which shards it owns and which nodes
//! form each shard's pool. Node choice with a scope: the gang's home pool first; a gang that does not
//! fit there is planned over the whole cluster (it then becomes a cross-shard transaction).
//! Preempt/reclaim choose victims over the whole cluster, as without shards: a queue's
//! deserved share is a whole-cluster quantity, and the queue above it may hold its GPUs in
//! any pool (often in gangs spanning pools). Victims only in the home pool were tried
//! first: with 4 shards the last queue to arrive got 0 % instead of 50 % of the GPUs
//! (`tests/fairness.rs`). The preemptor's replica performs the evictions; two replicas
//! naming the same victim in one round evict it once.

use std::collections::BTreeSet;

use phalanx_statestore::ledger::ShardId;

use crate::shard::ShardMap;

/// The shards a replica owns, with the map that says where queues and nodes belong.
#[derive(Clone, Debug)]
pub struct CycleScope {
    pub map: ShardMap,
    pub owned: BTreeSet<ShardId>,
    pub home_pool: HomePool,
}

impl CycleScope {
    pub fn new(map: ShardMap, owned: BTreeSet<ShardId>, home_pool: HomePool) -> Self {
        Self {
            map,
            owned,
            home_pool,
        }
    }
}

/// How strongly a gang's home pool is preferred.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HomePool {
    /// Only among the best-scored nodes: every node chosen scores as high as the unsharded
    /// planner's choice, so outcomes stay those of one shard (up to ties between nodes).
    #[default]
    AmongBest,
    /// The whole gang from its home pool when it fits there, else over the whole cluster
    /// (ARCHITECTURE "Shards"): fewest cross-shard transactions; node scores only rank
    /// nodes within the pool.
    Strict,
}

impl std::str::FromStr for HomePool {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "among-best" => Ok(Self::AmongBest),
            "strict" => Ok(Self::Strict),
            other => Err(format!(
                "--home-pool {other:?}: expected \"strict\" or \"among-best\""
            )),
        }
    }
}

/// A [`CycleScope`] resolved against one session's ids.
#[derive(Clone, Debug, Default)]
pub struct ResolvedScope {
    /// Per job: its home shard (the shard of its PodGroup's queue name).
    pub job_home: Vec<ShardId>,
    /// Per job: whether this replica owns its home shard (false for gangs lent as victims).
    pub job_owned: Vec<bool>,
    pub owned: BTreeSet<ShardId>,
    /// Per node: the shard whose pool holds it (shared by the round's sessions).
    pub node_shard: std::sync::Arc<Vec<ShardId>>,
    /// Per shard: the nodes of its pool, in id order (shared by the round's sessions).
    pub pools: std::sync::Arc<Vec<Vec<crate::framework::NodeId>>>,
    /// More than one shard: the home pool is a strict part of the cluster.
    pub split: bool,
    pub home_pool: HomePool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::{Cluster, name_in, two_shards, weighted_queue};
    use crate::framework::{SchedulerConf, run_cycle_scoped};
    use crate::model::resources::{CPU, GPU};

    fn empty_labels() -> std::collections::BTreeMap<String, String> {
        std::collections::BTreeMap::new()
    }

    #[test]
    fn a_scoped_cycle_places_only_the_gangs_of_the_shards_it_owns() {
        let map = two_shards();
        let qa = name_in("qa", 0, |q| map.shard_of_queue(q));
        let qb = name_in("qb", 1, |q| map.shard_of_queue(q));
        let snapshot = Cluster::new()
            .node("n1", &[(CPU, 8_000), (GPU, 8)])
            .queue(weighted_queue(&qa, 1))
            .queue(weighted_queue(&qb, 1))
            .inqueue_group("ga", &qa, 1)
            .pod("ga-0", Some("ga"), &[(CPU, 1_000), (GPU, 1)])
            .inqueue_group("gb", &qb, 1)
            .pod("gb-0", Some("gb"), &[(CPU, 1_000), (GPU, 1)])
            .build();
        let conf = SchedulerConf::volcano_default();
        let scope = CycleScope::new(map, [0].into(), HomePool::AmongBest);
        let (plan, _) = run_cycle_scoped(
            &snapshot,
            &conf,
            crate::model::DEFAULT_SCHEDULER_NAME,
            Some(&scope),
        );
        let gangs: Vec<&str> = plan.gangs.iter().map(|g| g.gang.name.as_str()).collect();
        assert_eq!(gangs, ["ga"]);
        assert!(
            plan.status_updates.iter().all(|(k, _)| k.name == "ga"),
            "{:?}",
            plan.status_updates
        );
    }

    /// Where the scoped cycle and the unscoped one place the one-pod gang, with the names
    /// of the home and the other node (the home node is half used).
    fn placed_on(home_pool: HomePool) -> (String, String, String) {
        let map = two_shards();
        let q = name_in("q", 0, |q| map.shard_of_queue(q));
        let home = name_in("n", 0, |n| map.shard_of_node(n, &empty_labels()));
        let away = name_in("n", 1, |n| map.shard_of_node(n, &empty_labels()));
        let snapshot = Cluster::new()
            .node(&home, &[(CPU, 8_000), (GPU, 8)])
            .node(&away, &[(CPU, 8_000), (GPU, 8)])
            .queue(weighted_queue(&q, 1))
            .running_pod("busy", None, &home, &[(CPU, 4_000), (GPU, 4)])
            .inqueue_group("g", &q, 1)
            .pod("g-0", Some("g"), &[(CPU, 1_000), (GPU, 1)])
            .build();
        let conf = SchedulerConf::volcano_default();
        let scope = CycleScope::new(map, [0].into(), home_pool);
        let name = crate::model::DEFAULT_SCHEDULER_NAME;
        let (plan, _) = run_cycle_scoped(&snapshot, &conf, name, Some(&scope));
        let (unscoped, _) = crate::framework::run_cycle(&snapshot, &conf, name);
        (
            plan.gangs[0].placements[0].node.clone(),
            unscoped.gangs[0].placements[0].node.clone(),
            home,
        )
    }

    #[test]
    fn strict_home_pool_places_a_gang_that_fits_there_in_its_home_pool() {
        let (node, _, home) = placed_on(HomePool::Strict);
        assert_eq!(node, home);
    }

    #[test]
    fn among_best_chooses_a_node_scoring_as_high_as_the_unsharded_choice() {
        let (scoped, unscoped, _) = placed_on(HomePool::AmongBest);
        assert_eq!(scoped, unscoped);
    }

    /// Bug fixed: `pick_preferring` returned no node at all when the home pool had no
    /// feasible node, so gangs of queues whose shard has an empty pool were never placed.
    #[test]
    fn a_gang_whose_home_pool_has_no_node_is_placed_in_another_pool() {
        let map = two_shards();
        let q = name_in("q", 0, |q| map.shard_of_queue(q));
        let away = name_in("n", 1, |n| map.shard_of_node(n, &empty_labels()));
        for home_pool in [HomePool::AmongBest, HomePool::Strict] {
            let snapshot = Cluster::new()
                .node(&away, &[(CPU, 8_000), (GPU, 8)])
                .queue(weighted_queue(&q, 1))
                .inqueue_group("g", &q, 2)
                .pod("g-0", Some("g"), &[(CPU, 1_000), (GPU, 1)])
                .pod("g-1", Some("g"), &[(CPU, 1_000), (GPU, 1)])
                .build();
            let scope = CycleScope::new(map.clone(), [0].into(), home_pool);
            let (plan, _) = run_cycle_scoped(
                &snapshot,
                &SchedulerConf::volcano_default(),
                crate::model::DEFAULT_SCHEDULER_NAME,
                Some(&scope),
            );
            assert_eq!(plan.bind_count(), 2, "{home_pool:?}");
        }
    }

    /// Bug fixed: with `Strict`, an elastic gang already at `minMember` "succeeded" in its
    /// full home pool with nothing placed, so its other members were never tried elsewhere.
    #[test]
    fn a_ready_elastic_gang_whose_home_pool_is_full_grows_in_another_pool() {
        let map = two_shards();
        let q = name_in("q", 0, |q| map.shard_of_queue(q));
        let home = name_in("n", 0, |n| map.shard_of_node(n, &empty_labels()));
        let away = name_in("n", 1, |n| map.shard_of_node(n, &empty_labels()));
        let snapshot = Cluster::new()
            .node(&home, &[(CPU, 8_000), (GPU, 1)])
            .node(&away, &[(CPU, 8_000), (GPU, 8)])
            .queue(weighted_queue(&q, 1))
            .inqueue_group("g", &q, 1)
            .running_pod("g-0", Some("g"), &home, &[(CPU, 1_000), (GPU, 1)])
            .pod("g-1", Some("g"), &[(CPU, 1_000), (GPU, 1)])
            .build();
        let scope = CycleScope::new(map, [0].into(), HomePool::Strict);
        let (plan, _) = run_cycle_scoped(
            &snapshot,
            &SchedulerConf::volcano_default(),
            crate::model::DEFAULT_SCHEDULER_NAME,
            Some(&scope),
        );
        assert_eq!(plan.bind_count(), 1);
        assert_eq!(plan.gangs[0].placements[0].node, away);
    }

    #[test]
    fn home_pool_flag_values_are_parsed_and_a_bad_one_is_named() {
        assert_eq!("strict".parse::<HomePool>(), Ok(HomePool::Strict));
        assert_eq!("among-best".parse::<HomePool>(), Ok(HomePool::AmongBest));
        let err = "nearest".parse::<HomePool>().expect_err("invalid");
        assert!(
            err.contains("--home-pool") && err.contains("nearest"),
            "{err}"
        );
    }
}
