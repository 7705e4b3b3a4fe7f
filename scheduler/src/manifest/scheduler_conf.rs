//! Volcano's `volcano-scheduler.conf` (actions + plugin tiers) into a [`SchedulerConf`].
//!
//! Real configurations name things phalanx lacks: Volcano actions it does not implement
//! (`preempt`), Volcano plugins it does not implement (`cdp`), and mistakes Volcano itself
//! would trip over (`reclaim` listed as a plugin; it is an action). Each such name gets ONE
//! warning that names it and lists what phalanx knows, and its entry is skipped; with
//! `strict` the first one is an error instead. Anything that is not a valid configuration
//! at all (bad YAML, `enableJobOrder: maybe`, `tiers: 5`, no actions) is always an error
//! with the field path and position.
//!
//! Flags use Volcano's exact YAML spellings (`pkg/scheduler/conf/scheduler_conf.go`),
//! including the older `enableNamespaceOrder` / `EnabledClusterOrder` spellings. Argument
//! values may be YAML numbers, booleans or strings and are kept as text, numbers and booleans
//! in their canonical spelling (`yes` is `true`, `1e3` is `1000.0`), nested maps and lists
//! as compact JSON.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use thiserror::Error;

use super::conf_arguments::check_arguments;
use super::document::{Chunk, read_chunk};
use super::error::{FieldError, Problem};
use crate::framework::conf::{
    Arguments, DEFAULT_CONF, HookFlags, KNOWN_ACTIONS, KNOWN_PLUGINS, PluginOption, SchedulerConf,
    Tier,
};

/// Actions Volcano has; used to tell "not implemented by phalanx" from "not an action".
const VOLCANO_ACTIONS: &[&str] = &[
    "enqueue", "allocate", "backfill", "preempt", "reclaim", "shuffle",
];

/// Plugins Volcano has (phalanx implements the subset in [`KNOWN_PLUGINS`]).
const VOLCANO_PLUGINS: &[&str] = &[
    "priority",
    "gang",
    "conformance",
    "drf",
    "predicates",
    "proportion",
    "nodeorder",
    "binpack",
    "overcommit",
    "sla",
    "tdm",
    "numaaware",
    "task-topology",
    "cdp",
    "rescheduling",
    "usage",
    "capacity",
    "deviceshare",
    "extender",
    "pdb",
    "resource-strategy-fit",
    "network-topology-aware",
    "nodegroup",
    "resourcequota",
];

/// Why a configuration was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ConfError {
    #[error("YAML syntax error at line {line}, column {column}: {message}")]
    Syntax {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{0}")]
    Field(FieldError),
    #[error("`actions` names no action phalanx implements; use some of {}", KNOWN_ACTIONS.join(", "))]
    NoActions,
    /// Strict mode: what would have been a warning.
    #[error("{0}")]
    Unknown(String),
}

/// Parses a `volcano-scheduler.conf`, returning the configuration and its warnings.
pub fn parse_scheduler_conf(
    text: &str,
    strict: bool,
) -> Result<(SchedulerConf, Vec<String>), ConfError> {
    let raw: Option<RawConf> = read_chunk(Chunk {
        text,
        first_line: 1,
    })
    .map(|(raw, _)| raw)
    .map_err(|p| match p {
        Problem::Syntax {
            line,
            column,
            message,
        } => ConfError::Syntax {
            line,
            column,
            message,
        },
        Problem::Field(f) => ConfError::Field(f),
        other => ConfError::Field(FieldError::new("", other.to_string())),
    })?;
    let raw = raw.unwrap_or_default();
    let mut notes = Notes {
        strict,
        warnings: Vec::new(),
        said: BTreeSet::new(),
    };
    for key in &raw.unknown_keys {
        notes.say(
            key,
            format!("unknown key `{key}` in volcano-scheduler.conf"),
            IGNORED,
        )?;
    }
    let actions = parse_actions(raw.actions.as_deref(), &mut notes)?;
    let mut tiers = Vec::new();
    for (t, raw_tier) in raw.tiers.into_iter().enumerate() {
        tiers.push(parse_tier(t, raw_tier, &mut notes)?);
    }
    let mut action_arguments = BTreeMap::new();
    for (i, c) in raw.configurations.into_iter().enumerate() {
        let name = c.name.trim().to_string();
        if !KNOWN_ACTIONS.contains(&name.as_str()) {
            let what = format!(
                "configurations[{i}]: arguments for action `{name}`, which phalanx does not run"
            );
            notes.say(&format!("configuration:{name}"), what, IGNORED)?;
            continue;
        }
        let mut arguments: Arguments = c.arguments.into_iter().map(|(k, v)| (k, v.0)).collect();
        check_arguments(
            &format!("configurations[{i}]"),
            "action",
            &name,
            &mut arguments,
        )?;
        action_arguments
            .entry(name)
            .or_insert_with(Arguments::new)
            .extend(arguments);
    }
    check_gang_is_on(&tiers, &mut notes)?;
    check_one_queue_policy(&tiers)?;
    Ok((
        SchedulerConf {
            actions,
            tiers,
            action_arguments,
        },
        notes.warnings,
    ))
}

/// Volcano's default configuration, as phalanx runs it when a workload carries none.
pub fn default_scheduler_conf() -> SchedulerConf {
    let (conf, _) = parse_scheduler_conf(DEFAULT_CONF, true)
        .expect("the built-in default configuration is valid");
    conf
}

/// Warnings, one per subject, or an error in strict mode.
struct Notes {
    strict: bool,
    warnings: Vec<String>,
    said: BTreeSet<String>,
}

impl Notes {
    /// Says `what` once per `subject`, followed by its `consequence`; in strict mode it is
    /// an error instead.
    fn say(&mut self, subject: &str, what: String, consequence: &str) -> Result<(), ConfError> {
        if self.strict {
            return Err(ConfError::Unknown(format!(
                "{what}; strict configuration checking refuses it"
            )));
        }
        if self.said.insert(subject.to_string()) {
            self.warnings.push(format!("{what}; {consequence}"));
        }
        Ok(())
    }
}

/// What happens to an entry phalanx cannot use.
const SKIPPED: &str = "it is skipped";
const IGNORED: &str = "it is ignored";

fn parse_actions(text: Option<&str>, notes: &mut Notes) -> Result<Vec<String>, ConfError> {
    let text = text.unwrap_or("");
    if text.trim().is_empty() {
        return Err(ConfError::Field(FieldError::new(
            "actions",
            format!(
                "is empty; list the actions to run, e.g. \"{}\"",
                KNOWN_ACTIONS.join(", ")
            ),
        )));
    }
    let mut actions = Vec::new();
    for name in text.split(',').map(str::trim) {
        if name.is_empty() {
            notes.say(
                "action:",
                "`actions` has an empty entry (a stray comma)".to_string(),
                IGNORED,
            )?;
        } else if KNOWN_ACTIONS.contains(&name) {
            actions.push(name.to_string());
        } else if VOLCANO_ACTIONS.contains(&name) {
            let msg = format!(
                "action `{name}` is a Volcano action phalanx does not implement (phalanx runs {})",
                KNOWN_ACTIONS.join(", ")
            );
            notes.say(&format!("action:{name}"), msg, SKIPPED)?;
        } else {
            let msg = format!(
                "`{name}` in `actions` is not an action (phalanx runs {})",
                KNOWN_ACTIONS.join(", ")
            );
            notes.say(&format!("action:{name}"), msg, SKIPPED)?;
        }
    }
    if actions.is_empty() {
        return Err(ConfError::NoActions);
    }
    Ok(actions)
}

fn parse_tier(t: usize, raw: RawTier, notes: &mut Notes) -> Result<Tier, ConfError> {
    let mut plugins = Vec::new();
    for (p, raw_plugin) in raw.plugins.into_iter().enumerate() {
        let path = format!("tiers[{t}].plugins[{p}]");
        let name = raw_plugin.name.trim().to_string();
        if name.is_empty() {
            return Err(ConfError::Field(FieldError::missing(format!(
                "{path}.name"
            ))));
        }
        for key in &raw_plugin.unknown_keys {
            notes.say(
                &format!("{path}.{key}"),
                format!("{path}: unknown key `{key}` of plugin `{name}`"),
                IGNORED,
            )?;
        }
        for flag in &raw_plugin.unimplemented_flags {
            let msg = format!(
                "{path}: `{flag}` of plugin `{name}` switches a hook phalanx does not have"
            );
            notes.say(&format!("{path}.{flag}"), msg, IGNORED)?;
        }
        if KNOWN_PLUGINS.contains(&name.as_str()) {
            let mut arguments = raw_plugin.arguments;
            check_arguments(&path, "plugin", &name, &mut arguments)?;
            plugins.push(PluginOption {
                name,
                hooks: raw_plugin.hooks,
                arguments,
            });
        } else {
            notes.say(
                &format!("plugin:{name}"),
                unknown_plugin_message(&name),
                SKIPPED,
            )?;
        }
    }
    Ok(Tier { plugins })
}

/// `capacity` and `proportion` are two policies for the same decisions (queue order,
/// allocatable, reclaim); Volcano documents that they cannot be used together (its code
/// would run both and apply the stricter answer of each hook), so naming both is an error
/// at the second one.
fn check_one_queue_policy(tiers: &[Tier]) -> Result<(), ConfError> {
    let mut first: Option<(usize, usize, &str)> = None;
    for (t, tier) in tiers.iter().enumerate() {
        for (p, plugin) in tier.plugins.iter().enumerate() {
            let name = plugin.name.as_str();
            if name != "capacity" && name != "proportion" {
                continue;
            }
            match first {
                Some((ft, fp, other)) if other != name => {
                    return Err(ConfError::Field(FieldError::new(
                        format!("tiers[{t}].plugins[{p}].name"),
                        format!(
                            "{name:?}: `capacity` and `proportion` cannot both be enabled (tiers[{ft}].plugins[{fp}] is `{other}`); keep one"
                        ),
                    )));
                }
                Some(_) => {}
                None => first = Some((t, p, name)),
            }
        }
    }
    Ok(())
}

/// Without the `gang` plugin nothing holds a PodGroup's pods together: said loudly (an
/// error under `--strict-config`), since the configuration still loads and runs.
fn check_gang_is_on(tiers: &[Tier], notes: &mut Notes) -> Result<(), ConfError> {
    if tiers
        .iter()
        .flat_map(|t| &t.plugins)
        .any(|p| p.name == "gang")
    {
        return Ok(());
    }
    let what = if tiers.iter().all(|t| t.plugins.is_empty()) {
        "`tiers` enables no plugin at all, so not `gang`"
    } else {
        "no tier enables the `gang` plugin"
    };
    notes.say(
        "plugin-missing:gang",
        format!("GANG SCHEDULING IS OFF: {what}"),
        "a PodGroup's pods are bound one by one as each fits, so gangs start partially, hold \
         what they got and can deadlock the cluster; add `- name: gang` to the first tier",
    )
}

fn unknown_plugin_message(name: &str) -> String {
    let known = KNOWN_PLUGINS.join(", ");
    if VOLCANO_ACTIONS.contains(&name) {
        format!(
            "`{name}` is listed as a plugin, but Volcano knows `{name}` only as an action: it belongs in \
             `actions:` (phalanx runs actions {})",
            KNOWN_ACTIONS.join(", ")
        )
    } else if VOLCANO_PLUGINS.contains(&name) {
        format!(
            "plugin `{name}` is a Volcano plugin phalanx does not implement (phalanx has {known})"
        )
    } else {
        format!("`{name}` is not a known plugin (phalanx has {known})")
    }
}

/// The whole file, as Volcano's `SchedulerConfiguration`.
#[derive(Debug, Default)]
struct RawConf {
    actions: Option<String>,
    tiers: Vec<RawTier>,
    configurations: Vec<RawConfiguration>,
    unknown_keys: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
struct RawTier {
    #[serde(default)]
    plugins: Vec<RawPlugin>,
}

#[derive(Debug, Default, Deserialize)]
struct RawConfiguration {
    #[serde(default)]
    name: String,
    #[serde(default)]
    arguments: BTreeMap<String, ArgText>,
}

#[derive(Debug, Default)]
struct RawPlugin {
    name: String,
    hooks: HookFlags,
    arguments: Arguments,
    unimplemented_flags: Vec<String>,
    unknown_keys: Vec<String>,
}

impl<'de> Deserialize<'de> for RawConf {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawConf;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping with `actions` and `tiers`")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawConf, A::Error> {
                let mut out = RawConf::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "actions" => out.actions = map.next_value::<Option<String>>()?,
                        "tiers" => {
                            out.tiers = map
                                .next_value::<Option<Vec<RawTier>>>()?
                                .unwrap_or_default()
                        }
                        "configurations" => {
                            out.configurations = map
                                .next_value::<Option<Vec<RawConfiguration>>>()?
                                .unwrap_or_default()
                        }
                        "metrics" => {
                            map.next_value::<Option<BTreeMap<String, ArgText>>>()?;
                        }
                        _ => {
                            map.next_value::<de::IgnoredAny>()?;
                            out.unknown_keys.push(key);
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

/// Where each Volcano flag lands in [`HookFlags`]; `None` for flags phalanx has no hook for.
type FlagSlot = Option<fn(&mut HookFlags) -> &mut Option<bool>>;

const FLAGS: &[(&str, FlagSlot)] = &[
    ("enableJobOrder", Some(|h| &mut h.job_order)),
    ("enableNamespaceOrder", Some(|h| &mut h.namespace_order)),
    ("enableHierarchy", Some(|h| &mut h.hierarchy)),
    ("enableJobReady", Some(|h| &mut h.job_ready)),
    ("enableJobPipelined", Some(|h| &mut h.job_pipelined)),
    ("enableTaskOrder", Some(|h| &mut h.task_order)),
    ("enablePreemptable", Some(|h| &mut h.preemptable)),
    ("enableReclaimable", Some(|h| &mut h.reclaimable)),
    ("enablePreemptive", Some(|h| &mut h.preemptive)),
    ("enableQueueOrder", Some(|h| &mut h.queue_order)),
    ("EnabledClusterOrder", Some(|h| &mut h.cluster_order)),
    ("enabledClusterOrder", Some(|h| &mut h.cluster_order)),
    ("enablePredicate", Some(|h| &mut h.predicate)),
    ("enableBestNode", Some(|h| &mut h.best_node)),
    ("enableNodeOrder", Some(|h| &mut h.node_order)),
    ("enableTargetJob", Some(|h| &mut h.target_job)),
    ("enableReservedNodes", Some(|h| &mut h.reserved_nodes)),
    ("enableJobEnqueued", Some(|h| &mut h.job_enqueued)),
    ("enabledVictim", Some(|h| &mut h.victim)),
    ("enableJobStarving", Some(|h| &mut h.job_starving)),
    ("enabledOverused", Some(|h| &mut h.overused)),
    ("enabledAllocatable", Some(|h| &mut h.allocatable)),
    ("enabledHyperNodeOrder", None),
    ("enabledSubJobReady", None),
    ("enabledSubJobPipelined", None),
    ("enabledSubJobOrder", None),
    ("enabledHyperNodeGradient", None),
];

impl<'de> Deserialize<'de> for RawPlugin {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawPlugin;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a plugin entry (a mapping with `name`)")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawPlugin, A::Error> {
                let mut out = RawPlugin::default();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "name" {
                        out.name = map.next_value()?;
                    } else if key == "arguments" {
                        let args: Option<BTreeMap<String, ArgText>> = map.next_value()?;
                        out.arguments = args
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(k, v)| (k, v.0))
                            .collect();
                    } else if let Some((_, slot)) = FLAGS.iter().find(|(name, _)| *name == key) {
                        let value: Option<bool> = map.next_value()?;
                        match slot {
                            Some(slot) => *slot(&mut out.hooks) = value,
                            None => out.unimplemented_flags.push(key),
                        }
                    } else {
                        map.next_value::<de::IgnoredAny>()?;
                        out.unknown_keys.push(key);
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

/// An argument value kept as text (Volcano passes arguments around as strings).
#[derive(Debug, Default)]
struct ArgText(String);

impl<'de> Deserialize<'de> for ArgText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        Ok(ArgText(match value {
            serde_json::Value::Null => String::new(),
            serde_json::Value::String(s) => s,
            serde_json::Value::Bool(b) => b.to_string(),
            serde_json::Value::Number(n) => n.to_string(),
            other => other.to_string(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = "actions: \"enqueue, allocate, backfill\"\ntiers:\n- plugins:\n  - name: priority\n  - name: gang\n  - name: conformance\n- plugins:\n  - name: drf\n  - name: predicates\n  - name: proportion\n  - name: nodeorder\n  - name: binpack\n- plugins:\n  - name: overcommit\n  - name: reclaim\n  - name: cdp\n";

    #[test]
    fn default_configuration_is_volcanos_default_with_preempt_and_reclaim_on() {
        let conf = default_scheduler_conf();
        assert_eq!(conf, SchedulerConf::volcano_default());
        assert_eq!(
            conf.actions,
            vec!["enqueue", "allocate", "preempt", "reclaim", "backfill"]
        );
        let names: Vec<Vec<&str>> = conf
            .tiers
            .iter()
            .map(|t| t.plugins.iter().map(|p| p.name.as_str()).collect())
            .collect();
        assert_eq!(
            names,
            vec![
                vec!["priority", "gang", "conformance"],
                vec!["overcommit", "drf", "predicates", "proportion", "nodeorder"]
            ]
        );
    }

    #[test]
    fn reclaim_and_cdp_listed_as_plugins_give_one_warning_each_and_are_skipped() {
        let (conf, warnings) = parse_scheduler_conf(SEED, false).unwrap();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].contains("`reclaim`") && warnings[0].contains("action"),
            "{}",
            warnings[0]
        );
        assert!(warnings[0].contains("actions:"), "{}", warnings[0]);
        assert!(
            warnings[1].contains("`cdp`") && warnings[1].contains("binpack"),
            "{}",
            warnings[1]
        );
        let third: Vec<&str> = conf.tiers[2]
            .plugins
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(third, vec!["overcommit"]);
    }

    #[test]
    fn capacity_and_proportion_together_are_refused_naming_the_second_entry() {
        let text = "actions: \"enqueue, allocate, reclaim\"\ntiers:\n- plugins:\n  - name: gang\n  - name: proportion\n- plugins:\n  - name: capacity\n";
        let err = parse_scheduler_conf(text, false).unwrap_err().to_string();
        assert!(err.contains("tiers[1].plugins[0].name"), "{err}");
        assert!(
            err.contains("tiers[0].plugins[1]") && err.contains("proportion"),
            "{err}"
        );
        let alone = text.replace("  - name: proportion\n", "");
        let (conf, _) = parse_scheduler_conf(&alone, false).expect("capacity alone is fine");
        assert_eq!(conf.tiers[1].plugins[0].name, "capacity");
    }

    #[test]
    fn strict_mode_refuses_unknown_plugins() {
        let err = parse_scheduler_conf(SEED, true).unwrap_err();
        assert!(err.to_string().contains("`reclaim`"), "{err}");
    }

    #[test]
    fn flags_and_arguments_use_volcanos_spellings_and_keep_text() {
        let text = "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n  - name: binpack\n    enableJobOrder: false\n    enabledOverused: true\n    EnabledClusterOrder: true\n    arguments:\n      binpack.weight: 10\n      binpack.cpu: 0.5\n      binpack.resources: nvidia.com/gpu\n      flag: true\n";
        let (conf, warnings) = parse_scheduler_conf(text, true).unwrap();
        assert!(warnings.is_empty());
        let p = &conf.tiers[0].plugins[1];
        assert_eq!(p.hooks.job_order, Some(false));
        assert_eq!(p.hooks.overused, Some(true));
        assert_eq!(p.hooks.cluster_order, Some(true));
        assert_eq!(p.hooks.node_order, None);
        assert_eq!(p.arguments["binpack.weight"], "10");
        assert_eq!(p.arguments["binpack.cpu"], "0.5");
        assert_eq!(p.arguments["binpack.resources"], "nvidia.com/gpu");
        assert_eq!(p.arguments["flag"], "true");
    }

    #[test]
    fn a_flag_that_is_not_a_boolean_is_an_error_with_its_path_and_line() {
        let text =
            "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n    enableJobOrder: maybe\n";
        let err = parse_scheduler_conf(text, false).unwrap_err().to_string();
        assert!(err.contains("tiers[0].plugins[0].enableJobOrder"), "{err}");
        assert!(err.contains("line 5"), "{err}");
    }

    #[test]
    fn tiers_that_are_not_a_list_are_an_error() {
        let err = parse_scheduler_conf("actions: allocate\ntiers: 5\n", false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("tiers"), "{err}");
    }

    #[test]
    fn empty_actions_are_an_error() {
        for text in ["tiers: []\n", "actions: \"\"\n", "actions: \" , \"\n"] {
            assert!(parse_scheduler_conf(text, false).is_err(), "{text}");
        }
    }

    #[test]
    fn unimplemented_volcano_actions_are_skipped_with_a_warning() {
        let (conf, warnings) = parse_scheduler_conf(
            "actions: \"enqueue, allocate, preempt, shuffle, reclaim, backfill\"\ntiers:\n- plugins:\n  - name: gang\n",
            false,
        )
        .unwrap();
        assert_eq!(
            conf.actions,
            vec!["enqueue", "allocate", "preempt", "reclaim", "backfill"]
        );
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("`shuffle`"));
    }

    #[test]
    fn invalid_yaml_is_an_error_with_line_and_column() {
        let err = parse_scheduler_conf("actions: [allocate\ntiers:\n", false).unwrap_err();
        assert!(
            matches!(err, ConfError::Syntax { .. } | ConfError::Field(_)),
            "{err:?}"
        );
        assert!(err.to_string().contains("line"), "{err}");
    }

    #[test]
    fn action_configurations_keep_their_arguments() {
        let text = "actions: allocate\ntiers:\n- plugins:\n  - name: gang\nconfigurations:\n- name: allocate\n  arguments:\n    predicateErrorCacheEnable: true\n";
        let (conf, _) = parse_scheduler_conf(text, true).unwrap();
        assert_eq!(
            conf.action_arguments["allocate"]["predicateErrorCacheEnable"],
            "true"
        );
    }

    #[test]
    fn a_schedule_timeout_in_go_syntax_reaches_the_scheduler() {
        let text = "actions: \"enqueue, allocate\"\ntiers:\n- plugins:\n  - name: gang\nconfigurations:\n- name: enqueue\n  arguments:\n    schedule-timeout: 1.5h\n";
        let (conf, warnings) = parse_scheduler_conf(text, true).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let defaults = crate::framework::timeout::TimeoutDefaults::from_conf(&conf);
        assert_eq!(defaults.schedule_timeout_ms, Some(5_400_000));
    }

    #[test]
    fn a_garbage_timeout_is_refused_naming_the_action_the_argument_and_the_value() {
        let text = "actions: \"enqueue, allocate\"\nconfigurations:\n- name: enqueue\n  arguments:\n    schedule-timeout: 1.5hours\n";
        let err = parse_scheduler_conf(text, false).unwrap_err().to_string();
        assert!(
            err.contains("configurations[0].arguments.schedule-timeout"),
            "{err}"
        );
        assert!(err.contains("\"1.5hours\""), "{err}");
        assert!(err.contains("action `enqueue`"), "{err}");
    }

    #[test]
    fn a_plugin_argument_that_is_not_a_number_is_refused_naming_the_plugin() {
        let text = "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n  - name: binpack\n    arguments:\n      binpack.weight: heavy\n";
        let err = parse_scheduler_conf(text, false).unwrap_err().to_string();
        assert!(
            err.contains("tiers[0].plugins[1].arguments.binpack.weight"),
            "{err}"
        );
        assert!(err.contains("\"heavy\" for plugin `binpack`"), "{err}");
    }

    #[test]
    fn a_configuration_without_gang_warns_loudly_and_strict_mode_refuses_it() {
        for text in [
            "actions: allocate\ntiers: []\n",
            "actions: allocate\n",
            "actions: allocate\ntiers:\n- plugins:\n  - name: priority\n",
        ] {
            let (_, warnings) = parse_scheduler_conf(text, false).unwrap();
            assert_eq!(warnings.len(), 1, "{text}: {warnings:?}");
            assert!(
                warnings[0].starts_with("GANG SCHEDULING IS OFF"),
                "{}",
                warnings[0]
            );
            assert!(warnings[0].contains("partially"), "{}", warnings[0]);
            let err = parse_scheduler_conf(text, true).unwrap_err().to_string();
            assert!(err.contains("GANG SCHEDULING IS OFF"), "{err}");
        }
    }
}

/// Property tests of the configuration loader (issue 17 item 4): any text loads or is an
/// error, never a panic; an argument phalanx reads either passes its check or names
/// itself. `PROPTEST_CASES` overrides the small default count (docs/security.md).
#[cfg(test)]
mod fuzz_tests {
    use proptest::prelude::*;

    use super::*;

    /// Lines from real configurations, mixed with arbitrary ones.
    fn conf_line() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("actions: \"enqueue, allocate, backfill\"".to_string()),
            Just("tiers:".to_string()),
            Just("- plugins:".to_string()),
            Just("  - name: gang".to_string()),
            Just("  - name: binpack".to_string()),
            Just("    arguments:".to_string()),
            Just("configurations:".to_string()),
            Just("- name: enqueue".to_string()),
            Just("  arguments:".to_string()),
            "      binpack\\.weight: [-0-9.eEinfNa]{0,8}",
            "    schedule-timeout: [0-9.hmsun-]{0,8}",
            "    overcommit-factor: [-0-9.e]{0,6}",
            "    enable[A-Z][a-z]{2,8}: (true|false|[a-z]{1,4})",
            "[ -~]{0,30}",
        ]
    }

    proptest! {
        #![proptest_config(crate::proptest_config(64, 0x0017_0C0F))]

        #[test]
        fn arbitrary_text_never_panics_the_config_loader(text in "\\PC{0,200}", strict in any::<bool>()) {
            let _ = parse_scheduler_conf(&text, strict);
        }

        #[test]
        fn config_like_text_loads_or_names_the_problem(
            lines in proptest::collection::vec(conf_line(), 0..16),
            strict in any::<bool>(),
        ) {
            match parse_scheduler_conf(&lines.join("\n"), strict) {
                Ok((conf, _)) => {
                    // What loaded passes the argument checks again, unchanged: nothing
                    // phalanx reads got past them.
                    for (t, tier) in conf.tiers.iter().enumerate() {
                        for plugin in &tier.plugins {
                            let mut args = plugin.arguments.clone();
                            let again = check_arguments(&format!("tiers[{t}]"), "plugin", &plugin.name, &mut args);
                            prop_assert!(again.is_ok(), "{:?}", again);
                            prop_assert_eq!(&args, &plugin.arguments);
                        }
                    }
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }
    }
}
