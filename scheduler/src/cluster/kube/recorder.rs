//! The Events this backend writes (`events.k8s.io/v1`), and the warnings about objects that
//! a snapshot leaves out or reads with a caveat.
//!
//! A malformed object never blocks the others: the snapshot skips it. Its owner must still
//! learn why nothing happens to it, where they look (`kubectl describe`, `kubectl get
//! events`), not only in a replica's log. So each such object is told once per version of it
//! ([`ObjectWarnings::tell`]): one log line on the replica that read it, and one Warning
//! Event that the Raft leader writes (`serve`), naming the field and the value. A hostile
//! object costs one Event, not one per cycle.

use std::collections::{HashSet, VecDeque};
use std::fmt;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::events::v1 as events;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;

use super::{REPORTING_CONTROLLER, VOLCANO_GROUP, VOLCANO_VERSION};
use crate::manifest::volcano::crd::{JOB_GROUP, JOB_VERSION};
use crate::model::ObjectKey;

/// The Event reason of an object the snapshot leaves out: nothing is scheduled for it.
pub const REASON_INVALID: &str = "InvalidObject";
/// The Event reason on a pending pod whose PodGroup the snapshot leaves out.
pub const REASON_INVALID_POD_GROUP: &str = "InvalidPodGroup";
/// The Event reason of an object read with a field ignored or read otherwise than written.
pub const REASON_FIELD_IGNORED: &str = "FieldIgnored";
/// The namespace of the Events about cluster-scoped objects (Node, Queue, PriorityClass),
/// where kubectl's recorder and Volcano's scheduler write them too.
pub const CLUSTER_SCOPED_EVENTS_NAMESPACE: &str = "default";
/// Most bytes of an Event's `note` (the Events API refuses longer ones).
const MAX_NOTE_BYTES: usize = 1000;

/// The object an Event regards.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Regarding {
    Pod(ObjectKey),
    PodGroup(ObjectKey),
    /// A Volcano `batch.volcano.sh` Job (`serve --job-controller`).
    Job(ObjectKey),
    Queue(String),
    Node(String),
    PriorityClass(String),
}

impl Regarding {
    fn kind(&self) -> &'static str {
        match self {
            Self::Pod(_) => "Pod",
            Self::PodGroup(_) => "PodGroup",
            Self::Job(_) => "Job",
            Self::Queue(_) => "Queue",
            Self::Node(_) => "Node",
            Self::PriorityClass(_) => "PriorityClass",
        }
    }

    fn api_version(&self) -> String {
        match self {
            Self::Pod(_) | Self::Node(_) => "v1".into(),
            Self::PodGroup(_) | Self::Queue(_) => format!("{VOLCANO_GROUP}/{VOLCANO_VERSION}"),
            Self::Job(_) => format!("{JOB_GROUP}/{JOB_VERSION}"),
            Self::PriorityClass(_) => "scheduling.k8s.io/v1".into(),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Self::Pod(k) | Self::PodGroup(k) | Self::Job(k) => &k.name,
            Self::Queue(n) | Self::Node(n) | Self::PriorityClass(n) => n,
        }
    }

    /// The object's namespace; `None` for a cluster-scoped kind.
    fn namespace(&self) -> Option<&str> {
        match self {
            Self::Pod(k) | Self::PodGroup(k) | Self::Job(k) => Some(&k.namespace),
            Self::Queue(_) | Self::Node(_) | Self::PriorityClass(_) => None,
        }
    }

    /// Where an Event about it is written.
    pub fn event_namespace(&self) -> &str {
        self.namespace().unwrap_or(CLUSTER_SCOPED_EVENTS_NAMESPACE)
    }

    /// With the object's `uid` where known: `kubectl describe` finds an object's Events
    /// by kind, name, namespace and uid.
    fn reference(&self, uid: Option<&str>) -> core::ObjectReference {
        core::ObjectReference {
            api_version: Some(self.api_version()),
            kind: Some(self.kind().into()),
            name: Some(self.name().into()),
            namespace: self.namespace().map(str::to_string),
            uid: uid.map(str::to_string),
            ..core::ObjectReference::default()
        }
    }
}

impl fmt::Display for Regarding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.namespace() {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind(), self.name()),
            None => write!(f, "{} {}", self.kind(), self.name()),
        }
    }
}

/// What an Event says, besides its object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventText {
    /// What was done (`Scheduling`, or the Job controller's `Expand`).
    pub action: &'static str,
    /// `Normal` or `Warning`.
    pub kind: &'static str,
    pub reason: String,
    pub note: String,
}

/// The Event body: `now` makes the name unique (`name.<hex nanoseconds>`, as kubectl's
/// recorder names Events; generateName would have to be a valid name itself).
pub fn event_body(
    regarding: &Regarding,
    uid: Option<&str>,
    text: &EventText,
    instance: &str,
    now: Timestamp,
) -> events::Event {
    events::Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:x}", regarding.name(), now.as_nanosecond())),
            namespace: Some(regarding.event_namespace().to_string()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        action: Some(text.action.into()),
        reason: Some(text.reason.clone()),
        note: Some(truncate(&text.note, MAX_NOTE_BYTES)),
        type_: Some(text.kind.to_string()),
        reporting_controller: Some(REPORTING_CONTROLLER.into()),
        reporting_instance: Some(instance.to_string()),
        regarding: Some(regarding.reference(uid)),
        ..events::Event::default()
    }
}

/// At most `max` bytes of `text`, cut at a character boundary.
fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// A warning about one version of one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectWarning {
    pub regarding: Regarding,
    pub uid: Option<String>,
    /// [`REASON_INVALID`] or [`REASON_FIELD_IGNORED`].
    pub reason: &'static str,
    /// Names the object, the field and the value, and what follows from it.
    pub message: String,
}

impl ObjectWarning {
    pub fn text(&self) -> EventText {
        EventText {
            action: "Scheduling",
            kind: "Warning",
            reason: self.reason.to_string(),
            note: self.message.clone(),
        }
    }
}

/// Object versions already told (so each is told once), and the warnings not yet written
/// as Events. Both bounded: a flood of hostile objects costs memory up to these bounds and
/// then only log lines.
#[derive(Debug, Default)]
pub struct ObjectWarnings {
    told: HashSet<String>,
    pending: VecDeque<ObjectWarning>,
    /// Warnings pushed out of `pending` by newer ones before anyone wrote them.
    dropped: u64,
}

/// Object versions remembered as told; past this many, the set starts again (and a
/// still-broken object is told once more).
const MAX_TOLD: usize = 10_000;
/// Warnings waiting to be written as Events; past this many, the oldest are dropped.
const MAX_PENDING: usize = 1_000;

impl ObjectWarnings {
    /// Logs `warning` and queues it for an Event, unless the same warning about the same
    /// `version` (resourceVersion) of the object was told already.
    pub fn tell(&mut self, warning: ObjectWarning, version: &str) {
        if self.told.len() >= MAX_TOLD {
            self.told.clear();
        }
        let id = format!("{}@{version}: {}", warning.regarding, warning.message);
        if !self.told.insert(id) {
            return;
        }
        tracing::warn!(object = %warning.regarding, reason = warning.reason, "{}", warning.message);
        if self.pending.len() >= MAX_PENDING {
            self.pending.pop_front();
            self.dropped += 1;
        }
        self.pending.push_back(warning);
    }

    /// Up to `max` of the oldest warnings not yet written, and how many were dropped
    /// unwritten since the last call.
    pub fn take(&mut self, max: usize) -> (Vec<ObjectWarning>, u64) {
        let n = max.min(self.pending.len());
        let taken = self.pending.drain(..n).collect();
        (taken, std::mem::take(&mut self.dropped))
    }

    /// Forgets the warnings not yet written (another replica writes them); they stay told.
    pub fn discard(&mut self) {
        self.pending.clear();
        self.dropped = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warning(name: &str, message: &str) -> ObjectWarning {
        ObjectWarning {
            regarding: Regarding::PodGroup(ObjectKey::new("ns", name)),
            uid: None,
            reason: REASON_INVALID,
            message: message.into(),
        }
    }

    #[test]
    fn each_version_of_an_object_is_told_once() {
        let mut w = ObjectWarnings::default();
        for _cycle in 0..3 {
            w.tell(warning("pg", "spec.minMember: -3"), "7");
        }
        w.tell(warning("pg", "spec.minMember: -4"), "8");
        w.tell(warning("pg", "spec.minMember: -4"), "8");
        let (taken, dropped) = w.take(10);
        assert_eq!(
            taken,
            vec![
                warning("pg", "spec.minMember: -3"),
                warning("pg", "spec.minMember: -4")
            ]
        );
        assert_eq!(dropped, 0);
        w.tell(warning("pg", "spec.minMember: -4"), "8");
        assert_eq!(w.take(10).0, vec![], "told already: no second Event");
    }

    #[test]
    fn take_hands_out_the_oldest_first_at_most_max_and_discard_keeps_them_told() {
        let mut w = ObjectWarnings::default();
        for i in 0..5 {
            w.tell(warning(&format!("pg-{i}"), "bad"), "1");
        }
        let (first, _) = w.take(2);
        assert_eq!(first, vec![warning("pg-0", "bad"), warning("pg-1", "bad")]);
        w.discard();
        assert_eq!(w.take(10).0, vec![]);
        w.tell(warning("pg-3", "bad"), "1");
        assert_eq!(w.take(10).0, vec![], "discarded is still told");
    }

    #[test]
    fn a_flood_keeps_the_newest_pending_and_counts_the_dropped() {
        let mut w = ObjectWarnings::default();
        for i in 0..MAX_PENDING + 5 {
            w.tell(warning(&format!("pg-{i}"), "bad"), "1");
        }
        let (taken, dropped) = w.take(usize::MAX);
        assert_eq!(taken.len(), MAX_PENDING);
        assert_eq!(dropped, 5);
        assert_eq!(taken[0], warning("pg-5", "bad"));
        assert_eq!(w.take(usize::MAX).1, 0, "the count is reported once");
    }

    #[test]
    fn cluster_scoped_objects_get_events_in_default_and_no_namespace_in_the_reference() {
        let queue = Regarding::Queue("research".into());
        let text = EventText {
            action: "Scheduling",
            kind: "Warning",
            reason: REASON_INVALID.into(),
            note: "x".repeat(5000),
        };
        let body = event_body(
            &queue,
            Some("u-1"),
            &text,
            "phalanx-1",
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(body.metadata.namespace.as_deref(), Some("default"));
        let r = body.regarding.expect("regarding");
        assert_eq!(r.kind.as_deref(), Some("Queue"));
        assert_eq!(
            r.api_version.as_deref(),
            Some("scheduling.volcano.sh/v1beta1")
        );
        assert_eq!(r.namespace, None);
        assert_eq!(r.uid.as_deref(), Some("u-1"));
        assert_eq!(body.note.map(|n| n.len()), Some(MAX_NOTE_BYTES));
        let pod = Regarding::Pod(ObjectKey::new("team-a", "p"));
        assert_eq!(pod.event_namespace(), "team-a");
        assert_eq!(pod.to_string(), "Pod team-a/p");
        assert_eq!(queue.to_string(), "Queue research");
    }
}
