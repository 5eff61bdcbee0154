//! Hot-path cost: `post_send` of one RDMA WRITE WQE (+ doorbell) and `poll` per CQE, with a
//! HAL whose doorbell is a no-op (the WQEs go to the emulated HCA afterwards, so the CQEs the
//! poll measures are real).
//!
//! Three measured functions (each `#[inline(never)]`, so callgrind can toggle on it):
//! - `post_one`: [`QueuePair::post_write`] on a region bound to the QP ([`QueuePair::bind_mr`]):
//!   handle check, bounds check, one WQE, doorbell record, no-op BlueFlame doorbell.
//! - `post_generic`: the general safe call, `post_send(&[SendWr])` with one borrowed-region SGE
//!   (run with `--post=generic`).
//! - `poll_batch`: [`CompletionQueue::poll`] with up to 16 CQEs per call.
//!
//! Wall-clock figures: `cargo bench -p mlx5 --bench hot_path`.
//! Instruction counts (what the ~60 / ~40 targets are about):
//!
//! ```text
//! cargo bench -p mlx5 --bench hot_path -- --instructions
//! ```
//! runs the bench binary under `valgrind --tool=callgrind` six times, each as
//!
//! ```text
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect='*<fn>*' \
//!     target/release/deps/hot_path-<hash> --callgrind --n=<n> [--post=generic]
//! ```
//! for `<fn>` in `post_one`, `post_generic`, `poll_batch` and `<n>` in 1000, 2000, and prints
//! `(Ir(n=2000) - Ir(n=1000)) / 1000`: the marginal cost of one post (including building the
//! call's arguments and the no-op doorbell call) and of one CQE in `poll_batch` (including the
//! per-call work amortised over 16 CQEs). Fixed costs cancel out.
//!
//! Measured at the time of writing (rustc 1.95, x86-64): `post_write` 78 (of which ~8 are
//! the bench HAL's switchable no-op BlueFlame call), `post_send` 103, poll 60 per CQE
//! (~50 in the per-CQE loop, ~10 the per-call work shared by 16 CQEs). Before the
//! bound-region path and the slot ring: `post_send` 242, poll 106.

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use common::*;
use mlx5::hal::{Hal, HalError};
use mlx5::{
    AccessFlags, BoundMr, CompletionQueue, Context, MemoryRegion, QpCaps, QueuePair, Remote,
    SendData, SendFlags, SendOp, SendWr, WorkCompletion,
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
fn post_one(qp: &mut QueuePair<BenchHal>, local: &BoundMr, r: Remote, i: u64) {
    if qp
        .post_write(i, local.sge(0, 64), r, SendFlags::SIGNALED)
        .is_err()
    {
        std::process::abort();
    }
}

/// Like `post_one` (a solicited flag on top keeps the linker from folding the two functions
/// into one symbol): warm-up and the real doorbell, outside the callgrind measurement.
#[inline(never)]
fn post_untracked(qp: &mut QueuePair<BenchHal>, local: &BoundMr, r: Remote, i: u64) {
    let flags = SendFlags::SIGNALED | SendFlags::SOLICITED;
    if qp.post_write(i, local.sge(0, 64), r, flags).is_err() {
        std::process::abort();
    }
}

#[inline(never)]
fn post_generic(qp: &mut QueuePair<BenchHal>, local: &MemoryRegion<BenchHal>, r: Remote, i: u64) {
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

#[inline(never)]
fn warm_generic(qp: &mut QueuePair<BenchHal>, local: &MemoryRegion<BenchHal>, r: Remote, i: u64) {
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

/// Runs this binary under callgrind for each measured function and prints the marginal
/// instruction counts.
fn instruction_counts() {
    let exe = std::env::current_exe().expect("own path");
    let probe = std::process::Command::new("valgrind")
        .arg("--version")
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        println!("SKIPPED: instruction counts, because valgrind is not installed");
        return;
    }
    let collected = |f: &str, n: u32, extra: &[&str]| -> Option<u64> {
        let out = std::process::Command::new("valgrind")
            .args([
                "--tool=callgrind",
                "--callgrind-out-file=/dev/null",
                &format!("--toggle-collect=*{f}*"),
            ])
            .arg(&exe)
            .args(["--callgrind", &format!("--n={n}")])
            .args(extra)
            .output()
            .ok()?;
        let err = String::from_utf8_lossy(&out.stderr);
        let line = err.lines().find(|l| l.contains("Collected :"))?;
        line.rsplit(':').next()?.trim().parse().ok()
    };
    println!("| path | Ir (n=1000) | Ir (n=2000) | instructions per call / CQE | target |");
    println!("|---|---:|---:|---:|---:|");
    for (f, extra, what, target) in [
        (
            "post_one",
            &[][..],
            "post_write (bound region, 1 RDMA WRITE + doorbell)",
            60,
        ),
        (
            "post_generic",
            &["--post=generic"][..],
            "post_send(&[SendWr]) (1 RDMA WRITE + doorbell)",
            60,
        ),
        ("poll_batch", &[][..], "poll, per CQE (16 per call)", 40),
    ] {
        match (collected(f, 1000, extra), collected(f, 2000, extra)) {
            (Some(a), Some(b)) => println!(
                "| {what} | {a} | {b} | {:.1} | {target} |",
                (b as f64 - a as f64) / 1000.0
            ),
            _ => println!("| {what} | SKIPPED: callgrind run failed | | | |"),
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--instructions") {
        instruction_counts();
        return;
    }
    let callgrind = std::env::args().any(|a| a == "--callgrind");
    let generic = std::env::args().any(|a| a == "--post=generic");
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
    let bound = a.bind_mr(&local).unwrap();
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
            let id = (round * n + i) as u64;
            match (warm, generic) {
                (true, false) => post_untracked(&mut a, &bound, r, id),
                (false, false) => post_one(&mut a, &bound, r, id),
                (true, true) => warm_generic(&mut a, &local, r, id),
                (false, true) => post_generic(&mut a, &local, r, id),
            }
        }
        let dt = t.elapsed().as_nanos();
        // The last post rings a real doorbell: the model executes every WQE up to it.
        noop.store(false, Ordering::Relaxed);
        post_untracked(&mut a, &bound, r, u64::MAX);
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
        "| {} (1 RDMA WRITE + no-op doorbell) | {posts} | {:.1} |",
        if generic {
            "post_send(&[SendWr])"
        } else {
            "post_write (bound region)"
        },
        post_ns as f64 / posts as f64
    );
    println!(
        "| poll (per CQE, up to 16 per call; {calls} calls) | {cqes} | {:.1} |",
        poll_ns as f64 / cqes as f64
    );
    if callgrind {
        println!("callgrind: {posts} posts, poll_batch returned {cqes} CQEs");
    }
}
