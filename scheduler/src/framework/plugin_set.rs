//! The configured plugins in their tiers, and how their answers combine. The rules are
//! Volcano's (`framework/session_plugins.go`), restated:
//!
//! | hook | rule |
//! |---|---|
//! | job/queue/task order | the first plugin (tier by tier) with an opinion decides |
//! | predicate | every enabled plugin must pass |
//! | node score | scores of all enabled plugins add up |
//! | job ready, allocatable | every enabled plugin must agree |
//! | job valid | the first plugin that says invalid decides |
//! | job pipelined, enqueueable | per tier: any Reject refuses; else any Permit accepts; else next tier; default accept |
//! | job starving | the first tier with an enabled plugin decides; all of that tier must agree |
//! | overused | any plugin saying overused decides |
//! | victim allowed, preemptable, reclaimable | every enabled plugin must agree |

use std::cmp::Ordering;

use crate::framework::conf::{HookFlags, SchedulerConf};
use crate::framework::fit::Unfit;
use crate::framework::plugin::{Invalid, Plugin, Vote};
use crate::framework::session::{JobId, NodeId, QueueId, SessionState, TaskId};
use crate::plugins;

#[derive(Debug)]
struct Entry {
    plugin: Box<dyn Plugin>,
    hooks: HookFlags,
}

#[derive(Debug, Default)]
pub struct PluginSet {
    tiers: Vec<Vec<Entry>>,
}

fn on(flag: Option<bool>) -> bool {
    flag.unwrap_or(true)
}

impl PluginSet {
    /// Builds the plugins the configuration names. Unknown names were already reported and
    /// dropped when the configuration was validated.
    pub fn from_conf(conf: &SchedulerConf) -> Self {
        let tiers = conf
            .tiers
            .iter()
            .map(|tier| {
                tier.plugins
                    .iter()
                    .filter_map(|opt| {
                        plugins::build(&opt.name, &opt.arguments).map(|plugin| Entry {
                            plugin,
                            hooks: opt.hooks,
                        })
                    })
                    .collect()
            })
            .collect();
        Self { tiers }
    }

    /// Names of the active plugins, tier by tier.
    pub fn names(&self) -> Vec<Vec<&'static str>> {
        self.tiers
            .iter()
            .map(|t| t.iter().map(|e| e.plugin.name()).collect())
            .collect()
    }

    pub fn has(&self, name: &str) -> bool {
        self.entries().any(|e| e.plugin.name() == name)
    }

    fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.tiers.iter().flatten()
    }

    fn entries_mut(&mut self) -> impl Iterator<Item = &mut Entry> {
        self.tiers.iter_mut().flatten()
    }

    pub fn on_session_open(&mut self, state: &SessionState) {
        for e in self.entries_mut() {
            e.plugin.on_session_open(state);
        }
    }

    pub fn on_allocate(&mut self, state: &SessionState, task: TaskId) {
        for e in self.entries_mut() {
            e.plugin.on_allocate(state, task);
        }
    }

    pub fn on_deallocate(&mut self, state: &SessionState, task: TaskId) {
        for e in self.entries_mut() {
            e.plugin.on_deallocate(state, task);
        }
    }

    pub fn on_job_enqueued(&mut self, state: &SessionState, job: JobId) {
        for e in self.entries_mut() {
            if on(e.hooks.job_enqueued) {
                e.plugin.on_job_enqueued(state, job);
            }
        }
    }

    fn first_opinion(
        &self,
        flag: impl Fn(&HookFlags) -> Option<bool>,
        cmp: impl Fn(&dyn Plugin) -> Ordering,
    ) -> Ordering {
        self.entries()
            .filter(|e| on(flag(&e.hooks)))
            .map(|e| cmp(e.plugin.as_ref()))
            .find(|o| *o != Ordering::Equal)
            .unwrap_or(Ordering::Equal)
    }

    /// Job order with the fallback Volcano uses: older first, then by name.
    pub fn job_order(&self, state: &SessionState, a: JobId, b: JobId) -> Ordering {
        self.first_opinion(|h| h.job_order, |p| p.job_order(state, a, b))
            .then_with(|| {
                let (ja, jb) = (&state.jobs[a].pod_group, &state.jobs[b].pod_group);
                ja.creation_index
                    .cmp(&jb.creation_index)
                    .then_with(|| ja.key.cmp(&jb.key))
            })
    }

    pub fn queue_order(&self, state: &SessionState, a: QueueId, b: QueueId) -> Ordering {
        self.first_opinion(|h| h.queue_order, |p| p.queue_order(state, a, b))
            .then_with(|| {
                let (qa, qb) = (&state.queues[a].queue, &state.queues[b].queue);
                qa.creation_index
                    .cmp(&qb.creation_index)
                    .then_with(|| qa.name.cmp(&qb.name))
            })
    }

    pub fn task_order(&self, state: &SessionState, a: TaskId, b: TaskId) -> Ordering {
        self.first_opinion(|h| h.task_order, |p| p.task_order(state, a, b))
            .then_with(|| {
                let (pa, pb) = (&state.tasks[a].pod, &state.tasks[b].pod);
                pa.creation_index
                    .cmp(&pb.creation_index)
                    .then_with(|| pa.key.cmp(&pb.key))
            })
    }

    pub fn predicate(&self, state: &SessionState, task: TaskId, node: NodeId) -> Result<(), Unfit> {
        for e in self.entries().filter(|e| on(e.hooks.predicate)) {
            e.plugin.predicate(state, task, node)?;
        }
        Ok(())
    }

    pub fn node_score(&self, state: &SessionState, task: TaskId, node: NodeId) -> f64 {
        self.entries()
            .filter(|e| on(e.hooks.node_order))
            .map(|e| e.plugin.node_score(state, task, node))
            .sum()
    }

    pub fn job_valid(&self, state: &SessionState, job: JobId) -> Option<Invalid> {
        self.entries().find_map(|e| e.plugin.job_valid(state, job))
    }

    pub fn job_ready(&self, state: &SessionState, job: JobId) -> bool {
        self.entries()
            .filter(|e| on(e.hooks.job_ready))
            .all(|e| e.plugin.job_ready(state, job) != Some(false))
    }

    fn tiered_vote(
        &self,
        flag: impl Fn(&HookFlags) -> Option<bool>,
        vote: impl Fn(&dyn Plugin) -> Vote,
    ) -> bool {
        for tier in &self.tiers {
            let mut permitted = false;
            for e in tier.iter().filter(|e| on(flag(&e.hooks))) {
                match vote(e.plugin.as_ref()) {
                    Vote::Reject => return false,
                    Vote::Permit => permitted = true,
                    Vote::Abstain => {}
                }
            }
            if permitted {
                return true;
            }
        }
        true
    }

    pub fn job_pipelined(&self, state: &SessionState, job: JobId) -> bool {
        self.tiered_vote(|h| h.job_pipelined, |p| p.job_pipelined(state, job))
    }

    pub fn job_enqueueable(&self, state: &SessionState, job: JobId) -> bool {
        self.tiered_vote(|h| h.job_enqueued, |p| p.job_enqueueable(state, job))
    }

    /// The first plugin's explanation of why a job was not enqueued.
    pub fn enqueue_refusal(&self, state: &SessionState, job: JobId) -> Option<String> {
        self.entries()
            .filter(|e| on(e.hooks.job_enqueued))
            .find_map(|e| e.plugin.enqueue_refusal(state, job))
    }

    pub fn job_starving(&self, state: &SessionState, job: JobId) -> bool {
        for tier in &self.tiers {
            let mut found = false;
            for e in tier.iter().filter(|e| on(e.hooks.job_starving)) {
                match e.plugin.job_starving(state, job) {
                    Some(false) => return false,
                    Some(true) => found = true,
                    None => {}
                }
            }
            if found {
                return true;
            }
        }
        false
    }

    pub fn allocatable(&self, state: &SessionState, queue: QueueId, task: TaskId) -> bool {
        self.entries()
            .filter(|e| on(e.hooks.allocatable))
            .all(|e| e.plugin.allocatable(state, queue, task) != Some(false))
    }

    pub fn overused(&self, state: &SessionState, queue: QueueId) -> bool {
        self.entries()
            .filter(|e| on(e.hooks.overused))
            .any(|e| e.plugin.overused(state, queue) == Some(true))
    }

    /// Every plugin with `enablePreemptable` on must not refuse.
    pub fn preemptable(&self, state: &SessionState, preemptor: JobId, victims: &[TaskId]) -> bool {
        self.entries()
            .filter(|e| on(e.hooks.preemptable))
            .all(|e| e.plugin.preemptable(state, preemptor, victims) != Some(false))
    }

    /// Every plugin with `enableReclaimable` on must not refuse.
    pub fn reclaimable(&self, state: &SessionState, reclaimer: JobId, victims: &[TaskId]) -> bool {
        self.entries()
            .filter(|e| on(e.hooks.reclaimable))
            .all(|e| e.plugin.reclaimable(state, reclaimer, victims) != Some(false))
    }

    pub fn victim_allowed(&self, state: &SessionState, task: TaskId) -> bool {
        self.entries()
            .filter(|e| on(e.hooks.preemptable) && on(e.hooks.reclaimable))
            .all(|e| e.plugin.victim_allowed(state, task) != Some(false))
    }
}
