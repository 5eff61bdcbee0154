//! Both directions: two RcQp, each requester and responder at once.

use super::*;

/// A whole QP's environment: both sides of the harness.
#[derive(Default)]
struct Side {
    req: ReqSide,
    resp: RespSide,
}

impl ReqMemory for Side {
    fn gather(&mut self, wr: u64, offset: u32, dst: &mut [u8]) -> Result<(), LocalFault> {
        self.req.gather(wr, offset, dst)
    }
    fn scatter(&mut self, wr: u64, offset: u32, src: RxPayload<'_>) -> Result<(), LocalFault> {
        self.req.scatter(wr, offset, src)
    }
    fn atomic_result(&mut self, wr: u64, orig: u64) -> Result<(), LocalFault> {
        self.req.atomic_result(wr, orig)
    }
}

impl RespMemory for Side {
    fn check(&mut self, rkey: u32, va: u64, len: u64, a: RemoteAccess) -> Result<(), AccessFault> {
        self.resp.check(rkey, va, len, a)
    }
    fn write(&mut self, rkey: u32, va: u64, src: RxPayload<'_>) -> Result<(), AccessFault> {
        self.resp.write(rkey, va, src)
    }
    fn read(&mut self, rkey: u32, va: u64, dst: &mut [u8]) -> Result<(), AccessFault> {
        self.resp.read(rkey, va, dst)
    }
    fn atomic(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, AccessFault> {
        self.resp.atomic(rkey, va, op)
    }
    fn recv_ready(&mut self) -> bool {
        self.resp.recv_ready()
    }
    fn recv_write(&mut self, offset: u32, src: RxPayload<'_>) -> Result<(), RecvFault> {
        self.resp.recv_write(offset, src)
    }
    fn invalidate(&mut self, rkey: u32) -> Result<(), AccessFault> {
        self.resp.invalidate(rkey)
    }
}

impl Completions for Side {
    fn send_done(&mut self, wr: u64, status: WcStatus) {
        self.req.send_done(wr, status)
    }
    fn recv_done(&mut self, c: RecvCompletion) {
        self.resp.recv_done(c)
    }
}

#[test]
fn rc_qp_both_directions_at_once() {
    use super::rc::RcQp;
    let mtu = 512;
    let qp = |dest, psn_out, psn_in| RcQp {
        requester: Requester::new(ReqConfig::new(dest, mtu, psn_out)).unwrap(),
        responder: Responder::new(RespConfig::new(dest, mtu, psn_in)).unwrap(),
    };
    let mut qps = [qp(RESP_QPN, 10, 900), qp(REQ_QPN, 900, 10)];
    let mut sides = [Side::default(), Side::default()];
    for (i, s) in sides.iter_mut().enumerate() {
        s.resp.add_region(WR_KEY, WR_VA, vec![0; 64 * 1024]);
        s.resp
            .add_region(RD_KEY, RD_VA, pattern(100 + i as u64, 8192));
        for _ in 0..40 {
            s.resp.recvs.push_back(vec![0; 4096]);
        }
    }
    let store = Store::default();
    let mut queues = [VecDeque::new(), VecDeque::new()];
    let mut faults = [Faults::default(), Faults::default()];
    for f in &mut faults {
        f.drop_ppm = 30_000;
        f.dup_ppm = 20_000;
        f.reorder_ppm = 20_000;
        f.window = 3;
    }
    let mut rng = Rng::new(77);
    let mut logs = [Vec::new(), Vec::new()];
    let mut now: Nanos = 0;
    // Each side WRITEs, SENDs and READs to the other.
    let mut sent_data: [Vec<(u64, Vec<u8>)>; 2] = [Vec::new(), Vec::new()];
    for (i, (qp, side)) in qps.iter_mut().zip(sides.iter_mut()).enumerate() {
        for m in 0..30u64 {
            let len = (m as u32 * 331) % 3000;
            let data = pattern(m * 2 + i as u64, len as usize);
            let (op, buf) = match m % 3 {
                0 => (
                    WrOp::Write {
                        raddr: WR_VA + m * 2048,
                        rkey: WR_KEY,
                        imm: None,
                    },
                    data.clone(),
                ),
                1 => (
                    WrOp::Send {
                        imm: Some(m as u32),
                        invalidate: None,
                    },
                    data.clone(),
                ),
                _ => (
                    WrOp::Read {
                        raddr: RD_VA + m * 100,
                        rkey: RD_KEY,
                    },
                    vec![0; len as usize],
                ),
            };
            side.req.bufs.insert(m, buf);
            qp.post(wr(m, op, len)).unwrap();
            sent_data[i].push((m, data));
        }
    }
    for _ in 0..1_000_000 {
        let mut moved = false;
        for i in 0..2 {
            let (a, b) = queues.split_at_mut(1);
            let (out, inq) = if i == 0 {
                (&mut a[0], &mut b[0])
            } else {
                (&mut b[0], &mut a[0])
            };
            let mut tx = Link {
                q: out,
                faults: &mut faults[i],
                rng: &mut rng,
                log: &mut logs[i],
                tmpl: template(i == 1),
                codec: true,
                now,
                store: &store,
            };
            qps[i].pump(now, &mut sides[i], &mut tx);
            if let Some(w) = inq.pop_front() {
                moved = true;
                now += 100;
                let (q, s) = (&mut qps[i], &mut sides[i]);
                let mut bad = 0;
                with_packet(&w, &mut bad, |p| q.receive(now, p, s, &mut tx));
            }
        }
        if !moved {
            match qps.iter().filter_map(|q| q.next_deadline()).min() {
                Some(d) => now = now.max(d),
                None => break,
            }
        }
    }
    for i in 0..2 {
        let peer = 1 - i;
        assert!(!qps[i].is_error());
        assert_eq!(
            sides[i].req.done,
            (0..30).map(|m| (m, WcStatus::Success)).collect::<Vec<_>>()
        );
        let mut recvs = sides[peer].resp.received.iter();
        for (m, data) in &sent_data[i] {
            match m % 3 {
                0 => assert_eq!(
                    sides[peer].resp.bytes(WR_KEY, WR_VA + m * 2048, data.len()),
                    &data[..]
                ),
                1 => {
                    let (c, got) = recvs.next().unwrap();
                    assert_eq!((c.imm, got), (Some(*m as u32), data));
                }
                _ => {
                    let got = &sides[i].req.bufs[m];
                    assert_eq!(
                        &got[..],
                        sides[peer].resp.bytes(RD_KEY, RD_VA + m * 100, got.len())
                    );
                }
            }
        }
        assert!(qps[i].requester.counters().retransmitted > 0);
    }
}
