//! Commit, then bind: the scheduler's side of the allocation ledger.
//!
//! A cycle's plan is proposed to the ledger before anything is bound. The ledger's state
//! machine (`phalanx-statestore`) re-checks every gang against every placement committed so
//! far — free capacity per node and resource, no pod placed twice, the proposer's shard epoch
//! — and accepts each gang whole or refuses it whole. Only accepted gangs are bound; a
//! refused gang stays pending and is tried again next cycle.
//!
//! Two implementations of [`PlacementLedger`]:
//! - [`LocalLedger`]: the ledger's state machine applied in process (one replica needs no
//!   consensus, but gets the same verification);
//! - [`RaftLedger`]: N replicas of the real replicated ledger (openraft, fsynced log and
//!   snapshot, tonic on loopback) started in this process, proposed to through the typed client.

pub mod conformance;
mod fault;
mod local;
mod proposal_split;
mod raft;
pub mod sharded;

pub use fault::{LedgerFault, ScheduledFault};
pub use local::LocalLedger;
pub use raft::RaftLedger;
pub(crate) use raft::{propose_through, read_through};

use std::sync::Arc;

use phalanx_statestore::ledger::ReplicaId;
use phalanx_statestore::ledger::checks::Violation as LedgerViolation;
use phalanx_statestore::ledger::command::{MAX_GANGS_PER_COMMAND, MAX_PODS_PER_COMMAND};
use phalanx_statestore::{
    GangDecision, GangPlacement as LedgerGang, LedgerCommand, LedgerResponse, LedgerState,
    PodPlacement, Refusal, ResourceVec,
};
use thiserror::Error;

use crate::framework::GangPlacement;
use crate::model::{Node, ObjectKey, Pod, Resources};

pub use phalanx_statestore::ledger::ReleaseReason;

/// The only shard until sharding is built; owned by replica 1 at epoch 1.
pub const SINGLE_SHARD: u32 = 0;
pub const FIRST_EPOCH: u64 = 1;
pub const FIRST_OWNER: u64 = 1;

#[derive(Debug, Error)]
pub enum LedgerError {
    /// The ledger's state machine refused a command; the typed reason (fencing is
    /// `Refusal::StaleEpoch`, see [`LedgerError::is_fenced`]).
    #[error("the ledger refused the command: {0}")]
    Refused(Refusal),
    /// The ledger answered with a response of another kind than the command gets.
    #[error("the ledger's answer does not fit the command: {0}")]
    Unexpected(String),
    /// The operation needs something this ledger does not have (a fault on the
    /// in-process ledger, a restart with no stopped replica).
    #[error("not possible on this ledger: {0}")]
    Unsupported(String),
    /// The shard's epoch cannot increase any more: taking it again would wrap.
    #[error("shard {shard}: epoch {current} is the last one; the shard cannot be taken again")]
    EpochExhausted { shard: u32, current: u64 },
    #[error("the ledger could not be reached: {0}")]
    Unavailable(String),
    /// The proposal may or may not have been committed (e.g. its leader stopped mid-way).
    #[error("the outcome of a proposal is unknown: {0}")]
    Ambiguous(String),
    #[error("starting the ledger replicas failed: {0}")]
    Start(String),
}

impl LedgerError {
    /// The ledger's typed refusal, when the error is one.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            Self::Refused(r) => Some(r),
            Self::Unexpected(_)
            | Self::Unsupported(_)
            | Self::EpochExhausted { .. }
            | Self::Unavailable(_)
            | Self::Ambiguous(_)
            | Self::Start(_) => None,
        }
    }

    /// Whether the proposer no longer owns the shard it wrote for (fencing, I4): its
    /// epoch is not the shard's, or the shard is not known at all. Such a writer stops at
    /// once and binds nothing.
    pub fn is_fenced(&self) -> bool {
        matches!(
            self.refusal(),
            Some(Refusal::StaleEpoch { .. } | Refusal::UnknownShard { .. })
        )
    }
}

/// The ledger's verdict on one proposed gang.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    Refused(String),
    /// The proposal's outcome was unknown and the ledger did not hold the gang when asked;
    /// the entry may still commit later (a live leader may apply it after the read). The
    /// caller keeps the gang unbound and asks again with [`held_by`] in later cycles.
    InDoubt(String),
}

/// Whether the ledger holds every pod of `gang` on the node it was proposed for.
pub fn held_by(state: &LedgerState, gang: &GangPlacement) -> bool {
    let key = gang.gang.to_string();
    gang.placements.iter().all(|p| {
        state
            .placements
            .get(&p.pod.to_string())
            .is_some_and(|placed| placed.node == p.node && placed.gang == key)
    })
}

/// The operations commit-then-bind needs. Implemented for every [`LedgerBackend`].
pub trait PlacementLedger {
    /// Registers the cluster's nodes and the pods that already hold nodes (placed by anyone),
    /// so the ledger's capacity view starts equal to the cluster's. Returns warnings for
    /// running pods the ledger refused (an over-committed input).
    fn load(&mut self, nodes: &[&Node], occupying: &[&Pod]) -> Result<Vec<String>, LedgerError>;
    /// Proposes gangs; one verdict per gang, in order.
    fn commit(&mut self, gangs: &[GangPlacement]) -> Result<Vec<Verdict>, LedgerError>;
    /// Records that these pods are bound in the cluster.
    fn mark_bound(&mut self, pods: &[ObjectKey]) -> Result<(), LedgerError>;
    /// Releases placements (pod finished, evicted, or its bind failed).
    fn release(&mut self, pods: &[ObjectKey], reason: ReleaseReason) -> Result<(), LedgerError>;
    /// The ledger's state (linearizable for the replicated ledger), for invariant checks.
    fn state(&mut self) -> Result<Arc<LedgerState>, LedgerError>;
    /// How many replicas hold the ledger.
    fn replicas(&self) -> usize;
    /// Injects a fault (replicated ledger only); returns what was done.
    fn inject(&mut self, fault: &LedgerFault) -> Result<String, LedgerError>;
    /// The replica that leads the ledger now (waiting a bounded time for an election);
    /// `None` for a ledger without replicas.
    fn leader(&mut self) -> Result<Option<ReplicaId>, LedgerError>;
    /// Raft entries proposed so far; `None` for a ledger without a log.
    fn entries_proposed(&self) -> Option<u64>;
    /// Proposes commands with explicit shards and epochs (see [`sharded`]); refusals come
    /// back as responses.
    fn propose_raw(
        &mut self,
        commands: Vec<LedgerCommand>,
    ) -> Result<Vec<LedgerResponse>, LedgerError>;
    /// [`Self::propose_raw`] for each list, as independent writers would propose them:
    /// their order in the ledger is not given, so the lists must not depend on each other
    /// (they write disjoint shards). One result per list, in order.
    fn propose_raw_each(
        &mut self,
        lists: Vec<Vec<LedgerCommand>>,
    ) -> Vec<Result<Vec<LedgerResponse>, LedgerError>>;
}

/// What a ledger implementation provides: proposing commands (in order, as few entries as
/// its limits allow) and reading its state. Everything else is built on these, once.
pub trait LedgerBackend {
    /// Proposes the commands in order; a command refused as a whole is an error.
    fn propose_all(
        &mut self,
        commands: Vec<LedgerCommand>,
    ) -> Result<Vec<LedgerResponse>, LedgerError>;
    fn read_state(&mut self) -> Result<Arc<LedgerState>, LedgerError>;
    fn replica_count(&self) -> usize;
    /// Proposes the commands in order and returns every response, refusals included (the
    /// sharded runtime needs the typed refusal: stale epoch, 2PC answers). The default
    /// turns a refusal into an error, as `propose_all` does.
    fn propose_raw(
        &mut self,
        commands: Vec<LedgerCommand>,
    ) -> Result<Vec<LedgerResponse>, LedgerError> {
        self.propose_all(commands)
    }
    /// Lists that do not depend on each other, proposed in any order (see
    /// [`PlacementLedger::propose_raw_each`]); the default proposes them one by one.
    fn propose_raw_each(
        &mut self,
        lists: Vec<Vec<LedgerCommand>>,
    ) -> Vec<Result<Vec<LedgerResponse>, LedgerError>> {
        lists
            .into_iter()
            .map(|commands| self.propose_raw(commands))
            .collect()
    }
    /// The shard and owner epoch this backend writes with (fencing, I4). The simulator's
    /// single owner keeps the default; `phalanx serve` writes with the epoch it took.
    fn lease(&self) -> (u32, u64) {
        (SINGLE_SHARD, FIRST_EPOCH)
    }
    fn leader_id(&mut self) -> Result<Option<ReplicaId>, LedgerError> {
        Ok(None)
    }
    /// Raft entries proposed so far; `None` for a ledger without a log.
    fn raft_entries(&self) -> Option<u64> {
        None
    }
    fn inject_fault(&mut self, fault: &LedgerFault) -> Result<String, LedgerError> {
        Err(LedgerError::Unsupported(format!(
            "fault {fault} needs the replicated ledger (--replicas 2 or more)"
        )))
    }
}

impl<T: LedgerBackend> PlacementLedger for T {
    fn load(&mut self, nodes: &[&Node], occupying: &[&Pod]) -> Result<Vec<String>, LedgerError> {
        let (commands, gangs) = load_commands(nodes, occupying);
        self.propose_all(commands)?;
        let outcomes = verdicts(self.propose_all(place_gangs(&gangs))?)?;
        let mut warnings = Vec::new();
        let mut bound = Vec::new();
        for (g, v) in gangs.iter().zip(outcomes) {
            match v {
                Verdict::Accepted => bound.push(g.gang.clone()),
                Verdict::Refused(r) | Verdict::InDoubt(r) => {
                    warnings.push(format!("pod {} already running: {r}", g.gang))
                }
            }
        }
        self.propose_all(pod_commands(&bound, |pods| LedgerCommand::MarkBound {
            shard: SINGLE_SHARD,
            epoch: FIRST_EPOCH,
            pods,
        }))?;
        Ok(warnings)
    }

    fn commit(&mut self, gangs: &[GangPlacement]) -> Result<Vec<Verdict>, LedgerError> {
        let gangs: Vec<LedgerGang> = gangs.iter().map(to_ledger_gang).collect();
        match self.propose_all(place_gangs_at(self.lease(), &gangs)) {
            Ok(responses) => verdicts(responses),
            // The leader went away mid-proposal. A linearizable read is served by a leader
            // that has committed an entry of its own term, so every entry of the old term
            // is by then committed or can never be: the ledger's state answers for sure.
            Err(LedgerError::Ambiguous(why)) => {
                let state = self.read_state()?;
                Ok(gangs.iter().map(|g| resolve(&state, g, &why)).collect())
            }
            Err(e) => Err(e),
        }
    }

    fn mark_bound(&mut self, pods: &[ObjectKey]) -> Result<(), LedgerError> {
        let keys: Vec<String> = pods.iter().map(ToString::to_string).collect();
        let (shard, epoch) = self.lease();
        propose_idempotent(
            self,
            pod_commands(&keys, |pods| LedgerCommand::MarkBound {
                shard,
                epoch,
                pods,
            }),
        )
    }

    fn release(&mut self, pods: &[ObjectKey], reason: ReleaseReason) -> Result<(), LedgerError> {
        let keys: Vec<String> = pods.iter().map(ToString::to_string).collect();
        let (shard, epoch) = self.lease();
        propose_idempotent(
            self,
            pod_commands(&keys, |pods| LedgerCommand::Release {
                shard,
                epoch,
                pods,
                reason,
            }),
        )
    }

    fn state(&mut self) -> Result<Arc<LedgerState>, LedgerError> {
        self.read_state()
    }

    fn replicas(&self) -> usize {
        self.replica_count()
    }

    fn inject(&mut self, fault: &LedgerFault) -> Result<String, LedgerError> {
        self.inject_fault(fault)
    }

    fn leader(&mut self) -> Result<Option<ReplicaId>, LedgerError> {
        self.leader_id()
    }

    fn entries_proposed(&self) -> Option<u64> {
        self.raft_entries()
    }

    fn propose_raw(
        &mut self,
        commands: Vec<LedgerCommand>,
    ) -> Result<Vec<LedgerResponse>, LedgerError> {
        LedgerBackend::propose_raw(self, commands)
    }

    fn propose_raw_each(
        &mut self,
        lists: Vec<Vec<LedgerCommand>>,
    ) -> Vec<Result<Vec<LedgerResponse>, LedgerError>> {
        LedgerBackend::propose_raw_each(self, lists)
    }
}

/// Commands that are no-ops when applied twice (`MarkBound` of a bound pod, `Release` of a
/// released one) are simply proposed again when their outcome is unknown.
fn propose_idempotent<T: LedgerBackend + ?Sized>(
    ledger: &mut T,
    commands: Vec<LedgerCommand>,
) -> Result<(), LedgerError> {
    match ledger.propose_all(commands.clone()) {
        Err(LedgerError::Ambiguous(_)) => ledger.propose_all(commands).map(|_| ()),
        other => other.map(|_| ()),
    }
}

/// Whether the ledger holds every pod of `gang` where it was proposed.
pub(crate) fn resolve(state: &LedgerState, gang: &LedgerGang, why: &str) -> Verdict {
    let held = gang.pods.iter().all(|p| {
        state
            .placements
            .get(&p.pod)
            .is_some_and(|placed| placed.node == p.node && placed.gang == gang.gang)
    });
    if held {
        Verdict::Accepted
    } else {
        Verdict::InDoubt(format!("outcome unknown ({why}) and not in the ledger yet"))
    }
}

/// `gangs` split within the per-command limit.
pub(crate) fn chunks_of_gangs(gangs: &[LedgerGang]) -> Vec<Vec<LedgerGang>> {
    chunks(gangs, MAX_GANGS_PER_COMMAND)
}

/// `PlaceGangs` commands for `gangs`, within the per-command limit.
fn place_gangs(gangs: &[LedgerGang]) -> Vec<LedgerCommand> {
    place_gangs_at((SINGLE_SHARD, FIRST_EPOCH), gangs)
}

/// `PlaceGangs` commands for `gangs` written at `(shard, epoch)`.
pub(crate) fn place_gangs_at(
    (shard, epoch): (u32, u64),
    gangs: &[LedgerGang],
) -> Vec<LedgerCommand> {
    chunks(gangs, MAX_GANGS_PER_COMMAND)
        .into_iter()
        .map(|gangs| LedgerCommand::PlaceGangs {
            shard,
            epoch,
            gangs,
        })
        .collect()
}

/// Commands naming pods, within the per-command limit.
pub(crate) fn pod_commands(
    pods: &[String],
    make: impl Fn(Vec<String>) -> LedgerCommand,
) -> Vec<LedgerCommand> {
    chunks(pods, MAX_PODS_PER_COMMAND)
        .into_iter()
        .map(make)
        .collect()
}

/// One verdict per gang from `PlaceGangs` responses.
pub(crate) fn verdicts(responses: Vec<LedgerResponse>) -> Result<Vec<Verdict>, LedgerError> {
    let mut out = Vec::new();
    for r in responses {
        match r {
            LedgerResponse::Gangs(outcomes) => {
                out.extend(outcomes.into_iter().map(|o| match o.decision {
                    GangDecision::Accepted => Verdict::Accepted,
                    GangDecision::Refused(r) => Verdict::Refused(r.to_string()),
                }))
            }
            LedgerResponse::Refused(r) => return Err(LedgerError::Refused(r)),
            other @ (LedgerResponse::Applied
            | LedgerResponse::Pods { .. }
            | LedgerResponse::Expired { .. }) => {
                return Err(LedgerError::Unexpected(format!(
                    "PlaceGangs answered with {other:?}"
                )));
            }
        }
    }
    Ok(out)
}

pub(crate) fn resource_vec(r: &Resources) -> ResourceVec {
    ResourceVec::from_pairs(r.iter().map(|(n, v)| (n.as_str(), v)))
}

pub(crate) fn to_ledger_gang(g: &GangPlacement) -> LedgerGang {
    LedgerGang {
        gang: g.gang.to_string(),
        pods: g
            .placements
            .iter()
            .map(|p| PodPlacement {
                pod: p.pod.to_string(),
                node: p.node.clone(),
                resources: resource_vec(&p.resources),
            })
            .collect(),
    }
}

/// The commands that bring an empty ledger to the cluster's state: nodes, the single shard's
/// owner, then every pod already holding a node as a one-pod gang, marked bound.
pub(crate) fn load_commands(
    nodes: &[&Node],
    occupying: &[&Pod],
) -> (Vec<LedgerCommand>, Vec<LedgerGang>) {
    let mut commands: Vec<LedgerCommand> = nodes
        .iter()
        .map(|n| LedgerCommand::UpsertNode {
            node: n.name.clone(),
            allocatable: resource_vec(&n.allocatable),
            shard: SINGLE_SHARD,
        })
        .collect();
    commands.push(LedgerCommand::AssignShard {
        shard: SINGLE_SHARD,
        owner: FIRST_OWNER,
        epoch: FIRST_EPOCH,
        proposer: None,
    });
    let gangs = occupying
        .iter()
        .filter_map(|p| {
            let node = p.node_name.as_ref()?;
            Some(LedgerGang {
                gang: p.key.to_string(),
                pods: vec![PodPlacement {
                    pod: p.key.to_string(),
                    node: node.clone(),
                    resources: resource_vec(&p.requests),
                }],
            })
        })
        .collect();
    (commands, gangs)
}

/// The ledger's own invariant checks (I1 on committed usage, the usage index, no orphan
/// reservation), rendered.
pub fn check_ledger(state: &LedgerState) -> Vec<String> {
    phalanx_statestore::ledger::checks::check_all(state)
        .into_iter()
        .map(|v: LedgerViolation| v.to_string())
        .collect()
}

/// The ledger for `replicas` scheduler replicas: the state machine in process for one, the
/// replicated ledger on loopback for more.
pub fn start_ledger(replicas: usize) -> Result<Box<dyn PlacementLedger>, LedgerError> {
    match replicas {
        0 => Err(LedgerError::Start("at least one replica is needed".into())),
        1 => Ok(Box::new(LocalLedger::new())),
        n => Ok(Box::new(RaftLedger::start(n)?)),
    }
}

/// Splits `items` into chunks of at most `size`.
pub(crate) fn chunks<T: Clone>(items: &[T], size: usize) -> Vec<Vec<T>> {
    items.chunks(size.max(1)).map(<[T]>::to_vec).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Placement;
    use crate::model::Resources;

    /// A ledger whose next proposal "loses its leader": it is applied (or not) and then
    /// reported as of unknown outcome.
    struct FlakyLedger {
        inner: LocalLedger,
        apply_before_failing: Option<bool>,
    }

    impl LedgerBackend for FlakyLedger {
        fn propose_all(
            &mut self,
            commands: Vec<LedgerCommand>,
        ) -> Result<Vec<LedgerResponse>, LedgerError> {
            match self.apply_before_failing.take() {
                Some(applied) => {
                    if applied {
                        self.inner.propose_all(commands)?;
                    }
                    Err(LedgerError::Ambiguous("raft stopped".into()))
                }
                None => self.inner.propose_all(commands),
            }
        }
        fn read_state(&mut self) -> Result<Arc<LedgerState>, LedgerError> {
            self.inner.read_state()
        }
        fn replica_count(&self) -> usize {
            3
        }
    }

    fn gang() -> GangPlacement {
        GangPlacement {
            gang: ObjectKey::new("default", "g"),
            placements: vec![Placement {
                pod: ObjectKey::new("default", "g-0"),
                node: "n1".into(),
                resources: Resources::from_pairs([("nvidia.com/gpu", 1)]),
            }],
        }
    }

    fn ledger(apply_before_failing: bool) -> FlakyLedger {
        let mut l = FlakyLedger {
            inner: LocalLedger::new(),
            apply_before_failing: None,
        };
        let node = Node::new("n1", Resources::from_pairs([("nvidia.com/gpu", 1)]));
        l.load(&[&node], &[]).expect("loads");
        l.apply_before_failing = Some(apply_before_failing);
        l
    }

    #[test]
    fn a_plan_of_unknown_outcome_that_committed_is_bound() {
        let mut l = ledger(true);
        assert_eq!(
            l.commit(&[gang()]).expect("resolved"),
            vec![Verdict::Accepted]
        );
    }

    #[test]
    fn a_plan_of_unknown_outcome_not_in_the_ledger_is_in_doubt_until_it_appears() {
        let mut l = ledger(false);
        let verdicts = l.commit(&[gang()]).expect("resolved");
        assert!(
            matches!(&verdicts[..], [Verdict::InDoubt(why)] if why.contains("not in the ledger")),
            "{verdicts:?}"
        );
        assert!(!held_by(&l.state().expect("readable"), &gang()));
        // A later proposal of the same gang is accepted and then held.
        assert_eq!(
            l.commit(&[gang()]).expect("commits"),
            vec![Verdict::Accepted]
        );
        assert!(held_by(&l.state().expect("readable"), &gang()));
    }
}
