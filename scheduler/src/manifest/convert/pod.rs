//! `v1 Pod` into [`Pod`], with Kubernetes' effective resource request.

use k8s_openapi::api::core::v1 as k8s;

use super::selector::{node_selector_term_from_k8s, toleration_from_k8s};
use super::{FieldError, limits_from_k8s, required_name, resources_from_k8s};
use crate::model::resources::{CPU, MEMORY};
use crate::model::{
    GROUP_NAME_ANNOTATION, ObjectKey, Pod, PodPhase, PreemptionPolicy, Resources,
    SIM_DURATION_ANNOTATION, TASK_SPEC_ANNOTATION,
};

const POD_PHASES: &[&str] = &["Pending", "Running", "Succeeded", "Failed", "Unknown"];

/// The placement constraints of `spec` that phalanx's predicates do not evaluate (pod
/// affinity, pod anti-affinity, topology spread), by field path: a pod carrying one may be
/// placed against it, so the loader says so rather than breaking it without a word.
pub fn unhonoured_constraints(spec: &k8s::PodSpec) -> Vec<&'static str> {
    let affinity = spec.affinity.as_ref();
    let mut found = Vec::new();
    if affinity.is_some_and(|a| a.pod_affinity.is_some()) {
        found.push("spec.affinity.podAffinity");
    }
    if affinity.is_some_and(|a| a.pod_anti_affinity.is_some()) {
        found.push("spec.affinity.podAntiAffinity");
    }
    if spec
        .topology_spread_constraints
        .as_ref()
        .is_some_and(|c| !c.is_empty())
    {
        found.push("spec.topologySpreadConstraints");
    }
    found
}

/// What a warning about [`unhonoured_constraints`] says after the field.
pub const UNHONOURED_CONSTRAINT: &str = "is not evaluated by phalanx (only node selectors, \
    node affinity, taints and tolerations are); the pod may be placed against it \
    (docs/configuration.md)";

/// Converts a pod. A pod without `spec.schedulerName` gets `default_scheduler_name`.
pub fn pod_from_k8s(pod: &k8s::Pod, default_scheduler_name: &str) -> Result<Pod, FieldError> {
    let name = required_name(pod.metadata.name.as_ref())?;
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_string());
    let spec = pod
        .spec
        .as_ref()
        .ok_or_else(|| FieldError::missing("spec"))?;
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let mut out = Pod::new(
        ObjectKey::new(namespace, name),
        pod_requests_from_k8s(spec)?,
    );
    out.scheduler_name =
        non_empty(&spec.scheduler_name).unwrap_or_else(|| default_scheduler_name.to_string());
    out.priority_class_name = non_empty(&spec.priority_class_name);
    out.priority = spec.priority;
    out.preemption_policy = match spec.preemption_policy.as_deref() {
        None | Some("") => None,
        Some(text) => Some(PreemptionPolicy::parse(text).ok_or_else(|| {
            FieldError::not_one_of(
                "spec.preemptionPolicy",
                text,
                "preemption policy",
                &["PreemptLowerPriority", "Never"],
            )
        })?),
    };
    out.node_selector = spec.node_selector.clone().unwrap_or_default();
    for (i, t) in spec.tolerations.iter().flatten().enumerate() {
        out.tolerations
            .push(toleration_from_k8s(t, &format!("spec.tolerations[{i}]"))?);
    }
    read_node_affinity(spec, &mut out)?;
    out.node_name = non_empty(&spec.node_name);
    out.terminating = pod.metadata.deletion_timestamp.is_some();
    out.termination_grace_ms = spec
        .termination_grace_period_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map(|s| s.saturating_mul(1000));
    out.phase = match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        None | Some("") => PodPhase::Pending,
        Some(text) => PodPhase::parse(text)
            .ok_or_else(|| FieldError::not_one_of("status.phase", text, "pod phase", POD_PHASES))?,
    };
    out.group = annotations
        .get(GROUP_NAME_ANNOTATION)
        .filter(|g| !g.is_empty())
        .cloned();
    out.task_role = annotations
        .get(TASK_SPEC_ANNOTATION)
        .or_else(|| labels.get(TASK_SPEC_ANNOTATION))
        .filter(|t| !t.is_empty())
        .cloned();
    if let Some(text) = annotations.get(SIM_DURATION_ANNOTATION) {
        out.sim_duration_ms = Some(parse_sim_duration_ms(text).ok_or_else(|| {
            FieldError::new(
                format!("metadata.annotations.{SIM_DURATION_ANNOTATION}"),
                format!("{text:?} is not a duration; write e.g. 90s, 10m, 1h30m or 1500ms"),
            )
        })?);
    }
    out.labels = labels;
    out.annotations = annotations;
    Ok(out)
}

fn non_empty(field: &Option<String>) -> Option<String> {
    field.as_ref().filter(|s| !s.is_empty()).cloned()
}

fn read_node_affinity(spec: &k8s::PodSpec, out: &mut Pod) -> Result<(), FieldError> {
    let Some(affinity) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
    else {
        return Ok(());
    };
    let base = "spec.affinity.nodeAffinity";
    if let Some(required) = &affinity.required_during_scheduling_ignored_during_execution {
        let path =
            format!("{base}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms");
        if required.node_selector_terms.is_empty() {
            return Err(FieldError::new(path, "must hold at least one term"));
        }
        for (i, term) in required.node_selector_terms.iter().enumerate() {
            out.required_node_terms
                .push(node_selector_term_from_k8s(term, &format!("{path}[{i}]"))?);
        }
    }
    let preferred = affinity
        .preferred_during_scheduling_ignored_during_execution
        .iter()
        .flatten();
    for (i, p) in preferred.enumerate() {
        let path = format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
        if !(1..=100).contains(&p.weight) {
            return Err(FieldError::new(
                format!("{path}.weight"),
                format!("{} is not in 1..=100", p.weight),
            ));
        }
        let term = node_selector_term_from_k8s(&p.preference, &format!("{path}.preference"))?;
        out.preferred_node_terms.push((p.weight, term));
    }
    Ok(())
}

/// The pod's effective request, as the Kubernetes scheduler computes it: the sum over
/// containers; each regular init container needs its own request plus the sidecars
/// (`restartPolicy: Always` init containers) started before it, and sidecars add to the sum
/// because they keep running; the result is the larger of the two per resource. Pod-level
/// `spec.resources` replaces the container figure for cpu and memory; `spec.overhead` is
/// added. A container with a limit but no request for a resource requests its limit.
pub fn pod_requests_from_k8s(spec: &k8s::PodSpec) -> Result<Resources, FieldError> {
    let mut sum = Resources::new();
    for (i, c) in spec.containers.iter().enumerate() {
        let path = format!("spec.containers[{i}]");
        checked_add(
            &mut sum,
            &container_requests(c.resources.as_ref(), &path)?,
            &path,
        )?;
    }
    let mut sidecars = Resources::new();
    let mut init_peak = Resources::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let path = format!("spec.initContainers[{i}]");
        let own = container_requests(c.resources.as_ref(), &path)?;
        if c.restart_policy.as_deref() == Some("Always") {
            checked_add(&mut sum, &own, &path)?;
            checked_add(&mut sidecars, &own, &path)?;
            init_peak = init_peak.max_amounts(&sidecars);
        } else {
            let mut running = own;
            checked_add(&mut running, &sidecars, &path)?;
            init_peak = init_peak.max_amounts(&running);
        }
    }
    let mut total = sum.max_amounts(&init_peak);
    if let Some(pod_level) = spec.resources.as_ref() {
        let pod_level = container_requests(Some(pod_level), "spec")?;
        for name in [CPU, MEMORY] {
            if let Some(amount) = pod_level.get_listed(name) {
                total.set(&crate::model::ResourceName::new(name), amount);
            }
        }
    }
    if let Some(overhead) = &spec.overhead {
        checked_add(
            &mut total,
            &resources_from_k8s(overhead, "spec.overhead")?,
            "spec.overhead",
        )?;
    }
    Ok(total)
}

/// One container's requests, defaulted from its limits, checked to be within them.
fn container_requests(
    res: Option<&k8s::ResourceRequirements>,
    path: &str,
) -> Result<Resources, FieldError> {
    let Some(res) = res else {
        return Ok(Resources::new());
    };
    let requests_path = format!("{path}.resources.requests");
    let mut out = match &res.requests {
        Some(list) => resources_from_k8s(list, &requests_path)?,
        None => Resources::new(),
    };
    if let Some(list) = &res.limits {
        let limits = limits_from_k8s(list, &format!("{path}.resources.limits"))?;
        for (name, limit) in limits.iter() {
            let requested = res
                .requests
                .as_ref()
                .is_some_and(|r| r.contains_key(name.as_str()));
            if !requested {
                out.set(name, limit);
            } else if out.get(name.as_str()) > limit {
                let text = res
                    .requests
                    .as_ref()
                    .and_then(|r| r.get(name.as_str()))
                    .map_or("", |q| q.0.as_str());
                return Err(FieldError::new(
                    format!("{requests_path}.{name}"),
                    format!(
                        "{text:?} is more than the limit {:?}",
                        list.get(name.as_str()).map_or("", |q| q.0.as_str())
                    ),
                ));
            }
        }
    }
    Ok(out)
}

/// `acc += more`, refusing to wrap past `i64::MAX`.
fn checked_add(acc: &mut Resources, more: &Resources, path: &str) -> Result<(), FieldError> {
    for (name, amount) in more.iter() {
        let sum = acc.get(name.as_str()).checked_add(amount).ok_or_else(|| {
            FieldError::new(
                path,
                format!("the pod's total {name} request does not fit in a 64-bit integer"),
            )
        })?;
        acc.set(name, sum);
    }
    Ok(())
}

/// Parses `90s`, `10m`, `1h30m`, `1500ms` (units h, m, s, ms; whole numbers) into ms.
pub fn parse_sim_duration_ms(text: &str) -> Option<u64> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let number: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit_ms, len) = if rest.starts_with("ms") {
            (1, 2)
        } else if rest.starts_with('h') {
            (3_600_000, 1)
        } else if rest.starts_with('m') {
            (60_000, 1)
        } else if rest.starts_with('s') {
            (1_000, 1)
        } else {
            return None;
        };
        rest = &rest[len..];
        total = total.checked_add(number.checked_mul(unit_ms)?)?;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sim_durations_accept_go_style_units() {
        assert_eq!(parse_sim_duration_ms("90s"), Some(90_000));
        assert_eq!(parse_sim_duration_ms("10m"), Some(600_000));
        assert_eq!(parse_sim_duration_ms("1h30m"), Some(5_400_000));
        assert_eq!(parse_sim_duration_ms("1500ms"), Some(1_500));
        assert_eq!(parse_sim_duration_ms("0s"), Some(0));
        for bad in [
            "",
            "10",
            "abc",
            "1x",
            "m5",
            "1.5h",
            "-1s",
            "99999999999999999999h",
        ] {
            assert_eq!(parse_sim_duration_ms(bad), None, "{bad}");
        }
    }
}
