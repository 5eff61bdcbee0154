//! The Ethernet queue objects (TIS, SQ, RQ, TIR) through raw PRM commands: created,
//! queried and released, every rejection with its status and syndrome, the SQ / RQ state
//! machine, and the capability page Linux reads for them.

#[path = "datapath_common/mod.rs"]
mod dp;
#[path = "eth_common/mod.rs"]
mod eth;
#[path = "raw/mod.rs"]
mod raw;

use dp::*;
use eth::*;
use mlx5_prm::*;
use mlx5_sim::objects::{rq::syndrome as rqs, sq::syndrome as sqs, tir::syndrome as tirs};
use mlx5_sim::objects::{tis::syndrome as tiss, wq::syndrome as wqs};
use raw::{input, set};

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
    // A UAR only an SQ rings through.
    let uar2 = e.raw.alloc_uar();
    let (buf, dbr) = (e.alloc(4096), e.alloc(64));
    let mut i = sq_input(&e, x.scq.cqn, x.tisn, 6, buf, dbr);
    set(&mut i, wqf(create_sq_in::CTX, wq::UAR_PAGE), uar2);
    let d = e.raw.exec(&i, 16);
    d.ok();
    let sq2 = d.get(create_sq_out::SQN);
    destroy(&mut e, opcode::DEALLOC_UAR, dealloc_uar_in::UAR, uar2).fails(
        cmd_status::RES_BUSY,
        mlx5_sim::control::syndrome::UAR_BUSY_SQ,
    );
    destroy(&mut e, opcode::DESTROY_SQ, destroy_sq_in::SQN, sq2).ok();
    destroy(&mut e, opcode::DEALLOC_UAR, dealloc_uar_in::UAR, uar2).ok();
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
    let cases: Vec<Refusal> = vec![
        (sqc::STATE.within(c), 1, PARAM, sqs::NOT_RST),
        (sqc::CQN.within(c), 0x7777, RES, sqs::BAD_CQN),
        (sqc::TIS_LST_SZ.within(c), 2, PARAM, sqs::TIS_LIST),
        (sqc::TIS_NUM_0.within(c), 0x99, RES, sqs::BAD_TIS),
        (sqc::HAIRPIN.within(c), 1, PARAM, sqs::UNSUPPORTED_FIELD),
        (sqc::ALLOW_SWP.within(c), 1, PARAM, sqs::UNSUPPORTED_FIELD),
        (sqc::REG_UMR.within(c), 1, PARAM, sqs::UNSUPPORTED_FIELD),
        (
            sqc::MIN_WQE_INLINE_MODE.within(c),
            4,
            PARAM,
            sqs::INLINE_MODE,
        ),
        (sqc::TS_FORMAT.within(c), 2, PARAM, sqs::TS_FORMAT),
        (wqf(c, wq::WQ_TYPE), 3, PARAM, wqs::WQ_TYPE),
        (wqf(c, wq::WQ_SIGNATURE), 1, PARAM, wqs::UNSUPPORTED_FIELD),
        (wqf(c, wq::END_PADDING_MODE), 1, PARAM, wqs::END_PADDING),
        (wqf(c, wq::PD), 0x4444, cmd_status::BAD_RES_ERR, wqs::BAD_PD),
        (wqf(c, wq::UAR_PAGE), 0x4444, RES, wqs::BAD_UAR),
        (wqf(c, wq::LOG_WQ_STRIDE), 5, PARAM, wqs::STRIDE),
        (wqf(c, wq::LOG_WQ_SZ), 16, PARAM, wqs::SIZE),
        (wqf(c, wq::LOG_WQ_SZ), 7, PARAM, wqs::PAS_TOO_FEW),
        (wqf(c, wq::LWM), 1, cmd_status::BAD_PARAM_ERR, wqs::LWM),
        (wqf(c, wq::WQ_UMEM_VALID), 1, PARAM, wqs::UMEM),
    ];
    refuses(&mut e, &base, &cases);
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
    let cases: Vec<Refusal> = vec![
        (rqc::MEM_RQ_TYPE.within(c), 1, PARAM, rqs::MEM_RQ_TYPE),
        (rqc::SCATTER_FCS.within(c), 1, PARAM, rqs::UNSUPPORTED_FIELD),
        (
            rqc::DELAY_DROP_EN.within(c),
            1,
            PARAM,
            rqs::UNSUPPORTED_FIELD,
        ),
        (
            rqc::FLUSH_IN_ERROR_EN.within(c),
            1,
            PARAM,
            rqs::UNSUPPORTED_FIELD,
        ),
        (rqc::STATE.within(c), 3, PARAM, rqs::NOT_RST),
        (rqc::CQN.within(c), 0x7777, RES, rqs::BAD_CQN),
        (
            rqc::COUNTER_SET_ID.within(c),
            9,
            PARAM,
            rqs::BAD_COUNTER_SET,
        ),
        (w(wq::LOG_WQ_STRIDE), 3, PARAM, wqs::STRIDE),
        (w(wq::LOG_WQ_STRIDE), 10, PARAM, wqs::STRIDE),
        (
            w(wq::WQ_TYPE),
            wq_type::CYCLIC_STRIDING_RQ.into(),
            PARAM,
            wqs::WQ_TYPE,
        ),
        (
            w(wq::LOG_WQE_NUM_OF_STRIDES),
            1,
            PARAM,
            wqs::UNSUPPORTED_FIELD,
        ),
    ];
    refuses(&mut e, &base, &cases);
    let r = rq(&mut e, cq.cqn, 4, 5);
    // TIR refusals.
    let tc = create_tir_in::CTX;
    let tcases: Vec<Refusal> = vec![
        (tirc::DISP_TYPE.within(tc), 1, PARAM, tirs::RSS_UNSUPPORTED),
        (tirc::RX_HASH_FN.within(tc), 2, PARAM, tirs::RSS_UNSUPPORTED),
        (
            tirc::PACKET_MERGE_MASK.within(tc),
            1,
            PARAM,
            tirs::UNSUPPORTED_FIELD,
        ),
        (tirc::TLS_EN.within(tc), 1, PARAM, tirs::UNSUPPORTED_FIELD),
        (tirc::INLINE_RQN.within(tc), 0x5555, RES, tirs::BAD_RQN),
        (tirc::TRANSPORT_DOMAIN.within(tc), 0x55, RES, tirs::BAD_TD),
    ];
    refuses(&mut e, &tir_input(td, r.n), &tcases);
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
    rq_states_and_bitmask(&mut e, r.n);
    sq_bitmask_refused(&mut e, td, cq.cqn);
}

/// [`rq_tir_bad_input_and_transitions`]: RQ `rqn`'s states (the current state must be named;
/// RST->ERR is no transition) and its MODIFY_RQ bitmask.
fn rq_states_and_bitmask(e: &mut Env, rqn: u32) {
    use rqc_state::*;
    modify(e, false, rqn, RDY, RDY).fails(cmd_status::BAD_RES_STATE_ERR, rqs::STATE_MISMATCH);
    modify(e, false, rqn, RST, ERR).fails(cmd_status::BAD_RES_STATE_ERR, rqs::BAD_TRANSITION);
    modify(e, false, rqn, RST, RDY).ok();
    modify(e, false, rqn, RDY, ERR).ok();
    modify(e, false, rqn, ERR, RDY).fails(cmd_status::BAD_RES_STATE_ERR, rqs::BAD_TRANSITION);
    modify(e, false, rqn, ERR, RST).ok();
    assert_eq!(query_state(e, false, rqn), RST.into());
    // MODIFY_RQ bitmask on a ready RQ (Linux `mlx5e_modify_rq_vsd`): VSD and the counter
    // set apply; scatter FCS is refused.
    modify(e, false, rqn, RST, RDY).ok();
    let mut i = input(opcode::MODIFY_RQ, 0, modify_rq_in::BYTES);
    set(&mut i, modify_rq_in::RQN, rqn);
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
    set(&mut q, query_rq_in::RQN, rqn);
    let d = e.raw.exec(&q, query_rq_out::BYTES);
    assert_eq!(d.get(rqc::VSD.within(query_rq_out::RQ_CONTEXT)), 0);
}

/// [`rq_tir_bad_input_and_transitions`]: SQ MODIFY_SQ with a modify_bitmask (rate limit) is
/// refused.
fn sq_bitmask_refused(e: &mut Env, td: u32, cqn: u32) {
    // SQ: a modify_bitmask (rate limit) is refused.
    let tisn = tis(e, td);
    let s = sq(e, cqn, tisn, 6);
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
