//! Loopback data path through raw PRM commands and raw WQEs: two RC QPs on one HCA.

#[path = "datapath_common/mod.rs"]
mod dp;
#[path = "raw/mod.rs"]
mod raw;

use dp::*;
use mlx5_prm::{cqe, event, qp, wqe};
use mlx5_sim::InProcHca;

const CE: u8 = wqe::ctrl::CQ_UPDATE;
const SE: u8 = wqe::ctrl::SOLICITED;

/// Two connected QPs (a → b, b → a) with their own send and receive CQs.
#[allow(dead_code)]
struct Pair {
    env: Env,
    a: Qp,
    b: Qp,
    a_scq: Cq,
    a_rcq: Cq,
    b_scq: Cq,
    b_rcq: Cq,
}

fn pair_with(rnr_retry: u32, min_rnr: u32, retry: u32, timeout: u32) -> Pair {
    let mut env = Env::new(InProcHca::deterministic(), 1);
    let a_scq = env.cq(6);
    let a_rcq = env.cq(6);
    let b_scq = env.cq(6);
    let b_rcq = env.cq(6);
    let a = env.qp(&a_scq, &a_rcq, 6, 5);
    let b = env.qp(&b_scq, &b_rcq, 6, 5);
    let (gid, mac) = (env.gid, env.mac);
    env.connect_with(&a, b.qpn, gid, mac, min_rnr, retry, rnr_retry, timeout);
    env.connect_with(&b, a.qpn, gid, mac, min_rnr, retry, rnr_retry, timeout);
    Pair {
        env,
        a,
        b,
        a_scq,
        a_rcq,
        b_scq,
        b_rcq,
    }
}

fn pair() -> Pair {
    pair_with(7, 1, 7, 14)
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn rdma_write_moves_every_byte_and_completes() {
    let mut p = pair();
    let src = p.env.alloc(3 * 4096);
    let dst = p.env.alloc(3 * 4096);
    let data = pattern(10000, 7);
    p.env.write(src + 100, &data);
    let lkey = p.env.mkey(src, 3 * 4096, LR);
    let rkey = p.env.mkey(dst, 3 * 4096, LR | LW | RW);
    let idx = p.env.post_send(
        &mut p.a,
        wqe::opcode::RDMA_WRITE,
        CE,
        0,
        &[&raddr_seg(dst + 50, rkey), &dseg(10000, lkey, src + 100)],
    );
    let c = p
        .env
        .poll_cq(&mut p.a_scq)
        .expect("signaled write completes");
    assert_eq!(c.opcode(), cqe::opcode::REQ);
    assert_eq!(c.wqe_opcode(), wqe::opcode::RDMA_WRITE);
    assert_eq!(c.qpn(), p.a.qpn);
    assert_eq!(c.wqe_counter(), idx);
    assert_eq!(c.user_index(), 0x77);
    // Every byte, and nothing around it.
    let got = p.env.read(dst, 3 * 4096);
    assert!(got[..50].iter().all(|&b| b == 0));
    assert_eq!(&got[50..10050], &data[..]);
    assert!(got[10050..].iter().all(|&b| b == 0));
    // No responder CQE for a plain write.
    assert!(p.env.poll_cq(&mut p.b_rcq).is_none());
    assert_eq!(p.env.qp_state(p.a.qpn), qp::state::RTS as u32);
}

#[test]
fn rdma_read_fills_the_local_buffer() {
    let mut p = pair();
    let remote = p.env.alloc(8192);
    let local = p.env.alloc(8192);
    let data = pattern(6000, 3);
    p.env.write(remote + 1000, &data);
    let rkey = p.env.mkey(remote, 8192, LR | RR);
    let lkey = p.env.mkey(local, 8192, LR | LW);
    // Two scatter entries on the local side.
    p.env.post_send(
        &mut p.a,
        wqe::opcode::RDMA_READ,
        CE,
        0,
        &[
            &raddr_seg(remote + 1000, rkey),
            &dseg(2000, lkey, local),
            &dseg(4000, lkey, local + 4096),
        ],
    );
    let c = p.env.poll_cq(&mut p.a_scq).expect("read completes");
    assert_eq!(
        (c.opcode(), c.wqe_opcode()),
        (cqe::opcode::REQ, wqe::opcode::RDMA_READ)
    );
    assert_eq!(c.byte_cnt(), 6000);
    assert_eq!(p.env.read(local, 2000), data[..2000]);
    assert_eq!(p.env.read(local + 4096, 4000), data[2000..]);
    assert!(p.env.read(local + 2000, 2096).iter().all(|&b| b == 0));
}

#[test]
fn send_recv_scatters_and_reports_both_sides() {
    let mut p = pair();
    let src = p.env.alloc(4096);
    let dst = p.env.alloc(4096);
    let data = pattern(300, 9);
    p.env.write(src, &data);
    let lkey = p.env.mkey(src, 4096, LR);
    let rkey = p.env.mkey(dst, 4096, LR | LW);
    p.env
        .post_recv(&mut p.b, &[(100, rkey, dst), (1000, rkey, dst + 2048)]);
    let idx = p.env.post_send(
        &mut p.a,
        wqe::opcode::SEND,
        CE,
        0,
        &[&dseg(120, lkey, src), &dseg(180, lkey, src + 120)],
    );
    let r = p.env.poll_cq(&mut p.b_rcq).expect("receive completes");
    assert_eq!(r.opcode(), cqe::opcode::RESP_SEND);
    assert_eq!(r.byte_cnt(), 300);
    assert_eq!(r.qpn(), p.b.qpn);
    assert_eq!(r.remote_qpn(), p.a.qpn);
    assert_eq!(r.wqe_counter(), 0);
    assert!(!r.solicited());
    assert_eq!(p.env.read(dst, 100), data[..100]);
    assert_eq!(p.env.read(dst + 2048, 200), data[100..]);
    assert!(p.env.read(dst + 100, 1948).iter().all(|&b| b == 0));
    let s = p.env.poll_cq(&mut p.a_scq).expect("send completes");
    assert_eq!(
        (s.opcode(), s.wqe_opcode(), s.wqe_counter()),
        (cqe::opcode::REQ, wqe::opcode::SEND, idx)
    );
}

#[test]
fn send_with_immediate_and_solicited_event() {
    let mut p = pair();
    let src = p.env.alloc(4096);
    let dst = p.env.alloc(4096);
    let lkey = p.env.mkey(src, 4096, LR);
    let rkey = p.env.mkey(dst, 4096, LW);
    p.env.write(src, b"hello");
    p.env.post_recv(&mut p.b, &[(64, rkey, dst)]);
    p.env.post_send(
        &mut p.a,
        wqe::opcode::SEND_IMM,
        CE | SE,
        0x1234_5678,
        &[&dseg(5, lkey, src)],
    );
    let r = p.env.poll_cq(&mut p.b_rcq).expect("receive");
    assert_eq!(r.opcode(), cqe::opcode::RESP_SEND_IMM);
    assert_eq!(r.imm(), 0x1234_5678);
    assert!(r.solicited());
    assert_eq!(r.byte_cnt(), 5);
    assert_eq!(p.env.read(dst, 5), b"hello");
}

#[test]
fn inline_send_spanning_two_basic_blocks() {
    let mut p = pair();
    let dst = p.env.alloc(4096);
    let rkey = p.env.mkey(dst, 4096, LW);
    let data = pattern(90, 1);
    p.env.post_recv(&mut p.b, &[(256, rkey, dst)]);
    let seg = inline_seg(&data);
    p.env.post_send(&mut p.a, wqe::opcode::SEND, CE, 0, &[&seg]);
    assert_eq!(p.a.sq_pi, 2, "a 16 + 96-byte WQE takes two WQEBBs");
    let r = p.env.poll_cq(&mut p.b_rcq).expect("receive");
    assert_eq!(r.byte_cnt(), 90);
    assert_eq!(p.env.read(dst, 90), data);
    assert!(p.env.poll_cq(&mut p.a_scq).is_some());
}

#[test]
fn rdma_write_with_immediate_consumes_a_receive() {
    let mut p = pair();
    let src = p.env.alloc(4096);
    let dst = p.env.alloc(4096);
    let rbuf = p.env.alloc(4096);
    let lkey = p.env.mkey(src, 4096, LR);
    let rkey = p.env.mkey(dst, 4096, RW | LW);
    let rbuf_key = p.env.mkey(rbuf, 4096, LW);
    p.env.write(src, &pattern(64, 5));
    p.env.post_recv(&mut p.b, &[(16, rbuf_key, rbuf)]);
    p.env.post_send(
        &mut p.a,
        wqe::opcode::RDMA_WRITE_IMM,
        CE,
        0xcafe_f00d,
        &[&raddr_seg(dst + 8, rkey), &dseg(64, lkey, src)],
    );
    let r = p.env.poll_cq(&mut p.b_rcq).expect("write-imm completion");
    assert_eq!(r.opcode(), cqe::opcode::RESP_WR_IMM);
    assert_eq!(r.imm(), 0xcafe_f00d);
    assert_eq!(r.byte_cnt(), 64);
    assert_eq!(p.env.read(dst + 8, 64), pattern(64, 5));
    assert!(
        p.env.read(rbuf, 64).iter().all(|&b| b == 0),
        "scatter list unused"
    );
    let s = p.env.poll_cq(&mut p.a_scq).unwrap();
    assert_eq!(s.wqe_opcode(), wqe::opcode::RDMA_WRITE_IMM);
}

#[test]
fn atomics_compare_swap_and_fetch_add() {
    let mut p = pair();
    let remote = p.env.alloc(4096);
    let local = p.env.alloc(4096);
    let rkey = p.env.mkey(remote, 4096, A | LW);
    let lkey = p.env.mkey(local, 4096, LW);
    // Default (current) mode: big-endian.
    p.env.write(remote + 8, &100u64.to_be_bytes());
    p.env.post_send(
        &mut p.a,
        wqe::opcode::ATOMIC_CS,
        CE,
        0,
        &[
            &raddr_seg(remote + 8, rkey),
            &atomic_seg(555, 100),
            &dseg(8, lkey, local),
        ],
    );
    let c = p.env.poll_cq(&mut p.a_scq).unwrap();
    assert_eq!(
        (c.opcode(), c.wqe_opcode(), c.byte_cnt()),
        (cqe::opcode::REQ, wqe::opcode::ATOMIC_CS, 8)
    );
    assert_eq!(p.env.read(remote + 8, 8), 555u64.to_be_bytes());
    assert_eq!(p.env.read(local, 8), 100u64.to_be_bytes());
    // Compare fails: memory unchanged, original returned.
    p.env.post_send(
        &mut p.a,
        wqe::opcode::ATOMIC_CS,
        CE,
        0,
        &[
            &raddr_seg(remote + 8, rkey),
            &atomic_seg(1, 2),
            &dseg(8, lkey, local + 8),
        ],
    );
    p.env.poll_cq(&mut p.a_scq).unwrap();
    assert_eq!(p.env.read(remote + 8, 8), 555u64.to_be_bytes());
    assert_eq!(p.env.read(local + 8, 8), 555u64.to_be_bytes());
    // Fetch-and-add.
    p.env.post_send(
        &mut p.a,
        wqe::opcode::ATOMIC_FA,
        CE,
        0,
        &[
            &raddr_seg(remote + 8, rkey),
            &atomic_seg(45, 0),
            &dseg(8, lkey, local + 16),
        ],
    );
    let c = p.env.poll_cq(&mut p.a_scq).unwrap();
    assert_eq!(c.wqe_opcode(), wqe::opcode::ATOMIC_FA);
    assert_eq!(p.env.read(remote + 8, 8), 600u64.to_be_bytes());
    assert_eq!(p.env.read(local + 16, 8), 555u64.to_be_bytes());
}

#[test]
fn atomics_in_host_endian_mode() {
    // Host-endian mode (what Linux selects when supported): the 8 bytes are little-endian.
    let mut env = Env::with_atomic_mode(InProcHca::deterministic(), 1, Some(1));
    let mut scq = env.cq(4);
    let rcq = env.cq(4);
    let mut a = env.qp(&scq, &rcq, 4, 4);
    let b = env.qp(&scq, &rcq, 4, 4);
    env.connect_local(&a, b.qpn);
    env.connect_local(&b, a.qpn);
    let remote = env.alloc(4096);
    let local = env.alloc(4096);
    let rkey = env.mkey(remote, 4096, A | LW);
    let lkey = env.mkey(local, 4096, LW);
    env.write(remote + 16, &7u64.to_le_bytes());
    env.post_send(
        &mut a,
        wqe::opcode::ATOMIC_FA,
        CE,
        0,
        &[
            &raddr_seg(remote + 16, rkey),
            &atomic_seg(3, 0),
            &dseg(8, lkey, local + 24),
        ],
    );
    env.poll_cq(&mut scq).unwrap();
    assert_eq!(env.read(remote + 16, 8), 10u64.to_le_bytes());
    assert_eq!(env.read(local + 24, 8), 7u64.to_le_bytes());
    env.write(remote, &9u64.to_le_bytes());
    env.post_send(
        &mut a,
        wqe::opcode::ATOMIC_CS,
        CE,
        0,
        &[
            &raddr_seg(remote, rkey),
            &atomic_seg(0x1122, 9),
            &dseg(8, lkey, local),
        ],
    );
    env.poll_cq(&mut scq).unwrap();
    assert_eq!(env.read(remote, 8), 0x1122u64.to_le_bytes());
    assert_eq!(env.read(local, 8), 9u64.to_le_bytes());
}

#[test]
fn misaligned_atomic_is_an_invalid_request() {
    let mut p = pair();
    let remote = p.env.alloc(4096);
    let local = p.env.alloc(4096);
    let rkey = p.env.mkey(remote, 4096, A | LW);
    let lkey = p.env.mkey(local, 4096, LW);
    p.env.post_send(
        &mut p.a,
        wqe::opcode::ATOMIC_FA,
        0,
        0,
        &[
            &raddr_seg(remote + 4, rkey),
            &atomic_seg(1, 0),
            &dseg(8, lkey, local),
        ],
    );
    let c = p.env.poll_cq(&mut p.a_scq).expect("errors always complete");
    assert_eq!(c.opcode(), cqe::opcode::REQ_ERR);
    assert_eq!(c.syndrome(), cqe::syndrome::REMOTE_INVAL_REQ_ERR);
    assert!(p.env.read(remote, 16).iter().all(|&b| b == 0));
    assert_eq!(p.env.qp_state(p.a.qpn), qp::state::ERR as u32);
    assert_eq!(p.env.qp_state(p.b.qpn), qp::state::ERR as u32);
    let ev = p.env.drain_eq();
    assert!(ev.iter().any(|(t, d)| *t == event::WQ_INVAL_REQ_ERROR
        && u32::from_be_bytes(d[24..28].try_into().unwrap()) & 0xff_ffff == p.b.qpn));
}

#[test]
fn nop_and_signaled_versus_unsignaled() {
    let mut p = pair();
    let src = p.env.alloc(4096);
    let dst = p.env.alloc(4096);
    let lkey = p.env.mkey(src, 4096, LR);
    let rkey = p.env.mkey(dst, 4096, RW);
    let w = |p: &mut Pair, ce: u8| {
        let (r, d) = (raddr_seg(dst, rkey), dseg(8, lkey, src));
        p.env
            .post_send(&mut p.a, wqe::opcode::RDMA_WRITE, ce, 0, &[&r, &d])
    };
    w(&mut p, 0);
    let i1 = w(&mut p, CE);
    w(&mut p, 0);
    let nop = p.env.post_send(&mut p.a, wqe::opcode::NOP, CE, 0, &[]);
    let c1 = p.env.poll_cq(&mut p.a_scq).unwrap();
    assert_eq!(
        (c1.wqe_counter(), c1.wqe_opcode()),
        (i1, wqe::opcode::RDMA_WRITE)
    );
    let c2 = p.env.poll_cq(&mut p.a_scq).unwrap();
    assert_eq!((c2.wqe_counter(), c2.wqe_opcode()), (nop, wqe::opcode::NOP));
    assert!(
        p.env.poll_cq(&mut p.a_scq).is_none(),
        "unsignaled WQEs leave no CQE"
    );
}

#[test]
fn rnr_without_retries_fails_and_flushes() {
    let mut p = pair_with(0, 1, 7, 14);
    let src = p.env.alloc(4096);
    let lkey = p.env.mkey(src, 4096, LR);
    let rbuf = p.env.alloc(4096);
    let rkey = p.env.mkey(rbuf, 4096, LW);
    p.env
        .post_send(&mut p.a, wqe::opcode::SEND, 0, 0, &[&dseg(16, lkey, src)]);
    let c = p
        .env
        .poll_cq(&mut p.a_scq)
        .expect("RNR error completes at once");
    assert_eq!(c.opcode(), cqe::opcode::REQ_ERR);
    assert_eq!(c.syndrome(), cqe::syndrome::RNR_RETRY_EXC_ERR);
    assert_eq!(p.env.qp_state(p.a.qpn), qp::state::ERR as u32);
    // The responder is fine; the requester's later work and its receives are flushed.
    assert_eq!(p.env.qp_state(p.b.qpn), qp::state::RTS as u32);
    let idx = p
        .env
        .post_send(&mut p.a, wqe::opcode::SEND, CE, 0, &[&dseg(16, lkey, src)]);
    let f = p.env.poll_cq(&mut p.a_scq).expect("flush");
    assert_eq!(
        (f.opcode(), f.syndrome(), f.wqe_counter()),
        (cqe::opcode::REQ_ERR, cqe::syndrome::WR_FLUSH_ERR, idx)
    );
    p.env.post_recv(&mut p.a, &[(16, rkey, rbuf)]);
    p.env.dev().poll();
    let f = p.env.poll_cq(&mut p.a_rcq).expect("receive flush");
    assert_eq!(
        (f.opcode(), f.syndrome()),
        (cqe::opcode::RESP_ERR, cqe::syndrome::WR_FLUSH_ERR)
    );
}

#[test]
fn rnr_retry_succeeds_once_a_receive_is_posted() {
    let mut p = pair_with(7, 1, 7, 14);
    let src = p.env.alloc(4096);
    let dst = p.env.alloc(4096);
    let lkey = p.env.mkey(src, 4096, LR);
    let rkey = p.env.mkey(dst, 4096, LW);
    p.env.write(src, b"late");
    p.env
        .post_send(&mut p.a, wqe::opcode::SEND, CE, 0, &[&dseg(4, lkey, src)]);
    // Retried (7 = forever) while nothing is posted.
    for _ in 0..20 {
        std::thread::sleep(std::time::Duration::from_micros(50));
        p.env.dev().poll();
        assert!(p.env.poll_cq(&mut p.a_scq).is_none());
    }
    p.env.post_recv(&mut p.b, &[(64, rkey, dst)]);
    let dev = p.env.dev().clone();
    let c = p.env.wait_cq(&mut p.a_scq, &[&dev]);
    assert_eq!(c.opcode(), cqe::opcode::REQ);
    let r = p.env.poll_cq(&mut p.b_rcq).unwrap();
    assert_eq!(r.byte_cnt(), 4);
    assert_eq!(p.env.read(dst, 4), b"late");
}

#[test]
fn rnr_retry_count_is_honoured() {
    let mut p = pair_with(2, 1, 7, 14);
    let src = p.env.alloc(4096);
    let lkey = p.env.mkey(src, 4096, LR);
    p.env
        .post_send(&mut p.a, wqe::opcode::SEND, CE, 0, &[&dseg(4, lkey, src)]);
    let dev = p.env.dev().clone();
    let c = p.env.wait_cq(&mut p.a_scq, &[&dev]);
    assert_eq!(c.syndrome(), cqe::syndrome::RNR_RETRY_EXC_ERR);
}

#[test]
fn out_of_bounds_rdma_write_touches_nothing() {
    let mut p = pair();
    let src = p.env.alloc(8192);
    let dst = p.env.alloc(8192);
    let lkey = p.env.mkey(src, 8192, LR);
    p.env.write(src, &pattern(8192, 4));
    // The rkey covers [dst + 1024, dst + 5120).
    let rkey = p.env.mkey(dst + 1024, 4096, RW);
    p.env.post_recv(&mut p.b, &[(64, rkey, dst)]); // to be flushed
    p.env.post_send(
        &mut p.a,
        wqe::opcode::RDMA_WRITE,
        CE,
        0,
        &[&raddr_seg(dst + 5000, rkey), &dseg(200, lkey, src)],
    );
    let c = p.env.poll_cq(&mut p.a_scq).unwrap();
    assert_eq!(c.opcode(), cqe::opcode::REQ_ERR);
    assert_eq!(c.syndrome(), cqe::syndrome::REMOTE_ACCESS_ERR);
    assert!(
        p.env.read(dst, 8192).iter().all(|&b| b == 0),
        "not a byte written"
    );
    assert_eq!(p.env.qp_state(p.b.qpn), qp::state::ERR as u32);
    let ev = p.env.drain_eq();
    assert!(ev.iter().any(|(t, _)| *t == event::WQ_ACCESS_ERROR));
    let f = p.env.poll_cq(&mut p.b_rcq).expect("responder RQ flushed");
    assert_eq!(f.syndrome(), cqe::syndrome::WR_FLUSH_ERR);
}

#[test]
fn rkey_faults_are_remote_access_errors() {
    for case in 0..3 {
        let mut p = pair();
        let src = p.env.alloc(4096);
        let dst = p.env.alloc(4096);
        let lkey = p.env.mkey(src, 4096, LR);
        let rkey = match case {
            0 => p.env.mkey(dst, 4096, RR),       // no remote write
            1 => p.env.mkey(dst, 4096, RW) ^ 0x1, // wrong variant
            _ => {
                let pd2 = p.env.alloc_pd();
                p.env.mkey_in_pd(pd2, dst, 4096, RW) // other PD
            }
        };
        p.env.post_send(
            &mut p.a,
            wqe::opcode::RDMA_WRITE,
            CE,
            0,
            &[&raddr_seg(dst, rkey), &dseg(64, lkey, src)],
        );
        let c = p.env.poll_cq(&mut p.a_scq).unwrap();
        assert_eq!(
            c.syndrome(),
            cqe::syndrome::REMOTE_ACCESS_ERR,
            "case {case}"
        );
        assert!(p.env.read(dst, 4096).iter().all(|&b| b == 0));
    }
}

#[test]
fn write_with_immediate_rkey_fault_reports_local_access_error_on_the_responder() {
    let mut p = pair();
    let src = p.env.alloc(4096);
    let dst = p.env.alloc(4096);
    let rb = p.env.alloc(4096);
    let lkey = p.env.mkey(src, 4096, LR);
    let rkey = p.env.mkey(dst, 4096, RR);
    let rbk = p.env.mkey(rb, 4096, LW);
    p.env.post_recv(&mut p.b, &[(64, rbk, rb)]);
    p.env.post_send(
        &mut p.a,
        wqe::opcode::RDMA_WRITE_IMM,
        CE,
        1,
        &[&raddr_seg(dst, rkey), &dseg(64, lkey, src)],
    );
    let r = p.env.poll_cq(&mut p.b_rcq).unwrap();
    assert_eq!(
        (r.opcode(), r.syndrome()),
        (cqe::opcode::RESP_ERR, cqe::syndrome::LOCAL_ACCESS_ERR)
    );
    let c = p.env.poll_cq(&mut p.a_scq).unwrap();
    assert_eq!(c.syndrome(), cqe::syndrome::REMOTE_ACCESS_ERR);
}

#[test]
fn receive_too_small_is_a_local_length_error() {
    let mut p = pair();
    let src = p.env.alloc(4096);
    let dst = p.env.alloc(4096);
    let lkey = p.env.mkey(src, 4096, LR);
    let rkey = p.env.mkey(dst, 4096, LW);
    p.env.post_recv(&mut p.b, &[(32, rkey, dst)]);
    p.env
        .post_send(&mut p.a, wqe::opcode::SEND, CE, 0, &[&dseg(33, lkey, src)]);
    let r = p.env.poll_cq(&mut p.b_rcq).unwrap();
    assert_eq!(
        (r.opcode(), r.syndrome()),
        (cqe::opcode::RESP_ERR, cqe::syndrome::LOCAL_LENGTH_ERR)
    );
    let c = p.env.poll_cq(&mut p.a_scq).unwrap();
    assert_eq!(c.syndrome(), cqe::syndrome::REMOTE_INVAL_REQ_ERR);
    assert!(p.env.read(dst, 64).iter().all(|&b| b == 0));
}

#[test]
fn local_protection_errors_then_flush() {
    // Other PD, destroyed key, range beyond the region, wrong variant.
    for case in 0..4 {
        let mut p = pair();
        let src = p.env.alloc(4096);
        let dst = p.env.alloc(4096);
        let rkey = p.env.mkey(dst, 4096, RW);
        let pd2 = p.env.alloc_pd();
        let (key, addr) = match case {
            0 => (p.env.mkey_in_pd(pd2, src, 4096, LR), src),
            1 => {
                let d = p.env.mkey(src, 4096, LR);
                p.env.destroy_mkey(d).ok();
                (d, src)
            }
            2 => (p.env.mkey(src, 4096, LR), src + 4090),
            _ => (p.env.mkey(src, 4096, LR) ^ 0x3, src),
        };
        // An unsignaled bad WQE, then a good one behind it.
        p.env.post_send(
            &mut p.a,
            wqe::opcode::RDMA_WRITE,
            0,
            0,
            &[&raddr_seg(dst, rkey), &dseg(8, key, addr)],
        );
        let c = p
            .env
            .poll_cq(&mut p.a_scq)
            .expect("error CQE even unsignaled");
        assert_eq!(
            (c.opcode(), c.syndrome()),
            (cqe::opcode::REQ_ERR, cqe::syndrome::LOCAL_PROT_ERR),
            "case {case}"
        );
        assert_eq!(p.env.qp_state(p.a.qpn), qp::state::ERR as u32);
        let good = p.env.mkey(src, 4096, LR);
        p.env.post_send(
            &mut p.a,
            wqe::opcode::RDMA_WRITE,
            CE,
            0,
            &[&raddr_seg(dst, rkey), &dseg(8, good, src)],
        );
        let f = p.env.poll_cq(&mut p.a_scq).unwrap();
        assert_eq!(f.syndrome(), cqe::syndrome::WR_FLUSH_ERR);
        assert!(p.env.read(dst, 64).iter().all(|&b| b == 0));
        // The responder never saw anything.
        assert_eq!(p.env.qp_state(p.b.qpn), qp::state::RTS as u32);
    }
}

#[test]
fn modify_to_error_flushes_posted_receives() {
    let mut p = pair();
    let buf = p.env.alloc(4096);
    let key = p.env.mkey(buf, 4096, LW);
    for _ in 0..3 {
        p.env.post_recv(&mut p.b, &[(64, key, buf)]);
    }
    p.env.modify_simple(mlx5_prm::opcode::QP_2ERR, p.b.qpn).ok();
    for i in 0..3u16 {
        let f = p.env.poll_cq(&mut p.b_rcq).expect("flush CQE per receive");
        assert_eq!(
            (f.opcode(), f.syndrome(), f.wqe_counter()),
            (cqe::opcode::RESP_ERR, cqe::syndrome::WR_FLUSH_ERR, i)
        );
    }
    assert!(p.env.poll_cq(&mut p.b_rcq).is_none());
}

#[test]
fn transport_retries_then_retry_exceeded() {
    let mut env = Env::new(InProcHca::deterministic(), 1);
    let scq = env.cq(4);
    let rcq = env.cq(4);
    let a = env.qp(&scq, &rcq, 4, 4);
    let (gid, mac) = (env.gid, env.mac);
    // Connected to a QPN that does not exist: requests vanish, no ACK ever comes.
    env.connect_with(&a, 0xabcd, gid, mac, 1, 2, 7, 1);
    let mut a = a;
    let mut scq = scq;
    let src = env.alloc(4096);
    let lkey = env.mkey(src, 4096, LR);
    env.post_send(&mut a, wqe::opcode::SEND, CE, 0, &[&dseg(4, lkey, src)]);
    assert!(env.poll_cq(&mut scq).is_none());
    let dev = env.dev().clone();
    let c = env.wait_cq(&mut scq, &[&dev]);
    assert_eq!(
        (c.opcode(), c.syndrome()),
        (cqe::opcode::REQ_ERR, cqe::syndrome::TRANSPORT_RETRY_EXC_ERR)
    );
}

#[test]
fn completion_event_on_an_armed_cq() {
    let mut p = pair();
    let src = p.env.alloc(4096);
    let dst = p.env.alloc(4096);
    let lkey = p.env.mkey(src, 4096, LR);
    let rkey = p.env.mkey(dst, 4096, RW);
    p.env.drain_eq();
    // Arm a's send CQ (REQ_NOT, ci 0).
    let v = (mlx5_prm::cq_db::arm_value(0, 0, 0) as u64) << 32 | p.a_scq.cqn as u64;
    let off = u64::from(p.env.uar) * 4096 + 0x20;
    p.env
        .dev()
        .write64(off, u64::from_le_bytes(v.to_be_bytes()));
    p.env.post_send(
        &mut p.a,
        wqe::opcode::RDMA_WRITE,
        CE,
        0,
        &[&raddr_seg(dst, rkey), &dseg(8, lkey, src)],
    );
    let ev = p.env.drain_eq();
    let comps: Vec<_> = ev.iter().filter(|(t, _)| *t == event::COMP).collect();
    assert_eq!(comps.len(), 1);
    let cqn = u32::from_be_bytes(comps[0].1[24..28].try_into().unwrap()) & 0xff_ffff;
    assert_eq!(cqn, p.a_scq.cqn);
    // Disarmed now: the next completion posts no event.
    p.env.post_send(
        &mut p.a,
        wqe::opcode::RDMA_WRITE,
        CE,
        0,
        &[&raddr_seg(dst, rkey), &dseg(8, lkey, src)],
    );
    assert!(p.env.drain_eq().iter().all(|(t, _)| *t != event::COMP));
}

#[test]
fn blueflame_copy_rings_once() {
    let mut p = pair();
    let src = p.env.alloc(4096);
    let dst = p.env.alloc(4096);
    let lkey = p.env.mkey(src, 4096, LR);
    let rkey = p.env.mkey(dst, 4096, RW);
    p.env.write(src, &pattern(16, 2));
    let w = send_wqe(
        wqe::opcode::RDMA_WRITE,
        p.a.sq_pi,
        p.a.qpn,
        CE,
        0,
        &[&raddr_seg(dst, rkey), &dseg(16, lkey, src)],
    );
    p.env.write_send(&mut p.a, &w);
    p.env.write(p.a.dbr + 4, &(p.a.sq_pi as u32).to_be_bytes());
    // The whole 64-byte WQE copied into the BlueFlame register as 8-byte stores.
    let base = u64::from(p.env.uar) * 4096 + 0x800;
    let mut padded = w.clone();
    padded.resize(64, 0);
    for (k, chunk) in padded.chunks(8).enumerate() {
        p.env.dev().write64(
            base + 8 * k as u64,
            u64::from_le_bytes(chunk.try_into().unwrap()),
        );
    }
    let c = p.env.poll_cq(&mut p.a_scq).unwrap();
    assert_eq!(c.opcode(), cqe::opcode::REQ);
    assert!(
        p.env.poll_cq(&mut p.a_scq).is_none(),
        "executed exactly once"
    );
    assert_eq!(p.env.read(dst, 16), pattern(16, 2));
}

#[test]
fn sq_ring_wraps_with_multi_block_wqes() {
    let mut env = Env::new(InProcHca::deterministic(), 1);
    let scq = env.cq(6);
    let rcq = env.cq(6);
    let mut a = env.qp(&scq, &rcq, 2, 5); // 4 WQEBBs
    let mut b = env.qp(&scq, &rcq, 2, 5);
    env.connect_local(&a, b.qpn);
    env.connect_local(&b, a.qpn);
    let mut scq = scq;
    let mut rcq = rcq;
    let dst = env.alloc(4096);
    let rkey = env.mkey(dst, 4096, LW);
    // 1 + 2 + 2 + 2 ... WQEBBs: the third WQE straddles the ring end.
    for round in 0..6u8 {
        env.post_recv(&mut b, &[(200, rkey, dst)]);
        let data = pattern(if round == 0 { 8 } else { 90 }, round);
        let seg = inline_seg(&data);
        env.post_send(&mut a, wqe::opcode::SEND, CE, 0, &[&seg]);
        let s = env.poll_cq(&mut scq).expect("send CQE");
        assert_eq!(s.opcode(), cqe::opcode::REQ, "round {round}");
        let r = env.poll_cq(&mut rcq).expect("recv CQE");
        assert_eq!(r.byte_cnt() as usize, data.len());
        assert_eq!(env.read(dst, data.len()), data, "round {round}");
    }
}
