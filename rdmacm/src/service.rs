//! [`RdmaCm`]: the ids, the CM state machine and the GSI service, driven by
//! [`RdmaCm::poll`]; the calls every id shares (listen, QP, accept, reject, disconnect,
//! destroy).

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::vec::Vec;

use mlx5::hal::Hal;
use mlx5::mr::Access;
use mlx5::{CompletionQueue, ProtectionDomain, QueuePair};
use rdma_cm::conn::{self, Accept, CallError, Cm, CmEvent, ConnId};
use rdma_cm::rdma_cm::{CmaAddr, PortSpace, CMA_HDR_LEN};

use crate::arp::{Arp, ArpWait};
use crate::gsi::{Gsi, GsiCounters};
use crate::id::{Deferred, Id, IdState};
use crate::link::Link;
use crate::types::{CmConfig, CmError, CmId, ConnParam, Event, Neighbours, QpInit};

/// Most connections (and connection requests) the CM tracks at once, TIMEWAIT included; and
/// most UD requests waiting for the application's answer.
pub const MAX_CONNS: usize = 32;

/// Most MADs one [`RdmaCm::poll`] takes from the GSI QP, so a flood cannot hold the caller.
pub const POLL_BUDGET: usize = 16;

/// librdmacm over the driver: one GSI QP, the CM state machine, the ids and their QPs.
pub struct RdmaCm<H: Hal> {
    pub(crate) cfg: CmConfig,
    pub(crate) gsi: Gsi<H>,
    pub(crate) cm: Box<Cm<MAX_CONNS>>,
    pub(crate) ids: Vec<Id<H>>,
    /// QPs of destroyed ids whose connection is still in the CM (TIMEWAIT): destroyed once
    /// it is gone, so their QPN is not reused while the peer may still send to it.
    retired: Vec<(ConnId, QueuePair<H>)>,
    pub(crate) events: VecDeque<Event>,
    next_id: u32,
    rng: u64,
    /// The device's `local_ca_ack_delay`.
    pub(crate) ack_delay: u8,
    /// SIDR_REQs refused because [`MAX_CONNS`] were waiting for an answer.
    pub(crate) ud_refused: u64,
}

/// The EUI-64 of a MAC: the CA GUID of a RoCE device (Linux `include/net/addrconf.h`
/// `addrconf_addr_eui48`, which rxe uses for its node GUID: the captures' Local CA GUIDs).
fn eui64(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ])
}

/// A [`CallError`] of a call that moves no QP, widened.
fn widen(e: CallError<()>) -> CmError {
    CmError::Cm(match e {
        CallError::UnknownConn => CallError::UnknownConn,
        CallError::WrongState => CallError::WrongState,
        CallError::Full => CallError::Full,
        CallError::InUse => CallError::InUse,
        CallError::Encode(e) => CallError::Encode(e),
        CallError::Qp(()) => CallError::WrongState,
    })
}

impl<H: Hal> RdmaCm<H> {
    /// Opens the CM on `ctx`: QP 1 in RTS with its receives posted, in a PD of its own
    /// (`_pd` is the application's, kept in the signature librdmacm's shape suggests).
    pub fn new(
        ctx: &mlx5::Context<H>,
        _pd: &ProtectionDomain<H>,
        cfg: &CmConfig,
    ) -> Result<Self, CmError> {
        let gsi = Gsi::new(
            ctx,
            cfg.sgid_index,
            cfg.gsi_recv_slots,
            cfg.gsi_send_slots,
            cfg.resolve_timeout_ns,
        )?;
        let dev = ctx.query_device();
        let sat = |v: u32| u8::try_from(v).unwrap_or(u8::MAX);
        let r = ctx.random_u64();
        let cm_cfg = conn::CmConfig {
            local_ca_guid: eui64(ctx.mac()),
            ack_delay: dev.local_ca_ack_delay,
            max_responder_resources: sat(dev.max_qp_rd_atom),
            max_initiator_depth: sat(dev.max_qp_init_rd_atom),
            tid_hi: (r >> 32) as u32 | 1,
            comm_id_seed: r as u32,
        };
        Ok(RdmaCm {
            cfg: *cfg,
            gsi,
            cm: Box::new(Cm::new(cm_cfg)),
            ids: Vec::new(),
            retired: Vec::new(),
            events: VecDeque::new(),
            next_id: 0,
            rng: ctx.random_u64() | 1,
            ack_delay: dev.local_ca_ack_delay,
            ud_refused: 0,
        })
    }

    /// What the GSI service counted.
    pub fn gsi_counters(&self) -> GsiCounters {
        self.gsi.counters
    }

    /// What the CM state machine counted.
    pub fn cm_counters(&self) -> conn::Counters {
        self.cm.counters
    }

    /// SIDR_REQs refused because [`MAX_CONNS`] UD requests were waiting for an answer.
    pub fn ud_refused(&self) -> u64 {
        self.ud_refused
    }

    /// The GSI QP's number (1).
    pub fn gsi_qpn(&self) -> u32 {
        self.gsi.qpn()
    }

    /// How many ids exist, and how many QPs this CM holds (the ids' and those of destroyed
    /// ids waiting for TIMEWAIT to end). For leak checks.
    pub fn counts(&self) -> (usize, usize) {
        let qps = self.ids.iter().filter(|i| i.qp.is_some()).count() + self.retired.len();
        (self.ids.len(), qps)
    }

    /// 24 random bits (xorshift64*; seeded from the device's random source).
    pub(crate) fn random24(&mut self) -> u32 {
        self.random() as u32 & 0xff_ffff
    }

    pub(crate) fn random(&mut self) -> u64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn new_handle(&mut self) -> CmId {
        self.next_id = self.next_id.wrapping_add(1);
        CmId(self.next_id)
    }

    pub(crate) fn index(&self, id: CmId) -> Result<usize, CmError> {
        self.ids
            .iter()
            .position(|i| i.handle == id)
            .ok_or(CmError::NoSuchId)
    }

    /// The index and connection of `id` when it is in `state` with a connection.
    fn conn_in(&self, id: CmId, state: &IdState) -> Result<(usize, ConnId), CmError> {
        let i = self.index(id)?;
        let e = &self.ids[i];
        match e.conn {
            Some(c) if e.state == *state => Ok((i, c)),
            _ => Err(CmError::WrongState),
        }
    }

    fn by_conn(&mut self, conn: ConnId) -> Option<&mut Id<H>> {
        self.ids.iter_mut().find(|i| i.conn == Some(conn))
    }

    /// The id of `conn`, now over: closed, and no longer naming the connection once the CM
    /// has let go of it (its number may come back for another).
    fn close(&mut self, conn: ConnId) -> Option<CmId> {
        let held = self.cm.state(conn).is_some();
        let e = self.by_conn(conn)?;
        e.state = IdState::Closed;
        if !held {
            e.conn = None;
        }
        Some(e.handle)
    }

    /// Runs `f` with the CM and a transport over the GSI service, the ids and `nb`.
    pub(crate) fn with_cm<T>(
        &mut self,
        now: u64,
        nb: &mut dyn Neighbours,
        f: impl FnOnce(&mut Cm<MAX_CONNS>, &mut Link<'_, H>) -> T,
    ) -> T {
        let mut link = Link {
            gsi: &mut self.gsi,
            ids: &mut self.ids,
            nb,
            now,
            sgid_index: self.cfg.sgid_index,
        };
        f(&mut self.cm, &mut link)
    }

    /// Listens on `port` of `ps` (`rdma_bind_addr` + `rdma_listen`): REQs (SIDR_REQs for
    /// [`PortSpace::Udp`]) for it become [`Event::ConnectRequest`] ([`Event::UdRequest`]);
    /// beyond `backlog` unanswered ones, REQs are rejected.
    pub fn listen(&mut self, ps: PortSpace, port: u16, backlog: usize) -> Result<(), CmError> {
        if backlog == 0 || backlog > self.cfg.backlog_max {
            return Err(CmError::Backlog(backlog));
        }
        self.cm.listen(ps.service_id(port), backlog).map_err(widen)
    }

    /// Stops listening on `port` of `ps`; ids already made stay.
    pub fn unlisten(&mut self, ps: PortSpace, port: u16) {
        self.cm.unlisten(ps.service_id(port));
    }

    /// Gives a connection request's id its RC QP (`rdma_create_qp`), moved to INIT at once
    /// as librdmacm does (`ucma_init_conn_qp`) so receives can be posted
    /// ([`RdmaCm::qp`]); [`RdmaCm::accept`] moves it on.
    pub fn create_qp(
        &mut self,
        id: CmId,
        pd: &ProtectionDomain<H>,
        send_cq: &CompletionQueue<H>,
        recv_cq: &CompletionQueue<H>,
        init: &QpInit,
    ) -> Result<(), CmError> {
        let i = self.index(id)?;
        let e = &self.ids[i];
        if e.qp.is_some() || e.state != IdState::Requested {
            return Err(CmError::WrongState);
        }
        let mut qp = pd.create_qp(send_cq, recv_cq, &init.caps)?;
        qp.to_init(init.access)?;
        let e = &mut self.ids[i];
        e.qp = Some(qp);
        e.access = init.access;
        Ok(())
    }

    /// The id's QP, to post on and poll for.
    pub fn qp(&mut self, id: CmId) -> Option<&mut QueuePair<H>> {
        self.ids
            .iter_mut()
            .find(|i| i.handle == id)
            .and_then(|i| i.qp.as_mut())
    }

    /// The id's peer address.
    pub fn remote_ip(&self, id: CmId) -> Option<[u8; 4]> {
        self.ids
            .iter()
            .find(|i| i.handle == id)
            .map(|i| i.remote_ip)
    }

    /// Accepts a connection request (`rdma_accept`): its QP goes through INIT, RTR and RTS
    /// with the REQ's path, then the REP goes out; [`Event::Established`] follows the RTU.
    /// The REP's Starting PSN is random (cma.c `cma_accept_ib`: the id's `seq_num`). When the
    /// peer's MAC is not in the neighbour table (a peer that never ARPed us), it is asked
    /// for and the accept finishes in [`RdmaCm::poll`]; [`Event::AddrError`] (and a REJ) if
    /// it never comes, [`Event::ConnectError`] (and a REJ) if the accept then fails.
    pub fn accept(
        &mut self,
        now_ns: u64,
        id: CmId,
        p: &ConnParam<'_>,
        nb: &mut dyn Neighbours,
    ) -> Result<(), CmError> {
        if p.private_data.len() > rdma_cm::msg::REP_PRIVATE_DATA_LEN {
            return Err(CmError::PrivateData(rdma_cm::msg::REP_PRIVATE_DATA_LEN));
        }
        let (i, conn) = self.conn_in(id, &IdState::Requested)?;
        if self.ids[i].qp.is_none() {
            return Err(CmError::NoQp);
        }
        let d = Deferred {
            private_data: p.private_data.to_vec(),
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            rnr_retry_count: p.rnr_retry_count,
        };
        let mut wait = self.arp_wait(now_ns, self.ids[i].remote_ip);
        if matches!(wait.check(now_ns, nb), Arp::Known(_)) {
            return self.accept_now(now_ns, i, conn, &d, nb);
        }
        self.ids[i].state = IdState::AcceptPending(d, wait);
        Ok(())
    }

    /// The accept of id `i` (connection `conn`), the peer's MAC known.
    fn accept_now(
        &mut self,
        now: u64,
        i: usize,
        conn: ConnId,
        d: &Deferred,
        nb: &mut dyn Neighbours,
    ) -> Result<(), CmError> {
        let qpn = self.ids[i].qp.as_ref().ok_or(CmError::NoQp)?.qpn();
        let a = Accept {
            qpn,
            starting_psn: self.random24(),
            responder_resources: d.responder_resources,
            initiator_depth: d.initiator_depth,
            flow_control: false,
            rnr_retry_count: d.rnr_retry_count,
            srq: false,
            private_data: &d.private_data,
        };
        self.with_cm(now, nb, |cm, t| cm.accept(now, conn, &a, t))?;
        self.ids[i].state = IdState::Accepting;
        Ok(())
    }

    /// Accepts waiting for the peer's MAC: done once it is known; at the deadline, or when
    /// the accept fails then, the request is rejected.
    pub(crate) fn finish_accepts(&mut self, now: u64, nb: &mut dyn Neighbours) {
        for i in 0..self.ids.len() {
            let e = &mut self.ids[i];
            let (id, conn) = (e.handle, e.conn);
            let (IdState::AcceptPending(d, wait), Some(conn)) = (&mut e.state, conn) else {
                continue;
            };
            let ev = match wait.check(now, nb) {
                Arp::Waiting => continue,
                Arp::Known(_) => {
                    let d = d.clone();
                    match self.accept_now(now, i, conn, &d, nb) {
                        Ok(()) => continue,
                        Err(_) => Event::ConnectError { id },
                    }
                }
                Arp::Expired => Event::AddrError { id },
            };
            let _ = self.with_cm(now, nb, |cm, t| cm.reject(conn, &[], t));
            self.ids[i].state = IdState::Closed;
            self.ids[i].conn = None;
            self.events.push_back(ev);
        }
    }

    /// A wait for `ip`'s MAC of the configured length.
    pub(crate) fn arp_wait(&self, now: u64, ip: [u8; 4]) -> ArpWait {
        ArpWait::new(now, ip, self.cfg.resolve_timeout_ns)
    }

    /// Rejects a connection request (`rdma_reject`): REJ Consumer Defined with
    /// `private_data` (at most 148 bytes). The id stays until [`RdmaCm::destroy_id`].
    pub fn reject(
        &mut self,
        now_ns: u64,
        id: CmId,
        private_data: &[u8],
        nb: &mut dyn Neighbours,
    ) -> Result<(), CmError> {
        if private_data.len() > rdma_cm::msg::REJ_PRIVATE_DATA_LEN {
            return Err(CmError::PrivateData(rdma_cm::msg::REJ_PRIVATE_DATA_LEN));
        }
        let (i, conn) = self.conn_in(id, &IdState::Requested)?;
        self.with_cm(now_ns, nb, |cm, t| cm.reject(conn, private_data, t))?;
        let e = &mut self.ids[i];
        e.state = IdState::Closed;
        e.conn = None;
        Ok(())
    }

    /// Tells the CM the first packet arrived on an accepted id's QP before the RTU (librdmacm
    /// `rdma_notify` with `IBV_EVENT_COMM_EST`, cm.c `ib_cm_notify` → `cm_establish`): call
    /// it on a completion of the QP while [`Event::Established`] has not come; it comes
    /// from the next [`RdmaCm::poll`] (a late RTU is then dropped). Any other time it does
    /// nothing.
    pub fn notify_established(&mut self, id: CmId) -> Result<(), CmError> {
        let (i, conn) = self.conn_in(id, &IdState::Accepting)?;
        if let Some(CmEvent::Established { .. }) = self.cm.comm_established(conn) {
            self.ids[i].state = IdState::Established;
            self.events.push_back(Event::Established {
                id,
                private_data: Vec::new(),
            });
        }
        Ok(())
    }

    /// Disconnects (`rdma_disconnect`): the QP goes to ERR, a DREQ goes out;
    /// [`Event::Disconnected`] follows the DREP (or the DREQ's last retry), then
    /// [`Event::TimewaitExit`].
    pub fn disconnect(
        &mut self,
        now_ns: u64,
        id: CmId,
        nb: &mut dyn Neighbours,
    ) -> Result<(), CmError> {
        let (_, conn) = self.conn_in(id, &IdState::Established)?;
        self.with_cm(now_ns, nb, |cm, t| cm.disconnect(now_ns, conn, t))?;
        Ok(())
    }

    /// Destroys an id (`rdma_destroy_id`): an unanswered request is rejected, an established
    /// connection disconnected; its QP goes to ERR, and is destroyed now, or once the CM lets
    /// go of the connection when it still holds it (TIMEWAIT, or the retries of a REQ still
    /// unanswered: the CM has no way to cancel one), so its number is not reused while the
    /// peer may still send to it.
    pub fn destroy_id(
        &mut self,
        now_ns: u64,
        id: CmId,
        nb: &mut dyn Neighbours,
    ) -> Result<(), CmError> {
        let i = self.index(id)?;
        let conn = self.ids[i].conn;
        if let Some(c) = conn {
            // The CM moves the QP to ERR and tells the peer as cm.c `cm_destroy_id` does in
            // the connection's state; a connection it no longer holds is no error here.
            let _ = self.with_cm(now_ns, nb, |cm, t| cm.destroy(now_ns, c, t));
        }
        if let IdState::UdRequested(ticket) = self.ids[i].state {
            // cm.c `cm_destroy_id` in IB_CM_SIDR_REQ_RCVD: `cm_reject_sidr_req`, status
            // Reject.
            let _ = self.with_cm(now_ns, nb, |cm, t| {
                cm.sidr_reply(&ticket, rdma_cm::msg::sidr_status::REJECT, 0, 0, &[], t)
            });
        }
        let e = self.ids.swap_remove(i);
        if let Some(mut qp) = e.qp {
            let _ = qp.to_err();
            match conn.filter(|&c| self.cm.state(c).is_some()) {
                Some(c) => self.retired.push((c, qp)),
                None => {
                    let _ = qp.destroy();
                }
            }
        }
        Ok(())
    }

    /// Destroys the retired QPs whose connection the CM no longer holds.
    fn reap_retired(&mut self) {
        let mut k = 0;
        while k < self.retired.len() {
            if self.cm.state(self.retired[k].0).is_none() {
                let (_, qp) = self.retired.swap_remove(k);
                let _ = qp.destroy();
            } else {
                k += 1;
            }
        }
    }

    /// Runs the CM: MADs received on QP 1, the CM's timers, address resolution of the
    /// connections we start, MADs waiting for a MAC, QPs waiting for TIMEWAIT to end.
    /// Returns the next event; call it again until `None`, and often (it never waits).
    /// `now_ns` is any clock's nanoseconds that never go backwards; `nb` is the IP stack
    /// whose ARP table resolves peers (poll the stack in the same loop).
    pub fn poll(&mut self, now_ns: u64, nb: &mut dyn Neighbours) -> Option<Event> {
        if let Some(e) = self.events.pop_front() {
            return Some(e);
        }
        self.gsi.flush_pending(now_ns, nb);
        self.resolve(now_ns, nb);
        self.finish_accepts(now_ns, nb);
        self.reap_retired();
        if let Some(e) = self.events.pop_front() {
            return Some(e);
        }
        for _ in 0..POLL_BUDGET {
            let Ok(Some((peer, mad))) = self.gsi.recv() else {
                break;
            };
            let r = self.with_cm(now_ns, nb, |cm, t| cm.on_mad(now_ns, &peer, &mad, t));
            if let Ok(Some(ev)) = r {
                if let Some(e) = self.translate(now_ns, ev, nb) {
                    return Some(e);
                }
            }
        }
        loop {
            let ev = self.with_cm(now_ns, nb, |cm, t| cm.poll(now_ns, t))?;
            if let Some(e) = self.translate(now_ns, ev, nb) {
                return Some(e);
            }
        }
    }

    /// The application's event for a CM event, with the id it concerns updated; `None` for
    /// events of ids already destroyed.
    fn translate(&mut self, now: u64, ev: CmEvent, nb: &mut dyn Neighbours) -> Option<Event> {
        match ev {
            CmEvent::ConnectRequest { id, req, cma } => self.on_request(now, id, &req, cma, nb),
            CmEvent::SidrRequest {
                ticket,
                cma,
                private_data,
            } => self.on_ud_request(now, ticket, cma, &private_data, nb),
            CmEvent::Established { id, private_data } => {
                let e = self.by_conn(id)?;
                // The active side hears the REP's private data; the passive side's RTU
                // carries none (cma.c `cma_rep_recv` sends it without).
                let active = e.state == IdState::Connecting;
                e.state = IdState::Established;
                Some(Event::Established {
                    id: e.handle,
                    private_data: if active {
                        private_data.to_vec()
                    } else {
                        Vec::new()
                    },
                })
            }
            CmEvent::Rejected {
                id,
                reason,
                private_data,
            } => Some(Event::Rejected {
                id: self.close(id)?,
                reason,
                private_data: private_data.to_vec(),
            }),
            CmEvent::Unreachable { id } => Some(Event::Unreachable {
                id: self.close(id)?,
            }),
            CmEvent::ConnectError { id } => Some(Event::ConnectError {
                id: self.close(id)?,
            }),
            CmEvent::SidrReply {
                id,
                status,
                qpn,
                qkey,
                private_data,
            } => {
                let i = self.ids.iter().position(|e| e.conn == Some(id))?;
                Some(self.on_sidr_reply(i, status, qpn, qkey, &private_data, nb))
            }
            CmEvent::Disconnected { id } => {
                let e = self.by_conn(id)?;
                e.state = IdState::Disconnected;
                Some(Event::Disconnected { id: e.handle })
            }
            CmEvent::TimewaitExit { id, .. } => Some(Event::TimewaitExit {
                id: self.close(id)?,
            }),
        }
    }

    /// A REQ for a port we listen on: a new id, unless its rdma_cm header is missing or not
    /// IPv4, which rdma_cm refuses (cma.c `cma_ib_req_handler` fails on `cma_save_net_info`,
    /// and cm.c `cm_destroy_id` rejects the REQ: REJ Consumer Defined).
    fn on_request(
        &mut self,
        now: u64,
        conn: ConnId,
        req: &rdma_cm::msg::Req,
        cma: Option<rdma_cm::rdma_cm::CmaHdr>,
        nb: &mut dyn Neighbours,
    ) -> Option<Event> {
        let Some(CmaAddr::V4(remote_ip)) = cma.map(|h| h.src) else {
            let _ = self.with_cm(now, nb, |cm, t| cm.reject(conn, &[], t));
            return None;
        };
        let handle = self.new_handle();
        self.ids.push(Id {
            handle,
            conn: Some(conn),
            qp: None,
            access: Access(0),
            remote_ip,
            state: IdState::Requested,
        });
        // cm.c `cm_format_req_event`: the peer's initiator depth is our responder resources
        // and the other way round.
        Some(Event::ConnectRequest {
            id: handle,
            private_data: req.private_data[CMA_HDR_LEN..].to_vec(),
            remote_ip,
            initiator_depth: req.responder_resources,
            responder_resources: req.initiator_depth,
        })
    }
}
