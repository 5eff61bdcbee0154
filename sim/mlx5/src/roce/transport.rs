//! Types shared by the RC requester ([`super::requester`]) and responder ([`super::responder`]):
//! time, timers, completion statuses, the packet views both consume and produce, and the small
//! traits through which they reach memory, completions and the wire.
//!
//! Both state machines are pure: no clocks (the caller passes `now` in nanoseconds of any
//! monotonic clock, virtual in tests), no threads, no allocation per packet beyond the caller's.
//! Everything they do to the outside world goes through four traits:
//!
//! - [`Tx`]: emits one packet: BTH, extension headers and a [`TxPayload`] — its length, where
//!   the bytes live ([`PayloadSrc`]) and a callback that copies them straight into a frame
//!   buffer. A frame-building link makes the frame with
//!   [`super::RoceHeaders::encode_for_payload`], calls the callback on the payload range and
//!   [`super::RoceHeaders::seal_icrc`]: the payload moves once, from memory into the frame. A
//!   link whose ends share memory can skip the frame and pass [`RxPayload::Ref`] instead: the
//!   payload then moves once, from the sender's memory into the destination;
//! - [`ReqMemory`]: the requester's local side (gather a WQE's message bytes, scatter READ
//!   response bytes and an atomic's original value into it);
//! - [`RespMemory`]: the responder's side (remote-key checked writes, reads and atomics, receive
//!   WQE scatter, SEND_WITH_INVALIDATE);
//! - [`Completions`]: work completions, in order, with IB status.

use super::frame::{Bth, ExtHdrs, RoceFrame};

/// Nanoseconds on the caller's monotonic clock.
pub type Nanos = u64;

/// The local ACK timeout for a QP's `ack_timeout` (the IB `timeout` QP attribute:
/// 4.096 µs × 2^n), `None` for 0 (infinite). Linux include/rdma/rdmavt_qp.h and rxe_qp.c
/// `rxe_qp_from_attr` (`qp_timeout_jiffies = nsecs_to_jiffies(4096 << timeout)`).
pub fn ack_timeout_ns(n: u8) -> Option<Nanos> {
    (n != 0).then(|| 4096u64 << n.min(31))
}

/// IB RNR timer encodings in µs (the AETH RNR timer field; Linux include/rdma/ib_verbs.h
/// `IB_RNR_TIMER_*`; 0 = 655.36 ms).
const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
    5120, 7680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840, 245_760,
    327_680, 491_520,
];

/// The RNR NAK delay for a 5-bit RNR timer encoding (the AETH's low bits in an RNR NAK).
pub fn rnr_timer_ns(timer: u8) -> Nanos {
    RNR_TIMER_US[(timer & 0x1f) as usize] as u64 * 1000
}

/// Whether an MTU is a valid IB path MTU (256, 512, 1024, 2048 or 4096 bytes; Linux `enum ib_mtu`,
/// mlx5 `qpc.mtu` 1..5).
pub fn valid_mtu(mtu: u32) -> bool {
    matches!(mtu, 256 | 512 | 1024 | 2048 | 4096)
}

/// Packets a message of `len` bytes takes at `mtu` (a zero-length message takes one).
pub fn packets_for(len: u32, mtu: u32) -> u32 {
    len.div_ceil(mtu).max(1)
}

/// Work completion status (verbs names, and the mlx5 CQE syndrome each maps to,
/// [`WcStatus::cqe_syndrome`]): the PRM crate's, shared with the driver. The transport completes
/// with `Success`, `LocLenErr`, `LocQpOpErr`, `LocProtErr`, `WrFlushErr`, `RemInvReqErr`,
/// `RemAccessErr`, `RemOpErr`, `RetryExcErr`, `RnrRetryExcErr` and `LocAccessErr`.
pub use mlx5_prm::cqe::WcStatus;

/// The payload of a received packet. The state machines never look at payload bytes; they
/// hand this to [`ReqMemory::scatter`], [`RespMemory::write`] or [`RespMemory::recv_write`],
/// which move it. That keeps the one-copy move open to a link whose ends share memory
/// (loopback, two HCAs in one process): its [`Tx`] leaves the bytes where they are, passes a
/// [`RxPayload::Ref`] naming them (from [`TxPayload::src`]), and the receiving environment
/// copies straight from the sender's memory into the destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxPayload<'a> {
    /// Bytes carried in the frame (without pad).
    Bytes(&'a [u8]),
    /// A payload left in the sender's memory: `token` is the link's own name for it.
    Ref {
        /// Opaque to the transport; meaningful to the environment that resolves it.
        token: u64,
        /// Payload length in bytes.
        len: usize,
    },
}

impl RxPayload<'_> {
    /// Payload length in bytes.
    pub fn len(&self) -> usize {
        match self {
            RxPayload::Bytes(b) => b.len(),
            RxPayload::Ref { len, .. } => *len,
        }
    }
    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A received packet as the state machines see it: the BTH, the extension headers and the
/// payload (without pad). Build it from a decoded frame with [`RxPacket::from_frame`].
#[derive(Clone, Copy, Debug)]
pub struct RxPacket<'a> {
    /// BTH.
    pub bth: Bth,
    /// Extension headers, borrowed (most packets of a message carry none, and the set is
    /// large: a packet handed to the transport does not copy it).
    pub ext: &'a ExtHdrs,
    /// Payload.
    pub payload: RxPayload<'a>,
}

impl<'a> RxPacket<'a> {
    /// The transport view of a decoded RoCEv2 frame (whose ICRC the caller checked).
    pub fn from_frame(f: &'a RoceFrame<'a>) -> RxPacket<'a> {
        RxPacket {
            bth: f.hdrs.bth,
            ext: &f.hdrs.ext,
            payload: RxPayload::Bytes(f.payload),
        }
    }
}

/// Why a payload could not be produced or placed (a key, bounds or DMA fault on the local side).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalFault;

/// Writes the payload into the frame being built.
pub type Fill<'f> = &'f mut dyn FnMut(&mut [u8]) -> Result<(), LocalFault>;

/// Where an outgoing payload lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PayloadSrc {
    /// Bytes `offset..offset + len` of the message of the requester's work request `wr`
    /// (SEND / WRITE packets: what [`ReqMemory::gather`] would copy).
    Wqe {
        /// The work request's `wr_id`.
        wr: u64,
        /// Offset in the message.
        offset: u32,
    },
    /// `len` bytes at `va` under `rkey` in the responder's memory (READ response packets:
    /// what [`RespMemory::read`] would copy).
    Remote {
        /// Remote key (checked when the READ was accepted).
        rkey: u32,
        /// Virtual address.
        va: u64,
    },
}

/// The payload of a packet being sent.
pub struct TxPayload<'f> {
    /// Payload length in bytes (0 for ACKs, READ requests, atomics).
    pub len: usize,
    /// Where the bytes are (`None` when `len` is 0).
    pub src: Option<PayloadSrc>,
    /// Copies the bytes into a frame buffer of exactly `len` bytes (through [`ReqMemory::gather`]
    /// or [`RespMemory::read`]); a link that leaves them in place uses `src` instead.
    pub fill: Fill<'f>,
}

/// Consecutive packets of one message without extension headers (the MIDDLE packets of a
/// WRITE or SEND), each a packet of its own: packet `i` (`0..n`) has `bth` with PSN
/// `bth.psn + i` (24-bit wrap) and AckReq bit `i` of `acks`, and payload bytes
/// `offset + i * each ..+ each` of work request `wr`'s message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxRun {
    /// The first packet's BTH (its `ack_req` is bit 0 of `acks`).
    pub bth: Bth,
    /// Packets (at least 1, at most 64).
    pub n: u32,
    /// AckReq of each packet.
    pub acks: u64,
    /// The work request.
    pub wr: u64,
    /// Message offset of the first packet's payload.
    pub offset: u32,
    /// Payload bytes of each packet.
    pub each: u32,
}

/// The wire side: emits one packet.
pub trait Tx {
    /// Sends a packet with these headers and payload. A frame-building link calls
    /// `payload.fill` on the frame's payload area; when that fails the packet must not be sent
    /// and its error is returned.
    fn send(&mut self, bth: &Bth, ext: &ExtHdrs, payload: TxPayload<'_>) -> Result<(), LocalFault>;

    /// Sends the packets of `run` at once, if this link can hand them over without building
    /// each (a loopback queue whose payloads stay in place). Returns `false`, having sent
    /// nothing, when it cannot: the caller then sends them one by one with [`Tx::send`].
    fn send_run(&mut self, run: &TxRun) -> bool {
        let _ = run;
        false
    }
}

/// The requester's local memory: the message bytes of its posted work requests. `wr` is the
/// handle the datapath gave in [`super::requester::WorkRequest::wr_id`].
pub trait ReqMemory {
    /// Copies bytes `offset..offset + dst.len()` of the message of `wr` (gather list or inline
    /// data) into `dst`.
    fn gather(&mut self, wr: u64, offset: u32, dst: &mut [u8]) -> Result<(), LocalFault>;
    /// Places a READ response payload at `offset` of `wr`'s scatter list.
    fn scatter(&mut self, wr: u64, offset: u32, src: RxPayload<'_>) -> Result<(), LocalFault>;
    /// Places the original remote value an atomic returned (the AtomicAckETH's 64-bit value)
    /// into `wr`'s 8-byte local buffer (the byte order is the device's choice).
    fn atomic_result(&mut self, wr: u64, orig: u64) -> Result<(), LocalFault>;
}

/// Access a remote key must grant (IB `IB_ACCESS_REMOTE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RemoteAccess {
    /// RDMA READ.
    Read,
    /// RDMA WRITE.
    Write,
    /// Atomics.
    Atomic,
}

/// An rkey check that failed: unknown key, wrong PD, bounds or permission (all answered with a
/// NAK remote access error: rxe_resp.c `check_rkey` → `RESPST_ERR_RKEY_VIOLATION`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessFault;

/// An atomic operation on 8 remote bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// Compare and swap: if the value equals `compare`, store `swap`.
    CmpSwap {
        /// Compare data.
        compare: u64,
        /// Swap data.
        swap: u64,
    },
    /// Fetch and add.
    FetchAdd {
        /// Addend.
        add: u64,
    },
}

/// What went wrong placing a SEND's bytes into the receive WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvFault {
    /// The message is longer than the receive WQE (NAK invalid request, the WQE completes with
    /// LOC_LEN_ERR; rxe_resp.c `send_data_in` -ENOSPC → `RESPST_ERR_LENGTH`).
    TooLong,
    /// The receive WQE's scatter list faulted (NAK remote operational error, the WQE completes
    /// with LOC_PROT_ERR; rxe `RESPST_ERR_MALFORMED_WQE` answers REM_OP_ERR).
    Protection,
}

/// The responder's memory: remote-key checked access to registered memory and the receive
/// queue.
pub trait RespMemory {
    /// Checks that `rkey` grants `access` to `va..va + len` (done once per message on its first
    /// packet, before any byte moves, as rxe_resp.c `check_rkey`).
    fn check(
        &mut self,
        rkey: u32,
        va: u64,
        len: u64,
        access: RemoteAccess,
    ) -> Result<(), AccessFault>;
    /// Writes an RDMA WRITE packet's payload at `va` under `rkey`.
    fn write(&mut self, rkey: u32, va: u64, src: RxPayload<'_>) -> Result<(), AccessFault>;
    /// [`RespMemory::write`] of one packet of a message, with `rest` the message bytes still
    /// to come after this packet (0 on its last packet, all after `va + src.len()` under the
    /// same `rkey`). An environment may translate the key once for the rest of the message
    /// and reuse that translation for the packets that follow, as long as the result is always
    /// what [`RespMemory::write`] would return (the key table cannot have changed meanwhile).
    fn write_part(
        &mut self,
        rkey: u32,
        va: u64,
        src: RxPayload<'_>,
        rest: u32,
    ) -> Result<(), AccessFault> {
        let _ = rest;
        self.write(rkey, va, src)
    }
    /// The payloads of consecutive packets of one message (`src`: their bytes in order, the
    /// first at `va`; `rest`: the message bytes after the last of them), each of which
    /// [`RespMemory::write_part`] would place, written at once when the environment can prove
    /// that doing so gives the bytes and the outcome those calls would: each of them would
    /// succeed and none would move a byte before the packets that follow them in the same
    /// transport call. Returns `false`, having done nothing, when it cannot: the caller then
    /// writes the packets one by one. The default never can.
    fn write_run(&mut self, rkey: u32, va: u64, src: RxPayload<'_>, rest: u32) -> bool {
        let _ = (rkey, va, src, rest);
        false
    }
    /// Reads `dst.len()` bytes at `va` under `rkey` (READ response payload, called while the
    /// frame is built: one copy from memory to the wire).
    fn read(&mut self, rkey: u32, va: u64, dst: &mut [u8]) -> Result<(), AccessFault>;
    /// Executes an atomic at `va` (8-byte aligned, checked by the caller) and returns the
    /// original value.
    fn atomic(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, AccessFault>;
    /// Whether a receive WQE is posted (the head of the RQ or SRQ).
    fn recv_ready(&mut self) -> bool;
    /// Writes a SEND packet's payload at `offset` of the head receive WQE's scatter list.
    fn recv_write(&mut self, offset: u32, src: RxPayload<'_>) -> Result<(), RecvFault>;
    /// Invalidates `rkey` (SEND_WITH_INVALIDATE); `Err` when it cannot be (NAK invalid request
    /// per rxe_resp.c `RESPST_ERR_INVALIDATE_RKEY`).
    fn invalidate(&mut self, rkey: u32) -> Result<(), AccessFault>;
}

/// The kind of a receive completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecvKind {
    /// A SEND (with or without immediate / invalidate).
    Send,
    /// An RDMA WRITE with immediate.
    WriteImm,
}

/// A receive-side work completion: the head receive WQE is consumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvCompletion {
    /// Status.
    pub status: WcStatus,
    /// What completed it.
    pub kind: RecvKind,
    /// Bytes received (SEND: placed in the WQE; WRITE with immediate: the RETH DMA length).
    pub byte_len: u32,
    /// Immediate data (the ImmDt wire value).
    pub imm: Option<u32>,
    /// The rkey a SEND_WITH_INVALIDATE invalidated.
    pub invalidated: Option<u32>,
    /// The SE bit of the last packet.
    pub solicited: bool,
}

/// Completion sink.
pub trait Completions {
    /// A send-queue work request finished (in posting order).
    fn send_done(&mut self, wr: u64, status: WcStatus);
    /// A receive WQE finished.
    fn recv_done(&mut self, c: RecvCompletion);
}

/// Everything the requester does outside itself besides the wire: its memory and its send
/// completions (one object, typically the datapath's view of one QP).
pub trait ReqEnv: ReqMemory + Completions {}
impl<T: ReqMemory + Completions + ?Sized> ReqEnv for T {}

/// Everything the responder does outside itself besides the wire: remote-key checked memory,
/// the receive queue, and receive completions. [`Completions::recv_done`] consumes the head
/// receive WQE.
pub trait RespEnv: RespMemory + Completions {}
impl<T: RespMemory + Completions + ?Sized> RespEnv for T {}
