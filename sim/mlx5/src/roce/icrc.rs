//! The RoCEv2 invariant CRC (ICRC).
//!
//! IBTA Annex A17 §A17.4.1 (and vol. 1 §7.8.1 for the IB original): CRC-32 (the Ethernet
//! polynomial 0x04C11DB7, reflected, register preset to all ones, result inverted) over
//! 1. 64 bits of ones standing in for the LRH that RoCEv2 does not have;
//! 2. the IP header with its variant fields set to all ones: IPv4 Type of Service (DSCP+ECN),
//!    Time to Live and Header Checksum; IPv6 Traffic Class, Flow Label and Hop Limit;
//! 3. the UDP header with its Checksum set to all ones;
//! 4. the BTH with its byte 4 (FECN, BECN, resv6; rxe's `resv8a`) set to all ones;
//! 5. everything after the BTH up to the ICRC (extension headers, payload, pad).
//!
//! The result goes on the wire in little-endian byte order. Linux
//! drivers/infiniband/sw/rxe/rxe_icrc.c (`rxe_icrc_hdr`, `rxe_icrc_generate`): it seeds
//! `crc32_le` with 0xdebb20e3, the raw register after the eight 0xff bytes, copies the
//! IP+UDP+BTH headers to a stack buffer to mask them, and stores `~crc` as a CPU-order u32.
//! Here the eight 0xff bytes are folded into [`ICRC_SEED`] the same way, the headers are masked
//! in a 60-byte stack buffer, and the rest of the packet is hashed in place (no copy).

use crc32fast::Hasher;

use super::{BTH_LEN, IPV4_HDR_LEN, IPV6_HDR_LEN, UDP_HDR_LEN};

/// The crc32fast state (finalized form) after hashing eight 0xff bytes: the bitwise NOT of
/// rxe's raw-register seed 0xdebb20e3 (rxe_icrc.c `rxe_icrc_hdr`).
pub const ICRC_SEED: u32 = !0xdebb_20e3;

const MAX_MASKED: usize = IPV6_HDR_LEN + UDP_HDR_LEN + BTH_LEN;

/// The ICRC of a RoCEv2 packet. `datagram` runs from the first byte of the IP header to the
/// last byte before the ICRC; `ipv6` says which IP header it starts with. Returns the value
/// whose little-endian bytes are the wire ICRC, or `None` when `datagram` is shorter than the
/// IP, UDP and BTH headers.
pub fn icrc(datagram: &[u8], ipv6: bool) -> Option<u32> {
    let ip_len = if ipv6 { IPV6_HDR_LEN } else { IPV4_HDR_LEN };
    let hdr_len = ip_len + UDP_HDR_LEN + BTH_LEN;
    let head = datagram.get(..hdr_len)?;
    let mut masked = [0u8; MAX_MASKED];
    let m = &mut masked[..hdr_len];
    m.copy_from_slice(head);
    if ipv6 {
        m[0] |= 0x0f; // traffic class, high nibble
        m[1] = 0xff; // traffic class low nibble, flow label
        m[2] = 0xff;
        m[3] = 0xff;
        m[7] = 0xff; // hop limit
    } else {
        m[1] = 0xff; // type of service (DSCP, ECN)
        m[8] = 0xff; // time to live
        m[10] = 0xff; // header checksum
        m[11] = 0xff;
    }
    m[ip_len + 6] = 0xff; // UDP checksum
    m[ip_len + 7] = 0xff;
    m[ip_len + UDP_HDR_LEN + 4] = 0xff; // BTH byte 4: FECN, BECN, resv6
    let mut h = Hasher::new_with_initial(ICRC_SEED);
    h.update(m);
    h.update(&datagram[hdr_len..]);
    Some(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bit-at-a-time CRC-32 (IEEE 802.3, reflected), written from the definition, over a
    /// fully materialized masked copy: an independent check of the fast path.
    fn reference(datagram: &[u8], ipv6: bool) -> u32 {
        let mut buf = vec![0xffu8; 8];
        buf.extend_from_slice(datagram);
        let ip = if ipv6 { 40 } else { 20 };
        let b = &mut buf[8..];
        if ipv6 {
            b[0] |= 0x0f;
            b[1..4].fill(0xff);
            b[7] = 0xff;
        } else {
            b[1] = 0xff;
            b[8] = 0xff;
            b[10..12].fill(0xff);
        }
        b[ip + 6..ip + 8].fill(0xff);
        b[ip + 12] = 0xff;
        let mut crc = 0xffff_ffffu32;
        for &byte in &buf {
            crc ^= byte as u32;
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    #[test]
    fn seed_is_eight_ones() {
        assert_eq!(crc32fast::hash(&[0xff; 8]), ICRC_SEED);
    }

    #[test]
    fn matches_reference_and_masks_only_the_variant_fields() {
        for ipv6 in [false, true] {
            let ip = if ipv6 { 40 } else { 20 };
            let d: Vec<u8> = (0..ip + 20 + 300).map(|i| (i * 7 + 3) as u8).collect();
            let c = icrc(&d, ipv6).unwrap();
            assert_eq!(c, reference(&d, ipv6));
            // Variant fields do not change the ICRC...
            let variant: Vec<usize> = if ipv6 {
                vec![1, 2, 3, 7, ip + 6, ip + 7, ip + 12]
            } else {
                vec![1, 8, 10, 11, ip + 6, ip + 7, ip + 12]
            };
            for &i in &variant {
                let mut e = d.clone();
                e[i] ^= 0x5a;
                assert_eq!(icrc(&e, ipv6), Some(c), "byte {i}");
            }
            // ...every other byte does.
            for i in 0..d.len() {
                if variant.contains(&i) {
                    continue;
                }
                let mut e = d.clone();
                e[i] ^= if ipv6 && i == 0 { 0x10 } else { 0x01 };
                assert_ne!(icrc(&e, ipv6), Some(c), "byte {i}");
            }
        }
        assert_eq!(icrc(&[0u8; 39], false), None);
        assert!(icrc(&[0u8; 40], false).is_some());
    }
}
