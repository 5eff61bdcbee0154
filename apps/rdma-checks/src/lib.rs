//! The checks of the `rdma` application, generic over the driver's [`Hal`]: the unikernel's
//! `rdma` app (apps/src/bin/rdma.rs) and the Linux program over VFIO (drivers/mlx5-vfio,
//! example `rdma`) run the same code.
//!
//! [`run`] registers a large huge-page region with one command, runs every RC opcode over
//! loopback QPs checking every byte, provokes the error cases, prints perftest-style figures,
//! tears the function down and returns the tally. The platform brings the function up (see
//! [`report_bring_up`]) and supplies the console, the clock and the big region's memory.
#![no_std]

extern crate alloc;

use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use mlx5::mr::PhysChunk;
use mlx5::{
    AccessFlags, CompletionQueue, ConnectOptions, Context, Hal, MemoryRegion, ProtectionDomain,
    QpCaps, QueuePair, Remote, SendData, SendFlags, SendOp, SendWr, WcStatus, WorkCompletion,
};

/// Where the checks print and how they tell time.
pub trait Console {
    /// Prints one line (without the newline).
    fn print(&self, line: fmt::Arguments<'_>);
    /// A monotonic clock.
    fn now(&self) -> Duration;
}

/// The memory of the big registration, made device-visible by the platform (a huge-page pool
/// in the unikernel; a hugetlbfs mapping pinned through VFIO on Linux). Dropped after the
/// region built on it has been deregistered.
pub trait BigMemory {
    /// The device's view of the memory, in order (what `reg_phys` takes).
    fn chunks(&self) -> Vec<PhysChunk>;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// True for no memory at all (never what a platform hands over).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The page size backing it, in bytes.
    fn page_size(&self) -> u64;
    /// Copies `dst.len()` bytes at `offset` out of the memory (through the CPU's mapping).
    fn read(&self, offset: usize, dst: &mut [u8]);
}

macro_rules! out {
    ($c:expr, $($arg:tt)*) => { $c.print(format_args!($($arg)*)) };
}

mod big;
mod errors;
mod opcodes;
mod perf;
pub mod recv_ring;
mod registrations;
mod windows;

use big::register_big;
use errors::errors;
use opcodes::opcodes;
use perf::perf;
use registrations::registrations;
use windows::windows;

type Ctx<H> = Context<H>;
type Qp<H> = QueuePair<H>;
type Cq<H> = CompletionQueue<H>;
type Mr<H> = MemoryRegion<H>;

const SIG: SendFlags = SendFlags::SIGNALED;
/// Completions must arrive within this (generous: under software KVM every instruction is slow).
const WAIT: Duration = Duration::from_secs(20);
/// Size of the verification buffers.
const BUF: usize = 64 * 1024;

/// Why a step could not go on.
#[derive(Debug)]
#[allow(dead_code)] // the fields are read through Debug
enum AppError {
    Driver(mlx5::Error),
    /// No completion within [`WAIT`].
    NoCompletion,
    /// A completion that should have succeeded did not.
    Completion(WcStatus),
}

impl From<mlx5::Error> for AppError {
    fn from(e: mlx5::Error) -> Self {
        AppError::Driver(e)
    }
}

type R<T> = Result<T, AppError>;

/// Prints the bring-up line (`elapsed`: how long `Context::open` took).
pub fn report_bring_up<H: Hal>(
    con: &dyn Console,
    dev: &Context<H>,
    what: &dyn fmt::Display,
    elapsed: Duration,
) {
    let (ma, mi, sub) = dev.fw_version();
    let mac = dev.mac();
    out!(
        con,
        "rdma: {what} up in {} ms: fw {ma}.{mi}.{sub}, mac {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}, {} commands, {} firmware pages",
        elapsed.as_millis(),
        mac[0], mac[1], mac[2], mac[3], mac[4], mac[5],
        dev.commands_sent(),
        dev.pages_held()
    );
}

/// Runs every check on a function that is up, then tears it down (every firmware page
/// reclaimed) and prints the tally. `quick` shortens the perftest-style loops.
/// Returns (passed, failed); the program passes only if `failed == 0`.
pub fn run<H: Hal, B: BigMemory>(
    con: &dyn Console,
    dev: Context<H>,
    big: B,
    quick: bool,
) -> (u32, u32) {
    let mut checks = Checks::new(con);
    if let Err(e) = run_all(&dev, big, &mut checks, quick) {
        out!(con, "rdma: aborted: {e:?}");
        checks.failed += 1;
    }
    match dev.close() {
        Ok(()) => out!(con, "rdma: teardown ok, pages reclaimed"),
        Err(e) => {
            out!(con, "rdma: teardown failed: {:?}", e.error);
            checks.failed += 1;
        }
    }
    out!(
        con,
        "rdma: {} checks passed, {} failed",
        checks.passed,
        checks.failed
    );
    (checks.passed, checks.failed)
}

/// Tally of checks.
pub struct Checks<'a> {
    con: &'a dyn Console,
    /// Checks that passed.
    pub passed: u32,
    /// Checks that failed.
    pub failed: u32,
}

impl<'a> Checks<'a> {
    /// An empty tally printing through `con`.
    pub fn new(con: &'a dyn Console) -> Self {
        Checks {
            con,
            passed: 0,
            failed: 0,
        }
    }

    /// Records one check.
    pub fn check(&mut self, what: &str, ok: bool) {
        let c = self.con;
        if ok {
            self.passed += 1;
            out!(c, "rdma: {what}: ok");
        } else {
            self.failed += 1;
            out!(c, "rdma: {what}: FAILED");
        }
    }
}

fn run_all<H: Hal, B: BigMemory>(
    dev: &Ctx<H>,
    big: B,
    checks: &mut Checks<'_>,
    quick: bool,
) -> R<()> {
    let c = checks.con;
    let pd = dev.alloc_pd()?;
    let big = register_big(dev, &pd, big, checks)?;

    let cq_a = dev.create_cq(256)?;
    let cq_b = dev.create_cq(256)?;
    let caps = QpCaps {
        max_send_wr: 128,
        max_recv_wr: 64,
        max_send_sge: 2,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let mut a = pd.create_qp(&cq_a, &cq_a, &caps)?;
    let mut b = pd.create_qp(&cq_b, &cq_b, &caps)?;
    connect(&mut a, &mut b)?;
    out!(
        c,
        "rdma: loopback RC qp {:#x} <-> qp {:#x}",
        a.qpn(),
        b.qpn()
    );

    let all = AccessFlags::ALL;
    let src = pd.alloc_mr(BUF, all)?;
    let dst = pd.alloc_mr(BUF, all)?;
    let mut pairs = Pairs { a, b, cq_a, cq_b };
    opcodes(&mut pairs, &src, &dst, &big, checks)?;
    let lb = Loopback {
        dev,
        pd: &pd,
        src: &src,
        dst: &dst,
    };
    registrations(&lb, &mut pairs, checks)?;
    windows(&lb, checks)?;
    errors(&lb, &mut pairs, checks)?;
    perf(c, &mut pairs, &src, &dst, quick)?;
    drop(big);
    Ok(())
}

/// What the registration, window and error checks share: the device, the PD of the loopback
/// QPs, and the two regions traffic goes from (`src`) and to (`dst`).
struct Loopback<'a, H: Hal> {
    dev: &'a Ctx<H>,
    pd: &'a ProtectionDomain<H>,
    src: &'a Mr<H>,
    dst: &'a Mr<H>,
}

struct Pairs<H: Hal> {
    a: Qp<H>,
    b: Qp<H>,
    cq_a: Cq<H>,
    cq_b: Cq<H>,
}

fn connect<H: Hal>(a: &mut Qp<H>, b: &mut Qp<H>) -> R<()> {
    let (ea, eb) = (a.endpoint(), b.endpoint());
    let o = ConnectOptions {
        min_rnr_timer: 1,
        ..ConnectOptions::default()
    };
    a.connect(&eb, &o)?;
    Ok(b.connect(&ea, &o)?)
}

/// The big registration: the platform's memory (huge pages, pinned if the platform pins),
/// registered with one command; deregistered before the memory goes.
struct BigMr<H: Hal, B: BigMemory> {
    mr: Mr<H>,
    mem: B,
}

impl<H: Hal, B: BigMemory> Drop for BigMr<H, B> {
    fn drop(&mut self) {
        // Deregister before the memory goes back (`mem` drops after this).
        let _ = self.mr.dereg();
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Waits for one completion on `cq`.
fn wait_one<H: Hal>(cq: &mut Cq<H>) -> R<WorkCompletion> {
    let mut v = cq.poll_wait(1, WAIT)?;
    v.pop().ok_or(AppError::NoCompletion)
}

/// One signaled RDMA WRITE of `len` bytes from `src` to `(addr, rkey)`; its status.
fn write_status<H: Hal>(
    p: &mut Pairs<H>,
    src: &Mr<H>,
    len: u32,
    addr: u64,
    rkey: u32,
) -> R<WcStatus> {
    let sge = [src.sge(0, len)];
    let remote = Remote { addr, rkey };
    let write = SendOp::Write { remote, imm: None };
    Ok(post_one(p, 300, write, SendData::Sges(&sge))?.status)
}

/// The whole of `mr` as the target of a remote access.
fn remote_of<H: Hal>(mr: &Mr<H>) -> Remote {
    Remote {
        addr: mr.addr(),
        rkey: mr.rkey(),
    }
}

/// Posts one signaled work request `wr_id` (`op` over `data`) on `p.a` and waits for its
/// completion.
fn post_one<H: Hal>(
    p: &mut Pairs<H>,
    wr_id: u64,
    op: SendOp,
    data: SendData<'_, H>,
) -> R<WorkCompletion> {
    p.a.post_send(&[SendWr {
        wr_id,
        op,
        data,
        flags: SIG,
    }])?;
    wait_one(&mut p.cq_a)
}

/// After an error completion the requester QP is in ERR: flush, reset both and reconnect.
fn recover<H: Hal>(p: &mut Pairs<H>) -> R<()> {
    drain(&mut p.cq_a);
    p.a.to_err()?;
    p.b.to_err()?;
    drain(&mut p.cq_a);
    drain(&mut p.cq_b);
    p.a.to_reset()?;
    p.b.to_reset()?;
    connect(&mut p.a, &mut p.b)
}

fn drain<H: Hal>(cq: &mut Cq<H>) {
    let mut wc = [WorkCompletion::default(); 16];
    while cq.poll(&mut wc).map(|n| n > 0).unwrap_or(false) {}
}
