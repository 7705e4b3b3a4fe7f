//! Where a `kube` run's CPU goes: the CPU time each process of the run used (the API
//! server, etcd and kwok of the testbed, the scheduler under test, this bench), and how
//! busy the whole machine was, over the same span as the run's pods/s.
//!
//! Issue 16 asks a missed goal to carry a profile that says where the time goes. On a real
//! API server the question is whether the scheduler or the machine sets the pace: when
//! the listed processes together keep every core busy, more replicas cannot bind faster,
//! and the table says which process took the cores.
//!
//! Read from `/proc/PID/stat` (`utime` + `stime`, the whole process: the threads that
//! exited are counted into it by the kernel) and `/proc/stat` (Linux). A process that is
//! gone by the end keeps no figure: the bench reads the scheduler's before stopping it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// `utime + stime` of a `/proc/PID/stat` text, in clock ticks. The command name (field 2)
/// is in parentheses and may hold spaces or parentheses itself, so fields are counted
/// from the last `)`.
pub fn parse_stat_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the name: state (field 3) ... utime (14), stime (15).
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The busy and the total clock ticks of all CPUs, from the first line of `/proc/stat`
/// (`cpu  user nice system idle iowait irq softirq steal ...`). Guest time is already
/// counted in user time, so it is not added again.
pub fn parse_machine_ticks(proc_stat: &str) -> Option<(u64, u64)> {
    let line = proc_stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|w| w.parse().ok())
        .collect::<Option<_>>()?;
    let [user, nice, system, idle, iowait, irq, softirq, steal] = v.try_into().ok()?;
    let busy = user + nice + system + irq + softirq + steal;
    Some((busy, busy + idle + iowait))
}

fn process_ticks(pid: u32) -> Option<u64> {
    parse_stat_cpu_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn machine_ticks() -> Option<(u64, u64)> {
    parse_machine_ticks(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// The processes the testbed script started and still runs, by name (`etcd`,
/// `kube-apiserver`, `kwok`, ...): each pid file in its run directory whose process still
/// runs the binary recorded beside it (the script's own check), so a reused pid is never
/// counted.
pub fn testbed_processes() -> Vec<(String, u32)> {
    let run = std::env::var_os("PHALANX_TESTBED_DIR")
        .map_or_else(|| PathBuf::from("/tmp/phalanx-testbed"), PathBuf::from);
    testbed_processes_in(&run.join("pids"))
}

fn testbed_processes_in(pids: &Path) -> Vec<(String, u32)> {
    let Ok(entries) = std::fs::read_dir(pids) else {
        return Vec::new();
    };
    let mut out: Vec<(String, u32)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            if name.ends_with(".exe") {
                return None;
            }
            let pid: u32 = std::fs::read_to_string(e.path())
                .ok()?
                .trim()
                .parse()
                .ok()?;
            let recorded = std::fs::read_to_string(pids.join(format!("{name}.exe"))).ok()?;
            let running = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
            (running == Path::new(recorded.trim())).then_some((name, pid))
        })
        .collect();
    out.sort();
    out
}

/// CPU time of named groups of processes from [`CpuMeter::start`] to [`CpuMeter::finish`].
#[derive(Debug)]
pub struct CpuMeter {
    /// (group, pid, ticks at the start).
    procs: Vec<(String, u32, u64)>,
    machine: Option<(u64, u64)>,
    started: Instant,
}

/// What one run's processes used.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuReport {
    /// Wall time measured over.
    pub wall: Duration,
    /// CPU seconds per group, in the order the groups were first named.
    pub groups: Vec<(String, f64)>,
    /// CPU seconds the whole machine was busy (every process, ours or not), and its cores.
    pub machine_busy_s: Option<f64>,
    pub cores: usize,
}

impl CpuMeter {
    /// Starts counting for `procs` (group name, pid); a pid whose figures cannot be read
    /// is left out.
    pub fn start(procs: impl IntoIterator<Item = (String, u32)>) -> CpuMeter {
        CpuMeter {
            procs: procs
                .into_iter()
                .filter_map(|(g, pid)| Some((g, pid, process_ticks(pid)?)))
                .collect(),
            machine: machine_ticks(),
            started: Instant::now(),
        }
    }

    /// Reads every process again; call it before stopping any of them.
    pub fn finish(self) -> CpuReport {
        let per_s = rustix::param::clock_ticks_per_second().max(1) as f64;
        let mut groups: Vec<(String, f64)> = Vec::new();
        for (group, pid, start) in self.procs {
            let Some(now) = process_ticks(pid) else {
                continue;
            };
            let s = now.saturating_sub(start) as f64 / per_s;
            match groups.iter_mut().find(|(g, _)| *g == group) {
                Some((_, total)) => *total += s,
                None => groups.push((group, s)),
            }
        }
        let machine_busy_s = self
            .machine
            .zip(machine_ticks())
            .map(|((b0, _), (b1, _))| b1.saturating_sub(b0) as f64 / per_s);
        CpuReport {
            wall: self.started.elapsed(),
            groups,
            machine_busy_s,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

impl CpuReport {
    /// CPU seconds of `group`, 0 when it was not measured.
    pub fn of(&self, group: &str) -> f64 {
        self.groups
            .iter()
            .find(|(g, _)| g == group)
            .map_or(0.0, |(_, s)| *s)
    }

    /// How many cores the machine kept busy on average over the run.
    pub fn busy_cores(&self) -> Option<f64> {
        Some(self.machine_busy_s? / self.wall.as_secs_f64().max(1e-9))
    }

    /// One line: each group's CPU seconds and its share of the machine's busy time, then
    /// the machine's average busy cores out of its cores.
    pub fn summary(&self) -> String {
        let mut parts: Vec<String> = self
            .groups
            .iter()
            .map(|(g, s)| match self.machine_busy_s {
                Some(m) if m > 0.0 => format!("{g} {s:.1} s ({:.0} %)", 100.0 * s / m),
                _ => format!("{g} {s:.1} s"),
            })
            .collect();
        if let (Some(m), Some(cores)) = (self.machine_busy_s, self.busy_cores()) {
            let listed: f64 = self.groups.iter().map(|(_, s)| s).sum();
            parts.push(format!("others {:.1} s", (m - listed).max(0.0)));
            parts.push(format!(
                "machine busy {cores:.2} of {} cores over {:.1} s",
                self.cores,
                self.wall.as_secs_f64()
            ));
        }
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_user_plus_system_ticks_even_with_a_name_holding_spaces_and_parens() {
        let stat = "4242 (kube (api) server) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    250 75 0 0 20 0 12 0 100 0 0";
        assert_eq!(parse_stat_cpu_ticks(stat), Some(325));
        assert_eq!(parse_stat_cpu_ticks("4242 (x) S 1"), None);
        assert_eq!(parse_stat_cpu_ticks("no parenthesis"), None);
    }

    #[test]
    fn the_machine_line_counts_busy_ticks_without_idle_or_iowait() {
        let text = "cpu  100 5 50 1000 20 3 2 7 0 0\ncpu0 50 2 25 500 10 1 1 3 0 0\n";
        assert_eq!(parse_machine_ticks(text), Some((167, 1187)));
        assert_eq!(parse_machine_ticks("cpu  1 2 3\n"), None);
    }

    #[test]
    fn this_process_uses_cpu_and_the_meter_counts_it_in_its_group() {
        let me = std::process::id();
        let meter = CpuMeter::start([("bench".to_string(), me)]);
        let before = process_ticks(me).expect("this process's stat");
        // Work until the kernel has counted a tick of it (not for a fixed time: on a busy
        // machine a short loop may be counted none); the bound only stops a broken clock.
        let mut x = 0u64;
        let started = Instant::now();
        while process_ticks(me) == Some(before) && started.elapsed() < Duration::from_secs(60) {
            for i in 0..100_000u64 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
            }
        }
        std::hint::black_box(x);
        let report = meter.finish();
        assert!(report.of("bench") > 0.0, "{report:?}");
        assert_eq!(report.of("absent"), 0.0);
        assert!(report.summary().contains("bench "), "{}", report.summary());
    }

    #[test]
    fn only_a_testbed_pid_still_running_its_recorded_binary_is_listed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let me = std::process::id();
        let exe = std::fs::read_link("/proc/self/exe").expect("own exe");
        std::fs::write(dir.path().join("etcd"), format!("{me}\n")).expect("write");
        std::fs::write(dir.path().join("etcd.exe"), format!("{}\n", exe.display())).expect("w");
        // The same pid recorded for another binary: a reused pid, not ours.
        std::fs::write(dir.path().join("kwok"), format!("{me}\n")).expect("write");
        std::fs::write(dir.path().join("kwok.exe"), "/usr/bin/not-kwok\n").expect("write");
        assert_eq!(
            testbed_processes_in(dir.path()),
            vec![("etcd".to_string(), me)]
        );
        assert!(testbed_processes_in(&dir.path().join("absent")).is_empty());
    }
}
