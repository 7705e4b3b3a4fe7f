//! The CRDs checked in under `deploy/crds/` are exactly what the Rust types generate.

use std::path::PathBuf;

use phalanx_scheduler::manifest::volcano::crd::{
    all_crds_yaml, crd_yaml, job_crd, pod_group_crd, queue_crd,
};

const REGENERATE: &str = "regenerate with `PHALANX_REGENERATE_CRDS=1 cargo test -p phalanx-scheduler --test integration crds::` \
     (or `cargo run -p phalanx-scheduler -- crds`, see deploy/crds/README.md)";

fn crds_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds")
}

/// Compares `generated` with the checked-in file, or rewrites the file when
/// `PHALANX_REGENERATE_CRDS=1`.
fn assert_checked_in(file: &str, generated: &str) {
    let path = crds_dir().join(file);
    if std::env::var_os("PHALANX_REGENERATE_CRDS").is_some_and(|v| v == "1") {
        std::fs::write(&path, generated).expect("write the regenerated CRD");
        return;
    }
    let checked_in = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}; {REGENERATE}", path.display()));
    assert!(
        checked_in == generated,
        "{} is not what the Rust types generate; {REGENERATE}",
        path.display()
    );
}

#[test]
fn checked_in_podgroup_crd_matches_the_rust_types() {
    let crd = pod_group_crd().expect("PodGroup CRD");
    assert_checked_in("podgroups.yaml", &crd_yaml(&crd).expect("YAML"));
}

#[test]
fn checked_in_queue_crd_matches_the_rust_types() {
    let crd = queue_crd().expect("Queue CRD");
    assert_checked_in("queues.yaml", &crd_yaml(&crd).expect("YAML"));
}

#[test]
fn checked_in_job_crd_matches_the_code() {
    let crd = job_crd().expect("Job CRD");
    assert_checked_in("jobs.yaml", &crd_yaml(&crd).expect("YAML"));
}

#[test]
fn phalanx_crds_prints_both_checked_in_files_as_one_stream() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_phalanx"))
        .arg("crds")
        .output()
        .expect("run phalanx crds");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).expect("UTF-8");
    assert_eq!(printed, all_crds_yaml().expect("CRDs"));
    let pod_groups = std::fs::read_to_string(crds_dir().join("podgroups.yaml")).unwrap_or_default();
    let queues = std::fs::read_to_string(crds_dir().join("queues.yaml")).unwrap_or_default();
    assert_eq!(
        printed,
        format!("{pod_groups}---\n{queues}"),
        "{REGENERATE}"
    );
}
