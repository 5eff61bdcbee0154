//! RC transport tests: a requester and a responder back to back through a harness that moves
//! frames (encoded to real bytes with a valid ICRC and decoded again, or as raw headers),
//! injects faults (drop, duplicate, reorder, corrupt) and advances a virtual clock.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::rc::Rc;

use super::requester::*;
use super::responder::*;
use super::transport::*;
use super::*;

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

/// SplitMix64 (Steele, Lea, Flood 2014): deterministic, dependency-free, good in every bit.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (Lemire's multiply-shift; the bias is below 2^-40 for these `n`).
    fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n.max(1) as u128) >> 64) as u64
    }
    /// True with probability `ppm` parts per million.
    fn ppm(&mut self, ppm: u32) -> bool {
        self.below(1_000_000) < ppm as u64
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Payloads a raw (frameless) link left "in place", by token: what a shared-memory link's
/// receiver would resolve [`RxPayload::Ref`] against.
type Store = Rc<RefCell<HashMap<u64, Vec<u8>>>>;

/// The bytes of a received payload.
fn payload_bytes(store: &Store, p: RxPayload<'_>) -> Vec<u8> {
    match p {
        RxPayload::Bytes(b) => b.to_vec(),
        RxPayload::Ref { token, len } => {
            let v = store.borrow()[&token].clone();
            assert_eq!(v.len(), len);
            v
        }
    }
}

/// The requester's side: local buffers by wr_id and completions.
#[derive(Default)]
struct ReqSide {
    store: Store,
    bufs: HashMap<u64, Vec<u8>>,
    atomic: HashMap<u64, u64>,
    done: Vec<(u64, WcStatus)>,
}

impl ReqMemory for ReqSide {
    fn gather(&mut self, wr: u64, offset: u32, dst: &mut [u8]) -> Result<(), LocalFault> {
        let b = self.bufs.get(&wr).ok_or(LocalFault)?;
        let s = b
            .get(offset as usize..offset as usize + dst.len())
            .ok_or(LocalFault)?;
        dst.copy_from_slice(s);
        Ok(())
    }
    fn scatter(&mut self, wr: u64, offset: u32, src: RxPayload<'_>) -> Result<(), LocalFault> {
        let src = &payload_bytes(&self.store, src)[..];
        let b = self.bufs.get_mut(&wr).ok_or(LocalFault)?;
        b.get_mut(offset as usize..offset as usize + src.len())
            .ok_or(LocalFault)?
            .copy_from_slice(src);
        Ok(())
    }
    fn atomic_result(&mut self, wr: u64, orig: u64) -> Result<(), LocalFault> {
        self.atomic.insert(wr, orig);
        Ok(())
    }
}

impl Completions for ReqSide {
    fn send_done(&mut self, wr: u64, status: WcStatus) {
        self.done.push((wr, status));
    }
    fn recv_done(&mut self, c: RecvCompletion) {
        panic!("requester got a receive completion {c:?}");
    }
}

struct Region {
    rkey: u32,
    va: u64,
    data: Vec<u8>,
    access: [bool; 3],
}

/// The responder's side: registered regions, a receive queue and completions.
#[derive(Default)]
struct RespSide {
    store: Store,
    regions: Vec<Region>,
    /// Posted receive buffers (capacity, bytes written).
    recvs: VecDeque<Vec<u8>>,
    /// recv_ready answers false this many more times (receiver not ready).
    not_ready: u32,
    /// recv_write fails with this fault.
    recv_fault: Option<RecvFault>,
    received: Vec<(RecvCompletion, Vec<u8>)>,
    invalidated: Vec<u32>,
    atomics: u64,
}

impl RespSide {
    fn region(
        &mut self,
        rkey: u32,
        va: u64,
        len: u64,
        access: RemoteAccess,
    ) -> Result<&mut Region, AccessFault> {
        let r = self
            .regions
            .iter_mut()
            .find(|r| r.rkey == rkey)
            .ok_or(AccessFault)?;
        let i = match access {
            RemoteAccess::Read => 0,
            RemoteAccess::Write => 1,
            RemoteAccess::Atomic => 2,
        };
        let end = va.checked_add(len).ok_or(AccessFault)?;
        if !r.access[i] || va < r.va || end > r.va + r.data.len() as u64 {
            return Err(AccessFault);
        }
        Ok(r)
    }
    fn add_region(&mut self, rkey: u32, va: u64, data: Vec<u8>) {
        self.regions.push(Region {
            rkey,
            va,
            data,
            access: [true; 3],
        });
    }
    fn bytes(&self, rkey: u32, va: u64, len: usize) -> &[u8] {
        let r = self.regions.iter().find(|r| r.rkey == rkey).unwrap();
        let o = (va - r.va) as usize;
        &r.data[o..o + len]
    }
}

impl RespMemory for RespSide {
    fn check(
        &mut self,
        rkey: u32,
        va: u64,
        len: u64,
        access: RemoteAccess,
    ) -> Result<(), AccessFault> {
        self.region(rkey, va, len, access).map(|_| ())
    }
    fn write(&mut self, rkey: u32, va: u64, src: RxPayload<'_>) -> Result<(), AccessFault> {
        let src = &payload_bytes(&self.store, src)[..];
        let r = self.region(rkey, va, src.len() as u64, RemoteAccess::Write)?;
        let o = (va - r.va) as usize;
        r.data[o..o + src.len()].copy_from_slice(src);
        Ok(())
    }
    fn read(&mut self, rkey: u32, va: u64, dst: &mut [u8]) -> Result<(), AccessFault> {
        let r = self.region(rkey, va, dst.len() as u64, RemoteAccess::Read)?;
        let o = (va - r.va) as usize;
        dst.copy_from_slice(&r.data[o..o + dst.len()]);
        Ok(())
    }
    fn atomic(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, AccessFault> {
        let r = self.region(rkey, va, 8, RemoteAccess::Atomic)?;
        let o = (va - r.va) as usize;
        let cur = u64::from_le_bytes(r.data[o..o + 8].try_into().unwrap());
        let new = match op {
            AtomicOp::CmpSwap { compare, swap } => {
                if cur == compare {
                    swap
                } else {
                    cur
                }
            }
            AtomicOp::FetchAdd { add } => cur.wrapping_add(add),
        };
        r.data[o..o + 8].copy_from_slice(&new.to_le_bytes());
        self.atomics += 1;
        Ok(cur)
    }
    fn recv_ready(&mut self) -> bool {
        if self.not_ready > 0 {
            self.not_ready -= 1;
            return false;
        }
        !self.recvs.is_empty()
    }
    fn recv_write(&mut self, offset: u32, src: RxPayload<'_>) -> Result<(), RecvFault> {
        if let Some(f) = self.recv_fault {
            return Err(f);
        }
        let src = &payload_bytes(&self.store, src)[..];
        let b = self.recvs.front_mut().ok_or(RecvFault::Protection)?;
        let end = offset as usize + src.len();
        if end > b.len() {
            return Err(RecvFault::TooLong);
        }
        b[offset as usize..end].copy_from_slice(src);
        Ok(())
    }
    fn invalidate(&mut self, rkey: u32) -> Result<(), AccessFault> {
        self.invalidated.push(rkey);
        Ok(())
    }
}

impl Completions for RespSide {
    fn send_done(&mut self, wr: u64, status: WcStatus) {
        panic!("responder got a send completion {wr} {status:?}");
    }
    fn recv_done(&mut self, c: RecvCompletion) {
        let mut b = self.recvs.pop_front().unwrap_or_default();
        if c.kind == RecvKind::Send {
            b.truncate(c.byte_len as usize);
        } else {
            b.clear();
        }
        self.received.push((c, b));
    }
}

/// A frame in flight.
enum Wired {
    Bytes(Vec<u8>),
    /// Headers and a payload left in the store under a token.
    Raw(Bth, ExtHdrs, Option<(u64, usize)>),
    Corrupt,
}

/// What the harness saw go onto the wire (before faults).
#[derive(Clone, Copy, Debug)]
struct Logged {
    at: Nanos,
    bth: Bth,
    ext: ExtHdrs,
    len: usize,
    src: Option<PayloadSrc>,
}

type DropHook = Box<dyn FnMut(&Bth, &ExtHdrs) -> bool>;

#[derive(Default)]
struct Faults {
    drop_ppm: u32,
    dup_ppm: u32,
    reorder_ppm: u32,
    corrupt_ppm: u32,
    window: usize,
    hook: Option<DropHook>,
    dropped: u64,
    duplicated: u64,
    reordered: u64,
    corrupted: u64,
}

struct Link<'a> {
    q: &'a mut VecDeque<Wired>,
    faults: &'a mut Faults,
    rng: &'a mut Rng,
    log: &'a mut Vec<Logged>,
    tmpl: RoceHeaders,
    codec: bool,
    now: Nanos,
    store: &'a Store,
}

impl Tx for Link<'_> {
    fn send(&mut self, bth: &Bth, ext: &ExtHdrs, payload: TxPayload<'_>) -> Result<(), LocalFault> {
        let mut h = self.tmpl;
        h.bth = *bth;
        h.ext = *ext;
        let len = payload.len;
        assert_eq!(payload.src.is_some(), len > 0);
        let wired = if self.codec {
            let mut out = Vec::new();
            let r = h.encode_for_payload(len, &mut out).expect("headers encode");
            (payload.fill)(&mut out[r])?;
            h.seal_icrc(&mut out).expect("seal");
            Wired::Bytes(out)
        } else if len > 0 {
            let mut p = vec![0; len];
            (payload.fill)(&mut p)?;
            let mut st = self.store.borrow_mut();
            let token = st.len() as u64;
            st.insert(token, p);
            Wired::Raw(*bth, *ext, Some((token, len)))
        } else {
            Wired::Raw(*bth, *ext, None)
        };
        self.log.push(Logged {
            at: self.now,
            bth: *bth,
            ext: *ext,
            len,
            src: payload.src,
        });
        let f = &mut *self.faults;
        if let Some(hook) = f.hook.as_mut() {
            if hook(bth, ext) {
                f.dropped += 1;
                return Ok(());
            }
        }
        if self.rng.ppm(f.drop_ppm) {
            f.dropped += 1;
            return Ok(());
        }
        let mut copies = vec![wired];
        if self.rng.ppm(f.dup_ppm) {
            f.duplicated += 1;
            let again = match &copies[0] {
                Wired::Bytes(b) => Wired::Bytes(b.clone()),
                Wired::Raw(b, e, p) => Wired::Raw(*b, *e, *p),
                Wired::Corrupt => Wired::Corrupt,
            };
            copies.push(again);
        }
        for mut w in copies {
            if self.rng.ppm(f.corrupt_ppm) {
                f.corrupted += 1;
                w = match w {
                    Wired::Bytes(mut b) => {
                        // One byte past the Ethernet header: the IPv4 checksum or the ICRC
                        // fails, the receiver drops the frame.
                        let i =
                            ETH_HDR_LEN + self.rng.below((b.len() - ETH_HDR_LEN) as u64) as usize;
                        b[i] ^= 1 << self.rng.below(8);
                        Wired::Bytes(b)
                    }
                    _ => Wired::Corrupt,
                };
            }
            if f.window > 1 && self.rng.ppm(f.reorder_ppm) && !self.q.is_empty() {
                f.reordered += 1;
                let back = 1 + self.rng.below(f.window.min(self.q.len()) as u64) as usize;
                let at = self.q.len() - back;
                self.q.insert(at, w);
            } else {
                self.q.push_back(w);
            }
        }
        Ok(())
    }
}

fn template(reverse: bool) -> RoceHeaders {
    let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let (ma, mb) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let (src, dst, msrc, mdst) = if reverse {
        (b, a, mb, ma)
    } else {
        (a, b, ma, mb)
    };
    RoceHeaders {
        eth: EthHdr {
            dst: mdst,
            src: msrc,
            vlan: None,
        },
        ip: IpHdr::V4(Ipv4Hdr {
            dscp: 0,
            ecn: 0,
            identification: 0,
            dont_fragment: true,
            ttl: 64,
            src,
            dst,
        }),
        udp: UdpHdr {
            src_port: 0xc121,
            checksum: 0,
        },
        bth: Bth::new(Opcode::RC_ACKNOWLEDGE, 0, 0),
        ext: ExtHdrs::default(),
    }
}

const REQ_QPN: u32 = 0x11;
const RESP_QPN: u32 = 0x12;

/// Decodes a wired frame and hands it over; corrupted frames are dropped as the receiver's
/// ICRC / header check would.
fn with_packet(w: &Wired, dropped: &mut u64, mut f: impl FnMut(&RxPacket<'_>)) {
    match w {
        Wired::Bytes(b) => match decode(b) {
            Ok(Frame::Roce(fr)) if fr.icrc_ok() => f(&RxPacket::from_frame(&fr)),
            _ => *dropped += 1,
        },
        Wired::Raw(bth, ext, p) => f(&RxPacket {
            bth: *bth,
            ext,
            payload: match *p {
                Some((token, len)) => RxPayload::Ref { token, len },
                None => RxPayload::Bytes(&[]),
            },
        }),
        Wired::Corrupt => *dropped += 1,
    }
}

struct Pair {
    req: Requester,
    resp: Responder,
    rq: ReqSide,
    rs: RespSide,
    now: Nanos,
    to_resp: VecDeque<Wired>,
    to_req: VecDeque<Wired>,
    f_req: Faults,
    f_resp: Faults,
    rng: Rng,
    log_req: Vec<Logged>,
    log_resp: Vec<Logged>,
    codec: bool,
    store: Store,
    /// Frames the receivers dropped (bad ICRC / header).
    bad_frames: u64,
}

impl Pair {
    fn new(rc: ReqConfig, pc: RespConfig) -> Pair {
        let store = Store::default();
        Pair {
            req: Requester::new(rc).expect("requester config"),
            resp: Responder::new(pc).expect("responder config"),
            rq: ReqSide {
                store: store.clone(),
                ..ReqSide::default()
            },
            rs: RespSide {
                store: store.clone(),
                ..RespSide::default()
            },
            store,
            now: 0,
            to_resp: VecDeque::new(),
            to_req: VecDeque::new(),
            f_req: Faults::default(),
            f_resp: Faults::default(),
            rng: Rng(0x9e37_79b9_7f4a_7c15),
            log_req: Vec::new(),
            log_resp: Vec::new(),
            codec: true,
            bad_frames: 0,
        }
    }

    fn with_mtu(mtu: u32) -> Pair {
        let mut rc = ReqConfig::new(RESP_QPN, mtu, 0x100);
        rc.max_rd_atomic = 4;
        Pair::new(rc, RespConfig::new(REQ_QPN, mtu, 0x100))
    }

    fn post(&mut self, wr: WorkRequest, data: Vec<u8>) {
        self.rq.bufs.insert(wr.wr_id, data);
        self.req.post(wr).expect("post");
    }

    fn pump(&mut self) {
        let mut tx = Link {
            q: &mut self.to_resp,
            faults: &mut self.f_req,
            rng: &mut self.rng,
            log: &mut self.log_req,
            tmpl: template(false),
            codec: self.codec,
            now: self.now,
            store: &self.store,
        };
        self.req.pump(self.now, &mut self.rq, &mut tx);
        // The responder streams long READ replies (RcQp::pump does the same).
        let mut tx = Link {
            q: &mut self.to_req,
            faults: &mut self.f_resp,
            rng: &mut self.rng,
            log: &mut self.log_resp,
            tmpl: template(true),
            codec: self.codec,
            now: self.now,
            store: &self.store,
        };
        self.resp.pump(&mut self.rs, &mut tx);
    }

    /// Delivers one frame (responder side first); false when the wire is empty.
    fn step(&mut self) -> bool {
        if let Some(w) = self.to_resp.pop_front() {
            self.now += 100;
            let mut tx = Link {
                q: &mut self.to_req,
                faults: &mut self.f_resp,
                rng: &mut self.rng,
                log: &mut self.log_resp,
                tmpl: template(true),
                codec: self.codec,
                now: self.now,
                store: &self.store,
            };
            let (resp, rs, now) = (&mut self.resp, &mut self.rs, self.now);
            with_packet(&w, &mut self.bad_frames, |p| {
                resp.receive(now, p, rs, &mut tx)
            });
            return true;
        }
        if let Some(w) = self.to_req.pop_front() {
            self.now += 100;
            let mut tx = Link {
                q: &mut self.to_resp,
                faults: &mut self.f_req,
                rng: &mut self.rng,
                log: &mut self.log_req,
                tmpl: template(false),
                codec: self.codec,
                now: self.now,
                store: &self.store,
            };
            let (req, rq, now) = (&mut self.req, &mut self.rq, self.now);
            with_packet(&w, &mut self.bad_frames, |p| {
                req.receive(now, p, rq, &mut tx)
            });
            return true;
        }
        false
    }

    /// Runs until nothing is on the wire and no timer is pending; returns false if that did
    /// not happen within `max` steps.
    fn run(&mut self, max: usize) -> bool {
        for _ in 0..max {
            self.pump();
            if self.step() {
                continue;
            }
            match self.req.next_deadline() {
                Some(d) => self.now = self.now.max(d),
                None => return true,
            }
        }
        false
    }

    fn run_ok(&mut self) {
        assert!(self.run(2_000_000), "transport did not go idle");
    }
}

fn pattern(seed: u64, n: usize) -> Vec<u8> {
    Rng(seed | 1).bytes(n)
}

fn wr(wr_id: u64, op: WrOp, len: u32) -> WorkRequest {
    WorkRequest {
        wr_id,
        op,
        len,
        fence: false,
        solicited: false,
    }
}

const WR_KEY: u32 = 0x100;
const WR_VA: u64 = 0x1000_0000;
const RD_KEY: u32 = 0x200;
const RD_VA: u64 = 0x2000_0000;
const AT_KEY: u32 = 0x300;
const AT_VA: u64 = 0x3000_0000;

fn opcodes(log: &[Logged]) -> Vec<Opcode> {
    log.iter().map(|l| l.bth.opcode).collect()
}

// ---------------------------------------------------------------------------------------------
// Every opcode, every size
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Error paths
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Soak
// ---------------------------------------------------------------------------------------------

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
    p.rng = Rng(seed);
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
    let mut gen = Rng(seed ^ 0xabcdef);
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
            let imm = (gen.below(2) == 0).then(|| gen.next() as u32);
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

// ---------------------------------------------------------------------------------------------
// Duplicates, MSN, ACK policy, solicited events
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Both directions: two RcQp, each requester and responder at once
// ---------------------------------------------------------------------------------------------

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
    let mut rng = Rng(77);
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
