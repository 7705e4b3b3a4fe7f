//! The plugin trait: one typed hook per decision the actions ask about, each with a default
//! that abstains. Plugins are chosen and ordered by the configuration's tiers; how the
//! answers of several plugins combine is [`crate::framework::plugin_set::PluginSet`]'s job.

use std::cmp::Ordering;

use crate::framework::fit::Unfit;
use crate::framework::session::{JobId, NodeId, QueueId, SessionState, TaskId};

/// A plugin's answer where Volcano uses Permit / Abstain / Reject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vote {
    Permit,
    Abstain,
    Reject,
}

/// Why a job may not be scheduled at all this cycle (Volcano's `ValidateResult`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    pub reason: String,
    pub message: String,
}

/// A scheduling policy. Every hook has a default that abstains, so a plugin implements only
/// what it decides. Hooks get the session state read-only; the `on_*` events let a plugin
/// keep its own bookkeeping (shares) current as allocations are made and undone.
pub trait Plugin: std::fmt::Debug + Send {
    fn name(&self) -> &'static str;

    /// Called once when the session opens, before any action.
    fn on_session_open(&mut self, _state: &SessionState) {}

    /// `Less` puts `a` first. `Equal` means no opinion.
    fn job_order(&self, _state: &SessionState, _a: JobId, _b: JobId) -> Ordering {
        Ordering::Equal
    }
    fn queue_order(&self, _state: &SessionState, _a: QueueId, _b: QueueId) -> Ordering {
        Ordering::Equal
    }
    fn task_order(&self, _state: &SessionState, _a: TaskId, _b: TaskId) -> Ordering {
        Ordering::Equal
    }

    /// Can `task` go on `node` at all (beyond free resources, which the actions check)?
    fn predicate(&self, _state: &SessionState, _task: TaskId, _node: NodeId) -> Result<(), Unfit> {
        Ok(())
    }
    /// Higher is better; scores of all plugins add up.
    fn node_score(&self, _state: &SessionState, _task: TaskId, _node: NodeId) -> f64 {
        0.0
    }

    fn job_valid(&self, _state: &SessionState, _job: JobId) -> Option<Invalid> {
        None
    }
    /// `None` abstains.
    fn job_ready(&self, _state: &SessionState, _job: JobId) -> Option<bool> {
        None
    }
    fn job_pipelined(&self, _state: &SessionState, _job: JobId) -> Vote {
        Vote::Abstain
    }
    fn job_starving(&self, _state: &SessionState, _job: JobId) -> Option<bool> {
        None
    }
    /// May the gang be admitted? Between two admissions (`on_job_enqueued`), the answer
    /// and its [`Plugin::enqueue_refusal`] may depend only on the gang's queue and
    /// `minResources` and on the session: `enqueue` gives a refused gang's answer to the
    /// next gangs of its queue that ask the same, without asking again.
    fn job_enqueueable(&self, _state: &SessionState, _job: JobId) -> Vote {
        Vote::Abstain
    }
    /// Explains a `Reject` from [`Plugin::job_enqueueable`], for the PodGroup's condition.
    fn enqueue_refusal(&self, _state: &SessionState, _job: JobId) -> Option<String> {
        None
    }
    /// May the queue take `task` now? `None` abstains.
    fn allocatable(&self, _state: &SessionState, _queue: QueueId, _task: TaskId) -> Option<bool> {
        None
    }
    /// The queues' deserved shares this plugin worked out when the session opened (the
    /// round's shared view hands them to every replica instead of working them out again);
    /// `None` from a plugin that keeps none.
    fn queue_shares(&self) -> Option<&[crate::plugins::proportion::QueueShare]> {
        None
    }
    /// Is the queue over its share? `None` abstains.
    fn overused(&self, _state: &SessionState, _queue: QueueId) -> Option<bool> {
        None
    }
    /// May this running task be evicted at all (by preempt or reclaim)? `None` abstains.
    fn victim_allowed(&self, _state: &SessionState, _task: TaskId) -> Option<bool> {
        None
    }
    /// May the starving job `preemptor` evict `victims` (bound or running tasks of ONE other
    /// job in the same queue, not yet evicted) to make room? `None` abstains.
    fn preemptable(
        &self,
        _state: &SessionState,
        _preemptor: JobId,
        _victims: &[TaskId],
    ) -> Option<bool> {
        None
    }
    /// May the starving job `reclaimer` take back `victims` (bound or running tasks of ONE
    /// job of another queue, not yet evicted)? `None` abstains.
    fn reclaimable(
        &self,
        _state: &SessionState,
        _reclaimer: JobId,
        _victims: &[TaskId],
    ) -> Option<bool> {
        None
    }

    /// May `queue` reclaim at all, for a gang whose missing members need `need` (Volcano's
    /// `PreemptiveFn`)? `None` abstains.
    fn preemptive(
        &self,
        _state: &SessionState,
        _queue: QueueId,
        _need: &crate::model::Resources,
    ) -> Option<bool> {
        None
    }

    /// Could any pod of `queue` be reclaimed in the rest of this session, given that the
    /// queue's usage can only fall (its jobs are not placed by this session)? `Some(false)`
    /// lets a replica skip lending that queue's gangs as victims. `None` abstains.
    fn queue_may_give_back(&self, _state: &SessionState, _queue: QueueId) -> Option<bool> {
        None
    }

    fn on_job_enqueued(&mut self, _state: &SessionState, _job: JobId) {}
    /// Jobs were appended to the state after the session opened (other shards' gangs lent
    /// as `reclaim` victims); a plugin keeping per-job data extends it.
    fn on_jobs_added(&mut self, _state: &SessionState) {}
    fn on_allocate(&mut self, _state: &SessionState, _task: TaskId) {}
    fn on_deallocate(&mut self, _state: &SessionState, _task: TaskId) {}
}
