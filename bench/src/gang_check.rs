//! `phalanx-bench gang-check`: does a scheduler on the testbed place a gang all or
//! nothing? The test behind the native-gang row of the kube table (issue 16 item 4), and
//! the same question put to phalanx.
//!
//! On a testbed of N schedulable nodes with G GPUs each it creates, in its own namespace:
//!
//! 1. gang `too-big`: N + 1 pods of G GPUs each, a gang of N + 1. Each pod fits a node
//!    alone, so a scheduler without gangs binds up to N of them; the whole never fits;
//! 2. then gang `fits`: 10 pods of 1 GPU, a gang of 10.
//!
//! It waits until `fits` is wholly bound (so the scheduler has come past `too-big`, and
//! `too-big` holds no GPU it would need), then `settle` longer, and passes only when
//! `fits` has all 10 pods bound and `too-big` none. With `--scheduler default-scheduler`
//! (kube-scheduler without gangs) it fails: that is how one sees it can.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::core::DynamicObject;
use phalanx_scheduler::cluster::kube::make_client;

use crate::kube::{GangApi, KubeBench, Mode, pod_group_api, pod_group_json, pod_json};
use crate::native_gang;

#[derive(Debug, Clone)]
pub struct GangCheck {
    pub kubeconfig: PathBuf,
    /// As `phalanx-bench kube --scheduler`.
    pub scheduler: String,
    /// The phalanx binary, for `--scheduler phalanx` (one replica, started here).
    pub phalanx: PathBuf,
    /// How long `fits` may take to be bound.
    pub timeout: Duration,
    /// How long to keep watching `too-big` once `fits` is bound.
    pub settle: Duration,
}

/// The pods of the gang that fits.
const FITS: usize = 10;

/// What the check saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GangCheckOutcome {
    pub nodes: usize,
    pub gpus_per_node: i64,
    pub too_big_pods: usize,
    pub too_big_bound: usize,
    pub fits_bound: usize,
    /// Create of `fits` → all its pods bound; `None` when they were not.
    pub fits_bound_in: Option<Duration>,
}

impl GangCheckOutcome {
    /// `Ok` with a line saying what was seen, or `Err` naming the gang that broke the rule.
    pub fn verdict(&self) -> Result<String, String> {
        let sizes = format!(
            "{} nodes × {} GPUs; gang too-big {} pods × {} GPUs, gang fits {FITS} pods × 1 GPU",
            self.nodes, self.gpus_per_node, self.too_big_pods, self.gpus_per_node
        );
        if self.too_big_bound > 0 {
            return Err(format!(
                "not all or nothing: gang too-big has {} of its {} pods bound although it cannot fit whole ({sizes}; gang fits: {} of {FITS} bound)",
                self.too_big_bound, self.too_big_pods, self.fits_bound
            ));
        }
        match self.fits_bound_in {
            Some(t) if self.fits_bound == FITS => Ok(format!(
                "all or nothing: gang fits bound whole in {:.1} s, gang too-big 0 of {} bound ({sizes})",
                t.as_secs_f64(),
                self.too_big_pods
            )),
            _ => Err(format!(
                "gang fits has only {} of {FITS} pods bound, gang too-big none ({sizes})",
                self.fits_bound
            )),
        }
    }
}

/// The schedulable nodes and the fewest GPUs any of them has.
async fn node_shape(client: &kube::Client) -> Result<(usize, i64)> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut count = 0;
    let mut gpus = i64::MAX;
    for n in nodes.list(&ListParams::default()).await?.items {
        let name = n.metadata.name.clone().unwrap_or_default();
        if n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
            continue;
        }
        let text = n
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .and_then(|a| a.get("nvidia.com/gpu"))
            .map(|q| q.0.clone())
            .unwrap_or_default();
        let g: i64 = text.parse().map_err(|_| {
            anyhow!("node {name}: status.allocatable[nvidia.com/gpu] is {text:?}, not a whole number of GPUs")
        })?;
        count += 1;
        gpus = gpus.min(g);
    }
    if count == 0 || gpus <= 0 {
        bail!(
            "gang-check needs schedulable nodes with GPUs; found {count} nodes, the fewest GPUs {gpus}"
        );
    }
    Ok((count, gpus))
}

/// How many pods of gang `group` (pods named `group-p*`) have a node.
fn bound_in(pods: &[Pod], group: &str) -> usize {
    let prefix = format!("{group}-p");
    pods.iter()
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| !n.is_empty())
        })
        .count()
}

/// Creates gang `group` of `size` pods of `gpus` GPUs each.
async fn create_gang(
    client: &kube::Client,
    ns: &str,
    mode: &Mode,
    group: &'static str,
    size: usize,
    gpus: i64,
) -> Result<()> {
    let api = mode.gangs().map(|a| match a {
        GangApi::Native { .. } => GangApi::Native { template: group },
        volcano => volcano,
    });
    if let Some(a) = api {
        let obj: DynamicObject = serde_json::from_value(pod_group_json(a, ns, group, size, None))?;
        pod_group_api(client, ns, a)
            .create(&PostParams::default(), &obj)
            .await
            .with_context(|| format!("creating PodGroup {ns}/{group}"))?;
    }
    let pods = crate::kube::pods_dynamic(client, ns);
    for i in 0..size {
        let name = format!("{group}-p{i}");
        let pod = pod_json(&name, mode.scheduler_name(), api.map(|a| (a, group)), gpus);
        let pod: DynamicObject = serde_json::from_value(pod)?;
        pods.create(&PostParams::default(), &pod)
            .await
            .with_context(|| format!("creating pod {ns}/{name}"))?;
    }
    Ok(())
}

/// Runs the check; the outcome whatever it was (`verdict` judges it).
pub fn measure(c: &GangCheck) -> Result<GangCheckOutcome> {
    let mode = Mode::parse(&c.scheduler);
    if mode == Mode::Trivial {
        bail!("--scheduler trivial binds every pod by design; gang-check is for schedulers");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let client = rt
        .block_on(make_client(Some(&c.kubeconfig)))
        .map_err(|e| anyhow!("{e}; is the testbed up? (deploy/testbed/testbed up --nodes 50)"))?;
    rt.block_on(crate::kube::install_crds(&client))?;
    if mode == Mode::NativeGang {
        rt.block_on(native_gang::check_served(&client))?;
    }
    let (nodes, gpus) = rt.block_on(node_shape(&client))?;
    let ns = rt.block_on(crate::kube::create_run_namespace(&client, "gang-check"))?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let temp = tempfile::Builder::new()
        .prefix("phalanx-gang-check-")
        .tempdir()?;
    let replicas = if mode == Mode::Phalanx {
        crate::kube::start_phalanx(&one_replica(c), temp.path(), &ns)?
    } else {
        Vec::new()
    };
    let too_big = nodes + 1;
    let outcome = rt.block_on(async {
        if let Some(GangApi::Native { .. }) = mode.gangs() {
            let workload: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &native_gang::workload_resource());
            let obj: DynamicObject = serde_json::from_value(native_gang::workload(
                &ns,
                &[("too-big", too_big), ("fits", FITS)],
            ))?;
            workload
                .create(&PostParams::default(), &obj)
                .await
                .with_context(|| format!("creating Workload {ns}/{}", native_gang::WORKLOAD))?;
        }
        create_gang(&client, &ns, &mode, "too-big", too_big, gpus).await?;
        let fits_created = Instant::now();
        create_gang(&client, &ns, &mode, "fits", FITS, 1).await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let mut fits_bound_in = None;
        let mut settled_at = None;
        loop {
            let list = pods.list(&ListParams::default()).await?.items;
            let (fits_bound, too_big_bound) = (bound_in(&list, "fits"), bound_in(&list, "too-big"));
            if fits_bound == FITS && fits_bound_in.is_none() {
                fits_bound_in = Some(fits_created.elapsed());
                settled_at = Some(Instant::now() + c.settle);
            }
            let done = settled_at.is_some_and(|t| Instant::now() >= t)
                || (fits_bound_in.is_none() && fits_created.elapsed() > c.timeout);
            if done {
                return anyhow::Ok(GangCheckOutcome {
                    nodes,
                    gpus_per_node: gpus,
                    too_big_pods: too_big,
                    too_big_bound,
                    fits_bound,
                    fits_bound_in,
                });
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    drop(replicas);
    // Clean up whatever the outcome: the pods, the PodGroups, the Workload, then the
    // namespace (the testbed runs no namespace controller, so each goes by name). Native
    // PodGroups keep a deletionTimestamp afterwards (seen on the testbed: a finalizer that
    // no controller there removes); they hold no pods.
    let force = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let cleanup = rt.block_on(async {
        pods.delete_collection(&force, &ListParams::default())
            .await?;
        if let Some(api) = mode.gangs() {
            pod_group_api(&client, &ns, api)
                .delete_collection(&DeleteParams::default(), &ListParams::default())
                .await?;
        }
        if let Some(GangApi::Native { .. }) = mode.gangs() {
            let workload: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &native_gang::workload_resource());
            workload
                .delete(native_gang::WORKLOAD, &DeleteParams::default())
                .await?;
        }
        namespaces.delete(&ns, &DeleteParams::default()).await?;
        anyhow::Ok(())
    });
    let outcome = outcome?;
    cleanup.with_context(|| format!("cleaning up namespace {ns}"))?;
    Ok(outcome)
}

/// The settings `start_phalanx` reads, for one replica of default settings.
fn one_replica(c: &GangCheck) -> KubeBench {
    KubeBench {
        kubeconfig: c.kubeconfig.clone(),
        scheduler: "phalanx".into(),
        replicas: 1,
        pods: 0,
        gang: FITS,
        gpus_per_pod: 0,
        kube_qps: 50.0,
        kube_burst: 100,
        bind_workers: 16,
        max_pods_per_cycle: None,
        period_ms: 200,
        phalanx: c.phalanx.clone(),
        timeout: c.timeout,
        create_concurrency: 1,
        shards: 1,
        queues: 0,
        rss_pid: None,
    }
}

/// The subcommand: the check, its line, and an error when the rule was broken.
pub fn run(c: &GangCheck) -> Result<()> {
    let outcome = measure(c)?;
    match outcome.verdict() {
        Ok(line) => {
            println!("gang-check {}: {line}", c.scheduler);
            Ok(())
        }
        Err(why) => bail!("gang-check {}: {why}", c.scheduler),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn seen(too_big_bound: usize, fits_bound: usize) -> GangCheckOutcome {
        GangCheckOutcome {
            nodes: 50,
            gpus_per_node: 8,
            too_big_pods: 51,
            too_big_bound,
            fits_bound,
            fits_bound_in: (fits_bound == FITS).then_some(Duration::from_millis(2_300)),
        }
    }

    #[test]
    fn a_gang_bound_in_part_fails_the_check_and_one_bound_whole_passes() {
        let ok = seen(0, 10).verdict().unwrap();
        assert!(
            ok.starts_with(
                "all or nothing: gang fits bound whole in 2.3 s, gang too-big 0 of 51 bound"
            ),
            "{ok}"
        );
        // What kube-scheduler without gangs does: 40 of the 51 bound.
        let e = seen(40, 10).verdict().unwrap_err();
        assert!(
            e.starts_with("not all or nothing: gang too-big has 40 of its 51 pods bound"),
            "{e}"
        );
        let e = seen(0, 3).verdict().unwrap_err();
        assert!(
            e.starts_with("gang fits has only 3 of 10 pods bound"),
            "{e}"
        );
    }

    #[test]
    fn pods_are_counted_bound_per_gang_by_name() {
        let pod = |name: &str, node: Option<&str>| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"containers": [], "nodeName": node},
            }))
            .unwrap()
        };
        let pods = [
            pod("fits-p0", Some("n1")),
            pod("fits-p1", None),
            pod("too-big-p0", Some("")),
            pod("too-big-p1", Some("n2")),
        ];
        assert_eq!(bound_in(&pods, "fits"), 1);
        assert_eq!(bound_in(&pods, "too-big"), 1);
    }
}
