//! Raw send WQEs: a ctrl segment and a body the caller builds (the UMR WQEs of [`crate::umr`] and
//! the application's BIND_MW of [`crate::mw`]), written into the send queue apart from the verbs
//! post path of `send.rs`.

use super::send::fm_ce_se;
use super::*;

impl<H: Hal> QueuePair<H> {
    /// Posts one signaled WQE of opcode `opc` whose ctrl `imm` is `imm` and whose segments
    /// after the ctrl segment are `body` (a multiple of 16 bytes): the UMR WQEs of
    /// [`crate::umr`] (Linux ib/umr.c `mlx5r_umr_post_send`: ctrl `imm` = the mkey, fence
    /// `MLX5_FENCE_MODE_INITIATOR_SMALL`). Not a hot path: its own function, so the send
    /// paths stay as they are.
    pub(crate) fn post_raw(&mut self, wr_id: u64, opc: u8, imm: u32, body: &[u8]) -> Result<()> {
        let at = self.write_raw(wr_id, opc, imm, body)?;
        self.ring_send(at, None);
        Ok(())
    }

    /// [`QueuePair::post_raw`] without the doorbell: returns the WQE's first block, for
    /// [`QueuePair::ring_send`] once after several (one doorbell for a batch of UMRs).
    pub(crate) fn write_raw(
        &mut self,
        wr_id: u64,
        opc: u8,
        imm: u32,
        body: &[u8],
    ) -> Result<*const u8> {
        let f = wqe::fence::INITIATOR_SMALL | wqe::ctrl::CQ_UPDATE;
        self.write_raw_with(wr_id, opc, imm, body, f, 0)
    }

    /// The completion opcode of the UMR WQE in slot `idx` ([`SqSlot::wc_op`]).
    #[inline]
    pub(crate) fn set_wc_op(&self, idx: u16, op: u8) {
        // SAFETY: idx <= sq_mask and `shared.sq` has sq_mask + 1 slots (as `set_slot`).
        let sl = unsafe { &*self.sq_slots.add(idx as usize) };
        sl.wc_op.store(op, Ordering::Release);
    }

    /// Posts one UMR WQE of the application's (BIND_MW, [`crate::mw`]): `flags` as for any
    /// send WR (with `sq_sig_all`), the small initiator fence unless the WR asks for a fence
    /// (Linux ib/umr.c `mlx5r_umr_post_send`; rdma-core fences the WQE after a bind), and
    /// the completion opcode `wc_op` saved for the poller.
    pub(crate) fn post_umr_wr(
        &mut self,
        wr_id: u64,
        imm: u32,
        body: &[u8],
        flags: SendFlags,
        wc_op: u8,
    ) -> Result<()> {
        let mut f = fm_ce_se(SendFlags(flags.0 | self.sig_all));
        if !flags.contains(SendFlags::FENCE) {
            f |= wqe::fence::INITIATOR_SMALL;
        }
        let at = self.write_raw_with(wr_id, wqe::opcode::UMR, imm, body, f, wc_op)?;
        self.ring_send(at, None);
        Ok(())
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

    /// [`QueuePair::write_raw`] with the ctrl segment's `fm_ce_se` and the completion opcode
    /// saved for the poller ([`SqSlot::wc_op`], 0: none).
    pub(crate) fn write_raw_with(
        &mut self,
        wr_id: u64,
        opc: u8,
        imm: u32,
        body: &[u8],
        fm_ce_se: u8,
        wc_op: u8,
    ) -> Result<*const u8> {
        // The copy writes every byte of the body: nothing to clear first.
        self.write_raw_body::<false>(wr_id, opc, imm, body.len(), fm_ce_se, wc_op, |b| {
            b.copy_from_slice(body)
        })
    }

    /// [`QueuePair::write_raw_with`] whose body (`body_len` bytes, a multiple of 16) `fill`
    /// writes straight into the send queue: no body is built apart and copied. The slot's old
    /// bytes are not cleared first: `fill` must write every byte of the body itself, padding
    /// included. A WQE that wraps the ring is filled on the stack (over zeros) and copied in
    /// two pieces.
    ///
    /// With `RESERVED`, one WR of several the caller checked together: it called
    /// [`QueuePair::check_can_send`] and reserved room for all of them
    /// ([`QueuePair::reserve_sq`]) before writing the first (the UMR batches, one check per
    /// doorbell instead of one per WQE); the state check and the room reservation are left
    /// out here. The body's size is checked either way.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn write_raw_body<const RESERVED: bool>(
        &mut self,
        wr_id: u64,
        opc: u8,
        imm: u32,
        body_len: usize,
        fm_ce_se: u8,
        wc_op: u8,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<*const u8> {
        if !RESERVED {
            self.check_can_send()?;
        }
        if !body_len.is_multiple_of(wqe::SEND_WQE_DS) {
            return Err(InvalidInput::OutOfRange.into());
        }
        let ds = 1 + body_len / wqe::SEND_WQE_DS;
        let bbs = wqe::wqebbs(ds as u32);
        if ds > wqe::CTRL_DS_MASK as usize || bbs > self.lay.sq_max_bbs {
            return Err(InvalidInput::OutOfRange.into());
        }
        if !RESERVED {
            // [`QueuePair::reserve_sq`] of one WR, inline.
            self.sweep();
            if !self.sq_room(1) {
                return Err(InvalidInput::QueueFull.into());
            }
        }
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
            // One call of `fill` (so that it is inlined), into the ring or, for a WQE that
            // wraps, into `w`.
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

    /// Asks for a completion of the WQE [`QueuePair::write_raw_with`] wrote at `at` (sets
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
