//! How long a gang may wait, and what happens then.
//!
//! Two clocks, both in simulated (or wall-clock) milliseconds:
//! - the *schedule timeout* runs from the PodGroup's creation (`metadata.creationTimestamp`;
//!   in the simulator the annotation `phalanx.dev/sim-created-at`, else time 0). Once it has
//!   passed and the gang has still not reached `minMember`, the PodGroup gets an
//!   `Unschedulable` condition with reason `Timeout` and a Warning Event. With
//!   `timeout-action: retry` (the default) phalanx keeps trying; with `stop` it stops
//!   trying and the PodGroup goes back to Pending, holding no admission.
//!   Per PodGroup: annotations `phalanx.dev/schedule-timeout` and `phalanx.dev/timeout-action`;
//!   cluster default: the `enqueue` action's arguments `schedule-timeout` and `timeout-action`.
//! - the *inqueue timeout* runs from the moment the PodGroup became Inqueue. A gang admitted
//!   that long ago and still not placed is sent back to Pending, releasing what admission
//!   reserved for it (Volcano issue #5006). Argument `inqueue-timeout` of `enqueue`; off
//!   unless set.

use crate::framework::conf::SchedulerConf;
use crate::manifest::convert::parse_sim_duration_ms;
use crate::model::{
    PodGroup, SCHEDULE_TIMEOUT_ANNOTATION, SIM_CREATED_AT_ANNOTATION, TIMEOUT_ACTION_ANNOTATION,
    TimeMs,
};

/// The `enqueue` arguments that set the defaults.
pub const ARG_SCHEDULE_TIMEOUT: &str = "schedule-timeout";
pub const ARG_TIMEOUT_ACTION: &str = "timeout-action";
pub const ARG_INQUEUE_TIMEOUT: &str = "inqueue-timeout";

/// What a gang does once its schedule timeout has passed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimeoutAction {
    /// Keep trying (the condition says it timed out).
    #[default]
    Retry,
    /// Stop trying; the PodGroup returns to Pending and holds nothing.
    Stop,
}

impl TimeoutAction {
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "retry" => Some(Self::Retry),
            "stop" => Some(Self::Stop),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Retry => "retry",
            Self::Stop => "stop",
        }
    }
}

/// The cluster-wide defaults, read once per session from the configuration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeoutDefaults {
    pub schedule_timeout_ms: Option<TimeMs>,
    pub action: TimeoutAction,
    pub inqueue_timeout_ms: Option<TimeMs>,
}

impl TimeoutDefaults {
    pub fn from_conf(conf: &SchedulerConf) -> Self {
        let Some(args) = conf.action_arguments.get("enqueue") else {
            return Self::default();
        };
        let duration = |key: &str| {
            args.get(key)
                .and_then(|t| parse_sim_duration_ms(t))
                .filter(|&ms| ms > 0)
        };
        Self {
            schedule_timeout_ms: duration(ARG_SCHEDULE_TIMEOUT),
            action: args
                .get(ARG_TIMEOUT_ACTION)
                .and_then(|t| TimeoutAction::parse(t))
                .unwrap_or_default(),
            inqueue_timeout_ms: duration(ARG_INQUEUE_TIMEOUT),
        }
    }
}

/// One PodGroup's schedule timeout, resolved from its annotations and the defaults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GangTimeout {
    pub created_ms: TimeMs,
    pub timeout_ms: Option<TimeMs>,
    pub action: TimeoutAction,
}

impl GangTimeout {
    /// Annotations win over the defaults; an unreadable annotation is ignored (the default
    /// applies) and `explain` shows the text.
    pub fn resolve(group: &PodGroup, defaults: &TimeoutDefaults) -> Self {
        let annotation = |key: &str| group.annotations.get(key).map(String::as_str);
        Self {
            created_ms: annotation(SIM_CREATED_AT_ANNOTATION)
                .and_then(parse_sim_duration_ms)
                .unwrap_or(0),
            timeout_ms: annotation(SCHEDULE_TIMEOUT_ANNOTATION)
                .and_then(parse_sim_duration_ms)
                .filter(|&ms| ms > 0)
                .or(defaults.schedule_timeout_ms),
            action: annotation(TIMEOUT_ACTION_ANNOTATION)
                .and_then(TimeoutAction::parse)
                .unwrap_or(defaults.action),
        }
    }

    pub fn deadline_ms(&self) -> Option<TimeMs> {
        self.timeout_ms.map(|t| self.created_ms.saturating_add(t))
    }

    pub fn expired(&self, now_ms: TimeMs) -> bool {
        self.deadline_ms().is_some_and(|d| now_ms >= d)
    }
}

/// `10m`, `1h30m`, `90s`, `1500ms`: the shortest exact spelling.
pub fn format_duration(ms: TimeMs) -> String {
    if ms == 0 {
        return "0s".into();
    }
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let mut s = ms / 1000;
    let mut out = String::new();
    for (unit, len) in [("h", 3600), ("m", 60), ("s", 1)] {
        if s >= len {
            out.push_str(&format!("{}{unit}", s / len));
            s %= len;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ObjectKey;

    #[test]
    fn annotation_overrides_the_configured_default() {
        let mut conf = SchedulerConf::volcano_default();
        conf.action_arguments.insert(
            "enqueue".into(),
            [("schedule-timeout".to_string(), "1h".to_string())].into(),
        );
        let defaults = TimeoutDefaults::from_conf(&conf);
        let mut group = PodGroup::new(ObjectKey::new("default", "g"), 1);
        assert_eq!(
            GangTimeout::resolve(&group, &defaults).timeout_ms,
            Some(3_600_000)
        );
        group
            .annotations
            .insert(SCHEDULE_TIMEOUT_ANNOTATION.into(), "10m".into());
        group
            .annotations
            .insert(TIMEOUT_ACTION_ANNOTATION.into(), "stop".into());
        let t = GangTimeout::resolve(&group, &defaults);
        assert_eq!(t.timeout_ms, Some(600_000));
        assert_eq!(t.action, TimeoutAction::Stop);
        assert!(!t.expired(599_999));
        assert!(t.expired(600_000));
    }

    #[test]
    fn durations_format_back_to_their_short_spelling() {
        assert_eq!(format_duration(600_000), "10m");
        assert_eq!(format_duration(5_400_000), "1h30m");
        assert_eq!(format_duration(1_500), "1500ms");
    }
}
