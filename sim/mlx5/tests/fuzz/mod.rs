//! Fuzz targets for the emulated ConnectX-5: the command queue, commands, WQEs, BAR writes
//! and the proxy socket (issue 7, "hostile input and a failing device").
//!
//! The rule they check: every garbage input gets a PRM error or is dropped. The model never
//! panics, never hangs (every step runs under a watchdog) and never writes outside the memory
//! it was given: guest RAM is a memfd mapped through [`MappedMemory`], with guard regions
//! before and after the mapped section, in the same file, checked after every step.
//!
//! Shared by `tests/fuzz.rs` (fixed-seed smoke runs under `cargo test`, plus the regression
//! seeds) and `src/bin/fuzz.rs` (`cargo run -p mlx5-sim --bin fuzz -- --seed N --iters N
//! --target T`). Include with `#[path = "raw/mod.rs"] mod raw;`, `#[path =
//! "datapath_common/mod.rs"] mod dp;` and `#[path = "fuzz/mod.rs"] mod fuzz;`.
//!
//! Everything is deterministic for a seed (inline execution, no device thread), except the
//! RC retransmission timers, which run on wall-clock time.
#![allow(dead_code)]

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use mlx5_prm::*;
use mlx5_sim::memory::MemSection;
use mlx5_sim::pci::PciFunction;
use mlx5_sim::{ExecMode, GuestMemory, Intx, MappedMemory, Mlx5Function, Mlx5Options, ProxyServer};
use std::result::Result;

use super::dp::{self, Env};
use super::raw::{self, Device, Raw};

// ---------------------------------------------------------------------------------------------
// PRNG
// ---------------------------------------------------------------------------------------------

/// SplitMix64 (Steele, Lea, Flood: "Fast splittable pseudorandom number generators", 2014):
/// small, fast, and good enough to drive a fuzzer deterministically.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn u32(&mut self) -> u32 {
        self.u64() as u32
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.u64() % n.max(1)
    }
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    /// True with probability `per_mille / 1000`.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
    pub fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let v = self.u64().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        self.fill(&mut v);
        v
    }
    /// A value likely to hit edges: 0, 1, all ones, powers of two and their neighbours,
    /// small numbers, or anything.
    pub fn interesting(&mut self) -> u64 {
        match self.below(8) {
            0 => 0,
            1 => self.below(64),
            2 => u64::MAX >> self.below(64),
            3 => (1u64 << self.below(64))
                .wrapping_add(self.range(0, 2))
                .wrapping_sub(1),
            4 => self.pick(&[
                0x7fff_ffff,
                0x8000_0000,
                0xffff_ffff,
                0xff_ffff,
                0xffff,
                0xff,
            ]),
            _ => self.u64(),
        }
    }
}

/// The seed of iteration `iter` of `target` in a run seeded with `seed`.
pub fn iter_seed(seed: u64, target: Target, iter: u64) -> u64 {
    let mut r = Rng::new(seed ^ (target as u64).wrapping_mul(0xa076_1d64_78bd_642f));
    r.0 ^= iter.wrapping_mul(0xe703_7ed1_a0b4_28db);
    r.u64()
}

// ---------------------------------------------------------------------------------------------
// Guarded guest memory
// ---------------------------------------------------------------------------------------------

/// Bus address of the guest RAM the fuzzed model gets.
pub const BASE: u64 = 0x1_0000_0000;
/// Guard bytes before and after the mapped section, in the same file.
pub const GUARD: u64 = 64 << 10;
const GUARD_BYTE: u8 = 0xa5;

/// A memfd of `GUARD + size + GUARD` bytes whose middle is the device's guest RAM.
pub struct GuardedRam {
    pub file: File,
    pub size: u64,
    pub mem: Arc<MappedMemory>,
    next: AtomicU64,
}

impl GuardedRam {
    pub fn new(size: u64) -> GuardedRam {
        let name = std::ffi::CString::new("mlx5-fuzz-ram").unwrap();
        // SAFETY: a valid NUL-terminated name; the result is checked.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
        // SAFETY: a fresh descriptor nobody else owns.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        file.set_len(GUARD + size + GUARD).unwrap();
        let guard = vec![GUARD_BYTE; GUARD as usize];
        file.write_all_at(&guard, 0).unwrap();
        file.write_all_at(&guard, GUARD + size).unwrap();
        let mem = Arc::new(MappedMemory::new());
        mem.replace(vec![MemSection {
            gpa: BASE,
            size,
            offset: GUARD,
            fd: OwnedFd::from(file.try_clone().unwrap()),
        }])
        .unwrap();
        GuardedRam {
            file,
            size,
            mem,
            next: AtomicU64::new(BASE),
        }
    }

    /// Bump allocation inside the section (never freed; an epoch makes a new one).
    pub fn alloc(&self, size: usize, align: usize) -> u64 {
        let a = align.max(8) as u64;
        let mut cur = self.next.load(Ordering::Relaxed);
        loop {
            let at = (cur + a - 1) & !(a - 1);
            let end = at + size as u64;
            assert!(end <= BASE + self.size, "fuzz harness out of guest RAM");
            match self
                .next
                .compare_exchange(cur, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return at,
                Err(v) => cur = v,
            }
        }
    }

    /// Free bytes left for [`alloc`](Self::alloc).
    pub fn left(&self) -> u64 {
        BASE + self.size - self.next.load(Ordering::Relaxed)
    }

    /// Err if a byte of either guard region changed: the model wrote outside its memory.
    pub fn check_guards(&self) -> Result<(), String> {
        let mut buf = vec![0u8; GUARD as usize];
        for (name, at) in [("below", 0), ("above", GUARD + self.size)] {
            self.file.read_exact_at(&mut buf, at).unwrap();
            if let Some(i) = buf.iter().position(|&b| b != GUARD_BYTE) {
                return Err(format!(
                    "guard region {name} the guest RAM changed at file offset {:#x}",
                    at + i as u64
                ));
            }
        }
        Ok(())
    }

    /// Fills the whole section with random bytes.
    pub fn randomize(&self, rng: &mut Rng) {
        let chunk = rng.bytes(64 << 10);
        let mut off = 0;
        while off < self.size {
            let n = (self.size - off).min(chunk.len() as u64) as usize;
            // Rotate so pages differ.
            let rot = rng.below(chunk.len() as u64) as usize;
            let mut c = chunk.clone();
            c.rotate_left(rot);
            self.file.write_all_at(&c[..n], GUARD + off).unwrap();
            off += n as u64;
        }
    }
}

/// The ConnectX-5 function (inline execution, no initialization delay) over guarded RAM.
pub struct Guarded {
    pub func: Mutex<Mlx5Function>,
    pub ram: GuardedRam,
}

impl Guarded {
    pub fn new(size: u64) -> Guarded {
        let ram = GuardedRam::new(size);
        let mut opts = Mlx5Options {
            exec: ExecMode::Inline,
            ..Default::default()
        };
        opts.init.init_delay = Duration::ZERO;
        let mut func = Mlx5Function::with_options(opts);
        func.set_guest_memory(ram.mem.clone());
        func.set_intx(Intx::new());
        Guarded {
            func: Mutex::new(func),
            ram,
        }
    }
    fn f(&self) -> std::sync::MutexGuard<'_, Mlx5Function> {
        self.func.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub fn bar_read(&self, off: u64, size: u32) -> u64 {
        self.f().bar_read(0, off, size)
    }
    pub fn bar_write(&self, off: u64, v: u64, size: u32) {
        self.f().bar_write(0, off, v, size)
    }
}

impl Device for Guarded {
    fn mem(&self) -> &dyn GuestMemory {
        &*self.ram.mem
    }
    fn alloc(&self, size: usize, align: usize) -> u64 {
        self.ram.alloc(size, align)
    }
    fn read32(&self, offset: u64) -> u32 {
        self.bar_read(offset, 4) as u32
    }
    fn write32(&self, offset: u64, value: u32) {
        self.bar_write(offset, value.into(), 4)
    }
    fn write64(&self, offset: u64, value: u64) {
        self.bar_write(offset, value, 8)
    }
    fn settle(&self) -> bool {
        true
    }
    fn poll(&self) {
        let f = self.f();
        let mut h = f.lock_hca();
        mlx5_sim::datapath::poll_wire(&mut h);
    }
}

// ---------------------------------------------------------------------------------------------
// Targets and the runner
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Random command queue entries and mailbox chains, random doorbell masks.
    CmdQueue = 1,
    /// Random inboxes per opcode on a brought-up device.
    Commands = 2,
    /// Random WQE bytes and doorbells on a live, connected QP pair.
    Wqe = 3,
    /// Random BAR0 accesses (offsets, sizes, values).
    Bar = 4,
    /// Random proxy protocol messages on the socket.
    Proxy = 5,
}

pub const ALL_TARGETS: &[Target] = &[
    Target::CmdQueue,
    Target::Commands,
    Target::Wqe,
    Target::Bar,
    Target::Proxy,
];

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::CmdQueue => "cmdq",
            Target::Commands => "cmd",
            Target::Wqe => "wqe",
            Target::Bar => "bar",
            Target::Proxy => "proxy",
        }
    }
    pub fn parse(s: &str) -> Option<Target> {
        ALL_TARGETS.iter().copied().find(|t| t.name() == s)
    }
}

/// Something the fuzzer found: what, and how to get there again.
#[derive(Debug, Clone)]
pub struct Finding {
    pub target: Target,
    pub seed: u64,
    pub iter: u64,
    pub what: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} seed {:#x} iteration {}: {} (reproduce: cargo run -p mlx5-sim --bin fuzz -- \
             --target {} --seed {:#x} --iters {})",
            self.target.name(),
            self.seed,
            self.iter,
            self.what,
            self.target.name(),
            self.seed,
            self.iter + 1
        )
    }
}

/// What the targets reached (to see that random input gets past the first checks).
#[derive(Default)]
pub struct Stats {
    /// Commands executed by the `cmd` target, and how many of them succeeded.
    pub commands: AtomicU64,
    pub commands_ok: AtomicU64,
    /// CQEs reaped by the `wqe` target, and how many were successful completions.
    pub cqes: AtomicU64,
    pub cqes_ok: AtomicU64,
}

pub static STATS: Stats = Stats {
    commands: AtomicU64::new(0),
    commands_ok: AtomicU64::new(0),
    cqes: AtomicU64::new(0),
    cqes_ok: AtomicU64::new(0),
};

/// How long one step may take before it counts as a hang (generous: debug builds, two shared
/// cores). A deadline, not a timing assertion.
pub const STEP_DEADLINE: Duration = Duration::from_secs(60);

/// Iterations between fresh devices.
const EPOCH: u64 = 200;

/// Runs `iters` iterations of `target` from `seed` on a worker thread under a watchdog.
/// Returns the first finding, if any.
pub fn run(target: Target, seed: u64, iters: u64) -> Result<u64, Finding> {
    let (tx, rx) = mpsc::channel::<Result<u64, Finding>>();
    let worker = std::thread::Builder::new()
        .name(format!("fuzz-{}", target.name()))
        .spawn(move || {
            let mut state: Option<Box<dyn Epoch>> = None;
            for iter in 0..iters {
                let s = iter_seed(seed, target, iter);
                let mut rng = Rng::new(s);
                let r = catch_unwind(AssertUnwindSafe(|| {
                    if iter % EPOCH == 0 || state.as_ref().is_some_and(|e| e.worn_out()) {
                        state = None; // drop the old one first
                        state = Some(new_epoch(target, &mut rng));
                    }
                    let e = state.as_mut().expect("epoch");
                    e.step(&mut rng)?;
                    e.check()
                }));
                let what = match r {
                    Ok(Ok(())) => {
                        let _ = tx.send(Ok(iter));
                        continue;
                    }
                    Ok(Err(w)) => w,
                    Err(p) => format!("panic: {}", panic_text(&p)),
                };
                let _ = tx.send(Err(Finding {
                    target,
                    seed,
                    iter,
                    what,
                }));
                return;
            }
        })
        .expect("spawn fuzz worker");
    let mut done = 0u64;
    loop {
        match rx.recv_timeout(STEP_DEADLINE) {
            Ok(Ok(i)) => done = i + 1,
            Ok(Err(f)) => {
                let _ = worker.join();
                return Err(f);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let _ = worker.join();
                return Ok(done);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // The worker is stuck inside the model; leave it (it cannot be stopped).
                return Err(Finding {
                    target,
                    seed,
                    iter: done,
                    what: format!("hang: no progress for {STEP_DEADLINE:?}"),
                });
            }
        }
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".into()
    }
}

/// One device (or connection) and what a target does with it each step.
trait Epoch {
    fn step(&mut self, rng: &mut Rng) -> Result<(), String>;
    /// Checks after every step: the guard regions.
    fn check(&mut self) -> Result<(), String>;
    /// True when the state is used up (out of memory for the harness, QPs dead, ...).
    fn worn_out(&self) -> bool {
        false
    }
}

fn new_epoch(target: Target, rng: &mut Rng) -> Box<dyn Epoch> {
    match target {
        Target::CmdQueue => Box::new(CmdQueueFuzz::new(rng)),
        Target::Commands => Box::new(CommandFuzz::new()),
        Target::Wqe => Box::new(WqeFuzz::new()),
        Target::Bar => Box::new(BarFuzz::new(rng)),
        Target::Proxy => Box::new(ProxyFuzz::new()),
    }
}

// ---------------------------------------------------------------------------------------------
// Command queue
// ---------------------------------------------------------------------------------------------

/// Opcodes the model implements (and a few it does not).
const OPCODES: &[u16] = &[
    opcode::QUERY_HCA_CAP,
    opcode::QUERY_ADAPTER,
    opcode::INIT_HCA,
    opcode::TEARDOWN_HCA,
    opcode::ENABLE_HCA,
    opcode::DISABLE_HCA,
    opcode::QUERY_PAGES,
    opcode::MANAGE_PAGES,
    opcode::SET_HCA_CAP,
    opcode::QUERY_ISSI,
    opcode::SET_ISSI,
    opcode::SET_DRIVER_VERSION,
    opcode::CREATE_MKEY,
    opcode::QUERY_MKEY,
    opcode::DESTROY_MKEY,
    opcode::CREATE_EQ,
    opcode::DESTROY_EQ,
    opcode::QUERY_EQ,
    opcode::CREATE_CQ,
    opcode::DESTROY_CQ,
    opcode::QUERY_CQ,
    opcode::MODIFY_CQ,
    opcode::CREATE_QP,
    opcode::DESTROY_QP,
    opcode::RST2INIT_QP,
    opcode::INIT2RTR_QP,
    opcode::RTR2RTS_QP,
    opcode::RTS2RTS_QP,
    opcode::SQERR2RTS_QP,
    opcode::QP_2ERR,
    opcode::QP_2RST,
    opcode::QUERY_QP,
    opcode::SQD_RTS_QP,
    opcode::INIT2INIT_QP,
    opcode::QUERY_VPORT_STATE,
    opcode::QUERY_NIC_VPORT_CONTEXT,
    opcode::MODIFY_NIC_VPORT_CONTEXT,
    opcode::QUERY_ROCE_ADDRESS,
    opcode::SET_ROCE_ADDRESS,
    opcode::NOP,
    opcode::ALLOC_PD,
    opcode::DEALLOC_PD,
    opcode::ALLOC_UAR,
    opcode::DEALLOC_UAR,
    opcode::ACCESS_REGISTER,
    opcode::ALLOC_TRANSPORT_DOMAIN,
    opcode::DEALLOC_TRANSPORT_DOMAIN,
    opcode::CREATE_SRQ,
    opcode::CREATE_RQ,
];

fn random_opcode(rng: &mut Rng) -> u16 {
    match rng.below(20) {
        0 => rng.u32() as u16,
        1 => rng.pick(opcode::ALL).1,
        _ => rng.pick(OPCODES),
    }
}

/// Mailbox blocks the cmdq target builds chains from.
const POOL: usize = 48;

struct CmdQueueFuzz {
    raw: Raw<Guarded>,
    pool: Vec<u64>,
}

impl CmdQueueFuzz {
    fn new(rng: &mut Rng) -> CmdQueueFuzz {
        let mut raw = Raw::new(Guarded::new(4 << 20));
        if rng.chance(500) {
            raw.bring_up();
        }
        let pool = (0..POOL)
            .map(|_| {
                raw.dev
                    .alloc(cmdq::MAILBOX_BLOCK_SIZE, cmdq::MAILBOX_BLOCK_ALIGN)
            })
            .collect();
        CmdQueueFuzz { raw, pool }
    }

    /// A pointer for an entry or a `next` field.
    fn pointer(&self, rng: &mut Rng) -> u64 {
        match rng.below(10) {
            0..=5 => rng.pick(&self.pool),
            6 => BASE + rng.below(self.raw.dev.ram.size + 4096), // anywhere, maybe unaligned
            7 => 0,
            8 => rng.pick(&self.pool) + rng.range(1, 1023), // misaligned
            _ => rng.interesting(),
        }
    }

    /// A length: small, block-sized, a chain's worth, or absurd.
    fn length(rng: &mut Rng) -> u32 {
        match rng.below(6) {
            0 => rng.range(0, 16) as u32,
            1 => 16 + rng.below(512 * 4) as u32,
            2 => 16 + 512 * rng.range(1, 30) as u32,
            3 => rng.interesting() as u32,
            _ => rng.range(8, 0x400) as u32,
        }
    }

    /// Writes a chain of `n` blocks starting at a random pool block; returns its head.
    fn chain(&self, rng: &mut Rng, token: u8) -> u64 {
        let mem = self.raw.dev.mem();
        let n = rng.range(1, 8) as usize;
        let mut idx: Vec<usize> = (0..n).map(|_| rng.below(POOL as u64) as usize).collect();
        if rng.chance(700) {
            idx.dedup(); // usually no cycles; sometimes a block repeats
        }
        for (k, &b) in idx.iter().enumerate() {
            let mut blk = [0u8; cmdq::MAILBOX_BLOCK_SIZE];
            if rng.chance(500) {
                rng.fill(&mut blk[..512]);
            } else {
                for _ in 0..rng.range(0, 8) {
                    let at = rng.below(512) as usize & !3;
                    blk[at..at + 4].copy_from_slice(&(rng.interesting() as u32).to_be_bytes());
                }
            }
            let next = if k + 1 < idx.len() {
                if rng.chance(900) {
                    self.pool[idx[k + 1]]
                } else {
                    self.pointer(rng)
                }
            } else if rng.chance(900) {
                0
            } else {
                self.pointer(rng)
            };
            blk[cmd_prot_block::NEXT..cmd_prot_block::NEXT + 8]
                .copy_from_slice(&next.to_be_bytes());
            let num = if rng.chance(850) { k as u32 } else { rng.u32() };
            blk[cmd_prot_block::BLOCK_NUM..cmd_prot_block::BLOCK_NUM + 4]
                .copy_from_slice(&num.to_be_bytes());
            blk[cmd_prot_block::TOKEN] = if rng.chance(850) {
                token
            } else {
                rng.u32() as u8
            };
            if rng.chance(100) {
                blk[cmd_prot_block::CTRL_SIG] = rng.u32() as u8;
                blk[cmd_prot_block::SIG] = rng.u32() as u8;
            }
            mem.write(self.pool[b], &blk).unwrap();
        }
        self.pool[idx[0]]
    }
}

impl Epoch for CmdQueueFuzz {
    fn step(&mut self, rng: &mut Rng) -> Result<(), String> {
        let cmdq_addr = self.raw.cmdq;
        let mut mask = 0u32;
        for _ in 0..rng.range(1, 4) {
            let slot = rng.below(32) as u32;
            mask |= 1 << slot;
            let token = rng.u32() as u8;
            let op = random_opcode(rng);
            let mut e = [0u8; 64];
            if rng.chance(100) {
                rng.fill(&mut e);
            } else {
                e[cmd_layout::TYPE] = if rng.chance(900) {
                    cmdq::PCI_CMD_XPORT
                } else {
                    rng.u32() as u8
                };
                let inlen = Self::length(rng);
                e[cmd_layout::INLEN..cmd_layout::INLEN + 4].copy_from_slice(&inlen.to_be_bytes());
                let in_ptr = if rng.chance(700) {
                    self.chain(rng, token)
                } else {
                    self.pointer(rng)
                };
                e[cmd_layout::IN_PTR..cmd_layout::IN_PTR + 8]
                    .copy_from_slice(&in_ptr.to_be_bytes());
                rng.fill(&mut e[cmd_layout::IN..cmd_layout::IN + 16]);
                if rng.chance(800) {
                    e[cmd_layout::IN..cmd_layout::IN + 2].copy_from_slice(&op.to_be_bytes());
                    e[cmd_layout::IN + 2..cmd_layout::IN + 6].fill(0);
                }
                let outlen = Self::length(rng);
                e[cmd_layout::OUTLEN..cmd_layout::OUTLEN + 4]
                    .copy_from_slice(&outlen.to_be_bytes());
                let out_ptr = if rng.chance(700) {
                    self.chain(rng, token)
                } else {
                    self.pointer(rng)
                };
                e[cmd_layout::OUT_PTR..cmd_layout::OUT_PTR + 8]
                    .copy_from_slice(&out_ptr.to_be_bytes());
                e[cmd_layout::TOKEN] = token;
                if rng.chance(50) {
                    e[cmd_layout::SIG] = rng.u32() as u8;
                }
                e[cmd_layout::STATUS_OWN] = if rng.chance(950) {
                    cmdq::OWNER_HW
                } else {
                    rng.u32() as u8
                };
            }
            self.raw
                .dev
                .mem()
                .write(cmdq_addr + u64::from(slot) * 64, &e)
                .unwrap();
        }
        if rng.chance(100) {
            mask = rng.u32();
        }
        self.raw.dev.set_reg32(0x18, mask);
        Ok(())
    }
    fn check(&mut self) -> Result<(), String> {
        self.raw.dev.ram.check_guards()
    }
}

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

struct CommandFuzz {
    env: Env<Guarded>,
    /// Object numbers seen in outputs (planted into later inputs).
    ids: Vec<u32>,
    /// Guest pages the harness may offer (MANAGE_PAGES, PAS entries).
    pages: Vec<u64>,
    /// A contiguous scratch area for queue buffers built from templates.
    scratch: u64,
    cqs: Vec<u32>,
    qps: Vec<u32>,
    mkeys: Vec<u32>,
    pds: Vec<u32>,
}

const SCRATCH: u64 = 64 * 4096;

impl CommandFuzz {
    fn new() -> CommandFuzz {
        let env = Env::new(Guarded::new(8 << 20), 1);
        let ids = vec![env.uar, env.eqn, env.pd];
        let pages = (0..64).map(|_| env.raw.dev.alloc(4096, 4096)).collect();
        let scratch = env.raw.dev.alloc(SCRATCH as usize, 4096);
        let pds = vec![env.pd];
        CommandFuzz {
            env,
            ids,
            pages,
            scratch,
            cqs: Vec::new(),
            qps: Vec::new(),
            mkeys: Vec::new(),
            pds,
        }
    }

    fn one(rng: &mut Rng, xs: &[u32]) -> u32 {
        if xs.is_empty() || rng.chance(100) {
            rng.interesting() as u32
        } else {
            rng.pick(xs)
        }
    }

    /// A valid-looking input for a common opcode, built like the raw datapath helpers build
    /// them, and its output length. The caller mutates it a little.
    fn template(&mut self, rng: &mut Rng) -> (Vec<u8>, usize) {
        let buf = self.scratch + rng.below(SCRATCH / 4096 / 2) * 4096;
        let dbr = self.scratch + SCRATCH - 64 * (1 + rng.below(8));
        let env = &self.env;
        match rng.below(12) {
            0 => (env.cq_input(rng.range(0, 8) as u32, buf, dbr), 16),
            1 => {
                let (s, r) = (Self::one(rng, &self.cqs), Self::one(rng, &self.cqs));
                let pd = Self::one(rng, &self.pds);
                let i = env.qp_input(
                    pd,
                    s,
                    r,
                    rng.range(0, 8) as u32,
                    rng.range(0, 7) as u32,
                    rng.range(0, 4) as u32,
                    buf,
                    dbr,
                );
                (i, 16)
            }
            2 => {
                let pd = Self::one(rng, &self.pds);
                let addr = self.scratch + rng.below(SCRATCH);
                let len = rng.below(SCRATCH);
                let variant = rng.below(4) as u8;
                (env.mkey_input(pd, addr, len, rng.u32() as u8, variant), 16)
            }
            3 => (env.rst2init_input(Self::one(rng, &self.qps)), 16),
            4 => {
                let qpn = Self::one(rng, &self.qps);
                let r = Self::one(rng, &self.qps);
                let i =
                    env.init2rtr_input(qpn, r, env.gid, env.mac, rng.u32(), rng.below(32) as u32);
                (i, 16)
            }
            5 => {
                let qpn = Self::one(rng, &self.qps);
                let i = env.rtr2rts_input(
                    qpn,
                    rng.u32(),
                    rng.below(8) as u32,
                    rng.below(8) as u32,
                    rng.below(32) as u32,
                );
                (i, 16)
            }
            6 => {
                let op = rng.pick(&[opcode::QP_2ERR, opcode::QP_2RST, opcode::DESTROY_QP]);
                let mut i = raw::input(op, 0, qp_2rst_in::BYTES);
                raw::set(&mut i, qp_2rst_in::QPN, Self::one(rng, &self.qps));
                (i, 16)
            }
            7 => {
                let mut i = raw::input(opcode::QUERY_QP, 0, query_qp_in::BYTES);
                raw::set(&mut i, query_qp_in::QPN, Self::one(rng, &self.qps));
                (i, query_qp_out::BYTES)
            }
            8 => {
                let op = rng.pick(&[opcode::DESTROY_CQ, opcode::QUERY_CQ]);
                let mut i = raw::input(op, 0, 16);
                raw::set(&mut i, destroy_cq_in::CQN, Self::one(rng, &self.cqs));
                (i, 0x300)
            }
            9 => {
                let mut i = raw::input(opcode::DESTROY_MKEY, 0, destroy_mkey_in::BYTES);
                raw::set(
                    &mut i,
                    destroy_mkey_in::MKEY_INDEX,
                    Self::one(rng, &self.mkeys),
                );
                (i, 16)
            }
            10 => (raw::input(opcode::ALLOC_PD, 0, 16), 16),
            _ => {
                let mut i = raw::input(opcode::DEALLOC_PD, 0, 16);
                raw::set(&mut i, dealloc_pd_in::PD, Self::one(rng, &self.pds));
                (i, 16)
            }
        }
    }

    /// Records the number a successful create/alloc returned.
    fn record(&mut self, op: u16, out: &[u8]) {
        if out.len() < 12 {
            return;
        }
        let v = u32::from_be_bytes(out[8..12].try_into().unwrap()) & 0xff_ffff;
        let list = match op {
            opcode::CREATE_CQ => &mut self.cqs,
            opcode::CREATE_QP => &mut self.qps,
            opcode::CREATE_MKEY => &mut self.mkeys,
            opcode::ALLOC_PD => &mut self.pds,
            _ => &mut self.ids,
        };
        if list.len() < 64 {
            list.push(v);
        }
    }
}

impl Epoch for CommandFuzz {
    fn step(&mut self, rng: &mut Rng) -> Result<(), String> {
        if rng.chance(600) {
            let (mut input, outlen) = self.template(rng);
            let op = u16::from_be_bytes([input[0], input[1]]);
            for _ in 0..rng.range(0, 3) {
                let at = 8 + rng.below(input.len() as u64 - 8) as usize;
                input[at] = if rng.chance(500) { rng.u32() as u8 } else { 0 };
            }
            let d = self.env.raw.exec(&input, outlen);
            STATS.commands.fetch_add(1, Ordering::Relaxed);
            if d.delivery.is_none() {
                return Err(format!("templated command {op:#x}: never completed"));
            }
            if d.delivery == Some(0) && d.status() == 0 {
                STATS.commands_ok.fetch_add(1, Ordering::Relaxed);
                self.record(op, &d.out);
            }
            return Ok(());
        }
        let op = random_opcode(rng);
        let op_mod = if rng.chance(700) {
            rng.below(4) as u16
        } else {
            rng.u32() as u16
        };
        let max_in = 16 + 512 * raw::BLOCKS;
        let inlen = match rng.below(5) {
            0 => rng.range(8, 64) as usize,
            1 => rng.range(16, 0x400) as usize,
            2 => rng.range(0x100, 0x1000) as usize,
            _ => rng.range(16, max_in as u64) as usize,
        };
        let mut input = raw::input(op, op_mod, inlen.max(8));
        // Sparse mutations: most fields stay zero, a few get interesting values, live object
        // numbers or guest page addresses.
        let words = input.len() / 4;
        for _ in 0..rng.range(0, 12) {
            let w = 2 + rng.below(words.saturating_sub(2).max(1) as u64) as usize;
            if w >= words {
                continue;
            }
            let v = match rng.below(6) {
                0 => rng.pick(&self.ids),
                1 => {
                    let p = rng.pick(&self.pages);
                    if w + 1 < words {
                        input[w * 4..w * 4 + 4].copy_from_slice(&((p >> 32) as u32).to_be_bytes());
                        input[w * 4 + 4..w * 4 + 8].copy_from_slice(&(p as u32).to_be_bytes());
                    }
                    continue;
                }
                2 => rng.u32() & 0xff,
                _ => rng.interesting() as u32,
            };
            input[w * 4..w * 4 + 4].copy_from_slice(&v.to_be_bytes());
        }
        if rng.chance(50) {
            let n = input.len();
            rng.fill(&mut input[8..n]);
        }
        let outlen = match rng.below(4) {
            0 => rng.range(0, 16) as usize,
            1 => 16,
            _ => rng.range(16, (512 * raw::BLOCKS) as u64) as usize,
        };
        let d = self.env.raw.exec(&input, outlen);
        STATS.commands.fetch_add(1, Ordering::Relaxed);
        if d.delivery == Some(0) && outlen >= 8 && d.status() == 0 {
            STATS.commands_ok.fetch_add(1, Ordering::Relaxed);
        }
        if d.delivery.is_none() {
            return Err(format!(
                "command {op:#x} op_mod {op_mod:#x} inlen {inlen} outlen {outlen}: never completed"
            ));
        }
        if d.delivery == Some(0) && outlen >= 12 && d.status() == 0 {
            // Remember numbers the device handed out (they sit in the output's third dword
            // for every create/alloc command).
            self.record(op, &d.out);
        }
        Ok(())
    }
    fn check(&mut self) -> Result<(), String> {
        self.env.raw.dev.ram.check_guards()
    }
    fn worn_out(&self) -> bool {
        self.env.raw.dev.ram.left() < (1 << 20)
    }
}

// ---------------------------------------------------------------------------------------------
// WQEs
// ---------------------------------------------------------------------------------------------

const DATA_LEN: usize = 64 << 10;

struct WqeFuzz {
    env: Env<Guarded>,
    a: dp::Qp,
    b: dp::Qp,
    cqs: Vec<dp::Cq>,
    data: u64,
    keys: Vec<u32>,
    dead: bool,
    /// This step builds well-formed WQEs with valid keys and in-bounds addresses (to get
    /// past the first checks into the data path), instead of hostile ones.
    tame: bool,
}

const WQE_OPCODES: &[u8] = &[
    wqe::opcode::NOP,
    wqe::opcode::RDMA_WRITE,
    wqe::opcode::RDMA_WRITE_IMM,
    wqe::opcode::SEND,
    wqe::opcode::SEND_IMM,
    wqe::opcode::SEND_INVAL,
    wqe::opcode::RDMA_READ,
    wqe::opcode::ATOMIC_CS,
    wqe::opcode::ATOMIC_FA,
    wqe::opcode::ATOMIC_MASKED_CS,
    wqe::opcode::ATOMIC_MASKED_FA,
    wqe::opcode::LOCAL_INVAL,
    wqe::opcode::TSO,
];

impl WqeFuzz {
    fn new() -> WqeFuzz {
        let mut env = Env::new(Guarded::new(8 << 20), 1);
        let cqs: Vec<dp::Cq> = (0..4).map(|_| env.cq(6)).collect();
        let a = env.qp(&cqs[0], &cqs[1], 6, 5);
        let b = env.qp(&cqs[2], &cqs[3], 6, 5);
        env.connect_local(&a, b.qpn);
        env.connect_local(&b, a.qpn);
        let data = env.alloc(DATA_LEN);
        let k1 = env.mkey(data, DATA_LEN as u64, dp::ALL);
        let k2 = env.mkey(data, 4096, dp::LR | dp::LW);
        WqeFuzz {
            env,
            a,
            b,
            cqs,
            data,
            keys: vec![k1, k2],
            dead: false,
            tame: false,
        }
    }

    fn key(&self, rng: &mut Rng) -> u32 {
        if self.tame {
            return self.keys[0];
        }
        match rng.below(8) {
            0 => rng.u32(),
            1 => wqe::INVALID_LKEY,
            _ => rng.pick(&self.keys),
        }
    }

    fn addr(&self, rng: &mut Rng) -> u64 {
        if self.tame {
            return (self.data + rng.below(DATA_LEN as u64 / 2)) & !7;
        }
        match rng.below(8) {
            0 => rng.interesting(),
            1 => self.data + DATA_LEN as u64 - rng.below(64),
            _ => self.data + rng.below(DATA_LEN as u64),
        }
    }

    fn len(&self, rng: &mut Rng) -> u32 {
        if self.tame {
            return rng.range(1, 4096) as u32;
        }
        match rng.below(6) {
            0 => 0,
            1 => rng.interesting() as u32,
            2 => rng.range(1, DATA_LEN as u64 + 64) as u32,
            _ => rng.range(1, 512) as u32,
        }
    }

    fn wqe(&self, rng: &mut Rng, idx: u16) -> Vec<u8> {
        if !self.tame && rng.chance(100) {
            let n = 64 * rng.range(1, 4) as usize;
            let mut w = rng.bytes(n);
            if rng.chance(500) {
                let ds = w[7] & 0x3f;
                w[4..8].copy_from_slice(&wqe::qpn_ds(self.a.qpn, ds).to_be_bytes());
            }
            return w;
        }
        let op = if self.tame {
            rng.pick(&WQE_OPCODES[..9])
        } else if rng.chance(900) {
            rng.pick(WQE_OPCODES)
        } else {
            rng.u32() as u8
        };
        let mut segs: Vec<Vec<u8>> = Vec::new();
        let raddr = dp::raddr_seg(self.addr(rng), self.key(rng)).to_vec();
        match op {
            wqe::opcode::RDMA_WRITE | wqe::opcode::RDMA_WRITE_IMM | wqe::opcode::RDMA_READ => {
                segs.push(raddr)
            }
            wqe::opcode::ATOMIC_CS
            | wqe::opcode::ATOMIC_FA
            | wqe::opcode::ATOMIC_MASKED_CS
            | wqe::opcode::ATOMIC_MASKED_FA => {
                segs.push(raddr);
                segs.push(dp::atomic_seg(rng.u64(), rng.u64()).to_vec());
                if !self.tame && rng.chance(300) {
                    segs.push(dp::atomic_seg(rng.u64(), rng.u64()).to_vec());
                }
            }
            _ => {
                if !self.tame && rng.chance(100) {
                    segs.push(raddr);
                }
            }
        }
        let atomic = matches!(
            op,
            wqe::opcode::ATOMIC_CS
                | wqe::opcode::ATOMIC_FA
                | wqe::opcode::ATOMIC_MASKED_CS
                | wqe::opcode::ATOMIC_MASKED_FA
        );
        if self.tame && atomic {
            segs.push(dp::dseg(8, self.keys[0], self.addr(rng)).to_vec());
        }
        let nsegs = if self.tame {
            rng.range(0, 1) * u64::from(!atomic)
        } else {
            rng.range(0, 4)
        };
        for _ in 0..nsegs {
            if !self.tame && rng.chance(250) {
                let n = match rng.below(4) {
                    0 => rng.range(0, 16),
                    _ => rng.range(0, 200),
                } as usize;
                let mut s = dp::inline_seg(&rng.bytes(n));
                if rng.chance(200) {
                    // A byte count that lies about the segment.
                    s[0..4].copy_from_slice(&(rng.u32() | wqe::INLINE_SEG).to_be_bytes());
                }
                segs.push(s);
            } else {
                segs.push(dp::dseg(self.len(rng), self.key(rng), self.addr(rng)).to_vec());
            }
        }
        let refs: Vec<&[u8]> = segs.iter().map(|s| s.as_slice()).collect();
        let any = rng.u32() as u8;
        let fm_ce_se = rng.pick(&[0u8, 8, 2, 0xa, any]);
        let qpn = if self.tame || rng.chance(970) {
            self.a.qpn
        } else {
            rng.u32() & 0xff_ffff
        };
        let fm_ce_se = if self.tame {
            wqe::ctrl::CQ_UPDATE
        } else {
            fm_ce_se
        };
        let mut w = dp::send_wqe(op, idx, qpn, fm_ce_se, rng.u32(), &refs);
        if !self.tame && rng.chance(50) {
            // Lie about ds.
            w[7] = rng.u32() as u8;
        }
        if !self.tame && rng.chance(30) {
            w[0] = rng.u32() as u8; // opmod
        }
        let pad = w.len().div_ceil(64) * 64;
        w.resize(pad.max(64), 0);
        w
    }
}

impl Epoch for WqeFuzz {
    fn step(&mut self, rng: &mut Rng) -> Result<(), String> {
        self.tame = rng.chance(600);
        // Receives on b (and sometimes a), some bogus.
        for _ in 0..rng.range(0, 3) {
            let n = rng.range(0, 4) as usize;
            let sges: Vec<(u32, u32, u64)> = (0..n)
                .map(|_| (self.len(rng), self.key(rng), self.addr(rng)))
                .collect();
            if rng.chance(800) {
                self.env.post_recv(&mut self.b, &sges);
            } else {
                self.env.post_recv(&mut self.a, &sges);
            }
        }
        // One to three WQEs on a, then one doorbell.
        let mut last = Vec::new();
        for _ in 0..rng.range(1, 3) {
            let w = self.wqe(rng, self.a.sq_pi);
            self.env.write_send(&mut self.a, &w);
            last = w;
        }
        let dbr = if self.tame || rng.chance(950) {
            u32::from(self.a.sq_pi)
        } else {
            rng.u32()
        };
        self.env.write(self.a.dbr + 4, &dbr.to_be_bytes());
        let half = 256u64;
        let reg = u64::from(self.a.uar) * 4096 + 0x800 + half * u64::from(self.a.bf_half);
        self.a.bf_half ^= 1;
        let dev = &self.env.raw.dev;
        match if self.tame {
            2 + rng.below(8)
        } else {
            rng.below(10)
        } {
            0 => {
                // A random doorbell anywhere in the DB/BF area.
                let off = u64::from(self.a.uar) * 4096 + 0x800 + (rng.below(0x800) & !7);
                dev.write64(off, rng.u64());
            }
            1..=3 => {
                // BlueFlame copy of the last WQE (maybe stale, maybe short, maybe long).
                let mut bytes = last.clone();
                if !self.tame && rng.chance(200) {
                    let i = rng.below(bytes.len() as u64) as usize;
                    bytes[i] ^= 0xff;
                }
                let n = match if self.tame { 9 } else { rng.below(10) } {
                    0 => rng.range(1, bytes.len() as u64 / 8) as usize * 8,
                    1 => bytes.len() + 64,
                    _ => bytes.len(),
                };
                bytes.resize(n.min(512), 0);
                for (i, c) in bytes.chunks_exact(8).enumerate() {
                    dev.write64(
                        reg + i as u64 * 8,
                        u64::from_le_bytes(c.try_into().unwrap()),
                    );
                }
            }
            _ => dev.write64(reg, u64::from_le_bytes(last[0..8].try_into().unwrap())),
        }
        // Let the engine run and reap completions and events.
        for _ in 0..rng.range(1, 3) {
            dev.poll();
        }
        for cq in self.cqs.iter_mut() {
            let mut n = 0;
            while let Some(c) = self.env.poll_cq(cq) {
                STATS.cqes.fetch_add(1, Ordering::Relaxed);
                if !c.is_error() {
                    STATS.cqes_ok.fetch_add(1, Ordering::Relaxed);
                }
                n += 1;
                if n > 4096 {
                    return Err("a CQ keeps producing CQEs".into());
                }
            }
        }
        let _ = self.env.drain_eq();
        {
            for qpn in [self.a.qpn, self.b.qpn] {
                let d = self.env.query_qp(qpn);
                let rts = d.delivery == Some(0)
                    && d.status() == 0
                    && d.get(qpc::STATE.within(query_qp_out::QPC)) == u32::from(qp::state::RTS);
                self.dead |= !rts;
            }
        }
        Ok(())
    }
    fn check(&mut self) -> Result<(), String> {
        self.env.raw.dev.ram.check_guards()
    }
    fn worn_out(&self) -> bool {
        self.dead || self.env.raw.dev.ram.left() < (1 << 20)
    }
}

// ---------------------------------------------------------------------------------------------
// BAR
// ---------------------------------------------------------------------------------------------

struct BarFuzz {
    dev: Guarded,
    uars: Vec<u32>,
}

impl BarFuzz {
    fn new(rng: &mut Rng) -> BarFuzz {
        if rng.chance(500) {
            // A brought-up device with a UAR, EQ and CQs, so doorbells reach objects.
            let mut env = Env::new(Guarded::new(2 << 20), 1);
            let _cq = env.cq(4);
            let uar = env.uar;
            let dev = env.raw.dev;
            return BarFuzz {
                dev,
                uars: vec![uar],
            };
        }
        let dev = Guarded::new(2 << 20);
        dev.ram.randomize(rng);
        BarFuzz {
            dev,
            // The first UAR index the model hands out (pages 0..2 are the init segment).
            uars: vec![mlx5_sim::uar::FIRST_UAR],
        }
    }
}

impl Epoch for BarFuzz {
    fn step(&mut self, rng: &mut Rng) -> Result<(), String> {
        for _ in 0..rng.range(1, 8) {
            let off = match rng.below(10) {
                0..=3 => rng.below(0x40) | (rng.below(2) * 0x1000), // init segment, health
                4..=6 => {
                    let page = if rng.chance(800) {
                        rng.pick(&self.uars)
                    } else {
                        rng.range(3, 16) as u32
                    };
                    let o = match rng.below(4) {
                        0 => rng.pick(&[0x20u64, 0x24, 0x40, 0x44, 0x48]),
                        1 => 0x800 + rng.below(0x800),
                        _ => 0x800 + (rng.below(8) * 0x100),
                    };
                    u64::from(page) * 4096 + o
                }
                7 => rng.below(32 << 20),
                8 => (32 << 20) - rng.below(16),
                _ => rng.interesting(),
            };
            let size = if rng.chance(900) {
                rng.pick(&[1u32, 2, 4, 8, 8, 4])
            } else {
                rng.range(0, 70) as u32
            };
            let value = match off {
                // The command queue address: usually inside guest RAM.
                0x10 if rng.chance(500) => u64::from(((BASE >> 32) as u32).to_be()),
                0x14 if rng.chance(500) => {
                    let a = (BASE + rng.below(self.dev.ram.size)) as u32 & !0xfff;
                    u64::from(a.to_be())
                }
                _ => rng.interesting(),
            };
            if rng.chance(300) {
                let _ = self.dev.bar_read(off, size);
            } else {
                self.dev.bar_write(off, value, size);
            }
        }
        if rng.chance(20) {
            // Config space too: decoding off, a reset through FLR, BAR programming.
            let mut f = self.dev.f();
            let off = rng.below(0x100) as u32;
            let len = rng.pick(&[1u32, 2, 4, 3, 0]);
            f.config_write(off, rng.u32(), len);
            let _ = f.config_read(rng.below(0x110) as u32, len);
        }
        Ok(())
    }
    fn check(&mut self) -> Result<(), String> {
        self.dev.ram.check_guards()
    }
}

// ---------------------------------------------------------------------------------------------
// Proxy socket
// ---------------------------------------------------------------------------------------------

/// What the probe (PCI_CFGREAD of dword 0) answers: device and vendor ID.
const PROBE: u64 = 0x1017_15b3;

struct ProxyFuzz {
    conns: mpsc::Sender<UnixStream>,
    server: Option<std::thread::JoinHandle<Result<(), String>>>,
    client: Option<UnixStream>,
    ram: GuardedRam,
    files: Vec<File>,
}

impl ProxyFuzz {
    fn new() -> ProxyFuzz {
        let (tx, rx) = mpsc::channel::<UnixStream>();
        let server = std::thread::Builder::new()
            .name("fuzz-proxy-server".into())
            .spawn(move || {
                let mut opts = Mlx5Options {
                    exec: ExecMode::Inline,
                    ..Default::default()
                };
                opts.init.init_delay = Duration::ZERO;
                let mut server = ProxyServer::new(Mlx5Function::with_options(opts));
                while let Ok(sock) = rx.recv() {
                    let r = catch_unwind(AssertUnwindSafe(|| {
                        let _ = server.serve(&sock);
                    }));
                    if let Err(p) = r {
                        return Err(format!("server panicked: {}", panic_text(&p)));
                    }
                }
                Ok(())
            })
            .expect("spawn proxy server");
        ProxyFuzz {
            conns: tx,
            server: Some(server),
            client: None,
            ram: GuardedRam::new(1 << 20),
            files: Vec::new(),
        }
    }

    fn connect(&mut self) -> Result<&UnixStream, String> {
        if self.client.is_none() {
            let (a, b) = UnixStream::pair().map_err(|e| e.to_string())?;
            a.set_read_timeout(Some(STEP_DEADLINE)).unwrap();
            if self.conns.send(b).is_err() {
                return Err(self.server_gone());
            }
            self.client = Some(a);
        }
        Ok(self.client.as_ref().unwrap())
    }

    fn server_gone(&mut self) -> String {
        match self.server.take().map(|h| h.join()) {
            Some(Ok(Err(e))) => e,
            Some(Err(_)) => "server thread died".into(),
            _ => "server gone".into(),
        }
    }

    fn random_fd(&mut self, rng: &mut Rng) -> RawFd {
        let f = match rng.below(4) {
            0 => {
                let name = std::ffi::CString::new("fuzz").unwrap();
                // SAFETY: valid name; result checked.
                let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
                assert!(fd >= 0);
                // SAFETY: fresh descriptor.
                let f = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
                f.set_len(rng.below(2 << 20)).unwrap();
                f
            }
            1 => {
                let flags = if rng.chance(500) {
                    0
                } else {
                    libc::EFD_NONBLOCK
                };
                // SAFETY: plain syscall; result checked.
                let fd = unsafe { libc::eventfd(0, flags | libc::EFD_CLOEXEC) };
                assert!(fd >= 0);
                // SAFETY: fresh descriptor.
                let mut f = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
                if rng.chance(300) {
                    let _ = f.write_all(&(u64::MAX - 1).to_ne_bytes()); // full counter
                }
                f
            }
            2 => File::from(OwnedFd::from(self.ram.file.try_clone().unwrap())),
            _ => File::open("/dev/null").unwrap(),
        };
        let fd = f.as_raw_fd();
        self.files.push(f);
        fd
    }

    fn message(&mut self, rng: &mut Rng) -> (Vec<u8>, Vec<RawFd>) {
        let cmd: i32 = if rng.chance(900) {
            rng.below(8) as i32
        } else {
            rng.u32() as i32
        };
        let natural = match cmd {
            0 => 192,
            2 | 3 => 12,
            4 | 5 => 24,
            _ => 0,
        };
        let size: u64 = match rng.below(20) {
            0 => rng.interesting(),
            1 => rng.below(256),
            _ => natural,
        };
        let mut payload = vec![0u8; (size.min(256)) as usize];
        match cmd {
            0 => {
                for i in 0..8 {
                    let gpa = if rng.chance(600) {
                        BASE + rng.below(4) * (1 << 20)
                    } else {
                        rng.interesting()
                    };
                    let sz = if rng.chance(600) {
                        1u64 << rng.range(12, 21)
                    } else {
                        rng.interesting()
                    };
                    let off = if rng.chance(600) {
                        GUARD
                    } else {
                        rng.interesting()
                    };
                    for (k, v) in [(0, gpa), (64, sz), (128, off)] {
                        if k + i * 8 + 8 <= payload.len() {
                            payload[k + i * 8..k + i * 8 + 8].copy_from_slice(&v.to_le_bytes());
                        }
                    }
                }
            }
            4 | 5 => {
                let addr = if rng.chance(700) {
                    0xe000_0000u64 + rng.below(32 << 20)
                } else {
                    rng.interesting()
                };
                let val = rng.interesting();
                let sz = if rng.chance(850) {
                    rng.pick(&[1u32, 2, 4, 8])
                } else {
                    rng.u32()
                };
                let fields: [&[u8]; 3] =
                    [&addr.to_le_bytes(), &val.to_le_bytes(), &sz.to_le_bytes()];
                let mut at = 0;
                for f in fields {
                    let n = f.len().min(payload.len().saturating_sub(at));
                    if n > 0 {
                        payload[at..at + n].copy_from_slice(&f[..n]);
                    }
                    at += f.len();
                }
                if payload.len() > 20 {
                    payload[20] = rng.below(2) as u8;
                }
            }
            2 | 3 => {
                let addr = if rng.chance(800) {
                    rng.below(0x100) as u32
                } else {
                    rng.u32()
                };
                let val = if rng.chance(500) {
                    0xe000_0000u32
                } else {
                    rng.u32()
                };
                let len = if rng.chance(800) {
                    rng.pick(&[1i32, 2, 4])
                } else {
                    rng.u32() as i32
                };
                let mut b = Vec::new();
                b.extend_from_slice(&addr.to_le_bytes());
                b.extend_from_slice(&val.to_le_bytes());
                b.extend_from_slice(&len.to_le_bytes());
                let n = b.len().min(payload.len());
                payload[..n].copy_from_slice(&b[..n]);
            }
            _ => rng.fill(&mut payload),
        }
        let nfds = match cmd {
            0 => rng.range(0, 3),
            6 => {
                if rng.chance(850) {
                    2
                } else {
                    rng.range(0, 3)
                }
            }
            _ => {
                if rng.chance(50) {
                    rng.range(1, 10)
                } else {
                    0
                }
            }
        };
        let fds = (0..nfds).map(|_| self.random_fd(rng)).collect();
        let mut msg = Vec::with_capacity(16 + payload.len());
        msg.extend_from_slice(&cmd.to_le_bytes());
        msg.extend_from_slice(&[0u8; 4]);
        msg.extend_from_slice(&size.to_le_bytes());
        msg.extend_from_slice(&payload);
        (msg, fds)
    }
}

fn proxy_msg(cmd: i32, payload: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(16 + payload.len());
    m.extend_from_slice(&cmd.to_le_bytes());
    m.extend_from_slice(&[0u8; 4]);
    m.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    m.extend_from_slice(payload);
    m
}

fn cfg_write_msg(addr: u32, val: u32, len: i32) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&addr.to_le_bytes());
    p.extend_from_slice(&val.to_le_bytes());
    p.extend_from_slice(&len.to_le_bytes());
    proxy_msg(2, &p)
}

fn bar_write_msg(addr: u64, val: u64, size: u32) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&addr.to_le_bytes());
    p.extend_from_slice(&val.to_le_bytes());
    p.extend_from_slice(&size.to_le_bytes());
    p.extend_from_slice(&[1, 0, 0, 0]);
    proxy_msg(4, &p)
}

const PROXY_BAR0: u64 = 0xe000_0000;

impl ProxyFuzz {
    /// The SIGBUS attack of issue 7, with random variations: guest RAM shared, the command
    /// queue pointed into it, the file truncated (or not), the doorbell rung with random
    /// entries in place. The server must answer or drop the client, never die.
    fn attack(&mut self, rng: &mut Rng) -> Result<(), String> {
        self.client = None; // a fresh connection: a reset function
        self.ram = GuardedRam::new(1 << 20);
        let sock = self.connect()?.try_clone().map_err(|e| e.to_string())?;
        let mut sys = [0u8; 192];
        sys[0..8].copy_from_slice(&BASE.to_le_bytes());
        sys[64..72].copy_from_slice(&self.ram.size.to_le_bytes());
        sys[128..136].copy_from_slice(&GUARD.to_le_bytes());
        let fd = self.ram.file.as_raw_fd();
        let mut ok = send_with_fds(&sock, &proxy_msg(0, &sys), &[fd]);
        let cmdq = BASE + (rng.below(self.ram.size) & !0xfff);
        let entries = rng.bytes(4096);
        let _ = self.ram.file.write_all_at(&entries, GUARD + (cmdq - BASE));
        let mut msgs = vec![
            cfg_write_msg(0x10, PROXY_BAR0 as u32, 4),
            cfg_write_msg(0x04, 6, 2),
            bar_write_msg(
                PROXY_BAR0 + 0x10,
                u64::from(((cmdq >> 32) as u32).to_be()),
                4,
            ),
            bar_write_msg(PROXY_BAR0 + 0x14, u64::from((cmdq as u32).to_be()), 4),
        ];
        let truncate = rng.chance(700);
        for m in msgs.drain(..) {
            ok = ok && send_with_fds(&sock, &m, &[]);
        }
        if truncate {
            let _ = self.ram.file.set_len(GUARD + rng.below(cmdq - BASE + 64));
        }
        let mask = if rng.chance(800) {
            1u32 << rng.below(32)
        } else {
            rng.u32()
        };
        ok = ok
            && send_with_fds(
                &sock,
                &bar_write_msg(PROXY_BAR0 + 0x18, u64::from(mask.to_be()), 4),
                &[],
            );
        ok = ok
            && send_with_fds(
                &sock,
                &proxy_msg(3, &[0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0]),
                &[],
            );
        while ok {
            let mut hdr = [0u8; 24];
            match (&sock).read_exact(&mut hdr) {
                Ok(()) => {
                    if u64::from_le_bytes(hdr[16..24].try_into().unwrap()) == PROBE {
                        break;
                    }
                }
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    return Err(format!("attack: no answer within {STEP_DEADLINE:?}"));
                }
                Err(_) => ok = false,
            }
        }
        self.client = None;
        self.ram = GuardedRam::new(1 << 20);
        if self.server.as_ref().is_some_and(|h| h.is_finished()) {
            return Err(self.server_gone());
        }
        Ok(())
    }
}

/// sendmsg with SCM_RIGHTS; false if the peer is gone.
fn send_with_fds(sock: &UnixStream, bytes: &[u8], fds: &[RawFd]) -> bool {
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut _,
        iov_len: bytes.len(),
    };
    let mut cbuf = [0u64; 16];
    let fds = &fds[..fds.len().min(12)];
    let fd_bytes = std::mem::size_of_val(fds);
    // SAFETY: msghdr is plain data (all-zero valid); iov points at a live slice that sendmsg
    // only reads; cbuf (128 bytes) holds CMSG_SPACE(48) and is filled through the libc macros.
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(fd_bytes as u32) as _;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), fd_bytes);
        }
        libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
    };
    n >= 0
}

impl Epoch for ProxyFuzz {
    fn step(&mut self, rng: &mut Rng) -> Result<(), String> {
        if rng.chance(30) {
            return self.attack(rng);
        }
        let (mut msg, fds) = self.message(rng);
        let truncate_ram = rng.chance(30);
        // A message cut short, then the write side closed (a peer that dies mid-message; with
        // the write side open the server would rightly wait for the rest).
        let cut = rng.chance(20);
        if cut {
            msg.truncate(rng.below(msg.len() as u64) as usize);
        }
        let sock = self.connect()?.try_clone().map_err(|e| e.to_string())?;
        let mut alive = send_with_fds(&sock, &msg, &fds);
        self.files.clear(); // our copies of the descriptors
        if cut {
            let _ = sock.shutdown(std::net::Shutdown::Write);
            let mut rest = Vec::new();
            let _ = (&sock).read_to_end(&mut rest); // EOF once the server drops it
            self.client = None;
            return Ok(());
        }
        if truncate_ram {
            let _ = self.ram.file.set_len(GUARD + rng.below(1 << 20));
        }
        if alive {
            // A probe whose answer is known: CFGREAD of vendor and device ID.
            let mut p = Vec::new();
            p.extend_from_slice(&3i32.to_le_bytes());
            p.extend_from_slice(&[0u8; 4]);
            p.extend_from_slice(&12u64.to_le_bytes());
            p.extend_from_slice(&0u32.to_le_bytes());
            p.extend_from_slice(&0u32.to_le_bytes());
            p.extend_from_slice(&4i32.to_le_bytes());
            alive = send_with_fds(&sock, &p, &[]);
        }
        // Read replies until the probe's (or EOF: the server dropped the connection).
        while alive {
            let mut hdr = [0u8; 24];
            match (&sock).read_exact(&mut hdr) {
                Ok(()) => {
                    let v = u64::from_le_bytes(hdr[16..24].try_into().unwrap());
                    if v == PROBE {
                        break;
                    }
                }
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    return Err(format!(
                        "server did not answer within {STEP_DEADLINE:?} (message {:?})",
                        &msg[..msg.len().min(40)]
                    ));
                }
                Err(_) => alive = false,
            }
        }
        if !alive || rng.chance(30) {
            self.client = None;
            if truncate_ram || rng.chance(100) {
                self.ram = GuardedRam::new(1 << 20);
            }
        }
        if self.server.as_ref().is_some_and(|h| h.is_finished()) {
            return Err(self.server_gone());
        }
        Ok(())
    }
    /// No guard check: the messages map any part of the file, guards included, as guest RAM.
    fn check(&mut self) -> Result<(), String> {
        Ok(())
    }
}

impl Drop for ProxyFuzz {
    fn drop(&mut self) {
        self.client = None;
        let (tx, _) = mpsc::channel();
        self.conns = tx; // closes the channel: the server thread ends
        if let Some(h) = self.server.take() {
            let _ = h.join();
        }
    }
}
