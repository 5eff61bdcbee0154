//! SQ doorbells and BlueFlame copies on one BlueFlame half, one after another: each doorbell
//! replaces the previous doorbell's record on its half, a full copy is compared with its WQE,
//! and a copy abandoned for a new doorbell on the same half is a work queue catastrophic
//! error (uar.rs).

#[path = "datapath_common/mod.rs"]
mod dp;
#[path = "raw/mod.rs"]
mod raw;

use dp::*;
use mlx5_prm::{cqe, event, wqe};
use mlx5_sim::InProcHca;

const CE: u8 = wqe::ctrl::CQ_UPDATE;
/// One half of a BlueFlame register (`log_bf_reg_size` 9: 512-byte registers).
const BF_HALF: u64 = 256;

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// The BAR0 offset of BlueFlame half `half` of the QP's UAR page.
fn half_at(qp: &Qp, half: u64) -> u64 {
    u64::from(qp.uar) * 4096 + 0x800 + BF_HALF * half
}

/// Writes `w` to the SQ and the doorbell record, as `Env::post_send` does before ringing.
fn stage(env: &Env, qp: &mut Qp, w: &[u8]) {
    env.write_send(qp, w);
    env.write(qp.dbr + 4, &(qp.sq_pi as u32).to_be_bytes());
}

/// Stores the first `qwords` 8-byte words of `w` (zero padded to 64 bytes) at `at`: 1 is a
/// plain doorbell, 8 a whole BlueFlame copy of a one-block WQE.
fn store(env: &Env, at: u64, w: &[u8], qwords: usize) {
    let mut padded = w.to_vec();
    padded.resize(64, 0);
    for (k, q) in padded.chunks(8).take(qwords).enumerate() {
        env.dev()
            .write64(at + 8 * k as u64, u64::from_le_bytes(q.try_into().unwrap()));
    }
}

#[test]
fn doorbells_and_copies_share_a_blueflame_half() {
    let mut env = Env::new(InProcHca::deterministic(), 1);
    let mut scq = env.cq(6);
    let rcq = env.cq(6);
    let mut a = env.qp(&scq, &rcq, 6, 5);
    let b = env.qp(&scq, &rcq, 6, 5);
    env.connect_local(&a, b.qpn);
    env.connect_local(&b, a.qpn);
    let src = env.alloc(4096);
    let dst = env.alloc(4096);
    let lkey = env.mkey(src, 4096, LR);
    let rkey = env.mkey(dst, 4096, RW);
    env.write(src, &pattern(64, 3));
    let write = |qp: &Qp, at: u64| {
        send_wqe(
            wqe::opcode::RDMA_WRITE,
            qp.sq_pi,
            qp.qpn,
            CE,
            0,
            &[&raddr_seg(dst + at, rkey), &dseg(8, lkey, src + at)],
        )
    };
    let stats = |env: &Env| env.dev().with_hca(|h| h.blueflame_stats());

    // Plain doorbells on half 0, half 1, half 0 again, then a whole copy on half 0 (it finds
    // the previous doorbell's record there), then a plain doorbell on half 0.
    for (i, (half, qwords)) in [(0, 1), (1, 1), (0, 1), (0, 8), (0, 1)]
        .into_iter()
        .enumerate()
    {
        let w = write(&a, 8 * i as u64);
        stage(&env, &mut a, &w);
        store(&env, half_at(&a, half), &w, qwords);
        let c = env.poll_cq(&mut scq).expect("a CQE per doorbell");
        assert_eq!(c.opcode(), cqe::opcode::REQ, "doorbell {i}");
        assert!(
            env.poll_cq(&mut scq).is_none(),
            "doorbell {i} executed once"
        );
    }
    assert_eq!(env.read(dst, 40), pattern(64, 3)[..40].to_vec());
    assert_eq!(stats(&env), (1, 0), "the one whole copy matched its WQE");

    // A copy that stops after its second qword, then a doorbell on the same half: the copy was
    // torn. Its WQE ran on its doorbell; the QP goes to ERR and the new WQE is flushed.
    let w = write(&a, 40);
    stage(&env, &mut a, &w);
    store(&env, half_at(&a, 1), &w, 2);
    let c = env
        .poll_cq(&mut scq)
        .expect("the torn copy's WQE ran on its doorbell");
    assert_eq!(c.opcode(), cqe::opcode::REQ);
    let w = write(&a, 48);
    stage(&env, &mut a, &w);
    store(&env, half_at(&a, 1), &w, 1);
    assert_eq!(stats(&env), (1, 1), "the torn copy is counted");
    let c = env.poll_cq(&mut scq).expect("flush CQE");
    assert!(c.is_error());
    assert_eq!(c.syndrome(), cqe::syndrome::WR_FLUSH_ERR);
    assert!(env
        .drain_eq()
        .iter()
        .any(|(t, _)| *t == event::WQ_CATAS_ERROR));
}

#[test]
fn a_doorbell_through_another_uar_records_no_copy() {
    let mut env = Env::new(InProcHca::deterministic(), 1);
    let mut scq = env.cq(6);
    let rcq = env.cq(6);
    let mut a = env.qp(&scq, &rcq, 6, 5);
    let b = env.qp(&scq, &rcq, 6, 5);
    env.connect_local(&a, b.qpn);
    env.connect_local(&b, a.qpn);
    let w = send_wqe(wqe::opcode::NOP, a.sq_pi, a.qpn, CE, 0, &[]);
    stage(&env, &mut a, &w);
    // A second UAR page: the QP's uar_page is the first, so the doorbell is ignored and the
    // qwords after it are no BlueFlame copy (nothing compared, nothing counted).
    let other = env.raw.alloc_uar();
    let at = u64::from(other) * 4096 + 0x800;
    store(&env, at, &w, 8);
    assert!(env.poll_cq(&mut scq).is_none(), "ignored doorbell");
    assert_eq!(env.dev().with_hca(|h| h.blueflame_stats()), (0, 0));
    // The right page still works.
    store(&env, half_at(&a, 0), &w, 8);
    let c = env.poll_cq(&mut scq).expect("NOP completes");
    assert_eq!(c.opcode(), cqe::opcode::REQ);
    assert_eq!(env.dev().with_hca(|h| h.blueflame_stats()), (1, 0));
}

/// A loopback QP whose RQ (2 x 64 bytes) and SQ (4 WQEBBs, at 128) are at `buf`, guest memory
/// the caller inserted, after two NOPs in its first two WQEBBs completed successfully; with its
/// send CQ.
fn qp_over_two_nops(env: &mut Env, buf: u64) -> (Qp, Cq) {
    let mut scq = env.cq(6);
    let rcq = env.cq(6);
    let dbr = env.alloc(64);
    let (pd, uar) = (env.pd, env.uar);
    let i = env.qp_input(pd, scq.cqn, rcq.cqn, 2, 1, 2, buf, dbr);
    let d = env.raw.exec(&i, 16);
    d.ok();
    let mut a = Qp {
        qpn: d.get(mlx5_prm::create_qp_out::QPN),
        buf,
        dbr,
        log_sq: 2,
        log_rq: 1,
        rq_stride: 64,
        sq_offset: 128,
        sq_pi: 0,
        rq_pi: 0,
        uar,
        bf_half: 0,
    };
    let qpn = a.qpn;
    env.connect_local(&a, qpn);
    for _ in 0..2 {
        let w = send_wqe(wqe::opcode::NOP, a.sq_pi, a.qpn, CE, 0, &[]);
        env.write_send(&mut a, &w);
        env.ring_sq(&mut a, &w);
        let c = env
            .poll_cq(&mut scq)
            .expect("NOP in guest memory completes");
        assert_eq!(c.opcode(), cqe::opcode::REQ);
    }
    (a, scq)
}

/// An SQ ring whose bytes after a WQE are not guest memory: the WQE still executes (the
/// device reads ahead of a WQE only as an optimisation, and a WQE that does not reach those
/// bytes does not fail on them), and a WQE that does reach them is a work queue catastrophic
/// error, as before.
#[test]
fn sq_ring_tail_outside_guest_memory() {
    let mut env = Env::new(InProcHca::deterministic(), 1);
    // RQ of 2 x 64 bytes, then an SQ of 4 WQEBBs: 384 bytes in one 4 KiB page, of which only
    // the RQ and the first two SQ blocks are guest memory.
    let buf = 0x40_0000_0000u64;
    env.dev().memory().insert(buf, &[0u8; 128 + 128]).unwrap();
    let (mut a, _scq) = qp_over_two_nops(&mut env, buf);
    // The third WQEBB is not guest memory: the software write lands nowhere, and the device's
    // read of that WQE fails.
    let w = send_wqe(wqe::opcode::NOP, a.sq_pi, a.qpn, CE, 0, &[]);
    a.sq_pi = a.sq_pi.wrapping_add(1);
    env.ring_sq(&mut a, &w);
    assert!(env
        .drain_eq()
        .iter()
        .any(|(t, _)| *t == event::WQ_CATAS_ERROR));
}

/// The device reads WQEs through the QP's cached view of its buffer's region: once that
/// memory is freed, the next WQE is unreadable and a work queue catastrophic error, exactly
/// as without the view (the view is checked against the memory's version on every use).
#[test]
fn sq_ring_freed_after_use_is_a_catastrophic_error() {
    let mut env = Env::new(InProcHca::deterministic(), 1);
    // RQ of 2 x 64 bytes, then an SQ of 4 WQEBBs, all guest memory.
    let buf = 0x40_0000_0000u64;
    env.dev().memory().insert(buf, &[0u8; 128 + 256]).unwrap();
    let (mut a, mut scq) = qp_over_two_nops(&mut env, buf);
    // Nothing went wrong so far.
    assert!(!env
        .drain_eq()
        .iter()
        .any(|(t, _)| *t == event::WQ_CATAS_ERROR));
    // The buffer goes away; the doorbell record stays. The next WQE cannot be read.
    assert!(env.dev().memory().free(buf));
    let w = send_wqe(wqe::opcode::NOP, a.sq_pi, a.qpn, CE, 0, &[]);
    a.sq_pi = a.sq_pi.wrapping_add(1);
    env.ring_sq(&mut a, &w);
    assert!(env
        .drain_eq()
        .iter()
        .any(|(t, _)| *t == event::WQ_CATAS_ERROR));
    assert!(
        env.poll_cq(&mut scq).is_none(),
        "no CQE for an unreadable WQE"
    );
}

/// A loopback QP over a 4-WQEBB send ring in guest memory, two NOPs done ([`qp_over_two_nops`]).
fn small_ring(env: &mut Env) -> (Qp, Cq) {
    let buf = 0x40_0000_0000u64;
    env.dev().memory().insert(buf, &[0u8; 128 + 256]).unwrap();
    qp_over_two_nops(env, buf)
}

/// BlueFlame blocks compared and copies found different so far.
fn bf_stats(env: &Env) -> (u64, u64) {
    env.dev().with_hca(|h| h.blueflame_stats())
}

/// A signaled NOP at the QP's next SQ counter.
fn nop(qp: &Qp) -> Vec<u8> {
    send_wqe(wqe::opcode::NOP, qp.sq_pi, qp.qpn, CE, 0, &[])
}

/// True if a work queue catastrophic error event is among the events so far.
fn catastrophe(env: &mut Env) -> bool {
    env.drain_eq()
        .iter()
        .any(|(t, _)| *t == event::WQ_CATAS_ERROR)
}

/// Stores qwords `from..` of `w` (zero padded to 64 bytes) at `at`: the rest of a BlueFlame
/// copy whose first qwords arrived earlier.
fn store_rest(env: &Env, at: u64, w: &[u8], from: usize) {
    let mut padded = w.to_vec();
    padded.resize(64, 0);
    for (k, q) in padded.chunks(8).enumerate().skip(from) {
        env.dev()
            .write64(at + 8 * k as u64, u64::from_le_bytes(q.try_into().unwrap()));
    }
}

/// The order a threaded device can see a BlueFlame copy in, made deterministic: the copy's
/// doorbell (its first qword) runs every WQE the doorbell record announces, software sees
/// them complete and legitimately writes a new WQE into the first one's ring slot, and only
/// then does the rest of the copy arrive. The copy is compared with the WQE the device took
/// off the ring when its doorbell rang, not with the slot's new contents: no error.
#[test]
fn a_slot_reused_before_the_rest_of_its_copy_arrives() {
    let mut env = Env::new(InProcHca::deterministic(), 1);
    let (mut a, mut scq) = small_ring(&mut env);
    let before = bf_stats(&env);
    // Four NOPs fill the 4-WQEBB ring; the doorbell record announces all of them before the
    // first one's copy reaches the device.
    let first = nop(&a);
    env.write_send(&mut a, &first);
    for _ in 0..3 {
        let w = nop(&a);
        env.write_send(&mut a, &w);
    }
    env.write(a.dbr + 4, &(a.sq_pi as u32).to_be_bytes());
    // The first NOP's copy: its doorbell runs all four.
    let at = half_at(&a, 0);
    store(&env, at, &first, 1);
    for i in 0..4 {
        let c = env.poll_cq(&mut scq).expect("a CQE per NOP");
        assert_eq!(c.opcode(), cqe::opcode::REQ, "NOP {i}");
    }
    // Software reuses the first NOP's slot (it completed) for the next WQE ...
    let next = nop(&a);
    stage(&env, &mut a, &next);
    assert_ne!(next[..16], first[..16], "the slot now holds other bytes");
    // ... before the rest of the first NOP's copy arrives.
    store_rest(&env, at, &first, 1);
    assert_eq!(
        bf_stats(&env),
        (before.0 + 1, before.1),
        "the copy matched the WQE its doorbell ran"
    );
    assert!(!catastrophe(&mut env));
    // The QP still works: the new WQE's own copy runs it.
    store(&env, half_at(&a, 1), &next, 8);
    let c = env.poll_cq(&mut scq).expect("the next NOP completes");
    assert_eq!(c.opcode(), cqe::opcode::REQ);
    assert_eq!(bf_stats(&env), (before.0 + 2, before.1));
}

/// A copy still compares with what the device ran: a copy that differs from the WQE its
/// doorbell ran is a work queue catastrophic error even when the slot changed in between.
#[test]
fn a_stale_copy_is_an_error_even_after_its_slot_changed() {
    let mut env = Env::new(InProcHca::deterministic(), 1);
    let (mut a, mut scq) = small_ring(&mut env);
    let before = bf_stats(&env);
    let w = nop(&a);
    stage(&env, &mut a, &w);
    let at = half_at(&a, 0);
    store(&env, at, &w, 1);
    let c = env.poll_cq(&mut scq).expect("the NOP ran on its doorbell");
    assert_eq!(c.opcode(), cqe::opcode::REQ);
    // The rest of the copy carries a byte the WQE in memory did not have.
    let mut stale = w.clone();
    stale.resize(64, 0);
    stale[40] ^= 0xff;
    store_rest(&env, at, &stale, 1);
    assert_eq!(bf_stats(&env), (before.0 + 1, before.1 + 1));
    assert!(catastrophe(&mut env));
}

/// A copy whose WQE an earlier doorbell already ran (the doorbell record announced it): by
/// the time the copy arrives the WQE may have completed and its slot been reused, so the
/// model does not compare it (it runs nothing either); no error, nothing counted.
#[test]
fn a_copy_of_a_wqe_an_earlier_doorbell_ran_is_not_compared() {
    let mut env = Env::new(InProcHca::deterministic(), 1);
    let (mut a, mut scq) = small_ring(&mut env);
    let before = bf_stats(&env);
    // Two NOPs announced; the first one's doorbell runs both.
    let first = nop(&a);
    env.write_send(&mut a, &first);
    let second = nop(&a);
    env.write_send(&mut a, &second);
    env.write(a.dbr + 4, &(a.sq_pi as u32).to_be_bytes());
    store(&env, half_at(&a, 0), &first, 1);
    for _ in 0..2 {
        let c = env.poll_cq(&mut scq).expect("a CQE per NOP");
        assert_eq!(c.opcode(), cqe::opcode::REQ);
    }
    // Software fills the ring again, reusing the second NOP's slot last ...
    let mut last = Vec::new();
    for _ in 0..4 {
        last = nop(&a);
        env.write_send(&mut a, &last);
    }
    assert_ne!(last[..16], second[..16]);
    // ... before the second NOP's copy arrives. Its doorbell runs the four new NOPs.
    env.write(a.dbr + 4, &(a.sq_pi as u32).to_be_bytes());
    store(&env, half_at(&a, 1), &second, 8);
    for i in 0..4 {
        let c = env.poll_cq(&mut scq).expect("a CQE per new NOP");
        assert_eq!(c.opcode(), cqe::opcode::REQ, "new NOP {i}");
    }
    assert_eq!(bf_stats(&env), before, "nothing compared");
    assert!(!catastrophe(&mut env));
}
