//! Ethernet send queues: CREATE_SQ / MODIFY_SQ / QUERY_SQ / DESTROY_SQ.
//!
//! What Linux sends (drivers/net/ethernet/mellanox/mlx5/core/en_main.c `mlx5e_create_sq`,
//! `mlx5e_modify_sq`, `mlx5e_create_sq_rdy`): a `sqc` in RST with `tis_lst_sz` 1 and
//! `tis_num_0`, `cqn`, `flush_in_error_en` 1, `min_wqe_inline_mode` only when the device
//! reports `wqe_inline_mode` VPORT_CONTEXT, and the cyclic `wq` ([`crate::objects::wq`]); then
//! MODIFY_SQ RST→RDY. Error recovery (en/reporter_tx.c) moves an SQ in ERR to RST and back to
//! RDY.
//!
//! The model:
//! - SQNs come from the QPN space (`Objects::alloc_queue_number`): the
//!   doorbell names the queue by the `qpn` of its ctrl segment, so an SQN is never a QPN.
//! - Refused: hairpin, `reg_umr`, `allow_swp`, `allow_multi_pkt_send_wqe`, `rlky`,
//!   `cd_master`, `fre` (none advertised), rate limits and QoS groups, timestamp CQEs to
//!   another CQ, a real-time timestamp format (`sq_ts_format` is free-running only), a TIS
//!   list other than one TIS.
//! - States (`MLX5_SQC_STATE_*`, Linux mlx5_ifc.h): RST→RDY, RDY→RDY, RDY→ERR, RDY→RST,
//!   ERR→RST; `sq_state` must be the current state (else BAD_RES_STATE). `modify_bitmask`
//!   (rate limit, QoS group) is refused: neither is advertised. The move to RST restarts the
//!   WQE counter at 0 (the counter Linux resets with `mlx5e_reset_txqsq_cc_pc`).
//! - The SQ is read on a doorbell only: the move to RDY runs nothing. After an error Linux
//!   resets its producer counter to 0 without writing the doorbell record
//!   (en/reporter_tx.c `mlx5e_tx_reporter_err_cqe_recover`), so a device that read the
//!   record on RDY would send the old WQEs again.
//! - The data path is [`crate::datapath::eth::tx`].

use std::collections::BTreeMap;

use mlx5_prm::sqc_state as state;
use mlx5_prm::{
    cmd_hca_cap, cmd_status, create_sq_in, create_sq_out, destroy_sq_in, inline_mode, modify_sq_in,
    query_sq_in, query_sq_out, sqc, Field,
};

use crate::control::caps::Caps;
use crate::control::result::{bad_param, err, get, CmdResult};
use crate::objects::wq::{self, Wq, WqKind};
use crate::objects::Objects;

/// `MLX5_TIMESTAMP_FORMAT_FREE_RUNNING` / `_DEFAULT` (Linux mlx5_ifc.h): the formats of a
/// device whose `sq_ts_format` / `rq_ts_format` is free-running only.
pub const TS_FORMATS: [u32; 2] = [0x0, 0x1];

/// Syndromes of the SQ commands (range 0x5211_xxxx, see [`crate::control::syndrome`]).
pub mod syndrome {
    /// `state` is not RST at creation.
    pub const NOT_RST: u32 = 0x5211_0001;
    /// `cqn` names no CQ.
    pub const BAD_CQN: u32 = 0x5211_0002;
    /// `tis_lst_sz` is not 1.
    pub const TIS_LIST: u32 = 0x5211_0003;
    /// `tis_num_0` names no TIS.
    pub const BAD_TIS: u32 = 0x5211_0004;
    /// A field the model does not implement is set (hairpin, reg_umr, swp, multi-packet WQE,
    /// rlky, cd_master, fre, rate limit, QoS group, timestamp CQN).
    pub const UNSUPPORTED_FIELD: u32 = 0x5211_0005;
    /// `min_wqe_inline_mode` above TCP_UDP (3).
    pub const INLINE_MODE: u32 = 0x5211_0006;
    /// `ts_format` not free-running or default.
    pub const TS_FORMAT: u32 = 0x5211_0007;
    /// `1 << log_max_sq` SQs exist.
    pub const TOO_MANY: u32 = 0x5211_0008;
    /// The SQN names no SQ.
    pub const UNKNOWN: u32 = 0x5211_0009;
    /// MODIFY_SQ: `sq_state` is not the SQ's state.
    pub const STATE_MISMATCH: u32 = 0x5211_000a;
    /// MODIFY_SQ: the transition is not one an SQ makes.
    pub const BAD_TRANSITION: u32 = 0x5211_000b;
    /// MODIFY_SQ: `modify_bitmask` set.
    pub const BAD_BITMASK: u32 = 0x5211_000c;
}

/// One send queue.
#[derive(Debug)]
pub struct Sq {
    /// SQ number.
    pub sqn: u32,
    /// `MLX5_SQC_STATE_*` value ([`mlx5_prm::sqc_state`]).
    pub state: u8,
    /// Completion queue.
    pub cqn: u32,
    /// The TIS it sends through.
    pub tisn: u32,
    pub(crate) user_index: u32,
    /// `flush_in_error_en`: WQEs posted while in ERR complete with WR_FLUSH_ERR.
    pub(crate) flush_in_error: bool,
    /// `min_wqe_inline_mode` ([`mlx5_prm::inline_mode`]): the headers every WQE must inline.
    pub(crate) min_inline: u8,
    pub(crate) wq: Wq,
    /// WQEBB counter of the next WQE to execute.
    pub(crate) next: u16,
    /// The context as created (QUERY_SQ).
    ctx: Vec<u8>,
}

/// The SQ table, by SQN.
#[derive(Debug, Default)]
pub struct SqTable {
    sqs: BTreeMap<u32, Sq>,
}

impl SqTable {
    /// Whether SQ `sqn` exists.
    pub fn contains(&self, sqn: u32) -> bool {
        self.sqs.contains_key(&sqn)
    }
    /// The SQ `sqn`.
    pub fn get(&self, sqn: u32) -> Option<&Sq> {
        self.sqs.get(&sqn)
    }
    /// The SQ `sqn`, mutably.
    pub fn get_mut(&mut self, sqn: u32) -> Option<&mut Sq> {
        self.sqs.get_mut(&sqn)
    }
    /// Number of SQs.
    pub fn len(&self) -> usize {
        self.sqs.len()
    }
    /// Every SQ, by number.
    pub fn iter(&self) -> impl Iterator<Item = &Sq> {
        self.sqs.values()
    }
    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.sqs.is_empty()
    }
    /// Whether some SQ sends through TIS `tisn` (DESTROY_TIS is busy).
    pub fn uses_tis(&self, tisn: u32) -> bool {
        self.sqs.values().any(|s| s.tisn == tisn)
    }
    /// Whether some SQ's WQEs belong to PD `pd` (DEALLOC_PD is busy).
    pub fn uses_pd(&self, pd: u32) -> bool {
        self.sqs.values().any(|s| s.wq.pd == pd)
    }
    /// Whether some SQ rings through UAR `uar` (DEALLOC_UAR is busy).
    pub fn uses_uar(&self, uar: u32) -> bool {
        self.sqs.values().any(|s| s.wq.uar == uar)
    }
}

/// Fields of `sqc` the model refuses when set.
const UNSUPPORTED: &[Field] = &[
    sqc::RLKY,
    sqc::CD_MASTER,
    sqc::FRE,
    sqc::ALLOW_MULTI_PKT_SEND_WQE,
    sqc::REG_UMR,
    sqc::ALLOW_SWP,
    sqc::HAIRPIN,
    sqc::HAIRPIN_PEER_RQ,
    sqc::HAIRPIN_PEER_VHCA,
    sqc::TS_CQE_TO_DEST_CQN,
    sqc::PACKET_PACING_RATE_LIMIT_INDEX,
    sqc::QOS_QUEUE_GROUP_ID,
];

/// CREATE_SQ (0x904): an SQ in RST.
pub(crate) fn cmd_create_sq(
    caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let ctx = &input[create_sq_in::CTX.byte_offset()..create_sq_in::BYTES];
    if UNSUPPORTED.iter().any(|&f| get(ctx, f) != 0) {
        return Err(bad_param(syndrome::UNSUPPORTED_FIELD));
    }
    if get(ctx, sqc::STATE) != state::RST as u32 {
        return Err(bad_param(syndrome::NOT_RST));
    }
    let min_inline = get(ctx, sqc::MIN_WQE_INLINE_MODE);
    if min_inline > inline_mode::TCP_UDP as u32 {
        return Err(bad_param(syndrome::INLINE_MODE));
    }
    if !TS_FORMATS.contains(&get(ctx, sqc::TS_FORMAT)) {
        return Err(bad_param(syndrome::TS_FORMAT));
    }
    let cqn = get(ctx, sqc::CQN);
    if !objects.cqs.contains(cqn) {
        return Err(err(cmd_status::BAD_RES_ERR, syndrome::BAD_CQN));
    }
    // One TIS per SQ (`log_max_tis_per_sq` is 0).
    if get(ctx, sqc::TIS_LST_SZ) != 1 {
        return Err(bad_param(syndrome::TIS_LIST));
    }
    let tisn = get(ctx, sqc::TIS_NUM_0);
    if !objects.tises.contains(tisn) {
        return Err(err(cmd_status::BAD_RES_ERR, syndrome::BAD_TIS));
    }
    let wq_ctx = &ctx[sqc::WQ.byte_offset()..];
    let wq = wq::create(
        caps,
        objects,
        wq_ctx,
        &input[create_sq_in::BYTES..],
        WqKind::Send,
    )?;
    let limit = 1u64 << caps.general(cmd_hca_cap::LOG_MAX_SQ);
    if objects.sqs.len() as u64 >= limit {
        return Err(err(cmd_status::NO_RES_ERR, syndrome::TOO_MANY));
    }
    let sqn = objects.alloc_queue_number();
    objects.cqs.attach(cqn);
    objects.sqs.sqs.insert(
        sqn,
        Sq {
            sqn,
            state: state::RST,
            cqn,
            tisn,
            user_index: get(ctx, sqc::USER_INDEX),
            flush_in_error: get(ctx, sqc::FLUSH_IN_ERROR_EN) != 0,
            min_inline: min_inline as u8,
            wq,
            next: 0,
            ctx: ctx.to_vec(),
        },
    );
    let _ = create_sq_out::SQN.set(out, sqn);
    Ok(())
}

/// Whether an SQ or RQ moves from `cur` to `next` (the SQ and RQ states have the same
/// encodings, `MLX5_SQC_STATE_*` / `MLX5_RQC_STATE_*`).
pub(crate) fn legal_transition(cur: u8, next: u8) -> bool {
    use state::*;
    matches!(
        (cur, next),
        (RST, RDY) | (RDY, RDY) | (RDY, ERR) | (RDY, RST) | (ERR, RST)
    )
}

/// MODIFY_SQ (0x905).
pub(crate) fn cmd_modify_sq(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    let sqn = get(input, modify_sq_in::SQN);
    let ctx = &input[modify_sq_in::CTX.byte_offset()..];
    let sq = objects
        .sqs
        .get_mut(sqn)
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN))?;
    if get(input, modify_sq_in::SQ_STATE) != sq.state as u32 {
        return Err(err(cmd_status::BAD_RES_STATE_ERR, syndrome::STATE_MISMATCH));
    }
    let next = get(ctx, sqc::STATE) as u8;
    if !legal_transition(sq.state, next) {
        return Err(err(cmd_status::BAD_RES_STATE_ERR, syndrome::BAD_TRANSITION));
    }
    if modify_sq_in::MODIFY_BITMASK.get64(input).unwrap_or(0) != 0 {
        return Err(bad_param(syndrome::BAD_BITMASK));
    }
    if next == state::RST {
        sq.next = 0;
    }
    sq.state = next;
    Ok(())
}

/// QUERY_SQ (0x907): the context with the current state and WQE counter.
pub(crate) fn cmd_query_sq(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let sq = objects
        .sqs
        .get(get(input, query_sq_in::SQN))
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN))?;
    sq.wq.query_into(
        &sq.ctx,
        (sqc::STATE, sq.state),
        (sqc::WQ.byte_offset(), sq.next.into()),
        &mut out[query_sq_out::SQ_CONTEXT.byte_offset()..],
    );
    Ok(())
}

/// DESTROY_SQ (0x906): in any state; WQEs not executed are dropped without completions.
pub(crate) fn cmd_destroy_sq(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    let sq = objects
        .sqs
        .sqs
        .remove(&get(input, destroy_sq_in::SQN))
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN))?;
    objects.cqs.detach(sq.cqn);
    Ok(())
}
