//! The checkers: pure functions from a history (and, for I3, the ledger's end state) to
//! violations. Each is shown to catch a violation planted by hand in its tests.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::faults::FaultKind;
use crate::history::{Event, Record};

/// A broken invariant, at a moment of the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// `I1`, `bound-once`, `I2`, `I3`, `I5`, `identical`.
    pub invariant: &'static str,
    pub t_ms: u64,
    pub what: String,
}

fn violation(invariant: &'static str, t_ms: u64, what: String) -> Violation {
    Violation {
        invariant,
        t_ms,
        what,
    }
}

/// A pod holds GPUs on its node while it is bound, not finished and not deleted.
fn holds(node: &Option<String>, phase: &Option<String>, deleted: bool) -> Option<String> {
    let done = matches!(phase.as_deref(), Some("Succeeded" | "Failed"));
    node.clone().filter(|_| !done && !deleted)
}

/// I1: after every record, no node holds more GPUs than its allocatable. A pod on a node
/// the history never showed counts against an allocatable of 0.
pub fn check_i1(history: &[Record]) -> Vec<Violation> {
    let mut allocatable: BTreeMap<String, i64> = BTreeMap::new();
    let mut held: BTreeMap<String, (String, i64)> = BTreeMap::new();
    let mut out = Vec::new();
    for r in history {
        let touched = match &r.event {
            Event::Node { node, gpus } => {
                allocatable.insert(node.clone(), *gpus);
                node.clone()
            }
            Event::Pod {
                pod,
                node,
                gpus,
                phase,
                deleted,
                ..
            } => {
                let before = held.remove(pod).map(|(n, _)| n);
                match holds(node, phase, *deleted) {
                    Some(n) => {
                        held.insert(pod.clone(), (n.clone(), *gpus));
                        n
                    }
                    None => match before {
                        Some(n) => n,
                        None => continue,
                    },
                }
            }
            _ => continue,
        };
        let on: Vec<(&String, i64)> = held
            .iter()
            .filter(|(_, (n, _))| *n == touched)
            .map(|(p, (_, g))| (p, *g))
            .collect();
        let used: i64 = on.iter().map(|(_, g)| g).sum();
        let cap = allocatable.get(&touched).copied().unwrap_or(0);
        if used > cap {
            let pods: Vec<String> = on.iter().map(|(p, g)| format!("{p} ({g})")).collect();
            out.push(violation(
                "I1",
                r.t_ms,
                format!(
                    "node {touched}: {used} GPUs held of {cap} allocatable by {}",
                    pods.join(", ")
                ),
            ));
        }
    }
    out
}

/// Each pod is bound at most once and to one node: once a pod shows a node, it never
/// shows another, and a deleted pod never comes back bound.
pub fn check_bound_once(history: &[Record]) -> Vec<Violation> {
    let mut first: BTreeMap<&str, &str> = BTreeMap::new();
    let mut gone: BTreeSet<&str> = BTreeSet::new();
    let mut out = Vec::new();
    for r in history {
        let Event::Pod {
            pod, node, deleted, ..
        } = &r.event
        else {
            continue;
        };
        if let Some(n) = node.as_deref() {
            if gone.contains(pod.as_str()) && !deleted {
                out.push(violation(
                    "bound-once",
                    r.t_ms,
                    format!("pod {pod} bound to {n} after it was deleted"),
                ));
            }
            match first.get(pod.as_str()) {
                Some(f) if *f != n => out.push(violation(
                    "bound-once",
                    r.t_ms,
                    format!("pod {pod} bound to {f}, then to {n}"),
                )),
                Some(_) => {}
                None => {
                    first.insert(pod, n);
                }
            }
        }
        if *deleted {
            gone.insert(pod);
        }
    }
    out
}

/// I2: no gang has between 1 and minMember-1 of its pods bound for longer than one bind
/// round (`round_ms`), except that a fault extends the round: while a fault is on (the
/// API server refusing binds, the owner of part of the gang killed or paused) no round can
/// finish, so a gang partial when a fault begins, or partial during one, must be whole one
/// round after the fault settled (healed, and its shards binding again: [`recoveries`]).
/// A pod counts from its first bind on, so pods that finish or are deleted do not make a
/// whole gang look partial. A gang still partial at the end of the history counts up to
/// the last record. A gang the user takes away is judged up to that moment and not after:
/// its PodGroup deleted, or so many of its unbound pods deleted that it can no longer
/// become whole (a bind in flight may still land on a sibling meanwhile). The violation
/// lists the gang's binds (pod, time, replica) and any fault that extended its round.
pub fn check_i2(history: &[Record], round_ms: u64) -> Vec<Violation> {
    let mut i2 = HalfPlaced {
        round_ms,
        settled: fault_settled(history),
        ..HalfPlaced::default()
    };
    for r in history {
        match &r.event {
            Event::Group {
                group,
                min_member,
                deleted,
                ..
            } => i2.group(r.t_ms, group, *min_member, *deleted),
            Event::Pod {
                pod,
                node,
                group: Some(g),
                deleted,
                bound_by,
                ..
            } => i2.pod(
                r.t_ms,
                g,
                pod,
                node.is_some(),
                *deleted,
                bound_by.as_deref(),
            ),
            _ => {}
        }
    }
    i2.finish(history.last().map_or(0, |r| r.t_ms))
}

/// Why a gang is no longer judged by I2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Over {
    /// Its PodGroup was deleted (a new one of that name starts afresh).
    Deleted,
    /// Seen with minMember pods or more, enough of its unbound pods were deleted that
    /// it can no longer become whole.
    TornDown,
}

/// [`check_i2`]'s state, record by record.
#[derive(Default)]
struct HalfPlaced<'h> {
    round_ms: u64,
    settled: Vec<(u64, u64)>,
    mins: BTreeMap<&'h str, i64>,
    /// Gang -> its pods seen so far.
    members: BTreeMap<&'h str, BTreeSet<&'h str>>,
    /// Gang -> its pods deleted before they were bound.
    dropped: BTreeMap<&'h str, BTreeSet<&'h str>>,
    /// Gang -> pod -> (first bind, by whom).
    bound: BTreeMap<&'h str, BTreeMap<&'h str, (u64, &'h str)>>,
    /// Gang -> (partial since, most pods bound while partial).
    partial_since: BTreeMap<&'h str, (u64, usize)>,
    over: BTreeMap<&'h str, Over>,
    out: Vec<Violation>,
}

impl<'h> HalfPlaced<'h> {
    fn group(&mut self, t: u64, group: &'h str, min: i64, deleted: bool) {
        self.mins.insert(group, min);
        if deleted {
            self.end(group, t, Over::Deleted);
        } else if self.over.get(group) == Some(&Over::Deleted) {
            self.over.remove(group);
        }
    }

    fn pod(
        &mut self,
        t: u64,
        g: &'h str,
        pod: &'h str,
        node: bool,
        deleted: bool,
        by: Option<&'h str>,
    ) {
        if self.over.contains_key(g) {
            return;
        }
        self.members.entry(g).or_default().insert(pod);
        if !node {
            if deleted {
                self.dropped.entry(g).or_default().insert(pod);
                // Only a gang seen whole can be torn down: one whose pods are not all
                // seen yet is not judged on a count the history cannot know.
                let (seen, gone) = (self.members[g].len(), self.dropped[g].len());
                if seen as i64 >= self.min(g) && ((seen - gone) as i64) < self.min(g) {
                    self.end(g, t, Over::TornDown);
                }
            }
            return;
        }
        let set = self.bound.entry(g).or_default();
        set.entry(pod).or_insert((t, by.unwrap_or("?")));
        let n = set.len();
        let partial = (n as i64) < self.min(g);
        match (partial, self.partial_since.get(g).copied()) {
            (true, since) => {
                let since = since.map_or(t, |(s, _)| s);
                self.partial_since.insert(g, (since, n));
            }
            (false, Some((since, most))) => {
                self.partial_since.remove(g);
                self.judge(g, since, t, most);
            }
            (false, None) => {}
        }
    }

    fn min(&self, g: &str) -> i64 {
        self.mins.get(g).copied().unwrap_or(1)
    }

    /// The gang is over at `t`: whatever the race between its teardown and the binds in
    /// flight left bound is judged up to here, and not after.
    fn end(&mut self, g: &'h str, t: u64, why: Over) {
        self.over.insert(g, why);
        if let Some((since, most)) = self.partial_since.remove(g) {
            self.judge(g, since, t, most);
        }
    }

    fn finish(mut self, end: u64) -> Vec<Violation> {
        for (g, (since, n)) in std::mem::take(&mut self.partial_since) {
            self.judge(g, since, end, n);
        }
        self.out
    }

    fn judge(&mut self, group: &str, since: u64, until: u64, n: usize) {
        let (deadline, extended_by) = i2_deadline(since, self.round_ms, &self.settled);
        if until <= deadline {
            return;
        }
        let extended = extended_by.map_or(String::new(), |s| {
            format!(" after the faults it overlapped settled at {s} ms")
        });
        let mut binds: Vec<_> = self.bound.get(group).into_iter().flatten().collect();
        binds.sort_by_key(|(pod, (t, _))| (*t, *pod));
        let mut listed: Vec<String> = binds
            .iter()
            .take(I2_BINDS_LISTED)
            .map(|(pod, (t, by))| format!("{pod} at {t} ms by {by}"))
            .collect();
        if binds.len() > I2_BINDS_LISTED {
            listed.push(format!("and {} more", binds.len() - I2_BINDS_LISTED));
        }
        self.out.push(violation(
            "I2",
            since,
            format!(
                "gang {group}: {n} of minMember {} pods bound for {} ms (more than a bound round of {} ms{extended}); binds: {}",
                self.min(group),
                until - since,
                self.round_ms,
                listed.join(", ")
            ),
        ));
    }
}

/// How many of a half-placed gang's binds an I2 violation lists (a huge gang's message
/// stays readable; the first binds say who started it).
const I2_BINDS_LISTED: usize = 16;

/// Each fault as (start, settled): settled is the later of its healing and the first bind
/// on its shards after it ([`recoveries`]); a fault never healed settles at the history's
/// end. Sorted by start.
fn fault_settled(history: &[Record]) -> Vec<(u64, u64)> {
    let end = history.last().map_or(0, |r| r.t_ms);
    // (start, victim, healed); a fault's end names its victim, as in `recoveries`.
    let mut faults: Vec<(u64, u64, Option<u64>)> = Vec::new();
    for r in history {
        match &r.event {
            Event::FaultStart { victim, .. } => faults.push((r.t_ms, *victim, None)),
            Event::FaultEnd { victim, .. } => {
                for f in faults
                    .iter_mut()
                    .filter(|f| f.1 == *victim && f.2.is_none())
                {
                    f.2 = Some(r.t_ms);
                }
            }
            _ => {}
        }
    }
    let binding: BTreeMap<u64, u64> = recoveries(history)
        .iter()
        .filter_map(|r| r.recovered_ms.map(|d| (r.start_ms, r.start_ms + d)))
        .collect();
    let mut spans: Vec<(u64, u64)> = faults
        .into_iter()
        .map(|(start, _, healed)| {
            let healed = healed.unwrap_or(end);
            (start, healed.max(binding.get(&start).copied().unwrap_or(0)))
        })
        .collect();
    spans.sort_unstable();
    spans
}

/// When a gang partial since `since` must be whole: one round later, or one round after
/// each fault that began before that deadline settled (a chain of faults extends it in
/// turn). Also says where the last extension came from.
fn i2_deadline(since: u64, round_ms: u64, settled: &[(u64, u64)]) -> (u64, Option<u64>) {
    let mut deadline = since.saturating_add(round_ms);
    let mut extended_by = None;
    for &(start, settled_at) in settled {
        if start >= deadline {
            break;
        }
        let after = settled_at.saturating_add(round_ms);
        if after > deadline {
            deadline = after;
            extended_by = Some(settled_at);
        }
    }
    (deadline, extended_by)
}

/// One committed placement in the ledger, as the end-state check needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerPlacement {
    pub pod: String,
    pub node: String,
    /// `reserved`, `assumed` or `bound`.
    pub state: String,
}

/// I3 at the end of a run, once the workload stopped and the replicas settled: every
/// placement still in the ledger belongs to a pod `api` shows bound (pod -> node) on that
/// very node, and none is still a reservation of an undecided transaction. A placement
/// that was released is no longer in the ledger; one whose pod is gone or elsewhere is
/// lost or leaked. Run again once every pod is deleted (`api` empty), it says that every
/// placement was released.
pub fn check_i3(
    ledger: &[LedgerPlacement],
    api: &BTreeMap<String, Option<String>>,
    t_ms: u64,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for p in ledger {
        let what = match api.get(&p.pod) {
            _ if p.state == "reserved" => Some(format!(
                "pod {}: still reserved on {} by an undecided transaction",
                p.pod, p.node
            )),
            None => Some(format!(
                "pod {}: {} on {} in the ledger, but the pod is gone",
                p.pod, p.state, p.node
            )),
            Some(node) if node.as_deref() != Some(p.node.as_str()) => Some(format!(
                "pod {}: {} on {} in the ledger, but bound to {:?} in the API server",
                p.pod, p.state, p.node, node
            )),
            Some(_) => None,
        };
        if let Some(w) = what {
            out.push(violation("I3", t_ms, w));
        }
    }
    out
}

/// One replica's own applied ledger, read from it alone: (last applied index, the
/// fingerprint of its state's canonical bytes).
pub type OwnLedger = (u64, u64);

/// `identical`, once the run healed and went quiet: every replica's ledger state is
/// byte-identical. `None` while the replicas have not all applied the same index (the
/// states of replicas at different indexes cannot be compared: ask again); at one index,
/// a violation naming each replica's fingerprint when they differ. Fewer than two
/// replicas answering is a violation too: the check would compare nothing.
pub fn check_identical(reads: &BTreeMap<u64, OwnLedger>, t_ms: u64) -> Option<Vec<Violation>> {
    if reads.len() < 2 {
        let what = format!(
            "only {} replica(s) answered a local ledger read: {reads:?}",
            reads.len()
        );
        return Some(vec![violation("identical", t_ms, what)]);
    }
    let indexes: BTreeSet<u64> = reads.values().map(|(index, _)| *index).collect();
    if indexes.len() > 1 {
        return None;
    }
    let prints: BTreeSet<u64> = reads.values().map(|(_, print)| *print).collect();
    if prints.len() == 1 {
        return Some(Vec::new());
    }
    let each: Vec<String> = reads
        .iter()
        .map(|(id, (_, print))| format!("replica {id} {print:016x}"))
        .collect();
    let index = indexes.first().copied().unwrap_or(0);
    let what = format!(
        "the replicas' ledgers differ at applied index {index}: {}",
        each.join(", ")
    );
    Some(vec![violation("identical", t_ms, what)])
}

/// I5 for one fault: when it began, and how long until the first bind on a shard its
/// victim owned (None: no such bind before the next fault began or the history ended).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Recovery {
    pub fault: String,
    pub detail: String,
    pub victim: u64,
    pub start_ms: u64,
    pub end_ms: Option<u64>,
    pub recovered_ms: Option<u64>,
    /// When the wait for its bind ended: the bind, the next fault, or the history's end.
    pub closed_ms: u64,
}

/// I5: the time from each fault's start to the next bind of a pod whose gang's queue is
/// on a shard the victim owned when it was hit. A fault whose victim owned no shard counts
/// any bind. A bind by the victim itself before the fault healed does not count: it was
/// sent before the hit, and only its watch event came after.
pub fn recoveries(history: &[Record]) -> Vec<Recovery> {
    let mut shard_of: BTreeMap<&str, u32> = BTreeMap::new();
    let mut node_of: BTreeMap<&str, bool> = BTreeMap::new();
    let mut open: Vec<(Recovery, BTreeSet<u32>)> = Vec::new();
    let mut done = Vec::new();
    for r in history {
        match &r.event {
            Event::Group { group, shard, .. } => {
                shard_of.insert(group, *shard);
            }
            Event::FaultStart {
                fault,
                detail,
                victim,
                shards,
            } => {
                // A new fault closes those still waiting: what follows is its recovery.
                done.extend(open.drain(..).map(|(rec, _)| Recovery {
                    closed_ms: r.t_ms,
                    ..rec
                }));
                let rec = Recovery {
                    fault: fault.clone(),
                    detail: detail.clone(),
                    victim: *victim,
                    start_ms: r.t_ms,
                    end_ms: None,
                    recovered_ms: None,
                    closed_ms: r.t_ms,
                };
                open.push((rec, shards.iter().copied().collect()));
            }
            Event::FaultEnd { victim, .. } => {
                for (rec, _) in open.iter_mut().filter(|(rec, _)| rec.victim == *victim) {
                    rec.end_ms.get_or_insert(r.t_ms);
                }
            }
            Event::Pod {
                pod,
                node,
                group,
                bound_by,
                ..
            } => {
                let was = node_of.insert(pod, node.is_some()).unwrap_or(false);
                if was || node.is_none() {
                    continue;
                }
                let shard = group.as_deref().and_then(|g| shard_of.get(g));
                let mut still = Vec::new();
                for (mut rec, shards) in open.drain(..) {
                    let on_shards = shards.is_empty() || shard.is_some_and(|s| shards.contains(s));
                    let by_victim = bound_by.as_deref() == Some(rec.victim.to_string().as_str());
                    // A victim hit at the fault's start may still show binds it sent
                    // before; a membership change's victim runs and owns its shards
                    // until its removal late in the fault, so its binds are recovery
                    // (seed 2's run counted none and flagged 59 s of rolling restarts).
                    let keeps_running = rec.fault == FaultKind::MembershipChange.name();
                    let hit = on_shards && (!by_victim || keeps_running || rec.end_ms.is_some());
                    if hit {
                        rec.recovered_ms = Some(r.t_ms - rec.start_ms);
                        rec.closed_ms = r.t_ms;
                        done.push(rec);
                    } else {
                        still.push((rec, shards));
                    }
                }
                open = still;
            }
            Event::Node { .. } => {}
        }
    }
    let end = history.last().map_or(0, |r| r.t_ms);
    done.extend(open.into_iter().map(|(rec, _)| Recovery {
        closed_ms: end,
        ..rec
    }));
    done.sort_by_key(|r| r.start_ms);
    done
}

/// I5 as a violation: a fault whose shards saw no bind within `limit_ms` of its healing
/// (its end; its start when it never ended), while the run went on that long.
pub fn check_i5(recoveries: &[Recovery], limit_ms: u64) -> Vec<Violation> {
    recoveries
        .iter()
        .filter_map(|r| {
            let healed = r.end_ms.unwrap_or(r.start_ms).max(r.start_ms);
            let waited = r.closed_ms.saturating_sub(healed);
            let what = match r.recovered_ms {
                Some(ms) if waited > limit_ms => format!(
                    "next bind on its shards {ms} ms after the fault, {waited} ms after healing (limit {limit_ms} ms)"
                ),
                None if waited > limit_ms => {
                    format!("no bind on its shards in the {waited} ms after healing (limit {limit_ms} ms)")
                }
                _ => return None,
            };
            Some(violation(
                "I5",
                r.start_ms,
                format!("{} (victim {}): {what}", r.fault, r.victim),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests;
