//! Actions: the steps of a cycle, run in the configured order. Each one reads the session,
//! asks the plugins, and changes the session only through statements and phase changes.

pub mod allocate;
pub mod backfill;
pub mod enqueue;

use crate::framework::Session;

/// Runs the action registered under `name`; unknown names were rejected when the
/// configuration was validated, so they are skipped here.
pub fn run(name: &str, session: &mut Session) {
    match name {
        "enqueue" => enqueue::run(session),
        "allocate" => allocate::run(session),
        "backfill" => backfill::run(session),
        _ => {}
    }
}

/// Why a job is not considered at all this cycle, or `None` when it may be scheduled.
pub(crate) fn job_blocker(session: &Session, job: crate::framework::JobId) -> Option<String> {
    let state = &session.state;
    let j = &state.jobs[job];
    if let Some(group) = &j.missing_group {
        return Some(format!(
            "its annotation scheduling.k8s.io/group-name names PodGroup {:?}, which does not exist in namespace {}",
            group, j.pod_group.key.namespace
        ));
    }
    if j.queue.is_none() {
        return Some(format!(
            "queue {:?} does not exist; create it or point the PodGroup at an existing queue",
            j.pod_group.queue
        ));
    }
    if let Some(invalid) = session.plugins.job_valid(state, job) {
        return Some(invalid.message);
    }
    None
}
