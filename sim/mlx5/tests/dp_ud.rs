//! UD and the GSI QP through raw PRM commands and raw WQEs: two UD QPs on one HCA (loopback)
//! and on two HCAs joined by an in-process frame link; the datagram segment, the 40-byte
//! header area, immediate data, the controlled Q_Key, Q_Key / P_Key drops, oversize sends and
//! receives, the GSI QP reached as QPN 1, and the commands' refusals.

#[path = "datapath_common/mod.rs"]
mod dp;
#[path = "raw/mod.rs"]
mod raw;

use dp::*;
use mlx5_prm::*;
use mlx5_sim::front::device::ExecMode;
use mlx5_sim::roce::counters::Counter;
use mlx5_sim::InProcHca;
use raw::set;

const CE: u8 = wqe::ctrl::CQ_UPDATE;
/// The Q_Key the tests' UD QPs take.
const QKEY: u32 = 0x1111_2222;
/// IB_QP1_QKEY (Linux include/rdma/ib_mad.h): the GSI QP's Q_Key.
const QP1_QKEY: u32 = 0x8001_0000;
/// The header area in front of a datagram's payload.
const GRH: usize = 40;

/// A UD (or QP1) QP in RESET: SQ of 16 WQEBBs, RQ of 16 WQEs of 64 bytes.
fn create(
    env: &mut Env<InProcHca>,
    st: u8,
    scq: &Cq,
    rcq: &Cq,
) -> std::result::Result<Qp, raw::Done> {
    let pd = env.pd;
    env.qp_of_type(st, pd, scq, rcq, 4, 4)
}

/// RST2INIT (port 1, P_Key index `pkey_index`, Q_Key `qkey`).
fn rst2init(env: &mut Env<InProcHca>, qpn: u32, pkey_index: u32, qkey: u32) -> raw::Done {
    let mut i = env.modify_input(opcode::RST2INIT_QP, qpn, 0);
    set(&mut i, path_field(ads::VHCA_PORT_NUM), 1);
    set(&mut i, path_field(ads::PKEY_INDEX), pkey_index);
    set(&mut i, qpc_field(qpc::Q_KEY), qkey);
    env.raw.exec(&i, 16)
}

/// One HCA (or two) with UD QPs `a` and `b`, their CQs and a buffer with a key each side.
struct Side {
    qp: Qp,
    scq: Cq,
    rcq: Cq,
    buf: u64,
    key: u32,
}

fn side(env: &mut Env<InProcHca>, st: u8, qkey: u32, mtu: u32) -> Side {
    let (scq, rcq) = (env.cq(6), env.cq(6));
    let qp = create(env, st, &scq, &rcq).unwrap();
    env.bring_up_datagram(qp.qpn, qkey, mtu, 12);
    let buf = env.alloc(16 * 1024);
    let key = env.mkey(buf, 16 * 1024, LR | LW);
    Side {
        qp,
        scq,
        rcq,
        buf,
        key,
    }
}

fn counter(dev: &InProcHca, c: Counter) -> u64 {
    dev.with_hca(|h| h.port().counters().get(c))
}

/// The IPv4 header the receiver finds in the header area: version / IHL, protocol UDP,
/// the source and destination addresses.
fn check_header_area(area: &[u8], src: [u8; 16], dst: [u8; 16]) {
    assert_eq!(&area[..20], &[0u8; 20], "IPv4: 20 zero bytes first");
    let ip = &area[20..40];
    assert_eq!(ip[0], 0x45);
    assert_eq!(ip[9], 17, "UDP");
    assert_eq!(&ip[12..16], &src[12..16]);
    assert_eq!(&ip[16..20], &dst[12..16]);
}

#[test]
fn ud_send_and_receive_on_one_hca_with_the_header_area() {
    let mut env = Env::new(InProcHca::deterministic(), 1);
    let mut a = side(&mut env, qp::st::UD, QKEY, 3);
    let mut b = side(&mut env, qp::st::UD, QKEY, 3);
    let (gid, mac) = (env.gid, env.mac);
    let msg: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
    env.write(a.buf, &msg);
    env.post_recv(&mut b.qp, &[(1024, b.key, b.buf)]);
    let av = av_seg(b.qp.qpn, QKEY, gid, mac);
    env.post_send(
        &mut a.qp,
        wqe::opcode::SEND,
        CE,
        0,
        &[&av, &dseg(300, a.key, a.buf)],
    );
    let s = env.poll_cq(&mut a.scq).expect("send CQE");
    assert!(!s.is_error(), "{:x?}", s.0);
    assert_eq!(s.opcode(), cqe::opcode::REQ);
    assert_eq!(s.wqe_opcode(), wqe::opcode::SEND);
    let r = env.poll_cq(&mut b.rcq).expect("receive CQE");
    assert_eq!(r.opcode(), cqe::opcode::RESP_SEND);
    assert_eq!(r.byte_cnt() as usize, GRH + 300);
    assert_eq!(r.remote_qpn(), a.qp.qpn, "source QP");
    let flags = u32::from_be_bytes(r.0[24..28].try_into().unwrap());
    assert_ne!((flags >> 28) & 3, 0, "GRH flag");
    assert_eq!((flags >> 24) & 3, cqe::flags_rqpn::L3_IPV4);
    let got = env.read(b.buf, GRH + 300);
    check_header_area(&got[..GRH], gid, gid);
    assert_eq!(&got[GRH..], &msg[..]);

    // And back, with immediate data, inline.
    env.post_recv(&mut a.qp, &[(1024, a.key, a.buf + 4096)]);
    let av = av_seg(a.qp.qpn, QKEY, gid, mac);
    env.post_send(
        &mut b.qp,
        wqe::opcode::SEND_IMM,
        CE,
        0xdead_beef,
        &[&av, &inline_seg(b"datagram")],
    );
    assert!(!env.poll_cq(&mut b.scq).unwrap().is_error());
    let r = env.poll_cq(&mut a.rcq).expect("receive CQE");
    assert_eq!(r.opcode(), cqe::opcode::RESP_SEND_IMM);
    assert_eq!(r.imm(), 0xdead_beef);
    assert_eq!(r.remote_qpn(), b.qp.qpn);
    assert_eq!(r.byte_cnt() as usize, GRH + 8);
    assert_eq!(&env.read(a.buf + 4096 + GRH as u64, 8), b"datagram");
}

#[test]
fn ud_both_ways_between_two_hcas_on_a_frame_link() {
    let (da, db) = InProcHca::pair(ExecMode::Inline);
    let mut ea = Env::new(da.clone(), 1);
    let mut eb = Env::new(db.clone(), 2);
    let mut a = side(&mut ea, qp::st::UD, QKEY, 3);
    let mut b = side(&mut eb, qp::st::UD, QKEY, 3);
    let msg: Vec<u8> = (0..1000u32).map(|i| (i ^ 0x5a) as u8).collect();
    ea.write(a.buf, &msg);
    eb.post_recv(&mut b.qp, &[(2048, b.key, b.buf)]);
    let av = av_seg(b.qp.qpn, QKEY, eb.gid, eb.mac);
    ea.post_send(
        &mut a.qp,
        wqe::opcode::SEND,
        CE,
        0,
        &[&av, &dseg(1000, a.key, a.buf)],
    );
    assert!(!ea.wait_cq(&mut a.scq, &[]).is_error());
    let r = eb.wait_cq(&mut b.rcq, &[&da]);
    assert_eq!(r.opcode(), cqe::opcode::RESP_SEND);
    assert_eq!(r.remote_qpn(), a.qp.qpn);
    assert_eq!(r.byte_cnt() as usize, GRH + 1000);
    let got = eb.read(b.buf, GRH + 1000);
    check_header_area(&got[..GRH], ea.gid, eb.gid);
    assert_eq!(&got[GRH..], &msg[..]);

    ea.post_recv(&mut a.qp, &[(2048, a.key, a.buf + 4096)]);
    let av = av_seg(a.qp.qpn, QKEY, ea.gid, ea.mac);
    eb.post_send(
        &mut b.qp,
        wqe::opcode::SEND_IMM,
        CE,
        0x0102_0304,
        &[&av, &inline_seg(b"back")],
    );
    let r = ea.wait_cq(&mut a.rcq, &[&db]);
    assert_eq!(r.opcode(), cqe::opcode::RESP_SEND_IMM);
    assert_eq!(r.imm(), 0x0102_0304);
    assert_eq!(&ea.read(a.buf + 4096 + GRH as u64, 4), b"back");
}

#[test]
fn over_ipv6_the_header_area_is_the_ipv6_header() {
    let mut env = Env::new(InProcHca::deterministic(), 1);
    let gid6 = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x21];
    env.set_gid(1, gid6);
    let mut a = side(&mut env, qp::st::UD, QKEY, 3);
    let mut b = side(&mut env, qp::st::UD, QKEY, 3);
    env.post_recv(&mut b.qp, &[(1024, b.key, b.buf)]);
    let mut av = av_seg(b.qp.qpn, QKEY, gid6, env.mac);
    // Source GID index 1, flow label 0x12345, traffic class 0x20, hop limit 9.
    av[28..32].copy_from_slice(&(1u32 << 30 | 1 << 20 | 0x12345).to_be_bytes());
    av[26] = 0x20;
    av[27] = 9;
    env.post_send(
        &mut a.qp,
        wqe::opcode::SEND,
        CE,
        0,
        &[&av, &inline_seg(b"six")],
    );
    assert!(!env.poll_cq(&mut a.scq).unwrap().is_error());
    let r = env.poll_cq(&mut b.rcq).expect("receive CQE");
    let flags = u32::from_be_bytes(r.0[24..28].try_into().unwrap());
    assert_eq!((flags >> 24) & 3, cqe::flags_rqpn::L3_IPV6);
    let got = env.read(b.buf, GRH + 3);
    let ip = &got[..GRH];
    assert_eq!(ip[0] >> 4, 6, "IPv6");
    let vtf = u32::from_be_bytes(ip[0..4].try_into().unwrap());
    assert_eq!(((vtf >> 20) & 0xff, vtf & 0xf_ffff), (0x20, 0x12345));
    assert_eq!((ip[6], ip[7]), (17, 9), "UDP, hop limit");
    assert_eq!(&ip[8..24], &gid6);
    assert_eq!(&ip[24..40], &gid6);
    assert_eq!(&got[GRH..], b"six");
}

#[test]
fn q_key_mismatch_is_dropped_and_counted_and_the_controlled_q_key_is_the_qps() {
    let dev = InProcHca::deterministic();
    let mut env = Env::new(dev.clone(), 1);
    let mut a = side(&mut env, qp::st::UD, QKEY, 3);
    let mut b = side(&mut env, qp::st::UD, QKEY, 3);
    let (gid, mac) = (env.gid, env.mac);
    env.post_recv(&mut b.qp, &[(1024, b.key, b.buf)]);
    let before = counter(&dev, Counter::RxDropQkey);
    let wrong = av_seg(b.qp.qpn, QKEY ^ 1, gid, mac);
    env.post_send(
        &mut a.qp,
        wqe::opcode::SEND,
        CE,
        0,
        &[&wrong, &inline_seg(b"x")],
    );
    assert!(
        !env.poll_cq(&mut a.scq).unwrap().is_error(),
        "sent all the same"
    );
    assert!(env.poll_cq(&mut b.rcq).is_none(), "dropped");
    assert_eq!(counter(&dev, Counter::RxDropQkey), before + 1);

    // A WR Q_Key with the top bit set stands for the sending QP's own (QKEY): accepted.
    let controlled = av_seg(b.qp.qpn, 0x8000_0000, gid, mac);
    env.post_send(
        &mut a.qp,
        wqe::opcode::SEND,
        CE,
        0,
        &[&controlled, &inline_seg(b"y")],
    );
    assert!(!env.poll_cq(&mut a.scq).unwrap().is_error());
    let r = env.poll_cq(&mut b.rcq).expect("received");
    assert_eq!(r.byte_cnt() as usize, GRH + 1);
    assert_eq!(counter(&dev, Counter::RxDropQkey), before + 1);
}

#[test]
fn no_receive_wqe_drops_and_counts_out_of_buffer() {
    let dev = InProcHca::deterministic();
    let mut env = Env::new(dev.clone(), 1);
    let mut a = side(&mut env, qp::st::UD, QKEY, 3);
    let mut b = side(&mut env, qp::st::UD, QKEY, 3);
    let before = counter(&dev, Counter::OutOfBuffer);
    let av = av_seg(b.qp.qpn, QKEY, env.gid, env.mac);
    env.post_send(
        &mut a.qp,
        wqe::opcode::SEND,
        CE,
        0,
        &[&av, &inline_seg(b"z")],
    );
    assert!(!env.poll_cq(&mut a.scq).unwrap().is_error());
    assert!(env.poll_cq(&mut b.rcq).is_none());
    assert_eq!(counter(&dev, Counter::OutOfBuffer), before + 1);
    // The QP is still usable.
    env.post_recv(&mut b.qp, &[(1024, b.key, b.buf)]);
    env.post_send(
        &mut a.qp,
        wqe::opcode::SEND,
        CE,
        0,
        &[&av, &inline_seg(b"z")],
    );
    assert!(env.poll_cq(&mut b.rcq).is_some());
}

#[test]
fn a_datagram_with_nowhere_to_go_completes_and_is_counted_lost() {
    let dev = InProcHca::deterministic();
    let mut env = Env::new(dev.clone(), 1);
    let mut a = side(&mut env, qp::st::UD, QKEY, 3);
    let before = counter(&dev, Counter::TxDropLink);
    // A remote GID, and the port has no link: unreliable, so the WQE still completes.
    let gid = std::net::Ipv4Addr::new(10, 0, 0, 99)
        .to_ipv6_mapped()
        .octets();
    let av = av_seg(0x99, QKEY, gid, [2, 0, 0, 0, 0, 0x99]);
    env.post_send(
        &mut a.qp,
        wqe::opcode::SEND,
        CE,
        0,
        &[&av, &inline_seg(b"lost")],
    );
    let c = env.poll_cq(&mut a.scq).expect("CQE");
    assert!(!c.is_error());
    assert_eq!(c.byte_cnt(), 4);
    assert_eq!(counter(&dev, Counter::TxDropLink), before + 1);
}

#[test]
fn a_message_longer_than_the_path_mtu_is_refused() {
    let mut env = Env::new(InProcHca::deterministic(), 1);
    // MTU 256 (1): 300 bytes do not fit in one packet.
    let mut a = side(&mut env, qp::st::UD, QKEY, 1);
    let mut b = side(&mut env, qp::st::UD, QKEY, 1);
    env.post_recv(&mut b.qp, &[(1024, b.key, b.buf)]);
    let av = av_seg(b.qp.qpn, QKEY, env.gid, env.mac);
    env.post_send(
        &mut a.qp,
        wqe::opcode::SEND,
        CE,
        0,
        &[&av, &dseg(300, a.key, a.buf)],
    );
    let c = env.poll_cq(&mut a.scq).expect("error CQE");
    assert!(c.is_error());
    assert_eq!(c.syndrome(), cqe::syndrome::LOCAL_LENGTH_ERR);
    assert!(env.poll_cq(&mut b.rcq).is_none(), "nothing sent");
    // The send queue error state: later sends are flushed, receiving goes on.
    assert_eq!(env.qp_state(a.qp.qpn), qp::state::SQER as u32);
    env.post_send(
        &mut a.qp,
        wqe::opcode::SEND,
        CE,
        0,
        &[&av, &inline_seg(b"f")],
    );
    let c = env.poll_cq(&mut a.scq).expect("flush CQE");
    assert_eq!(c.syndrome(), cqe::syndrome::WR_FLUSH_ERR);
    env.post_recv(&mut a.qp, &[(1024, a.key, a.buf)]);
    let back = av_seg(a.qp.qpn, QKEY, env.gid, env.mac);
    env.post_send(
        &mut b.qp,
        wqe::opcode::SEND,
        CE,
        0,
        &[&back, &inline_seg(b"in")],
    );
    assert_eq!(
        env.poll_cq(&mut a.rcq)
            .expect("received in SQER")
            .byte_cnt(),
        42
    );
    // SQERR2RTS: sending again.
    let i = env.modify_input(opcode::SQERR2RTS_QP, a.qp.qpn, 0);
    env.raw.exec(&i, 16).ok();
    env.post_send(
        &mut a.qp,
        wqe::opcode::SEND,
        CE,
        0,
        &[&av, &inline_seg(b"ok")],
    );
    assert!(!env.poll_cq(&mut a.scq).expect("CQE").is_error());
    assert_eq!(env.poll_cq(&mut b.rcq).expect("received").byte_cnt(), 42);
}

/// A datagram longer than the receiving QP's path MTU (the sender's is larger) is dropped and
/// counted in `rx_drop_ud_length`: no CQE, the receive WQE stays posted for the next datagram
/// that fits, the QP stays in RTS (Linux rxe_resp.c `check_length`, class D for UD).
#[test]
fn a_datagram_longer_than_the_receivers_path_mtu_is_dropped_and_counted() {
    let dev = InProcHca::deterministic();
    let mut env = Env::new(dev.clone(), 1);
    // Sender MTU 1024 (3), receiver MTU 256 (1).
    let mut a = side(&mut env, qp::st::UD, QKEY, 3);
    let mut b = side(&mut env, qp::st::UD, QKEY, 1);
    env.post_recv(&mut b.qp, &[(1024, b.key, b.buf)]);
    let (len0, oob0) = (
        counter(&dev, Counter::RxDropUdLength),
        counter(&dev, Counter::OutOfBuffer),
    );
    let av = av_seg(b.qp.qpn, QKEY, env.gid, env.mac);
    env.post_send(
        &mut a.qp,
        wqe::opcode::SEND,
        CE,
        0,
        &[&av, &dseg(257, a.key, a.buf)],
    );
    assert!(!env.poll_cq(&mut a.scq).expect("CQE").is_error(), "sent");
    assert!(env.poll_cq(&mut b.rcq).is_none(), "dropped, no CQE");
    assert_eq!(counter(&dev, Counter::RxDropUdLength), len0 + 1);
    assert_eq!(counter(&dev, Counter::OutOfBuffer), oob0);
    assert_eq!(env.qp_state(b.qp.qpn), qp::state::RTS as u32);
    // Exactly the MTU fits, in the WQE the dropped datagram left posted.
    env.post_send(
        &mut a.qp,
        wqe::opcode::SEND,
        CE,
        0,
        &[&av, &dseg(256, a.key, a.buf)],
    );
    assert!(!env.poll_cq(&mut a.scq).expect("CQE").is_error());
    let r = env.poll_cq(&mut b.rcq).expect("received");
    assert!(!r.is_error());
    assert_eq!(r.byte_cnt() as usize, GRH + 256);
    assert_eq!(counter(&dev, Counter::RxDropUdLength), len0 + 1);
}

#[test]
fn ud_refuses_rc_opcodes_and_a_short_datagram_segment() {
    let mut env = Env::new(InProcHca::deterministic(), 1);
    let mut a = side(&mut env, qp::st::UD, QKEY, 3);
    let av = av_seg(a.qp.qpn, QKEY, env.gid, env.mac);
    env.post_send(
        &mut a.qp,
        wqe::opcode::RDMA_WRITE,
        CE,
        0,
        &[&av, &raddr_seg(a.buf, a.key), &dseg(8, a.key, a.buf)],
    );
    let c = env.poll_cq(&mut a.scq).expect("error CQE");
    assert_eq!(c.syndrome(), cqe::syndrome::LOCAL_QP_OP_ERR);

    let mut b = side(&mut env, qp::st::UD, QKEY, 3);
    // A control segment and 32 bytes: no room for the 48-byte datagram segment.
    env.post_send(&mut b.qp, wqe::opcode::SEND, CE, 0, &[&[0u8; 32]]);
    let c = env.poll_cq(&mut b.scq).expect("error CQE");
    assert_eq!(c.syndrome(), cqe::syndrome::LOCAL_QP_OP_ERR);
}

#[test]
fn the_gsi_qp_is_reached_as_qpn_1_and_sends_from_source_qp_1() {
    let mut env = Env::new(InProcHca::deterministic(), 1);
    let mut gsi = side(&mut env, qp::st::QP1, QP1_QKEY, 1);
    assert!(gsi.qp.qpn > 1, "a QPN of the table; the wire says 1");
    // The sender's own Q_Key is IB_QP1_QKEY: a WR Q_Key with the top bit set (as
    // IB_QP1_QKEY has) stands for the sending QP's (Linux gsi.c gives its UD send QPs
    // IB_QP1_QKEY for this reason).
    let mut a = side(&mut env, qp::st::UD, QP1_QKEY, 3);
    let (gid, mac) = (env.gid, env.mac);
    // A second GSI QP on the one port is refused.
    let (scq, rcq) = (env.cq(2), env.cq(2));
    let d = create(&mut env, qp::st::QP1, &scq, &rcq).unwrap_err();
    assert_eq!(d.status(), cmd_status::RES_BUSY);

    // A 256-byte MAD to QPN 1 with IB_QP1_QKEY.
    let mad: Vec<u8> = (0..=255u8).collect();
    env.write(a.buf, &mad);
    env.post_recv(&mut gsi.qp, &[(1024, gsi.key, gsi.buf)]);
    let av = av_seg(1, QP1_QKEY, gid, mac);
    env.post_send(
        &mut a.qp,
        wqe::opcode::SEND,
        CE,
        0,
        &[&av, &dseg(256, a.key, a.buf)],
    );
    assert!(!env.poll_cq(&mut a.scq).unwrap().is_error());
    let r = env.poll_cq(&mut gsi.rcq).expect("GSI receive");
    assert_eq!(r.qpn(), gsi.qp.qpn);
    assert_eq!(r.remote_qpn(), a.qp.qpn);
    assert_eq!(r.imm() & 0xffff, 0xffff, "the P_Key");
    assert_eq!(&env.read(gsi.buf + GRH as u64, 256), &mad[..]);

    // The GSI QP's datagrams leave from source QP 1.
    env.post_recv(&mut a.qp, &[(1024, a.key, a.buf + 4096)]);
    let av = av_seg(a.qp.qpn, QP1_QKEY, gid, mac);
    env.post_send(
        &mut gsi.qp,
        wqe::opcode::SEND,
        CE,
        0,
        &[&av, &inline_seg(b"rep")],
    );
    assert!(!env.poll_cq(&mut gsi.scq).unwrap().is_error());
    let r = env.poll_cq(&mut a.rcq).expect("UD receive");
    assert_eq!(r.remote_qpn(), 1);

    // A packet to the GSI QP's table QPN does not reach it.
    env.post_send(
        &mut a.qp,
        wqe::opcode::SEND,
        CE,
        0,
        &[&av_seg(gsi.qp.qpn, QP1_QKEY, gid, mac), &inline_seg(b"no")],
    );
    assert!(env.poll_cq(&mut gsi.rcq).is_none());
}

#[test]
fn ud_transitions_check_their_fields() {
    let mut env = Env::new(InProcHca::deterministic(), 1);
    let (scq, rcq) = (env.cq(2), env.cq(2));
    let q = create(&mut env, qp::st::UD, &scq, &rcq).unwrap();
    // P_Key index outside the one-entry table.
    rst2init(&mut env, q.qpn, 1, QKEY).fails(cmd_status::BAD_PARAM_ERR, 0x5203_0016);
    rst2init(&mut env, q.qpn, 0, QKEY).ok();
    // INIT2RTR takes no RC-only optional field.
    let i = env.modify_input(opcode::INIT2RTR_QP, q.qpn, qp::optpar::RRE);
    env.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, 0x5203_0011);
    // INIT2RTR needs a valid MTU.
    let i = env.modify_input(opcode::INIT2RTR_QP, q.qpn, 0);
    env.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, 0x5203_0012);
    // Q_Key may change on INIT2RTR with its bit, and QUERY_QP reports it.
    let mut i = env.modify_input(opcode::INIT2RTR_QP, q.qpn, qp::optpar::Q_KEY);
    set(&mut i, qpc_field(qpc::MTU), 5);
    set(&mut i, qpc_field(qpc::LOG_MSG_MAX), 12);
    set(&mut i, qpc_field(qpc::Q_KEY), 0x42);
    env.raw.exec(&i, 16).ok();
    let d = env.query_qp(q.qpn);
    assert_eq!(d.get(qpc::Q_KEY.within(query_qp_out::QPC)), 0x42);
    assert_eq!(d.get(qpc::ST.within(query_qp_out::QPC)), qp::st::UD as u32);

    // The GSI QP takes no optional field at all (Linux has no opt_mask entry for QP1).
    let g = create(&mut env, qp::st::QP1, &scq, &rcq).unwrap();
    rst2init(&mut env, g.qpn, 0, QP1_QKEY).ok();
    let i = env.modify_input(opcode::INIT2INIT_QP, g.qpn, qp::optpar::Q_KEY);
    env.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, 0x5203_0011);
}

/// A UD QP in RTS joins a Q counter set with RTS2RTS and the COUNTER_SET_ID optional
/// parameter, as an RC QP does (Linux drivers/infiniband/hw/mlx5/qp.c
/// `__mlx5_ib_qp_set_counter`, for any QP type an rdma counter binds).
#[test]
fn a_ud_qp_in_rts_joins_a_counter_set() {
    let mut env = Env::new(InProcHca::deterministic(), 1);
    let s = side(&mut env, qp::st::UD, QKEY, 3);
    let d = env.raw.exec(
        &raw::input(opcode::ALLOC_Q_COUNTER, 0, alloc_q_counter_in::BYTES),
        alloc_q_counter_out::BYTES,
    );
    d.ok();
    let id = d.get(alloc_q_counter_out::COUNTER_SET_ID);
    let mut i = env.modify_input(opcode::RTS2RTS_QP, s.qp.qpn, qp::optpar::COUNTER_SET_ID);
    set(&mut i, qpc_field(qpc::COUNTER_SET_ID), id);
    env.raw.exec(&i, 16).ok();
    let q = env.query_qp(s.qp.qpn);
    assert_eq!(q.get(qpc::COUNTER_SET_ID.within(query_qp_out::QPC)), id);
    assert_eq!(
        q.get(qpc::STATE.within(query_qp_out::QPC)),
        qp::state::RTS as u32
    );
}

/// A raw peer on an in-process frame link: UD frames built with the codec, in and out.
mod raw_peer {
    use super::*;
    use mlx5_sim::link::Link;
    use mlx5_sim::roce::{
        decode, Bth, Deth, EthHdr, ExtHdrs, Frame, IpHdr, Ipv4Hdr, Opcode, RoceHeaders, UdpHdr,
    };
    use mlx5_sim::wire::Port;
    use std::net::Ipv4Addr;
    use std::time::{Duration, Instant};

    const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 9];
    const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 9);
    const PEER_QPN: u32 = 0x77;

    fn frame(
        env: &Env<InProcHca>,
        dest_qp: u32,
        p_key: u16,
        q_key: u32,
        payload: &[u8],
    ) -> Vec<u8> {
        let g = env.gid;
        let mut bth = Bth::new(Opcode::UD_SEND_ONLY, dest_qp, 5);
        bth.p_key = p_key;
        RoceHeaders {
            eth: EthHdr {
                dst: env.mac,
                src: PEER_MAC,
                vlan: None,
            },
            ip: IpHdr::V4(Ipv4Hdr {
                dscp: 0,
                ecn: 0,
                identification: 0,
                dont_fragment: true,
                ttl: 64,
                src: PEER_IP,
                dst: Ipv4Addr::new(g[12], g[13], g[14], g[15]),
            }),
            udp: UdpHdr {
                src_port: 0xd872,
                checksum: 0,
            },
            bth,
            ext: ExtHdrs {
                deth: Some(Deth {
                    q_key,
                    resv8: 0,
                    src_qp: PEER_QPN,
                }),
                ..ExtHdrs::default()
            },
        }
        .encode(payload)
        .unwrap()
    }

    #[test]
    fn datagrams_from_the_wire_are_checked_and_answered_from_qp_1() {
        let dev = InProcHca::deterministic();
        let (hca_end, mut peer) = Link::pair();
        dev.with_hca(|h| *h.port_mut() = Port::on_link(hca_end));
        let mut env = Env::new(dev.clone(), 1);
        let mut gsi = side(&mut env, qp::st::QP1, QP1_QKEY, 1);
        env.post_recv(&mut gsi.qp, &[(1024, gsi.key, gsi.buf)]);
        env.post_recv(&mut gsi.qp, &[(1024, gsi.key, gsi.buf + 1024)]);
        let mad: Vec<u8> = (0..=255u8).rev().collect();

        // A P_Key of another partition, then a wrong Q_Key: dropped and counted.
        let (p0, q0) = (
            counter(&dev, Counter::RxDropPkey),
            counter(&dev, Counter::RxDropQkey),
        );
        peer.send(frame(&env, 1, 0x8001, QP1_QKEY, &mad)).unwrap();
        peer.send(frame(&env, 1, 0xffff, 0x8001_0001, &mad))
            .unwrap();
        // Then the right one.
        peer.send(frame(&env, 1, 0xffff, QP1_QKEY, &mad)).unwrap();
        let r = env.wait_cq(&mut gsi.rcq, &[]);
        assert_eq!(counter(&dev, Counter::RxDropPkey), p0 + 1);
        assert_eq!(counter(&dev, Counter::RxDropQkey), q0 + 1);
        assert_eq!(r.opcode(), cqe::opcode::RESP_SEND);
        assert_eq!(r.remote_qpn(), PEER_QPN);
        assert_eq!(r.byte_cnt() as usize, GRH + 256);
        let got = env.read(gsi.buf, GRH + 256);
        assert_eq!(&got[..20], &[0u8; 20]);
        assert_eq!(
            &got[32..36],
            &PEER_IP.octets(),
            "IPv4 source in the header area"
        );
        assert_eq!(&got[GRH..], &mad[..]);
        assert!(env.poll_cq(&mut gsi.rcq).is_none(), "one datagram only");

        // The answer leaves as UD SEND_ONLY from source QP 1 with the controlled Q_Key.
        let peer_gid = PEER_IP.to_ipv6_mapped().octets();
        let av = av_seg(PEER_QPN, 0x8000_0000, peer_gid, PEER_MAC);
        env.post_send(
            &mut gsi.qp,
            wqe::opcode::SEND,
            CE,
            0,
            &[&av, &inline_seg(b"reply")],
        );
        assert!(!env.poll_cq(&mut gsi.scq).unwrap().is_error());
        let deadline = Instant::now() + PATIENCE;
        let f = loop {
            dev.poll();
            if let Some(f) = peer
                .recv_deadline(Instant::now() + Duration::from_millis(2))
                .unwrap()
            {
                break f;
            }
            assert!(Instant::now() < deadline, "nothing sent");
        };
        let Ok(Frame::Roce(r)) = decode(&f) else {
            panic!("not RoCEv2: {f:02x?}");
        };
        assert!(r.icrc_ok());
        assert_eq!(r.hdrs.bth.opcode, Opcode::UD_SEND_ONLY);
        assert_eq!((r.hdrs.bth.dest_qp, r.hdrs.bth.p_key), (PEER_QPN, 0xffff));
        let deth = r.hdrs.ext.deth.expect("DETH");
        assert_eq!((deth.q_key, deth.src_qp), (QP1_QKEY, 1));
        assert_eq!(r.hdrs.eth.dst, PEER_MAC);
        assert_eq!(r.hdrs.udp.src_port, 0xc123);
        assert_eq!(r.payload, b"reply");
    }

    /// The nvmeof capture (`../shared/tools/nvmeof/pcaps`, outside the repository; or
    /// `NVMEOF_PCAPS`): two Linux rxe guests, 10.0.0.2 connecting to 10.0.0.1 with rdma_cm.
    fn nvmeof_pcap() -> Option<Vec<u8>> {
        let dir = match std::env::var_os("NVMEOF_PCAPS") {
            Some(d) => std::path::PathBuf::from(d),
            None => std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../../shared/tools/nvmeof/pcaps"),
        };
        let f = dir.join("nvmeof.pcap");
        let bytes = std::fs::read(&f).ok();
        if bytes.is_none() {
            eprintln!(
                "SKIPPED: {} not found (set NVMEOF_PCAPS): CM MADs from Linux not replayed",
                f.display()
            );
        }
        bytes
    }

    /// Every CM MAD the Linux host (10.0.0.2) sent to QP 1 of the target (10.0.0.1), as
    /// captured (only the destination MAC changed to the model's; the ICRC does not cover
    /// it), reaches the model's GSI QP: the MAD after the header area, which holds the
    /// frame's own IPv4 header, source QP 1, the P_Key.
    #[test]
    fn cm_mads_captured_from_linux_reach_the_gsi_qp() {
        use mlx5_sim::link::pcap::PcapFile;
        let Some(bytes) = nvmeof_pcap() else {
            return;
        };
        let pcap = PcapFile::parse(&bytes).unwrap();
        let dev = InProcHca::deterministic();
        let (hca_end, mut peer) = Link::pair();
        dev.with_hca(|h| *h.port_mut() = Port::on_link(hca_end));
        let mut env = Env::new(dev.clone(), 1);
        let mut gsi = side(&mut env, qp::st::QP1, QP1_QKEY, 1);
        let host = Ipv4Addr::new(10, 0, 0, 2);
        let mut n = 0;
        for rec in pcap.records() {
            let rec = rec.unwrap();
            let Ok(Frame::Roce(f)) = decode(rec.data) else {
                continue;
            };
            if f.hdrs.bth.opcode != Opcode::UD_SEND_ONLY || f.hdrs.ip.src() != host {
                continue;
            }
            assert_eq!(f.hdrs.bth.dest_qp, 1);
            let slot = gsi.buf + (n % 8) * 1024;
            env.post_recv(&mut gsi.qp, &[(1024, gsi.key, slot)]);
            let mut frame = rec.data.to_vec();
            frame[..6].copy_from_slice(&env.mac);
            peer.send(frame).unwrap();
            let r = env.wait_cq(&mut gsi.rcq, &[]);
            assert_eq!(r.opcode(), cqe::opcode::RESP_SEND, "MAD {n}");
            assert_eq!(r.remote_qpn(), 1, "from the host's GSI QP");
            assert_eq!(r.imm() & 0xffff, 0xffff, "P_Key");
            assert_eq!(r.byte_cnt() as usize, GRH + f.payload.len());
            let got = env.read(slot, GRH + f.payload.len());
            assert_eq!(&got[20..GRH], &rec.data[14..34], "the captured IPv4 header");
            assert_eq!(&got[GRH..], f.payload, "the MAD");
            n += 1;
        }
        assert!(n >= 6, "REQs, RTUs and DREQs of the host: {n}");
    }
}
