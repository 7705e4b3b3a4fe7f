//! Every integration test of the scheduler crate that needs no testbed, in ONE test binary.
//! Each file under tests/ stays a module with its own name (`cargo test --test integration
//! cli::`); one binary is linked instead of one per file, which on a 2-core CI machine was
//! minutes of linking copies of the same dependencies (Cargo.toml: `autotests = false`).

// Helpers the modules share (each file used to include its own copy).
mod common;
mod testbed;

#[path = "cli.rs"]
mod cli;
#[path = "cli_bounded_runs.rs"]
mod cli_bounded_runs;
#[path = "cli_explain_and_fairness.rs"]
mod cli_explain_and_fairness;
#[path = "coord_tls.rs"]
mod coord_tls;
#[path = "crds.rs"]
mod crds;
#[path = "failover.rs"]
mod failover;
#[path = "fairness.rs"]
mod fairness;
#[path = "helm_chart.rs"]
mod helm_chart;
#[path = "ledger_proposal_limits.rs"]
mod ledger_proposal_limits;
#[path = "metrics_exposition.rs"]
mod metrics_exposition;
#[path = "preempt_reclaim.rs"]
mod preempt_reclaim;
#[path = "random_workloads.rs"]
mod random_workloads;
#[path = "scenarios.rs"]
mod scenarios;
#[path = "shard_fault_sweep.rs"]
mod shard_fault_sweep;
#[path = "shard_faults.rs"]
mod shard_faults;
#[path = "volcano_examples.rs"]
mod volcano_examples;
