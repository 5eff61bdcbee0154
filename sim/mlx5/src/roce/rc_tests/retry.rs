//! Retries: timeouts, PSN sequence NAKs, RNR NAKs and exhausted retry counts.

use super::*;

#[test]
fn rc_timeout_retransmits() {
    let mut p = Pair::with_mtu(1024);
    p.rs.add_region(WR_KEY, WR_VA, vec![0; 4096]);
    let mut n = 0;
    // Lose the first transmission of the single WRITE packet.
    p.f_req.hook = Some(Box::new(move |_: &Bth, _: &ExtHdrs| {
        n += 1;
        n == 1
    }));
    let data = pattern(1, 3000);
    p.post(
        wr(
            1,
            WrOp::Write {
                raddr: WR_VA,
                rkey: WR_KEY,
                imm: None,
            },
            3000,
        ),
        data.clone(),
    );
    p.run_ok();
    assert_eq!(p.rq.done, vec![(1, WcStatus::Success)]);
    assert_eq!(p.rs.bytes(WR_KEY, WR_VA, 3000), &data[..]);
    let c = p.req.counters();
    // The FIRST was lost: the MIDDLE and LAST are out of sequence (one NAK, which retries),
    // so no timeout is needed here; now lose everything once and wait for the timer.
    assert_eq!(c.seq_naks, 1);
    assert_eq!(c.retransmitted, 3);

    let mut p = Pair::with_mtu(1024);
    p.rs.add_region(WR_KEY, WR_VA, vec![0; 4096]);
    let mut n = 0;
    p.f_req.hook = Some(Box::new(move |_: &Bth, _: &ExtHdrs| {
        n += 1;
        n <= 3
    }));
    p.post(
        wr(
            1,
            WrOp::Write {
                raddr: WR_VA,
                rkey: WR_KEY,
                imm: None,
            },
            3000,
        ),
        data.clone(),
    );
    p.run_ok();
    assert_eq!(p.rq.done, vec![(1, WcStatus::Success)]);
    assert_eq!(p.rs.bytes(WR_KEY, WR_VA, 3000), &data[..]);
    let c = p.req.counters();
    assert_eq!((c.timeouts, c.retries, c.retransmitted), (1, 1, 3));
    // The retransmission waited 4.096 µs × 2^14 after the first transmission.
    let t = ack_timeout_ns(14).unwrap();
    assert!(p.log_req[3].at >= p.log_req[0].at + t);
    assert_eq!(p.log_req[3].bth.psn, 0x100);
    assert_eq!(p.log_req[3].bth.opcode, Opcode::RC_RDMA_WRITE_FIRST);
}

#[test]
fn rc_psn_sequence_nak_retries_from_the_middle() {
    // A 5-packet WRITE whose 2nd packet is lost: packets 3..5 are out of sequence, the
    // responder NAKs once, the requester resumes at PSN+1 with a MIDDLE (no RETH).
    let mut p = Pair::with_mtu(256);
    p.rs.add_region(WR_KEY, WR_VA, vec![0; 2048]);
    let mut n = 0;
    p.f_req.hook = Some(Box::new(move |_: &Bth, _: &ExtHdrs| {
        n += 1;
        n == 2
    }));
    let data = pattern(2, 5 * 256 - 10);
    p.post(
        wr(
            1,
            WrOp::Write {
                raddr: WR_VA,
                rkey: WR_KEY,
                imm: None,
            },
            data.len() as u32,
        ),
        data.clone(),
    );
    p.run_ok();
    assert_eq!(p.rq.done, vec![(1, WcStatus::Success)]);
    assert_eq!(p.rs.bytes(WR_KEY, WR_VA, data.len()), &data[..]);
    let rc = p.resp.counters();
    assert_eq!((rc.out_of_sequence, rc.seq_naks), (3, 1));
    let nak = p
        .log_resp
        .iter()
        .find(|l| {
            l.ext
                .aeth
                .is_some_and(|a| a.kind() == AethKind::Nak(NakCode::PsnSequenceError))
        })
        .unwrap();
    assert_eq!(nak.bth.psn, 0x101);
    let c = p.req.counters();
    assert_eq!((c.seq_naks, c.timeouts, c.retransmitted), (1, 0, 4));
    let retry = &p.log_req[5];
    assert_eq!(
        (retry.bth.psn, retry.bth.opcode),
        (0x101, Opcode::RC_RDMA_WRITE_MIDDLE)
    );
    assert!(retry.ext.reth.is_none());
    assert_eq!(
        p.log_req.last().unwrap().bth.opcode,
        Opcode::RC_RDMA_WRITE_LAST
    );
}

#[test]
fn rc_rnr_retries_after_the_timer() {
    let mut rc = ReqConfig::new(RESP_QPN, 1024, 0);
    rc.rnr_retry = 3;
    let mut pc = RespConfig::new(REQ_QPN, 1024, 0);
    pc.min_rnr_timer = 14; // 1.28 ms
    let mut p = Pair::new(rc, pc);
    p.rs.recvs.push_back(vec![0; 64]);
    p.rs.not_ready = 2;
    let data = pattern(3, 64);
    p.post(
        wr(
            7,
            WrOp::Send {
                imm: None,
                invalidate: None,
            },
            64,
        ),
        data.clone(),
    );
    p.run_ok();
    assert_eq!(p.rq.done, vec![(7, WcStatus::Success)]);
    assert_eq!(p.rs.received[0].1, data);
    assert_eq!(p.resp.counters().rnr_naks, 2);
    assert_eq!(p.req.counters().rnr_naks, 2);
    // Each retry waited the responder's RNR timer after its RNR NAK.
    let naks: Vec<_> = p
        .log_resp
        .iter()
        .filter(|l| {
            l.ext
                .aeth
                .is_some_and(|a| matches!(a.kind(), AethKind::RnrNak { timer: 14 }))
        })
        .map(|l| l.at)
        .collect();
    assert_eq!(naks.len(), 2);
    assert_eq!(p.log_req.len(), 3);
    for (i, t) in naks.iter().enumerate() {
        assert!(p.log_req[i + 1].at >= t + rnr_timer_ns(14));
        assert_eq!(p.log_req[i + 1].bth.psn, 0);
    }
    assert_eq!(rnr_timer_ns(14), 1_280_000);
}

#[test]
fn rc_rnr_retry_exhausted() {
    let mut rc = ReqConfig::new(RESP_QPN, 1024, 0);
    rc.rnr_retry = 2;
    let mut p = Pair::new(rc, RespConfig::new(REQ_QPN, 1024, 0));
    p.post(
        wr(
            1,
            WrOp::Send {
                imm: None,
                invalidate: None,
            },
            10,
        ),
        vec![1; 10],
    );
    p.post(
        wr(
            2,
            WrOp::Send {
                imm: None,
                invalidate: None,
            },
            10,
        ),
        vec![2; 10],
    );
    p.run_ok();
    assert_eq!(
        p.rq.done,
        vec![(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.resp.counters().rnr_naks, 3);
    assert!(p.req.is_error());
    assert_eq!(WcStatus::RnrRetryExcErr.cqe_syndrome(), Some(0x16));
    assert_eq!(
        p.req.post(wr(
            3,
            WrOp::Send {
                imm: None,
                invalidate: None
            },
            1
        )),
        Err(PostError::QpError)
    );

    // rnr_retry 7 retries forever.
    let mut p = Pair::with_mtu(1024);
    p.rs.recvs.push_back(vec![0; 10]);
    p.rs.not_ready = 50;
    p.post(
        wr(
            1,
            WrOp::Send {
                imm: None,
                invalidate: None,
            },
            10,
        ),
        vec![1; 10],
    );
    p.run_ok();
    assert_eq!(p.rq.done, vec![(1, WcStatus::Success)]);
    assert_eq!(p.req.counters().rnr_naks, 50);
}

#[test]
fn rc_retry_exhausted() {
    let mut rc = ReqConfig::new(RESP_QPN, 1024, 0);
    rc.retry_count = 3;
    rc.ack_timeout = 10;
    let mut p = Pair::new(rc, RespConfig::new(REQ_QPN, 1024, 0));
    p.f_req.hook = Some(Box::new(|_: &Bth, _: &ExtHdrs| true));
    p.post(wr(1, WrOp::Read { raddr: 0, rkey: 1 }, 100), vec![0; 100]);
    p.post(
        wr(
            2,
            WrOp::Send {
                imm: None,
                invalidate: None,
            },
            10,
        ),
        vec![2; 10],
    );
    p.run_ok();
    assert_eq!(
        p.rq.done,
        vec![(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    let c = p.req.counters();
    // The first transmission plus retry_count retries, each ended by a timeout.
    assert_eq!((c.timeouts, c.retries), (4, 3));
    assert_eq!(
        p.log_req
            .iter()
            .filter(|l| l.bth.opcode == Opcode::RC_RDMA_READ_REQUEST)
            .count(),
        4
    );
    assert_eq!(WcStatus::RetryExcErr.cqe_syndrome(), Some(0x15));
    assert_eq!(p.req.next_deadline(), None);
}

#[test]
fn rc_rnr_on_the_last_packet_of_a_write_with_immediate() {
    // The receive WQE is needed only by the LAST packet: the RNR NAK names its PSN and the retry
    // resends that packet alone (the responder kept the WRITE's address from the FIRST).
    let mut p = Pair::with_mtu(256);
    p.rs.add_region(WR_KEY, WR_VA, vec![0; 1024]);
    p.rs.recvs.push_back(vec![0; 1]);
    p.rs.not_ready = 1;
    let data = pattern(13, 700);
    p.post(
        wr(
            1,
            WrOp::Write {
                raddr: WR_VA,
                rkey: WR_KEY,
                imm: Some(5),
            },
            700,
        ),
        data.clone(),
    );
    p.run_ok();
    assert_eq!(p.rq.done, vec![(1, WcStatus::Success)]);
    assert_eq!(p.rs.bytes(WR_KEY, WR_VA, 700), &data[..]);
    let ops: Vec<_> = p
        .log_req
        .iter()
        .map(|l| (l.bth.opcode, l.bth.psn))
        .collect();
    assert_eq!(
        ops,
        vec![
            (Opcode::RC_RDMA_WRITE_FIRST, 0x100),
            (Opcode::RC_RDMA_WRITE_MIDDLE, 0x101),
            (Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE, 0x102),
            (Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE, 0x102),
        ]
    );
    assert_eq!(p.rs.received[0].0.imm, Some(5));
    assert_eq!(p.rs.received[0].0.byte_len, 700);
}

#[test]
fn rc_rnr_on_a_multi_packet_send_spends_no_retry() {
    // The packets behind an RNR-NAKed SEND FIRST are out of sequence; they must not provoke a
    // sequence NAK that would cost the requester a transport retry (retry_count 0 here).
    let mut rc = ReqConfig::new(RESP_QPN, 256, 0);
    rc.retry_count = 0;
    let mut p = Pair::new(rc, RespConfig::new(REQ_QPN, 256, 0));
    p.rs.recvs.push_back(vec![0; 2000]);
    p.rs.not_ready = 5;
    let data = pattern(14, 1500);
    p.post(
        wr(
            1,
            WrOp::Send {
                imm: None,
                invalidate: None,
            },
            1500,
        ),
        data.clone(),
    );
    p.run_ok();
    assert_eq!(p.rq.done, vec![(1, WcStatus::Success)]);
    assert_eq!(p.rs.received[0].1, data);
    assert_eq!(p.resp.counters().rnr_naks, 5);
    assert_eq!(p.resp.counters().seq_naks, 0);
    assert_eq!(p.req.counters().retries, 0);
}

#[test]
fn rc_sequence_nak_during_an_rnr_wait_is_not_a_retry() {
    // A peer that answers the packets behind an RNR-NAKed one with a sequence NAK (as rxe
    // does): the requester already goes back at the RNR timer and spends no transport retry.
    struct Sink(usize);
    impl Tx for Sink {
        fn send(&mut self, _: &Bth, _: &ExtHdrs, p: TxPayload<'_>) -> Result<(), LocalFault> {
            self.0 += 1;
            (p.fill)(&mut vec![0; p.len])
        }
    }
    let mut rc = ReqConfig::new(RESP_QPN, 256, 0);
    rc.retry_count = 0;
    let mut r = Requester::new(rc).unwrap();
    let mut env = ReqSide::default();
    env.bufs.insert(1, vec![0; 600]);
    r.post(wr(
        1,
        WrOp::Send {
            imm: None,
            invalidate: None,
        },
        600,
    ))
    .unwrap();
    let mut tx = Sink(0);
    r.pump(0, &mut env, &mut tx);
    assert_eq!(tx.0, 3);
    let nak = |aeth| ExtHdrs {
        aeth: Some(aeth),
        ..ExtHdrs::default()
    };
    fn rx(ext: &ExtHdrs) -> RxPacket<'_> {
        RxPacket {
            bth: Bth::new(Opcode::RC_ACKNOWLEDGE, REQ_QPN, 0),
            ext,
            payload: RxPayload::Bytes(&[]),
        }
    }
    let (rnr, seq) = (
        nak(Aeth::rnr_nak(1, 0)),
        nak(Aeth::nak(NakCode::PsnSequenceError, 0)),
    );
    r.receive(1, &rx(&rnr), &mut env, &mut tx);
    r.receive(2, &rx(&seq), &mut env, &mut tx);
    assert!(env.done.is_empty());
    assert_eq!(tx.0, 3);
    r.pump(1 + rnr_timer_ns(1), &mut env, &mut tx);
    assert_eq!(tx.0, 6, "the whole SEND again after the RNR timer");
    assert_eq!(r.counters().retries, 0);
}
