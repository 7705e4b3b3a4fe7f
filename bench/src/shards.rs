//! `phalanx-bench shards`: throughput of the sharded runtime over replicas × shards.
//!
//! Workload: `--nodes` × `--gpus-per-node` (default 5,000 × 8), `--pods` pods (default
//! 100,000) in the synthetic gangs (sizes 1..64, 1/2/4/8 GPUs a pod, run times 1–3 s
//! simulated, over `--queues` queues). Cross-shard gangs: every 10th gang has half its pods
//! select nodes labelled `bench.phalanx.dev/side-a` and half `bench.phalanx.dev/side-b`;
//! nodes of even shards carry side-a, of odd shards side-b (with one shard every node
//! carries both), so such a gang must span two pools whenever there are two or more.
//! Every gang is planned by the replica owning its queue's shard; home pool strictly
//! first.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::{Result, bail};
use phalanx_scheduler::framework::{HomePool, SchedulerConf};
use phalanx_scheduler::ledger::start_ledger;
use phalanx_scheduler::model::ObjectKey;
use phalanx_scheduler::shard::{ShardMap, ShardingConfig};
use phalanx_scheduler::simulate::driver::{DriverOptions, drive_with};
use phalanx_scheduler::simulate::sharded::ShardOptions;
use phalanx_scheduler::simulate::synthetic::{SyntheticSpec, generate};
use serde::{Deserialize, Serialize};

pub const SIDE_A: &str = "bench.phalanx.dev/side-a";
pub const SIDE_B: &str = "bench.phalanx.dev/side-b";

#[derive(Debug, Clone)]
pub struct ShardBench {
    pub nodes: usize,
    pub gpus_per_node: i64,
    pub pods: usize,
    pub queues: usize,
    pub replicas: Vec<u64>,
    pub shards: Vec<u32>,
    pub seed: u64,
    pub csv: Option<String>,
}

/// One run of the grid. Serialized as the JSON line of `shards --json`, which the suite
/// runs as a process of its own per measurement point (`suite/child.rs`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub replicas: u64,
    pub shards: u32,
    pub binds: usize,
    pub wall_s: f64,
    pub cross_gangs: usize,
    pub cross_committed: usize,
    /// Decision latency of the cross-shard transactions; `None` when there were none
    /// (one shard), rather than a NaN that JSON cannot carry.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub cpu_max: f64,
    pub cpu_mean: f64,
    pub view_cpu: f64,
    pub proposals: u64,
    /// Rounds the driver ran (each running replica plans, commits and binds once a
    /// round): the unit the ledger goal counts proposals in.
    pub rounds: u64,
    /// 2PC messages between replicas acknowledged over gRPC, refused, within a replica.
    pub messages: (u64, u64, u64),
    /// Cross-shard transactions that did not commit: aborted, rejected (the coordinator's
    /// queue was full), unfinished, expired by the ledger.
    #[serde(default)]
    pub not_committed: (usize, usize, usize, usize),
    /// Batches that carried the 2PC messages between replicas (a batch carries what one
    /// replica had for another when its pump's work ran dry, in one `Deliver` request
    /// unless it is over `MAX_DELIVER_BYTES`).
    #[serde(default)]
    pub grpc_batches: u64,
    /// Wall seconds of the rounds spent planning (the round's view and every replica's
    /// cycle) and performing the plans (ledger, 2PC, binds); the rest of `wall_s` is the
    /// driver's own work between them (the round's start, invariant checks, time).
    #[serde(default)]
    pub plan_s: f64,
    #[serde(default)]
    pub perform_s: f64,
    /// Wall seconds of `perform_s` spent waiting on the ledger: proposals, and state reads
    /// (how many), and the pool views the pumps opened.
    #[serde(default)]
    pub ledger_propose_s: f64,
    #[serde(default)]
    pub ledger_read_s: f64,
    #[serde(default)]
    pub ledger_reads: u64,
    #[serde(default)]
    pub views_opened: u64,
    /// PodGroup statuses written and Events recorded over the run.
    #[serde(default)]
    pub statuses_written: u64,
    #[serde(default)]
    pub events_recorded: u64,
    /// Rounds whose view started from the last round's state patched with what changed,
    /// and rounds that built it from the whole snapshot (`framework::state_cache`).
    #[serde(default)]
    pub state_patched: u64,
    #[serde(default)]
    pub state_built: u64,
    /// The proposals by what they carried, most first ("PlaceGangs 120, TxnReserve 300").
    #[serde(default)]
    pub proposals_by_content: String,
    pub violations: usize,
    pub pending: usize,
}

impl Row {
    pub fn pods_per_s(&self) -> f64 {
        self.binds as f64 / self.wall_s
    }

    /// Ledger proposals per replica per round (the goal: at most 4).
    pub fn proposals_per_round_replica(&self) -> f64 {
        self.proposals as f64 / (self.rounds.max(1) * self.replicas.max(1)) as f64
    }
}

/// What `shards --json` prints: the row and the process's own peak resident set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointReport {
    pub row: Row,
    pub vm_hwm_kib: u64,
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

pub fn one(b: &ShardBench, replicas: u64, shards: u32) -> Result<Row> {
    let mut spec = SyntheticSpec::new(b.nodes, b.gpus_per_node, usize::MAX, b.seed);
    spec.max_pods = b.pods;
    spec.duration_ms = Some((1_000, 3_000));
    spec.queues = (0..b.queues)
        .map(|i| (format!("queue-{i:03}"), 1))
        .collect();
    let mut w = generate(&spec);
    let map = ShardMap::new(ShardingConfig {
        shards,
        ..ShardingConfig::default()
    })
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    for node in &mut w.nodes {
        let s = map.shard_of(node);
        if shards == 1 || s.is_multiple_of(2) {
            node.labels.insert(SIDE_A.into(), "true".into());
        }
        if shards == 1 || s % 2 == 1 {
            node.labels.insert(SIDE_B.into(), "true".into());
        }
    }
    let cross: std::collections::HashSet<String> = w
        .pod_groups
        .iter()
        .enumerate()
        .filter(|(i, g)| i % 10 == 9 && g.min_member >= 2)
        .map(|(_, g)| g.key.name.clone())
        .collect();
    let mut index_in_gang: BTreeMap<String, usize> = BTreeMap::new();
    for pod in &mut w.pods {
        let Some(g) = pod.group.clone() else { continue };
        if !cross.contains(&g) {
            continue;
        }
        let i = index_in_gang.entry(g).or_default();
        let side = if i.is_multiple_of(2) { SIDE_A } else { SIDE_B };
        pod.node_selector.insert(side.into(), "true".into());
        *i += 1;
    }
    let mut sim = w.into_sim();
    let mut ledger = start_ledger(replicas as usize).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut sharding = ShardOptions::new(
        ShardingConfig {
            shards,
            ..ShardingConfig::default()
        },
        replicas,
    );
    sharding.home_pool = HomePool::Strict;
    sharding.seed = b.seed;
    let opts = DriverOptions {
        check_ledger_every_cycle: false,
        check_state_cache_every_cycle: false,
        max_cycles: 100_000,
        sharding: Some(sharding),
        ..DriverOptions::default()
    };
    let started = Instant::now();
    let outcome = drive_with(
        &mut sim,
        &SchedulerConf::volcano_default(),
        &opts,
        ledger.as_mut(),
        |_| {},
    );
    let wall_s = started.elapsed().as_secs_f64();
    let plan_s: f64 = outcome.stats.iter().map(|c| c.duration.as_secs_f64()).sum();
    let perform_s: f64 = outcome.stats.iter().map(|c| c.commit.as_secs_f64()).sum();
    if !outcome.ledger_errors.is_empty() {
        bail!(
            "R={replicas} S={shards}: ledger errors: {:?}",
            &outcome.ledger_errors[..outcome.ledger_errors.len().min(3)]
        );
    }
    tell_pending(&outcome.pending);
    tell_not_committed(
        &outcome
            .shards
            .as_ref()
            .map(|r| r.txn_log.clone())
            .unwrap_or_default(),
    );
    let report = outcome.shards.clone().unwrap_or_default();
    let binds = outcome.total_binds();
    let mut lat = report.txn_decision_ms.clone();
    lat.sort_by(f64::total_cmp);
    let per_k = |ns: u64| ns as f64 / 1e9 / (binds.max(1) as f64 / 1000.0);
    let cpus: Vec<f64> = (1..=replicas)
        .map(|r| per_k(report.plan_cpu_ns.get(&r).copied().unwrap_or(0)))
        .collect();
    Ok(Row {
        replicas,
        shards,
        binds,
        wall_s,
        cross_gangs: report.txns_started,
        cross_committed: report.txns_committed,
        p50_ms: (!lat.is_empty()).then(|| pct(&lat, 0.5)),
        p99_ms: (!lat.is_empty()).then(|| pct(&lat, 0.99)),
        cpu_max: cpus.iter().copied().fold(0.0, f64::max),
        cpu_mean: cpus.iter().sum::<f64>() / cpus.len().max(1) as f64,
        view_cpu: per_k(report.view_cpu_ns),
        proposals: report.ledger_proposals,
        rounds: u64::from(outcome.cycles),
        messages: (
            report.coord_messages_grpc,
            report.coord_messages_refused,
            report.coord_messages_local,
        ),
        not_committed: (
            report.txns_aborted,
            report.txns_rejected,
            report.txns_unfinished,
            report.txns_expired,
        ),
        violations: outcome.violations.len(),
        pending: outcome.pending.len(),
        grpc_batches: report.coord_batches_grpc,
        plan_s,
        perform_s,
        ledger_propose_s: report.ledger_propose_ns as f64 / 1e9,
        ledger_read_s: report.ledger_read_ns as f64 / 1e9,
        ledger_reads: report.ledger_reads,
        views_opened: report.views_opened,
        statuses_written: report.statuses_written,
        events_recorded: report.events_recorded,
        state_patched: report.state_cache.patches,
        state_built: report.state_cache.builds,
        proposals_by_content: report.proposals_by_content(),
    })
}

/// Why gangs were still pending when the run went quiet: the commonest reasons first, each
/// with one gang it holds back, on stderr (the table keeps the count only).
fn tell_pending(pending: &[(ObjectKey, String)]) {
    let mut by_reason: BTreeMap<&str, (usize, &ObjectKey)> = BTreeMap::new();
    for (gang, why) in pending {
        by_reason.entry(why).or_insert((0, gang)).0 += 1;
    }
    let mut reasons: Vec<_> = by_reason.into_iter().collect();
    reasons.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.0.cmp(b.0)));
    for (why, (count, gang)) in reasons.iter().take(5) {
        eprintln!("pending at the end: {count} gang(s), e.g. {gang}: {why}");
    }
}

/// Why cross-shard transactions were not committed: the commonest reasons first (numbers
/// taken out, so that "shard 3" and "shard 7" count as one reason), each with an example,
/// on stderr.
fn tell_not_committed(txn_log: &[String]) {
    let mut by_reason: BTreeMap<String, (usize, &str)> = BTreeMap::new();
    for line in txn_log {
        // "<txn>: <outcome>: <reason>"; the id has no ": ".
        let mut fields = line.splitn(3, ": ");
        let (_, outcome, why) = (fields.next(), fields.next(), fields.next().unwrap_or(""));
        if outcome == Some("Committed") {
            continue;
        }
        let shape: String = format!("{}: {why}", outcome.unwrap_or(""))
            .split(|c: char| c.is_ascii_digit())
            .filter(|part| !part.is_empty())
            .collect::<Vec<_>>()
            .join("#");
        by_reason.entry(shape).or_insert((0, line)).0 += 1;
    }
    let mut reasons: Vec<_> = by_reason.into_iter().collect();
    reasons.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.0.cmp(&b.0)));
    for (_, (count, example)) in reasons.iter().take(5) {
        eprintln!("not committed: {count} transaction(s) like {example}");
    }
}

pub fn run(b: &ShardBench) -> Result<()> {
    println!(
        "{} nodes × {} GPUs, {} pods, {} queues; cross-shard: every 10th gang spans side-a/side-b pools; home pool strict\n",
        b.nodes, b.gpus_per_node, b.pods, b.queues
    );
    println!(
        "| replicas | shards | pods bound | wall | pods/s | cross-shard gangs (committed) | decision p50 | p99 | planning CPU-s / 1k pods / replica: max | mean | shared view CPU-s / 1k pods | ledger proposals | rounds | proposals / (rounds × R) | violations | gangs pending at end |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut csv = String::from("series,x,y\n");
    let mut notes = Vec::new();
    for &r in &b.replicas {
        for &s in &b.shards {
            let row = one(b, r, s)?;
            let pods_s = row.pods_per_s();
            println!(
                "| {} | {} | {} | {:.1} s | {:.0} | {} ({}) | {} | {} | {:.3} | {:.3} | {:.3} | {} | {} | {:.2} | {} | {} |",
                row.replicas,
                row.shards,
                row.binds,
                row.wall_s,
                pods_s,
                row.cross_gangs,
                row.cross_committed,
                ms_or_dash(row.p50_ms),
                ms_or_dash(row.p99_ms),
                row.cpu_max,
                row.cpu_mean,
                row.view_cpu,
                row.proposals,
                row.rounds,
                row.proposals_per_round_replica(),
                row.violations,
                row.pending
            );
            let (grpc, refused, local) = row.messages;
            let (aborted, rejected, unfinished, expired) = row.not_committed;
            notes.push(format!(
                "R={} S={}: 2PC messages: {grpc} sent over gRPC in {} batches, {refused} refused or lost, {local} within a replica; transactions not committed: {aborted} aborted, {rejected} rejected, {unfinished} unfinished, {expired} expired; wall time: planning {:.1} s, performing {:.1} s (waiting on the ledger: {:.1} s for proposals, {:.1} s for {} state reads; {} pool views opened), between them {:.1} s; {} PodGroup statuses written, {} Events recorded; round states: {} patched, {} built whole; proposals by content: {}",
                row.replicas,
                row.shards,
                row.grpc_batches,
                row.plan_s,
                row.perform_s,
                row.ledger_propose_s,
                row.ledger_read_s,
                row.ledger_reads,
                row.views_opened,
                row.wall_s - row.plan_s - row.perform_s,
                row.statuses_written,
                row.events_recorded,
                row.state_patched,
                row.state_built,
                row.proposals_by_content
            ));
            csv.push_str(&format!(
                "{} replicas,{},{:.1}\n",
                row.replicas, row.shards, pods_s
            ));
        }
    }
    println!();
    for n in notes {
        println!("{n}");
    }
    if let Some(path) = &b.csv {
        std::fs::write(path, csv)?;
        println!("\nwrote {path}");
    }
    Ok(())
}

/// `12.3 ms`, or `-` where there is no figure.
pub fn ms_or_dash(ms: Option<f64>) -> String {
    ms.map_or_else(|| "-".to_string(), |v| format!("{v:.1} ms"))
}

/// `shards --json`: one replica count and one shard count, measured in this process, and
/// one JSON line ([`PointReport`]) on stdout: the suite's measurement point. The peak
/// resident set is read last, so it covers the whole run.
pub fn point(b: &ShardBench) -> Result<()> {
    let (&[replicas], &[shards]) = (b.replicas.as_slice(), b.shards.as_slice()) else {
        bail!(
            "--json measures one point: give one --replicas and one --shards value (got {:?} and {:?})",
            b.replicas,
            b.shards
        );
    };
    let row = one(b, replicas, shards)?;
    let vm_hwm_kib = crate::rss::own_peak_kib()
        .ok_or_else(|| anyhow::anyhow!("no VmHWM in /proc/self/status (Linux only)"))?;
    println!(
        "{}",
        serde_json::to_string(&PointReport { row, vm_hwm_kib })?
    );
    Ok(())
}

#[derive(Debug, Clone)]
pub struct FailoverBench {
    pub replicas: u64,
    pub shards: u32,
    pub lease_ms: u64,
    pub period_ms: u64,
    pub nodes: usize,
    pub pods: usize,
    pub rounds: u32,
    pub seed: u64,
    pub max_gang: u32,
    /// Rounds paced to the wall clock (see `DriverOptions::pace_wall_clock`).
    pub paced: bool,
}

/// Kills the Raft leader, then each replica in turn (each restarted 1.5 s later), `rounds`
/// times, during a generated run; prints kill → next bind on a lost shard's pool.
pub fn failover(b: &FailoverBench) -> Result<()> {
    use phalanx_scheduler::ledger::{LedgerFault, ScheduledFault};
    let mut spec = SyntheticSpec::new(b.nodes, 8, usize::MAX, b.seed);
    spec.max_pods = b.pods;
    spec.duration_ms = Some((1_000, 3_000));
    spec.max_gang_pods = b.max_gang;
    spec.queues = (0..16).map(|i| (format!("queue-{i:03}"), 1)).collect();
    let mut sim = generate(&spec).into_sim();
    let mut faults = Vec::new();
    let mut t = 3_000;
    for _ in 0..b.rounds {
        let mut kills = vec![LedgerFault::KillLeader];
        kills.extend((1..=b.replicas).map(LedgerFault::Kill));
        for kill in kills {
            let restart = match &kill {
                LedgerFault::Kill(id) => LedgerFault::Restart(Some(*id)),
                _ => LedgerFault::Restart(None),
            };
            faults.push(ScheduledFault {
                at_ms: t,
                fault: kill,
            });
            faults.push(ScheduledFault {
                at_ms: t + 1_500,
                fault: restart,
            });
            t += 3_000;
        }
    }
    let mut ledger = start_ledger(b.replicas as usize).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut sharding = ShardOptions::new(
        ShardingConfig {
            shards: b.shards,
            ..ShardingConfig::default()
        },
        b.replicas,
    );
    sharding.lease_ms = b.lease_ms;
    sharding.home_pool = HomePool::Strict;
    sharding.seed = b.seed;
    let opts = DriverOptions {
        check_ledger_every_cycle: false,
        check_state_cache_every_cycle: false,
        period_ms: b.period_ms,
        max_cycles: 1_000_000,
        horizon_ms: Some(t + 1_000),
        faults,
        sharding: Some(sharding),
        pace_wall_clock: b.paced,
        ..DriverOptions::default()
    };
    let outcome = drive_with(
        &mut sim,
        &SchedulerConf::volcano_default(),
        &opts,
        ledger.as_mut(),
        |_| {},
    );
    let report = outcome.shards.clone().unwrap_or_default();
    println!(
        "{} replicas, {} shards, lease {} ms, heartbeat/round every {} ms, {} nodes, {} pods in gangs of at most {}, rounds {}; {} kills\n",
        b.replicas,
        b.shards,
        b.lease_ms,
        b.period_ms,
        b.nodes,
        b.pods,
        b.max_gang,
        if b.paced {
            "paced to the wall clock"
        } else {
            "unpaced"
        },
        report.failovers.len()
    );
    println!("| kill | kills | recovered | sim p50 | sim p99 | wall p50 | wall p99 | wall max |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut all_sim = Vec::new();
    let mut all_wall = Vec::new();
    for kind in ["kill:leader", "kill:replica"] {
        let of: Vec<_> = report
            .failovers
            .iter()
            .filter(|f| f.fault.starts_with(kind))
            .collect();
        let mut sim_ms: Vec<f64> = of
            .iter()
            .filter_map(|f| f.recovered_sim_ms.map(|v| v as f64))
            .collect();
        let mut wall: Vec<f64> = of.iter().filter_map(|f| f.recovered_wall_ms).collect();
        sim_ms.sort_by(f64::total_cmp);
        wall.sort_by(f64::total_cmp);
        all_sim.extend(sim_ms.iter().copied());
        all_wall.extend(wall.iter().copied());
        print_row(kind, of.len(), &sim_ms, &wall);
    }
    all_sim.sort_by(f64::total_cmp);
    all_wall.sort_by(f64::total_cmp);
    print_row("all", report.failovers.len(), &all_sim, &all_wall);
    // Each kill on its own line: an outlier is read here, not guessed from a percentile.
    println!(
        "\n| at | kill | lost shards | shards moved (wall) | next bind (sim) | next bind (wall) |\n|---:|---|---|---:|---:|---:|"
    );
    for f in &report.failovers {
        println!(
            "| {:.1} s | {} | {:?} | {} | {} | {} |",
            f.at_ms as f64 / 1000.0,
            f.fault,
            f.shards,
            f.moved_wall_ms
                .map_or_else(|| "-".to_string(), |v| format!("{v:.0} ms")),
            f.recovered_sim_ms
                .map_or_else(|| "not recovered".to_string(), |v| format!("{v} ms")),
            f.recovered_wall_ms
                .map_or_else(|| "-".to_string(), |v| format!("{v:.0} ms")),
        );
    }
    println!("\nreplica events:");
    for e in &report.replica_events {
        println!("  {e}");
    }
    println!("shard moves:");
    for m in &report.moves {
        println!(
            "  {:.1} s shard {} {:?} -> {} epoch {}",
            m.at_ms as f64 / 1000.0,
            m.shard,
            m.from,
            m.to,
            m.epoch
        );
    }
    // What a failover is made of beyond the lease: the rounds the new owner needs.
    let mut plan_ms: Vec<f64> = outcome
        .stats
        .iter()
        .map(|s| s.duration.as_secs_f64() * 1000.0)
        .collect();
    let mut commit_ms: Vec<f64> = outcome
        .stats
        .iter()
        .map(|s| s.commit.as_secs_f64() * 1000.0)
        .collect();
    plan_ms.sort_by(f64::total_cmp);
    commit_ms.sort_by(f64::total_cmp);
    println!(
        "\n{} rounds; planning p50 {:.0} ms / p99 {:.0} ms; ledger writes and binds p50 {:.0} ms / p99 {:.0} ms",
        outcome.stats.len(),
        pct(&plan_ms, 0.5),
        pct(&plan_ms, 0.99),
        pct(&commit_ms, 0.5),
        pct(&commit_ms, 0.99)
    );
    println!(
        "\nbinds {}, violations {}, ledger errors {}",
        outcome.total_binds(),
        outcome.violations.len(),
        outcome.ledger_errors.len()
    );
    Ok(())
}

fn print_row(kind: &str, kills: usize, sim_ms: &[f64], wall: &[f64]) {
    println!(
        "| {kind} | {kills} | {} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms |",
        sim_ms.len(),
        pct(sim_ms, 0.5),
        pct(sim_ms, 0.99),
        pct(wall, 0.5),
        pct(wall, 0.99),
        pct(wall, 1.0)
    );
}
