//! Removing the stale CQEs of QPs moved to RESET or destroyed.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ptr;
use core::sync::atomic::Ordering;

use mlx5_prm::{cq_db, cqc, cqe, opcode};

use crate::cmd::{get, CmdBuf};
use crate::error::Result;
use crate::hal::Hal;
use crate::wq::WqShared;

use super::{CompletionQueue, CqShared};

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
    pub(super) fn clean_stale(&mut self) {
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
            let at = src.wrapping_add(cqe::offset::SOP_DROP_QPN) as *const u32;
            // SAFETY: a whole CQE in [ci, produced), which the device handed over (it wrote
            // every CQE before its producer counter) and the poller has not consumed.
            let sop = unsafe { ptr::read_volatile(at) };
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
