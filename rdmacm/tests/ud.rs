//! UD services between two nodes (udaddy's exchange): a SIDR_REQ to a UD port B listens on,
//! B's answer with a UD QP and rdma_cm's Q_Key, A's datagram to that QP through the address
//! handle of the answer, B's datagram back through an address handle of its own; a SIDR_REQ
//! to a port nobody listens on is unreachable; a datagram to QP 1 longer than a MAD does not
//! stop the CM.

mod common;

use common::*;
use mlx5::{QpCaps, RecvWr, SendData, SendFlags, SendOp, SendWr, UdDest, GRH_BYTES};
use rdma_cm::rdma_cm::UDP_QKEY;
use rdmacm::{Event, PortSpace};

const PORT: u16 = 7174;

type Qp = mlx5::QueuePair<common::sim::TestHal>;

fn ud_qp(n: &Node) -> Qp {
    n.pd.create_ud_qp(&n.cq, &n.cq, &QpCaps::default(), UDP_QKEY)
        .expect("ud qp")
}

/// Posts receive slot `slot` (the GRH area and 216 bytes) on `qp`.
fn post_recv(n: &Node, qp: &mut Qp, slot: u64) {
    let s = [n.mr.sge(slot * 256, 256)];
    qp.post_recv(&[RecvWr {
        wr_id: slot,
        sges: &s,
    }])
    .unwrap();
}

fn send_ud(qp: &mut Qp, dest: &UdDest<'_>, data: &[u8]) {
    qp.post_ud_send(
        &SendWr {
            wr_id: 100,
            op: SendOp::Send { imm: None },
            data: SendData::Inline(data),
            flags: SendFlags::SIGNALED,
        },
        dest,
    )
    .unwrap();
}

#[test]
fn sidr_resolves_a_ud_service_and_datagrams_cross_both_ways() {
    let (mut a, mut b, clock) = nodes();
    b.cm.listen(PortSpace::Udp, PORT, 4).unwrap();
    let ia =
        a.cm.ud_resolve(clock.now(), IP_B, PORT, b"udaddy", &mut a.stack)
            .unwrap();
    let mut req = None;
    run(&mut a, &mut b, &clock, |_, b| {
        req = b.take(|e| match e {
            Event::UdRequest {
                id,
                remote_ip,
                private_data,
            } => Some((*id, *remote_ip, private_data.clone())),
            _ => None,
        });
        req.is_some()
    });
    let (ib, remote_ip, pd) = req.unwrap();
    assert_eq!(remote_ip, IP_A);
    assert_eq!(&pd[..6], b"udaddy");
    let mut qb = ud_qp(&b);
    post_recv(&b, &mut qb, 0);
    b.cm.ud_accept(
        clock.now(),
        ib,
        qb.qpn(),
        UDP_QKEY,
        b"service",
        &mut b.stack,
    )
    .unwrap();
    let mut got = None;
    run(&mut a, &mut b, &clock, |a, _| {
        got = a.take(|e| match e {
            Event::UdResolved {
                id,
                qpn,
                qkey,
                ah,
                private_data,
            } if *id == ia => Some((*qpn, *qkey, *ah, private_data.clone())),
            _ => None,
        });
        got.is_some()
    });
    let (qpn, qkey, ah, pd) = got.unwrap();
    assert_eq!((qpn, qkey), (qb.qpn(), UDP_QKEY));
    assert_eq!(&pd[..7], b"service");

    // A's datagram to B's service QP.
    let mut qa = ud_qp(&a);
    post_recv(&a, &mut qa, 0);
    let dest = UdDest {
        ah: &ah,
        remote_qpn: qpn,
        remote_qkey: qkey,
    };
    send_ud(&mut qa, &dest, b"datagram to B");
    let w = one_wc(&mut a, &mut b, &clock, false);
    assert_eq!(w.byte_len as usize, GRH_BYTES + 13);
    assert_eq!(w.src_qp, qa.qpn());
    assert_eq!(&b.slot(0, GRH_BYTES + 13)[GRH_BYTES..], b"datagram to B");
    one_wc(&mut a, &mut b, &clock, true);

    // B answers through an address handle toward A's address.
    let ah_b = b.cm.create_ah(IP_A, &mut b.stack).unwrap();
    let dest = UdDest {
        ah: &ah_b,
        remote_qpn: w.src_qp,
        remote_qkey: UDP_QKEY,
    };
    send_ud(&mut qb, &dest, b"back to A");
    one_wc(&mut a, &mut b, &clock, false);
    let w = one_wc(&mut a, &mut b, &clock, true);
    assert_eq!(w.src_qp, qb.qpn());
    assert_eq!(&a.slot(0, GRH_BYTES + 9)[GRH_BYTES..], b"back to A");

    a.cm.destroy_id(clock.now(), ia, &mut a.stack).unwrap();
    b.cm.destroy_id(clock.now(), ib, &mut b.stack).unwrap();
    assert_eq!(a.cm.counts(), (0, 0));
    assert_eq!(b.cm.counts(), (0, 0));
}

#[test]
fn a_repeated_sidr_req_is_one_request() {
    let (mut a, mut b, clock) = nodes();
    b.cm.listen(PortSpace::Udp, PORT, 4).unwrap();
    let ia =
        a.cm.ud_resolve(clock.now(), IP_B, PORT, &[], &mut a.stack)
            .unwrap();
    run(&mut a, &mut b, &clock, |_, b| !b.events.is_empty());
    // B thinks; A's SIDR_REQ is sent again (rdma_cm's response timeout, ~4 s, each time).
    let sent = a.cm.gsi_counters().sent;
    for _ in 0..3 {
        clock.advance(4_300_000_000);
        a.step(&clock);
    }
    assert_eq!(a.cm.gsi_counters().sent, sent + 3);
    run(&mut a, &mut b, &clock, |_, b| {
        b.cm.gsi_counters().received >= 4
    });
    let requests: Vec<_> = b
        .events
        .iter()
        .filter(|e| matches!(e, Event::UdRequest { .. }))
        .collect();
    assert_eq!(requests.len(), 1, "{:?}", b.events);
    let Event::UdRequest { id: ib, .. } = requests[0].clone() else {
        unreachable!()
    };
    b.cm.ud_accept(clock.now(), ib, 0x99, UDP_QKEY, &[], &mut b.stack)
        .unwrap();
    run(&mut a, &mut b, &clock, |a, _| {
        a.take(|e| matches!(e, Event::UdResolved { id, qpn: 0x99, .. } if *id == ia).then_some(()))
            .is_some()
    });
}

#[test]
fn a_ud_request_destroyed_unanswered_is_refused() {
    let (mut a, mut b, clock) = nodes();
    b.cm.listen(PortSpace::Udp, PORT, 4).unwrap();
    let ia =
        a.cm.ud_resolve(clock.now(), IP_B, PORT, &[], &mut a.stack)
            .unwrap();
    let mut ib = None;
    run(&mut a, &mut b, &clock, |_, b| {
        ib = b.take(|e| match e {
            Event::UdRequest { id, .. } => Some(*id),
            _ => None,
        });
        ib.is_some()
    });
    // cm.c `cm_destroy_id` answers a SIDR_REQ still pending with status Reject: the
    // requester hears at once, without waiting out its retries.
    b.cm.destroy_id(clock.now(), ib.unwrap(), &mut b.stack)
        .unwrap();
    run(&mut a, &mut b, &clock, |a, _| {
        a.take(|e| matches!(e, Event::Unreachable { id } if *id == ia).then_some(()))
            .is_some()
    });
    assert_eq!(b.cm.counts(), (0, 0));
}

#[test]
fn sidr_to_a_port_nobody_listens_on_is_unreachable() {
    let (mut a, mut b, clock) = nodes();
    let ia =
        a.cm.ud_resolve(clock.now(), IP_B, PORT, &[], &mut a.stack)
            .unwrap();
    run(&mut a, &mut b, &clock, |a, _| {
        a.take(|e| matches!(e, Event::Unreachable { id } if *id == ia).then_some(()))
            .is_some()
    });
    // The id stays until destroyed; nothing else was made.
    assert_eq!(a.cm.counts(), (1, 0));
    assert_eq!(b.cm.counts(), (0, 0));
}

#[test]
fn a_datagram_longer_than_a_mad_does_not_stop_the_cm() {
    // 1000 bytes to B's QP 1 with the GSI Q_Key: longer than QP 1's path MTU (256, the
    // driver's for the GSI QP, drivers/mlx5/src/qp/gsi.rs), so B's device drops it and counts
    // it (the model's `rx_drop_ud_length`, as rxe_resp.c `check_length`) before QP 1's
    // receives or the GSI service see it; QP 1 stays in RTS and a connection still works.
    let (mut a, mut b, clock) = nodes();
    b.cm.listen(PortSpace::Tcp, PORT, 4).unwrap();
    let mac_b = b.stack.mac();
    // A Q_Key with the high bit set in a WR means the QP's own (IBTA §10.2.4): a UD QP whose
    // own is the GSI's reaches QP 1.
    let mut qa =
        a.pd.create_ud_qp(&a.cq, &a.cq, &QpCaps::default(), mlx5::GSI_QKEY)
            .unwrap();
    let ah =
        a.pd.create_ah(&mlx5::AhAttr {
            dgid: mlx5::hca::ipv4_mapped_gid(IP_B),
            dmac: mac_b,
            sgid_index: 1,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        })
        .unwrap();
    let big = a.mr.sge(0, 1000);
    qa.post_ud_send(
        &SendWr {
            wr_id: 1,
            op: SendOp::Send { imm: None },
            data: SendData::Sges(&[big]),
            flags: SendFlags::SIGNALED,
        },
        &UdDest {
            ah: &ah,
            remote_qpn: mlx5::GSI_QPN,
            remote_qkey: mlx5::GSI_QKEY,
        },
    )
    .unwrap();
    one_wc(&mut a, &mut b, &clock, true);
    run(&mut a, &mut b, &clock, |_, b| b.ud_length_drops() == 1);
    let g = b.cm.gsi_counters();
    assert_eq!((g.received, g.bad_receives, g.restarts), (0, 0, 0));
    let (ia, ib) = request(&mut a, &mut b, &clock, PORT);
    b.create_qp(ib);
    b.cm.accept(clock.now(), ib, &rdmacm::ConnParam::default(), &mut b.stack)
        .unwrap();
    run(&mut a, &mut b, &clock, |a, _| {
        a.take(|e| matches!(e, Event::Established { id, .. } if *id == ia).then_some(()))
            .is_some()
    });
}
