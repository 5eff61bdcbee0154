//! The NVMe over Fabrics RDMA transport: the target core of the `nvmeof` crate on the mlx5
//! driver's verbs and librdmacm's API (`rdmacm`), as Linux's `nvmet-rdma`
//! (`drivers/nvme/target/rdma.c`) puts nvmet on the RDMA stack.
//!
//! - One RC QP per NVMe queue, created through rdma_cm on the connect request
//!   ([`rdmacm::RdmaCm::create_qp`]) and sized from the REQ's private data
//!   ([`nvmeof::Target::accept`]): receives pre-posted for the whole queue depth (64 bytes
//!   plus the advertised in-capsule data each, one region per queue), the REP's `crqsize`;
//!   a request the core refuses is rejected with the NVMe/RDMA reject status.
//! - Keyed SGLs: a write's data comes by RDMA READ straight into the disk's memory, a read's
//!   goes by RDMA WRITE straight out of it, the response SEND right behind it (with
//!   invalidate of the host's rkey when the SGL asked: type 0x4f). The disk is one memory
//!   region ([`disk::MrDisk`]) that only the local side accesses. Admin data (Identify, logs,
//!   Connect data by RDMA READ) goes through a bounce slot per command.
//! - A write is completed only after its RDMA READ completed: its bytes are in the disk.
//! - Teardown: a DREQ, a transport error or the core's keep-alive timeout ends a connection:
//!   its queue leaves the core, its id is destroyed (the QP once the device gave it back,
//!   through TIMEWAIT), its buffers with it.
//!
//! Layers: `disk` (the backend over a region), `conn` (a connection's buffers and work
//! request ids), `transport` ([`NvmfRdma`]: events, completions, the core's steps).

#![no_std]
#![deny(missing_docs)]

extern crate alloc;

use alloc::string::String;

pub mod disk;

mod conn;
mod transport;

pub use transport::{fmt_ip, NvmfRdma};

/// The transport's own limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The port (NVMe/RDMA's 4420: `include/linux/nvme-rdma.h` `NVME_RDMA_IP_PORT`).
    pub port: u16,
    /// Most connections (queues of every controller) at once; and the listen backlog.
    pub max_conns: usize,
    /// Entries of the CQ all connections share (at least the sum of their queue depths:
    /// three per command in flight, plus the receives).
    pub cq_entries: u32,
}

impl Default for Limits {
    /// Port 4420, 16 connections, a CQ of 8191 entries.
    fn default() -> Self {
        Limits {
            port: 4420,
            max_conns: 16,
            cq_entries: 8191,
        }
    }
}

/// Why a connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// The host disconnected (DREQ).
    Host,
    /// The connection manager gave up on it (no RTU, REJ, TIMEWAIT over).
    Cm,
    /// The core tore its controller down (keep-alive timeout, a fatal command error).
    Controller,
    /// A work request failed, or the target could not post.
    Transport,
}

/// What the target did, a line each for the appliance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// A queue's Connect succeeded.
    Connected {
        /// The host's address.
        ip: [u8; 4],
        /// Queue ID.
        qid: u16,
        /// Controller ID.
        cntlid: u16,
        /// Subsystem NQN.
        subsystem: String,
        /// Host NQN.
        host: String,
    },
    /// A connection request was refused.
    Rejected {
        /// The host's address.
        ip: [u8; 4],
        /// The NVMe/RDMA reject status sent.
        status: nvmeof::rdma_cm_data::RejStatus,
    },
    /// A connection ended.
    Disconnected {
        /// The host's address.
        ip: [u8; 4],
        /// Queue ID (0 before a Connect named one).
        qid: u16,
        /// Controller ID, if its Connect succeeded.
        cntlid: Option<u16>,
        /// Why.
        why: Why,
    },
    /// A work request failed (the connection then ends).
    Transport {
        /// The host's address.
        ip: [u8; 4],
        /// The completion's status.
        status: mlx5::WcStatus,
    },
    /// The device failed a CQ poll.
    DeviceError(mlx5::Error),
}

/// Why the target could not be made or could not listen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The driver failed.
    Verbs(mlx5::Error),
    /// rdma_cm refused.
    Cm(rdmacm::CmError),
    /// The core's configuration is invalid.
    Config(nvmeof::target::ConfigError),
    /// The connection or command is gone (internal: ends the connection).
    Gone,
}

impl From<mlx5::Error> for Error {
    fn from(e: mlx5::Error) -> Self {
        Error::Verbs(e)
    }
}

impl From<rdmacm::CmError> for Error {
    fn from(e: rdmacm::CmError) -> Self {
        Error::Cm(e)
    }
}
