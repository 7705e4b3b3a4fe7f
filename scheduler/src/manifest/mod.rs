//! Kubernetes / Volcano YAML and `volcano-scheduler.conf` into the model.
//!
//! A scenario (`phalanx simulate --scenario`, see `SCENARIOS.md`) is ordinary manifests
//! that also apply to a real cluster, so this module reads them the way the API server,
//! Volcano's admission webhooks and Volcano's job controller would, and refuses what they
//! would refuse, with a message that says where and why. The k8s-openapi conversions in
//! [`convert`] are the ones the real-cluster backend will use too.
//!
//! ```text
//! text ──split at ---/...──▶ documents ──header (apiVersion, kind)──▶ typed read
//!   (serde-saphyr + serde_path_to_error + QuantityText: path, line/column, text as written)
//!   ──convert::* / volcano::*──▶ model objects ──checks (duplicates, i64 totals,
//!   references, a Job's minResources)──▶ Workload
//! ```
//!
//! Conventions the rest of phalanx can rely on:
//! - Errors ([`ManifestError`]) render as
//!   `FILE: document N (line L), Kind namespace/name: field.path: "text" problem`; document
//!   indices are 0-based, count non-empty documents only and continue across files.
//! - Warnings (in [`Workload::warnings`]) have the same `location, object: message` prefix.
//!   Loading never stops for a warning; they cover what phalanx reads but does not act on,
//!   and references to undeclared objects (a pod's PodGroup, a PodGroup's queue, a
//!   PriorityClass), which the scheduler reports as pending with a reason. A field the
//!   object's type does not have (`minMembr: 3`) is a warning naming its path and value,
//!   and an error under [`LoadOptions::strict_config`].
//! - `creation_index` counts from 1 in document order (a Job's PodGroup, then its pods); the
//!   implicit `default` queue is 0.
//! - A pod (or Job) without `schedulerName` gets [`LoadOptions::scheduler_name`]; one that
//!   names another scheduler keeps it and is accounted, never placed
//!   ([`Workload::manages`]). The seed Job says `schedulerName: volcano`: load it with
//!   `scheduler_name: "volcano"` to have phalanx place it.
//! - Resource totals (all nodes' allocatable, all pods' requests) fit in `i64`, checked here,
//!   so the scheduler's saturating arithmetic never saturates on valid input.

pub(crate) mod checks;
mod conf_arguments;
mod conf_position;
pub mod convert;
mod document;
pub mod error;
pub mod expectation;
mod go_duration;
mod load;
mod quantity_text;
pub mod scheduler_conf;
pub(crate) mod unknown_fields;
pub mod volcano;
mod workload;

pub use error::{DocLocation, FieldError, ManifestError, Problem};
pub use expectation::{Expectation, PodOutcome};
pub use load::{LoadOptions, SCHEDULER_CONF_KEY, load_workload, load_workload_files};
pub use scheduler_conf::{ConfError, default_scheduler_conf, parse_scheduler_conf};
pub use workload::Workload;

/// The documents a scenario may hold, as `apiVersion kind`.
pub const KNOWN_KINDS: &[&str] = &[
    "v1 Node",
    "v1 Pod",
    "v1 ConfigMap",
    "scheduling.k8s.io/v1 PriorityClass",
    "scheduling.volcano.sh/v1beta1 PodGroup",
    "scheduling.volcano.sh/v1beta1 Queue",
    "batch.volcano.sh/v1alpha1 Job",
    "phalanx.dev/v1alpha1 Expectation",
];

#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod tests;
