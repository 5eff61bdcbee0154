//! Protection domains (ALLOC_PD / DEALLOC_PD) and transport domains
//! (ALLOC_TRANSPORT_DOMAIN / DEALLOC_TRANSPORT_DOMAIN).
//!
//! Numbers are 24 bits (`alloc_pd_out.pd`, `alloc_transport_domain_out.transport_domain`);
//! at most `1 << log_max_pd` / `1 << log_max_transport_domain` exist at once (current caps).
//! Numbering starts at 1, so a driver that forgets to fill a pd/td field is caught.

use crate::control::caps::Caps;
use crate::control::result::CmdResult;
use crate::control::result::{fail, get, put};
use crate::control::syndrome;
use crate::objects::Objects;
use mlx5_prm::{
    alloc_pd_out, alloc_transport_domain_out, cmd_hca_cap, cmd_status, dealloc_pd_in,
    dealloc_transport_domain_in,
};

/// A table of small numbered objects with a count limit.
///
/// A bitmap: numbers are handed out lowest-free first, so they stay dense, and a lookup (a
/// UMR's PD check, every data-path key check that names a PD) is one shift and one load.
#[derive(Debug, Default)]
pub struct NumberTable {
    /// Bit `n % 64` of word `n / 64`: number `n` is allocated.
    bits: Vec<u64>,
    count: usize,
}

impl NumberTable {
    /// True if `n` is allocated.
    #[inline]
    pub fn contains(&self, n: u32) -> bool {
        self.bits
            .get((n / 64) as usize)
            .is_some_and(|w| w & (1 << (n % 64)) != 0)
    }

    /// Number allocated.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True if none is allocated.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The lowest free number >= 1, if fewer than `limit` are in use.
    fn alloc(&mut self, limit: u64) -> Option<u32> {
        if self.count as u64 >= limit {
            return None;
        }
        let n = (1..=0xff_ffffu32).find(|&n| !self.contains(n))?;
        let w = (n / 64) as usize;
        if w >= self.bits.len() {
            self.bits.resize(w + 1, 0);
        }
        self.bits[w] |= 1 << (n % 64);
        self.count += 1;
        Some(n)
    }

    fn free(&mut self, n: u32) -> bool {
        if !self.contains(n) {
            return false;
        }
        self.bits[(n / 64) as usize] &= !(1 << (n % 64));
        self.count -= 1;
        true
    }
}

/// Protection domains.
pub type PdTable = NumberTable;
/// Transport domains.
pub type TdTable = NumberTable;

/// ALLOC_PD (0x800).
pub(crate) fn cmd_alloc_pd(
    caps: &Caps,
    objects: &mut Objects,
    _input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let limit = 1u64 << caps.general(cmd_hca_cap::LOG_MAX_PD);
    let Some(pd) = objects.pds.alloc(limit) else {
        return fail(cmd_status::LIM_ERR, syndrome::PD_EXHAUSTED);
    };
    put(out, alloc_pd_out::PD, pd);
    Ok(())
}

/// DEALLOC_PD (0x801).
pub(crate) fn cmd_dealloc_pd(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    let pd = get(input, dealloc_pd_in::PD);
    if !objects.pds.contains(pd) {
        return fail(cmd_status::BAD_RES_ERR, syndrome::PD_UNKNOWN);
    }
    // Refused while named by an mkey (`mkc.pd`), a QP (`qpc.pd`) or an Ethernet work queue
    // (`wq.pd`): see `control::syndrome`.
    if objects.mkeys.uses_pd(pd) {
        return fail(cmd_status::RES_BUSY, syndrome::PD_BUSY_MKEY);
    }
    if objects.qps.uses_pd(pd) {
        return fail(cmd_status::RES_BUSY, syndrome::PD_BUSY_QP);
    }
    if objects.sqs.uses_pd(pd) || objects.rqs.uses_pd(pd) {
        return fail(cmd_status::RES_BUSY, syndrome::PD_BUSY_WQ);
    }
    objects.pds.free(pd);
    Ok(())
}

/// ALLOC_TRANSPORT_DOMAIN (0x816).
pub(crate) fn cmd_alloc_td(
    caps: &Caps,
    objects: &mut Objects,
    _input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let limit = 1u64 << caps.general(cmd_hca_cap::LOG_MAX_TRANSPORT_DOMAIN);
    let Some(td) = objects.tds.alloc(limit) else {
        return fail(cmd_status::LIM_ERR, syndrome::TD_EXHAUSTED);
    };
    put(out, alloc_transport_domain_out::TRANSPORT_DOMAIN, td);
    Ok(())
}

/// DEALLOC_TRANSPORT_DOMAIN (0x817): refused while a TIS or TIR names the transport domain.
pub(crate) fn cmd_dealloc_td(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    let td = get(input, dealloc_transport_domain_in::TRANSPORT_DOMAIN);
    if !objects.tds.contains(td) {
        return fail(cmd_status::BAD_RES_ERR, syndrome::TD_UNKNOWN);
    }
    if objects.tises.uses_td(td) {
        return fail(cmd_status::RES_BUSY, syndrome::TD_BUSY_TIS);
    }
    if objects.tirs.uses_td(td) {
        return fail(cmd_status::RES_BUSY, syndrome::TD_BUSY_TIR);
    }
    objects.tds.free(td);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::NumberTable;

    /// Numbers are handed out lowest free first from 1, up to the limit; a freed number is
    /// free again (and only once), and numbers past the bitmap's words are not there.
    #[test]
    fn number_table_lowest_free_first_and_free() {
        let mut t = NumberTable::default();
        assert!(!t.contains(0) && !t.contains(1) && !t.contains(1 << 23));
        let got: Vec<u32> = (0..130).map(|_| t.alloc(200).expect("room")).collect();
        assert_eq!(got, (1..=130).collect::<Vec<_>>());
        assert_eq!(t.len(), 130);
        assert!(t.contains(64) && t.contains(130) && !t.contains(131) && !t.contains(0));
        assert!(t.free(64));
        assert!(!t.free(64), "freed once");
        assert!(!t.free(5000), "never allocated");
        assert!(!t.contains(64));
        assert_eq!(t.len(), 129);
        assert_eq!(t.alloc(200), Some(64));
        assert_eq!(t.alloc(131), Some(131));
        assert_eq!(t.alloc(131), None, "limit reached");
        for n in 1..=131 {
            assert!(t.free(n));
        }
        assert!(t.is_empty());
    }
}
