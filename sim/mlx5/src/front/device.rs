//! The emulated ConnectX-5 physical function: its configuration space and BAR0.
//!
//! BAR0 holds the initialization segment (pages 0..2) and the UAR pages above it
//! ([`crate::objects::uar`]). The device model ([`Hca`]) sits behind an [`Executor`]: in
//! [`ExecMode::Inline`] a command doorbell or UAR write is fully processed before the BAR write
//! returns (deterministic); in [`ExecMode::Thread`] the BAR write queues the work and a device
//! thread does it asynchronously, as hardware does (and polls the wire between work items).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::front::init_seg::{
    CmdQueue, CommandInterface, HealthState, InitSegment, InitSegmentConfig,
};
use crate::front::pci::{
    AddressSpace, BarDef, BarKind, ConfigSpace, Identity, Intx, PciFunction, PCI_CAP_ID_EXP,
    PCI_CAP_ID_PM,
};
use crate::hca::{Hca, HcaConfig};
use crate::link::Wait;
use crate::memory::{GuestMemory, NoMemory};

/// PCI_VENDOR_ID_MELLANOX (Linux include/linux/pci_ids.h; rdma-core providers: 0x15b3).
pub const VENDOR_ID: u16 = 0x15b3;
/// ConnectX-5, PCIe 3.0 (Linux mlx5_core main.c `mlx5_core_pci_table`: PCI_VDEVICE(MELLANOX, 0x1017)).
pub const DEVICE_ID: u16 = 0x1017;
/// Base class 0x02 (network controller), subclass 0x07 (InfiniBand), prog-if 0x00
/// (Linux pci_ids.h PCI_CLASS_NETWORK_INFINIBAND = 0x0207).
pub const CLASS_CODE: u32 = 0x02_07_00;
pub const SUBSYSTEM_VENDOR_ID: u16 = 0x15b3;
pub const SUBSYSTEM_ID: u16 = 0x0008;
pub const REVISION: u8 = 0;
/// BAR0: 32 MiB of memory space (initialization segment, UAR pages, ...).
pub const BAR0_SIZE: u64 = 32 << 20;

/// Offset of the PCI Express capability.
pub const PCIE_CAP_OFFSET: usize = 0x60;
/// Offset of the power management capability.
pub const PM_CAP_OFFSET: usize = 0x40;

/// How BAR0 is presented.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Bar0Mode {
    /// A 32-bit memory BAR. The default: QEMU's proxy sizes and maps BARs as 32-bit.
    #[default]
    Bits32,
    /// A 64-bit prefetchable memory BAR whose upper dword (BAR1) is read-only zero, so it always
    /// lands below 4 GiB and QEMU's proxy probe sees no BAR1. Linux sizes it correctly; SeaBIOS
    /// does not (it reads the zero upper dword as part of the size mask and gets a huge size).
    Bits64HighZero,
    /// A spec-compliant 64-bit prefetchable BAR (upper dword writable). Not for QEMU's proxy,
    /// whose probe would take BAR1 (all ones when sized) for a 16-byte I/O BAR of its own; meant
    /// for front ends such as vfio-user.
    Bits64,
}

/// How the device does its work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExecMode {
    /// A doorbell is fully processed before the BAR write returns.
    #[default]
    Inline,
    /// A device thread processes doorbells asynchronously.
    Thread,
}

/// Options of [`Mlx5Function::new`].
#[derive(Clone, Debug, Default)]
pub struct Mlx5Options {
    pub bar0: Bar0Mode,
    pub init: InitSegmentConfig,
    pub exec: ExecMode,
    pub hca: HcaConfig,
}

/// First BAR0 offset routed to UAR pages.
pub const UAR_BASE: u64 =
    crate::objects::uar::FIRST_UAR as u64 * crate::objects::uar::UAR_PAGE_SIZE;

/// Work for the device.
enum Work {
    Cmd {
        queue: CmdQueue,
        slots: u32,
    },
    Uar {
        page: u32,
        offset: u32,
        bytes: [u8; 8],
        len: u8,
    },
    Flush(mpsc::Sender<()>),
}

fn lock(hca: &Mutex<Hca>) -> MutexGuard<'_, Hca> {
    hca.lock().unwrap_or_else(|e| e.into_inner())
}

fn run(hca: &Mutex<Hca>, work: Work) {
    match work {
        Work::Cmd { queue, slots } => {
            crate::control::cmd::execute_doorbell(&mut lock(hca), queue, slots)
        }
        Work::Uar {
            page,
            offset,
            bytes,
            len,
        } => crate::datapath::doorbell::bar_write(
            &mut lock(hca).dp(),
            page,
            offset,
            &bytes[..len as usize],
        ),
        Work::Flush(done) => {
            let _ = done.send(());
        }
    }
}

/// The device thread: runs queued work of the current generation and polls the wire after
/// every doorbell, whenever the wire has something (a frame arrived, the send backlog can
/// drain, a peer connects) and whenever it has been idle for [`WIRE_POLL`] (the transport's
/// timers). A frame is taken when it arrives, as hardware takes it, not at the next tick.
fn device_thread(
    hca: &Mutex<Hca>,
    generation: &AtomicU64,
    rx: mpsc::Receiver<(u64, Work)>,
    wake: &Wake,
) {
    loop {
        let (gen, work) = match rx.try_recv() {
            Ok(w) => w,
            Err(mpsc::TryRecvError::Disconnected) => break,
            Err(mpsc::TryRecvError::Empty) => {
                let wire = lock(hca).port().wait();
                if wire == Wait::Ready {
                    wake.stats.wire.fetch_add(1, Ordering::Relaxed);
                    crate::datapath::poll_wire(&mut lock(hca).dp());
                    continue;
                }
                // Asleep from here: work queued after this is announced on the eventfd, work
                // queued before it is seen by the second look at the queue.
                wake.asleep.store(true, Ordering::SeqCst);
                fence(Ordering::SeqCst);
                match rx.try_recv() {
                    Ok(w) => {
                        wake.asleep.store(false, Ordering::SeqCst);
                        w
                    }
                    Err(mpsc::TryRecvError::Disconnected) => break,
                    Err(mpsc::TryRecvError::Empty) => {
                        if wake.sleep(wire, WIRE_POLL) {
                            crate::datapath::poll_wire(&mut lock(hca).dp());
                        }
                        continue;
                    }
                }
            }
        };
        let doorbell = !matches!(work, Work::Flush(_));
        if gen == generation.load(Ordering::SeqCst) || !doorbell {
            run(hca, work);
        }
        if doorbell {
            wake.stats.doorbells.fetch_add(1, Ordering::Relaxed);
            crate::datapath::poll_wire(&mut lock(hca).dp());
        }
    }
}

/// How the device thread's waits ended (the model's own figures, no PRM counter: how often it
/// woke for work, for the wire, and for nothing but its tick).
#[derive(Debug, Default)]
pub struct WakeStats {
    /// Pieces of work (doorbells, command doorbells) run.
    pub doorbells: AtomicU64,
    /// Polls of the wire because it had something (a frame, room to send, a peer).
    pub wire: AtomicU64,
    /// Polls of the wire because the idle tick (1 ms) passed with nothing to do.
    pub ticks: AtomicU64,
    /// Sleeps ended by queued work (the eventfd).
    pub woken: AtomicU64,
}

/// The device thread's sleep: an eventfd that `submit` writes when the thread sleeps, waited
/// on with the wire's descriptor.
struct Wake {
    fd: OwnedFd,
    asleep: AtomicBool,
    stats: Arc<WakeStats>,
}

impl Wake {
    fn new(stats: Arc<WakeStats>) -> io::Result<Wake> {
        // SAFETY: eventfd takes no pointers; a non-negative result is a new descriptor that
        // nothing else owns.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Wake {
            // SAFETY: `fd` was just created and is owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            asleep: AtomicBool::new(false),
            stats,
        })
    }

    /// Wakes the device thread if it sleeps (after its work was queued).
    fn notify(&self) {
        fence(Ordering::SeqCst);
        if self.asleep.swap(false, Ordering::SeqCst) {
            let one = 1u64.to_ne_bytes();
            // SAFETY: writes the 8 bytes of `one` to the eventfd this struct owns. A failed
            // write (a full counter, which the thread's read at every wake rules out) still
            // leaves the thread's tick to find the work.
            let _ = unsafe { libc::write(self.fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        }
    }

    /// Sleeps until work is announced, `wire` has something, or `tick` passes. True when the
    /// wire should be polled (it had something, or the tick passed).
    fn sleep(&self, wire: Wait, tick: Duration) -> bool {
        let mut p = [
            libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: -1,
                events: 0,
                revents: 0,
            },
        ];
        if let Wait::Fd { fd, write } = wire {
            p[1].fd = fd;
            p[1].events = if write {
                libc::POLLIN | libc::POLLOUT
            } else {
                libc::POLLIN
            };
        }
        let ms = tick.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
        // SAFETY: `p` is a live array of two initialised pollfd structs (a negative fd is
        // ignored by poll); poll only writes their revents.
        let r = unsafe { libc::poll(p.as_mut_ptr(), 2, ms) };
        self.asleep.store(false, Ordering::SeqCst);
        if p[0].revents != 0 {
            let mut b = [0u8; 8];
            // SAFETY: reads at most 8 bytes into `b` from the eventfd this struct owns
            // (non-blocking: resets its counter, or fails harmlessly when it is zero).
            let _ = unsafe { libc::read(self.fd.as_raw_fd(), b.as_mut_ptr().cast(), b.len()) };
            self.stats.woken.fetch_add(1, Ordering::Relaxed);
        }
        if r == 0 {
            self.stats.ticks.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        // Readable, writable, hung up or in error: the wire's poll finds out which. An
        // interrupted poll (r < 0) looks again too.
        let wire_had = p[1].revents != 0 || r < 0;
        if wire_had {
            self.stats.wire.fetch_add(1, Ordering::Relaxed);
        }
        wire_had
    }
}

/// Runs the device's work inline or on a device thread.
pub struct Executor {
    hca: Arc<Mutex<Hca>>,
    /// No device thread (inline mode, or the thread could not be started): work runs on the
    /// caller's thread, and `submit` and `flush` need not look at the channel (fixed at
    /// construction; the channel only goes away when the executor is dropped).
    inline: bool,
    /// Work queued before the last reset is dropped.
    generation: Arc<AtomicU64>,
    tx: Mutex<Option<mpsc::Sender<(u64, Work)>>>,
    join: Mutex<Option<JoinHandle<()>>>,
    /// The device thread's sleep (none inline).
    wake: Option<Arc<Wake>>,
    stats: Arc<WakeStats>,
}

/// How often the device thread polls the wire when it has nothing to do (the transport's
/// timers: retransmission, RNR, keep-alive of the wire's state).
const WIRE_POLL: Duration = Duration::from_millis(1);

impl Executor {
    fn new(hca: Arc<Mutex<Hca>>, mode: ExecMode) -> Executor {
        let generation = Arc::new(AtomicU64::new(0));
        let stats = Arc::new(WakeStats::default());
        // No eventfd (never seen), or no thread: the work runs inline.
        let wake = match mode {
            ExecMode::Inline => None,
            ExecMode::Thread => Wake::new(stats.clone()).ok().map(Arc::new),
        };
        let (tx, join) = match &wake {
            None => (None, None),
            Some(wake) => {
                let (tx, rx) = mpsc::channel::<(u64, Work)>();
                let h = hca.clone();
                let g = generation.clone();
                let w = wake.clone();
                let join = std::thread::Builder::new()
                    .name("mlx5-sim-device".into())
                    .spawn(move || device_thread(&h, &g, rx, &w))
                    .ok();
                (join.as_ref().map(|_| tx), join)
            }
        };
        Executor {
            hca,
            inline: tx.is_none(),
            generation,
            tx: Mutex::new(tx),
            join: Mutex::new(join),
            wake,
            stats,
        }
    }

    /// How the device thread's waits ended so far (all zero inline).
    pub fn wake_stats(&self) -> &WakeStats {
        &self.stats
    }

    fn submit(&self, work: Work) {
        if self.inline {
            return run(&self.hca, work);
        }
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match tx {
            Some(tx) => {
                let _ = tx.send((self.generation.load(Ordering::SeqCst), work));
                if let Some(w) = &self.wake {
                    w.notify();
                }
            }
            None => run(&self.hca, work),
        }
    }

    /// Returns once every piece of work queued so far is done (immediately in inline mode).
    pub fn flush(&self) {
        if self.inline {
            return;
        }
        if self.tx.lock().unwrap_or_else(|e| e.into_inner()).is_none() {
            return; // inline (or the device thread is gone): nothing is queued
        }
        let (done_tx, done_rx) = mpsc::channel();
        self.submit(Work::Flush(done_tx));
        let _ = done_rx.recv();
    }

    /// True if a device thread does the work.
    pub fn threaded(&self) -> bool {
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// Device reset: drops queued work and resets the model.
    fn reset(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        lock(&self.hca).reset();
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        // Closing the channel stops the thread (woken, so it need not finish its tick).
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(w) = &self.wake {
            w.notify();
        }
        if let Some(j) = self.join.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = j.join();
        }
    }
}

/// The command interface behind `cmd_dbell`: hands doorbells to the executor.
struct CmdDoorbell(Arc<Executor>);

impl CommandInterface for CmdDoorbell {
    fn doorbell(&mut self, queue: CmdQueue, slots: u32, _mem: &dyn GuestMemory) {
        self.0.submit(Work::Cmd { queue, slots });
    }
    fn reset(&mut self) {
        self.0.reset();
    }
}

/// BAR0's register file. For now only the initialization segment answers; every other offset
/// reads 0 and ignores writes.
pub struct Bar0 {
    init: InitSegment,
    exec: Option<Arc<Executor>>,
}

impl Bar0 {
    /// BAR0 with only the initialization segment (UAR writes are dropped).
    pub fn new(init: InitSegment) -> Self {
        Bar0 { init, exec: None }
    }

    fn with_executor(init: InitSegment, exec: Arc<Executor>) -> Self {
        Bar0 {
            init,
            exec: Some(exec),
        }
    }

    /// The initialization segment (to plug in a command interface, for instance).
    pub fn init_segment(&mut self) -> &mut InitSegment {
        &mut self.init
    }

    pub fn reset(&mut self) {
        self.init.reset();
    }

    fn read_reg(&mut self, dword_off: u64) -> u32 {
        match u32::try_from(dword_off) {
            Ok(off) => self.init.read32(off),
            Err(_) => 0,
        }
    }

    fn write_reg(&mut self, dword_off: u64, value: u32) {
        if let Ok(off) = u32::try_from(dword_off) {
            self.init.write32(off, value);
        }
    }

    /// Reads `size` (1, 2, 4 or 8) bytes at `offset`. Registers are big-endian dwords: the byte
    /// at the register's address is its most significant byte, and the access returns the bytes
    /// in address order, least significant first (what a little-endian CPU load sees).
    ///
    /// Any other size (0, or more than the 8 bytes a value carries) is not an access this
    /// register file decodes: it reads all ones, as a PCI read that ends in an Unsupported
    /// Request does (model choice: no source describes a ConnectX-5 answering it), and never
    /// panics.
    pub fn read(&mut self, offset: u64, size: u32) -> u64 {
        if !(1..=8).contains(&size) {
            return u64::MAX;
        }
        // UAR doorbell registers are write-only.
        if offset >= UAR_BASE {
            return 0;
        }
        let size = size as u64;
        let mut out = [0u8; 8];
        let mut i = 0;
        while i < size {
            let a = offset + i;
            let reg = a & !3;
            let bytes = self.read_reg(reg).to_be_bytes();
            while i < size && (offset + i) & !3 == reg {
                out[i as usize] = bytes[((offset + i) & 3) as usize];
                i += 1;
            }
        }
        u64::from_le_bytes(out)
    }

    /// Writes `size` (1, 2, 4 or 8) bytes at `offset`, one register dword at a time in address
    /// order (an 8-byte write at 0x10 writes cmdq_addr_h, then cmdq_addr_l_sz). A partial dword
    /// is merged with the register's current value.
    ///
    /// Any other size (0, or more than 8) is dropped, as a posted write the function does not
    /// decode is (model choice, like [`read`](Self::read)).
    pub fn write(&mut self, offset: u64, value: u64, size: u32) {
        if !(1..=8).contains(&size) {
            return;
        }
        if offset >= UAR_BASE {
            self.uar_write(offset, value, size);
            return;
        }
        let size = size as u64;
        let src = value.to_le_bytes();
        let mut i = 0;
        while i < size {
            let reg = (offset + i) & !3;
            let mut bytes = [0u8; 4];
            let mut have = [false; 4];
            while i < size && (offset + i) & !3 == reg {
                let k = ((offset + i) & 3) as usize;
                bytes[k] = src[i as usize];
                have[k] = true;
                i += 1;
            }
            if have.contains(&false) {
                let cur = self.read_reg(reg).to_be_bytes();
                for k in 0..4 {
                    if !have[k] {
                        bytes[k] = cur[k];
                    }
                }
            }
            self.write_reg(reg, u32::from_be_bytes(bytes));
        }
    }
}

impl Bar0 {
    /// A write into a UAR page: the bytes in address order go to
    /// [`crate::datapath::doorbell::bar_write`].
    fn uar_write(&mut self, offset: u64, value: u64, size: u32) {
        if let Some(exec) = &self.exec {
            uar_write(exec, offset, value, size);
        }
    }
}

/// A BAR0 write at `offset` (at or above [`UAR_BASE`]) into a UAR page, handed to `exec`: what
/// [`Bar0::write`] does with it. The UAR pages hold no register state of the function's own,
/// so an in-process front end may call this without locking the function.
#[inline(always)]
pub(crate) fn uar_write(exec: &Executor, offset: u64, value: u64, size: u32) {
    let page_size = crate::objects::uar::UAR_PAGE_SIZE;
    debug_assert!(offset >= UAR_BASE);
    // An aligned 8-byte store (a doorbell) lies inside its page; any other is checked whole.
    let aligned8 = size == 8 && offset.is_multiple_of(8);
    if !aligned8 && (size == 0 || size > 8 || offset % page_size + u64::from(size) > page_size) {
        return;
    }
    let Ok(page) = u32::try_from(offset / page_size) else {
        return;
    };
    let offset = (offset % page_size) as u32;
    let bytes = value.to_le_bytes();
    if exec.inline {
        // What `submit` would run, without packing the write into a `Work` first (a doorbell
        // is the datapath's most frequent device entry).
        return crate::datapath::doorbell::bar_write(
            &mut lock(&exec.hca).dp(),
            page,
            offset,
            &bytes[..size as usize],
        );
    }
    let mut b = [0u8; 8];
    b[..size as usize].copy_from_slice(&bytes[..size as usize]);
    exec.submit(Work::Uar {
        page,
        offset,
        bytes: b,
        len: size as u8,
    });
}

/// The ConnectX-5 physical function.
pub struct Mlx5Function {
    config: ConfigSpace,
    bar0: Bar0,
    mem: Arc<dyn GuestMemory>,
    intx: Intx,
    hca: Arc<Mutex<Hca>>,
    exec: Arc<Executor>,
}

impl Mlx5Function {
    /// A function with the default options (32-bit BAR0, default init segment).
    pub fn new() -> Self {
        Self::with_options(Mlx5Options::default())
    }

    /// A function with the given options.
    pub fn with_options(opts: Mlx5Options) -> Self {
        let health = Arc::new(HealthState::new());
        let intx = Intx::new();
        let mem: Arc<dyn GuestMemory> = Arc::new(NoMemory);
        let hca = Arc::new(Mutex::new(Hca::with_config(
            mem.clone(),
            intx.clone(),
            health.clone(),
            opts.hca.clone(),
        )));
        let exec = Arc::new(Executor::new(hca.clone(), opts.exec));
        let mut init =
            InitSegment::with_command_interface(opts.init, Box::new(CmdDoorbell(exec.clone())));
        init.set_health(health);
        Mlx5Function {
            config: Self::config_space(opts.bar0),
            bar0: Bar0::with_executor(init, exec.clone()),
            mem,
            intx,
            hca,
            exec,
        }
    }

    /// The device model.
    pub fn hca(&self) -> &Arc<Mutex<Hca>> {
        &self.hca
    }

    /// Locks the device model.
    pub fn lock_hca(&self) -> MutexGuard<'_, Hca> {
        lock(&self.hca)
    }

    /// The executor (to wait for a device thread).
    pub fn executor(&self) -> &Arc<Executor> {
        &self.exec
    }

    /// The power-on configuration space of the function.
    pub fn config_space(mode: Bar0Mode) -> ConfigSpace {
        let mut c = ConfigSpace::new(Identity {
            vendor_id: VENDOR_ID,
            device_id: DEVICE_ID,
            class_code: CLASS_CODE,
            revision: REVISION,
            subsystem_vendor_id: SUBSYSTEM_VENDOR_ID,
            subsystem_id: SUBSYSTEM_ID,
            interrupt_pin: 1, // INTA#
        });
        let bar0 = match mode {
            Bar0Mode::Bits32 => BarDef {
                kind: BarKind::Memory32,
                size: BAR0_SIZE,
                prefetchable: false,
            },
            Bar0Mode::Bits64HighZero => BarDef {
                kind: BarKind::Memory64 {
                    high_writable: false,
                },
                size: BAR0_SIZE,
                prefetchable: true,
            },
            Bar0Mode::Bits64 => BarDef {
                kind: BarKind::Memory64 {
                    high_writable: true,
                },
                size: BAR0_SIZE,
                prefetchable: true,
            },
        };
        c.set_bar(0, bar0);

        // Capability list: 0x34 -> PCI Express (0x60) -> power management (0x40) -> end.
        c.add_capability(
            PCIE_CAP_OFFSET,
            PCI_CAP_ID_EXP,
            &pcie_cap_body(),
            &pcie_cap_wmask(),
            &pcie_cap_w1c(),
        );
        // PMC: version 3 (PCI PM 1.2), no D1/D2, no PME. PMCSR: PowerState RW (D0/D3hot),
        // No_Soft_Reset = 1.
        let pm_body = [0x03, 0x00, 0x08, 0x00, 0x00, 0x00];
        let pm_wmask = [0x00, 0x00, 0x03, 0x00, 0x00, 0x00];
        c.add_capability(PM_CAP_OFFSET, PCI_CAP_ID_PM, &pm_body, &pm_wmask, &[]);
        c
    }

    /// The configuration space.
    pub fn config(&self) -> &ConfigSpace {
        &self.config
    }

    /// BAR0.
    pub fn bar0(&mut self) -> &mut Bar0 {
        &mut self.bar0
    }

    /// The INTx line (for the device model to raise and lower).
    pub fn intx(&self) -> &Intx {
        &self.intx
    }

    /// The guest memory DMA goes to.
    pub fn guest_memory(&self) -> &Arc<dyn GuestMemory> {
        &self.mem
    }
}

impl Default for Mlx5Function {
    fn default() -> Self {
        Self::new()
    }
}

/// Length of the PCI Express capability (version 2) including its ID and next pointer.
const PCIE_CAP_LEN: usize = 0x3c;

/// Stores `v` at capability offset `cap_off` of a capability body (which starts at offset 2,
/// after the ID and next pointer).
fn put16(body: &mut [u8], cap_off: usize, v: u16) {
    body[cap_off - 2..cap_off].copy_from_slice(&v.to_le_bytes());
}

fn put32(body: &mut [u8], cap_off: usize, v: u32) {
    body[cap_off - 2..cap_off + 2].copy_from_slice(&v.to_le_bytes());
}

/// PCI Express capability body, version 2 (PCI Express Base 3.0, 7.8).
fn pcie_cap_body() -> Vec<u8> {
    let mut b = vec![0u8; PCIE_CAP_LEN - 2];
    // +0x02 PCI Express Capabilities: version 2, device/port type 0 (PCI Express Endpoint).
    put16(&mut b, 0x02, 0x0002);
    // +0x04 Device Capabilities: Max_Payload_Size Supported 512 B (2), Extended Tag Field
    // Supported (bit 5), Role-Based Error Reporting (bit 15), Function Level Reset Capability
    // (bit 28; ConnectX functions are reset this way by Linux's pci_reset_function).
    put32(&mut b, 0x04, 0x1000_8022);
    // +0x08 Device Control: Enable Relaxed Ordering (bit 4), Enable No Snoop (bit 11),
    // Max_Read_Request_Size 512 B (2 << 12).
    put16(&mut b, 0x08, 0x2810);
    // +0x0c Link Capabilities: max speed 8.0 GT/s (3), max width x16.
    put32(&mut b, 0x0c, (16 << 4) | 3);
    // +0x12 Link Status: 8.0 GT/s, x16, Slot Clock Configuration (bit 12).
    put16(&mut b, 0x12, 0x1000 | (16 << 4) | 3);
    // +0x24 Device Capabilities 2: completion timeout ranges A-D, completion timeout disable.
    put32(&mut b, 0x24, 0x0000_001f);
    // +0x2c Link Capabilities 2: supported link speeds 2.5, 5.0, 8.0 GT/s.
    put32(&mut b, 0x2c, 0x0000_000e);
    // +0x30 Link Control 2: target link speed 8.0 GT/s.
    put16(&mut b, 0x30, 0x0003);
    b
}

/// Writable bits of the PCI Express capability body.
fn pcie_cap_wmask() -> Vec<u8> {
    let mut m = vec![0u8; PCIE_CAP_LEN - 2];
    // Device Control: error reporting enables, Relaxed Ordering, MPS, Extended Tag, No Snoop,
    // MRRS (no phantom functions, aux power or FLR).
    put16(&mut m, 0x08, 0x79ff);
    // Link Control: ASPM control, RCB, Common Clock Configuration, Extended Synch.
    put16(&mut m, 0x10, 0x00cb);
    // Device Control 2: completion timeout value and disable.
    put16(&mut m, 0x28, 0x001f);
    // Link Control 2: target link speed.
    put16(&mut m, 0x30, 0x000f);
    m
}

/// RW1C bits of the PCI Express capability body: Device Status error-detected bits 3:0.
fn pcie_cap_w1c() -> Vec<u8> {
    let mut m = vec![0u8; PCIE_CAP_LEN - 2];
    put16(&mut m, 0x0a, 0x000f);
    m
}

impl PciFunction for Mlx5Function {
    fn config_read(&mut self, offset: u32, len: u32) -> u32 {
        self.config.read(offset, len)
    }

    fn config_write(&mut self, offset: u32, value: u32, len: u32) {
        // Device Control bit 15, Initiate Function Level Reset (PCIe base spec 7.5.3.4): the
        // bit always reads 0; setting it resets the function, configuration space included.
        let flr_byte = (PCIE_CAP_OFFSET + 0x09) as u32;
        let initiates_flr = (offset..offset + len.min(4)).contains(&flr_byte)
            && (value >> (8 * (flr_byte - offset))) & 0x80 != 0;
        if initiates_flr {
            self.reset();
            return;
        }
        self.config.write(offset, value, len);
    }

    fn bar_read(&mut self, bar: u8, offset: u64, size: u32) -> u64 {
        match bar {
            0 => self.bar0.read(offset, size),
            _ => 0,
        }
    }

    fn bar_write(&mut self, bar: u8, offset: u64, value: u64, size: u32) {
        if bar == 0 {
            self.bar0.write(offset, value, size);
        }
    }

    fn reset(&mut self) {
        self.config.reset();
        self.bar0.reset();
        self.intx.lower();
    }

    fn decode_bar_address(&self, space: AddressSpace, addr: u64, len: u64) -> Option<(u8, u64)> {
        self.config.decode(space, addr, len)
    }

    fn set_guest_memory(&mut self, mem: Arc<dyn GuestMemory>) {
        self.bar0.init_segment().set_guest_memory(mem.clone());
        lock(&self.hca).set_memory(mem.clone());
        self.mem = mem;
    }

    fn set_intx(&mut self, intx: Intx) {
        lock(&self.hca).set_intx(intx.clone());
        self.intx = intx;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::pci::{PCI_CAPABILITY_LIST, PCI_COMMAND, PCI_ROM_ADDRESS, PCI_STATUS};

    fn f(mode: Bar0Mode) -> Mlx5Function {
        Mlx5Function::with_options(Mlx5Options {
            bar0: mode,
            ..Default::default()
        })
    }

    /// QEMU hw/remote/proxy.c probe_pci_info: for the 7 dwords from BAR0 (0x10..0x28), read,
    /// write 0xffffffff, read back, size = ~(val & 0xfffffff0) + 1 as int, restore.
    fn qemu_probe(d: &mut dyn PciFunction) -> Vec<(usize, u32, bool)> {
        let mut regions = Vec::new();
        for i in 0..7u32 {
            let off = 0x10 + 4 * i;
            let orig = d.config_read(off, 4);
            d.config_write(off, 0xffff_ffff, 4);
            let new = d.config_read(off, 4);
            let size = (!(new & 0xffff_fff0)).wrapping_add(1);
            d.config_write(off, orig, 4);
            let memory = new & 1 == 0;
            if size != 0 {
                regions.push((i as usize, size, memory));
            }
        }
        regions
    }

    /// SeaBIOS src/fw/pciinit.c pci_bios_get_bar for BARs 0..5 (skipping the upper half of a
    /// 64-bit BAR) and the ROM slot. Returns (bar, size, is64) for every non-zero size.
    fn seabios_sizes(d: &mut dyn PciFunction) -> Vec<(usize, u64, bool)> {
        let mut out = Vec::new();
        let mut bar = 0;
        while bar <= 6 {
            let ofs = if bar == 6 {
                PCI_ROM_ADDRESS as u32
            } else {
                0x10 + 4 * bar as u32
            };
            let old = d.config_read(ofs, 4);
            let mut is64 = false;
            let mut mask: u64;
            if bar == 6 {
                mask = 0xffff_f800; // PCI_ROM_ADDRESS_MASK
                d.config_write(ofs, mask as u32, 4);
            } else {
                if old & 1 != 0 {
                    mask = 0xffff_fffc; // PCI_BASE_ADDRESS_IO_MASK (32-bit unsigned long)
                } else {
                    mask = 0xffff_fff0; // PCI_BASE_ADDRESS_MEM_MASK
                    is64 = old & 0x6 == 0x4;
                }
                d.config_write(ofs, !0, 4);
            }
            let mut val = u64::from(d.config_read(ofs, 4));
            d.config_write(ofs, old, 4);
            let size = if is64 {
                let hold = d.config_read(ofs + 4, 4);
                d.config_write(ofs + 4, !0, 4);
                let high = d.config_read(ofs + 4, 4);
                d.config_write(ofs + 4, hold, 4);
                val |= u64::from(high) << 32;
                mask |= 0xffff_ffffu64 << 32;
                (!(val & mask)).wrapping_add(1)
            } else {
                (!(val & mask)).wrapping_add(1) & 0xffff_ffff
            };
            if size != 0 {
                out.push((bar, size, is64));
            }
            bar += if is64 { 2 } else { 1 };
        }
        out
    }

    /// Linux drivers/pci/probe.c __pci_read_base + pci_size, decoding disabled around sizing.
    fn linux_sizes(d: &mut dyn PciFunction) -> Vec<(usize, u64, bool)> {
        fn pci_size(base: u64, maxbase: u64, mask: u64) -> u64 {
            let size = mask & maxbase;
            if size == 0 {
                return 0;
            }
            let size = size & !(size - 1);
            if base == maxbase && ((base | (size - 1)) & mask) != mask {
                return 0;
            }
            size
        }
        let cmd = d.config_read(PCI_COMMAND as u32, 2);
        d.config_write(PCI_COMMAND as u32, cmd & !0x3, 2);
        let mut out = Vec::new();
        let mut pos = 0;
        while pos <= 6 {
            let rom = pos == 6;
            let reg = if rom {
                PCI_ROM_ADDRESS as u32
            } else {
                0x10 + 4 * pos as u32
            };
            let mask: u32 = if rom { 0xffff_f800 } else { !0 };
            let mut l = d.config_read(reg, 4);
            d.config_write(reg, l | mask, 4);
            let mut sz = d.config_read(reg, 4);
            d.config_write(reg, l, 4);
            if sz == 0xffff_ffff {
                sz = 0;
            }
            if l == 0xffff_ffff {
                l = 0;
            }
            let mut is64 = false;
            let (mut l64, mut sz64, mut mask64);
            if rom {
                l64 = u64::from(l & 0xffff_f800);
                sz64 = u64::from(sz & 0xffff_f800);
                mask64 = 0xffff_f800u64;
            } else if l & 1 != 0 {
                l64 = u64::from(l & 0xffff_fffc);
                sz64 = u64::from(sz & 0xffff_fffc);
                mask64 = 0xffff_fffcu64;
            } else {
                l64 = u64::from(l & 0xffff_fff0);
                sz64 = u64::from(sz & 0xffff_fff0);
                mask64 = 0xffff_fff0u64;
                is64 = l & 0x6 == 0x4;
            }
            if is64 {
                let l_hi = d.config_read(reg + 4, 4);
                d.config_write(reg + 4, !0, 4);
                let sz_hi = d.config_read(reg + 4, 4);
                d.config_write(reg + 4, l_hi, 4);
                l64 |= u64::from(l_hi) << 32;
                sz64 |= u64::from(sz_hi) << 32;
                mask64 |= !0u64 << 32;
            }
            let size = if sz64 == 0 {
                0
            } else {
                pci_size(l64, sz64, mask64)
            };
            if size != 0 {
                out.push((pos, size, is64));
            }
            pos += if is64 { 2 } else { 1 };
        }
        d.config_write(PCI_COMMAND as u32, cmd, 2);
        out
    }

    #[test]
    fn identity() {
        let mut d = Mlx5Function::new();
        assert_eq!(d.config_read(0x00, 2), 0x15b3);
        assert_eq!(d.config_read(0x02, 2), 0x1017);
        assert_eq!(d.config_read(0x00, 4), 0x1017_15b3);
        assert_eq!(d.config_read(0x08, 1), 0); // revision
        assert_eq!(d.config_read(0x09, 1), 0x00); // prog-if
        assert_eq!(d.config_read(0x0a, 2), 0x0207); // network / InfiniBand
        assert_eq!(d.config_read(0x08, 4), 0x0207_0000);
        assert_eq!(d.config_read(0x0e, 1), 0x00); // header type 0
        assert_eq!(d.config_read(0x2c, 2), 0x15b3);
        assert_eq!(d.config_read(0x2e, 2), 0x0008);
        assert_eq!(d.config_read(0x3d, 1), 1); // INTA#
        assert_eq!(d.config_read(PCI_STATUS as u32, 2) & 0x10, 0x10); // capability list
                                                                      // Read-only.
        d.config_write(0x00, 0xdead_beef, 4);
        d.config_write(0x08, 0xdead_beef, 4);
        assert_eq!(d.config_read(0x00, 4), 0x1017_15b3);
        assert_eq!(d.config_read(0x08, 4), 0x0207_0000);
        // Beyond the proxy-reachable 256 bytes.
        assert_eq!(d.config_read(0x100, 4), 0);
        d.config_write(0x100, 0xffff_ffff, 4);
        assert_eq!(d.config_read(0x100, 4), 0);
    }

    #[test]
    fn capability_list() {
        let mut d = Mlx5Function::new();
        let mut caps = Vec::new();
        let mut p = d.config_read(PCI_CAPABILITY_LIST as u32, 1) & 0xfc;
        while p != 0 && caps.len() < 48 {
            caps.push((p, d.config_read(p, 1)));
            p = d.config_read(p + 1, 1) & 0xfc;
        }
        assert_eq!(caps, vec![(0x60, 0x10), (0x40, 0x01)]);
        // PCIe: version 2, device/port type 0 = Endpoint.
        let flags = d.config_read(0x62, 2);
        assert_eq!(flags & 0xf, 2);
        assert_eq!((flags >> 4) & 0xf, 0);
        // Device Control: MPS is writable; Initiate FLR resets the function (and reads 0).
        assert_ne!(d.config_read(0x64, 4) & (1 << 28), 0, "FLR capable");
        d.config_write(0x68, 0x0030, 2);
        assert_eq!(d.config_read(0x68, 2), 0x0030);
        d.config_write(0x68, 0x8030, 2);
        assert_eq!(d.config_read(0x68, 2), 0x2810);
        // Link Status: 8 GT/s x16.
        assert_eq!(d.config_read(0x72, 2) & 0x3ff, 0x103);
        // PM: version 3; power state writable.
        assert_eq!(d.config_read(0x42, 2) & 7, 3);
        d.config_write(0x44, 3, 2);
        assert_eq!(d.config_read(0x44, 2), 0x000b);
        d.reset();
        assert_eq!(d.config_read(0x44, 2), 0x0008);
        assert_eq!(d.config_read(0x68, 2), 0x2810);
    }

    #[test]
    fn bar_sizing_32bit() {
        let mut d = f(Bar0Mode::Bits32);
        assert_eq!(d.config_read(0x10, 4), 0x0000_0000);
        assert_eq!(qemu_probe(&mut d), vec![(0, 32 << 20, true)]);
        assert_eq!(seabios_sizes(&mut d), vec![(0, 32 << 20, false)]);
        assert_eq!(linux_sizes(&mut d), vec![(0, 32 << 20, false)]);
        // Sizing restored the register.
        assert_eq!(d.config_read(0x10, 4), 0);
        // Raw sizing read-back.
        d.config_write(0x10, 0xffff_ffff, 4);
        assert_eq!(d.config_read(0x10, 4), 0xfe00_0000);
        for off in [0x14, 0x18, 0x1c, 0x20, 0x24, 0x28, 0x30] {
            d.config_write(off, 0xffff_ffff, 4);
            assert_eq!(d.config_read(off, 4), 0, "offset {off:#x}");
        }
    }

    #[test]
    fn bar_sizing_64bit_high_zero() {
        let mut d = f(Bar0Mode::Bits64HighZero);
        assert_eq!(d.config_read(0x10, 4), 0x0000_000c); // 64-bit, prefetchable
                                                         // QEMU's proxy sees one 32 MiB memory BAR and no BAR1.
        assert_eq!(qemu_probe(&mut d), vec![(0, 32 << 20, true)]);
        // Linux sizes it correctly.
        assert_eq!(linux_sizes(&mut d), vec![(0, 32 << 20, true)]);
        // SeaBIOS folds the zero upper dword into the mask: the size comes out absurd. This is
        // why Bits32 is the default.
        assert_eq!(
            seabios_sizes(&mut d),
            vec![(0, 0xffff_ffff_0200_0000, true)]
        );
        d.config_write(0x14, 0x1234_5678, 4);
        assert_eq!(d.config_read(0x14, 4), 0);
    }

    #[test]
    fn bar_sizing_64bit() {
        let mut d = f(Bar0Mode::Bits64);
        assert_eq!(linux_sizes(&mut d), vec![(0, 32 << 20, true)]);
        assert_eq!(seabios_sizes(&mut d), vec![(0, 32 << 20, true)]);
        // QEMU's proxy would take the writable upper dword (all ones when sized) for a second,
        // 16-byte I/O BAR.
        assert_eq!(
            qemu_probe(&mut d),
            vec![(0, 32 << 20, true), (1, 16, false)]
        );
        d.config_write(0x10, 0xfe00_0000, 4);
        d.config_write(0x14, 0x0000_0080, 4);
        assert_eq!(d.config().bar_address(0), 0x80_fe00_0000);
    }

    #[test]
    fn bar_decode_follows_programming_and_command() {
        let mut d = Mlx5Function::new();
        d.config_write(0x10, 0xfc00_0000, 4);
        assert_eq!(
            d.decode_bar_address(AddressSpace::Memory, 0xfc00_0000, 4),
            None
        );
        d.config_write(PCI_COMMAND as u32, 0x6, 2);
        assert_eq!(
            d.decode_bar_address(AddressSpace::Memory, 0xfc00_0000, 4),
            Some((0, 0))
        );
        assert_eq!(
            d.decode_bar_address(AddressSpace::Memory, 0xfdff_fff8, 8),
            Some((0, 0x1ff_fff8))
        );
        assert_eq!(
            d.decode_bar_address(AddressSpace::Memory, 0xfe00_0000, 4),
            None
        );
        assert_eq!(d.decode_bar_address(AddressSpace::Io, 0xfc00_0000, 4), None);
        d.reset();
        assert_eq!(d.config_read(0x10, 4), 0);
        assert_eq!(d.config_read(PCI_COMMAND as u32, 2), 0);
    }

    #[test]
    fn bar0_byte_order() {
        let mut d = Mlx5Function::new();
        // fw_rev = minor << 16 | major = 0x0023_0010, stored big-endian: 00 23 00 10.
        assert_eq!(d.bar_read(0, 0x0, 4), 0x1000_2300);
        assert_eq!(u32::from_be(d.bar_read(0, 0x0, 4) as u32), (35 << 16) | 16);
        assert_eq!(d.bar_read(0, 0x1, 1), 0x23);
        assert_eq!(d.bar_read(0, 0x2, 2), 0x1000);
        // 8-byte read at 0: fw_rev then cmdif_rev_fw_sub.
        let q = d.bar_read(0, 0x0, 8).to_le_bytes();
        assert_eq!(q, [0x00, 0x23, 0x00, 0x10, 0x00, 0x05, 0x07, 0xd0]);
        // cmdq_addr_l_sz low byte (log_sz 5, log_stride 6) is its last byte.
        assert_eq!(d.bar_read(0, 0x17, 1), 0x56);
        // An 8-byte write at 0x10 programs cmdq_addr_h then cmdq_addr_l_sz.
        let v = u64::from_le_bytes([0, 0, 0, 0x01, 0x12, 0x34, 0x50, 0x00]);
        d.bar_write(0, 0x10, v, 8);
        assert_eq!(d.bar0().init_segment().cmd_queue().addr, 0x1_1234_5000);
        // A 1-byte write merges with the register.
        d.bar_write(0, 0x13, 0x02, 1);
        assert_eq!(d.bar0().init_segment().cmd_queue().addr, 0x2_1234_5000);
        // Unimplemented registers read 0, other BARs read 0.
        assert_eq!(d.bar_read(0, 0x1_0000, 8), 0);
        assert_eq!(d.bar_read(2, 0, 4), 0);
    }

    /// Issue 7 (hostile input 6): sizes the register file does not decode used to index past
    /// an 8-byte buffer and panic. They now read all ones and are dropped on write.
    #[test]
    fn bar0_odd_sizes_do_not_panic() {
        let mut d = Mlx5Function::new();
        let before = d.bar_read(0, 0x10, 8);
        for size in [0u32, 9, 16, 64, 4096, u32::MAX] {
            for off in [
                0u64,
                0x10,
                0x1ff8,
                UAR_BASE,
                UAR_BASE + 0x800,
                BAR0_SIZE - 1,
                u64::MAX,
            ] {
                assert_eq!(
                    d.bar0().read(off, size),
                    u64::MAX,
                    "size {size} off {off:#x}"
                );
                d.bar0().write(off, u64::MAX, size);
            }
        }
        // Nothing was written.
        assert_eq!(d.bar_read(0, 0x10, 8), before);
        // Sizes 1..=8 still work at the very top of the address space.
        assert_eq!(d.bar0().read(u64::MAX, 1), 0);
        d.bar0().write(u64::MAX - 3, 0, 4);
    }
}
