//! A Volcano Job's lifecycle as a pure function: (what the Job says, its status, the pods
//! that exist) -> (its next status, the pods to create and delete). The controller
//! (`super`) only reads the API server, calls [`step`] and writes what it returns, so a
//! new leader resumes from the API server's state alone.
//!
//! The phases and their moves are Volcano's (`pkg/controllers/job/state`), for the
//! actions phalanx supports:
//!
//! ```text
//! Pending ──(running+succeeded+failed >= minAvailable)──▶ Running
//! Running ──(every pod finished)──▶ Completed | Failed   (Volcano's rules, see `finished`)
//! Pending/Running ──RestartJob──▶ Restarting (retryCount+1, every pod deleted)
//! Restarting ──(retryCount >= maxRetry)──▶ Failed
//! Restarting ──(no pod of the Job left)──▶ Pending (the pods are created again)
//! Pending/Running ──AbortJob──▶ Aborting (unfinished pods deleted) ──(none left)──▶ Aborted
//! ```
//!
//! Events are read off the pods, not off a watch stream, so they survive a change of
//! leader: a pod in phase Failed is `PodFailed` (`PodEvicted` when its reason is
//! `Evicted`); a pod being deleted, or a pod missing while the Job is Running, is
//! `PodEvicted`. A missing pod while Pending is one not created yet: it is created. The
//! policy that applies is the pod's task's, else the Job's (`*` matches every event), as
//! in Volcano; no policy means the pod is recreated when missing and counted when failed.
//!
//! Differences from Volcano: Restarting waits until every old pod is gone (pod names are
//! deterministic, so a new pod cannot be created beside an old one of the same name),
//! where Volcano moves on once enough pods are not terminating.

use std::collections::BTreeMap;

/// Volcano's default `maxRetry` (its webhook fills in 3).
pub const DEFAULT_MAX_RETRY: i32 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Running,
    Restarting,
    Completed,
    Failed,
    Aborting,
    Aborted,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Restarting => "Restarting",
            Phase::Completed => "Completed",
            Phase::Failed => "Failed",
            Phase::Aborting => "Aborting",
            Phase::Aborted => "Aborted",
        }
    }

    /// A status phase as written (absent or empty: a new Job, Pending). A phase this
    /// controller does not drive (Completing, Terminating, ...) is `None`: the Job is
    /// left alone.
    pub fn parse(text: Option<&str>) -> Option<Phase> {
        Some(match text.unwrap_or("") {
            "" | "Pending" => Phase::Pending,
            "Running" => Phase::Running,
            "Restarting" => Phase::Restarting,
            "Completed" => Phase::Completed,
            "Failed" => Phase::Failed,
            "Aborting" => Phase::Aborting,
            "Aborted" => Phase::Aborted,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl PodPhase {
    pub fn parse(text: Option<&str>) -> PodPhase {
        match text.unwrap_or("Pending") {
            "Pending" => PodPhase::Pending,
            "Running" => PodPhase::Running,
            "Succeeded" => PodPhase::Succeeded,
            "Failed" => PodPhase::Failed,
            _ => PodPhase::Unknown,
        }
    }
}

/// One existing pod of the Job, as the state machine needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    pub task: String,
    pub phase: PodPhase,
    /// `deletionTimestamp` is set.
    pub terminating: bool,
    /// `status.reason` is `Evicted`.
    pub evicted: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyAction {
    RestartJob,
    AbortJob,
}

/// One lifecycle policy the controller acts on: events (`*` for all) -> action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub events: Vec<String>,
    pub action: PolicyAction,
}

impl Policy {
    fn matches(&self, event: &str) -> bool {
        self.events.iter().any(|e| e == event || e == "*")
    }
}

/// What the Job's spec says, after the webhook's defaulting.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobShape {
    /// Every pod the Job has, name -> task, in creation order.
    pub pods: Vec<(String, String)>,
    pub min_available: i32,
    pub min_success: Option<i32>,
    pub max_retry: i32,
    /// Task name -> the task's `minAvailable`, when the task sets one.
    pub task_min_available: BTreeMap<String, i32>,
    pub policies: Vec<Policy>,
    pub task_policies: BTreeMap<String, Vec<Policy>>,
}

impl JobShape {
    /// The policy for `event` on a pod of `task`: the task's first, then the Job's.
    fn action_for(&self, task: &str, event: &str) -> Option<PolicyAction> {
        let task_level = self.task_policies.get(task).into_iter().flatten();
        task_level
            .chain(self.policies.iter())
            .find(|p| p.matches(event))
            .map(|p| p.action)
    }
}

/// The part of the Job's status the state machine owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobState {
    pub phase: Phase,
    pub retry_count: i32,
}

/// The pod counts of `status` (terminating pods are counted there only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub pending: i32,
    pub running: i32,
    pub succeeded: i32,
    pub failed: i32,
    pub terminating: i32,
    pub unknown: i32,
}

/// What [`step`] decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub state: JobState,
    pub counts: Counts,
    pub create: Vec<String>,
    pub delete: Vec<String>,
    /// Why the phase changed through a policy (`PodFailed on tf-worker-3: RestartJob`).
    pub reason: Option<String>,
}

/// One step of the Job's lifecycle (see the module documentation).
pub fn step(shape: &JobShape, state: JobState, pods: &BTreeMap<String, PodView>) -> Decision {
    let counts = count(pods);
    let mut out = Decision {
        state,
        counts,
        create: Vec::new(),
        delete: Vec::new(),
        reason: None,
    };
    match state.phase {
        Phase::Completed | Phase::Failed | Phase::Aborted => {}
        Phase::Restarting => restarting(shape, pods, &mut out),
        Phase::Aborting => aborting(pods, &mut out),
        Phase::Pending | Phase::Running => {
            if let Some((action, why)) = first_event(shape, state.phase, pods) {
                apply(action, pods, &mut out);
                out.reason = Some(why);
            } else {
                progress(shape, pods, &mut out);
            }
        }
    }
    out
}

fn count(pods: &BTreeMap<String, PodView>) -> Counts {
    let mut c = Counts::default();
    for pod in pods.values() {
        let slot = match (pod.terminating, pod.phase) {
            (true, _) => &mut c.terminating,
            (false, PodPhase::Pending) => &mut c.pending,
            (false, PodPhase::Running) => &mut c.running,
            (false, PodPhase::Succeeded) => &mut c.succeeded,
            (false, PodPhase::Failed) => &mut c.failed,
            (false, PodPhase::Unknown) => &mut c.unknown,
        };
        *slot += 1;
    }
    c
}

/// The first pod event (in pod-name order) that a policy turns into an action.
fn first_event(
    shape: &JobShape,
    phase: Phase,
    pods: &BTreeMap<String, PodView>,
) -> Option<(PolicyAction, String)> {
    for (name, task) in &shape.pods {
        let event = match pods.get(name) {
            None if phase == Phase::Running => "PodEvicted",
            None => continue,
            Some(p) if p.terminating && !matches!(p.phase, PodPhase::Succeeded) => "PodEvicted",
            Some(p) if p.phase == PodPhase::Failed && p.evicted => "PodEvicted",
            Some(p) if p.phase == PodPhase::Failed => "PodFailed",
            Some(_) => continue,
        };
        if let Some(action) = shape.action_for(task, event) {
            return Some((action, format!("{event} on pod {name}: {action:?}")));
        }
    }
    None
}

fn apply(action: PolicyAction, pods: &BTreeMap<String, PodView>, out: &mut Decision) {
    match action {
        PolicyAction::RestartJob => {
            out.state.phase = Phase::Restarting;
            out.state.retry_count += 1;
            out.delete = live(pods, |_| true);
        }
        PolicyAction::AbortJob => {
            out.state.phase = Phase::Aborting;
            out.delete = live(pods, unfinished);
        }
    }
}

/// Pods not yet being deleted that `keep` selects, by name.
fn live(pods: &BTreeMap<String, PodView>, keep: impl Fn(&PodView) -> bool) -> Vec<String> {
    pods.iter()
        .filter(|(_, p)| !p.terminating && keep(p))
        .map(|(n, _)| n.clone())
        .collect()
}

fn unfinished(pod: &PodView) -> bool {
    !matches!(pod.phase, PodPhase::Succeeded | PodPhase::Failed)
}

fn restarting(shape: &JobShape, pods: &BTreeMap<String, PodView>, out: &mut Decision) {
    if out.state.retry_count >= shape.max_retry {
        out.state.phase = Phase::Failed;
        out.reason = Some(format!(
            "retried {} times, maxRetry is {}",
            out.state.retry_count, shape.max_retry
        ));
        return;
    }
    out.delete = live(pods, |_| true);
    if pods.is_empty() {
        out.state.phase = Phase::Pending;
        out.create = shape.pods.iter().map(|(n, _)| n.clone()).collect();
    }
}

fn aborting(pods: &BTreeMap<String, PodView>, out: &mut Decision) {
    out.delete = live(pods, unfinished);
    if !pods.values().any(|p| p.terminating || unfinished(p)) {
        out.state.phase = Phase::Aborted;
    }
}

/// No policy fired: create missing pods, then move Pending -> Running -> finished.
fn progress(shape: &JobShape, pods: &BTreeMap<String, PodView>, out: &mut Decision) {
    out.create = shape
        .pods
        .iter()
        .filter(|(n, _)| !pods.contains_key(n))
        .map(|(n, _)| n.clone())
        .collect();
    let c = out.counts;
    if out.state.phase == Phase::Pending
        && c.running + c.succeeded + c.failed >= shape.min_available
    {
        out.state.phase = Phase::Running;
    }
    if out.state.phase == Phase::Running
        && let Some(done) = finished(shape, pods, c)
    {
        out.state.phase = done;
    }
}

/// Volcano's running-state rules: `minSuccess` reached completes at once; once every pod
/// has finished, a task below its `minAvailable` successes fails the Job (when the Job's
/// `minAvailable` covers the tasks' minimums), then `minSuccess`, then the Job's
/// `minAvailable` decide.
fn finished(shape: &JobShape, pods: &BTreeMap<String, PodView>, c: Counts) -> Option<Phase> {
    if shape.pods.is_empty() {
        return None;
    }
    if shape.min_success.is_some_and(|m| c.succeeded >= m) {
        return Some(Phase::Completed);
    }
    let total = shape.pods.len() as i32;
    if c.succeeded + c.failed != total {
        return None;
    }
    let task_min_total: i32 = shape.task_min_available.values().sum();
    if shape.min_available >= task_min_total {
        for (task, min) in &shape.task_min_available {
            let ok = pods
                .values()
                .filter(|p| &p.task == task && p.phase == PodPhase::Succeeded)
                .count() as i32;
            if ok < *min {
                return Some(Phase::Failed);
            }
        }
    }
    Some(match shape.min_success {
        Some(m) if c.succeeded < m => Phase::Failed,
        _ if c.succeeded >= shape.min_available => Phase::Completed,
        _ => Phase::Failed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tf-mnist: ps-0 and worker-0..2, minAvailable 4, RestartJob on PodFailed/PodEvicted.
    fn shape() -> JobShape {
        let mut pods = vec![("tf-ps-0".to_string(), "ps".to_string())];
        pods.extend((0..3).map(|i| (format!("tf-worker-{i}"), "worker".to_string())));
        JobShape {
            pods,
            min_available: 4,
            max_retry: DEFAULT_MAX_RETRY,
            policies: vec![Policy {
                events: vec!["PodFailed".into(), "PodEvicted".into()],
                action: PolicyAction::RestartJob,
            }],
            ..JobShape::default()
        }
    }

    fn at(phase: Phase) -> JobState {
        JobState {
            phase,
            retry_count: 0,
        }
    }

    fn pod(task: &str, phase: PodPhase) -> PodView {
        PodView {
            task: task.into(),
            phase,
            terminating: false,
            evicted: false,
        }
    }

    fn all(phase: PodPhase) -> BTreeMap<String, PodView> {
        shape()
            .pods
            .into_iter()
            .map(|(n, t)| (n, pod(&t, phase)))
            .collect()
    }

    #[test]
    fn a_new_job_creates_every_pod_and_stays_pending() {
        let d = step(&shape(), at(Phase::Pending), &BTreeMap::new());
        assert_eq!(d.state.phase, Phase::Pending);
        assert_eq!(d.create.len(), 4);
        assert!(d.delete.is_empty());
    }

    #[test]
    fn a_job_is_running_once_min_available_pods_run_and_only_missing_pods_are_created() {
        let mut pods = all(PodPhase::Running);
        pods.remove("tf-worker-2");
        let d = step(&shape(), at(Phase::Pending), &pods);
        assert_eq!(
            (d.state.phase, d.create.clone()),
            (Phase::Pending, vec!["tf-worker-2".to_string()])
        );
        let d = step(&shape(), at(Phase::Pending), &all(PodPhase::Running));
        assert_eq!(d.state.phase, Phase::Running);
        assert_eq!(d.counts.running, 4);
        assert!(d.create.is_empty());
    }

    #[test]
    fn a_job_whose_pods_all_succeed_completes_and_one_failure_below_min_available_fails() {
        let d = step(&shape(), at(Phase::Running), &all(PodPhase::Succeeded));
        assert_eq!((d.state.phase, d.counts.succeeded), (Phase::Completed, 4));
        let mut no_policy = shape();
        no_policy.policies.clear();
        let mut pods = all(PodPhase::Succeeded);
        pods.insert("tf-ps-0".into(), pod("ps", PodPhase::Failed));
        let d = step(&no_policy, at(Phase::Running), &pods);
        assert_eq!((d.state.phase, d.counts.failed), (Phase::Failed, 1));
    }

    #[test]
    fn a_failed_pod_under_restart_job_deletes_every_pod_and_counts_a_retry() {
        let mut pods = all(PodPhase::Running);
        pods.insert("tf-worker-1".into(), pod("worker", PodPhase::Failed));
        let d = step(&shape(), at(Phase::Running), &pods);
        assert_eq!(
            d.state,
            JobState {
                phase: Phase::Restarting,
                retry_count: 1
            }
        );
        assert_eq!(d.delete.len(), 4);
        assert!(
            d.reason
                .unwrap_or_default()
                .contains("PodFailed on pod tf-worker-1")
        );
    }

    #[test]
    fn a_pod_missing_while_running_is_evicted_and_restarts_the_job() {
        let mut pods = all(PodPhase::Running);
        pods.remove("tf-ps-0");
        let d = step(&shape(), at(Phase::Running), &pods);
        assert_eq!(d.state.phase, Phase::Restarting);
        assert!(
            d.reason
                .unwrap_or_default()
                .contains("PodEvicted on pod tf-ps-0")
        );
    }

    #[test]
    fn restarting_waits_for_every_old_pod_then_recreates_them_all() {
        let state = JobState {
            phase: Phase::Restarting,
            retry_count: 1,
        };
        let mut pods = BTreeMap::new();
        pods.insert(
            "tf-ps-0".to_string(),
            PodView {
                terminating: true,
                ..pod("ps", PodPhase::Running)
            },
        );
        let d = step(&shape(), state, &pods);
        assert_eq!(
            (d.state.phase, d.create.len(), d.delete.len()),
            (Phase::Restarting, 0, 0)
        );
        let d = step(&shape(), state, &BTreeMap::new());
        assert_eq!((d.state.phase, d.create.len()), (Phase::Pending, 4));
    }

    #[test]
    fn max_retry_bounds_the_restarts() {
        let state = JobState {
            phase: Phase::Restarting,
            retry_count: DEFAULT_MAX_RETRY,
        };
        let d = step(&shape(), state, &BTreeMap::new());
        assert_eq!(d.state.phase, Phase::Failed);
        assert!(d.create.is_empty());
    }

    #[test]
    fn a_task_policy_comes_before_the_job_policy_and_abort_keeps_finished_pods() {
        let mut s = shape();
        s.task_policies.insert(
            "worker".into(),
            vec![Policy {
                events: vec!["*".into()],
                action: PolicyAction::AbortJob,
            }],
        );
        let mut pods = all(PodPhase::Running);
        pods.insert("tf-worker-0".into(), pod("worker", PodPhase::Failed));
        pods.insert("tf-worker-1".into(), pod("worker", PodPhase::Succeeded));
        let d = step(&s, at(Phase::Running), &pods);
        assert_eq!(d.state.phase, Phase::Aborting);
        assert_eq!(
            d.delete,
            vec!["tf-ps-0".to_string(), "tf-worker-2".to_string()]
        );
        pods.retain(|_, p| !unfinished(p));
        let d = step(&s, at(Phase::Aborting), &pods);
        assert_eq!((d.state.phase, d.delete.len()), (Phase::Aborted, 0));
    }

    #[test]
    fn an_evicted_pod_without_a_policy_is_recreated_and_the_job_keeps_running() {
        let mut s = shape();
        s.policies.clear();
        let mut pods = all(PodPhase::Running);
        pods.remove("tf-worker-0");
        let d = step(&s, at(Phase::Running), &pods);
        assert_eq!(d.state.phase, Phase::Running);
        assert_eq!(d.create, vec!["tf-worker-0".to_string()]);
    }

    #[test]
    fn finished_jobs_are_left_alone() {
        for phase in [Phase::Completed, Phase::Failed, Phase::Aborted] {
            let d = step(&shape(), at(phase), &BTreeMap::new());
            assert_eq!((d.state.phase, d.create.len()), (phase, 0));
        }
    }
}
