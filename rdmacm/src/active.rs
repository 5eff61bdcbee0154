//! The active side: `rdma_resolve_addr` + `rdma_resolve_route` + `rdma_connect` in one call
//! ([`RdmaCm::connect`]), and the same resolution for UD services ([`RdmaCm::ud_resolve`]).
//! The peer's MAC comes from the neighbour table, asked for by ARP when missing (Linux
//! `drivers/infiniband/core/addr.c` `rdma_resolve_ip` → `addr_resolve_neigh`, which sends
//! the ARP request and waits for the neighbour entry); then the REQ (SIDR_REQ) goes out.

use mlx5::hal::Hal;
use mlx5::{CompletionQueue, ProtectionDomain};
use rdma_cm::conn::{ack_timeout, Connect, Peer};
use rdma_cm::rdma_cm::{
    roce_flow_label, CmaAddr, CmaHdr, PortSpace, CMA_HDR_LEN, CM_RESPONSE_TIMEOUT, MAX_CM_RETRIES,
};

use crate::arp::Arp;
use crate::id::{Id, IdState, Plan};
use crate::service::RdmaCm;
use crate::types::{CmError, CmId, ConnParam, Event, Neighbours, QpInit, CONNECT_PRIVATE_DATA_MAX};

/// The QP a connecting id gets (`rdma_create_qp` before `rdma_connect`): created by
/// [`RdmaCm::connect`] and moved to INIT, then to RTR and RTS by the REP.
pub struct NewQp<'a, H: Hal> {
    /// Its PD.
    pub pd: &'a ProtectionDomain<H>,
    /// Its send CQ.
    pub send_cq: &'a CompletionQueue<H>,
    /// Its receive CQ.
    pub recv_cq: &'a CompletionQueue<H>,
    /// Sizes and access.
    pub init: QpInit,
}

/// rdma_cm's packet life time on RoCE, `CMA_IBOE_PACKET_LIFETIME` (Linux cma.c; the REQs of
/// the shared rxe captures carry the ACK timeout it gives, 19).
const IBOE_PACKET_LIFETIME: u8 = 18;

/// The first and last port rdma_cm picks a source port from: Linux's default
/// `ip_local_port_range` (cma.c `cma_alloc_any_port` draws from
/// `inet_get_local_port_range`).
const LOCAL_PORTS: (u16, u16) = (32768, 60999);

impl<H: Hal> RdmaCm<H> {
    /// Connects to `port` of `ps` at `dst` (`rdma_resolve_addr`, `rdma_resolve_route`,
    /// `rdma_create_qp` and `rdma_connect` of librdmacm in one): creates the id's QP from
    /// `qp`, in INIT (post its receives through [`RdmaCm::qp`] before polling), sends the REQ
    /// now if `dst`'s MAC is known, else from [`RdmaCm::poll`] once ARP answers.
    /// [`Event::Established`] (with the REP's private data), [`Event::Rejected`],
    /// [`Event::Unreachable`], [`Event::ConnectError`] or [`Event::AddrError`] follow.
    #[allow(clippy::too_many_arguments)]
    pub fn connect(
        &mut self,
        now_ns: u64,
        dst: [u8; 4],
        port: u16,
        ps: PortSpace,
        qp: &NewQp<'_, H>,
        p: &ConnParam<'_>,
        nb: &mut dyn Neighbours,
    ) -> Result<CmId, CmError> {
        if p.private_data.len() > CONNECT_PRIVATE_DATA_MAX {
            return Err(CmError::PrivateData(CONNECT_PRIVATE_DATA_MAX));
        }
        let mut q = qp.pd.create_qp(qp.send_cq, qp.recv_cq, &qp.init.caps)?;
        q.to_init(qp.init.access)?;
        let plan = self.plan(port, ps, p, false);
        let handle = self.new_handle();
        self.ids.push(Id {
            handle,
            conn: None,
            qp: Some(q),
            access: qp.init.access,
            remote_ip: dst,
            state: IdState::Resolving(plan, self.arp_wait(now_ns, dst)),
        });
        self.begin(now_ns, handle, nb)
    }

    /// Resolves UD service `port` at `dst` (`rdma_resolve_addr` + `rdma_resolve_route` on
    /// an `RDMA_PS_UDP` id, whose connect sends a SIDR_REQ: cma.c `cma_resolve_ib_udp`):
    /// [`Event::UdResolved`] brings the service's QPN, Q_Key and an address handle to it;
    /// [`Event::Unreachable`] or [`Event::AddrError`] end it otherwise. `private_data`
    /// follows the rdma_cm header (at most 180 bytes).
    pub fn ud_resolve(
        &mut self,
        now_ns: u64,
        dst: [u8; 4],
        port: u16,
        private_data: &[u8],
        nb: &mut dyn Neighbours,
    ) -> Result<CmId, CmError> {
        let max = rdma_cm::msg::SIDR_REQ_PRIVATE_DATA_LEN - CMA_HDR_LEN;
        if private_data.len() > max {
            return Err(CmError::PrivateData(max));
        }
        let p = ConnParam {
            private_data,
            ..ConnParam::default()
        };
        let plan = self.plan(port, PortSpace::Udp, &p, true);
        let handle = self.new_handle();
        self.ids.push(Id {
            handle,
            conn: None,
            qp: None,
            access: mlx5::mr::Access(0),
            remote_ip: dst,
            state: IdState::Resolving(plan, self.arp_wait(now_ns, dst)),
        });
        self.begin(now_ns, handle, nb)
    }

    fn plan(&self, port: u16, ps: PortSpace, p: &ConnParam<'_>, ud: bool) -> Plan {
        Plan {
            port,
            ps,
            private_data: p.private_data.to_vec(),
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            ud,
        }
    }

    /// The first step of a new connecting id: the REQ now if the MAC is known (an error
    /// takes the id back), else one ARP request.
    fn begin(&mut self, now: u64, handle: CmId, nb: &mut dyn Neighbours) -> Result<CmId, CmError> {
        let i = self.ids.len() - 1;
        let IdState::Resolving(_, wait) = &mut self.ids[i].state else {
            return Err(CmError::WrongState);
        };
        if !matches!(wait.check(now, nb), Arp::Known(_)) {
            // The request is out; `resolve` goes on from `poll`.
            return Ok(handle);
        }
        if let Err(e) = self.start(now, i, nb) {
            let id = self.ids.swap_remove(i);
            if let Some(qp) = id.qp {
                let _ = qp.destroy();
            }
            return Err(e);
        }
        Ok(handle)
    }

    /// Ids waiting for their peer's MAC: the REQ once it is known, [`Event::AddrError`] at
    /// the deadline (cma.c `addr_handler` with an error status).
    pub(crate) fn resolve(&mut self, now: u64, nb: &mut dyn Neighbours) {
        for i in 0..self.ids.len() {
            let IdState::Resolving(_, wait) = &mut self.ids[i].state else {
                continue;
            };
            let ev = match wait.check(now, nb) {
                Arp::Waiting => continue,
                Arp::Known(_) => match self.start(now, i, nb) {
                    Ok(()) => continue,
                    Err(_) => Event::Unreachable {
                        id: self.ids[i].handle,
                    },
                },
                Arp::Expired => Event::AddrError {
                    id: self.ids[i].handle,
                },
            };
            self.ids[i].state = IdState::Closed;
            self.events.push_back(ev);
        }
    }

    /// Sends id `i`'s REQ (or SIDR_REQ) from a fresh rdma_cm source port.
    fn start(&mut self, now: u64, i: usize, nb: &mut dyn Neighbours) -> Result<(), CmError> {
        let IdState::Resolving(plan, _) = self.ids[i].state.clone() else {
            return Err(CmError::WrongState);
        };
        let span = u64::from(LOCAL_PORTS.1 - LOCAL_PORTS.0) + 1;
        let route = Route {
            src: self.cfg.ip,
            dst: self.ids[i].remote_ip,
            src_port: LOCAL_PORTS.0 + (self.random() % span) as u16,
            path_mtu: self.cfg.path_mtu,
            ack_delay: self.ack_delay,
        };
        let (private, n) = cma_private(&route, &plan);
        let to = Peer {
            gid: mlx5::hca::ipv4_mapped_gid(route.dst),
            qpn: mlx5::GSI_QPN,
        };
        let conn = if plan.ud {
            let sid = plan.ps.service_id(plan.port);
            self.with_cm(now, nb, |cm, t| {
                cm.sidr_request(now, &to, sid, &private[..n], t)
            })?
        } else {
            let qpn = self.ids[i].qp.as_ref().ok_or(CmError::NoQp)?.qpn();
            let c = connect_req(&route, &plan, qpn, self.random24(), &private[..n]);
            self.with_cm(now, nb, |cm, t| cm.connect(now, &to, &c, t))?
        };
        let e = &mut self.ids[i];
        e.conn = Some(conn);
        e.state = IdState::Connecting;
        Ok(())
    }
}

/// Where a connection goes, from which rdma_cm port, over which path MTU, and our device's
/// ACK delay.
struct Route {
    src: [u8; 4],
    dst: [u8; 4],
    src_port: u16,
    path_mtu: u8,
    ack_delay: u8,
}

/// The private data of a REQ or SIDR_REQ: the rdma_cm header (cma.c `cma_format_hdr`: our
/// address and source port, the peer's address), then the application's; and its length.
fn cma_private(r: &Route, plan: &Plan) -> ([u8; rdma_cm::msg::SIDR_REQ_PRIVATE_DATA_LEN], usize) {
    let hdr = CmaHdr {
        src_port: r.src_port,
        src: CmaAddr::V4(r.src),
        dst: CmaAddr::V4(r.dst),
    };
    let mut private = [0u8; rdma_cm::msg::SIDR_REQ_PRIVATE_DATA_LEN];
    let mut head = [0u8; CMA_HDR_LEN];
    hdr.encode(&mut head);
    private[..CMA_HDR_LEN].copy_from_slice(&head);
    let n = CMA_HDR_LEN + plan.private_data.len();
    private[CMA_HDR_LEN..n].copy_from_slice(&plan.private_data);
    (private, n)
}

/// What our REQ carries (cma.c `cma_connect_ib` with the path `cma_resolve_iboe_route`
/// makes: hop limit 64, traffic class 0, the flow label of the two ports, P_Key 0xffff;
/// rdma_cm's response timeouts and retries; cm.c `cm_ack_timeout` of our ACK delay and
/// rdma_cm's packet life time).
fn connect_req<'a>(
    r: &Route,
    plan: &Plan,
    qpn: u32,
    starting_psn: u32,
    private_data: &'a [u8],
) -> Connect<'a> {
    Connect {
        service_id: plan.ps.service_id(plan.port),
        qpn,
        starting_psn,
        local_gid: mlx5::hca::ipv4_mapped_gid(r.src),
        remote_gid: mlx5::hca::ipv4_mapped_gid(r.dst),
        flow_label: roce_flow_label(r.src_port, plan.port),
        hop_limit: 64,
        traffic_class: 0,
        path_mtu: r.path_mtu,
        pkey: 0xffff,
        responder_resources: plan.responder_resources,
        initiator_depth: plan.initiator_depth,
        retry_count: plan.retry_count,
        rnr_retry_count: plan.rnr_retry_count,
        local_ack_timeout: ack_timeout(r.ack_delay, IBOE_PACKET_LIFETIME),
        remote_cm_response_timeout: CM_RESPONSE_TIMEOUT,
        local_cm_response_timeout: CM_RESPONSE_TIMEOUT,
        max_cm_retries: MAX_CM_RETRIES,
        srq: false,
        flow_control: false,
        private_data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first NVMe-oF REQ of the shared capture `nvmeof.pcap` (frame 19, rdma_cm over
    /// rxe, ACK delay 15): host 10.0.0.2, rdma_cm port 49743, to 10.0.0.1:4420; the REQ
    /// fields that are not random or the application's.
    #[test]
    fn the_req_is_the_one_linux_sends() {
        let route = Route {
            src: [10, 0, 0, 2],
            dst: [10, 0, 0, 1],
            src_port: 49743,
            path_mtu: 3,
            ack_delay: 15,
        };
        let plan = Plan {
            port: 4420,
            ps: PortSpace::Tcp,
            private_data: alloc::vec![0, 0, 0, 0, 0x20, 0, 0x1f, 0],
            responder_resources: 128,
            initiator_depth: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            ud: false,
        };
        let (private, n) = cma_private(&route, &plan);
        assert_eq!(n, CMA_HDR_LEN + 8);
        assert_eq!(&private[..4], &[0x00, 0x40, 0xc2, 0x4f]);
        assert_eq!(&private[16..20], &[10, 0, 0, 2]);
        assert_eq!(&private[32..36], &[10, 0, 0, 1]);
        assert!(private[4..16]
            .iter()
            .chain(&private[20..32])
            .all(|&b| b == 0));
        assert_eq!(&private[36..44], &[0, 0, 0, 0, 0x20, 0, 0x1f, 0]);
        let c = connect_req(&route, &plan, 0x11, 0x31a2d2, &private[..n]);
        assert_eq!(c.service_id, 0x0000_0000_0106_1144);
        assert_eq!(c.flow_label, 0x798d5);
        assert_eq!(c.local_gid, mlx5::hca::ipv4_mapped_gid([10, 0, 0, 2]));
        assert_eq!(c.remote_gid, mlx5::hca::ipv4_mapped_gid([10, 0, 0, 1]));
        assert_eq!(
            (c.hop_limit, c.traffic_class, c.path_mtu, c.pkey),
            (64, 0, 3, 0xffff)
        );
        assert_eq!(c.local_ack_timeout, 19);
        assert_eq!(
            (
                c.remote_cm_response_timeout,
                c.local_cm_response_timeout,
                c.max_cm_retries
            ),
            (20, 20, 15)
        );
        assert_eq!((c.responder_resources, c.initiator_depth), (128, 0));
        assert_eq!((c.retry_count, c.rnr_retry_count, c.srq), (7, 7, false));
    }
}
