//! `ResourceVec`: exact integer quantities per resource name.
//!
//! Units are the scheduler's exact units: `cpu` in millicores, `memory` in bytes,
//! extended resources (`nvidia.com/gpu`, ...) in counts. The map never stores a zero,
//! so two vectors that mean the same thing serialize to the same bytes (determinism).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Resource name for cpu (millicores).
pub const CPU: &str = "cpu";
/// Resource name for memory (bytes).
pub const MEMORY: &str = "memory";

/// A vector of resource quantities keyed by resource name, in exact integer units.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ResourceVec(BTreeMap<String, i64>);

impl ResourceVec {
    /// The empty vector (all quantities zero).
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a vector from `(name, quantity)` pairs; zero quantities are dropped and
    /// repeated names are summed (saturating).
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, i64)>) -> Self {
        let mut v = Self::new();
        for (name, q) in pairs {
            let cur = v.get(name);
            v.set(name, cur.saturating_add(q));
        }
        v
    }

    /// The quantity of `name` (0 when absent).
    pub fn get(&self, name: &str) -> i64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// Sets the quantity of `name`; setting 0 removes the entry.
    pub fn set(&mut self, name: &str, quantity: i64) {
        if quantity == 0 {
            self.0.remove(name);
        } else {
            self.0.insert(name.to_string(), quantity);
        }
    }

    /// Iterates over the non-zero entries in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// True when every quantity is zero.
    pub fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    /// True when no quantity is negative.
    pub fn is_non_negative(&self) -> bool {
        self.0.values().all(|q| *q >= 0)
    }

    /// `self + other`, or `None` on overflow of any entry.
    pub fn checked_add(&self, other: &Self) -> Option<Self> {
        let mut out = self.clone();
        for (name, q) in other.iter() {
            let sum = out.get(name).checked_add(q)?;
            out.set(name, sum);
        }
        Some(out)
    }

    /// `self - other`, or `None` on overflow of any entry.
    pub fn checked_sub(&self, other: &Self) -> Option<Self> {
        let mut out = self.clone();
        for (name, q) in other.iter() {
            let diff = out.get(name).checked_sub(q)?;
            out.set(name, diff);
        }
        Some(out)
    }

    /// `self + other`, each entry saturating at the `i64` bounds.
    pub fn saturating_add(&self, other: &Self) -> Self {
        let mut out = self.clone();
        for (name, q) in other.iter() {
            let sum = out.get(name).saturating_add(q);
            out.set(name, sum);
        }
        out
    }

    /// `self - other`, each entry saturating at the `i64` bounds.
    pub fn saturating_sub(&self, other: &Self) -> Self {
        let mut out = self.clone();
        for (name, q) in other.iter() {
            let diff = out.get(name).saturating_sub(q);
            out.set(name, diff);
        }
        out
    }
}

impl<'a> FromIterator<(&'a str, i64)> for ResourceVec {
    fn from_iter<T: IntoIterator<Item = (&'a str, i64)>>(iter: T) -> Self {
        Self::from_pairs(iter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_entries_are_never_stored_so_equal_vectors_serialize_equally() {
        let a = ResourceVec::from_pairs([("cpu", 1000), ("memory", 0)]);
        let b = ResourceVec::from_pairs([("cpu", 500), ("cpu", 500)]);
        assert_eq!(a, b);
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&b).unwrap()
        );
        let back = a.checked_sub(&b).unwrap();
        assert!(back.is_zero());
    }

    #[test]
    fn checked_add_reports_overflow_and_saturating_add_clamps() {
        let a = ResourceVec::from_pairs([("cpu", i64::MAX)]);
        let b = ResourceVec::from_pairs([("cpu", 1)]);
        assert!(a.checked_add(&b).is_none());
        assert_eq!(a.saturating_add(&b).get("cpu"), i64::MAX);
        assert_eq!(b.saturating_sub(&a).get("cpu"), 1 - i64::MAX);
    }
}
