//! `phalanx-bench suite [--quick]`: every benchmark this machine can run, one after the
//! other in one invocation, written into the generated sections of `docs/benchmarks.md`
//! (issue 16 item 7). The parts:
//!
//! - `cycle`: one scheduling cycle (`cycle.rs`, the `cycle` subcommand's own code);
//! - `sustained`: the simulator's sustained run at R=1 and R=3 (`shards.rs`), judged
//!   against the goals;
//! - `growth`: pods/s and peak memory over nodes × pods × R, a table, a CSV and two
//!   log-log plots;
//! - `kube`: the testbed (a real API server), when its tools are built: the trivial
//!   binder, kube-scheduler, kube-scheduler with native gang scheduling and phalanx ×1 /
//!   ×3 side by side (`kube.rs`);
//! - `memory`: one phalanx replica's resident memory beside kube-scheduler's on testbeds
//!   of several node and pod counts (`suite/memory.rs`).
//!
//! Simulator points run as child processes (`suite/child.rs`) so that each one's peak
//! memory is its own. `--quick` runs the same parts at small sizes (the CI smoke test) and
//! must be given `--out`, so that it can never overwrite the committed figures.

mod child;
mod goals;
mod machine;
mod markers;
mod memory;
mod plan;
mod plot;
mod progress;
mod sim;
mod testbed;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Result, bail};
use clap::Args;

pub use plan::Plan;

#[derive(Args, Debug, Clone)]
pub struct SuiteArgs {
    /// The same parts at small sizes (under 10 minutes with debug binaries on 2 cores);
    /// needs --out, so a smoke run never rewrites the committed docs/benchmarks.md.
    #[arg(long)]
    pub quick: bool,
    /// The Markdown file whose generated sections are rewritten (created, holding only
    /// those sections, if it does not exist). Default docs/benchmarks.md; required with
    /// --quick.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Where the growth part's CSV and SVG plots go. Default: `bench/` beside --out
    /// (docs/bench for docs/benchmarks.md).
    #[arg(long)]
    pub plots_dir: Option<PathBuf>,
    /// The `phalanx` binary the kube part starts as `phalanx serve` (default: `phalanx`
    /// beside this binary). Without it the kube part is not run.
    #[arg(long)]
    pub phalanx: Option<PathBuf>,
    /// The parts to run, comma separated: cycle, sustained, growth, kube, memory (default
    /// all).
    /// Sections of parts left out are kept as they are.
    #[arg(long)]
    pub only: Option<String>,
    /// Seconds one simulator point may run before it is stopped and reported as timed
    /// out (default 3600, 300 with --quick).
    #[arg(long)]
    pub point_timeout: Option<u64>,
    /// The memory part's node counts, comma separated (default 500,2000,5000; 50 with
    /// --quick): to measure one size again without the hour the whole part takes.
    #[arg(long, value_delimiter = ',')]
    pub memory_nodes: Option<Vec<usize>>,
    /// The memory part's pod counts, comma separated and growing: the waves of each run
    /// (default 20000,100000; 200,500 with --quick).
    #[arg(long, value_delimiter = ',')]
    pub memory_pods: Option<Vec<usize>>,
}

/// A part of the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Cycle,
    Sustained,
    Growth,
    Kube,
    Memory,
}

impl Part {
    pub const ALL: [Part; 5] = [
        Part::Cycle,
        Part::Sustained,
        Part::Growth,
        Part::Kube,
        Part::Memory,
    ];

    /// Its name in `--only` and in its section's markers.
    pub fn name(self) -> &'static str {
        match self {
            Part::Cycle => "cycle",
            Part::Sustained => "sustained",
            Part::Growth => "growth",
            Part::Kube => "kube",
            Part::Memory => "memory",
        }
    }
}

/// A generated section, and what in it must fail the suite (violations, gangs left
/// pending, a testbed that was already up): written first, then reported.
#[derive(Debug, Default)]
pub struct Section {
    pub body: String,
    pub problems: Vec<String>,
}

/// The name of the header section's markers.
const RUN_SECTION: &str = "run";

/// Runs the suite: checks everything it can before measuring (the output file's markers,
/// python3 for the plots), runs the parts, writes the file, and fails when a part found a
/// problem, after writing what it has.
pub fn run(plan: &Plan, argv: &[String]) -> Result<()> {
    // A malformed file is found now, not after an hour of measurements.
    let existing = markers::read_or_empty(&plan.out)?;
    let probe: Vec<(String, String)> = std::iter::once(RUN_SECTION)
        .chain(plan.parts.iter().map(|p| p.name()))
        .map(|n| (n.to_string(), String::new()))
        .collect();
    markers::apply(&existing, &probe)
        .map_err(|e| anyhow::anyhow!("--out {}: {e}", plan.out.display()))?;
    if plan.parts.contains(&Part::Growth) {
        plot::check_python()?;
    }

    let started = Instant::now();
    let stamp = plan::Stamp {
        date: machine::now_utc(),
        commit: machine::git_commit(),
        sizes: if plan.quick {
            "--quick sizes"
        } else {
            "full sizes"
        },
        profile: machine::build_profile(),
    };
    let load_start = machine::load_average();
    let progress = progress::Progress::new(plan.steps());
    let mut sections = Vec::new();
    let mut problems = Vec::new();
    for &part in &plan.parts {
        let section = match part {
            Part::Cycle => sim::cycle(plan, &stamp, &progress),
            Part::Sustained => sim::sustained(plan, &stamp, &progress),
            Part::Growth => sim::growth(plan, &stamp, &progress),
            Part::Kube => testbed::kube(plan, &stamp, &progress),
            Part::Memory => memory::memory(plan, &stamp, &progress),
        };
        problems.extend(
            section
                .problems
                .iter()
                .map(|p| format!("{}: {p}", part.name())),
        );
        sections.push((part.name().to_string(), section.body));
    }
    progress.finish();
    let header = plan::header(
        plan,
        &stamp,
        &machine::command_line(argv),
        &load_start,
        &machine::load_average(),
        started.elapsed(),
    );
    sections.insert(0, (RUN_SECTION.to_string(), header));
    // Read again: the file may have been edited by hand while the suite ran.
    let text = markers::apply(&markers::read_or_empty(&plan.out)?, &sections)?;
    markers::write_atomically(&plan.out, &text)?;
    eprintln!(
        "suite: wrote {} in {}",
        plan.out.display(),
        plan::duration(started.elapsed())
    );
    if !problems.is_empty() {
        bail!(
            "the suite found {} problem(s):\n  {}",
            problems.len(),
            problems.join("\n  ")
        );
    }
    Ok(())
}
