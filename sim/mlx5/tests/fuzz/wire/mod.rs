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

use mlx5_sim::link::Link;
use mlx5_sim::roce::counters::Counter;
use mlx5_sim::roce::{
    decode, icrc, ipv4_checksum, psn_add, psn_diff, Aeth, AtomicAckEth, AtomicEth, Frame, HdrSet,
    IpHdr, Ipv6Hdr, OpKind, Opcode, Reth, RoceHeaders, Vlan, OPCODES,
};
use mlx5_sim::wire::{Port, VirtualClock};

use super::*;

mod checks;
mod frames;
mod mitm;
mod mw;
mod phases;
mod post;
mod slots;

pub(super) use frames::mutate_bytes;

/// The port counters [`Stats::wire_port`] sums: the receive checks' drops, then what the
/// transport made of the frames that passed.
pub const PORT_COUNTERS: [Counter; 12] = [
    Counter::RxIcrcErrors,
    Counter::RxDropMalformed,
    Counter::RxDropWrongDstMac,
    Counter::RxDropWrongDstIp,
    Counter::RxDropUdpChecksum,
    Counter::RxDropBadTver,
    // Frames that are not RoCE reach the vport, whose address lists the fuzzer leaves empty.
    Counter::RxDropVportFilter,
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
pub(super) fn gid_v6(side: usize) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[0] = 0xfd;
    g[15] = 1 + side as u8;
    g
}

/// SET_ROCE_ADDRESS `index` = `gid`, RoCE v2 over IPv6 (`roce_l3_type` 1, as Linux
/// lib/gid.c `mlx5_core_roce_gid_set` programs an IPv6 GID).
pub(super) fn set_gid_v6(e: &mut Env<Guarded>, index: u32, gid: [u8; 16]) {
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
            *g.f().lock_hca().port_mut() = port;
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
            let snap = h.port().counters().snapshot();
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
            let snap = e.dev().f().lock_hca().port().counters().snapshot();
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
