//! Hot-path cost: `post_send` of one RDMA WRITE WQE (+ doorbell) and `poll` per CQE, with a
//! HAL whose doorbell is a no-op (the WQEs go to the emulated HCA afterwards, so the CQEs the
//! poll measures are real).
//!
//! Wall-clock figures: `cargo bench -p mlx5 --bench hot_path`.
//! Instruction counts (what the ~60 / ~40 targets are about), with callgrind. The marginal
//! count per call is the difference between two runs (fixed costs cancel out):
//!
//! ```text
//! cargo bench -p mlx5 --bench hot_path --no-run        # prints the binary path
//! for n in 1000 2000; do for f in post_one poll_batch; do
//!   valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out --toggle-collect="*$f*" \
//!       target/release/deps/hot_path-<hash> --callgrind --n=$n 2>&1 | grep Collected
//! done; done
//! ```
//! (Ir(n=2000) - Ir(n=1000)) / 1000 is the cost of one `post_one` (including building the WR
//! and the amortised release of completed WQEs' region references) and of one CQE in
//! `poll_batch`. Measured at the time of writing: ~242 per post, ~106 per CQE.

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use common::*;
use mlx5::hal::{Hal, HalError};
use mlx5::{
    AccessFlags, CompletionQueue, Context, MemoryRegion, QpCaps, QueuePair, Remote, SendData,
    SendFlags, SendOp, SendWr, WorkCompletion,
};

/// The test HAL with a switch that turns MMIO writes (doorbells) into no-ops.
#[derive(Clone)]
struct BenchHal {
    inner: TestHal,
    noop: Arc<AtomicBool>,
}

impl Hal for BenchHal {
    type Dma = SimDma;
    fn bar0_len(&self) -> usize {
        self.inner.bar0_len()
    }
    fn mmio_read32(&self, o: usize) -> [u8; 4] {
        self.inner.mmio_read32(o)
    }
    fn mmio_write32(&self, o: usize, b: [u8; 4]) {
        if !self.noop.load(Ordering::Relaxed) {
            self.inner.mmio_write32(o, b)
        }
    }
    #[inline(never)]
    fn mmio_write64(&self, o: usize, b: [u8; 8]) {
        if !self.noop.load(Ordering::Relaxed) {
            self.inner.mmio_write64(o, b)
        }
    }
    #[inline(never)]
    fn mmio_copy_bf(&self, o: usize, s: &[u8; 64]) {
        if !self.noop.load(Ordering::Relaxed) {
            self.inner.mmio_copy_bf(o, s)
        }
    }
    fn dma_alloc(&self, size: usize, align: usize) -> Result<SimDma, HalError> {
        self.inner.dma_alloc(size, align)
    }
    fn now(&self) -> std::time::Duration {
        self.inner.now()
    }
}

#[inline(never)]
fn post_one(qp: &mut QueuePair<BenchHal>, local: &MemoryRegion<BenchHal>, r: Remote, i: u64) {
    let sge = [local.sge(0, 64)];
    let wr = SendWr {
        wr_id: i,
        op: SendOp::Write {
            remote: r,
            imm: None,
        },
        data: SendData::Sges(&sge),
        flags: SendFlags::SIGNALED,
    };
    if qp.post_send(&[wr]).is_err() {
        std::process::abort();
    }
}

/// Like `post_one` (a solicited flag on top keeps the linker from folding the two functions
/// into one symbol): warm-up and the real doorbell, outside the callgrind measurement.
#[inline(never)]
fn post_untracked(qp: &mut QueuePair<BenchHal>, local: &MemoryRegion<BenchHal>, r: Remote, i: u64) {
    let sge = [local.sge(0, 64)];
    let wr = SendWr {
        wr_id: i,
        op: SendOp::Write {
            remote: r,
            imm: None,
        },
        data: SendData::Sges(&sge),
        flags: SendFlags::SIGNALED | SendFlags::SOLICITED,
    };
    if qp.post_send(&[wr]).is_err() {
        std::process::abort();
    }
}

#[inline(never)]
fn poll_untracked(cq: &mut CompletionQueue<BenchHal>, wc: &mut [WorkCompletion]) -> usize {
    // Half batches: keeps the linker from folding this into `poll_batch`.
    let half = wc.len() / 2;
    cq.poll(&mut wc[..half]).unwrap_or(0)
}

#[inline(never)]
fn poll_batch(cq: &mut CompletionQueue<BenchHal>, wc: &mut [WorkCompletion]) -> usize {
    cq.poll(wc).unwrap_or(0)
}

fn main() {
    let callgrind = std::env::args().any(|a| a == "--callgrind");
    let n: usize = std::env::args()
        .find_map(|a| a.strip_prefix("--n=").and_then(|v| v.parse().ok()))
        .unwrap_or(if callgrind { 1000 } else { 2000 });
    let rounds = if callgrind { 2 } else { 20 };
    let sim = SimHal::new();
    let noop = Arc::new(AtomicBool::new(false));
    let hal = BenchHal {
        inner: TestHal(sim.clone()),
        noop: noop.clone(),
    };
    let ctx = Context::open(hal, test_config()).expect("bring-up");
    let pd = ctx.alloc_pd().unwrap();
    let mut cq = ctx.create_cq(4 * n as u32).unwrap();
    let caps = QpCaps {
        max_send_wr: n as u32,
        ..Default::default()
    };
    let mut a = pd.create_qp(&cq, &cq, &caps).unwrap();
    let mut b = pd.create_qp(&cq, &cq, &caps).unwrap();
    let (ea, eb) = (a.endpoint(), b.endpoint());
    a.connect(&eb, &Default::default()).unwrap();
    b.connect(&ea, &Default::default()).unwrap();
    let local = pd.alloc_mr(4096, AccessFlags::ALL).unwrap();
    let remote = pd.alloc_mr(4096, AccessFlags::ALL).unwrap();
    let r = Remote {
        addr: remote.addr(),
        rkey: remote.rkey(),
    };
    let mut wc = vec![WorkCompletion::default(); 16];
    let (mut post_ns, mut poll_ns, mut posts, mut cqes, mut calls) =
        (0u128, 0u128, 0usize, 0usize, 0usize);
    for round in 0..rounds {
        // Round 0 warms up (per-slot storage, caches) and is not counted.
        let warm = round == 0;
        noop.store(true, Ordering::Relaxed);
        let t = Instant::now();
        for i in 0..n - 1 {
            if warm {
                post_untracked(&mut a, &local, r, i as u64);
            } else {
                post_one(&mut a, &local, r, (round * n + i) as u64);
            }
        }
        let dt = t.elapsed().as_nanos();
        // The last post rings a real doorbell: the model executes every WQE up to it.
        noop.store(false, Ordering::Relaxed);
        post_untracked(&mut a, &local, r, u64::MAX);
        let t = Instant::now();
        let mut got = 0;
        while got < n {
            let k = if warm {
                poll_untracked(&mut cq, &mut wc)
            } else {
                poll_batch(&mut cq, &mut wc)
            };
            if k == 0 {
                break;
            }
            if !warm {
                calls += 1;
            } else if got == 0 && std::env::var("HOT_PATH_DEBUG").is_ok() {
                eprintln!(
                    "first batch: {:?}",
                    &wc[..k]
                        .iter()
                        .map(|w| (w.qp_num, w.wr_id, w.status))
                        .collect::<Vec<_>>()
                );
            }
            got += k;
        }
        assert_eq!(got, n, "every WQE completed");
        if !warm {
            post_ns += dt;
            posts += n - 1;
            poll_ns += t.elapsed().as_nanos();
            cqes += got;
        }
    }
    println!("| path | calls | ns/call |");
    println!("|---|---:|---:|");
    println!(
        "| post_send (1 RDMA WRITE + no-op doorbell) | {posts} | {:.1} |",
        post_ns as f64 / posts as f64
    );
    println!(
        "| poll (per CQE, up to 16 per call; {calls} calls) | {cqes} | {:.1} |",
        poll_ns as f64 / cqes as f64
    );
    if callgrind {
        println!("callgrind: post_one called {posts} times, poll_batch returned {cqes} CQEs");
    }
}
