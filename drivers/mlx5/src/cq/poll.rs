//! The poller: the inline fast path over the ring and the CQ's cached QP.

use alloc::vec::Vec;
use core::ptr;
use core::sync::atomic::Ordering;

use mlx5_prm::{cq_db, cqe, wqe};

use crate::error::Result;
use crate::hal::Hal;
// For the doc links.
#[cfg(doc)]
use crate::wq::SendCursor;

use super::decode::{nop_seen, other_cqe, req_seen, send_slow, Cqe, QPN_BYTES};
use super::{CompletionQueue, WorkCompletion};

impl<H: Hal> CompletionQueue<H> {
    /// Polls up to `wc.len()` completions into `wc`; returns how many. The consumer index is
    /// written to the doorbell record once, at the end. A fatal device state is reported as
    /// an error. The event queue is checked for page requests with one owner-bit read when
    /// fewer than `wc.len()` completions were there, or the call passed the end of the ring
    /// (so at least once per pass).
    ///
    /// Per CQE (rdma-core cq.c `mlx5_poll_one`): owner bit and opcode, read barrier, then
    /// only the fields the completion needs, straight from the ring. A successful send
    /// completion of the QP the previous CQE named, for the WQE its send queue expects next,
    /// is taken with those checks alone; everything else (receives, errors, another QP,
    /// completions that cover unsignaled WRs, duplicates, garbage) goes to the full parser.
    // inline(always): poll 39.9 vs 40.8 instructions per CQE (hot_path --instructions)
    #[inline(always)]
    pub fn poll(&mut self, wc: &mut [WorkCompletion]) -> Result<usize> {
        self.shared.ctx.check_alive()?;
        let gen = self.shared.qps_gen.load(Ordering::Acquire);
        if gen != self.cached_gen {
            self.forget_cached(gen);
        }
        let start = self.ci;
        let cur = self.poll_ring(wc);
        self.consumed(start, cur, wc.len())
    }

    /// The CQEs from `start` up to `cur` are consumed (`wanted` were asked for): the consumer
    /// index moves to `cur` and is written to the doorbell record; the event queue is looked at
    /// (page requests) when fewer than `wanted` were there, or the CQEs passed the end of the
    /// ring. A full batch is followed by another call, so the check is put off by at most one
    /// pass over the ring. Returns how many were consumed.
    // inline(always): UMR cache dereg 1,290 vs 1,306 instructions per MR (reg_mr --instructions);
    // poll shows no difference
    #[inline(always)]
    fn consumed(&mut self, start: u32, cur: u32, wanted: usize) -> Result<usize> {
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
        if n < wanted || (cur ^ start) & self.cqe_cnt != 0 {
            ctx.poll_events_cheap()?;
        }
        Ok(n)
    }

    /// Polls at most one completion into `wc`; true when there was one: [`CompletionQueue::take_one`],
    /// and [`CompletionQueue::poll`] with one slot for anything it does not take.
    #[inline]
    pub(crate) fn poll_one(&mut self, wc: &mut WorkCompletion) -> Result<bool> {
        if let Some(taken) = self.take_one(Some(&mut *wc)) {
            return taken;
        }
        Ok(self.poll(core::slice::from_mut(wc))? == 1)
    }

    /// The poll fast path: the successful requester completion of this CQ's cached QP for the
    /// WQE its send queue expects next (the case a driver waiting for its own WQE meets, the
    /// driver's UMR QP, [`crate::umr`]). Owner bit and opcode, read barrier, QP number and WQE
    /// opcode, `wqe_counter` against the slot, as [`CompletionQueue::poll`]'s run loop checks
    /// them; the completion goes into `wc` when there is one (the UMR QP only needs to know
    /// its WQE succeeded), and the consumer index and event queue are handled as `poll` does
    /// with one slot: `Some(Ok(true))`. `None` for everything else (not yet written, an error
    /// CQE, another QP, a completion covering unsignaled WRs, a duplicate or garbage counter,
    /// a dead device, changed QPs): nothing consumed, nothing changed, and
    /// [`CompletionQueue::poll`]'s full checks decide it.
    // inline(always): UMR cache dereg 1,290 vs 1,316 instructions per MR, reg 1,419 vs 1,435
    // (reg_mr --instructions)
    #[inline(always)]
    pub(crate) fn take_one(&mut self, wc: Option<&mut WorkCompletion>) -> Option<Result<bool>> {
        let ctx = &self.shared.ctx;
        if ctx.check_alive().is_err()
            || self.shared.qps_gen.load(Ordering::Acquire) != self.cached_gen
        {
            return None; // `poll` reports the dead device, or refreshes the cached QP
        }
        let cnt = self.cqe_cnt;
        let cur = self.ci;
        let parity = ((cur & cnt) != 0) as u8;
        // SAFETY: cur & (cnt - 1) < cnt: a CQE of the buffer of cnt * 64 bytes `shared` owns.
        let c = Cqe(unsafe { self.buf.add((cur & (cnt - 1)) as usize * cqe::SIZE) });
        // SAFETY: as above; volatile because the device writes it (rdma-core cq.c
        // get_sw_cqe: opcode not INVALID and the owner bit of this pass; REQ is neither).
        if unsafe { c.u8(cqe::offset::OP_OWN) } & (0xf0 | cqe::OWNER_MASK)
            != cqe::opcode::REQ << 4 | parity
        {
            return None;
        }
        ctx.hal.dma_rmb();
        // SAFETY: the device handed the CQE over; offsets inside mlx5_cqe64.
        let sop_raw = unsafe { c.ne32(cqe::offset::SOP_DROP_QPN) };
        let mut q = self.cached.cursor();
        // A UMR takes its completion opcode from the slot unless this is a plain-UMR CQ.
        if sop_raw & QPN_BYTES != q.key
            || (sop_raw.to_ne_bytes()[0] == wqe::opcode::UMR && !self.plain_umr)
        {
            return None;
        }
        // SAFETY: as above.
        let counter = unsafe { c.be16(cqe::offset::WQE_COUNTER) };
        let slot = q.slot(&self.cached, counter);
        let wr_id = q.complete_next(slot, counter)?;
        self.cached.store_tail(&q);
        if let Some(wc) = wc {
            // SAFETY: the device handed the CQE over; offsets inside mlx5_cqe64.
            let byte_len = unsafe { c.be32(cqe::offset::BYTE_CNT) };
            req_seen(sop_raw).1.write(wc, wr_id, byte_len, q.qpn);
        }
        Some(self.consumed(cur, cur.wrapping_add(1), 1).map(|n| n == 1))
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
    /// is one compare of `op_own`. The cached QP's send state is worked on in a
    /// [`SendCursor`] and published once at the end.
    // inline(always): poll 39.9 vs 40.7 instructions per CQE (hot_path --instructions)
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
}
