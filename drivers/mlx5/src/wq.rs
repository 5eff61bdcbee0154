//! Send and receive queue bookkeeping shared with the CQ poller: the slot ring and the send gate.
//! Shared by the queue pairs ([`crate::qp`]) and the Ethernet queues ([`crate::eth`]).

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

/// What the poller needs about the send WQE that starts at one index: a plain ring indexed
/// by the WQE counter (rdma-core qp.c keeps `wrid[]` and `wqe_head[]` the same way). One cache
/// line per slot, like a WQE block: the poster writes slot `k` while the poller reads slot
/// `k - 1` on another core without sharing a line, and the poster addresses both rings with
/// one scaled index.
#[repr(align(64))]
pub(crate) struct SqSlot {
    pub(crate) wrid: AtomicU64,
    /// [`slot_meta`]`(wr_end, start)`: bits 0..16 the WQE's first block (`cur_post` when it
    /// was written, what the CQE's `wqe_counter` names), bits 16..48 the WR count after the WR
    /// (the `max_send_wr` accounting of rdma-core qp.c `mlx5_wq_overflow`, which counts WRs,
    /// not blocks). The expected completion (the next WR, starting where the CQE says) is one
    /// 64-bit compare.
    pub(crate) meta: AtomicU64,
    /// The completion opcode of a UMR WQE (BIND_MW or LOCAL_INV, [`crate::mw`]), saved when it
    /// was posted: the CQE names only the WQE opcode (UMR), and rdma-core cq.c
    /// `handle_good_req` takes `wr_data[idx]` saved by qp.c `_mlx5_post_send`. Written and read
    /// only for UMR WQEs, so the other send paths never touch it.
    pub(crate) wc_op: AtomicU8,
}

/// [`SqSlot::meta`] of the WQE that starts at block `start` and brings the WR count to
/// `wr_end`.
#[inline]
pub(crate) fn slot_meta(wr_end: u32, start: u16) -> u64 {
    (wr_end as u64) << 16 | start as u64
}

/// The poller's working copy of one QP's send-completion state for the length of a poll call
/// (`cq.rs`): the completed-WR tail lives in a register and is written back once per call
/// ([`WqShared::store_tail`]) or before anything else looks at it.
#[derive(Clone, Copy)]
pub(crate) struct SendCursor {
    /// [`WqShared::qpn_key`].
    pub(crate) key: u32,
    /// The QP number.
    pub(crate) qpn: u32,
    /// `WqShared::sq`'s slots (`mask + 1` of them, never fewer than one).
    pub(crate) slots: *const SqSlot,
    pub(crate) mask: u32,
    /// `slot_meta(tail + 1, 0)`, where `tail` is the count of WRs completed: the meta of the
    /// next WR to complete, but for its first block.
    pub(crate) next: u64,
}

impl SendCursor {
    /// The slot of the WQE that starts at block `counter` (what a CQE's `wqe_counter` names);
    /// `q` is the `WqShared` the cursor was taken from.
    #[inline]
    pub(crate) fn slot<'q>(&self, q: &'q WqShared, counter: u16) -> &'q SqSlot {
        debug_assert!(core::ptr::eq(q.sq.as_ptr(), self.slots));
        let i = counter as u32 & self.mask;
        // SAFETY: the index is at most `mask`, and `slots` has `mask + 1` entries owned by
        // `q` (the cursor was taken from it), which never resizes them.
        unsafe { &*self.slots.add(i as usize) }
    }

    /// A send completion at WQE counter `counter`, the fast case only: the next WR, whose WQE
    /// starts where the CQE says (one compare). Its wr_id, or `None` for anything else
    /// (completions that cover unsignaled WRs, and every bad CQE), which then goes to
    /// [`SendCursor::complete_slow`].
    #[inline]
    pub(crate) fn complete_next(&mut self, slot: &SqSlot, counter: u16) -> Option<u64> {
        if slot.meta.load(Ordering::Acquire) != self.next | counter as u64 {
            return None;
        }
        // After 2^32 WRs this carries into bit 48, which no slot holds: that one completion
        // takes the full check, which starts the count over (`set_tail`).
        self.next += slot_meta(1, 0);
        Some(slot.wrid.load(Ordering::Relaxed))
    }

    /// The full check: the slot records a WQE that starts at `counter` and whose WR count lies
    /// in `(tail, tail + max_send_wr]`. Returns the wr_id and the new tail.
    #[cold]
    #[inline(never)]
    pub(crate) fn complete_slow(
        q: &WqShared,
        slot: &SqSlot,
        tail: u32,
        counter: u16,
    ) -> Option<(u64, u32)> {
        let meta = slot.meta.load(Ordering::Acquire);
        let wr_end = (meta >> 16) as u32;
        if meta as u16 != counter || wr_end.wrapping_sub(tail).wrapping_sub(1) >= q.sq_max_wr {
            return None;
        }
        Some((slot.wrid.load(Ordering::Relaxed), wr_end))
    }

    /// [`SendCursor::complete_next`], else [`SendCursor::complete_slow`].
    #[inline]
    pub(crate) fn complete(&mut self, q: &WqShared, counter: u16) -> Option<u64> {
        let slot = self.slot(q, counter);
        if let Some(w) = self.complete_next(slot, counter) {
            return Some(w);
        }
        let (wr_id, tail) = Self::complete_slow(q, slot, self.tail(), counter)?;
        self.set_tail(tail);
        Some(wr_id)
    }

    /// The completed-WR count.
    #[inline]
    pub(crate) fn tail(&self) -> u32 {
        ((self.next >> 16) as u32).wrapping_sub(1)
    }

    /// Moves the completed-WR count (after [`SendCursor::complete_slow`]).
    #[inline]
    pub(crate) fn set_tail(&mut self, tail: u32) {
        self.next = slot_meta(tail.wrapping_add(1), 0);
    }
}

/// Work-queue state the CQ poller shares with the poster: wr_ids and counters.
///
/// Send-queue room is accounted in WRs only: every WQE is at most `sq_max_bbs` blocks and
/// `max_send_wr = sq_wqe_cnt / sq_max_bbs`, so `max_send_wr` outstanding WRs never occupy more
/// than the ring (the same argument as rdma-core's `max_post`).
pub(crate) struct WqShared {
    pub(crate) qpn: u32,
    /// Bytes 1..4 of a CQE's `sop_drop_qpn` for this QP, as an in-memory `u32` with byte 0
    /// (the opcode) clear: the poller compares the raw dword against it.
    pub(crate) qpn_key: u32,
    pub(crate) sq: Vec<SqSlot>,
    pub(crate) sq_mask: u32,
    /// `max_send_wr`: how far past the tail an outstanding WR can be.
    pub(crate) sq_max_wr: u32,
    /// WRs completed (moved by the poller).
    pub(crate) sq_wr_tail: AtomicU32,
    /// The send gate: the last WR count the fast path may reach. It posts while
    /// `sq_last - head >= 0` (as `i32`, a sign test); past it `QueuePair::gate` rechecks the
    /// device, the state and the room, and moves it (`tail + max_send_wr - 1` in RTS). The
    /// poster closes it (sets it to `head - 1`) whenever the state or the head moves
    /// otherwise, and a dying device closes every QP's gate ([`WqShared::close_gate`]), so the
    /// fast path's one load covers all three checks.
    pub(crate) sq_last: AtomicU32,
    pub(crate) rq_wrid: Vec<AtomicU64>,
    pub(crate) rq_mask: u32,
    pub(crate) rq_head: AtomicU32,
    pub(crate) rq_tail: AtomicU32,
    /// Receive completions name their WQE by the CQE's `wqe_counter` (the Ethernet RQ, as
    /// Linux en_rx.c `mlx5e_handle_rx_cqe` finds its buffer), not by order (RC receive
    /// queues, as rdma-core cq.c `handle_responder` takes `wq->tail`).
    pub(crate) rq_by_counter: bool,
    /// CQEs of this QP to remove (rdma-core cq.c `__mlx5_cq_clean`): `(cqn, producer
    /// counter)` pairs, one per CQ and per move to RESET or destroy, taken by that CQ's
    /// poller (cq.rs `clean_stale`), off its fast path.
    pub(crate) stale: spin::Mutex<Vec<(u32, u32)>>,
    /// The QP was destroyed: once its stale CQEs are gone, the CQs' pollers drop it from their
    /// lists.
    pub(crate) retired: core::sync::atomic::AtomicBool,
}

impl WqShared {
    /// The shared state of a new work queue numbered `qpn`: `sq_slots` send slots (the send
    /// ring's blocks, a power of two), at most `sq_max_wr` send WRs outstanding, and
    /// `rq_slots` receive slots (a power of two, at least one); every counter at zero and the
    /// send gate closed.
    pub(crate) fn new(qpn: u32, sq_slots: u32, sq_max_wr: u32, rq_slots: u32) -> WqShared {
        WqShared {
            qpn,
            qpn_key: WqShared::key(qpn),
            sq: (0..sq_slots)
                .map(|_| SqSlot {
                    wrid: AtomicU64::new(0),
                    meta: AtomicU64::new(0),
                    wc_op: AtomicU8::new(0),
                })
                .collect(),
            sq_mask: sq_slots - 1,
            sq_max_wr,
            sq_wr_tail: AtomicU32::new(0),
            sq_last: AtomicU32::new(u32::MAX),
            rq_wrid: (0..rq_slots).map(|_| AtomicU64::new(0)).collect(),
            rq_mask: rq_slots - 1,
            rq_head: AtomicU32::new(0),
            rq_tail: AtomicU32::new(0),
            rq_by_counter: false,
            stale: spin::Mutex::new(Vec::new()),
            retired: core::sync::atomic::AtomicBool::new(false),
        }
    }

    /// [`WqShared::new`] of a receive queue whose completions name their WQE by its counter
    /// ([`WqShared::rq_by_counter`]; the Ethernet RQ).
    pub(crate) fn new_recv_by_counter(qpn: u32, rq_slots: u32) -> WqShared {
        WqShared {
            rq_by_counter: true,
            ..WqShared::new(qpn, 1, 0, rq_slots)
        }
    }

    /// A stand-in that matches no CQE (its number is beyond 24 bits; one empty slot, so a
    /// cursor over it keeps the invariant `slots = mask + 1`).
    pub(crate) fn placeholder() -> WqShared {
        WqShared {
            qpn: u32::MAX,
            // Never matches: byte 0 is set (raw dwords are masked to bytes 1..4 first).
            qpn_key: u32::from_ne_bytes([0xff, 0, 0, 0]),
            sq: alloc::vec![SqSlot {
                wrid: AtomicU64::new(0),
                meta: AtomicU64::new(0),
                wc_op: AtomicU8::new(0),
            }],
            sq_mask: 0,
            sq_max_wr: 0,
            sq_wr_tail: AtomicU32::new(0),
            sq_last: AtomicU32::new(u32::MAX),
            rq_wrid: Vec::new(),
            rq_mask: 0,
            rq_head: AtomicU32::new(0),
            rq_tail: AtomicU32::new(0),
            rq_by_counter: false,
            stale: spin::Mutex::new(Vec::new()),
            retired: core::sync::atomic::AtomicBool::new(false),
        }
    }

    /// [`WqShared::qpn_key`] of QP `qpn`.
    pub(crate) fn key(qpn: u32) -> u32 {
        let b = qpn.to_be_bytes();
        u32::from_ne_bytes([0, b[1], b[2], b[3]])
    }

    /// The poller's cursor over this QP's send completions (see [`SendCursor`]).
    #[inline]
    pub(crate) fn cursor(&self) -> SendCursor {
        SendCursor {
            key: self.qpn_key,
            qpn: self.qpn,
            slots: self.sq.as_ptr(),
            mask: self.sq_mask,
            next: slot_meta(self.sq_wr_tail.load(Ordering::Relaxed).wrapping_add(1), 0),
        }
    }

    /// Publishes the cursor's tail (the poster reads it for room).
    #[inline]
    pub(crate) fn store_tail(&self, c: &SendCursor) {
        self.sq_wr_tail.store(c.tail(), Ordering::Release);
    }

    /// A send completion at WQE counter `counter`, outside a poll loop's cursor.
    #[inline]
    pub(crate) fn complete_send(&self, counter: u16) -> Option<u64> {
        let mut c = self.cursor();
        let r = c.complete(self, counter);
        self.store_tail(&c);
        r
    }

    /// The completion opcode saved for the UMR WQE that starts at block `counter`
    /// ([`SqSlot::wc_op`]; 0 for a UMR posted without one).
    pub(crate) fn umr_wc_op(&self, counter: u16) -> u8 {
        self.sq
            .get((counter as u32 & self.sq_mask) as usize)
            .map_or(0, |s| s.wc_op.load(Ordering::Acquire))
    }

    /// A receive completion: the oldest outstanding receive's wr_id.
    #[inline]
    pub(crate) fn complete_recv(&self) -> Option<u64> {
        let tail = self.rq_tail.load(Ordering::Relaxed);
        if tail == self.rq_head.load(Ordering::Acquire) {
            return None;
        }
        let wr_id = self
            .rq_wrid
            .get((tail & self.rq_mask) as usize)?
            .load(Ordering::Relaxed);
        self.rq_tail.store(tail.wrapping_add(1), Ordering::Release);
        Some(wr_id)
    }

    /// Records, for the poller, the send WQE of a work queue posted outside this module (the
    /// Ethernet SQ, [`crate::eth`]) that starts at block `start` and brings the WR count to
    /// `wr_end`: what [`crate::qp::QueuePair`]'s posts record in their slot.
    pub(crate) fn record_send(&self, start: u16, wr_end: u32, wr_id: u64) {
        if let Some(sl) = self.sq.get((start as u32 & self.sq_mask) as usize) {
            sl.wrid.store(wr_id, Ordering::Relaxed);
            sl.meta.store(slot_meta(wr_end, start), Ordering::Release);
        }
    }

    /// Send WRs completed (the poller's tail).
    pub(crate) fn send_tail(&self) -> u32 {
        self.sq_wr_tail.load(Ordering::Acquire)
    }

    /// A receive completion of WQE counter `counter` (16 bits) on a queue that names WQEs by
    /// counter: that WQE's wr_id, the WQEs before it completed too (the device takes them in
    /// order, so a completion that never came, or came garbled, is behind it). `None` for a
    /// counter that names no outstanding WQE.
    pub(crate) fn complete_recv_at(&self, counter: u16) -> Option<u64> {
        let tail = self.rq_tail.load(Ordering::Relaxed);
        let head = self.rq_head.load(Ordering::Acquire);
        let pos = tail.wrapping_add(counter.wrapping_sub(tail as u16) as u32);
        if pos.wrapping_sub(tail) >= head.wrapping_sub(tail) {
            return None;
        }
        let wr_id = self
            .rq_wrid
            .get((pos & self.rq_mask) as usize)?
            .load(Ordering::Relaxed);
        self.rq_tail.store(pos.wrapping_add(1), Ordering::Release);
        Some(wr_id)
    }

    /// Records the receive WR `head` (its wr_id) of a work queue posted outside this module
    /// (the Ethernet RQ) and publishes the head past it, for [`WqShared::complete_recv`];
    /// call after the WQE is written and before the doorbell record.
    pub(crate) fn record_recv(&self, head: u32, wr_id: u64) {
        if let Some(w) = self.rq_wrid.get((head & self.rq_mask) as usize) {
            w.store(wr_id, Ordering::Relaxed);
        }
        self.rq_head.store(head.wrapping_add(1), Ordering::Release);
    }

    /// Receive WRs completed (the poller's tail).
    pub(crate) fn recv_tail(&self) -> u32 {
        self.rq_tail.load(Ordering::Acquire)
    }

    /// Closes the send gate from outside the poster (the device died): the next post takes
    /// the slow path. The head lies at or past the tail, so a limit far below the tail closes
    /// the gate whatever the head is.
    pub(crate) fn close_gate(&self) {
        let tail = self.sq_wr_tail.load(Ordering::Relaxed);
        self.sq_last
            .store(tail.wrapping_sub(1 << 30), Ordering::Relaxed);
    }

    /// Every counter back to zero, the send gate closed and the send slots cleared (a work
    /// queue moved to RESET).
    pub(crate) fn reset(&self) {
        for a in [&self.sq_wr_tail, &self.rq_head, &self.rq_tail] {
            a.store(0, Ordering::Release);
        }
        // Closed (head 0).
        self.sq_last.store(u32::MAX, Ordering::Release);
        for sl in &self.sq {
            sl.meta.store(0, Ordering::Relaxed);
        }
    }
}

impl crate::context::SendGate for WqShared {
    fn close_gate(&self) {
        WqShared::close_gate(self)
    }
}
