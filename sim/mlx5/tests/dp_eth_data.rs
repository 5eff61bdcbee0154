//! The Ethernet data path in both directions: SQ WQEs to frames on the wire (with their
//! CQEs, errors, flushes and recovery), frames handed to a TIR into RQ WQEs (with theirs,
//! drops and errors).

#[path = "datapath_common/mod.rs"]
mod dp;
#[path = "eth_common/mod.rs"]
mod eth;
#[path = "raw/mod.rs"]
mod raw;

use dp::*;
use eth::*;
use mlx5_prm::*;
use mlx5_sim::datapath::eth::rx::EthRxDrop;
use raw::{input, set};

/// SEND WQEs become frames on the wire: inline headers then the data segments' bytes, the
/// checksums `cs_flags` asks for filled in, short frames padded to 60 bytes; a CQE only for a
/// WQE with CQ_UPDATE, naming it by its counter.
#[test]
fn send_frames_and_completions() {
    let (mut e, mut wire) = env();
    let mut x = eth(&mut e);
    let frame = udp_frame(&[0xab; 100]);
    let data = e.alloc(4096);
    e.write(data, &frame[14..]);
    let lkey = e.mkey(data, 4096, LR);
    let d = dseg((frame.len() - 14) as u32, lkey, data);
    // One WQE, signaled, the L2 header inline (what a minimum inline mode of L2 asks for).
    let w = eth_wqe(
        x.sq.n,
        x.sq.pi,
        wqe::ctrl::CQ_UPDATE,
        CSUM,
        &frame[..14],
        &[d],
    );
    let idx = x.sq.pi;
    post_sq(&e, &mut x.sq, e.uar, &w);
    let got = frames(&mut wire);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].len(), frame.len());
    assert_eq!(got[0][..24], frame[..24]);
    assert_eq!(got[0][42..], frame[42..]);
    assert!(udp_checksums_ok(&got[0]), "checksums offloaded");
    let c = e.poll_cq(&mut x.scq).expect("send CQE");
    assert_eq!(
        (
            c.opcode(),
            c.wqe_opcode(),
            c.qpn(),
            c.wqe_counter(),
            c.user_index()
        ),
        (cqe::opcode::REQ, wqe::opcode::SEND, x.sq.n, idx, 0x77)
    );
    // Unsignaled, nothing inline, no checksum: the frame as it is, no CQE; then a short
    // signaled frame, padded.
    let w = eth_wqe(
        x.sq.n,
        x.sq.pi,
        0,
        0,
        &[],
        &[dseg(frame.len() as u32, lkey, data + 1024)],
    );
    e.write(data + 1024, &frame);
    post_sq(&e, &mut x.sq, e.uar, &w);
    let short = &frame[..20];
    let w = eth_wqe(x.sq.n, x.sq.pi, wqe::ctrl::CQ_UPDATE, 0, short, &[]);
    let idx = x.sq.pi;
    post_sq(&e, &mut x.sq, e.uar, &w);
    let got = frames(&mut wire);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0], frame);
    assert_eq!(got[1].len(), 60);
    assert_eq!(&got[1][..20], short);
    assert!(got[1][20..].iter().all(|&b| b == 0));
    let c = e.poll_cq(&mut x.scq).expect("CQE of the third WQE");
    assert_eq!(c.wqe_counter(), idx);
    assert!(e.poll_cq(&mut x.scq).is_none());
    // A doorbell through another UAR page rings nothing.
    let other = e.raw.alloc_uar();
    let w = eth_wqe(x.sq.n, x.sq.pi, wqe::ctrl::CQ_UPDATE, 0, &frame[..14], &[d]);
    post_sq(&e, &mut x.sq, other, &w);
    assert!(frames(&mut wire).is_empty());
    // The right page sends it.
    e.raw.dev.write64(
        u64::from(e.uar) * 4096 + 0x800,
        u64::from_le_bytes(w[0..8].try_into().unwrap()),
    );
    assert_eq!(frames(&mut wire).len(), 1);
    // Every frame counted in the vport's transmitted_eth_unicast (QUERY_VPORT_COUNTER).
    let d = e.raw.exec(
        &input(
            opcode::QUERY_VPORT_COUNTER,
            0,
            query_vport_counter_in::BYTES,
        ),
        query_vport_counter_out::BYTES,
    );
    d.ok();
    let at = query_vport_counter_out::TRANSMITTED_ETH_UNICAST.byte_offset();
    let packets = u64::from_be_bytes(d.out[at..at + 8].try_into().unwrap());
    let octets = u64::from_be_bytes(d.out[at + 8..at + 16].try_into().unwrap());
    assert_eq!(packets, 4);
    assert_eq!(octets, 3 * frame.len() as u64 + 60);
}

/// A bad WQE completes in error and moves the SQ to ERR; WQEs posted after it are flushed;
/// ERR -> RST -> RDY (Linux en/reporter_tx.c) restarts the counter and the SQ sends again.
#[test]
fn send_errors_flush_and_recovery() {
    let (mut e, mut wire) = env();
    let mut x = eth(&mut e);
    let frame = udp_frame(b"x");
    let data = e.alloc(4096);
    e.write(data, &frame);
    let lkey = e.mkey(data, 4096, LR);
    let ok = |sqn: u32, pi: u16| {
        eth_wqe(
            sqn,
            pi,
            wqe::ctrl::CQ_UPDATE,
            0,
            &[],
            &[dseg(frame.len() as u32, lkey, data)],
        )
    };
    let cases = bad_wqes(&ok, x.sq.n, lkey, data);
    for (w, syn, vendor) in cases {
        let mut w = w;
        w[1..3].copy_from_slice(&x.sq.pi.to_be_bytes());
        let idx = x.sq.pi;
        post_sq(&e, &mut x.sq, e.uar, &w);
        // One more behind it: flushed.
        let behind = ok(x.sq.n, x.sq.pi);
        let behind_idx = x.sq.pi;
        post_sq(&e, &mut x.sq, e.uar, &behind);
        assert!(frames(&mut wire).is_empty());
        let c = e.poll_cq(&mut x.scq).expect("error CQE");
        assert_eq!(
            (
                c.opcode(),
                c.syndrome(),
                c.vendor_syndrome(),
                c.wqe_counter()
            ),
            (cqe::opcode::REQ_ERR, syn, vendor, idx),
            "WQE {:02x?}",
            &w[..48.min(w.len())]
        );
        let c = e.poll_cq(&mut x.scq).expect("flush CQE");
        assert_eq!(
            (c.opcode(), c.syndrome(), c.wqe_counter()),
            (
                cqe::opcode::REQ_ERR,
                cqe::syndrome::WR_FLUSH_ERR,
                behind_idx
            )
        );
        assert_eq!(query_state(&mut e, true, x.sq.n), sqc_state::ERR.into());
        // Recovery as Linux does it (en/reporter_tx.c): ERR -> RST -> RDY, the producer
        // counter back to 0 in software only; the stale doorbell record sends nothing until
        // the next doorbell.
        modify(&mut e, true, x.sq.n, sqc_state::ERR, sqc_state::RST).ok();
        modify(&mut e, true, x.sq.n, sqc_state::RST, sqc_state::RDY).ok();
        assert!(frames(&mut wire).is_empty());
        assert!(e.poll_cq(&mut x.scq).is_none());
        x.sq.pi = 0;
        let again = ok(x.sq.n, 0);
        post_sq(&e, &mut x.sq, e.uar, &again);
        let mut padded = frame.clone();
        padded.resize(60, 0);
        assert_eq!(frames(&mut wire), vec![padded]);
        assert_eq!(
            e.poll_cq(&mut x.scq).expect("CQE").opcode(),
            cqe::opcode::REQ
        );
    }
}

/// [`send_errors_flush_and_recovery`]'s malformed WQEs for SQ `sqn` (`ok` makes a good one),
/// each with its CQE syndrome and vendor syndrome.
fn bad_wqes(
    ok: &dyn Fn(u32, u16) -> Vec<u8>,
    sqn: u32,
    lkey: u32,
    data: u64,
) -> Vec<(Vec<u8>, u8, u8)> {
    let mut mss = ok(sqn, 0);
    mss[16 + 6] = 1;
    let mut swp = ok(sqn, 0);
    swp[16 + 5] = 1;
    let mut inner_csum = ok(sqn, 0);
    inner_csum[16 + 4] = 1 << 4;
    let mut opcode = ok(sqn, 0);
    opcode[3] = wqe::opcode::TSO;
    let mut inline_seg = ok(sqn, 0);
    inline_seg[32] |= 0x80;
    vec![
        (ok(sqn + 1, 0), cqe::syndrome::LOCAL_QP_OP_ERR, 0x01),
        (mss, cqe::syndrome::LOCAL_QP_OP_ERR, 0x01),
        (swp, cqe::syndrome::LOCAL_QP_OP_ERR, 0x01),
        (inner_csum, cqe::syndrome::LOCAL_QP_OP_ERR, 0x01),
        (opcode, cqe::syndrome::LOCAL_QP_OP_ERR, 0x01),
        (inline_seg, cqe::syndrome::LOCAL_QP_OP_ERR, 0x01),
        (
            eth_wqe(sqn, 0, 0, 0, &[], &[dseg(64, lkey ^ 0x100, data)]),
            cqe::syndrome::LOCAL_PROT_ERR,
            0x02,
        ),
        (
            eth_wqe(sqn, 0, 0, 0, &[], &[dseg(2000, lkey, data)]),
            cqe::syndrome::LOCAL_LENGTH_ERR,
            0x06,
        ),
        (
            eth_wqe(sqn, 0, 0, 0, &[], &[dseg(10, lkey, data)]),
            cqe::syndrome::LOCAL_QP_OP_ERR,
            0x01,
        ),
    ]
}

/// An SQ whose minimum inline mode is L2 (Linux sets it when the device reports
/// VPORT_CONTEXT) refuses a WQE that inlines less than the Ethernet header.
#[test]
fn send_min_inline_mode() {
    let (mut e, mut wire) = env();
    let td = td(&mut e);
    let tisn = tis(&mut e, td);
    let mut scq = e.cq(6);
    let buf = e.alloc(4096);
    let dbr = e.alloc(64);
    let mut i = sq_input(&e, scq.cqn, tisn, 6, buf, dbr);
    set(
        &mut i,
        sqc::MIN_WQE_INLINE_MODE.within(create_sq_in::CTX),
        inline_mode::L2.into(),
    );
    let d = e.raw.exec(&i, 16);
    d.ok();
    let mut sq = Wq {
        n: d.get(create_sq_out::SQN),
        buf,
        dbr,
        log_sz: 6,
        log_stride: 6,
        pi: 0,
    };
    modify(&mut e, true, sq.n, sqc_state::RST, sqc_state::RDY).ok();
    let frame = udp_frame(b"inline");
    let data = e.alloc(4096);
    e.write(data, &frame);
    let lkey = e.mkey(data, 4096, LR);
    let w = eth_wqe(
        sq.n,
        0,
        wqe::ctrl::CQ_UPDATE,
        0,
        &frame[..14],
        &[dseg(frame.len() as u32 - 14, lkey, data + 14)],
    );
    post_sq(&e, &mut sq, e.uar, &w);
    assert_eq!(frames(&mut wire).len(), 1);
    assert_eq!(e.poll_cq(&mut scq).expect("CQE").opcode(), cqe::opcode::REQ);
    let w = eth_wqe(
        sq.n,
        sq.pi,
        wqe::ctrl::CQ_UPDATE,
        0,
        &frame[..12],
        &[dseg(frame.len() as u32 - 12, lkey, data + 12)],
    );
    post_sq(&e, &mut sq, e.uar, &w);
    assert!(frames(&mut wire).is_empty());
    let c = e.poll_cq(&mut scq).expect("error CQE");
    assert_eq!(
        (c.opcode(), c.syndrome(), c.vendor_syndrome()),
        (cqe::opcode::REQ_ERR, cqe::syndrome::LOCAL_QP_OP_ERR, 0x0f)
    );
}

/// A frame handed to the TIR lands in the RQ's next WQE, across its entries and not past
/// them, and completes with the CQE en_rx.c reads: RESP_SEND, byte count, WQE counter, user
/// index, IPv4 / UDP header types, L2/L3/L4 ok, the IP packet's checksum.
#[test]
fn receive_into_wqe_with_cqe() {
    let (mut e, _wire) = env();
    let mut x = eth(&mut e);
    let buf = e.alloc(4096);
    e.write(buf, &[0xee; 4096]);
    let lkey = e.mkey(buf, 4096, LW);
    // Two entries: 64 bytes, then 1600.
    post_rq(&e, &mut x.rq, &[(64, lkey, buf), (1600, lkey, buf + 1024)]);
    let mut frame = udp_frame(&(0..200).map(|i| i as u8).collect::<Vec<_>>());
    // Valid checksums (as the peer's NIC would have made them).
    let ip = ones_sum(&frame[14..34], 0);
    frame[24..26].copy_from_slice(&(!ip).to_be_bytes());
    let pseudo = ones_sum(&frame[26..34], 17 + 208) as u32;
    let udp = !ones_sum(&frame[34..], pseudo);
    frame[40..42].copy_from_slice(&udp.to_be_bytes());
    assert!(udp_checksums_ok(&frame));
    rx(&e, x.tirn, &frame).unwrap();
    assert_eq!(e.read(buf, 64), frame[..64]);
    assert_eq!(
        e.read(buf + 64, 16),
        [0xee; 16],
        "nothing past the first entry"
    );
    assert_eq!(e.read(buf + 1024, frame.len() - 64), frame[64..]);
    assert_eq!(e.read(buf + 1024 + frame.len() as u64 - 64, 16), [0xee; 16]);
    let c = e.poll_cq(&mut x.rcq).expect("receive CQE");
    assert_eq!(
        (
            c.opcode(),
            c.byte_cnt(),
            c.wqe_counter(),
            c.user_index(),
            c.qpn()
        ),
        (cqe::opcode::RESP_SEND, frame.len() as u32, 0, 0x55, x.rq.n)
    );
    // l4_l3_hdr_type: UDP (2) in bits 6:4, IPv4 (2) in bits 3:2; hds_ip_ext: L2, L3, L4 ok.
    assert_eq!(c.0[29], 2 << 4 | 2 << 2);
    assert_eq!(c.0[28], 0x7);
    // check_sum: the one's-complement sum of the IP packet, which verifies to all ones.
    assert_eq!(
        u16::from_be_bytes([c.0[20], c.0[21]]),
        ones_sum(&frame[14..], 0)
    );
    // A corrupted payload: L4 not ok; a frame that is not IP: no L3, no L4.
    post_rq(&e, &mut x.rq, &[(2048, lkey, buf)]);
    let mut bad = frame.clone();
    bad[100] ^= 0xff;
    rx(&e, x.tirn, &bad).unwrap();
    let c = e.poll_cq(&mut x.rcq).expect("CQE");
    assert_eq!((c.0[28], c.0[29], c.wqe_counter()), (0x3, 0x28, 1));
    post_rq(&e, &mut x.rq, &[(2048, lkey, buf)]);
    let mut arp = frame[..60].to_vec();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    rx(&e, x.tirn, &arp).unwrap();
    let c = e.poll_cq(&mut x.rcq).expect("CQE");
    assert_eq!((c.0[28], c.0[29], c.byte_cnt()), (0x1, 0, 60));
}

/// No WQE posted: dropped and counted as out_of_buffer (the port's set and the RQ's); no
/// TIR, an RQ not ready: dropped; a WQE too small or a key that refuses the write: error CQE
/// and the RQ in ERR.
#[test]
fn receive_drops_and_errors() {
    let (mut e, _wire) = env();
    let mut x = eth(&mut e);
    let frame = udp_frame(&[7; 300]);
    assert_eq!(rx(&e, x.tirn, &frame), Err(EthRxDrop::OutOfBuffer));
    assert_eq!(out_of_buffer(&mut e, 0), 1);
    assert_eq!(rx(&e, x.tirn + 77, &frame), Err(EthRxDrop::NoTir));
    // An RQ counting into its own set.
    let d = e.raw.exec(
        &input(opcode::ALLOC_Q_COUNTER, 0, alloc_q_counter_in::BYTES),
        16,
    );
    d.ok();
    let set_id = d.get(alloc_q_counter_out::COUNTER_SET_ID);
    let buf = e.alloc(4096);
    let dbr = e.alloc(64);
    let mut i = rq_input(&e, x.rcq.cqn, 4, 5, buf, dbr);
    set(
        &mut i,
        rqc::COUNTER_SET_ID.within(create_rq_in::CTX),
        set_id,
    );
    let d = e.raw.exec(&i, 16);
    d.ok();
    let mut r2 = Wq {
        n: d.get(create_rq_out::RQN),
        buf,
        dbr,
        log_sz: 4,
        log_stride: 5,
        pi: 0,
    };
    let tir2 = tir(&mut e, x.td, r2.n);
    assert_eq!(rx(&e, tir2, &frame), Err(EthRxDrop::RqNotReady));
    modify(&mut e, false, r2.n, rqc_state::RST, rqc_state::RDY).ok();
    assert_eq!(rx(&e, tir2, &frame), Err(EthRxDrop::OutOfBuffer));
    assert_eq!(
        (out_of_buffer(&mut e, 0), out_of_buffer(&mut e, set_id)),
        (2, 1)
    );
    destroy(
        &mut e,
        opcode::DEALLOC_Q_COUNTER,
        dealloc_q_counter_in::COUNTER_SET_ID,
        set_id,
    )
    .fails(
        cmd_status::RES_BUSY,
        mlx5_sim::control::syndrome::Q_COUNTER_BUSY_RQ,
    );
    // Too small: an error CQE naming the WQE, the RQ in ERR, nothing written past the entry.
    let data = e.alloc(4096);
    e.write(data, &[0xee; 4096]);
    let lkey = e.mkey(data, 4096, LW);
    post_rq(&e, &mut x.rq, &[(100, lkey, data)]);
    assert_eq!(rx(&e, x.tirn, &frame), Err(EthRxDrop::WqeTooSmall));
    assert_eq!(e.read(data, 16), [0xee; 16]);
    let c = e.poll_cq(&mut x.rcq).expect("error CQE");
    assert_eq!(
        (c.opcode(), c.syndrome(), c.wqe_counter()),
        (cqe::opcode::RESP_ERR, cqe::syndrome::LOCAL_LENGTH_ERR, 0)
    );
    assert_eq!(query_state(&mut e, false, x.rq.n), rqc_state::ERR.into());
    assert_eq!(rx(&e, x.tirn, &frame), Err(EthRxDrop::RqNotReady));
    // A key without local write.
    let ro = e.mkey(data, 4096, LR);
    post_rq(&e, &mut r2, &[(2048, ro, data)]);
    assert_eq!(rx(&e, tir2, &frame), Err(EthRxDrop::Protection));
    let c = e.poll_cq(&mut x.rcq).expect("error CQE");
    assert_eq!(
        (c.opcode(), c.syndrome()),
        (cqe::opcode::RESP_ERR, cqe::syndrome::LOCAL_PROT_ERR)
    );
    assert_eq!(e.read(data, 16), [0xee; 16]);
    // A producer counter beyond the ring: a WQ_CATAS_ERROR and the RQ in ERR.
    modify(&mut e, false, r2.n, rqc_state::ERR, rqc_state::RST).ok();
    modify(&mut e, false, r2.n, rqc_state::RST, rqc_state::RDY).ok();
    e.write(r2.dbr, &100u32.to_be_bytes());
    assert_eq!(rx(&e, tir2, &frame), Err(EthRxDrop::WqError));
    assert_eq!(query_state(&mut e, false, r2.n), rqc_state::ERR.into());
}

/// In ERR, a WQE whose `ds` runs past the producer counter is neither flushed nor taken
/// (found by the `eth` fuzz target: the flush walked past the counter and around the 16-bit
/// space); announced in full, it is flushed.
#[test]
fn flush_stops_at_the_producer_counter() {
    let (mut e, mut wire) = env();
    let mut x = eth(&mut e);
    // Into ERR: a WQE whose key is unknown.
    let w = eth_wqe(x.sq.n, 0, 0, 0, &[], &[dseg(64, 0x4242, 0x1000)]);
    post_sq(&e, &mut x.sq, e.uar, &w);
    let c = e.poll_cq(&mut x.scq).expect("error CQE");
    assert_eq!(c.syndrome(), cqe::syndrome::LOCAL_PROT_ERR);
    // A WQE of 63 units (16 basic blocks), one block announced.
    let mut w = eth_wqe(x.sq.n, x.sq.pi, 0, 0, &[], &[]);
    w[7] = (w[7] & !0x3f) | 63;
    w.resize(16 * 64, 0);
    let idx = x.sq.pi;
    let size = 1u64 << x.sq.log_sz;
    for (k, bb) in w.chunks(64).enumerate() {
        e.write(x.sq.buf + ((idx as u64 + k as u64) % size) * 64, bb);
    }
    let ring = |e: &Env, pi: u16| {
        e.write(x.sq.dbr + 4, &(pi as u32).to_be_bytes());
        e.raw.dev.write64(
            u64::from(e.uar) * 4096 + 0x800,
            u64::from_le_bytes(w[0..8].try_into().unwrap()),
        );
    };
    ring(&e, idx + 1);
    assert!(e.poll_cq(&mut x.scq).is_none());
    ring(&e, idx + 16);
    let c = e.poll_cq(&mut x.scq).expect("flush CQE");
    assert_eq!(
        (c.syndrome(), c.wqe_counter()),
        (cqe::syndrome::WR_FLUSH_ERR, idx)
    );
    assert!(e.poll_cq(&mut x.scq).is_none());
    assert!(frames(&mut wire).is_empty());
}
