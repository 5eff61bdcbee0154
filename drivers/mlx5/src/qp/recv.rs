//! Receive WQEs and the receive doorbell record.

use super::*;

impl<H: Hal> QueuePair<H> {
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
                    crate::qp::check_lkey(&mrs, g, true)?;
                }
            }
        }
        for w in wrs {
            self.write_recv(w.wr_id, w.sges);
        }
        self.ring_rq();
        Ok(())
    }

    /// How many more send WRs fit (what [`QueuePair::sq_room`] allows).
    pub(crate) fn sq_room_count(&self) -> usize {
        let wr_tail = self.shared.sq_wr_tail.load(Ordering::Acquire);
        let outstanding = self.sq_wr_head.wrapping_sub(wr_tail) as usize;
        (self.lay.caps.max_send_wr as usize).saturating_sub(outstanding)
    }

    pub(crate) fn check_recv(&mut self, n: usize, max_sges: usize) -> Result<()> {
        let room = self.recv_room()?;
        self.sweep();
        if max_sges > self.lay.caps.max_recv_sge as usize {
            return Err(InvalidInput::TooManySge {
                given: max_sges,
                max: self.lay.caps.max_recv_sge as usize,
            }
            .into());
        }
        if n > room {
            return Err(InvalidInput::QueueFull.into());
        }
        Ok(())
    }

    /// How many more receive WRs fit, after the checks every receive WR needs (device alive,
    /// a state that takes receives, a receive queue).
    pub(crate) fn recv_room(&mut self) -> Result<usize> {
        self.ctx.check_alive()?;
        // ERR too: the device completes them with WR_FLUSH_ERR (IB spec, QP Error state;
        // Linux core/verbs.c __ib_drain_rq moves the QP to ERR, posts, and waits for that
        // flush).
        if !matches!(
            self.state,
            qp::state::INIT | qp::state::RTR | qp::state::RTS | qp::state::ERR
        ) {
            return Err(InvalidInput::QpState { state: self.state }.into());
        }
        if self.lay.rq_wqe_cnt == 0 {
            return Err(InvalidInput::QueueFull.into());
        }
        let used = self
            .rq_head
            .wrapping_sub(self.shared.rq_tail.load(Ordering::Acquire));
        Ok((self.lay.rq_wqe_cnt as usize).saturating_sub(used as usize))
    }

    pub(crate) fn write_recv(&mut self, wr_id: u64, sges: &[RawSge]) -> usize {
        let cnt = self.lay.rq_wqe_cnt;
        let idx = (self.rq_head & (cnt - 1)) as usize;
        let stride = 1usize << self.lay.rq_stride_shift;
        let max = stride / 16;
        // SAFETY: idx < cnt and the RQ occupies [0, cnt << stride_shift) of the buffer.
        let base = unsafe { self.ring.add(idx << self.lay.rq_stride_shift) };
        let mut k = 0;
        for g in sges {
            // Zero-length entries are left out (rdma-core qp.c mlx5_post_recv: `if
            // (unlikely(!wr->sg_list[i].length)) continue;`): a data segment's byte_count of
            // 0 does not mean "empty" to the device (the model reads it as 2^31 bytes).
            if g.len == 0 {
                continue;
            }
            if k == max {
                break;
            }
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
}
