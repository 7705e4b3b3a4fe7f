//! Faults: each a named kind with parameters, drawn from the seed into a schedule, and
//! injected on the `phalanx serve` processes by pid, or on the API-server proxy in front
//! of every replica (`src/proxy.rs`).

use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::catchup;
use crate::fleet::Fleet;
use crate::links::{Link, Links};
use crate::membership;
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
    /// SIGKILL a replica that does not lead, cut its Raft log to what was fsynced (a
    /// power loss: the page cache gone), and restart it within its lease.
    FollowerPowerLoss,
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
    /// The leader's Raft and coordinator links blocked both ways (a partition).
    LeaderPartition,
    /// The leader's links blocked one way: its own connections to the others, or theirs
    /// to it (drawn).
    LeaderOneway,
    /// Added delay on every Raft and coordinator link of one replica, both ways.
    LinkDelay,
    /// A share of one replica's Raft and coordinator connections lost (refused when
    /// opened, cut while open), both ways.
    LinkLoss,
    /// Hostile objects created (`src/hostile.rs`), left until the next such injection.
    HostileObjects,
    /// SIGKILL a replica that does not lead, keep it down until the leader compacted its
    /// log past it, restart it: it must catch up by InstallSnapshot (`src/catchup.rs`).
    SnapshotCatchup,
    /// A replica added under load, then another one (not the new one) removed, each by
    /// a rolling restart with the new `--peers` (`src/membership.rs`).
    MembershipChange,
    /// A shard owner stopped by its own crash failpoint while it coordinates a
    /// cross-shard gang, at a drawn step of the two-phase reservation, then restarted
    /// (`src/crash.rs`).
    CoordinatorCrash,
}

/// Every kind: the soak and `--matrix full`.
pub const ALL_KINDS: [FaultKind; 17] = [
    FaultKind::LeaderKill,
    FaultKind::OwnerKill,
    FaultKind::FollowerKill,
    FaultKind::FollowerPowerLoss,
    FaultKind::LeaderPause,
    FaultKind::OwnerPause,
    FaultKind::ApiLatency,
    FaultKind::ApiErrors,
    FaultKind::WatchCut,
    FaultKind::LeaderPartition,
    FaultKind::LeaderOneway,
    FaultKind::LinkDelay,
    FaultKind::LinkLoss,
    FaultKind::HostileObjects,
    FaultKind::SnapshotCatchup,
    FaultKind::MembershipChange,
    FaultKind::CoordinatorCrash,
];

/// The kinds of `--matrix ci`: the pid and API-server faults, `follower-power-loss`,
/// `snapshot-catchup` (which runs every replica with a small snapshot threshold, so
/// every case of the matrix runs under snapshot and log-compaction stress) and
/// `hostile-objects` (with a wide gang of [`CI_HOSTILE_WIDE_PODS`], so the later cases
/// run with its pods pending) and `coordinator-crash` (the 2PC failpoints). The link faults and `membership-change` are in `--matrix
/// full` and the soak only: a run with a link fault puts the link proxies between the
/// replicas for every case, and the one such run on an unloaded enough machine has not
/// been had yet (chaos/README.md, "Found so far"); a membership change's rolling restarts
/// take 30 s or more per injection.
pub const CI_KINDS: [FaultKind; 12] = [
    FaultKind::LeaderKill,
    FaultKind::OwnerKill,
    FaultKind::FollowerKill,
    FaultKind::FollowerPowerLoss,
    FaultKind::LeaderPause,
    FaultKind::OwnerPause,
    FaultKind::ApiLatency,
    FaultKind::ApiErrors,
    FaultKind::WatchCut,
    FaultKind::SnapshotCatchup,
    FaultKind::HostileObjects,
    FaultKind::CoordinatorCrash,
];

/// Pods of `hostile-objects`' wide gang (one GPU each, the cluster has 128): the issue's
/// 10,000, in `--matrix full`.
pub const HOSTILE_WIDE_PODS: u32 = 10_000;
/// The same under `--matrix ci` and the soak: still far past the 16 pods a skipped
/// group's Events are bounded to and the cluster's GPUs, and created in seconds rather
/// than minutes (a 2 h soak injects `hostile-objects` dozens of times).
pub const CI_HOSTILE_WIDE_PODS: u32 = 1_000;

/// The victim of the API-server faults: every replica at once (there is no replica 0).
pub const ALL_REPLICAS: u64 = 0;

impl FaultKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::LeaderKill => "leader-kill",
            Self::OwnerKill => "owner-kill",
            Self::FollowerKill => "follower-kill",
            Self::FollowerPowerLoss => "follower-power-loss",
            Self::LeaderPause => "leader-pause",
            Self::OwnerPause => "owner-pause",
            Self::ApiLatency => "api-latency",
            Self::ApiErrors => "api-errors",
            Self::WatchCut => "watch-cut",
            Self::LeaderPartition => "leader-partition",
            Self::LeaderOneway => "leader-oneway",
            Self::LinkDelay => "link-delay",
            Self::LinkLoss => "link-loss",
            Self::HostileObjects => "hostile-objects",
            Self::SnapshotCatchup => "snapshot-catchup",
            Self::MembershipChange => "membership-change",
            Self::CoordinatorCrash => "coordinator-crash",
        }
    }

    fn targets_leader(self) -> bool {
        matches!(
            self,
            Self::LeaderKill | Self::LeaderPause | Self::LeaderPartition | Self::LeaderOneway
        )
    }

    /// Injected through the link proxies between the replicas.
    pub fn through_links(self) -> bool {
        matches!(
            self,
            Self::LeaderPartition | Self::LeaderOneway | Self::LinkDelay | Self::LinkLoss
        )
    }

    /// Injected through the API-server proxy, on every replica at once.
    pub fn through_proxy(self) -> bool {
        matches!(self, Self::ApiLatency | Self::ApiErrors | Self::WatchCut)
    }

    /// Hits every replica at once (victim `ALL_REPLICAS`, every shard probed).
    pub fn hits_all(self) -> bool {
        self.through_proxy() || self == Self::HostileObjects
    }
}

/// One planned injection: the kind, how long the victim stays down or stopped (or the
/// proxy fault stays on), and the quiet time after the fleet is whole again before the
/// next one. `param` is the proxy fault's strength: the added latency in ms
/// (`api-latency`, `link-delay`), the percentage of requests refused (`api-errors`) or of
/// connections lost (`link-loss`), the time between cuts in ms (`watch-cut`), the
/// direction blocked (`leader-oneway`: 0 the leader's own connections, 1 the others' to
/// it); `seed` draws which requests `api-errors` refuses and which connections
/// `link-loss` loses. Both are 0 for the other kinds.
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
            FaultKind::FollowerPowerLoss => format!(
                "SIGKILL, Raft log cut to its fsynced length (plus a torn part of what was lost), restart after {} ms",
                self.down_ms
            ),
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
            FaultKind::LeaderPartition => format!(
                "Raft and coordinator links to and from it blocked for {} ms",
                self.down_ms
            ),
            FaultKind::LeaderOneway => format!(
                "{} blocked for {} ms",
                if self.param == 0 {
                    "its own Raft and coordinator connections to the others"
                } else {
                    "the others' Raft and coordinator connections to it"
                },
                self.down_ms
            ),
            FaultKind::LinkDelay => format!(
                "+{} ms on each chunk of its Raft and coordinator links, both ways, for {} ms",
                self.param, self.down_ms
            ),
            FaultKind::LinkLoss => format!(
                "{}% of its Raft and coordinator connections lost (refused, or cut every {} ms), for {} ms",
                self.param, LOSS_EVERY_MS, self.down_ms
            ),
            FaultKind::HostileObjects => format!(
                "hostile PodGroups and pods created (chaos/src/hostile.rs), watched for {} ms, left in place until the next hostile-objects injection deletes them",
                self.down_ms
            ),
            FaultKind::SnapshotCatchup => format!(
                "SIGKILL, kept down {} ms or more and until the leader's log is two snapshot intervals and {} entries past it; restarted from its data dir, it must catch up by InstallSnapshot",
                self.down_ms, self.param
            ),
            FaultKind::CoordinatorCrash => format!(
                "crash failpoint {} armed, a cross-shard gang made in its shard's queue; once it crashed there, restarted from its data dir after {} ms",
                crate::crash::point(self.param).name(),
                self.down_ms
            ),
            FaultKind::MembershipChange => "a replica added (started with the new --peers, the others restarted with it one at a time, the leader last), then this one stopped (SIGTERM) and the others restarted without it".to_string(),
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
                FaultKind::OwnerKill | FaultKind::SnapshotCatchup | FaultKind::CoordinatorCrash => {
                    rng.random_range(lease_ms * 3 / 2..=lease_ms * 5 / 2)
                }
                FaultKind::FollowerKill | FaultKind::FollowerPowerLoss => {
                    rng.random_range(100..=lease_ms / 2)
                }
                FaultKind::LeaderPause | FaultKind::OwnerPause => {
                    rng.random_range(lease_ms * 3 / 2..=lease_ms * 3)
                }
                FaultKind::ApiLatency | FaultKind::ApiErrors | FaultKind::WatchCut => {
                    rng.random_range(lease_ms * 2..=lease_ms * 4)
                }
                FaultKind::LeaderPartition | FaultKind::LeaderOneway => {
                    rng.random_range(lease_ms * 3 / 2..=lease_ms * 3)
                }
                FaultKind::LinkDelay | FaultKind::LinkLoss => {
                    rng.random_range(lease_ms * 2..=lease_ms * 4)
                }
                FaultKind::HostileObjects => rng.random_range(lease_ms * 3..=lease_ms * 5),
                // Lasts as long as its rolling restarts take.
                FaultKind::MembershipChange => 0,
            };
            let gap_ms = rng.random_range(1000..=2500);
            // Drawn only for the proxy kinds, so the other kinds' draws stay as they were.
            let (param, seed) = match kind {
                FaultKind::ApiLatency => (rng.random_range(100..=500), 0),
                FaultKind::ApiErrors => (rng.random_range(20..=50), rng.random()),
                FaultKind::WatchCut => (rng.random_range(lease_ms / 2..=lease_ms), 0),
                FaultKind::LeaderOneway => (rng.random_range(0..=1), 0),
                // Around the Raft election timeout (100-200 ms) and past it.
                FaultKind::LinkDelay => (rng.random_range(20..=250), 0),
                FaultKind::LinkLoss => (rng.random_range(20..=60), rng.random()),
                // Draws how much of the lost tail survives torn.
                FaultKind::FollowerPowerLoss => (0, rng.random()),
                // Entries the leader commits past the victim beyond the minimum.
                FaultKind::SnapshotCatchup => (rng.random_range(0..=catchup::SNAPSHOT_EVERY), 0),
                // Which step of the two-phase reservation (`crash::point`).
                FaultKind::CoordinatorCrash => (rng.random_range(0..=2), 0),
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
    if kind.hits_all() {
        return Ok(ALL_REPLICAS);
    }
    let views = fleet.views();
    let owner_needed = matches!(
        kind,
        FaultKind::OwnerKill | FaultKind::OwnerPause | FaultKind::CoordinatorCrash
    );
    // A link fault may hit any replica, the leader too.
    let any = matches!(kind, FaultKind::LinkDelay | FaultKind::LinkLoss);
    let mut candidates: Vec<u64> = views
        .iter()
        .filter(|(id, v)| (any || **id != leader) && (!owner_needed || !v.owned.is_empty()))
        .map(|(id, _)| *id)
        .collect();
    // Shards that moved to the leader while their owners were down may stay there, so
    // after a few kills the leader may own them all: then the owner faults hit the
    // leader, which is an owner too (a CI run of 2026-12-02 stopped its matrix here with
    // "owner-pause: no live replica other than the leader 3 owns a shard").
    let leader_owns = views.get(&leader).is_some_and(|v| !v.owned.is_empty());
    if candidates.is_empty() && owner_needed && leader_owns {
        candidates.push(leader);
    }
    anyhow::ensure!(
        !candidates.is_empty(),
        "{}: no live replica other than the leader {leader}{}",
        kind.name(),
        if owner_needed { " owns a shard" } else { "" }
    );
    Ok(candidates[(pick % candidates.len() as u64) as usize])
}

/// Hits `victim` with `f` and heals it; returns when the victim was restarted or resumed
/// (or the proxy fault switched off), with what the fault did in words where the harness
/// knows more than the schedule says (empty otherwise). The proxy faults need `api`.
pub fn inject(
    fleet: &mut Fleet,
    api: Option<&Control>,
    victim: u64,
    f: &Fault,
    after_hit: &mut dyn FnMut(),
) -> anyhow::Result<String> {
    let down = Duration::from_millis(f.down_ms);
    match f.kind {
        FaultKind::LeaderKill | FaultKind::OwnerKill | FaultKind::FollowerKill => {
            fleet.replica(victim)?.sigkill();
            let t = Instant::now();
            after_hit();
            std::thread::sleep(down.saturating_sub(t.elapsed()));
            fleet.spawn(victim).map(|()| String::new())
        }
        FaultKind::FollowerPowerLoss => {
            fleet.replica(victim)?.sigkill();
            let t = Instant::now();
            let note = lose_unsynced(&fleet.data_dir(victim), f.seed)?;
            after_hit();
            std::thread::sleep(down.saturating_sub(t.elapsed()));
            fleet.spawn(victim).map(|()| note)
        }
        FaultKind::SnapshotCatchup => catchup::inject(fleet, victim, f, after_hit),
        FaultKind::MembershipChange => membership::inject(fleet, victim, after_hit),
        FaultKind::CoordinatorCrash => crate::crash::inject(fleet, victim, f, after_hit),
        FaultKind::LeaderPause | FaultKind::OwnerPause => {
            fleet.replica(victim)?.sigstop()?;
            let t = Instant::now();
            after_hit();
            std::thread::sleep(down.saturating_sub(t.elapsed()));
            fleet.replica(victim)?.sigcont().map(|()| String::new())
        }
        FaultKind::ApiLatency | FaultKind::ApiErrors | FaultKind::WatchCut => {
            let api = api.ok_or_else(|| {
                anyhow::anyhow!("{}: the run has no API-server proxy", f.kind.name())
            })?;
            inject_api(api, f, after_hit).map(|()| String::new())
        }
        FaultKind::LeaderPartition
        | FaultKind::LeaderOneway
        | FaultKind::LinkDelay
        | FaultKind::LinkLoss => {
            let ids: Vec<u64> = fleet.replicas.iter().map(|r| r.id).collect();
            let links = fleet
                .links
                .as_deref()
                .ok_or_else(|| anyhow::anyhow!("{}: the run has no link proxies", f.kind.name()))?;
            inject_links(links, &ids, victim, f, after_hit);
            Ok(String::new())
        }
        FaultKind::HostileObjects => {
            // The objects are made by the caller, which holds the API client; this is
            // the watching.
            after_hit();
            std::thread::sleep(down);
            Ok(String::new())
        }
    }
}

/// Emulates the page cache of a killed replica lost: its Raft log cut to what was
/// fsynced (`synced_len`), keeping a torn part of the lost tail (drawn from `seed`: 0 to
/// all but one of its bytes), as a power loss may leave a partly written page. Its
/// snapshot file is left as it is: each is fsynced and renamed into place before it
/// counts. Returns what was cut, in words.
pub fn lose_unsynced(data_dir: &std::path::Path, seed: u64) -> anyhow::Result<String> {
    let path = data_dir.join(phalanx_statestore::log_store::LOG_FILE_NAME);
    let bytes = std::fs::read(&path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let synced = phalanx_statestore::log_store::synced_len(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let lost = bytes.len() - synced;
    let torn = match lost {
        0 => 0,
        n => ChaCha8Rng::seed_from_u64(seed).random_range(0..n),
    };
    let keep = synced + torn;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    f.set_len(keep as u64)
        .map_err(|e| anyhow::anyhow!("{}: cutting to {keep} bytes: {e}", path.display()))?;
    Ok(format!(
        "raft log {} bytes, fsynced {synced}: {} unsynced bytes lost, {torn} of them kept torn",
        bytes.len(),
        lost - torn
    ))
}

/// How often `link-loss` cuts a share of the open connections.
pub const LOSS_EVERY_MS: u64 = 250;

/// The directed links `f` acts on: from the victim to every other replica (`out`), from
/// every other to the victim (`inbound`), or both.
pub fn victim_links(ids: &[u64], victim: u64, out: bool, inbound: bool) -> Vec<Link> {
    let others = ids.iter().copied().filter(|i| *i != victim);
    others
        .flat_map(|o| {
            let a = out.then_some((victim, o));
            let b = inbound.then_some((o, victim));
            a.into_iter().chain(b)
        })
        .collect()
}

/// A link fault: on for `down_ms` (for `link-loss`, a share of the open connections cut
/// every `LOSS_EVERY_MS`), then healed.
fn inject_links(links: &Links, ids: &[u64], victim: u64, f: &Fault, after_hit: &mut dyn FnMut()) {
    let down = Duration::from_millis(f.down_ms);
    let t = Instant::now();
    let both = victim_links(ids, victim, true, true);
    match f.kind {
        FaultKind::LeaderOneway => {
            links.block(&victim_links(ids, victim, f.param == 0, f.param != 0))
        }
        FaultKind::LinkDelay => links.set_delay(&both, Duration::from_millis(f.param)),
        FaultKind::LinkLoss => links.set_loss(&both, f.param as f64 / 100.0, f.seed),
        _ => links.block(&both),
    }
    after_hit();
    if f.kind == FaultKind::LinkLoss {
        let every = Duration::from_millis(LOSS_EVERY_MS);
        while t.elapsed() + every < down {
            links.cut_share();
            std::thread::sleep(every);
        }
    }
    std::thread::sleep(down.saturating_sub(t.elapsed()));
    links.heal();
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
                FaultKind::FollowerKill | FaultKind::FollowerPowerLoss => {
                    assert!(f.down_ms <= 500, "{f:?}")
                }
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
                FaultKind::LeaderPartition => assert!(f.down_ms > 1000, "{f:?}"),
                FaultKind::LeaderOneway => assert!(f.param <= 1 && f.down_ms > 1000, "{f:?}"),
                FaultKind::LinkDelay => {
                    assert!((20..=250).contains(&f.param) && f.down_ms >= 2000, "{f:?}")
                }
                FaultKind::LinkLoss => {
                    assert!((20..=60).contains(&f.param) && f.down_ms >= 2000, "{f:?}")
                }
                FaultKind::HostileObjects => assert!(f.down_ms >= 3000, "{f:?}"),
                FaultKind::SnapshotCatchup => assert!(
                    f.down_ms > 1000 && f.param <= catchup::SNAPSHOT_EVERY,
                    "{f:?}"
                ),
                FaultKind::MembershipChange => assert_eq!(f.down_ms, 0, "{f:?}"),
                FaultKind::CoordinatorCrash => {
                    assert!(f.param <= 2 && f.down_ms > 1000, "{f:?}")
                }
            }
            let seeded = f.kind.through_proxy()
                || f.kind.through_links()
                || f.kind == FaultKind::FollowerPowerLoss
                || f.kind == FaultKind::SnapshotCatchup
                || f.kind == FaultKind::CoordinatorCrash;
            if !seeded {
                assert_eq!((f.param, f.seed), (0, 0), "{f:?}");
            }
        }
    }

    #[test]
    fn a_partition_blocks_every_link_of_the_victim_and_a_oneway_only_one_direction() {
        let ids = [1, 2, 3];
        assert_eq!(
            victim_links(&ids, 2, true, true),
            vec![(2, 1), (1, 2), (2, 3), (3, 2)]
        );
        assert_eq!(victim_links(&ids, 2, true, false), vec![(2, 1), (2, 3)]);
        assert_eq!(victim_links(&ids, 2, false, true), vec![(1, 2), (3, 2)]);
    }
}
