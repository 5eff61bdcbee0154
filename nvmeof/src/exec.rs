//! The execution API between the core and an RDMA transport: what the transport hands the
//! core and what the core answers.
//!
//! One RC connection carries one NVMe queue. The transport:
//!
//! 1. on a CM connect request, calls [`Target::accept`](crate::Target::accept) with the REQ's
//!    NVMe private data (after the rdma_cm header); it replies with the REP private data
//!    ([`Accepted::rep`]) and sizes the QP from [`Accepted::recv_depth`] and
//!    [`Accepted::send_depth`], or rejects with [`RejStatus::to_bytes`](crate::rdma_cm_data::RejStatus::to_bytes)
//!    (REJ reason "consumer defined", as Linux `nvmet_rdma_cm_reject` does). If the device
//!    cannot make a QP that deep, it rejects with
//!    [`RejStatus::NoRsc`](crate::rdma_cm_data::RejStatus::NoRsc) and closes the queue
//!    (Linux `nvmet_rdma_alloc_queue`);
//! 2. for every received SEND (a command capsule: SQE + in-capsule data), calls
//!    [`Target::submit`](crate::Target::submit) with a staging buffer of at least
//!    [`STAGING_LEN`] bytes that it keeps for this command until its response is sent, and
//!    does what the [`Step`] says:
//!    - [`Step::Respond`]: post the 16-byte CQE as a SEND, or SEND with invalidate of
//!      [`Response::invalidate`];
//!    - [`Step::Transfer`]: move the data between the host's keyed buffer and the local side
//!      ([`Local::Disk`]: the namespace's backend memory at that offset, zero-copy; or
//!      [`Local::Buf`]: the first `len` bytes of the staging buffer). [`Dir::ToHost`] is an
//!      RDMA WRITE (the core already filled the staging buffer, or the disk holds the data);
//!      its response may be posted right behind the WRITE (RC ordering), so the transport
//!      may call [`Target::complete_transfer`](crate::Target::complete_transfer) at once.
//!      [`Dir::FromHost`] is an RDMA READ: call `complete_transfer` only once the READ
//!      completed, so a write is completed only once its bytes are in the backend;
//!    - [`Step::Hold`]: nothing to send now (an Asynchronous Event Request held until an
//!      event); its response comes from [`Target::take_completion`](crate::Target::take_completion);
//! 3. repost the receive buffer as soon as `submit` returns (the core copied what it needs).
//!    Receive buffers hold 64 bytes plus the in-capsule data the target advertises
//!    ([`TargetConfig::inline_data_size`](crate::TargetConfig::inline_data_size), IOCCSZ);
//! 4. calls [`Target::tick`](crate::Target::tick) with the time (keep-alive), and after every
//!    call drains [`Target::take_teardown`](crate::Target::take_teardown): queues whose
//!    controller died (keep-alive expired, fatal error) to disconnect;
//! 5. calls [`Target::close`](crate::Target::close) when a connection is gone (DREQ, error,
//!    teardown done); nothing of the queue is left in the core afterwards.
//!
//! The SQ head in every CQE is the core's; the transport sends CQEs as they are.
//!
//! A transport's receive completion, in outline (`post_send`, `post_rdma_write`,
//! `post_rdma_read` and `disconnect` stand for the verbs):
//!
//! ```
//! # use nvmeof::{Backend, Dir, QueueId, Step, Target};
//! # fn post_send(_: &nvmeof::Response) {}
//! # fn post_rdma_write(_: &nvmeof::Transfer) {}
//! # fn post_rdma_read(_: &nvmeof::Transfer) {}
//! # fn disconnect(_: QueueId) {}
//! fn on_receive<B: Backend>(t: &mut Target<B>, q: QueueId, capsule: &[u8], staging: &mut [u8]) {
//!     match t.submit(q, capsule, staging) {
//!         Ok(Step::Respond(r)) => post_send(&r), // SEND, or SEND with invalidate
//!         Ok(Step::Transfer(tr)) if tr.dir == Dir::ToHost => {
//!             post_rdma_write(&tr); // from the disk or the staging buffer
//!             // RC keeps the order: the response may follow the WRITE at once.
//!             if let Ok(r) = t.complete_transfer(q, tr.tag, true, staging) {
//!                 post_send(&r);
//!             }
//!         }
//!         // Its completion calls complete_transfer(q, tr.tag, ok, staging).
//!         Ok(Step::Transfer(tr)) => post_rdma_read(&tr),
//!         Ok(Step::Hold) => {}
//!         Err(_) => {} // the queues to drop are in take_teardown
//!     }
//!     while let Some(dead) = t.take_teardown() {
//!         disconnect(dead); // then t.close(dead) once the connection is gone
//!     }
//! }
//! ```

use crate::cqe::Cqe;
use crate::rdma_cm_data::CmRep;
use crate::sgl::KeyedSgl;

/// The smallest staging buffer [`Target::submit`](crate::Target::submit) takes: the largest
/// admin data the core moves through it (Identify and the Commands Supported and Effects log
/// are 4096 bytes; a longer request is answered with an error status).
pub const STAGING_LEN: usize = 4096;

/// A queue (one RC connection), as the core names it to the transport. The index is stable
/// while the queue lives and small (for the transport's tables); the generation makes a stale
/// handle harmless.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QueueId {
    pub(crate) index: u32,
    pub(crate) gen: u32,
}

impl QueueId {
    /// The slot index, below the number of queues ever open at once.
    pub fn index(&self) -> usize {
        self.index as usize
    }
}

/// A command in flight on a queue between [`Step::Transfer`] and
/// [`Target::complete_transfer`](crate::Target::complete_transfer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tag(pub(crate) u16);

impl Tag {
    /// The slot index, below the queue's depth (plus the commands a host sends beyond it).
    pub fn index(&self) -> usize {
        usize::from(self.0)
    }
}

/// The direction of a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// From the host's buffer to the local side: an RDMA READ.
    FromHost,
    /// From the local side to the host's buffer: an RDMA WRITE.
    ToHost,
}

/// The local side of a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Local {
    /// The backend of disk `disk` (the order of [`Target::new`](crate::Target::new)'s disks),
    /// bytes `offset..offset + len`; always inside the namespace.
    Disk {
        /// Index of the disk.
        disk: u16,
        /// Byte offset in the disk.
        offset: u64,
        /// Bytes.
        len: u32,
    },
    /// The first `len` bytes of the staging buffer given to `submit`.
    Buf {
        /// Bytes.
        len: u32,
    },
}

impl Local {
    /// Bytes to move.
    pub fn len(&self) -> u32 {
        match *self {
            Local::Disk { len, .. } | Local::Buf { len } => len,
        }
    }

    /// Whether there is nothing to move (never the case in a [`Transfer`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A data transfer the transport is to perform for a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// The command, for `complete_transfer`.
    pub tag: Tag,
    /// READ or WRITE.
    pub dir: Dir,
    /// Where the bytes are or go locally.
    pub local: Local,
    /// The host's buffer (`remote.len` equals `local.len()`): for a READ from the host, maybe
    /// a prefix of the buffer its keyed SGL names (a keyed Dataset Management reads only its
    /// ranges).
    pub remote: KeyedSgl,
}

/// A response capsule to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response {
    /// The completion queue entry (16 bytes on the wire: [`Cqe::to_bytes`]).
    pub cqe: Cqe,
    /// Send it as SEND with invalidate of this rkey (the command's SGL was type 0x4f);
    /// otherwise as a plain SEND (Linux `drivers/nvme/target/rdma.c`
    /// `nvmet_rdma_queue_response`).
    pub invalidate: Option<u32>,
}

/// What the transport is to do for a received capsule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Send this response; the command is done.
    Respond(Response),
    /// Move data, then call `complete_transfer` with the tag for the response.
    Transfer(Transfer),
    /// Nothing now (an Asynchronous Event Request); the response comes later from
    /// `take_completion`, or never if the queue goes first.
    Hold,
}

/// A connection request accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The queue, for every later call.
    pub queue: QueueId,
    /// The queue ID the host named (0: an admin queue); its Connect decides for good.
    pub qid: u16,
    /// The REP's private data ([`CmRep::to_bytes`]).
    pub rep: CmRep,
    /// Receives to pre-post (the host's SQ size: hsqsize + 1).
    pub recv_depth: u32,
    /// Sends the host can have outstanding towards it (its receive queue: hrqsize).
    pub send_depth: u32,
}

/// Why a call could not be carried out. Each error that names a host fault has already torn
/// the controller down in the core (its queues are in
/// [`Target::take_teardown`](crate::Target::take_teardown)); the transport disconnects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecError {
    /// No such queue (closed, or a stale handle).
    UnknownQueue,
    /// No command in flight under this tag.
    UnknownTag,
    /// A capsule shorter than an SQE: fatal for the queue's controller (Linux
    /// `drivers/nvme/target/rdma.c` `nvmet_rdma_recv_done`, "capsule size less than 64
    /// bytes").
    ShortCapsule(usize),
    /// More commands in flight than the core keeps for a queue (the host ignored the queue
    /// size by far): fatal for the controller.
    Overrun,
    /// A transfer failed: fatal for the controller, no response (Linux
    /// `nvmet_rdma_read_data_done` on a failed work completion).
    TransferFailed,
    /// The staging buffer is shorter than [`STAGING_LEN`].
    StagingTooSmall(usize),
}
