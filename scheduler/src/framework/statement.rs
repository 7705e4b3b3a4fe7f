//! A Statement holds a gang's tentative operations: allocations, pipelined placements and
//! evictions. They change the session at once (so later tasks of the same gang see the nodes
//! fill up, and later victims see their queue's share drop) and are then committed into the
//! cycle's plan or discarded, which undoes them in reverse order. This is what makes a gang
//! all-or-nothing inside a cycle, and what lets preempt and reclaim try a set of victims and
//! give every one of them back when the preemptor still does not fit.

use crate::framework::plan::{Eviction, GangPlacement, Placement};
use crate::framework::session::{NodeId, Session, TaskId};
use crate::model::ObjectKey;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Allocate(TaskId, NodeId),
    Pipeline(TaskId, NodeId),
    /// A victim, with the action (`preempt` / `reclaim`) that chose it.
    Evict(TaskId, &'static str),
}

#[derive(Debug, Default)]
pub struct Statement {
    ops: Vec<Op>,
}

impl Statement {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Tasks allocated or pipelined (victims not counted).
    pub fn len(&self) -> usize {
        self.ops
            .iter()
            .filter(|op| !matches!(op, Op::Evict(..)))
            .count()
    }

    /// Victims chosen so far.
    pub fn evictions(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.ops.iter().filter_map(|op| match op {
            Op::Evict(task, _) => Some(*task),
            _ => None,
        })
    }

    /// Nodes this statement has allocated or pipelined on, in order (with repeats).
    pub fn nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.ops.iter().filter_map(|op| match op {
            Op::Allocate(_, node) | Op::Pipeline(_, node) => Some(*node),
            Op::Evict(..) => None,
        })
    }

    /// Tentatively puts `task` on `node`.
    pub fn allocate(&mut self, session: &mut Session, task: TaskId, node: NodeId) {
        session.allocate_task(task, node);
        self.ops.push(Op::Allocate(task, node));
    }

    /// Tentatively puts `task` on `node` once the node's victims are gone.
    pub fn pipeline(&mut self, session: &mut Session, task: TaskId, node: NodeId) {
        session.pipeline_task(task, node);
        self.ops.push(Op::Pipeline(task, node));
    }

    /// Tentatively evicts a bound or running `task`.
    pub fn evict(&mut self, session: &mut Session, task: TaskId, action: &'static str) {
        session.evict_task(task);
        self.ops.push(Op::Evict(task, action));
    }

    /// Undoes every operation, last first.
    pub fn discard(self, session: &mut Session) {
        for op in self.ops.iter().rev() {
            match *op {
                Op::Allocate(task, _) => session.deallocate_task(task),
                Op::Pipeline(task, _) => session.unpipeline_task(task),
                Op::Evict(task, _) => session.unevict_task(task),
            }
        }
    }

    /// Keeps the operations and adds them to the cycle's plan: the allocations as one gang
    /// placement, the pipelined tasks as one pipelined placement, and the evictions.
    pub fn commit(self, session: &mut Session) {
        if self.ops.is_empty() {
            return;
        }
        let state = &session.state;
        let first_placed = self.ops.iter().find_map(|op| match op {
            Op::Allocate(t, _) | Op::Pipeline(t, _) => Some(*t),
            Op::Evict(..) => None,
        });
        let gang = first_placed
            .and_then(|t| state.tasks[t].job)
            .map(|j| state.jobs[j].key().clone())
            .unwrap_or_else(|| ObjectKey::new("", ""));
        let placement = |task: TaskId, node: NodeId| Placement {
            pod: state.tasks[task].pod.key.clone(),
            node: state.nodes[node].node.name.clone(),
            resources: state.tasks[task].pod.requests.clone(),
        };
        let mut allocated = Vec::new();
        let mut pipelined = Vec::new();
        let mut evictions = Vec::new();
        for op in &self.ops {
            match *op {
                Op::Allocate(task, node) => allocated.push(placement(task, node)),
                Op::Pipeline(task, node) => pipelined.push(placement(task, node)),
                Op::Evict(task, action) => {
                    let t = &state.tasks[task];
                    let node = t.node.map(|n| state.nodes[n].node.name.clone());
                    evictions.push(Eviction {
                        pod: t.pod.key.clone(),
                        node: node.unwrap_or_default(),
                        gang: t.job.map(|j| state.jobs[j].key().clone()),
                        for_gang: gang.clone(),
                        action,
                        reason: format!(
                            "{action}: evicted to make room for PodGroup {gang} (priority {})",
                            first_placed
                                .and_then(|p| state.tasks[p].job)
                                .map_or(0, |j| state.jobs[j].priority)
                        ),
                    });
                }
            }
        }
        let plan = &mut session.plan;
        plan.evictions.extend(evictions);
        if !allocated.is_empty() {
            plan.gangs.push(GangPlacement {
                gang: gang.clone(),
                placements: allocated,
            });
        }
        if !pipelined.is_empty() {
            plan.pipelined.push(GangPlacement {
                gang,
                placements: pipelined,
            });
        }
    }
}
