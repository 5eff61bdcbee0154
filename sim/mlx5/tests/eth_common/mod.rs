//! Ethernet queue test helpers on top of the data-path helpers (`tests/datapath_common`):
//! the TD, TIS, SQ, RQ and TIR built from raw PRM commands, Ethernet send WQEs, receive WQEs
//! and frames. Include after `raw` and `dp` with `#[path = "eth_common/mod.rs"] mod eth;`.
#![allow(dead_code)]

use super::dp::*;
use super::raw::{self, input, set, Device};
use mlx5_prm::*;
use mlx5_sim::datapath::eth::rx::{deliver, EthRxDrop};
use mlx5_sim::link::Link;
use mlx5_sim::wire::Port;
use mlx5_sim::InProcHca;

/// An HCA whose port is one end of an in-process link; the other end is returned (the
/// frames the HCA sends arrive there).
pub fn env() -> (Env, Link) {
    let e = Env::new(InProcHca::deterministic(), 1);
    let (a, b) = Link::pair();
    e.dev().with_hca(|h| *h.port_mut() = Port::on_link(a));
    (e, b)
}

pub fn td<D: Device>(e: &mut Env<D>) -> u32 {
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

/// A change to a create input and the refusal it gets: (field, value, status, syndrome).
pub type Refusal = (Field, u32, u8, u32);
/// `cmd_status::BAD_PARAM_ERR` and `BAD_RES_ERR`, short for the refusal tables.
pub const PARAM: u8 = cmd_status::BAD_PARAM_ERR;
pub const RES: u8 = cmd_status::BAD_RES_ERR;

/// Each change of the create input `base` is refused with its status and syndrome.
pub fn refuses<D: Device>(e: &mut Env<D>, base: &[u8], cases: &[Refusal]) {
    for &(f, v, status, syn) in cases {
        let mut i = base.to_vec();
        set(&mut i, f, v);
        e.raw.exec(&i, 16).fails(status, syn);
    }
}

pub fn tis_input(td: u32) -> Vec<u8> {
    let mut i = input(opcode::CREATE_TIS, 0, create_tis_in::BYTES);
    set(&mut i, tisc::PRIO.within(create_tis_in::CTX), 0);
    set(
        &mut i,
        tisc::TRANSPORT_DOMAIN.within(create_tis_in::CTX),
        td,
    );
    i
}

pub fn tis<D: Device>(e: &mut Env<D>, td: u32) -> u32 {
    let d = e.raw.exec(&tis_input(td), 16);
    d.ok();
    d.get(create_tis_out::TISN)
}

/// A work queue as software sees it.
pub struct Wq {
    pub n: u32,
    pub buf: u64,
    pub dbr: u64,
    pub log_sz: u32,
    pub log_stride: u32,
    /// Producer counter (WQEBBs for an SQ, WQEs for an RQ).
    pub pi: u16,
}

/// A field of the `wq` inside `ctx` of a create input.
pub fn wqf(ctx: Field, f: Field) -> Field {
    f.within(sqc::WQ).within(ctx)
}

/// The CREATE_SQ input for an SQ of `2^log_sz` basic blocks.
pub fn sq_input<D: Device>(
    e: &Env<D>,
    cqn: u32,
    tisn: u32,
    log_sz: u32,
    buf: u64,
    dbr: u64,
) -> Vec<u8> {
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

pub fn sq<D: Device>(e: &mut Env<D>, cqn: u32, tisn: u32, log_sz: u32) -> Wq {
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
pub fn rq_input<D: Device>(
    e: &Env<D>,
    cqn: u32,
    log_sz: u32,
    log_stride: u32,
    buf: u64,
    dbr: u64,
) -> Vec<u8> {
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

pub fn rq<D: Device>(e: &mut Env<D>, cqn: u32, log_sz: u32, log_stride: u32) -> Wq {
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

pub fn tir_input(td: u32, rqn: u32) -> Vec<u8> {
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

pub fn tir<D: Device>(e: &mut Env<D>, td: u32, rqn: u32) -> u32 {
    let d = e.raw.exec(&tir_input(td, rqn), 16);
    d.ok();
    d.get(create_tir_out::TIRN)
}

/// MODIFY_SQ (`sq`) or MODIFY_RQ from `cur` to `next`.
pub fn modify<D: Device>(e: &mut Env<D>, sq: bool, n: u32, cur: u8, next: u8) -> raw::Done {
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

pub fn destroy<D: Device>(e: &mut Env<D>, op: u16, field: Field, n: u32) -> raw::Done {
    let mut i = input(op, 0, 16);
    set(&mut i, field, n);
    e.raw.exec(&i, 16)
}

/// The queue state QUERY_SQ / QUERY_RQ reports.
pub fn query_state<D: Device>(e: &mut Env<D>, sq: bool, n: u32) -> u32 {
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
pub struct Eth {
    pub td: u32,
    pub tisn: u32,
    pub scq: Cq,
    pub rcq: Cq,
    pub sq: Wq,
    pub rq: Wq,
    pub tirn: u32,
}

pub fn eth<D: Device>(e: &mut Env<D>) -> Eth {
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

/// Both outer checksums (`cs_flags`).
pub const CSUM: u8 = eth_seg::cs_flags::L3_CSUM | eth_seg::cs_flags::L4_CSUM;

/// An Ethernet SEND WQE as en_tx.c `mlx5e_sq_xmit_wqe` lays it out: ctrl, Ethernet segment
/// with `cs_flags`, `mss` and the inline headers, then the data segments.
pub fn eth_wqe(
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
pub fn post_sq<D: Device>(e: &Env<D>, sq: &mut Wq, uar: u32, w: &[u8]) {
    let size = 1u64 << sq.log_sz;
    for (k, bb) in w.chunks(64).enumerate() {
        let slot = (sq.pi as u64 + k as u64) % size;
        e.write(sq.buf + slot * 64, bb);
    }
    sq.pi = sq.pi.wrapping_add(w.len().div_ceil(64) as u16);
    e.write(sq.dbr + 4, &(sq.pi as u32).to_be_bytes());
    let v = u64::from_le_bytes(w[0..8].try_into().unwrap());
    e.raw.dev.write64(u64::from(uar) * 4096 + 0x800, v);
    e.raw.dev.settle();
}

/// An Ethernet + IPv4 + UDP frame to port 7 carrying `payload`, checksums zero.
pub fn udp_frame(payload: &[u8]) -> Vec<u8> {
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
pub fn ones_sum(b: &[u8], mut acc: u32) -> u16 {
    for c in b.chunks(2) {
        acc += u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0));
    }
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Whether the IPv4 header and UDP checksums of `udp_frame`'s layout verify.
pub fn udp_checksums_ok(f: &[u8]) -> bool {
    let total = u16::from_be_bytes([f[16], f[17]]) as usize;
    let ip_ok = ones_sum(&f[14..34], 0) == 0xffff;
    let udp = &f[34..14 + total];
    let pseudo = ones_sum(&f[26..34], 17 + udp.len() as u32) as u32;
    ip_ok && ones_sum(udp, pseudo) == 0xffff
}

/// Frames the HCA sent, as they arrive at the other end of its link.
pub fn frames(wire: &mut Link) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    while let Ok(Some(f)) = wire.recv() {
        v.push(f);
    }
    v
}

/// Posts a receive WQE of `sges` (terminated with MLX5_INVALID_LKEY when short) at the RQ's
/// producer counter and writes the counter to the doorbell record (en_rx.c
/// `mlx5e_post_rx_wqes`).
pub fn post_rq<D: Device>(e: &Env<D>, rq: &mut Wq, sges: &[(u32, u32, u64)]) {
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

pub fn rx(e: &Env, tirn: u32, frame: &[u8]) -> std::result::Result<(), EthRxDrop> {
    e.dev().with_hca(|h| deliver(&mut h.dp(), tirn, frame))
}

/// `out_of_buffer` of Q counter set `id` (QUERY_Q_COUNTER, Linux mlx5_ifc.h
/// `query_q_counter_out`: byte 0x30).
pub fn out_of_buffer<D: Device>(e: &mut Env<D>, id: u32) -> u32 {
    let mut i = input(opcode::QUERY_Q_COUNTER, 0, query_q_counter_in::BYTES);
    set(&mut i, query_q_counter_in::COUNTER_SET_ID, id);
    let d = e.raw.exec(&i, query_q_counter_out::BYTES);
    d.ok();
    u32::from_be_bytes(d.out[0x30..0x34].try_into().unwrap())
}

/// MODIFY_NIC_VPORT_CONTEXT of the vport's address list of type `ty` (UC or MC) to `macs`
/// (Linux core/vport.c `mlx5_modify_nic_vport_mac_list`).
pub fn set_list<D: Device>(env: &mut Env<D>, ty: u8, macs: &[[u8; 6]]) {
    let mut i = input(
        opcode::MODIFY_NIC_VPORT_CONTEXT,
        0,
        modify_nic_vport_context_in::BYTES + macs.len() * 8,
    );
    let fs = modify_nic_vport_context_in::FIELD_SELECT;
    let ctx = modify_nic_vport_context_in::NIC_VPORT_CONTEXT;
    set(
        &mut i,
        modify_nic_vport_field_select::ADDRESSES_LIST.within(fs),
        1,
    );
    set(
        &mut i,
        nic_vport_context::ALLOWED_LIST_TYPE.within(ctx),
        ty.into(),
    );
    set(
        &mut i,
        nic_vport_context::ALLOWED_LIST_SIZE.within(ctx),
        macs.len() as u32,
    );
    let first = ctx.byte_offset() + nic_vport_context::CURRENT_UC_MAC_ADDRESS.byte_offset();
    for (k, m) in macs.iter().enumerate() {
        i[first + k * 8 + 2..first + k * 8 + 8].copy_from_slice(m);
    }
    env.raw.exec(&i, 16).ok();
}

/// MODIFY_NIC_VPORT_CONTEXT of the promiscuous modes: `mode` (`promisc_uc`, `_mc` or
/// `_all`) on or off, the others off (Linux core/vport.c `mlx5_modify_nic_vport_promisc`).
pub fn set_promisc<D: Device>(env: &mut Env<D>, mode: Field, on: bool) {
    let mut i = input(
        opcode::MODIFY_NIC_VPORT_CONTEXT,
        0,
        modify_nic_vport_context_in::BYTES,
    );
    let fs = modify_nic_vport_context_in::FIELD_SELECT;
    let ctx = modify_nic_vport_context_in::NIC_VPORT_CONTEXT;
    set(&mut i, modify_nic_vport_field_select::PROMISC.within(fs), 1);
    set(&mut i, mode.within(ctx), on.into());
    env.raw.exec(&i, 16).ok();
}
