//! Ethernet receive queues: CREATE_RQ / MODIFY_RQ / QUERY_RQ / DESTROY_RQ.
//!
//! What Linux sends (drivers/net/ethernet/mellanox/mlx5/core/en_main.c `mlx5e_create_rq`,
//! `mlx5e_modify_rq_state`, `mlx5e_modify_rq_vsd`, en/params.c `mlx5e_build_rq_param`): an
//! `rqc` in RST with `cqn`, `counter_set_id` (the netdev's Q counter), `vsd`, `scatter_fcs`,
//! `ts_format` and the `wq` ([`crate::objects::wq`]), CYCLIC for the non-striding RQ whose
//! WQEs are a list of data segments (`struct mlx5e_rx_wqe_cyc`, en.h), stride
//! `order_base_2(16 * segments)`; then MODIFY_RQ RST→RDY. `mlx5e_flush_rq` moves an RQ to RST
//! and back to RDY; `mlx5e_modify_rq_vsd` changes `vsd` on an RDY RQ.
//!
//! The model:
//! - RQNs come from the QPN space (`Objects::alloc_queue_number`).
//! - Refused: a shared RQ (`mem_rq_type` RMP), hairpin, `rlky`, `flush_in_error_en` (the
//!   model does not flush posted receive WQEs; Linux leaves it clear on its RQs), `delay_drop_en`,
//!   `scatter_fcs` (`rq_delay_drop` and `scatter_fcs` are not advertised), SHAMPO, a
//!   real-time timestamp format, a `counter_set_id` that names no Q counter set.
//! - `vsd` is kept and reported; the model strips no VLAN tag whatever it says (`vlan_cap` is
//!   not advertised).
//! - States and transitions as an SQ's (`objects::sq::legal_transition`); the move to
//!   RST restarts the WQE counter at 0 (Linux `mlx5e_rqwq_reset`). `modify_bitmask` bits
//!   (`MLX5_MODIFY_RQ_IN_MODIFY_BITMASK_*`, Linux mlx5_ifc.h): VSD and RQ_COUNTER_SET_ID are
//!   applied, the rest refused.
//! - DESTROY_RQ is refused while a TIR dispatches to the RQ (RES_BUSY, model choice as every
//!   release of an object another names, [`crate::control::syndrome`]).
//! - The data path is [`crate::datapath::eth::rx`].

use std::collections::BTreeMap;

use mlx5_prm::rqc_state as state;
use mlx5_prm::{
    cmd_hca_cap, cmd_status, create_rq_in, create_rq_out, destroy_rq_in, modify_rq_bitmask,
    modify_rq_in, query_rq_in, query_rq_out, rqc, rqc_mem_rq_type, Field,
};

use crate::control::caps::Caps;
use crate::control::result::{bad_param, err, get, CmdResult};
use crate::objects::sq::{legal_transition, TS_FORMATS};
use crate::objects::wq::{self, Wq, WqKind};
use crate::objects::Objects;

/// Syndromes of the RQ commands (range 0x5212_xxxx, see [`crate::control::syndrome`]).
pub mod syndrome {
    /// `state` is not RST at creation.
    pub const NOT_RST: u32 = 0x5212_0001;
    /// `cqn` names no CQ.
    pub const BAD_CQN: u32 = 0x5212_0002;
    /// `mem_rq_type` is not INLINE (shared RQs are not modelled).
    pub const MEM_RQ_TYPE: u32 = 0x5212_0003;
    /// A field the model does not implement is set (rlky, flush in error, delay drop, scatter
    /// FCS, hairpin, SHAMPO).
    pub const UNSUPPORTED_FIELD: u32 = 0x5212_0004;
    /// `ts_format` not free-running or default.
    pub const TS_FORMAT: u32 = 0x5212_0005;
    /// `counter_set_id` names no Q counter set.
    pub const BAD_COUNTER_SET: u32 = 0x5212_0006;
    /// `1 << log_max_rq` RQs exist.
    pub const TOO_MANY: u32 = 0x5212_0007;
    /// The RQN names no RQ.
    pub const UNKNOWN: u32 = 0x5212_0008;
    /// MODIFY_RQ: `rq_state` is not the RQ's state.
    pub const STATE_MISMATCH: u32 = 0x5212_0009;
    /// MODIFY_RQ: the transition is not one an RQ makes.
    pub const BAD_TRANSITION: u32 = 0x5212_000a;
    /// MODIFY_RQ: a `modify_bitmask` bit other than VSD and RQ_COUNTER_SET_ID.
    pub const BAD_BITMASK: u32 = 0x5212_000b;
    /// DESTROY_RQ while a TIR dispatches to the RQ.
    pub const BUSY: u32 = 0x5212_000c;
}

/// One receive queue.
#[derive(Debug)]
pub struct Rq {
    /// RQ number.
    pub rqn: u32,
    /// `MLX5_RQC_STATE_*` value ([`mlx5_prm::rqc_state`]).
    pub state: u8,
    /// Completion queue.
    pub cqn: u32,
    /// The Q counter set its drops count into besides the port's set 0 (0: none).
    pub counter_set: u8,
    pub(crate) user_index: u32,
    pub(crate) wq: Wq,
    /// WQEs consumed (the counter of the next WQE to fill).
    pub(crate) next: u16,
    /// The context as created and modified (QUERY_RQ).
    ctx: Vec<u8>,
}

/// The RQ table, by RQN.
#[derive(Debug, Default)]
pub struct RqTable {
    rqs: BTreeMap<u32, Rq>,
}

impl RqTable {
    /// Whether RQ `rqn` exists.
    pub fn contains(&self, rqn: u32) -> bool {
        self.rqs.contains_key(&rqn)
    }
    /// The RQ `rqn`.
    pub fn get(&self, rqn: u32) -> Option<&Rq> {
        self.rqs.get(&rqn)
    }
    /// The RQ `rqn`, mutably.
    pub fn get_mut(&mut self, rqn: u32) -> Option<&mut Rq> {
        self.rqs.get_mut(&rqn)
    }
    /// Number of RQs.
    pub fn len(&self) -> usize {
        self.rqs.len()
    }
    /// Every RQ, by number.
    pub fn iter(&self) -> impl Iterator<Item = &Rq> {
        self.rqs.values()
    }
    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.rqs.is_empty()
    }
    /// Whether some RQ's WQEs belong to PD `pd` (DEALLOC_PD is busy).
    pub fn uses_pd(&self, pd: u32) -> bool {
        self.rqs.values().any(|r| r.wq.pd == pd)
    }
    /// Whether some RQ counts into Q counter set `id` (DEALLOC_Q_COUNTER is busy).
    pub fn uses_counter_set(&self, id: u8) -> bool {
        id != 0 && self.rqs.values().any(|r| r.counter_set == id)
    }
}

/// Fields of `rqc` the model refuses when set.
const UNSUPPORTED: &[Field] = &[
    rqc::RLKY,
    rqc::FLUSH_IN_ERROR_EN,
    rqc::DELAY_DROP_EN,
    rqc::SCATTER_FCS,
    rqc::HAIRPIN,
    rqc::HAIRPIN_PEER_SQ,
    rqc::HAIRPIN_PEER_VHCA,
    rqc::SHAMPO_NO_MATCH_ALIGNMENT_GRANULARITY,
    rqc::SHAMPO_MATCH_CRITERIA_TYPE,
    rqc::RESERVATION_TIMEOUT,
];

/// CREATE_RQ (0x908): an RQ in RST.
pub(crate) fn cmd_create_rq(
    caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let ctx = &input[create_rq_in::CTX.byte_offset()..create_rq_in::BYTES];
    if get(ctx, rqc::MEM_RQ_TYPE) != rqc_mem_rq_type::MEMORY_RQ_INLINE as u32 {
        return Err(bad_param(syndrome::MEM_RQ_TYPE));
    }
    if UNSUPPORTED.iter().any(|&f| get(ctx, f) != 0) {
        return Err(bad_param(syndrome::UNSUPPORTED_FIELD));
    }
    if get(ctx, rqc::STATE) != state::RST as u32 {
        return Err(bad_param(syndrome::NOT_RST));
    }
    if !TS_FORMATS.contains(&get(ctx, rqc::TS_FORMAT)) {
        return Err(bad_param(syndrome::TS_FORMAT));
    }
    let cqn = get(ctx, rqc::CQN);
    if !objects.cqs.contains(cqn) {
        return Err(err(cmd_status::BAD_RES_ERR, syndrome::BAD_CQN));
    }
    let counter_set = get(ctx, rqc::COUNTER_SET_ID) as u8;
    if !objects.qcounters.exists(counter_set) {
        return Err(bad_param(syndrome::BAD_COUNTER_SET));
    }
    let wq_ctx = &ctx[rqc::WQ.byte_offset()..];
    let wq = wq::create(
        caps,
        objects,
        wq_ctx,
        &input[create_rq_in::BYTES..],
        WqKind::Receive,
    )?;
    let limit = 1u64 << caps.general(cmd_hca_cap::LOG_MAX_RQ);
    if objects.rqs.len() as u64 >= limit {
        return Err(err(cmd_status::NO_RES_ERR, syndrome::TOO_MANY));
    }
    let rqn = objects.alloc_queue_number();
    objects.cqs.attach(cqn);
    objects.rqs.rqs.insert(
        rqn,
        Rq {
            rqn,
            state: state::RST,
            cqn,
            counter_set,
            user_index: get(ctx, rqc::USER_INDEX),
            wq,
            next: 0,
            ctx: ctx.to_vec(),
        },
    );
    let _ = create_rq_out::RQN.set(out, rqn);
    Ok(())
}

/// MODIFY_RQ (0x909).
pub(crate) fn cmd_modify_rq(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    let rqn = get(input, modify_rq_in::RQN);
    let ctx = &input[modify_rq_in::CTX.byte_offset()..];
    let cur = objects
        .rqs
        .get(rqn)
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN))?
        .state;
    if get(input, modify_rq_in::RQ_STATE) != cur as u32 {
        return Err(err(cmd_status::BAD_RES_STATE_ERR, syndrome::STATE_MISMATCH));
    }
    let next = get(ctx, rqc::STATE) as u8;
    if !legal_transition(cur, next) {
        return Err(err(cmd_status::BAD_RES_STATE_ERR, syndrome::BAD_TRANSITION));
    }
    let bitmask = modify_rq_in::MODIFY_BITMASK.get64(input).unwrap_or(0);
    if bitmask & !(modify_rq_bitmask::VSD | modify_rq_bitmask::RQ_COUNTER_SET_ID) != 0 {
        return Err(bad_param(syndrome::BAD_BITMASK));
    }
    let counter_set = get(ctx, rqc::COUNTER_SET_ID) as u8;
    if bitmask & modify_rq_bitmask::RQ_COUNTER_SET_ID != 0 && !objects.qcounters.exists(counter_set)
    {
        return Err(bad_param(syndrome::BAD_COUNTER_SET));
    }
    let rq = objects
        .rqs
        .get_mut(rqn)
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN))?;
    if bitmask & modify_rq_bitmask::VSD != 0 {
        let _ = rqc::VSD.set(&mut rq.ctx, get(ctx, rqc::VSD));
    }
    if bitmask & modify_rq_bitmask::RQ_COUNTER_SET_ID != 0 {
        rq.counter_set = counter_set;
        let _ = rqc::COUNTER_SET_ID.set(&mut rq.ctx, counter_set as u32);
    }
    if next == state::RST {
        rq.next = 0;
    }
    rq.state = next;
    Ok(())
}

/// QUERY_RQ (0x90b): the context with the current state and WQE counter.
pub(crate) fn cmd_query_rq(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let rq = objects
        .rqs
        .get(get(input, query_rq_in::RQN))
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN))?;
    rq.wq.query_into(
        &rq.ctx,
        (rqc::STATE, rq.state),
        (rqc::WQ.byte_offset(), rq.next.into()),
        &mut out[query_rq_out::RQ_CONTEXT.byte_offset()..],
    );
    Ok(())
}

/// DESTROY_RQ (0x90a): in any state, unless a TIR dispatches to it.
pub(crate) fn cmd_destroy_rq(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    let rqn = get(input, destroy_rq_in::RQN);
    if !objects.rqs.contains(rqn) {
        return Err(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN));
    }
    if objects.tirs.uses_rq(rqn) {
        return Err(err(cmd_status::RES_BUSY, syndrome::BUSY));
    }
    if let Some(rq) = objects.rqs.rqs.remove(&rqn) {
        objects.cqs.detach(rq.cqn);
    }
    Ok(())
}
