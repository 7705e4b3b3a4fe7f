//! Shards: which shard a queue or a node belongs to, and which replica owns each shard.
//!
//! ```text
//!  ShardingConfig ──validate()──► ShardMap ── shard_of_queue / shard_of_node ──► ShardId
//!
//!  Heartbeats (last seen per replica, simulated time) ──live(now_ms)──┐
//!  ledger shards: ShardId -> (owner, epoch) ─────────────────────────┴─► assign() ──► Vec<Move>
//!                                                   (the Raft leader proposes each Move as AssignShard)
//! ```
//!
//! Everything here is pure: no clock, no randomness, no IO. See `docs/shards.md`.

pub mod heartbeats;
pub mod ownership;
pub mod shard_map;

pub use heartbeats::Heartbeats;
pub use ownership::{Move, assign, assign_shards};
pub use shard_map::{
    MAX_EXPLICIT_QUEUES, MAX_SHARDS, ShardMap, ShardingConfig, ShardingError, stable_hash,
};
