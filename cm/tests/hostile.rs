//! Hostile MADs into a `Cm` that has an established connection and a request pending, each
//! on its own: what Linux's MAD layer would never hand to its CM (bad base version, class,
//! class version, method, attribute, length: mad.c `validate_mad`, `find_mad_agent` for the
//! agent cm.c `cm_add_one` registers) and messages naming communication IDs the machine does
//! not have (cm.c `cm_acquire_id` finds nothing) are dropped and counted, answer nothing
//! (but a DREQ, which cm.c `cm_issue_drep` answers all the same), move no QP and change no
//! connection or timer; a storm of REQs beyond the backlog is rejected and counted, and the
//! listener takes a good connection after it.
//!
//! The fuzz tests (`fuzz.rs`) throw random mutations at the same machine; these name each
//! hostile field and the exact outcome.

mod common;

use common::{accept_on, cfg, params, Side, A, PORT, QP_A, QP_B};
use rdma_cm::conn::{Cm, CmEvent, ConnId, ConnState, Connect, Counters, Dropped, Peer};
use rdma_cm::mad::{CmError, MAD_HDR_LEN, MAD_LEN};
use rdma_cm::msg::{
    msg_response, rej_reason, Drep, Dreq, Mra, Rej, Rep, Rtu, SidrRep, DREQ_PRIVATE_DATA_LEN,
    MRA_PRIVATE_DATA_LEN, REJ_ARI_LEN, REJ_PRIVATE_DATA_LEN, REP_PRIVATE_DATA_LEN,
    RTU_PRIVATE_DATA_LEN, SIDR_REP_INFO_LEN, SIDR_REP_PRIVATE_DATA_LEN,
};
use rdma_cm::rdma_cm::PortSpace;
use rdma_cm::{CmMad, CmMsg};

/// Where every MAD comes from and goes to (one peer is enough here).
const PEER: Peer = A;
/// A communication ID neither side gave out.
const GHOST: u32 = 0x0bad_1d00;

/// A's connect to `port` from QP `qpn`.
fn connect(port: u16, qpn: u32) -> Connect<'static> {
    Connect {
        qpn,
        ..params(port, &[])
    }
}

/// A (active) connected to B (passive, listening on `PORT` with a backlog of 4), and a
/// second request of A's pending at B; the MADs of the exchange kept.
struct Pair {
    a: Cm<8>,
    b: Cm<8>,
    ta: Side,
    tb: Side,
    /// A's and B's ID of the established connection; B's ID of the pending request.
    ia: ConnId,
    ib: ConnId,
    pending: ConnId,
    req: [u8; MAD_LEN],
    rep: [u8; MAD_LEN],
    rtu: [u8; MAD_LEN],
}

fn only_event(r: Result<Option<CmEvent>, Dropped>) -> CmEvent {
    match r {
        Ok(Some(e)) => e,
        other => panic!("{other:?}"),
    }
}

impl Pair {
    fn new() -> Pair {
        let mut a = Cm::<8>::new(cfg(0x0200_00ff_fe00_0002, 0x2222_0000));
        let mut b = Cm::<8>::new(cfg(0x0200_00ff_fe00_0001, 0x1111_0000));
        b.listen(PortSpace::Tcp.service_id(PORT), 4).unwrap();
        let (mut ta, mut tb) = (Side::default(), Side::default());
        let ia = a.connect(0, &PEER, &connect(PORT, QP_A), &mut ta).unwrap();
        let req = ta.out.pop().unwrap();
        let CmEvent::ConnectRequest { id: ib, .. } = only_event(b.on_mad(0, &PEER, &req, &mut tb))
        else {
            panic!()
        };
        b.accept(0, ib, &accept_on(QP_B), &mut tb).unwrap();
        let rep = tb.out.pop().unwrap();
        assert!(matches!(
            only_event(a.on_mad(0, &PEER, &rep, &mut ta)),
            CmEvent::Established { .. }
        ));
        let rtu = ta.out.pop().unwrap();
        assert!(matches!(
            only_event(b.on_mad(0, &PEER, &rtu, &mut tb)),
            CmEvent::Established { .. }
        ));
        a.connect(0, &PEER, &connect(PORT, QP_A + 1), &mut ta)
            .unwrap();
        let req2 = ta.out.pop().unwrap();
        let CmEvent::ConnectRequest { id: pending, .. } =
            only_event(b.on_mad(0, &PEER, &req2, &mut tb))
        else {
            panic!()
        };
        ta.out.clear();
        tb.out.clear();
        ta.moves.clear();
        tb.moves.clear();
        Pair {
            a,
            b,
            ta,
            tb,
            ia,
            ib,
            pending,
            req,
            rep,
            rtu,
        }
    }

    /// What must not change: every connection's state, the next timer, the counters.
    fn snapshot(&self) -> Snapshot {
        let ids = [self.ia, self.ib, self.pending];
        Snapshot {
            a: ids.map(|i| self.a.state(i)),
            b: ids.map(|i| self.b.state(i)),
            deadlines: (self.a.next_deadline(), self.b.next_deadline()),
            counters: (self.a.counters, self.b.counters),
        }
    }
}

#[derive(Debug, PartialEq)]
struct Snapshot {
    a: [Option<ConnState>; 3],
    b: [Option<ConnState>; 3],
    deadlines: (Option<u64>, Option<u64>),
    counters: (Counters, Counters),
}

fn set(m: &[u8], at: usize, v: &[u8]) -> Vec<u8> {
    let mut m = m.to_vec();
    m[at..at + v.len()].copy_from_slice(v);
    m
}

/// Each way a MAD's header or length is wrong, and the error it is dropped with.
fn bad_headers(m: &[u8; MAD_LEN]) -> Vec<(Vec<u8>, CmError)> {
    let mut out = Vec::new();
    for v in [0u8, 2, 0xff] {
        out.push((set(m, 0, &[v]), CmError::BaseVersion(v)));
    }
    // Subnet management (LID routed, directed route), subnet administration, performance,
    // device management, the vendor range, and the response bit on the CM class.
    for v in [0x01u8, 0x81, 0x03, 0x04, 0x06, 0x09, 0x30, 0x87, 0xff] {
        out.push((set(m, 1, &[v]), CmError::Class(v)));
    }
    for v in [0u8, 1, 3, 0xff] {
        out.push((set(m, 2, &[v]), CmError::ClassVersion(v)));
    }
    // Get, Set, GetResp, Send with the response bit, Trap, and the top value.
    for v in [0x01u8, 0x02, 0x81, 0x83, 0x05, 0xff] {
        out.push((set(m, 3, &[v]), CmError::Method(v)));
    }
    // ClassPortInfo, LAP, APR (not decoded), the neighbours of the CM range, a CM
    // attribute's low byte under a high byte, and the top value.
    for v in [
        0x0000u16, 0x0001, 0x000f, 0x0019, 0x001a, 0x001b, 0x0110, 0xffff,
    ] {
        out.push((set(m, 16, &v.to_be_bytes()), CmError::Attribute(v)));
    }
    for n in [0usize, 1, MAD_HDR_LEN - 1, MAD_HDR_LEN, MAD_LEN - 1] {
        out.push((m[..n].to_vec(), CmError::Length(n)));
    }
    for n in [MAD_LEN + 1, 296, 4096] {
        let mut long = m.to_vec();
        long.resize(n, 0);
        out.push((long, CmError::Length(n)));
    }
    out
}

/// A REJ of connection `ours` from the peer `theirs`.
fn rej(theirs: u32, ours: u32, reason: u16) -> CmMsg {
    CmMsg::Rej(Rej {
        local_comm_id: theirs,
        remote_comm_id: ours,
        message_rejected: msg_response::OTHER,
        reject_info_length: 0,
        reason,
        ari: [0; REJ_ARI_LEN],
        private_data: [0; REJ_PRIVATE_DATA_LEN],
    })
}

#[test]
fn bad_class_version_method_attribute_and_length_are_dropped_and_counted() {
    let mut p = Pair::new();
    // A REQ for a port nobody listens on: clean, it gets REJ Invalid Service ID; with a bad
    // header, nothing (the MAD layer drops it before any CM sees it).
    let mut to_nobody = p.req;
    let CmMsg::Req(mut r) = CmMad::decode(&to_nobody).unwrap().msg else {
        panic!()
    };
    r.service_id = PortSpace::Tcp.service_id(9999);
    r.local_comm_id = GHOST;
    to_nobody = CmMad::new(1, CmMsg::Req(r)).to_bytes().unwrap();
    let dreq = CmMad::new(
        7,
        CmMsg::Dreq(Dreq {
            local_comm_id: p.ia.0,
            remote_comm_id: p.ib.0,
            remote_qpn_eecn: QP_B,
            private_data: [0; DREQ_PRIVATE_DATA_LEN],
        }),
    )
    .to_bytes()
    .unwrap();
    // Each seed would change something were it whole: a new request, a dup REP/RTU answered,
    // a REJ 8, a disconnect.
    let seeds = [p.req, p.rep, p.rtu, to_nobody, dreq];
    let before = p.snapshot();
    let mut dropped = 0u64;
    for seed in seeds {
        for (m, e) in bad_headers(&seed) {
            for to_b in [true, false] {
                let (cm, t) = if to_b {
                    (&mut p.b, &mut p.tb)
                } else {
                    (&mut p.a, &mut p.ta)
                };
                assert_eq!(
                    cm.on_mad(1, &PEER, &m, t),
                    Err(Dropped::Decode(e)),
                    "{m:x?}"
                );
            }
            dropped += 1;
        }
    }
    assert!(
        p.ta.out.is_empty() && p.tb.out.is_empty(),
        "nothing answered"
    );
    assert!(
        p.ta.moves.is_empty() && p.tb.moves.is_empty(),
        "no QP moved"
    );
    let mut expected = before;
    expected.counters.0.dropped += dropped;
    expected.counters.1.dropped += dropped;
    assert_eq!(p.snapshot(), expected);
    assert_eq!(dropped, 5 * 38);
    // The control: whole, the REQ to nobody is answered, and the connection still works (a
    // DREQ disconnects it).
    assert_eq!(
        p.b.on_mad(1, &PEER, &to_nobody, &mut p.tb),
        Err(Dropped::Rejected(rej_reason::INVALID_SERVICE_ID))
    );
    assert_eq!(
        p.b.on_mad(1, &PEER, &dreq, &mut p.tb),
        Ok(Some(CmEvent::Disconnected { id: p.ib }))
    );
}

#[test]
fn messages_naming_unknown_communication_ids_are_dropped_and_counted() {
    let mut p = Pair::new();
    let (ia, ib, pending) = (p.ia.0, p.ib.0, p.pending.0);
    let mad = |msg: CmMsg| CmMad::new(7, msg).to_bytes().unwrap();
    let rtu = |theirs, ours| {
        mad(CmMsg::Rtu(Rtu {
            local_comm_id: theirs,
            remote_comm_id: ours,
            private_data: [0; RTU_PRIVATE_DATA_LEN],
        }))
    };
    let drep = |theirs, ours| {
        mad(CmMsg::Drep(Drep {
            local_comm_id: theirs,
            remote_comm_id: ours,
            private_data: [0; RTU_PRIVATE_DATA_LEN],
        }))
    };
    let mra = |theirs, ours, what| {
        mad(CmMsg::Mra(Mra {
            local_comm_id: theirs,
            remote_comm_id: ours,
            message_mraed: what,
            service_timeout: 31,
            private_data: [0; MRA_PRIVATE_DATA_LEN],
        }))
    };
    let rep = |theirs, ours| {
        let CmMsg::Rep(r) = CmMad::decode(&p.rep).unwrap().msg else {
            panic!()
        };
        mad(CmMsg::Rep(Rep {
            local_comm_id: theirs,
            remote_comm_id: ours,
            private_data: [0; REP_PRIVATE_DATA_LEN],
            ..r
        }))
    };
    let sidr_rep = |id| {
        mad(CmMsg::SidrRep(SidrRep {
            request_id: id,
            status: 0,
            info_length: 0,
            vendor_id: 0,
            qpn: 5,
            service_id: 1,
            qkey: 6,
            info: [0; SIDR_REP_INFO_LEN],
            private_data: [0; SIDR_REP_PRIVATE_DATA_LEN],
        }))
    };
    use Dropped::{UnknownConn as Unknown, WrongState as Wrong};
    // Into B, the passive side (established `ib` with A's `ia`, and `pending`).
    let into_b = [
        (rtu(ia, GHOST), Unknown),
        (rtu(GHOST, ib), Unknown),
        (drep(GHOST, ib), Unknown),
        (drep(ia, GHOST), Unknown),
        (mra(ia, GHOST, msg_response::REP), Unknown),
        (mra(GHOST, ib, msg_response::REP), Unknown),
        (mra(ia, GHOST, msg_response::REQ), Unknown),
        (mad(rej(ia, GHOST, rej_reason::CONSUMER_DEFINED)), Unknown),
        // An established connection's REJ must name both IDs: not the wrong peer, not 0.
        (mad(rej(GHOST, ib, rej_reason::CONSUMER_DEFINED)), Unknown),
        (mad(rej(0, ib, rej_reason::CONSUMER_DEFINED)), Unknown),
        (rep(ia, GHOST), Unknown),
        // Our IDs, but not a connection of ours that waits for a REP.
        (rep(ia, ib), Wrong),
        (rep(GHOST, pending), Wrong),
        (sidr_rep(GHOST), Unknown),
        (sidr_rep(ib), Unknown),
    ];
    // Into A, the active side (established `ia`).
    let into_a = [
        (rtu(ib, ia), Wrong),
        (rtu(GHOST, ia), Unknown),
        (rep(GHOST, ia), Wrong),
        (rep(ib, GHOST), Unknown),
        (mra(ib, ia, msg_response::REQ), Wrong),
        (drep(ib, ia), Wrong),
        (mad(rej(GHOST, ia, rej_reason::STALE_CONN)), Unknown),
    ];
    let before = p.snapshot();
    for (m, why) in &into_b {
        assert_eq!(
            p.b.on_mad(1, &PEER, m, &mut p.tb),
            Err(*why),
            "{:?}",
            CmMad::decode(m)
        );
    }
    for (m, why) in &into_a {
        assert_eq!(
            p.a.on_mad(1, &PEER, m, &mut p.ta),
            Err(*why),
            "{:?}",
            CmMad::decode(m)
        );
    }
    // A DREQ naming a connection we do not have (our ID unknown, or the peer's wrong) is
    // answered with a DREP all the same (cm.c `cm_dreq_handler` → `cm_issue_drep`), and
    // changes nothing; one naming the connection but not our QP is dropped (cm.c
    // `cm_dreq_handler` compares the Remote QPN).
    let dreq = |theirs, ours, qpn| {
        mad(CmMsg::Dreq(Dreq {
            local_comm_id: theirs,
            remote_comm_id: ours,
            remote_qpn_eecn: qpn,
            private_data: [0; DREQ_PRIVATE_DATA_LEN],
        }))
    };
    for m in [dreq(GHOST, ib, QP_B), dreq(ia, GHOST, QP_B)] {
        assert_eq!(p.b.on_mad(1, &PEER, &m, &mut p.tb), Err(Unknown));
        let CmMsg::Drep(d) = CmMad::decode(&p.tb.out.pop().unwrap()).unwrap().msg else {
            panic!()
        };
        let CmMsg::Dreq(q) = CmMad::decode(&m).unwrap().msg else {
            panic!()
        };
        assert_eq!(
            (d.local_comm_id, d.remote_comm_id),
            (q.remote_comm_id, q.local_comm_id)
        );
    }
    assert_eq!(
        p.b.on_mad(1, &PEER, &dreq(ia, ib, QP_B + 7), &mut p.tb),
        Err(Wrong)
    );
    assert!(
        p.ta.out.is_empty() && p.tb.out.is_empty(),
        "nothing else answered"
    );
    assert!(
        p.ta.moves.is_empty() && p.tb.moves.is_empty(),
        "no QP moved"
    );
    let mut expected = before;
    expected.counters.0.dropped += into_a.len() as u64;
    expected.counters.1.dropped += into_b.len() as u64 + 3;
    assert_eq!(p.snapshot(), expected);
}

/// B's REQ storm: `n` REQs like `req`, each with its own communication ID from `first`.
fn storm(req: &[u8; MAD_LEN], first: u32, n: u32) -> Vec<[u8; MAD_LEN]> {
    let CmMsg::Req(r) = CmMad::decode(req).unwrap().msg else {
        panic!()
    };
    (first..first + n)
        .map(|id| {
            let mut r = r;
            r.local_comm_id = id;
            CmMad::new(u64::from(id), CmMsg::Req(r)).to_bytes().unwrap()
        })
        .collect()
}

#[test]
fn a_req_storm_beyond_the_backlog_is_rejected_counted_and_the_listener_recovers() {
    const BACKLOG: usize = 4;
    const STORM: u32 = 200;
    let mut b = Cm::<16>::new(cfg(0x0200_00ff_fe00_0001, 0x1111_0000));
    b.listen(PortSpace::Tcp.service_id(PORT), BACKLOG).unwrap();
    let mut a = Cm::<8>::new(cfg(0x0200_00ff_fe00_0002, 0x2222_0000));
    let (mut ta, mut tb) = (Side::default(), Side::default());
    a.connect(0, &PEER, &connect(PORT, QP_A), &mut ta).unwrap();
    let template = ta.out.pop().unwrap();
    let mads = storm(&template, 0x1000, STORM);
    let mut requests = Vec::new();
    for m in &mads {
        match b.on_mad(0, &PEER, m, &mut tb) {
            Ok(Some(CmEvent::ConnectRequest { id, .. })) => requests.push(id),
            Err(Dropped::Rejected(rej_reason::CONSUMER_DEFINED)) => {}
            other => panic!("{other:?}"),
        }
    }
    let refused = STORM as u64 - BACKLOG as u64;
    assert_eq!(requests.len(), BACKLOG);
    assert_eq!(b.counters.rej_sent, refused);
    assert_eq!(b.counters.dropped, refused);
    // Each REJ answers its own REQ: its exchange, its ID, no ID of ours (cm.c
    // `cm_issue_rej`).
    assert_eq!(tb.out.len() as u64, refused);
    for (m, sent) in mads[BACKLOG..].iter().zip(&tb.out) {
        let (req, rej) = (CmMad::decode(m).unwrap(), CmMad::decode(sent).unwrap());
        let (CmMsg::Req(req_msg), CmMsg::Rej(rej_msg)) = (req.msg, rej.msg) else {
            panic!()
        };
        assert_eq!(rej.hdr.tid, req.hdr.tid);
        assert_eq!(
            (
                rej_msg.remote_comm_id,
                rej_msg.local_comm_id,
                rej_msg.reason
            ),
            (req_msg.local_comm_id, 0, rej_reason::CONSUMER_DEFINED)
        );
    }
    tb.out.clear();
    // The storm again: the pending requests are duplicates (an MRA each, cm.c
    // `cm_dup_req_handler`), the others are refused again; nothing holds a timer.
    for m in &mads {
        let _ = b.on_mad(1, &PEER, m, &mut tb);
    }
    assert_eq!(b.counters.duplicate_reqs, BACKLOG as u64);
    assert_eq!(b.counters.rej_sent, 2 * refused);
    let mras = tb
        .out
        .iter()
        .filter(|m| matches!(CmMad::decode(*m).unwrap().msg, CmMsg::Mra(_)))
        .count();
    assert_eq!(mras, BACKLOG);
    assert_eq!(b.next_deadline(), None);
    // Still full: a good REQ is refused too.
    let ia = a
        .connect(2, &PEER, &connect(PORT, QP_A + 1), &mut ta)
        .unwrap();
    let req = ta.out.pop().unwrap();
    assert_eq!(
        b.on_mad(2, &PEER, &req, &mut tb),
        Err(Dropped::Rejected(rej_reason::CONSUMER_DEFINED))
    );
    let rej_of_good = tb.out.pop().unwrap();
    assert!(matches!(
        a.on_mad(2, &PEER, &rej_of_good, &mut ta),
        Ok(Some(CmEvent::Rejected { id, reason: rej_reason::CONSUMER_DEFINED, .. })) if id == ia
    ));
    // The application answers the storm's requests: the listener is free again and a good
    // connect goes through.
    for id in requests {
        b.reject(id, &[], &mut tb).unwrap();
    }
    let ia = a
        .connect(3, &PEER, &connect(PORT, QP_A + 2), &mut ta)
        .unwrap();
    let req = ta.out.pop().unwrap();
    let CmEvent::ConnectRequest { id: ib, .. } = only_event(b.on_mad(3, &PEER, &req, &mut tb))
    else {
        panic!()
    };
    b.accept(3, ib, &accept_on(QP_B), &mut tb).unwrap();
    let rep = tb.out.pop().unwrap();
    assert!(matches!(
        only_event(a.on_mad(3, &PEER, &rep, &mut ta)),
        CmEvent::Established { id, .. } if id == ia
    ));
    let rtu = ta.out.pop().unwrap();
    assert!(matches!(
        only_event(b.on_mad(3, &PEER, &rtu, &mut tb)),
        CmEvent::Established { id, .. } if id == ib
    ));
}
