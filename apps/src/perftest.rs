//! What perftest's other side (the `perftest` app) exchanges with perftest (linux-rdma/perftest
//! 4.5-0.17): a side's `struct pingpong_dest` as `ctx_hand_shake` carries it, as text over
//! TCP ([`key_msg`](crate::perftest::key_msg), src/perftest_communication.c `ethernet_write_keys`) and as the struct's
//! bytes in a SEND over the rdma_cm connection of `-R` ([`dest_bytes`](crate::perftest::dest_bytes), `rdma_write_keys`).

use alloc::format;
use alloc::vec::Vec;

/// One side's `struct pingpong_dest` as ctx_hand_shake carries it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dest {
    /// Outstanding RDMA READs/atomics it takes (`out_reads`).
    pub out_reads: u32,
    /// Its QP number.
    pub qpn: u32,
    /// Its send queue's first PSN.
    pub psn: u32,
    /// The rkey of its buffer.
    pub rkey: u32,
    /// The address of its buffer.
    pub vaddr: u64,
    /// Its GID.
    pub gid: [u8; 16],
}

/// The text form over TCP (`ethernet_write_keys`, `KEY_PRINT_FMT_GID`): 108 bytes, NUL included.
pub fn key_msg(d: &Dest) -> Vec<u8> {
    let mut s = format!(
        "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
        0, d.out_reads, d.qpn, d.psn, d.rkey, d.vaddr
    );
    for b in d.gid {
        s.push_str(&format!("{b:02x}:"));
    }
    s.push_str(&format!("{:08x}:", 0));
    let mut v = s.into_bytes();
    v.push(0);
    v
}

/// Parses the text form (`ethernet_read_keys`).
pub fn parse_key(m: &[u8]) -> Option<Dest> {
    let s = core::str::from_utf8(m.split(|&b| b == 0).next()?).ok()?;
    let f: Vec<&str> = s.split(':').collect();
    if f.len() < 23 {
        return None;
    }
    let h = |x: &str| u64::from_str_radix(x, 16).ok();
    let mut gid = [0u8; 16];
    for (i, g) in gid.iter_mut().enumerate() {
        *g = u8::from_str_radix(f[6 + i], 16).ok()?;
    }
    Some(Dest {
        out_reads: h(f[1])? as u32,
        qpn: h(f[2])? as u32,
        psn: h(f[3])? as u32,
        rkey: h(f[4])? as u32,
        vaddr: h(f[5])?,
        gid,
    })
}

/// `sizeof(struct pingpong_dest)` on x86_64 (src/perftest_resources.h): `int lid`,
/// `out_reads`, `qpn`, `psn`, `unsigned rkey` at 0..20, 4 bytes of padding, `unsigned long
/// long vaddr` at 24, `union ibv_gid gid` at 32 (8-aligned: its `global` half is two
/// `__be64`), `unsigned srqn` at 48, `int gid_index` at 52.
pub const PINGPONG_DEST_LEN: usize = 56;

/// The bytes `rdma_write_keys` sends (built with `HAVE_ENDIAN`, as Linux's perftest is): the
/// struct with every integer big-endian (`htobe32`, `htobe64`) and the GID's bytes as they
/// are; LID 0 and SRQN 0; the padding zero (perftest leaves it as the stack had it).
pub fn dest_bytes(d: &Dest, gid_index: u32) -> [u8; PINGPONG_DEST_LEN] {
    let mut b = [0u8; PINGPONG_DEST_LEN];
    b[4..8].copy_from_slice(&d.out_reads.to_be_bytes());
    b[8..12].copy_from_slice(&d.qpn.to_be_bytes());
    b[12..16].copy_from_slice(&d.psn.to_be_bytes());
    b[16..20].copy_from_slice(&d.rkey.to_be_bytes());
    b[24..32].copy_from_slice(&d.vaddr.to_be_bytes());
    b[32..48].copy_from_slice(&d.gid);
    b[52..56].copy_from_slice(&gid_index.to_be_bytes());
    b
}

/// What `rdma_read_keys` takes from the peer's bytes: LID, out_reads, QPN, PSN, rkey,
/// vaddr and GID (not the SRQN or GID index). None when fewer than
/// [`PINGPONG_DEST_LEN`] bytes came.
pub fn parse_dest_bytes(b: &[u8]) -> Option<Dest> {
    let b = b.get(..PINGPONG_DEST_LEN)?;
    let be32 = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let mut vaddr = [0u8; 8];
    vaddr.copy_from_slice(&b[24..32]);
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&b[32..48]);
    Some(Dest {
        out_reads: be32(4),
        qpn: be32(8),
        psn: be32(12),
        rkey: be32(16),
        vaddr: u64::from_be_bytes(vaddr),
        gid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest() -> Dest {
        Dest {
            out_reads: 16,
            qpn: 0x11,
            psn: 0xabcdef,
            rkey: 0x1234_5678,
            vaddr: 0x7f00_dead_beef_0000,
            gid: mlx5::hca::ipv4_mapped_gid([10, 0, 0, 2]),
        }
    }

    #[test]
    fn the_text_form_is_108_bytes_and_parses_back() {
        let m = key_msg(&dest());
        assert_eq!(m.len(), 108);
        assert!(m.starts_with(b"0000:0010:000011:abcdef:12345678:7f00deadbeef0000:00:00:"));
        assert_eq!(parse_key(&m), Some(dest()));
    }

    #[test]
    fn the_rdma_cm_form_is_the_big_endian_struct() {
        let b = dest_bytes(&dest(), 3);
        let mut want = [0u8; PINGPONG_DEST_LEN];
        want[4..8].copy_from_slice(&[0, 0, 0, 16]);
        want[8..12].copy_from_slice(&[0, 0, 0, 0x11]);
        want[12..16].copy_from_slice(&[0, 0xab, 0xcd, 0xef]);
        want[16..20].copy_from_slice(&[0x12, 0x34, 0x56, 0x78]);
        want[24..32].copy_from_slice(&[0x7f, 0, 0xde, 0xad, 0xbe, 0xef, 0, 0]);
        want[42..48].copy_from_slice(&[0xff, 0xff, 10, 0, 0, 2]);
        want[52..56].copy_from_slice(&[0, 0, 0, 3]);
        assert_eq!(b, want);
        assert_eq!(parse_dest_bytes(&b), Some(dest()));
        assert_eq!(parse_dest_bytes(&b[..55]), None);
    }
}
