//! "Does not fit" is a value with a reason, not an error. Reasons are counted per job so the
//! PodGroup condition, Events and `explain` can say "3 nodes: insufficient nvidia.com/gpu".

use std::collections::BTreeMap;
use std::fmt;

/// Why one task cannot go on one node.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Unfit {
    /// `resource` requested beyond what the node has free.
    Insufficient {
        resource: crate::model::ResourceName,
    },
    TooManyPods,
    NodeSelectorMismatch,
    NodeAffinityMismatch,
    UntoleratedTaint {
        key: String,
        effect: &'static str,
    },
    Unschedulable,
    /// Any other plugin's refusal, with the plugin's words.
    Other(String),
}

impl fmt::Display for Unfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unfit::Insufficient { resource } => write!(f, "insufficient {resource}"),
            Unfit::TooManyPods => f.write_str("too many pods"),
            Unfit::NodeSelectorMismatch => {
                f.write_str("node(s) didn't match the pod's node selector")
            }
            Unfit::NodeAffinityMismatch => {
                f.write_str("node(s) didn't match the pod's required node affinity")
            }
            Unfit::UntoleratedTaint { key, effect } => {
                write!(f, "node(s) had untolerated taint {{{key}: {effect}}}")
            }
            Unfit::Unschedulable => f.write_str("node(s) were unschedulable"),
            Unfit::Other(text) => f.write_str(text),
        }
    }
}

/// Counts of reasons, per job, over the nodes that were tried for its tasks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FitErrors {
    /// For the first task that found no node: how many nodes refused it for each reason.
    pub by_reason: BTreeMap<Unfit, u32>,
    /// Reasons that are about the task or job rather than a node (queue over its share, ...).
    pub job_reasons: Vec<String>,
    pub nodes_tried: u32,
}

impl FitErrors {
    pub fn is_empty(&self) -> bool {
        self.by_reason.is_empty() && self.job_reasons.is_empty()
    }

    pub fn clear(&mut self) {
        self.by_reason.clear();
        self.job_reasons.clear();
        self.nodes_tried = 0;
    }

    pub fn add_job_reason(&mut self, reason: String) {
        if !self.job_reasons.contains(&reason) {
            self.job_reasons.push(reason);
        }
    }
}

/// Kubernetes-style summary: `0/8 nodes are available: 3 insufficient nvidia.com/gpu, 5 node(s) had untolerated taint {...}.`
impl fmt::Display for FitErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = self.job_reasons.clone();
        if !self.by_reason.is_empty() {
            let mut counts: Vec<(&Unfit, &u32)> = self.by_reason.iter().collect();
            counts.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let detail: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
            parts.push(format!(
                "0/{} nodes are available: {}",
                self.nodes_tried,
                detail.join(", ")
            ));
        }
        f.write_str(&parts.join("; "))
    }
}
