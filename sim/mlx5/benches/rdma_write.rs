//! RDMA WRITE bandwidth through the model, next to the host's memcpy of the same sizes in the
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
//! rkey translation, segmentation, the payload copies, the ACKs and the CQE.

#[path = "../tests/datapath_common/mod.rs"]
mod dp;
#[path = "../tests/raw/mod.rs"]
mod raw;

use std::hint::black_box;
use std::time::{Duration, Instant};

use dp::*;
use mlx5_prm::{cqe, qpc, rst2init_qp_in, wqe};
use mlx5_sim::device::ExecMode;
use mlx5_sim::InProcHca;

/// How long each measurement runs (at least; whole iterations).
const RUN: Duration = Duration::from_millis(700);

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

/// Iterations between two readings of the clock: enough to move 64 MiB, so that reading it (a
/// system call for the CPU clock, microseconds on a virtual machine) stays out of both figures.
fn per_reading(size: usize) -> usize {
    ((64usize << 20) / size.max(1)).max(16)
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

fn memcpy_mb_s(size: usize) -> f64 {
    let from: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut to = vec![0u8; size];
    let start = Timer::start();
    let mut bytes = 0u64;
    while start.elapsed() < RUN {
        for _ in 0..per_reading(size) {
            to.copy_from_slice(black_box(&from));
            black_box(&mut to);
            bytes += size as u64;
        }
    }
    mb_per_s(bytes, start.elapsed())
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

/// WRITE bandwidth: posts one signaled WRITE of `size` and waits for its CQE (polling `peer`
/// too, when there is one), for [`RUN`].
#[allow(clippy::too_many_arguments)]
fn write_mb_s(
    env: &Env,
    a: &mut Qp,
    scq: &mut Cq,
    peer: Option<&InProcHca>,
    (src, lkey): (u64, u32),
    (dst, rkey): (u64, u32),
    size: usize,
) -> f64 {
    let mut once = || {
        post_write(env, a, (src, lkey), (dst, rkey), size);
        let c = match peer {
            None => poll(env, scq).expect("loopback completes at the doorbell"),
            Some(p) => env.wait_cq(scq, &[p]),
        };
        debug_assert_eq!(c.opcode(), cqe::opcode::REQ);
        assert!(!c.is_error(), "error completion {:#x}", c.syndrome());
    };
    once();
    let start = Timer::start();
    let mut bytes = 0u64;
    while start.elapsed() < RUN {
        for _ in 0..per_reading(size) {
            once();
            bytes += size as u64;
        }
    }
    mb_per_s(bytes, start.elapsed())
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

    println!(
        "{:>8}  {:>10}  {:>10}  {:>10}  {:>9}  {:>9}",
        "size", "memcpy", "loopback", "frames", "loop/mem", "frame/mem"
    );
    println!("{:>8}  {:>10}  {:>10}  {:>10}", "", "MB/s", "MB/s", "MB/s");
    for &size in &sizes {
        // `RDMA_WRITE_BENCH=loopback` or `frames` measures only that path (for profiling).
        let only = std::env::var("RDMA_WRITE_BENCH").unwrap_or_default();
        let lo = if only == "frames" {
            0.0
        } else {
            let lo = write_mb_s(&env, &mut a, &mut scq, None, (src, lkey), (dst, rkey), size);
            assert_eq!(env.read(dst, size), fill[..size], "loopback bytes");
            lo
        };
        let only_loop = only == "loopback";
        let fr = if only_loop {
            0.0
        } else {
            write_mb_s(
                &ea,
                &mut fa,
                &mut fscq,
                Some(&db),
                (fsrc, flkey),
                (fdst, frkey),
                size,
            )
        };
        if !only_loop {
            assert_eq!(eb.read(fdst, size), fill[..size], "frame bytes");
        }
        let host = memcpy_mb_s(size);
        println!(
            "{:>7}K  {:>10.0}  {:>10.0}  {:>10.0}  {:>9.2}  {:>9.2}",
            size >> 10,
            host,
            lo,
            fr,
            lo / host,
            fr / host
        );
    }
    let frames = da.with_hca(|h| {
        h.port
            .counters()
            .get(mlx5_sim::roce::counters::Counter::TxRoceUnicastFrames)
    });
    println!("(frames sent by the frame-linked HCA: {frames}, each with its ICRC)");
}
