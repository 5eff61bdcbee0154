//! Link tests: QEMU framing over socket pairs, UNIX and TCP listeners, garbage peers, the
//! receive checks, faults, counters and capture (with tshark when it is installed).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::super::counters::Counter;
use super::super::pcap::PcapFile;
use super::super::*;
use super::*;

const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 2];
const IP_A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

/// A fresh path under the target's temp dir (short enough for `sun_path`).
fn sock_path(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("mlx5l-{}-{tag}-{n}", std::process::id()))
}

/// The extension headers `op` needs.
fn ext_for(op: Opcode) -> ExtHdrs {
    let h = op.info().unwrap().hdrs;
    let mut e = ExtHdrs::default();
    if h.contains(HdrSet::DETH) {
        e.deth = Some(Deth {
            q_key: 0x1111_1111,
            resv8: 0,
            src_qp: 0x11,
        });
    }
    if h.contains(HdrSet::RETH) {
        e.reth = Some(Reth {
            va: 0x5567_067f_4000,
            r_key: 0x363,
            dma_len: 3000,
        });
    }
    if h.contains(HdrSet::ATOMIC_ETH) {
        e.atomic_eth = Some(AtomicEth {
            va: 0x5565_fad5_7000,
            r_key: 0x2e8,
            swap_add: 1,
            compare: 7,
        });
    }
    if h.contains(HdrSet::AETH) {
        e.aeth = Some(Aeth::ack(Aeth::CREDIT_UNLIMITED, 3));
    }
    if h.contains(HdrSet::ATOMIC_ACK_ETH) {
        e.atomic_ack_eth = Some(AtomicAckEth { orig: 0x1234 });
    }
    if h.contains(HdrSet::IMM_DT) {
        e.imm_dt = Some(0xdead_beef);
    }
    if h.contains(HdrSet::IETH) {
        e.ieth = Some(0x77);
    }
    e
}

/// Headers of a frame from (`src_mac`, `src`) to (`dst_mac`, `dst`), as rxe sends them.
fn hdrs(
    op: Opcode,
    psn: u32,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
) -> RoceHeaders {
    let mut bth = Bth::new(op, 0x11, psn);
    bth.ack_req = true;
    RoceHeaders {
        eth: EthHdr {
            dst: dst_mac,
            src: src_mac,
            vlan: None,
        },
        ip: IpHdr::V4(Ipv4Hdr {
            dscp: 0,
            ecn: 0,
            identification: psn as u16,
            dont_fragment: true,
            ttl: 64,
            src,
            dst,
        }),
        udp: UdpHdr {
            src_port: 0xc121,
            checksum: 0,
        },
        bth,
        ext: ext_for(op),
    }
}

/// A frame from A to B with `payload` (if the opcode carries one).
fn frame_ab(op: Opcode, psn: u32, payload: &[u8]) -> Vec<u8> {
    let p = if op.info().unwrap().payload {
        payload
    } else {
        &[]
    };
    hdrs(op, psn, MAC_A, MAC_B, IP_A, IP_B).encode(p).unwrap()
}

fn payload(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn cfg_b() -> PortConfig {
    PortConfig {
        mac: MAC_B,
        ips: vec![IP_B.into()],
    }
}

fn cfg_a() -> PortConfig {
    PortConfig {
        mac: MAC_A,
        ips: vec![IP_A.into()],
    }
}

// ---- framing -------------------------------------------------------------------------------

#[test]
fn stream_framing_is_qemus_big_endian_length_then_frame() {
    let (raw_a, raw_b) = UnixStream::pair().unwrap();
    let mut link = Link::Stream(StreamLink::from_unix(raw_a).unwrap());
    let f1 = frame_ab(Opcode::RC_SEND_ONLY, 1, &payload(61, 1));
    let f2 = vec![0xffu8; 1];
    link.send(f1.clone()).unwrap();
    link.send(f2.clone()).unwrap();
    assert!(link.flush(soon()).unwrap());
    // What the peer reads: exactly [len BE][frame][len BE][frame].
    let mut want = Vec::new();
    for f in [&f1, &f2] {
        want.extend_from_slice(&(f.len() as u32).to_be_bytes());
        want.extend_from_slice(f);
    }
    let mut got = vec![0u8; want.len()];
    let mut raw_b = raw_b;
    raw_b
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    raw_b.read_exact(&mut got).unwrap();
    assert_eq!(got, want);
    assert_eq!(
        read_framed(&got, MAX_FRAME_LEN).unwrap(),
        vec![&f1[..], &f2[..]]
    );

    // The other way, one byte at a time (the length split too): frames come out whole.
    assert_eq!(link.recv().unwrap(), None, "nothing sent yet");
    let mut seen = Vec::new();
    for b in &want {
        raw_b.write_all(&[*b]).unwrap();
        if let Some(f) = link.recv().unwrap() {
            seen.push(f);
        }
    }
    assert_eq!(seen, vec![f1, f2]);
    assert_eq!(link.recv().unwrap(), None);
    drop(raw_b);
    assert_eq!(link.recv_deadline(soon()), Err(LinkError::Closed));
}

#[test]
fn socket_pair_round_trip_all_sizes() {
    let (mut a, mut b) = Link::socket_pair().unwrap();
    let sizes = [1usize, 14, 60, 1082, 1500, 4210, 9018, MAX_FRAME_LEN];
    for (i, &n) in sizes.iter().enumerate() {
        a.send(payload(n, i as u8)).unwrap();
    }
    for (i, &n) in sizes.iter().enumerate() {
        let f = b.recv_deadline(soon()).unwrap().expect("frame");
        assert_eq!(f, payload(n, i as u8));
    }
    assert_eq!(
        a.send(vec![0; MAX_FRAME_LEN + 1]),
        Err(LinkError::BadFrameLength(MAX_FRAME_LEN + 1))
    );
    assert_eq!(a.send(Vec::new()), Err(LinkError::BadFrameLength(0)));
    assert!(a.is_up(), "a refused frame leaves the link up");
    // Nothing waiting: recv returns at once, recv_deadline at its deadline.
    assert_eq!(b.recv().unwrap(), None);
    assert_eq!(
        b.recv_deadline(Instant::now() + Duration::from_millis(20))
            .unwrap(),
        None
    );
    a.shutdown();
    assert!(!a.is_up());
    assert_eq!(a.send(vec![1]), Err(LinkError::Down));
    assert_eq!(b.recv_deadline(soon()), Err(LinkError::Closed));
    assert_eq!(b.recv(), Err(LinkError::Down));
}

fn exchange(mut a: Link, mut b: Link) {
    for i in 0..50u32 {
        a.send(frame_ab(
            Opcode::RC_RDMA_WRITE_MIDDLE,
            i,
            &payload(1024, i as u8),
        ))
        .unwrap();
        b.send(payload(100 + i as usize, 9)).unwrap();
    }
    for i in 0..50u32 {
        let f = b.recv_deadline(soon()).unwrap().expect("frame at b");
        assert_eq!(
            f,
            frame_ab(Opcode::RC_RDMA_WRITE_MIDDLE, i, &payload(1024, i as u8))
        );
        let g = a.recv_deadline(soon()).unwrap().expect("frame at a");
        assert_eq!(g, payload(100 + i as usize, 9));
    }
}

#[test]
fn unix_listener_and_connector() {
    let path = sock_path("unix");
    let addr = StreamAddr::parse(&format!("unix:{}", path.display())).unwrap();
    let l = StreamListener::bind(&addr).unwrap();
    assert_eq!(l.try_accept().unwrap().map(|_| ()), None);
    let c = Link::connect(&addr, soon()).unwrap();
    let s = Link::Stream(l.accept(soon()).unwrap());
    exchange(c, s);
    // A second listener on a live path is refused; a stale path is taken over.
    assert_eq!(
        StreamListener::bind(&addr).unwrap_err(),
        LinkError::Io(std::io::ErrorKind::AddrInUse)
    );
    drop(l);
    assert!(!path.exists(), "the listener removes its path");
    let stale = std::os::unix::net::UnixListener::bind(&path).unwrap();
    drop(stale); // leaves the file behind, nobody listening
    let l2 = StreamListener::bind(&addr).unwrap();
    drop(l2);
}

#[test]
fn server_link_takes_one_peer_at_a_time_and_listens_again() {
    let addr = StreamAddr::Unix(sock_path("server"));
    let mut server = Port::new(Link::serve(&addr).unwrap(), cfg_b());
    assert!(!server.link().is_up(), "down until a peer connects");
    assert_eq!(server.recv().unwrap(), None);
    let f = frame_ab(Opcode::RC_SEND_ONLY, 1, b"first!");
    assert_eq!(server.send(f.clone()), Err(LinkError::Down));
    for round in 0..3u32 {
        let mut client = Port::new(Link::connect(&addr, soon()).unwrap(), cfg_a());
        let f = frame_ab(Opcode::RC_SEND_ONLY, round, b"hello");
        client.send(f.clone()).unwrap();
        let got = server.recv_deadline(soon()).unwrap().expect("frame");
        assert_eq!(got.bytes, f);
        assert!(server.link().is_up());
        let mut back = hdrs(Opcode::RC_ACKNOWLEDGE, round, MAC_B, MAC_A, IP_B, IP_A);
        back.bth.ack_req = false;
        let back = back.encode(&[]).unwrap();
        server.send(back.clone()).unwrap();
        assert_eq!(client.recv_deadline(soon()).unwrap().unwrap().bytes, back);
        drop(client);
        assert_eq!(server.recv_deadline(soon()), Err(LinkError::Closed));
        assert!(!server.link().is_up(), "listening again");
    }
    assert_eq!(server.counters().get(Counter::LinkClosed), 3);
    // A second peer while one is connected waits in the backlog until the first leaves.
    let mut c1 = Link::connect(&addr, soon()).unwrap();
    assert_eq!(server.recv().unwrap(), None);
    let mut c2 = Link::connect(&addr, soon()).unwrap();
    c2.send(frame_ab(Opcode::RC_SEND_ONLY, 20, b"second"))
        .unwrap();
    c1.send(frame_ab(Opcode::RC_SEND_ONLY, 10, b"first."))
        .unwrap();
    assert_eq!(
        server.recv_deadline(soon()).unwrap().unwrap().hdrs.bth.psn,
        10
    );
    c1.shutdown();
    assert_eq!(server.recv_deadline(soon()), Err(LinkError::Closed));
    assert_eq!(
        server.recv_deadline(soon()).unwrap().unwrap().hdrs.bth.psn,
        20
    );
    server.shutdown(soon());
    assert_eq!(server.recv(), Err(LinkError::Down));
}

#[test]
fn tcp_listener_and_connector_on_loopback() {
    let l = StreamListener::bind(&StreamAddr::parse("tcp:127.0.0.1:0").unwrap()).unwrap();
    let addr = l.local_addr().unwrap();
    assert!(addr.to_string().starts_with("tcp:127.0.0.1:"));
    let c = Link::connect(&addr, soon()).unwrap();
    let s = Link::Stream(l.accept(soon()).unwrap());
    exchange(c, s);
}

#[test]
fn connect_and_accept_give_up_at_their_deadline() {
    let path = sock_path("nobody");
    let addr = StreamAddr::Unix(path);
    let t = Instant::now() + Duration::from_millis(30);
    assert_eq!(Link::connect(&addr, t).unwrap_err(), LinkError::Timeout);
    let l = StreamListener::bind(&StreamAddr::parse("tcp:127.0.0.1:0").unwrap()).unwrap();
    let t = Instant::now() + Duration::from_millis(30);
    assert_eq!(l.accept(t).unwrap_err(), LinkError::Timeout);
    assert!(StreamAddr::parse("tcp:not-an-address").is_err());
    assert!(StreamAddr::parse("unix:").is_err());
}

// ---- garbage peers ---------------------------------------------------------------------------

/// A port on a socket whose raw peer writes `bytes` and then closes (or not).
fn port_fed(bytes: &[u8], close: bool) -> (Port, UnixStream) {
    let (x, mut y) = UnixStream::pair().unwrap();
    y.write_all(bytes).unwrap();
    if close {
        y.shutdown(std::net::Shutdown::Write).unwrap();
    }
    (
        Port::new(Link::Stream(StreamLink::from_unix(x).unwrap()), cfg_b()),
        y,
    )
}

fn drain(p: &mut Port) -> Result<Vec<RxPacket>, LinkError> {
    let mut v = Vec::new();
    loop {
        match p.recv_deadline(soon()) {
            Ok(Some(x)) => v.push(x),
            Ok(None) => return Ok(v),
            Err(e) => return Err(e),
        }
    }
}

#[test]
fn garbage_peers_drop_the_connection_counted() {
    let good = frame_ab(Opcode::RC_SEND_ONLY, 5, b"hello!!!");
    let mut framed_good = (good.len() as u32).to_be_bytes().to_vec();
    framed_good.extend_from_slice(&good);

    // Zero length after a good frame: the good one is delivered, then the link drops.
    let mut bytes = framed_good.clone();
    bytes.extend_from_slice(&0u32.to_be_bytes());
    bytes.extend_from_slice(&framed_good);
    let (mut p, _peer) = port_fed(&bytes, false);
    let got = p.recv_deadline(soon()).unwrap().unwrap();
    assert_eq!(got.payload(), b"hello!!!");
    assert_eq!(p.recv_deadline(soon()), Err(LinkError::ZeroLength));
    assert!(!p.link().is_up());
    assert_eq!(p.recv(), Err(LinkError::Down));
    assert_eq!(p.counters().get(Counter::LinkZeroLength), 1);

    // Oversized: refused as soon as the length arrives (no waiting for 1 MiB of body).
    let (mut p, _peer) = port_fed(&(1u32 << 20).to_be_bytes(), false);
    assert_eq!(
        p.recv_deadline(soon()),
        Err(LinkError::Oversized {
            len: 1 << 20,
            max: MAX_FRAME_LEN
        })
    );
    assert_eq!(p.counters().get(Counter::LinkOversized), 1);
    let (mut p, _peer) = port_fed(&((MAX_FRAME_LEN + 1) as u32).to_be_bytes(), false);
    assert!(matches!(p.recv(), Err(LinkError::Oversized { .. })));
    // A smaller limit (e.g. jumbo MTU) is honoured.
    let (mut p, _peer) = port_fed(&framed_good, false);
    p.link_mut()
        .as_stream_mut()
        .unwrap()
        .set_max_frame(good.len() - 1);
    assert!(matches!(
        p.recv_deadline(soon()),
        Err(LinkError::Oversized { .. })
    ));

    // A short read then EOF: inside the body, and inside the length.
    let (mut p, _peer) = port_fed(&framed_good[..20], true);
    assert_eq!(
        drain(&mut p).unwrap_err(),
        LinkError::Truncated {
            have: 20,
            need: framed_good.len()
        }
    );
    assert_eq!(p.counters().get(Counter::LinkTruncated), 1);
    let (mut p, _peer) = port_fed(&framed_good[..2], true);
    assert_eq!(
        drain(&mut p).unwrap_err(),
        LinkError::Truncated { have: 2, need: 4 }
    );

    // A clean close at a frame boundary.
    let (mut p, _peer) = port_fed(&framed_good, true);
    assert_eq!(drain(&mut p).unwrap_err(), LinkError::Closed);
    assert_eq!(p.counters().get(Counter::LinkClosed), 1);
    assert_eq!(p.counters().get(Counter::RxRoceUnicastFrames), 1);

    // Random junk never panics or hangs: each run ends in frames, a framing error or silence.
    let mut x = 0x1234_5678_9abc_def0u64;
    for _ in 0..200 {
        let n = (x % 64) as usize;
        let junk: Vec<u8> = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let (mut p, _peer) = port_fed(&junk, x & 1 == 0);
        for _ in 0..4 {
            if p.recv().is_err() {
                break;
            }
        }
    }
}

#[test]
fn a_peer_that_never_reads_cannot_wedge_the_sender() {
    let (x, _y) = UnixStream::pair().unwrap(); // _y never reads
    let mut link = Link::Stream(StreamLink::from_unix(x).unwrap());
    link.as_stream_mut().unwrap().set_max_backlog(64 * 1024);
    let mut port = Port::new(link, cfg_a());
    let f = frame_ab(Opcode::RC_RDMA_WRITE_MIDDLE, 0, &payload(4096, 1));
    let mut refused = 0;
    for _ in 0..2000 {
        match port.send(f.clone()) {
            Ok(()) => {}
            Err(LinkError::Backlog) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(refused > 0, "the socket buffer and backlog filled up");
    assert_eq!(port.counters().get(Counter::TxDropLink), refused);
    assert_eq!(
        port.counters().get(Counter::TxFrames) + refused,
        2000,
        "every frame is either sent or counted as refused"
    );
    // Flushing gives up at its deadline.
    assert!(!port
        .flush(Instant::now() + Duration::from_millis(20))
        .unwrap());
    assert!(port.link().is_up());
}

#[test]
fn a_peer_that_vanishes_is_a_counted_error() {
    let (x, y) = UnixStream::pair().unwrap();
    drop(y);
    let mut port = Port::new(Link::Stream(StreamLink::from_unix(x).unwrap()), cfg_a());
    let f = frame_ab(Opcode::RC_SEND_ONLY, 0, b"abcd");
    let e = port.send(f.clone()).unwrap_err();
    assert_eq!(e, LinkError::Io(std::io::ErrorKind::BrokenPipe));
    assert!(e.is_fatal());
    assert_eq!(port.send(f), Err(LinkError::Down));
    let s = port.counters().snapshot();
    assert_eq!(s.get(Counter::TxDropLink), 2);
    assert_eq!(s.get(Counter::LinkIoErrors), 1);
    assert_eq!(s.get(Counter::TxFrames), 0);
}

// ---- in-process links ------------------------------------------------------------------------

#[test]
fn in_process_pair_and_loopback() {
    let (a, b) = Link::pair();
    exchange(a, b);
    let (mut a, mut b) = Link::pair();
    a.send(vec![1, 2, 3]).unwrap();
    a.shutdown();
    assert_eq!(a.send(vec![1]), Err(LinkError::Down));
    assert_eq!(b.recv().unwrap(), Some(vec![1, 2, 3]));
    assert_eq!(b.recv(), Err(LinkError::Closed));

    let mut l = Link::loopback();
    l.send(vec![7; 10]).unwrap();
    l.send(vec![8; 10]).unwrap();
    assert_eq!(l.recv().unwrap(), Some(vec![7; 10]));
    assert_eq!(l.recv_deadline(soon()).unwrap(), Some(vec![8; 10]));
    assert_eq!(l.recv().unwrap(), None);
    for _ in 0..MAX_QUEUED_FRAMES {
        l.send(vec![0]).unwrap();
    }
    assert_eq!(l.send(vec![0]), Err(LinkError::Backlog));
}

#[test]
fn two_ports_in_process_deliver_roce_frames_and_count_them() {
    let (la, lb) = Link::pair();
    let mut a = Port::new(la, cfg_a());
    let mut b = Port::new(lb, cfg_b());
    let mut sent_bytes = 0;
    for i in 0..20u32 {
        let f = frame_ab(Opcode::RC_RDMA_WRITE_ONLY, i, &payload(100 + i as usize, 3));
        sent_bytes += f.len() as u64;
        a.send(f).unwrap();
    }
    for i in 0..20u32 {
        let p = b.recv().unwrap().expect("frame");
        assert_eq!(p.hdrs.bth.psn, i);
        assert_eq!(p.hdrs.bth.opcode, Opcode::RC_RDMA_WRITE_ONLY);
        assert_eq!(p.payload(), &payload(100 + i as usize, 3)[..]);
    }
    assert_eq!(b.recv().unwrap(), None);
    let (sa, sb) = (a.counters().snapshot(), b.counters().snapshot());
    assert_eq!(sa.get(Counter::TxFrames), 20);
    assert_eq!(sa.get(Counter::TxBytes), sent_bytes);
    assert_eq!(sa.get(Counter::TxRoceUnicastFrames), 20);
    assert_eq!(sa.get(Counter::TxRoceUnicastBytes), sent_bytes);
    assert_eq!(sb.get(Counter::RxFrames), 20);
    assert_eq!(sb.get(Counter::RxRoceUnicastFrames), 20);
    assert_eq!(sb.get(Counter::RxRoceUnicastBytes), sent_bytes);
    assert_eq!(sb.rx_dropped(), 0);
}

// ---- receive checks --------------------------------------------------------------------------

fn arp_request() -> Vec<u8> {
    // Who has 10.0.0.2? Tell 10.0.0.1 (RFC 826), to the broadcast MAC.
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&MAC_A);
    f.extend_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&MAC_A);
    f.extend_from_slice(&IP_A.octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&IP_B.octets());
    f
}

fn ipv6_neighbor_solicitation() -> Vec<u8> {
    // To the solicited-node multicast MAC 33:33:ff:00:00:02, ICMPv6 (next header 58) type 135.
    let mut f = vec![0x33, 0x33, 0xff, 0, 0, 2];
    f.extend_from_slice(&MAC_A);
    f.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
    let mut ip = vec![0x60, 0, 0, 0, 0, 24, 58, 255];
    ip.extend_from_slice(&Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xff, 0xfe00, 1).octets());
    ip.extend_from_slice(&Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00, 2).octets());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[135, 0, 0, 0, 0, 0, 0, 0]);
    f.extend_from_slice(&Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xff, 0xfe00, 2).octets());
    f
}

/// The UDP checksum of a frame built by `frame_ab` (IPv4 pseudo-header, RFC 768).
fn set_udp_checksum(f: &mut [u8], wrong: bool) {
    let ip = 14;
    let udp = ip + 20;
    f[udp + 6] = 0;
    f[udp + 7] = 0;
    let ulen = u16::from_be_bytes([f[udp + 4], f[udp + 5]]) as usize;
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&f[ip + 12..ip + 20]);
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&(ulen as u16).to_be_bytes());
    pseudo.extend_from_slice(&f[udp..udp + ulen]);
    let mut c = ipv4_checksum(&pseudo);
    if c == 0 {
        c = 0xffff;
    }
    if wrong {
        c ^= 0x0101;
    }
    f[udp + 6..udp + 8].copy_from_slice(&c.to_be_bytes());
}

#[test]
fn receive_checks_drop_and_count_as_hardware_does() {
    let cfg = cfg_b();
    let ok = |f: &[u8]| check_rx(f, &cfg);
    let good = frame_ab(Opcode::RC_SEND_ONLY, 1, b"payload!");
    let (h, r) = ok(&good).unwrap();
    assert_eq!(h.bth.psn, 1);
    assert_eq!(&good[r], b"payload!");

    // Wrong unicast MAC.
    let mut f = good.clone();
    f[5] = 9;
    assert_eq!(ok(&f), Err(RxDrop::WrongDstMac([2, 0, 0, 0, 0, 9])));
    // Broadcast and multicast MACs pass the MAC filter (a RoCE frame to them is taken).
    let bc = hdrs(Opcode::RC_SEND_ONLY, 2, MAC_A, [0xff; 6], IP_A, IP_B)
        .encode(b"x")
        .unwrap();
    assert!(ok(&bc).is_ok());
    // Not RoCE.
    assert_eq!(
        ok(&arp_request()),
        Err(RxDrop::NotRoce {
            ethertype: ETHERTYPE_ARP
        })
    );
    assert_eq!(
        ok(&ipv6_neighbor_solicitation()),
        Err(RxDrop::NotRoce {
            ethertype: ETHERTYPE_IPV6
        })
    );
    // Runt and malformed.
    assert_eq!(ok(&good[..10]), Err(RxDrop::Malformed(None)));
    assert!(matches!(ok(&good[..50]), Err(RxDrop::Malformed(Some(_)))));
    let mut f = good.clone();
    f[14 + 10] ^= 1; // IPv4 header checksum
    assert!(matches!(
        ok(&f),
        Err(RxDrop::Malformed(Some(DecodeError::Ipv4Checksum { .. })))
    ));
    // Another destination IP (rxe_chk_dgid); a port without addresses takes any.
    let other = hdrs(
        Opcode::RC_SEND_ONLY,
        3,
        MAC_A,
        MAC_B,
        IP_A,
        Ipv4Addr::new(10, 0, 0, 9),
    )
    .encode(b"x")
    .unwrap();
    assert_eq!(
        ok(&other),
        Err(RxDrop::WrongDstIp(Ipv4Addr::new(10, 0, 0, 9).into()))
    );
    assert!(check_rx(&other, &PortConfig::new(MAC_B)).is_ok());
    // Bad ICRC: a payload byte flipped.
    let mut f = good.clone();
    let n = f.len();
    f[n - 6] ^= 0x40;
    assert!(matches!(ok(&f), Err(RxDrop::Icrc { .. })));
    // TVer 1 and QP 0 (with good ICRCs).
    let mut h1 = hdrs(Opcode::RC_SEND_ONLY, 4, MAC_A, MAC_B, IP_A, IP_B);
    h1.bth.tver = 1;
    assert_eq!(ok(&h1.encode(b"x").unwrap()), Err(RxDrop::BadTver(1)));
    let mut h0 = hdrs(Opcode::RC_SEND_ONLY, 4, MAC_A, MAC_B, IP_A, IP_B);
    h0.bth.dest_qp = 0;
    assert_eq!(ok(&h0.encode(b"x").unwrap()), Err(RxDrop::Qp0));
    // UDP checksum: 0 = none; a right non-zero one passes, a wrong one is dropped. The ICRC
    // masks the UDP checksum, so it stays good either way.
    let mut f = good.clone();
    set_udp_checksum(&mut f, false);
    assert!(ok(&f).is_ok(), "a correct UDP checksum is accepted");
    set_udp_checksum(&mut f, true);
    assert!(matches!(ok(&f), Err(RxDrop::UdpChecksum { .. })));

    // Through a port: every drop is counted under its reason, the good frame comes through.
    let (mut tx, rx) = Link::pair();
    let mut port = Port::new(rx, cfg_b());
    let mut wrong_mac = good.clone();
    wrong_mac[5] = 9;
    let mut bad_icrc = good.clone();
    bad_icrc[n - 1] ^= 1;
    let mut bad_udp = good.clone();
    set_udp_checksum(&mut bad_udp, true);
    for f in [
        wrong_mac,
        arp_request(),
        ipv6_neighbor_solicitation(),
        good[..50].to_vec(),
        other,
        bad_icrc,
        h1.encode(b"x").unwrap(),
        h0.encode(b"x").unwrap(),
        bad_udp,
        good.clone(),
    ] {
        tx.send(f).unwrap();
    }
    let p = port.recv().unwrap().expect("the good frame");
    assert_eq!(p.bytes, good);
    let s = port.counters().snapshot();
    for c in [
        Counter::RxDropWrongDstMac,
        Counter::RxDropMalformed,
        Counter::RxDropWrongDstIp,
        Counter::RxIcrcErrors,
        Counter::RxDropBadTver,
        Counter::RxDropQp0,
        Counter::RxDropUdpChecksum,
        Counter::RxEthBroadcastFrames,
        Counter::RxEthMulticastFrames,
    ] {
        assert_eq!(s.get(c), 1, "{c}: {:?}", s.nonzero());
    }
    assert_eq!(s.get(Counter::RxDropNotRoce), 2);
    assert_eq!(s.rx_dropped(), 9);
    assert_eq!(s.get(Counter::RxFrames), 10);
    assert_eq!(s.get(Counter::RxRoceUnicastFrames), 1);
}

#[test]
fn udp_checksum_over_ipv6_zero_right_and_wrong() {
    let a6 = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xff, 0xfe00, 1);
    let b6 = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xff, 0xfe00, 2);
    let mut h = hdrs(Opcode::RC_SEND_ONLY, 9, MAC_A, MAC_B, IP_A, IP_B);
    h.ip = IpHdr::V6(Ipv6Hdr {
        traffic_class: 0,
        flow_label: 0,
        hop_limit: 64,
        src: a6,
        dst: b6,
    });
    let cfg = PortConfig {
        mac: MAC_B,
        ips: vec![b6.into()],
    };
    let mut f = h.encode(b"odd").unwrap();
    assert!(
        check_rx(&f, &cfg).is_ok(),
        "checksum 0 accepted over IPv6 (rxe)"
    );
    // RFC 8200 8.1 pseudo-header: addresses, upper-layer length (32 bits), 3 zero bytes, 17.
    let udp = 14 + 40;
    let ulen = f.len() - udp;
    let mut sum = Vec::new();
    sum.extend_from_slice(&a6.octets());
    sum.extend_from_slice(&b6.octets());
    sum.extend_from_slice(&(ulen as u32).to_be_bytes());
    sum.extend_from_slice(&[0, 0, 0, 17]);
    sum.extend_from_slice(&f[udp..]);
    let c = ipv4_checksum(&sum);
    f[udp + 6..udp + 8].copy_from_slice(&c.to_be_bytes());
    assert!(check_rx(&f, &cfg).is_ok(), "right checksum");
    f[udp + 7] ^= 0x10;
    assert!(matches!(
        check_rx(&f, &cfg),
        Err(RxDrop::UdpChecksum { .. })
    ));
}

// ---- faults ------------------------------------------------------------------------------

/// Sends `n` frames A→B through a port with `spec`; returns the PSNs B accepted, in order,
/// and both snapshots.
fn faulty_run(
    spec: &str,
    n: u32,
) -> (
    Vec<u32>,
    super::super::counters::CounterSnapshot,
    super::super::counters::CounterSnapshot,
) {
    let (la, lb) = Link::pair();
    let mut a = Port::new(la, cfg_a()).with_faults(spec.parse().unwrap());
    let mut b = Port::new(lb, cfg_b());
    let mut psns = Vec::new();
    for i in 0..n {
        a.send(frame_ab(
            Opcode::RC_RDMA_WRITE_MIDDLE,
            i,
            &payload(256, i as u8),
        ))
        .unwrap();
        while let Some(p) = b.recv().unwrap() {
            assert_eq!(p.payload(), &payload(256, p.hdrs.bth.psn as u8)[..]);
            psns.push(p.hdrs.bth.psn);
        }
    }
    a.release_held();
    assert_eq!(a.held(), 0);
    while let Some(p) = b.recv().unwrap() {
        psns.push(p.hdrs.bth.psn);
    }
    (psns, a.counters().snapshot(), b.counters().snapshot())
}

#[test]
fn port_faults_are_deterministic_and_hit_their_rates() {
    let spec = "drop=0.02,dup=0.02,reorder=0.02:window=4,corrupt=0.01,seed=7";
    let n = 10_000;
    let (p1, a1, b1) = faulty_run(spec, n);
    let (p2, a2, b2) = faulty_run(spec, n);
    assert_eq!(p1, p2, "same seed: same frames, same order");
    assert_eq!((a1, b1), (a2, b2));
    let (p3, _, _) = faulty_run(&spec.replace("seed=7", "seed=99"), n);
    assert_ne!(p1, p3);

    let dropped = a1.get(Counter::FaultDropped);
    let dup = a1.get(Counter::FaultDuplicated);
    let reord = a1.get(Counter::FaultReordered);
    let corrupt = a1.get(Counter::FaultCorrupted);
    let near = |got: u64, want: f64| (got as f64) > want * 0.7 && (got as f64) < want * 1.3;
    assert!(near(dropped, 200.0), "dropped {dropped}");
    assert!(near(dup, 196.0), "dup {dup}");
    assert!(near(reord, 196.0), "reordered {reord}");
    assert!(near(corrupt, 98.0), "corrupted {corrupt}");
    // Conservation: what A put on the wire B received; corrupted copies (a duplicated
    // corrupted frame is two of them) failed the ICRC; the rest came through.
    let wire = n as u64 - dropped + dup;
    assert_eq!(a1.get(Counter::TxFrames), wire);
    assert_eq!(b1.get(Counter::RxFrames), wire);
    assert_eq!(b1.rx_dropped(), b1.get(Counter::RxIcrcErrors));
    assert!(b1.get(Counter::RxIcrcErrors) >= corrupt);
    assert_eq!(
        b1.get(Counter::RxRoceUnicastFrames),
        wire - b1.get(Counter::RxIcrcErrors)
    );
    assert_eq!(p1.len() as u64, b1.get(Counter::RxRoceUnicastFrames));
    // Reordering happened: some PSN arrived after a larger one.
    assert!(p1.windows(2).any(|w| w[1] < w[0]));
}

#[test]
fn corrupted_frames_fail_the_icrc_and_are_counted() {
    let (psns, a, b) = faulty_run("corrupt=1,seed=3", 500);
    assert!(psns.is_empty(), "no corrupted frame is accepted");
    assert_eq!(a.get(Counter::FaultCorrupted), 500);
    assert_eq!(b.get(Counter::RxIcrcErrors), 500);
    assert_eq!(b.rx_dropped(), 500);
}

// ---- capture -----------------------------------------------------------------------------

/// A `Write` whose bytes the test can read back.
#[derive(Clone, Default)]
struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn capture_records_both_directions_as_on_the_wire() {
    let buf = Shared::default();
    let tap = PcapTap::new(buf.clone()).unwrap();
    let (la, lb) = Link::pair();
    let mut a = Port::new(la, cfg_a()).with_tap(tap.clone());
    let mut b = Port::new(lb, cfg_b());
    let req = frame_ab(Opcode::RC_SEND_ONLY, 1, b"ping");
    let mut ack_h = hdrs(Opcode::RC_ACKNOWLEDGE, 1, MAC_B, MAC_A, IP_B, IP_A);
    ack_h.bth.ack_req = false;
    let ack = ack_h.encode(&[]).unwrap();
    a.send(req.clone()).unwrap();
    assert!(b.recv().unwrap().is_some());
    b.send(ack.clone()).unwrap();
    assert!(a.recv().unwrap().is_some());
    b.send(arp_request()).unwrap(); // received and captured, then dropped
    assert_eq!(a.recv().unwrap(), None);
    tap.flush().unwrap();
    let bytes = buf.0.lock().unwrap().clone();
    let f = PcapFile::parse(&bytes).unwrap();
    let recs: Vec<_> = f.records().collect::<Result<_, _>>().unwrap();
    let datas: Vec<&[u8]> = recs.iter().map(|r| r.data).collect();
    assert_eq!(datas, vec![&req[..], &ack[..], &arp_request()[..]]);
    assert!(recs[0].ts <= recs[1].ts && recs[1].ts <= recs[2].ts);
    assert!(
        recs[0].ts.as_secs() > 1_600_000_000,
        "wall-clock timestamps"
    );
}

#[test]
fn capture_shows_faults_as_the_wire_carried_them() {
    let buf = Shared::default();
    let tap = PcapTap::new(buf.clone()).unwrap();
    let (la, _lb) = Link::pair();
    let mut a = Port::new(la, cfg_a())
        .with_tap(tap.clone())
        .with_faults("drop=0.3,dup=0.3,seed=5".parse().unwrap());
    for i in 0..100 {
        a.send(frame_ab(Opcode::RC_SEND_ONLY, i, b"data")).unwrap();
    }
    tap.flush().unwrap();
    let bytes = buf.0.lock().unwrap().clone();
    let n = PcapFile::parse(&bytes).unwrap().records().count() as u64;
    let s = a.counters().snapshot();
    assert_eq!(
        n,
        100 - s.get(Counter::FaultDropped) + s.get(Counter::FaultDuplicated)
    );
    assert_eq!(n, s.get(Counter::TxFrames));
    // Corruptions are in the capture as the wire carried them: `--decode-pcap` flags them.
    let buf = Shared::default();
    let tap = PcapTap::new(buf.clone()).unwrap();
    let (la, _lb) = Link::pair();
    let mut a = Port::new(la, cfg_a())
        .with_tap(tap.clone())
        .with_faults("corrupt=0.5,seed=5".parse().unwrap());
    for i in 0..40 {
        a.send(frame_ab(Opcode::RC_SEND_ONLY, i, b"data")).unwrap();
    }
    tap.flush().unwrap();
    let bytes = buf.0.lock().unwrap().clone();
    let sum = super::super::dump::dump_pcap(&bytes, None, &mut Vec::new()).unwrap();
    let corrupted = a.counters().get(Counter::FaultCorrupted) as usize;
    assert!(corrupted > 5);
    assert_eq!((sum.roce, sum.icrc_bad), (40, corrupted));
}

/// One frame per opcode the transport will send, A→B and B→A, through a port pair with a
/// file tap. Returns the frames in capture order.
fn capture_every_opcode(path: &std::path::Path) -> Vec<(Opcode, Vec<u8>)> {
    let tap = PcapTap::create(path).unwrap();
    let (la, lb) = Link::socket_pair().unwrap();
    let mut a = Port::new(la, cfg_a()).with_tap(tap.clone());
    let mut b = Port::new(lb, cfg_b());
    let mut frames = Vec::new();
    let requests = [
        Opcode::RC_SEND_ONLY,
        Opcode::RC_SEND_FIRST,
        Opcode::RC_SEND_MIDDLE,
        Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
        Opcode::RC_RDMA_WRITE_FIRST,
        Opcode::RC_RDMA_WRITE_MIDDLE,
        Opcode::RC_RDMA_WRITE_LAST,
        Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        Opcode::RC_RDMA_READ_REQUEST,
        Opcode::RC_COMPARE_SWAP,
        Opcode::RC_FETCH_ADD,
        Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
    ];
    let responses = [
        Opcode::RC_ACKNOWLEDGE,
        Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        Opcode::RC_RDMA_READ_RESPONSE_LAST,
        Opcode::RC_RDMA_READ_RESPONSE_ONLY,
        Opcode::RC_ATOMIC_ACKNOWLEDGE,
    ];
    for (i, op) in requests.iter().enumerate() {
        let f = frame_ab(*op, 100 + i as u32, &payload(1024, i as u8));
        a.send(f.clone()).unwrap();
        frames.push((*op, f));
        assert!(b.recv_deadline(soon()).unwrap().is_some());
    }
    for (i, op) in responses.iter().enumerate() {
        let p = if op.info().unwrap().payload {
            payload(1021, i as u8)
        } else {
            Vec::new()
        };
        let mut h = hdrs(*op, 200 + i as u32, MAC_B, MAC_A, IP_B, IP_A);
        h.bth.ack_req = false;
        let f = h.encode(&p).unwrap();
        b.send(f.clone()).unwrap();
        frames.push((*op, f));
        assert!(a.recv_deadline(soon()).unwrap().is_some());
    }
    a.shutdown(soon());
    frames
}

#[test]
fn tshark_decodes_the_capture_as_roce() {
    let path = sock_path("cap").with_extension("pcap");
    let frames = capture_every_opcode(&path);
    // The file itself: every frame, in order, byte for byte.
    let bytes = std::fs::read(&path).unwrap();
    let recs: Vec<_> = PcapFile::parse(&bytes)
        .unwrap()
        .records()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(recs.len(), frames.len());
    for (r, (_, f)) in recs.iter().zip(&frames) {
        assert_eq!(r.data, &f[..]);
    }
    // The model's own `--decode-pcap` check passes it.
    let sum = super::super::dump::dump_pcap(&bytes, None, &mut Vec::new()).unwrap();
    assert_eq!((sum.roce, sum.icrc_bad, sum.errors), (frames.len(), 0, 0));
    let out = match std::process::Command::new("tshark")
        .args(["-r"])
        .arg(&path)
        .args([
            "-T",
            "fields",
            "-E",
            "separator=,",
            "-e",
            "frame.protocols",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "infiniband.bth.psn",
            "-e",
            "_ws.expert.message",
        ])
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "SKIPPED: tshark_decodes_the_capture_as_roce: tshark not runnable ({e}); \
                 .ci/setup installs it"
            );
            let _ = std::fs::remove_file(&path);
            return;
        }
    };
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), frames.len(), "{text}");
    for (line, (op, f)) in lines.iter().zip(&frames) {
        let cols: Vec<&str> = line.split(',').collect();
        assert!(
            cols[0].ends_with("udp:infiniband") || cols[0].contains(":infiniband"),
            "{op}: not decoded as InfiniBand over UDP: {line}"
        );
        assert_eq!(cols[1], op.0.to_string(), "{op}: opcode: {line}");
        let psn = u32::from_be_bytes([0, f[42 + 9], f[42 + 10], f[42 + 11]]);
        assert_eq!(cols[2], psn.to_string(), "{op}: PSN: {line}");
        assert!(!line.to_lowercase().contains("malformed"), "{op}: {line}");
    }
    // The verbose dump: the Base Transport Header everywhere, nothing malformed.
    let v = std::process::Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .arg("-V")
        .output()
        .unwrap();
    let v = String::from_utf8_lossy(&v.stdout);
    assert_eq!(
        v.matches("Base Transport Header").count(),
        frames.len(),
        "{v}"
    );
    assert!(!v.contains("Malformed"), "{v}");
    let _ = std::fs::remove_file(&path);
}

// ---- QEMU ----------------------------------------------------------------------------------

/// Kills (and reaps) the QEMU this test started.
struct Qemu(std::process::Child);
impl Drop for Qemu {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// QEMU's own stream netdev code carries our frames: two `-netdev stream` clients, one on a
/// UNIX socket and one on TCP, joined by a QEMU hub, connect to two of our listeners; frames
/// sent on one of our links come out of the other, in both directions, byte for byte. QEMU
/// parses our framing with net/net.c `net_fill_rstate` and writes its own with
/// net/stream_data.c `net_stream_data_receive`, so this checks both against the real thing.
/// (`-S` would stop the relay: the hub delivers nothing while the VM is not running.)
#[test]
fn qemu_stream_netdev_relays_our_frames() {
    let unix = StreamAddr::Unix(sock_path("qemu"));
    let la = StreamListener::bind(&unix).unwrap();
    let lb = StreamListener::bind(&StreamAddr::parse("tcp:127.0.0.1:0").unwrap()).unwrap();
    let StreamAddr::Tcp(tcp) = lb.local_addr().unwrap() else {
        unreachable!()
    };
    let StreamAddr::Unix(path) = &unix else {
        unreachable!()
    };
    let child = std::process::Command::new("qemu-system-x86_64")
        .args([
            "-machine",
            "none",
            "-nodefaults",
            "-display",
            "none",
            "-netdev",
        ])
        .arg(format!(
            "stream,id=a,server=off,addr.type=unix,addr.path={}",
            path.display()
        ))
        .arg("-netdev")
        .arg(format!(
            "stream,id=b,server=off,addr.type=inet,addr.host=127.0.0.1,addr.port={}",
            tcp.port()
        ))
        .args(["-netdev", "hubport,id=ha,hubid=0,netdev=a"])
        .args(["-netdev", "hubport,id=hb,hubid=0,netdev=b"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let _qemu = match child {
        Ok(c) => Qemu(c),
        Err(e) => {
            eprintln!("SKIPPED: qemu_stream_netdev_relays_our_frames: qemu-system-x86_64 ({e})");
            return;
        }
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut a = Port::new(Link::Stream(la.accept(deadline).unwrap()), cfg_a());
    let mut b = Port::new(Link::Stream(lb.accept(deadline).unwrap()), cfg_b());
    // QEMU marks each netdev's link up when its main loop handles the connection, which may
    // come after our accept; the hub drops frames towards a link that is still down. Probe
    // each way until one probe gets through, then skip any late probes.
    const PROBE_PSN: u32 = 0xff_fff0;
    let probe_ab = frame_ab(Opcode::RC_SEND_ONLY, PROBE_PSN, b"probe");
    let mut probe_ba = hdrs(Opcode::RC_SEND_ONLY, PROBE_PSN, MAC_B, MAC_A, IP_B, IP_A);
    probe_ba.bth.ack_req = false;
    let probe_ba = probe_ba.encode(b"probe").unwrap();
    let probe = |tx: &mut Port, rx: &mut Port, f: &Vec<u8>| loop {
        tx.send(f.clone()).unwrap();
        let wait = Instant::now() + Duration::from_millis(50);
        if rx.recv_deadline(wait).unwrap().is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "QEMU relayed no probe");
    };
    probe(&mut a, &mut b, &probe_ab);
    probe(&mut b, &mut a, &probe_ba);
    let next = |p: &mut Port| loop {
        let x = p.recv_deadline(deadline).unwrap().expect("relayed frame");
        if x.hdrs.bth.psn != PROBE_PSN {
            return x;
        }
    };
    let sizes = [60usize, 1024, 4096, 9000, MAX_FRAME_LEN - 100];
    for (i, n) in sizes.iter().enumerate() {
        a.send(frame_ab(
            Opcode::RC_RDMA_WRITE_MIDDLE,
            i as u32,
            &payload(*n, 1),
        ))
        .unwrap();
    }
    for (i, n) in sizes.iter().enumerate() {
        // A late probe (sent again while QEMU was slow to relay the first) may still come first.
        let p = next(&mut b);
        assert_eq!(
            p.bytes,
            frame_ab(Opcode::RC_RDMA_WRITE_MIDDLE, i as u32, &payload(*n, 1))
        );
    }
    let mut ack = hdrs(Opcode::RC_ACKNOWLEDGE, 4, MAC_B, MAC_A, IP_B, IP_A);
    ack.bth.ack_req = false;
    let ack = ack.encode(&[]).unwrap();
    b.send(ack.clone()).unwrap();
    assert_eq!(next(&mut a).bytes, ack);
}
