//! Target: hostile RoCEv2 frames on the port.
//!
//! Two model HCAs, A and B, each in its own guarded guest RAM, are joined by two in-process
//! frame links with the fuzzer in the middle: every frame one HCA sends passes through the
//! fuzzer, which keeps the recent ones and delivers them to the other HCA (sometimes twice,
//! sometimes swapped with its neighbour: what a real network does), and injects hostile frames
//! in either direction. RC QP pairs ("slots", each in its own PD with its own MRs on both
//! sides) carry WRITE, WRITE with immediate, SEND, SEND with immediate, READ and atomics both
//! ways, so each HCA is requester and responder at once, with outstanding work and posted
//! receives when the hostile frames arrive.
//!
//! Hostile frames are mostly structure-aware mutations of frames the HCAs really sent (the
//! BTH opcode, DestQP, PSN, AckReq, SE, MigReq, TVer, P_Key; RETH VA, R_Key and DMA length;
//! AETH syndrome and MSN; AtomicETH; AtomicAckETH; ImmDt; IETH; the payload cut or grown; IP
//! and UDP fields, IPv4 to IPv6, an 802.1Q tag; the IP/UDP length fields and the pad count at
//! the byte level), re-encoded with the project's own codec (`RoceHeaders::encode`,
//! `ipv4_checksum`, `icrc`) so the IP checksum and the ICRC are right and the frame reaches
//! the transport; some keep a bad ICRC, some are random bytes.
//!
//! The oracle, per iteration:
//! - no panic, and every loop is bounded (a step budget and a wall-clock deadline);
//! - nothing outside the memory the peer may write changes: the guard regions around each
//!   guest RAM, and canary bytes around every data region (in the same pages as the MR, and
//!   whole pages beyond it), which no MR covers;
//! - a slot no hostile frame addressed ("clean") behaves exactly: every work request completes
//!   successfully, in order, and the memory of both sides equals a shadow copy the fuzzer
//!   keeps of what the operations must have done (so a hostile frame for one QP that lands
//!   in another QP's memory, or a duplicate that is executed twice, is found);
//! - a slot a hostile frame addressed ("tainted") may fail, but its completions come in
//!   order, one per posted work request, never for one that was not posted, and a successful
//!   one only with the response that proves it: a READ only after READ responses for each of
//!   its PSNs reached the QP, an atomic only after its ATOMIC ACKNOWLEDGE, anything else only
//!   after a response at or beyond its last PSN; a successful receive only after a message's
//!   last packet arrived;
//! - after the hostile burst, a fresh QP pair does a WRITE, a READ, a SEND and a fetch-and-add
//!   and all of them complete correctly (the model is not wedged).

use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::Instant;

use mlx5_sim::roce::link::Link;
use mlx5_sim::roce::{
    decode, icrc, ipv4_checksum, psn_add, psn_diff, Aeth, AtomicAckEth, AtomicEth, Frame, HdrSet,
    IpHdr, Ipv6Hdr, OpKind, Opcode, Reth, RoceHeaders, Vlan, OPCODES,
};
use mlx5_sim::wire::Port;

use super::*;

/// Guest RAM of each HCA.
const RAM: u64 = 24 << 20;
/// A data block: a canary page, the region, a canary page.
const PAGE: u64 = 4096;
const REGION: u64 = 16 << 10;
const BLOCK: u64 = PAGE + REGION + PAGE;
/// Bytes at each end of the region (in the MR's first and last page) that the MR does not
/// cover: canaries too.
const MARGIN: u64 = 40;
/// Where the MR starts in a block, and its length.
const MR_OFF: u64 = PAGE + MARGIN;
const MR_LEN: u64 = REGION - 2 * MARGIN;
/// Receive buffers: three of these in the receive region.
const RECV_LEN: u32 = 4096;
/// The path MTU the QPs use (`init2rtr_input`: MTU 3).
const MTU: u32 = 1024;
/// The PSN both sides start from (`connect_with`).
const PSN0: u32 = 0x100;
/// Hostile-phase slots.
const SLOTS: usize = 3;
/// Pump steps before an iteration counts as wedged, and its wall-clock deadline (RC timers
/// run on wall-clock time: after 200 busy steps each step sleeps 200 µs).
const MAX_STEPS: usize = 50_000;
const ITER_DEADLINE: Duration = Duration::from_secs(10);
/// Frames kept per direction for mutation.
const POOL: usize = 96;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Write,
    WriteImm,
    Send,
    SendImm,
    Read,
    FetchAdd,
    CompSwap,
}

impl Op {
    fn wqe_opcode(self) -> u8 {
        match self {
            Op::Write => wqe::opcode::RDMA_WRITE,
            Op::WriteImm => wqe::opcode::RDMA_WRITE_IMM,
            Op::Send => wqe::opcode::SEND,
            Op::SendImm => wqe::opcode::SEND_IMM,
            Op::Read => wqe::opcode::RDMA_READ,
            Op::FetchAdd => wqe::opcode::ATOMIC_FA,
            Op::CompSwap => wqe::opcode::ATOMIC_CS,
        }
    }
    fn atomic(self) -> bool {
        matches!(self, Op::FetchAdd | Op::CompSwap)
    }
}

/// A posted send WQE.
#[derive(Clone, Copy, Debug)]
struct Posted {
    idx: u16,
    op: Op,
    len: u32,
    first_psn: u32,
    last_psn: u32,
}

/// A posted receive WQE and, on a clean slot, the completion it must get.
#[derive(Clone, Copy, Debug)]
struct PostedRecv {
    idx: u16,
    len: u32,
    /// (CQE opcode, byte count, immediate).
    expect: Option<(u8, u32, Option<u32>)>,
}

/// One end of a slot's QP pair.
struct End {
    qp: dp::Qp,
    cq: dp::Cq,
    next_psn: u32,
    sq: VecDeque<Posted>,
    rq: VecDeque<PostedRecv>,
    /// Responses (PSN, opcode) that reached this QP's address.
    resp: VecDeque<(u32, Opcode)>,
    /// Message-ending requests that reached it, and successful receive completions.
    msgs_in: u64,
    recv_ok: u64,
    error_seen: bool,
    /// Receive buffers handed out (round robin over the receive region).
    recv_next: u32,
}

/// A block of guest memory with its MR and the fuzzer's copy of what it must hold.
struct Block {
    at: u64,
    key: u32,
    shadow: Vec<u8>,
}

impl Block {
    fn mr(&self) -> u64 {
        self.at + MR_OFF
    }
}

/// One side's memory of a slot: local data (LR|LW), remote target (all rights), receive
/// buffers (LR|LW).
struct SideMem {
    pd: u32,
    local: Block,
    remote: Block,
    recv: Block,
    /// Per-iteration bump offsets inside the MRs.
    local_next: u64,
    remote_next: u64,
}

struct Slot {
    mem: [SideMem; 2],
    ends: Option<[End; 2]>,
    tainted: bool,
    tainted_iters: u32,
}

pub(super) struct WireFuzz {
    env: [Env<Guarded>; 2],
    /// The fuzzer's ends of the two links: `mitm[i]` talks to HCA `i`.
    mitm: [Link; 2],
    slots: Vec<Slot>,
    clean: Slot,
    /// Recent genuine frames delivered to each HCA.
    pool: [VecDeque<Vec<u8>>; 2],
    /// Every mkey of each HCA (for R_Key mutations).
    keys: [Vec<u32>; 2],
    /// Whether this iteration's forwarding may perturb (dup/swap) and mutate in flight.
    perturb: u64,
    mutate_in_flight: u64,
    hostile_left: u32,
}

fn other(s: usize) -> usize {
    1 - s
}

fn ip_to_gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        IpAddr::V6(v) => v.octets(),
    }
}

impl WireFuzz {
    pub(super) fn new(rng: &mut Rng) -> WireFuzz {
        let (la, ma) = Link::pair();
        let (lb, mb) = Link::pair();
        let mut devs = Vec::new();
        for (i, l) in [la, lb].into_iter().enumerate() {
            let g = Guarded::with_mac(RAM, [0x02, 0, 0, 0, 0, 1 + i as u8]);
            g.f().lock_hca().port = Port::on_link(l);
            devs.push(g);
        }
        let gb = devs.pop().unwrap();
        let ga = devs.pop().unwrap();
        let env = [Env::new(ga, 1), Env::new(gb, 2)];
        let mut w = WireFuzz {
            env,
            mitm: [ma, mb],
            slots: Vec::new(),
            clean: Slot::placeholder(),
            pool: [VecDeque::new(), VecDeque::new()],
            keys: [Vec::new(), Vec::new()],
            perturb: 0,
            mutate_in_flight: 0,
            hostile_left: 0,
        };
        for _ in 0..SLOTS {
            let s = w.slot_mem(rng);
            w.slots.push(s);
        }
        w.clean = w.slot_mem(rng);
        w
    }

    fn block(&mut self, side: usize, pd: u32, access: u8, rng: &mut Rng) -> Block {
        let e = &mut self.env[side];
        let at = e.alloc(BLOCK as usize);
        let shadow = rng.bytes(BLOCK as usize);
        e.write(at, &shadow);
        let key = e.mkey_in_pd(pd, at + MR_OFF, MR_LEN, access);
        self.keys[side].push(key);
        Block { at, key, shadow }
    }

    fn slot_mem(&mut self, rng: &mut Rng) -> Slot {
        let mut mem = Vec::new();
        for side in 0..2 {
            let pd = self.env[side].alloc_pd();
            let local = self.block(side, pd, dp::LR | dp::LW, rng);
            let remote = self.block(side, pd, dp::ALL, rng);
            let recv = self.block(side, pd, dp::LR | dp::LW, rng);
            mem.push(SideMem {
                pd,
                local,
                remote,
                recv,
                local_next: 0,
                remote_next: 0,
            });
        }
        let b = mem.pop().unwrap();
        let a = mem.pop().unwrap();
        Slot {
            mem: [a, b],
            ends: None,
            tainted: false,
            tainted_iters: 0,
        }
    }

    /// A CQ and an RC QP in `pd` on side `side` (one CQ for both queues).
    fn end(&mut self, side: usize, pd: u32) -> End {
        let e = &mut self.env[side];
        let cq = e.cq(6);
        let (log_sq, log_rq, stride_log) = (6u32, 5u32, 2u32);
        let bytes = (1usize << log_rq << (stride_log + 4)) + (64usize << log_sq);
        let buf = e.alloc(bytes.max(4096));
        let dbr = e.alloc(64);
        let i = e.qp_input(pd, cq.cqn, cq.cqn, log_sq, log_rq, stride_log, buf, dbr);
        let d = e.raw.exec(&i, 16);
        d.ok();
        let qp = dp::Qp {
            qpn: d.get(create_qp_out::QPN),
            buf,
            dbr,
            log_sq,
            log_rq,
            rq_stride: 16 << stride_log,
            sq_offset: (1u64 << log_rq) << (stride_log + 4),
            sq_pi: 0,
            rq_pi: 0,
            uar: e.uar,
            bf_half: 0,
        };
        End {
            qp,
            cq,
            next_psn: PSN0,
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            resp: VecDeque::new(),
            msgs_in: 0,
            recv_ok: 0,
            error_seen: false,
            recv_next: 0,
        }
    }

    /// Connects a new QP pair in `slot` (ack timeout 10: about 4 ms).
    fn open(&mut self, slot: &mut Slot) {
        let a = self.end(0, slot.mem[0].pd);
        let b = self.end(1, slot.mem[1].pd);
        let (ga, ma, gb, mb) = (
            self.env[0].gid,
            self.env[0].mac,
            self.env[1].gid,
            self.env[1].mac,
        );
        self.env[0].connect_with(&a.qp, b.qp.qpn, gb, mb, 1, 7, 7, 10);
        self.env[1].connect_with(&b.qp, a.qp.qpn, ga, ma, 1, 7, 7, 10);
        slot.ends = Some([a, b]);
        slot.tainted = false;
        slot.tainted_iters = 0;
    }

    /// Destroys a slot's QPs and CQs (whatever state they are in).
    fn close(&mut self, slot: &mut Slot) {
        let Some(ends) = slot.ends.take() else {
            return;
        };
        for (side, end) in ends.into_iter().enumerate() {
            let e = &mut self.env[side];
            let mut i = raw::input(opcode::DESTROY_QP, 0, destroy_qp_in::BYTES);
            raw::set(&mut i, destroy_qp_in::QPN, end.qp.qpn);
            e.raw.exec(&i, 16).ok();
            let mut i = raw::input(opcode::DESTROY_CQ, 0, destroy_cq_in::BYTES);
            raw::set(&mut i, destroy_cq_in::CQN, end.cq.cqn);
            e.raw.exec(&i, 16).ok();
        }
    }

    /// Fresh random contents in a clean slot's MRs (both sides), shadows to match.
    fn refill(&mut self, slot: &mut Slot, rng: &mut Rng) {
        for side in 0..2 {
            let m = &mut slot.mem[side];
            m.local_next = 0;
            m.remote_next = 0;
            for b in [&mut m.local, &mut m.remote, &mut m.recv] {
                let r = MR_OFF as usize..(MR_OFF + MR_LEN) as usize;
                rng.fill(&mut b.shadow[r.clone()]);
                self.env[side].write(b.mr(), &b.shadow[r]);
            }
        }
    }

    /// Posts `op` from side `s` of `slot`, with the receive it needs on the other side, and
    /// applies its effect to the shadows. Returns false when it did not fit.
    fn post(&mut self, slot: &mut Slot, s: usize, op: Op, rng: &mut Rng) -> bool {
        let r = other(s);
        let len: u32 = if op.atomic() {
            8
        } else {
            match rng.below(6) {
                0 => 0,
                1 | 2 => rng.range(1, 64) as u32,
                _ => rng.range(1, 3000) as u32,
            }
        };
        let ends = slot.ends.as_mut().expect("open slot");
        if ends[s].sq.len() >= 24 || ends[r].rq.len() >= 20 {
            return false;
        }
        let need = u64::from(len.max(8)).next_multiple_of(8);
        let (lm, rm) = if s == 0 {
            let [a, b] = &mut slot.mem;
            (a, b)
        } else {
            let [a, b] = &mut slot.mem;
            (b, a)
        };
        if lm.local_next + need > MR_LEN || rm.remote_next + need > MR_LEN {
            return false;
        }
        let loff = MR_OFF + lm.local_next;
        let roff = MR_OFF + rm.remote_next;
        lm.local_next += need;
        rm.remote_next += need;
        let laddr = lm.local.at + loff;
        let raddr = rm.remote.at + roff;
        let (lo, ro, n) = (loff as usize, roff as usize, len as usize);
        let imm = rng.u32();
        let mut recv_expect = None;
        match op {
            Op::Write | Op::WriteImm => {
                let src = lm.local.shadow[lo..lo + n].to_vec();
                rm.remote.shadow[ro..ro + n].copy_from_slice(&src);
                if op == Op::WriteImm {
                    recv_expect = Some((cqe::opcode::RESP_WR_IMM, len, Some(imm)));
                }
            }
            Op::Send | Op::SendImm => {
                let k = ends[r].recv_next % 3;
                let at = MR_OFF as usize + k as usize * RECV_LEN as usize;
                let src = lm.local.shadow[lo..lo + n].to_vec();
                rm.recv.shadow[at..at + n].copy_from_slice(&src);
                recv_expect = Some(if op == Op::SendImm {
                    (cqe::opcode::RESP_SEND_IMM, len, Some(imm))
                } else {
                    (cqe::opcode::RESP_SEND, len, None)
                });
            }
            Op::Read => {
                let src = rm.remote.shadow[ro..ro + n].to_vec();
                lm.local.shadow[lo..lo + n].copy_from_slice(&src);
            }
            Op::FetchAdd | Op::CompSwap => {}
        }
        let (swap_add, compare) = (rng.u64(), rng.u64());
        if op.atomic() {
            let orig = u64::from_be_bytes(rm.remote.shadow[ro..ro + 8].try_into().unwrap());
            let compare = if rng.chance(500) { orig } else { compare };
            let new = match op {
                Op::FetchAdd => orig.wrapping_add(swap_add),
                _ if orig == compare => swap_add,
                _ => orig,
            };
            rm.remote.shadow[ro..ro + 8].copy_from_slice(&new.to_be_bytes());
            lm.local.shadow[lo..lo + 8].copy_from_slice(&orig.to_be_bytes());
            return self.post_wqe(
                ends,
                s,
                op,
                len,
                imm,
                (laddr, lm.local.key),
                (raddr, rm.remote.key),
                Some((swap_add, compare)),
                None,
            );
        }
        let recv = recv_expect.map(|x| {
            let k = ends[r].recv_next % 3;
            ends[r].recv_next += 1;
            (rm.recv.mr() + u64::from(k * RECV_LEN), rm.recv.key, x)
        });
        self.post_wqe(
            ends,
            s,
            op,
            len,
            imm,
            (laddr, lm.local.key),
            (raddr, rm.remote.key),
            None,
            recv,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn post_wqe(
        &mut self,
        ends: &mut [End; 2],
        s: usize,
        op: Op,
        len: u32,
        imm: u32,
        (laddr, lkey): (u64, u32),
        (raddr, rkey): (u64, u32),
        atomic: Option<(u64, u64)>,
        recv: Option<(u64, u32, (u8, u32, Option<u32>))>,
    ) -> bool {
        let r = other(s);
        if let Some((addr, key, expect)) = recv {
            let e = &mut ends[r];
            let idx = e.qp.rq_pi;
            self.env[r].post_recv(&mut e.qp, &[(RECV_LEN, key, addr)]);
            e.rq.push_back(PostedRecv {
                idx,
                len: RECV_LEN,
                expect: Some(expect),
            });
        }
        let rseg = dp::raddr_seg(raddr, rkey);
        let dseg = dp::dseg(len, lkey, laddr);
        let aseg = atomic.map(|(a, c)| dp::atomic_seg(a, c));
        let mut segs: Vec<&[u8]> = Vec::new();
        if matches!(op, Op::Write | Op::WriteImm | Op::Read) || op.atomic() {
            segs.push(&rseg);
        }
        if let Some(a) = &aseg {
            segs.push(a);
        }
        if len > 0 {
            segs.push(&dseg);
        }
        let e = &mut ends[s];
        let idx = self.env[s].post_send(&mut e.qp, op.wqe_opcode(), wqe::ctrl::CQ_UPDATE, imm, &segs);
        let npsn = if op.atomic() { 1 } else { len.div_ceil(MTU).max(1) };
        let first = e.next_psn;
        e.next_psn = psn_add(first, npsn);
        e.sq.push_back(Posted {
            idx,
            op,
            len,
            first_psn: first,
            last_psn: psn_add(first, npsn - 1),
        });
        true
    }

    /// A receive with random length and key on a tainted slot (for hostile SENDs to land in).
    fn post_spare_recv(&mut self, slot: &mut Slot, side: usize, rng: &mut Rng) {
        let m = &slot.mem[side];
        let ends = slot.ends.as_mut().unwrap();
        let e = &mut ends[side];
        if e.rq.len() >= 20 {
            return;
        }
        let len = if rng.chance(800) {
            rng.range(1, u64::from(RECV_LEN)) as u32
        } else {
            rng.interesting() as u32
        };
        let key = if rng.chance(900) { m.recv.key } else { m.local.key };
        let addr = m.recv.mr() + rng.below(3) * u64::from(RECV_LEN);
        let idx = e.qp.rq_pi;
        self.env[side].post_recv(&mut e.qp, &[(len, key, addr)]);
        // A byte count of 0 stands for 2^31 (wqe.rs `ZERO_BYTE_COUNT_MEANS`).
        let len = match len & 0x7fff_ffff {
            0 => 1 << 31,
            n => n,
        };
        e.rq.push_back(PostedRecv {
            idx,
            len,
            expect: None,
        });
    }

    // -----------------------------------------------------------------------------------------
    // The fuzzer in the middle
    // -----------------------------------------------------------------------------------------

    /// Notes what a frame delivered to side `to` tells the QPs there (for the tainted-slot
    /// evidence), and returns the slot index its DestQP names, if any (`SLOTS` = clean).
    fn note(&mut self, to: usize, f: &[u8]) -> Option<usize> {
        let Ok(Frame::Roce(r)) = decode(f) else {
            return None;
        };
        if !r.icrc_ok() {
            return None;
        }
        let qpn = r.hdrs.bth.dest_qp;
        let peer_gid = self.env[other(to)].gid;
        let from_peer = ip_to_gid(r.hdrs.ip.src()) == peer_gid;
        let info = r.hdrs.bth.opcode.info()?;
        let mut hit = None;
        let slots = self.slots.iter_mut().chain(std::iter::once(&mut self.clean));
        for (i, s) in slots.enumerate() {
            let Some(ends) = s.ends.as_mut() else {
                continue;
            };
            let e = &mut ends[to];
            if e.qp.qpn != qpn {
                continue;
            }
            hit = Some(i);
            if !from_peer {
                break;
            }
            match info.kind {
                OpKind::ReadResponse | OpKind::Acknowledge | OpKind::AtomicAcknowledge => {
                    if e.resp.len() >= 4096 {
                        e.resp.pop_front();
                    }
                    e.resp.push_back((r.hdrs.bth.psn, r.hdrs.bth.opcode));
                }
                OpKind::Send if info.position.is_end() => e.msgs_in += 1,
                OpKind::Write if info.position.is_end() && r.hdrs.ext.imm_dt.is_some() => {
                    e.msgs_in += 1
                }
                _ => {}
            }
            break;
        }
        hit
    }

    fn taint(&mut self, i: Option<usize>) {
        if let Some(i) = i {
            if i < self.slots.len() {
                self.slots[i].tainted = true;
            } else {
                self.clean.tainted = true;
            }
        }
    }

    fn deliver(&mut self, to: usize, f: Vec<u8>, genuine: bool) {
        let hit = self.note(to, &f);
        if genuine {
            if self.pool[to].len() >= POOL {
                self.pool[to].pop_front();
            }
            self.pool[to].push_back(f.clone());
        } else {
            STATS.wire_hostile.fetch_add(1, Ordering::Relaxed);
            if hit.is_some() {
                STATS.wire_hostile_to_qp.fetch_add(1, Ordering::Relaxed);
            }
            self.taint(hit);
        }
        let _ = self.mitm[to].send(f);
    }

    /// Moves what each HCA sent to the other; returns how many frames moved.
    fn forward(&mut self, rng: &mut Rng) -> usize {
        let mut moved = 0;
        for from in 0..2 {
            let to = other(from);
            let mut batch = Vec::new();
            while let Ok(Some(f)) = self.mitm[from].recv() {
                batch.push(f);
                if batch.len() > 4096 {
                    break;
                }
            }
            moved += batch.len();
            if batch.len() >= 2 && rng.chance(self.perturb) {
                let i = rng.below(batch.len() as u64 - 1) as usize;
                batch.swap(i, i + 1);
            }
            for f in batch {
                if self.hostile_left > 0 && rng.chance(self.mutate_in_flight) {
                    // Replaced in flight: the original is lost (its QP's slot is tainted:
                    // the loss costs it a timeout) and a mutation goes in its place.
                    self.hostile_left -= 1;
                    let lost = self.note(to, &f);
                    self.taint(lost);
                    let h = self.mutate(&f, to, rng);
                    self.deliver(to, h, false);
                    continue;
                }
                if rng.chance(self.perturb) {
                    self.deliver(to, f.clone(), true);
                }
                self.deliver(to, f, true);
            }
        }
        moved
    }

    // -----------------------------------------------------------------------------------------
    // Hostile frames
    // -----------------------------------------------------------------------------------------

    /// A hostile frame for side `to`.
    fn hostile(&self, to: usize, rng: &mut Rng) -> Vec<u8> {
        let pool = &self.pool[to];
        let kind = rng.below(100);
        if kind < 8 || pool.is_empty() {
            return self.random_frame(to, rng);
        }
        let n = pool.len() as u64;
        let i = if rng.chance(600) {
            n - 1 - rng.below(n.min(8))
        } else {
            rng.below(n)
        };
        let base = &pool[i as usize];
        let mut f = if kind < 12 {
            // A valid frame cut short (sealed again or not).
            let mut f = base.clone();
            f.truncate(rng.range(1, f.len() as u64) as usize);
            if rng.chance(500) {
                reseal(&mut f);
            }
            return f;
        } else {
            self.mutate(base, to, rng)
        };
        if kind < 22 && !f.is_empty() {
            // A bad ICRC (or any corrupted byte the ICRC covers).
            let at = if rng.chance(500) {
                f.len() - 1 - rng.below(f.len().min(4) as u64) as usize
            } else {
                rng.below(f.len() as u64) as usize
            };
            f[at] ^= 1 << rng.below(8);
        }
        f
    }

    fn random_frame(&self, to: usize, rng: &mut Rng) -> Vec<u8> {
        let n = match rng.below(4) {
            0 => rng.range(1, 60),
            1 => rng.range(60, 200),
            _ => rng.range(1, 1600),
        } as usize;
        let mut f = rng.bytes(n);
        if n >= 14 && rng.chance(700) {
            f[0..6].copy_from_slice(&self.env[to].mac);
            f[6..12].copy_from_slice(&self.env[other(to)].mac);
            f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            if n >= 14 + 28 && rng.chance(700) {
                // IPv4 + UDP to 4791 with random lengths, then random bytes.
                f[14] = 0x45;
                f[20] = 0x40;
                f[21] = 0;
                f[23] = 17;
                let g = self.env[other(to)].gid;
                f[26..30].copy_from_slice(&g[12..16]);
                let g = self.env[to].gid;
                f[30..34].copy_from_slice(&g[12..16]);
                f[36..38].copy_from_slice(&4791u16.to_be_bytes());
                if rng.chance(500) {
                    let tot = (n - 14) as u16;
                    f[16..18].copy_from_slice(&tot.to_be_bytes());
                    f[38..40].copy_from_slice(&(tot - 20).to_be_bytes());
                }
                if rng.chance(700) {
                    reseal(&mut f);
                }
            }
        }
        f
    }

    /// Structure-aware mutation of frame `base` (bound for side `to`), sealed again.
    fn mutate(&self, base: &[u8], to: usize, rng: &mut Rng) -> Vec<u8> {
        let Ok(Frame::Roce(r)) = decode(base) else {
            let mut f = base.to_vec();
            if !f.is_empty() {
                let i = rng.below(f.len() as u64) as usize;
                f[i] = rng.u32() as u8;
            }
            return f;
        };
        let mut h = r.hdrs;
        let mut payload = r.payload.to_vec();
        for _ in 0..rng.range(1, 3) {
            self.mutate_hdrs(&mut h, &mut payload, to, rng);
        }
        let mut f = match h.encode(&payload) {
            Ok(f) => f,
            Err(_) => {
                // Unencodable (an opcode outside the table, a field out of range): encode
                // the original and patch the opcode byte.
                let mut f = r.hdrs.encode(r.payload).unwrap_or_else(|_| base.to_vec());
                if let Some(b) = bth_at(&f) {
                    f[b] = h.bth.opcode.0;
                }
                reseal(&mut f);
                f
            }
        };
        if rng.chance(120) {
            mutate_bytes(&mut f, rng);
        }
        f
    }

    fn mutate_hdrs(&self, h: &mut RoceHeaders, payload: &mut Vec<u8>, to: usize, rng: &mut Rng) {
        let qpns: Vec<u32> = self
            .slots
            .iter()
            .chain(std::iter::once(&self.clean))
            .filter_map(|s| s.ends.as_ref().map(|e| e[to].qp.qpn))
            .collect();
        let keys = &self.keys[to];
        let key = |rng: &mut Rng| -> u32 {
            match rng.below(6) {
                0 => rng.u32(),
                1 => rng.pick(keys) ^ (1 << rng.below(8)),
                _ => rng.pick(keys),
            }
        };
        let va = |rng: &mut Rng, cur: u64| -> u64 {
            match rng.below(8) {
                0 => rng.interesting(),
                1 => cur.wrapping_add(rng.range(0, 64)).wrapping_sub(32),
                2 => cur.wrapping_add(rng.interesting()),
                _ => {
                    // Somewhere in (or just past) one of this HCA's data blocks.
                    let s = &self.slots[rng.below(self.slots.len() as u64) as usize];
                    let b = match rng.below(3) {
                        0 => &s.mem[to].local,
                        1 => &s.mem[to].remote,
                        _ => &s.mem[to].recv,
                    };
                    b.at + rng.below(BLOCK)
                }
            }
        };
        match rng.below(12) {
            0 => {
                // Another opcode; the extension headers follow it.
                let op = if rng.chance(850) {
                    let rc: Vec<u8> = OPCODES.iter().map(|o| o.code).filter(|c| *c < 0x20).collect();
                    Opcode(rng.pick(&rc))
                } else if rng.chance(500) {
                    Opcode(rng.pick(&OPCODES.iter().map(|o| o.code).collect::<Vec<_>>()))
                } else {
                    Opcode(rng.u32() as u8)
                };
                h.bth.opcode = op;
                if let Some(info) = op.info() {
                    fit_ext(&mut h.ext, info.hdrs, rng);
                    if !info.payload {
                        payload.clear();
                    } else if payload.is_empty() && rng.chance(500) {
                        let n = rng.range(1, MTU as u64) as usize;
                        *payload = rng.bytes(n);
                    }
                }
            }
            1 => {
                h.bth.dest_qp = match rng.below(6) {
                    0 => rng.u32() & 0xff_ffff,
                    1 => h.bth.dest_qp.wrapping_add(1) & 0xff_ffff,
                    2 => rng.pick(&[0, 1, 0xff_ffff]),
                    _ if !qpns.is_empty() => rng.pick(&qpns),
                    _ => h.bth.dest_qp,
                }
            }
            2 | 3 => {
                h.bth.psn = match rng.below(6) {
                    0 => rng.u32() & 0xff_ffff,
                    1 => psn_add(h.bth.psn, 0x80_0000),
                    2 => psn_add(h.bth.psn, rng.range(0, 64) as u32),
                    _ => psn_add(h.bth.psn, (rng.range(0, 8) as u32).wrapping_sub(4)),
                }
            }
            4 => match rng.below(6) {
                0 => h.bth.ack_req ^= true,
                1 => h.bth.solicited ^= true,
                2 => h.bth.mig_req ^= true,
                3 => h.bth.tver = rng.below(16) as u8,
                4 => {
                    let any = rng.u32() as u16;
                    h.bth.p_key = rng.pick(&[0, 0x7fff, 0x8001, any])
                }
                _ => h.bth.resv7 = rng.below(128) as u8,
            },
            5 => {
                if let Some(x) = h.ext.reth.as_mut() {
                    match rng.below(3) {
                        0 => x.va = va(rng, x.va),
                        1 => x.r_key = key(rng),
                        _ => {
                            x.dma_len = match rng.below(5) {
                                0 => 0,
                                1 => x.dma_len.wrapping_add(1),
                                2 => x.dma_len.wrapping_sub(1),
                                3 => rng.range(1, 20_000) as u32,
                                _ => rng.interesting() as u32,
                            }
                        }
                    }
                } else if let Some(a) = h.ext.atomic_eth.as_mut() {
                    match rng.below(4) {
                        0 => a.va = va(rng, a.va),
                        1 => a.va = a.va.wrapping_add(rng.range(1, 7)),
                        2 => a.r_key = key(rng),
                        _ => {
                            a.swap_add = rng.u64();
                            a.compare = rng.u64();
                        }
                    }
                } else {
                    h.ext.imm_dt = h.ext.imm_dt.map(|_| rng.u32());
                    h.ext.ieth = h.ext.ieth.map(|_| key(rng));
                }
            }
            6 => {
                if let Some(a) = h.ext.aeth.as_mut() {
                    match rng.below(5) {
                        0 => a.syndrome = rng.u32() as u8,
                        1 => *a = Aeth::ack(rng.below(32) as u8, a.msn),
                        2 => a.syndrome = 0x60 | rng.below(32) as u8,
                        3 => a.syndrome = 0x20 | rng.below(32) as u8,
                        _ => {
                            a.msn = match rng.below(3) {
                                0 => rng.u32() & 0xff_ffff,
                                _ => psn_add(a.msn, (rng.range(0, 8) as u32).wrapping_sub(4)),
                            }
                        }
                    }
                }
                if let Some(a) = h.ext.atomic_ack_eth.as_mut() {
                    if rng.chance(500) {
                        a.orig = rng.u64();
                    }
                }
            }
            7 => {
                if h.ext.ieth.is_some() {
                    h.ext.ieth = Some(key(rng));
                } else if h.ext.imm_dt.is_some() {
                    h.ext.imm_dt = Some(rng.u32());
                } else if h.ext.atomic_eth.is_some() {
                    let a = h.ext.atomic_eth.as_mut().unwrap();
                    a.va &= !7;
                    a.va = a.va.wrapping_add(8 * (rng.range(0, 4) as u64)).wrapping_sub(16);
                }
            }
            8 | 9 => match rng.below(5) {
                0 => payload.truncate(rng.below(payload.len() as u64 + 1) as usize),
                1 => {
                    let n = rng.range(1, 2 * MTU as u64) as usize;
                    payload.extend(rng.bytes(n));
                }
                2 => {
                    let n = rng.range(0, 2 * MTU as u64 + 8) as usize;
                    *payload = rng.bytes(n)
                }
                3 if !payload.is_empty() => {
                    let i = rng.below(payload.len() as u64) as usize;
                    payload[i] ^= 1 << rng.below(8);
                }
                _ => payload.truncate(payload.len().saturating_sub(rng.range(1, 4) as usize)),
            },
            10 => match rng.below(8) {
                0 => {
                    // IPv4 to IPv6 with the same (IPv4-mapped) addresses, or back.
                    h.ip = match h.ip {
                        IpHdr::V4(v) => IpHdr::V6(Ipv6Hdr {
                            traffic_class: v.dscp << 2,
                            flow_label: rng.u32() & 0xf_ffff,
                            hop_limit: v.ttl,
                            src: v.src.to_ipv6_mapped(),
                            dst: v.dst.to_ipv6_mapped(),
                        }),
                        IpHdr::V6(v) => match (v.src.to_ipv4_mapped(), v.dst.to_ipv4_mapped()) {
                            (Some(s), Some(d)) => IpHdr::V4(mlx5_sim::roce::Ipv4Hdr {
                                dscp: v.traffic_class >> 2,
                                ecn: 0,
                                identification: 0,
                                dont_fragment: true,
                                ttl: v.hop_limit,
                                src: s,
                                dst: d,
                            }),
                            _ => IpHdr::V6(v),
                        },
                    }
                }
                1 => {
                    h.eth.vlan = match h.eth.vlan {
                        Some(_) => None,
                        None => Some(Vlan {
                            pcp: rng.below(8) as u8,
                            dei: rng.chance(100),
                            vid: rng.below(4096) as u16,
                        }),
                    }
                }
                2 => h.udp.src_port = rng.u32() as u16,
                3 => h.udp.checksum = rng.u32() as u16,
                4 => {
                    if let IpHdr::V4(v) = &mut h.ip {
                        v.src = std::net::Ipv4Addr::from(rng.u32());
                    }
                }
                5 => {
                    if let IpHdr::V4(v) = &mut h.ip {
                        v.dont_fragment ^= true;
                        v.ttl = rng.u32() as u8;
                        v.dscp = rng.below(64) as u8;
                        v.ecn = rng.below(4) as u8;
                        v.identification = rng.u32() as u16;
                    }
                }
                6 => h.eth.dst = rng.pick(&[[0xff; 6], [0x01, 0, 0x5e, 0, 0, 1], [2, 0, 0, 0, 0, 9]]),
                _ => h.bth.resv8a = rng.u32() as u8,
            },
            _ => {
                // A request turned into another request of the same QP (a forged message).
                if let Some(reth) = h.ext.reth.as_mut() {
                    reth.va = va(rng, reth.va);
                    reth.dma_len = payload.len() as u32;
                }
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // Completions and checks
    // -----------------------------------------------------------------------------------------

    fn reap(&mut self) -> Result<(), String> {
        let mut slots = std::mem::take(&mut self.slots);
        let mut clean = std::mem::replace(&mut self.clean, Slot::placeholder());
        let mut r = Ok(());
        for (i, s) in slots.iter_mut().chain(std::iter::once(&mut clean)).enumerate() {
            r = r.and_then(|_| self.reap_slot(i, s));
        }
        self.slots = slots;
        self.clean = clean;
        for e in &mut self.env {
            if !e.drain_eq().is_empty() {
                e.raw.eq_doorbell(e.uar, e.eqn, e.eq_ci, false);
            }
        }
        r
    }

    fn reap_slot(&mut self, si: usize, slot: &mut Slot) -> Result<(), String> {
        let tainted = slot.tainted;
        let Some(ends) = slot.ends.as_mut() else {
            return Ok(());
        };
        for (side, e) in ends.iter_mut().enumerate() {
            let mut n = 0;
            while let Some(c) = self.env[side].poll_cq(&mut e.cq) {
                n += 1;
                if n > 256 {
                    return Err(format!("slot {si} side {side}: a CQ keeps producing CQEs"));
                }
                let why = |what: String| {
                    format!(
                        "slot {si} side {side} QP {:#x} ({}): {what}; CQE {:02x?}",
                        e.qp.qpn,
                        if tainted { "tainted" } else { "clean" },
                        c.0
                    )
                };
                if c.qpn() != e.qp.qpn {
                    return Err(why(format!("CQE for QP {:#x}", c.qpn())));
                }
                match c.opcode() {
                    cqe::opcode::REQ | cqe::opcode::REQ_ERR => {
                        let Some(p) = e.sq.pop_front() else {
                            return Err(why("send completion with no WQE outstanding".into()));
                        };
                        if c.wqe_counter() != p.idx {
                            return Err(why(format!(
                                "send completion for WQE {} but {} is the oldest outstanding",
                                c.wqe_counter(),
                                p.idx
                            )));
                        }
                        if c.opcode() == cqe::opcode::REQ_ERR {
                            e.error_seen = true;
                            if !tainted {
                                return Err(why(format!(
                                    "{:?} failed (syndrome {:#x}) on a slot no hostile frame reached",
                                    p.op,
                                    c.syndrome()
                                )));
                            }
                            continue;
                        }
                        if c.wqe_opcode() != p.op.wqe_opcode() {
                            return Err(why(format!("completion opcode for {:?}", p.op)));
                        }
                        if p.op == Op::Read && c.byte_cnt() != p.len {
                            return Err(why(format!(
                                "READ of {} completed with byte count {}",
                                p.len,
                                c.byte_cnt()
                            )));
                        }
                        if tainted && !evidence(e, &p) {
                            return Err(why(format!(
                                "{p:?} completed successfully but no response proving it reached \
                                 the QP (responses seen {:?})",
                                e.resp.iter().rev().take(8).collect::<Vec<_>>()
                            )));
                        }
                    }
                    cqe::opcode::RESP_WR_IMM
                    | cqe::opcode::RESP_SEND
                    | cqe::opcode::RESP_SEND_IMM
                    | cqe::opcode::RESP_SEND_INV
                    | cqe::opcode::RESP_ERR => {
                        let Some(p) = e.rq.pop_front() else {
                            return Err(why("receive completion with no receive posted".into()));
                        };
                        if c.wqe_counter() != p.idx {
                            return Err(why(format!(
                                "receive completion for WQE {} but {} is the oldest posted",
                                c.wqe_counter(),
                                p.idx
                            )));
                        }
                        if c.opcode() == cqe::opcode::RESP_ERR {
                            e.error_seen = true;
                            if !tainted {
                                return Err(why(format!(
                                    "receive failed (syndrome {:#x}) on a clean slot",
                                    c.syndrome()
                                )));
                            }
                            continue;
                        }
                        e.recv_ok += 1;
                        if c.opcode() != cqe::opcode::RESP_WR_IMM && c.byte_cnt() > p.len {
                            return Err(why(format!(
                                "receive of {} bytes into a buffer of {}",
                                c.byte_cnt(),
                                p.len
                            )));
                        }
                        if e.recv_ok > e.msgs_in {
                            return Err(why(format!(
                                "{} successful receives but only {} messages ended at the QP",
                                e.recv_ok, e.msgs_in
                            )));
                        }
                        if let (false, Some((op, len, imm))) = (tainted, p.expect) {
                            let got = (c.opcode(), c.byte_cnt(), imm.map(|_| c.imm()));
                            if got != (op, len, imm) {
                                return Err(why(format!(
                                    "receive completion {got:x?}, want {:x?}",
                                    (op, len, imm)
                                )));
                            }
                        }
                    }
                    o => return Err(why(format!("CQE opcode {o:#x}"))),
                }
            }
        }
        Ok(())
    }

    /// Whether every clean slot's work is done.
    fn clean_done(&self) -> bool {
        self.slots
            .iter()
            .chain(std::iter::once(&self.clean))
            .filter(|s| !s.tainted)
            .filter_map(|s| s.ends.as_ref())
            .all(|e| e.iter().all(|e| e.sq.is_empty() && e.rq.is_empty()))
    }

    /// Runs both HCAs and the fuzzer in the middle until the clean slots are done and the
    /// wire is quiet, injecting `plan`'s hostile frames (step, side) on the way.
    fn pump(&mut self, rng: &mut Rng, plan: &[(usize, usize)]) -> Result<(), String> {
        let t0 = Instant::now();
        let last = plan.iter().map(|p| p.0).max().unwrap_or(0);
        let mut quiet = 0;
        for step in 0..MAX_STEPS {
            for &(_, to) in plan.iter().filter(|p| p.0 == step) {
                let f = self.hostile(to, rng);
                if !f.is_empty() && f.len() <= mlx5_sim::roce::link::MAX_FRAME_LEN {
                    self.deliver(to, f, false);
                }
            }
            for e in &self.env {
                e.dev().poll();
            }
            let moved = self.forward(rng);
            self.reap()?;
            quiet = if moved == 0 { quiet + 1 } else { 0 };
            if step >= last && quiet >= 3 && self.clean_done() {
                return Ok(());
            }
            if t0.elapsed() > ITER_DEADLINE {
                break;
            }
            if step > 200 {
                // Waiting for a timer (a retransmission after a reordered or lost packet).
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        if self.clean_done() {
            // The wire never went quiet: only tainted QPs may be talking.
            return Ok(());
        }
        let stuck: Vec<String> = self
            .slots
            .iter()
            .chain(std::iter::once(&self.clean))
            .enumerate()
            .filter(|(_, s)| !s.tainted)
            .filter_map(|(i, s)| s.ends.as_ref().map(|e| (i, e)))
            .filter(|(_, e)| e.iter().any(|e| !e.sq.is_empty() || !e.rq.is_empty()))
            .map(|(i, e)| {
                format!(
                    "slot {i}: A sq {:?} rq {:?}, B sq {:?} rq {:?}",
                    e[0].sq, e[0].rq, e[1].sq, e[1].rq
                )
            })
            .collect();
        Err(format!(
            "clean work never completed ({:?}, {MAX_STEPS} steps max): {}",
            t0.elapsed(),
            stuck.join("; ")
        ))
    }

    /// Memory checks: a clean slot's blocks equal their shadows; a tainted slot's canaries
    /// (the bytes no MR covers) are untouched.
    fn check_mem(&self, si: usize, slot: &Slot) -> Result<(), String> {
        for side in 0..2 {
            let m = &slot.mem[side];
            for (name, b) in [("local", &m.local), ("remote", &m.remote), ("recv", &m.recv)] {
                let now = self.env[side].read(b.at, BLOCK as usize);
                let ranges: Vec<std::ops::Range<usize>> = if slot.tainted {
                    vec![0..MR_OFF as usize, (MR_OFF + MR_LEN) as usize..BLOCK as usize]
                } else {
                    vec![0..BLOCK as usize]
                };
                for r in ranges {
                    if let Some(i) = r.clone().find(|&i| now[i] != b.shadow[i]) {
                        let in_mr = (MR_OFF as usize..(MR_OFF + MR_LEN) as usize).contains(&i);
                        return Err(format!(
                            "slot {si} side {side} {name} block byte {i:#x} ({}) is {:#04x}, \
                             want {:#04x} ({} slot)",
                            if in_mr { "inside the MR" } else { "outside every MR" },
                            now[i],
                            b.shadow[i],
                            if slot.tainted { "tainted" } else { "clean" }
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    fn random_op(rng: &mut Rng) -> Op {
        rng.pick(&[
            Op::Write,
            Op::Write,
            Op::WriteImm,
            Op::Send,
            Op::Send,
            Op::SendImm,
            Op::Read,
            Op::Read,
            Op::FetchAdd,
            Op::CompSwap,
        ])
    }
}

impl Slot {
    fn placeholder() -> Slot {
        let b = || Block {
            at: 0,
            key: 0,
            shadow: Vec::new(),
        };
        let m = || SideMem {
            pd: 0,
            local: b(),
            remote: b(),
            recv: b(),
            local_next: 0,
            remote_next: 0,
        };
        Slot {
            mem: [m(), m()],
            ends: None,
            tainted: false,
            tainted_iters: 0,
        }
    }
}

/// Whether responses that reached `e` prove that `p` completed (IBTA §9.7.5.1: a READ
/// completes with its responses, an atomic with its ATOMIC ACKNOWLEDGE, both never by an
/// implied ACK (rxe_comp.c `check_psn`: COMPST_ERROR_RETRY); anything else with an ACK at or
/// beyond its last PSN, implied or not).
fn evidence(e: &End, p: &Posted) -> bool {
    match p.op {
        Op::Read => (0..=psn_diff(p.last_psn, p.first_psn) as u32).all(|k| {
            let psn = psn_add(p.first_psn, k);
            e.resp.iter().any(|&(x, op)| {
                x == psn && op.info().is_some_and(|i| i.kind == OpKind::ReadResponse)
            })
        }),
        Op::FetchAdd | Op::CompSwap => e
            .resp
            .iter()
            .any(|&(x, op)| x == p.first_psn && op == Opcode::RC_ATOMIC_ACKNOWLEDGE),
        _ => e.resp.iter().any(|&(x, _)| psn_diff(x, p.last_psn) >= 0),
    }
}

/// Makes `ext` carry exactly the headers of `want`, keeping those it has and making up the
/// others.
fn fit_ext(ext: &mut mlx5_sim::roce::ExtHdrs, want: HdrSet, rng: &mut Rng) {
    let has = |h: HdrSet| want.contains(h);
    ext.deth = if has(HdrSet::DETH) {
        Some(ext.deth.unwrap_or(mlx5_sim::roce::Deth {
            q_key: rng.u32(),
            resv8: 0,
            src_qp: rng.u32() & 0xff_ffff,
        }))
    } else {
        None
    };
    ext.reth = if has(HdrSet::RETH) {
        Some(ext.reth.unwrap_or(Reth {
            va: ext.atomic_eth.map_or(rng.u64(), |a| a.va),
            r_key: ext.atomic_eth.map_or(rng.u32(), |a| a.r_key),
            dma_len: rng.range(0, 4096) as u32,
        }))
    } else {
        None
    };
    ext.atomic_eth = if has(HdrSet::ATOMIC_ETH) {
        Some(ext.atomic_eth.unwrap_or(AtomicEth {
            va: ext.reth.map_or(rng.u64(), |r| r.va & !7),
            r_key: ext.reth.map_or(rng.u32(), |r| r.r_key),
            swap_add: rng.u64(),
            compare: rng.u64(),
        }))
    } else {
        None
    };
    ext.aeth = if has(HdrSet::AETH) {
        Some(ext.aeth.unwrap_or(Aeth::ack(31, rng.u32() & 0xff_ffff)))
    } else {
        None
    };
    ext.atomic_ack_eth = if has(HdrSet::ATOMIC_ACK_ETH) {
        Some(ext.atomic_ack_eth.unwrap_or(AtomicAckEth { orig: rng.u64() }))
    } else {
        None
    };
    ext.imm_dt = if has(HdrSet::IMM_DT) {
        Some(ext.imm_dt.unwrap_or(rng.u32()))
    } else {
        None
    };
    ext.ieth = if has(HdrSet::IETH) {
        Some(ext.ieth.unwrap_or(rng.u32()))
    } else {
        None
    };
}

/// Offset of the IP header and whether it is IPv6, from the Ethernet header alone.
fn l3(f: &[u8]) -> Option<(usize, bool)> {
    let et = |at: usize| Some(u16::from_be_bytes([*f.get(at)?, *f.get(at + 1)?]));
    let (at, t) = match et(12)? {
        0x8100 => (18, et(16)?),
        t => (14, t),
    };
    match t {
        0x0800 => Some((at, false)),
        0x86dd => Some((at, true)),
        _ => None,
    }
}

fn bth_at(f: &[u8]) -> Option<usize> {
    let (at, v6) = l3(f)?;
    let b = at + if v6 { 40 } else { 20 } + 8;
    (b < f.len()).then_some(b)
}

/// Makes the IPv4 header checksum and the ICRC right again for whatever the length fields
/// say now, with the project's codec (`ipv4_checksum`, `icrc`): the ICRC goes in the last
/// four bytes of the datagram the IP length delimits.
fn reseal(f: &mut [u8]) {
    let Some((at, v6)) = l3(f) else {
        return;
    };
    let ip_len = if v6 { 40 } else { 20 };
    if f.len() < at + ip_len {
        return;
    }
    let end = if v6 {
        at + 40 + u16::from_be_bytes([f[at + 4], f[at + 5]]) as usize
    } else {
        f[at + 10] = 0;
        f[at + 11] = 0;
        let c = ipv4_checksum(&f[at..at + 20]);
        f[at + 10..at + 12].copy_from_slice(&c.to_be_bytes());
        at + u16::from_be_bytes([f[at + 2], f[at + 3]]) as usize
    };
    let end = end.min(f.len());
    if end < at + ip_len + 8 + 12 + 4 {
        return;
    }
    if let Some(c) = icrc(&f[at..end - 4], v6) {
        f[end - 4..end].copy_from_slice(&c.to_le_bytes());
    }
}

/// Byte-level mutations of an encoded frame (lengths, pad count, IPv4 flags), sealed again.
fn mutate_bytes(f: &mut Vec<u8>, rng: &mut Rng) {
    let Some((at, v6)) = l3(f) else {
        return;
    };
    let udp = at + if v6 { 40 } else { 20 };
    if f.len() < udp + 8 + 12 {
        return;
    }
    let bump = |v: u16, rng: &mut Rng| -> u16 {
        match rng.below(4) {
            0 => rng.u32() as u16,
            1 => v.wrapping_add(4),
            2 => v.wrapping_sub(4),
            _ => v.wrapping_add(rng.range(1, 3) as u16),
        }
    };
    let rd = |f: &[u8], i: usize| u16::from_be_bytes([f[i], f[i + 1]]);
    match rng.below(6) {
        0 => {
            let i = if v6 { at + 4 } else { at + 2 };
            let v = bump(rd(f, i), rng);
            f[i..i + 2].copy_from_slice(&v.to_be_bytes());
        }
        1 => {
            let v = bump(rd(f, udp + 4), rng);
            f[udp + 4..udp + 6].copy_from_slice(&v.to_be_bytes());
        }
        2 => {
            // Pad count.
            let b = udp + 8 + 1;
            f[b] = (f[b] & !0x30) | (rng.below(4) as u8) << 4;
        }
        3 => {
            // Frame grows or shrinks under unchanged headers (Ethernet padding or a cut).
            if rng.chance(500) {
                let n = rng.range(1, 64) as usize;
                f.extend(rng.bytes(n));
            } else {
                let n = rng.range(1, 8) as usize;
                f.truncate(f.len().saturating_sub(n));
            }
        }
        4 if !v6 => {
            f[at + 6] = rng.pick(&[0x20, 0x80, 0x00, 0x41]);
            f[at] = rng.pick(&[0x45, 0x46, 0x44, 0x65]);
        }
        _ => {
            // Both lengths agree, but with the datagram.
            let d = rng.range(1, 8) as u16 * 4;
            let i = if v6 { at + 4 } else { at + 2 };
            let shrink = rng.chance(500);
            for j in [i, udp + 4] {
                let v = rd(f, j);
                let v = if shrink { v.wrapping_sub(d) } else { v.wrapping_add(d) };
                f[j..j + 2].copy_from_slice(&v.to_be_bytes());
            }
            if !shrink {
                let n = d as usize;
                f.extend(rng.bytes(n));
            }
        }
    }
    if rng.chance(900) {
        reseal(f);
    }
}

impl Epoch for WireFuzz {
    fn step(&mut self, rng: &mut Rng) -> Result<(), String> {
        self.hostile_phase(rng)?;
        self.clean_phase(rng)
    }
    fn check(&mut self) -> Result<(), String> {
        for e in &self.env {
            e.dev().ram.check_guards()?;
        }
        Ok(())
    }
    fn worn_out(&self) -> bool {
        self.env.iter().any(|e| e.dev().ram.left() < (2 << 20))
    }
}

impl WireFuzz {
    /// Runs `f` on slot `i` taken out of `self` (so `f` may use `self` too).
    fn with_slot<T>(&mut self, i: usize, f: impl FnOnce(&mut Self, &mut Slot) -> T) -> T {
        let mut s = std::mem::replace(&mut self.slots[i], Slot::placeholder());
        let r = f(self, &mut s);
        self.slots[i] = s;
        r
    }

    fn hostile_phase(&mut self, rng: &mut Rng) -> Result<(), String> {
        for i in 0..self.slots.len() {
            self.with_slot(i, |w, s| {
                if s.ends.is_none() {
                    w.open(s);
                }
                if !s.tainted {
                    w.refill(s, rng);
                }
                // Work both ways.
                for _ in 0..rng.range(0, 4) {
                    let side = rng.below(2) as usize;
                    w.post(s, side, Self::random_op(rng), rng);
                }
                if s.tainted {
                    for _ in 0..rng.range(0, 2) {
                        w.post_spare_recv(s, rng.below(2) as usize, rng);
                    }
                }
            });
        }
        // The hostile frames: when, and to whom.
        let n = match rng.below(8) {
            0 => 0,
            1 => rng.range(8, 32),
            _ => rng.range(1, 8),
        };
        let plan: Vec<(usize, usize)> = (0..n)
            .map(|_| {
                let step = if rng.chance(700) {
                    rng.below(4)
                } else {
                    rng.below(16)
                };
                (step as usize, rng.below(2) as usize)
            })
            .collect();
        self.perturb = rng.pick(&[0, 0, 20, 100]);
        self.mutate_in_flight = rng.pick(&[0, 0, 50, 200]);
        self.hostile_left = if n == 0 { 0 } else { rng.range(0, 4) as u32 };
        let r = self.pump(rng, &plan);
        self.perturb = 0;
        self.mutate_in_flight = 0;
        self.hostile_left = 0;
        r?;
        for i in 0..self.slots.len() {
            self.check_mem(i, &self.slots[i])?;
            let s = &mut self.slots[i];
            if s.tainted {
                s.tainted_iters += 1;
                let err = s.ends.as_ref().is_some_and(|e| e.iter().any(|e| e.error_seen));
                if err || s.tainted_iters > 4 || rng.chance(300) {
                    self.with_slot(i, |w, s| w.close(s));
                    let s = &mut self.slots[i];
                    s.tainted = false;
                    // Its memory took hostile writes: the shadows follow the memory again.
                    for side in 0..2 {
                        for b in [&mut s.mem[side].local, &mut s.mem[side].remote, &mut s.mem[side].recv] {
                            b.shadow = self.env[side].read(b.at, BLOCK as usize);
                        }
                    }
                }
            }
        }
        // Frames still on the wire for QPs just destroyed must not reach a new QP that gets
        // the same number: the wire is emptied (a loss only tainted QPs can notice).
        for e in &self.env {
            e.dev().poll();
        }
        for m in &mut self.mitm {
            while let Ok(Some(_)) = m.recv() {}
        }
        Ok(())
    }

    /// A fresh QP pair after the burst: a WRITE, a READ, a SEND (with or without immediate)
    /// and an atomic, each in a random direction, must all complete exactly.
    fn clean_phase(&mut self, rng: &mut Rng) -> Result<(), String> {
        let mut c = std::mem::replace(&mut self.clean, Slot::placeholder());
        self.open(&mut c);
        self.refill(&mut c, rng);
        for op in [
            Op::Write,
            Op::Read,
            rng.pick(&[Op::Send, Op::SendImm, Op::WriteImm]),
            rng.pick(&[Op::FetchAdd, Op::CompSwap]),
        ] {
            let side = rng.below(2) as usize;
            self.post(&mut c, side, op, rng);
        }
        self.clean = c;
        let r = self.pump(rng, &[]).and_then(|_| {
            if self.clean.tainted {
                return Err("a frame for the fresh QP pair came from nowhere".into());
            }
            self.check_mem(SLOTS, &self.clean)
        });
        let mut c = std::mem::replace(&mut self.clean, Slot::placeholder());
        self.close(&mut c);
        self.clean = c;
        r.map_err(|e| format!("fresh QP pair after the burst: {e}"))
    }
}
