//! The fairness run of `phalanx simulate --nodes 64 --jobs 1000 --queues a:1,b:2,c:3`: queue
//! a fills the cluster alone, b and c arrive, and reclaim must bring every queue to its
//! weighted share of the GPUs, within 5% (relative) of 1:2:3.

use phalanx_scheduler::framework::SchedulerConf;
use phalanx_scheduler::shard::ShardingConfig;
use phalanx_scheduler::simulate::fairness::{FairnessReport, FairnessSpec, parse_queues, run};
use phalanx_scheduler::simulate::sharded::ShardOptions;

fn assert_fair(queues: &str) {
    assert_fair_with(queues, None);
}

fn assert_fair_with(queues: &str, sharding: Option<ShardOptions>) -> FairnessReport {
    let spec = FairnessSpec {
        nodes: 64,
        gpus_per_node: 8,
        jobs: 1000,
        queues: parse_queues(queues).expect("valid queues"),
        seed: 1,
        sharding,
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
    report
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

/// Issue 5: shares come from the whole cluster's usage, not a shard's view, so splitting
/// the queues and nodes into 4 shards over 4 replicas gives the same weighted shares.
#[test]
fn four_shards_over_four_replicas_give_the_same_weighted_shares_as_one() {
    let one = assert_fair_with("a:1,b:2,c:3", None);
    let sharding = ShardOptions::new(
        ShardingConfig {
            shards: 4,
            ..ShardingConfig::default()
        },
        4,
    );
    let four = assert_fair_with("a:1,b:2,c:3", Some(sharding));
    for (a, b) in one.queues.iter().zip(&four.queues) {
        assert_eq!(a.name, b.name);
        assert!(
            (a.share - b.share).abs() <= 0.05 * a.target,
            "queue {}: {:.3} with 1 shard, {:.3} with 4\n{}\n{}",
            a.name,
            a.share,
            b.share,
            one.render(),
            four.render()
        );
    }
}
