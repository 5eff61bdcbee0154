//! The `wire` target's hostile frames: structure-aware mutations of captured frames,
//! sealed again with the project's codec, frames with a bad ICRC, random bytes.

use super::*;

impl WireFuzz {
    /// A hostile frame for side `to`.
    pub(super) fn hostile(&self, to: usize, rng: &mut Rng) -> Vec<u8> {
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
    pub(super) fn mutate(&self, base: &[u8], to: usize, rng: &mut Rng) -> Vec<u8> {
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
                    let rc: Vec<u8> = OPCODES
                        .iter()
                        .map(|o| o.code)
                        .filter(|c| *c < 0x20)
                        .collect();
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
                } else if let Some(a) = &mut h.ext.atomic_eth {
                    a.va &= !7;
                    a.va = a.va.wrapping_add(8 * rng.range(0, 4)).wrapping_sub(16);
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
                6 => {
                    h.eth.dst = rng.pick(&[[0xff; 6], [0x01, 0, 0x5e, 0, 0, 1], [2, 0, 0, 0, 0, 9]])
                }
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
        Some(
            ext.atomic_ack_eth
                .unwrap_or(AtomicAckEth { orig: rng.u64() }),
        )
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
pub(in crate::fuzz) fn mutate_bytes(f: &mut Vec<u8>, rng: &mut Rng) {
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
                let v = if shrink {
                    v.wrapping_sub(d)
                } else {
                    v.wrapping_add(d)
                };
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
