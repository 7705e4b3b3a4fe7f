//! Hostile and oversized input (issue 17): each refused once, up front, with an error that
//! names the object, the field and the value, in bounded time.

use std::time::{Duration, Instant};

use super::checks::MAX_PODS_PER_GANG;
use super::tests::{assert_mentions, load, load_err};
use super::*;

fn pod_group(name: &str, min_member: &str) -> String {
    format!(
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata: {{name: {name}, namespace: default}}\nspec: {{minMember: {min_member}}}\n"
    )
}

fn pod_in(group: &str, index: usize) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p-{index}\n  annotations: {{scheduling.k8s.io/group-name: {group}}}\nspec: {{containers: [{{name: c}}]}}\n"
    )
}

#[test]
fn a_gang_larger_than_the_ledger_accepts_is_refused_naming_the_pod_group_and_the_limit() {
    assert_eq!(MAX_PODS_PER_GANG, 4096, "the ledger's limit");
    let err = load_err(&pod_group("huge", "4097"));
    assert_mentions(
        &err,
        &["PodGroup default/huge", "spec.minMember", "4097", "4096"],
    );
    assert!(load(&pod_group("largest", "4096")).is_ok());
}

#[test]
fn a_pod_group_with_more_pods_than_the_ledger_accepts_is_refused_at_the_pod_past_the_limit() {
    let mut docs = vec![pod_group("wide", "1")];
    docs.extend((0..=MAX_PODS_PER_GANG).map(|i| pod_in("wide", i)));
    let err = load_err(&docs.join("---\n"));
    assert_mentions(
        &err,
        &[
            "Pod default/p-4096",
            "PodGroup default/wide",
            "4096 pods per gang",
        ],
    );
}

#[test]
fn a_job_whose_gang_exceeds_the_ledger_limit_is_refused_naming_min_available() {
    let job = "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j, namespace: default}\nspec:\n  minAvailable: 5000\n  tasks:\n  - name: w\n    replicas: 5000\n    template: {spec: {containers: [{name: c}]}}\n";
    let err = load_err(job);
    assert_mentions(
        &err,
        &["Job default/j", "spec.minAvailable", "5000", "4096"],
    );
}

#[test]
fn names_longer_than_kubernetes_allows_are_refused_with_the_field() {
    let long_name = "a".repeat(254);
    let err = load_err(&pod_in("g", 0).replace("p-0", &long_name));
    assert_mentions(&err, &["metadata.name", "254 characters", "at most 253"]);
    let node = format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: n\n  labels: {{zone: {}}}\n",
        "z".repeat(64)
    );
    let err = load_err(&node);
    assert_mentions(
        &err,
        &["Node n", "metadata.labels[zone]", "64 characters", "63"],
    );
    let queue = format!(
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {{name: {}}}\nspec: {{weight: 1}}\n",
        "q".repeat(300)
    );
    assert_mentions(&load_err(&queue), &["metadata.name", "300 characters"]);
}

#[test]
fn an_empty_group_name_annotation_is_refused_rather_than_binding_the_pod_alone() {
    let err = load_err(&pod_in("\"\"", 0));
    assert_mentions(
        &err,
        &[
            "Pod default/p-0",
            "scheduling.k8s.io/group-name",
            "is empty",
        ],
    );
}

#[test]
fn a_scenario_asking_for_a_billion_cycles_is_refused() {
    let text = "apiVersion: phalanx.dev/v1alpha1\nkind: Expectation\nspec: {cycles: 1000000000}\n";
    assert_mentions(&load_err(text), &["spec.cycles", "1000000000", "100000"]);
}

#[test]
fn a_scheduler_conf_without_gang_loads_with_a_loud_warning() {
    let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: volcano-system}\ndata:\n  volcano-scheduler.conf: |\n    actions: allocate\n    tiers: []\n";
    let w = load(text).expect("loads without --strict-config");
    assert!(
        w.warnings
            .iter()
            .any(|m| m.contains("GANG SCHEDULING IS OFF")),
        "{:?}",
        w.warnings
    );
    let strict = LoadOptions {
        strict_config: true,
        ..LoadOptions::default()
    };
    let err = load_workload(text, &strict)
        .expect_err("strict refuses")
        .to_string();
    assert_mentions(
        &err,
        &["ConfigMap volcano-system/c", "GANG SCHEDULING IS OFF"],
    );
}

/// Each hostile text must fail (not load, not panic) within the time bound.
#[track_caller]
fn refused_quickly(text: &str, parts: &[&str]) {
    let start = Instant::now();
    let err = load_err(text);
    let took = start.elapsed();
    assert!(took < Duration::from_secs(10), "{took:?} for {err}");
    assert_mentions(&err, parts);
}

#[test]
fn hostile_quantities_are_refused_naming_the_object_field_and_text() {
    let pod = |requests: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: q}}\nspec:\n  containers:\n  - name: c\n    resources:\n      requests:\n{requests}"
        )
    };
    for (requests, text) in [
        ("        cpu: 1e400\n", "1e400"),
        ("        cpu: -1E30\n", "-1E30"),
        ("        cpu: 1Ei\n", "1Ei"),
        ("        nvidia.com/gpu: \"0.5\"\n", "0.5"),
        (
            "        memory: 9223372036854775808\n",
            "9223372036854775808",
        ),
    ] {
        refused_quickly(
            &pod(requests),
            &[
                "Pod default/q",
                "spec.containers[0].resources.requests",
                text,
            ],
        );
    }
}

#[test]
fn a_yaml_alias_bomb_is_refused_in_bounded_time() {
    let mut text = String::from(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: bomb}\nx0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    for i in 1..10 {
        let prev = i - 1;
        text.push_str(&format!(
            "x{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
        ));
    }
    text.push_str("spec: {containers: [{name: c}]}\n");
    refused_quickly(&text, &["document 0"]);
}

#[test]
fn deeply_nested_yaml_is_refused_without_overflowing_the_stack() {
    let depth = 100_000;
    let text = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: deep}}\nspec: {}{}\n",
        "[".repeat(depth),
        "]".repeat(depth)
    );
    refused_quickly(&text, &["document 0"]);
}

#[test]
fn binary_garbage_is_refused_as_input_not_a_panic() {
    let garbage: String = (0u32..4096)
        .map(|i| char::from_u32((i * 7919) % 0xD7FF).unwrap_or('?'))
        .collect();
    let start = Instant::now();
    assert!(load(&garbage).is_err());
    assert!(start.elapsed() < Duration::from_secs(10));
}

#[test]
fn min_member_of_two_to_the_31_minus_one_is_refused() {
    let err = load_err(&pod_group("max", "2147483647"));
    assert_mentions(
        &err,
        &["PodGroup default/max", "spec.minMember", "2147483647"],
    );
}

#[test]
fn a_timeout_annotation_the_scheduler_cannot_read_is_warned_about() {
    let text = "apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata:\n  name: t\n  annotations: {phalanx.dev/schedule-timeout: 1.5h, phalanx.dev/timeout-action: halt}\nspec: {minMember: 1}\n";
    let w = load(text).expect("loads");
    let about = |needle: &str| w.warnings.iter().any(|m| m.contains(needle));
    assert!(
        about("phalanx.dev/schedule-timeout: \"1.5h\" is not a duration"),
        "{:?}",
        w.warnings
    );
    assert!(
        about("phalanx.dev/timeout-action: \"halt\""),
        "{:?}",
        w.warnings
    );
}

#[test]
fn a_counted_resource_whose_total_would_saturate_the_deserved_share_is_refused() {
    // proportion shares GPUs out in millionths: a cluster total past i64::MAX / 10^6
    // saturated every queue's deserved share, and the gang was never placed.
    let node = |name: &str, gpus: &str| {
        format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}}}\nstatus:\n  allocatable: {{nvidia.com/gpu: \"{gpus}\"}}\n---\n"
        )
    };
    let limit = super::checks::MAX_WHOLE_COUNT_TOTAL;
    assert_eq!(limit, 9_223_372_036_854);
    let half = (limit / 2 + 1).to_string();
    let err = load_err(&format!("{}{}", node("a", &half), node("b", &half)));
    assert_mentions(
        &err,
        &[
            "Node b",
            "nvidia.com/gpu",
            "9223372036854",
            "deserved share",
        ],
    );
    let fits = (limit / 2).to_string();
    load(&format!("{}{}", node("a", &fits), node("b", &fits))).expect("at the limit");
}

#[test]
fn min_member_written_as_a_string_is_refused_naming_the_field() {
    assert_mentions(
        &load_err(&pod_group("g", "\"1\"")),
        &["PodGroup default/g", "spec.minMember", "\"1\"", "not text"],
    );
    // Numbers still load, and minMember: 0 and an absent one keep their meaning.
    for (min_member, want) in [("3", 3), ("0", 0)] {
        let w = load(&pod_group("g", min_member)).expect(min_member);
        assert_eq!(w.pod_groups[0].min_member, want);
    }
    let text = "apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata: {name: g}\nspec: {queue: default}\n";
    assert_eq!(
        load(text).expect("no minMember").pod_groups[0].min_member,
        1
    );
}

#[test]
fn a_pod_naming_a_pod_group_of_another_namespace_is_warned_about() {
    let text = format!(
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata: {{name: g, namespace: other}}\nspec: {{minMember: 1}}\n---\n{}",
        pod_in("g", 0)
    );
    let w = load(&text).expect("a dangling reference is a warning");
    assert!(
        w.warnings
            .iter()
            .any(|m| m.contains("Pod default/p-0") && m.contains("default/g")),
        "{:?}",
        w.warnings
    );
}

#[test]
fn a_queue_weight_past_int32_is_refused_and_the_largest_does_not_wrap_the_sum() {
    let queue = |name: &str, weight: &str| {
        format!(
            "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {{name: {name}}}\nspec: {{weight: {weight}}}\n---\n"
        )
    };
    for weight in ["2147483648", "1e400", "huge"] {
        assert_mentions(
            &load_err(&queue("q", weight)),
            &["Queue q", "spec.weight", weight],
        );
    }
    let w = load(&format!(
        "{}{}",
        queue("a", "2147483647"),
        queue("b", "2147483647")
    ))
    .expect("int32's largest weight");
    let total: u64 = w.queues.iter().map(|q| u64::from(q.weight)).sum();
    assert_eq!(
        total,
        2 * 2_147_483_647 + 1,
        "the default queue's weight is 1"
    );
}
