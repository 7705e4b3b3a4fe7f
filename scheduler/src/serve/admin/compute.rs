//! What `Explain` and `Status` answer, from what the loop published. Explain is the
//! simulator's explanation (`framework::explain`) on one dry cycle of the published
//! snapshot, scoped to the shards owned, as the loop's own cycle is.

use std::fmt::Write as _;

use phalanx_proto::admin::{
    ExplainReply, PendingGroup, QueueStatus, ReplicaStatus, ShardStatus, StatusReply,
};
use phalanx_statestore::LedgerState;
use phalanx_statestore::ledger::{Epoch, ReplicaId, ShardId, TxnDecision};
use tonic::Status;

use super::{AdminShared, Published, now_ms};
use crate::cluster::ClusterSnapshot;
use crate::framework::session::Session;
use crate::framework::{CycleScope, HomePool, run_cycle_scoped};
use crate::model::ObjectKey;

/// A PodGroup's home shard and who owns it, as the published ledger state says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pub shard: ShardId,
    pub owner: ReplicaId,
    pub epoch: Epoch,
}

fn view(p: &Published) -> Result<(&ClusterSnapshot, &LedgerState), Status> {
    match (&p.snapshot, &p.state) {
        (Some(s), Some(l)) => Ok((s, l)),
        _ => Err(Status::unavailable(
            "this replica has not finished its first period yet (no snapshot or ledger state); retry",
        )),
    }
}

/// The owner of `key`'s home shard; NOT_FOUND when the PodGroup is not in the watch cache,
/// UNAVAILABLE while the shard has no owner.
pub fn owner_of(shared: &AdminShared, p: &Published, key: &ObjectKey) -> Result<Owner, Status> {
    let (snapshot, state) = view(p)?;
    let pg = snapshot
        .pod_groups
        .iter()
        .find(|g| &g.key == key)
        .ok_or_else(|| {
            Status::not_found(format!(
                "PodGroup {key}: not in replica {}'s watch cache (no such PodGroup)",
                shared.id
            ))
        })?;
    let shard = shared.map.shard_of_queue(&pg.queue);
    match state.shards.get(&shard) {
        Some(a) if a.owner != 0 => Ok(Owner {
            shard,
            owner: a.owner,
            epoch: a.epoch,
        }),
        _ => Err(Status::unavailable(format!(
            "PodGroup {key}: its home shard {shard} (queue {:?}) has no owner yet",
            pg.queue
        ))),
    }
}

/// A forwarded Explain reached a replica that does not own the shard (it moved meanwhile).
pub fn not_owner(shared: &AdminShared, key: &ObjectKey, o: &Owner) -> Status {
    Status::failed_precondition(format!(
        "PodGroup {key}: replica {} was asked as the owner of shard {}, but the ledger it read names replica {} (epoch {}); the shard moved, retry",
        shared.id, o.shard, o.owner, o.epoch
    ))
}

/// The explanation, as the owner computes it.
pub fn explain(shared: &AdminShared, p: &Published, key: &ObjectKey, o: &Owner) -> ExplainReply {
    let mut text = String::new();
    if let Ok((snapshot, state)) = view(p) {
        let scope = (shared.map.shard_count() > 1).then(|| {
            CycleScope::new(
                shared.map.clone(),
                p.owned.keys().copied().collect(),
                HomePool::Strict,
            )
        });
        // A dry cycle: its decision lines sit under an `explain` span, so the grep for a
        // gang's real decisions (`cycle{` at the start of the span path) leaves them out.
        let dry = tracing::debug_span!("explain", podgroup = %key).entered();
        let (_, session) = run_cycle_scoped(
            snapshot,
            &shared.conf,
            &shared.scheduler_name,
            scope.as_ref(),
        );
        drop(dry);
        let now = now_ms();
        text = crate::framework::explain::explain(&session, key, &|at| ago(now, at));
        let _ = writeln!(
            text,
            "  home shard {} owned by replica {} at epoch {}",
            o.shard, o.owner, o.epoch
        );
        decisions(&mut text, p, key);
        twophase(&mut text, state, p, key);
    }
    ExplainReply {
        text,
        answered_by: shared.id,
        shard: o.shard,
        epoch: o.epoch,
        forwarded_by: 0,
    }
}

/// The PodGroup's Events this replica wrote (its decisions), with how long ago.
fn decisions(out: &mut String, p: &Published, key: &ObjectKey) {
    let now = now_ms();
    let events: Vec<(u64, &crate::framework::Event)> = p
        .decisions
        .iter()
        .filter(|(_, e)| &e.object == key)
        .map(|(at, e)| (*at, e))
        .collect();
    crate::framework::explain::render_events(out, (&events, events.len()), &|at| ago(now, at));
}

/// A wall-clock instant (ms) as how long before `now` it was.
fn ago(now: u64, at: u64) -> String {
    format!("{:.1}s ago", now.saturating_sub(at) as f64 / 1000.0)
}

/// The gang's cross-shard transactions: open or decided ones in the ledger, and the ends
/// this replica's coordinator reported (with why).
fn twophase(out: &mut String, state: &LedgerState, p: &Published, key: &ObjectKey) {
    let gang = key.to_string();
    let now = now_ms();
    let mut any = false;
    for (id, t) in &state.txns {
        if crate::coord::gang_of(id) != Some(gang.as_str()) {
            continue;
        }
        any = true;
        let decision = match t.decision {
            None => format!(
                "open, {} of {} parts reserved, deadline in {:.1}s",
                t.prepared.len(),
                t.participants.len(),
                t.deadline_ms.saturating_sub(now) as f64 / 1000.0
            ),
            Some(TxnDecision::Commit) => "decided commit".to_string(),
            Some(TxnDecision::Abort) => "decided abort".to_string(),
        };
        let _ = writeln!(
            out,
            "  2PC {id}: {decision} (coordinator shard {}, participants {:?})",
            t.coordinator, t.participants
        );
    }
    for end in p.txn_ends.iter().filter(|e| e.gang == gang) {
        any = true;
        let _ = writeln!(
            out,
            "  2PC {} ended {} {:.1}s ago: {}",
            end.txn,
            end.outcome,
            now.saturating_sub(end.at_ms) as f64 / 1000.0,
            end.reason
        );
    }
    if !any {
        let _ = writeln!(
            out,
            "  2PC: no cross-shard transaction open or recently ended"
        );
    }
}

/// The whole status, as this replica (the Raft leader, normally) sees it.
pub fn status(shared: &AdminShared, p: &Published, top: u32) -> Result<StatusReply, Status> {
    let (snapshot, state) = view(p)?;
    let session = Session::open(snapshot, &shared.conf, &shared.scheduler_name);
    Ok(StatusReply {
        answered_by: shared.id,
        forwarded_by: 0,
        term: p.raft.term,
        replicas: replicas(shared, p),
        shards: shards(shared, snapshot, state),
        queues: queues(shared, &session),
        pending: pending(shared, &session, snapshot.now_ms, top),
    })
}

fn replicas(shared: &AdminShared, p: &Published) -> Vec<ReplicaStatus> {
    let raft = &p.raft;
    let leading = raft.leader == Some(shared.id);
    let ids: std::collections::BTreeSet<ReplicaId> = raft
        .voters
        .iter()
        .chain(&raft.learners)
        .chain(shared.peers.keys())
        .copied()
        .chain([shared.id])
        .collect();
    ids.into_iter()
        .map(|id| ReplicaStatus {
            id,
            up: p
                .running
                .as_ref()
                .map_or(id == shared.id, |r| r.contains(&id)),
            leader: raft.leader == Some(id),
            voter: raft.voters.contains(&id),
            lag: match (leading, id == shared.id, raft.matched.get(&id)) {
                (true, true, _) => 0,
                (true, false, Some(m)) => {
                    i64::try_from(raft.last_log_index.saturating_sub(*m)).unwrap_or(i64::MAX)
                }
                _ => -1,
            },
        })
        .collect()
}

fn shards(
    shared: &AdminShared,
    snapshot: &ClusterSnapshot,
    state: &LedgerState,
) -> Vec<ShardStatus> {
    shared
        .map
        .shards()
        .map(|shard| {
            let a = state.shards.get(&shard);
            let mut queues: Vec<String> = snapshot
                .queues
                .iter()
                .filter(|q| shared.map.shard_of_queue(&q.name) == shard)
                .map(|q| q.name.clone())
                .collect();
            queues.sort();
            ShardStatus {
                id: shard,
                owner: a.map_or(0, |a| a.owner),
                epoch: a.map_or(0, |a| a.epoch),
                queues,
                nodes: u32::try_from(state.nodes.values().filter(|n| n.shard == shard).count())
                    .unwrap_or(u32::MAX),
            }
        })
        .collect()
}

/// Jobs that have not reached their minimum yet (shadows of other shards' gangs aside).
fn waiting(session: &Session) -> impl Iterator<Item = usize> + '_ {
    let state = &session.state;
    (0..state.jobs.len()).filter(move |&j| {
        let job = &state.jobs[j];
        !job.shadow
            && job.ready_count + job.pipelined_count < job.min_available()
            && state.pending_tasks(j).next().is_some()
    })
}

fn queues(shared: &AdminShared, session: &Session) -> Vec<QueueStatus> {
    let state = &session.state;
    let shares = crate::plugins::proportion::compute_deserved(state);
    let mut pending = vec![0u32; state.queues.len()];
    for j in waiting(session) {
        if let Some(q) = state.jobs[j].queue {
            pending[q] += 1;
        }
    }
    state
        .queues
        .iter()
        .enumerate()
        .map(|(q, info)| QueueStatus {
            name: info.queue.name.clone(),
            weight: info.queue.weight,
            shard: shared.map.shard_of_queue(&info.queue.name),
            deserved: shares[q].deserved.to_string(),
            allocated: info.allocated.to_string(),
            capability: info
                .queue
                .capability
                .as_ref()
                .map_or_else(|| "unlimited".to_string(), |c| c.to_string()),
            pending_gangs: pending[q],
        })
        .collect()
}

fn pending(shared: &AdminShared, session: &Session, now_ms: u64, top: u32) -> Vec<PendingGroup> {
    let state = &session.state;
    let mut jobs: Vec<(u64, usize)> = waiting(session)
        .map(|j| (crate::observe::state::created_ms(&state.jobs[j]), j))
        .collect();
    jobs.sort();
    jobs.into_iter()
        .take(top as usize)
        .map(|(created, j)| {
            let job = &state.jobs[j];
            let pg = &job.pod_group;
            PendingGroup {
                namespace: pg.key.namespace.clone(),
                name: pg.key.name.clone(),
                queue: pg.queue.clone(),
                shard: shared.map.shard_of_queue(&pg.queue),
                age_seconds: now_ms.saturating_sub(created) / 1000,
                message: pg
                    .status
                    .conditions
                    .last()
                    .map(|c| c.message.clone())
                    .unwrap_or_default(),
            }
        })
        .collect()
}
