//! The passive side against a recording transport, with REQs as Linux's rdma_cm sends them.

extern crate std;
use std::vec::Vec;

use super::*;
use crate::mad::attr;
use crate::msg::tests::linux_req;
use crate::msg::{
    transport, Drep, Rtu, REJ_PRIVATE_DATA_LEN, REQ_PRIVATE_DATA_LEN, RTU_PRIVATE_DATA_LEN,
};
use crate::rdma_cm::{PortSpace, QpType};

#[derive(Default)]
struct Rec {
    sent: Vec<(Peer, [u8; MAD_LEN])>,
    moves: Vec<(u32, QpStep)>,
    fail_rtr: bool,
}

impl CmTransport for Rec {
    type QpError = u8;
    fn send_mad(&mut self, to: &Peer, mad: &[u8; MAD_LEN]) {
        self.sent.push((*to, *mad));
    }
    fn modify_qp(&mut self, qpn: u32, step: QpStep) -> Result<(), u8> {
        if self.fail_rtr && matches!(step, QpStep::Rtr(_)) {
            return Err(0x22);
        }
        self.moves.push((qpn, step));
        Ok(())
    }
}

impl Rec {
    fn last(&self) -> CmMad {
        CmMad::decode(&self.sent.last().expect("a MAD was sent").1).unwrap()
    }
}

const PEER: Peer = Peer {
    gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2],
    qpn: 1,
};
const TID: u64 = 0x2_ef9c_249c;
const NVME: u64 = 0x0106_1144;
const S: u64 = 1_000_000_000;

fn cfg() -> CmConfig {
    CmConfig {
        local_ca_guid: 0x0000_00ff_fe00_0001,
        ack_delay: 15,
        max_responder_resources: 16,
        max_initiator_depth: 16,
        tid_hi: 2,
        comm_id_seed: 0x5a5a_0000,
    }
}

fn req_bytes(req: &Req) -> [u8; MAD_LEN] {
    CmMad::new(TID, CmMsg::Req(*req)).to_bytes().unwrap()
}

fn accept_params(qpn: u32) -> Accept<'static> {
    Accept {
        qpn,
        starting_psn: 0xb4_1920,
        responder_resources: 0,
        initiator_depth: 128,
        flow_control: true,
        rnr_retry_count: 7,
        srq: false,
        private_data: &[0, 0, 0x20, 0],
    }
}

/// A listener on NVMe-oF's port and one REQ accepted on QP 0x12.
fn accepted(req: &Req) -> (Cm<4>, Rec, ConnId) {
    let mut p = Cm::<4>::new(cfg());
    let mut t = Rec::default();
    p.listen(PortSpace::Tcp.service_id(4420), QpType::Rc, 8)
        .unwrap();
    let ev = p.on_mad(0, &PEER, &req_bytes(req), &mut t).unwrap();
    let Some(CmEvent::ConnectRequest { id, req: got, cma }) = ev else {
        panic!("{ev:?}")
    };
    assert_eq!(got, *req);
    assert_eq!(cma.unwrap().src_port, 49743);
    p.accept(0, id, &accept_params(0x12), &mut t).unwrap();
    (p, t, id)
}

/// The passive side's Established event (no private data).
fn established(id: ConnId) -> CmEvent {
    CmEvent::Established {
        id,
        private_data: [0; crate::msg::REP_PRIVATE_DATA_LEN],
    }
}

fn rtu(id: ConnId, req: &Req) -> [u8; MAD_LEN] {
    let rtu = Rtu {
        local_comm_id: req.local_comm_id,
        remote_comm_id: id.0,
        private_data: [0; RTU_PRIVATE_DATA_LEN],
    };
    CmMad::new(TID, CmMsg::Rtu(rtu)).to_bytes().unwrap()
}

fn dreq(id: ConnId, req: &Req, qpn: u32) -> [u8; MAD_LEN] {
    let d = Dreq {
        local_comm_id: req.local_comm_id,
        remote_comm_id: id.0,
        remote_qpn_eecn: qpn,
        private_data: [0; crate::msg::DREQ_PRIVATE_DATA_LEN],
    };
    CmMad::new(TID, CmMsg::Dreq(d)).to_bytes().unwrap()
}

#[test]
fn req_accept_rtu_moves_the_qp_from_the_req_and_negotiates() {
    let req = linux_req();
    let (mut p, mut t, id) = accepted(&req);
    // INIT, RTR, RTS in that order, from the REQ (cm.c PSN rule: rq_psn = REP's, sq_psn = REQ's).
    assert_eq!(t.moves.len(), 3);
    assert_eq!(t.moves[0], (0x12, QpStep::Init { pkey: 0xffff }));
    let QpStep::Rtr(rtr) = t.moves[1].1 else {
        panic!()
    };
    assert_eq!(
        (
            rtr.dest_qpn,
            rtr.rq_psn,
            rtr.path_mtu,
            rtr.flow_label,
            rtr.hop_limit
        ),
        (0x11, 0xb4_1920, 3, 0x798d5, 64)
    );
    assert_eq!(rtr.remote_gid, req.primary.local_gid);
    // The REQ offers 0 initiator depth: we grant no responder resources.
    assert_eq!(rtr.max_dest_rd_atomic, 0);
    let QpStep::Rts(rts) = t.moves[2].1 else {
        panic!()
    };
    assert_eq!(
        (rts.sq_psn, rts.timeout, rts.retry_cnt, rts.rnr_retry),
        (0x31_a2d2, 19, 7, 7)
    );
    // min(wanted 128, the REQ's responder resources 128, the device's 16).
    assert_eq!(rts.max_rd_atomic, 16);
    let rep = t.last();
    assert_eq!((rep.hdr.tid, rep.hdr.attr_id), (TID, attr::REP));
    let CmMsg::Rep(rep) = rep.msg else { panic!() };
    assert_eq!(
        (rep.local_comm_id, rep.remote_comm_id),
        (id.0, req.local_comm_id)
    );
    assert_eq!((rep.local_qpn, rep.starting_psn), (0x12, 0xb4_1920));
    assert_eq!((rep.responder_resources, rep.initiator_depth), (0, 16));
    assert_eq!(
        (rep.target_ack_delay, rep.local_ca_guid),
        (15, cfg().local_ca_guid)
    );
    assert_eq!(&rep.private_data[..4], &[0, 0, 0x20, 0]);
    assert_eq!(p.state(id), Some(ConnState::RepSent));
    let ev = p.on_mad(1, &PEER, &rtu(id, &req), &mut t).unwrap();
    assert_eq!(ev, Some(established(id)));
    assert_eq!(p.next_deadline(), None);
    // A second RTU changes nothing.
    assert_eq!(
        p.on_mad(2, &PEER, &rtu(id, &req), &mut t),
        Err(Dropped::WrongState)
    );
}

#[test]
fn unknown_service_id_gets_rej_reason_8() {
    let mut p = Cm::<4>::new(cfg());
    let mut t = Rec::default();
    p.listen(PortSpace::Tcp.service_id(18515), QpType::Rc, 8)
        .unwrap();
    let req = linux_req();
    assert_eq!(
        p.on_mad(0, &PEER, &req_bytes(&req), &mut t),
        Err(Dropped::Rejected(rej_reason::INVALID_SERVICE_ID))
    );
    let rej = t.last();
    assert_eq!(rej.hdr.tid, TID);
    let CmMsg::Rej(rej) = rej.msg else { panic!() };
    assert_eq!(
        (rej.local_comm_id, rej.remote_comm_id, rej.reason),
        (0, req.local_comm_id, 8)
    );
    assert_eq!(t.sent[0].0, PEER);
    assert_eq!((p.counters.rej_sent, p.counters.dropped), (1, 1));
    assert!(t.moves.is_empty());
}

#[test]
fn duplicate_req_gets_the_same_rep_or_mra() {
    let req = linux_req();
    let (mut p, mut t, _) = accepted(&req);
    let rep = t.sent.last().unwrap().1;
    assert_eq!(
        p.on_mad(1, &PEER, &req_bytes(&req), &mut t),
        Err(Dropped::DuplicateReq)
    );
    assert_eq!(t.sent.last().unwrap().1, rep);
    assert_eq!(p.counters.duplicate_reqs, 1);
    // Before any answer: a duplicate gets an MRA (service timeout 24), and the next the same
    // MRA again.
    let mut other = linux_req();
    other.local_comm_id ^= 1;
    let Ok(Some(CmEvent::ConnectRequest { id, .. })) =
        p.on_mad(2, &PEER, &req_bytes(&other), &mut t)
    else {
        panic!()
    };
    let n = t.sent.len();
    assert_eq!(
        p.on_mad(3, &PEER, &req_bytes(&other), &mut t),
        Err(Dropped::DuplicateReq)
    );
    assert_eq!(t.sent.len(), n + 1);
    let mra = t.sent.last().unwrap().1;
    let CmMsg::Mra(m) = t.last().msg else {
        panic!()
    };
    assert_eq!(
        (m.message_mraed, m.service_timeout, m.remote_comm_id),
        (0, MRA_SERVICE_TIMEOUT, other.local_comm_id)
    );
    assert_eq!(p.state(id), Some(ConnState::MraReqSent));
    assert_eq!(p.mra(id, 20, &mut t), Err(CallError::WrongState));
    assert_eq!(
        p.on_mad(4, &PEER, &req_bytes(&other), &mut t),
        Err(Dropped::DuplicateReq)
    );
    assert_eq!(t.sent.last().unwrap().1, mra);
    assert_eq!(t.sent.len(), n + 2);
    // The application's own MRA, before any duplicate.
    let mut third = linux_req();
    third.local_comm_id ^= 2;
    let Ok(Some(CmEvent::ConnectRequest { id: id3, .. })) =
        p.on_mad(5, &PEER, &req_bytes(&third), &mut t)
    else {
        panic!()
    };
    p.mra(id3, 10, &mut t).unwrap();
    let CmMsg::Mra(m) = t.last().msg else {
        panic!()
    };
    assert_eq!(m.service_timeout, 10);
    // Accepting after the MRA still works.
    p.accept(5, id, &accept_params(0x13), &mut t).unwrap();
    assert_eq!(p.state(id), Some(ConnState::RepSent));
    // Rejecting after our MRA names our ID, which the MRA told (cm.c cm_format_rej).
    p.reject(id3, &[], &mut t).unwrap();
    let CmMsg::Rej(rej) = t.last().msg else {
        panic!()
    };
    assert_eq!(rej.local_comm_id, id3.0);
}

#[test]
fn rep_is_retried_as_the_req_says_then_rejected_with_timeout() {
    let mut req = linux_req();
    req.max_cm_retries = 2;
    let (mut p, mut t, id) = accepted(&req);
    let rep = t.sent.last().unwrap().1;
    // Local CM Response Timeout 20: 2^(20-8) ms.
    let step = iba_time_ns(20);
    assert_eq!(step, 4096 * 1_000_000);
    assert_eq!(p.next_deadline(), Some(step));
    assert_eq!(p.poll(step - 1, &mut t), None);
    assert_eq!(t.sent.len(), 1);
    assert_eq!(p.poll(step, &mut t), None);
    assert_eq!(p.poll(2 * step, &mut t), None);
    assert_eq!(t.sent.len(), 3);
    assert!(t.sent.iter().all(|s| s.1 == rep));
    assert_eq!(p.counters.retransmits, 2);
    assert_eq!(p.poll(3 * step, &mut t), Some(CmEvent::Unreachable { id }));
    let CmMsg::Rej(rej) = t.last().msg else {
        panic!()
    };
    assert_eq!(
        (rej.reason, rej.message_rejected),
        (rej_reason::TIMEOUT, msg_response::REP)
    );
    assert_eq!(t.moves.last(), Some(&(0x12, QpStep::Err)));
    assert_eq!(p.state(id), None);
    assert_eq!(p.poll(100 * S, &mut t), None);
}

#[test]
fn dreq_gets_drep_then_timewait_ends() {
    let req = linux_req();
    let (mut p, mut t, id) = accepted(&req);
    p.on_mad(1, &PEER, &rtu(id, &req), &mut t).unwrap();
    // A DREQ naming another QP is dropped.
    assert_eq!(
        p.on_mad(2, &PEER, &dreq(id, &req, 0x99), &mut t),
        Err(Dropped::WrongState)
    );
    let ev = p.on_mad(10, &PEER, &dreq(id, &req, 0x12), &mut t).unwrap();
    assert_eq!(ev, Some(CmEvent::Disconnected { id }));
    assert_eq!(t.moves.last(), Some(&(0x12, QpStep::Err)));
    let CmMsg::Drep(d) = t.last().msg else {
        panic!()
    };
    assert_eq!(
        (d.local_comm_id, d.remote_comm_id),
        (id.0, req.local_comm_id)
    );
    assert_eq!(p.state(id), Some(ConnState::TimeWait));
    // A repeated DREQ in TIMEWAIT gets the DREP again; a repeated REQ gets REJ Stale.
    let n = t.sent.len();
    assert_eq!(
        p.on_mad(11, &PEER, &dreq(id, &req, 0x12), &mut t),
        Err(Dropped::WrongState)
    );
    assert_eq!(t.sent.len(), n + 1);
    assert_eq!(
        p.on_mad(12, &PEER, &req_bytes(&req), &mut t),
        Err(Dropped::Rejected(rej_reason::STALE_CONN))
    );
    // TIMEWAIT: the path's ACK timeout 19, 2^(19-8) ms.
    let tw = iba_time_ns(19);
    assert_eq!(p.poll(10 + tw - 1, &mut t), None);
    assert_eq!(
        p.poll(10 + tw, &mut t),
        Some(CmEvent::TimewaitExit { id, qpn: 0x12 })
    );
    assert_eq!(p.state(id), None);
}

#[test]
fn our_disconnect_sends_dreq_and_retries_it() {
    let mut req = linux_req();
    req.max_cm_retries = 1;
    let (mut p, mut t, id) = accepted(&req);
    assert_eq!(p.comm_established(id), Some(established(id)));
    p.disconnect(100, id, &mut t).unwrap();
    assert_eq!(t.moves.last(), Some(&(0x12, QpStep::Err)));
    let dreq_mad = t.last();
    assert_eq!(dreq_mad.hdr.tid, own_tid(2, id.0));
    let CmMsg::Dreq(d) = dreq_mad.msg else {
        panic!()
    };
    assert_eq!((d.local_comm_id, d.remote_qpn_eecn), (id.0, req.local_qpn));
    let step = iba_time_ns(20);
    assert_eq!(p.poll(100 + step, &mut t), None);
    assert_eq!(p.counters.retransmits, 1);
    assert_eq!(
        p.poll(100 + 2 * step, &mut t),
        Some(CmEvent::Disconnected { id })
    );
    assert_eq!(p.state(id), Some(ConnState::TimeWait));

    // And answered: DREP ends it at once.
    let (mut p, mut t, id) = accepted(&req);
    p.comm_established(id).unwrap();
    p.disconnect(0, id, &mut t).unwrap();
    let drep = Drep {
        local_comm_id: req.local_comm_id,
        remote_comm_id: id.0,
        private_data: [0; RTU_PRIVATE_DATA_LEN],
    };
    let b = CmMad::new(own_tid(2, id.0), CmMsg::Drep(drep))
        .to_bytes()
        .unwrap();
    assert_eq!(
        p.on_mad(1, &PEER, &b, &mut t),
        Ok(Some(CmEvent::Disconnected { id }))
    );
    assert_eq!(p.on_mad(2, &PEER, &b, &mut t), Err(Dropped::WrongState));
}

#[test]
fn backlog_and_table_limits_reject() {
    let mut p = Cm::<2>::new(cfg());
    let mut t = Rec::default();
    p.listen(NVME, QpType::Rc, 1).unwrap();
    assert_eq!(p.listen(NVME, QpType::Rc, 1), Err(CallError::InUse));
    let mut req = linux_req();
    assert!(p.on_mad(0, &PEER, &req_bytes(&req), &mut t).is_ok());
    req.local_comm_id += 1;
    assert_eq!(
        p.on_mad(0, &PEER, &req_bytes(&req), &mut t),
        Err(Dropped::Rejected(rej_reason::CONSUMER_DEFINED))
    );
    p.unlisten(NVME);
    p.listen(NVME, QpType::Rc, 8).unwrap();
    assert!(p.on_mad(0, &PEER, &req_bytes(&req), &mut t).is_ok());
    req.local_comm_id += 1;
    assert_eq!(
        p.on_mad(0, &PEER, &req_bytes(&req), &mut t),
        Err(Dropped::Rejected(rej_reason::NO_RESOURCES))
    );
    req.transport_service_type = transport::UC;
    assert_eq!(
        p.on_mad(0, &PEER, &req_bytes(&req), &mut t),
        Err(Dropped::Rejected(rej_reason::INVALID_TRANSPORT_TYPE))
    );
}

#[test]
fn reject_and_failed_qp_moves() {
    let mut p = Cm::<4>::new(cfg());
    let mut t = Rec::default();
    p.listen(NVME, QpType::Rc, 8).unwrap();
    let req = linux_req();
    let Ok(Some(CmEvent::ConnectRequest { id, .. })) = p.on_mad(0, &PEER, &req_bytes(&req), &mut t)
    else {
        panic!()
    };
    t.fail_rtr = true;
    assert_eq!(
        p.accept(0, id, &accept_params(0x12), &mut t),
        Err(CallError::Qp(0x22))
    );
    assert_eq!(p.state(id), Some(ConnState::ReqRcvd));
    let long = [0u8; REQ_PRIVATE_DATA_LEN * 3];
    assert!(matches!(
        p.reject(id, &long, &mut t),
        Err(CallError::Encode(_))
    ));
    p.reject(id, &[0xee, 1], &mut t).unwrap();
    let CmMsg::Rej(rej) = t.last().msg else {
        panic!()
    };
    // Linux names no local ID in a REJ of a REQ it has not MRAed (cm.c cm_format_rej).
    assert_eq!(
        (rej.reason, rej.local_comm_id, rej.remote_comm_id),
        (rej_reason::CONSUMER_DEFINED, 0, req.local_comm_id)
    );
    assert_eq!(&rej.private_data[..2], &[0xee, 1]);
    assert_eq!(p.state(id), None);
    assert_eq!(p.reject(id, &[], &mut t), Err(CallError::UnknownConn));
}

#[test]
fn peer_rej_and_mra_of_our_rep() {
    let req = linux_req();
    let (mut p, mut t, id) = accepted(&req);
    let mra = Mra {
        local_comm_id: req.local_comm_id,
        remote_comm_id: id.0,
        message_mraed: msg_response::REP,
        service_timeout: 23,
        private_data: [0; crate::msg::MRA_PRIVATE_DATA_LEN],
    };
    let b = CmMad::new(TID, CmMsg::Mra(mra)).to_bytes().unwrap();
    assert_eq!(p.on_mad(5, &PEER, &b, &mut t), Ok(None));
    assert_eq!(p.state(id), Some(ConnState::MraRepRcvd));
    assert_eq!(
        p.next_deadline(),
        Some(5 + iba_time_ns(23) + iba_time_ns(19))
    );
    let rej = rej_for(
        req.local_comm_id,
        req.local_comm_id,
        msg_response::REP,
        rej_reason::STALE_CONN,
        [0; REJ_PRIVATE_DATA_LEN],
    );
    let rej = Rej {
        remote_comm_id: id.0,
        ..rej
    };
    let b = CmMad::new(TID, CmMsg::Rej(rej)).to_bytes().unwrap();
    assert_eq!(
        p.on_mad(6, &PEER, &b, &mut t),
        Ok(Some(CmEvent::Rejected {
            id,
            reason: rej_reason::STALE_CONN,
            private_data: [0; REJ_PRIVATE_DATA_LEN],
        }))
    );
    assert_eq!(t.moves.last(), Some(&(0x12, QpStep::Err)));
    // Stale IDs wait out TIMEWAIT (cm.c cm_rej_handler), then are gone.
    assert_eq!(p.state(id), Some(ConnState::TimeWait));
    assert_eq!(
        p.poll(6 + iba_time_ns(19), &mut t),
        Some(CmEvent::TimewaitExit { id, qpn: 0x12 })
    );
    assert_eq!(p.state(id), None);
}

#[test]
fn unknown_ids_are_dropped_and_unknown_dreq_answered() {
    let mut p = Cm::<4>::new(cfg());
    let mut t = Rec::default();
    let req = linux_req();
    let ghost = ConnId(0x1234);
    assert_eq!(
        p.on_mad(0, &PEER, &rtu(ghost, &req), &mut t),
        Err(Dropped::UnknownConn)
    );
    assert!(t.sent.is_empty());
    assert_eq!(
        p.on_mad(0, &PEER, &dreq(ghost, &req, 5), &mut t),
        Err(Dropped::UnknownConn)
    );
    let CmMsg::Drep(d) = t.last().msg else {
        panic!()
    };
    assert_eq!(
        (d.local_comm_id, d.remote_comm_id),
        (0x1234, req.local_comm_id)
    );
    assert_eq!(
        p.on_mad(0, &PEER, &[0u8; 10], &mut t),
        Err(Dropped::Decode(crate::CmError::Length(10)))
    );
    assert_eq!(p.counters.dropped, 3);
}

#[test]
fn sidr_req_for_a_ud_service_gets_the_qpn_and_qkey() {
    use crate::msg::{sidr_status, SidrReq, SIDR_REQ_PRIVATE_DATA_LEN};
    use crate::rdma_cm::UDP_QKEY;
    let mut p = Cm::<4>::new(cfg());
    let mut t = Rec::default();
    let sid = PortSpace::Udp.service_id(7174);
    p.listen(sid, QpType::Ud, 8).unwrap();
    let mut req = SidrReq {
        request_id: 0xabcd,
        pkey: 0xffff,
        service_id: sid,
        private_data: [0; SIDR_REQ_PRIVATE_DATA_LEN],
    };
    req.private_data[..4].copy_from_slice(&[0x00, 0x40, 0x12, 0x34]);
    let b = CmMad::new(0x77, CmMsg::SidrReq(req)).to_bytes().unwrap();
    let Ok(Some(CmEvent::SidrRequest {
        ticket,
        private_data,
        ..
    })) = p.on_mad(0, &PEER, &b, &mut t)
    else {
        panic!()
    };
    assert_eq!(
        (ticket.tid, ticket.request_id, ticket.service_id),
        (0x77, 0xabcd, sid)
    );
    assert_eq!(private_data, req.private_data);
    p.sidr_reply(&ticket, sidr_status::SUCCESS, 0x15, UDP_QKEY, &[9], &mut t)
        .unwrap();
    let rep = t.last();
    assert_eq!(rep.hdr.tid, 0x77);
    let CmMsg::SidrRep(r) = rep.msg else { panic!() };
    assert_eq!(
        (
            r.request_id,
            r.status,
            r.qpn,
            r.qkey,
            r.service_id,
            r.private_data[0]
        ),
        (0xabcd, 0, 0x15, 0x0123_4567, sid, 9)
    );
    // No state kept; a service nobody listens on is answered Unsupported.
    let other = SidrReq {
        service_id: PortSpace::Udp.service_id(1),
        ..req
    };
    let b = CmMad::new(0x78, CmMsg::SidrReq(other)).to_bytes().unwrap();
    assert_eq!(p.on_mad(0, &PEER, &b, &mut t), Err(Dropped::Rejected(1)));
    let CmMsg::SidrRep(r) = t.last().msg else {
        panic!()
    };
    assert_eq!(
        (r.status, r.request_id, r.qpn),
        (sidr_status::UNSUPPORTED, 0xabcd, 0)
    );
    assert!(t.moves.is_empty());
}
