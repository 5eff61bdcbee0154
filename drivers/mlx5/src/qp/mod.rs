//! Queue pairs (RC, UD, the GSI QP): CREATE_QP, the state transitions, send and receive WQEs,
//! doorbells.
//!
//! Sources: rdma-core providers/mlx5/qp.c (`_mlx5_post_send`, `mlx5_post_recv`,
//! `post_send_db`, `mlx5_bf_copy`), verbs.c (`mlx5_calc_send_wqe`, `mlx5_calc_rwq_size`),
//! Linux ib/qp.c (`create_qp_common`, `__mlx5_ib_modify_qp`, `mlx5_set_path`); layouts in
//! [`mlx5_prm::wqe`].
//!
//! Buffer layout (Linux ib/qp.c `_create_kernel_qp`): the receive queue at offset 0, the send
//! queue right after; one contiguous buffer, one `pas` entry. The doorbell record is two
//! big-endian dwords: `[0]` receive counter, `[1]` send counter in WQEBBs.
//!
//! Barrier discipline (rdma-core `post_send_db`): WQEs, `dma_wmb`, doorbell record,
//! `dma_wmb`, then the MMIO doorbell (BlueFlame copy of a single small WQE, else the first 8
//! bytes of the last WQE's control segment as one 64-bit store), then `wc_flush`, and the
//! BlueFlame offset alternates between the two halves of the register (rdma-core
//! `post_send_db`, Linux ib/wr.c `mlx5r_ring_db`).
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
use core::sync::atomic::{AtomicU64, Ordering};

use mlx5_prm::{
    ads, create_qp_in, create_qp_out, destroy_qp_in, destroy_qp_out, opcode, qp, qp_2err_in,
    qp_2err_out, qp_db, qpc, query_qp_in, query_qp_out, rst2init_qp_in, rst2init_qp_out, uar, wqe,
};

use crate::cmd::{get, CmdBuf};
use crate::context::{CtxInner, MrTable};
use crate::cq::{CompletionQueue, CqShared};
use crate::error::{Error, InvalidInput, Result};
use crate::hal::{DmaMem, Hal};
use crate::mr::Access;
use crate::pd::PdInner;
use crate::region::MrInner;
use crate::uar::Uar;

/// The send-queue overhead of the largest RC WQE without data: ctrl + raddr + atomic
/// (rdma-core verbs.c `sq_overhead` for IBV_QPT_RC).
const SQ_OVERHEAD: usize = wqe::ctrl_seg::SIZE + wqe::raddr_seg::SIZE + wqe::atomic_seg::SIZE;
/// The send-queue overhead of a memory-window WQE (rdma-core verbs.c `_sq_overhead`:
/// `mw_size` = ctrl + UMR ctrl + mkey context + max(KLM, 64)).
const MW_OVERHEAD: usize =
    wqe::ctrl_seg::SIZE + wqe::umr_ctrl_seg::SIZE + mlx5_prm::mkc::BYTES + 64;
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
    /// Room for memory-window WQEs (BIND_MW: ctrl, UMR ctrl, mkey context and 64 bytes of
    /// KLM, 192 bytes; LOCAL_INV): the send WQE size includes rdma-core verbs.c
    /// `_sq_overhead`'s `mw_size`, which rdma-core reserves on every RC QP. Here opt-in, so
    /// QPs that never bind keep their smaller WQEs ([`crate::mw`]).
    pub mw_bind: bool,
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
    /// `qpc.q_key`: a datagram QP's Q_Key (`ibv_qp_attr.qkey`).
    pub qkey: u32,
}

/// Path MTU (`enum ibv_mtu`, libibverbs verbs.h; the value qpc.mtu takes; Linux ib/qp.c
/// `__mlx5_ib_modify_qp`).
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
    /// The path's flow label (20 bits), which picks the RoCE v2 UDP source port; 0 (the
    /// default): the label of the QP pair, as Linux computes one for a path without (ib/qp.c
    /// `mlx5_set_path_udp_sport`). rdma_cm connections carry theirs in the REQ.
    pub flow_label: u32,
    /// The first PSN the QP sends, set at RTS (`ibv_qp_attr.sq_psn`; an rdma_cm connection's
    /// is the one the peer chose, cm.c `cm_init_qp_rts_attr`); `None` (the default): the QP's
    /// own random one, [`QueuePair::psn`]. Afterwards [`QueuePair::psn`] reports it.
    pub sq_psn: Option<u32>,
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
            flow_label: 0,
            sq_psn: None,
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
    /// SEND with invalidate (`IBV_WR_SEND_WITH_INV`, `MLX5_OPCODE_SEND_INVAL` with the rkey
    /// in the ctrl `imm`, rdma-core qp.c `send_ieth`): the responder invalidates `rkey` (a
    /// type 2 memory window bound to the responder QP) before the receive completes.
    SendWithInv {
        /// The remote key to invalidate.
        rkey: u32,
    },
    /// Local invalidate of a type 2 memory window bound through this QP (`IBV_WR_LOCAL_INV`:
    /// a UMR WQE, rdma-core qp.c `set_bind_wr` with an empty bind; [`crate::mw`]). No local
    /// data; the QP needs [`QpOptions::mw_bind`]. Completes as [`crate::WcOpcode::LocalInv`].
    LocalInv {
        /// The window's current rkey.
        rkey: u32,
    },
}

impl SendOp {
    /// The operation writes into its local SGEs (RDMA READ and the atomics: the local buffers
    /// need LOCAL_WRITE, and the data cannot be inline).
    pub(crate) fn writes_local(&self) -> bool {
        matches!(
            self,
            SendOp::Read { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }
        )
    }
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

/// Checks one raw SGE against the live MRs (raw layer).
pub(crate) fn check_lkey(mrs: &MrTable, g: &RawSge, write: bool) -> Result<()> {
    if g.len == 0 {
        return Ok(());
    }
    let m = mrs.get(g.lkey).ok_or(InvalidInput::BadLkey(g.lkey))?;
    let end = g
        .addr
        .checked_add(g.len as u64)
        .ok_or(InvalidInput::OutOfRange)?;
    if g.addr < m.iova || end > m.iova + m.len {
        return Err(InvalidInput::OutOfRange.into());
    }
    if write && !m.access.contains(Access::LOCAL_WRITE) {
        return Err(InvalidInput::LocalAccess.into());
    }
    Ok(())
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

/// A queue pair: RC, UD or the GSI QP.
pub struct QueuePair<H: Hal> {
    pub(crate) ctx: Arc<CtxInner<H>>,
    /// The Q counter set the QP is attached to ([`QueuePair::set_counter_set`]); held so the
    /// set is released only after the QP.
    counter: Option<Arc<crate::counters::CounterSetInner<H>>>,
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
    /// The completed binding that sweep kept back (the send posts' last region), or
    /// `usize::MAX`.
    swept_kept: usize,
    /// Send and receive WRs that must complete after the last sweep before a binding it
    /// left held can be free (`u32::MAX`: none held; 0: look at the next sweep).
    sweep_room: (u32, u32),
    /// Index of the binding the last generic post used (the common case hits it).
    last_binding: usize,
    /// The region of `bindings[last_binding]` (`Arc::as_ptr`), or null. Only an identity:
    /// while it is not null that binding holds the region, so no other region can have this
    /// address; it is cleared whenever that binding goes (`free_binding`, `destroy_inner`).
    /// The region passed the context check when the binding was made.
    last_mr: *const (),
    /// The send stamp of `bindings[last_binding]` while `last_mr` is set: the one-SGE generic
    /// post writes it here (one store) instead of into the binding; `flush_stamp` copies it
    /// there before anything reads the binding's stamp.
    last_stamp: u32,
    /// Index of the binding the last receive post used: receives name one region as a rule
    /// (their buffers), sends another, so each queue keeps its own.
    rq_last_binding: usize,
    /// The region of `bindings[rq_last_binding]` (`Arc::as_ptr`), or null: an identity
    /// like `last_mr`, cleared whenever that binding goes.
    rq_last_mr: *const (),
    destroyed: bool,
    /// The service type (RC, UD, GSI).
    service: Service,
    /// A datagram QP's Q_Key (what RST2INIT gives it); 0 for RC.
    qkey: u32,
}

// SAFETY: raw pointers point into `buf` / `db`, which the QP owns, and into `shared.sq`
// (atomics, kept alive by the QP's Arc); `last_mr` / `rq_last_mr` name a region
// one of the QP's bindings holds (an `Arc` of `Send + Sync` state); all access is through &mut self.
unsafe impl<H: Hal> Send for QueuePair<H> {}

/// A WQE's local data after validation.
#[derive(Clone, Copy)]
pub(crate) enum Data<'a> {
    Sges(&'a [RawSge]),
    Inline(&'a [u8]),
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
}

impl<H: Hal> Drop for QueuePair<H> {
    fn drop(&mut self) {
        let _ = self.destroy_inner();
    }
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
#[inline]
fn can_send(state: u8) -> bool {
    state == qp::state::RTS || state == qp::state::ERR
}

/// Field `f` of the QPC of CREATE_QP's input.
pub(super) fn cqpc(f: mlx5_prm::Field) -> mlx5_prm::Field {
    f.within(create_qp_in::QPC)
}

/// Field `f` of the QPC of a transition's input (RST2INIT .. RTS2RTS all have it at
/// `rst2init_qp_in`'s offset).
pub(super) fn mqpc(f: mlx5_prm::Field) -> mlx5_prm::Field {
    f.within(rst2init_qp_in::QPC)
}

/// Field `f` of the primary address path of a transition's QPC.
pub(super) fn mpath(f: mlx5_prm::Field) -> mlx5_prm::Field {
    mqpc(f.within(qpc::PRIMARY_ADDRESS_PATH))
}

/// RoCE v2 UDP source port of a connection: the flow label of the QP pair folded into
/// 0xC000..0xFFFF (Linux include/rdma/ib_verbs.h `rdma_calc_flow_label`,
/// `rdma_flow_label_to_udp_sport`; ib/qp.c `mlx5_set_path_udp_sport`).
pub fn udp_sport(lqpn: u32, rqpn: u32) -> u16 {
    udp_sport_of(0, lqpn, rqpn)
}

/// RoCE v2 UDP source port of a path with flow label `flow_label`: the QP pair's label when
/// it is 0 (Linux ib/qp.c `mlx5_set_path_udp_sport`).
pub(crate) fn udp_sport_of(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    let fl = match flow_label & 0xf_ffff {
        0 => {
            let mut v = lqpn as u64 * rqpn as u64;
            v ^= v >> 20;
            v ^= v >> 40;
            (v & 0xf_ffff) as u32
        }
        fl => fl,
    };
    crate::ah::flow_label_to_udp_sport(fl)
}

mod binding;
mod create;
mod gsi;
mod raw;
mod rc;
mod recv;
mod send;
mod state;
mod ud;

pub(crate) use crate::wq::{slot_meta, SqSlot, WqShared};
pub(crate) use binding::Binding;
pub use binding::{BoundMr, BoundSge};
use create::Layout;
pub(crate) use create::{create, create_datagram, create_fre};
pub use gsi::{GSI_QKEY, GSI_QPN};
pub(crate) use rc::{
    local_inv_body, umr_ctrl, wc_opcode, LOCAL_INV_DS, WC_OP_BIND, WC_OP_LOCAL_INV,
};
use send::{ctrl_tpl, put32, put64};
pub(crate) use ud::{datagram_seg, Service};
pub use ud::{grh_ipv4_source, UdDest, GRH_BYTES};

#[cfg(test)]
mod tests;
