//! Image entry for the unikernel.
//!
//! One ELF image carries two entry protocols:
//! - **PVH** (`XEN_ELFNOTE_PHYS32_ENTRY`): QEMU `-kernel`, Firecracker, cloud-hypervisor.
//! - **Multiboot2**: GRUB on bare metal.
//!
//! Both enter 32-bit protected mode code in `entry.rs`, which builds early page tables (the first
//! 4 GiB identity mapped with 2 MiB pages), enables SSE and long mode, and calls
//! `boot_entry` in Rust. That parses the loader's structure into a neutral [`BootInfo`]
//! and hands it to the kernel's `kernel_main`.
#![cfg_attr(not(test), no_std)]

pub mod info;
pub mod multiboot2;
pub mod pvh;

#[cfg(target_os = "none")]
mod entry;

pub use info::{BootInfo, MemoryKind, MemoryRegion, PhysMemory, Protocol};
