//! `ReplicaLeases`: each replica's liveness record, a Kubernetes Lease
//! (`coordination.k8s.io/v1`) named `<scheduler-name>-replica-<id>`, renewed by its
//! replica's [`LeaseKeeper`] and listed by the Raft leader (see `liveness.rs` for how it is
//! read, and docs/shards.md "Liveness" for why Leases rather than a ledger command).
//!
//! The keeper renews on its own timer, every third of the lease, not once per scheduling
//! period: a period includes the cycle's binds, and a cycle longer than the lease (a
//! 5,000-pod gang bound at the default 50 writes/s takes 100 s) would otherwise cost a busy
//! owner its shards in the middle of its own binds. It renews only while the scheduling
//! loop shows progress ([`LoopProgress`]): a loop wedged for [`stall_limit`] lets the Lease
//! lapse, so its shards move to a replica that schedules.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, ListParams, Patch, PatchParams};
use metrics::counter;
use phalanx_statestore::ledger::ReplicaId;
use thiserror::Error;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use super::metric;
use crate::observe::progress::LoopProgress;

/// The label that marks phalanx's replica Leases; its value is the scheduler name.
pub const LEASE_LABEL: &str = "phalanx.dev/replica-lease";
/// Server-side apply field manager of the Lease writes.
const FIELD_MANAGER: &str = "phalanx-replica-lease";

#[derive(Debug, Error)]
pub enum LeaseError {
    #[error("renewing Lease {namespace}/{name}: {reason}")]
    Renew {
        namespace: String,
        name: String,
        reason: String,
    },
    #[error("listing the replica Leases in namespace {namespace}: {reason}")]
    List { namespace: String, reason: String },
}

/// The Leases of one scheduler's replicas in one namespace.
#[derive(Clone, Debug)]
pub struct ReplicaLeases {
    handle: Handle,
    api: Api<Lease>,
    namespace: String,
    scheduler_name: String,
    lease_seconds: i32,
}

impl ReplicaLeases {
    pub fn new(
        handle: Handle,
        client: kube::Client,
        namespace: &str,
        scheduler_name: &str,
        lease_ms: u64,
    ) -> Self {
        Self {
            handle,
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            scheduler_name: scheduler_name.to_string(),
            lease_seconds: i32::try_from(lease_ms.div_ceil(1000)).unwrap_or(i32::MAX),
        }
    }

    fn name(&self, replica: ReplicaId) -> String {
        format!("{}-replica-{replica}", self.scheduler_name)
    }

    /// Writes this replica's Lease (creating it the first time): a new `renewTime`, so a
    /// new `resourceVersion`, which is what the leader watches for.
    pub async fn renew(&self, replica: ReplicaId) -> Result<(), LeaseError> {
        let name = self.name(replica);
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(BTreeMap::from([(
                    LEASE_LABEL.to_string(),
                    self.scheduler_name.clone(),
                )])),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(replica.to_string()),
                lease_duration_seconds: Some(self.lease_seconds),
                renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
                ..LeaseSpec::default()
            }),
        };
        let params = PatchParams::apply(FIELD_MANAGER).force();
        self.api
            .patch(&name, &params, &Patch::Apply(&lease))
            .await
            .map(|_| ())
            .map_err(|e| LeaseError::Renew {
                namespace: self.namespace.clone(),
                name,
                reason: e.to_string(),
            })
    }

    /// Every replica's Lease: replica id -> `resourceVersion`. Leases whose holder is not a
    /// replica id are skipped.
    pub fn list(&self) -> Result<BTreeMap<ReplicaId, String>, LeaseError> {
        let params =
            ListParams::default().labels(&format!("{LEASE_LABEL}={}", self.scheduler_name));
        let leases =
            self.handle
                .block_on(self.api.list(&params))
                .map_err(|e| LeaseError::List {
                    namespace: self.namespace.clone(),
                    reason: e.to_string(),
                })?;
        Ok(leases
            .items
            .into_iter()
            .filter_map(|l| {
                let holder = l.spec.as_ref()?.holder_identity.as_deref()?.parse().ok()?;
                Some((holder, l.metadata.resource_version?))
            })
            .collect())
    }
}

/// How long the scheduling loop may show no progress before the keeper stops renewing:
/// ten leases, and never under a minute, so that a long plan or a slow API server is not
/// taken for a wedged loop (binds mark progress one by one).
pub fn stall_limit(lease_ms: u64) -> Duration {
    Duration::from_millis(lease_ms.saturating_mul(10)).max(Duration::from_secs(60))
}

/// How often the keeper renews: three times a lease (a renewal lost to one API-server
/// error leaves two more), and at most 10 times a second.
pub fn renew_every(lease_ms: u64) -> Duration {
    Duration::from_millis((lease_ms / 3).max(100))
}

/// What the keeper does at one tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tick {
    Renew,
    /// The loop made no progress for `stalled` (at least the stall limit): no renewal.
    Withhold {
        stalled: Duration,
    },
}

/// The keeper's decision at a tick, from the age of the loop's last progress mark.
pub fn tick(progress_age: Duration, stall_limit: Duration) -> Tick {
    if progress_age < stall_limit {
        Tick::Renew
    } else {
        Tick::Withhold {
            stalled: progress_age,
        }
    }
}

/// Renews one replica's Lease on its own timer while the loop shows progress; stops when
/// dropped.
#[derive(Debug)]
pub struct LeaseKeeper {
    task: JoinHandle<()>,
}

impl LeaseKeeper {
    /// Starts renewing `replica`'s Lease now, every [`renew_every`] of `lease_ms`.
    pub fn start(
        leases: ReplicaLeases,
        replica: ReplicaId,
        lease_ms: u64,
        progress: Arc<LoopProgress>,
    ) -> Self {
        let handle = leases.handle.clone();
        let every = renew_every(lease_ms);
        let limit = stall_limit(lease_ms);
        let task = handle.spawn(async move {
            let mut timer = tokio::time::interval(every);
            // A tick missed while a renewal was slow is not made up in a burst.
            timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut withholding = false;
            loop {
                timer.tick().await;
                match tick(progress.age(), limit) {
                    Tick::Renew => {
                        if std::mem::take(&mut withholding) {
                            tracing::info!(replica, "the scheduling loop moves again: renewing the Lease");
                        }
                        renew_once(&leases, replica, Duration::from_millis(lease_ms)).await;
                    }
                    Tick::Withhold { stalled } => {
                        counter!(metric::LEASE_RENEWALS_WITHHELD).increment(1);
                        if !std::mem::replace(&mut withholding, true) {
                            tracing::error!(replica, stalled_s = stalled.as_secs(), limit_s = limit.as_secs(), "the scheduling loop has shown no progress for the stall limit: no longer renewing the Lease, so the leader moves this replica's shards");
                        }
                    }
                }
            }
        });
        Self { task }
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One renewal, given up after `within` (one lease: a renewal landing later is worth
/// nothing), so that a hung request does not hold the keeper back for good.
async fn renew_once(leases: &ReplicaLeases, replica: ReplicaId, within: Duration) {
    match tokio::time::timeout(within, leases.renew(replica)).await {
        Ok(Ok(())) => counter!(metric::LEASE_RENEWALS).increment(1),
        Ok(Err(e)) => {
            counter!(metric::LEASE_RENEW_FAILURES).increment(1);
            tracing::warn!(error = %e, "lease renewal failed");
        }
        Err(_) => {
            counter!(metric::LEASE_RENEW_FAILURES).increment(1);
            tracing::warn!(
                replica,
                within_ms = within.as_millis() as u64,
                "lease renewal timed out"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::serve::liveness::LeaseWatch;

    /// How the replica's Lease is renewed in [`first_declared_dead`].
    #[derive(Clone, Copy)]
    enum Renewer {
        /// The keeper: every `renew_every`, while the loop's progress is younger than the
        /// stall limit.
        Keeper,
        /// Once at the start of each scheduling period, as before the keeper (planted).
        EachPeriod,
    }

    /// Simulated milliseconds: replica 1's loop starts a period (a progress mark) every
    /// `period_ms` until `stalls_at`; its Lease is renewed as `renewer` says; the leader
    /// lists the Leases every 500 ms into a `LeaseWatch`. The first listing at which the
    /// leader no longer counts replica 1 live, if any before `until`.
    fn first_declared_dead(
        lease_ms: u64,
        period_ms: u64,
        stalls_at: u64,
        until: u64,
        renewer: Renewer,
    ) -> Option<u64> {
        let every = u64::try_from(renew_every(lease_ms).as_millis()).expect("ms");
        let limit = stall_limit(lease_ms);
        let members = BTreeSet::from([1]);
        let mut watch = LeaseWatch::new(lease_ms, 0);
        let (mut version, mut last_mark) = (0u64, 0u64);
        for t in 0..=until {
            if t % period_ms == 0 && t < stalls_at {
                last_mark = t;
            }
            let renew = match renewer {
                Renewer::Keeper => {
                    t % every == 0
                        && tick(Duration::from_millis(t - last_mark), limit) == Tick::Renew
                }
                Renewer::EachPeriod => t % period_ms == 0 && t < stalls_at,
            };
            version += u64::from(renew);
            if t % 500 == 0 {
                watch.observe(&BTreeMap::from([(1, version.to_string())]), t);
                if !watch.live(t, &BTreeSet::new(), &members).contains(&1) {
                    return Some(t);
                }
            }
        }
        None
    }

    #[test]
    fn a_replica_busy_in_cycles_longer_than_its_lease_stays_live() {
        // 5 s cycles against a 1 s lease: a loaded chaos run, 2026-12-02.
        let busy = first_declared_dead(1000, 5000, u64::MAX, 120_000, Renewer::Keeper);
        assert_eq!(busy, None);
        // Renewed once a period, as before the keeper, it was declared dead within a lease
        // or two of every cycle's start.
        let planted = first_declared_dead(1000, 5000, u64::MAX, 120_000, Renewer::EachPeriod);
        assert!(planted.is_some_and(|t| t <= 2000), "{planted:?}");
    }

    #[test]
    fn a_replica_whose_loop_stalls_lets_its_lease_lapse_after_the_stall_limit() {
        let (lease, stalls_at) = (3000, 10_000);
        let dead = first_declared_dead(lease, 1000, stalls_at, 200_000, Renewer::Keeper)
            .expect("a stalled loop's Lease lapses");
        let limit = u64::try_from(stall_limit(lease).as_millis()).expect("ms");
        // Its last progress mark was at 9 s: no renewal after 9 s + the limit, dead one
        // lease later (plus a renewal tick and a listing at most).
        let last_mark = stalls_at - 1000;
        assert!(dead > last_mark + limit, "{dead}");
        assert!(dead <= last_mark + limit + lease + 1000 + 500, "{dead}");
    }

    #[test]
    fn the_keeper_renews_three_times_a_lease_and_waits_ten_leases_or_a_minute() {
        assert_eq!(renew_every(3000), Duration::from_millis(1000));
        assert_eq!(renew_every(1000), Duration::from_millis(333));
        assert_eq!(renew_every(1), Duration::from_millis(100));
        assert_eq!(stall_limit(1000), Duration::from_secs(60));
        assert_eq!(stall_limit(30_000), Duration::from_secs(300));
        assert_eq!(stall_limit(u64::MAX), Duration::from_millis(u64::MAX));
        let limit = Duration::from_secs(60);
        assert_eq!(tick(Duration::from_secs(59), limit), Tick::Renew);
        assert_eq!(tick(limit, limit), Tick::Withhold { stalled: limit });
    }
}
