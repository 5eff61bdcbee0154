//! The requester's work requests, configuration, errors and counters.

use super::*;

/// The operation of a work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrOp {
    /// SEND, optionally with immediate data or an rkey to invalidate (not both).
    Send {
        /// Immediate data (ImmDt wire value).
        imm: Option<u32>,
        /// R_Key to invalidate at the responder (IETH).
        invalidate: Option<u32>,
    },
    /// RDMA WRITE, optionally with immediate data.
    Write {
        /// Remote virtual address.
        raddr: u64,
        /// Remote key.
        rkey: u32,
        /// Immediate data.
        imm: Option<u32>,
    },
    /// RDMA READ of `len` bytes into the local buffer.
    Read {
        /// Remote virtual address.
        raddr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// ATOMIC compare and swap (8 bytes).
    CmpSwap {
        /// Remote virtual address.
        raddr: u64,
        /// Remote key.
        rkey: u32,
        /// Compare data.
        compare: u64,
        /// Swap data.
        swap: u64,
    },
    /// ATOMIC fetch and add (8 bytes).
    FetchAdd {
        /// Remote virtual address.
        raddr: u64,
        /// Remote key.
        rkey: u32,
        /// Addend.
        add: u64,
    },
}

/// A send work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkRequest {
    /// The datapath's handle: passed back to [`ReqMemory`](crate::roce::transport::ReqMemory) and [`Completions::send_done`](crate::roce::transport::Completions::send_done).
    pub wr_id: u64,
    /// Operation.
    pub op: WrOp,
    /// Message length in bytes (8 for atomics).
    pub len: u32,
    /// Fence: wait for every earlier READ and atomic to complete before starting.
    pub fence: bool,
    /// Solicited event (SE on the last packet of a SEND or WRITE with immediate).
    pub solicited: bool,
}

impl WorkRequest {
    pub(super) fn is_rd_atomic(&self) -> bool {
        matches!(
            self.op,
            WrOp::Read { .. } | WrOp::CmpSwap { .. } | WrOp::FetchAdd { .. }
        )
    }
    pub(super) fn is_atomic(&self) -> bool {
        matches!(self.op, WrOp::CmpSwap { .. } | WrOp::FetchAdd { .. })
    }
}

/// The QP attributes the requester runs with (from the QP context at RTR/RTS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReqConfig {
    /// The responder's QPN (BTH DestQP).
    pub dest_qp: u32,
    /// Path MTU in bytes (256..=4096, a power of two).
    pub mtu: u32,
    /// The first PSN (`sq_psn`, 24 bits).
    pub sq_psn: u32,
    /// Local ACK timeout exponent (`timeout`: 4.096 µs × 2^n, 0 = infinite).
    pub ack_timeout: u8,
    /// Retries after a timeout or a PSN sequence NAK (0..=7). IBTA: a count; rxe_comp.c
    /// additionally never counts 7 down, hardware does (model choice: IBTA).
    pub retry_count: u8,
    /// Retries after RNR NAKs (0..=7, 7 = infinite: IBTA vol. 1 RNR retry semantics as rxe_comp.c
    /// `COMPST_RNR_RETRY`).
    pub rnr_retry: u8,
    /// READ / atomic requests outstanding at most (`max_rd_atomic`, `sra_max`).
    pub max_rd_atomic: u8,
    /// Set AckReq on every this many packets since the last one that had it (besides the last
    /// packet of each message). On a ConnectX this is `2^qpc.log_ack_req_freq` (0 = every
    /// packet: rdma-core DEVX users that set it to 0 note "ACK every packet").
    pub ack_req_every: u32,
    /// At most this many PSNs beyond the first unacknowledged one in flight.
    pub max_unacked_psns: u32,
}

impl ReqConfig {
    /// A configuration with rxe's defaults for the knobs the QP context does not carry.
    pub fn new(dest_qp: u32, mtu: u32, sq_psn: u32) -> ReqConfig {
        ReqConfig {
            dest_qp,
            mtu,
            sq_psn,
            ack_timeout: 14,
            retry_count: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
            ack_req_every: DEFAULT_ACK_REQ_EVERY,
            max_unacked_psns: DEFAULT_MAX_UNACKED_PSNS,
        }
    }
}

/// Why a configuration is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// Not 256, 512, 1024, 2048 or 4096.
    Mtu(u32),
    /// A 24-bit field out of range.
    Psn(u32),
    /// DestQP out of 24 bits.
    DestQp(u32),
    /// retry_count / rnr_retry above 7.
    RetryCount(u8),
    /// ack_req_every or max_unacked_psns 0, or the window beyond half the PSN space.
    Window,
}

/// Why a work request is refused at posting (nothing reaches the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostError {
    /// The QP is in the error state.
    QpError,
    /// Longer than 2^31 bytes (the IB maximum message size; rxe_resp.c check_length rejects DMA lengths above 2^31).
    Length(u32),
    /// An atomic whose length is not 8.
    AtomicLength(u32),
    /// A SEND with both immediate data and invalidate.
    ImmAndInvalidate,
    /// A READ or atomic on a QP with `max_rd_atomic` 0.
    NoRdAtomic,
}

/// Event counters (the port's counter set sums them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReqCounters {
    /// Request packets sent (first transmissions and retransmissions).
    pub packets_sent: u64,
    /// Request packets sent again (a PSN sent before).
    pub retransmitted: u64,
    /// Retry sequences started (timeouts, sequence NAKs, implicit NAKs; not RNR).
    pub retries: u64,
    /// Retransmit timer expiries with work outstanding.
    pub timeouts: u64,
    /// PSN sequence error NAKs received.
    pub seq_naks: u64,
    /// RNR NAKs received.
    pub rnr_naks: u64,
    /// Response packets ignored (stale, duplicate, out of order or malformed).
    pub ignored: u64,
}
