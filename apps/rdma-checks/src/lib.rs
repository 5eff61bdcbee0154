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

pub mod recv_ring;

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use mlx5::mr::PhysChunk;
use mlx5::{
    AccessFlags, CompletionQueue, ConnectOptions, Context, Hal, MemoryRegion, MwBind, MwType,
    ProtectionDomain, QpCaps, QpOptions, QueuePair, RecvWr, Remote, SendData, SendFlags, SendOp,
    SendWr, WcOpcode, WcStatus, WorkCompletion,
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
    registrations(dev, &pd, &mut pairs, &src, &dst, checks)?;
    windows(dev, &pd, &src, &dst, checks)?;
    errors(dev, &pd, &mut pairs, &src, &dst, checks)?;
    perf(c, &mut pairs, &src, &dst, quick)?;
    drop(big);
    Ok(())
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

fn register_big<H: Hal, B: BigMemory>(
    dev: &Ctx<H>,
    pd: &ProtectionDomain<H>,
    mem: B,
    checks: &mut Checks<'_>,
) -> R<BigMr<H, B>> {
    let c = checks.con;
    let chunks = mem.chunks();
    let Some(first) = chunks.first() else {
        return Err(mlx5::Error::Hal(mlx5::HalError::OutOfMemory).into());
    };
    let iova = first.bus;
    let before = dev.commands_sent();
    let t = c.now();
    // SAFETY: the memory is owned by `BigMr`, which deregisters before freeing it, and no
    // work request outlives `run_all`.
    let mr = unsafe { pd.reg_phys(&chunks, iova, AccessFlags::ALL) }?;
    let ns = (c.now() - t).as_nanos();
    let (entries, shift) = mr.translation();
    out!(
        c,
        "rdma: reg_mr {} MiB of {} pages at {:#x} ({} chunks): {} MTT entries (page 2^{}), {} commands, {} ns",
        mem.len() >> 20,
        PageName(mem.page_size()),
        iova,
        chunks.len(),
        entries,
        shift,
        dev.commands_sent() - before,
        ns
    );
    checks.check(
        "reg_mr of huge pages needs one command and at most one entry per huge page",
        {
            let pages = (mem.len() as u64).div_ceil(mem.page_size()) as usize;
            dev.commands_sent() - before == 1 && entries <= pages
        },
    );
    Ok(BigMr { mr, mem })
}

/// A page size as the unikernel's `PageSize` prints it (`Size2M`).
struct PageName(u64);

impl fmt::Display for PageName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            b if b >= 1 << 30 && b % (1 << 30) == 0 => write!(f, "Size{}G", b >> 30),
            b if b >= 1 << 20 && b % (1 << 20) == 0 => write!(f, "Size{}M", b >> 20),
            b => write!(f, "Size{}K", b >> 10),
        }
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

fn opcodes<H: Hal, B: BigMemory>(
    p: &mut Pairs<H>,
    src: &Mr<H>,
    dst: &Mr<H>,
    big: &BigMr<H, B>,
    checks: &mut Checks<'_>,
) -> R<()> {
    let len = 4096u32;
    let data = pattern(1, len as usize);
    src.write(0, &data)?;
    dst.write(0, &vec![0; len as usize])?;

    // RDMA WRITE.
    let sge = [src.sge(0, len)];
    let remote = Remote {
        addr: dst.addr(),
        rkey: dst.rkey(),
    };
    p.a.post_send(&[SendWr {
        wr_id: 1,
        op: SendOp::Write { remote, imm: None },
        data: SendData::Sges(&sge),
        flags: SIG,
    }])?;
    let wc = wait_one(&mut p.cq_a)?;
    let mut got = vec![0u8; len as usize];
    dst.read(0, &mut got)?;
    checks.check(
        "RDMA_WRITE 4 KiB",
        wc.status == WcStatus::Success && wc.wr_id == 1 && got == data,
    );

    // RDMA WRITE into the far end of the big region (its whole length is registered).
    let far = big.mem.len() as u64 - len as u64;
    let remote_far = Remote {
        addr: big.mr.addr() + far,
        rkey: big.mr.rkey(),
    };
    p.a.post_send(&[SendWr {
        wr_id: 2,
        op: SendOp::Write {
            remote: remote_far,
            imm: None,
        },
        data: SendData::Sges(&sge),
        flags: SIG,
    }])?;
    let wc = wait_one(&mut p.cq_a)?;
    let mut far_bytes = vec![0u8; len as usize];
    big.mem.read(far as usize, &mut far_bytes);
    checks.check(
        "RDMA_WRITE to the last 4 KiB of the huge-page region",
        wc.status == WcStatus::Success && far_bytes == data,
    );

    // RDMA WRITE with immediate: consumes a receive on the target.
    let rsge = [dst.sge(8192, 16)];
    p.b.post_recv(&[RecvWr {
        wr_id: 30,
        sges: &rsge,
    }])?;
    let remote_b = Remote {
        addr: dst.addr() + 4096,
        rkey: dst.rkey(),
    };
    let small = [src.sge(0, 256)];
    p.a.post_send(&[SendWr {
        wr_id: 3,
        op: SendOp::Write {
            remote: remote_b,
            imm: Some(0xfeed_f00d),
        },
        data: SendData::Sges(&small),
        flags: SIG,
    }])?;
    let s = wait_one(&mut p.cq_a)?;
    let r = wait_one(&mut p.cq_b)?;
    let mut got = vec![0u8; 256];
    dst.read(4096, &mut got)?;
    checks.check(
        "RDMA_WRITE_WITH_IMM",
        s.status == WcStatus::Success
            && r.status == WcStatus::Success
            && r.opcode == WcOpcode::RecvRdmaWithImm
            && r.imm == Some(0xfeed_f00d)
            && got[..] == data[..256],
    );

    // RDMA READ: pull the bytes back from the target into another part of the source MR.
    let lsge = [src.sge(16384, len)];
    let remote = Remote {
        addr: dst.addr(),
        rkey: dst.rkey(),
    };
    p.a.post_send(&[SendWr {
        wr_id: 4,
        op: SendOp::Read { remote },
        data: SendData::Sges(&lsge),
        flags: SIG,
    }])?;
    let wc = wait_one(&mut p.cq_a)?;
    let mut got = vec![0u8; len as usize];
    src.read(16384, &mut got)?;
    checks.check(
        "RDMA_READ 4 KiB",
        wc.status == WcStatus::Success && wc.opcode == WcOpcode::RdmaRead && got == data,
    );

    // SEND and SEND with immediate into posted receives.
    for (wr_id, imm) in [(5u64, None), (6, Some(0x1234_5678u32))] {
        let rsge = [dst.sge(32768, 2048)];
        p.b.post_recv(&[RecvWr {
            wr_id: 50 + wr_id,
            sges: &rsge,
        }])?;
        let ssge = [src.sge(0, 1500)];
        p.a.post_send(&[SendWr {
            wr_id,
            op: SendOp::Send { imm },
            data: SendData::Sges(&ssge),
            flags: SIG,
        }])?;
        let s = wait_one(&mut p.cq_a)?;
        let r = wait_one(&mut p.cq_b)?;
        let mut got = vec![0u8; 1500];
        dst.read(32768, &mut got)?;
        let name = if imm.is_some() {
            "SEND_WITH_IMM 1500 B"
        } else {
            "SEND 1500 B"
        };
        checks.check(
            name,
            s.status == WcStatus::Success
                && r.status == WcStatus::Success
                && r.byte_len == 1500
                && r.wr_id == 50 + wr_id
                && r.imm == imm
                && got[..] == data[..1500],
        );
    }

    // Inline SEND.
    let rsge = [dst.sge(40960, 64)];
    p.b.post_recv(&[RecvWr {
        wr_id: 70,
        sges: &rsge,
    }])?;
    p.a.post_send(&[SendWr {
        wr_id: 7,
        op: SendOp::Send { imm: None },
        data: SendData::Inline(b"inline payload, no lkey"),
        flags: SIG,
    }])?;
    let s = wait_one(&mut p.cq_a)?;
    let r = wait_one(&mut p.cq_b)?;
    let mut got = [0u8; 23];
    dst.read(40960, &mut got)?;
    checks.check(
        "SEND inline",
        s.status == WcStatus::Success && r.byte_len == 23 && &got == b"inline payload, no lkey",
    );

    // Atomics on an 8-byte aligned word of the target.
    let word = 49152u64;
    // The driver puts the device in host-endian atomic mode (atomic_req_8B_endianness_mode),
    // as Linux does: the word is in CPU byte order.
    dst.write(word, &0x1111_2222_3333_4444u64.to_ne_bytes())?;
    let target = Remote {
        addr: dst.addr() + word,
        rkey: dst.rkey(),
    };
    let old = [src.sge(49152, 8)];
    p.a.post_send(&[SendWr {
        wr_id: 8,
        op: SendOp::CompareSwap {
            remote: target,
            compare: 0x1111_2222_3333_4444,
            swap: 0x5555_6666_7777_8888,
        },
        data: SendData::Sges(&old),
        flags: SIG,
    }])?;
    let wc = wait_one(&mut p.cq_a)?;
    let (prev, now) = (read_u64(src, 49152)?, read_u64(dst, word)?);
    checks.check(
        "ATOMIC_CMP_AND_SWP",
        wc.status == WcStatus::Success
            && prev == 0x1111_2222_3333_4444
            && now == 0x5555_6666_7777_8888,
    );
    p.a.post_send(&[SendWr {
        wr_id: 9,
        op: SendOp::FetchAdd {
            remote: target,
            add: 5,
        },
        data: SendData::Sges(&old),
        flags: SIG,
    }])?;
    let wc = wait_one(&mut p.cq_a)?;
    let (prev, now) = (read_u64(src, 49152)?, read_u64(dst, word)?);
    checks.check(
        "ATOMIC_FETCH_AND_ADD",
        wc.status == WcStatus::Success
            && prev == 0x5555_6666_7777_8888
            && now == 0x5555_6666_7777_888d,
    );

    // Unsignaled WRITEs followed by a signaled one: one completion, all data there, one doorbell.
    let remote = Remote {
        addr: dst.addr(),
        rkey: dst.rkey(),
    };
    let s0 = [src.sge(0, 1024)];
    let wrs: Vec<SendWr<'_, H>> = (0..4)
        .map(|i| SendWr {
            wr_id: 100 + i,
            op: SendOp::Write {
                remote: Remote {
                    addr: remote.addr + 1024 * i,
                    rkey: remote.rkey,
                },
                imm: None,
            },
            data: SendData::Sges(&s0),
            flags: if i == 3 { SIG } else { SendFlags::NONE },
        })
        .collect();
    dst.write(0, &vec![0; 4096])?;
    p.a.post_send(&wrs)?;
    let wc = wait_one(&mut p.cq_a)?;
    let mut got = vec![0u8; 4096];
    dst.read(0, &mut got)?;
    let all_there = got.chunks(1024).all(|c| c == &data[..1024]);
    let mut extra = [WorkCompletion::default(); 4];
    let more = p.cq_a.poll(&mut extra)?;
    checks.check(
        "batch of 3 unsignaled + 1 signaled WRITE",
        wc.wr_id == 103 && all_there && more == 0,
    );
    Ok(())
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
    p.a.post_send(&[SendWr {
        wr_id: 300,
        op: SendOp::Write { remote, imm: None },
        data: SendData::Sges(&sge),
        flags: SIG,
    }])?;
    Ok(wait_one(&mut p.cq_a)?.status)
}

/// Registrations checked with RDMA traffic: an unaligned region at a chosen IOVA (first and
/// last byte reachable, one past the end refused), and a region from the UMR mkey cache
/// (no command; after dereg the old rkey gets REM_ACCESS_ERR).
fn registrations<H: Hal>(
    dev: &Ctx<H>,
    pd: &ProtectionDomain<H>,
    p: &mut Pairs<H>,
    src: &Mr<H>,
    dst: &Mr<H>,
    checks: &mut Checks<'_>,
) -> R<()> {
    let byte = pattern(0x5a, 1);
    src.write(0, &byte)?;
    dst.write(0, &[0u8; 8192])?;
    // 5000 bytes starting 100 bytes into `dst`'s memory, at an IOVA of another page offset.
    let chunk = [PhysChunk {
        bus: dst.addr() + 100,
        len: 5000,
    }];
    let iova = 0x1234_5678_9abc;
    // SAFETY: `dst` owns the memory and outlives the region (deregistered below); no WR
    // using it is left in flight.
    let mut mr = unsafe { pd.reg_phys_iova(&chunk, iova, AccessFlags::ALL) }?;
    let first = write_status(p, src, 1, iova, mr.rkey())?;
    let last = write_status(p, src, 1, iova + 4999, mr.rkey())?;
    let (mut a, mut b) = ([0u8; 1], [0u8; 1]);
    dst.read(100, &mut a)?;
    dst.read(5099, &mut b)?;
    checks.check(
        "unaligned region at a chosen IOVA: first and last byte written by RDMA_WRITE",
        first == WcStatus::Success && last == WcStatus::Success && a == [byte[0]] && b == [byte[0]],
    );
    let past = write_status(p, src, 1, iova + 5000, mr.rkey())?;
    let mut c = [0u8; 1];
    dst.read(5100, &mut c)?;
    checks.check(
        "one byte past the unaligned region gets REM_ACCESS_ERR",
        past == WcStatus::RemAccessErr && c == [0],
    );
    recover(p)?;
    mr.dereg()?;

    // The mkey cache: registration and deregistration are UMR WQEs.
    dev.enable_mkey_cache(1)?;
    let chunk = [PhysChunk {
        bus: dst.addr() + 8192,
        len: 4096,
    }];
    let iova = 0x7000_0000_0000;
    let before = dev.commands_sent();
    // SAFETY: as above.
    let mut mr = unsafe { pd.reg_phys_iova(&chunk, iova, AccessFlags::ALL) }?;
    let ok = write_status(p, src, 1, iova + 4095, mr.rkey())?;
    let mut d = [0u8; 1];
    dst.read(8192 + 4095, &mut d)?;
    let rkey = mr.rkey();
    mr.dereg()?;
    let cmds = dev.commands_sent() - before;
    checks.check(
        "region from the UMR mkey cache: no command to register or deregister, RDMA_WRITE lands",
        cmds == 0 && ok == WcStatus::Success && d == [byte[0]],
    );
    dst.write(8192 + 4095, &[0])?;
    let stale = write_status(p, src, 1, iova + 4095, rkey)?;
    dst.read(8192 + 4095, &mut d)?;
    checks.check(
        "after dereg of a cached region its rkey gets REM_ACCESS_ERR",
        stale == WcStatus::RemAccessErr && d == [0],
    );
    recover(p)?;
    Ok(())
}

/// A type 2 memory window over part of a region, checked with RDMA traffic: bound by a BIND_MW
/// work request on the responder QP (a new rkey), RDMA WRITE and READ through the window's
/// rkey, an access just outside the window refused, LOCAL_INV, and the old rkey refused.
fn windows<H: Hal>(
    dev: &Ctx<H>,
    pd: &ProtectionDomain<H>,
    src: &Mr<H>,
    dst: &Mr<H>,
    checks: &mut Checks<'_>,
) -> R<()> {
    // QPs with room for window WQEs (QpOptions::mw_bind); b owns the window.
    let caps = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let opts = QpOptions {
        mw_bind: true,
        ..QpOptions::default()
    };
    let cq_a = dev.create_cq(64)?;
    let cq_b = dev.create_cq(64)?;
    let a = pd.create_qp_with(&cq_a, &cq_a, &caps, &opts)?;
    let b = pd.create_qp_with(&cq_b, &cq_b, &caps, &opts)?;
    let mut p = Pairs { a, b, cq_a, cq_b };
    connect(&mut p.a, &mut p.b)?;
    let target = pd.alloc_mr(
        16 * 1024,
        AccessFlags(AccessFlags::ALL.0 | AccessFlags::MW_BIND.0),
    )?;
    target.write(0, &[0u8; 16 * 1024])?;
    let mut mw = pd.alloc_mw(MwType::Type2)?;
    let first = mw.rkey();
    let access = AccessFlags(AccessFlags::REMOTE_READ.0 | AccessFlags::REMOTE_WRITE.0);
    let (off, len) = (4096u64, 4096u64);
    let bind = MwBind {
        mr: &target,
        addr: target.addr() + off,
        len,
        access,
    };
    let rkey = p.b.post_bind_mw(400, &mut mw, &bind, SIG)?;
    let wc = wait_one(&mut p.cq_b)?;
    checks.check(
        "memory window bound over part of a region by BIND_MW: new rkey, BIND_MW completion",
        wc.status == WcStatus::Success
            && wc.opcode == WcOpcode::BindMw
            && rkey != first
            && rkey == mw.rkey(),
    );
    let data = pattern(0x77, 4096);
    src.write(0, &data)?;
    let at = target.addr() + off;
    let w = write_status(&mut p, src, 4096, at, rkey)?;
    let mut got = vec![0u8; 4096];
    target.read(off, &mut got)?;
    let landed = got == data;
    dst.write(0, &[0u8; 4096])?;
    let sge = [dst.sge(0, 4096)];
    let remote = Remote { addr: at, rkey };
    p.a.post_send(&[SendWr {
        wr_id: 401,
        op: SendOp::Read { remote },
        data: SendData::Sges(&sge),
        flags: SIG,
    }])?;
    let r = wait_one(&mut p.cq_a)?;
    dst.read(0, &mut got)?;
    checks.check(
        "RDMA_WRITE and RDMA_READ through the window's rkey",
        w == WcStatus::Success && landed && r.status == WcStatus::Success && got == data,
    );
    // One byte past the window, still inside the region.
    let past = write_status(&mut p, src, 1, at + len, rkey)?;
    let mut c = [0u8; 1];
    target.read(off + len, &mut c)?;
    checks.check(
        "access outside the window gets REM_ACCESS_ERR and writes nothing",
        past == WcStatus::RemAccessErr && c == [0],
    );
    recover(&mut p)?;
    // LOCAL_INV on the window's QP; then the rkey names nothing.
    p.b.post_send(&[SendWr {
        wr_id: 402,
        op: SendOp::LocalInv { rkey },
        data: SendData::Sges(&[]),
        flags: SIG,
    }])?;
    let inv = wait_one(&mut p.cq_b)?;
    target.write(off, &[0u8; 8])?;
    let stale = write_status(&mut p, src, 8, at, rkey)?;
    let mut z = [0u8; 8];
    target.read(off, &mut z)?;
    checks.check(
        "after LOCAL_INV the window's old rkey gets REM_ACCESS_ERR",
        inv.status == WcStatus::Success
            && inv.opcode == WcOpcode::LocalInv
            && stale == WcStatus::RemAccessErr
            && z == [0; 8],
    );
    recover(&mut p)?;
    mw.dealloc()?;
    drop(target);
    Ok(())
}

fn read_u64<H: Hal>(mr: &Mr<H>, off: u64) -> R<u64> {
    let mut b = [0u8; 8];
    mr.read(off, &mut b)?;
    Ok(u64::from_ne_bytes(b))
}

fn errors<H: Hal>(
    dev: &Ctx<H>,
    pd: &ProtectionDomain<H>,
    p: &mut Pairs<H>,
    src: &Mr<H>,
    dst: &Mr<H>,
    checks: &mut Checks<'_>,
) -> R<()> {
    // An RDMA WRITE past the end of the target region: remote access error, QP to error, and
    // nothing outside the region touched.
    let guard = pattern(9, 64);
    dst.write(BUF as u64 - 64, &guard)?;
    let sge = [src.sge(0, 128)];
    let remote = Remote {
        addr: dst.addr() + BUF as u64 - 64,
        rkey: dst.rkey(),
    };
    p.a.post_send(&[SendWr {
        wr_id: 200,
        op: SendOp::Write { remote, imm: None },
        data: SendData::Sges(&sge),
        flags: SIG,
    }])?;
    let wc = wait_one(&mut p.cq_a)?;
    let mut tail = vec![0u8; 64];
    dst.read(BUF as u64 - 64, &mut tail)?;
    checks.check(
        "out-of-bounds RDMA_WRITE gets REM_ACCESS_ERR and writes nothing",
        wc.status == WcStatus::RemAccessErr && tail == guard,
    );
    recover(p)?;

    // A PD mismatch: the target region belongs to another PD than the responder QP.
    let other_pd = dev.alloc_pd()?;
    let foreign = other_pd.alloc_mr(4096, AccessFlags::ALL)?;
    foreign.write(0, &[0xee; 64])?;
    let remote = Remote {
        addr: foreign.addr(),
        rkey: foreign.rkey(),
    };
    let sge = [src.sge(0, 64)];
    p.a.post_send(&[SendWr {
        wr_id: 201,
        op: SendOp::Write { remote, imm: None },
        data: SendData::Sges(&sge),
        flags: SIG,
    }])?;
    let wc = wait_one(&mut p.cq_a)?;
    let mut got = [0u8; 64];
    foreign.read(0, &mut got)?;
    checks.check(
        "RDMA_WRITE with an rkey of another PD is refused",
        wc.status == WcStatus::RemAccessErr && got == [0xee; 64],
    );
    recover(p)?;

    // The same mismatch on the local side: an lkey from another PD in the gather list.
    let lsge = [foreign.sge(0, 64)];
    let remote = Remote {
        addr: dst.addr(),
        rkey: dst.rkey(),
    };
    p.a.post_send(&[SendWr {
        wr_id: 202,
        op: SendOp::Write { remote, imm: None },
        data: SendData::Sges(&lsge),
        flags: SIG,
    }])?;
    let wc = wait_one(&mut p.cq_a)?;
    checks.check(
        "gather from an lkey of another PD gets LOC_PROT_ERR",
        wc.status == WcStatus::LocProtErr,
    );
    recover(p)?;
    drop(foreign);
    drop(other_pd);
    let _ = pd;

    // Posting on a QP in RESET is refused before anything reaches the device.
    p.a.to_err()?;
    p.a.to_reset()?;
    let before = dev.commands_sent();
    let r = p.a.post_send(&[SendWr {
        wr_id: 203,
        op: SendOp::Send { imm: None },
        data: SendData::Inline(b"x"),
        flags: SIG,
    }]);
    checks.check(
        "post_send in RESET is an error, nothing sent",
        r.is_err() && dev.commands_sent() == before,
    );
    p.b.to_err()?;
    drain(&mut p.cq_b);
    p.b.to_reset()?;
    connect(&mut p.a, &mut p.b)?;
    Ok(())
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

/// ib_write_bw, ib_read_bw and ib_write_lat in the style of perftest.
fn perf<H: Hal>(c: &dyn Console, p: &mut Pairs<H>, src: &Mr<H>, dst: &Mr<H>, quick: bool) -> R<()> {
    let iters: u64 = if quick { 64 } else { 512 };
    let sizes: &[u32] = &[64, 1024, 4096, 16384, 65536];
    out!(
        c,
        "rdma: ---------------------------------------------------------------------------"
    );
    for (name, read) in [("RDMA_Write", false), ("RDMA_Read", true)] {
        out!(
            c,
            "rdma: {name} BW (loopback RC, {iters} iterations, 16 WRs per doorbell)"
        );
        out!(c, "rdma:  #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]");
        for &size in sizes {
            let (peak, avg, mpps) = bw(c, p, src, dst, size, iters, read)?;
            out!(
                c,
                "rdma:  {size:<10} {iters:<14} {peak:<18.2} {avg:<20.2} {mpps:.6}"
            );
        }
    }
    let lat_iters = if quick { 32 } else { 256 };
    out!(
        c,
        "rdma: RDMA_Write Latency (loopback RC, {} iterations, one signaled WR each)",
        lat_iters
    );
    out!(
        c,
        "rdma:  #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]"
    );
    for &size in &[2u32, 64, 4096] {
        let (min, max, typ) = lat(c, p, src, dst, size, lat_iters)?;
        out!(
            c,
            "rdma:  {:<6} {:<14} {:<14.2} {:<12.2} {:.2}",
            size,
            lat_iters,
            min,
            max,
            typ
        );
    }
    out!(
        c,
        "rdma: ---------------------------------------------------------------------------"
    );
    Ok(())
}

/// (peak MB/s over one batch, average MB/s, Mpps).
fn bw<H: Hal>(
    c: &dyn Console,
    p: &mut Pairs<H>,
    src: &Mr<H>,
    dst: &Mr<H>,
    size: u32,
    iters: u64,
    read: bool,
) -> R<(f64, f64, f64)> {
    const BATCH: u64 = 16;
    let remote = Remote {
        addr: dst.addr(),
        rkey: dst.rkey(),
    };
    let sge = [src.sge(0, size)];
    let start = c.now();
    let mut peak = 0f64;
    let mut done = 0;
    while done < iters {
        let n = BATCH.min(iters - done);
        let t = c.now();
        let wrs: Vec<SendWr<'_, H>> = (0..n)
            .map(|i| SendWr {
                wr_id: done + i,
                op: if read {
                    SendOp::Read { remote }
                } else {
                    SendOp::Write { remote, imm: None }
                },
                data: SendData::Sges(&sge),
                flags: if i == n - 1 { SIG } else { SendFlags::NONE },
            })
            .collect();
        p.a.post_send(&wrs)?;
        let wc = wait_one(&mut p.cq_a)?;
        if wc.status != WcStatus::Success {
            return Err(AppError::Completion(wc.status));
        }
        let secs = (c.now() - t).as_secs_f64();
        if secs > 0.0 {
            peak = peak.max((n * size as u64) as f64 / secs / 1e6);
        }
        done += n;
    }
    let secs = (c.now() - start).as_secs_f64().max(1e-9);
    Ok((
        peak,
        (iters * size as u64) as f64 / secs / 1e6,
        iters as f64 / secs / 1e6,
    ))
}

/// (min, max, typical = median) microseconds from post to completion.
fn lat<H: Hal>(
    c: &dyn Console,
    p: &mut Pairs<H>,
    src: &Mr<H>,
    dst: &Mr<H>,
    size: u32,
    iters: usize,
) -> R<(f64, f64, f64)> {
    let remote = Remote {
        addr: dst.addr(),
        rkey: dst.rkey(),
    };
    let sge = [src.sge(0, size)];
    let mut us = Vec::with_capacity(iters);
    for i in 0..iters {
        let t = c.now();
        p.a.post_send(&[SendWr {
            wr_id: i as u64,
            op: SendOp::Write { remote, imm: None },
            data: SendData::Sges(&sge),
            flags: SIG,
        }])?;
        let wc = wait_one(&mut p.cq_a)?;
        if wc.status != WcStatus::Success {
            return Err(AppError::Completion(wc.status));
        }
        us.push((c.now() - t).as_nanos() as f64 / 1000.0);
    }
    us.sort_by(|a, b| a.partial_cmp(b).unwrap_or(core::cmp::Ordering::Equal));
    Ok((us[0], us[us.len() - 1], us[us.len() / 2]))
}
