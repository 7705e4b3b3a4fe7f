//! The fairness run of `phalanx simulate --nodes 64 --jobs 1000 --queues a:1,b:2,c:3`: queue
//! a fills the cluster alone, b and c arrive, and reclaim must bring every queue to its
//! weighted share of the GPUs, within 5% (relative) of 1:2:3.

use phalanx_scheduler::framework::SchedulerConf;
use phalanx_scheduler::simulate::fairness::{FairnessSpec, parse_queues, run};

fn assert_fair(queues: &str) {
    let spec = FairnessSpec {
        nodes: 64,
        gpus_per_node: 8,
        jobs: 1000,
        queues: parse_queues(queues).expect("valid queues"),
        seed: 1,
    };
    let report = run(&spec, &SchedulerConf::volcano_default());
    let text = report.render();
    assert!(report.violations.is_empty(), "{text}");
    assert!(report.quiescent, "{text}");
    assert!(
        report.evicted > 0,
        "reclaim must have done the work:\n{text}"
    );
    assert!(
        report.max_relative_error() <= 0.05,
        "shares are not within 5% of {queues}:\n{text}"
    );
}

#[test]
fn three_queues_weighted_one_two_three_end_within_five_percent_of_their_shares() {
    assert_fair("a:1,b:2,c:3");
}

/// The last queue to arrive is the smallest: the middle one must not hold the admission
/// budget with gangs it can never be given (volcano#5006).
#[test]
fn the_smallest_queue_arriving_last_still_gets_its_share() {
    assert_fair("a:3,b:2,c:1");
}
