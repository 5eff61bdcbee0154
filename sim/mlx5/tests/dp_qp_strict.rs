//! The model as strict as firmware on QP and WQE details (issue 7): atomics need an
//! `atomic_mode`, the send queue starts on a 64-byte block, a WQE's size fits its 6-bit `ds`.

#[path = "datapath_common/mod.rs"]
mod dp;
#[path = "raw/mod.rs"]
mod raw;

use dp::*;
use mlx5_prm::{cmd_status, cqe, qpc, wqe};
use mlx5_sim::InProcHca;

const CE: u8 = wqe::ctrl::CQ_UPDATE;

/// Two loopback QPs on one HCA; `b` (the responder) is connected with `atomic_mode`.
fn pair(atomic_mode: u32) -> (Env, Qp, Qp, Cq, Cq) {
    let mut env = Env::new(InProcHca::deterministic(), 1);
    let scq = env.cq(5);
    let rcq = env.cq(5);
    let a = env.qp(&scq, &rcq, 5, 4);
    let b = env.qp(&scq, &rcq, 5, 4);
    env.connect_local(&a, b.qpn);
    // b by hand: RST2INIT with rae = 1 and the given atomic_mode.
    let mut i = env.rst2init_input(b.qpn);
    raw::set(&mut i, Env::qpc_field(qpc::ATOMIC_MODE), atomic_mode);
    env.raw.exec(&i, 16).ok();
    let (gid, mac) = (env.gid, env.mac);
    let i = env.init2rtr_input(b.qpn, a.qpn, gid, mac, 0x100, 1);
    env.raw.exec(&i, 16).ok();
    let i = env.rtr2rts_input(b.qpn, 0x100, 7, 7, 14);
    env.raw.exec(&i, 16).ok();
    (env, a, b, scq, rcq)
}

fn fetch_add(env: &mut Env, a: &mut Qp, scq: &mut Cq) -> Cqe {
    let remote = env.alloc(4096);
    let local = env.alloc(4096);
    let rkey = env.mkey(remote, 4096, A | LW);
    let lkey = env.mkey(local, 4096, LW);
    env.write(remote, &5u64.to_be_bytes());
    env.post_send(
        a,
        wqe::opcode::ATOMIC_FA,
        CE,
        0,
        &[
            &raddr_seg(remote, rkey),
            &atomic_seg(1, 0),
            &dseg(8, lkey, local),
        ],
    );
    let c = env.poll_cq(scq).expect("atomic completion");
    // Unchanged memory unless the atomic executed.
    if !c.is_error() {
        assert_eq!(env.read(remote, 8), 6u64.to_be_bytes());
    } else {
        assert_eq!(env.read(remote, 8), 5u64.to_be_bytes());
    }
    c
}

#[test]
fn atomics_on_a_qp_without_atomic_mode_get_an_invalid_request_nak() {
    let (mut env, mut a, _b, mut scq, _rcq) = pair(0);
    let c = fetch_add(&mut env, &mut a, &mut scq);
    assert!(c.is_error(), "atomic_mode 0 (NONE) must refuse the atomic");
    assert_eq!(c.syndrome(), cqe::syndrome::REMOTE_INVAL_REQ_ERR);
}

#[test]
fn atomics_with_an_undefined_atomic_mode_are_refused() {
    // 9 and above name no size the model (or Linux's atomic_size_to_mode) knows.
    let (mut env, mut a, _b, mut scq, _rcq) = pair(9);
    let c = fetch_add(&mut env, &mut a, &mut scq);
    assert_eq!(c.syndrome(), cqe::syndrome::REMOTE_INVAL_REQ_ERR);
}

#[test]
fn atomics_run_with_ib_compliant_and_8_byte_modes() {
    for mode in [1, 3] {
        let (mut env, mut a, _b, mut scq, _rcq) = pair(mode);
        let c = fetch_add(&mut env, &mut a, &mut scq);
        assert!(!c.is_error(), "mode {mode}: {:?}", c.syndrome());
    }
}

#[test]
fn a_send_queue_not_on_a_64_byte_block_is_refused() {
    let mut env = Env::new(InProcHca::deterministic(), 1);
    let scq = env.cq(4);
    let rcq = env.cq(4);
    let buf = env.alloc(8192);
    let dbr = env.alloc(64);
    // One receive WQE of 16 bytes: the send queue would start at offset 16.
    let i = env.qp_input(env.pd, scq.cqn, rcq.cqn, 4, 0, 0, buf, dbr);
    env.raw.exec(&i, 16).fails(
        cmd_status::BAD_PARAM_ERR,
        mlx5_sim::objects::qp::syndrome::SQ_MISALIGNED,
    );
    // Two of 32 bytes: offset 64, taken.
    let i = env.qp_input(env.pd, scq.cqn, rcq.cqn, 4, 1, 1, buf, dbr);
    env.raw.exec(&i, 16).ok();
}

#[test]
fn a_wqe_whose_ds_spills_into_the_reserved_bits_completes_in_error() {
    let mut env = Env::new(InProcHca::deterministic(), 1);
    let mut scq = env.cq(5);
    let rcq = env.cq(5);
    let mut a = env.qp(&scq, &rcq, 6, 4);
    let b = env.qp(&scq, &rcq, 6, 4);
    env.connect_local(&a, b.qpn);
    env.connect_local(&b, a.qpn);
    let dst = env.alloc(4096);
    let rkey = env.mkey(dst, 4096, RW | LW);
    // An RDMA WRITE of 64 units (ctrl + raddr + 62 units of inline data): 1024 bytes.
    let data = vec![0x5a; 62 * 16 - 4];
    let idx = a.sq_pi;
    let mut w = send_wqe(
        wqe::opcode::RDMA_WRITE,
        idx,
        a.qpn,
        CE,
        0,
        &[&raddr_seg(dst, rkey), &inline_seg(&data)],
    );
    assert_eq!(w.len(), 1024);
    // qpn_ds with ds = 64 unmasked: bit 6 set, bits 5:0 zero.
    w[4..8].copy_from_slice(&((a.qpn << 8) | 64).to_be_bytes());
    env.write_send(&mut a, &w);
    env.ring_sq(&mut a, &w);
    // A NOP after it: flushed as the next WQE (the oversized one is stepped over whole).
    let nop_idx = a.sq_pi;
    let nop = send_wqe(wqe::opcode::NOP, nop_idx, a.qpn, CE, 0, &[]);
    env.write_send(&mut a, &nop);
    env.ring_sq(&mut a, &nop);
    let c = env.poll_cq(&mut scq).expect("error completion");
    assert!(c.is_error());
    assert_eq!(c.syndrome(), cqe::syndrome::LOCAL_QP_OP_ERR);
    assert_eq!(c.wqe_counter(), idx);
    let f = env.poll_cq(&mut scq).expect("flush of the NOP");
    assert_eq!(
        (f.syndrome(), f.wqe_counter()),
        (cqe::syndrome::WR_FLUSH_ERR, nop_idx)
    );
    assert!(
        env.poll_cq(&mut scq).is_none(),
        "no CQE for the blocks inside the WQE"
    );
    assert!(env.read(dst, 16).iter().all(|&b| b == 0), "nothing written");
    assert_eq!(env.qp_state(a.qpn), mlx5_prm::qp::state::ERR as u32);
}
