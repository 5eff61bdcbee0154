//! The Ethernet queue objects (TIS, SQ, RQ, TIR) through raw PRM commands, every rejection
//! with its status and syndrome, and both data directions: SQ WQEs to frames on the wire
//! (with their CQEs), frames handed to a TIR into RQ WQEs (with theirs).

#[path = "datapath_common/mod.rs"]
mod dp;
#[path = "raw/mod.rs"]
mod raw;

use dp::*;
use mlx5_prm::*;
use mlx5_sim::datapath::eth::rx::{deliver, EthRxDrop};
use mlx5_sim::link::Link;
use mlx5_sim::objects::{rq::syndrome as rqs, sq::syndrome as sqs, tir::syndrome as tirs};
use mlx5_sim::objects::{tis::syndrome as tiss, wq::syndrome as wqs};
use mlx5_sim::wire::Port;
use mlx5_sim::InProcHca;
use raw::{input, set};

/// An HCA whose port is one end of an in-process link; the other end is returned (the
/// frames the HCA sends arrive there).
fn env() -> (Env, Link) {
    let e = Env::new(InProcHca::deterministic(), 1);
    let (a, b) = Link::pair();
    e.dev().with_hca(|h| *h.port_mut() = Port::on_link(a));
    (e, b)
}

fn td(e: &mut Env) -> u32 {
    let d = e.raw.exec(
        &input(
            opcode::ALLOC_TRANSPORT_DOMAIN,
            0,
            alloc_transport_domain_in::BYTES,
        ),
        16,
    );
    d.ok();
    d.get(alloc_transport_domain_out::TRANSPORT_DOMAIN)
}

fn tis_input(td: u32) -> Vec<u8> {
    let mut i = input(opcode::CREATE_TIS, 0, create_tis_in::BYTES);
    set(&mut i, tisc::PRIO.within(create_tis_in::CTX), 0);
    set(
        &mut i,
        tisc::TRANSPORT_DOMAIN.within(create_tis_in::CTX),
        td,
    );
    i
}

fn tis(e: &mut Env, td: u32) -> u32 {
    let d = e.raw.exec(&tis_input(td), 16);
    d.ok();
    d.get(create_tis_out::TISN)
}

/// A work queue as software sees it.
struct Wq {
    n: u32,
    buf: u64,
    dbr: u64,
    log_sz: u32,
    log_stride: u32,
    /// Producer counter (WQEBBs for an SQ, WQEs for an RQ).
    pi: u16,
}

/// A field of the `wq` inside `ctx` of a create input.
fn wqf(ctx: Field, f: Field) -> Field {
    f.within(sqc::WQ).within(ctx)
}

/// The CREATE_SQ input for an SQ of `2^log_sz` basic blocks.
fn sq_input(e: &Env, cqn: u32, tisn: u32, log_sz: u32, buf: u64, dbr: u64) -> Vec<u8> {
    let npages = ((64usize << log_sz).div_ceil(4096)).max(1);
    let mut i = input(opcode::CREATE_SQ, 0, create_sq_in::BYTES + 8 * npages);
    let c = create_sq_in::CTX;
    set(&mut i, sqc::CQN.within(c), cqn);
    set(&mut i, sqc::TIS_LST_SZ.within(c), 1);
    set(&mut i, sqc::TIS_NUM_0.within(c), tisn);
    set(&mut i, sqc::FLUSH_IN_ERROR_EN.within(c), 1);
    set(&mut i, sqc::USER_INDEX.within(c), 0x77);
    set(&mut i, wqf(c, wq::WQ_TYPE), wq_type::CYCLIC.into());
    set(&mut i, wqf(c, wq::PD), e.pd);
    set(&mut i, wqf(c, wq::UAR_PAGE), e.uar);
    set(&mut i, wqf(c, wq::LOG_WQ_STRIDE), 6);
    set(&mut i, wqf(c, wq::LOG_WQ_SZ), log_sz);
    wqf(c, wq::DBR_ADDR).set64(&mut i, dbr).unwrap();
    for p in 0..npages {
        let at = create_sq_in::BYTES + 8 * p;
        i[at..at + 8].copy_from_slice(&(buf + 4096 * p as u64).to_be_bytes());
    }
    i
}

fn sq(e: &mut Env, cqn: u32, tisn: u32, log_sz: u32) -> Wq {
    let buf = e.alloc((64usize << log_sz).max(4096));
    let dbr = e.alloc(64);
    let d = e.raw.exec(&sq_input(e, cqn, tisn, log_sz, buf, dbr), 16);
    d.ok();
    Wq {
        n: d.get(create_sq_out::SQN),
        buf,
        dbr,
        log_sz,
        log_stride: 6,
        pi: 0,
    }
}

/// The CREATE_RQ input for `2^log_sz` WQEs of `2^log_stride` bytes.
fn rq_input(e: &Env, cqn: u32, log_sz: u32, log_stride: u32, buf: u64, dbr: u64) -> Vec<u8> {
    let npages = (((1usize << log_sz) << log_stride).div_ceil(4096)).max(1);
    let mut i = input(opcode::CREATE_RQ, 0, create_rq_in::BYTES + 8 * npages);
    let c = create_rq_in::CTX;
    set(&mut i, rqc::CQN.within(c), cqn);
    set(&mut i, rqc::USER_INDEX.within(c), 0x55);
    set(&mut i, rqc::VSD.within(c), 1);
    let w = |f: Field| f.within(rqc::WQ).within(c);
    set(&mut i, w(wq::WQ_TYPE), wq_type::CYCLIC.into());
    set(
        &mut i,
        w(wq::END_PADDING_MODE),
        wq_end_pad_mode::ALIGN.into(),
    );
    set(&mut i, w(wq::PD), e.pd);
    set(&mut i, w(wq::LOG_WQ_STRIDE), log_stride);
    set(&mut i, w(wq::LOG_WQ_SZ), log_sz);
    w(wq::DBR_ADDR).set64(&mut i, dbr).unwrap();
    for p in 0..npages {
        let at = create_rq_in::BYTES + 8 * p;
        i[at..at + 8].copy_from_slice(&(buf + 4096 * p as u64).to_be_bytes());
    }
    i
}

fn rq(e: &mut Env, cqn: u32, log_sz: u32, log_stride: u32) -> Wq {
    let buf = e.alloc(((1usize << log_sz) << log_stride).max(4096));
    let dbr = e.alloc(64);
    let d = e
        .raw
        .exec(&rq_input(e, cqn, log_sz, log_stride, buf, dbr), 16);
    d.ok();
    Wq {
        n: d.get(create_rq_out::RQN),
        buf,
        dbr,
        log_sz,
        log_stride,
        pi: 0,
    }
}

fn tir_input(td: u32, rqn: u32) -> Vec<u8> {
    let mut i = input(opcode::CREATE_TIR, 0, create_tir_in::BYTES);
    let c = create_tir_in::CTX;
    set(
        &mut i,
        tirc::DISP_TYPE.within(c),
        tirc_disp_type::DIRECT.into(),
    );
    set(&mut i, tirc::INLINE_RQN.within(c), rqn);
    set(&mut i, tirc::TRANSPORT_DOMAIN.within(c), td);
    i
}

fn tir(e: &mut Env, td: u32, rqn: u32) -> u32 {
    let d = e.raw.exec(&tir_input(td, rqn), 16);
    d.ok();
    d.get(create_tir_out::TIRN)
}

/// MODIFY_SQ (`sq`) or MODIFY_RQ from `cur` to `next`.
fn modify(e: &mut Env, sq: bool, n: u32, cur: u8, next: u8) -> raw::Done {
    let (op, len, state, num, ctx_state) = if sq {
        (
            opcode::MODIFY_SQ,
            modify_sq_in::BYTES,
            modify_sq_in::SQ_STATE,
            modify_sq_in::SQN,
            sqc::STATE.within(modify_sq_in::CTX),
        )
    } else {
        (
            opcode::MODIFY_RQ,
            modify_rq_in::BYTES,
            modify_rq_in::RQ_STATE,
            modify_rq_in::RQN,
            rqc::STATE.within(modify_rq_in::CTX),
        )
    };
    let mut i = input(op, 0, len);
    set(&mut i, state, cur.into());
    set(&mut i, num, n);
    set(&mut i, ctx_state, next.into());
    e.raw.exec(&i, 16)
}

fn destroy(e: &mut Env, op: u16, field: Field, n: u32) -> raw::Done {
    let mut i = input(op, 0, 16);
    set(&mut i, field, n);
    e.raw.exec(&i, 16)
}

/// The queue state QUERY_SQ / QUERY_RQ reports.
fn query_state(e: &mut Env, sq: bool, n: u32) -> u32 {
    let (op, f, state) = if sq {
        (
            opcode::QUERY_SQ,
            query_sq_in::SQN,
            sqc::STATE.within(query_sq_out::SQ_CONTEXT),
        )
    } else {
        (
            opcode::QUERY_RQ,
            query_rq_in::RQN,
            rqc::STATE.within(query_rq_out::RQ_CONTEXT),
        )
    };
    let mut i = input(op, 0, 16);
    set(&mut i, f, n);
    let d = e.raw.exec(&i, query_sq_out::BYTES);
    d.ok();
    d.get(state)
}

/// Everything one Ethernet queue pair needs: TD, TIS, CQs, an SQ and an RQ (both RDY), a TIR.
struct Eth {
    td: u32,
    tisn: u32,
    scq: Cq,
    rcq: Cq,
    sq: Wq,
    rq: Wq,
    tirn: u32,
}

fn eth(e: &mut Env) -> Eth {
    let td = td(e);
    let tisn = tis(e, td);
    let (scq, rcq) = (e.cq(6), e.cq(6));
    let sq = sq(e, scq.cqn, tisn, 6);
    let rq = rq(e, rcq.cqn, 6, 5);
    modify(e, true, sq.n, sqc_state::RST, sqc_state::RDY).ok();
    modify(e, false, rq.n, rqc_state::RST, rqc_state::RDY).ok();
    let tirn = tir(e, td, rq.n);
    Eth {
        td,
        tisn,
        scq,
        rcq,
        sq,
        rq,
        tirn,
    }
}

// ---------------------------------------------------------------------------------------------
// Objects
// ---------------------------------------------------------------------------------------------

/// The objects Linux mlx5e makes, in its order, queried back, and released in reverse order;
/// every release of an object another still names is refused first.
#[test]
fn objects_create_query_and_release_in_order() {
    let (mut e, _wire) = env();
    let x = eth(&mut e);
    // QUERY_TIS / QUERY_TIR report what was created.
    let mut q = input(opcode::QUERY_TIS, 0, 16);
    set(&mut q, query_tis_in::TISN, x.tisn);
    let d = e.raw.exec(&q, query_tis_out::BYTES);
    d.ok();
    assert_eq!(
        d.get(tisc::TRANSPORT_DOMAIN.within(query_tis_out::TIS_CONTEXT)),
        x.td
    );
    let mut q = input(opcode::QUERY_TIR, 0, 16);
    set(&mut q, query_tir_in::TIRN, x.tirn);
    let d = e.raw.exec(&q, query_tir_out::BYTES);
    d.ok();
    assert_eq!(
        d.get(tirc::INLINE_RQN.within(query_tir_out::TIR_CONTEXT)),
        x.rq.n
    );
    assert_eq!(query_state(&mut e, true, x.sq.n), sqc_state::RDY.into());
    assert_eq!(query_state(&mut e, false, x.rq.n), rqc_state::RDY.into());
    // SQNs and RQNs are not QPNs of one another.
    assert_ne!(x.sq.n, x.rq.n);
    // Busy: TD (TIS, TIR), TIS (SQ), RQ (TIR), PD (SQ / RQ), CQ (SQ / RQ).
    let dealloc_td = |e: &mut Env| {
        destroy(
            e,
            opcode::DEALLOC_TRANSPORT_DOMAIN,
            dealloc_transport_domain_in::TRANSPORT_DOMAIN,
            x.td,
        )
    };
    dealloc_td(&mut e).fails(
        cmd_status::RES_BUSY,
        mlx5_sim::control::syndrome::TD_BUSY_TIS,
    );
    destroy(&mut e, opcode::DESTROY_TIS, destroy_tis_in::TISN, x.tisn)
        .fails(cmd_status::RES_BUSY, tiss::BUSY);
    destroy(&mut e, opcode::DESTROY_RQ, destroy_rq_in::RQN, x.rq.n)
        .fails(cmd_status::RES_BUSY, rqs::BUSY);
    let pd = e.pd;
    destroy(&mut e, opcode::DEALLOC_PD, dealloc_pd_in::PD, pd).fails(
        cmd_status::RES_BUSY,
        mlx5_sim::control::syndrome::PD_BUSY_WQ,
    );
    destroy(&mut e, opcode::DESTROY_CQ, destroy_cq_in::CQN, x.scq.cqn).fails(
        cmd_status::RES_BUSY,
        mlx5_sim::objects::cq::syndrome::CQ_IN_USE,
    );
    // Reverse order.
    destroy(&mut e, opcode::DESTROY_TIR, destroy_tir_in::TIRN, x.tirn).ok();
    destroy(&mut e, opcode::DESTROY_RQ, destroy_rq_in::RQN, x.rq.n).ok();
    destroy(&mut e, opcode::DESTROY_SQ, destroy_sq_in::SQN, x.sq.n).ok();
    destroy(&mut e, opcode::DESTROY_TIS, destroy_tis_in::TISN, x.tisn).ok();
    dealloc_td(&mut e).ok();
    destroy(&mut e, opcode::DESTROY_CQ, destroy_cq_in::CQN, x.scq.cqn).ok();
    destroy(&mut e, opcode::DESTROY_CQ, destroy_cq_in::CQN, x.rcq.cqn).ok();
    // Gone: every command on them is BAD_RES.
    destroy(&mut e, opcode::DESTROY_TIR, destroy_tir_in::TIRN, x.tirn)
        .fails(cmd_status::BAD_RES_ERR, tirs::UNKNOWN);
    destroy(&mut e, opcode::DESTROY_RQ, destroy_rq_in::RQN, x.rq.n)
        .fails(cmd_status::BAD_RES_ERR, rqs::UNKNOWN);
    destroy(&mut e, opcode::DESTROY_SQ, destroy_sq_in::SQN, x.sq.n)
        .fails(cmd_status::BAD_RES_ERR, sqs::UNKNOWN);
    destroy(&mut e, opcode::DESTROY_TIS, destroy_tis_in::TISN, x.tisn)
        .fails(cmd_status::BAD_RES_ERR, tiss::UNKNOWN);
    modify(&mut e, true, x.sq.n, sqc_state::RDY, sqc_state::ERR)
        .fails(cmd_status::BAD_RES_ERR, sqs::UNKNOWN);
}

/// CREATE_TIS and MODIFY_TIS refusals.
#[test]
fn tis_bad_input() {
    let (mut e, _wire) = env();
    e.raw
        .exec(&tis_input(0x999), 16)
        .fails(cmd_status::BAD_RES_ERR, tiss::BAD_TD);
    let td = td(&mut e);
    for f in [
        tisc::TLS_EN,
        tisc::STRICT_LAG_TX_PORT_AFFINITY,
        tisc::UNDERLAY_QPN,
    ] {
        let mut i = tis_input(td);
        set(&mut i, f.within(create_tis_in::CTX), 1);
        e.raw
            .exec(&i, 16)
            .fails(cmd_status::BAD_PARAM_ERR, tiss::UNSUPPORTED_FIELD);
    }
    let tisn = tis(&mut e, td);
    let modify_tis = |e: &mut Env, bit: Field| {
        let mut i = input(opcode::MODIFY_TIS, 0, modify_tis_in::BYTES);
        set(&mut i, modify_tis_in::TISN, tisn);
        set(&mut i, bit.within(modify_tis_in::BITMASK), 1);
        set(&mut i, tisc::PRIO.within(modify_tis_in::CTX), 4);
        e.raw.exec(&i, 16)
    };
    modify_tis(&mut e, modify_tis_bitmask::PRIO).ok();
    modify_tis(&mut e, modify_tis_bitmask::LAG_TX_PORT_AFFINITY)
        .fails(cmd_status::BAD_PARAM_ERR, tiss::BAD_BITMASK);
    let mut q = input(opcode::QUERY_TIS, 0, 16);
    set(&mut q, query_tis_in::TISN, tisn);
    let d = e.raw.exec(&q, query_tis_out::BYTES);
    assert_eq!(d.get(tisc::PRIO.within(query_tis_out::TIS_CONTEXT)), 4);
}

/// CREATE_SQ refusals, each with its own syndrome, and nothing created by them.
#[test]
fn sq_bad_input() {
    let (mut e, _wire) = env();
    let td = td(&mut e);
    let tisn = tis(&mut e, td);
    let cq = e.cq(6);
    let (buf, dbr) = (e.alloc(4096), e.alloc(64));
    let c = create_sq_in::CTX;
    let base = sq_input(&e, cq.cqn, tisn, 6, buf, dbr);
    let cases: Vec<(Field, u32, u8, u32)> = vec![
        (
            sqc::STATE.within(c),
            1,
            cmd_status::BAD_PARAM_ERR,
            sqs::NOT_RST,
        ),
        (
            sqc::CQN.within(c),
            0x7777,
            cmd_status::BAD_RES_ERR,
            sqs::BAD_CQN,
        ),
        (
            sqc::TIS_LST_SZ.within(c),
            2,
            cmd_status::BAD_PARAM_ERR,
            sqs::TIS_LIST,
        ),
        (
            sqc::TIS_NUM_0.within(c),
            0x99,
            cmd_status::BAD_RES_ERR,
            sqs::BAD_TIS,
        ),
        (
            sqc::HAIRPIN.within(c),
            1,
            cmd_status::BAD_PARAM_ERR,
            sqs::UNSUPPORTED_FIELD,
        ),
        (
            sqc::ALLOW_SWP.within(c),
            1,
            cmd_status::BAD_PARAM_ERR,
            sqs::UNSUPPORTED_FIELD,
        ),
        (
            sqc::REG_UMR.within(c),
            1,
            cmd_status::BAD_PARAM_ERR,
            sqs::UNSUPPORTED_FIELD,
        ),
        (
            sqc::MIN_WQE_INLINE_MODE.within(c),
            4,
            cmd_status::BAD_PARAM_ERR,
            sqs::INLINE_MODE,
        ),
        (
            sqc::TS_FORMAT.within(c),
            2,
            cmd_status::BAD_PARAM_ERR,
            sqs::TS_FORMAT,
        ),
        (
            wqf(c, wq::WQ_TYPE),
            3,
            cmd_status::BAD_PARAM_ERR,
            wqs::WQ_TYPE,
        ),
        (
            wqf(c, wq::WQ_SIGNATURE),
            1,
            cmd_status::BAD_PARAM_ERR,
            wqs::UNSUPPORTED_FIELD,
        ),
        (
            wqf(c, wq::END_PADDING_MODE),
            1,
            cmd_status::BAD_PARAM_ERR,
            wqs::END_PADDING,
        ),
        (wqf(c, wq::PD), 0x4444, cmd_status::BAD_RES_ERR, wqs::BAD_PD),
        (
            wqf(c, wq::UAR_PAGE),
            0x4444,
            cmd_status::BAD_RES_ERR,
            wqs::BAD_UAR,
        ),
        (
            wqf(c, wq::LOG_WQ_STRIDE),
            5,
            cmd_status::BAD_PARAM_ERR,
            wqs::STRIDE,
        ),
        (
            wqf(c, wq::LOG_WQ_SZ),
            16,
            cmd_status::BAD_PARAM_ERR,
            wqs::SIZE,
        ),
        (
            wqf(c, wq::LOG_WQ_SZ),
            7,
            cmd_status::BAD_PARAM_ERR,
            wqs::PAS_TOO_FEW,
        ),
        (wqf(c, wq::LWM), 1, cmd_status::BAD_PARAM_ERR, wqs::LWM),
        (
            wqf(c, wq::WQ_UMEM_VALID),
            1,
            cmd_status::BAD_PARAM_ERR,
            wqs::UMEM,
        ),
    ];
    for (f, v, status, syn) in cases {
        let mut i = base.clone();
        set(&mut i, f, v);
        e.raw.exec(&i, 16).fails(status, syn);
    }
    let mut i = base.clone();
    wqf(c, wq::DBR_ADDR).set64(&mut i, dbr + 4).unwrap();
    e.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, wqs::DBR_MISALIGNED);
    let mut i = base.clone();
    let at = create_sq_in::BYTES;
    i[at..at + 8].copy_from_slice(&(buf + 8).to_be_bytes());
    e.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, wqs::PAS_BAD);
    // The CQ has no user: nothing was created.
    destroy(&mut e, opcode::DESTROY_CQ, destroy_cq_in::CQN, cq.cqn).ok();
}

/// CREATE_RQ / CREATE_TIR refusals and the state machine of MODIFY_SQ / MODIFY_RQ.
#[test]
fn rq_tir_bad_input_and_transitions() {
    let (mut e, _wire) = env();
    let td = td(&mut e);
    let cq = e.cq(6);
    let (buf, dbr) = (e.alloc(4096), e.alloc(64));
    let c = create_rq_in::CTX;
    let base = rq_input(&e, cq.cqn, 4, 5, buf, dbr);
    let w = |f: Field| f.within(rqc::WQ).within(c);
    let cases: Vec<(Field, u32, u8, u32)> = vec![
        (
            rqc::MEM_RQ_TYPE.within(c),
            1,
            cmd_status::BAD_PARAM_ERR,
            rqs::MEM_RQ_TYPE,
        ),
        (
            rqc::SCATTER_FCS.within(c),
            1,
            cmd_status::BAD_PARAM_ERR,
            rqs::UNSUPPORTED_FIELD,
        ),
        (
            rqc::DELAY_DROP_EN.within(c),
            1,
            cmd_status::BAD_PARAM_ERR,
            rqs::UNSUPPORTED_FIELD,
        ),
        (
            rqc::FLUSH_IN_ERROR_EN.within(c),
            1,
            cmd_status::BAD_PARAM_ERR,
            rqs::UNSUPPORTED_FIELD,
        ),
        (
            rqc::STATE.within(c),
            3,
            cmd_status::BAD_PARAM_ERR,
            rqs::NOT_RST,
        ),
        (
            rqc::CQN.within(c),
            0x7777,
            cmd_status::BAD_RES_ERR,
            rqs::BAD_CQN,
        ),
        (
            rqc::COUNTER_SET_ID.within(c),
            9,
            cmd_status::BAD_PARAM_ERR,
            rqs::BAD_COUNTER_SET,
        ),
        (
            w(wq::LOG_WQ_STRIDE),
            3,
            cmd_status::BAD_PARAM_ERR,
            wqs::STRIDE,
        ),
        (
            w(wq::LOG_WQ_STRIDE),
            10,
            cmd_status::BAD_PARAM_ERR,
            wqs::STRIDE,
        ),
        (
            w(wq::WQ_TYPE),
            wq_type::CYCLIC_STRIDING_RQ.into(),
            cmd_status::BAD_PARAM_ERR,
            wqs::WQ_TYPE,
        ),
        (
            w(wq::LOG_WQE_NUM_OF_STRIDES),
            1,
            cmd_status::BAD_PARAM_ERR,
            wqs::UNSUPPORTED_FIELD,
        ),
    ];
    for (f, v, status, syn) in cases {
        let mut i = base.clone();
        set(&mut i, f, v);
        e.raw.exec(&i, 16).fails(status, syn);
    }
    let r = rq(&mut e, cq.cqn, 4, 5);
    // TIR refusals.
    let tc = create_tir_in::CTX;
    let tcases: Vec<(Field, u32, u8, u32)> = vec![
        (
            tirc::DISP_TYPE.within(tc),
            1,
            cmd_status::BAD_PARAM_ERR,
            tirs::RSS_UNSUPPORTED,
        ),
        (
            tirc::RX_HASH_FN.within(tc),
            2,
            cmd_status::BAD_PARAM_ERR,
            tirs::RSS_UNSUPPORTED,
        ),
        (
            tirc::PACKET_MERGE_MASK.within(tc),
            1,
            cmd_status::BAD_PARAM_ERR,
            tirs::UNSUPPORTED_FIELD,
        ),
        (
            tirc::TLS_EN.within(tc),
            1,
            cmd_status::BAD_PARAM_ERR,
            tirs::UNSUPPORTED_FIELD,
        ),
        (
            tirc::INLINE_RQN.within(tc),
            0x5555,
            cmd_status::BAD_RES_ERR,
            tirs::BAD_RQN,
        ),
        (
            tirc::TRANSPORT_DOMAIN.within(tc),
            0x55,
            cmd_status::BAD_RES_ERR,
            tirs::BAD_TD,
        ),
    ];
    for (f, v, status, syn) in tcases {
        let mut i = tir_input(td, r.n);
        set(&mut i, f, v);
        e.raw.exec(&i, 16).fails(status, syn);
    }
    let tirn = tir(&mut e, td, r.n);
    // MODIFY_TIR: self-loopback blocking only.
    let modify_tir = |e: &mut Env, bit: Field| {
        let mut i = input(opcode::MODIFY_TIR, 0, modify_tir_in::BYTES);
        set(&mut i, modify_tir_in::TIRN, tirn);
        set(&mut i, bit.within(modify_tir_in::BITMASK), 1);
        set(&mut i, tirc::SELF_LB_BLOCK.within(modify_tir_in::CTX), 3);
        e.raw.exec(&i, 16)
    };
    modify_tir(&mut e, modify_tir_bitmask::SELF_LB_EN).ok();
    modify_tir(&mut e, modify_tir_bitmask::HASH)
        .fails(cmd_status::BAD_PARAM_ERR, tirs::BAD_BITMASK);
    // RQ states: the current state must be named; RST->ERR is no transition.
    use rqc_state::*;
    modify(&mut e, false, r.n, RDY, RDY).fails(cmd_status::BAD_RES_STATE_ERR, rqs::STATE_MISMATCH);
    modify(&mut e, false, r.n, RST, ERR).fails(cmd_status::BAD_RES_STATE_ERR, rqs::BAD_TRANSITION);
    modify(&mut e, false, r.n, RST, RDY).ok();
    modify(&mut e, false, r.n, RDY, ERR).ok();
    modify(&mut e, false, r.n, ERR, RDY).fails(cmd_status::BAD_RES_STATE_ERR, rqs::BAD_TRANSITION);
    modify(&mut e, false, r.n, ERR, RST).ok();
    assert_eq!(query_state(&mut e, false, r.n), RST.into());
    // MODIFY_RQ bitmask on a ready RQ (Linux `mlx5e_modify_rq_vsd`): VSD and the counter
    // set apply; scatter FCS is refused.
    modify(&mut e, false, r.n, RST, RDY).ok();
    let mut i = input(opcode::MODIFY_RQ, 0, modify_rq_in::BYTES);
    set(&mut i, modify_rq_in::RQN, r.n);
    set(&mut i, modify_rq_in::RQ_STATE, RDY.into());
    set(&mut i, rqc::STATE.within(modify_rq_in::CTX), RDY.into());
    modify_rq_in::MODIFY_BITMASK
        .set64(&mut i, modify_rq_bitmask::SCATTER_FCS)
        .unwrap();
    e.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, rqs::BAD_BITMASK);
    modify_rq_in::MODIFY_BITMASK
        .set64(&mut i, modify_rq_bitmask::RQ_COUNTER_SET_ID)
        .unwrap();
    set(&mut i, rqc::COUNTER_SET_ID.within(modify_rq_in::CTX), 3);
    e.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, rqs::BAD_COUNTER_SET);
    modify_rq_in::MODIFY_BITMASK
        .set64(&mut i, modify_rq_bitmask::VSD)
        .unwrap();
    set(&mut i, rqc::VSD.within(modify_rq_in::CTX), 0);
    e.raw.exec(&i, 16).ok();
    let mut q = input(opcode::QUERY_RQ, 0, 16);
    set(&mut q, query_rq_in::RQN, r.n);
    let d = e.raw.exec(&q, query_rq_out::BYTES);
    assert_eq!(d.get(rqc::VSD.within(query_rq_out::RQ_CONTEXT)), 0);
    // SQ: a modify_bitmask (rate limit) is refused.
    let tisn = tis(&mut e, td);
    let s = sq(&mut e, cq.cqn, tisn, 6);
    let mut i = input(opcode::MODIFY_SQ, 0, modify_sq_in::BYTES);
    set(&mut i, modify_sq_in::SQN, s.n);
    set(&mut i, sqc::STATE.within(modify_sq_in::CTX), 1);
    modify_sq_in::MODIFY_BITMASK.set64(&mut i, 1).unwrap();
    e.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, sqs::BAD_BITMASK);
}

/// The capability page Linux reads before it makes these objects.
#[test]
fn ethernet_offload_caps() {
    let (mut e, _wire) = env();
    let gen = raw::cap_bytes(&e.raw.query_cap(hca_cap::cap_type::GENERAL, true));
    assert_eq!(cmd_hca_cap::ETH_NET_OFFLOADS.get(&gen), Ok(1));
    let d = e.raw.query_cap(hca_cap::cap_type::ETHERNET_OFFLOADS, true);
    d.ok();
    let eth = raw::cap_bytes(&d);
    use per_protocol_networking_offload_caps as p;
    assert_eq!(p::CSUM_CAP.get(&eth), Ok(1));
    assert_eq!(
        p::WQE_INLINE_MODE.get(&eth),
        Ok(cap_inline_mode::NOT_REQUIRED.into())
    );
    assert_eq!(p::MAX_LSO_CAP.get(&eth), Ok(0));
    assert_eq!(p::RSS_IND_TBL_CAP.get(&eth), Ok(0));
}

// ---------------------------------------------------------------------------------------------
// Send
// ---------------------------------------------------------------------------------------------

/// `MLX5_ETH_WQE_L3_CSUM | MLX5_ETH_WQE_L4_CSUM` (Linux include/linux/mlx5/qp.h).
const CSUM: u8 = (1 << 6) | (1 << 7);

/// An Ethernet SEND WQE as en_tx.c `mlx5e_sq_xmit_wqe` lays it out: ctrl, Ethernet segment
/// with `cs_flags`, `mss` and the inline headers, then the data segments.
fn eth_wqe(
    sqn: u32,
    idx: u16,
    fm_ce_se: u8,
    cs_flags: u8,
    inl: &[u8],
    dsegs: &[[u8; 16]],
) -> Vec<u8> {
    let mut eseg = vec![0u8; 16];
    eseg[4] = cs_flags;
    eseg[12..14].copy_from_slice(&(inl.len() as u16).to_be_bytes());
    let first = inl.len().min(2);
    eseg[14..14 + first].copy_from_slice(&inl[..first]);
    let mut rest = inl[first..].to_vec();
    rest.resize(rest.len().next_multiple_of(16), 0);
    eseg.extend_from_slice(&rest);
    let mut segs: Vec<&[u8]> = vec![&eseg];
    for d in dsegs {
        segs.push(d);
    }
    send_wqe(wqe::opcode::SEND, idx, sqn, fm_ce_se, 0, &segs)
}

/// Writes WQE `w` at the SQ's producer counter (wrapping), moves the counter past it, writes
/// the doorbell record and rings the doorbell register of UAR `uar` (en/txrx.h
/// `mlx5e_notify_hw`).
fn post_sq(e: &Env, sq: &mut Wq, uar: u32, w: &[u8]) {
    let size = 1u64 << sq.log_sz;
    for (k, bb) in w.chunks(64).enumerate() {
        let slot = (sq.pi as u64 + k as u64) % size;
        e.write(sq.buf + slot * 64, bb);
    }
    sq.pi = sq.pi.wrapping_add(w.len().div_ceil(64) as u16);
    e.write(sq.dbr + 4, &(sq.pi as u32).to_be_bytes());
    let v = u64::from_le_bytes(w[0..8].try_into().unwrap());
    use raw::Device;
    e.raw.dev.write64(u64::from(uar) * 4096 + 0x800, v);
    e.raw.dev.settle();
}

/// An Ethernet + IPv4 + UDP frame to port 7 carrying `payload`, checksums zero.
fn udp_frame(payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 42];
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((28 + payload.len()) as u16).to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    f[34..36].copy_from_slice(&5000u16.to_be_bytes());
    f[36..38].copy_from_slice(&7u16.to_be_bytes());
    f[38..40].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The RFC 1071 sum of `b` folded to 16 bits.
fn ones_sum(b: &[u8], mut acc: u32) -> u16 {
    for c in b.chunks(2) {
        acc += u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0));
    }
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Whether the IPv4 header and UDP checksums of `udp_frame`'s layout verify.
fn udp_checksums_ok(f: &[u8]) -> bool {
    let total = u16::from_be_bytes([f[16], f[17]]) as usize;
    let ip_ok = ones_sum(&f[14..34], 0) == 0xffff;
    let udp = &f[34..14 + total];
    let pseudo = ones_sum(&f[26..34], 17 + udp.len() as u32) as u32;
    ip_ok && ones_sum(udp, pseudo) == 0xffff
}

/// Frames the HCA sent, as they arrive at the other end of its link.
fn frames(wire: &mut Link) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    while let Ok(Some(f)) = wire.recv() {
        v.push(f);
    }
    v
}

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
    use raw::Device;
    e.raw.dev.write64(
        u64::from(e.uar) * 4096 + 0x800,
        u64::from_le_bytes(w[0..8].try_into().unwrap()),
    );
    assert_eq!(frames(&mut wire).len(), 1);
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
    // Each malformation: its CQE syndrome and vendor syndrome.
    let mut mss = ok(x.sq.n, 0);
    mss[16 + 6] = 1;
    let mut swp = ok(x.sq.n, 0);
    swp[16 + 5] = 1;
    let mut inner_csum = ok(x.sq.n, 0);
    inner_csum[16 + 4] = 1 << 4;
    let mut opcode = ok(x.sq.n, 0);
    opcode[3] = wqe::opcode::TSO;
    let mut inline_seg = ok(x.sq.n, 0);
    inline_seg[32] |= 0x80;
    let cases: Vec<(Vec<u8>, u8, u8)> = vec![
        (ok(x.sq.n + 1, 0), cqe::syndrome::LOCAL_QP_OP_ERR, 0x01),
        (mss, cqe::syndrome::LOCAL_QP_OP_ERR, 0x01),
        (swp, cqe::syndrome::LOCAL_QP_OP_ERR, 0x01),
        (inner_csum, cqe::syndrome::LOCAL_QP_OP_ERR, 0x01),
        (opcode, cqe::syndrome::LOCAL_QP_OP_ERR, 0x01),
        (inline_seg, cqe::syndrome::LOCAL_QP_OP_ERR, 0x01),
        (
            eth_wqe(x.sq.n, 0, 0, 0, &[], &[dseg(64, lkey ^ 0x100, data)]),
            cqe::syndrome::LOCAL_PROT_ERR,
            0x02,
        ),
        (
            eth_wqe(x.sq.n, 0, 0, 0, &[], &[dseg(2000, lkey, data)]),
            cqe::syndrome::LOCAL_LENGTH_ERR,
            0x06,
        ),
        (
            eth_wqe(x.sq.n, 0, 0, 0, &[], &[dseg(10, lkey, data)]),
            cqe::syndrome::LOCAL_QP_OP_ERR,
            0x01,
        ),
    ];
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
        // Recovery: ERR -> RST -> RDY, the counter from 0.
        modify(&mut e, true, x.sq.n, sqc_state::ERR, sqc_state::RST).ok();
        x.sq.pi = 0;
        e.write(x.sq.dbr + 4, &0u32.to_be_bytes());
        modify(&mut e, true, x.sq.n, sqc_state::RST, sqc_state::RDY).ok();
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

// ---------------------------------------------------------------------------------------------
// Receive
// ---------------------------------------------------------------------------------------------

/// Posts a receive WQE of `sges` (terminated with MLX5_INVALID_LKEY when short) at the RQ's
/// producer counter and writes the counter to the doorbell record (en_rx.c
/// `mlx5e_post_rx_wqes`).
fn post_rq(e: &Env, rq: &mut Wq, sges: &[(u32, u32, u64)]) {
    let stride = 1usize << rq.log_stride;
    let slot = (rq.pi as u64 % (1 << rq.log_sz)) * stride as u64;
    let mut w = vec![0u8; stride];
    for (k, &(len, lkey, addr)) in sges.iter().enumerate() {
        w[k * 16..k * 16 + 16].copy_from_slice(&dseg(len, lkey, addr));
    }
    if sges.len() * 16 < stride {
        let k = sges.len();
        w[k * 16..k * 16 + 16].copy_from_slice(&dseg(0, wqe::INVALID_LKEY, 0));
    }
    e.write(rq.buf + slot, &w);
    rq.pi = rq.pi.wrapping_add(1);
    e.write(rq.dbr, &(rq.pi as u32).to_be_bytes());
}

fn rx(e: &Env, tirn: u32, frame: &[u8]) -> std::result::Result<(), EthRxDrop> {
    e.dev().with_hca(|h| deliver(&mut h.dp(), tirn, frame))
}

/// `out_of_buffer` of Q counter set `id` (QUERY_Q_COUNTER, Linux mlx5_ifc.h
/// `query_q_counter_out`: byte 0x30).
fn out_of_buffer(e: &mut Env, id: u32) -> u32 {
    let mut i = input(opcode::QUERY_Q_COUNTER, 0, query_q_counter_in::BYTES);
    set(&mut i, query_q_counter_in::COUNTER_SET_ID, id);
    let d = e.raw.exec(&i, query_q_counter_out::BYTES);
    d.ok();
    u32::from_be_bytes(d.out[0x30..0x34].try_into().unwrap())
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
        (c.opcode(), c.byte_cnt(), c.wqe_counter(), c.user_index()),
        (cqe::opcode::RESP_SEND, frame.len() as u32, 0, 0x55)
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
