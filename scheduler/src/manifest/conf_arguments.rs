//! The arguments phalanx reads from `volcano-scheduler.conf`, checked when the file is
//! loaded: a value phalanx would not understand is an error naming the plugin (or
//! action), the argument and the value, never a silent fallback to the default (a
//! `schedule-timeout: 1.5h` read as "no timeout"). Durations use Go's syntax, as in
//! Volcano, and are stored in the spelling the scheduler reads (`1.5h` becomes `1h30m`).
//! Arguments phalanx does not read are left as they are.

use super::error::FieldError;
use super::go_duration::parse_go_duration;
use super::scheduler_conf::ConfError;
use crate::framework::conf::Arguments;
use crate::framework::timeout::{
    ARG_INQUEUE_TIMEOUT, ARG_SCHEDULE_TIMEOUT, ARG_TIMEOUT_ACTION, format_duration,
};

/// What an argument's text must be.
#[derive(Clone, Copy, Debug)]
enum ArgKind {
    /// A number from 0 to `MAX_WEIGHT`.
    Weight,
    /// A number from 1 to `MAX_FACTOR`.
    Factor,
    /// A Go duration >= 0, whole milliseconds or more.
    Duration,
    /// One of these words.
    OneOf(&'static [&'static str]),
}

/// Largest score weight. Scores are summed in `f64`: a weight of 1e300 drowns every other
/// term in rounding and, summed over plugins, reaches infinity (NaN orderings). Volcano's
/// own weights are single digits.
pub(crate) const MAX_WEIGHT: f64 = 1_000_000.0;
/// Largest overcommit factor (Volcano's default is 1.2; the ledger refuses above 100).
pub(crate) const MAX_FACTOR: f64 = 100.0;

/// The arguments of plugins and actions that phalanx reads, by owner; a key ending in
/// `.` matches every key with that prefix.
const READ_ARGUMENTS: &[(&str, &str, ArgKind)] = &[
    ("nodeorder", "leastrequested.weight", ArgKind::Weight),
    ("nodeorder", "mostrequested.weight", ArgKind::Weight),
    ("nodeorder", "balancedresource.weight", ArgKind::Weight),
    ("nodeorder", "nodeaffinity.weight", ArgKind::Weight),
    ("nodeorder", "tainttoleration.weight", ArgKind::Weight),
    ("binpack", "binpack.weight", ArgKind::Weight),
    ("binpack", "binpack.cpu", ArgKind::Weight),
    ("binpack", "binpack.memory", ArgKind::Weight),
    ("binpack", "binpack.resources.", ArgKind::Weight),
    ("overcommit", "overcommit-factor", ArgKind::Factor),
    ("enqueue", ARG_SCHEDULE_TIMEOUT, ArgKind::Duration),
    ("enqueue", ARG_INQUEUE_TIMEOUT, ArgKind::Duration),
    (
        "enqueue",
        ARG_TIMEOUT_ACTION,
        ArgKind::OneOf(&["retry", "stop"]),
    ),
];

fn kind_of(owner: &str, key: &str) -> Option<ArgKind> {
    READ_ARGUMENTS
        .iter()
        .find(|(o, k, _)| {
            *o == owner
                && (*k == key || (k.ends_with('.') && key.len() > k.len() && key.starts_with(k)))
        })
        .map(|(_, _, kind)| *kind)
}

/// Checks the arguments of plugin or action `owner` (`what` is "plugin" or "action") at
/// `path` (`tiers[0].plugins[2]`, `configurations[0]`), normalising durations in place.
pub(crate) fn check_arguments(
    path: &str,
    what: &str,
    owner: &str,
    args: &mut Arguments,
) -> Result<(), ConfError> {
    for (key, value) in args.iter_mut() {
        let Some(kind) = kind_of(owner, key) else {
            continue;
        };
        let checked = check_value(kind, value.trim()).map_err(|problem| {
            ConfError::Field(FieldError::new(
                format!("{path}.arguments.{key}"),
                format!("{value:?} for {what} `{owner}`: {problem}"),
            ))
        })?;
        if let Some(normal) = checked {
            *value = normal;
        }
    }
    Ok(())
}

/// `Ok(Some(text))` when the value is valid but stored in another spelling.
fn check_value(kind: ArgKind, text: &str) -> Result<Option<String>, String> {
    match kind {
        ArgKind::Weight | ArgKind::Factor => {
            let (min, max) = if matches!(kind, ArgKind::Factor) {
                (1.0, MAX_FACTOR)
            } else {
                (0.0, MAX_WEIGHT)
            };
            match text.parse::<f64>() {
                Ok(n) if (min..=max).contains(&n) => Ok(None),
                _ => Err(format!("is not a number from {min} to {max}")),
            }
        }
        ArgKind::Duration => duration_ms(text).map(|ms| Some(format_duration(ms))),
        ArgKind::OneOf(words) if words.contains(&text) => Ok(None),
        ArgKind::OneOf(words) => Err(format!("is not one of {}", words.join(", "))),
    }
}

/// A Go duration in whole milliseconds (phalanx's clock resolution).
fn duration_ms(text: &str) -> Result<u64, String> {
    let nanos = parse_go_duration(text)
        .map_err(|e| format!("is not a Go duration (e.g. 90s, 10m, 1.5h): it {e}"))?;
    let nanos = u64::try_from(nanos).map_err(|_| "is negative".to_string())?;
    let ms = nanos / 1_000_000;
    if nanos > 0 && ms == 0 {
        return Err("is shorter than 1ms, phalanx's clock resolution".into());
    }
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(key: &str, value: &str) -> Arguments {
        [(key.to_string(), value.to_string())].into()
    }

    #[test]
    fn a_go_duration_timeout_is_kept_in_the_spelling_the_scheduler_reads() {
        let mut args = one(ARG_SCHEDULE_TIMEOUT, "1.5h");
        check_arguments("configurations[0]", "action", "enqueue", &mut args).unwrap();
        assert_eq!(args[ARG_SCHEDULE_TIMEOUT], "1h30m");
        let mut args = one(ARG_INQUEUE_TIMEOUT, "300ms");
        check_arguments("configurations[0]", "action", "enqueue", &mut args).unwrap();
        assert_eq!(args[ARG_INQUEUE_TIMEOUT], "300ms");
    }

    #[test]
    fn garbage_arguments_name_the_owner_the_argument_and_the_value() {
        let cases = [
            ("enqueue", ARG_SCHEDULE_TIMEOUT, "soon"),
            ("enqueue", ARG_SCHEDULE_TIMEOUT, "-5m"),
            ("enqueue", ARG_SCHEDULE_TIMEOUT, "500us"),
            ("enqueue", ARG_TIMEOUT_ACTION, "panic"),
            ("nodeorder", "leastrequested.weight", "heavy"),
            ("binpack", "binpack.resources.nvidia.com/gpu", "NaN"),
            ("overcommit", "overcommit-factor", "0.5"),
        ];
        for (owner, key, value) in cases {
            let mut args = one(key, value);
            let err = check_arguments("tiers[0].plugins[1]", "plugin", owner, &mut args)
                .expect_err(value)
                .to_string();
            assert!(err.contains(&format!("arguments.{key}")), "{err}");
            assert!(err.contains(&format!("{value:?}")), "{err}");
            assert!(err.contains(&format!("`{owner}`")), "{err}");
        }
    }

    #[test]
    fn weights_and_factors_beyond_their_bounds_are_refused_naming_the_bound() {
        for (owner, key, value, bound) in [
            ("binpack", "binpack.weight", "1e300", "from 0 to 1000000"),
            (
                "nodeorder",
                "leastrequested.weight",
                "1000001",
                "from 0 to 1000000",
            ),
            (
                "binpack",
                "binpack.resources.nvidia.com/gpu",
                "inf",
                "from 0 to 1000000",
            ),
            ("overcommit", "overcommit-factor", "101", "from 1 to 100"),
            (
                "overcommit",
                "overcommit-factor",
                "4294967295",
                "from 1 to 100",
            ),
        ] {
            let mut args = one(key, value);
            let err = check_arguments("tiers[0].plugins[0]", "plugin", owner, &mut args)
                .expect_err(value)
                .to_string();
            assert!(err.contains(&format!("{value:?}")), "{err}");
            assert!(err.contains(bound), "{err}");
        }
        for (owner, key, value) in [
            ("binpack", "binpack.weight", "1000000"),
            ("overcommit", "overcommit-factor", "100"),
        ] {
            let mut args = one(key, value);
            check_arguments("tiers[0].plugins[0]", "plugin", owner, &mut args).expect(value);
        }
    }

    #[test]
    fn arguments_phalanx_does_not_read_are_left_alone() {
        let mut args = one("podaffinity.weight", "whatever");
        check_arguments("tiers[0].plugins[0]", "plugin", "nodeorder", &mut args).unwrap();
        assert_eq!(args["podaffinity.weight"], "whatever");
    }
}
