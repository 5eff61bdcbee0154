//! Mkeys, CQs and QPs through raw PRM commands: creation, queries, every rejection with its
//! status and syndrome, the QP transition matrix, and the data-plane fault switches.

#[path = "datapath_common/mod.rs"]
mod dp;
#[path = "raw/mod.rs"]
mod raw;

use dp::*;
use mlx5_prm::*;
use mlx5_sim::objects::mr::{Access, MrFault};
use mlx5_sim::objects::{cq::syndrome as cqs, mr::syndrome as mrs, qp::syndrome as qps};
use mlx5_sim::InProcHca;
use raw::{input, set};

fn env() -> Env {
    Env::new(InProcHca::deterministic(), 1)
}

// ---------------------------------------------------------------------------------------------
// Mkeys
// ---------------------------------------------------------------------------------------------

#[test]
fn mkey_create_query_destroy() {
    let mut e = env();
    let buf = e.alloc(3 * 4096);
    let key = e.mkey(buf + 0x100, 2 * 4096, LR | RW);
    assert_eq!(key & 0xff, 0x42, "variant byte is software's");
    let mut q = input(opcode::QUERY_MKEY, 0, query_mkey_in::BYTES);
    set(&mut q, query_mkey_in::MKEY_INDEX, mkey::index(key));
    let d = e.raw.exec(&q, query_mkey_out::BYTES);
    d.ok();
    let m = query_mkey_out::MEMORY_KEY_MKEY_ENTRY;
    assert_eq!(d.get(mkc::PD.within(m)), e.pd);
    assert_eq!(d.get(mkc::MKEY_7_0.within(m)), 0x42);
    assert_eq!(d.get(mkc::RW.within(m)), 1);
    assert_eq!(d.get(mkc::LW.within(m)), 0);
    assert_eq!(
        mkc::START_ADDR.within(m).get64(&d.out).unwrap(),
        buf + 0x100
    );
    assert_eq!(mkc::LEN.within(m).get64(&d.out).unwrap(), 2 * 4096);
    let mtt0 = u64::from_be_bytes(d.out[272..280].try_into().unwrap());
    assert_eq!(mtt0, buf | mkey::MTT_PRESENT);
    e.destroy_mkey(key).ok();
    e.destroy_mkey(key)
        .fails(cmd_status::BAD_RES_ERR, mrs::UNKNOWN_MKEY);
    e.raw
        .exec(&q, query_mkey_out::BYTES)
        .fails(cmd_status::BAD_RES_ERR, mrs::UNKNOWN_MKEY);
}

#[test]
fn mkey_rejections() {
    let mut e = env();
    let buf = e.alloc(4 * 4096);
    let pd = e.pd;
    let m = create_mkey_in::MEMORY_KEY_MKEY_ENTRY;
    let base = e.mkey_input(pd, buf, 2 * 4096, LR, 1);
    let run = |e: &mut Env, i: &[u8], status: u8, syn: u32| {
        e.raw.exec(i, 16).fails(status, syn);
    };
    // Unknown PD.
    let i = e.mkey_input(pd + 100, buf, 4096, LR, 1);
    run(&mut e, &i, cmd_status::BAD_RES_ERR, mrs::BAD_PD);
    // log_page_size below 12 and absurdly large (absolute, Linux ib/mr.c `reg_create`).
    for lps in [0, 11] {
        let mut i = base.clone();
        set(&mut i, mkc::LOG_PAGE_SIZE.within(m), lps);
        run(
            &mut e,
            &i,
            cmd_status::BAD_PARAM_ERR,
            mrs::BAD_LOG_PAGE_SIZE,
        );
    }
    // One MTT short of the length: octowords cover 2 pages, length needs 3.
    let mut i = base.clone();
    mkc::LEN.within(m).set64(&mut i, 2 * 4096 + 1).unwrap();
    run(&mut e, &i, cmd_status::BAD_PARAM_ERR, mrs::MTT_TOO_FEW);
    // actual_size above translations_octword_size.
    let mut i = base.clone();
    set(&mut i, create_mkey_in::TRANSLATIONS_OCTWORD_ACTUAL_SIZE, 2);
    run(
        &mut e,
        &i,
        cmd_status::BAD_PARAM_ERR,
        mrs::MTT_ACTUAL_EXCEEDS_SIZE,
    );
    // The input ends before the entries it announces.
    let i = base[..create_mkey_in::BYTES + 8].to_vec();
    run(
        &mut e,
        &i,
        cmd_status::BAD_INP_LEN_ERR,
        mrs::MTT_INPUT_TRUNCATED,
    );
    // start + len wraps.
    let mut i = e.mkey_input(pd, buf, 4096, LR, 1);
    mkc::START_ADDR
        .within(m)
        .set64(&mut i, u64::MAX - 10)
        .unwrap();
    run(&mut e, &i, cmd_status::BAD_PARAM_ERR, mrs::LENGTH_OVERFLOW);
    // Misaligned page address.
    let mut i = base.clone();
    let at = create_mkey_in::BYTES;
    i[at..at + 8].copy_from_slice(&(buf + 0x800).to_be_bytes());
    run(&mut e, &i, cmd_status::BAD_PARAM_ERR, mrs::MTT_MISALIGNED);
    // An unmodelled access mode.
    let mut i = base.clone();
    set(
        &mut i,
        mkc::ACCESS_MODE_1_0.within(m),
        // KSM: not modelled (KLMS is, see tests/mkey_klm.rs).
        mkc_access_mode::KSM.into(),
    );
    run(
        &mut e,
        &i,
        cmd_status::BAD_PARAM_ERR,
        mrs::UNSUPPORTED_ACCESS_MODE,
    );
    // length64 (2^64 bytes from 0) on an MTT key; from anywhere else it wraps.
    let mut i = base.clone();
    set(&mut i, mkc::LENGTH64.within(m), 1);
    run(&mut e, &i, cmd_status::BAD_PARAM_ERR, mrs::LENGTH_OVERFLOW);
    mkc::START_ADDR.within(m).set64(&mut i, 0).unwrap();
    run(&mut e, &i, cmd_status::BAD_PARAM_ERR, mrs::LENGTH64_NOT_PA);
    // A key bound to a QP that does not exist.
    let mut i = base.clone();
    set(&mut i, mkc::QPN.within(m), 0x1234);
    run(&mut e, &i, cmd_status::BAD_RES_ERR, mrs::BAD_QPN);
    // The good one still works.
    e.raw.exec(&base, 16).ok();
}

#[test]
fn mkey_translation_checks_bounds_access_pd_variant() {
    let mut e = env();
    let buf = e.alloc(4 * 4096);
    let key = e.mkey(buf + 0x10, 3 * 4096, LR | RR);
    let pd = e.pd;
    e.dev().with_hca(|h| {
        let t = h.mkeys();
        assert_eq!(
            t.translate(key, buf + 0x10, 3 * 4096, Access::LOCAL_READ, pd),
            Ok(vec![(buf + 0x10, 3 * 4096)]),
            "contiguous pages merge into one piece"
        );
        assert_eq!(
            t.translate(key, buf + 0x10, 3 * 4096 + 1, Access::LOCAL_READ, pd),
            Err(MrFault::OutOfBounds)
        );
        assert_eq!(
            t.translate(key, buf + 0xf, 1, Access::LOCAL_READ, pd),
            Err(MrFault::OutOfBounds)
        );
        assert_eq!(
            t.translate(key, buf + 0x10, 8, Access::REMOTE_WRITE, pd),
            Err(MrFault::AccessDenied)
        );
        assert_eq!(
            t.translate(key, buf + 0x10, 8, Access::LOCAL_WRITE, pd),
            Err(MrFault::AccessDenied)
        );
        assert_eq!(
            t.translate(key, buf + 0x10, 8, Access::LOCAL_READ, pd + 1),
            Err(MrFault::PdMismatch)
        );
        assert_eq!(
            t.translate(key ^ 0x80, buf + 0x10, 8, Access::LOCAL_READ, pd),
            Err(MrFault::VariantMismatch)
        );
        assert!(t
            .translate(key, buf + 0x10, 8, Access::REMOTE_READ, pd)
            .is_ok());
    });
    e.destroy_mkey(key).ok();
    e.dev().with_hca(|h| {
        assert_eq!(
            h.mkeys()
                .translate(key, buf + 0x10, 8, Access::LOCAL_READ, pd),
            Err(MrFault::UnknownKey)
        );
    });
}

#[test]
fn mtt_pages_map_scattered_bus_pages() {
    let mut e = env();
    // Two non-adjacent bus pages behind one contiguous IOVA range.
    let p0 = e.alloc(4096);
    let p1 = e.alloc(4096);
    let iova = 0x7000_0000u64;
    let mut i = e.mkey_input(e.pd, iova, 8192, LR | LW, 9);
    let at = create_mkey_in::BYTES;
    i[at..at + 8].copy_from_slice(&(p0 | mkey::MTT_PRESENT).to_be_bytes());
    i[at + 8..at + 16].copy_from_slice(&(p1 | mkey::MTT_PRESENT).to_be_bytes());
    let d = e.raw.exec(&i, 16);
    d.ok();
    let key = mkey::from_index(d.get(create_mkey_out::MKEY_INDEX), 9);
    let pd = e.pd;
    let pieces = e.dev().with_hca(|h| {
        h.mkeys()
            .translate(key, iova + 4000, 200, Access::LOCAL_WRITE, pd)
            .unwrap()
    });
    assert_eq!(pieces, vec![(p0 + 4000, 96), (p1, 104)]);
}

/// A list of many mailbox blocks is checked entry by entry: a page address off its page
/// boundary anywhere in it (first, last, inside and across block edges) refuses the key, and
/// each entry's own enables (`pg_access`) count for its page.
#[test]
fn long_mtt_list_checks_every_entry() {
    let mut e = env();
    const N: usize = 300; // five 512-byte blocks of entries
    let iova = 0x7000_0000u64;
    let pd = e.pd;
    let mut good = e.mkey_input(pd, iova, N as u64 * 4096, LR | LW, 3);
    let at = create_mkey_in::BYTES;
    // Scattered, descending bus pages (never touched: creation reads no guest memory).
    let page = |k: usize| 0x4000_0000u64 + (N - k) as u64 * 0x2000;
    let put = |i: &mut Vec<u8>, k: usize, v: u64| {
        i[at + 8 * k..at + 8 * k + 8].copy_from_slice(&v.to_be_bytes());
    };
    for k in 0..N {
        put(&mut good, k, page(k) | mkey::MTT_PRESENT);
    }
    // Page 200 readable only.
    put(&mut good, 200, page(200) | mkey::MTT_READ);
    for bad in [0, 1, 63, 64, 150, N - 2, N - 1] {
        let mut i = good.clone();
        put(&mut i, bad, (page(bad) + 0x800) | mkey::MTT_PRESENT);
        e.raw
            .exec(&i, 16)
            .fails(cmd_status::BAD_PARAM_ERR, mrs::MTT_MISALIGNED);
    }
    let d = e.raw.exec(&good, 16);
    d.ok();
    let key = mkey::from_index(d.get(create_mkey_out::MKEY_INDEX), 3);
    e.dev().with_hca(|h| {
        for k in [0, 1, 63, 64, 150, 199, 201, N - 1] {
            let va = iova + k as u64 * 4096 + 5;
            let p = h.mkeys().translate(key, va, 10, Access::LOCAL_WRITE, pd);
            assert_eq!(p, Ok(vec![(page(k) + 5, 10)]), "page {k}");
        }
        let va = iova + 200 * 4096;
        assert!(h
            .mkeys()
            .translate(key, va, 8, Access::LOCAL_READ, pd)
            .is_ok());
        assert_eq!(
            h.mkeys().translate(key, va, 8, Access::LOCAL_WRITE, pd),
            Err(MrFault::PageAccessDenied)
        );
    });
}

// ---------------------------------------------------------------------------------------------
// CQs
// ---------------------------------------------------------------------------------------------

#[test]
fn cq_create_query_destroy_and_rejections() {
    let mut e = env();
    let cq = e.cq(5);
    let mut q = input(opcode::QUERY_CQ, 0, query_cq_in::BYTES);
    set(&mut q, query_cq_in::CQN, cq.cqn);
    let d = e.raw.exec(&q, query_cq_out::BYTES + 8);
    d.ok();
    let c = query_cq_out::CQ_CONTEXT;
    assert_eq!(d.get(cqc::LOG_CQ_SIZE.within(c)), 5);
    assert_eq!(d.get(cqc::UAR_PAGE.within(c)), e.uar);
    assert_eq!(d.get(cqc::C_EQN_OR_APU_ELEMENT.within(c)), e.eqn);
    assert_eq!(cqc::DBR_ADDR.within(c).get64(&d.out).unwrap(), cq.dbr);
    assert_eq!(
        u64::from_be_bytes(d.out[272..280].try_into().unwrap()),
        cq.buf
    );

    let buf = e.alloc(4096);
    let dbr = e.alloc(64);
    let good = e.cq_input(5, buf, dbr);
    let ctx = create_cq_in::CQ_CONTEXT;
    let bad = |e: &mut Env, f: Field, v: u32, status: u8, syn: u32| {
        let mut i = good.clone();
        set(&mut i, f.within(ctx), v);
        e.raw.exec(&i, 16).fails(status, syn);
    };
    bad(
        &mut e,
        cqc::UAR_PAGE,
        999,
        cmd_status::BAD_RES_ERR,
        cqs::BAD_UAR,
    );
    bad(
        &mut e,
        cqc::C_EQN_OR_APU_ELEMENT,
        77,
        cmd_status::BAD_RES_ERR,
        cqs::BAD_EQN,
    );
    bad(
        &mut e,
        cqc::LOG_CQ_SIZE,
        23,
        cmd_status::BAD_PARAM_ERR,
        cqs::SIZE_ABOVE_CAP,
    );
    bad(
        &mut e,
        cqc::CQE_SZ,
        2,
        cmd_status::BAD_PARAM_ERR,
        cqs::BAD_CQE_SIZE,
    );
    bad(
        &mut e,
        cqc::CC,
        1,
        cmd_status::BAD_PARAM_ERR,
        cqs::UNSUPPORTED,
    );
    // 2^7 CQEs need two pages; one given.
    bad(
        &mut e,
        cqc::LOG_CQ_SIZE,
        7,
        cmd_status::BAD_PARAM_ERR,
        cqs::PAS_TOO_FEW,
    );
    let mut i = good.clone();
    cqc::DBR_ADDR.within(ctx).set64(&mut i, dbr + 4).unwrap();
    e.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, cqs::DBR_MISALIGNED);
    e.raw.exec(&good, 16).ok();

    // In use by a QP: busy until the QP is gone.
    let rcq = e.cq(4);
    let qp = e.qp(&cq, &rcq, 4, 4);
    let mut d = input(opcode::DESTROY_CQ, 0, destroy_cq_in::BYTES);
    set(&mut d, destroy_cq_in::CQN, cq.cqn);
    e.raw
        .exec(&d, 16)
        .fails(cmd_status::RES_BUSY, cqs::CQ_IN_USE);
    let mut dq = input(opcode::DESTROY_QP, 0, destroy_qp_in::BYTES);
    set(&mut dq, destroy_qp_in::QPN, qp.qpn);
    e.raw.exec(&dq, 16).ok();
    e.raw.exec(&d, 16).ok();
    e.raw
        .exec(&d, 16)
        .fails(cmd_status::BAD_RES_ERR, cqs::UNKNOWN_CQ);
}

/// A loopback QP pair on `e` reporting sends to `scq` (for CQ behaviour tests).
fn writer(e: &mut Env, scq: &Cq) -> (Qp, u32, u64, u32, u64) {
    let rcq = e.cq(4);
    let a = e.qp(scq, &rcq, 6, 4);
    let b = e.qp(scq, &rcq, 6, 4);
    e.connect_local(&a, b.qpn);
    e.connect_local(&b, a.qpn);
    let src = e.alloc(4096);
    let dst = e.alloc(4096);
    let lkey = e.mkey(src, 4096, LR);
    let rkey = e.mkey(dst, 4096, RW);
    (a, lkey, src, rkey, dst)
}

fn write8(e: &Env, a: &mut Qp, lkey: u32, src: u64, rkey: u32, dst: u64) {
    e.post_send(
        a,
        wqe::opcode::RDMA_WRITE,
        wqe::ctrl::CQ_UPDATE,
        0,
        &[&raddr_seg(dst, rkey), &dseg(8, lkey, src)],
    );
}

#[test]
fn cq_overrun_raises_a_cq_error_event() {
    let mut e = env();
    let mut scq = e.cq(1); // two entries
    let (mut a, lkey, src, rkey, dst) = writer(&mut e, &scq);
    e.drain_eq();
    for _ in 0..3 {
        write8(&e, &mut a, lkey, src, rkey, dst);
    }
    let ev = e.drain_eq();
    let err: Vec<_> = ev.iter().filter(|(t, _)| *t == event::CQ_ERROR).collect();
    assert_eq!(err.len(), 1, "events: {ev:?}");
    let d = &err[0].1;
    assert_eq!(
        u32::from_be_bytes(d[0..4].try_into().unwrap()) & 0xff_ffff,
        scq.cqn
    );
    assert_eq!(d[11], mlx5_sim::objects::cq::CQ_ERROR_SYNDROME_CQ_OVERRUN);
    // The two CQEs that fitted are intact.
    assert!(e.poll_cq(&mut scq).is_some());
    assert!(e.poll_cq(&mut scq).is_some());
    assert!(e.poll_cq(&mut scq).is_none());
}

#[test]
fn fault_stuck_owner_corrupt_and_duplicate_cqes() {
    let mut e = env();
    let mut scq = e.cq(4);
    let (mut a, lkey, src, rkey, dst) = writer(&mut e, &scq);
    let cqn = scq.cqn;

    // Stuck ownership: the CQE is written but never looks software-owned.
    e.dev().faults(|f| f.stuck_cq_owner = Some(cqn));
    write8(&e, &mut a, lkey, src, rkey, dst);
    assert!(e.poll_cq(&mut scq).is_none());
    let raw0 = e.read(scq.buf, 64);
    assert_eq!(raw0[63] >> 4, cqe::opcode::REQ, "written, owner bit wrong");
    e.dev().faults(|f| f.stuck_cq_owner = None);
    // Skip the stuck slot like a recovering driver would.
    scq.ci += 1;

    // Corrupt: one garbage CQE, then normal again.
    e.dev().faults(|f| f.corrupt_next_cqe = true);
    write8(&e, &mut a, lkey, src, rkey, dst);
    let c = e.poll_cq(&mut scq).unwrap();
    assert_eq!(c.opcode(), mlx5_sim::objects::cq::CORRUPT_CQE_OPCODE);
    assert_eq!(c.syndrome(), mlx5_sim::objects::cq::CORRUPT_CQE_SYNDROME);
    assert!(
        !e.dev().with_hca(|h| h.faults().corrupt_next_cqe),
        "one-shot"
    );
    write8(&e, &mut a, lkey, src, rkey, dst);
    assert_eq!(e.poll_cq(&mut scq).unwrap().opcode(), cqe::opcode::REQ);

    // Duplicate: the same CQE twice.
    e.dev().faults(|f| f.duplicate_next_cqe = true);
    write8(&e, &mut a, lkey, src, rkey, dst);
    let c1 = e.poll_cq(&mut scq).unwrap();
    let c2 = e.poll_cq(&mut scq).unwrap();
    assert_eq!(c1.0[..63], c2.0[..63]);
    assert!(e.poll_cq(&mut scq).is_none());
}

// ---------------------------------------------------------------------------------------------
// QPs
// ---------------------------------------------------------------------------------------------

#[test]
fn qp_create_query_and_rejections() {
    let mut e = env();
    let scq = e.cq(4);
    let rcq = e.cq(4);
    let qp = e.qp(&scq, &rcq, 6, 4);
    assert!(qp.qpn >= 2);
    let d = e.query_qp(qp.qpn);
    d.ok();
    let c = query_qp_out::QPC;
    assert_eq!(d.get(qpc::STATE.within(c)), qp::state::RST as u32);
    assert_eq!(d.get(qpc::LOG_SQ_SIZE.within(c)), 6);
    assert_eq!(d.get(qpc::CQN_SND.within(c)), scq.cqn);
    assert_eq!(d.get(qpc::PD.within(c)), e.pd);

    let buf = e.alloc(4 * 4096);
    let dbr = e.alloc(64);
    // RQ 16 x 64 B + SQ 64 x 64 B = 5 pages.
    let good = e.qp_input(e.pd, scq.cqn, rcq.cqn, 6, 4, 2, buf, dbr);
    let ctx = create_qp_in::QPC;
    let bad = |e: &mut Env, f: Field, v: u32, status: u8, syn: u32| {
        let mut i = good.clone();
        set(&mut i, f.within(ctx), v);
        e.raw.exec(&i, 16).fails(status, syn);
    };
    // (UD and QP1 are implemented: tests/dp_ud.rs.)
    for st in [qp::st::UC, qp::st::XRC, qp::st::DCI] {
        bad(
            &mut e,
            qpc::ST,
            st.into(),
            cmd_status::BAD_PARAM_ERR,
            qps::UNSUPPORTED_ST,
        );
    }
    bad(
        &mut e,
        qpc::PM_STATE,
        0,
        cmd_status::BAD_PARAM_ERR,
        qps::BAD_PM_STATE,
    );
    bad(&mut e, qpc::PD, 0x999, cmd_status::BAD_RES_ERR, qps::BAD_PD);
    bad(
        &mut e,
        qpc::UAR_PAGE,
        0x999,
        cmd_status::BAD_RES_ERR,
        qps::BAD_UAR,
    );
    bad(
        &mut e,
        qpc::CQN_SND,
        0x999,
        cmd_status::BAD_RES_ERR,
        qps::BAD_CQN_SND,
    );
    bad(
        &mut e,
        qpc::CQN_RCV,
        0x999,
        cmd_status::BAD_RES_ERR,
        qps::BAD_CQN_RCV,
    );
    bad(
        &mut e,
        qpc::LOG_SQ_SIZE,
        15,
        cmd_status::BAD_PARAM_ERR,
        qps::PAS_TOO_FEW,
    );
    bad(
        &mut e,
        qpc::LOG_RQ_STRIDE,
        6,
        cmd_status::BAD_PARAM_ERR,
        qps::RQ_STRIDE_ABOVE_CAP,
    );
    bad(
        &mut e,
        qpc::RQ_TYPE,
        qp::rq_type::SRQ_RQ.into(),
        cmd_status::BAD_PARAM_ERR,
        qps::UNSUPPORTED_RQ_TYPE,
    );
    let mut i = good.clone();
    qpc::DBR_ADDR.within(ctx).set64(&mut i, dbr + 2).unwrap();
    e.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, qps::DBR_MISALIGNED);
    e.raw.exec(&good, 16).ok();
    let mut dq = input(opcode::DESTROY_QP, 0, destroy_qp_in::BYTES);
    set(&mut dq, destroy_qp_in::QPN, 0xfffff);
    e.raw
        .exec(&dq, 16)
        .fails(cmd_status::BAD_RES_ERR, qps::UNKNOWN_QP);
}

/// A QP on `e` driven to `state` (RST, INIT, RTR, RTS or ERR).
fn qp_in_state(e: &mut Env, scq: &Cq, rcq: &Cq, state: u8) -> Qp {
    let q = e.qp(scq, rcq, 4, 4);
    let (gid, mac) = (e.gid, e.mac);
    if state == qp::state::ERR {
        e.modify_simple(opcode::QP_2ERR, q.qpn).ok();
        return q;
    }
    if state >= qp::state::INIT {
        let i = e.rst2init_input(q.qpn);
        e.raw.exec(&i, 16).ok();
    }
    if state >= qp::state::RTR {
        let i = e.init2rtr_input(q.qpn, 0x99, gid, mac, 0, 1);
        e.raw.exec(&i, 16).ok();
    }
    if state >= qp::state::RTS {
        let i = e.rtr2rts_input(q.qpn, 0, 7, 7, 14);
        e.raw.exec(&i, 16).ok();
    }
    assert_eq!(e.qp_state(q.qpn), state as u32);
    q
}

/// A valid input for transition `op` on `qpn`.
fn transition_input(e: &Env, op: u16, qpn: u32) -> Vec<u8> {
    match op {
        opcode::RST2INIT_QP => e.rst2init_input(qpn),
        opcode::INIT2RTR_QP => e.init2rtr_input(qpn, 0x99, e.gid, e.mac, 0, 1),
        opcode::RTR2RTS_QP => e.rtr2rts_input(qpn, 0, 7, 7, 14),
        opcode::QP_2ERR | opcode::QP_2RST => {
            let mut i = input(op, 0, qp_2rst_in::BYTES);
            set(&mut i, qp_2rst_in::QPN, qpn);
            i
        }
        _ => e.modify_input(op, qpn, 0),
    }
}

#[test]
fn qp_transition_matrix() {
    use qp::state::*;
    let mut e = env();
    let scq = e.cq(8);
    let rcq = e.cq(8);
    let ops: [(u16, &[u8], u8); 9] = [
        (opcode::RST2INIT_QP, &[RST], INIT),
        (opcode::INIT2INIT_QP, &[INIT], INIT),
        (opcode::INIT2RTR_QP, &[INIT], RTR),
        (opcode::RTR2RTS_QP, &[RTR], RTS),
        (opcode::RTS2RTS_QP, &[RTS], RTS),
        (opcode::SQERR2RTS_QP, &[], RTS),
        (opcode::SQD_RTS_QP, &[], RTS),
        (opcode::QP_2ERR, &[RST, INIT, RTR, RTS, ERR], ERR),
        (opcode::QP_2RST, &[RST, INIT, RTR, RTS, ERR], RST),
    ];
    let mut checked = 0;
    for from in [RST, INIT, RTR, RTS, ERR] {
        for (op, legal, to) in ops {
            let q = qp_in_state(&mut e, &scq, &rcq, from);
            let i = transition_input(&e, op, q.qpn);
            let d = e.raw.exec(&i, 16);
            if legal.contains(&from) {
                d.ok();
                assert_eq!(e.qp_state(q.qpn), to as u32, "{op:#x} from {from}");
            } else {
                d.fails(cmd_status::BAD_QP_STATE_ERR, qps::BAD_STATE);
                assert_eq!(e.qp_state(q.qpn), from as u32, "unchanged");
            }
            checked += 1;
            let mut dq = input(opcode::DESTROY_QP, 0, destroy_qp_in::BYTES);
            set(&mut dq, destroy_qp_in::QPN, q.qpn);
            e.raw.exec(&dq, 16).ok();
        }
    }
    assert_eq!(checked, 45);
}

#[test]
fn qp_transition_parameter_checks() {
    let mut e = env();
    let scq = e.cq(6);
    let rcq = e.cq(6);
    let (gid, mac) = (e.gid, e.mac);

    // RST2INIT: optional-parameter bits are not allowed; port must be 1; P_Key index 0.
    let q = qp_in_state(&mut e, &scq, &rcq, qp::state::RST);
    let mut i = e.rst2init_input(q.qpn);
    set(&mut i, rst2init_qp_in::OPT_PARAM_MASK, qp::optpar::RRE);
    e.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, qps::BAD_OPT_PARAM);
    let mut i = e.rst2init_input(q.qpn);
    set(&mut i, Env::path_field(ads::VHCA_PORT_NUM), 2);
    e.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, qps::BAD_PORT);
    let mut i = e.rst2init_input(q.qpn);
    set(&mut i, Env::path_field(ads::PKEY_INDEX), 1);
    e.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, qps::BAD_PKEY_INDEX);
    assert_eq!(e.qp_state(q.qpn), qp::state::RST as u32);

    // INIT2RTR.
    let q = qp_in_state(&mut e, &scq, &rcq, qp::state::INIT);
    let cases: [(Field, u32, u32); 6] = [
        (Env::qpc_field(qpc::MTU), 0, qps::BAD_MTU),
        (Env::qpc_field(qpc::MTU), 6, qps::BAD_MTU),
        (Env::qpc_field(qpc::REMOTE_QPN), 1, qps::BAD_REMOTE_QPN),
        (Env::path_field(ads::SRC_ADDR_INDEX), 9, qps::BAD_SGID_INDEX),
        (
            Env::qpc_field(qpc::LOG_MSG_MAX),
            31,
            qps::MSG_SIZE_ABOVE_CAP,
        ),
        (Env::qpc_field(qpc::LOG_RRA_MAX), 7, qps::RA_ABOVE_CAP),
    ];
    for (f, v, syn) in cases {
        let mut i = e.init2rtr_input(q.qpn, 0x99, gid, mac, 0, 1);
        set(&mut i, f, v);
        e.raw.exec(&i, 16).fails(cmd_status::BAD_PARAM_ERR, syn);
    }
    let i = e.init2rtr_input(q.qpn, 0x99, [0; 16], mac, 0, 1);
    e.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, qps::NO_ADDRESS_PATH);
    let mut i = e.init2rtr_input(q.qpn, 0x99, gid, mac, 0, 1);
    set(
        &mut i,
        rst2init_qp_in::OPT_PARAM_MASK,
        qp::optpar::RNR_TIMEOUT,
    );
    e.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, qps::BAD_OPT_PARAM);
    assert_eq!(e.qp_state(q.qpn), qp::state::INIT as u32);
    let i = e.init2rtr_input(q.qpn, 0x99, gid, mac, 0x123, 1);
    e.raw.exec(&i, 16).ok();
    let i = e.rtr2rts_input(q.qpn, 0x456, 5, 3, 10);
    e.raw.exec(&i, 16).ok();
    let d = e.query_qp(q.qpn);
    let c = query_qp_out::QPC;
    assert_eq!(d.get(qpc::STATE.within(c)), qp::state::RTS as u32);
    assert_eq!(d.get(qpc::REMOTE_QPN.within(c)), 0x99);
    assert_eq!(d.get(qpc::MTU.within(c)), 3);
    assert_eq!(d.get(qpc::NEXT_RCV_PSN.within(c)), 0x123);
    assert_eq!(d.get(qpc::NEXT_SEND_PSN.within(c)), 0x456);
    assert_eq!(d.get(qpc::RETRY_COUNT.within(c)), 5);
    assert_eq!(d.get(qpc::RNR_RETRY.within(c)), 3);
    assert_eq!(
        d.get(ads::ACK_TIMEOUT.within(qpc::PRIMARY_ADDRESS_PATH).within(c)),
        10
    );
    assert_eq!(d.get(qpc::RWE.within(c)), 1);
    // RTS2RTS with an allowed optional parameter changes it.
    let mut i = e.modify_input(
        opcode::RTS2RTS_QP,
        q.qpn,
        qp::optpar::RWE | qp::optpar::RRE | qp::optpar::RAE,
    );
    set(&mut i, Env::qpc_field(qpc::RRE), 1);
    e.raw.exec(&i, 16).ok();
    let d = e.query_qp(q.qpn);
    assert_eq!(d.get(qpc::RWE.within(c)), 0);
    assert_eq!(d.get(qpc::RRE.within(c)), 1);
}

// ---------------------------------------------------------------------------------------------
// Releasing objects other objects still name
// ---------------------------------------------------------------------------------------------

/// A one-number release command (DEALLOC_PD, DEALLOC_UAR, DESTROY_EQ/CQ/QP, ...).
fn release(op: u16, f: Field, n: u32) -> Vec<u8> {
    let mut i = input(op, 0, 16);
    set(&mut i, f, n);
    i
}

/// Firmware refuses to release a PD, UAR, EQ or CQ while another object names it (RES_BUSY,
/// which Linux maps to -EBUSY and retries after destroying the dependants); once the dependants
/// are gone the release succeeds, and a second release finds nothing (BAD_RES).
#[test]
fn release_while_referenced_is_busy() {
    use mlx5_sim::control::syndrome as syn;
    let mut e = env();
    let busy = cmd_status::RES_BUSY;

    // A PD named by an mkey, then by a QP.
    let pd = e.alloc_pd();
    let buf = e.alloc(4096);
    let key = e.mkey_in_pd(pd, buf, 4096, LR);
    let dealloc_pd = release(opcode::DEALLOC_PD, dealloc_pd_in::PD, pd);
    e.raw.exec(&dealloc_pd, 16).fails(busy, syn::PD_BUSY_MKEY);
    e.destroy_mkey(key).ok();
    let cq = e.cq(4);
    let own_pd = std::mem::replace(&mut e.pd, pd);
    let qp = e.qp(&cq, &cq, 4, 4);
    e.pd = own_pd;
    e.raw.exec(&dealloc_pd, 16).fails(busy, syn::PD_BUSY_QP);
    // The CQ is named twice by the QP (send and receive): busy as well.
    let destroy_cq = release(opcode::DESTROY_CQ, destroy_cq_in::CQN, cq.cqn);
    e.raw.exec(&destroy_cq, 16).fails(busy, cqs::CQ_IN_USE);
    e.raw
        .exec(&release(opcode::DESTROY_QP, destroy_qp_in::QPN, qp.qpn), 16)
        .ok();
    e.raw.exec(&dealloc_pd, 16).ok();
    e.raw
        .exec(&dealloc_pd, 16)
        .fails(cmd_status::BAD_RES_ERR, syn::PD_UNKNOWN);

    // A UAR named by a CQ, then by a QP (the EQ case is in control_plane.rs).
    let uar = e.raw.alloc_uar();
    let own_uar = std::mem::replace(&mut e.uar, uar);
    let cq_on_uar = e.cq(4);
    let qp_on_uar = e.qp(&cq, &cq, 4, 4);
    e.uar = own_uar;
    let dealloc_uar = release(opcode::DEALLOC_UAR, dealloc_uar_in::UAR, uar);
    e.raw.exec(&dealloc_uar, 16).fails(busy, syn::UAR_BUSY_CQ);
    e.raw
        .exec(
            &release(opcode::DESTROY_CQ, destroy_cq_in::CQN, cq_on_uar.cqn),
            16,
        )
        .ok();
    e.raw.exec(&dealloc_uar, 16).fails(busy, syn::UAR_BUSY_QP);
    e.raw
        .exec(
            &release(opcode::DESTROY_QP, destroy_qp_in::QPN, qp_on_uar.qpn),
            16,
        )
        .ok();
    e.raw.exec(&dealloc_uar, 16).ok();
    e.raw
        .exec(&dealloc_uar, 16)
        .fails(cmd_status::BAD_RES_ERR, syn::UAR_UNKNOWN);

    // An EQ named by a CQ's c_eqn.
    let (eqn, _) = e.raw.create_eq(e.uar, 4, &[]);
    let own_eqn = std::mem::replace(&mut e.eqn, eqn);
    let cq_on_eq = e.cq(4);
    e.eqn = own_eqn;
    let destroy_eq = release(opcode::DESTROY_EQ, destroy_eq_in::EQ_NUMBER, eqn);
    e.raw.exec(&destroy_eq, 16).fails(busy, syn::EQ_BUSY);
    e.raw
        .exec(
            &release(opcode::DESTROY_CQ, destroy_cq_in::CQN, cq_on_eq.cqn),
            16,
        )
        .ok();
    e.raw.exec(&destroy_eq, 16).ok();
    e.raw
        .exec(&destroy_eq, 16)
        .fails(cmd_status::BAD_RES_ERR, syn::EQ_UNKNOWN);

    // The CQ is free now that its QP is gone.
    e.raw.exec(&destroy_cq, 16).ok();

    // Only TIS/TIR contexts name a transport domain, and the model has neither: with QPs and
    // mkeys alive a TD is still released at once.
    let cq = e.cq(4);
    let _qp = e.qp(&cq, &cq, 4, 4);
    let _key = e.mkey(buf, 4096, LR);
    let d = e
        .raw
        .exec(&input(opcode::ALLOC_TRANSPORT_DOMAIN, 0, 16), 16);
    d.ok();
    let td = d.get(alloc_transport_domain_out::TRANSPORT_DOMAIN);
    let tdf = dealloc_transport_domain_in::TRANSPORT_DOMAIN;
    e.raw
        .exec(&release(opcode::DEALLOC_TRANSPORT_DOMAIN, tdf, td), 16)
        .ok();
}
