//! UD and GSI QPs over two emulated HCAs joined by a frame wire (`SimHal::pair()`: each
//! datagram crosses as an Ethernet frame; `pair_sharing_memory` carries RC packets only and
//! drops datagrams, so in-process UD tests use this pair).
//!
//! What is checked: address handles (Linux hw/mlx5/ah.c `create_ib_ah`), UD SENDs with and
//! without immediate data both ways, the 40-byte GRH area in front of the payload (RoCE v2
//! over IPv4: 20 zero bytes then the IPv4 header, rdma-core libibverbs/man/ibv_poll_cq.3), the
//! receive completion's fields (Linux hw/mlx5/cq.c `handle_responder`), the GSI QP reached as
//! QPN 1 and sending from QPN 1, the refusals, a QP moved to RESET and back.

#[allow(dead_code)]
mod common;

use common::*;
use mlx5::{
    AccessFlags, AddressHandle, AhAttr, CompletionQueue, Context, Error, InvalidInput,
    MemoryRegion, ProtectionDomain, QpCaps, QueuePair, RecvWr, SendData, SendFlags, SendOp, SendWr,
    UdDest, WcFlags, WcOpcode, WcStatus, GRH_BYTES, GSI_QKEY, GSI_QPN,
};
use std::sync::Arc;
use std::time::Duration;

const QKEY: u32 = 0x1111_1111;
const IP_A: [u8; 4] = [10, 0, 0, 1];
const IP_B: [u8; 4] = [10, 0, 0, 2];
/// Receive buffers: the GRH area and a MAD.
const SLOT: usize = GRH_BYTES + 256;

/// One end: a context on one of the paired models, its IPv4 GID's index, a PD, a CQ and a
/// region of receive slots.
struct End {
    _sim: Arc<SimHal>,
    ctx: Context<TestHal>,
    sgid: u8,
    pd: ProtectionDomain<TestHal>,
    cq: CompletionQueue<TestHal>,
    mr: MemoryRegion<TestHal>,
}

fn end(sim: Arc<SimHal>, ip: [u8; 4]) -> End {
    let ctx = Context::open(TestHal(sim.clone()), test_config()).expect("bring-up");
    let sgid = ctx.add_ipv4_gid(ip).unwrap() as u8;
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let mr = pd.alloc_mr(16 * SLOT, AccessFlags::ALL).unwrap();
    End {
        _sim: sim,
        ctx,
        sgid,
        pd,
        cq,
        mr,
    }
}

fn ends() -> (End, End) {
    let (sa, sb) = SimHal::pair();
    (end(sa, IP_A), end(sb, IP_B))
}

/// An address handle from `from` to `to`'s IPv4 GID and MAC.
fn ah_to(from: &End, to: &End, ip: [u8; 4]) -> AddressHandle {
    from.pd
        .create_ah(&AhAttr {
            dgid: mlx5::hca::ipv4_mapped_gid(ip),
            dmac: to.ctx.mac(),
            sgid_index: from.sgid,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        })
        .unwrap()
}

/// Posts `n` receive slots of `e.mr` on `qp`, slot `i` with wr_id `i`.
fn post_recvs(e: &End, qp: &mut QueuePair<TestHal>, n: u64) {
    for i in 0..n {
        let s = [e.mr.sge(i * SLOT as u64, SLOT as u32)];
        qp.post_recv(&[RecvWr { wr_id: i, sges: &s }]).unwrap();
    }
}

/// A signaled SEND (immediate `imm`) of `data`, inline.
fn send_wr<'a>(data: &'a [u8], imm: Option<u32>) -> SendWr<'a, TestHal> {
    SendWr {
        wr_id: 0x5e4d,
        op: SendOp::Send { imm },
        data: SendData::Inline(data),
        flags: SendFlags::SIGNALED,
    }
}

fn caps() -> QpCaps {
    QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 1,
        max_inline_data: 64,
    }
}

/// The GRH area of a datagram over IPv4 from `src` to `dst`: 20 zero bytes, then an IPv4
/// header (version 4, IHL 5, protocol UDP, the addresses).
fn check_grh_area(area: &[u8], src: [u8; 4], dst: [u8; 4]) {
    assert_eq!(&area[..20], &[0; 20], "the unused first 20 bytes");
    let ip = &area[20..40];
    assert_eq!(ip[0], 0x45, "IPv4, 20-byte header");
    assert_eq!(ip[9], 17, "UDP");
    assert_eq!(&ip[12..16], &src);
    assert_eq!(&ip[16..20], &dst);
}

#[test]
fn ud_sends_both_ways_with_the_grh_area_and_the_receive_fields() {
    let (mut a, mut b) = ends();
    let mut qa = a.pd.create_ud_qp(&a.cq, &a.cq, &caps(), QKEY).unwrap();
    let mut qb = b.pd.create_ud_qp(&b.cq, &b.cq, &caps(), QKEY).unwrap();
    assert_eq!(qa.state(), mlx5_prm::qp::state::RTS);
    assert_eq!(qa.query_state().unwrap(), mlx5_prm::qp::state::RTS);
    assert!(qa.is_datagram() && qa.qkey() == QKEY);
    // What the transitions gave the device (ibv_query_qp): the Q_Key, UD's 4096-byte MTU
    // (Linux qp.c __mlx5_ib_modify_qp), the send PSN.
    let at = qa.query().unwrap();
    assert_eq!((at.qkey, at.path_mtu, at.sq_psn), (QKEY, 5, qa.psn()));
    assert!(qa.caps().max_inline_data >= 64);
    post_recvs(&b, &mut qb, 4);
    post_recvs(&a, &mut qa, 4);

    // A -> B, without and with immediate data.
    let ah = ah_to(&a, &b, IP_B);
    let dest = UdDest {
        ah: &ah,
        remote_qpn: qb.qpn(),
        remote_qkey: QKEY,
    };
    let msg = pattern(48, 3);
    qa.post_ud_send(&send_wr(&msg, None), &dest).unwrap();
    qa.post_ud_send(&send_wr(&msg[..5], Some(0xdead_beef)), &dest)
        .unwrap();
    let sends = wait(&mut a.cq, 2);
    assert_eq!(sends.len(), 2);
    for s in &sends {
        assert_eq!(
            (s.status, s.opcode, s.wr_id),
            (WcStatus::Success, WcOpcode::Send, 0x5e4d)
        );
        assert_eq!(
            (s.src_qp, s.wc_flags, s.sl, s.pkey_index),
            (0, WcFlags::NONE, 0, 0)
        );
    }
    let got = wait(&mut b.cq, 2);
    assert_eq!(got.len(), 2);
    let (w0, w1) = (got[0], got[1]);
    assert_eq!(
        (w0.status, w0.opcode, w0.wr_id),
        (WcStatus::Success, WcOpcode::Recv, 0)
    );
    assert_eq!(
        w0.byte_len as usize,
        GRH_BYTES + 48,
        "byte_len counts the GRH area"
    );
    assert_eq!((w0.qp_num, w0.src_qp, w0.imm), (qb.qpn(), qa.qpn(), None));
    assert_eq!(w0.wc_flags, WcFlags::GRH);
    assert_eq!((w0.sl, w0.pkey_index), (0, 0));
    assert_eq!((w1.wr_id, w1.imm), (1, Some(0xdead_beef)));
    assert_eq!(w1.byte_len as usize, GRH_BYTES + 5);
    assert_eq!(w1.wc_flags, WcFlags::GRH | WcFlags::WITH_IMM);
    let mut buf = vec![0u8; GRH_BYTES + 48];
    b.mr.read(0, &mut buf).unwrap();
    check_grh_area(&buf[..GRH_BYTES], IP_A, IP_B);
    assert_eq!(&buf[GRH_BYTES..], &msg[..]);

    // B answers from what the datagram told it: the IPv4 source in the GRH area and the
    // completion's source QP (what a GSI service does with a MAD).
    let src: [u8; 4] = buf[32..36].try_into().unwrap();
    let back = ah_to(&b, &a, src);
    let reply = pattern(100, 9);
    let sges = [b.mr.sge(8 * SLOT as u64, 100)];
    b.mr.write(8 * SLOT as u64, &reply).unwrap();
    let wr = SendWr {
        wr_id: 7,
        op: SendOp::Send { imm: None },
        data: SendData::Sges(&sges),
        flags: SendFlags::SIGNALED,
    };
    let to_a = UdDest {
        ah: &back,
        remote_qpn: w0.src_qp,
        remote_qkey: QKEY,
    };
    qb.post_ud_send(&wr, &to_a).unwrap();
    assert_eq!(one(&mut b.cq).status, WcStatus::Success);
    let w = one(&mut a.cq);
    assert_eq!((w.status, w.src_qp), (WcStatus::Success, qb.qpn()));
    assert_eq!(w.byte_len as usize, GRH_BYTES + 100);
    let mut buf = vec![0u8; GRH_BYTES + 100];
    a.mr.read(0, &mut buf).unwrap();
    check_grh_area(&buf[..GRH_BYTES], IP_B, IP_A);
    assert_eq!(&buf[GRH_BYTES..], &reply[..]);
}

/// Every WQE of a datagram QP is ctrl + datagram + data: two blocks for one SGE, so posts
/// wrap the ring mid-WQE; many of them all arrive intact.
#[test]
fn ud_sends_wrap_the_send_ring() {
    let (mut a, mut b) = ends();
    let small = QpCaps {
        max_send_wr: 3,
        ..caps()
    };
    let mut qa = a.pd.create_ud_qp(&a.cq, &a.cq, &small, QKEY).unwrap();
    let mut qb = b.pd.create_ud_qp(&b.cq, &b.cq, &caps(), QKEY).unwrap();
    let ah = ah_to(&a, &b, IP_B);
    let dest = UdDest {
        ah: &ah,
        remote_qpn: qb.qpn(),
        remote_qkey: QKEY,
    };
    for round in 0..12u8 {
        post_recvs(&b, &mut qb, 1);
        let data = pattern(40 + round as usize, round);
        a.mr.write(15 * SLOT as u64, &data).unwrap();
        let sges = [
            a.mr.sge(15 * SLOT as u64, 20),
            a.mr.sge(15 * SLOT as u64 + 20, data.len() as u32 - 20),
        ];
        let wr = SendWr {
            wr_id: round as u64,
            op: SendOp::Send { imm: None },
            data: SendData::Sges(&sges),
            flags: SendFlags::SIGNALED,
        };
        qa.post_ud_send(&wr, &dest).unwrap();
        let s = one(&mut a.cq);
        assert_eq!((s.status, s.wr_id), (WcStatus::Success, round as u64));
        let r = one(&mut b.cq);
        assert_eq!(r.byte_len as usize, GRH_BYTES + data.len());
        let mut got = vec![0u8; data.len()];
        b.mr.read(GRH_BYTES as u64, &mut got).unwrap();
        assert_eq!(got, data, "round {round}");
    }
}

#[test]
fn the_gsi_qp_is_reached_as_qpn_1_and_sends_from_qpn_1() {
    let (mut a, mut b) = ends();
    let mut ga = a.pd.create_gsi_qp(&a.cq, &a.cq, &caps()).unwrap();
    let mut gb = b.pd.create_gsi_qp(&b.cq, &b.cq, &caps()).unwrap();
    assert_eq!((ga.qkey(), ga.psn()), (GSI_QKEY, 0));
    let at = ga.query().unwrap();
    assert_eq!((at.qkey, at.path_mtu, at.sq_psn), (GSI_QKEY, 1, 0));
    assert_eq!(ga.query_state().unwrap(), mlx5_prm::qp::state::RTS);
    // One per context, again once the first is gone.
    let again = a.pd.create_gsi_qp(&a.cq, &a.cq, &caps());
    assert!(matches!(
        again,
        Err(Error::Invalid(InvalidInput::GsiExists))
    ));
    post_recvs(&b, &mut gb, 2);

    let ah = ah_to(&a, &b, IP_B);
    let mad = pattern(256, 0x41);
    let sges = [a.mr.sge(0, 256)];
    a.mr.write(0, &mad).unwrap();
    let wr = SendWr {
        wr_id: 1,
        op: SendOp::Send { imm: None },
        data: SendData::Sges(&sges),
        flags: SendFlags::SIGNALED,
    };
    let dest = UdDest {
        ah: &ah,
        remote_qpn: GSI_QPN,
        remote_qkey: GSI_QKEY,
    };
    ga.post_ud_send(&wr, &dest).unwrap();
    assert_eq!(one(&mut a.cq).status, WcStatus::Success);
    let w = one(&mut b.cq);
    assert_eq!((w.status, w.qp_num), (WcStatus::Success, gb.qpn()));
    assert_eq!((w.src_qp, w.pkey_index, w.imm), (GSI_QPN, 0, None));
    assert_eq!(w.byte_len as usize, SLOT);
    let mut got = vec![0u8; SLOT];
    b.mr.read(0, &mut got).unwrap();
    check_grh_area(&got[..GRH_BYTES], IP_A, IP_B);
    assert_eq!(&got[GRH_BYTES..], &mad[..]);

    // A MAD longer than the GSI QP's 256-byte path MTU completes in error.
    let big = [a.mr.sge(0, 300)];
    let wr = SendWr {
        data: SendData::Sges(&big),
        ..wr
    };
    ga.post_ud_send(&wr, &dest).unwrap();
    assert_eq!(one(&mut a.cq).status, WcStatus::LocLenErr);
    // The send queue stopped (SQE): a good MAD is flushed until it is brought back to RTS,
    // as Linux's MAD layer does (core/mad.c ib_mad_send_error).
    let good = SendWr {
        data: SendData::Sges(&sges),
        ..wr
    };
    ga.post_ud_send(&good, &dest).unwrap();
    assert_eq!(one(&mut a.cq).status, WcStatus::WrFlushErr);
    ga.recover_send_queue().unwrap();
    assert!(matches!(
        ga.recover_send_queue(),
        Err(Error::Command(c)) if c.status == mlx5::CmdStatus::BadQpStateErr
    ));
    ga.post_ud_send(&good, &dest).unwrap();
    assert_eq!(one(&mut a.cq).status, WcStatus::Success);
    let w = one(&mut b.cq);
    assert_eq!(
        (w.status, w.src_qp, w.wr_id),
        (WcStatus::Success, GSI_QPN, 1)
    );

    drop(ga);
    let ga = a.pd.create_gsi_qp(&a.cq, &a.cq, &caps()).unwrap();
    assert_eq!(ga.qkey(), GSI_QKEY);
}

#[test]
fn datagram_qps_refuse_what_ud_does_not_have() {
    let (a, b) = ends();
    let mut qa = a.pd.create_ud_qp(&a.cq, &a.cq, &caps(), QKEY).unwrap();
    let ah = ah_to(&a, &b, IP_B);
    let dest = UdDest {
        ah: &ah,
        remote_qpn: 0x99,
        remote_qkey: QKEY,
    };
    let inv = |e| matches!(e, Err(Error::Invalid(_)));
    // No destination.
    let r = qa.post_send(&[send_wr(b"x", None)]);
    assert_eq!(r, Err(InvalidInput::NoDestination.into()));
    // RDMA on UD, through every posting path.
    let sg = [a.mr.sge(0, 8)];
    let remote = mlx5::Remote { addr: 0, rkey: 1 };
    for op in [
        SendOp::Write { remote, imm: None },
        SendOp::Read { remote },
        SendOp::FetchAdd { remote, add: 1 },
        SendOp::SendWithInv { rkey: 1 },
    ] {
        let wr = SendWr {
            wr_id: 0,
            op,
            data: SendData::Sges(&sg),
            flags: SendFlags::SIGNALED,
        };
        assert_eq!(qa.post_send(&[wr]), Err(InvalidInput::ServiceType.into()));
        assert_eq!(
            qa.post_ud_send(&wr, &dest),
            Err(InvalidInput::ServiceType.into())
        );
        assert!(inv(qa.post_send(&[wr, wr])));
    }
    let bound = qa.bind_mr(&a.mr).unwrap();
    let r = qa.post_write(1, bound.sge(0, 8), remote, SendFlags::SIGNALED);
    assert_eq!(r, Err(InvalidInput::ServiceType.into()));
    // A destination QPN wider than 24 bits.
    let wide = UdDest {
        remote_qpn: 1 << 24,
        ..dest
    };
    let r = qa.post_ud_send(&send_wr(b"x", None), &wide);
    assert_eq!(r, Err(InvalidInput::RemoteQpn(1 << 24).into()));
    // The connected QP's transitions.
    let remote_ep = mlx5::QpEndpoint {
        qpn: 0x99,
        psn: 0,
        gid: [1; 16],
        mac: [2; 6],
    };
    let o = mlx5::ConnectOptions::default();
    assert_eq!(
        qa.connect(&remote_ep, &o),
        Err(InvalidInput::ServiceType.into())
    );
    assert_eq!(qa.to_rts(&o), Err(InvalidInput::ServiceType.into()));
    // A connected QP takes no destination.
    let mut rc = a.pd.create_qp(&a.cq, &a.cq, &caps()).unwrap();
    let r = rc.post_ud_send(&send_wr(b"x", None), &dest);
    assert_eq!(r, Err(InvalidInput::NotDatagram.into()));
    assert_eq!(
        rc.activate_datagram(),
        Err(InvalidInput::ServiceType.into())
    );
    assert_eq!(
        rc.recover_send_queue(),
        Err(InvalidInput::ServiceType.into())
    );
    // A source GID index beyond the table.
    let len = a.ctx.query_port(1).unwrap().gid_tbl_len;
    let bad = AhAttr {
        dgid: [1; 16],
        dmac: [2; 6],
        sgid_index: len as u8,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    };
    assert_eq!(a.pd.create_ah(&bad), Err(InvalidInput::GidIndex.into()));
    let nowhere = AhAttr {
        dgid: [0; 16],
        sgid_index: a.sgid,
        ..bad
    };
    let r = a.pd.create_ah(&nowhere);
    assert_eq!(r, Err(InvalidInput::RemoteAddress.into()));
    // Nothing reached the send queue.
    assert!(wait_briefly(&mut { a.cq }).is_empty());
}

fn wait_briefly(cq: &mut CompletionQueue<TestHal>) -> Vec<mlx5::WorkCompletion> {
    cq.poll_wait(1, Duration::from_millis(50)).unwrap()
}

/// A datagram with another Q_Key is dropped by the receiver (IBTA §10.2.4); the controlled
/// Q_Key (top bit set) stands for the sender's own.
#[test]
fn a_wrong_q_key_is_dropped_and_the_controlled_q_key_is_the_senders() {
    let (mut a, mut b) = ends();
    let mut qa = a.pd.create_ud_qp(&a.cq, &a.cq, &caps(), QKEY).unwrap();
    let mut qb = b.pd.create_ud_qp(&b.cq, &b.cq, &caps(), QKEY).unwrap();
    post_recvs(&b, &mut qb, 2);
    let ah = ah_to(&a, &b, IP_B);
    let mut dest = UdDest {
        ah: &ah,
        remote_qpn: qb.qpn(),
        remote_qkey: 0x2222,
    };
    qa.post_ud_send(&send_wr(b"lost", None), &dest).unwrap();
    assert_eq!(one(&mut a.cq).status, WcStatus::Success, "UD: sent is done");
    assert!(wait_briefly(&mut b.cq).is_empty());
    dest.remote_qkey = 0x8000_0000;
    qa.post_ud_send(&send_wr(b"kept", None), &dest).unwrap();
    assert_eq!(one(&mut a.cq).status, WcStatus::Success);
    let w = one(&mut b.cq);
    assert_eq!((w.wr_id, w.byte_len as usize), (0, GRH_BYTES + 4));
}

/// A datagram QP moved to RESET (its receives and sends gone) comes back to RTS with the
/// same Q_Key and works again; to ERR, its receives flush.
#[test]
fn a_datagram_qp_comes_back_from_reset_and_flushes_in_err() {
    let (mut a, mut b) = ends();
    let mut qa = a.pd.create_ud_qp(&a.cq, &a.cq, &caps(), QKEY).unwrap();
    let mut qb = b.pd.create_ud_qp(&b.cq, &b.cq, &caps(), QKEY).unwrap();
    post_recvs(&b, &mut qb, 1);
    qb.to_reset().unwrap();
    assert_eq!(
        qb.post_ud_send(
            &send_wr(b"x", None),
            &UdDest {
                ah: &ah_to(&b, &a, IP_A),
                remote_qpn: qa.qpn(),
                remote_qkey: QKEY,
            }
        ),
        Err(InvalidInput::QpState {
            state: mlx5_prm::qp::state::RST
        }
        .into())
    );
    qb.activate_datagram().unwrap();
    assert_eq!(qb.query_state().unwrap(), mlx5_prm::qp::state::RTS);
    post_recvs(&b, &mut qb, 1);
    let ah = ah_to(&a, &b, IP_B);
    let dest = UdDest {
        ah: &ah,
        remote_qpn: qb.qpn(),
        remote_qkey: QKEY,
    };
    qa.post_ud_send(&send_wr(b"again", None), &dest).unwrap();
    assert_eq!(one(&mut a.cq).status, WcStatus::Success);
    let w = one(&mut b.cq);
    assert_eq!(
        (w.status, w.byte_len as usize),
        (WcStatus::Success, GRH_BYTES + 5)
    );

    post_recvs(&b, &mut qb, 2);
    qb.to_err().unwrap();
    let flushed = wait(&mut b.cq, 2);
    assert_eq!(flushed.len(), 2);
    assert!(flushed.iter().all(|w| w.status == WcStatus::WrFlushErr));
}

/// A UD QP and an RC QP on one CQ: the datagram receives are parsed with their fields, and
/// the RC send completions polled into the same slots afterwards (the poller's fast path)
/// carry no stale receive field.
#[test]
fn rc_completions_after_ud_receives_on_one_cq_carry_no_receive_fields() {
    let (a, mut b) = ends();
    let mut p = pair(&a.ctx, caps());
    let mr = p.pd.alloc_mr(4 * SLOT, AccessFlags::ALL).unwrap();
    let mut ud = p.pd.create_ud_qp(&p.cq_a, &p.cq_a, &caps(), QKEY).unwrap();
    for i in 0..2u64 {
        let s = [mr.sge(i * SLOT as u64, SLOT as u32)];
        ud.post_recv(&[RecvWr { wr_id: i, sges: &s }]).unwrap();
    }
    let mut qb = b.pd.create_ud_qp(&b.cq, &b.cq, &caps(), QKEY).unwrap();
    let ah = ah_to(&b, &a, IP_A);
    let dest = UdDest {
        ah: &ah,
        remote_qpn: ud.qpn(),
        remote_qkey: QKEY,
    };
    qb.post_ud_send(&send_wr(b"one", Some(1)), &dest).unwrap();
    qb.post_ud_send(&send_wr(b"two", Some(2)), &dest).unwrap();
    assert_eq!(wait(&mut b.cq, 2).len(), 2);

    let mut slots = [mlx5::WorkCompletion::default(); 2];
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut n = 0;
    while n < 2 && std::time::Instant::now() < deadline {
        n += p.cq_a.poll(&mut slots[n..]).unwrap();
    }
    assert_eq!(n, 2);
    for w in &slots {
        assert_eq!((w.qp_num, w.src_qp), (ud.qpn(), qb.qpn()));
        assert_eq!(w.wc_flags, WcFlags::GRH | WcFlags::WITH_IMM);
    }

    // RDMA WRITEs on the RC QP, completions into the same slots.
    for i in 0..2u64 {
        let wr = SendWr {
            wr_id: 10 + i,
            op: SendOp::Write {
                remote: mlx5::Remote {
                    addr: mr.addr() + 2 * SLOT as u64,
                    rkey: mr.rkey(),
                },
                imm: None,
            },
            data: SendData::Sges(&[mr.sge(0, 16)]),
            flags: SendFlags::SIGNALED,
        };
        p.a.post_send(&[wr]).unwrap();
    }
    let mut n = 0;
    while n < 2 && std::time::Instant::now() < deadline {
        n += p.cq_a.poll(&mut slots[n..]).unwrap();
    }
    assert_eq!(n, 2);
    for (i, w) in slots.iter().enumerate() {
        assert_eq!(
            (w.status, w.opcode),
            (WcStatus::Success, WcOpcode::RdmaWrite)
        );
        assert_eq!((w.wr_id, w.qp_num, w.imm), (10 + i as u64, p.a.qpn(), None));
        assert_eq!(
            (w.src_qp, w.wc_flags, w.sl, w.pkey_index),
            (0, WcFlags::NONE, 0, 0)
        );
    }
}
