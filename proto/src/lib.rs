//! phalanx-proto: the gRPC wire types, generated from `proto/*.proto` at build time
//! with protox + tonic-prost-build (no protoc needed).
//!
//! | module | package | services |
//! |---|---|---|
//! | [`raft`] | `phalanx.raft.v1` | `RaftService` (AppendEntries, Vote, InstallSnapshot) |
//! | [`ledger`] | `phalanx.ledger.v1` | `LedgerService` (Propose, Read) |
//! | [`coord`] | `phalanx.coord.v1` | `CoordinatorService` (Prepare, PrepareReply, Decide, Deliver, Query) |
//! | [`admin`] | `phalanx.admin.v1` | `AdminService` (Explain, Status) |

/// The generated packages, nested as their proto package names are (the generated code
/// refers to sibling packages through `super::`).
#[allow(clippy::all, clippy::pedantic, missing_debug_implementations)]
pub mod phalanx {
    /// `phalanx.raft`.
    pub mod raft {
        /// `phalanx.raft.v1`: Raft RPCs between ledger replicas.
        pub mod v1 {
            tonic::include_proto!("phalanx.raft.v1");
        }
    }
    /// `phalanx.coord`.
    pub mod coord {
        /// `phalanx.coord.v1`: two-phase reservation between shard owners.
        pub mod v1 {
            tonic::include_proto!("phalanx.coord.v1");
        }
    }
    /// `phalanx.admin`.
    pub mod admin {
        /// `phalanx.admin.v1`: the operator's explain and status.
        pub mod v1 {
            tonic::include_proto!("phalanx.admin.v1");
        }
    }
    /// `phalanx.ledger`.
    pub mod ledger {
        /// `phalanx.ledger.v1`: the ledger client API.
        pub mod v1 {
            tonic::include_proto!("phalanx.ledger.v1");
        }
    }
}

pub use phalanx::admin::v1 as admin;
pub use phalanx::coord::v1 as coord;
pub use phalanx::ledger::v1 as ledger;
pub use phalanx::raft::v1 as raft;
