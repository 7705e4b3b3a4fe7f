//! What the watch cache keeps of a pod: its conversion into the model, and the metadata
//! the cache's other readers need.
//!
//! The cache holds every pod of the cluster. As k8s-openapi's `Pod` it cost about 8 KiB a
//! pod at 20,000 pods (a heap profile, docs/benchmarks.md): the struct alone is about
//! 2.5 KiB and each `Container` 2.2 KiB inline, whatever the pod sets, and kwok's status
//! (conditions, container statuses) adds strings. [`SlimPod`] is read from the same list
//! and watch responses (serde skips the fields it does not name) and keeps the metadata,
//! the scheduling part of the spec (requests, selectors, affinity, tolerations, priority,
//! node) and the phase. [`SlimPod::to_k8s`] rebuilds a `Pod` of those fields for
//! `manifest::convert::pod_from_k8s`, so there is one conversion and it cannot drift from
//! this one: `a_slim_pod_converts_as_the_full_pod_it_was_read_from` checks they agree.
//!
//! The cache does not keep the `SlimPod` itself but a [`CachedPod`]: the model pod
//! converted as the list or watch response is read (or why it does not convert), and the
//! metadata without the labels and annotations, which the model pod holds. The cache and
//! the model held every pod twice before: 12.9 and 13.7 MiB of a replica's 47.6 MiB live
//! at 500 nodes and 5,000 pods (docs/benchmarks.md).
//!
//! Quantities (requests, limits, overhead) are kept as short vectors, not k8s-openapi's
//! `BTreeMap`s: a map's first node is about 540 bytes for the two or three entries a
//! container names, and the two maps of each container were 30 of the cache's 84 MiB at
//! 20,000 pods (docs/benchmarks.md, the heap profile). Affinity, rarely set and large
//! inline, is boxed.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use super::convert::creation_ms;
use crate::manifest::FieldError;
use crate::manifest::convert::pod_from_k8s;
use crate::model::Pod;

/// A pod as the watch cache keeps it (see the module's comment).
#[derive(Clone, Debug)]
pub struct CachedPod {
    /// Without labels, annotations and managed fields: name, namespace, uid and
    /// resourceVersion are what the cache's readers take from it.
    pub metadata: ObjectMeta,
    node_name: Option<String>,
    /// The model pod, or why the pod cannot be read (told once per version by the
    /// snapshot; a pod that does not convert never fails the watch).
    pub converted: Result<Arc<Pod>, Arc<FieldError>>,
}

impl CachedPod {
    /// The node it is bound to, if any.
    pub fn node_name(&self) -> Option<&str> {
        self.node_name.as_deref()
    }
}

impl From<SlimPod> for CachedPod {
    fn from(slim: SlimPod) -> Self {
        let node_name = slim.node_name().map(str::to_string);
        let converted = pod_from_k8s(&slim.to_k8s(), "default-scheduler")
            .map(|mut pod| {
                pod.creation_index = creation_ms(&slim.metadata);
                Arc::new(pod)
            })
            .map_err(Arc::new);
        let mut metadata = slim.metadata;
        metadata.labels = None;
        metadata.annotations = None;
        metadata.managed_fields = None;
        Self {
            metadata,
            node_name,
            converted,
        }
    }
}

impl<'de> Deserialize<'de> for CachedPod {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        SlimPod::deserialize(deserializer).map(Self::from)
    }
}

impl k8s_openapi::Resource for CachedPod {
    const API_VERSION: &'static str = <core::Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <core::Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <core::Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <core::Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <core::Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for CachedPod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A pod as a list or watch response is read: the fields phalanx reads, converted at
/// once into a [`CachedPod`].
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimPod {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: Option<SlimPodSpec>,
    pub status: Option<SlimPodStatus>,
}

/// The part of `spec` the scheduler reads (`manifest/convert/pod.rs`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimPodSpec {
    pub scheduler_name: Option<String>,
    pub priority_class_name: Option<String>,
    pub priority: Option<i32>,
    pub preemption_policy: Option<String>,
    pub node_selector: Option<BTreeMap<String, String>>,
    pub tolerations: Option<Vec<core::Toleration>>,
    pub affinity: Option<Box<core::Affinity>>,
    pub topology_spread_constraints: Option<Vec<core::TopologySpreadConstraint>>,
    pub node_name: Option<String>,
    pub termination_grace_period_seconds: Option<i64>,
    #[serde(default)]
    pub containers: Vec<SlimContainer>,
    pub init_containers: Option<Vec<SlimContainer>>,
    /// Pod-level resources, which replace the containers' figure for cpu and memory.
    pub resources: Option<SlimResources>,
    pub overhead: Option<Quantities>,
}

/// A container's (or the pod's) `resources`: what the conversion reads of it.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct SlimResources {
    pub requests: Option<Quantities>,
    pub limits: Option<Quantities>,
}

/// A map of quantities by resource name, as a vector in name order (read as a map, so a
/// repeated name keeps its last value, as in k8s-openapi's `BTreeMap`).
#[derive(Clone, Debug, Default)]
pub struct Quantities(Box<[(String, Quantity)]>);

impl<'de> Deserialize<'de> for Quantities {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, Quantity>::deserialize(deserializer)?;
        Ok(Self(map.into_iter().collect()))
    }
}

impl Quantities {
    fn to_k8s(&self) -> BTreeMap<String, Quantity> {
        self.0.iter().cloned().collect()
    }
}

impl SlimResources {
    fn to_k8s(&self) -> core::ResourceRequirements {
        core::ResourceRequirements {
            requests: self.requests.as_ref().map(Quantities::to_k8s),
            limits: self.limits.as_ref().map(Quantities::to_k8s),
            ..core::ResourceRequirements::default()
        }
    }
}

/// A container's name and what it asks (and, for an init container, whether it is a
/// sidecar: `restartPolicy: Always`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimContainer {
    #[serde(default)]
    pub name: String,
    pub resources: Option<SlimResources>,
    pub restart_policy: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimPodStatus {
    pub phase: Option<String>,
}

impl SlimContainer {
    fn to_k8s(&self) -> core::Container {
        core::Container {
            name: self.name.clone(),
            resources: self.resources.as_ref().map(SlimResources::to_k8s),
            restart_policy: self.restart_policy.clone(),
            ..core::Container::default()
        }
    }
}

impl SlimPod {
    /// The node it is bound to, if any.
    pub fn node_name(&self) -> Option<&str> {
        self.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty())
    }

    /// A `Pod` of the fields kept, for the one conversion into the model.
    pub fn to_k8s(&self) -> core::Pod {
        let spec = self.spec.as_ref().map(|s| core::PodSpec {
            scheduler_name: s.scheduler_name.clone(),
            priority_class_name: s.priority_class_name.clone(),
            priority: s.priority,
            preemption_policy: s.preemption_policy.clone(),
            node_selector: s.node_selector.clone(),
            tolerations: s.tolerations.clone(),
            affinity: s.affinity.as_deref().cloned(),
            topology_spread_constraints: s.topology_spread_constraints.clone(),
            node_name: s.node_name.clone(),
            termination_grace_period_seconds: s.termination_grace_period_seconds,
            containers: s.containers.iter().map(SlimContainer::to_k8s).collect(),
            init_containers: s
                .init_containers
                .as_ref()
                .map(|c| c.iter().map(SlimContainer::to_k8s).collect()),
            resources: s.resources.as_ref().map(SlimResources::to_k8s),
            overhead: s.overhead.as_ref().map(Quantities::to_k8s),
            ..core::PodSpec::default()
        });
        core::Pod {
            metadata: self.metadata.clone(),
            spec,
            status: self.status.as_ref().map(|s| core::PodStatus {
                phase: s.phase.clone(),
                ..core::PodStatus::default()
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::convert::pod_from_k8s;

    /// A pod as kwok and the API server show it, with every field the conversion reads
    /// set, and some it does not (env, volumes, conditions, container statuses).
    const FULL: &str = r#"{
      "apiVersion": "v1", "kind": "Pod",
      "metadata": {"name": "w-0", "namespace": "team-a", "uid": "u-1", "resourceVersion": "42",
        "creationTimestamp": "2026-12-03T10:00:00Z", "deletionTimestamp": "2026-12-03T10:05:00Z",
        "labels": {"volcano.sh/task-spec": "worker", "app": "train"},
        "annotations": {"scheduling.k8s.io/group-name": "job-a", "x": "y"}},
      "spec": {
        "schedulerName": "phalanx", "priorityClassName": "high", "priority": 1000,
        "preemptionPolicy": "Never", "nodeSelector": {"gpu": "h100"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
          {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]},
          "preferredDuringSchedulingIgnoredDuringExecution":
          [{"weight": 5, "preference": {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}}]}},
        "nodeName": "gpu-node-0001", "terminationGracePeriodSeconds": 30,
        "overhead": {"cpu": "250m"},
        "resources": {"limits": {"memory": "64Gi"}, "requests": {"memory": "48Gi"}},
        "initContainers": [
          {"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "2"}}},
          {"name": "sidecar", "image": "proxy", "restartPolicy": "Always",
           "resources": {"requests": {"cpu": "500m", "memory": "64Mi"}}}],
        "containers": [
          {"name": "main", "image": "trainer:1", "command": ["python", "train.py"],
           "env": [{"name": "RANK", "value": "0"}],
           "volumeMounts": [{"name": "data", "mountPath": "/data"}],
           "resources": {"limits": {"nvidia.com/gpu": "8", "cpu": "8"}, "requests": {"cpu": "4", "memory": "32Gi"}}}],
        "volumes": [{"name": "data", "emptyDir": {}}]
      },
      "status": {"phase": "Running", "hostIP": "10.0.0.1", "podIP": "10.1.0.1",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "main", "ready": true, "restartCount": 0, "image": "trainer:1", "imageID": "", "state": {"running": {}}}]}
    }"#;

    #[test]
    fn a_slim_pod_converts_as_the_full_pod_it_was_read_from() {
        let full: core::Pod = serde_json::from_str(FULL).unwrap();
        let slim: SlimPod = serde_json::from_str(FULL).unwrap();
        let want = pod_from_k8s(&full, "default-scheduler").unwrap();
        let got = pod_from_k8s(&slim.to_k8s(), "default-scheduler").unwrap();
        assert_eq!(got, want);
        // The fixture exercises what it claims to: each read field is set.
        assert!(want.terminating && want.node_name.is_some() && want.group.is_some());
        assert!(!want.required_node_terms.is_empty() && !want.tolerations.is_empty());
        assert_eq!(slim.node_name(), Some("gpu-node-0001"));
        assert_eq!(slim.metadata.uid.as_deref(), Some("u-1"));
    }

    /// The cache keeps the conversion, and of the metadata what its readers take: the
    /// labels and annotations are in the model pod, not a second time beside it.
    #[test]
    fn a_cached_pod_is_its_conversion_and_the_metadata_without_what_the_model_holds() {
        let full: core::Pod = serde_json::from_str(FULL).unwrap();
        let cached: CachedPod = serde_json::from_str(FULL).unwrap();
        let mut want = pod_from_k8s(&full, "default-scheduler").unwrap();
        want.creation_index = creation_ms(&full.metadata);
        let got = cached.converted.as_deref().unwrap();
        assert_eq!(*got, want);
        assert!(got.labels.contains_key("app") && got.annotations.contains_key("x"));
        assert!(want.creation_index > 0);
        assert_eq!(cached.node_name(), Some("gpu-node-0001"));
        let meta = &cached.metadata;
        assert_eq!(meta.uid.as_deref(), Some("u-1"));
        assert_eq!(meta.resource_version.as_deref(), Some("42"));
        assert_eq!(
            (meta.namespace.as_deref(), meta.name.as_deref()),
            (Some("team-a"), Some("w-0"))
        );
        assert!(meta.labels.is_none() && meta.annotations.is_none());
    }

    /// A pod that does not convert is kept with its error, to be told; a list or watch
    /// response that carries one still reads.
    #[test]
    fn a_pod_that_does_not_convert_is_cached_with_why() {
        let bad = FULL.replace(r#""nvidia.com/gpu": "8""#, r#""nvidia.com/gpu": "eight""#);
        let cached: CachedPod = serde_json::from_str(&bad).unwrap();
        let e = cached.converted.unwrap_err();
        assert!(e.to_string().contains("eight"), "{e}");
        assert_eq!(cached.metadata.uid.as_deref(), Some("u-1"));
    }

    #[test]
    fn a_pod_with_no_spec_or_status_reads_as_one() {
        let slim: SlimPod = serde_json::from_str(r#"{"metadata": {"name": "p"}}"#).unwrap();
        assert!(slim.to_k8s().spec.is_none() && slim.node_name().is_none());
        let e = pod_from_k8s(&slim.to_k8s(), "default-scheduler").unwrap_err();
        assert!(e.to_string().contains("spec"), "{e}");
    }

    /// What the slim pod is for: the cache's per-pod struct is a fraction of k8s-openapi's.
    #[test]
    fn a_slim_pod_is_a_fraction_of_the_size_of_a_full_one() {
        let (slim, full) = (size_of::<SlimPod>(), size_of::<core::Pod>());
        let (slim_c, full_c) = (size_of::<SlimContainer>(), size_of::<core::Container>());
        assert!(slim * 2 < full, "SlimPod {slim} B against Pod {full} B");
        assert!(
            slim_c * 4 < full_c,
            "SlimContainer {slim_c} B against Container {full_c} B"
        );
    }
}
