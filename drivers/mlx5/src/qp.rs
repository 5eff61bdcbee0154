//! RC queue pairs: CREATE_QP, the state transitions, send and receive WQEs, doorbells.
//!
//! Sources: rdma-core providers/mlx5/qp.c (`_mlx5_post_send`, `mlx5_post_recv`,
//! `post_send_db`, `mlx5_bf_copy`), verbs.c (`mlx5_calc_send_wqe`, `mlx5_calc_rwq_size`),
//! Linux ib/qp.c (`create_qp_common`, `__mlx5_ib_modify_qp`, `mlx5_set_path`); layouts in
//! [`mlx5_prm::wqe`] and facts traps 9-11, 15-19.
//!
//! Buffer layout (facts trap 11): the receive queue at offset 0, the send queue right after;
//! one contiguous buffer, one `pas` entry. The doorbell record is two big-endian dwords:
//! `[0]` receive counter, `[1]` send counter in WQEBBs.
//!
//! Barrier discipline (rdma-core `post_send_db`): WQEs, `dma_wmb`, doorbell record,
//! `dma_wmb`, then the MMIO doorbell (BlueFlame copy of a single small WQE, else the first 8
//! bytes of the last WQE's control segment as one 64-bit store), then `wc_flush`, and the
//! BlueFlame offset alternates between the two halves of the register (facts trap 16).
//!
//! Completion bookkeeping is a plain ring indexed by the WQE counter (`SqSlot`: wr_id, the
//! WQE's first block and its WR count, one cache line each), shared with the CQ poller, which
//! checks every counter a CQE brings against it: the expected one (the next WR, where the CQE
//! says it starts) with one compare, anything else in full (`SendCursor`). Region lifetimes
//! are kept by the QP's bindings (`Binding`), not by per-WR reference counts: explicit ones
//! ([`QueuePair::bind_mr`]) held for a [`BoundMr`] handle, and ones made by posted WRs,
//! stamped with the WR count of the last WR that named the region and released once the
//! poller's tail passed it (the region of the last generic post is stamped in the QP,
//! `last_stamp`, and the stamp copied into its binding before anything reads it).
//!
//! The send gate (`WqShared::sq_last`): the fast paths post while the WR count stays below a
//! limit, one load and a sign test. Reaching it, a state change, a post of the general path
//! and a dying device (`CtxInner::set_dead`) all close it, and its slow path checks the device,
//! the state and the room.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ptr;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use mlx5_prm::{
    ads, create_qp_in, create_qp_out, destroy_qp_in, destroy_qp_out, opcode, qp, qp_2err_in,
    qp_2err_out, qp_db, qpc, query_qp_in, query_qp_out, rst2init_qp_in, rst2init_qp_out, uar, wqe,
};

use crate::cmd::{get, CmdBuf};
use crate::cq::{CompletionQueue, CqShared};
use crate::error::{Error, InvalidInput, Result};
use crate::hal::{DmaMem, Hal};
use crate::mr::Access;
use crate::uar::Uar;
use crate::verbs::{CtxInner, MrInner, PdInner};

/// The send-queue overhead of the largest RC WQE without data: ctrl + raddr + atomic
/// (rdma-core verbs.c `sq_overhead` for IBV_QPT_RC).
const SQ_OVERHEAD: usize = wqe::ctrl_seg::SIZE + wqe::raddr_seg::SIZE + wqe::atomic_seg::SIZE;
/// Largest WQE the driver builds (`MLX5_SEND_WQE_MAX_WQEBBS` basic blocks).
const MAX_WQE_BYTES: usize = wqe::SEND_WQE_MAX_WQEBBS * wqe::SEND_WQE_BB;
/// Largest SGE count per WR the safe layer converts on the stack.
pub const MAX_SGE: usize = 30;

/// Requested queue pair capabilities (`ibv_qp_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCaps {
    /// Send work requests.
    pub max_send_wr: u32,
    /// Receive work requests (0: no receive queue).
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Inline bytes per send WR.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        }
    }
}

/// Creation options beyond the sizes (`ibv_qp_init_attr` fields other than `cap`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpOptions {
    /// `sq_sig_all`: every send WR generates a completion, whatever its flags (Linux ib/qp.c
    /// create_qp_common: `sq_signal_bits = MLX5_WQE_CTRL_CQ_UPDATE` for IB_SIGNAL_ALL_WR,
    /// OR-ed into every ctrl segment's `fm_ce_se`; rdma-core qp.c the same).
    pub sq_sig_all: bool,
}

/// What QUERY_QP reports, with the capabilities the QP was granted (`ibv_query_qp`: Linux
/// ib/qp.c `mlx5_ib_query_qp` / `query_qp_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpAttr {
    /// `qpc.state` (`MLX5_QP_STATE_*`).
    pub state: u8,
    /// The capabilities granted at creation.
    pub cap: QpCaps,
    /// Whether every send WR is signaled.
    pub sq_sig_all: bool,
    /// Outstanding RDMA READs / atomics as initiator: `1 << log_sra_max`.
    pub max_rd_atomic: u32,
    /// Outstanding RDMA READs / atomics as responder: `1 << log_rra_max`.
    pub max_dest_rd_atomic: u32,
    /// `qpc.mtu` (the [`Mtu`] encoding; 0 before RTR).
    pub path_mtu: u8,
    /// The remote QP number.
    pub dest_qp_num: u32,
    /// The next send PSN.
    pub sq_psn: u32,
    /// The next expected receive PSN.
    pub rq_psn: u32,
    /// Retry count.
    pub retry_cnt: u8,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// Minimum RNR NAK timer.
    pub min_rnr_timer: u8,
    /// Local ACK timeout.
    pub timeout: u8,
    /// Remote access the QP allows as responder (`rre` / `rwe` / `rae`).
    pub access: Access,
    /// `qpc.atomic_mode`.
    pub atomic_mode: u8,
    /// `qpc.log_ack_req_freq`.
    pub log_ack_req_freq: u8,
}

/// Path MTU (`enum ibv_mtu`, libibverbs verbs.h; the value qpc.mtu takes, facts trap 19).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

/// What a peer needs to connect to a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpEndpoint {
    /// QP number.
    pub qpn: u32,
    /// Initial packet sequence number of its send queue (random, 24 bits).
    pub psn: u32,
    /// Its GID (RoCE v2).
    pub gid: [u8; 16],
    /// Its MAC.
    pub mac: [u8; 6],
}

/// Connection parameters (`ibv_qp_attr` for INIT->RTR->RTS); defaults as the rdma-core tests
/// use them.
#[derive(Clone, Copy, Debug)]
pub struct ConnectOptions {
    /// Path MTU.
    pub mtu: Mtu,
    /// Local GID index.
    pub sgid_index: u8,
    /// GRH hop limit.
    pub hop_limit: u8,
    /// GRH traffic class.
    pub traffic_class: u8,
    /// Minimum RNR NAK timer (5-bit IB encoding).
    pub min_rnr_timer: u8,
    /// Local ACK timeout (5-bit IB encoding).
    pub timeout: u8,
    /// Retry count (3 bits).
    pub retry_cnt: u8,
    /// RNR retry count (3 bits).
    pub rnr_retry: u8,
    /// Outstanding RDMA READ / atomic as initiator.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA READ / atomic as responder.
    pub max_dest_rd_atomic: u8,
    /// Remote access the QP allows as responder (qpc rre / rwe / rae).
    pub access: Access,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            mtu: Mtu::Mtu1024,
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            access: Access::ALL,
        }
    }
}

/// Work-request flags (`IBV_SEND_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendFlags(pub u8);

impl SendFlags {
    /// `IBV_SEND_SIGNALED`: generate a completion.
    pub const SIGNALED: SendFlags = SendFlags(1);
    /// `IBV_SEND_FENCE`: wait for prior RDMA READs and atomics.
    pub const FENCE: SendFlags = SendFlags(2);
    /// `IBV_SEND_SOLICITED`.
    pub const SOLICITED: SendFlags = SendFlags(4);
    /// No flag.
    pub const NONE: SendFlags = SendFlags(0);
    /// True when every flag of `o` is set.
    pub const fn contains(self, o: SendFlags) -> bool {
        self.0 & o.0 == o.0
    }
}

impl core::ops::BitOr for SendFlags {
    type Output = SendFlags;
    fn bitor(self, o: SendFlags) -> SendFlags {
        SendFlags(self.0 | o.0)
    }
}

/// A remote buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remote {
    /// Remote virtual address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// The operation of a send work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// SEND, with optional immediate data.
    Send {
        /// Immediate data.
        imm: Option<u32>,
    },
    /// RDMA WRITE, with optional immediate data.
    Write {
        /// Target.
        remote: Remote,
        /// Immediate data.
        imm: Option<u32>,
    },
    /// RDMA READ into the local SGEs.
    Read {
        /// Source.
        remote: Remote,
    },
    /// 8-byte compare and swap; the old value lands in the one local SGE.
    CompareSwap {
        /// Target (8-byte aligned on the responder, or the responder reports an error).
        remote: Remote,
        /// Compare value.
        compare: u64,
        /// Swap value.
        swap: u64,
    },
    /// 8-byte fetch and add; the old value lands in the one local SGE.
    FetchAdd {
        /// Target.
        remote: Remote,
        /// Value to add.
        add: u64,
    },
}

/// A list post that failed: which work request was refused, and why (the `bad_wr` of
/// `ibv_post_send` / `ibv_post_recv`). Every WR of a list is checked before any is written,
/// so on this error none of them was posted; `index` is the first one that could not be
/// (for a full queue, the first that did not fit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostError {
    /// Index of the refused WR in the list.
    pub index: usize,
    /// Why it was refused.
    pub error: Error,
}

impl From<PostError> for Error {
    fn from(e: PostError) -> Error {
        e.error
    }
}

/// A raw scatter/gather element: address and key, no ownership.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawSge {
    /// Address in the MR's address space.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// Local key.
    pub lkey: u32,
}

/// Local data of a raw send WR.
#[derive(Clone, Copy, Debug)]
pub enum RawData<'a> {
    /// Gather list.
    Sges(&'a [RawSge]),
    /// Inline bytes copied into the WQE.
    Inline(&'a [u8]),
}

/// A raw send work request.
#[derive(Clone, Copy, Debug)]
pub struct RawSendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub op: SendOp,
    /// Local data.
    pub data: RawData<'a>,
    /// Flags.
    pub flags: SendFlags,
}

/// A raw receive work request.
#[derive(Clone, Copy, Debug)]
pub struct RawRecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Scatter list.
    pub sges: &'a [RawSge],
}

/// What the poller needs about the send WQE that starts at one index: a plain ring indexed
/// by the WQE counter (rdma-core qp.c keeps `wrid[]` and `wqe_head[]` the same way). One cache
/// line per slot, like a WQE block: the poster writes slot `k` while the poller reads slot
/// `k - 1` on another core without sharing a line, and the poster addresses both rings with
/// one scaled index.
#[repr(align(64))]
pub(crate) struct SqSlot {
    wrid: AtomicU64,
    /// [`slot_meta`]`(wr_end, start)`: bits 0..16 the WQE's first block (`cur_post` when it
    /// was written, what the CQE's `wqe_counter` names), bits 16..48 the WR count after the WR
    /// (the `max_send_wr` accounting of rdma-core qp.c `mlx5_wq_overflow`, which counts WRs,
    /// not blocks). The expected completion (the next WR, starting where the CQE says) is one
    /// 64-bit compare.
    meta: AtomicU64,
}

/// [`SqSlot::meta`] of the WQE that starts at block `start` and brings the WR count to
/// `wr_end`.
#[inline(always)]
pub(crate) fn slot_meta(wr_end: u32, start: u16) -> u64 {
    (wr_end as u64) << 16 | start as u64
}

/// The poller's working copy of one QP's send-completion state for the length of a poll call
/// (`cq.rs`): the completed-WR tail lives in a register and is written back once per call
/// ([`WqShared::store_tail`]) or before anything else looks at it.
#[derive(Clone, Copy)]
pub(crate) struct SendCursor {
    /// [`WqShared::qpn_key`].
    pub(crate) key: u32,
    /// The QP number.
    pub(crate) qpn: u32,
    /// `WqShared::sq`'s slots (`mask + 1` of them, never fewer than one).
    slots: *const SqSlot,
    mask: u32,
    /// `slot_meta(tail + 1, 0)`, where `tail` is the count of WRs completed: the meta of the
    /// next WR to complete, but for its first block.
    next: u64,
}

impl SendCursor {
    /// The slot of the WQE that starts at block `counter` (what a CQE's `wqe_counter` names);
    /// `q` is the `WqShared` the cursor was taken from.
    #[inline(always)]
    pub(crate) fn slot<'q>(&self, q: &'q WqShared, counter: u16) -> &'q SqSlot {
        debug_assert!(core::ptr::eq(q.sq.as_ptr(), self.slots));
        let i = counter as u32 & self.mask;
        // SAFETY: the index is at most `mask`, and `slots` has `mask + 1` entries owned by
        // `q` (the cursor was taken from it), which never resizes them.
        unsafe { &*self.slots.add(i as usize) }
    }

    /// A send completion at WQE counter `counter`, the fast case only: the next WR, whose WQE
    /// starts where the CQE says (one compare). Its wr_id, or `None` for anything else
    /// (completions that cover unsignaled WRs, and every bad CQE), which then goes to
    /// [`SendCursor::complete_slow`].
    #[inline(always)]
    pub(crate) fn complete_next(&mut self, slot: &SqSlot, counter: u16) -> Option<u64> {
        if slot.meta.load(Ordering::Acquire) != self.next | counter as u64 {
            return None;
        }
        // After 2^32 WRs this carries into bit 48, which no slot holds: that one completion
        // takes the full check, which starts the count over (`set_tail`).
        self.next += slot_meta(1, 0);
        Some(slot.wrid.load(Ordering::Relaxed))
    }

    /// The full check: the slot records a WQE that starts at `counter` and whose WR count lies
    /// in `(tail, tail + max_send_wr]`. Returns the wr_id and the new tail.
    #[cold]
    #[inline(never)]
    pub(crate) fn complete_slow(
        q: &WqShared,
        slot: &SqSlot,
        tail: u32,
        counter: u16,
    ) -> Option<(u64, u32)> {
        let meta = slot.meta.load(Ordering::Acquire);
        let wr_end = (meta >> 16) as u32;
        if meta as u16 != counter || wr_end.wrapping_sub(tail).wrapping_sub(1) >= q.sq_max_wr {
            return None;
        }
        Some((slot.wrid.load(Ordering::Relaxed), wr_end))
    }

    /// [`SendCursor::complete_next`], else [`SendCursor::complete_slow`].
    #[inline(always)]
    pub(crate) fn complete(&mut self, q: &WqShared, counter: u16) -> Option<u64> {
        let slot = self.slot(q, counter);
        if let Some(w) = self.complete_next(slot, counter) {
            return Some(w);
        }
        let (wr_id, tail) = Self::complete_slow(q, slot, self.tail(), counter)?;
        self.set_tail(tail);
        Some(wr_id)
    }

    /// The completed-WR count.
    #[inline(always)]
    pub(crate) fn tail(&self) -> u32 {
        ((self.next >> 16) as u32).wrapping_sub(1)
    }

    /// Moves the completed-WR count (after [`SendCursor::complete_slow`]).
    #[inline(always)]
    pub(crate) fn set_tail(&mut self, tail: u32) {
        self.next = slot_meta(tail.wrapping_add(1), 0);
    }
}

/// Work-queue state the CQ poller shares with the poster: wr_ids and counters.
///
/// Send-queue room is accounted in WRs only: every WQE is at most `sq_max_bbs` blocks and
/// `max_send_wr = sq_wqe_cnt / sq_max_bbs`, so `max_send_wr` outstanding WRs never occupy more
/// than the ring (the same argument as rdma-core's `max_post`).
pub(crate) struct WqShared {
    pub(crate) qpn: u32,
    /// Bytes 1..4 of a CQE's `sop_drop_qpn` for this QP, as an in-memory `u32` with byte 0
    /// (the opcode) clear: the poller compares the raw dword against it.
    pub(crate) qpn_key: u32,
    sq: Vec<SqSlot>,
    sq_mask: u32,
    /// `max_send_wr`: how far past the tail an outstanding WR can be.
    sq_max_wr: u32,
    /// WRs completed (moved by the poller).
    sq_wr_tail: AtomicU32,
    /// The send gate: the last WR count the fast path may reach. It posts while
    /// `sq_last - head >= 0` (as `i32`, a sign test); past it [`QueuePair::gate`] rechecks the
    /// device, the state and the room, and moves it (`tail + max_send_wr - 1` in RTS). The
    /// poster closes it (sets it to `head - 1`) whenever the state or the head moves
    /// otherwise, and a dying device closes every QP's gate ([`WqShared::close_gate`]), so the
    /// fast path's one load covers all three checks.
    sq_last: AtomicU32,
    rq_wrid: Vec<AtomicU64>,
    rq_mask: u32,
    rq_head: AtomicU32,
    rq_tail: AtomicU32,
    /// CQEs of this QP to remove (rdma-core cq.c `__mlx5_cq_clean`): `(cqn, producer
    /// counter)` pairs, one per CQ and per move to RESET or destroy, taken by that CQ's
    /// poller (cq.rs `clean_stale`), off its fast path.
    pub(crate) stale: spin::Mutex<Vec<(u32, u32)>>,
    /// The QP was destroyed: once its stale CQEs are gone, the CQs' pollers drop it from their
    /// lists.
    pub(crate) retired: core::sync::atomic::AtomicBool,
}

impl WqShared {
    /// A stand-in that matches no CQE (its number is beyond 24 bits; one empty slot, so a
    /// cursor over it keeps the invariant `slots = mask + 1`).
    pub(crate) fn placeholder() -> WqShared {
        WqShared {
            qpn: u32::MAX,
            // Never matches: byte 0 is set (raw dwords are masked to bytes 1..4 first).
            qpn_key: u32::from_ne_bytes([0xff, 0, 0, 0]),
            sq: alloc::vec![SqSlot {
                wrid: AtomicU64::new(0),
                meta: AtomicU64::new(0),
            }],
            sq_mask: 0,
            sq_max_wr: 0,
            sq_wr_tail: AtomicU32::new(0),
            sq_last: AtomicU32::new(u32::MAX),
            rq_wrid: Vec::new(),
            rq_mask: 0,
            rq_head: AtomicU32::new(0),
            rq_tail: AtomicU32::new(0),
            stale: spin::Mutex::new(Vec::new()),
            retired: core::sync::atomic::AtomicBool::new(false),
        }
    }

    /// [`WqShared::qpn_key`] of QP `qpn`.
    pub(crate) fn key(qpn: u32) -> u32 {
        let b = qpn.to_be_bytes();
        u32::from_ne_bytes([0, b[1], b[2], b[3]])
    }

    /// The poller's cursor over this QP's send completions (see [`SendCursor`]).
    #[inline(always)]
    pub(crate) fn cursor(&self) -> SendCursor {
        SendCursor {
            key: self.qpn_key,
            qpn: self.qpn,
            slots: self.sq.as_ptr(),
            mask: self.sq_mask,
            next: slot_meta(self.sq_wr_tail.load(Ordering::Relaxed).wrapping_add(1), 0),
        }
    }

    /// Publishes the cursor's tail (the poster reads it for room).
    #[inline(always)]
    pub(crate) fn store_tail(&self, c: &SendCursor) {
        self.sq_wr_tail.store(c.tail(), Ordering::Release);
    }

    /// A send completion at WQE counter `counter`, outside a poll loop's cursor.
    #[inline]
    pub(crate) fn complete_send(&self, counter: u16) -> Option<u64> {
        let mut c = self.cursor();
        let r = c.complete(self, counter);
        self.store_tail(&c);
        r
    }

    /// A receive completion: the oldest outstanding receive's wr_id.
    #[inline]
    pub(crate) fn complete_recv(&self) -> Option<u64> {
        let tail = self.rq_tail.load(Ordering::Relaxed);
        if tail == self.rq_head.load(Ordering::Acquire) {
            return None;
        }
        let wr_id = self
            .rq_wrid
            .get((tail & self.rq_mask) as usize)?
            .load(Ordering::Relaxed);
        self.rq_tail.store(tail.wrapping_add(1), Ordering::Release);
        Some(wr_id)
    }

    /// Closes the send gate from outside the poster (the device died): the next post takes
    /// the slow path. The head lies at or past the tail, so a limit far below the tail closes
    /// the gate whatever the head is.
    pub(crate) fn close_gate(&self) {
        let tail = self.sq_wr_tail.load(Ordering::Relaxed);
        self.sq_last
            .store(tail.wrapping_sub(1 << 30), Ordering::Relaxed);
    }

    fn reset(&self) {
        for a in [&self.sq_wr_tail, &self.rq_head, &self.rq_tail] {
            a.store(0, Ordering::Release);
        }
        // Closed (head 0).
        self.sq_last.store(u32::MAX, Ordering::Release);
        for sl in &self.sq {
            sl.meta.store(0, Ordering::Relaxed);
        }
    }
}

/// A region a QP references: bound by [`QueuePair::bind_mr`] (held while its [`BoundMr`]
/// handle lives), or named by posted WRs (held until they completed). While the QP holds it,
/// [`crate::MemoryRegion::dereg`] reports [`Error::Busy`].
pub(crate) struct Binding<H: Hal> {
    mr: Option<Arc<MrInner<H>>>,
    /// Held for a [`BoundMr`] handle (never released or reused while the handle lives),
    /// rather than for posted WRs.
    explicit: bool,
    /// Send WR count after the last send WR that named the region.
    last_sq: u32,
    /// Receive WR count after the last receive WR that named the region.
    last_rq: u32,
}

/// Tags that tell QPs apart for [`BoundMr`] handles: never reused, so a handle of a destroyed
/// QP is refused by every other QP.
static NEXT_QP_TAG: AtomicU64 = AtomicU64::new(1);

/// A region bound to one QP ([`QueuePair::bind_mr`]): a pre-validated handle carrying what a
/// post needs (address, length, key), so posting through it is a tag compare, a bounds check
/// and the WQE. The QP keeps the region registered while the handle lives, and until the WRs
/// posted before [`QueuePair::unbind_mr`] completed. Not `Clone`: unbinding consumes it.
#[derive(Debug, PartialEq, Eq)]
pub struct BoundMr {
    tag: u64,
    index: u32,
    /// The local key as the data segment holds it (big-endian in memory order).
    lkey_be: u32,
    iova: u64,
    len: u64,
    local_write: bool,
}

impl BoundMr {
    /// A scatter/gather element over `[offset, offset + len)` of the region (checked when
    /// posted).
    #[inline(always)]
    pub fn sge(&self, offset: u64, len: u32) -> BoundSge<'_> {
        BoundSge {
            mr: self,
            offset,
            len,
        }
    }
    /// The region's local key.
    pub fn lkey(&self) -> u32 {
        u32::from_be(self.lkey_be)
    }
    /// The region's first address.
    pub fn addr(&self) -> u64 {
        self.iova
    }
    /// The region's length.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// Never true (regions are not empty).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A slice of a bound region, for the fast posting calls ([`QueuePair::post_write`],
/// [`QueuePair::post_read`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoundSge<'a> {
    /// The region.
    pub mr: &'a BoundMr,
    /// Offset inside the region.
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
}

/// `fm_ce_se` for each combination of [`SendFlags`] bits (signaled 1, fence 2, solicited 4):
/// rdma-core qp.c `_mlx5_post_send` (CQ_UPDATE, SOLICITED, FENCE).
const FM_CE_SE: [u8; 8] = {
    let mut t = [0u8; 8];
    let mut i = 0;
    while i < 8 {
        let mut v = 0;
        if i & 1 != 0 {
            v |= wqe::ctrl::CQ_UPDATE;
        }
        if i & 2 != 0 {
            v |= wqe::ctrl::FENCE;
        }
        if i & 4 != 0 {
            v |= wqe::ctrl::SOLICITED;
        }
        t[i] = v;
        i += 1;
    }
    t
};

#[inline(always)]
fn fm_ce_se(flags: SendFlags) -> u8 {
    FM_CE_SE[(flags.0 & 7) as usize]
}

/// Ctrl-segment bytes 8..16 (`signature`, `dci_stream_channel_id`, `fm_ce_se`, `imm` = 0) as
/// they lie in memory, per flag combination: one 8-byte store on the fast path (an immediate
/// when the call site's flags are a constant).
const CTRL_TAIL: [u64; 8] = {
    let mut t = [0u64; 8];
    let mut i = 0;
    while i < 8 {
        t[i] = u64::from_ne_bytes([0, 0, 0, FM_CE_SE[i], 0, 0, 0, 0]);
        i += 1;
    }
    t
};

/// Sizes computed from the requested caps.
#[derive(Clone, Copy, Debug)]
struct Layout {
    sq_wqe_cnt: u32,
    #[cfg_attr(not(test), allow(dead_code))]
    sq_max_bbs: u32,
    rq_wqe_cnt: u32,
    rq_stride_shift: u32,
    sq_offset: usize,
    buf_size: usize,
    caps: QpCaps,
}

fn layout(req: &QpCaps, caps: &crate::caps::Caps) -> Result<Layout> {
    let bad = || Error::Invalid(InvalidInput::QpCaps);
    if req.max_send_wr == 0
        || req.max_send_sge as usize > MAX_SGE
        || req.max_recv_sge as usize > MAX_SGE
    {
        return Err(bad());
    }
    // Both queues index their rings with 16-bit counters (sq_mask, the doorbell record):
    // at most 2^15 entries, and never above the device's log_max_qp_sz.
    let log_max = (caps.log_max_qp_sz as u32).min(15);
    let max_entries = 1u32 << log_max;
    // The WR counts are bounded before anything is rounded or multiplied (Linux ib/qp.c
    // set_rq_size: "max_recv_wr > 1 << log_max_qp_sz" is -EINVAL; rdma-core verbs.c
    // mlx5_calc_sq_size bounds max_send_wr "to avoid overflow"), so a count like u32::MAX is
    // refused instead of wrapping to an empty ring.
    if req.max_send_wr > max_entries || req.max_recv_wr > max_entries {
        return Err(bad());
    }
    // Send WQE: overhead + max(gather list, inline segment), in 64-byte blocks
    // (rdma-core verbs.c mlx5_calc_send_wqe). Every term is bounded: at most 30 SGEs, and
    // max_inline_data (a u32) plus 4 fits a usize.
    let gather = req.max_send_sge.max(1) as usize * wqe::data_seg::SIZE;
    let inl = (req.max_inline_data as usize + wqe::inl_data_seg::SIZE).next_multiple_of(16);
    let wqe_size = (SQ_OVERHEAD + gather.max(inl)).next_multiple_of(wqe::SEND_WQE_BB);
    let max_sq = if caps.max_wqe_sz_sq != 0 {
        (caps.max_wqe_sz_sq as usize).min(MAX_WQE_BYTES)
    } else {
        MAX_WQE_BYTES
    };
    if wqe_size > max_sq {
        return Err(bad());
    }
    let bbs = (wqe_size / wqe::SEND_WQE_BB) as u32;
    let sq_cnt = req
        .max_send_wr
        .checked_mul(bbs)
        .and_then(u32::checked_next_power_of_two)
        .ok_or_else(bad)?;
    if sq_cnt > max_entries {
        return Err(bad());
    }
    // Receive WQE: max_recv_sge data segments, stride a power of two of at least 16 bytes
    // (qpc.log_rq_stride = log2(stride) - 4, facts trap 10).
    let (rq_cnt, stride_shift) = if req.max_recv_wr == 0 {
        (0, 4)
    } else {
        let stride = (req.max_recv_sge.max(1) as usize * wqe::data_seg::SIZE).next_power_of_two();
        if caps.max_wqe_sz_rq != 0 && stride > caps.max_wqe_sz_rq as usize {
            return Err(bad());
        }
        let shift = stride.trailing_zeros();
        let cnt = req
            .max_recv_wr
            .checked_next_power_of_two()
            .ok_or_else(bad)?;
        // At least one 64-byte basic block, so that the send queue after it starts 64-byte
        // aligned (Linux ib/qp.c set_rq_size: wq_size = max(wq_size, MLX5_SEND_WQE_BB);
        // rdma-core verbs.c mlx5_calc_rq_size does the same).
        let cnt = cnt.max((wqe::SEND_WQE_BB >> shift) as u32);
        if cnt > max_entries {
            return Err(bad());
        }
        (cnt, shift)
    };
    // Both terms are at most 2^15 entries of at most 2 KiB: no overflow.
    let rq_bytes = (rq_cnt as usize) << stride_shift;
    let sq_offset = rq_bytes;
    let total = (rq_bytes + sq_cnt as usize * wqe::SEND_WQE_BB)
        .next_power_of_two()
        .max(4096);
    // The largest inline payload: the WQE less the largest RC overhead (ctrl + raddr +
    // atomic) and the inline header (rdma-core verbs.c mlx5_calc_sq_size and Linux ib/qp.c
    // calc_sq_size: wqe_size - sq_overhead - sizeof(inl_data_seg)). An RDMA WRITE of that
    // much is ctrl + raddr + align(4 + max_inline, 16) <= wqe_size - 16 bytes, so its ds
    // never exceeds 63 (the 6-bit field of qpn_ds).
    let max_inline = wqe_size - SQ_OVERHEAD - wqe::inl_data_seg::SIZE;
    Ok(Layout {
        sq_wqe_cnt: sq_cnt,
        sq_max_bbs: bbs,
        rq_wqe_cnt: rq_cnt,
        rq_stride_shift: stride_shift,
        sq_offset,
        buf_size: total,
        caps: QpCaps {
            max_send_wr: sq_cnt / bbs,
            max_recv_wr: rq_cnt,
            max_send_sge: req.max_send_sge.max(1),
            max_recv_sge: if rq_cnt == 0 {
                0
            } else {
                (1u32 << stride_shift) / 16
            },
            max_inline_data: max_inline as u32,
        },
    })
}

/// An RC queue pair.
pub struct QueuePair<H: Hal> {
    pub(crate) ctx: Arc<CtxInner<H>>,
    pd: Arc<PdInner<H>>,
    scq: Arc<CqShared<H>>,
    rcq: Arc<CqShared<H>>,
    pub(crate) shared: Arc<WqShared>,
    qpn: u32,
    state: u8,
    buf: Option<DmaMem<H::Dma>>,
    db: Option<DmaMem<H::Dma>>,
    ring: *mut u8,
    /// First block of the send queue (`ring + sq_offset`).
    sq_base: *mut u8,
    /// `sq_wqe_cnt - 1` (at most 2^15 - 1).
    sq_mask: u16,
    /// `shared.sq`'s slots (`sq_mask + 1` of them).
    sq_slots: *const SqSlot,
    dbrec: *mut u8,
    uar: Uar,
    bf_off: usize,
    bf_half: usize,
    use_bf: bool,
    lay: Layout,
    /// The next WQE's first block, modulo 2^16 (what the ctrl segment's `wqe_index`, the
    /// doorbell record and the CQE's `wqe_counter` carry).
    cur_post: u16,
    /// Send WRs posted (the head of the WR count).
    sq_wr_head: u32,
    /// Ctrl-segment bytes 0..8 of a one-block RDMA WRITE / RDMA READ (ctrl + raddr + data)
    /// with the WQE index zero, as they lie in memory ([`ctrl_tpl`]).
    ctrl_write: u64,
    ctrl_read: u64,
    /// BlueFlame for one-block WQEs (BlueFlame on, and a half-register holds 64 bytes).
    bf_one: bool,
    /// [`SendFlags::SIGNALED`]'s bit with `sq_sig_all`, else 0 (OR-ed into every WR's flags
    /// on the general path).
    sig_all: u8,
    /// This QP's [`BoundMr`] tag.
    tag: u64,
    rq_head: u32,
    psn: u32,
    /// Regions this QP references (explicitly bound, or named by outstanding WRs).
    bindings: Vec<Binding<H>>,
    /// Bindings made by posted WRs that are still held.
    auto_live: u32,
    /// `(send tail, receive tail)` at the last release sweep.
    swept: (u32, u32),
    /// Index of the binding the last generic post used (the common case hits it).
    last_binding: usize,
    /// The region of `bindings[last_binding]` (`Arc::as_ptr`), or null. Only an identity:
    /// while it is not null that binding holds the region, so no other region can have this
    /// address; it is cleared whenever that binding goes (`free_binding`, `destroy_inner`).
    /// The region passed the context check when the binding was made.
    last_mr: *const (),
    /// `last_mr` while no other binding is held for WRs (a generic post on that region has
    /// nothing to sweep), else null: the one compare of the one-SGE generic post.
    fast_mr: *const (),
    /// The send stamp of `bindings[last_binding]` while `last_mr` is set: the one-SGE generic
    /// post writes it here (one store) instead of into the binding; `flush_stamp` copies it
    /// there before anything reads the binding's stamp.
    last_stamp: u32,
    destroyed: bool,
}

// SAFETY: raw pointers point into `buf` / `db`, which the QP owns, and into `shared.sq`
// (atomics, kept alive by the QP's Arc); `last_mr` / `fast_mr` name a region one of the QP's
// bindings holds (an `Arc` of `Send + Sync` state); all access is through &mut self.
unsafe impl<H: Hal> Send for QueuePair<H> {}

pub(crate) fn create<H: Hal>(
    pd: &Arc<PdInner<H>>,
    scq: &CompletionQueue<H>,
    rcq: &CompletionQueue<H>,
    req: &QpCaps,
    opts: &QpOptions,
) -> Result<QueuePair<H>> {
    create_fre(pd, scq, rcq, req, opts, false)
}

/// [`create`], with `qpc.fre` (fast registration enable) when `fre`: the QP may post UMR
/// WQEs (Linux ib/qp.c `create_kernel_qp`: `MLX5_SET(qpc, qpc, fre, 1)` for kernel QPs, the
/// UMR QP of ib/umr.c `mlx5r_umr_resource_init` among them).
pub(crate) fn create_fre<H: Hal>(
    pd: &Arc<PdInner<H>>,
    scq: &CompletionQueue<H>,
    rcq: &CompletionQueue<H>,
    req: &QpCaps,
    opts: &QpOptions,
    fre: bool,
) -> Result<QueuePair<H>> {
    let ctx = &pd.ctx;
    if !Arc::ptr_eq(&scq.shared.ctx, ctx) || !Arc::ptr_eq(&rcq.shared.ctx, ctx) {
        return Err(InvalidInput::BadCq.into());
    }
    let lay = layout(req, &ctx.caps)?;
    let hal = &ctx.hal;
    let buf = DmaMem::alloc(hal, lay.buf_size, lay.buf_size)?;
    let db = DmaMem::alloc(hal, 64, 64)?;
    let uar = ctx.with_dev(|d| d.alloc_uar(hal))?;
    let mut c = CmdBuf::new(opcode::CREATE_QP, 0, create_qp_in::PAS.bytes_with(1));
    let x = |f: mlx5_prm::Field| f.within(create_qp_in::QPC);
    // Linux ib/qp.c create_qp_common / create_kernel_qp; facts traps 9, 10, 17.
    c.set(x(qpc::ST), qp::st::RC.into())
        .set(x(qpc::PM_STATE), qp::pm::MIGRATED.into())
        .set(x(qpc::PD), pd.pdn)
        .set(x(qpc::UAR_PAGE), uar.index)
        .set(x(qpc::LOG_PAGE_SIZE), lay.buf_size.trailing_zeros() - 12)
        .set(x(qpc::LOG_SQ_SIZE), lay.sq_wqe_cnt.trailing_zeros())
        .set(x(qpc::CQN_SND), scq.shared.cqn)
        .set(x(qpc::CQN_RCV), rcq.shared.cqn)
        .set64(x(qpc::DBR_ADDR), db.bus())
        .set(x(qpc::FRE), fre as u32)
        .put64(create_qp_in::PAS.byte_offset(), buf.bus());
    if lay.rq_wqe_cnt == 0 {
        c.set(x(qpc::RQ_TYPE), qp::rq_type::ZERO_LEN_RQ.into());
    } else {
        c.set(x(qpc::RQ_TYPE), qp::rq_type::NON_ZERO_RQ.into())
            .set(x(qpc::LOG_RQ_SIZE), lay.rq_wqe_cnt.trailing_zeros())
            .set(x(qpc::LOG_RQ_STRIDE), lay.rq_stride_shift - 4);
    }
    let mut out = [0u8; create_qp_out::BYTES];
    if let Err(e) = ctx.exec(&c, &mut out) {
        if e.device_may_hold() {
            // The reply was garbled or never came: the QP may exist and use the buffers and
            // the UAR. The buffers are quarantined (never freed) and the UAR stays allocated.
            ctx.release_after(&e, [buf, db]);
        } else {
            let _ = ctx.with_dev(|d| d.dealloc_uar(hal, uar.index));
        }
        return Err(e);
    }
    let qpn = get(&out, create_qp_out::QPN);
    let atomics = |n: u32| (0..n).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
    let shared = Arc::new(WqShared {
        qpn,
        qpn_key: WqShared::key(qpn),
        sq: (0..lay.sq_wqe_cnt)
            .map(|_| SqSlot {
                wrid: AtomicU64::new(0),
                meta: AtomicU64::new(0),
            })
            .collect(),
        sq_mask: lay.sq_wqe_cnt - 1,
        sq_max_wr: lay.caps.max_send_wr,
        sq_wr_tail: AtomicU32::new(0),
        sq_last: AtomicU32::new(u32::MAX),
        rq_wrid: atomics(lay.rq_wqe_cnt.max(1)),
        rq_mask: lay.rq_wqe_cnt.max(1) - 1,
        rq_head: AtomicU32::new(0),
        rq_tail: AtomicU32::new(0),
        stale: spin::Mutex::new(Vec::new()),
        retired: core::sync::atomic::AtomicBool::new(false),
    });
    ctx.register_send_gate(&shared);
    scq.shared.attach(&shared);
    if !Arc::ptr_eq(&scq.shared, &rcq.shared) {
        rcq.shared.attach(&shared);
    }
    let psn = (ctx.random() & 0xff_ffff) as u32;
    let bf_size = 1usize << ctx.caps.log_bf_reg_size.clamp(6, 11);
    let (ring, dbrec) = (buf.ptr(), db.ptr());
    // SAFETY: sq_offset + sq_wqe_cnt * 64 <= buf_size (see `layout`).
    let sq_base = unsafe { ring.add(lay.sq_offset) };
    let tag = NEXT_QP_TAG.fetch_add(1, Ordering::Relaxed);
    let sq_slots = shared.sq.as_ptr();
    Ok(QueuePair {
        ctx: ctx.clone(),
        pd: pd.clone(),
        scq: scq.shared.clone(),
        rcq: rcq.shared.clone(),
        shared,
        qpn,
        state: qp::state::RST,
        buf: Some(buf),
        db: Some(db),
        ring,
        sq_base,
        sq_mask: (lay.sq_wqe_cnt - 1) as u16,
        sq_slots,
        dbrec,
        uar,
        bf_off: uar.offset + uar::BF_OFFSET,
        bf_half: bf_size / 2,
        use_bf: ctx.caps.bf && ctx.hal.bf_write_combining(),
        lay,
        cur_post: 0,
        sq_wr_head: 0,
        ctrl_write: ctrl_tpl(qpn, 3, wqe::opcode::RDMA_WRITE),
        ctrl_read: ctrl_tpl(qpn, 3, wqe::opcode::RDMA_READ),
        bf_one: ctx.caps.bf && ctx.hal.bf_write_combining() && bf_size / 2 >= wqe::SEND_WQE_BB,
        sig_all: if opts.sq_sig_all {
            SendFlags::SIGNALED.0
        } else {
            0
        },
        tag,
        rq_head: 0,
        psn,
        bindings: Vec::new(),
        auto_live: 0,
        swept: (0, 0),
        last_binding: 0,
        last_mr: ptr::null(),
        fast_mr: ptr::null(),
        last_stamp: 0,
        destroyed: false,
    })
}

/// A WQE's local data after validation.
#[derive(Clone, Copy)]
pub(crate) enum Data<'a> {
    Sges(&'a [RawSge]),
    Inline(&'a [u8]),
}

/// Ctrl-segment bytes 0..8 as they lie in memory, with the WQE index zero:
/// `opmod_idx_opcode` (opmod 0, opcode `opc`) and `qpn_ds(qpn, ds)`, both big-endian
/// (rdma-core qp.c `_mlx5_post_send`: `ctrl->qpn_ds = htobe32(size | (qp->ibv_qp->qp_num << 8))`).
fn ctrl_tpl(qpn: u32, ds: u8, opc: u8) -> u64 {
    let o = wqe::opmod_idx_opcode(0, 0, opc).to_be_bytes();
    let q = wqe::qpn_ds(qpn, ds).to_be_bytes();
    u64::from_ne_bytes([o[0], o[1], o[2], o[3], q[0], q[1], q[2], q[3]])
}

/// Ctrl-segment bytes 0..8 of the WQE at block `cur`: the WQE index (big-endian, bytes 1..3)
/// over a [`ctrl_tpl`].
#[inline(always)]
fn ctrl_head(tpl: u64, cur: u16) -> u64 {
    // Dword 0 in memory order (one byte swap on a little-endian CPU).
    let dw0 = wqe::opmod_idx_opcode(0, cur, 0).to_be() as u64;
    if cfg!(target_endian = "little") {
        tpl | dw0
    } else {
        tpl | dw0 << 32
    }
}

#[inline(always)]
fn put32(p: *mut u8, v: u32) {
    // SAFETY: callers pass a pointer with 4 writable bytes inside the WQE being built.
    unsafe { ptr::write_unaligned(p as *mut [u8; 4], v.to_be_bytes()) }
}
#[inline(always)]
fn put64(p: *mut u8, v: u64) {
    // SAFETY: callers pass a pointer with 8 writable bytes inside the WQE being built.
    unsafe { ptr::write_unaligned(p as *mut [u8; 8], v.to_be_bytes()) }
}

impl<H: Hal> QueuePair<H> {
    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
    /// The initial send PSN (random).
    pub fn psn(&self) -> u32 {
        self.psn
    }
    /// The current state as the driver tracks it (`MLX5_QP_STATE_*`).
    pub fn state(&self) -> u8 {
        self.state
    }
    /// The capabilities the QP got (rounded up from the request).
    pub fn caps(&self) -> QpCaps {
        self.lay.caps
    }
    /// What a peer needs to connect to this QP (GID index 0 and the port MAC).
    pub fn endpoint(&self) -> QpEndpoint {
        QpEndpoint {
            qpn: self.qpn,
            psn: self.psn,
            gid: self.ctx.gid0(),
            mac: self.ctx.mac,
        }
    }

    fn modify(&mut self, op: u16, inlen: usize, f: impl FnOnce(&mut CmdBuf)) -> Result<()> {
        let mut c = CmdBuf::new(op, 0, inlen);
        c.set(rst2init_qp_in::QPN, self.qpn);
        f(&mut c);
        let mut out = [0u8; rst2init_qp_out::BYTES];
        self.ctx.exec(&c, &mut out)
    }

    fn check_state(&self, from: &[u8]) -> Result<()> {
        if from.contains(&self.state) {
            Ok(())
        } else {
            Err(InvalidInput::QpState { state: self.state }.into())
        }
    }

    /// RESET -> INIT (port 1, P_Key index 0, responder access per `access`). Remote atomic
    /// access sets `rae` together with the device's `atomic_mode` (Linux ib/qp.c
    /// `set_qpc_atomic_flags`); a device without atomics refuses it ([`Error::Unsupported`]).
    pub fn to_init(&mut self, access: Access) -> Result<()> {
        self.check_state(&[qp::state::RST])?;
        let atomic_mode = if access.contains(Access::REMOTE_ATOMIC) {
            atomic_mode(&self.ctx.caps).ok_or(Error::Unsupported)?
        } else {
            0
        };
        let (pdn, scqn, rcqn) = (self.pd.pdn, self.scq.cqn, self.rcq.cqn);
        self.modify(opcode::RST2INIT_QP, rst2init_qp_in::BYTES, |c| {
            let x = |f: mlx5_prm::Field| f.within(rst2init_qp_in::QPC);
            let p = |f: mlx5_prm::Field| {
                f.within(qpc::PRIMARY_ADDRESS_PATH)
                    .within(rst2init_qp_in::QPC)
            };
            c.set(x(qpc::PD), pdn)
                .set(x(qpc::CQN_SND), scqn)
                .set(x(qpc::CQN_RCV), rcqn)
                .set(p(ads::VHCA_PORT_NUM), 1)
                .set(p(ads::PKEY_INDEX), 0)
                .set(x(qpc::RRE), access.contains(Access::REMOTE_READ) as u32)
                .set(x(qpc::RWE), access.contains(Access::REMOTE_WRITE) as u32)
                .set(x(qpc::RAE), access.contains(Access::REMOTE_ATOMIC) as u32)
                .set(x(qpc::ATOMIC_MODE), atomic_mode)
                .set(x(qpc::LOG_ACK_REQ_FREQ), ACK_REQ_FREQ);
        })?;
        self.set_state(qp::state::INIT);
        Ok(())
    }

    /// INIT -> RTR toward `remote` (RoCE v2 path: Linux ib/qp.c `mlx5_set_path`). Refused
    /// before the command: a remote QPN of 0 or 1 ([`InvalidInput::RemoteQpn`]), an all-zero
    /// GID or MAC ([`InvalidInput::RemoteAddress`]), an `sgid_index` beyond the GID table
    /// ([`InvalidInput::GidIndex`]) and a `max_dest_rd_atomic` above the device's limit
    /// ([`InvalidInput::RdAtomic`]).
    pub fn to_rtr(&mut self, remote: &QpEndpoint, o: &ConnectOptions) -> Result<()> {
        self.check_state(&[qp::state::INIT])?;
        let caps = &self.ctx.caps;
        check_remote(remote)?;
        check_sgid_index(caps, o.sgid_index)?;
        let log_msg = caps.log_max_msg as u32;
        let rra = log_rd_atomic(o.max_dest_rd_atomic, caps.log_max_ra_res_qp)?;
        let sport = udp_sport(self.qpn, remote.qpn);
        let (pdn, scqn, rcqn) = (self.pd.pdn, self.scq.cqn, self.rcq.cqn);
        self.modify(opcode::INIT2RTR_QP, rst2init_qp_in::BYTES, |c| {
            let x = |f: mlx5_prm::Field| f.within(rst2init_qp_in::QPC);
            let p = |f: mlx5_prm::Field| {
                f.within(qpc::PRIMARY_ADDRESS_PATH)
                    .within(rst2init_qp_in::QPC)
            };
            c.set(x(qpc::PD), pdn)
                .set(x(qpc::CQN_SND), scqn)
                .set(x(qpc::CQN_RCV), rcqn)
                .set(x(qpc::MTU), o.mtu as u32)
                .set(x(qpc::LOG_MSG_MAX), log_msg)
                .set(x(qpc::REMOTE_QPN), remote.qpn & 0xff_ffff)
                .set(x(qpc::NEXT_RCV_PSN), remote.psn & 0xff_ffff)
                .set(x(qpc::LOG_RRA_MAX), rra)
                .set(x(qpc::LOG_ACK_REQ_FREQ), ACK_REQ_FREQ)
                .set(x(qpc::MIN_RNR_NAK), o.min_rnr_timer.into())
                .set(p(ads::VHCA_PORT_NUM), 1)
                .set(p(ads::PKEY_INDEX), 0)
                .bytes(
                    mlx5_prm::Field::new(ads::RMAC_47_32.offset, 48)
                        .within(qpc::PRIMARY_ADDRESS_PATH)
                        .within(rst2init_qp_in::QPC),
                    &remote.mac,
                )
                .set(p(ads::UDP_SPORT), sport.into())
                .set(p(ads::ETH_PRIO), 0)
                .set(p(ads::DSCP), (o.traffic_class >> 2).into())
                .set(p(ads::SRC_ADDR_INDEX), o.sgid_index.into())
                .set(p(ads::HOP_LIMIT), o.hop_limit.into())
                .set(p(ads::TCLASS), o.traffic_class.into())
                .set(p(ads::STAT_RATE), 0)
                .bytes(p(ads::RGID_RIP), &remote.gid);
        })?;
        self.set_state(qp::state::RTR);
        Ok(())
    }

    /// RTR -> RTS with the QP's random initial PSN.
    pub fn to_rts(&mut self, o: &ConnectOptions) -> Result<()> {
        self.check_state(&[qp::state::RTR])?;
        let sra = log_rd_atomic(o.max_rd_atomic, self.ctx.caps.log_max_ra_req_qp)?;
        let (pdn, scqn, rcqn, psn) = (self.pd.pdn, self.scq.cqn, self.rcq.cqn, self.psn);
        self.modify(opcode::RTR2RTS_QP, rst2init_qp_in::BYTES, |c| {
            let x = |f: mlx5_prm::Field| f.within(rst2init_qp_in::QPC);
            let p = |f: mlx5_prm::Field| {
                f.within(qpc::PRIMARY_ADDRESS_PATH)
                    .within(rst2init_qp_in::QPC)
            };
            c.set(x(qpc::PD), pdn)
                .set(x(qpc::CQN_SND), scqn)
                .set(x(qpc::CQN_RCV), rcqn)
                .set(x(qpc::NEXT_SEND_PSN), psn)
                .set(x(qpc::RETRY_COUNT), (o.retry_cnt & 7).into())
                .set(x(qpc::RNR_RETRY), (o.rnr_retry & 7).into())
                .set(x(qpc::LOG_SRA_MAX), sra)
                .set(x(qpc::LOG_ACK_REQ_FREQ), ACK_REQ_FREQ)
                .set(p(ads::ACK_TIMEOUT), (o.timeout & 0x1f).into());
        })?;
        self.set_state(qp::state::RTS);
        Ok(())
    }

    /// RESET -> INIT -> RTR -> RTS toward `remote`. Everything the driver can check is
    /// checked before the first command; if a transition still fails, the QP is moved back
    /// to RESET (2RST is legal from every state) and the transition's error is returned, so a
    /// failed connect never leaves it half-connected. Should that 2RST fail too, the QP stays
    /// where it was ([`QueuePair::state`] tells) and the first error is returned.
    pub fn connect(&mut self, remote: &QpEndpoint, o: &ConnectOptions) -> Result<()> {
        self.check_state(&[qp::state::RST])?;
        let caps = &self.ctx.caps;
        check_remote(remote)?;
        check_sgid_index(caps, o.sgid_index)?;
        log_rd_atomic(o.max_dest_rd_atomic, caps.log_max_ra_res_qp)?;
        log_rd_atomic(o.max_rd_atomic, caps.log_max_ra_req_qp)?;
        if o.access.contains(Access::REMOTE_ATOMIC) && atomic_mode(caps).is_none() {
            return Err(Error::Unsupported);
        }
        let r = self
            .to_init(o.access)
            .and_then(|()| self.to_rtr(remote, o))
            .and_then(|()| self.to_rts(o));
        if r.is_err() && self.state != qp::state::RST {
            let _ = self.to_reset();
        }
        r
    }

    /// Any state -> ERR (outstanding WRs complete with flush errors).
    pub fn to_err(&mut self) -> Result<()> {
        let mut c = CmdBuf::new(opcode::QP_2ERR, 0, qp_2err_in::BYTES);
        c.set(qp_2err_in::QPN, self.qpn);
        let mut out = [0u8; qp_2err_out::BYTES];
        self.ctx.exec(&c, &mut out)?;
        self.set_state(qp::state::ERR);
        Ok(())
    }

    /// Any state -> RESET; the software queues start over (Linux ib/qp.c resets the
    /// counters and the doorbell record on a move to RESET).
    pub fn to_reset(&mut self) -> Result<()> {
        let mut c = CmdBuf::new(opcode::QP_2RST, 0, mlx5_prm::qp_2rst_in::BYTES);
        c.set(mlx5_prm::qp_2rst_in::QPN, self.qpn);
        let mut out = [0u8; mlx5_prm::qp_2rst_out::BYTES];
        self.ctx.exec(&c, &mut out)?;
        self.set_state(qp::state::RST);
        // The CQEs of the old incarnation go (Linux ib/qp.c __mlx5_ib_modify_qp cleans both
        // CQs on a move to RESET; rdma-core the same): the CQs' pollers remove them before
        // they look at anything newer.
        self.clean_cqs();
        self.cur_post = 0;
        self.sq_wr_head = 0;
        self.rq_head = 0;
        self.shared.reset();
        // Nothing is outstanding in RESET: WR-made bindings go, handle-held ones start over.
        self.last_stamp = 0;
        for i in 0..self.bindings.len() {
            if self.bindings[i].explicit {
                let b = &mut self.bindings[i];
                b.last_sq = 0;
                b.last_rq = 0;
            } else {
                self.free_binding(i);
            }
        }
        self.swept = (0, 0);
        if let Some(db) = &self.db {
            db.fill(0, 8, 0)?;
        }
        Ok(())
    }

    /// Asks the send and receive CQs to remove this QP's CQEs written so far (after 2RST or
    /// DESTROY_QP). A CQ that cannot take the request (its QUERY_CQ failed) just stops
    /// routing this QP's completions when it is destroyed.
    fn clean_cqs(&self) {
        let retired = self
            .shared
            .retired
            .load(core::sync::atomic::Ordering::Acquire);
        let same = Arc::ptr_eq(&self.scq, &self.rcq);
        for cq in [&self.scq, &self.rcq]
            .into_iter()
            .take(if same { 1 } else { 2 })
        {
            if cq.request_clean(&self.shared).is_err() && retired {
                cq.detach(&self.shared);
            }
        }
    }

    /// QUERY_QP: the state, path and limits the firmware reports, with the capabilities the
    /// QP was granted (`ibv_query_qp`; Linux ib/qp.c `query_qp_attr` reads the same qpc
    /// fields, and `max_rd_atomic = 1 << log_sra_max`).
    pub fn query(&self) -> Result<QpAttr> {
        let mut c = CmdBuf::new(opcode::QUERY_QP, 0, query_qp_in::BYTES);
        c.set(query_qp_in::QPN, self.qpn);
        let mut out = alloc::vec![0u8; query_qp_out::BYTES];
        self.ctx.exec(&c, &mut out)?;
        let g = |f: mlx5_prm::Field| get(&out, f.within(query_qp_out::QPC));
        let pp = |f: mlx5_prm::Field| g(f.within(qpc::PRIMARY_ADDRESS_PATH));
        let mut access = Access(0);
        for (f, a) in [
            (qpc::RRE, Access::REMOTE_READ),
            (qpc::RWE, Access::REMOTE_WRITE),
            (qpc::RAE, Access::REMOTE_ATOMIC),
        ] {
            if g(f) != 0 {
                access = access | a;
            }
        }
        Ok(QpAttr {
            state: g(qpc::STATE) as u8,
            cap: self.lay.caps,
            sq_sig_all: self.sig_all != 0,
            max_rd_atomic: 1 << g(qpc::LOG_SRA_MAX).min(31),
            max_dest_rd_atomic: 1 << g(qpc::LOG_RRA_MAX).min(31),
            path_mtu: g(qpc::MTU) as u8,
            dest_qp_num: g(qpc::REMOTE_QPN),
            sq_psn: g(qpc::NEXT_SEND_PSN),
            rq_psn: g(qpc::NEXT_RCV_PSN),
            retry_cnt: g(qpc::RETRY_COUNT) as u8,
            rnr_retry: g(qpc::RNR_RETRY) as u8,
            min_rnr_timer: g(qpc::MIN_RNR_NAK) as u8,
            timeout: pp(ads::ACK_TIMEOUT) as u8,
            access,
            atomic_mode: g(qpc::ATOMIC_MODE) as u8,
            log_ack_req_freq: g(qpc::LOG_ACK_REQ_FREQ) as u8,
        })
    }

    /// QUERY_QP: the state the firmware reports.
    pub fn query_state(&self) -> Result<u8> {
        let mut c = CmdBuf::new(opcode::QUERY_QP, 0, query_qp_in::BYTES);
        c.set(query_qp_in::QPN, self.qpn);
        let mut out = alloc::vec![0u8; query_qp_out::BYTES];
        self.ctx.exec(&c, &mut out)?;
        Ok(get(&out, qpc::STATE.within(query_qp_out::QPC)) as u8)
    }

    fn set_state(&mut self, state: u8) {
        self.state = state;
        self.close_gate();
    }

    /// Makes the next post take the slow path of [`QueuePair::gate`].
    #[inline(always)]
    fn close_gate(&self) {
        self.shared
            .sq_last
            .store(self.sq_wr_head.wrapping_sub(1), Ordering::Relaxed);
    }

    /// True while a WR that named binding `b` may still be outstanding: its stamp lies in
    /// `(tail, tail + max]` (exact for counters within 2^32 WRs; an older stamp can only read
    /// as busy, never as free too early).
    fn binding_busy(&self, b: &Binding<H>, sq_tail: u32, rq_tail: u32) -> bool {
        let sq_max = self.lay.caps.max_send_wr;
        let rq_max = self.lay.rq_wqe_cnt;
        b.last_sq.wrapping_sub(sq_tail).wrapping_sub(1) < sq_max
            || b.last_rq.wrapping_sub(rq_tail).wrapping_sub(1) < rq_max
    }

    fn tails(&self) -> (u32, u32) {
        (
            self.shared.sq_wr_tail.load(Ordering::Acquire),
            self.shared.rq_tail.load(Ordering::Acquire),
        )
    }

    /// Frees binding slot `i` (WR-held only), dropping the region reference.
    fn free_binding(&mut self, i: usize) {
        if let Some(b) = self.bindings.get_mut(i) {
            if !b.explicit && b.mr.take().is_some() {
                self.auto_live -= 1;
                if i == self.last_binding {
                    self.last_mr = ptr::null();
                }
                self.refresh_fast_mr();
            }
        }
    }

    /// Writes the last binding's send stamp (`last_stamp`) into it.
    fn flush_stamp(&mut self) {
        if !self.last_mr.is_null() {
            if let Some(b) = self.bindings.get_mut(self.last_binding) {
                b.last_sq = self.last_stamp;
            }
        }
    }

    /// Recomputes `fast_mr` after the bindings or `last_binding` changed.
    fn refresh_fast_mr(&mut self) {
        let last_auto = !self.last_mr.is_null()
            && self
                .bindings
                .get(self.last_binding)
                .is_some_and(|b| !b.explicit);
        let others = self.auto_live - last_auto as u32;
        self.fast_mr = if others == 0 {
            self.last_mr
        } else {
            ptr::null()
        };
    }

    /// Releases the regions that only completed WRs referenced. Cheap when nothing is held
    /// for WRs or nothing completed since the last sweep.
    #[inline(always)]
    pub(crate) fn sweep(&mut self) {
        if self.auto_live == 0 {
            return;
        }
        let t = self.tails();
        if t != self.swept {
            self.sweep_slow(t);
        }
    }

    #[cold]
    fn sweep_slow(&mut self, (sq_tail, rq_tail): (u32, u32)) {
        self.flush_stamp();
        self.swept = (sq_tail, rq_tail);
        for i in 0..self.bindings.len() {
            let b = &self.bindings[i];
            if b.mr.is_some() && !b.explicit && !self.binding_busy(b, sq_tail, rq_tail) {
                self.free_binding(i);
            }
        }
    }

    /// A slot for a new binding of `mr` (a free one, or a new one at the end).
    fn add_binding(&mut self, mr: &Arc<MrInner<H>>, explicit: bool) -> usize {
        let (sq_tail, rq_tail) = self.tails();
        let b = Binding {
            mr: Some(mr.clone()),
            explicit,
            last_sq: sq_tail,
            last_rq: rq_tail,
        };
        if !explicit {
            self.auto_live += 1;
        }
        let i = match self.bindings.iter().position(|b| b.mr.is_none()) {
            Some(i) => {
                self.bindings[i] = b;
                i
            }
            None => {
                self.bindings.push(b);
                self.bindings.len() - 1
            }
        };
        self.refresh_fast_mr();
        i
    }

    /// The binding that keeps `mr` alive for a posted WR (found, or made): one pointer
    /// compare when the previous post named the same region, no reference counting per WR.
    #[inline]
    pub(crate) fn binding_for(&mut self, mr: &Arc<MrInner<H>>) -> usize {
        if ptr::eq(Arc::as_ptr(mr) as *const (), self.last_mr) {
            return self.last_binding;
        }
        self.binding_for_slow(mr)
    }

    #[cold]
    fn binding_for_slow(&mut self, mr: &Arc<MrInner<H>>) -> usize {
        self.flush_stamp();
        let found = self
            .bindings
            .iter()
            .position(|b| b.mr.as_ref().is_some_and(|m| Arc::ptr_eq(m, mr)));
        let i = match found {
            Some(i) => i,
            None => self.add_binding(mr, false),
        };
        self.last_binding = i;
        self.last_mr = Arc::as_ptr(mr) as *const ();
        self.last_stamp = self.bindings[i].last_sq;
        self.refresh_fast_mr();
        i
    }

    /// Marks binding `i` as referenced by the send WR being posted now.
    #[inline(always)]
    pub(crate) fn stamp_sq(&mut self, i: usize) {
        let seq = self.sq_wr_head.wrapping_add(1);
        if i == self.last_binding && !self.last_mr.is_null() {
            self.last_stamp = seq;
        } else if let Some(b) = self.bindings.get_mut(i) {
            b.last_sq = seq;
        }
    }

    /// Marks binding `i` as referenced by the receive WR being posted now.
    #[inline(always)]
    pub(crate) fn stamp_rq(&mut self, i: usize) {
        let seq = self.rq_head.wrapping_add(1);
        if let Some(b) = self.bindings.get_mut(i) {
            b.last_rq = seq;
        }
    }

    /// Binds `mr` to this QP for the fast posting calls ([`QueuePair::post_write`],
    /// [`QueuePair::post_read`]): the QP keeps the region registered (its
    /// [`crate::MemoryRegion::dereg`] fails with [`Error::Busy`]) while the returned handle
    /// lives, and until the WRs posted before [`QueuePair::unbind_mr`] completed, or until the
    /// QP is destroyed.
    pub fn bind_mr(&mut self, mr: &crate::MemoryRegion<H>) -> Result<BoundMr> {
        let m = mr.inner_arc().ok_or(InvalidInput::BadLkey(0))?;
        if !Arc::ptr_eq(&m.pd.ctx, &self.ctx) {
            return Err(InvalidInput::ForeignObject.into());
        }
        self.sweep();
        let i = self.add_binding(m, true);
        Ok(BoundMr {
            tag: self.tag,
            index: i as u32,
            lkey_be: m.key.to_be(),
            iova: m.iova,
            len: m.len,
            local_write: m.access.contains(Access::LOCAL_WRITE),
        })
    }

    /// Ends a [`QueuePair::bind_mr`] binding. The region stays referenced until every WR
    /// posted so far completed (then [`crate::MemoryRegion::dereg`] succeeds). Refuses a
    /// handle of another QP ([`InvalidInput::UnboundRegion`]; that QP keeps its binding until
    /// it is destroyed).
    pub fn unbind_mr(&mut self, h: BoundMr) -> Result<()> {
        if h.tag != self.tag {
            return Err(InvalidInput::UnboundRegion.into());
        }
        let (sq_head, rq_head) = (self.sq_wr_head, self.rq_head);
        self.flush_stamp();
        // A live handle of this QP always names its own binding (never freed or reused
        // before the handle comes back here).
        let Some(b) = self.bindings.get_mut(h.index as usize) else {
            return Err(Error::Internal);
        };
        if !b.explicit || b.mr.is_none() {
            return Err(Error::Internal);
        }
        // From now on held for the WRs posted so far.
        b.explicit = false;
        b.last_sq = sq_head;
        b.last_rq = rq_head;
        if h.index as usize == self.last_binding {
            self.last_stamp = sq_head;
        }
        self.auto_live += 1;
        self.refresh_fast_mr();
        let t = self.tails();
        self.sweep_slow(t);
        Ok(())
    }

    /// Lets send WR number `head + 1` through while the gate is open (one load and a sign
    /// test, see [`WqShared::sq_last`]); past it, when the device is alive, the QP is in RTS
    /// and has room (the gate then moves to `tail + max_send_wr - 1`).
    #[inline(always)]
    fn gate(&mut self, head: u32) -> Result<()> {
        let last = self.shared.sq_last.load(Ordering::Relaxed);
        if (last.wrapping_sub(head) as i32) < 0 {
            return self.refresh_limit();
        }
        Ok(())
    }

    /// The gate's slow path: the checks, then the limit moves (no call, so the fast path
    /// needs no saved registers; region releases happen on the generic paths and
    /// [`QueuePair::release_completed`]).
    #[inline(always)]
    fn refresh_limit(&mut self) -> Result<()> {
        self.ctx.check_alive()?;
        if !can_send(self.state) {
            return Err(InvalidInput::QpState { state: self.state }.into());
        }
        let head = self.sq_wr_head;
        let limit = self
            .shared
            .sq_wr_tail
            .load(Ordering::Acquire)
            .wrapping_add(self.lay.caps.max_send_wr);
        if limit == head {
            // Full: the gate stays closed.
            return Err(InvalidInput::QueueFull.into());
        }
        self.shared
            .sq_last
            .store(limit.wrapping_sub(1), Ordering::Relaxed);
        // A device dying now: `CtxInner::set_dead` sets its flag, a fence, then closes every
        // gate. Either that close lands after the store above, or this check sees the flag.
        core::sync::atomic::fence(Ordering::SeqCst);
        if let Err(e) = self.ctx.check_alive() {
            self.close_gate();
            return Err(e);
        }
        Ok(())
    }

    /// The address of `local` after checking it: a handle of this QP, inside the region,
    /// and with local write when the device writes it.
    #[inline(always)]
    fn resolve(&self, local: BoundSge<'_>, write: bool) -> Result<u64> {
        let b = local.mr;
        if b.tag != self.tag {
            return Err(InvalidInput::UnboundRegion.into());
        }
        match local.offset.checked_add(local.len as u64) {
            Some(end) if end <= b.len => {}
            _ => return Err(InvalidInput::OutOfRange.into()),
        }
        if write && !b.local_write {
            return Err(InvalidInput::LocalAccess.into());
        }
        Ok(b.iova + local.offset)
    }

    /// RDMA WRITE of `local` (a slice of a region bound to this QP) to `remote`: one WQE and
    /// its doorbell. The fast path: no allocation, no reference counting, no locks, no
    /// table lookup; refused before anything is written like [`QueuePair::post_send`].
    #[inline(always)]
    pub fn post_write(
        &mut self,
        wr_id: u64,
        local: BoundSge<'_>,
        remote: Remote,
        flags: SendFlags,
    ) -> Result<()> {
        self.post_bound(wqe::opcode::RDMA_WRITE, false, wr_id, local, remote, flags)
    }

    /// RDMA READ from `remote` into `local` (a slice of a bound region with local write).
    #[inline(always)]
    pub fn post_read(
        &mut self,
        wr_id: u64,
        local: BoundSge<'_>,
        remote: Remote,
        flags: SendFlags,
    ) -> Result<()> {
        self.post_bound(wqe::opcode::RDMA_READ, true, wr_id, local, remote, flags)
    }

    /// The fast path: the gate (a live device, and the QP below its limit, see `sq_limit`),
    /// the handle and bounds check, the WQE, the doorbell.
    #[inline(always)]
    fn post_bound(
        &mut self,
        opc: u8,
        write: bool,
        wr_id: u64,
        local: BoundSge<'_>,
        remote: Remote,
        flags: SendFlags,
    ) -> Result<()> {
        let head = self.sq_wr_head;
        self.gate(head)?;
        let addr = self.resolve(local, write)?;
        self.write_one_sge(
            head,
            opc,
            wr_id,
            addr,
            local.len,
            local.mr.lkey_be,
            remote,
            flags,
        );
        Ok(())
    }

    /// Releases the regions held only for WRs that completed (regions named by posts of
    /// the generic calls, and regions unbound with [`QueuePair::unbind_mr`]), so that their
    /// [`crate::MemoryRegion::dereg`] succeeds. The generic posting calls, `bind_mr` and
    /// `unbind_mr` do this on their own; the fast calls ([`QueuePair::post_write`],
    /// [`QueuePair::post_read`]) do not.
    pub fn release_completed(&mut self) {
        self.sweep();
    }

    /// Writes a ctrl + raddr + data WQE (one block, never wrapping) at `cur_post` and rings
    /// the doorbell. The caller checked state, room and the local slice; `head` is
    /// `sq_wr_head`, `lkey_be` the key as the data segment holds it (`key.to_be()`).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn write_one_sge(
        &mut self,
        head: u32,
        opc: u8,
        wr_id: u64,
        addr: u64,
        len: u32,
        lkey_be: u32,
        remote: Remote,
        flags: SendFlags,
    ) {
        // The slot the poller will look up and the counters first, then the WQE. Nothing
        // reaches the device before the doorbell record.
        let cur = self.cur_post;
        let idx = cur & self.sq_mask;
        let next = cur.wrapping_add(1);
        debug_assert_eq!(head, self.sq_wr_head);
        self.sq_wr_head = head.wrapping_add(1);
        self.set_slot(idx, wr_id, cur);
        self.cur_post = next;
        let tpl = if len == 0 {
            // A zero-length SGE is left out (rdma-core qp.c set_data_ptr_seg skips it).
            ctrl_tpl(self.qpn, 2, opc)
        } else if opc == wqe::opcode::RDMA_WRITE {
            self.ctrl_write
        } else if opc == wqe::opcode::RDMA_READ {
            self.ctrl_read
        } else {
            ctrl_tpl(self.qpn, 3, opc)
        };
        // SAFETY: idx <= sq_mask < sq_wqe_cnt: one block inside the send queue.
        let base = unsafe { self.sq_base.add(idx as usize * wqe::SEND_WQE_BB) };
        // `sq_sig_all` adds SIGNALED; a WR that has it already (a constant at most call
        // sites, which folds this away) needs no look at the QP.
        let f = if flags.contains(SendFlags::SIGNALED) {
            flags.0
        } else {
            flags.0 | self.sig_all
        };
        // SAFETY: 48 bytes of one 64-byte block (ctrl, raddr, data segments).
        unsafe {
            ptr::write_unaligned(base as *mut u64, ctrl_head(tpl, cur));
            ptr::write_unaligned(base.add(8) as *mut u64, CTRL_TAIL[(f & 7) as usize]);
            let r = base.add(wqe::ctrl_seg::SIZE);
            put64(r.add(wqe::raddr_seg::RADDR), remote.addr);
            put32(r.add(wqe::raddr_seg::RKEY), remote.rkey);
            put32(r.add(12), 0);
            if len != 0 {
                let d = r.add(wqe::raddr_seg::SIZE);
                put32(d.add(wqe::data_seg::BYTE_COUNT), len);
                ptr::write_unaligned(d.add(wqe::data_seg::LKEY) as *mut u32, lkey_be);
                put64(d.add(wqe::data_seg::ADDR), addr);
            }
        }
        self.ring_sq(base, next, if self.bf_one { 1 } else { 0 });
    }

    /// Records the WQE that starts at block `start` (slot `idx`) for the poller; call after
    /// counting the WR in `sq_wr_head`.
    #[inline(always)]
    fn set_slot(&self, idx: u16, wr_id: u64, start: u16) {
        // SAFETY: idx <= sq_mask and `shared.sq` has sq_mask + 1 slots; `shared` (kept by
        // this QP) owns them and never resizes them.
        let sl = unsafe { &*self.sq_slots.add(idx as usize) };
        sl.wrid.store(wr_id, Ordering::Relaxed);
        sl.meta
            .store(slot_meta(self.sq_wr_head, start), Ordering::Release);
    }

    /// WQEBBs a send WR needs, after checking it against the QP's limits.
    #[inline]
    fn send_wqe_bbs(&self, op: &SendOp, data: Data<'_>) -> Result<u32> {
        let caps = &self.lay.caps;
        let mut ds = 1u32; // ctrl
        match op {
            SendOp::Send { .. } => {}
            SendOp::Write { .. } | SendOp::Read { .. } => ds += 1,
            SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => ds += 2,
        }
        match data {
            Data::Sges(s) => {
                if s.len() > caps.max_send_sge as usize {
                    return Err(InvalidInput::TooManySge {
                        given: s.len(),
                        max: caps.max_send_sge as usize,
                    }
                    .into());
                }
                if let SendOp::CompareSwap { remote, .. } | SendOp::FetchAdd { remote, .. } = op {
                    // One 8-byte local buffer, and an 8-byte aligned remote target (an
                    // unaligned one fails at the responder with an invalid-request NAK: rxe
                    // rxe_resp.c RESPST_ERR_MISALIGNED_ATOMIC).
                    if s.len() != 1 || s[0].len != wqe::ATOMIC_SIZE || remote.addr % 8 != 0 {
                        return Err(InvalidInput::AtomicAlignment.into());
                    }
                }
                ds += s.iter().filter(|g| g.len != 0).count() as u32;
            }
            Data::Inline(b) => {
                if matches!(
                    op,
                    SendOp::Read { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }
                ) {
                    return Err(InvalidInput::InlineNotAllowed.into());
                }
                if b.len() > caps.max_inline_data as usize {
                    return Err(InvalidInput::InlineTooLarge {
                        given: b.len(),
                        max: caps.max_inline_data as usize,
                    }
                    .into());
                }
                if !b.is_empty() {
                    ds += (b.len() as u32 + wqe::inl_data_seg::SIZE as u32).div_ceil(16);
                }
            }
        }
        Ok(wqe::wqebbs(ds).max(1))
    }

    /// Writes one send WQE at `cur_post` (room checked by the caller). Returns the WQE's
    /// first block in the ring and whether the whole WQE lies there contiguously (a
    /// BlueFlame candidate) rather than wrapping to the ring's start.
    #[inline]
    pub(crate) fn write_send(
        &mut self,
        wr_id: u64,
        op: &SendOp,
        flags: SendFlags,
        data: Data<'_>,
        bbs: u32,
    ) -> (*const u8, bool) {
        let cnt = self.lay.sq_wqe_cnt;
        let idx = self.cur_post & self.sq_mask;
        let in_place = idx as u32 + bbs <= cnt;
        // Only used when the WQE wraps; never read before it is written.
        let mut scratch = core::mem::MaybeUninit::<[u8; MAX_WQE_BYTES]>::uninit();
        let base: *mut u8 = if in_place {
            // SAFETY: idx + bbs <= cnt, so the WQE lies inside the SQ, which lies inside the
            // QP buffer (sq_offset + cnt * 64 <= buf_size, see `layout`).
            unsafe {
                self.ring
                    .add(self.lay.sq_offset + idx as usize * wqe::SEND_WQE_BB)
            }
        } else {
            scratch.as_mut_ptr() as *mut u8
        };
        // Segments after ctrl.
        let mut off = wqe::ctrl_seg::SIZE;
        let (opc, imm) = match *op {
            SendOp::Send { imm } => (
                if imm.is_some() {
                    wqe::opcode::SEND_IMM
                } else {
                    wqe::opcode::SEND
                },
                imm,
            ),
            SendOp::Write { remote, imm } => {
                self.raddr(base, &mut off, remote);
                (
                    if imm.is_some() {
                        wqe::opcode::RDMA_WRITE_IMM
                    } else {
                        wqe::opcode::RDMA_WRITE
                    },
                    imm,
                )
            }
            SendOp::Read { remote } => {
                self.raddr(base, &mut off, remote);
                (wqe::opcode::RDMA_READ, None)
            }
            SendOp::CompareSwap {
                remote,
                compare,
                swap,
            } => {
                self.raddr(base, &mut off, remote);
                // rdma-core qp.c set_atomic_seg: CMP_AND_SWP swap_add = swap, compare = compare.
                // SAFETY: SQ_OVERHEAD bytes fit every WQE (wqe_size >= SQ_OVERHEAD + 16).
                unsafe {
                    put64(base.add(off + wqe::atomic_seg::SWAP_ADD), swap);
                    put64(base.add(off + wqe::atomic_seg::COMPARE), compare);
                }
                off += wqe::atomic_seg::SIZE;
                (wqe::opcode::ATOMIC_CS, None)
            }
            SendOp::FetchAdd { remote, add } => {
                self.raddr(base, &mut off, remote);
                // SAFETY: as above.
                unsafe {
                    put64(base.add(off + wqe::atomic_seg::SWAP_ADD), add);
                    put64(base.add(off + wqe::atomic_seg::COMPARE), 0);
                }
                off += wqe::atomic_seg::SIZE;
                (wqe::opcode::ATOMIC_FA, None)
            }
        };
        match data {
            Data::Sges(s) => {
                for g in s.iter().filter(|g| g.len != 0) {
                    // SAFETY: the SGE count was checked against max_send_sge, which the WQE
                    // size accounts for (16 bytes each).
                    unsafe {
                        let d = base.add(off);
                        put32(d.add(wqe::data_seg::BYTE_COUNT), g.len);
                        put32(d.add(wqe::data_seg::LKEY), g.lkey);
                        put64(d.add(wqe::data_seg::ADDR), g.addr);
                    }
                    off += wqe::data_seg::SIZE;
                }
            }
            Data::Inline(b) if !b.is_empty() => {
                // SAFETY: len <= max_inline_data, which the WQE size accounts for; the header
                // is 4 bytes and the data follows it.
                unsafe {
                    put32(base.add(off), b.len() as u32 | wqe::INLINE_SEG);
                    ptr::copy_nonoverlapping(b.as_ptr(), base.add(off + 4), b.len());
                }
                off += (b.len() + 4).next_multiple_of(16);
            }
            Data::Inline(_) => {}
        }
        let ds = (off / 16) as u8;
        let fm_ce_se = fm_ce_se(SendFlags(flags.0 | self.sig_all));
        // SAFETY: the ctrl segment is the first 16 bytes of the WQE.
        unsafe {
            put32(base, wqe::opmod_idx_opcode(0, self.cur_post, opc));
            put32(base.add(4), wqe::qpn_ds(self.qpn, ds));
            ptr::write_unaligned(base.add(8) as *mut [u8; 4], [0, 0, 0, fm_ce_se]);
            put32(base.add(12), imm.unwrap_or(0));
        }
        if !in_place {
            // Wrap: copy the WQE to the end of the ring and the rest to its start.
            // Copy the `off` bytes written (ds * 16 <= bbs * 64).
            let first = (((cnt - idx as u32) as usize) * wqe::SEND_WQE_BB).min(off);
            let src = scratch.as_ptr() as *const u8;
            // SAFETY: both destination ranges lie inside the SQ (the WQE spans bbs blocks from
            // idx, wrapping to 0); the first `off` bytes of scratch were written above.
            unsafe {
                let sq = self.ring.add(self.lay.sq_offset);
                ptr::copy_nonoverlapping(src, sq.add(idx as usize * wqe::SEND_WQE_BB), first);
                ptr::copy_nonoverlapping(src.add(first), sq, off - first);
            }
        }
        debug_assert!(bbs <= self.lay.sq_max_bbs);
        let start = self.cur_post;
        // bbs <= sq_max_bbs <= 16 (checked by `send_wqe_bbs`).
        self.cur_post = start.wrapping_add(bbs as u16);
        self.sq_wr_head = self.sq_wr_head.wrapping_add(1);
        self.set_slot(idx, wr_id, start);
        // SAFETY: idx < cnt: the WQE's first block, inside the send queue.
        let first = unsafe { self.sq_base.add(idx as usize * wqe::SEND_WQE_BB) };
        (first, in_place)
    }

    /// Posts one signaled WQE of opcode `opc` whose ctrl `imm` is `imm` and whose segments
    /// after the ctrl segment are `body` (a multiple of 16 bytes): the UMR WQEs of
    /// [`crate::umr`] (Linux ib/umr.c `mlx5r_umr_post_send`: ctrl `imm` = the mkey, fence
    /// `MLX5_FENCE_MODE_INITIATOR_SMALL`). Not a hot path: its own function, so the send
    /// paths stay as they are.
    pub(crate) fn post_raw(&mut self, wr_id: u64, opc: u8, imm: u32, body: &[u8]) -> Result<()> {
        self.check_can_send()?;
        if !body.len().is_multiple_of(wqe::SEND_WQE_DS) {
            return Err(InvalidInput::OutOfRange.into());
        }
        let ds = 1 + body.len() / wqe::SEND_WQE_DS;
        let bbs = wqe::wqebbs(ds as u32);
        if ds > wqe::CTRL_DS_MASK as usize || bbs > self.lay.sq_max_bbs {
            return Err(InvalidInput::OutOfRange.into());
        }
        self.reserve_sq(1)?;
        let cnt = self.lay.sq_wqe_cnt;
        let idx = self.cur_post & self.sq_mask;
        let mut w = [0u8; MAX_WQE_BYTES];
        w[..4].copy_from_slice(&wqe::opmod_idx_opcode(0, self.cur_post, opc).to_be_bytes());
        w[4..8].copy_from_slice(&wqe::qpn_ds(self.qpn, ds as u8).to_be_bytes());
        w[wqe::ctrl_seg::FM_CE_SE] = wqe::fence::INITIATOR_SMALL | wqe::ctrl::CQ_UPDATE;
        w[wqe::ctrl_seg::IMM..wqe::ctrl_seg::IMM + 4].copy_from_slice(&imm.to_be_bytes());
        let len = wqe::ctrl_seg::SIZE + body.len();
        w[wqe::ctrl_seg::SIZE..len].copy_from_slice(body);
        let first = (((cnt - idx as u32) as usize) * wqe::SEND_WQE_BB).min(len);
        // SAFETY: both destination ranges lie inside the SQ (the WQE spans bbs <= sq_max_bbs
        // blocks from idx, wrapping to block 0); `w` holds `len` bytes.
        unsafe {
            let sq = self.ring.add(self.lay.sq_offset);
            ptr::copy_nonoverlapping(w.as_ptr(), sq.add(idx as usize * wqe::SEND_WQE_BB), first);
            ptr::copy_nonoverlapping(w.as_ptr().add(first), sq, len - first);
        }
        let start = self.cur_post;
        self.cur_post = start.wrapping_add(bbs as u16);
        self.sq_wr_head = self.sq_wr_head.wrapping_add(1);
        self.set_slot(idx, wr_id, start);
        // SAFETY: idx < cnt: the WQE's first block, inside the send queue.
        let at = unsafe { self.sq_base.add(idx as usize * wqe::SEND_WQE_BB) };
        self.ring_send(at, None);
        Ok(())
    }

    #[inline(always)]
    fn raddr(&self, base: *mut u8, off: &mut usize, r: Remote) {
        // SAFETY: the raddr segment follows ctrl inside every WQE (SQ_OVERHEAD).
        unsafe {
            let p = base.add(*off);
            put64(p.add(wqe::raddr_seg::RADDR), r.addr);
            put32(p.add(wqe::raddr_seg::RKEY), r.rkey);
            put32(p.add(12), 0);
        }
        *off += wqe::raddr_seg::SIZE;
    }

    /// Rings the send doorbell for the WQEs up to `cur_post` (`cur`): `last` is the last
    /// WQE's first block in the ring; `bf_bbs` is how many blocks of it to copy through
    /// BlueFlame (0: the 8-byte doorbell instead).
    #[inline(always)]
    fn ring_sq(&mut self, last: *const u8, cur: u16, bf_bbs: u32) {
        // The BlueFlame offset alternates between the register's halves (facts trap 16).
        let bf_off = self.bf_off;
        self.bf_off ^= self.bf_half;
        let hal = &self.ctx.hal;
        // WQE (write-back memory) before the doorbell record (write-back): a compiler barrier
        // on x86 TSO (rdma-core udma_to_device_barrier); see `hal` on barriers.
        hal.dma_wmb();
        // SAFETY: dbrec points to the 64-byte doorbell record; dword 1 is the send counter.
        unsafe {
            ptr::write_volatile(
                (self.dbrec as *mut u32).add(qp_db::SND_DBR),
                (cur as u32).to_be(),
            )
        };
        if bf_bbs != 0 {
            // Doorbell record before write-combining stores: sfence (mmio_wc_start).
            hal.wc_start();
            for i in 0..bf_bbs as usize {
                // SAFETY: the caller passes bf_bbs only for a WQE written in place: its
                // blocks lie inside the ring; the device only reads them.
                let blk = unsafe { &*(last.add(i * 64) as *const [u8; 64]) };
                hal.mmio_copy_bf(bf_off + i * 64, blk);
            }
        } else {
            // Doorbell record before an uncached 8-byte store: a compiler barrier on x86 TSO
            // (a write-combining mapping would need wc_start here too).
            hal.dma_wmb();
            // SAFETY: `last` is the last WQE's first block in the ring.
            unsafe { ring_db64(hal, bf_off, last) };
        }
        // Flush the write-combining buffer: the BlueFlame burst leaves now, before the next
        // doorbell on the other half (mmio_flush_writes, sfence).
        hal.wc_flush();
    }

    /// BlueFlame blocks for a lone WQE of `bbs` blocks (0 when it does not qualify).
    #[inline]
    fn bf_blocks(&self, bbs: u32, in_place: bool) -> u32 {
        if self.use_bf && in_place && (bbs as usize) * wqe::SEND_WQE_BB <= self.bf_half {
            bbs
        } else {
            0
        }
    }

    /// True when `wrs` more WRs fit: at most `max_send_wr` WRs outstanding (which also
    /// bounds the blocks, see [`WqShared`]).
    #[inline]
    fn sq_room(&self, wrs: usize) -> bool {
        let wr_tail = self.shared.sq_wr_tail.load(Ordering::Acquire);
        let outstanding = self.sq_wr_head.wrapping_sub(wr_tail) as usize;
        outstanding + wrs <= self.lay.caps.max_send_wr as usize
    }

    /// Raw post: any number of WRs, ONE doorbell. Every WR is checked first (state, SGE count,
    /// inline size, room, lkeys against this context's live MRs); on error nothing is
    /// written.
    ///
    /// # Safety
    /// The addresses are memory the caller keeps registered and alive until the completions;
    /// the driver only checks that each lkey is a live MR of this context and that the SGE
    /// lies inside it.
    pub unsafe fn post_send_raw(&mut self, wrs: &[RawSendWr<'_>]) -> Result<()> {
        self.ctx.check_alive()?;
        if !can_send(self.state) {
            return Err(InvalidInput::QpState { state: self.state }.into());
        }
        let mut last_bbs = 0;
        {
            let mrs = self.ctx.mrs.read();
            for wr in wrs {
                let data = match wr.data {
                    RawData::Sges(s) => Data::Sges(s),
                    RawData::Inline(b) => Data::Inline(b),
                };
                last_bbs = self.send_wqe_bbs(&wr.op, data)?;
                if let RawData::Sges(s) = wr.data {
                    let write = matches!(
                        wr.op,
                        SendOp::Read { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }
                    );
                    for g in s {
                        crate::verbs::check_lkey(&mrs, g, write)?;
                    }
                }
            }
        }
        if wrs.is_empty() {
            return Ok(());
        }
        self.sweep();
        if !self.sq_room(wrs.len()) {
            return Err(InvalidInput::QueueFull.into());
        }
        let (mut last, mut in_place) = (ptr::null(), false);
        for wr in wrs {
            let data = match wr.data {
                RawData::Sges(s) => Data::Sges(s),
                RawData::Inline(b) => Data::Inline(b),
            };
            let bbs = self.send_wqe_bbs(&wr.op, data).unwrap_or(1);
            (last, in_place) = self.write_send(wr.wr_id, &wr.op, wr.flags, data, bbs);
        }
        let bf = if wrs.len() == 1 {
            self.bf_blocks(last_bbs, in_place)
        } else {
            0
        };
        self.close_gate();
        self.ring_sq(last, self.cur_post, bf);
        Ok(())
    }

    /// Safe layer, step 2: releases completed WRs' region references and checks room for
    /// `wrs` WRs.
    #[inline]
    pub(crate) fn reserve_sq(&mut self, wrs: usize) -> Result<()> {
        self.sweep();
        if !self.sq_room(wrs) {
            return Err(InvalidInput::QueueFull.into());
        }
        Ok(())
    }

    /// Safe layer, step 4: one doorbell for the batch (`lone`: the batch is this one WQE of
    /// `bbs` blocks, written in place or not).
    #[inline]
    pub(crate) fn ring_send(&mut self, last: *const u8, lone: Option<(u32, bool)>) {
        let bf = match lone {
            Some((bbs, in_place)) => self.bf_blocks(bbs, in_place),
            None => 0,
        };
        // The generic path moved the head: the fast path rechecks room first.
        self.close_gate();
        self.ring_sq(last, self.cur_post, bf);
    }

    /// Safe layer: the checks every send WR needs (device alive, QP in RTS).
    #[inline(always)]
    pub(crate) fn check_can_send(&self) -> Result<()> {
        self.ctx.check_alive()?;
        if !can_send(self.state) {
            return Err(InvalidInput::QpState { state: self.state }.into());
        }
        Ok(())
    }

    /// Safe layer, step 1: checks a send WR (state, limits) and returns its WQEBB count.
    #[inline]
    pub(crate) fn check_send(&self, op: &SendOp, data: Data<'_>) -> Result<u32> {
        self.check_can_send()?;
        self.send_wqe_bbs(op, data)
    }

    /// Safe layer, single RDMA WRITE / READ with one SGE, the common case: the region the
    /// previous generic post named, no other region held for WRs (nothing to sweep). `id` is
    /// the region's [`crate::verbs::region_id`]; `None` (nothing done) when it is not that
    /// region, and the caller takes the general path.
    ///
    /// The region passed the context check when its binding was made (`last_mr`), so the
    /// post is an identity compare, the bounds and access checks, the gate, the stamp and the
    /// one-block WQE of [`QueuePair::post_write`].
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn post_one_sge_last(
        &mut self,
        opc: u8,
        wr_id: u64,
        id: *const (),
        offset: u64,
        len: u32,
        remote: Remote,
        flags: SendFlags,
    ) -> Option<Result<()>> {
        if !ptr::eq(id, self.fast_mr) {
            return None;
        }
        // SAFETY: `id` is `fast_mr`, not null: `Arc::as_ptr` of the region the last binding
        // holds, alive while this `&mut self` keeps the binding from going.
        let mr = unsafe { &*(id as *const MrInner<H>) };
        match offset.checked_add(len as u64) {
            Some(end) if end <= mr.len => {}
            _ => return None,
        }
        if opc == wqe::opcode::RDMA_READ && !mr.access.contains(Access::LOCAL_WRITE) {
            return None;
        }
        let head = self.sq_wr_head;
        if let Err(e) = self.gate(head) {
            return Some(Err(e));
        }
        // The stamp of `bindings[last_binding]` (see `last_stamp`).
        self.last_stamp = head.wrapping_add(1);
        let addr = mr.iova + offset;
        self.write_one_sge(head, opc, wr_id, addr, len, mr.key_be, remote, flags);
        Some(Ok(()))
    }

    /// Safe layer, single RDMA WRITE / READ with one SGE of region `mr` (bounds and access
    /// checked by the caller), the general case: the context check, a sweep, the gate, then
    /// the region's binding (looked up after anything that could sweep, so a fresh binding
    /// cannot be released before it is stamped), then the WQE.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn post_one_sge_mr(
        &mut self,
        opc: u8,
        wr_id: u64,
        mr: &Arc<MrInner<H>>,
        offset: u64,
        len: u32,
        remote: Remote,
        flags: SendFlags,
    ) -> Result<()> {
        if !Arc::ptr_eq(&mr.pd.ctx, &self.ctx) {
            return Err(InvalidInput::ForeignObject.into());
        }
        self.sweep();
        let head = self.sq_wr_head;
        self.gate(head)?;
        let i = self.binding_for(mr);
        self.stamp_sq(i);
        let addr = mr.iova + offset;
        self.write_one_sge(head, opc, wr_id, addr, len, mr.key_be, remote, flags);
        Ok(())
    }

    /// Raw receive post: checks every WR first, writes them, updates the receive doorbell
    /// record once.
    ///
    /// # Safety
    /// As [`QueuePair::post_send_raw`].
    pub unsafe fn post_recv_raw(&mut self, wrs: &[RawRecvWr<'_>]) -> Result<()> {
        self.check_recv(
            wrs.len(),
            wrs.iter().map(|w| w.sges.len()).max().unwrap_or(0),
        )?;
        {
            let mrs = self.ctx.mrs.read();
            for w in wrs {
                for g in w.sges {
                    crate::verbs::check_lkey(&mrs, g, true)?;
                }
            }
        }
        for w in wrs {
            self.write_recv(w.wr_id, w.sges);
        }
        self.ring_rq();
        Ok(())
    }

    /// How many more receive WRs fit (after a sweep of completed ones' regions).
    pub(crate) fn rq_room(&mut self) -> usize {
        self.sweep();
        let used = self
            .rq_head
            .wrapping_sub(self.shared.rq_tail.load(Ordering::Acquire));
        (self.lay.rq_wqe_cnt as usize).saturating_sub(used as usize)
    }

    /// How many more send WRs fit (what [`QueuePair::sq_room`] allows).
    pub(crate) fn sq_room_count(&self) -> usize {
        let wr_tail = self.shared.sq_wr_tail.load(Ordering::Acquire);
        let outstanding = self.sq_wr_head.wrapping_sub(wr_tail) as usize;
        (self.lay.caps.max_send_wr as usize).saturating_sub(outstanding)
    }

    pub(crate) fn check_recv(&mut self, n: usize, max_sges: usize) -> Result<()> {
        self.ctx.check_alive()?;
        // ERR too: the device completes them with WR_FLUSH_ERR (IB spec, QP Error state;
        // Linux core/verbs.c __ib_drain_rq moves the QP to ERR, posts, and waits for that
        // flush).
        self.check_state(&[
            qp::state::INIT,
            qp::state::RTR,
            qp::state::RTS,
            qp::state::ERR,
        ])?;
        if self.lay.rq_wqe_cnt == 0 {
            return Err(InvalidInput::QueueFull.into());
        }
        if max_sges > self.lay.caps.max_recv_sge as usize {
            return Err(InvalidInput::TooManySge {
                given: max_sges,
                max: self.lay.caps.max_recv_sge as usize,
            }
            .into());
        }
        self.sweep();
        let used = self
            .rq_head
            .wrapping_sub(self.shared.rq_tail.load(Ordering::Acquire));
        if used as usize + n > self.lay.rq_wqe_cnt as usize {
            return Err(InvalidInput::QueueFull.into());
        }
        Ok(())
    }

    pub(crate) fn write_recv(&mut self, wr_id: u64, sges: &[RawSge]) -> usize {
        let cnt = self.lay.rq_wqe_cnt;
        let idx = (self.rq_head & (cnt - 1)) as usize;
        let stride = 1usize << self.lay.rq_stride_shift;
        let max = stride / 16;
        // SAFETY: idx < cnt and the RQ occupies [0, cnt << stride_shift) of the buffer.
        let base = unsafe { self.ring.add(idx << self.lay.rq_stride_shift) };
        let mut k = 0;
        // Zero-length entries are left out (rdma-core qp.c mlx5_post_recv: `if
        // (unlikely(!wr->sg_list[i].length)) continue;`): a data segment's byte_count of 0
        // does not mean "empty" to the device (the model reads it as 2^31 bytes).
        for g in sges.iter().filter(|g| g.len != 0).take(max) {
            // SAFETY: k < max data segments of 16 bytes fit the stride.
            unsafe {
                let d = base.add(k * 16);
                put32(d, g.len);
                put32(d.add(4), g.lkey);
                put64(d.add(8), g.addr);
            }
            k += 1;
        }
        if k < max {
            // Terminate a short scatter list (rdma-core qp.c:3797, MLX5_INVALID_LKEY).
            // SAFETY: k < max, inside the stride.
            unsafe {
                let d = base.add(k * 16);
                put32(d, 0);
                put32(d.add(4), wqe::INVALID_LKEY);
                put64(d.add(8), 0);
            }
        }
        self.shared.rq_wrid[idx].store(wr_id, Ordering::Relaxed);
        self.rq_head = self.rq_head.wrapping_add(1);
        idx
    }

    pub(crate) fn ring_rq(&mut self) {
        let hal = &self.ctx.hal;
        hal.dma_wmb();
        self.shared.rq_head.store(self.rq_head, Ordering::Release);
        // SAFETY: dword 0 of the doorbell record is the receive counter.
        unsafe {
            ptr::write_volatile(
                (self.dbrec as *mut u32).add(qp_db::RCV_DBR),
                (self.rq_head & 0xffff).to_be(),
            )
        };
    }

    /// Destroys the QP now (dropping it does the same, ignoring errors).
    pub fn destroy(mut self) -> Result<()> {
        self.destroy_inner()
    }

    fn destroy_inner(&mut self) -> Result<()> {
        if self.destroyed {
            return Ok(());
        }
        self.destroyed = true;
        let mut c = CmdBuf::new(opcode::DESTROY_QP, 0, destroy_qp_in::BYTES);
        c.set(destroy_qp_in::QPN, self.qpn);
        let mut out = [0u8; destroy_qp_out::BYTES];
        let r = self.ctx.exec(&c, &mut out);
        if r.is_ok() {
            // Its CQEs go too (rdma-core verbs.c mlx5_destroy_qp: __mlx5_cq_clean on both
            // CQs); each CQ's poller drops the QP from its list once they are gone.
            self.shared
                .retired
                .store(true, core::sync::atomic::Ordering::Release);
            self.clean_cqs();
        } else {
            for cq in [&self.scq, &self.rcq] {
                cq.detach(&self.shared);
            }
        }
        if let Err(e) = r {
            // The device may still access the buffers and the regions WRs named: keep them.
            // A garbled or missing reply: quarantined (counted, the context needs a reset).
            // A firmware status: the destroy did not happen and the QP lives on with its
            // buffers, which are then never freed either.
            let bufs = [self.buf.take(), self.db.take()].into_iter().flatten();
            if e.device_may_hold() {
                self.ctx.release_after(&e, bufs);
            } else {
                bufs.for_each(core::mem::forget);
            }
            core::mem::forget(core::mem::take(&mut self.bindings));
            return Err(e);
        }
        let hal = &self.ctx.hal;
        let uar = self.uar.index;
        let _ = self.ctx.with_dev(|d| d.dealloc_uar(hal, uar));
        self.bindings.clear();
        self.last_mr = ptr::null();
        self.fast_mr = ptr::null();
        self.auto_live = 0;
        r
    }
}

impl<H: Hal> Drop for QueuePair<H> {
    fn drop(&mut self) {
        let _ = self.destroy_inner();
    }
}

/// The 8-byte send doorbell: the first 8 bytes of the last WQE's ctrl segment as one 64-bit
/// store (rdma-core qp.c `post_send_db`, `mmio_write64_be`). Out of line: a lone small WQE
/// goes through BlueFlame, so this serves batches and devices without BlueFlame.
///
/// # Safety
/// `last` points to the first block of a WQE in the send queue.
#[cold]
#[inline(never)]
unsafe fn ring_db64<H: Hal>(hal: &H, off: usize, last: *const u8) {
    let mut b = [0u8; 8];
    // SAFETY: the first 8 bytes of the ctrl segment, which always sits whole in the WQE's
    // first block (only later blocks wrap).
    unsafe { ptr::copy_nonoverlapping(last, b.as_mut_ptr(), 8) };
    hal.mmio_write64(off, b);
}

fn ilog2_ceil(v: u32) -> u32 {
    if v <= 1 {
        0
    } else {
        32 - (v - 1).leading_zeros()
    }
}

/// Whether send WRs may be posted in `state`: RTS, and ERR, where the device completes them
/// with WR_FLUSH_ERR (IB spec, QP Error state: work requests posted in it complete in error;
/// Linux core/verbs.c `__ib_drain_sq` moves the QP to ERR, posts, and waits for that flush).
#[inline(always)]
fn can_send(state: u8) -> bool {
    state == qp::state::RTS || state == qp::state::ERR
}

/// `qpc.log_ack_req_freq` as Linux sets it on every transition (ib/qp.c
/// `__mlx5_ib_modify_qp`: `MLX5_IB_ACK_REQ_FREQ` = 8).
const ACK_REQ_FREQ: u32 = 8;

/// `log_sra_max` / `log_rra_max` for `n` outstanding RDMA READs / atomics: rounded up to a
/// power of two, as Linux does since commit 78ed28e08e74 ("RDMA/mlx5: Round
/// max_rd_atomic/max_dest_rd_atomic up instead of down": `fls(n - 1)`); 0 stays 0. A request
/// above the device's `2^log_max` is refused (Linux ib/qp.c `validate_rd_atomic`, "invalid
/// max_rd_atomic value"), never capped.
fn log_rd_atomic(n: u8, log_max: u8) -> Result<u32> {
    let max = 1u32 << (log_max as u32).min(31);
    if n as u32 > max {
        return Err(InvalidInput::RdAtomic { requested: n, max }.into());
    }
    Ok(ilog2_ceil(n as u32))
}

/// Linux ib/qp.c mlx5_set_path: "sgid_index (%u) too large" against the port's GID table.
fn check_sgid_index(caps: &crate::caps::Caps, index: u8) -> Result<()> {
    if index as u32 >= caps.gid_table_len() {
        return Err(InvalidInput::GidIndex.into());
    }
    Ok(())
}

/// The remote end of a connection, checked before any command: an RC QP connects to neither
/// special QP (0 is SMI, 1 is GSI) nor to a QPN wider than 24 bits, and needs a GID and a
/// MAC to address its packets (the model refuses such a path too, as `NO_ADDRESS_PATH`).
fn check_remote(remote: &QpEndpoint) -> Result<()> {
    if remote.qpn < 2 || remote.qpn > 0xff_ffff {
        return Err(InvalidInput::RemoteQpn(remote.qpn).into());
    }
    if remote.gid == [0; 16] || remote.mac == [0; 6] {
        return Err(InvalidInput::RemoteAddress.into());
    }
    Ok(())
}

/// `atomic_caps.atomic_operations` bits (Linux include/linux/mlx5/driver.h
/// `MLX5_ATOMIC_OPS_*`).
mod atomic_ops {
    pub const CMP_SWAP: u16 = 1 << 0;
    pub const FETCH_ADD: u16 = 1 << 1;
    pub const EXTENDED_CMP_SWAP: u16 = 1 << 2;
    pub const EXTENDED_FETCH_ADD: u16 = 1 << 3;
}

/// `qpc.atomic_mode` values (Linux include/linux/mlx5/driver.h `MLX5_ATOMIC_MODE_*`):
/// IB-compliant 8-byte atomics, and "up to 8 bytes" (larger sizes are `log2(bytes)`).
mod atomic_mode_val {
    pub const IB_COMP: u32 = 1;
    pub const UP_TO_8B: u32 = 3;
}

/// The `atomic_mode` a QP with remote atomic access gets, from the device's atomic caps, or
/// `None` when it has none (Linux ib/qp.c `get_atomic_mode` and `atomic_size_to_mode`).
fn atomic_mode(caps: &crate::caps::Caps) -> Option<u32> {
    use atomic_ops::*;
    if !caps.atomic {
        return None;
    }
    let ops = caps.atomic_operations;
    let mut mode = None;
    if ops & (EXTENDED_CMP_SWAP | EXTENDED_FETCH_ADD) != 0 {
        // atomic_size_to_mode: sizes up to 256 bytes; below 16 bytes the 8-byte mode.
        let sizes = caps.atomic_size_qp & 0x1ff;
        if sizes != 0 {
            let log = 15 - sizes.leading_zeros();
            mode = Some(if log > 3 {
                log
            } else {
                atomic_mode_val::UP_TO_8B
            });
        }
    }
    if mode.is_none() && ops & CMP_SWAP != 0 && ops & FETCH_ADD != 0 {
        mode = Some(atomic_mode_val::IB_COMP);
    }
    mode
}

/// RoCE v2 UDP source port of a connection: the flow label of the QP pair folded into
/// 0xC000..0xFFFF (Linux include/rdma/ib_verbs.h `rdma_calc_flow_label`,
/// `rdma_flow_label_to_udp_sport`; ib/qp.c `mlx5_set_path_udp_sport`).
pub fn udp_sport(lqpn: u32, rqpn: u32) -> u16 {
    let mut v = lqpn as u64 * rqpn as u64;
    v ^= v >> 20;
    v ^= v >> 40;
    let fl = (v & 0xf_ffff) as u32;
    let low = (fl & 0x3fff) ^ ((fl & 0xfc000) >> 14);
    (low | 0xc000) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps() -> crate::caps::Caps {
        crate::caps::Caps {
            log_max_qp_sz: 15,
            max_wqe_sz_sq: 1024,
            max_wqe_sz_rq: 512,
            ..Default::default()
        }
    }

    #[test]
    fn layout_rounds_per_prm() {
        let l = layout(
            &QpCaps {
                max_send_wr: 10,
                max_recv_wr: 10,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 16,
            },
            &caps(),
        )
        .unwrap();
        // 48 + max(16, align(16 + 4, 16) = 32) = 80 -> 128 bytes = 2 WQEBBs; 20 -> 32 blocks.
        assert_eq!(l.sq_max_bbs, 2);
        assert_eq!(l.sq_wqe_cnt, 32);
        assert_eq!(l.rq_wqe_cnt, 16);
        assert_eq!(l.rq_stride_shift, 4);
        assert_eq!(l.sq_offset, 16 * 16);
        assert_eq!(l.caps.max_send_wr, 16);
        // The WQE less ctrl + raddr + atomic and the inline header (rdma-core verbs.c
        // mlx5_calc_sq_size).
        assert_eq!(l.caps.max_inline_data, 128 - 48 - 4);
        assert!(layout(
            &QpCaps {
                max_send_sge: 100,
                ..Default::default()
            },
            &caps()
        )
        .is_err());
        assert!(layout(
            &QpCaps {
                max_send_wr: 1 << 20,
                ..Default::default()
            },
            &caps()
        )
        .is_err());
    }

    #[test]
    fn absurd_wr_counts_are_refused_not_wrapped() {
        for (send, recv) in [
            (u32::MAX, 1),
            (1, u32::MAX),
            ((1 << 31) + 1, 1),
            (1, (1 << 31) + 1),
            (1 << 31, 0),
            (1 << 16, 0),
        ] {
            let r = layout(
                &QpCaps {
                    max_send_wr: send,
                    max_recv_wr: recv,
                    ..Default::default()
                },
                &caps(),
            );
            assert_eq!(
                r.err(),
                Some(Error::Invalid(InvalidInput::QpCaps)),
                "send {send} recv {recv}"
            );
        }
        // The largest legal queues still fit (2^15 blocks, 16-bit counters).
        let l = layout(
            &QpCaps {
                max_send_wr: 1 << 15,
                max_recv_wr: 1 << 15,
                max_inline_data: 0,
                ..Default::default()
            },
            &caps(),
        )
        .unwrap();
        assert_eq!((l.sq_wqe_cnt, l.rq_wqe_cnt), (1 << 15, 1 << 15));
    }

    #[test]
    fn the_receive_queue_is_at_least_one_basic_block() {
        for (wr, sge, cnt) in [(1, 1, 4), (2, 1, 4), (1, 2, 2), (1, 4, 1), (5, 1, 8)] {
            let l = layout(
                &QpCaps {
                    max_recv_wr: wr,
                    max_recv_sge: sge,
                    ..Default::default()
                },
                &caps(),
            )
            .unwrap();
            assert_eq!(l.rq_wqe_cnt, cnt, "{wr} WRs of {sge} SGEs");
            assert_eq!(l.sq_offset % 64, 0);
            assert!(l.sq_offset >= 64);
            assert_eq!(l.caps.max_recv_wr, cnt);
        }
    }

    #[test]
    fn the_largest_inline_send_fits_the_ds_field() {
        for inline in [0, 16, 60, 64, 200, 400, 900, 972] {
            let l = layout(
                &QpCaps {
                    max_inline_data: inline,
                    ..Default::default()
                },
                &caps(),
            )
            .unwrap();
            let max = l.caps.max_inline_data;
            assert!(max >= inline);
            // RDMA WRITE (ctrl + raddr) and SEND of max_inline bytes.
            let write_ds = 2 + (max + 4).div_ceil(16);
            assert!(write_ds <= 63, "inline {inline}: ds {write_ds}");
            assert!(wqe::wqebbs(write_ds) <= l.sq_max_bbs);
        }
        // 973 bytes need more than a 1024-byte WQE.
        assert!(layout(
            &QpCaps {
                max_inline_data: 973,
                ..Default::default()
            },
            &caps()
        )
        .is_err());
    }

    #[test]
    fn rd_atomic_rounds_up_and_refuses_above_the_device() {
        assert_eq!(log_rd_atomic(0, 4), Ok(0));
        assert_eq!(log_rd_atomic(1, 4), Ok(0));
        assert_eq!(log_rd_atomic(3, 4), Ok(2));
        assert_eq!(log_rd_atomic(16, 4), Ok(4));
        assert_eq!(
            log_rd_atomic(17, 4),
            Err(Error::Invalid(InvalidInput::RdAtomic {
                requested: 17,
                max: 16
            }))
        );
    }

    #[test]
    fn atomic_mode_follows_linux_get_atomic_mode() {
        let mut c = caps();
        assert_eq!(atomic_mode(&c), None, "no atomic cap");
        c.atomic = true;
        c.atomic_operations = atomic_ops::CMP_SWAP | atomic_ops::FETCH_ADD;
        c.atomic_size_qp = 1 << 3;
        assert_eq!(atomic_mode(&c), Some(atomic_mode_val::IB_COMP));
        c.atomic_operations |= atomic_ops::EXTENDED_CMP_SWAP;
        assert_eq!(atomic_mode(&c), Some(atomic_mode_val::UP_TO_8B));
        c.atomic_size_qp = (1 << 3) | (1 << 5);
        assert_eq!(atomic_mode(&c), Some(5), "up to 32 bytes");
        c.atomic_operations = atomic_ops::FETCH_ADD;
        assert_eq!(atomic_mode(&c), None, "fetch-add alone");
    }

    /// A send queue of `cnt` blocks and `max_wr` WRs, with its counters at `start`.
    fn send_state(cnt: u32, max_wr: u32, start: u32) -> WqShared {
        WqShared {
            qpn: 5,
            qpn_key: WqShared::key(5),
            sq: (0..cnt)
                .map(|_| SqSlot {
                    wrid: AtomicU64::new(0),
                    meta: AtomicU64::new(0),
                })
                .collect(),
            sq_mask: cnt - 1,
            sq_max_wr: max_wr,
            sq_wr_tail: AtomicU32::new(start),
            sq_last: AtomicU32::new(start.wrapping_sub(1)),
            rq_wrid: alloc::vec![AtomicU64::new(0)],
            rq_mask: 0,
            rq_head: AtomicU32::new(0),
            rq_tail: AtomicU32::new(0),
            stale: spin::Mutex::new(Vec::new()),
            retired: core::sync::atomic::AtomicBool::new(false),
        }
    }

    /// What the poster records for a WQE of `bbs` blocks (`QueuePair::set_slot`).
    fn record(q: &WqShared, head: &mut u32, cur: &mut u16, wr_id: u64, bbs: u16) -> u16 {
        let start = *cur;
        let sl = &q.sq[(start as u32 & q.sq_mask) as usize];
        *head = head.wrapping_add(1);
        sl.wrid.store(wr_id, Ordering::Relaxed);
        sl.meta.store(slot_meta(*head, start), Ordering::Release);
        *cur = cur.wrapping_add(bbs);
        start
    }

    #[test]
    fn send_completions_are_checked_against_the_ring() {
        let q = send_state(8, 4, 0);
        let (mut head, mut cur) = (0, 0);
        let w1 = record(&q, &mut head, &mut cur, 11, 1);
        let w2 = record(&q, &mut head, &mut cur, 12, 2);
        let w3 = record(&q, &mut head, &mut cur, 13, 1);
        // The next WR (the one-compare case).
        assert_eq!(q.complete_send(w1), Some(11));
        assert_eq!(q.sq_wr_tail.load(Ordering::Relaxed), 1);
        // A duplicate, a block inside a WQE, a WQE not posted: refused, nothing moves.
        assert_eq!(q.complete_send(w1), None);
        assert_eq!(q.complete_send(w2 + 1), None);
        assert_eq!(q.complete_send(cur), None);
        assert_eq!(q.sq_wr_tail.load(Ordering::Relaxed), 1);
        // A completion that covers an unsignaled WR (2) takes the full check.
        assert_eq!(q.complete_send(w3), Some(13));
        assert_eq!(q.sq_wr_tail.load(Ordering::Relaxed), 3);
        assert_eq!(q.complete_send(w2), None, "already covered");
        // A stale slot of an earlier pass over the ring.
        let mut c = q.cursor();
        let w4 = record(&q, &mut head, &mut cur, 14, 1);
        assert_eq!(c.complete(&q, w4.wrapping_add(8)), None);
        assert_eq!(c.complete(&q, w4), Some(14));
        assert_eq!(c.tail(), 4);
    }

    #[test]
    fn send_completions_count_on_across_the_wr_counter_wrap() {
        let start = u32::MAX - 1;
        let q = send_state(8, 4, start);
        let (mut head, mut cur) = (start, 0xfffe_u16);
        let mut c = q.cursor();
        for id in 0..6u64 {
            let w = record(&q, &mut head, &mut cur, id, 1);
            assert_eq!(c.complete(&q, w), Some(id), "WR {id}");
        }
        assert_eq!(c.tail(), start.wrapping_add(6));
        q.store_tail(&c);
        assert_eq!(q.sq_wr_tail.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn udp_sport_is_in_the_rocev2_range() {
        for (a, b) in [(1, 2), (0x123, 0x456), (0xff_ffff, 0xff_fffe)] {
            assert!(udp_sport(a, b) >= 0xc000);
        }
    }
}
