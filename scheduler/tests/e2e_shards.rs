//! End to end on the testbed, multi-active: three `phalanx serve --shards 6` processes on
//! one real kube-apiserver with 16 kwok nodes (8 GPUs each, in 4 zones). Every replica owns
//! shards and binds the gangs of its shards' queues; the owner of a shard is SIGKILLed
//! just after a placement of its shard was committed and before it was bound: its shards
//! move at a higher epoch and the placement is bound by the shard's next owner. A gang too
//! large for the pools of its home shard's owner is placed by two-phase reservation
//! between the processes (each replica serves `--coord-listen`, all know `--coord-peers`).
//! Last, the group is scaled 3 -> 5 -> 3 by `--peers` alone, as `helm upgrade --set
//! replicas=N` does: the leader adds and removes Raft members (`serve/membership.rs`).
//! Then an owner is SIGSTOPped past its lease and continued: its shards move, a write at
//! its lost fence is refused, and it binds nothing for a shard it no longer owns.
//! An owner whose binds outlast its lease (90 pods at 20 writes/s) keeps its shards: its
//! Lease is renewed apart from the cycle.
//!
//! Not part of `cargo test --workspace` (it needs the testbed): `.ci/run` runs it after
//! `e2e_kube`, on the same testbed:
//!
//! ```text
//! deploy/testbed/testbed up --nodes 16 --zones 4
//! cargo test --workspace --test e2e -- --ignored --nocapture e2e_shards::
//! ```

use crate::testbed;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::core::DynamicObject;
use phalanx_scheduler::cluster::kube::{BOUND_BY_ANNOTATION, volcano_resource};
use phalanx_scheduler::framework::{GangPlacement, Placement};
use phalanx_scheduler::ledger::sharded::{Fence, place_at};
use phalanx_scheduler::model::{ObjectKey, Resources};
use phalanx_scheduler::shard::{ShardMap, ShardingConfig};
use phalanx_statestore::{GangDecision, LedgerClient, LedgerResponse, Refusal};
use serde_json::json;
use testbed::{Check, DEADLINE, GPU, Replica, poll};

const SHARDS: u32 = 6;
const GPUS_PER_NODE: i64 = 8;
const LEASE_MS: u64 = 3000;

/// Shard -> (owner, epoch).
type Owners = BTreeMap<u32, (u64, u64)>;

/// One pod of a gang: its name, node (when bound) and `phalanx.dev/bound-by`.
struct GangPod {
    name: String,
    node: Option<String>,
    bound_by: Option<String>,
}

struct Env {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
    ns: String,
    map: ShardMap,
}

impl Env {
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// A Queue (cluster-scoped) whose home shard is `shard`: the first name
    /// `<ns>-s<shard>-<k>` that hashes there.
    fn queue_for(&self, shard: u32) -> Result<String, String> {
        testbed::queue_homed_on(&self.rt, &self.client, &self.map, &self.ns, shard)
    }

    /// A PodGroup in `queue` and `count` one-GPU pods scheduled by phalanx.
    fn create_gang(&self, name: &str, queue: &str, count: u32) -> Result<(), String> {
        self.create_gang_of(name, queue, count, 1)
    }

    fn pod_groups(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            &self.ns,
            &volcano_resource("PodGroup", "podgroups"),
        )
    }

    /// Deletes a gang's pods and PodGroup.
    fn delete_gang(&self, name: &str, count: u32) -> Result<(), String> {
        let now = kube::api::DeleteParams {
            grace_period_seconds: Some(0),
            ..kube::api::DeleteParams::default()
        };
        for i in 0..count {
            self.rt
                .block_on(self.pods().delete(&format!("{name}-{i}"), &now))
                .map_err(|e| format!("deleting pod {name}-{i}: {e}"))?;
        }
        self.rt
            .block_on(self.pod_groups().delete(name, &now))
            .map(|_| ())
            .map_err(|e| format!("deleting PodGroup {name}: {e}"))
    }

    /// A PodGroup in `queue` and `count` pods of `gpus` GPUs scheduled by phalanx.
    fn create_gang_of(&self, name: &str, queue: &str, count: u32, gpus: u32) -> Result<(), String> {
        let gpus = gpus.to_string();
        let groups = self.pod_groups();
        let pg: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {"minMember": count, "queue": queue},
        }))
        .map_err(|e| e.to_string())?;
        self.rt
            .block_on(groups.create(&PostParams::default(), &pg))
            .map_err(|e| format!("creating PodGroup {name}: {e}"))?;
        for i in 0..count {
            let pod: Pod = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{name}-{i}"), "namespace": self.ns,
                    "annotations": {"scheduling.k8s.io/group-name": name, "volcano.sh/task-spec": "worker"}},
                "spec": {"schedulerName": "phalanx",
                    "containers": [{"name": "main", "image": "phalanx-e2e:fake",
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi", GPU: gpus},
                                      "limits": {GPU: gpus}}}]},
            }))
            .map_err(|e| e.to_string())?;
            self.rt
                .block_on(self.pods().create(&PostParams::default(), &pod))
                .map_err(|e| format!("creating pod {name}-{i}: {e}"))?;
        }
        Ok(())
    }

    /// The test namespace's pods of `group`: (pod, node, bound-by).
    fn gang_pods(&self, group: &str) -> Result<Vec<GangPod>, String> {
        let pods = self
            .rt
            .block_on(self.pods().list(&ListParams::default()))
            .map_err(|e| e.to_string())?;
        Ok(pods
            .items
            .into_iter()
            .filter(|p| {
                p.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("scheduling.k8s.io/group-name"))
                    == Some(&group.to_string())
            })
            .map(|p| {
                let by = p
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(BOUND_BY_ANNOTATION).cloned());
                let node = p.spec.and_then(|s| s.node_name).filter(|n| !n.is_empty());
                GangPod {
                    name: p.metadata.name.unwrap_or_default(),
                    node,
                    bound_by: by,
                }
            })
            .collect())
    }

    /// Waits until every pod of `group` is bound; returns the replicas that bound them.
    fn wait_bound(&self, group: &str) -> Result<BTreeSet<String>, String> {
        poll(DEADLINE, &format!("{group}: every pod bound"), || {
            let pods = self.gang_pods(group)?;
            let all = !pods.is_empty() && pods.iter().all(|p| p.node.is_some());
            Ok(all.then(|| pods.into_iter().filter_map(|p| p.bound_by).collect()))
        })
    }

    /// Node -> shard of its pool, for the testbed's kwok nodes.
    fn pools(&self) -> Result<BTreeMap<String, u32>, String> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let list = self
            .rt
            .block_on(nodes.list(&ListParams::default().labels("type=kwok")))
            .map_err(|e| e.to_string())?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|n| {
                let name = n.metadata.name?;
                let labels = n.metadata.labels.unwrap_or_default();
                let shard = self.map.shard_of_node(&name, &labels);
                Some((name, shard))
            })
            .collect())
    }

    /// GPUs used per node by pods that hold it (any namespace).
    fn gpu_use(&self) -> Result<BTreeMap<String, i64>, String> {
        let all: Api<Pod> = Api::all(self.client.clone());
        let pods = self
            .rt
            .block_on(all.list(&ListParams::default()))
            .map_err(|e| e.to_string())?;
        Ok(testbed::gpu_use_of(&pods.items))
    }

    fn no_overcommit(&self) -> Result<(), String> {
        testbed::check_no_overcommit(&self.gpu_use()?, GPUS_PER_NODE)
    }
}

/// Shard -> (owner, epoch) as the live replicas' /metrics say (`phalanx_shard_epoch`),
/// once every shard has exactly one owner.
fn assignment(replicas: &[Replica]) -> Result<Option<Owners>, String> {
    assignment_among(replicas, |_| true)
}

/// [`assignment`] asked only of the live replicas that `ask` accepts (a SIGSTOPped one
/// does not answer its /metrics).
fn assignment_among(
    replicas: &[Replica],
    ask: impl Fn(&Replica) -> bool,
) -> Result<Option<Owners>, String> {
    let mut owners: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for r in replicas.iter().filter(|r| r.alive() && ask(r)) {
        for (shard, epoch) in r.owned_epochs()? {
            owners.entry(shard).or_default().push((r.id, epoch));
        }
    }
    let complete = (0..SHARDS).all(|s| owners.get(&s).is_some_and(|o| o.len() == 1));
    Ok(complete.then(|| owners.into_iter().map(|(s, o)| (s, o[0])).collect()))
}

/// A shard with nodes owned by a replica that does not lead Raft: (shard, (owner,
/// epoch)), so that a fault on its owner leaves the leader's duties alone.
fn follower_shard(
    replicas: &[Replica],
    owners: &Owners,
    pools: &BTreeMap<String, u32>,
) -> Result<(u32, (u64, u64)), String> {
    let leader = replicas.iter().find(|r| r.is_leader()).map(|r| r.id);
    owners
        .iter()
        .find(|(s, (o, _))| Some(*o) != leader && pools.values().any(|p| p == *s))
        .map(|(s, o)| (*s, *o))
        .ok_or_else(|| "no shard with nodes owned by a replica that does not lead".to_string())
}

fn check_every_replica_binds(
    env: &Env,
    replicas: &[Replica],
    pools: &BTreeMap<String, u32>,
) -> Result<(String, Owners), String> {
    let owners = poll(DEADLINE, "every shard owned by exactly one replica", || {
        let a = assignment(replicas)?;
        // Every replica owns a shard and the shards are balanced (the leader rebalances as
        // Leases appear, one move at a time: a replica that joined late owns one shard
        // after the first move and more after the next, and a check that read the owners
        // between two moves expected a gang of a shard that moved next to be bound by its
        // previous owner).
        Ok(a.filter(|a| {
            let mut held: BTreeMap<u64, usize> = BTreeMap::new();
            for (o, _) in a.values() {
                *held.entry(*o).or_default() += 1;
            }
            let (least, most) = (held.values().min(), held.values().max());
            held.len() == replicas.len() && most.zip(least).is_some_and(|(m, l)| m - l <= 1)
        }))
    })?;
    let with_nodes: BTreeSet<u32> = pools.values().copied().collect();
    let mut bound_by: BTreeMap<u32, BTreeSet<String>> = BTreeMap::new();
    for shard in &with_nodes {
        let queue = env.queue_for(*shard)?;
        env.create_gang(&format!("g-s{shard}"), &queue, 2)?;
    }
    for shard in &with_nodes {
        bound_by.insert(*shard, env.wait_bound(&format!("g-s{shard}"))?);
    }
    for (shard, by) in &bound_by {
        let owner = owners[shard].0.to_string();
        if by != &BTreeSet::from([owner.clone()]) {
            return Err(format!(
                "gang of shard {shard} bound by {by:?}, not by its owner {owner}"
            ));
        }
    }
    let binders: BTreeSet<u64> = with_nodes.iter().map(|s| owners[s].0).collect();
    let owners_of_pools: BTreeSet<u64> = replicas
        .iter()
        .map(|r| r.id)
        .filter(|id| binders.contains(id))
        .collect();
    if owners_of_pools.len() != replicas.len() {
        return Err(format!(
            "only replicas {owners_of_pools:?} own shards with nodes (pools {with_nodes:?}, owners {owners:?})"
        ));
    }
    for r in replicas {
        if r.counter("phalanx_lease_renewals_total")? < 1.0 {
            return Err(format!("replica {} renewed no lease", r.id));
        }
    }
    env.no_overcommit()?;
    Ok((
        format!(
            "owners {owners:?}; a gang per shard with nodes, each bound by its shard's owner; replicas {binders:?} all bound"
        ),
        owners,
    ))
}

/// Pods of the gang whose binds outlast the lease: at the fleet's `--kube-qps 20
/// --kube-burst 10`, 90 binds take at least (90 - 10) / 20 = 4 s, against a 3 s lease.
const BUSY_PODS: u32 = 90;

/// An owner whose bind phase outlasts its lease keeps its shards: its Lease is renewed by
/// the keeper during the binds, so the leader moves nothing, every pod is bound by the
/// owner, and no shard's epoch changes. Before the keeper the Lease was renewed once a
/// period, and a period that bound for 4 s against a 3 s lease cost the owner its shards.
fn check_busy_owner_keeps_its_shards(
    env: &Env,
    replicas: &[Replica],
    pools: &BTreeMap<String, u32>,
) -> Check {
    let before = assignment(replicas)?.ok_or("no complete shard assignment")?;
    let (shard, (owner, _)) = follower_shard(replicas, &before, pools)?;
    let busy = replicas
        .iter()
        .find(|r| r.id == owner)
        .ok_or("owner not found")?;
    let renewed_before = busy.counter("phalanx_lease_renewals_total")?;
    // From the gang's creation until the API server shows every pod bound: binds run off
    // the cycle on the bind pool, so the span, not one cycle's bind phase, is what must
    // outlast the lease (the per-gang bind latency metric also counts other gangs' binds
    // ending meanwhile, and once read 0.1 s here).
    let created = std::time::Instant::now();
    env.create_gang_of("busy", &env.queue_for(shard)?, BUSY_PODS, 0)?;
    let by = env.wait_bound("busy")?;
    let binding = created.elapsed();
    let after = assignment(replicas)?;
    let renewed = busy.counter("phalanx_lease_renewals_total")? - renewed_before;
    env.delete_gang("busy", BUSY_PODS)?;
    if after.as_ref() != Some(&before) {
        return Err(format!(
            "the shards moved while replica {owner} was binding {BUSY_PODS} pods: {before:?} -> {after:?}"
        ));
    }
    if binding <= Duration::from_millis(LEASE_MS) {
        return Err(format!(
            "binding {BUSY_PODS} pods took {:.1}s, not longer than the {LEASE_MS} ms lease: the check proves nothing",
            binding.as_secs_f64()
        ));
    }
    if by != BTreeSet::from([owner.to_string()]) {
        return Err(format!(
            "busy (shard {shard}, owner {owner}) was bound by {by:?}"
        ));
    }
    Ok(format!(
        "replica {owner} bound {BUSY_PODS} pods of shard {shard} for {:.1}s (lease {LEASE_MS} ms), renewing its Lease {renewed} times meanwhile; owners and epochs unchanged",
        binding.as_secs_f64()
    ))
}

/// A gang too big for any one pool of the replica that owns its home shard is placed by
/// two-phase reservation between the replicas (`--coord-listen`/`--coord-peers`): every pod
/// bound, on nodes of more than one shard, no node over its GPUs, and a transaction
/// counted as committed by a replica's `/metrics`.
fn check_spanning_gang_placed_by_2pc(
    env: &Env,
    replicas: &[Replica],
    owners: &Owners,
    pools: &BTreeMap<String, u32>,
) -> Check {
    let pool_size = |s: u32| pools.values().filter(|p| **p == s).count();
    let (&home, &(owner, _)) = owners
        .iter()
        .filter(|(s, _)| pool_size(**s) > 0)
        .min_by_key(|(s, _)| pool_size(**s))
        .ok_or("no shard with nodes")?;
    let largest_owned = owners
        .iter()
        .filter(|(_, (o, _))| *o == owner)
        .map(|(s, _)| pool_size(*s))
        .max()
        .unwrap_or(0);
    // 4-GPU pods, two per node at most: more pods than the owner's largest pool can hold.
    let count = u32::try_from(largest_owned * 2 + 1).map_err(|e| e.to_string())?;
    let queue = env.queue_for(home)?;
    env.create_gang_of("wide", &queue, count, 4)?;
    env.wait_bound("wide")?;
    let shards: BTreeSet<u32> = env
        .gang_pods("wide")?
        .iter()
        .filter_map(|p| p.node.as_ref().and_then(|n| pools.get(n)).copied())
        .collect();
    if shards.len() < 2 {
        return Err(format!(
            "wide: all {count} pods in shards {shards:?}; the gang was sized to need two"
        ));
    }
    let over: Vec<_> = env
        .gpu_use()?
        .into_iter()
        .filter(|(_, used)| *used > GPUS_PER_NODE)
        .collect();
    if !over.is_empty() {
        return Err(format!("nodes over their {GPUS_PER_NODE} GPUs: {over:?}"));
    }
    let committed = poll(DEADLINE, "a committed 2PC transaction in /metrics", || {
        let mut sum = 0.0;
        for r in replicas.iter().filter(|r| r.alive()) {
            sum += r.counter(r#"phalanx_2pc_transactions_total{outcome="committed"}"#)?;
        }
        Ok((sum >= 1.0).then_some(sum))
    })?;
    env.delete_gang("wide", count)?;
    Ok(format!(
        "a {count} x 4-GPU gang homed in shard {home} (owner {owner}, largest owned pool {largest_owned} nodes) bound over shards {shards:?}; {committed} committed transaction(s)"
    ))
}

/// Commits, as the victim at its epoch, a placement of a new pending gang on a node of
/// `shard`'s pool, then SIGKILLs the victim: the committed-but-unbound state of an owner
/// that died between commit and bind. The victim is SIGSTOPped first, so that it neither
/// schedules the new gang itself nor loses its shards before the commit: killed first, it
/// refused connections at once, and the leader, which moves a refusing replica's shards
/// in its next period, could move them before the commit landed (a `StaleEpoch` seen in
/// CI). Stopped, it keeps them for its lease.
fn check_owner_killed(
    env: &Env,
    replicas: &mut [Replica],
    owners: &Owners,
    pools: &BTreeMap<String, u32>,
    ledger: &LedgerClient,
) -> Check {
    let (shard, (victim, epoch)) = follower_shard(replicas, owners, pools)?;
    let used = env.gpu_use()?;
    let node = pools
        .iter()
        .filter(|(_, s)| **s == shard)
        .map(|(n, _)| n.clone())
        .min_by_key(|n| used.get(n).copied().unwrap_or(0))
        .ok_or("an empty pool")?;
    let queue = env.queue_for(shard)?;
    let victim_at = replicas
        .iter()
        .position(|r| r.id == victim)
        .ok_or("victim not found")?;
    let wakeups_before = loop_wakeups(replicas)?;
    replicas[victim_at].signal("STOP")?;
    env.create_gang("orphan", &queue, 2)?;
    let gang = GangPlacement {
        gang: ObjectKey::new(&env.ns, "orphan"),
        placements: (0..2)
            .map(|i| Placement {
                pod: ObjectKey::new(&env.ns, format!("orphan-{i}")),
                node: node.clone(),
                resources: Resources::from_pairs([(GPU, 1)]),
            })
            .collect(),
    };
    let command = place_at(Fence { shard, epoch }, &[gang]).remove(0);
    let committed = env
        .rt
        .block_on(ledger.propose_one(command))
        .map_err(|e| e.to_string());
    replicas[victim_at].kill();
    let killed_at = Instant::now();
    match committed? {
        LedgerResponse::Gangs(o) if o.iter().all(|o| o.decision == GangDecision::Accepted) => {}
        other => {
            return Err(format!(
                "committing the orphan at shard {shard} epoch {epoch} (victim {victim}) failed: {other:?}"
            ));
        }
    }
    env.create_gang("after-kill", &queue, 2)?;
    let orphan_by = env.wait_bound("orphan")?;
    let after_by = env.wait_bound("after-kill")?;
    let took = killed_at.elapsed();
    let moved = poll(DEADLINE, "the victim's shards owned by survivors", || {
        Ok(assignment(replicas)?.filter(|a| a.values().all(|(o, _)| *o != victim)))
    })?;
    let (new_owner, new_epoch) = moved[&shard];
    if new_epoch <= epoch {
        return Err(format!(
            "shard {shard} moved to {new_owner} at epoch {new_epoch}, not above {epoch}"
        ));
    }
    let woken = woken_by_the_kill(replicas, &wakeups_before, new_owner)?;
    let expected = BTreeSet::from([new_owner.to_string()]);
    if orphan_by != expected || after_by != expected {
        return Err(format!(
            "shard {shard}'s new owner is {new_owner}, but the orphan was bound by {orphan_by:?} and after-kill by {after_by:?}"
        ));
    }
    for pod in env.gang_pods("orphan")? {
        if pod.node.as_deref() != Some(node.as_str()) {
            return Err(format!(
                "orphan pod {} bound to {:?}, not to its committed node {node}",
                pod.name, pod.node
            ));
        }
    }
    env.no_overcommit()?;
    let mut groups: Vec<String> = pools
        .values()
        .collect::<BTreeSet<_>>()
        .iter()
        .map(|s| format!("g-s{s}"))
        .collect();
    groups.extend(["orphan".to_string(), "after-kill".to_string()]);
    for g in &groups {
        let pods = env.gang_pods(g)?;
        let bound = pods.iter().filter(|p| p.node.is_some()).count();
        if bound != 0 && bound != pods.len() {
            return Err(format!("{g} is half-bound: {bound} of {}", pods.len()));
        }
    }
    Ok(format!(
        "replica {victim} (owner of shard {shard} at epoch {epoch}) SIGKILLed after a commit; shard {shard} now {new_owner} at epoch {new_epoch}; the committed placement bound on {node} by {new_owner} {:.1}s after the kill ({woken}); no overcommit, no half-bound gang",
        took.as_secs_f64()
    ))
}

/// Replica id -> (early wakeups of its loop for a refusing peer, for a shard moved).
type Wakeups = BTreeMap<u64, (f64, f64)>;

fn loop_wakeups(replicas: &[Replica]) -> Result<Wakeups, String> {
    let metric = |r: &Replica, reason: &str| {
        r.counter(&format!(
            "phalanx_loop_wakeups_total{{reason=\"{reason}\"}}"
        ))
    };
    replicas
        .iter()
        .filter(|r| r.alive())
        .map(|r| Ok((r.id, (metric(r, "refusal")?, metric(r, "shard_moved")?))))
        .collect()
}

/// Checks that the kill woke the loops at once (`serve/wakeup.rs`): the leader's when the
/// victim's Raft port refused it, the new owner's when the ledger moved the shard.
fn woken_by_the_kill(
    replicas: &[Replica],
    before: &Wakeups,
    new_owner: u64,
) -> Result<String, String> {
    let after = loop_wakeups(replicas)?;
    let delta = |id: u64| {
        let (r0, s0) = before.get(&id).copied().unwrap_or_default();
        let (r1, s1) = after.get(&id).copied().unwrap_or_default();
        (r1 - r0, s1 - s0)
    };
    let leader = replicas
        .iter()
        .find(|r| r.alive() && r.is_leader())
        .map(|r| r.id)
        .ok_or("no live leader after the kill")?;
    let (refusals, _) = delta(leader);
    let (_, moved) = delta(new_owner);
    if refusals < 1.0 || moved < 1.0 {
        return Err(format!(
            "the kill did not wake the loops: leader {leader} woke {refusals} times for a refusing peer, new owner {new_owner} {moved} times for a shard moved"
        ));
    }
    Ok(format!(
        "leader {leader} woken by the refusal, owner {new_owner} by the move"
    ))
}

/// A shard owner SIGSTOPped past its lease, then continued. While it is stopped its
/// shards move to the others at a higher epoch and a new gang of its shard is bound by the
/// new owner; a write at the fence it lost is refused by the ledger (I4); once continued
/// it binds nothing for a shard it no longer owns: a gang created after SIGCONT is bound by
/// the shard's owner, and if that is the continued replica, at an epoch above the one it
/// lost (it was given the shard back, legitimately).
fn check_owner_paused(
    env: &Env,
    replicas: &mut [Replica],
    pools: &BTreeMap<String, u32>,
    fleet: &Fleet,
) -> Check {
    let alive: BTreeSet<u64> = replicas
        .iter()
        .filter(|r| r.alive())
        .map(|r| r.id)
        .collect();
    let owners = owners_among(replicas, &alive, true)?;
    let (shard, (victim, epoch)) = follower_shard(replicas, &owners, pools)?;
    let queue = env.queue_for(shard)?;
    let at = replicas
        .iter()
        .position(|r| r.id == victim)
        .ok_or("victim not found")?;
    replicas[at].signal("STOP")?;
    let paused_at = Instant::now();
    let moved = poll(
        DEADLINE,
        "the paused owner's shards owned by the others",
        || {
            Ok(assignment_among(replicas, |r| r.id != victim)?
                .filter(|a| a.values().all(|(o, _)| *o != victim)))
        },
    );
    let outcome = moved.and_then(|moved| {
        let (new_owner, new_epoch) = moved[&shard];
        if new_epoch <= epoch {
            return Err(format!(
                "shard {shard} moved to {new_owner} at epoch {new_epoch}, not above {epoch}"
            ));
        }
        let moved_in = paused_at.elapsed();
        env.create_gang("during-pause", &queue, 2)?;
        let by = env.wait_bound("during-pause")?;
        if by != BTreeSet::from([new_owner.to_string()]) {
            return Err(format!(
                "during the pause shard {shard} is {new_owner}'s, but during-pause was bound by {by:?}"
            ));
        }
        // Through the live replicas only: a proposal sent to the stopped one (the client's
        // cached leader, when it led before) times out, and a timeout is rightly an
        // unknown outcome, not the refusal this check is about (a cold CI run failed so).
        let live: BTreeMap<u64, String> = fleet
            .raft
            .iter()
            .filter(|(id, _)| **id != victim)
            .map(|(id, a)| (*id, a.clone()))
            .collect();
        let ledger = testbed::ledger_client(&fleet.dir, &live, 1);
        let refused = stale_write_refused(env, &ledger, pools, shard, epoch)?;
        Ok((new_owner, new_epoch, moved_in, refused))
    });
    // Continued whatever happened, so the checks after this one see three live replicas.
    replicas[at].signal("CONT")?;
    let (new_owner, new_epoch, moved_in, refused) = outcome?;
    env.create_gang("after-resume", &queue, 2)?;
    let by = env.wait_bound("after-resume")?;
    if by.contains(&victim.to_string()) {
        let now = replicas[at]
            .owned_epochs()?
            .get(&shard)
            .copied()
            .unwrap_or(0);
        if now <= new_epoch {
            return Err(format!(
                "the continued replica {victim} bound after-resume of shard {shard} at epoch {now}, not above {new_epoch}"
            ));
        }
    }
    env.no_overcommit()?;
    for g in ["during-pause", "after-resume"] {
        let pods = env.gang_pods(g)?;
        if pods.iter().any(|p| p.node.is_none()) {
            return Err(format!("{g} is half-bound"));
        }
    }
    Ok(format!(
        "replica {victim} (owner of shard {shard} at epoch {epoch}) SIGSTOPped: shard {shard} {new_owner}'s at epoch {new_epoch} {:.1}s later, during-pause bound by {new_owner}; {refused}; after SIGCONT after-resume bound by {by:?}",
        moved_in.as_secs_f64()
    ))
}

/// Proposes a placement at `(shard, epoch)`, a fence that has been superseded: the ledger
/// must refuse it as stale.
fn stale_write_refused(
    env: &Env,
    ledger: &LedgerClient,
    pools: &BTreeMap<String, u32>,
    shard: u32,
    epoch: u64,
) -> Result<String, String> {
    let node = pools
        .iter()
        .find(|(_, s)| **s == shard)
        .map(|(n, _)| n.clone())
        .ok_or("an empty pool")?;
    let gang = GangPlacement {
        gang: ObjectKey::new(&env.ns, "stale"),
        placements: vec![Placement {
            pod: ObjectKey::new(&env.ns, "stale-0"),
            node,
            resources: Resources::from_pairs([(GPU, 1)]),
        }],
    };
    let command = place_at(Fence { shard, epoch }, &[gang]).remove(0);
    let response = env
        .rt
        .block_on(ledger.propose_one(command))
        .map_err(|e| e.to_string())?;
    let stale = |r: &Refusal| matches!(r, Refusal::StaleEpoch { .. });
    let refused = match &response {
        LedgerResponse::Refused(r) => stale(r),
        LedgerResponse::Gangs(o) => o
            .iter()
            .all(|o| matches!(&o.decision, GangDecision::Refused(r) if stale(r))),
        _ => false,
    };
    refused
        .then(|| format!("a write at shard {shard} epoch {epoch} refused as stale"))
        .ok_or_else(|| format!("a write at the lost fence {shard}@{epoch} answered {response:?}"))
}

/// The replicas' addresses and common flags, to start (and restart) any of them with the
/// `--peers` and `--coord-peers` of a given set of members.
struct Fleet {
    dir: std::path::PathBuf,
    flags: Vec<String>,
    raft: BTreeMap<u64, String>,
    coord: BTreeMap<u64, String>,
}

impl Fleet {
    fn new(dir: &std::path::Path, flags: Vec<String>, ids: impl IntoIterator<Item = u64>) -> Self {
        let mut fleet = Self {
            dir: dir.to_path_buf(),
            flags,
            raft: BTreeMap::new(),
            coord: BTreeMap::new(),
        };
        for id in ids {
            fleet.add(id);
        }
        fleet
    }

    /// Loopback ports for replica `id`'s Raft and CoordinatorService.
    fn add(&mut self, id: u64) {
        for map in [&mut self.raft, &mut self.coord] {
            map.entry(id)
                .or_insert_with(|| format!("127.0.0.1:{}", testbed::free_port()));
        }
    }

    /// Starts replica `id` (on its data dir, if it ran before) as one of `members`.
    fn start(&self, id: u64, members: &BTreeSet<u64>) -> Replica {
        let pick = |map: &BTreeMap<u64, String>| -> BTreeMap<u64, String> {
            members.iter().map(|m| (*m, map[m].clone())).collect()
        };
        let mut flags = self.flags.clone();
        flags.extend([
            "--coord-peers".to_string(),
            testbed::peers_flag(&pick(&self.coord)),
            "--coord-listen".to_string(),
            self.coord[&id].clone(),
        ]);
        testbed::start_replica(&self.dir, id, &pick(&self.raft), &flags)
    }

    /// Restarts each of `order` in turn as one of `members` (SIGTERM, then start on its
    /// data dir; a replica that is down is just started), each ready before the next, as
    /// a StatefulSet rolls its pods.
    fn roll(
        &self,
        replicas: &mut [Replica],
        order: &[u64],
        members: &BTreeSet<u64>,
    ) -> Result<(), String> {
        for id in order {
            let at = replicas
                .iter()
                .position(|r| r.id == *id)
                .ok_or(format!("no replica {id}"))?;
            replicas[at].terminate();
            replicas[at] = self.start(*id, members);
            poll(
                DEADLINE,
                &format!("replica {id} ready after its restart"),
                || Ok(replicas[at].ready().then_some(())),
            )?;
        }
        Ok(())
    }
}

/// Every live replica reports `n` voters and no learner; how long that took.
fn wait_voters(replicas: &[Replica], n: usize) -> Result<Duration, String> {
    let t = Instant::now();
    poll(
        DEADLINE,
        &format!("{n} voters on every live replica"),
        || {
            for r in replicas.iter().filter(|r| r.alive()) {
                let voters = r.counter("phalanx_raft_voters")?;
                let learners = r.counter("phalanx_raft_learners")?;
                if voters != n as f64 || learners != 0.0 {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        },
    )?;
    Ok(t.elapsed())
}

/// Shards, once each has exactly one owner and all owners are in `among`.
fn owners_among(replicas: &[Replica], among: &BTreeSet<u64>, all: bool) -> Result<Owners, String> {
    poll(DEADLINE, &format!("shards owned by {among:?}"), || {
        Ok(assignment(replicas)?.filter(|a| {
            let holders: BTreeSet<u64> = a.values().map(|(o, _)| *o).collect();
            holders.is_subset(among) && (!all || holders == *among)
        }))
    })
}

/// A two-pod gang in the queue of a shard with nodes, owned by one of `prefer` if any:
/// bound, and by whom.
fn gang_after(
    env: &Env,
    name: &str,
    owners: &Owners,
    pools: &BTreeMap<String, u32>,
    prefer: &BTreeSet<u64>,
) -> Result<String, String> {
    let with_nodes = |s: &u32| pools.values().any(|p| p == s);
    let shard = owners
        .iter()
        .filter(|(s, _)| with_nodes(s))
        .max_by_key(|(_, (o, _))| prefer.contains(o))
        .map(|(s, _)| *s)
        .ok_or("no shard with nodes")?;
    env.create_gang(name, &env.queue_for(shard)?, 2)?;
    let by = env.wait_bound(name)?;
    env.no_overcommit()?;
    Ok(format!(
        "{name} (shard {shard}, owner {}) bound by {by:?}",
        owners[&shard].0
    ))
}

/// The ledger group follows `--peers` (`serve/membership.rs`): replicas 4 and 5 started
/// with the five-replica list, then 1-3 restarted with it (highest first), make five
/// voters that all own shards; then 4 and 5 stopped and 1-3 restarted with the
/// three-replica list make three voters again. A gang binds after each.
fn check_scale_out_and_in(
    env: &Env,
    fleet: &mut Fleet,
    replicas: &mut Vec<Replica>,
    pools: &BTreeMap<String, u32>,
) -> Check {
    let five: BTreeSet<u64> = (1..=5).collect();
    let three: BTreeSet<u64> = (1..=3).collect();
    let new: BTreeSet<u64> = [4, 5].into();
    for id in &new {
        fleet.add(*id);
    }
    for id in &new {
        replicas.push(fleet.start(*id, &five));
    }
    fleet.roll(replicas, &[3, 2, 1], &five)?;
    let up = wait_voters(replicas, 5)?;
    let owners = owners_among(replicas, &five, true)?;
    let out = gang_after(env, "after-scale-out", &owners, pools, &new)?;
    for r in replicas.iter_mut().filter(|r| new.contains(&r.id)) {
        r.terminate();
    }
    fleet.roll(replicas, &[3, 2, 1], &three)?;
    let down = wait_voters(replicas, 3)?;
    let owners = owners_among(replicas, &three, false)?;
    let back = gang_after(env, "after-scale-in", &owners, pools, &three)?;
    Ok(format!(
        "3 -> 5: five voters {:.1}s after the last restart, shards on all five, {out}; 5 -> 3: three voters {:.1}s after the last restart, {back}",
        up.as_secs_f64(),
        down.as_secs_f64()
    ))
}

#[test]
#[ignore = "needs the testbed (deploy/testbed/testbed up --nodes 16 --zones 4); .ci/run runs it with --ignored"]
fn three_replicas_schedule_their_own_shards_and_a_killed_owners_commit_is_bound() {
    let (rt, client, ns) = testbed::open("e2e-shards");
    let map = ShardMap::new(ShardingConfig {
        shards: SHARDS,
        ..ShardingConfig::default()
    })
    .expect("valid");
    let env = Env {
        rt,
        client,
        ns,
        map,
    };
    let pools = env
        .pools()
        .unwrap_or_else(|e| panic!("e2e: listing nodes: {e}"));
    let dir = tempfile::Builder::new()
        .prefix("phalanx-e2e-shards-")
        .tempdir()
        .expect("a temporary directory");
    let extra: Vec<String> = [
        "--shards",
        &SHARDS.to_string(),
        "--shard-lease-ms",
        &LEASE_MS.to_string(),
        "--lease-namespace",
        &env.ns,
        // A bind budget under which one check's binds outlast the lease (BUSY_PODS).
        "--kube-qps",
        "20",
        "--kube-burst",
        "10",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Every replica serves the CoordinatorService (the 2PC of gangs that span shards).
    let mut fleet = Fleet::new(dir.path(), extra, 1..=3);
    let three: BTreeSet<u64> = (1..=3).collect();
    let mut replicas: Vec<Replica> = three.iter().map(|id| fleet.start(*id, &three)).collect();
    let ledger = testbed::ledger_client(dir.path(), &fleet.raft, 1);
    let mut results: Vec<(&str, Check)> = Vec::new();
    let ready = poll(
        Duration::from_secs(90),
        "3 replicas ready (/readyz)",
        || Ok(replicas.iter().all(|r| r.ready()).then_some(())),
    );
    match ready.and_then(|()| check_every_replica_binds(&env, &replicas, &pools)) {
        Err(e) => results.push(("every replica binds its shards' gangs", Err(e))),
        Ok((detail, owners)) => {
            results.push(("every replica binds its shards' gangs", Ok(detail)));
            results.push((
                "an owner binding for longer than its lease keeps its shards",
                check_busy_owner_keeps_its_shards(&env, &replicas, &pools),
            ));
            results.push((
                "a gang that needs more than one shard is placed by 2PC between replicas",
                check_spanning_gang_placed_by_2pc(&env, &replicas, &owners, &pools),
            ));
            results.push((
                "a shard owner killed between commit and bind",
                check_owner_killed(&env, &mut replicas, &owners, &pools, &ledger),
            ));
            results.push((
                "the ledger group follows --peers: 3 -> 5 -> 3 replicas",
                check_scale_out_and_in(&env, &mut fleet, &mut replicas, &pools),
            ));
            results.push((
                "a shard owner SIGSTOPped past its lease, then continued",
                check_owner_paused(&env, &mut replicas, &pools, &fleet),
            ));
        }
    }
    testbed::finish(
        &env.rt,
        &env.client,
        &env.ns,
        &mut replicas,
        &results,
        "phalanx-e2e-shards-logs",
    );
}
