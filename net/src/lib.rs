//! The unikernel's IP stack: [smoltcp] 0.12 over any Ethernet [`Nic`], with blocking calls
//! that take deadlines and return typed errors.
//!
//! The unikernel's NIC is the mlx5 driver's Ethernet queue: [`Nic`] is implemented for
//! `mlx5::EthQueue`.
//!
//! # What it answers
//! - **ARP**: requests for our address are answered by smoltcp; [`Stack::resolve`] finds a
//!   neighbour's MAC (the RDMA apps put it in a RoCE address vector) by sending ARP requests
//!   every [`ARP_RETRY_US`] until the deadline, and learns it from the reply. Static entries
//!   ([`Stack::add_neighbour`]) answer `resolve` without asking.
//! - **ICMP echo**: smoltcp answers pings to our address; [`Stack::ping`] sends one.
//! - **TCP**: [`Stack::tcp_listen`] / [`Stack::tcp_accept`], [`Stack::tcp_connect`],
//!   [`Stack::tcp_send`] (queues what fits, never waits), [`Stack::tcp_queue_all`] (waits
//!   for room only), [`Stack::tcp_send_all`] (waits for the acknowledgement),
//!   [`Stack::tcp_recv`], [`Stack::tcp_recv_exact`],
//!   [`Stack::tcp_close`], [`Stack::tcp_abort`].
//! - **UDP**: [`Stack::udp_bind`], [`Stack::udp_send`], [`Stack::udp_recv`],
//!   [`Stack::udp_close`].
//!
//! # The NIC under it
//! Any [`Nic`]: the driver's [`mlx5::EthQueue`] is one (its send errors other than a full queue
//! or a frame over the MTU stay the driver's [`mlx5::EthError`], in [`NicError::Device`]);
//! [`loopback::pair`] is an in-memory link of two, for tests.
//!
//! # How it runs
//! Nothing runs by itself: the stack moves only inside [`Stack::poll`], and every blocking
//! call polls it in a loop until its condition holds or the [`Clock`] passes its deadline
//! (then [`NetError::Timeout`] names the call). A program that waits for something else (RDMA
//! completions) calls `poll` in that wait so ARP and ping are answered and TCP timers run.
//! Deadlines are absolute, in the clock's microseconds. Each turn of a wait with nothing to do
//! calls [`Clock::relax`].
//!
//! # What it refuses
//! Anything smoltcp drops (bad checksums, frames for other hosts, unknown protocols, IP
//! fragments, IP options it does not know) is dropped silently. The neighbour table of
//! [`Stack::resolve`] learns only what smoltcp's own ARP input learns: requests and replies
//! whose target is our address, from a unicast sender inside our subnet. Configurations smoltcp would panic on (a multicast MAC, a prefix over 32, an
//! address that is not unicast, a gateway outside the subnet) are refused by [`Stack::new`]
//! with [`ConfigError`]. Handles from another stack are refused with
//! [`NetError::ForeignHandle`].
//!
//! # Its limits
//! - IPv4 only, one address, one subnet, an optional default gateway; no DHCP, DNS, IPv6,
//!   multicast groups, IP fragmentation or reassembly, checksum offload, TSO/LRO.
//! - Blocking calls spin (calling [`Clock::relax`]); there is no interrupt or waker.
//! - smoltcp's own ARP cache is separate from the [`Stack::resolve`] table; a static entry
//!   ([`Stack::add_neighbour`]) reaches it once, as an ARP reply handed to smoltcp, and
//!   smoltcp asks by ARP again after its entry lifetime (a minute).
//! - A dropped [`TcpConn`], [`TcpListener`] or [`UdpSocket`] handle leaves its socket in the
//!   stack until the stack is dropped: close it.
//! - smoltcp reads received frames and builds the frames it sends in place in the [`Nic`]'s
//!   buffers, except a reply it builds while the frame it answers is still lent (an ACK, an
//!   ARP or ICMP answer): that one is copied once into the NIC's transmit buffer.
//!
//! [smoltcp]: https://docs.rs/smoltcp/0.12

#![no_std]

extern crate alloc;

mod arp;
mod error;
pub mod loopback;
mod mlx5_eth;
mod nic;
mod stack;
mod tcp;
mod udp;

pub use arp::NEIGHBOUR_CAPACITY;
pub use error::{ConfigError, NetError, Op};
pub use nic::{Nic, NicError, NicStats};
pub use stack::{Stack, StackConfig, ARP_RETRY_US, POLL_BUDGET, TX_BURST};
pub use tcp::{TcpConn, TcpListener, LINGER_US};
pub use udp::{Datagram, UdpSocket};

/// Re-exported: the address type of the API.
pub use core::net::Ipv4Addr;

/// The time source of the stack.
pub trait Clock {
    /// Microseconds since an arbitrary moment, never going backwards.
    fn now_us(&self) -> u64;
    /// Called in each turn of a blocking wait that found nothing to do (a `pause`, a yield to
    /// other threads in host tests). The default is a spin-loop hint.
    fn relax(&self) {
        core::hint::spin_loop();
    }
}
