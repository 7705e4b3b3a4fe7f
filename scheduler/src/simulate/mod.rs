//! `phalanx simulate`: the scheduler on the embedded simulated cluster.

pub mod driver;
pub mod synthetic;
