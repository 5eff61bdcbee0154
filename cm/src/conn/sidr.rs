//! Service ID resolution for UD services (`RDMA_PS_UDP`, udaddy): a SIDR_REQ for a listened
//! service becomes a [`CmEvent::SidrRequest`]; the application answers with the QPN and Q_Key
//! of its UD QP ([`Cm::sidr_reply`]). No connection is kept (cm.c `cm_sidr_req_handler`,
//! `ib_send_cm_sidr_rep`: the ID goes back to idle after the SIDR_REP).

use super::{send, CallError, Cm, CmEvent, CmTransport, Dropped, Peer};
use crate::mad::MadHdr;
use crate::msg::{private_data, sidr_status, CmMad, CmMsg, SidrRep, SidrReq, SIDR_REP_INFO_LEN};
use crate::rdma_cm::CmaHdr;

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
        if self.listener(req.service_id).is_none() {
            // cm.c `cm_sidr_req_handler`: no listener → SIDR_REP status Unsupported.
            let _ = self.sidr_reply(&ticket, sidr_status::UNSUPPORTED, 0, 0, &[], t);
            return Err(Dropped::Rejected(u16::from(sidr_status::UNSUPPORTED)));
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
