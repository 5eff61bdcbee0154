//! The RC error paths through the whole model and real frames: a raw RoCEv2 peer on the
//! model's stream link (QEMU framing) plays the other end and answers (or not) by hand.

#[path = "datapath_common/mod.rs"]
mod dp;
#[path = "raw/mod.rs"]
mod raw;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use dp::*;
use mlx5_prm::{ads, cqe, qp, wqe};
use mlx5_sim::link::{Link, StreamAddr};
use mlx5_sim::roce::counters::Counter;
use mlx5_sim::roce::{
    decode, Aeth, AethKind, AtomicEth, Bth, EthHdr, ExtHdrs, Frame, IpHdr, Ipv4Hdr, Ipv6Hdr,
    NakCode, Opcode, Reth, RoceHeaders, UdpHdr,
};
use mlx5_sim::wire::Port;
use mlx5_sim::InProcHca;

const CE: u8 = wqe::ctrl::CQ_UPDATE;
const PEER_QPN: u32 = 0x600;
const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 9];
const UDP_SPORT: u16 = 0xd123;
const DSCP: u8 = 26;
const HOP_LIMIT: u8 = 17;

/// A received frame: headers and payload.
struct Got {
    bth: Bth,
    ext: ExtHdrs,
    payload: Vec<u8>,
}

struct Peer {
    link: Link,
    ip: IpAddr,
    hca_mac: [u8; 6],
    hca_ip: IpAddr,
}

impl Peer {
    fn send(&mut self, bth: Bth, ext: ExtHdrs, payload: &[u8]) {
        let h = RoceHeaders {
            eth: EthHdr {
                dst: self.hca_mac,
                src: PEER_MAC,
                vlan: None,
            },
            ip: match (self.ip, self.hca_ip) {
                (IpAddr::V4(src), IpAddr::V4(dst)) => IpHdr::V4(Ipv4Hdr {
                    dscp: 0,
                    ecn: 0,
                    identification: 0,
                    dont_fragment: true,
                    ttl: 64,
                    src,
                    dst,
                }),
                (src, dst) => IpHdr::V6(Ipv6Hdr {
                    traffic_class: 0,
                    flow_label: 0,
                    hop_limit: 64,
                    src: v6(src),
                    dst: v6(dst),
                }),
            },
            udp: UdpHdr {
                src_port: 0xc321,
                checksum: 0,
            },
            bth,
            ext,
        };
        self.link.send(h.encode(payload).unwrap()).unwrap();
    }

    /// The next frame from the HCA within `wait` (polling the device meanwhile).
    fn recv_within(&mut self, dev: &InProcHca, wait: Duration) -> Option<Got> {
        let deadline = Instant::now() + wait;
        loop {
            dev.poll();
            let f = self
                .link
                .recv_deadline(Instant::now() + Duration::from_millis(1))
                .unwrap();
            if let Some(f) = f {
                let Ok(Frame::Roce(r)) = decode(&f) else {
                    panic!("not a RoCEv2 frame");
                };
                assert!(r.icrc_ok(), "bad ICRC from the HCA");
                assert_eq!(
                    r.hdrs.eth.dst, PEER_MAC,
                    "destination MAC from the QP's rmac"
                );
                assert_eq!(r.hdrs.ip.dst(), self.ip);
                // Source MAC the port's; IPv4 (both GIDs IPv4-mapped) with the path's TTL and
                // DSCP and DF set; UDP from the path's udp_sport (to 4791: the decoder checks).
                assert_eq!(r.hdrs.eth.src, self.hca_mac);
                match (r.hdrs.ip, self.ip) {
                    (IpHdr::V4(v4), IpAddr::V4(_)) => {
                        assert_eq!((v4.ttl, v4.dscp, v4.dont_fragment), (HOP_LIMIT, DSCP, true))
                    }
                    (IpHdr::V6(h), IpAddr::V6(_)) => {
                        assert_eq!((h.hop_limit, h.traffic_class), (HOP_LIMIT, DSCP << 2))
                    }
                    (ip, _) => panic!("wrong IP version: {ip:?}"),
                }
                assert_eq!(r.hdrs.udp.src_port, UDP_SPORT);
                assert_eq!(r.hdrs.bth.dest_qp, PEER_QPN);
                return Some(Got {
                    bth: r.hdrs.bth,
                    ext: r.hdrs.ext,
                    payload: r.payload.to_vec(),
                });
            }
            if Instant::now() >= deadline {
                return None;
            }
        }
    }

    fn recv(&mut self, dev: &InProcHca) -> Got {
        self.recv_within(dev, PATIENCE)
            .expect("a frame from the HCA")
    }
}

struct Setup {
    dev: InProcHca,
    e: Env,
    peer: Peer,
    scq: Cq,
    rcq: Cq,
    qp: Qp,
}

fn v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

fn setup(tag: &str, retry: u32, timeout: u32) -> Setup {
    setup_ip(tag, retry, timeout, false)
}

/// A link-local IPv6 GID (not IPv4-mapped): the HCA's at GID index 1.
const HCA_V6: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
const PEER_V6: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9];

fn setup_ip(tag: &str, retry: u32, timeout: u32, ipv6: bool) -> Setup {
    let dir = std::env::temp_dir().join(format!("mlx5-wire-err-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("wire.sock");
    let dev = InProcHca::deterministic();
    dev.with_hca(|h| h.port = Port::listen(&path).unwrap());
    let mut e = Env::new(dev.clone(), 2);
    let scq = e.cq(5);
    let rcq = e.cq(5);
    let qp = e.qp(&scq, &rcq, 5, 5);
    let ip = if ipv6 {
        e.set_gid(1, HCA_V6);
        IpAddr::V6(Ipv6Addr::from(PEER_V6))
    } else {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9))
    };
    // connect_with, with the path's UDP source port, DSCP and hop limit set as Linux
    // mlx5_set_path does, so the frames can be checked against them.
    let i = e.rst2init_input(qp.qpn);
    e.raw.exec(&i, 16).ok();
    let mut i = e.init2rtr_input(qp.qpn, PEER_QPN, v6(ip).octets(), PEER_MAC, 0x100, 3);
    raw::set(&mut i, path_field(ads::SRC_ADDR_INDEX), ipv6.into());
    raw::set(&mut i, path_field(ads::UDP_SPORT), UDP_SPORT.into());
    raw::set(&mut i, path_field(ads::DSCP), DSCP.into());
    raw::set(&mut i, path_field(ads::HOP_LIMIT), HOP_LIMIT.into());
    e.raw.exec(&i, 16).ok();
    let i = e.rtr2rts_input(qp.qpn, 0x100, retry, 7, timeout);
    e.raw.exec(&i, 16).ok();
    let link = Link::connect(
        &StreamAddr::Unix(path),
        Instant::now() + Duration::from_secs(5),
    )
    .unwrap();
    let g = e.gid;
    let peer = Peer {
        link,
        ip,
        hca_mac: e.mac,
        hca_ip: if ipv6 {
            IpAddr::V6(Ipv6Addr::from(HCA_V6))
        } else {
            IpAddr::V4(Ipv4Addr::new(g[12], g[13], g[14], g[15]))
        },
    };
    Setup {
        dev,
        e,
        peer,
        scq,
        rcq,
        qp,
    }
}

fn counter(dev: &InProcHca, c: Counter) -> u64 {
    dev.with_hca(|h| h.port.counters().get(c))
}

/// No answer at all: the request goes out `retry_count + 1` times, each after the ACK timeout,
/// then the WQE completes with TRANSPORT_RETRY_EXC_ERR and the QP is in ERR.
#[test]
fn silent_peer_ends_in_retry_exceeded() {
    let mut s = setup("timeout", 2, 8);
    let buf = s.e.alloc(4096);
    let key = s.e.mkey(buf, 4096, LR);
    // 2000 bytes at MTU 1024: two packets per attempt.
    s.e.post_send(
        &mut s.qp,
        wqe::opcode::RDMA_WRITE,
        CE,
        0,
        &[&raddr_seg(0x1000, 0x77), &dseg(2000, key, buf)],
    );
    let mut psns = Vec::new();
    while let Some(g) = s.peer.recv_within(&s.dev, Duration::from_millis(300)) {
        psns.push((g.bth.opcode, g.bth.psn));
    }
    let first = [
        (Opcode::RC_RDMA_WRITE_FIRST, 0x100),
        (Opcode::RC_RDMA_WRITE_LAST, 0x101),
    ];
    assert_eq!(
        psns,
        [first, first, first].concat(),
        "sent, then retried twice"
    );
    let c = s.e.wait_cq(&mut s.scq, &[]);
    assert_eq!(c.syndrome(), cqe::syndrome::TRANSPORT_RETRY_EXC_ERR);
    assert_eq!(s.e.qp_state(s.qp.qpn), qp::state::ERR as u32);
    assert_eq!(counter(&s.dev, Counter::LocalAckTimeout), 3);
    assert_eq!(counter(&s.dev, Counter::RetriesExceeded), 1);
    assert_eq!(counter(&s.dev, Counter::Retransmits), 4);
}

/// A PSN sequence NAK naming the second packet: the requester resends from there (not from
/// the start), and the ACK of the last packet completes the WQE.
#[test]
fn psn_sequence_nak_resends_from_the_named_psn() {
    let mut s = setup("seqnak", 7, 14);
    let buf = s.e.alloc(4096);
    let key = s.e.mkey(buf, 4096, LR);
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    s.e.write(buf, &data);
    s.e.post_send(
        &mut s.qp,
        wqe::opcode::RDMA_WRITE,
        CE,
        0,
        &[&raddr_seg(0x1000, 0x77), &dseg(3000, key, buf)],
    );
    let got: Vec<Got> = (0..3).map(|_| s.peer.recv(&s.dev)).collect();
    assert_eq!(
        got.iter().map(|g| g.bth.psn).collect::<Vec<_>>(),
        [0x100, 0x101, 0x102]
    );
    assert_eq!(got[0].ext.reth.unwrap().dma_len, 3000);
    assert_eq!(got[1].payload, data[1024..2048]);
    // "I expected 0x101": the second packet was lost.
    let nak = ExtHdrs {
        aeth: Some(Aeth::nak(NakCode::PsnSequenceError, 0)),
        ..ExtHdrs::default()
    };
    s.peer
        .send(Bth::new(Opcode::RC_ACKNOWLEDGE, s.qp.qpn, 0x101), nak, &[]);
    let again: Vec<Got> = (0..2).map(|_| s.peer.recv(&s.dev)).collect();
    assert_eq!(
        again
            .iter()
            .map(|g| (g.bth.opcode, g.bth.psn))
            .collect::<Vec<_>>(),
        [
            (Opcode::RC_RDMA_WRITE_MIDDLE, 0x101),
            (Opcode::RC_RDMA_WRITE_LAST, 0x102)
        ]
    );
    assert_eq!(again[0].payload, data[1024..2048]);
    assert!(again[1].bth.ack_req, "AckReq on the last packet");
    let ack = ExtHdrs {
        aeth: Some(Aeth::ack(Aeth::CREDIT_UNLIMITED, 1)),
        ..ExtHdrs::default()
    };
    s.peer
        .send(Bth::new(Opcode::RC_ACKNOWLEDGE, s.qp.qpn, 0x102), ack, &[]);
    let c = s.e.wait_cq(&mut s.scq, &[]);
    assert_eq!((c.opcode(), c.byte_cnt()), (cqe::opcode::REQ, 3000));
    assert_eq!(counter(&s.dev, Counter::PacketSeqErr), 1);
    assert_eq!(counter(&s.dev, Counter::Retransmits), 2);
}

/// The model as responder: a duplicate READ is executed again from its PSN (same bytes), a
/// duplicate atomic is answered from the saved result (memory changed once).
#[test]
fn duplicate_read_and_atomic_are_replayed() {
    let mut s = setup("dup", 7, 14);
    let buf = s.e.alloc(8192);
    let key = s.e.mkey(buf, 8192, LW | RR | RW | A);
    let data: Vec<u8> = (0..2500u32).map(|i| (i * 13 + 1) as u8).collect();
    s.e.write(buf, &data);
    s.e.write(buf + 4096, &40u64.to_be_bytes());
    let qpn = s.qp.qpn;
    let read = |psn| {
        let mut b = Bth::new(Opcode::RC_RDMA_READ_REQUEST, qpn, psn);
        b.ack_req = true;
        b
    };
    let reth = ExtHdrs {
        reth: Some(Reth {
            va: buf,
            r_key: key,
            dma_len: 2500,
        }),
        ..ExtHdrs::default()
    };
    let read_back = |s: &mut Setup| -> Vec<(Opcode, u32, Vec<u8>)> {
        (0..3)
            .map(|_| {
                let g = s.peer.recv(&s.dev);
                (g.bth.opcode, g.bth.psn, g.payload)
            })
            .collect()
    };
    s.peer.send(read(0x100), reth, &[]);
    let first = read_back(&mut s);
    assert_eq!(
        first.iter().map(|r| (r.0, r.1)).collect::<Vec<_>>(),
        [
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0x100),
            (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 0x101),
            (Opcode::RC_RDMA_READ_RESPONSE_LAST, 0x102)
        ]
    );
    assert_eq!(
        first.iter().flat_map(|r| r.2.clone()).collect::<Vec<_>>(),
        data
    );
    let mut fa = Bth::new(Opcode::RC_FETCH_ADD, qpn, 0x103);
    fa.ack_req = true;
    let aeth = ExtHdrs {
        atomic_eth: Some(AtomicEth {
            va: buf + 4096,
            r_key: key,
            swap_add: 2,
            compare: 0,
        }),
        ..ExtHdrs::default()
    };
    s.peer.send(fa, aeth, &[]);
    let g = s.peer.recv(&s.dev);
    assert_eq!(g.bth.opcode, Opcode::RC_ATOMIC_ACKNOWLEDGE);
    assert_eq!(g.ext.atomic_ack_eth.unwrap().orig, 40);
    // Both again, as a requester that lost the responses would send them.
    s.peer.send(read(0x100), reth, &[]);
    let again = read_back(&mut s);
    assert_eq!(again, first, "the duplicate READ is executed again");
    s.peer.send(fa, aeth, &[]);
    let g = s.peer.recv(&s.dev);
    assert_eq!(
        (g.bth.opcode, g.bth.psn, g.ext.atomic_ack_eth.unwrap().orig),
        (Opcode::RC_ATOMIC_ACKNOWLEDGE, 0x103, 40)
    );
    assert_eq!(s.e.read(buf + 4096, 8), 42u64.to_be_bytes(), "added once");
    assert_eq!(counter(&s.dev, Counter::DuplicateRequest), 2);
    assert_eq!(s.e.qp_state(qpn), qp::state::RTS as u32);
    let _ = (&s.rcq, AethKind::Ack { credit: 0 });
}

/// GIDs that are not IPv4-mapped make IPv6 frames (hop limit and traffic class from the path);
/// the peer's IPv6 ACK completes the WRITE.
#[test]
fn ipv6_gids_make_ipv6_frames() {
    let mut s = setup_ip("v6", 7, 14, true);
    let buf = s.e.alloc(4096);
    let key = s.e.mkey(buf, 4096, LR);
    s.e.post_send(
        &mut s.qp,
        wqe::opcode::RDMA_WRITE,
        CE,
        0,
        &[&raddr_seg(0x1000, 0x77), &dseg(100, key, buf)],
    );
    let g = s.peer.recv(&s.dev);
    assert_eq!(
        (g.bth.opcode, g.bth.psn),
        (Opcode::RC_RDMA_WRITE_ONLY, 0x100)
    );
    let ack = ExtHdrs {
        aeth: Some(Aeth::ack(Aeth::CREDIT_UNLIMITED, 1)),
        ..ExtHdrs::default()
    };
    s.peer
        .send(Bth::new(Opcode::RC_ACKNOWLEDGE, s.qp.qpn, 0x100), ack, &[]);
    let c = s.e.wait_cq(&mut s.scq, &[]);
    assert_eq!((c.opcode(), c.byte_cnt()), (cqe::opcode::REQ, 100));
}

/// The port takes only frames meant for it: a RoCE frame to an IP that is none of the HCA's
/// GIDs, or to another unicast MAC, is dropped without an answer and counted
/// (`rx_drop_wrong_dst_ip`, `rx_drop_wrong_dst_mac`); the same request to the right address is
/// executed. A GID programmed later is accepted from then on, and a cleared one no longer is.
#[test]
fn frames_for_other_addresses_are_dropped_and_counted() {
    let mut s = setup("dst", 7, 14);
    let buf = s.e.alloc(4096);
    let key = s.e.mkey(buf, 4096, LW | RR | RW | A);
    s.e.write(buf, &[0x5a; 64]);
    let qpn = s.qp.qpn;
    let read = |psn| {
        let mut b = Bth::new(Opcode::RC_RDMA_READ_REQUEST, qpn, psn);
        b.ack_req = true;
        b
    };
    let reth = ExtHdrs {
        reth: Some(Reth {
            va: buf,
            r_key: key,
            dma_len: 64,
        }),
        ..ExtHdrs::default()
    };
    let (ip0, mac0) = (s.peer.hca_ip, s.peer.hca_mac);
    let quiet = Duration::from_millis(300);

    // Another IP (10.0.0.77 is no GID of the HCA).
    let other = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 77));
    s.peer.hca_ip = other;
    s.peer.send(read(0x100), reth, &[]);
    assert!(
        s.peer.recv_within(&s.dev, quiet).is_none(),
        "answered a frame to {other}"
    );
    assert_eq!(counter(&s.dev, Counter::RxDropWrongDstIp), 1);

    // Another unicast MAC, right IP.
    s.peer.hca_ip = ip0;
    s.peer.hca_mac = [2, 0, 0, 0, 0, 0x77];
    s.peer.send(read(0x100), reth, &[]);
    // The reply (if any) would carry the port's MAC as source: put it back for the check.
    s.peer.hca_mac = mac0;
    assert!(
        s.peer.recv_within(&s.dev, quiet).is_none(),
        "answered a frame to another MAC"
    );
    assert_eq!(counter(&s.dev, Counter::RxDropWrongDstMac), 1);
    assert_eq!(counter(&s.dev, Counter::DuplicateRequest), 0);
    assert_eq!(counter(&s.dev, Counter::OutOfSequence), 0);

    // The right address: executed.
    s.peer.send(read(0x100), reth, &[]);
    let g = s.peer.recv(&s.dev);
    assert_eq!(
        (g.bth.opcode, g.payload),
        (Opcode::RC_RDMA_READ_RESPONSE_ONLY, vec![0x5a; 64])
    );

    // Program 10.0.0.77 as GID 3: frames to it are taken now (a duplicate READ, replayed).
    let mut g77 = [0u8; 16];
    g77[10] = 0xff;
    g77[11] = 0xff;
    g77[12..].copy_from_slice(&[10, 0, 0, 77]);
    s.e.set_gid(3, g77);
    s.peer.hca_ip = other;
    s.peer.send(read(0x100), reth, &[]);
    // Replies come from the QP's own source GID, whatever the request was sent to.
    s.peer.hca_ip = ip0;
    let g = s.peer.recv(&s.dev);
    assert_eq!(g.bth.opcode, Opcode::RC_RDMA_READ_RESPONSE_ONLY);
    assert_eq!(counter(&s.dev, Counter::DuplicateRequest), 1);
    assert_eq!(counter(&s.dev, Counter::RxDropWrongDstIp), 1);
}
