//! Each simulator measurement point runs as a process of its own (`phalanx-bench shards
//! --json`): its peak resident set (`VmHWM`) is then that point's alone, not the suite's
//! accumulated peak, and a point that hangs can be stopped at its timeout without losing
//! the others.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::shards::PointReport;

/// How a point ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Measured(Box<PointReport>),
    Failed(String),
    TimedOut(Duration),
}

/// A point's outcome under its name (`1000 nodes × 20000 pods, R=3, S=16`).
#[derive(Debug, Clone, PartialEq)]
pub struct PointResult {
    pub label: String,
    pub outcome: Outcome,
    pub wall: Duration,
}

impl PointResult {
    pub fn report(&self) -> Option<&PointReport> {
        match &self.outcome {
            Outcome::Measured(r) => Some(r),
            _ => None,
        }
    }

    /// For a table's status column: `ok`, `failed: …` or `timed out after N s`.
    pub fn status(&self) -> String {
        match &self.outcome {
            Outcome::Measured(_) => "ok".into(),
            Outcome::Failed(why) => format!("failed: {why}"),
            Outcome::TimedOut(t) => format!("timed out after {} s", t.as_secs()),
        }
    }

    /// A sentence naming the point, for the list of problems under a table.
    pub fn describe(&self) -> String {
        format!("{}: {}", self.label, self.status())
    }
}

/// The arguments of `phalanx-bench shards --json` for one point.
pub fn shards_args(
    nodes: usize,
    pods: usize,
    replicas: u64,
    shards: u32,
    queues: usize,
) -> Vec<String> {
    [
        "shards",
        "--nodes",
        &nodes.to_string(),
        "--pods",
        &pods.to_string(),
        "--replicas",
        &replicas.to_string(),
        "--shards",
        &shards.to_string(),
        "--queues",
        &queues.to_string(),
        "--json",
    ]
    .map(String::from)
    .to_vec()
}

/// The last line of `stdout` that is a JSON object, read as a [`PointReport`].
pub fn parse_point(stdout: &str) -> Result<PointReport, String> {
    let line = stdout
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| "no JSON line on its stdout".to_string())?;
    serde_json::from_str(line).map_err(|e| format!("its JSON line does not read ({e}): {line}"))
}

/// The last `n` non-empty lines of a child's stderr, joined with ` / `: enough to say why
/// it failed inside one table cell.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(n)..].join(" / ");
    tail.replace('|', "\\|")
}

/// What a finished child's exit status and output say about the point.
pub fn judge(status: ExitStatus, stdout: &str, stderr: &str) -> Outcome {
    if !status.success() {
        let code = status
            .code()
            .map_or_else(|| "killed by a signal".to_string(), |c| format!("exit {c}"));
        let why = tail(stderr, 3);
        return Outcome::Failed(if why.is_empty() {
            code
        } else {
            format!("{code}: {why}")
        });
    }
    match parse_point(stdout) {
        Ok(r) => Outcome::Measured(Box::new(r)),
        Err(why) => Outcome::Failed(format!("exit 0 but {why}")),
    }
}

fn drain(stream: Option<impl Read + Send + 'static>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut s) = stream {
            let mut bytes = Vec::new();
            let _ = s.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        text
    })
}

/// Waits for `child` until `deadline`; past it, kills it (our own child, by its handle).
fn wait_until(child: &mut Child, deadline: Instant) -> std::io::Result<Option<ExitStatus>> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            child.kill()?;
            child.wait()?;
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `cmd` as the point `label`, reading its output on threads of their own (so a
/// chatty child never blocks on a full pipe), and stops it after `timeout`.
pub fn run_point(label: &str, mut cmd: Command, timeout: Duration) -> PointResult {
    let started = Instant::now();
    let done = |outcome| PointResult {
        label: label.to_string(),
        outcome,
        wall: started.elapsed(),
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return done(Outcome::Failed(format!("could not start {cmd:?}: {e}"))),
    };
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let status = wait_until(&mut child, started + timeout);
    let (stdout, stderr) = (
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    );
    done(match status {
        Ok(Some(s)) => judge(s, &stdout, &stderr),
        Ok(None) => Outcome::TimedOut(timeout),
        Err(e) => Outcome::Failed(format!("waiting for it: {e}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shards::Row;

    fn report() -> PointReport {
        PointReport {
            row: Row {
                replicas: 3,
                shards: 16,
                binds: 20_003,
                wall_s: 12.5,
                cross_gangs: 10,
                cross_committed: 9,
                p50_ms: Some(1.5),
                p99_ms: None,
                cpu_max: 0.1,
                cpu_mean: 0.05,
                view_cpu: 0.08,
                proposals: 4_000,
                rounds: 900,
                messages: (1, 2, 3),
                not_committed: (1, 0, 0, 0),
                violations: 0,
                pending: 0,
                grpc_batches: 0,
                plan_s: 0.0,
                perform_s: 0.0,
                ledger_propose_s: 0.5,
                ledger_read_s: 0.25,
                ledger_reads: 40,
                views_opened: 30,
                statuses_written: 700,
                events_recorded: 600,
                state_patched: 899,
                state_built: 1,
                proposals_by_content: String::new(),
            },
            vm_hwm_kib: 204_800,
        }
    }

    #[test]
    fn the_childs_json_line_is_read_after_any_other_output() {
        let line = serde_json::to_string(&report()).unwrap();
        let stdout = format!("some warning\n{line}\n\n");
        assert_eq!(parse_point(&stdout), Ok(report()));
        assert!(
            parse_point("no json here\n")
                .unwrap_err()
                .contains("no JSON line")
        );
        let bad = parse_point("{\"row\": 1}\n").unwrap_err();
        assert!(bad.contains("does not read"), "{bad}");
    }

    #[test]
    fn a_child_that_exits_non_zero_is_reported_as_failed_naming_the_point() {
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "echo starting; echo 'ledger errors: quorum lost' >&2; exit 3",
        ]);
        let r = run_point(
            "500 nodes × 5000 pods, R=3, S=16",
            cmd,
            Duration::from_secs(60),
        );
        assert_eq!(
            r.outcome,
            Outcome::Failed("exit 3: ledger errors: quorum lost".into())
        );
        assert_eq!(
            r.describe(),
            "500 nodes × 5000 pods, R=3, S=16: failed: exit 3: ledger errors: quorum lost"
        );
        assert!(r.report().is_none());
    }

    #[test]
    fn a_child_that_exits_zero_without_its_line_failed_too_and_one_with_it_measured() {
        let mut silent = Command::new("sh");
        silent.args(["-c", "true"]);
        let r = run_point("p", silent, Duration::from_secs(60));
        assert_eq!(
            r.outcome,
            Outcome::Failed("exit 0 but no JSON line on its stdout".into())
        );
        let line = serde_json::to_string(&report()).unwrap();
        let mut ok = Command::new("sh");
        ok.args(["-c", &format!("echo '{line}'")]);
        let r = run_point("p", ok, Duration::from_secs(60));
        assert_eq!(r.report(), Some(&report()));
        assert_eq!(r.status(), "ok");
    }

    #[test]
    fn a_child_past_its_timeout_is_stopped_and_reported_as_timed_out() {
        // `exec`: the shell becomes `sleep`, so killing the child closes its pipes.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "exec sleep 600"]);
        let r = run_point("p", cmd, Duration::ZERO);
        assert_eq!(r.outcome, Outcome::TimedOut(Duration::ZERO));
        assert_eq!(r.describe(), "p: timed out after 0 s");
    }

    #[test]
    fn a_child_that_cannot_start_failed_and_a_table_cell_never_breaks() {
        let r = run_point(
            "p",
            Command::new("/nonexistent/phalanx-bench"),
            Duration::from_secs(1),
        );
        assert!(matches!(&r.outcome, Outcome::Failed(w) if w.contains("could not start")));
        assert_eq!(tail("a\n\nb | c\nd\n", 2), "b \\| c / d");
    }
}
