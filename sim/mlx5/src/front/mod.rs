//! The front: what a host or a test reaches the device through. The PCI function
//! ([`pci`]: config space, BARs, INTx), QEMU's multi-process proxy protocol ([`proxy`]), the
//! ConnectX-5 function behind both ([`device`]: BAR0, the command and doorbell paths into
//! the [`crate::hca::Hca`]), BAR0's initialization segment ([`init_seg`]) and the in-process
//! handle tests drive it with ([`inproc`]).

pub mod device;
pub mod init_seg;
pub mod inproc;
pub mod pci;
pub mod proxy;
