//! End to end on the testbed: a real kube-apiserver with 16 kwok GPU nodes (8 GPUs each),
//! three `phalanx serve` processes on loopback, and the checks of issue 6.
//!
//! Not part of `cargo test --workspace` (it needs the testbed): `.ci/run` brings the testbed
//! up and runs
//!
//! ```text
//! deploy/testbed/testbed up --nodes 16
//! cargo test --workspace --test e2e -- --ignored --nocapture e2e_kube::
//! ```
//!
//! Without a running testbed the test fails and says how to start one. It prints one line per
//! check and a summary `e2e: N passed, M failed`.

use crate::testbed;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::core::DynamicObject;
use phalanx_scheduler::cluster::kube::{KubeCluster, KubeOptions, volcano_resource};
use serde_json::{Value, json};
use testbed::{Check, DEADLINE, GPU, Replica, kubeconfig, node_of, poll};

const GPUS_PER_NODE: i64 = 8;

struct Env {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
    ns: String,
}

impl Env {
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn pod_groups(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            &self.ns,
            &volcano_resource("PodGroup", "podgroups"),
        )
    }

    fn events_in(&self, ns: &str) -> Result<Vec<Event>, String> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), ns);
        self.rt
            .block_on(events.list(&ListParams::default()))
            .map(|l| l.items)
            .map_err(|e| e.to_string())
    }

    fn queues(&self) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), &volcano_resource("Queue", "queues"))
    }

    fn create_pod_group(&self, name: &str, min_member: u32) -> Result<(), String> {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {"minMember": min_member, "queue": "default"},
        }))
        .map_err(|e| e.to_string())?;
        self.rt
            .block_on(self.pod_groups().create(&PostParams::default(), &obj))
            .map(|_| ())
            .map_err(|e| format!("creating PodGroup {name}: {e}"))
    }

    /// A pod of `group` (or none) asking for `gpus`; `node` binds it at creation (another
    /// scheduler's way).
    fn create_pod(
        &self,
        name: &str,
        group: Option<&str>,
        task: &str,
        gpus: i64,
        scheduler: &str,
        node: Option<&str>,
    ) -> Result<(), String> {
        let mut annotations = serde_json::Map::new();
        if let Some(g) = group {
            annotations.insert("scheduling.k8s.io/group-name".into(), json!(g));
            annotations.insert("volcano.sh/task-spec".into(), json!(task));
        }
        let mut spec = json!({
            "schedulerName": scheduler,
            "containers": [{"name": "main", "image": "phalanx-e2e:fake",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi", GPU: gpus.to_string()},
                              "limits": {GPU: gpus.to_string()}}}],
        });
        if let Some(n) = node {
            spec["nodeName"] = json!(n);
        }
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": self.ns, "annotations": annotations},
            "spec": spec,
        }))
        .map_err(|e| e.to_string())?;
        self.rt
            .block_on(self.pods().create(&PostParams::default(), &pod))
            .map(|_| ())
            .map_err(|e| format!("creating pod {name}: {e}"))
    }

    /// A gang: a PodGroup and `count` pods of `gpus` each, scheduled by phalanx.
    fn create_gang(&self, name: &str, count: u32, gpus: i64) -> Result<(), String> {
        self.create_pod_group(name, count)?;
        for i in 0..count {
            self.create_pod(
                &format!("{name}-{i}"),
                Some(name),
                "worker",
                gpus,
                "phalanx",
                None,
            )?;
        }
        Ok(())
    }

    fn all_pods(&self) -> Result<Vec<Pod>, String> {
        let all: Api<Pod> = Api::all(self.client.clone());
        self.rt
            .block_on(all.list(&ListParams::default()))
            .map(|l| l.items)
            .map_err(|e| e.to_string())
    }

    /// Pods of `group` in the test namespace: (bound, total).
    fn gang_bound(&self, group: &str) -> Result<(usize, usize), String> {
        let pods = self.all_pods()?;
        let mine: Vec<&Pod> = pods
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(&self.ns))
            .filter(|p| {
                p.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("scheduling.k8s.io/group-name"))
                    .map(String::as_str)
                    == Some(group)
            })
            .collect();
        let bound = mine.iter().filter(|p| node_of(p).is_some()).count();
        Ok((bound, mine.len()))
    }

    /// GPUs used per node by pods that hold it (any namespace, any scheduler).
    fn gpu_use(&self) -> Result<BTreeMap<String, i64>, String> {
        Ok(testbed::gpu_use_of(&self.all_pods()?))
    }

    fn no_overcommit(&self) -> Result<(), String> {
        testbed::check_no_overcommit(&self.gpu_use()?, GPUS_PER_NODE)
    }

    fn pod_group(&self, name: &str) -> Result<Value, String> {
        self.rt
            .block_on(self.pod_groups().get(name))
            .map(|o| o.data)
            .map_err(|e| e.to_string())
    }
}

/// The Cluster conformance suite against KubeCluster, on an unschedulable node `n1` and
/// objects in namespace `default` that it (re)creates, then removes.
fn conformance(env: &Env) -> Check {
    let nodes: Api<Node> = Api::all(env.client.clone());
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let groups: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        "default",
        &volcano_resource("PodGroup", "podgroups"),
    );
    let force = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let cleanup = || {
        for p in ["a", "b"] {
            let _ = env.rt.block_on(pods.delete(p, &force));
        }
        let _ = env
            .rt
            .block_on(groups.delete("g", &DeleteParams::default()));
        let _ = poll(Duration::from_secs(30), "conformance objects gone", || {
            let left = ["a", "b"]
                .iter()
                .filter(|p| env.rt.block_on(pods.get_opt(p)).ok().flatten().is_some())
                .count()
                + usize::from(
                    env.rt
                        .block_on(groups.get_opt("g"))
                        .ok()
                        .flatten()
                        .is_some(),
                );
            Ok((left == 0).then_some(()))
        });
    };
    let make = || {
        cleanup();
        if env
            .rt
            .block_on(nodes.get_opt("n1"))
            .ok()
            .flatten()
            .is_none()
        {
            let node: Node = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "n1", "labels": {"type": "kwok"},
                             "annotations": {"kwok.x-k8s.io/node": "fake"}},
                "spec": {"unschedulable": true},
                "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", GPU: "2"},
                           "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110", GPU: "2"}},
            }))
            .expect("a node");
            env.rt
                .block_on(nodes.create(&PostParams::default(), &node))
                .expect("node n1 is created");
        }
        let ns_env = Env {
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime"),
            client: env.client.clone(),
            ns: "default".into(),
        };
        ns_env.create_pod_group("g", 2).expect("PodGroup g");
        for p in ["a", "b"] {
            ns_env
                .create_pod(p, Some("g"), "worker", 1, "phalanx-conformance", None)
                .expect("pod");
        }
        drop(ns_env);
        KubeCluster::start(Some(&kubeconfig()), KubeOptions::default())
            .expect("KubeCluster connects")
    };
    let failures = phalanx_scheduler::cluster::conformance::check(make);
    cleanup();
    let _ = env
        .rt
        .block_on(nodes.delete("n1", &DeleteParams::default()));
    if failures.is_empty() {
        Ok("KubeCluster passes cluster::conformance::check".into())
    } else {
        Err(format!("KubeCluster fails conformance: {failures:#?}"))
    }
}

fn check_seed_job(env: &Env) -> Check {
    env.create_pod_group("tf-mnist-job", 11)?;
    env.create_pod(
        "tf-mnist-job-ps-0",
        Some("tf-mnist-job"),
        "ps",
        1,
        "phalanx",
        None,
    )?;
    for i in 0..10 {
        env.create_pod(
            &format!("tf-mnist-job-worker-{i}"),
            Some("tf-mnist-job"),
            "worker",
            1,
            "phalanx",
            None,
        )?;
    }
    let mut partial_seen = 0;
    poll(DEADLINE, "tf-mnist-job: 11 pods bound", || {
        let (bound, total) = env.gang_bound("tf-mnist-job")?;
        if bound > 0 && bound < 11 {
            partial_seen += 1;
        }
        Ok((bound == 11 && total == 11).then_some(()))
    })?;
    env.no_overcommit()?;
    let phase = poll(DEADLINE, "tf-mnist-job: PodGroup phase Running", || {
        let pg = env.pod_group("tf-mnist-job")?;
        let phase = pg["status"]["phase"].as_str().unwrap_or("").to_string();
        Ok((phase == "Running").then_some(phase))
    })?;
    // A gang is bound in one round: at most a round's worth of polls sees it partial.
    if partial_seen > 4 {
        return Err(format!(
            "tf-mnist-job was seen partly bound {partial_seen} times"
        ));
    }
    Ok(format!(
        "tf-mnist-job: 11 of 11 pods bound, no node over {GPUS_PER_NODE} GPUs, PodGroup {phase}"
    ))
}

/// A hostile object the API server accepts and phalanx cannot read or schedule, and what
/// its Warning Event must say: (kind, namespace of the Event, name, reason, words in the
/// note: the field and the value).
struct Hostile {
    kind: &'static str,
    event_ns: String,
    name: &'static str,
    reason: &'static str,
    note_has: [&'static str; 2],
}

/// Creates the hostile objects (each with a pod where it has pods) and a normal gang.
fn create_hostile_objects(env: &Env) -> Result<Vec<Hostile>, String> {
    // minMember -3 passes the CRD's schema (an integer) but not phalanx's reading of it;
    // 5,000 is more than the ledger commits in one gang (4,096).
    for (name, min) in [("malformed", -3), ("too-wide", 5000)] {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": env.ns},
            "spec": {"minMember": min},
        }))
        .map_err(|e| e.to_string())?;
        env.rt
            .block_on(env.pod_groups().create(&PostParams::default(), &obj))
            .map_err(|e| format!("the API server refused PodGroup {name}: {e}"))?;
        env.create_pod(
            &format!("{name}-0"),
            Some(name),
            "worker",
            1,
            "phalanx",
            None,
        )?;
    }
    // A negative weight is refused; weight 0 is read as 1 (a caveat, told as FieldIgnored).
    for (name, weight) in [(HOSTILE_QUEUES[0], -1), (HOSTILE_QUEUES[1], 0)] {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": name}, "spec": {"weight": weight},
        }))
        .map_err(|e| e.to_string())?;
        env.rt
            .block_on(env.queues().create(&PostParams::default(), &obj))
            .map_err(|e| format!("the API server refused Queue {name}: {e}"))?;
    }
    // 10^13 GPUs: under the ledger's 2^53 per node, over the ~9.2e12 a cluster's total of
    // a counted resource may reach before every queue's deserved share saturates (then no
    // gang at all is placed, which the gang below would show). Unschedulable, so nothing
    // lands on it whatever phalanx does.
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": HOSTILE_NODE},
        "spec": {"unschedulable": true},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", GPU: "10000000000000"}},
    }))
    .map_err(|e| e.to_string())?;
    let nodes: Api<Node> = Api::all(env.client.clone());
    env.rt
        .block_on(nodes.create(&PostParams::default(), &node))
        .map_err(|e| format!("the API server refused Node {HOSTILE_NODE}: {e}"))?;
    env.create_gang("after-malformed", 2, 1)?;
    let ns = env.ns.clone();
    let default = "default".to_string();
    Ok(vec![
        Hostile {
            kind: "PodGroup",
            event_ns: ns.clone(),
            name: "malformed",
            reason: "InvalidObject",
            note_has: ["spec.minMember", "-3"],
        },
        Hostile {
            kind: "PodGroup",
            event_ns: ns.clone(),
            name: "too-wide",
            reason: "InvalidObject",
            note_has: ["spec.minMember", "5000"],
        },
        // Each pending pod of a skipped PodGroup is told too (kubectl describe pod).
        Hostile {
            kind: "Pod",
            event_ns: ns.clone(),
            name: "malformed-0",
            reason: "InvalidPodGroup",
            note_has: ["spec.minMember", "-3"],
        },
        Hostile {
            kind: "Pod",
            event_ns: ns,
            name: "too-wide-0",
            reason: "InvalidPodGroup",
            note_has: ["spec.minMember", "5000"],
        },
        Hostile {
            kind: "Queue",
            event_ns: default.clone(),
            name: HOSTILE_QUEUES[0],
            reason: "InvalidObject",
            note_has: ["spec.weight", "-1"],
        },
        Hostile {
            kind: "Queue",
            event_ns: default.clone(),
            name: HOSTILE_QUEUES[1],
            reason: "FieldIgnored",
            note_has: ["spec.weight", "0 is read as 1"],
        },
        Hostile {
            kind: "Node",
            event_ns: default,
            name: HOSTILE_NODE,
            reason: "InvalidObject",
            note_has: ["status.allocatable.nvidia.com/gpu", "10000000000000"],
        },
    ])
}

/// Cluster-scoped, so removed at the end of the check (the namespace stays).
const HOSTILE_QUEUES: [&str; 2] = ["e2e-hostile-negative-weight", "e2e-hostile-zero-weight"];
const HOSTILE_NODE: &str = "e2e-hostile-huge-gpus";

/// The Warning Events phalanx wrote about `h`: their notes.
fn warnings_about(env: &Env, h: &Hostile) -> Result<Vec<String>, String> {
    Ok(env
        .events_in(&h.event_ns)?
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some(h.reason))
        .filter(|e| e.reporting_controller.as_deref() == Some("phalanx.dev/scheduler"))
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some(h.kind) && r.name.as_deref() == Some(h.name)
            })
        })
        .map(|e| {
            // `kubectl describe` finds an object's Events by its uid too.
            let uid = e.regarding.and_then(|r| r.uid).unwrap_or_default();
            let note = e.note.unwrap_or_default();
            if uid.is_empty() {
                format!("{note} [no uid]")
            } else {
                note
            }
        })
        .collect())
}

/// Each hostile object gets one Warning Event naming the field and the value (written by
/// the leader alone, not by every replica), and a normal gang beside them is bound.
fn check_hostile_objects_warned(env: &Env) -> Check {
    let hostile = create_hostile_objects(env);
    let result = hostile.and_then(|hostile| {
        poll(
            DEADLINE,
            "after-malformed: 2 pods bound beside the hostile objects",
            || {
                let (bound, _) = env.gang_bound("after-malformed")?;
                Ok((bound == 2).then_some(()))
            },
        )?;
        for h in &hostile {
            let what = format!("a {} Warning Event on {} {}", h.reason, h.kind, h.name);
            poll(DEADLINE, &what, || {
                Ok((!warnings_about(env, h)?.is_empty()).then_some(()))
            })?;
        }
        // Counted once all were seen, so a second writer (every replica reads the same
        // objects) has had the time of every poll above to show itself.
        let mut said = Vec::new();
        for h in &hostile {
            let notes = warnings_about(env, h)?;
            let [field, value] = h.note_has;
            let named = |n: &String| n.contains(field) && n.contains(value);
            if notes.len() != 1 || !named(&notes[0]) || notes[0].ends_with("[no uid]") {
                return Err(format!(
                    "{} {}: want one {} Event naming {field} and {value:?}, regarding the object's uid; got {notes:?}",
                    h.kind, h.name, h.reason
                ));
            }
            said.push(format!("{} {}: {:?}", h.kind, h.name, notes[0]));
        }
        for group in ["malformed", "too-wide"] {
            let (bound, _) = env.gang_bound(group)?;
            if bound != 0 {
                return Err(format!(
                    "{bound} pod of the hostile PodGroup {group} was bound"
                ));
            }
        }
        Ok(format!(
            "the next gang is bound; one Event each: {}",
            said.join("; ")
        ))
    });
    for name in HOSTILE_QUEUES {
        let _ = env
            .rt
            .block_on(env.queues().delete(name, &DeleteParams::default()));
    }
    let nodes: Api<Node> = Api::all(env.client.clone());
    let _ = env
        .rt
        .block_on(nodes.delete(HOSTILE_NODE, &DeleteParams::default()));
    result
}

fn check_too_big(env: &Env) -> Check {
    // 20 pods x 8 GPUs = 160 GPUs; the cluster has 16 x 8 = 128.
    env.create_gang("too-big", 20, 8)?;
    let message = poll(DEADLINE, "too-big: Unschedulable condition", || {
        let pg = env.pod_group("too-big")?;
        let found = pg["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Unschedulable" && c["status"] == "True")
            .and_then(|c| c["message"].as_str().map(str::to_string));
        Ok(found)
    })?;
    if !message.chars().any(|c| c.is_ascii_digit()) {
        return Err(format!(
            "the Unschedulable message gives no numbers: {message:?}"
        ));
    }
    let note = poll(DEADLINE, "too-big: a Warning Event", || {
        Ok(env
            .events_in(&env.ns)?
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("too-big"))
            .filter(|e| e.type_.as_deref() == Some("Warning"))
            .find_map(|e| e.note.filter(|n| n.chars().any(|c| c.is_ascii_digit()))))
    })?;
    let (bound, total) = env.gang_bound("too-big")?;
    if bound != 0 || total != 20 {
        return Err(format!(
            "too-big has {bound} of {total} pods bound; want 0 of 20"
        ));
    }
    Ok(format!(
        "too-big: 0 of 20 bound; condition: {message:?}; event: {note:?}"
    ))
}

fn check_other_scheduler(env: &Env) -> Check {
    // Fill four idle nodes completely with another scheduler's pods (bound directly).
    let used = env.gpu_use()?;
    let nodes: Api<Node> = Api::all(env.client.clone());
    let idle: Vec<String> = env
        .rt
        .block_on(nodes.list(&ListParams::default().labels("type=kwok")))
        .map_err(|e| e.to_string())?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .filter(|n| n.starts_with("gpu-node-") && used.get(n).copied().unwrap_or(0) == 0)
        .take(4)
        .collect();
    if idle.len() < 4 {
        return Err(format!("only {} idle nodes to fill", idle.len()));
    }
    for (i, n) in idle.iter().enumerate() {
        env.create_pod(
            &format!("other-{i}"),
            None,
            "",
            GPUS_PER_NODE,
            "other-scheduler",
            Some(n),
        )?;
    }
    // Then a gang of 4 x 4 GPUs. The default node order spreads pods (leastrequested), so
    // a scheduler blind to the other pods would pick the filled nodes (8 "free") first.
    env.create_gang("beside-others", 4, 4)?;
    poll(DEADLINE, "beside-others: 4 pods bound", || {
        let (bound, _) = env.gang_bound("beside-others")?;
        Ok((bound == 4).then_some(()))
    })?;
    env.no_overcommit()?;
    let pods = env.all_pods()?;
    let on_filled: Vec<String> = pods
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()) == Some("phalanx"))
        .filter_map(|p| node_of(p).filter(|n| idle.contains(n)))
        .collect();
    if !on_filled.is_empty() {
        return Err(format!("phalanx placed pods on full nodes: {on_filled:?}"));
    }
    Ok(format!(
        "4 nodes filled by another scheduler ({}); a 4 x 4-GPU gang bound elsewhere, no overcommit",
        idle.join(", ")
    ))
}

fn check_failover(env: &Env, replicas: &mut [Replica]) -> Check {
    let leader = poll(DEADLINE, "a leader among the replicas", || {
        Ok(replicas.iter().position(|r| r.alive() && r.is_leader()))
    })?;
    env.create_gang("before-kill", 4, 2)?;
    let killed = replicas[leader].id;
    replicas[leader].kill();
    let t = Instant::now();
    env.create_gang("after-kill", 4, 2)?;
    for g in ["before-kill", "after-kill"] {
        poll(
            DEADLINE,
            &format!("{g}: 4 pods bound after the leader was killed"),
            || {
                let (bound, _) = env.gang_bound(g)?;
                Ok((bound == 4).then_some(()))
            },
        )?;
    }
    let took = t.elapsed();
    let new_leader = poll(DEADLINE, "a new leader", || {
        Ok(replicas
            .iter()
            .find(|r| r.alive() && r.is_leader())
            .map(|r| r.id))
    })?;
    env.no_overcommit()?;
    // No gang half-bound: every gang of the test has 0 or all of its pods bound.
    for g in [
        "tf-mnist-job",
        "too-big",
        "beside-others",
        "before-kill",
        "after-kill",
    ] {
        let (bound, total) = env.gang_bound(g)?;
        if bound != 0 && bound != total {
            return Err(format!("{g} is half-bound: {bound} of {total}"));
        }
    }
    Ok(format!(
        "leader replica {killed} SIGKILLed; replica {new_leader} leads; both gangs bound {:.1}s after the kill; no overcommit, no half-bound gang",
        took.as_secs_f64()
    ))
}

/// SIGTERM (what Kubernetes sends a pod it stops) ends a replica cleanly: the process
/// finishes its cycle, stops its ledger replica and exits 0 within a bound.
fn check_graceful_stop(replicas: &mut [Replica]) -> Check {
    let r = replicas
        .iter_mut()
        .find(|r| r.alive())
        .ok_or("no replica left to stop")?;
    let mut child = r.child.take().ok_or("no child")?;
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .map_err(|e| format!("running kill -TERM: {e}"))?;
    if !status.success() {
        return Err(format!("kill -TERM {} failed: {status}", child.id()));
    }
    let t = Instant::now();
    let exit = poll(DEADLINE, "the replica to exit after SIGTERM", || {
        child.try_wait().map_err(|e| e.to_string())
    })?;
    if !exit.success() {
        return Err(format!("replica {} exited with {exit} after SIGTERM", r.id));
    }
    Ok(format!(
        "replica {} exited 0 {:.1}s after SIGTERM",
        r.id,
        t.elapsed().as_secs_f64()
    ))
}

#[test]
#[ignore = "needs the testbed (deploy/testbed/testbed up --nodes 16); .ci/run runs it with --ignored"]
fn phalanx_serve_on_the_testbed() {
    let (rt, client, ns) = testbed::open("e2e");
    let env = Env { rt, client, ns };

    let mut results: Vec<(&str, Check)> = vec![("conformance", conformance(&env))];

    let dir = tempfile::Builder::new()
        .prefix("phalanx-e2e-")
        .tempdir()
        .expect("a temporary directory");
    let (mut replicas, _) = testbed::start_replicas(dir.path(), &[]);
    let ready = poll(DEADLINE, "3 replicas ready (/readyz)", || {
        let ready = replicas.iter().filter(|r| r.ready()).count();
        Ok((ready == 3).then_some(()))
    });
    if let Err(e) = ready {
        results.push(("replicas ready", Err(e)));
    } else {
        results.push(("seed job placed whole", check_seed_job(&env)));
        results.push(("gang that cannot fit", check_too_big(&env)));
        results.push((
            "other scheduler's pods accounted",
            check_other_scheduler(&env),
        ));
        results.push((
            "hostile objects: a Warning Event each, the next gang bound",
            check_hostile_objects_warned(&env),
        ));
        results.push(("leader killed mid-run", check_failover(&env, &mut replicas)));
        results.push((
            "SIGTERM stops a replica cleanly",
            check_graceful_stop(&mut replicas),
        ));
    }
    // No namespace controller runs on the testbed, so the namespace itself is left.
    testbed::finish(
        &env.rt,
        &env.client,
        &env.ns,
        &mut replicas,
        &results,
        "phalanx-e2e-logs",
    );
}
