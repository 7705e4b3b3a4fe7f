//! `snapshot-catchup`: a follower killed and kept down while the leader commits past
//! several snapshots, so the part of the log it lacks is compacted away; restarted from
//! its data dir, it can only be caught up by the leader's InstallSnapshot. A run that
//! schedules this fault starts every replica with `--snapshot-every SNAPSHOT_EVERY`.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::faults::Fault;
use crate::fleet::Fleet;
use crate::run::wait_for;

/// The replicas' `--snapshot-every` in a run with `snapshot-catchup`: small, so the
/// leader snapshots (and compacts) every few seconds under the chaos workload, for the
/// whole run, under every other fault too.
pub const SNAPSHOT_EVERY: u64 = 20;

/// What the restarted replica logs when it installs a snapshot the leader sent
/// (`statestore/src/state_machine/mod.rs`, `install_snapshot`).
pub const INSTALLED: &str = "installed a snapshot sent by the leader";

/// How long the leader may take to commit far enough past the victim.
const COMMIT_DEADLINE: Duration = Duration::from_secs(60);
/// How long the restarted victim may take to install the snapshot and apply up to the
/// leader's index of its restart.
const CATCHUP_DEADLINE: Duration = Duration::from_secs(30);

/// The value of an unlabelled gauge `name` in a Prometheus exposition.
pub fn gauge(metrics: &str, name: &str) -> Option<u64> {
    metrics.lines().find_map(|l| {
        let value = l.strip_prefix(name)?.strip_prefix(' ')?;
        Some(value.trim().parse::<f64>().ok()? as u64)
    })
}

/// `text` without ANSI colour sequences (serve's log is coloured even into a file).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ parameters, ended by a letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The index of the last snapshot the leader installed on this replica, from its log.
pub fn installed_snapshot(log: &str) -> Option<u64> {
    let plain = strip_ansi(log);
    let line = plain.lines().rev().find(|l| l.contains(INSTALLED))?;
    let index = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("index="))?;
    index.parse().ok()
}

/// The leader's last log index past which the victim (last index `victim_index`) has
/// surely lost its place: two snapshot intervals (one may still be building), the tenth
/// of an interval serve keeps behind each snapshot, and `extra` drawn entries.
pub fn target_index(victim_index: u64, snapshot_every: u64, extra: u64) -> u64 {
    victim_index + 2 * snapshot_every + snapshot_every / 10 + 1 + extra
}

/// What the log at `path` gained after `offset`.
fn read_from(path: &Path, offset: u64) -> String {
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(path)
        && f.seek(SeekFrom::Start(offset)).is_ok()
    {
        let mut bytes = Vec::new();
        let _ = f.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    text
}

/// A gauge of replica `id` (None while it does not answer).
fn gauge_of(fleet: &Fleet, id: u64, name: &str) -> Option<u64> {
    let r = fleet.replicas.iter().find(|r| r.id == id)?;
    gauge(&r.metrics().ok()?, name)
}

/// The leader's last log index (None while there is no single leader).
fn leader_index(fleet: &Fleet) -> Option<u64> {
    gauge_of(fleet, fleet.leader()?, "phalanx_raft_last_log_index")
}

/// Kills `victim`, keeps it down at least `f.down_ms` and until the leader's log passed
/// `target_index`, restarts it, and fails unless its log shows an InstallSnapshot and it
/// applied up to the leader's index of its restart. Returns what happened, in words.
pub fn inject(
    fleet: &mut Fleet,
    victim: u64,
    f: &Fault,
    after_hit: &mut dyn FnMut(),
) -> anyhow::Result<String> {
    let every = fleet.config.snapshot_every.ok_or_else(|| {
        anyhow::anyhow!("snapshot-catchup: the replicas run without --snapshot-every")
    })?;
    let from = gauge_of(fleet, victim, "phalanx_raft_last_log_index")
        .ok_or_else(|| anyhow::anyhow!("replica {victim}: no phalanx_raft_last_log_index"))?;
    fleet.replica(victim)?.sigkill();
    let t = Instant::now();
    after_hit();
    let target = target_index(from, every, f.param);
    let mut reached = 0;
    let what = format!("the leader's log past index {target} (replica {victim} stopped at {from})");
    wait_for(COMMIT_DEADLINE, &what, || {
        reached = leader_index(fleet).unwrap_or(reached);
        reached >= target
    })?;
    std::thread::sleep(Duration::from_millis(f.down_ms).saturating_sub(t.elapsed()));
    let down_ms = t.elapsed().as_millis();
    let log = fleet.log_of(victim);
    let offset = std::fs::metadata(&log).map_or(0, |m| m.len());
    fleet.spawn(victim)?;
    let mut at = None;
    let what = format!(
        "replica {victim}, restarted {} entries behind, to log `{INSTALLED}` (else it caught up from a log the leader should have compacted)",
        reached - from
    );
    wait_for(CATCHUP_DEADLINE, &what, || {
        at = installed_snapshot(&read_from(&log, offset));
        at.is_some()
    })?;
    let what = format!("replica {victim} to apply up to index {reached}");
    wait_for(CATCHUP_DEADLINE, &what, || {
        gauge_of(fleet, victim, "phalanx_raft_apply_index").is_some_and(|i| i >= reached)
    })?;
    Ok(format!(
        "down {down_ms} ms while the leader's log went from index {from} to {reached} (snapshots every {every} entries); restarted, it installed the leader's snapshot at index {} and applied up to {reached}",
        at.unwrap_or_default()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gauge_is_read_by_its_exact_name() {
        let m = "# TYPE phalanx_raft_last_log_index gauge\nphalanx_raft_last_log_index_x 9\nphalanx_raft_last_log_index 1234\nphalanx_raft_apply_index 1200.0\n";
        assert_eq!(gauge(m, "phalanx_raft_last_log_index"), Some(1234));
        assert_eq!(gauge(m, "phalanx_raft_apply_index"), Some(1200));
        assert_eq!(gauge(m, "phalanx_raft_term"), None);
    }

    #[test]
    fn the_installed_snapshot_is_read_from_a_coloured_log_and_only_from_that_line() {
        let log = concat!(
            "\u{1b}[2m2026-12-02T05:27:20Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m ledger replica started \u{1b}[3mindex\u{1b}[0m\u{1b}[2m=\u{1b}[0m7\n",
            "\u{1b}[2m2026-12-02T05:27:21Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m \u{1b}[2mphalanx_statestore::state_machine\u{1b}[0m\u{1b}[2m:\u{1b}[0m installed a snapshot sent by the leader \u{1b}[3mindex\u{1b}[0m\u{1b}[2m=\u{1b}[0m341 \u{1b}[3msnapshot_id\u{1b}[0m\u{1b}[2m=\u{1b}[0m3-341-9\n",
        );
        assert_eq!(installed_snapshot(log), Some(341));
        assert_eq!(
            installed_snapshot("INFO ledger replica started index=7\n"),
            None,
            "a replica that caught up from the log says nothing of the kind"
        );
    }

    #[test]
    fn the_target_passes_two_snapshots_and_what_serve_keeps_behind_one() {
        assert_eq!(target_index(100, 20, 0), 100 + 40 + 2 + 1);
        assert_eq!(target_index(100, 20, 5), 148);
        assert!(target_index(0, 1000, 0) > 2100);
    }
}
