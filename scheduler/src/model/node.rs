//! A node as the scheduler sees it.

use std::collections::BTreeMap;

use super::resources::Resources;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub unschedulable: bool,
    /// `status.allocatable` (or `status.capacity` when allocatable is absent), without `pods`.
    pub allocatable: Resources,
    /// The `pods` entry of allocatable: how many pods the node may run (110 when unset).
    pub max_pods: i64,
}

impl Node {
    pub const DEFAULT_MAX_PODS: i64 = 110;

    pub fn new(name: impl Into<String>, allocatable: Resources) -> Self {
        Self {
            name: name.into(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            unschedulable: false,
            allocatable,
            max_pods: Self::DEFAULT_MAX_PODS,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: TaintEffect,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "NoSchedule" => Some(Self::NoSchedule),
            "PreferNoSchedule" => Some(Self::PreferNoSchedule),
            "NoExecute" => Some(Self::NoExecute),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoSchedule => "NoSchedule",
            Self::PreferNoSchedule => "PreferNoSchedule",
            Self::NoExecute => "NoExecute",
        }
    }
}
