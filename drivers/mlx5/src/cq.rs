//! Completion queues: CREATE_CQ / DESTROY_CQ / MODIFY_CQ (resize), CQE ownership and
//! parsing, the consumer-index doorbell record, the arm doorbell and completion events
//! ([`CompletionChannel`]).
//!
//! Polling follows rdma-core providers/mlx5/cq.c: check the owner bit and opcode of the next
//! CQE (`is_sw_owned`, facts cqe_ownership), then a read barrier, then read the CQE; the
//! consumer index is written to the doorbell record once per poll call
//! (`mlx5_update_cons_index`). CQEs start as `op_own = 0xf0` (facts trap 25).

use alloc::collections::VecDeque;
use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;
use core::ptr;
use core::sync::atomic::{AtomicU32, Ordering};
use core::time::Duration;

use mlx5_prm::{
    cmd_hca_cap, cq_db, cq_modify, cqc, cqe, create_cq_in, create_cq_out, destroy_cq_in,
    destroy_cq_out, modify_cq_in, modify_cq_out, opcode, uar, wqe,
};

use crate::cmd::{get, CmdBuf};
use crate::error::{Error, InvalidInput, Refused, Result};
use crate::hal::{DmaMem, Hal};
use crate::qp::{SendCursor, WqShared};
use crate::verbs::CtxInner;

/// Completion status (`ibv_wc_status`, mapped from the error CQE syndrome as Linux
/// ib/cq.c `mlx5_handle_error_cqe` and rdma-core cq.c `mlx5_handle_error_cqe` do).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[repr(u8)]
pub enum WcStatus {
    /// Success.
    Success,
    /// `IBV_WC_LOC_LEN_ERR`.
    LocLenErr,
    /// `IBV_WC_LOC_QP_OP_ERR`.
    LocQpOpErr,
    /// `IBV_WC_LOC_PROT_ERR`.
    LocProtErr,
    /// `IBV_WC_WR_FLUSH_ERR`.
    WrFlushErr,
    /// `IBV_WC_MW_BIND_ERR`.
    MwBindErr,
    /// `IBV_WC_BAD_RESP_ERR`.
    BadRespErr,
    /// `IBV_WC_LOC_ACCESS_ERR`.
    LocAccessErr,
    /// `IBV_WC_REM_INV_REQ_ERR`.
    RemInvReqErr,
    /// `IBV_WC_REM_ACCESS_ERR`.
    RemAccessErr,
    /// `IBV_WC_REM_OP_ERR`.
    RemOpErr,
    /// `IBV_WC_RETRY_EXC_ERR`.
    RetryExcErr,
    /// `IBV_WC_RNR_RETRY_EXC_ERR`.
    RnrRetryExcErr,
    /// `IBV_WC_REM_ABORT_ERR`.
    RemAbortErr,
    /// `IBV_WC_GENERAL_ERR`: an error syndrome the PRM does not name.
    GeneralErr,
    /// The driver could not make sense of the CQE (unknown opcode, a QP not attached to this
    /// CQ, a WQE counter that names no outstanding WQE, e.g. a duplicate): the CQE was
    /// consumed and reported, nothing else was touched.
    BadCqe,
}

impl WcStatus {
    fn from_syndrome(s: u8) -> WcStatus {
        use cqe::syndrome as sy;
        match s {
            sy::LOCAL_LENGTH_ERR => WcStatus::LocLenErr,
            sy::LOCAL_QP_OP_ERR => WcStatus::LocQpOpErr,
            sy::LOCAL_PROT_ERR => WcStatus::LocProtErr,
            sy::WR_FLUSH_ERR => WcStatus::WrFlushErr,
            sy::MW_BIND_ERR => WcStatus::MwBindErr,
            sy::BAD_RESP_ERR => WcStatus::BadRespErr,
            sy::LOCAL_ACCESS_ERR => WcStatus::LocAccessErr,
            sy::REMOTE_INVAL_REQ_ERR => WcStatus::RemInvReqErr,
            sy::REMOTE_ACCESS_ERR => WcStatus::RemAccessErr,
            sy::REMOTE_OP_ERR => WcStatus::RemOpErr,
            sy::TRANSPORT_RETRY_EXC_ERR => WcStatus::RetryExcErr,
            sy::RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExcErr,
            sy::REMOTE_ABORTED_ERR => WcStatus::RemAbortErr,
            _ => WcStatus::GeneralErr,
        }
    }
}

/// What completed (`ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[repr(u8)]
pub enum WcOpcode {
    /// SEND or SEND with immediate.
    Send,
    /// RDMA WRITE or RDMA WRITE with immediate.
    RdmaWrite,
    /// RDMA READ.
    RdmaRead,
    /// Atomic compare and swap.
    CompSwap,
    /// Atomic fetch and add.
    FetchAdd,
    /// A receive completed by a SEND.
    Recv,
    /// A receive completed by an RDMA WRITE with immediate.
    RecvRdmaWithImm,
    /// Unknown (error or garbage CQEs).
    Unknown,
    /// A memory window bound (`IBV_WC_BIND_MW`: a BIND_MW work request or the bind verb).
    BindMw,
    /// A local invalidate (`IBV_WC_LOCAL_INV`).
    LocalInv,
    /// A receive completed by a SEND with invalidate (`IBV_WC_RECV` with `IBV_WC_WITH_INV`):
    /// [`WorkCompletion::imm`] holds the invalidated rkey (ibv_wc's `imm_data` /
    /// `invalidated_rkey` union).
    RecvWithInv,
}

/// One work completion. `repr(C)`, with `status`, `opcode` and `vendor_err` adjacent so the
/// poller writes the three as one word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct WorkCompletion {
    /// The work request's id.
    pub wr_id: u64,
    /// Bytes transferred: defined for receives, RDMA READ and atomics (verbs leaves it
    /// undefined for SEND and RDMA WRITE completions; there it is the CQE's `byte_cnt`).
    pub byte_len: u32,
    /// The local QP number.
    pub qp_num: u32,
    /// Immediate data, when the sender attached some.
    pub imm: Option<u32>,
    /// Status.
    pub status: WcStatus,
    /// Opcode (meaningful when `status` is success).
    pub opcode: WcOpcode,
    /// Vendor syndrome of an error CQE.
    pub vendor_err: u8,
}

/// `status`, `opcode` and `vendor_err` of a completion and the padding byte after them, as
/// they lie in memory: one 4-byte store.
#[derive(Clone, Copy)]
struct WcHead(u32);

// The layout `WcHead::write` relies on: the three one-byte fields at a 4-byte aligned offset,
// then only padding to the end.
const _: () = {
    use core::mem::{offset_of, size_of};
    let o = offset_of!(WorkCompletion, status);
    assert!(o % 4 == 0 && size_of::<WcStatus>() == 1 && size_of::<WcOpcode>() == 1);
    assert!(offset_of!(WorkCompletion, opcode) == o + 1);
    assert!(offset_of!(WorkCompletion, vendor_err) == o + 2);
    assert!(size_of::<WorkCompletion>() >= o + 4);
    assert!(offset_of!(WorkCompletion, imm) + size_of::<Option<u32>>() <= o);
};

impl WcHead {
    const fn new(status: WcStatus, opcode: WcOpcode, vendor_err: u8) -> WcHead {
        WcHead(u32::from_ne_bytes([
            status as u8,
            opcode as u8,
            vendor_err,
            0,
        ]))
    }

    /// A successful completion with this head.
    #[inline(always)]
    fn write(self, w: &mut WorkCompletion, wr_id: u64, byte_len: u32, qp_num: u32) {
        w.wr_id = wr_id;
        w.byte_len = byte_len;
        w.qp_num = qp_num;
        w.imm = None;
        // SAFETY: the 4 bytes at `status` are `status`, `opcode`, `vendor_err` and padding
        // (checked above), inside `*w` and 4-byte aligned; the bytes written are a valid
        // `WcStatus` and `WcOpcode` (both `repr(u8)`, from `WcHead::new`).
        unsafe {
            let p = (w as *mut WorkCompletion as *mut u8)
                .add(core::mem::offset_of!(WorkCompletion, status));
            ptr::write(p as *mut u32, self.0);
        }
    }
}

impl Default for WorkCompletion {
    fn default() -> Self {
        WorkCompletion {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Unknown,
            byte_len: 0,
            imm: None,
            qp_num: 0,
            vendor_err: 0,
        }
    }
}

/// A CQ's completion-event state, shared by the CQ, the event queue's routing table and the
/// CQ's [`CompletionChannel`].
pub(crate) struct CqNotify {
    cqn: u32,
    /// rdma-core `mlx5_cq.arm_sn`: the sequence number the arm doorbell carries; advanced once
    /// per completion event (rdma-core cq.c `mlx5_cq_event`, which libibverbs
    /// `ibv_get_cq_event` calls), never by arming.
    arm_sn: AtomicU32,
    /// Events handed out by the channel and not yet acknowledged ([`CompletionQueue::ack_events`]).
    unacked: AtomicU32,
    channel: Option<Arc<ChannelShared>>,
}

impl CqNotify {
    /// A completion event of this CQ was consumed from the EQ: queued on the channel (its
    /// sequence number advances when the channel hands it out), or, without a channel,
    /// delivered to the event log by the caller (false; the sequence number advances now).
    pub(crate) fn deliver(self: &Arc<Self>) -> bool {
        match &self.channel {
            Some(c) => {
                c.pending.lock().push_back(Arc::downgrade(self));
                true
            }
            None => {
                self.arm_sn.fetch_add(1, Ordering::AcqRel);
                false
            }
        }
    }
}

/// A completion channel's queue of completion events.
pub(crate) struct ChannelShared {
    pending: spin::Mutex<VecDeque<Weak<CqNotify>>>,
}

/// A completion channel (`ibv_comp_channel`): the completion events of the CQs created on it
/// ([`crate::Context::create_cq_with_channel`]), waited for with a deadline. The unikernel has
/// no interrupts: [`CompletionChannel::get_cq_event`] polls the event queue.
pub struct CompletionChannel<H: Hal> {
    ctx: Arc<CtxInner<H>>,
    pub(crate) shared: Arc<ChannelShared>,
}

/// A completion event (`ibv_get_cq_event`): the CQ it is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqEvent {
    /// The CQ number ([`CompletionQueue::cqn`]).
    pub cqn: u32,
}

impl<H: Hal> CompletionChannel<H> {
    pub(crate) fn new(ctx: &Arc<CtxInner<H>>) -> Self {
        CompletionChannel {
            ctx: ctx.clone(),
            shared: Arc::new(ChannelShared {
                pending: spin::Mutex::new(VecDeque::new()),
            }),
        }
    }

    /// The next completion event without waiting (`None`: none yet). The event queue is
    /// serviced first. Each event counts as unacknowledged on its CQ until
    /// [`CompletionQueue::ack_events`] (`ibv_ack_cq_events`), and advances the CQ's arm
    /// sequence number (rdma-core `mlx5_cq_event`).
    pub fn try_get_cq_event(&self) -> Result<Option<CqEvent>> {
        if let Some(e) = self.pop() {
            return Ok(Some(e));
        }
        let ctx = &self.ctx;
        ctx.with_dev(|d| {
            d.cmd.check_health(&ctx.hal)?;
            d.service_events(&ctx.hal, false)
        })?;
        Ok(self.pop())
    }

    /// Waits up to `timeout` for the next completion event (`ibv_get_cq_event`); fails with
    /// [`Error::Timeout`] when none came. Arm the CQ first ([`CompletionQueue::req_notify_cq`]).
    pub fn get_cq_event(&self, timeout: Duration) -> Result<CqEvent> {
        let hal = &self.ctx.hal;
        let deadline = hal.now().saturating_add(timeout);
        loop {
            if let Some(e) = self.try_get_cq_event()? {
                return Ok(e);
            }
            if hal.now() >= deadline {
                return Err(Error::Timeout);
            }
            hal.relax();
        }
    }

    /// Events queued and not yet taken.
    pub fn pending(&self) -> usize {
        self.shared.pending.lock().len()
    }

    fn pop(&self) -> Option<CqEvent> {
        let mut q = self.shared.pending.lock();
        while let Some(w) = q.pop_front() {
            // A CQ destroyed since its event was queued: the event went with it.
            let Some(n) = w.upgrade() else { continue };
            n.unacked.fetch_add(1, Ordering::AcqRel);
            n.arm_sn.fetch_add(1, Ordering::AcqRel);
            return Some(CqEvent { cqn: n.cqn });
        }
        None
    }
}

/// The CQ as the device knows it: lives until the last QP attached to it is gone.
pub(crate) struct CqShared<H: Hal> {
    pub(crate) ctx: Arc<CtxInner<H>>,
    pub(crate) cqn: u32,
    /// Owned for the device's sake (the poller uses raw pointers into them); quarantined if
    /// the device could not destroy the CQ. The buffer changes on a resize.
    buf: spin::Mutex<Option<DmaMem<H::Dma>>>,
    db: Option<DmaMem<H::Dma>>,
    notify: Arc<CqNotify>,
    /// QPs whose completions land here.
    qps: spin::RwLock<Vec<Arc<WqShared>>>,
    /// Bumped whenever `qps` changes: pollers drop their cached QP (a destroyed QP's number
    /// can come back for a new QP).
    qps_gen: AtomicU32,
    destroyed: core::sync::atomic::AtomicBool,
}

impl<H: Hal> CqShared<H> {
    /// Routes completions of `q` to this CQ.
    pub(crate) fn attach(&self, q: &Arc<WqShared>) {
        self.qps.write().push(q.clone());
        self.qps_gen.fetch_add(1, Ordering::AcqRel);
    }

    /// Stops routing completions of `q` here.
    pub(crate) fn detach(&self, q: &Arc<WqShared>) {
        self.qps.write().retain(|x| !Arc::ptr_eq(x, q));
        self.qps_gen.fetch_add(1, Ordering::AcqRel);
    }

    /// DESTROY_CQ; on success the CQ's completion events stop being routed. A failed destroy
    /// can be tried again.
    fn destroy(&self) -> Result<()> {
        if self.destroyed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let mut c = CmdBuf::new(opcode::DESTROY_CQ, 0, destroy_cq_in::BYTES);
        c.set(destroy_cq_in::CQN, self.cqn);
        let mut out = [0u8; destroy_cq_out::BYTES];
        let r = self.ctx.exec(&c, &mut out);
        match r {
            Ok(()) => self.unroute(),
            Err(_) => self.destroyed.store(false, Ordering::Release),
        }
        r
    }

    fn unroute(&self) {
        let cqn = self.cqn;
        let _ = self.ctx.with_dev(|d| {
            if let Some(q) = d.eq.as_mut() {
                q.comp_routes.remove(&cqn);
            }
            Ok(())
        });
    }
}

impl<H: Hal> Drop for CqShared<H> {
    fn drop(&mut self) {
        if self.destroy().is_err() {
            // The device kept the CQ (or may have): its buffers are set aside, never freed.
            self.unroute();
            let mems = [self.buf.get_mut().take(), self.db.take()];
            let _ = self.ctx.with_dev(|d| {
                d.hold(mems.into_iter().flatten());
                Ok(())
            });
        }
    }
}

/// A completion queue.
pub struct CompletionQueue<H: Hal> {
    pub(crate) shared: Arc<CqShared<H>>,
    buf: *const u8,
    db: *mut u8,
    cqe_cnt: u32,
    ci: u32,
    /// The QP the last CQE named (completions of one QP come in runs), or `placeholder`.
    cached: Arc<WqShared>,
    /// Matches no CQE.
    placeholder: Arc<WqShared>,
    /// `CqShared::qps_gen` when `cached` was taken.
    cached_gen: u32,
    /// The last `sop_drop_qpn` dword of `cached` the inline path took (QP and WQE opcode, as
    /// it lies in memory) and the head of the completion it makes.
    seen: (u32, WcHead),
    /// Every UMR WQE completing here is a plain UMR with no saved completion opcode (the
    /// driver's own UMR QP, [`crate::umr`]; never BIND_MW or LOCAL_INV): its successful
    /// completion takes the inline path, whose opcode table gives the same
    /// [`WcOpcode::Unknown`] the saved-opcode lookup would.
    plain_umr: bool,
}

// SAFETY: the raw pointers point into buffers owned by `shared` (kept alive by the Arc);
// the handle is used through &mut self only.
unsafe impl<H: Hal> Send for CompletionQueue<H> {}

/// The ring size for `entries` usable entries (rdma-core verbs.c `mlx5_create_cq`:
/// `roundup_pow_of_two(cqe + 1)`, at most `1 << log_max_cq_sz`), with checked arithmetic:
/// `(cqe_cnt, buffer bytes)`.
fn ring_size(log_max_cq_sz: u8, entries: u32) -> Result<(u32, usize)> {
    if entries == 0 {
        return Err(InvalidInput::ZeroEntries.into());
    }
    // The cqc counters are 24 bits: never more than 2^24 entries, whatever the device says.
    let log_max = u32::from(log_max_cq_sz).min(24);
    let max = (1u32 << log_max).saturating_sub(1);
    let too_large = InvalidInput::CqTooLarge {
        requested: entries,
        max,
    };
    if entries > max {
        return Err(too_large.into());
    }
    let cqe_cnt = entries
        .checked_add(1)
        .and_then(u32::checked_next_power_of_two)
        .ok_or(too_large)?;
    let bytes = (cqe_cnt as usize)
        .checked_mul(cqe::SIZE)
        .ok_or(too_large)?
        .max(4096);
    Ok((cqe_cnt, bytes))
}

/// A fresh CQ buffer: every CQE's `op_own` = INVALID << 4 (facts trap 25; Linux cq.c
/// `init_cq_frag_buf`).
fn alloc_ring<H: Hal>(hal: &H, cqe_cnt: u32, size: usize) -> Result<DmaMem<H::Dma>> {
    let buf = DmaMem::alloc(hal, size, size)?;
    for i in 0..cqe_cnt as usize {
        buf.write_u8(i * cqe::SIZE + cqe::offset::OP_OWN, cqe::OP_OWN_INIT)?;
    }
    Ok(buf)
}

/// Creates a CQ of at least `entries` entries, its completion events going to `channel` (or
/// to the event log).
pub(crate) fn create<H: Hal>(
    ctx: &Arc<CtxInner<H>>,
    entries: u32,
    channel: Option<&CompletionChannel<H>>,
) -> Result<CompletionQueue<H>> {
    if let Some(ch) = channel {
        if !Arc::ptr_eq(&ch.ctx, ctx) {
            return Err(InvalidInput::ForeignObject.into());
        }
    }
    let (cqe_cnt, size) = ring_size(ctx.caps.log_max_cq_sz, entries)?;
    let hal = &ctx.hal;
    let buf = alloc_ring(hal, cqe_cnt, size)?;
    let db = DmaMem::alloc(hal, 64, 64)?;
    hal.dma_wmb();
    let mut c = CmdBuf::new(opcode::CREATE_CQ, 0, create_cq_in::PAS.bytes_with(1));
    let x = |f: mlx5_prm::Field| f.within(create_cq_in::CQ_CONTEXT);
    c.set(x(cqc::CQE_SZ), cqe::stride::CQE_STRIDE_64.into())
        .set(x(cqc::LOG_CQ_SIZE), cqe_cnt.trailing_zeros())
        .set(x(cqc::UAR_PAGE), ctx.uar.index)
        .set(x(cqc::C_EQN_OR_APU_ELEMENT), ctx.eqn.into())
        .set(x(cqc::LOG_PAGE_SIZE), size.trailing_zeros() - 12)
        .set64(x(cqc::DBR_ADDR), db.bus())
        .put64(create_cq_in::PAS.byte_offset(), buf.bus());
    let mut out = [0u8; create_cq_out::BYTES];
    if let Err(e) = ctx.exec(&c, &mut out) {
        // A garbled or missing reply: the device may have made the CQ on these buffers.
        ctx.release_after(&e, [buf, db]);
        return Err(e);
    }
    let cqn = get(&out, create_cq_out::CQN);
    let notify = Arc::new(CqNotify {
        cqn,
        arm_sn: AtomicU32::new(0),
        unacked: AtomicU32::new(0),
        channel: channel.map(|c| c.shared.clone()),
    });
    let n = notify.clone();
    ctx.with_dev(|d| {
        if let Some(q) = d.eq.as_mut() {
            q.comp_routes.insert(cqn, n);
        }
        Ok(())
    })?;
    let (bp, dp) = (buf.ptr() as *const u8, db.ptr());
    let placeholder = Arc::new(WqShared::placeholder());
    let shared = Arc::new(CqShared {
        ctx: ctx.clone(),
        cqn,
        buf: spin::Mutex::new(Some(buf)),
        db: Some(db),
        notify,
        qps: spin::RwLock::new(Vec::new()),
        qps_gen: AtomicU32::new(0),
        destroyed: core::sync::atomic::AtomicBool::new(false),
    });
    Ok(CompletionQueue {
        shared,
        buf: bp,
        db: dp,
        cqe_cnt,
        ci: 0,
        seen: nop_seen(&placeholder),
        plain_umr: false,
        cached: placeholder.clone(),
        placeholder,
        cached_gen: 0,
    })
}

impl<H: Hal> CompletionQueue<H> {
    /// The CQ number.
    pub fn cqn(&self) -> u32 {
        self.shared.cqn
    }

    /// Number of CQEs (a power of two; one more than the usable depth).
    pub fn capacity(&self) -> u32 {
        self.cqe_cnt - 1
    }

    /// Polls up to `wc.len()` completions into `wc`; returns how many. The consumer index is
    /// written to the doorbell record once, at the end. A fatal device state is reported as
    /// an error. The event queue is checked for page requests with one owner-bit read when
    /// fewer than `wc.len()` completions were there, or the call passed the end of the ring
    /// (so at least once per pass).
    ///
    /// Per CQE (rdma-core cq.c `mlx5_poll_one`): owner bit and opcode, read barrier, then
    /// only the fields the completion needs, straight from the ring. A successful send
    /// completion of the QP the previous CQE named, for the WQE its send queue expects next,
    /// is handled inline; everything else (receives, errors, another QP, completions that
    /// cover unsignaled WRs, duplicates, garbage) goes out of line, where the full checks are.
    #[inline(always)]
    pub fn poll(&mut self, wc: &mut [WorkCompletion]) -> Result<usize> {
        self.shared.ctx.check_alive()?;
        let gen = self.shared.qps_gen.load(Ordering::Acquire);
        if gen != self.cached_gen {
            self.forget_cached(gen);
        }
        let start = self.ci;
        let cur = self.poll_ring(wc);
        self.ci = cur;
        let n = cur.wrapping_sub(start) as usize;
        let ctx = &self.shared.ctx;
        if n > 0 {
            ctx.hal.dma_wmb();
            // SAFETY: the doorbell record is 64 bytes owned by `shared`; dword 0 is SET_CI.
            unsafe {
                ptr::write_volatile(
                    (self.db as *mut u32).add(cq_db::SET_CI),
                    (cur & 0xff_ffff).to_be(),
                )
            };
        }
        if n < wc.len() || (cur ^ start) & self.cqe_cnt != 0 {
            // The CQ ran dry, or this call passed the end of the ring: look at the event
            // queue (page requests). A full batch is followed by another call, so the check
            // is put off by at most one pass over the ring.
            ctx.poll_events_cheap()?;
        }
        Ok(n)
    }

    /// Marks this CQ as the driver's UMR CQ (see `plain_umr`): only plain UMR WQEs
    /// complete here.
    pub(crate) fn set_plain_umr(&mut self) {
        self.plain_umr = true;
    }

    /// The QPs attached to this CQ changed: a QP number may now name another QP.
    #[cold]
    fn forget_cached(&mut self, gen: u32) {
        self.cached = self.placeholder.clone();
        self.seen = nop_seen(&self.cached);
        self.cached_gen = gen;
        // Stale CQEs of QPs moved to RESET or destroyed (see `clean_stale`).
        self.clean_stale();
    }

    /// Consumes up to `wc.len()` CQEs from `ci` on; returns the new consumer index.
    ///
    /// The ring is walked in runs that do not wrap, so within a run the owner bit software
    /// expects is a constant (rdma-core cq.c `get_sw_cqe`: the pass parity `!!(n & cqe_cnt)`)
    /// and the common CQE, a successful requester completion (opcode REQ = 0) of that parity,
    /// is one compare of `op_own`. The cached QP's send state lives in a [`SendCursor`] (in
    /// registers) and is published once at the end.
    #[inline(always)]
    fn poll_ring(&mut self, wc: &mut [WorkCompletion]) -> u32 {
        let Self {
            shared,
            buf,
            cqe_cnt,
            ci,
            cached,
            seen: seen_io,
            plain_umr,
            ..
        } = self;
        let (buf, cnt) = (*buf, *cqe_cnt);
        let hal = &shared.ctx.hal;
        let mut cur = *ci;
        let mut q = cached.cursor();
        // Completions come in runs of one QP and one operation: the QP and opcode checks are
        // one compare with the last `sop_drop_qpn` dword taken, and the completion's head is
        // that dword's.
        let mut seen = *seen_io;
        let mut rest = wc;
        while !rest.is_empty() {
            // One run per iteration: up to the ring's end, then (at most once) from its start.
            let idx = cur & (cnt - 1);
            let run = ((cnt - idx) as usize).min(rest.len());
            let (seg, later) = core::mem::take(&mut rest).split_at_mut(run);
            rest = later;
            // The pass parity of every CQE in the run.
            let parity = ((cur & cnt) != 0) as u8;
            let want = cqe::opcode::REQ << 4 | parity;
            // SAFETY: idx < cnt: CQE idx of the buffer of cnt * 64 bytes `shared` owns.
            let first = unsafe { buf.add(idx as usize * cqe::SIZE) };
            let mut p = first;
            let mut taken = run;
            for w in seg.iter_mut() {
                let c = Cqe(p);
                // SAFETY: the run does not wrap, so `c` is CQE idx + k < cnt of the buffer and
                // `p` at most one past its end.
                p = unsafe { p.add(cqe::SIZE) };
                // SAFETY: as above; volatile because the device writes it.
                if unsafe { c.u8(cqe::offset::OP_OWN) } & (0xf0 | cqe::OWNER_MASK) != want {
                    // SAFETY: as above (the device writes the byte only while it owns it).
                    let op_own = unsafe { c.u8(cqe::offset::OP_OWN) };
                    // rdma-core cq.c get_sw_cqe / cqe::is_sw_owned, with the run's parity.
                    if cqe::opcode(op_own) == cqe::opcode::INVALID
                        || op_own & cqe::OWNER_MASK != parity
                    {
                        // Still the device's.
                        taken = (c.0 as usize - first as usize) / cqe::SIZE;
                        break;
                    }
                    hal.dma_rmb();
                    other_cqe(shared, cached, &mut q, c, op_own, w);
                    seen = nop_seen(cached);
                    continue;
                }
                hal.dma_rmb();
                // SAFETY: the CQE's 64 bytes lie inside the buffer and the device handed it
                // over; the offsets are inside mlx5_cqe64 (mlx5_prm::cqe::offset).
                let sop_raw = unsafe { c.ne32(cqe::offset::SOP_DROP_QPN) };
                if sop_raw != seen.0 {
                    // Bytes 1..4: the QP number; byte 0: the WQE opcode (rdma-core
                    // handle_good_req).
                    // A UMR (BIND_MW, LOCAL_INV) takes its opcode from the slot: out of line.
                    if sop_raw & QPN_BYTES != q.key
                        || (sop_raw.to_ne_bytes()[0] == wqe::opcode::UMR && !*plain_umr)
                    {
                        // SAFETY: as above.
                        let op_own = unsafe { c.u8(cqe::offset::OP_OWN) };
                        other_cqe(shared, cached, &mut q, c, op_own, w);
                        seen = nop_seen(cached);
                        continue;
                    }
                    seen = req_seen(sop_raw);
                }
                // SAFETY: as above.
                let counter = unsafe { c.be16(cqe::offset::WQE_COUNTER) };
                let slot = q.slot(cached, counter);
                let Some(wr_id) = q.complete_next(slot, counter) else {
                    // SAFETY: as above.
                    let tail = unsafe { send_slow(cached, slot, q.tail(), counter, c, w) };
                    q.set_tail(tail);
                    continue;
                };
                // SAFETY: as above.
                let byte_len = unsafe { c.be32(cqe::offset::BYTE_CNT) };
                seen.1.write(w, wr_id, byte_len, q.qpn);
            }
            cur = cur.wrapping_add(taken as u32);
            if taken < run || rest.is_empty() {
                break;
            }
        }
        cached.store_tail(&q);
        *seen_io = seen;
        cur
    }

    /// Polls until `n` completions arrived or `timeout` passed (convenience for tests and
    /// examples; the deadline uses the HAL clock).
    pub fn poll_wait(
        &mut self,
        n: usize,
        timeout: core::time::Duration,
    ) -> Result<Vec<WorkCompletion>> {
        // `n` is the caller's: reserve no more than the ring can hold at once.
        let mut v = Vec::with_capacity(n.min(self.cqe_cnt as usize));
        let deadline = self.shared.ctx.hal.now().saturating_add(timeout);
        let mut buf = [WorkCompletion::default(); 16];
        while v.len() < n {
            let k = self.poll(&mut buf[..(n - v.len()).min(16)])?;
            v.extend_from_slice(&buf[..k]);
            if k == 0 {
                if self.shared.ctx.hal.now() >= deadline {
                    break;
                }
                self.shared.ctx.hal.relax();
            }
        }
        Ok(v)
    }

    /// Requests a completion event for the next completion, or with `solicited_only` the next
    /// solicited or error one (`ibv_req_notify_cq`): the arm word goes to the doorbell record,
    /// then the 64-bit doorbell `{arm word, cqn}` to UAR + 0x20 (rdma-core cq.c
    /// `mlx5_arm_cq`, Linux include/linux/mlx5/cq.h `mlx5_cq_arm`). The word carries the
    /// consumer index and the arm sequence number, which advances once per completion event
    /// (rdma-core `mlx5_cq_event`), not per arm. The event goes to the CQ's
    /// [`CompletionChannel`], or without one to [`crate::Context::take_events`].
    pub fn req_notify_cq(&mut self, solicited_only: bool) -> Result<()> {
        self.shared.ctx.check_alive()?;
        self.arm(solicited_only)
    }

    /// [`CompletionQueue::req_notify_cq`] without the dead-device check.
    pub fn arm(&mut self, solicited_only: bool) -> Result<()> {
        let cmd = if solicited_only {
            cq_db::cmd::REQ_NOT_SOL
        } else {
            cq_db::cmd::REQ_NOT
        };
        let sn = self.shared.notify.arm_sn.load(Ordering::Acquire);
        let word = cq_db::arm_value(sn, cmd, self.ci);
        // SAFETY: dword 1 of the 64-byte doorbell record.
        unsafe { ptr::write_volatile((self.db as *mut u32).add(cq_db::ARM_DB), word.to_be()) };
        let hal = &self.shared.ctx.hal;
        hal.dma_wmb();
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&word.to_be_bytes());
        b[4..].copy_from_slice(&self.shared.cqn.to_be_bytes());
        let off = self.shared.ctx.uar.offset + uar::CQ_DOORBELL;
        hal.mmio_write64(off, b);
        Ok(())
    }

    /// Acknowledges `n` completion events of this CQ taken from its channel
    /// (`ibv_ack_cq_events`). Acknowledging more than were taken is refused.
    pub fn ack_events(&mut self, n: u32) -> Result<()> {
        let u = &self.shared.notify.unacked;
        u.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(n))
            .map(|_| ())
            .map_err(|_| InvalidInput::OutOfRange.into())
    }

    /// Completion events taken from the channel and not yet acknowledged.
    pub fn unacked_events(&self) -> u32 {
        self.shared.notify.unacked.load(Ordering::Acquire)
    }

    /// Destroys the CQ now. Refused with [`Error::Busy`] while QPs use it or completion events
    /// are unacknowledged (`ibv_destroy_cq` waits for the acknowledgements), and when the
    /// device refuses DESTROY_CQ: the handle comes back with the error, its completions
    /// still there. Dropping the handle destroys the CQ too (once the last QP is gone).
    pub fn destroy(self) -> core::result::Result<(), Refused<Self>> {
        if Arc::strong_count(&self.shared) > 1 || self.unacked_events() != 0 {
            return Err(Refused {
                object: self,
                error: Error::Busy,
            });
        }
        match self.shared.destroy() {
            Ok(()) => Ok(()),
            Err(error) => Err(Refused {
                object: self,
                error,
            }),
        }
    }

    /// Resizes the CQ to at least `entries` entries (`ibv_resize_cq`), keeping the completions
    /// not polled yet. As Linux ib/cq.c `mlx5_ib_resize_cq` (kernel CQs) and rdma-core
    /// verbs.c `mlx5_resize_cq`: a new buffer, MODIFY_CQ with op_mod RESIZE and the log size,
    /// page offset and page size in `resize_field_select`; the device then writes a RESIZE
    /// CQE in the old buffer and continues in the new one; the driver copies the CQEs before
    /// the RESIZE CQE into the new buffer (`copy_resize_cqes`, rdma-core cq.c
    /// `mlx5_cq_resize_copy_cqes`). The old buffer is freed only after that.
    pub fn resize(&mut self, entries: u32) -> Result<()> {
        let ctx = self.shared.ctx.clone();
        ctx.check_alive()?;
        let caps = &ctx.caps;
        if cmd_hca_cap::CQ_RESIZE.get(&caps.general_cur).unwrap_or(0) == 0 {
            return Err(Error::Unsupported);
        }
        let (cnt, size) = ring_size(caps.log_max_cq_sz, entries)?;
        if cnt == self.cqe_cnt {
            return Ok(());
        }
        // Linux: BAD_SIZE_OUTS_CQES from the firmware when the completions not polled yet do
        // not fit; refused here first.
        let outstanding = self.outstanding();
        if outstanding >= cnt {
            return Err(InvalidInput::CqTooSmall {
                requested: entries,
                outstanding,
            }
            .into());
        }
        let hal = &ctx.hal;
        let nbuf = alloc_ring(hal, cnt, size)?;
        hal.dma_wmb();
        let mut c = CmdBuf::new(
            opcode::MODIFY_CQ,
            cq_modify::OPMOD_RESIZE,
            modify_cq_in::PAS.bytes_with(1),
        );
        let x = |f: mlx5_prm::Field| f.within(modify_cq_in::CQ_CONTEXT);
        c.set(modify_cq_in::CQN, self.shared.cqn)
            .set(
                modify_cq_in::MODIFY_FIELD_SELECT_RESIZE_FIELD_SELECT,
                cq_modify::MASK_LOG_SIZE | cq_modify::MASK_PG_OFFSET | cq_modify::MASK_PG_SIZE,
            )
            .set(x(cqc::CQE_SZ), cqe::stride::CQE_STRIDE_64.into())
            .set(x(cqc::LOG_CQ_SIZE), cnt.trailing_zeros())
            .set(x(cqc::LOG_PAGE_SIZE), size.trailing_zeros() - 12)
            .set(x(cqc::PAGE_OFFSET), 0)
            .put64(modify_cq_in::PAS.byte_offset(), nbuf.bus());
        let mut out = [0u8; modify_cq_out::BYTES];
        if let Err(e) = ctx.exec(&c, &mut out) {
            // A garbled or missing reply: the device may have switched to the new buffer.
            ctx.release_after(&e, [nbuf]);
            return Err(e);
        }
        // The device switched: copy what it wrote before the RESIZE CQE.
        let copied = self.copy_resize_cqes(&nbuf, cnt);
        let old = self.shared.buf.lock().replace(nbuf);
        let nptr = self
            .shared
            .buf
            .lock()
            .as_ref()
            .map_or(ptr::null(), |b| b.ptr() as *const u8);
        self.buf = nptr;
        self.cqe_cnt = cnt;
        match copied {
            Ok(()) => {
                // The RESIZE CQE is consumed: tell the device.
                hal.dma_wmb();
                // SAFETY: dword 0 of the 64-byte doorbell record `shared` owns.
                unsafe {
                    ptr::write_volatile(
                        (self.db as *mut u32).add(cq_db::SET_CI),
                        (self.ci & 0xff_ffff).to_be(),
                    )
                };
                // The device writes only the new buffer now.
                drop(old);
                Ok(())
            }
            Err(e) => {
                // No RESIZE CQE: the device may still write the old buffer.
                ctx.with_dev(|d| {
                    d.hold(old);
                    Ok(())
                })?;
                Err(e)
            }
        }
    }

    /// CQEs the device handed over and software has not polled yet.
    fn outstanding(&self) -> u32 {
        let mut n = 0;
        while n < self.cqe_cnt {
            let i = self.ci.wrapping_add(n);
            // SAFETY: the index is masked to the ring; the op_own byte of that CQE.
            let op_own = unsafe {
                Cqe(self.buf.add((i & (self.cqe_cnt - 1)) as usize * cqe::SIZE))
                    .u8(cqe::offset::OP_OWN)
            };
            if !cqe::is_sw_owned(op_own, i, self.cqe_cnt) {
                break;
            }
            n += 1;
        }
        n
    }

    /// Copies the CQEs from the consumer index up to the RESIZE CQE into `nbuf` (`cnt`
    /// entries), each at its index + 1 with the new ring's owner bit, then moves the consumer
    /// index one on (rdma-core cq.c `mlx5_cq_resize_copy_cqes`, Linux ib/cq.c
    /// `copy_resize_cqes`): the device continues after the RESIZE CQE's index.
    fn copy_resize_cqes(&mut self, nbuf: &DmaMem<H::Dma>, cnt: u32) -> Result<()> {
        let hal = &self.shared.ctx.hal;
        let bad = Error::BadFirmwareReply {
            opcode: opcode::MODIFY_CQ,
        };
        let mut i = self.ci;
        for _ in 0..=self.cqe_cnt {
            let src = Cqe(
                // SAFETY: masked to the ring.
                unsafe { self.buf.add((i & (self.cqe_cnt - 1)) as usize * cqe::SIZE) },
            );
            // SAFETY: the op_own byte of a CQE of the ring.
            let op_own = unsafe { src.u8(cqe::offset::OP_OWN) };
            if !cqe::is_sw_owned(op_own, i, self.cqe_cnt) {
                return Err(bad);
            }
            hal.dma_rmb();
            if cqe::opcode(op_own) == cqe::opcode::RESIZE_CQ {
                // The copies sit one index further on: the consumer index steps over the
                // RESIZE CQE's slot (`++cq->cons_index`).
                self.ci = self.ci.wrapping_add(1);
                return Ok(());
            }
            let j = i.wrapping_add(1);
            let mut bytes = [0u8; cqe::SIZE];
            for (k, b) in bytes.iter_mut().enumerate() {
                // SAFETY: k < 64: inside the CQE.
                *b = unsafe { src.u8(k) };
            }
            let own = ((j & cnt) != 0) as u8;
            let o = cqe::offset::OP_OWN;
            bytes[o] = (bytes[o] & !cqe::OWNER_MASK) | own;
            nbuf.write((j & (cnt - 1)) as usize * cqe::SIZE, &bytes)?;
            i = j;
        }
        Err(bad)
    }
}

/// A CQE in the CQ buffer, read field by field (no 64-byte copy).
#[derive(Clone, Copy)]
struct Cqe(*const u8);

/// Bytes 1..4 of a dword read in memory order.
const QPN_BYTES: u32 = u32::from_ne_bytes([0, 0xff, 0xff, 0xff]);

impl Cqe {
    /// # Safety
    /// As [`Cqe::be32`].
    #[inline(always)]
    unsafe fn ne32(self, o: usize) -> u32 {
        // SAFETY: per the caller: in bounds and 4-byte aligned; volatile: device memory.
        unsafe { ptr::read_volatile(self.0.add(o) as *const u32) }
    }
    /// # Safety
    /// `self.0 + o + 4` stays inside the CQE and `o` is a multiple of 4 (the CQE is 64-byte
    /// aligned).
    #[inline(always)]
    unsafe fn be32(self, o: usize) -> u32 {
        // SAFETY: per the caller: in bounds and 4-byte aligned; volatile: device memory.
        u32::from_be(unsafe { ptr::read_volatile(self.0.add(o) as *const u32) })
    }
    /// # Safety
    /// `self.0 + o + 2` stays inside the CQE and `o` is even.
    #[inline(always)]
    unsafe fn be16(self, o: usize) -> u16 {
        // SAFETY: per the caller.
        u16::from_be(unsafe { ptr::read_volatile(self.0.add(o) as *const u16) })
    }
    /// # Safety
    /// `self.0 + o` lies inside the CQE.
    #[inline(always)]
    unsafe fn u8(self, o: usize) -> u8 {
        // SAFETY: per the caller.
        unsafe { ptr::read_volatile(self.0.add(o)) }
    }
}

/// `ibv_wc_opcode` of a successful send completion, by the WQE opcode in
/// `sop_drop_qpn[31:24]` (rdma-core cq.c `handle_good_req`).
const REQ_OPCODE: [WcOpcode; 256] = {
    let mut t = [WcOpcode::Unknown; 256];
    t[wqe::opcode::RDMA_WRITE as usize] = WcOpcode::RdmaWrite;
    t[wqe::opcode::RDMA_WRITE_IMM as usize] = WcOpcode::RdmaWrite;
    t[wqe::opcode::SEND as usize] = WcOpcode::Send;
    t[wqe::opcode::SEND_IMM as usize] = WcOpcode::Send;
    t[wqe::opcode::SEND_INVAL as usize] = WcOpcode::Send;
    t[wqe::opcode::RDMA_READ as usize] = WcOpcode::RdmaRead;
    t[wqe::opcode::ATOMIC_CS as usize] = WcOpcode::CompSwap;
    t[wqe::opcode::ATOMIC_FA as usize] = WcOpcode::FetchAdd;
    t
};

/// The opcode cache entry of a raw `sop_drop_qpn` dword: the dword and the head of the
/// successful completion it makes (rdma-core cq.c `handle_good_req`).
#[inline(always)]
fn req_seen(sop: u32) -> (u32, WcHead) {
    let op = REQ_OPCODE[sop.to_ne_bytes()[0] as usize];
    (sop, WcHead::new(WcStatus::Success, op, 0))
}

/// The opcode cache entry of QP `q` with the NOP opcode byte (0): its key.
fn nop_seen(q: &WqShared) -> (u32, WcHead) {
    req_seen(q.qpn_key)
}

fn bad_cqe(qpn: u32) -> WorkCompletion {
    WorkCompletion {
        qp_num: qpn,
        status: WcStatus::BadCqe,
        ..WorkCompletion::default()
    }
}

/// The QP `qpn` (cached for the next CQEs), or `None` when no QP of this CQ has that number.
fn find_qp<'c, H: Hal>(
    shared: &CqShared<H>,
    cached: &'c mut Arc<WqShared>,
    qpn: u32,
) -> Option<&'c WqShared> {
    if cached.qpn != qpn {
        *cached = shared.qps.read().iter().find(|q| q.qpn == qpn)?.clone();
    }
    Some(cached)
}

/// A CQE the inline path does not take (receives, errors, another QP, garbage): the cursor's
/// tail is published first (the general parser works on the shared state, and may switch
/// `cached` to another QP), and the cursor is taken again afterwards.
#[inline(always)]
fn other_cqe<H: Hal>(
    shared: &CqShared<H>,
    cached: &mut Arc<WqShared>,
    q: &mut SendCursor,
    c: Cqe,
    op_own: u8,
    w: &mut WorkCompletion,
) {
    cached.store_tail(q);
    // SAFETY: the caller saw the CQE handed over (owner bit, opcode, read barrier).
    let sop = u32::from_be(unsafe { c.ne32(cqe::offset::SOP_DROP_QPN) });
    // SAFETY: as above.
    unsafe { parse(shared, cached, c, op_own, sop, w) };
    *q = cached.cursor();
}

/// A successful send completion of the cached QP that is not the one its send queue expects
/// next: the full check (a completion that covers unsignaled WRs passes, a duplicate or
/// garbage counter is [`WcStatus::BadCqe`]). Returns the new tail.
///
/// # Safety
/// `c` points to a whole CQE the device handed over.
#[cold]
#[inline(never)]
unsafe fn send_slow(
    q: &WqShared,
    slot: &crate::qp::SqSlot,
    tail: u32,
    counter: u16,
    c: Cqe,
    w: &mut WorkCompletion,
) -> u32 {
    let Some((wr_id, tail)) = SendCursor::complete_slow(q, slot, tail, counter) else {
        *w = bad_cqe(q.qpn);
        return tail;
    };
    // SAFETY: per the caller; offsets inside mlx5_cqe64.
    let (sop, byte_len) = unsafe {
        (
            c.ne32(cqe::offset::SOP_DROP_QPN),
            c.be32(cqe::offset::BYTE_CNT),
        )
    };
    *w = WorkCompletion {
        wr_id,
        status: WcStatus::Success,
        opcode: REQ_OPCODE[sop.to_ne_bytes()[0] as usize],
        byte_len,
        imm: None,
        qp_num: q.qpn,
        vendor_err: 0,
    };
    tail
}

/// Parses one CQE (rdma-core cq.c `mlx5_parse_cqe`, `handle_good_req`, `handle_responder`,
/// `mlx5_handle_error_cqe`): the general case, out of line.
///
/// # Safety
/// `c` points to a whole CQE the device handed over.
#[inline(never)]
unsafe fn parse<H: Hal>(
    shared: &CqShared<H>,
    cached: &mut Arc<WqShared>,
    c: Cqe,
    op_own: u8,
    sop: u32,
    out: &mut WorkCompletion,
) {
    // SAFETY: per the caller.
    *out = unsafe { parse_one(shared, cached, c, op_own, sop) };
}

/// [`parse`]'s body.
///
/// # Safety
/// As [`parse`].
#[inline(always)]
unsafe fn parse_one<H: Hal>(
    shared: &CqShared<H>,
    cached: &mut Arc<WqShared>,
    c: Cqe,
    op_own: u8,
    sop: u32,
) -> WorkCompletion {
    use cqe::offset as o;
    // SAFETY: every offset below is < 64 - 4 (mlx5_cqe64 layout, mlx5_prm::cqe::offset).
    let byte_cnt = unsafe { c.be32(o::BYTE_CNT) };
    let op = cqe::opcode(op_own);
    let qpn = sop & 0xff_ffff;
    let mut wc = WorkCompletion {
        qp_num: qpn,
        byte_len: byte_cnt,
        ..WorkCompletion::default()
    };
    let Some(q) = find_qp(shared, cached, qpn) else {
        return bad_cqe(qpn);
    };
    match op {
        cqe::opcode::REQ | cqe::opcode::REQ_ERR => {
            // SAFETY: as above.
            let counter = unsafe { c.be16(o::WQE_COUNTER) };
            // A UMR's opcode was saved when it was posted (rdma-core cq.c `handle_good_req`:
            // `wc->opcode = wq->wr_data[idx]` for MLX5_OPCODE_UMR).
            let umr_op = ((sop >> 24) as u8 == wqe::opcode::UMR).then(|| q.umr_wc_op(counter));
            let Some(wr_id) = q.complete_send(counter) else {
                return bad_cqe(qpn);
            };
            wc.wr_id = wr_id;
            if op == cqe::opcode::REQ_ERR {
                // SAFETY: as above.
                unsafe {
                    wc.status = WcStatus::from_syndrome(c.u8(cqe::err_offset::SYNDROME));
                    wc.vendor_err = c.u8(cqe::err_offset::VENDOR_ERR_SYND);
                }
                wc.byte_len = 0;
            } else if let Some(op) = umr_op {
                wc.opcode = crate::mw::wc_opcode(op);
            } else {
                wc.opcode = REQ_OPCODE[(sop >> 24) as usize];
            }
        }
        cqe::opcode::RESP_WR_IMM
        | cqe::opcode::RESP_SEND
        | cqe::opcode::RESP_SEND_IMM
        | cqe::opcode::RESP_SEND_INV
        | cqe::opcode::RESP_ERR => {
            let Some(wr_id) = q.complete_recv() else {
                return bad_cqe(qpn);
            };
            wc.wr_id = wr_id;
            // SAFETY: as above.
            unsafe {
                match op {
                    cqe::opcode::RESP_ERR => {
                        wc.status = WcStatus::from_syndrome(c.u8(cqe::err_offset::SYNDROME));
                        wc.vendor_err = c.u8(cqe::err_offset::VENDOR_ERR_SYND);
                        wc.byte_len = 0;
                    }
                    cqe::opcode::RESP_WR_IMM => {
                        wc.opcode = WcOpcode::RecvRdmaWithImm;
                        wc.imm = Some(c.be32(o::IMM_INVAL_PKEY));
                    }
                    cqe::opcode::RESP_SEND_IMM => {
                        wc.opcode = WcOpcode::Recv;
                        wc.imm = Some(c.be32(o::IMM_INVAL_PKEY));
                    }
                    // rdma-core cq.c `handle_responder`: MLX5_CQE_RESP_SEND_INV is
                    // IBV_WC_RECV with IBV_WC_WITH_INV, `invalidated_rkey` = imm_inval_pkey.
                    cqe::opcode::RESP_SEND_INV => {
                        wc.opcode = WcOpcode::RecvWithInv;
                        wc.imm = Some(c.be32(o::IMM_INVAL_PKEY));
                    }
                    _ => wc.opcode = WcOpcode::Recv,
                }
            }
        }
        _ => return bad_cqe(qpn),
    }
    wc
}

// -------------------------------------------------------------------------------------------
// Stale CQEs of QPs moved to RESET or destroyed (rdma-core cq.c `__mlx5_cq_clean`, Linux
// ib/cq.c `__mlx5_ib_cq_clean`), off the poll fast path: the QP asks (`request_clean`), the
// CQ's poller removes them the next time it polls (a change of `qps_gen` sends it through
// `forget_cached`, which calls `clean_stale`).
// -------------------------------------------------------------------------------------------

impl<H: Hal> CqShared<H> {
    /// Records that the CQEs of `q` the device has written to this CQ so far are stale (`q`
    /// was moved to RESET or destroyed, so the device writes no more of them): QUERY_CQ's
    /// `producer_counter` marks where they end. The poller removes them before it looks at
    /// anything newer.
    pub(crate) fn request_clean(&self, q: &Arc<WqShared>) -> Result<()> {
        use mlx5_prm::{query_cq_in, query_cq_out};
        let mut c = CmdBuf::new(opcode::QUERY_CQ, 0, query_cq_in::BYTES);
        c.set(query_cq_in::CQN, self.cqn);
        let mut out = alloc::vec![0u8; query_cq_out::BYTES];
        self.ctx.exec(&c, &mut out)?;
        let produced = get(&out, cqc::PRODUCER_COUNTER.within(query_cq_out::CQ_CONTEXT));
        q.stale.lock().push((self.cqn, produced));
        self.qps_gen.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}

impl<H: Hal> CompletionQueue<H> {
    /// Removes the stale CQEs the attached QPs asked for, and forgets destroyed QPs whose
    /// CQEs are gone. Called from `forget_cached` (cold).
    #[cold]
    #[inline(never)]
    fn clean_stale(&mut self) {
        let cqn = self.shared.cqn;
        let qs: Vec<Arc<WqShared>> = self.shared.qps.read().clone();
        let mut forget = Vec::new();
        for q in qs {
            let marks: Vec<u32> = {
                let mut s = q.stale.lock();
                let mine = s.iter().filter(|m| m.0 == cqn).map(|m| m.1).collect();
                s.retain(|m| m.0 != cqn);
                mine
            };
            for produced in marks {
                self.remove_cqes(q.qpn, produced);
            }
            if q.retired.load(Ordering::Acquire) {
                forget.push(q);
            }
        }
        if !forget.is_empty() {
            self.shared
                .qps
                .write()
                .retain(|x| !forget.iter().any(|f| Arc::ptr_eq(x, f)));
            // The list changed: the next poll sees a new generation and comes through here
            // once more (nothing left to do then).
            self.shared.qps_gen.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Removes the CQEs of QP `qpn` between the consumer index and `produced` (the 24-bit
    /// producer counter when the QP stopped producing): the others move up over them, from
    /// the newest down, each keeping the owner bit of the slot it lands in, and the consumer
    /// index advances by the number removed (rdma-core cq.c `__mlx5_cq_clean`).
    fn remove_cqes(&mut self, qpn: u32, produced: u32) {
        let cnt = self.cqe_cnt;
        let ci = self.ci;
        let ahead = produced.wrapping_sub(ci) & 0xff_ffff;
        if ahead == 0 || ahead > cnt {
            // Nothing left, or a counter no ring of this size can have: leave the ring alone.
            return;
        }
        let slot = |i: u32| -> *mut u8 {
            // SAFETY: `i & (cnt - 1)` < cnt: a CQE of the buffer of `cnt` 64-byte entries
            // `shared` owns.
            unsafe { (self.buf as *mut u8).add((i & (cnt - 1)) as usize * cqe::SIZE) }
        };
        self.shared.ctx.hal.dma_rmb();
        let mut freed = 0u32;
        let mut i = ci.wrapping_add(ahead);
        while i != ci {
            i = i.wrapping_sub(1);
            let src = slot(i);
            // SAFETY: a whole CQE in [ci, produced), which the device handed over (it wrote
            // every CQE before its producer counter) and the poller has not consumed.
            let sop = unsafe {
                ptr::read_volatile(src.add(cqe::offset::SOP_DROP_QPN) as *const u32)
            };
            if u32::from_be(sop) & 0xff_ffff == qpn {
                freed += 1;
            } else if freed != 0 {
                let dst = slot(i.wrapping_add(freed));
                // SAFETY: `dst` is a CQE in (i, produced), also handed over; the two do not
                // overlap (freed > 0). The owner bit of the slot stays what its pass expects.
                unsafe {
                    let own_at = dst.add(cqe::offset::OP_OWN);
                    let owner = ptr::read_volatile(own_at) & cqe::OWNER_MASK;
                    ptr::copy_nonoverlapping(src, dst, cqe::SIZE);
                    let op_own = ptr::read_volatile(own_at);
                    ptr::write_volatile(own_at, (op_own & !cqe::OWNER_MASK) | owner);
                }
            }
        }
        if freed != 0 {
            self.ci = ci.wrapping_add(freed);
            let hal = &self.shared.ctx.hal;
            hal.dma_wmb();
            // SAFETY: the doorbell record is 64 bytes owned by `shared`; dword 0 is SET_CI.
            unsafe {
                ptr::write_volatile(
                    (self.db as *mut u32).add(cq_db::SET_CI),
                    (self.ci & 0xff_ffff).to_be(),
                )
            };
        }
    }
}
