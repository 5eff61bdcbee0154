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
    /// Most connections (queues of every controller, the discovery controller's too) at
    /// once (rdma_cm tracks at most [`rdmacm::MAX_CONNS`], those in TIMEWAIT included); and
    /// the listen backlog, up to [`rdmacm::BACKLOG_MAX`]. A connection request past it is
    /// refused with NVME_RDMA_CM_NO_RSC.
    pub max_conns: usize,
    /// Entries of the CQ all connections share: at least [`Limits::cq_needed`] of
    /// `max_conns`, checked by [`NvmfRdma::new`].
    pub cq_entries: u32,
}

/// Completions one connection can have on the CQ at once, at its deepest queue
/// ([`QUEUE_SIZE`](nvmeof::ctrl::QUEUE_SIZE) receives, the core refuses a deeper one): a
/// receive per entry, and on the send queue an RDMA READ or WRITE and a response per command
/// plus one (`transport.rs` `open_qp`). Linux gives each queue a CQ of `recv_queue_size +
/// 2 * send_queue_size` (`drivers/nvme/target/rdma.c` `nvmet_rdma_create_queue_ib`).
pub const CQ_PER_CONN: u32 = 3 * nvmeof::ctrl::QUEUE_SIZE as u32 + 1;

impl Limits {
    /// Port 4420, `max_conns` connections, a CQ for the worst case of each.
    pub fn new(port: u16, max_conns: usize) -> Self {
        Limits {
            port,
            max_conns,
            cq_entries: Self::cq_needed(max_conns),
        }
    }

    /// CQ entries `max_conns` connections need at worst (saturating).
    pub fn cq_needed(max_conns: usize) -> u32 {
        u32::try_from(max_conns)
            .unwrap_or(u32::MAX)
            .saturating_mul(CQ_PER_CONN)
    }
}

impl Default for Limits {
    /// Port 4420, 16 connections, a CQ for the worst case of each (6,160 entries).
    fn default() -> Self {
        Limits::new(4420, 16)
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
    /// A queue's Connect command was refused (host not allowed, unknown subsystem, bad
    /// controller ID, ...): its failing response went out, the connection stays until the
    /// host drops it.
    ConnectRefused {
        /// The host's address.
        ip: [u8; 4],
        /// The response's status field (NVMe status code and type, DNR).
        status: u16,
        /// The subsystem NQN the Connect named.
        subsystem: String,
        /// The host NQN the Connect gave.
        host: String,
    },
    /// The core refused a command or a transfer's end as fatal for its queue's controller
    /// (the connection then ends).
    Fatal {
        /// The host's address.
        ip: [u8; 4],
        /// The core's error.
        error: nvmeof::ExecError,
    },
    /// A command's buffer did not fit its bounce slot, or its tag had none (the host
    /// overran its queue): the connection then ends.
    Overrun {
        /// The host's address.
        ip: [u8; 4],
        /// The command's tag.
        tag: usize,
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
    /// The core refused a command or a transfer (ends the connection).
    Exec(nvmeof::ExecError),
    /// Command `tag` has no bounce slot, or its buffer is longer than the slot or the
    /// staging buffer: the host overran its queue, or the core asked for too much (ends
    /// the connection).
    Overrun {
        /// The command's tag.
        tag: usize,
    },
    /// The CQ cannot hold the completions of `max_conns` connections at worst.
    CqTooSmall {
        /// Entries needed ([`Limits::cq_needed`]).
        need: u32,
        /// Entries configured, or the most the device makes.
        have: u32,
    },
}

impl From<nvmeof::ExecError> for Error {
    fn from(e: nvmeof::ExecError) -> Self {
        Error::Exec(e)
    }
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
