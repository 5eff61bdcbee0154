use core::time::Duration;

use kernel::mem::{self, DmaBuffer as KernelBuffer};
use kernel::pci::{platform, BarKind, Bdf};
use kernel::time::Instant;
use mlx5::hal::{DmaBuffer, Hal, HalError};

/// PCI vendor ID of Mellanox Technologies (pci.ids).
pub const VENDOR_MELLANOX: u16 = 0x15b3;

/// A ConnectX function as the driver sees it.
pub struct KernelHal {
    bdf: Bdf,
    bar0: u64,
    bar0_len: usize,
    epoch: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenError {
    /// No function with the Mellanox vendor ID (or not the one asked for).
    NotFound,
    /// The function has no memory BAR0.
    NoBar0(Bdf),
    /// Mapping BAR0 failed.
    Claim(platform::ClaimError),
}

/// Claims the first Mellanox function (or `bdf`) and returns its HAL.
pub fn open_first(bdf: Option<Bdf>) -> Result<KernelHal, OpenError> {
    let f = platform::functions()
        .iter()
        .find(|f| f.vendor == VENDOR_MELLANOX && bdf.is_none_or(|b| b == f.bdf))
        .ok_or(OpenError::NotFound)?;
    let f = platform::claim(f.bdf).map_err(OpenError::Claim)?;
    let bar = f
        .bars
        .iter()
        .find(|b| b.index == 0 && b.kind != BarKind::Io && b.addr != 0)
        .ok_or(OpenError::NoBar0(f.bdf))?;
    Ok(KernelHal {
        bdf: f.bdf,
        bar0: bar.addr,
        bar0_len: bar.size as usize,
        epoch: Instant::now(),
    })
}

impl KernelHal {
    pub fn bdf(&self) -> Bdf {
        self.bdf
    }

    #[inline(always)]
    fn reg(&self, offset: usize, width: usize) -> u64 {
        // The driver never passes an offset past BAR0 (Hal contract); stay inside regardless.
        assert!(
            offset + width <= self.bar0_len,
            "BAR0 access at {offset:#x} past {:#x}",
            self.bar0_len
        );
        self.bar0 + offset as u64
    }
}

/// A DMA buffer from the kernel's pools, returned to them on drop.
pub struct KernelDma(KernelBuffer);

// SAFETY: the kernel buffer is owned, physically contiguous, identity-mapped RAM: the CPU
// pointer and the bus address are the same address, valid for `len` bytes until drop, and the
// frame pools never hand out overlapping ranges.
unsafe impl DmaBuffer for KernelDma {
    fn bus_addr(&self) -> u64 {
        self.0.bus_addr()
    }
    fn cpu_ptr(&self) -> *mut u8 {
        self.0.as_ptr()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

impl Hal for KernelHal {
    type Dma = KernelDma;

    fn bar0_len(&self) -> usize {
        self.bar0_len
    }

    #[inline(always)]
    fn mmio_read32(&self, offset: usize) -> [u8; 4] {
        let addr = self.reg(offset, 4);
        // SAFETY: BAR0 is mapped uncached by `platform::claim`, and `addr` lies inside it.
        unsafe { core::ptr::read_volatile(addr as *const u32) }.to_ne_bytes()
    }

    #[inline(always)]
    fn mmio_write32(&self, offset: usize, bytes: [u8; 4]) {
        let addr = self.reg(offset, 4);
        // SAFETY: as in mmio_read32.
        unsafe { core::ptr::write_volatile(addr as *mut u32, u32::from_ne_bytes(bytes)) }
    }

    #[inline(always)]
    fn mmio_write64(&self, offset: usize, bytes: [u8; 8]) {
        let addr = self.reg(offset, 8);
        // SAFETY: as in mmio_read32; one 64-bit store, so the device sees the doorbell whole.
        unsafe { core::ptr::write_volatile(addr as *mut u64, u64::from_ne_bytes(bytes)) }
    }

    /// BAR0 is mapped uncached (`platform::claim`), so BlueFlame is off: the driver rings
    /// 8-byte doorbells, as rdma-core does on a non-cached UAR mapping (`MLX5_SHUT_UP_BF`,
    /// `MLX5_UAR_TYPE_NC`). A BlueFlame copy through UC memory is eight separate MMIO writes
    /// (under QEMU's proxy, eight socket round trips) and buys nothing. Turning it on needs the
    /// DB/BF half of each UAR page (0x800..0x1000) mapped write-combining (PAT entry 1,
    /// `kernel::mem::paging`) and then this returning true; the driver already issues the
    /// sfences a WC mapping needs (`Hal::wc_start`, `Hal::wc_flush`).
    fn bf_write_combining(&self) -> bool {
        false
    }

    fn dma_alloc(&self, size: usize, align: usize) -> Result<KernelDma, HalError> {
        if size == 0 || !align.is_power_of_two() {
            return Err(HalError::BadLayout);
        }
        // Not zeroed here: the driver zeroes what it takes (mlx5::hal::Hal::dma_alloc).
        mem::alloc_dma(size, align, false)
            .map(KernelDma)
            .map_err(|_| HalError::OutOfMemory)
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    fn random_u64(&self) -> Option<u64> {
        kernel::arch::rdrand64()
    }

    fn function_level_reset(&self) -> Result<(), HalError> {
        platform::function_level_reset(self.bdf).map_err(|_| HalError::Unsupported)
    }
}
