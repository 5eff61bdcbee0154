//! mlx5 (ConnectX-4/5) RDMA driver and a verbs API, `no_std` + `alloc`.
//!
//! The driver talks to the HCA only through [`hal::Hal`] (BAR0 MMIO, DMA memory, a clock, a
//! random source), so the same code runs in the unikernel, over Linux VFIO
//! (`drivers/mlx5-vfio`) and in host tests against the emulated HCA (`sim/mlx5`).
//!
//! The modules form layers; each imports only from the layers below it (bottom to top):
//! 1. Foundations: [`hal`] (the hardware-access trait and the checked DMA-buffer view),
//!    [`error`] (typed errors; the work-completion types it names are `wc`, re-exported by
//!    [`cq`]), and `rand` (the random source).
//! 2. The device: [`cmd`] (the command queue: entries, mailbox chains, tokens, health
//!    checks), [`hca`] (bring-up and teardown of the function), [`caps`] (QUERY_HCA_CAP /
//!    SET_HCA_CAP), [`pages`] (firmware pages), [`eq`] (the polled event queue, and the
//!    completion-event state it routes to CQs and channels), [`uar`] (doorbell pages), and
//!    [`mr`] (memory keys: translation planning, CREATE_MKEY with the fewest MTT entries).
//! 3. The context: `context` (the state an opened function shares with every object: the
//!    device lock, the dead-device flag, the live regions by key, key variants), [`pd`]
//!    (protection domains: the commands, the PD state and its handle) and `region` (a memory
//!    region's state and its handle).
//! 4. Objects on the context: [`counters`] (Q counter sets, vport counters), [`cq`]
//!    (completion queues and CQE parsing), [`ah`] (address handles: the mlx5 address vector
//!    of a datagram's destination) and [`qp`] (queue pairs: work queues, states and
//!    transitions, doorbells, CQ binding; one module per service type: RC, UD, and the GSI
//!    QP); on them
//!    [`mw`] (memory windows: alloc, bind by UMR WQE, invalidation) and [`umr`] (the driver's
//!    UMR QP and the mkey cache; the context holds it through a type the verbs layer names).
//!    [`eth`] (the Ethernet queue: TIS, SQ, RQ, TIR, NIC receive steering and the vport's
//!    address lists, as Linux mlx5e makes them, on the CQs, a PD and a region) sits there too.
//! 5. [`verbs`]: the public, ibverbs-like API on top (the [`Context`], what PDs and regions
//!    do, posting with borrowed regions); the crate root re-exports it.
//!
//! Sources are cited inline: "rdma-core" is linux-rdma/rdma-core (providers/mlx5), "Linux" is
//! the mlx5 driver in the Linux/OFED tree (drivers/net/ethernet/mellanox/mlx5/core,
//! drivers/infiniband/hw/mlx5), cited as repo/path and function or struct.

#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

extern crate alloc;
// Unit tests drive the driver over the emulated HCA with the integration tests' HAL.
#[cfg(test)]
extern crate self as mlx5;
#[cfg(test)]
extern crate std;

pub mod ah;
pub mod caps;
pub mod cmd;
mod context;
pub mod counters;
pub mod cq;
pub mod eq;
pub mod error;
pub mod eth;
pub mod hal;
pub mod hca;
pub mod mr;
pub mod mw;
pub mod pages;
pub mod pd;
pub mod qp;
pub mod uar;
pub mod umr;
pub mod verbs;
mod wc;
mod wq;

mod rand;
mod region;

/// The integration tests' HAL over the emulated HCA, for unit tests of crate-internal paths.
#[cfg(test)]
#[allow(dead_code, unused_imports, missing_docs)]
#[path = "../tests/common/mod.rs"]
mod test_hal;

pub use counters::{CounterSet, QCounters, TrafficCounter, VportCounters};
pub use error::{CmdError, CmdStatus, DeliveryStatus, Error, InvalidInput, Refused, Result};
pub use eth::{EthConfig, EthError, EthQueue};
pub use hal::{DmaBuffer, Hal, HalError};
pub use mw::{MemoryWindow, MwBind, MwType};
pub use verbs::*;
