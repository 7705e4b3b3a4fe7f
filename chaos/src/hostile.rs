//! Hostile objects created during a run (the `hostile-objects` fault): a PodGroup with
//! `minMember: 2147483647`, PodGroups whose `minResources` are `1e400` and `-1`, a pod
//! requesting `1e400` GPUs, a pod whose PodGroup does not exist, and one gang far wider
//! than the cluster (10,000 pods by default). None of them can be placed whole; they stay
//! until the next `hostile-objects` injection deletes them before making its own (so a
//! soak, which injects it dozens of times, holds one set at a time, not dozens), and every
//! later fault and gang meets them. What must hold:
//! the replicas never crash (the fleet must be whole after the fault, as after any) and
//! keep binding the other gangs (I5 on every shard), and none of them is half-placed (I2).
//! What the API server refuses is not the replicas' to handle; it is reported as refused.
//!
//! What the replicas must tell (`told`): each accepted object that phalanx's own
//! converter refuses gets a Warning Event `InvalidObject` regarding its uid, and the
//! pending pods of a refused PodGroup get `InvalidPodGroup`, at most
//! `POD_WARNINGS_PER_SKIPPED_GROUP` of them per group (the wide gang's 10,000 pods must
//! not become 10,000 Events).

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::core::DynamicObject;
use phalanx_scheduler::cluster::kube::{
    POD_WARNINGS_PER_SKIPPED_GROUP, REASON_INVALID, REASON_INVALID_POD_GROUP,
    pod_group_from_dynamic, volcano_resource,
};
use phalanx_scheduler::manifest::convert::pod_from_k8s;
use serde_json::{Value, json};

use crate::recorder::{GPU, GROUP_ANNOTATION};

/// The label on every hostile object, so that the next injection finds and deletes them.
const HOSTILE_LABEL: &str = "phalanx.dev/chaos-hostile";

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
        "metadata": {"name": name, "namespace": ns, "labels": {HOSTILE_LABEL: "true"},
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
) -> Result<DynamicObject, String> {
    spec["queue"] = json!(queue);
    spec["priorityClassName"] = json!("chaos-low");
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &volcano_resource("PodGroup", "podgroups"),
    );
    let pg: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns, "labels": {HOSTILE_LABEL: "true"}},
        "spec": spec,
    }))
    .map_err(|e| e.to_string())?;
    api.create(&PostParams::default(), &pg)
        .await
        .map_err(|e| e.to_string())
}

/// What the API server did with the hostile objects, in words for the report, and what
/// the replicas must say about them.
#[derive(Debug, Default)]
pub struct Created {
    pub accepted: Vec<String>,
    pub refused: Vec<String>,
    /// (kind, name, uid) of each accepted object phalanx's converter refuses.
    pub invalid: Vec<(&'static str, String, String)>,
    /// A refused PodGroup's name -> its pods' uids.
    pub pods_of_invalid: BTreeMap<String, BTreeSet<String>>,
}

impl Created {
    fn note<T>(&mut self, what: String, r: Result<T, String>) -> Option<T> {
        match r {
            Ok(t) => {
                self.accepted.push(what);
                Some(t)
            }
            Err(e) => {
                self.refused.push(format!("{what} ({e})"));
                None
            }
        }
    }

    /// Notes a created PodGroup that phalanx cannot read.
    fn judge_group(&mut self, group: &DynamicObject) {
        if pod_group_from_dynamic(group, &mut Vec::new()).is_err() {
            let name = group.metadata.name.clone().unwrap_or_default();
            let uid = group.metadata.uid.clone().unwrap_or_default();
            self.pods_of_invalid.entry(name.clone()).or_default();
            self.invalid.push(("PodGroup", name, uid));
        }
    }

    /// Notes a created pod that phalanx cannot read, or whose PodGroup it cannot.
    fn judge_pod(&mut self, pod: &Pod, group: &str) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if pod_from_k8s(pod, "default-scheduler").is_err() {
            self.invalid.push(("Pod", name, uid));
        } else if let Some(pods) = self.pods_of_invalid.get_mut(group) {
            pods.insert(uid);
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

/// Deletes the hostile pods and PodGroups an earlier injection left in `ns`.
async fn retire(client: &kube::Client, ns: &str) -> Result<(), String> {
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let ours = ListParams::default().labels(&format!("{HOSTILE_LABEL}=true"));
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    pods.delete_collection(&now, &ours)
        .await
        .map_err(|e| format!("deleting the earlier hostile pods: {e}"))?;
    let groups: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &volcano_resource("PodGroup", "podgroups"),
    );
    groups
        .delete_collection(&now, &ours)
        .await
        .map_err(|e| format!("deleting the earlier hostile PodGroups: {e}"))?;
    Ok(())
}

/// Deletes the earlier injection's hostile objects, then creates this one's in `ns`,
/// queue `queue`, each name with the injection's number `n`; the wide gang has
/// `wide_pods` pods.
pub async fn create(
    client: &kube::Client,
    ns: &str,
    queue: &str,
    n: usize,
    wide_pods: u32,
) -> Created {
    let mut out = Created::default();
    if let Err(e) = retire(client, ns).await {
        // Not fatal: the earlier set stays, as it did before the retirement was built.
        out.refused.push(e);
    }
    let named = |base: &str| format!("{base}-{n:04}");
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let make = |name: &str, group: &str, gpus: &str| pod(ns, name, group, gpus);
    let post = |p: anyhow::Result<Pod>| {
        let pods = pods.clone();
        async move {
            let p = p.map_err(|e| e.to_string())?;
            pods.create(&PostParams::default(), &p)
                .await
                .map_err(|e| e.to_string())
        }
    };
    for (base, spec) in groups() {
        let name = &named(base);
        let r = create_group(client, ns, queue, name, spec).await;
        if let Some(g) = out.note(format!("PodGroup {name}"), r) {
            out.judge_group(&g);
        }
        let r = post(make(&format!("{name}-0"), name, "1")).await;
        if let Some(p) = out.note(format!("pod {name}-0"), r) {
            out.judge_pod(&p, name);
        }
    }
    let big = &named("hostile-pod-1e400");
    let r = create_group(client, ns, queue, big, json!({"minMember": 1})).await;
    if let Some(g) = out.note(format!("PodGroup {big}"), r) {
        out.judge_group(&g);
    }
    let r = post(make(&format!("{big}-0"), big, "1e400")).await;
    if let Some(p) = out.note(format!("pod {big}-0 requesting 1e400 GPUs"), r) {
        out.judge_pod(&p, big);
    }
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
    if let Some(g) = out.note(format!("PodGroup {wide} (minMember {wide_pods})"), r) {
        out.judge_group(&g);
    }
    // Sixteen creates at a time: the API server, not the harness, sets the pace.
    let results: Vec<Result<Pod, String>> = futures::stream::iter(0..wide_pods)
        .map(|i| post(make(&format!("{wide}-{i}"), wide, "1")))
        .buffer_unordered(16)
        .collect()
        .await;
    for p in results.iter().flatten() {
        out.judge_pod(p, wide);
    }
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

/// The Warning Events phalanx wrote in `ns`: (reason, uid of the object regarded).
async fn warnings(client: &kube::Client, ns: &str) -> Result<Vec<(String, String)>, String> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let events = api
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("listing the Events of {ns}: {e}"))?;
    Ok(events
        .items
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter(|e| e.reporting_controller.as_deref() == Some("phalanx.dev/scheduler"))
        .filter_map(|e| Some((e.reason?, e.regarding?.uid?)))
        .collect())
}

/// What [`judge_told`] finds wrong: something not told yet (it may still come), or more
/// pods told than the bound (it only grows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Untold {
    Missing(String),
    OverBound(String),
}

impl std::fmt::Display for Untold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Missing(what) | Self::OverBound(what) => f.write_str(what),
        }
    }
}

/// What is missing from what the replicas told about `created`, given the Warning
/// Events `seen` (reason, uid), or too much: `Ok(())` once every object phalanx cannot
/// read has its `InvalidObject` Event and each refused PodGroup's pods have
/// `InvalidPodGroup` Events, one per pod, for as many pods as the bound allows and no
/// more. Duplicates (a restarted leader tells again) are allowed.
pub fn judge_told(created: &Created, seen: &[(String, String)]) -> Result<(), Untold> {
    let by = |reason: &str| -> BTreeSet<&str> {
        seen.iter()
            .filter(|(r, _)| r == reason)
            .map(|(_, uid)| uid.as_str())
            .collect()
    };
    let (invalid, of_group) = (by(REASON_INVALID), by(REASON_INVALID_POD_GROUP));
    let untold: Vec<String> = created
        .invalid
        .iter()
        .filter(|(_, _, uid)| !invalid.contains(uid.as_str()))
        .map(|(kind, name, _)| format!("{kind} {name}"))
        .collect();
    if !untold.is_empty() {
        return Err(Untold::Missing(format!(
            "no InvalidObject Warning Event on {}",
            untold.join(", ")
        )));
    }
    for (group, pods) in &created.pods_of_invalid {
        let told = pods
            .iter()
            .filter(|uid| of_group.contains(uid.as_str()))
            .count();
        let want = pods.len().min(POD_WARNINGS_PER_SKIPPED_GROUP);
        if told < want {
            return Err(Untold::Missing(format!(
                "{told} of {} pods of PodGroup {group} have an InvalidPodGroup Event; want {want}",
                pods.len()
            )));
        }
        if told > want {
            return Err(Untold::OverBound(format!(
                "{told} pods of PodGroup {group} have an InvalidPodGroup Event, over the bound of {POD_WARNINGS_PER_SKIPPED_GROUP}"
            )));
        }
    }
    Ok(())
}

/// Waits up to `within` for the replicas to tell what [`judge_told`] wants: a summary,
/// or what was still missing (or too much) at the end.
pub async fn await_told(
    client: &kube::Client,
    ns: &str,
    created: &Created,
    within: std::time::Duration,
) -> Result<String, String> {
    let start = std::time::Instant::now();
    loop {
        let seen = warnings(client, ns).await?;
        match judge_told(created, &seen) {
            Ok(()) => {
                let pods: usize = created
                    .pods_of_invalid
                    .values()
                    .map(|p| p.len().min(POD_WARNINGS_PER_SKIPPED_GROUP))
                    .sum();
                return Ok(format!(
                    "told: an InvalidObject Event on each of {} objects phalanx cannot read, InvalidPodGroup on {pods} of their groups' pods (at most {POD_WARNINGS_PER_SKIPPED_GROUP} per group)",
                    created.invalid.len()
                ));
            }
            // Too many only grows: no point waiting.
            Err(e @ Untold::OverBound(_)) => return Err(e.to_string()),
            Err(e) if start.elapsed() >= within => return Err(format!("after {within:?}: {e}")),
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(500)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn created(wide: usize) -> Created {
        let pods: BTreeSet<String> = (0..wide).map(|i| format!("pod-{i}")).collect();
        Created {
            invalid: vec![
                ("PodGroup", "wide".into(), "g-wide".into()),
                ("Pod", "big-0".into(), "p-big".into()),
            ],
            pods_of_invalid: BTreeMap::from([("wide".to_string(), pods)]),
            ..Created::default()
        }
    }

    fn said(reason: &str, uids: impl IntoIterator<Item = String>) -> Vec<(String, String)> {
        uids.into_iter().map(|u| (reason.to_string(), u)).collect()
    }

    #[test]
    fn what_the_replicas_must_tell_is_judged_and_a_missing_or_extra_event_is_caught() {
        let c = created(20);
        let mut seen = said(REASON_INVALID, ["g-wide".to_string(), "p-big".to_string()]);
        seen.extend(said(
            REASON_INVALID_POD_GROUP,
            (0..16).map(|i| format!("pod-{i}")),
        ));
        // A restarted leader telling again is not a violation.
        seen.extend(said(REASON_INVALID, ["p-big".to_string()]));
        assert_eq!(judge_told(&c, &seen), Ok(()));
        // Planted: the 1e400 pod untold.
        let missing: Vec<_> = seen.iter().filter(|(_, u)| u != "p-big").cloned().collect();
        let e = judge_told(&c, &missing).expect_err("missing").to_string();
        assert!(
            e.contains("no InvalidObject Warning Event on Pod big-0"),
            "{e}"
        );
        // Planted: a seventeenth pod told.
        let mut extra = seen.clone();
        extra.extend(said(REASON_INVALID_POD_GROUP, ["pod-16".to_string()]));
        let e = judge_told(&c, &extra).expect_err("over the bound");
        assert!(matches!(e, Untold::OverBound(_)), "{e:?}");
        let e = e.to_string();
        assert!(
            e.contains("17 pods of PodGroup wide") && e.contains("over the bound"),
            "{e}"
        );
        // Too few.
        let e = judge_told(&c, &seen[..10])
            .expect_err("too few")
            .to_string();
        assert!(e.contains("of 20 pods of PodGroup wide"), "{e}");
    }

    #[test]
    fn a_refused_group_with_fewer_pods_than_the_bound_wants_each_of_them_told() {
        let c = created(3);
        let mut seen = said(REASON_INVALID, ["g-wide".to_string(), "p-big".to_string()]);
        seen.extend(said(
            REASON_INVALID_POD_GROUP,
            ["pod-0".to_string(), "pod-1".to_string()],
        ));
        let e = judge_told(&c, &seen).expect_err("one untold").to_string();
        assert!(e.contains("2 of 3 pods") && e.contains("want 3"), "{e}");
    }

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
