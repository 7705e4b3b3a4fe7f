//! `phalanx simulate`: the scheduler on the embedded simulated cluster — the built-in demo,
//! scenario files (SCENARIOS.md), and generated workloads.

pub mod demo;
pub mod driver;
pub mod expect;
pub mod fairness;
pub mod generated;
pub mod pool_pick;
pub mod quorum;
pub mod release_queue;
pub mod scenario;
pub mod sharded;
pub mod synthetic;
pub mod thread_cpu;
