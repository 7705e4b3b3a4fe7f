//! The contract of the [`Cluster`] seam, as one suite every implementation runs: the
//! simulator now, the Kubernetes backend when it exists (same function, a cluster built on
//! the testbed). Each check says which Kubernetes behaviour it stands for.
//!
//! The suite needs a cluster holding, as `make` builds it from these objects: node `n1` with
//! 2 GPUs, pending pods `default/a` and `default/b` (1 GPU each, PodGroup `default/g`), and
//! PodGroup `default/g` (minMember 2).

use crate::cluster::{Cluster, ClusterError};
use crate::framework::Event;
use crate::model::{Node, ObjectKey, Pod, PodGroup, PodGroupPhase, PodGroupStatus, Resources};

/// The objects the suite's cluster must hold.
pub fn fixture() -> (Vec<Node>, Vec<Pod>, Vec<PodGroup>) {
    let gpu = |n| Resources::from_pairs([("nvidia.com/gpu", n)]);
    let pods = ["a", "b"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut p = Pod::new(ObjectKey::new("default", *name), gpu(1));
            p.group = Some("g".into());
            p.creation_index = i as u64 + 1;
            p
        })
        .collect();
    (
        vec![Node::new("n1", gpu(2))],
        pods,
        vec![PodGroup::new(ObjectKey::new("default", "g"), 2)],
    )
}

/// Runs every check; returns the failures (empty = conforms).
pub fn check<C: Cluster>(make: impl Fn() -> C) -> Vec<String> {
    let mut failures = Vec::new();
    let mut fail = |what: &str, detail: String| failures.push(format!("{what}: {detail}"));
    let (a, b, g) = (
        ObjectKey::new("default", "a"),
        ObjectKey::new("default", "b"),
        ObjectKey::new("default", "g"),
    );

    // Binding sets nodeName; binding again to the same node is done (idempotent, as the
    // scheduler retries binds after a failover); to another node it is a conflict.
    let mut c = make();
    if let Err(e) = c.bind(&a, "n1") {
        fail("bind a pending pod", e.to_string());
    }
    let bound = c
        .snapshot()
        .pods
        .iter()
        .find(|p| p.key == a)
        .and_then(|p| p.node_name.clone());
    if bound.as_deref() != Some("n1") {
        fail(
            "a bound pod shows its node in the next snapshot",
            format!("{bound:?}"),
        );
    }
    if let Err(e) = c.bind(&a, "n1") {
        fail("binding again to the same node succeeds", e.to_string());
    }
    match c.bind(&a, "n2") {
        Err(ClusterError::AlreadyBound { .. }) | Err(ClusterError::NotFound { .. }) => {}
        other => fail(
            "binding a bound pod elsewhere is refused",
            format!("{other:?}"),
        ),
    }
    match c.bind(&ObjectKey::new("default", "ghost"), "n1") {
        Err(ClusterError::NotFound { .. }) => {}
        other => fail(
            "binding a pod that does not exist is NotFound",
            format!("{other:?}"),
        ),
    }

    // PodGroup status is written and read back.
    let status = PodGroupStatus {
        phase: PodGroupPhase::Inqueue,
        ..PodGroupStatus::default()
    };
    if let Err(e) = c.update_pod_group_status(&g, &status) {
        fail("write a PodGroup's status", e.to_string());
    }
    let phase = c
        .snapshot()
        .pod_groups
        .iter()
        .find(|x| x.key == g)
        .map(|x| x.status.phase);
    if phase != Some(PodGroupPhase::Inqueue) {
        fail(
            "a written status shows in the next snapshot",
            format!("{phase:?}"),
        );
    }
    match c.update_pod_group_status(&ObjectKey::new("default", "none"), &status) {
        Err(ClusterError::NotFound { .. }) => {}
        other => fail(
            "the status of a PodGroup that does not exist is NotFound",
            format!("{other:?}"),
        ),
    }

    // Events are accepted.
    let event = Event {
        object: g.clone(),
        kind: "Normal",
        reason: "Scheduled".into(),
        message: "conformance".into(),
    };
    if let Err(e) = c.record_event(&event) {
        fail("record an event", e.to_string());
    }

    // Eviction: the pod goes away (at once or after its grace period); evicting a pod that
    // does not exist is NotFound.
    if let Err(e) = c.bind(&b, "n1") {
        fail("bind the second pod", e.to_string());
    }
    if let Err(e) = c.evict(&b, "conformance") {
        fail("evict a bound pod", e.to_string());
    }
    match c.evict(&ObjectKey::new("default", "ghost"), "conformance") {
        Err(ClusterError::NotFound { .. }) => {}
        other => fail(
            "evicting a pod that does not exist is NotFound",
            format!("{other:?}"),
        ),
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::sim::SimCluster;
    use crate::model::Queue;

    #[test]
    fn the_simulator_conforms_to_the_cluster_contract() {
        let failures = check(|| {
            let (nodes, pods, groups) = fixture();
            SimCluster::new(nodes, pods, groups, vec![Queue::new("default")], Vec::new())
        });
        assert!(failures.is_empty(), "{failures:#?}");
    }
}
