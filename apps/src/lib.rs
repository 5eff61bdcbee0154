//! Applications linked into the unikernel image, one binary each. `cargo run -- --app NAME`
//! boots one of them.
#![no_std]

#[cfg(test)]
extern crate std;

extern crate alloc;

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

/// Nodes on an in-memory link for the host tests.
#[cfg(test)]
mod testnet;
