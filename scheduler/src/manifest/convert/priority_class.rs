//! `scheduling.k8s.io/v1 PriorityClass` into [`PriorityClass`].

use k8s_openapi::api::scheduling::v1 as k8s;

use super::{FieldError, required_name};
use crate::model::{PreemptionPolicy, PriorityClass};

/// The highest value a user-defined class may have; larger ones are reserved for
/// `system-` classes (Kubernetes' rule).
pub const HIGHEST_USER_PRIORITY: i32 = 1_000_000_000;

/// Converts a PriorityClass (`preemptionPolicy` defaults to `PreemptLowerPriority`).
pub fn priority_class_from_k8s(pc: &k8s::PriorityClass) -> Result<PriorityClass, FieldError> {
    let name = required_name(pc.metadata.name.as_ref())?;
    let value = pc.value.ok_or_else(|| FieldError::missing("value"))?;
    if value > HIGHEST_USER_PRIORITY && !name.starts_with("system-") {
        return Err(FieldError::new(
            "value",
            format!(
                "{} is above {HIGHEST_USER_PRIORITY}, which only `system-` classes may exceed",
                value
            ),
        ));
    }
    let preemption_policy = match pc.preemption_policy.as_deref() {
        None | Some("") => PreemptionPolicy::PreemptLowerPriority,
        Some(text) => PreemptionPolicy::parse(text).ok_or_else(|| {
            FieldError::not_one_of(
                "preemptionPolicy",
                text,
                "preemption policy",
                &["PreemptLowerPriority", "Never"],
            )
        })?,
    };
    Ok(PriorityClass {
        name,
        value,
        global_default: pc.global_default.unwrap_or(false),
        preemption_policy,
    })
}
