//! perftest's out-of-band messages: `ctx_hand_shake` keys, `ctx_xchg_data`, `xchg_bw_reports`.

use super::*;
pub(crate) use apps::perftest::{dest_bytes, key_msg, parse_dest_bytes, parse_key, Dest};

/// perftest's version string (configure.ac `AC_INIT([perftest],[6.06])` in 4.5-0.17).
pub(crate) const VERSION: &[u8] = b"6.06";
/// `ctx_xchg_data`: the client writes, then reads; the server reads, then writes.
pub(crate) fn xchg(
    link: &mut Link,
    client: bool,
    mine: &[u8],
    what: &'static str,
) -> Result<Vec<u8>, Error<'static>> {
    let err = |e| Error::Xchg(what, e);
    if client {
        link.send(mine).map_err(err)?;
    }
    let theirs = link.recv(mine.len()).map_err(err)?;
    if !client {
        link.send(mine).map_err(err)?;
    }
    Ok(theirs)
}

pub(crate) fn send_report(link: &mut Link, c: bool, r: &Report) -> Result<(), Error<'static>> {
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

pub(crate) fn recv_report(link: &mut Link, c: bool) -> Result<Report, Error<'static>> {
    let mut f = [0u64; 5];
    for x in f.iter_mut() {
        let b = xchg(link, c, &[0u8; 8], "reports")?;
        let n = b.len();
        *x = u64::from_be_bytes(b.try_into().map_err(|_| Error::GarbledReport(n))?);
    }
    Ok(Report {
        size: f[0],
        iters: f[1],
        peak: f64::from_bits(f[2]),
        avg: f64::from_bits(f[3]),
        rate: f64::from_bits(f[4]),
    })
}
