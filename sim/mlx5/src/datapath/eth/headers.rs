//! What the NIC reads of an Ethernet frame's headers: where the L3 and L4 headers are (the
//! minimum inline mode a send WQE must satisfy, the receive CQE's header types), and the
//! Internet checksums it offloads (RFC 791 IPv4 header, RFC 793 / RFC 768 / RFC 8200 TCP and UDP
//! over IPv4 and IPv6, all the RFC 1071 one's-complement sum).
//!
//! A frame the parser does not understand is not an error: its unknown part is simply
//! "no L3" or "no L4", as a NIC treats an unknown ethertype or protocol.

/// Ethertypes (IEEE 802.3 / IANA).
const ETH_P_IPV4: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88a8;
/// IP protocol numbers (IANA).
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
/// Ethernet header without VLAN tags.
pub const ETH_HLEN: usize = 14;
const VLAN_HLEN: usize = 4;
const IPV6_HLEN: usize = 40;
const UDP_HLEN: usize = 8;

/// The network layer of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L3 {
    /// Not IP, or a malformed IP header.
    None,
    /// IPv4 with `ihl * 4` header bytes and `total` bytes in all.
    Ipv4 { hlen: usize, total: usize },
    /// IPv6 with `total` bytes (40 + payload length).
    Ipv6 { total: usize },
}

/// The transport layer of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    /// Neither TCP nor UDP, a fragment, or a malformed header.
    None,
    /// TCP with `hlen` header bytes; `ack`: the ACK flag; `data`: payload bytes follow.
    Tcp { hlen: usize, ack: bool, data: bool },
    /// UDP.
    Udp,
}

/// Where a frame's headers are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Headers {
    /// Bytes of the Ethernet header and its VLAN tags (where L3 starts).
    pub l2: usize,
    pub l3: L3,
    pub l4: L4,
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

impl Headers {
    /// Parses the headers of `frame` (an Ethernet frame without FCS).
    pub fn parse(frame: &[u8]) -> Headers {
        let mut h = Headers {
            l2: ETH_HLEN,
            l3: L3::None,
            l4: L4::None,
        };
        if frame.len() < ETH_HLEN {
            h.l2 = frame.len();
            return h;
        }
        let mut ethertype = be16(frame, 12);
        // Up to two tags (802.1ad outer, 802.1Q inner).
        for _ in 0..2 {
            if !matches!(ethertype, ETH_P_8021Q | ETH_P_8021AD) || frame.len() < h.l2 + VLAN_HLEN {
                break;
            }
            ethertype = be16(frame, h.l2 + 2);
            h.l2 += VLAN_HLEN;
        }
        let ip = &frame[h.l2..];
        let proto = match ethertype {
            ETH_P_IPV4 if ip.len() >= 20 && ip[0] >> 4 == 4 => {
                let hlen = (ip[0] & 0xf) as usize * 4;
                let total = be16(ip, 2) as usize;
                if hlen < 20 || total < hlen || total > ip.len() {
                    return h;
                }
                h.l3 = L3::Ipv4 { hlen, total };
                // A fragment other than a whole datagram carries no complete L4 segment.
                let frag = be16(ip, 6);
                if frag & 0x3fff != 0 {
                    return h;
                }
                ip[9]
            }
            ETH_P_IPV6 if ip.len() >= IPV6_HLEN && ip[0] >> 4 == 6 => {
                let total = IPV6_HLEN + be16(ip, 4) as usize;
                if total > ip.len() {
                    return h;
                }
                h.l3 = L3::Ipv6 { total };
                ip[6]
            }
            _ => return h,
        };
        let (hlen, total) = h.l3_lengths();
        let seg = &ip[hlen..total];
        h.l4 = match proto {
            IPPROTO_TCP if seg.len() >= 20 => {
                let thl = (seg[12] >> 4) as usize * 4;
                if thl < 20 || thl > seg.len() {
                    L4::None
                } else {
                    L4::Tcp {
                        hlen: thl,
                        ack: seg[13] & 0x10 != 0,
                        data: seg.len() > thl,
                    }
                }
            }
            IPPROTO_UDP if seg.len() >= UDP_HLEN && be16(seg, 4) as usize == seg.len() => L4::Udp,
            _ => L4::None,
        };
        h
    }

    /// (L3 header bytes, L3 total bytes), (0, 0) without L3.
    fn l3_lengths(&self) -> (usize, usize) {
        match self.l3 {
            L3::None => (0, 0),
            L3::Ipv4 { hlen, total } => (hlen, total),
            L3::Ipv6 { total } => (IPV6_HLEN, total),
        }
    }

    /// Bytes from the frame's start to the end of its L3 header (the L2 header without L3).
    pub fn through_l3(&self) -> usize {
        self.l2 + self.l3_lengths().0
    }

    /// Bytes from the frame's start to the end of its L4 header (through L3 without L4).
    pub fn through_l4(&self) -> usize {
        self.through_l3()
            + match self.l4 {
                L4::None => 0,
                L4::Tcp { hlen, .. } => hlen,
                L4::Udp => UDP_HLEN,
            }
    }

    /// The frame's L3 packet (header and payload, without Ethernet padding), if it has one.
    pub fn l3_packet<'f>(&self, frame: &'f [u8]) -> Option<&'f [u8]> {
        let (_, total) = self.l3_lengths();
        (total > 0).then(|| &frame[self.l2..self.l2 + total])
    }
}

/// The RFC 1071 one's-complement sum of `data` added to `acc` (not folded, not inverted).
pub fn sum(data: &[u8], mut acc: u64) -> u64 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u16::from_be_bytes([c[0], c[1]]) as u64;
    }
    if let [last] = chunks.remainder() {
        acc += (*last as u64) << 8;
    }
    acc
}

/// Folds a sum to 16 bits (one's complement, not inverted).
pub fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The pseudo-header sum of the L4 segment of `pkt` (an L3 packet of `h`), `len` bytes long.
fn pseudo(h: &Headers, pkt: &[u8], proto: u8, len: usize) -> u64 {
    let addrs = match h.l3 {
        L3::Ipv4 { .. } => &pkt[12..20],
        L3::Ipv6 { .. } => &pkt[8..40],
        L3::None => &pkt[..0],
    };
    sum(addrs, proto as u64 + len as u64)
}

/// Whether the IPv4 header checksum of `frame` is right (true for IPv6, which has none).
pub fn l3_ok(h: &Headers, frame: &[u8]) -> bool {
    match (h.l3, h.l3_packet(frame)) {
        (L3::Ipv4 { hlen, .. }, Some(p)) => fold(sum(&p[..hlen], 0)) == 0xffff,
        (L3::Ipv6 { .. }, Some(_)) => true,
        _ => false,
    }
}

/// Whether the TCP or UDP checksum of `frame` is right (a zero UDP checksum over IPv4 means
/// "none", RFC 768).
pub fn l4_ok(h: &Headers, frame: &[u8]) -> bool {
    let Some(p) = h.l3_packet(frame) else {
        return false;
    };
    let (hlen, _) = h.l3_lengths();
    let seg = &p[hlen..];
    let proto = match h.l4 {
        L4::Tcp { .. } => IPPROTO_TCP,
        L4::Udp if matches!(h.l3, L3::Ipv4 { .. }) && be16(seg, 6) == 0 => return true,
        L4::Udp => IPPROTO_UDP,
        L4::None => return false,
    };
    fold(sum(seg, pseudo(h, p, proto, seg.len()))) == 0xffff
}

/// Fills in the checksums a send WQE's `cs_flags` ask for: the IPv4 header checksum (`l3`)
/// and the TCP / UDP checksum (`l4`), each computed afresh over its fields with the checksum
/// field zero. A frame without that header is sent as it is.
pub fn offload(frame: &mut [u8], l3: bool, l4: bool) {
    let h = Headers::parse(frame);
    let (hlen, total) = h.l3_lengths();
    if total == 0 {
        return;
    }
    let p = &mut frame[h.l2..h.l2 + total];
    if l3 {
        if let L3::Ipv4 { .. } = h.l3 {
            p[10..12].fill(0);
            let c = !fold(sum(&p[..hlen], 0));
            p[10..12].copy_from_slice(&c.to_be_bytes());
        }
    }
    if !l4 {
        return;
    }
    let (proto, at) = match h.l4 {
        L4::Tcp { .. } => (IPPROTO_TCP, 16),
        L4::Udp => (IPPROTO_UDP, 6),
        L4::None => return,
    };
    let len = total - hlen;
    p[hlen + at..hlen + at + 2].fill(0);
    let ps = pseudo(&h, p, proto, len);
    let mut c = !fold(sum(&p[hlen..], ps));
    // A computed UDP checksum of zero is sent as all ones (RFC 768).
    if proto == IPPROTO_UDP && c == 0 {
        c = 0xffff;
    }
    p[hlen + at..hlen + at + 2].copy_from_slice(&c.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet + IPv4 + UDP frame with `payload`, checksums zero.
    pub(crate) fn udp4(payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8];
        f[12..14].copy_from_slice(&ETH_P_IPV4.to_be_bytes());
        f[14] = 0x45;
        let total = (20 + 8 + payload.len()) as u16;
        f[16..18].copy_from_slice(&total.to_be_bytes());
        f[22] = 64;
        f[23] = IPPROTO_UDP;
        f[26..30].copy_from_slice(&[10, 0, 0, 1]);
        f[30..34].copy_from_slice(&[10, 0, 0, 2]);
        f[34..36].copy_from_slice(&1234u16.to_be_bytes());
        f[36..38].copy_from_slice(&7u16.to_be_bytes());
        f[38..40].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// The header offsets of an untagged and a tagged IPv4 / UDP frame, and of a frame that
    /// is not IP.
    #[test]
    fn parses_l2_l3_l4() {
        let f = udp4(b"hello");
        let h = Headers::parse(&f);
        assert_eq!(h.l2, 14);
        assert_eq!(
            h.l3,
            L3::Ipv4 {
                hlen: 20,
                total: 33
            }
        );
        assert_eq!(h.l4, L4::Udp);
        assert_eq!((h.through_l3(), h.through_l4()), (34, 42));
        let mut tagged = f[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        tagged.extend_from_slice(&f[12..]);
        let h = Headers::parse(&tagged);
        assert_eq!((h.l2, h.through_l4()), (18, 46));
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        let h = Headers::parse(&arp);
        assert_eq!((h.l3, h.l4, h.through_l4()), (L3::None, L4::None, 14));
        // A total length beyond the frame: no L3.
        let mut bad = f.clone();
        bad[16..18].copy_from_slice(&900u16.to_be_bytes());
        assert_eq!(Headers::parse(&bad).l3, L3::None);
        // Runts do not panic.
        for n in 0..f.len() {
            let _ = Headers::parse(&f[..n]);
        }
    }

    /// The offloaded checksums verify, and a corrupted byte fails them.
    #[test]
    fn offload_then_verify() {
        let mut f = udp4(b"checksum me");
        let h = Headers::parse(&f);
        assert!(!l3_ok(&h, &f));
        offload(&mut f, true, true);
        assert!(l3_ok(&h, &f) && l4_ok(&h, &f));
        f[45] ^= 1;
        assert!(l3_ok(&h, &f) && !l4_ok(&h, &f));
        // UDP checksum 0 over IPv4: no checksum, accepted.
        f[40..42].fill(0);
        assert!(l4_ok(&h, &f));
    }
}
