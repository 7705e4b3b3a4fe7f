//! The replicated ledger under faults while the scheduler runs: leaders are killed and
//! restarted between cycles, and scheduling continues with every invariant holding after
//! every cycle, and the workload finishes as it does without faults. (Where a gang lands may
//! differ: a plan whose leader died mid-proposal and did not commit is proposed again a cycle
//! later, on a cluster that has moved on.)

use phalanx_scheduler::framework::SchedulerConf;
use phalanx_scheduler::ledger::{LedgerFault, RaftLedger, ScheduledFault};
use phalanx_scheduler::simulate::driver::{DriverOptions, RunOutcome, drive_with};
use phalanx_scheduler::simulate::synthetic::{SyntheticSpec, generate};

fn run(faults: Vec<ScheduledFault>) -> (RunOutcome, Vec<String>) {
    let mut spec = SyntheticSpec::new(16, 8, 60, 11);
    spec.duration_ms = Some((2_000, 5_000));
    let w = generate(&spec);
    let mut sim = w.into_sim();
    let mut ledger = RaftLedger::start(3).expect("three replicas start on loopback");
    let opts = DriverOptions {
        faults,
        ..DriverOptions::default()
    };
    let outcome = drive_with(
        &mut sim,
        &SchedulerConf::volcano_default(),
        &opts,
        &mut ledger,
        |_| {},
    );
    let mut placements: Vec<String> = sim
        .pods()
        .map(|p| format!("{} bound={} {:?}", p.key, p.node_name.is_some(), p.phase))
        .collect();
    placements.sort();
    (outcome, placements)
}

#[test]
fn scheduling_continues_through_leader_kills_without_double_booking() {
    let (clean, clean_placements) = run(Vec::new());
    assert!(clean.violations.is_empty(), "{:?}", clean.violations);
    let faults = vec![
        ScheduledFault {
            at_ms: 2_000,
            fault: LedgerFault::KillLeader,
        },
        ScheduledFault {
            at_ms: 6_000,
            fault: LedgerFault::Restart(None),
        },
        ScheduledFault {
            at_ms: 9_000,
            fault: LedgerFault::KillLeader,
        },
    ];
    let (faulty, faulty_placements) = run(faults);
    assert!(faulty.violations.is_empty(), "{:?}", faulty.violations);
    assert!(
        faulty.ledger_errors.is_empty(),
        "{:?}",
        faulty.ledger_errors
    );
    assert_eq!(faulty.faults.len(), 3, "{:?}", faulty.faults);
    for f in &faulty.faults {
        assert!(
            f.what.contains("stopped replica") || f.what.contains("restarted replica"),
            "{f:?}"
        );
    }
    assert!(
        faulty.faults[0].recovered_after.is_some(),
        "a plan must be committed after the first leader was killed: {:?}",
        faulty.faults
    );
    assert!(
        clean.total_binds() > 60,
        "the workload must keep scheduling: {}",
        clean.total_binds()
    );
    assert_eq!(clean_placements, faulty_placements);
}
