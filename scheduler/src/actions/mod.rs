//! Actions: the steps of a cycle, run in the configured order. Each one reads the session,
//! asks the plugins, and changes the session only through statements and phase changes.

pub mod allocate;
pub mod backfill;
pub mod enqueue;
pub mod preempt;
pub mod reclaim;
mod turns;
pub mod victims;

use crate::framework::Session;

/// Runs the action registered under `name`; unknown names were rejected when the
/// configuration was validated, so they are skipped here.
pub fn run(name: &str, session: &mut Session) {
    match name {
        "enqueue" => enqueue::run(session),
        "allocate" => allocate::run(session),
        "backfill" => backfill::run(session),
        "preempt" => preempt::run(session),
        "reclaim" => reclaim::run(session),
        _ => {}
    }
}

/// Why a job is not considered at all this cycle, or `None` when it may be scheduled.
pub(crate) fn job_blocker(session: &Session, job: crate::framework::JobId) -> Option<String> {
    job_block(session, job).map(|(_, message)| message)
}

/// [`job_blocker`] with the condition reason to show (`QueueNotFound`, `QueueClosed`,
/// `Timeout`, or the plugin's reason such as `NotEnoughPods`).
pub(crate) fn job_block(
    session: &Session,
    job: crate::framework::JobId,
) -> Option<(&'static str, String)> {
    admission_block(session, job).or_else(|| {
        session
            .plugins
            .job_valid(&session.state, job)
            .map(|invalid| {
                (
                    if invalid.reason == "NotEnoughPods" {
                        "NotEnoughPods"
                    } else {
                        "Invalid"
                    },
                    invalid.message,
                )
            })
    })
}

/// What keeps a job from being admitted at all: a missing PodGroup or queue, a queue that
/// is not Open, a schedule timeout with action `stop`. Whether the gang's pods exist yet is
/// not asked: Volcano's job controller creates a Job's pods only once its PodGroup is
/// Inqueue, so admission must come first.
pub(crate) fn admission_block(
    session: &Session,
    job: crate::framework::JobId,
) -> Option<(&'static str, String)> {
    let state = &session.state;
    let j = &state.jobs[job];
    if let Some(group) = &j.missing_group {
        return Some((
            "PodGroupNotFound",
            format!(
                "its annotation scheduling.k8s.io/group-name names PodGroup {:?}, which does not exist in namespace {}",
                group, j.pod_group.key.namespace
            ),
        ));
    }
    let Some(queue) = j.queue else {
        return Some((
            "QueueNotFound",
            format!(
                "queue {:?} does not exist; create it or point the PodGroup at an existing queue",
                j.pod_group.queue
            ),
        ));
    };
    if j.phase == crate::model::PodGroupPhase::Pending && !state.queues[queue].is_open() {
        return Some((
            "QueueClosed",
            format!(
                "queue {} is {:?} and admits no new PodGroups",
                state.queues[queue].queue.name, state.queues[queue].queue.state
            ),
        ));
    }
    if j.timed_out(state.now_ms)
        && j.timeout.action == crate::framework::timeout::TimeoutAction::Stop
    {
        return Some((
            "Timeout",
            format!(
                "schedule-timeout {} passed with timeout-action stop; no longer scheduled",
                crate::framework::timeout::format_duration(j.timeout.timeout_ms.unwrap_or(0))
            ),
        ));
    }
    None
}
