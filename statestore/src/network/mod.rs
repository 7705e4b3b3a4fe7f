//! The gRPC network between replicas (`peer`: openraft's client side; `server`: the
//! services a replica serves), the wire conversions (`wire`) and a seeded
//! fault-injection test seam on outgoing Raft RPCs (`faults`, inert by default).

pub mod faults;
pub mod peer;
pub mod server;
pub mod wire;

/// Largest gRPC message sent or accepted (bounds a snapshot chunk or an entries batch).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// Largest serialized proposal (one Raft entry) the ledger service accepts, so that any
/// single entry fits one AppendEntries message with room to spare.
pub const MAX_PROPOSAL_BYTES: usize = MAX_MESSAGE_BYTES / 4;

pub use faults::{FaultInjector, FaultStats, NetworkFaults};
pub use peer::{PeerClient, PeerNetwork};
pub use server::{LedgerGrpc, RaftGrpc};
