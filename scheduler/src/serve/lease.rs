//! `ReplicaLeases`: each replica's liveness record, a Kubernetes Lease
//! (`coordination.k8s.io/v1`) named `<scheduler-name>-replica-<id>`, renewed once a period by
//! its replica and listed by the Raft leader (see `liveness.rs` for how it is read, and
//! docs/shards.md "Liveness" for why Leases rather than a ledger command).

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, ListParams, Patch, PatchParams};
use phalanx_statestore::ledger::ReplicaId;
use thiserror::Error;
use tokio::runtime::Handle;

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
#[derive(Debug)]
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
    pub fn renew(&self, replica: ReplicaId) -> Result<(), LeaseError> {
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
        self.handle
            .block_on(self.api.patch(&name, &params, &Patch::Apply(&lease)))
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
