//! Every opcode, every size; long READs, atomics, the AckReq policy and runs of MIDDLE packets.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Send,
    SendImm,
    SendInv,
    Write,
    WriteImm,
    Read,
}

fn one_message(mtu: u32, kind: Kind, len: u32, codec: bool) {
    let mut p = Pair::with_mtu(mtu);
    p.codec = codec;
    let remote = pattern(len as u64 + 7, len as usize);
    p.rs.add_region(WR_KEY, WR_VA, vec![0; len as usize + 64]);
    p.rs.add_region(RD_KEY, RD_VA, remote.clone());
    p.rs.recvs.push_back(vec![0; len as usize + 16]);
    let data = pattern(len as u64 + 3, len as usize);
    let op = match kind {
        Kind::Send => WrOp::Send {
            imm: None,
            invalidate: None,
        },
        Kind::SendImm => WrOp::Send {
            imm: Some(0xdead_beef),
            invalidate: None,
        },
        Kind::SendInv => WrOp::Send {
            imm: None,
            invalidate: Some(0x4242),
        },
        Kind::Write => WrOp::Write {
            raddr: WR_VA + 8,
            rkey: WR_KEY,
            imm: None,
        },
        Kind::WriteImm => WrOp::Write {
            raddr: WR_VA + 8,
            rkey: WR_KEY,
            imm: Some(0x1234_5678),
        },
        Kind::Read => WrOp::Read {
            raddr: RD_VA,
            rkey: RD_KEY,
        },
    };
    let local = if kind == Kind::Read {
        vec![0; len as usize]
    } else {
        data.clone()
    };
    p.post(wr(1, op, len), local);
    p.run_ok();
    let ctx = format!("{kind:?} len {len} mtu {mtu} codec {codec}");
    assert_eq!(p.rq.done, vec![(1, WcStatus::Success)], "{ctx}");
    let npkts = packets_for(len, mtu) as usize;
    match kind {
        Kind::Send | Kind::SendImm | Kind::SendInv => {
            assert_eq!(p.rs.received.len(), 1, "{ctx}");
            let (c, got) = &p.rs.received[0];
            assert_eq!(c.status, WcStatus::Success);
            assert_eq!(c.kind, RecvKind::Send);
            assert_eq!(c.byte_len, len);
            assert_eq!(got, &data, "{ctx}");
            assert_eq!(c.imm, (kind == Kind::SendImm).then_some(0xdead_beef));
            assert_eq!(c.invalidated, (kind == Kind::SendInv).then_some(0x4242));
            if kind == Kind::SendInv {
                assert_eq!(p.rs.invalidated, vec![0x4242]);
            }
            assert_eq!(p.log_req.len(), npkts, "{ctx}");
        }
        Kind::Write | Kind::WriteImm => {
            assert_eq!(
                p.rs.bytes(WR_KEY, WR_VA + 8, len as usize),
                &data[..],
                "{ctx}"
            );
            // Nothing written outside the target range.
            assert!(p.rs.bytes(WR_KEY, WR_VA, 8).iter().all(|&b| b == 0));
            assert!(p
                .rs
                .bytes(WR_KEY, WR_VA + 8 + len as u64, 56)
                .iter()
                .all(|&b| b == 0));
            if kind == Kind::WriteImm {
                let (c, _) = &p.rs.received[0];
                assert_eq!(
                    (c.kind, c.byte_len, c.imm),
                    (RecvKind::WriteImm, len, Some(0x1234_5678))
                );
            } else {
                assert!(p.rs.received.is_empty());
            }
            assert_eq!(p.log_req.len(), npkts, "{ctx}");
            // RETH on FIRST/ONLY only, with the whole length.
            for (i, l) in p.log_req.iter().enumerate() {
                assert_eq!(l.ext.reth.is_some(), i == 0, "{ctx}");
                assert_eq!(
                    l.ext.imm_dt.is_some(),
                    kind == Kind::WriteImm && i + 1 == npkts
                );
            }
            assert_eq!(p.log_req[0].ext.reth.unwrap().dma_len, len);
        }
        Kind::Read => {
            assert_eq!(p.rq.bufs[&1], remote, "{ctx}");
            assert_eq!(opcodes(&p.log_req), vec![Opcode::RC_RDMA_READ_REQUEST]);
            assert_eq!(p.log_resp.len(), npkts, "{ctx}");
            for (i, l) in p.log_resp.iter().enumerate() {
                let want = match (i == 0, i + 1 == npkts) {
                    (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                    (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                    (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
                    (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                };
                assert_eq!(l.bth.opcode, want, "{ctx}");
                assert_eq!(
                    l.ext.aeth.is_some(),
                    want != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE
                );
                assert_eq!(l.bth.psn, 0x100 + i as u32);
            }
        }
    }
    // Where each payload lives, for a link that leaves it in place.
    for (k, l) in p.log_req.iter().enumerate().filter(|(_, l)| l.len > 0) {
        let offset = k as u32 * mtu;
        assert_eq!(l.src, Some(PayloadSrc::Wqe { wr: 1, offset }), "{ctx}");
    }
    for (k, l) in p.log_resp.iter().enumerate().filter(|(_, l)| l.len > 0) {
        let va = RD_VA + k as u64 * mtu as u64;
        assert_eq!(
            l.src,
            Some(PayloadSrc::Remote { rkey: RD_KEY, va }),
            "{ctx}"
        );
    }
    // PSNs: consecutive from sq_psn; AckReq on the last packet.
    let last = p.log_req.last().unwrap();
    assert!(last.bth.ack_req, "{ctx}");
    for (i, l) in p.log_req.iter().enumerate() {
        assert_eq!(l.bth.psn, 0x100 + i as u32, "{ctx}");
        assert_eq!(l.bth.dest_qp, RESP_QPN);
        assert!(l.len <= mtu as usize);
    }
    assert_eq!(p.req.counters().retransmitted, 0);
    assert!(!p.req.is_error() && !p.resp.is_error());
    assert_eq!(p.resp.msn(), 1);
}

#[test]
fn rc_every_opcode_every_size_byte_exact() {
    for mtu in [256u32, 1024, 4096] {
        for len in [0, 1, mtu - 1, mtu, mtu + 1, 10 * mtu] {
            for kind in [
                Kind::Send,
                Kind::SendImm,
                Kind::SendInv,
                Kind::Write,
                Kind::WriteImm,
                Kind::Read,
            ] {
                one_message(mtu, kind, len, true);
            }
        }
    }
    // The same without the codec (raw headers): the transport does not depend on it.
    for kind in [Kind::Send, Kind::Write, Kind::Read] {
        one_message(512, kind, 5 * 512 + 3, false);
    }
}

/// A READ of more than [`READ_BURST`] packets is streamed: the request draws one burst, each
/// responder pump the next, and a new request first flushes what is left, so the wire keeps
/// PSN order; every byte arrives.
#[test]
fn rc_long_read_is_streamed_in_bursts() {
    use crate::roce::responder::READ_BURST;
    let mtu = 256u32;
    let n = READ_BURST + 10; // within the requester's 128-PSN window, so the WRITE goes out
    let len = n * mtu - 5;
    let mut p = Pair::with_mtu(mtu);
    let remote = pattern(99, len as usize);
    p.rs.add_region(RD_KEY, RD_VA, remote.clone());
    p.rs.add_region(WR_KEY, WR_VA, vec![0; 64]);
    let read = WrOp::Read {
        raddr: RD_VA,
        rkey: RD_KEY,
    };
    p.post(wr(1, read, len), vec![0; len as usize]);
    p.req.pump(
        p.now,
        &mut p.rq,
        &mut Link {
            q: &mut p.to_resp,
            faults: &mut p.f_req,
            rng: &mut p.rng,
            log: &mut p.log_req,
            tmpl: template(false),
            codec: true,
            now: 0,
            store: &p.store,
        },
    );
    assert!(p.step(), "the READ request is on the wire");
    assert_eq!(p.log_resp.len() as u32, READ_BURST, "one burst per request");
    assert!(p.resp.has_pending_reads());
    // A WRITE behind it: its arrival flushes the rest of the reply first.
    let write = WrOp::Write {
        raddr: WR_VA,
        rkey: WR_KEY,
        imm: None,
    };
    p.post(wr(2, write, 16), vec![7; 16]);
    p.req.pump(
        p.now,
        &mut p.rq,
        &mut Link {
            q: &mut p.to_resp,
            faults: &mut p.f_req,
            rng: &mut p.rng,
            log: &mut p.log_req,
            tmpl: template(false),
            codec: true,
            now: p.now,
            store: &p.store,
        },
    );
    assert!(p.step());
    assert!(!p.resp.has_pending_reads());
    let psns: Vec<u32> = p.log_resp.iter().map(|l| l.bth.psn).collect();
    assert!(
        psns.windows(2).all(|w| w[1] == w[0] + 1),
        "PSN order on the wire"
    );
    assert_eq!(
        p.log_resp[n as usize - 1].bth.opcode,
        Opcode::RC_RDMA_READ_RESPONSE_LAST
    );
    assert_eq!(p.log_resp[n as usize].bth.opcode, Opcode::RC_ACKNOWLEDGE);
    p.run_ok();
    assert_eq!(
        p.rq.done,
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(p.rq.bufs[&1], remote);
    // Alone, a long READ finishes through the responder's pump.
    let mut p = Pair::with_mtu(mtu);
    p.rs.add_region(RD_KEY, RD_VA, remote.clone());
    p.post(wr(1, read, len), vec![0; len as usize]);
    p.run_ok();
    assert_eq!(p.rq.done, vec![(1, WcStatus::Success)]);
    assert_eq!(p.rq.bufs[&1], remote);
}

#[test]
fn rc_atomics_return_original_values() {
    let mut p = Pair::with_mtu(1024);
    let mut cell = vec![0u8; 16];
    cell[8..].copy_from_slice(&100u64.to_le_bytes());
    p.rs.add_region(AT_KEY, AT_VA, cell);
    let raddr = AT_VA + 8;
    p.post(
        wr(
            1,
            WrOp::FetchAdd {
                raddr,
                rkey: AT_KEY,
                add: 5,
            },
            8,
        ),
        vec![0; 8],
    );
    p.post(
        wr(
            2,
            WrOp::CmpSwap {
                raddr,
                rkey: AT_KEY,
                compare: 105,
                swap: 7,
            },
            8,
        ),
        vec![0; 8],
    );
    p.post(
        wr(
            3,
            WrOp::CmpSwap {
                raddr,
                rkey: AT_KEY,
                compare: 1,
                swap: 9,
            },
            8,
        ),
        vec![0; 8],
    );
    p.post(
        wr(
            4,
            WrOp::FetchAdd {
                raddr,
                rkey: AT_KEY,
                add: u64::MAX,
            },
            8,
        ),
        vec![0; 8],
    );
    p.run_ok();
    assert!(p.rq.done.iter().all(|&(_, s)| s == WcStatus::Success));
    assert_eq!(p.rq.done.len(), 4);
    assert_eq!(p.rq.atomic[&1], 100);
    assert_eq!(p.rq.atomic[&2], 105);
    assert_eq!(p.rq.atomic[&3], 7); // compare failed: no swap, original returned
    assert_eq!(p.rq.atomic[&4], 7);
    assert_eq!(p.rs.bytes(AT_KEY, raddr, 8), &6u64.to_le_bytes());
    let acks: Vec<_> = p.log_resp.iter().map(|l| l.bth.opcode).collect();
    assert_eq!(acks, vec![Opcode::RC_ATOMIC_ACKNOWLEDGE; 4]);
    assert!(p.log_resp.iter().all(|l| l.ext.atomic_ack_eth.is_some()));
    assert_eq!(
        opcodes(&p.log_req),
        vec![
            Opcode::RC_FETCH_ADD,
            Opcode::RC_COMPARE_SWAP,
            Opcode::RC_COMPARE_SWAP,
            Opcode::RC_FETCH_ADD
        ]
    );
}

#[test]
fn rc_ack_request_frequency_and_coalesced_acks() {
    // A 200-packet WRITE: AckReq on the last packet and on every 66th before it (rxe's
    // RXE_MAX_PKT_PER_ACK rule); the responder ACKs only those packets. (The window is
    // widened so that its own AckReq rule does not fire: the harness sends before it ACKs.)
    let mut rc = ReqConfig::new(RESP_QPN, 256, 0x100);
    rc.max_unacked_psns = 1024;
    let mut p = Pair::new(rc, RespConfig::new(REQ_QPN, 256, 0x100));
    p.rs.add_region(WR_KEY, WR_VA, vec![0; 200 * 256]);
    let data = pattern(9, 200 * 256);
    p.post(
        wr(
            1,
            WrOp::Write {
                raddr: WR_VA,
                rkey: WR_KEY,
                imm: None,
            },
            200 * 256,
        ),
        data.clone(),
    );
    p.run_ok();
    let reqs: Vec<usize> = (0..p.log_req.len())
        .filter(|&i| p.log_req[i].bth.ack_req)
        .collect();
    assert_eq!(reqs, vec![65, 131, 197, 199]);
    assert_eq!(p.resp.counters().acks, 4);
    assert_eq!(p.rs.bytes(WR_KEY, WR_VA, data.len()), &data[..]);

    // log_ack_req_freq 0: AckReq on every packet, an ACK for each.
    let mut rc = ReqConfig::new(RESP_QPN, 256, 0);
    rc.ack_req_every = 1;
    let mut p = Pair::new(rc, RespConfig::new(REQ_QPN, 256, 0));
    p.rs.add_region(WR_KEY, WR_VA, vec![0; 2048]);
    p.post(
        wr(
            1,
            WrOp::Write {
                raddr: WR_VA,
                rkey: WR_KEY,
                imm: None,
            },
            1200,
        ),
        pattern(8, 1200),
    );
    p.run_ok();
    assert!(p.log_req.iter().all(|l| l.bth.ack_req));
    assert_eq!(p.resp.counters().acks, 5);

    // Coalescing: five SENDs whose first four ACKs are lost complete from the fifth ACK alone.
    let mut p = Pair::with_mtu(1024);
    for _ in 0..5 {
        p.rs.recvs.push_back(vec![0; 100]);
    }
    let mut acks = 0;
    p.f_resp.hook = Some(Box::new(move |b: &Bth, _: &ExtHdrs| {
        acks += 1;
        b.opcode == Opcode::RC_ACKNOWLEDGE && acks <= 4
    }));
    for i in 0..5 {
        p.post(
            wr(
                i,
                WrOp::Send {
                    imm: None,
                    invalidate: None,
                },
                100,
            ),
            pattern(i, 100),
        );
    }
    p.run_ok();
    assert_eq!(
        p.rq.done,
        (0..5).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    assert_eq!(p.req.counters().retransmitted, 0);
    assert_eq!(p.req.counters().timeouts, 0);
}

#[test]
fn rc_ack_request_when_the_window_fills() {
    // AckReq rarer than the window (log_ack_req_freq 8 vs 128 unacknowledged PSNs): the packet
    // that fills the window asks for an ACK, so a long WRITE never stalls into a timeout.
    let mut rc = ReqConfig::new(RESP_QPN, 256, 0);
    rc.ack_req_every = 256;
    let mut p = Pair::new(rc, RespConfig::new(REQ_QPN, 256, 0));
    p.rs.add_region(WR_KEY, WR_VA, vec![0; 300 * 256]);
    let data = pattern(15, 300 * 256);
    p.post(
        wr(
            1,
            WrOp::Write {
                raddr: WR_VA,
                rkey: WR_KEY,
                imm: None,
            },
            300 * 256,
        ),
        data.clone(),
    );
    p.run_ok();
    assert_eq!(p.rq.done, vec![(1, WcStatus::Success)]);
    assert_eq!(p.rs.bytes(WR_KEY, WR_VA, data.len()), &data[..]);
    assert_eq!(p.req.counters().timeouts, 0);
    assert_eq!(p.req.counters().retransmitted, 0);
    assert!(p.log_req[127].bth.ack_req);
}

/// The requester's MIDDLE packets handed to a link as runs ([`TxRun`]) are the packets it
/// sends one by one to a link that takes no runs: same PSNs (across the 24-bit wrap), opcodes,
/// AckReq bits (every 3rd packet, the one that fills the window, the last), payload offsets
/// and lengths, window stops, a retransmission after a timeout, and counters.
#[test]
fn rc_runs_of_middle_packets_are_the_packets_sent_one_by_one() {
    type Sent = Vec<(Bth, HdrSet, Option<PayloadSrc>, usize)>;
    struct OneByOne(Sent);
    impl Tx for OneByOne {
        fn send(&mut self, b: &Bth, e: &ExtHdrs, p: TxPayload<'_>) -> Result<(), LocalFault> {
            self.0.push((*b, e.set(), p.src, p.len));
            Ok(())
        }
    }
    struct Runs(Sent, u32);
    impl Tx for Runs {
        fn send(&mut self, b: &Bth, e: &ExtHdrs, p: TxPayload<'_>) -> Result<(), LocalFault> {
            self.0.push((*b, e.set(), p.src, p.len));
            Ok(())
        }
        fn send_run(&mut self, run: &TxRun) -> bool {
            self.1 += 1;
            for i in 0..run.n {
                let mut b = run.bth;
                b.psn = psn_add(run.bth.psn, i);
                b.ack_req = (run.acks >> i) & 1 != 0;
                let offset = run.offset + i * run.each;
                let src = Some(PayloadSrc::Wqe { wr: run.wr, offset });
                self.0.push((b, HdrSet::NONE, src, run.each as usize));
            }
            true
        }
    }
    let drive = |tx: &mut dyn Tx| {
        let mut rc = ReqConfig::new(RESP_QPN, 256, 0xff_fff0);
        (rc.ack_req_every, rc.max_unacked_psns) = (3, 10);
        let mut r = Requester::new(rc).unwrap();
        let mut env = ReqSide::default();
        env.bufs.insert(1, vec![0; 40 * 256]);
        env.bufs.insert(2, vec![0; 20 * 256 - 5]);
        let write = WrOp::Write {
            raddr: WR_VA,
            rkey: WR_KEY,
            imm: None,
        };
        r.post(wr(1, write, 40 * 256)).unwrap();
        let send = WrOp::Send {
            imm: Some(7),
            invalidate: None,
        };
        r.post(wr(2, send, 20 * 256 - 5)).unwrap();
        // The first window goes out, times out and is sent again (from its FIRST packet).
        r.pump(0, &mut env, tx);
        let timeout = 1_000_000_000;
        r.pump(timeout, &mut env, tx);
        for round in 0..20 {
            r.pump(timeout + round, &mut env, tx);
            if r.outstanding() == 0 || env.done.len() == 2 {
                break;
            }
            // Acknowledge everything sent so far.
            let last = psn_add(r.next_psn(), PSN_MASK);
            let ext = ExtHdrs {
                aeth: Some(Aeth::ack(Aeth::CREDIT_UNLIMITED, 0)),
                ..ExtHdrs::default()
            };
            let ack = RxPacket {
                bth: Bth::new(Opcode::RC_ACKNOWLEDGE, REQ_QPN, last),
                ext: &ext,
                payload: RxPayload::Bytes(&[]),
            };
            r.receive(timeout + round, &ack, &mut env, tx);
        }
        (*r.counters(), env.done.clone())
    };
    let mut one = OneByOne(Vec::new());
    let a = drive(&mut one);
    let mut runs = Runs(Vec::new(), 0);
    let b = drive(&mut runs);
    assert_eq!(one.0.len(), 70, "60 packets and 10 sent again");
    assert_eq!(one.0, runs.0, "the same packets");
    assert_eq!(a, b, "the same counters and completions");
    assert_eq!((a.0.retransmitted, a.0.timeouts), (10, 1));
    assert_eq!(a.1, vec![(1, WcStatus::Success), (2, WcStatus::Success)]);
    assert!(runs.1 >= 4, "runs were taken ({})", runs.1);
    // The stream itself: PSNs wrap, AckReq on every 3rd packet since the last one, the 10th
    // of a window and each message's last.
    assert_eq!(one.0[15 + 10].0.psn, 0xff_ffff);
    assert_eq!(one.0[16 + 10].0.psn, 0);
    assert_eq!(one.0[..10], one.0[10..20], "the same window again");
    assert!(one.0[39 + 10].0.ack_req && one.0[59 + 10].0.ack_req);
    assert!(one.0.iter().filter(|p| p.0.ack_req).count() >= 20);
}
