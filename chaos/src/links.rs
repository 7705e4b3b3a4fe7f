//! The link proxies: a TCP byte proxy in front of each replica's Raft listener and each
//! one's CoordinatorService, through which every replica reaches every other. Faults act
//! on a *directed link* `from -> to`: the connections replica `from` opens to replica
//! `to` (both byte directions of them, so a blocked link carries neither `from`'s
//! requests nor `to`'s replies to them, while `to`'s own connections to `from` still work).
//!
//! Why one proxy per target and not per directed pair: Raft dials the address stored in
//! the group's membership (written once, from the lowest replica's `--peers`), not the
//! dialler's own `--peers`, so every replica reaches replica `j` at one address. The proxy
//! tells the dialler apart by the connection itself: the client end of an accepted
//! loopback connection is a socket in `/proc/net/tcp`, and its inode is an open fd of
//! exactly one process, which the harness started ([`Links::set_pid`]). A connection
//! whose dialler is none of the replicas (the harness's own ledger read) is never faulted.
//! Diallers are looked up only while a fault is on (every open connection in one scan when
//! a fault is set, each new one before it is passed on): with no fault the proxies only
//! copy bytes. The proxies want a runtime of their own: /proc reads are blocking, and the
//! replicas' RPCs time out in 100 ms.
//!
//! TLS passes through untouched: serve dials a peer with the server name of its replica
//! id (`replica-<id>.phalanx`), not of the address, so the replicas' mutual TLS holds.
//!
//! Faults, switched through [`Links`] while the proxies run:
//! - *blocked*: nothing is read from either end (bytes sit in the kernel's buffers, the
//!   connection stays open), as packets dropped by a partition; new connections are
//!   accepted and stall the same way. Healing lets the held bytes through.
//! - *delay*: each chunk is written `delay` after it was read, in order.
//! - *loss*: TCP cannot lose bytes without breaking TLS, so loss is of connections: while
//!   on, a share of new connections is closed at once and [`Links::cut_share`] closes a
//!   share of the open ones (each draw from the fault's seed).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A directed link: connections replica `.0` opens to replica `.1`.
pub type Link = (u64, u64);

/// What the link proxies did since they started.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LinkCounts {
    pub connections: u64,
    /// Connections opened while a fault was on whose dialler was no replica (never
    /// faulted; diallers are looked up only while a fault is on).
    pub unknown_dialler: u64,
    pub refused: u64,
    pub cut: u64,
    pub chunks_delayed: u64,
    /// Times a pump found its link blocked and held its bytes.
    pub stalls: u64,
}

impl LinkCounts {
    pub fn since(&self, b: &LinkCounts) -> String {
        format!(
            "links: {} connections, {} refused, {} cut, {} stalled, {} chunks delayed",
            self.connections - b.connections,
            self.refused - b.refused,
            self.cut - b.cut,
            self.stalls - b.stalls,
            self.chunks_delayed - b.chunks_delayed,
        )
    }
}

#[derive(Debug, Default)]
struct Faults {
    blocked: BTreeSet<Link>,
    delay: BTreeMap<Link, Duration>,
    /// Share of connections lost on the link, and the draws.
    loss: BTreeMap<Link, f64>,
    rng: Option<ChaCha8Rng>,
}

/// The link of one connection, once its dialler is known (`None` before, and for ever
/// when the dialler is no replica or is the target itself: never faulted).
type Slot = Arc<Mutex<Option<Link>>>;

/// One open proxied connection: its two ends, its link, and its task (a loss closes it).
#[derive(Debug)]
struct Open {
    peer: SocketAddr,
    local: SocketAddr,
    target: u64,
    link: Slot,
    task: tokio::task::AbortHandle,
}

/// The faults and the pid -> replica map, shared by the harness and every connection.
#[derive(Debug)]
pub struct Links {
    faults: Mutex<Faults>,
    changed: tokio::sync::watch::Sender<u64>,
    pids: Mutex<BTreeMap<u32, u64>>,
    open: Mutex<BTreeMap<u64, Open>>,
    counts: Mutex<LinkCounts>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Default for Links {
    fn default() -> Self {
        Self {
            faults: Mutex::default(),
            changed: tokio::sync::watch::Sender::new(0),
            pids: Mutex::default(),
            open: Mutex::default(),
            counts: Mutex::default(),
        }
    }
}

impl Links {
    /// Replica `id` now runs as `pid` (after every (re)start).
    pub fn set_pid(&self, id: u64, pid: u32) {
        let mut pids = lock(&self.pids);
        pids.retain(|_, r| *r != id);
        pids.insert(pid, id);
    }

    pub fn counts(&self) -> LinkCounts {
        *lock(&self.counts)
    }

    fn count(&self, f: impl FnOnce(&mut LinkCounts)) {
        f(&mut lock(&self.counts));
    }

    /// Sets faults. The open connections' diallers are looked up first (once, in one scan
    /// of /proc), so every connection a fault may touch knows its link before it does.
    fn update(&self, f: impl FnOnce(&mut Faults)) {
        self.identify_open();
        f(&mut lock(&self.faults));
        self.changed.send_modify(|v| *v += 1);
    }

    fn any_fault(&self) -> bool {
        let f = lock(&self.faults);
        !(f.blocked.is_empty() && f.delay.is_empty() && f.loss.is_empty())
    }

    /// Looks up the dialler of every open connection whose link is not known yet.
    fn identify_open(&self) {
        let table = proc_tcp();
        let owners = self.socket_owners();
        for o in lock(&self.open).values() {
            let mut slot = lock(&o.link);
            if slot.is_none() {
                *slot = link_of(&table, &owners, o.peer, o.local, o.target);
            }
        }
    }

    /// Socket inode -> replica, over every replica's open fds.
    fn socket_owners(&self) -> BTreeMap<u64, u64> {
        let pids: Vec<(u32, u64)> = lock(&self.pids).iter().map(|(p, i)| (*p, *i)).collect();
        let mut owners = BTreeMap::new();
        for (pid, id) in pids {
            let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
                continue;
            };
            for fd in fds.flatten() {
                let target = std::fs::read_link(fd.path()).unwrap_or_default();
                let inode = target
                    .to_str()
                    .and_then(|t| t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok());
                if let Some(inode) = inode {
                    owners.insert(inode, id);
                }
            }
        }
        owners
    }

    pub fn block(&self, links: &[Link]) {
        self.update(|f| f.blocked.extend(links.iter().copied()));
    }

    pub fn set_delay(&self, links: &[Link], delay: Duration) {
        self.update(|f| f.delay.extend(links.iter().map(|l| (*l, delay))));
    }

    pub fn set_loss(&self, links: &[Link], share: f64, seed: u64) {
        self.update(|f| {
            f.loss.extend(links.iter().map(|l| (*l, share)));
            f.rng = Some(ChaCha8Rng::seed_from_u64(seed));
        });
    }

    /// Every fault off; held bytes flow again.
    pub fn heal(&self) {
        self.update(|f| *f = Faults::default());
    }

    fn blocked(&self, link: Link) -> bool {
        lock(&self.faults).blocked.contains(&link)
    }

    fn delay(&self, link: Link) -> Duration {
        lock(&self.faults)
            .delay
            .get(&link)
            .copied()
            .unwrap_or_default()
    }

    /// One draw: is this connection of `link` lost?
    fn lose(&self, link: Link) -> bool {
        let mut f = lock(&self.faults);
        let Some(share) = f.loss.get(&link).copied() else {
            return false;
        };
        f.rng.as_mut().is_some_and(|r| r.random_bool(share))
    }

    /// Closes each open connection on a lossy link with the link's share (seeded draws,
    /// in the order the connections were opened); returns how many were closed.
    pub fn cut_share(&self) -> u64 {
        self.identify_open();
        let open = lock(&self.open);
        let mut cut = 0;
        for o in open.values() {
            let link = *lock(&o.link);
            if link.is_some_and(|l| self.lose(l)) {
                o.task.abort();
                cut += 1;
            }
        }
        drop(open);
        self.count(|c| c.cut += cut);
        cut
    }

    /// The link of a new connection of `peer` to `local` in front of `target`.
    fn dialler_link(&self, peer: SocketAddr, local: SocketAddr, target: u64) -> Option<Link> {
        link_of(&proc_tcp(), &self.socket_owners(), peer, local, target)
    }
}

/// `127.0.0.1:8080` as /proc/net/tcp writes it (`0100007F:1F90` on little-endian hosts:
/// the address as the kernel's u32 in host order, the port big-endian), IPv4 only.
fn proc_addr(a: SocketAddr) -> Option<String> {
    let SocketAddr::V4(v4) = a else { return None };
    let ip = u32::from_ne_bytes(v4.ip().octets());
    Some(format!("{ip:08X}:{:04X}", v4.port()))
}

/// /proc/net/tcp as (local, remote) -> socket inode.
fn proc_tcp() -> BTreeMap<(String, String), u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let inode = f.get(9)?.parse().ok()?;
            Some(((f[1].to_string(), f[2].to_string()), inode))
        })
        .collect()
}

/// The link of the connection whose client end is `peer` and server end `local`: its
/// socket's inode in `table`, that inode's owner in `owners`. `None` when the dialler is
/// no replica, or is `target` itself.
fn link_of(
    table: &BTreeMap<(String, String), u64>,
    owners: &BTreeMap<u64, u64>,
    peer: SocketAddr,
    local: SocketAddr,
    target: u64,
) -> Option<Link> {
    let inode = table.get(&(proc_addr(peer)?, proc_addr(local)?))?;
    let from = *owners.get(inode)?;
    (from != target).then_some((from, target))
}

/// Listens on a free loopback port in front of replica `target`'s `upstream`; returns
/// the address the replicas are given.
pub async fn start(
    links: Arc<Links>,
    target: u64,
    upstream: SocketAddr,
) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(accept_loop(listener, links, target, upstream));
    Ok(addr)
}

async fn accept_loop(listener: TcpListener, links: Arc<Links>, target: u64, upstream: SocketAddr) {
    let mut next_id = 0u64;
    loop {
        let Ok((down, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        next_id += 1;
        links.count(|c| c.connections += 1);
        let local = down.local_addr().unwrap_or(upstream);
        let slot: Slot = Arc::default();
        let conn = tokio::spawn(connection(
            down,
            upstream,
            (peer, local, target),
            slot.clone(),
            links.clone(),
        ));
        let id = next_id;
        let open = Open {
            peer,
            local,
            target,
            link: slot,
            task: conn.abort_handle(),
        };
        lock(&links.open).insert(id, open);
        let l = links.clone();
        tokio::spawn(async move {
            let _ = conn.await;
            lock(&l.open).remove(&id);
        });
    }
}

/// One accepted connection: while any fault is on, its dialler is looked up first (off
/// the runtime's workers; /proc reads are blocking) and a lossy link may refuse it; with
/// no fault on, nothing is looked up and it is passed on at once.
async fn connection(
    down: TcpStream,
    upstream: SocketAddr,
    (peer, local, target): (SocketAddr, SocketAddr, u64),
    slot: Slot,
    links: Arc<Links>,
) {
    if links.any_fault() {
        let l = links.clone();
        let link = tokio::task::spawn_blocking(move || l.dialler_link(peer, local, target))
            .await
            .ok()
            .flatten();
        if link.is_none() {
            links.count(|c| c.unknown_dialler += 1);
        }
        if link.is_some_and(|l| links.lose(l)) {
            links.count(|c| c.refused += 1);
            return;
        }
        let mut s = lock(&slot);
        if s.is_none() {
            *s = link;
        }
    }
    pass(down, upstream, slot, links).await;
}

/// One connection, both ways, under the faults of its link (none while unknown).
async fn pass(down: TcpStream, upstream: SocketAddr, link: Slot, links: Arc<Links>) {
    let Ok(up) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = (down.set_nodelay(true), up.set_nodelay(true));
    let (dr, dw) = down.into_split();
    let (ur, uw) = up.into_split();
    // Either direction ending ends the connection (a half-close is not kept: gRPC does
    // not use one).
    tokio::select! {
        () = pump(dr, uw, link.clone(), links.clone()) => {}
        () = pump(ur, dw, link, links) => {}
    }
}

/// Copies `r` to `w`: holds each chunk read while the link is blocked, writes each
/// chunk `delay` after it was read (in order, through a queue so delays do not add up).
async fn pump(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    link: Slot,
    links: Arc<Links>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(tokio::time::Instant, Vec<u8>)>(256);
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if w.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match r.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            // Held after the read, so a chunk in flight when the link is cut is held
            // too, and no more is read until it heals.
            let known = *lock(&link);
            if let Some(l) = known {
                wait_unblocked(&links, l).await;
            }
            let delay = known.map(|l| links.delay(l)).unwrap_or_default();
            if !delay.is_zero() {
                links.count(|c| c.chunks_delayed += 1);
            }
            let due = tokio::time::Instant::now() + delay;
            if tx.send((due, buf[..n].to_vec())).await.is_err() {
                return;
            }
        }
    };
    // The writer drains what was read before the reader ended.
    tokio::join!(reader, writer);
}

async fn wait_unblocked(links: &Links, link: Link) {
    let mut rx = links.changed.subscribe();
    if !links.blocked(link) {
        return;
    }
    links.count(|c| c.stalls += 1);
    while links.blocked(link) {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests;
