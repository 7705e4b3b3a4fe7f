//! `enqueue`: admits Pending gangs (phase Pending → Inqueue) when the plugins agree that
//! their `minResources` can be met (overcommit: the cluster; proportion: the queue's
//! capability). Only admitted gangs are placed by `allocate`, so a gang that can never fit
//! does not hold anything. Queues take turns in queue order, one gang at a time.

use std::collections::HashMap;

use crate::actions::admission_block;
use crate::actions::turns::QueueTurns;
use crate::framework::Session;
use crate::model::{PodGroupPhase, Resources};

pub fn run(session: &mut Session) {
    // Admission spends one cluster-wide budget (overcommit, queue capability), so with
    // shards it is decided once per round for every gang, in the round's shared view
    // (`framework::view`), and a replica's session arrives with its gangs' decisions.
    // Deciding in each replica only for its own gangs let two replicas each admit a gang
    // into the same budget (scenario 22 at 3 replicas / 3 shards).
    if session.admission_decided {
        return;
    }
    let mut turns = QueueTurns::new(session);
    for job in 0..session.state.jobs.len() {
        let j = &session.state.jobs[job];
        if !j.is_pending_phase() || j.admission_released {
            continue;
        }
        // Whether the gang has its pods yet is not asked, as in Volcano: its job
        // controller creates a Job's pods only once the PodGroup is Inqueue, so admission
        // must come first.
        if let Some((code, reason)) = admission_block(session, job) {
            session.state.jobs[job].block(code, reason);
            continue;
        }
        let queue = j
            .queue
            .expect("admission_block rejects jobs without a queue");
        turns.add(session, queue, job);
    }

    // Refusals since the last admission, per queue by minResources. Only an admission
    // changes what the plugins answer (see `Plugin::job_enqueueable`), so a gang asking
    // what a refused one of its queue asked is refused the same way, without asking again:
    // a backlog of thousands of pending gangs is asked, and its refusals written out with
    // their numbers, every round.
    let mut refused: Vec<HashMap<Resources, String>> = vec![HashMap::new(); turns.queues()];
    while let Some(queue) = turns.next_queue(session) {
        let Some(job) = turns.next_job(session, queue) else {
            continue;
        };
        match session.state.jobs[job].min_resources() {
            Some(min) if let Some(reason) = refused[queue].get(min) => {
                session.state.jobs[job].blocked_reason = Some(reason.clone());
            }
            Some(min) if !session.plugins.job_enqueueable(&session.state, job) => {
                let reason = session
                    .plugins
                    .enqueue_refusal(&session.state, job)
                    .unwrap_or_else(|| "a plugin refused to admit the PodGroup".to_string());
                refused[queue].insert(min.clone(), reason.clone());
                session.state.jobs[job].blocked_reason = Some(reason);
            }
            _ => {
                session.state.jobs[job].phase = PodGroupPhase::Inqueue;
                session.state.jobs[job].blocked_reason = None;
                let (state, plugins) = (&session.state, &mut session.plugins);
                plugins.on_job_enqueued(state, job);
                refused.iter_mut().for_each(HashMap::clear);
            }
        }
        turns.end_turn(session, queue, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::SchedulerConf;
    use crate::framework::testing::{Cluster, res};
    use crate::model::resources::{CPU, GPU};
    use crate::model::{ObjectKey, PodGroup};

    #[test]
    fn a_pod_group_whose_pods_do_not_exist_yet_is_admitted() {
        // A Volcano Job's controller creates the pods after admission: a PodGroup with fewer
        // pods than minMember (here none) must still go Inqueue.
        let mut session = Cluster::new()
            .node("n1", &[(CPU, 8_000), (GPU, 4)])
            .group("job", "default", 2)
            .session(&SchedulerConf::volcano_default());
        run(&mut session);
        assert_eq!(session.state.jobs[0].phase, PodGroupPhase::Inqueue);
    }

    /// A refusal is given again to the gangs of its queue that ask the same only until the
    /// next admission: after one, the plugins are asked again and the reason carries the
    /// new numbers (here what overcommit has admitted).
    #[test]
    fn a_refusal_given_again_without_asking_is_forgotten_at_the_next_admission() {
        let gang = |c: Cluster, name: &str, gpus: i64| {
            let mut group = PodGroup::new(ObjectKey::new("default", name), 1);
            group.queue = "default".into();
            group.min_resources = Some(res(&[(GPU, gpus)]));
            c.group_with(group)
                .pod(&format!("{name}-0"), Some(name), &[(GPU, gpus)])
        };
        let mut c = Cluster::new().node("n1", &[(CPU, 64_000), (GPU, 8)]);
        for (name, gpus) in [("big-1", 16), ("big-2", 16), ("small", 2), ("big-3", 16)] {
            c = gang(c, name, gpus);
        }
        let mut session = c.session(&SchedulerConf::volcano_default());
        run(&mut session);
        let jobs = &session.state.jobs;
        let phases: Vec<PodGroupPhase> = jobs.iter().map(|j| j.phase).collect();
        use PodGroupPhase::{Inqueue, Pending};
        assert_eq!(phases, [Pending, Pending, Inqueue, Pending]);
        let reason = |j: usize| jobs[j].blocked_reason.clone().unwrap_or_default();
        assert_eq!(reason(0), reason(1), "nothing admitted between them");
        assert!(reason(1).contains("over-subscribed"), "{}", reason(1));
        assert_ne!(reason(3), reason(1), "asked again after the admission");
        assert!(
            reason(3).contains(&format!("plus {} already admitted", res(&[(GPU, 2)]))),
            "{}",
            reason(3)
        );
    }

    #[test]
    fn a_pod_group_in_a_missing_queue_stays_pending_with_the_reason() {
        let mut session = Cluster::new()
            .node("n1", &[(CPU, 8_000), (GPU, 4)])
            .group("job", "nowhere", 1)
            .pod("job-0", Some("job"), &[(CPU, 1_000)])
            .session(&SchedulerConf::volcano_default());
        run(&mut session);
        let job = &session.state.jobs[0];
        assert_eq!(job.phase, PodGroupPhase::Pending);
        assert!(
            job.blocked_reason
                .as_deref()
                .is_some_and(|r| r.contains("nowhere")),
            "{:?}",
            job.blocked_reason
        );
    }
}
