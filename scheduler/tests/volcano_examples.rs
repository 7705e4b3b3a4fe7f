//! Volcano's published example Jobs (`tests/fixtures/volcano-examples/`, copied unchanged
//! from Volcano's `example/` directory; see the README there) load as written and are
//! placed whole on a generated cluster: every pod of every Job bound and its PodGroup
//! Running, with the invariants checked after every cycle. Each example runs alone, under
//! the scheduler name the manifests ask for (`volcano`) and the default configuration.

use std::path::{Path, PathBuf};

use phalanx_scheduler::manifest::{LoadOptions, Workload, load_workload};
use phalanx_scheduler::simulate::scenario::{ScenarioOptions, render, run_workload};

const SCHEDULER: &str = "volcano";

/// Nodes of the generated cluster, and what each holds: room for every example, so that
/// a Job left pending is phalanx's decision, not the cluster's size.
const NODES: usize = 8;
const NODE_ALLOCATABLE: &str =
    r#"{cpu: "32", memory: 128Gi, ephemeral-storage: 500Gi, nvidia.com/gpu: "8", pods: "110"}"#;
/// The well-known labels a kubelet puts on its node (`task-start-dependency/` selects
/// `kubernetes.io/os: linux`).
const NODE_LABELS: &str = "kubernetes.io/os: linux, kubernetes.io/arch: amd64";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/volcano-examples")
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("fixture directory exists")
        .map(|e| e.expect("readable entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml") {
            out.push(path);
        }
    }
}

fn generated_nodes() -> String {
    (0..NODES)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: Node\nmetadata: {{name: gen-{i}, labels: {{{NODE_LABELS}, \
                 kubernetes.io/hostname: gen-{i}}}}}\nstatus: {{allocatable: {NODE_ALLOCATABLE}}}\n---\n"
            )
        })
        .collect()
}

/// An Expectation that every pod the example expands into is bound and every PodGroup
/// is Running, running until quiescent.
fn placed_whole(workload: &Workload) -> String {
    let mut text = String::from(
        "apiVersion: phalanx.dev/v1alpha1\nkind: Expectation\nspec:\n  cycles: 0\n  pods:\n",
    );
    for pod in &workload.pods {
        text.push_str(&format!("    {}: {{bound: true}}\n", pod.key));
    }
    text.push_str("  podGroups:\n");
    for pg in &workload.pod_groups {
        text.push_str(&format!("    {}: {{phase: Running}}\n", pg.key));
    }
    text.push_str(&format!("  boundCount: {}\n", workload.pods.len()));
    text
}

/// Loads `path` on the generated cluster and runs it to quiescence; the report when an
/// expectation failed.
fn run_example(path: &Path) -> Result<usize, String> {
    let example = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let load = LoadOptions {
        scheduler_name: SCHEDULER.into(),
        strict_config: false,
    };
    let cluster = format!("{}{example}\n", generated_nodes());
    let plain = load_workload(&cluster, &load).map_err(|e| format!("does not load: {e}"))?;
    if plain.pods.is_empty() {
        return Err("expands into no pods".into());
    }
    let text = format!("{cluster}---\n{}", placed_whole(&plain));
    let workload = load_workload(&text, &load).map_err(|e| format!("does not load: {e}"))?;
    let opts = ScenarioOptions {
        scheduler_name: SCHEDULER.into(),
        ..ScenarioOptions::default()
    };
    let report = run_workload(&path.display().to_string(), workload, &opts);
    if report.passed() {
        Ok(plain.pods.len())
    } else {
        Err(render(&report))
    }
}

#[test]
fn every_volcano_example_job_is_placed_whole_on_a_generated_cluster() {
    let mut files = Vec::new();
    yaml_files(&fixtures(), &mut files);
    assert!(
        files.len() >= 10,
        "expected the example Jobs, found {files:?}"
    );
    let mut failures = Vec::new();
    let mut pods = 0;
    for path in &files {
        match run_example(path) {
            Ok(n) => pods += n,
            Err(why) => failures.push(format!("== {}\n{why}", path.display())),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} examples not placed whole:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
    assert!(
        pods > files.len(),
        "only {pods} pods in {} examples",
        files.len()
    );
}
