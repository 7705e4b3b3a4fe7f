//! Preempt, reclaim, timeouts and PodGroup status, checked on what the scenario files cannot
//! show: the CyclePlan of one cycle, PodGroup conditions, Events, and the Statement's undo.

use phalanx_scheduler::cluster::Cluster;
use phalanx_scheduler::cluster::sim::SimCluster;
use phalanx_scheduler::framework::{SchedulerConf, Session, Statement, TaskStatus, run_cycle};
use phalanx_scheduler::manifest::{LoadOptions, Workload, load_workload};
use phalanx_scheduler::model::{ObjectKey, PodGroupPhase};
use phalanx_scheduler::simulate::scenario::{ScenarioOptions, run_scenario};

const NODE: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: gpu-1}\nstatus: {allocatable: {cpu: \"32\", memory: 128Gi, nvidia.com/gpu: \"4\"}}\n";

const CLASSES: &str = "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: low}\nvalue: 100\n---\napiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n";

fn gang(name: &str, class: &str, gpus: u32, node: Option<&str>, annotations: &str) -> String {
    let status = if node.is_some() {
        "status: {phase: Running}\n"
    } else {
        ""
    };
    let pod_node = node.map_or(String::new(), |n| format!("  nodeName: {n}\n"));
    let pod_annotations = if annotations.is_empty() {
        String::new()
    } else {
        format!(", {annotations}")
    };
    let pod_status = if node.is_some() {
        "status: {phase: Running}\n"
    } else {
        ""
    };
    format!(
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata:\n  name: {name}\n  annotations: {{{annotations}}}\nspec: {{minMember: 1, priorityClassName: {class}}}\n{status}---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}-0\n  annotations: {{scheduling.k8s.io/group-name: {name}{pod_annotations}}}\nspec:\n  priorityClassName: {class}\n{pod_node}  containers:\n  - name: main\n    resources: {{requests: {{cpu: \"1\", nvidia.com/gpu: {gpus}}}}}\n{pod_status}"
    )
}

fn workload(docs: &[String]) -> Workload {
    let text = docs.join("---\n");
    load_workload(
        &text,
        &LoadOptions {
            scheduler_name: "phalanx".into(),
            strict_config: false,
        },
    )
    .expect("the test workload loads")
}

fn sim_of(w: Workload) -> SimCluster {
    SimCluster::new(w.nodes, w.pods, w.pod_groups, w.queues, w.priority_classes)
}

fn preemption_cluster() -> SimCluster {
    sim_of(workload(&[
        CLASSES.to_string(),
        NODE.to_string(),
        gang("low", "low", 4, Some("gpu-1"), ""),
        gang("high", "high", 4, None, ""),
    ]))
}

#[test]
fn the_preempting_cycle_plans_the_eviction_and_pipelines_the_preemptor_without_binding_it() {
    let sim = preemption_cluster();
    let (plan, _) = run_cycle(
        &sim.snapshot(),
        &SchedulerConf::volcano_default(),
        "phalanx",
    );
    let evicted: Vec<String> = plan.evictions.iter().map(|e| e.pod.to_string()).collect();
    assert_eq!(evicted, vec!["default/low-0"]);
    assert_eq!(plan.evictions[0].action, "preempt");
    assert_eq!(
        plan.evictions[0].for_gang,
        ObjectKey::new("default", "high")
    );
    assert_eq!(
        plan.bind_count(),
        0,
        "nothing is bound while victims still hold the node"
    );
    assert_eq!(plan.pipelined.len(), 1);
    assert_eq!(plan.pipelined[0].placements[0].node, "gpu-1");
    let reasons: Vec<(&str, &str)> = plan
        .events
        .iter()
        .map(|e| (e.object.name.as_str(), e.reason.as_str()))
        .collect();
    assert!(reasons.contains(&("high", "Preempt")), "{reasons:?}");
    assert!(reasons.contains(&("low", "Evicted")), "{reasons:?}");
}

#[test]
fn discarding_a_statement_gives_back_every_eviction_and_pipelined_placement() {
    let sim = preemption_cluster();
    let mut session = Session::open(
        &sim.snapshot(),
        &SchedulerConf::volcano_default(),
        "phalanx",
    );
    let find = |s: &Session, name: &str| {
        s.state
            .tasks
            .iter()
            .position(|t| t.pod.key.name == name)
            .expect("task exists")
    };
    let (low, high) = (find(&session, "low-0"), find(&session, "high-0"));
    let before_idle = session.state.nodes[0].idle.clone();
    let before_queue = session.state.queues[0].allocated.clone();
    let mut statement = Statement::new();
    statement.evict(&mut session, low, "preempt");
    statement.pipeline(&mut session, high, 0);
    assert_eq!(session.state.tasks[low].status, TaskStatus::Releasing);
    assert_eq!(session.state.tasks[high].status, TaskStatus::Pipelined);
    assert!(session.state.nodes[0].future_idle().gpus() == 0);
    statement.discard(&mut session);
    assert_eq!(session.state.tasks[low].status, TaskStatus::Running);
    assert_eq!(session.state.tasks[high].status, TaskStatus::Pending);
    assert_eq!(session.state.nodes[0].idle, before_idle);
    assert!(session.state.nodes[0].releasing.is_zero());
    assert!(session.state.nodes[0].pipelined.is_zero());
    assert_eq!(session.state.queues[0].allocated, before_queue);
    assert!(session.plan.evictions.is_empty());
}

#[test]
fn a_timed_out_gang_gets_a_timeout_condition_and_event_and_stop_releases_it() {
    let selector = |name: &str, action: &str| {
        format!(
            "apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata:\n  name: {name}\n  annotations: {{phalanx.dev/schedule-timeout: 10m, phalanx.dev/timeout-action: {action}}}\nspec: {{minMember: 1}}\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}-0\n  annotations: {{scheduling.k8s.io/group-name: {name}}}\nspec:\n  nodeSelector: {{accelerator: h100}}\n  containers:\n  - name: main\n    resources: {{requests: {{nvidia.com/gpu: 1}}}}\n"
        )
    };
    let text = [
        NODE.to_string(),
        selector("stops", "stop"),
        selector("retries", "retry"),
    ]
    .join("---\n");
    let report = run_scenario("timeouts", &text, &ScenarioOptions::default()).expect("loads");
    assert!(report.outcome.quiescent);
    assert!(
        report.sim.now_ms() >= 600_000,
        "the clock jumped to the deadline"
    );
    for (name, phase) in [
        ("stops", PodGroupPhase::Pending),
        ("retries", PodGroupPhase::Inqueue),
    ] {
        let key = ObjectKey::new("default", name);
        let group = report.sim.pod_group(&key).expect("exists");
        assert_eq!(group.status.phase, phase, "{name}");
        let c = group.status.conditions.last().expect("a condition");
        assert_eq!(
            (c.kind.as_str(), c.reason.as_str()),
            ("Unschedulable", "Timeout")
        );
        assert!(c.message.contains("schedule-timeout 10m"), "{}", c.message);
        assert!(
            report.sim.events_of(&key).is_some_and(|k| k
                .last
                .iter()
                .any(|(at, e)| e.reason == "Timeout" && *at >= 600_000)),
            "{name} has a Timeout event"
        );
    }
}

#[test]
fn a_podgroup_in_a_missing_queue_gets_a_queue_not_found_condition() {
    let text = format!(
        "{NODE}---\napiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata: {{name: orphan}}\nspec: {{minMember: 1, queue: nowhere}}\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: orphan-0\n  annotations: {{scheduling.k8s.io/group-name: orphan}}\nspec:\n  containers:\n  - name: main\n    resources: {{requests: {{nvidia.com/gpu: 1}}}}\n"
    );
    let report = run_scenario("orphan", &text, &ScenarioOptions::default()).expect("loads");
    let group = report
        .sim
        .pod_group(&ObjectKey::new("default", "orphan"))
        .expect("exists");
    assert_eq!(group.status.phase, PodGroupPhase::Pending);
    let c = group.status.conditions.last().expect("a condition");
    assert_eq!(c.reason, "QueueNotFound");
    assert!(
        c.message.contains("\"nowhere\" does not exist"),
        "{}",
        c.message
    );
}

#[test]
fn the_unschedulable_message_gives_the_numbers() {
    let text = [
        NODE.to_string(),
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: research}\nspec: {weight: 1, capability: {nvidia.com/gpu: 16}}\n".to_string(),
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata: {name: big}\nspec: {minMember: 2, queue: research}\n".to_string(),
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: big-0\n  annotations: {scheduling.k8s.io/group-name: big}\nspec:\n  containers:\n  - name: main\n    resources: {requests: {nvidia.com/gpu: 3}}\n".to_string(),
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: big-1\n  annotations: {scheduling.k8s.io/group-name: big}\nspec:\n  containers:\n  - name: main\n    resources: {requests: {nvidia.com/gpu: 3}}\n".to_string(),
    ]
    .join("---\n");
    let report = run_scenario("numbers", &text, &ScenarioOptions::default()).expect("loads");
    let group = report
        .sim
        .pod_group(&ObjectKey::new("default", "big"))
        .expect("exists");
    let c = group.status.conditions.last().expect("a condition");
    assert_eq!(c.kind, "Unschedulable");
    for part in [
        "2 pods need nvidia.com/gpu 6",
        "4 free on 1 nodes",
        "queue research: capability 16, allocated 0",
    ] {
        assert!(
            c.message.contains(part),
            "{part:?} missing in {}",
            c.message
        );
    }
}

#[test]
fn a_protected_victim_is_never_evicted() {
    let sim = sim_of(workload(&[
        CLASSES.to_string(),
        NODE.to_string(),
        gang(
            "low",
            "low",
            4,
            Some("gpu-1"),
            "volcano.sh/preemptable: \"false\"",
        ),
        gang("high", "high", 4, None, ""),
    ]));
    let (plan, _) = run_cycle(
        &sim.snapshot(),
        &SchedulerConf::volcano_default(),
        "phalanx",
    );
    assert!(plan.evictions.is_empty());
    assert!(plan.pipelined.is_empty());
}
