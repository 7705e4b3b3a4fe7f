//! Checking a scenario's Expectation against the simulated cluster at the end of a run.

use std::fmt;

use crate::cluster::sim::SimCluster;
use crate::manifest::expectation::{Expectation, PodOutcome};
use crate::model::ObjectKey;

/// One expectation that did not hold: what was expected and what happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unmet {
    pub subject: String,
    pub expected: String,
    pub got: String,
}

impl fmt::Display for Unmet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: expected {}, got {}",
            self.subject, self.expected, self.got
        )
    }
}

fn where_is(sim: &SimCluster, key: &ObjectKey) -> String {
    if sim.is_evicted(key) {
        return "evicted".into();
    }
    match sim.pod(key) {
        None => "no such pod in the scenario".into(),
        Some(pod) => match &pod.node_name {
            Some(node) => format!("bound to {node}"),
            None => "pending".into(),
        },
    }
}

pub fn check(expectation: &Expectation, sim: &SimCluster) -> Vec<Unmet> {
    let mut unmet = Vec::new();
    for (key, outcome) in &expectation.pods {
        let pod = sim.pod(key);
        let node = pod.and_then(|p| p.node_name.as_deref());
        let ok = match outcome {
            PodOutcome::OnNode(want) => node == Some(want.as_str()),
            PodOutcome::Bound => node.is_some(),
            PodOutcome::OnNodes(nodes) => node.is_some_and(|n| nodes.iter().any(|w| w == n)),
            PodOutcome::Pending => pod.is_some() && node.is_none(),
            PodOutcome::Evicted => sim.is_evicted(key),
        };
        if !ok {
            let expected = match outcome {
                PodOutcome::OnNode(n) => format!("bound to {n}"),
                PodOutcome::Bound => "bound to some node".into(),
                PodOutcome::OnNodes(nodes) => format!("bound to one of {}", nodes.join(", ")),
                PodOutcome::Pending => "pending".into(),
                PodOutcome::Evicted => "evicted".into(),
            };
            unmet.push(Unmet {
                subject: format!("pod {key}"),
                expected,
                got: where_is(sim, key),
            });
        }
    }
    for (key, phase) in &expectation.pod_groups {
        let got = sim.pod_group(key).map(|g| g.status.phase);
        if got != Some(*phase) {
            unmet.push(Unmet {
                subject: format!("podGroup {key}"),
                expected: format!("phase {}", phase.as_str()),
                got: got.map_or_else(
                    || "no such PodGroup in the scenario".into(),
                    |p| format!("phase {}", p.as_str()),
                ),
            });
        }
    }
    if let Some(want) = expectation.bound_count {
        let got = sim.pods().filter(|p| p.node_name.is_some()).count();
        if got != want as usize {
            unmet.push(Unmet {
                subject: "boundCount".into(),
                expected: format!("{want} pods bound"),
                got: format!("{got} pods bound"),
            });
        }
    }
    unmet
}
