//! Duplicate and implicitly NAKed READs and atomics, PSN wrap, the outstanding READ limit,
//! fences, local faults completed in order.

use super::*;

#[test]
fn rc_duplicate_read_is_reexecuted() {
    // A 4-packet READ whose 3rd response packet is lost: the requester times out and asks
    // again from that PSN for the remaining bytes; the responder replays MIDDLE / LAST.
    let mut p = Pair::with_mtu(256);
    let remote = pattern(4, 1000);
    p.rs.add_region(RD_KEY, RD_VA, remote.clone());
    let mut n = 0;
    p.f_resp.hook = Some(Box::new(move |_: &Bth, _: &ExtHdrs| {
        n += 1;
        n == 3
    }));
    p.post(
        wr(
            1,
            WrOp::Read {
                raddr: RD_VA,
                rkey: RD_KEY,
            },
            1000,
        ),
        vec![0; 1000],
    );
    p.run_ok();
    assert_eq!(p.rq.done, vec![(1, WcStatus::Success)]);
    assert_eq!(p.rq.bufs[&1], remote);
    assert_eq!(p.resp.counters().duplicates, 1);
    assert_eq!(p.req.counters().timeouts, 1);
    let again = p.log_req[1];
    assert_eq!(again.bth.opcode, Opcode::RC_RDMA_READ_REQUEST);
    assert_eq!(again.bth.psn, 0x102);
    assert_eq!(
        again.ext.reth.unwrap(),
        Reth {
            va: RD_VA + 512,
            r_key: RD_KEY,
            dma_len: 1000 - 512
        }
    );
    let replay: Vec<_> = p.log_resp[4..]
        .iter()
        .map(|l| (l.bth.opcode, l.bth.psn))
        .collect();
    assert_eq!(
        replay,
        vec![
            (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 0x102),
            (Opcode::RC_RDMA_READ_RESPONSE_LAST, 0x103)
        ]
    );
    // The READ counted once in the MSN.
    assert_eq!(p.resp.msn(), 1);

    // All responses lost once: the whole READ is replayed FIRST..LAST from its first PSN.
    let mut p = Pair::with_mtu(256);
    p.rs.add_region(RD_KEY, RD_VA, remote.clone());
    let mut n = 0;
    p.f_resp.hook = Some(Box::new(move |_: &Bth, _: &ExtHdrs| {
        n += 1;
        n <= 4
    }));
    p.post(
        wr(
            1,
            WrOp::Read {
                raddr: RD_VA,
                rkey: RD_KEY,
            },
            1000,
        ),
        vec![0; 1000],
    );
    p.run_ok();
    assert_eq!(p.rq.bufs[&1], remote);
    assert_eq!(
        p.log_resp[4].bth.opcode,
        Opcode::RC_RDMA_READ_RESPONSE_FIRST
    );
    assert_eq!(p.resp.counters().read_responses, 8);
}

#[test]
fn rc_implicit_nak_on_later_response() {
    // READ then WRITE; the READ's only response is lost, the WRITE's ACK passes over the READ:
    // an implicit NAK, the READ is retried at once (no timeout) and replayed.
    let mut p = Pair::with_mtu(1024);
    let remote = pattern(5, 100);
    p.rs.add_region(RD_KEY, RD_VA, remote.clone());
    p.rs.add_region(WR_KEY, WR_VA, vec![0; 100]);
    p.post(
        wr(
            1,
            WrOp::Read {
                raddr: RD_VA,
                rkey: RD_KEY,
            },
            100,
        ),
        vec![0; 100],
    );
    p.post(
        wr(
            2,
            WrOp::Write {
                raddr: WR_VA,
                rkey: WR_KEY,
                imm: None,
            },
            100,
        ),
        vec![9; 100],
    );
    let mut once = true;
    p.f_resp.hook = Some(Box::new(move |b: &Bth, _: &ExtHdrs| {
        let hit = once && b.opcode == Opcode::RC_RDMA_READ_RESPONSE_ONLY;
        once &= !hit;
        hit
    }));
    p.run_ok();
    assert_eq!(
        p.rq.done,
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(p.rq.bufs[&1], remote);
    let c = p.req.counters();
    assert_eq!((c.timeouts, c.retries), (0, 1));
    assert_eq!(
        p.resp.counters().duplicates,
        2,
        "READ and WRITE both resent"
    );
}

#[test]
fn rc_duplicate_atomic_answered_from_saved_result() {
    let mut p = Pair::with_mtu(1024);
    p.rs.add_region(AT_KEY, AT_VA, 40u64.to_le_bytes().to_vec());
    let mut once = true;
    p.f_resp.hook = Some(Box::new(move |b: &Bth, _: &ExtHdrs| {
        let hit = once && b.opcode == Opcode::RC_ATOMIC_ACKNOWLEDGE;
        once &= !hit;
        hit
    }));
    p.post(
        wr(
            1,
            WrOp::FetchAdd {
                raddr: AT_VA,
                rkey: AT_KEY,
                add: 2,
            },
            8,
        ),
        vec![0; 8],
    );
    p.run_ok();
    assert_eq!(p.rq.done, vec![(1, WcStatus::Success)]);
    // Executed once, the replay answered 40 from the resource, not 42.
    assert_eq!(p.rs.atomics, 1);
    assert_eq!(p.resp.counters().atomics_executed, 1);
    assert_eq!(p.resp.counters().atomic_acks, 2);
    assert_eq!(p.rq.atomic[&1], 40);
    assert_eq!(p.rs.bytes(AT_KEY, AT_VA, 8), &42u64.to_le_bytes());
    assert_eq!(p.req.counters().timeouts, 1);
}

#[test]
fn rc_psn_wraps_at_2_pow_24() {
    for drop_at in [None, Some(3), Some(5)] {
        let mut rc = ReqConfig::new(RESP_QPN, 256, 0xff_fffd);
        rc.max_rd_atomic = 2;
        let mut p = Pair::new(rc, RespConfig::new(REQ_QPN, 256, 0xff_fffd));
        p.rs.add_region(WR_KEY, WR_VA, vec![0; 4096]);
        p.rs.add_region(RD_KEY, RD_VA, pattern(6, 4096));
        p.rs.recvs.push_back(vec![0; 2000]);
        if let Some(k) = drop_at {
            let mut n = 0;
            p.f_req.hook = Some(Box::new(move |_: &Bth, _: &ExtHdrs| {
                n += 1;
                n == k
            }));
        }
        let d1 = pattern(7, 2000);
        let d2 = pattern(8, 1500);
        p.post(
            wr(
                1,
                WrOp::Write {
                    raddr: WR_VA,
                    rkey: WR_KEY,
                    imm: None,
                },
                2000,
            ),
            d1.clone(),
        );
        p.post(
            wr(
                2,
                WrOp::Read {
                    raddr: RD_VA,
                    rkey: RD_KEY,
                },
                1200,
            ),
            vec![0; 1200],
        );
        p.post(
            wr(
                3,
                WrOp::Send {
                    imm: Some(3),
                    invalidate: None,
                },
                1500,
            ),
            d2.clone(),
        );
        p.run_ok();
        assert_eq!(
            p.rq.done,
            (1..=3).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
        );
        assert_eq!(p.rs.bytes(WR_KEY, WR_VA, 2000), &d1[..]);
        assert_eq!(p.rq.bufs[&2], p.rs.bytes(RD_KEY, RD_VA, 1200));
        assert_eq!(p.rs.received[0].1, d2);
        // 8 WRITE + 5 READ + 6 SEND PSNs from 0xfffffd: the last is 0x00000f.
        assert_eq!(p.req.next_psn(), 0x10);
        assert_eq!(p.resp.expected_psn(), 0x10);
        assert!(p.log_req.iter().any(|l| l.bth.psn == 0xff_ffff));
        assert!(p.log_req.iter().any(|l| l.bth.psn == 0));
    }
}

#[test]
fn rc_max_rd_atomic_limits_outstanding_reads() {
    let mut rc = ReqConfig::new(RESP_QPN, 1024, 0);
    rc.max_rd_atomic = 2;
    let mut p = Pair::new(rc, RespConfig::new(REQ_QPN, 1024, 0));
    p.rs.add_region(RD_KEY, RD_VA, pattern(10, 5000));
    p.rs.add_region(AT_KEY, AT_VA, vec![0; 8]);
    for i in 0..4 {
        p.post(
            wr(
                i,
                WrOp::Read {
                    raddr: RD_VA + i * 1000,
                    rkey: RD_KEY,
                },
                1000,
            ),
            vec![0; 1000],
        );
    }
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
    p.pump();
    assert_eq!(p.log_req.len(), 2, "two READs in flight, the rest wait");
    assert_eq!(p.req.rd_atomic_in_flight(), 2);
    let mut most = 0;
    for _ in 0..10_000 {
        p.pump();
        most = most.max(p.req.rd_atomic_in_flight());
        if !p.step() {
            break;
        }
    }
    assert!(p.run(10_000));
    assert_eq!(most, 2);
    assert_eq!(
        p.rq.done,
        (0..5).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    for i in 0..4u64 {
        assert_eq!(p.rq.bufs[&i], p.rs.bytes(RD_KEY, RD_VA + i * 1000, 1000));
    }
    assert_eq!(
        p.req.post(wr(9, WrOp::Read { raddr: 0, rkey: 0 }, 1)),
        Ok(())
    );
    let mut rc = ReqConfig::new(RESP_QPN, 1024, 0);
    rc.max_rd_atomic = 0;
    let mut r = Requester::new(rc).unwrap();
    assert_eq!(
        r.post(wr(1, WrOp::Read { raddr: 0, rkey: 0 }, 1)),
        Err(PostError::NoRdAtomic)
    );
}

#[test]
fn rc_fence_waits_for_earlier_reads() {
    for fence in [false, true] {
        let mut p = Pair::with_mtu(1024);
        p.rs.add_region(RD_KEY, RD_VA, pattern(11, 100));
        p.rs.add_region(WR_KEY, WR_VA, vec![0; 100]);
        p.post(
            wr(
                1,
                WrOp::Read {
                    raddr: RD_VA,
                    rkey: RD_KEY,
                },
                100,
            ),
            vec![0; 100],
        );
        let mut w = wr(
            2,
            WrOp::Write {
                raddr: WR_VA,
                rkey: WR_KEY,
                imm: None,
            },
            100,
        );
        w.fence = fence;
        p.post(w, vec![3; 100]);
        p.pump();
        let want = if fence { 1 } else { 2 };
        assert_eq!(p.log_req.len(), want, "fence {fence}");
        p.run_ok();
        assert_eq!(
            p.rq.done,
            vec![(1, WcStatus::Success), (2, WcStatus::Success)]
        );
        if fence {
            // The WRITE left only after the READ response arrived.
            let resp_at = p.log_resp[0].at;
            assert!(p.log_req[1].at >= resp_at);
        }
    }
}

#[test]
fn rc_local_gather_fault_completes_in_order() {
    let mut p = Pair::with_mtu(1024);
    p.rs.add_region(WR_KEY, WR_VA, vec![0; 4096]);
    p.post(
        wr(
            1,
            WrOp::Write {
                raddr: WR_VA,
                rkey: WR_KEY,
                imm: None,
            },
            100,
        ),
        vec![1; 100],
    );
    // wr 2's buffer is shorter than its length: the gather faults.
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
        vec![2; 10],
    );
    p.post(
        wr(
            3,
            WrOp::Write {
                raddr: WR_VA,
                rkey: WR_KEY,
                imm: None,
            },
            10,
        ),
        vec![3; 10],
    );
    p.run_ok();
    assert_eq!(
        p.rq.done,
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::LocProtErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
}

#[test]
fn rc_implicit_nak_on_a_later_read_response() {
    // Two READs; the first one's response is lost, the second's arrives: the requester retries
    // the first at once (rxe_comp.c check_psn) and both complete byte-exact.
    let mut p = Pair::with_mtu(1024);
    let remote = pattern(12, 3000);
    p.rs.add_region(RD_KEY, RD_VA, remote.clone());
    let mut once = true;
    p.f_resp.hook = Some(Box::new(move |b: &Bth, _: &ExtHdrs| {
        let hit = once && b.psn == 0x100;
        once &= !hit;
        hit
    }));
    p.post(
        wr(
            1,
            WrOp::Read {
                raddr: RD_VA,
                rkey: RD_KEY,
            },
            1000,
        ),
        vec![0; 1000],
    );
    p.post(
        wr(
            2,
            WrOp::Read {
                raddr: RD_VA + 1000,
                rkey: RD_KEY,
            },
            2000,
        ),
        vec![0; 2000],
    );
    p.run_ok();
    assert_eq!(
        p.rq.done,
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(p.rq.bufs[&1], remote[..1000]);
    assert_eq!(p.rq.bufs[&2], remote[1000..]);
    let c = p.req.counters();
    assert_eq!((c.timeouts, c.retries), (0, 1));
}
