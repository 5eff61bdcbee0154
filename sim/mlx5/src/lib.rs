//! Emulated ConnectX-5 HCA: a software model of an mlx5 PCI function, served to QEMU guests.
//!
//! - [`memory`]: DMA at bus addresses ([`memory::GuestMemory`], [`memory::RegionMemory`] for
//!   host tests, [`memory::MappedMemory`] for QEMU guest RAM).
//! - [`pci`]: the [`pci::PciFunction`] front ends call, a type-0 [`pci::ConfigSpace`], INTx.
//! - [`proxy`]: QEMU's multi-process PCI proxy protocol (`x-pci-proxy-dev`).
//! - [`init_seg`]: BAR0's initialization segment; [`device`]: the ConnectX-5 function.
//! - Control plane: [`cmd`] (command queue engine), [`hca`] (state, dispatch, lifecycle),
//!   [`caps`], [`pages`], [`eq`], [`uar`], [`pd`], [`vport`], [`counter`], [`faults`], [`trace`],
//!   [`inproc`] (in-process front end).
//! - Data plane: [`mr`], [`cq`], [`qp`], [`wqe`], [`datapath`], [`wire`].
//! - RoCEv2: [`roce`], the pure protocol (frame codec, ICRC, opcodes, RC transport, counters);
//!   [`link`], the port's I/O (stream sockets, in-process pairs, receive checks, pcap capture
//!   and `--decode-pcap`, the wire-fault injector).

pub mod caps;
pub mod cmd;
pub mod counter;
pub mod cq;
pub mod datapath;
pub mod device;
pub mod eq;
pub mod faults;
pub mod hca;
pub mod init_seg;
pub mod inproc;
pub mod link;
pub mod memory;
pub mod mr;
pub mod mw;
pub mod pages;
pub mod pci;
pub mod pd;
pub mod proxy;
pub mod qp;
pub mod rcpath;
pub mod roce;
pub mod trace;
pub mod uar;
pub mod umr;
pub mod vport;
pub mod wire;
pub mod wqe;

pub use device::{Bar0, Bar0Mode, ExecMode, Mlx5Function, Mlx5Options};
pub use faults::Faults;
pub use hca::{Hca, HcaConfig};
pub use inproc::InProcHca;
pub use memory::{DmaError, GuestMemory, MappedMemory, RegionMemory};
pub use pci::{ConfigSpace, Intx, PciFunction};
pub use proxy::{ProxyError, ProxyServer};
