//! What phalanx exports to Prometheus, in one place: the metric names (one list, read by
//! the code that emits them, the dashboard check and the docs), the recorder with
//! Volcano's histogram buckets, what one scheduling cycle records, and the per-object
//! gauges that are rebuilt every cycle ([`state`]).
//!
//! The scheduling family keeps Volcano's names, meanings and labels under `phalanx_`
//! (Volcano's `volcano_e2e_scheduling_latency_milliseconds` is
//! `phalanx_e2e_scheduling_latency_milliseconds` here), so a Volcano dashboard or alert
//! carries over by changing the prefix.

pub mod cycle;
pub mod fragmentation;
pub mod progress;
pub mod state;

use metrics::{describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusRecorder};

pub use cycle::{CycleTimings, record_cycle, record_gang_scheduled};
pub use state::{StateSeries, state_series};

/// How a metric is exposed; the dashboard check and the docs read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Declares each name as a constant and lists them all in [`name::ALL`] with kind and help.
macro_rules! metric_names {
    ($($(#[$doc:meta])* $id:ident = $text:literal, $kind:ident, $help:literal;)*) => {
        $($(#[$doc])* pub const $id: &str = $text;)*
        /// Every metric phalanx exports: name, kind, help text.
        pub const ALL: &[(&str, super::Kind, &str)] = &[$(($text, super::Kind::$kind, $help)),*];
    };
}

/// Metric names (Prometheus).
pub mod name {
    metric_names! {
        // The scheduling family, as Volcano's.
        E2E_LATENCY = "phalanx_e2e_scheduling_latency_milliseconds", Histogram,
            "E2e scheduling latency in milliseconds (scheduling algorithm + binding)";
        E2E_JOB_LATENCY = "phalanx_e2e_job_scheduling_latency_milliseconds", Histogram,
            "E2e job scheduling latency in milliseconds (PodGroup created to gang placed)";
        ACTION_LATENCY = "phalanx_action_scheduling_latency_milliseconds", Histogram,
            "Action scheduling latency in milliseconds";
        PLUGIN_LATENCY = "phalanx_plugin_scheduling_latency_milliseconds", Histogram,
            "Plugin scheduling latency in milliseconds";
        SCHEDULE_ATTEMPTS = "phalanx_schedule_attempts_total", Counter,
            "Number of attempts to schedule pods, by the result: 'scheduled' a pod was placed, 'unschedulable' it could not be, 'error' an internal scheduler problem";
        PREEMPTION_VICTIMS = "phalanx_pod_preemption_victims", Gauge,
            "Number of selected preemption victims in the last cycle";
        PREEMPTION_ATTEMPTS = "phalanx_total_preemption_attempts", Counter,
            "Total preemption and reclaim evictions in the cluster till now";
        UNSCHEDULE_TASK_COUNT = "phalanx_unschedule_task_count", Gauge,
            "Number of tasks could not be scheduled, per job (namespace/name)";
        UNSCHEDULE_JOB_COUNT = "phalanx_unschedule_job_count", Gauge,
            "Number of jobs could not be scheduled";
        QUEUE_ALLOCATED_MILLI_CPU = "phalanx_queue_allocated_milli_cpu", Gauge,
            "Allocated CPU count for one queue";
        QUEUE_ALLOCATED_MEMORY = "phalanx_queue_allocated_memory_bytes", Gauge,
            "Allocated memory for one queue";
        QUEUE_ALLOCATED_SCALAR = "phalanx_queue_allocated_scalar_resources", Gauge,
            "Allocated scalar resources for one queue";
        QUEUE_REQUEST_MILLI_CPU = "phalanx_queue_request_milli_cpu", Gauge,
            "Request CPU count for one queue";
        QUEUE_REQUEST_MEMORY = "phalanx_queue_request_memory_bytes", Gauge,
            "Request memory for one queue";
        QUEUE_REQUEST_SCALAR = "phalanx_queue_request_scalar_resources", Gauge,
            "Request scalar resources for one queue";
        QUEUE_DESERVED_MILLI_CPU = "phalanx_queue_deserved_milli_cpu", Gauge,
            "Deserved CPU count for one queue";
        QUEUE_DESERVED_MEMORY = "phalanx_queue_deserved_memory_bytes", Gauge,
            "Deserved memory for one queue";
        QUEUE_DESERVED_SCALAR = "phalanx_queue_deserved_scalar_resources", Gauge,
            "Deserved scalar resources for one queue";
        QUEUE_CAPABILITY_MILLI_CPU = "phalanx_queue_capability_milli_cpu", Gauge,
            "Capability CPU count for one queue (absent: unlimited)";
        QUEUE_CAPABILITY_MEMORY = "phalanx_queue_capability_memory_bytes", Gauge,
            "Capability memory for one queue (absent: unlimited)";
        QUEUE_CAPABILITY_SCALAR = "phalanx_queue_capability_scalar_resources", Gauge,
            "Capability scalar resources for one queue (absent: unlimited)";
        QUEUE_WEIGHT = "phalanx_queue_weight", Gauge, "Weight for one queue";
        QUEUE_PENDING_JOBS = "phalanx_queue_pending_jobs", Gauge,
            "PodGroups of one queue with pods not yet placed";
        /// Valued with the seconds the PodGroup has been in `phase`.
        PODGROUP_STATUS = "phalanx_podgroup_status", Gauge,
            "Seconds the PodGroup has been in its phase (one series per PodGroup, labelled with the phase)";
        // Fragmentation and use.
        FRAGMENTED_GPU_RATIO = "phalanx_fragmented_gpu_ratio", Gauge,
            "Share of free GPUs on nodes that cannot host one pod of the most common gang shape";
        LARGEST_FITTING_GANG = "phalanx_largest_fitting_gang_pods", Gauge,
            "Pods of the most common gang shape that fit in the free resources now";
        CLUSTER_GPUS = "phalanx_cluster_gpus", Gauge,
            "GPUs of the cluster's schedulable nodes, by state (allocatable, used)";
        // The replica's loop.
        CYCLES = "phalanx_cycles_total", Counter, "Scheduling cycles run";
        STATE_CACHE_CYCLES = "phalanx_state_cache_cycles_total", Counter,
            "Cycles by how their state was made from the watch caches (patched, built, mismatch)";
        /// Why each period of serve's loop started, by `reason` (period, raft, refusal,
        /// shard_moved): all but `period` are early wakeups (`serve/wakeup.rs`).
        LOOP_WAKEUPS = "phalanx_loop_wakeups_total", Counter,
            "Periods of the replica's loop, by what started them (the period, or an early wakeup)";
        CYCLE_SECONDS = "phalanx_cycle_duration_seconds", Histogram,
            "Duration of one scheduling cycle in seconds (plan, commit; serve's binds run after it)";
        PODS_BOUND = "phalanx_pods_bound_total", Counter, "Pods bound";
        BIND_FAILURES = "phalanx_bind_failures_total", Counter, "Binds the API server refused";
        BIND_LATENCY = "phalanx_bind_latency_milliseconds", Histogram,
            "Time to bind one gang, from its binds queued to the last one answered, in milliseconds";
        BINDS_IN_FLIGHT = "phalanx_binds_in_flight", Gauge,
            "Pods whose bind is queued or running off the cycle, not yet recorded in the ledger";
        LEDGER_PROPOSALS = "phalanx_ledger_proposals_total", Counter,
            "Gang placements proposed to the ledger, by result (accepted, refused, error)";
        LEDGER_REFUSALS = "phalanx_ledger_refusals_total", Counter,
            "Gang placements the ledger refused, by reason";
        LEDGER_ERRORS = "phalanx_ledger_errors_total", Counter, "Ledger calls that failed";
        IS_LEADER = "phalanx_is_leader", Gauge, "1 when this replica leads the ledger group";
        RAFT_TERM = "phalanx_raft_term", Gauge, "The ledger group's Raft term, as this replica sees it";
        /// openraft 0.9 tells a follower its stored log, not the commit index.
        RAFT_LOG_INDEX = "phalanx_raft_last_log_index", Gauge, "Highest ledger log index stored here";
        RAFT_APPLY_INDEX = "phalanx_raft_apply_index", Gauge, "Highest ledger log index applied here";
        RAFT_APPLY_LAG = "phalanx_raft_apply_lag_entries", Gauge,
            "Ledger entries stored here and not yet applied";
        RAFT_LEADER_CHANGES = "phalanx_raft_leader_changes_total", Counter,
            "Times this replica saw the ledger leader change";
        /// Per owned shard (label `shard`): its epoch; 0 once the shard is lost.
        OWNED_EPOCH = "phalanx_shard_epoch", Gauge, "Epoch of each shard this replica owns (0: lost)";
        OWNED_SHARDS = "phalanx_owned_shards", Gauge, "Shards this replica owns";
        /// Per shard (label `shard`), on the leader: the owner's replica id (0: none).
        SHARD_OWNER = "phalanx_shard_owner", Gauge, "Owner replica of each shard, on the leader (0: none)";
        /// Shard moves the leader proposed.
        SHARD_MOVES = "phalanx_shard_moves_total", Counter, "Shard moves the leader proposed";
        LEASE_RENEWALS = "phalanx_lease_renewals_total", Counter, "Replica lease renewals";
        LEASE_RENEW_FAILURES = "phalanx_lease_renew_failures_total", Counter, "Replica lease renewals that failed";
        LEASE_RENEWALS_WITHHELD = "phalanx_lease_renewals_withheld_total", Counter, "Lease renewals withheld because the scheduling loop showed no progress for the stall limit";
        /// Gangs planned over pools this replica does not own alone (left pending).
        GANGS_KEPT_BACK = "phalanx_gangs_kept_back_total", Counter,
            "Gangs planned over pools this replica does not own alone";
        /// Planned gangs past `--max-pods-per-cycle`, left for the next cycle.
        GANGS_DEFERRED = "phalanx_gangs_deferred_total", Counter,
            "Planned gangs left for the next cycle by --max-pods-per-cycle";
        /// Events queued and not written: replaced by a later Event of the same object
        /// and reason, or dropped with the `Unschedulable` condition they told of when a
        /// later status replaced it before it was written.
        EVENTS_REPLACED = "phalanx_events_replaced_total", Counter,
            "Events not written: replaced by a later Event of the same object and reason, or dropped with the Unschedulable condition they told of";
        /// Cross-shard transactions ended, by `outcome` (committed, aborted, rejected,
        /// unfinished).
        TXNS = "phalanx_2pc_transactions_total", Counter, "Cross-shard transactions ended, by outcome";
        TXNS_STARTED = "phalanx_2pc_transactions_started_total", Counter, "Cross-shard transactions started";
        TXN_DECISION_LATENCY = "phalanx_2pc_decision_latency_milliseconds", Histogram,
            "Time from a cross-shard transaction's start to its decision, in milliseconds";
        /// 2PC messages sent to other replicas, by `result` (sent, refused).
        COORD_MESSAGES = "phalanx_2pc_messages_total", Counter, "2PC messages sent, by result";
        PENDING_JOBS = "phalanx_pending_jobs", Gauge, "PodGroups of this replica's shards with pods not placed";
        /// Voters and learners of the ledger group, as this replica applied it.
        RAFT_VOTERS = "phalanx_raft_voters", Gauge, "Voters of the ledger group";
        RAFT_PEERS_REFUSING = "phalanx_raft_peers_refusing", Gauge, "Peers whose Raft listener refused this replica's last connection (crashed or restarting; the leader counts them dead at once)";
        RAFT_LEARNERS = "phalanx_raft_learners", Gauge, "Learners of the ledger group";
        /// Membership steps the leader took, by `step` (add_learner, set_voters,
        /// remove_learners).
        MEMBERSHIP_CHANGES = "phalanx_membership_changes_total", Counter, "Membership steps the leader took";
        /// Warning Events written about objects a snapshot skips or reads with a caveat, by
        /// `result` (written, failed); only the ledger leader writes them.
        OBJECT_WARNINGS = "phalanx_object_warnings_total", Counter,
            "Warning Events about malformed objects written, by result";
    }
}

/// Names kept exactly as Volcano's (with `phalanx_` for `volcano_`) although Prometheus'
/// naming rules say otherwise (milliseconds, not seconds; `_count` gauges; a camel-case
/// `OnSession` label; a counter without `_total`): compatibility with Volcano's dashboards
/// and alerts wins. `promtool check metrics` lints exactly these.
pub const VOLCANO_NAMES: &[&str] = &[
    name::E2E_LATENCY,
    name::E2E_JOB_LATENCY,
    name::ACTION_LATENCY,
    name::PLUGIN_LATENCY,
    name::PREEMPTION_ATTEMPTS,
    name::UNSCHEDULE_TASK_COUNT,
    name::UNSCHEDULE_JOB_COUNT,
];

/// Volcano's buckets for its scheduling latencies: 5 ms doubling 15 times.
pub fn latency_buckets() -> Vec<f64> {
    exponential(5.0, 15)
}

/// Volcano's buckets for the job latency: 32 ms doubling 10 times.
pub fn job_latency_buckets() -> Vec<f64> {
    exponential(32.0, 10)
}

fn exponential(start: f64, count: i32) -> Vec<f64> {
    (0..count).map(|i| start * 2f64.powi(i)).collect()
}

/// The recorder phalanx renders `/metrics` from, with the histograms' buckets; `serve`
/// installs it globally, tests use it locally.
pub fn recorder() -> Result<PrometheusRecorder, BuildError> {
    let mut builder = PrometheusBuilder::new();
    for (metric, kind, _) in name::ALL {
        if *kind != Kind::Histogram {
            continue;
        }
        let buckets = match *metric {
            name::E2E_JOB_LATENCY | name::TXN_DECISION_LATENCY => job_latency_buckets(),
            name::CYCLE_SECONDS => latency_buckets().iter().map(|ms| ms / 1000.0).collect(),
            _ => latency_buckets(),
        };
        builder = builder.set_buckets_for_metric(Matcher::Full(metric.to_string()), &buckets)?;
    }
    Ok(builder.build_recorder())
}

/// Gives every metric emitted through the `metrics` macros its help text (on the recorder
/// in use: the global one, or a local one in tests). The per-object gauges of [`state`]
/// carry their own.
pub fn describe() {
    for (metric, kind, help) in name::ALL {
        if state::is_state_series(metric) {
            continue;
        }
        match kind {
            Kind::Counter => describe_counter!(*metric, *help),
            Kind::Gauge => describe_gauge!(*metric, *help),
            Kind::Histogram => describe_histogram!(*metric, *help),
        }
    }
}
