//! [`Responder::receive_middle_run`]: a run of WRITE MIDDLE packets taken at once is, for the
//! responder and for what it sends and writes, the same packets taken one by one; and a run
//! it refuses leaves it untouched.

use super::responder::*;
use super::transport::*;
use super::*;

const MTU: u32 = 256;
const RKEY: u32 = 0x1234;
const VA: u64 = 0x10_0000;
const DEST_QP: u32 = 0x77;

/// One remote region under [`RKEY`] at [`VA`]; the packets' payloads by reference are byte
/// offsets into `wire`. `runs`: whether [`RespMemory::write_run`] may write a run at once.
struct Mem {
    region: Vec<u8>,
    wire: Vec<u8>,
    runs: bool,
    run_calls: u32,
}

impl Mem {
    fn new(len: usize, runs: bool) -> Mem {
        Mem {
            region: vec![0; len],
            wire: (0..len)
                .map(|i| (i as u8).wrapping_mul(31) ^ (i >> 8) as u8)
                .collect(),
            runs,
            run_calls: 0,
        }
    }
    fn span(&self, rkey: u32, va: u64, len: u64) -> Result<usize, AccessFault> {
        let off = va.checked_sub(VA).ok_or(AccessFault)?;
        if rkey != RKEY || off + len > self.region.len() as u64 {
            return Err(AccessFault);
        }
        Ok(off as usize)
    }
}

impl RespMemory for Mem {
    fn check(&mut self, rkey: u32, va: u64, len: u64, _: RemoteAccess) -> Result<(), AccessFault> {
        self.span(rkey, va, len).map(|_| ())
    }
    fn write(&mut self, rkey: u32, va: u64, src: RxPayload<'_>) -> Result<(), AccessFault> {
        let at = self.span(rkey, va, src.len() as u64)?;
        let bytes = match src {
            RxPayload::Bytes(b) => b.to_vec(),
            RxPayload::Ref { token, len } => {
                self.wire[token as usize..token as usize + len].to_vec()
            }
        };
        self.region[at..at + bytes.len()].copy_from_slice(&bytes);
        Ok(())
    }
    fn write_run(&mut self, rkey: u32, va: u64, src: RxPayload<'_>, _rest: u32) -> bool {
        if !self.runs || self.span(rkey, va, src.len() as u64).is_err() {
            return false;
        }
        self.run_calls += 1;
        self.write(rkey, va, src).is_ok()
    }
    fn read(&mut self, _: u32, _: u64, _: &mut [u8]) -> Result<(), AccessFault> {
        Err(AccessFault)
    }
    fn atomic(&mut self, _: u32, _: u64, _: AtomicOp) -> Result<u64, AccessFault> {
        Err(AccessFault)
    }
    fn recv_ready(&mut self) -> bool {
        false
    }
    fn recv_write(&mut self, _: u32, _: RxPayload<'_>) -> Result<(), RecvFault> {
        Err(RecvFault::Protection)
    }
    fn invalidate(&mut self, _: u32) -> Result<(), AccessFault> {
        Err(AccessFault)
    }
}

impl Completions for Mem {
    fn send_done(&mut self, _: u64, _: WcStatus) {}
    fn recv_done(&mut self, _: RecvCompletion) {}
}

/// What the responder sent.
#[derive(Default)]
struct Sent(Vec<(Bth, ExtHdrs)>);

impl Tx for Sent {
    fn send(&mut self, b: &Bth, e: &ExtHdrs, _: TxPayload<'_>) -> Result<(), LocalFault> {
        self.0.push((*b, *e));
        Ok(())
    }
}

/// A responder (with `policy`) that took the FIRST packet of a WRITE of `npkts` MTUs at PSN
/// `psn0`, its memory and what it sent.
fn started(npkts: u32, psn0: u32, policy: AckPolicy, runs: bool) -> (Responder, Mem, Sent) {
    let len = (npkts * MTU) as usize;
    let mut cfg = RespConfig::new(DEST_QP, MTU, psn0);
    cfg.ack_policy = policy;
    let mut r = Responder::new(cfg).unwrap();
    let mut m = Mem::new(len, runs);
    let mut tx = Sent::default();
    let reth = ExtHdrs {
        reth: Some(Reth {
            va: VA,
            r_key: RKEY,
            dma_len: len as u32,
        }),
        ..ExtHdrs::default()
    };
    let pkt = RxPacket {
        bth: Bth::new(Opcode::RC_RDMA_WRITE_FIRST, DEST_QP, psn0),
        ext: &reth,
        payload: RxPayload::Ref {
            token: 0,
            len: MTU as usize,
        },
    };
    r.receive(0, &pkt, &mut m, &mut tx);
    assert_eq!(r.expected_psn(), psn_add(psn0, 1));
    (r, m, tx)
}

/// MIDDLE packet `i` (1-based in the message) with its AckReq.
fn middle(psn0: u32, i: u32, ack: bool) -> RxPacket<'static> {
    let mut bth = Bth::new(Opcode::RC_RDMA_WRITE_MIDDLE, DEST_QP, psn_add(psn0, i));
    bth.ack_req = ack;
    RxPacket {
        bth,
        ext: &NO_EXT,
        payload: RxPayload::Ref {
            token: (i * MTU) as u64,
            len: MTU as usize,
        },
    }
}

/// The LAST packet of a message of `npkts` packets.
fn last(psn0: u32, npkts: u32) -> RxPacket<'static> {
    let mut bth = Bth::new(
        Opcode::RC_RDMA_WRITE_LAST,
        DEST_QP,
        psn_add(psn0, npkts - 1),
    );
    bth.ack_req = true;
    RxPacket {
        bth,
        ext: &NO_EXT,
        payload: RxPayload::Ref {
            token: ((npkts - 1) * MTU) as u64,
            len: MTU as usize,
        },
    }
}

/// Runs of every length, AckReq patterns (none, some, every packet) and both ACK policies,
/// across the PSN wrap: the run leaves the responder as the packets one by one do (expected
/// PSN, MSN, counters), sends the same ACKs in the same order, writes the same bytes, and the
/// message's LAST packet then completes it the same way.
#[test]
fn rc_middle_run_is_its_packets_one_by_one() {
    let npkts = 70u32;
    for psn0 in [0u32, PSN_MASK - 20] {
        for policy in [AckPolicy::AckReq, AckPolicy::EveryPacket] {
            for acks in [0u64, 0b1001_0000_0100, !0] {
                for n in [2u32, 3, 17, 64] {
                    let ack = |i: u32| (acks >> (i - 1)) & 1 != 0;
                    // One by one: MIDDLE 1..=n, then the rest, then LAST.
                    let (mut a, mut ma, mut ta) = started(npkts, psn0, policy, true);
                    // As a run: MIDDLE 1..=n at once, then the rest one by one, then LAST.
                    let (mut b, mut mb, mut tb) = started(npkts, psn0, policy, true);
                    for i in 1..=n {
                        a.receive(0, &middle(psn0, i, ack(i)), &mut ma, &mut ta);
                    }
                    let all = RxPayload::Ref {
                        token: MTU as u64,
                        len: (n * MTU) as usize,
                    };
                    let took = b.receive_middle_run(
                        &middle(psn0, 1, ack(1)),
                        n,
                        acks,
                        all,
                        &mut mb,
                        &mut tb,
                    );
                    assert!(took, "run of {n}");
                    assert_eq!(mb.run_calls, 1);
                    assert_eq!(b.expected_psn(), a.expected_psn(), "run of {n}");
                    assert_eq!(b.counters(), a.counters(), "run of {n}");
                    assert_eq!(tb.0, ta.0, "ACKs of a run of {n}, policy {policy:?}");
                    assert_eq!(mb.region, ma.region);
                    for i in n + 1..npkts - 1 {
                        a.receive(0, &middle(psn0, i, false), &mut ma, &mut ta);
                        b.receive(0, &middle(psn0, i, false), &mut mb, &mut tb);
                    }
                    a.receive(0, &last(psn0, npkts), &mut ma, &mut ta);
                    b.receive(0, &last(psn0, npkts), &mut mb, &mut tb);
                    assert!(!a.is_error() && !b.is_error());
                    assert_eq!(b.msn(), 1);
                    assert_eq!(b.msn(), a.msn());
                    assert_eq!(b.counters(), a.counters());
                    assert_eq!(b.counters().executed, u64::from(npkts));
                    assert_eq!(tb.0, ta.0);
                    assert_eq!(mb.region, mb.wire, "every byte landed");
                    assert_eq!(ma.region, mb.region);
                }
            }
        }
    }
}

/// Every case in which one of the packets would not take the common MIDDLE path, and the
/// environment refusing to write the run at once: the run is refused and the responder, its
/// memory and the wire are as they were (the caller then hands the packets over one by one,
/// and the responder's own checks answer them).
#[test]
fn rc_middle_run_refused_changes_nothing() {
    let npkts = 10u32;
    let all = |n: u32| RxPayload::Ref {
        token: MTU as u64,
        len: (n * MTU) as usize,
    };
    type Case = (
        &'static str,
        u32,
        bool,
        fn(&mut Responder) -> RxPacket<'static>,
    );
    let cases: [Case; 7] = [
        // Packets 1..=9 of 10: the 9th is the message's last (a MIDDLE there is a length
        // error the responder must see on its own).
        ("reaches the LAST", npkts - 1, true, |_| middle(0, 1, false)),
        ("no packet", 0, true, |_| middle(0, 1, false)),
        ("not the expected PSN", 3, true, |_| middle(0, 2, false)),
        ("environment refuses", 3, false, |_| middle(0, 1, false)),
        ("remote write disabled", 3, true, |r| {
            r.set_access(true, false, true);
            middle(0, 1, false)
        }),
        ("short packets", 3, true, |_| {
            let mut p = middle(0, 1, false);
            p.payload = RxPayload::Ref {
                token: 256,
                len: 200,
            };
            p
        }),
        ("responder in error", 3, true, |r| {
            r.set_error();
            middle(0, 1, false)
        }),
    ];
    for (what, n, runs, prep) in cases {
        let (mut r, mut m, mut tx) = started(npkts, 0, AckPolicy::AckReq, runs);
        let first = prep(&mut r);
        let (psn, counters, sent, region) = (
            r.expected_psn(),
            *r.counters(),
            tx.0.len(),
            m.region.clone(),
        );
        let took = r.receive_middle_run(&first, n, 0, all(n.max(1)), &mut m, &mut tx);
        assert!(!took, "{what}");
        assert_eq!(r.expected_psn(), psn, "{what}");
        assert_eq!(*r.counters(), counters, "{what}");
        assert_eq!(tx.0.len(), sent, "{what}");
        assert_eq!(m.region, region, "{what}");
        assert_eq!(m.run_calls, 0, "{what}");
    }
    // And the packets of the first case, one by one: the 9th MIDDLE is where the message
    // ends, so the responder NAKs it as an invalid request.
    let (mut r, mut m, mut tx) = started(npkts, 0, AckPolicy::AckReq, true);
    for i in 1..npkts {
        r.receive(0, &middle(0, i, false), &mut m, &mut tx);
    }
    assert!(r.is_error());
    assert_eq!(r.error_cause(), Some(NakCode::InvalidRequest));
}
