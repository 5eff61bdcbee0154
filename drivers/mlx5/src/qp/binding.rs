//! Regions a QP references: explicit bindings and the ones posted WRs hold until completion.

use super::*;

/// A region a QP references: bound by [`QueuePair::bind_mr`] (held while its [`BoundMr`]
/// handle lives), or named by posted WRs (held until they completed). While the QP holds it,
/// [`crate::MemoryRegion::dereg`] reports [`Error::Busy`].
pub(crate) struct Binding<H: Hal> {
    pub(super) mr: Option<Arc<MrInner<H>>>,
    /// Held for a [`BoundMr`] handle (never released or reused while the handle lives),
    /// rather than for posted WRs.
    pub(super) explicit: bool,
    /// Send WR count after the last send WR that named the region.
    pub(super) last_sq: u32,
    /// Receive WR count after the last receive WR that named the region.
    pub(super) last_rq: u32,
}

/// Tags that tell QPs apart for [`BoundMr`] handles: never reused, so a handle of a destroyed
/// QP is refused by every other QP.
pub(super) static NEXT_QP_TAG: AtomicU64 = AtomicU64::new(1);

/// A region bound to one QP ([`QueuePair::bind_mr`]): a pre-validated handle carrying what a
/// post needs (address, length, key), so posting through it is a tag compare, a bounds check
/// and the WQE. The QP keeps the region registered while the handle lives, and until the WRs
/// posted before [`QueuePair::unbind_mr`] completed. Not `Clone`: unbinding consumes it.
#[derive(Debug, PartialEq, Eq)]
pub struct BoundMr {
    pub(super) tag: u64,
    pub(super) index: u32,
    /// The local key as the data segment holds it (big-endian in memory order).
    pub(super) lkey_be: u32,
    pub(super) iova: u64,
    pub(super) len: u64,
    pub(super) local_write: bool,
}

impl BoundMr {
    /// A scatter/gather element over `[offset, offset + len)` of the region (checked when
    /// posted).
    #[inline]
    pub fn sge(&self, offset: u64, len: u32) -> BoundSge<'_> {
        BoundSge {
            mr: self,
            offset,
            len,
        }
    }
    /// The region's local key.
    pub fn lkey(&self) -> u32 {
        u32::from_be(self.lkey_be)
    }
    /// The region's first address.
    pub fn addr(&self) -> u64 {
        self.iova
    }
    /// The region's length.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// Never true (regions are not empty).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A slice of a bound region, for the fast posting calls ([`QueuePair::post_write`],
/// [`QueuePair::post_read`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoundSge<'a> {
    /// The region.
    pub mr: &'a BoundMr,
    /// Offset inside the region.
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
}

impl<H: Hal> QueuePair<H> {
    /// While a WR that named binding `b` may still be outstanding, which WRs it waits for:
    /// `(true, n)` for the receive WR `n` after the tail, else `(false, n)` for the send WR
    /// `n` after it (a stamp lies in `(tail, tail + max]`: exact for counters within 2^32
    /// WRs; an older stamp can only read as busy, never as free too early). `None`: free.
    pub(super) fn binding_wait(
        &self,
        b: &Binding<H>,
        sq_tail: u32,
        rq_tail: u32,
    ) -> Option<(bool, u32)> {
        let rq_ahead = b.last_rq.wrapping_sub(rq_tail);
        if rq_ahead.wrapping_sub(1) < self.lay.rq_wqe_cnt {
            return Some((true, rq_ahead));
        }
        let sq_ahead = b.last_sq.wrapping_sub(sq_tail);
        (sq_ahead.wrapping_sub(1) < self.lay.caps.max_send_wr).then_some((false, sq_ahead))
    }

    pub(super) fn tails(&self) -> (u32, u32) {
        (
            self.shared.sq_wr_tail.load(Ordering::Acquire),
            self.shared.rq_tail.load(Ordering::Acquire),
        )
    }

    /// Frees binding slot `i` (WR-held only), dropping the region reference.
    pub(super) fn free_binding(&mut self, i: usize) {
        if let Some(b) = self.bindings.get_mut(i) {
            if !b.explicit && b.mr.take().is_some() {
                self.auto_live -= 1;
                if i == self.last_binding {
                    self.last_mr = ptr::null();
                }
                if i == self.rq_last_binding {
                    self.rq_last_mr = ptr::null();
                }
            }
        }
    }

    /// Writes the last binding's send stamp (`last_stamp`) into it.
    pub(super) fn flush_stamp(&mut self) {
        if !self.last_mr.is_null() {
            if let Some(b) = self.bindings.get_mut(self.last_binding) {
                b.last_sq = self.last_stamp;
            }
        }
    }

    /// Releases the regions that only completed WRs referenced, but the region the send posts
    /// named last: a send post names it again as a rule, and keeping it spares a stream of
    /// posts a release and a new binding per WR ([`QueuePair::release_completed`] releases
    /// it too, and so does any sweep once another region took its place). Cheap when
    /// nothing is held for WRs, or too few WRs completed since the last sweep for any held
    /// region to be free (`sweep_room`).
    // inline(always): UMR cache reg 1,404 vs 1,435 instructions per MR without it and reserve_sq,
    // measured together (reg_mr --instructions)
    #[inline(always)]
    pub(crate) fn sweep(&mut self) {
        if self.auto_live == 0 {
            return;
        }
        let t = self.tails();
        if self.nothing_free(t) {
            return;
        }
        let keep = if self.last_mr.is_null() {
            usize::MAX
        } else {
            self.last_binding
        };
        self.sweep_slow(t, keep);
    }

    /// Releases every region that only completed WRs referenced.
    // inline(always): a QP that holds no region pays one compare (the UMR QP's
    // release_completed after each UMR)
    #[inline(always)]
    pub(crate) fn sweep_all(&mut self) {
        if self.auto_live == 0 {
            return;
        }
        let t = self.tails();
        if self.swept_kept == usize::MAX && self.nothing_free(t) {
            return;
        }
        self.sweep_slow(t, usize::MAX);
    }

    /// True while fewer WRs completed since the last sweep than the nearest release needs
    /// (`sweep_room`): every region it left held is still busy. (The region it kept back is
    /// the send posts' last one; a change of that region voids the room, `binding_for_slow`.)
    #[inline(always)]
    fn nothing_free(&self, t: (u32, u32)) -> bool {
        t.0.wrapping_sub(self.swept.0) < self.sweep_room.0
            && t.1.wrapping_sub(self.swept.1) < self.sweep_room.1
    }

    /// Releases every completed WR-held binding but `keep`, and records what it kept back
    /// and how many more WRs must complete before a binding still held can be free: for
    /// each, the WRs up to its receive stamp (or its send stamp when no receive holds it);
    /// stamps only move forward, so none is free before the nearest of these completed.
    #[cold]
    pub(super) fn sweep_slow(&mut self, (sq_tail, rq_tail): (u32, u32), keep: usize) {
        self.flush_stamp();
        self.swept = (sq_tail, rq_tail);
        self.swept_kept = usize::MAX;
        let mut room = (u32::MAX, u32::MAX);
        for i in 0..self.bindings.len() {
            let b = &self.bindings[i];
            if b.mr.is_none() || b.explicit {
                continue;
            }
            match self.binding_wait(b, sq_tail, rq_tail) {
                Some((true, n)) => room.1 = room.1.min(n),
                Some((false, n)) => room.0 = room.0.min(n),
                None if i == keep => self.swept_kept = i,
                None => self.free_binding(i),
            }
        }
        self.sweep_room = room;
    }

    /// A slot for a new binding of `mr` (a free one, or a new one at the end).
    pub(super) fn add_binding(&mut self, mr: &Arc<MrInner<H>>, explicit: bool) -> usize {
        let (sq_tail, rq_tail) = self.tails();
        let b = Binding {
            mr: Some(mr.clone()),
            explicit,
            last_sq: sq_tail,
            last_rq: rq_tail,
        };
        if !explicit {
            self.auto_live += 1;
        }
        // The next sweep looks at it.
        self.sweep_room = (0, 0);
        let i = match self.bindings.iter().position(|b| b.mr.is_none()) {
            Some(i) => {
                self.bindings[i] = b;
                i
            }
            None => {
                self.bindings.push(b);
                self.bindings.len() - 1
            }
        };
        i
    }

    /// The binding that keeps `mr` alive for a posted WR (found, or made): one pointer
    /// compare when the previous post named the same region, no reference counting per WR.
    #[inline]
    pub(crate) fn binding_for(&mut self, mr: &Arc<MrInner<H>>) -> usize {
        if ptr::eq(Arc::as_ptr(mr) as *const (), self.last_mr) {
            return self.last_binding;
        }
        self.binding_for_slow(mr)
    }

    #[cold]
    pub(super) fn binding_for_slow(&mut self, mr: &Arc<MrInner<H>>) -> usize {
        self.flush_stamp();
        let i = self.find_or_add(mr);
        if self.swept_kept != usize::MAX && self.swept_kept != i {
            // The region the last sweep kept back is no longer the one to keep.
            self.sweep_room = (0, 0);
        }
        self.last_binding = i;
        self.last_mr = Arc::as_ptr(mr) as *const ();
        self.last_stamp = self.bindings[i].last_sq;
        i
    }

    /// The binding of `mr` (found, or made for WRs).
    fn find_or_add(&mut self, mr: &Arc<MrInner<H>>) -> usize {
        let found = self
            .bindings
            .iter()
            .position(|b| b.mr.as_ref().is_some_and(|m| Arc::ptr_eq(m, mr)));
        match found {
            Some(i) => i,
            None => self.add_binding(mr, false),
        }
    }

    /// [`QueuePair::binding_for`] for a receive WR: one pointer compare when the previous
    /// receive post named the same region (receives keep their own last region, so that
    /// receives and sends on different regions do not evict each other's).
    #[inline]
    pub(crate) fn binding_for_rq(&mut self, mr: &Arc<MrInner<H>>) -> usize {
        if ptr::eq(Arc::as_ptr(mr) as *const (), self.rq_last_mr) {
            return self.rq_last_binding;
        }
        self.binding_for_rq_slow(mr)
    }

    #[cold]
    fn binding_for_rq_slow(&mut self, mr: &Arc<MrInner<H>>) -> usize {
        let i = self.find_or_add(mr);
        self.rq_last_binding = i;
        self.rq_last_mr = Arc::as_ptr(mr) as *const ();
        i
    }

    /// Marks binding `i` as referenced by the send WR being posted now.
    #[inline]
    pub(crate) fn stamp_sq(&mut self, i: usize) {
        let seq = self.sq_wr_head.wrapping_add(1);
        if i == self.last_binding && !self.last_mr.is_null() {
            self.last_stamp = seq;
        } else if let Some(b) = self.bindings.get_mut(i) {
            b.last_sq = seq;
        }
    }

    /// Marks binding `i` as referenced by the receive WR being posted now.
    #[inline]
    pub(crate) fn stamp_rq(&mut self, i: usize) {
        let seq = self.rq_head.wrapping_add(1);
        if let Some(b) = self.bindings.get_mut(i) {
            b.last_rq = seq;
        }
    }

    /// Binds `mr` to this QP for the fast posting calls ([`QueuePair::post_write`],
    /// [`QueuePair::post_read`]): the QP keeps the region registered (its
    /// [`crate::MemoryRegion::dereg`] fails with [`Error::Busy`]) while the returned handle
    /// lives, and until the WRs posted before [`QueuePair::unbind_mr`] completed, or until the
    /// QP is destroyed.
    pub fn bind_mr(&mut self, mr: &crate::region::MemoryRegion<H>) -> Result<BoundMr> {
        let m = mr.inner_arc().ok_or(InvalidInput::BadLkey(0))?;
        if !Arc::ptr_eq(&m.pd.ctx, &self.ctx) {
            return Err(InvalidInput::ForeignObject.into());
        }
        self.sweep();
        let i = self.add_binding(m, true);
        Ok(BoundMr {
            tag: self.tag,
            index: i as u32,
            lkey_be: m.key.to_be(),
            iova: m.iova,
            len: m.len,
            local_write: m.access.contains(Access::LOCAL_WRITE),
        })
    }

    /// Ends a [`QueuePair::bind_mr`] binding. The region stays referenced until every WR
    /// posted so far completed (then [`crate::MemoryRegion::dereg`] succeeds). Refuses a
    /// handle of another QP ([`InvalidInput::UnboundRegion`]; that QP keeps its binding until
    /// it is destroyed).
    pub fn unbind_mr(&mut self, h: BoundMr) -> Result<()> {
        if h.tag != self.tag {
            return Err(InvalidInput::UnboundRegion.into());
        }
        let (sq_head, rq_head) = (self.sq_wr_head, self.rq_head);
        self.flush_stamp();
        // A live handle of this QP always names its own binding (never freed or reused
        // before the handle comes back here).
        let Some(b) = self.bindings.get_mut(h.index as usize) else {
            return Err(Error::Internal);
        };
        if !b.explicit || b.mr.is_none() {
            return Err(Error::Internal);
        }
        // From now on held for the WRs posted so far.
        b.explicit = false;
        b.last_sq = sq_head;
        b.last_rq = rq_head;
        if h.index as usize == self.last_binding {
            self.last_stamp = sq_head;
        }
        self.auto_live += 1;
        let t = self.tails();
        self.sweep_slow(t, usize::MAX);
        Ok(())
    }
}
