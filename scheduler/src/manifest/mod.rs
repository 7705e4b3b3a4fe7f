//! Kubernetes / Volcano YAML and `volcano-scheduler.conf` into the model.

mod checks;
pub mod convert;
mod document;
pub mod error;
pub mod expectation;
mod load;
mod quantity_text;
pub mod scheduler_conf;
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
mod tests;
