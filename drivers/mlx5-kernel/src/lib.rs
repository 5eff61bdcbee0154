//! The unikernel's implementation of [`mlx5::Hal`]: the mlx5 driver on bare metal and in QEMU
//! guests.
//!
//! - BAR0: claimed through the kernel's PCI layer, which enables memory decoding and bus
//!   mastering and maps the BAR uncached (BlueFlame writes go through the same mapping).
//! - DMA: physically contiguous buffers from the identity-mapped frame pools; the bus address
//!   is the physical address (no IOMMU in this setup).
//! - Clock: the calibrated TSC. Randomness: RDRAND.
//!
//! Everything here exists only for the bare-metal target; on the host the crate is empty.
#![no_std]

#[cfg(target_os = "none")]
mod hal;
#[cfg(target_os = "none")]
pub use hal::{open_first, KernelDma, KernelHal, OpenError, VENDOR_MELLANOX};
