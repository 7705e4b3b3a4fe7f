//! The sharded runtime's fault mixes over many seeds: a shard owner killed, one paused
//! past its lease, both, and the ledger leader's process killed, each over 40 seeds of a
//! small generated workload (12 nodes, 40 gangs, pods of 20-60 s, 3 replicas, 6 shards).
//! Every run must pass every invariant check the driver makes after every cycle (I1-I3,
//! commit-then-bind, the ledger's checks, no leaked reservation, I4 on every fenced write)
//! and settle.
//!
//! The ledger is the state machine in process behind a stand-in for a three-replica ledger
//! (it names a leader and takes kill faults), so a run costs milliseconds and the sweep
//! fits a test run: the defects this sweep guards against are the runtime's, not Raft's
//! (the Raft paths have their own tests in `shard_faults.rs`).

use std::collections::BTreeSet;

use phalanx_scheduler::framework::SchedulerConf;
use phalanx_scheduler::ledger::{
    LedgerBackend, LedgerError, LedgerFault, LocalLedger, ScheduledFault,
};
use phalanx_scheduler::simulate::driver::{DriverOptions, RunOutcome, drive_with};
use phalanx_scheduler::simulate::sharded::sharding_for;
use phalanx_scheduler::simulate::synthetic::{SyntheticSpec, generate};
use phalanx_statestore::ledger::ReplicaId;
use phalanx_statestore::{LedgerCommand, LedgerResponse, LedgerState};

const SEEDS: u64 = 40;
const REPLICAS: u64 = 3;

/// The ledger's state machine in process, answering as a three-replica ledger would when a
/// new leader is elected at once: a killed replica is gone, the lowest live one leads.
struct ThreeReplicaStandIn {
    inner: LocalLedger,
    down: BTreeSet<ReplicaId>,
}

impl ThreeReplicaStandIn {
    fn new() -> Self {
        Self {
            inner: LocalLedger::new(),
            down: BTreeSet::new(),
        }
    }
}

impl LedgerBackend for ThreeReplicaStandIn {
    fn propose_all(
        &mut self,
        commands: Vec<LedgerCommand>,
    ) -> Result<Vec<LedgerResponse>, LedgerError> {
        self.inner.propose_all(commands)
    }

    fn propose_raw(
        &mut self,
        commands: Vec<LedgerCommand>,
    ) -> Result<Vec<LedgerResponse>, LedgerError> {
        self.inner.propose_raw(commands)
    }

    fn read_state(&mut self) -> Result<std::sync::Arc<LedgerState>, LedgerError> {
        self.inner.read_state()
    }

    fn replica_count(&self) -> usize {
        REPLICAS as usize
    }

    fn leader_id(&mut self) -> Result<Option<ReplicaId>, LedgerError> {
        Ok((1..=REPLICAS).find(|r| !self.down.contains(r)))
    }

    fn inject_fault(&mut self, fault: &LedgerFault) -> Result<String, LedgerError> {
        match fault {
            LedgerFault::Kill(id) => {
                self.down.insert(*id);
            }
            LedgerFault::Restart(Some(id)) => {
                self.down.remove(id);
            }
            _ => {}
        }
        Ok(format!("stand-in: {fault}"))
    }
}

fn run(seed: u64, faults: &[&str]) -> RunOutcome {
    let mut spec = SyntheticSpec::new(12, 8, 40, seed);
    spec.duration_ms = Some((20_000, 60_000));
    spec.max_gang_pods = 16;
    let mut sim = generate(&spec).into_sim();
    let faults: Vec<ScheduledFault> = faults
        .iter()
        .map(|f| ScheduledFault::parse(f).expect("a valid fault"))
        .collect();
    let opts = DriverOptions {
        sharding: sharding_for(6, None, REPLICAS, &faults, seed),
        faults,
        max_cycles: 2_000,
        ..DriverOptions::default()
    };
    drive_with(
        &mut sim,
        &SchedulerConf::volcano_default(),
        &opts,
        &mut ThreeReplicaStandIn::new(),
        |_| {},
    )
}

/// The seeds of `faults` whose run reported a violation, a ledger error or did not settle,
/// each with its first complaint.
fn failing_seeds(faults: &[&str]) -> Vec<String> {
    (1..=SEEDS)
        .filter_map(|seed| {
            let outcome = run(seed, faults);
            let first = outcome
                .violations
                .first()
                .map(|(cycle, v)| format!("cycle {cycle}: {v}"))
                .or_else(|| outcome.ledger_errors.first().cloned())
                .or_else(|| (!outcome.quiescent).then(|| "did not settle".to_string()));
            first.map(|why| format!("seed {seed}: {why}"))
        })
        .collect()
}

fn assert_every_seed_passes(faults: &[&str]) {
    let failing = failing_seeds(faults);
    assert!(
        failing.is_empty(),
        "{} of {SEEDS} seeds failed with {faults:?}:\n{}",
        failing.len(),
        failing.join("\n")
    );
}

#[test]
fn every_seed_passes_its_checks_when_a_shard_owner_is_killed() {
    assert_every_seed_passes(&["kill:replica-2@30s"]);
}

#[test]
fn every_seed_passes_its_checks_when_a_shard_owner_is_paused_past_its_lease() {
    assert_every_seed_passes(&["pause:replica-3@40s+15s"]);
}

#[test]
fn every_seed_passes_its_checks_when_one_owner_is_killed_and_another_paused() {
    assert_every_seed_passes(&["kill:replica-2@30s", "pause:replica-3@40s+15s"]);
}

#[test]
fn every_seed_passes_its_checks_when_the_ledger_leader_is_killed() {
    assert_every_seed_passes(&["kill:leader@30s"]);
}
