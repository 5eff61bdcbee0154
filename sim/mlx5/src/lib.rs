//! Emulated ConnectX-5 HCA: a software model of an mlx5 PCI function, served to QEMU guests.
//!
//! The device in parts, one folder each:
//! - [`front`]: what a host reaches it through: the PCI function ([`front::pci`]), QEMU's
//!   multi-process proxy ([`front::proxy`]), the ConnectX-5 function and its BAR0
//!   ([`front::device`]), the initialization segment ([`front::init_seg`]), the in-process
//!   handle ([`front::inproc`]).
//! - [`hca`]: the device state ([`Hca`], one field per part), command dispatch and the
//!   lifecycle (ENABLE / INIT / TEARDOWN / DISABLE).
//! - [`control`]: the control plane: the command queue engine ([`control::cmd`]), what
//!   command handlers return ([`control::result`]) and the syndromes ([`control::syndrome`]),
//!   capabilities, firmware pages, fault switches, the trace.
//! - [`objects`]: the object tables, one module per PRM object: PD / TD, memory keys
//!   ([`objects::mr`]) and windows, CQs, EQs, QPs ([`objects::qp`], one module per service
//!   type), UARs, the NIC vport, Q counters, and the Ethernet queues: TIS, SQ, RQ, TIR
//!   ([`objects::tis`], [`objects::sq`], [`objects::rq`], [`objects::tir`] over
//!   [`objects::wq`]).
//! - [`datapath`]: doorbells, WQE parsing and execution ([`datapath::wqe`],
//!   [`datapath::umr`]), CQE writing, the adapter to the RC transport ([`datapath::rc`]), and
//!   the Ethernet send and receive queues ([`datapath::eth`]).
//! - `events`: the event sink (EQE and async-event posting, INTx).
//! - [`memory`]: DMA at bus addresses ([`memory::GuestMemory`], [`memory::RegionMemory`] for
//!   host tests, [`memory::MappedMemory`] for QEMU guest RAM).
//! - The port and the wire: [`wire`] (the HCA's port); its I/O in [`link`] (stream sockets,
//!   in-process pairs, receive checks, pcap capture and `--decode-pcap`, the wire-fault
//!   injector); [`roce`], the pure RoCEv2 protocol (frame codec, ICRC, opcodes, the RC
//!   transport, counters).

mod be;
pub mod control;
pub mod datapath;
mod events;
pub mod front;
pub mod hca;
pub mod link;
pub mod memory;
pub mod objects;
pub mod roce;
pub mod wire;

pub use control::faults::Faults;
pub use front::device::{Bar0, Bar0Mode, ExecMode, Mlx5Function, Mlx5Options};
pub use front::inproc::InProcHca;
pub use front::pci::{ConfigSpace, Intx, PciFunction};
pub use front::proxy::{ProxyError, ProxyServer};
pub use hca::{Hca, HcaConfig};
pub use memory::{DmaError, GuestMemory, MappedMemory, RegionMemory};
