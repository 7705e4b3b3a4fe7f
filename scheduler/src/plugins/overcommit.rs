//! `overcommit`: admits (enqueues) a gang only while the gangs already admitted but not yet
//! placed, plus this one's `minResources`, fit in the cluster's free resources scaled by
//! `overcommit-factor` (default 1.2). It keeps the Inqueue backlog bounded so that admitted
//! gangs can actually be placed, without being so strict that a gang waits for the last GPU.

use crate::framework::conf::{Arguments, argument};
use crate::framework::{JobId, Plugin, SessionState, Vote};
use crate::model::{PodGroupPhase, Resources};

#[derive(Debug)]
pub struct OvercommitPlugin {
    /// The factor as a fraction of 1000 (1.2 = 1200), to keep the arithmetic exact.
    factor_milli: i64,
    idle: Resources,
    inqueue: Resources,
}

impl OvercommitPlugin {
    pub fn new(args: &Arguments) -> Self {
        let factor: f64 = argument(args, "overcommit-factor", 1.2);
        let factor = if factor.is_finite() && factor >= 1.0 {
            factor
        } else {
            1.2
        };
        Self {
            factor_milli: (factor * 1000.0).round() as i64,
            idle: Resources::new(),
            inqueue: Resources::new(),
        }
    }
}

impl Plugin for OvercommitPlugin {
    fn name(&self) -> &'static str {
        "overcommit"
    }

    fn on_session_open(&mut self, state: &SessionState) {
        self.idle = state.total_allocatable.scaled(self.factor_milli, 1000);
        self.idle.sub(&state.total_used);
        self.inqueue = Resources::new();
        for job in &state.jobs {
            let Some(min) = job.min_resources() else {
                continue;
            };
            // Admitted gangs that have not yet got their minimum hold a claim on the rest.
            if matches!(job.phase, PodGroupPhase::Inqueue | PodGroupPhase::Running) {
                let mut missing = min.clone();
                missing.sub_clamped(&job.allocated);
                self.inqueue.add(&missing);
            }
        }
    }

    fn job_enqueueable(&self, state: &SessionState, job: JobId) -> Vote {
        let Some(min) = state.jobs[job].min_resources() else {
            return Vote::Permit;
        };
        if min.plus(&self.inqueue).fits_in_dimensions(&self.idle, min) {
            Vote::Permit
        } else {
            Vote::Reject
        }
    }

    fn enqueue_refusal(&self, state: &SessionState, job: JobId) -> Option<String> {
        let min = state.jobs[job].min_resources()?;
        let wanted = min.plus(&self.inqueue);
        if wanted.fits_in_dimensions(&self.idle, min) {
            return None;
        }
        let idle = self.idle.restricted_to(min);
        let inqueue = self.inqueue.restricted_to(min);
        Some(format!(
            "cluster resources are over-subscribed: minResources {min} plus {inqueue} already admitted exceed {idle} free (overcommit factor {})",
            self.factor_milli as f64 / 1000.0
        ))
    }

    fn on_job_enqueued(&mut self, state: &SessionState, job: JobId) {
        if let Some(min) = state.jobs[job].min_resources() {
            self.inqueue.add(min);
        }
    }
}
