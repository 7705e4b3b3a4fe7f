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
