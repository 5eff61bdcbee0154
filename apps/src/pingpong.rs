//! What `pingpong` (rc_pingpong's other side) and `ud-pingpong` (ud_pingpong's) share: the
//! TCP exchange of rdma-core's libibverbs/examples (`pp_client_exch_dest` /
//! `pp_server_exch_dest`, the same in rc_pingpong.c and ud_pingpong.c) and the check of a
//! received message.

use alloc::format;
use alloc::vec::Vec;

use mlx5::{QpEndpoint, GRH_BYTES};

use crate::oob;

/// The length of the exchange's message: `sizeof "0000:000000:000000:" + 32 hex digits`,
/// its NUL included.
pub const DEST_MSG_LEN: usize = 52;

/// The 52-byte message of rc_pingpong.c `pp_*_exch_dest`.
pub fn dest_msg(ep: &QpEndpoint) -> Vec<u8> {
    let mut m = format!(
        "{:04x}:{:06x}:{:06x}:{}",
        0,
        ep.qpn,
        ep.psn,
        oob::hex(&ep.gid)
    )
    .into_bytes();
    m.push(0);
    m
}

/// Parses the peer's message (`sscanf(msg, "%x:%x:%x:%s")` + `wire_gid_to_gid`); the MAC
/// is not in it (zero).
pub fn parse_dest(m: &[u8]) -> Option<QpEndpoint> {
    let s = core::str::from_utf8(m.split(|&b| b == 0).next()?).ok()?;
    let mut f = s.split(':');
    let _lid = u32::from_str_radix(f.next()?, 16).ok()?;
    let qpn = u32::from_str_radix(f.next()?, 16).ok()?;
    let psn = u32::from_str_radix(f.next()?, 16).ok()?;
    let g = oob::unhex(f.next()?)?;
    Some(QpEndpoint {
        qpn,
        psn,
        gid: g.try_into().ok()?,
        mac: [0; 6],
    })
}

/// Message `k` of a side: `base` with `k`'s key XORed into every 8-byte word, made a word at a
/// time (byte loops cost a microsecond an iteration under an instruction-emulating KVM).
pub fn message(base: &[u8], k: u64) -> Vec<u8> {
    let mut v = base.to_vec();
    let key = (k + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for w in v.chunks_exact_mut(8) {
        let x = u64::from_ne_bytes(w.try_into().unwrap_or([0; 8])) ^ key;
        w.copy_from_slice(&x.to_ne_bytes());
    }
    v
}

/// The sender's IPv4 address in a UD receive's GRH area ([`GRH_BYTES`]) on RoCE v2 over IPv4:
/// the IPv4 header at byte 20 (Linux include/rdma/ib_verbs.h `union rdma_network_hdr` `roce4grh`), version 4
/// and a 20-byte header (Linux drivers/infiniband/core/verbs.c `ib_get_rdma_header_version`
/// checks the same before it reads `saddr`, `ib_get_gids_from_rdma_hdr`). None otherwise.
pub fn grh_ipv4_source(area: &[u8]) -> Option<[u8; 4]> {
    let ip = area.get(20..GRH_BYTES)?;
    (ip[0] == 0x45).then(|| [ip[12], ip[13], ip[14], ip[15]])
}

/// The index of the first byte where `a` and `b` differ (or where one ends), comparing a word
/// at a time and bytes only in the word that differs and in the tail.
pub fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    let n = a.len().min(b.len());
    let words = n / 8;
    let w = (0..words)
        .find(|&j| a[j * 8..j * 8 + 8] != b[j * 8..j * 8 + 8])
        .unwrap_or(words);
    (w * 8..n)
        .find(|&i| a[i] != b[i])
        .or((a.len() != b.len()).then_some(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exchange_message_goes_both_ways_in_52_bytes() {
        let ep = QpEndpoint {
            qpn: 0x1234,
            psn: 0xabcdef,
            gid: mlx5::hca::ipv4_mapped_gid([10, 0, 0, 2]),
            mac: [0; 6],
        };
        let m = dest_msg(&ep);
        assert_eq!(m.len(), DEST_MSG_LEN);
        assert_eq!(
            &m[..19],
            b"0000:001234:abcdef:",
            "rc_pingpong's \"%04x:%06x:%06x:%s\""
        );
        assert_eq!(m[DEST_MSG_LEN - 1], 0);
        assert_eq!(parse_dest(&m), Some(ep));
        assert_eq!(parse_dest(b"0000:zz:000000:00\0"), None);
    }

    #[test]
    fn messages_differ_by_count_and_the_difference_is_found() {
        let base: Vec<u8> = (0..100u8).collect();
        let (a, b) = (message(&base, 0), message(&base, 1));
        assert_eq!(a.len(), 100);
        assert_ne!(a[..96], b[..96]);
        // The tail past the last whole word is the base's.
        assert_eq!(a[96..], base[96..]);
        assert_eq!(first_difference(&a, &a), None);
        let mut c = a.clone();
        c[77] ^= 1;
        assert_eq!(first_difference(&a, &c), Some(77));
        assert_eq!(first_difference(&a, &a[..50]), Some(50));
    }

    #[test]
    fn the_grh_area_names_the_ipv4_sender() {
        let mut area = [0u8; GRH_BYTES];
        area[20] = 0x45;
        area[32..36].copy_from_slice(&[10, 0, 0, 2]);
        assert_eq!(grh_ipv4_source(&area), Some([10, 0, 0, 2]));
        // A header with options, or not version 4: not read.
        area[20] = 0x46;
        assert_eq!(grh_ipv4_source(&area), None);
        assert_eq!(grh_ipv4_source(&area[..30]), None);
    }
}
