//! Transport interface receive objects: CREATE_TIR / MODIFY_TIR / QUERY_TIR / DESTROY_TIR.
//!
//! A TIR is what a receive steering rule forwards to; it dispatches the frame to an RQ. Linux
//! builds one direct TIR per RQ with `disp_type` DIRECT, `rx_hash_fn` NONE, `inline_rqn` and the
//! transport domain (drivers/net/ethernet/mellanox/mlx5/core/en/tir.c
//! `mlx5e_tir_builder_build_inline`), and indirect ones over an RQ table for RSS
//! (`mlx5e_tir_builder_build_rqt`); MODIFY_TIR changes self-loopback blocking
//! (en_common.c `mlx5e_modify_tirs_lb`), the hash and LRO (en/tir.c).
//!
//! The model:
//! - Direct dispatch only: INDIRECT (RSS over an RQ table) is refused, as are a hash function,
//!   symmetric hashing, tunneled offloads, LRO / packet merge (`lro_cap` and `rss_ind_tbl_cap`
//!   are not advertised) and TLS. The hash key and field selectors are not read for a direct
//!   TIR.
//! - `inline_rqn` must name an RQ, which cannot be destroyed while the TIR names it; the
//!   transport domain must exist and cannot be released while the TIR names it.
//! - `self_lb_block` is kept and reported: the model never loops a frame the function sent
//!   back to its own receive queues, so every TIR behaves as if both bits were set.
//! - MODIFY_TIR: `self_lb_en` applies `self_lb_block`; `hash` and `packet_merge` are refused.

use std::collections::BTreeMap;

use mlx5_prm::{
    cmd_hca_cap, cmd_status, create_tir_in, create_tir_out, destroy_tir_in, modify_tir_bitmask,
    modify_tir_in, query_tir_in, query_tir_out, rx_hash_fn, tirc, tirc_disp_type, Field,
};

use crate::control::caps::Caps;
use crate::control::result::{bad_param, err, get, only_bit, CmdResult};
use crate::objects::Objects;

/// Syndromes of the TIR commands (range 0x5213_xxxx, see [`crate::control::syndrome`]).
pub mod syndrome {
    /// `disp_type` INDIRECT, or a hash function: RSS is not supported.
    pub const RSS_UNSUPPORTED: u32 = 0x5213_0001;
    /// LRO / packet merge, TLS, tunneled offloads or symmetric hashing set.
    pub const UNSUPPORTED_FIELD: u32 = 0x5213_0002;
    /// `inline_rqn` names no RQ.
    pub const BAD_RQN: u32 = 0x5213_0003;
    /// `transport_domain` names no transport domain.
    pub const BAD_TD: u32 = 0x5213_0004;
    /// `1 << log_max_tir` TIRs exist.
    pub const TOO_MANY: u32 = 0x5213_0005;
    /// The TIRN names no TIR.
    pub const UNKNOWN: u32 = 0x5213_0006;
    /// MODIFY_TIR: a bitmask bit other than `self_lb_en`.
    pub const BAD_BITMASK: u32 = 0x5213_0007;
}

/// One TIR.
#[derive(Debug, Clone)]
pub struct Tir {
    /// The RQ frames go to.
    pub rqn: u32,
    /// Transport domain.
    pub td: u32,
    /// The context as created and modified (QUERY_TIR).
    ctx: Vec<u8>,
}

/// The TIR table, by TIRN.
#[derive(Debug, Default)]
pub struct TirTable {
    tirs: BTreeMap<u32, Tir>,
}

impl TirTable {
    /// Whether TIR `tirn` exists.
    pub fn contains(&self, tirn: u32) -> bool {
        self.tirs.contains_key(&tirn)
    }
    /// The TIR `tirn`.
    pub fn get(&self, tirn: u32) -> Option<&Tir> {
        self.tirs.get(&tirn)
    }
    /// Number of TIRs.
    pub fn len(&self) -> usize {
        self.tirs.len()
    }
    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.tirs.is_empty()
    }
    /// Whether some TIR dispatches to RQ `rqn` (DESTROY_RQ is busy).
    pub fn uses_rq(&self, rqn: u32) -> bool {
        self.tirs.values().any(|t| t.rqn == rqn)
    }
    /// Whether some TIR names transport domain `td` (DEALLOC_TRANSPORT_DOMAIN is busy).
    pub fn uses_td(&self, td: u32) -> bool {
        self.tirs.values().any(|t| t.td == td)
    }
}

/// Fields of `tirc` the model refuses when set (besides the dispatch type and hash function).
const UNSUPPORTED: &[Field] = &[
    tirc::TLS_EN,
    tirc::LRO_TIMEOUT_PERIOD_USECS,
    tirc::PACKET_MERGE_MASK,
    tirc::LRO_MAX_IP_PAYLOAD_SIZE,
    tirc::RX_HASH_SYMMETRIC,
    tirc::TUNNELED_OFFLOAD_EN,
    tirc::INDIRECT_TABLE,
];

/// CREATE_TIR (0x900).
pub(crate) fn cmd_create_tir(
    caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let ctx = &input[create_tir_in::CTX.byte_offset()..][..tirc::BYTES];
    if get(ctx, tirc::DISP_TYPE) != tirc_disp_type::DIRECT as u32
        || get(ctx, tirc::RX_HASH_FN) != rx_hash_fn::NONE as u32
    {
        return Err(bad_param(syndrome::RSS_UNSUPPORTED));
    }
    if UNSUPPORTED.iter().any(|&f| get(ctx, f) != 0) {
        return Err(bad_param(syndrome::UNSUPPORTED_FIELD));
    }
    let rqn = get(ctx, tirc::INLINE_RQN);
    if !objects.rqs.contains(rqn) {
        return Err(err(cmd_status::BAD_RES_ERR, syndrome::BAD_RQN));
    }
    let td = get(ctx, tirc::TRANSPORT_DOMAIN);
    if !objects.tds.contains(td) {
        return Err(err(cmd_status::BAD_RES_ERR, syndrome::BAD_TD));
    }
    let limit = 1u64 << caps.general(cmd_hca_cap::LOG_MAX_TIR);
    if objects.tirs.len() as u64 >= limit {
        return Err(err(cmd_status::LIM_ERR, syndrome::TOO_MANY));
    }
    let tirn = (1..=0xff_ffffu32)
        .find(|n| !objects.tirs.contains(*n))
        .ok_or(err(cmd_status::LIM_ERR, syndrome::TOO_MANY))?;
    objects.tirs.tirs.insert(
        tirn,
        Tir {
            rqn,
            td,
            ctx: ctx.to_vec(),
        },
    );
    let _ = create_tir_out::TIRN.set(out, tirn);
    Ok(())
}

/// MODIFY_TIR (0x901): self-loopback blocking only.
pub(crate) fn cmd_modify_tir(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    let tirn = get(input, modify_tir_in::TIRN);
    let bitmask = &input[modify_tir_in::BITMASK.byte_offset()..][..modify_tir_bitmask::BYTES];
    let t = objects
        .tirs
        .tirs
        .get_mut(&tirn)
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN))?;
    let self_lb = only_bit(bitmask, modify_tir_bitmask::SELF_LB_EN)
        .ok_or(bad_param(syndrome::BAD_BITMASK))?;
    if self_lb {
        let ctx = &input[modify_tir_in::CTX.byte_offset()..][..tirc::BYTES];
        let _ = tirc::SELF_LB_BLOCK.set(&mut t.ctx, get(ctx, tirc::SELF_LB_BLOCK));
    }
    Ok(())
}

/// QUERY_TIR (0x903).
pub(crate) fn cmd_query_tir(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let t = objects
        .tirs
        .get(get(input, query_tir_in::TIRN))
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN))?;
    let _ = query_tir_out::TIR_CONTEXT.write_bytes(out, &t.ctx);
    Ok(())
}

/// DESTROY_TIR (0x902). Steering rules that forward to the TIR are the steering tables'
/// business ([`TirTable::contains`] answers whether a destination still exists).
pub(crate) fn cmd_destroy_tir(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    objects
        .tirs
        .tirs
        .remove(&get(input, destroy_tir_in::TIRN))
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN))?;
    Ok(())
}
