//! RDMA WRITE bandwidth through the model (loopback, one HCA, raw commands and raw WQEs),
//! next to the host's memcpy of the same sizes in the same run.
//!
//! `cargo bench -p mlx5-sim --bench rdma_write` (plain `std::time`, no harness). Each WRITE is
//! signaled and polled before the next one is posted: the figure includes WQE fetch, lkey and
//! rkey translation, the payload copy (one `GuestMemory::copy` in loopback), the ACK and the
//! CQE.

#[path = "../tests/datapath_common/mod.rs"]
mod dp;
#[path = "../tests/raw/mod.rs"]
mod raw;

use std::hint::black_box;
use std::time::{Duration, Instant};

use dp::*;
use mlx5_prm::{cqe, wqe};
use mlx5_sim::InProcHca;

/// How long each measurement runs (at least; whole iterations).
const RUN: Duration = Duration::from_millis(700);

fn mb_per_s(bytes: u64, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e6
}

fn main() {
    let sizes = [4usize << 10, 64 << 10, 1 << 20];
    let max = *sizes.iter().max().unwrap();
    let mut env = Env::new(InProcHca::deterministic(), 1);
    let mut scq = env.cq(8);
    let rcq = env.cq(8);
    let mut a = env.qp(&scq, &rcq, 8, 4);
    let b = env.qp(&scq, &rcq, 8, 4);
    env.connect_local(&a, b.qpn);
    env.connect_local(&b, a.qpn);
    let src = env.alloc(max);
    let dst = env.alloc(max);
    let lkey = env.mkey(src, max as u64, LR);
    let rkey = env.mkey(dst, max as u64, RW);
    let fill: Vec<u8> = (0..max).map(|i| i as u8).collect();
    env.write(src, &fill);

    println!(
        "{:>8}  {:>14}  {:>14}  {:>6}",
        "size", "model MB/s", "memcpy MB/s", "ratio"
    );
    for &size in &sizes {
        // Warm-up and correctness check.
        env.post_send(
            &mut a,
            wqe::opcode::RDMA_WRITE,
            wqe::ctrl::CQ_UPDATE,
            0,
            &[&raddr_seg(dst, rkey), &dseg(size as u32, lkey, src)],
        );
        let c = env.poll_cq(&mut scq).expect("completion");
        assert_eq!(c.opcode(), cqe::opcode::REQ);
        assert_eq!(env.read(dst, size), fill[..size]);

        let start = Instant::now();
        let mut bytes = 0u64;
        while start.elapsed() < RUN {
            for _ in 0..16 {
                env.post_send(
                    &mut a,
                    wqe::opcode::RDMA_WRITE,
                    wqe::ctrl::CQ_UPDATE,
                    0,
                    &[&raddr_seg(dst, rkey), &dseg(size as u32, lkey, src)],
                );
                let c = env.poll_cq(&mut scq).expect("completion");
                debug_assert_eq!(c.opcode(), cqe::opcode::REQ);
                bytes += size as u64;
            }
        }
        let model = mb_per_s(bytes, start.elapsed());

        let from = fill[..size].to_vec();
        let mut to = vec![0u8; size];
        let start = Instant::now();
        let mut bytes = 0u64;
        while start.elapsed() < RUN {
            for _ in 0..16 {
                to.copy_from_slice(black_box(&from));
                black_box(&mut to);
                bytes += size as u64;
            }
        }
        let host = mb_per_s(bytes, start.elapsed());
        println!(
            "{:>7}K  {:>14.0}  {:>14.0}  {:>6.2}",
            size >> 10,
            model,
            host,
            model / host
        );
    }
}
