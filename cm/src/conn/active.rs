//! The active side (rdma_cm's `rdma_connect` role): the REQ, its retries, and the REP that
//! moves our QP to RTS and is answered with the RTU (Linux `drivers/infiniband/core/cm.c`
//! `ib_send_cm_req`, `cm_format_req`, `cm_rep_handler`, `cm_dup_rep_handler`,
//! `ib_send_cm_rtu`; `drivers/infiniband/core/cma.c` `cma_connect_ib`, `cma_rep_recv`). The
//! REJ, MRA, DREQ and timer rules both roles share are in `handlers`.

use super::{
    ack_timeout, own_tid, qp_steps, rej_for, Agreed, CallError, Cm, CmEvent, CmTransport, Conn,
    ConnId, ConnState, Connect, Dropped, Peer, QpStep, Role,
};
use crate::mad::MAD_LEN;
use crate::msg::{
    msg_response, private_data, rej_reason, transport, CmMad, CmMsg, Rep, Req, ReqPath, Rtu,
    REJ_PRIVATE_DATA_LEN, RTU_PRIVATE_DATA_LEN,
};

/// The LID a REQ names for a path that leaves the subnet (cm.c `cm_format_req`:
/// `IB_LID_PERMISSIVE`; RoCE paths always do, their hop limit being above 1).
const LID_PERMISSIVE: u16 = 0xffff;

impl<const N: usize> Cm<N> {
    /// Connects QP `c.qpn` (in RESET) to the service `c.service_id` at `to` (`rdma_connect`):
    /// sends the REQ and waits for the REP, retrying the REQ `c.max_cm_retries` times. The
    /// REP moves the QP through INIT, RTR and RTS and is answered with the RTU; then
    /// [`CmEvent::Established`] carries the REP's private data. [`CmEvent::Rejected`],
    /// [`CmEvent::Unreachable`] or [`CmEvent::ConnectError`] end it otherwise.
    ///
    /// ```
    /// use rdma_cm::conn::*;
    /// use rdma_cm::rdma_cm::*;
    /// # struct Nic;
    /// # impl CmTransport for Nic {
    /// #     type QpError = ();
    /// #     fn send_mad(&mut self, _: &Peer, _: &[u8; rdma_cm::MAD_LEN]) {}
    /// #     fn modify_qp(&mut self, _: u32, _: QpStep) -> Result<(), ()> { Ok(()) }
    /// # }
    /// # let cfg = CmConfig { local_ca_guid: 2, ack_delay: 15, max_responder_resources: 16,
    /// #     max_initiator_depth: 16, tid_hi: 1, comm_id_seed: 7 };
    /// let mut cm = Cm::<64>::new(cfg);
    /// // rdma_cm's header: our port, our address, the peer's (cma.c `cma_format_hdr`).
    /// let (src_port, dst_port) = (49743, 7174);
    /// let mut hdr = [0u8; CMA_HDR_LEN];
    /// CmaHdr { src_port, src: CmaAddr::V4([10, 0, 0, 2]), dst: CmaAddr::V4([10, 0, 0, 1]) }
    ///     .encode(&mut hdr);
    /// let gid = |ip: [u8; 4]| [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, ip[0], ip[1], ip[2], ip[3]];
    /// let to = Peer { gid: gid([10, 0, 0, 1]), qpn: 1 };
    /// let c = Connect {
    ///     service_id: PortSpace::Tcp.service_id(dst_port),
    ///     qpn: 0x11, // a fresh RC QP in RESET
    ///     starting_psn: 0x31_a2d2,
    ///     local_gid: gid([10, 0, 0, 2]),
    ///     remote_gid: to.gid,
    ///     flow_label: roce_flow_label(src_port, dst_port),
    ///     hop_limit: 64,
    ///     traffic_class: 0,
    ///     path_mtu: 3, // 1024
    ///     pkey: 0xffff,
    ///     responder_resources: 1,
    ///     initiator_depth: 1,
    ///     retry_count: 7,
    ///     rnr_retry_count: 7,
    ///     // The device's ACK delay and RoCE's packet life time (cma.c
    ///     // `CMA_IBOE_PACKET_LIFETIME`, 18 in Linux 6.1).
    ///     local_ack_timeout: ack_timeout(15, 18),
    ///     remote_cm_response_timeout: CM_RESPONSE_TIMEOUT,
    ///     local_cm_response_timeout: CM_RESPONSE_TIMEOUT,
    ///     max_cm_retries: MAX_CM_RETRIES,
    ///     srq: false,
    ///     flow_control: false,
    ///     private_data: &hdr,
    /// };
    /// let id = cm.connect(0, &to, &c, &mut Nic).unwrap();
    /// assert_eq!(cm.state(id), Some(ConnState::ReqSent));
    /// // Then feed every MAD from QP 1 to `cm.on_mad` and run `cm.poll` by
    /// // `cm.next_deadline()`: `CmEvent::Established { id, private_data }` when the REP came.
    /// ```
    pub fn connect<T: CmTransport>(
        &mut self,
        now: u64,
        to: &Peer,
        c: &Connect<'_>,
        t: &mut T,
    ) -> Result<ConnId, CallError<T::QpError>> {
        let slot = self.conns.iter().position(|c| c.is_none());
        let slot = slot.ok_or(CallError::Full)?;
        let id = self.new_id();
        let req = self.format_req(id, c).map_err(CallError::Encode)?;
        let tid = own_tid(self.cfg.tid_hi, id);
        let bytes = CmMad::new(tid, CmMsg::Req(req))
            .to_bytes()
            .map_err(CallError::Encode)?;
        t.send_mad(to, &bytes);
        let mut conn = Conn {
            id,
            role: Role::Active,
            remote_id: 0,
            remote_guid: 0,
            tid,
            peer: *to,
            service_id: c.service_id,
            state: ConnState::ReqSent,
            req,
            qpn: Some(c.qpn),
            remote_qpn: 0,
            // cm.c `cm_init_av_by_path`: packet life time + 1 until the REP.
            ack_timeout: c.local_ack_timeout,
            last: bytes,
            deadline: None,
            retries_left: 0,
            retry_ns: 0,
            quiet: false,
        };
        conn.start_wait(now);
        self.conns[slot] = Some(conn);
        Ok(ConnId(id))
    }

    /// Our REQ (cm.c `cm_format_req` with what cma.c `cma_connect_ib` and
    /// `cma_resolve_iboe_route` put in the parameters and the path).
    fn format_req(&self, id: u32, c: &Connect<'_>) -> Result<Req, crate::CmError> {
        let subnet_local = c.hop_limit <= 1;
        // A subnet-local path names the LIDs of the path record, 0 on RoCE
        // (cma.c `cma_resolve_iboe_route`).
        let lid = if subnet_local { 0 } else { LID_PERMISSIVE };
        let primary = ReqPath {
            local_lid: lid,
            remote_lid: lid,
            local_gid: c.local_gid,
            remote_gid: c.remote_gid,
            flow_label: c.flow_label,
            // `IB_RATE_PORT_CURRENT` (cma.c `cma_resolve_iboe_route`).
            packet_rate: 0,
            traffic_class: c.traffic_class,
            hop_limit: c.hop_limit,
            // RoCE: the SL of the traffic class on an untagged port, 0 (cma.c
            // `iboe_tos_to_sl`).
            sl: 0,
            subnet_local,
            local_ack_timeout: c.local_ack_timeout,
        };
        Ok(Req {
            local_comm_id: id,
            // No ECE.
            vendor_id: 0,
            service_id: c.service_id,
            local_ca_guid: self.cfg.local_ca_guid,
            local_qkey: 0,
            local_qpn: c.qpn,
            responder_resources: c.responder_resources,
            local_eecn: 0,
            initiator_depth: c.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: c.remote_cm_response_timeout,
            transport_service_type: transport::RC,
            end_to_end_flow_control: c.flow_control,
            starting_psn: c.starting_psn,
            local_cm_response_timeout: c.local_cm_response_timeout,
            retry_count: c.retry_count,
            pkey: c.pkey,
            path_mtu: c.path_mtu,
            rdc_exists: false,
            rnr_retry_count: c.rnr_retry_count,
            max_cm_retries: c.max_cm_retries,
            srq: c.srq,
            extended_transport_type: 0,
            primary,
            alternate: ReqPath::default(),
            sap_supported: false,
            private_data: private_data(c.private_data)?,
        })
    }

    /// The REP to our REQ (cm.c `cm_rep_handler`, then cma.c `cma_rep_recv`: RTR, RTS, RTU).
    /// A REP again once established means our RTU was lost: it is sent again (cm.c
    /// `cm_dup_rep_handler`).
    pub(super) fn on_rep<T: CmTransport>(
        &mut self,
        rep: &Rep,
        t: &mut T,
    ) -> Result<Option<CmEvent>, Dropped> {
        let i = self.slot(rep.remote_comm_id).ok_or(Dropped::UnknownConn)?;
        let c = *self.conn(i);
        match c.state {
            ConnState::ReqSent | ConnState::MraReqRcvd if c.role == Role::Active => {}
            ConnState::Established
                if c.role == Role::Active && c.remote_id == rep.local_comm_id =>
            {
                t.send_mad(&c.peer, &c.last);
                return Err(Dropped::DuplicateRep);
            }
            _ => return Err(Dropped::WrongState),
        }
        let id = ConnId(c.id);
        let Some(qpn) = c.qpn else {
            return Err(Dropped::WrongState);
        };
        let timeout = ack_timeout(
            rep.target_ack_delay,
            c.req.primary.local_ack_timeout.saturating_sub(1),
        );
        // What cm.c `cm_rep_handler` takes from the REP: the peer's QPN and first PSN, its
        // RNR retry count, the resources crossed over (never more than our REQ offered), the
        // ACK timeout from its Target ACK Delay.
        let agreed = Agreed {
            dest_qpn: rep.local_qpn,
            rq_psn: c.req.starting_psn,
            sq_psn: rep.starting_psn,
            max_dest_rd_atomic: rep.initiator_depth.min(c.req.responder_resources),
            max_rd_atomic: rep.responder_resources.min(c.req.initiator_depth),
            timeout,
            rnr_retry: rep.rnr_retry_count,
        };
        let moved = qp_steps(&c.req, Role::Active, agreed)
            .into_iter()
            .try_for_each(|s| t.modify_qp(qpn, s));
        if moved.is_err() {
            // cma.c `cma_rep_recv`: QP to ERR and REJ Consumer Defined of the REP; cm.c
            // `cm_send_rej_locked` from `IB_CM_REP_RCVD`: back to idle.
            let _ = t.modify_qp(qpn, QpStep::Err);
            let rej = rej_for(
                rep.local_comm_id,
                c.id,
                msg_response::REP,
                rej_reason::CONSUMER_DEFINED,
                [0; REJ_PRIVATE_DATA_LEN],
            );
            let _ = super::send(t, &c.peer, &CmMad::new(c.tid, CmMsg::Rej(rej)));
            self.counters.rej_sent += 1;
            self.conns[i] = None;
            return Ok(Some(CmEvent::ConnectError { id }));
        }
        // cm.c `cm_format_rtu`: the REQ's exchange, no private data (cma.c `cma_rep_recv`).
        let rtu = Rtu {
            local_comm_id: c.id,
            remote_comm_id: rep.local_comm_id,
            private_data: [0; RTU_PRIVATE_DATA_LEN],
        };
        let last =
            super::send(t, &c.peer, &CmMad::new(c.tid, CmMsg::Rtu(rtu))).unwrap_or([0; MAD_LEN]);
        let c = self.conn_mut(i);
        c.state = ConnState::Established;
        c.remote_id = rep.local_comm_id;
        c.remote_guid = rep.local_ca_guid;
        c.remote_qpn = rep.local_qpn;
        c.ack_timeout = timeout;
        c.last = last;
        c.deadline = None;
        Ok(Some(CmEvent::Established {
            id,
            private_data: rep.private_data,
        }))
    }
}
