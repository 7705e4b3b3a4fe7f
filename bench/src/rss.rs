//! Resident memory of the schedulers under test, read from `/proc/PID/status` (Linux):
//! `phalanx-bench kube` samples the phalanx replicas it started, or `--rss-pid` (a
//! scheduler already running, such as kube-scheduler), through the run (issue 16 item 5).
//!
//! `VmRSS` is sampled rather than `VmHWM` read once: a process that ran earlier benches
//! (a kube-scheduler left up between runs) has a high-water mark from those, and the
//! question is what this cluster size costs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The `VmRSS` line of a `/proc/PID/status` text, in KiB.
pub fn parse_vm_rss_kib(status: &str) -> Option<u64> {
    parse_status_kib(status, "VmRSS")
}

/// The line `FIELD:  N kB` of a `/proc/PID/status` text, in KiB.
pub fn parse_status_kib(status: &str, field: &str) -> Option<u64> {
    let line = status
        .lines()
        .find(|l| l.strip_prefix(field).is_some_and(|r| r.starts_with(':')))?;
    let mut words = line.split_whitespace().skip(1);
    let value: u64 = words.next()?.parse().ok()?;
    (words.next() == Some("kB")).then_some(value)
}

/// This process's peak resident set (`VmHWM`), in KiB: what one `phalanx-bench shards
/// --json` run cost at most, read just before it exits (the suite runs each measurement
/// point as a process of its own, so the peak is that point's alone).
pub fn own_peak_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_status_kib(&status, "VmHWM")
}

/// `VmRSS` of `pid` now, in KiB; `None` once it has exited.
pub fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_vm_rss_kib(&status)
}

/// The largest and the last `VmRSS` of each process, over the samples taken.
#[derive(Debug, Default)]
pub struct RssSampler {
    /// (pid, largest KiB, last KiB).
    seen: Vec<(u32, u64, u64)>,
    samples: usize,
}

/// What a sampler saw: the largest last figure and the largest peak over its processes
/// (with several replicas, the figure of the replica that used the most: per replica).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RssReport {
    pub end_mib: f64,
    pub peak_mib: f64,
    pub samples: usize,
}

/// How often the bench's wait loop samples.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);

impl RssSampler {
    pub fn new(pids: impl IntoIterator<Item = u32>) -> Self {
        Self {
            seen: pids.into_iter().map(|p| (p, 0, 0)).collect(),
            samples: 0,
        }
    }

    /// Reads every process once; one that has exited keeps its last figures.
    pub fn sample(&mut self) {
        self.record(vm_rss_kib);
    }

    fn record(&mut self, mut read: impl FnMut(u32) -> Option<u64>) {
        for (pid, max, last) in &mut self.seen {
            if let Some(kib) = read(*pid) {
                *max = (*max).max(kib);
                *last = kib;
            }
        }
        self.samples += 1;
    }

    /// Forgets the largest figures and the count of samples: the next report's start from
    /// each process's last figure.
    fn restart(&mut self) {
        for (_, max, last) in &mut self.seen {
            *max = *last;
        }
        self.samples = 0;
    }

    /// `None` when there is no process to watch or no sample was read.
    pub fn report(&self) -> Option<RssReport> {
        let mib = |kib: u64| kib as f64 / 1024.0;
        let end = self.seen.iter().map(|s| s.2).max()?;
        let peak = self.seen.iter().map(|s| s.1).max()?;
        (peak > 0).then(|| RssReport {
            end_mib: mib(end),
            peak_mib: mib(peak),
            samples: self.samples,
        })
    }
}

/// A sampler on a thread of its own, so that the bench's blocking phases (creating
/// 20,000 pods takes minutes) are sampled too.
#[derive(Debug)]
pub struct Background {
    stop: Arc<AtomicBool>,
    sampler: Arc<Mutex<RssSampler>>,
    thread: JoinHandle<()>,
}

impl Background {
    pub fn start(sampler: RssSampler) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = Arc::new(Mutex::new(sampler));
        let (stopped, sampling) = (stop.clone(), sampler.clone());
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                sampling.lock().unwrap_or_else(|e| e.into_inner()).sample();
                std::thread::sleep(SAMPLE_EVERY);
            }
        });
        Self {
            stop,
            sampler,
            thread,
        }
    }

    /// The report since the start or the last call, after one more sample; the next
    /// report's largest figures start from the last ones (a wave of `kube`'s
    /// `measure_waves` reports its own peak).
    pub fn take_report(&self) -> Option<RssReport> {
        let mut sampler = self.sampler.lock().unwrap_or_else(|e| e.into_inner());
        sampler.sample();
        let report = sampler.report();
        sampler.restart();
        report
    }

    /// Stops sampling after one last sample.
    pub fn finish(self) -> RssSampler {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        let mut sampler =
            std::mem::take(&mut *self.sampler.lock().unwrap_or_else(|e| e.into_inner()));
        sampler.sample();
        sampler
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_in_kib_and_anything_else_is_none() {
        let status = "Name:\tphalanx\nVmHWM:\t  90000 kB\nVmRSS:\t   81234 kB\nThreads:\t9\n";
        assert_eq!(parse_vm_rss_kib(status), Some(81234));
        assert_eq!(parse_vm_rss_kib("Name:\tx\n"), None);
        assert_eq!(parse_vm_rss_kib("VmRSS:\t12 MB\n"), None);
        assert_eq!(parse_vm_rss_kib("VmRSS:\tlots kB\n"), None);
        assert_eq!(parse_status_kib(status, "VmHWM"), Some(90000));
        // A field whose name only starts the same is another field.
        assert_eq!(parse_status_kib("VmHWMx:\t5 kB\n", "VmHWM"), None);
        assert!(own_peak_kib().is_some_and(|k| k > 0));
    }

    #[test]
    fn the_report_is_the_largest_process_at_its_peak_and_at_the_end() {
        let mut s = RssSampler::new([1, 2]);
        assert_eq!(s.report(), None, "nothing sampled yet");
        let rounds = [
            [(1, 1024), (2, 4096)],
            [(1, 2048), (2, 8192)],
            [(1, 3072), (2, 2048)],
        ];
        for round in rounds {
            s.record(|pid| round.iter().find(|(p, _)| *p == pid).map(|(_, k)| *k));
        }
        let r = s.report().unwrap();
        assert_eq!((r.end_mib, r.peak_mib, r.samples), (3.0, 8.0, 3));
        // A process that exited keeps what it showed last.
        s.record(|pid| (pid == 1).then_some(1024));
        assert_eq!(s.report().unwrap().end_mib, 2.0);
        // After a restart the largest figure is the next samples' (or the last one).
        s.restart();
        s.record(|pid| Some(if pid == 1 { 3072 } else { 1024 }));
        let r = s.report().unwrap();
        assert_eq!((r.end_mib, r.peak_mib, r.samples), (3.0, 3.0, 1));
    }

    #[test]
    fn this_process_has_a_resident_set_and_the_background_sampler_reads_it() {
        assert!(vm_rss_kib(std::process::id()).is_some_and(|k| k > 0));
        let sampler = Background::start(RssSampler::new([std::process::id()])).finish();
        let r = sampler.report().expect("sampled");
        assert!(
            r.samples >= 1 && r.end_mib > 0.0 && r.peak_mib >= r.end_mib,
            "{r:?}"
        );
    }
}
