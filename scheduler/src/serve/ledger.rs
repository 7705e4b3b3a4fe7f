//! The ledger as one `phalanx serve` replica sees it: the replicated ledger reached through
//! the typed client, written at the epochs of the shards this replica owns; and the
//! reconciliation that keeps the ledger equal to the cluster for those shards (pods bound
//! by anyone, placements whose pods finished, and placements committed but not bound yet).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use phalanx_statestore::ledger::{Epoch, PlacementState, ShardId};
use phalanx_statestore::{GangPlacement as LedgerGang, PodPlacement};
use phalanx_statestore::{
    LedgerClient, LedgerCommand, LedgerMirror, LedgerResponse, LedgerState, Refusal,
};
use tokio::runtime::Handle;

use super::binds::BindRequest;
use crate::cluster::ClusterSnapshot;
use crate::framework::GangPlacement;
use crate::ledger::sharded::{
    Fence, command_sizes, gang_verdicts, mark_bound_at, place_at, release_at,
};
use crate::ledger::{
    LedgerBackend, LedgerError, ReleaseReason, Verdict, place_gangs_at, pod_commands,
    propose_through, read_through, resolve, resource_vec, to_ledger_gang, verdicts,
};
use crate::model::ObjectKey;

/// The replicated ledger through its client, at `(shard, epoch)`. Reads go through a
/// mirror: a reconciliation transfers what changed since the previous one, not the
/// whole ledger.
#[derive(Debug)]
pub struct ServeLedger {
    handle: Handle,
    client: Arc<LedgerClient>,
    mirror: LedgerMirror,
    pub shard: u32,
    pub epoch: u64,
    /// Raft entries this replica proposed.
    entries: u64,
}

impl ServeLedger {
    pub fn new(handle: Handle, client: Arc<LedgerClient>, shard: u32, epoch: u64) -> Self {
        Self {
            handle,
            client,
            mirror: LedgerMirror::new(),
            shard,
            epoch,
            entries: 0,
        }
    }

    /// This ledger, writing at `fence` (commits, marks and releases of that shard).
    pub fn at(&mut self, fence: crate::ledger::sharded::Fence) -> &mut Self {
        self.shard = fence.shard;
        self.epoch = fence.epoch;
        self
    }
}

impl LedgerBackend for ServeLedger {
    fn propose_all(
        &mut self,
        commands: Vec<LedgerCommand>,
    ) -> Result<Vec<LedgerResponse>, LedgerError> {
        propose_through(
            &self.handle,
            &self.client,
            commands,
            true,
            &mut self.entries,
        )
    }

    fn read_state(&mut self) -> Result<Arc<LedgerState>, LedgerError> {
        read_through(&self.handle, &self.client, &mut self.mirror)
    }

    fn propose_raw(
        &mut self,
        commands: Vec<LedgerCommand>,
    ) -> Result<Vec<LedgerResponse>, LedgerError> {
        propose_through(
            &self.handle,
            &self.client,
            commands,
            false,
            &mut self.entries,
        )
    }

    fn replica_count(&self) -> usize {
        0
    }

    fn raft_entries(&self) -> Option<u64> {
        Some(self.entries)
    }

    fn lease(&self) -> (u32, u64) {
        (self.shard, self.epoch)
    }
}

/// The epoch that follows `current` for `shard`. The ledger refuses `u64::MAX` (it would
/// leave no room for the next owner), so the last epoch a shard can be taken at is
/// `u64::MAX - 1`; past it the shard is exhausted, an error, never a wrap to 0.
pub fn next_epoch(shard: u32, current: u64) -> Result<u64, LedgerError> {
    current
        .checked_add(1)
        .filter(|e| *e < u64::MAX)
        .ok_or(LedgerError::EpochExhausted { shard, current })
}

/// What [`commit_fenced`] found: one verdict per gang, the fenced refusals, and the
/// answers to the commands that rode behind the gangs (`None`: unknown).
#[derive(Debug)]
pub struct Committed {
    pub verdicts: Vec<Verdict>,
    pub fenced: Vec<Refusal>,
    pub riders: Option<Vec<LedgerResponse>>,
}

/// Commits gangs for several owned shards in one proposal (group commit): each shard's
/// `PlaceGangs` at its fence, the ledger judging each gang alone, then `riders` (the
/// period's transaction begins). Returns one verdict per gang in the order given, and the
/// fenced refusals (a shard taken by another replica: its gangs are refused, the other
/// shards' are judged as usual). An unknown outcome is resolved from the ledger's state,
/// as [`crate::ledger::PlacementLedger::commit`] does; the riders' answers stay unknown.
pub fn commit_fenced(
    ledger: &mut ServeLedger,
    batches: &[(Fence, Vec<GangPlacement>)],
    riders: Vec<LedgerCommand>,
) -> Result<Committed, LedgerError> {
    let mut cmds = Vec::new();
    for (fence, gangs) in batches {
        cmds.extend(place_at(*fence, gangs));
    }
    let sizes = command_sizes(&cmds);
    let placed = cmds.len();
    cmds.extend(riders);
    match ledger.propose_raw(cmds) {
        Ok(mut responses) if responses.len() >= placed => {
            let riders = responses.split_off(placed);
            Ok(Committed {
                verdicts: gang_verdicts(&responses, &sizes),
                fenced: fenced_refusals(&responses),
                riders: Some(riders),
            })
        }
        Ok(_) => Err(LedgerError::Unexpected(
            "fewer answers than commands in a batch".into(),
        )),
        Err(LedgerError::Ambiguous(why)) => {
            let state = ledger.read_state()?;
            let verdicts = batches
                .iter()
                .flat_map(|(_, gangs)| gangs)
                .map(|g| resolve(&state, &to_ledger_gang(g), &why))
                .collect();
            Ok(Committed {
                verdicts,
                fenced: Vec::new(),
                riders: None,
            })
        }
        Err(e) => Err(e),
    }
}

/// Records binds in one proposal (group commit): the pods bound, marked at their shard's
/// fence, and the pods whose bind failed, released. Proposed again when the outcome is
/// unknown (both are no-ops the second time). Returns the refusals, each with its shard.
pub fn record_binds(
    ledger: &mut ServeLedger,
    bound: &BTreeMap<Fence, Vec<ObjectKey>>,
    failed: &BTreeMap<Fence, Vec<ObjectKey>>,
) -> Result<Vec<(ShardId, Refusal)>, LedgerError> {
    let mut cmds = Vec::new();
    let mut shards = Vec::new();
    for (fence, pods) in bound {
        let marks = mark_bound_at(*fence, pods);
        shards.extend(std::iter::repeat_n(fence.shard, marks.len()));
        cmds.extend(marks);
    }
    for (fence, pods) in failed {
        let releases = release_at(*fence, pods, ReleaseReason::BindFailed);
        shards.extend(std::iter::repeat_n(fence.shard, releases.len()));
        cmds.extend(releases);
    }
    if cmds.is_empty() {
        return Ok(Vec::new());
    }
    let responses = match ledger.propose_raw(cmds.clone()) {
        Err(LedgerError::Ambiguous(_)) => ledger.propose_raw(cmds)?,
        other => other?,
    };
    Ok(shards
        .into_iter()
        .zip(responses)
        .filter_map(|(shard, r)| r.refusal().cloned().map(|r| (shard, r)))
        .collect())
}

/// The refusals that say the writer no longer owns a shard (fencing, I4).
fn fenced_refusals(responses: &[LedgerResponse]) -> Vec<Refusal> {
    responses
        .iter()
        .filter_map(LedgerResponse::refusal)
        .filter(|r| matches!(r, Refusal::StaleEpoch { .. } | Refusal::UnknownShard { .. }))
        .cloned()
        .collect()
}

/// What one reconciliation did.
#[derive(Debug, Default)]
pub struct Reconciled {
    /// Placements committed but not bound whose pods are pending (after a failover or a
    /// lost answer): for the bind pool, each at its shard's fence. Their ends are recorded
    /// as the cycle's own binds are (MarkBound, or release if the bind failed).
    pub to_bind: Vec<BindRequest>,
    pub released: usize,
    /// Pods holding nodes that the ledger did not know (other schedulers', or bound before).
    pub accounted: usize,
    pub warnings: Vec<String>,
}

/// One owned shard's writes of a reconciliation.
#[derive(Default)]
struct ShardWrites {
    release_finished: Vec<String>,
    release_failed: Vec<String>,
    mark: Vec<String>,
    account: Vec<LedgerGang>,
}

/// Brings the ledger in line with the cluster for the shards this replica owns (`owned`:
/// shard -> epoch, as the ledger said this period), and says which placements to bind.
/// Only placements made by an owned shard are touched, each written at its shard's epoch,
/// so a placement committed by the previous owner of a shard is bound by whoever owns the
/// shard next:
/// - a placement whose pod is gone (`gone`: the API server says 404) or finished, or is
///   bound elsewhere, is released;
/// - a placement whose pod is bound there is marked bound;
/// - a placement whose pod (ours) is pending is returned to bind (`to_bind`);
/// - a pod that holds a node of an owned shard's pool without a placement is entered as a
///   bound one-pod gang.
///
/// A pod in `in_flight` (its bind queued or running in the bind pool, or ended and not yet
/// recorded) is left alone: its bind's end is recorded when it is collected, and binding
/// it again here would be a second bind of one pod.
///
/// Nodes are the leader's to register and remove (`leader.rs`).
pub fn reconcile<L: LedgerBackend>(
    ledger: &mut L,
    gone: &dyn Fn(&ObjectKey) -> bool,
    snapshot: &ClusterSnapshot,
    scheduler_name: &str,
    owned: &BTreeMap<ShardId, Epoch>,
    in_flight: &HashMap<ObjectKey, (Fence, String)>,
) -> Result<Reconciled, LedgerError> {
    let mut out = Reconciled::default();
    let state = ledger.read_state()?;
    let mut writes: BTreeMap<ShardId, ShardWrites> = BTreeMap::new();
    let pods: HashMap<String, &crate::model::Pod> = snapshot
        .pods
        .iter()
        .map(|p| (p.key.to_string(), p.as_ref()))
        .collect();
    let flying =
        |key: &str| !in_flight.is_empty() && in_flight.contains_key(&ObjectKey::parse(key));
    for (key, placement) in &state.placements {
        if !owned.contains_key(&placement.shard)
            || matches!(placement.state, PlacementState::Reserved { .. })
            || flying(key)
        {
            continue;
        }
        let w = writes.entry(placement.shard).or_default();
        let Some(pod) = pods.get(key) else {
            // Absent from this replica's cache: gone, or created so recently that the cache
            // has not seen it (a new owner's cache may lag the old owner's). Only the API
            // server's 404 releases the placement; until then it keeps its capacity.
            if gone(&ObjectKey::parse(key)) {
                w.release_finished.push(key.clone());
            }
            continue;
        };
        if pod.is_terminated() {
            w.release_finished.push(key.clone());
            continue;
        }
        match &pod.node_name {
            Some(node) if *node == placement.node => {
                if placement.state != PlacementState::Bound {
                    w.mark.push(key.clone());
                }
            }
            Some(_) => w.release_failed.push(key.clone()),
            None if pod.scheduler_name == scheduler_name => {
                out.to_bind.push(BindRequest {
                    fence: Fence {
                        shard: placement.shard,
                        epoch: owned[&placement.shard],
                    },
                    gang: ObjectKey::parse(&placement.gang),
                    pod: pod.key.clone(),
                    node: placement.node.clone(),
                });
            }
            None => w.release_failed.push(key.clone()),
        }
    }
    // Pods holding nodes that the ledger does not know: bound before phalanx started, or by
    // another scheduler. They are accounted as bound one-pod gangs by the owner of the
    // node's pool.
    for p in snapshot.pods.iter().filter(|p| p.occupies_node()) {
        if in_flight.contains_key(&p.key) {
            continue;
        }
        let key = p.key.to_string();
        let released = writes.values().any(|w| w.release_failed.contains(&key));
        if state.placements.contains_key(&key) && !released {
            continue;
        }
        let Some(node) = p.node_name.clone() else {
            continue;
        };
        // A pod on a node the ledger does not know (yet) cannot be placed there.
        let Some(shard) = state.nodes.get(&node).map(|n| n.shard) else {
            continue;
        };
        if owned.contains_key(&shard) {
            writes.entry(shard).or_default().account.push(LedgerGang {
                gang: key.clone(),
                pods: vec![PodPlacement {
                    pod: key,
                    node,
                    resources: resource_vec(&p.requests),
                }],
            });
        }
    }
    let writes: Vec<((ShardId, Epoch), ShardWrites)> = writes
        .into_iter()
        .map(|(shard, w)| ((shard, owned[&shard]), w))
        .collect();
    record_reconciled(ledger, &writes, &mut out)?;
    for (fence, w) in writes {
        account_shard(ledger, fence, w.account, &mut out)?;
    }
    Ok(out)
}

/// Proposes every owned shard's releases and marks in one proposal (group commit), each at
/// its shard's epoch; a refusal is an error, as it was for each alone.
fn record_reconciled<L: LedgerBackend>(
    ledger: &mut L,
    writes: &[((ShardId, Epoch), ShardWrites)],
    out: &mut Reconciled,
) -> Result<(), LedgerError> {
    let mut cmds = Vec::new();
    for ((shard, epoch), w) in writes {
        let (shard, epoch) = (*shard, *epoch);
        out.released += w.release_finished.len() + w.release_failed.len();
        let lists = [
            (&w.release_finished, Some(ReleaseReason::Finished)),
            (&w.release_failed, Some(ReleaseReason::BindFailed)),
            (&w.mark, None),
        ];
        for (pods, reason) in lists {
            cmds.extend(pod_commands(pods, |pods| match reason {
                Some(reason) => LedgerCommand::Release {
                    shard,
                    epoch,
                    pods,
                    reason,
                },
                None => LedgerCommand::MarkBound { shard, epoch, pods },
            }));
        }
    }
    if cmds.is_empty() {
        return Ok(());
    }
    ledger.propose_all(cmds).map(|_| ())
}

/// Enters one owned shard's pods that hold nodes without a placement as bound one-pod
/// gangs, at its epoch.
fn account_shard<L: LedgerBackend>(
    ledger: &mut L,
    (shard, epoch): (ShardId, Epoch),
    account: Vec<LedgerGang>,
    out: &mut Reconciled,
) -> Result<(), LedgerError> {
    if account.is_empty() {
        return Ok(());
    }
    let outcomes = verdicts(ledger.propose_all(place_gangs_at((shard, epoch), &account))?)?;
    let mut accounted = Vec::new();
    for (g, v) in account.iter().zip(outcomes) {
        match v {
            Verdict::Accepted => accounted.push(g.gang.clone()),
            Verdict::Refused(r) | Verdict::InDoubt(r) => out.warnings.push(format!(
                "pod {} holds a node but the ledger refused it: {r}",
                g.gang
            )),
        }
    }
    out.accounted += accounted.len();
    let marks = pod_commands(&accounted, |pods| LedgerCommand::MarkBound {
        shard,
        epoch,
        pods,
    });
    if marks.is_empty() {
        return Ok(());
    }
    ledger.propose_all(marks).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::{GangPlacement, Placement};
    use crate::ledger::{LocalLedger, PlacementLedger};
    use crate::model::{Node, Resources};
    use phalanx_statestore::Refusal;

    /// The in-process state machine written at a chosen epoch, as a serve replica writes.
    struct Leased {
        inner: LocalLedger,
        epoch: u64,
    }

    impl LedgerBackend for Leased {
        fn propose_all(
            &mut self,
            commands: Vec<LedgerCommand>,
        ) -> Result<Vec<LedgerResponse>, LedgerError> {
            self.inner.propose_all(commands)
        }
        fn read_state(&mut self) -> Result<Arc<LedgerState>, LedgerError> {
            self.inner.read_state()
        }
        fn replica_count(&self) -> usize {
            1
        }
        fn lease(&self) -> (u32, u64) {
            (0, self.epoch)
        }
    }

    fn gang(pod: &str) -> GangPlacement {
        GangPlacement {
            gang: ObjectKey::new("default", pod),
            placements: vec![Placement {
                pod: ObjectKey::new("default", pod),
                node: "n1".into(),
                resources: Resources::from_pairs([("nvidia.com/gpu", 1)]),
            }],
        }
    }

    #[test]
    fn a_deposed_owner_is_refused_as_fenced_and_the_new_owner_commits() {
        let mut old = Leased {
            inner: LocalLedger::new(),
            epoch: 1,
        };
        let node = Node::new("n1", Resources::from_pairs([("nvidia.com/gpu", 2)]));
        old.load(&[&node], &[]).expect("loads at epoch 1");
        assert_eq!(
            old.commit(&[gang("a")]).expect("commits"),
            vec![Verdict::Accepted]
        );
        // Another replica takes the shard at epoch 2.
        old.propose_all(vec![LedgerCommand::AssignShard {
            shard: 0,
            owner: 2,
            epoch: 2,
            proposer: None,
        }])
        .expect("reassigned");
        let refused = old.commit(&[gang("b")]).expect_err("stale epoch");
        assert!(refused.is_fenced(), "{refused}");
        assert_eq!(
            refused.refusal(),
            Some(&Refusal::StaleEpoch {
                shard: 0,
                proposed: 1,
                current: 2
            })
        );
        // What an operator reads stays as clear as before.
        assert_eq!(
            refused.to_string(),
            "the ledger refused the command: shard 0: stale epoch 1, current is 2"
        );
        assert!(
            old.mark_bound(&[ObjectKey::new("default", "a")])
                .expect_err("stale epoch")
                .is_fenced()
        );
        let mut new = Leased {
            inner: std::mem::take(&mut old.inner),
            epoch: 2,
        };
        assert_eq!(
            new.commit(&[gang("b")]).expect("commits"),
            vec![Verdict::Accepted]
        );
        new.mark_bound(&[ObjectKey::new("default", "a")])
            .expect("the new owner marks the old owner's placement bound");
    }

    /// Regression: `current + 1` wrapped (an `AssignShard{0, 99, u64::MAX}` in the ledger
    /// made serve compute epoch 0 for ever).
    #[test]
    fn an_exhausted_epoch_is_an_error_never_a_wrap() {
        assert_eq!(next_epoch(0, 0).expect("room"), 1);
        assert_eq!(next_epoch(0, u64::MAX - 2).expect("room"), u64::MAX - 1);
        for current in [u64::MAX - 1, u64::MAX] {
            let e = next_epoch(3, current).expect_err("exhausted");
            assert!(
                matches!(e, LedgerError::EpochExhausted { shard: 3, current: c } if c == current),
                "{e}"
            );
            assert!(e.to_string().contains("shard 3"), "{e}");
        }
    }
}
