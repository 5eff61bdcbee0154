//! Completion queues: CREATE_CQ / DESTROY_CQ / MODIFY_CQ (resize), CQE ownership and
//! parsing, the consumer-index doorbell record, the arm doorbell and completion events
//! ([`CompletionChannel`]).
//!
//! Polling follows rdma-core providers/mlx5/cq.c: check the owner bit and opcode of the next
//! CQE (`is_sw_owned`, like `get_sw_cqe`), then a read barrier, then read the CQE; the
//! consumer index is written to the doorbell record once per poll call
//! (`mlx5_update_cons_index`). CQEs start as `op_own = 0xf0` (`mlx5_alloc_cq_buf`).

mod clean;
mod decode;
mod event;
mod poll;
mod resize;

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ptr;
use core::sync::atomic::{AtomicU32, Ordering};

use mlx5_prm::{
    cq_db, cqc, cqe, create_cq_in, create_cq_out, destroy_cq_in, destroy_cq_out, opcode, uar,
};

use crate::cmd::{get, CmdBuf};
use crate::context::CtxInner;
use crate::error::{Error, InvalidInput, Refused, Result};
use crate::hal::{DmaMem, Hal};
use crate::wq::WqShared;

pub(crate) use crate::eq::CqNotify;
pub use crate::wc::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
pub use event::{CompletionChannel, CqEvent};

use crate::wc::WcHead;
use decode::nop_seen;

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
    /// The last `sop_drop_qpn` dword of `cached` the poll loop's common case took (QP and WQE opcode, as
    /// it lies in memory) and the head of the completion it makes.
    seen: (u32, WcHead),
    /// Every UMR WQE completing here is a plain UMR with no saved completion opcode (the
    /// driver's own UMR QP, [`crate::umr`]; never BIND_MW or LOCAL_INV): its successful
    /// completion takes the poll loop's common case, whose opcode table gives the same
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

/// A fresh CQ buffer: every CQE's `op_own` = INVALID << 4 (Linux cq.c
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

    /// Marks this CQ as the driver's UMR CQ (see `plain_umr`): only plain UMR WQEs
    /// complete here.
    pub(crate) fn set_plain_umr(&mut self) {
        self.plain_umr = true;
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
}
