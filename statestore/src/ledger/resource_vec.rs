//! `ResourceVec`: exact integer quantities per resource name.
//!
//! Units are the scheduler's exact units: `cpu` in millicores, `memory` in bytes,
//! extended resources (`nvidia.com/gpu`, ...) in counts. The vector never stores a zero,
//! so two vectors that mean the same thing serialize to the same bytes (determinism).
//!
//! It is a vector of (name, quantity) sorted by name, not a `BTreeMap`: the ledger keeps one
//! per placement in each of its copies, a pod names two to four resources, and a map's
//! first node alone is 368 bytes where three entries take 96 (the heap profile in
//! docs/benchmarks.md). It serializes as the map it was, entry for entry in name order,
//! so the Raft log, snapshots and fingerprints written before read the same.
//!
//! A well-known name (`cpu`, `memory`, `nvidia.com/gpu`, ...) is borrowed from a static
//! table rather than allocated: two to four small strings a placement, in every copy,
//! were about a third of a `ResourceVec`'s heap. Other names are owned; there is no
//! global interner, so what a peer or a user writes cannot grow a table that is never
//! freed.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Resource name for cpu (millicores).
pub const CPU: &str = "cpu";
/// Resource name for memory (bytes).
pub const MEMORY: &str = "memory";

/// Names that are borrowed, not allocated (any order; a name not here is owned).
const WELL_KNOWN: [&str; 9] = [
    CPU,
    MEMORY,
    "nvidia.com/gpu",
    "pods",
    "ephemeral-storage",
    "amd.com/gpu",
    "gpu.intel.com/i915",
    "hugepages-1Gi",
    "hugepages-2Mi",
];

fn name_of(name: &str) -> Cow<'static, str> {
    match WELL_KNOWN.iter().find(|&&known| known == name) {
        Some(&known) => Cow::Borrowed(known),
        None => Cow::Owned(name.to_owned()),
    }
}

/// A vector of resource quantities keyed by resource name, in exact integer units.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ResourceVec(Vec<(Cow<'static, str>, i64)>);

impl Serialize for ResourceVec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

/// Read as a map, so what a map would do with the bytes it does too: entries end up in
/// name order, and a repeated name keeps its last quantity.
impl<'de> Deserialize<'de> for ResourceVec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, i64>::deserialize(deserializer)?;
        Ok(Self(
            map.into_iter().map(|(k, v)| (name_of(&k), v)).collect(),
        ))
    }
}

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

    fn find(&self, name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| (**k).cmp(name))
    }

    /// The quantity of `name` (0 when absent).
    pub fn get(&self, name: &str) -> i64 {
        self.find(name).map_or(0, |i| self.0[i].1)
    }

    /// Sets the quantity of `name`; setting 0 removes the entry.
    pub fn set(&mut self, name: &str, quantity: i64) {
        match (self.find(name), quantity) {
            (Ok(i), 0) => {
                self.0.remove(i);
            }
            (Ok(i), q) => self.0[i].1 = q,
            (Err(_), 0) => {}
            (Err(i), q) => self.0.insert(i, (name_of(name), q)),
        }
    }

    /// Iterates over the non-zero entries in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> {
        self.0.iter().map(|(k, v)| (&**k, *v))
    }

    /// True when every quantity is zero.
    pub fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    /// True when no quantity is negative.
    pub fn is_non_negative(&self) -> bool {
        self.0.iter().all(|(_, q)| *q >= 0)
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

    /// The bytes of the `BTreeMap<String, i64>` it replaced, in JSON and postcard, so a
    /// log or snapshot written before reads the same and fingerprints do not move.
    #[test]
    fn it_serializes_as_the_map_it_replaced_byte_for_byte() {
        let pairs = [("nvidia.com/gpu", 8), ("cpu", 4000), ("memory", 1 << 35)];
        let v = ResourceVec::from_pairs(pairs);
        let map: BTreeMap<String, i64> = pairs.iter().map(|(k, q)| (k.to_string(), *q)).collect();
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            serde_json::to_string(&map).unwrap()
        );
        let bytes = postcard::to_allocvec(&map).unwrap();
        assert_eq!(postcard::to_allocvec(&v).unwrap(), bytes);
        let back: ResourceVec = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, v);
        assert_eq!(
            back.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            ["cpu", "memory", "nvidia.com/gpu"]
        );
    }

    /// The ledger's copies of every placement allocate nothing for the usual names, and
    /// a name read back from the log is borrowed as one set in place is.
    #[test]
    fn a_well_known_name_is_borrowed_and_any_other_owned() {
        let v = ResourceVec::from_pairs([("nvidia.com/gpu", 8), ("example.com/fpga", 1)]);
        let read: ResourceVec = serde_json::from_slice(&serde_json::to_vec(&v).unwrap()).unwrap();
        for v in [&v, &read] {
            let kinds: Vec<(&str, bool)> =
                v.0.iter()
                    .map(|(k, _)| (&**k, matches!(k, Cow::Borrowed(_))))
                    .collect();
            assert_eq!(
                kinds,
                [("example.com/fpga", false), ("nvidia.com/gpu", true)]
            );
        }
        assert_eq!(read, v);
    }

    #[test]
    fn set_keeps_names_in_order_and_no_zero() {
        let mut v = ResourceVec::new();
        for (name, q) in [
            ("memory", 2),
            ("cpu", 1),
            ("pods", 3),
            ("cpu", 0),
            ("gpu", 0),
        ] {
            v.set(name, q);
        }
        assert_eq!(v.iter().collect::<Vec<_>>(), [("memory", 2), ("pods", 3)]);
        assert_eq!((v.get("cpu"), v.get("pods")), (0, 3));
        // A map read from bytes with a name twice keeps the last quantity, as a map does.
        let v: ResourceVec = serde_json::from_str(r#"{"cpu": 1, "cpu": 5}"#).unwrap();
        assert_eq!(v.iter().collect::<Vec<_>>(), [("cpu", 5)]);
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
