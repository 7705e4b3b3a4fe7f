//! The end-to-end tests on a running testbed (`#[ignore]`d; docs/testbed.md), in one test
//! binary: `cargo test --workspace --test e2e -- --ignored e2e_kube::` runs one of them.

// Helpers the modules share (each file used to include its own copy).
mod testbed;

#[path = "e2e_explain.rs"]
mod e2e_explain;
#[path = "e2e_jobs.rs"]
mod e2e_jobs;
#[path = "e2e_kube.rs"]
mod e2e_kube;
#[path = "e2e_shards.rs"]
mod e2e_shards;
