//! Loader tests: the seed fixtures load unchanged, and hostile input gets errors that name
//! the document, the object, the field and the text.

use super::*;
use crate::model::{PodGroupPhase, PodPhase, QueueState, TaintEffect};

const JOB: &str = include_str!("../../tests/fixtures/seed/job-tf-mnist.yaml");
const POD_GROUP: &str = include_str!("../../tests/fixtures/seed/podgroup-tf-distributed-job.yaml");
const QUEUE: &str = include_str!("../../tests/fixtures/seed/queue-research-team.yaml");
const CONF: &str = include_str!("../../tests/fixtures/seed/scheduler-configmap.yaml");
const RULE: &str = include_str!("../../tests/fixtures/seed/prometheus-rule.yaml");

const GI: i64 = 1 << 30;

pub(super) fn load(text: &str) -> Result<Workload, ManifestError> {
    load_workload(text, &LoadOptions::default())
}

#[track_caller]
pub(super) fn load_err(text: &str) -> String {
    match load(text) {
        Ok(w) => panic!("expected an error, loaded {} pods", w.pods.len()),
        Err(e) => e.to_string(),
    }
}

#[track_caller]
pub(super) fn assert_mentions(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(
            message.contains(part),
            "{message:?} does not mention {part:?}"
        );
    }
}

fn pod_doc(name: &str, requests: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: c\n    resources:\n      requests:\n{requests}"
    )
}

#[test]
fn seed_job_expands_to_eleven_pods_and_a_gang_of_eleven() {
    let w = load(JOB).unwrap();
    assert_eq!(w.pods.len(), 11);
    let names: Vec<String> = w.pods.iter().map(|p| p.key.to_string()).collect();
    assert_eq!(names[0], "default/tf-mnist-job-ps-0");
    assert_eq!(names[10], "default/tf-mnist-job-worker-9");
    assert_eq!(w.pod_groups.len(), 1);
    let pg = &w.pod_groups[0];
    assert_eq!(pg.key.to_string(), "default/tf-mnist-job");
    assert_eq!(pg.min_member, 11);
    assert_eq!(pg.min_task_member.get("ps"), Some(&1));
    assert_eq!(pg.min_task_member.get("worker"), Some(&10));
    let min = pg.min_resources.as_ref().unwrap();
    assert_eq!(min.gpus(), 11);
    assert_eq!(min.cpu_milli(), 42_000);
    assert_eq!(min.memory(), 84 * GI);
    for pod in &w.pods {
        assert_eq!(pod.group.as_deref(), Some("tf-mnist-job"));
        assert_eq!(
            pod.scheduler_name, "volcano",
            "the loader keeps the name as written"
        );
        assert!(!w.manages(pod));
        assert_eq!(
            pod.annotations
                .get("volcano.sh/job-name")
                .map(String::as_str),
            Some("tf-mnist-job")
        );
    }
    assert_eq!(w.pods[0].task_role.as_deref(), Some("ps"));
    assert_eq!(w.pods[1].requests.gpus(), 1);
    assert_eq!(w.pods[1].requests.cpu_milli(), 4000);
    let indices: Vec<u64> = std::iter::once(pg.creation_index)
        .chain(w.pods.iter().map(|p| p.creation_index))
        .collect();
    assert_eq!(indices, (1..=12).collect::<Vec<u64>>());
    assert!(
        w.warnings.iter().any(|m| m.contains("`volcano`")),
        "{:?}",
        w.warnings
    );
}

#[test]
fn a_scheduler_name_of_volcano_adopts_the_seed_job() {
    let opts = LoadOptions {
        scheduler_name: "volcano".into(),
        ..LoadOptions::default()
    };
    let w = load_workload(JOB, &opts).unwrap();
    assert!(w.pods.iter().all(|p| w.manages(p)));
}

#[test]
fn seed_pod_group_loads_with_a_warning_about_the_nested_min_resources() {
    let w = load(POD_GROUP).unwrap();
    let pg = &w.pod_groups[0];
    assert_eq!(pg.key.to_string(), "default/tf-distributed-job");
    assert_eq!(pg.min_member, 11);
    assert_eq!(pg.min_resources.as_ref().unwrap().gpus(), 11);
    assert_eq!(pg.queue, "default");
    assert_eq!(pg.priority_class_name.as_deref(), Some("high-priority"));
    assert_eq!(pg.status.phase, PodGroupPhase::Pending);
    assert!(
        w.warnings.iter().any(
            |m| m.contains("minResources") && m.contains("PodGroup default/tf-distributed-job")
        ),
        "{:?}",
        w.warnings
    );
    assert!(
        w.warnings.iter().any(|m| m.contains("high-priority")),
        "{:?}",
        w.warnings
    );
}

#[test]
fn seed_queue_loads_with_its_numbers_and_the_default_queue_is_added() {
    let w = load(QUEUE).unwrap();
    let names: Vec<&str> = w.queues.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, vec!["default", "research-team"]);
    let q = &w.queues[1];
    assert_eq!(q.weight, 1);
    let cap = q.capability.as_ref().unwrap();
    assert_eq!(cap.cpu_milli(), 100_000);
    assert_eq!(cap.memory(), 400 * GI);
    assert_eq!(cap.gpus(), 16);
    assert_eq!(q.guarantee.cpu_milli(), 50_000);
    assert_eq!(q.guarantee.memory(), 200 * GI);
    assert_eq!(q.guarantee.gpus(), 8);
    assert!(q.reclaimable);
    assert_eq!(q.state, QueueState::Open);
    assert_eq!(w.queues[0].creation_index, 0);
    assert_eq!(q.creation_index, 1);
}

#[test]
fn seed_config_map_warns_about_reclaim_and_cdp() {
    let w = load(CONF).unwrap();
    let conf = w.scheduler_conf.as_ref().unwrap();
    assert_eq!(conf.actions, vec!["enqueue", "allocate", "backfill"]);
    let conf_warnings: Vec<&String> = w
        .warnings
        .iter()
        .filter(|m| m.contains("volcano-scheduler.conf"))
        .collect();
    assert_eq!(conf_warnings.len(), 2, "{conf_warnings:?}");
    assert_mentions(
        conf_warnings[0],
        &[
            "document 0",
            "ConfigMap volcano-system/volcano-scheduler-conf",
            "`reclaim`",
        ],
    );
    assert_mentions(conf_warnings[1], &["`cdp`"]);
}

#[test]
fn seed_config_map_is_an_error_in_strict_mode() {
    let opts = LoadOptions {
        strict_config: true,
        ..LoadOptions::default()
    };
    let err = load_workload(CONF, &opts).unwrap_err().to_string();
    assert_mentions(
        &err,
        &[
            "document 0",
            "ConfigMap volcano-system/volcano-scheduler-conf",
            "volcano-scheduler.conf",
            "`reclaim`",
        ],
    );
}

#[test]
fn a_bad_embedded_configuration_is_an_error_at_its_line_in_the_file() {
    let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: conf, namespace: volcano-system}\ndata:\n  volcano-scheduler.conf: |\n    actions: allocate\n    tiers:\n    - plugins:\n      - name: gang\n        enableJobOrder: maybe\n";
    let err = load_err(text);
    assert_mentions(
        &err,
        &[
            "document 0",
            "ConfigMap volcano-system/conf",
            "tiers[0].plugins[0].enableJobOrder",
            "\"maybe\"",
            "line 10, column 25",
        ],
    );
}

#[test]
fn seed_prometheus_rule_is_not_a_scenario_document() {
    let err = load(RULE).unwrap_err();
    assert!(
        matches!(*err.problem, Problem::UnknownKind { .. }),
        "{err:?}"
    );
    assert_eq!(err.at.index, Some(0));
    assert_mentions(
        &err.to_string(),
        &["document 0", "monitoring.coreos.com/v1", "PrometheusRule"],
    );
}

#[test]
fn seed_files_load_together_with_indices_continuing_across_files() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/seed/");
    let files: Vec<String> = [
        "queue-research-team.yaml",
        "podgroup-tf-distributed-job.yaml",
        "job-tf-mnist.yaml",
        "scheduler-configmap.yaml",
    ]
    .iter()
    .map(|f| format!("{dir}{f}"))
    .collect();
    let w = load_workload_files(&files, &LoadOptions::default()).unwrap();
    assert_eq!(w.pods.len(), 11);
    assert_eq!(w.pod_groups.len(), 2);
    assert!(
        w.warnings
            .iter()
            .any(|m| m.contains("scheduler-configmap.yaml: document 3")),
        "{:?}",
        w.warnings
    );
    let mut with_rule = files.clone();
    with_rule.push(format!("{dir}prometheus-rule.yaml"));
    let err = load_workload_files(&with_rule, &LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert_mentions(
        &err,
        &["prometheus-rule.yaml", "document 4", "PrometheusRule"],
    );
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let err =
        load_workload_files(&["/nonexistent/scenario.yaml"], &LoadOptions::default()).unwrap_err();
    assert_mentions(
        &err.to_string(),
        &["/nonexistent/scenario.yaml", "cannot read"],
    );
}

#[test]
fn empty_documents_are_skipped_and_do_not_count() {
    let text = format!(
        "---\n---\n# only a comment\n---\n{}\n---\n",
        pod_doc("a", "        cpu: 1\n")
    );
    let w = load(&text).unwrap();
    assert_eq!(w.pods.len(), 1);
    let bad = format!("---\n---\n{}", pod_doc("a", "        cpu: abc\n"));
    assert_mentions(&load_err(&bad), &["document 0 (line 3)"]);
}

#[test]
fn bad_quantities_are_errors_naming_object_field_and_text() {
    for (resource, text) in [
        ("nvidia.com/gpu", "0.5"),
        ("cpu", "-1"),
        ("cpu", "1e400"),
        ("memory", "abc"),
        ("nvidia.com/gpu", "9223372036854775808"),
    ] {
        let doc = format!(
            "---\n{}",
            pod_doc("web-0", &format!("        {resource}: {text}\n"))
        );
        let err = load_err(&doc);
        assert_mentions(
            &err,
            &[
                "document 0",
                "Pod default/web-0",
                &format!("spec.containers[0].resources.requests.{resource}"),
                &format!("\"{text}\""),
            ],
        );
    }
}

#[test]
fn node_quantities_and_pods_are_read_from_allocatable() {
    let text = "apiVersion: v1\nkind: Node\nmetadata:\n  name: gpu-1\n  labels: {zone: a}\nspec:\n  taints:\n  - {key: gpu, value: a100, effect: NoSchedule}\nstatus:\n  allocatable: {cpu: \"64\", memory: 512Gi, nvidia.com/gpu: 8, pods: 50}\n  capacity: {cpu: 1}\n";
    let w = load(text).unwrap();
    let n = &w.nodes[0];
    assert_eq!(n.allocatable.cpu_milli(), 64_000);
    assert_eq!(n.allocatable.gpus(), 8);
    assert_eq!(n.allocatable.get("pods"), 0);
    assert_eq!(n.max_pods, 50);
    assert_eq!(n.taints[0].effect, TaintEffect::NoSchedule);
    let capacity_only =
        "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus:\n  capacity: {cpu: 2}\n";
    let w = load(capacity_only).unwrap();
    assert_eq!(w.nodes[0].allocatable.cpu_milli(), 2000);
    assert_eq!(w.nodes[0].max_pods, 110);
}

#[test]
fn a_bad_node_quantity_names_the_node_and_field() {
    let text = "apiVersion: v1\nkind: Node\nmetadata: {name: gpu-1}\nstatus:\n  allocatable: {nvidia.com/gpu: 1.5}\n";
    assert_mentions(
        &load_err(text),
        &["Node gpu-1", "status.allocatable.nvidia.com/gpu", "\"1.5\""],
    );
}

#[test]
fn yaml_syntax_errors_give_line_and_column() {
    let text = "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: a: b\n";
    let err = load(text).unwrap_err();
    assert!(
        matches!(*err.problem, Problem::Syntax { line: 8, .. }),
        "{err:?}"
    );
    assert_mentions(&err.to_string(), &["line 8", "column"]);
}

#[test]
fn a_document_without_kind_or_api_version_is_an_error() {
    assert_mentions(
        &load_err("apiVersion: v1\nmetadata: {name: a}\n"),
        &["document 0", "`kind`"],
    );
    assert_mentions(
        &load_err("kind: Pod\nmetadata: {name: a}\n"),
        &["document 0", "`apiVersion`"],
    );
}

#[test]
fn containers_that_are_not_a_list_are_an_error_with_the_path() {
    let err = load_err("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: 5\n");
    assert_mentions(&err, &["Pod default/p", "spec.containers", "line 5"]);
}

#[test]
fn duplicate_pods_are_an_error_naming_both_documents() {
    let doc = pod_doc("dup", "        cpu: 1\n");
    let err = load_err(&format!("{doc}---\n{doc}"));
    assert_mentions(
        &err,
        &[
            "document 1",
            "Pod default/dup",
            "declared twice",
            "document 0",
        ],
    );
}

#[test]
fn a_pod_duplicating_a_job_pod_is_an_error() {
    let text = format!(
        "{JOB}\n---\n{}",
        pod_doc("tf-mnist-job-ps-0", "        cpu: 1\n")
    );
    assert_mentions(
        &load_err(&text),
        &["Pod default/tf-mnist-job-ps-0", "declared twice"],
    );
}

#[test]
fn a_pod_group_of_min_member_zero_loads_without_a_gang_constraint() {
    // Volcano's CRD says `minimum: 0`; such a group's pods are placed one by one.
    let text = "apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata: {name: g}\nspec:\n  minMember: 0\n";
    let w = load(text).expect("minMember 0 is valid");
    assert_eq!(w.pod_groups[0].min_member, 0);
}

#[test]
fn a_job_whose_tasks_all_have_min_available_zero_gets_a_pod_group_of_min_member_zero() {
    let text = "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j}\nspec:\n  tasks:\n  - {name: a, replicas: 2, minAvailable: 0, template: {spec: {containers: [{name: c}]}}}\n";
    let w = load(text).expect("minAvailable 0 is valid, as Volcano's webhook accepts it");
    assert_eq!(w.pod_groups[0].min_member, 0);
    assert_eq!(w.pods.len(), 2);
}

#[test]
fn min_member_out_of_range_is_an_error() {
    for n in ["-3", "100001"] {
        let text = format!(
            "apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata: {{name: g}}\nspec:\n  minMember: {n}\n"
        );
        assert_mentions(
            &load_err(&text),
            &["PodGroup default/g", "spec.minMember", n],
        );
    }
}

#[test]
fn queue_weight_zero_is_read_as_one_with_a_warning_and_negative_is_an_error() {
    let q = |w: &str| {
        format!(
            "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {{name: q}}\nspec:\n  weight: {w}\n"
        )
    };
    let w = load(&q("0")).unwrap();
    assert_eq!(w.queues[1].weight, 1);
    assert!(
        w.warnings
            .iter()
            .any(|m| m.contains("Queue q") && m.contains("weight"))
    );
    assert_mentions(&load_err(&q("-1")), &["Queue q", "spec.weight", "-1"]);
}

#[test]
fn invalid_enumerations_name_the_field_and_text() {
    let base = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c}]\n";
    let cases = [
        (
            "  tolerations: [{key: k, operator: Maybe}]\n",
            "spec.tolerations[0].operator",
            "\"Maybe\"",
        ),
        (
            "  tolerations: [{key: k, effect: NoWay}]\n",
            "spec.tolerations[0].effect",
            "\"NoWay\"",
        ),
        (
            "  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n        - matchExpressions: [{key: zone, operator: Near, values: [a]}]\n",
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator",
            "\"Near\"",
        ),
        (
            "  preemptionPolicy: Sometimes\n",
            "spec.preemptionPolicy",
            "\"Sometimes\"",
        ),
        (
            "status:\n  phase: Sleeping\n",
            "status.phase",
            "\"Sleeping\"",
        ),
    ];
    for (extra, path, text) in cases {
        assert_mentions(
            &load_err(&format!("{base}{extra}")),
            &["Pod default/p", path, text],
        );
    }
    let taint = "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nspec:\n  taints: [{key: k, effect: Sometimes}]\n";
    assert_mentions(
        &load_err(taint),
        &["Node n", "spec.taints[0].effect", "\"Sometimes\""],
    );
}

#[test]
fn a_pod_naming_a_missing_pod_group_is_kept_with_a_warning() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: {scheduling.k8s.io/group-name: ghost}\nspec:\n  containers: [{name: c}]\n";
    let w = load(text).unwrap();
    assert_eq!(w.pods[0].group.as_deref(), Some("ghost"));
    assert!(
        w.warnings
            .iter()
            .any(|m| m.contains("Pod default/p") && m.contains("default/ghost")),
        "{:?}",
        w.warnings
    );
}

#[test]
fn a_pod_group_naming_a_missing_queue_is_kept_with_a_warning() {
    let text = "apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata: {name: g}\nspec: {minMember: 2, queue: nowhere}\n";
    let w = load(text).unwrap();
    assert_eq!(w.pod_groups[0].queue, "nowhere");
    assert!(
        w.warnings
            .iter()
            .any(|m| m.contains("PodGroup default/g") && m.contains("`nowhere`")),
        "{:?}",
        w.warnings
    );
}

#[test]
fn pod_requests_follow_kubernetes_effective_request_rules() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ml}\nspec:\n  schedulerName: phalanx\n  priority: 7\n  nodeName: n1\n  initContainers:\n  - name: setup\n    resources: {requests: {cpu: 3, memory: 1Gi}}\n  - name: sidecar\n    restartPolicy: Always\n    resources: {requests: {cpu: 500m}}\n  - name: late\n    resources: {requests: {cpu: 1}}\n  containers:\n  - name: a\n    resources: {requests: {cpu: 1}, limits: {memory: 2Gi, nvidia.com/gpu: 2}}\n  - name: b\n    resources: {requests: {cpu: 1}}\nstatus: {phase: Running}\n";
    let w = load(text).unwrap();
    let p = &w.pods[0];
    assert_eq!(p.key.to_string(), "ml/p");
    // containers 2 cpu + sidecar 0.5 = 2.5; init peak: setup 3 (before the sidecar), late 1 + 0.5.
    assert_eq!(p.requests.cpu_milli(), 3000);
    assert_eq!(p.requests.memory(), 2 * GI, "limits default the request");
    assert_eq!(p.requests.gpus(), 2);
    assert_eq!(p.priority, Some(7));
    assert_eq!(p.node_name.as_deref(), Some("n1"));
    assert_eq!(p.phase, PodPhase::Running);
    assert!(w.manages(p));
}

#[test]
fn sidecars_add_to_the_sum_of_containers() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  initContainers:\n  - {name: s, restartPolicy: Always, resources: {requests: {cpu: 2}}}\n  containers:\n  - {name: a, resources: {requests: {cpu: 1}}}\n";
    assert_eq!(load(text).unwrap().pods[0].requests.cpu_milli(), 3000);
}

#[test]
fn a_request_above_its_limit_is_an_error() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - {name: a, resources: {requests: {cpu: 2}, limits: {cpu: 1}}}\n";
    assert_mentions(
        &load_err(text),
        &[
            "spec.containers[0].resources.requests.cpu",
            "\"2\"",
            "limit",
        ],
    );
}

#[test]
fn sim_duration_is_read_and_a_malformed_one_is_an_error() {
    let doc = |d: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: {{phalanx.dev/sim-duration: \"{d}\"}}\nspec:\n  containers: [{{name: c}}]\n"
        )
    };
    assert_eq!(
        load(&doc("1h30m")).unwrap().pods[0].sim_duration_ms,
        Some(5_400_000)
    );
    assert_mentions(
        &load_err(&doc("soon")),
        &["Pod default/p", "phalanx.dev/sim-duration", "\"soon\""],
    );
}

#[test]
fn totals_that_overflow_i64_are_errors_naming_the_object() {
    let node = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}}}\nstatus:\n  allocatable: {{memory: \"5000000000000000000\"}}\n---\n"
        )
    };
    let err = load_err(&format!("{}{}", node("a"), node("b")));
    assert_mentions(
        &err,
        &["document 1", "Node b", "memory", "9223372036854775807"],
    );
    let pods = format!(
        "{}---\n{}",
        pod_doc("x", "        cpu: 5000000000000000\n"),
        pod_doc("y", "        cpu: 5000000000000000\n")
    );
    assert_mentions(&load_err(&pods), &["Pod default/y", "cpu"]);
}

#[test]
fn expectation_is_read() {
    let text = format!(
        "{JOB}\n---\napiVersion: phalanx.dev/v1alpha1\nkind: Expectation\nspec:\n  cycles: 3\n  pods:\n    default/tf-mnist-job-ps-0: {{node: gpu-1}}\n    default/tf-mnist-job-worker-0: {{bound: true}}\n    default/small-0: {{onNodes: [gpu-1, gpu-2]}}\n    default/big-0: {{pending: true}}\n    default/low-0: {{evicted: true}}\n  podGroups:\n    default/tf-mnist-job: {{phase: Pending}}\n  boundCount: 11\n"
    );
    let w = load(&text).unwrap();
    let e = w.expectation.as_ref().unwrap();
    assert_eq!(e.cycles, 3);
    assert_eq!(e.pods.len(), 5);
    assert_eq!(
        e.pods[&crate::model::ObjectKey::parse("default/tf-mnist-job-ps-0")],
        PodOutcome::OnNode("gpu-1".into())
    );
    assert_eq!(
        e.pod_groups[&crate::model::ObjectKey::parse("default/tf-mnist-job")],
        PodGroupPhase::Pending
    );
    assert_eq!(e.bound_count, Some(11));
    assert!(e.invariants);
    assert!(
        w.warnings.iter().any(|m| m.contains("default/small-0")),
        "{:?}",
        w.warnings
    );
    let two = "apiVersion: phalanx.dev/v1alpha1\nkind: Expectation\nspec:\n  pods:\n    a: {bound: true, pending: true}\n";
    assert_mentions(&load_err(two), &["spec.pods.a", "exactly one"]);
}

#[test]
fn job_defaults_and_validation_follow_volcano() {
    let job = |tasks: &str, extra: &str| {
        format!(
            "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {{name: j}}\nspec:\n{extra}  tasks:\n{tasks}"
        )
    };
    let t = |name: &str, replicas: i32, min: &str| {
        format!(
            "  - {{name: {name}, replicas: {replicas}{min}, template: {{spec: {{containers: [{{name: c, resources: {{requests: {{cpu: 1}}}}}}]}}}}}}\n"
        )
    };
    let w = load(&job(
        &format!("{}{}", t("a", 2, ", minAvailable: 1"), t("b", 3, "")),
        "",
    ))
    .unwrap();
    let pg = &w.pod_groups[0];
    assert_eq!(pg.min_member, 4, "sum of the tasks' minAvailable");
    assert_eq!(pg.min_task_member.get("a"), Some(&1));
    assert_eq!(pg.min_task_member.get("b"), Some(&3));
    assert_eq!(pg.min_resources.as_ref().unwrap().cpu_milli(), 4000);
    assert_eq!(w.pods.len(), 5);
    assert!(
        w.pods.iter().all(|p| p.scheduler_name == "phalanx"),
        "a Job without schedulerName is phalanx's"
    );
    assert_mentions(
        &load_err(&job(&t("a", 2, ", minAvailable: 3"), "")),
        &["Job default/j", "spec.tasks[0].minAvailable"],
    );
    assert_mentions(
        &load_err(&job(&t("a", 2, ""), "  minAvailable: 5\n")),
        &["spec.minAvailable", "5"],
    );
    assert_mentions(
        &load_err(&job(&format!("{}{}", t("a", 1, ""), t("a", 1, "")), "")),
        &["spec.tasks[1].name", "twice"],
    );
    let bad_template = job(
        "  - {name: a, replicas: 1, template: {spec: {containers: [{name: c, resources: {requests: {cpu: lots}}}]}}}\n",
        "",
    );
    assert_mentions(
        &load_err(&bad_template),
        &[
            "Job default/j",
            "spec.tasks[0].template.spec.containers[0].resources.requests.cpu",
            "\"lots\"",
        ],
    );
}

#[test]
fn priority_classes_are_read_and_two_global_defaults_are_an_error() {
    let pc = |name: &str, value: i32, global: bool| {
        format!(
            "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: {name}}}\nvalue: {value}\nglobalDefault: {global}\n---\n"
        )
    };
    let w = load(&pc("high", 1000, true)).unwrap();
    assert_eq!(w.priority_classes[0].value, 1000);
    assert!(w.priority_classes[0].global_default);
    assert_mentions(
        &load_err(&format!("{}{}", pc("a", 1, true), pc("b", 2, true))),
        &["PriorityClass b", "globalDefault"],
    );
}

#[test]
fn a_config_map_without_the_conf_key_is_ignored_and_two_confs_are_an_error() {
    let other = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\ndata: {x: y}\n";
    let w = load(other).unwrap();
    assert!(w.scheduler_conf.is_none());
    assert_eq!(w.ignored.len(), 1);
    assert_mentions(
        &load_err(&format!("{CONF}\n---\n{CONF}")),
        &["document 1", "declared twice"],
    );
}

#[test]
fn deep_nesting_and_alias_bombs_are_errors_not_crashes() {
    let deep = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec: {}{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    assert!(load(&deep).is_err());
    let mut bomb = String::from(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n",
    );
    for i in 1..12 {
        let prev = i - 1;
        bomb.push_str(&format!("a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"));
    }
    assert!(load(&bomb).is_err());
}

#[test]
fn hostile_documents_are_errors_not_panics() {
    for text in [
        "[1, 2]",
        "just text",
        "apiVersion: v1\nkind: Pod\n",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n",
        "{a: &x [*x]}",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\nspec: {}\n",
    ] {
        assert!(load(text).is_err(), "{text:?} loaded");
    }
}

proptest::proptest! {
    #![proptest_config(crate::proptest_config(256, 0x0017_3A1F))]

    #[test]
    fn arbitrary_text_never_panics_the_loader(text in "\\PC{0,200}") {
        let _ = load(&text);
    }

    #[test]
    fn arbitrary_yaml_like_text_never_panics_the_loader(
        lines in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::strategy::Just("---".to_string()),
                proptest::strategy::Just("apiVersion: v1".to_string()),
                proptest::strategy::Just("kind: Pod".to_string()),
                proptest::strategy::Just("kind: Node".to_string()),
                proptest::strategy::Just("metadata: {name: a}".to_string()),
                proptest::strategy::Just("spec:".to_string()),
                proptest::strategy::Just("  containers: [{name: c, resources: {requests: {cpu: 1e400}}}]".to_string()),
                proptest::strategy::Just("status: {allocatable: {cpu: 9e18}}".to_string()),
                "[ -~]{0,30}",
            ],
            0..20,
        )
    ) {
        let _ = load(&lines.join("\n"));
    }
}

#[test]
fn a_second_expectation_is_refused_with_a_readable_message() {
    let exp = "apiVersion: phalanx.dev/v1alpha1\nkind: Expectation\nspec: {boundCount: 0}\n";
    let err = load_err(&format!("{exp}---\n{exp}"));
    assert_mentions(
        &err,
        &[
            "document 1",
            "Expectation is declared twice",
            "only one",
            "document 0",
        ],
    );
    assert!(!err.to_string().contains("  "), "{err}");
}
