//! The encoders: a new frame from [`RoceHeaders`] and a payload, or the exact bytes of a
//! decoded [`RoceFrame`].

use super::super::icrc::icrc;
use super::*;

fn range(field: &'static str, value: u64, max: u64) -> Result<(), EncodeError> {
    if value > max {
        Err(EncodeError::FieldRange { field, value })
    } else {
        Ok(())
    }
}

fn check(h: &RoceHeaders, payload_len: usize) -> Result<&'static OpcodeInfo, EncodeError> {
    let op = h.bth.opcode;
    let info = op.info().ok_or(EncodeError::UnknownOpcode(op.0))?;
    let have = h.ext.set();
    if have != info.hdrs {
        return Err(EncodeError::HeaderMismatch {
            opcode: op.0,
            want: info.hdrs,
            have,
        });
    }
    if !info.payload && payload_len != 0 {
        return Err(EncodeError::UnexpectedPayload {
            opcode: op.0,
            len: payload_len,
        });
    }
    if let Some(v) = h.eth.vlan {
        range("802.1Q PCP", v.pcp as u64, 7)?;
        range("802.1Q VID", v.vid as u64, 0xfff)?;
    }
    match h.ip {
        IpHdr::V4(v) => {
            range("IPv4 DSCP", v.dscp as u64, 63)?;
            range("IPv4 ECN", v.ecn as u64, 3)?;
        }
        IpHdr::V6(v) => range("IPv6 Flow Label", v.flow_label as u64, 0xf_ffff)?,
    }
    range("BTH TVer", h.bth.tver as u64, 0xf)?;
    range("BTH DestQP", h.bth.dest_qp as u64, 0xff_ffff)?;
    range("BTH resv7", h.bth.resv7 as u64, 0x7f)?;
    range("BTH PSN", h.bth.psn as u64, 0xff_ffff)?;
    if let Some(d) = h.ext.deth {
        range("DETH SrcQP", d.src_qp as u64, 0xff_ffff)?;
    }
    if let Some(a) = h.ext.aeth {
        range("AETH MSN", a.msn as u64, 0xff_ffff)?;
    }
    Ok(info)
}

pub(super) fn encode(
    h: &RoceHeaders,
    payload: &[u8],
    pad: [u8; 3],
    trailer: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let ip_start = write_headers(h, payload.len(), trailer.len(), out)?;
    out.extend_from_slice(payload);
    out.extend_from_slice(&pad[..pad_for(payload.len())]);
    let is_v6 = matches!(h.ip, IpHdr::V6(_));
    // The datagram written so far holds IP + UDP + BTH, so icrc() returns Some.
    let c = icrc(&out[ip_start..], is_v6).unwrap_or(0);
    out.extend_from_slice(&c.to_le_bytes());
    out.extend_from_slice(trailer);
    Ok(())
}

/// Appends the headers (Ethernet to the last extension header) for a packet of `payload_len`
/// payload bytes, reserving room for `extra` more bytes after them; returns where the IP header
/// starts in `out`.
pub(super) fn write_headers(
    h: &RoceHeaders,
    payload_len: usize,
    extra: usize,
    out: &mut Vec<u8>,
) -> Result<usize, EncodeError> {
    let info = check(h, payload_len)?;
    let too_long = EncodeError::TooLong(payload_len);
    let udp = udp_len(info.hdrs, payload_len).ok_or(too_long)?;
    let ip_total = h.ip.len() + udp;
    if matches!(h.ip, IpHdr::V4(_)) && ip_total > 0xffff {
        return Err(too_long);
    }
    out.reserve(eth_len(&h.eth) + ip_total + extra);
    out.extend_from_slice(&h.eth.dst);
    out.extend_from_slice(&h.eth.src);
    if let Some(v) = h.eth.vlan {
        out.extend_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
        let tci = (v.pcp as u16) << 13 | (v.dei as u16) << 12 | v.vid;
        out.extend_from_slice(&tci.to_be_bytes());
    }
    let ip_start;
    match h.ip {
        IpHdr::V4(v) => {
            out.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
            ip_start = out.len();
            let mut b = [0u8; IPV4_HDR_LEN];
            b[0] = 0x45;
            b[1] = v.dscp << 2 | v.ecn;
            b[2..4].copy_from_slice(&(ip_total as u16).to_be_bytes());
            b[4..6].copy_from_slice(&v.identification.to_be_bytes());
            b[6] = if v.dont_fragment { 0x40 } else { 0 };
            b[8] = v.ttl;
            b[9] = IP_PROTO_UDP;
            b[12..16].copy_from_slice(&v.src.octets());
            b[16..20].copy_from_slice(&v.dst.octets());
            let c = ipv4_checksum(&b);
            b[10..12].copy_from_slice(&c.to_be_bytes());
            out.extend_from_slice(&b);
        }
        IpHdr::V6(v) => {
            out.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
            ip_start = out.len();
            let w = 6u32 << 28 | (v.traffic_class as u32) << 20 | v.flow_label;
            out.extend_from_slice(&w.to_be_bytes());
            out.extend_from_slice(&(udp as u16).to_be_bytes());
            out.push(IP_PROTO_UDP);
            out.push(v.hop_limit);
            out.extend_from_slice(&v.src.octets());
            out.extend_from_slice(&v.dst.octets());
        }
    }
    out.extend_from_slice(&h.udp.src_port.to_be_bytes());
    out.extend_from_slice(&ROCEV2_UDP_PORT.to_be_bytes());
    out.extend_from_slice(&(udp as u16).to_be_bytes());
    out.extend_from_slice(&h.udp.checksum.to_be_bytes());
    let b = &h.bth;
    let pad_count = pad_for(payload_len);
    out.push(b.opcode.0);
    out.push((b.solicited as u8) << 7 | (b.mig_req as u8) << 6 | (pad_count as u8) << 4 | b.tver);
    out.extend_from_slice(&b.p_key.to_be_bytes());
    out.push(b.resv8a);
    out.extend_from_slice(&b.dest_qp.to_be_bytes()[1..]);
    out.push((b.ack_req as u8) << 7 | b.resv7);
    out.extend_from_slice(&b.psn.to_be_bytes()[1..]);
    let e = &h.ext;
    if let Some(d) = e.deth {
        out.extend_from_slice(&d.q_key.to_be_bytes());
        out.push(d.resv8);
        out.extend_from_slice(&d.src_qp.to_be_bytes()[1..]);
    }
    if let Some(r) = e.reth {
        out.extend_from_slice(&r.va.to_be_bytes());
        out.extend_from_slice(&r.r_key.to_be_bytes());
        out.extend_from_slice(&r.dma_len.to_be_bytes());
    }
    if let Some(a) = e.atomic_eth {
        out.extend_from_slice(&a.va.to_be_bytes());
        out.extend_from_slice(&a.r_key.to_be_bytes());
        out.extend_from_slice(&a.swap_add.to_be_bytes());
        out.extend_from_slice(&a.compare.to_be_bytes());
    }
    if let Some(a) = e.aeth {
        out.push(a.syndrome);
        out.extend_from_slice(&a.msn.to_be_bytes()[1..]);
    }
    if let Some(a) = e.atomic_ack_eth {
        out.extend_from_slice(&a.orig.to_be_bytes());
    }
    if let Some(i) = e.imm_dt {
        out.extend_from_slice(&i.to_be_bytes());
    }
    if let Some(i) = e.ieth {
        out.extend_from_slice(&i.to_be_bytes());
    }
    Ok(ip_start)
}
