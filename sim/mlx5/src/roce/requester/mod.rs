//! The RC requester: segmentation, PSNs, the retransmit and RNR timers, retries, and in-order
//! completion of send work requests from ACKs, NAKs, READ responses and atomic ACKs.
//!
//! Behaviour follows IBTA vol. 1 ch. 9.7 as Linux soft-RoCE implements it (the reference the
//! shared captures were made with): drivers/infiniband/sw/rxe/rxe_req.c (sending, `req_retry`,
//! `next_opcode_rc`, `init_req_packet`, `check_init_depth`, `req_next_wqe`'s fence) and
//! rxe_comp.c (the completer: `check_psn`, `check_ack`, `do_read`, `do_atomic`, retry and RNR
//! retry). Differences from rxe are marked "model choice" or explained where they are.
//!
//! # Driving it
//!
//! - [`Requester::post`] queues a work request (on the SQ doorbell, one call per new WQE), then
//!   [`Requester::pump`] sends what may be sent.
//! - [`Requester::receive`] takes every response packet (ACKNOWLEDGE, READ response, ATOMIC
//!   ACKNOWLEDGE) addressed to the QP, and sends more if that opened the window.
//! - [`Requester::pump`] also runs the timers: call it when [`Requester::next_deadline`] has
//!   passed (or on any tick; it is idempotent).
//!
//! Completions come out through [`Completions::send_done`](super::transport::Completions::send_done) strictly in posting order, with the
//! IB status; after the first error completion the requester is in the error state and flushes
//! every other work request with [`WcStatus::WrFlushErr`].

use std::collections::VecDeque;

use super::frame::{Aeth, AethKind, AtomicEth, Bth, ExtHdrs, NakCode, Reth, NO_EXT};
use super::opcode::{HdrSet, OpKind, Opcode, Position};
use super::transport::{
    ack_timeout_ns, packets_for, rnr_timer_ns, valid_mtu, LocalFault, Nanos, PayloadSrc, ReqEnv,
    RxPacket, Tx, TxPayload, TxRun, WcStatus,
};
use super::{psn_add, psn_diff, PSN_MASK};

/// AckReq on every 66th packet of a long message, as rxe does: rxe_req.c init_req_packet sets
/// it when `noack_pkts++ > RXE_MAX_PKT_PER_ACK` (64), i.e. on the 66th packet without one.
pub const DEFAULT_ACK_REQ_EVERY: u32 = 66;
/// rxe `RXE_MAX_UNACKED_PSNS`: how far the requester runs ahead of the first unacknowledged PSN.
pub const DEFAULT_MAX_UNACKED_PSNS: u32 = 128;

mod run;
mod types;
use run::*;
pub use types::*;

#[derive(Clone, Copy, Debug)]
struct Wqe {
    wr: WorkRequest,
    /// Valid once `started`.
    first_psn: u32,
    npkts: u32,
    started: bool,
    has_rd_atomic: bool,
    /// A local fault while sending: completes with this status when it reaches the head.
    failed: Option<WcStatus>,
}

impl Wqe {
    fn last_psn(&self) -> u32 {
        psn_add(self.first_psn, self.npkts - 1)
    }
}

/// The requester half of an RC QP.
#[derive(Debug)]
pub struct Requester {
    cfg: ReqConfig,
    /// Next PSN to send (rxe `req.psn`).
    psn: u32,
    /// First unacknowledged PSN (rxe `comp.psn`).
    comp_psn: u32,
    /// One past the highest PSN ever sent.
    high_psn: u32,
    /// Work requests not yet completed, in order.
    wqes: VecDeque<Wqe>,
    /// Index in `wqes` of the WQE being sent, and its next packet.
    cur: usize,
    cur_pkt: u32,
    rd_atomic: u32,
    noack: u32,
    retrans_deadline: Option<Nanos>,
    rnr_deadline: Option<Nanos>,
    retry_left: u8,
    rnr_left: u8,
    started_retry: bool,
    need_retry: bool,
    blocked: bool,
    error: bool,
    counters: ReqCounters,
}

enum AckOutcome {
    /// Nothing new acknowledged.
    Nothing,
    /// Something was acknowledged.
    Progress,
    /// A READ / atomic was passed over: its response is lost (rxe_comp.c `check_psn`).
    ImplicitNak,
}

impl Requester {
    /// A requester at `cfg.sq_psn` with nothing posted.
    pub fn new(cfg: ReqConfig) -> Result<Requester, ConfigError> {
        if !valid_mtu(cfg.mtu) {
            return Err(ConfigError::Mtu(cfg.mtu));
        }
        if cfg.sq_psn > PSN_MASK {
            return Err(ConfigError::Psn(cfg.sq_psn));
        }
        if cfg.dest_qp > PSN_MASK {
            return Err(ConfigError::DestQp(cfg.dest_qp));
        }
        if cfg.retry_count > 7 {
            return Err(ConfigError::RetryCount(cfg.retry_count));
        }
        if cfg.rnr_retry > 7 {
            return Err(ConfigError::RetryCount(cfg.rnr_retry));
        }
        if cfg.ack_req_every == 0 || cfg.max_unacked_psns == 0 || cfg.max_unacked_psns >= 1 << 22 {
            return Err(ConfigError::Window);
        }
        Ok(Requester {
            cfg,
            psn: cfg.sq_psn,
            comp_psn: cfg.sq_psn,
            high_psn: cfg.sq_psn,
            wqes: VecDeque::new(),
            cur: 0,
            cur_pkt: 0,
            rd_atomic: 0,
            noack: 0,
            retrans_deadline: None,
            rnr_deadline: None,
            retry_left: cfg.retry_count,
            rnr_left: cfg.rnr_retry,
            started_retry: false,
            need_retry: false,
            blocked: false,
            error: false,
            counters: ReqCounters::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ReqConfig {
        &self.cfg
    }
    /// Counters.
    pub fn counters(&self) -> &ReqCounters {
        &self.counters
    }
    /// Whether the requester is in the error state.
    pub fn is_error(&self) -> bool {
        self.error
    }
    /// Next PSN to send.
    pub fn next_psn(&self) -> u32 {
        self.psn
    }
    /// First unacknowledged PSN.
    pub fn unacked_psn(&self) -> u32 {
        self.comp_psn
    }
    /// Work requests posted and not yet completed.
    pub fn outstanding(&self) -> usize {
        self.wqes.len()
    }
    /// READ / atomic requests in flight.
    pub fn rd_atomic_in_flight(&self) -> u32 {
        self.rd_atomic
    }
    /// When [`Requester::pump`] next has timer work (retransmit or RNR wait).
    pub fn next_deadline(&self) -> Option<Nanos> {
        match (self.retrans_deadline, self.rnr_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Queues a work request. Nothing is sent until [`Requester::pump`].
    pub fn post(&mut self, wr: WorkRequest) -> Result<(), PostError> {
        if self.error {
            return Err(PostError::QpError);
        }
        if wr.len > 1 << 31 {
            return Err(PostError::Length(wr.len));
        }
        if wr.is_atomic() && wr.len != 8 {
            return Err(PostError::AtomicLength(wr.len));
        }
        if let WrOp::Send {
            imm: Some(_),
            invalidate: Some(_),
        } = wr.op
        {
            return Err(PostError::ImmAndInvalidate);
        }
        if wr.is_rd_atomic() && self.cfg.max_rd_atomic == 0 {
            return Err(PostError::NoRdAtomic);
        }
        let npkts = if wr.is_atomic() {
            1
        } else {
            packets_for(wr.len, self.cfg.mtu)
        };
        self.wqes.push_back(Wqe {
            wr,
            first_psn: 0,
            npkts,
            started: false,
            has_rd_atomic: false,
            failed: None,
        });
        Ok(())
    }

    /// Runs expired timers, then sends every packet the window, `max_rd_atomic` and fences
    /// allow.
    pub fn pump(&mut self, now: Nanos, env: &mut dyn ReqEnv, tx: &mut dyn Tx) {
        self.timers(now, env);
        self.send(now, env, tx);
        self.complete_failed(env);
    }

    /// Processes one response packet (ACKNOWLEDGE, READ response, ATOMIC ACKNOWLEDGE) addressed
    /// to this QP, then pumps.
    pub fn receive(
        &mut self,
        now: Nanos,
        pkt: &RxPacket<'_>,
        env: &mut dyn ReqEnv,
        tx: &mut dyn Tx,
    ) {
        if !self.error {
            self.response(now, pkt, env);
        }
        self.pump(now, env, tx);
    }

    /// Flushes every work request (the QP was moved to the error state from outside).
    pub fn set_error(&mut self, env: &mut dyn ReqEnv) {
        self.enter_error(env);
    }

    // -----------------------------------------------------------------------------------------
    // Sending (rxe_req.c rxe_requester)
    // -----------------------------------------------------------------------------------------

    fn send(&mut self, now: Nanos, env: &mut dyn ReqEnv, tx: &mut dyn Tx) {
        if self.error || self.rnr_deadline.is_some() {
            return;
        }
        if self.need_retry {
            self.need_retry = false;
            self.rewind();
        }
        while !self.blocked {
            let Some(w) = self.wqes.get(self.cur) else {
                break;
            };
            let (started, fence, rd_atomic, has_rd_atomic) =
                (w.started, w.wr.fence, w.wr.is_rd_atomic(), w.has_rd_atomic);
            // rxe_req.c: stop RXE_MAX_UNACKED_PSNS ahead of comp.psn (`wait_psn`).
            if psn_diff(self.psn, self.comp_psn) >= self.cfg.max_unacked_psns as i32 {
                break;
            }
            if !started {
                // Fence (IBTA vol. 1 fence indicator: a fenced WQE waits for every earlier READ and atomic;
                // rxe_req.c req_next_wqe waits for all earlier WQEs, a superset). Every WQE
                // before `cur` in `wqes` is incomplete.
                if fence && self.wqes.iter().take(self.cur).any(|x| x.wr.is_rd_atomic()) {
                    break;
                }
                // rxe_req.c check_init_depth: one max_rd_atomic credit per READ / atomic,
                // kept across retries, returned at completion (rxe_comp.c complete_ack).
                if rd_atomic && !has_rd_atomic {
                    if self.rd_atomic >= self.cfg.max_rd_atomic as u32 {
                        break;
                    }
                    self.rd_atomic += 1;
                    self.wqes[self.cur].has_rd_atomic = true;
                }
                let e = &mut self.wqes[self.cur];
                e.started = true;
                e.first_psn = self.psn;
            }
            if self.emit_run(now, tx) {
                continue;
            }
            if self.emit(now, env, tx).is_err() {
                // A local fault gathering the payload: the WQE completes with LOC_PROT_ERR when
                // it reaches the head (rxe_req.c: `wqe->status = IB_WC_LOC_PROT_ERR`), nothing
                // more is sent.
                self.wqes[self.cur].failed = Some(WcStatus::LocProtErr);
                self.blocked = true;
                break;
            }
        }
    }

    /// Emits the MIDDLE packets of `wqes[cur]` that come next (a WRITE or SEND past its
    /// first packet, up to its last, within the window of unacknowledged PSNs) as one
    /// [`TxRun`] when the link takes runs: each packet gets its PSN and AckReq exactly as
    /// [`Requester::emit`] would give it. Returns whether it sent any.
    fn emit_run(&mut self, now: Nanos, tx: &mut dyn Tx) -> bool {
        let w = &self.wqes[self.cur];
        let (is_write, is_send) = (
            matches!(w.wr.op, WrOp::Write { .. }),
            matches!(w.wr.op, WrOp::Send { .. }),
        );
        let k = self.cur_pkt;
        if !(is_write || is_send) || k == 0 || k + 1 >= w.npkts {
            return false;
        }
        let room = self.cfg.max_unacked_psns as i32 - psn_diff(self.psn, self.comp_psn);
        let n = (w.npkts - 1 - k).min(room.max(0) as u32).min(64);
        if n == 0 {
            return false;
        }
        let mtu = self.cfg.mtu;
        let op = if is_write {
            Opcode::RC_RDMA_WRITE_MIDDLE
        } else {
            Opcode::RC_SEND_MIDDLE
        };
        let (psn, wr) = (self.psn, w.wr.wr_id);
        // AckReq as emit sets it for each (`end` is false for a MIDDLE packet).
        let (acks, noack) = run_ack_bits(
            self.noack,
            n,
            psn,
            self.comp_psn,
            self.cfg.ack_req_every,
            self.cfg.max_unacked_psns,
        );
        let mut bth = Bth::new(op, self.cfg.dest_qp, psn);
        bth.ack_req = acks & 1 != 0;
        let run = TxRun {
            bth,
            n,
            acks,
            wr,
            offset: k * mtu,
            each: mtu,
        };
        if !tx.send_run(&run) {
            return false;
        }
        self.noack = noack;
        self.counters.packets_sent += n as u64;
        // Those of its PSNs sent before.
        let again = psn_diff(self.high_psn, psn).clamp(0, n as i32);
        self.counters.retransmitted += again as u64;
        self.psn = psn_add(psn, n);
        if psn_diff(self.psn, self.high_psn) > 0 {
            self.high_psn = self.psn;
        }
        self.cur_pkt += n;
        if self.retrans_deadline.is_none() {
            self.retrans_deadline = ack_timeout_ns(self.cfg.ack_timeout).map(|t| now + t);
        }
        true
    }

    /// Emits the next packet of `wqes[cur]` and advances the cursor.
    fn emit(
        &mut self,
        now: Nanos,
        env: &mut dyn ReqEnv,
        tx: &mut dyn Tx,
    ) -> Result<(), LocalFault> {
        // The fields this needs, not a copy of the whole entry per packet.
        let (op, wlen, npkts, wr_id, solicited) = {
            let w = &self.wqes[self.cur];
            (w.wr.op, w.wr.len, w.npkts, w.wr.wr_id, w.wr.solicited)
        };
        let mtu = self.cfg.mtu;
        let k = self.cur_pkt;
        let psn = self.psn;
        let mut ext = ExtHdrs::NONE;
        // Whether `ext` holds a header (set with it).
        let mut has_ext = true;
        let mut bth;
        let offset = k * mtu;
        let end;
        let mut payload_len = 0u32;
        match op {
            WrOp::Read { raddr, rkey } => {
                // One request for the rest of the message. A retry from the middle asks for
                // the remaining bytes from the first unacknowledged PSN (rxe_req.c req_retry:
                // `wqe->iova += npsn * qp->mtu`, RETH length = `dma.resid`).
                bth = Bth::new(Opcode::RC_RDMA_READ_REQUEST, self.cfg.dest_qp, psn);
                ext.reth = Some(Reth {
                    va: raddr.wrapping_add(offset as u64),
                    r_key: rkey,
                    dma_len: wlen - offset.min(wlen),
                });
                end = true;
            }
            WrOp::CmpSwap {
                raddr,
                rkey,
                compare,
                swap,
            } => {
                bth = Bth::new(Opcode::RC_COMPARE_SWAP, self.cfg.dest_qp, psn);
                ext.atomic_eth = Some(AtomicEth {
                    va: raddr,
                    r_key: rkey,
                    swap_add: swap,
                    compare,
                });
                end = true;
            }
            WrOp::FetchAdd { raddr, rkey, add } => {
                bth = Bth::new(Opcode::RC_FETCH_ADD, self.cfg.dest_qp, psn);
                ext.atomic_eth = Some(AtomicEth {
                    va: raddr,
                    r_key: rkey,
                    swap_add: add,
                    compare: 0,
                });
                end = true;
            }
            WrOp::Send { imm, invalidate } => {
                let pos = position(k, npkts);
                payload_len = (wlen - offset).min(mtu);
                // rxe_req.c next_opcode_rc.
                let op = match pos {
                    Position::First => Opcode::RC_SEND_FIRST,
                    Position::Middle => Opcode::RC_SEND_MIDDLE,
                    Position::Last if imm.is_some() => Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
                    Position::Last if invalidate.is_some() => Opcode::RC_SEND_LAST_WITH_INVALIDATE,
                    Position::Last => Opcode::RC_SEND_LAST,
                    Position::Only if imm.is_some() => Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
                    Position::Only if invalidate.is_some() => Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
                    Position::Only => Opcode::RC_SEND_ONLY,
                };
                bth = Bth::new(op, self.cfg.dest_qp, psn);
                end = pos.is_end();
                has_ext = end && (imm.is_some() || invalidate.is_some());
                if end {
                    ext.imm_dt = imm;
                    ext.ieth = invalidate;
                    bth.solicited = solicited;
                }
            }
            WrOp::Write { raddr, rkey, imm } => {
                let pos = position(k, npkts);
                payload_len = (wlen - offset).min(mtu);
                let op = match pos {
                    Position::First => Opcode::RC_RDMA_WRITE_FIRST,
                    Position::Middle => Opcode::RC_RDMA_WRITE_MIDDLE,
                    Position::Last if imm.is_some() => Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
                    Position::Last => Opcode::RC_RDMA_WRITE_LAST,
                    Position::Only if imm.is_some() => Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                    Position::Only => Opcode::RC_RDMA_WRITE_ONLY,
                };
                bth = Bth::new(op, self.cfg.dest_qp, psn);
                end = pos.is_end();
                has_ext = pos.is_start() || (end && imm.is_some());
                if pos.is_start() {
                    // RETH on FIRST / ONLY: the whole message (rxe init_req_packet).
                    ext.reth = Some(Reth {
                        va: raddr,
                        r_key: rkey,
                        dma_len: wlen,
                    });
                }
                if end {
                    ext.imm_dt = imm;
                    // rxe init_req_packet: SE only on the end of a SEND or WRITE with immediate.
                    bth.solicited = solicited && imm.is_some();
                }
            }
        }
        // rxe_req.c init_req_packet: AckReq on the message's last packet, or when too many
        // packets went without one. Model choice: also on the packet that fills the window
        // of unacknowledged PSNs, which would otherwise wait for the timer.
        self.noack += 1;
        let used_after = psn_diff(psn_add(psn, 1), self.comp_psn);
        bth.ack_req = end
            || self.noack >= self.cfg.ack_req_every
            || used_after >= self.cfg.max_unacked_psns as i32;
        if bth.ack_req {
            self.noack = 0;
        }
        let mut fill = |dst: &mut [u8]| {
            if dst.is_empty() {
                Ok(())
            } else {
                env.gather(wr_id, offset, dst)
            }
        };
        let payload = TxPayload {
            len: payload_len as usize,
            src: (payload_len > 0).then_some(PayloadSrc::Wqe { wr: wr_id, offset }),
            fill: &mut fill,
        };
        // A packet without extension headers (a MIDDLE one) hands the transmitter the
        // long-lived empty set ([`NO_EXT`]) rather than the one just built on the stack:
        // copying a value written a moment ago with narrow stores costs a store-forwarding
        // stall per packet, and the transmitter recognises that set by its address.
        debug_assert_eq!(has_ext, ext.set() != HdrSet::NONE);
        let ext = if !has_ext { &NO_EXT } else { &ext };
        tx.send(&bth, ext, payload)?;
        self.counters.packets_sent += 1;
        // PSNs this packet occupies: a READ request takes one per response packet.
        let used = if matches!(op, WrOp::Read { .. }) {
            npkts - k
        } else {
            1
        };
        if psn_diff(psn, self.high_psn) < 0 {
            self.counters.retransmitted += 1;
        }
        self.psn = psn_add(psn, used);
        if psn_diff(self.psn, self.high_psn) > 0 {
            self.high_psn = self.psn;
        }
        if end {
            self.cur += 1;
            self.cur_pkt = 0;
        } else {
            self.cur_pkt += 1;
        }
        // rxe_req.c update_state: start the retransmit timer if it is not running.
        if self.retrans_deadline.is_none() {
            self.retrans_deadline = ack_timeout_ns(self.cfg.ack_timeout).map(|t| now + t);
        }
        Ok(())
    }

    /// Go back to the first unacknowledged PSN (rxe_req.c req_retry): the oldest incomplete
    /// WQE resumes at the packet of `comp_psn` — a WRITE or SEND with a MIDDLE or LAST packet
    /// at the right offset, a READ with a new request for the remaining bytes — and every later
    /// WQE starts over.
    fn rewind(&mut self) {
        self.psn = self.comp_psn;
        self.cur = 0;
        self.cur_pkt = 0;
        self.noack = 0;
        self.blocked = false;
        let comp_psn = self.comp_psn;
        for (i, w) in self.wqes.iter_mut().enumerate() {
            if i == 0 && w.started {
                let k = psn_diff(comp_psn, w.first_psn).clamp(0, w.npkts as i32 - 1);
                self.cur_pkt = k as u32;
                self.psn = psn_add(w.first_psn, k as u32);
            } else {
                w.started = false;
            }
            if w.failed.is_some() {
                self.blocked = true;
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // Timers (rxe_comp.c retransmit_timer / COMPST_ERROR_RETRY, rxe_req.c rnr_nak_timer)
    // -----------------------------------------------------------------------------------------

    fn timers(&mut self, now: Nanos, env: &mut dyn ReqEnv) {
        if self.error {
            return;
        }
        if let Some(d) = self.rnr_deadline {
            if now >= d {
                self.rnr_deadline = None;
                self.need_retry = true;
            }
        }
        if let Some(d) = self.retrans_deadline {
            if now >= d {
                self.retrans_deadline = None;
                if self.wqes.front().is_some_and(|w| w.started) {
                    self.counters.timeouts += 1;
                    self.start_retry(true, env);
                }
            }
        }
    }

    /// rxe_comp.c COMPST_ERROR_RETRY: retry from `comp_psn` unless the budget is spent
    /// (then RETRY_EXC_ERR). A NAK-triggered retry is not restarted by further NAKs until
    /// progress (`started_retry`); a timeout always retries.
    fn start_retry(&mut self, timeout: bool, env: &mut dyn ReqEnv) {
        if self.started_retry && !timeout {
            return;
        }
        if !self.wqes.front().is_some_and(|w| w.started) {
            return;
        }
        if self.retry_left == 0 {
            self.complete_front(WcStatus::RetryExcErr, env);
            return;
        }
        self.retry_left -= 1;
        self.counters.retries += 1;
        self.need_retry = true;
        self.started_retry = true;
    }

    fn progress(&mut self, now: Nanos) {
        // rxe_comp.c reset_retry_counters.
        self.retry_left = self.cfg.retry_count;
        self.rnr_left = self.cfg.rnr_retry;
        self.started_retry = false;
        // Restart the timer while something is outstanding (rxe_comp.c COMPST_EXIT); not
        // during an RNR wait, which ends in a resend that arms it again.
        self.retrans_deadline =
            if self.rnr_deadline.is_none() && self.wqes.front().is_some_and(|w| w.started) {
                ack_timeout_ns(self.cfg.ack_timeout).map(|t| now + t)
            } else {
                None
            };
    }

    // -----------------------------------------------------------------------------------------
    // Responses (rxe_comp.c)
    // -----------------------------------------------------------------------------------------

    fn response(&mut self, now: Nanos, pkt: &RxPacket<'_>, env: &mut dyn ReqEnv) {
        let Some(info) = pkt.bth.opcode.info() else {
            self.counters.ignored += 1;
            return;
        };
        let p = pkt.bth.psn;
        // A response for a PSN never sent is bogus; so is one exactly half the PSN space
        // away, which psn_diff puts both before and after every other PSN (found by the wire
        // fuzz target: a READ response there completed a SEND it did not acknowledge).
        if psn_diff(self.high_psn, p) <= 0 {
            self.counters.ignored += 1;
            return;
        }
        match info.kind {
            OpKind::Acknowledge => {
                let Some(aeth) = pkt.ext.aeth else {
                    self.counters.ignored += 1;
                    return;
                };
                self.acknowledge(now, p, aeth, env);
            }
            OpKind::ReadResponse => self.read_response(now, pkt, info.position, env),
            OpKind::AtomicAcknowledge => self.atomic_ack(now, pkt, env),
            _ => self.counters.ignored += 1,
        }
        // A response that acknowledged past what the rewound cursor would resend.
        if psn_diff(self.comp_psn, self.psn) > 0 {
            self.rewind();
        }
    }

    /// Completes SEND / WRITE WQEs up to and including PSN `psn` (coalesced ACK: an ACK for
    /// `psn` acknowledges every earlier PSN; rxe_comp.c check_psn completes every WQE whose last PSN
    /// is at or before it).
    fn ack_to(&mut self, psn: u32, env: &mut dyn ReqEnv) -> AckOutcome {
        let mut out = AckOutcome::Nothing;
        while let Some(&w) = self.wqes.front() {
            if !w.started || w.failed.is_some() {
                break;
            }
            if psn_diff(w.last_psn(), psn) <= 0 {
                if w.wr.is_rd_atomic() {
                    return AckOutcome::ImplicitNak;
                }
                self.comp_psn = psn_add(w.last_psn(), 1);
                self.complete_front(WcStatus::Success, env);
                out = AckOutcome::Progress;
            } else {
                if !w.wr.is_rd_atomic()
                    && psn_diff(psn, w.first_psn) >= 0
                    && psn_diff(psn, self.comp_psn) >= 0
                {
                    self.comp_psn = psn_add(psn, 1);
                    out = AckOutcome::Progress;
                }
                break;
            }
        }
        out
    }

    fn acknowledge(&mut self, now: Nanos, p: u32, aeth: Aeth, env: &mut dyn ReqEnv) {
        match aeth.kind() {
            AethKind::Ack { .. } => match self.ack_to(p, env) {
                AckOutcome::Progress => self.progress(now),
                AckOutcome::ImplicitNak => self.start_retry(false, env),
                AckOutcome::Nothing => self.counters.ignored += 1,
            },
            kind => {
                // Every NAK acknowledges the PSNs before its own (rxe_comp.c check_ack moves
                // comp.psn up to a sequence NAK's PSN).
                if psn_diff(p, self.comp_psn) < 0 {
                    self.counters.ignored += 1;
                    return;
                }
                match self.ack_to(psn_add(p, PSN_MASK), env) {
                    AckOutcome::Progress => self.progress(now),
                    AckOutcome::ImplicitNak => {
                        self.start_retry(false, env);
                        return;
                    }
                    AckOutcome::Nothing => {}
                }
                if self.error || !self.wqes.front().is_some_and(|w| w.started) {
                    return;
                }
                // Model choice: a sequence or RNR NAK past comp_psn inside the READ / atomic at
                // the front would skip response PSNs that never arrived, and the READ would
                // complete with a hole (found by the wire fuzz target). No conforming responder
                // sends one: its ePSN moves past a READ's whole range at once (responder.rs
                // ReadRequest, as rxe_resp.c). Ignored.
                if psn_diff(p, self.comp_psn) > 0
                    && self.wqes.front().is_some_and(|w| w.wr.is_rd_atomic())
                    && matches!(
                        kind,
                        AethKind::RnrNak { .. } | AethKind::Nak(NakCode::PsnSequenceError)
                    )
                {
                    self.counters.ignored += 1;
                    return;
                }
                match kind {
                    AethKind::RnrNak { timer } => {
                        // rxe_comp.c COMPST_RNR_RETRY.
                        self.counters.rnr_naks += 1;
                        if self.rnr_deadline.is_some() {
                            // Model choice: a second RNR NAK while already waiting (a duplicate
                            // on the wire) neither spends a retry nor restarts the wait.
                            return;
                        }
                        if self.rnr_left == 0 {
                            self.complete_front(WcStatus::RnrRetryExcErr, env);
                        } else {
                            if self.cfg.rnr_retry != 7 {
                                self.rnr_left -= 1;
                            }
                            self.comp_psn = p;
                            self.rnr_deadline = Some(now + rnr_timer_ns(timer));
                            self.retrans_deadline = None;
                            self.need_retry = true;
                        }
                    }
                    AethKind::Nak(NakCode::PsnSequenceError) => {
                        self.counters.seq_naks += 1;
                        if self.rnr_deadline.is_some() {
                            // Model choice: a sequence NAK for the packets behind an RNR-NAKed
                            // one; the RNR retry resends them, no transport retry is spent.
                            return;
                        }
                        self.comp_psn = p;
                        self.start_retry(false, env);
                    }
                    AethKind::Nak(NakCode::InvalidRequest) => {
                        self.complete_front(WcStatus::RemInvReqErr, env)
                    }
                    AethKind::Nak(NakCode::RemoteAccessError) => {
                        self.complete_front(WcStatus::RemAccessErr, env)
                    }
                    // rxe_comp.c: remote operational and any other NAK code → REM_OP_ERR.
                    _ => self.complete_front(WcStatus::RemOpErr, env),
                }
            }
        }
    }

    fn read_response(
        &mut self,
        now: Nanos,
        pkt: &RxPacket<'_>,
        pos: Position,
        env: &mut dyn ReqEnv,
    ) {
        let p = pkt.bth.psn;
        // A response implicitly acknowledges the SENDs / WRITEs before it, and implicitly NAKs
        // an earlier READ / atomic still waiting (rxe_comp.c check_psn).
        match self.ack_to(psn_add(p, PSN_MASK), env) {
            AckOutcome::ImplicitNak => {
                self.start_retry(false, env);
                return;
            }
            AckOutcome::Progress => self.progress(now),
            AckOutcome::Nothing => {}
        }
        let Some(&w) = self.wqes.front() else {
            self.counters.ignored += 1;
            return;
        };
        let in_range = w.started && psn_diff(p, w.first_psn) >= 0 && psn_diff(p, w.last_psn()) <= 0;
        // Only the next expected response packet is taken; duplicates (diff < 0) and gaps
        // (diff > 0: wait for the timer, rxe_comp.c check_psn) are dropped.
        if !matches!(w.wr.op, WrOp::Read { .. }) || !in_range || p != self.comp_psn {
            self.counters.ignored += 1;
            return;
        }
        let k = psn_diff(p, w.first_psn) as u32;
        let offset = k * self.cfg.mtu;
        let want_len = (w.wr.len - offset).min(self.cfg.mtu);
        // The opcode sequence is implied by the PSN (a replay from the middle starts with a
        // MIDDLE or LAST: rxe_resp.c read_reply, `rdatm_res_state_replay`); AETH ACK on
        // FIRST/LAST/ONLY (rxe_comp.c check_ack).
        let aeth_ok = match pkt.ext.aeth {
            Some(a) => matches!(a.kind(), AethKind::Ack { .. }),
            None => pos == Position::Middle,
        };
        if pos != position(k, w.npkts) || pkt.payload.len() != want_len as usize || !aeth_ok {
            self.counters.ignored += 1;
            return;
        }
        if !pkt.payload.is_empty() && env.scatter(w.wr.wr_id, offset, pkt.payload).is_err() {
            self.complete_front(WcStatus::LocProtErr, env);
            return;
        }
        self.comp_psn = psn_add(p, 1);
        if k + 1 == w.npkts {
            self.complete_front(WcStatus::Success, env);
        }
        self.progress(now);
    }

    fn atomic_ack(&mut self, now: Nanos, pkt: &RxPacket<'_>, env: &mut dyn ReqEnv) {
        let p = pkt.bth.psn;
        match self.ack_to(psn_add(p, PSN_MASK), env) {
            AckOutcome::ImplicitNak => {
                self.start_retry(false, env);
                return;
            }
            AckOutcome::Progress => self.progress(now),
            AckOutcome::Nothing => {}
        }
        let (Some(aeth), Some(ack)) = (pkt.ext.aeth, pkt.ext.atomic_ack_eth) else {
            self.counters.ignored += 1;
            return;
        };
        let Some(&w) = self.wqes.front() else {
            self.counters.ignored += 1;
            return;
        };
        if !w.wr.is_atomic()
            || !w.started
            || w.first_psn != p
            || p != self.comp_psn
            || !matches!(aeth.kind(), AethKind::Ack { .. })
        {
            self.counters.ignored += 1;
            return;
        }
        if env.atomic_result(w.wr.wr_id, ack.orig).is_err() {
            self.complete_front(WcStatus::LocProtErr, env);
            return;
        }
        self.comp_psn = psn_add(p, 1);
        self.complete_front(WcStatus::Success, env);
        self.progress(now);
    }

    // -----------------------------------------------------------------------------------------
    // Completion
    // -----------------------------------------------------------------------------------------

    fn complete_front(&mut self, status: WcStatus, env: &mut dyn ReqEnv) {
        let Some(w) = self.wqes.pop_front() else {
            return;
        };
        if w.has_rd_atomic {
            self.rd_atomic -= 1;
        }
        if self.cur > 0 {
            self.cur -= 1;
        } else {
            self.cur_pkt = 0;
        }
        env.send_done(w.wr.wr_id, status);
        if status != WcStatus::Success {
            self.enter_error(env);
        }
    }

    /// A WQE that failed locally completes once every WQE before it did.
    fn complete_failed(&mut self, env: &mut dyn ReqEnv) {
        if let Some(s) = self.wqes.front().and_then(|w| w.failed) {
            self.complete_front(s, env);
        }
    }

    fn enter_error(&mut self, env: &mut dyn ReqEnv) {
        self.error = true;
        self.retrans_deadline = None;
        self.rnr_deadline = None;
        self.need_retry = false;
        while let Some(w) = self.wqes.pop_front() {
            env.send_done(w.wr.wr_id, WcStatus::WrFlushErr);
        }
        self.rd_atomic = 0;
        self.cur = 0;
        self.cur_pkt = 0;
    }
}
