//! `phalanx simulate --scenario FILE`: load the manifests, run the scheduler on the embedded
//! cluster, report what was placed and what stays pending and why, and check the
//! Expectation (SCENARIOS.md is the contract).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::cluster::Cluster;
use crate::cluster::sim::SimCluster;
use crate::framework::{SchedulerConf, run_cycle};
use crate::ledger::{ScheduledFault, start_ledger};
use crate::manifest::{LoadOptions, ManifestError, Workload};
use crate::model::{ObjectKey, PodGroupPhase};
use crate::simulate::driver::{DriverOptions, RunOutcome, drive_with};
use crate::simulate::expect::{Unmet, check};
use crate::simulate::sharded::sharding_for;

#[derive(Clone, Debug)]
pub struct ScenarioOptions {
    pub scheduler_name: String,
    pub strict_config: bool,
    pub period_ms: u64,
    /// Scheduler replicas: 1 applies the ledger's state machine in process; more start the
    /// replicated ledger on loopback.
    pub replicas: usize,
    /// Faults injected into the replicated ledger.
    pub faults: Vec<ScheduledFault>,
    /// Shards (1: the unsharded path) and the node label that groups nodes into shards.
    pub shards: u32,
    pub shard_by_label: Option<String>,
    /// Sharded runs: the replicas' lease (simulated ms).
    pub shard_lease_ms: crate::model::TimeMs,
    pub home_pool: crate::framework::HomePool,
}

impl Default for ScenarioOptions {
    fn default() -> Self {
        Self {
            scheduler_name: crate::model::DEFAULT_SCHEDULER_NAME.to_string(),
            strict_config: false,
            period_ms: 1_000,
            replicas: 1,
            faults: Vec::new(),
            shards: 1,
            shard_by_label: None,
            shard_lease_ms: 3_000,
            home_pool: crate::framework::HomePool::default(),
        }
    }
}

/// The result of one scenario run.
#[derive(Debug)]
pub struct ScenarioReport {
    pub name: String,
    pub warnings: Vec<String>,
    pub outcome: RunOutcome,
    pub sim: SimCluster,
    pub unmet: Vec<Unmet>,
    pub has_expectation: bool,
    pub config_source: String,
    /// The configuration the run used (for `--explain`).
    pub conf: SchedulerConf,
    pub scheduler_name: String,
    pub replicas: usize,
}

impl ScenarioReport {
    /// Every expectation holds and no invariant was violated.
    pub fn passed(&self) -> bool {
        self.unmet.is_empty()
    }
}

/// Loads and runs a scenario given as text (`name` is used in messages).
pub fn run_scenario(
    name: &str,
    text: &str,
    opts: &ScenarioOptions,
) -> Result<ScenarioReport, ManifestError> {
    let load = LoadOptions {
        scheduler_name: opts.scheduler_name.clone(),
        strict_config: opts.strict_config,
    };
    let workload = crate::manifest::load_workload(text, &load).map_err(|mut e| {
        e.at.file.get_or_insert_with(|| name.to_string());
        e
    })?;
    Ok(run_workload(name, workload, opts))
}

/// Runs an already loaded workload.
pub fn run_workload(name: &str, mut workload: Workload, opts: &ScenarioOptions) -> ScenarioReport {
    let conf = workload.effective_scheduler_conf();
    let config_source = if workload.scheduler_conf.is_some() {
        "the scenario's volcano-scheduler.conf".to_string()
    } else {
        "the default configuration".to_string()
    };
    let expectation = workload.expectation.clone();
    let warnings = std::mem::take(&mut workload.warnings);
    let mut sim = SimCluster::from_workload(workload);
    let driver = DriverOptions {
        scheduler_name: opts.scheduler_name.clone(),
        period_ms: opts.period_ms,
        exact_cycles: expectation
            .as_ref()
            .and_then(|e| (e.cycles > 0).then_some(e.cycles)),
        check_invariants: expectation.as_ref().is_none_or(|e| e.invariants),
        faults: opts.faults.clone(),
        sharding: sharding_for(
            opts.shards,
            opts.shard_by_label.clone(),
            opts.replicas as u64,
            &opts.faults,
            1,
        )
        .map(|mut o| {
            o.lease_ms = opts.shard_lease_ms;
            o.home_pool = opts.home_pool;
            o
        }),
        ..DriverOptions::default()
    };
    let outcome = match start_ledger(opts.replicas) {
        Ok(mut ledger) => drive_with(&mut sim, &conf, &driver, ledger.as_mut(), |_| {}),
        Err(e) => RunOutcome {
            ledger_errors: vec![e.to_string()],
            ..RunOutcome::default()
        },
    };
    let mut unmet = expectation
        .as_ref()
        .map(|e| check(e, &sim))
        .unwrap_or_default();
    for (cycle, v) in &outcome.violations {
        unmet.push(Unmet {
            subject: format!("invariant {} (cycle {cycle})", v.invariant),
            expected: "to hold".into(),
            got: v.detail.clone(),
        });
    }
    for e in &outcome.ledger_errors {
        unmet.push(Unmet {
            subject: "ledger".into(),
            expected: "to accept the scheduler's commands".into(),
            got: e.clone(),
        });
    }
    if !outcome.quiescent && driver.exact_cycles.is_none() {
        unmet.push(Unmet {
            subject: "run".into(),
            expected: "to become quiescent".into(),
            got: format!("still changing after {} cycles", outcome.cycles),
        });
    }
    ScenarioReport {
        name: name.to_string(),
        warnings,
        outcome,
        sim,
        unmet,
        has_expectation: expectation.is_some(),
        config_source,
        conf,
        scheduler_name: opts.scheduler_name.clone(),
        replicas: opts.replicas,
    }
}

/// The human report: placed gangs with their nodes, pending gangs with the reason, the
/// invariants, and the unmet expectations.
pub fn render(report: &ScenarioReport) -> String {
    let mut out = String::new();
    let sim = &report.sim;
    let _ = writeln!(
        out,
        "scenario {}: {} nodes, {} pods, {} PodGroups, {} queues; scheduler config: {}",
        report.name,
        sim.nodes().count(),
        sim.pods().count(),
        sim.pod_groups().count(),
        sim.queues().len(),
        report.config_source
    );
    for w in report.warnings.iter().chain(&report.outcome.warnings) {
        let _ = writeln!(out, "warning: {w}");
    }
    for f in &report.outcome.faults {
        let _ = writeln!(out, "{f}");
    }
    for w in &report.outcome.quorum_waits {
        let _ = writeln!(out, "{w}");
    }
    if let Some(shards) = &report.outcome.shards {
        out.push_str(&shards.render());
    }
    for (cycle, gang, why) in &report.outcome.ledger_refusals {
        let _ = writeln!(out, "ledger refused gang {gang} in cycle {cycle}: {why}");
    }
    let _ = writeln!(
        out,
        "ran {} cycle(s) with {} replica(s), {} bind(s) committed to the ledger first, simulated time {:.1}s{}",
        report.outcome.cycles,
        report.replicas,
        report.outcome.total_binds(),
        sim.now_ms() as f64 / 1000.0,
        if report.outcome.quiescent {
            " (quiescent)"
        } else {
            ""
        }
    );

    let mut nodes_of: BTreeMap<ObjectKey, BTreeMap<String, u32>> = BTreeMap::new();
    let mut placed_of: BTreeMap<ObjectKey, u32> = BTreeMap::new();
    for pod in sim.pods() {
        let gang = pod.group.as_ref().map_or_else(
            || pod.key.clone(),
            |g| ObjectKey::new(&pod.key.namespace, g),
        );
        if let Some(node) = &pod.node_name {
            *nodes_of
                .entry(gang.clone())
                .or_default()
                .entry(node.clone())
                .or_default() += 1;
            *placed_of.entry(gang).or_default() += 1;
        }
    }
    let pending: BTreeMap<&ObjectKey, &String> =
        report.outcome.pending.iter().map(|(k, v)| (k, v)).collect();

    let _ = writeln!(out, "\nPodGroups:");
    for group in sim.pod_groups() {
        let total = sim
            .pods()
            .filter(|p| {
                p.group.as_deref() == Some(group.key.name.as_str())
                    && p.key.namespace == group.key.namespace
            })
            .count();
        let placed = placed_of.get(&group.key).copied().unwrap_or(0);
        let nodes = nodes_of
            .get(&group.key)
            .map(|m| {
                m.iter()
                    .map(|(n, c)| {
                        if *c > 1 {
                            format!("{n}×{c}")
                        } else {
                            n.clone()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        let _ = write!(
            out,
            "  {:<40} {:<9} {placed}/{total} placed (minMember {})",
            group.key.to_string(),
            group.status.phase.as_str(),
            group.min_member
        );
        if !nodes.is_empty() {
            let _ = write!(out, " on {nodes}");
        }
        let _ = writeln!(out);
        if let Some(why) = pending.get(&group.key) {
            let _ = writeln!(out, "      pending: {why}");
        } else if group.status.phase == PodGroupPhase::Pending
            && let Some(c) = group.status.conditions.last()
        {
            let _ = writeln!(out, "      {}: {}", c.kind, c.message);
        }
    }
    let singles: Vec<_> = report
        .outcome
        .pending
        .iter()
        .filter(|(k, _)| sim.pod_group(k).is_none())
        .collect();
    if !singles.is_empty() {
        let _ = writeln!(out, "\nPods without a PodGroup still pending:");
        for (key, why) in singles {
            let _ = writeln!(out, "  {key}: {why}");
        }
    }

    let evicted: Vec<String> = sim.evicted().map(|k| k.to_string()).collect();
    if !evicted.is_empty() {
        let _ = writeln!(
            out,
            "\nEvicted by preempt/reclaim ({}): {}",
            evicted.len(),
            evicted.join(", ")
        );
    }

    let _ = writeln!(out);
    if report.outcome.violations.is_empty() {
        let _ = writeln!(
            out,
            "invariants: I1 no double-booking, I2 gang atomicity, I3 no lost placement, commit-then-bind and the ledger's own checks held after every cycle"
        );
    }
    if report.has_expectation || !report.unmet.is_empty() {
        if report.unmet.is_empty() {
            let _ = writeln!(out, "expectations: all hold");
        } else {
            let _ = writeln!(out, "UNMET ({}):", report.unmet.len());
            for u in &report.unmet {
                let _ = writeln!(out, "  - {u}");
            }
        }
    }
    out
}

/// `--explain NAMESPACE/PODGROUP`: one more (dry) cycle on the cluster as the run left it,
/// then why the PodGroup is where it is, in numbers, with its recent Events.
pub fn explain(report: &ScenarioReport, key: &ObjectKey) -> String {
    use crate::framework::timeout::format_duration;
    let snapshot = report.sim.snapshot();
    let (_, session) = run_cycle(&snapshot, &report.conf, &report.scheduler_name);
    let mut out = crate::framework::explain::explain(&session, key, &|at| format_duration(at));
    let kept = report.sim.events_of(key);
    let events: Vec<(u64, &crate::framework::Event)> = kept
        .map(|k| k.last.iter().map(|(at, e)| (*at, e)).collect())
        .unwrap_or_default();
    let recorded = kept.map_or(0, |k| k.recorded);
    crate::framework::explain::render_events(&mut out, (&events, recorded), &|at| {
        format!("{:.1}s", at as f64 / 1000.0)
    });
    out
}
