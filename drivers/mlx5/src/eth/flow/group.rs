//! Flow groups: CREATE_FLOW_GROUP / DESTROY_FLOW_GROUP (Linux core/fs_cmd.c
//! `mlx5_cmd_create_flow_group`, `mlx5_cmd_destroy_flow_group`).

use mlx5_prm::{
    create_flow_group_in, create_flow_group_out, destroy_flow_group_in, destroy_flow_group_out,
    fte_match_param, fte_match_set_lyr_2_4, opcode,
};

use crate::cmd::{get, CmdBuf};
use crate::context::CtxInner;
use crate::error::Result;
use crate::hal::Hal;

use super::{dmac_field, MATCH_OUTER_HEADERS, TABLE_TYPE};

/// CREATE_FLOW_GROUP in table `table` over entries `first..=last`, matching the whole outer
/// destination MAC: Linux en_fs.c `mlx5e_create_l2_table_groups`, "Flow Group for full
/// match" (`match_criteria_enable` OUTER_HEADERS, `outer_headers.dmac_47_16` all ones).
/// Returns the group id.
pub(super) fn create_dmac<H: Hal>(
    ctx: &CtxInner<H>,
    table: u32,
    first: u32,
    last: u32,
) -> Result<u32> {
    let mut c = CmdBuf::new(opcode::CREATE_FLOW_GROUP, 0, create_flow_group_in::BYTES);
    let dmac = dmac_field(
        fte_match_param::OUTER_HEADERS.within(create_flow_group_in::MATCH_CRITERIA),
        fte_match_set_lyr_2_4::DMAC_47_16,
    );
    c.set(create_flow_group_in::TABLE_TYPE, TABLE_TYPE)
        .set(create_flow_group_in::TABLE_ID, table)
        .set(create_flow_group_in::START_FLOW_INDEX, first)
        .set(create_flow_group_in::END_FLOW_INDEX, last)
        .set(
            create_flow_group_in::MATCH_CRITERIA_ENABLE,
            MATCH_OUTER_HEADERS,
        )
        .bytes(dmac, &[0xff; 6]);
    let mut out = [0u8; create_flow_group_out::BYTES];
    ctx.exec(&c, &mut out)?;
    Ok(get(&out, create_flow_group_out::GROUP_ID))
}

/// DESTROY_FLOW_GROUP (fs_cmd.c `mlx5_cmd_destroy_flow_group`).
pub(super) fn destroy<H: Hal>(ctx: &CtxInner<H>, table: u32, group: u32) -> Result<()> {
    let mut c = CmdBuf::new(opcode::DESTROY_FLOW_GROUP, 0, destroy_flow_group_in::BYTES);
    c.set(destroy_flow_group_in::TABLE_TYPE, TABLE_TYPE)
        .set(destroy_flow_group_in::TABLE_ID, table)
        .set(destroy_flow_group_in::GROUP_ID, group);
    let mut out = [0u8; destroy_flow_group_out::BYTES];
    ctx.exec(&c, &mut out)
}
