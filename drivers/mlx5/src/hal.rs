//! The hardware-access trait, and the checked view of DMA memory the driver works through.
//!
//! # Byte order
//! Every mlx5 register and every PRM structure is big-endian. The HAL moves **bytes in address
//! order** and never swaps: `mmio_read32` returns the four bytes at `offset, offset+1, ...`, and
//! `mmio_write64(off, b)` stores `b[0]` at `off`. The driver does all swapping
//! (`u32::from_be_bytes`). A kernel HAL implements `mmio_read32` as
//! `read_volatile(ptr as *const u32).to_ne_bytes()`; there is nothing endian-specific to get
//! wrong.
//!
//! # Barriers
//! The driver calls [`Hal::dma_wmb`] between writing descriptors and publishing them (doorbell
//! records), [`Hal::dma_rmb`] between seeing an owner bit and reading the entry,
//! [`Hal::wc_start`] before a BlueFlame copy and [`Hal::wc_flush`] after it (rdma-core
//! util/udma_barrier.h: `udma_to_device_barrier`, `mmio_wc_start`, `mmio_flush_writes`).
//! The defaults are `core::sync::atomic` fences. On x86-64:
//! - `dma_wmb` is `fence(Release)`, which emits no instruction, only a compiler barrier
//!   (rdma-core's x86 `udma_to_device_barrier` is `asm volatile("" ::: "memory")` too). That is
//!   enough between stores to write-back memory (WQE, then doorbell record) and from them to an
//!   uncached MMIO store: x86 (TSO, Intel SDM vol. 3 §8.2.2) never reorders a store with an
//!   earlier store, except non-temporal stores and stores to write-combining memory.
//! - Stores to a write-combining mapping are that exception: they sit in a WC buffer and may
//!   reach the device before earlier write-back stores are visible, merged and in any order. So
//!   a BlueFlame copy needs `sfence` before it (`mmio_wc_start`: the doorbell record is visible
//!   before the device can see the copy) and after it (`mmio_flush_writes`: the burst leaves
//!   now, whole, before the next doorbell). `fence(SeqCst)` is an `mfence`, which orders WC
//!   stores as `sfence` does.
//!
//! # BlueFlame
//! The driver copies a lone small WQE through BlueFlame only when
//! [`Hal::bf_write_combining`] says the DB/BF area of BAR0 is mapped write-combining.
//! On an uncached mapping it rings the 8-byte doorbell instead, as rdma-core does (its UARs
//! mapped non-cached, `MLX5_SHUT_UP_BF` / `MLX5_UAR_TYPE_NC`, never take the `mlx5_bf_copy`
//! path; Linux ib/main.c `mlx5_ib_alloc_ucontext` reports `bf_reg_size` 0, i.e. no BlueFlame,
//! without write-combining support): a BlueFlame copy through an uncached mapping is eight
//! separate 8-byte MMIO writes, slower than the doorbell and the device's own WQE fetch.

use core::ptr;
use core::sync::atomic::{fence, Ordering};
use core::time::Duration;

pub use crate::error::HalError;
use crate::error::{Error, Result};

/// An owned, physically contiguous DMA buffer: freed when dropped.
///
/// # Safety
/// Implementations guarantee that `cpu_ptr()` is valid for reads and writes of `len()` bytes
/// for the buffer's whole life, that the device sees the same bytes at `bus_addr()`, and that
/// the bus range `[bus_addr, bus_addr + len)` does not overlap any other live buffer.
pub unsafe trait DmaBuffer: Send + Sync {
    /// Bus (IOVA) address of the first byte.
    fn bus_addr(&self) -> u64;
    /// CPU address of the first byte.
    fn cpu_ptr(&self) -> *mut u8;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// True for an empty buffer (never returned by a correct HAL).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Everything the driver needs from the platform. Kept small on purpose.
pub trait Hal: Send + Sync + 'static {
    /// The DMA buffer type.
    type Dma: DmaBuffer;

    /// Size of BAR0 in bytes. The driver never passes an offset at or past it.
    fn bar0_len(&self) -> usize;
    /// Reads the 4 bytes at BAR0 + `offset` (4-byte aligned), in address order.
    fn mmio_read32(&self, offset: usize) -> [u8; 4];
    /// Writes 4 bytes at BAR0 + `offset` (4-byte aligned), in address order.
    fn mmio_write32(&self, offset: usize, bytes: [u8; 4]);
    /// Writes 8 bytes at BAR0 + `offset` (8-byte aligned) as ONE 64-bit store (send and CQ
    /// doorbells must not be split; rdma-core `mmio_write64_be`).
    fn mmio_write64(&self, offset: usize, bytes: [u8; 8]);
    /// Copies 64 bytes to a BlueFlame register at BAR0 + `offset` (64-byte aligned) through a
    /// write-combining mapping (rdma-core `mlx5_bf_copy`). The default issues eight 64-bit
    /// stores, which is what a WC mapping merges.
    fn mmio_copy_bf(&self, offset: usize, src: &[u8; 64]) {
        for (i, c) in src.chunks_exact(8).enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            self.mmio_write64(offset + i * 8, b);
        }
    }

    /// Allocates `size` bytes of DMA memory aligned to `align` (a power of two), both as a bus
    /// address and as a CPU address. The contents are unspecified: the driver zeroes every
    /// buffer it takes (`DmaMem::alloc`), so a HAL need not (and should not, twice); but for
    /// an owner that writes every byte before it is read (`DmaMem::alloc_unzeroed`).
    fn dma_alloc(&self, size: usize, align: usize) -> core::result::Result<Self::Dma, HalError>;

    /// Monotonic time since an arbitrary epoch.
    fn now(&self) -> Duration;
    /// Called in every busy-wait loop (a pause instruction, or a yield on a host).
    fn relax(&self) {
        core::hint::spin_loop();
    }
    /// 64 random bits from a hardware source (RDRAND), or `None`; the driver then falls back to
    /// a generator seeded from the clock (see `rand`).
    fn random_u64(&self) -> Option<u64> {
        None
    }
    /// Resets the PCI function (FLR). Optional.
    fn function_level_reset(&self) -> core::result::Result<(), HalError> {
        Err(HalError::Unsupported)
    }

    /// True if BAR0's DB/BF areas (offsets 0x800..0x1000 of every UAR page) are mapped
    /// write-combining, so BlueFlame copies are worth doing. The default is false, the safe
    /// answer for an uncached mapping: the driver then only rings 8-byte doorbells.
    fn bf_write_combining(&self) -> bool {
        false
    }

    /// Orders CPU writes to DMA memory before later writes (doorbell record, MMIO). Enough
    /// before an uncached MMIO store; not before a write-combining one (see [`Hal::wc_start`]).
    #[inline]
    fn dma_wmb(&self) {
        fence(Ordering::Release);
    }
    /// Orders every earlier store (doorbell record, earlier MMIO) before the write-combining
    /// stores of a BlueFlame copy (rdma-core `mmio_wc_start`, `sfence` on x86-64).
    #[inline]
    fn wc_start(&self) {
        fence(Ordering::SeqCst);
    }
    /// Orders a DMA read (owner bit) before later DMA reads (the entry's contents).
    #[inline]
    fn dma_rmb(&self) {
        fence(Ordering::Acquire);
    }
    /// Flushes write-combined MMIO (after a BlueFlame copy).
    #[inline]
    fn wc_flush(&self) {
        fence(Ordering::SeqCst);
    }
}

/// The driver's view of one DMA buffer: every access is bounds-checked and volatile where the
/// device may write concurrently.
pub struct DmaMem<D: DmaBuffer> {
    buf: D,
    ptr: *mut u8,
    len: usize,
    bus: u64,
}

// SAFETY: the raw pointer only aliases the buffer `buf` owns, which is Send + Sync; every access
// goes through the bounds-checked methods below.
unsafe impl<D: DmaBuffer> Send for DmaMem<D> {}
// SAFETY: see Send; shared accesses are volatile byte copies, the same model as device DMA.
unsafe impl<D: DmaBuffer> Sync for DmaMem<D> {}

impl<D: DmaBuffer> DmaMem<D> {
    /// Allocates `size` bytes aligned to `align`, zeroed, and checks what the HAL returned.
    pub fn alloc<H: Hal<Dma = D>>(hal: &H, size: usize, align: usize) -> Result<Self> {
        let mem = Self::alloc_unzeroed(hal, size, align)?;
        mem.fill(0, size, 0)?;
        Ok(mem)
    }

    /// As [`DmaMem::alloc`] without zeroing: the bytes are whatever the memory held (earlier
    /// users' data included). Only for a caller that never lets a byte be read before it
    /// wrote it (a thin disk, `nvmeof::backend::ChunkMap`).
    pub fn alloc_unzeroed<H: Hal<Dma = D>>(hal: &H, size: usize, align: usize) -> Result<Self> {
        let buf = hal.dma_alloc(size, align)?;
        let (ptr, len, bus) = (buf.cpu_ptr(), buf.len(), buf.bus_addr());
        if len < size || ptr.is_null() || bus % align as u64 != 0 {
            return Err(Error::Hal(HalError::BadLayout));
        }
        Ok(DmaMem {
            buf,
            ptr,
            len: size,
            bus,
        })
    }

    /// Bus address of byte 0.
    #[inline]
    pub fn bus(&self) -> u64 {
        self.bus
    }
    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }
    /// Always false (buffers are never empty).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// CPU address of byte 0 (for the hot path, which checks its indices once).
    #[inline]
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    /// The underlying buffer.
    pub fn buffer(&self) -> &D {
        &self.buf
    }

    #[inline]
    fn check(&self, off: usize, n: usize) -> Result<()> {
        match off.checked_add(n) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::Hal(HalError::OutOfBar)),
        }
    }

    /// Copies `src` to `off`.
    pub fn write(&self, off: usize, src: &[u8]) -> Result<()> {
        self.check(off, src.len())?;
        // SAFETY: [off, off + len) is inside the buffer (checked); `src` is a Rust slice that
        // cannot overlap DMA memory the driver owns.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(off), src.len()) };
        Ok(())
    }

    /// Copies `dst.len()` bytes from `off` into `dst`.
    pub fn read(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        self.check(off, dst.len())?;
        // SAFETY: as in `write`.
        unsafe { ptr::copy_nonoverlapping(self.ptr.add(off), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// The `n` bytes at `off` in place, with no copy (a received frame handed to its
    /// consumer, as Linux en_rx.c `mlx5e_skb_from_cqe_linear` builds the skb over the receive
    /// buffer). Read after the completion was polled: the poll's read barrier orders it first.
    ///
    /// # Safety
    /// The device does not write `[off, off + n)` while the slice lives (the buffer is not
    /// posted), and nothing holds a mutable view of it meanwhile.
    pub(crate) unsafe fn bytes(&self, off: usize, n: usize) -> Result<&[u8]> {
        self.check(off, n)?;
        // SAFETY: checked range inside the buffer; the caller keeps the device and other
        // writers off it for the slice's life.
        Ok(unsafe { core::slice::from_raw_parts(self.ptr.add(off), n) })
    }

    /// The `n` bytes at `off`, to be written in place with no copy (a frame built in its
    /// transmit buffer); the doorbell's write barrier orders these stores before the device
    /// reads them.
    ///
    /// # Safety
    /// The device does not read or write `[off, off + n)` while the slice lives (the slot's
    /// send completed or was never posted), and nothing else views it meanwhile.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn bytes_mut(&self, off: usize, n: usize) -> Result<&mut [u8]> {
        self.check(off, n)?;
        // SAFETY: checked range inside the buffer; the caller makes this the only view of it
        // for the slice's life.
        Ok(unsafe { core::slice::from_raw_parts_mut(self.ptr.add(off), n) })
    }

    /// Sets `n` bytes at `off` to `v`.
    pub fn fill(&self, off: usize, n: usize, v: u8) -> Result<()> {
        self.check(off, n)?;
        // SAFETY: checked range inside the buffer.
        unsafe { ptr::write_bytes(self.ptr.add(off), v, n) };
        Ok(())
    }

    /// Volatile read of one byte (owner bits).
    #[inline]
    pub fn read_u8(&self, off: usize) -> Result<u8> {
        self.check(off, 1)?;
        // SAFETY: checked; volatile because the device writes it.
        Ok(unsafe { ptr::read_volatile(self.ptr.add(off)) })
    }

    /// Volatile write of one byte.
    #[inline]
    pub fn write_u8(&self, off: usize, v: u8) -> Result<()> {
        self.check(off, 1)?;
        // SAFETY: checked; volatile because the device reads it.
        unsafe { ptr::write_volatile(self.ptr.add(off), v) };
        Ok(())
    }

    /// Reads a big-endian u32 at `off` (byte-wise volatile: no alignment assumption).
    pub fn read_be32(&self, off: usize) -> Result<u32> {
        let mut b = [0u8; 4];
        self.read_volatile(off, &mut b)?;
        Ok(u32::from_be_bytes(b))
    }

    /// Writes a big-endian u32 at `off`.
    pub fn write_be32(&self, off: usize, v: u32) -> Result<()> {
        self.write_volatile(off, &v.to_be_bytes())
    }

    /// Reads a big-endian u64 at `off`.
    pub fn read_be64(&self, off: usize) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read_volatile(off, &mut b)?;
        Ok(u64::from_be_bytes(b))
    }

    /// Writes a big-endian u64 at `off`.
    pub fn write_be64(&self, off: usize, v: u64) -> Result<()> {
        self.write_volatile(off, &v.to_be_bytes())
    }

    /// Byte-wise volatile copy out (memory the device may be writing).
    pub fn read_volatile(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        self.check(off, dst.len())?;
        for (i, d) in dst.iter_mut().enumerate() {
            // SAFETY: off + i < off + len <= buffer length (checked above).
            *d = unsafe { ptr::read_volatile(self.ptr.add(off + i)) };
        }
        Ok(())
    }

    /// Byte-wise volatile copy in.
    pub fn write_volatile(&self, off: usize, src: &[u8]) -> Result<()> {
        self.check(off, src.len())?;
        for (i, s) in src.iter().enumerate() {
            // SAFETY: as in read_volatile.
            unsafe { ptr::write_volatile(self.ptr.add(off + i), *s) };
        }
        Ok(())
    }
}

/// Checked MMIO helpers over a HAL (big-endian registers; the driver swaps).
pub(crate) struct Bar<'a, H: Hal>(pub &'a H);

impl<H: Hal> Bar<'_, H> {
    #[inline]
    fn ok(&self, off: usize, n: usize) -> Result<()> {
        match off.checked_add(n) {
            Some(end) if end <= self.0.bar0_len() && off.is_multiple_of(n.min(8)) => Ok(()),
            _ => Err(Error::Hal(HalError::OutOfBar)),
        }
    }
    /// Reads a big-endian register.
    pub fn read32(&self, off: usize) -> Result<u32> {
        self.ok(off, 4)?;
        Ok(u32::from_be_bytes(self.0.mmio_read32(off)))
    }
    /// Writes a big-endian register.
    pub fn write32(&self, off: usize, v: u32) -> Result<()> {
        self.ok(off, 4)?;
        self.0.mmio_write32(off, v.to_be_bytes());
        Ok(())
    }
    /// Reads one byte of a register (byte `off % 4` of its big-endian dword).
    pub fn read8(&self, off: usize) -> Result<u8> {
        let dw = self.read32(off & !3)?;
        Ok(dw.to_be_bytes()[off & 3])
    }
}
