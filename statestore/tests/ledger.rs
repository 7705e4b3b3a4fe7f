//! Every integration test of the ledger crate, in one test binary (see
//! scheduler/tests/integration.rs for why); `cargo test -p phalanx-statestore --test
//! ledger tls::` runs one file's tests.

#[path = "cluster.rs"]
mod cluster;
#[path = "corrupt_log.rs"]
mod corrupt_log;
#[path = "durability.rs"]
mod durability;
#[path = "faults.rs"]
mod faults;
#[path = "incremental_reads.rs"]
mod incremental_reads;
#[path = "shard_assignment.rs"]
mod shard_assignment;
#[path = "storage_conformance.rs"]
mod storage_conformance;
#[path = "tls.rs"]
mod tls;
