//! The `phalanx serve` processes under test: started with the flags `e2e_shards` uses
//! (shards, Leases in the run's namespace, the 2PC CoordinatorService on every replica),
//! killed, paused and resumed by pid, and read through their /metrics. They run mutual TLS
//! with certificates from deploy/tls/make-certs.sh (the script the testbed e2e and the Helm
//! e2e use), made in the run's directory.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::links::{self, Links};

/// How the replicas run.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    pub binary: PathBuf,
    pub kubeconfig: PathBuf,
    pub dir: PathBuf,
    pub namespace: String,
    pub shards: u32,
    pub period_ms: u64,
    pub lease_ms: u64,
    /// `serve --snapshot-every` of every replica (serve's default when None).
    pub snapshot_every: Option<u64>,
    /// Start every replica with serve's crash failpoints on (`PHALANX_CHAOS_FAILPOINTS=1`),
    /// for `coordinator-crash`.
    pub failpoints: bool,
    /// `serve --raft-heartbeat-ms, --raft-election-min-ms, --raft-election-max-ms` of every
    /// replica (serve's defaults when None).
    pub raft_timers: Option<[u64; 3]>,
}

/// One replica: its addresses (kept across restarts) and its process when running.
#[derive(Debug)]
pub struct Replica {
    pub id: u64,
    pub http: SocketAddr,
    child: Option<Child>,
    paused: bool,
}

/// The replicas and everything needed to restart any of them as they were.
#[derive(Debug)]
pub struct Fleet {
    pub config: FleetConfig,
    /// Where each replica listens (Raft and ledger service; the CoordinatorService).
    pub raft: BTreeMap<u64, String>,
    coord: BTreeMap<u64, String>,
    /// What the replicas are given as `--peers` and `--coord-peers`: the link proxies in
    /// front of those listeners (`src/links.rs`), or the listeners themselves.
    raft_via: BTreeMap<u64, String>,
    coord_via: BTreeMap<u64, String>,
    /// The link proxies' faults and pid map, when the replicas talk through them.
    pub links: Option<Arc<Links>>,
    /// The runtime the link proxies run on (a replica added later gets its own).
    link_rt: Option<tokio::runtime::Handle>,
    /// The id the next added replica gets: ids are never reused, as a StatefulSet's
    /// ordinals are not while the old pod's data dir may still be around.
    next_id: u64,
    pub replicas: Vec<Replica>,
    /// Where make-certs.sh put the CA and every replica's certificate.
    tls_dir: PathBuf,
}

/// A CA and certificates for replicas `1..=n` in `dir` (kept when they exist), made by the
/// one script that makes the project's certificates (`replica-<id>.crt/.key` with the SAN
/// serve checks), in the checkout the run uses.
fn make_certs(dir: &Path, n: u64) -> anyhow::Result<()> {
    let script = crate::workspace().join("deploy/tls/make-certs.sh");
    let out = Command::new(&script)
        .arg(dir)
        .args((1..=n).map(|id| id.to_string()))
        .env("PHALANX_CERT_DAYS", "2")
        .output()
        .map_err(|e| {
            anyhow::anyhow!(
                "running {}: {e} (it needs bash and openssl)",
                script.display()
            )
        })?;
    anyhow::ensure!(
        out.status.success(),
        "{} {}: {}",
        script.display(),
        dir.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// `--tls-cert/--tls-key/--tls-ca` files of replica `id` in `dir`.
fn tls_files(dir: &Path, id: u64) -> phalanx_statestore::TlsFiles {
    phalanx_statestore::TlsFiles {
        cert: dir.join(format!("replica-{id}.crt")),
        key: dir.join(format!("replica-{id}.key")),
        ca: dir.join("ca.crt"),
    }
}

/// A loopback port for a process started later (below the ephemeral range: see
/// `phalanx_scheduler::ports`).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(phalanx_scheduler::ports::free_loopback_port()?)
}

fn peers(map: &BTreeMap<u64, String>) -> String {
    let all: Vec<String> = map.iter().map(|(id, a)| format!("{id}={a}")).collect();
    all.join(",")
}

/// GET over plain HTTP: (status, body).
fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    http_request(addr, "GET", path)
}

/// One bodiless request over plain HTTP: (status, body).
fn http_request(addr: SocketAddr, method: &str, path: &str) -> Result<(u16, String), String> {
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_millis(500)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| e.to_string())?;
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad response {text:?}"))?;
    let body = text.split_once("\r\n\r\n").map_or("", |x| x.1).to_string();
    Ok((code, body))
}

fn signal(pid: u32, sig: &str) -> anyhow::Result<()> {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()?
        .success();
    anyhow::ensure!(ok, "kill -{sig} {pid} failed");
    Ok(())
}

impl Replica {
    /// Running and not stopped: its /metrics can answer.
    pub fn live(&self) -> bool {
        self.child.is_some() && !self.paused
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Arms serve's crash failpoint `point` (`POST /debug/crash-at/<point>`; the fleet
    /// must run with failpoints on, `FleetConfig::failpoints`).
    pub fn arm_crash(&self, point: &str) -> anyhow::Result<()> {
        let (code, body) = http_request(self.http, "POST", &format!("/debug/crash-at/{point}"))
            .map_err(|e| anyhow::anyhow!("arming failpoint {point} on replica {}: {e}", self.id))?;
        anyhow::ensure!(
            code == 200,
            "arming failpoint {point} on replica {}: HTTP {code}: {}",
            self.id,
            body.trim()
        );
        Ok(())
    }

    /// Waits up to `within` for the process to exit by itself: its exit code (`None` for
    /// a signal), or `Ok(None)` if it still runs. An exited process is reaped and gone.
    pub fn wait_exit(&mut self, within: Duration) -> anyhow::Result<Option<Option<i32>>> {
        let start = Instant::now();
        loop {
            let Some(c) = self.child.as_mut() else {
                anyhow::bail!("replica {} is not running", self.id);
            };
            if let Some(status) = c.try_wait()? {
                self.child = None;
                return Ok(Some(status.code()));
            }
            if start.elapsed() >= within {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn sigkill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.paused = false;
    }

    /// SIGTERM, as Kubernetes stops a pod, and a wait for the exit (SIGKILL after `grace`).
    pub fn terminate(&mut self, grace: Duration) -> anyhow::Result<()> {
        let Some(mut c) = self.child.take() else {
            return Ok(());
        };
        signal(c.id(), "TERM")?;
        let t = std::time::Instant::now();
        while c.try_wait()?.is_none() {
            if t.elapsed() >= grace {
                let _ = c.kill();
                let _ = c.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.paused = false;
        Ok(())
    }

    pub fn sigstop(&mut self) -> anyhow::Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| anyhow::anyhow!("replica {} is not running", self.id))?;
        signal(pid, "STOP")?;
        self.paused = true;
        Ok(())
    }

    pub fn sigcont(&mut self) -> anyhow::Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| anyhow::anyhow!("replica {} is not running", self.id))?;
        signal(pid, "CONT")?;
        self.paused = false;
        Ok(())
    }

    pub fn metrics(&self) -> Result<String, String> {
        if !self.live() {
            return Err(format!("replica {} is not live", self.id));
        }
        http_get(self.http, "/metrics").map(|(_, b)| b)
    }

    pub fn ready(&self) -> bool {
        self.live() && matches!(http_get(self.http, "/readyz"), Ok((200, _)))
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if self.paused
            && let Some(pid) = self.pid()
        {
            let _ = signal(pid, "CONT");
        }
        self.sigkill();
    }
}

/// A replica that ended by itself (a crash), and its exit status in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exited(pub u64, pub String);

impl std::fmt::Display for Exited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "replica {} exited by itself: {}", self.0, self.1)
    }
}

/// What /metrics says about leadership and shards.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    pub leader: bool,
    /// Shard -> epoch, of the shards it owns.
    pub owned: BTreeMap<u32, u64>,
}

pub fn parse_view(metrics: &str) -> View {
    let mut v = View::default();
    for l in metrics.lines() {
        if l.trim() == "phalanx_is_leader 1" {
            v.leader = true;
        }
        let owned = l
            .strip_prefix("phalanx_shard_epoch{shard=\"")
            .and_then(|rest| rest.split_once("\"} "))
            .and_then(|(s, e)| Some((s.parse().ok()?, e.trim().parse::<f64>().ok()? as u64)));
        if let Some((s, e)) = owned.filter(|(_, e)| *e > 0) {
            v.owned.insert(s, e);
        }
    }
    v
}

/// A link proxy on `rt` in front of each of `listeners` (replica -> address).
fn proxies(
    rt: &tokio::runtime::Handle,
    links: &Arc<Links>,
    listeners: &BTreeMap<u64, String>,
) -> anyhow::Result<BTreeMap<u64, String>> {
    listeners
        .iter()
        .map(|(id, addr)| {
            let proxy = rt.block_on(links::start(links.clone(), *id, addr.parse()?))?;
            Ok((*id, proxy.to_string()))
        })
        .collect()
}

impl Fleet {
    /// Starts replicas 1..=n; with `links`, every replica reaches the others' Raft and
    /// coordinator listeners through link proxies run on that runtime.
    pub fn start(
        config: FleetConfig,
        n: u64,
        links: Option<(&tokio::runtime::Handle, Arc<Links>)>,
    ) -> anyhow::Result<Self> {
        let tls_dir = config.dir.join("tls");
        make_certs(&tls_dir, n)?;
        let mut raft = BTreeMap::new();
        let mut coord = BTreeMap::new();
        for id in 1..=n {
            raft.insert(id, format!("127.0.0.1:{}", free_port()?));
            coord.insert(id, format!("127.0.0.1:{}", free_port()?));
        }
        let (raft_via, coord_via) = match &links {
            Some((rt, l)) => (proxies(rt, l, &raft)?, proxies(rt, l, &coord)?),
            None => (raft.clone(), coord.clone()),
        };
        let mut fleet = Self {
            config,
            raft,
            coord,
            raft_via,
            coord_via,
            link_rt: links.as_ref().map(|(rt, _)| (*rt).clone()),
            links: links.map(|(_, l)| l),
            next_id: n + 1,
            replicas: Vec::new(),
            tls_dir,
        };
        for id in 1..=n {
            let http: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
            fleet.replicas.push(Replica {
                id,
                http,
                child: None,
                paused: false,
            });
            fleet.spawn(id)?;
        }
        Ok(fleet)
    }

    /// A new replica (the next id) with a certificate and addresses, named in every
    /// replica's `--peers` and `--coord-peers` from their next start on; not started.
    pub fn add_replica(&mut self) -> anyhow::Result<u64> {
        let id = self.next_id;
        make_certs(&self.tls_dir, id)?;
        let raft = BTreeMap::from([(id, format!("127.0.0.1:{}", free_port()?))]);
        let coord = BTreeMap::from([(id, format!("127.0.0.1:{}", free_port()?))]);
        let (raft_via, coord_via) = match (&self.link_rt, &self.links) {
            (Some(rt), Some(l)) => (proxies(rt, l, &raft)?, proxies(rt, l, &coord)?),
            _ => (raft.clone(), coord.clone()),
        };
        self.raft.extend(raft);
        self.coord.extend(coord);
        self.raft_via.extend(raft_via);
        self.coord_via.extend(coord_via);
        let http: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        self.replicas.push(Replica {
            id,
            http,
            child: None,
            paused: false,
        });
        self.next_id += 1;
        Ok(id)
    }

    /// Stops replica `id` (SIGTERM) and takes it out of the fleet and of every later
    /// start's `--peers`; its log and data dir stay.
    pub fn remove_replica(&mut self, id: u64) -> anyhow::Result<()> {
        self.replica(id)?.terminate(Duration::from_secs(10))?;
        self.replicas.retain(|r| r.id != id);
        for map in [
            &mut self.raft,
            &mut self.coord,
            &mut self.raft_via,
            &mut self.coord_via,
        ] {
            map.remove(&id);
        }
        Ok(())
    }

    pub fn log_of(&self, id: u64) -> PathBuf {
        self.config.dir.join(format!("serve-{id}.log"))
    }

    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.config.dir.join(format!("data-{id}"))
    }

    pub fn replica(&mut self, id: u64) -> anyhow::Result<&mut Replica> {
        self.replicas
            .iter_mut()
            .find(|r| r.id == id)
            .ok_or_else(|| anyhow::anyhow!("no replica {id}"))
    }

    /// (Re)starts replica `id` on its data dir and addresses, appending to its log.
    pub fn spawn(&mut self, id: u64) -> anyhow::Result<()> {
        let c = &self.config;
        let log = self.log_of(id);
        let out = open_append(&log)?;
        let err = out.try_clone()?;
        let r = self
            .replicas
            .iter()
            .find(|r| r.id == id)
            .ok_or_else(|| anyhow::anyhow!("no replica {id}"))?;
        let child = Command::new(&c.binary)
            .args([
                "serve",
                "--id",
                &id.to_string(),
                "--listen",
                &self.raft[&id],
            ])
            .args(["--peers", &peers(&self.raft_via)])
            .arg("--data-dir")
            .arg(self.data_dir(id))
            .args(["--http", &r.http.to_string()])
            .arg("--kubeconfig")
            .arg(&c.kubeconfig)
            .args(["--period-ms", &c.period_ms.to_string()])
            .args(["--shards", &c.shards.to_string()])
            .args(["--shard-lease-ms", &c.lease_ms.to_string()])
            .args(["--lease-namespace", &c.namespace])
            .args(["--coord-listen", &self.coord[&id]])
            .args(["--coord-peers", &peers(&self.coord_via)])
            .args(self.tls_flags(id))
            .args(
                c.snapshot_every
                    .iter()
                    .flat_map(|n| ["--snapshot-every".to_string(), n.to_string()]),
            )
            .args(c.raft_timers.iter().flat_map(|[h, lo, hi]| {
                [
                    ("--raft-heartbeat-ms", h),
                    ("--raft-election-min-ms", lo),
                    ("--raft-election-max-ms", hi),
                ]
                .map(|(flag, ms)| [flag.to_string(), ms.to_string()])
                .concat()
            }))
            .env("PHALANX_LOG", "info,openraft=error")
            .env(
                "PHALANX_CHAOS_FAILPOINTS",
                if c.failpoints { "1" } else { "0" },
            )
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .map_err(|e| anyhow::anyhow!("starting {} serve: {e}", c.binary.display()))?;
        if let Some(l) = &self.links {
            l.set_pid(id, child.id());
        }
        let r = self.replica(id)?;
        r.child = Some(child);
        r.paused = false;
        Ok(())
    }

    /// serve's TLS flags for replica `id`.
    fn tls_flags(&self, id: u64) -> Vec<std::ffi::OsString> {
        let f = tls_files(&self.tls_dir, id);
        vec![
            "--tls-cert".into(),
            f.cert.into(),
            "--tls-key".into(),
            f.key.into(),
            "--tls-ca".into(),
            f.ca.into(),
        ]
    }

    /// A ledger client of the replicas over their mutual TLS, with replica 1's certificate
    /// (any certificate of the CA reads the ledger, as chaos does; only one naming a Raft
    /// member may propose).
    pub fn ledger_client(&self) -> anyhow::Result<phalanx_statestore::LedgerClient> {
        let tls = phalanx_statestore::TlsState::load(tls_files(&self.tls_dir, 1))?;
        Ok(phalanx_statestore::LedgerClient::new(self.raft.clone())
            .with_transport(phalanx_statestore::Transport::Tls(tls)))
    }

    /// Each live replica's view; replicas that do not answer are left out.
    pub fn views(&self) -> BTreeMap<u64, View> {
        self.replicas
            .iter()
            .filter_map(|r| Some((r.id, parse_view(&r.metrics().ok()?))))
            .collect()
    }

    /// The replica that says it leads the Raft group, if exactly one does.
    pub fn leader(&self) -> Option<u64> {
        let leaders: Vec<u64> = self
            .views()
            .into_iter()
            .filter(|(_, v)| v.leader)
            .map(|(id, _)| id)
            .collect();
        (leaders.len() == 1).then(|| leaders[0])
    }

    /// Shard -> owner, once every shard has exactly one owner among the live replicas.
    pub fn owners(&self) -> Option<BTreeMap<u32, u64>> {
        let mut owners: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for (id, v) in self.views() {
            for s in v.owned.keys() {
                owners.entry(*s).or_default().push(id);
            }
        }
        let complete =
            (0..self.config.shards).all(|s| owners.get(&s).is_some_and(|o| o.len() == 1));
        complete.then(|| owners.into_iter().map(|(s, o)| (s, o[0])).collect())
    }

    /// Replicas whose process ended without the harness killing it, each with how.
    pub fn exited_by_themselves(&mut self) -> Vec<Exited> {
        self.replicas
            .iter_mut()
            .filter_map(|r| {
                let status = r.child.as_mut()?.try_wait().ok()??;
                Some(Exited(r.id, status.to_string()))
            })
            .collect()
    }

    pub fn all_ready(&self) -> bool {
        self.replicas.iter().all(Replica::ready)
    }
}

fn open_append(path: &Path) -> anyhow::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| anyhow::anyhow!("opening {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_reads_leadership_and_owned_shards_from_metrics() {
        let text = "phalanx_is_leader 1\nphalanx_shard_epoch{shard=\"0\"} 3\nphalanx_shard_epoch{shard=\"4\"} 0\nphalanx_shard_epoch{shard=\"5\"} 12\n";
        let v = parse_view(text);
        assert!(v.leader);
        assert_eq!(v.owned, BTreeMap::from([(0, 3), (5, 12)]));
        assert_eq!(parse_view("phalanx_is_leader 0\n"), View::default());
    }
}
