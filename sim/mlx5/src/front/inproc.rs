//! In-process front end: an emulated ConnectX-5 with [`RegionMemory`] as its guest memory, for
//! host tests and for a driver's host tests.
//!
//! [`InProcHca`] is a cheap, `Send + Sync` handle (an `Arc` inside) a driver's hardware
//! abstraction can call from any thread: BAR0 MMIO ([`bar0_read`](InProcHca::bar0_read),
//! [`bar0_write`](InProcHca::bar0_write), [`read32`](InProcHca::read32), ...), DMA memory
//! ([`alloc`](InProcHca::alloc), [`host_ptr`](InProcHca::host_ptr)), fault switches and access
//! to the model.
//!
//! Two modes ([`ExecMode`]): deterministic (a doorbell is fully processed before the BAR write
//! returns; `initializing` is clear from the start) and threaded (a device thread does the
//! work asynchronously and polls the wire; `initializing` clears after
//! [`InitSegmentConfig::init_delay`]). [`InProcHca::pair`] builds two HCAs joined by an
//! in-process wire, [`InProcHca::pair_sharing_memory`] two such HCAs in one host (one guest
//! memory).

use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::control::faults::Faults;
use crate::front::device::{ExecMode, Executor, Mlx5Function, Mlx5Options, UAR_BASE};
use crate::front::init_seg::InitSegmentConfig;
use crate::front::pci::{Intx, PciFunction};
use crate::hca::{Hca, HcaConfig};
use crate::memory::{AllocError, RegionMemory};

struct Inner {
    func: Mutex<Mlx5Function>,
    /// The function's executor (fixed for its life), for doorbells and `flush` without the
    /// function's lock.
    exec: Arc<Executor>,
    hca: Arc<Mutex<Hca>>,
    mem: Arc<RegionMemory>,
    intx: Intx,
}

/// An emulated HCA in this process. Clones share the device.
#[derive(Clone)]
pub struct InProcHca {
    inner: Arc<Inner>,
}

impl InProcHca {
    /// A deterministic HCA (inline execution, no initialization delay).
    pub fn deterministic() -> InProcHca {
        Self::new(ExecMode::Inline)
    }

    /// A threaded HCA (device thread, default initialization delay).
    pub fn threaded() -> InProcHca {
        Self::new(ExecMode::Thread)
    }

    /// An HCA in `mode` with default options (no initialization delay when inline).
    pub fn new(mode: ExecMode) -> InProcHca {
        let init = match mode {
            ExecMode::Inline => InitSegmentConfig {
                init_delay: Duration::ZERO,
                ..Default::default()
            },
            ExecMode::Thread => InitSegmentConfig::default(),
        };
        Self::with_options(
            Mlx5Options {
                init,
                exec: mode,
                ..Default::default()
            },
            Arc::new(RegionMemory::new()),
        )
    }

    /// An HCA with `opts` whose DMA reaches `mem`.
    pub fn with_options(opts: Mlx5Options, mem: Arc<RegionMemory>) -> InProcHca {
        let mut func = Mlx5Function::with_options(opts);
        func.set_guest_memory(mem.clone());
        let intx = Intx::new();
        func.set_intx(intx.clone());
        let hca = func.hca().clone();
        let exec = func.executor().clone();
        InProcHca {
            inner: Arc::new(Inner {
                func: Mutex::new(func),
                exec,
                hca,
                mem,
                intx,
            }),
        }
    }

    /// Two HCAs joined by an in-process wire (`wire::Port::pair`), each with its own guest
    /// memory (bus addresses from 4 GiB and from 8 GiB) and its own MAC (…:01 and …:02).
    pub fn pair(mode: ExecMode) -> (InProcHca, InProcHca) {
        let a = Arc::new(RegionMemory::with_base(RegionMemory::DEFAULT_BASE));
        let b = Arc::new(RegionMemory::with_base(2 * RegionMemory::DEFAULT_BASE));
        Self::pair_on(mode, a, b, crate::wire::Port::pair())
    }

    /// Two HCAs as [`InProcHca::pair`], their wire a UNIX socket pair carrying QEMU's stream
    /// framing (what `mlx5-sim --wire-listen` serves): the device threads wait on the socket.
    pub fn pair_on_sockets(
        mode: ExecMode,
    ) -> Result<(InProcHca, InProcHca), crate::link::LinkError> {
        let a = Arc::new(RegionMemory::with_base(RegionMemory::DEFAULT_BASE));
        let b = Arc::new(RegionMemory::with_base(2 * RegionMemory::DEFAULT_BASE));
        let (la, lb) = crate::link::Link::socket_pair()?;
        let ports = (
            crate::wire::Port::on_link(la),
            crate::wire::Port::on_link(lb),
        );
        Ok(Self::pair_on(mode, a, b, ports))
    }

    /// How the device thread's waits ended so far ([`crate::front::device::WakeStats`]).
    pub fn wake_stats(&self) -> &crate::front::device::WakeStats {
        self.inner.exec.wake_stats()
    }

    /// Two HCAs in one host: both DMA into the same guest memory and are joined by an
    /// in-process wire (`wire::Port::pair_sharing_memory`), so RDMA payloads move between them
    /// with one copy. MACs …:01 and …:02. The wire carries RC packets only: datagrams (UD and
    /// GSI QPs, so CM MADs too) are lost and counted (`tx_drop_link`); tests of datagram QPs
    /// use [`InProcHca::pair`], whose wire carries Ethernet frames.
    pub fn pair_sharing_memory(mode: ExecMode) -> (InProcHca, InProcHca) {
        let mem = Arc::new(RegionMemory::new());
        Self::pair_on(
            mode,
            mem.clone(),
            mem,
            crate::wire::Port::pair_sharing_memory(),
        )
    }

    fn pair_on(
        mode: ExecMode,
        mem_a: Arc<RegionMemory>,
        mem_b: Arc<RegionMemory>,
        (pa, pb): (crate::wire::Port, crate::wire::Port),
    ) -> (InProcHca, InProcHca) {
        let make = |mem: Arc<RegionMemory>, last: u8| {
            let init = match mode {
                ExecMode::Inline => InitSegmentConfig {
                    init_delay: Duration::ZERO,
                    ..Default::default()
                },
                ExecMode::Thread => InitSegmentConfig::default(),
            };
            let mut cfg = HcaConfig::default();
            cfg.mac[5] = last;
            Self::with_options(
                Mlx5Options {
                    init,
                    exec: mode,
                    hca: cfg,
                    ..Default::default()
                },
                mem,
            )
        };
        let a = make(mem_a, 1);
        let b = make(mem_b, 2);
        a.with_hca(|h| *h.port_mut() = pa);
        b.with_hca(|h| *h.port_mut() = pb);
        (a, b)
    }

    fn func(&self) -> MutexGuard<'_, Mlx5Function> {
        self.inner.func.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads `size` (1, 2, 4, 8) bytes of BAR0 at `offset`, as a little-endian CPU load sees
    /// them (the registers themselves are big-endian).
    pub fn bar0_read(&self, offset: u64, size: u32) -> u64 {
        self.func().bar_read(0, offset, size)
    }

    /// Writes `size` (1, 2, 4, 8) bytes of BAR0 at `offset`, `value` as a little-endian CPU
    /// store would lay it out.
    pub fn bar0_write(&self, offset: u64, value: u64, size: u32) {
        if offset >= UAR_BASE {
            // A doorbell: what `Bar0::write` does with it, without the function's lock (the
            // UAR pages hold no function state; the model has its own lock).
            crate::front::device::uar_write(&self.inner.exec, offset, value, size);
            return;
        }
        self.func().bar_write(0, offset, value, size)
    }

    /// A 32-bit MMIO load (CPU byte order; `u32::from_be` gives the register value).
    pub fn read32(&self, offset: u64) -> u32 {
        self.bar0_read(offset, 4) as u32
    }

    /// A 32-bit MMIO store (CPU byte order; pass `value.to_be()` to write a register value).
    pub fn write32(&self, offset: u64, value: u32) {
        self.bar0_write(offset, value.into(), 4)
    }

    /// A 64-bit MMIO store (CPU byte order).
    pub fn write64(&self, offset: u64, value: u64) {
        self.bar0_write(offset, value, 8)
    }

    /// Reads the big-endian register dword at `offset` (convenience for tests).
    pub fn reg32(&self, offset: u64) -> u32 {
        u32::from_be(self.read32(offset))
    }

    /// Writes the big-endian register dword at `offset` (convenience for tests).
    pub fn set_reg32(&self, offset: u64, value: u32) {
        self.write32(offset, value.to_be())
    }

    /// The guest memory.
    pub fn memory(&self) -> &Arc<RegionMemory> {
        &self.inner.mem
    }

    /// Allocates zeroed DMA memory; returns its bus address.
    pub fn alloc(&self, size: usize, align: usize) -> Result<u64, AllocError> {
        self.inner.mem.alloc(size, align)
    }

    /// Host pointer to `len` bytes at bus address `bus` (see [`RegionMemory::host_ptr`]).
    pub fn host_ptr(&self, bus: u64, len: usize) -> Option<NonNull<u8>> {
        self.inner.mem.host_ptr(bus, len)
    }

    /// Runs `f` on the device model (locks it).
    pub fn with_hca<R>(&self, f: impl FnOnce(&mut Hca) -> R) -> R {
        let mut h = self.inner.hca.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut h)
    }

    /// Runs the device's RC timers (retransmit, RNR) on `clock`, which the caller advances
    /// (`None`: the wall clock again); see [`crate::wire::Port::set_clock`].
    pub fn set_clock(&self, clock: Option<crate::wire::VirtualClock>) {
        self.with_hca(|h| h.port_mut().set_clock(clock));
    }

    /// Flips fault switches (side effects apply at once).
    pub fn faults(&self, f: impl FnOnce(&mut Faults)) {
        self.with_hca(|h| h.update_faults(f));
    }

    /// Delivers packets from the wire and runs data-path timers (the device thread does this by
    /// itself in threaded mode).
    pub fn poll(&self) {
        self.with_hca(|h| crate::datapath::poll_wire(&mut h.dp()));
    }

    /// Waits until the device thread has done all work queued so far (no-op inline).
    pub fn flush(&self) {
        self.inner.exec.flush();
    }

    /// The INTx line (level and signals).
    pub fn intx(&self) -> &Intx {
        &self.inner.intx
    }

    /// Function-level reset.
    pub fn reset(&self) {
        self.func().reset();
    }

    /// Configuration space read.
    pub fn config_read(&self, offset: u32, len: u32) -> u32 {
        self.func().config_read(offset, len)
    }

    /// Configuration space write.
    pub fn config_write(&self, offset: u32, value: u32, len: u32) {
        self.func().config_write(offset, value, len)
    }
}
