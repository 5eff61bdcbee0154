//! Connections between two nodes, each an emulated HCA with an IP stack and an `RdmaCm`:
//! ARP, REQ/REP/RTU over both GSI QPs, SENDs both ways on the connected RC QPs, DREQ/DREP,
//! TIMEWAIT, and the ways a connection does not happen (REJ for a port nobody listens on, a
//! full backlog, a peer that never answers).

mod common;

use common::*;
use rdma_cm::msg::rej_reason;
use rdmacm::{CmError, CmId, ConnParam, Event, PortSpace};

const PORT: u16 = 7174;

/// The CM's TIMEWAIT and retries, all over: 16 tries of rdma_cm's ~4 s response timeout.
const ALL_RETRIES_NS: u64 = 16 * 4_300_000_000;

/// A connects to B's `PORT`; B accepts. Both ids, established, with a receive posted each.
fn connected(a: &mut Node, b: &mut Node, clock: &CmClock) -> (CmId, CmId) {
    b.cm.listen(PortSpace::Tcp, PORT, 4).unwrap();
    let p = ConnParam {
        private_data: b"hello from A",
        ..ConnParam::default()
    };
    let ia = a.connect(clock, IP_B, PORT, &p).unwrap();
    a.post_recv(ia, 0);
    let mut req = None;
    run(a, b, clock, |_, b| {
        req = b.take(|e| match e {
            Event::ConnectRequest { .. } => Some(e.clone()),
            _ => None,
        });
        req.is_some()
    });
    let Some(Event::ConnectRequest {
        id: ib,
        private_data,
        remote_ip,
        ..
    }) = req
    else {
        unreachable!()
    };
    assert_eq!(remote_ip, IP_A);
    assert_eq!(&private_data[..12], b"hello from A");
    assert_eq!(private_data.len(), rdmacm::CONNECT_PRIVATE_DATA_MAX);
    b.create_qp(ib);
    b.post_recv(ib, 0);
    let p = ConnParam {
        private_data: b"welcome",
        ..ConnParam::default()
    };
    b.cm.accept(clock.now(), ib, &p, &mut b.stack).unwrap();
    let (mut ea, mut eb) = (None, false);
    run(a, b, clock, |a, b| {
        if ea.is_none() {
            ea = a.take(|e| match e {
                Event::Established { id, private_data } if *id == ia => Some(private_data.clone()),
                _ => None,
            });
        }
        eb = eb
            || b.take(|e| matches!(e, Event::Established { id, .. } if *id == ib).then_some(()))
                .is_some();
        ea.is_some() && eb
    });
    let pd_a = ea.unwrap();
    assert_eq!(&pd_a[..7], b"welcome");
    assert_eq!(pd_a.len(), rdma_cm::msg::REP_PRIVATE_DATA_LEN);
    (ia, ib)
}

#[test]
fn connect_accept_send_both_ways_disconnect_and_both_qps_are_gone() {
    let (mut a, mut b, clock) = nodes();
    let (ia, ib) = connected(&mut a, &mut b, &clock);
    assert_eq!(a.cm.remote_ip(ia), Some(IP_B));
    assert_eq!(b.cm.remote_ip(ib), Some(IP_A));

    // The QPs as the exchange left them (QUERY_QP): each one's send PSN the other's receive
    // PSN (REQ and REP Starting PSNs, cm.c `cm_init_qp_rtr_attr` / `cm_init_qp_rts_attr`),
    // path MTU 1024, minimum RNR timer 0, rping's retries, the REQ's ACK timeout.
    let qa = a.cm.qp(ia).unwrap().query().unwrap();
    let qb = b.cm.qp(ib).unwrap().query().unwrap();
    assert_eq!(qa.dest_qp_num, b.cm.qp(ib).unwrap().qpn());
    assert_eq!(qb.dest_qp_num, a.cm.qp(ia).unwrap().qpn());
    assert_eq!(qa.sq_psn, qb.rq_psn);
    assert_eq!(qb.sq_psn, qa.rq_psn);
    for q in [&qa, &qb] {
        assert_eq!(q.state, 3, "RTS");
        assert_eq!(q.path_mtu, 3);
        assert_eq!(q.min_rnr_timer, 0);
        assert_eq!((q.retry_cnt, q.rnr_retry), (7, 7));
        assert_eq!((q.max_rd_atomic, q.max_dest_rd_atomic), (1, 1));
    }
    assert_eq!(
        qb.timeout, 19,
        "cm.c cm_ack_timeout(ack delay, rdma_cm's packet life time 18)"
    );

    // A SEND each way on the connected QPs.
    a.send(ia, b"ping over rdma_cm");
    let sent = one_wc(&mut a, &mut b, &clock, true);
    assert_eq!(sent.opcode, mlx5::WcOpcode::Send);
    let got = one_wc(&mut a, &mut b, &clock, false);
    assert_eq!((got.opcode, got.byte_len), (mlx5::WcOpcode::Recv, 17));
    assert_eq!(b.slot(0, 17), b"ping over rdma_cm");
    b.send(ib, b"pong");
    one_wc(&mut a, &mut b, &clock, false);
    let w = one_wc(&mut a, &mut b, &clock, true);
    assert_eq!(w.byte_len, 4);
    assert_eq!(a.slot(0, 4), b"pong");

    // A disconnects: both hear it, both go through TIMEWAIT.
    a.cm.disconnect(clock.now(), ia, &mut a.stack).unwrap();
    let (mut da, mut db) = (false, false);
    run(&mut a, &mut b, &clock, |a, b| {
        da = da
            || a.take(|e| matches!(e, Event::Disconnected { id } if *id == ia).then_some(()))
                .is_some();
        db = db
            || b.take(|e| matches!(e, Event::Disconnected { id } if *id == ib).then_some(()))
                .is_some();
        da && db
    });
    clock.advance(ALL_RETRIES_NS);
    let (mut ta, mut tb) = (false, false);
    run(&mut a, &mut b, &clock, |a, b| {
        ta = ta
            || a.take(|e| matches!(e, Event::TimewaitExit { id } if *id == ia).then_some(()))
                .is_some();
        tb = tb
            || b.take(|e| matches!(e, Event::TimewaitExit { id } if *id == ib).then_some(()))
                .is_some();
        ta && tb
    });
    a.cm.destroy_id(clock.now(), ia, &mut a.stack).unwrap();
    b.cm.destroy_id(clock.now(), ib, &mut b.stack).unwrap();
    assert_eq!(a.cm.counts(), (0, 0));
    assert_eq!(b.cm.counts(), (0, 0));
    assert_eq!(
        a.cm.destroy_id(clock.now(), ia, &mut a.stack),
        Err(CmError::NoSuchId)
    );
    // Every MAD went out (none waited for a MAC in vain), none came in broken.
    for n in [&a, &b] {
        let g = n.cm.gsi_counters();
        assert_eq!(
            (g.dropped, g.bad_receives, g.send_errors),
            (0, 0, 0),
            "{g:?}"
        );
    }
}

#[test]
fn destroying_an_established_id_disconnects_and_its_qp_waits_out_timewait() {
    let (mut a, mut b, clock) = nodes();
    let (ia, ib) = connected(&mut a, &mut b, &clock);
    // cm.c `cm_destroy_id` in ESTABLISHED: one DREQ, then TIMEWAIT; the QP's number stays
    // taken until it ends.
    a.cm.destroy_id(clock.now(), ia, &mut a.stack).unwrap();
    assert_eq!(a.cm.counts(), (0, 1));
    run(&mut a, &mut b, &clock, |_, b| {
        b.take(|e| matches!(e, Event::Disconnected { id } if *id == ib).then_some(()))
            .is_some()
    });
    clock.advance(ALL_RETRIES_NS);
    run(&mut a, &mut b, &clock, |a, b| {
        b.events
            .iter()
            .any(|e| matches!(e, Event::TimewaitExit { id } if *id == ib))
            && a.cm.counts() == (0, 0)
    });
    assert!(
        a.events.is_empty(),
        "no event for a destroyed id: {:?}",
        a.events
    );
    b.cm.destroy_id(clock.now(), ib, &mut b.stack).unwrap();
    assert_eq!(b.cm.counts(), (0, 0));
}

#[test]
fn an_accept_waits_for_the_peers_mac() {
    // A knows B statically and never ARPs: B hears of A first in the REQ, and its accept
    // asks by ARP before the QP moves and the REP goes.
    let (mut a, mut b, clock) = nodes();
    let mac_b = b.stack.mac();
    a.stack.add_neighbour(IP_B.into(), mac_b);
    let (ia, ib) = connected(&mut a, &mut b, &clock);
    // B's one frame of its own was its ARP request; it learned A from the reply.
    assert_eq!(b.stack.stats().tx_frames, 1);
    assert_eq!(a.stack.stats().tx_frames, 1, "A sent only the ARP reply");
    assert_eq!(b.stack.neighbour(IP_A.into()), Some(a.stack.mac()));
    a.send(ia, b"after arp");
    one_wc(&mut a, &mut b, &clock, true);
    let w = one_wc(&mut a, &mut b, &clock, false);
    assert_eq!(w.byte_len, 9);
    let _ = ib;
}

#[test]
fn a_port_nobody_listens_on_is_rejected_with_reason_8() {
    let (mut a, mut b, clock) = nodes();
    let ia = a
        .connect(&clock, IP_B, 9999, &ConnParam::default())
        .unwrap();
    let mut reason = None;
    run(&mut a, &mut b, &clock, |a, _| {
        reason = a.take(|e| match e {
            Event::Rejected { id, reason, .. } if *id == ia => Some(*reason),
            _ => None,
        });
        reason.is_some()
    });
    assert_eq!(reason, Some(rej_reason::INVALID_SERVICE_ID));
    assert_eq!(b.cm.cm_counters().rej_sent, 1);
    a.cm.destroy_id(clock.now(), ia, &mut a.stack).unwrap();
    assert_eq!(a.cm.counts(), (0, 0));
    assert_eq!(b.cm.counts(), (0, 0));
}

#[test]
fn requests_beyond_the_backlog_are_rejected() {
    let (mut a, mut b, clock) = nodes();
    b.cm.listen(PortSpace::Tcp, PORT, 1).unwrap();
    assert_eq!(
        b.cm.listen(PortSpace::Tcp, PORT + 1, 0),
        Err(CmError::Backlog(0))
    );
    assert_eq!(
        b.cm.listen(PortSpace::Tcp, PORT + 1, 1025),
        Err(CmError::Backlog(1025))
    );
    let first = a
        .connect(&clock, IP_B, PORT, &ConnParam::default())
        .unwrap();
    // The first is pending at B (not answered) before the second comes.
    run(&mut a, &mut b, &clock, |_, b| {
        b.events
            .iter()
            .any(|e| matches!(e, Event::ConnectRequest { .. }))
    });
    let second = a
        .connect(&clock, IP_B, PORT, &ConnParam::default())
        .unwrap();
    let mut reason = None;
    run(&mut a, &mut b, &clock, |a, _| {
        reason = a.take(|e| match e {
            Event::Rejected { id, reason, .. } if *id == second => Some(*reason),
            _ => None,
        });
        reason.is_some()
    });
    assert_eq!(reason, Some(rej_reason::CONSUMER_DEFINED));
    // The first is still waiting for B's answer.
    assert!(a
        .events
        .iter()
        .all(|e| !matches!(e, Event::Rejected { id, .. } if *id == first)));
    assert_eq!(b.cm.counts().0, 1, "only the first made an id");
}

/// Steps `n` (and only the IP stack of `other`) with the CM's clock advancing half a second
/// per step, until `n` hears `want` of `id`.
fn until_event(n: &mut Node, other: &mut Node, clock: &CmClock, want: impl Fn(&Event) -> bool) {
    let t0 = std::time::Instant::now();
    loop {
        other.stack.poll();
        n.step(clock);
        if n.take(|e| want(e).then_some(())).is_some() {
            return;
        }
        clock.advance(500_000_000);
        assert!(t0.elapsed().as_secs() < 20, "{:?}", n.events);
    }
}

fn until_timed_out(n: &mut Node, other: &mut Node, clock: &CmClock, id: CmId) {
    until_event(
        n,
        other,
        clock,
        |e| matches!(e, Event::Unreachable { id: i } if *i == id),
    );
}

#[test]
fn a_peer_gone_while_connected_is_disconnected_after_the_dreq_retries() {
    let (mut a, mut b, clock) = nodes();
    let (ia, _ib) = connected(&mut a, &mut b, &clock);
    // B's CM is not polled any more: A's DREQ goes unanswered through its retries.
    let sent = a.cm.gsi_counters().sent;
    a.cm.disconnect(clock.now(), ia, &mut a.stack).unwrap();
    until_event(
        &mut a,
        &mut b,
        &clock,
        |e| matches!(e, Event::Disconnected { id } if *id == ia),
    );
    assert_eq!(
        a.cm.gsi_counters().sent - sent,
        16,
        "the DREQ and 15 retries"
    );
    until_event(
        &mut a,
        &mut b,
        &clock,
        |e| matches!(e, Event::TimewaitExit { id } if *id == ia),
    );
    a.cm.destroy_id(clock.now(), ia, &mut a.stack).unwrap();
    assert_eq!(a.cm.counts(), (0, 0));
}

#[test]
fn an_unanswered_req_times_out_and_the_qp_is_destroyed() {
    let (mut a, mut b, clock) = nodes();
    b.cm.listen(PortSpace::Tcp, PORT, 4).unwrap();
    // B's stack answers ARP, but its CM is not polled: A's REQ goes unanswered.
    let ia = a
        .connect(&clock, IP_B, PORT, &ConnParam::default())
        .unwrap();
    // ARP first, in real time (the resolution's deadline is the CM clock's).
    let t0 = std::time::Instant::now();
    while a.cm.gsi_counters().sent == 0 {
        b.stack.poll();
        a.step(&clock);
        assert!(t0.elapsed().as_secs() < 20, "{:?}", a.events);
    }
    until_timed_out(&mut a, &mut b, &clock, ia);
    // Every REQ went out: the first and 15 retries (rdma_cm's CMA_MAX_CM_RETRIES).
    assert_eq!(a.cm.gsi_counters().sent, 16);
    assert_eq!(a.cm.counts(), (1, 1));
    a.cm.destroy_id(clock.now(), ia, &mut a.stack).unwrap();
    assert_eq!(a.cm.counts(), (0, 0));
}

#[test]
fn an_unanswered_rep_times_out_and_the_qp_is_destroyed() {
    // B accepts, A vanishes before its RTU: B's REP goes unanswered.
    let (mut a, mut b, clock) = nodes();
    b.cm.listen(PortSpace::Tcp, PORT, 4).unwrap();
    let (ia, ib) = request(&mut a, &mut b, &clock, PORT);
    b.create_qp(ib);
    b.cm.accept(clock.now(), ib, &ConnParam::default(), &mut b.stack)
        .unwrap();
    until_timed_out(&mut b, &mut a, &clock, ib);
    assert_eq!(b.cm.counts(), (1, 1));
    // The CM let go of the connection when it gave up: the QP goes at once.
    b.cm.destroy_id(clock.now(), ib, &mut b.stack).unwrap();
    assert_eq!(b.cm.counts(), (0, 0));
    // A's REQ is still being retried (A was never polled): destroying the id cancels it
    // (cm.c `cm_destroy_id`: REJ Timeout) and its QP goes at once, with no event after.
    let rej = a.cm.cm_counters().rej_sent;
    a.cm.destroy_id(clock.now(), ia, &mut a.stack).unwrap();
    assert_eq!(a.cm.cm_counters().rej_sent, rej + 1);
    assert_eq!(a.cm.counts(), (0, 0));
    for _ in 0..20 {
        clock.advance(ALL_RETRIES_NS / 16);
        a.step(&clock);
    }
    assert!(
        a.events.is_empty(),
        "no event for a destroyed id: {:?}",
        a.events
    );
}

#[test]
fn a_rejection_by_the_application_carries_its_private_data() {
    let (mut a, mut b, clock) = nodes();
    b.cm.listen(PortSpace::Tcp, PORT, 4).unwrap();
    let (ia, ib) = request(&mut a, &mut b, &clock, PORT);
    assert_eq!(
        b.cm.reject(clock.now(), ib, &[0; 149], &mut b.stack),
        Err(CmError::PrivateData(148))
    );
    b.cm.reject(clock.now(), ib, b"not now", &mut b.stack)
        .unwrap();
    // Once answered, the request cannot be answered again.
    assert_eq!(
        b.cm.accept(clock.now(), ib, &ConnParam::default(), &mut b.stack),
        Err(CmError::WrongState)
    );
    let mut got = None;
    run(&mut a, &mut b, &clock, |a, _| {
        got = a.take(|e| match e {
            Event::Rejected {
                id,
                reason,
                private_data,
            } if *id == ia => Some((*reason, private_data.clone())),
            _ => None,
        });
        got.is_some()
    });
    let (reason, pd) = got.unwrap();
    assert_eq!(reason, rej_reason::CONSUMER_DEFINED);
    assert_eq!(&pd[..7], b"not now");
    for (n, id) in [(&mut a, ia), (&mut b, ib)] {
        n.cm.destroy_id(clock.now(), id, &mut n.stack).unwrap();
        assert_eq!(n.cm.counts(), (0, 0));
    }
}

#[test]
fn several_connections_at_once_each_carry_their_own_data() {
    const N: usize = 4;
    let (mut a, mut b, clock) = nodes();
    b.cm.listen(PortSpace::Tcp, PORT, N).unwrap();
    let ias: Vec<CmId> = (0..N)
        .map(|k| {
            let p = ConnParam {
                private_data: &[k as u8],
                ..ConnParam::default()
            };
            let id = a.connect(&clock, IP_B, PORT, &p).unwrap();
            a.post_recv(id, k as u64);
            id
        })
        .collect();
    // B accepts each request, its QP's receive in the slot the private data names.
    let mut pairs = Vec::new();
    run(&mut a, &mut b, &clock, |_, b| {
        while let Some((ib, k)) = b.take(|e| match e {
            Event::ConnectRequest {
                id, private_data, ..
            } => Some((*id, private_data[0] as usize)),
            _ => None,
        }) {
            b.create_qp(ib);
            b.post_recv(ib, k as u64);
            b.cm.accept(clock.now(), ib, &ConnParam::default(), &mut b.stack)
                .unwrap();
            pairs.push((ias[k], ib, k));
        }
        pairs.len() == N
    });
    let mut est = 0;
    run(&mut a, &mut b, &clock, |a, b| {
        for n in [a, b] {
            while n
                .take(|e| matches!(e, Event::Established { .. }).then_some(()))
                .is_some()
            {
                est += 1;
            }
        }
        est == 2 * N
    });
    for &(ia, _, k) in &pairs {
        a.send(ia, &[0xa0 + k as u8; 8]);
    }
    let mut got = 0;
    run(&mut a, &mut b, &clock, |a, b| {
        while a.poll_cq().is_some() {}
        while let Some(w) = b.poll_cq() {
            assert_eq!(w.status, mlx5::WcStatus::Success);
            got += 1;
        }
        got == N
    });
    for &(_, _, k) in &pairs {
        assert_eq!(b.slot(k as u64, 8), [0xa0 + k as u8; 8], "connection {k}");
    }
    for &(ia, ib, _) in &pairs {
        a.cm.destroy_id(clock.now(), ia, &mut a.stack).unwrap();
        b.cm.destroy_id(clock.now(), ib, &mut b.stack).unwrap();
    }
    clock.advance(ALL_RETRIES_NS);
    run(&mut a, &mut b, &clock, |a, b| {
        a.cm.counts() == (0, 0) && b.cm.counts() == (0, 0)
    });
}

#[test]
fn data_before_the_rtu_establishes_the_passive_side() {
    // A's RTU and first SEND leave before B's CM looks at QP 1 again: B's QP takes the SEND
    // (it is in RTS since the accept), the application tells the CM, and ESTABLISHED comes
    // without the RTU, which is dropped when it is read.
    let (mut a, mut b, clock) = nodes();
    b.cm.listen(PortSpace::Tcp, PORT, 4).unwrap();
    let (ia, ib) = request(&mut a, &mut b, &clock, PORT);
    a.post_recv(ia, 0);
    b.create_qp(ib);
    b.post_recv(ib, 0);
    b.cm.accept(clock.now(), ib, &ConnParam::default(), &mut b.stack)
        .unwrap();
    let t0 = std::time::Instant::now();
    while a
        .take(|e| matches!(e, Event::Established { id, .. } if *id == ia).then_some(()))
        .is_none()
    {
        b.stack.poll();
        a.step(&clock);
        assert!(t0.elapsed().as_secs() < 20, "{:?}", a.events);
    }
    a.send(ia, b"early");
    let mut got = None;
    while got.is_none() {
        b.stack.poll();
        a.stack.poll();
        got = b.poll_cq();
        assert!(t0.elapsed().as_secs() < 20);
    }
    assert_eq!(got.unwrap().byte_len, 5);
    assert_eq!(b.cm.notify_established(CmId(999)), Err(CmError::NoSuchId));
    let dropped = b.cm.cm_counters().dropped;
    b.cm.notify_established(ib).unwrap();
    b.step(&clock);
    assert_eq!(
        b.take(|e| match e {
            Event::Established { id, .. } => Some(*id),
            _ => None,
        }),
        Some(ib)
    );
    // The RTU, read now (or in that step), changes nothing; a second notify is refused.
    run(&mut a, &mut b, &clock, |_, b| {
        b.cm.cm_counters().dropped > dropped
    });
    assert!(b.events.is_empty(), "{:?}", b.events);
    assert_eq!(b.cm.notify_established(ib), Err(CmError::WrongState));
}

#[test]
fn a_send_that_fails_on_qp1_is_recovered_and_the_req_retried() {
    // A's GID is gone while its REQ goes out: the send fails (no source address), QP 1's
    // send queue stops and is brought back; with the GID back, the REQ's retry connects.
    let (mut a, mut b, clock) = nodes();
    b.cm.listen(PortSpace::Tcp, PORT, 4).unwrap();
    a.stack.add_neighbour(IP_B.into(), b.stack.mac());
    a.ctx.set_gid(a.sgid.into(), [0; 16]).unwrap();
    let ia = a
        .connect(&clock, IP_B, PORT, &ConnParam::default())
        .unwrap();
    run(&mut a, &mut b, &clock, |a, _| {
        a.cm.gsi_counters().restarts == 1
    });
    assert_eq!(a.cm.gsi_counters().send_errors, 1);
    a.ctx
        .set_gid(a.sgid.into(), mlx5::hca::ipv4_mapped_gid(IP_A))
        .unwrap();
    clock.advance(4_300_000_000);
    let mut ib = None;
    run(&mut a, &mut b, &clock, |_, b| {
        ib = b.take(|e| match e {
            Event::ConnectRequest { id, .. } => Some(*id),
            _ => None,
        });
        ib.is_some()
    });
    let ib = ib.unwrap();
    b.create_qp(ib);
    b.cm.accept(clock.now(), ib, &ConnParam::default(), &mut b.stack)
        .unwrap();
    run(&mut a, &mut b, &clock, |a, _| {
        a.take(|e| matches!(e, Event::Established { id, .. } if *id == ia).then_some(()))
            .is_some()
    });
}
