//! WQE execution: the send doorbell, the RC requester and responder, completions, retries and
//! the error / flush behaviour.
//!
//! Flow: a doorbell (UAR DB/BF register) names the QP; the SQ producer counter comes from the
//! doorbell record (`dbrec[1]`, facts trap 15). Each WQE between the last executed one and that
//! counter is fetched from the SQ ring, its gather list is checked against the lkeys *before*
//! any byte moves, and its message goes out as one [`Packet`] through the port. The payload of
//! a WRITE or SEND without inline data (and of a READ response) stays in guest memory as the
//! pieces the keys resolved to, and the receiver moves it with one [`GuestMemory::copy`] when it
//! shares that memory (loopback, [`crate::wire::Port::pair_sharing_memory`]); the port reads it
//! into the packet for any other link. The responder checks the PSN, the QP's remote-access
//! enables and the rkey (again before touching memory), executes, and answers with an ACK, a
//! READ / atomic response or a NAK. The requester completes WQEs in order as ACKs and responses
//! arrive. Loopback traffic is processed synchronously: when the doorbell returns, every
//! loopback WQE it started has completed.
//!
//! Error semantics follow the RC responder classes as the rxe soft-RoCE responder implements
//! them (Linux drivers/infiniband/sw/rxe/rxe_resp.c `rxe_responder`): PSN gaps get one
//! sequence NAK (class B), a missing receive WQE an RNR NAK carrying `min_rnr_nak`, disabled
//! operations / bad length / misaligned atomics an invalid-request NAK and rkey faults a
//! remote-access NAK (class C: the responder QP moves to ERR). The requester turns NAKs into
//! error CQEs (`MLX5_CQE_SYNDROME_*`), retries RNR NAKs `rnr_retry` times (7 = forever, rxe
//! rxe_comp.c `COMPST_RNR_RETRY`) after the IB RNR timer (Linux include/rdma/ib_verbs.h:1225),
//! and retransmits after `4.096 us << ack_timeout` without an ACK (0 = never; Linux
//! include/rdma/rdmavt_qp.h:730) up to `retry_count` times. An error CQE moves the QP to ERR,
//! and every outstanding or later WQE of both queues completes with WR_FLUSH_ERR.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mlx5_prm::{cmd_hca_cap, cqe, event, event_queue_type, qp, qp_events, uar, wqe};

use crate::cq::{post_cqe, Cqe};
use crate::hca::Hca;
use crate::memory::GuestMemory;
use crate::mr::{Access, KeyUser, MrFault, Resolved};
use crate::qp::{read_dbr, Inflight, Qp, Route, WqeStatus};
use crate::wire::{DeliverError, MemPayload, Nak, Op, Packet};
use crate::wqe::{Gather, RecvWqe, SendWqe, MAX_WQE_BYTES};

const PSN_MASK: u32 = 0xff_ffff;
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
}

/// IB RNR timer encoding in units of 10 µs (0 = 655.36 ms, 1 = 0.01 ms ... 31 = 491.52 ms;
/// Linux include/rdma/ib_verbs.h:1225 `IB_RNR_TIMER_*`).
const RNR_TIMER_10US: [u32; 32] = [
    65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
];

/// The RNR NAK delay for a `min_rnr_nak` value.
pub fn rnr_delay(timer: u8) -> Duration {
    Duration::from_micros(10 * RNR_TIMER_10US[(timer & 0x1f) as usize] as u64)
}

/// The local ACK timeout for an `ack_timeout` value: 4.096 µs << t; `None` = infinite (0).
pub fn ack_timeout(t: u32) -> Option<Duration> {
    (t != 0).then(|| Duration::from_nanos(4096u64 << t.min(31)))
}

/// Signed distance `a - b` in 24-bit PSN space.
fn psn_diff(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b) << 8) as i32) >> 8
}

fn lkey_vendor(f: MrFault) -> u8 {
    match f {
        MrFault::OutOfBounds => vendor::LKEY_BOUNDS,
        MrFault::AccessDenied | MrFault::PageAccessDenied => vendor::LKEY_ACCESS,
        _ => vendor::BAD_LKEY,
    }
}

/// Appends the bus pieces of the checked range `r` to `pieces`, each checked to be guest
/// memory (nothing is copied).
fn memory_pieces(
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

/// Moves payload bytes `[off, off + range length)` of `p` into the checked range `r` of `mem`
/// (one copy per piece when the payload is still in the same memory).
fn deliver(
    mem: &Arc<dyn GuestMemory>,
    p: &Packet,
    off: usize,
    r: &Resolved<'_>,
) -> Result<(), DeliverError> {
    let mut at = off;
    r.for_each_piece(|bus, n| {
        p.deliver(at, mem, bus, n)?;
        at += n;
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------------

/// A write to a UAR page's DB/BF register (offsets 0x800..0xfff). `value` is the 8 bytes
/// written, read big-endian: the first 8 bytes of the last WQE's ctrl segment (facts trap 15).
/// Only the first 8 bytes of each BlueFlame half-buffer ring; the rest of a BlueFlame copy is
/// the WQE body, which the model reads from the SQ ring instead.
pub fn sq_doorbell(hca: &mut Hca, uar_index: u32, offset: u32, value: u64) {
    let off = offset as usize;
    if !(uar::BF_OFFSET..uar::PAGE_SIZE).contains(&off) {
        return;
    }
    let log_bf = hca.cap(cmd_hca_cap::LOG_BF_REG_SIZE).min(11);
    let half = ((1usize << log_bf) / 2).max(8);
    if !(off - uar::BF_OFFSET).is_multiple_of(half) {
        return;
    }
    let qpn = ((value as u32) >> 8) & QPN_MASK;
    match hca.qps.get(qpn) {
        None => {
            hca.trace_note(format_args!(
                "SQ doorbell {value:#018x} at UAR {uar_index:#x}+{offset:#x}: no QP {qpn:#x}, ignored"
            ));
        }
        Some(q) if q.uar != uar_index => {
            let owner = q.uar;
            hca.trace_note(format_args!(
                "SQ doorbell for QP {qpn:#x} on UAR {uar_index:#x}, but its uar_page is {owner:#x}: ignored"
            ));
        }
        Some(_) => kick(hca, qpn),
    }
}

/// Delivers packets that arrived from the wire, runs the RNR and ACK-timeout timers and flushes
/// work posted to QPs in the error state. The device calls it periodically.
pub fn poll_wire(hca: &mut Hca) {
    hca.port.receive();
    timers(hca);
    run(hca);
}

/// Looks at QP `qpn`'s send queue now (doorbell, or the QP just reached RTS).
pub(crate) fn kick(hca: &mut Hca, qpn: u32) {
    queue_kick(hca, qpn);
    run(hca);
}

fn queue_kick(hca: &mut Hca, qpn: u32) {
    if !hca.port.kicks.contains(&qpn) {
        hca.port.kicks.push_back(qpn);
    }
}

/// The engine: processes packets first (so loopback WQEs complete one by one), then lets kicked
/// send queues execute one WQE at a time.
fn run(hca: &mut Hca) {
    loop {
        if let Some(p) = hca.port.inbox.pop_front() {
            dispatch(hca, p);
            continue;
        }
        let Some(&qpn) = hca.port.kicks.front() else {
            break;
        };
        if !sq_step(hca, qpn) {
            hca.port.kicks.pop_front();
        }
    }
}

fn dispatch(hca: &mut Hca, p: Packet) {
    if p.op.is_request() {
        responder(hca, p);
    } else {
        requester_response(hca, p);
    }
}

/// Timers: RNR waits, ACK timeouts; and flushing of work posted to ERR QPs.
fn timers(hca: &mut Hca) {
    let now = Instant::now();
    for qpn in hca.qps.qpns() {
        let Some(q) = hca.qps.get_mut(qpn) else {
            continue;
        };
        if q.state == qp::state::ERR {
            flush_new_work(hca, qpn);
            continue;
        }
        if q.state != qp::state::RTS {
            continue;
        }
        if let Some(t) = q.rnr_deadline {
            if now >= t {
                q.rnr_deadline = None;
                retransmit(hca, qpn, 0);
                queue_kick(hca, qpn);
            }
        } else if let Some(t) = q.ack_deadline {
            if now >= t {
                q.ack_deadline = None;
                if q.retries_left == 0 {
                    fail_first_pending(
                        q,
                        cqe::syndrome::TRANSPORT_RETRY_EXC_ERR,
                        vendor::RETRY_EXCEEDED,
                    );
                    retire(hca, qpn);
                } else {
                    q.retries_left -= 1;
                    retransmit(hca, qpn, 0);
                }
            }
        }
    }
}

fn fail_first_pending(q: &mut Qp, syndrome: u8, vendor: u8) {
    if let Some(e) = q
        .inflight
        .iter_mut()
        .find(|e| e.status == WqeStatus::Pending)
    {
        e.status = WqeStatus::Failed(syndrome, vendor);
    }
}

// ---------------------------------------------------------------------------------------------
// Requester: executing send WQEs
// ---------------------------------------------------------------------------------------------

/// Copies the WQE at SQ position `pos` out of the ring (undoing the wrap) into `raw`; returns
/// its length in bytes (`ds * 16`, at least the 16-byte ctrl segment).
fn fetch_wqe(
    mem: &dyn GuestMemory,
    q: &Qp,
    pos: u16,
    raw: &mut [u8; MAX_WQE_BYTES],
) -> Result<usize, ()> {
    let ring = (q.sq_size() as u64) * wqe::SEND_WQE_BB as u64;
    let at = (pos as u64 & (q.sq_size() as u64 - 1)) * wqe::SEND_WQE_BB as u64;
    q.buf
        .read(mem, q.sq_offset + at, &mut raw[..16])
        .map_err(|_| ())?;
    let ds = SendWqe::ds_of(&raw[..16]).max(1) as usize;
    let len = (ds * wqe::SEND_WQE_DS).min(ring as usize);
    let first = len.min((ring - at) as usize);
    if first > 16 {
        q.buf
            .read(mem, q.sq_offset + at + 16, &mut raw[16..first])
            .map_err(|_| ())?;
    }
    if len > first {
        q.buf
            .read(mem, q.sq_offset, &mut raw[first..len])
            .map_err(|_| ())?;
    }
    Ok(len)
}

/// What the requester needs to know about its QP while building a request.
#[derive(Clone, Copy)]
struct ReqCtx {
    qpn: u32,
    user: KeyUser,
    mtu: u64,
    log_msg_max: u32,
    remote_qpn: u32,
    rgid: [u8; 16],
    sgid: [u8; 16],
    local: bool,
}

impl ReqCtx {
    fn of(q: &Qp) -> ReqCtx {
        ReqCtx {
            qpn: q.qpn,
            user: KeyUser {
                pd: q.pd,
                qpn: q.qpn,
            },
            mtu: q.mtu_bytes(),
            log_msg_max: q.log_msg_max,
            remote_qpn: q.remote_qpn,
            rgid: q.path.rgid,
            sgid: q.sgid,
            local: q.route == Route::Local,
        }
    }

    fn packet(&self, psn: u32, op: Op) -> Packet {
        let mut p = Packet::new(self.remote_qpn, self.qpn, psn, op);
        p.dst_gid = self.rgid;
        p.src_gid = self.sgid;
        p
    }

    fn npkts(&self, len: u64) -> u32 {
        len.div_ceil(self.mtu).max(1) as u32
    }
}

/// Builds the request packet of a parsed WQE (gathering its payload), or the CQE error it
/// completes with. Nothing is read from guest memory before every lkey checked out.
fn build_request(
    hca: &mut Hca,
    ctx: &ReqCtx,
    w: &SendWqe,
    raw: &[u8],
    psn: u32,
) -> Result<(Packet, u32), (u8, u8)> {
    use wqe::opcode::*;
    let prot = |f: MrFault| (cqe::syndrome::LOCAL_PROT_ERR, lkey_vendor(f));
    let total = w.total_len();
    match w.opcode {
        SEND | SEND_IMM | RDMA_WRITE | RDMA_WRITE_IMM => {
            if total > (1u64 << ctx.log_msg_max.min(31)) {
                return Err((cqe::syndrome::LOCAL_LENGTH_ERR, vendor::MSG_TOO_LONG));
            }
            // Check every lkey first.
            for g in w.gathers() {
                if let Gather::Data { len, lkey, addr } = *g {
                    hca.mkeys
                        .resolve(lkey, addr, len, Access::LOCAL_READ, ctx.user)
                        .map_err(prot)?;
                }
            }
            let mem = hca.mem.clone();
            let inline = w
                .gathers()
                .iter()
                .any(|g| matches!(g, Gather::Inline { .. }));
            let mut buf = Vec::new();
            let mut mem_payload = None;
            if inline {
                // Inline bytes live in the WQE: gather everything into the packet.
                buf = hca.port.take_buf(total as usize);
                let mut at = 0usize;
                for g in w.gathers() {
                    match *g {
                        Gather::Inline { at: src, len } => {
                            buf[at..at + len].copy_from_slice(&raw[src..src + len]);
                            at += len;
                        }
                        Gather::Data { len, lkey, addr } => {
                            let r = hca
                                .mkeys
                                .resolve(lkey, addr, len, Access::LOCAL_READ, ctx.user)
                                .map_err(prot)?;
                            if r.read(&*mem, &mut buf[at..at + len as usize]).is_err() {
                                hca.port.give_buf(buf);
                                return Err((cqe::syndrome::LOCAL_PROT_ERR, vendor::DMA_FAULT));
                            }
                            at += len as usize;
                        }
                    }
                }
            } else {
                // The payload stays in guest memory until the receiver moves it (one copy,
                // wire.rs); its pieces are checked to be guest memory now, as a gather would.
                let mut pieces = Vec::new();
                for g in w.gathers() {
                    if let Gather::Data { len, lkey, addr } = *g {
                        let r = hca
                            .mkeys
                            .resolve(lkey, addr, len, Access::LOCAL_READ, ctx.user)
                            .map_err(prot)?;
                        memory_pieces(&*mem, &r, &mut pieces)
                            .map_err(|_| (cqe::syndrome::LOCAL_PROT_ERR, vendor::DMA_FAULT))?;
                    }
                }
                mem_payload = Some(MemPayload { mem, pieces });
            }
            let imm = matches!(w.opcode, SEND_IMM | RDMA_WRITE_IMM).then_some(w.imm);
            let op = if matches!(w.opcode, SEND | SEND_IMM) {
                Op::Send {
                    imm,
                    solicited: w.solicited,
                }
            } else {
                Op::Write {
                    raddr: w.raddr,
                    rkey: w.rkey,
                    imm,
                    solicited: w.solicited,
                }
            };
            let mut p = ctx.packet(psn, op);
            p.npkts = ctx.npkts(total);
            p.data = buf;
            p.len = total as usize;
            p.mem_payload = mem_payload;
            Ok((p, total as u32))
        }
        RDMA_READ => {
            if total > (1u64 << ctx.log_msg_max.min(31)) {
                return Err((cqe::syndrome::LOCAL_LENGTH_ERR, vendor::MSG_TOO_LONG));
            }
            for g in w.gathers() {
                if let Gather::Data { len, lkey, addr } = *g {
                    hca.mkeys
                        .resolve(lkey, addr, len, Access::LOCAL_WRITE, ctx.user)
                        .map_err(prot)?;
                }
            }
            let mut p = ctx.packet(
                psn,
                Op::ReadRequest {
                    raddr: w.raddr,
                    rkey: w.rkey,
                    len: total as u32,
                },
            );
            p.npkts = ctx.npkts(total);
            Ok((p, total as u32))
        }
        ATOMIC_CS | ATOMIC_FA => {
            if let Some(Gather::Data { len, lkey, addr }) = w.gathers().first().copied() {
                hca.mkeys
                    .resolve(lkey, addr, len, Access::LOCAL_WRITE, ctx.user)
                    .map_err(prot)?;
            }
            let p = ctx.packet(
                psn,
                Op::Atomic {
                    raddr: w.raddr,
                    rkey: w.rkey,
                    fetch_add: w.opcode == ATOMIC_FA,
                    swap_add: w.swap_add,
                    compare: w.compare,
                },
            );
            Ok((p, 8))
        }
        _ => Err((cqe::syndrome::LOCAL_QP_OP_ERR, vendor::MALFORMED_WQE)),
    }
}

/// Executes the next WQE of QP `qpn`'s send queue. Returns true if it consumed one.
fn sq_step(hca: &mut Hca, qpn: u32) -> bool {
    let mem = hca.mem.clone();
    let Some(q) = hca.qps.get(qpn) else {
        return false;
    };
    if q.sq_log_size.is_none() {
        return false;
    }
    if q.state == qp::state::ERR {
        flush_new_work(hca, qpn);
        return false;
    }
    if q.state != qp::state::RTS || q.sq_blocked || q.rnr_deadline.is_some() {
        return false;
    }
    let pi = match read_dbr(&*mem, q.dbr_addr) {
        Ok((_, sq)) => sq,
        Err(_) => {
            wq_catastrophe(hca, qpn, "doorbell record unreadable");
            return false;
        }
    };
    let pos = q.sq_next;
    if pos == pi {
        return false;
    }
    if pi.wrapping_sub(pos) as u32 > q.sq_size() {
        // More WQEBBs announced than the ring holds: the counter is not one software could
        // have produced.
        wq_catastrophe(hca, qpn, "SQ producer counter beyond the ring");
        return false;
    }
    let mut raw = [0u8; MAX_WQE_BYTES];
    let len = match fetch_wqe(&*mem, q, pos, &mut raw) {
        Ok(n) => n,
        Err(()) => {
            wq_catastrophe(hca, qpn, "SQ buffer unreadable");
            return false;
        }
    };
    let ctx = ReqCtx::of(q);
    let max_wqe = hca.cap(cmd_hca_cap::MAX_WQE_SZ_SQ) as usize;
    let parsed = SendWqe::parse(&raw[..len]);
    let (opcode, wqe_index, wqebbs) = match &parsed {
        Ok(w) => (w.opcode, w.wqe_index, w.wqebbs().max(1)),
        Err(_) => (
            raw[3],
            u16::from_be_bytes([raw[1], raw[2]]),
            SendWqe::bbs_of(&raw[..16]),
        ),
    };
    let w = match parsed {
        Ok(w) if w.qpn == qpn && (max_wqe == 0 || w.ds as usize * 16 <= max_wqe) => w,
        _ => {
            push_failed(
                hca,
                qpn,
                pos,
                wqe_index,
                opcode,
                wqebbs,
                cqe::syndrome::LOCAL_QP_OP_ERR,
                vendor::MALFORMED_WQE,
            );
            return true;
        }
    };
    // Fence: wait for earlier READs and atomics to complete.
    if w.fence != 0 {
        let q = hca.qps.get(qpn).expect("QP looked up above");
        if q.inflight
            .iter()
            .any(|e| e.status == WqeStatus::Pending && e.wants_response())
        {
            return false;
        }
    }
    if w.opcode == wqe::opcode::NOP {
        let q = hca.qps.get_mut(qpn).expect("QP looked up above");
        q.inflight.push_back(Inflight {
            wqe_index,
            sq_pos: pos,
            opcode,
            signaled: w.signaled(),
            first_psn: q.npsn,
            npkts: 0,
            byte_len: 0,
            status: WqeStatus::Done,
        });
        q.sq_next = pos.wrapping_add(wqebbs as u16);
        retire(hca, qpn);
        return true;
    }
    let psn = hca.qps.get(qpn).map_or(0, |q| q.npsn);
    match build_request(hca, &ctx, &w, &raw[..len], psn) {
        Err((syndrome, vend)) => {
            push_failed(hca, qpn, pos, wqe_index, opcode, wqebbs, syndrome, vend);
        }
        Ok((pkt, byte_len)) => {
            let q = hca.qps.get_mut(qpn).expect("QP looked up above");
            q.inflight.push_back(Inflight {
                wqe_index,
                sq_pos: pos,
                opcode,
                signaled: w.signaled(),
                first_psn: psn,
                npkts: pkt.npkts,
                byte_len,
                status: WqeStatus::Pending,
            });
            q.npsn = psn.wrapping_add(pkt.npkts) & PSN_MASK;
            q.sq_next = pos.wrapping_add(wqebbs as u16);
            if q.ack_deadline.is_none() {
                q.ack_deadline = ack_timeout(q.path.ack_timeout).map(|d| Instant::now() + d);
            }
            hca.port.send(pkt, ctx.local);
        }
    }
    true
}

/// Records a WQE that failed locally; it completes in order (after the WQEs before it) and
/// then moves the QP to ERR.
#[allow(clippy::too_many_arguments)]
fn push_failed(
    hca: &mut Hca,
    qpn: u32,
    pos: u16,
    wqe_index: u16,
    opcode: u8,
    wqebbs: u32,
    syndrome: u8,
    vend: u8,
) {
    if let Some(q) = hca.qps.get_mut(qpn) {
        q.inflight.push_back(Inflight {
            wqe_index,
            sq_pos: pos,
            opcode,
            signaled: true,
            first_psn: q.npsn,
            npkts: 0,
            byte_len: 0,
            status: WqeStatus::Failed(syndrome, vend),
        });
        q.sq_next = pos.wrapping_add(wqebbs as u16);
        q.sq_blocked = true;
    }
    retire(hca, qpn);
}

/// Resends every pending request of QP `qpn` from inflight entry `from` on, with its original
/// PSN (go-back-N), fetching the WQEs from the SQ again as hardware does.
fn retransmit(hca: &mut Hca, qpn: u32, from: usize) {
    let mem = hca.mem.clone();
    let mut i = from;
    loop {
        let Some(q) = hca.qps.get(qpn) else {
            return;
        };
        let Some(e) = q.inflight.get(i).cloned() else {
            break;
        };
        i += 1;
        if e.status != WqeStatus::Pending || e.npkts == 0 {
            continue;
        }
        let mut raw = [0u8; MAX_WQE_BYTES];
        let Ok(len) = fetch_wqe(&*mem, q, e.sq_pos, &mut raw) else {
            wq_catastrophe(hca, qpn, "SQ buffer unreadable on retransmission");
            return;
        };
        let ctx = ReqCtx::of(q);
        let built = SendWqe::parse(&raw[..len])
            .map_err(|_| (cqe::syndrome::LOCAL_QP_OP_ERR, vendor::MALFORMED_WQE))
            .and_then(|w| build_request(hca, &ctx, &w, &raw[..len], e.first_psn));
        match built {
            Ok((pkt, _)) => hca.port.send(pkt, ctx.local),
            Err((s, v)) => {
                if let Some(q) = hca.qps.get_mut(qpn) {
                    if let Some(x) = q.inflight.get_mut(i - 1) {
                        x.status = WqeStatus::Failed(s, v);
                    }
                }
                break;
            }
        }
    }
    if let Some(q) = hca.qps.get_mut(qpn) {
        q.ack_deadline = ack_timeout(q.path.ack_timeout).map(|d| Instant::now() + d);
    }
    retire(hca, qpn);
}

/// Completes finished WQEs at the head of QP `qpn`'s inflight list, in order.
fn retire(hca: &mut Hca, qpn: u32) {
    loop {
        let Some(q) = hca.qps.get_mut(qpn) else {
            return;
        };
        let Some(head) = q.inflight.front() else {
            q.ack_deadline = None;
            return;
        };
        let (cqn, uidx) = (q.cqn_snd, q.user_index);
        match head.status {
            WqeStatus::Pending => return,
            WqeStatus::Done => {
                let e = q.inflight.pop_front().expect("head exists");
                if e.signaled {
                    let c = Cqe::requester(e.opcode, qpn, e.wqe_index, e.byte_len)
                        .with_user_index(uidx);
                    post_cqe(hca, cqn, &c);
                }
            }
            WqeStatus::Failed(syndrome, vend) => {
                let e = q.inflight.pop_front().expect("head exists");
                let c = Cqe::error(
                    cqe::opcode::REQ_ERR,
                    syndrome,
                    vend,
                    e.opcode,
                    qpn,
                    e.wqe_index,
                )
                .with_user_index(uidx);
                post_cqe(hca, cqn, &c);
                enter_error(hca, qpn);
                return;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Requester: responses
// ---------------------------------------------------------------------------------------------

/// Marks pending ACK-completed WQEs (not READ / atomics) whose last PSN is at or before `psn`.
/// Returns whether anything completed.
fn ack_upto(q: &mut Qp, psn: u32) -> bool {
    let mut progress = false;
    for e in q.inflight.iter_mut() {
        if e.npkts == 0 {
            continue;
        }
        if psn_diff(e.first_psn, psn) > 0 {
            break;
        }
        if e.status == WqeStatus::Pending && !e.wants_response() && psn_diff(e.last_psn(), psn) <= 0
        {
            e.status = WqeStatus::Done;
            progress = true;
        }
    }
    progress
}

fn requester_response(hca: &mut Hca, p: Packet) {
    let qpn = p.dst_qpn;
    let ok = hca.qps.get(qpn).is_some_and(|q| {
        q.state == qp::state::RTS && q.remote_qpn == p.src_qpn && q.sq_log_size.is_some()
    });
    if !ok {
        hca.port.give_buf(p.data);
        return;
    }
    let mut progress = false;
    match p.op {
        Op::Ack => {
            let q = hca.qps.get_mut(qpn).expect("checked");
            progress = ack_upto(q, p.psn);
        }
        Op::ReadResponse | Op::AtomicResponse { .. } => {
            let q = hca.qps.get_mut(qpn).expect("checked");
            // A response implicitly acknowledges every request before it.
            progress |= ack_upto(q, p.psn.wrapping_sub(1) & PSN_MASK);
            let idx = q.inflight.iter().position(|e| {
                e.status == WqeStatus::Pending && e.wants_response() && e.first_psn == p.psn
            });
            if let Some(idx) = idx {
                let status = scatter_response(hca, qpn, idx, &p);
                if let Some(e) = hca.qps.get_mut(qpn).and_then(|q| q.inflight.get_mut(idx)) {
                    e.status = status;
                }
                progress = true;
            }
        }
        Op::Nak(n) => {
            let q = hca.qps.get_mut(qpn).expect("checked");
            progress |= ack_upto(q, p.psn.wrapping_sub(1) & PSN_MASK);
            let idx = q.inflight.iter().position(|e| {
                e.status == WqeStatus::Pending
                    && e.npkts > 0
                    && psn_diff(p.psn, e.first_psn) >= 0
                    && psn_diff(p.psn, e.last_psn()) <= 0
            });
            if let Some(idx) = idx {
                let fail = |q: &mut Qp, s: u8, v: u8| {
                    q.inflight[idx].status = WqeStatus::Failed(s, v);
                };
                match n {
                    Nak::PsnSequence => {
                        if q.rnr_deadline.is_none() {
                            if q.retries_left == 0 {
                                fail(
                                    q,
                                    cqe::syndrome::TRANSPORT_RETRY_EXC_ERR,
                                    vendor::RETRY_EXCEEDED,
                                );
                            } else {
                                q.retries_left -= 1;
                                retransmit(hca, qpn, idx);
                            }
                        }
                    }
                    Nak::Rnr { timer } => {
                        if q.rnr_left == 0 {
                            fail(q, cqe::syndrome::RNR_RETRY_EXC_ERR, vendor::RNR_EXCEEDED);
                        } else {
                            // rnr_retry 7 means retry forever (rxe_comp.c COMPST_RNR_RETRY).
                            if q.rnr_retry != 7 {
                                q.rnr_left -= 1;
                            }
                            q.rnr_deadline = Some(Instant::now() + rnr_delay(timer));
                            q.ack_deadline = None;
                        }
                    }
                    Nak::InvalidRequest => fail(
                        q,
                        cqe::syndrome::REMOTE_INVAL_REQ_ERR,
                        vendor::NAK_INVALID_REQUEST,
                    ),
                    Nak::RemoteAccess => fail(
                        q,
                        cqe::syndrome::REMOTE_ACCESS_ERR,
                        vendor::NAK_REMOTE_ACCESS,
                    ),
                    Nak::RemoteOperational => fail(
                        q,
                        cqe::syndrome::REMOTE_OP_ERR,
                        vendor::NAK_REMOTE_OPERATIONAL,
                    ),
                }
            }
        }
        _ => {}
    }
    hca.port.give_buf(p.data);
    if let Some(q) = hca.qps.get_mut(qpn) {
        if progress {
            // Forward progress resets the retry budgets and restarts the ACK timer.
            q.retries_left = q.retry_count;
            q.rnr_left = q.rnr_retry;
            q.ack_deadline = ack_timeout(q.path.ack_timeout).map(|d| Instant::now() + d);
        }
    }
    retire(hca, qpn);
    queue_kick(hca, qpn);
}

/// Writes a READ or atomic response into the WQE's local buffers. Returns the WQE's status.
fn scatter_response(hca: &mut Hca, qpn: u32, idx: usize, p: &Packet) -> WqeStatus {
    let mem = hca.mem.clone();
    let Some(q) = hca.qps.get(qpn) else {
        return WqeStatus::Pending;
    };
    let e = q.inflight[idx].clone();
    let user = KeyUser { pd: q.pd, qpn };
    let mut raw = [0u8; MAX_WQE_BYTES];
    let Ok(len) = fetch_wqe(&*mem, q, e.sq_pos, &mut raw) else {
        return WqeStatus::Failed(cqe::syndrome::LOCAL_PROT_ERR, vendor::DMA_FAULT);
    };
    let Ok(w) = SendWqe::parse(&raw[..len]) else {
        return WqeStatus::Failed(cqe::syndrome::LOCAL_QP_OP_ERR, vendor::MALFORMED_WQE);
    };
    let atomic = match p.op {
        Op::AtomicResponse { orig } => Some(orig),
        _ => None,
    };
    let total = atomic.map_or(p.len, |o| o.len());
    if total as u64 != w.total_len() {
        return WqeStatus::Failed(cqe::syndrome::LOCAL_LENGTH_ERR, vendor::RECV_TOO_SMALL);
    }
    // Check all, then write.
    for pass in 0..2 {
        let mut at = 0usize;
        for g in w.gathers() {
            if let Gather::Data { len, lkey, addr } = *g {
                let r = match hca
                    .mkeys
                    .resolve(lkey, addr, len, Access::LOCAL_WRITE, user)
                {
                    Ok(r) => r,
                    Err(f) => {
                        return WqeStatus::Failed(cqe::syndrome::LOCAL_PROT_ERR, lkey_vendor(f))
                    }
                };
                if pass == 1 {
                    let moved = match atomic {
                        Some(orig) => r
                            .write(&*mem, &orig[at..at + len as usize])
                            .map_err(DeliverError::Destination),
                        None => deliver(&mem, p, at, &r),
                    };
                    match moved {
                        Ok(()) => {}
                        // The response's bytes are gone (the responder's memory was unmapped
                        // under it): treat it as lost; the ACK timer resends the READ.
                        Err(DeliverError::Source(_)) => return WqeStatus::Pending,
                        Err(DeliverError::Destination(_)) => {
                            return WqeStatus::Failed(
                                cqe::syndrome::LOCAL_PROT_ERR,
                                vendor::DMA_FAULT,
                            )
                        }
                    }
                }
                at += len as usize;
            }
        }
    }
    WqeStatus::Done
}

// ---------------------------------------------------------------------------------------------
// Responder
// ---------------------------------------------------------------------------------------------

/// How a responder-side failure is reported.
struct RespFail {
    nak: Nak,
    /// Affiliated asynchronous event (WQ_INVAL_REQ_ERROR / WQ_ACCESS_ERROR).
    event: u8,
    /// Error CQE for the receive WQE the message consumed, if any: (syndrome, vendor).
    rq_cqe: Option<(u8, u8)>,
}

fn reply(hca: &mut Hca, q_route_local: bool, mut p: Packet) {
    p.npkts = p.npkts.max(1);
    hca.port.send(p, q_route_local);
}

fn responder(hca: &mut Hca, p: Packet) {
    let qpn = p.dst_qpn;
    let Some(q) = hca.qps.get_mut(qpn) else {
        hca.port.give_buf(p.data);
        return;
    };
    let accepting = matches!(q.state, qp::state::RTR | qp::state::RTS);
    if !accepting || p.src_qpn != q.remote_qpn {
        hca.port.give_buf(p.data);
        return;
    }
    let local = q.route == Route::Local;
    let answer = |q: &Qp, psn: u32, op: Op| {
        let mut a = Packet::new(q.remote_qpn, q.qpn, psn, op);
        a.dst_gid = q.path.rgid;
        a.src_gid = q.sgid;
        a
    };
    let first_contact = q.state == qp::state::RTR && !q.comm_est;
    if first_contact {
        q.comm_est = true;
    }
    let epsn = q.epsn;
    let d = psn_diff(p.psn, epsn);
    if d > 0 {
        // Class B: one sequence NAK per gap, carrying the expected PSN.
        if q.nak_seq_sent != Some(epsn) {
            q.nak_seq_sent = Some(epsn);
            let a = answer(q, epsn, Op::Nak(Nak::PsnSequence));
            reply(hca, local, a);
        }
        hca.port.give_buf(p.data);
        return;
    }
    if first_contact {
        post_qp_event(hca, event::COMM_EST, qpn);
    }
    if d < 0 {
        duplicate(hca, qpn, p);
        return;
    }
    let result = execute(hca, qpn, &p);
    let q = hca.qps.get_mut(qpn).expect("checked above");
    match result {
        Ok(Some(resp)) => {
            q.epsn = p.psn.wrapping_add(p.npkts.max(1)) & PSN_MASK;
            q.nak_seq_sent = None;
            reply(hca, local, resp);
        }
        Ok(None) => {
            q.epsn = p.psn.wrapping_add(p.npkts.max(1)) & PSN_MASK;
            q.nak_seq_sent = None;
            let a = answer(q, q.epsn.wrapping_sub(1) & PSN_MASK, Op::Ack);
            reply(hca, local, a);
        }
        Err(Refusal::Lost) => {
            // The payload could not be read: as if the packet had been corrupted on the way.
            // Nothing changes; the requester's ACK timer resends it.
            hca.port.dropped += 1;
            hca.trace_note(format_args!(
                "QP {qpn:#x}: payload of PSN {:#x} unreadable: request dropped",
                p.psn
            ));
        }
        Err(Refusal::Rnr) => {
            // RNR: no receive WQE; the requester retries the same PSN later.
            let a = answer(
                q,
                p.psn,
                Op::Nak(Nak::Rnr {
                    timer: q.min_rnr_nak as u8,
                }),
            );
            reply(hca, local, a);
        }
        Err(Refusal::Fail(f)) => {
            let a = answer(q, p.psn, Op::Nak(f.nak));
            let (cqn, uidx, rq_ci, src) = (q.cqn_rcv, q.user_index, q.rq_ci, p.src_qpn);
            if let Some((s, v)) = f.rq_cqe {
                q.rq_ci = q.rq_ci.wrapping_add(1);
                let c = Cqe::error(cqe::opcode::RESP_ERR, s, v, 0, qpn, rq_ci as u16)
                    .with_user_index(uidx)
                    .with_remote_qpn(src);
                post_cqe(hca, cqn, &c);
            }
            reply(hca, local, a);
            post_qp_event(hca, f.event, qpn);
            enter_error(hca, qpn);
        }
    }
    hca.port.give_buf(p.data);
}

/// A request with a PSN before the expected one: re-ACK, re-execute a READ, replay an atomic.
fn duplicate(hca: &mut Hca, qpn: u32, p: Packet) {
    let q = hca.qps.get(qpn).expect("checked by caller");
    let local = q.route == Route::Local;
    let mut a = Packet::new(q.remote_qpn, qpn, p.psn, Op::Ack);
    a.dst_gid = q.path.rgid;
    a.src_gid = q.sgid;
    match p.op {
        Op::ReadRequest { .. } => {
            if let Ok(Some(resp)) = execute(hca, qpn, &p) {
                reply(hca, local, resp);
            }
        }
        Op::Atomic { .. } => {
            if let Some(&(_, orig)) = q.atomic_replay.iter().find(|(psn, _)| *psn == p.psn) {
                a.op = Op::AtomicResponse { orig };
                reply(hca, local, a);
            }
        }
        _ => {
            a.psn = q.epsn.wrapping_sub(1) & PSN_MASK;
            reply(hca, local, a);
        }
    }
    hca.port.give_buf(p.data);
}

/// Takes the next receive WQE of QP `qpn` if one is posted: (its bytes' scatter list).
fn next_recv(hca: &mut Hca, qpn: u32) -> Result<Option<RecvWqe>, ()> {
    let mem = hca.mem.clone();
    let q = hca.qps.get(qpn).ok_or(())?;
    let Some(log) = q.rq_log_size else {
        return Ok(None);
    };
    let (rq_pi, _) = read_dbr(&*mem, q.dbr_addr).map_err(|_| ())?;
    if rq_pi == q.rq_ci as u16 {
        return Ok(None);
    }
    let stride = 1usize << q.rq_stride_shift;
    let at = ((q.rq_ci as u64) & ((1u64 << log) - 1)) << q.rq_stride_shift;
    let mut raw = [0u8; 16 << 7];
    q.buf.read(&*mem, at, &mut raw[..stride]).map_err(|_| ())?;
    Ok(Some(RecvWqe::parse(&raw[..stride])))
}

/// Why a request in sequence gets no ACK or response.
enum Refusal {
    /// No receive WQE: RNR NAK.
    Rnr,
    /// Class C error.
    Fail(RespFail),
    /// The payload could not be read from the sender's memory (it went away after the
    /// requester checked it): the packet counts as lost in transit.
    Lost,
}

/// Executes a request in sequence. `Ok(Some(p))`: answer with `p`; `Ok(None)`: ACK;
/// `Err(r)`: RNR NAK, class C error or a lost packet.
fn execute(hca: &mut Hca, qpn: u32, p: &Packet) -> Result<Option<Packet>, Refusal> {
    let mem = hca.mem.clone();
    let q = hca.qps.get(qpn).expect("checked by caller");
    let user = KeyUser { pd: q.pd, qpn };
    let (rre, rwe, rae, has_rq) = (q.rre, q.rwe, q.rae, q.rq_log_size.is_some());
    let atomic_mode = q.atomic_mode;
    let (cqn, uidx) = (q.cqn_rcv, q.user_index);
    let invalid = || {
        Refusal::Fail(RespFail {
            nak: Nak::InvalidRequest,
            event: event::WQ_INVAL_REQ_ERROR,
            rq_cqe: None,
        })
    };
    let access = |rq_cqe| {
        Refusal::Fail(RespFail {
            nak: Nak::RemoteAccess,
            event: event::WQ_ACCESS_ERROR,
            rq_cqe,
        })
    };
    let catastrophe = |hca: &mut Hca| {
        wq_catastrophe(hca, qpn, "RQ unreadable");
        Err(Refusal::Fail(RespFail {
            nak: Nak::RemoteOperational,
            event: event::WQ_CATAS_ERROR,
            rq_cqe: None,
        }))
    };
    let answer = |q: &Qp, op: Op| {
        let mut a = Packet::new(q.remote_qpn, q.qpn, p.psn, op);
        a.dst_gid = q.path.rgid;
        a.src_gid = q.sgid;
        a.npkts = p.npkts;
        a
    };
    match p.op {
        Op::Send { imm, solicited } => {
            if !has_rq {
                return Err(invalid());
            }
            let r = match next_recv(hca, qpn) {
                Ok(Some(r)) => r,
                Ok(None) => return Err(Refusal::Rnr),
                Err(()) => return catastrophe(hca),
            };
            let total = p.len;
            if r.capacity() < total as u64 {
                return Err(Refusal::Fail(RespFail {
                    nak: Nak::InvalidRequest,
                    event: event::WQ_INVAL_REQ_ERROR,
                    rq_cqe: Some((cqe::syndrome::LOCAL_LENGTH_ERR, vendor::RECV_TOO_SMALL)),
                }));
            }
            // Check every scatter piece the message needs, then write.
            for pass in 0..2 {
                let mut at = 0usize;
                for s in r.entries() {
                    if at == total {
                        break;
                    }
                    let n = (s.len as usize).min(total - at);
                    let res =
                        hca.mkeys
                            .resolve(s.lkey, s.addr, n as u64, Access::LOCAL_WRITE, user);
                    let fail = |v| {
                        Err(Refusal::Fail(RespFail {
                            nak: Nak::RemoteOperational,
                            event: event::WQ_ACCESS_ERROR,
                            rq_cqe: Some((cqe::syndrome::LOCAL_PROT_ERR, v)),
                        }))
                    };
                    match res {
                        Err(f) => return fail(lkey_vendor(f)),
                        Ok(res) if pass == 1 => match deliver(&mem, p, at, &res) {
                            Ok(()) => {}
                            Err(DeliverError::Source(_)) => return Err(Refusal::Lost),
                            Err(DeliverError::Destination(_)) => return fail(vendor::DMA_FAULT),
                        },
                        Ok(_) => {}
                    }
                    at += n;
                }
            }
            let q = hca.qps.get_mut(qpn).expect("checked");
            let wqe_counter = q.rq_ci as u16;
            q.rq_ci = q.rq_ci.wrapping_add(1);
            let op = if imm.is_some() {
                cqe::opcode::RESP_SEND_IMM
            } else {
                cqe::opcode::RESP_SEND
            };
            let mut c = Cqe::success(op, qpn, wqe_counter, total as u32)
                .with_user_index(uidx)
                .with_remote_qpn(p.src_qpn)
                .with_solicited(solicited);
            if let Some(i) = imm {
                c = c.with_imm(i);
            }
            post_cqe(hca, cqn, &c);
            Ok(None)
        }
        Op::Write {
            raddr,
            rkey,
            imm,
            solicited,
        } => {
            if !rwe {
                return Err(invalid());
            }
            let recv = if imm.is_some() {
                if !has_rq {
                    return Err(invalid());
                }
                match next_recv(hca, qpn) {
                    Ok(Some(r)) => Some(r),
                    Ok(None) => return Err(Refusal::Rnr),
                    Err(()) => return catastrophe(hca),
                }
            } else {
                None
            };
            let total = p.len;
            // A zero-length RDMA WRITE carries no rkey to check (rxe_resp.c check_rkey).
            if total != 0 {
                let res = hca
                    .mkeys
                    .resolve(rkey, raddr, total as u64, Access::REMOTE_WRITE, user);
                let rq_cqe = recv
                    .is_some()
                    .then_some((cqe::syndrome::LOCAL_ACCESS_ERR, vendor::RKEY_VIOLATION));
                match res {
                    Err(_) => return Err(access(rq_cqe)),
                    Ok(res) => match deliver(&mem, p, 0, &res) {
                        Ok(()) => {}
                        Err(DeliverError::Source(_)) => return Err(Refusal::Lost),
                        Err(DeliverError::Destination(_)) => return Err(access(rq_cqe)),
                    },
                }
            }
            if let Some(i) = imm {
                let q = hca.qps.get_mut(qpn).expect("checked");
                let wqe_counter = q.rq_ci as u16;
                q.rq_ci = q.rq_ci.wrapping_add(1);
                let c = Cqe::success(cqe::opcode::RESP_WR_IMM, qpn, wqe_counter, total as u32)
                    .with_imm(i)
                    .with_user_index(uidx)
                    .with_remote_qpn(p.src_qpn)
                    .with_solicited(solicited);
                post_cqe(hca, cqn, &c);
            }
            Ok(None)
        }
        Op::ReadRequest { raddr, rkey, len } => {
            if !rre {
                return Err(invalid());
            }
            // The response refers to the bytes in guest memory (checked now, moved by the
            // requester or read as the response leaves the port: wire.rs).
            let mut pieces = Vec::new();
            if len > 0 {
                let res = hca
                    .mkeys
                    .resolve(rkey, raddr, len as u64, Access::REMOTE_READ, user);
                let ok = match res {
                    Ok(r) => memory_pieces(&*mem, &r, &mut pieces).is_ok(),
                    Err(_) => false,
                };
                if !ok {
                    return Err(access(None));
                }
            }
            let q = hca.qps.get(qpn).expect("checked");
            let mut a = answer(q, Op::ReadResponse);
            a.len = len as usize;
            a.mem_payload = Some(MemPayload { mem, pieces });
            Ok(Some(a))
        }
        Op::Atomic {
            raddr,
            rkey,
            fetch_add,
            swap_add,
            compare,
        } => {
            // An atomic needs `rae` and an `atomic_mode` that covers its 8-byte operand (Linux
            // ib/qp.c set_qpc_atomic_flags always sets the two together); mode 0 (NONE)
            // answers every atomic with an invalid-request NAK (model choice: no source
            // says what firmware does with rae = 1 and no mode).
            if !rae || !atomic_mode_covers(atomic_mode, 8) || raddr % 8 != 0 {
                return Err(invalid());
            }
            let Ok(res) = hca
                .mkeys
                .resolve(rkey, raddr, 8, Access::REMOTE_ATOMIC, user)
            else {
                return Err(access(None));
            };
            let mut orig = [0u8; 8];
            if res.read(&*mem, &mut orig).is_err() {
                return Err(access(None));
            }
            let host_endian = atomic_host_endian(hca);
            let cur = if host_endian {
                u64::from_le_bytes(orig)
            } else {
                u64::from_be_bytes(orig)
            };
            let new = if fetch_add {
                Some(cur.wrapping_add(swap_add))
            } else {
                (cur == compare).then_some(swap_add)
            };
            if let Some(v) = new {
                let bytes = if host_endian {
                    v.to_le_bytes()
                } else {
                    v.to_be_bytes()
                };
                let res = hca
                    .mkeys
                    .resolve(rkey, raddr, 8, Access::REMOTE_ATOMIC, user)
                    .map_err(|_| access(None))?;
                if res.write(&*mem, &bytes).is_err() {
                    return Err(access(None));
                }
            }
            let q = hca.qps.get_mut(qpn).expect("checked");
            let keep = (1usize << q.log_rra_max.min(8)).max(1);
            if q.atomic_replay.len() >= keep {
                q.atomic_replay.pop_front();
            }
            q.atomic_replay.push_back((p.psn, orig));
            Ok(Some(answer(q, Op::AtomicResponse { orig })))
        }
        _ => Ok(None),
    }
}

/// Whether `qpc.atomic_mode` lets the responder execute an atomic of `bytes` bytes. Modes
/// (Linux include/linux/mlx5/driver.h `MLX5_ATOMIC_MODE_*`): 1 IB-compliant and 2 ConnectX
/// (8-byte standard atomics), 3 up to 8 bytes, 4..=8 up to `2^mode` bytes (16 .. 256);
/// 0 (NONE) and anything else none.
fn atomic_mode_covers(mode: u32, bytes: u64) -> bool {
    match mode {
        1 | 2 => bytes == 8,
        3..=8 => bytes <= 1 << mode,
        _ => false,
    }
}

/// Whether 8-byte atomics use host (little-endian) byte order
/// (`atomic_caps.atomic_req_8B_endianness_mode` = 1) rather than big-endian (0, the default).
fn atomic_host_endian(hca: &Hca) -> bool {
    hca.atomic_cap(mlx5_prm::atomic_caps::ATOMIC_REQ_8B_ENDIANNESS_MODE) == 1
}

// ---------------------------------------------------------------------------------------------
// Errors and flushing
// ---------------------------------------------------------------------------------------------

/// Posts an affiliated QP event (`qp_events` naming a QP, `MLX5_EVENT_QUEUE_TYPE_QP`).
fn post_qp_event(hca: &mut Hca, event_type: u8, qpn: u32) {
    let mut data = [0u8; qp_events::BYTES];
    let _ = qp_events::TYPE.set(&mut data, event_queue_type::QP.into());
    let _ = qp_events::QPN_RQN_SQN.set(&mut data, qpn);
    hca.post_async_event(event_type, 0, &data);
}

/// A DMA failure on a work queue: WQ_CATAS_ERROR event and the QP to ERR.
fn wq_catastrophe(hca: &mut Hca, qpn: u32, why: &str) {
    hca.trace_note(format_args!(
        "QP {qpn:#x}: work queue catastrophic error: {why}"
    ));
    post_qp_event(hca, event::WQ_CATAS_ERROR, qpn);
    enter_error(hca, qpn);
}

/// Moves QP `qpn` to ERR and flushes every outstanding WQE of both queues (2ERR command, error
/// completions, responder class C errors).
pub(crate) fn enter_error(hca: &mut Hca, qpn: u32) {
    let Some(q) = hca.qps.get_mut(qpn) else {
        return;
    };
    q.state = qp::state::ERR;
    q.ack_deadline = None;
    q.rnr_deadline = None;
    q.sq_blocked = false;
    let (cqn, uidx) = (q.cqn_snd, q.user_index);
    let pending: Vec<Inflight> = q.inflight.drain(..).collect();
    for e in pending {
        let c = flush_cqe(cqe::opcode::REQ_ERR, e.opcode, qpn, e.wqe_index, uidx);
        post_cqe(hca, cqn, &c);
    }
    flush_new_work(hca, qpn);
}

fn flush_cqe(opcode: u8, wqe_opcode: u8, qpn: u32, counter: u16, uidx: u32) -> Cqe {
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
fn flush_new_work(hca: &mut Hca, qpn: u32) {
    let mem = hca.mem.clone();
    let Some(q) = hca.qps.get(qpn) else {
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
            let Some(q) = hca.qps.get_mut(qpn) else {
                return;
            };
            if q.sq_next == sq_pi {
                break;
            }
            let mut raw = [0u8; MAX_WQE_BYTES];
            if fetch_wqe(&*mem, q, q.sq_next, &mut raw).is_err() {
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
    let Some(q) = hca.qps.get(qpn) else {
        return;
    };
    if q.rq_log_size.is_some() {
        let cqn = q.cqn_rcv;
        let mut n = rq_pi.wrapping_sub(q.rq_ci as u16) as u32;
        if n > 1 << q.rq_log_size.unwrap_or(0) {
            n = 0; // an impossible counter: nothing to flush
        }
        for _ in 0..n {
            let Some(q) = hca.qps.get_mut(qpn) else {
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

    #[test]
    fn psn_arithmetic_wraps_at_24_bits() {
        assert_eq!(psn_diff(5, 3), 2);
        assert_eq!(psn_diff(3, 5), -2);
        assert_eq!(psn_diff(0, 0xff_ffff), 1);
        assert_eq!(psn_diff(0xff_ffff, 0), -1);
    }

    #[test]
    fn timer_encodings() {
        assert_eq!(rnr_delay(0), Duration::from_micros(655_360));
        assert_eq!(rnr_delay(1), Duration::from_micros(10));
        assert_eq!(rnr_delay(31), Duration::from_micros(491_520));
        assert_eq!(ack_timeout(0), None);
        assert_eq!(ack_timeout(1), Some(Duration::from_nanos(8192)));
        assert_eq!(ack_timeout(14), Some(Duration::from_nanos(4096 << 14)));
    }
}
