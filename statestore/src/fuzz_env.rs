//! How many cases the property tests of the workspace run, and from which seed: read
//! from the environment by each crate's `proptest_config` (the crates' test-only helpers),
//! so one command runs the short CI run, a longer run, or a long run from a new seed
//! (`bench/fuzz.sh`, docs/security.md).

/// `PROPTEST_CASES` cases when set, else `default_cases`; and `test_seed`, the test's own
/// fixed seed, mixed with `PHALANX_FUZZ_SEED` when that is set. Unset, every run draws the
/// same cases (a CI failure is found again by the same command); set, a long run explores
/// new inputs, and the same value finds a failure again.
pub fn cases_and_seed(default_cases: u32, test_seed: u64) -> (u32, u64) {
    let number = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    let cases = number("PROPTEST_CASES")
        .and_then(|c| u32::try_from(c).ok())
        .unwrap_or(default_cases);
    let seed = match number("PHALANX_FUZZ_SEED") {
        Some(run) => mix(test_seed, run),
        None => test_seed,
    };
    (cases, seed)
}

/// SplitMix64's finaliser over the two seeds: runs 1 and 2 draw unrelated cases.
fn mix(test_seed: u64, run: u64) -> u64 {
    let mut z = test_seed ^ run.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    #[test]
    fn run_seeds_give_each_test_different_seeds_and_the_same_seed_twice() {
        let (a, b) = (super::mix(7, 1), super::mix(7, 2));
        assert_ne!(a, b);
        assert_ne!(a, super::mix(8, 1));
        assert_eq!(a, super::mix(7, 1));
    }
}
