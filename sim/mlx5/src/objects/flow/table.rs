//! Flow tables: CREATE_FLOW_TABLE and DESTROY_FLOW_TABLE (NIC_RX), as Linux
//! drivers/net/ethernet/mellanox/mlx5/core/fs_cmd.c `mlx5_cmd_create_flow_table` /
//! `mlx5_cmd_destroy_flow_table` issue them.
//!
//! A table has a level (a rule or a miss may only go on to a table of a greater level, so
//! a lookup never loops: Linux fs_core.c `mlx5_create_flow_table` numbers levels down the
//! namespace tree, fs_cmd.c `mlx5_cmd_set_fte` forwards to deeper tables unless
//! `ignore_flow_level`), `2^log_size` entry slots and a miss action: the table type's default
//! (for NIC_RX: the frame is dropped, and counted as `nic_receive_steering_discard`) or
//! `FWD` to `table_miss_id`.

use std::collections::BTreeMap;

use super::state::{check_header, FlowSteering, FlowTable};
use crate::control::caps::{self, Caps};
use crate::control::result::{fail, get, put, unset, CmdResult};
use crate::control::syndrome;
use crate::objects::Objects;
use mlx5_prm::{
    cmd_status, create_flow_table_in, create_flow_table_out, destroy_flow_table_in,
    flow_table_context, flow_table_miss_action, Field,
};

/// `flow_table_context` field `f` of CREATE_FLOW_TABLE's input.
fn ctx(input: &[u8], f: Field) -> u32 {
    get(input, f.within(create_flow_table_in::FLOW_TABLE_CONTEXT))
}

/// The miss table named by CREATE_FLOW_TABLE, checked: it exists and is deeper than `level`.
fn miss_table(steering: &FlowSteering, input: &[u8], level: u32) -> Result<Option<u32>, ()> {
    match ctx(input, flow_table_context::TABLE_MISS_ACTION) as u8 {
        flow_table_miss_action::DEF => Ok(None),
        flow_table_miss_action::FWD => Ok(Some(ctx(input, flow_table_context::TABLE_MISS_ID))),
        _ => Err(()),
    }
    .and_then(|m| match m {
        Some(id) if steering.tables.get(&id).is_none_or(|t| t.level <= level) => Err(()),
        m => Ok(m),
    })
}

/// CREATE_FLOW_TABLE (0x930).
pub(crate) fn cmd_create_flow_table(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    use create_flow_table_in as i;
    check_header!(input, i)?;
    // Packet reformat, decap, software-owned and termination tables: the caps advertise none.
    let c = |f: Field| f.within(i::FLOW_TABLE_CONTEXT);
    unset(
        input,
        &[
            c(flow_table_context::REFORMAT_EN),
            c(flow_table_context::DECAP_EN),
            c(flow_table_context::SW_OWNER),
            c(flow_table_context::TERMINATION_TABLE),
        ],
        syndrome::FT_UNSUPPORTED,
    )?;
    let level = ctx(input, flow_table_context::LEVEL);
    if level > caps::FT_MAX_LEVEL {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::FT_LEVEL);
    }
    let log_size = ctx(input, flow_table_context::LOG_SIZE);
    if log_size > caps::FT_LOG_MAX_SIZE {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::FT_LOG_SIZE);
    }
    let steering = &mut objects.flow;
    let Ok(miss) = miss_table(steering, input, level) else {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::FT_MISS);
    };
    if steering.tables.len() as u64 >= 1u64 << caps::FT_LOG_MAX_NUM {
        return fail(cmd_status::LIM_ERR, syndrome::FT_EXHAUSTED);
    }
    let tables = &steering.tables;
    let Some(id) = FlowSteering::next_id(&mut steering.last_table, |n| tables.contains_key(&n))
    else {
        return fail(cmd_status::LIM_ERR, syndrome::FT_EXHAUSTED);
    };
    steering.tables.insert(
        id,
        FlowTable {
            level,
            log_size,
            miss,
            groups: BTreeMap::new(),
            ftes: BTreeMap::new(),
        },
    );
    put(out, create_flow_table_out::TABLE_ID, id);
    Ok(())
}

/// DESTROY_FLOW_TABLE (0x931): refused while the table has a group or another table names
/// it (see the module documentation of [`super`]); the root may be destroyed and the NIC_RX
/// root is unset then.
pub(crate) fn cmd_destroy_flow_table(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    use destroy_flow_table_in as i;
    check_header!(input, i)?;
    let steering = &mut objects.flow;
    let id = get(input, i::TABLE_ID);
    let Some(t) = steering.tables.get(&id) else {
        return fail(cmd_status::BAD_RES_ERR, syndrome::FT_UNKNOWN);
    };
    if !t.groups.is_empty() {
        return fail(cmd_status::RES_BUSY, syndrome::FT_BUSY_GROUP);
    }
    if steering.references_table(id) {
        return fail(cmd_status::RES_BUSY, syndrome::FT_BUSY_REFERENCED);
    }
    steering.tables.remove(&id);
    if steering.root == Some(id) {
        steering.root = None;
    }
    Ok(())
}
