//! UD services (`RDMA_PS_UDP`, udaddy): answering a SIDR_REQ with a UD QP's number and Q_Key
//! (`rdma_accept` / `rdma_reject` on a UD id: cma.c `cma_send_sidr_rep`), the answer to ours
//! ([`RdmaCm::ud_resolve`]), and address handles toward peers.

use mlx5::hal::Hal;
use mlx5::mr::Access;
use mlx5::AddressHandle;
use rdma_cm::conn::SidrTicket;
use rdma_cm::msg::sidr_status;
use rdma_cm::rdma_cm::{CmaAddr, CmaHdr, CMA_HDR_LEN};

use crate::id::{Id, IdState};
use crate::service::{RdmaCm, MAX_CONNS};
use crate::types::{CmError, CmId, Event, Neighbours};

impl<H: Hal> RdmaCm<H> {
    /// A SIDR_REQ for a UD port we listen on: a new id, unless it repeats one still waiting
    /// for our answer (dropped, as cm.c `cm_sidr_req_handler` drops what
    /// `cm_insert_remote_sidr` finds), or [`MAX_CONNS`] are waiting already, when it is
    /// refused (SIDR_REP status Reject) and counted, so a flood of requests cannot grow the
    /// id table.
    pub(crate) fn on_ud_request(
        &mut self,
        now: u64,
        ticket: SidrTicket,
        cma: Option<CmaHdr>,
        private_data: &[u8],
        nb: &mut dyn Neighbours,
    ) -> Option<Event> {
        let remote_ip = match cma.map(|h| h.src) {
            Some(CmaAddr::V4(ip)) => ip,
            _ => crate::gsi::ipv4_of_gid(&ticket.peer.gid)?,
        };
        let waiting = || {
            self.ids.iter().filter_map(|i| match &i.state {
                IdState::UdRequested(t) => Some(t),
                _ => None,
            })
        };
        if waiting().any(|t| t.peer == ticket.peer && t.request_id == ticket.request_id) {
            return None;
        }
        let waiting = waiting().count();
        if waiting >= MAX_CONNS {
            self.ud_refused += 1;
            let _ = self.with_cm(now, nb, |cm, t| {
                cm.sidr_reply(&ticket, sidr_status::REJECT, 0, 0, &[], t)
            });
            return None;
        }
        let handle = self.new_handle();
        self.ids.push(Id {
            handle,
            conn: None,
            qp: None,
            access: Access(0),
            remote_ip,
            state: IdState::UdRequested(ticket),
        });
        let skip = if cma.is_some() { CMA_HDR_LEN } else { 0 };
        Some(Event::UdRequest {
            id: handle,
            remote_ip,
            private_data: private_data[skip..].to_vec(),
        })
    }

    /// Answers a [`Event::UdRequest`] with UD QP `qpn` and its Q_Key `qkey` (rdma_cm's UD
    /// QPs use [`rdma_cm::rdma_cm::UDP_QKEY`]) and `private_data` (at most 136 bytes). The
    /// id stays until [`RdmaCm::destroy_id`].
    pub fn ud_accept(
        &mut self,
        now_ns: u64,
        id: CmId,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
        nb: &mut dyn Neighbours,
    ) -> Result<(), CmError> {
        self.sidr_answer(
            now_ns,
            id,
            sidr_status::SUCCESS,
            qpn,
            qkey,
            private_data,
            nb,
        )
    }

    /// Refuses a [`Event::UdRequest`] (SIDR_REP status Reject, cma.c `cma_send_sidr_rep`
    /// with `IB_SIDR_REJECT`).
    pub fn ud_reject(
        &mut self,
        now_ns: u64,
        id: CmId,
        nb: &mut dyn Neighbours,
    ) -> Result<(), CmError> {
        self.sidr_answer(now_ns, id, sidr_status::REJECT, 0, 0, &[], nb)
    }

    #[allow(clippy::too_many_arguments)]
    fn sidr_answer(
        &mut self,
        now: u64,
        id: CmId,
        status: u8,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
        nb: &mut dyn Neighbours,
    ) -> Result<(), CmError> {
        let max = rdma_cm::msg::SIDR_REP_PRIVATE_DATA_LEN;
        if private_data.len() > max {
            return Err(CmError::PrivateData(max));
        }
        let i = self.index(id)?;
        let IdState::UdRequested(ticket) = self.ids[i].state.clone() else {
            return Err(CmError::WrongState);
        };
        self.with_cm(now, nb, |cm, t| {
            cm.sidr_reply(&ticket, status, qpn, qkey, private_data, t)
        })?;
        self.ids[i].state = IdState::Closed;
        Ok(())
    }

    /// An address handle toward `ip` from our GID, through the MAC the neighbour table holds
    /// for it ([`CmError::AddressUnresolved`] when it holds none: asks by ARP then, so a
    /// later call may succeed). For UD sends to a peer a [`Event::UdRequest`] named.
    pub fn create_ah(
        &self,
        ip: [u8; 4],
        nb: &mut dyn Neighbours,
    ) -> Result<AddressHandle, CmError> {
        let Some(mac) = nb.lookup(ip) else {
            nb.solicit(ip);
            return Err(CmError::AddressUnresolved(ip));
        };
        Ok(self.gsi.ah(mlx5::hca::ipv4_mapped_gid(ip), mac)?)
    }

    /// The event of a SIDR_REP to our SIDR_REQ (cma.c `cma_sidr_rep_handler`: status
    /// Success resolves, any other is `RDMA_CM_EVENT_UNREACHABLE`).
    pub(crate) fn on_sidr_reply(
        &mut self,
        i: usize,
        status: u8,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
        nb: &mut dyn Neighbours,
    ) -> Event {
        let e = &mut self.ids[i];
        e.state = IdState::Closed;
        e.conn = None;
        let (id, ip) = (e.handle, e.remote_ip);
        if status != sidr_status::SUCCESS {
            return Event::Unreachable { id };
        }
        match self.create_ah(ip, nb) {
            Ok(ah) => Event::UdResolved {
                id,
                qpn,
                qkey,
                ah,
                private_data: private_data.to_vec(),
            },
            Err(_) => Event::AddrError { id },
        }
    }
}
