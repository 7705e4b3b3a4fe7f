//! A Statement holds a gang's tentative allocations: they change the session (so later
//! tasks of the same gang see the nodes fill up) and are then committed as one
//! [`GangPlacement`] or discarded, which undoes them in reverse order. This is what makes a
//! gang all-or-nothing inside a cycle.

use crate::framework::plan::{GangPlacement, Placement};
use crate::framework::session::{NodeId, Session, TaskId};
use crate::model::ObjectKey;

#[derive(Debug, Default)]
pub struct Statement {
    allocations: Vec<(TaskId, NodeId)>,
}

impl Statement {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.allocations.is_empty()
    }

    pub fn len(&self) -> usize {
        self.allocations.len()
    }

    /// Nodes this statement has allocated on, in order (with repeats).
    pub fn nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.allocations.iter().map(|&(_, node)| node)
    }

    /// Tentatively puts `task` on `node`.
    pub fn allocate(&mut self, session: &mut Session, task: TaskId, node: NodeId) {
        session.allocate_task(task, node);
        self.allocations.push((task, node));
    }

    /// Undoes every allocation, last first.
    pub fn discard(self, session: &mut Session) {
        for &(task, _) in self.allocations.iter().rev() {
            session.deallocate_task(task);
        }
    }

    /// Keeps the allocations and adds them to the cycle's plan as one gang placement.
    pub fn commit(self, session: &mut Session) {
        if self.allocations.is_empty() {
            return;
        }
        let state = &session.state;
        let first = self.allocations[0].0;
        let gang = state.tasks[first]
            .job
            .map(|j| state.jobs[j].key().clone())
            .unwrap_or_else(|| ObjectKey::new("", ""));
        let placements = self
            .allocations
            .iter()
            .map(|&(task, node)| Placement {
                pod: state.tasks[task].pod.key.clone(),
                node: state.nodes[node].node.name.clone(),
                resources: state.tasks[task].pod.requests.clone(),
            })
            .collect();
        session.plan.gangs.push(GangPlacement { gang, placements });
    }
}
