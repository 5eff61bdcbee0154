//! The total decoder: any byte string in, a [`Frame`] or a typed [`DecodeError`] out.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::super::icrc::icrc;
use super::*;

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn be24(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be64(b: &[u8], at: usize) -> u64 {
    (be32(b, at) as u64) << 32 | be32(b, at + 4) as u64
}

/// The source and destination port at `at` of `b` (TCP and UDP both start with them), if
/// `b` holds them.
fn ports(b: &[u8], at: usize) -> Option<(u16, u16)> {
    (b.len() >= at + 4).then(|| (be16(b, at), be16(b, at + 2)))
}

fn need(layer: Layer, b: &[u8], n: usize) -> Result<(), DecodeError> {
    if b.len() < n {
        Err(DecodeError::Truncated {
            layer,
            need: n,
            have: b.len(),
        })
    } else {
        Ok(())
    }
}

/// Decodes one Ethernet frame (no FCS). Total: every input gives a value or a typed error.
pub fn decode(frame: &[u8]) -> Result<Frame<'_>, DecodeError> {
    need(Layer::Ethernet, frame, ETH_HDR_LEN)?;
    let mut dst = [0u8; 6];
    let mut src = [0u8; 6];
    dst.copy_from_slice(&frame[0..6]);
    src.copy_from_slice(&frame[6..12]);
    let mut ethertype = be16(frame, 12);
    let mut l3 = ETH_HDR_LEN;
    let mut vlan = None;
    if ethertype == ETHERTYPE_VLAN {
        need(Layer::Vlan, frame, ETH_HDR_LEN + VLAN_TAG_LEN)?;
        let tci = be16(frame, 14);
        vlan = Some(Vlan {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0fff,
        });
        ethertype = be16(frame, 16);
        l3 += VLAN_TAG_LEN;
    }
    let eth = EthHdr { dst, src, vlan };
    let other = |ip: Option<OtherIp>| {
        Ok(Frame::Other(OtherFrame {
            dst,
            src,
            vlan,
            ethertype,
            ip,
        }))
    };
    let ipb = &frame[l3..];
    let (ip, ip_end) = match ethertype {
        ETHERTYPE_IPV4 => {
            need(Layer::Ipv4, ipb, IPV4_HDR_LEN)?;
            if ipb[0] >> 4 != 4 {
                return Err(DecodeError::IpVersion(ipb[0] >> 4));
            }
            let ihl = ipb[0] & 0x0f;
            let hlen = ihl as usize * 4;
            let proto = ipb[9];
            let flags_frag = be16(ipb, 6);
            let frag_off = flags_frag & 0x1fff;
            let s = Ipv4Addr::new(ipb[12], ipb[13], ipb[14], ipb[15]);
            let d = Ipv4Addr::new(ipb[16], ipb[17], ipb[18], ipb[19]);
            let mut oip = OtherIp {
                src: IpAddr::V4(s),
                dst: IpAddr::V4(d),
                protocol: proto,
                udp_ports: None,
                tcp_ports: None,
            };
            if proto == IP_PROTO_TCP && frag_off == 0 && hlen >= IPV4_HDR_LEN {
                oip.tcp_ports = ports(ipb, hlen);
            }
            if proto != IP_PROTO_UDP || frag_off != 0 || hlen < IPV4_HDR_LEN {
                return other(Some(oip));
            }
            need(Layer::Udp, ipb, hlen + UDP_HDR_LEN)?;
            let dport = be16(ipb, hlen + 2);
            if dport != ROCEV2_UDP_PORT {
                oip.udp_ports = Some((be16(ipb, hlen), dport));
                return other(Some(oip));
            }
            // From here on the frame is RoCEv2 and judged strictly.
            if ihl != 5 {
                return Err(DecodeError::Ipv4Options { ihl });
            }
            if flags_frag & 0x8000 != 0 {
                return Err(DecodeError::Ipv4ReservedFlag);
            }
            if flags_frag & 0x2000 != 0 {
                return Err(DecodeError::Ipv4Fragment);
            }
            let total = be16(ipb, 2);
            if (total as usize) < IPV4_HDR_LEN + UDP_HDR_LEN {
                return Err(DecodeError::IpLength(total));
            }
            need(Layer::Ipv4, ipb, total as usize)?;
            let sum = ipv4_checksum(&ipb[..IPV4_HDR_LEN]);
            if sum != 0 {
                let found = be16(ipb, 10);
                let mut h = [0u8; IPV4_HDR_LEN];
                h.copy_from_slice(&ipb[..IPV4_HDR_LEN]);
                h[10] = 0;
                h[11] = 0;
                return Err(DecodeError::Ipv4Checksum {
                    found,
                    expected: ipv4_checksum(&h),
                });
            }
            let ip = IpHdr::V4(Ipv4Hdr {
                dscp: ipb[1] >> 2,
                ecn: ipb[1] & 3,
                identification: be16(ipb, 4),
                dont_fragment: flags_frag & 0x4000 != 0,
                ttl: ipb[8],
                src: s,
                dst: d,
            });
            (ip, total as usize)
        }
        ETHERTYPE_IPV6 => {
            need(Layer::Ipv6, ipb, IPV6_HDR_LEN)?;
            if ipb[0] >> 4 != 6 {
                return Err(DecodeError::IpVersion(ipb[0] >> 4));
            }
            let mut a = [0u8; 16];
            a.copy_from_slice(&ipb[8..24]);
            let s = Ipv6Addr::from(a);
            a.copy_from_slice(&ipb[24..40]);
            let d = Ipv6Addr::from(a);
            let next = ipb[6];
            let mut oip = OtherIp {
                src: IpAddr::V6(s),
                dst: IpAddr::V6(d),
                protocol: next,
                udp_ports: None,
                tcp_ports: None,
            };
            if next == IP_PROTO_TCP {
                oip.tcp_ports = ports(ipb, IPV6_HDR_LEN);
            }
            if next != IP_PROTO_UDP {
                return other(Some(oip));
            }
            need(Layer::Udp, ipb, IPV6_HDR_LEN + UDP_HDR_LEN)?;
            let dport = be16(ipb, IPV6_HDR_LEN + 2);
            if dport != ROCEV2_UDP_PORT {
                oip.udp_ports = Some((be16(ipb, IPV6_HDR_LEN), dport));
                return other(Some(oip));
            }
            let plen = be16(ipb, 4);
            if (plen as usize) < UDP_HDR_LEN {
                return Err(DecodeError::IpLength(plen));
            }
            need(Layer::Ipv6, ipb, IPV6_HDR_LEN + plen as usize)?;
            let w = be32(ipb, 0);
            let ip = IpHdr::V6(Ipv6Hdr {
                traffic_class: (w >> 20) as u8,
                flow_label: w & 0xf_ffff,
                hop_limit: ipb[7],
                src: s,
                dst: d,
            });
            (ip, IPV6_HDR_LEN + plen as usize)
        }
        _ => return other(None),
    };
    let dgram = &ipb[..ip_end];
    let trailer = &ipb[ip_end..];
    let u = &dgram[ip.len()..];
    let ulen = be16(u, 4);
    if ulen as usize != u.len() {
        return Err(DecodeError::UdpLength {
            udp: ulen,
            ip: u.len(),
        });
    }
    let udp = UdpHdr {
        src_port: be16(u, 0),
        checksum: be16(u, 6),
    };
    let t = &u[UDP_HDR_LEN..];
    need(Layer::Bth, t, BTH_LEN + ICRC_LEN)?;
    let opcode = Opcode(t[0]);
    let info: &OpcodeInfo = opcode.info().ok_or(DecodeError::UnknownOpcode(opcode.0))?;
    let pad_count = (t[1] >> 4) & 3;
    let bth = Bth {
        opcode,
        solicited: t[1] & 0x80 != 0,
        mig_req: t[1] & 0x40 != 0,
        tver: t[1] & 0x0f,
        p_key: be16(t, 2),
        resv8a: t[4],
        dest_qp: be24(t, 5),
        ack_req: t[8] & 0x80 != 0,
        resv7: t[8] & 0x7f,
        psn: be24(t, 9),
    };
    let ext_len = info.hdrs.len();
    need(Layer::ExtHeaders, t, BTH_LEN + ext_len + ICRC_LEN)?;
    let mut ext = ExtHdrs::default();
    let mut p = BTH_LEN;
    if info.hdrs.contains(HdrSet::DETH) {
        ext.deth = Some(Deth {
            q_key: be32(t, p),
            resv8: t[p + 4],
            src_qp: be24(t, p + 5),
        });
        p += DETH_LEN;
    }
    if info.hdrs.contains(HdrSet::RETH) {
        ext.reth = Some(Reth {
            va: be64(t, p),
            r_key: be32(t, p + 8),
            dma_len: be32(t, p + 12),
        });
        p += RETH_LEN;
    }
    if info.hdrs.contains(HdrSet::ATOMIC_ETH) {
        ext.atomic_eth = Some(AtomicEth {
            va: be64(t, p),
            r_key: be32(t, p + 8),
            swap_add: be64(t, p + 12),
            compare: be64(t, p + 20),
        });
        p += ATOMIC_ETH_LEN;
    }
    if info.hdrs.contains(HdrSet::AETH) {
        ext.aeth = Some(Aeth {
            syndrome: t[p],
            msn: be24(t, p + 1),
        });
        p += AETH_LEN;
    }
    if info.hdrs.contains(HdrSet::ATOMIC_ACK_ETH) {
        ext.atomic_ack_eth = Some(AtomicAckEth { orig: be64(t, p) });
        p += ATOMIC_ACK_ETH_LEN;
    }
    if info.hdrs.contains(HdrSet::IMM_DT) {
        ext.imm_dt = Some(be32(t, p));
        p += IMM_DT_LEN;
    }
    if info.hdrs.contains(HdrSet::IETH) {
        ext.ieth = Some(be32(t, p));
        p += IETH_LEN;
    }
    let body = &t[p..t.len() - ICRC_LEN];
    if !body.len().is_multiple_of(4) {
        return Err(DecodeError::PayloadMisaligned(body.len()));
    }
    if pad_count as usize > body.len() {
        return Err(DecodeError::PadTooLong {
            pad: pad_count,
            have: body.len(),
        });
    }
    if !info.payload && !body.is_empty() {
        return Err(DecodeError::UnexpectedPayload {
            opcode: opcode.0,
            len: body.len(),
        });
    }
    let (payload, pad_bytes) = body.split_at(body.len() - pad_count as usize);
    let mut pad = [0u8; 3];
    pad[..pad_bytes.len()].copy_from_slice(pad_bytes);
    let icrc_at = t.len() - ICRC_LEN;
    let icrc_wire =
        u32::from_le_bytes([t[icrc_at], t[icrc_at + 1], t[icrc_at + 2], t[icrc_at + 3]]);
    let is_v6 = matches!(ip, IpHdr::V6(_));
    // The datagram holds at least IP + UDP + BTH here, so icrc() returns Some.
    let icrc_computed = icrc(&dgram[..dgram.len() - ICRC_LEN], is_v6).unwrap_or(!icrc_wire);
    Ok(Frame::Roce(RoceFrame {
        hdrs: RoceHeaders {
            eth,
            ip,
            udp,
            bth,
            ext,
        },
        payload,
        pad,
        icrc: icrc_wire,
        icrc_computed,
        trailer,
    }))
}
