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
//! | victim allowed, preemptable, reclaimable, preemptive | every enabled plugin must agree |

use std::cmp::Ordering;

use crate::framework::conf::{HookFlags, SchedulerConf};
use crate::framework::fit::Unfit;
use crate::framework::plugin::{Invalid, Plugin, Vote};
use crate::framework::session::{JobId, NodeId, QueueId, SessionState, TaskId};
use crate::model::Resources;
use crate::plugins;

#[derive(Debug)]
struct Entry {
    plugin: Box<dyn Plugin>,
    hooks: HookFlags,
}

#[derive(Debug, Default)]
pub struct PluginSet {
    tiers: Vec<Vec<Entry>>,
    /// How long each plugin's `on_session_open` took, in order (for the metrics).
    pub open_times: Vec<(&'static str, std::time::Duration)>,
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
                        plugins::build(opt).map(|plugin| Entry {
                            plugin,
                            hooks: opt.hooks,
                        })
                    })
                    .collect()
            })
            .collect();
        Self {
            tiers,
            open_times: Vec::new(),
        }
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

    /// The first plugin's queue shares as of the session's opening (`proportion`'s).
    pub fn queue_shares(&self) -> Option<&[crate::plugins::proportion::QueueShare]> {
        self.entries().find_map(|e| e.plugin.queue_shares())
    }

    fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.tiers.iter().flatten()
    }

    fn entries_mut(&mut self) -> impl Iterator<Item = &mut Entry> {
        self.tiers.iter_mut().flatten()
    }

    pub fn on_session_open(&mut self, state: &SessionState) {
        let mut times = Vec::new();
        for e in self.entries_mut() {
            let started = std::time::Instant::now();
            e.plugin.on_session_open(state);
            times.push((e.plugin.name(), started.elapsed()));
        }
        self.open_times = times;
    }

    pub fn on_jobs_added(&mut self, state: &SessionState) {
        for e in self.entries_mut() {
            e.plugin.on_jobs_added(state);
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

    /// May `queue` reclaim at all for a gang needing `need`? Every plugin with
    /// `enablePreemptive` on must not refuse.
    pub fn preemptive(&self, state: &SessionState, queue: QueueId, need: &Resources) -> bool {
        self.entries()
            .filter(|e| on(e.hooks.preemptive))
            .all(|e| e.plugin.preemptive(state, queue, need) != Some(false))
    }

    /// Every plugin with `enablePreemptable` on must not refuse.
    /// At least one plugin with `enablePreemptable` on, and none of them refuses: as in
    /// Volcano, where a session without such a plugin finds no victims at all.
    pub fn preemptable(&self, state: &SessionState, preemptor: JobId, victims: &[TaskId]) -> bool {
        let mut hooks = self
            .entries()
            .filter(|e| on(e.hooks.preemptable))
            .peekable();
        hooks.peek().is_some()
            && hooks.all(|e| e.plugin.preemptable(state, preemptor, victims) != Some(false))
    }

    /// At least one plugin with `enableReclaimable` on, and none of them refuses (as
    /// [`Self::preemptable`]).
    pub fn reclaimable(&self, state: &SessionState, reclaimer: JobId, victims: &[TaskId]) -> bool {
        let mut hooks = self
            .entries()
            .filter(|e| on(e.hooks.reclaimable))
            .peekable();
        hooks.peek().is_some()
            && hooks.all(|e| e.plugin.reclaimable(state, reclaimer, victims) != Some(false))
    }

    /// No plugin with `enableReclaimable` on rules out reclaiming from `queue` for the rest
    /// of the session (see [`Plugin::queue_may_give_back`]).
    pub fn queue_may_give_back(&self, state: &SessionState, queue: QueueId) -> bool {
        self.entries()
            .filter(|e| on(e.hooks.reclaimable))
            .all(|e| e.plugin.queue_may_give_back(state, queue) != Some(false))
    }

    pub fn victim_allowed(&self, state: &SessionState, task: TaskId) -> bool {
        self.entries()
            .filter(|e| on(e.hooks.preemptable) && on(e.hooks.reclaimable))
            .all(|e| e.plugin.victim_allowed(state, task) != Some(false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::Cluster;
    use crate::model::resources::CPU;

    /// A plugin whose every answer is set by the test.
    #[derive(Debug, Clone)]
    struct Fake {
        name: &'static str,
        /// Job rank for `job_order` (lower first); `None` has no opinion.
        job_rank: Option<Vec<i32>>,
        pipelined: Vote,
        enqueueable: Vote,
        ready: Option<bool>,
        starving: Option<bool>,
        overused: Option<bool>,
        unfit: Option<&'static str>,
        score: f64,
    }

    fn fake(name: &'static str) -> Fake {
        Fake {
            name,
            job_rank: None,
            pipelined: Vote::Abstain,
            enqueueable: Vote::Abstain,
            ready: None,
            starving: None,
            overused: None,
            unfit: None,
            score: 0.0,
        }
    }

    impl Plugin for Fake {
        fn name(&self) -> &'static str {
            self.name
        }
        fn job_order(&self, _: &SessionState, a: JobId, b: JobId) -> Ordering {
            self.job_rank
                .as_ref()
                .map_or(Ordering::Equal, |r| r[a].cmp(&r[b]))
        }
        fn predicate(&self, _: &SessionState, _: TaskId, _: NodeId) -> Result<(), Unfit> {
            self.unfit.map_or(Ok(()), |u| Err(Unfit::Other(u.into())))
        }
        fn node_score(&self, _: &SessionState, _: TaskId, _: NodeId) -> f64 {
            self.score
        }
        fn job_ready(&self, _: &SessionState, _: JobId) -> Option<bool> {
            self.ready
        }
        fn job_pipelined(&self, _: &SessionState, _: JobId) -> Vote {
            self.pipelined
        }
        fn job_starving(&self, _: &SessionState, _: JobId) -> Option<bool> {
            self.starving
        }
        fn job_enqueueable(&self, _: &SessionState, _: JobId) -> Vote {
            self.enqueueable
        }
        fn overused(&self, _: &SessionState, _: QueueId) -> Option<bool> {
            self.overused
        }
    }

    fn tiers(tiers: Vec<Vec<Fake>>) -> PluginSet {
        PluginSet {
            open_times: Vec::new(),
            tiers: tiers
                .into_iter()
                .map(|t| {
                    t.into_iter()
                        .map(|p| Entry {
                            plugin: Box::new(p),
                            hooks: HookFlags::default(),
                        })
                        .collect()
                })
                .collect(),
        }
    }

    /// Two jobs (`first` created before `second`), one task each, one node.
    fn state() -> SessionState {
        Cluster::new()
            .node("n1", &[(CPU, 4_000)])
            .group("first", "default", 1)
            .group("second", "default", 1)
            .pod("first-0", Some("first"), &[(CPU, 1_000)])
            .pod("second-0", Some("second"), &[(CPU, 1_000)])
            .session(&SchedulerConf::from_names(&["allocate"], &[]))
            .state
    }

    fn voting(pipelined: Vote) -> Fake {
        Fake {
            pipelined,
            enqueueable: pipelined,
            ..fake("voter")
        }
    }

    #[test]
    fn a_reject_in_tier_one_wins_over_a_permit_in_tier_two() {
        let s = state();
        let set = tiers(vec![vec![voting(Vote::Reject)], vec![voting(Vote::Permit)]]);
        assert!(!set.job_pipelined(&s, 0));
        assert!(!set.job_enqueueable(&s, 0));
    }

    #[test]
    fn a_permit_in_tier_one_decides_before_a_reject_in_tier_two() {
        let s = state();
        let set = tiers(vec![vec![voting(Vote::Permit)], vec![voting(Vote::Reject)]]);
        assert!(set.job_pipelined(&s, 0));
        assert!(set.job_enqueueable(&s, 0));
    }

    #[test]
    fn inside_one_tier_a_reject_beats_a_permit() {
        let s = state();
        let set = tiers(vec![vec![voting(Vote::Permit), voting(Vote::Reject)]]);
        assert!(!set.job_pipelined(&s, 0));
    }

    #[test]
    fn an_abstaining_tier_passes_the_vote_on_and_all_abstaining_accepts() {
        let s = state();
        let set = tiers(vec![
            vec![voting(Vote::Abstain)],
            vec![voting(Vote::Reject)],
        ]);
        assert!(!set.job_enqueueable(&s, 0));
        let set = tiers(vec![
            vec![voting(Vote::Abstain)],
            vec![voting(Vote::Abstain)],
        ]);
        assert!(set.job_enqueueable(&s, 0));
    }

    #[test]
    fn job_order_falls_through_equal_to_the_next_plugin() {
        let s = state();
        let second_first = Fake {
            job_rank: Some(vec![1, 0]),
            ..fake("ranker")
        };
        let set = tiers(vec![vec![fake("no-opinion")], vec![second_first.clone()]]);
        assert_eq!(set.job_order(&s, 0, 1), Ordering::Greater);
        // The first plugin with an opinion decides; later ones are not asked.
        let first_first = Fake {
            job_rank: Some(vec![0, 1]),
            ..fake("ranker")
        };
        let set = tiers(vec![vec![first_first], vec![second_first]]);
        assert_eq!(set.job_order(&s, 0, 1), Ordering::Less);
    }

    #[test]
    fn with_no_opinion_anywhere_the_older_job_goes_first() {
        let s = state();
        let set = tiers(vec![vec![fake("a")], vec![fake("b")]]);
        assert_eq!(set.job_order(&s, 0, 1), Ordering::Less);
        assert_eq!(set.job_order(&s, 1, 0), Ordering::Greater);
    }

    #[test]
    fn a_plugin_whose_hook_is_disabled_has_no_say() {
        let s = state();
        let mut set = tiers(vec![vec![Fake {
            job_rank: Some(vec![1, 0]),
            ..fake("ranker")
        }]]);
        set.tiers[0][0].hooks.job_order = Some(false);
        assert_eq!(set.job_order(&s, 0, 1), Ordering::Less);
    }

    #[test]
    fn every_predicate_must_pass_and_node_scores_add_up() {
        let s = state();
        let scored = |score| Fake {
            score,
            ..fake("scorer")
        };
        let set = tiers(vec![vec![scored(10.0)], vec![scored(2.5)]]);
        assert_eq!(set.node_score(&s, 0, 0), 12.5);
        assert!(set.predicate(&s, 0, 0).is_ok());
        let refusing = Fake {
            unfit: Some("no"),
            ..fake("refuser")
        };
        let set = tiers(vec![vec![scored(1.0)], vec![refusing]]);
        assert_eq!(set.predicate(&s, 0, 0), Err(Unfit::Other("no".into())));
    }

    #[test]
    fn job_ready_needs_every_plugin_and_overused_needs_any() {
        let s = state();
        let answer = |ready, overused| Fake {
            ready,
            overused,
            ..fake("p")
        };
        let set = tiers(vec![
            vec![answer(Some(true), Some(false))],
            vec![answer(None, None)],
        ]);
        assert!(set.job_ready(&s, 0));
        assert!(!set.overused(&s, 0));
        let set = tiers(vec![
            vec![answer(Some(true), None)],
            vec![answer(Some(false), Some(true))],
        ]);
        assert!(!set.job_ready(&s, 0));
        assert!(set.overused(&s, 0));
    }

    #[test]
    fn job_starving_is_decided_by_the_first_tier_with_an_opinion() {
        let s = state();
        let starving = |v| Fake {
            starving: v,
            ..fake("p")
        };
        let set = tiers(vec![vec![starving(None)], vec![starving(Some(true))]]);
        assert!(set.job_starving(&s, 0));
        let set = tiers(vec![
            vec![starving(Some(true))],
            vec![starving(Some(false))],
        ]);
        assert!(set.job_starving(&s, 0));
        let set = tiers(vec![vec![starving(Some(true)), starving(Some(false))]]);
        assert!(!set.job_starving(&s, 0));
        assert!(!tiers(vec![]).job_starving(&s, 0));
    }

    /// Volcano's `priority_test.go` "disable preempt low priority": with every
    /// `preemptable`/`reclaimable` hook off, no victim is allowed (before, no hook meant
    /// every victim was).
    #[test]
    fn victims_need_a_plugin_with_the_hook_on() {
        let s = state();
        assert!(!tiers(vec![]).preemptable(&s, 1, &[0]));
        assert!(!tiers(vec![]).reclaimable(&s, 1, &[0]));
        let mut set = tiers(vec![vec![fake("abstains")]]);
        assert!(set.preemptable(&s, 1, &[0]));
        assert!(set.reclaimable(&s, 1, &[0]));
        set.tiers[0][0].hooks.preemptable = Some(false);
        set.tiers[0][0].hooks.reclaimable = Some(false);
        assert!(!set.preemptable(&s, 1, &[0]));
        assert!(!set.reclaimable(&s, 1, &[0]));
    }
}
