//! Volcano's Queue (`scheduling.volcano.sh/v1beta1`): a team's share of the cluster.

use super::resources::Resources;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Queue {
    pub name: String,
    /// Relative share when the cluster is contended (at least 1).
    pub weight: u32,
    /// Hard cap: the queue never holds more (unlisted resources are unlimited).
    pub capability: Option<Resources>,
    /// Explicit deserved share (`spec.deserved`), used instead of the weight-derived one.
    pub deserved: Option<Resources>,
    /// Resources reserved for this queue that others may not take (`spec.guarantee.resource`).
    pub guarantee: Resources,
    pub reclaimable: bool,
    pub priority: i32,
    /// `spec.parent`: the queue above this one in a hierarchy (`None`: directly under
    /// `root`). Only the `capacity` plugin with `enableHierarchy: true` reads it.
    pub parent: Option<String>,
    pub state: QueueState,
    pub creation_index: u64,
}

impl Queue {
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            weight: 1,
            capability: None,
            deserved: None,
            guarantee: Resources::new(),
            reclaimable: true,
            priority: 0,
            parent: None,
            state: QueueState::Open,
            creation_index: 0,
        }
    }
}

/// The top of a queue hierarchy: every queue without `spec.parent` is its child. A
/// workload need not declare it (Volcano's controller creates it).
pub const ROOT_QUEUE: &str = "root";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum QueueState {
    #[default]
    Open,
    Closed,
    Closing,
}

impl QueueState {
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "Open" => Self::Open,
            "Closed" => Self::Closed,
            "Closing" => Self::Closing,
            _ => return None,
        })
    }
}
