//! Applications linked into the unikernel image, one binary each. `cargo run -- --app NAME`
//! boots one of them.
#![no_std]

#[cfg(test)]
extern crate std;

extern crate alloc;

/// The out-of-band channel and shared helpers of the Linux-peer apps (`pingpong`, `perftest`).
pub mod oob;

/// The node on the network: the cmdline's network words, the Ethernet queue and IP stack.
pub mod stack;
