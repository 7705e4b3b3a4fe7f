//! The Helm chart `deploy/helm/phalanx`: what `helm template` renders, and the rendered
//! replicas run as processes against the testbed.
//!
//! The checks of rendered YAML need the helm binary (`deploy/testbed/testbed build --helm`;
//! `$PHALANX_HELM` overrides), the replicas' run needs a testbed with the chart installed: both
//! are `#[ignore]`d and run by `deploy/helm/test/e2e.sh`, which builds helm, brings the
//! testbed up and installs the chart first. The check that the chart's CRDs are
//! `deploy/crds/` needs nothing and always runs.

#[path = "helm_chart/chart.rs"]
mod chart;
#[path = "helm_chart/pod_process.rs"]
mod pod_process;

use std::collections::BTreeMap;

use chart::{
    Rendered, container, find, objects_of_kind, read_repo_file, render, render_args, repo_root,
    statefulset,
};
use serde_json::{Value, json};

const NS: &str = "phalanx-system";

#[test]
fn the_charts_crds_are_deploy_crds_byte_for_byte() {
    for f in ["podgroups.yaml", "queues.yaml"] {
        let chart = read_repo_file(&format!("deploy/helm/phalanx/crds/{f}"));
        let source = read_repo_file(&format!("deploy/crds/{f}"));
        assert!(
            chart == source,
            "deploy/helm/phalanx/crds/{f} differs from deploy/crds/{f}: copy it again (cp deploy/crds/*.yaml deploy/helm/phalanx/crds/)"
        );
    }
    let names: Vec<String> = std::fs::read_dir(repo_root().join("deploy/helm/phalanx/crds"))
        .expect("the chart has crds/")
        .map(|e| {
            e.expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(names.len(), 2, "crds/ holds only the two CRDs: {names:?}");
}

#[test]
fn the_charts_command_is_the_images_entrypoint() {
    let dockerfile = read_repo_file("deploy/Dockerfile");
    let entrypoint = dockerfile
        .lines()
        .find(|l| l.starts_with("ENTRYPOINT"))
        .expect("deploy/Dockerfile has an ENTRYPOINT");
    let template = read_repo_file("deploy/helm/phalanx/templates/statefulset.yaml");
    let command = template
        .lines()
        .skip_while(|l| l.trim() != "command:")
        .nth(1)
        .expect("the StatefulSet template spells out command")
        .trim()
        .trim_start_matches("- ")
        .to_string();
    assert_eq!(entrypoint, format!("ENTRYPOINT [\"{command}\"]"));
}

#[test]
#[ignore = "needs helm: deploy/testbed/testbed build --helm (run by deploy/helm/test/e2e.sh)"]
fn the_default_chart_runs_three_parallel_replicas_each_with_a_claim() {
    let docs = render(NS, &[]);
    let sts = statefulset(&docs);
    let spec = &sts["spec"];
    assert_eq!(spec["replicas"], json!(3));
    assert_eq!(spec["podManagementPolicy"], json!("Parallel"));
    assert_eq!(spec["serviceName"], json!("phalanx-peers"));
    let claims = spec["volumeClaimTemplates"].as_array().expect("claims");
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0]["metadata"]["name"], json!("data"));
    let c = container(&docs);
    let data = c["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["name"] == "data")
        .expect("the claim is mounted");
    assert!(args(&docs).contains(&format!(
        "--data-dir={}",
        data["mountPath"].as_str().expect("a path")
    )));
    let peers = find(&docs, "Service", "phalanx-peers");
    assert_eq!(peers["spec"]["clusterIP"], json!("None"));
    assert_eq!(peers["spec"]["publishNotReadyAddresses"], json!(true));
    assert_eq!(
        sts["spec"]["template"]["spec"]["priorityClassName"],
        json!("system-cluster-critical")
    );
}

#[test]
#[ignore = "needs helm: deploy/testbed/testbed build --helm (run by deploy/helm/test/e2e.sh)"]
fn peers_name_every_replica_by_its_stable_dns_name_for_3_and_5_replicas() {
    for n in [3usize, 5] {
        let docs = render(NS, &[format!("replicas={n}").as_str()]);
        let expected: Vec<String> = (0..n)
            .map(|i| {
                format!(
                    "{}=phalanx-{i}.phalanx-peers.{NS}.svc.cluster.local:7001",
                    i + 1
                )
            })
            .collect();
        let a = args(&docs);
        assert!(
            a.contains(&format!("--peers={}", expected.join(","))),
            "{n} replicas: {a:?}"
        );
        assert!(a.contains(&"--id-from-pod-name=$(POD_NAME)".to_string()));
        assert_eq!(statefulset(&docs)["spec"]["replicas"], json!(n));
    }
    let docs = render(
        "team-a",
        &[
            "fullnameOverride=sched",
            "clusterDomain=corp.example",
            "ports.raft=9000",
        ],
    );
    assert!(args(&docs).contains(
        &"--peers=1=sched-0.sched-peers.team-a.svc.corp.example:9000,2=sched-1.sched-peers.team-a.svc.corp.example:9000,3=sched-2.sched-peers.team-a.svc.corp.example:9000"
            .to_string()
    ));
    assert!(args(&docs).contains(&"--listen=0.0.0.0:9000".to_string()));
}

/// The rendered container port `name` and the peers Service's port
/// whose targetPort names it.
fn port_named(docs: &Rendered, name: &str) -> (Option<i64>, Option<i64>) {
    let container_port = container(docs)["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .find(|p| p["name"] == name)
        .and_then(|p| p["containerPort"].as_i64());
    let service = find(docs, "Service", &peers_service_name(docs));
    let service_port = service["spec"]["ports"]
        .as_array()
        .expect("the Service's ports")
        .iter()
        .find(|p| p["name"] == name && p["targetPort"] == name)
        .and_then(|p| p["port"].as_i64());
    (container_port, service_port)
}

fn peers_service_name(docs: &Rendered) -> String {
    statefulset(docs)["spec"]["serviceName"]
        .as_str()
        .expect("a serviceName")
        .to_string()
}

#[test]
#[ignore = "needs helm: deploy/testbed/testbed build --helm (run by deploy/helm/test/e2e.sh)"]
fn every_replica_serves_the_admin_service_and_names_the_others_by_their_stable_dns_names() {
    for n in [3usize, 5] {
        let docs = render(NS, &[format!("replicas={n}").as_str()]);
        let expected: Vec<String> = (0..n)
            .map(|i| {
                format!(
                    "{}=phalanx-{i}.phalanx-peers.{NS}.svc.cluster.local:7003",
                    i + 1
                )
            })
            .collect();
        let a = args(&docs);
        assert!(
            a.contains(&format!("--admin-peers={}", expected.join(","))),
            "{n} replicas: {a:?}"
        );
        assert!(
            a.contains(&"--admin-listen=0.0.0.0:7003".to_string()),
            "{a:?}"
        );
        assert_eq!(port_named(&docs, "admin"), (Some(7003), Some(7003)));
    }
    let docs = render(
        "team-a",
        &[
            "fullnameOverride=sched",
            "clusterDomain=corp.example",
            "ports.admin=9100",
            "listenAddress=::",
        ],
    );
    let a = args(&docs);
    assert!(a.contains(&"--admin-listen=[::]:9100".to_string()), "{a:?}");
    assert!(a.contains(
        &"--admin-peers=1=sched-0.sched-peers.team-a.svc.corp.example:9100,2=sched-1.sched-peers.team-a.svc.corp.example:9100,3=sched-2.sched-peers.team-a.svc.corp.example:9100"
            .to_string()
    ), "{a:?}");
    assert_eq!(port_named(&docs, "admin"), (Some(9100), Some(9100)));
    // The admin port is its own: the ledger's peers and the probes keep theirs.
    assert!(a.contains(&"--listen=[::]:7001".to_string()), "{a:?}");
    let err = chart::render_err(NS, &["ports.admin=0"]);
    assert!(err.contains("admin"), "--set ports.admin=0: {err}");
}

#[test]
#[ignore = "needs helm: deploy/testbed/testbed build --helm (run by deploy/helm/test/e2e.sh)"]
fn the_network_policy_opens_the_admin_port_to_the_replicas_and_to_admin_from_only() {
    let docs = render(NS, &["networkPolicy.enabled=true"]);
    let policy = find(&docs, "NetworkPolicy", "phalanx");
    let ingress = policy["spec"]["ingress"].as_array().expect("ingress");
    let replicas = json!([{"podSelector": {"matchLabels": statefulset(&docs)["spec"]["selector"]["matchLabels"]}}]);
    let to_admin: Vec<&Value> = ingress
        .iter()
        .filter(|r| {
            r["ports"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p["port"] == "admin"))
        })
        .collect();
    assert_eq!(to_admin.len(), 1, "{ingress:?}");
    assert_eq!(to_admin[0]["from"], replicas);
    let docs = render(
        NS,
        &[
            "networkPolicy.enabled=true",
            "networkPolicy.adminFrom[0].namespaceSelector.matchLabels.team=ops",
        ],
    );
    let policy = find(&docs, "NetworkPolicy", "phalanx");
    let ingress = policy["spec"]["ingress"].as_array().expect("ingress");
    let ops = ingress
        .iter()
        .find(|r| r["from"] == json!([{"namespaceSelector": {"matchLabels": {"team": "ops"}}}]))
        .unwrap_or_else(|| panic!("no rule from adminFrom: {ingress:?}"));
    assert_eq!(ops["ports"], json!([{"port": "admin", "protocol": "TCP"}]));
}

#[test]
#[ignore = "needs helm: deploy/testbed/testbed build --helm (run by deploy/helm/test/e2e.sh)"]
fn the_pods_meet_pod_security_restricted() {
    let docs = render(NS, &[]);
    let pod = &statefulset(&docs)["spec"]["template"]["spec"];
    let psc = &pod["securityContext"];
    assert_eq!(psc["runAsNonRoot"], json!(true));
    assert_eq!(psc["seccompProfile"]["type"], json!("RuntimeDefault"));
    assert_ne!(psc["runAsUser"], json!(0));
    let sc = &container(&docs)["securityContext"];
    assert_eq!(sc["runAsNonRoot"], json!(true));
    assert_eq!(sc["allowPrivilegeEscalation"], json!(false));
    assert_eq!(sc["readOnlyRootFilesystem"], json!(true));
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert!(sc["capabilities"].get("add").is_none());
    assert_eq!(sc["seccompProfile"]["type"], json!("RuntimeDefault"));
    // restricted allows only these volume types (the claim is a persistentVolumeClaim).
    for v in pod["volumes"].as_array().expect("volumes") {
        let kind: Vec<&String> = v
            .as_object()
            .expect("a volume")
            .keys()
            .filter(|k| *k != "name")
            .collect();
        assert!(
            matches!(
                kind[0].as_str(),
                "configMap" | "emptyDir" | "secret" | "projected"
            ),
            "volume {v}"
        );
    }
    assert!(pod.get("hostNetwork").is_none() && pod.get("hostPID").is_none());
}

#[test]
#[ignore = "needs helm: deploy/testbed/testbed build --helm (run by deploy/helm/test/e2e.sh)"]
fn the_cluster_role_grants_exactly_what_serve_uses() {
    let docs = render(NS, &[]);
    // Without jobController.enabled, no pod (or anything else) can be deleted.
    assert_eq!(cluster_rules(&docs), rules(&serve_rules()));
    assert!(!args(&docs).contains(&"--job-controller".to_string()));
    let binding = find(&docs, "ClusterRoleBinding", "phalanx");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "phalanx", "namespace": NS}])
    );
    assert_eq!(binding["roleRef"]["name"], json!("phalanx"));
    // Leases (liveness for shard assignment): in the release's namespace only.
    let role = find(&docs, "Role", "phalanx-leases");
    assert_eq!(role["metadata"]["namespace"], json!(NS));
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list", "create", "patch"]}])
    );
    let binding = find(&docs, "RoleBinding", "phalanx-leases");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "phalanx", "namespace": NS}])
    );
    assert_eq!(binding["roleRef"]["kind"], json!("Role"));
    assert!(args(&docs).contains(&format!("--lease-namespace={NS}")));
    let sts = statefulset(&docs);
    assert_eq!(
        sts["spec"]["template"]["spec"]["serviceAccountName"],
        json!("phalanx")
    );
    assert!(
        !args(&docs).iter().any(|a| a.contains("install-crds")),
        "serve must not install CRDs: the chart does"
    );
}

#[test]
#[ignore = "needs helm: deploy/testbed/testbed build --helm (run by deploy/helm/test/e2e.sh)"]
fn the_job_controller_value_adds_the_flag_and_exactly_the_rights_the_controller_uses() {
    let docs = render(NS, &["jobController.enabled=true"]);
    let mut want = serve_rules();
    want.extend([
        ("batch.volcano.sh", "jobs", &["get", "list", "watch"][..]),
        ("batch.volcano.sh", "jobs/status", &["patch", "update"][..]),
        ("", "pods", &["create", "delete"][..]),
        (
            "scheduling.volcano.sh",
            "podgroups",
            &["create", "delete"][..],
        ),
    ]);
    assert_eq!(cluster_rules(&docs), rules(&want));
    assert!(args(&docs).contains(&"--job-controller".to_string()));
}

type Rules = BTreeMap<(String, String), Vec<String>>;

/// The ClusterRole's rules as (group, resource) -> sorted verbs.
fn cluster_rules(docs: &Rendered) -> Rules {
    let role = find(docs, "ClusterRole", "phalanx");
    let mut got = Rules::new();
    for rule in role["rules"].as_array().expect("rules") {
        assert!(rule.get("resourceNames").is_none() && rule.get("nonResourceURLs").is_none());
        for g in strings(&rule["apiGroups"]) {
            for r in strings(&rule["resources"]) {
                let verbs = got.entry((g.clone(), r)).or_default();
                verbs.extend(strings(&rule["verbs"]));
                verbs.sort();
            }
        }
    }
    got
}

/// What serve's scheduling uses: the caches list and watch; only pods are ever read one
/// by one (get).
fn serve_rules() -> Vec<(&'static str, &'static str, &'static [&'static str])> {
    let cache: &[&str] = &["list", "watch"];
    vec![
        ("", "nodes", cache),
        ("", "pods", &["get", "list", "watch"]),
        ("", "pods/binding", &["create"]),
        ("", "pods/eviction", &["create"]),
        ("scheduling.k8s.io", "priorityclasses", cache),
        (
            "scheduling.volcano.sh",
            "podgroups",
            &["list", "patch", "watch"],
        ),
        ("scheduling.volcano.sh", "queues", cache),
        ("events.k8s.io", "events", &["create"]),
    ]
}

fn rules(list: &[(&str, &str, &[&str])]) -> Rules {
    let mut out = Rules::new();
    for (g, r, verbs) in list {
        let v = out.entry((g.to_string(), r.to_string())).or_default();
        v.extend(verbs.iter().map(|s| s.to_string()));
        v.sort();
    }
    out
}

#[test]
#[ignore = "needs helm: deploy/testbed/testbed build --helm (run by deploy/helm/test/e2e.sh)"]
fn the_disruption_budget_lets_one_replica_go_at_a_time() {
    let docs = render(NS, &[]);
    let pdb = find(&docs, "PodDisruptionBudget", "phalanx");
    assert_eq!(pdb["spec"]["maxUnavailable"], json!(1));
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        statefulset(&docs)["spec"]["selector"]["matchLabels"]
    );
    let off = render(NS, &["podDisruptionBudget.enabled=false"]);
    assert!(objects_of_kind(&off, "PodDisruptionBudget").is_empty());
}

#[test]
#[ignore = "needs helm: deploy/testbed/testbed build --helm (run by deploy/helm/test/e2e.sh)"]
fn replicas_avoid_sharing_a_node_and_spread_over_zones_without_requiring_them() {
    let docs = render(NS, &[]);
    let pod = &statefulset(&docs)["spec"]["template"]["spec"];
    let selector = &statefulset(&docs)["spec"]["selector"]["matchLabels"];
    let anti =
        &pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    assert_eq!(anti[0]["topologyKey"], json!("kubernetes.io/hostname"));
    assert_eq!(&anti[0]["labelSelector"]["matchLabels"], selector);
    let spread = &pod["topologySpreadConstraints"][0];
    assert_eq!(spread["topologyKey"], json!("topology.kubernetes.io/zone"));
    assert_eq!(spread["whenUnsatisfiable"], json!("ScheduleAnyway"));
    assert_eq!(&spread["labelSelector"]["matchLabels"], selector);
    let soft = render(NS, &["podAntiAffinity=preferred"]);
    let pod = &statefulset(&soft)["spec"]["template"]["spec"];
    assert!(
        pod["affinity"]["podAntiAffinity"]
            .get("requiredDuringSchedulingIgnoredDuringExecution")
            .is_none()
    );
}

#[test]
#[ignore = "needs helm: deploy/testbed/testbed build --helm (run by deploy/helm/test/e2e.sh)"]
fn probes_ask_serve_for_healthz_and_readyz_on_its_http_port() {
    let docs = render(NS, &[]);
    let c = container(&docs);
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "http"})
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "http"})
    );
    let http = c["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .find(|p| p["name"] == "http")
        .expect("an http port");
    assert!(args(&docs).contains(&format!(
        "--http=0.0.0.0:{}",
        http["containerPort"].as_i64().expect("a port")
    )));
}

#[test]
#[ignore = "needs helm: deploy/testbed/testbed build --helm (run by deploy/helm/test/e2e.sh)"]
fn the_default_scheduler_conf_is_phalanxs_built_in_one_and_a_users_replaces_it() {
    let docs = render(NS, &[]);
    let cm = find(&docs, "ConfigMap", "phalanx-config");
    let text = cm["data"]["volcano-scheduler.conf"]
        .as_str()
        .expect("the conf");
    assert_eq!(
        text.trim(),
        phalanx_scheduler::framework::conf::DEFAULT_CONF.trim()
    );
    assert!(args(&docs).contains(&"--config=/etc/phalanx/volcano-scheduler.conf".to_string()));
    let mine = "actions: \"enqueue, allocate\"\ntiers:\n- plugins:\n  - name: gang\n";
    let file = tempfile::NamedTempFile::new().expect("a temp file");
    std::fs::write(file.path(), mine).expect("the conf is written");
    let docs = render_args(
        NS,
        &[
            "--set-file".into(),
            format!("scheduler.config={}", file.path().display()),
        ],
    );
    let cm = find(&docs, "ConfigMap", "phalanx-config");
    assert_eq!(
        cm["data"]["volcano-scheduler.conf"].as_str().map(str::trim),
        Some(mine.trim())
    );
    let checksums: Vec<Value> = [render(NS, &[]), docs]
        .iter()
        .map(|d| {
            statefulset(d)["spec"]["template"]["metadata"]["annotations"]["checksum/config"].clone()
        })
        .collect();
    assert_ne!(
        checksums[0], checksums[1],
        "a new conf must restart the replicas"
    );
}

#[test]
#[ignore = "needs helm: deploy/testbed/testbed build --helm (run by deploy/helm/test/e2e.sh)"]
fn serve_flags_and_resources_follow_the_values() {
    let docs = render(
        NS,
        &[
            "scheduler.name=gang",
            "scheduler.periodMs=250",
            "scheduler.kubeQps=20",
            "scheduler.kubeBurst=40",
            "scheduler.bindWorkers=48",
            "scheduler.maxPodsPerCycle=250",
            "scheduler.syncTimeoutSeconds=120",
            "scheduler.snapshotEvery=200",
            "scheduler.raft.heartbeatMs=20",
            "scheduler.raft.electionMinMs=50",
            "scheduler.raft.electionMaxMs=100",
            "scheduler.logLevel=debug",
            "scheduler.extraArgs[0]=--install-nothing",
            "scheduler.shards=4",
            "scheduler.shardByLabel=topology.kubernetes.io/zone",
            "scheduler.shardLeaseMs=900",
            "resources.limits.memory=3Gi",
            "priorityClassName=",
        ],
    );
    let a = args(&docs);
    for want in [
        "--scheduler-name=gang",
        "--period-ms=250",
        "--kube-qps=20",
        "--kube-burst=40",
        "--bind-workers=48",
        "--max-pods-per-cycle=250",
        "--sync-timeout-s=120",
        "--snapshot-every=200",
        "--raft-heartbeat-ms=20",
        "--raft-election-min-ms=50",
        "--raft-election-max-ms=100",
        "--install-nothing",
        "--shards=4",
        "--shard-by-label=topology.kubernetes.io/zone",
        "--shard-lease-ms=900",
        "--coord-listen=0.0.0.0:7002",
        "--coord-peers=1=phalanx-0.phalanx-peers.phalanx-system.svc.cluster.local:7002,2=phalanx-1.phalanx-peers.phalanx-system.svc.cluster.local:7002,3=phalanx-2.phalanx-peers.phalanx-system.svc.cluster.local:7002",
    ] {
        assert!(a.contains(&want.to_string()), "{want} in {a:?}");
    }
    assert!(
        !args(&render(NS, &[]))
            .iter()
            .any(|a| a.starts_with("--coord")),
        "one shard: no 2PC service"
    );
    let c = container(&docs);
    assert_eq!(c["resources"]["limits"]["memory"], json!("3Gi"));
    assert!(c["resources"]["requests"]["cpu"].is_string());
    let log = c["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "PHALANX_LOG")
        .expect("PHALANX_LOG");
    assert_eq!(log["value"], json!("debug"));
    assert!(
        statefulset(&docs)["spec"]["template"]["spec"]
            .get("priorityClassName")
            .is_none()
    );
}

#[test]
#[ignore = "needs helm: deploy/testbed/testbed build --helm (run by deploy/helm/test/e2e.sh)"]
fn monitoring_and_network_policy_objects_appear_only_when_enabled() {
    let docs = render(NS, &[]);
    for kind in ["ServiceMonitor", "PrometheusRule", "NetworkPolicy"] {
        assert!(
            objects_of_kind(&docs, kind).is_empty(),
            "{kind} is off by default"
        );
    }
    let docs = render(
        NS,
        &[
            "metrics.serviceMonitor.enabled=true",
            "metrics.prometheusRule.enabled=true",
            "networkPolicy.enabled=true",
        ],
    );
    let rule = find(&docs, "PrometheusRule", "phalanx");
    let alerts: Vec<&Value> = rule["spec"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules"))
        .collect();
    let seed = alerts
        .iter()
        .find(|a| a["alert"] == "PodGroupPendingTooLong")
        .expect("the seed article's alert");
    // The seed's alert as docs/operations.md writes it on phalanx's names (the exposition
    // test checks that this selects a PodGroup pending two hours).
    assert_eq!(
        seed["expr"],
        json!("phalanx_podgroup_status{phase=\"Pending\"} > 3600")
    );
    assert_eq!(
        seed["annotations"]["summary"],
        json!("PodGroup {{ $labels.namespace }}/{{ $labels.name }} pending over 1 hour")
    );
    let inqueue = alerts
        .iter()
        .find(|a| a["alert"] == "PodGroupInqueueTooLong")
        .expect("the alert for a gang admitted but never placed");
    assert_eq!(
        inqueue["expr"],
        json!("phalanx_podgroup_status{phase=\"Inqueue\"} > 3600")
    );
    let monitor = find(&docs, "ServiceMonitor", "phalanx");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], json!("http"));
    let policy = find(&docs, "NetworkPolicy", "phalanx");
    let raft = &policy["spec"]["ingress"][0];
    assert_eq!(
        raft["ports"],
        json!([{"port": "raft", "protocol": "TCP"}, {"port": "admin", "protocol": "TCP"}])
    );
    assert_eq!(
        raft["from"],
        json!([{"podSelector": {"matchLabels": statefulset(&docs)["spec"]["selector"]["matchLabels"]}}])
    );
    assert_eq!(policy["spec"]["ingress"].as_array().map(Vec::len), Some(2));
}

#[test]
#[ignore = "needs helm: deploy/testbed/testbed build --helm (run by deploy/helm/test/e2e.sh)"]
fn bad_values_are_refused_with_the_key_named() {
    for (set, says) in [
        ("replicas=0", "replicas"),
        ("podAntiAffinity=sometimes", "podAntiAffinity"),
        ("scheduler.periodMs=1", "periodMs"),
        ("persistence.size=lots", "size"),
        ("replicaz=3", "replicaz"),
        ("scheduler.shards=0", "shards"),
        ("scheduler.snapshotEvery=0", "snapshotEvery"),
        ("scheduler.raft.heartbeatMs=4", "heartbeatMs"),
        (
            "scheduler.raft.electionMinMs=40",
            "need heartbeatMs 40 < electionMinMs 40 < electionMaxMs 200",
        ),
        ("scheduler.raft.electionMaxMs=100", "electionMaxMs 100"),
        ("scheduler.raft.electionMs=100", "electionMs"),
        ("scheduler.shardByLabel=a b", "shardByLabel"),
        (
            "scheduler.shards=4,scheduler.shardLeaseMs=1500",
            "shardLeaseMs 1500",
        ),
    ] {
        let err = chart::render_err(NS, &[set]);
        assert!(err.contains(says), "--set {set}: {err}");
    }
}

fn args(docs: &Rendered) -> Vec<String> {
    strings(&container(docs)["args"])
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
#[ignore = "needs the testbed with the chart installed (run by deploy/helm/test/e2e.sh)"]
fn the_installed_statefulsets_pods_as_processes_place_gangs_through_a_killed_leader_and_a_rolling_restart()
 {
    pod_process::run_installed_release();
}

/// The projected TLS volume's items as (Secret, key, path).
fn tls_items(docs: &Rendered) -> Vec<(String, String, String)> {
    let volumes = statefulset(docs)["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .expect("volumes");
    let tls = volumes
        .iter()
        .find(|v| v["name"] == "tls")
        .expect("a volume named tls");
    assert_eq!(tls["projected"]["defaultMode"], json!(0o440));
    let mut items = Vec::new();
    for source in tls["projected"]["sources"].as_array().expect("sources") {
        let secret = &source["secret"];
        let name = secret["name"].as_str().expect("a Secret name");
        for item in secret["items"].as_array().expect("items listed") {
            let key = item["key"].as_str().expect("a key");
            let path = item["path"].as_str().expect("a path");
            items.push((name.to_string(), key.to_string(), path.to_string()));
        }
    }
    items
}

/// `--tls-cert/--tls-key/--tls-ca` as pod `pod` resolves them (`$(POD_NAME)` expanded).
fn tls_paths(docs: &Rendered, pod: &str) -> [String; 3] {
    let env = BTreeMap::from([("POD_NAME".to_string(), pod.to_string())]);
    let a = args(docs);
    let value = |flag: &str| {
        let v = a
            .iter()
            .find_map(|x| x.strip_prefix(&format!("{flag}=")))
            .unwrap_or_else(|| panic!("no {flag} in {a:?}"));
        pod_process::expand(v, &env)
    };
    [value("--tls-cert"), value("--tls-key"), value("--tls-ca")]
}

#[test]
#[ignore = "needs helm: deploy/testbed/testbed build --helm (run by deploy/helm/test/e2e.sh)"]
fn tls_is_on_by_default_and_each_pod_gets_the_secrets_certificate_of_its_own_replica_id() {
    for (sets, replicas, secret) in [
        (vec![], 3, "phalanx-tls"),
        (vec!["replicas=5", "tls.secretName=my-certs"], 5, "my-certs"),
    ] {
        let docs = render(NS, &sets);
        let a = args(&docs);
        assert!(!a.contains(&"--insecure-plaintext".to_string()), "{a:?}");
        let mount = container(&docs)["volumeMounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .find(|m| m["name"] == "tls")
            .expect("the tls volume is mounted")
            .clone();
        assert_eq!(mount["readOnly"], json!(true));
        assert!(mount.get("subPath").is_none(), "a subPath is never updated");
        let dir = mount["mountPath"].as_str().expect("a path").to_string();
        let items = tls_items(&docs);
        assert_eq!(items.len(), 1 + 2 * replicas, "{items:?}");
        for k in 0..replicas {
            let pod = format!("phalanx-{k}");
            // The id serve takes from the pod name is the one the certificate must name.
            let id = phalanx_scheduler::serve::identity::id_from_pod_name(&pod).expect("an id");
            let [cert, key, ca] = tls_paths(&docs, &pod);
            for (path, want_key) in [
                (&cert, format!("replica-{id}.crt")),
                (&key, format!("replica-{id}.key")),
                (&ca, "ca.crt".to_string()),
            ] {
                let file = path
                    .strip_prefix(&format!("{dir}/"))
                    .unwrap_or_else(|| panic!("{path} is not under the mount {dir}"));
                let item = items
                    .iter()
                    .find(|(_, _, p)| p == file)
                    .unwrap_or_else(|| panic!("{pod}: no item writes {file}: {items:?}"));
                assert_eq!((item.0.as_str(), &item.1), (secret, &want_key), "{pod}");
            }
        }
    }
}

#[test]
#[ignore = "needs helm: deploy/testbed/testbed build --helm (run by deploy/helm/test/e2e.sh)"]
fn tls_disabled_passes_insecure_plaintext_and_the_schema_says_it_is_for_tests() {
    let docs = render(NS, &["tls.enabled=false"]);
    let a = args(&docs);
    assert!(a.contains(&"--insecure-plaintext".to_string()), "{a:?}");
    assert!(!a.iter().any(|x| x.starts_with("--tls-")), "{a:?}");
    let pod = &statefulset(&docs)["spec"]["template"]["spec"];
    let volumes = pod["volumes"].as_array().expect("volumes");
    assert!(!volumes.iter().any(|v| v["name"] == "tls"), "{volumes:?}");
    assert!(objects_of_kind(&docs, "Certificate").is_empty());
    let schema: Value =
        serde_json::from_str(&read_repo_file("deploy/helm/phalanx/values.schema.json"))
            .expect("the schema is JSON");
    let enabled = &schema["properties"]["tls"]["properties"]["enabled"]["description"];
    assert!(
        enabled
            .as_str()
            .is_some_and(|d| d.contains("for tests only")),
        "tls.enabled's description: {enabled}"
    );
}

#[test]
#[ignore = "needs helm: deploy/testbed/testbed build --helm (run by deploy/helm/test/e2e.sh)"]
fn cert_manager_renders_one_certificate_per_replica_naming_its_id_and_mounts_its_secret() {
    let docs = render(
        NS,
        &[
            "tls.certManager.enabled=true",
            "tls.certManager.issuerRef.name=phalanx-ca",
            "tls.certManager.issuerRef.kind=ClusterIssuer",
        ],
    );
    let certs = objects_of_kind(&docs, "Certificate");
    assert_eq!(certs.len(), 3);
    let items = tls_items(&docs);
    for k in 0..3u64 {
        let id = k + 1;
        let c = find(&docs, "Certificate", &format!("phalanx-replica-{id}"));
        assert_eq!(c["apiVersion"], json!("cert-manager.io/v1"));
        let spec = &c["spec"];
        assert_eq!(spec["dnsNames"], json!([format!("replica-{id}.phalanx")]));
        let usages = strings(&spec["usages"]);
        assert!(usages.contains(&"server auth".to_string()), "{usages:?}");
        assert!(usages.contains(&"client auth".to_string()), "{usages:?}");
        assert_eq!(
            spec["issuerRef"],
            json!({"name": "phalanx-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"})
        );
        let secret = spec["secretName"].as_str().expect("a secretName");
        let [cert, key, _] = tls_paths(&docs, &format!("phalanx-{k}"));
        for (path, want) in [(cert, "tls.crt"), (key, "tls.key")] {
            let file = path.rsplit('/').next().expect("a file name");
            assert!(
                items.contains(&(secret.to_string(), want.to_string(), file.to_string())),
                "replica {id}: {secret}/{want} -> {file} in {items:?}"
            );
        }
    }
    assert!(items.iter().any(|(_, k, p)| k == "ca.crt" && p == "ca.crt"));
    assert!(
        !items.iter().any(|(s, _, _)| s == "phalanx-tls"),
        "{items:?}"
    );
    for (set, says) in [
        (vec!["tls.certManager.enabled=true"], "issuerRef.name"),
        (
            vec![
                "tls.certManager.enabled=true",
                "tls.certManager.issuerRef.name=ca",
                "tls.secretName=mine",
            ],
            "tls.secretName",
        ),
        (
            vec![
                "tls.enabled=false",
                "tls.certManager.enabled=true",
                "tls.certManager.issuerRef.name=ca",
            ],
            "tls.certManager.enabled",
        ),
        (vec!["tls.enabled=yes"], "tls/enabled"),
        (vec!["tls.secretName=Bad_Name"], "secretName"),
    ] {
        let err = chart::render_err(NS, &set);
        assert!(err.contains(says), "--set {set:?}: {err}");
    }
}
