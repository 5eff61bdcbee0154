//! A `Hal` over the emulated HCA in the same process (test code only).
//!
//! BAR0 accesses go to the model's register file; DMA buffers come from a `RegionMemory` that
//! the model also uses as guest memory, so the driver writes through host pointers and the
//! device reads and writes through bus addresses, as with real DMA.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use std::vec::Vec;

use mlx5::hal::{DmaBuffer, Hal, HalError};
use mlx5::{Context, ContextConfig};
use mlx5_sim::front::device::{ExecMode, BAR0_SIZE};
use mlx5_sim::memory::RegionMemory;
use mlx5_sim::{Hca, InProcHca};

/// A DMA buffer carved from the model's `RegionMemory`, freed on drop.
pub struct SimDma {
    mem: Arc<RegionMemory>,
    bus: u64,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the region stays allocated until `drop` frees it; the pointer is only used through
// the driver's DmaMem view.
unsafe impl Send for SimDma {}
// SAFETY: as above.
unsafe impl Sync for SimDma {}

// SAFETY: `ptr` is the host address of `len` bytes at `bus` inside one RegionMemory region,
// valid until drop; RegionMemory never hands out overlapping bus ranges.
unsafe impl DmaBuffer for SimDma {
    fn bus_addr(&self) -> u64 {
        self.bus
    }
    fn cpu_ptr(&self) -> *mut u8 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for SimDma {
    fn drop(&mut self) {
        self.mem.free(self.bus);
    }
}

/// Counters of what went over the BAR.
#[derive(Default, Debug, Clone, Copy)]
pub struct BarStats {
    pub reads: u64,
    pub writes32: u64,
    pub writes64: u64,
    pub bf_copies: u64,
}

/// [`BarStats`] counted with atomics (one relaxed add per BAR access instead of a mutex
/// round trip on every doorbell); `lock()` reads them all, for the tests'
/// `stats.lock().unwrap()`.
#[derive(Default, Debug)]
pub struct BarCounters {
    reads: AtomicU64,
    writes32: AtomicU64,
    writes64: AtomicU64,
    bf_copies: AtomicU64,
}

/// A reading of [`BarCounters`].
pub struct BarSnapshot(BarStats);

impl std::ops::Deref for BarSnapshot {
    type Target = BarStats;
    fn deref(&self) -> &BarStats {
        &self.0
    }
}

impl BarCounters {
    /// The counters as they are (a `Result`, as `Mutex::lock`, for `.lock().unwrap()`).
    #[allow(clippy::result_unit_err)]
    pub fn lock(&self) -> Result<BarSnapshot, ()> {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Ok(BarSnapshot(BarStats {
            reads: r(&self.reads),
            writes32: r(&self.writes32),
            writes64: r(&self.writes64),
            bf_copies: r(&self.bf_copies),
        }))
    }

    fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// The model plus what the tests observe.
pub struct SimHal {
    pub hca: InProcHca,
    t0: Instant,
    pub stats: BarCounters,
    /// BAR0 mapped uncached: `bf_write_combining` answers false (read at QP creation).
    pub uncached: std::sync::atomic::AtomicBool,
    /// Corrupt the last byte of every BlueFlame block on its way to the device (a stale
    /// write-combining buffer).
    pub stale_bf: std::sync::atomic::AtomicBool,
    /// Drop the second half of every BlueFlame block (a copy torn off by a lost WC flush).
    pub torn_bf: std::sync::atomic::AtomicBool,
    /// Values `Hal::random_u64` hands out, first to last; when empty the HAL has no random
    /// source and the driver uses its own generator.
    pub random_script: RandomScript,
}

/// [`SimHal::random_script`]: the scripted values behind a lock, and whether there are any
/// in an atomic beside it, so that an unscripted draw (every draw outside the few tests that
/// script one) costs one atomic load instead of a mutex round trip. `lock()` hands out the
/// queue; dropping the guard brings the flag up to date.
#[derive(Default)]
pub struct RandomScript {
    q: Mutex<std::collections::VecDeque<u64>>,
    any: std::sync::atomic::AtomicBool,
}

/// The locked queue of a [`RandomScript`]; the flag follows it when the guard goes.
pub struct ScriptGuard<'a> {
    g: std::sync::MutexGuard<'a, std::collections::VecDeque<u64>>,
    any: &'a std::sync::atomic::AtomicBool,
}

impl RandomScript {
    /// The queue, locked (a `Result`, as `Mutex::lock`, for the tests' `.lock().unwrap()`).
    #[allow(clippy::result_unit_err)]
    pub fn lock(&self) -> Result<ScriptGuard<'_>, ()> {
        let g = self.q.lock().unwrap_or_else(|e| e.into_inner());
        Ok(ScriptGuard { g, any: &self.any })
    }

    /// The next scripted value, if any.
    pub fn pop(&self) -> Option<u64> {
        // Acquire: pairs with the Release store of the guard that filled the queue.
        if !self.any.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        self.lock().ok()?.pop_front()
    }
}

impl std::ops::Deref for ScriptGuard<'_> {
    type Target = std::collections::VecDeque<u64>;
    fn deref(&self) -> &Self::Target {
        &self.g
    }
}

impl std::ops::DerefMut for ScriptGuard<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.g
    }
}

impl Drop for ScriptGuard<'_> {
    fn drop(&mut self) {
        self.any
            .store(!self.g.is_empty(), std::sync::atomic::Ordering::Release);
    }
}

impl SimHal {
    /// A deterministic model (doorbells processed before the BAR write returns).
    pub fn new() -> Arc<SimHal> {
        Self::from(InProcHca::deterministic())
    }

    /// A model with a device thread.
    pub fn threaded() -> Arc<SimHal> {
        Self::from(InProcHca::threaded())
    }

    pub fn from(hca: InProcHca) -> Arc<SimHal> {
        Arc::new(SimHal {
            hca,
            t0: Instant::now(),
            stats: BarCounters::default(),
            uncached: Default::default(),
            stale_bf: Default::default(),
            torn_bf: Default::default(),
            random_script: Default::default(),
        })
    }

    /// Two models joined by a wire, with device threads.
    pub fn pair() -> (Arc<SimHal>, Arc<SimHal>) {
        let (a, b) = InProcHca::pair(ExecMode::Thread);
        (Self::from(a), Self::from(b))
    }

    /// Runs `f` on the device model (faults, inspection).
    pub fn with_hca<T>(&self, f: impl FnOnce(&mut Hca) -> T) -> T {
        self.hca.with_hca(f)
    }

    pub fn doorbells(&self) -> u64 {
        let s = self.stats.lock().unwrap();
        s.writes64 + s.bf_copies
    }
}

/// The HAL the tests hand to the driver (the test keeps a clone of the `Arc` to inject
/// faults). BAR accesses go to `InProcHca::bar0_read/write`, which take and return bytes as a
/// little-endian CPU load/store lays them out: the HAL passes bytes through unchanged.
#[derive(Clone)]
pub struct TestHal(pub Arc<SimHal>);

impl Hal for TestHal {
    type Dma = SimDma;

    fn bar0_len(&self) -> usize {
        BAR0_SIZE as usize
    }
    /// The in-process model receives every store in program order, as a write-combining
    /// mapping with rdma-core's sfences delivers them: BlueFlame on, and checked by the model.
    fn bf_write_combining(&self) -> bool {
        !self.0.uncached.load(std::sync::atomic::Ordering::Relaxed)
    }
    fn mmio_read32(&self, offset: usize) -> [u8; 4] {
        BarCounters::bump(&self.0.stats.reads);
        (self.0.hca.bar0_read(offset as u64, 4) as u32).to_le_bytes()
    }
    fn mmio_write32(&self, offset: usize, bytes: [u8; 4]) {
        BarCounters::bump(&self.0.stats.writes32);
        self.0
            .hca
            .bar0_write(offset as u64, u32::from_le_bytes(bytes) as u64, 4);
    }
    fn mmio_write64(&self, offset: usize, bytes: [u8; 8]) {
        BarCounters::bump(&self.0.stats.writes64);
        self.0
            .hca
            .bar0_write(offset as u64, u64::from_le_bytes(bytes), 8);
    }
    fn mmio_copy_bf(&self, offset: usize, src: &[u8; 64]) {
        BarCounters::bump(&self.0.stats.bf_copies);
        let stale = self.0.stale_bf.load(std::sync::atomic::Ordering::Relaxed);
        let torn = self.0.torn_bf.load(std::sync::atomic::Ordering::Relaxed);
        for (i, c) in src.chunks_exact(8).enumerate() {
            if torn && i >= 4 {
                break;
            }
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            if stale && i == 7 {
                b[7] ^= 0xff;
            }
            self.0
                .hca
                .bar0_write((offset + i * 8) as u64, u64::from_le_bytes(b), 8);
        }
    }
    fn dma_alloc(&self, size: usize, align: usize) -> Result<SimDma, HalError> {
        let mem = self.0.hca.memory().clone();
        let bus = mem
            .alloc(size, align.max(8))
            .map_err(|_| HalError::OutOfMemory)?;
        let ptr = mem.host_ptr(bus, size).ok_or(HalError::OutOfMemory)?;
        Ok(SimDma {
            mem,
            bus,
            ptr: ptr.as_ptr(),
            len: size,
        })
    }
    fn now(&self) -> Duration {
        self.0.t0.elapsed()
    }
    fn relax(&self) {
        std::thread::yield_now();
    }
    fn function_level_reset(&self) -> Result<(), HalError> {
        self.0.hca.reset();
        Ok(())
    }
    fn random_u64(&self) -> Option<u64> {
        self.0.random_script.pop()
    }
}

/// Small timeouts so fault tests finish fast (configuration, not timing assertions).
pub fn test_config() -> ContextConfig {
    ContextConfig {
        fw_init_timeout: Duration::from_secs(5),
        cmd: mlx5::cmd::CmdTimeouts {
            command: Duration::from_secs(2),
            health_poll: Duration::from_millis(20),
        },
        ..ContextConfig::default()
    }
}

/// The command names (without `MLX5_CMD_OP_`) of a model's captured trace lines, in order.
pub fn commands(lines: &[std::string::String]) -> Vec<std::string::String> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("cmd slot "))
        .filter_map(|l| {
            l.split_whitespace()
                .nth(1)
                .map(|n| std::string::String::from(n.trim_start_matches("MLX5_CMD_OP_")))
        })
        .collect()
}

/// A brought-up context on a fresh model.
pub fn open() -> (Arc<SimHal>, Context<TestHal>) {
    let sim = SimHal::new();
    let ctx = Context::open(TestHal(sim.clone()), test_config()).expect("bring-up");
    (sim, ctx)
}

use mlx5::{
    AccessFlags, CompletionQueue, ConnectOptions, MemoryRegion, ProtectionDomain, QpCaps,
    QpOptions, QueuePair, Remote, SendData, SendFlags, SendOp, SendWr, WcStatus, WorkCompletion,
};

/// Two RC QPs of one context connected to each other (loopback through the model's port).
pub struct Pair {
    pub pd: ProtectionDomain<TestHal>,
    pub cq_a: CompletionQueue<TestHal>,
    pub cq_b: CompletionQueue<TestHal>,
    pub a: QueuePair<TestHal>,
    pub b: QueuePair<TestHal>,
}

pub fn pair(ctx: &Context<TestHal>, caps: QpCaps) -> Pair {
    pair_with(
        ctx,
        ctx.alloc_pd().expect("pd"),
        &caps,
        &QpOptions::default(),
        256,
    )
}

/// A [`Pair`] in `pd` whose QPs are created with `opts`, each on its own CQ of `cq_entries`.
pub fn pair_with(
    ctx: &Context<TestHal>,
    pd: ProtectionDomain<TestHal>,
    caps: &QpCaps,
    opts: &QpOptions,
    cq_entries: u32,
) -> Pair {
    let cq_a = ctx.create_cq(cq_entries).expect("cq a");
    let cq_b = ctx.create_cq(cq_entries).expect("cq b");
    let mut a = pd.create_qp_with(&cq_a, &cq_a, caps, opts).expect("qp a");
    let mut b = pd.create_qp_with(&cq_b, &cq_b, caps, opts).expect("qp b");
    let (ea, eb) = (a.endpoint(), b.endpoint());
    let o = ConnectOptions::default();
    a.connect(&eb, &o).expect("connect a");
    b.connect(&ea, &o).expect("connect b");
    Pair {
        pd,
        cq_a,
        cq_b,
        a,
        b,
    }
}

/// `n` scattered pages of `page` bytes from `base`, in reverse order (no two adjacent).
pub fn scattered(base: u64, page: u64, n: u64) -> Vec<mlx5::mr::PhysChunk> {
    (0..n)
        .rev()
        .map(|i| mlx5::mr::PhysChunk {
            bus: base + i * page,
            len: page,
        })
        .collect()
}

/// `n` regions of one chunk of `page` bytes each, from `base` on (for `reg_mr_batch`).
pub fn one_chunk_each(base: u64, page: u64, n: u64) -> Vec<[mlx5::mr::PhysChunk; 1]> {
    (0..n)
        .map(|i| {
            [mlx5::mr::PhysChunk {
                bus: base + i * page,
                len: page,
            }]
        })
        .collect()
}

/// The `reg_mr_batch` list of regions `chunks` with `access`: region `i` at
/// `iova + i` MiB.
pub fn batch_at(
    chunks: &[[mlx5::mr::PhysChunk; 1]],
    iova: u64,
    access: AccessFlags,
) -> Vec<(&[mlx5::mr::PhysChunk], u64, AccessFlags)> {
    chunks
        .iter()
        .enumerate()
        .map(|(i, c)| (&c[..], iova + i as u64 * 0x10_0000, access))
        .collect()
}

/// How guessable each key of `keys` is from the one before it: `(index part, whole key)`,
/// the number of keys whose index is the previous one's + 1, and of those that are the
/// previous index + 1 with the previous key's variant (the best fixed-variant guess; any
/// fixed guess has the same odds for a uniform variant).
pub fn next_key_guesses(keys: &[u32]) -> (usize, usize) {
    let pairs = keys.windows(2);
    let index_next = pairs
        .clone()
        .filter(|w| w[1] >> 8 == (w[0] >> 8) + 1)
        .count();
    let full = pairs
        .filter(|w| w[1] == (((w[0] >> 8) + 1) << 8 | (w[0] & 0xff)))
        .count();
    (index_next, full)
}

pub fn mr(pd: &ProtectionDomain<TestHal>, len: usize) -> MemoryRegion<TestHal> {
    pd.alloc_mr(len, AccessFlags::ALL).expect("mr")
}

/// Polls `n` completions (bounded wait; the test asserts on what arrived).
pub fn wait(cq: &mut CompletionQueue<TestHal>, n: usize) -> Vec<WorkCompletion> {
    cq.poll_wait(n, Duration::from_secs(5)).expect("poll")
}

/// The one completion `cq` has next (the test asserts on it).
pub fn one(cq: &mut CompletionQueue<TestHal>) -> WorkCompletion {
    let w = wait(cq, 1);
    assert_eq!(w.len(), 1, "one completion");
    w[0]
}

/// RDMA WRITE of `len` bytes from `src` (offset 0) on `p.a` to `(addr, rkey)`; the
/// completion status.
pub fn write_to(
    p: &mut Pair,
    src: &MemoryRegion<TestHal>,
    len: u32,
    addr: u64,
    rkey: u32,
) -> WcStatus {
    p.a.post_send(&[SendWr {
        wr_id: 1,
        op: SendOp::Write {
            remote: Remote { addr, rkey },
            imm: None,
        },
        data: SendData::Sges(&[src.sge(0, len)]),
        flags: SendFlags::SIGNALED,
    }])
    .expect("post write");
    one(&mut p.cq_a).status
}

/// RDMA READ on `p.a` of `len` bytes at `(addr, rkey)` into `dst` (offset 0); the completion
/// status.
pub fn read_from(
    p: &mut Pair,
    dst: &MemoryRegion<TestHal>,
    len: u32,
    addr: u64,
    rkey: u32,
) -> WcStatus {
    p.a.post_send(&[SendWr {
        wr_id: 2,
        op: SendOp::Read {
            remote: Remote { addr, rkey },
        },
        data: SendData::Sges(&[dst.sge(0, len)]),
        flags: SendFlags::SIGNALED,
    }])
    .expect("post read");
    one(&mut p.cq_a).status
}

pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}
