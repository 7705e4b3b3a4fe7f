//! Volcano's PodGroup (`scheduling.volcano.sh/v1beta1`): the gang.

use std::collections::BTreeMap;

use super::resources::Resources;
use super::{ObjectKey, TimeMs};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodGroup {
    pub key: ObjectKey,
    /// Pods that must be placed together (`spec.minMember`); 0: no gang constraint, each pod
    /// is placed on its own.
    pub min_member: u32,
    /// Per task (role) minimums (`spec.minTaskMember`).
    pub min_task_member: BTreeMap<String, u32>,
    /// Resources the gang needs to start (`spec.minResources`); used by enqueue.
    pub min_resources: Option<Resources>,
    pub queue: String,
    pub priority_class_name: Option<String>,
    pub annotations: BTreeMap<String, String>,
    pub creation_index: u64,
    pub status: PodGroupStatus,
}

impl PodGroup {
    pub fn new(key: ObjectKey, min_member: u32) -> Self {
        Self {
            key,
            min_member,
            min_task_member: BTreeMap::new(),
            min_resources: None,
            queue: super::DEFAULT_QUEUE.to_string(),
            priority_class_name: None,
            annotations: BTreeMap::new(),
            creation_index: 0,
            status: PodGroupStatus::default(),
        }
    }

    /// A copy with `status` in place of this one's, made without copying the old status
    /// (its conditions are most of a PodGroup's size): what a status update does to a
    /// PodGroup that a snapshot still shares.
    pub fn with_status(&self, status: PodGroupStatus) -> PodGroup {
        // Destructured whole, so that a new field cannot be forgotten here.
        let PodGroup {
            key,
            min_member,
            min_task_member,
            min_resources,
            queue,
            priority_class_name,
            annotations,
            creation_index,
            status: _,
        } = self;
        PodGroup {
            key: key.clone(),
            min_member: *min_member,
            min_task_member: min_task_member.clone(),
            min_resources: min_resources.clone(),
            queue: queue.clone(),
            priority_class_name: priority_class_name.clone(),
            annotations: annotations.clone(),
            creation_index: *creation_index,
            status,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodGroupStatus {
    pub phase: PodGroupPhase,
    pub running: u32,
    pub succeeded: u32,
    pub failed: u32,
    pub conditions: Vec<PodGroupCondition>,
    /// When the PodGroup last became Inqueue (admitted); `None` while Pending. phalanx's
    /// addition, so admission can be released after a configurable time.
    pub inqueue_since_ms: Option<TimeMs>,
}

/// Volcano's PodGroup phases.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PodGroupPhase {
    #[default]
    Pending,
    Inqueue,
    Running,
    Completed,
    Unknown,
}

impl PodGroupPhase {
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "Pending" => Self::Pending,
            "Inqueue" => Self::Inqueue,
            "Running" => Self::Running,
            "Completed" => Self::Completed,
            "Unknown" => Self::Unknown,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Inqueue => "Inqueue",
            Self::Running => "Running",
            Self::Completed => "Completed",
            Self::Unknown => "Unknown",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodGroupCondition {
    /// `Scheduled` or `Unschedulable`.
    pub kind: String,
    pub status: bool,
    pub reason: String,
    pub message: String,
    pub transition_time_ms: TimeMs,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_status_keeps_every_other_field_and_takes_the_new_status() {
        let mut group = PodGroup::new(ObjectKey::new("ns", "g"), 4);
        group.min_task_member.insert("worker".into(), 3);
        group.queue = "q".into();
        group.priority_class_name = Some("high".into());
        group.annotations.insert("a".into(), "b".into());
        group.creation_index = 7;
        group.status.conditions.push(PodGroupCondition {
            kind: "Unschedulable".into(),
            status: true,
            reason: "NotEnoughResources".into(),
            message: "old".into(),
            transition_time_ms: 1,
        });
        let status = PodGroupStatus {
            phase: PodGroupPhase::Running,
            running: 4,
            ..PodGroupStatus::default()
        };
        let updated = group.with_status(status.clone());
        let mut expected = group.clone();
        expected.status = status;
        assert_eq!(updated, expected);
    }
}
