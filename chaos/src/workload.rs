//! The seeded workload: gangs (a PodGroup and its pods) of drawn sizes, GPUs, queues and
//! priorities, created at a set rate, a few that can never fit; gangs whose pods all
//! finished are deleted, and so are gangs that never got a pod bound in `give_up_ms`, so the
//! cluster stays busy without filling up. The sequence of gangs is a function of the seed;
//! when each is created depends on the wall clock and the cluster.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use kube::core::DynamicObject;
use phalanx_scheduler::cluster::kube::volcano_resource;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use crate::recorder::{GPU, GROUP_ANNOTATION, Live, group_counts};

/// The PriorityClasses gangs are drawn from (created by the harness).
pub const PRIORITIES: [(&str, i32); 2] = [("chaos-low", 100), ("chaos-high", 1000)];

/// One gang to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GangSpec {
    pub name: String,
    pub queue: String,
    pub pods: u32,
    pub gpus: u32,
    pub priority: &'static str,
    /// How long each pod runs once Running (kwok's `phalanx.dev/sim-duration`).
    pub run_ms: u64,
}

/// Draws gangs from a seed: mostly 1-4 pods of 1, 2 or 4 GPUs; about 1 in 8 a wide gang
/// (6 pods of 4 GPUs: more than one shard's pool, so two-phase placement); about 1 in 16
/// one that never fits (a 16-GPU pod on 8-GPU nodes, or more GPUs than the cluster).
#[derive(Debug)]
pub struct Generator {
    rng: ChaCha8Rng,
    queues: Vec<String>,
    next: u64,
}

impl Generator {
    pub fn new(seed: u64, queues: Vec<String>) -> Self {
        Self {
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x9a1a_4e55),
            queues,
            next: 0,
        }
    }

    pub fn draw(&mut self) -> GangSpec {
        let r = &mut self.rng;
        let kind = r.random_range(0..16u32);
        let (pods, gpus, tag) = match kind {
            0 if r.random_bool(0.5) => (1, 16, "never"),
            0 => (20, 8, "never"),
            1 | 2 => (6, 4, "wide"),
            _ => (
                r.random_range(1..=4),
                [1, 2, 4][r.random_range(0..3usize)],
                "g",
            ),
        };
        let queue = self.queues[r.random_range(0..self.queues.len())].clone();
        let priority = PRIORITIES[r.random_range(0..PRIORITIES.len())].0;
        let run_ms = r.random_range(1500..5000);
        self.next += 1;
        GangSpec {
            name: format!("{tag}-{:05}", self.next),
            queue,
            pods,
            gpus,
            priority,
            run_ms,
        }
    }
}

/// Creates `g` in `ns`: its PodGroup, then its pods.
pub async fn create_gang(client: &kube::Client, ns: &str, g: &GangSpec) -> anyhow::Result<()> {
    let groups: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &volcano_resource("PodGroup", "podgroups"),
    );
    let pg: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": g.name, "namespace": ns},
        "spec": {"minMember": g.pods, "queue": g.queue, "priorityClassName": g.priority},
    }))?;
    groups
        .create(&PostParams::default(), &pg)
        .await
        .map_err(|e| anyhow::anyhow!("creating PodGroup {ns}/{}: {e}", g.name))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let gpus = g.gpus.to_string();
    for i in 0..g.pods {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{}-{i}", g.name), "namespace": ns,
                "annotations": {GROUP_ANNOTATION: g.name, "volcano.sh/task-spec": "worker",
                    "phalanx.dev/sim-duration": format!("{}ms", g.run_ms)}},
            "spec": {"schedulerName": "phalanx", "priorityClassName": g.priority,
                "containers": [{"name": "main", "image": "phalanx-chaos:fake",
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi", GPU: gpus},
                                  "limits": {GPU: gpus}}}]},
        }))?;
        pods.create(&PostParams::default(), &pod)
            .await
            .map_err(|e| anyhow::anyhow!("creating pod {ns}/{}-{i}: {e}", g.name))?;
    }
    Ok(())
}

/// Deletes a gang's pods (at once) and its PodGroup; what is already gone is fine.
pub async fn delete_gang(client: &kube::Client, ns: &str, name: &str, pods: usize) {
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    for i in 0..pods {
        let _ = api.delete(&format!("{name}-{i}"), &now).await;
    }
    let groups: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &volcano_resource("PodGroup", "podgroups"),
    );
    let _ = groups.delete(name, &now).await;
}

/// How the workload runs.
#[derive(Debug, Clone)]
pub struct WorkloadConfig {
    pub ns: String,
    pub interval_ms: u64,
    pub max_in_flight: usize,
    pub give_up_ms: u64,
}

/// What the workload did.
#[derive(Debug, Default)]
pub struct WorkloadStats {
    pub created: AtomicU64,
    pub finished: AtomicU64,
    pub given_up: AtomicU64,
    pub errors: AtomicU64,
}

/// Creates a gang every `interval_ms` while fewer than `max_in_flight` are in flight, and
/// cleans up, until `stop` is set.
pub async fn run(
    client: kube::Client,
    config: WorkloadConfig,
    mut gangs: Generator,
    live: Live,
    stop: Arc<AtomicBool>,
    stats: Arc<WorkloadStats>,
) {
    // Gang -> (pods, ticks since created).
    let mut in_flight: BTreeMap<String, (u32, u64)> = BTreeMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(config.interval_ms));
    let give_up_ticks = config.give_up_ms / config.interval_ms.max(1);
    while !stop.load(Ordering::SeqCst) {
        tick.tick().await;
        let counts = group_counts(&live);
        let mut done = Vec::new();
        for (name, (pods, age)) in in_flight.iter_mut() {
            *age += 1;
            let key = format!("{}/{name}", config.ns);
            let (seen, bound, finished) = counts.get(&key).copied().unwrap_or_default();
            if seen == *pods as usize && finished == seen {
                done.push((name.clone(), *pods, &stats.finished));
            } else if bound == 0 && *age > give_up_ticks {
                done.push((name.clone(), *pods, &stats.given_up));
            }
        }
        for (name, pods, counter) in done {
            delete_gang(&client, &config.ns, &name, pods as usize).await;
            in_flight.remove(&name);
            counter.fetch_add(1, Ordering::Relaxed);
        }
        if in_flight.len() < config.max_in_flight {
            let g = gangs.draw();
            match create_gang(&client, &config.ns, &g).await {
                Ok(()) => {
                    stats.created.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => {
                    stats.errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            // Even a half-created gang is cleaned up as one.
            in_flight.insert(g.name.clone(), (g.pods, 0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_gangs_and_another_seed_does_not() {
        let queues = vec!["a".to_string(), "b".to_string()];
        let draw = |seed| {
            let mut g = Generator::new(seed, queues.clone());
            (0..50).map(|_| g.draw()).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn the_mix_has_small_wide_and_never_fitting_gangs_in_every_queue() {
        let queues: Vec<String> = (0..4).map(|q| format!("q{q}")).collect();
        let mut g = Generator::new(1, queues.clone());
        let gangs: Vec<GangSpec> = (0..400).map(|_| g.draw()).collect();
        let never = gangs.iter().filter(|g| g.name.starts_with("never")).count();
        let wide = gangs.iter().filter(|g| g.name.starts_with("wide")).count();
        assert!((10..50).contains(&never), "{never} never-fitting of 400");
        assert!((25..90).contains(&wide), "{wide} wide of 400");
        for q in &queues {
            assert!(gangs.iter().any(|g| &g.queue == q), "no gang in {q}");
        }
        assert!(gangs.iter().any(|g| g.priority == "chaos-high"));
        assert!(gangs.iter().any(|g| g.priority == "chaos-low"));
        assert!(gangs.iter().all(|g| g.pods >= 1 && g.gpus >= 1));
    }
}
