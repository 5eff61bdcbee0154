//! The wire side: what the transport emits goes out as frames or by-reference packets, and
//! [`with_rc`] runs a QP's transport with its environment.

use super::*;

// ---------------------------------------------------------------------------------------------
// The wire side
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
pub(super) enum Out {
    Frame(Vec<u8>),
    Ref(RefPacket),
}

pub(super) struct Outbox<'a, 'b, 'h> {
    /// The object tables, shared with the [`Env`] (the work requests' payloads, the keys).
    pub(super) objs: &'a RefCell<&'b mut Objects>,
    pub(super) mem: &'a Arc<dyn GuestMemory>,
    /// The port's loopback queue.
    pub(super) loopq: &'a mut VecDeque<RefPacket>,
    pub(super) qpn: u32,
    /// The last work request whose payload was looked up (its packets follow each other).
    pub(super) last: Option<(u64, WrPayload)>,
    /// A work request's message bytes `lo..hi` proved guest memory in this call.
    pub(super) checked: Option<(u64, usize, usize)>,
    pub(super) by_ref: bool,
    /// Loopback: by-reference packets go straight onto the port's loopback queue (nothing
    /// takes them off it before the call returns).
    pub(super) local: bool,
    pub(super) hdr: &'h RoceHeaders,
    /// The port's MAC (the frames' source).
    pub(super) mac: [u8; 6],
    pub(super) sgid: [u8; 16],
    pub(super) out: &'h mut Vec<Out>,
}

impl Tx for Outbox<'_, '_, '_> {
    fn send_run(&mut self, run: &TxRun) -> bool {
        if !self.local || run.n == 0 || run.n > RefPacket::MAX_PACKETS {
            return false;
        }
        let (off, each, n) = (run.offset as usize, run.each as usize, run.n);
        let Some(len) = each.checked_mul(n as usize) else {
            return false;
        };
        // The bytes must be this work request's, proved guest memory in this call (what
        // resolve_ref checks for each packet); else the packets go one by one.
        let (Some((lw, lp)), Some((cw, lo, hi))) = (&self.last, self.checked) else {
            return false;
        };
        let WrPayload::Pieces(p) = lp else {
            return false;
        };
        if *lw != run.wr || cw != run.wr || each == 0 || off < lo || off + len > hi {
            return false;
        }
        let q = &mut *self.loopq;
        if let Some(b) = q.back_mut() {
            if b.count() + n <= RefPacket::MAX_PACKETS
                && continues(b, &run.bth, self.sgid, p, off, each)
            {
                let m = b.count();
                if let RefPayload::Own { len: blen, .. } = &mut b.payload {
                    *blen += len;
                }
                b.acks |= run.acks << m;
                b.more += n;
                return true;
            }
        }
        let mut pkt = RefPacket::one(
            self.sgid,
            run.bth,
            PktExt::None,
            RefPayload::Own {
                pieces: p.clone(),
                off,
                len,
            },
        );
        (pkt.more, pkt.acks) = (n - 1, run.acks);
        q.push_back(pkt);
        true
    }

    fn send(&mut self, bth: &Bth, ext: &ExtHdrs, payload: TxPayload<'_>) -> Result<(), LocalFault> {
        if self.by_ref {
            if self.local && std::ptr::eq(ext, &NO_EXT) && self.extend(bth, &payload) {
                return Ok(());
            }
            // The payload stays where it is: resolve its source to bus pieces now (the DMA
            // check a gather would make), and let the receiver move it with one copy.
            let p = {
                let objs = self.objs.borrow();
                resolve_ref(
                    &objs,
                    self.mem,
                    self.qpn,
                    payload.src,
                    payload.len,
                    &mut self.last,
                    &mut self.checked,
                    self.local,
                )
            };
            let payload = p.ok_or(LocalFault)?;
            let pkt = RefPacket::one(self.sgid, *bth, PktExt::new(ext), payload);
            if self.local {
                self.loopq.push_back(pkt);
            } else {
                self.out.push(Out::Ref(pkt));
            }
            return Ok(());
        }
        let mut h = *self.hdr;
        h.eth.src = self.mac;
        h.bth = *bth;
        h.ext = *ext;
        let mut buf = Vec::with_capacity(payload.len + 128);
        let r = h
            .encode_for_payload(payload.len, &mut buf)
            .map_err(|_| LocalFault)?;
        if payload.len > 0 {
            (payload.fill)(&mut buf[r])?;
        }
        h.seal_icrc(&mut buf).map_err(|_| LocalFault)?;
        self.out.push(Out::Frame(buf));
        Ok(())
    }
}

impl Outbox<'_, '_, '_> {
    /// Loopback: adds a packet without extension headers to the entry at the tail of the
    /// loopback queue when it continues that entry's packets (same BTH but the next PSN, the
    /// same opcode and length, the next bytes of the same work request's message, which this
    /// call already proved guest memory), so it does not take an entry of its own
    /// ([`RefPacket::more`]). Returns whether it did.
    fn extend(&mut self, bth: &Bth, payload: &TxPayload<'_>) -> bool {
        let Some(PayloadSrc::Wqe { wr, offset }) = payload.src else {
            return false;
        };
        let (off, len) = (offset as usize, payload.len);
        let (Some((lw, lp)), Some((cw, lo, hi))) = (&self.last, self.checked) else {
            return false;
        };
        let WrPayload::Pieces(p) = lp else {
            return false;
        };
        if *lw != wr || cw != wr || len == 0 || off < lo || off + len > hi {
            return false;
        }
        let Some(b) = self.loopq.back_mut() else {
            return false;
        };
        let n = b.count();
        if n >= RefPacket::MAX_PACKETS || !continues(b, bth, self.sgid, p, off, len) {
            return false;
        }
        if let RefPayload::Own { len: blen, .. } = &mut b.payload {
            *blen += len;
        }
        b.acks |= (bth.ack_req as u64) << n;
        b.more = n;
        true
    }
}

/// Whether a packet with `bth` (no extension header) and the `len` bytes at `off` of the
/// message whose pieces are `p` comes right after the packets of entry `b` of the loopback
/// queue: same BTH but the next PSN, same opcode and length, the next bytes of the same
/// message, the same sender.
#[inline]
fn continues(
    b: &RefPacket,
    bth: &Bth,
    sgid: [u8; 16],
    p: &Arc<[(u64, usize)]>,
    off: usize,
    len: usize,
) -> bool {
    let RefPayload::Own {
        pieces,
        off: boff,
        len: blen,
    } = &b.payload
    else {
        return false;
    };
    let n = b.count();
    let (x, y) = (&b.bth, bth);
    x.opcode == y.opcode
        && x.dest_qp == y.dest_qp
        && y.psn == crate::roce::psn_add(x.psn, n)
        && (x.solicited, x.mig_req, x.tver, x.p_key, x.resv8a, x.resv7)
            == (y.solicited, y.mig_req, y.tver, y.p_key, y.resv8a, y.resv7)
        && b.ext == PktExt::None
        && b.src_gid == sgid
        && Arc::ptr_eq(pieces, p)
        && *boff + *blen == off
        && *blen == n as usize * len
}

/// Runs `f` on QP `qpn`'s transport with its environment, then sends what it emitted, adds
/// its counters to the port's and handles an error it entered. Returns whether the head of
/// the QP's SQ record may be a local slot for [`retire_local`] to complete (`false` only when
/// it was seen not to be: empty, or a posted work request).
#[must_use]
pub(super) fn with_rc<'r>(
    hca: &mut Dp<'_>,
    qpn: u32,
    rx: Option<&'r RefPayload>,
    f: impl FnOnce(&mut RcQp, Nanos, &mut Env<'_, '_, 'r>, &mut dyn Tx),
) -> bool {
    let now = hca.port.now_ns();
    let key_generation = hca.objects.mkeys.generation();
    let by_ref_link = hca.port.by_ref();
    let mac = hca.mac();
    let Some(q) = hca.objects.qps.get_mut(qpn) else {
        return true;
    };
    let Some(mut rc) = q.rc.take() else {
        return true;
    };
    let (route, sgid) = (q.route, q.sgid);
    let (objects, sink, port) = hca.split();
    let mem = sink.mem;
    let cell = RefCell::new(objects);
    let (fail_local, bumps) = {
        // The call borrows the state's spare buffers in place (nothing moved in or out).
        let st = &mut *rc;
        // Carried over from another call only while no key changed since.
        st.wx.valid = st.wx.valid && st.wx.generation == key_generation;
        let mut tx = Outbox {
            objs: &cell,
            mem,
            loopq: &mut port.loopq,
            qpn,
            last: None,
            checked: None,
            by_ref: route == Route::Local || by_ref_link,
            local: route == Route::Local,
            hdr: &st.hdr,
            mac,
            sgid,
            out: &mut st.out,
        };
        let mut env = Env {
            objs: &cell,
            sink,
            bumps: Vec::new(),
            qpn,
            rx,
            fail_local: false,
            wx: &mut st.wx,
            pending: PendingMove::default(),
            flush_each: true,
            recv: None,
        };
        f(&mut st.qp, now, &mut env, &mut tx);
        env.settle();
        (env.fail_local, env.bumps)
    };
    for c in bumps {
        hca.port.counters().bump(c);
    }
    // Counters.
    // Nearly every call moves none of the seven event counters below: compare them first (the
    // comparisons the loop makes, without building its table or copying the counter sets).
    // Equivalent: the loop adds only where `new > old`, which implies `new != old`; and
    // `seen_req` / `seen_resp` are read only for these seven fields, which are already equal
    // when nothing moved.
    let (r, s) = (rc.qp.requester.counters(), rc.qp.responder.counters());
    let (r0, s0) = (&rc.seen_req, &rc.seen_resp);
    let moved = r.retransmitted != r0.retransmitted
        || r.timeouts != r0.timeouts
        || r.rnr_naks != r0.rnr_naks
        || r.seq_naks != r0.seq_naks
        || s.rnr_naks != s0.rnr_naks
        || s.duplicates != s0.duplicates
        || s.out_of_sequence != s0.out_of_sequence;
    if moved {
        let c = hca.port.counters();
        let (r, s) = (*r, *s);
        let (r0, s0) = (rc.seen_req, rc.seen_resp);
        for (ctr, new, old) in [
            (Counter::Retransmits, r.retransmitted, r0.retransmitted),
            (Counter::LocalAckTimeout, r.timeouts, r0.timeouts),
            (Counter::RnrNakReceived, r.rnr_naks, r0.rnr_naks),
            (Counter::PacketSeqErr, r.seq_naks, r0.seq_naks),
            (Counter::RnrNakSent, s.rnr_naks, s0.rnr_naks),
            (Counter::DuplicateRequest, s.duplicates, s0.duplicates),
            (
                Counter::OutOfSequence,
                s.out_of_sequence,
                s0.out_of_sequence,
            ),
        ] {
            if new > old {
                c.add(ctr, new - old);
                crate::objects::counter::add_for_qp(hca.objects, qpn, ctr, new - old);
            }
        }
        rc.seen_req = r;
        rc.seen_resp = s;
    }
    let error = rc.qp.is_error();
    let cause = rc.qp.responder.error_cause();
    // A READ reply still streaming: on loopback the engine continues it right after the
    // packets just emitted; on a link the timer poll continues it (READ_BURST per poll).
    if rc.qp.responder.has_pending_reads()
        && route == Route::Local
        && !hca.port.kicks.contains(&qpn)
    {
        hca.port.kicks.push_back(qpn);
    }
    // Send what the transport emitted (loopback packets are on the queue already, so on
    // loopback there is nothing here).
    if !rc.out.is_empty() {
        for o in rc.out.drain(..) {
            match o {
                Out::Frame(fr) => hca.port.send_frame(fr),
                Out::Ref(pkt) if route == Route::Local => hca.port.loopq.push_back(pkt),
                Out::Ref(pkt) => hca.port.send_ref(pkt),
            }
        }
    }
    let (in_err, local_head) = match hca.objects.qps.get_mut(qpn) {
        Some(q) => {
            q.rc = Some(rc);
            let local = q.wrs.front().is_some_and(|s| s.kind != SlotKind::Posted);
            (q.state == qp::state::ERR, local)
        }
        None => (false, true),
    };
    if (error || fail_local) && !in_err {
        if let Some(nak) = cause {
            let ev = match nak {
                NakCode::RemoteAccessError => event::WQ_ACCESS_ERROR,
                NakCode::RemoteOperationalError => event::WQ_CATAS_ERROR,
                _ => event::WQ_INVAL_REQ_ERROR,
            };
            post_qp_event(hca, ev, qpn);
        }
        if error {
            enter_error(hca, qpn);
        }
        return true;
    }
    local_head
}

/// Whether message bytes `off..end` of `pieces` (`end` within them) are guest memory.
pub(super) fn check_pieces(
    mem: &dyn GuestMemory,
    pieces: &[(u64, usize)],
    off: usize,
    end: usize,
) -> bool {
    let mut at = 0usize;
    for &(bus, n) in pieces {
        let (lo, hi) = (at.max(off), (at + n).min(end));
        if lo < hi && mem.check(bus + (lo - at) as u64, hi - lo).is_err() {
            return false;
        }
        at += n;
        if at >= end {
            break;
        }
    }
    true
}

/// The payload of a by-reference packet: the bus pieces (or inline bytes) its source names.
#[allow(clippy::too_many_arguments)]
pub(super) fn resolve_ref(
    objs: &Objects,
    mem: &Arc<dyn GuestMemory>,
    qpn: u32,
    src: Option<PayloadSrc>,
    len: usize,
    last: &mut Option<(u64, WrPayload)>,
    checked: &mut Option<(u64, usize, usize)>,
    own: bool,
) -> Option<RefPayload> {
    if len == 0 {
        return Some(RefPayload::None);
    }
    let mut pieces = Vec::new();
    match src? {
        PayloadSrc::Remote { rkey, va } => {
            let user = user_of(objs, qpn);
            let r = objs
                .mkeys
                .resolve(rkey, va, len as u64, Access::REMOTE_READ, user)
                .ok()?;
            memory_pieces(&**mem, &r, &mut pieces).ok()?;
        }
        PayloadSrc::Wqe { wr, offset } => {
            let off = offset as usize;
            // Looked up once per work request and call, then borrowed (no reference counted
            // per packet).
            if !matches!(last, Some((id, _)) if *id == wr) {
                *last = Some((wr, payload_of(objs, qpn, wr).ok()?.clone()));
            }
            let wp = &last.as_ref()?.1;
            match wp {
                WrPayload::Bytes(b) => {
                    return Some(RefPayload::Bytes(b.get(off..off + len)?.to_vec()));
                }
                WrPayload::Pieces(p) => {
                    // Still guest memory (it may have gone since the WQE was taken): if not,
                    // the send fails locally, as a gather would. Checked once per call for the
                    // rest of the message (memory does not change during one device event),
                    // else for this packet alone.
                    let end = off.checked_add(len)?;
                    let done =
                        matches!(*checked, Some((w, lo, hi)) if w == wr && lo <= off && end <= hi);
                    if !done {
                        let total: usize = p.iter().map(|x| x.1).sum();
                        if end > total {
                            return None;
                        }
                        if check_pieces(&**mem, p, off, total) {
                            *checked = Some((wr, off, total));
                        } else if !check_pieces(&**mem, p, off, end) {
                            return None;
                        }
                    }
                    return Some(if own {
                        RefPayload::Own {
                            pieces: p.clone(),
                            off,
                            len,
                        }
                    } else {
                        RefPayload::Window {
                            mem: mem.clone(),
                            pieces: p.clone(),
                            off,
                            len,
                        }
                    });
                }
            }
        }
    }
    let total: usize = pieces.iter().map(|p| p.1).sum();
    (total == len).then(|| RefPayload::Mem {
        mem: mem.clone(),
        pieces,
    })
}

// ---------------------------------------------------------------------------------------------
// Entry points for the datapath
