//! Tolerations and node selector terms, validated the way the Kubernetes API server does.

use k8s_openapi::api::core::v1 as k8s;

use super::FieldError;
use crate::model::{
    NodeSelectorOperator, NodeSelectorRequirement, NodeSelectorTerm, TaintEffect, Toleration,
    TolerationOperator,
};

const TAINT_EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];
const SELECTOR_OPERATORS: &[&str] = &["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"];

/// Parses a taint effect at `path`.
pub(crate) fn taint_effect(text: &str, path: &str) -> Result<TaintEffect, FieldError> {
    TaintEffect::parse(text)
        .ok_or_else(|| FieldError::not_one_of(path, text, "taint effect", TAINT_EFFECTS))
}

/// One `spec.tolerations[i]` (at `path`).
pub fn toleration_from_k8s(t: &k8s::Toleration, path: &str) -> Result<Toleration, FieldError> {
    let key = t.key.clone().unwrap_or_default();
    let value = t.value.clone().unwrap_or_default();
    let operator = match t.operator.as_deref() {
        None | Some("") | Some("Equal") => TolerationOperator::Equal,
        Some("Exists") => TolerationOperator::Exists,
        Some(other) => {
            return Err(FieldError::not_one_of(
                format!("{path}.operator"),
                other,
                "toleration operator",
                &["Equal", "Exists"],
            ));
        }
    };
    if operator == TolerationOperator::Exists && !value.is_empty() {
        return Err(FieldError::new(
            format!("{path}.value"),
            format!("{value:?} must be empty when the operator is Exists"),
        ));
    }
    if operator == TolerationOperator::Equal && key.is_empty() {
        return Err(FieldError::new(
            format!("{path}.operator"),
            "must be Exists when `key` is empty (an empty key with Exists tolerates every taint)",
        ));
    }
    let effect = match t.effect.as_deref() {
        None | Some("") => None,
        Some(text) => Some(taint_effect(text, &format!("{path}.effect"))?),
    };
    Ok(Toleration {
        key,
        operator,
        value,
        effect,
    })
}

/// One node selector term (at `path`), with Kubernetes' rules on operators and values.
pub fn node_selector_term_from_k8s(
    term: &k8s::NodeSelectorTerm,
    path: &str,
) -> Result<NodeSelectorTerm, FieldError> {
    let mut out = NodeSelectorTerm::default();
    for (i, r) in term.match_expressions.iter().flatten().enumerate() {
        out.match_expressions
            .push(requirement(r, &format!("{path}.matchExpressions[{i}]"))?);
    }
    for (i, r) in term.match_fields.iter().flatten().enumerate() {
        let p = format!("{path}.matchFields[{i}]");
        let req = requirement(r, &p)?;
        if req.key != "metadata.name" {
            return Err(FieldError::new(
                format!("{p}.key"),
                format!(
                    "{:?} is not supported; matchFields only supports metadata.name",
                    req.key
                ),
            ));
        }
        if !matches!(
            req.operator,
            NodeSelectorOperator::In | NodeSelectorOperator::NotIn
        ) || req.values.len() != 1
        {
            return Err(FieldError::new(
                p,
                "matchFields on metadata.name needs operator In or NotIn with exactly one value",
            ));
        }
        out.match_fields.push(req);
    }
    Ok(out)
}

fn requirement(
    r: &k8s::NodeSelectorRequirement,
    path: &str,
) -> Result<NodeSelectorRequirement, FieldError> {
    let operator = NodeSelectorOperator::parse(&r.operator).ok_or_else(|| {
        FieldError::not_one_of(
            format!("{path}.operator"),
            &r.operator,
            "node selector operator",
            SELECTOR_OPERATORS,
        )
    })?;
    let values = r.values.clone().unwrap_or_default();
    let values_path = format!("{path}.values");
    match operator {
        NodeSelectorOperator::In | NodeSelectorOperator::NotIn if values.is_empty() => {
            return Err(FieldError::new(
                values_path,
                format!("must list at least one value for operator {}", r.operator),
            ));
        }
        NodeSelectorOperator::Exists | NodeSelectorOperator::DoesNotExist if !values.is_empty() => {
            return Err(FieldError::new(
                values_path,
                format!("must be empty for operator {}", r.operator),
            ));
        }
        NodeSelectorOperator::Gt | NodeSelectorOperator::Lt
            if values.len() != 1 || values[0].parse::<i64>().is_err() =>
        {
            return Err(FieldError::new(
                values_path,
                format!(
                    "{values:?} must be exactly one integer for operator {}",
                    r.operator
                ),
            ));
        }
        _ => {}
    }
    if r.key.is_empty() {
        return Err(FieldError::missing(format!("{path}.key")));
    }
    Ok(NodeSelectorRequirement {
        key: r.key.clone(),
        operator,
        values,
    })
}
