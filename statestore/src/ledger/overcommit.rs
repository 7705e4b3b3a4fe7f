//! `OvercommitFactor`: how far cpu and memory may be committed beyond allocatable.

use serde::{Deserialize, Serialize};

use super::resource_vec::{CPU, MEMORY};

/// A ratio of integers `numerator / denominator` (>= 1) applied to cpu and memory only.
/// Extended resources (`nvidia.com/gpu`, ...) are never overcommitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OvercommitFactor {
    /// Numerator of the ratio.
    pub numerator: u32,
    /// Denominator of the ratio, > 0.
    pub denominator: u32,
}

impl Default for OvercommitFactor {
    fn default() -> Self {
        Self::NONE
    }
}

impl OvercommitFactor {
    /// No overcommit (1/1).
    pub const NONE: Self = Self {
        numerator: 1,
        denominator: 1,
    };

    /// True when the ratio is well formed: denominator > 0 and ratio >= 1.
    pub fn is_valid(&self) -> bool {
        self.denominator > 0 && self.numerator >= self.denominator
    }

    /// True for the resources this factor applies to (cpu and memory).
    pub fn applies_to(resource: &str) -> bool {
        resource == CPU || resource == MEMORY
    }

    /// The committable limit for `resource` on a node whose allocatable is `allocatable`:
    /// `floor(allocatable * n / d)` for cpu/memory, `allocatable` otherwise. Computed in
    /// `i128` and clamped to `i64::MAX`, so it never overflows.
    pub fn limit(&self, resource: &str, allocatable: i64) -> i64 {
        if !Self::applies_to(resource) || !self.is_valid() {
            return allocatable;
        }
        let scaled =
            i128::from(allocatable) * i128::from(self.numerator) / i128::from(self.denominator);
        i64::try_from(scaled).unwrap_or(if scaled > 0 { i64::MAX } else { i64::MIN })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_are_never_overcommitted_but_cpu_is_scaled_down_to_an_integer() {
        let f = OvercommitFactor {
            numerator: 3,
            denominator: 2,
        };
        assert_eq!(f.limit("cpu", 1001), 1501);
        assert_eq!(f.limit("memory", 10), 15);
        assert_eq!(f.limit("nvidia.com/gpu", 8), 8);
        assert_eq!(f.limit("cpu", i64::MAX), i64::MAX);
    }

    #[test]
    fn a_factor_below_one_or_with_zero_denominator_is_invalid() {
        assert!(
            !OvercommitFactor {
                numerator: 1,
                denominator: 2
            }
            .is_valid()
        );
        assert!(
            !OvercommitFactor {
                numerator: 1,
                denominator: 0
            }
            .is_valid()
        );
        assert!(OvercommitFactor::NONE.is_valid());
    }
}
