//! Bounds on what one command may name: keys, resource vectors, quantities, factors and
//! the bytes of one entry. `apply` checks them before anything else, so a command over a
//! bound is refused whole with the reason and the offending value (shortened).
//!
//! The ledger is not the truth for pods (the API server is, ARCHITECTURE.md "Truth and
//! flow"), so it cannot know whether a pod exists; it refuses keys that cannot name a
//! Kubernetes object: empty parts, more than one `/`, a namespace over 63 bytes, a name
//! over 253, whitespace or control characters. The namespace is optional because
//! in-process callers and unit tests place bare names; every proposer that reads the
//! API server writes `namespace/name`. A node must exist in the ledger (`UnknownNode`).

use super::overcommit::OvercommitFactor;
use super::refusal::Refusal;
use super::resource_vec::ResourceVec;

/// Longest object name (a Kubernetes DNS subdomain).
pub const MAX_NAME_BYTES: usize = 253;
/// Longest namespace (a Kubernetes DNS label).
pub const MAX_NAMESPACE_BYTES: usize = 63;
/// Longest resource name: a 253-byte prefix, `/`, a 63-byte name.
pub const MAX_RESOURCE_NAME_BYTES: usize = 317;
/// Most resources in one vector (a node's allocatable, a pod's requests).
pub const MAX_RESOURCES: usize = 64;
/// Longest transaction id.
pub const MAX_TXN_ID_BYTES: usize = 256;
/// Largest quantity of one resource on one node: 2^53 (8 PiB of memory, 9e12 cpus), exact
/// in an `f64` as the scheduler's shares need, and small enough that 1,024 such nodes
/// still sum within `i64`.
pub const MAX_QUANTITY: i64 = 1 << 53;
/// Largest cpu/memory overcommit ratio (Volcano's default factor is 1.2).
pub const MAX_OVERCOMMIT_RATIO: u64 = 100;
/// Most bytes of one entry's encoded batch. The ledger service refuses proposals over
/// `network::MAX_PROPOSAL_BYTES` (2 MiB) and appends what it received, so apply's bound
/// only refuses an entry that bypassed the service (appended by a compromised leader); it
/// is twice the service's, so that one can be lowered without refusing entries already in
/// a log.
pub const MAX_ENTRY_BYTES: usize = 4 * 1024 * 1024;

/// Shows at most 64 characters of a hostile value, with its length.
fn shorten(value: &str) -> String {
    if value.chars().count() <= 64 {
        return format!("{value:?}");
    }
    let head: String = value.chars().take(64).collect();
    format!("{head:?}... ({} bytes)", value.len())
}

fn invalid(what: &str, value: &str, reason: impl Into<String>) -> Refusal {
    Refusal::InvalidName {
        what: what.to_string(),
        value: shorten(value),
        reason: reason.into(),
    }
}

/// A name part: 1 to `max` bytes, no whitespace, no control character, no `/`.
fn check_part(what: &str, whole: &str, part: &str, label: &str, max: usize) -> Result<(), Refusal> {
    if part.is_empty() {
        return Err(invalid(what, whole, format!("empty {label}")));
    }
    if part.len() > max {
        return Err(invalid(
            what,
            whole,
            format!("{label} of {} bytes, limit {max}", part.len()),
        ));
    }
    if let Some(c) = part
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || *c == '/')
    {
        return Err(invalid(what, whole, format!("{label} holds {c:?}")));
    }
    Ok(())
}

/// A pod or gang key: `[namespace/]name`.
pub fn check_object_key(what: &str, key: &str) -> Result<(), Refusal> {
    match key.split_once('/') {
        Some((namespace, name)) => {
            check_part(what, key, namespace, "namespace", MAX_NAMESPACE_BYTES)?;
            check_part(what, key, name, "name", MAX_NAME_BYTES)
        }
        None => check_part(what, key, key, "name", MAX_NAME_BYTES),
    }
}

/// A node name.
pub fn check_node_name(node: &str) -> Result<(), Refusal> {
    check_part("node", node, node, "name", MAX_NAME_BYTES)
}

/// A transaction id.
pub fn check_txn_id(txn: &str) -> Result<(), Refusal> {
    if txn.is_empty() || txn.len() > MAX_TXN_ID_BYTES || txn.chars().any(char::is_control) {
        return Err(invalid(
            "txn",
            txn,
            format!("must be 1 to {MAX_TXN_ID_BYTES} bytes without control characters"),
        ));
    }
    Ok(())
}

/// A resource vector: at most `MAX_RESOURCES` names, each a valid resource name, every
/// quantity in `0..=max`. `subject` ("pod ns/p") is written out only into a refusal:
/// every pod of every gang is checked on every replica, and most are fine.
pub fn check_resources(
    subject: std::fmt::Arguments<'_>,
    v: &ResourceVec,
    max: i64,
) -> Result<(), Refusal> {
    let count = v.iter().count();
    if count > MAX_RESOURCES {
        return Err(Refusal::TooLarge {
            what: format!("{subject} resources"),
            count,
            limit: MAX_RESOURCES,
        });
    }
    for (resource, quantity) in v.iter() {
        let bad = resource.is_empty()
            || resource.len() > MAX_RESOURCE_NAME_BYTES
            || resource
                .chars()
                .any(|c| c.is_whitespace() || c.is_control());
        if bad {
            return Err(invalid(
                &format!("{subject} resource"),
                resource,
                format!("must be 1 to {MAX_RESOURCE_NAME_BYTES} bytes without whitespace"),
            ));
        }
        if quantity < 0 {
            return Err(Refusal::NegativeQuantity {
                subject: subject.to_string(),
                resource: resource.to_string(),
                quantity,
            });
        }
        if quantity > max {
            return Err(Refusal::QuantityOutOfRange {
                subject: subject.to_string(),
                resource: resource.to_string(),
                quantity,
                max,
            });
        }
    }
    Ok(())
}

/// An overcommit factor: a ratio from 1 to `MAX_OVERCOMMIT_RATIO`.
pub fn check_overcommit(f: OvercommitFactor) -> Result<(), Refusal> {
    let within = u64::from(f.numerator) <= u64::from(f.denominator) * MAX_OVERCOMMIT_RATIO;
    if !f.is_valid() || !within {
        return Err(Refusal::InvalidOvercommit {
            numerator: f.numerator,
            denominator: f.denominator,
        });
    }
    Ok(())
}
