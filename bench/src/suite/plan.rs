//! What a suite run measures: the parts, the sizes (full or `--quick`), where it writes.
//! Every flag is checked here, before anything runs, and a bad one is named with its value.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Part, SuiteArgs};

/// Sizes of the simulator parts.
#[derive(Debug, Clone)]
pub struct SimSizes {
    pub nodes: Vec<usize>,
    pub pods: Vec<usize>,
    pub replicas: Vec<u64>,
    pub shards: u32,
}

/// Sizes of the testbed part.
#[derive(Debug, Clone)]
pub struct KubeSizes {
    pub nodes: usize,
    pub pods: usize,
    pub gang: usize,
    pub kube_qps: f64,
    pub kube_burst: u32,
    pub bind_workers: usize,
    /// The ×1 and ×3 rows' shards and queues (docs/benchmarks.md's scale-out section: a
    /// queue is scheduled by its shard's owner, so both runs spread the same queues).
    pub shards: u32,
    pub queues: usize,
    pub timeout: Duration,
}

impl KubeSizes {
    /// The client budget and workload shape (gangs of 10, 1000/2000 QPS, 64 bind
    /// workers; phalanx rows with 6 shards and 12 queues) at `nodes` × `pods`: the quick
    /// and full plans and the memory part differ only in size and timeout.
    pub fn at(nodes: usize, pods: usize, timeout: Duration) -> KubeSizes {
        KubeSizes {
            nodes,
            pods,
            gang: 10,
            kube_qps: 1000.0,
            kube_burst: 2000,
            bind_workers: 64,
            shards: 6,
            queues: 12,
            timeout,
        }
    }
}

/// Sizes of the memory part: per node count a phalanx ×1 run and a kube-scheduler run,
/// each on a testbed of its own, growing the cluster through the pod counts (increasing,
/// each a whole number of gangs but the last) in waves.
#[derive(Debug, Clone)]
pub struct MemorySizes {
    pub nodes: Vec<usize>,
    pub pods: Vec<usize>,
    /// Each testbed node's pod and cpu capacity (`PHALANX_NODE_PODS`, `PHALANX_NODE_CPU`):
    /// 100,000 pods of 1 cpu need 200 a node on 500 nodes, above the script's 110 / 128.
    pub node_pods: usize,
    pub node_cpu: usize,
    /// One wave's limit, from its first create.
    pub timeout: Duration,
}

impl MemorySizes {
    /// The testbed's settings for these sizes.
    pub fn testbed_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("PHALANX_NODE_PODS", self.node_pods.to_string()),
            ("PHALANX_NODE_CPU", self.node_cpu.to_string()),
        ]
    }

    /// `--memory-nodes` and `--memory-pods` as given: node counts above zero, and pod
    /// counts that the runs can grow through in waves (`kube::check_waves`).
    fn check(&self) -> Result<(), String> {
        if self.nodes.is_empty() || self.nodes.contains(&0) {
            return Err(format!(
                "--memory-nodes {:?}: give one count or more, each above 0",
                self.nodes
            ));
        }
        let gang = KubeSizes::at(0, 0, self.timeout).gang;
        crate::kube::check_waves(&self.pods, gang)
            .map_err(|e| format!("--memory-pods {:?}: {e}", self.pods))
    }

    /// A point whose pods cannot all fit the testbed (pods of 1 cpu), named; `None` when
    /// every point fits.
    pub fn misfit(&self) -> Option<String> {
        let per_node = self.node_pods.min(self.node_cpu);
        let nodes = self.nodes.iter().min()?;
        let pods = self.pods.iter().max()?;
        (nodes * per_node < *pods).then(|| {
            format!(
                "{pods} pods do not fit {nodes} nodes of {} pods / {} cpu",
                self.node_pods, self.node_cpu
            )
        })
    }
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub quick: bool,
    pub parts: Vec<Part>,
    pub out: PathBuf,
    pub plots_dir: PathBuf,
    pub phalanx: PathBuf,
    pub point_timeout: Duration,
    pub cycle_nodes: Vec<usize>,
    pub cycle_pods: usize,
    pub cycle_repeat: usize,
    pub sustained: SimSizes,
    pub growth: SimSizes,
    pub kube: KubeSizes,
    pub memory: MemorySizes,
}

/// `--only`'s parts, in the suite's order whatever the order given.
pub fn parse_only(only: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    for word in only.split(',').map(str::trim) {
        let Some(part) = Part::ALL.into_iter().find(|p| p.name() == word) else {
            return Err(format!(
                "--only {only}: {word:?} is not a part; expected a comma-separated subset of cycle,sustained,growth,kube,memory"
            ));
        };
        parts.push(part);
    }
    Ok(Part::ALL
        .into_iter()
        .filter(|p| parts.contains(p))
        .collect())
}

/// `bench/` beside the output file: docs/bench for docs/benchmarks.md.
fn default_plots_dir(out: &Path) -> PathBuf {
    out.parent().unwrap_or(Path::new("")).join("bench")
}

impl Plan {
    pub fn from_args(a: &SuiteArgs) -> Result<Plan, String> {
        let out = match (&a.out, a.quick) {
            (Some(o), _) => o.clone(),
            (None, true) => {
                return Err("--quick needs --out FILE: a smoke run never rewrites the committed docs/benchmarks.md".into());
            }
            (None, false) => PathBuf::from("docs/benchmarks.md"),
        };
        if out.is_dir() {
            return Err(format!("--out {}: is a directory", out.display()));
        }
        let parts = match &a.only {
            Some(o) => parse_only(o)?,
            None => Part::ALL.to_vec(),
        };
        let point_timeout = match a.point_timeout {
            Some(0) => return Err("--point-timeout 0: must be at least 1 (seconds)".into()),
            Some(s) => Duration::from_secs(s),
            None => Duration::from_secs(if a.quick { 300 } else { 3600 }),
        };
        let phalanx = match &a.phalanx {
            Some(p) => p.clone(),
            None => std::env::current_exe()
                .map_err(|e| format!("where is this binary? ({e}); give --phalanx PATH"))?
                .with_file_name("phalanx"),
        };
        let plots_dir = a
            .plots_dir
            .clone()
            .unwrap_or_else(|| default_plots_dir(&out));
        let base = if a.quick { Self::quick() } else { Self::full() };
        let memory = MemorySizes {
            nodes: a.memory_nodes.clone().unwrap_or(base.memory.nodes.clone()),
            pods: a.memory_pods.clone().unwrap_or(base.memory.pods.clone()),
            ..base.memory.clone()
        };
        memory.check()?;
        Ok(Plan {
            parts,
            out,
            plots_dir,
            phalanx,
            point_timeout,
            memory,
            ..base
        })
    }

    /// The sizes.
    fn full() -> Plan {
        Plan {
            quick: false,
            cycle_nodes: vec![500, 2_000, 5_000],
            cycle_pods: 20_000,
            cycle_repeat: 5,
            sustained: SimSizes {
                nodes: vec![5_000],
                pods: vec![100_000],
                replicas: vec![1, 3],
                shards: 16,
            },
            growth: SimSizes {
                nodes: vec![1_000, 5_000, 10_000],
                pods: vec![20_000, 100_000, 200_000],
                replicas: vec![1, 3],
                shards: 16,
            },
            kube: KubeSizes::at(500, 5_000, Duration::from_secs(600)),
            // 100,000 pods are bound at 110-200 pods/s here (2,000 nodes × 20,000 pods:
            // 181 s for each scheduler, 2026-12-04; 5,000 × 100,000: phalanx 196 and
            // kube-scheduler 137 pods/s, 2026-12-05): 9 to 15 min a run; an hour a wave
            // is the limit.
            memory: MemorySizes {
                nodes: vec![500, 2_000, 5_000],
                pods: vec![20_000, 100_000],
                node_pods: 256,
                node_cpu: 256,
                timeout: Duration::from_secs(3600),
            },
            ..Self::paths()
        }
    }

    /// Small enough for the whole suite to finish in under 10 minutes with debug
    /// binaries on the 2-core CI host (measured 2026-12-03 on the shared host, load 2-6:
    /// 2 min 18 s with debug binaries, 52 s release).
    fn quick() -> Plan {
        Plan {
            quick: true,
            cycle_nodes: vec![500],
            cycle_pods: 20_000,
            cycle_repeat: 1,
            sustained: SimSizes {
                nodes: vec![500],
                pods: vec![5_000],
                replicas: vec![1, 3],
                shards: 16,
            },
            // Not fewer than 500 nodes: with 16 shards a pool of 200 nodes (100 GPUs)
            // cannot hold the largest generated gangs (64 pods × 8 GPUs), which then stay
            // pending and fail the run.
            growth: SimSizes {
                nodes: vec![500, 1_000, 2_000],
                pods: vec![2_000, 5_000],
                replicas: vec![1, 3],
                shards: 16,
            },
            kube: KubeSizes::at(50, 500, Duration::from_secs(180)),
            // Two waves, as at full size.
            memory: MemorySizes {
                nodes: vec![50],
                pods: vec![200, 500],
                node_pods: 256,
                node_cpu: 256,
                timeout: Duration::from_secs(180),
            },
            ..Self::paths()
        }
    }

    /// Placeholders `from_args` overwrites.
    fn paths() -> Plan {
        Plan {
            quick: false,
            parts: Vec::new(),
            out: PathBuf::new(),
            plots_dir: PathBuf::new(),
            phalanx: PathBuf::new(),
            point_timeout: Duration::ZERO,
            cycle_nodes: Vec::new(),
            cycle_pods: 0,
            cycle_repeat: 0,
            sustained: SimSizes {
                nodes: Vec::new(),
                pods: Vec::new(),
                replicas: Vec::new(),
                shards: 0,
            },
            growth: SimSizes {
                nodes: Vec::new(),
                pods: Vec::new(),
                replicas: Vec::new(),
                shards: 0,
            },
            kube: KubeSizes::at(0, 0, Duration::ZERO),
            memory: MemorySizes {
                nodes: Vec::new(),
                pods: Vec::new(),
                node_pods: 0,
                node_cpu: 0,
                timeout: Duration::ZERO,
            },
        }
    }

    /// Progress-bar steps: one per measurement (the testbed's start counts as one).
    pub fn steps(&self) -> u64 {
        let grid = |s: &SimSizes| s.nodes.len() * s.pods.len() * s.replicas.len();
        self.parts
            .iter()
            .map(|p| match p {
                Part::Cycle => self.cycle_nodes.len(),
                Part::Sustained => grid(&self.sustained),
                Part::Growth => grid(&self.growth),
                // The testbed's start, six rows (the trivial binder twice) and the native
                // gang row's all-or-nothing check (kube-scheduler, when it is built, costs
                // one start of 0.7 s on the 2-core host, so --quick keeps its rows too).
                Part::Kube => 8,
                // Per node count and scheduler a testbed's start and a run through every
                // pod count.
                Part::Memory => self.memory.nodes.len() * 4,
            })
            .sum::<usize>() as u64
    }
}

/// When and how a part was measured: each section opens with it, because `--only` leaves
/// the other sections as an earlier run wrote them.
#[derive(Debug, Clone)]
pub struct Stamp {
    pub date: String,
    pub commit: String,
    pub sizes: &'static str,
    pub profile: &'static str,
}

impl Stamp {
    pub fn line(&self) -> String {
        format!(
            "Measured {}, commit {}, {}, {}.",
            self.date, self.commit, self.sizes, self.profile
        )
    }
}

/// `1 h 02 min 03 s`, `4 min 05 s`, `6.1 s`.
pub fn duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{:.1} s", d.as_secs_f64()),
        60..3600 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min {:02} s", s / 3600, s / 60 % 60, s % 60),
    }
}

/// The generated part's header: the machine, the time, the commit, the command, the load.
pub fn header(
    plan: &Plan,
    stamp: &Stamp,
    command: &str,
    load_start: &str,
    load_end: &str,
    wall: Duration,
) -> String {
    let parts: Vec<&str> = plan.parts.iter().map(|p| p.name()).collect();
    format!(
        "### The last run\n\n\
         - machine: {}\n\
         - date: {}\n\
         - commit: {}\n\
         - command: `{command}`\n\
         - binaries: {}; {}\n\
         - parts run: {} (a section of a part left out is from an earlier run: its first line says when)\n\
         - load average (1, 5, 15 min): {load_start} at the start, {load_end} at the end\n\
         - wall time: {}",
        super::machine::describe(),
        stamp.date,
        stamp.commit,
        stamp.profile,
        stamp.sizes,
        parts.join(", "),
        duration(wall),
    )
}

/// Suite arguments for tests: `--quick` or not, and `--out`.
#[cfg(test)]
pub(crate) fn test_args(quick: bool, out: Option<&str>) -> SuiteArgs {
    SuiteArgs {
        quick,
        out: out.map(PathBuf::from),
        plots_dir: None,
        phalanx: None,
        only: None,
        point_timeout: None,
        memory_nodes: None,
        memory_pods: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_without_out_is_refused_naming_the_flag() {
        let e = Plan::from_args(&test_args(true, None)).unwrap_err();
        assert!(e.contains("--quick needs --out"), "{e}");
        let p = Plan::from_args(&test_args(true, Some("/tmp/x/suite.md"))).unwrap();
        assert!(p.quick);
        assert_eq!(p.plots_dir, PathBuf::from("/tmp/x/bench"));
        let full = Plan::from_args(&test_args(false, None)).unwrap();
        assert_eq!(full.out, PathBuf::from("docs/benchmarks.md"));
        assert_eq!(full.plots_dir, PathBuf::from("docs/bench"));
        assert_eq!(full.growth.nodes, [1_000, 5_000, 10_000]);
    }

    #[test]
    fn only_takes_known_parts_in_the_suites_order_and_names_a_bad_one() {
        assert_eq!(parse_only("kube,cycle").unwrap(), [Part::Cycle, Part::Kube]);
        assert_eq!(
            parse_only("memory,kube").unwrap(),
            [Part::Kube, Part::Memory]
        );
        let e = parse_only("cycle,gpus").unwrap_err();
        assert!(
            e.contains("--only cycle,gpus") && e.contains("\"gpus\""),
            "{e}"
        );
        let mut a = test_args(false, None);
        a.point_timeout = Some(0);
        assert!(
            Plan::from_args(&a)
                .unwrap_err()
                .contains("--point-timeout 0")
        );
    }

    #[test]
    fn a_step_per_measurement() {
        let mut a = test_args(true, Some("x.md"));
        a.only = Some("cycle,growth".into());
        let p = Plan::from_args(&a).unwrap();
        // 1 cycle + 3 nodes × 2 pods × 2 replica counts.
        assert_eq!(p.steps(), 1 + 12);
    }

    #[test]
    fn every_memory_point_fits_its_testbed_and_a_misfit_is_named() {
        let full = Plan::from_args(&test_args(false, None)).unwrap();
        assert_eq!(full.memory.misfit(), None);
        let mut m = full.memory.clone();
        m.node_pods = 110;
        assert_eq!(
            m.misfit().as_deref(),
            Some("100000 pods do not fit 500 nodes of 110 pods / 256 cpu")
        );
        let mut a = test_args(true, Some("x.md"));
        a.only = Some("memory".into());
        // A testbed and a run for phalanx, and another for kube-scheduler.
        assert_eq!(Plan::from_args(&a).unwrap().steps(), 4);
    }

    #[test]
    fn one_memory_size_can_be_measured_again_and_a_bad_list_names_the_flag() {
        let mut a = test_args(false, Some("/tmp/x.md"));
        a.only = Some("memory".into());
        a.memory_nodes = Some(vec![500]);
        a.memory_pods = Some(vec![20_000]);
        let p = Plan::from_args(&a).unwrap();
        assert_eq!(
            (p.memory.nodes.as_slice(), p.memory.pods.as_slice()),
            (&[500][..], &[20_000][..])
        );
        assert_eq!(
            p.memory.node_pods, 256,
            "the testbed's other settings are the part's"
        );
        assert_eq!(p.steps(), 4);
        a.memory_pods = Some(vec![100_000, 20_000]);
        let e = Plan::from_args(&a).unwrap_err();
        assert!(
            e.contains("--memory-pods [100000, 20000]") && e.contains("20000 does not exceed"),
            "{e}"
        );
        a.memory_pods = None;
        a.memory_nodes = Some(vec![0]);
        let e = Plan::from_args(&a).unwrap_err();
        assert!(e.contains("--memory-nodes [0]"), "{e}");
    }

    #[test]
    fn durations_read_as_a_person_would_write_them() {
        assert_eq!(duration(Duration::from_millis(6_120)), "6.1 s");
        assert_eq!(duration(Duration::from_secs(245)), "4 min 05 s");
        assert_eq!(duration(Duration::from_secs(3_723)), "1 h 02 min 03 s");
    }
}
