//! Duplicates, MSN, ACK policy, solicited events.

use super::*;

#[test]
fn rc_duplicate_send_and_write_are_reacked_not_reexecuted() {
    let mut p = Pair::with_mtu(1024);
    p.rs.add_region(WR_KEY, WR_VA, vec![0; 4096]);
    p.rs.recvs.push_back(vec![0; 100]);
    p.rs.recvs.push_back(vec![0; 100]);
    // Lose the first ACK of each message: the requester times out and resends.
    let mut acked = std::collections::HashSet::new();
    p.f_resp.hook = Some(Box::new(move |b: &Bth, _: &ExtHdrs| {
        b.opcode == Opcode::RC_ACKNOWLEDGE && acked.insert(b.psn)
    }));
    p.post(
        wr(
            1,
            WrOp::Send {
                imm: None,
                invalidate: None,
            },
            50,
        ),
        pattern(1, 50),
    );
    p.run_ok();
    assert_eq!(p.rq.done, vec![(1, WcStatus::Success)]);
    assert_eq!(
        p.rs.received.len(),
        1,
        "the duplicate SEND consumed no receive WQE"
    );
    assert_eq!(p.rs.recvs.len(), 1);
    // The re-ACK names the last PSN executed (C9-105).
    let acks: Vec<_> = p
        .log_resp
        .iter()
        .map(|l| (l.bth.psn, l.ext.aeth.unwrap().msn))
        .collect();
    assert_eq!(acks, vec![(0x100, 1), (0x100, 1)]);

    // A WRITE: the application changes the target after the first execution; the duplicate
    // must not write it again.
    p.post(
        wr(
            2,
            WrOp::Write {
                raddr: WR_VA,
                rkey: WR_KEY,
                imm: None,
            },
            2000,
        ),
        vec![7; 2000],
    );
    p.pump();
    while p.step() {
        p.pump();
        if p.rs.bytes(WR_KEY, WR_VA, 2000).iter().all(|&b| b == 7) {
            break;
        }
    }
    p.rs.regions[0].data[..2000].fill(1);
    p.run_ok();
    assert_eq!(p.rq.done.last(), Some(&(2, WcStatus::Success)));
    assert!(p.resp.counters().duplicates >= 3);
    assert!(p.rs.bytes(WR_KEY, WR_VA, 2000).iter().all(|&b| b == 1));
    assert_eq!(p.resp.msn(), 2);
}

#[test]
fn rc_msn_counts_messages() {
    let mut p = Pair::with_mtu(256);
    p.rs.add_region(WR_KEY, WR_VA, vec![0; 4096]);
    p.rs.add_region(RD_KEY, RD_VA, pattern(1, 4096));
    p.rs.add_region(AT_KEY, AT_VA, vec![0; 8]);
    p.rs.recvs.push_back(vec![0; 1000]);
    p.post(
        wr(
            1,
            WrOp::Send {
                imm: None,
                invalidate: None,
            },
            500,
        ),
        pattern(2, 500),
    );
    p.post(
        wr(
            2,
            WrOp::Write {
                raddr: WR_VA,
                rkey: WR_KEY,
                imm: None,
            },
            700,
        ),
        pattern(3, 700),
    );
    p.post(
        wr(
            3,
            WrOp::Read {
                raddr: RD_VA,
                rkey: RD_KEY,
            },
            600,
        ),
        vec![0; 600],
    );
    p.post(
        wr(
            4,
            WrOp::FetchAdd {
                raddr: AT_VA,
                rkey: AT_KEY,
                add: 1,
            },
            8,
        ),
        vec![0; 8],
    );
    p.run_ok();
    assert_eq!(p.rq.done.len(), 4);
    let msns: Vec<_> = p
        .log_resp
        .iter()
        .filter_map(|l| l.ext.aeth.map(|a| (l.bth.opcode, a.msn)))
        .collect();
    assert_eq!(
        msns,
        vec![
            (Opcode::RC_ACKNOWLEDGE, 1),
            (Opcode::RC_ACKNOWLEDGE, 2),
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, 3),
            (Opcode::RC_RDMA_READ_RESPONSE_LAST, 3),
            (Opcode::RC_ATOMIC_ACKNOWLEDGE, 4),
        ]
    );
}

#[test]
fn rc_ack_every_packet_policy() {
    let mut rc = ReqConfig::new(RESP_QPN, 256, 0);
    rc.ack_req_every = 1000;
    let mut pc = RespConfig::new(REQ_QPN, 256, 0);
    pc.ack_policy = AckPolicy::EveryPacket;
    let mut p = Pair::new(rc, pc);
    p.rs.add_region(WR_KEY, WR_VA, vec![0; 4096]);
    p.post(
        wr(
            1,
            WrOp::Write {
                raddr: WR_VA,
                rkey: WR_KEY,
                imm: None,
            },
            2560,
        ),
        pattern(4, 2560),
    );
    p.run_ok();
    assert_eq!(p.rq.done, vec![(1, WcStatus::Success)]);
    assert_eq!(p.log_req.iter().filter(|l| l.bth.ack_req).count(), 1);
    let acks: Vec<u32> = p.log_resp.iter().map(|l| l.bth.psn).collect();
    assert_eq!(acks, (0..10).collect::<Vec<_>>());
}

#[test]
fn rc_duplicate_rnr_nak_spends_one_retry() {
    struct Sink(Vec<Bth>);
    impl Tx for Sink {
        fn send(&mut self, b: &Bth, _: &ExtHdrs, p: TxPayload<'_>) -> Result<(), LocalFault> {
            (p.fill)(&mut vec![0; p.len])?;
            self.0.push(*b);
            Ok(())
        }
    }
    let mut rc = ReqConfig::new(RESP_QPN, 1024, 5);
    rc.rnr_retry = 1;
    let mut r = Requester::new(rc).unwrap();
    let mut env = ReqSide::default();
    env.bufs.insert(1, vec![0; 10]);
    r.post(wr(
        1,
        WrOp::Send {
            imm: None,
            invalidate: None,
        },
        10,
    ))
    .unwrap();
    let mut tx = Sink(Vec::new());
    r.pump(0, &mut env, &mut tx);
    assert_eq!(tx.0.len(), 1);
    let ext = ExtHdrs {
        aeth: Some(Aeth::rnr_nak(3, 0)),
        ..ExtHdrs::default()
    };
    let nak = RxPacket {
        bth: Bth::new(Opcode::RC_ACKNOWLEDGE, REQ_QPN, 5),
        ext: &ext,
        payload: RxPayload::Bytes(&[]),
    };
    r.receive(10, &nak, &mut env, &mut tx);
    r.receive(11, &nak, &mut env, &mut tx);
    assert!(
        env.done.is_empty(),
        "the duplicate did not exhaust rnr_retry"
    );
    assert_eq!(r.next_deadline(), Some(10 + rnr_timer_ns(3)));
    r.pump(10 + rnr_timer_ns(3) - 1, &mut env, &mut tx);
    assert_eq!(tx.0.len(), 1, "nothing before the RNR timer");
    r.pump(10 + rnr_timer_ns(3), &mut env, &mut tx);
    assert_eq!(tx.0.len(), 2);
    assert_eq!(tx.0[1].psn, 5);
    r.receive(20 + rnr_timer_ns(3), &nak, &mut env, &mut tx);
    assert_eq!(env.done, vec![(1, WcStatus::RnrRetryExcErr)]);
}

#[test]
fn rc_solicited_event_on_the_last_packet() {
    let mut p = Pair::with_mtu(256);
    p.rs.add_region(WR_KEY, WR_VA, vec![0; 4096]);
    p.rs.recvs.push_back(vec![0; 1000]);
    p.rs.recvs.push_back(vec![0; 1]);
    let mut s = wr(
        1,
        WrOp::Send {
            imm: None,
            invalidate: None,
        },
        600,
    );
    s.solicited = true;
    p.post(s, pattern(5, 600));
    let mut w = wr(
        2,
        WrOp::Write {
            raddr: WR_VA,
            rkey: WR_KEY,
            imm: None,
        },
        10,
    );
    w.solicited = true;
    p.post(w, pattern(6, 10));
    let mut wi = wr(
        3,
        WrOp::Write {
            raddr: WR_VA,
            rkey: WR_KEY,
            imm: Some(1),
        },
        10,
    );
    wi.solicited = true;
    p.post(wi, pattern(6, 10));
    p.run_ok();
    let se: Vec<bool> = p.log_req.iter().map(|l| l.bth.solicited).collect();
    // SEND FIRST, MIDDLE, LAST(SE); WRITE ONLY (no SE without immediate); WRITE ONLY IMM (SE).
    assert_eq!(se, vec![false, false, true, false, true]);
    assert!(p.rs.received.iter().all(|(c, _)| c.solicited));
}
