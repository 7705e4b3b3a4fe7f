//! The turn-taking that Volcano's actions share: each queue keeps its jobs in job order, and
//! queues take turns in queue order, one job per turn. A queue goes back in line after its
//! turn while it still has jobs, so its order is re-evaluated against the others' (shares
//! change as the cycle places pods).

use crate::framework::ordered_queue::OrderedQueue;
use crate::framework::{JobId, QueueId, Session};

#[derive(Debug)]
pub(crate) struct QueueTurns {
    per_queue: Vec<OrderedQueue<JobId>>,
    queues: OrderedQueue<QueueId>,
    started: bool,
}

impl QueueTurns {
    /// Empty turns for the session's queues; add jobs with [`Self::add`].
    pub fn new(session: &Session) -> Self {
        Self {
            per_queue: (0..session.state.queues.len())
                .map(|_| OrderedQueue::new())
                .collect(),
            queues: OrderedQueue::new(),
            started: false,
        }
    }

    /// How many queues take turns (the session's).
    pub fn queues(&self) -> usize {
        self.per_queue.len()
    }

    /// Puts `job` in line in `queue` (before or during the turns).
    pub fn add(&mut self, session: &Session, queue: QueueId, job: JobId) {
        let (state, plugins) = (&session.state, &session.plugins);
        let was_empty = self.per_queue[queue].is_empty();
        self.per_queue[queue].push(job, |a, b| plugins.job_order(state, a, b));
        if self.started && was_empty {
            self.queues
                .push(queue, |a, b| plugins.queue_order(state, a, b));
        }
    }

    /// The queue whose turn it is, or `None` when every queue is done.
    pub fn next_queue(&mut self, session: &Session) -> Option<QueueId> {
        let (state, plugins) = (&session.state, &session.plugins);
        if !self.started {
            self.started = true;
            for (q, jobs) in self.per_queue.iter().enumerate() {
                if !jobs.is_empty() {
                    self.queues.push(q, |a, b| plugins.queue_order(state, a, b));
                }
            }
        }
        self.queues.pop(|a, b| plugins.queue_order(state, a, b))
    }

    /// The first job of `queue` in job order.
    pub fn next_job(&mut self, session: &Session, queue: QueueId) -> Option<JobId> {
        let (state, plugins) = (&session.state, &session.plugins);
        self.per_queue[queue].pop(|a, b| plugins.job_order(state, a, b))
    }

    /// Ends `queue`'s turn: it goes back in line if it still has jobs (and `job`, when given,
    /// goes back in line inside it first).
    pub fn end_turn(&mut self, session: &Session, queue: QueueId, job: Option<JobId>) {
        let (state, plugins) = (&session.state, &session.plugins);
        if let Some(job) = job {
            self.per_queue[queue].push(job, |a, b| plugins.job_order(state, a, b));
        }
        if !self.per_queue[queue].is_empty() {
            self.queues
                .push(queue, |a, b| plugins.queue_order(state, a, b));
        }
    }

    /// Takes every job still in line in `queue` (in no particular order); the queue is done.
    pub fn drain(&mut self, queue: QueueId) -> Vec<JobId> {
        let mut out = Vec::with_capacity(self.per_queue[queue].len());
        while let Some(j) = self.per_queue[queue].pop(|a, b| a.cmp(&b)) {
            out.push(j);
        }
        out
    }
}
