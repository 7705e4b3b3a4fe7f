//! Volcano's objects as YAML shapes them (`scheduling.volcano.sh/v1beta1` PodGroup and Queue,
//! `batch.volcano.sh/v1alpha1` Job), with every spec field of the Go types, and their
//! conversion into the model. Fields phalanx does not act on are still read, so that a
//! wrongly typed value is reported, and a warning says when one that changes scheduling in
//! Volcano is ignored here.

pub mod crd;
pub mod job;
pub mod job_policies;
pub mod pod_group;
pub mod queue;
mod schema;

use schemars::JsonSchema;
use serde::Deserialize;

pub use job::{ExpandedJob, VolcanoJob, expand_job, job_min_resources};
pub use pod_group::{VolcanoPodGroup, pod_group_from_volcano};
pub use queue::{VolcanoQueue, queue_from_volcano};

/// The most pods one gang may require (and one Job may create).
pub const MAX_MIN_MEMBER: i32 = 100_000;

/// Volcano's `NetworkTopologySpec` (read, not acted on).
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkTopologySpec {
    /// hard or soft.
    pub mode: Option<String>,
    /// The highest network tier the pods may span.
    pub highest_tier_allowed: Option<i64>,
    /// The name of that tier.
    pub highest_tier_name: Option<String>,
}
