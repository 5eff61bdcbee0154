//! Connections in both roles as one pure state machine: the passive side (rdma_cm's
//! `rdma_listen` / `rdma_accept`) and the active side (`rdma_connect`, [`Cm::connect`]); MADs
//! in, MADs and QP moves out through a [`CmTransport`], time passed in.
//!
//! States and transitions follow Linux `drivers/infiniband/core/cm.c` (`enum ib_cm_state`;
//! `cm_req_handler`, `cm_rep_handler`, `cm_rtu_handler`, `cm_dreq_handler`,
//! `cm_drep_handler`, `cm_rej_handler`, `cm_mra_handler`, `cm_dup_req_handler`,
//! `cm_dup_rep_handler`, `cm_enter_timewait`, `cm_process_send_error`) and IBTA vol. 1
//! chapter 12; SIDR for UD services answers without keeping state, and asks with
//! [`Cm::sidr_request`]. Left out: alternate paths (LAP/APR).
//!
//! ```
//! use rdma_cm::conn::*;
//! use rdma_cm::rdma_cm::{PortSpace, QpType};
//! use rdma_cm::MAD_LEN;
//!
//! /// The driver's side: UD sends on QP 1 and QP modifications.
//! struct Nic;
//! impl CmTransport for Nic {
//!     type QpError = ();
//!     fn send_mad(&mut self, _to: &Peer, _mad: &[u8; MAD_LEN]) { /* post a UD SEND */ }
//!     fn modify_qp(&mut self, _qpn: u32, _step: QpStep) -> Result<(), ()> { Ok(()) }
//! }
//!
//! let cfg = CmConfig {
//!     local_ca_guid: 0x0200_00ff_fe00_0001,
//!     ack_delay: 15,
//!     max_responder_resources: 16,
//!     max_initiator_depth: 16,
//!     tid_hi: 1,
//!     comm_id_seed: 0x1234_5678,
//! };
//! let mut cm = Cm::<64>::new(cfg);
//! cm.listen(PortSpace::Tcp.service_id(4420), QpType::Rc, 16).unwrap();
//! # let (peer, mad, now) = (Peer { gid: [0; 16], qpn: 1 }, [0u8; MAD_LEN], 0u64);
//! // For each datagram received on QP 1, and whenever `cm.next_deadline()` passes:
//! match cm.on_mad(now, &peer, &mad, &mut Nic) {
//!     Ok(Some(CmEvent::ConnectRequest { id, req, .. })) => {
//!         let accept = Accept {
//!             qpn: 0x12, // a fresh RC QP in RESET, receives posted
//!             starting_psn: 0x00ab_cdef,
//!             responder_resources: req.initiator_depth,
//!             initiator_depth: req.responder_resources,
//!             flow_control: true,
//!             rnr_retry_count: 7,
//!             srq: false,
//!             private_data: &[],
//!         };
//!         cm.accept(now, id, &accept, &mut Nic).unwrap();
//!     }
//!     Ok(Some(CmEvent::Established { .. })) => { /* the QP carries data */ }
//!     Ok(_) => {}
//!     Err(_dropped) => { /* counted in cm.counters */ }
//! }
//! while let Some(_event) = cm.poll(now, &mut Nic) { /* timeouts, TIMEWAIT exits */ }
//! ```

mod types;

pub use types::{
    ack_timeout, iba_time_ns, Accept, CallError, CmConfig, CmEvent, CmTransport, ConnId, Connect,
    Dropped, Peer, QpStep, RtrAttrs, RtsAttrs,
};

use crate::mad::MAD_LEN;
use crate::msg::{
    msg_response, private_data, rej_reason, CmMad, CmMsg, Dreq, Mra, Rej, Rep, Req, REJ_ARI_LEN,
};
use crate::rdma_cm::{CmaHdr, QpType};

mod active;
mod handlers;
mod sidr;

pub use sidr::SidrTicket;

/// The service timeout of the MRA a duplicate REQ gets while the application has not
/// answered: 4.096 µs × 2^24 ≈ 69 s (cma.c `CMA_CM_MRA_SETTING`).
pub const MRA_SERVICE_TIMEOUT: u8 = 24;

/// Most services listened on at once.
pub const MAX_LISTENERS: usize = 16;

/// Most SIDR requests of ours waiting for their answer at once.
pub const MAX_SIDR_REQUESTS: usize = 16;

/// A connection's state (cm.c `enum ib_cm_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConnState {
    /// Active: REQ sent, waiting for the REP (`IB_CM_REQ_SENT`).
    ReqSent,
    /// Active: the peer MRAed our REQ (`IB_CM_MRA_REQ_RCVD`).
    MraReqRcvd,
    /// REQ received, the application not yet answered (`IB_CM_REQ_RCVD`).
    ReqRcvd,
    /// We sent an MRA for the REQ (`IB_CM_MRA_REQ_SENT`).
    MraReqSent,
    /// REP sent, waiting for the RTU (`IB_CM_REP_SENT`).
    RepSent,
    /// The peer MRAed our REP (`IB_CM_MRA_REP_RCVD`).
    MraRepRcvd,
    /// Connected (`IB_CM_ESTABLISHED`).
    Established,
    /// We sent a DREQ (`IB_CM_DREQ_SENT`).
    DreqSent,
    /// Disconnected, IDs not yet reusable (`IB_CM_TIMEWAIT`).
    TimeWait,
}

/// What the machine counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Received MADs that changed nothing ([`Dropped`]).
    pub dropped: u64,
    /// REJs sent.
    pub rej_sent: u64,
    /// REPs and DREQs sent again after a timeout.
    pub retransmits: u64,
    /// Duplicate REQs.
    pub duplicate_reqs: u64,
}

#[derive(Clone, Copy, Debug)]
struct Listener {
    service_id: u64,
    /// The listening ID's QP type: a request of the other kind is refused (cma.c
    /// `cma_check_req_qp_type`).
    qp_type: QpType,
    backlog: usize,
}

/// Which end of the connection we are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// We sent the REQ (`rdma_connect`).
    Active,
    /// We received it (`rdma_listen`).
    Passive,
}

#[derive(Clone, Copy, Debug)]
struct Conn {
    id: u32,
    role: Role,
    remote_id: u32,
    remote_guid: u64,
    tid: u64,
    peer: Peer,
    service_id: u64,
    state: ConnState,
    /// The REQ received (passive) or sent (active).
    req: Req,
    /// Our QP: the active side's from the start, the passive side's once accepted.
    qpn: Option<u32>,
    /// The peer's QP (REQ or REP Local QPN; 0 before the REP on the active side).
    remote_qpn: u32,
    /// The path's Local ACK Timeout as our QP has it (cm.c `av.timeout`): the REQ's, on the
    /// active side redone from the REP's Target ACK Delay.
    ack_timeout: u8,
    /// The last MAD sent: sent again on a timeout or a duplicate.
    last: [u8; MAD_LEN],
    deadline: Option<u64>,
    retries_left: u8,
    /// How long each try of the MAD in flight waits: the response time, or what the peer's
    /// MRA asked for (mad.c `ib_modify_mad` changes the wait of the tries left too).
    retry_ns: u64,
    /// Destroyed by the application: no more events (it waits out TIMEWAIT).
    quiet: bool,
}

impl Conn {
    /// How long we wait for the peer's answer to our REQ, REP or DREQ. Passive: the REQ's
    /// Local CM Response Timeout (cm.c `cm_req_handler` sets `timeout_ms` from it). Active:
    /// two packet life times and the REQ's Remote CM Response Timeout (cm.c
    /// `ib_send_cm_req`).
    fn response_ns(&self) -> u64 {
        match self.role {
            Role::Passive => iba_time_ns(self.req.local_cm_response_timeout),
            Role::Active => {
                let life = self.req.primary.local_ack_timeout.saturating_sub(1);
                2 * iba_time_ns(life) + iba_time_ns(self.req.remote_cm_response_timeout)
            }
        }
    }
    /// Starts waiting for the answer to the MAD just sent: `max_cm_retries` tries more,
    /// each waiting the response time (cm.c `cm_alloc_msg`: `retries`, `timeout_ms`).
    fn start_wait(&mut self, now: u64) {
        self.retries_left = self.req.max_cm_retries;
        self.retry_ns = self.response_ns();
        self.deadline = Some(now.saturating_add(self.retry_ns));
    }
    /// TIMEWAIT: the ACK timeout of the path (cm.c `cm_enter_timewait`,
    /// `cm_convert_to_ms(av.timeout)`).
    fn timewait_ns(&self) -> u64 {
        iba_time_ns(self.ack_timeout)
    }
}

/// Connections (at most `N`) in either role, listeners, and SIDR requests of ours.
pub struct Cm<const N: usize> {
    cfg: CmConfig,
    listeners: [Option<Listener>; MAX_LISTENERS],
    conns: [Option<Conn>; N],
    sidr: [Option<sidr::SidrPending>; MAX_SIDR_REQUESTS],
    next_id: u32,
    /// What was counted.
    pub counters: Counters,
}

fn send<T: CmTransport>(
    t: &mut T,
    to: &Peer,
    mad: &CmMad,
) -> Result<[u8; MAD_LEN], crate::CmError> {
    let b = mad.to_bytes()?;
    t.send_mad(to, &b);
    Ok(b)
}

impl<const N: usize> Cm<N> {
    /// No listener, no connection.
    pub fn new(cfg: CmConfig) -> Self {
        Cm {
            cfg,
            listeners: [None; MAX_LISTENERS],
            conns: [None; N],
            sidr: [None; MAX_SIDR_REQUESTS],
            next_id: 0,
            counters: Counters::default(),
        }
    }

    /// Listens on `service_id` ([`crate::rdma_cm::PortSpace::service_id`]) for requests of
    /// `qp_type` ([`crate::rdma_cm::PortSpace::qp_type`]: REQs for [`QpType::Rc`], SIDR_REQs
    /// for [`QpType::Ud`]; the other kind is refused) with at most `backlog` requests not yet
    /// accepted or rejected (`rdma_listen`).
    pub fn listen(
        &mut self,
        service_id: u64,
        qp_type: QpType,
        backlog: usize,
    ) -> Result<(), CallError<()>> {
        if self.listener(service_id).is_some() {
            return Err(CallError::InUse);
        }
        let slot = self.listeners.iter_mut().find(|l| l.is_none());
        *slot.ok_or(CallError::Full)? = Some(Listener {
            service_id,
            qp_type,
            backlog,
        });
        Ok(())
    }

    /// Stops listening; connections already made stay.
    pub fn unlisten(&mut self, service_id: u64) {
        for l in self.listeners.iter_mut() {
            if l.is_some_and(|l| l.service_id == service_id) {
                *l = None;
            }
        }
    }

    fn listener(&self, service_id: u64) -> Option<Listener> {
        self.listeners
            .iter()
            .flatten()
            .find(|l| l.service_id == service_id)
            .copied()
    }

    /// The state of a connection.
    pub fn state(&self, id: ConnId) -> Option<ConnState> {
        self.slot(id.0).map(|i| self.conn(i).state)
    }

    /// When [`Cm::poll`] next has something to do.
    pub fn next_deadline(&self) -> Option<u64> {
        let conns = self.conns.iter().flatten().filter_map(|c| c.deadline);
        let sidr = self.sidr.iter().flatten().map(|s| s.deadline);
        conns.chain(sidr).min()
    }

    fn slot(&self, id: u32) -> Option<usize> {
        self.conns
            .iter()
            .position(|c| c.is_some_and(|c| c.id == id))
    }

    /// The slot and a copy of connection `id`, if it is in one of `states`.
    fn in_state<E>(&self, id: ConnId, states: &[ConnState]) -> Result<(usize, Conn), CallError<E>> {
        let i = self.slot(id.0).ok_or(CallError::UnknownConn)?;
        let c = *self.conn(i);
        if !states.contains(&c.state) {
            return Err(CallError::WrongState);
        }
        Ok((i, c))
    }

    fn conn(&self, i: usize) -> &Conn {
        self.conns[i].as_ref().expect("slot index from slot()")
    }

    fn conn_mut(&mut self, i: usize) -> &mut Conn {
        self.conns[i].as_mut().expect("slot index from slot()")
    }

    /// A fresh local communication ID: never 0 (the REJ of an unknown REQ carries 0, as
    /// cm.c `cm_issue_rej` sends it), never one in use.
    fn new_id(&mut self) -> u32 {
        loop {
            self.next_id = self.next_id.wrapping_add(1);
            let id = self.next_id ^ self.cfg.comm_id_seed;
            if id != 0 && self.slot(id).is_none() && self.sidr_slot(id).is_none() {
                return id;
            }
        }
    }

    /// Accepts a requested connection (`rdma_accept`): moves `a.qpn` through INIT, RTR and
    /// RTS from the REQ (cma.c `cma_accept_ib`: RTR and RTS before the REP), then sends the
    /// REP and waits for the RTU. Receives must be posted on the QP before this call. When a
    /// move fails the connection is unchanged and the QP may be part way: reset it, then
    /// accept again or reject.
    pub fn accept<T: CmTransport>(
        &mut self,
        now: u64,
        id: ConnId,
        a: &Accept<'_>,
        t: &mut T,
    ) -> Result<(), CallError<T::QpError>> {
        let (i, c) = self.in_state(id, &[ConnState::ReqRcvd, ConnState::MraReqSent])?;
        let req = &c.req;
        let responder_resources = a
            .responder_resources
            .min(req.initiator_depth)
            .min(self.cfg.max_responder_resources);
        let initiator_depth = a
            .initiator_depth
            .min(req.responder_resources)
            .min(self.cfg.max_initiator_depth);
        // cm.c `cm_format_rep`.
        let rep = Rep {
            local_comm_id: c.id,
            remote_comm_id: c.remote_id,
            local_qkey: 0,
            local_qpn: a.qpn,
            local_eecn: 0,
            starting_psn: a.starting_psn,
            // No ECE (cma.c `cma_accept_ib` copies the application's, none here).
            vendor_id: 0,
            responder_resources,
            initiator_depth,
            target_ack_delay: self.cfg.ack_delay,
            failover_accepted: 0,
            end_to_end_flow_control: a.flow_control,
            rnr_retry_count: a.rnr_retry_count,
            srq: a.srq,
            local_ca_guid: self.cfg.local_ca_guid,
            private_data: private_data(a.private_data).map_err(CallError::Encode)?,
        };
        let mad = CmMad::new(c.tid, CmMsg::Rep(rep));
        let bytes = mad.to_bytes().map_err(CallError::Encode)?;
        let steps = qp_steps(
            req,
            Role::Passive,
            Agreed {
                dest_qpn: req.local_qpn,
                rq_psn: a.starting_psn,
                sq_psn: req.starting_psn,
                max_dest_rd_atomic: responder_resources,
                max_rd_atomic: initiator_depth,
                timeout: req.primary.local_ack_timeout,
                rnr_retry: req.rnr_retry_count,
            },
        );
        for s in steps {
            t.modify_qp(a.qpn, s).map_err(CallError::Qp)?;
        }
        t.send_mad(&c.peer, &bytes);
        let c = self.conn_mut(i);
        c.qpn = Some(a.qpn);
        c.last = bytes;
        c.state = ConnState::RepSent;
        c.start_wait(now);
        Ok(())
    }

    /// Rejects a requested connection (`rdma_reject`): REJ with reason Consumer Defined and
    /// the application's private data; the connection is gone.
    pub fn reject<T: CmTransport>(
        &mut self,
        id: ConnId,
        private: &[u8],
        t: &mut T,
    ) -> Result<(), CallError<T::QpError>> {
        let (i, c) = self.in_state(id, &[ConnState::ReqRcvd, ConnState::MraReqSent])?;
        let pd = private_data(private).map_err(CallError::Encode)?;
        // cm.c `cm_format_rej`: our ID only once the peer has it (from our MRA).
        let local = if c.state == ConnState::ReqRcvd {
            0
        } else {
            c.id
        };
        let rej = rej_for(
            c.remote_id,
            local,
            msg_response::REQ,
            rej_reason::CONSUMER_DEFINED,
            pd,
        );
        send(t, &c.peer, &CmMad::new(c.tid, CmMsg::Rej(rej))).map_err(CallError::Encode)?;
        self.counters.rej_sent += 1;
        self.conns[i] = None;
        Ok(())
    }

    /// Tells the peer the application needs time to answer its REQ: MRA with
    /// `service_timeout` (4.096 µs × 2^value); a duplicate REQ then gets the MRA again
    /// (cm.c `ib_send_cm_mra`).
    pub fn mra<T: CmTransport>(
        &mut self,
        id: ConnId,
        service_timeout: u8,
        t: &mut T,
    ) -> Result<(), CallError<T::QpError>> {
        let (i, c) = self.in_state(id, &[ConnState::ReqRcvd])?;
        let mra = Mra {
            local_comm_id: c.id,
            remote_comm_id: c.remote_id,
            message_mraed: msg_response::REQ,
            service_timeout,
            private_data: [0; crate::msg::MRA_PRIVATE_DATA_LEN],
        };
        let b = send(t, &c.peer, &CmMad::new(c.tid, CmMsg::Mra(mra))).map_err(CallError::Encode)?;
        let c = self.conn_mut(i);
        c.last = b;
        c.state = ConnState::MraReqSent;
        Ok(())
    }

    /// Disconnects an established connection (`rdma_disconnect`): QP to ERR, DREQ, and
    /// TIMEWAIT once the DREP comes or the DREQ's retries run out.
    pub fn disconnect<T: CmTransport>(
        &mut self,
        now: u64,
        id: ConnId,
        t: &mut T,
    ) -> Result<(), CallError<T::QpError>> {
        let (i, c) = self.in_state(id, &[ConnState::Established])?;
        let qpn = c.qpn.ok_or(CallError::WrongState)?;
        t.modify_qp(qpn, QpStep::Err).map_err(CallError::Qp)?;
        let b = send(t, &c.peer, &self.dreq(&c)).map_err(CallError::Encode)?;
        let c = self.conn_mut(i);
        c.last = b;
        c.state = ConnState::DreqSent;
        c.start_wait(now);
        Ok(())
    }

    /// The DREQ of connection `c` (cm.c `cm_format_dreq`: Remote QPN/EECN is the peer's QPN;
    /// a DREQ starts an exchange of its own).
    fn dreq(&self, c: &Conn) -> CmMad {
        let dreq = Dreq {
            local_comm_id: c.id,
            remote_comm_id: c.remote_id,
            remote_qpn_eecn: c.remote_qpn,
            private_data: [0; crate::msg::DREQ_PRIVATE_DATA_LEN],
        };
        CmMad::new(own_tid(self.cfg.tid_hi, c.id), CmMsg::Dreq(dreq))
    }

    /// Forgets a connection in any state (`rdma_destroy_id`; cm.c `cm_destroy_id`): its QP to
    /// ERR, the peer told as Linux tells it, and no more events for it. An unanswered REQ of
    /// ours gets a REJ Timeout naming our CA GUID, a request not yet answered a REJ Consumer
    /// Defined, and both are gone; an unanswered REP gets a REJ Consumer Defined, an
    /// established connection one DREQ (not retried), and these wait out TIMEWAIT (with any in
    /// DREQ_SENT or TIMEWAIT already) before their IDs can return.
    pub fn destroy<T: CmTransport>(
        &mut self,
        now: u64,
        id: ConnId,
        t: &mut T,
    ) -> Result<(), CallError<T::QpError>> {
        let i = self.slot(id.0).ok_or(CallError::UnknownConn)?;
        let c = *self.conn(i);
        if let Some(qpn) = c.qpn {
            // cma.c `rdma_destroy_id` → `cma_modify_qp_err` precedes it; a failure changes
            // nothing here.
            let _ = t.modify_qp(qpn, QpStep::Err);
        }
        // cm.c `cm_format_rej`: the message rejected by the state left.
        let rej = |reason, message_rejected, ari: Option<u64>| {
            let mut r = rej_for(
                c.remote_id,
                c.id,
                message_rejected,
                reason,
                [0; crate::msg::REJ_PRIVATE_DATA_LEN],
            );
            if let Some(guid) = ari {
                r.reject_info_length = 8;
                r.ari[..8].copy_from_slice(&guid.to_be_bytes());
            }
            CmMad::new(c.tid, CmMsg::Rej(r))
        };
        let guid = self.cfg.local_ca_guid;
        let (mad, gone) = match c.state {
            ConnState::ReqSent | ConnState::MraReqRcvd => (
                Some(rej(rej_reason::TIMEOUT, msg_response::OTHER, Some(guid))),
                true,
            ),
            ConnState::ReqRcvd | ConnState::MraReqSent => return self.reject(id, &[], t),
            ConnState::RepSent | ConnState::MraRepRcvd => (
                Some(rej(rej_reason::CONSUMER_DEFINED, msg_response::OTHER, None)),
                false,
            ),
            ConnState::Established => (Some(self.dreq(&c)), false),
            ConnState::DreqSent | ConnState::TimeWait => (None, false),
        };
        if let Some(mad) = mad {
            // Every field of these fits its width.
            let _ = send(t, &c.peer, &mad);
            if matches!(mad.msg, CmMsg::Rej(_)) {
                self.counters.rej_sent += 1;
            }
        }
        if gone {
            self.conns[i] = None;
        } else {
            if c.state != ConnState::TimeWait {
                self.enter_timewait(now, i);
            }
            self.conn_mut(i).quiet = true;
        }
        Ok(())
    }

    /// The first packet arrived on the connection's QP before the RTU (the QP's
    /// communication-established event; cm.c `ib_cm_notify` → `cm_establish`).
    pub fn comm_established(&mut self, id: ConnId) -> Option<CmEvent> {
        let i = self.slot(id.0)?;
        let c = self.conn_mut(i);
        if !matches!(c.state, ConnState::RepSent | ConnState::MraRepRcvd) {
            return None;
        }
        c.state = ConnState::Established;
        c.deadline = None;
        Some(CmEvent::Established {
            id,
            private_data: [0; crate::msg::REP_PRIVATE_DATA_LEN],
        })
    }
}

/// The transaction ID of an exchange we start: `tid_hi` above, the local communication ID
/// below, its bytes in the order Linux puts them there (cm.c `cm_form_tid` ORs the ID as
/// stored, big-endian, into a host-order `u64` before `cpu_to_be64`: on the x86 hosts of the
/// captures the low word reads byte-swapped). Answers carry the exchange's TID instead.
pub const fn own_tid(tid_hi: u32, local_comm_id: u32) -> u64 {
    ((tid_hi as u64) << 32) | local_comm_id.swap_bytes() as u64
}

/// A REJ to the peer whose communication ID is `remote_comm_id` (cm.c `cm_format_rej`).
fn rej_for(
    remote_comm_id: u32,
    local_comm_id: u32,
    message_rejected: u8,
    reason: u16,
    private_data: [u8; crate::msg::REJ_PRIVATE_DATA_LEN],
) -> Rej {
    Rej {
        local_comm_id,
        remote_comm_id,
        message_rejected,
        reject_info_length: 0,
        reason,
        ari: [0; REJ_ARI_LEN],
        private_data,
    }
}

/// What the two sides agreed on for one QP, beyond the REQ's path.
struct Agreed {
    /// The peer's QPN.
    dest_qpn: u32,
    /// The PSN we receive first (the REQ's Starting PSN on the active side, the REP's on
    /// the passive side).
    rq_psn: u32,
    /// The PSN we send first (the other one).
    sq_psn: u32,
    /// RDMA READs / atomics we answer at once.
    max_dest_rd_atomic: u8,
    /// RDMA READs / atomics we issue at once.
    max_rd_atomic: u8,
    /// Our Local ACK Timeout.
    timeout: u8,
    /// Our retries of the peer's RNR NAKs (the count the peer asked for).
    rnr_retry: u8,
}

/// The INIT, RTR and RTS of a connection's QP (cm.c `cm_init_qp_init_attr`,
/// `cm_init_qp_rtr_attr`, `cm_init_qp_rts_attr`): the REQ's path seen from our end, and what
/// was agreed.
fn qp_steps(req: &Req, role: Role, a: Agreed) -> [QpStep; 3] {
    let path = &req.primary;
    let (local_gid, remote_gid) = match role {
        Role::Active => (path.local_gid, path.remote_gid),
        Role::Passive => (path.remote_gid, path.local_gid),
    };
    [
        QpStep::Init { pkey: req.pkey },
        QpStep::Rtr(RtrAttrs {
            dest_qpn: a.dest_qpn,
            rq_psn: a.rq_psn,
            path_mtu: req.path_mtu,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            pkey: req.pkey,
            remote_gid,
            local_gid,
            flow_label: path.flow_label,
            hop_limit: path.hop_limit,
            traffic_class: path.traffic_class,
            sl: path.sl,
        }),
        QpStep::Rts(RtsAttrs {
            sq_psn: a.sq_psn,
            timeout: a.timeout,
            retry_cnt: req.retry_count,
            rnr_retry: a.rnr_retry,
            max_rd_atomic: a.max_rd_atomic,
        }),
    ]
}

/// The rdma_cm header of a REQ, if its private data starts with a valid one.
fn cma_of(req: &Req) -> Option<CmaHdr> {
    CmaHdr::decode(&req.private_data).ok()
}

#[cfg(test)]
mod tests;
