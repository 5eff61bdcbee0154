//! Send WQEs: building, the send gate, doorbells and BlueFlame.

use super::*;

/// `fm_ce_se` for each combination of [`SendFlags`] bits (signaled 1, fence 2, solicited 4):
/// rdma-core qp.c `_mlx5_post_send` (CQ_UPDATE, SOLICITED, FENCE).
pub(super) const FM_CE_SE: [u8; 8] = {
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

/// Inline bytes a one-block SEND holds: a block less the ctrl segment and the 4-byte inline
/// header.
pub(super) const ONE_BLOCK_INLINE: usize =
    wqe::SEND_WQE_BB - wqe::ctrl_seg::SIZE - wqe::inl_data_seg::SIZE;

#[inline]
pub(super) fn fm_ce_se(flags: SendFlags) -> u8 {
    FM_CE_SE[(flags.0 & 7) as usize]
}

/// Ctrl-segment bytes 8..16 (`signature`, `dci_stream_channel_id`, `fm_ce_se`, `imm` = 0) as
/// they lie in memory, per flag combination: one 8-byte store on the fast path (an immediate
/// when the call site's flags are a constant).
pub(super) const CTRL_TAIL: [u64; 8] = {
    let mut t = [0u64; 8];
    let mut i = 0;
    while i < 8 {
        t[i] = u64::from_ne_bytes([0, 0, 0, FM_CE_SE[i], 0, 0, 0, 0]);
        i += 1;
    }
    t
};

/// Ctrl-segment bytes 0..8 as they lie in memory, with the WQE index zero:
/// `opmod_idx_opcode` (opmod 0, opcode `opc`) and `qpn_ds(qpn, ds)`, both big-endian
/// (rdma-core qp.c `_mlx5_post_send`: `ctrl->qpn_ds = htobe32(size | (qp->ibv_qp->qp_num << 8))`).
pub(super) fn ctrl_tpl(qpn: u32, ds: u8, opc: u8) -> u64 {
    let o = wqe::opmod_idx_opcode(0, 0, opc).to_be_bytes();
    let q = wqe::qpn_ds(qpn, ds).to_be_bytes();
    u64::from_ne_bytes([o[0], o[1], o[2], o[3], q[0], q[1], q[2], q[3]])
}

/// Ctrl-segment bytes 0..8 of the WQE at block `cur`: the WQE index (big-endian, bytes 1..3)
/// over a [`ctrl_tpl`].
#[inline]
pub(super) fn ctrl_head(tpl: u64, cur: u16) -> u64 {
    // Dword 0 in memory order (one byte swap on a little-endian CPU).
    let dw0 = wqe::opmod_idx_opcode(0, cur, 0).to_be() as u64;
    if cfg!(target_endian = "little") {
        tpl | dw0
    } else {
        tpl | dw0 << 32
    }
}

#[inline]
pub(super) fn put32(p: *mut u8, v: u32) {
    // SAFETY: callers pass a pointer with 4 writable bytes inside the WQE being built.
    unsafe { ptr::write_unaligned(p as *mut [u8; 4], v.to_be_bytes()) }
}
#[inline]
pub(super) fn put64(p: *mut u8, v: u64) {
    // SAFETY: callers pass a pointer with 8 writable bytes inside the WQE being built.
    unsafe { ptr::write_unaligned(p as *mut [u8; 8], v.to_be_bytes()) }
}

impl<H: Hal> QueuePair<H> {
    /// Lets send WR number `head + 1` through while the gate is open (one load and a sign
    /// test, see [`WqShared::sq_last`]); past it, when the device is alive, the QP is in RTS
    /// and has room (the gate then moves to `tail + max_send_wr - 1`).
    #[inline]
    pub(super) fn gate(&mut self, head: u32) -> Result<()> {
        let last = self.shared.sq_last.load(Ordering::Relaxed);
        if (last.wrapping_sub(head) as i32) < 0 {
            return self.refresh_limit();
        }
        Ok(())
    }

    /// The gate's slow path: the checks, then the limit moves (no call, so the fast path
    /// needs no saved registers; region releases happen on the generic paths and
    /// [`QueuePair::release_completed`]).
    #[inline]
    pub(super) fn refresh_limit(&mut self) -> Result<()> {
        self.ctx.check_alive()?;
        if !can_send(self.state) {
            return Err(InvalidInput::QpState { state: self.state }.into());
        }
        // The fast paths post RDMA WRITE / READ: a datagram QP's gate never opens.
        if self.service.is_datagram() {
            return Err(InvalidInput::ServiceType.into());
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
    #[inline]
    pub(super) fn resolve(&self, local: BoundSge<'_>, write: bool) -> Result<u64> {
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
    #[inline]
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
    #[inline]
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
    // inline(always): post_write 58.0 vs 113.0 instructions (hot_path --instructions)
    #[inline(always)]
    pub(super) fn post_bound(
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
        let base = self.put_one_sge(
            head,
            opc,
            wr_id,
            addr,
            local.len,
            local.mr.lkey_be,
            remote,
            flags,
        );
        self.ring_one(base);
        Ok(())
    }

    /// Releases the regions held only for WRs that completed (regions named by posts of
    /// the generic calls, and regions unbound with [`QueuePair::unbind_mr`]), so that their
    /// [`crate::MemoryRegion::dereg`] succeeds. The generic posting calls, `bind_mr` and
    /// `unbind_mr` do this on their own, but for the region the send posts named last (named
    /// again as a rule) and not in a one-SGE RDMA WRITE / READ on that region; the fast
    /// calls ([`QueuePair::post_write`], [`QueuePair::post_read`]) do not.
    pub fn release_completed(&mut self) {
        self.sweep_all();
    }

    /// Rings the doorbell for the one-block WQE at `base` ([`QueuePair::put_one_sge`]):
    /// BlueFlame when a half-register holds a block.
    #[inline]
    pub(crate) fn ring_one(&mut self, base: *const u8) {
        self.ring_sq(base, self.cur_post, if self.bf_one { 1 } else { 0 });
    }

    /// Writes a ctrl + raddr + data WQE (one block, never wrapping) at `cur_post` and counts
    /// it; the doorbell is the caller's ([`QueuePair::ring_one`], or the list's). The caller
    /// checked state, room and the local slice; `head` is `sq_wr_head`, `lkey_be` the key as
    /// the data segment holds it (`key.to_be()`). Also the WQE step of the general path for
    /// this shape ([`QueuePair::write_send`]).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn put_one_sge(
        &mut self,
        head: u32,
        opc: u8,
        wr_id: u64,
        addr: u64,
        len: u32,
        lkey_be: u32,
        remote: Remote,
        flags: SendFlags,
    ) -> *const u8 {
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
        base
    }

    /// A SEND / SEND with immediate / SEND with invalidate (`opc`, its ctrl `imm`: the
    /// immediate or the rkey, rdma-core qp.c `_mlx5_post_send`) of at most
    /// [`ONE_BLOCK_INLINE`] inline bytes as one block at `cur_post`, counted (the general
    /// WQE of [`QueuePair::write_send`] for this shape): ctrl, the inline segment's byte
    /// count with `MLX5_INLINE_SEG` and the bytes (rdma-core qp.c `set_data_inl_seg`).
    /// Returns the block.
    #[inline]
    pub(super) fn put_inline_send(
        &mut self,
        opc: u8,
        imm: u32,
        wr_id: u64,
        b: &[u8],
        flags: SendFlags,
    ) -> *const u8 {
        debug_assert!(b.len() <= ONE_BLOCK_INLINE);
        let cur = self.cur_post;
        let idx = cur & self.sq_mask;
        self.sq_wr_head = self.sq_wr_head.wrapping_add(1);
        self.set_slot(idx, wr_id, cur);
        self.cur_post = cur.wrapping_add(1);
        let ds = if b.is_empty() {
            1
        } else {
            1 + (b.len() + wqe::inl_data_seg::SIZE).div_ceil(16) as u8
        };
        let f = flags.0 | self.sig_all;
        let i = imm.to_be_bytes();
        let tail =
            u64::from_ne_bytes([0, 0, 0, FM_CE_SE[(f & 7) as usize], i[0], i[1], i[2], i[3]]);
        // SAFETY: idx <= sq_mask < sq_wqe_cnt: one block inside the send queue, which holds
        // the ctrl segment (16 bytes), the 4-byte inline header and up to 44 bytes.
        unsafe {
            let base = self.sq_base.add(idx as usize * wqe::SEND_WQE_BB);
            ptr::write_unaligned(
                base as *mut u64,
                ctrl_head(ctrl_tpl(self.qpn, ds, opc), cur),
            );
            ptr::write_unaligned(base.add(8) as *mut u64, tail);
            if !b.is_empty() {
                let d = base.add(wqe::ctrl_seg::SIZE);
                put32(d, b.len() as u32 | wqe::INLINE_SEG);
                ptr::copy_nonoverlapping(b.as_ptr(), d.add(wqe::inl_data_seg::SIZE), b.len());
            }
            base
        }
    }

    /// Records the WQE that starts at block `start` (slot `idx`) for the poller; call after
    /// counting the WR in `sq_wr_head`.
    #[inline]
    pub(super) fn set_slot(&self, idx: u16, wr_id: u64, start: u16) {
        // SAFETY: idx <= sq_mask and `shared.sq` has sq_mask + 1 slots; `shared` (kept by
        // this QP) owns them and never resizes them.
        let sl = unsafe { &*self.sq_slots.add(idx as usize) };
        sl.wrid.store(wr_id, Ordering::Relaxed);
        sl.meta
            .store(slot_meta(self.sq_wr_head, start), Ordering::Release);
    }

    /// WQEBBs a send WR needs, with a datagram segment (`dgram`) or without, after checking
    /// it against the QP's service type and limits.
    #[inline]
    pub(crate) fn send_wqe_bbs(&self, op: &SendOp, data: Data<'_>, dgram: bool) -> Result<u32> {
        let caps = &self.lay.caps;
        // ctrl, and the datagram segment of a datagram QP.
        let mut ds = 1 + self.check_service(op, dgram)?;
        match op {
            SendOp::Send { .. } | SendOp::SendWithInv { .. } => {}
            SendOp::Write { .. } | SendOp::Read { .. } => ds += 1,
            SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => ds += 2,
            SendOp::LocalInv { .. } => {
                // No local data (rdma-core qp.c: IBV_WR_LOCAL_INV carries no SGE).
                match data {
                    Data::Sges(s) if !s.is_empty() => {
                        return Err(InvalidInput::TooManySge {
                            given: s.len(),
                            max: 0,
                        }
                        .into())
                    }
                    Data::Inline(b) if !b.is_empty() => {
                        return Err(InvalidInput::InlineNotAllowed.into())
                    }
                    _ => {}
                }
                let bbs = wqe::wqebbs(crate::qp::LOCAL_INV_DS);
                if bbs > self.lay.sq_max_bbs {
                    return Err(InvalidInput::NoMwRoom.into());
                }
                return Ok(bbs);
            }
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
                if op.writes_local() {
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

    /// Writes one send WQE at `cur_post` (room checked by the caller), with the datagram
    /// segment `dgram` after its ctrl segment when there is one (rdma-core qp.c
    /// `_mlx5_post_send`, `IBV_QPT_UD`). Returns the WQE's first block in the ring and
    /// whether the whole WQE lies there contiguously (a BlueFlame candidate) rather than
    /// wrapping to the ring's start.
    #[inline]
    pub(crate) fn write_send(
        &mut self,
        wr_id: u64,
        op: &SendOp,
        flags: SendFlags,
        data: Data<'_>,
        bbs: u32,
        dgram: Option<&[u8; wqe::av::SIZE]>,
    ) -> (*const u8, bool) {
        // The common shape, one RDMA WRITE / READ of one SGE: the one-block WQE.
        if let (None, Data::Sges([g])) = (dgram, data) {
            let one = match *op {
                SendOp::Write { remote, imm: None } => Some((wqe::opcode::RDMA_WRITE, remote)),
                SendOp::Read { remote } => Some((wqe::opcode::RDMA_READ, remote)),
                _ => None,
            };
            if let Some((opc, remote)) = one {
                let (head, lkey_be) = (self.sq_wr_head, g.lkey.to_be());
                let base =
                    self.put_one_sge(head, opc, wr_id, g.addr, g.len, lkey_be, remote, flags);
                return (base, true);
            }
        }
        // A SEND of a few inline bytes (a response): the one-block WQE.
        if let (None, Data::Inline(b)) = (dgram, data) {
            let one = match *op {
                SendOp::Send { imm: None } => Some((wqe::opcode::SEND, 0)),
                SendOp::Send { imm: Some(v) } => Some((wqe::opcode::SEND_IMM, v)),
                SendOp::SendWithInv { rkey } => Some((wqe::opcode::SEND_INVAL, rkey)),
                _ => None,
            };
            if let (Some((opc, imm)), true) = (one, b.len() <= ONE_BLOCK_INLINE) {
                return (self.put_inline_send(opc, imm, wr_id, b, flags), true);
            }
        }
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
        if let Some(seg) = dgram {
            // SAFETY: send_wqe_bbs counted the segment's 48 bytes in the WQE's blocks.
            unsafe { ptr::copy_nonoverlapping(seg.as_ptr(), base.add(off), seg.len()) };
            off += seg.len();
        }
        let (opc, imm) = match *op {
            SendOp::SendWithInv { rkey } => (wqe::opcode::SEND_INVAL, Some(rkey)),
            SendOp::LocalInv { rkey } => {
                let body = crate::qp::local_inv_body(rkey);
                // SAFETY: send_wqe_bbs checked that the WQE's blocks (sq_max_bbs) hold the
                // ctrl segment and these LOCAL_INV_DS - 1 units.
                unsafe { ptr::copy_nonoverlapping(body.as_ptr(), base.add(off), body.len()) };
                off += body.len();
                (wqe::opcode::UMR, Some(rkey))
            }
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
        let mut fm_ce_se = fm_ce_se(SendFlags(flags.0 | self.sig_all));
        if opc == wqe::opcode::UMR && !flags.contains(SendFlags::FENCE) {
            // A UMR WQE with the small initiator fence (Linux ib/umr.c `mlx5r_umr_post_send`,
            // rdma-core's `next_fence` after a BIND_MW / LOCAL_INV).
            fm_ce_se |= wqe::fence::INITIATOR_SMALL;
        }
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
        if opc == wqe::opcode::UMR {
            self.set_wc_op(idx, crate::qp::WC_OP_LOCAL_INV);
        }
        self.set_slot(idx, wr_id, start);
        // SAFETY: idx < cnt: the WQE's first block, inside the send queue.
        let first = unsafe { self.sq_base.add(idx as usize * wqe::SEND_WQE_BB) };
        (first, in_place)
    }

    #[inline]
    pub(super) fn raddr(&self, base: *mut u8, off: &mut usize, r: Remote) {
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
    // inline(always): UMR cache reg 1,417 vs 1,431 instructions per MR (reg_mr --instructions); the
    // post rows show no difference
    #[inline(always)]
    pub(super) fn ring_sq(&mut self, last: *const u8, cur: u16, bf_bbs: u32) {
        // The BlueFlame offset alternates between the register's halves (rdma-core qp.c
        // `post_send_db`).
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
    pub(super) fn bf_blocks(&self, bbs: u32, in_place: bool) -> u32 {
        if self.use_bf && in_place && (bbs as usize) * wqe::SEND_WQE_BB <= self.bf_half {
            bbs
        } else {
            0
        }
    }

    /// True when `wrs` more WRs fit: at most `max_send_wr` WRs outstanding (which also
    /// bounds the blocks, see [`WqShared`]).
    #[inline]
    pub(crate) fn sq_room(&self, wrs: usize) -> bool {
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
                last_bbs = self.send_wqe_bbs(&wr.op, data, false)?;
                if let RawData::Sges(s) = wr.data {
                    let write = wr.op.writes_local();
                    for g in s {
                        crate::qp::check_lkey(&mrs, g, write)?;
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
            let bbs = self.send_wqe_bbs(&wr.op, data, false).unwrap_or(1);
            (last, in_place) = self.write_send(wr.wr_id, &wr.op, wr.flags, data, bbs, None);
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
    // inline(always): UMR cache reg 1,404 vs 1,435 instructions per MR without it and sweep,
    // measured together (reg_mr --instructions)
    #[inline(always)]
    pub(crate) fn reserve_sq(&mut self, wrs: usize) -> Result<()> {
        self.sweep();
        if !self.sq_room(wrs) {
            return Err(InvalidInput::QueueFull.into());
        }
        Ok(())
    }

    /// Safe layer, step 4: one doorbell for the batch (`lone`: the batch is this one WQE of
    /// `bbs` blocks, written in place or not).
    // inline(always): UMR cache reg 1,404 vs 1,428 instructions per MR, dereg 1,296 vs 1,304
    // (reg_mr --instructions)
    #[inline(always)]
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
    #[inline]
    pub(crate) fn check_can_send(&self) -> Result<()> {
        self.ctx.check_alive()?;
        if !can_send(self.state) {
            return Err(InvalidInput::QpState { state: self.state }.into());
        }
        Ok(())
    }

    /// Safe layer, step 1: checks a send WR (service type, limits, state), with a datagram
    /// segment or without (`dgram`), and returns its WQEBB count.
    #[inline]
    pub(crate) fn check_send(&self, op: &SendOp, data: Data<'_>, dgram: bool) -> Result<u32> {
        // The WR's own faults first (what it asks of this QP's type and limits), then the
        // QP's state.
        let bbs = self.send_wqe_bbs(op, data, dgram)?;
        self.check_can_send()?;
        Ok(bbs)
    }

    /// Safe layer, single RDMA WRITE / READ with one SGE, the common case: the region the
    /// previous generic send post named (no sweep: the other posts of the general path and
    /// [`QueuePair::release_completed`] release completed WRs' regions). `id` is
    /// the region's [`crate::verbs::region_id`]; `None` (nothing done) when it is not that
    /// region, and the caller takes the general path.
    ///
    /// The region passed the context check when its binding was made (`last_mr`), so the
    /// post is an identity compare, the bounds and access checks, the gate, the stamp and the
    /// one-block WQE of [`QueuePair::post_write`].
    #[allow(clippy::too_many_arguments)]
    // inline(always): post_send 60.0 vs 110.0 instructions (hot_path --instructions)
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
        if !ptr::eq(id, self.last_mr) {
            return None;
        }
        // SAFETY: `id` is `last_mr`, not null: `Arc::as_ptr` of the region the last binding
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
        let base = self.put_one_sge(head, opc, wr_id, addr, len, mr.key_be, remote, flags);
        self.ring_one(base);
        Some(Ok(()))
    }

    /// Safe layer, single RDMA WRITE / READ with one SGE of region `mr` (bounds and access
    /// checked by the caller), the general case: the context check, the gate, the region's
    /// binding and its stamp, the WQE, then a sweep (after the stamp, so that it neither
    /// releases the binding this WR just took nor one it re-takes: no release and new
    /// binding per WR on a region whose previous WRs completed).
    #[allow(clippy::too_many_arguments)]
    #[inline]
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
        let head = self.sq_wr_head;
        self.gate(head)?;
        let i = self.binding_for(mr);
        self.stamp_sq(i);
        let addr = mr.iova + offset;
        let base = self.put_one_sge(head, opc, wr_id, addr, len, mr.key_be, remote, flags);
        self.ring_one(base);
        self.sweep();
        Ok(())
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
pub(super) unsafe fn ring_db64<H: Hal>(hal: &H, off: usize, last: *const u8) {
    let mut b = [0u8; 8];
    // SAFETY: the first 8 bytes of the ctrl segment, which always sits whole in the WQE's
    // first block (only later blocks wrap).
    unsafe { ptr::copy_nonoverlapping(last, b.as_mut_ptr(), 8) };
    hal.mmio_write64(off, b);
}
