//! The environment a QP's transport runs in: guest memory through the mkey table, the
//! SQ / RQ rings and the CQs.

use super::*;

// ---------------------------------------------------------------------------------------------
// The environment
// ---------------------------------------------------------------------------------------------

pub(super) struct Env<'a, 'b, 'r> {
    /// Shared with the [`Outbox`], which resolves by-reference payloads through it.
    pub(super) cell: &'a RefCell<&'b mut Hca>,
    pub(super) qpn: u32,
    /// The payload of the packet being received by reference.
    pub(super) rx: Option<&'r RefPayload>,
    /// A local failure reached the head of the SQ: the QP goes to ERR after the call.
    pub(super) fail_local: bool,
    /// The WRITE message translation kept for this call.
    pub(super) wx: &'a mut WriteXlat,
    /// WRITE payload bytes not moved yet.
    pub(super) pending: PendingMove,
    /// Every WRITE packet moves its bytes before it returns (not only a message's last).
    pub(super) flush_each: bool,
    /// The receive WQE `recv_ready` just read (with the RQ consumer index it was read at), for
    /// the same packet's `recv_write` to take instead of reading and parsing it again.
    pub(super) recv: Option<(u32, crate::wqe::RecvWqe)>,
}

pub(super) fn user_of(hca: &Hca, qpn: u32) -> KeyUser {
    let pd = hca.qps.get(qpn).map_or(0, |q| q.pd);
    KeyUser { pd, qpn }
}

pub(super) fn payload_of(hca: &Hca, qpn: u32, wr: u64) -> Result<&WrPayload, LocalFault> {
    let q = hca.qps.get(qpn).ok_or(LocalFault)?;
    let slot = q.wrs.iter().find(|s| s.wr_id == wr).ok_or(LocalFault)?;
    slot.payload.as_ref().ok_or(LocalFault)
}

/// Writes payload bytes `at..` of `src` to the checked range `r`.
pub(super) fn place(
    hca: &Hca,
    rx: Option<&RefPayload>,
    r: &crate::mr::Resolved<'_>,
    src: &RxPayload<'_>,
    at: usize,
) -> Result<(), ()> {
    let mem = &hca.mem;
    let mut off = at;
    r.for_each_piece(|bus, n| {
        let fault = crate::memory::DmaError { addr: bus, len: n };
        match src {
            RxPayload::Bytes(b) => {
                mem.write(bus, b.get(off..off + n).ok_or(fault)?)?;
            }
            RxPayload::Ref { token, .. } => {
                rx.ok_or(fault)?
                    .deliver(*token as usize + off, mem, bus, n)
                    .map_err(|_| fault)?;
            }
        }
        off += n;
        Ok::<(), crate::memory::DmaError>(())
    })
    .map_err(|_| ())
}

impl WriteXlat {
    /// The bus address of `va` when `[va, va + len)` (which [`WriteXlat::covers`]) lies in
    /// the piece where the last packet ended: the first step of [`WriteXlat::within_one`],
    /// which the packets of one piece take (the next piece is left to the general path).
    #[inline(always)]
    fn at_piece(&self, va: u64, len: u64) -> Option<u64> {
        let off = va - self.va;
        let (i, start) = self.at;
        let &(bus, n) = self.pieces.get(i)?;
        (off >= start && off + len <= start + n as u64).then(|| bus + (off - start))
    }
}

impl Env<'_, '_, '_> {
    /// Makes the held-back WRITE copy before anything else touches memory or completes (a
    /// failure here has no packet left to fail: the bytes of a run whose memory vanished
    /// meanwhile are lost, as they would be on the wire).
    pub(super) fn settle(&mut self) {
        if self.pending.len > 0 {
            let guard = self.cell.borrow();
            let _ = self.pending.flush(&*guard.mem);
        }
    }

    /// [`RespMemory::write_part`] past its common case: `len` and `end` are the packet's
    /// length and the end of its range, both checked. Out of line, so that the common case
    /// (the packets of a message that follow on) pays for none of its frame.
    #[inline(never)]
    fn write_part_general(
        &mut self,
        rkey: u32,
        va: u64,
        src: RxPayload<'_>,
        rest: u32,
        len: u64,
        end: u64,
    ) -> Result<(), AccessFault> {
        let guard = self.cell.borrow();
        let hca: &Hca = &guard;
        if !self.wx.covers(rkey, va, end) {
            self.wx.valid = false;
            let user = user_of(hca, self.qpn);
            // The rest of the message, or as much of it as a batch of packets carries, when
            // more packets follow in this call (else this packet's bytes: a frame link takes
            // each packet in a call of its own).
            let ahead = if self.flush_each {
                0
            } else {
                u64::from(rest).min(len * crate::datapath::LOOP_BATCH as u64)
            };
            let whole = len + ahead;
            let Ok(r) = hca
                .mkeys
                .resolve(rkey, va, whole, Access::REMOTE_WRITE, user)
            else {
                // The rest of the message does not translate: this packet on its own.
                let flushed = self.pending.flush(&*hca.mem);
                drop(guard);
                flushed.map_err(|_| AccessFault)?;
                return self.write(rkey, va, src);
            };
            let wx = &mut *self.wx;
            wx.pieces.clear();
            let _ = r.for_each_piece(|bus, n| {
                wx.pieces.push((bus, n));
                Ok::<(), ()>(())
            });
            (wx.valid, wx.rkey, wx.va, wx.end, wx.at) = (true, rkey, va, va + whole, (0, 0));
            wx.generation = hca.mkeys.generation();
        }
        let (mem, rx) = (&hca.mem, self.rx);
        // The payload's bus pieces in this same memory (loopback, a shared-memory pair).
        // (`token`: where this packet's bytes start in a payload that several packets share,
        // see [`crate::wire::RefPacket::more`].)
        let local = match (src, rx) {
            (
                RxPayload::Ref { token, .. },
                Some(RefPayload::Window {
                    mem: m,
                    pieces,
                    off,
                    ..
                }),
            ) if same_memory(m, mem) => Some((&pieces[..], *off + token as usize)),
            (RxPayload::Ref { token, .. }, Some(RefPayload::Own { pieces, off, .. })) => {
                Some((&pieces[..], *off + token as usize))
            }
            _ => None,
        };
        let pending = &mut self.pending;
        let mut at = 0usize;
        let one = match local {
            Some(([(bus, n)], off)) if off + len as usize <= *n => {
                // One source piece, and (usually) one destination piece.
                self.wx.within_one(va, len).map(|d| (bus + off as u64, d))
            }
            _ => None,
        };
        if let Some((s, d)) = one {
            pending
                .add(&**mem, s, d, len as usize)
                .map_err(|_| AccessFault)?;
            at = len as usize;
            if rest == 0 || self.flush_each {
                pending.flush(&**mem).map_err(|_| AccessFault)?;
            }
        } else if let Some((from, off)) = local {
            // Moved with the packets before and after it when the pieces line up. `i`, `s`
            // and `k`: the source piece, the bus address and the bytes left in it.
            let (mut i, mut start) = (0usize, 0usize);
            while from.get(i).is_some_and(|&(_, n)| start + n <= off) {
                start += from[i].1;
                i += 1;
            }
            let (mut s, mut k) = match from.get(i) {
                Some(&(bus, n)) => (bus + (off - start) as u64, n - (off - start)),
                None => return Err(AccessFault),
            };
            self.wx
                .for_range(va, len, |mut dst, mut n| {
                    while n > 0 {
                        if k == 0 {
                            i += 1;
                            (s, k) = *from.get(i).ok_or(())?;
                        }
                        let m = k.min(n);
                        pending.add(&**mem, s, dst, m)?;
                        (s, k) = (s + m as u64, k - m);
                        (dst, n, at) = (dst + m as u64, n - m, at + m);
                    }
                    Ok::<(), ()>(())
                })
                .map_err(|_| AccessFault)?;
            if rest == 0 || self.flush_each {
                pending.flush(&**mem).map_err(|_| AccessFault)?;
            }
        } else {
            pending.flush(&**mem).map_err(|_| AccessFault)?;
            self.wx
                .for_range(va, len, |bus, n| {
                    let fault = crate::memory::DmaError { addr: bus, len: n };
                    match src {
                        RxPayload::Bytes(b) => mem.write(bus, b.get(at..at + n).ok_or(fault)?)?,
                        RxPayload::Ref { token, .. } => {
                            rx.ok_or(fault)?
                                .deliver(token as usize + at, mem, bus, n)
                                .map_err(|_| fault)?;
                        }
                    }
                    at += n;
                    Ok::<(), crate::memory::DmaError>(())
                })
                .map_err(|_| AccessFault)?;
        }
        if at as u64 == len {
            Ok(())
        } else {
            Err(AccessFault)
        }
    }
}

impl ReqMemory for Env<'_, '_, '_> {
    fn gather(&mut self, wr: u64, offset: u32, dst: &mut [u8]) -> Result<(), LocalFault> {
        self.settle();
        let guard = self.cell.borrow();
        let hca: &Hca = &guard;
        let off = offset as usize;
        match payload_of(hca, self.qpn, wr)? {
            WrPayload::Bytes(b) => {
                dst.copy_from_slice(b.get(off..off + dst.len()).ok_or(LocalFault)?);
            }
            WrPayload::Pieces(p) => {
                let mut at = 0usize;
                for (bus, n) in WrPayload::sub_pieces(p, off, dst.len()).ok_or(LocalFault)? {
                    hca.mem
                        .read(bus, &mut dst[at..at + n])
                        .map_err(|_| LocalFault)?;
                    at += n;
                }
            }
        }
        Ok(())
    }

    fn scatter(&mut self, wr: u64, offset: u32, src: RxPayload<'_>) -> Result<(), LocalFault> {
        self.settle();
        let guard = self.cell.borrow();
        let hca: &Hca = &guard;
        let WrPayload::Pieces(p) = payload_of(hca, self.qpn, wr)? else {
            return Err(LocalFault);
        };
        let mut at = 0usize;
        for (bus, n) in WrPayload::sub_pieces(p, offset as usize, src.len()).ok_or(LocalFault)? {
            match src {
                RxPayload::Bytes(b) => hca.mem.write(bus, &b[at..at + n]),
                RxPayload::Ref { token, .. } => self
                    .rx
                    .ok_or(LocalFault)?
                    .deliver(token as usize + at, &hca.mem, bus, n)
                    .map_err(|_| crate::memory::DmaError { addr: bus, len: n }),
            }
            .map_err(|_| LocalFault)?;
            at += n;
        }
        Ok(())
    }

    fn atomic_result(&mut self, wr: u64, orig: u64) -> Result<(), LocalFault> {
        self.settle();
        let guard = self.cell.borrow();
        let hca: &Hca = &guard;
        let WrPayload::Pieces(p) = payload_of(hca, self.qpn, wr)? else {
            return Err(LocalFault);
        };
        let bytes = if atomic_host_endian(hca) {
            orig.to_le_bytes()
        } else {
            orig.to_be_bytes()
        };
        let mut at = 0usize;
        for (bus, n) in WrPayload::sub_pieces(p, 0, 8).ok_or(LocalFault)? {
            hca.mem
                .write(bus, &bytes[at..at + n])
                .map_err(|_| LocalFault)?;
            at += n;
        }
        Ok(())
    }
}

pub(super) fn remote_access(a: RemoteAccess) -> Access {
    match a {
        RemoteAccess::Read => Access::REMOTE_READ,
        RemoteAccess::Write => Access::REMOTE_WRITE,
        RemoteAccess::Atomic => Access::REMOTE_ATOMIC,
    }
}

impl RespMemory for Env<'_, '_, '_> {
    fn check(
        &mut self,
        rkey: u32,
        va: u64,
        len: u64,
        access: RemoteAccess,
    ) -> Result<(), AccessFault> {
        let guard = self.cell.borrow();
        let hca: &Hca = &guard;
        let write = matches!(access, RemoteAccess::Write);
        // The key translated for a WRITE of this QP before (this call or an earlier one), over
        // a range that holds this one, and no key changed since (the table's generation): the
        // checks would pass again (each only looks at the key, the QP and whether the range
        // lies within the key and its pages, and a range within one that passed does), and the
        // translation kept is the one they would give.
        let gen = hca.mkeys.generation();
        if write
            && len > 0
            && self.wx.generation == gen
            && va
                .checked_add(len)
                .is_some_and(|end| self.wx.covers(rkey, va, end))
        {
            self.wx.at = (0, 0);
            return Ok(());
        }
        let user = user_of(hca, self.qpn);
        let r = hca
            .mkeys
            .resolve(rkey, va, len, remote_access(access), user)
            .map_err(|_| AccessFault)?;
        if write {
            // The first packet of a WRITE: the key just resolved for the whole message also
            // translates the packets that follow in this call ([`WriteXlat`], which
            // `write_part` would otherwise fill by resolving the key again), as far as a
            // batch of packets of the largest MTU carries (so a huge message does not walk
            // all its pages here).
            let cap = crate::datapath::LOOP_BATCH * 4096;
            let wx = &mut *self.wx;
            wx.valid = false;
            wx.pieces.clear();
            let mut got = 0usize;
            let _ = r.for_each_piece(|bus, n| {
                wx.pieces.push((bus, n));
                got += n;
                if got >= cap {
                    Err(())
                } else {
                    Ok(())
                }
            });
            if let Some(end) = va.checked_add(got as u64) {
                (wx.valid, wx.rkey, wx.va, wx.end, wx.at) = (got > 0, rkey, va, end, (0, 0));
                wx.generation = gen;
            }
        }
        Ok(())
    }

    fn write(&mut self, rkey: u32, va: u64, src: RxPayload<'_>) -> Result<(), AccessFault> {
        self.settle();
        let mut guard = self.cell.borrow_mut();
        let hca: &mut Hca = &mut guard;
        if src.is_empty() {
            return Ok(());
        }
        let user = user_of(hca, self.qpn);
        let r = hca
            .mkeys
            .resolve(rkey, va, src.len() as u64, Access::REMOTE_WRITE, user)
            .map_err(|_| AccessFault)?;
        place(hca, self.rx, &r, &src, 0).map_err(|_| AccessFault)
    }

    fn write_part(
        &mut self,
        rkey: u32,
        va: u64,
        src: RxPayload<'_>,
        rest: u32,
    ) -> Result<(), AccessFault> {
        if src.is_empty() {
            return Ok(());
        }
        let len = src.len() as u64;
        let end = va.checked_add(len).ok_or(AccessFault)?;
        // The common case of a loopback message first: the bytes follow on from the run held
        // back, from the one source piece of the message to the destination piece where the
        // last packet ended. The same steps as the general path, in its order (the range is
        // one this call's translation of the key covers; the source bytes lie in the payload's
        // one piece; the destination in one piece of the translation; the move joins the
        // held-back run as `PendingMove::add` would join it), only without looking at the
        // HCA: nothing is moved here unless the run has to be made now.
        // (A message's first packet has no run to join: straight to the general path.)
        if let (RxPayload::Ref { token, .. }, Some(RefPayload::Own { pieces, off, .. }), true) =
            (src, self.rx, self.pending.len > 0)
        {
            if let [(bus, n)] = **pieces {
                let so = (*off as u64).checked_add(token);
                let fits = so
                    .and_then(|so| so.checked_add(len))
                    .is_some_and(|e| e <= n as u64);
                if fits && self.wx.covers(rkey, va, end) {
                    let s = bus + so.unwrap_or(0);
                    if let Some(d) = self.wx.at_piece(va, len) {
                        if self.pending.join(s, d, len as usize) {
                            if rest == 0 || self.flush_each {
                                let guard = self.cell.borrow();
                                return self.pending.flush(&*guard.mem).map_err(|_| AccessFault);
                            }
                            return Ok(());
                        }
                        // Not a continuation: the general path (which finds the same
                        // destination piece again) starts a new run.
                    }
                }
            }
        }
        self.write_part_general(rkey, va, src, rest, len, end)
    }

    /// The run at once only in the case [`RespMemory::write_part`]'s common case takes for
    /// each of its packets, where no packet can fail and none moves a byte: the call goes on
    /// after the run (`flush_each` false, and `rest` > 0, so no packet of it makes the held-back
    /// copy), the source is the one piece of a loopback payload, the translation of the key
    /// kept (or made again here) puts the whole run within the destination piece where the
    /// last packet ended, and
    /// the run either joins the run held back (as the packets joining one by one would: the
    /// joined whole not overlapping) or, none being held back, is held back itself (its source
    /// and destination not overlapping, so each packet after the first would join it).
    fn write_run(&mut self, rkey: u32, va: u64, src: RxPayload<'_>, rest: u32) -> bool {
        if self.flush_each || rest == 0 {
            return false;
        }
        let (RxPayload::Ref { token, len }, Some(RefPayload::Own { pieces, off, .. })) =
            (src, self.rx)
        else {
            return false;
        };
        let [(bus, n)] = **pieces else {
            return false;
        };
        let len64 = len as u64;
        let Some(so) = (*off as u64).checked_add(token) else {
            return false;
        };
        if len == 0 || so.checked_add(len64).is_none_or(|e| e > n as u64) {
            return false;
        }
        let Some(end) = va.checked_add(len64) else {
            return false;
        };
        if !self.wx.covers(rkey, va, end) {
            // The key translated again from the run on, for the run and as much of the
            // message after it (what the general path does for a packet the translation
            // kept does not cover); if that fails, the packets go one by one.
            let guard = self.cell.borrow();
            let hca: &Hca = &guard;
            let whole = len64 + u64::from(rest).min(len64);
            let Some(wend) = va.checked_add(whole) else {
                return false;
            };
            let user = user_of(hca, self.qpn);
            let Ok(r) = hca
                .mkeys
                .resolve(rkey, va, whole, Access::REMOTE_WRITE, user)
            else {
                return false;
            };
            let wx = &mut *self.wx;
            wx.pieces.clear();
            let _ = r.for_each_piece(|bus, n| {
                wx.pieces.push((bus, n));
                Ok::<(), ()>(())
            });
            (wx.valid, wx.rkey, wx.va, wx.end, wx.at) = (true, rkey, va, wend, (0, 0));
            wx.generation = hca.mkeys.generation();
        }
        let Some(d) = self.wx.at_piece(va, len64) else {
            return false;
        };
        let s = bus + so;
        if self.pending.len > 0 {
            return self.pending.join(s, d, len);
        }
        let apart = s.checked_add(len64).is_some_and(|e| e <= d)
            || d.checked_add(len64).is_some_and(|e| e <= s);
        if apart {
            (self.pending.src, self.pending.dst, self.pending.len) = (s, d, len);
        }
        apart
    }

    fn read(&mut self, rkey: u32, va: u64, dst: &mut [u8]) -> Result<(), AccessFault> {
        self.settle();
        let mut guard = self.cell.borrow_mut();
        let hca: &mut Hca = &mut guard;
        let user = user_of(hca, self.qpn);
        let r = hca
            .mkeys
            .resolve(rkey, va, dst.len() as u64, Access::REMOTE_READ, user)
            .map_err(|_| AccessFault)?;
        r.read(&*hca.mem, dst).map_err(|_| AccessFault)
    }

    fn atomic(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, AccessFault> {
        self.settle();
        let mut guard = self.cell.borrow_mut();
        let hca: &mut Hca = &mut guard;
        let user = user_of(hca, self.qpn);
        let r = hca
            .mkeys
            .resolve(rkey, va, 8, Access::REMOTE_ATOMIC, user)
            .map_err(|_| AccessFault)?;
        let mut orig = [0u8; 8];
        r.read(&*hca.mem, &mut orig).map_err(|_| AccessFault)?;
        let host = atomic_host_endian(hca);
        let cur = if host {
            u64::from_le_bytes(orig)
        } else {
            u64::from_be_bytes(orig)
        };
        let new = match op {
            AtomicOp::FetchAdd { add } => Some(cur.wrapping_add(add)),
            AtomicOp::CmpSwap { compare, swap } => (cur == compare).then_some(swap),
        };
        if let Some(v) = new {
            let b = if host {
                v.to_le_bytes()
            } else {
                v.to_be_bytes()
            };
            r.write(&*hca.mem, &b).map_err(|_| AccessFault)?;
        }
        Ok(cur)
    }

    fn recv_ready(&mut self) -> bool {
        self.settle();
        let mut guard = self.cell.borrow_mut();
        let hca: &mut Hca = &mut guard;
        let ci = hca.qps.get(self.qpn).map(|q| q.rq_ci);
        self.recv = match (ci, next_recv(hca, self.qpn)) {
            (Some(ci), Ok(Some(r))) => Some((ci, r)),
            _ => None,
        };
        self.recv.is_some()
    }

    fn recv_write(&mut self, offset: u32, src: RxPayload<'_>) -> Result<(), RecvFault> {
        self.settle();
        let mut guard = self.cell.borrow_mut();
        let hca: &mut Hca = &mut guard;
        // The WQE this packet's recv_ready read (guest memory does not change within one
        // device event), if the RQ has not moved on since; else read it now.
        let ci = hca.qps.get(self.qpn).map(|q| q.rq_ci);
        let r = match self.recv.take() {
            Some((at, r)) if Some(at) == ci => r,
            _ => match next_recv(hca, self.qpn) {
                Ok(Some(r)) => r,
                _ => return Err(RecvFault::Protection),
            },
        };
        let (lo, hi) = (offset as u64, offset as u64 + src.len() as u64);
        if hi > r.capacity() {
            return Err(RecvFault::TooLong);
        }
        let user = user_of(hca, self.qpn);
        let mut at = 0u64;
        for s in r.entries() {
            let (a, z) = (at.max(lo), (at + s.len).min(hi));
            if a < z {
                let res = hca
                    .mkeys
                    .resolve(s.lkey, s.addr + (a - at), z - a, Access::LOCAL_WRITE, user)
                    .map_err(|_| RecvFault::Protection)?;
                place(hca, self.rx, &res, &src, (a - lo) as usize)
                    .map_err(|_| RecvFault::Protection)?;
            }
            at += s.len;
            if at >= hi {
                break;
            }
        }
        Ok(())
    }

    fn invalidate(&mut self, rkey: u32) -> Result<(), AccessFault> {
        // SEND_WITH_INVALIDATE: the rkey's checks and state change are the window's
        // ([`crate::mw::remote_invalidate`]); a refusal NAKs with invalid request.
        let mut guard = self.cell.borrow_mut();
        // (The key table changes: the translation kept is not used again.)
        self.wx.valid = false;
        crate::mw::remote_invalidate(&mut guard, self.qpn, rkey).map_err(|_| AccessFault)
    }
}

pub(super) fn vendor_of(s: WcStatus) -> u8 {
    match s {
        WcStatus::Success => 0,
        WcStatus::LocLenErr => vendor::RECV_TOO_SMALL,
        WcStatus::LocQpOpErr => vendor::MALFORMED_WQE,
        WcStatus::LocProtErr => vendor::DMA_FAULT,
        WcStatus::WrFlushErr => vendor::FLUSH,
        WcStatus::RemInvReqErr => vendor::NAK_INVALID_REQUEST,
        WcStatus::RemAccessErr => vendor::NAK_REMOTE_ACCESS,
        WcStatus::RemOpErr => vendor::NAK_REMOTE_OPERATIONAL,
        WcStatus::RetryExcErr => vendor::RETRY_EXCEEDED,
        WcStatus::RnrRetryExcErr => vendor::RNR_EXCEEDED,
        WcStatus::LocAccessErr => vendor::RKEY_VIOLATION,
        // Statuses the RC transport never completes with.
        _ => 0,
    }
}

impl Completions for Env<'_, '_, '_> {
    fn send_done(&mut self, wr: u64, status: WcStatus) {
        self.settle();
        let mut guard = self.cell.borrow_mut();
        let hca: &mut Hca = &mut guard;
        let qpn = self.qpn;
        let Some(q) = hca.qps.get_mut(qpn) else {
            return;
        };
        let (cqn, uidx) = (q.cqn_snd, q.user_index);
        let flushing = status != WcStatus::Success || q.state == qp::state::ERR;
        // Each CQE is posted as its slot leaves the queue (no list of them is built).
        loop {
            let Some(q) = hca.qps.get_mut(qpn) else {
                return;
            };
            let Some(s) = q.wrs.front() else {
                break;
            };
            let (kind, wr_id, opcode, signaled, wqe_index, byte_len) = (
                s.kind,
                s.wr_id,
                s.opcode,
                s.signaled,
                s.wqe_index,
                s.byte_len,
            );
            let (cqe, last) = match kind {
                SlotKind::Posted if wr_id == wr => {
                    let c = match status.cqe_syndrome() {
                        None => signaled.then(|| {
                            Cqe::requester(opcode, qpn, wqe_index, byte_len).with_user_index(uidx)
                        }),
                        Some(_) if status == WcStatus::WrFlushErr => Some(flush_cqe(
                            cqe::opcode::REQ_ERR,
                            opcode,
                            qpn,
                            wqe_index,
                            uidx,
                        )),
                        Some(syn) => Some(
                            Cqe::error(
                                cqe::opcode::REQ_ERR,
                                syn,
                                vendor_of(status),
                                opcode,
                                qpn,
                                wqe_index,
                            )
                            .with_user_index(uidx),
                        ),
                    };
                    (c, true)
                }
                SlotKind::Posted => break, // not this one: a model bug; leave the queue alone
                SlotKind::Nop => {
                    let c = if flushing {
                        Some(flush_cqe(
                            cqe::opcode::REQ_ERR,
                            opcode,
                            qpn,
                            wqe_index,
                            uidx,
                        ))
                    } else {
                        signaled.then(|| {
                            Cqe::requester(opcode, qpn, wqe_index, 0).with_user_index(uidx)
                        })
                    };
                    (c, false)
                }
                SlotKind::Failed(..) => break,
            };
            q.wrs.pop_front();
            if let Some(c) = cqe {
                post_cqe(hca, cqn, &c);
            }
            if last {
                break;
            }
        }
        let Some(q) = hca.qps.get_mut(qpn) else {
            return;
        };
        if status == WcStatus::Success
            && matches!(q.wrs.front(), Some(s) if s.kind != SlotKind::Posted)
        {
            // What follows is local: the caller retires it after the call.
            self.fail_local = true;
        }
        let ctr = match status {
            WcStatus::RetryExcErr => Some(Counter::RetriesExceeded),
            WcStatus::RnrRetryExcErr => Some(Counter::RnrRetriesExceeded),
            _ => None,
        };
        if let Some(c) = ctr {
            hca.port.counters().bump(c);
            crate::counter::add_for_qp(hca, qpn, c, 1);
        }
    }

    fn recv_done(&mut self, c: RecvCompletion) {
        self.settle();
        let mut guard = self.cell.borrow_mut();
        let hca: &mut Hca = &mut guard;
        let qpn = self.qpn;
        let Some(q) = hca.qps.get_mut(qpn) else {
            return;
        };
        let (cqn, uidx, remote) = (q.cqn_rcv, q.user_index, q.remote_qpn);
        let counter = q.rq_ci as u16;
        q.rq_ci = q.rq_ci.wrapping_add(1);
        let cq = match c.status.cqe_syndrome() {
            None => {
                let op = match (c.kind, c.imm.is_some()) {
                    (RecvKind::WriteImm, _) => cqe::opcode::RESP_WR_IMM,
                    (RecvKind::Send, true) => cqe::opcode::RESP_SEND_IMM,
                    // The invalidated rkey in `imm_inval_pkey` (rdma-core cq.c
                    // MLX5_CQE_RESP_SEND_INV: IBV_WC_WITH_INV, `invalidated_rkey`).
                    (RecvKind::Send, false) if c.invalidated.is_some() => {
                        cqe::opcode::RESP_SEND_INV
                    }
                    (RecvKind::Send, false) => cqe::opcode::RESP_SEND,
                };
                let mut x = Cqe::success(op, qpn, counter, c.byte_len)
                    .with_user_index(uidx)
                    .with_remote_qpn(remote)
                    .with_solicited(c.solicited);
                if let Some(i) = c.imm.or(c.invalidated) {
                    x = x.with_imm(i);
                }
                x
            }
            Some(syn) => Cqe::error(
                cqe::opcode::RESP_ERR,
                syn,
                vendor_of(c.status),
                0,
                qpn,
                counter,
            )
            .with_user_index(uidx)
            .with_remote_qpn(remote),
        };
        post_cqe(hca, cqn, &cq);
    }
}
