//! MODIFY_CQ resize through raw PRM commands: the RESIZE CQE in the old buffer, later CQEs in
//! the new one, the producer counter running on, and every refusal with its status; plus the
//! EQ doorbell check.

#[path = "datapath_common/mod.rs"]
mod dp;
#[path = "raw/mod.rs"]
mod raw;

use dp::*;
use mlx5_prm::*;
use mlx5_sim::datapath::cq::post_cqe;
use mlx5_sim::objects::cq::{syndrome as cqs, Cqe as SimCqe};
use mlx5_sim::InProcHca;
use raw::{input, set};

fn env() -> Env {
    Env::new(InProcHca::deterministic(), 1)
}

/// The MODIFY_CQ resize input onto `buf` (page aligned) for `2^log_size` 64-byte CQEs.
fn resize_input(cqn: u32, log_size: u32, buf: u64, select: u32) -> Vec<u8> {
    let npages = ((64u64 << log_size) as usize).div_ceil(4096);
    let mut i = input(
        opcode::MODIFY_CQ,
        cq_modify::OPMOD_RESIZE,
        modify_cq_in::PAS.bytes_with(npages),
    );
    set(&mut i, modify_cq_in::CQN, cqn);
    set(
        &mut i,
        modify_cq_in::MODIFY_FIELD_SELECT_RESIZE_FIELD_SELECT,
        select,
    );
    let c = modify_cq_in::CQ_CONTEXT;
    set(&mut i, cqc::LOG_CQ_SIZE.within(c), log_size);
    set(&mut i, cqc::LOG_PAGE_SIZE.within(c), 0);
    for p in 0..npages {
        modify_cq_in::PAS
            .elem(p as u32)
            .set64(&mut i, buf + p as u64 * 4096)
            .unwrap();
    }
    i
}

const ALL: u32 = cq_modify::MASK_LOG_SIZE | cq_modify::MASK_PG_OFFSET | cq_modify::MASK_PG_SIZE;

fn ring(e: &Env, log_size: u32) -> u64 {
    let buf = e.alloc((64usize << log_size).max(4096));
    for k in 0..(1u64 << log_size) {
        e.write(buf + k * 64 + 63, &[cqe::OP_OWN_INIT]);
    }
    buf
}

fn push(e: &Env, cqn: u32, counter: u16) {
    let c = SimCqe::requester(wqe::opcode::RDMA_WRITE, 0x99, counter, 8);
    assert!(e.raw.dev.with_hca(|h| post_cqe(&mut h.dp(), cqn, &c)));
}

#[test]
fn resize_writes_the_resize_cqe_in_the_old_buffer_and_continues_in_the_new() {
    let mut e = env();
    let mut cq = e.cq(2);
    // Three CQEs, one consumed: producer 3, consumer 1.
    for k in 0..3 {
        push(&e, cq.cqn, k);
    }
    assert_eq!(e.poll_cq(&mut cq).unwrap().wqe_counter(), 0);
    let nbuf = ring(&e, 4);
    e.raw.exec(&resize_input(cq.cqn, 4, nbuf, ALL), 16).ok();
    // The RESIZE CQE at producer index 3 of the old ring, owner bit of pass 0.
    let old = e.read(cq.buf + 3 * 64, 64);
    assert_eq!(cqe::opcode(old[63]), cqe::opcode::RESIZE_CQ);
    assert!(cqe::is_sw_owned(old[63], 3, 4));
    // The next CQE goes to index 4 of the 16-entry ring (nothing was copied there by the
    // device: copying is the driver's job).
    push(&e, cq.cqn, 3);
    let n = e.read(nbuf + 4 * 64, 64);
    assert_eq!(cqe::opcode(n[63]), cqe::opcode::REQ);
    assert!(cqe::is_sw_owned(n[63], 4, 16));
    for k in 0..4 {
        assert_eq!(
            e.read(nbuf + k * 64 + 63, 1)[0],
            cqe::OP_OWN_INIT,
            "slot {k}"
        );
    }
    e.raw
        .dev
        .with_hca(|h| assert_eq!(h.cqs().get(cq.cqn).unwrap().log_size(), 4));
    // QUERY_CQ reports the new size and the new buffer.
    let mut q = input(opcode::QUERY_CQ, 0, query_cq_in::BYTES);
    set(&mut q, query_cq_in::CQN, cq.cqn);
    let d = e.raw.exec(&q, query_cq_out::BYTES + 8);
    d.ok();
    assert_eq!(d.get(cqc::LOG_CQ_SIZE.within(query_cq_out::CQ_CONTEXT)), 4);
    assert_eq!(
        d.get(cqc::PRODUCER_COUNTER.within(query_cq_out::CQ_CONTEXT)),
        5
    );
    assert_eq!(
        query_cq_out::PAS.elem(0).get64(&d.out).unwrap(),
        nbuf,
        "pas[0] is the new buffer"
    );
}

/// A resize onto a ring allocated before the CQEs already written (no change of guest memory
/// between the last CQE in the old ring and the next one): the next CQE still goes to the
/// new ring, at the slot the producer counter names, and the old ring keeps what it had
/// there (the CQ's cached stretch of its old ring is not used for the new one).
#[test]
fn resize_onto_an_earlier_ring_writes_the_next_cqe_there_not_in_the_old_ring() {
    let mut e = env();
    let mut cq = e.cq(2);
    let nbuf = ring(&e, 2);
    for k in 0..3 {
        push(&e, cq.cqn, k);
    }
    assert_eq!(e.poll_cq(&mut cq).unwrap().wqe_counter(), 0);
    e.raw.exec(&resize_input(cq.cqn, 2, nbuf, ALL), 16).ok();
    let old0 = e.read(cq.buf, 64);
    // Producer 4 (3 CQEs and the RESIZE CQE): index 0 of the new 4-entry ring, pass 1.
    push(&e, cq.cqn, 7);
    let n = e.read(nbuf, 64);
    assert_eq!(cqe::opcode(n[63]), cqe::opcode::REQ);
    assert!(cqe::is_sw_owned(n[63], 4, 4));
    assert_eq!(u16::from_be_bytes([n[60], n[61]]), 7, "wqe_counter");
    assert_eq!(
        e.read(cq.buf, 64),
        old0,
        "the old ring's slot 0 is untouched"
    );
}

#[test]
fn resize_refusals() {
    let mut e = env();
    let cq = e.cq(2);
    let nbuf = ring(&e, 3);
    // Unknown CQ.
    e.raw
        .exec(&resize_input(0xabc, 3, nbuf, ALL), 16)
        .fails(cmd_status::BAD_RES_ERR, cqs::UNKNOWN_CQ);
    // Without LOG_SIZE, with unknown bits, with another op_mod.
    e.raw
        .exec(&resize_input(cq.cqn, 3, nbuf, cq_modify::MASK_PG_SIZE), 16)
        .fails(cmd_status::BAD_PARAM_ERR, cqs::MODIFY_UNSUPPORTED);
    e.raw
        .exec(&resize_input(cq.cqn, 3, nbuf, ALL | 1 << 7), 16)
        .fails(cmd_status::BAD_PARAM_ERR, cqs::MODIFY_UNSUPPORTED);
    let mut i = resize_input(cq.cqn, 3, nbuf, ALL);
    set(&mut i, modify_cq_in::OP_MOD, 0);
    e.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, cqs::MODIFY_UNSUPPORTED);
    // Above the cap.
    let mut i = resize_input(cq.cqn, 3, nbuf, ALL);
    let cap = e.raw.dev.with_hca(|h| h.cap(cmd_hca_cap::LOG_MAX_CQ_SZ));
    set(
        &mut i,
        cqc::LOG_CQ_SIZE.within(modify_cq_in::CQ_CONTEXT),
        cap + 1,
    );
    e.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, cqs::SIZE_ABOVE_CAP);
    // Another CQE size.
    let mut i = resize_input(cq.cqn, 3, nbuf, ALL);
    set(
        &mut i,
        cqc::CQE_SZ.within(modify_cq_in::CQ_CONTEXT),
        cqe::stride::CQE_STRIDE_128.into(),
    );
    e.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, cqs::RESIZE_CQE_SIZE);
    // Too few pages for the new size.
    let mut i = resize_input(cq.cqn, 3, nbuf, ALL);
    set(&mut i, cqc::LOG_CQ_SIZE.within(modify_cq_in::CQ_CONTEXT), 8);
    e.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, cqs::PAS_TOO_FEW);
    // Three outstanding CQEs do not fit a 2-entry ring; four fill the old one (no room for the
    // RESIZE CQE).
    for k in 0..3 {
        push(&e, cq.cqn, k);
    }
    e.raw
        .exec(&resize_input(cq.cqn, 1, nbuf, ALL), 16)
        .fails(cmd_status::BAD_SIZE_OUTS_CQES_ERR, cqs::RESIZE_OUTSTANDING);
    push(&e, cq.cqn, 3);
    e.raw
        .exec(&resize_input(cq.cqn, 3, nbuf, ALL), 16)
        .fails(cmd_status::BAD_SIZE_OUTS_CQES_ERR, cqs::RESIZE_OUTSTANDING);
    // Nothing changed.
    e.raw
        .dev
        .with_hca(|h| assert_eq!(h.cqs().get(cq.cqn).unwrap().log_size(), 2));
}

#[test]
fn an_eq_doorbell_past_the_producer_is_ignored() {
    let e = env();
    let eqn = e.eqn as u8;
    let (prod, cons) = e.raw.dev.with_hca(|h| {
        let q = h.eq(eqn).unwrap();
        (q.prod, q.cons)
    });
    // Software cannot have consumed EQEs the device never wrote.
    e.raw.eq_doorbell(e.uar, e.eqn, prod + 1, true);
    e.raw.dev.with_hca(|h| {
        let q = h.eq(eqn).unwrap();
        assert_eq!((q.cons, q.bad_doorbells), (cons, 1));
    });
    // Up to the producer is fine, and arms.
    e.raw.eq_doorbell(e.uar, e.eqn, prod, true);
    e.raw.dev.with_hca(|h| {
        let q = h.eq(eqn).unwrap();
        assert_eq!((q.cons, q.bad_doorbells), (prod, 1));
        assert!(q.armed);
    });
}
