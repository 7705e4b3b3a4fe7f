//! Faults: each a named kind with parameters, drawn from the seed into a schedule, and
//! injected on the `phalanx serve` processes by pid, or on the API-server proxy in front
//! of every replica (`src/proxy.rs`).

use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::fleet::Fleet;
use crate::proxy::Control;

/// The kinds of fault, as `--faults` and the report name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum FaultKind {
    /// SIGKILL the Raft leader; restart it from its data dir.
    LeaderKill,
    /// SIGKILL a shard owner that does not lead, down past its lease (its shards move).
    OwnerKill,
    /// SIGKILL a replica that does not lead and restart it within its lease (a bounce).
    FollowerKill,
    /// SIGSTOP the leader past its lease, then SIGCONT.
    LeaderPause,
    /// SIGSTOP a shard owner that does not lead past its lease, then SIGCONT.
    OwnerPause,
    /// The API-server proxy holds every replica's requests back by a delay.
    ApiLatency,
    /// The API-server proxy answers a share of every replica's requests 429 or 500.
    ApiErrors,
    /// The API-server proxy cuts every replica's open watch streams, again and again.
    WatchCut,
}

pub const ALL_KINDS: [FaultKind; 8] = [
    FaultKind::LeaderKill,
    FaultKind::OwnerKill,
    FaultKind::FollowerKill,
    FaultKind::LeaderPause,
    FaultKind::OwnerPause,
    FaultKind::ApiLatency,
    FaultKind::ApiErrors,
    FaultKind::WatchCut,
];

/// The victim of the API-server faults: every replica at once (there is no replica 0).
pub const ALL_REPLICAS: u64 = 0;

impl FaultKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::LeaderKill => "leader-kill",
            Self::OwnerKill => "owner-kill",
            Self::FollowerKill => "follower-kill",
            Self::LeaderPause => "leader-pause",
            Self::OwnerPause => "owner-pause",
            Self::ApiLatency => "api-latency",
            Self::ApiErrors => "api-errors",
            Self::WatchCut => "watch-cut",
        }
    }

    fn targets_leader(self) -> bool {
        matches!(self, Self::LeaderKill | Self::LeaderPause)
    }

    /// Injected through the API-server proxy, on every replica at once.
    pub fn through_proxy(self) -> bool {
        matches!(self, Self::ApiLatency | Self::ApiErrors | Self::WatchCut)
    }
}

/// One planned injection: the kind, how long the victim stays down or stopped (or the
/// proxy fault stays on), and the quiet time after the fleet is whole again before the
/// next one. `param` is the proxy fault's strength: the added latency in ms
/// (`api-latency`), the percentage of requests refused (`api-errors`), the time between
/// cuts in ms (`watch-cut`); `seed` draws which requests `api-errors` refuses. Both are 0
/// for the other kinds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub kind: FaultKind,
    pub down_ms: u64,
    pub gap_ms: u64,
    pub param: u64,
    pub seed: u64,
}

impl Fault {
    pub fn detail(&self) -> String {
        match self.kind {
            FaultKind::LeaderKill | FaultKind::OwnerKill | FaultKind::FollowerKill => {
                format!(
                    "SIGKILL, restart from its data dir after {} ms",
                    self.down_ms
                )
            }
            FaultKind::LeaderPause | FaultKind::OwnerPause => {
                format!("SIGSTOP for {} ms, then SIGCONT", self.down_ms)
            }
            FaultKind::ApiLatency => format!(
                "+{} ms before every request for {} ms",
                self.param, self.down_ms
            ),
            FaultKind::ApiErrors => format!(
                "{}% of requests answered 429 (Retry-After: 1) or 500 for {} ms",
                self.param, self.down_ms
            ),
            FaultKind::WatchCut => format!(
                "every open watch cut, then again every {} ms, for {} ms",
                self.param, self.down_ms
            ),
        }
    }
}

/// `per_kind` injections of each of `kinds`, in an order and with parameters drawn from
/// `seed`. Downtimes are drawn relative to the shard lease: past it for owner kills and
/// pauses (the shards must move), within it for a follower bounce.
pub fn schedule(seed: u64, kinds: &[FaultKind], per_kind: usize, lease_ms: u64) -> Vec<Fault> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut order: Vec<FaultKind> = kinds
        .iter()
        .flat_map(|k| std::iter::repeat_n(*k, per_kind))
        .collect();
    order.shuffle(&mut rng);
    order
        .into_iter()
        .map(|kind| {
            let down_ms = match kind {
                FaultKind::LeaderKill => rng.random_range(lease_ms / 2..=lease_ms * 2),
                FaultKind::OwnerKill => rng.random_range(lease_ms * 3 / 2..=lease_ms * 5 / 2),
                FaultKind::FollowerKill => rng.random_range(100..=lease_ms / 2),
                FaultKind::LeaderPause | FaultKind::OwnerPause => {
                    rng.random_range(lease_ms * 3 / 2..=lease_ms * 3)
                }
                FaultKind::ApiLatency | FaultKind::ApiErrors | FaultKind::WatchCut => {
                    rng.random_range(lease_ms * 2..=lease_ms * 4)
                }
            };
            let gap_ms = rng.random_range(1000..=2500);
            // Drawn only for the proxy kinds, so the other kinds' draws stay as they were.
            let (param, seed) = match kind {
                FaultKind::ApiLatency => (rng.random_range(100..=500), 0),
                FaultKind::ApiErrors => (rng.random_range(20..=50), rng.random()),
                FaultKind::WatchCut => (rng.random_range(lease_ms / 2..=lease_ms), 0),
                _ => (0, 0),
            };
            Fault {
                kind,
                down_ms,
                gap_ms,
                param,
                seed,
            }
        })
        .collect()
}

/// The victim of `kind` now: the leader, or a live replica that does not lead (for the
/// owner faults one that owns a shard), the choice among several drawn by `pick`.
pub fn pick_victim(fleet: &Fleet, kind: FaultKind, pick: u64) -> anyhow::Result<u64> {
    let leader = fleet
        .leader()
        .ok_or_else(|| anyhow::anyhow!("{}: no single Raft leader", kind.name()))?;
    if kind.targets_leader() {
        return Ok(leader);
    }
    if kind.through_proxy() {
        return Ok(ALL_REPLICAS);
    }
    let views = fleet.views();
    let owner_needed = matches!(kind, FaultKind::OwnerKill | FaultKind::OwnerPause);
    let candidates: Vec<u64> = views
        .iter()
        .filter(|(id, v)| **id != leader && (!owner_needed || !v.owned.is_empty()))
        .map(|(id, _)| *id)
        .collect();
    anyhow::ensure!(
        !candidates.is_empty(),
        "{}: no live replica other than the leader {leader}{}",
        kind.name(),
        if owner_needed { " owns a shard" } else { "" }
    );
    Ok(candidates[(pick % candidates.len() as u64) as usize])
}

/// Hits `victim` with `f` and heals it; returns when the victim was restarted or resumed
/// (or the proxy fault switched off). The proxy faults need `api`.
pub fn inject(
    fleet: &mut Fleet,
    api: Option<&Control>,
    victim: u64,
    f: &Fault,
    after_hit: &mut dyn FnMut(),
) -> anyhow::Result<()> {
    let down = Duration::from_millis(f.down_ms);
    match f.kind {
        FaultKind::LeaderKill | FaultKind::OwnerKill | FaultKind::FollowerKill => {
            fleet.replica(victim)?.sigkill();
            let t = Instant::now();
            after_hit();
            std::thread::sleep(down.saturating_sub(t.elapsed()));
            fleet.spawn(victim)
        }
        FaultKind::LeaderPause | FaultKind::OwnerPause => {
            fleet.replica(victim)?.sigstop()?;
            let t = Instant::now();
            after_hit();
            std::thread::sleep(down.saturating_sub(t.elapsed()));
            fleet.replica(victim)?.sigcont()
        }
        FaultKind::ApiLatency | FaultKind::ApiErrors | FaultKind::WatchCut => {
            let api = api.ok_or_else(|| {
                anyhow::anyhow!("{}: the run has no API-server proxy", f.kind.name())
            })?;
            inject_api(api, f, after_hit)
        }
    }
}

/// A proxy fault: on for `down_ms` (for `watch-cut`, a cut at once and every `param` ms
/// within the window), then off.
fn inject_api(api: &Control, f: &Fault, after_hit: &mut dyn FnMut()) -> anyhow::Result<()> {
    let down = Duration::from_millis(f.down_ms);
    let t = Instant::now();
    match f.kind {
        FaultKind::ApiLatency => api.set_latency(Duration::from_millis(f.param)),
        FaultKind::ApiErrors => api.set_errors(f.param as f64 / 100.0, f.seed),
        _ => {
            api.cut_watches();
        }
    }
    after_hit();
    if f.kind == FaultKind::WatchCut {
        let every = Duration::from_millis(f.param.max(1));
        while t.elapsed() + every < down {
            std::thread::sleep(every);
            api.cut_watches();
        }
    }
    std::thread::sleep(down.saturating_sub(t.elapsed()));
    api.heal();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_is_a_function_of_its_seed_with_every_kind_per_kind_times() {
        let a = schedule(42, &ALL_KINDS, 3, 1000);
        assert_eq!(a, schedule(42, &ALL_KINDS, 3, 1000));
        assert_ne!(a, schedule(43, &ALL_KINDS, 3, 1000));
        assert_eq!(a.len(), 3 * ALL_KINDS.len());
        for k in ALL_KINDS {
            assert_eq!(a.iter().filter(|f| f.kind == k).count(), 3, "{k:?}");
        }
    }

    #[test]
    fn downtimes_pass_the_lease_where_shards_must_move_and_not_for_a_bounce() {
        for f in schedule(9, &ALL_KINDS, 20, 1000) {
            match f.kind {
                FaultKind::OwnerKill | FaultKind::OwnerPause | FaultKind::LeaderPause => {
                    assert!(f.down_ms > 1000, "{f:?}")
                }
                FaultKind::FollowerKill => assert!(f.down_ms <= 500, "{f:?}"),
                FaultKind::LeaderKill => assert!((500..=2000).contains(&f.down_ms), "{f:?}"),
                FaultKind::ApiLatency => {
                    assert!((100..=500).contains(&f.param) && f.down_ms >= 2000, "{f:?}")
                }
                FaultKind::ApiErrors => {
                    assert!((20..=50).contains(&f.param) && f.down_ms >= 2000, "{f:?}")
                }
                FaultKind::WatchCut => {
                    assert!(
                        (500..=1000).contains(&f.param) && f.down_ms >= 2000,
                        "{f:?}"
                    )
                }
            }
            if !f.kind.through_proxy() {
                assert_eq!((f.param, f.seed), (0, 0), "{f:?}");
            }
        }
    }
}
