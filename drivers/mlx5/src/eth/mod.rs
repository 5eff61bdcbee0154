//! The Ethernet queue: one send queue and one receive queue of raw Ethernet frames on the
//! function's NIC vport, built from PRM objects the way Linux mlx5e builds a channel
//! (drivers/net/ethernet/mellanox/mlx5/core/en_main.c, en_fs.c, en_tx.c, en_rx.c; "Linux" is
//! the OFED 24.07 tree, as everywhere in this crate).
//!
//! One module per PRM object: `tis` (transport interface send), `sq` (the send queue and
//! its WQEs), `rq` (the cyclic receive queue), `wq` (the work queue both are made of), `tir`
//! (transport interface receive), `flow` (the NIC receive flow table, its group and rules) and
//! `vport` (the vport's address lists); `queue` puts them together into [`EthQueue`].
//!
//! What [`crate::Context::open_eth`] creates, in mlx5e's order (en_common.c
//! `mlx5e_create_mdev_resources`, en_main.c `mlx5e_open_channel` / `mlx5e_open_txqsq` /
//! `mlx5e_open_rq`, tir.c, en_fs.c `mlx5e_create_flow_steering`, `mlx5e_set_rx_mode_work`):
//! a protection domain and one registered buffer region (the transmit and receive buffers;
//! mlx5e's `res->mkey`), a UAR for the send doorbell (mlx5e's `bfreg`), a TIS on the
//! context's transport domain, the send and receive CQs (the driver's [`crate::cq`]), the SQ
//! and the RQ (each created in RST and moved to RDY), a direct TIR to the RQ, a NIC_RX flow
//! table made the root, with one group matching the outer destination MAC and a rule per
//! address (the port's MAC, broadcast, the IPv6 all-nodes group and the solicited-node group
//! of the MAC's link-local address) forwarding to the TIR, and the vport's unicast and
//! multicast address lists. Dropping the queue destroys them in reverse order; DMA memory
//! is freed only after the object that used it is gone (kept for ever when a destroy fails).

mod flow;
mod queue;
mod rq;
mod sq;
mod tir;
mod tis;
mod vport;
mod wq;

#[cfg(test)]
mod tests;

use core::fmt;

use crate::cq::WcStatus;
use crate::error::Error;

pub(crate) use queue::open;
pub use queue::EthQueue;

/// Sizes of an [`EthQueue`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EthConfig {
    /// Frames the send queue holds before [`EthQueue::send`] reports
    /// [`EthError::QueueFull`] (rounded up to a power of two).
    pub sq_depth: u32,
    /// Receive buffers kept posted (rounded up to a power of two).
    pub rq_depth: u32,
}

impl Default for EthConfig {
    /// 64 and 64 (mlx5e's smallest queues are 64 entries: en/params.h
    /// `MLX5E_PARAMS_MINIMUM_LOG_SQ_SIZE` and `MLX5E_PARAMS_MINIMUM_LOG_RQ_SIZE` are 6).
    fn default() -> Self {
        EthConfig {
            sq_depth: 64,
            rq_depth: 64,
        }
    }
}

/// Why a frame was not sent or received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EthError {
    /// The frame is longer than [`EthQueue::mtu`].
    FrameTooLarge {
        /// Its length.
        len: usize,
        /// The largest frame the queue sends.
        max: usize,
    },
    /// The frame is shorter than an Ethernet header.
    FrameTooShort {
        /// Its length.
        len: usize,
        /// The smallest frame the queue sends (`ETH_HLEN`, 14).
        min: usize,
    },
    /// Every send slot holds a frame the device has not completed yet.
    QueueFull,
    /// The device completed a frame in error (the send queue then flushes what follows:
    /// `sqc.flush_in_error_en`, as mlx5e creates it).
    SendFailed {
        /// The completion's status.
        status: WcStatus,
        /// Its vendor syndrome.
        vendor_err: u8,
    },
    /// A receive completed in error.
    RecvFailed {
        /// The completion's status.
        status: WcStatus,
        /// Its vendor syndrome.
        vendor_err: u8,
    },
    /// The device or the driver failed (a dead device, a HAL error).
    Device(Error),
}

impl From<Error> for EthError {
    fn from(e: Error) -> Self {
        EthError::Device(e)
    }
}

impl fmt::Display for EthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EthError::Device(e) => write!(f, "{e}"),
            other => write!(f, "{other:?}"),
        }
    }
}

/// `ETH_HLEN` (Linux include/uapi/linux/if_ether.h).
const ETH_HLEN: usize = 14;
/// `VLAN_HLEN` (Linux include/linux/if_vlan.h).
const VLAN_HLEN: usize = 4;
/// `ETH_FCS_LEN` (Linux include/uapi/linux/if_ether.h).
const ETH_FCS_LEN: usize = 4;
/// The bytes the vport's hardware MTU counts beyond the netdev MTU: Linux en.h
/// `MLX5E_ETH_HARD_MTU` (`ETH_HLEN + VLAN_HLEN + ETH_FCS_LEN`), which `MLX5E_HW2SW_MTU`
/// subtracts.
const ETH_HARD_MTU: usize = ETH_HLEN + VLAN_HLEN + ETH_FCS_LEN;
