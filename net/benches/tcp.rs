//! TCP over two emulated ConnectX-5s in one process (as `tests/over_mlx5.rs`): a one-way bulk
//! transfer and an echo, each stack on its HCA's Ethernet queue and polled in its own thread.
//!
//! Cases (each run in the same process, so the ratios compare like with like):
//! - `bulk/send_all, burst 1`: the sender hands 64 KiB pieces to `tcp_send_all` (each waits
//!   for its acknowledgement) with one egress pass per poll (`tx_burst: 1`, the stack before
//!   `StackConfig::tx_burst`); the receiver reads 64 KiB at a time until the sender closes.
//! - `bulk/send_all`: the same with the default `TX_BURST`.
//! - `bulk/queue_all`: the whole buffer through `tcp_queue_all`, one `tcp_send_all(&[])` at
//!   the end for the acknowledgement.
//! - `echo/...`: the client streams its data with `tcp_send` and reads the echo back as it
//!   comes (non-blocking `tcp_recv`, deadline now); the server is the apps' echo loop
//!   (`apps/src/echo.rs`: a 32 KiB `tcp_recv`, then `tcp_send_all`) with burst 1 and with the
//!   default burst, and a server that keeps what it has not sent yet and hands it to
//!   `tcp_send`, reading only when all of it is queued (`echo/tcp_send`).
//!
//! Wall clock (MB/s each way, and CPU time of both threads per MiB):
//!
//! ```text
//! cargo bench -p net --bench tcp [-- --kib=1024]
//! ```
//!
//! Instructions per byte (robust to machine load): `-- --instructions` runs this binary under
//! `valgrind --tool=callgrind --callgrind-out-file=/dev/null` for each case at 256 KiB and 1 MiB
//! and prints `(Ir(1 MiB) - Ir(256 KiB)) / 768 KiB`: the whole process (both stacks, both
//! drivers, the model; setup cancels out), including the polls that found nothing, so a case
//! that waits more pays more. Under callgrind the clock counts its readings (`BenchClock`), so
//! no timer depends on how slowly valgrind runs; which thread runs when still does (valgrind
//! runs one at a time and switches at each `sched_yield`), so a count varies by some 10% from
//! run to run: each size runs `RUNS` times and the fewest count. A run over `RUN_LIMIT` is
//! killed and left out (a stall that ends at a deadline costs minutes under valgrind).

#[path = "../tests/common/mod.rs"]
mod common;
#[allow(dead_code)]
#[path = "../../drivers/mlx5/tests/common/mod.rs"]
mod sim;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use common::{both, pattern, IP_A, IP_B};
use mlx5::{Context, EthConfig, EthQueue};
use net::{Clock, NetError, Op, Stack, StackConfig, TX_BURST};
use sim::{test_config, SimHal, TestHal};

type E = Stack<EthQueue<TestHal>, BenchClock>;

/// The bench's clock: real time, or under callgrind a count that every reading advances by a
/// microsecond, so that a run does not depend on how fast valgrind runs it (the instruction
/// counts then repeat from run to run).
#[derive(Clone, Copy)]
enum BenchClock {
    Real(Instant),
    Counted(&'static AtomicU64),
}

impl Clock for BenchClock {
    fn now_us(&self) -> u64 {
        match self {
            BenchClock::Real(t) => t.elapsed().as_micros() as u64,
            BenchClock::Counted(n) => n.fetch_add(1, Ordering::Relaxed),
        }
    }
    fn relax(&self) {
        std::thread::yield_now();
    }
}

/// A deadline `ms` milliseconds from now on `s`'s clock.
fn after(s: &E, ms: u64) -> u64 {
    s.now_us() + ms * 1000
}

/// The piece the bulk sender hands over at once, and the receiver's buffer.
const PIECE: usize = 64 * 1024;
/// The apps' echo server's buffer (`apps/src/echo.rs` `ECHO_CHUNK`).
const ECHO_CHUNK: usize = 32 * 1024;
/// Callgrind runs per case and size; the fewest instructions count.
const RUNS: usize = 3;
/// A callgrind run that takes longer is killed and left out.
const RUN_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);
/// Every wait of the bench ends within this (milliseconds).
const WAIT_MS: u64 = 60_000;

#[derive(Clone, Copy, PartialEq)]
enum Case {
    BulkSendAllBurst1,
    BulkSendAll,
    BulkQueueAll,
    EchoSendAllBurst1,
    EchoSendAll,
    EchoTcpSend,
}

const CASES: [(Case, &str); 6] = [
    (Case::BulkSendAllBurst1, "bulk/send_all, burst 1"),
    (Case::BulkSendAll, "bulk/send_all"),
    (Case::BulkQueueAll, "bulk/queue_all"),
    (Case::EchoSendAllBurst1, "echo/send_all, burst 1"),
    (Case::EchoSendAll, "echo/send_all"),
    (Case::EchoTcpSend, "echo/tcp_send"),
];

impl Case {
    fn burst(self) -> usize {
        match self {
            Case::BulkSendAllBurst1 | Case::EchoSendAllBurst1 => 1,
            _ => TX_BURST,
        }
    }
    fn echo(self) -> bool {
        matches!(
            self,
            Case::EchoSendAllBurst1 | Case::EchoSendAll | Case::EchoTcpSend
        )
    }
}

/// Two HCAs on one wire, a stack on each one's Ethernet queue.
fn stacks(burst: usize, clock: BenchClock) -> (Context<TestHal>, Context<TestHal>, E, E) {
    let (sa, sb) = SimHal::pair();
    let ca = Context::open(TestHal(sa), test_config()).unwrap();
    let cb = Context::open(TestHal(sb), test_config()).unwrap();
    let qa = ca.open_eth(&EthConfig::default()).unwrap();
    let qb = cb.open_eth(&EthConfig::default()).unwrap();
    let cfg = |ip| StackConfig {
        tx_burst: burst,
        ..StackConfig::new(ip, 24)
    };
    let a = Stack::new(qa, clock, &cfg(IP_A)).unwrap();
    let b = Stack::new(qb, clock, &cfg(IP_B)).unwrap();
    (ca, cb, a, b)
}

/// The sender of the bulk cases: connects, sends `data`, closes.
fn bulk_send(a: &mut E, data: &[u8], case: Case) -> Result<(), NetError> {
    let d = after(a, WAIT_MS);
    a.resolve(IP_B, d)?;
    let c = a.tcp_connect(IP_B, 7, d)?;
    if case == Case::BulkQueueAll {
        a.tcp_queue_all(&c, data, d)?;
        a.tcp_send_all(&c, &[], d)?;
    } else {
        for piece in data.chunks(PIECE) {
            a.tcp_send_all(&c, piece, d)?;
        }
    }
    a.tcp_close(c, d)
}

/// The receiver of the bulk cases: reads until the sender closes; the bytes read.
fn bulk_recv(b: &mut E, total: usize) -> Result<Vec<u8>, NetError> {
    let d = after(b, WAIT_MS);
    let mut l = b.tcp_listen(7)?;
    let c = b.tcp_accept(&mut l, d)?;
    let mut got = vec![0; total];
    let mut at = 0;
    loop {
        let mut scratch = [0; 1];
        let buf = match got.get_mut(at..(at + PIECE).min(total)) {
            Some(b) if !b.is_empty() => b,
            _ => &mut scratch[..],
        };
        let n = b.tcp_recv(&c, buf, d)?;
        if n == 0 {
            break;
        }
        at += n;
        if at > total {
            return Err(NetError::Closed);
        }
    }
    got.truncate(at);
    b.tcp_close(c, d)?;
    Ok(got)
}

/// The echo client: streams `data` with `tcp_send` and reads the echo as it comes.
fn echo_client(a: &mut E, data: &[u8]) -> Result<Vec<u8>, NetError> {
    let d = after(a, WAIT_MS);
    a.resolve(IP_B, d)?;
    let c = a.tcp_connect(IP_B, 7, d)?;
    let mut back = vec![0; data.len()];
    let (mut sent, mut got) = (0, 0);
    while got < data.len() {
        if sent < data.len() {
            sent += a.tcp_send(&c, &data[sent..])?;
        }
        let now = a.now_us();
        match a.tcp_recv(&c, &mut back[got..], now) {
            Ok(0) => return Err(NetError::Closed),
            Ok(n) => got += n,
            Err(NetError::Timeout(_)) if now < d => std::thread::yield_now(),
            Err(e) => return Err(e),
        }
    }
    a.tcp_close(c, d)?;
    Ok(back)
}

/// The echo server: `tcp_send_all` after each read (the apps' loop), or `tcp_send` of what is
/// left, reading again once all of it is queued.
fn echo_server(b: &mut E, case: Case) -> Result<(), NetError> {
    let d = after(b, WAIT_MS);
    let mut l = b.tcp_listen(7)?;
    let c = b.tcp_accept(&mut l, d)?;
    let mut buf = vec![0; ECHO_CHUNK];
    let (mut start, mut end) = (0, 0);
    loop {
        if start < end {
            start += b.tcp_send(&c, &buf[start..end])?;
            if start < end {
                // The client stopped taking the echo: this wait ends at the deadline too.
                if b.now_us() >= d {
                    return Err(NetError::Timeout(Op::Send));
                }
                std::thread::yield_now();
            }
            continue;
        }
        let now = b.now_us();
        match b.tcp_recv(&c, &mut buf, now) {
            Ok(0) => break,
            Ok(n) if case == Case::EchoTcpSend => (start, end) = (0, n),
            Ok(n) => b.tcp_send_all(&c, &buf[..n], d)?,
            Err(NetError::Timeout(_)) if now < d => std::thread::yield_now(),
            Err(e) => return Err(e),
        }
    }
    b.tcp_close(c, d)
}

/// CPU time of the whole process (both threads), in nanoseconds.
fn cpu_ns() -> u128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for clock_gettime to write.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128
}

/// One run of `case` with `bytes` of data: seconds and CPU nanoseconds, frames sent by both.
fn run(case: Case, bytes: usize, clock: BenchClock) -> (f64, u128, u64) {
    let (_ca, _cb, mut a, mut b) = stacks(case.burst(), clock);
    let data = pattern(bytes, 5);
    let (t, cpu) = (Instant::now(), cpu_ns());
    if case.echo() {
        let (ra, rb) = both(
            &mut a,
            &mut b,
            |a| echo_client(a, &data),
            |b| echo_server(b, case),
        );
        assert!(ra.expect("echo client") == data, "the echo differs");
        rb.expect("echo server");
    } else {
        let (ra, rb) = both(
            &mut a,
            &mut b,
            |a| bulk_send(a, &data, case),
            |b| bulk_recv(b, bytes),
        );
        ra.expect("bulk sender");
        assert!(rb.expect("bulk receiver") == data, "the bulk data differs");
    }
    let (secs, cpu) = (t.elapsed().as_secs_f64(), cpu_ns() - cpu);
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sa.tx_errors + sb.tx_errors, 0, "{sa:?} {sb:?}");
    (secs, cpu, sa.tx_frames + sb.tx_frames)
}

fn arg(name: &str) -> Option<String> {
    let p = format!("--{name}=");
    std::env::args().find_map(|a| a.strip_prefix(&p).map(str::to_owned))
}

/// Runs this binary under callgrind for each case at two sizes: instructions per byte.
fn instruction_counts() {
    let exe = std::env::current_exe().expect("own path");
    let probe = std::process::Command::new("valgrind")
        .arg("--version")
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        println!("SKIPPED: instruction counts, because valgrind is not installed");
        return;
    }
    // One callgrind run: the process's instruction count, or None if it failed or took
    // longer than RUN_LIMIT (then it is killed).
    let once = |case: usize, kib: usize| -> Option<u64> {
        let mut child = std::process::Command::new("valgrind")
            .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
            .arg(&exe)
            .args([
                "--callgrind".to_owned(),
                format!("--case={case}"),
                format!("--kib={kib}"),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .ok()?;
        let t = Instant::now();
        while child.try_wait().ok()?.is_none() {
            if t.elapsed() > RUN_LIMIT {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let out = child.wait_with_output().ok()?;
        let err = String::from_utf8_lossy(&out.stderr);
        let line = err.lines().find(|l| l.contains("Collected :"))?;
        line.rsplit(':').next()?.trim().parse().ok()
    };
    // The fewest of RUNS runs: what the work costs with the least waiting in between.
    let collected = |case: usize, kib: usize| (0..RUNS).filter_map(|_| once(case, kib)).min();
    let (lo, hi) = (256, 1024);
    println!(
        "| case | Ir ({lo} KiB) | Ir ({hi} KiB) | instructions per byte | vs first of its kind |"
    );
    println!("|---|---:|---:|---:|---:|");
    let mut base = [None, None];
    for (i, (case, name)) in CASES.iter().enumerate() {
        match (collected(i, lo), collected(i, hi)) {
            (Some(a), Some(b)) => {
                let per = (b as f64 - a as f64) / ((hi - lo) * 1024) as f64;
                let first = *base[case.echo() as usize].get_or_insert(per);
                println!("| {name} | {a} | {b} | {per:.1} | {:.2} |", per / first);
            }
            _ => println!("| {name} | SKIPPED: callgrind run failed | | | |"),
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--instructions") {
        instruction_counts();
        return;
    }
    let kib: usize = arg("kib").and_then(|v| v.parse().ok()).unwrap_or(1024);
    if std::env::args().any(|a| a == "--callgrind") {
        let i: usize = arg("case").and_then(|v| v.parse().ok()).unwrap_or(0);
        static TICKS: AtomicU64 = AtomicU64::new(0);
        run(CASES[i].0, kib * 1024, BenchClock::Counted(&TICKS));
        return;
    }
    let mib = kib as f64 / 1024.0;
    println!(
        "| case ({kib} KiB) | MB/s each way | CPU ms per MiB | frames | vs first of its kind |"
    );
    println!("|---|---:|---:|---:|---:|");
    let mut base = [None, None];
    for (case, name) in CASES {
        let (secs, cpu, frames) = run(case, kib * 1024, BenchClock::Real(Instant::now()));
        let rate = (kib * 1024) as f64 / secs / 1e6;
        let first = *base[case.echo() as usize].get_or_insert(rate);
        println!(
            "| {name} | {rate:.2} | {:.1} | {frames} | {:.2}x |",
            cpu as f64 / 1e6 / mib,
            rate / first
        );
    }
}
