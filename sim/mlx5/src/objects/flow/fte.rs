//! Flow table entries: SET_FLOW_TABLE_ENTRY and DELETE_FLOW_TABLE_ENTRY, as Linux
//! drivers/net/ethernet/mellanox/mlx5/core/fs_cmd.c `mlx5_cmd_set_fte` (create, op_mod 0;
//! update, op_mod 1 with `modify_enable_mask`) and `mlx5_cmd_delete_fte` issue them.
//!
//! An entry sits at one flow index of one group, holds its `match_value` (compared under the
//! group's mask) and one action: `FWD_DEST` to a list of TIRs (each gets the frame) or to one
//! flow table of a greater level, or `DROP`. Flow counters, packet reformat, header
//! modification, VLAN push, extended destinations and `ignore_flow_level` are not advertised
//! and refused.

use super::state::{check_header, Action, Dest, FlowTable, Fte, OUTER_BYTES};
use crate::control::caps::{self, Caps};
use crate::control::result::{err, fail, get, unset, CmdError, CmdResult};
use crate::control::syndrome;
use crate::objects::Objects;
use mlx5_prm::{
    cmd_status, delete_fte_in, dest_format_struct, flow_context, flow_context_action,
    flow_destination_type, fte_match_param, set_fte, set_fte_in, Field,
};

/// `flow_context` field `f` of SET_FLOW_TABLE_ENTRY's input.
fn fc(input: &[u8], f: Field) -> u32 {
    get(input, f.within(set_fte_in::FLOW_CONTEXT))
}

/// The destination list of the input, checked: TIRs that exist, or one flow table that
/// exists and is deeper than `table`.
fn dests(objects: &Objects, table: &FlowTable, input: &[u8]) -> Result<Vec<Dest>, CmdError> {
    let n = fc(input, flow_context::DESTINATION_LIST_SIZE) as usize;
    if n == 0 || n > 1 << caps::FT_LOG_MAX_DESTINATION {
        return Err(err(cmd_status::BAD_PARAM_ERR, syndrome::FTE_DEST_COUNT));
    }
    let at = flow_context::DESTINATION.byte_offset() + set_fte_in::FLOW_CONTEXT.byte_offset();
    let each = dest_format_struct::BYTES;
    let Some(list) = input.get(at..at + n * each) else {
        return Err(err(cmd_status::BAD_INP_LEN_ERR, syndrome::FTE_INLEN));
    };
    let mut out = Vec::with_capacity(n);
    for d in list.chunks_exact(each) {
        let id = get(d, dest_format_struct::DESTINATION_ID);
        // The second dword (reformat, e-switch owner, table type) names nothing advertised.
        if d[4..].iter().any(|&b| b != 0) {
            return Err(err(cmd_status::BAD_PARAM_ERR, syndrome::FTE_DEST_TYPE));
        }
        out.push(match get(d, dest_format_struct::DESTINATION_TYPE) as u8 {
            flow_destination_type::TIR if objects.tirs.contains(id) => Dest::Tir(id),
            flow_destination_type::TIR => {
                return Err(err(cmd_status::BAD_RES_ERR, syndrome::FTE_DEST_TIR))
            }
            flow_destination_type::FLOW_TABLE => match objects.flow.tables.get(&id) {
                None => return Err(err(cmd_status::BAD_RES_ERR, syndrome::FTE_DEST_TABLE)),
                Some(t) if t.level <= table.level => {
                    return Err(err(cmd_status::BAD_PARAM_ERR, syndrome::FTE_DEST_LEVEL))
                }
                Some(_) => Dest::Table(id),
            },
            _ => return Err(err(cmd_status::BAD_PARAM_ERR, syndrome::FTE_DEST_TYPE)),
        });
    }
    if n > 1 && out.iter().any(|d| matches!(d, Dest::Table(_))) {
        // Model choice: a table destination is the only one (replicating to TIRs and a table
        // at once is not modelled).
        return Err(err(cmd_status::BAD_PARAM_ERR, syndrome::FTE_DEST_TYPE));
    }
    Ok(out)
}

/// The action of the input, checked.
fn action(objects: &Objects, table: &FlowTable, input: &[u8]) -> Result<Action, CmdError> {
    match fc(input, flow_context::ACTION) as u16 {
        flow_context_action::FWD_DEST => Ok(Action::Forward(dests(objects, table, input)?)),
        flow_context_action::DROP if fc(input, flow_context::DESTINATION_LIST_SIZE) == 0 => {
            Ok(Action::Drop)
        }
        flow_context_action::DROP => Err(err(cmd_status::BAD_PARAM_ERR, syndrome::FTE_DEST_COUNT)),
        _ => Err(err(cmd_status::BAD_PARAM_ERR, syndrome::FTE_ACTION)),
    }
}

/// Fields of the input that name features the device does not advertise.
const UNSUPPORTED: [Field; 10] = [
    set_fte_in::IGNORE_FLOW_LEVEL,
    flow_context::PUSH_VLAN.within(set_fte_in::FLOW_CONTEXT),
    flow_context::EXTENDED_DESTINATION.within(set_fte_in::FLOW_CONTEXT),
    flow_context::UPLINK_HAIRPIN_EN.within(set_fte_in::FLOW_CONTEXT),
    flow_context::ENCRYPT_DECRYPT_TYPE.within(set_fte_in::FLOW_CONTEXT),
    flow_context::FLOW_COUNTER_LIST_SIZE.within(set_fte_in::FLOW_CONTEXT),
    flow_context::PACKET_REFORMAT_ID.within(set_fte_in::FLOW_CONTEXT),
    flow_context::MODIFY_HEADER_ID.within(set_fte_in::FLOW_CONTEXT),
    flow_context::PUSH_VLAN_2.within(set_fte_in::FLOW_CONTEXT),
    flow_context::ENCRYPT_DECRYPT_OBJ_ID.within(set_fte_in::FLOW_CONTEXT),
];

/// SET_FLOW_TABLE_ENTRY (0x936): op_mod 0 creates the entry at `flow_index`, op_mod 1
/// changes the action, flow tag or destination list of the one there (`modify_enable_mask`).
pub(crate) fn cmd_set_fte(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    use set_fte_in as i;
    check_header!(input, i)?;
    unset(input, &UNSUPPORTED, syndrome::FTE_UNSUPPORTED)?;
    let table_id = get(input, i::TABLE_ID);
    let index = get(input, i::FLOW_INDEX);
    let t = objects.flow.table(table_id)?;
    match get(input, i::OP_MOD) as u16 {
        set_fte::OP_MOD_CREATE => {
            let fte = new_fte(objects, t, index, input)?;
            objects.flow.table_mut(table_id)?.ftes.insert(index, fte);
            Ok(())
        }
        set_fte::OP_MOD_MODIFY => {
            let (action, tag) = modified(objects, t, index, input)?;
            let t = objects.flow.table_mut(table_id)?;
            if let Some(f) = t.ftes.get_mut(&index) {
                if let Some(a) = action {
                    f.action = a;
                }
                if let Some(tag) = tag {
                    f.flow_tag = tag;
                }
            }
            Ok(())
        }
        _ => fail(cmd_status::BAD_PARAM_ERR, syndrome::FTE_OP_MOD),
    }
}

/// The entry SET_FLOW_TABLE_ENTRY op_mod 0 creates at `index` of `table`, checked.
fn new_fte(
    objects: &Objects,
    table: &FlowTable,
    index: u32,
    input: &[u8],
) -> Result<Fte, CmdError> {
    if table.ftes.contains_key(&index) {
        return Err(err(cmd_status::BAD_PARAM_ERR, syndrome::FTE_EXISTS));
    }
    let group = fc(input, flow_context::GROUP_ID);
    let Some(g) = table.groups.get(&group) else {
        return Err(err(cmd_status::BAD_PARAM_ERR, syndrome::FTE_GROUP));
    };
    if !g.owns(index) {
        return Err(err(cmd_status::BAD_PARAM_ERR, syndrome::FTE_INDEX));
    }
    let at = fte_match_param::OUTER_HEADERS
        .within(flow_context::MATCH_VALUE)
        .within(set_fte_in::FLOW_CONTEXT)
        .byte_offset();
    let mut value = [0u8; OUTER_BYTES];
    for (k, v) in value.iter_mut().enumerate() {
        *v = input[at + k] & g.outer_mask[k];
    }
    Ok(Fte {
        group,
        value,
        action: action(objects, table, input)?,
        flow_tag: fc(input, flow_context::FLOW_TAG),
    })
}

/// What SET_FLOW_TABLE_ENTRY op_mod 1 changes in the entry at `index` of `table`: the
/// action (with the destination list: they are judged together, as the entry will be) and
/// the flow tag, as `modify_enable_mask` names them. The group and the match value stay.
fn modified(
    objects: &Objects,
    table: &FlowTable,
    index: u32,
    input: &[u8],
) -> Result<(Option<Action>, Option<u32>), CmdError> {
    use set_fte::modify_enable_mask as m;
    let mask = get(input, set_fte_in::MODIFY_ENABLE_MASK);
    let known = (1 << m::ACTION) | (1 << m::FLOW_TAG) | (1 << m::DESTINATION_LIST);
    if mask & !known != 0 {
        return Err(err(cmd_status::BAD_PARAM_ERR, syndrome::FTE_UNSUPPORTED));
    }
    let Some(old) = table.ftes.get(&index) else {
        return Err(err(cmd_status::BAD_RES_ERR, syndrome::FTE_UNKNOWN));
    };
    if fc(input, flow_context::GROUP_ID) != old.group {
        return Err(err(cmd_status::BAD_PARAM_ERR, syndrome::FTE_GROUP));
    }
    let action = if mask & ((1 << m::ACTION) | (1 << m::DESTINATION_LIST)) != 0 {
        Some(action(objects, table, input)?)
    } else {
        None
    };
    let tag = (mask & (1 << m::FLOW_TAG) != 0).then(|| fc(input, flow_context::FLOW_TAG));
    Ok((action, tag))
}

/// DELETE_FLOW_TABLE_ENTRY (0x938).
pub(crate) fn cmd_delete_fte(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    use delete_fte_in as i;
    check_header!(input, i)?;
    let t = objects.flow.table_mut(get(input, i::TABLE_ID))?;
    if t.ftes.remove(&get(input, i::FLOW_INDEX)).is_none() {
        return fail(cmd_status::BAD_RES_ERR, syndrome::FTE_UNKNOWN);
    }
    Ok(())
}
