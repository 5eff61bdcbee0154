//! Protection domains (ALLOC_PD / DEALLOC_PD) and transport domains
//! (ALLOC_TRANSPORT_DOMAIN / DEALLOC_TRANSPORT_DOMAIN).
//!
//! Numbers are 24 bits (`alloc_pd_out.pd`, `alloc_transport_domain_out.transport_domain`);
//! at most `1 << log_max_pd` / `1 << log_max_transport_domain` exist at once (current caps).
//! Numbering starts at 1, so a driver that forgets to fill a pd/td field is caught.

use std::collections::BTreeSet;

use crate::cmd::CmdResult;
use crate::hca::{fail, get, put, syndrome, Hca};
use mlx5_prm::{
    alloc_pd_out, alloc_transport_domain_out, cmd_hca_cap, cmd_status, dealloc_pd_in,
    dealloc_transport_domain_in,
};

/// A table of small numbered objects with a count limit.
#[derive(Debug, Default)]
pub struct NumberTable {
    used: BTreeSet<u32>,
}

impl NumberTable {
    /// True if `n` is allocated.
    pub fn contains(&self, n: u32) -> bool {
        self.used.contains(&n)
    }

    /// Number allocated.
    pub fn len(&self) -> usize {
        self.used.len()
    }

    /// True if none is allocated.
    pub fn is_empty(&self) -> bool {
        self.used.is_empty()
    }

    /// The lowest free number >= 1, if fewer than `limit` are in use.
    fn alloc(&mut self, limit: u64) -> Option<u32> {
        if self.used.len() as u64 >= limit {
            return None;
        }
        let n = (1..=0xff_ffffu32).find(|n| !self.used.contains(n))?;
        self.used.insert(n);
        Some(n)
    }

    fn free(&mut self, n: u32) -> bool {
        self.used.remove(&n)
    }
}

/// Protection domains.
pub type PdTable = NumberTable;
/// Transport domains.
pub type TdTable = NumberTable;

/// ALLOC_PD (0x800).
pub(crate) fn cmd_alloc_pd(hca: &mut Hca, _input: &[u8], out: &mut [u8]) -> CmdResult {
    let limit = 1u64 << hca.cap(cmd_hca_cap::LOG_MAX_PD);
    let Some(pd) = hca.pds.alloc(limit) else {
        return fail(cmd_status::LIM_ERR, syndrome::PD_EXHAUSTED);
    };
    put(out, alloc_pd_out::PD, pd);
    Ok(())
}

/// DEALLOC_PD (0x801).
pub(crate) fn cmd_dealloc_pd(hca: &mut Hca, input: &[u8], _out: &mut [u8]) -> CmdResult {
    let pd = get(input, dealloc_pd_in::PD);
    if !hca.pds.contains(pd) {
        return fail(cmd_status::BAD_RES_ERR, syndrome::PD_UNKNOWN);
    }
    // Refused while named by an mkey (`mkc.pd`) or a QP (`qpc.pd`): see `hca::syndrome`.
    if hca.mkeys.uses_pd(pd) {
        return fail(cmd_status::RES_BUSY, syndrome::PD_BUSY_MKEY);
    }
    if hca.qps.uses_pd(pd) {
        return fail(cmd_status::RES_BUSY, syndrome::PD_BUSY_QP);
    }
    hca.pds.free(pd);
    Ok(())
}

/// ALLOC_TRANSPORT_DOMAIN (0x816).
pub(crate) fn cmd_alloc_td(hca: &mut Hca, _input: &[u8], out: &mut [u8]) -> CmdResult {
    let limit = 1u64 << hca.cap(cmd_hca_cap::LOG_MAX_TRANSPORT_DOMAIN);
    let Some(td) = hca.tds.alloc(limit) else {
        return fail(cmd_status::LIM_ERR, syndrome::TD_EXHAUSTED);
    };
    put(out, alloc_transport_domain_out::TRANSPORT_DOMAIN, td);
    Ok(())
}

/// DEALLOC_TRANSPORT_DOMAIN (0x817). Only TIS/TIR contexts name a transport domain and the
/// model has neither, so a known TD is never busy.
pub(crate) fn cmd_dealloc_td(hca: &mut Hca, input: &[u8], _out: &mut [u8]) -> CmdResult {
    if !hca
        .tds
        .free(get(input, dealloc_transport_domain_in::TRANSPORT_DOMAIN))
    {
        return fail(cmd_status::BAD_RES_ERR, syndrome::TD_UNKNOWN);
    }
    Ok(())
}
