//! Error paths: remote access, invalid request and remote operational errors, checked
//! configurations.

use super::*;

#[test]
fn rc_remote_access_errors() {
    // A WRITE with an unknown rkey, a READ out of bounds, a WRITE without permission: NAK
    // remote access error, REM_ACCESS_ERR, the requester flushes the rest, the responder stops.
    for case in 0..3 {
        let mut p = Pair::with_mtu(1024);
        p.rs.add_region(WR_KEY, WR_VA, vec![0; 4096]);
        p.rs.regions[0].access = [true, false, true];
        let op = match case {
            0 => WrOp::Write {
                raddr: WR_VA,
                rkey: 0x999,
                imm: None,
            },
            1 => WrOp::Read {
                raddr: WR_VA + 4000,
                rkey: WR_KEY,
            },
            _ => WrOp::Write {
                raddr: WR_VA,
                rkey: WR_KEY,
                imm: None,
            },
        };
        p.post(wr(1, op, 2000), vec![5; 2000]);
        p.post(
            wr(
                2,
                WrOp::Send {
                    imm: None,
                    invalidate: None,
                },
                1,
            ),
            vec![1],
        );
        p.run_ok();
        assert_eq!(
            p.rq.done,
            vec![(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)],
            "case {case}"
        );
        assert!(p.resp.is_error() && p.req.is_error());
        assert_eq!(p.resp.error_cause(), Some(NakCode::RemoteAccessError));
        assert_eq!(p.resp.counters().error_naks, 1);
        assert!(p.rs.bytes(WR_KEY, WR_VA, 4096).iter().all(|&b| b == 0));
    }
}

#[test]
fn rc_invalid_request_and_remote_operational_errors() {
    // Misaligned atomic → NAK invalid request.
    let mut p = Pair::with_mtu(1024);
    p.rs.add_region(AT_KEY, AT_VA, vec![0; 64]);
    p.post(
        wr(
            1,
            WrOp::FetchAdd {
                raddr: AT_VA + 4,
                rkey: AT_KEY,
                add: 1,
            },
            8,
        ),
        vec![0; 8],
    );
    p.run_ok();
    assert_eq!(p.rq.done, vec![(1, WcStatus::RemInvReqErr)]);
    assert_eq!(p.rs.atomics, 0);
    assert_eq!(p.resp.error_cause(), Some(NakCode::InvalidRequest));

    // WRITE to a QP without remote write enabled → NAK invalid request.
    let mut pc = RespConfig::new(REQ_QPN, 1024, 0);
    pc.remote_write = false;
    let mut p = Pair::new(ReqConfig::new(RESP_QPN, 1024, 0), pc);
    p.rs.add_region(WR_KEY, WR_VA, vec![0; 64]);
    p.post(
        wr(
            1,
            WrOp::Write {
                raddr: WR_VA,
                rkey: WR_KEY,
                imm: None,
            },
            8,
        ),
        vec![1; 8],
    );
    p.run_ok();
    assert_eq!(p.rq.done, vec![(1, WcStatus::RemInvReqErr)]);

    // A SEND longer than the receive WQE → NAK invalid request, the receive completes with
    // LOC_LEN_ERR.
    let mut p = Pair::with_mtu(1024);
    p.rs.recvs.push_back(vec![0; 100]);
    p.post(
        wr(
            1,
            WrOp::Send {
                imm: None,
                invalidate: None,
            },
            3000,
        ),
        vec![1; 3000],
    );
    p.run_ok();
    assert_eq!(p.rq.done, vec![(1, WcStatus::RemInvReqErr)]);
    assert_eq!(p.rs.received.len(), 1);
    assert_eq!(p.rs.received[0].0.status, WcStatus::LocLenErr);

    // The receive WQE's scatter list faults → NAK remote operational error.
    let mut p = Pair::with_mtu(1024);
    p.rs.recvs.push_back(vec![0; 100]);
    p.rs.recv_fault = Some(RecvFault::Protection);
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
    assert_eq!(p.rq.done, vec![(1, WcStatus::RemOpErr)]);
    assert_eq!(p.rs.received[0].0.status, WcStatus::LocProtErr);
    assert_eq!(WcStatus::RemOpErr.cqe_syndrome(), Some(0x14));
}

#[test]
fn rc_responder_rejects_bad_opcode_sequence_and_length() {
    // Hand-made packets straight into a responder.
    struct Sink(Vec<(Bth, ExtHdrs)>);
    impl Tx for Sink {
        fn send(&mut self, b: &Bth, e: &ExtHdrs, _: TxPayload<'_>) -> Result<(), LocalFault> {
            self.0.push((*b, *e));
            Ok(())
        }
    }
    let nak_of = |s: &Sink| s.0.last().and_then(|(_, e)| e.aeth).map(|a| a.kind());
    let mut rs = RespSide::default();
    rs.add_region(WR_KEY, WR_VA, vec![0; 4096]);
    // A WRITE MIDDLE with no message in progress (missing FIRST).
    let mut r = Responder::new(RespConfig::new(REQ_QPN, 256, 0)).unwrap();
    let mut tx = Sink(Vec::new());
    let pay = [0u8; 256];
    let pkt = RxPacket {
        bth: Bth::new(Opcode::RC_RDMA_WRITE_MIDDLE, RESP_QPN, 0),
        ext: &ExtHdrs::NONE,
        payload: RxPayload::Bytes(&pay),
    };
    r.receive(0, &pkt, &mut rs, &mut tx);
    assert_eq!(nak_of(&tx), Some(AethKind::Nak(NakCode::InvalidRequest)));
    assert!(r.is_error());
    // A SEND ONLY longer than the MTU.
    let mut r = Responder::new(RespConfig::new(REQ_QPN, 256, 0)).unwrap();
    rs.recvs.push_back(vec![0; 1000]);
    let big = [0u8; 260];
    let pkt = RxPacket {
        bth: Bth::new(Opcode::RC_SEND_ONLY, RESP_QPN, 0),
        ext: &ExtHdrs::NONE,
        payload: RxPayload::Bytes(&big),
    };
    r.receive(0, &pkt, &mut rs, &mut tx);
    assert_eq!(nak_of(&tx), Some(AethKind::Nak(NakCode::InvalidRequest)));
    // A SEND FIRST followed by a WRITE FIRST (missing LAST).
    let mut r = Responder::new(RespConfig::new(REQ_QPN, 256, 0)).unwrap();
    rs.recvs.push_back(vec![0; 1000]);
    let pkt = RxPacket {
        bth: Bth::new(Opcode::RC_SEND_FIRST, RESP_QPN, 0),
        ext: &ExtHdrs::NONE,
        payload: RxPayload::Bytes(&pay),
    };
    let n = tx.0.len();
    r.receive(0, &pkt, &mut rs, &mut tx);
    assert_eq!(tx.0.len(), n, "no AckReq, no ACK");
    let ext = ExtHdrs {
        reth: Some(Reth {
            va: WR_VA,
            r_key: WR_KEY,
            dma_len: 512,
        }),
        ..ExtHdrs::default()
    };
    let pkt = RxPacket {
        bth: Bth::new(Opcode::RC_RDMA_WRITE_FIRST, RESP_QPN, 1),
        ext: &ext,
        payload: RxPayload::Bytes(&pay),
    };
    r.receive(0, &pkt, &mut rs, &mut tx);
    assert_eq!(nak_of(&tx), Some(AethKind::Nak(NakCode::InvalidRequest)));
    assert_eq!(tx.0.last().unwrap().0.psn, 1);
    // Out of sequence: one NAK, then silence until the expected PSN.
    let mut r = Responder::new(RespConfig::new(REQ_QPN, 256, 10)).unwrap();
    let mut tx = Sink(Vec::new());
    rs.recvs.push_back(vec![0; 1000]);
    for psn in [12, 13, 11, 14] {
        let pkt = RxPacket {
            bth: Bth::new(Opcode::RC_SEND_ONLY, RESP_QPN, psn),
            ext: &ExtHdrs::NONE,
            payload: RxPayload::Bytes(&pay[..4]),
        };
        r.receive(0, &pkt, &mut rs, &mut tx);
    }
    assert_eq!(tx.0.len(), 1);
    assert_eq!(tx.0[0].0.psn, 10);
    let mut b = Bth::new(Opcode::RC_SEND_ONLY, RESP_QPN, 10);
    b.ack_req = true;
    r.receive(
        0,
        &RxPacket {
            bth: b,
            ext: &ExtHdrs::NONE,
            payload: RxPayload::Bytes(&pay[..4]),
        },
        &mut rs,
        &mut tx,
    );
    assert_eq!(tx.0.len(), 2);
    assert_eq!(tx.0[1].1.aeth.unwrap().kind(), AethKind::Ack { credit: 31 });
    assert_eq!(tx.0[1].1.aeth.unwrap().msn, 1);
    // A new gap gets a new NAK.
    r.receive(
        0,
        &RxPacket {
            bth: Bth::new(Opcode::RC_SEND_ONLY, RESP_QPN, 13),
            ext: &ExtHdrs::NONE,
            payload: RxPayload::Bytes(&pay[..4]),
        },
        &mut rs,
        &mut tx,
    );
    assert_eq!(tx.0.len(), 3);
    assert_eq!(tx.0[2].0.psn, 11);
}

/// The MIDDLE packets of a WRITE in progress (the responder's quick path for them) still get
/// every check: each lands at its offset, and one whose length is not the MTU, one that comes
/// where the RETH length leaves only a LAST, or one after remote write was disabled is NAKed
/// invalid request.
#[test]
fn rc_responder_checks_every_write_middle() {
    struct Sink(Vec<(Bth, ExtHdrs)>);
    impl Tx for Sink {
        fn send(&mut self, b: &Bth, e: &ExtHdrs, _: TxPayload<'_>) -> Result<(), LocalFault> {
            self.0.push((*b, *e));
            Ok(())
        }
    }
    let nak_of = |s: &Sink| s.0.last().and_then(|(_, e)| e.aeth).map(|a| a.kind());
    let first = ExtHdrs {
        reth: Some(Reth {
            va: WR_VA,
            r_key: WR_KEY,
            dma_len: 3 * 256,
        }),
        ..ExtHdrs::default()
    };
    let data = pattern(77, 3 * 256);
    // Runs FIRST, then MIDDLE at PSN 1 with `len` bytes and `ext`, after `before` on the
    // responder; returns the responder, what it sent and the region's bytes.
    let run = |len: usize, ext: &ExtHdrs, before: &dyn Fn(&mut Responder)| {
        let mut rs = RespSide::default();
        rs.add_region(WR_KEY, WR_VA, vec![0; 3 * 256]);
        let mut r = Responder::new(RespConfig::new(REQ_QPN, 256, 0)).unwrap();
        let mut tx = Sink(Vec::new());
        let pkt = RxPacket {
            bth: Bth::new(Opcode::RC_RDMA_WRITE_FIRST, RESP_QPN, 0),
            ext: &first,
            payload: RxPayload::Bytes(&data[..256]),
        };
        r.receive(0, &pkt, &mut rs, &mut tx);
        before(&mut r);
        let mut bth = Bth::new(Opcode::RC_RDMA_WRITE_MIDDLE, RESP_QPN, 1);
        bth.ack_req = true;
        let pkt = RxPacket {
            bth,
            ext,
            payload: RxPayload::Bytes(&data[256..256 + len]),
        };
        r.receive(0, &pkt, &mut rs, &mut tx);
        let bytes = rs.bytes(WR_KEY, WR_VA, 3 * 256).to_vec();
        (r, tx, bytes)
    };
    let (r, tx, bytes) = run(256, &ExtHdrs::NONE, &|_| {});
    assert!(!r.is_error());
    assert_eq!(r.expected_psn(), 2);
    assert_eq!(nak_of(&tx), Some(AethKind::Ack { credit: 31 }));
    assert_eq!(bytes[..512], data[..512]);
    let (r, tx, bytes) = run(200, &ExtHdrs::NONE, &|_| {});
    assert!(r.is_error(), "short MIDDLE");
    assert_eq!(nak_of(&tx), Some(AethKind::Nak(NakCode::InvalidRequest)));
    assert_eq!(bytes[256..], vec![0; 512][..], "nothing written");
    let (r, tx, _) = run(256, &ExtHdrs::NONE, &|r| r.set_access(true, false, true));
    assert!(r.is_error(), "remote write disabled");
    assert_eq!(nak_of(&tx), Some(AethKind::Nak(NakCode::InvalidRequest)));
    // Two MIDDLEs for a message that has room for one: the second is where LAST belongs.
    let mut rs = RespSide::default();
    rs.add_region(WR_KEY, WR_VA, vec![0; 3 * 256]);
    let mut r = Responder::new(RespConfig::new(REQ_QPN, 256, 0)).unwrap();
    let mut tx = Sink(Vec::new());
    for (psn, op, ext) in [
        (0, Opcode::RC_RDMA_WRITE_FIRST, &first),
        (1, Opcode::RC_RDMA_WRITE_MIDDLE, &ExtHdrs::NONE),
        (2, Opcode::RC_RDMA_WRITE_MIDDLE, &ExtHdrs::NONE),
    ] {
        let at = psn as usize * 256;
        let pkt = RxPacket {
            bth: Bth::new(op, RESP_QPN, psn),
            ext,
            payload: RxPayload::Bytes(&data[at..at + 256]),
        };
        r.receive(0, &pkt, &mut rs, &mut tx);
    }
    assert!(r.is_error());
    assert_eq!(nak_of(&tx), Some(AethKind::Nak(NakCode::InvalidRequest)));
    assert_eq!(tx.0.last().unwrap().0.psn, 2);
    // A MIDDLE whose bytes cannot be placed (the region went away after FIRST): remote access
    // error NAK at its PSN, not executed.
    let mut rs = RespSide::default();
    rs.add_region(WR_KEY, WR_VA, vec![0; 3 * 256]);
    let mut r = Responder::new(RespConfig::new(REQ_QPN, 256, 0)).unwrap();
    let mut tx = Sink(Vec::new());
    let pkt = RxPacket {
        bth: Bth::new(Opcode::RC_RDMA_WRITE_FIRST, RESP_QPN, 0),
        ext: &first,
        payload: RxPayload::Bytes(&data[..256]),
    };
    r.receive(0, &pkt, &mut rs, &mut tx);
    rs.regions.clear();
    let pkt = RxPacket {
        bth: Bth::new(Opcode::RC_RDMA_WRITE_MIDDLE, RESP_QPN, 1),
        ext: &ExtHdrs::NONE,
        payload: RxPayload::Bytes(&data[256..512]),
    };
    r.receive(0, &pkt, &mut rs, &mut tx);
    assert!(r.is_error());
    assert_eq!(nak_of(&tx), Some(AethKind::Nak(NakCode::RemoteAccessError)));
    assert_eq!(tx.0.last().unwrap().0.psn, 1);
    assert_eq!(r.counters().executed, 1);
    assert_eq!(r.error_cause(), Some(NakCode::RemoteAccessError));
}

#[test]
fn rc_configs_are_checked() {
    let ok = ReqConfig::new(1, 1024, 0);
    for (cfg, e) in [
        (ReqConfig { mtu: 1000, ..ok }, ConfigError::Mtu(1000)),
        (ReqConfig { mtu: 8192, ..ok }, ConfigError::Mtu(8192)),
        (
            ReqConfig {
                sq_psn: 1 << 24,
                ..ok
            },
            ConfigError::Psn(1 << 24),
        ),
        (
            ReqConfig {
                dest_qp: 1 << 24,
                ..ok
            },
            ConfigError::DestQp(1 << 24),
        ),
        (
            ReqConfig {
                retry_count: 8,
                ..ok
            },
            ConfigError::RetryCount(8),
        ),
        (ReqConfig { rnr_retry: 9, ..ok }, ConfigError::RetryCount(9)),
        (
            ReqConfig {
                ack_req_every: 0,
                ..ok
            },
            ConfigError::Window,
        ),
        (
            ReqConfig {
                max_unacked_psns: 1 << 23,
                ..ok
            },
            ConfigError::Window,
        ),
    ] {
        assert_eq!(Requester::new(cfg).err(), Some(e));
    }
    let ok = RespConfig::new(1, 1024, 0);
    assert_eq!(
        Responder::new(RespConfig { mtu: 100, ..ok }).err(),
        Some(RespConfigError::Mtu(100))
    );
    assert_eq!(
        Responder::new(RespConfig {
            rq_psn: 1 << 24,
            ..ok
        })
        .err(),
        Some(RespConfigError::Field(1 << 24))
    );
    let mut r = Requester::new(ReqConfig::new(1, 1024, 0)).unwrap();
    let send = WrOp::Send {
        imm: Some(1),
        invalidate: Some(2),
    };
    assert_eq!(r.post(wr(1, send, 1)), Err(PostError::ImmAndInvalidate));
    let fa = WrOp::FetchAdd {
        raddr: 0,
        rkey: 0,
        add: 1,
    };
    assert_eq!(r.post(wr(1, fa, 4)), Err(PostError::AtomicLength(4)));
    let w = WrOp::Write {
        raddr: 0,
        rkey: 0,
        imm: None,
    };
    assert_eq!(
        r.post(wr(1, w, (1 << 31) + 1)),
        Err(PostError::Length((1 << 31) + 1))
    );
    assert_eq!(ack_timeout_ns(0), None);
    assert_eq!(ack_timeout_ns(1), Some(8192));
    assert_eq!(ack_timeout_ns(14), Some(67_108_864));
    assert_eq!(rnr_timer_ns(0), 655_360_000);
    assert_eq!(rnr_timer_ns(1), 10_000);
    assert_eq!(rnr_timer_ns(31), 491_520_000);
}

#[test]
fn rc_unknown_nak_code_is_a_remote_operational_error() {
    struct Sink;
    impl Tx for Sink {
        fn send(&mut self, _: &Bth, _: &ExtHdrs, p: TxPayload<'_>) -> Result<(), LocalFault> {
            (p.fill)(&mut vec![0; p.len])
        }
    }
    let mut r = Requester::new(ReqConfig::new(RESP_QPN, 1024, 0)).unwrap();
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
    r.pump(0, &mut env, &mut Sink);
    let ext = ExtHdrs {
        aeth: Some(Aeth::nak(NakCode::Reserved(9), 0)),
        ..ExtHdrs::default()
    };
    let nak = RxPacket {
        bth: Bth::new(Opcode::RC_ACKNOWLEDGE, REQ_QPN, 0),
        ext: &ext,
        payload: RxPayload::Bytes(&[]),
    };
    r.receive(1, &nak, &mut env, &mut Sink);
    assert_eq!(env.done, vec![(1, WcStatus::RemOpErr)]);
    assert!(r.is_error());
}

/// A response whose PSN is exactly 2^23 past the next PSN to send is outside every window
/// (psn_diff calls it both before and after the outstanding PSNs): ignored, it completes
/// nothing. Found by the `wire` fuzz target (a READ RESPONSE FIRST there completed a SEND).
#[test]
fn rc_response_half_the_psn_space_away_is_ignored() {
    struct Sink;
    impl Tx for Sink {
        fn send(&mut self, _: &Bth, _: &ExtHdrs, p: TxPayload<'_>) -> Result<(), LocalFault> {
            (p.fill)(&mut vec![0; p.len])
        }
    }
    for op in [
        Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        Opcode::RC_RDMA_READ_RESPONSE_ONLY,
        Opcode::RC_ACKNOWLEDGE,
        Opcode::RC_ATOMIC_ACKNOWLEDGE,
    ] {
        let mut r = Requester::new(ReqConfig::new(RESP_QPN, 1024, 0)).unwrap();
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
        r.pump(0, &mut env, &mut Sink);
        // The SEND took PSN 0; the next PSN to send is 1.
        let info = op.info().unwrap();
        let ext = ExtHdrs {
            aeth: Some(Aeth::ack(31, 0)),
            atomic_ack_eth: info
                .hdrs
                .contains(HdrSet::ATOMIC_ACK_ETH)
                .then_some(AtomicAckEth { orig: 0 }),
            ..ExtHdrs::default()
        };
        let data = [0u8; 16];
        let resp = RxPacket {
            bth: Bth::new(op, REQ_QPN, psn_add(1, 1 << 23)),
            ext: &ext,
            payload: RxPayload::Bytes(if info.payload { &data } else { &[] }),
        };
        r.receive(1, &resp, &mut env, &mut Sink);
        assert_eq!(env.done, vec![], "{op}");
        assert!(!r.is_error(), "{op}");
    }
}

/// A sequence or RNR NAK whose PSN lies inside the outstanding READ, past the responses
/// received, is ignored: taking it would skip a response PSN, and the READ would then
/// complete successfully with a hole in its data. Found by the `wire` fuzz target.
#[test]
fn rc_nak_inside_a_read_cannot_skip_its_responses() {
    struct Sink;
    impl Tx for Sink {
        fn send(&mut self, _: &Bth, _: &ExtHdrs, p: TxPayload<'_>) -> Result<(), LocalFault> {
            (p.fill)(&mut vec![0; p.len])
        }
    }
    for nak in [Aeth::nak(NakCode::PsnSequenceError, 0), Aeth::rnr_nak(1, 0)] {
        let mut r = Requester::new(ReqConfig::new(RESP_QPN, 1024, 0)).unwrap();
        let mut env = ReqSide::default();
        // A READ of three packets: PSNs 0, 1, 2.
        env.bufs.insert(1, vec![0xee; 2712]);
        r.post(wr(
            1,
            WrOp::Read {
                raddr: RD_VA,
                rkey: RD_KEY,
            },
            2712,
        ))
        .unwrap();
        r.pump(0, &mut env, &mut Sink);
        let ack = ExtHdrs {
            aeth: Some(Aeth::ack(31, 0)),
            ..ExtHdrs::default()
        };
        let first = [1u8; 1024];
        let last = [3u8; 664];
        let pkt = |op, psn, ext, payload| RxPacket {
            bth: Bth::new(op, REQ_QPN, psn),
            ext,
            payload: RxPayload::Bytes(payload),
        };
        r.receive(
            1,
            &pkt(Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0, &ack, &first),
            &mut env,
            &mut Sink,
        );
        // A NAK naming PSN 2, inside the READ: no responder sends one.
        let n = ExtHdrs {
            aeth: Some(nak),
            ..ExtHdrs::default()
        };
        r.receive(
            2,
            &pkt(Opcode::RC_ACKNOWLEDGE, 2, &n, &[]),
            &mut env,
            &mut Sink,
        );
        r.receive(
            3,
            &pkt(Opcode::RC_RDMA_READ_RESPONSE_LAST, 2, &ack, &last),
            &mut env,
            &mut Sink,
        );
        assert_eq!(
            env.done,
            vec![],
            "{nak:?}: no completion with PSN 1 missing"
        );
        assert!(
            env.bufs[&1][1024..2048].iter().all(|&b| b == 0xee),
            "{nak:?}"
        );
    }
}
