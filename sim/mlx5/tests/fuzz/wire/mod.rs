//! Target: hostile RoCEv2 frames on the port.
//!
//! Two model HCAs, A and B, each in its own guarded guest RAM, are joined by two in-process
//! frame links with the fuzzer in the middle: every frame one HCA sends passes through the
//! fuzzer, which keeps the recent ones and delivers them to the other HCA (sometimes twice,
//! sometimes swapped with its neighbour: what a real network does), and injects hostile frames
//! in either direction. RC QP pairs ("slots", each in its own PD with its own MRs on both
//! sides) carry WRITE, WRITE with immediate, SEND, SEND with immediate, READ and atomics both
//! ways, so each HCA is requester and responder at once, with outstanding work and posted
//! receives when the hostile frames arrive. Each new QP binds a type 2 memory window over its
//! remote region ([`mw`]); every other remote range is named through the window's rkey.
//!
//! Hostile frames are mostly structure-aware mutations of frames the HCAs really sent (the
//! BTH opcode, DestQP, PSN, AckReq, SE, MigReq, TVer, P_Key; RETH VA, R_Key and DMA length;
//! AETH syndrome and MSN; AtomicETH; AtomicAckETH; ImmDt; IETH; the payload cut or grown; IP
//! and UDP fields, IPv4 to IPv6, an 802.1Q tag; the IP/UDP length fields and the pad count at
//! the byte level), re-encoded with the project's own codec (`RoceHeaders::encode`,
//! `ipv4_checksum`, `icrc`) so the IP checksum and the ICRC are right and the frame reaches
//! the transport; some keep a bad ICRC, some are random bytes.
//!
//! Both HCAs run on one [`VirtualClock`] that the pump advances by a fixed amount per step
//! ([`STEP_NS`], [`IDLE_NS`]): the RC timers fire at the same step of a run in a debug or a
//! release build, on an idle or a loaded host, so a seed replays exactly.
//!
//! The oracle, per iteration:
//! - no panic, and every loop is bounded (a step budget);
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

use mlx5_sim::roce::counters::Counter;
use mlx5_sim::roce::link::Link;
use mlx5_sim::roce::{
    decode, icrc, ipv4_checksum, psn_add, psn_diff, Aeth, AtomicAckEth, AtomicEth, Frame, HdrSet,
    IpHdr, Ipv6Hdr, OpKind, Opcode, Reth, RoceHeaders, Vlan, OPCODES,
};
use mlx5_sim::wire::{Port, VirtualClock};

use super::*;

mod checks;
mod frames;
mod mw;

/// The port counters [`Stats::wire_port`] sums: the receive checks' drops, then what the
/// transport made of the frames that passed.
pub const PORT_COUNTERS: [Counter; 12] = [
    Counter::RxIcrcErrors,
    Counter::RxDropMalformed,
    Counter::RxDropWrongDstMac,
    Counter::RxDropWrongDstIp,
    Counter::RxDropUdpChecksum,
    Counter::RxDropBadTver,
    Counter::RxDropNotRoce,
    Counter::DuplicateRequest,
    Counter::OutOfSequence,
    Counter::RnrNakSent,
    Counter::PacketSeqErr,
    Counter::Retransmits,
];

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
/// Pump steps before an iteration counts as wedged (at most 10 s on the virtual clock).
const MAX_STEPS: usize = 50_000;
/// Virtual time one pump step takes while frames move (both HCAs polled, the wire forwarded).
const STEP_NS: u64 = 10_000;
/// Virtual time a step takes when the wire was quiet or after [`BUSY_STEPS`] steps: the pump
/// is waiting for a timer (a retransmission after a reordered or lost packet, an RNR wait).
const IDLE_NS: u64 = 200_000;
const BUSY_STEPS: usize = 200;
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
    /// A memory window bind (UMR WQE; local, no PSN).
    Bind,
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
            Op::Bind => wqe::opcode::UMR,
        }
    }
    fn atomic(self) -> bool {
        matches!(self, Op::FetchAdd | Op::CompSwap)
    }
}

/// The receive a SEND or WRITE with immediate needs: buffer, key, and the completion
/// (CQE opcode, byte count, immediate) it must get.
type RecvFor = (u64, u32, (u8, u32, Option<u32>));

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
    /// The type 2 window bound to this QP over its remote region (its rkey).
    mw: Option<u32>,
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
    /// The clock both HCAs' ports run on; only the pump moves it.
    clock: VirtualClock,
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
    /// Picks IPv4 or IPv6 for each new QP pair (`wire6`; its own stream, so the main one
    /// stays as in `wire`).
    v6_rng: Rng,
    v6_per_mille: u64,
    /// Wall-clock time each pump step sleeps (a slow host, for [`replay`]; 0 elsewhere).
    step_delay: Duration,
}

fn other(s: usize) -> usize {
    1 - s
}

/// The IPv6 RoCE v2 GID of side `side` (GID index 1): fd00::1 and fd00::2.
fn gid_v6(side: usize) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[0] = 0xfd;
    g[15] = 1 + side as u8;
    g
}

/// SET_ROCE_ADDRESS `index` = `gid`, RoCE v2 over IPv6 (`roce_l3_type` 1, as Linux
/// lib/gid.c `mlx5_core_roce_gid_set` programs an IPv6 GID).
fn set_gid_v6(e: &mut Env<Guarded>, index: u32, gid: [u8; 16]) {
    let mut s = raw::input(opcode::SET_ROCE_ADDRESS, 0, set_roce_address_in::BYTES);
    raw::set(&mut s, set_roce_address_in::ROCE_ADDRESS_INDEX, index);
    let a = set_roce_address_in::ROCE_ADDRESS;
    roce_addr_layout::SOURCE_L3_ADDRESS
        .within(a)
        .write_bytes(&mut s, &gid)
        .unwrap();
    raw::set(&mut s, roce_addr_layout::ROCE_VERSION.within(a), 2);
    raw::set(&mut s, roce_addr_layout::ROCE_L3_TYPE.within(a), 1);
    e.raw.exec(&s, 16).ok();
}

fn ip_to_gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        IpAddr::V6(v) => v.octets(),
    }
}

impl WireFuzz {
    /// Two HCAs, the fuzzer between them, `SLOTS` slots; `v6_per_mille` of the QP pairs run
    /// over IPv6 GIDs (0: none, and no IPv6 GID is programmed).
    pub(super) fn new(rng: &mut Rng, v6_per_mille: u64) -> WireFuzz {
        let (la, ma) = Link::pair();
        let (lb, mb) = Link::pair();
        let clock = VirtualClock::new();
        let mut devs = Vec::new();
        for (i, l) in [la, lb].into_iter().enumerate() {
            let g = Guarded::with_mac(RAM, [0x02, 0, 0, 0, 0, 1 + i as u8]);
            let mut port = Port::on_link(l);
            port.set_clock(Some(clock.clone()));
            g.f().lock_hca().port = port;
            devs.push(g);
        }
        let gb = devs.pop().unwrap();
        let ga = devs.pop().unwrap();
        let mut env = [Env::new(ga, 1), Env::new(gb, 2)];
        // GID index 1: an IPv6 RoCE v2 address (fd00::1, fd00::2), for the IPv6 slots.
        if v6_per_mille > 0 {
            for (i, e) in env.iter_mut().enumerate() {
                set_gid_v6(e, 1, gid_v6(i));
            }
        }
        let mut w = WireFuzz {
            env,
            clock,
            mitm: [ma, mb],
            slots: Vec::new(),
            clean: Slot::placeholder(),
            pool: [VecDeque::new(), VecDeque::new()],
            keys: [Vec::new(), Vec::new()],
            perturb: 0,
            mutate_in_flight: 0,
            hostile_left: 0,
            v6_rng: Rng::new(rng.clone().u64() ^ 0x6970_7636),
            v6_per_mille,
            step_delay: Duration::ZERO,
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
            mw: None,
        }
    }

    /// Connects a new QP pair in `slot` (ack timeout 10: about 4 ms), over IPv4 or (`v6`,
    /// GID index 1) IPv6.
    fn open(&mut self, slot: &mut Slot, v6: bool) {
        let a = self.end(0, slot.mem[0].pd);
        let b = self.end(1, slot.mem[1].pd);
        if v6 {
            for (side, (me, peer)) in [(&a, &b), (&b, &a)].into_iter().enumerate() {
                let (gid, mac) = (gid_v6(other(side)), self.env[other(side)].mac);
                let e = &mut self.env[side];
                let i = e.rst2init_input(me.qp.qpn);
                e.raw.exec(&i, 16).ok();
                let mut i = e.init2rtr_input(me.qp.qpn, peer.qp.qpn, gid, mac, PSN0, 1);
                raw::set(&mut i, dp::path_field(ads::SRC_ADDR_INDEX), 1);
                e.raw.exec(&i, 16).ok();
                let i = e.rtr2rts_input(me.qp.qpn, PSN0, 7, 7, 10);
                e.raw.exec(&i, 16).ok();
            }
        } else {
            let (ga, ma, gb, mb) = (
                self.env[0].gid,
                self.env[0].mac,
                self.env[1].gid,
                self.env[1].mac,
            );
            self.env[0].connect_with(&a.qp, b.qp.qpn, gb, mb, 1, 7, 7, 10);
            self.env[1].connect_with(&b.qp, a.qp.qpn, ga, ma, 1, 7, 7, 10);
        }
        let (mut a, mut b) = (a, b);
        for (side, end) in [(0, &mut a), (1, &mut b)] {
            let m = &slot.mem[side];
            let (pd, mr) = (m.pd, (m.remote.mr(), m.remote.key));
            end.mw = Some(self.bind_window(side, pd, end, mr));
        }
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

    /// A new iteration of a slot: its MRs are handed out from the start again (each
    /// operation writes fresh random bytes into the range it reads from, [`Self::fresh`]).
    fn refill(&mut self, slot: &mut Slot, _rng: &mut Rng) {
        for m in &mut slot.mem {
            m.local_next = 0;
            m.remote_next = 0;
        }
    }

    /// Fresh random bytes at `off..off + n` of block `b` on side `side`, shadow to match (so
    /// an operation that does nothing cannot look right).
    fn fresh(env: &Env<Guarded>, b: &mut Block, off: usize, n: usize, rng: &mut Rng) {
        rng.fill(&mut b.shadow[off..off + n]);
        env.write(b.at + off as u64, &b.shadow[off..off + n]);
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
        // Every other remote range goes through the peer QP's window (no RNG draw: the
        // stream stays as before windows).
        let rkey = match ends[r].mw {
            Some(w) if (roff / 8) % 2 == 1 => w,
            _ => rm.remote.key,
        };
        let (lo, ro, n) = (loff as usize, roff as usize, len as usize);
        match op {
            Op::Read => Self::fresh(&self.env[r], &mut rm.remote, ro, n, rng),
            o if o.atomic() => Self::fresh(&self.env[r], &mut rm.remote, ro, 8, rng),
            _ => Self::fresh(&self.env[s], &mut lm.local, lo, n, rng),
        }
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
            Op::FetchAdd | Op::CompSwap | Op::Bind => {}
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
                (raddr, rkey),
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
            (raddr, rkey),
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
        recv: Option<RecvFor>,
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
        let idx =
            self.env[s].post_send(&mut e.qp, op.wqe_opcode(), wqe::ctrl::CQ_UPDATE, imm, &segs);
        let npsn = if op.atomic() {
            1
        } else {
            len.div_ceil(MTU).max(1)
        };
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
        let key = if rng.chance(900) {
            m.recv.key
        } else {
            m.local.key
        };
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

    /// Notes what a frame for side `to` tells the QPs there (for the tainted-slot evidence,
    /// when it is `delivered`), and returns the slot index its DestQP names, if any (`SLOTS` =
    /// the fresh pair).
    fn note(&mut self, to: usize, f: &[u8], delivered: bool) -> Option<usize> {
        let Ok(Frame::Roce(r)) = decode(f) else {
            return None;
        };
        if !r.icrc_ok() {
            return None;
        }
        let qpn = r.hdrs.bth.dest_qp;
        let src = ip_to_gid(r.hdrs.ip.src());
        let from_peer = src == self.env[other(to)].gid || src == gid_v6(other(to));
        let info = r.hdrs.bth.opcode.info()?;
        let mut hit = None;
        let slots = self
            .slots
            .iter_mut()
            .chain(std::iter::once(&mut self.clean));
        for (i, s) in slots.enumerate() {
            let Some(ends) = s.ends.as_mut() else {
                continue;
            };
            let e = &mut ends[to];
            if e.qp.qpn != qpn {
                continue;
            }
            hit = Some(i);
            if !from_peer || !delivered {
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
        let hit = self.note(to, &f, true);
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
                    let lost = self.note(to, &f, false);
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

impl Drop for WireFuzz {
    fn drop(&mut self) {
        for e in &self.env {
            let f = e.dev().f();
            let h = f.lock_hca();
            let snap = h.port.counters().snapshot();
            for (i, c) in PORT_COUNTERS.iter().enumerate() {
                STATS.wire_port[i].fetch_add(snap.get(*c), Ordering::Relaxed);
            }
        }
    }
}

/// Runs iterations `0..iters` of `target` (`Wire` or `Wire6`) seeded with `seed` inline, each
/// pump step also sleeping `step_delay` of wall-clock time (a slower build or a loaded host),
/// and returns, per iteration, the virtual clock's reading and both HCAs' [`PORT_COUNTERS`]
/// (retransmissions and RNR NAKs among them: what the RC timers did), or the finding.
pub fn replay(
    target: Target,
    seed: u64,
    iters: u64,
    step_delay: Duration,
) -> Result<Vec<Vec<u64>>, String> {
    let v6 = match target {
        Target::Wire => 0,
        Target::Wire6 => 300,
        t => return Err(format!("{} is not a wire target", t.name())),
    };
    let mut w: Option<WireFuzz> = None;
    let mut out = Vec::new();
    for iter in 0..iters {
        let mut rng = Rng::new(iter_seed(seed, target, iter));
        if iter % EPOCH == 0 || w.as_ref().is_some_and(|w| w.worn_out()) {
            drop(w.take()); // the old epoch's HCAs go first
            let mut n = WireFuzz::new(&mut rng, v6);
            n.step_delay = step_delay;
            w = Some(n);
        }
        let w = w.as_mut().expect("epoch");
        w.step(&mut rng)?;
        w.check()?;
        let mut row = vec![w.clock.now_ns()];
        for e in &w.env {
            let snap = e.dev().f().lock_hca().port.counters().snapshot();
            row.extend(PORT_COUNTERS.iter().map(|c| snap.get(*c)));
        }
        out.push(row);
    }
    Ok(out)
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
                    let v6 = w.v6_per_mille > 0 && w.v6_rng.chance(w.v6_per_mille);
                    w.open(s, v6);
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
                let err = s
                    .ends
                    .as_ref()
                    .is_some_and(|e| e.iter().any(|e| e.error_seen));
                if err || s.tainted_iters > 4 || rng.chance(300) {
                    self.with_slot(i, |w, s| w.close(s));
                    let s = &mut self.slots[i];
                    s.tainted = false;
                    // Its memory took hostile writes: the shadows follow the memory again.
                    for side in 0..2 {
                        for b in [
                            &mut s.mem[side].local,
                            &mut s.mem[side].remote,
                            &mut s.mem[side].recv,
                        ] {
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
        let v6 = self.v6_per_mille > 0 && self.v6_rng.chance(self.v6_per_mille);
        self.open(&mut c, v6);
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
