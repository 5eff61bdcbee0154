//! The work queue the SQ and the RQ are each made of (`mlx5_ifc_wq_bits`): its ring and
//! doorbell record in DMA memory, the `wq` fields CREATE_SQ and CREATE_RQ carry, and the rule
//! that the memory is freed only after the queue is destroyed.

use mlx5_prm::{wq, Field};

use crate::cmd::CmdBuf;
use crate::context::CtxInner;
use crate::error::{Error, InvalidInput, Result};
use crate::hal::{DmaMem, Hal};

/// A work queue's DMA memory: owned for the device's sake, quarantined for good when the
/// queue's destroy fails.
pub(super) struct WqMem<H: Hal> {
    ring: Option<DmaMem<H::Dma>>,
    db: Option<DmaMem<H::Dma>>,
    log_stride: u32,
    strides: u32,
}

impl<H: Hal> WqMem<H> {
    /// A zeroed ring of `strides` strides of `1 << log_stride` bytes (a power of two of them,
    /// at least a page, aligned to its size: one `pas` entry) and a doorbell record (Linux
    /// wq.c `mlx5_wq_cyc_create`: the buffer and `mlx5_db_alloc`). Refused above the device's
    /// `log_max_wq_sz` and the 16-bit WQE counter.
    pub(super) fn alloc(
        hal: &H,
        log_stride: u32,
        strides: u32,
        log_max_wq_sz: u8,
    ) -> Result<WqMem<H>> {
        let max = 1u32 << u32::from(log_max_wq_sz).min(15);
        if strides > max || !strides.is_power_of_two() {
            return Err(InvalidInput::QueueDepth {
                requested: strides,
                max,
            }
            .into());
        }
        let bytes = ((strides as usize) << log_stride).max(4096);
        Ok(WqMem {
            ring: Some(DmaMem::alloc(hal, bytes, bytes)?),
            db: Some(DmaMem::alloc(hal, 64, 64)?),
            log_stride,
            strides,
        })
    }

    /// The create command `opcode` with the `wq` at `at` (the context's `wq` within the
    /// input) filled as en_main.c `mlx5e_create_sq` / `mlx5e_create_rq` and en/params.c
    /// `mlx5e_build_sq_param_common` / `mlx5e_build_rq_param` fill it: cyclic, the PD, the
    /// stride, the page size relative to 4 KiB, the size, the doorbell record, and the ring's
    /// one page in `pas`, which ends the command.
    pub(super) fn create_cmd(&self, opcode: u16, at: Field, pdn: u32) -> Result<CmdBuf> {
        let (ring, db) = (self.ring()?, self.db()?);
        let base = at.byte_offset();
        let mut c = CmdBuf::new(opcode, 0, base + wq::PAS.bytes_with(1));
        let w = |f: Field| f.within(at);
        c.set(w(wq::WQ_TYPE), mlx5_prm::wq_type::CYCLIC.into())
            .set(w(wq::PD), pdn)
            .set64(w(wq::DBR_ADDR), db.bus())
            .set(w(wq::LOG_WQ_STRIDE), self.log_stride)
            .set(w(wq::LOG_WQ_PG_SZ), ring.len().trailing_zeros() - 12)
            .set(w(wq::LOG_WQ_SZ), self.strides.trailing_zeros())
            .put64(base + wq::PAS.byte_offset(), ring.bus());
        Ok(c)
    }

    /// The ring.
    pub(super) fn ring(&self) -> Result<&DmaMem<H::Dma>> {
        self.ring.as_ref().ok_or(Error::Closed)
    }

    /// The doorbell record.
    pub(super) fn db(&self) -> Result<&DmaMem<H::Dma>> {
        self.db.as_ref().ok_or(Error::Closed)
    }

    /// The create command failed with `e`: the memory is freed, or quarantined when the
    /// device may have taken it ([`Error::device_may_hold`]).
    pub(super) fn release_after(&mut self, ctx: &CtxInner<H>, e: &Error) {
        ctx.release_after(e, [self.ring.take(), self.db.take()].into_iter().flatten());
    }

    /// Runs the destroy command `c` of the queue; its memory is freed when that succeeded,
    /// quarantined for good otherwise (the queue may live on and use it).
    pub(super) fn destroy(&mut self, ctx: &CtxInner<H>, c: &CmdBuf, out: &mut [u8]) -> Result<()> {
        let r = ctx.exec(c, out);
        let mems = [self.ring.take(), self.db.take()].into_iter().flatten();
        match r {
            Ok(()) => mems.for_each(drop),
            Err(_) => ctx.hold(mems),
        }
        r
    }
}
