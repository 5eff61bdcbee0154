//! What perftest's other side (the `perftest` app) exchanges with perftest (linux-rdma/perftest
//! 4.5-0.17): a side's `struct pingpong_dest` as `ctx_hand_shake` carries it.

use alloc::format;
use alloc::vec::Vec;

/// One side's `struct pingpong_dest` as ctx_hand_shake carries it.
pub struct Dest {
    pub out_reads: u32,
    pub qpn: u32,
    pub psn: u32,
    pub rkey: u32,
    pub vaddr: u64,
    pub gid: [u8; 16],
}

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
