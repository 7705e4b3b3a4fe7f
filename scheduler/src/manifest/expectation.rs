//! `phalanx.dev/v1alpha1 Expectation`: what a scenario says must hold when it ends.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::error::FieldError;
use crate::model::{ObjectKey, PodGroupPhase};

/// The checked form of an Expectation document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expectation {
    /// 0 = run until a whole cycle changes nothing; N = exactly N cycles.
    pub cycles: u32,
    pub pods: BTreeMap<ObjectKey, PodOutcome>,
    pub pod_groups: BTreeMap<ObjectKey, PodGroupPhase>,
    /// Pods bound at the end, counting those already running.
    pub bound_count: Option<u32>,
    /// Check the named invariants after every cycle (default true).
    pub invariants: bool,
}

/// What must have become of one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodOutcome {
    /// Bound to exactly this node.
    OnNode(String),
    /// Bound to some node.
    Bound,
    /// Bound to one of these nodes.
    OnNodes(Vec<String>),
    /// Not bound.
    Pending,
    /// Evicted by preempt or reclaim.
    Evicted,
}

/// The document as written.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ExpectationDoc {
    pub spec: Option<ExpectationSpec>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExpectationSpec {
    pub cycles: Option<u32>,
    pub pods: Option<BTreeMap<String, PodOutcomeSpec>>,
    pub pod_groups: Option<BTreeMap<String, PodGroupOutcomeSpec>>,
    pub bound_count: Option<u32>,
    pub invariants: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodOutcomeSpec {
    pub node: Option<String>,
    pub bound: Option<bool>,
    pub on_nodes: Option<Vec<String>>,
    pub pending: Option<bool>,
    pub evicted: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodGroupOutcomeSpec {
    pub phase: String,
}

impl ExpectationDoc {
    /// Checks the document: each pod names exactly one outcome, phases are Volcano's.
    pub fn to_expectation(&self) -> Result<Expectation, FieldError> {
        let spec = self.spec.clone().unwrap_or_default();
        let mut pods = BTreeMap::new();
        for (key, outcome) in spec.pods.unwrap_or_default() {
            let path = format!("spec.pods.{key}");
            pods.insert(ObjectKey::parse(&key), pod_outcome(outcome, &path)?);
        }
        let mut pod_groups = BTreeMap::new();
        for (key, outcome) in spec.pod_groups.unwrap_or_default() {
            let phase = PodGroupPhase::parse(&outcome.phase).ok_or_else(|| {
                FieldError::not_one_of(
                    format!("spec.podGroups.{key}.phase"),
                    &outcome.phase,
                    "PodGroup phase",
                    &["Pending", "Inqueue", "Running", "Completed"],
                )
            })?;
            pod_groups.insert(ObjectKey::parse(&key), phase);
        }
        Ok(Expectation {
            cycles: spec.cycles.unwrap_or(0),
            pods,
            pod_groups,
            bound_count: spec.bound_count,
            invariants: spec.invariants.unwrap_or(true),
        })
    }
}

fn pod_outcome(o: PodOutcomeSpec, path: &str) -> Result<PodOutcome, FieldError> {
    let mut found = Vec::new();
    if let Some(node) = o.node {
        found.push(PodOutcome::OnNode(node));
    }
    if let Some(nodes) = o.on_nodes {
        if nodes.is_empty() {
            return Err(FieldError::new(
                format!("{path}.onNodes"),
                "must list at least one node",
            ));
        }
        found.push(PodOutcome::OnNodes(nodes));
    }
    for (flag, outcome, name) in [
        (o.bound, PodOutcome::Bound, "bound"),
        (o.pending, PodOutcome::Pending, "pending"),
        (o.evicted, PodOutcome::Evicted, "evicted"),
    ] {
        match flag {
            Some(true) => found.push(outcome),
            Some(false) => {
                return Err(FieldError::new(
                    format!("{path}.{name}"),
                    format!(
                        "`{name}: false` says nothing; write the outcome that must hold instead"
                    ),
                ));
            }
            None => {}
        }
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        n => Err(FieldError::new(
            path,
            format!(
                "names {n} outcomes; give exactly one of node, bound, onNodes, pending, evicted"
            ),
        )),
    }
}
