//! A replica's ledger id from its StatefulSet pod name, so a chart never types ids by hand.
//!
//! A StatefulSet names its pods `<statefulset>-<ordinal>` (ordinal 0, 1, ...); ledger ids
//! start at 1, so the pod with ordinal `k` is replica `k + 1`. The Helm chart passes the
//! pod's name (downward API, `metadata.name`) with `--id-from-pod-name=$(POD_NAME)` and
//! builds `--peers` with the same rule.

use thiserror::Error;

/// Why a pod name does not give a replica id.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PodNameError {
    #[error(
        "--id-from-pod-name {name:?}: expected <statefulset>-<ordinal> (e.g. phalanx-0), as a StatefulSet names its pods"
    )]
    NoOrdinal { name: String },
    #[error("--id-from-pod-name {name:?}: the ordinal {ordinal:?} is not a whole number")]
    BadOrdinal { name: String, ordinal: String },
}

/// The ledger id of the StatefulSet pod `name`: its ordinal plus one.
pub fn id_from_pod_name(name: &str) -> Result<u64, PodNameError> {
    let (_, ordinal) = name
        .rsplit_once('-')
        .filter(|(prefix, ordinal)| !prefix.is_empty() && !ordinal.is_empty())
        .ok_or_else(|| PodNameError::NoOrdinal {
            name: name.to_string(),
        })?;
    let bad = || PodNameError::BadOrdinal {
        name: name.to_string(),
        ordinal: ordinal.to_string(),
    };
    // Only ASCII digits: `u64::from_str` would also take a leading `+`.
    if !ordinal.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let ordinal: u64 = ordinal.parse().map_err(|_| bad())?;
    ordinal.checked_add(1).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statefulset_pod_name_gives_its_ordinal_plus_one() {
        assert_eq!(id_from_pod_name("phalanx-0"), Ok(1));
        assert_eq!(id_from_pod_name("phalanx-4"), Ok(5));
        assert_eq!(id_from_pod_name("my-release-phalanx-12"), Ok(13));
    }

    #[test]
    fn a_name_without_an_ordinal_is_refused_with_the_name() {
        for bad in ["phalanx", "phalanx-", "-3", ""] {
            let e = id_from_pod_name(bad).expect_err(bad);
            assert!(matches!(e, PodNameError::NoOrdinal { .. }), "{bad}: {e}");
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
        for bad in [
            "phalanx-x",
            "phalanx-+1",
            "phalanx-1a",
            "phalanx-18446744073709551615",
        ] {
            let e = id_from_pod_name(bad).expect_err(bad);
            assert!(matches!(e, PodNameError::BadOrdinal { .. }), "{bad}: {e}");
        }
    }
}
