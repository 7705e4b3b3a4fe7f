//! What one cycle decided: the output of the pure scheduling step, performed by the driver.

use crate::model::{ObjectKey, PodGroupStatus, Resources};

/// One pod's placement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub pod: ObjectKey,
    pub node: String,
    pub resources: Resources,
}

/// The placements of one committed statement: a gang's pods, bound all together (the ledger
/// accepts or refuses them as one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GangPlacement {
    pub gang: ObjectKey,
    pub placements: Vec<Placement>,
}

/// An Event to record on a PodGroup (Kubernetes Events API semantics).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub object: ObjectKey,
    /// `Normal` or `Warning`.
    pub kind: &'static str,
    pub reason: String,
    pub message: String,
}

#[derive(Clone, Debug, Default)]
pub struct CyclePlan {
    pub gangs: Vec<GangPlacement>,
    /// PodGroup statuses that changed.
    pub status_updates: Vec<(ObjectKey, PodGroupStatus)>,
    pub events: Vec<Event>,
}

impl CyclePlan {
    pub fn bind_count(&self) -> usize {
        self.gangs.iter().map(|g| g.placements.len()).sum()
    }
}
