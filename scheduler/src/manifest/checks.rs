//! Checks across the whole input, once every document is read.
//!
//! Sums: the scheduler adds resources with saturating arithmetic and relies on the totals
//! of node allocatable and of pod requests fitting in `i64`, so a total that does not is an
//! error naming the object where it overflows. References (a pod's PodGroup, a PodGroup's
//! queue, PriorityClass names, nodes an Expectation names) are not errors: the scheduler
//! reports such objects as pending with a reason, and the loader warns.

use std::collections::{BTreeMap, BTreeSet};

use super::convert::parse_sim_duration_ms;
use super::error::{FieldError, ManifestError, Problem};
use super::load::{Loader, Origin};
use super::workload::Workload;
use crate::framework::timeout::TimeoutAction;
use crate::model::{
    ObjectKey, ResourceName, Resources, SCHEDULE_TIMEOUT_ANNOTATION, SIM_CREATED_AT_ANNOTATION,
    TIMEOUT_ACTION_ANNOTATION,
};

/// Errors when a total of node allocatable or of pod requests passes `i64::MAX`, or
/// `MAX_WHOLE_COUNT_TOTAL` for a counted resource.
pub(crate) fn check_sums_fit(loader: &Loader<'_>) -> Result<(), ManifestError> {
    let nodes = loader
        .out
        .nodes
        .iter()
        .map(|n| (("Node", n.name.clone()), &n.allocatable, n.max_pods));
    running_sums(loader, nodes, "allocatable")?;
    let pods = loader
        .out
        .pods
        .iter()
        .map(|p| (("Pod", p.key.to_string()), &p.requests, 0));
    running_sums(loader, pods, "requested")
}

/// `spec.parent` links form a tree under `root` and no queue's children guarantee more
/// than it does; the error names the queue, the field and the value.
pub(crate) fn check_queue_hierarchy(loader: &Loader<'_>) -> Result<(), ManifestError> {
    let queues = &loader.out.queues;
    let result = crate::model::queue_tree::QueueTree::build(queues)
        .and_then(|tree| tree.check_guarantees(queues));
    let Err(e) = result else {
        return Ok(());
    };
    let origin = loader
        .origins
        .get(&("Queue", e.queue.clone()))
        .cloned()
        .unwrap_or_else(|| Origin {
            at: Default::default(),
            object: format!("Queue {}", e.queue),
        });
    let problem = Problem::Field(FieldError::new(
        e.field.clone(),
        format!("{:?}: {}", e.value, e.problem),
    ));
    Err(ManifestError::new(origin.at, Some(origin.object), problem))
}

/// The largest total of `name` over all nodes (or all pods) the scheduler computes with:
/// counted resources (GPUs, whole units) are water-filled in millionths by the proportion
/// plugin (`plugins::proportion::FINE`), so their totals must fit `i64::MAX / FINE`, about
/// 9.2e12; other resources, `i64::MAX`.
fn total_limit(name: &ResourceName) -> i64 {
    if name.unit() == crate::model::QuantityUnit::WholeCount {
        MAX_WHOLE_COUNT_TOTAL
    } else {
        i64::MAX
    }
}

/// `i64::MAX / plugins::proportion::FINE`: see `total_limit`.
pub(crate) const MAX_WHOLE_COUNT_TOTAL: i64 = i64::MAX / crate::plugins::proportion::FINE;

/// Running totals of resources over nodes (or pods), each held to its `total_limit`.
#[derive(Debug, Default)]
pub(crate) struct BoundedTotals(BTreeMap<ResourceName, i64>);

impl BoundedTotals {
    /// Adds `resources` whole, or nothing when a total would pass its limit: then the
    /// first such resource and its limit.
    pub(crate) fn try_add(&mut self, resources: &Resources) -> Result<(), (ResourceName, i64)> {
        let mut next = Vec::new();
        for (name, amount) in resources.iter() {
            let limit = total_limit(name);
            let total = self.0.get(name).copied().unwrap_or(0);
            match total.checked_add(amount).filter(|t| *t <= limit) {
                Some(total) => next.push((name.clone(), total)),
                None => return Err((name.clone(), limit)),
            }
        }
        self.0.extend(next);
        Ok(())
    }
}

fn running_sums<'a>(
    loader: &Loader<'_>,
    items: impl Iterator<Item = ((&'static str, String), &'a Resources, i64)>,
    what: &str,
) -> Result<(), ManifestError> {
    let mut totals = BoundedTotals::default();
    let mut pods_total: i64 = 0;
    for (origin_key, resources, max_pods) in items {
        let overflow = |name: &str, limit: i64| {
            let origin = loader
                .origins
                .get(&origin_key)
                .cloned()
                .unwrap_or_else(|| Origin {
                    at: Default::default(),
                    object: format!("{} {}", origin_key.0, origin_key.1),
                });
            let problem = Problem::Invalid(format!(
                "the total {name} {what} over all {}s passes {limit} here; {}",
                origin_key.0,
                if limit == i64::MAX {
                    "phalanx needs every total to fit in 64 bits"
                } else {
                    "a counted resource is shared out in millionths of a unit, and a larger total would saturate every queue's deserved share"
                }
            ));
            ManifestError::new(origin.at, Some(origin.object), problem)
        };
        totals
            .try_add(resources)
            .map_err(|(name, limit)| overflow(name.as_str(), limit))?;
        pods_total = pods_total
            .checked_add(max_pods)
            .ok_or_else(|| overflow("pods", i64::MAX))?;
    }
    Ok(())
}

/// Warns about references to objects the input does not declare.
pub(crate) fn warn_about_references(
    out: &mut Workload,
    origins: &BTreeMap<(&'static str, String), Origin>,
) {
    let mut warnings = Vec::new();
    let mut say = |kind: &'static str, key: String, message: String| {
        let prefix = origins.get(&(kind, key.clone())).map_or_else(
            || format!("{kind} {key}"),
            |o| format!("{}, {}", o.at, o.object),
        );
        warnings.push(format!("{prefix}: {message}"));
    };
    let groups: BTreeSet<String> = out.pod_groups.iter().map(|g| g.key.to_string()).collect();
    let queues: BTreeSet<&str> = out.queues.iter().map(|q| q.name.as_str()).collect();
    let classes: BTreeSet<&str> = out
        .priority_classes
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    let nodes: BTreeSet<&str> = out.nodes.iter().map(|n| n.name.as_str()).collect();
    for pod in &out.pods {
        let key = pod.key.to_string();
        if let Some(group) = &pod.group {
            let group_key = ObjectKey::new(pod.key.namespace.clone(), group.clone()).to_string();
            if !groups.contains(&group_key) {
                say(
                    "Pod",
                    key.clone(),
                    format!(
                        "its annotation scheduling.k8s.io/group-name names PodGroup {group_key}, which is not declared; the pod stays pending"
                    ),
                );
            }
        }
        if let Some(pc) = pod
            .priority_class_name
            .as_deref()
            .filter(|pc| !classes.contains(pc))
        {
            say(
                "Pod",
                key.clone(),
                format!(
                    "priorityClassName `{pc}` is not declared (Kubernetes would refuse the pod); its priority is spec.priority or 0"
                ),
            );
        }
        if let Some(node) = pod.node_name.as_deref().filter(|n| !nodes.contains(n)) {
            say(
                "Pod",
                key.clone(),
                format!("spec.nodeName names node `{node}`, which is not declared"),
            );
        }
    }
    for pg in &out.pod_groups {
        if !queues.contains(pg.queue.as_str()) {
            say(
                "PodGroup",
                pg.key.to_string(),
                format!(
                    "queue `{}` is not declared; the PodGroup stays pending",
                    pg.queue
                ),
            );
        }
        if let Some(pc) = pg
            .priority_class_name
            .as_deref()
            .filter(|pc| !classes.contains(pc))
        {
            say(
                "PodGroup",
                pg.key.to_string(),
                format!("priorityClassName `{pc}` is not declared; the group's priority is 0"),
            );
        }
    }
    for (first, message) in foreign_scheduler_warnings(out) {
        say("Pod", first, message);
    }
    warnings.extend(expectation_warnings(out, origins));
    out.warnings.extend(warnings);
}

/// One warning per scheduler name other than phalanx's, with the first such pod.
fn foreign_scheduler_warnings(out: &Workload) -> Vec<(String, String)> {
    let mut by_name: BTreeMap<&str, Vec<&ObjectKey>> = BTreeMap::new();
    for pod in out.pods.iter().filter(|p| !out.manages(p)) {
        by_name
            .entry(pod.scheduler_name.as_str())
            .or_default()
            .push(&pod.key);
    }
    by_name
        .into_iter()
        .map(|(name, pods)| {
            let message = format!(
                "schedulerName is `{name}` here and on {} pod(s) in all; phalanx answers to `{}`, so it accounts for \
                 them but never places them",
                pods.len(),
                out.scheduler_name
            );
            (pods[0].to_string(), message)
        })
        .collect()
}

fn expectation_warnings(
    out: &Workload,
    origins: &BTreeMap<(&'static str, String), Origin>,
) -> Vec<String> {
    let Some(expectation) = &out.expectation else {
        return Vec::new();
    };
    let prefix = origins.get(&("Expectation", String::new())).map_or_else(
        || "Expectation".to_string(),
        |o| format!("{}, {}", o.at, o.object),
    );
    let pods: BTreeSet<&ObjectKey> = out.pods.iter().map(|p| &p.key).collect();
    let groups: BTreeSet<&ObjectKey> = out.pod_groups.iter().map(|g| &g.key).collect();
    let mut warnings = Vec::new();
    for key in expectation.pods.keys().filter(|k| !pods.contains(k)) {
        warnings.push(format!(
            "{prefix}: spec.pods names pod {key}, which is not declared"
        ));
    }
    for key in expectation
        .pod_groups
        .keys()
        .filter(|k| !groups.contains(k))
    {
        warnings.push(format!(
            "{prefix}: spec.podGroups names PodGroup {key}, which is not declared"
        ));
    }
    warnings
}

/// Kubernetes' bound on an object name (a DNS subdomain, RFC 1123).
pub(crate) const MAX_NAME_CHARS: usize = 253;
/// Kubernetes' bound on a namespace, a label value and the name part of a label key.
pub(crate) const MAX_LABEL_CHARS: usize = 63;
/// The ledger refuses a gang of more pods than this every cycle, forever; the loader
/// refuses it once, up front, from the same constant.
pub(crate) use phalanx_statestore::ledger::command::MAX_PODS_PER_GANG;

/// `text` quoted for a message, shortened when long.
fn quoted(text: &str) -> String {
    const SHOWN: usize = 40;
    let head: String = text.chars().take(SHOWN).collect();
    if text.chars().count() > SHOWN {
        format!("{head:?}...")
    } else {
        format!("{head:?}")
    }
}

fn too_long(path: &str, text: &str, limit: usize, what: &str) -> FieldError {
    FieldError::new(
        path,
        format!(
            "{} is {} characters long; Kubernetes allows at most {limit} in {what}",
            quoted(text),
            text.chars().count()
        ),
    )
}

/// An object name: not empty, at most 253 characters.
pub(crate) fn check_name(path: &str, name: &str) -> Result<(), FieldError> {
    if name.is_empty() {
        return Err(FieldError::new(path, "is empty; every object needs a name"));
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(too_long(path, name, MAX_NAME_CHARS, "an object name"));
    }
    Ok(())
}

/// A namespace: at most 63 characters (a DNS label).
pub(crate) fn check_namespace(path: &str, namespace: &str) -> Result<(), FieldError> {
    if namespace.chars().count() > MAX_LABEL_CHARS {
        return Err(too_long(path, namespace, MAX_LABEL_CHARS, "a namespace"));
    }
    Ok(())
}

/// Label keys (`prefix/name`: prefix up to 253, name 1 to 63) and values (up to 63).
pub(crate) fn check_labels(
    path: &str,
    labels: &BTreeMap<String, String>,
) -> Result<(), FieldError> {
    for (key, value) in labels {
        let at = format!("{path}[{key}]");
        let (prefix, name) = key.rsplit_once('/').unwrap_or(("", key));
        if name.is_empty() {
            return Err(FieldError::new(
                at,
                format!("the key {} has an empty name part", quoted(key)),
            ));
        }
        if name.chars().count() > MAX_LABEL_CHARS {
            return Err(too_long(&at, name, MAX_LABEL_CHARS, "a label key's name"));
        }
        if prefix.chars().count() > MAX_NAME_CHARS {
            return Err(too_long(
                &at,
                prefix,
                MAX_NAME_CHARS,
                "a label key's prefix",
            ));
        }
        if value.chars().count() > MAX_LABEL_CHARS {
            return Err(too_long(&at, value, MAX_LABEL_CHARS, "a label value"));
        }
    }
    Ok(())
}

/// A gang's required size (`field` = `spec.minMember`, or a Job's `spec.minAvailable`)
/// must fit one ledger placement.
pub(crate) fn check_gang_size(field: &str, min_member: u32) -> Result<(), FieldError> {
    if min_member as usize > MAX_PODS_PER_GANG {
        return Err(FieldError::new(
            field,
            format!(
                "{min_member} pods is more than one gang may hold: the ledger accepts at most \
                 {MAX_PODS_PER_GANG} pods per gang, so this gang could never be placed"
            ),
        ));
    }
    Ok(())
}

/// Errors at the first pod that makes its PodGroup larger than the ledger's gang limit
/// (every pod of a group may be placed in one gang placement).
pub(crate) fn check_pods_per_gang(loader: &Loader<'_>) -> Result<(), ManifestError> {
    let mut counts: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for pod in &loader.out.pods {
        let Some(group) = pod.group.as_deref() else {
            continue;
        };
        let count = counts
            .entry((pod.key.namespace.as_str(), group))
            .or_insert(0);
        *count += 1;
        if *count > MAX_PODS_PER_GANG {
            let origin = loader.origins.get(&("Pod", pod.key.to_string()));
            let problem = Problem::Invalid(format!(
                "PodGroup {}/{group} has more than {MAX_PODS_PER_GANG} pods with this one; the \
                 ledger accepts at most {MAX_PODS_PER_GANG} pods per gang, so the gang could \
                 never be placed",
                pod.key.namespace
            ));
            return Err(ManifestError::new(
                origin.map(|o| o.at.clone()).unwrap_or_default(),
                Some(origin.map_or_else(|| format!("Pod {}", pod.key), |o| o.object.clone())),
                problem,
            ));
        }
    }
    Ok(())
}

/// A warning for each timeout annotation the scheduler cannot read (it ignores them and
/// the configured default applies, which a user would not guess from `1.5h`).
pub(crate) fn timeout_annotation_warnings(annotations: &BTreeMap<String, String>) -> Vec<String> {
    let mut warnings = Vec::new();
    for key in [SCHEDULE_TIMEOUT_ANNOTATION, SIM_CREATED_AT_ANNOTATION] {
        if let Some(text) = annotations.get(key)
            && parse_sim_duration_ms(text).is_none()
        {
            warnings.push(format!(
                "annotation {key}: {} is not a duration phalanx reads here (whole numbers \
                 with h, m, s or ms, e.g. 1h30m); it is ignored and the default applies",
                quoted(text)
            ));
        }
    }
    if let Some(text) = annotations.get(TIMEOUT_ACTION_ANNOTATION)
        && TimeoutAction::parse(text).is_none()
    {
        warnings.push(format!(
            "annotation {TIMEOUT_ACTION_ANNOTATION}: {} is not retry or stop; it is ignored \
             and the default applies",
            quoted(text)
        ));
    }
    warnings
}
