//! The gRPC network between replicas (`peer`: openraft's client side; `server`: the
//! services a replica serves), the wire conversions (`wire`), which peers refuse
//! connections (`reachability`, a fast sign of a crashed peer) and a seeded
//! fault-injection test seam on outgoing Raft RPCs (`faults`, inert by default).

pub mod faults;
pub mod peer;
pub mod reachability;
pub mod server;
pub mod wire;

/// Largest gRPC message sent or accepted (bounds a snapshot chunk or an entries batch).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// Largest serialized proposal (one Raft entry) the ledger service accepts, and the most
/// entry bytes one AppendEntries carries (more entries are split). Bounded by time, not by
/// the message limit: openraft 0.9 gives every AppendEntries one heartbeat interval (40 ms
/// by default) to be encoded, sent, decoded and fsynced by the follower. At 4 MiB an entry
/// missed that on this project's 2-core CI machine in a release build, was resent each
/// heartbeat and never committed within the client's 5 s
/// (`scheduler/tests/ledger_proposal_limits.rs`); 2 MiB replicates in time and still holds
/// a 4,096-pod gang with names of 200 bytes.
pub const MAX_PROPOSAL_BYTES: usize = 2 * 1024 * 1024;

pub use faults::{FaultInjector, FaultStats, NetworkFaults};
pub use peer::{PeerClient, PeerNetwork};
pub use reachability::Reachability;
pub use server::{LedgerGrpc, RaftGrpc};
