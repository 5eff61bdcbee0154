//! One RC QP's transport: its [`Requester`] and [`Responder`] behind one entry point, and how
//! the datapath drives them.
//!
//! # Driving an RC QP from the datapath
//!
//! (The model does this in `crate::datapath::rc`: its environment over the mkey table, the rings
//! and the CQs, the QP context mapping, and the packet path to the port.)
//!
//! State, per QP: one [`RcQp`]. The QP context gives its configuration: the table of which
//! QPC field sets which [`ReqConfig`] / [`RespConfig`] field is the model's, in `crate::datapath::rc`
//! ("QP context → transport").
//!
//! The responder exists from RTR, the requester from RTS. Time is any monotonic clock in
//! nanoseconds.
//!
//! Port counters (issue 8's list) come from the per-QP counters: retransmits =
//! [`ReqCounters`]`::retransmitted`, timeouts = `ReqCounters::timeouts`, RNR NAKs received =
//! `ReqCounters::rnr_naks`, RNR NAKs sent = [`RespCounters`]`::rnr_naks`, duplicates =
//! `RespCounters::duplicates`, out-of-sequence = `RespCounters::out_of_sequence`; frames,
//! bytes and ICRC errors are the link's.
//!
//! The environment, per call: an object implementing [`ReqMemory`](super::transport::ReqMemory)
//! (gather a WQE's message bytes from its gather list / inline data, scatter READ responses and
//! atomic results into its local buffers), [`RespMemory`](super::transport::RespMemory) (rkey
//! checks and moves, the RQ head, invalidation) and [`Completions`](super::transport::Completions)
//! (post the CQEs: `send_done` in SQ order, `recv_done` consuming the RQ head); and a [`Tx`]
//! that builds the frame (Ethernet/IP/UDP from the QP's address path, the given BTH and
//! extension headers, the payload through [`super::transport::TxPayload::fill`], the ICRC) and
//! hands it to the port, or, on a shared-memory link, passes the payload by reference.
//!
//! Events:
//! - **SQ doorbell**: parse each new WQE (checking its lkeys before anything moves), then
//!   [`RcQp::post`] it as a [`WorkRequest`] whose `wr_id` lets the environment find the WQE
//!   again; then [`RcQp::pump`].
//! - **Frame received** for this QP (DestQP, ICRC good): [`RcQp::receive`] with
//!   [`RxPacket::from_frame`](super::transport::RxPacket::from_frame); requests go to the
//!   responder, responses to the requester.
//! - **Timer**: when `now` reaches [`RcQp::next_deadline`], [`RcQp::pump`].
//! - **QP to ERR from a command**: [`RcQp::set_error`] (flushes the send side; the RQ's flush
//!   stays with the datapath).
//! - **After any call**: [`RcQp::is_error`] tells whether the transport moved the QP to ERR (an
//!   error completion went out); the datapath then flushes the RQ and raises the affiliated
//!   event if the responder failed.

use super::requester::{PostError, Requester, WorkRequest};
#[cfg(doc)]
use super::requester::{ReqConfig, ReqCounters};
use super::responder::Responder;
#[cfg(doc)]
use super::responder::{RespConfig, RespCounters};
use super::transport::{Nanos, ReqEnv, RespEnv, RxPacket, Tx};

/// The environment of a whole QP: both sides' memory and completions.
pub trait QpEnv: ReqEnv + RespEnv {}
impl<T: ReqEnv + RespEnv + ?Sized> QpEnv for T {}

/// Both halves of one RC QP.
#[derive(Debug)]
pub struct RcQp {
    /// Sends this QP's work requests.
    pub requester: Requester,
    /// Answers the peer's requests.
    pub responder: Responder,
}

impl RcQp {
    /// Queues a send work request.
    pub fn post(&mut self, wr: WorkRequest) -> Result<(), PostError> {
        self.requester.post(wr)
    }

    /// Runs the requester's timers and sends what may be sent, and streams pending READ
    /// responses ([`Responder::pump`]).
    pub fn pump(&mut self, now: Nanos, env: &mut dyn QpEnv, tx: &mut dyn Tx) {
        self.requester.pump(now, env, tx);
        self.responder.pump(env, tx);
    }

    /// Processes one received packet: requests (SEND, WRITE, READ request, atomics) go to the
    /// responder, responses (ACKNOWLEDGE, READ responses, ATOMIC ACKNOWLEDGE) to the requester;
    /// an opcode outside the table is dropped.
    pub fn receive(
        &mut self,
        now: Nanos,
        pkt: &RxPacket<'_>,
        env: &mut dyn QpEnv,
        tx: &mut dyn Tx,
    ) {
        let Some(info) = pkt.bth.opcode.info() else {
            return;
        };
        if info.is_request() {
            self.responder.receive(now, pkt, env, tx);
        } else {
            self.requester.receive(now, pkt, env, tx);
        }
    }

    /// When [`RcQp::pump`] next has timer work.
    /// (`Some(0)`, due at once, while READ responses are still streaming.)
    pub fn next_deadline(&self) -> Option<Nanos> {
        if self.responder.has_pending_reads() {
            return Some(0);
        }
        self.requester.next_deadline()
    }

    /// Whether either half went to the error state.
    pub fn is_error(&self) -> bool {
        self.requester.is_error() || self.responder.is_error()
    }

    /// Moves both halves to the error state, flushing the send side.
    pub fn set_error(&mut self, env: &mut dyn QpEnv) {
        self.requester.set_error(env);
        self.responder.set_error();
    }
}
