//! What one cycle decided: the output of the pure scheduling step, performed by the driver.

use crate::model::{ObjectKey, PodGroupStatus, Resources, TimeMs};

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

/// A pod that preempt or reclaim evicts to make room for `for_gang`. Performed before any
/// bind of the cycle, through [`crate::cluster::Cluster::evict`] (the Eviction API in
/// Kubernetes, which respects PodDisruptionBudgets).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eviction {
    pub pod: ObjectKey,
    pub node: String,
    /// The victim's PodGroup, if it has one.
    pub gang: Option<ObjectKey>,
    /// The gang the room is made for.
    pub for_gang: ObjectKey,
    /// `preempt` or `reclaim`.
    pub action: &'static str,
    pub reason: String,
}

#[derive(Clone, Debug, Default)]
pub struct CyclePlan {
    /// Evictions, performed first.
    pub evictions: Vec<Eviction>,
    pub gangs: Vec<GangPlacement>,
    /// Placements waiting for victims to go (not bound this cycle; a later cycle places the
    /// pods again once the victims' resources are free).
    pub pipelined: Vec<GangPlacement>,
    /// PodGroup statuses that changed.
    pub status_updates: Vec<(ObjectKey, PodGroupStatus)>,
    pub events: Vec<Event>,
    /// The earliest future moment at which something time-based happens (a schedule or
    /// inqueue timeout); the simulator's clock may jump to it when nothing else changes.
    pub wake_at_ms: Option<TimeMs>,
}

impl CyclePlan {
    pub fn bind_count(&self) -> usize {
        self.gangs.iter().map(|g| g.placements.len()).sum()
    }

    /// Asks to be woken at `t` (keeps the earliest).
    pub fn wake_at(&mut self, t: TimeMs) {
        self.wake_at_ms = Some(self.wake_at_ms.map_or(t, |w| w.min(t)));
    }
}
