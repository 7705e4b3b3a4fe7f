//! End to end on the testbed: Volcano Jobs run by `phalanx serve --job-controller`, with
//! no Volcano installed. Three replicas; only the Raft leader runs the controller. The
//! seed's `job-tf-mnist.yaml` is applied as written except `spec.schedulerName` (and its
//! namespace, a fresh one per run): its 11 pods are created by the controller and bound
//! whole by the scheduler, the Job goes Running; a deleted pod is PodEvicted, and the
//! Job's `RestartJob` policy restarts it (every pod recreated, retryCount 1); the pods
//! then complete (kwok's `pod-succeed` stage, through the `phalanx.dev/sim-duration`
//! annotation put on the running pods, so the manifest stays unchanged) and the Job is
//! Completed; deleting the Job removes its pods and PodGroup (the testbed runs no garbage
//! collector: the controller deletes what a gone Job owned). A bad Job beside it gets a
//! warning Event naming the field and value and blocks nothing.
//!
//! Not part of `cargo test --workspace` (it needs the testbed):
//!
//! ```text
//! deploy/testbed/testbed up --nodes 16 --zones 4
//! cargo test --workspace --test e2e -- --ignored --nocapture e2e_jobs::
//! ```

use crate::testbed;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use phalanx_scheduler::cluster::kube::volcano_resource;
use phalanx_scheduler::serve::jobs::job_resource;
use serde_json::{Value, json};
use testbed::{Check, DEADLINE, Replica, poll};

const SCHEDULER: &str = "phalanx-e2e-jobs";
const JOB: &str = "tf-mnist-job";
const PODS: usize = 11;

struct Env {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
    ns: String,
}

impl Env {
    fn jobs(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.ns, &job_resource())
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn pod_groups(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            &self.ns,
            &volcano_resource("PodGroup", "podgroups"),
        )
    }

    /// The Job's pods (by the label Volcano's controller sets).
    fn job_pods(&self) -> Result<Vec<Pod>, String> {
        let lp = ListParams::default().labels(&format!("volcano.sh/job-name={JOB}"));
        self.rt
            .block_on(self.pods().list(&lp))
            .map(|l| l.items)
            .map_err(|e| e.to_string())
    }

    fn status(&self) -> Result<Value, String> {
        let job = self
            .rt
            .block_on(self.jobs().get(JOB))
            .map_err(|e| e.to_string())?;
        Ok(job.data.get("status").cloned().unwrap_or(Value::Null))
    }

    fn create_job(&self, mut job: Value) -> Result<(), String> {
        job["metadata"]["namespace"] = json!(self.ns);
        job["spec"]["schedulerName"] = json!(SCHEDULER);
        let obj: DynamicObject = serde_json::from_value(job).map_err(|e| e.to_string())?;
        self.rt
            .block_on(self.jobs().create(&PostParams::default(), &obj))
            .map(|_| ())
            .map_err(|e| format!("creating the Job: {e}"))
    }
}

/// The seed manifest as a JSON value.
fn seed_job() -> Value {
    let path = testbed::repo_root().join("scheduler/tests/fixtures/seed/job-tf-mnist.yaml");
    let text = std::fs::read_to_string(&path).expect("the seed Job");
    serde_saphyr::from_str(&text).expect("the seed Job is YAML")
}

/// Polls until the Job's phase is `phase` with `running` running pods; returns its status.
fn wait_phase(env: &Env, phase: &str, extra: impl Fn(&Value) -> bool) -> Result<Value, String> {
    poll(DEADLINE, &format!("Job {JOB} {phase}"), || {
        let s = env.status()?;
        Ok((s.pointer("/state/phase") == Some(&json!(phase)) && extra(&s)).then_some(s))
    })
}

/// All 11 pods bound (the gang whole); returns their UIDs.
fn wait_bound(env: &Env, not_in: &BTreeSet<String>) -> Result<BTreeSet<String>, String> {
    poll(DEADLINE, "11 pods of the Job bound", || {
        let pods = env.job_pods()?;
        let bound: BTreeSet<String> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| testbed::node_of(p).is_some())
            .filter_map(|p| p.metadata.uid.clone())
            .filter(|u| !not_in.contains(u))
            .collect();
        Ok((bound.len() == PODS).then_some(bound))
    })
}

fn check_bound_and_running(env: &Env) -> Result<(String, BTreeSet<String>), String> {
    let uids = wait_bound(env, &BTreeSet::new())?;
    let status = wait_phase(env, "Running", |s| s["running"] == json!(PODS))?;
    if status["minAvailable"] != json!(PODS) {
        return Err(format!("status.minAvailable is not 11: {status}"));
    }
    let pg = env
        .rt
        .block_on(env.pod_groups().get(JOB))
        .map_err(|e| format!("the PodGroup {JOB}: {e}"))?;
    let owner = &pg.metadata.owner_references.unwrap_or_default();
    let owned = owner.iter().any(|o| {
        o.kind == "Job"
            && o.name == JOB
            && o.controller == Some(true)
            && o.block_owner_deletion == Some(true)
    });
    if !owned || pg.data["spec"]["minMember"] != json!(PODS) {
        return Err(format!(
            "PodGroup not owned by the Job or minMember not 11: {:?}",
            pg.data
        ));
    }
    Ok((format!("11 pods bound, Job Running: {status}"), uids))
}

/// A deleted pod (PodEvicted) under RestartJob: every pod recreated, retryCount 1.
fn check_restart(env: &Env, old: &BTreeSet<String>) -> Check {
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    env.rt
        .block_on(env.pods().delete(&format!("{JOB}-worker-3"), &now))
        .map_err(|e| format!("deleting a worker: {e}"))?;
    // Restarting lasts about one period (kwok removes deleted pods at once), too short to
    // poll for; retryCount and the new pods' UIDs show that it happened.
    let fresh = wait_bound(env, old)?;
    let status = wait_phase(env, "Running", |s| s["retryCount"] == json!(1))?;
    Ok(format!(
        "{} new pods bound, Job Running again: {status}",
        fresh.len()
    ))
}

/// kwok completes the pods once they carry `phalanx.dev/sim-duration`.
fn check_completed(env: &Env) -> Check {
    let patch =
        Patch::Merge(json!({"metadata": {"annotations": {"phalanx.dev/sim-duration": "1s"}}}));
    for pod in env.job_pods()? {
        let name = pod.metadata.name.unwrap_or_default();
        env.rt
            .block_on(env.pods().patch(&name, &PatchParams::default(), &patch))
            .map_err(|e| format!("annotating {name}: {e}"))?;
    }
    let status = wait_phase(env, "Completed", |s| s["succeeded"] == json!(PODS))?;
    Ok(format!("Completed: {status}"))
}

fn check_delete_removes_children(env: &Env) -> Check {
    env.rt
        .block_on(env.jobs().delete(JOB, &DeleteParams::default()))
        .map_err(|e| format!("deleting the Job: {e}"))?;
    poll(DEADLINE, "the Job's pods and PodGroup gone", || {
        let pods = env.job_pods()?.len();
        let pg = env
            .rt
            .block_on(env.pod_groups().get_opt(JOB))
            .map_err(|e| e.to_string())?;
        Ok((pods == 0 && pg.is_none()).then_some(()))
    })?;
    Ok("pods and PodGroup deleted with the Job".into())
}

/// A Job asking for more pods than it has: a warning Event naming the field and value.
fn check_bad_job_warned(env: &Env) -> Check {
    poll(DEADLINE, "a warning Event on the bad Job", || {
        let events: Api<Event> = Api::namespaced(env.client.clone(), &env.ns);
        let list = env
            .rt
            .block_on(events.list(&ListParams::default()))
            .map_err(|e| e.to_string())?;
        Ok(list.items.into_iter().find_map(|e| {
            let about_bad = e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("bad-job");
            let note = e.note.unwrap_or_default();
            (about_bad
                && e.type_.as_deref() == Some("Warning")
                && note.contains("spec.minAvailable")
                && note.contains("20"))
            .then_some(note)
        }))
    })
}

#[test]
#[ignore = "needs the testbed (deploy/testbed/testbed up --nodes 16 --zones 4)"]
fn the_seed_job_runs_restarts_completes_and_is_deleted_through_the_job_controller() {
    let (rt, client, ns) = testbed::open("e2e-jobs");
    let env = Env { rt, client, ns };
    let dir = tempfile::Builder::new()
        .prefix("phalanx-e2e-jobs-")
        .tempdir()
        .expect("a temporary directory");
    let extra: Vec<String> = [
        "--job-controller",
        "--scheduler-name",
        SCHEDULER,
        "--lease-namespace",
        &env.ns,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (mut replicas, _) = testbed::start_replicas(dir.path(), &extra);
    let mut results: Vec<(&str, Check)> = Vec::new();
    let ready = poll(
        Duration::from_secs(90),
        "3 replicas ready (/readyz)",
        || Ok(replicas.iter().all(Replica::ready).then_some(())),
    );
    let mut bad = seed_job();
    bad["metadata"]["name"] = json!("bad-job");
    bad["spec"]["minAvailable"] = json!(20);
    let started = ready
        .and_then(|()| env.create_job(bad))
        .and_then(|()| env.create_job(seed_job()));
    match started.and_then(|()| check_bound_and_running(&env)) {
        Err(e) => results.push((
            "the seed Job's 11 pods are bound whole and it is Running",
            Err(e),
        )),
        Ok((detail, uids)) => {
            results.push((
                "the seed Job's 11 pods are bound whole and it is Running",
                Ok(detail),
            ));
            results.push((
                "a bad Job gets a warning Event naming the field and blocks nothing",
                check_bad_job_warned(&env),
            ));
            results.push((
                "a deleted pod restarts the Job under RestartJob",
                check_restart(&env, &uids),
            ));
            results.push((
                "the Job is Completed when kwok completes its pods",
                check_completed(&env),
            ));
            results.push((
                "deleting the Job deletes its pods and PodGroup",
                check_delete_removes_children(&env),
            ));
        }
    }
    testbed::finish(
        &env.rt,
        &env.client,
        &env.ns,
        &mut replicas,
        &results,
        "phalanx-e2e-jobs-logs",
    );
}
