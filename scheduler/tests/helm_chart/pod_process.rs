//! The installed chart's StatefulSet pods run as local processes against the testbed.
//!
//! The testbed has no kubelet that runs containers (kwok only fakes pod phases) and no
//! StatefulSet controller, so nothing creates the replicas' pods. This module does what the
//! controller and the kubelet would: for ordinal `k` it names the pod `<statefulset>-<k>`,
//! takes the container's command, args and env from the StatefulSet *read back from the API
//! server* (what `helm install` created), resolves the env (downward API `metadata.name`,
//! `metadata.namespace`; literal values) and expands `$(VAR)` in the args as the kubelet
//! does. Then it substitutes only what a process on one loopback host cannot have:
//!
//! | in the pod | here | why |
//! |---|---|---|
//! | `/usr/local/bin/phalanx` (the image's entrypoint) | the `phalanx` binary cargo built | no container engine |
//! | `--listen=<addr>:<raft port>` | `127.0.0.1:<raft port of k>` | every pod has its own IP; processes share one |
//! | `--http=<addr>:<http port>` | `127.0.0.1:<http port of k>` | same |
//! | `--admin-listen=<addr>:<admin port>` | `127.0.0.1:<admin port of k>` | same |
//! | `--peers` `<sts>-<j>.<service>.<ns>.svc.<domain>:<raft port>` | `localhost:<raft port of j>` | no cluster DNS; the name must be exactly the pod's stable name. Still a host *name*, so the replicas resolve names as they do in the cluster |
//! | `--admin-peers` `<sts>-<j>.<service>.<ns>.svc.<domain>:<admin port>` | `localhost:<admin port of j>` | same |
//!
//! The loopback ports are the first free ones from `$PHALANX_HELM_PORT_BASE` (27100) up to
//! 32767 (below the kernel's ephemeral range, so no outgoing connection holds one), raft
//! ports first, then http, then admin.
//! | volume mounts (claim, ConfigMap, emptyDir, projected Secrets) | directories under a temp dir; the ConfigMap's keys, and each projected Secret item (key -> path, mode), written as files from the objects read back with the admin kubeconfig (the service account has no Secret rights) | no kubelet |
//! | the service-account token mounted in the pod | `KUBECONFIG` = a kubeconfig holding a token from `kubectl create token <sa>` (`$PHALANX_HELM_SA_KUBECONFIG`) | the in-cluster address is not reachable; the *same identity*, so RBAC is the chart's |
//! | (`HOME`, `TMPDIR`) | per-pod temp dirs; the environment is otherwise cleared | nothing of the test's environment leaks in |
//!
//! Anything else in the spec that this cannot honour (another env source, volume type,
//! probe port, an unexpected peer name) fails the test rather than being skipped.
//!
//! With `$PHALANX_HELM_SCALE_TO` = N it then scales through the chart and back: `helm
//! upgrade --reuse-values --set replicas=N`, the StatefulSet read back again, and its pods
//! stopped, started and rolled as the controller would (`Scale::to`).

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, Pod, Secret, Volume};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::core::DynamicObject;
use phalanx_scheduler::cluster::kube::{make_client, volcano_resource};
use serde_json::json;

use crate::testbed::{GPU, check_no_overcommit, gpu_use_of, http_get, node_of};

/// The image's entrypoint, as deploy/Dockerfile installs it.
const IMAGE_ENTRYPOINT: &str = "/usr/local/bin/phalanx";
const GPUS_PER_NODE: i64 = 8;
const DEADLINE: Duration = Duration::from_secs(90);

/// Where the release is and how to reach it, from the environment e2e.sh sets.
struct Release {
    namespace: String,
    statefulset: String,
    admin_kubeconfig: PathBuf,
    sa_kubeconfig: PathBuf,
    port_base: u16,
    /// Where the test's gangs go (a namespace per run: the testbed has no namespace
    /// controller, so a deleted namespace stays Terminating).
    work_namespace: String,
    /// The helm release, for `helm upgrade --set replicas=N`.
    release: String,
    /// Scale to this many replicas through the chart and back (`PHALANX_HELM_SCALE_TO`).
    scale_to: Option<usize>,
}

impl Release {
    fn from_env() -> Self {
        let var = |k: &str, default: &str| std::env::var(k).unwrap_or_else(|_| default.into());
        let sa = std::env::var_os("PHALANX_HELM_SA_KUBECONFIG").expect(
            "PHALANX_HELM_SA_KUBECONFIG: a kubeconfig with the chart's service-account token (deploy/helm/test/e2e.sh writes it)",
        );
        Self {
            namespace: var("PHALANX_HELM_NAMESPACE", "phalanx-system"),
            statefulset: var("PHALANX_HELM_STATEFULSET", "phalanx"),
            admin_kubeconfig: PathBuf::from(var(
                "PHALANX_E2E_KUBECONFIG",
                "/tmp/phalanx-testbed/kubeconfig",
            )),
            sa_kubeconfig: PathBuf::from(sa),
            port_base: var("PHALANX_HELM_PORT_BASE", "27100")
                .parse()
                .expect("PHALANX_HELM_PORT_BASE is a port number"),
            work_namespace: var("PHALANX_HELM_WORK_NAMESPACE", "helm-e2e"),
            release: var("PHALANX_HELM_RELEASE", "phalanx"),
            scale_to: std::env::var("PHALANX_HELM_SCALE_TO")
                .ok()
                .filter(|n| !n.is_empty())
                .map(|n| n.parse().expect("PHALANX_HELM_SCALE_TO is a replica count")),
        }
    }
}

/// Loopback ports for the replicas: the raft, http and admin port of each ordinal.
struct LocalPorts {
    raft: Vec<u16>,
    http: Vec<u16>,
    admin: Vec<u16>,
}

impl LocalPorts {
    /// The first free ports from `base` up to 32767 (below Linux's ephemeral range, where
    /// any outgoing connection could hold one). Free ones are looked for rather than fixed
    /// offsets used, because a developer's own services may sit in the range.
    fn find(base: u16, replicas: usize) -> Self {
        let mut ports = Self {
            raft: Vec::new(),
            http: Vec::new(),
            admin: Vec::new(),
        };
        ports.grow(base, replicas);
        ports
    }

    /// Ports for the ordinals up to `replicas`, those already given kept.
    fn grow(&mut self, base: u16, replicas: usize) {
        let taken: Vec<u16> = self
            .raft
            .iter()
            .chain(&self.http)
            .chain(&self.admin)
            .copied()
            .collect();
        let mut free = (base..32768).filter(|p| !taken.contains(p) && port_free(*p));
        let mut take = || {
            free.next()
                .expect("free loopback ports between the base and 32767")
        };
        while self.raft.len() < replicas {
            self.raft.push(take());
        }
        while self.http.len() < replicas {
            self.http.push(take());
        }
        while self.admin.len() < replicas {
            self.admin.push(take());
        }
    }
}

/// One replica's process, as the kubelet would start the pod's container.
#[derive(Debug)]
pub struct LocalPod {
    pub pod_name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub http: SocketAddr,
    pub liveness_path: String,
    pub readiness_path: String,
    /// What was substituted, `from -> to`, for the log.
    pub substituted: Vec<String>,
}

/// `$(VAR)` references replaced by `env`'s values, `$$` by `$`; an undefined reference
/// stays as written (the kubelet's rules).
pub fn expand(text: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
            && let Some(value) = env.get(&inner[..end])
        {
            out.push_str(value);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn the_container(sts: &StatefulSet) -> Result<&Container, String> {
    let pod = sts
        .spec
        .template
        .spec
        .as_ref()
        .ok_or("the pod template has no spec")?;
    match pod.containers.as_slice() {
        [c] => Ok(c),
        other => Err(format!("expected one container, found {}", other.len())),
    }
}

fn container_port(c: &Container, name: &str) -> Result<i32, String> {
    c.ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some(name))
        .map(|p| p.container_port)
        .ok_or_else(|| format!("container {} has no port named {name}", c.name))
}

/// The pod's env as the kubelet resolves it.
fn resolve_env(c: &Container, pod: &str, ns: &str) -> Result<BTreeMap<String, String>, String> {
    let mut env = BTreeMap::new();
    for e in c.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (Some(v), None) => expand(v, &env),
            (None, Some(from)) => match from.field_ref.as_ref().map(|f| f.field_path.as_str()) {
                Some("metadata.name") => pod.to_string(),
                Some("metadata.namespace") => ns.to_string(),
                other => return Err(format!("env {}: cannot resolve {other:?} here", e.name)),
            },
            (None, None) => String::new(),
            (Some(_), Some(_)) => return Err(format!("env {}: both value and valueFrom", e.name)),
        };
        env.insert(e.name.clone(), value);
    }
    Ok(env)
}

/// The objects the pod template's volumes name, as the API server has them.
pub struct Sources {
    config_map: ConfigMap,
    /// By name: every Secret a projected volume names.
    secrets: BTreeMap<String, Secret>,
}

/// A projected volume's Secret items written into `local` as the kubelet would: each
/// item's key to its path with its mode (or the volume's default), every key when no
/// items are listed; a missing key is an error (the kubelet keeps the pod from starting).
fn write_projected(v: &Volume, src: &Sources, local: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let projected = v.projected.as_ref().expect("a projected volume");
    let default_mode = projected.default_mode.unwrap_or(0o644);
    for source in projected.sources.iter().flatten() {
        let Some(sel) = &source.secret else {
            return Err(format!("volume {}: only Secret sources here", v.name));
        };
        let secret = src
            .secrets
            .get(&sel.name)
            .ok_or_else(|| format!("volume {}: Secret {} not read", v.name, sel.name))?;
        let data = secret.data.clone().unwrap_or_default();
        let items: Vec<(String, String, Option<i32>)> = match &sel.items {
            Some(items) => items
                .iter()
                .map(|i| (i.key.clone(), i.path.clone(), i.mode))
                .collect(),
            None => data.keys().map(|k| (k.clone(), k.clone(), None)).collect(),
        };
        for (key, path, mode) in items {
            let bytes = data.get(&key).ok_or_else(|| {
                format!(
                    "volume {}: Secret {} has no key {key} (the pod would not start)",
                    v.name, sel.name
                )
            })?;
            let file = local.join(&path);
            std::fs::write(&file, &bytes.0).map_err(|e| format!("{}: {e}", file.display()))?;
            let mode = u32::try_from(mode.unwrap_or(default_mode)).map_err(|e| e.to_string())?;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode))
                .map_err(|e| format!("{}: {e}", file.display()))?;
        }
    }
    Ok(())
}

/// Mount path -> local directory, with the ConfigMap's and Secrets' files written.
fn local_mounts(
    sts: &StatefulSet,
    c: &Container,
    src: &Sources,
    pod: &str,
    dir: &Path,
) -> Result<BTreeMap<String, PathBuf>, String> {
    let cm = &src.config_map;
    let spec = &sts.spec;
    let claims: Vec<String> = spec
        .volume_claim_templates
        .iter()
        .flatten()
        .filter_map(|t| t.metadata.name.clone())
        .collect();
    let volumes = spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.volumes.clone())
        .unwrap_or_default();
    let mut mounts = BTreeMap::new();
    for m in c.volume_mounts.iter().flatten() {
        let local = dir.join(format!("{pod}-{}", m.name));
        std::fs::create_dir_all(&local).map_err(|e| format!("{}: {e}", local.display()))?;
        if !claims.contains(&m.name) {
            let v = volumes
                .iter()
                .find(|v| v.name == m.name)
                .ok_or_else(|| format!("mount {} has no volume", m.name))?;
            if let Some(source) = &v.config_map {
                if Some(&source.name) != cm.metadata.name.as_ref() {
                    return Err(format!("volume {} names ConfigMap {}", v.name, source.name));
                }
                for (key, text) in cm.data.iter().flatten() {
                    std::fs::write(local.join(key), text).map_err(|e| e.to_string())?;
                }
            } else if v.projected.is_some() {
                write_projected(v, src, &local)?;
            } else if v.empty_dir.is_none() {
                return Err(format!(
                    "volume {}: only claims, configMap, projected Secrets and emptyDir here",
                    v.name
                ));
            }
        }
        mounts.insert(m.mount_path.clone(), local);
    }
    Ok(mounts)
}

/// `--peers` (`--admin-peers`) with every `<sts>-<j>.<service>.<ns>.svc...:<port>` as
/// `localhost:<local[j]>`.
fn local_peers(
    value: &str,
    sts: &StatefulSet,
    rel: &Release,
    local: &[u16],
    port_in_pod: i32,
) -> Result<String, String> {
    let name = sts.metadata.name.as_deref().unwrap_or_default();
    let service = sts.spec.service_name.clone().unwrap_or_default();
    let mut out = Vec::new();
    for entry in value.split(',') {
        let (id, addr) = entry
            .split_once('=')
            .ok_or_else(|| format!("peer {entry:?}"))?;
        let (host, port) = addr
            .rsplit_once(':')
            .ok_or_else(|| format!("peer {entry:?}"))?;
        let ordinal: usize = id
            .parse::<usize>()
            .ok()
            .and_then(|i| i.checked_sub(1))
            .ok_or_else(|| format!("peer id {id:?}"))?;
        let stable = format!("{name}-{ordinal}.{service}.{}.svc.", rel.namespace);
        if !host.starts_with(&stable) || port != port_in_pod.to_string() {
            return Err(format!(
                "peer {entry:?} is not {stable}<domain>:{port_in_pod}"
            ));
        }
        let local = local
            .get(ordinal)
            .ok_or_else(|| format!("peer {entry:?}: no replica {ordinal} in the StatefulSet"))?;
        out.push(format!("{id}=localhost:{local}"));
    }
    Ok(out.join(","))
}

fn probe_path(
    probe: Option<&k8s_openapi::api::core::v1::Probe>,
    what: &str,
) -> Result<String, String> {
    let get = probe
        .and_then(|p| p.http_get.as_ref())
        .ok_or_else(|| format!("no {what} httpGet probe"))?;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    if get.port != IntOrString::String("http".into()) {
        return Err(format!(
            "{what} probe port {:?} is not the http port",
            get.port
        ));
    }
    get.path
        .clone()
        .ok_or_else(|| format!("{what} probe has no path"))
}

/// Pod `ordinal` of `sts` as a local process (see the module's table).
fn local_pod(
    sts: &StatefulSet,
    src: &Sources,
    ordinal: usize,
    rel: &Release,
    ports: &LocalPorts,
    dir: &Path,
) -> Result<LocalPod, String> {
    let pod_name = format!(
        "{}-{ordinal}",
        sts.metadata.name.as_deref().unwrap_or_default()
    );
    let c = the_container(sts)?;
    let mut env = resolve_env(c, &pod_name, &rel.namespace)?;
    let mounts = local_mounts(sts, c, src, &pod_name, dir)?;
    let command = c.command.clone().unwrap_or_default();
    if command != [IMAGE_ENTRYPOINT] {
        return Err(format!(
            "command {command:?} is not the image's entrypoint {IMAGE_ENTRYPOINT}"
        ));
    }
    let (raft, http) = (container_port(c, "raft")?, container_port(c, "http")?);
    let admin = container_port(c, "admin")?;
    let http_local: SocketAddr = format!("127.0.0.1:{}", ports.http[ordinal])
        .parse()
        .expect("a loopback address");
    let mut substituted = vec![format!(
        "{IMAGE_ENTRYPOINT} -> {}",
        env!("CARGO_BIN_EXE_phalanx")
    )];
    let mut args = Vec::new();
    for arg in c.args.iter().flatten() {
        let arg = expand(arg, &env);
        let (flag, value) = arg.split_once('=').unwrap_or((arg.as_str(), ""));
        let port_of = |want: i32| {
            value
                .ends_with(&format!(":{want}"))
                .then_some(())
                .ok_or_else(|| format!("{flag}={value} is not on the container port {want}"))
        };
        let local = match flag {
            "--listen" => port_of(raft).map(|()| format!("127.0.0.1:{}", ports.raft[ordinal]))?,
            "--http" => port_of(http).map(|()| http_local.to_string())?,
            "--admin-listen" => {
                port_of(admin).map(|()| format!("127.0.0.1:{}", ports.admin[ordinal]))?
            }
            "--peers" => local_peers(value, sts, rel, &ports.raft, raft)?,
            "--admin-peers" => local_peers(value, sts, rel, &ports.admin, admin)?,
            _ => match mounts
                .iter()
                .find(|(path, _)| value == path.as_str() || value.starts_with(&format!("{path}/")))
            {
                Some((path, local)) => format!("{}{}", local.display(), &value[path.len()..]),
                None => value.to_string(),
            },
        };
        if local != value {
            substituted.push(format!("{flag}={value} -> {local}"));
        }
        args.push(if arg.contains('=') {
            format!("{flag}={local}")
        } else {
            arg.clone()
        });
    }
    env.insert("KUBECONFIG".into(), rel.sa_kubeconfig.display().to_string());
    let home = dir.join(format!("{pod_name}-home"));
    std::fs::create_dir_all(&home).map_err(|e| e.to_string())?;
    env.insert("HOME".into(), home.display().to_string());
    if let Some(tmp) = mounts.get("/tmp") {
        env.insert("TMPDIR".into(), tmp.display().to_string());
    }
    Ok(LocalPod {
        pod_name,
        program: PathBuf::from(env!("CARGO_BIN_EXE_phalanx")),
        args,
        env,
        http: http_local,
        liveness_path: probe_path(c.liveness_probe.as_ref(), "liveness")?,
        readiness_path: probe_path(c.readiness_probe.as_ref(), "readiness")?,
        substituted,
    })
}

/// A started replica; SIGKILLed when dropped.
struct Running {
    pod: LocalPod,
    child: Option<Child>,
    log: PathBuf,
}

impl Running {
    fn start(pod: LocalPod, dir: &Path) -> Self {
        let log = dir.join(format!("{}.log", pod.pod_name));
        let mut this = Self {
            pod,
            child: None,
            log,
        };
        this.spawn();
        this
    }

    /// Starts the process (again: a restarted pod keeps its claim, so the same data dir;
    /// the log is appended to).
    fn spawn(&mut self) {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("a log file");
        let err = out.try_clone().expect("a log file");
        let child = Command::new(&self.pod.program)
            .args(&self.pod.args)
            .env_clear()
            .envs(&self.pod.env)
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("phalanx serve starts");
        self.child = Some(child);
    }

    /// SIGTERM, as the kubelet stops a pod; Ok when the process exits 0 in time.
    fn terminate(&mut self, grace: Duration) -> Result<(), String> {
        let Some(mut child) = self.child.take() else {
            return Err(format!("{} is not running", self.pod.pod_name));
        };
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .map_err(|e| format!("kill -TERM: {e}"))?;
        if !sent.success() {
            return Err(format!("kill -TERM {} failed", child.id()));
        }
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                return if status.success() {
                    Ok(())
                } else {
                    Err(format!(
                        "{} exited with {status} after SIGTERM",
                        self.pod.pod_name
                    ))
                };
            }
            if start.elapsed() > grace {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} ignored SIGTERM for {grace:?}",
                    self.pod.pod_name
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn ready(&self) -> bool {
        self.child.is_some()
            && self.answers(&self.pod.liveness_path)
            && self.answers(&self.pod.readiness_path)
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill(); // SIGKILL
            let _ = c.wait();
        }
    }

    fn answers(&self, path: &str) -> bool {
        http_get(self.pod.http, path).is_ok_and(|(code, _)| code == 200)
    }

    /// The value on the `/metrics` line `name value`.
    fn metric(&self, name: &str) -> Option<f64> {
        let (_, body) = http_get(self.pod.http, "/metrics").ok()?;
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    }

    fn is_leader(&self) -> bool {
        self.child.is_some()
            && http_get(self.pod.http, "/metrics")
                .is_ok_and(|(_, body)| body.lines().any(|l| l.trim() == "phalanx_is_leader 1"))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}

/// [`crate::testbed::poll`] with this module's deadline.
fn poll<T>(what: &str, f: impl FnMut() -> Result<Option<T>, String>) -> Result<T, String> {
    crate::testbed::poll(DEADLINE, what, f)
}

/// The admin's view of the testbed, for making gangs and checking them.
struct Cluster {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
    /// The namespace of the test's gangs.
    ns: String,
}

impl Cluster {
    fn connect(kubeconfig: &Path, ns: &str) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let client = rt
            .block_on(make_client(Some(kubeconfig)))
            .unwrap_or_else(|e| panic!("the testbed's admin kubeconfig: {e} (is the testbed up?)"));
        Self {
            rt,
            client,
            ns: ns.to_string(),
        }
    }

    fn create_gang(&self, name: &str, pods: u32, gpus: i64) -> Result<(), String> {
        let groups: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &self.ns,
            &volcano_resource("PodGroup", "podgroups"),
        );
        let group: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {"minMember": pods, "queue": "default"},
        }))
        .map_err(|e| e.to_string())?;
        self.rt
            .block_on(groups.create(&PostParams::default(), &group))
            .map_err(|e| format!("PodGroup {name}: {e}"))?;
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        for i in 0..pods {
            let pod: Pod = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{name}-{i}"), "namespace": self.ns,
                    "annotations": {"scheduling.k8s.io/group-name": name}},
                "spec": {"schedulerName": "phalanx", "containers": [{"name": "main",
                    "image": "helm-e2e:fake", "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi", GPU: gpus.to_string()},
                        "limits": {GPU: gpus.to_string()}}}]},
            }))
            .map_err(|e| e.to_string())?;
            self.rt
                .block_on(api.create(&PostParams::default(), &pod))
                .map_err(|e| format!("pod {name}-{i}: {e}"))?;
        }
        Ok(())
    }

    fn pods(&self) -> Result<Vec<Pod>, String> {
        let all: Api<Pod> = Api::all(self.client.clone());
        self.rt
            .block_on(all.list(&ListParams::default()))
            .map(|l| l.items)
            .map_err(|e| e.to_string())
    }

    /// Waits until every pod of gang `name` is bound, then checks no node is over its GPUs.
    fn gang_placed(&self, name: &str, pods: usize) -> Result<String, String> {
        poll(&format!("{name}: {pods} pods bound"), || {
            let bound = self
                .pods()?
                .iter()
                .filter(|p| {
                    p.metadata.namespace.as_deref() == Some(self.ns.as_str())
                        && p.metadata
                            .name
                            .as_deref()
                            .is_some_and(|n| n.starts_with(&format!("{name}-")))
                        && node_of(p).is_some()
                })
                .count();
            Ok((bound == pods).then_some(()))
        })?;
        check_no_overcommit(&gpu_use_of(&self.pods()?), GPUS_PER_NODE)?;
        Ok(format!(
            "{name}: {pods} of {pods} pods bound, no node over {GPUS_PER_NODE} GPUs"
        ))
    }

    /// The StatefulSet and the ConfigMap and Secrets its pods mount, as the API server has
    /// them.
    fn read_release(&self, rel: &Release) -> (StatefulSet, Sources) {
        let sts: StatefulSet = self
            .rt
            .block_on(
                Api::<StatefulSet>::namespaced(self.client.clone(), &rel.namespace)
                    .get(&rel.statefulset),
            )
            .unwrap_or_else(|e| {
                panic!(
                    "StatefulSet {}/{}: {e} (is the chart installed?)",
                    rel.namespace, rel.statefulset
                )
            });
        let volumes = sts
            .spec
            .template
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        let cm_name = volumes
            .iter()
            .find_map(|v| v.config_map.as_ref().map(|c| c.name.clone()))
            .expect("the pod template mounts a ConfigMap");
        let config_map: ConfigMap = self
            .rt
            .block_on(
                Api::<ConfigMap>::namespaced(self.client.clone(), &rel.namespace).get(&cm_name),
            )
            .unwrap_or_else(|e| panic!("ConfigMap {cm_name}: {e}"));
        let secret_names = volumes
            .iter()
            .filter_map(|v| v.projected.as_ref())
            .flat_map(|p| p.sources.iter().flatten())
            .filter_map(|s| s.secret.as_ref().map(|s| s.name.clone()));
        let api = Api::<Secret>::namespaced(self.client.clone(), &rel.namespace);
        let secrets = secret_names
            .map(|name| {
                let secret = self
                    .rt
                    .block_on(api.get(&name))
                    .unwrap_or_else(|e| panic!("Secret {}/{name}: {e}", rel.namespace));
                (name, secret)
            })
            .collect();
        let sources = Sources {
            config_map,
            secrets,
        };
        (sts, sources)
    }

    /// The namespace of the test's gangs (it may exist from an earlier try).
    fn create_namespace(&self) {
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": self.ns}})).expect("a namespace");
        let _ = self.rt.block_on(
            Api::<Namespace>::all(self.client.clone()).create(&PostParams::default(), &ns),
        );
    }

    /// Deletes the test's pods (kwok removes them at once: their GPUs are free for a later
    /// run on the same testbed), PodGroups and namespace; best effort.
    fn clean_up(&self) {
        let now = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        let groups: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &self.ns,
            &volcano_resource("PodGroup", "podgroups"),
        );
        let all = ListParams::default();
        let _ = self.rt.block_on(pods.delete_collection(&now, &all));
        let _ = self.rt.block_on(groups.delete_collection(&now, &all));
        let _ = self.rt.block_on(
            Api::<Namespace>::all(self.client.clone()).delete(&self.ns, &DeleteParams::default()),
        );
    }

    fn pod_group_phase(&self, name: &str) -> Result<Option<String>, String> {
        let groups: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &self.ns,
            &volcano_resource("PodGroup", "podgroups"),
        );
        let pg = self
            .rt
            .block_on(groups.get(name))
            .map_err(|e| e.to_string())?;
        Ok(pg.data["status"]["phase"].as_str().map(str::to_string))
    }
}

fn port_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// Reads the release back, starts its pods as processes, and runs the checks; panics with
/// every failure (and the replicas' log tails) at the end.
pub fn run_installed_release() {
    let rel = Release::from_env();
    let cluster = Cluster::connect(&rel.admin_kubeconfig, &rel.work_namespace);
    let (sts, src) = cluster.read_release(&rel);
    let replicas = sts.spec.replicas.unwrap_or(1) as usize;
    let mut ports = LocalPorts::find(rel.port_base, replicas);
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut running: Vec<Running> = (0..replicas)
        .map(|k| {
            let pod = local_pod(&sts, &src, k, &rel, &ports, dir.path())
                .unwrap_or_else(|e| panic!("pod {k} of the StatefulSet: {e}"));
            println!(
                "helm e2e: {} substituted: {}",
                pod.pod_name,
                pod.substituted.join("; ")
            );
            Running::start(pod, dir.path())
        })
        .collect();
    cluster.create_namespace();
    let mut results = run_checks(&cluster, &mut running);
    if let Some(to) = rel.scale_to {
        let mut scale = Scale {
            cluster: &cluster,
            rel: &rel,
            ports: &mut ports,
            dir: dir.path(),
        };
        results.push(scale.to(&mut running, to));
        results.push(no_forbidden_in_logs(&running));
        results.push(scale.to(&mut running, replicas));
    }
    for r in &mut running {
        r.kill();
    }
    cluster.clean_up();
    report(&results, &running);
}

/// Probes, a gang, its PodGroup status, the leader SIGKILLed, another gang, the logs.
fn run_checks(cluster: &Cluster, running: &mut [Running]) -> Vec<Result<String, String>> {
    let replicas = running.len();
    let mut results = vec![poll(
        "every replica live and ready on its probe paths",
        || {
            Ok(running
                .iter()
                .all(Running::ready)
                .then(|| format!("{replicas} replicas answer their liveness and readiness probes")))
        },
    )];
    results.push(refuses_a_client_without_a_certificate(cluster, running));
    results.push(status_lists_every_replica_and_shard(running));
    results.push(
        cluster
            .create_gang("before-kill", 4, 8)
            .and_then(|()| cluster.gang_placed("before-kill", 4)),
    );
    results.push(poll(
        "PodGroup before-kill Running (status written as the service account)",
        || {
            Ok(cluster
                .pod_group_phase("before-kill")?
                .filter(|p| p == "Running")
                .map(|p| format!("PodGroup before-kill is {p}")))
        },
    ));
    results.push(kill_the_leader(running));
    results.push(
        cluster
            .create_gang("after-kill", 4, 8)
            .and_then(|()| cluster.gang_placed("after-kill", 4)),
    );
    results.push(restart_the_killed(running));
    results.push(rolling_restart(running));
    results.push(
        cluster
            .create_gang("after-rollout", 4, 8)
            .and_then(|()| cluster.gang_placed("after-rollout", 4)),
    );
    results.push(no_forbidden_in_logs(running));
    results
}

/// The value of `--flag=` in the pod's (local) args.
fn flag_value(r: &Running, flag: &str) -> Result<String, String> {
    let prefix = format!("{flag}=");
    r.pod
        .args
        .iter()
        .find_map(|a| a.strip_prefix(&prefix))
        .map(str::to_string)
        .ok_or_else(|| format!("{}: no {flag} in its args", r.pod.pod_name))
}

/// Every replica's raft port refuses a plaintext gRPC client, which has no certificate to
/// show; a client with pod 0's certificate from the mounted Secret reads the ledger through
/// the same ports (so the refusal is TLS's, not a port that is down).
fn refuses_a_client_without_a_certificate(
    cluster: &Cluster,
    running: &[Running],
) -> Result<String, String> {
    use phalanx_statestore::{ClientConfig, LedgerClient, TlsFiles, TlsState, Transport};
    let mut raft = BTreeMap::new();
    for (k, r) in running.iter().enumerate() {
        raft.insert(k as u64 + 1, flag_value(r, "--listen")?);
    }
    let few = ClientConfig {
        max_attempts: 3,
        rpc_timeout: Duration::from_secs(2),
        ..ClientConfig::default()
    };
    let mut why = String::new();
    for (&id, addr) in &raft {
        let plain = LedgerClient::with_config([(id, addr.clone())], few.clone());
        match cluster.rt.block_on(plain.read_fingerprint()) {
            Ok(read) => {
                return Err(format!(
                    "replica {id} at {addr} answered a plaintext client without a certificate (applied index {})",
                    read.applied_index
                ));
            }
            Err(e) => why = e.to_string(),
        }
    }
    let files = TlsFiles {
        cert: flag_value(&running[0], "--tls-cert")?.into(),
        key: flag_value(&running[0], "--tls-key")?.into(),
        ca: flag_value(&running[0], "--tls-ca")?.into(),
    };
    let tls = TlsState::load(files).map_err(|e| format!("the mounted certificates: {e}"))?;
    let with_cert = LedgerClient::new(raft.clone()).with_transport(Transport::Tls(tls));
    cluster
        .rt
        .block_on(with_cert.read_fingerprint())
        .map_err(|e| format!("a client with the Secret's certificate of replica 1: {e}"))?;
    Ok(format!(
        "{} raft ports refused a plaintext gRPC client without a certificate ({why}); one with replica 1's certificate from the Secret read the ledger",
        raft.len()
    ))
}

/// `phalanx status -o json` asked through every replica's admin port (as the chart sets
/// it: `--admin-listen`, `--admin-peers`), with pod 0's certificate from the mounted
/// Secret as the operator's (or `--insecure-plaintext` when the release runs so): each
/// reply, forwarded to the Raft leader by the others, lists every replica up, one leader,
/// and every shard of `--shards` with an owner among them.
fn status_lists_every_replica_and_shard(running: &[Running]) -> Result<String, String> {
    let want: Vec<u64> = (1..=running.len() as u64).collect();
    let shards: usize = flag_value(&running[0], "--shards")?
        .parse()
        .map_err(|e| format!("--shards: {e}"))?;
    let mut client = vec!["status".to_string(), "-o".into(), "json".into()];
    if running[0]
        .pod
        .args
        .iter()
        .any(|a| a == "--insecure-plaintext")
    {
        client.push("--insecure-plaintext".into());
    } else {
        for flag in ["--tls-cert", "--tls-key", "--tls-ca"] {
            client.extend([flag.to_string(), flag_value(&running[0], flag)?]);
        }
    }
    for (k, r) in running.iter().enumerate() {
        let server = format!("{}={}", k + 1, flag_value(r, "--admin-listen")?);
        poll(&format!("phalanx status through {server}"), || {
            let reply = phalanx_status(&client, &server)?;
            status_complete(&reply, &want, shards)
                .map(|()| Some(()))
                .map_err(|e| format!("{e}: {reply:#}"))
        })?;
    }
    Ok(format!(
        "phalanx status through each of the {} admin ports: replicas {want:?} up, one leader, {shards} shards owned",
        running.len()
    ))
}

fn phalanx_status(client: &[String], server: &str) -> Result<serde_json::Value, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_phalanx"))
        .args(client)
        .args(["--server", server])
        .output()
        .map_err(|e| format!("phalanx status: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "phalanx status --server {server}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("phalanx status -o json: {e}"))
}

/// Every replica of `want` listed and up, exactly one leader, `shards` shards each owned
/// by one of them.
fn status_complete(v: &serde_json::Value, want: &[u64], shards: usize) -> Result<(), String> {
    let replicas = v["replicas"].as_array().ok_or("no replicas in the reply")?;
    let ids: Vec<u64> = replicas.iter().filter_map(|r| r["id"].as_u64()).collect();
    let up = replicas.iter().filter(|r| r["up"] == true).count();
    let leaders = replicas.iter().filter(|r| r["leader"] == true).count();
    if ids != want || up != want.len() || leaders != 1 {
        return Err(format!(
            "replicas {ids:?} ({up} up, {leaders} leaders), want {want:?} all up and one leader"
        ));
    }
    let owners: Vec<u64> = v["shards"]
        .as_array()
        .ok_or("no shards in the reply")?
        .iter()
        .filter_map(|s| s["owner"].as_u64())
        .filter(|o| want.contains(o))
        .collect();
    if owners.len() != shards {
        return Err(format!(
            "{} of {shards} shards owned by a listed replica",
            owners.len()
        ));
    }
    Ok(())
}

/// The StatefulSet controller recreates a killed pod with the same name and claim: the
/// replica comes back on its data dir and rejoins the group.
fn restart_the_killed(running: &mut [Running]) -> Result<String, String> {
    let Some(k) = running.iter().position(|r| r.child.is_none()) else {
        return Err("no replica was killed".into());
    };
    running[k].spawn();
    poll(
        "the SIGKILLed replica back and ready on its data dir",
        || {
            Ok(running[k].ready().then(|| {
                format!(
                    "{} restarted on its data dir and is ready again",
                    running[k].pod.pod_name
                )
            }))
        },
    )
}

/// A rolling update as the StatefulSet does it: highest ordinal first, each pod stopped
/// with SIGTERM and back ready before the next.
fn rolling_restart(running: &mut [Running]) -> Result<String, String> {
    for k in (0..running.len()).rev() {
        running[k].terminate(Duration::from_secs(30))?;
        running[k].spawn();
        poll(
            &format!("{} ready after its restart", running[k].pod.pod_name),
            || Ok(running[k].ready().then_some(())),
        )?;
    }
    Ok(format!(
        "rolling restart of {} replicas (highest ordinal first): each exited 0 on SIGTERM and came back ready",
        running.len()
    ))
}

/// One line per check and the tally; on failure the replicas' log tails, then a panic.
fn report(results: &[Result<String, String>], running: &[Running]) {
    let failed = results.iter().filter(|r| r.is_err()).count();
    for r in results {
        match r {
            Ok(m) => println!("helm e2e: ok   {m}"),
            Err(m) => println!("helm e2e: FAIL {m}"),
        }
    }
    println!(
        "helm e2e: {} passed, {failed} failed",
        results.len() - failed
    );
    if failed > 0 {
        for r in running {
            let text = std::fs::read_to_string(&r.log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            println!("--- {} (last lines)", r.pod.pod_name);
            for l in tail.into_iter().rev() {
                println!("{l}");
            }
        }
        panic!("{failed} checks failed");
    }
}

fn kill_the_leader(running: &mut [Running]) -> Result<String, String> {
    let leader = poll("one replica leads", || {
        let leaders: Vec<usize> = (0..running.len())
            .filter(|&i| running[i].is_leader())
            .collect();
        Ok((leaders.len() == 1).then(|| leaders[0]))
    })?;
    let name = running[leader].pod.pod_name.clone();
    running[leader].kill();
    let successor = poll("another replica leads after the SIGKILL", || {
        Ok((0..running.len()).find(|&i| running[i].is_leader()))
    })?;
    Ok(format!(
        "{name} (the leader) SIGKILLed; {} leads",
        running[successor].pod.pod_name
    ))
}

/// Scaling through the chart, with the test in the StatefulSet controller's place.
struct Scale<'a> {
    cluster: &'a Cluster,
    rel: &'a Release,
    ports: &'a mut LocalPorts,
    dir: &'a Path,
}

impl Scale<'_> {
    /// `helm upgrade --reuse-values --set replicas=N`, then what the StatefulSet controller
    /// does with the new template: the highest ordinals beyond N stop (SIGTERM), new
    /// ordinals start at once (`podManagementPolicy: Parallel`), and the pods that stay
    /// roll to the new template, highest ordinal first, each ready before the next. The
    /// Raft group follows the new `--peers`: every replica reports N voters and no learner,
    /// and a gang is placed.
    fn to(&mut self, running: &mut Vec<Running>, to: usize) -> Result<String, String> {
        let from = running.len();
        self.helm_set_replicas(to)?;
        let (sts, src) = self.cluster.read_release(self.rel);
        let got = sts.spec.replicas.unwrap_or(1);
        if usize::try_from(got).ok() != Some(to) {
            return Err(format!(
                "after helm upgrade the StatefulSet has {got} replicas, not {to}"
            ));
        }
        self.ports.grow(self.rel.port_base, to);
        let pod = |k: usize| local_pod(&sts, &src, k, self.rel, self.ports, self.dir);
        while running.len() > to {
            let mut gone = running.pop().expect("more than `to` replicas");
            gone.terminate(Duration::from_secs(30))?;
        }
        for k in from..to {
            running.push(Running::start(pod(k)?, self.dir));
        }
        for k in (0..from.min(to)).rev() {
            running[k].terminate(Duration::from_secs(30))?;
            running[k].pod = pod(k)?;
            running[k].spawn();
            poll(
                &format!("{} ready on the new template", running[k].pod.pod_name),
                || Ok(running[k].ready().then_some(())),
            )?;
        }
        let rolled = Instant::now();
        poll(
            &format!("{to} voters and no learner on every replica"),
            || {
                Ok(running
                    .iter()
                    .all(|r| {
                        r.metric("phalanx_raft_voters") == Some(to as f64)
                            && r.metric("phalanx_raft_learners") == Some(0.0)
                    })
                    .then_some(()))
            },
        )?;
        let took = rolled.elapsed();
        status_lists_every_replica_and_shard(running)?;
        // Small: the checks before hold 96 of the testbed's 128 GPUs.
        let gang = format!("after-scale-to-{to}");
        let placed = self
            .cluster
            .create_gang(&gang, 2, 4)
            .and_then(|()| self.cluster.gang_placed(&gang, 2))?;
        Ok(format!(
            "helm upgrade --set replicas={to} (from {from}): the pods rolled to the new --peers, {to} voters on every replica {:.1}s after the last was ready, phalanx status through each lists all {to}; {placed}",
            took.as_secs_f64()
        ))
    }

    fn helm_set_replicas(&self, n: usize) -> Result<(), String> {
        let out = Command::new(super::chart::helm())
            .args(["upgrade", &self.rel.release])
            .arg(super::chart::chart_dir())
            .args(["-n", &self.rel.namespace, "--reuse-values", "--set"])
            .arg(format!("replicas={n}"))
            .arg("--kubeconfig")
            .arg(&self.rel.admin_kubeconfig)
            .output()
            .map_err(|e| format!("helm upgrade: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "helm upgrade --set replicas={n}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

fn no_forbidden_in_logs(running: &[Running]) -> Result<String, String> {
    for r in running {
        let text = std::fs::read_to_string(&r.log).map_err(|e| e.to_string())?;
        if let Some(line) = text
            .lines()
            .find(|l| l.contains("forbidden") || l.contains("Forbidden"))
        {
            return Err(format!(
                "{}: the service account was refused: {line}",
                r.pod.pod_name
            ));
        }
    }
    Ok("no request of the service account was forbidden".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_follows_the_kubelets_rules() {
        let env: BTreeMap<String, String> =
            [("POD_NAME".to_string(), "phalanx-2".to_string())].into();
        assert_eq!(
            expand("--id-from-pod-name=$(POD_NAME)", &env),
            "--id-from-pod-name=phalanx-2"
        );
        assert_eq!(
            expand("$$(POD_NAME) $(NOPE) $", &env),
            "$(POD_NAME) $(NOPE) $"
        );
    }
}
