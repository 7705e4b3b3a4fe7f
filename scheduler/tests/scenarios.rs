//! Scenario files (SCENARIOS.md) run in-process: every file under `tests/scenarios/` must
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
    let files = yaml_files("");
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
    Ok(out)
}

#[test]
fn scenario_outcomes_are_the_same_with_one_and_three_replicas() {
    let mut failures = Vec::new();
    for path in yaml_files("") {
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
