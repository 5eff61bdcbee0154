//! RC QPs on the transport: the environment [`RcQp`] runs in inside the model (guest memory
//! through the mkey table, the SQ / RQ rings, the CQs), the QP context → transport
//! configuration, and the packet path between a QP and the port ([`crate::wire`]).
//!
//! It follows the integration guide in roce/rc.rs: SQ doorbell → [`RcQp::post`] each new WQE
//! and [`RcQp::pump`]; a packet received for a QP → [`RcQp::receive`]; timer →
//! [`RcQp::pump`] when [`RcQp::next_deadline`] has passed. Time is the port's clock
//! ([`crate::wire::Port::now_ns`]), passed in.
//!
//! # QP context → transport
//!
//! | transport | `mlx5_ifc_qpc_bits` / `mlx5_ifc_ads_bits` field |
//! |---|---|
//! | `ReqConfig::dest_qp`, `RespConfig::dest_qp` | `remote_qpn` |
//! | `mtu` | `mtu` (1..5 = 256 << (n - 1), Linux `enum ib_mtu`) |
//! | `ReqConfig::sq_psn` | `next_send_psn` (RTR2RTS) |
//! | `RespConfig::rq_psn` | `next_rcv_psn` (INIT2RTR) |
//! | `ReqConfig::ack_timeout` | `primary_address_path.ack_timeout` (RTR2RTS) |
//! | `retry_count`, `rnr_retry` | `retry_count`, `rnr_retry` (RTR2RTS) |
//! | `max_rd_atomic` | `1 << log_sra_max` (Linux hw/mlx5/qp.c `__mlx5_ib_modify_qp` sets `log_sra_max = ilog2(max_rd_atomic)`) |
//! | `max_dest_rd_atomic` | `1 << log_rra_max` (likewise `ilog2(max_dest_rd_atomic)`) |
//! | `ack_req_every` | `1 << log_ack_req_freq` |
//! | `min_rnr_timer` | `min_rnr_nak` |
//! | `remote_read` / `remote_write` | `rre` / `rwe` |
//! | `remote_atomic` | `rae` and an `atomic_mode` covering 8 bytes |
//!
//! The frame headers come from the primary address path as Linux hw/mlx5/qp.c
//! `mlx5_set_path` fills it for RoCE: destination MAC `rmac_47_32`/`rmac_31_0`, source IP
//! the GID at `src_addr_index`, destination IP `rgid_rip`, IPv4 when both GIDs are
//! IPv4-mapped (RoCE v2 over IPv4) else IPv6, TTL / hop limit `hop_limit`, DSCP `dscp`
//! (IPv6 traffic class `dscp << 2`, flow label `flow_label`), DF set (rxe_net.c
//! `prepare_ipv4_hdr`), UDP source port `udp_sport`; the source MAC is the port's.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use mlx5_prm::{ads, cqe, event, qp, qpc};

use crate::datapath::cq::{post_cqe, post_cqe_to};
use crate::datapath::wqe::{Gather, SendWqe};
use crate::datapath::Dp;
use crate::datapath::{
    atomic_host_endian, atomic_mode_covers, flush_cqe, flush_new_work, lkey_vendor, memory_pieces,
    next_recv, post_qp_event, vendor,
};
use crate::events::Sink;
use crate::memory::GuestMemory;
use crate::objects::cq::Cqe;
use crate::objects::mr::{Access, KeyUser};
use crate::objects::qp::{Qp, Route};
use crate::objects::Objects;
use crate::roce::counters::Counter;
use crate::roce::rc::RcQp;
use crate::roce::requester::{
    ReqConfig, ReqCounters, Requester, WorkRequest, WrOp, DEFAULT_MAX_UNACKED_PSNS,
};
use crate::roce::responder::{AckPolicy, RespConfig, RespCounters, Responder};
use crate::roce::transport::{
    AccessFault, AtomicOp, Completions, LocalFault, Nanos, PayloadSrc, RecvCompletion, RecvFault,
    RecvKind, RemoteAccess, ReqMemory, RespMemory, RxPacket, RxPayload, Tx, TxPayload, TxRun,
    WcStatus,
};
use crate::roce::NO_EXT;
use crate::roce::{
    Bth, EthHdr, ExtHdrs, IpHdr, Ipv4Hdr, Ipv6Hdr, NakCode, Opcode, RoceHeaders, UdpHdr,
};
use crate::wire::{same_memory, Arrival, PktExt, RefPacket, RefPayload};

pub(crate) use crate::objects::qp::wr::{SlotKind, WrPayload, WrSlot};

/// A QP's transport state in the model.
#[derive(Debug)]
pub(crate) struct RcState {
    pub qp: RcQp,
    /// Per-QP counters already added to the port's (only the seven event counters `with_rc`
    /// adds are kept current; the other fields may be stale).
    seen_req: ReqCounters,
    seen_resp: RespCounters,
    /// Frame headers (BTH / extension headers replaced per packet).
    hdr: RoceHeaders,
    /// Spare buffer for what one transport call emits (kept, so no call allocates one).
    out: Vec<Out>,
    /// Spare translation buffer for the calls' [`WriteXlat`] (kept for its allocation only).
    wx: WriteXlat,
}

impl RcState {
    /// The transport's event counters (requester, responder).
    pub(crate) fn counters(&self) -> (ReqCounters, RespCounters) {
        (*self.qp.requester.counters(), *self.qp.responder.counters())
    }
}

/// Payload moves of consecutive WRITE packets that follow each other in both the sender's and
/// the receiver's bus addresses (one guest memory: loopback, a shared-memory pair), held back
/// to be made as one copy. Packets are still received one by one (PSN, opcode, length and key
/// checks, ACKs); only the bytes of a run move together, before the packet that ends it
/// returns: the message's last packet, the last packet of a transport call, or a packet whose
/// bytes do not follow on. Runs whose source and destination overlap are not joined, so the
/// bytes that land are those of per-packet copies. A copy that fails fails the packet that
/// made it, which belongs to the same message as every packet of the run.
#[derive(Debug, Default)]
pub(crate) struct PendingMove {
    src: u64,
    dst: u64,
    len: usize,
}

impl PendingMove {
    /// Adds the move of `n` bytes from `src` to `dst` if it joins the run held back (one
    /// held, and the new bytes follow on from it on both sides, the joined run's source and
    /// destination not overlapping): the case in which [`PendingMove::add`] makes no copy.
    /// Else changes nothing and returns false.
    #[inline(always)]
    fn join(&mut self, src: u64, dst: u64, n: usize) -> bool {
        let len = self.len + n;
        let joins = self.len > 0
            && self.src.checked_add(self.len as u64) == Some(src)
            && self.dst.checked_add(self.len as u64) == Some(dst)
            && (self.src.saturating_add(len as u64) <= self.dst
                || self.dst.saturating_add(len as u64) <= self.src);
        if joins {
            self.len = len;
        }
        joins
    }

    /// Adds the move of `n` bytes from `src` to `dst`: joined to the run held back, or that
    /// run is copied first and this one held back instead.
    #[inline]
    fn add(&mut self, mem: &dyn GuestMemory, src: u64, dst: u64, n: usize) -> Result<(), ()> {
        if self.join(src, dst, n) {
            return Ok(());
        }
        self.flush(mem)?;
        (self.src, self.dst, self.len) = (src, dst, n);
        Ok(())
    }

    /// Makes the held-back copy.
    fn flush(&mut self, mem: &dyn GuestMemory) -> Result<(), ()> {
        let n = std::mem::take(&mut self.len);
        if n == 0 {
            return Ok(());
        }
        mem.copy(self.src, self.dst, n).map_err(|_| ())
    }
}

/// The translation of the rest of one RDMA WRITE message (its rkey resolved once, for all of
/// it), reused by the packets that follow within one transport call, and by a later call (or
/// message) only while the key table's generation is the one it was made under
/// ([`crate::objects::mr::MkeyTable::generation`]): then no key changed, and each packet lands where
/// resolving the key for it alone would put it. (Within a call only a SEND with invalidate
/// changes a key, and that drops it.)
#[derive(Debug, Default)]
pub(crate) struct WriteXlat {
    valid: bool,
    /// The key table's generation it was made under.
    generation: u64,
    rkey: u32,
    /// The translated range `[va, end)`.
    va: u64,
    end: u64,
    /// Its bus pieces, in order.
    pieces: Vec<(u64, usize)>,
    /// A piece index and the range offset where that piece starts (where the last packet
    /// ended: the next one usually starts there).
    at: (usize, u64),
}

impl WriteXlat {
    #[inline]
    fn covers(&self, rkey: u32, va: u64, end: u64) -> bool {
        self.valid && self.rkey == rkey && va >= self.va && end <= self.end
    }

    /// The bus address of `va` when `[va, va + len)` (which [`WriteXlat::covers`]) lies in
    /// the piece where the last packet ended or the next one.
    #[inline]
    fn within_one(&mut self, va: u64, len: u64) -> Option<u64> {
        let off = va - self.va;
        let (mut i, mut start) = self.at;
        for _ in 0..2 {
            let &(bus, n) = self.pieces.get(i)?;
            if off >= start && off + len <= start + n as u64 {
                self.at = (i, start);
                return Some(bus + (off - start));
            }
            if off < start + n as u64 {
                return None;
            }
            (i, start) = (i + 1, start + n as u64);
        }
        None
    }

    /// Calls `f(bus, n)` for the pieces of `[va, va + len)`, which [`WriteXlat::covers`].
    fn for_range<E>(
        &mut self,
        va: u64,
        len: u64,
        mut f: impl FnMut(u64, usize) -> Result<(), E>,
    ) -> Result<(), E> {
        let off = va - self.va;
        let (mut i, mut start) = self.at;
        if off < start {
            (i, start) = (0, 0);
        }
        while let Some(&(_, n)) = self.pieces.get(i) {
            if start + n as u64 > off {
                break;
            }
            start += n as u64;
            i += 1;
        }
        self.at = (i, start);
        let end = off + len;
        while let Some(&(bus, n)) = self.pieces.get(i) {
            let lo = off.max(start);
            let hi = end.min(start + n as u64);
            if lo >= hi {
                break;
            }
            f(bus + (lo - start), (hi - lo) as usize)?;
            start += n as u64;
            i += 1;
        }
        Ok(())
    }
}

/// Path MTU in bytes for `qpc.mtu`.
fn mtu_bytes(mtu: u32) -> u32 {
    256u32 << (mtu.clamp(1, 5) - 1)
}

/// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`, RFC 4291 §2.5.5.2).
pub fn gid_v4(gid: &[u8; 16]) -> Option<Ipv4Addr> {
    (gid[..10] == [0; 10] && gid[10..12] == [0xff, 0xff])
        .then(|| Ipv4Addr::new(gid[12], gid[13], gid[14], gid[15]))
}

/// The GID of an IP address (IPv4-mapped for IPv4).
pub fn ip_gid(ip: std::net::IpAddr) -> [u8; 16] {
    match ip {
        std::net::IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        std::net::IpAddr::V6(a) => a.octets(),
    }
}

/// The IP header of a RoCE v2 packet from GID `sgid` to GID `rgid`: IPv4 when both are
/// IPv4-mapped (DSCP and ECN from the traffic class `tclass`, DF set, TTL `hop`), else IPv6
/// (traffic class `tclass`, the low 20 bits of `flow_label`, hop limit `hop`).
pub(crate) fn ip_header(
    sgid: &[u8; 16],
    rgid: &[u8; 16],
    tclass: u8,
    flow_label: u32,
    hop: u8,
) -> IpHdr {
    match (gid_v4(sgid), gid_v4(rgid)) {
        (Some(src), Some(dst)) => IpHdr::V4(Ipv4Hdr {
            dscp: tclass >> 2,
            ecn: tclass & 3,
            identification: 0,
            dont_fragment: true,
            ttl: hop,
            src,
            dst,
        }),
        _ => IpHdr::V6(Ipv6Hdr {
            traffic_class: tclass,
            flow_label: flow_label & 0xf_ffff,
            hop_limit: hop,
            src: Ipv6Addr::from(*sgid),
            dst: Ipv6Addr::from(*rgid),
        }),
    }
}

/// The headers of a QP's frames, from its context (see the module documentation).
fn frame_headers(hca: &Dp<'_>, q: &crate::objects::qp::Qp) -> RoceHeaders {
    let pri = qpc::PRIMARY_ADDRESS_PATH;
    let f = |x: mlx5_prm::Field| x.within(pri).get(&q.qpc).unwrap_or(0);
    let hop = f(ads::HOP_LIMIT) as u8;
    let dscp = f(ads::DSCP) as u8 & 0x3f;
    let mut sport = f(ads::UDP_SPORT) as u16;
    if sport == 0 {
        // Model choice: no port given; a stable one in the range Linux
        // rdma_get_udp_sport uses (0xC000..=0xFFFF).
        sport = 0xc000 | ((q.qpn ^ q.remote_qpn) & 0x3fff) as u16;
    }
    let ip = ip_header(&q.sgid, &q.path.rgid, dscp << 2, f(ads::FLOW_LABEL), hop);
    let bth = Bth::new(Opcode::RC_ACKNOWLEDGE, q.remote_qpn, 0);
    roce_headers(hca.mac(), q.path.rmac, ip, sport, bth, ExtHdrs::default())
}

/// The headers of a RoCE v2 frame from MAC `src` to `dst`, untagged, UDP source port `sport`
/// (checksum 0, as rxe and the captures send it).
pub(crate) fn roce_headers(
    src: [u8; 6],
    dst: [u8; 6],
    ip: IpHdr,
    sport: u16,
    bth: Bth,
    ext: ExtHdrs,
) -> RoceHeaders {
    RoceHeaders {
        eth: EthHdr {
            dst,
            src,
            vlan: None,
        },
        ip,
        udp: UdpHdr {
            src_port: sport,
            checksum: 0,
        },
        bth,
        ext,
    }
}

fn resp_config(q: &crate::objects::qp::Qp) -> RespConfig {
    RespConfig {
        dest_qp: q.remote_qpn,
        mtu: mtu_bytes(q.mtu),
        rq_psn: q.epsn & crate::roce::PSN_MASK,
        min_rnr_timer: (q.min_rnr_nak & 0x1f) as u8,
        max_dest_rd_atomic: (1u32 << q.log_rra_max.min(7)) as u8,
        remote_read: q.rre,
        remote_write: q.rwe,
        remote_atomic: q.rae && atomic_mode_covers(q.atomic_mode, 8),
        ack_policy: AckPolicy::AckReq,
    }
}

fn req_config(q: &crate::objects::qp::Qp, sq_psn: u32) -> ReqConfig {
    let freq = qpc::LOG_ACK_REQ_FREQ.get(&q.qpc).unwrap_or(0);
    ReqConfig {
        dest_qp: q.remote_qpn,
        mtu: mtu_bytes(q.mtu),
        sq_psn: sq_psn & crate::roce::PSN_MASK,
        ack_timeout: q.path.ack_timeout.min(31) as u8,
        retry_count: q.retry_count.min(7) as u8,
        rnr_retry: q.rnr_retry.min(7) as u8,
        max_rd_atomic: (1u32 << q.log_sra_max.min(7)) as u8,
        ack_req_every: 1 << freq.min(16),
        max_unacked_psns: DEFAULT_MAX_UNACKED_PSNS,
    }
}

/// Builds or updates QP `qpn`'s transport after a state transition (`to`, by `opcode`): the
/// responder at RTR, the requester at RTS; dropped at RESET.
pub(crate) fn on_transition(hca: &mut Dp<'_>, qpn: u32, from: u8, to: u8) {
    let hdr = match hca.objects.qps.get(qpn) {
        Some(q) => frame_headers(hca, q),
        None => return,
    };
    let Some(q) = hca.objects.qps.get_mut(qpn) else {
        return;
    };
    match (from, to) {
        (qp::state::INIT, qp::state::RTR) => {
            let resp = Responder::new(resp_config(q));
            let req = Requester::new(req_config(q, 0));
            q.rc = match (req, resp) {
                (Ok(requester), Ok(responder)) => Some(Box::new(RcState {
                    qp: RcQp {
                        requester,
                        responder,
                    },
                    seen_req: ReqCounters::default(),
                    seen_resp: RespCounters::default(),
                    hdr,
                    out: Vec::new(),
                    wx: WriteXlat::default(),
                })),
                // The command checked every field; a refusal here is a model bug: no transport,
                // packets to this QP are dropped.
                _ => None,
            };
        }
        (qp::state::RTR, qp::state::RTS) => {
            let cfg = req_config(q, q.npsn);
            if let (Some(rc), Ok(r)) = (q.rc.as_mut(), Requester::new(cfg)) {
                rc.qp.requester = r;
                rc.seen_req = ReqCounters::default();
            }
        }
        (_, qp::state::RST) => q.rc = None,
        _ => {}
    }
    if let Some(rc) = q.rc.as_mut() {
        let (r, w, a) = (q.rre, q.rwe, q.rae && atomic_mode_covers(q.atomic_mode, 8));
        rc.qp.responder.set_access(r, w, a);
        rc.qp
            .responder
            .set_min_rnr_timer((q.min_rnr_nak & 0x1f) as u8);
    }
}

mod env;
mod gather;
mod outbox;

use env::*;
pub(crate) use gather::work_request;
use outbox::*;

// ---------------------------------------------------------------------------------------------

/// Adds a slot to QP `qpn`'s SQ record and posts `wr` (if any) to its requester. A refused
/// post turns the slot into a local failure.
pub(crate) fn push_slot(hca: &mut Dp<'_>, qpn: u32, mut slot: WrSlot, wr: Option<WorkRequest>) {
    let Some(q) = hca.objects.qps.get_mut(qpn) else {
        return;
    };
    if let (Some(wr), Some(rc)) = (wr, q.rc.as_mut()) {
        if rc.qp.post(wr).is_err() {
            slot.kind = SlotKind::Failed(cqe::syndrome::LOCAL_QP_OP_ERR, vendor::MALFORMED_WQE);
        }
    } else if wr.is_some() {
        slot.kind = SlotKind::Failed(cqe::syndrome::LOCAL_QP_OP_ERR, vendor::MALFORMED_WQE);
    }
    if matches!(slot.kind, SlotKind::Failed(..)) {
        q.sq_blocked = true;
    }
    q.wrs.push_back(slot);
}

/// A WQE executed locally and successfully (a UMR) with work requests queued ahead of it in
/// QP `qpn`'s SQ record: queued behind them as a [`SlotKind::Nop`] slot, completed in order by
/// [`retire_local`]. (With nothing ahead, the send queue loop writes its CQE, if signaled, at
/// once: exactly the next of the SQ in order, what [`retire_local`] would write for it.)
pub(crate) fn push_local_done_behind(hca: &mut Dp<'_>, qpn: u32, slot: WrSlot) {
    if let Some(q) = hca.objects.qps.get_mut(qpn) {
        q.wrs.push_back(slot);
    }
}

/// Whether QP `q`'s transport has nothing to do on a pump: no work request queued or in
/// flight, no timer armed, no READ reply streaming, no error to report. [`RcQp::pump`] then
/// sends nothing, changes no state and completes nothing (its timers, send loop and
/// `complete_failed` all start from the queued requests or an armed deadline), so skipping it
/// is exact; the UMR QP, whose WQEs all execute locally, is always in this state.
pub(crate) fn transport_idle(q: &Qp) -> bool {
    q.rc.as_ref().is_none_or(|rc| {
        rc.qp.requester.outstanding() == 0 && rc.qp.next_deadline().is_none() && !rc.qp.is_error()
    })
}

/// Reads the port's clock if this device event has not yet (`Hca::clock_due`, set by a
/// doorbell): called before a transport runs, so the clock still stands still for the rest of
/// the event (every transport call of one event sees the same time), as when it was read at
/// the doorbell.
pub(crate) fn clock(hca: &mut Dp<'_>) {
    if hca.doorbells.clock_due {
        hca.port.tick();
        hca.doorbells.clock_due = false;
    }
}

/// Completes local slots (NOPs, local failures) at the head of QP `qpn`'s SQ record. A local
/// failure moves the QP to ERR.
pub(crate) fn retire_local(hca: &mut Dp<'_>, qpn: u32) {
    loop {
        let Some(q) = hca.objects.qps.get_mut(qpn) else {
            return;
        };
        let (cqn, uidx) = (q.cqn_snd, q.user_index);
        let Some(s) = q.wrs.front() else {
            return;
        };
        if s.kind == SlotKind::Posted {
            return;
        }
        let Some(s) = q.wrs.pop_front() else {
            return;
        };
        match s.kind {
            SlotKind::Posted => return,
            SlotKind::Nop => {
                if s.signaled {
                    let c = Cqe::requester(s.opcode, qpn, s.wqe_index, 0).with_user_index(uidx);
                    post_cqe(hca, cqn, &c);
                }
            }
            SlotKind::Failed(syn, vend) => {
                let c = Cqe::error(cqe::opcode::REQ_ERR, syn, vend, s.opcode, qpn, s.wqe_index)
                    .with_user_index(uidx);
                post_cqe(hca, cqn, &c);
                enter_error(hca, qpn);
                return;
            }
        }
    }
}

/// Lets QP `qpn`'s requester send what it may and run its timers.
pub(crate) fn pump(hca: &mut Dp<'_>, qpn: u32) {
    let Some(q) = hca.objects.qps.get(qpn) else {
        return;
    };
    if transport_idle(q) {
        // Nothing for the transport; local slots may wait at the head (none after a UMR
        // completed at once).
        if !q.wrs.is_empty() {
            retire_local(hca, qpn);
        }
        return;
    }
    clock(hca);
    if with_rc(hca, qpn, None, |rc, now, env, tx| rc.pump(now, env, tx)) {
        retire_local(hca, qpn);
    }
}

/// Runs the timers of every QP whose deadline passed.
pub(crate) fn timers(hca: &mut Dp<'_>) {
    let now = hca.port.now_ns();
    for qpn in hca.objects.qps.qpns() {
        let due = hca.objects.qps.get(qpn).is_some_and(|q| {
            matches!(q.state, qp::state::RTR | qp::state::RTS)
                && q.rc
                    .as_ref()
                    .and_then(|rc| rc.qp.next_deadline())
                    .is_some_and(|d| d <= now)
        });
        if due {
            pump(hca, qpn);
        }
    }
}

/// Takes consecutive loopback packets for one QP to it, in one transport call (their
/// payloads were checked to be guest memory when they were sent, within this same device
/// event).
pub(crate) fn arrive_local(hca: &mut Dp<'_>, batch: &[RefPacket]) {
    let Some(first) = batch.first() else {
        return;
    };
    let qpn = first.bth.dest_qp;
    let Some(q) = hca.objects.qps.get_mut(qpn) else {
        return;
    };
    if q.rc.is_none() {
        return;
    }
    let (state, rgid) = (q.state, q.path.rgid);
    let keep = |p: &RefPacket| {
        let Some(info) = p.bth.opcode.info() else {
            return false;
        };
        let ok_state = match state {
            qp::state::RTR => info.is_request(),
            qp::state::RTS => true,
            _ => false,
        };
        ok_state && p.src_gid == rgid
    };
    if state == qp::state::RTR
        && !q.comm_est
        && batch
            .iter()
            .any(|p| keep(p) && p.bth.opcode.info().is_some_and(|i| i.is_request()))
    {
        q.comm_est = true;
        post_qp_event(hca, event::COMM_EST, qpn);
    }
    clock(hca);
    let local_head = with_rc(hca, qpn, None, |rc, now, env, tx| {
        let mut tmp = ExtHdrs::NONE;
        let mut kept = batch.iter().filter(|p| keep(p)).peekable();
        while let Some(p) = kept.next() {
            let last = kept.peek().is_none();
            let ext = p.ext.get(&mut tmp);
            env.rx = Some(&p.payload);
            // Each packet of the entry on its own (RefPacket::more, RefPacket::packet).
            let (mut bth, n) = (p.bth, p.count());
            let each = match n {
                1 => p.payload.len(),
                _ => p.payload.len() / n as usize,
            };
            // A run of WRITE MIDDLE packets that the call goes on after (not its last
            // packet): checked packet by packet and executed together when every one of them
            // would take the responder's common path (Responder::receive_middle_run), else
            // handed over one by one below.
            let run = if last { n - 1 } else { n };
            let mut from = 0;
            if run >= 2 && bth.opcode == Opcode::RC_RDMA_WRITE_MIDDLE && each > 0 {
                env.flush_each = false;
                let first = RxPacket {
                    bth,
                    ext,
                    payload: RxPayload::Ref {
                        token: 0,
                        len: each,
                    },
                };
                let all = RxPayload::Ref {
                    token: 0,
                    len: each * run as usize,
                };
                if rc
                    .responder
                    .receive_middle_run(&first, run, p.acks, all, env, tx)
                {
                    from = run;
                }
            }
            for i in from..n {
                if i > 0 {
                    bth.psn = crate::roce::psn_add(p.bth.psn, i);
                    bth.ack_req = (p.acks >> i) & 1 != 0;
                }
                // A WRITE's bytes may move together with the next packet's, up to the last one.
                env.flush_each = last && i + 1 == n;
                let pkt = RxPacket {
                    bth,
                    ext,
                    payload: if each == 0 {
                        RxPayload::Bytes(&[])
                    } else {
                        RxPayload::Ref {
                            token: (i as usize * each) as u64,
                            len: each,
                        }
                    },
                };
                rc.receive(now, &pkt, env, tx);
            }
        }
    });
    if local_head {
        retire_local(hca, qpn);
    }
}

/// Takes one packet that arrived at the port to its QP.
pub(crate) fn arrive(hca: &mut Dp<'_>, a: Arrival) {
    match a {
        Arrival::Frame(f) if f.hdrs.ext.deth.is_some() => {
            // A datagram (UD SEND): for a UD QP or the GSI QP (crate::datapath::ud).
            let ip = crate::roce::frame::eth_len(&f.hdrs.eth);
            let at = f.bytes.get(ip..).unwrap_or(&[]);
            crate::datapath::ud::recv::deliver(hca, &f.hdrs, at, f.payload());
        }
        // Not RoCE: `poll_wire` hands Ethernet frames to NIC receive steering, not here.
        Arrival::Eth(_) => {}
        Arrival::Frame(f) => {
            let src = ip_gid(f.hdrs.ip.src());
            let pkt = RxPacket {
                bth: f.hdrs.bth,
                ext: &f.hdrs.ext,
                payload: RxPayload::Bytes(f.payload()),
            };
            receive(hca, &src, &pkt, None);
        }
        Arrival::Ref(r) => {
            // A payload whose memory went away after the sender checked it is as good as
            // corrupted in transit: the packet is lost (the requester retransmits).
            let gone = match &r.payload {
                RefPayload::Mem { mem, pieces } => {
                    pieces.iter().any(|&(a, n)| mem.check(a, n).is_err())
                }
                RefPayload::Window {
                    mem,
                    pieces,
                    off,
                    len,
                } => WrPayload::sub_pieces(pieces, *off, *len)
                    .is_none_or(|mut p| p.any(|(a, n)| mem.check(a, n).is_err())),
                _ => false,
            };
            if gone {
                hca.port.dropped += 1;
                return;
            }
            let mut tmp = ExtHdrs::NONE;
            let ext = r.ext.get(&mut tmp);
            for i in 0..r.count() {
                let (bth, at, len) = r.packet(i);
                let pkt = RxPacket {
                    bth,
                    ext,
                    payload: if len == 0 {
                        RxPayload::Bytes(&[])
                    } else {
                        RxPayload::Ref {
                            token: at as u64,
                            len,
                        }
                    },
                };
                receive(hca, &r.src_gid, &pkt, Some(&r.payload));
            }
        }
    }
}

fn receive(hca: &mut Dp<'_>, src_gid: &[u8; 16], pkt: &RxPacket<'_>, rx: Option<&RefPayload>) {
    let qpn = pkt.bth.dest_qp;
    let Some(info) = pkt.bth.opcode.info() else {
        return;
    };
    let request = info.is_request();
    let Some(q) = hca.objects.qps.get_mut(qpn) else {
        return;
    };
    let ok = q.rc.is_some()
        && match q.state {
            qp::state::RTR => request,
            qp::state::RTS => true,
            _ => false,
        }
        // Model choice: a packet from an IP other than the QP's remote GID is not for this
        // connection (RC has no source QPN on the wire; the address is what identifies it).
        && q.path.rgid == *src_gid;
    if !ok {
        return;
    }
    if request && q.state == qp::state::RTR && !q.comm_est {
        q.comm_est = true;
        post_qp_event(hca, event::COMM_EST, qpn);
    }
    clock(hca);
    if with_rc(hca, qpn, rx, |rc, now, env, tx| {
        rc.receive(now, pkt, env, tx)
    }) {
        retire_local(hca, qpn);
    }
}

/// Moves QP `qpn` to ERR: the transport flushes the posted work requests, then every other
/// outstanding WQE of both queues completes with WR_FLUSH_ERR.
pub(crate) fn enter_error(hca: &mut Dp<'_>, qpn: u32) {
    let Some(q) = hca.objects.qps.get_mut(qpn) else {
        return;
    };
    q.state = qp::state::ERR;
    q.sq_blocked = false;
    if let Some(mut rc) = q.rc.take() {
        let (objects, sink, _) = hca.split();
        let cell = RefCell::new(objects);
        let mut wx = WriteXlat::default();
        let mut env = Env {
            objs: &cell,
            sink,
            bumps: Vec::new(),
            qpn,
            rx: None,
            fail_local: false,
            wx: &mut wx,
            pending: PendingMove::default(),
            flush_each: true,
            recv: None,
        };
        rc.qp.set_error(&mut env);
        for c in std::mem::take(&mut env.bumps) {
            hca.port.counters().bump(c);
        }
        if let Some(q) = hca.objects.qps.get_mut(qpn) {
            q.rc = Some(rc);
        }
    }
    // Whatever the transport did not own.
    let Some(q) = hca.objects.qps.get_mut(qpn) else {
        return;
    };
    let (cqn, uidx) = (q.cqn_snd, q.user_index);
    let rest: Vec<WrSlot> = q.wrs.drain(..).collect();
    for s in rest {
        let c = flush_cqe(cqe::opcode::REQ_ERR, s.opcode, qpn, s.wqe_index, uidx);
        post_cqe(hca, cqn, &c);
    }
    flush_new_work(hca, qpn);
}

/// A work request's bus pieces, shared with the packets that carry its bytes by reference.
type Pieces = Arc<[(u64, usize)]>;
