//! Two HCAs on a wire: the in-process frame pair, the shared-memory pair (packets by
//! reference), the UNIX socket between two threads (as between two processes, QEMU stream
//! framing), and RC PSN checking against a raw RoCEv2 peer on the socket.

#[path = "datapath_common/mod.rs"]
mod dp;
#[path = "raw/mod.rs"]
mod raw;

use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use dp::*;
use mlx5_prm::{cqe, qp, wqe};
use mlx5_sim::front::device::ExecMode;
use mlx5_sim::link::{Link, StreamAddr};
use mlx5_sim::roce::{
    decode, Aeth, AethKind, Bth, EthHdr, ExtHdrs, Frame, IpHdr, Ipv4Hdr, NakCode, Opcode, Reth,
    RoceHeaders, UdpHdr,
};
use mlx5_sim::wire::Port;
use mlx5_sim::InProcHca;

const CE: u8 = wqe::ctrl::CQ_UPDATE;

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

#[test]
fn two_hcas_joined_in_process() {
    let (da, db) = InProcHca::pair(ExecMode::Inline);
    let mut ea = Env::new(da.clone(), 1);
    let mut eb = Env::new(db.clone(), 2);
    assert_ne!(ea.mac, eb.mac);
    let w = wire_pair(&mut ea, &mut eb, 6, 14);
    let (mut a, mut b, mut a_scq, mut b_rcq) = (w.a, w.b, w.a_scq, w.b_rcq);

    let a_buf = ea.alloc(64 * 1024);
    let b_buf = eb.alloc(64 * 1024);
    let a_key = ea.mkey(a_buf, 64 * 1024, LR | LW);
    let b_key = eb.mkey(b_buf, 64 * 1024, LR | LW | RR | RW | A);
    let data = pattern(40_000, 3);
    ea.write(a_buf, &data);

    // RDMA WRITE of 40 000 bytes (40 MTU-sized packets' worth of PSNs).
    ea.post_send(
        &mut a,
        wqe::opcode::RDMA_WRITE,
        CE,
        0,
        &[&raddr_seg(b_buf, b_key), &dseg(40_000, a_key, a_buf)],
    );
    assert!(
        ea.poll_cq(&mut a_scq).is_none(),
        "nothing before the peer runs"
    );
    let c = ea.wait_cq(&mut a_scq, &[&db]);
    assert_eq!(c.opcode(), cqe::opcode::REQ);
    assert_eq!(eb.read(b_buf, 40_000), data);
    let d = ea.query_qp(a.qpn);
    let sent_psn = d.get(mlx5_prm::qpc::NEXT_SEND_PSN.within(mlx5_prm::query_qp_out::QPC));
    assert_eq!(sent_psn, 0x100 + 40, "1024-byte MTU: 40 PSNs");

    // RDMA READ back into another part of A.
    ea.post_send(
        &mut a,
        wqe::opcode::RDMA_READ,
        CE,
        0,
        &[
            &raddr_seg(b_buf + 100, b_key),
            &dseg(5000, a_key, a_buf + 50_000),
        ],
    );
    let c = ea.wait_cq(&mut a_scq, &[&db]);
    assert_eq!(
        (c.wqe_opcode(), c.byte_cnt()),
        (wqe::opcode::RDMA_READ, 5000)
    );
    assert_eq!(ea.read(a_buf + 50_000, 5000), data[100..5100]);

    // SEND / RECV.
    eb.post_recv(&mut b, &[(1000, b_key, b_buf + 60_000)]);
    ea.post_send(
        &mut a,
        wqe::opcode::SEND_IMM,
        CE,
        0xabcd,
        &[&dseg(700, a_key, a_buf)],
    );
    let r = eb.wait_cq(&mut b_rcq, &[&da]);
    assert_eq!(
        (r.opcode(), r.byte_cnt(), r.imm(), r.remote_qpn()),
        (cqe::opcode::RESP_SEND_IMM, 700, 0xabcd, a.qpn)
    );
    assert_eq!(eb.read(b_buf + 60_000, 700), data[..700]);
    ea.wait_cq(&mut a_scq, &[&db]);

    // Fetch-and-add.
    eb.write(b_buf + 64, &41u64.to_be_bytes());
    ea.post_send(
        &mut a,
        wqe::opcode::ATOMIC_FA,
        CE,
        0,
        &[
            &raddr_seg(b_buf + 64, b_key),
            &atomic_seg(1, 0),
            &dseg(8, a_key, a_buf + 60_000),
        ],
    );
    ea.wait_cq(&mut a_scq, &[&db]);
    assert_eq!(eb.read(b_buf + 64, 8), 42u64.to_be_bytes());
    assert_eq!(ea.read(a_buf + 60_000, 8), 41u64.to_be_bytes());

    // An rkey fault crosses the wire as a NAK.
    ea.post_send(
        &mut a,
        wqe::opcode::RDMA_WRITE,
        0,
        0,
        &[
            &raddr_seg(b_buf + 64 * 1024 - 4, b_key),
            &dseg(8, a_key, a_buf),
        ],
    );
    let c = ea.wait_cq(&mut a_scq, &[&db]);
    assert_eq!(c.syndrome(), cqe::syndrome::REMOTE_ACCESS_ERR);
    assert_eq!(eb.qp_state(b.qpn), qp::state::ERR as u32);
}

/// Two HCAs in one host (one guest memory, `InProcHca::pair_sharing_memory`): payloads cross
/// the in-process wire as references and land with one copy. WRITE, READ and SEND arrive
/// intact; a payload whose source is unmapped while in flight is lost like a corrupted packet,
/// and the requester's retransmission then finds the fault itself (local protection error).
#[test]
fn two_hcas_sharing_one_memory() {
    let (da, db) = InProcHca::pair_sharing_memory(ExecMode::Inline);
    assert!(std::sync::Arc::ptr_eq(da.memory(), db.memory()));
    let mut ea = Env::new(da.clone(), 1);
    let mut eb = Env::new(db.clone(), 2);
    // ack_timeout 10: ~4 ms before a lost request is sent again.
    let w = wire_pair(&mut ea, &mut eb, 6, 10);
    let (mut a, mut b, mut a_scq, mut b_rcq) = (w.a, w.b, w.a_scq, w.b_rcq);

    // Source split over two separate allocations (two gather entries), so the payload has
    // more than one piece.
    let a_buf = ea.alloc(64 * 1024);
    let a_buf2 = ea.alloc(8 * 1024);
    let b_buf = eb.alloc(64 * 1024);
    let a_key = ea.mkey(a_buf, 64 * 1024, LR | LW);
    let a_key2 = ea.mkey(a_buf2, 8 * 1024, LR | LW);
    let b_key = eb.mkey(b_buf, 64 * 1024, LR | LW | RR | RW);
    let data = pattern(40_000, 5);
    ea.write(a_buf, &data);
    let tail = pattern(3000, 77);
    ea.write(a_buf2, &tail);

    ea.post_send(
        &mut a,
        wqe::opcode::RDMA_WRITE,
        CE,
        0,
        &[
            &raddr_seg(b_buf, b_key),
            &dseg(40_000, a_key, a_buf),
            &dseg(3000, a_key2, a_buf2),
        ],
    );
    let c = ea.wait_cq(&mut a_scq, &[&db]);
    assert_eq!((c.opcode(), c.byte_cnt()), (cqe::opcode::REQ, 43_000));
    assert_eq!(eb.read(b_buf, 40_000), data);
    assert_eq!(eb.read(b_buf + 40_000, 3000), tail);

    // RDMA READ from B into A.
    ea.post_send(
        &mut a,
        wqe::opcode::RDMA_READ,
        CE,
        0,
        &[
            &raddr_seg(b_buf + 39_000, b_key),
            &dseg(1000, a_key, a_buf + 50_000),
            &dseg(1500, a_key2, a_buf2 + 4096),
        ],
    );
    let c = ea.wait_cq(&mut a_scq, &[&db]);
    assert_eq!(
        (c.wqe_opcode(), c.byte_cnt()),
        (wqe::opcode::RDMA_READ, 2500)
    );
    assert_eq!(ea.read(a_buf + 50_000, 1000), data[39_000..40_000]);
    assert_eq!(ea.read(a_buf2 + 4096, 1500), tail[..1500]);

    // SEND into two receive scatter entries.
    eb.post_recv(
        &mut b,
        &[(300, b_key, b_buf + 60_000), (1000, b_key, b_buf + 62_000)],
    );
    ea.post_send(
        &mut a,
        wqe::opcode::SEND,
        CE,
        0,
        &[&dseg(900, a_key, a_buf + 7)],
    );
    let r = eb.wait_cq(&mut b_rcq, &[&da]);
    assert_eq!((r.opcode(), r.byte_cnt()), (cqe::opcode::RESP_SEND, 900));
    assert_eq!(eb.read(b_buf + 60_000, 300), data[7..307]);
    assert_eq!(eb.read(b_buf + 62_000, 600), data[307..907]);
    ea.wait_cq(&mut a_scq, &[&db]);

    // The source is unmapped after A checked it but before B moves it: B drops the packet,
    // A's ACK timer resends, and A now fails the WQE itself.
    let before = eb.read(b_buf, 16);
    ea.post_send(
        &mut a,
        wqe::opcode::RDMA_WRITE,
        CE,
        0,
        &[&raddr_seg(b_buf, b_key), &dseg(16, a_key2, a_buf2)],
    );
    assert!(da.memory().free(a_buf2));
    db.poll();
    assert_eq!(
        eb.read(b_buf, 16),
        before,
        "nothing written from a lost packet"
    );
    assert_eq!(db.with_hca(|h| h.port().dropped), 1);
    let c = ea.wait_cq(&mut a_scq, &[&db]);
    assert_eq!(
        (c.syndrome(), c.vendor_syndrome()),
        (
            cqe::syndrome::LOCAL_PROT_ERR,
            mlx5_sim::datapath::vendor::DMA_FAULT
        )
    );
}

fn sock_path(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("mlx5-dp-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("wire.sock")
}

/// What one side tells the other to connect.
struct Hello {
    qpn: u32,
    gid: [u8; 16],
    mac: [u8; 6],
    buf: u64,
    rkey: u32,
}

#[test]
fn two_hcas_over_a_unix_socket_in_two_threads() {
    let path = sock_path("threads");
    let listen = Port::listen(&path).unwrap();
    let (to_a, from_b) = mpsc::channel::<Hello>();
    let (to_b, from_a) = mpsc::channel::<Hello>();
    let data = pattern(100_000, 11);
    let expect = data.clone();

    let side_b = std::thread::spawn(move || {
        let dev = InProcHca::deterministic();
        dev.with_hca(|h| *h.port_mut() = listen);
        let mut e = Env::new(dev, 2);
        let scq = e.cq(5);
        let mut rcq = e.cq(5);
        let mut b = e.qp(&scq, &rcq, 5, 5);
        let buf = e.alloc(128 * 1024);
        let rkey = e.mkey(buf, 128 * 1024, LW | RW);
        e.post_recv(&mut b, &[(64, rkey, buf + 120_000)]);
        to_a.send(Hello {
            qpn: b.qpn,
            gid: e.gid,
            mac: e.mac,
            buf,
            rkey,
        })
        .unwrap();
        let peer = from_a.recv().unwrap();
        e.connect_with(&b, peer.qpn, peer.gid, peer.mac, 1, 7, 7, 14);
        // The SEND that follows the WRITE tells us the data is complete.
        let r = e.wait_cq(&mut rcq, &[]);
        assert_eq!(r.opcode(), cqe::opcode::RESP_SEND);
        assert_eq!(e.read(buf + 120_000, 4), b"done");
        assert_eq!(e.read(buf, 100_000), expect);
        // Keep answering until A has its completions.
        let deadline = Instant::now() + PATIENCE;
        while from_a.recv_timeout(Duration::from_millis(1)).is_err() {
            e.dev().poll();
            assert!(Instant::now() < deadline);
        }
    });

    let peer = from_b.recv().unwrap();
    let dev = InProcHca::deterministic();
    dev.with_hca(|h| *h.port_mut() = Port::connect(&path).unwrap());
    let mut e = Env::new(dev, 1);
    let mut scq = e.cq(5);
    let rcq = e.cq(5);
    let mut a = e.qp(&scq, &rcq, 5, 5);
    e.connect_with(&a, peer.qpn, peer.gid, peer.mac, 1, 7, 7, 14);
    to_b.send(Hello {
        qpn: a.qpn,
        gid: e.gid,
        mac: e.mac,
        buf: 0,
        rkey: 0,
    })
    .unwrap();
    let buf = e.alloc(128 * 1024);
    let lkey = e.mkey(buf, 128 * 1024, LR);
    e.write(buf, &data);
    e.write(buf + 110_000, b"done");
    // Give B time to reach RTR (requests to a QP not yet in RTR are dropped and retried).
    e.post_send(
        &mut a,
        wqe::opcode::RDMA_WRITE,
        CE,
        0,
        &[&raddr_seg(peer.buf, peer.rkey), &dseg(100_000, lkey, buf)],
    );
    let c = e.wait_cq(&mut scq, &[]);
    assert_eq!(c.opcode(), cqe::opcode::REQ, "syndrome {:#x}", c.syndrome());
    e.post_send(
        &mut a,
        wqe::opcode::SEND,
        CE,
        0,
        &[&dseg(4, lkey, buf + 110_000)],
    );
    let c = e.wait_cq(&mut scq, &[]);
    assert_eq!(c.opcode(), cqe::opcode::REQ);
    to_b.send(Hello {
        qpn: 0,
        gid: [0; 16],
        mac: [0; 6],
        buf: 0,
        rkey: 0,
    })
    .unwrap();
    side_b.join().unwrap();
}

/// A raw RoCEv2 peer on the socket: QEMU stream framing, frames built with the codec.
struct RawPeer {
    link: Link,
    mac: [u8; 6],
    ip: Ipv4Addr,
    hca_mac: [u8; 6],
    hca_ip: Ipv4Addr,
}

impl RawPeer {
    fn send(&mut self, from_ip: Ipv4Addr, bth: Bth, ext: ExtHdrs, payload: &[u8]) {
        let h = RoceHeaders {
            eth: EthHdr {
                dst: self.hca_mac,
                src: self.mac,
                vlan: None,
            },
            ip: IpHdr::V4(Ipv4Hdr {
                dscp: 0,
                ecn: 0,
                identification: 0,
                dont_fragment: true,
                ttl: 64,
                src: from_ip,
                dst: self.hca_ip,
            }),
            udp: UdpHdr {
                src_port: 0xc123,
                checksum: 0,
            },
            bth,
            ext,
        };
        self.link.send(h.encode(payload).unwrap()).unwrap();
    }

    /// The next frame from the HCA: (BTH, AETH).
    fn recv(&mut self, dev: &InProcHca) -> (Bth, Option<Aeth>) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            dev.poll();
            let f = self
                .link
                .recv_deadline(Instant::now() + Duration::from_millis(2))
                .unwrap();
            if let Some(f) = f {
                let Ok(Frame::Roce(r)) = decode(&f) else {
                    panic!("not a RoCEv2 frame: {f:02x?}");
                };
                assert!(r.icrc_ok(), "bad ICRC from the HCA");
                assert_eq!(r.hdrs.eth.dst, self.mac);
                assert_eq!(r.hdrs.ip.dst(), self.ip);
                return (r.hdrs.bth, r.hdrs.ext.aeth);
            }
            assert!(Instant::now() < deadline, "no answer from the HCA");
        }
    }
}

fn v4(gid: &[u8; 16]) -> Ipv4Addr {
    Ipv4Addr::new(gid[12], gid[13], gid[14], gid[15])
}

#[test]
fn responder_checks_psns_from_a_raw_peer() {
    let path = sock_path("raw");
    let dev = InProcHca::deterministic();
    dev.with_hca(|h| *h.port_mut() = Port::listen(&path).unwrap());
    let mut e = Env::new(dev.clone(), 2);
    let scq = e.cq(5);
    let mut rcq = e.cq(5);
    let mut b = e.qp(&scq, &rcq, 5, 5);
    let buf = e.alloc(4096);
    let key = e.mkey(buf, 4096, LW | RW);
    let peer_qpn = 0x500;
    let peer_ip = Ipv4Addr::new(10, 0, 0, 9);
    let peer_gid = peer_ip.to_ipv6_mapped().octets();
    let peer_mac = [2, 0, 0, 0, 0, 9];
    e.connect_with(&b, peer_qpn, peer_gid, peer_mac, 3, 7, 7, 14);
    let link = Link::connect(
        &StreamAddr::Unix(path.clone()),
        Instant::now() + Duration::from_secs(5),
    )
    .unwrap();
    let mut peer = RawPeer {
        link,
        mac: peer_mac,
        ip: peer_ip,
        hca_mac: e.mac,
        hca_ip: v4(&e.gid),
    };
    let b_qpn = b.qpn;
    let send_bth = |psn: u32| {
        let mut h = Bth::new(Opcode::RC_SEND_ONLY, b_qpn, psn);
        h.ack_req = true;
        h
    };
    let aeth = |a: Option<Aeth>| a.expect("AETH").kind();
    // The QP expects PSN 0x100 (connect_with). Ahead: one sequence NAK naming 0x100.
    peer.send(peer_ip, send_bth(0x102), ExtHdrs::default(), b"x");
    peer.send(peer_ip, send_bth(0x103), ExtHdrs::default(), b"y");
    let (h, a) = peer.recv(&dev);
    assert_eq!(
        (h.opcode, h.psn, h.dest_qp, aeth(a)),
        (
            Opcode::RC_ACKNOWLEDGE,
            0x100,
            peer_qpn,
            AethKind::Nak(NakCode::PsnSequenceError)
        )
    );
    // No receive posted: RNR NAK with the QP's min_rnr_nak (3).
    peer.send(peer_ip, send_bth(0x100), ExtHdrs::default(), b"abc");
    let (h, a) = peer.recv(&dev);
    assert_eq!((h.psn, aeth(a)), (0x100, AethKind::RnrNak { timer: 3 }));
    e.post_recv(&mut b, &[(64, key, buf)]);
    e.post_recv(&mut b, &[(64, key, buf + 64)]);
    peer.send(peer_ip, send_bth(0x100), ExtHdrs::default(), b"abc");
    let (h, a) = peer.recv(&dev);
    assert_eq!((h.psn, aeth(a)), (0x100, AethKind::Ack { credit: 31 }));
    assert_eq!(e.read(buf, 3), b"abc");
    // A duplicate is acknowledged again and not delivered twice.
    peer.send(peer_ip, send_bth(0x100), ExtHdrs::default(), b"abc");
    let (h, a) = peer.recv(&dev);
    assert!(matches!(aeth(a), AethKind::Ack { .. }));
    assert_eq!(h.psn, 0x100);
    let r = e.poll_cq(&mut rcq).unwrap();
    assert_eq!(
        (r.opcode(), r.byte_cnt(), r.remote_qpn()),
        (cqe::opcode::RESP_SEND, 3, peer_qpn)
    );
    assert!(e.poll_cq(&mut rcq).is_none());
    // Packets from an address we are not connected to are dropped silently.
    peer.send(
        Ipv4Addr::new(10, 0, 0, 77),
        send_bth(0x101),
        ExtHdrs::default(),
        b"zz",
    );
    // An RDMA WRITE outside the rkey: remote access NAK, the QP goes to ERR.
    let mut wb = Bth::new(Opcode::RC_RDMA_WRITE_ONLY, b_qpn, 0x101);
    wb.ack_req = true;
    let ext = ExtHdrs {
        reth: Some(Reth {
            va: buf + 4090,
            r_key: key,
            dma_len: 16,
        }),
        ..ExtHdrs::default()
    };
    peer.send(peer_ip, wb, ext, &[1; 16]);
    let (h, a) = peer.recv(&dev);
    assert_eq!(
        (h.psn, aeth(a)),
        (0x101, AethKind::Nak(NakCode::RemoteAccessError))
    );
    assert_eq!(e.qp_state(b.qpn), qp::state::ERR as u32);
    assert!(e.read(buf + 4090, 6).iter().all(|&x| x == 0));
    let f = e.poll_cq(&mut rcq).unwrap();
    assert_eq!(f.syndrome(), cqe::syndrome::WR_FLUSH_ERR);
}

#[test]
fn two_threaded_devices_poll_the_wire_themselves() {
    let (da, db) = InProcHca::pair(ExecMode::Thread);
    threaded_sends(&da, &db, 1);
}

/// `rounds` SENDs of 5,000 bytes from `da` to `db`, both threaded: only CQ polling here, the
/// device threads move the packets. Each lands whole and completes on both sides.
fn threaded_sends(da: &InProcHca, db: &InProcHca, rounds: u8) {
    let mut ea = Env::new(da.clone(), 1);
    let mut eb = Env::new(db.clone(), 2);
    let w = wire_pair(&mut ea, &mut eb, 5, 14);
    let (mut a, mut b, mut a_scq, mut b_rcq) = (w.a, w.b, w.a_scq, w.b_rcq);
    let a_buf = ea.alloc(8192);
    let b_buf = eb.alloc(8192);
    let a_key = ea.mkey(a_buf, 8192, LR);
    let b_key = eb.mkey(b_buf, 8192, LW);
    for round in 1..=rounds {
        ea.write(a_buf, &pattern(5000, round));
        eb.post_recv(&mut b, &[(8192, b_key, b_buf)]);
        ea.post_send(
            &mut a,
            wqe::opcode::SEND,
            CE,
            0,
            &[&dseg(5000, a_key, a_buf)],
        );
        let deadline = Instant::now() + PATIENCE;
        let r = loop {
            if let Some(c) = eb.poll_cq(&mut b_rcq) {
                break c;
            }
            assert!(Instant::now() < deadline, "no receive completion");
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(r.byte_cnt(), 5000);
        assert_eq!(eb.read(b_buf, 5000), pattern(5000, round));
        let s = loop {
            if let Some(c) = ea.poll_cq(&mut a_scq) {
                break c;
            }
            assert!(Instant::now() < deadline, "no send completion");
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(s.opcode(), cqe::opcode::REQ);
    }
}

/// On a socket (the wire `mlx5-sim` serves), a device thread takes a frame when it arrives:
/// it waits on the socket, not only for its tick ([`WakeStats`]: wakes by the wire).
#[test]
fn threaded_devices_on_a_socket_wake_for_the_wire() {
    let (da, db) = InProcHca::pair_on_sockets(ExecMode::Thread).unwrap();
    let wire_wakes = |d: &InProcHca| d.wake_stats().wire.load(Ordering::Relaxed);
    let before = (wire_wakes(&da), wire_wakes(&db));
    threaded_sends(&da, &db, 20);
    // B takes each SEND, A each ACK, off the socket: every one of them could come with a
    // tick instead only if it arrived exactly as the tick ended, 20 times in a row.
    assert!(wire_wakes(&db) > before.1, "B never woke for a frame");
    assert!(wire_wakes(&da) > before.0, "A never woke for an ACK");
}
