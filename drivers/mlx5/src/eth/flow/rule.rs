//! Flow table entries: SET_FLOW_TABLE_ENTRY / DELETE_FLOW_TABLE_ENTRY (Linux core/fs_cmd.c
//! `mlx5_cmd_set_fte`, `mlx5_cmd_delete_fte`).

use mlx5_prm::{
    delete_fte_in, delete_fte_out, dest_format_struct, flow_context, fte_match_param,
    fte_match_set_lyr_2_4, opcode, set_fte_in, set_fte_out,
};

use crate::cmd::CmdBuf;
use crate::context::CtxInner;
use crate::error::Result;
use crate::hal::Hal;

use super::{dmac_field, flow_action, flow_dest_type, TABLE_TYPE};

/// SET_FLOW_TABLE_ENTRY at `index` of table `table`, in group `group`: frames to `dmac` go to
/// TIR `tirn` (fs_cmd.c `mlx5_cmd_set_fte` with op_mod 0, a new entry: `flow_context.group_id`,
/// `action` FWD_DEST, `match_value.outer_headers.dmac_47_16` as en_fs.c
/// `mlx5e_add_l2_flow_rule` sets it for MLX5E_FULLMATCH, one destination of type TIR; the
/// destination list follows the flow context).
pub(super) fn set_dmac_to_tir<H: Hal>(
    ctx: &CtxInner<H>,
    table: u32,
    group: u32,
    index: u32,
    dmac: [u8; 6],
    tirn: u32,
) -> Result<()> {
    let mut c = CmdBuf::new(
        opcode::SET_FLOW_TABLE_ENTRY,
        0,
        set_fte_in::BYTES + dest_format_struct::BYTES,
    );
    let fc = |f: mlx5_prm::Field| f.within(set_fte_in::FLOW_CONTEXT);
    let dmac_f = dmac_field(
        fte_match_param::OUTER_HEADERS
            .within(flow_context::MATCH_VALUE)
            .within(set_fte_in::FLOW_CONTEXT),
        fte_match_set_lyr_2_4::DMAC_47_16,
    );
    let d = |f: mlx5_prm::Field| f.within(fc(flow_context::DESTINATION.elem(0)));
    c.set(set_fte_in::TABLE_TYPE, TABLE_TYPE)
        .set(set_fte_in::TABLE_ID, table)
        .set(set_fte_in::FLOW_INDEX, index)
        .set(fc(flow_context::GROUP_ID), group)
        .set(fc(flow_context::ACTION), flow_action::FWD_DEST)
        .set(fc(flow_context::DESTINATION_LIST_SIZE), 1)
        .bytes(dmac_f, &dmac)
        .set(d(dest_format_struct::DESTINATION_TYPE), flow_dest_type::TIR)
        .set(d(dest_format_struct::DESTINATION_ID), tirn);
    let mut out = [0u8; set_fte_out::BYTES];
    ctx.exec(&c, &mut out)
}

/// DELETE_FLOW_TABLE_ENTRY (fs_cmd.c `mlx5_cmd_delete_fte`).
pub(super) fn delete<H: Hal>(ctx: &CtxInner<H>, table: u32, index: u32) -> Result<()> {
    let mut c = CmdBuf::new(opcode::DELETE_FLOW_TABLE_ENTRY, 0, delete_fte_in::BYTES);
    c.set(delete_fte_in::TABLE_TYPE, TABLE_TYPE)
        .set(delete_fte_in::TABLE_ID, table)
        .set(delete_fte_in::FLOW_INDEX, index);
    let mut out = [0u8; delete_fte_out::BYTES];
    ctx.exec(&c, &mut out)
}
