//! `scheduling.k8s.io/v1 PriorityClass`.

use super::pod::PreemptionPolicy;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PriorityClass {
    pub name: String,
    pub value: i32,
    pub global_default: bool,
    pub preemption_policy: PreemptionPolicy,
}
