//! `phalanx simulate` runs that used to hang without a word, each now bounded: the binary
//! runs in a child process, and the test fails (and kills it) if it has not exited within
//! a generous limit.

use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Far above what each run needs (seconds), far below "forever".
const LIMIT: Duration = Duration::from_secs(240);

/// Runs `phalanx ARGS`; the exit code, stdout and stderr, or a panic naming the run if it
/// is still going after [`LIMIT`] (the child is killed first).
fn phalanx_within_limit(args: &[&str]) -> (i32, String, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_phalanx"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("phalanx starts");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(LIMIT) {
        Ok(Ok(out)) => (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ),
        Ok(Err(e)) => panic!("waiting for phalanx {args:?}: {e}"),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("phalanx {args:?} was still running after {LIMIT:?}");
        }
    }
}

fn small_run_with(faults: &[&str], shards: &str) -> (i32, String, String) {
    let mut args = vec![
        "simulate",
        "--nodes",
        "8",
        "--jobs",
        "20",
        "--seed",
        "3",
        "--quiet",
        "--pod-seconds",
        "20-60",
        "--replicas",
        "3",
        "--shards",
        shards,
    ];
    for f in faults {
        args.extend(["--fault", f]);
    }
    phalanx_within_limit(&args)
}

#[test]
fn killing_two_of_three_replicas_stops_the_run_with_an_error_naming_the_lost_quorum() {
    for shards in ["1", "3"] {
        let (code, out, err) =
            small_run_with(&["kill:replica-2@10s", "kill:replica-3@20s"], shards);
        assert_eq!(code, 1, "--shards {shards}: {out}{err}");
        assert!(
            err.contains("the ledger lost its quorum at 20.0s")
                && err.contains("ledger replicas 2, 3 of 3 are down")
                && err.contains("kill:replica-2@10.0s")
                && err.contains("a quorum needs 2")
                && err.contains("no restart or heal is scheduled"),
            "--shards {shards}: {err}"
        );
    }
}

#[test]
fn a_lost_quorum_with_a_restart_scheduled_waits_for_it_then_finishes() {
    let (code, out, err) = small_run_with(
        &[
            "kill:replica-2@10s",
            "kill:replica-3@20s",
            "restart:replica-3@45s",
        ],
        "3",
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("no ledger quorum from 20.0s to 45.0s"),
        "{out}"
    );
    assert!(
        out.contains("invariants I1-I3, commit-then-bind and the ledger's checks held"),
        "{out}"
    );
}
