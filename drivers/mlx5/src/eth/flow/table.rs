//! The NIC receive flow table: CREATE_FLOW_TABLE, SET_FLOW_TABLE_ROOT, DESTROY_FLOW_TABLE
//! (Linux core/fs_cmd.c `mlx5_cmd_create_flow_table`, `mlx5_cmd_update_root_ft`,
//! `mlx5_cmd_destroy_flow_table`).

use mlx5_prm::{
    create_flow_table_in, create_flow_table_out, destroy_flow_table_in, destroy_flow_table_out,
    flow_table_context, opcode, set_flow_table_root_in, set_flow_table_root_out,
};

use crate::cmd::{get, CmdBuf};
use crate::context::CtxInner;
use crate::error::Result;
use crate::hal::Hal;

use super::TABLE_TYPE;

/// CREATE_FLOW_TABLE of the NIC receive table at `level` with `1 << log_size` entries, its
/// misses dropped (fs_cmd.c `mlx5_cmd_create_flow_table`: `table_type`,
/// `flow_table_context.level`, `.log_size`; no next table, so `table_miss_action` is the
/// table's default, 0). Returns the table id.
pub(super) fn create<H: Hal>(ctx: &CtxInner<H>, level: u32, log_size: u32) -> Result<u32> {
    let mut c = CmdBuf::new(opcode::CREATE_FLOW_TABLE, 0, create_flow_table_in::BYTES);
    let t = |f: mlx5_prm::Field| f.within(create_flow_table_in::FLOW_TABLE_CONTEXT);
    c.set(create_flow_table_in::TABLE_TYPE, TABLE_TYPE)
        .set(t(flow_table_context::LEVEL), level)
        .set(t(flow_table_context::LOG_SIZE), log_size);
    let mut out = [0u8; create_flow_table_out::BYTES];
    ctx.exec(&c, &mut out)?;
    Ok(get(&out, create_flow_table_out::TABLE_ID))
}

/// SET_FLOW_TABLE_ROOT: table `id` becomes the root of NIC receive steering, or with `id`
/// `None` the root goes back to the default (fs_cmd.c `mlx5_cmd_update_root_ft`: `op_mod`
/// 1 to disconnect, else `table_id`; no underlay QP on an Ethernet port).
pub(super) fn set_root<H: Hal>(ctx: &CtxInner<H>, id: Option<u32>) -> Result<()> {
    let op_mod = if id.is_some() { 0 } else { 1 };
    let mut c = CmdBuf::new(
        opcode::SET_FLOW_TABLE_ROOT,
        op_mod,
        set_flow_table_root_in::BYTES,
    );
    c.set(set_flow_table_root_in::TABLE_TYPE, TABLE_TYPE)
        .set(set_flow_table_root_in::TABLE_ID, id.unwrap_or(0));
    let mut out = [0u8; set_flow_table_root_out::BYTES];
    ctx.exec(&c, &mut out)
}

/// DESTROY_FLOW_TABLE (fs_cmd.c `mlx5_cmd_destroy_flow_table`).
pub(super) fn destroy<H: Hal>(ctx: &CtxInner<H>, id: u32) -> Result<()> {
    let mut c = CmdBuf::new(opcode::DESTROY_FLOW_TABLE, 0, destroy_flow_table_in::BYTES);
    c.set(destroy_flow_table_in::TABLE_TYPE, TABLE_TYPE)
        .set(destroy_flow_table_in::TABLE_ID, id);
    let mut out = [0u8; destroy_flow_table_out::BYTES];
    ctx.exec(&c, &mut out)
}
