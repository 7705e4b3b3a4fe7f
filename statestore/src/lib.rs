//! phalanx-statestore: the replicated allocation ledger.
//!
//! See `README.md` beside this crate for the diagram, the commands and the invariants.

// openraft's trait signatures fix `StorageError` / `RaftError` as the error types; they
// are large, and boxing them would only add conversions at every trait boundary.
#![allow(clippy::result_large_err)]

pub mod client;
pub mod cluster;
pub mod expiry;
pub mod fuzz_env;
pub mod ledger;
pub mod log_store;
pub mod mirror;
pub mod network;
pub mod raft_types;
pub mod replica;
pub mod state_machine;
pub mod tls;

pub use client::{ClientConfig, ClientError, Committed, LedgerClient};
pub use cluster::{LocalCluster, start_local_cluster, start_local_cluster_with};
pub use ledger::{
    GangDecision, GangOutcome, GangPlacement, LedgerCommand, LedgerResponse, LedgerState,
    OvercommitFactor, PodPlacement, Refusal, ResourceVec, apply,
};
pub use mirror::{LedgerMirror, RefreshStats};
pub use network::NetworkFaults;
pub use network::wire::ledger_read::LedgerRead;
pub use raft_types::{BatchResponse, EncodedBatch, LedgerBatch, MAX_COMMANDS_PER_BATCH};
pub use replica::{
    ReplicaConfig, ReplicaError, ReplicaHandle, start_replica, start_replica_over,
    start_replica_with, start_replica_with_clock,
};
pub use tls::{TlsError, TlsFiles, TlsState, Transport};

/// The property tests' configuration: `default_cases` cases (kept small so the unit tests
/// stay fast), or `PROPTEST_CASES`, and a fixed seed, or one mixed with `PHALANX_FUZZ_SEED`
/// (`fuzz_env::cases_and_seed`).
#[cfg(test)]
pub(crate) fn proptest_config(default_cases: u32, seed: u64) -> proptest::test_runner::Config {
    let (cases, seed) = crate::fuzz_env::cases_and_seed(default_cases, seed);
    proptest::test_runner::Config {
        cases,
        rng_seed: proptest::test_runner::RngSeed::Fixed(seed),
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}
