//! `phalanx simulate --explain NAMESPACE/PODGROUP` and `--queues`, as a user runs them.

use crate::common;
use common::scenario;

/// Exit code and stdout + stderr together.
fn phalanx(args: &[&str]) -> (i32, String) {
    let (code, stdout, stderr) = common::phalanx(args);
    (code, stdout + &stderr)
}

#[test]
fn explain_says_why_a_podgroup_in_a_missing_queue_waits() {
    let (code, out) = phalanx(&[
        "simulate",
        "--scenario",
        &scenario("76-podgroup-naming-a-missing-queue-waits-with-a-condition.yaml"),
        "--explain",
        "default/orphan",
    ]);
    assert_eq!(code, 0, "{out}");
    for part in [
        "PodGroup default/orphan: phase Pending",
        "minMember 2",
        "queue \"no-such-queue\" does not exist",
        "condition Unschedulable (QueueNotFound)",
        "Warning QueueNotFound",
    ] {
        assert!(out.contains(part), "{part:?} missing:\n{out}");
    }
}

#[test]
fn explain_gives_queue_numbers_and_per_node_reasons() {
    let (code, out) = phalanx(&[
        "simulate",
        "--scenario",
        &scenario("72-reclaim-two-queues-settle-without-taking-turns.yaml"),
        "--explain",
        "default/b2",
    ]);
    assert_eq!(code, 0, "{out}");
    for part in [
        "queue b: state Open, weight 1",
        "allocated  cpu 2, nvidia.com/gpu 4",
        "deserved",
        "fits on 0 of 4 nodes now",
        "4 nodes: insufficient nvidia.com/gpu",
    ] {
        assert!(out.contains(part), "{part:?} missing:\n{out}");
    }
}

#[test]
fn the_fairness_run_prints_each_queues_share() {
    let (code, out) = phalanx(&[
        "simulate", "--nodes", "16", "--jobs", "300", "--queues", "a:1,b:3",
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("queue        weight"), "{out}");
    assert!(out.contains("25.0%") && out.contains("75.0%"), "{out}");
}

#[test]
fn a_malformed_queues_flag_is_refused() {
    let (code, out) = phalanx(&["simulate", "--nodes", "4", "--queues", "a=1"]);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("NAME:WEIGHT"), "{out}");
}
