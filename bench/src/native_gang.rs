//! Kubernetes' own gang scheduling, as a peer of phalanx (issue 16 item 4).
//!
//! kube-scheduler v1.37 with the `GenericWorkload` feature gate adds the GangScheduling
//! plugin to its default profile and schedules the pods of a `scheduling.k8s.io/v1beta1`
//! PodGroup whose policy is `gang` in one pod-group cycle: all of them, or none. The API
//! server serves those objects only with the same gate and
//! `--runtime-config=scheduling.k8s.io/v1beta1=true` (beta APIs are off by default;
//! `deploy/testbed/testbed up --native-gang` sets both).
//!
//! The bench writes the same workload as for phalanx, in that API's words: one
//! `Workload` whose PodGroup template `worker` is a gang of `--gang` pods, one `PodGroup`
//! per gang referring to it (`spec.workloadRef`; on a real cluster a Job controller
//! creates them from the template, the testbed has none), and each pod naming its
//! PodGroup in `spec.schedulingGroup.podGroupName`. The pods keep schedulerName
//! `default-scheduler`: gang scheduling is a plugin of the default profile, not another
//! scheduler.

use anyhow::{Result, bail};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

/// The API group and version of Workload and PodGroup (beta in Kubernetes 1.37).
pub const GROUP: &str = "scheduling.k8s.io";
pub const VERSION: &str = "v1beta1";
/// The one Workload the bench creates in its namespace, and the PodGroup template of
/// `phalanx-bench kube`'s gangs.
pub const WORKLOAD: &str = "bench";
pub const TEMPLATE: &str = "worker";
/// The feature gate both kube-apiserver and kube-scheduler need.
pub const FEATURE_GATES: &str = "GenericWorkload=true";

/// `scheduling.k8s.io/v1beta1` PodGroups.
pub fn pod_group_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, VERSION, "PodGroup"),
        "podgroups",
    )
}

/// `scheduling.k8s.io/v1beta1` Workloads.
pub fn workload_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, VERSION, "Workload"),
        "workloads",
    )
}

fn gang_policy(min_count: usize) -> Value {
    json!({"gang": {"minCount": min_count}})
}

/// The Workload: a PodGroup template per (name, gang size).
pub fn workload(ns: &str, templates: &[(&str, usize)]) -> Value {
    let templates: Vec<Value> = templates
        .iter()
        .map(|(name, min)| json!({"name": name, "schedulingPolicy": gang_policy(*min)}))
        .collect();
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"), "kind": "Workload",
        "metadata": {"name": WORKLOAD, "namespace": ns},
        "spec": {"podGroupTemplates": templates},
    })
}

/// One gang: a PodGroup made from the Workload's `template`, with the gang policy written
/// into it (as a controller copies it), `min_count` pods all or none.
pub fn pod_group(ns: &str, name: &str, template: &str, min_count: usize) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"), "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "workloadRef": {"workloadName": WORKLOAD, "templateName": template},
            "schedulingPolicy": gang_policy(min_count),
        },
    })
}

/// Fails, saying how to turn them on, unless the API server serves both Workloads and
/// PodGroups of `scheduling.k8s.io/v1beta1`.
pub async fn check_served(client: &kube::Client) -> Result<()> {
    let group_version = format!("{GROUP}/{VERSION}");
    let how = "bring the testbed up with `deploy/testbed/testbed up --native-gang` (kube-apiserver --feature-gates=GenericWorkload=true --runtime-config=scheduling.k8s.io/v1beta1=true)";
    let served = match client.list_api_group_resources(&group_version).await {
        Ok(list) => list.resources,
        Err(kube::Error::Api(s)) if s.code == 404 => {
            bail!("the API server does not serve {group_version}: {how}")
        }
        Err(e) => return Err(e.into()),
    };
    let missing = missing_resources(served.iter().map(|r| r.name.as_str()));
    if !missing.is_empty() {
        bail!(
            "the API server serves {group_version} without {} (the GenericWorkload gate is off): {how}",
            missing.join(" and ")
        );
    }
    Ok(())
}

/// Which of `podgroups` and `workloads` a discovery list lacks.
fn missing_resources<'a>(served: impl Iterator<Item = &'a str> + Clone) -> Vec<&'static str> {
    ["podgroups", "workloads"]
        .into_iter()
        .filter(|want| !served.clone().any(|n| n == *want))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_group_is_a_gang_made_from_the_workloads_template() {
        let w = workload("bench-1", &[(TEMPLATE, 10)]);
        assert_eq!(w["apiVersion"], "scheduling.k8s.io/v1beta1");
        assert_eq!(w["spec"]["podGroupTemplates"][0]["name"], TEMPLATE);
        assert_eq!(
            w["spec"]["podGroupTemplates"][0]["schedulingPolicy"]["gang"]["minCount"],
            10
        );
        let pg = pod_group("bench-1", "g7", TEMPLATE, 4);
        assert_eq!(pg["kind"], "PodGroup");
        assert_eq!(pg["metadata"]["name"], "g7");
        assert_eq!(pg["spec"]["workloadRef"]["workloadName"], WORKLOAD);
        assert_eq!(pg["spec"]["workloadRef"]["templateName"], TEMPLATE);
        assert_eq!(pg["spec"]["schedulingPolicy"]["gang"]["minCount"], 4);
        assert_eq!(pod_group_resource().plural, "podgroups");
        assert_eq!(workload_resource().api_version, "scheduling.k8s.io/v1beta1");
    }

    #[test]
    fn discovery_without_workloads_or_podgroups_is_named() {
        assert!(
            missing_resources(["podgroups", "podgroups/status", "workloads"].into_iter())
                .is_empty()
        );
        assert_eq!(
            missing_resources(["priorityclasses"].into_iter()),
            ["podgroups", "workloads"]
        );
        assert_eq!(missing_resources(["podgroups"].into_iter()), ["workloads"]);
    }
}
