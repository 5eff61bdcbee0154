//! Soak: random messages through every fault, byte-exact.

use super::*;

#[derive(Clone, Debug)]
enum Expect {
    Write { va: u64, data: Vec<u8> },
    Read { va: u64 },
    Atomic { orig: u64 },
    Recv,
}

fn soak(seed: u64, messages: u64, mtu: u32, codec: bool) {
    let mut rc = ReqConfig::new(RESP_QPN, mtu, 0xff_ff00);
    rc.max_rd_atomic = 4;
    rc.ack_timeout = 8; // ~1 ms of virtual time
    let mut pc = RespConfig::new(REQ_QPN, mtu, 0xff_ff00);
    pc.max_dest_rd_atomic = 4;
    pc.min_rnr_timer = 1;
    let mut p = Pair::new(rc, pc);
    p.codec = codec;
    p.rng = Rng::new(seed);
    for f in [&mut p.f_req, &mut p.f_resp] {
        f.drop_ppm = 10_000;
        f.dup_ppm = 10_000;
        f.reorder_ppm = 10_000;
        f.corrupt_ppm = 1_000;
        f.window = 4;
    }
    let slot = 16 * mtu as u64;
    let slots = 256u64;
    p.rs.add_region(WR_KEY, WR_VA, vec![0; (slot * slots) as usize]);
    let rd_len = 64 * 1024;
    p.rs.add_region(RD_KEY, RD_VA, pattern(seed ^ 0x55, rd_len));
    p.rs.add_region(AT_KEY, AT_VA, vec![0; 8]);
    let mut gen = Rng::new(seed ^ 0xabcdef);
    let mut expect: HashMap<u64, Expect> = HashMap::new();
    let mut recv_expect: VecDeque<(RecvKind, Option<u32>, Vec<u8>, u32)> = VecDeque::new();
    let mut counter = 0u64;
    let mut checked = 0usize;
    let mut id = 0u64;
    while id < messages || p.req.outstanding() > 0 {
        // Keep up to 32 messages posted.
        while id < messages && p.req.outstanding() < 32 {
            let len = match gen.below(6) {
                0 => 0,
                1 => 1,
                2 => mtu - 1,
                3 => mtu,
                4 => mtu + 1,
                _ => gen.below(10 * mtu as u64 + 1) as u32,
            };
            let imm = (gen.below(2) == 0).then(|| gen.0.next_u64() as u32);
            let data = gen.bytes(len as usize);
            let (op, len, buf, e) = match gen.below(10) {
                0..=2 => {
                    let va = WR_VA + (id % slots) * slot;
                    let op = WrOp::Write {
                        raddr: va,
                        rkey: WR_KEY,
                        imm,
                    };
                    if imm.is_some() {
                        p.rs.recvs.push_back(vec![0; 1]);
                        recv_expect.push_back((RecvKind::WriteImm, imm, Vec::new(), len));
                    }
                    (op, len, data.clone(), Expect::Write { va, data })
                }
                3..=5 => {
                    p.rs.recvs.push_back(vec![0; 10 * mtu as usize + 1]);
                    recv_expect.push_back((RecvKind::Send, imm, data.clone(), len));
                    (
                        WrOp::Send {
                            imm,
                            invalidate: None,
                        },
                        len,
                        data,
                        Expect::Recv,
                    )
                }
                6..=7 => {
                    let va = RD_VA + gen.below((rd_len as u64) - len as u64);
                    (
                        WrOp::Read {
                            raddr: va,
                            rkey: RD_KEY,
                        },
                        len,
                        vec![0; len as usize],
                        Expect::Read { va },
                    )
                }
                _ => {
                    let add = gen.below(1000);
                    let orig = counter;
                    let op = if gen.below(2) == 0 {
                        counter += add;
                        WrOp::FetchAdd {
                            raddr: AT_VA,
                            rkey: AT_KEY,
                            add,
                        }
                    } else {
                        counter = add;
                        WrOp::CmpSwap {
                            raddr: AT_VA,
                            rkey: AT_KEY,
                            compare: orig,
                            swap: add,
                        }
                    };
                    (op, 8, vec![0; 8], Expect::Atomic { orig })
                }
            };
            let mut w = wr(id, op, len);
            w.fence = gen.below(50) == 0;
            p.post(w, buf);
            expect.insert(id, e);
            id += 1;
        }
        // Run a while, then check what completed.
        for _ in 0..64 {
            p.pump();
            if !p.step() {
                match p.req.next_deadline() {
                    Some(d) => p.now = p.now.max(d),
                    None => break,
                }
            }
        }
        while checked < p.rq.done.len() {
            let (wr_id, status) = p.rq.done[checked];
            checked += 1;
            assert_eq!(status, WcStatus::Success, "wr {wr_id} seed {seed}");
            assert_eq!(wr_id, checked as u64 - 1, "in order");
            match expect.remove(&wr_id).unwrap() {
                Expect::Write { va, data } => {
                    assert_eq!(
                        p.rs.bytes(WR_KEY, va, data.len()),
                        &data[..],
                        "write {wr_id}"
                    )
                }
                Expect::Read { va } => {
                    let got = &p.rq.bufs[&wr_id];
                    assert_eq!(&got[..], p.rs.bytes(RD_KEY, va, got.len()), "read {wr_id}")
                }
                Expect::Atomic { orig } => assert_eq!(p.rq.atomic[&wr_id], orig, "atomic {wr_id}"),
                Expect::Recv => {}
            }
            p.rq.bufs.remove(&wr_id);
        }
        assert!(!p.req.is_error() && !p.resp.is_error(), "seed {seed}");
    }
    assert!(p.run(1_000_000));
    assert_eq!(checked as u64, messages);
    assert_eq!(p.rs.bytes(AT_KEY, AT_VA, 8), &counter.to_le_bytes());
    assert_eq!(p.rs.received.len(), recv_expect.len());
    for ((c, data), (kind, imm, want, len)) in p.rs.received.iter().zip(recv_expect.iter()) {
        assert_eq!(c.status, WcStatus::Success);
        assert_eq!((c.kind, c.imm, c.byte_len), (*kind, *imm, *len));
        assert_eq!(data, want);
    }
    let c = *p.req.counters();
    let r = *p.resp.counters();
    let faults = p.f_req.dropped + p.f_resp.dropped + p.f_req.corrupted + p.f_resp.corrupted;
    assert!(faults > 0 && p.f_req.duplicated + p.f_resp.duplicated > 0);
    assert!(p.f_req.reordered + p.f_resp.reordered > 0);
    assert!(c.retransmitted > 0, "{c:?}");
    assert!(r.duplicates > 0 && r.out_of_sequence > 0, "{r:?}");
    if codec {
        assert!(
            p.bad_frames > 0,
            "corrupted frames dropped by the ICRC / header check"
        );
    }
    eprintln!(
        "soak seed {seed}: {messages} messages, req {c:?}, resp {r:?}, faults drop {}/{} dup {}/{} reorder {}/{} corrupt {}/{}, virtual {} ms",
        p.f_req.dropped, p.f_resp.dropped, p.f_req.duplicated, p.f_resp.duplicated,
        p.f_req.reordered, p.f_resp.reordered, p.f_req.corrupted, p.f_resp.corrupted,
        p.now / 1_000_000
    );
}

#[test]
fn rc_soak_faults_byte_exact() {
    soak(0x5eed_0001, 2000, 1024, true);
}

#[test]
fn rc_soak_small_mtu_raw() {
    soak(0x5eed_0002, 1000, 256, false);
}
