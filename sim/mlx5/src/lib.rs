//! Emulated ConnectX-5 HCA: a software model of an mlx5 PCI function, served to QEMU guests.
//!
//! - [`memory`]: DMA at bus addresses ([`memory::GuestMemory`], [`memory::RegionMemory`] for
//!   host tests, [`memory::MappedMemory`] for QEMU guest RAM).
//! - [`pci`]: the [`pci::PciFunction`] front ends call, a type-0 [`pci::ConfigSpace`], INTx.
//! - [`proxy`]: QEMU's multi-process PCI proxy protocol (`x-pci-proxy-dev`).
//! - [`init_seg`]: BAR0's initialization segment; [`device`]: the ConnectX-5 function.

pub mod device;
pub mod init_seg;
pub mod memory;
pub mod pci;
pub mod proxy;

pub use device::{Bar0, Bar0Mode, Mlx5Function, Mlx5Options};
pub use memory::{DmaError, GuestMemory, MappedMemory, RegionMemory};
pub use pci::{ConfigSpace, Intx, PciFunction};
pub use proxy::{ProxyError, ProxyServer};
