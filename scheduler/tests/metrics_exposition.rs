//! The `/metrics` text phalanx exports after a fixed cycle, against a golden file, read
//! through a local recorder (never the global one) so the test is deterministic and
//! shares nothing with other tests. `PHALANX_BLESS=1` rewrites the golden file.
//!
//! The exporter renders metric families in hash order, so the comparison puts families in
//! name order, the samples of counters and gauges in text order, and a histogram's series
//! by their labels, each keeping its buckets, sum and count in the exporter's order.

use crate::testbed;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use phalanx_scheduler::cluster::ClusterSnapshot;
use phalanx_scheduler::framework::{CyclePlan, SchedulerConf, Session, run_cycle};
use phalanx_scheduler::model::{Node, ObjectKey, Pod, PodGroup, Queue, Resources};
use phalanx_scheduler::observe::{self, CycleTimings, name};

const GIB: i64 = 1 << 30;
/// Two hours after the epoch: the pending gang was created at 0.1 s, so it has waited
/// just under two hours, over the seed's one-hour alert.
const NOW_MS: u64 = 7_200_000;

fn res(pairs: &[(&str, i64)]) -> Resources {
    Resources::from_pairs(pairs.iter().copied())
}

fn gang(
    snapshot: &mut ClusterSnapshot,
    group: &str,
    queue: &str,
    created_ms: u64,
    pods: &[&[(&str, i64)]],
) {
    let mut pg = PodGroup::new(ObjectKey::new("ml", group), pods.len() as u32);
    pg.queue = queue.to_string();
    pg.creation_index = created_ms;
    snapshot.pod_groups.push(Arc::new(pg));
    for (i, req) in pods.iter().enumerate() {
        let mut pod = Pod::new(ObjectKey::new("ml", format!("{group}-{i}")), res(req));
        pod.group = Some(group.to_string());
        pod.creation_index = created_ms + i as u64;
        snapshot.pods.push(Arc::new(pod));
    }
}

/// Two GPU nodes (8 and 2 GPUs), a capped `research` queue and `prod`; `train` (2 x 2
/// GPUs) is placed, `big` (2 x 8 GPUs, minResources 16 GPUs) is never admitted.
fn cluster(with_big: bool) -> ClusterSnapshot {
    let mut s = ClusterSnapshot {
        now_ms: NOW_MS,
        ..ClusterSnapshot::default()
    };
    let node = |n: &str, gpus: i64| {
        Arc::new(Node::new(
            n,
            res(&[
                ("cpu", 16_000),
                ("memory", 64 * GIB),
                ("pods", 110),
                ("nvidia.com/gpu", gpus),
            ]),
        ))
    };
    s.nodes = vec![node("gpu-a", 8), node("gpu-b", 2)];
    let mut research = Queue::new("research");
    research.weight = 3;
    research.capability = Some(res(&[("nvidia.com/gpu", 8)]));
    let mut prod = Queue::new("prod");
    prod.weight = 1;
    s.queues = vec![Queue::new("default"), research, prod];
    let two = [("cpu", 2_000), ("memory", 8 * GIB), ("nvidia.com/gpu", 2)];
    let eight = [("cpu", 2_000), ("memory", 8 * GIB), ("nvidia.com/gpu", 8)];
    gang(&mut s, "train", "research", 1_000, &[&two, &two]);
    if with_big {
        gang(&mut s, "big", "prod", 100, &[&eight, &eight]);
        // More than the cluster has: `enqueue` never admits it, so it stays Pending.
        let big = Arc::make_mut(s.pod_groups.last_mut().expect("just added"));
        big.min_resources = Some(res(&[("nvidia.com/gpu", 16)]));
    }
    s
}

fn cycle(snapshot: &ClusterSnapshot) -> (CyclePlan, Session) {
    run_cycle(
        snapshot,
        &SchedulerConf::volcano_default(),
        phalanx_scheduler::model::DEFAULT_SCHEDULER_NAME,
    )
}

/// Fixed timings in place of the measured ones.
fn fixed_timings() -> CycleTimings {
    let ms = Duration::from_millis;
    CycleTimings {
        actions: vec![
            ("enqueue".into(), ms(3)),
            ("allocate".into(), ms(12)),
            ("backfill".into(), ms(1)),
        ],
        plugins_open: vec![("priority", ms(1)), ("gang", ms(2)), ("proportion", ms(7))],
    }
}

/// The exposition text of one cycle over `snapshot`, as `/metrics` serves it.
fn exposition(snapshot: &ClusterSnapshot) -> String {
    let (plan, mut session) = cycle(snapshot);
    session.timings = fixed_timings();
    let recorder = observe::recorder().expect("the buckets are valid");
    metrics::with_local_recorder(&recorder, || {
        observe::describe();
        observe::record_cycle(&session, &plan);
        observe::cycle::record_e2e(Duration::from_millis(40));
        observe::record_gang_scheduled(&session, plan.gangs.iter().map(|g| &g.gang));
    });
    let mut text = recorder.handle().render();
    text.push_str(&observe::state_series(&session, &plan).render());
    text
}

/// Families in name order; counter and gauge samples sorted.
fn canonical(text: &str) -> String {
    let mut families: Vec<Vec<&str>> = Vec::new();
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let mut lines: Vec<&str> = block.lines().filter(|l| !l.is_empty()).collect();
        let histogram = lines
            .iter()
            .any(|l| l.starts_with("# TYPE ") && l.ends_with(" histogram"));
        let start = lines.iter().take_while(|l| l.starts_with('#')).count();
        if histogram {
            // Stable: each label set's buckets, sum and count keep their order.
            lines[start..].sort_by_key(|l| series_labels(l));
        } else {
            lines[start..].sort_unstable();
        }
        families.push(lines);
    }
    families.sort_by_key(|f| f.iter().find(|l| l.starts_with("# TYPE ")).copied());
    families
        .iter()
        .map(|f| f.join("\n") + "\n")
        .collect::<Vec<_>>()
        .join("\n")
}

/// A histogram sample's labels without `le`: the series it belongs to.
fn series_labels(line: &str) -> String {
    let Some(open) = line.find('{') else {
        return String::new();
    };
    let close = line.rfind('}').unwrap_or(line.len());
    line[open + 1..close]
        .split(',')
        .filter(|l| !l.starts_with("le="))
        .collect::<Vec<_>>()
        .join(",")
}

fn golden_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/metrics.prom")
}

#[test]
fn the_exposition_of_a_fixed_cycle_matches_the_golden_file() {
    let got = canonical(&exposition(&cluster(true)));
    let path = golden_path();
    if std::env::var_os("PHALANX_BLESS").is_some() {
        std::fs::write(&path, &got).expect("write the golden file");
    }
    let want =
        std::fs::read_to_string(&path).expect("the golden file exists (PHALANX_BLESS=1 writes it)");
    assert_eq!(
        got, want,
        "the exposition changed; if on purpose, rerun with PHALANX_BLESS=1 and review the diff"
    );
}

fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn the_seeds_alert_selects_the_gang_pending_for_two_hours() {
    let text = exposition(&cluster(true));
    let big = sample(
        &text,
        r#"phalanx_podgroup_status{namespace="ml",name="big",phase="Pending"}"#,
    );
    assert_eq!(big, Some(7199.9), "{text}");
    // The alert's condition: `phalanx_podgroup_status{phase="Pending"} > 3600`.
    let firing: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(name::PODGROUP_STATUS) && l.contains(r#"phase="Pending""#))
        .filter(|l| {
            l.rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .is_some_and(|v| v > 3600.0)
        })
        .collect();
    assert_eq!(firing.len(), 1, "{text}");
    assert!(
        !text.contains(r#"name="train",phase="Pending""#),
        "train was placed: {text}"
    );
}

#[test]
fn a_deleted_pod_group_leaves_no_series_behind() {
    let before = exposition(&cluster(true));
    assert!(before.contains(r#"name="big""#));
    assert!(
        before.contains(r#"phalanx_unschedule_task_count{job_id="ml/big"} 2"#),
        "{before}"
    );
    let after = exposition(&cluster(false));
    assert!(!after.contains(r#"name="big""#), "{after}");
    assert!(!after.contains(r#"job_id="ml/big""#), "{after}");
    assert_eq!(
        sample(&after, "phalanx_unschedule_job_count "),
        Some(0.0),
        "{after}"
    );
}

#[test]
fn the_golden_check_catches_a_planted_change() {
    let mut planted = exposition(&cluster(true));
    planted = planted.replace(r#"queue_name="prod"} 1"#, r#"queue_name="prod"} 2"#);
    let want = std::fs::read_to_string(golden_path()).expect("the golden file exists");
    assert_ne!(
        canonical(&planted),
        want,
        "a changed weight must not pass the golden check"
    );
}

/// `promtool check metrics` on the text, when `deploy/testbed/testbed build --promtool`
/// has built it; without it this test says so and checks nothing else, unless
/// `PHALANX_REQUIRE_PROMTOOL=1` (CI sets it once promtool is built) makes that a failure.
#[test]
fn promtool_accepts_the_exposition() {
    let Some(promtool) = testbed::promtool("promtool_accepts_the_exposition") else {
        return;
    };
    let check = |text: &str, lint: &str| testbed::promtool_check(&promtool, text, lint);
    let text = exposition(&cluster(true));
    let (ok, said) = check(&text, "--lint=none --extended");
    assert!(ok, "promtool check metrics failed:\n{said}\n---\n{text}");
    // The naming lints flag only the names kept as Volcano's.
    let (_, said) = check(&text, "--lint=all");
    for problem in said.lines().filter(|l| !l.trim().is_empty()) {
        let metric = problem.split_whitespace().next().unwrap_or("");
        assert!(
            observe::VOLCANO_NAMES.contains(&metric),
            "promtool lint on a phalanx-named metric: {problem}"
        );
    }
    // The check can fail: a family declared twice is an error.
    let twice = format!("{text}# TYPE phalanx_queue_weight gauge\nphalanx_queue_weight 1\n");
    let (ok, _) = check(&twice, "--lint=none --extended");
    assert!(!ok, "promtool must refuse a family declared twice");
}

/// The metric names a PromQL expression reads: identifiers followed by `{`, `[`, `)` or
/// a space that start with `phalanx_`, less a histogram's `_bucket`/`_sum`/`_count`.
fn metrics_in(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("phalanx_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

fn exported(metric: &str) -> bool {
    let known = |m: &str| name::ALL.iter().any(|(n, _, _)| *n == m);
    known(metric)
        || ["_bucket", "_sum", "_count"].iter().any(|suffix| {
            metric.strip_suffix(suffix).is_some_and(|base| {
                name::ALL
                    .iter()
                    .any(|(n, k, _)| *n == base && *k == observe::Kind::Histogram)
            })
        })
}

fn dashboard_metrics(json: &str) -> Vec<String> {
    let dash: serde_json::Value = serde_json::from_str(json).expect("the dashboard is JSON");
    let panels = dash["panels"].as_array().expect("panels");
    assert!(!panels.is_empty(), "the dashboard has panels");
    let mut out = Vec::new();
    for panel in panels {
        let targets = panel["targets"]
            .as_array()
            .expect("every panel has targets");
        for t in targets {
            let expr = t["expr"].as_str().expect("every target has a PromQL expr");
            let names = metrics_in(expr);
            assert!(
                !names.is_empty(),
                "panel {:?} reads no phalanx metric: {expr}",
                panel["title"]
            );
            out.extend(names);
        }
    }
    out
}

#[test]
fn every_metric_the_dashboard_queries_is_one_phalanx_exports() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/phalanx.json");
    let json = std::fs::read_to_string(&path).expect("deploy/grafana/phalanx.json exists");
    for metric in dashboard_metrics(&json) {
        assert!(
            exported(&metric),
            "the dashboard queries {metric}, which phalanx does not export"
        );
    }
    // A planted unknown name is caught.
    let planted = json.replace("phalanx_raft_term", "phalanx_raft_terms");
    assert!(dashboard_metrics(&planted).iter().any(|m| !exported(m)));
}
