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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::SchedulerConf;
    use crate::framework::session::{SessionState, TaskStatus};
    use crate::framework::testing::{Cluster, weighted_queue};
    use crate::model::resources::{CPU, GPU};

    /// Everything a statement may change, printed exactly.
    fn fingerprint(state: &SessionState) -> String {
        format!(
            "{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
            state.nodes, state.tasks, state.jobs, state.queues, state.total_used
        )
    }

    fn session() -> Session {
        Cluster::new()
            .node("n1", &[(CPU, 8_000), (GPU, 2)])
            .node("n2", &[(CPU, 8_000), (GPU, 2)])
            .queue(weighted_queue("team", 1))
            .inqueue_group("gang", "team", 3)
            .running_pod("gang-0", Some("gang"), "n1", &[(CPU, 1_000), (GPU, 1)])
            .pod("gang-1", Some("gang"), &[(CPU, 1_000), (GPU, 1)])
            .pod("gang-2", Some("gang"), &[(CPU, 2_000), (GPU, 1)])
            .pod("gang-3", Some("gang"), &[])
            .session(&SchedulerConf::volcano_default())
    }

    fn task(session: &Session, name: &str) -> TaskId {
        session
            .state
            .tasks
            .iter()
            .position(|t| t.pod.key.name == name)
            .expect("task exists")
    }

    #[test]
    fn discard_restores_the_session_exactly() {
        let mut s = session();
        let before = fingerprint(&s.state);
        let (t1, t2, t3) = (task(&s, "gang-1"), task(&s, "gang-2"), task(&s, "gang-3"));
        let mut statement = Statement::new();
        statement.allocate(&mut s, t1, 0);
        statement.allocate(&mut s, t2, 1);
        statement.allocate(&mut s, t3, 1);
        assert_ne!(
            fingerprint(&s.state),
            before,
            "allocations change the session"
        );
        let job = s.state.tasks[t1].job.expect("in a job");
        assert_eq!(s.state.jobs[job].ready_count, 4);
        assert_eq!(s.state.jobs[job].pending_best_effort, 0);
        assert_eq!(s.state.nodes[1].pod_count, 2);
        assert_eq!(
            s.state.queues[s.state.queue_index["team"]]
                .allocated
                .get(GPU),
            3
        );

        statement.discard(&mut s);
        assert_eq!(fingerprint(&s.state), before);
        assert!(s.plan.gangs.is_empty());
        assert_eq!(s.state.tasks[t2].status, TaskStatus::Pending);
    }

    #[test]
    fn commit_keeps_the_allocations_and_plans_them_as_one_gang() {
        let mut s = session();
        let (t1, t2) = (task(&s, "gang-1"), task(&s, "gang-2"));
        let mut statement = Statement::new();
        statement.allocate(&mut s, t1, 0);
        statement.allocate(&mut s, t2, 1);
        statement.commit(&mut s);
        assert_eq!(s.plan.gangs.len(), 1);
        let gang = &s.plan.gangs[0];
        assert_eq!(gang.gang.to_string(), "default/gang");
        let placed: Vec<(String, String)> = gang
            .placements
            .iter()
            .map(|p| (p.pod.name.clone(), p.node.clone()))
            .collect();
        assert_eq!(
            placed,
            vec![
                ("gang-1".to_string(), "n1".to_string()),
                ("gang-2".to_string(), "n2".to_string())
            ]
        );
        assert_eq!(s.state.tasks[t1].status, TaskStatus::Allocated);
        assert_eq!(s.state.nodes[0].idle.get(GPU), 0);
    }
}
