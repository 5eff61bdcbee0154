//! Transport interface send objects: CREATE_TIS / MODIFY_TIS / QUERY_TIS / DESTROY_TIS.
//!
//! A TIS names the transport domain and priority an SQ sends with (`sqc.tis_num_0`). Linux
//! creates one per traffic class with `prio = tc << 1` and the function's transport domain
//! (drivers/net/ethernet/mellanox/mlx5/core/en_common.c `mlx5e_create_tises` /
//! `mlx5e_create_tis`); `lag_tx_port_affinity` and `strict_lag_tx_port_affinity` only with
//! LAG, `tls_en` and `pd` only for kTLS, `underlay_qpn` only for IPoIB.
//!
//! The model: the transport domain must exist (and cannot be released while a TIS names it,
//! [`crate::objects::pd`]); LAG, TLS and IPoIB fields are refused (the device has one port and
//! advertises neither TLS nor IPoIB offloads). DESTROY_TIS is refused while an SQ names the TIS
//! (RES_BUSY, model choice as every release of an object another names:
//! [`crate::control::syndrome`]). MODIFY_TIS changes `prio` (bitmask bit `prio`); the LAG bits
//! are refused.

use std::collections::BTreeMap;

use mlx5_prm::{
    cmd_hca_cap, cmd_status, create_tis_in, create_tis_out, destroy_tis_in, modify_tis_bitmask,
    modify_tis_in, query_tis_in, query_tis_out, tisc,
};

use crate::control::caps::Caps;
use crate::control::result::{bad_param, err, get, only_bit, CmdResult};
use crate::objects::Objects;

/// Syndromes of the TIS commands (range 0x5210_xxxx, see [`crate::control::syndrome`]).
pub mod syndrome {
    /// `transport_domain` names no transport domain.
    pub const BAD_TD: u32 = 0x5210_0001;
    /// LAG port affinity, TLS, `pd` or `underlay_qpn` set (not modelled).
    pub const UNSUPPORTED_FIELD: u32 = 0x5210_0002;
    /// `1 << log_max_tis` TISes exist.
    pub const TOO_MANY: u32 = 0x5210_0003;
    /// The TISN names no TIS.
    pub const UNKNOWN: u32 = 0x5210_0004;
    /// DESTROY_TIS while an SQ sends through the TIS.
    pub const BUSY: u32 = 0x5210_0005;
    /// MODIFY_TIS bitmask selects a field that cannot be modified here (LAG affinity).
    pub const BAD_BITMASK: u32 = 0x5210_0006;
}

/// One TIS.
#[derive(Debug, Clone)]
pub struct Tis {
    /// Transport domain.
    pub td: u32,
    /// The context as created / modified (QUERY_TIS).
    ctx: [u8; tisc::BYTES],
}

/// The TIS table, by TISN.
#[derive(Debug, Default)]
pub struct TisTable {
    tises: BTreeMap<u32, Tis>,
}

impl TisTable {
    /// Whether TIS `tisn` exists.
    pub fn contains(&self, tisn: u32) -> bool {
        self.tises.contains_key(&tisn)
    }
    /// Number of TISes.
    pub fn len(&self) -> usize {
        self.tises.len()
    }
    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.tises.is_empty()
    }
    /// Whether some TIS names transport domain `td` (DEALLOC_TRANSPORT_DOMAIN is busy).
    pub fn uses_td(&self, td: u32) -> bool {
        self.tises.values().any(|t| t.td == td)
    }
    /// The TIS `tisn`.
    pub fn get(&self, tisn: u32) -> Option<&Tis> {
        self.tises.get(&tisn)
    }
}

/// Fields of `tisc` the model refuses when set.
const UNSUPPORTED: &[mlx5_prm::Field] = &[
    tisc::STRICT_LAG_TX_PORT_AFFINITY,
    tisc::TLS_EN,
    tisc::LAG_TX_PORT_AFFINITY,
    tisc::UNDERLAY_QPN,
    tisc::PD,
];

/// CREATE_TIS (0x912).
pub(crate) fn cmd_create_tis(
    caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let ctx = &input[create_tis_in::CTX.byte_offset()..][..tisc::BYTES];
    if UNSUPPORTED.iter().any(|&f| get(ctx, f) != 0) {
        return Err(bad_param(syndrome::UNSUPPORTED_FIELD));
    }
    let td = get(ctx, tisc::TRANSPORT_DOMAIN);
    if !objects.tds.contains(td) {
        return Err(err(cmd_status::BAD_RES_ERR, syndrome::BAD_TD));
    }
    let limit = 1u64 << caps.general(cmd_hca_cap::LOG_MAX_TIS);
    if objects.tises.len() as u64 >= limit {
        return Err(err(cmd_status::LIM_ERR, syndrome::TOO_MANY));
    }
    let tisn = (1..=0xff_ffffu32)
        .find(|n| !objects.tises.contains(*n))
        .ok_or(err(cmd_status::LIM_ERR, syndrome::TOO_MANY))?;
    let mut saved = [0u8; tisc::BYTES];
    saved.copy_from_slice(ctx);
    objects.tises.tises.insert(tisn, Tis { td, ctx: saved });
    let _ = create_tis_out::TISN.set(out, tisn);
    Ok(())
}

/// MODIFY_TIS (0x913): `prio` only.
pub(crate) fn cmd_modify_tis(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    let tisn = get(input, modify_tis_in::TISN);
    let bitmask = &input[modify_tis_in::BITMASK.byte_offset()..][..modify_tis_bitmask::BYTES];
    let t = objects
        .tises
        .tises
        .get_mut(&tisn)
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN))?;
    let prio =
        only_bit(bitmask, modify_tis_bitmask::PRIO).ok_or(bad_param(syndrome::BAD_BITMASK))?;
    if prio {
        let ctx = &input[modify_tis_in::CTX.byte_offset()..][..tisc::BYTES];
        let _ = tisc::PRIO.set(&mut t.ctx, get(ctx, tisc::PRIO));
    }
    Ok(())
}

/// QUERY_TIS (0x915).
pub(crate) fn cmd_query_tis(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let t = objects
        .tises
        .get(get(input, query_tis_in::TISN))
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN))?;
    let _ = query_tis_out::TIS_CONTEXT.write_bytes(out, &t.ctx);
    Ok(())
}

/// DESTROY_TIS (0x914).
pub(crate) fn cmd_destroy_tis(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    let tisn = get(input, destroy_tis_in::TISN);
    if !objects.tises.contains(tisn) {
        return Err(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN));
    }
    if objects.sqs.uses_tis(tisn) {
        return Err(err(cmd_status::RES_BUSY, syndrome::BUSY));
    }
    objects.tises.tises.remove(&tisn);
    Ok(())
}
