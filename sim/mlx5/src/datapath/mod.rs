//! WQE execution: the send doorbell, turning send WQEs into work requests for the RC
//! transport, and the error / flush behaviour.
//!
//! Flow: a doorbell (UAR DB/BF register) names the QP; the SQ producer counter comes from the
//! doorbell record (`dbrec[1]`, `mlx5r_ring_db`). Each WQE between the last one taken and that
//! counter is fetched from the SQ ring, its gather list is checked against the lkeys *before*
//! any byte moves, and it is posted to the QP's RC transport ([`crate::roce::rc::RcQp`], glued
//! to the model in [`crate::datapath::rc`]), which segments it at the path MTU into RoCEv2 packets
//! with real PSNs, retransmits, and completes it from ACKs, NAKs, READ responses and atomic
//! ACKs. Packets travel through the port ([`crate::wire`]): loopback and a shared-memory pair
//! pass payloads by reference (one copy), every other link carries real frames. Loopback
//! traffic is processed synchronously: when the doorbell returns, every loopback WQE it started
//! has completed (unless a fault or a timer holds it).
//!
//! An error CQE moves the QP to ERR, and every outstanding or later WQE of both queues
//! completes with WR_FLUSH_ERR.

pub mod cq;
pub mod doorbell;
pub mod eth;
pub mod mw;
pub mod rc;
pub(crate) mod steer;
pub mod ud;
pub mod umr;
pub mod wqe;

mod context;
pub use context::Dp;

use mlx5_prm::wqe as prm_wqe;
use mlx5_prm::{cmd_hca_cap, cqe, event, event_queue_type, qp, qp_events, uar};

use std::sync::Arc;

use crate::control::Control;
use crate::datapath::cq::post_cqe;
use crate::datapath::wqe::{RecvWqe, SendWqe, MAX_WQE_BYTES};
use crate::memory::GuestMemory;
use crate::objects::cq::Cqe;
use crate::objects::mr::{MrFault, Resolved};
use crate::objects::qp::{read_dbr, read_dbr_in, Qp};
use crate::wire::Arrival;
use rc::{SlotKind, WrSlot};

const QPN_MASK: u32 = 0xff_ffff;

/// Vendor error syndromes the model writes into error CQEs (`vendor_err_synd`). The values
/// hardware uses are not public; these are the model's own, one per cause, so a driver log tells
/// what went wrong. Range 0x52-prefixed families are for command syndromes; these are one byte.
pub mod vendor {
    /// Malformed WQE (bad ds, unknown opcode, inline overrun, wrong QPN in the ctrl segment).
    pub const MALFORMED_WQE: u8 = 0x01;
    /// lkey unknown, variant mismatch, free, other PD or QP.
    pub const BAD_LKEY: u8 = 0x02;
    /// Address range outside the lkey's region.
    pub const LKEY_BOUNDS: u8 = 0x03;
    /// The lkey lacks local read / local write (or a page lacks its MTT enable).
    pub const LKEY_ACCESS: u8 = 0x04;
    /// A DMA to guest memory failed (address outside guest RAM).
    pub const DMA_FAULT: u8 = 0x05;
    /// Message longer than `2^log_msg_max`.
    pub const MSG_TOO_LONG: u8 = 0x06;
    /// The receive WQE is smaller than the incoming message.
    pub const RECV_TOO_SMALL: u8 = 0x07;
    /// No ACK after `retry_count` retransmissions.
    pub const RETRY_EXCEEDED: u8 = 0x08;
    /// RNR NAKs after `rnr_retry` retries.
    pub const RNR_EXCEEDED: u8 = 0x09;
    /// The responder answered with an invalid-request NAK.
    pub const NAK_INVALID_REQUEST: u8 = 0x0a;
    /// The responder answered with a remote-access NAK.
    pub const NAK_REMOTE_ACCESS: u8 = 0x0b;
    /// The responder answered with a remote-operational NAK.
    pub const NAK_REMOTE_OPERATIONAL: u8 = 0x0c;
    /// Flushed because the QP is in the error state.
    pub const FLUSH: u8 = 0x0d;
    /// The responder's rkey check failed (responder-side CQE of WRITE with immediate).
    pub const RKEY_VIOLATION: u8 = 0x0e;
    /// An Ethernet send WQE inlines fewer header bytes than its SQ's minimum inline mode.
    pub const INLINE_HEADERS: u8 = 0x0f;
}

pub(crate) fn lkey_vendor(f: MrFault) -> u8 {
    match f {
        MrFault::OutOfBounds => vendor::LKEY_BOUNDS,
        MrFault::AccessDenied | MrFault::PageAccessDenied => vendor::LKEY_ACCESS,
        _ => vendor::BAD_LKEY,
    }
}

/// Appends the bus pieces of the checked range `r` to `pieces`, each checked to be guest
/// memory (nothing is copied).
pub(crate) fn memory_pieces(
    mem: &dyn GuestMemory,
    r: &Resolved<'_>,
    pieces: &mut Vec<(u64, usize)>,
) -> Result<(), crate::memory::DmaError> {
    r.for_each_piece(|bus, n| {
        mem.check(bus, n)?;
        pieces.push((bus, n));
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------------

/// A write to a UAR page's DB/BF register (offsets 0x800..0xfff). `value` is the 8 bytes
/// written, read big-endian: the first 8 bytes of the last WQE's ctrl segment (Linux
/// ib/wr.c `mlx5r_ring_db`).
/// Only the first 8 bytes of each BlueFlame half-buffer ring; the rest of a BlueFlame copy is
/// the WQE body, which the model reads from the SQ ring instead.
///
/// `half` is the BlueFlame half-buffer size (`bf_reg_size / 2`, at least 8), which the caller
/// (the UAR write path, `uar::bf_half`) reads from the capabilities once per doorbell.
///
/// Returns the QP the doorbell rings, if any: it exists and belongs to this UAR page. The
/// caller rings it ([`kick`]) once it has recorded what it needs of the doorbell.
#[inline(always)]
pub(crate) fn sq_doorbell(
    hca: &mut Dp<'_>,
    uar_index: u32,
    offset: u32,
    value: u64,
    half: usize,
) -> Option<u32> {
    let off = offset as usize;
    if !(uar::BF_OFFSET..uar::PAGE_SIZE).contains(&off) {
        return None;
    }
    if !(off - uar::BF_OFFSET).is_multiple_of(half) {
        return None;
    }
    let qpn = ((value as u32) >> 8) & QPN_MASK;
    match hca.objects.qps.get(qpn) {
        Some(q) if q.uar == uar_index => Some(qpn),
        _ => {
            sq_doorbell_other(hca, uar_index, offset, value);
            None
        }
    }
}

/// A doorbell that rings no QP: an Ethernet SQ's ([`eth::tx::doorbell`], which runs it at
/// once: an SQ keeps no BlueFlame record), or nobody's.
#[cold]
#[inline(never)]
fn sq_doorbell_other(hca: &mut Dp<'_>, uar_index: u32, offset: u32, value: u64) {
    let qpn = ((value as u32) >> 8) & QPN_MASK;
    if !eth::tx::doorbell(hca, uar_index, qpn) {
        sq_doorbell_ignored(hca, uar_index, offset, value);
    }
}

/// Traces why a doorbell rang no send queue: no QP of its number, or one of another UAR page.
fn sq_doorbell_ignored(hca: &mut Dp<'_>, uar_index: u32, offset: u32, value: u64) {
    let qpn = ((value as u32) >> 8) & QPN_MASK;
    match hca.objects.qps.get(qpn) {
        None => hca.trace_note(format_args!(
            "SQ doorbell {value:#018x} at UAR {uar_index:#x}+{offset:#x}: no QP {qpn:#x}, ignored"
        )),
        Some(q) => {
            let owner = q.uar;
            hca.trace_note(format_args!(
                "SQ doorbell for QP {qpn:#x} on UAR {uar_index:#x}, but its uar_page is {owner:#x}: ignored"
            ));
        }
    }
}

/// The data path's own state between doorbells: per-doorbell scratch, no device state. One
/// part of [`crate::hca::Hca`].
#[derive(Default)]
pub(crate) struct Doorbells {
    /// The buffer a send WQE is fetched into, kept between doorbells (zeroing 1 KiB per WQE
    /// showed in the profile). Only the bytes fetched for the current WQE are ever read.
    pub(crate) wqe_buf: Option<Box<[u8; MAX_WQE_BYTES]>>,
    /// A doorbell started this event; the port's clock is not read for it yet (`rc::clock`).
    pub(crate) clock_due: bool,
}

/// Loopback packets handed to one QP per transport call.
pub(crate) const LOOP_BATCH: usize = 64;

/// Frames taken off the link per poll (so a flood cannot keep the device inside).
const RX_PER_POLL: usize = 4096;

/// Delivers packets that arrived from the wire, runs the retransmit and RNR timers and flushes
/// work posted to QPs in the error state. The device calls it periodically.
pub fn poll_wire(hca: &mut Dp<'_>) {
    hca.port.tick();
    hca.doorbells.clock_due = false;
    let mac = hca.mac();
    hca.port.set_mac(mac);
    if !hca.port.ips_synced() {
        let ips = hca.objects.vport.roce_v2_ips();
        hca.port.set_ips(ips);
    }
    for _ in 0..RX_PER_POLL {
        let Some(a) = hca.port.recv() else {
            break;
        };
        match a {
            Arrival::Eth(frame) => steer::arrive(hca, &frame),
            a => rc::arrive(hca, a),
        }
        run(hca);
    }
    rc::timers(hca);
    for qpn in hca.objects.qps.qpns() {
        if hca
            .objects
            .qps
            .get(qpn)
            .is_some_and(|q| q.state == qp::state::ERR)
        {
            flush_new_work(hca, qpn);
        }
    }
    run(hca);
}

/// Looks at QP `qpn`'s send queue now (doorbell, or the QP just reached RTS). The port's
/// clock is read for this event only once a transport needs it ([`rc::clock`]): a
/// doorbell whose WQEs all execute locally (UMRs) reads no clock.
#[inline(always)]
pub(crate) fn kick(hca: &mut Dp<'_>, qpn: u32) {
    hca.doorbells.clock_due = true;
    if hca.port.loopq.is_empty() && hca.port.kicks.is_empty() {
        // What `run` would do first with nothing else queued (it takes the loopback packets
        // first, then the kicks in order): this queue's turn, without the round trip through
        // the kick queue; then whatever that turn queued.
        sq_post(hca, qpn);
        if hca.port.loopq.is_empty() && hca.port.kicks.is_empty() {
            // Nothing queued by that turn (a doorbell of local work only): `run` would
            // find nothing to do.
            return;
        }
    } else {
        queue_kick(hca, qpn);
    }
    run(hca);
}

fn queue_kick(hca: &mut Dp<'_>, qpn: u32) {
    if hca.port.kicks.is_empty() || !hca.port.kicks.contains(&qpn) {
        hca.port.kicks.push_back(qpn);
    }
}

/// The engine: processes loopback packets first, then lets kicked send queues post their new
/// WQEs to the transport.
fn run(hca: &mut Dp<'_>) {
    loop {
        if !hca.port.loopq.is_empty() {
            // Every packet queued so far, in order, taken as a whole (the packets they cause
            // queue up behind them); consecutive packets for one QP go to it in one transport
            // call, up to LOOP_BATCH.
            let spare = std::mem::take(&mut hca.port.batch);
            let mut q = std::mem::replace(&mut hca.port.loopq, spare);
            let pkts = q.make_contiguous();
            let mut i = 0;
            while i < pkts.len() {
                let qpn = pkts[i].bth.dest_qp;
                let mut j = i + 1;
                while j < pkts.len() && j - i < LOOP_BATCH && pkts[j].bth.dest_qp == qpn {
                    j += 1;
                }
                rc::arrive_local(hca, &pkts[i..j]);
                i = j;
            }
            q.clear();
            hca.port.batch = q;
            continue;
        }
        let Some(qpn) = hca.port.kicks.pop_front() else {
            break;
        };
        sq_post(hca, qpn);
    }
}

/// Posts every new WQE of QP `qpn`'s send queue to its transport, then lets it send.
fn sq_post(hca: &mut Dp<'_>, qpn: u32) {
    let mut raw = hca
        .doorbells
        .wqe_buf
        .take()
        .unwrap_or_else(|| Box::new([0u8; MAX_WQE_BYTES]));
    sq_post_in(hca, qpn, &mut raw);
    hca.doorbells.wqe_buf = Some(raw);
}

/// [`sq_post`] fetching each WQE into `raw` (only its first `ds * 16` bytes are used).
fn sq_post_in(hca: &mut Dp<'_>, qpn: u32, raw: &mut [u8; MAX_WQE_BYTES]) {
    // `cmd_hca_cap.max_wqe_sz_sq`, read at the first WQE that is not a UMR (a UMR's size is
    // checked by its own parser).
    let mut max_wqe = None;
    // The doorbell record's SQ counter, read on the first turn (whose QP lookup also serves
    // the checks before it).
    let mut pi = None;
    let mut now = 0;
    loop {
        // Looked up once per WQE (held until the WQE is taken off the ring).
        let Some(q) = hca.objects.qps.get_mut(qpn) else {
            return;
        };
        let pi = match pi {
            Some(pi) => pi,
            None => {
                if q.state == qp::state::ERR {
                    flush_new_work(hca, qpn);
                    return;
                }
                if q.sq_log_size.is_none() || q.state == qp::state::RTR {
                    // No send queue work yet; a READ reply may be streaming.
                    rc::pump(hca, qpn);
                    return;
                }
                if q.st.is_datagram() {
                    return ud::sq_post(hca, qpn, raw);
                }
                if q.state != qp::state::RTS {
                    return;
                }
                // The memory's version, read once for the doorbell's accesses through views
                // (the doorbell record, the WQEs, a UMR's CQE): they are the accesses of
                // that moment.
                now = hca.mem.version();
                match read_dbr_in(&mut q.dbr_view, now, hca.mem, q.dbr_addr) {
                    Ok((_, sq)) => *pi.insert(sq),
                    Err(_) => {
                        wq_catastrophe(hca, qpn, "doorbell record unreadable");
                        return;
                    }
                }
            }
        };
        if q.sq_blocked || q.state != qp::state::RTS {
            break;
        }
        let pos = q.sq_next;
        if pos == pi {
            break;
        }
        if pi.wrapping_sub(pos) as u32 > q.sq_size() {
            // More WQEBBs announced than the ring holds: the counter is not one software
            // could have produced.
            wq_catastrophe(hca, qpn, "SQ producer counter beyond the ring");
            return;
        }
        let len = match fetch_wqe(hca.mem, now, q, pos, raw) {
            Ok(n) => n,
            Err(()) => {
                wq_catastrophe(hca, qpn, "SQ buffer unreadable");
                return;
            }
        };
        if raw[3] == prm_wqe::opcode::UMR {
            // UMR: applied to the key table when taken ([`crate::datapath::umr`]).
            let (fre, qp_pd) = (q.fre, q.pd);
            // What completing it needs of the QP, read now: executing a UMR changes a key or a
            // window, never a QP.
            let (cqn, uidx, queued) = (q.cqn_snd, q.user_index, !q.wrs.is_empty());
            // Whether the pump after the loop would find nothing to do: no slot queued (this
            // UMR's completes at once) and an idle transport (a UMR changes neither).
            let idle = !queued && rc::transport_idle(q);
            let wr_id = q.next_wr;
            q.next_wr = q.next_wr.wrapping_add(1);
            let next = pos.wrapping_add(SendWqe::bbs_of(&raw[..16]) as u16);
            q.sq_next = next;
            // The slot's fields (a slot is made only when one is queued: on failure, or
            // behind work ahead).
            let slot = |kind| WrSlot {
                wr_id,
                wqe_index: u16::from_be_bytes([raw[1], raw[2]]),
                opcode: raw[3],
                signaled: raw[prm_wqe::ctrl_seg::FM_CE_SE] & prm_wqe::ctrl::CQ_UPDATE != 0,
                byte_len: 0,
                kind,
                payload: None,
            };
            let r = if u32::from_be_bytes([raw[4], raw[5], raw[6], raw[7]]) >> 8 != qpn {
                Err((cqe::syndrome::LOCAL_QP_OP_ERR, vendor::MALFORMED_WQE))
            } else {
                crate::datapath::umr::execute(hca, qpn, fre, qp_pd, &raw[..len])
            };
            if let Err((syn, vend)) = r {
                rc::push_slot(hca, qpn, slot(SlotKind::Failed(syn, vend)), None);
                break;
            }
            if queued {
                rc::push_local_done_behind(hca, qpn, slot(SlotKind::Nop));
            } else if raw[prm_wqe::ctrl_seg::FM_CE_SE] & prm_wqe::ctrl::CQ_UPDATE != 0 {
                // Nothing ahead: its CQE at once, the SQ's next in order (what `retire_local`
                // would write for it).
                let mut c = crate::objects::cq::Cqe::requester(
                    raw[3],
                    qpn,
                    u16::from_be_bytes([raw[1], raw[2]]),
                    0,
                );
                c.set_user_index(uidx);
                crate::datapath::cq::post_cqe_inline(hca, cqn, &c, now);
            }
            if next == pi {
                // The last WQE announced: the next turn of the loop would stop here too (it
                // stops at `pi` whatever the QP's state), without looking the QP up again;
                // and the pump after it has nothing to do when the QP was idle.
                if idle {
                    return;
                }
                break;
            }
            continue;
        }
        let parsed = SendWqe::parse(&raw[..len]);
        let (opcode, wqe_index, wqebbs) = match &parsed {
            Ok(w) => (w.opcode, w.wqe_index, w.wqebbs().max(1)),
            Err(_) => (
                raw[3],
                u16::from_be_bytes([raw[1], raw[2]]),
                SendWqe::bbs_of(&raw[..16]),
            ),
        };
        let wr_id = q.next_wr;
        q.next_wr = q.next_wr.wrapping_add(1);
        q.sq_next = pos.wrapping_add(wqebbs as u16);
        let mut slot = WrSlot {
            wr_id,
            wqe_index,
            opcode,
            signaled: true,
            byte_len: 0,
            kind: SlotKind::Posted,
            payload: None,
        };
        // Borrowed, not moved: a parsed WQE is large (room for every gather entry).
        let max_wqe = *max_wqe.get_or_insert_with(|| hca.cap(cmd_hca_cap::MAX_WQE_SZ_SQ) as usize);
        let w = match &parsed {
            Ok(w) if w.qpn == qpn && (max_wqe == 0 || w.ds as usize * 16 <= max_wqe) => w,
            _ => {
                slot.kind = SlotKind::Failed(cqe::syndrome::LOCAL_QP_OP_ERR, vendor::MALFORMED_WQE);
                rc::push_slot(hca, qpn, slot, None);
                break;
            }
        };
        slot.signaled = w.signaled();
        if w.opcode == prm_wqe::opcode::NOP {
            slot.kind = SlotKind::Nop;
            rc::push_slot(hca, qpn, slot, None);
            continue;
        }
        match rc::work_request(hca, qpn, w, &raw[..len], wr_id) {
            Ok((wr, len, payload)) => {
                slot.byte_len = len;
                slot.payload = Some(payload);
                rc::push_slot(hca, qpn, slot, Some(wr));
            }
            Err((syn, vend)) => {
                slot.kind = SlotKind::Failed(syn, vend);
                rc::push_slot(hca, qpn, slot, None);
                break;
            }
        }
    }
    rc::pump(hca, qpn);
}

/// Bytes of the SQ ring [`fetch_wqe`] reads at once (4 basic blocks: a UMR WQE with its
/// mkey context and a few translation entries).
const WQE_PREFETCH: usize = 4 * prm_wqe::SEND_WQE_BB;

/// Copies the WQE at SQ position `pos` out of the ring (undoing the wrap) into `raw`; returns
/// its length in bytes (`ds * 16`, at least the 16-byte ctrl segment).
///
/// Inlined into the send queue loop: the common case (the WQE inside the first
/// [`WQE_PREFETCH`] bytes, read in one access through the QP's view of the ring's region) is
/// answered here; anything else is [`fetch_wqe_general`], which reads the WQE again from the
/// start (the same reads, so the same outcome).
#[inline(always)]
pub(crate) fn fetch_wqe<'m, M: std::ops::Deref<Target = dyn GuestMemory + 'm> + ?Sized>(
    mem: &M,
    now: u64,
    q: &mut Qp,
    pos: u16,
    raw: &mut [u8; MAX_WQE_BYTES],
) -> Result<usize, ()> {
    let ring = (q.sq_size() as u64) * prm_wqe::SEND_WQE_BB as u64;
    let at = (pos as u64 & (q.sq_size() as u64 - 1)) * prm_wqe::SEND_WQE_BB as u64;
    // The general path's first read: up to WQE_PREFETCH bytes, not past the ring's end.
    let ahead = WQE_PREFETCH.min((ring - at) as usize);
    // Through the SQ's stretch of the buffer ([`crate::memory::RingWindow`]) when it holds
    // these bytes: the bytes the general path's first read gets.
    if q.sq_win
        .read_slice(now, q.sq_offset + at, &mut raw[..ahead])
    {
        // `ds` whole WQE inside what was read: what the general path returns too (`len <=
        // ahead <= ring - at`, so nothing more is read there, and the WQE does not wrap).
        let len =
            (SendWqe::ds_of(&raw[..16]).max(1) as usize * prm_wqe::SEND_WQE_DS).min(ring as usize);
        if len <= ahead {
            return Ok(len);
        }
        // A WQE that wraps (what was read ends at the ring's end): the general path reads
        // the rest from the ring's start, which the stretch may hold too.
        if ahead as u64 == ring - at && q.sq_win.read_slice(now, q.sq_offset, &mut raw[ahead..len])
        {
            return Ok(len);
        }
        // (The stretch held the first bytes: the general path need not resolve it again.)
        return fetch_wqe_general(&**mem, q, pos, raw, false);
    }
    fetch_wqe_general(&**mem, q, pos, raw, true)
}

/// [`fetch_wqe`], every case; `resolve`: resolve the SQ's stretch around the WQE after
/// reading it.
#[inline(never)]
pub(crate) fn fetch_wqe_general(
    mem: &dyn GuestMemory,
    q: &mut Qp,
    pos: u16,
    raw: &mut [u8; MAX_WQE_BYTES],
    resolve: bool,
) -> Result<usize, ()> {
    let ring = (q.sq_size() as u64) * prm_wqe::SEND_WQE_BB as u64;
    let at = (pos as u64 & (q.sq_size() as u64 - 1)) * prm_wqe::SEND_WQE_BB as u64;
    // Up to WQE_PREFETCH bytes of the ring from the WQE on, in one access when they lie in one
    // page of the SQ buffer (most WQEs, a UMR's included, fit): the ctrl segment's `ds` then
    // says how much of it is the WQE. The bytes past the WQE are ignored. If that read fails,
    // the WQE is read exactly as long as it is (below), so a ring whose later bytes are not
    // guest memory fails no WQE that did not reach them.
    let ahead = WQE_PREFETCH.min((ring - at) as usize);
    let mut have = 0;
    if let Some(bus) = q.buf.bus_in_page(q.sq_offset + at, ahead) {
        // Through the QP's view of the SQ's region: one bounds check and one copy.
        if q.sq_view.read(mem, bus, &mut raw[..ahead]).is_ok() {
            have = ahead;
            // The stretch around these bytes, for the next WQEs' fetches.
            if resolve {
                q.sq_win.refresh(mem, &q.buf, q.sq_offset + at);
            }
        }
    }
    // Otherwise the first basic block whole, in one access (a WQE starts on a 64-byte block,
    // which lies inside the ring).
    let bb = prm_wqe::SEND_WQE_BB.min(ring as usize);
    if have == 0 {
        q.buf
            .read(mem, q.sq_offset + at, &mut raw[..bb])
            .map_err(|_| ())?;
        have = bb;
    }
    let ds = SendWqe::ds_of(&raw[..16]).max(1) as usize;
    let len = (ds * prm_wqe::SEND_WQE_DS).min(ring as usize);
    let first = len.min((ring - at) as usize);
    if first > have {
        q.buf
            .read(mem, q.sq_offset + at + have as u64, &mut raw[have..first])
            .map_err(|_| ())?;
    }
    if len > first {
        q.buf
            .read(mem, q.sq_offset, &mut raw[first..len])
            .map_err(|_| ())?;
    }
    Ok(len)
}

/// Takes the next receive WQE of QP `qpn` if one is posted: (its bytes' scatter list).
pub(crate) fn next_recv(
    qps: &mut crate::objects::qp::QpTable,
    mem: &Arc<dyn GuestMemory>,
    qpn: u32,
) -> Result<Option<RecvWqe>, ()> {
    let q = qps.get_mut(qpn).ok_or(())?;
    let Some(log) = q.rq_log_size else {
        return Ok(None);
    };
    let now = mem.version();
    let (rq_pi, _) = read_dbr_in(&mut q.dbr_view, now, mem, q.dbr_addr).map_err(|_| ())?;
    if rq_pi == q.rq_ci as u16 {
        return Ok(None);
    }
    let stride = 1usize << q.rq_stride_shift;
    let at = ((q.rq_ci as u64) & ((1u64 << log) - 1)) << q.rq_stride_shift;
    // The whole stride is read (and must be guest memory), into a small buffer for the usual
    // strides of up to 16 entries (zeroing 2 KiB per receive showed up per packet).
    let mut small = [0u8; 256];
    let mut large;
    let raw: &mut [u8] = if stride <= small.len() {
        &mut small[..stride]
    } else {
        large = [0u8; 16 << 7];
        &mut large[..stride.min(16 << 7)]
    };
    match q.buf.bus_in_page(at, raw.len()) {
        // Through the QP's view of its buffer's region (the RQ lies in the SQ's buffer).
        Some(bus) => q.sq_view.read(&**mem, bus, raw),
        None => q.buf.read(&**mem, at, raw),
    }
    .map_err(|_| ())?;
    Ok(Some(RecvWqe::parse(raw)))
}

/// Whether `qpc.atomic_mode` lets the responder execute an atomic of `bytes` bytes. Modes
/// (Linux include/linux/mlx5/driver.h `MLX5_ATOMIC_MODE_*`): 1 IB-compliant and 2 ConnectX
/// (8-byte standard atomics), 3 up to 8 bytes, 4..=8 up to `2^mode` bytes (16 .. 256);
/// 0 (NONE) and anything else none.
pub(crate) fn atomic_mode_covers(mode: u32, bytes: u64) -> bool {
    match mode {
        1 | 2 => bytes == 8,
        3..=8 => bytes <= 1 << mode,
        _ => false,
    }
}

/// Whether 8-byte atomics use host (little-endian) byte order
/// (`atomic_caps.atomic_req_8B_endianness_mode` = 1) rather than big-endian (0, the default).
pub(crate) fn atomic_host_endian(control: &Control) -> bool {
    let atomic = mlx5_prm::hca_cap::cap_type::ATOMIC;
    control.cap_of(atomic, mlx5_prm::atomic_caps::ATOMIC_REQ_8B_ENDIANNESS_MODE) == 1
}

// ---------------------------------------------------------------------------------------------
// Errors and flushing
// ---------------------------------------------------------------------------------------------

/// Posts an affiliated QP event (`qp_events` naming a QP, `MLX5_EVENT_QUEUE_TYPE_QP`).
pub(crate) fn post_qp_event(hca: &mut Dp<'_>, event_type: u8, qpn: u32) {
    let mut data = [0u8; qp_events::BYTES];
    let _ = qp_events::TYPE.set(&mut data, event_queue_type::QP.into());
    let _ = qp_events::QPN_RQN_SQN.set(&mut data, qpn);
    hca.post_async_event(event_type, 0, &data);
}

/// A DMA failure on a work queue: WQ_CATAS_ERROR event and the QP to ERR.
pub(crate) fn wq_catastrophe(hca: &mut Dp<'_>, qpn: u32, why: &str) {
    hca.trace_note(format_args!(
        "QP {qpn:#x}: work queue catastrophic error: {why}"
    ));
    post_qp_event(hca, event::WQ_CATAS_ERROR, qpn);
    enter_error(hca, qpn);
}

/// Moves QP `qpn` to ERR and flushes every outstanding WQE of both queues (2ERR command, error
/// completions, responder class C errors).
pub(crate) fn enter_error(hca: &mut Dp<'_>, qpn: u32) {
    rc::enter_error(hca, qpn);
}

pub(crate) fn flush_cqe(opcode: u8, wqe_opcode: u8, qpn: u32, counter: u16, uidx: u32) -> Cqe {
    Cqe::error(
        opcode,
        cqe::syndrome::WR_FLUSH_ERR,
        vendor::FLUSH,
        wqe_opcode,
        qpn,
        counter,
    )
    .with_user_index(uidx)
}

/// Flushes SQ WQEs not executed yet and posted receive WQEs of a QP in ERR.
pub(crate) fn flush_new_work(hca: &mut Dp<'_>, qpn: u32) {
    let mem = hca.mem.clone();
    let Some(q) = hca.objects.qps.get(qpn) else {
        return;
    };
    if q.state != qp::state::ERR {
        return;
    }
    let Ok((rq_pi, sq_pi)) = read_dbr(&*mem, q.dbr_addr) else {
        return;
    };
    let uidx = q.user_index;
    if q.sq_log_size.is_some() {
        let cqn = q.cqn_snd;
        let mut budget = sq_pi.wrapping_sub(q.sq_next) as u32;
        if budget > q.sq_size() {
            budget = 0; // an impossible counter: nothing to flush
        }
        while budget > 0 {
            let Some(q) = hca.objects.qps.get_mut(qpn) else {
                return;
            };
            if q.sq_next == sq_pi {
                break;
            }
            let mut raw = [0u8; MAX_WQE_BYTES];
            if fetch_wqe(&mem, mem.version(), q, q.sq_next, &mut raw).is_err() {
                break;
            }
            let idx = u16::from_be_bytes([raw[1], raw[2]]);
            let bbs = SendWqe::bbs_of(&raw[..16]);
            q.sq_next = q.sq_next.wrapping_add(bbs as u16);
            budget = budget.saturating_sub(bbs);
            let c = flush_cqe(cqe::opcode::REQ_ERR, raw[3], qpn, idx, uidx);
            post_cqe(hca, cqn, &c);
        }
    }
    let Some(q) = hca.objects.qps.get(qpn) else {
        return;
    };
    if q.rq_log_size.is_some() {
        let cqn = q.cqn_rcv;
        let mut n = rq_pi.wrapping_sub(q.rq_ci as u16) as u32;
        if n > 1 << q.rq_log_size.unwrap_or(0) {
            n = 0; // an impossible counter: nothing to flush
        }
        for _ in 0..n {
            let Some(q) = hca.objects.qps.get_mut(qpn) else {
                return;
            };
            let counter = q.rq_ci as u16;
            q.rq_ci = q.rq_ci.wrapping_add(1);
            let c = flush_cqe(cqe::opcode::RESP_ERR, 0, qpn, counter, uidx);
            post_cqe(hca, cqn, &c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::RegionMemory;
    use crate::objects::mr::PagedBuffer;

    /// A ring of 16 basic blocks (1 KiB) at offset 64 of a buffer of two 4 KiB pages, each
    /// its own region (so the ring's stretch is one page), or, with `one_region`, both pages
    /// in one region (the stretch is the whole buffer). Returns the memory, the QP, and the
    /// ring's bus address.
    fn ring(one_region: bool, second_page_offset: u64) -> (RegionMemory, Qp, u64) {
        let mem = RegionMemory::with_base(0x10_0000);
        let (p0, p1) = if one_region {
            mem.insert(0x20000, &[0u8; 0x2000]).unwrap();
            (0x20000, 0x21000)
        } else {
            mem.insert(0x20000, &[0u8; 0x1000]).unwrap();
            mem.insert(0x40000, &[0u8; 0x1000]).unwrap();
            (0x20000, 0x40000)
        };
        let pas: Vec<u8> = [p0, p1]
            .iter()
            .flat_map(|p: &u64| p.to_be_bytes())
            .collect();
        // The SQ at `second_page_offset - 512` of the buffer: it straddles the pages when
        // that is 4 KiB, and lies in the second page when it is 5 KiB.
        let sq_offset = second_page_offset - 512;
        let buf = PagedBuffer::new(&pas, 0, 0, 0x2000).unwrap();
        let bus = if sq_offset >= 0x1000 {
            p1 + sq_offset - 0x1000
        } else {
            p0 + sq_offset
        };
        (mem, Qp::with_ring(buf, sq_offset, 4), bus)
    }

    /// Writes a WQE of `ds` 16-byte units (its bytes numbered from `seed`) at ring position
    /// `pos`, wrapping at the ring's end as software does.
    fn put_wqe(q: &Qp, mem: &RegionMemory, pos: u16, ds: u8, seed: u8) {
        let mut w = [0u8; 1024];
        for (i, b) in w.iter_mut().enumerate() {
            *b = seed.wrapping_add(i as u8);
        }
        w[7] = (w[7] & !0x3f) | ds;
        let ring = 16 * 64u64;
        let at = (pos as u64 % 16) * 64;
        let n = (ds as u64 * 16).clamp(16, ring);
        let first = n.min(ring - at);
        q.buf
            .write(mem, q.sq_offset + at, &w[..first as usize])
            .unwrap();
        if n > first {
            q.buf
                .write(mem, q.sq_offset, &w[first as usize..n as usize])
                .unwrap();
        }
    }

    /// [`fetch_wqe`] (through the ring's stretch when it holds the WQE) makes the decisions of
    /// [`fetch_wqe_general`] (the ring's own reads): the same length and the same bytes for a
    /// WQE at every position of the ring (wrapping or not), of every size (including `ds` 0
    /// and larger than the ring), in a ring inside one region or straddling two, with the
    /// stretch resolved or not, and the same failure once the memory under the ring is gone.
    #[test]
    fn fast_fetch_matches_the_general_path() {
        let mut checked = 0;
        for one_region in [true, false] {
            for second in [0x1000u64, 0x1400] {
                let (mem, mut q, _) = ring(one_region, second);
                let dmem: &dyn GuestMemory = &mem;
                for pos in 0..40u16 {
                    for ds in [0u8, 1, 3, 4, 9, 16, 17, 48, 63] {
                        put_wqe(&q, &mem, pos, ds, pos as u8 ^ ds);
                        let mut g = [0u8; MAX_WQE_BYTES];
                        let mut f = [0u8; MAX_WQE_BYTES];
                        let mut fresh = Qp::with_ring(q.buf.clone(), q.sq_offset, 4);
                        let want = fetch_wqe_general(dmem, &mut fresh, pos, &mut g, false);
                        let got = fetch_wqe(&dmem, dmem.version(), &mut q, pos, &mut f);
                        assert_eq!(got, want, "pos {pos} ds {ds} {one_region} {second:#x}");
                        let n = want.unwrap();
                        assert_eq!(f[..n], g[..n], "pos {pos} ds {ds}");
                        checked += 1;
                    }
                }
                // Another region: the memory's version moves, the stretch is not used until
                // resolved again, and the bytes are the same.
                mem.insert(0x80000, &[0u8; 64]).unwrap();
                put_wqe(&q, &mem, 3, 9, 7);
                let (mut g, mut f) = ([0u8; MAX_WQE_BYTES], [0u8; MAX_WQE_BYTES]);
                let mut fresh = Qp::with_ring(q.buf.clone(), q.sq_offset, 4);
                let want = fetch_wqe_general(dmem, &mut fresh, 3, &mut g, false);
                assert_eq!(fetch_wqe(&dmem, dmem.version(), &mut q, 3, &mut f), want);
                assert_eq!(f[..144], g[..144]);
                // The ring's first page gone: both fail alike.
                assert!(mem.free(0x20000));
                for pos in 0..16u16 {
                    let mut fresh = Qp::with_ring(q.buf.clone(), q.sq_offset, 4);
                    let want = fetch_wqe_general(dmem, &mut fresh, pos, &mut g, false);
                    let got = fetch_wqe(&dmem, dmem.version(), &mut q, pos, &mut f);
                    assert_eq!(got.is_ok(), want.is_ok(), "pos {pos} after free");
                    if let (Ok(n), Ok(_)) = (got, want) {
                        assert_eq!(f[..n], g[..n]);
                    }
                }
            }
        }
        assert_eq!(checked, 2 * 2 * 40 * 9);
    }
}
