//! Service ID resolution for UD services (`RDMA_PS_UDP`, udaddy): a SIDR_REQ for a listened
//! service becomes a [`CmEvent::SidrRequest`]; the application answers with the QPN and Q_Key
//! of its UD QP ([`Cm::sidr_reply`]). No connection is kept (cm.c `cm_sidr_req_handler`,
//! `ib_send_cm_sidr_rep`: the ID goes back to idle after the SIDR_REP). Our own SIDR_REQs
//! ([`Cm::sidr_request`]) wait for their SIDR_REP with retries (cm.c `ib_send_cm_sidr_req`,
//! `cm_sidr_rep_handler`).

use super::{
    iba_time_ns, own_tid, send, CallError, Cm, CmEvent, CmTransport, ConnId, Dropped, Peer,
};
use crate::mad::{MadHdr, MAD_LEN};
use crate::msg::{private_data, sidr_status, CmMad, CmMsg, SidrRep, SidrReq, SIDR_REP_INFO_LEN};
use crate::rdma_cm::{CmaHdr, QpType, CM_RESPONSE_TIMEOUT, MAX_CM_RETRIES};

/// RoCE's only P_Key (cma.c `cma_resolve_iboe_route`: the path's `pkey` is 0xffff).
const ROCE_PKEY: u16 = 0xffff;

/// One SIDR_REQ of ours waiting for its answer.
#[derive(Clone, Copy, Debug)]
pub(super) struct SidrPending {
    /// Its RequestID, our handle.
    pub(super) id: u32,
    pub(super) peer: Peer,
    pub(super) mad: [u8; MAD_LEN],
    pub(super) deadline: u64,
    pub(super) retries_left: u8,
}

/// How long a SIDR_REQ waits for its answer (cma.c `cma_resolve_ib_udp`: `timeout_ms` of
/// `CMA_CM_RESPONSE_TIMEOUT`).
const SIDR_WAIT_NS: u64 = iba_time_ns(CM_RESPONSE_TIMEOUT);

/// What answering a SIDR_REQ needs: where it came from and what it asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SidrTicket {
    /// The requester.
    pub peer: Peer,
    /// The SIDR_REQ's transaction ID (the SIDR_REP carries it, cm.c `cm_format_sidr_rep`).
    pub tid: u64,
    /// The SIDR_REQ's RequestID.
    pub request_id: u32,
    /// The service asked for.
    pub service_id: u64,
}

impl<const N: usize> Cm<N> {
    pub(super) fn on_sidr_req<T: CmTransport>(
        &mut self,
        from: &Peer,
        hdr: &MadHdr,
        req: &SidrReq,
        t: &mut T,
    ) -> Result<Option<CmEvent>, Dropped> {
        let ticket = SidrTicket {
            peer: *from,
            tid: hdr.tid,
            request_id: req.request_id,
            service_id: req.service_id,
        };
        let Some(l) = self.listener(req.service_id) else {
            // cm.c `cm_sidr_req_handler`: no listener → SIDR_REP status Unsupported.
            let _ = self.sidr_reply(&ticket, sidr_status::UNSUPPORTED, 0, 0, &[], t);
            return Err(Dropped::Rejected(u16::from(sidr_status::UNSUPPORTED)));
        };
        if l.qp_type != QpType::Ud {
            // A SIDR_REQ for a connected (RC) service: cma.c `cma_ib_check_req_qp_type`
            // fails, cm.c `cm_destroy_id` in SIDR_REQ_RCVD answers SIDR_REP status Reject
            // (`cm_reject_sidr_req`, no QPN, no Q_Key, no data).
            let _ = self.sidr_reply(&ticket, sidr_status::REJECT, 0, 0, &[], t);
            return Err(Dropped::Rejected(u16::from(sidr_status::REJECT)));
        }
        Ok(Some(CmEvent::SidrRequest {
            ticket,
            cma: CmaHdr::decode(&req.private_data).ok(),
            private_data: req.private_data,
        }))
    }

    /// Answers a SIDR_REQ (`rdma_accept` / `rdma_reject` on a UD ID): `status`
    /// ([`sidr_status`]), the UD QP's number and Q_Key (rdma_cm's `RDMA_PS_UDP` Q_Key is
    /// [`crate::rdma_cm::UDP_QKEY`]), private data (at most 136 bytes).
    pub fn sidr_reply<T: CmTransport>(
        &mut self,
        ticket: &SidrTicket,
        status: u8,
        qpn: u32,
        qkey: u32,
        private: &[u8],
        t: &mut T,
    ) -> Result<(), CallError<T::QpError>> {
        let rep = SidrRep {
            request_id: ticket.request_id,
            status,
            info_length: 0,
            vendor_id: 0,
            qpn,
            service_id: ticket.service_id,
            qkey,
            info: [0; SIDR_REP_INFO_LEN],
            private_data: private_data(private).map_err(CallError::Encode)?,
        };
        send(
            t,
            &ticket.peer,
            &CmMad::new(ticket.tid, CmMsg::SidrRep(rep)),
        )
        .map_err(CallError::Encode)?;
        Ok(())
    }
}

impl<const N: usize> Cm<N> {
    /// Asks `to` for the UD QP of `service_id` (`rdma_resolve_route` + `rdma_connect` on a UD
    /// ID: cma.c `cma_resolve_ib_udp`, cm.c `ib_send_cm_sidr_req`), the rdma_cm header first
    /// in `private` (at most 216 bytes). The SIDR_REQ is sent again every
    /// [`CM_RESPONSE_TIMEOUT`] up to [`MAX_CM_RETRIES`] times; [`CmEvent::SidrReply`] or
    /// [`CmEvent::Unreachable`] ends it.
    pub fn sidr_request<T: CmTransport>(
        &mut self,
        now: u64,
        to: &Peer,
        service_id: u64,
        private: &[u8],
        t: &mut T,
    ) -> Result<ConnId, CallError<T::QpError>> {
        let slot = self.sidr.iter().position(|s| s.is_none());
        let slot = slot.ok_or(CallError::Full)?;
        let pd = private_data(private).map_err(CallError::Encode)?;
        let id = self.new_id();
        // cm.c `cm_format_sidr_req`: RequestID is the local ID, the TID one of ours.
        let req = SidrReq {
            request_id: id,
            pkey: ROCE_PKEY,
            service_id,
            private_data: pd,
        };
        let tid = own_tid(self.cfg.tid_hi, id);
        let mad = send(t, to, &CmMad::new(tid, CmMsg::SidrReq(req))).map_err(CallError::Encode)?;
        self.sidr[slot] = Some(SidrPending {
            id,
            peer: *to,
            mad,
            deadline: now.saturating_add(SIDR_WAIT_NS),
            retries_left: MAX_CM_RETRIES,
        });
        Ok(ConnId(id))
    }

    pub(super) fn sidr_slot(&self, id: u32) -> Option<usize> {
        self.sidr.iter().position(|s| s.is_some_and(|s| s.id == id))
    }

    /// cm.c `cm_sidr_rep_handler`: found by RequestID; the request is done.
    pub(super) fn on_sidr_rep(&mut self, rep: &SidrRep) -> Result<Option<CmEvent>, Dropped> {
        let i = self.sidr_slot(rep.request_id).ok_or(Dropped::UnknownConn)?;
        self.sidr[i] = None;
        Ok(Some(CmEvent::SidrReply {
            id: ConnId(rep.request_id),
            status: rep.status,
            qpn: rep.qpn,
            qkey: rep.qkey,
            private_data: rep.private_data,
        }))
    }

    /// The SIDR_REQs due at `now`: sent again, or given up (cm.c `cm_process_send_error`:
    /// `IB_CM_SIDR_REQ_ERROR`, cma.c `cma_sidr_rep_handler`: unreachable).
    pub(super) fn expire_sidr<T: CmTransport>(&mut self, now: u64, t: &mut T) -> Option<CmEvent> {
        for slot in self.sidr.iter_mut() {
            let Some(s) = slot.as_mut().filter(|s| s.deadline <= now) else {
                continue;
            };
            if s.retries_left == 0 {
                let id = ConnId(s.id);
                *slot = None;
                return Some(CmEvent::Unreachable { id });
            }
            t.send_mad(&s.peer, &s.mad);
            s.retries_left -= 1;
            s.deadline = now.saturating_add(SIDR_WAIT_NS);
            self.counters.retransmits += 1;
        }
        None
    }
}
