//! Node selection terms and tolerations, with Kubernetes' matching rules.

use std::collections::BTreeMap;

use super::node::{Node, Taint, TaintEffect};

/// One term of `requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`: all of
/// its requirements must hold (terms are ORed).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeSelectorTerm {
    pub match_expressions: Vec<NodeSelectorRequirement>,
    /// `matchFields`; Kubernetes supports only `metadata.name`.
    pub match_fields: Vec<NodeSelectorRequirement>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NodeSelectorRequirement {
    pub key: String,
    pub operator: NodeSelectorOperator,
    pub values: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeSelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

impl NodeSelectorOperator {
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "In" => Self::In,
            "NotIn" => Self::NotIn,
            "Exists" => Self::Exists,
            "DoesNotExist" => Self::DoesNotExist,
            "Gt" => Self::Gt,
            "Lt" => Self::Lt,
            _ => return None,
        })
    }
}

impl NodeSelectorRequirement {
    fn matches_value(&self, value: Option<&str>) -> bool {
        match self.operator {
            NodeSelectorOperator::In => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            NodeSelectorOperator::NotIn => value.is_none_or(|v| self.values.iter().all(|x| x != v)),
            NodeSelectorOperator::Exists => value.is_some(),
            NodeSelectorOperator::DoesNotExist => value.is_none(),
            NodeSelectorOperator::Gt | NodeSelectorOperator::Lt => {
                let (Some(v), Some(bound)) = (
                    value.and_then(|v| v.parse::<i64>().ok()),
                    self.values.first().and_then(|b| b.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                if self.operator == NodeSelectorOperator::Gt {
                    v > bound
                } else {
                    v < bound
                }
            }
        }
    }
}

impl NodeSelectorTerm {
    /// An empty term matches nothing, as in Kubernetes.
    pub fn matches(&self, node: &Node) -> bool {
        if self.match_expressions.is_empty() && self.match_fields.is_empty() {
            return false;
        }
        self.match_expressions
            .iter()
            .all(|r| r.matches_value(node.labels.get(&r.key).map(String::as_str)))
            && self.match_fields.iter().all(|r| {
                let value = (r.key == "metadata.name").then_some(node.name.as_str());
                r.matches_value(value)
            })
    }
}

/// True when `node` has every label of a pod's `nodeSelector`.
pub fn node_selector_matches(selector: &BTreeMap<String, String>, node: &Node) -> bool {
    selector
        .iter()
        .all(|(k, v)| node.labels.get(k).is_some_and(|have| have == v))
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Toleration {
    /// Empty with `Exists` tolerates every taint.
    pub key: String,
    pub operator: TolerationOperator,
    pub value: String,
    /// `None` tolerates every effect.
    pub effect: Option<TaintEffect>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TolerationOperator {
    Equal,
    Exists,
}

impl Toleration {
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if self.key.is_empty() {
            return self.operator == TolerationOperator::Exists;
        }
        if self.key != taint.key {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value == taint.value,
        }
    }
}

/// The first taint with effect NoSchedule or NoExecute that no toleration tolerates.
pub fn first_untolerated_taint<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
) -> Option<&'a Taint> {
    taints.iter().find(|t| {
        t.effect != TaintEffect::PreferNoSchedule && !tolerations.iter().any(|tol| tol.tolerates(t))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Resources;

    fn node(labels: &[(&str, &str)]) -> Node {
        let mut n = Node::new("n1", Resources::new());
        for (k, v) in labels {
            n.labels.insert((*k).into(), (*v).into());
        }
        n
    }

    fn req(key: &str, op: NodeSelectorOperator, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op,
            values: values.iter().map(|v| (*v).into()).collect(),
        }
    }

    #[test]
    fn selector_operators_follow_kubernetes() {
        use NodeSelectorOperator::*;
        let n = node(&[("zone", "a"), ("gpus", "8")]);
        let term = |r| NodeSelectorTerm {
            match_expressions: vec![r],
            match_fields: vec![],
        };
        assert!(term(req("zone", In, &["a", "b"])).matches(&n));
        assert!(!term(req("zone", NotIn, &["a"])).matches(&n));
        assert!(term(req("rack", NotIn, &["a"])).matches(&n));
        assert!(term(req("zone", Exists, &[])).matches(&n));
        assert!(term(req("rack", DoesNotExist, &[])).matches(&n));
        assert!(term(req("gpus", Gt, &["4"])).matches(&n));
        assert!(!term(req("gpus", Lt, &["4"])).matches(&n));
        assert!(!term(req("zone", Gt, &["4"])).matches(&n));
        assert!(!NodeSelectorTerm::default().matches(&n));
        let by_name = NodeSelectorTerm {
            match_expressions: vec![],
            match_fields: vec![req("metadata.name", In, &["n1"])],
        };
        assert!(by_name.matches(&n));
    }

    #[test]
    fn tolerations_follow_kubernetes() {
        let taint = Taint {
            key: "gpu".into(),
            value: "a100".into(),
            effect: TaintEffect::NoSchedule,
        };
        let exists_all = Toleration {
            key: String::new(),
            operator: TolerationOperator::Exists,
            value: String::new(),
            effect: None,
        };
        let equal = Toleration {
            key: "gpu".into(),
            operator: TolerationOperator::Equal,
            value: "a100".into(),
            effect: Some(TaintEffect::NoSchedule),
        };
        let wrong_value = Toleration {
            value: "h100".into(),
            ..equal.clone()
        };
        let wrong_effect = Toleration {
            effect: Some(TaintEffect::NoExecute),
            ..equal.clone()
        };
        assert!(exists_all.tolerates(&taint));
        assert!(equal.tolerates(&taint));
        assert!(!wrong_value.tolerates(&taint));
        assert!(!wrong_effect.tolerates(&taint));
        let soft = Taint {
            effect: TaintEffect::PreferNoSchedule,
            ..taint.clone()
        };
        assert!(first_untolerated_taint(&[soft], &[]).is_none());
        assert!(first_untolerated_taint(std::slice::from_ref(&taint), &[]).is_some());
    }
}
