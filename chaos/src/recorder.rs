//! The history recorder: watches of the run's pods and PodGroups and of the nodes, turned
//! into history records, plus the live view the workload generator cleans up from.
//!
//! A watch that restarts relists; whatever it knew and the relist no longer shows was
//! deleted while it was away, and is recorded as deleted when the relist completes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use kube::core::DynamicObject;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as WatchEvent};
use phalanx_scheduler::cluster::kube::{BOUND_BY_ANNOTATION, volcano_resource};
use phalanx_scheduler::shard::ShardMap;
use tokio::sync::mpsc::UnboundedSender;

use crate::history::{Event, Record};

pub const GPU: &str = "nvidia.com/gpu";
pub const GROUP_ANNOTATION: &str = "scheduling.k8s.io/group-name";

/// A pod as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LivePod {
    pub group: Option<String>,
    pub node: Option<String>,
    pub phase: Option<String>,
}

/// The run's pods as last seen (key `namespace/name`), shared with the workload.
pub type Live = Arc<Mutex<BTreeMap<String, LivePod>>>;

/// Stamps events with the run's clock and sends them to the history writer.
#[derive(Debug, Clone)]
pub struct Clock {
    pub t0: Instant,
    pub tx: UnboundedSender<Record>,
}

impl Clock {
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.t0.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub fn emit(&self, event: Event) {
        // The writer outlives every sender; a send after it stopped has nowhere to go.
        let _ = self.tx.send(Record::new(self.now_ms(), event));
    }
}

fn gpus_in(q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>) -> i64 {
    q.and_then(|q| q.0.parse::<i64>().ok()).unwrap_or(0)
}

/// GPUs a pod's containers request.
pub fn pod_gpus(p: &Pod) -> i64 {
    p.spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| {
            gpus_in(
                c.resources
                    .as_ref()
                    .and_then(|r| r.requests.as_ref()?.get(GPU)),
            )
        })
        .sum()
}

fn pod_event(p: &Pod, deleted: bool) -> Option<(String, Event, LivePod)> {
    let ns = p.metadata.namespace.clone()?;
    let key = format!("{ns}/{}", p.metadata.name.clone()?);
    let group = p
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(GROUP_ANNOTATION))
        .map(|g| format!("{ns}/{g}"));
    let node = p
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty());
    let phase = p.status.as_ref().and_then(|s| s.phase.clone());
    let live = LivePod {
        group: group.clone(),
        node: node.clone(),
        phase: phase.clone(),
    };
    let bound_by = p
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(BOUND_BY_ANNOTATION))
        .cloned();
    let event = Event::Pod {
        pod: key.clone(),
        node,
        gpus: pod_gpus(p),
        group,
        phase,
        deleted,
        bound_by,
    };
    Some((key, event, live))
}

/// Follows the watch of the run's pods until the stream ends.
pub async fn record_pods(api: Api<Pod>, clock: Clock, live: Live) {
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut relisted: Option<BTreeSet<String>> = None;
    while let Some(ev) = stream.next().await {
        let (obj, deleted) = match ev {
            Ok(WatchEvent::Apply(p)) => (p, false),
            Ok(WatchEvent::InitApply(p)) => {
                if let Some((key, ..)) = pod_event(&p, false) {
                    relisted.get_or_insert_with(BTreeSet::new).insert(key);
                }
                (p, false)
            }
            Ok(WatchEvent::Delete(p)) => (p, true),
            Ok(WatchEvent::Init) => {
                relisted = Some(BTreeSet::new());
                continue;
            }
            Ok(WatchEvent::InitDone) => {
                let seen = relisted.take().unwrap_or_default();
                forget_unseen(&clock, &live, &seen);
                continue;
            }
            Err(_) => continue,
        };
        if let Some((key, event, pod)) = pod_event(&obj, deleted) {
            let mut map = live.lock().unwrap_or_else(|e| e.into_inner());
            if deleted {
                map.remove(&key);
            } else {
                map.insert(key, pod);
            }
            clock.emit(event);
        }
    }
}

/// After a relist: the pods known before and not listed again were deleted meanwhile.
fn forget_unseen(clock: &Clock, live: &Live, seen: &BTreeSet<String>) {
    let mut map = live.lock().unwrap_or_else(|e| e.into_inner());
    let gone: Vec<String> = map.keys().filter(|k| !seen.contains(*k)).cloned().collect();
    for key in gone {
        if let Some(p) = map.remove(&key) {
            clock.emit(Event::Pod {
                pod: key,
                node: p.node,
                gpus: 0,
                group: p.group,
                phase: p.phase,
                deleted: true,
                bound_by: None,
            });
        }
    }
}

/// Follows the watch of the nodes (allocatable GPUs).
pub async fn record_nodes(api: Api<Node>, clock: Clock) {
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(ev) = stream.next().await {
        let (n, gone) = match ev {
            Ok(WatchEvent::Apply(n) | WatchEvent::InitApply(n)) => (n, false),
            Ok(WatchEvent::Delete(n)) => (n, true),
            _ => continue,
        };
        let gpus = if gone {
            0
        } else {
            gpus_in(
                n.status
                    .as_ref()
                    .and_then(|s| s.allocatable.as_ref()?.get(GPU)),
            )
        };
        if let Some(node) = n.metadata.name {
            clock.emit(Event::Node { node, gpus });
        }
    }
}

/// Follows the watch of the run's PodGroups (minMember, queue and the queue's shard).
pub async fn record_groups(client: kube::Client, ns: String, map: ShardMap, clock: Clock) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client, &ns, &volcano_resource("PodGroup", "podgroups"));
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(ev) = stream.next().await {
        let (g, deleted) = match ev {
            Ok(WatchEvent::Apply(g) | WatchEvent::InitApply(g)) => (g, false),
            Ok(WatchEvent::Delete(g)) => (g, true),
            _ => continue,
        };
        let spec = &g.data["spec"];
        let queue = spec["queue"].as_str().unwrap_or("default").to_string();
        let Some(name) = g.metadata.name else {
            continue;
        };
        clock.emit(Event::Group {
            group: format!("{ns}/{name}"),
            min_member: spec["minMember"].as_i64().unwrap_or(1),
            shard: map.shard_of_queue(&queue),
            queue,
            deleted,
        });
    }
}

/// Counts of the live view the workload needs: per group, (pods, bound, finished).
pub fn group_counts(live: &Live) -> BTreeMap<String, (usize, usize, usize)> {
    let map = live.lock().unwrap_or_else(|e| e.into_inner());
    let mut out: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    for p in map.values() {
        let Some(g) = &p.group else { continue };
        let e = out.entry(g.clone()).or_default();
        e.0 += 1;
        e.1 += usize::from(p.node.is_some());
        e.2 += usize::from(matches!(p.phase.as_deref(), Some("Succeeded" | "Failed")));
    }
    out
}
