//! Resource vectors with exact integer quantities.
//!
//! A [`Resources`] is a sorted list of (name, amount) pairs with no zero entries: `cpu` in
//! millicores, `memory` and storage in bytes, every other resource (`nvidia.com/gpu`, ...) as
//! a whole count. Arithmetic saturates instead of wrapping; the manifest loader checks that the
//! whole cluster's totals fit in `i64`, so saturation never happens on accepted input.
//!
//! Two readings of a missing entry exist, and each function says which it uses: as an amount
//! (missing = 0: requests, usage) and as a limit (missing = unlimited: queue capability).

use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use super::quantity::{QuantityError, QuantityUnit, parse_quantity};

/// The name of a resource, cheap to clone and compare.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ResourceName(Arc<str>);

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const PODS: &str = "pods";
pub const GPU: &str = "nvidia.com/gpu";

impl ResourceName {
    /// Interns the name: equal names share one allocation, so the hot comparisons in
    /// [`Resources`] are pointer comparisons. The set of resource names in a cluster is small
    /// (a few dozen), so the interner never grows large.
    pub fn new(name: &str) -> Self {
        static INTERNED: OnceLock<Mutex<HashMap<Box<str>, Arc<str>>>> = OnceLock::new();
        let table = INTERNED.get_or_init(|| Mutex::new(HashMap::new()));
        // A poisoned lock only means another thread panicked while inserting; the map is
        // still a valid cache.
        let mut table = table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(existing) = table.get(name) {
            return Self(existing.clone());
        }
        let arc: Arc<str> = Arc::from(name);
        table.insert(Box::from(name), arc.clone());
        Self(arc)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The unit Kubernetes counts this resource in.
    pub fn unit(&self) -> QuantityUnit {
        unit_of(&self.0)
    }
}

/// `cpu` is in millicores; memory-like resources in bytes; everything else is whole.
pub fn unit_of(name: &str) -> QuantityUnit {
    if name == CPU {
        QuantityUnit::Milli
    } else if name == MEMORY
        || name == "ephemeral-storage"
        || name == "storage"
        || name.starts_with("hugepages-")
    {
        QuantityUnit::Bytes
    } else {
        QuantityUnit::WholeCount
    }
}

impl PartialOrd for ResourceName {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ResourceName {
    fn cmp(&self, other: &Self) -> Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            return Ordering::Equal;
        }
        // The common names (`cpu`, `memory`, `nvidia.com/gpu`, `pods`) differ in their first
        // byte: deciding there skips a `memcmp` call in the merges below (9 % of a sustained
        // run's CPU before, `docs/benchmarks.md`).
        let (a, b) = (self.0.as_bytes(), other.0.as_bytes());
        match (a.first(), b.first()) {
            (Some(x), Some(y)) if x != y => x.cmp(y),
            _ => a.cmp(b),
        }
    }
}

impl fmt::Debug for ResourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for ResourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A resource vector. See the module documentation for units and missing entries.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    entries: Vec<(ResourceName, i64)>,
}

impl Resources {
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds from (name, amount) pairs in any order; later duplicates add up.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, i64)>) -> Self {
        let mut out = Self::new();
        for (name, amount) in pairs {
            out.add_amount(&ResourceName::new(name), amount);
        }
        out
    }

    /// Parses a Kubernetes resource list (`{cpu: "2", memory: 4Gi}`). The error names the
    /// resource; the caller names the object and field.
    pub fn parse_list<'a>(
        list: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, (String, QuantityError)> {
        let mut out = Self::new();
        for (name, text) in list {
            let amount = parse_quantity(text, unit_of(name)).map_err(|e| (name.to_string(), e))?;
            out.set(&ResourceName::new(name), amount);
        }
        Ok(out)
    }

    pub fn is_zero(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, name: &str) -> i64 {
        self.entries
            .iter()
            .find(|(n, _)| n.as_str() == name)
            .map_or(0, |(_, v)| *v)
    }

    /// The amount, or `None` when the resource is not listed (a limit's "unlimited").
    pub fn get_listed(&self, name: &str) -> Option<i64> {
        self.entries
            .iter()
            .find(|(n, _)| n.as_str() == name)
            .map(|(_, v)| *v)
    }

    pub fn cpu_milli(&self) -> i64 {
        self.get(CPU)
    }

    pub fn memory(&self) -> i64 {
        self.get(MEMORY)
    }

    pub fn gpus(&self) -> i64 {
        self.get(GPU)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&ResourceName, i64)> + '_ {
        self.entries.iter().map(|(n, v)| (n, *v))
    }

    pub fn names(&self) -> impl Iterator<Item = &ResourceName> + '_ {
        self.entries.iter().map(|(n, _)| n)
    }

    /// Sets one entry; an amount of 0 removes it, so "listed" and "non-zero" coincide for
    /// amounts. Limits that must list a zero (capability `gpu: 0`) use [`Self::set_listed`].
    pub fn set(&mut self, name: &ResourceName, amount: i64) {
        match self.entries.binary_search_by(|(n, _)| n.cmp(name)) {
            Ok(i) if amount == 0 => {
                self.entries.remove(i);
            }
            Ok(i) => self.entries[i].1 = amount,
            Err(_) if amount == 0 => {}
            Err(i) => self.entries.insert(i, (name.clone(), amount)),
        }
    }

    /// Sets one entry and keeps it even when it is 0 (a limit of zero is not "unlimited").
    pub fn set_listed(&mut self, name: &ResourceName, amount: i64) {
        match self.entries.binary_search_by(|(n, _)| n.cmp(name)) {
            Ok(i) => self.entries[i].1 = amount,
            Err(i) => self.entries.insert(i, (name.clone(), amount)),
        }
    }

    fn add_amount(&mut self, name: &ResourceName, amount: i64) {
        let current = self.get(name.as_str());
        self.set(name, current.saturating_add(amount));
    }

    /// `self += other`, entry by entry.
    pub fn add(&mut self, other: &Resources) {
        self.merge_with(other, i64::saturating_add);
    }

    /// `self -= other`, entry by entry; results may go below zero (an over-committed node).
    pub fn sub(&mut self, other: &Resources) {
        self.merge_with(other, i64::saturating_sub);
    }

    /// The positive entries only (an over-committed node's negative idle room counts as none).
    pub fn positive_part(mut self) -> Resources {
        self.entries.retain(|(_, v)| *v > 0);
        self
    }

    /// `self -= other`, never below zero in any entry.
    pub fn sub_clamped(&mut self, other: &Resources) {
        self.merge_with(other, |a, b| a.saturating_sub(b).max(0));
    }

    pub fn plus(&self, other: &Resources) -> Resources {
        let mut out = self.clone();
        out.add(other);
        out
    }

    pub fn minus(&self, other: &Resources) -> Resources {
        let mut out = self.clone();
        out.sub(other);
        out
    }

    /// Multiplies every entry by `numerator / denominator`, rounding down.
    pub fn scaled(&self, numerator: i64, denominator: i64) -> Resources {
        let mut out = self.clone();
        for (_, v) in &mut out.entries {
            let scaled = i128::from(*v) * i128::from(numerator) / i128::from(denominator.max(1));
            *v = i64::try_from(scaled).unwrap_or(if scaled < 0 { i64::MIN } else { i64::MAX });
        }
        out.entries.retain(|(_, v)| *v != 0);
        out
    }

    /// Entry-wise minimum, reading missing entries as 0.
    pub fn min_amounts(&self, other: &Resources) -> Resources {
        let mut out = Resources::new();
        for (name, v) in self.iter() {
            out.set(name, v.min(other.get(name.as_str())));
        }
        out
    }

    /// Entry-wise maximum, reading missing entries as 0.
    pub fn max_amounts(&self, other: &Resources) -> Resources {
        let mut out = self.clone();
        for (name, v) in other.iter() {
            let current = out.get(name.as_str());
            out.set(name, current.max(v));
        }
        out
    }

    /// Caps each entry by `limit`, where the limit lists it (missing in `limit` = unlimited).
    pub fn capped_by_limit(&self, limit: &Resources) -> Resources {
        let mut out = self.clone();
        for (name, cap) in limit.iter() {
            let current = out.get(name.as_str());
            if current > cap {
                out.set(name, cap);
            }
        }
        out
    }

    /// True when every amount in `self` is at most the same amount in `other`, reading
    /// missing entries as 0 on both sides (`req.fits_in(idle)`).
    pub fn fits_in(&self, other: &Resources) -> bool {
        self.shortage(other).is_none()
    }

    /// The first resource where `self` exceeds `other` (missing = 0), with both amounts.
    pub fn first_shortage(&self, other: &Resources) -> Option<(ResourceName, i64, i64)> {
        self.shortage(other)
            .map(|(name, want, have)| (name.clone(), want, have))
    }

    /// [`Self::first_shortage`], the name borrowed: a fit test over thousands of nodes
    /// touches no reference count.
    pub fn shortage(&self, other: &Resources) -> Option<(&ResourceName, i64, i64)> {
        let mut theirs = other.entries.iter().peekable();
        for (name, want) in &self.entries {
            let mut have = 0;
            while let Some((n, v)) = theirs.peek() {
                match n.cmp(name) {
                    Ordering::Less => {
                        theirs.next();
                    }
                    Ordering::Equal => {
                        have = *v;
                        break;
                    }
                    Ordering::Greater => break,
                }
            }
            if *want > have {
                return Some((name, *want, have));
            }
        }
        None
    }

    /// True when every listed entry of `limit` is at least the amount in `self`;
    /// resources the limit does not list are unlimited.
    pub fn within_limit(&self, limit: &Resources) -> bool {
        limit
            .iter()
            .all(|(name, cap)| self.get(name.as_str()) <= cap)
    }

    /// True when `self` fits in `other` on the resources that `dimensions` lists (missing
    /// amounts read as 0). Volcano's `LessEqualWithDimension`.
    pub fn fits_in_dimensions(&self, other: &Resources, dimensions: &Resources) -> bool {
        dimensions
            .names()
            .all(|name| self.get(name.as_str()) <= other.get(name.as_str()))
    }

    /// Keeps only the entries that `dimensions` lists.
    pub fn restricted_to(&self, dimensions: &Resources) -> Resources {
        let mut out = Resources::new();
        for name in dimensions.names() {
            out.set(name, self.get(name.as_str()));
        }
        out
    }

    /// The largest `self[r] / total[r]` over resources listed in `total` with a positive total.
    pub fn share_of(&self, total: &Resources) -> f64 {
        let mut share: f64 = 0.0;
        for (name, have) in self.iter() {
            let all = total.get(name.as_str());
            if all > 0 {
                share = share.max(have as f64 / all as f64);
            } else if have > 0 {
                // Demand for something the total does not have at all dominates.
                share = share.max(1.0);
            }
        }
        share
    }

    fn merge_with(&mut self, other: &Resources, op: impl Fn(i64, i64) -> i64) {
        if other.entries.is_empty() || self.merge_in_place(other, &op) {
            return;
        }
        let mut merged = Vec::with_capacity(self.entries.len().max(other.entries.len()));
        let mut mine = std::mem::take(&mut self.entries).into_iter().peekable();
        let mut theirs = other.entries.iter().peekable();
        loop {
            let next = match (mine.peek(), theirs.peek()) {
                (None, None) => break,
                (Some(_), None) => mine.next(),
                (None, Some(_)) => theirs.next().map(|(n, v)| (n.clone(), op(0, *v))),
                (Some((a, _)), Some((b, _))) => match a.cmp(b) {
                    Ordering::Less => mine.next(),
                    Ordering::Greater => theirs.next().map(|(n, v)| (n.clone(), op(0, *v))),
                    Ordering::Equal => {
                        let (n, v) = mine.next().expect("peeked");
                        let (_, w) = theirs.next().expect("peeked");
                        Some((n, op(v, *w)))
                    }
                },
            };
            if let Some((n, v)) = next
                && v != 0
            {
                merged.push((n, v));
            }
        }
        self.entries = merged;
    }

    /// [`Self::merge_with`] without a new vector, when every name of `other` is listed here
    /// already: a pod's request added to a node's or a queue's usage, the common case. The
    /// allocating merge was the largest single cost of a sustained run (12 % of its CPU in
    /// `Resources::add`, and most of its `malloc`/`free`). False, changing nothing, otherwise.
    fn merge_in_place(&mut self, other: &Resources, op: &impl Fn(i64, i64) -> i64) -> bool {
        // Both lists are sorted: one walk finds each of `other`'s names here, a second
        // (only when all are) applies `op`, so nothing is allocated and nothing half-applied.
        let position_of = |entries: &[(ResourceName, i64)], from: usize, name: &ResourceName| {
            let mut i = from;
            while i < entries.len() && entries[i].0 < *name {
                i += 1;
            }
            (i < entries.len() && entries[i].0 == *name).then_some(i)
        };
        let mut i = 0;
        for (name, _) in &other.entries {
            match position_of(&self.entries, i, name) {
                Some(found) => i = found + 1,
                None => return false,
            }
        }
        let mut i = 0;
        for (name, v) in &other.entries {
            let found = position_of(&self.entries, i, name).expect("checked above");
            let entry = &mut self.entries[found].1;
            *entry = op(*entry, *v);
            i = found + 1;
        }
        // As the allocating merge: no zero entry survives (a limit's listed zero neither).
        if self.entries.iter().any(|(_, v)| *v == 0) {
            self.entries.retain(|(_, v)| *v != 0);
        }
        true
    }
}

impl fmt::Debug for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// Human form: `cpu 2500m, memory 4Gi, nvidia.com/gpu 2`.
impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.entries.is_empty() {
            return f.write_str("nothing");
        }
        for (i, (name, v)) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{name} {}", format_amount(name.as_str(), *v))?;
        }
        Ok(())
    }
}

/// Kubernetes' binary quantity suffixes with their powers of two, largest first.
const BINARY_SUFFIXES: [(u32, &str); 6] = [
    (60, "Ei"),
    (50, "Pi"),
    (40, "Ti"),
    (30, "Gi"),
    (20, "Mi"),
    (10, "Ki"),
];

/// Formats an amount in the resource's usual spelling (`2500m`, `4Gi`, `3`).
pub fn format_amount(name: &str, v: i64) -> String {
    match unit_of(name) {
        QuantityUnit::Milli if v % 1000 == 0 => format!("{}", v / 1000),
        QuantityUnit::Milli => format!("{v}m"),
        QuantityUnit::Bytes => {
            for (shift, suffix) in BINARY_SUFFIXES {
                if v != 0 && v % (1i64 << shift) == 0 {
                    return format!("{}{suffix}", v >> shift);
                }
            }
            approximate_bytes(v)
        }
        QuantityUnit::WholeCount => v.to_string(),
    }
}

/// An amount of bytes that no binary suffix divides, as it is (the exact figure a user can
/// copy into a manifest) and, from 1Ki up, its size in the largest suffix it reaches. A queue's
/// deserved memory is a weighted fraction of the cluster's, so it is rarely a whole `Gi`, and
/// "19634136210285" beside "22112Gi" in one message could not be compared at a glance.
fn approximate_bytes(v: i64) -> String {
    let reached = BINARY_SUFFIXES
        .into_iter()
        .find(|(shift, _)| v.unsigned_abs() >= 1u64 << shift);
    match reached {
        Some((shift, suffix)) => {
            let scaled = v as f64 / (1u64 << shift) as f64;
            format!("{v} (about {scaled:.1}{suffix})")
        }
        None => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(pairs: &[(&str, i64)]) -> Resources {
        Resources::from_pairs(pairs.iter().copied())
    }

    /// The merge the in-place one stands in for: entry by entry through a map.
    fn merged_by_map(a: &Resources, b: &Resources, op: fn(i64, i64) -> i64) -> Resources {
        let mut all: std::collections::BTreeMap<&str, (i64, i64)> = Default::default();
        for (n, v) in a.iter() {
            all.entry(n.as_str()).or_default().0 = v;
        }
        for (n, v) in b.iter() {
            all.entry(n.as_str()).or_default().1 = v;
        }
        let mut out = Resources::new();
        for (n, (x, y)) in all {
            let v = if b.get_listed(n).is_some() {
                op(x, y)
            } else {
                x
            };
            out.set(&ResourceName::new(n), v);
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn merging_in_place_or_into_a_new_vector_gives_the_same_vector(
            a in proptest::collection::vec((0usize..5, -3i64..4), 0..6),
            b in proptest::collection::vec((0usize..5, -3i64..4), 0..6),
        ) {
            const NAMES: [&str; 5] = [CPU, "ephemeral-storage", MEMORY, GPU, PODS];
            let build = |pairs: &[(usize, i64)]| {
                let mut out = Resources::new();
                for &(n, v) in pairs {
                    out.set(&ResourceName::new(NAMES[n]), v);
                }
                out
            };
            let (a, b) = (build(&a), build(&b));
            let ops: [fn(i64, i64) -> i64; 2] = [i64::saturating_add, i64::saturating_sub];
            for op in ops {
                let mut got = a.clone();
                got.merge_with(&b, op);
                proptest::prop_assert_eq!(got, merged_by_map(&a, &b, op));
            }
        }
    }

    #[test]
    fn zero_entries_are_dropped_so_equal_vectors_compare_equal() {
        let a = r(&[("cpu", 1000), (GPU, 0)]);
        assert_eq!(a, r(&[("cpu", 1000)]));
        let mut b = r(&[(GPU, 2)]);
        b.sub(&r(&[(GPU, 2)]));
        assert!(b.is_zero());
    }

    #[test]
    fn fits_in_reads_missing_entries_as_zero() {
        let idle = r(&[("cpu", 4000), (MEMORY, 8 << 30)]);
        assert!(r(&[("cpu", 4000)]).fits_in(&idle));
        assert!(!r(&[(GPU, 1)]).fits_in(&idle));
        assert_eq!(
            r(&[(GPU, 1)]).first_shortage(&idle),
            Some((ResourceName::new(GPU), 1, 0))
        );
        assert!(Resources::new().fits_in(&Resources::new()));
    }

    #[test]
    fn limits_read_missing_entries_as_unlimited() {
        let mut cap = r(&[(GPU, 16)]);
        assert!(r(&[("cpu", 1 << 40), (GPU, 16)]).within_limit(&cap));
        assert!(!r(&[(GPU, 17)]).within_limit(&cap));
        cap.set_listed(&ResourceName::new("cpu"), 0);
        assert!(!r(&[("cpu", 1)]).within_limit(&cap));
    }

    #[test]
    fn arithmetic_saturates_instead_of_wrapping() {
        let mut a = r(&[("cpu", i64::MAX)]);
        a.add(&r(&[("cpu", 5)]));
        assert_eq!(a.cpu_milli(), i64::MAX);
    }

    #[test]
    fn display_uses_kubernetes_spellings() {
        let a = r(&[("cpu", 2500), (MEMORY, 4 << 30), (GPU, 2)]);
        assert_eq!(a.to_string(), "cpu 2500m, memory 4Gi, nvidia.com/gpu 2");
    }

    /// A bug found in a `proportion` message: a deserved share of 19634136210285 bytes was
    /// printed raw beside "22112Gi". The exact figure stays; its size in `Ti` comes with it.
    #[test]
    fn memory_that_no_suffix_divides_keeps_its_exact_bytes_and_gives_its_size() {
        assert_eq!(
            format_amount(MEMORY, 19_634_136_210_285),
            "19634136210285 (about 17.9Ti)"
        );
        assert_eq!(
            format_amount(MEMORY, (3 << 30) + 1),
            "3221225473 (about 3.0Gi)"
        );
        assert_eq!(format_amount(MEMORY, -1536), "-1536 (about -1.5Ki)");
        assert_eq!(format_amount(MEMORY, 1000), "1000");
        assert_eq!(format_amount(MEMORY, 0), "0");
        assert_eq!(format_amount(MEMORY, 1536 << 20), "1536Mi");
    }

    #[test]
    fn share_is_the_dominant_fraction() {
        let total = r(&[("cpu", 10_000), (GPU, 8)]);
        let used = r(&[("cpu", 1000), (GPU, 4)]);
        assert!((used.share_of(&total) - 0.5).abs() < 1e-9);
    }

    proptest::proptest! {
        #[test]
        fn add_then_sub_is_identity(a in proptest::collection::vec(0i64..1_000_000, 4), b in proptest::collection::vec(0i64..1_000_000, 4)) {
            let names = ["cpu", "memory", GPU, "example.com/foo"];
            let ra = Resources::from_pairs(names.iter().copied().zip(a.iter().copied()));
            let rb = Resources::from_pairs(names.iter().copied().zip(b.iter().copied()));
            let mut sum = ra.clone();
            sum.add(&rb);
            proptest::prop_assert!(ra.fits_in(&sum));
            proptest::prop_assert!(rb.fits_in(&sum));
            sum.sub(&rb);
            proptest::prop_assert_eq!(sum, ra);
        }
    }
}
