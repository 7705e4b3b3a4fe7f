//! Hostile objects created during a run (the `hostile-objects` fault): a PodGroup with
//! `minMember: 2147483647`, PodGroups whose `minResources` are `1e400` and `-1`, a pod
//! requesting `1e400` GPUs, a pod whose PodGroup does not exist, and one gang far wider
//! than the cluster (10,000 pods by default). None of them can be placed whole; they stay
//! until the end of the run, so every later fault and gang meets them too. What must hold:
//! the replicas never crash (the fleet must be whole after the fault, as after any) and
//! keep binding the other gangs (I5 on every shard), and none of them is half-placed (I2).
//! What the API server refuses is not the replicas' to handle; it is reported as refused.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::core::DynamicObject;
use phalanx_scheduler::cluster::kube::volcano_resource;
use serde_json::{Value, json};

use crate::recorder::{GPU, GROUP_ANNOTATION};

/// One hostile PodGroup: its name and `spec` beyond the queue.
fn groups() -> Vec<(&'static str, Value)> {
    vec![
        (
            "hostile-min-member-max",
            json!({"minMember": 2_147_483_647}),
        ),
        (
            "hostile-min-resources-1e400",
            json!({"minMember": 1, "minResources": {GPU: "1e400", "cpu": "1e400"}}),
        ),
        (
            "hostile-min-resources-negative",
            json!({"minMember": 1, "minResources": {GPU: "-1", "memory": "-1"}}),
        ),
    ]
}

fn pod(ns: &str, name: &str, group: &str, gpus: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns,
            "annotations": {GROUP_ANNOTATION: group, "volcano.sh/task-spec": "worker",
                "phalanx.dev/sim-duration": "2000ms"}},
        "spec": {"schedulerName": "phalanx", "priorityClassName": "chaos-low",
            "containers": [{"name": "main", "image": "phalanx-chaos:fake",
                "resources": {"requests": {"cpu": "100m", GPU: gpus}, "limits": {GPU: gpus}}}]},
    }))?)
}

async fn create_group(
    client: &kube::Client,
    ns: &str,
    queue: &str,
    name: &str,
    mut spec: Value,
) -> Result<(), String> {
    spec["queue"] = json!(queue);
    spec["priorityClassName"] = json!("chaos-low");
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &volcano_resource("PodGroup", "podgroups"),
    );
    let pg: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns}, "spec": spec,
    }))
    .map_err(|e| e.to_string())?;
    api.create(&PostParams::default(), &pg)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// What the API server did with the hostile objects, in words for the report.
#[derive(Debug, Default)]
pub struct Created {
    pub accepted: Vec<String>,
    pub refused: Vec<String>,
}

impl Created {
    fn note(&mut self, what: String, r: Result<(), String>) {
        match r {
            Ok(()) => self.accepted.push(what),
            Err(e) => self.refused.push(format!("{what} ({e})")),
        }
    }

    pub fn summary(&self) -> String {
        format!(
            "accepted: {}; refused by the API server: {}",
            self.accepted.join(", "),
            if self.refused.is_empty() {
                "none".to_string()
            } else {
                self.refused.join("; ")
            }
        )
    }
}

/// Creates the hostile objects in `ns`, queue `queue`, each name with the injection's
/// number `n`; the wide gang has `wide_pods` pods.
pub async fn create(
    client: &kube::Client,
    ns: &str,
    queue: &str,
    n: usize,
    wide_pods: u32,
) -> Created {
    let mut out = Created::default();
    let named = |base: &str| format!("{base}-{n:04}");
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let make = |name: &str, group: &str, gpus: &str| pod(ns, name, group, gpus);
    let post = |p: anyhow::Result<Pod>| {
        let pods = pods.clone();
        async move {
            let p = p.map_err(|e| e.to_string())?;
            pods.create(&PostParams::default(), &p)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    };
    for (base, spec) in groups() {
        let name = &named(base);
        let r = create_group(client, ns, queue, name, spec).await;
        out.note(format!("PodGroup {name}"), r);
        let r = post(make(&format!("{name}-0"), name, "1")).await;
        out.note(format!("pod {name}-0"), r);
    }
    let big = &named("hostile-pod-1e400");
    let r = create_group(client, ns, queue, big, json!({"minMember": 1})).await;
    out.note(format!("PodGroup {big}"), r);
    let r = post(make(&format!("{big}-0"), big, "1e400")).await;
    out.note(format!("pod {big}-0 requesting 1e400 GPUs"), r);
    let orphan = &named("hostile-orphan");
    let r = post(make(
        &format!("{orphan}-0"),
        &named("hostile-no-such-group"),
        "1",
    ))
    .await;
    out.note(
        format!("pod {orphan}-0 of a PodGroup that does not exist"),
        r,
    );
    let wide = &named("hostile-wide");
    let spec = json!({"minMember": wide_pods});
    let r = create_group(client, ns, queue, wide, spec).await;
    out.note(format!("PodGroup {wide} (minMember {wide_pods})"), r);
    // Sixteen creates at a time: the API server, not the harness, sets the pace.
    let results: Vec<Result<(), String>> = futures::stream::iter(0..wide_pods)
        .map(|i| post(make(&format!("{wide}-{i}"), wide, "1")))
        .buffer_unordered(16)
        .collect()
        .await;
    let failed: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    let made = results.len() - failed.len();
    let r = match failed.first() {
        None => Ok(()),
        Some(e) => Err(format!(
            "{} of {wide_pods} refused, first: {e}",
            failed.len()
        )),
    };
    out.note(format!("{made} pods of {wide}"), r);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hostile_groups_carry_the_values_the_issue_names() {
        let g = groups();
        let text =
            serde_json::to_string(&g.iter().map(|(_, s)| s).collect::<Vec<_>>()).expect("json");
        for needle in ["2147483647", "\"1e400\"", "\"-1\""] {
            assert!(text.contains(needle), "{needle} not in {text}");
        }
        let p = pod("ns", "p", "g", "1e400").expect("pod");
        let req = p.spec.expect("spec").containers[0]
            .resources
            .clone()
            .expect("resources")
            .requests
            .expect("requests");
        assert_eq!(req[GPU].0, "1e400");
    }
}
