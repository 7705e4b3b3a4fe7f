//! openraft's storage conformance suite (`openraft::testing::Suite`) run against the
//! ledger's log store (fsynced append-only file) and state machine (sled snapshots).

use openraft::testing::{StoreBuilder, Suite};
use phalanx_statestore::log_store::FileLogStore;
use phalanx_statestore::raft_types::{StorageError, TypeConfig};
use phalanx_statestore::state_machine::LedgerStateMachine;

struct Builder;

impl StoreBuilder<TypeConfig, FileLogStore, LedgerStateMachine, tempfile::TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, FileLogStore, LedgerStateMachine), StorageError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = FileLogStore::open(dir.path()).expect("open log store");
        let sm = LedgerStateMachine::open(dir.path()).expect("open state machine");
        Ok((dir, log, sm))
    }
}

#[test]
#[allow(clippy::result_large_err)] // openraft's Suite returns its own StorageError
fn log_store_and_state_machine_pass_openraft_storage_suite() -> Result<(), StorageError> {
    Suite::test_all(Builder)
}
