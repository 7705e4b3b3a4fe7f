//! The link proxy on loopback in front of an echo server, with this test process as the
//! dialling "replica" (its own pid, so the /proc lookup is the one a live run uses).

use super::*;

/// An echo server: every byte read is written back.
async fn echo() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// Links with this process as replica 1, and a proxy for replica 2 in front of an echo.
async fn setup() -> (Arc<Links>, SocketAddr) {
    let links = Arc::new(Links::default());
    links.set_pid(1, std::process::id());
    let proxy = start(links.clone(), 2, echo().await).await.expect("proxy");
    (links, proxy)
}

async fn roundtrip(s: &mut TcpStream, msg: &[u8]) -> Vec<u8> {
    s.write_all(msg).await.expect("write");
    let mut got = vec![0u8; msg.len()];
    s.read_exact(&mut got).await.expect("read");
    got
}

#[tokio::test]
async fn a_fault_finds_the_open_connections_diallers_and_bytes_pass_both_ways() {
    let (links, proxy) = setup().await;
    let mut s = TcpStream::connect(proxy).await.expect("connect");
    assert_eq!(roundtrip(&mut s, b"hello").await, b"hello");
    let link = || lock(&links.open).values().next().map(|o| *lock(&o.link));
    assert_eq!(link(), Some(None), "nothing looked up while no fault is on");
    // A fault on another link still identifies every open connection.
    links.block(&[(3, 2)]);
    assert_eq!(link(), Some(Some((1, 2))));
    assert_eq!(roundtrip(&mut s, b"again").await, b"again");
    assert_eq!(links.counts().connections, 1);
}

#[tokio::test]
async fn a_blocked_link_holds_its_bytes_and_healing_lets_them_through() {
    let (links, proxy) = setup().await;
    let mut s = TcpStream::connect(proxy).await.expect("connect");
    assert_eq!(roundtrip(&mut s, b"a").await, b"a");
    links.block(&[(1, 2)]);
    s.write_all(b"held").await.expect("write");
    let mut got = [0u8; 4];
    let early = tokio::time::timeout(Duration::from_millis(300), s.read_exact(&mut got)).await;
    assert!(early.is_err(), "bytes crossed a blocked link");
    // The other direction of the pair is another link, and stays open.
    assert!(!links.blocked((2, 1)));
    links.heal();
    s.read_exact(&mut got).await.expect("read after heal");
    assert_eq!(&got, b"held");
    assert!(links.counts().stalls >= 1);
}

#[tokio::test]
async fn a_dialler_that_is_no_replica_is_never_faulted() {
    let links = Arc::new(Links::default());
    let proxy = start(links.clone(), 2, echo().await).await.expect("proxy");
    links.block(&[(1, 2)]);
    let mut s = TcpStream::connect(proxy).await.expect("connect");
    assert_eq!(roundtrip(&mut s, b"free").await, b"free");
    assert_eq!(links.counts().unknown_dialler, 1);
}

#[tokio::test]
async fn full_loss_refuses_new_connections_and_cuts_open_ones() {
    let (links, proxy) = setup().await;
    let mut open = TcpStream::connect(proxy).await.expect("connect");
    assert_eq!(roundtrip(&mut open, b"x").await, b"x");
    links.set_loss(&[(1, 2)], 1.0, 7);
    assert_eq!(links.cut_share(), 1);
    let mut buf = [0u8; 1];
    assert_eq!(
        open.read(&mut buf).await.unwrap_or(0),
        0,
        "a cut connection ends"
    );
    let mut fresh = TcpStream::connect(proxy).await.expect("connect");
    assert_eq!(
        fresh.read(&mut buf).await.unwrap_or(0),
        0,
        "refused at once"
    );
    assert_eq!(links.counts().refused, 1);
    links.heal();
    let mut after = TcpStream::connect(proxy).await.expect("connect");
    assert_eq!(roundtrip(&mut after, b"ok").await, b"ok");
}

#[tokio::test]
async fn partial_loss_draws_from_the_seed() {
    // The same seed cuts the same connections of the same set.
    let mut picks = Vec::new();
    for _ in 0..2 {
        let (links, proxy) = setup().await;
        let mut conns = Vec::new();
        for _ in 0..12 {
            let mut s = TcpStream::connect(proxy).await.expect("connect");
            roundtrip(&mut s, b"p").await;
            conns.push(s);
        }
        links.set_loss(&[(1, 2)], 0.5, 42);
        let cut = links.cut_share();
        assert!((1..12).contains(&cut), "half of 12 drawn, {cut} cut");
        let mut alive = Vec::new();
        for s in &mut conns {
            s.write_all(b"q").await.ok();
            let mut b = [0u8; 1];
            alive.push(s.read(&mut b).await.is_ok_and(|n| n == 1));
        }
        picks.push(alive);
    }
    assert_eq!(picks[0], picks[1]);
}

#[tokio::test]
async fn delayed_chunks_arrive_whole_and_in_order() {
    let (links, proxy) = setup().await;
    links.set_delay(&[(1, 2)], Duration::from_millis(30));
    let mut s = TcpStream::connect(proxy).await.expect("connect");
    for i in 0..5u8 {
        assert_eq!(roundtrip(&mut s, &[i; 100]).await, vec![i; 100]);
    }
    assert!(links.counts().chunks_delayed >= 10, "{:?}", links.counts());
}

#[test]
fn loopback_addresses_are_written_as_proc_net_tcp_writes_them() {
    let a: SocketAddr = "127.0.0.1:8080".parse().expect("addr");
    let ip = u32::from_ne_bytes([127, 0, 0, 1]);
    assert_eq!(proc_addr(a), Some(format!("{ip:08X}:1F90")));
    assert_eq!(proc_addr("[::1]:1".parse().expect("addr")), None);
}
