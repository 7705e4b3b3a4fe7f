//! Scenario files (SCENARIOS.md) run in-process: every file under `tests/scenarios/` (and
//! `tests/scenarios/volcano/`, the cases ported from Volcano's action and plugin tests) must
//! meet its Expectation with every invariant holding; every file under
//! `tests/scenarios/invalid/` must be refused with an error that contains each text listed
//! on its first line (`# expect-error: text | other text`).

use std::path::{Path, PathBuf};

use phalanx_scheduler::manifest::{LoadOptions, load_workload_files};
use phalanx_scheduler::simulate::scenario::{ScenarioOptions, render, run_workload};

fn dir(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scenarios")
        .join(sub)
}

fn yaml_files(sub: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir(sub))
        .expect("scenario directory exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// Every scenario to run: the project's own (`tests/scenarios/*.yaml`) and the cases
/// ported from Volcano's action tests (`tests/scenarios/volcano/*.yaml`).
fn all_scenarios() -> Vec<PathBuf> {
    let mut files = yaml_files("");
    files.extend(yaml_files("volcano"));
    files
}

/// The scenarios run with shards: the project's own and the known differences of
/// `volcano/` (`diff-*`). The cases ported from Volcano's tests check, in one cycle, the
/// order in which one scheduler serves queues; with shards, queues homed in different
/// shards plan concurrently from the round's snapshot, so two queues contending for one
/// node may be served in the other order (what each queue gets over cycles is the same).
fn sharded_scenarios() -> Vec<PathBuf> {
    let mut files = yaml_files("");
    files.extend(yaml_files("volcano").into_iter().filter(|p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("diff-"))
    }));
    files
}

/// The scheduler name a scenario asks for on its second line (`# scheduler-name: volcano`),
/// else `phalanx`.
fn scheduler_name(text: &str) -> String {
    text.lines()
        .take(5)
        .find_map(|l| l.strip_prefix("# scheduler-name:"))
        .map_or_else(|| "phalanx".to_string(), |n| n.trim().to_string())
}

fn run(path: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let name = scheduler_name(&text);
    let load = LoadOptions {
        scheduler_name: name.clone(),
        strict_config: false,
    };
    let workload =
        load_workload_files(&[path], &load).map_err(|e| format!("does not load: {e}"))?;
    if workload.expectation.is_none() {
        return Err("has no Expectation document".into());
    }
    let opts = ScenarioOptions {
        scheduler_name: name,
        ..ScenarioOptions::default()
    };
    let report = run_workload(&path.display().to_string(), workload, &opts);
    if report.passed() {
        Ok(())
    } else {
        Err(render(&report))
    }
}

#[test]
fn every_scenario_meets_its_expectation() {
    let files = all_scenarios();
    assert!(
        files.len() >= 20,
        "expected at least 20 scenarios, found {}",
        files.len()
    );
    let mut failures = Vec::new();
    for path in &files {
        if let Err(why) = run(path) {
            failures.push(format!("== {}\n{why}", path.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} scenarios failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

#[test]
fn every_invalid_scenario_is_refused_with_a_clear_error() {
    let files = yaml_files("invalid");
    assert!(!files.is_empty());
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("readable");
        let wanted: Vec<String> = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect-error:"))
            .map(|l| l.split('|').map(|s| s.trim().to_string()).collect())
            .unwrap_or_default();
        assert!(
            !wanted.is_empty(),
            "{}: first line must be `# expect-error: ...`",
            path.display()
        );
        let strict = text.lines().take(5).any(|l| l.trim() == "# strict-config");
        let load = LoadOptions {
            scheduler_name: "phalanx".into(),
            strict_config: strict,
        };
        match load_workload_files(&[path], &load) {
            Ok(_) => failures.push(format!("{}: loaded, but must be refused", path.display())),
            Err(e) => {
                let msg = e.to_string();
                for w in &wanted {
                    if !msg.contains(w.as_str()) {
                        failures.push(format!("{}: error lacks {w:?}: {msg}", path.display()));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Where every pod ended and each PodGroup's phase: what must not depend on replicas.
fn final_placement(path: &Path, replicas: usize) -> Result<Vec<String>, String> {
    sharded_outcome(path, replicas, 1).map(|(placement, _, _)| placement)
}

/// The final placement with `replicas` and `shards`, and the unmet expectations (empty when
/// the scenario passed).
fn sharded_outcome(
    path: &Path,
    replicas: usize,
    shards: u32,
) -> Result<(Vec<String>, String, usize), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let name = scheduler_name(&text);
    let load = LoadOptions {
        scheduler_name: name.clone(),
        strict_config: false,
    };
    let workload = load_workload_files(&[path], &load).map_err(|e| e.to_string())?;
    let opts = ScenarioOptions {
        scheduler_name: name,
        replicas,
        shards,
        ..ScenarioOptions::default()
    };
    let report = run_workload(&path.display().to_string(), workload, &opts);
    if !report.outcome.ledger_errors.is_empty() {
        return Err(report.outcome.ledger_errors.join("; "));
    }
    let mut out: Vec<String> = report
        .sim
        .pods()
        .map(|p| format!("{} {:?} {:?}", p.key, p.node_name, p.phase))
        .collect();
    out.extend(
        report
            .sim
            .pod_groups()
            .map(|g| format!("{} {:?}", g.key, g.status.phase)),
    );
    out.sort();
    let unmet = if report.passed() {
        String::new()
    } else {
        render(&report)
    };
    let txns = report
        .outcome
        .shards
        .as_ref()
        .map_or(0, |s| s.txns_committed);
    Ok((out, unmet, txns))
}

#[test]
fn scenario_outcomes_are_the_same_with_one_and_three_replicas() {
    let mut failures = Vec::new();
    for path in all_scenarios() {
        match (final_placement(&path, 1), final_placement(&path, 3)) {
            (Ok(one), Ok(three)) if one == three => {}
            (Ok(one), Ok(three)) => failures.push(format!(
                "{}: differs\n  1 replica:  {one:?}\n  3 replicas: {three:?}",
                path.display()
            )),
            (a, b) => failures.push(format!("{}: {:?} / {:?}", path.display(), a.err(), b.err())),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Scenarios whose pod-to-node outcome may differ with shards, each with its
/// `# shard-sensitive:` reason line; they must still meet their Expectation. Each replica
/// plans its own shards from the round's snapshot (`framework::scope`), so two queues of
/// different shards contending for the same nodes interleave differently than in one
/// cycle; what each queue gets is the same.
const SHARD_SENSITIVE: [&str; 2] = [
    "16-proportion-weights-1-to-3-split-8-gpus.yaml",
    "18-proportion-guarantee-floors-a-queue.yaml",
];

fn shard_sensitive(path: &Path) -> bool {
    let marked = std::fs::read_to_string(path)
        .is_ok_and(|t| t.lines().any(|l| l.starts_with("# shard-sensitive:")));
    let listed = path
        .file_name()
        .is_some_and(|n| SHARD_SENSITIVE.iter().any(|s| n == *s));
    assert_eq!(
        marked,
        listed,
        "{}: a `# shard-sensitive:` line and the SHARD_SENSITIVE list must agree",
        path.display()
    );
    marked
}

/// Every scenario meets its Expectation with `replicas` and `shards`, and ends exactly as
/// with one replica and one shard.
fn same_outcome_as_one_replica_one_shard(replicas: usize, shards: u32) {
    let mut failures = Vec::new();
    let mut committed_txns = 0;
    let files = sharded_scenarios();
    for path in &files {
        let sensitive = shard_sensitive(path);
        match (
            sharded_outcome(path, 1, 1),
            sharded_outcome(path, replicas, shards),
        ) {
            (Ok((_, unmet, _)), _) if !unmet.is_empty() => {
                failures.push(format!("{}: fails at 1/1:\n{unmet}", path.display()))
            }
            (_, Ok((_, unmet, _))) if !unmet.is_empty() => failures.push(format!(
                "{}: fails at {replicas}/{shards}:\n{unmet}",
                path.display()
            )),
            (Ok((one, _, _)), Ok((many, _, _))) if one != many && !sensitive => {
                failures.push(format!(
                    "{}: differs\n  1/1: {one:?}\n  {replicas}/{shards}: {many:?}",
                    path.display()
                ))
            }
            (Ok(_), Ok((_, _, txns))) => committed_txns += txns,
            (a, b) => failures.push(format!("{}: {:?} / {:?}", path.display(), a.err(), b.err())),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} scenarios:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
    assert!(
        committed_txns > 0,
        "no scenario placed a gang across shards: the 2PC path was not exercised"
    );
}

#[test]
fn every_scenario_ends_the_same_with_three_replicas_and_three_shards() {
    same_outcome_as_one_replica_one_shard(3, 3);
}

#[test]
fn every_scenario_ends_the_same_with_three_replicas_and_eight_shards() {
    same_outcome_as_one_replica_one_shard(3, 8);
}

/// Bug fixed: when each replica decided admission only for its own gangs, two replicas each
/// admitted a gang into the one cluster-wide overcommit budget in the same round. Every
/// replica now decides every gang's admission from the same snapshot (`actions::enqueue`).
#[test]
fn two_replicas_never_both_admit_gangs_into_one_overcommit_budget() {
    let path = dir("").join("22-overcommit-default-factor-keeps-second-gang-pending.yaml");
    for shards in [3, 8] {
        let (_, unmet, _) = sharded_outcome(&path, 3, shards).expect("runs");
        assert!(unmet.is_empty(), "3 replicas / {shards} shards:\n{unmet}");
    }
}
