//! Applications linked into the unikernel image, one binary each. `cargo run -- --app NAME`
//! boots one of them.
#![no_std]

#[cfg(test)]
extern crate std;

extern crate alloc;

/// What the apps' `main()`s share: exit status and lines, the tools' option errors, the HCA
/// around a run.
pub mod app;

/// The out-of-band channel and shared helpers of the Linux-peer apps (`pingpong`, `perftest`).
pub mod oob;

/// What `pingpong` and `ud-pingpong` share: rdma-core's pingpong options and exchange, the
/// messages and their check.
pub mod pingpong;

/// What the `perftest` app exchanges with perftest.
pub mod perftest;

/// The node on the network: the cmdline's network words, the Ethernet queue and IP stack.
pub mod stack;

/// `netd`'s TCP echo service on a node.
pub mod echo;

/// The apps over rdma_cm: a node with its connection manager, and the loop that polls both.
pub mod cm;

/// `getopt(3)` for the apps that take the options of librdmacm's examples.
pub mod getopt;

/// The server sides of cmatose.c and udaddy.c without the HCA: options, bookkeeping.
pub mod cmtools;

/// The storage appliance `nvmf-target`: its command line, configuration and serving loop.
pub mod nvmf;

/// rping's protocol (librdmacm/examples/rping.c), both roles, without the HCA.
pub mod rping;

/// Nodes on an in-memory link for the host tests.
#[cfg(test)]
mod testnet;

/// The driver's tests' HAL over the model, for the host tests on emulated HCAs.
#[cfg(test)]
#[allow(dead_code, unused_imports)]
#[path = "../../drivers/mlx5/tests/common/mod.rs"]
mod sim;
