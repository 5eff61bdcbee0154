//! What `pingpong` (rc_pingpong's other side) and `ud-pingpong` (ud_pingpong's) share: the
//! TCP exchange of rdma-core's libibverbs/examples (`pp_client_exch_dest` /
//! `pp_server_exch_dest`, the same in rc_pingpong.c and ud_pingpong.c) and the check of a
//! received message.

use alloc::format;
use alloc::vec::Vec;

use mlx5::QpEndpoint;

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
