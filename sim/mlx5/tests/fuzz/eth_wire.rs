//! Target `eth-wire`: hostile Ethernet frames on the peer end of the port's link (frames in,
//! WQEs out), through everything a frame meets: the port's checks, the vport's address filter
//! (unicast and multicast lists, promiscuous modes changed at random), and a NIC_RX root table
//! with rules on DMAC, EtherType, IP protocol and UDP / TCP ports (forward to the TIR, DROP,
//! forward to a deeper table) before the RQ's posted receive WQEs.
//!
//! Seeds are real frames (ARP, ICMP echo, TCP SYN, UDP, IPv6 neighbour solicitation, VLAN
//! tagged ones), mutated (runts, giants, lengths, EtherTypes, tags, destinations, the `wire`
//! target's IP / UDP length mutator) or sent as broadcast storms. Checked per frame: the port
//! took it off the wire exactly once, and it was either received (a successful CQE for the
//! oldest posted WQE, `byte_cnt` its length and within the WQE, the buffer holding the frame
//! whole and nothing after it) or dropped in exactly one place: a port drop counter, the Q
//! counter's `out_of_buffer`, or an error CQE (a WQE too small). After each batch: every byte
//! of the receive region outside a received frame still holds its canary, and the guard regions.

use std::collections::VecDeque;

use super::*;
use mlx5_prm::fte_match_set_lyr_2_4 as l24;
use mlx5_sim::link::Link;
use mlx5_sim::roce::counters::{Counter, CounterSnapshot};
use mlx5_sim::wire::Port;

use crate::eth::{self as e, Eth};

/// Receive buffers: one per 4 KiB slot, at `SLOT_AT` in it, at most `SLOT_CAP` bytes.
const SLOTS: u64 = 16;
const SLOT: u64 = 4096;
const SLOT_AT: u64 = 1024;
const SLOT_CAP: u32 = 2048;
const CANARY: u8 = 0xc5;
/// A unicast address the vport's list holds besides its own.
const OTHER_UC: [u8; 6] = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
/// Multicast addresses of the vport's list: broadcast, an IPv6 solicited-node group
/// (RFC 4291 2.7.1) and the IPv4 mDNS group (RFC 6762).
const MC: [[u8; 6]; 3] = [
    [0xff; 6],
    [0x33, 0x33, 0xff, 0x00, 0x00, 0x01],
    [0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb],
];
/// The LLDP nearest-bridge group (IEEE 802.1AB), dropped by a DMAC rule.
const LLDP_MC: [u8; 6] = [0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e];

/// The counters a frame taken off the wire can land in besides a CQE.
fn drops(s: &CounterSnapshot) -> u64 {
    s.rx_dropped() + s.get(Counter::OutOfBuffer)
}

pub(super) struct EthWireFuzz {
    env: Env<Guarded>,
    x: Eth,
    peer: Link,
    mac: [u8; 6],
    region: u64,
    lkey: u32,
    /// Posted WQEs, oldest first: (slot, capacity).
    posted: VecDeque<(u64, u32)>,
    next_slot: u64,
}

impl EthWireFuzz {
    pub(super) fn new(_rng: &mut Rng) -> EthWireFuzz {
        let mut env = Env::new(Guarded::new(8 << 20), 1);
        let (a, b) = Link::pair();
        *env.raw.dev.f().lock_hca().port_mut() = Port::on_link(a);
        let x = e::eth(&mut env);
        let mac = env.mac;
        let region = env.alloc((SLOTS * SLOT) as usize);
        env.write(region, &vec![CANARY; (SLOTS * SLOT) as usize]);
        let lkey = env.mkey(region, SLOTS * SLOT, dp::LW);
        e::set_list(&mut env, nic_vport_list_type::UC, &[mac, OTHER_UC]);
        e::set_list(&mut env, nic_vport_list_type::MC, &MC);
        rules(&mut env, x.tirn, mac);
        EthWireFuzz {
            env,
            x,
            peer: b,
            mac,
            region,
            lkey,
            posted: VecDeque::new(),
            next_slot: 0,
        }
    }

    fn slot(&self, k: u64) -> u64 {
        self.region + (k % SLOTS) * SLOT + SLOT_AT
    }

    fn snapshot(&self) -> CounterSnapshot {
        port_counters(&self.env)
    }

    /// Posts receive WQEs until `want` are outstanding: mostly a whole slot, sometimes one
    /// too small for a full frame, sometimes the slot in two entries.
    fn post(&mut self, rng: &mut Rng, want: usize) {
        while self.posted.len() < want.min(SLOTS as usize) {
            let k = self.next_slot;
            self.next_slot += 1;
            let at = self.slot(k);
            let cap = if rng.chance(100) {
                rng.range(1, 1600) as u32
            } else {
                SLOT_CAP
            };
            let sges = if cap > 64 && rng.chance(200) {
                let a = rng.range(1, u64::from(cap) - 1) as u32;
                vec![(a, self.lkey, at), (cap - a, self.lkey, at + u64::from(a))]
            } else {
                vec![(cap, self.lkey, at)]
            };
            e::post_rq(&self.env, &mut self.x.rq, &sges);
            self.posted.push_back((k, cap));
        }
    }

    /// After an error CQE the RQ is in ERR: back to RDY as Linux does (ERR -> RST -> RDY,
    /// the counter from 0); what was posted is gone.
    fn recover(&mut self) {
        let rq = self.x.rq.n;
        if e::query_state(&mut self.env, false, rq) as u8 == rqc_state::RDY {
            return;
        }
        e::modify(&mut self.env, false, rq, rqc_state::ERR, rqc_state::RST);
        e::modify(&mut self.env, false, rq, rqc_state::RST, rqc_state::RDY);
        self.x.rq.pi = 0;
        self.env.write(self.x.rq.dbr, &0u32.to_be_bytes());
        self.posted.clear();
    }

    /// A seed frame to `dst`.
    fn seed(&self, rng: &mut Rng, dst: [u8; 6]) -> Vec<u8> {
        let mut f = match rng.below(6) {
            0 => arp(),
            1 => ipv4(1, &icmp_echo(rng)),
            2 => {
                let any = rng.u32() as u16;
                ipv4(6, &tcp_syn(rng.pick(&[80, 23, 22, any])))
            }
            3 => {
                let n = rng.below(1200) as usize;
                let mut f = e::udp_frame(&rng.bytes(n));
                let any = rng.u32() as u16;
                let port: u16 = rng.pick(&[53, 9, 7, 4791, any]);
                f[36..38].copy_from_slice(&port.to_be_bytes());
                f
            }
            4 => neighbour_solicitation(),
            _ => {
                let mut f = ipv4(1, &icmp_echo(rng));
                vlan_tag(&mut f, rng.u32() as u16);
                f
            }
        };
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x77]);
        f.resize(f.len().max(60), 0);
        f
    }

    fn dst(&self, rng: &mut Rng) -> [u8; 6] {
        match rng.below(8) {
            0..=2 => self.mac,
            3 => rng.pick(&MC),
            4 => OTHER_UC,
            5 => LLDP_MC,
            _ => {
                let mut m = [0u8; 6];
                rng.fill(&mut m);
                m
            }
        }
    }

    /// A hostile frame: a seed, mutated zero or more times.
    fn frame(&self, rng: &mut Rng) -> Vec<u8> {
        let dst = self.dst(rng);
        let mut f = self.seed(rng, dst);
        for _ in 0..rng.below(3) {
            mutate(&mut f, rng);
        }
        f
    }

    /// Sends `f` from the peer, lets the HCA take it, and checks where it went.
    fn one(&mut self, rng: &mut Rng, f: Vec<u8>) -> Result<(), String> {
        let before = self.snapshot();
        if self.peer.send(f.clone()).is_err() {
            return Ok(()); // the link refuses it (empty or past its limit): never sent
        }
        self.env.raw.dev.poll();
        let after = self.snapshot();
        let took = after.get(Counter::RxFrames) - before.get(Counter::RxFrames);
        if took != 1 {
            return Err(format!("a {}-byte frame taken {took} times", f.len()));
        }
        let dropped = drops(&after) - drops(&before);
        let mut cqes = 0;
        while let Some(c) = self.env.poll_cq(&mut self.x.rcq) {
            cqes += 1;
            let Some((k, cap)) = self.posted.pop_front() else {
                return Err("a receive CQE with no WQE posted".into());
            };
            let at = self.slot(k);
            let page = self.env.read(at - SLOT_AT, SLOT as usize);
            let n = c.byte_cnt() as usize;
            if c.is_error() {
                if (f.len() as u64) <= u64::from(cap) {
                    return Err(format!(
                        "error CQE (syndrome {:#x}) for a {}-byte frame into {cap} bytes",
                        c.syndrome(),
                        f.len()
                    ));
                }
                if page.iter().any(|&b| b != CANARY) {
                    return Err("a refused frame was written".into());
                }
                STATS.eth_wire_dropped.fetch_add(1, Ordering::Relaxed);
            } else {
                if n != f.len() || n > cap as usize {
                    return Err(format!("byte_cnt {n} for {} bytes into {cap}", f.len()));
                }
                let s = SLOT_AT as usize;
                if page[s..s + n] != f[..] {
                    return Err(format!("the {n}-byte frame was not received whole"));
                }
                if page[..s].iter().chain(&page[s + n..]).any(|&b| b != CANARY) {
                    return Err(format!("a {n}-byte receive wrote outside its frame"));
                }
                self.env.write(at, &vec![CANARY; n]);
                STATS.eth_wire_received.fetch_add(1, Ordering::Relaxed);
            }
        }
        if dropped + cqes != 1 {
            return Err(format!(
                "a {}-byte frame (EtherType {:#06x}) counted {dropped} times dropped, {cqes} CQEs: {:?}",
                f.len(),
                f.get(12..14).map_or(0, |t| u16::from_be_bytes([t[0], t[1]])),
                after.nonzero()
            ));
        }
        if dropped == 1 {
            STATS.eth_wire_dropped.fetch_add(1, Ordering::Relaxed);
        }
        self.recover();
        if rng.chance(700) {
            let want = rng.range(0, SLOTS) as usize;
            self.post(rng, want);
        }
        Ok(())
    }
}

impl Epoch for EthWireFuzz {
    fn step(&mut self, rng: &mut Rng) -> Result<(), String> {
        if rng.chance(150) {
            let mode = rng.pick(&[
                None,
                Some(nic_vport_context::PROMISC_UC),
                Some(nic_vport_context::PROMISC_MC),
                Some(nic_vport_context::PROMISC_ALL),
            ]);
            match mode {
                Some(m) => e::set_promisc(&mut self.env, m, true),
                None => e::set_promisc(&mut self.env, nic_vport_context::PROMISC_ALL, false),
            }
        }
        let want = rng.range(0, SLOTS) as usize;
        self.post(rng, want);
        if rng.chance(30) {
            // The RQ to ERR (Linux en_main.c `mlx5e_modify_rq_state`, as the RX reporter's
            // recovery does): frames steered to it meanwhile are dropped, and counted.
            let rq = self.x.rq.n;
            e::modify(&mut self.env, false, rq, rqc_state::RDY, rqc_state::ERR);
        }
        if rng.chance(50) {
            // A broadcast storm: more frames than WQEs, nothing reposted between them.
            let f = self.seed(rng, [0xff; 6]);
            for _ in 0..rng.range(SLOTS, 4 * SLOTS) {
                let before = self.snapshot();
                if self.peer.send(f.clone()).is_err() {
                    break;
                }
                self.env.raw.dev.poll();
                let dropped = drops(&self.snapshot()) - drops(&before);
                let mut cqes = 0;
                while let Some(c) = self.env.poll_cq(&mut self.x.rcq) {
                    cqes += 1;
                    let (k, cap) = self.posted.pop_front().ok_or("a CQE with no WQE")?;
                    if !c.is_error() {
                        let n = c.byte_cnt() as usize;
                        if n != f.len() || n > cap as usize {
                            return Err(format!("storm: byte_cnt {n} of {} into {cap}", f.len()));
                        }
                        self.env.write(self.slot(k), &vec![CANARY; n]);
                    }
                }
                if dropped + cqes != 1 {
                    return Err(format!("storm: counted {dropped} dropped, {cqes} CQEs"));
                }
                self.recover();
            }
        } else {
            for _ in 0..rng.range(1, 8) {
                let f = self.frame(rng);
                self.one(rng, f)?;
            }
        }
        let _ = self.env.drain_eq();
        Ok(())
    }

    fn check(&mut self) -> Result<(), String> {
        self.env.raw.dev.ram.check_guards()?;
        let len = (SLOTS * SLOT) as usize;
        canary_intact(&self.env, self.region, len, CANARY, "frame")
    }
}

/// The root NIC_RX table (level 0) and a deeper one (level 1), as Linux core/fs_cmd.c builds
/// them (CREATE_FLOW_TABLE, CREATE_FLOW_GROUP, SET_FLOW_TABLE_ENTRY, SET_FLOW_TABLE_ROOT):
/// UDP port 53 to the TIR, UDP port 9 (discard) dropped; TCP port 80 to the TIR, 23 dropped;
/// the port's MAC to the deeper table, LLDP's group dropped; ARP and IPv6 to the TIR,
/// LLDP's EtherType dropped. The deeper table takes ICMP and UDP to the TIR, misses the rest.
fn rules(env: &mut Env<Guarded>, tirn: u32, mac: [u8; 6]) {
    let (root, deep) = (table(env, 0), table(env, 1));
    let et = l24::ETHERTYPE;
    let proto = l24::IP_PROTOCOL;
    let mac47 = |m: [u8; 6]| u32::from_be_bytes([m[0], m[1], m[2], m[3]]);
    let mac15 = |m: [u8; 6]| u32::from(u16::from_be_bytes([m[4], m[5]]));
    let dmac = |m: [u8; 6]| vec![(l24::DMAC_47_16, mac47(m)), (l24::DMAC_15_0, mac15(m))];
    let tir = Some((flow_destination_type::TIR, tirn));
    let to_deep = Some((flow_destination_type::FLOW_TABLE, deep));
    let fwd = flow_context_action::FWD_DEST;
    let drop = flow_context_action::DROP;
    // (first index, match criteria, entries: (match values, action, destination)).
    type Entry = (Vec<(Field, u32)>, u16, Option<(u8, u32)>);
    let udp = |p: u32| vec![(et, 0x0800), (proto, 17), (l24::UDP_DPORT, p)];
    let tcp = |p: u32| vec![(et, 0x0800), (proto, 6), (l24::TCP_DPORT, p)];
    let root_groups: Vec<(u32, Vec<Field>, Vec<Entry>)> = vec![
        (
            0,
            vec![et, proto, l24::UDP_DPORT],
            vec![(udp(53), fwd, tir), (udp(9), drop, None)],
        ),
        (
            2,
            vec![et, proto, l24::TCP_DPORT],
            vec![(tcp(80), fwd, tir), (tcp(23), drop, None)],
        ),
        (
            4,
            vec![l24::DMAC_47_16, l24::DMAC_15_0],
            vec![(dmac(mac), fwd, to_deep), (dmac(LLDP_MC), drop, None)],
        ),
        (
            6,
            vec![et],
            vec![
                (vec![(et, 0x0806)], fwd, tir),
                (vec![(et, 0x86dd)], fwd, tir),
                (vec![(et, 0x88cc)], drop, None),
            ],
        ),
    ];
    let deep_groups: Vec<(u32, Vec<Field>, Vec<Entry>)> = vec![(
        0,
        vec![et, proto],
        vec![
            (vec![(et, 0x0800), (proto, 1)], fwd, tir),
            (vec![(et, 0x0800), (proto, 17)], fwd, tir),
        ],
    )];
    for (ft, groups) in [(root, root_groups), (deep, deep_groups)] {
        for (first, criteria, entries) in groups {
            let g = group(env, ft, first, first + entries.len() as u32 - 1, &criteria);
            for (k, (values, action, dest)) in entries.into_iter().enumerate() {
                entry(env, ft, g, first + k as u32, &values, action, dest);
            }
        }
    }
    let mut i = raw::input(
        opcode::SET_FLOW_TABLE_ROOT,
        0,
        set_flow_table_root_in::BYTES,
    );
    raw::set(&mut i, set_flow_table_root_in::TABLE_ID, root);
    env.raw.exec(&i, 16).ok();
}

/// CREATE_FLOW_TABLE of 16 entries at `level`; its id.
fn table(env: &mut Env<Guarded>, level: u32) -> u32 {
    let mut i = raw::input(opcode::CREATE_FLOW_TABLE, 0, create_flow_table_in::BYTES);
    let c = create_flow_table_in::FLOW_TABLE_CONTEXT;
    raw::set(&mut i, flow_table_context::LEVEL.within(c), level);
    raw::set(&mut i, flow_table_context::LOG_SIZE.within(c), 4);
    let d = env.raw.exec(&i, create_flow_table_out::BYTES);
    d.ok();
    d.get(create_flow_table_out::TABLE_ID)
}

/// An outer-header field of a match parameter at `within`.
fn outer(f: Field, within: Field) -> Field {
    f.within(fte_match_param::OUTER_HEADERS).within(within)
}

/// CREATE_FLOW_GROUP of entries `first..=last` matching every bit of `criteria`; its id.
fn group(env: &mut Env<Guarded>, ft: u32, first: u32, last: u32, criteria: &[Field]) -> u32 {
    let mut i = raw::input(opcode::CREATE_FLOW_GROUP, 0, create_flow_group_in::BYTES);
    raw::set(&mut i, create_flow_group_in::TABLE_ID, ft);
    raw::set(&mut i, create_flow_group_in::START_FLOW_INDEX, first);
    raw::set(&mut i, create_flow_group_in::END_FLOW_INDEX, last);
    raw::set(
        &mut i,
        create_flow_group_in::MATCH_CRITERIA_ENABLE,
        match_criteria_enable::OUTER_HEADERS.into(),
    );
    for &f in criteria {
        let ones = if f.width >= 32 {
            u32::MAX
        } else {
            (1 << f.width) - 1
        };
        raw::set(&mut i, outer(f, create_flow_group_in::MATCH_CRITERIA), ones);
    }
    let d = env.raw.exec(&i, create_flow_group_out::BYTES);
    d.ok();
    d.get(create_flow_group_out::GROUP_ID)
}

/// SET_FLOW_TABLE_ENTRY at `index` of group `g`: `values`, `action`, to `dest` if any.
fn entry(
    env: &mut Env<Guarded>,
    ft: u32,
    g: u32,
    index: u32,
    values: &[(Field, u32)],
    action: u16,
    dest: Option<(u8, u32)>,
) {
    let n = dest.is_some() as usize;
    let mut i = raw::input(opcode::SET_FLOW_TABLE_ENTRY, 0, set_fte_in::BYTES + n * 8);
    raw::set(&mut i, set_fte_in::TABLE_ID, ft);
    raw::set(&mut i, set_fte_in::FLOW_INDEX, index);
    let fc = |f: Field| f.within(set_fte_in::FLOW_CONTEXT);
    raw::set(&mut i, fc(flow_context::GROUP_ID), g);
    raw::set(&mut i, fc(flow_context::ACTION), action.into());
    raw::set(&mut i, fc(flow_context::DESTINATION_LIST_SIZE), n as u32);
    for &(f, v) in values {
        raw::set(&mut i, fc(outer(f, flow_context::MATCH_VALUE)), v);
    }
    if let Some((ty, t)) = dest {
        let d = fc(flow_context::DESTINATION.as_field()).byte_offset();
        i[d] = ty;
        i[d + 1..d + 4].copy_from_slice(&t.to_be_bytes()[1..]);
    }
    env.raw.exec(&i, 16).ok();
}

// ---------------------------------------------------------------------------------------------
// Seed frames (headers from the RFCs each names; addresses the harness's own) and mutations
// ---------------------------------------------------------------------------------------------

/// An Ethernet header with EtherType `et` (destination and source filled in by the caller).
fn ethernet(et: u16) -> Vec<u8> {
    let mut f = vec![0u8; 14];
    f[12..14].copy_from_slice(&et.to_be_bytes());
    f
}

/// An ARP request (RFC 826) for 10.0.0.2 from 10.0.0.1.
fn arp() -> Vec<u8> {
    let mut f = ethernet(0x0806);
    f.extend_from_slice(&[0, 1, 0x08, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x77, 10, 0, 0, 1]);
    f.extend_from_slice(&[0, 0, 0, 0, 0, 0, 10, 0, 0, 2]);
    f
}

/// An IPv4 datagram (RFC 791, header checksum right) of protocol `proto` carrying `l4`.
fn ipv4(proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut f = ethernet(0x0800);
    let len = (20 + l4.len()) as u16;
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    ip[2..4].copy_from_slice(&len.to_be_bytes());
    let sum = mlx5_sim::roce::ipv4_checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(l4);
    f
}

/// An ICMP echo request (RFC 792) with some payload, checksum right.
fn icmp_echo(rng: &mut Rng) -> Vec<u8> {
    let n = rng.below(1000) as usize;
    let mut m = vec![8, 0, 0, 0, 0x12, 0x34, 0, 1];
    m.extend(rng.bytes(n));
    let sum = !e::ones_sum(&m, 0);
    m[2..4].copy_from_slice(&sum.to_be_bytes());
    m
}

/// A TCP SYN (RFC 9293) to `port`, 20 bytes of header, checksum left zero.
fn tcp_syn(port: u16) -> Vec<u8> {
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&40000u16.to_be_bytes());
    t[2..4].copy_from_slice(&port.to_be_bytes());
    t[4..8].copy_from_slice(&1u32.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = 0x02;
    t[14..16].copy_from_slice(&64240u16.to_be_bytes());
    t
}

/// An IPv6 neighbour solicitation (RFC 4861 4.3) for fe80::1 to its solicited-node group.
fn neighbour_solicitation() -> Vec<u8> {
    let mut f = ethernet(0x86dd);
    let mut ip = vec![0x60, 0, 0, 0, 0, 24, 58, 255];
    ip.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    ip.extend_from_slice(&[0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 1]);
    f.extend_from_slice(&ip);
    let mut ns = vec![135, 0, 0, 0, 0, 0, 0, 0];
    ns.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    f.extend_from_slice(&ns);
    f
}

/// Inserts an IEEE 802.1Q tag (TPID 0x8100) of TCI `tci` after the addresses.
fn vlan_tag(f: &mut Vec<u8>, tci: u16) {
    let mut tag = vec![0x81, 0];
    tag.extend_from_slice(&tci.to_be_bytes());
    f.splice(12..12, tag);
}

/// One mutation: a runt, a giant, a cut, flipped bytes, another EtherType (or an 802.3
/// length, or S-tag), a tag, the `wire` target's IP / UDP length mutations, junk.
fn mutate(f: &mut Vec<u8>, rng: &mut Rng) {
    match rng.below(9) {
        0 => f.truncate(rng.below(60) as usize),
        1 => {
            let n = rng.range(1, 9000) as usize;
            f.extend(rng.bytes(n));
        }
        2 => f.truncate(rng.below(f.len() as u64 + 1) as usize),
        3 => {
            for _ in 0..rng.range(1, 8) {
                if !f.is_empty() {
                    let i = rng.below(f.len() as u64) as usize;
                    f[i] = rng.u32() as u8;
                }
            }
        }
        4 if f.len() >= 14 => {
            let any = rng.u32() as u16;
            let et: u16 = rng.pick(&[0x0040, 0x05ff, 0x0600, 0x88a8, 0x8100, 0x88cc, any]);
            f[12..14].copy_from_slice(&et.to_be_bytes());
        }
        5 if f.len() >= 14 => vlan_tag(f, rng.u32() as u16),
        6 | 7 => super::wire::mutate_bytes(f, rng),
        _ => {
            let n = rng.below(2000) as usize;
            *f = rng.bytes(n);
        }
    }
}
