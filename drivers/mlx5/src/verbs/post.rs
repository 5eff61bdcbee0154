//! Posting through the verbs layer: SGEs borrowing regions, send and receive WRs, their checks.

use super::*;

/// A scatter/gather element borrowing a region.
pub struct Sge<'a, H: Hal> {
    /// The region.
    pub mr: &'a MemoryRegion<H>,
    /// Offset inside the region.
    pub offset: u64,
    /// Length.
    pub len: u32,
}

/// Local data of a send work request.
pub enum SendData<'a, H: Hal> {
    /// Gather list.
    Sges(&'a [Sge<'a, H>]),
    /// Inline bytes.
    Inline(&'a [u8]),
}

/// A send work request.
pub struct SendWr<'a, H: Hal> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub op: SendOp,
    /// Local data.
    pub data: SendData<'a, H>,
    /// Flags.
    pub flags: SendFlags,
}

/// A receive work request.
pub struct RecvWr<'a, H: Hal> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Scatter list.
    pub sges: &'a [Sge<'a, H>],
}

/// Converted SGEs and the regions they reference, on the stack and left uninitialised past
/// `n` (converting is on the hot path; zeroing 30 entries is not).
pub(super) struct SgeBuf<'b, H: Hal> {
    raw: [core::mem::MaybeUninit<RawSge>; MAX_SGE],
    refs: [core::mem::MaybeUninit<&'b Arc<MrInner<H>>>; MAX_SGE],
    n: usize,
}

impl<'b, H: Hal> SgeBuf<'b, H> {
    #[inline]
    pub(super) fn new() -> Self {
        SgeBuf {
            raw: [const { core::mem::MaybeUninit::uninit() }; MAX_SGE],
            refs: [const { core::mem::MaybeUninit::uninit() }; MAX_SGE],
            n: 0,
        }
    }
    #[inline]
    pub(super) fn raw(&self) -> &[RawSge] {
        // SAFETY: entries 0..n were written by `convert` (n <= MAX_SGE).
        unsafe { core::slice::from_raw_parts(self.raw.as_ptr() as *const RawSge, self.n) }
    }
    #[inline]
    pub(super) fn refs(&self) -> &[&'b Arc<MrInner<H>>] {
        // SAFETY: as in `raw`.
        unsafe {
            core::slice::from_raw_parts(self.refs.as_ptr() as *const &'b Arc<MrInner<H>>, self.n)
        }
    }

    /// The SGEs `start..start + len` converted so far.
    #[inline]
    pub(super) fn raw_at(&self, start: usize, len: usize) -> &[RawSge] {
        &self.raw()[start..start + len]
    }
    #[inline]
    pub(super) fn refs_at(&self, start: usize, len: usize) -> &[&'b Arc<MrInner<H>>] {
        &self.refs()[start..start + len]
    }

    /// Room for `k` more SGEs.
    #[inline]
    pub(super) fn fits(&self, k: usize) -> bool {
        self.n + k <= MAX_SGE
    }

    /// Converts borrowed SGEs to raw ones, checking context, bounds and access (the only
    /// ones, see [`SgeBuf::append`]).
    #[inline]
    pub(super) fn convert(
        &mut self,
        ctx: *const CtxInner<H>,
        sges: &[Sge<'b, H>],
        write: bool,
    ) -> Result<()> {
        if sges.len() > MAX_SGE {
            return Err(InvalidInput::TooManySge {
                given: sges.len(),
                max: MAX_SGE,
            }
            .into());
        }
        self.n = 0;
        self.append(ctx, sges, write).map(|_| ())
    }

    /// Converts borrowed SGEs after the ones converted so far (the caller checked that they
    /// [`fit`](SgeBuf::fits)), checking as [`SgeBuf::convert`]; returns where they start. A
    /// list post keeps each WR's SGEs so, converting and checking them once.
    #[inline]
    pub(super) fn append(
        &mut self,
        ctx: *const CtxInner<H>,
        sges: &[Sge<'b, H>],
        write: bool,
    ) -> Result<usize> {
        let start = self.n;
        debug_assert!(self.fits(sges.len()));
        for (i, s) in sges.iter().enumerate().take(MAX_SGE - start) {
            let r = Self::check(ctx, s, write);
            let m = match r {
                Ok(m) => m,
                Err(e) => {
                    self.n = start;
                    return Err(e);
                }
            };
            self.raw[start + i].write(RawSge {
                addr: m.iova + s.offset,
                len: s.len,
                lkey: m.key,
            });
            self.refs[start + i].write(m);
        }
        self.n = start + sges.len().min(MAX_SGE - start);
        Ok(start)
    }

    /// The region of `s` after checking context, bounds and access.
    #[inline]
    pub(super) fn check(
        ctx: *const CtxInner<H>,
        s: &Sge<'b, H>,
        write: bool,
    ) -> Result<&'b Arc<MrInner<H>>> {
        let m = s.mr.inner.as_ref().ok_or(InvalidInput::BadLkey(0))?;
        if !core::ptr::eq(Arc::as_ptr(&m.pd.ctx), ctx) {
            return Err(InvalidInput::ForeignObject.into());
        }
        match s.offset.checked_add(s.len as u64) {
            Some(end) if end <= m.len => {}
            _ => return Err(InvalidInput::OutOfRange.into()),
        }
        if write && !m.access.contains(Access::LOCAL_WRITE) {
            return Err(InvalidInput::LocalAccess.into());
        }
        Ok(m)
    }
}

/// WRs of a list post whose conversion and WQE size the check keeps for the writing.
pub(super) const BATCH_KEPT: usize = 16;

/// A region's identity for `QueuePair::post_one_sge_last`: `Arc::as_ptr` of its state, or,
/// after dereg, the address 16, which is never a region's. (`Arc::as_ptr` is the allocation
/// plus 16, and the empty `Option` is a null allocation pointer: one add covers both.)
#[inline]
pub(crate) fn region_id<H: Hal>(mr: &MemoryRegion<H>) -> *const () {
    mr.inner
        .as_ref()
        .map_or(core::ptr::without_provenance(16), |m| {
            Arc::as_ptr(m) as *const ()
        })
}

/// The arguments of a one-SGE RDMA WRITE / READ the common case did not take.
pub(super) struct OneSge<'a, H: Hal> {
    opc: u8,
    wr_id: u64,
    flags: SendFlags,
    mr: &'a MemoryRegion<H>,
    offset: u64,
    len: u32,
    remote: Remote,
}

impl<H: Hal> QueuePair<H> {
    /// Posts send work requests (any number, ONE doorbell). Every request is checked before
    /// anything is written: QP state (RTS), SGE count, inline size, regions (same context,
    /// inside bounds, LOCAL_WRITE for RDMA READ / atomic targets), 8-byte atomic buffers,
    /// room in the send queue. The regions stay referenced until the WQE completes (the QP
    /// binds each region once and stamps the binding per WR: no reference counting per WR).
    ///
    /// One RDMA WRITE or READ of one SGE takes the one-block path of
    /// [`QueuePair::post_write`] after the region checks; anything else the general path.
    // inline(always): post_send 60.0 vs 138.0 instructions (hot_path --instructions)
    #[inline(always)]
    pub fn post_send(&mut self, wrs: &[SendWr<'_, H>]) -> Result<()> {
        if let [wr] = wrs {
            if let SendData::Sges([s]) = wr.data {
                match wr.op {
                    SendOp::Write { remote, imm: None } => {
                        return self.post_one_sge(wqe::opcode::RDMA_WRITE, wr, s, remote);
                    }
                    SendOp::Read { remote } => {
                        return self.post_one_sge(wqe::opcode::RDMA_READ, wr, s, remote);
                    }
                    _ => {}
                }
            }
            return self.post_send_one(wr);
        }
        self.post_send_batch(wrs)
    }

    /// One RDMA WRITE / READ with one SGE: the region checks, then the one-block path. The
    /// common case (the region of the previous generic post, no sweep) is an identity
    /// compare ([`QueuePair::post_one_sge_last`]); anything else goes through every check
    /// again ([`QueuePair::post_one_sge_slow`]).
    // inline(always): post_send 60.0 vs 115.0 instructions (hot_path --instructions)
    #[inline(always)]
    pub(super) fn post_one_sge(
        &mut self,
        opc: u8,
        wr: &SendWr<'_, H>,
        s: &Sge<'_, H>,
        remote: Remote,
    ) -> Result<()> {
        let id = region_id(s.mr);
        let r = self.post_one_sge_last(opc, wr.wr_id, id, s.offset, s.len, remote, wr.flags);
        if let Some(r) = r {
            return r;
        }
        // Built here, so that only this path stores them.
        let a = OneSge {
            opc,
            wr_id: wr.wr_id,
            flags: wr.flags,
            mr: s.mr,
            offset: s.offset,
            len: s.len,
            remote,
        };
        self.post_one_sge_slow(&a)
    }

    /// [`QueuePair::post_one_sge`] outside the common case: every check again, then the
    /// general path.
    #[cold]
    #[inline(never)]
    pub(super) fn post_one_sge_slow(&mut self, a: &OneSge<'_, H>) -> Result<()> {
        let m = a.mr.inner.as_ref().ok_or(InvalidInput::BadLkey(0))?;
        match a.offset.checked_add(a.len as u64) {
            Some(end) if end <= m.len => {}
            _ => return Err(InvalidInput::OutOfRange.into()),
        }
        if a.opc == wqe::opcode::RDMA_READ && !m.access.contains(Access::LOCAL_WRITE) {
            return Err(InvalidInput::LocalAccess.into());
        }
        self.post_one_sge_mr(a.opc, a.wr_id, m, a.offset, a.len, a.remote, a.flags)
    }

    /// Posts a list of send work requests as [`QueuePair::post_send`] does, and names the
    /// one refused ([`PostError::index`], like `bad_wr`). Nothing of the list is posted
    /// then.
    pub fn post_send_list(&mut self, wrs: &[SendWr<'_, H>]) -> core::result::Result<(), PostError> {
        if wrs.len() == 1 {
            return self
                .post_send(wrs)
                .map_err(|error| PostError { index: 0, error });
        }
        self.post_send_batch_at(wrs)
    }

    /// Any number of WRs but one: checked all, then written, one doorbell.
    #[inline(never)]
    pub(super) fn post_send_batch(&mut self, wrs: &[SendWr<'_, H>]) -> Result<()> {
        self.post_send_batch_at(wrs).map_err(|e| e.error)
    }

    /// [`QueuePair::post_send_batch`], telling which WR failed. Each WR is converted and
    /// checked once: the first [`BATCH_KEPT`] keep their SGEs (up to [`MAX_SGE`] in all) and
    /// WQE sizes for the writing; WRs past those are converted and checked again there.
    pub(super) fn post_send_batch_at(
        &mut self,
        wrs: &[SendWr<'_, H>],
    ) -> core::result::Result<(), PostError> {
        let ctx = Arc::as_ptr(&self.ctx);
        let mut sg = SgeBuf::new();
        let mut spill = SgeBuf::new();
        // WRs 0..kept: their SGEs in `sg` in order, their WQEBB counts in `bbs`.
        let mut bbs = [0u8; BATCH_KEPT];
        let mut kept = 0;
        for (index, wr) in wrs.iter().enumerate() {
            let at = |error| PostError { index, error };
            let keep = kept == index && index < BATCH_KEPT;
            let (data, keep) = match wr.data {
                SendData::Sges(s) if keep && sg.fits(s.len()) => {
                    let start = sg.append(ctx, s, wr.op.writes_local()).map_err(at)?;
                    (Data::Sges(sg.raw_at(start, s.len())), true)
                }
                SendData::Sges(s) => {
                    spill.convert(ctx, s, wr.op.writes_local()).map_err(at)?;
                    (Data::Sges(spill.raw()), false)
                }
                SendData::Inline(b) => (Data::Inline(b), keep),
            };
            let n = self.send_wqe_bbs(&wr.op, data, false).map_err(at)?;
            if index == 0 {
                // The QP's state after the first WR's own faults, as `check_send` orders
                // them; it is the same for every WR of the list.
                self.check_can_send().map_err(at)?;
            }
            if keep {
                // bbs <= sq_max_bbs <= 16.
                bbs[index] = n as u8;
                kept += 1;
            }
        }
        if wrs.is_empty() {
            return Ok(());
        }
        if !self.sq_room(wrs.len()) {
            let index = self.sq_room_count();
            let error = InvalidInput::QueueFull.into();
            return Err(PostError { index, error });
        }
        let mut last = core::ptr::null();
        let mut start = 0;
        for (index, wr) in wrs.iter().enumerate() {
            let (data, refs, n) = if index < kept {
                match wr.data {
                    SendData::Sges(s) => {
                        start += s.len();
                        let (a, len) = (start - s.len(), s.len());
                        (
                            Data::Sges(sg.raw_at(a, len)),
                            sg.refs_at(a, len),
                            bbs[index],
                        )
                    }
                    SendData::Inline(b) => (Data::Inline(b), &[][..], bbs[index]),
                }
            } else {
                // Checked above; a failure here would be a driver bug, reported with its index.
                let at = |error| PostError { index, error };
                let (data, refs) = match wr.data {
                    SendData::Sges(s) => {
                        spill.convert(ctx, s, wr.op.writes_local()).map_err(at)?;
                        (Data::Sges(spill.raw()), spill.refs())
                    }
                    SendData::Inline(b) => (Data::Inline(b), &[][..]),
                };
                let n = self.check_send(&wr.op, data, false).map_err(at)?;
                (data, refs, n as u8)
            };
            for m in refs {
                let i = self.binding_for(m);
                self.stamp_sq(i);
            }
            last = self
                .write_send(wr.wr_id, &wr.op, wr.flags, data, u32::from(n), None)
                .0;
        }
        self.ring_send(last, None);
        // After the stamps: see `QueuePair::post_one_sge_mr`.
        self.sweep();
        Ok(())
    }

    /// One WR of any shape: converted and checked once, written, one doorbell.
    #[inline(never)]
    pub(super) fn post_send_one(&mut self, wr: &SendWr<'_, H>) -> Result<()> {
        self.post_send_one_to(wr, None)
    }

    /// One UD SEND or SEND with immediate ([`SendOp::Send`]) to `dest`, on a UD or the GSI
    /// QP: the WQE carries the datagram segment (the address handle's vector, the remote QPN
    /// and Q_Key: rdma-core qp.c `set_datagram_seg`) between its ctrl and data segments, and
    /// is checked and posted as [`QueuePair::post_send`] posts one WR. Refused before
    /// anything is written: another opcode ([`InvalidInput::ServiceType`]), a connected QP
    /// ([`InvalidInput::NotDatagram`]), a remote QPN wider than 24 bits
    /// ([`InvalidInput::RemoteQpn`]). The message must fit the path MTU (4096 bytes on a UD
    /// QP, 256 on the GSI QP) or it completes with a length error.
    pub fn post_ud_send(&mut self, wr: &SendWr<'_, H>, dest: &UdDest<'_>) -> Result<()> {
        let seg = crate::qp::datagram_seg(dest)?;
        self.post_send_one_to(wr, Some(&seg))
    }

    /// [`QueuePair::post_send_one`], with the datagram segment `dgram` when there is one.
    fn post_send_one_to(
        &mut self,
        wr: &SendWr<'_, H>,
        dgram: Option<&[u8; wqe::av::SIZE]>,
    ) -> Result<()> {
        let mut sg = SgeBuf::new();
        let data = match wr.data {
            SendData::Sges(s) => {
                sg.convert(Arc::as_ptr(&self.ctx), s, wr.op.writes_local())?;
                Data::Sges(sg.raw())
            }
            SendData::Inline(b) => Data::Inline(b),
        };
        let bbs = self.check_send(&wr.op, data, dgram.is_some())?;
        if !self.sq_room(1) {
            return Err(InvalidInput::QueueFull.into());
        }
        for m in sg.refs() {
            let i = self.binding_for(m);
            self.stamp_sq(i);
        }
        let (last, in_place) = self.write_send(wr.wr_id, &wr.op, wr.flags, data, bbs, dgram);
        self.ring_send(last, Some((bbs, in_place)));
        // After the stamps: see `QueuePair::post_one_sge_mr`.
        self.sweep();
        Ok(())
    }

    /// Posts receive work requests (checked as [`QueuePair::post_send`]; receive buffers
    /// need LOCAL_WRITE). The doorbell record is updated once.
    ///
    /// One WR of one SGE (a receive reposted as it completes) takes a one-WR step with the
    /// same checks; lists take [`QueuePair::post_recv_list`].
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_, H>]) -> Result<()> {
        if let [RecvWr { wr_id, sges: [s] }] = wrs {
            return self.post_recv_one_sge(*wr_id, s);
        }
        self.post_recv_list(wrs).map_err(|e| e.error)
    }

    /// One receive WR of one SGE: [`QueuePair::post_recv_list`]'s checks in its order (the
    /// device and the state, the SGE, the SGE count, the room), with nothing to keep between
    /// them, then the WQE and the doorbell record.
    #[inline(never)]
    fn post_recv_one_sge(&mut self, wr_id: u64, s: &Sge<'_, H>) -> Result<()> {
        let room = self.recv_room()?;
        let m = SgeBuf::check(Arc::as_ptr(&self.ctx), s, true)?;
        if self.caps().max_recv_sge == 0 {
            return Err(InvalidInput::TooManySge { given: 1, max: 0 }.into());
        }
        if room == 0 {
            return Err(InvalidInput::QueueFull.into());
        }
        let i = self.binding_for_rq(m);
        self.stamp_rq(i);
        let raw = RawSge {
            addr: m.iova + s.offset,
            len: s.len,
            lkey: m.key,
        };
        self.write_recv(wr_id, core::slice::from_ref(&raw));
        self.ring_rq();
        self.sweep();
        Ok(())
    }

    /// [`QueuePair::post_recv`], naming the refused WR ([`PostError::index`], like
    /// `bad_wr`). Nothing of the list is posted then. Each WR is converted and checked once:
    /// its SGEs are kept for the writing (past [`MAX_SGE`] SGEs in the list, the rest are
    /// converted again there).
    pub fn post_recv_list(&mut self, wrs: &[RecvWr<'_, H>]) -> core::result::Result<(), PostError> {
        let ctx = Arc::as_ptr(&self.ctx);
        // Device and state first, even for an empty list.
        let room = self
            .recv_room()
            .map_err(|error| PostError { index: 0, error })?;
        let max_sge = self.caps().max_recv_sge as usize;
        let mut sg = SgeBuf::new();
        let mut spill = SgeBuf::new();
        // WRs 0..kept have their SGEs in `sg`, in order.
        let mut kept = 0;
        for (index, w) in wrs.iter().enumerate() {
            let at = |error| PostError { index, error };
            if kept == index && sg.fits(w.sges.len()) {
                sg.append(ctx, w.sges, true).map_err(at)?;
                kept += 1;
            } else {
                spill.convert(ctx, w.sges, true).map_err(at)?;
            }
            if w.sges.len() > max_sge {
                let (given, max) = (w.sges.len(), max_sge);
                return Err(at(InvalidInput::TooManySge { given, max }.into()));
            }
        }
        if room < wrs.len() {
            let error = InvalidInput::QueueFull.into();
            return Err(PostError { index: room, error });
        }
        let mut start = 0;
        for (index, w) in wrs.iter().enumerate() {
            let n = w.sges.len();
            let (raw, refs) = if index < kept {
                start += n;
                (sg.raw_at(start - n, n), sg.refs_at(start - n, n))
            } else {
                // Checked above; a failure here would be a driver bug, reported with its index.
                spill
                    .convert(ctx, w.sges, true)
                    .map_err(|error| PostError { index, error })?;
                (spill.raw(), spill.refs())
            };
            for m in refs {
                let i = self.binding_for_rq(m);
                self.stamp_rq(i);
            }
            self.write_recv(w.wr_id, raw);
        }
        if !wrs.is_empty() {
            self.ring_rq();
        }
        // After the stamps (see `QueuePair::post_one_sge_mr`), even for an empty list.
        self.sweep();
        Ok(())
    }
}

macro_rules! copy_impls {
    ($($t:ident),*) => {$(
        impl<'a, H: Hal> Clone for $t<'a, H> {
            fn clone(&self) -> Self {
                *self
            }
        }
        impl<'a, H: Hal> Copy for $t<'a, H> {}
    )*};
}
copy_impls!(Sge, SendData, SendWr, RecvWr);
