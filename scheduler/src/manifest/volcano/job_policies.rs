//! A Job's lifecycle policies (`spec.policies`, `spec.tasks[i].policies`), checked the way
//! Volcano's admission webhook checks them: phalanx does not act on them, but a Job that
//! Volcano refuses must not be accepted here either, or a scenario would run a Job the
//! real cluster never creates.
//!
//! The rules: a policy names events or an exit code, not both and not neither; each event
//! and action is one a user may write; no event appears in two policies of the same list; a
//! list holding `*` holds no other event; exit codes are not 0 and not repeated.

use std::collections::BTreeSet;

use super::job::LifecyclePolicy;
use crate::manifest::error::FieldError;

/// Events a user may name in a policy (Volcano keeps `OutOfSync`, `CommandIssued` and
/// `PodRunning` for itself).
pub const POLICY_EVENTS: &[&str] = &[
    "*",
    "PodFailed",
    "PodEvicted",
    "PodPending",
    "Unknown",
    "TaskCompleted",
    "TaskFailed",
    "JobUpdated",
];

/// Actions a user may name in a policy.
pub const POLICY_ACTIONS: &[&str] = &[
    "AbortJob",
    "RestartJob",
    "RestartTask",
    "RestartPod",
    "RestartPartition",
    "TerminateJob",
    "CompleteJob",
    "ResumeJob",
];

/// Checks one list of policies; `path` is where the list sits (`spec.policies`,
/// `spec.tasks[0].policies`).
pub fn validate_policies(policies: &[LifecyclePolicy], path: &str) -> Result<(), FieldError> {
    let mut seen_events: BTreeSet<String> = BTreeSet::new();
    let mut seen_codes: BTreeSet<i32> = BTreeSet::new();
    for (i, policy) in policies.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let events = policy_events(policy);
        match (events.is_empty(), policy.exit_code) {
            (false, Some(code)) => {
                return Err(FieldError::new(
                    format!("{at}.exitCode"),
                    format!(
                        "{code} is set together with an event; a policy names one or the other"
                    ),
                ));
            }
            (true, None) => {
                return Err(FieldError::new(
                    at,
                    "names neither an event nor an exitCode; a policy needs one of them",
                ));
            }
            (true, Some(code)) => check_exit_code(code, &at, &mut seen_codes)?,
            (false, None) => check_events(policy, &events, &at, &mut seen_events)?,
        }
    }
    if seen_events.contains("*") && seen_events.len() > 1 {
        let others: Vec<&str> = seen_events
            .iter()
            .map(String::as_str)
            .filter(|e| *e != "*")
            .collect();
        return Err(FieldError::new(
            path,
            format!(
                "event \"*\" covers every event, so no other may be listed; also listed: {}",
                others.join(", ")
            ),
        ));
    }
    Ok(())
}

/// `event` and `events` together, each once (Volcano drops repeats inside one policy).
fn policy_events(policy: &LifecyclePolicy) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let listed = policy.events.iter().flatten();
    for event in listed.chain(policy.event.iter()) {
        if !event.is_empty() && !out.contains(event) {
            out.push(event.clone());
        }
    }
    out
}

fn check_events(
    policy: &LifecyclePolicy,
    events: &[String],
    at: &str,
    seen: &mut BTreeSet<String>,
) -> Result<(), FieldError> {
    let action = policy.action.as_deref().unwrap_or("");
    if !POLICY_ACTIONS.contains(&action) {
        return Err(FieldError::not_one_of(
            format!("{at}.action"),
            action,
            "policy action",
            POLICY_ACTIONS,
        ));
    }
    for event in events {
        if !POLICY_EVENTS.contains(&event.as_str()) {
            return Err(FieldError::not_one_of(
                format!("{at}.event"),
                event,
                "policy event",
                POLICY_EVENTS,
            ));
        }
        if !seen.insert(event.clone()) {
            return Err(FieldError::new(
                format!("{at}.event"),
                format!("event {event:?} is already handled by an earlier policy of this list"),
            ));
        }
    }
    Ok(())
}

fn check_exit_code(code: i32, at: &str, seen: &mut BTreeSet<i32>) -> Result<(), FieldError> {
    if code == 0 {
        return Err(FieldError::new(
            format!("{at}.exitCode"),
            "0 is not a failure exit code",
        ));
    }
    if !seen.insert(code) {
        return Err(FieldError::new(
            format!("{at}.exitCode"),
            format!("exit code {code} is already handled by an earlier policy of this list"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(event: &str, action: &str) -> LifecyclePolicy {
        LifecyclePolicy {
            action: Some(action.into()),
            event: Some(event.into()),
            ..LifecyclePolicy::default()
        }
    }

    fn exit(code: i32) -> LifecyclePolicy {
        LifecyclePolicy {
            action: Some("RestartJob".into()),
            exit_code: Some(code),
            ..LifecyclePolicy::default()
        }
    }

    fn err(policies: &[LifecyclePolicy]) -> String {
        validate_policies(policies, "spec.policies")
            .expect_err("must be refused")
            .to_string()
    }

    #[test]
    fn distinct_events_and_exit_codes_are_accepted() {
        let ok = [
            on("PodFailed", "RestartJob"),
            on("PodEvicted", "RestartTask"),
            exit(3),
            exit(137),
        ];
        assert!(validate_policies(&ok, "spec.policies").is_ok());
    }

    #[test]
    fn an_event_handled_by_two_policies_is_refused_naming_the_second() {
        let e = err(&[on("PodFailed", "RestartJob"), on("PodFailed", "AbortJob")]);
        assert!(e.contains("spec.policies[1].event"), "{e}");
        assert!(e.contains("PodFailed"), "{e}");
    }

    #[test]
    fn an_event_in_the_events_list_counts_as_a_duplicate_too() {
        let mut both = on("PodEvicted", "RestartJob");
        both.events = Some(vec!["PodFailed".into()]);
        let e = err(&[on("PodFailed", "AbortJob"), both]);
        assert!(e.contains("spec.policies[1].event"), "{e}");
    }

    #[test]
    fn the_wildcard_event_excludes_every_other_event() {
        let e = err(&[on("*", "RestartJob"), on("PodFailed", "AbortJob")]);
        assert!(e.contains("\"*\"") && e.contains("PodFailed"), "{e}");
    }

    #[test]
    fn unknown_events_and_actions_and_bad_exit_codes_are_refused() {
        assert!(err(&[on("PodRunning", "RestartJob")]).contains("PodRunning"));
        assert!(err(&[on("PodFailed", "Reboot")]).contains("Reboot"));
        assert!(err(&[exit(0)]).contains("exitCode"));
        assert!(err(&[exit(2), exit(2)]).contains("spec.policies[1].exitCode"));
        let mut neither = exit(1);
        neither.exit_code = None;
        assert!(err(&[neither]).contains("spec.policies[0]"));
        let mut both = on("PodFailed", "RestartJob");
        both.exit_code = Some(1);
        assert!(err(&[both]).contains("exitCode"));
    }
}
