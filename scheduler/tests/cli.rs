//! The `phalanx` binary as a user meets it: exit codes 0 / 1 / 2 of SCENARIOS.md and the
//! built-in demo.

use crate::common;
use common::{phalanx, scenario};

#[test]
fn a_scenario_whose_expectations_hold_exits_0() {
    let (code, stdout, _) = phalanx(&[
        "simulate",
        "--scenario",
        &scenario("02-gang-larger-than-cluster-stays-pending.yaml"),
    ]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("expectations: all hold"), "{stdout}");
    assert!(stdout.contains("5 more pods needed to start"), "{stdout}");
}

#[test]
fn a_scenario_with_unmet_expectations_exits_1_and_lists_them() {
    let dir = std::env::temp_dir().join(format!("phalanx-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("unmet.yaml");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: \"4\", nvidia.com/gpu: \"1\"}}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\nspec: {schedulerName: phalanx, containers: [{name: c, resources: {requests: {nvidia.com/gpu: \"1\"}}}]}\n---\n\
         apiVersion: phalanx.dev/v1alpha1\nkind: Expectation\nspec:\n  pods:\n    default/p: {node: n2}\n  boundCount: 3\n",
    )
    .expect("write scenario");
    let (code, stdout, _) = phalanx(&["simulate", "--scenario", &path.display().to_string()]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("pod default/p: expected bound to n2, got bound to n1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("boundCount: expected 3 pods bound, got 1 pods bound"),
        "{stdout}"
    );
}

#[test]
fn unreadable_input_exits_2_with_the_document_field_and_text() {
    let (code, _, stderr) = phalanx(&[
        "simulate",
        "--scenario",
        &scenario("invalid/fractional-gpu.yaml"),
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("Pod default/half"), "{stderr}");
    assert!(stderr.contains("\"0.5\""), "{stderr}");
    let (code, _, stderr) = phalanx(&["simulate", "--scenario", "/nonexistent/phalanx.yaml"]);
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn the_demo_shows_the_deadlock_without_gang_and_none_with_it() {
    let (code, stdout, stderr) = phalanx(&["simulate"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("pod by pod (gang off): deadlock"),
        "{stdout}"
    );
    assert!(stdout.contains("tf-mnist-job holds"), "{stdout}");
    assert!(
        !stdout.contains("phalanx gang (default): deadlock"),
        "{stdout}"
    );
}

#[test]
fn a_generated_run_reports_throughput_and_cycle_times() {
    let (code, stdout, stderr) = phalanx(&[
        "simulate", "--nodes", "50", "--jobs", "100", "--seed", "7", "--quiet",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("pods/s"), "{stdout}");
    assert!(stdout.contains("cycle time: p50"), "{stdout}");
    assert!(
        stdout.contains("invariants I1-I3, commit-then-bind and the ledger's checks held"),
        "{stdout}"
    );
}

/// Regression: generated runs ignored `--period-ms` (every cycle was 1 s of simulated
/// time). A busy run (pods of 1-2 s keep freeing room) needs more cycles at 250 ms.
#[test]
fn a_generated_run_honours_the_cycle_period() {
    let cycles = |period: &str| {
        let (code, stdout, stderr) = phalanx(&[
            "simulate",
            "--nodes",
            "4",
            "--jobs",
            "40",
            "--seed",
            "3",
            "--quiet",
            "--period-ms",
            period,
            "--pod-seconds",
            "1-2",
        ]);
        assert_eq!(code, 0, "{stderr}");
        let line = stdout
            .lines()
            .find(|l| l.contains(" cycles ("))
            .unwrap_or_else(|| panic!("no cycle count in {stdout}"))
            .to_string();
        line.split(" cycles (")
            .next()
            .and_then(|head| head.rsplit(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no cycle count in {line:?}"))
    };
    let (slow, fast) = (cycles("1000"), cycles("250"));
    assert!(
        fast * 4 > slow * 5,
        "1 s period: {slow} cycles; 250 ms period: {fast} cycles"
    );
}

/// Regression: while nothing changed the run jumped to the next pod event and fired a fault
/// due earlier only then (a kill at 2.5 s happened at 20 s).
#[test]
fn a_fault_fires_on_time_while_the_cluster_is_idle() {
    let (code, stdout, stderr) = phalanx(&[
        "simulate",
        "--nodes",
        "4",
        "--jobs",
        "3",
        "--seed",
        "3",
        "--quiet",
        "--pod-seconds",
        "20-20",
        "--replicas",
        "3",
        "--fault",
        "kill:leader@2500ms",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("fault at 2.5s: kill:leader"), "{stdout}");
}

#[test]
fn bad_shard_and_fault_flags_exit_2_naming_the_flag_and_value() {
    let (code, _, err) = common::phalanx(&["simulate", "--shards", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--shards 0"), "{err}");
    let (code, _, err) = common::phalanx(&[
        "simulate",
        "--replicas",
        "3",
        "--fault",
        "pause:replica-9@1s",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("replica-9") && err.contains("--replicas 3"),
        "{err}"
    );
    let (code, _, err) = common::phalanx(&["simulate", "--shards", "2", "--shard-lease-ms", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--shard-lease-ms 0"), "{err}");
    let (code, _, err) = common::phalanx(&[
        "simulate",
        "--shards",
        "2",
        "--shard-lease-ms",
        "500",
        "--period-ms",
        "1000",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--shard-lease-ms 500") && err.contains("--period-ms 1000"),
        "{err}"
    );
    let (code, _, err) = common::phalanx(&["simulate", "--shards", "2", "--home-pool", "nearest"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--home-pool") && err.contains("nearest"),
        "{err}"
    );
}

#[test]
fn a_sharded_scenario_run_reports_its_shards_and_transactions() {
    let (code, out, err) = common::phalanx(&[
        "simulate",
        "--scenario",
        &common::scenario("84-reclaim-follows-queue-weights.yaml"),
        "--replicas",
        "3",
        "--shards",
        "3",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("shards: 3 over 3 replica(s)"), "{out}");
    assert!(
        out.contains("invariant checks by the shard runtime"),
        "{out}"
    );
    assert!(out.contains(", 0 failed"), "{out}");
    assert!(out.contains("2PC messages: "), "{out}");
    assert!(out.contains(" sent over gRPC, "), "{out}");
}

/// Issue 17: every numeric flag has a bound; out of it, exit 2 naming the flag and the
/// value (before: a capacity-overflow panic, an allocation until killed, a wrapped sum).
#[test]
fn out_of_range_flags_exit_2_naming_the_flag_and_the_value() {
    let huge = "18446744073709551615";
    let cases: [(&[&str], &str); 14] = [
        (
            &["simulate", "--nodes", huge],
            "--nodes 18446744073709551615",
        ),
        (&["simulate", "--nodes", "0"], "--nodes 0"),
        (
            &["simulate", "--nodes", "10", "--jobs", huge],
            "--jobs 18446744073709551615",
        ),
        (
            &["simulate", "--nodes", "10", "--gpus-per-node=-1"],
            "--gpus-per-node -1",
        ),
        (&["simulate", "--period-ms", "0"], "--period-ms 0"),
        (
            &[
                "simulate",
                "--nodes",
                "10",
                "--pod-seconds",
                "1-18446744073709551615",
            ],
            "--pod-seconds",
        ),
        (
            &[
                "simulate",
                "--nodes",
                "10",
                "--queues",
                "a:4294967295,b:4294967295",
            ],
            "\"a:4294967295\"",
        ),
        (&["serve", "--id", "0"], "--id 0"),
        (
            &[
                "serve",
                "--id",
                "1",
                "--insecure-plaintext",
                "--bind-workers",
                "0",
            ],
            "--bind-workers 0: must be 1 to 1024",
        ),
        (
            &[
                "serve",
                "--id",
                "1",
                "--insecure-plaintext",
                "--max-pods-per-cycle",
                "1000001",
            ],
            "--max-pods-per-cycle 1000001: must be 0 (no bound) to 1000000",
        ),
        (
            &[
                "serve",
                "--id",
                "1",
                "--insecure-plaintext",
                "--snapshot-every",
                "0",
            ],
            "--snapshot-every 0: must be 10 to 1000000",
        ),
        // Issue 17: no TLS without saying so; a TLS file is named with its flag.
        (&["serve", "--id", "1"], "--tls-cert is required"),
        (
            &[
                "serve",
                "--id",
                "1",
                "--insecure-plaintext",
                "--tls-ca",
                "ca.crt",
            ],
            "--insecure-plaintext",
        ),
        (
            &[
                "serve",
                "--id",
                "1",
                "--tls-cert",
                "/nonexistent/tls.crt",
                "--tls-key",
                "/nonexistent/tls.key",
                "--tls-ca",
                "/nonexistent/ca.crt",
            ],
            "--tls-cert /nonexistent/tls.crt: cannot read",
        ),
    ];
    for (args, named) in cases {
        let (code, stdout, stderr) = phalanx(args);
        assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
        assert!(stderr.contains(named), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// Issue 17: a scenario over 16 MiB is refused before it is read whole; an endless one
/// (`/dev/zero`) after 16 MiB.
#[test]
fn a_scenario_over_16_mib_or_endless_exits_2_without_reading_it_whole() {
    let dir = std::env::temp_dir().join(format!("phalanx-cli-big-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let sparse = dir.join("sparse.yaml");
    let file = std::fs::File::create(&sparse).expect("create");
    file.set_len(17 * 1024 * 1024).expect("sparse 17 MiB");
    drop(file);
    for path in [sparse.display().to_string(), "/dev/zero".to_string()] {
        let (code, _, stderr) = phalanx(&["simulate", "--scenario", &path]);
        assert_eq!(code, 2, "{path}: {stderr}");
        assert!(stderr.contains(&path), "{stderr}");
        assert!(stderr.contains("at most 16777216 bytes"), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 17: warnings went to stdout, mixed into the report.
#[test]
fn scenario_warnings_go_to_stderr_and_stdout_holds_the_report_alone() {
    let dir = std::env::temp_dir().join(format!("phalanx-cli-warn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("warns.yaml");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: \"4\"}}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default, annotations: {scheduling.k8s.io/group-name: nowhere}}\nspec: {schedulerName: phalanx, containers: [{name: c}]}\n",
    )
    .expect("write scenario");
    let (code, stdout, stderr) = phalanx(&["simulate", "--scenario", &path.display().to_string()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stderr.contains("warning: "), "{stderr}");
    assert!(stderr.contains("PodGroup default/nowhere"), "{stderr}");
    assert!(!stdout.contains("warning"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}
