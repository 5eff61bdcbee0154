//! The answers to received MADs and to the timers, both roles; what only the active side
//! receives (REP, SIDR_REP) is in `active` and `sidr`.

use super::{
    cma_of, rej_for, send, Cm, CmEvent, CmTransport, Conn, ConnId, ConnState, Dropped, Peer,
    QpStep, Role,
};
use crate::mad::{MadHdr, MAD_LEN};
use crate::msg::{
    msg_response, rej_reason, transport, CmMad, CmMsg, Drep, Dreq, Mra, Rej, Req, Rtu,
    REJ_PRIVATE_DATA_LEN, REP_PRIVATE_DATA_LEN, RTU_PRIVATE_DATA_LEN,
};
use crate::rdma_cm::QpType;

impl<const N: usize> Cm<N> {
    /// Takes one MAD received on QP 1 from `from` at time `now` (ns).
    pub fn on_mad<T: CmTransport>(
        &mut self,
        now: u64,
        from: &Peer,
        bytes: &[u8],
        t: &mut T,
    ) -> Result<Option<CmEvent>, Dropped> {
        let r = CmMad::decode(bytes)
            .map_err(Dropped::Decode)
            .and_then(|mad| match mad.msg {
                CmMsg::Req(req) => self.on_req(from, &mad.hdr, &req, t),
                CmMsg::Rtu(rtu) => self.on_rtu(&rtu),
                CmMsg::Dreq(dreq) => self.on_dreq(now, from, &mad.hdr, &dreq, t),
                CmMsg::Drep(drep) => self.on_drep(now, &drep),
                CmMsg::Rej(rej) => self.on_rej(now, &rej, t),
                CmMsg::Mra(mra) => self.on_mra(now, &mra),
                CmMsg::SidrReq(req) => self.on_sidr_req(from, &mad.hdr, &req, t),
                CmMsg::Rep(rep) => self.on_rep(&rep, t),
                CmMsg::SidrRep(rep) => self.on_sidr_rep(&rep),
            });
        if r.is_err() {
            self.counters.dropped += 1;
        }
        r
    }

    /// A REJ for `req` before any connection exists (cm.c `cm_issue_rej`: local ID 0).
    fn refuse<T: CmTransport>(
        &mut self,
        to: &Peer,
        hdr: &MadHdr,
        req: &Req,
        reason: u16,
        t: &mut T,
    ) -> Dropped {
        let rej = rej_for(
            req.local_comm_id,
            0,
            msg_response::REQ,
            reason,
            [0; REJ_PRIVATE_DATA_LEN],
        );
        // Every field of this REJ fits its width.
        let _ = send(t, to, &CmMad::new(hdr.tid, CmMsg::Rej(rej)));
        self.counters.rej_sent += 1;
        Dropped::Rejected(reason)
    }

    fn on_req<T: CmTransport>(
        &mut self,
        from: &Peer,
        hdr: &MadHdr,
        req: &Req,
        t: &mut T,
    ) -> Result<Option<CmEvent>, Dropped> {
        // A REQ we know by the sender's ID and CA GUID (cm.c `cm_insert_remote_id`).
        let dup = self.conns.iter().flatten().find(|c| {
            c.role == Role::Passive
                && c.remote_id == req.local_comm_id
                && c.remote_guid == req.local_ca_guid
        });
        if let Some(c) = dup.copied() {
            self.counters.duplicate_reqs += 1;
            return Err(self.on_dup_req(&c, hdr, req, t));
        }
        let Some(l) = self.listener(req.service_id) else {
            return Err(self.refuse(from, hdr, req, rej_reason::INVALID_SERVICE_ID, t));
        };
        if req.transport_service_type != transport::RC {
            return Err(self.refuse(from, hdr, req, rej_reason::INVALID_TRANSPORT_TYPE, t));
        }
        if l.qp_type != QpType::Rc {
            // A REQ for a UD service (an RC REQ to udaddy's port): cma.c
            // `cma_ib_req_handler` fails `cma_ib_check_req_qp_type` with -EINVAL and cm.c
            // `cm_destroy_id` in REQ_RCVD answers REJ Consumer Defined, no ARI, no private data.
            return Err(self.refuse(from, hdr, req, rej_reason::CONSUMER_DEFINED, t));
        }
        let pending = self
            .conns
            .iter()
            .flatten()
            .filter(|c| c.service_id == l.service_id)
            .filter(|c| matches!(c.state, ConnState::ReqRcvd | ConnState::MraReqSent))
            .count();
        if pending >= l.backlog {
            // The listener refuses more (librdmacm backlog; cm.c `cm_destroy_id` in REQ_RCVD
            // sends REJ Consumer Defined).
            return Err(self.refuse(from, hdr, req, rej_reason::CONSUMER_DEFINED, t));
        }
        let Some(slot) = self.conns.iter().position(|c| c.is_none()) else {
            return Err(self.refuse(from, hdr, req, rej_reason::NO_RESOURCES, t));
        };
        let id = self.new_id();
        self.conns[slot] = Some(Conn {
            id,
            role: Role::Passive,
            remote_id: req.local_comm_id,
            remote_guid: req.local_ca_guid,
            tid: hdr.tid,
            peer: *from,
            service_id: l.service_id,
            state: ConnState::ReqRcvd,
            req: *req,
            qpn: None,
            remote_qpn: req.local_qpn,
            ack_timeout: req.primary.local_ack_timeout,
            last: [0; MAD_LEN],
            deadline: None,
            retries_left: 0,
            retry_ns: 0,
            quiet: false,
        });
        Ok(Some(CmEvent::ConnectRequest {
            id: ConnId(id),
            req: *req,
            cma: cma_of(req),
        }))
    }

    /// cm.c `cm_dup_req_handler`: MRA while the application thinks, REJ Stale
    /// Connection in TIMEWAIT; and (beyond Linux, which waits for its REP timer) the same REP
    /// again while waiting for the RTU.
    fn on_dup_req<T: CmTransport>(
        &mut self,
        c: &Conn,
        hdr: &MadHdr,
        req: &Req,
        t: &mut T,
    ) -> Dropped {
        match c.state {
            ConnState::ReqRcvd => {
                // The application is slow: tell the peer to wait (rdma_cm answers every REQ
                // it hands up with a delayed MRA, cma.c `cma_ib_req_handler`
                // `CMA_CM_MRA_SETTING`, which cm.c `cm_dup_req_handler` sends on a duplicate).
                let _ = self.mra(ConnId(c.id), super::MRA_SERVICE_TIMEOUT, t);
                Dropped::DuplicateReq
            }
            ConnState::MraReqSent | ConnState::RepSent | ConnState::MraRepRcvd => {
                t.send_mad(&c.peer, &c.last);
                Dropped::DuplicateReq
            }
            ConnState::TimeWait => {
                let rej = rej_for(
                    req.local_comm_id,
                    c.id,
                    msg_response::REQ,
                    rej_reason::STALE_CONN,
                    [0; REJ_PRIVATE_DATA_LEN],
                );
                let _ = send(t, &c.peer, &CmMad::new(hdr.tid, CmMsg::Rej(rej)));
                self.counters.rej_sent += 1;
                Dropped::Rejected(rej_reason::STALE_CONN)
            }
            _ => Dropped::DuplicateReq,
        }
    }

    /// The connection a message names by our ID (`remote`) and the peer's (`local`).
    fn named(&self, ours: u32, theirs: u32) -> Result<usize, Dropped> {
        let i = self.slot(ours).ok_or(Dropped::UnknownConn)?;
        if self.conn(i).remote_id != theirs {
            return Err(Dropped::UnknownConn);
        }
        Ok(i)
    }

    fn on_rtu(&mut self, rtu: &Rtu) -> Result<Option<CmEvent>, Dropped> {
        let i = self.named(rtu.remote_comm_id, rtu.local_comm_id)?;
        let c = self.conn_mut(i);
        if !matches!(c.state, ConnState::RepSent | ConnState::MraRepRcvd) {
            return Err(Dropped::WrongState);
        }
        c.state = ConnState::Established;
        c.deadline = None;
        Ok(Some(CmEvent::Established {
            id: ConnId(c.id),
            private_data: [0; REP_PRIVATE_DATA_LEN],
        }))
    }

    fn on_dreq<T: CmTransport>(
        &mut self,
        now: u64,
        from: &Peer,
        hdr: &MadHdr,
        dreq: &Dreq,
        t: &mut T,
    ) -> Result<Option<CmEvent>, Dropped> {
        let drep = Drep {
            local_comm_id: dreq.remote_comm_id,
            remote_comm_id: dreq.local_comm_id,
            private_data: [0; RTU_PRIVATE_DATA_LEN],
        };
        let answer = CmMad::new(hdr.tid, CmMsg::Drep(drep));
        let Ok(i) = self.named(dreq.remote_comm_id, dreq.local_comm_id) else {
            // cm.c `cm_dreq_handler`: a DREQ for no connection is answered all the same
            // (`cm_issue_drep`), so the peer's disconnect completes.
            let _ = send(t, from, &answer);
            return Err(Dropped::UnknownConn);
        };
        let c = *self.conn(i);
        // cm.c `cm_dreq_handler`: the DREQ must name our QP.
        if c.qpn != Some(dreq.remote_qpn_eecn) {
            return Err(Dropped::WrongState);
        }
        match c.state {
            ConnState::RepSent
            | ConnState::MraRepRcvd
            | ConnState::Established
            | ConnState::DreqSent => {
                if c.state != ConnState::DreqSent {
                    // The QP was moved to ERR already when we sent our own DREQ.
                    let _ = t.modify_qp(dreq.remote_qpn_eecn, QpStep::Err);
                }
                let _ = send(t, &c.peer, &answer);
                self.enter_timewait(now, i);
                Ok(Some(CmEvent::Disconnected { id: ConnId(c.id) }))
            }
            ConnState::TimeWait => {
                let _ = send(t, &c.peer, &answer);
                Err(Dropped::WrongState)
            }
            ConnState::ReqRcvd
            | ConnState::MraReqSent
            | ConnState::ReqSent
            | ConnState::MraReqRcvd => Err(Dropped::WrongState),
        }
    }

    fn on_drep(&mut self, now: u64, drep: &Drep) -> Result<Option<CmEvent>, Dropped> {
        let i = self.named(drep.remote_comm_id, drep.local_comm_id)?;
        if self.conn(i).state != ConnState::DreqSent {
            return Err(Dropped::WrongState);
        }
        self.enter_timewait(now, i);
        Ok(Some(CmEvent::Disconnected {
            id: ConnId(self.conn(i).id),
        }))
    }

    /// A REJ of our REQ or REP, the peer giving up on its REQ, or ending a connection (cm.c
    /// `cm_rej_handler`, `cm_acquire_rejected_id`: a REJ of our REQ is found by our ID alone,
    /// the peer's may be 0 or its own).
    fn on_rej<T: CmTransport>(
        &mut self,
        now: u64,
        rej: &Rej,
        t: &mut T,
    ) -> Result<Option<CmEvent>, Dropped> {
        let i = match timeout_guid(rej) {
            // A REJ Timeout names the sender's CA GUID in its ARI and may not know our ID:
            // found by the peer's ID and GUID (cm.c `cm_acquire_rejected_id`).
            Some(guid) => self.conns.iter().position(|c| {
                c.is_some_and(|c| c.remote_id == rej.local_comm_id && c.remote_guid == guid)
            }),
            None => self.slot(rej.remote_comm_id),
        };
        let i = i.ok_or(Dropped::UnknownConn)?;
        let c = *self.conn(i);
        let ours_unanswered = matches!(c.state, ConnState::ReqSent | ConnState::MraReqRcvd);
        let connected = matches!(c.state, ConnState::Established | ConnState::DreqSent);
        // The peer's ID must match, but a REJ of a REQ not answered may carry 0 (the REJ of a
        // REQ not MRAed, the timeout REJ); a connection's REJ names both.
        let zero_ok = !connected && rej.local_comm_id == 0;
        if !ours_unanswered && rej.local_comm_id != c.remote_id && !zero_ok {
            return Err(Dropped::UnknownConn);
        }
        if c.state == ConnState::TimeWait {
            return Err(Dropped::WrongState);
        }
        if let Some(qpn) = c.qpn.filter(|_| c.state != ConnState::DreqSent) {
            // cma.c `cma_ib_handler` on `IB_CM_REJ_RECEIVED`: `cma_modify_qp_err` (after our
            // DREQ the QP is in ERR already).
            let _ = t.modify_qp(qpn, QpStep::Err);
        }
        // cm.c `cm_rej_handler`: a connection, or IDs the peer calls stale, wait out
        // TIMEWAIT; anything else is gone.
        if connected || rej.reason == rej_reason::STALE_CONN {
            self.enter_timewait(now, i);
        } else {
            self.conns[i] = None;
        }
        let id = ConnId(c.id);
        if c.state == ConnState::DreqSent {
            // Our disconnect ends as it would with the DREP.
            return Ok(Some(CmEvent::Disconnected { id }));
        }
        Ok(Some(CmEvent::Rejected {
            id,
            reason: rej.reason,
            private_data: rej.private_data,
        }))
    }

    /// The peer needs time before its REP (our REQ) or its RTU (our REP): wait its service
    /// timeout plus the path's ACK timeout (cm.c `cm_mra_handler`, `cm_acquire_mraed_id`: an
    /// MRA of our REQ is found by our ID alone).
    fn on_mra(&mut self, now: u64, mra: &Mra) -> Result<Option<CmEvent>, Dropped> {
        let i = match mra.message_mraed {
            msg_response::REQ => self.slot(mra.remote_comm_id).ok_or(Dropped::UnknownConn)?,
            _ => self.named(mra.remote_comm_id, mra.local_comm_id)?,
        };
        let c = self.conn_mut(i);
        c.state = match (mra.message_mraed, c.state) {
            (msg_response::REQ, ConnState::ReqSent) => ConnState::MraReqRcvd,
            (msg_response::REP, ConnState::RepSent) => ConnState::MraRepRcvd,
            _ => return Err(Dropped::WrongState),
        };
        c.retry_ns = super::iba_time_ns(mra.service_timeout) + c.timewait_ns();
        c.deadline = Some(now.saturating_add(c.retry_ns));
        Ok(None)
    }

    /// TIMEWAIT for the path's ACK timeout (cm.c `cm_enter_timewait`).
    pub(super) fn enter_timewait(&mut self, now: u64, i: usize) {
        let c = self.conn_mut(i);
        c.state = ConnState::TimeWait;
        c.deadline = Some(now.saturating_add(c.timewait_ns()));
    }

    /// Runs the timers due at `now`: REQ, REP, DREQ and SIDR_REQ retransmissions, their
    /// give-up, the end of TIMEWAIT. Returns at the first event; call again until `None`.
    pub fn poll<T: CmTransport>(&mut self, now: u64, t: &mut T) -> Option<CmEvent> {
        while let Some(i) = self
            .conns
            .iter()
            .position(|c| c.is_some_and(|c| c.deadline.is_some_and(|d| d <= now)))
        {
            if let Some(ev) = self.expire(now, i, t) {
                return Some(ev);
            }
        }
        self.expire_sidr(now, t)
    }

    fn expire<T: CmTransport>(&mut self, now: u64, i: usize, t: &mut T) -> Option<CmEvent> {
        let c = *self.conn(i);
        let id = ConnId(c.id);
        match c.state {
            ConnState::ReqSent
            | ConnState::MraReqRcvd
            | ConnState::RepSent
            | ConnState::MraRepRcvd
            | ConnState::DreqSent
                if c.retries_left > 0 =>
            {
                t.send_mad(&c.peer, &c.last);
                self.counters.retransmits += 1;
                let c = self.conn_mut(i);
                c.retries_left -= 1;
                c.deadline = Some(now.saturating_add(c.retry_ns));
                None
            }
            ConnState::ReqSent | ConnState::MraReqRcvd => {
                // cm.c `cm_process_send_error`: the REQ went unanswered, back to idle (no REJ
                // in Linux); cma.c `cma_ib_handler`: `RDMA_CM_EVENT_UNREACHABLE`.
                if let Some(qpn) = c.qpn {
                    let _ = t.modify_qp(qpn, QpStep::Err);
                }
                self.conns[i] = None;
                Some(CmEvent::Unreachable { id })
            }
            ConnState::RepSent | ConnState::MraRepRcvd => {
                // cm.c `cm_process_send_error`: the REP went unanswered; IBTA: REJ Timeout.
                let rej = rej_for(
                    c.remote_id,
                    c.id,
                    msg_response::REP,
                    rej_reason::TIMEOUT,
                    [0; REJ_PRIVATE_DATA_LEN],
                );
                let _ = send(t, &c.peer, &CmMad::new(c.tid, CmMsg::Rej(rej)));
                self.counters.rej_sent += 1;
                if let Some(qpn) = c.qpn {
                    let _ = t.modify_qp(qpn, QpStep::Err);
                }
                self.conns[i] = None;
                Some(CmEvent::Unreachable { id })
            }
            ConnState::DreqSent => {
                // cm.c `cm_process_send_error`: DREQ unanswered → TIMEWAIT.
                self.enter_timewait(now, i);
                Some(CmEvent::Disconnected { id })
            }
            ConnState::TimeWait => {
                self.conns[i] = None;
                if c.quiet {
                    return None;
                }
                Some(CmEvent::TimewaitExit {
                    id,
                    qpn: c.qpn.unwrap_or(0),
                })
            }
            ConnState::ReqRcvd | ConnState::MraReqSent | ConnState::Established => {
                self.conn_mut(i).deadline = None;
                None
            }
        }
    }
}

/// The CA GUID a REJ Timeout carries in its ARI (cm.c `cm_destroy_id` puts the node GUID
/// there), if it does.
fn timeout_guid(rej: &Rej) -> Option<u64> {
    if rej.reason != rej_reason::TIMEOUT || rej.reject_info_length < 8 {
        return None;
    }
    let mut guid = [0u8; 8];
    guid.copy_from_slice(&rej.ari[..8]);
    Some(u64::from_be_bytes(guid))
}
