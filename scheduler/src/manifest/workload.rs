//! Everything one scenario (or one set of manifest files) declares, converted and checked.

use crate::framework::conf::SchedulerConf;
use crate::model::{Node, Pod, PodGroup, PriorityClass, Queue};

use super::expectation::Expectation;
use super::scheduler_conf::default_scheduler_conf;

/// The loaded objects, in document order (a Job's PodGroup, then its pods, where the Job
/// was). Every object's `creation_index` counts up from 1 in that order; the implicit
/// `default` queue (present unless the file declares one) has index 0, as it exists before
/// anything else in a Volcano cluster.
#[derive(Clone, Debug)]
pub struct Workload {
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    pub pod_groups: Vec<PodGroup>,
    pub queues: Vec<Queue>,
    pub priority_classes: Vec<PriorityClass>,
    /// From a `v1 ConfigMap` carrying `volcano-scheduler.conf`; `None` means the default.
    pub scheduler_conf: Option<SchedulerConf>,
    pub expectation: Option<Expectation>,
    /// Things the user should know (each prefixed with its document and object); loading
    /// went on regardless.
    pub warnings: Vec<String>,
    /// Documents that were understood but carry nothing for the scheduler (a ConfigMap
    /// without `volcano-scheduler.conf`).
    pub ignored: Vec<String>,
    /// The scheduler name phalanx answers to (`LoadOptions::scheduler_name`).
    pub scheduler_name: String,
}

impl Workload {
    /// True when phalanx places this pod: its `spec.schedulerName` is phalanx's name (a pod
    /// without one was given phalanx's name when loaded). Other pods are accounted for
    /// (they hold resources where they run) but never placed.
    pub fn manages(&self, pod: &Pod) -> bool {
        pod.scheduler_name == self.scheduler_name
    }

    /// The configuration to run: the file's, else Volcano's default.
    pub fn effective_scheduler_conf(&self) -> SchedulerConf {
        self.scheduler_conf
            .clone()
            .unwrap_or_else(default_scheduler_conf)
    }
}
