//! What one scheduling cycle records through the `metrics` macros: the latencies of its
//! actions and plugins, and the attempts by result. The caller adds what only it sees: the
//! end-to-end time with binding ([`record_e2e`]) and which gangs really started
//! ([`record_gang_scheduled`]).

use std::collections::HashMap;
use std::time::Duration;

use metrics::{counter, histogram};

use crate::framework::{CyclePlan, Session};
use crate::model::{ObjectKey, PodGroupPhase};
use crate::observe::name;
use crate::observe::state::created_ms;

/// Volcano's label value for plugin time spent when the session opens.
pub const ON_SESSION_OPEN: &str = "OnSessionOpen";

/// How long the parts of one cycle took, measured by the shared cycle code.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CycleTimings {
    /// Each action in the order run.
    pub actions: Vec<(String, Duration)>,
    /// Each plugin's `on_session_open`.
    pub plugins_open: Vec<(&'static str, Duration)>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Records the cycle's latencies and attempts; `plan` is what the cycle returned.
pub fn record_cycle(session: &Session, plan: &CyclePlan) {
    let timings = &session.timings;
    for (action, took) in &timings.actions {
        histogram!(name::ACTION_LATENCY, "action" => action.clone()).record(ms(*took));
    }
    for (plugin, took) in &timings.plugins_open {
        histogram!(name::PLUGIN_LATENCY, "plugin" => *plugin, "OnSession" => ON_SESSION_OPEN)
            .record(ms(*took));
    }
    let placed: usize = plan.gangs.iter().map(|g| g.placements.len()).sum();
    counter!(name::SCHEDULE_ATTEMPTS, "result" => "scheduled").increment(placed as u64);
    let state = &session.state;
    let unschedulable: usize = (0..state.jobs.len())
        .filter(|&j| !state.jobs[j].shadow && session.in_scope(j))
        .filter(|&j| {
            let job = &state.jobs[j];
            job.blocked_reason.is_some() || !job.fit_errors.is_empty()
        })
        .map(|j| state.pending_tasks(j).count())
        .sum();
    counter!(name::SCHEDULE_ATTEMPTS, "result" => "unschedulable").increment(unschedulable as u64);
    counter!(name::PREEMPTION_ATTEMPTS).increment(plan.evictions.len() as u64);
}

/// The cycle's end-to-end time: planning and, where there is one, binding.
pub fn record_e2e(took: Duration) {
    histogram!(name::E2E_LATENCY).record(ms(took));
}

/// Internal failures while acting on a plan (a bind or ledger call that failed).
pub fn record_errors(pods: usize) {
    counter!(name::SCHEDULE_ATTEMPTS, "result" => "error").increment(pods as u64);
}

/// Records, for each gang in `started` that was not Running before this cycle, the time
/// from its PodGroup's creation to now (Volcano's job scheduling latency).
pub fn record_gang_scheduled<'a>(
    session: &Session,
    started: impl IntoIterator<Item = &'a ObjectKey>,
) {
    let jobs: HashMap<&ObjectKey, usize> = session
        .state
        .jobs
        .iter()
        .enumerate()
        .map(|(i, j)| (j.key(), i))
        .collect();
    for key in started {
        let Some(&j) = jobs.get(key) else { continue };
        let job = &session.state.jobs[j];
        if matches!(
            job.pod_group.status.phase,
            PodGroupPhase::Running | PodGroupPhase::Completed
        ) {
            continue;
        }
        let waited = session.state.now_ms.saturating_sub(created_ms(job));
        histogram!(name::E2E_JOB_LATENCY).record(waited as f64);
    }
}
