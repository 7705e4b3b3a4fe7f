//! phalanx: a gang scheduler for Kubernetes that runs as several active replicas.
//!
//! The crate is laid out as the architecture is:
//! - [`model`]: exact resource arithmetic and the objects the scheduler reasons about;
//! - [`manifest`]: Kubernetes / Volcano YAML and `volcano-scheduler.conf` into the model;
//! - [`framework`]: one cycle's [`framework::Session`], the [`framework::Statement`] that
//!   makes gangs all-or-nothing, plugin hooks and tiers;
//! - [`plugins`] and [`actions`]: Volcano-compatible scheduling policy;
//! - [`cluster`]: the [`cluster::Cluster`] seam, with the embedded simulator behind it;
//! - [`replica`]: the replica engine every driver shares: the 2PC pump and the pure
//!   routing and commit-then-bind functions;
//! - [`simulate`]: the `phalanx simulate` driver (scenarios, the demo, synthetic runs).

pub mod actions;
pub mod cluster;
pub mod coord;
pub mod framework;
pub mod invariants;
pub mod ledger;
pub mod manifest;
pub mod model;
pub mod observe;
pub mod plugins;
pub mod ports;
pub mod process;
pub mod replica;
pub mod serve;
pub mod shard;
pub mod simulate;

/// A map on a hot path keyed by names (pods, nodes, gangs): foldhash's per-process seeded
/// hasher instead of SipHash, which was 5–6 % of a sustained simulator run's samples
/// (docs/adr/0005-foldhash.md says why this trade is acceptable).
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A set on a hot path; see [`FastMap`].
pub type FastSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;

/// The decoders' property tests' configuration: `default_cases` cases, or `PROPTEST_CASES`
/// when set, and a fixed seed, or one mixed with `PHALANX_FUZZ_SEED`
/// (`phalanx_statestore::fuzz_env::cases_and_seed`).
#[cfg(test)]
pub(crate) fn proptest_config(default_cases: u32, seed: u64) -> proptest::test_runner::Config {
    let (cases, seed) = phalanx_statestore::fuzz_env::cases_and_seed(default_cases, seed);
    proptest::test_runner::Config {
        cases,
        rng_seed: proptest::test_runner::RngSeed::Fixed(seed),
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}
