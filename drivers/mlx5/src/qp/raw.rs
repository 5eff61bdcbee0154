//! Raw send WQEs: a ctrl segment and a body the caller builds (the UMR WQEs of [`crate::umr`] and
//! the application's BIND_MW of [`crate::mw`]), written into the send queue apart from the verbs
//! post path of `send.rs`.

use super::send::fm_ce_se;
use super::*;

impl<H: Hal> QueuePair<H> {
    /// The completion opcode of the UMR WQE in slot `idx` ([`SqSlot::wc_op`]).
    #[inline]
    pub(crate) fn set_wc_op(&self, idx: u16, op: u8) {
        // SAFETY: idx <= sq_mask and `shared.sq` has sq_mask + 1 slots (as `set_slot`).
        let sl = unsafe { &*self.sq_slots.add(idx as usize) };
        sl.wc_op.store(op, Ordering::Release);
    }

    /// The ctrl segment's `fm_ce_se` of a UMR WR of the application's (BIND_MW, [`crate::mw`]):
    /// `flags` as for any send WR (with `sq_sig_all`), the small initiator fence unless the WR
    /// asks for a fence (Linux ib/umr.c `mlx5r_umr_post_send`; rdma-core fences the WQE after
    /// a bind).
    pub(crate) fn umr_wr_fm_ce_se(&self, flags: SendFlags) -> u8 {
        let mut f = fm_ce_se(SendFlags(flags.0 | self.sig_all));
        if !flags.contains(SendFlags::FENCE) {
            f |= wqe::fence::INITIATOR_SMALL;
        }
        f
    }

    /// The context (for [`crate::mw`]).
    pub(crate) fn ctx_arc(&self) -> &Arc<CtxInner<H>> {
        &self.ctx
    }

    /// The QP's protection domain (for [`crate::mw`]).
    pub(crate) fn pd_arc(&self) -> &Arc<PdInner<H>> {
        &self.pd
    }

    /// The most blocks one send WQE of this QP may take.
    pub(crate) fn max_wqe_bbs(&self) -> u32 {
        self.lay.sq_max_bbs
    }

    /// Writes one WQE of opcode `opc` whose ctrl segment carries `imm` (a UMR's: the mkey,
    /// Linux ib/umr.c `mlx5r_umr_post_send`) and `fm_ce_se`, and whose segments after the ctrl
    /// segment (`body_len` bytes, a multiple of 16) `fill` writes straight into the send queue;
    /// a UMR's completion opcode `wc_op` is saved for the poller ([`SqSlot::wc_op`], 0: none).
    /// Returns the WQE's first block, for [`QueuePair::ring_send`] (once after several: one
    /// doorbell for a batch of UMRs). The slot's old bytes are not cleared first: `fill` must
    /// write every byte of the body itself, padding included. A WQE that wraps the ring is
    /// filled on the stack (over zeros) and copied in two pieces. Checks the QP's state, the
    /// body's size and room for one WR.
    #[allow(clippy::too_many_arguments)]
    // inline(always): UMR cache reg 1,419 vs 1,506 instructions per MR, dereg 1,290 vs 1,358
    // (reg_mr --instructions)
    #[inline(always)]
    pub(crate) fn write_raw(
        &mut self,
        wr_id: u64,
        opc: u8,
        imm: u32,
        body_len: usize,
        fm_ce_se: u8,
        wc_op: u8,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<*const u8> {
        self.check_can_send()?;
        if !body_len.is_multiple_of(wqe::SEND_WQE_DS) {
            return Err(InvalidInput::OutOfRange.into());
        }
        let ds = 1 + body_len / wqe::SEND_WQE_DS;
        let bbs = wqe::wqebbs(ds as u32);
        if ds > wqe::CTRL_DS_MASK as usize || bbs > self.lay.sq_max_bbs {
            return Err(InvalidInput::OutOfRange.into());
        }
        self.reserve_sq(1)?;
        let cnt = self.lay.sq_wqe_cnt;
        let idx = self.cur_post & self.sq_mask;
        let mut ctrl = [0u8; wqe::ctrl_seg::SIZE];
        ctrl[..4].copy_from_slice(&wqe::opmod_idx_opcode(0, self.cur_post, opc).to_be_bytes());
        ctrl[4..8].copy_from_slice(&wqe::qpn_ds(self.qpn, ds as u8).to_be_bytes());
        ctrl[wqe::ctrl_seg::FM_CE_SE] = fm_ce_se;
        ctrl[wqe::ctrl_seg::IMM..wqe::ctrl_seg::IMM + 4].copy_from_slice(&imm.to_be_bytes());
        let len = wqe::ctrl_seg::SIZE + body_len;
        let room = ((cnt - idx as u32) as usize) * wqe::SEND_WQE_BB;
        let mut w = core::mem::MaybeUninit::<[u8; MAX_WQE_BYTES]>::uninit();
        // SAFETY: the destination ranges lie inside the SQ (the WQE spans bbs <= sq_max_bbs
        // blocks from idx, wrapping to block 0), in slots reserve_sq found free (the device is
        // done with them and reads them only after the doorbell): in place when it does not
        // wrap, else through `w`, which holds `len` bytes (len <= sq_max_bbs blocks <=
        // MAX_WQE_BYTES), zeroed before it is read.
        unsafe {
            let sq = self.ring.add(self.lay.sq_offset);
            let at = sq.add(idx as usize * wqe::SEND_WQE_BB);
            let wraps = len > room;
            // One call of `fill`, into the ring or, for a WQE that wraps, into `w`.
            let dst = if wraps {
                let p = w.as_mut_ptr() as *mut u8;
                p.write_bytes(0, len);
                p
            } else {
                at
            };
            ptr::copy_nonoverlapping(ctrl.as_ptr(), dst, ctrl.len());
            let b = core::slice::from_raw_parts_mut(dst.add(ctrl.len()), body_len);
            fill(b);
            if wraps {
                let w = w.as_ptr() as *const u8;
                ptr::copy_nonoverlapping(w, at, room);
                ptr::copy_nonoverlapping(w.add(room), sq, len - room);
            }
        }
        let start = self.cur_post;
        self.cur_post = start.wrapping_add(bbs as u16);
        self.sq_wr_head = self.sq_wr_head.wrapping_add(1);
        if opc == wqe::opcode::UMR {
            self.set_wc_op(idx, wc_op);
        }
        self.set_slot(idx, wr_id, start);
        // SAFETY: idx < cnt: the WQE's first block, inside the send queue.
        let at = unsafe { self.sq_base.add(idx as usize * wqe::SEND_WQE_BB) };
        Ok(at)
    }

    /// Asks for a completion of the WQE [`QueuePair::write_raw`] wrote at `at` (sets
    /// `CQ_UPDATE` in its ctrl segment), before the doorbell that hands it over.
    pub(crate) fn set_cq_update(&mut self, at: *const u8) {
        let ring = self.sq_base as usize;
        let end = ring + self.lay.sq_wqe_cnt as usize * wqe::SEND_WQE_BB;
        let a = at as usize;
        if a < ring || a >= end || !(a - ring).is_multiple_of(wqe::SEND_WQE_BB) {
            return;
        }
        // SAFETY: `at` is the first block of a WQE in this send queue (checked above), not
        // yet handed to the device (no doorbell since it was written).
        unsafe {
            let p = self.sq_base.add(a - ring + wqe::ctrl_seg::FM_CE_SE);
            p.write(p.read() | wqe::ctrl::CQ_UPDATE);
        }
    }
}
