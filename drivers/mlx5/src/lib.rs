//! mlx5 (ConnectX-4/5) RDMA driver and a verbs API, `no_std` + `alloc`.
//!
//! The driver talks to the HCA only through [`hal::Hal`] (BAR0 MMIO, DMA memory, a clock, a
//! random source), so the same code runs in the unikernel, over Linux VFIO
//! (`drivers/mlx5-vfio`) and in host tests against the emulated HCA (`sim/mlx5`).
//!
//! One module per PRM object:
//! - [`hal`]: the hardware-access trait and the checked DMA-buffer view the driver uses.
//! - [`cmd`]: the command queue (entries, mailbox chains, tokens, health checks).
//! - [`caps`]: QUERY_HCA_CAP / SET_HCA_CAP and the capability values the driver needs.
//! - [`pages`]: firmware pages (QUERY_PAGES / MANAGE_PAGES give and take).
//! - [`eq`]: the polled event queue for page requests and asynchronous events.
//! - [`uar`]: user access regions (doorbell pages).
//! - [`pd`]: protection domains and the transport domain.
//! - [`counters`]: Q counter sets and the vport's traffic counters.
//! - [`mr`]: memory keys (CREATE_MKEY with the fewest MTT entries).
//! - [`mw`]: memory windows (types 1 and 2: alloc, bind by UMR WQE, invalidation).
//! - [`cq`]: completion queues and CQE parsing.
//! - [`qp`]: RC queue pairs, WQE building and doorbells.
//! - [`hca`]: bring-up and teardown of the function.
//! - [`verbs`]: the public, ibverbs-like API.
//! - [`error`]: typed errors.
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

pub mod caps;
pub mod cmd;
pub mod counters;
pub mod cq;
pub mod eq;
pub mod error;
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

mod rand;

/// The integration tests' HAL over the emulated HCA, for unit tests of crate-internal paths.
#[cfg(test)]
#[allow(dead_code, unused_imports, missing_docs)]
#[path = "../tests/common/mod.rs"]
mod test_hal;

pub use counters::{CounterSet, QCounters, TrafficCounter, VportCounters};
pub use error::{CmdError, CmdStatus, DeliveryStatus, Error, InvalidInput, Refused, Result};
pub use hal::{DmaBuffer, Hal, HalError};
pub use mw::{MemoryWindow, MwBind, MwType};
pub use verbs::*;
