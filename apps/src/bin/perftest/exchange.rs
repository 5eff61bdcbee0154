//! perftest's out-of-band messages: `ctx_hand_shake` keys, `ctx_xchg_data`, `xchg_bw_reports`.

use super::*;

/// perftest's version string (configure.ac `AC_INIT([perftest],[6.06])` in 4.5-0.17).
pub(crate) const VERSION: &[u8] = b"6.06";
/// One side's `struct pingpong_dest` as ctx_hand_shake carries it.
pub(crate) struct Dest {
    pub(crate) out_reads: u32,
    pub(crate) qpn: u32,
    pub(crate) psn: u32,
    pub(crate) rkey: u32,
    pub(crate) vaddr: u64,
    pub(crate) gid: [u8; 16],
}

pub(crate) fn key_msg(d: &Dest) -> Vec<u8> {
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

pub(crate) fn parse_key(m: &[u8]) -> Option<Dest> {
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

/// `ctx_xchg_data`: the client writes, then reads; the server reads, then writes.
pub(crate) fn xchg(
    link: &mut Oob,
    client: bool,
    mine: &[u8],
    what: &str,
) -> Result<Vec<u8>, String> {
    let err = |e: OobError| format!("exchange of the {what}: {e}");
    if client {
        link.send(mine).map_err(err)?;
    }
    let theirs = link.recv(mine.len()).map_err(err)?;
    if !client {
        link.send(mine).map_err(err)?;
    }
    Ok(theirs)
}

pub(crate) fn send_report(link: &mut Oob, c: bool, r: &Report) -> Result<(), String> {
    for f in [
        r.size.to_be_bytes(),
        r.iters.to_be_bytes(),
        r.peak.to_bits().to_be_bytes(),
        r.avg.to_bits().to_be_bytes(),
        r.rate.to_bits().to_be_bytes(),
    ] {
        xchg(link, c, &f, "reports")?;
    }
    Ok(())
}

pub(crate) fn recv_report(link: &mut Oob, c: bool) -> Result<Report, String> {
    let mut f = [0u64; 5];
    for x in f.iter_mut() {
        let b = xchg(link, c, &[0u8; 8], "reports")?;
        *x = u64::from_be_bytes(b.try_into().map_err(|_| "report")?);
    }
    Ok(Report {
        size: f[0],
        iters: f[1],
        peak: f64::from_bits(f[2]),
        avg: f64::from_bits(f[3]),
        rate: f64::from_bits(f[4]),
    })
}
