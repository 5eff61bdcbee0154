//! An active `Cm` against a passive `Cm`, in memory: every message both ways, lost REQs, REPs,
//! RTUs, DREQs and SIDR_REQs retried, REJ, MRA, DREQ from either side, TIMEWAIT, and a QP that
//! cannot be moved on the REP.

mod common;

use common::{cfg, params, Side, A, B, PORT, QP_A, QP_B, SRC_PORT};
use rdma_cm::conn::{
    ack_timeout, iba_time_ns, Accept, CallError, Cm, CmEvent, ConnId, ConnState, Dropped, QpStep,
};
use rdma_cm::mad::{attr, MAD_LEN};
use rdma_cm::msg::{rej_reason, sidr_status};
use rdma_cm::rdma_cm::{
    roce_flow_label, CmaAddr, CmaHdr, PortSpace, CMA_HDR_LEN, MAX_CM_RETRIES, UDP_QKEY,
};
use rdma_cm::{CmMad, CmMsg};

/// Which MADs the wire loses: (from A, attribute ID) → how many more to lose.
type Loss = Vec<(bool, u16, usize)>;

struct Net {
    a: Cm<8>,
    b: Cm<8>,
    ta: Side,
    tb: Side,
    ev_a: Vec<CmEvent>,
    ev_b: Vec<CmEvent>,
    lost: Loss,
    /// Every MAD delivered or lost, in order: (from A, attribute ID, lost).
    log: Vec<(bool, u16, bool)>,
    /// The same MADs.
    mads: Vec<[u8; MAD_LEN]>,
    now: u64,
}

impl Net {
    fn new() -> Net {
        let mut b = Cm::new(cfg(0x0200_00ff_fe00_0001, 0x1111_0000));
        b.listen(PortSpace::Tcp.service_id(PORT), 4).unwrap();
        b.listen(PortSpace::Udp.service_id(PORT), 4).unwrap();
        Net {
            a: Cm::new(cfg(0x0200_00ff_fe00_0002, 0x2222_0000)),
            b,
            ta: Side::default(),
            tb: Side::default(),
            ev_a: Vec::new(),
            ev_b: Vec::new(),
            lost: Vec::new(),
            log: Vec::new(),
            mads: Vec::new(),
            now: 0,
        }
    }

    fn lose(&mut self, from_a: bool, attr_id: u16, n: usize) {
        self.lost.push((from_a, attr_id, n));
    }

    fn is_lost(&mut self, from_a: bool, mad: &[u8; MAD_LEN]) -> bool {
        let id = CmMad::decode(mad).unwrap().hdr.attr_id;
        let hit = self
            .lost
            .iter_mut()
            .find(|l| l.0 == from_a && l.1 == id && l.2 > 0);
        let lost = hit.map(|l| l.2 -= 1).is_some();
        self.log.push((from_a, id, lost));
        self.mads.push(*mad);
        lost
    }

    /// Delivers until both sides are quiet at `now`, running their timers first.
    fn pump(&mut self) {
        while let Some(ev) = self.a.poll(self.now, &mut self.ta) {
            self.ev_a.push(ev);
        }
        while let Some(ev) = self.b.poll(self.now, &mut self.tb) {
            self.ev_b.push(ev);
        }
        while !self.ta.out.is_empty() || !self.tb.out.is_empty() {
            for m in std::mem::take(&mut self.ta.out) {
                if !self.is_lost(true, &m) {
                    if let Ok(Some(ev)) = self.b.on_mad(self.now, &A, &m, &mut self.tb) {
                        self.ev_b.push(ev);
                    }
                }
            }
            for m in std::mem::take(&mut self.tb.out) {
                if !self.is_lost(false, &m) {
                    if let Ok(Some(ev)) = self.a.on_mad(self.now, &B, &m, &mut self.ta) {
                        self.ev_a.push(ev);
                    }
                }
            }
        }
    }

    /// Moves time to the next deadline of either side and pumps.
    fn step(&mut self) {
        let next = [self.a.next_deadline(), self.b.next_deadline()]
            .into_iter()
            .flatten()
            .min()
            .expect("a timer runs");
        self.now = self.now.max(next);
        self.pump();
    }

    fn connect(&mut self, port: u16) -> ConnId {
        let pd = cma_hdr();
        let id = self
            .a
            .connect(self.now, &B, &params(port, &pd), &mut self.ta);
        let id = id.unwrap();
        assert_eq!(self.a.state(id), Some(ConnState::ReqSent));
        id
    }

    /// The connection request B got last.
    fn request(&mut self) -> ConnId {
        match self.ev_b.pop() {
            Some(CmEvent::ConnectRequest { id, req, cma }) => {
                assert_eq!(req.local_qpn, QP_A);
                assert_eq!(cma.unwrap().src_port, SRC_PORT);
                id
            }
            other => panic!("{other:?}"),
        }
    }

    fn accept(&mut self, id: ConnId) {
        let a = Accept {
            qpn: QP_B,
            starting_psn: 0x22_2222,
            responder_resources: 8,
            initiator_depth: 8,
            flow_control: true,
            rnr_retry_count: 5,
            srq: false,
            private_data: b"hello",
        };
        self.b.accept(self.now, id, &a, &mut self.tb).unwrap();
    }

    /// A's connect, B's request accepted, all delivered (or lost) that could be.
    fn connect_and_accept(&mut self) -> (ConnId, ConnId) {
        let a = self.connect(PORT);
        self.pump();
        let b = self.request();
        self.accept(b);
        self.pump();
        (a, b)
    }

    /// A connection made, nothing lost.
    fn established() -> (Net, ConnId, ConnId) {
        let mut n = Net::new();
        let (a, b) = n.connect_and_accept();
        assert!(matches!(n.ev_a.pop(), Some(CmEvent::Established { id, .. }) if id == a));
        assert!(matches!(n.ev_b.pop(), Some(CmEvent::Established { id, .. }) if id == b));
        (n, a, b)
    }
}

/// The rdma_cm header of A's REQs.
fn cma_hdr() -> [u8; CMA_HDR_LEN] {
    let mut pd = [0u8; CMA_HDR_LEN];
    CmaHdr {
        src_port: SRC_PORT,
        src: CmaAddr::V4([10, 0, 0, 2]),
        dst: CmaAddr::V4([10, 0, 0, 1]),
    }
    .encode(&mut pd);
    pd
}

fn rts(steps: &[QpStep]) -> rdma_cm::conn::RtsAttrs {
    match steps.iter().find(|s| matches!(s, QpStep::Rts(_))) {
        Some(QpStep::Rts(r)) => *r,
        _ => panic!("no RTS in {steps:?}"),
    }
}

fn rtr(steps: &[QpStep]) -> rdma_cm::conn::RtrAttrs {
    match steps.iter().find(|s| matches!(s, QpStep::Rtr(_))) {
        Some(QpStep::Rtr(r)) => *r,
        _ => panic!("no RTR in {steps:?}"),
    }
}

#[test]
fn connect_accept_establishes_both_qps_to_match() {
    let mut n = Net::new();
    let a = n.connect(PORT);
    n.pump();
    // The REQ is all that went: A's QP stays in RESET until the REP.
    assert!(n.ta.moves.is_empty());
    let b = n.request();
    n.accept(b);
    n.pump();
    let Some(CmEvent::Established { id, private_data }) = n.ev_a.pop() else {
        panic!("{:?}", n.ev_a)
    };
    assert_eq!((id, &private_data[..6]), (a, &b"hello\0"[..]));
    assert!(matches!(n.ev_b.pop(), Some(CmEvent::Established { id, .. }) if id == b));
    assert_eq!(
        n.log,
        [
            (true, attr::REQ, false),
            (false, attr::REP, false),
            (true, attr::RTU, false)
        ]
    );
    assert_eq!(n.a.state(a), Some(ConnState::Established));
    assert_eq!(n.b.state(b), Some(ConnState::Established));
    assert_eq!((n.a.next_deadline(), n.b.next_deadline()), (None, None));

    let (sa, sb) = (n.ta.steps(QP_A), n.tb.steps(QP_B));
    assert_eq!(sa.len(), 3);
    assert_eq!(sa[0], QpStep::Init { pkey: 0xffff });
    let (rtr_a, rtr_b, rts_a, rts_b) = (rtr(&sa), rtr(&sb), rts(&sa), rts(&sb));
    // Each side's send PSN is what the other expects.
    assert_eq!((rts_a.sq_psn, rtr_b.rq_psn), (0x22_2222, 0x22_2222));
    assert_eq!((rts_b.sq_psn, rtr_a.rq_psn), (0x11_1111, 0x11_1111));
    assert_eq!((rtr_a.dest_qpn, rtr_b.dest_qpn), (QP_B, QP_A));
    assert_eq!((rtr_a.remote_gid, rtr_a.local_gid), (B.gid, A.gid));
    assert_eq!((rtr_b.remote_gid, rtr_b.local_gid), (A.gid, B.gid));
    // One flow label, one UDP source port both ways.
    assert_eq!(rtr_a.udp_sport, rtr_b.udp_sport);
    assert_eq!(rtr_a.flow_label, roce_flow_label(SRC_PORT, PORT));
    // Resources crossed: A offered 16 responder / 4 initiator, B wanted 8 / 8.
    assert_eq!((rtr_b.max_dest_rd_atomic, rts_b.max_rd_atomic), (4, 8));
    assert_eq!((rtr_a.max_dest_rd_atomic, rts_a.max_rd_atomic), (8, 4));
    // RNR retries: each side's QP takes the count the other asked for.
    assert_eq!((rts_a.rnr_retry, rts_b.rnr_retry), (5, 6));
    // A's ACK timeout from B's ACK delay 15 and the packet life time 18.
    assert_eq!(rts_a.timeout, 19);
    assert_eq!(rts_a.retry_cnt, 7);
}

#[test]
fn lost_req_is_sent_again_and_unanswered_req_is_unreachable() {
    let mut n = Net::new();
    n.lose(true, attr::REQ, 1);
    let a = n.connect(PORT);
    n.pump();
    assert!(n.ev_b.is_empty());
    // Two packet life times (18) and the Remote CM Response Timeout (20).
    let wait = 2 * iba_time_ns(18) + iba_time_ns(20);
    assert_eq!(n.a.next_deadline(), Some(wait));
    n.step();
    assert_eq!(n.a.counters.retransmits, 1);
    let b = n.request();
    n.accept(b);
    n.pump();
    assert!(matches!(n.ev_a.pop(), Some(CmEvent::Established { id, .. }) if id == a));

    // Nobody answers: the REQ goes 1 + max_cm_retries times, then Unreachable, QP in ERR,
    // no REJ (cm.c cm_process_send_error).
    let mut n = Net::new();
    n.lose(true, attr::REQ, usize::MAX);
    let a = n.connect(PORT);
    n.pump();
    for _ in 0..4 {
        n.step();
    }
    assert_eq!(n.log.len(), 4);
    assert!(n.log.iter().all(|l| *l == (true, attr::REQ, true)));
    assert_eq!(n.ev_a, [CmEvent::Unreachable { id: a }]);
    assert_eq!(n.ta.moves, [(QP_A, QpStep::Err)]);
    assert_eq!(n.a.state(a), None);
    assert_eq!(n.a.next_deadline(), None);
}

#[test]
fn lost_rep_and_lost_rtu_are_recovered() {
    // The REP lost: B sends it again after its wait, A establishes.
    let mut n = Net::new();
    n.lose(false, attr::REP, 1);
    let (a, b) = n.connect_and_accept();
    assert!(n.ev_a.is_empty());
    // B's REP wait is the REQ's Local CM Response Timeout; A's REQ wait is longer.
    assert_eq!(n.b.next_deadline(), Some(iba_time_ns(20)));
    n.step();
    assert!(matches!(n.ev_a.pop(), Some(CmEvent::Established { id, .. }) if id == a));
    assert!(matches!(n.ev_b.pop(), Some(CmEvent::Established { id, .. }) if id == b));
    assert_eq!(n.a.next_deadline(), None);

    // The RTU lost: B's REP again gets the RTU again (cm.c cm_dup_rep_handler).
    let mut n = Net::new();
    n.lose(true, attr::RTU, 1);
    let (a, b) = n.connect_and_accept();
    assert!(matches!(n.ev_a.pop(), Some(CmEvent::Established { id, .. }) if id == a));
    assert!(n.ev_b.is_empty());
    n.step();
    assert!(matches!(n.ev_b.pop(), Some(CmEvent::Established { id, .. }) if id == b));
    let rtus = n.log.iter().filter(|l| l.1 == attr::RTU).count();
    assert_eq!(rtus, 2);
    // A's QP moved once.
    assert_eq!(n.ta.steps(QP_A).len(), 3);
    assert!(n.ev_a.is_empty());
}

#[test]
fn rejects_reach_the_active_side() {
    // The application rejects, with private data.
    let mut n = Net::new();
    let a = n.connect(PORT);
    n.pump();
    let b = n.request();
    n.b.reject(b, b"busy", &mut n.tb).unwrap();
    n.pump();
    let Some(CmEvent::Rejected {
        id,
        reason,
        private_data,
    }) = n.ev_a.pop()
    else {
        panic!("{:?}", n.ev_a)
    };
    assert_eq!((id, reason), (a, rej_reason::CONSUMER_DEFINED));
    assert_eq!(&private_data[..4], b"busy");
    assert_eq!(n.ta.moves, [(QP_A, QpStep::Err)]);
    assert_eq!((n.a.state(a), n.a.next_deadline()), (None, None));

    // Nothing listens on the port: REJ reason 8 (local ID 0).
    let mut n = Net::new();
    let a = n.connect(PORT + 1);
    n.pump();
    assert!(matches!(
        n.ev_a.pop(),
        Some(CmEvent::Rejected { id, reason: 8, .. }) if id == a
    ));
    assert_eq!(n.a.state(a), None);

    // The backlog is full: REJ Consumer Defined.
    let mut n = Net::new();
    for _ in 0..5 {
        n.connect(PORT);
        n.pump();
    }
    let rejected = n
        .ev_a
        .iter()
        .filter(|e| matches!(e, CmEvent::Rejected { reason, .. } if *reason == rej_reason::CONSUMER_DEFINED))
        .count();
    assert_eq!((n.ev_b.len(), rejected), (4, 1));
}

#[test]
fn mra_of_the_req_holds_off_its_retries() {
    let mut n = Net::new();
    let a = n.connect(PORT);
    n.pump();
    let b = n.request();
    n.b.mra(b, 21, &mut n.tb).unwrap();
    n.pump();
    assert_eq!(n.a.state(a), Some(ConnState::MraReqRcvd));
    // The service timeout and the path's ACK timeout (cm.c cm_mra_handler).
    assert_eq!(n.a.next_deadline(), Some(iba_time_ns(21) + iba_time_ns(19)));
    assert!(n.ev_a.is_empty());
    // Then the REQ again, and each try left waits as long (mad.c ib_modify_mad); B answers
    // the duplicate with its MRA again, which changes nothing more.
    n.step();
    assert_eq!(n.a.counters.retransmits, 1);
    assert_eq!(n.b.counters.duplicate_reqs, 1);
    assert_eq!(n.a.state(a), Some(ConnState::MraReqRcvd));
    assert_eq!(
        n.a.next_deadline(),
        Some(n.now + iba_time_ns(21) + iba_time_ns(19))
    );
    n.accept(b);
    n.pump();
    assert!(matches!(n.ev_a.pop(), Some(CmEvent::Established { id, .. }) if id == a));

    // The application slow and the REQ sent again: B answers the duplicate with an MRA
    // (service timeout 24, rdma_cm's), and A waits.
    let mut n = Net::new();
    let a = n.connect(PORT);
    n.pump();
    let b = n.request();
    n.step();
    assert_eq!(n.b.counters.duplicate_reqs, 1);
    assert_eq!(n.a.state(a), Some(ConnState::MraReqRcvd));
    assert_eq!(
        n.a.next_deadline(),
        Some(n.now + iba_time_ns(24) + iba_time_ns(19))
    );
    n.accept(b);
    n.pump();
    assert!(matches!(n.ev_a.pop(), Some(CmEvent::Established { id, .. }) if id == a));
}

/// Both ends disconnected, then TIMEWAIT runs out on each; every QP in ERR.
fn disconnect_from(active: bool, lose_dreq: bool) {
    let (mut n, a, b) = Net::established();
    if lose_dreq {
        n.lose(active, attr::DREQ, 1);
    }
    if active {
        n.a.disconnect(n.now, a, &mut n.ta).unwrap();
    } else {
        n.b.disconnect(n.now, b, &mut n.tb).unwrap();
    }
    n.pump();
    if lose_dreq {
        assert!(n.ev_a.is_empty() && n.ev_b.is_empty());
        n.step();
    }
    assert_eq!(n.ev_a, [CmEvent::Disconnected { id: a }]);
    assert_eq!(n.ev_b, [CmEvent::Disconnected { id: b }]);
    assert_eq!(n.a.state(a), Some(ConnState::TimeWait));
    assert_eq!(n.b.state(b), Some(ConnState::TimeWait));
    assert_eq!(n.ta.moves.last(), Some(&(QP_A, QpStep::Err)));
    assert_eq!(n.tb.moves.last(), Some(&(QP_B, QpStep::Err)));
    let dreqs: Vec<_> = n.log.iter().filter(|l| l.1 == attr::DREQ).collect();
    assert_eq!(dreqs.len(), 1 + lose_dreq as usize);
    assert!(dreqs.iter().all(|l| l.0 == active));
    let (ev_a, ev_b) = (n.ev_a.len(), n.ev_b.len());
    while n.a.state(a).is_some() || n.b.state(b).is_some() {
        n.step();
    }
    assert_eq!(n.ev_a[ev_a..], [CmEvent::TimewaitExit { id: a, qpn: QP_A }]);
    assert_eq!(n.ev_b[ev_b..], [CmEvent::TimewaitExit { id: b, qpn: QP_B }]);
    assert_eq!((n.a.next_deadline(), n.b.next_deadline()), (None, None));
}

#[test]
fn dreq_from_the_active_side() {
    disconnect_from(true, false);
    disconnect_from(true, true);
}

#[test]
fn dreq_from_the_passive_side() {
    disconnect_from(false, false);
    disconnect_from(false, true);
}

#[test]
fn timewait_lasts_the_ack_timeout_and_refuses_a_stale_req() {
    let (mut n, a, b) = Net::established();
    n.a.disconnect(n.now, a, &mut n.ta).unwrap();
    n.pump();
    let t0 = n.now;
    // A's ACK timeout redone from the REP (15, 18: 19), B's from the REQ (19).
    assert_eq!(n.a.next_deadline(), Some(t0 + iba_time_ns(19)));
    assert_eq!(n.b.next_deadline(), Some(t0 + iba_time_ns(19)));
    // The old REQ again while B is in TIMEWAIT: REJ Stale Connection; A, in TIMEWAIT too,
    // drops it.
    let req = n.mads[0];
    assert_eq!(n.log[0].1, attr::REQ);
    assert_eq!(
        n.b.on_mad(n.now, &A, &req, &mut n.tb),
        Err(Dropped::Rejected(rej_reason::STALE_CONN))
    );
    let rej = n.tb.out.pop().unwrap();
    assert_eq!(
        n.a.on_mad(n.now, &B, &rej, &mut n.ta),
        Err(Dropped::WrongState)
    );
    n.now = t0 + iba_time_ns(19) - 1;
    n.pump();
    assert_eq!(n.a.state(a), Some(ConnState::TimeWait));
    n.now += 1;
    n.pump();
    assert_eq!((n.a.state(a), n.b.state(b)), (None, None));

    // A REJ Stale Connection of our REQ: the ID waits in TIMEWAIT (cm.c cm_rej_handler).
    let mut n = Net::new();
    let a = n.connect(PORT);
    n.lose(true, attr::REQ, 1);
    n.pump();
    let rej = rdma_cm::msg::Rej {
        local_comm_id: 0x77,
        remote_comm_id: a.0,
        message_rejected: rdma_cm::msg::msg_response::REQ,
        reject_info_length: 0,
        reason: rej_reason::STALE_CONN,
        ari: [0; rdma_cm::msg::REJ_ARI_LEN],
        private_data: [0; rdma_cm::msg::REJ_PRIVATE_DATA_LEN],
    };
    let rej = CmMad::new(1, CmMsg::Rej(rej)).to_bytes().unwrap();
    assert!(matches!(
        n.a.on_mad(n.now, &B, &rej, &mut n.ta),
        Ok(Some(CmEvent::Rejected { id, reason: 10, .. })) if id == a
    ));
    assert_eq!(n.a.state(a), Some(ConnState::TimeWait));
    assert_eq!(n.a.next_deadline(), Some(n.now + iba_time_ns(19)));
    n.step();
    assert_eq!(n.ev_a, [CmEvent::TimewaitExit { id: a, qpn: QP_A }]);
}

#[test]
fn a_qp_that_cannot_move_on_the_rep_is_a_connect_error() {
    let mut n = Net::new();
    n.ta.fail_rtr = true;
    let (a, b) = n.connect_and_accept();
    assert_eq!(n.ev_a, [CmEvent::ConnectError { id: a }]);
    assert_eq!(n.ta.moves.last(), Some(&(QP_A, QpStep::Err)));
    assert_eq!(n.a.state(a), None);
    // B's REP was rejected: its QP in ERR, the connection gone.
    assert!(matches!(
        n.ev_b.pop(),
        Some(CmEvent::Rejected { id, reason, .. }) if id == b && reason == rej_reason::CONSUMER_DEFINED
    ));
    assert_eq!(n.tb.moves.last(), Some(&(QP_B, QpStep::Err)));
    assert_eq!(n.b.state(b), None);
}

#[test]
fn sidr_resolves_a_ud_service_with_retries() {
    let mut n = Net::new();
    n.lose(true, attr::SIDR_REQ, 1);
    let pd = [0x00, 0x40, 0xc2, 0x4f];
    let id =
        n.a.sidr_request(n.now, &B, PortSpace::Udp.service_id(PORT), &pd, &mut n.ta)
            .unwrap();
    n.pump();
    assert!(n.ev_b.is_empty());
    n.step();
    let Some(CmEvent::SidrRequest {
        ticket,
        private_data,
        ..
    }) = n.ev_b.pop()
    else {
        panic!("{:?}", n.ev_b)
    };
    assert_eq!(ticket.request_id, id.0);
    assert_eq!(&private_data[..4], &pd);
    n.b.sidr_reply(
        &ticket,
        sidr_status::SUCCESS,
        0x44,
        UDP_QKEY,
        b"ud",
        &mut n.tb,
    )
    .unwrap();
    n.pump();
    let Some(CmEvent::SidrReply {
        id: got,
        status,
        qpn,
        qkey,
        private_data,
    }) = n.ev_a.pop()
    else {
        panic!("{:?}", n.ev_a)
    };
    assert_eq!((got, status, qpn, qkey), (id, 0, 0x44, UDP_QKEY));
    assert_eq!(&private_data[..2], b"ud");
    assert_eq!(n.a.next_deadline(), None);

    // A service nobody listens on: status Unsupported.
    let id =
        n.a.sidr_request(n.now, &B, PortSpace::Udp.service_id(1), &[], &mut n.ta)
            .unwrap();
    n.pump();
    assert!(matches!(
        n.ev_a.pop(),
        Some(CmEvent::SidrReply { id: got, status: sidr_status::UNSUPPORTED, .. }) if got == id
    ));

    // Nobody answers: 1 + 15 SIDR_REQs, then Unreachable.
    let mut n = Net::new();
    n.lose(true, attr::SIDR_REQ, usize::MAX);
    let id =
        n.a.sidr_request(n.now, &B, PortSpace::Udp.service_id(PORT), &[], &mut n.ta)
            .unwrap();
    n.pump();
    while n.a.next_deadline().is_some() {
        n.step();
    }
    assert_eq!(n.log.len(), 1 + MAX_CM_RETRIES as usize);
    assert_eq!(n.ev_a, [CmEvent::Unreachable { id }]);
}

#[test]
fn calls_out_of_turn_are_refused() {
    let mut n = Net::new();
    // Private data beyond the REQ's 92 bytes, the SIDR_REQ's 216.
    assert!(matches!(
        n.a.connect(0, &B, &params(PORT, &[0; 93]), &mut n.ta),
        Err(CallError::Encode(_))
    ));
    assert!(matches!(
        n.a.sidr_request(0, &B, 1, &[0; 217], &mut n.ta),
        Err(CallError::Encode(_))
    ));
    assert!(n.ta.out.is_empty());
    let a = n.connect(PORT);
    // Not established: no disconnect; not a connection request: no reject, MRA or accept.
    assert_eq!(
        n.a.disconnect(n.now, a, &mut n.ta),
        Err(CallError::WrongState)
    );
    assert_eq!(n.a.reject(a, &[], &mut n.ta), Err(CallError::WrongState));
    assert_eq!(n.a.mra(a, 20, &mut n.ta), Err(CallError::WrongState));
    n.pump();
    let b = n.request();
    n.accept(b);
    // A REP naming a connection nobody made is dropped; an RTU or DREQ before the REP too.
    let rep = n.tb.out[0];
    let mut bad = CmMad::decode(&rep).unwrap();
    let CmMsg::Rep(r) = &mut bad.msg else {
        panic!()
    };
    r.remote_comm_id ^= 0xffff;
    assert_eq!(
        n.a.on_mad(0, &B, &bad.to_bytes().unwrap(), &mut n.ta),
        Err(Dropped::UnknownConn)
    );
    // The real one establishes; the table of 8 then refuses a ninth connect.
    n.pump();
    assert!(matches!(n.ev_a.pop(), Some(CmEvent::Established { .. })));
    for _ in 0..7 {
        n.connect(PORT);
    }
    let pd = cma_hdr();
    assert_eq!(
        n.a.connect(0, &B, &params(PORT, &pd), &mut n.ta),
        Err(CallError::Full)
    );
}

#[test]
fn destroy_tells_the_peer_as_linux_does_and_goes_quiet() {
    // An unanswered REQ of ours: REJ Timeout with our CA GUID; the peer finds its request by
    // our ID and GUID and drops it.
    let mut n = Net::new();
    let a = n.connect(PORT);
    n.pump();
    let b = n.request();
    n.a.destroy(n.now, a, &mut n.ta).unwrap();
    assert_eq!(n.ta.moves, [(QP_A, QpStep::Err)]);
    n.pump();
    let rej = CmMad::decode(n.mads.last().unwrap()).unwrap();
    let CmMsg::Rej(r) = rej.msg else {
        panic!("{rej:?}")
    };
    assert_eq!((r.reason, r.message_rejected, r.remote_comm_id), (4, 2, 0));
    assert_eq!(r.reject_info_length, 8);
    assert_eq!(r.ari[..8], 0x0200_00ff_fe00_0002u64.to_be_bytes());
    assert!(matches!(
        n.ev_b.pop(),
        Some(CmEvent::Rejected { id, reason: 4, .. }) if id == b
    ));
    assert_eq!((n.a.state(a), n.b.state(b)), (None, None));
    assert!(n.ev_a.is_empty());
    assert_eq!(
        n.a.destroy(n.now, a, &mut n.ta),
        Err(CallError::UnknownConn)
    );

    // A request not answered: REJ Consumer Defined.
    let mut n = Net::new();
    let a = n.connect(PORT);
    n.pump();
    let b = n.request();
    n.b.destroy(n.now, b, &mut n.tb).unwrap();
    n.pump();
    assert!(matches!(
        n.ev_a.pop(),
        Some(CmEvent::Rejected { id, reason: rej_reason::CONSUMER_DEFINED, .. }) if id == a
    ));
    assert_eq!(n.b.state(b), None);

    // Established: one DREQ, then TIMEWAIT without events; the peer disconnects.
    for active in [true, false] {
        let (mut n, a, b) = Net::established();
        if active {
            n.a.destroy(n.now, a, &mut n.ta).unwrap();
        } else {
            n.b.destroy(n.now, b, &mut n.tb).unwrap();
        }
        n.pump();
        let (mine, theirs) = if active {
            (&n.ev_a, &n.ev_b)
        } else {
            (&n.ev_b, &n.ev_a)
        };
        assert!(mine.is_empty(), "{mine:?}");
        assert_eq!(theirs.len(), 1);
        assert!(matches!(theirs[0], CmEvent::Disconnected { .. }));
        assert_eq!(n.ta.moves.last(), Some(&(QP_A, QpStep::Err)));
        assert_eq!(n.tb.moves.last(), Some(&(QP_B, QpStep::Err)));
        assert_eq!(n.a.state(a), Some(ConnState::TimeWait));
        assert_eq!(n.b.state(b), Some(ConnState::TimeWait));
        while n.a.state(a).is_some() || n.b.state(b).is_some() {
            n.step();
        }
        let (mine, theirs) = if active {
            (&n.ev_a, &n.ev_b)
        } else {
            (&n.ev_b, &n.ev_a)
        };
        assert!(mine.is_empty(), "{mine:?}");
        assert!(matches!(theirs[1], CmEvent::TimewaitExit { .. }));
        let dreqs = n.log.iter().filter(|l| l.1 == attr::DREQ).count();
        assert_eq!(dreqs, 1);
    }

    // An unanswered REP: REJ Consumer Defined, then TIMEWAIT; A's REQ ends rejected.
    let mut n = Net::new();
    n.lose(false, attr::REP, 1);
    let (a, b) = n.connect_and_accept();
    n.b.destroy(n.now, b, &mut n.tb).unwrap();
    n.pump();
    assert!(matches!(
        n.ev_a.pop(),
        Some(CmEvent::Rejected { id, reason: rej_reason::CONSUMER_DEFINED, .. }) if id == a
    ));
    assert_eq!(n.b.state(b), Some(ConnState::TimeWait));
    n.step();
    assert_eq!((n.b.state(b), n.ev_b.len()), (None, 0));
}

#[test]
fn ack_timeout_follows_cm_ack_timeout() {
    // (ACK delay, packet life time) → Local ACK Timeout, as cm.c cm_ack_timeout rounds.
    for (delay, life, want) in [
        (15, 18, 19),
        (15, 16, 17),
        (15, 13, 16),
        (15, 14, 16),
        (0, 0, 2),
        (20, 10, 20),
        (20, 18, 21),
        (31, 31, 31),
    ] {
        assert_eq!(ack_timeout(delay, life), want, "{delay} {life}");
    }
}

#[test]
fn a_rej_ends_a_connection_into_timewait() {
    // Established: the REJ is the peer's end of it (cm.c cm_rej_handler), QP to ERR.
    let (mut n, a, b) = Net::established();
    let rej = |local: u32, remote: u32| {
        let r = rdma_cm::msg::Rej {
            local_comm_id: local,
            remote_comm_id: remote,
            message_rejected: rdma_cm::msg::msg_response::OTHER,
            reject_info_length: 0,
            reason: rej_reason::CONSUMER_DEFINED,
            ari: [0; rdma_cm::msg::REJ_ARI_LEN],
            private_data: [0; rdma_cm::msg::REJ_PRIVATE_DATA_LEN],
        };
        CmMad::new(1, CmMsg::Rej(r)).to_bytes().unwrap()
    };
    // Not naming the peer's ID: dropped.
    assert_eq!(
        n.a.on_mad(n.now, &B, &rej(0, a.0), &mut n.ta),
        Err(Dropped::UnknownConn)
    );
    assert!(matches!(
        n.a.on_mad(n.now, &B, &rej(b.0, a.0), &mut n.ta),
        Ok(Some(CmEvent::Rejected { id, reason: rej_reason::CONSUMER_DEFINED, .. })) if id == a
    ));
    assert_eq!(n.ta.moves.last(), Some(&(QP_A, QpStep::Err)));
    assert_eq!(n.a.state(a), Some(ConnState::TimeWait));
    // Again in TIMEWAIT: nothing more.
    assert_eq!(
        n.a.on_mad(n.now, &B, &rej(b.0, a.0), &mut n.ta),
        Err(Dropped::WrongState)
    );

    // Our DREQ answered with a REJ: disconnected as with a DREP.
    let (mut n, a, b) = Net::established();
    n.lose(true, attr::DREQ, 1);
    n.a.disconnect(n.now, a, &mut n.ta).unwrap();
    n.pump();
    assert_eq!(
        n.a.on_mad(n.now, &B, &rej(b.0, a.0), &mut n.ta),
        Ok(Some(CmEvent::Disconnected { id: a }))
    );
    assert_eq!(n.a.state(a), Some(ConnState::TimeWait));
}
