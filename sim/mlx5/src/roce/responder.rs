//! The RC responder: the expected PSN, duplicate and out-of-sequence requests, ACK coalescing,
//! RNR NAKs, class C errors (NAK invalid request / remote access / remote operational), MSN,
//! READ responses and atomic ACKs, and the responder resources that replay duplicate READs and
//! atomics.
//!
//! Behaviour follows IBTA vol. 1 ch. 9.7 (RC responder) as Linux soft-RoCE implements it:
//! drivers/infiniband/sw/rxe/rxe_resp.c (`check_psn`, `check_op_seq`, `check_op_valid`,
//! `check_resource`, `check_length`, `check_rkey`, `execute`, `read_reply`, `atomic_reply`,
//! `acknowledge`, `duplicate_request`, `find_resource`, `rxe_prepare_res`).
//!
//! # Driving it
//!
//! [`Responder::receive`] takes every request packet (SEND, WRITE, READ request, atomics)
//! addressed to the QP. It writes memory and consumes receive WQEs through [`RespMemory`](super::transport::RespMemory),
//! reports receive completions through [`Completions::recv_done`](super::transport::Completions::recv_done), and answers through [`Tx`]
//! (ACK / NAK, READ response packets, ATOMIC ACKNOWLEDGE). It has no timers.

use std::collections::VecDeque;

use super::frame::{Aeth, AtomicAckEth, Bth, ExtHdrs, NakCode};
use super::opcode::{OpKind, Opcode, Position, Transport};
use super::transport::{
    packets_for, valid_mtu, AtomicOp, Fill, LocalFault, Nanos, PayloadSrc, RecvCompletion,
    RecvFault, RecvKind, RemoteAccess, RespEnv, RxPacket, Tx, TxPayload, WcStatus,
};
use super::{psn_add, psn_diff, PSN_MASK};

/// When the responder acknowledges SEND / WRITE packets executed in sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckPolicy {
    /// Only packets with AckReq set (rxe_resp.c `acknowledge`: `bth_ack(pkt)`); the requester
    /// coalesces by setting AckReq on the last packet of a message and every
    /// [`super::requester::DEFAULT_ACK_REQ_EVERY`] packets. What the shared captures show.
    AckReq,
    /// Every packet (no coalescing; IBTA allows a responder to ACK more often than asked).
    EveryPacket,
}

/// The QP attributes the responder runs with (from the QP context at RTR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RespConfig {
    /// The requester's QPN (DestQP of the responses).
    pub dest_qp: u32,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// The first expected PSN (`rq_psn`).
    pub rq_psn: u32,
    /// RNR timer encoding sent in RNR NAKs (`min_rnr_timer`).
    pub min_rnr_timer: u8,
    /// Responder resources for READ / atomic (`max_dest_rd_atomic`, `rra_max`).
    pub max_dest_rd_atomic: u8,
    /// Remote READ enabled (`rre`).
    pub remote_read: bool,
    /// Remote WRITE enabled (`rwe`).
    pub remote_write: bool,
    /// Remote atomic enabled (`rae`).
    pub remote_atomic: bool,
    /// When to ACK.
    pub ack_policy: AckPolicy,
}

impl RespConfig {
    /// A responder with every remote access enabled, `max_dest_rd_atomic` 16 and RNR timer 12
    /// (0.64 ms, rc_pingpong's `min_rnr_timer`).
    pub fn new(dest_qp: u32, mtu: u32, rq_psn: u32) -> RespConfig {
        RespConfig {
            dest_qp,
            mtu,
            rq_psn,
            min_rnr_timer: 12,
            max_dest_rd_atomic: 16,
            remote_read: true,
            remote_write: true,
            remote_atomic: true,
            ack_policy: AckPolicy::AckReq,
        }
    }
}

/// Why a responder configuration is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RespConfigError {
    /// Not a path MTU.
    Mtu(u32),
    /// A 24-bit field out of range.
    Field(u32),
}

/// Event counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RespCounters {
    /// Request packets executed in sequence.
    pub executed: u64,
    /// Duplicate requests (PSN before the expected one; rxe `RXE_CNT_DUP_REQ`).
    pub duplicates: u64,
    /// Out-of-sequence requests (after the expected PSN; rxe `RXE_CNT_OUT_OF_SEQ_REQ`).
    pub out_of_sequence: u64,
    /// PSN sequence error NAKs sent.
    pub seq_naks: u64,
    /// RNR NAKs sent.
    pub rnr_naks: u64,
    /// Other NAKs sent (class C errors).
    pub error_naks: u64,
    /// ACKs sent (including re-ACKs of duplicates).
    pub acks: u64,
    /// READ response packets sent (replays included).
    pub read_responses: u64,
    /// Atomic ACKs sent (replays included).
    pub atomic_acks: u64,
    /// Atomics executed (replays excluded).
    pub atomics_executed: u64,
    /// Requests dropped without an answer (error state, unknown duplicate, not an RC request).
    pub dropped: u64,
}

/// A message in progress (rxe `resp.opcode` and the WRITE's `resp.va/resid`).
#[derive(Clone, Copy, Debug)]
enum InProgress {
    Send {
        offset: u32,
    },
    Write {
        va: u64,
        rkey: u32,
        resid: u32,
        length: u32,
    },
}

#[derive(Clone, Copy, Debug)]
enum ResKind {
    Read { va: u64, rkey: u32, length: u32 },
    Atomic { orig: u64 },
}

/// A responder resource (rxe `struct resp_res`): what a READ or atomic needs to be replayed.
#[derive(Clone, Copy, Debug)]
struct Resource {
    kind: ResKind,
    first_psn: u32,
    last_psn: u32,
}

/// A class C error (rxe `do_class_ac_error`): the NAK and the receive WQE's status, if a
/// receive WQE was engaged.
struct Fail {
    nak: NakCode,
    recv: Option<WcStatus>,
}

/// The responder half of an RC QP.
#[derive(Debug)]
pub struct Responder {
    cfg: RespConfig,
    epsn: u32,
    msn: u32,
    nak_sent: bool,
    cur: Option<InProgress>,
    resources: VecDeque<Resource>,
    error: bool,
    cause: Option<NakCode>,
    counters: RespCounters,
    /// READ responses still to send, oldest first.
    reads: VecDeque<ReadJob>,
}

/// READ response packets sent per [`Responder::pump`] (and on the READ request itself): a long
/// READ is streamed across calls instead of emitted at once.
pub const READ_BURST: u32 = 64;

/// A READ reply in progress (rxe_resp.c keeps it in `qp->resp.res` and sends one packet per
/// `read_reply` step).
#[derive(Clone, Copy, Debug)]
struct ReadJob {
    psn: u32,
    first: bool,
    va: u64,
    rkey: u32,
    len: u32,
    msn: u32,
    /// Index of the next packet to send.
    next: u32,
}

impl Responder {
    /// A responder expecting `cfg.rq_psn`.
    pub fn new(cfg: RespConfig) -> Result<Responder, RespConfigError> {
        if !valid_mtu(cfg.mtu) {
            return Err(RespConfigError::Mtu(cfg.mtu));
        }
        if cfg.rq_psn > PSN_MASK {
            return Err(RespConfigError::Field(cfg.rq_psn));
        }
        if cfg.dest_qp > PSN_MASK {
            return Err(RespConfigError::Field(cfg.dest_qp));
        }
        Ok(Responder {
            cfg,
            epsn: cfg.rq_psn,
            msn: 0,
            nak_sent: false,
            cur: None,
            resources: VecDeque::new(),
            error: false,
            cause: None,
            counters: RespCounters::default(),
            reads: VecDeque::new(),
        })
    }

    /// Counters.
    pub fn counters(&self) -> &RespCounters {
        &self.counters
    }
    /// The expected PSN.
    pub fn expected_psn(&self) -> u32 {
        self.epsn
    }
    /// Messages completed (the MSN, 24 bits).
    pub fn msn(&self) -> u32 {
        self.msn
    }
    /// Whether the responder is in the error state (after a class C error).
    pub fn is_error(&self) -> bool {
        self.error
    }
    /// The NAK that moved the responder to the error state (the datapath raises the matching
    /// affiliated event: WQ_INVAL_REQ_ERROR for an invalid request, WQ_ACCESS_ERROR for a
    /// remote access error, WQ_CATAS_ERROR for a remote operational error).
    pub fn error_cause(&self) -> Option<NakCode> {
        self.cause
    }
    /// Changes the remote access enables (`rre`, `rwe`, `rae`: INIT2RTR, RTR2RTS, RTS2RTS
    /// with their optional-parameter bits); checked on each new request.
    pub fn set_access(&mut self, read: bool, write: bool, atomic: bool) {
        self.cfg.remote_read = read;
        self.cfg.remote_write = write;
        self.cfg.remote_atomic = atomic;
    }
    /// Changes the RNR timer sent in RNR NAKs (`min_rnr_nak`, RTR2RTS / RTS2RTS with
    /// `RNR_TIMEOUT`).
    pub fn set_min_rnr_timer(&mut self, timer: u8) {
        self.cfg.min_rnr_timer = timer & 0x1f;
    }
    /// Moves the responder to the error state (the QP was moved to ERR from outside).
    pub fn set_error(&mut self) {
        self.error = true;
        self.reads.clear();
    }

    /// Whether READ response packets are waiting to be sent ([`Responder::pump`]).
    pub fn has_pending_reads(&self) -> bool {
        !self.reads.is_empty()
    }

    /// Sends up to [`READ_BURST`] more READ response packets.
    pub fn pump(&mut self, env: &mut dyn RespEnv, tx: &mut dyn Tx) {
        let _ = self.stream(READ_BURST, env, tx);
    }

    /// Processes one request packet. `now` is unused today (the responder has no timers) and
    /// kept so every entry point of the transport takes the time.
    pub fn receive(
        &mut self,
        _now: Nanos,
        pkt: &RxPacket<'_>,
        env: &mut dyn RespEnv,
        tx: &mut dyn Tx,
    ) {
        // The common case first: a WRITE MIDDLE at the expected PSN, nothing else pending.
        if pkt.bth.opcode == Opcode::RC_RDMA_WRITE_MIDDLE
            && pkt.bth.psn == self.epsn
            && !self.error
            && self.reads.is_empty()
            && self.write_middle(pkt, env, tx)
        {
            return;
        }
        let Some(info) = pkt.bth.opcode.info() else {
            self.counters.dropped += 1;
            return;
        };
        if self.error || info.transport != Transport::Rc || !info.is_request() {
            self.counters.dropped += 1;
            return;
        }
        // A READ reply in progress goes out whole before the next request is looked at, so
        // the wire keeps PSN order (rxe_responder finishes `read_reply` before it takes the
        // next packet).
        if !self.reads.is_empty() {
            let _ = self.stream(u32::MAX, env, tx);
        }
        let psn = pkt.bth.psn;
        // rxe_resp.c check_psn.
        let d = psn_diff(psn, self.epsn);
        if d > 0 {
            // Class B: one PSN sequence NAK carrying the expected PSN, then silence until
            // the expected PSN arrives (rxe `resp.sent_psn_nak`).
            self.counters.out_of_sequence += 1;
            if !self.nak_sent {
                self.nak_sent = true;
                self.counters.seq_naks += 1;
                let aeth = Aeth::nak(NakCode::PsnSequenceError, self.msn);
                self.send_ack(self.epsn, aeth, tx);
            }
            return;
        }
        if d < 0 {
            self.counters.duplicates += 1;
            self.duplicate(pkt, info.kind, env, tx);
            return;
        }
        self.nak_sent = false;
        match self.execute(pkt, info.kind, info.position, env, tx) {
            Ok(Step::Done) => self.counters.executed += 1,
            Ok(Step::Rnr) => {
                // rxe_resp.c RESPST_ERR_RNR: RNR NAK for this PSN, the expected PSN stays.
                // Model choice: the RNR NAK is also the one NAK of the gap it opens, so the
                // packets already behind it (the rest of a multi-packet SEND) are dropped
                // silently instead of drawing a PSN sequence NAK that would cost the requester
                // a transport retry (rxe answers them with one).
                self.nak_sent = true;
                self.counters.rnr_naks += 1;
                let aeth = Aeth::rnr_nak(self.cfg.min_rnr_timer, self.msn);
                self.send_ack(psn, aeth, tx);
            }
            Err(f) => self.fail(psn, f, info.kind, env, tx),
        }
    }

    /// A WRITE MIDDLE packet at the expected PSN (the caller checked opcode, PSN, no error, no
    /// READ reply streaming) of the message in progress: runs the checks [`Responder::execute`]
    /// makes for it, in its order (operation sequence, remote write enabled, no receive WQE
    /// consumed, length = MTU, no RETH, what the RETH length leaves), and when all pass
    /// executes it as `execute` would and returns `true`. Returns `false`, having done nothing,
    /// when one does not pass: the general path then reports it.
    fn write_middle(&mut self, pkt: &RxPacket<'_>, env: &mut dyn RespEnv, tx: &mut dyn Tx) -> bool {
        let Some(InProgress::Write {
            va,
            rkey,
            resid,
            length,
        }) = self.cur
        else {
            return false;
        };
        let (mtu, psn) = (self.cfg.mtu, pkt.bth.psn);
        let plen = pkt.payload.len() as u32;
        if !(self.cfg.remote_write
            && pkt.ext.imm_dt.is_none()
            && plen == mtu
            && pkt.ext.reth.is_none()
            && resid > mtu)
        {
            return false;
        }
        self.nak_sent = false;
        if env.write_part(rkey, va, pkt.payload, resid - plen).is_err() {
            let f = Fail {
                nak: NakCode::RemoteAccessError,
                recv: None,
            };
            self.fail(psn, f, OpKind::Write, env, tx);
            return true;
        }
        self.counters.executed += 1;
        self.cur = Some(InProgress::Write {
            va: va.wrapping_add(plen as u64),
            rkey,
            resid: resid - plen,
            length,
        });
        self.epsn = psn_add(psn, 1);
        if pkt.bth.ack_req || self.cfg.ack_policy == AckPolicy::EveryPacket {
            self.ack(psn, tx);
        }
        true
    }

    /// `n` WRITE MIDDLE packets at consecutive PSNs from `first`'s, each with `first`'s
    /// headers but for its PSN and its AckReq (bit `i` of `acks` for packet `i`), each carrying
    /// `first.payload.len()` bytes; `all` is their payloads together, in order. When every one
    /// of them passes the checks `Responder::write_middle` makes for it (each checked in
    /// turn: the expected PSN, no error, no READ reply streaming, a WRITE in progress, remote
    /// write enabled, no immediate, no RETH, length = MTU, more than an MTU of the message
    /// left before it) and the environment can write their bytes at once
    /// ([`RespMemory::write_run`](super::transport::RespMemory::write_run)), executes them as
    /// `n` calls of [`Responder::receive`] would (each counted, each acknowledged in order when
    /// it asks for it) and returns `true`. Returns `false`, having done nothing, otherwise:
    /// the caller then hands them over one by one.
    pub fn receive_middle_run(
        &mut self,
        first: &RxPacket<'_>,
        n: u32,
        acks: u64,
        all: super::transport::RxPayload<'_>,
        env: &mut dyn RespEnv,
        tx: &mut dyn Tx,
    ) -> bool {
        let Some(InProgress::Write {
            va,
            rkey,
            resid,
            length,
        }) = self.cur
        else {
            return false;
        };
        let mtu = self.cfg.mtu;
        let plen = first.payload.len() as u32;
        // The checks each packet passes when the first does: its PSN is the one expected
        // after the packet before it, nothing in between can set the error or start a READ
        // reply, and every header but PSN and AckReq is the first's.
        if n == 0
            || n > 64
            || first.bth.opcode != Opcode::RC_RDMA_WRITE_MIDDLE
            || first.bth.psn != self.epsn
            || self.error
            || !self.reads.is_empty()
            || !self.cfg.remote_write
            || first.ext.imm_dt.is_some()
            || first.ext.reth.is_some()
            || plen != mtu
        {
            return false;
        }
        // The one check that changes from packet to packet: more than an MTU of the message
        // left before each, i.e. before the last (resid - (n - 1) * mtu > mtu).
        let total = u64::from(n) * u64::from(mtu);
        if u64::from(resid) <= total || all.len() as u64 != total {
            return false;
        }
        let rest = resid - total as u32;
        if !env.write_run(rkey, va, all, rest) {
            return false;
        }
        // Each packet executed in turn, and acknowledged in turn when it asks for it (or
        // under AckPolicy::EveryPacket); an ACK reads neither the expected PSN nor the
        // executed count, so they are advanced once for the run.
        self.nak_sent = false;
        let psn = first.bth.psn;
        self.counters.executed += u64::from(n);
        let mut asked = if self.cfg.ack_policy == AckPolicy::EveryPacket {
            !0
        } else {
            acks
        };
        if n < 64 {
            asked &= (1u64 << n) - 1;
        }
        while asked != 0 {
            self.ack(psn_add(psn, asked.trailing_zeros()), tx);
            asked &= asked - 1;
        }
        self.epsn = psn_add(psn, n);
        self.cur = Some(InProgress::Write {
            va: va.wrapping_add(total),
            rkey,
            resid: resid - total as u32,
            length,
        });
        true
    }

    /// Class C: NAKs `psn`, completes an engaged receive WQE in error, and goes to the error
    /// state (rxe do_class_ac_error → RESPST_COMPLETE / ACKNOWLEDGE).
    fn fail(&mut self, psn: u32, f: Fail, kind: OpKind, env: &mut dyn RespEnv, tx: &mut dyn Tx) {
        self.counters.error_naks += 1;
        self.send_ack(psn, Aeth::nak(f.nak, self.msn), tx);
        if let Some(status) = f.recv {
            let kind = if matches!(kind, OpKind::Write) {
                RecvKind::WriteImm
            } else {
                RecvKind::Send
            };
            env.recv_done(RecvCompletion {
                status,
                kind,
                byte_len: 0,
                imm: None,
                invalidated: None,
                solicited: false,
            });
        }
        self.error = true;
        self.cause = Some(f.nak);
        self.cur = None;
    }

    fn send_ack(&mut self, psn: u32, aeth: Aeth, tx: &mut dyn Tx) {
        let bth = Bth::new(Opcode::RC_ACKNOWLEDGE, self.cfg.dest_qp, psn);
        let ext = ExtHdrs {
            aeth: Some(aeth),
            ..ExtHdrs::default()
        };
        if matches!(aeth.kind(), super::AethKind::Ack { .. }) {
            self.counters.acks += 1;
        }
        // An ACK has no payload: the fill is never asked for bytes, the send cannot fail.
        let _ = tx.send(&bth, &ext, no_payload(&mut |_| Ok(())));
    }

    fn ack(&mut self, psn: u32, tx: &mut dyn Tx) {
        let aeth = Aeth::ack(Aeth::CREDIT_UNLIMITED, self.msn);
        self.send_ack(psn, aeth, tx);
    }

    /// A new request in sequence (rxe_resp.c check_op_seq .. execute / read_reply /
    /// atomic_reply / acknowledge).
    fn execute(
        &mut self,
        pkt: &RxPacket<'_>,
        kind: OpKind,
        pos: Position,
        env: &mut dyn RespEnv,
        tx: &mut dyn Tx,
    ) -> Result<Step, Fail> {
        let mtu = self.cfg.mtu;
        let psn = pkt.bth.psn;
        let plen = pkt.payload.len() as u32;
        let in_send = matches!(self.cur, Some(InProgress::Send { .. }));
        let invalid = |recv| Fail {
            nak: NakCode::InvalidRequest,
            recv,
        };
        // check_op_seq: a message in progress continues with MIDDLE / LAST of its kind; no
        // message in progress starts with FIRST / ONLY (MISSING_OPCODE_LAST_C / _FIRST → NAK
        // invalid request).
        let seq_ok = match self.cur {
            Some(InProgress::Send { .. }) => kind == OpKind::Send && !pos.is_start(),
            Some(InProgress::Write { .. }) => kind == OpKind::Write && !pos.is_start(),
            None => pos.is_start(),
        };
        if !seq_ok {
            return Err(invalid(in_send.then_some(WcStatus::RemInvReqErr)));
        }
        // check_op_valid: the QP's remote access enables.
        let enabled = match kind {
            OpKind::ReadRequest => self.cfg.remote_read,
            OpKind::Write => self.cfg.remote_write,
            OpKind::Atomic => self.cfg.remote_atomic,
            _ => true,
        };
        if !enabled {
            return Err(invalid(None));
        }
        // check_resource: READ / atomic need responder resources; SEND and the end of a
        // WRITE with immediate need a receive WQE, else RNR.
        if matches!(kind, OpKind::ReadRequest | OpKind::Atomic) && self.cfg.max_dest_rd_atomic == 0
        {
            return Err(invalid(None));
        }
        let consumes_recv =
            kind == OpKind::Send || (kind == OpKind::Write && pkt.ext.imm_dt.is_some());
        if consumes_recv && !env.recv_ready() {
            return Ok(Step::Rnr);
        }
        let recv_err = |s: WcStatus| consumes_recv.then_some(s).or(in_send.then_some(s));
        // check_length.
        let len_ok = match pos {
            Position::Only => plen <= mtu,
            Position::First | Position::Middle => plen == mtu,
            Position::Last => plen != 0 && plen <= mtu,
        };
        if !len_ok {
            return Err(invalid(recv_err(WcStatus::LocLenErr)));
        }
        if let Some(r) = pkt.ext.reth {
            if r.dma_len > 1 << 31 {
                return Err(invalid(recv_err(WcStatus::LocLenErr)));
            }
        }
        let access = |recv| Fail {
            nak: NakCode::RemoteAccessError,
            recv,
        };
        match kind {
            OpKind::Send => {
                let offset = match self.cur {
                    Some(InProgress::Send { offset }) => offset,
                    _ => 0,
                };
                if plen > 0 {
                    match env.recv_write(offset, pkt.payload) {
                        Ok(()) => {}
                        Err(RecvFault::TooLong) => {
                            return Err(invalid(Some(WcStatus::LocLenErr)));
                        }
                        Err(RecvFault::Protection) => {
                            // Model choice: the model's existing responder completes the WQE
                            // with LOC_PROT_ERR and NAKs remote operational (rxe:
                            // RESPST_ERR_MALFORMED_WQE, REM_OP_ERR).
                            return Err(Fail {
                                nak: NakCode::RemoteOperationalError,
                                recv: Some(WcStatus::LocProtErr),
                            });
                        }
                    }
                }
                let offset = offset + plen;
                if pos.is_end() {
                    if let Some(rkey) = pkt.ext.ieth {
                        if env.invalidate(rkey).is_err() {
                            return Err(invalid(Some(WcStatus::RemInvReqErr)));
                        }
                    }
                    self.cur = None;
                    self.msn = psn_add(self.msn, 1);
                    env.recv_done(RecvCompletion {
                        status: WcStatus::Success,
                        kind: RecvKind::Send,
                        byte_len: offset,
                        imm: pkt.ext.imm_dt,
                        invalidated: pkt.ext.ieth,
                        solicited: pkt.bth.solicited,
                    });
                } else {
                    self.cur = Some(InProgress::Send { offset });
                }
            }
            OpKind::Write => {
                let (va, rkey, resid, length) = match (self.cur, pkt.ext.reth) {
                    (_, Some(r)) => {
                        // check_rkey on the first packet, for the whole message; a zero-length
                        // WRITE carries no key to check.
                        if r.dma_len > 0
                            && env
                                .check(r.r_key, r.va, r.dma_len as u64, RemoteAccess::Write)
                                .is_err()
                        {
                            return Err(access(recv_err(WcStatus::LocAccessErr)));
                        }
                        (r.va, r.r_key, r.dma_len, r.dma_len)
                    }
                    (
                        Some(InProgress::Write {
                            va,
                            rkey,
                            resid,
                            length,
                        }),
                        None,
                    ) => (va, rkey, resid, length),
                    _ => return Err(invalid(None)),
                };
                // rxe check_rkey: the packet carries exactly what the RETH length leaves.
                let fits = if resid > mtu {
                    plen == mtu && !pos.is_end()
                } else {
                    plen == resid && pos.is_end()
                };
                if !fits {
                    return Err(invalid(recv_err(WcStatus::LocLenErr)));
                }
                if plen > 0 && env.write_part(rkey, va, pkt.payload, resid - plen).is_err() {
                    return Err(access(recv_err(WcStatus::LocAccessErr)));
                }
                if pos.is_end() {
                    self.cur = None;
                    self.msn = psn_add(self.msn, 1);
                    if let Some(imm) = pkt.ext.imm_dt {
                        env.recv_done(RecvCompletion {
                            status: WcStatus::Success,
                            kind: RecvKind::WriteImm,
                            byte_len: length,
                            imm: Some(imm),
                            invalidated: None,
                            solicited: pkt.bth.solicited,
                        });
                    }
                } else {
                    self.cur = Some(InProgress::Write {
                        va: va.wrapping_add(plen as u64),
                        rkey,
                        resid: resid - plen,
                        length,
                    });
                }
            }
            OpKind::ReadRequest => {
                let Some(r) = pkt.ext.reth else {
                    return Err(invalid(None));
                };
                if r.dma_len > 0
                    && env
                        .check(r.r_key, r.va, r.dma_len as u64, RemoteAccess::Read)
                        .is_err()
                {
                    return Err(access(None));
                }
                // rxe_resp.c execute counts a READ in the MSN when it starts (it cites IBTA C9-148).
                self.msn = psn_add(self.msn, 1);
                let npkts = packets_for(r.dma_len, mtu);
                self.push_resource(Resource {
                    kind: ResKind::Read {
                        va: r.va,
                        rkey: r.r_key,
                        length: r.dma_len,
                    },
                    first_psn: psn,
                    last_psn: psn_add(psn, npkts - 1),
                });
                self.epsn = psn_add(psn, npkts);
                self.read_reply(psn, true, r.va, r.r_key, r.dma_len, env, tx)
                    .map_err(|_| access(None))?;
                return Ok(Step::Done);
            }
            OpKind::Atomic => {
                let Some(a) = pkt.ext.atomic_eth else {
                    return Err(invalid(None));
                };
                if env.check(a.r_key, a.va, 8, RemoteAccess::Atomic).is_err() {
                    return Err(access(None));
                }
                // rxe atomic_reply: RESPST_ERR_MISALIGNED_ATOMIC → NAK invalid request.
                if a.va % 8 != 0 {
                    return Err(invalid(None));
                }
                let op = if pkt.bth.opcode == Opcode::RC_COMPARE_SWAP {
                    AtomicOp::CmpSwap {
                        compare: a.compare,
                        swap: a.swap_add,
                    }
                } else {
                    AtomicOp::FetchAdd { add: a.swap_add }
                };
                let orig = env.atomic(a.r_key, a.va, op).map_err(|_| access(None))?;
                self.counters.atomics_executed += 1;
                self.msn = psn_add(self.msn, 1);
                self.push_resource(Resource {
                    kind: ResKind::Atomic { orig },
                    first_psn: psn,
                    last_psn: psn,
                });
                self.epsn = psn_add(psn, 1);
                self.atomic_ack(psn, orig, tx);
                return Ok(Step::Done);
            }
            _ => return Err(invalid(None)),
        }
        self.epsn = psn_add(psn, 1);
        // rxe_resp.c acknowledge: ACK only packets with AckReq (the requester coalesces).
        if pkt.bth.ack_req || self.cfg.ack_policy == AckPolicy::EveryPacket {
            self.ack(psn, tx);
        }
        Ok(Step::Done)
    }

    /// rxe_prepare_res: the resource ring holds the last `max_dest_rd_atomic` READs / atomics.
    fn push_resource(&mut self, r: Resource) {
        let cap = self.cfg.max_dest_rd_atomic.max(1) as usize;
        while self.resources.len() >= cap {
            self.resources.pop_front();
        }
        self.resources.push_back(r);
    }

    /// rxe_resp.c find_resource: the resource whose PSN range holds `psn`.
    fn find_resource(&self, psn: u32) -> Option<Resource> {
        self.resources
            .iter()
            .rev()
            .find(|r| psn_diff(psn, r.first_psn) >= 0 && psn_diff(psn, r.last_psn) <= 0)
            .copied()
    }

    /// rxe_resp.c duplicate_request.
    fn duplicate(
        &mut self,
        pkt: &RxPacket<'_>,
        kind: OpKind,
        env: &mut dyn RespEnv,
        tx: &mut dyn Tx,
    ) {
        let psn = pkt.bth.psn;
        match kind {
            OpKind::Send | OpKind::Write => {
                // Re-ACK with the last PSN executed, do not execute again (rxe duplicate_request, citing
                // IBTA C9-105).
                self.ack(psn_add(self.epsn, PSN_MASK), tx);
            }
            OpKind::ReadRequest => {
                let (Some(res), Some(r)) = (self.find_resource(psn), pkt.ext.reth) else {
                    // Class D: no resource, drop silently.
                    self.counters.dropped += 1;
                    return;
                };
                let ResKind::Read { va, rkey, length } = res.kind else {
                    self.counters.dropped += 1;
                    return;
                };
                // The new request must be the original or a part of it (same key, inside the
                // original range); it is re-executed from its own PSN with its own address and
                // length (rxe duplicate_request resets the resource to the new request).
                let inside = r.va >= va
                    && (r.va - va) + r.dma_len as u64 <= length as u64
                    && r.r_key == rkey;
                if !inside {
                    self.counters.dropped += 1;
                    return;
                }
                // rxe read_reply re-checks the MR on a replay (rxe_recheck_mr).
                if r.dma_len > 0
                    && env
                        .check(r.r_key, r.va, r.dma_len as u64, RemoteAccess::Read)
                        .is_err()
                {
                    self.counters.dropped += 1;
                    return;
                }
                let first = psn == res.first_psn;
                let _ = self.read_reply(psn, first, r.va, r.r_key, r.dma_len, env, tx);
            }
            OpKind::Atomic => match self.find_resource(psn) {
                Some(Resource {
                    kind: ResKind::Atomic { orig },
                    first_psn,
                    ..
                }) if first_psn == psn => self.atomic_ack(psn, orig, tx),
                _ => self.counters.dropped += 1,
            },
            _ => self.counters.dropped += 1,
        }
    }

    /// Sends the READ response packets for `len` bytes at `va` from PSN `psn`: FIRST / MIDDLE /
    /// LAST / ONLY when `first` (the request's first PSN), MIDDLE / LAST for a replay from the
    /// middle; AETH on FIRST, LAST and ONLY (rxe_resp.c read_reply).
    #[allow(clippy::too_many_arguments)]
    fn read_reply(
        &mut self,
        psn: u32,
        first: bool,
        va: u64,
        rkey: u32,
        len: u32,
        env: &mut dyn RespEnv,
        tx: &mut dyn Tx,
    ) -> Result<(), LocalFault> {
        if !self.reads.is_empty() {
            let _ = self.stream(u32::MAX, env, tx);
        }
        self.reads.push_back(ReadJob {
            psn,
            first,
            va,
            rkey,
            len,
            msn: self.msn,
            next: 0,
        });
        self.stream(READ_BURST, env, tx)
    }

    /// Sends up to `budget` READ response packets of the queued replies. A packet whose bytes
    /// cannot be read ends its reply (the requester's timer retries the READ) and is returned.
    fn stream(
        &mut self,
        mut budget: u32,
        env: &mut dyn RespEnv,
        tx: &mut dyn Tx,
    ) -> Result<(), LocalFault> {
        let mtu = self.cfg.mtu;
        while budget > 0 {
            let Some(job) = self.reads.front_mut() else {
                break;
            };
            let n = packets_for(job.len, mtu);
            let i = job.next;
            let off = i * mtu;
            let plen = (job.len - off).min(mtu);
            let last = i + 1 == n;
            let op = match (job.first && i == 0, last) {
                (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
                (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            };
            let mut ext = ExtHdrs::default();
            if op != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE {
                ext.aeth = Some(Aeth::ack(Aeth::CREDIT_UNLIMITED, job.msn));
            }
            let bth = Bth::new(op, self.cfg.dest_qp, psn_add(job.psn, i));
            let (rkey, at) = (job.rkey, job.va.wrapping_add(off as u64));
            job.next += 1;
            if last {
                self.reads.pop_front();
            }
            budget -= 1;
            let mut fill = |dst: &mut [u8]| {
                if dst.is_empty() {
                    Ok(())
                } else {
                    env.read(rkey, at, dst).map_err(|_| LocalFault)
                }
            };
            let payload = TxPayload {
                len: plen as usize,
                src: (plen > 0).then_some(PayloadSrc::Remote { rkey, va: at }),
                fill: &mut fill,
            };
            if let Err(e) = tx.send(&bth, &ext, payload) {
                if !last {
                    self.reads.pop_front();
                }
                return Err(e);
            }
            self.counters.read_responses += 1;
        }
        Ok(())
    }

    fn atomic_ack(&mut self, psn: u32, orig: u64, tx: &mut dyn Tx) {
        let bth = Bth::new(Opcode::RC_ATOMIC_ACKNOWLEDGE, self.cfg.dest_qp, psn);
        let ext = ExtHdrs {
            aeth: Some(Aeth::ack(Aeth::CREDIT_UNLIMITED, self.msn)),
            atomic_ack_eth: Some(AtomicAckEth { orig }),
            ..ExtHdrs::default()
        };
        self.counters.atomic_acks += 1;
        let _ = tx.send(&bth, &ext, no_payload(&mut |_| Ok(())));
    }
}

enum Step {
    Done,
    Rnr,
}

fn no_payload(fill: Fill<'_>) -> TxPayload<'_> {
    TxPayload {
        len: 0,
        src: None,
        fill,
    }
}
