//! Target `cm`: CM MADs from the wire into QP 1. A peer on the port's link sends the GSI QP
//! UD SEND datagrams carrying MADs, as a remote CM would (Linux drivers/infiniband/core/mad.c
//! `ib_post_send_mad` on the GSI QP). Seeds: the CM MADs of the shared Linux captures (REQ,
//! REP, RTU, DREQ, DREP, REJ), read from `rdmacm/tests/data/captured_mads.hex`, the file
//! `rdmacm/tests/qp1_fuzz.rs` replays against the driver's GSI service. Each is mutated (bits,
//! bytes, the MAD header's versions, class, method, status, TID and attribute, the CM
//! communication IDs, shorter, longer than a MAD and than the receive buffer) and sent in a
//! frame built with the model's codec, mostly as a CM sends it (BTH P_Key 0xffff, DETH Q_Key
//! 0x80010000 from QP 1), sometimes with another P_Key, Q_Key, destination QP, opcode,
//! over IPv6 or VLAN tagged, or with a byte of the sealed frame corrupted.
//!
//! The GSI QP is set up as Linux sets one up (path MTU 256, `mlx5_ib` qp.c
//! `__mlx5_ib_modify_qp`; Q_Key `IB_QP1_QKEY`, include/rdma/ib_mad.h), its receive WQEs
//! mostly of the 296 bytes Linux posts (mad.c `ib_mad_post_receive_mads`: `struct ib_grh`
//! and the MAD), sometimes smaller, larger or in two scatter entries.
//!
//! Checked per datagram: the port took it off the wire exactly once, and it either landed in
//! the oldest posted receive WQE (a successful CQE, `byte_cnt` the 40-byte header area plus
//! the payload, the area holding 20 zero bytes and the IPv4 header or the IPv6 header as sent,
//! then the MAD whole, scattered over the WQE's entries, and no other byte of the slot
//! written), or completed that WQE in error without writing a byte (the QP is then in ERR;
//! the fuzzer brings it back through RST, as the port is brought up), or was dropped in
//! exactly one receive drop counter. A datagram for another QP or of another transport never
//! reaches QP 1. After each step: the QP is in RTS unless an error CQE said otherwise, every
//! byte of the receive region outside a received datagram holds its canary, the guard
//! regions are whole, and the model's pcap listing (`link::dump`, which decodes the CM MADs
//! on QP 1 with the `rdma-cm` crate) takes every frame the step sent.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::*;
use mlx5_sim::datapath::ud::{GRH_BYTES, GSI_QPN};
use mlx5_sim::link::dump::dump_pcap;
use mlx5_sim::link::pcap::PcapWriter;
use mlx5_sim::link::Link;
use mlx5_sim::roce::counters::{Counter, CounterSnapshot};
use mlx5_sim::roce::frame::eth_len;
use mlx5_sim::roce::{
    Bth, Deth, EthHdr, ExtHdrs, HdrSet, IpHdr, Ipv4Hdr, Ipv6Hdr, Opcode, RoceHeaders, UdpHdr, Vlan,
    DEFAULT_P_KEY,
};
use mlx5_sim::wire::Port;
use rdma_cm::mad::{MAD_HDR_LEN, MAD_LEN, QP1_QKEY};
use rdma_cm::CmMad;

use super::wire::{gid_v6, set_gid_v6};

/// The captured CM MADs: `# ` comment lines, then one MAD per line in hex.
const CAPTURED_MADS: &str = include_str!("../../../../rdmacm/tests/data/captured_mads.hex");

/// What Linux posts on the GSI QP: the header area and a MAD (mad.c
/// `ib_mad_post_receive_mads`, `mad_priv_dma_size`).
const GSI_RECV: u32 = (GRH_BYTES + MAD_LEN) as u32;
/// The GSI QP's path MTU and message size as Linux sets them (`mlx5_ib` qp.c
/// `__mlx5_ib_modify_qp`: IB_MTU_256, log_msg_max 8).
const GSI_MTU: u32 = 1;
const GSI_LOG_MSG_MAX: u32 = 8;
/// Receive buffers: one per 4 KiB slot, starting `SLOT_AT` into it.
const SLOTS: u64 = 16;
const SLOT: u64 = 4096;
const SLOT_AT: u64 = 1024;
const CANARY: u8 = 0x3c;
/// The peer's MAC and IPv4 address (over IPv6 it has the `wire` target's second GID).
const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x09];
const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 9);

/// The captured MADs, parsed.
fn seeds() -> Vec<Vec<u8>> {
    let mads: Vec<Vec<u8>> = CAPTURED_MADS
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let l = l.trim();
            (0..l.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&l[i..i + 2], 16).expect("captured_mads.hex: hex"))
                .collect()
        })
        .collect();
    assert!(
        !mads.is_empty() && mads.iter().all(|m| m.len() == MAD_LEN),
        "captured_mads.hex: MADs of {MAD_LEN} bytes"
    );
    mads
}

/// Every receive drop counter: the `rx_drop_*` family by name (so that a drop counter added to
/// the model counts without a change here), the ICRC errors, `out_of_buffer` and oversize.
fn is_drop(c: Counter) -> bool {
    c.name().starts_with("rx_drop_")
        || matches!(
            c,
            Counter::RxIcrcErrors | Counter::OutOfBuffer | Counter::RxDropOversize
        )
}

/// The drop counters that moved from `a` to `b`, with how much.
fn drops(a: &CounterSnapshot, b: &CounterSnapshot) -> Vec<(Counter, u64)> {
    Counter::ALL
        .iter()
        .filter(|c| is_drop(**c) && b.get(**c) != a.get(**c))
        .map(|c| (*c, b.get(*c) - a.get(*c)))
        .collect()
}

/// A receive WQE posted on the GSI QP: its slot and scatter entries (address, length).
struct Posted {
    slot: u64,
    sges: Vec<(u64, u32)>,
}

impl Posted {
    fn capacity(&self) -> u64 {
        self.sges.iter().map(|s| u64::from(s.1)).sum()
    }
}

/// A datagram as sent: the frame, the MAD it carries, where its IP header starts, whether it
/// is for QP 1 as a UD datagram, and whether a byte of the sealed frame was corrupted.
struct Datagram {
    frame: Vec<u8>,
    mad: Vec<u8>,
    ip_at: usize,
    v6: bool,
    to_qp1: bool,
    corrupted: bool,
}

pub(super) struct CmFuzz {
    env: Env<Guarded>,
    peer: Link,
    gsi: dp::Qp,
    rcq: dp::Cq,
    scq: dp::Cq,
    region: u64,
    lkey: u32,
    posted: VecDeque<Posted>,
    next_slot: u64,
    /// An error CQE moved the QP to ERR this step.
    in_error: bool,
    seeds: Vec<Vec<u8>>,
    /// The frames of this step, for the pcap listing.
    sent: Vec<Vec<u8>>,
}

impl CmFuzz {
    pub(super) fn new() -> CmFuzz {
        let mut env = Env::new(Guarded::new(8 << 20), 1);
        let (a, b) = Link::pair();
        *env.raw.dev.f().lock_hca().port_mut() = Port::on_link(a);
        set_gid_v6(&mut env, 1, gid_v6(0));
        let (scq, rcq) = (env.cq(6), env.cq(6));
        let pd = env.pd;
        let gsi = env.qp_of_type(qp::st::QP1, pd, &scq, &rcq, 2, 5);
        let gsi = gsi.unwrap_or_else(|d| {
            panic!(
                "CREATE_QP of the GSI QP: {:#x} {:#x}",
                d.status(),
                d.syndrome()
            )
        });
        env.bring_up_datagram(gsi.qpn, QP1_QKEY, GSI_MTU, GSI_LOG_MSG_MAX);
        let region = env.alloc((SLOTS * SLOT) as usize);
        env.write(region, &vec![CANARY; (SLOTS * SLOT) as usize]);
        let lkey = env.mkey(region, SLOTS * SLOT, dp::LW);
        CmFuzz {
            env,
            peer: b,
            gsi,
            rcq,
            scq,
            region,
            lkey,
            posted: VecDeque::new(),
            next_slot: 0,
            in_error: false,
            seeds: seeds(),
            sent: Vec::new(),
        }
    }

    fn snapshot(&self) -> CounterSnapshot {
        port_counters(&self.env)
    }

    /// Posts receive WQEs until `want` are outstanding: mostly Linux's 296 bytes, sometimes
    /// too small for a MAD, larger, or in two entries with a gap between them.
    fn post(&mut self, rng: &mut Rng, want: usize) {
        while self.posted.len() < want.min(SLOTS as usize) {
            let slot = self.next_slot % SLOTS;
            self.next_slot += 1;
            let at = self.region + slot * SLOT + SLOT_AT;
            let cap = match rng.below(10) {
                0 => rng.range(1, u64::from(GSI_RECV) - 1) as u32,
                1 => rng.range(u64::from(GSI_RECV), 2048) as u32,
                _ => GSI_RECV,
            };
            let sges = if cap > 1 && rng.chance(200) {
                let first = rng.range(1, u64::from(cap) - 1) as u32;
                let gap = rng.range(0, 64);
                vec![(at, first), (at + u64::from(first) + gap, cap - first)]
            } else {
                vec![(at, cap)]
            };
            let wqe: Vec<(u32, u32, u64)> = sges.iter().map(|&(a, n)| (n, self.lkey, a)).collect();
            self.env.post_recv(&mut self.gsi, &wqe);
            self.posted.push_back(Posted { slot, sges });
        }
    }

    /// After an error CQE the GSI QP is in ERR (Linux mad.c `ib_mad_recv_done` leaves it so,
    /// to the port's teardown): 2RST, then back to RTS the way the port brings it up
    /// (RST2INIT, INIT2RTR, RTR2RTS; mad.c `ib_mad_change_qp_state_to_rts`), the receive
    /// counter from 0, so that the epoch goes on. What was posted is gone; its flush CQEs
    /// must be errors.
    fn recover(&mut self) -> Result<(), String> {
        let qpn = self.gsi.qpn;
        self.env.modify_simple(opcode::QP_2RST, qpn).ok();
        self.env
            .bring_up_datagram(qpn, QP1_QKEY, GSI_MTU, GSI_LOG_MSG_MAX);
        self.gsi.rq_pi = 0;
        self.env.write(self.gsi.dbr, &0u32.to_be_bytes());
        while let Some(c) = self.env.poll_cq(&mut self.rcq) {
            self.flushed(&c)?;
        }
        self.posted.clear();
        self.in_error = false;
        Ok(())
    }

    /// A CQE after the QP went to ERR: an error for the oldest posted WQE, its buffer unwritten.
    fn flushed(&mut self, c: &dp::Cqe) -> Result<(), String> {
        if !c.is_error() {
            return Err("a successful receive CQE after the QP went to ERR".into());
        }
        let p = self
            .posted
            .pop_front()
            .ok_or("a flush CQE with no WQE posted")?;
        let page = self.env.read(self.region + p.slot * SLOT, SLOT as usize);
        if page.iter().any(|&b| b != CANARY) {
            return Err("a flushed receive WQE's buffer was written".into());
        }
        Ok(())
    }

    /// A MAD: a captured one, mutated one to three times (a quarter of them not at all).
    fn mad(&self, rng: &mut Rng) -> Vec<u8> {
        let mut m = self.seeds[rng.below(self.seeds.len() as u64) as usize].clone();
        if rng.chance(250) {
            return m;
        }
        for _ in 0..rng.range(1, 3) {
            mutate(&mut m, rng);
        }
        m
    }

    /// The IP header from the peer to the port: IPv4, or IPv6 to GID index 1.
    fn ip(&self, rng: &mut Rng, v6: bool) -> IpHdr {
        let g = self.env.gid;
        if v6 {
            IpHdr::V6(Ipv6Hdr {
                traffic_class: 0,
                flow_label: rng.u32() & 0xf_ffff,
                hop_limit: 64,
                src: Ipv6Addr::from(gid_v6(1)),
                dst: Ipv6Addr::from(gid_v6(0)),
            })
        } else {
            IpHdr::V4(Ipv4Hdr {
                dscp: 0,
                ecn: 0,
                identification: rng.u32() as u16,
                dont_fragment: true,
                ttl: 64,
                src: PEER_IP,
                dst: Ipv4Addr::new(g[12], g[13], g[14], g[15]),
            })
        }
    }

    /// A datagram carrying a MAD: mostly as a CM sends it, sometimes with hostile headers.
    fn datagram(&self, rng: &mut Rng) -> Option<Datagram> {
        let mad = self.mad(rng);
        let tame = rng.chance(500);
        let pick = |rng: &mut Rng, right: u64, others: &[u64]| -> u64 {
            if tame || rng.chance(900) {
                right
            } else if rng.chance(200) {
                rng.u32().into()
            } else {
                rng.pick(others)
            }
        };
        let dest_qp = pick(rng, GSI_QPN.into(), &[0, self.gsi.qpn.into(), 2]) as u32 & 0xff_ffff;
        // The other half of the partition (a limited member matches a full one), another
        // partition, the invalid P_Key (IBTA §10.9.1.2).
        let p_key = pick(rng, DEFAULT_P_KEY.into(), &[0x7fff, 0x8001, 0]) as u16;
        let q_key = pick(rng, QP1_QKEY.into(), &[0x8001_0001, 0, 0x8000_0000]) as u32;
        let op = if tame || rng.chance(950) {
            rng.pick(&[
                Opcode::UD_SEND_ONLY,
                Opcode::UD_SEND_ONLY,
                Opcode::UD_SEND_ONLY_WITH_IMMEDIATE,
            ])
        } else {
            rng.pick(&[Opcode::RC_SEND_ONLY, Opcode::UC_SEND_ONLY])
        };
        let v6 = !tame && rng.chance(200);
        let vlan = (!tame && rng.chance(30)).then(|| Vlan {
            pcp: rng.below(8) as u8,
            dei: false,
            vid: rng.below(4096) as u16,
        });
        let mut bth = Bth::new(op, dest_qp, rng.u32() & 0xff_ffff);
        bth.p_key = p_key;
        bth.solicited = rng.chance(100);
        if !tame && rng.chance(20) {
            bth.tver = rng.range(1, 15) as u8;
        }
        let ud = op.info().is_some_and(|i| i.hdrs.contains(HdrSet::DETH));
        let ext = ExtHdrs {
            deth: ud.then(|| Deth {
                q_key,
                resv8: 0,
                src_qp: if tame || rng.chance(800) {
                    1
                } else {
                    rng.u32() & 0xff_ffff
                },
            }),
            imm_dt: (op == Opcode::UD_SEND_ONLY_WITH_IMMEDIATE).then(|| rng.u32()),
            ..ExtHdrs::NONE
        };
        let ip = self.ip(rng, v6);
        let eth = EthHdr {
            dst: self.env.mac,
            src: PEER_MAC,
            vlan,
        };
        let hdrs = RoceHeaders {
            eth,
            ip,
            udp: UdpHdr {
                src_port: 0xc000 | rng.u32() as u16,
                checksum: 0,
            },
            bth,
            ext,
        };
        let mut frame = hdrs.encode(&mad).ok()?;
        let corrupted = !tame && rng.chance(50);
        if corrupted {
            let i = rng.below(frame.len() as u64) as usize;
            frame[i] ^= 1 << rng.below(8);
        }
        Some(Datagram {
            frame,
            mad,
            ip_at: eth_len(&eth),
            v6,
            to_qp1: dest_qp == GSI_QPN && ud,
            corrupted,
        })
    }

    /// Sends `d` from the peer, lets the HCA take it, and checks where it went.
    fn one(&mut self, d: Datagram) -> Result<(), String> {
        let before = self.snapshot();
        if self.peer.send(d.frame.clone()).is_err() {
            return Ok(()); // the link refuses it (past its limit): never sent
        }
        self.sent.push(d.frame.clone());
        STATS.cm_sent.fetch_add(1, Ordering::Relaxed);
        self.env.raw.dev.poll();
        // Whatever the model answers (nothing for a datagram) is taken off the link.
        while let Ok(Some(_)) = self.peer.recv() {}
        let after = self.snapshot();
        let took = after.get(Counter::RxFrames) - before.get(Counter::RxFrames);
        if took != 1 {
            return Err(format!("a {}-byte frame taken {took} times", d.frame.len()));
        }
        let dropped = drops(&before, &after);
        let n_dropped: u64 = dropped.iter().map(|c| c.1).sum();
        let mut cqes = 0;
        while let Some(c) = self.env.poll_cq(&mut self.rcq) {
            // After the datagram's error CQE, the flushed WQEs' (no outcome of their own).
            if self.in_error {
                self.flushed(&c)?;
            } else {
                cqes += 1;
                self.completed(&d, &c)?;
            }
        }
        let what = || {
            format!(
                "a {}-byte MAD in a {}-byte frame (for QP 1: {}, corrupted: {}): {n_dropped} \
                 drops {:?}, {cqes} CQEs",
                d.mad.len(),
                d.frame.len(),
                d.to_qp1,
                d.corrupted,
                dropped
            )
        };
        if cqes > 0 && !d.to_qp1 {
            return Err(format!("QP 1 received {}", what()));
        }
        let outcomes = n_dropped + cqes;
        if outcomes > 1 || (outcomes == 0 && d.to_qp1 && !d.corrupted) {
            return Err(what());
        }
        match (cqes, dropped.first()) {
            (0, Some((c, _))) => {
                STATS.cm_dropped.fetch_add(1, Ordering::Relaxed);
                let mut by = STATS.cm_drops.lock().unwrap_or_else(|e| e.into_inner());
                *by.entry(c.name()).or_insert(0) += 1;
            }
            (0, None) => {
                STATS.cm_unaddressed.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
        if self.in_error {
            self.recover()?;
        }
        Ok(())
    }

    /// Checks receive CQE `c` for datagram `d` against the oldest posted WQE.
    fn completed(&mut self, d: &Datagram, c: &dp::Cqe) -> Result<(), String> {
        let p = self
            .posted
            .pop_front()
            .ok_or("a receive CQE with no WQE posted")?;
        let page_at = self.region + p.slot * SLOT;
        let page = self.env.read(page_at, SLOT as usize);
        // The header area: over IPv4, 20 zero bytes and the IPv4 header; over IPv6, its header.
        let mut msg = vec![0u8; GRH_BYTES];
        let (ip_len, at) = if d.v6 { (40, 0) } else { (20, 20) };
        msg[at..].copy_from_slice(&d.frame[d.ip_at..d.ip_at + ip_len]);
        msg.extend_from_slice(&d.mad);
        if c.is_error() {
            if c.syndrome() == cqe::syndrome::LOCAL_LENGTH_ERR && msg.len() as u64 <= p.capacity() {
                return Err(format!(
                    "LOCAL_LENGTH_ERR for {} bytes into {}",
                    msg.len(),
                    p.capacity()
                ));
            }
            if page.iter().any(|&b| b != CANARY) {
                return Err("a datagram completed in error wrote its buffer".into());
            }
            STATS.cm_error_cqes.fetch_add(1, Ordering::Relaxed);
            self.in_error = true;
            return Ok(());
        }
        if c.byte_cnt() as usize != msg.len() || msg.len() as u64 > p.capacity() {
            return Err(format!(
                "byte_cnt {} for {} bytes into {}",
                c.byte_cnt(),
                msg.len(),
                p.capacity()
            ));
        }
        // What the page must hold: the canary, and the message over the scatter entries.
        let mut want = vec![CANARY; SLOT as usize];
        let mut from = 0;
        for &(a, n) in &p.sges {
            let k = (n as usize).min(msg.len() - from);
            let o = (a - page_at) as usize;
            want[o..o + k].copy_from_slice(&msg[from..from + k]);
            from += k;
        }
        if page != want {
            let i = page
                .iter()
                .zip(&want)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Err(format!(
                "a {}-byte datagram into {:x?}: slot byte {i:#x} is {:#04x}, not {:#04x}",
                msg.len(),
                p.sges,
                page[i],
                want[i]
            ));
        }
        self.env.write(page_at, &vec![CANARY; SLOT as usize]);
        STATS.cm_received.fetch_add(1, Ordering::Relaxed);
        if CmMad::decode(&d.mad).is_ok() {
            STATS.cm_received_cm.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The model's pcap listing of the step's frames: every frame a record, the CM MADs
    /// decoded (`mlx5-sim --decode-pcap`).
    fn listing(&mut self) -> Result<(), String> {
        let mut w = PcapWriter::new(Vec::new(), false).map_err(|e| e.to_string())?;
        for (i, f) in self.sent.iter().enumerate() {
            w.write_frame(Duration::from_micros(i as u64), f)
                .map_err(|e| e.to_string())?;
        }
        let bytes = w.into_inner();
        let s = dump_pcap(&bytes, None, &mut std::io::sink()).map_err(|e| format!("{e:?}"))?;
        if s.frames != self.sent.len() || s.roce + s.errors + s.other + s.cut != s.frames {
            return Err(format!(
                "the pcap listing of {} frames: {s:?}",
                self.sent.len()
            ));
        }
        STATS
            .cm_listed
            .fetch_add(s.cm_mads as u64, Ordering::Relaxed);
        STATS
            .cm_listed_bad
            .fetch_add(s.cm_bad as u64, Ordering::Relaxed);
        self.sent.clear();
        Ok(())
    }
}

impl Epoch for CmFuzz {
    fn step(&mut self, rng: &mut Rng) -> Result<(), String> {
        let want = rng.range(0, SLOTS) as usize;
        self.post(rng, want);
        for _ in 0..rng.range(1, 8) {
            if let Some(d) = self.datagram(rng) {
                self.one(d)?;
            }
            if rng.chance(300) {
                let want = rng.range(0, SLOTS) as usize;
                self.post(rng, want);
            }
        }
        reap(&self.env, &mut self.scq)?;
        let _ = self.env.drain_eq();
        let state = self.env.qp_state(self.gsi.qpn);
        if state != u32::from(qp::state::RTS) {
            return Err(format!("the GSI QP is in state {state} after the step"));
        }
        self.listing()
    }

    fn check(&mut self) -> Result<(), String> {
        self.env.raw.dev.ram.check_guards()?;
        let len = (SLOTS * SLOT) as usize;
        canary_intact(&self.env, self.region, len, CANARY, "datagram")
    }
}

/// One mutation of MAD `m`. The MAD header (IBTA vol. 1 §13.4.3; the `rdma-cm` crate's
/// `mad::MadHdr`): base version, class, class version, method (bytes 0-3), status (4-5),
/// TID (8-15), attribute ID (16-17); the CM message's local and remote communication IDs
/// follow it (IBTA §12.6; `msg` module).
fn mutate(m: &mut Vec<u8>, rng: &mut Rng) {
    let n = m.len();
    match rng.below(9) {
        0 if n > 0 => {
            let i = rng.below(n as u64) as usize;
            m[i] ^= 1 << rng.below(8);
        }
        1 if n > 0 => {
            let i = rng.below(n as u64) as usize;
            m[i] = rng.interesting() as u8;
        }
        // A version, the class, or the method: a neighbour of the right value, or anything.
        2 if n >= 4 => {
            let i = rng.below(4) as usize;
            m[i] = match rng.below(3) {
                0 => m[i].wrapping_add(1),
                1 => m[i].wrapping_sub(1),
                _ => rng.u32() as u8,
            };
        }
        3 if n >= 6 => m[4..6].copy_from_slice(&(rng.interesting() as u16).to_be_bytes()),
        4 if n >= 16 => m[8..16].copy_from_slice(&rng.u64().to_be_bytes()),
        // A CM attribute or a neighbour of their range (0x10 REQ to 0x1a APR), or anything.
        5 if n >= 18 => {
            let a = if rng.chance(250) {
                rng.u32() as u16
            } else {
                rng.range(0x0f, 0x1b) as u16
            };
            m[16..18].copy_from_slice(&a.to_be_bytes());
        }
        6 if n >= MAD_HDR_LEN + 8 => {
            let at = MAD_HDR_LEN + 4 * rng.below(2) as usize;
            m[at..at + 4].copy_from_slice(&rng.u32().to_be_bytes());
        }
        // Shorter than a MAD, down to nothing.
        7 => m.truncate(rng.below(n as u64 + 1) as usize),
        // Longer: past a MAD and past the 296-byte buffer, now and then far past the MTU.
        8 => {
            let more = if rng.chance(100) {
                rng.range(1, 4000)
            } else {
                rng.range(1, 64)
            };
            let fill = rng.u32() as u8;
            m.resize(n + more as usize, fill);
        }
        _ => {}
    }
}
