//! Receive WQEs of every stride: a SEND scatters over all the entries of the receive WQE,
//! whether the parsed WQE keeps them inline (up to 4) or in its spill list, and whether the
//! stride is read into the device's small buffer (up to 256 bytes) or its large one.

#[path = "datapath_common/mod.rs"]
mod dp;
#[path = "raw/mod.rs"]
mod raw;

use dp::*;
use mlx5_prm::{cqe, create_qp_out, wqe};
use mlx5_sim::InProcHca;

const CE: u8 = wqe::ctrl::CQ_UPDATE;

/// A QP with a receive stride of `16 << stride_log` bytes (`log_rq_stride` = `stride_log`).
fn qp_with_stride(env: &mut Env, scq: &Cq, rcq: &Cq, stride_log: u32) -> Qp {
    let (log_sq, log_rq) = (4u32, 2u32);
    let rq_bytes = (1usize << log_rq) << (stride_log + 4);
    let buf = env.alloc((rq_bytes + (64usize << log_sq)).max(4096));
    let dbr = env.alloc(64);
    let (pd, uar) = (env.pd, env.uar);
    let i = env.qp_input(pd, scq.cqn, rcq.cqn, log_sq, log_rq, stride_log, buf, dbr);
    let d = env.raw.exec(&i, 16);
    d.ok();
    Qp {
        qpn: d.get(create_qp_out::QPN),
        buf,
        dbr,
        log_sq,
        log_rq,
        rq_stride: 16 << stride_log,
        sq_offset: rq_bytes as u64,
        sq_pi: 0,
        rq_pi: 0,
        uar,
        bf_half: 0,
    }
}

#[test]
fn send_scatters_over_every_entry_of_any_stride() {
    // (log_rq_stride, scatter entries posted): a stride of 64 bytes with 3 and 4 entries, 256
    // with 5 and 16, 512 (`max_wqe_sz_rq`) with 17 and 32.
    for (stride_log, n) in [(2u32, 3usize), (2, 4), (4, 5), (4, 16), (5, 17), (5, 32)] {
        let mut env = Env::new(InProcHca::deterministic(), 1);
        let mut scq = env.cq(6);
        let mut rcq = env.cq(6);
        let mut a = env.qp(&scq, &rcq, 4, 2);
        let mut b = qp_with_stride(&mut env, &scq, &rcq, stride_log);
        env.connect_local(&a, b.qpn);
        env.connect_local(&b, a.qpn);
        let dst = env.alloc(4096);
        let rkey = env.mkey(dst, 4096, LW);
        // Entry k: 3 bytes at dst + 32 * k (gaps left untouched).
        let sges: Vec<(u32, u32, u64)> = (0..n).map(|k| (3, rkey, dst + 32 * k as u64)).collect();
        env.post_recv(&mut b, &sges);
        let data: Vec<u8> = (0..3 * n).map(|i| (i as u8).wrapping_mul(13) | 1).collect();
        let src = env.alloc(4096);
        let lkey = env.mkey(src, 4096, LR);
        env.write(src, &data);
        env.post_send(
            &mut a,
            wqe::opcode::SEND,
            CE,
            0,
            &[&dseg(data.len() as u32, lkey, src)],
        );
        let s = env.poll_cq(&mut scq).expect("send CQE");
        assert_eq!(
            s.opcode(),
            cqe::opcode::REQ,
            "stride {stride_log}, {n} entries"
        );
        let r = env.poll_cq(&mut rcq).expect("receive CQE");
        assert_eq!(
            r.opcode(),
            cqe::opcode::RESP_SEND,
            "stride {stride_log}, {n} entries"
        );
        assert_eq!(r.byte_cnt() as usize, data.len());
        let got = env.read(dst, 32 * n);
        for k in 0..n {
            assert_eq!(
                got[32 * k..32 * k + 3],
                data[3 * k..3 * k + 3],
                "stride {stride_log}, entry {k} of {n}"
            );
            assert!(got[32 * k + 3..32 * k + 32].iter().all(|&x| x == 0));
        }
    }
}
