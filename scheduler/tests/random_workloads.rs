//! Seeded random clusters and workloads, run to the end with the default configuration
//! (enqueue, allocate, preempt, reclaim, backfill): whatever the mix of gang sizes, queues,
//! weights and run times, every invariant holds after every cycle, the ledger agrees with the
//! cluster, no gang is ever partly placed, and the run ends (quiescent). A failing case prints
//! its seed and parameters; rerun it with the same values.

use phalanx_scheduler::framework::SchedulerConf;
use phalanx_scheduler::simulate::driver::{DriverOptions, drive};
use phalanx_scheduler::simulate::synthetic::{SyntheticSpec, generate};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, .. ProptestConfig::default() })]

    #[test]
    fn random_workloads_keep_every_invariant_and_end(
        seed in 0u64..1_000_000,
        nodes in 1usize..12,
        gpus in 1i64..9,
        jobs in 1usize..40,
        queue_weights in proptest::collection::vec(1u32..5, 0..4),
        durations in proptest::option::of((1u64..5, 5u64..20)),
    ) {
        let mut spec = SyntheticSpec::new(nodes, gpus, jobs, seed);
        spec.queues = queue_weights
            .iter()
            .enumerate()
            .map(|(i, w)| (format!("q{i}"), *w))
            .collect();
        spec.duration_ms = durations.map(|(lo, hi)| (lo * 1000, hi * 1000));
        let w = generate(&spec);
        let mut sim = w.into_sim();
        let opts = DriverOptions { max_cycles: 2_000, ..DriverOptions::default() };
        let outcome = drive(&mut sim, &SchedulerConf::volcano_default(), &opts, |_| {});
        prop_assert!(outcome.violations.is_empty(), "{:?}", outcome.violations);
        prop_assert!(outcome.ledger_errors.is_empty(), "{:?}", outcome.ledger_errors);
        prop_assert!(outcome.bind_errors.is_empty(), "{:?}", outcome.bind_errors);
        prop_assert!(outcome.quiescent, "still changing after {} cycles", outcome.cycles);
    }
}
