//! The ledger as one `phalanx serve` replica sees it: the replicated ledger reached through
//! the typed client, written at the shard epoch this replica owns; and the reconciliation
//! that keeps the ledger equal to the cluster (nodes, pods bound by anyone, placements whose
//! pods finished, and placements committed but not bound yet).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use phalanx_statestore::ledger::PlacementState;
use phalanx_statestore::{GangPlacement as LedgerGang, PodPlacement};
use phalanx_statestore::{LedgerClient, LedgerCommand, LedgerMirror, LedgerResponse, LedgerState};
use tokio::runtime::Handle;

use crate::cluster::kube::KubeCluster;
use crate::cluster::{Cluster, ClusterSnapshot};
use crate::ledger::{
    LedgerBackend, LedgerError, ReleaseReason, Verdict, place_gangs_at, pod_commands,
    propose_through, read_through, resource_vec, verdicts,
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
}

impl ServeLedger {
    pub fn new(handle: Handle, client: Arc<LedgerClient>, shard: u32, epoch: u64) -> Self {
        Self {
            handle,
            client,
            mirror: LedgerMirror::new(),
            shard,
            epoch,
        }
    }
}

impl LedgerBackend for ServeLedger {
    fn propose_all(
        &mut self,
        commands: Vec<LedgerCommand>,
    ) -> Result<Vec<LedgerResponse>, LedgerError> {
        propose_through(&self.handle, &self.client, commands, true)
    }

    fn read_state(&mut self) -> Result<LedgerState, LedgerError> {
        read_through(&self.handle, &self.client, &mut self.mirror)
    }

    fn replica_count(&self) -> usize {
        0
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

/// What one reconciliation did.
#[derive(Debug, Default)]
pub struct Reconciled {
    pub nodes_upserted: usize,
    /// Nodes deleted from the cluster and dropped from the ledger.
    pub nodes_removed: usize,
    /// Placements committed but not bound that were bound now (after a failover or a lost
    /// answer).
    pub bound: Vec<ObjectKey>,
    pub released: usize,
    /// Pods holding nodes that the ledger did not know (other schedulers', or bound before).
    pub accounted: usize,
    pub warnings: Vec<String>,
}

/// Brings the ledger in line with the cluster, then binds what the ledger holds for pods
/// that are still pending:
/// - nodes: registered (or their allocatable updated) in `shard`;
/// - a placement whose pod is gone (the API server says 404) or finished, or is bound
///   elsewhere, is released;
/// - a placement whose pod is bound there is marked bound;
/// - a placement whose pod (ours) is pending is bound now; if that fails it is released;
/// - a pod that holds a node without a placement is entered as a bound one-pod gang.
pub fn reconcile(
    ledger: &mut ServeLedger,
    cluster: &mut KubeCluster,
    snapshot: &ClusterSnapshot,
    scheduler_name: &str,
) -> Result<Reconciled, LedgerError> {
    let mut out = Reconciled::default();
    let state = ledger.read_state()?;
    let (shard, epoch) = ledger.lease();

    let nodes: Vec<LedgerCommand> = snapshot
        .nodes
        .iter()
        .filter_map(|n| {
            let alloc = resource_vec(&n.allocatable);
            let known = state.nodes.get(&n.name);
            (known.map(|k| (&k.allocatable, k.shard)) != Some((&alloc, shard))).then(|| {
                LedgerCommand::UpsertNode {
                    node: n.name.clone(),
                    allocatable: alloc,
                    shard,
                }
            })
        })
        .collect();
    out.nodes_upserted = nodes.len();
    for cmd in nodes {
        // One at a time: a node whose new allocatable is below its usage is refused alone.
        if let Err(e) = ledger.propose_all(vec![cmd]) {
            out.warnings.push(format!("registering a node: {e}"));
        }
    }

    let pods: HashMap<String, &crate::model::Pod> = snapshot
        .pods
        .iter()
        .map(|p| (p.key.to_string(), p.as_ref()))
        .collect();
    let mut release_finished = Vec::new();
    let mut release_failed = Vec::new();
    let mut mark = Vec::new();
    for (key, placement) in &state.placements {
        let Some(pod) = pods.get(key) else {
            // Absent from this replica's cache: gone, or created so recently that the cache
            // has not seen it (a new owner's cache may lag the old owner's). Only the API
            // server's 404 releases the placement; until then it keeps its capacity.
            if cluster.pod_is_gone(&ObjectKey::parse(key)) {
                release_finished.push(key.clone());
            }
            continue;
        };
        if pod.is_terminated() {
            release_finished.push(key.clone());
            continue;
        }
        match &pod.node_name {
            Some(node) if *node == placement.node => {
                if placement.state != PlacementState::Bound {
                    mark.push(key.clone());
                }
            }
            Some(_) => release_failed.push(key.clone()),
            None if pod.scheduler_name == scheduler_name => {
                match cluster.bind(&pod.key, &placement.node) {
                    Ok(()) => {
                        mark.push(key.clone());
                        out.bound.push(pod.key.clone());
                    }
                    Err(e) => {
                        out.warnings.push(format!(
                            "binding committed pod {key} to {}: {e}",
                            placement.node
                        ));
                        release_failed.push(key.clone());
                    }
                }
            }
            None => release_failed.push(key.clone()),
        }
    }
    let propose = |ledger: &mut ServeLedger, cmds: Vec<LedgerCommand>| -> Result<(), LedgerError> {
        if cmds.is_empty() {
            return Ok(());
        }
        ledger.propose_all(cmds).map(|_| ())
    };
    out.released = release_finished.len() + release_failed.len();
    propose(
        ledger,
        pod_commands(&release_finished, |pods| LedgerCommand::Release {
            shard,
            epoch,
            pods,
            reason: ReleaseReason::Finished,
        }),
    )?;
    propose(
        ledger,
        pod_commands(&release_failed, |pods| LedgerCommand::Release {
            shard,
            epoch,
            pods,
            reason: ReleaseReason::BindFailed,
        }),
    )?;
    propose(
        ledger,
        pod_commands(&mark, |pods| LedgerCommand::MarkBound {
            shard,
            epoch,
            pods,
        }),
    )?;

    // Pods holding nodes that the ledger does not know: bound before phalanx started, or by
    // another scheduler. They are accounted as bound one-pod gangs.
    let released: std::collections::HashSet<&String> = release_failed.iter().collect();
    let gangs: Vec<LedgerGang> = snapshot
        .pods
        .iter()
        .filter(|p| p.occupies_node())
        .filter(|p| {
            let key = p.key.to_string();
            !state.placements.contains_key(&key) || released.contains(&key)
        })
        .filter_map(|p| {
            let node = p.node_name.clone()?;
            // A pod on a node the ledger does not know (yet) cannot be placed there.
            if !snapshot.nodes.iter().any(|n| n.name == node) {
                return None;
            }
            Some(LedgerGang {
                gang: p.key.to_string(),
                pods: vec![PodPlacement {
                    pod: p.key.to_string(),
                    node,
                    resources: resource_vec(&p.requests),
                }],
            })
        })
        .collect();
    if !gangs.is_empty() {
        let outcomes = verdicts(ledger.propose_all(place_gangs_at((shard, epoch), &gangs))?)?;
        let mut accounted = Vec::new();
        for (g, v) in gangs.iter().zip(outcomes) {
            match v {
                Verdict::Accepted => accounted.push(g.gang.clone()),
                Verdict::Refused(r) | Verdict::InDoubt(r) => out.warnings.push(format!(
                    "pod {} holds a node but the ledger refused it: {r}",
                    g.gang
                )),
            }
        }
        out.accounted = accounted.len();
        propose(
            ledger,
            pod_commands(&accounted, |pods| LedgerCommand::MarkBound {
                shard,
                epoch,
                pods,
            }),
        )?;
    }

    let releasing: HashSet<&str> = release_finished
        .iter()
        .chain(&release_failed)
        .map(String::as_str)
        .collect();
    let live: HashSet<&str> = snapshot.nodes.iter().map(|n| n.name.as_str()).collect();
    for node in deleted_nodes(&state, shard, &live, &releasing) {
        match ledger.propose_all(vec![LedgerCommand::RemoveNode { node: node.clone() }]) {
            Ok(_) => out.nodes_removed += 1,
            Err(e) => out
                .warnings
                .push(format!("removing deleted node {node}: {e}")),
        }
    }
    Ok(out)
}

/// Nodes of `shard` that the ledger holds but the cluster no longer has, and that hold no
/// placement once `releasing` is released. A deleted node that still holds placements
/// (pods bound to it and not yet gone) stays until they go: the ledger refuses to drop a
/// node with placements, and keeping it costs nothing since no plan can choose it.
fn deleted_nodes(
    state: &LedgerState,
    shard: u32,
    live: &HashSet<&str>,
    releasing: &HashSet<&str>,
) -> Vec<String> {
    let held: HashSet<&str> = state
        .placements
        .iter()
        .filter(|(pod, _)| !releasing.contains(pod.as_str()))
        .map(|(_, p)| p.node.as_str())
        .collect();
    state
        .nodes
        .iter()
        .filter(|(name, n)| {
            n.shard == shard && !live.contains(name.as_str()) && !held.contains(name.as_str())
        })
        .map(|(name, _)| name.clone())
        .collect()
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
        fn read_state(&mut self) -> Result<LedgerState, LedgerError> {
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

    /// Regression: nodes deleted from the cluster stayed in the ledger for ever. They are
    /// dropped once nothing is placed on them (counting placements this pass releases),
    /// and only from the reconciling replica's shard.
    #[test]
    fn deleted_nodes_leave_the_ledger_once_nothing_is_placed_on_them() {
        let mut ledger = Leased {
            inner: LocalLedger::new(),
            epoch: 1,
        };
        let gpus = || Resources::from_pairs([("nvidia.com/gpu", 2)]);
        let (n1, n2, n3) = (
            Node::new("n1", gpus()),
            Node::new("n2", gpus()),
            Node::new("n3", gpus()),
        );
        ledger.load(&[&n1, &n2, &n3], &[]).expect("loads");
        assert_eq!(
            ledger.commit(&[gang("a")]).expect("commits"),
            vec![Verdict::Accepted]
        );
        let mut state = ledger.read_state().expect("reads");
        // n4 belongs to another shard: never this replica's to remove.
        state.nodes.insert("n4".into(), {
            let mut other = state.nodes["n3"].clone();
            other.shard = 7;
            other
        });
        let live: HashSet<&str> = ["n3"].into_iter().collect();
        // n1 still holds pod a; n2 is empty: only n2 goes.
        assert_eq!(
            deleted_nodes(&state, 0, &live, &HashSet::new()),
            vec!["n2".to_string()]
        );
        // Once pod a is being released, n1 goes too.
        let releasing: HashSet<&str> = ["default/a"].into_iter().collect();
        assert_eq!(
            deleted_nodes(&state, 0, &live, &releasing),
            vec!["n1".to_string(), "n2".to_string()]
        );
    }
}
