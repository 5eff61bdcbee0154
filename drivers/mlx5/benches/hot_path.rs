//! Hot-path cost: posting one RDMA WRITE WQE (+ doorbell) and `poll` per CQE, with a HAL whose
//! doorbell is a no-op (the WQEs go to the emulated HCA afterwards, so the CQEs the poll
//! measures are real).
//!
//! The no-op doorbell: `BenchHal::mmio_copy_bf` (the BlueFlame copy, the only doorbell a
//! lone one-block WQE rings) is an empty `#[inline(always)]` fn, so the measured posts pay
//! for no doorbell and for no switch either. `mmio_write64` (the 8-byte doorbell register)
//! stays real: at the end of each round one post of two WRs rings it, and the model executes
//! every WQE written so far, which the poll then consumes.
//!
//! Three measured functions (each `#[inline(never)]`, so callgrind can toggle on it):
//! - `post_one`: [`QueuePair::post_write`] on a region bound to the QP ([`QueuePair::bind_mr`]):
//!   send gate, handle and bounds check, one WQE, completion slot, doorbell record, no-op
//!   BlueFlame doorbell.
//! - `post_generic`: the general safe call, `post_send(&[SendWr])` with one borrowed-region SGE
//!   (run with `--post=generic`); the same region every time, as in a steady stream, and not
//!   bound to the QP (the QP holds it for the WRs that name it).
//! - `poll_batch`: [`CompletionQueue::poll`] with up to 16 CQEs per call.
//!
//! Wall-clock figures: `cargo bench -p mlx5 --bench hot_path`.
//! Instruction counts (what the 60 / 40 targets are about):
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
//! call's arguments) and of one CQE in `poll_batch` (including the per-call work amortised
//! over 16 CQEs). Fixed costs cancel out.
//!
//! Measured at the time of writing (rustc 1.95, x86-64):
//!
//! | path | instructions | before this round |
//! |---|---:|---:|
//! | `post_write` (bound region) | 58 | 78 (65 with this bench's no-op HAL) |
//! | `post_send(&[SendWr])`, one SGE | 60 | 103 (90) |
//! | `poll`, per CQE (16 per call) | 39.8 | 60 |
//!
//! `post_write`: 7 call frame, 5 send gate (one load and a sign test: device alive, QP in RTS
//! and room, see `WqShared::sq_last`), 5 handle and bounds check, ~9 counters and ring
//! index, 5 completion slot, ~18 the 48-byte WQE (ctrl from a per-QP big-endian template,
//! pre-swapped key), 9 doorbell record, BlueFlame half toggle and flush fence. `post_send`
//! adds the region's identity compare (the region of the previous generic post, whose
//! binding is stamped lazily) and the bounds check on the region. `poll`: ~33 per CQE (owner
//! and opcode 4; QP and WQE opcode against the last CQE's `sop_drop_qpn` 3; the WQE counter
//! against the next WR's completion slot, one compare, ~12; wr_id, byte_len and the
//! completion's six stores ~10; loop 4) and ~110 per call (frame, dead-device and QP-list
//! checks, cursor, the run up to the ring's end, tail and CI doorbell record). Out of line:
//! completions that cover unsignaled WRs, duplicate or garbage CQEs (`BadCqe`), other QPs,
//! receives and errors; on the post side, other regions, sweeps, and the gate's slow path.

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::time::Instant;

use common::*;
use mlx5::hal::{Hal, HalError};
use mlx5::{
    AccessFlags, BoundMr, CompletionQueue, Context, MemoryRegion, QpCaps, QueuePair, Remote,
    SendData, SendFlags, SendOp, SendWr, WorkCompletion,
};

/// The test HAL with a BlueFlame doorbell that does nothing: `mmio_copy_bf` is an empty inline
/// function, so the measured posts pay for no doorbell at all (what "the doorbell is a no-op"
/// means), with no switch in the measurement. The 8-byte doorbell register (`mmio_write64`)
/// stays real: a post of two WRs rings it (the driver uses BlueFlame only for a lone WQE) and
/// hands every WQE written so far to the model.
#[derive(Clone)]
struct BenchHal(TestHal);

impl Hal for BenchHal {
    type Dma = SimDma;
    fn bar0_len(&self) -> usize {
        self.0.bar0_len()
    }
    fn mmio_read32(&self, o: usize) -> [u8; 4] {
        self.0.mmio_read32(o)
    }
    fn mmio_write32(&self, o: usize, b: [u8; 4]) {
        self.0.mmio_write32(o, b)
    }
    fn mmio_write64(&self, o: usize, b: [u8; 8]) {
        self.0.mmio_write64(o, b)
    }
    #[inline(always)]
    fn mmio_copy_bf(&self, _: usize, _: &[u8; 64]) {}
    fn bf_write_combining(&self) -> bool {
        true
    }
    fn dma_alloc(&self, size: usize, align: usize) -> Result<SimDma, HalError> {
        self.0.dma_alloc(size, align)
    }
    fn now(&self) -> std::time::Duration {
        self.0.now()
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
/// into one symbol): the warm-up round, outside the callgrind measurement.
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

/// A post of two WRs: the driver rings the 8-byte doorbell (BlueFlame is for a lone WQE).
fn ring_real_doorbell(qp: &mut QueuePair<BenchHal>, local: &MemoryRegion<BenchHal>, r: Remote) {
    let sge = [local.sge(0, 64)];
    let wr = SendWr {
        wr_id: u64::MAX,
        op: SendOp::Write {
            remote: r,
            imm: None,
        },
        data: SendData::Sges(&sge),
        flags: SendFlags::SIGNALED,
    };
    qp.post_send(&[wr, wr]).expect("batch post");
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
    let hal = BenchHal(TestHal(sim.clone()));
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
    // The generic posts name a region that is not bound: the QP holds it for its WRs.
    let plain = pd.alloc_mr(4096, AccessFlags::ALL).unwrap();
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
        let t = Instant::now();
        for i in 0..n - 2 {
            let id = (round * n + i) as u64;
            match (warm, generic) {
                (true, false) => post_untracked(&mut a, &bound, r, id),
                (false, false) => post_one(&mut a, &bound, r, id),
                (true, true) => warm_generic(&mut a, &plain, r, id),
                (false, true) => post_generic(&mut a, &plain, r, id),
            }
        }
        let dt = t.elapsed().as_nanos();
        // Two more WRs in one post ring the real 8-byte doorbell: the model executes every
        // WQE up to them.
        ring_real_doorbell(&mut a, if generic { &plain } else { &local }, r);
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
            posts += n - 2;
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
