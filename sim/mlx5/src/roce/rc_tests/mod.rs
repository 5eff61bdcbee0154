//! RC transport tests: a requester and a responder back to back through a harness that moves
//! frames (encoded to real bytes with a valid ICRC and decoded again, or as raw headers),
//! injects faults (drop, duplicate, reorder, corrupt) and advances a virtual clock.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::rc::Rc;

use rand_xoshiro::rand_core::{Rng as _, SeedableRng};
use rand_xoshiro::SplitMix64;

use super::requester::*;
use super::responder::*;
use super::transport::*;
use super::*;

mod both_directions;
mod duplicates;
mod errors;
mod messages;
mod ordering;
mod retry;
mod soak;

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

/// SplitMix64 (Steele, Lea, Flood 2014; rand_xoshiro's): deterministic, good in every bit.
struct Rng(SplitMix64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(SplitMix64::seed_from_u64(seed))
    }
    /// Uniform in `0..n` (Lemire's multiply-shift; the bias is below 2^-40 for these `n`).
    fn below(&mut self, n: u64) -> u64 {
        ((self.0.next_u64() as u128 * n.max(1) as u128) >> 64) as u64
    }
    /// True with probability `ppm` parts per million.
    fn ppm(&mut self, ppm: u32) -> bool {
        self.below(1_000_000) < ppm as u64
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.0.next_u64() as u8).collect()
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
            rng: Rng::new(0x9e37_79b9_7f4a_7c15),
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
    Rng::new(seed | 1).bytes(n)
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
