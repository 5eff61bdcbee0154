//! Fuzz targets for the emulated ConnectX-5: the command queue, commands, WQEs, BAR writes,
//! the proxy socket, RoCEv2 frames on the port, the Ethernet queues, Ethernet frames on the port, UD datagrams
//! and CM MADs from the wire into QP 1 (issue 7, "hostile input and a failing device").
//!
//! The rule they check: every garbage input gets a PRM error or is dropped. The model never
//! panics, never hangs (every step runs under a watchdog) and never writes outside the memory
//! it was given: guest RAM is a memfd mapped through [`MappedMemory`], with guard regions
//! before and after the mapped section, in the same file, checked after every step.
//!
//! Shared by `tests/fuzz.rs` (fixed-seed smoke runs under `cargo test`, plus the regression
//! seeds) and `src/bin/fuzz.rs` (`cargo run -p mlx5-sim --bin fuzz -- --seed N --iters N
//! --target T`). Include with `#[path = "raw/mod.rs"] mod raw;`, `#[path =
//! "datapath_common/mod.rs"] mod dp;` and `#[path = "fuzz/mod.rs"] mod fuzz;`.
//!
//! Everything is deterministic for a seed (inline execution, no device thread); the `wire`
//! target's HCAs run their RC timers on a virtual clock the fuzzer advances
//! ([`mlx5_sim::wire::VirtualClock`]), so a seed replays the same in a debug or a release
//! build, however loaded the host.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use mlx5_prm::*;
use mlx5_sim::front::pci::PciFunction;
use mlx5_sim::memory::MemSection;
use mlx5_sim::{ExecMode, GuestMemory, Intx, MappedMemory, Mlx5Function, Mlx5Options, ProxyServer};
use rand_xoshiro::rand_core::{Rng as _, SeedableRng};
use rand_xoshiro::SplitMix64;
use std::result::Result;

use super::dp::{self, Env};
use super::raw::{self, Device, Raw};

mod bar;
mod cm;
mod cmd_queue;
mod commands;
mod datagrams;
mod eth_wire;
mod ethernet;
mod guard;
mod proxy;
pub mod wire;
mod wqes;

use bar::BarFuzz;
use cm::CmFuzz;
use cmd_queue::CmdQueueFuzz;
use commands::CommandFuzz;
use datagrams::UdFuzz;
use eth_wire::EthWireFuzz;
use ethernet::EthFuzz;
pub use guard::{Guarded, GuardedRam, BASE, GUARD};
use proxy::ProxyFuzz;
use wire::WireFuzz;
use wqes::WqeFuzz;

// ---------------------------------------------------------------------------------------------
// PRNG
// ---------------------------------------------------------------------------------------------

/// SplitMix64 (Steele, Lea, Flood: "Fast splittable pseudorandom number generators", 2014;
/// rand_xoshiro's):
/// small, fast, and good enough to drive a fuzzer deterministically.
#[derive(Clone, Debug)]
pub struct Rng(SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(SplitMix64::seed_from_u64(seed))
    }
    pub fn u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    pub fn u32(&mut self) -> u32 {
        self.u64() as u32
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.u64() % n.max(1)
    }
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    /// True with probability `per_mille / 1000`.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
    pub fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let v = self.u64().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        self.fill(&mut v);
        v
    }
    /// A value likely to hit edges: 0, 1, all ones, powers of two and their neighbours,
    /// small numbers, or anything.
    pub fn interesting(&mut self) -> u64 {
        match self.below(8) {
            0 => 0,
            1 => self.below(64),
            2 => u64::MAX >> self.below(64),
            3 => (1u64 << self.below(64))
                .wrapping_add(self.range(0, 2))
                .wrapping_sub(1),
            4 => self.pick(&[
                0x7fff_ffff,
                0x8000_0000,
                0xffff_ffff,
                0xff_ffff,
                0xffff,
                0xff,
            ]),
            _ => self.u64(),
        }
    }
}

/// The seed of iteration `iter` of `target` in a run seeded with `seed`.
pub fn iter_seed(seed: u64, target: Target, iter: u64) -> u64 {
    let target = (target as u64).wrapping_mul(0xa076_1d64_78bd_642f);
    Rng::new(seed ^ target ^ iter.wrapping_mul(0xe703_7ed1_a0b4_28db)).u64()
}

// ---------------------------------------------------------------------------------------------
// Targets and the runner
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Random command queue entries and mailbox chains, random doorbell masks.
    CmdQueue = 1,
    /// Random inboxes per opcode on a brought-up device.
    Commands = 2,
    /// Random WQE bytes and doorbells on a live, connected QP pair.
    Wqe = 3,
    /// Random BAR0 accesses (offsets, sizes, values).
    Bar = 4,
    /// Random proxy protocol messages on the socket.
    Proxy = 5,
    /// Hostile RoCEv2 frames on the port of two HCAs with live RC QPs (IPv4 GIDs).
    Wire = 6,
    /// The same with 30% of the QP pairs on IPv6 GIDs.
    Wire6 = 7,
    /// Hostile send WQEs on an Ethernet SQ and hostile frames into an RQ's hostile WQEs.
    Eth = 8,
    /// Hostile UD send WQEs (datagram segments) between a UD QP and the GSI QP, hostile
    /// receive WQEs.
    Ud = 9,
    /// Hostile Ethernet frames on the port's link through the port's checks, the vport's
    /// address filter and NIC_RX steering rules into posted receive WQEs.
    EthWire = 10,
    /// Mutated CM MADs (seeded from Linux captures) in UD datagrams from the port's link
    /// into the GSI QP (QP 1), some with hostile headers.
    Cm = 11,
}

pub const ALL_TARGETS: &[Target] = &[
    Target::CmdQueue,
    Target::Commands,
    Target::Wqe,
    Target::Bar,
    Target::Proxy,
    Target::Wire,
    Target::Wire6,
    Target::Eth,
    Target::Ud,
    Target::EthWire,
    Target::Cm,
];

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::CmdQueue => "cmdq",
            Target::Commands => "cmd",
            Target::Wqe => "wqe",
            Target::Bar => "bar",
            Target::Proxy => "proxy",
            Target::Wire => "wire",
            Target::Wire6 => "wire6",
            Target::Eth => "eth",
            Target::Ud => "ud",
            Target::EthWire => "eth-wire",
            Target::Cm => "cm",
        }
    }
    pub fn parse(s: &str) -> Option<Target> {
        ALL_TARGETS.iter().copied().find(|t| t.name() == s)
    }
}

/// Something the fuzzer found: what, and how to get there again.
#[derive(Debug, Clone)]
pub struct Finding {
    pub target: Target,
    pub seed: u64,
    pub iter: u64,
    pub what: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} seed {:#x} iteration {}: {} (reproduce: cargo run -p mlx5-sim --bin fuzz -- \
             --target {} --seed {:#x} --iters {})",
            self.target.name(),
            self.seed,
            self.iter,
            self.what,
            self.target.name(),
            self.seed,
            self.iter + 1
        )
    }
}

/// What the targets reached (to see that random input gets past the first checks).
#[derive(Default)]
pub struct Stats {
    /// Commands executed by the `cmd` target, and how many of them succeeded.
    pub commands: AtomicU64,
    pub commands_ok: AtomicU64,
    /// CQEs reaped by the `wqe` target, and how many were successful completions.
    pub cqes: AtomicU64,
    pub cqes_ok: AtomicU64,
    /// Hostile frames the `wire` target sent, and how many of them (decoding, ICRC right)
    /// named a live QP.
    pub wire_hostile: AtomicU64,
    pub wire_hostile_to_qp: AtomicU64,
    /// The `wire` target's HCAs' port counters ([`wire::PORT_COUNTERS`]), summed over both
    /// HCAs of every epoch: what the receive checks dropped and what reached the transport.
    pub wire_port: [AtomicU64; wire::PORT_COUNTERS.len()],
    /// Frames the `eth` target's SQ put on the port, and frames its RQ received.
    pub eth_sent: AtomicU64,
    pub eth_received: AtomicU64,
    /// Datagrams the `ud` target's QPs received (successful receive CQEs).
    pub ud_received: AtomicU64,
    /// Frames the `eth-wire` target put on the link that were received, and that were
    /// dropped (a port counter, `out_of_buffer` or an error CQE).
    pub eth_wire_received: AtomicU64,
    pub eth_wire_dropped: AtomicU64,
    /// Datagrams the `cm` target sent to the port; received by the GSI QP (successful
    /// CQEs), and of those how many held a MAD the `rdma-cm` crate decodes; completed in
    /// error; dropped in a counter (and by which, by name); dropped in none (not for a
    /// datagram QP).
    pub cm_sent: AtomicU64,
    pub cm_received: AtomicU64,
    pub cm_received_cm: AtomicU64,
    pub cm_error_cqes: AtomicU64,
    pub cm_dropped: AtomicU64,
    pub cm_drops: Mutex<BTreeMap<&'static str, u64>>,
    pub cm_unaddressed: AtomicU64,
    /// CM MADs the model's pcap listing named in the `cm` target's frames, and of those
    /// the ones it could not decode as a CM message.
    pub cm_listed: AtomicU64,
    pub cm_listed_bad: AtomicU64,
}

pub static STATS: Stats = Stats {
    commands: AtomicU64::new(0),
    commands_ok: AtomicU64::new(0),
    cqes: AtomicU64::new(0),
    cqes_ok: AtomicU64::new(0),
    wire_hostile: AtomicU64::new(0),
    wire_hostile_to_qp: AtomicU64::new(0),
    wire_port: [const { AtomicU64::new(0) }; wire::PORT_COUNTERS.len()],
    eth_sent: AtomicU64::new(0),
    eth_received: AtomicU64::new(0),
    ud_received: AtomicU64::new(0),
    eth_wire_received: AtomicU64::new(0),
    eth_wire_dropped: AtomicU64::new(0),
    cm_sent: AtomicU64::new(0),
    cm_received: AtomicU64::new(0),
    cm_received_cm: AtomicU64::new(0),
    cm_error_cqes: AtomicU64::new(0),
    cm_dropped: AtomicU64::new(0),
    cm_drops: Mutex::new(BTreeMap::new()),
    cm_unaddressed: AtomicU64::new(0),
    cm_listed: AtomicU64::new(0),
    cm_listed_bad: AtomicU64::new(0),
};

/// How long one step may take before it counts as a hang (generous: debug builds, two shared
/// cores). A deadline, not a timing assertion.
pub const STEP_DEADLINE: Duration = Duration::from_secs(60);

/// Iterations between fresh devices.
pub const EPOCH: u64 = 200;

/// Runs `iters` iterations of `target` from `seed` on a worker thread under a watchdog.
/// Returns the first finding, if any.
pub fn run(target: Target, seed: u64, iters: u64) -> Result<u64, Finding> {
    run_range(target, seed, 0, iters)
}

/// Iterations `first..iters` of the run seeded with `seed`, from the start of the epoch
/// `first` lies in (a fresh device every [`EPOCH`] iterations, so this replays iteration
/// `iters - 1` exactly without the iterations before its epoch). Returns the number of
/// iterations done from 0, as [`run`].
pub fn run_range(target: Target, seed: u64, first: u64, iters: u64) -> Result<u64, Finding> {
    let first = first / EPOCH * EPOCH;
    let (tx, rx) = mpsc::channel::<Result<u64, Finding>>();
    let worker = std::thread::Builder::new()
        .name(format!("fuzz-{}", target.name()))
        .spawn(move || {
            let mut state: Option<Box<dyn Epoch>> = None;
            for iter in first..iters {
                let s = iter_seed(seed, target, iter);
                let mut rng = Rng::new(s);
                let r = catch_unwind(AssertUnwindSafe(|| {
                    if iter % EPOCH == 0 || state.as_ref().is_some_and(|e| e.worn_out()) {
                        state = None; // drop the old one first
                        state = Some(new_epoch(target, &mut rng));
                    }
                    let e = state.as_mut().expect("epoch");
                    e.step(&mut rng)?;
                    e.check()
                }));
                let what = match r {
                    Ok(Ok(())) => {
                        let _ = tx.send(Ok(iter));
                        continue;
                    }
                    Ok(Err(w)) => w,
                    Err(p) => format!("panic: {}", panic_text(&p)),
                };
                let _ = tx.send(Err(Finding {
                    target,
                    seed,
                    iter,
                    what,
                }));
                return;
            }
        })
        .expect("spawn fuzz worker");
    let mut done = first;
    loop {
        match rx.recv_timeout(STEP_DEADLINE) {
            Ok(Ok(i)) => done = i + 1,
            Ok(Err(f)) => {
                let _ = worker.join();
                return Err(f);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let _ = worker.join();
                return Ok(done);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // The worker is stuck inside the model; leave it (it cannot be stopped).
                return Err(Finding {
                    target,
                    seed,
                    iter: done,
                    what: format!("hang: no progress for {STEP_DEADLINE:?}"),
                });
            }
        }
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".into()
    }
}

/// A key for a WQE: mostly one of `keys`, sometimes any number or `MLX5_INVALID_LKEY`; the
/// first of `keys` on a tame step.
fn pick_key(rng: &mut Rng, tame: bool, keys: &[u32]) -> u32 {
    if tame {
        return keys[0];
    }
    match rng.below(8) {
        0 => rng.u32(),
        1 => wqe::INVALID_LKEY,
        _ => rng.pick(keys),
    }
}

/// Reaps every CQE of `cq`, counting them (and the successful ones) in [`STATS`]; an error
/// when the CQ keeps producing CQEs.
fn reap<D: Device>(env: &Env<D>, cq: &mut dp::Cq) -> Result<(), String> {
    let mut n = 0;
    while let Some(c) = env.poll_cq(cq) {
        STATS.cqes.fetch_add(1, Ordering::Relaxed);
        if !c.is_error() {
            STATS.cqes_ok.fetch_add(1, Ordering::Relaxed);
        }
        n += 1;
        if n > 4096 {
            return Err("a CQ keeps producing CQEs".into());
        }
    }
    Ok(())
}

/// The port counters of `env`'s HCA.
fn port_counters(env: &Env<Guarded>) -> mlx5_sim::roce::counters::CounterSnapshot {
    let f = env.raw.dev.f();
    let h = f.lock_hca();
    h.port().counters().snapshot()
}

/// Err naming the first of the `len` bytes at `region` that no longer holds `canary` (the
/// model wrote outside any `what` it received).
fn canary_intact(
    env: &Env<Guarded>,
    region: u64,
    len: usize,
    canary: u8,
    what: &str,
) -> Result<(), String> {
    let all = env.read(region, len);
    match all.iter().position(|&b| b != canary) {
        Some(i) => Err(format!(
            "receive region byte {i:#x} written outside any {what}"
        )),
        None => Ok(()),
    }
}

/// One device (or connection) and what a target does with it each step.
trait Epoch {
    fn step(&mut self, rng: &mut Rng) -> Result<(), String>;
    /// Checks after every step: the guard regions.
    fn check(&mut self) -> Result<(), String>;
    /// True when the state is used up (out of memory for the harness, QPs dead, ...).
    fn worn_out(&self) -> bool {
        false
    }
}

fn new_epoch(target: Target, rng: &mut Rng) -> Box<dyn Epoch> {
    match target {
        Target::CmdQueue => Box::new(CmdQueueFuzz::new(rng)),
        Target::Commands => Box::new(CommandFuzz::new()),
        Target::Wqe => Box::new(WqeFuzz::new()),
        Target::Bar => Box::new(BarFuzz::new(rng)),
        Target::Proxy => Box::new(ProxyFuzz::new()),
        Target::Wire => Box::new(WireFuzz::new(rng, 0)),
        Target::Wire6 => Box::new(WireFuzz::new(rng, 300)),
        Target::Eth => Box::new(EthFuzz::new(rng)),
        Target::Ud => Box::new(UdFuzz::new()),
        Target::EthWire => Box::new(EthWireFuzz::new(rng)),
        Target::Cm => Box::new(CmFuzz::new()),
    }
}
