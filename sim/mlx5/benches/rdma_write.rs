//! RDMA WRITE bandwidth through the model, paired with the host's memcpy of the same sizes in the
//! same run, at path MTU 4096 (`qpc.mtu` 5):
//!
//! - **loopback** (one HCA, raw commands and raw WQEs): the message is segmented into real
//!   RoCEv2 packets (PSNs, AckReq, ACKs through the RC transport); both ends share the guest
//!   memory, so each packet's payload moves once, by reference (no frame is built, so no ICRC);
//! - **frames** (two HCAs in one process, `InProcHca::pair`): every packet is a complete
//!   Ethernet/IPv4/UDP/BTH frame with its ICRC computed by the sender and checked by the
//!   receiver; the payload is copied into the frame and out of it.
//!
//! `cargo bench -p mlx5-sim --bench rdma_write` (plain `std::time`, no harness). Each WRITE is
//! signaled and polled before the next one is posted: the figure includes WQE fetch, lkey and
//! rkey translation, segmentation, the payload copies, the ACKs and the CQE. The memcpy side
//! copies the same size between two distinct buffers.
//!
//! Paired measurement: the machine this runs on is shared, and memcpy's own speed swings by tens
//! of percent from one second to the next, so each size is measured in [`ROUNDS`] rounds of
//! short chunks ([`CHUNK`] each): memcpy, loopback and frames one after the other (the order
//! reversed every other round), each chunk a fixed number of iterations (calibrated once per
//! size and path) between two readings of the same clock. A round's ratio (loop/mem,
//! frame/mem) divides that round's figures, so both sides see the same load. The table gives
//! the median MB/s of each path over the rounds, and the median ratio with its 10th..90th
//! percentile over the rounds.
//!
//! Knobs: `RDMA_WRITE_CLOCK=cpu` (this thread's CPU time instead of wall time),
//! `RDMA_WRITE_SIZES=64,1024` (KiB), `RDMA_WRITE_BENCH=loopback|frames` (only that path besides
//! memcpy, for profiling), `RDMA_WRITE_ROUNDS=N` (rounds per size).

#[path = "../tests/datapath_common/mod.rs"]
mod dp;
#[path = "../tests/raw/mod.rs"]
mod raw;

use std::hint::black_box;
use std::time::{Duration, Instant};

use dp::*;
use mlx5_prm::{cqe, qpc, rst2init_qp_in, wqe};
use mlx5_sim::front::device::ExecMode;
use mlx5_sim::InProcHca;

/// How long one chunk of one path runs (about; a calibrated number of whole iterations).
const CHUNK: Duration = Duration::from_millis(30);
/// Rounds (memcpy, loopback, frames chunks) per size, unless `RDMA_WRITE_ROUNDS` says otherwise.
const ROUNDS: usize = 25;

fn cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A running measurement: wall time, or with `RDMA_WRITE_CLOCK=cpu` this thread's CPU time
/// (`CLOCK_THREAD_CPUTIME_ID`), which leaves out the time the thread waits for a core on a
/// shared machine. The model runs inline (on this thread), so both it and memcpy are timed
/// with the same clock.
struct Timer {
    wall: Option<Instant>,
    cpu0: Duration,
}

impl Timer {
    fn start() -> Timer {
        if std::env::var("RDMA_WRITE_CLOCK").as_deref() == Ok("cpu") {
            Timer {
                wall: None,
                cpu0: cpu_now(),
            }
        } else {
            Timer {
                wall: Some(Instant::now()),
                cpu0: Duration::ZERO,
            }
        }
    }
    fn elapsed(&self) -> Duration {
        match self.wall {
            Some(w) => w.elapsed(),
            None => cpu_now().saturating_sub(self.cpu0),
        }
    }
}

fn mb_per_s(bytes: u64, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e6
}

/// RST → INIT → RTR → RTS at MTU 4096 (`qpc.mtu` = 5), `log_ack_req_freq` 8, toward `remote_qpn` at `rgid`/`rmac`.
fn connect_4096(env: &mut Env, qp: &Qp, remote_qpn: u32, rgid: [u8; 16], rmac: [u8; 6]) {
    let i = env.rst2init_input(qp.qpn);
    env.raw.exec(&i, 16).ok();
    let mut i = env.init2rtr_input(qp.qpn, remote_qpn, rgid, rmac, 0x100, 1);
    qpc::MTU.within(rst2init_qp_in::QPC).set(&mut i, 5).unwrap();
    // AckReq every 2^8 packets besides each message's last, as Linux sets it
    // (hw/mlx5/qp.c `MLX5_IB_ACK_REQ_FREQ`).
    qpc::LOG_ACK_REQ_FREQ
        .within(rst2init_qp_in::QPC)
        .set(&mut i, 8)
        .unwrap();
    env.raw.exec(&i, 16).ok();
    let i = env.rtr2rts_input(qp.qpn, 0x100, 7, 7, 14);
    env.raw.exec(&i, 16).ok();
}

/// Iterations of `once` (which moves `size` bytes) that take about [`CHUNK`]: doubles the count
/// until a run takes at least an eighth of it, then scales.
fn calibrate(once: &mut dyn FnMut()) -> u64 {
    let mut n = 1u64;
    loop {
        let t = Timer::start();
        for _ in 0..n {
            once();
        }
        let t = t.elapsed();
        if t >= CHUNK / 8 || n >= 1 << 30 {
            let per = t.as_secs_f64() / n as f64;
            return ((CHUNK.as_secs_f64() / per.max(1e-12)) as u64).max(1);
        }
        n *= 2;
    }
}

/// One chunk: `n` iterations of `once` between two readings of the clock, in MB/s.
fn chunk(once: &mut dyn FnMut(), n: u64, size: usize) -> f64 {
    let t = Timer::start();
    for _ in 0..n {
        once();
    }
    mb_per_s(n * size as u64, t.elapsed())
}

/// The `p`-quantile (0..=1) of `v`, nearest rank.
fn quantile(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// A ratio column: median and 10th..90th percentile over the rounds.
fn ratio_col(r: &[f64]) -> String {
    if r.is_empty() {
        return "-".into();
    }
    format!(
        "{:.2} ({:.2}..{:.2})",
        quantile(r, 0.5),
        quantile(r, 0.1),
        quantile(r, 0.9)
    )
}

/// Posts one signaled RDMA WRITE of `size` bytes: the same WQE as `Env::post_send` makes (ctrl,
/// raddr and data segments), written to the SQ, then the doorbell record and the BlueFlame
/// doorbell, but built on the stack: the application side allocates nothing per message (a
/// driver does not), so the figure is the model's.
fn post_write(
    env: &Env,
    qp: &mut Qp,
    (src, lkey): (u64, u32),
    (dst, rkey): (u64, u32),
    size: usize,
) {
    let mut w = [0u8; 48];
    w[0..4].copy_from_slice(
        &wqe::opmod_idx_opcode(0, qp.sq_pi, wqe::opcode::RDMA_WRITE).to_be_bytes(),
    );
    w[4..8].copy_from_slice(&wqe::qpn_ds(qp.qpn, 3).to_be_bytes());
    w[11] = wqe::ctrl::CQ_UPDATE;
    w[16..32].copy_from_slice(&raddr_seg(dst, rkey));
    w[32..48].copy_from_slice(&dseg(size as u32, lkey, src));
    env.write_send(qp, &w);
    env.ring_sq(qp, &w);
}

/// `Env::poll_cq` reading the CQE into a stack buffer.
fn poll(env: &Env, cq: &mut Cq) -> Option<Cqe> {
    let n = 1u32 << cq.log_size;
    let at = cq.buf + ((cq.ci & (n - 1)) as u64) * 64;
    let mut b = [0u8; 64];
    env.raw.mem().read(at, &mut b).unwrap();
    if !cqe::is_sw_owned(b[63], cq.ci, n) {
        return None;
    }
    cq.ci = cq.ci.wrapping_add(1);
    env.write(cq.dbr, &(cq.ci & 0xff_ffff).to_be_bytes());
    Some(Cqe(b))
}

/// A path under measurement: one iteration, its calibrated chunk length, its chunks' MB/s.
type Path<'a> = (&'a mut dyn FnMut(), u64, Vec<f64>);

/// One signaled WRITE of `size`, waited for (polling `peer` too, when there is one).
#[allow(clippy::too_many_arguments)]
fn write_once(
    env: &Env,
    a: &mut Qp,
    scq: &mut Cq,
    peer: Option<&InProcHca>,
    (src, lkey): (u64, u32),
    (dst, rkey): (u64, u32),
    size: usize,
) {
    post_write(env, a, (src, lkey), (dst, rkey), size);
    let c = match peer {
        None => poll(env, scq).expect("loopback completes at the doorbell"),
        Some(p) => env.wait_cq(scq, &[p]),
    };
    debug_assert_eq!(c.opcode(), cqe::opcode::REQ);
    assert!(!c.is_error(), "error completion {:#x}", c.syndrome());
}

fn main() {
    // `RDMA_WRITE_SIZES=64,1024` (KiB) measures only those sizes (for profiling).
    let sizes: Vec<usize> = match std::env::var("RDMA_WRITE_SIZES") {
        Ok(s) => s
            .split(',')
            .map(|k| k.trim().parse::<usize>().expect("sizes in KiB") << 10)
            .collect(),
        Err(_) => vec![4 << 10, 64 << 10, 1 << 20],
    };
    let max = *sizes.iter().max().unwrap();
    let fill: Vec<u8> = (0..max).map(|i| i as u8).collect();

    // Loopback.
    let mut env = Env::new(InProcHca::deterministic(), 1);
    let mut scq = env.cq(8);
    let rcq = env.cq(8);
    let mut a = env.qp(&scq, &rcq, 8, 4);
    let b = env.qp(&scq, &rcq, 8, 4);
    let (gid, mac) = (env.gid, env.mac);
    connect_4096(&mut env, &a, b.qpn, gid, mac);
    connect_4096(&mut env, &b, a.qpn, gid, mac);
    let src = env.alloc(max);
    let dst = env.alloc(max);
    let lkey = env.mkey(src, max as u64, LR);
    let rkey = env.mkey(dst, max as u64, RW);
    env.write(src, &fill);

    // Two HCAs joined by frames.
    let (da, db) = InProcHca::pair(ExecMode::Inline);
    let mut ea = Env::new(da.clone(), 1);
    let mut eb = Env::new(db.clone(), 2);
    let (mut fscq, frcq) = (ea.cq(8), ea.cq(8));
    let (bscq, brcq) = (eb.cq(8), eb.cq(8));
    let mut fa = ea.qp(&fscq, &frcq, 8, 4);
    let fb = eb.qp(&bscq, &brcq, 8, 4);
    let (bgid, bmac, agid, amac) = (eb.gid, eb.mac, ea.gid, ea.mac);
    connect_4096(&mut ea, &fa, fb.qpn, bgid, bmac);
    connect_4096(&mut eb, &fb, fa.qpn, agid, amac);
    let fsrc = ea.alloc(max);
    let fdst = eb.alloc(max);
    let flkey = ea.mkey(fsrc, max as u64, LR);
    let frkey = eb.mkey(fdst, max as u64, RW);
    ea.write(fsrc, &fill);

    let rounds: usize = match std::env::var("RDMA_WRITE_ROUNDS") {
        Ok(r) => r.trim().parse().expect("RDMA_WRITE_ROUNDS is a count"),
        Err(_) => ROUNDS,
    }
    .max(1);
    // `RDMA_WRITE_BENCH=loopback` or `frames` measures only that path (for profiling).
    let only = std::env::var("RDMA_WRITE_BENCH").unwrap_or_default();
    let (do_loop, do_frames) = (only != "frames", only != "loopback");
    let mut from = fill.clone();
    let mut to = vec![0u8; max];

    println!(
        "{:>8}  {:>10}  {:>10}  {:>10}  {:>18}  {:>18}",
        "size", "memcpy", "loopback", "frames", "loop/mem", "frame/mem"
    );
    println!(
        "{:>8}  {:>10}  {:>10}  {:>10}  {:>18}  {:>18}",
        "", "MB/s", "MB/s", "MB/s", "median (p10..p90)", "median (p10..p90)"
    );
    for &size in &sizes {
        let (from, to) = (&mut from[..size], &mut to[..size]);
        let mut mem = || {
            to.copy_from_slice(black_box(&*from));
            black_box(&mut *to);
        };
        let mut lo = || write_once(&env, &mut a, &mut scq, None, (src, lkey), (dst, rkey), size);
        let mut fr = || {
            write_once(
                &ea,
                &mut fa,
                &mut fscq,
                Some(&db),
                (fsrc, flkey),
                (fdst, frkey),
                size,
            )
        };
        // Warm up and calibrate each path.
        let mut paths: Vec<Path> = vec![(&mut mem, 0, Vec::new())];
        if do_loop {
            paths.push((&mut lo, 0, Vec::new()));
        }
        if do_frames {
            paths.push((&mut fr, 0, Vec::new()));
        }
        for (once, n, _) in paths.iter_mut() {
            once();
            *n = calibrate(*once);
        }
        for round in 0..rounds {
            let order: Vec<usize> = if round % 2 == 0 {
                (0..paths.len()).collect()
            } else {
                (0..paths.len()).rev().collect()
            };
            for i in order {
                let (once, n, mbs) = &mut paths[i];
                mbs.push(chunk(*once, *n, size));
            }
        }
        let mbs: Vec<Vec<f64>> = paths.into_iter().map(|(_, _, m)| m).collect();
        let host = &mbs[0];
        let (lo_mbs, fr_mbs): (&[f64], &[f64]) = match (do_loop, do_frames) {
            (true, true) => (&mbs[1], &mbs[2]),
            (true, false) => (&mbs[1], &[]),
            (false, _) => (&[], &mbs[1]),
        };
        let ratios = |p: &[f64]| -> Vec<f64> { p.iter().zip(host).map(|(p, h)| p / h).collect() };
        let med = |p: &[f64]| if p.is_empty() { 0.0 } else { quantile(p, 0.5) };
        if do_loop {
            assert_eq!(env.read(dst, size), fill[..size], "loopback bytes");
        }
        if do_frames {
            assert_eq!(eb.read(fdst, size), fill[..size], "frame bytes");
        }
        println!(
            "{:>7}K  {:>10.0}  {:>10.0}  {:>10.0}  {:>18}  {:>18}",
            size >> 10,
            med(host),
            med(lo_mbs),
            med(fr_mbs),
            ratio_col(&ratios(lo_mbs)),
            ratio_col(&ratios(fr_mbs))
        );
    }
    println!(
        "({rounds} rounds of {} ms chunks per path and size)",
        CHUNK.as_millis()
    );
    let frames = da.with_hca(|h| {
        h.port()
            .counters()
            .get(mlx5_sim::roce::counters::Counter::TxRoceUnicastFrames)
    });
    println!("(frames sent by the frame-linked HCA: {frames}, each with its ICRC)");
}
