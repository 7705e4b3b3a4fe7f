//! Making room by eviction: what `preempt` and `reclaim` share.
//!
//! For one starving gang (admitted, fewer than `minMember` placed) the action:
//! 0. pipelines its pods onto room that is idle or being released, evicting nobody, as
//!    Volcano does before it looks at victims (skipped when `allocate` already ran in this
//!    cycle and nothing is being released: allocate found no such room). If the whole
//!    gang fits there it is done; what fits stays pipelined while victims make the rest;
//! 1. lists *victim units*, least harm first: a single pod a running gang can spare (it keeps
//!    `minMember` without it), or a whole running gang. A gang is never cut below its
//!    minimum: evicting one pod of it too many would leave the rest holding resources for
//!    nothing, so the choice is made per gang;
//! 2. evicts units one by one inside a [`Statement`], and after each one tries to place the
//!    gang's pending pods on the nodes' *future idle* resources (free + releasing −
//!    pipelined), only on the nodes the unit freed;
//! 3. when the gang fits (Volcano's "pipelined"), drops every unit it can do without, one at
//!    a time, so that no more is evicted than needed; when it does not fit even with every
//!    allowed unit gone, discards the statement: every eviction is rolled back.
//!
//! The pods placed this way are *pipelined*, not bound: they are bound in a later cycle by
//! `allocate`, once the victims are gone.
//!
//! Who may be a victim: a managed pod bound or running before this cycle (a job that got
//! pods in this cycle is never a victim in it), not annotated `volcano.sh/preemptable:
//! "false"`, allowed by every plugin (`conformance` protects kube-system and system-critical
//! pods) and by the `preemptable` (preempt) or `reclaimable` (reclaim) hooks: `priority`
//! (strictly lower priority only), `gang` (whole gangs or spare pods only), `proportion`
//! (only what a queue holds beyond its deserved share). A gang whose pods have
//! `preemptionPolicy: Never` never evicts anyone.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap, HashSet};

use crate::actions::job_blocker;
use crate::actions::turns::QueueTurns;
use crate::framework::plan::Event;
use crate::framework::{JobId, NodeId, QueueId, Session, Statement, TaskId, TaskStatus};
use crate::model::{PodGroupPhase, Resources};

/// Which action is making room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Within a queue, for a gang of higher priority.
    Preempt,
    /// Across queues, for a queue below its deserved share.
    Reclaim,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Preempt => "preempt",
            Mode::Reclaim => "reclaim",
        }
    }
}

/// A set of victims chosen together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    /// One pod its gang can spare.
    Spare(TaskId),
    /// Every pod a gang holds.
    Gang(JobId),
}

pub fn run(session: &mut Session, mode: Mode) {
    let deserved: Vec<Resources> = if mode == Mode::Reclaim && session.plugins.has("proportion") {
        crate::plugins::proportion::compute_deserved(&session.state)
            .into_iter()
            .map(|s| s.deserved)
            .collect()
    } else {
        Vec::new()
    };
    let enqueue_configured = session.conf.actions.iter().any(|a| a == "enqueue");
    let mut turns = QueueTurns::new(session);
    let mut starving = 0;
    for job in 0..session.state.jobs.len() {
        if !session.in_scope(job) || !is_starving(session, job, enqueue_configured) {
            continue;
        }
        let Some(queue) = session.state.jobs[job].queue else {
            continue;
        };
        turns.add(session, queue, job);
        starving += 1;
    }
    // A replica's session holds only its own shards' gangs; reclaim's victims are other
    // queues' gangs, homed in any shard, so they are lent to it once it has a gang to
    // make room for. They are appended, so the ids above stay valid.
    if mode == Mode::Reclaim && starving > 0 {
        session.lend_other_shards_holders();
    }
    let mut lists = VictimLists::default();
    let mut reach = Reach::default();
    // Shapes (queue, priority, first pod's placement key, missing members) that found no
    // room: victims only become fewer within the action, so the same shape fails again.
    let mut failed: BTreeSet<(QueueId, i32, u64, u32)> = BTreeSet::new();
    let mut attempts = 0usize;
    while let Some(queue) = turns.next_queue(session) {
        let Some(job) = turns.next_job(session, queue) else {
            continue;
        };
        let shape = shape_of(session, job);
        if failed.contains(&shape) {
            note(
                session,
                job,
                format!(
                    "{}: a gang of the same shape found no room this cycle",
                    mode.name()
                ),
            );
        } else if attempts >= MAX_ATTEMPTS_PER_CYCLE {
            note(
                session,
                job,
                format!(
                    "{}: not tried this cycle ({MAX_ATTEMPTS_PER_CYCLE} gangs already were)",
                    mode.name()
                ),
            );
        } else {
            attempts += 1;
            if !make_room(session, job, mode, &deserved, &mut lists, &mut reach) {
                failed.insert(shape);
            }
        }
        turns.end_turn(session, queue, None);
    }
}

/// What [`enough_in_reach`] sums over the whole cluster, kept from one gang's attempt to the
/// next while the session does not change: a failed attempt discards its statement, so only
/// a committed one (which [`make_room`] reports here) changes future-idle room or who holds
/// what. Summing every node for each of up to [`MAX_ATTEMPTS_PER_CYCLE`] gangs was a fifth
/// of a sustained run's planning CPU at 5,000 nodes (`docs/benchmarks.md`).
#[derive(Default)]
struct Reach {
    /// Every node's positive future-idle room, summed per resource.
    idle: Option<Resources>,
    /// Preempt, per victim list (the key of `units_cache`): what its victims hold, each
    /// counted once.
    held: HashMap<(QueueId, i32), Resources>,
    /// Reclaim: what each queue's candidates hold, and all candidates together. A
    /// reclaimer's victims are every other queue's, so its reach is the whole less its own
    /// queue's: one pass over the candidates instead of one per starving queue (with 64
    /// queues, summing each reclaimer's list was 3 % of a sustained run's CPU).
    by_queue: Option<HeldByQueue>,
}

/// What every queue's candidate victims hold, and the sum over all queues.
struct HeldByQueue {
    per_queue: HashMap<QueueId, Resources>,
    total: Resources,
}

impl HeldByQueue {
    fn of(session: &Session, all: &[Candidate]) -> HeldByQueue {
        let mut units: HashMap<QueueId, Vec<Unit>> = HashMap::new();
        for c in all {
            units.entry(c.queue).or_default().push(c.unit);
        }
        // A unit and the gang it belongs to are in one queue, so each queue's sum counts
        // its pods once, as `held_by` does for a list holding both.
        let per_queue: HashMap<QueueId, Resources> = units
            .into_iter()
            .map(|(q, units)| (q, held_by(session, &units)))
            .collect();
        let mut total = Resources::new();
        for held in per_queue.values() {
            total.add(held);
        }
        HeldByQueue { per_queue, total }
    }

    /// What the victims of every queue but `queue` hold.
    fn others_than(&self, queue: QueueId) -> Resources {
        let mut others = self.total.clone();
        if let Some(own) = self.per_queue.get(&queue) {
            others.sub(own);
        }
        others
    }
}

impl Reach {
    fn session_changed(&mut self) {
        self.idle = None;
        self.held.clear();
        self.by_queue = None;
    }

    /// What the victims the preemptor `key` may take hold, each pod counted once; `units`
    /// is its list (preempt), `lists` gives every queue's candidates (reclaim).
    fn held(
        &mut self,
        session: &Session,
        (key, mode): ((QueueId, i32), Mode),
        units: &[Unit],
        lists: &mut VictimLists,
    ) -> Resources {
        match mode {
            Mode::Reclaim => self
                .by_queue
                .get_or_insert_with(|| HeldByQueue::of(session, lists.all(session)))
                .others_than(key.0),
            Mode::Preempt => self
                .held
                .entry(key)
                .or_insert_with(|| held_by(session, units))
                .clone(),
        }
    }
}

/// Candidate victims, listed once per action and filtered per preemptor.
///
/// Which units exist and how much harm each does do not depend on the preemptor; only
/// *which* of them it may take does, through its queue (and its priority, for preempt).
/// Listing every job's pods once per queue was the largest part of a sustained run's
/// planning CPU with 64 queues (`docs/benchmarks.md`), so the whole list is built once,
/// in harm order, and each preemptor's list is a filter of it, which keeps that order.
/// A preemptor key's list is made when its first gang asks and kept for the action, as
/// before: whether each unit is still evictable is checked again when it is used.
#[derive(Default)]
struct VictimLists {
    /// Every candidate unit, least harm first, as the session is now; dropped when a
    /// committed statement changes who holds what.
    all: Option<Vec<Candidate>>,
    /// Per preemptor key (queue, and priority for preempt; see [`make_room`]).
    by_key: HashMap<(QueueId, i32), Vec<Unit>>,
}

/// A unit with what decides who may take it.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    unit: Unit,
    queue: QueueId,
    priority: i32,
}

impl VictimLists {
    fn session_changed(&mut self) {
        self.all = None;
    }

    /// Every candidate unit as the session is now, least harm first.
    fn all(&mut self, session: &Session) -> &[Candidate] {
        self.all.get_or_insert_with(|| all_candidates(session))
    }

    /// The candidate units of the preemptor `key` under `mode`, least harm first.
    fn units(&mut self, session: &Session, key: (QueueId, i32), mode: Mode) -> &[Unit] {
        let all = &mut self.all;
        self.by_key.entry(key).or_insert_with(|| {
            let all = all.get_or_insert_with(|| all_candidates(session));
            units_for(all, key, mode)
        })
    }
}

/// The units the preemptor `key` may take: strictly lower priority in its own queue
/// (preempt; equal jobs never take turns, whatever the plugins say), or any other queue's
/// (reclaim).
fn units_for(all: &[Candidate], (queue, priority): (QueueId, i32), mode: Mode) -> Vec<Unit> {
    all.iter()
        .filter(|c| match mode {
            Mode::Preempt => c.queue == queue && c.priority < priority,
            Mode::Reclaim => c.queue != queue,
        })
        .map(|c| c.unit)
        .collect()
}

/// At most this many gangs try to make room per action and cycle (a bound on the work a
/// cycle does; the rest try in the next cycle).
pub const MAX_ATTEMPTS_PER_CYCLE: usize = 512;

fn shape_of(session: &Session, job: JobId) -> (QueueId, i32, u64, u32) {
    let state = &session.state;
    let j = &state.jobs[job];
    let key = state
        .pending_tasks(job)
        .next()
        .map_or(0, |t| state.tasks[t].placement_key);
    (
        j.queue.unwrap_or(usize::MAX),
        j.priority,
        key,
        missing_members(session, job),
    )
}

/// Admitted, valid, starving by the plugins' hooks (with `gang`: fewer than `minMember`
/// placed) and not pipelined ready, with pods that request resources left to place.
fn is_starving(session: &Session, job: JobId, enqueue_configured: bool) -> bool {
    let state = &session.state;
    let j = &state.jobs[job];
    if enqueue_configured && j.phase == PodGroupPhase::Pending {
        return false;
    }
    if state
        .pending_tasks(job)
        .all(|t| state.tasks[t].is_best_effort())
    {
        return false;
    }
    // The plugins' starving hooks decide, tier by tier, as Volcano's `JobStarving`: `gang`
    // (below `minMember`), `priority` (pods still pending). With neither, nobody starves.
    if !session.plugins.job_starving(state, job) || pipelined_ready(session, job) {
        return false;
    }
    job_blocker(session, job).is_none()
}

fn pipelined_ready(session: &Session, job: JobId) -> bool {
    let j = &session.state.jobs[job];
    j.pipelined_count > 0 && session.plugins.job_pipelined(&session.state, job)
}

/// Tries to make room for `job`; commits the evictions and pipelined placements when it
/// fits, gives everything back when it does not. Returns false when it found no room for
/// a reason a gang of the same shape (queue, priority, pods, missing members) meets too.
fn make_room(
    session: &mut Session,
    job: JobId,
    mode: Mode,
    deserved: &[Resources],
    lists: &mut VictimLists,
    reach: &mut Reach,
) -> bool {
    let tasks: Vec<TaskId> = session.pending_tasks_in_order(job);
    if tasks.is_empty() {
        return false;
    }
    let queue = session.state.jobs[job]
        .queue
        .expect("starving jobs have a queue");
    let class_never = session.state.jobs[job]
        .pod_group
        .priority_class_name
        .as_ref()
        .is_some_and(|c| session.state.never_preempt_classes.contains(c));
    if class_never || tasks.iter().any(|&t| !session.state.tasks[t].may_preempt) {
        note(
            session,
            job,
            format!(
                "{}: not evicting anyone: its pods have preemptionPolicy Never",
                mode.name()
            ),
        );
        return true; // not about room: a gang of the same shape may still try.
    }
    if mode == Mode::Reclaim && !session.state.queues[queue].is_open() {
        // As Volcano's proportion: a queue that is not Open may not take anything back.
        let q = &session.state.queues[queue].queue;
        let message = format!(
            "reclaim: queue {} is {:?} and reclaims nothing",
            q.name, q.state
        );
        note(session, job, message);
        return false;
    }
    if mode == Mode::Reclaim && session.plugins.overused(&session.state, queue) {
        return false; // allocate already said why: the queue has its deserved share.
    }
    if mode == Mode::Reclaim && !queue_can_take(session, job, queue, &tasks, deserved) {
        return false;
    }
    if mode == Mode::Reclaim && !queue_preemptive(session, job, queue, &tasks) {
        return false;
    }
    let key = (
        queue,
        if mode == Mode::Preempt {
            session.state.jobs[job].priority
        } else {
            0
        },
    );
    // Room that is idle, or that earlier victims are already releasing (they are still
    // terminating), is taken first, without evicting anyone: Volcano pipelines a preemptor
    // onto a node whose future-idle resources fit it before it looks at any victim. What
    // fits there stays pipelined in the statement while victims are sought for the rest.
    let mut statement = Statement::new();
    if idle_room_may_fit(session, mode) && place(session, &mut statement, job, &tasks, None) {
        if mode == Mode::Reclaim {
            // Reclaim makes room only where victims are (as Volcano's, which looks only at
            // nodes holding reclaimees): a gang that fits the idle room is allocate's.
            // Pipelining it here would hold that room and, with reclaim listed before
            // allocate, keep allocate from ever binding it.
            statement.discard(session);
            note(
                session,
                job,
                "reclaim: the gang fits the idle room; evicting no one (allocate places it)".into(),
            );
            return true;
        }
        record(session, job, &statement, mode);
        statement.commit(session);
        reach.session_changed();
        lists.session_changed();
        return true;
    }
    let units = lists.units(session, key, mode).to_vec();
    if units.is_empty() {
        statement.discard(session);
        return false;
    }
    let held = reach.held(session, (key, mode), &units, lists);
    if !enough_in_reach(session, job, &tasks, &held, reach) {
        statement.discard(session);
        note(
            session,
            job,
            format!(
                "{}: evicting every allowed victim would still not free enough",
                mode.name()
            ),
        );
        return false;
    }

    let mut chosen: Vec<Unit> = Vec::new();
    let mut fits = false;
    for &unit in &units {
        if fits {
            break;
        }
        let victims = unit_victims(session, unit);
        if victims.is_empty() || !allowed(session, job, &victims, mode) {
            continue;
        }
        if !useful(session, &tasks, &victims) {
            continue;
        }
        let nodes: BTreeSet<NodeId> = victims
            .iter()
            .filter_map(|&v| session.state.tasks[v].node)
            .collect();
        for &v in &victims {
            statement.evict(session, v, mode.name());
        }
        chosen.push(unit);
        fits = place(session, &mut statement, job, &tasks, Some(&nodes));
    }
    if !fits {
        statement.discard(session);
        note(
            session,
            job,
            format!(
                "{}: no set of allowed victims makes room for the gang",
                mode.name()
            ),
        );
        return false;
    }
    if chosen.len() > 1 {
        // Never evict more than needed: drop each unit the gang fits without.
        statement.discard(session);
        let mut keep = chosen.clone();
        for unit in chosen {
            let trial: Vec<Unit> = keep.iter().copied().filter(|&u| u != unit).collect();
            let (ok, s) = build(session, job, &tasks, &trial, mode);
            s.discard(session);
            if ok {
                keep = trial;
            }
        }
        let (ok, s) = build(session, job, &tasks, &keep, mode);
        if !ok {
            s.discard(session);
            return false;
        }
        statement = s;
    }
    record(session, job, &statement, mode);
    statement.commit(session);
    reach.session_changed();
    lists.session_changed();
    true
}

/// Whether placing on future-idle resources without evicting anyone can succeed. It cannot
/// when `allocate` already ran in this cycle and nothing is being released: allocate found
/// no idle room for the gang then, and future-idle room is idle room minus what was
/// pipelined since. Skipping the attempt keeps a cycle with many starving gangs cheap.
fn idle_room_may_fit(session: &Session, mode: Mode) -> bool {
    let actions = &session.conf.actions;
    let position = |name: &str| actions.iter().position(|a| a == name);
    let allocate_ran_before = match (position("allocate"), position(mode.name())) {
        (Some(allocate), Some(this)) => allocate < this,
        _ => false,
    };
    !allocate_ran_before || session.state.nodes.iter().any(|n| n.releasing_pods > 0)
}

/// Evicts `units` and places the gang from scratch; `true` when it fits.
fn build(
    session: &mut Session,
    job: JobId,
    tasks: &[TaskId],
    units: &[Unit],
    mode: Mode,
) -> (bool, Statement) {
    let mut statement = Statement::new();
    for &unit in units {
        let victims = unit_victims(session, unit);
        if !allowed(session, job, &victims, mode) {
            return (false, statement);
        }
        for v in victims {
            statement.evict(session, v, mode.name());
        }
    }
    let ok = place(session, &mut statement, job, tasks, None);
    (ok, statement)
}

/// The reclaiming queue stays within its deserved share with the gang's missing members.
fn queue_can_take(
    session: &mut Session,
    job: JobId,
    queue: QueueId,
    tasks: &[TaskId],
    deserved: &[Resources],
) -> bool {
    let Some(deserved) = deserved.get(queue) else {
        return true;
    };
    let state = &session.state;
    let missing = missing_members(session, job) as usize;
    let mut need = Resources::new();
    for &t in tasks.iter().take(missing) {
        need.add(state.tasks[t].resreq());
    }
    let after = state.queues[queue].allocated.plus(&need);
    if after.fits_in_dimensions(deserved, &need) {
        return true;
    }
    let name = state.queues[queue].queue.name.clone();
    let message = format!(
        "reclaim: queue {name} would exceed its deserved share ({}) with the gang's {need}; allocated {}",
        deserved.restricted_to(&need),
        state.queues[queue].allocated.restricted_to(&need)
    );
    note(session, job, message);
    false
}

/// The plugins let the queue reclaim for the gang's missing members (`capacity`: it stays
/// within its real capability and, on some resource they ask for, within its deserved
/// amount).
fn queue_preemptive(session: &mut Session, job: JobId, queue: QueueId, tasks: &[TaskId]) -> bool {
    let state = &session.state;
    let missing = missing_members(session, job) as usize;
    let mut need = Resources::new();
    for &t in tasks.iter().take(missing.max(1)) {
        need.add(state.tasks[t].resreq());
    }
    if session.plugins.preemptive(state, queue, &need) {
        return true;
    }
    let name = state.queues[queue].queue.name.clone();
    let message = format!(
        "reclaim: queue {name} may not reclaim for {need}: it would pass its capability, or its deserved amount on every resource asked for (allocated {})",
        state.queues[queue].allocated.restricted_to(&need)
    );
    note(session, job, message);
    false
}

fn missing_members(session: &Session, job: JobId) -> u32 {
    let j = &session.state.jobs[job];
    j.min_available()
        .saturating_sub(j.ready_count + j.pipelined_count + j.pending_best_effort)
}

/// A quick refusal: the missing members need more than all future-idle resources plus
/// everything the candidate victims hold.
fn enough_in_reach(
    session: &Session,
    job: JobId,
    tasks: &[TaskId],
    held: &Resources,
    reach: &mut Reach,
) -> bool {
    let state = &session.state;
    let missing = missing_members(session, job) as usize;
    let mut need = Resources::new();
    for &t in tasks.iter().take(missing) {
        need.add(state.tasks[t].resreq());
    }
    let idle = reach.idle.get_or_insert_with(|| {
        let mut sum = Resources::new();
        for n in &state.nodes {
            sum.add(&n.future_idle().positive_part());
        }
        sum
    });
    need.fits_in_dimensions(&idle.plus(held), &need)
}

/// What `units`' victims hold, each pod counted once. A spare pod's gang, when it is listed
/// whole too, already counts that pod: spare pods are distinct, and a gang's victims are
/// every evictable pod of it, so only the spares of gangs not listed whole are added.
fn held_by(session: &Session, units: &[Unit]) -> Resources {
    let state = &session.state;
    let whole: HashSet<JobId> = units
        .iter()
        .filter_map(|u| match u {
            Unit::Gang(j) => Some(*j),
            Unit::Spare(_) => None,
        })
        .collect();
    let mut sum = Resources::new();
    for &unit in units {
        if let Unit::Spare(t) = unit
            && state.tasks[t].job.is_some_and(|j| whole.contains(&j))
        {
            continue;
        }
        for v in unit_victims(session, unit) {
            sum.add(state.tasks[v].resreq());
        }
    }
    sum
}

/// How much harm evicting a unit does, smallest first: victim job priority, then its queue's
/// priority (Volcano's victim order: lower job priority first, then the queue that comes
/// last in queue order), spare pod before whole gang, the pod's own priority (Volcano takes
/// a job's pods lowest task priority first), GPUs, cpu, newest gang first.
type HarmKey = (i32, i32, u8, i32, i64, i64, std::cmp::Reverse<u64>);

/// Every candidate unit of the session, least harm first, whoever the preemptor.
fn all_candidates(session: &Session) -> Vec<Candidate> {
    let state = &session.state;
    let mut keyed: Vec<(HarmKey, Candidate)> = Vec::new();
    for (v, victim) in state.jobs.iter().enumerate() {
        let Some(queue) = victim.queue else {
            continue;
        };
        let mut holding = Vec::new();
        // A gang some of whose pods already finished is not evicted whole: what is left of it
        // is finishing the work.
        let mut protected = victim
            .tasks
            .iter()
            .any(|&t| state.tasks[t].status == TaskStatus::Succeeded);
        for &t in &victim.tasks {
            let task = &state.tasks[t];
            match task.status {
                s if s.is_evictable() => {
                    if task.managed && task.preemptable && session.plugins.victim_allowed(state, t)
                    {
                        holding.push(t);
                    } else {
                        protected = true;
                    }
                }
                // Placed in this cycle: not a victim now.
                TaskStatus::Allocated | TaskStatus::Pipelined => protected = true,
                _ => {}
            }
        }
        if holding.is_empty() {
            continue;
        }
        let created = std::cmp::Reverse(victim.pod_group.creation_index);
        let queue_priority = state.queues[queue].queue.priority;
        let harm = |kind: u8, task_priority: i32, size: &Resources| -> HarmKey {
            (
                victim.priority,
                queue_priority,
                kind,
                task_priority,
                size.gpus(),
                size.get("cpu"),
                created,
            )
        };
        let candidate = |unit| Candidate {
            unit,
            queue,
            priority: victim.priority,
        };
        if victim.ready_count > victim.min_available() {
            for &t in &holding {
                let task = &state.tasks[t];
                let key = harm(0, task.priority, task.resreq());
                keyed.push((key, candidate(Unit::Spare(t))));
            }
        }
        if !protected {
            let mut size = Resources::new();
            for &t in &holding {
                size.add(state.tasks[t].resreq());
            }
            keyed.push((harm(1, victim.priority, &size), candidate(Unit::Gang(v))));
        }
    }
    keyed.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| unit_order(&a.1.unit, &b.1.unit)));
    keyed.into_iter().map(|(_, c)| c).collect()
}

fn unit_order(a: &Unit, b: &Unit) -> Ordering {
    let id = |u: &Unit| match u {
        Unit::Spare(t) => (0, *t),
        Unit::Gang(j) => (1, *j),
    };
    id(a).cmp(&id(b))
}

/// The tasks a unit evicts now (those of its gang still bound or running); none when its
/// gang got pods in this cycle (it is never a victim in the cycle it was placed).
fn unit_victims(session: &Session, unit: Unit) -> Vec<TaskId> {
    let state = &session.state;
    let job = match unit {
        Unit::Spare(t) => state.tasks[t].job,
        Unit::Gang(j) => Some(j),
    };
    if let Some(j) = job
        && state.jobs[j].tasks.iter().any(|&t| {
            matches!(
                state.tasks[t].status,
                TaskStatus::Allocated | TaskStatus::Pipelined
            )
        })
    {
        return Vec::new();
    }
    match unit {
        Unit::Spare(t) => {
            if state.tasks[t].status.is_evictable() {
                vec![t]
            } else {
                Vec::new()
            }
        }
        Unit::Gang(j) => state.jobs[j]
            .tasks
            .iter()
            .copied()
            .filter(|&t| state.tasks[t].status.is_evictable())
            .collect(),
    }
}

fn allowed(session: &Session, job: JobId, victims: &[TaskId], mode: Mode) -> bool {
    if victims.is_empty() {
        return true;
    }
    match mode {
        Mode::Preempt => session.plugins.preemptable(&session.state, job, victims),
        Mode::Reclaim => session.plugins.reclaimable(&session.state, job, victims),
    }
}

/// Some victim frees a node that one of the gang's pending pods may use at all.
fn useful(session: &Session, tasks: &[TaskId], victims: &[TaskId]) -> bool {
    let state = &session.state;
    let mut seen_keys = BTreeSet::new();
    let pending: Vec<TaskId> = tasks
        .iter()
        .copied()
        .filter(|&t| state.tasks[t].status == TaskStatus::Pending)
        .filter(|&t| seen_keys.insert(state.tasks[t].placement_key))
        .collect();
    victims.iter().any(|&v| {
        let Some(node) = state.tasks[v].node else {
            return false;
        };
        pending
            .iter()
            .any(|&t| session.plugins.predicate(state, t, node).is_ok())
    })
}

/// Pipelines the gang's pending tasks on future-idle resources (only on `nodes` when given),
/// until the gang is pipelined-ready. Returns whether it is.
fn place(
    session: &mut Session,
    statement: &mut Statement,
    job: JobId,
    tasks: &[TaskId],
    nodes: Option<&BTreeSet<NodeId>>,
) -> bool {
    let queue = session.state.jobs[job]
        .queue
        .expect("starving jobs have a queue");
    for &task in tasks {
        if pipelined_ready(session, job) {
            return true;
        }
        if session.state.tasks[task].status != TaskStatus::Pending {
            continue;
        }
        if !session.plugins.allocatable(&session.state, queue, task) {
            return false;
        }
        let best = match nodes {
            Some(set) => best_node(session, task, set.iter().copied()),
            None => best_node(session, task, 0..session.state.nodes.len()),
        };
        if let Some(node) = best {
            statement.pipeline(session, task, node);
        }
    }
    pipelined_ready(session, job)
}

/// The node whose future-idle resources the task fills best (least left over), by name on
/// ties; only nodes that pass the predicates.
fn best_node(
    session: &Session,
    task: TaskId,
    nodes: impl Iterator<Item = NodeId>,
) -> Option<NodeId> {
    let state = &session.state;
    let req = state.tasks[task].resreq();
    let mut best: Option<(f64, NodeId)> = None;
    for node in nodes {
        let n = &state.nodes[node];
        if n.future_pod_count() >= n.node.max_pods {
            continue;
        }
        let free = n.future_idle();
        if !req.fits_in(&free) {
            continue;
        }
        if session.plugins.predicate(state, task, node).is_err() {
            continue;
        }
        let left = free
            .minus(req)
            .restricted_to(req)
            .share_of(&n.node.allocatable);
        if best.is_none_or(|(b, _)| left < b) {
            best = Some((left, node));
        }
    }
    best.map(|(_, n)| n)
}

fn note(session: &mut Session, job: JobId, reason: String) {
    session.state.jobs[job].fit_errors.add_job_reason(reason);
}

/// Events for the gang that made room and for every gang that lost pods.
fn record(session: &mut Session, job: JobId, statement: &Statement, mode: Mode) {
    let state = &session.state;
    let victims: Vec<TaskId> = statement.evictions().collect();
    let key = state.jobs[job].key().clone();
    let mut victim_gangs: BTreeSet<JobId> = BTreeSet::new();
    for &v in &victims {
        if let Some(j) = state.tasks[v].job {
            victim_gangs.insert(j);
        }
    }
    let names: Vec<String> = victim_gangs
        .iter()
        .map(|&j| state.jobs[j].key().to_string())
        .collect();
    let mut events = Vec::new();
    let placed = statement.len();
    if state.jobs[job].shadow {
        // A pod without a PodGroup has no PodGroup to record on.
    } else if victims.is_empty() {
        events.push(Event {
            object: key.clone(),
            kind: "Normal",
            reason: "Pipelined".into(),
            message: format!("{placed} pods wait for resources being released"),
        });
    } else {
        events.push(Event {
            object: key.clone(),
            kind: "Normal",
            reason: if mode == Mode::Preempt {
                "Preempt".into()
            } else {
                "Reclaim".into()
            },
            message: format!(
                "{}: evicting {} pods of {} to place {placed} pods; they are bound once the victims are gone",
                mode.name(),
                victims.len(),
                names.join(", ")
            ),
        });
    }
    for &v in &victims {
        let Some(j) = state.tasks[v].job else {
            continue;
        };
        if state.jobs[j].shadow {
            continue;
        }
        events.push(Event {
            object: state.jobs[j].key().clone(),
            kind: "Warning",
            reason: "Evicted".into(),
            message: match mode {
                Mode::Preempt => format!(
                    "pod {} evicted by preempt for PodGroup {key} (priority {} > {})",
                    state.tasks[v].pod.key, state.jobs[job].priority, state.jobs[j].priority
                ),
                Mode::Reclaim => format!(
                    "pod {} evicted by reclaim for PodGroup {key}: queue {} holds more than its deserved share",
                    state.tasks[v].pod.key,
                    state.jobs[j]
                        .queue
                        .map_or("", |q| state.queues[q].queue.name.as_str())
                ),
            },
        });
    }
    session.plan.events.extend(events);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::SchedulerConf;
    use crate::framework::testing::{Cluster, res};
    use crate::model::resources::CPU;
    use crate::model::{ObjectKey, Pod, PodPhase};

    /// One 8-CPU node running a 4-CPU low-priority pod, and a pending 2-CPU high-priority
    /// pod (both without a PodGroup: gangs of one), under `actions`.
    fn high_beside_low(actions: &[&str]) -> Session {
        let mut low = Pod::new(ObjectKey::new("default", "low"), res(&[(CPU, 4_000)]));
        low.priority = Some(10);
        low.node_name = Some("n1".into());
        low.phase = PodPhase::Running;
        let mut high = Pod::new(ObjectKey::new("default", "high"), res(&[(CPU, 2_000)]));
        high.priority = Some(1_000);
        let conf = SchedulerConf::from_names(actions, &[&["priority", "gang", "predicates"]]);
        Cluster::new()
            .node("n1", &[(CPU, 8_000)])
            .pod_with(low)
            .pod_with(high)
            .session(&conf)
    }

    fn status_of(session: &Session, name: &str) -> TaskStatus {
        session
            .state
            .tasks
            .iter()
            .find(|t| t.pod.key.name == name)
            .map(|t| t.status)
            .expect("the pod is in the session")
    }

    /// Queues qa and qb; in qa a low-priority gang with a spare pod (2 running, minMember 1)
    /// and a high-priority gang; in qb a gang; all running on one node.
    fn two_queues_running() -> Session {
        use crate::model::{PodGroup, PreemptionPolicy, PriorityClass, Queue};
        let group = |name: &str, queue: &str, min: u32, class: &str| {
            let mut g = PodGroup::new(ObjectKey::new("default", name), min);
            g.queue = queue.into();
            g.priority_class_name = Some(class.into());
            g.status.phase = PodGroupPhase::Running;
            g
        };
        let gpu = [(CPU, 1_000)];
        let mut snapshot = Cluster::new()
            .node("n1", &[(CPU, 16_000)])
            .queue(Queue::new("qa"))
            .queue(Queue::new("qb"))
            .group_with(group("a-low", "qa", 1, "low"))
            .group_with(group("a-high", "qa", 2, "high"))
            .group_with(group("b", "qb", 1, "low"))
            .running_pod("a-low-0", Some("a-low"), "n1", &gpu)
            .running_pod("a-low-1", Some("a-low"), "n1", &gpu)
            .running_pod("a-high-0", Some("a-high"), "n1", &gpu)
            .running_pod("a-high-1", Some("a-high"), "n1", &gpu)
            .running_pod("b-0", Some("b"), "n1", &gpu)
            .build();
        for (name, value) in [("low", 10), ("high", 1_000)] {
            snapshot.priority_classes.push(PriorityClass {
                name: name.into(),
                value,
                global_default: false,
                preemption_policy: PreemptionPolicy::PreemptLowerPriority,
            });
        }
        let conf = SchedulerConf::from_names(
            &["enqueue", "allocate", "preempt", "reclaim"],
            &[&["priority", "gang", "predicates"]],
        );
        Session::open(&snapshot, &conf, crate::model::DEFAULT_SCHEDULER_NAME)
    }

    fn unit_names(session: &Session, units: &[Unit]) -> Vec<String> {
        let state = &session.state;
        units
            .iter()
            .map(|u| match *u {
                Unit::Spare(t) => format!("spare {}", state.tasks[t].pod.key.name),
                Unit::Gang(j) => format!("gang {}", state.jobs[j].key().name),
            })
            .collect()
    }

    #[test]
    fn each_preemptors_victims_are_the_shared_list_filtered_in_harm_order() {
        let session = two_queues_running();
        let all = all_candidates(&session);
        let queue = |name: &str| session.state.queue_index[name];
        let (qa, qb) = (queue("qa"), queue("qb"));
        // Preempt: strictly lower priority, same queue; a spare pod before its whole gang.
        let high = units_for(&all, (qa, 1_000), Mode::Preempt);
        assert_eq!(
            unit_names(&session, &high),
            ["spare a-low-0", "spare a-low-1", "gang a-low"]
        );
        // Equal priority never takes turns; nothing in qb is lower than its only gang.
        assert!(units_for(&all, (qa, 10), Mode::Preempt).is_empty());
        assert!(units_for(&all, (qb, 10), Mode::Preempt).is_empty());
        // Reclaim: every other queue's units, lower priority first.
        assert_eq!(
            unit_names(&session, &units_for(&all, (qb, 0), Mode::Reclaim)),
            [
                "spare a-low-0",
                "spare a-low-1",
                "gang a-low",
                "gang a-high"
            ]
        );
        assert_eq!(
            unit_names(&session, &units_for(&all, (qa, 0), Mode::Reclaim)),
            ["gang b"]
        );
    }

    #[test]
    fn what_victims_hold_counts_a_spare_pod_once_when_its_gang_is_listed_whole() {
        let session = two_queues_running();
        let all = all_candidates(&session);
        let qb = session.state.queue_index["qb"];
        let units = units_for(&all, (qb, 0), Mode::Reclaim);
        // a-low's two pods (listed as spares and whole) and a-high's two: 4 CPUs, not 6.
        assert_eq!(held_by(&session, &units).get(CPU), 4_000);
        // The spares alone count each pod once.
        assert_eq!(held_by(&session, &units[..2]).get(CPU), 2_000);
    }

    #[test]
    fn a_reclaimers_reach_from_the_per_queue_sums_is_what_its_own_list_holds() {
        let session = two_queues_running();
        let all = all_candidates(&session);
        let by_queue = HeldByQueue::of(&session, &all);
        for queue in ["qa", "qb"].map(|q| session.state.queue_index[q]) {
            let listed = held_by(&session, &units_for(&all, (queue, 0), Mode::Reclaim));
            assert_eq!(by_queue.others_than(queue), listed, "queue {queue}");
        }
        // qb reclaims qa's four pods (a spare and its gang counted once), qa qb's one.
        let qb = session.state.queue_index["qb"];
        assert_eq!(by_queue.others_than(qb).get(CPU), 4_000);
        assert_eq!(by_queue.total.get(CPU), 5_000);
    }

    #[test]
    fn preempt_without_allocate_pipelines_onto_idle_room_and_evicts_nobody() {
        let mut session = high_beside_low(&["enqueue", "preempt"]);
        run(&mut session, Mode::Preempt);
        assert!(
            session.plan.evictions.is_empty(),
            "{:?}",
            session.plan.evictions
        );
        assert_eq!(status_of(&session, "low"), TaskStatus::Running);
        assert_eq!(status_of(&session, "high"), TaskStatus::Pipelined);
    }

    #[test]
    fn after_allocate_the_idle_room_is_not_searched_again() {
        // allocate would have placed the pod on the idle room; preempt skips that search.
        let session = high_beside_low(&["enqueue", "allocate", "preempt"]);
        assert!(!idle_room_may_fit(&session, Mode::Preempt));
        let session = high_beside_low(&["enqueue", "preempt", "allocate"]);
        assert!(idle_room_may_fit(&session, Mode::Preempt));
    }
}
